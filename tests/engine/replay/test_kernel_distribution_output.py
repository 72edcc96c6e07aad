"""The metrics output carries the kernel distribution of kernel-selection learners, exactly as
the learner had it after the row at each window boundary (ALGORITHMS.md §3.2-3.9)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelstream.engine.keys import StreamKey
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.replay.blocks import Block
from kernelstream.engine.replay.core import ReplayLearner, ReplayState
from kernelstream.engine.replay.outputs import METRICS_SCHEMA, rows_batch
from kernelstream.learners.testing import make_stream, small_params

SEED = 5
WINDOW = 50


def _run(name: str, X: np.ndarray, y: np.ndarray, block: int = 32) -> list[dict]:
    cfg = LearnerConfig(name, name, small_params(name))
    core = ReplayLearner({name: cfg}, SEED, WINDOW)
    key = StreamKey(name, 0).encode()
    st = ReplayState()
    rows: list[dict] = []
    for s in range(0, X.shape[0], block):
        e = min(s + block, X.shape[0])
        rows += core.learn(key, st, Block(key, s, np.arange(s, e), X[s:e], y[s:e])).metrics
    rows.append(core.final_row(key, st))
    assert st.rejected == int((~np.isfinite(X).all(axis=1)).sum())
    return rows


def _reference(name: str, X: np.ndarray, y: np.ndarray, at: list[int]) -> dict[int, np.ndarray]:
    m = LearnerConfig(name, name, small_params(name)).make(SEED, 0)
    out = {}
    for i in range(X.shape[0]):
        if np.isfinite(X[i]).all():  # the rejected row of the test changes nothing
            m.predict_learn_many(X[i : i + 1], y[i : i + 1])
        if i + 1 in at:
            out[i + 1] = m.kernel_distribution
    return out


@pytest.mark.parametrize("name", ["ea2oks", "oks++", "raker"])
def test_window_rows_carry_the_exact_distribution(name: str) -> None:
    X, y = make_stream("classification", 230, seed=3)
    X[77, 0] = np.nan  # a row the learner rejects: the distribution stays as it was
    rows = _run(name, X, y)
    ends = [r["window_end"] for r in rows]
    assert ends == [50, 100, 150, 200, 230]
    ref = _reference(name, X, y, ends)
    for r in rows:
        p = np.asarray(r["kernel_distribution"])
        assert np.array_equal(p, ref[r["window_end"]]), r["window_end"]
        assert p.min() >= 0.0 and abs(p.sum() - 1.0) < 1e-12
    # the rows fit the Parquet schema of the metrics output
    assert rows_batch(rows, METRICS_SCHEMA).num_rows == len(rows)


def test_single_kernel_learners_have_no_distribution() -> None:
    X, y = make_stream("classification", 120, seed=3)
    rows = _run("bogd", X, y)
    assert rows and all(r["kernel_distribution"] is None for r in rows)
    assert rows_batch(rows, METRICS_SCHEMA).column("kernel_distribution").null_count == len(rows)
