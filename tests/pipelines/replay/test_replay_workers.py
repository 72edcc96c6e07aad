"""``kernelstream replay --workers N``: a grid's streams split over N runner processes
(``kernelstream.pipelines.replay.workers``) write the outputs and summary of one process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from _helpers import strip_run_fields

from kernelstream.engine.replay.outputs import comparable_table
from kernelstream.engine.replay.sources import Dataset, ReplayStreams, stream_blocks
from kernelstream.pipelines.cli import main
from kernelstream.pipelines.replay.workers import START_ENV

REPO = Path(__file__).resolve().parents[3]
# summary fields that describe the run, not the streams
RUN_FIELDS = {"seconds", "seconds_std", "examples_per_second", "argv"}


def _default_sigint() -> None:
    """SIGINT as a terminal leaves it, in a child about to run the CLI."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def assert_same_run(one: Path, many: Path) -> None:
    """Outputs equal row for row (metrics but the run's columns); summary.json equal but
    timings and argv."""
    for name in ("predictions", "metrics", "dead_letters"):
        a, b = comparable_table(one, name), comparable_table(many, name)
        assert a.num_rows == b.num_rows, name
        assert a.equals(b), f"{name} differ between 1 and N workers"
    s1 = json.loads((one / "summary.json").read_text())
    sn = json.loads((many / "summary.json").read_text())
    assert strip_run_fields(s1, RUN_FIELDS) == strip_run_fields(sn, RUN_FIELDS)
    assert "--workers" in sn["argv"] and "--workers" not in s1["argv"]


def _parquet(out: Path) -> list[Path]:
    return sorted(out.rglob("*.parquet")) + sorted(out.rglob(".*.parquet.tmp"))


@pytest.fixture(scope="module")
def dirty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LIBSVM file of 300 examples with three bad lines (source dead letters)."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 5))
    y = np.where(X[:, 0] * X[:, 1] + X[:, 2] > 0, 1, -1)
    lines = [f"{yi:+d} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(x.tolist()))
             for x, yi in zip(X, y, strict=True)]
    lines[10:10] = ["+1 1:abc"]
    lines[150:150] = ["+1 1:0.5 x"]
    lines[200:200] = ["7 1:0.5"]
    path = tmp_path_factory.mktemp("data") / "dirty.libsvm"
    path.write_text("\n".join(lines) + "\n")
    return path


# -- the shards of a run ---------------------------------------------------------------------


@pytest.mark.parametrize("entities", [False, True])
@pytest.mark.parametrize("shards", [2, 3, 5])
def test_shards_partition_the_streams(entities: bool, shards: int) -> None:
    rng = np.random.default_rng(0)
    n = 50
    data = Dataset(rng.normal(size=(n, 3)), np.where(rng.random(n) > 0.5, 1.0, -1.0),
                   entities=(np.array([f"e{i % 7}" for i in range(n)], dtype=object)
                             if entities else None))
    spec = ReplayStreams(("a", "b", "c"), seed=1, permutations=2, block_size=8)
    whole = {(b.key, b.start): b for b in stream_blocks(data, spec)}
    seen: dict[tuple[str, int], Any] = {}
    for i in range(shards):
        part = ReplayStreams(spec.configs, seed=1, permutations=2, block_size=8, shard=i,
                          shards=shards)
        blocks = list(stream_blocks(data, part))
        assert blocks, f"shard {i} of {shards} got no stream"
        for b in blocks:
            assert (b.key, b.start) not in seen, "a block in two shards"
            seen[(b.key, b.start)] = b
    assert seen.keys() == whole.keys()
    for k, b in whole.items():
        assert np.array_equal(seen[k].ids, b.ids) and np.array_equal(seen[k].X, b.X)
    # a key's blocks all go to one shard, and a 2 x 1 grid puts one configuration on each
    by_key: dict[str, set[int]] = {}
    for i in range(shards):
        for b in stream_blocks(data, ReplayStreams(spec.configs, seed=1, permutations=2,
                                                block_size=8, shard=i, shards=shards)):
            by_key.setdefault(b.key, set()).add(i)
    assert all(len(v) == 1 for v in by_key.values())
    two = [ReplayStreams(("a", "b"), shard=i, shards=2) for i in range(2)]
    assert [s.owns(c, 0) for s in two for c in range(2)] == [True, False, False, True]


def test_a_shard_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="shard"):
        ReplayStreams(("a",), shard=2, shards=2)


# -- the command line ------------------------------------------------------------------------


def test_grid_on_two_workers_equals_one_worker(dirty: Path, tmp_path: Path, capsys) -> None:
    args = ["replay", str(dirty), "-l", "a=bogd", "-l", "b=pa-i", "-p", "a.budget=20",
            "-R", "2", "--", "--block_size=64"]
    cut = args.index("--")
    assert main([*args[:cut], "--out", str(tmp_path / "one"), "-q", *args[cut:]]) == 0
    capsys.readouterr()
    assert main([*args[:cut], "--workers", "2", "--out", str(tmp_path / "two"),
                 *args[cut:]]) == 0
    err = capsys.readouterr().err
    assert_same_run(tmp_path / "one", tmp_path / "two")
    # the source's dead letters once (the first shard's), not once per worker
    dead = comparable_table(tmp_path / "two", "dead_letters")
    assert sorted(dead.column("line").to_pylist()) == [11, 151, 201]
    assert "[progress] 4 streams over 2 worker processes" in err
    assert "worker 1/2 finished" in err and "worker 2/2 finished" in err
    # both workers wrote predictions (four streams, two each)
    assert len(list((tmp_path / "two" / "predictions").glob("part-*.parquet"))) >= 2


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_forked_and_spawned_workers_write_one_workers_outputs(dirty: Path, tmp_path: Path,
                                                              start: str) -> None:
    """A command of its own (one thread: ``workers.start_method`` forks its workers from
    the parent once it has imported Beam, unless told to spawn new Pythons)."""
    args = [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(dirty),
            "-l", "a=bogd", "-l", "b=pa-i", "-p", "a.budget=20", "-R", "2"]
    env = {k: v for k, v in os.environ.items() if k != START_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                        if p)
    one = subprocess.run([*args, "-q", "--out", str(tmp_path / "one")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    env[START_ENV] = start
    two = subprocess.run([*args, "--workers", "2", "--out", str(tmp_path / "two")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr
    assert "worker 1/2 finished" in two.stderr and "worker 2/2 finished" in two.stderr
    assert [ln for ln in two.stderr.splitlines() if not ln.startswith("[progress]")] == []
    assert_same_run(tmp_path / "one", tmp_path / "two")


def test_entities_spread_over_workers(tmp_path: Path) -> None:
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
            "-R", "2", "--runner", "loop", "-q"]
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    assert main([*args, "--workers", "3", "--out", str(tmp_path / "three")]) == 0
    assert_same_run(tmp_path / "one", tmp_path / "three")
    # the loop names each shard's files; every shard learnt some of the 18 entity streams
    pred = tmp_path / "three" / "predictions"
    assert {p.name for p in pred.glob("*.parquet")} == {
        "part-loop-0.parquet", "part-loop-1.parquet", "part-loop-2.parquet"}
    assert all(pq.ParquetFile(p).metadata.num_rows > 0 for p in pred.glob("*.parquet"))


def test_more_workers_than_streams_uses_one_per_stream(tmp_path: Path, capsys) -> None:
    assert main(["replay", "german", "-l", "a=bogd", "-l", "b=pa-i", "--limit", "200",
                 "--runner", "loop", "--workers", "5", "--out", str(tmp_path / "w")]) == 0
    err = capsys.readouterr().err
    assert "2 streams over 2 worker processes (--workers 5: one per stream)" in err
    assert main(["replay", "german", "-l", "bogd", "--limit", "200", "--runner", "loop",
                 "--workers", "2", "-q", "--out", str(tmp_path / "one")]) == 0
    assert "worker" not in capsys.readouterr().err  # one stream: an ordinary run


@pytest.mark.parametrize("args,message", [
    (["kafka://localhost:9/t", "--n-features", "3"], "a Kafka topic is read once"),
    (["german", "--stream", "german-1"], "--stream german-1 runs in memory"),
    (["german", "--runner", "portable"], "--runner portable spreads the work"),
    (["german", "--runner", "beam", "--", "--runner=FlinkRunner"], "--runner beam spreads"),
    (["german", "--kafka-out", "kafka://localhost:9/p"], "--kafka-out is not available"),
])
def test_workers_refuse_what_they_cannot_run(tmp_path: Path, capsys, args: list[str],
                                             message: str) -> None:
    cut = args.index("--") if "--" in args else len(args)
    code = main(["replay", *args[:cut], "-l", "a=bogd", "-l", "b=pa-i", "--workers", "2",
                 "--out", str(tmp_path / "o"), *args[cut:]])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_workers_value_is_checked(tmp_path: Path, capsys, value: str) -> None:
    assert main(["replay", "--workers", value, "--out", str(tmp_path)]) == 2
    assert "--workers" in capsys.readouterr().err


def test_failing_workers_end_with_one_line_and_no_outputs(
        dirty: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that fails (here every worker, on an option only a pipeline reads, its check
    before the run taken away) ends the run with its own line and exit code, once, as one
    process would; no output is left. The workers are spawned (a forked one would inherit
    the patch only when this process runs one thread) and patched by a sitecustomize."""
    from kernelstream.pipelines.replay import replay_args

    monkeypatch.setattr(replay_args, "check_replay_options", lambda args: None)
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "sitecustomize.py").write_text(
        "from kernelstream.pipelines.replay import replay_args\n"
        "replay_args.check_replay_options = lambda args: None\n")
    monkeypatch.setenv(START_ENV, "spawn")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(site_dir), os.environ.get("PYTHONPATH")) if p))
    base = ["replay", str(dirty), "-l", "a=bogd", "-l", "b=pa-i", "-q"]
    code1 = main([*base, "--out", str(tmp_path / "one"), "--", "--block_size=-1"])
    err1 = capsys.readouterr().err
    out = tmp_path / "two"
    code2 = main([*base, "--workers", "2", "--out", str(out), "--", "--block_size=-1"])
    err2 = capsys.readouterr().err
    assert code1 == code2 == 1
    assert err1 == err2 and len(err2.strip().splitlines()) == 1, err2
    assert not _parquet(out) and not (out / "summary.json").exists()


# -- stopping: signals to the parent and to a worker -------------------------------------------


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _long_grid(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, list[int]]:
    """A grid that learns for much longer than the tests wait, on two workers; returns the
    command's process, its output directory and its two workers once they are learning."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(3000, 8))
    path = tmp_path / "long.csv"
    np.savetxt(path, np.column_stack([X, (X[:, 0] > 0).astype(int)]), delimiter=",",
               fmt="%.6f")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path),
         "-l", "a=bpa-s", "-l", "b=bogd", "-p", "budget=300", "-R", "400", "--workers", "2",
         "--out", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # SIGINT as a terminal leaves it (a shell that runs the suite in the background ignores it,
        # and the child would inherit that)
        preexec_fn=_default_sigint)
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = _children(proc.pid)
        if len(workers) == 2:
            break
        time.sleep(0.1)
    assert len(workers) == 2, f"no two workers: {proc.poll()}"
    # learning: past Beam's import, each worker has written a temporary predictions file
    while time.monotonic() < deadline and len(
            list((out / "predictions").glob(".*.parquet.tmp"))) < 2:
        time.sleep(0.1)
    assert len(list((out / "predictions").glob(".*.parquet.tmp"))) >= 2
    return proc, out, workers


def _gone(pids: list[int], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_every_worker(tmp_path: Path) -> None:
    proc, out, workers = _long_grid(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert [ln for ln in err.splitlines() if not ln.startswith("[progress]")] == [
        "kernelstream: interrupted"]
    assert _gone(workers)
    assert not _parquet(out) and not (out / "summary.json").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_worker_stops_the_run(tmp_path: Path) -> None:
    proc, out, workers = _long_grid(tmp_path)
    os.kill(workers[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    lines = [ln for ln in err.splitlines() if not ln.startswith("[progress]")]
    assert lines[0].startswith("kernelstream replay: error: worker ")
    assert "was killed by signal 9; the other workers were stopped" in lines[0]
    assert _gone(workers)
    assert not _parquet(out) and not (out / "summary.json").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_with_their_parent(tmp_path: Path) -> None:
    proc, _, workers = _long_grid(tmp_path)
    # forked from the command (the default on Linux): the same command line, no new Python
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    assert all(Path(f"/proc/{w}/cmdline").read_bytes() == cmdline for w in workers)
    proc.kill()
    proc.communicate(timeout=60)
    assert _gone(workers), "a worker outlived its parent"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_malformed_beam_option_is_one_line_before_the_run(
        dirty: Path, tmp_path: Path, capsys, workers: str) -> None:
    """Beam's own options after ``--`` are parsed before the run: a malformed one is one line,
    exit 2, no output (before: Beam's whole usage text, or each worker's traceback)."""
    out = tmp_path / "o"
    assert main(["replay", str(dirty), "-l", "a=bogd", "-l", "b=pa-i", "-q", "--workers",
                 workers, "--out", str(out), "--", "--direct_num_workers=abc"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("kernelstream replay: error: after '--': argument "
                           "--direct_num_workers: invalid int value: 'abc'"), err
    assert not out.exists()
