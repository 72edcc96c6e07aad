"""The replay on Dask (``kernelstream replay --runner dask``): Beam's DaskRunner on a
dask.distributed cluster, a local one or an existing cluster's scheduler.

Beam's DaskRunner (``apache_beam.runners.dask``) turns a pipeline into Dask bags: it has no
user state, no timers and no ``Impulse``, drops what ``finish_bundle`` outputs and computes
only the graph's last transform. The replay pipeline of ``beam_replay`` (blocks, then ordering
state and timers in the learner) cannot run there, so this runner takes the replay's
stateless form::

    Create(task numbers 0..N-1) → LearnStreams (the last transform: it writes the outputs)

Each element is one task: shard I of N of the run's streams, as ``replay --workers`` splits
them (``engine.replay.sources.ReplayStreams.owns``): one stream key (configuration × permutation)
per task, or with ``--key-by`` a share of the entities' streams. Its task reads the data set (once
per worker process), learns its streams whole, block after block in stream order, through the loop
runner's core (``pipelines.replay.loop.run_loop``, the one test-then-train step the other runners
call), writes their Parquet files into the run's ``OUT/predictions``, ``metrics`` and
``dead_letters`` (one name per task; the source's dead letters from task 0 only) and returns its
counters. So the outputs are the loop runner's, row for row and bit for bit, whatever worker learnt
which stream.

The cluster is a ``distributed.LocalCluster`` of ``--workers`` processes (one thread each,
bound to 127.0.0.1, no dashboard), started and stopped by the run, or the one whose scheduler
``--dask-scheduler`` names: its workers must import kernelstream (installed, with its compiled
learners) and read ``DATA`` and write ``--out`` at the same paths (relative paths are made
absolute here, since the workers' working directory is not this one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from kernelstream import fs
from kernelstream.data.options import ReadOptions
from kernelstream.engine.replay.core import PROGRESS_LOGGER
from kernelstream.engine.replay.sources import forget_preloaded, preload_rows
from kernelstream.errors import ConfigError
from kernelstream.pipelines.replay.loop import run_loop
from kernelstream.pipelines.replay.plan import ReplayRun

if TYPE_CHECKING:
    from distributed import Client

_log = logging.getLogger(PROGRESS_LOGGER)
CONNECT_SECONDS = 10.0  # to reach a --dask-scheduler
WORKER_SECONDS = 60.0  # for the cluster to have a worker (a local one starts its own)
# with --key-by, tasks per worker thread: entities hash to tasks unevenly, so more tasks
# than threads even out the load
TASKS_PER_THREAD = 2
# imported by a local worker as it starts
WORKER_PRELOAD = "kernelstream.pipelines.replay.dask_worker"
# "1" in the local cluster's workers: WORKER_PRELOAD makes them ignore SIGINT
LOCAL_WORKER_ENV = "KERNELSTREAM_DASK_LOCAL_WORKER"


def task_count(run: ReplayRun, threads: int) -> int:
    """The run's tasks: one per stream key (configurations × permutations); with
    ``--key-by`` (entities known only once the data is read), :data:`TASKS_PER_THREAD` per
    worker thread of the cluster, and at least one per configuration × permutation."""
    pairs = len(run.learners.configs) * run.protocol.permutations
    if run.data.read.key_by is None:
        return pairs
    return max(pairs, TASKS_PER_THREAD * max(threads, 1))


class LearnStreams(beam.DoFn):
    """Task ``I`` of ``N``: the streams of shard I of N learnt whole by the loop runner's
    core, their outputs written; yields the task's counters."""

    def __init__(self, run: ReplayRun, tasks: int) -> None:
        # progress lines are the driver's: a worker has no one to show them to
        self.run = replace(run, execution=replace(run.execution, expected_examples=None))
        self.tasks = tasks

    def process(self, task: int) -> Iterator[dict[str, int]]:
        run = replace(self.run, execution=replace(self.run.execution, shard=int(task),
                                                   shards=self.tasks))
        hold_rows(run.data.read)
        yield run_loop(run)


_ROWS_LOCK = threading.Lock()
_HELD: list[ReadOptions] = []  # the read options whose rows this worker process holds


def hold_rows(read: ReadOptions) -> None:
    """Read the data set of ``read`` once per worker process
    (``engine.replay.sources.preload_rows``:
    the loop's ``load_rows`` then returns these rows), not once per task; the rows of another
    run's data set are dropped first, so a long-lived worker holds one data set at most."""
    with _ROWS_LOCK:
        if _HELD == [read]:
            return
        forget_preloaded()
        _HELD.clear()
        preload_rows(read)  # a file that fails to read fails in run_loop, with its own error
        _HELD.append(read)


def run_dask(run: ReplayRun) -> dict[str, int]:
    """Learn every stream of ``run`` on Dask (see the module docstring), write its outputs
    and return the counters the other runners report (examples, mistakes, dead letters,
    blocks)."""
    from apache_beam.runners.dask.dask_runner import DaskRunner

    if run.execution.dask_scheduler is not None:  # the workers' working directory is not ours
        run = replace(run, outputs=replace(run.outputs, out=_absolute(run.outputs.out)),
                      data=replace(run.data, read=replace(run.data.read,
                                                          path=_absolute(run.data.read.path))))
    with dask_cluster(run) as client:
        address = client.scheduler.address
        threads = sum(client.nthreads().values())
        tasks = task_count(run, threads)
        _log.info("%d tasks on Dask (%d worker threads at %s)", tasks, threads, address)
        t0 = time.perf_counter()
        # one partition per task: the runner would put up to 128 elements in one partition
        opts = PipelineOptions([*run.execution.pipeline_args, f"--dask_client_address={address}",
                                f"--dask_npartitions={tasks}"])
        p = beam.Pipeline(runner=DaskRunner(), options=opts)
        _ = (p | "Tasks" >> beam.Create(list(range(tasks)))
             | "Learn" >> beam.ParDo(LearnStreams(run, tasks)))
        result: Any = p.run()  # the DaskRunner's result: its client and futures
        try:
            result.wait_until_finish()
            # the last transform's outputs: each task's counters
            outputs: list[Any] = result.client.gather(list(result.futures))
        except BaseException as exc:
            with contextlib.suppress(Exception):
                result.cancel()
            missing = _missing_module(exc)
            if missing is not None:
                raise ConfigError(f"the Dask cluster at {address} cannot import {missing!r}: "
                                  "install this kernelstream (with its compiled learners) "
                                  "where its scheduler and workers run") from None
            raise
        finally:
            with contextlib.suppress(Exception):
                result.client.close()
        _log.info("%d tasks finished in %.1f s", tasks, time.perf_counter() - t0)
    counters: dict[str, int] = {}
    for part in outputs:
        for c in part:
            for k, v in c.items():
                counters[k] = counters.get(k, 0) + int(v)
    return counters


def _missing_module(exc: BaseException) -> str | None:
    """The module a cluster could not import, when that is what ``exc`` comes from: the
    scheduler unpickles the task graph (a ``RuntimeError`` caused by the import error), the
    workers the tasks (the import error itself)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ModuleNotFoundError):
            return seen.name or str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


def _absolute(path: str) -> str:
    return path if fs.is_remote(path) else os.path.abspath(path)


@contextlib.contextmanager
def dask_cluster(run: ReplayRun) -> Iterator[Client]:
    """A client of the run's cluster: the ``--dask-scheduler`` given (``ConnectionError``, one
    line, when it does not answer or has no worker), else a local cluster of
    ``run.execution.dask_workers`` processes started here and stopped on exit."""
    from distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        address = run.execution.dask_scheduler
        _quiet_dask_logs()
        if address is None:
            cluster = stack.enter_context(LocalCluster(
                n_workers=run.execution.dask_workers, threads_per_worker=1, processes=True,
                host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR,
                preload=[WORKER_PRELOAD], env={LOCAL_WORKER_ENV: "1"}))
            address = cluster.scheduler_address
        try:
            client = stack.enter_context(Client(address, timeout=CONNECT_SECONDS))
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"--dask-scheduler {address}: no Dask scheduler answers "
                                  f"({exc})") from None
        try:
            client.wait_for_workers(1, timeout=WORKER_SECONDS)
        except TimeoutError:
            raise ConnectionError(f"the Dask scheduler at {address} has no workers (waited "
                                  f"{WORKER_SECONDS:g} s): start some with `dask worker "
                                  f"{address}`") from None
        yield client


def _quiet_dask_logs() -> None:
    """The client side's logs (connections, closing workers) are the cluster's business: a
    run reports its failures itself."""
    for name in ("distributed", "apache_beam.runners.dask"):
        logging.getLogger(name).setLevel(logging.ERROR)
