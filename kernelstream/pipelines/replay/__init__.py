"""The replay run: its plan and runners (:mod:`.replay`, :mod:`.loop`), its arguments
(:mod:`.replay_args`), the Beam pipeline (:mod:`.beam_replay`), Dask (:mod:`.dask_replay`,
:mod:`.dask_worker`) and ``--workers N`` processes (:mod:`.workers`)."""
