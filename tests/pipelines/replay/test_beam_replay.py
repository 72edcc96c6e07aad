"""The replay pipeline end to end: files in, Parquet out, on every runner.

Beam's outputs must be the plain loop's: the prediction files equal ``run_loop_outputs``' row
for row, the scores equal an independent per-example loop, and the summaries derived from the
metrics output equal ``kernelstream.engine.evaluate.evaluate`` — with blocks delivered in a
scrambled order, on the FnApiRunner in-process and with two worker processes, and on the portable
runner. Malformed input ends up in the dead-letter output with its line and reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernelstream import data, learners
from kernelstream.engine.evaluate import evaluate
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.replay.outputs import (
    DEAD_LETTER_SCHEMA,
    METRICS_SCHEMA,
    PREDICTIONS_SCHEMA,
    read_table,
)
from kernelstream.learners.testing import small_params
from kernelstream.pipelines.replay.replay import ReplayResult, run_loop_outputs, run_replay
from kernelstream.seeding import permutation

SEED = 3
# Columns that describe the run rather than the stream: learner timings, and the disorder the
# runner delivered (the loop has none).
RUN_COLUMNS = ("seconds", "examples_per_second", "window_seconds", "window_examples_per_second",
               "max_buffered_blocks", "duplicate_blocks")


def all_configs() -> list[LearnerConfig]:
    return [LearnerConfig(name, name, small_params(name)) for name in learners.available()]


@pytest.fixture(scope="module")
def german(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 200 rows of the embedded german data set, as a plain LIBSVM file."""
    X, y = data.load_dataset("german", limit=200)
    path = tmp_path_factory.mktemp("data") / "german200.libsvm"
    with open(path, "w") as f:
        for xi, yi in zip(X, y, strict=True):
            f.write(f"{int(yi):+d} " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(xi)
                                                 if v != 0) + "\n")
    return path


def _table(out: Path, name: str) -> pa.Table:
    schema = {"predictions": PREDICTIONS_SCHEMA, "metrics": METRICS_SCHEMA,
              "dead_letters": DEAD_LETTER_SCHEMA}[name]
    t = read_table(out / name, schema)
    keys = [("key", "ascending"), ("position", "ascending")] if name == "predictions" else [
        ("key", "ascending"), ("window_end", "ascending"), ("final", "ascending")
    ] if name == "metrics" else [("line", "ascending"), ("position", "ascending")]
    return t.sort_by(keys)


def assert_same_outputs(beam_out: Path, loop_out: Path) -> None:
    """Prediction and dead-letter files equal row for row; metrics equal except the run's
    own columns (timings, observed disorder)."""
    for name in ("predictions", "dead_letters"):
        a, b = _table(beam_out, name), _table(loop_out, name)
        assert a.num_rows == b.num_rows, name
        assert a.equals(b), f"{name} differ between Beam and the loop"
    a, b = _table(beam_out, "metrics"), _table(loop_out, "metrics")
    cols = [c for c in METRICS_SCHEMA.names if c not in RUN_COLUMNS]
    assert a.select(cols).equals(b.select(cols))


def assert_matches_evaluate(res: ReplayResult, configs: list[LearnerConfig], path: Path,
                            permutations: int, **load_kw: Any) -> None:
    """The summary derived from the metrics output equals the reference loop's (with the
    configurations the run learnt with: their widths estimated from the file)."""
    X, y = data.load(path, **load_kw)
    got = {r.label: r for r in res.eval_results()}
    learnt = {c.label: c for c in res.configs}
    for cfg in configs:
        ran = learnt[cfg.label]
        assert got[cfg.label].params == dict(ran.params)
        ref = evaluate(X, y, ran.learner, ran.params, seed=SEED, permutations=permutations,
                       progress=None)
        mine = got[cfg.label]
        assert mine.n_features == ref.n_features and mine.examples == ref.examples
        for a, b in zip(mine.runs, ref.runs, strict=True):
            assert (a.permutation, a.examples, a.mistakes, a.mistake_rate, a.avg_loss,
                    a.n_support_vectors) == (b.permutation, b.examples, b.mistakes,
                                             b.mistake_rate, b.avg_loss, b.n_support_vectors)


def assert_scores_equal_step_loop(out: Path, cfg: LearnerConfig, X: np.ndarray, y: np.ndarray,
                                  r: int) -> None:
    t = _table(out, "predictions")
    key = f"{cfg.label}#{r}"
    mask = np.array(t.column("key").to_pylist()) == key
    sub = t.filter(pa.array(mask))
    perm = permutation(X.shape[0], SEED, r)
    m = cfg.make(SEED, r)
    ref = np.array([m.step(X[j], y[j]) for j in perm])
    assert np.array_equal(sub.column("score").to_numpy(), ref)
    assert np.array_equal(sub.column("id").to_numpy(), perm)


@pytest.mark.parametrize("runner,args", [
    ("direct", []),
    ("direct", ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]),
    pytest.param("portable", [], marks=pytest.mark.slow),
], ids=["fnapi", "fnapi-2-processes", "portable"])
def test_replay_equals_loop_for_every_learner(german: Path, tmp_path: Path, runner: str,
                                              args: list[str]) -> None:
    configs = all_configs()
    kw: dict[str, Any] = dict(seed=SEED, permutations=2, block_size=24, metrics_window=50)
    res = run_replay(str(german), configs, tmp_path / "beam", runner=runner, scramble=11,
                     pipeline_args=args, **kw)
    loop = run_loop_outputs(str(german), configs, tmp_path / "loop", **kw)
    assert_same_outputs(tmp_path / "beam", tmp_path / "loop")
    assert len(res.summaries) == len(configs) * 2
    assert all(s["complete"] and s["examples"] == 200 for s in res.summaries)
    assert max(_table(tmp_path / "beam", "metrics").column("max_buffered_blocks")
               .to_pylist()) > 0, "blocks were not delivered out of order"
    assert [s["mistakes"] for s in res.summaries] == [s["mistakes"] for s in loop.summaries]
    assert_matches_evaluate(res, configs, german, 2)
    X, y = data.load(german)
    assert_scores_equal_step_loop(tmp_path / "beam", res.configs[0], X, y, 1)
    if runner == "direct" and not args:
        assert res.counters["examples"] == len(configs) * 2 * 200
        assert res.counters["blocks_buffered"] > 0


def test_limit_scale_and_grid_of_one_learner(german: Path, tmp_path: Path) -> None:
    configs = [LearnerConfig("b10", "bogd", {"budget": 10}),
               LearnerConfig("b30", "bogd", {"budget": 30, "eta": 0.2})]
    kw: dict[str, Any] = dict(seed=SEED, permutations=3, limit=150, scale="01",
                              block_size=64, metrics_window=64)
    res = run_replay(str(german), configs, tmp_path / "beam", **kw)
    run_loop_outputs(str(german), configs, tmp_path / "loop", **kw)
    assert_same_outputs(tmp_path / "beam", tmp_path / "loop")
    assert {s["key"] for s in res.summaries} == {f"{c}#{r}" for c in ("b10", "b30")
                                                 for r in range(3)}
    assert_matches_evaluate(res, configs, german, 3, limit=150, scale="01")


BAD_LINES = [  # (text, expected reason prefix)
    (b"+1 1:0.5 2:abc", "bad value"),
    (b"-1 1:nan 3:0.25", "non-finite value"),
    (b"1:0.5 2:0.25", "missing label"),
    (b"+1 0:0.5", "non-positive index"),
    (b"", "empty line"),
    (b"+1 1:\x00\x01\x02 3:1", "binary garbage"),
    (b"\xff\xfe\x00garbage\x9c", "undecodable bytes"),
    (b"+1 1:0.1 1:0.2", "duplicate index"),
    (b"+1 2.5:1", "non-integer index"),
    (b"+1 1:0.5 x", "bad token"),
    (b"7 1:0.5", "unknown label"),
]


def test_malformed_lines_become_dead_letters(german: Path, tmp_path: Path) -> None:
    good = german.read_bytes().splitlines()[:120]
    lines: list[bytes] = []
    bad_at: dict[int, str] = {}
    rng = np.random.default_rng(0)
    slots = sorted(rng.choice(np.arange(1, 120), len(BAD_LINES), replace=False).tolist())
    gi = 0
    for k, (bad, reason) in enumerate(BAD_LINES):
        while gi < slots[k]:
            lines.append(good[gi])
            gi += 1
        lines.append(bad)
        bad_at[len(lines)] = reason
    lines += good[gi:]
    lines.insert(5, b"# a comment line carries no example")
    bad_at = {(ln + 1 if ln > 5 else ln): r for ln, r in bad_at.items()}
    path = tmp_path / "dirty.libsvm"
    path.write_bytes(b"\n".join(lines) + b"\n")
    clean = tmp_path / "clean.libsvm"
    clean.write_bytes(b"\n".join(good) + b"\n")

    configs = [LearnerConfig("bogd", "bogd", small_params("bogd")),
               LearnerConfig("pa", "pa-i", {})]
    kw: dict[str, Any] = dict(seed=SEED, permutations=2, block_size=16)
    res = run_replay(str(path), configs, tmp_path / "beam", scramble=2, **kw)

    dead = _table(tmp_path / "beam", "dead_letters").to_pylist()
    assert sorted(d["line"] for d in dead) == sorted(bad_at), "every bad line, exactly once"
    for d in dead:
        assert d["reason"].startswith(bad_at[d["line"]]), (d["line"], d["reason"])
    assert all(d["source"] == str(path) and d["stage"] == "parse" for d in dead)
    assert next(d for d in dead if d["reason"].startswith("bad value"))["raw"] == \
        "+1 1:0.5 2:abc"
    # counts add up: every physical line is a predicted row, a dead letter or the comment
    n_good = len(good)
    assert len(lines) == n_good + len(dead) + 1
    preds = _table(tmp_path / "beam", "predictions")
    assert preds.num_rows == n_good * len(configs) * 2
    assert all(s["examples"] == n_good for s in res.summaries)
    assert res.counters["dead_letters"] == len(BAD_LINES)
    # the good rows are exactly the clean file's stream, predicted as by the loop
    # (the configurations as learnt: a width estimated from the dirty file's first rows, which
    # hold the rows whose label is bad, is not quite the clean file's)
    run_loop_outputs(str(clean), res.configs, tmp_path / "loop", **kw)
    a = _table(tmp_path / "loop", "predictions").drop_columns([])
    assert preds.equals(a)
    assert_matches_evaluate(res, configs, clean, 2)


def test_csv_key_by_column_one_model_per_entity(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    n = 240
    X = rng.normal(size=(n, 3))
    y = np.where(np.sin(X[:, 0]) + X[:, 1] * X[:, 2] > 0, "yes", "no")
    ents = rng.choice(["north", "south", "east"], n)
    path = tmp_path / "entities.csv"
    with open(path, "w") as f:
        f.write("a,region,b,c,label\n")
        for i in range(n):
            f.write(f"{float(X[i, 0])!r},{ents[i]},{float(X[i, 1])!r},{float(X[i, 2])!r},{y[i]}\n")
        f.write("1.0,east,oops,2.0,yes\n")  # a bad row of a known entity
    cfg = LearnerConfig("ogd", "ogd", {})
    kw: dict[str, Any] = dict(seed=SEED, permutations=2, block_size=16, key_by="region",
                              label_column="label")
    res = run_replay(str(path), [cfg], tmp_path / "beam", scramble=5, **kw)
    cfg = res.configs[0]  # as it learnt: its gamma estimated from the file
    run_loop_outputs(str(path), [cfg], tmp_path / "loop", **kw)
    assert_same_outputs(tmp_path / "beam", tmp_path / "loop")
    assert {s["key"] for s in res.summaries} == {
        f"ogd#{r}@{e}" for r in range(2) for e in ("north", "south", "east")}
    dead = _table(tmp_path / "beam", "dead_letters").to_pylist()
    assert [(d["line"], d["reason"].split(" ")[0]) for d in dead] == [(n + 2, "non-numeric")]
    # each entity's model saw exactly the permuted stream restricted to its rows
    yv = np.where(y == "yes", 1.0, -1.0)
    preds = _table(tmp_path / "beam", "predictions")
    for r in range(2):
        perm = permutation(n, SEED, r)
        for e in ("north", "south", "east"):
            rows = perm[ents[perm] == e]
            m = cfg.make(SEED, r)
            ref = np.array([m.step(X[j], yv[j]) for j in rows])
            sub = preds.filter(pa.array(np.array(preds.column("key").to_pylist())
                                        == f"ogd#{r}@{e}"))
            assert np.array_equal(sub.column("score").to_numpy(), ref)
            assert sub.column("entity").to_pylist() == [e] * len(rows)


def test_parquet_source_with_missing_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    n = 150
    f1, f2 = rng.normal(size=n), rng.normal(size=n)
    lab = np.where(f1 * f2 > 0, 1, 0)
    f1m = f1.tolist()
    f1m[10] = None
    f2m = f2.tolist()
    f2m[20] = float("nan")
    table = pa.table({"f1": pa.array(f1m, pa.float64()), "f2": f2m, "note": ["x"] * n,
                      "label": lab})
    path = tmp_path / "d.parquet"
    pq.write_table(table, path, row_group_size=40)
    cfg = LearnerConfig("perceptron", "perceptron", {})
    res = run_replay(str(path), [cfg], tmp_path / "beam", seed=SEED, block_size=32)
    dead = _table(tmp_path / "beam", "dead_letters").to_pylist()
    assert [(d["line"], d["reason"].split(" ")[0]) for d in dead] == [(11, "missing"),
                                                                      (21, "non-finite")]
    assert res.summaries[0]["examples"] == n - 2
    keep = np.ones(n, dtype=bool)
    keep[[10, 20]] = False
    X = np.column_stack([f1, f2])[keep]
    yv = np.where(lab[keep] == 1, 1.0, -1.0)
    ref = evaluate(X, yv, "perceptron", {}, seed=SEED, progress=None)
    assert res.summaries[0]["mistakes"] == ref.runs[0].mistakes
    assert res.summaries[0]["avg_loss"] == ref.runs[0].avg_loss


def test_run_replay_config_gives_the_cli_runner_results(german: Path, tmp_path: Path) -> None:
    from kernelstream.pipelines.config import learner_configs
    from kernelstream.pipelines.replay.replay import run_replay_config
    from kernelstream.pipelines.replay.replay_args import ReplayConfig

    lcs = learner_configs(["bogd", "p=perceptron"], ["bogd.budget=20"])
    cfg = ReplayConfig(data=str(german), dataset="german200", learners=lcs,
                       out=tmp_path / "run", seed=SEED, permutations=2, runner="direct")
    results = run_replay_config(cfg)
    X, y = data.load(german)
    for res, lc in zip(results, cfg.learners, strict=True):  # (widths from the file)
        ref = evaluate(X, y, lc.learner, lc.params, seed=SEED, permutations=2, label=lc.label,
                       progress=None)
        a, b = res.to_summary(), ref.to_summary()
        for k in ("learner", "label", "params", "seed_name", "task", "loss", "examples",
                  "n_features", "permutations", "mistake_rate", "mistake_rate_std",
                  "avg_loss", "n_support_vectors"):
            assert a[k] == b[k], k


@pytest.mark.parametrize("extra", [{"scale": "pm1"}, {"limit": 130}],
                         ids=["scaled", "limited"])
def test_chunked_file_order_reader_equals_loop(german: Path, tmp_path: Path,
                                               extra: dict[str, Any]) -> None:
    """The parallel chunked reader (file order, tiny chunks so blocks straddle chunks), on a
    file with bad lines: the same blocks, rows and dead letters as the in-memory reader."""
    lines = german.read_bytes().splitlines()
    lines[7:7] = [b"+1 1:0.5 2:abc", b"", b"9 1:1"]
    lines[60:60] = [b"\x00\x01 garbage"]
    path = tmp_path / "dirty.libsvm"
    path.write_bytes(b"\n".join(lines))  # and no final newline
    configs = [LearnerConfig("bogd", "bogd", small_params("bogd")),
               LearnerConfig("fogd", "fogd", small_params("fogd"))]
    kw: dict[str, Any] = dict(seed=SEED, order="file", block_size=16, **extra)
    res = run_replay(str(path), configs, tmp_path / "beam", chunk_bytes=1500, **kw)
    run_loop_outputs(str(path), configs, tmp_path / "loop", **kw)
    assert_same_outputs(tmp_path / "beam", tmp_path / "loop")
    n = extra.get("limit", 200)
    assert [s["examples"] for s in res.summaries] == [n, n]
    dead = _table(tmp_path / "beam", "dead_letters").column("line").to_pylist()
    assert dead == [8, 9, 10, 61]
    ids = _table(tmp_path / "beam", "predictions").column("id").to_pylist()
    assert ids == list(range(n)) * 2
