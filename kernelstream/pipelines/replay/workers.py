"""``kernelstream replay --workers N``: a grid's streams split over N runner processes.

Why processes of their own (``benchmarks/grid.py``, results in ``benchmarks/results/grid.md``):
Beam's ``--direct_running_mode=multi_processing`` runs the SDK workers as subprocesses fed
through gRPC, and a two-configuration grid took twice as long on two of them as on one;
Beam's local job service (``--runner portable``) runs every job on one SDK harness, whatever
``--direct_num_workers`` says (its ``FnApiRunner.run_via_runner_api`` never reads the option),
so a pool of EXTERNAL workers gets one job's work on one of them. What scales is the grid's
own independence: every stream key is learnt alone, so N processes that each run the whole
pipeline on a share of the keys do the same work in parallel and write the same rows.

Each worker process runs the same ``kernelstream replay`` command with the hidden option
``--shard I/N``: the same Beam pipeline (or loop) over the whole data set, whose source emits
only the streams shard I owns (``engine.replay.sources.ReplayStreams.owns``; the source's dead
letters come from shard 0 only), writing into the same ``OUT/predictions``, ``metrics``,
``dead_letters`` (every sink names its files uniquely). On Linux the workers are forked from this
process once it has checked the data, cleared ``OUT``, imported what a run needs (Beam, pyarrow, the
learners) and read the data set (:func:`preload`): a worker pays no Python start, no imports and no
parse of the file, ~1 s of CPU each that a two-configuration grid would otherwise spend before
learning, and the workers share the parsed rows copy-on-write (:func:`start_method`). Elsewhere each
worker is a new Python that imports Beam while this process checks the data and waits until ``OUT``
is cleared (and reads the file itself). Either way the workers run on this process's word (``go`` on
their standard input). This process relays their progress lines and, once all have finished, reads
the outputs back as a one-process run does (``replay.read_outputs``), so ``summary.json`` holds the
same content (timings apart). A worker that fails stops the others and the run, with that worker's
own error line and exit code; Ctrl-C stops them all; a worker also ends when this process dies (its
standard input, a pipe from here, closes).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import signal
import site
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

import kernelstream
from kernelstream import fs
from kernelstream.data.stamp import stamp_env
from kernelstream.engine.replay.core import PROGRESS_LOGGER
from kernelstream.engine.replay.outputs import OUTPUTS
from kernelstream.engine.replay.sources import core_free, forget_preloaded, preload_rows
from kernelstream.errors import WorkerError
from kernelstream.pipelines.cli import main
from kernelstream.pipelines.config import PROG, is_topic
from kernelstream.pipelines.replay.replay import (
    clear_outputs,
    load_runner,
    read_outputs,
    resolve_data,
)
from kernelstream.pipelines.replay.replay_args import ReplayConfig

if TYPE_CHECKING:
    from kernelstream.data.options import ReadOptions
    from kernelstream.pipelines.replay.plan import ReplayResult

# the worker's entry point (:func:`worker_main`): ``-c`` rather than ``-m``, which would import
# the cli module twice (as __main__ and by name, as the demo command does)
_MAIN = "from kernelstream.pipelines.replay.workers import worker_main; worker_main()"
_GO = "go"  # the parent's word on a worker's stdin: the run may start
# how long stopped workers get to exit on SIGINT (they stop learning at once) before SIGKILL
_GRACE = 10.0
START_ENV = "KERNELSTREAM_WORKER_START"  # "spawn": a new Python per worker (see start_method)
_log = logging.getLogger(PROGRESS_LOGGER)


class _Forked:
    """The part of ``subprocess.Popen`` the pool uses, for a worker forked from this
    process (:func:`_fork_worker`): its pid, exit code (``-N``: killed by signal N), pipes."""

    def __init__(self, pid: int, args: list[str], stdin: TextIO, stderr: TextIO) -> None:
        self.pid = pid
        self.args = args
        self.stdin = stdin
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its code is lost
                self.returncode = 1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.01)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclass
class _Worker:
    index: int
    count: int
    proc: subprocess.Popen[str] | _Forked
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
    return None if config.read.key_by is not None else len(config.learners) * config.permutations


def effective_workers(config: ReplayConfig) -> int:
    """``--workers``, but no more processes than streams (an idle process costs a second)."""
    streams = stream_count(config)
    return config.workers if streams is None else max(1, min(config.workers, streams))


def worker_args(config: ReplayConfig, index: int, count: int) -> list[str]:
    """The command of worker ``index`` of ``count``: the run's own arguments, its output
    directory made explicit, and ``--shard``; Beam's options after ``--`` as given."""
    if not config.argv or config.argv[0] not in ("replay", "tune"):
        raise ValueError("--workers re-runs the replay (or tune) command line: "
                         "ReplayConfig.argv must start with 'replay' or 'tune'")
    args = [*config.argv, "--out", config.out, "--shard", f"{index}/{count}"]
    if config.pipeline_args:
        args += ["--", *config.pipeline_args]
    return args


def worker_argv(config: ReplayConfig, index: int, count: int) -> list[str]:
    """The command line of a spawned worker (:func:`worker_args` run by a new Python)."""
    return [sys.executable, "-c", _MAIN, *worker_args(config, index, count)]


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

    :meth:`spawn` starts spawned workers as soon as the command line is valid: they import
    Beam while this process checks the data, then wait. :meth:`go` clears the outputs,
    forks the workers that are forked, and lets them run (a pool whose data check fails
    never touches the outputs); :meth:`finish` waits for
    them and reads the outputs back; :meth:`close` (always, e.g. in a ``finally``) stops the
    workers of a run that did not finish (a failed check, Ctrl-C) and removes what they
    wrote."""

    def __init__(self, config: ReplayConfig) -> None:
        self.config = config
        self.workers: list[_Worker] = []
        self.t0 = time.perf_counter()
        self.started = False  # go() was sent: outputs may exist
        self.done = False
        self.count = 1  # worker processes (effective_workers)
        self.method = "spawn"  # start_method()

    @classmethod
    def spawn(cls, config: ReplayConfig) -> WorkerPool:
        """The pool of ``config``'s run: spawned workers start now (a new Python imports Beam
        while this process checks the data), forked ones in :meth:`go`, once the data is
        checked (a bad file fails before this process imports Beam)."""
        pool = cls(config)
        pool.count = effective_workers(config)
        pool.method = start_method()
        if pool.method == "spawn":
            pool._start()
        return pool

    def _start(self) -> None:
        config, n = self.config, self.count
        # a thread started since spawn() (none in the command) would make a fork unsafe
        fork = self.method == "fork" and threading.active_count() == 1
        # the input as the run starts: every worker checks it is so when it has read it
        opts = _file_read_options(config)
        stamp = stamp_env(opts.path) if opts is not None else {}
        try:
            if fork:
                preload(config)
                # objects of this process stay out of the workers' collections: a collection
                # would touch (and so copy) every page they share with this process
                gc.freeze()
            env = None if fork else {**worker_env(), **stamp}
            for i in range(n):
                # stdin: "go" once this process has checked the data and cleared the outputs;
                # then a pipe that closes when this process dies: no worker outlives it
                proc: subprocess.Popen[str] | _Forked = (
                    _fork_worker(worker_args(config, i, n), self.workers, stamp) if fork else
                    subprocess.Popen(worker_argv(config, i, n), stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=env, text=True, bufsize=1))
                self.workers.append(_Worker(i, n, proc, time.perf_counter()))
            lock = threading.Lock()
            for w in self.workers:
                w.relay = threading.Thread(target=_relay, args=(w, lock), daemon=True,
                                           name=f"relay-{w.index}")
                w.relay.start()
        except BaseException:
            self.close()
            raise
        finally:
            if fork:  # the workers have their copy-on-write share of the rows read here
                forget_preloaded()

    def go(self) -> None:
        """Clear the outputs, start the workers that are forked, and let them all run."""
        config = self.config
        streams = stream_count(config)
        n = self.count
        _log.info("%s over %d worker processes%s",
                  "per-entity streams" if streams is None else f"{streams} streams", n,
                  "" if n == config.workers else
                  f" (--workers {config.workers}: one per stream)")
        self.started = True
        clear_outputs(config.out)
        for name in OUTPUTS:  # before the workers, so that none of them races to create them
            fs.makedirs(fs.join(config.out, name))
        if not self.workers:
            self._start()
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
            with contextlib.suppress(Exception):
                clear_outputs(self.config.out)


def start_method() -> str:
    """How the workers start: ``"fork"``, copies of this process made once it has imported
    what a run needs (:func:`preload`), so a worker pays no Python start and no imports (on
    Linux, when this process runs one thread: a fork copies only the calling thread, and
    another thread's locks could be held forever in the copy); else ``"spawn"``, a new
    Python per worker. ``KERNELSTREAM_WORKER_START=spawn`` chooses spawn."""
    if os.environ.get(START_ENV, "").strip().lower() == "spawn":
        return "spawn"
    linux = sys.platform.startswith("linux") and hasattr(os, "fork")
    return "fork" if linux and threading.active_count() == 1 else "spawn"


def preload(config: ReplayConfig) -> None:
    """Import what a worker's run of ``config`` imports (Beam but for the loop runner; the
    engine, pyarrow and the learners came with this module) and read its data set
    (``engine.replay.sources.preload_rows``), before the workers are forked from this
    process: the workers share the parsed rows instead of each parsing the file. With a CPU
    free (``engine.replay.sources.core_free``) the file is read in a thread while Beam is
    imported (parsing is mostly numpy, which releases the GIL); the thread has ended on
    return."""
    opts = _file_read_options(config)
    reader = None
    if opts is not None and core_free():
        reader = threading.Thread(target=preload_rows, args=(opts,), name="preload")
        reader.start()
    elif opts is not None:
        preload_rows(opts)  # here and now: no thread to compete with the import
    try:
        load_runner(config.runner)  # Beam, but for the loop runner
    finally:
        if reader is not None:
            reader.join()


def _file_read_options(config: ReplayConfig) -> ReadOptions | None:
    """The read options of the file every worker of ``config`` loads whole (as ``replay.
    make_run`` resolves them), or None when the workers read nothing in common (a Kafka
    topic, adversarial streams generated in memory)."""
    if config.stream != "none" or is_topic(config.data):
        return None
    try:
        path, fmt = resolve_data(config.data, config.read.fmt)
    except (OSError, ValueError):
        return None
    return replace(config.read, path=path, fmt=fmt)


def _fork_worker(args: list[str], earlier: list[_Worker], env: dict[str, str]) -> _Forked:
    """Fork a worker that runs the command ``args`` (:func:`_forked_main`) with a pipe from
    this process as its standard input and one to this process as its standard error, and
    ``env`` added to its environment."""
    in_r, in_w = os.pipe()
    err_r, err_w = os.pipe()
    sys.stdout.flush()  # what is buffered here must not be written twice
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.environ.update(env)
        _forked_main(args, in_r, err_w, (in_w, err_r), earlier)
    os.close(in_r)
    os.close(err_w)
    return _Forked(pid, args, os.fdopen(in_w, "w", buffering=1),
                   os.fdopen(err_r, "r"))


def _forked_main(args: list[str], stdin_fd: int, stderr_fd: int, parent_fds: tuple[int, ...],
                 earlier: list[_Worker]) -> NoReturn:
    """A forked worker: the pipes of the other workers closed (a pipe open in a sibling would
    not close when this process's parent dies), its own ones as fds 0 and 2, the command,
    then an immediate exit (:func:`worker_main`)."""
    code = 1
    try:
        for w in earlier:
            for f in (w.proc.stdin, w.proc.stderr):
                if f is not None:
                    with contextlib.suppress(OSError):
                        f.close()
        for fd in parent_fds:
            os.close(fd)
        # above 2 first, so that none is overwritten or closed below (a parent started
        # with a standard stream closed gets one of the pipes as fd 0, 1 or 2)
        stdin_fd, stderr_fd = _above_2(stdin_fd), _above_2(stderr_fd)
        devnull = _above_2(os.open(os.devnull, os.O_WRONLY))
        os.dup2(stdin_fd, 0)
        os.dup2(devnull, 1)
        os.dup2(stderr_fd, 2)
        for fd in (stdin_fd, stderr_fd, devnull):
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # the new fds 0-2, not the copied parent objects
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        code = main(args)
    except BaseException:  # the parent shows the end of a failed worker's stderr
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _above_2(fd: int) -> int:
    if fd > 2:
        return fd
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 3)
    os.close(fd)
    return high


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
    assert rc is not None  # it has ended
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
