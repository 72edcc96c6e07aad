"""``kernelstream replay --runner dask``: Beam's DaskRunner on a local Dask cluster and on a
two-worker cluster over TCP writes the loop runner's outputs, row for row and bit for bit
(``kernelstream.pipelines.replay.dask_replay``)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from _helpers import strip_run_fields

from kernelstream.engine.replay.outputs import comparable_table
from kernelstream.pipelines.cli import main

pytest.importorskip("distributed")

REPO = Path(__file__).resolve().parents[3]
A9A = REPO / "tests" / "data" / "a9a_300.svm"
# 2 configurations x 2 permutations = 4 stream keys, several blocks each
GRID = ["-l", "a=bogd", "-l", "b=pa-i", "-p", "a.budget=20", "-R", "2", "-q"]
BLOCKS = ["--", "--block_size=64"]


def assert_same_outputs(loop: Path, dask: Path) -> None:
    """Predictions (every column: scores bit for bit), metrics but the run's columns, dead
    letters: equal row for row; summary.json equal but timings, runner and argv."""
    for name in ("predictions", "metrics", "dead_letters"):
        a, b = comparable_table(loop, name), comparable_table(dask, name)
        assert a.num_rows == b.num_rows, name
        assert a.schema == b.schema, name
        for col in a.column_names:  # column by column, so that a failure names it
            assert a.column(col).equals(b.column(col)), f"{name}.{col} differs from the loop"
    s0 = json.loads((loop / "summary.json").read_text())
    s1 = json.loads((dask / "summary.json").read_text())
    assert (s0["runner"], s1["runner"]) == ("loop", "dask")
    assert strip_run_fields(s0) == strip_run_fields(s1)


@pytest.fixture(scope="module")
def dirty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """a9a's first 300 examples with two bad lines (source dead letters)."""
    lines = A9A.read_text().splitlines()
    lines[40:40] = ["+1 3:abc"]
    lines[200:200] = ["+1 5:1 x"]
    path = tmp_path_factory.mktemp("data") / "a9a_dirty.svm"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def loop_run(dirty: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("loop") / "out"
    assert main(["replay", str(dirty), *GRID, "--runner", "loop", "--out", str(out),
                 *BLOCKS]) == 0
    return out


def test_local_cluster_equals_the_loop(dirty: Path, loop_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "dask"
    assert main(["replay", str(dirty), *GRID, "--runner", "dask", "--out", str(out),
                 *BLOCKS]) == 0
    assert_same_outputs(loop_run, out)
    # one task per stream key wrote its own files; the source's dead letters once (task 0)
    assert len(list((out / "predictions").glob("part-*.parquet"))) == 4
    dead = comparable_table(out, "dead_letters")
    assert sorted(dead.column("line").to_pylist()) == [41, 201]
    assert json.loads((out / "summary.json").read_text())["dead_letters"] == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    """The worktree's kernelstream first on the cluster processes' path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


@contextlib.contextmanager
def dask_processes(scratch: Path, workers: int, env: dict[str, str],
                   preload: bool = True) -> Iterator[str]:
    """A Dask scheduler and ``workers`` single-thread worker processes (``dask scheduler``/
    ``dask worker``, as on machines of their own), on 127.0.0.1 over TCP; yields the
    address."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    local = ["--dashboard-address", "127.0.0.1:0", "--no-dashboard"]
    procs = [subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host",
                               "127.0.0.1", "--port", str(port), *local], cwd=scratch,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(workers):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "dask", "worker", address, "--host", "127.0.0.1",
                 "--nthreads", "1", "--local-directory", str(scratch), *local,
                 *(["--preload", "kernelstream.pipelines.replay.dask_worker"] if preload else [])],
                cwd=scratch, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        for p in reversed(procs):  # workers first, then the scheduler
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def tcp_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A scheduler and two workers over TCP, with the preload."""
    with dask_processes(tmp_path_factory.mktemp("dask-scratch"), 2, _env()) as address:
        yield address


def test_two_workers_over_tcp_equal_the_loop(dirty: Path, loop_run: Path, tmp_path: Path,
                                             tcp_cluster: str, capsys) -> None:
    out = tmp_path / "dask"
    assert main(["replay", str(dirty), *GRID[:-1], "--runner", "dask", "--dask-scheduler",
                 tcp_cluster, "--out", str(out), *BLOCKS]) == 0
    err = capsys.readouterr().err
    assert f"4 tasks on Dask (2 worker threads at {tcp_cluster})" in err
    assert "4 tasks finished" in err
    assert_same_outputs(loop_run, out)


def test_entities_over_tcp_equal_the_loop(tmp_path: Path, tcp_cluster: str) -> None:
    """--key-by: the entities' streams hashed over the tasks (two per worker thread), each
    learnt whole by one of them."""
    rng = np.random.default_rng(1)
    n = 240
    X = rng.normal(size=(n, 3))
    path = tmp_path / "entities.csv"
    with open(path, "w") as f:
        f.write("a,region,b,c,label\n")
        for i in range(n):
            a, b, c = (float(v) for v in X[i])
            f.write(f"{a!r},r{rng.integers(9)},{b!r},{c!r},{int(a + b > 0)}\n")
    args = ["replay", str(path), "--label-column", "label", "--key-by", "region", "-l", "ogd",
            "-R", "2", "-q"]
    assert main([*args, "--runner", "loop", "--out", str(tmp_path / "loop")]) == 0
    assert main([*args, "--runner", "dask", "--dask-scheduler", tcp_cluster,
                 "--out", str(tmp_path / "dask")]) == 0
    assert_same_outputs(tmp_path / "loop", tmp_path / "dask")
    # 4 tasks (2 per worker thread), and the 18 entity streams (9 x 2) spread over them
    files = list((tmp_path / "dask" / "predictions").glob("part-*.parquet"))
    assert len(files) == 4
    assert sum(pq.ParquetFile(f).metadata.num_rows > 0 for f in files) >= 2


def test_a_failing_task_ends_the_run_with_its_error(dirty: Path, tmp_path: Path,
                                                    tcp_cluster: str, capsys) -> None:
    """An error raised in a task (here the engine's, on an option only the learning step
    reads) reaches this process and ends the run with the loop runner's line and exit code."""
    base = ["replay", str(dirty), "-l", "ogd", "-q"]
    code0 = main([*base, "--runner", "loop", "--out", str(tmp_path / "loop"), "--",
                  "--metrics_window=-1"])
    err0 = capsys.readouterr().err
    code1 = main([*base, "--runner", "dask", "--dask-scheduler", tcp_cluster,
                  "--out", str(tmp_path / "dask"), "--", "--metrics_window=-1"])
    err1 = capsys.readouterr().err
    assert code0 == code1 != 0
    assert err0 == err1 and len(err1.strip().splitlines()) == 1, err1


def test_a_cluster_without_kernelstream_is_one_line(tmp_path: Path, capsys) -> None:
    """A cluster whose Pythons import another kernelstream (here an empty package first on
    their path) cannot unpickle the tasks: one line saying what to install, exit 2."""
    other = tmp_path / "other"
    (other / "kernelstream").mkdir(parents=True)
    # Another kernelstream, without this one's modules. An editable install of this checkout
    # (setuptools' finder on sys.meta_path) would fill in the missing submodules by name, as
    # no machine without kernelstream would: the stand-in drops that finder.
    (other / "kernelstream" / "__init__.py").write_text(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path\n"
        "                    if '__editable__' not in getattr(f, '__module__', '')]\n")
    env = {**os.environ, "PYTHONPATH": str(other)}
    with dask_processes(tmp_path, 1, env, preload=False) as address:
        code = main(["replay", "german", "--limit", "50", "--runner", "dask", "-q",
                     "--dask-scheduler", address, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"the Dask cluster at {address} cannot import 'kernelstream.pipelines" in err
    assert len(err.strip().splitlines()) == 1, err


def test_ctrl_c_stops_the_run_and_its_local_cluster(tmp_path: Path) -> None:
    """Ctrl-C at the terminal (SIGINT to the command's process group, the local cluster's
    workers included) while the tasks run: exit 130 with the one line every runner prints,
    no worker's traceback, and no process of the group left."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(4000, 10))
    path = tmp_path / "big.svm"
    path.write_text("".join(f"{1 if x[0] + x[1] > 0 else -1} " + " ".join(
        f"{j + 1}:{v!r}" for j, v in enumerate(x.tolist())) + "\n" for x in X))
    cmd = [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path), "-l",
           "bpa-s", "-p", "budget=300", "-R", "40", "--runner", "dask", "--out",
           str(tmp_path / "o")]
    proc = subprocess.Popen(cmd, env=_env(), stderr=subprocess.PIPE, text=True,
                            start_new_session=True,  # a group of its own, as a terminal's job
                            # SIGINT as a terminal leaves it (a background shell ignores it)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the tasks are on their way
        assert "40 tasks on Dask" in first, first
        os.killpg(proc.pid, signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert rest.strip() == "kernelstream: interrupted", rest
    deadline = time.monotonic() + 30
    while _group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _group(proc.pid)


def _group(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (Linux /proc; zombies are gone)."""
    pids = []
    for d in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[2]) == pgid and stat[0] != "Z":
                pids.append(int(d.name))
    return pids


def test_an_unreachable_scheduler_is_one_line(tmp_path: Path, capsys) -> None:
    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    t0 = time.monotonic()
    code = main(["replay", "german", "--limit", "50", "--runner", "dask", "--dask-scheduler",
                 address, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--dask-scheduler {address}: no Dask scheduler answers" in err
    assert len(err.strip().splitlines()) == 1, err
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("args,message", [
    (["--dask-scheduler", "tcp://127.0.0.1:1"], "--dask-scheduler names the cluster of "
                                                 "--runner dask"),
    (["--runner", "dask", "--dask-scheduler", "tcp://127.0.0.1:1", "--workers", "2"],
     "drop --workers"),
    (["--runner", "dask", "--dask-scheduler", "127.0.0.1:1"], "expected a scheduler address"),
    (["--runner", "dask", "--kafka-out", "kafka://localhost:9/p"], "--runner dask replays a "
                                                                  "data file"),
    (["--runner", "dask", "--stream", "german-1"], "only supported by the loop runner"),
])
def test_what_dask_cannot_run_is_refused(tmp_path: Path, capsys, args: list[str],
                                         message: str) -> None:
    code = main(["replay", "german", *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_topic_is_refused(tmp_path: Path, capsys) -> None:
    code = main(["replay", "kafka://localhost:9/t", "--n-features", "3", "--runner", "dask",
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "a Kafka topic (or --kafka-out) needs a streaming runner" in err


def test_without_dask_the_error_says_how_to_install(tmp_path: Path, capsys,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "distributed" else find_spec(name, *a))
    code = main(["replay", "german", "--runner", "dask", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert "pip install 'kernelstream[dask]'" in err and len(err.strip().splitlines()) == 1
