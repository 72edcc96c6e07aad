"""Preloaded by the workers of ``--runner dask``'s local cluster (``dask worker --preload
kernelstream.pipelines.replay.dask_worker`` does the same on a cluster of one's own): Beam's import
warning about BigQuery's absent client dropped, as the CLI does, and the replay's modules
(Beam, the engine, the learners) imported as the worker starts rather than by its first
task. A worker of the local cluster also ignores SIGINT: a Ctrl-C at the terminal reaches
every process of the command's group, and the command stops its cluster itself (a worker
left to the signal would print its traceback)."""

from __future__ import annotations

import contextlib
import os
import signal

from kernelstream.pipelines.beam_noise import quiet_beam_import

quiet_beam_import()  # before Beam is imported

# after the filter: this imports Beam and the replay
from kernelstream.pipelines.replay.dask_replay import LOCAL_WORKER_ENV  # noqa: E402

if os.environ.get(LOCAL_WORKER_ENV) == "1":
    with contextlib.suppress(ValueError):  # not the main thread: the signal stays as it is
        signal.signal(signal.SIGINT, signal.SIG_IGN)
