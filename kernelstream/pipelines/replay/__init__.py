"""The replay run: its plan (:mod:`.plan`), the module that picks and runs its runner
(:mod:`.replay`), the loop runner (:mod:`.loop`), its arguments (:mod:`.replay_args`), the
Beam pipeline (:mod:`.beam_replay`), Dask (:mod:`.dask_replay`, :mod:`.dask_worker`) and
``--workers N`` processes (:mod:`.workers`)."""
