"""Sparse rows through the replay (issue 13): CSR blocks from the readers to the learners and
through Beam's coder, the automatic dense/sparse choice, ``--rows`` and ``--hash-features``,
and the 1 GiB line test: a file with an index of 2^31-1 and a 2 MB line runs to the end on
every runner within 1 GiB of memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import TextFormat
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.replay.blocks import Block, concat_blocks
from kernelstream.engine.replay.chunks import file_chunks, make_plan, read_chunk, scan_chunk
from kernelstream.engine.replay.outputs import METRICS_SCHEMA, PREDICTIONS_SCHEMA, read_table
from kernelstream.engine.replay.sources import load_rows
from kernelstream.pipelines import cli
from kernelstream.pipelines.replay import replay_checks
from kernelstream.pipelines.replay.replay import run_replay
from kernelstream.sparse import CSR

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parents[2] / "data"
RCV1 = DATA / "rcv1_100.svm"  # 100 rows, 47k columns: sparse under the auto rule
A9A = DATA / "a9a_300.svm"  # 300 rows, 123 columns: dense under the auto rule


def _scores(out: Path) -> tuple[np.ndarray, np.ndarray]:
    t = read_table(out / "predictions", PREDICTIONS_SCHEMA).sort_by(
        [("key", "ascending"), ("position", "ascending")])
    return t.column("id").to_numpy(), t.column("score").to_numpy()


# -- CSR blocks --------------------------------------------------------------------------------


def test_csr_rows_select_like_numpy() -> None:
    rng = np.random.default_rng(0)
    D = np.where(rng.random((9, 7)) < 0.3, rng.normal(size=(9, 7)), 0.0)
    X = CSR.from_dense(D)
    assert np.array_equal(X[2:6].to_dense(), D[2:6])
    assert np.array_equal(X[::2].to_dense(), D[::2])
    order = np.array([8, 0, 3, 3])
    assert np.array_equal(X[order].to_dense(), D[order])
    assert np.array_equal(X[D[:, 0] != 0].to_dense(), D[D[:, 0] != 0])
    assert CSR.vstack([X[:4], X[4:]]).equals(X)
    with pytest.raises(TypeError, match="slice or a 1-D index array"):
        X[1.5]  # type: ignore[index]


def test_sparse_block_slices_joins_and_codes() -> None:
    from kernelstream.transforms.replay.blocks import BlockCoder

    X, _ = CSR.from_libsvm_bytes(RCV1.read_bytes())
    n = X.n_rows
    b = Block("bogd#0", 0, np.arange(n), X, np.ones(n))
    assert b.sparse and repr(b).endswith("sparse)")
    assert concat_blocks([b.slice(40, n), b.slice(0, 40)]).equals(b)
    piece = b.slice(10, 20)
    coder = BlockCoder()
    back = coder.decode(coder.encode(piece))
    assert back.equals(piece) and back.X.check() is back.X  # type: ignore[union-attr]
    dense = Block("bogd#0", 0, np.arange(3), np.eye(3), np.ones(3))
    assert coder.decode(coder.encode(dense)).equals(dense)
    assert not back.equals(Block("bogd#0", 10, piece.ids, piece.X.to_dense(),  # type: ignore[union-attr]
                                 piece.y))


# -- the dense/sparse choice -----------------------------------------------------------------


def test_auto_rows_are_sparse_only_for_wide_data() -> None:
    assert isinstance(load_rows(ReadOptions(str(RCV1))).X, CSR)
    assert isinstance(load_rows(ReadOptions(str(A9A))).X, np.ndarray)
    assert isinstance(load_rows(ReadOptions(str(A9A), rows="sparse")).X, CSR)
    assert isinstance(load_rows(ReadOptions(str(RCV1), rows="dense")).X, np.ndarray)
    # min-max scaling fills in the zeros, so the auto rule keeps scaled rows dense
    assert isinstance(load_rows(ReadOptions(str(RCV1), scale="01")).X, np.ndarray)
    with pytest.raises(ValueError, match="zeros of sparse rows"):
        ReadOptions(str(RCV1), rows="sparse", scale="01")


def test_dense_and_sparse_rows_hold_the_same_values(tmp_path: Path) -> None:
    # the clean (vectorised) path and the tolerant per-line path, dense and sparse
    bad = tmp_path / "bad.svm"
    bad.write_text(RCV1.read_text() + "+1 5:nan\n")
    for path in (RCV1, bad):
        S = load_rows(ReadOptions(str(path), rows="sparse"))
        D = load_rows(ReadOptions(str(path), rows="dense"))
        assert isinstance(S.X, CSR) and isinstance(D.X, np.ndarray)
        assert np.array_equal(S.X.to_dense(), D.X) and np.array_equal(S.y, D.y)
    assert len(load_rows(ReadOptions(str(bad))).dead_letters) == 1


def test_sparse_replay_agrees_with_dense_replay(tmp_path: Path) -> None:
    cfgs = [LearnerConfig(n, n, {"budget": 30}) for n in ("bogd", "bpa-s", "nogd")]
    for rows in ("sparse", "dense"):
        run_replay(str(RCV1), cfgs, tmp_path / rows, runner="loop", permutations=2,
                   rows=rows)
    ids_s, s = _scores(tmp_path / "sparse")
    ids_d, d = _scores(tmp_path / "dense")
    assert np.array_equal(ids_s, ids_d)
    assert np.allclose(s, d, rtol=1e-9, atol=1e-12)  # the same sums in another order


def test_chunked_reader_carries_csr_blocks(tmp_path: Path) -> None:
    opts = ReadOptions(str(RCV1))
    tf = TextFormat.detect(opts.path, "libsvm")
    chunks = file_chunks(opts.path, 4096)
    assert len(chunks) > 5  # rows cross chunk boundaries
    plan = make_plan([scan_chunk(opts, tf, c) for c in chunks], opts)
    reads = [read_chunk(opts, tf, c, plan, ("a",), 16) for c in chunks]
    whole = [b for r in reads for b in r.whole]
    frags: dict[tuple[str, int], list[Block]] = {}
    for r in reads:
        for k, b in r.fragments:
            frags.setdefault(k, []).append(b)
    blocks = sorted(whole + [concat_blocks(v) for v in frags.values()], key=lambda b: b.start)
    assert all(b.sparse for b in blocks)
    got = CSR.vstack([b.X for b in blocks])  # type: ignore[misc]
    assert got.equals(load_rows(opts).X)  # type: ignore[arg-type]


def test_hash_features_in_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "h"
    rc = cli.main(["replay", str(RCV1), "-l", "bpa-s", "-p", "budget=20", "--runner", "loop",
                   "--hash-features", "2^10", "--out", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_features"] == 1024 and summary["hash_features"] == 10
    # 2^10 columns are narrow: the auto rule runs them dense; forcing sparse agrees
    rc = cli.main(["replay", str(RCV1), "-l", "bpa-s", "-p", "budget=20", "--runner", "loop",
                   "--hash-features", "10", "--rows", "sparse", "--out", str(tmp_path / "s"),
                   "--quiet"])
    assert rc == 0
    assert np.allclose(_scores(out)[1], _scores(tmp_path / "s")[1], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("argv,msg", [
    (["--rows", "sparse", "--scale", "01"], "zeros of sparse rows"),
    (["--hash-features", "2^40"], "from 1 to 31"),
    (["--hash-features", "1000"], "or a power of two, got 1000"),
])
def test_sparse_option_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           argv: list[str], msg: str) -> None:
    with pytest.raises(SystemExit) as e:
        rc = cli.main(["replay", str(RCV1), "-l", "bogd", "--out", str(tmp_path / "o"), *argv])
        raise SystemExit(rc)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and msg in err[-1], err


# -- Kafka topics ------------------------------------------------------------------------------


def _topic_blocks(read: ReadOptions, lines: list[bytes]) -> tuple[list[Block], list[dict]]:
    from kernelstream.kafka_client import KafkaBlocks, KafkaTopic
    from kernelstream.kafka_client.bounded import KafkaRecord

    kb = KafkaBlocks(KafkaTopic.parse("kafka://127.0.0.1:9/t"), read, ("a",), 32)
    out = list(kb.run(KafkaRecord(0, i, 0, None, v) for i, v in enumerate(lines)))
    return ([b for b in out if isinstance(b, Block)],
            [d for d in out if not isinstance(d, Block)])


def test_topic_blocks_are_csr_for_wide_messages() -> None:
    lines = RCV1.read_bytes().splitlines()
    d = 47_000
    sparse, dead = _topic_blocks(ReadOptions("kafka://127.0.0.1:9/t", n_features=d), lines)
    dense, _ = _topic_blocks(ReadOptions("kafka://127.0.0.1:9/t", n_features=d, rows="dense"),
                             lines)
    assert not dead and all(b.sparse for b in sparse) and not any(b.sparse for b in dense)
    for a, b in zip(sparse, dense, strict=True):
        assert np.array_equal(a.X.to_dense(), b.X) and np.array_equal(a.y, b.y)  # type: ignore[union-attr]
    # an index past n_features is a dead letter, not a crash or a silent widening
    _, dead = _topic_blocks(ReadOptions("kafka://127.0.0.1:9/t", n_features=10),
                            [b"+1 3:1 2147483647:1"])
    assert "index exceeds n_features" in dead[0]["reason"]


def test_topic_blocks_hash_features_without_n_features() -> None:
    lines = [b"+1 3:1 2147483647:0.5", b"-1 1:2 3:1"]
    blocks, dead = _topic_blocks(ReadOptions("kafka://127.0.0.1:9/t", hash_features=12), lines)
    assert not dead and blocks[0].X.shape == (2, 4096)
    X = blocks[0].X.to_dense() if isinstance(blocks[0].X, CSR) else blocks[0].X
    assert np.allclose(X.sum(axis=1), [1.5, 3.0])  # hashed: values kept, collisions summed


# -- the 1 GiB line test -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def huge_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """300 a9a rows with a row of index 2^31-1 and a 2 MB row (200,000 non-zeros) among them."""
    rng = np.random.default_rng(0)
    rows = A9A.read_text().splitlines()
    idx = np.sort(rng.choice(10**8, 200_000, replace=False)) + 1
    long_line = "+1 " + " ".join(f"{i}:0.5" for i in idx)
    assert len(long_line) > 2_000_000
    lines = [*rows[:100], "-1 3:1 2147483647:1", *rows[100:200], long_line, *rows[200:]]
    path = tmp_path_factory.mktemp("huge") / "huge.svm"
    path.write_text("\n".join(lines) + "\n")
    return path, len(lines)


_FILE_ORDER = ("import sys; from kernelstream.engine.learner_config import LearnerConfig; "
               "from kernelstream.pipelines.replay.replay import run_replay; "
               "run_replay(sys.argv[1], [LearnerConfig('bpa-s', 'bpa-s', {'budget': 100})], "
               "sys.argv[2], runner='direct', order='file', chunk_bytes=1 << 20)")


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["loop", "direct", "portable", "file-order"])
def test_a_huge_index_and_a_2mb_line_run_everywhere_in_under_1gib(
        huge_file: tuple[Path, int], tmp_path: Path, runner: str) -> None:
    """Every runner of the CLI, and the chunked file-order reader (Python API, Beam)."""
    path, n = huge_file
    out = tmp_path / "out"
    argv = ([sys.executable, "-c", _FILE_ORDER, str(path), str(out)] if runner == "file-order"
            else [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path), "-l",
                  "bpa-s", "-p", "budget=100", "--runner", runner, "--out", str(out), "--quiet"])
    # the peak RSS of the run and of every process it started and waited for
    code = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         env=env, timeout=300)
    rss_kib, rc = map(int, res.stdout.splitlines()[-1].split())
    assert rc == 0, res.stderr[-2000:]
    assert rss_kib * 1024 < 1 << 30
    ids, scores = _scores(out)
    assert len(ids) == n and np.isfinite(scores).all()  # every line learnt, none dead-lettered
    final = read_table(out / "metrics", METRICS_SCHEMA).filter(pc.field("final"))
    assert final.column("n_features").to_pylist() == [2**31 - 1]


def test_a_large_but_possible_model_gets_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    from kernelstream.pipelines.config import learner_configs

    replay_checks.check_memory(learner_configs(["fogd"], []), 3_231_887, sparse=True, nnz=115)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "random-feature projection" in err[0]
    assert "--hash-features" in err[0]
    replay_checks.check_memory(learner_configs(["bogd"], []), 3_231_887, sparse=True, nnz=115)
    assert capsys.readouterr().err == ""  # sparse support vectors: nothing to note


def test_check_says_how_a_replay_hands_rows_over(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(RCV1), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows_as"] == "sparse"
    assert cli.main(["check", str(A9A)]) == 0
    assert "width         117 (dense rows)" in capsys.readouterr().out  # 300 rows of a9a
