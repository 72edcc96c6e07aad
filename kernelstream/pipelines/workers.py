"""``kernelstream replay --workers N``: a grid's streams split over N runner processes.

Why processes of their own (``benchmarks/grid.py``, results in ``benchmarks/results/grid.md``):
Beam's ``--direct_running_mode=multi_processing`` runs the SDK workers as subprocesses fed
through gRPC, and a two-configuration grid took twice as long on two of them as on one;
Beam's local job service (``--runner portable``) runs every job on one SDK harness, whatever
``--direct_num_workers`` says (its ``FnApiRunner.run_via_runner_api`` never reads the option),
so a pool of EXTERNAL workers gets one job's work on one of them. What scales is the grid's
own independence: every stream key is learnt alone, so N processes that each run the whole
pipeline on a share of the keys do the same work in parallel and write the same rows.

Each worker process is the same ``kernelstream replay`` command with the hidden option
``--shard I/N``: the same Beam pipeline (or loop) over the whole data set, whose source emits
only the streams shard I owns (``engine.replay.StreamSpec.owns``; the source's dead letters
come from shard 0 only), writing into the same ``OUT/predictions``, ``metrics``,
``dead_letters`` (every sink names its files uniquely). The workers start as soon as the
command line is valid and import Beam while this process checks the data; then this process
clears ``OUT`` and lets them run (``go`` on their standard input), relays their progress
lines, and once all have finished reads the outputs back as a one-process run does
(``replay.read_outputs``), so ``summary.json`` holds the same content (timings apart). A
worker that fails stops the others and the run, with that worker's own error line and exit
code; Ctrl-C stops them all; a worker also ends when this process dies (its standard input,
a pipe from here, closes). This process imports no Beam (but for a remote ``OUT``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import site
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import kernelstream
from kernelstream import fs
from kernelstream.engine.core import PROGRESS_LOGGER
from kernelstream.pipelines.config import PROG, ReplayConfig, WorkerError

if TYPE_CHECKING:
    from kernelstream.pipelines.replay import ReplayResult

# the worker's entry point (:func:`worker_main`): ``-c`` rather than ``-m``, which would import
# the cli module twice (as __main__ and by name, through the stream/demo parsers)
_MAIN = "from kernelstream.pipelines.workers import worker_main; worker_main()"
_GO = "go"  # the parent's word on a worker's stdin: the run may start
# how long stopped workers get to exit on SIGINT (they stop learning at once) before SIGKILL
_GRACE = 10.0
_log = logging.getLogger(PROGRESS_LOGGER)


@dataclass
class _Worker:
    index: int
    count: int
    proc: subprocess.Popen[str]
    started: float
    held: list[str] = field(default_factory=list)  # stderr lines other than progress
    relay: threading.Thread | None = None
    seconds: float | None = None

    @property
    def name(self) -> str:
        return f"worker {self.index + 1}/{self.count}"


def stream_count(config: ReplayConfig) -> int | None:
    """The run's stream keys (configurations × permutations), or None with ``--key-by`` (the
    entities are known only once the data is read)."""
    return None if config.key_by is not None else len(config.learners) * config.permutations


def effective_workers(config: ReplayConfig) -> int:
    """``--workers``, but no more processes than streams (an idle process costs a second)."""
    streams = stream_count(config)
    return config.workers if streams is None else max(1, min(config.workers, streams))


def worker_argv(config: ReplayConfig, index: int, count: int) -> list[str]:
    """The command line of worker ``index`` of ``count``: the run's own arguments, its output
    directory made explicit, and ``--shard``; Beam's options after ``--`` as given."""
    if not config.argv or config.argv[0] not in ("replay", "tune"):
        raise ValueError("--workers re-runs the replay (or tune) command line: "
                         "ReplayConfig.argv must start with 'replay' or 'tune'")
    argv = [sys.executable, "-c", _MAIN, *config.argv, "--out", config.out,
            "--shard", f"{index}/{count}"]
    if config.pipeline_args:
        argv += ["--", *config.pipeline_args]
    return argv


def worker_env() -> dict[str, str]:
    """The workers' environment: this one (BLAS threads, ``KERNELSTREAM_*``), with this
    kernelstream first on ``PYTHONPATH`` unless it is installed (a checkout run from
    anywhere still runs its own code in the workers)."""
    env = dict(os.environ)
    root = str(Path(kernelstream.__file__).resolve().parents[1])
    installed = {str(Path(p).resolve()) for p in [*site.getsitepackages(),
                                                   site.getusersitepackages()]}
    if root not in installed:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class WorkerPool:
    """The worker processes of one ``--workers`` run (see the module docstring).

    :meth:`spawn` starts them as soon as the command line is valid: they import Beam while
    this process checks the data, then wait. :meth:`go` clears the outputs and lets them
    run (a pool whose data check fails never touches the outputs); :meth:`finish` waits for
    them and reads the outputs back; :meth:`close` (always, e.g. in a ``finally``) stops the
    workers of a run that did not finish (a failed check, Ctrl-C) and removes what they
    wrote."""

    def __init__(self, config: ReplayConfig) -> None:
        self.config = config
        self.workers: list[_Worker] = []
        self.t0 = time.perf_counter()
        self.started = False  # go() was sent: outputs may exist
        self.done = False

    @classmethod
    def spawn(cls, config: ReplayConfig) -> WorkerPool:
        pool = cls(config)
        n = effective_workers(config)
        try:
            env = worker_env()
            for i in range(n):
                # stdin: "go" once this process has checked the data and cleared the outputs;
                # then a pipe that closes when this process dies: no worker outlives it
                proc = subprocess.Popen(worker_argv(config, i, n), stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        env=env, text=True, bufsize=1)
                pool.workers.append(_Worker(i, n, proc, time.perf_counter()))
            lock = threading.Lock()
            for w in pool.workers:
                w.relay = threading.Thread(target=_relay, args=(w, lock), daemon=True,
                                           name=f"relay-{w.index}")
                w.relay.start()
        except BaseException:
            pool.close()
            raise
        return pool

    def go(self) -> None:
        """Clear the outputs and let the workers run."""
        config = self.config
        streams = stream_count(config)
        n = len(self.workers)
        _log.info("%s over %d worker processes%s",
                  "per-entity streams" if streams is None else f"{streams} streams", n,
                  "" if n == config.workers else
                  f" (--workers {config.workers}: one per stream)")
        self.started = True
        # the replay machinery (pyarrow): imported once the workers are on their way
        from kernelstream.engine.outputs import OUTPUTS
        from kernelstream.pipelines.replay import clear_outputs

        clear_outputs(config.out)
        for name in OUTPUTS:  # before the workers, so that none of them races to create them
            fs.makedirs(fs.join(config.out, name))
        for w in self.workers:
            assert w.proc.stdin is not None
            with contextlib.suppress(OSError):  # a worker that died: finish() reports it
                w.proc.stdin.write(f"{_GO}\n")
                w.proc.stdin.flush()

    def finish(self) -> ReplayResult:
        """Wait for every worker and return the result read back from the merged outputs.
        Raises :class:`WorkerError` when a worker fails (the others are stopped) and
        ``KeyboardInterrupt`` on Ctrl-C; either way :meth:`close` removes the outputs."""
        if not self.started:
            self.go()
        failed = _wait(self.workers)
        if failed is not None:
            _stop(self.workers, signal.SIGTERM)
            raise _failure(failed)
        for w in self.workers:
            _close(w)
        for line in dict.fromkeys(line for w in self.workers for line in w.held):
            sys.stderr.write(line)  # warnings the workers wrote, each once
        self.done = True
        from kernelstream.pipelines.replay import read_outputs

        return read_outputs(self.config.out, {}, self.config.runner,
                            time.perf_counter() - self.t0)

    def close(self) -> None:
        """Stop the workers still running and, unless the run finished, remove the outputs
        they wrote (finished shards' files, stopped ones' temporary files)."""
        if self.done:
            return
        self.done = True
        _stop(self.workers, signal.SIGINT)
        for w in self.workers:
            _close(w)
        if self.started:
            from kernelstream.pipelines.replay import clear_outputs

            with contextlib.suppress(Exception):
                clear_outputs(self.config.out)


def run_workers(config: ReplayConfig) -> ReplayResult:
    """Run ``config`` on :func:`effective_workers` processes and return the result read back
    from the merged outputs (:class:`WorkerPool` from start to finish)."""
    pool = WorkerPool.spawn(config)
    try:
        return pool.finish()
    finally:
        pool.close()


def await_go() -> bool:
    """In a worker: wait for the parent's go (its data check passed, the outputs are
    cleared); False if the parent closed the pipe instead. From then on, the worker ends
    when the pipe closes (:func:`watch_parent`)."""
    if sys.stdin.readline().strip() != _GO:
        return False
    watch_parent()
    return True


def worker_main() -> None:
    """A worker process's entry point: the command line, then an immediate exit. The outputs
    are closed by then; skipping the interpreter's teardown of Beam's modules and threads
    (~0.17 s) shortens every ``--workers`` run by as much."""
    from kernelstream.pipelines.cli import main  # the command this process runs

    code = main()
    logging.shutdown()  # flush the handlers (progress and error lines)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _relay(w: _Worker, lock: threading.Lock) -> None:
    """Pass a worker's progress lines on as they come; keep its other lines (an error line
    is printed once, by the parent, after the workers have stopped)."""
    assert w.proc.stderr is not None
    for line in w.proc.stderr:
        if line.startswith("[progress]"):
            with lock:
                sys.stderr.write(line)
                sys.stderr.flush()
        else:
            w.held.append(line)


def _wait(workers: list[_Worker]) -> _Worker | None:
    """Wait for every worker; return the first that fails (None when all succeed)."""
    pending = list(workers)
    while pending:
        for w in list(pending):
            rc = w.proc.poll()
            if rc is None:
                continue
            pending.remove(w)
            w.seconds = time.perf_counter() - w.started
            if rc in (130, -signal.SIGINT):  # Ctrl-C reached the worker before this process
                raise KeyboardInterrupt
            if rc != 0:
                return w
            _log.info("%s finished in %.1f s", w.name, w.seconds)
        if pending:
            time.sleep(0.02)
    return None


def _stop(workers: list[_Worker], sig: int) -> None:
    """Stop the workers still running: ``sig``, then SIGKILL after :data:`_GRACE` seconds."""
    alive = [w for w in workers if w.proc.poll() is None]
    for w in alive:
        with contextlib.suppress(ProcessLookupError):
            w.proc.send_signal(sig)
    deadline = time.monotonic() + _GRACE
    for w in alive:
        try:
            w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()


def _close(w: _Worker) -> None:
    with contextlib.suppress(OSError):
        if w.proc.stdin is not None:
            w.proc.stdin.close()
    if w.proc.poll() is None:  # only after _stop failed to end it
        w.proc.kill()
        w.proc.wait()
    if w.relay is not None:
        w.relay.join(timeout=5)
    with contextlib.suppress(OSError):
        if w.proc.stderr is not None:
            w.proc.stderr.close()


def _failure(w: _Worker) -> WorkerError:
    """The error a failed worker ends the run with: its own error line and exit code when it
    wrote one (``kernelstream replay: error: ...``), else a line naming what happened and
    the end of what it wrote (e.g. a traceback)."""
    assert w.relay is not None
    w.relay.join(timeout=5)  # the rest of its stderr
    rc = w.proc.returncode
    own = [ln.rstrip("\n") for ln in w.held if ln.startswith(f"{PROG} replay: error:")]
    if own and rc > 0:
        return WorkerError(rc, own)
    what = (f"was killed by signal {-rc}" if rc < 0 else f"exited with code {rc}")
    tail = [ln.rstrip("\n") for ln in w.held[-20:]]
    return WorkerError(1, [f"{PROG} replay: error: {w.name} {what}; the other workers "
                            "were stopped", *tail])


def watch_parent() -> None:
    """In a worker: end this process (SIGTERM) when the parent's pipe on standard input
    closes, i.e. when the parent has died or stopped the run, so no worker learns on
    alone."""

    def watch() -> None:
        with contextlib.suppress(Exception):
            sys.stdin.read()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()
