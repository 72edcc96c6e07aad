"""A ``--key-by`` run's entities pooled per configuration (engine.pooled)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelstream.engine.noskill import NoSkill
from kernelstream.engine.pooled import pooled_configs


def _key(config: str, perm: int, entity: str, y: np.ndarray, pred: np.ndarray,
         classify: bool) -> tuple[dict, NoSkill]:
    """A per-key summary as a replay writes it, and the accumulator behind it."""
    ns = NoSkill()
    ns.add(y, pred, classify, (lambda f, t: (f - t) ** 2) if not classify else None)
    n = len(y)
    key = {"config": config, "learner": "bogd", "permutation": perm, "entity": entity,
           "task": "classification" if classify else "regression", "loss": "hinge",
           "examples": n, "n_support_vectors": 3, "seconds": 0.5,
           "mistakes": int(np.sum(np.where(pred > 0, 1, -1) != y)) if classify else None,
           "avg_loss": float(np.mean((pred - y) ** 2)), **ns.figures(classify)}
    key["mistake_rate"] = 100.0 * key["mistakes"] / n if classify else None
    return key, ns


def test_classification_pools_rows_not_entities() -> None:
    # an entity of 3 rows, all wrong, beside one of 97 rows, all right: 3 %, not 50 %
    a, _ = _key("c", 0, "a", np.array([1.0, 1, 1]), np.array([-1.0, -1, -1]), True)
    b, _ = _key("c", 0, "b", np.ones(97), np.ones(97), True)
    (row,) = pooled_configs([a, b])
    assert row["mistake_rate"] == pytest.approx(3.0)
    assert row["entities"] == 2 and row["examples"] == 100 and row["permutations"] == 1
    assert row["noskill_mistake_rate"] == pytest.approx(
        (a["noskill_mistake_rate"] * 3 + b["noskill_mistake_rate"] * 97) / 100)
    assert row["n_support_vectors"] == 6 and row["seconds"] == 1.0


def test_regression_figures_equal_the_pooled_accumulators() -> None:
    rng = np.random.default_rng(0)
    keys, parts = [], []
    for e, n in (("a", 40), ("b", 7), ("c", 120)):
        y = rng.normal(size=n) * (1 + len(e))
        key, ns = _key("r", 0, e, y, y + rng.normal(scale=0.5, size=n), False)
        keys.append(key)
        parts.append(ns)
    (row,) = pooled_configs(keys)
    want = NoSkill.pooled(parts).figures(False)
    for f in ("rmse", "mae", "r2", "noskill_avg_loss"):
        assert row[f] == pytest.approx(want[f], rel=1e-12), f
    assert row["mistake_rate"] is None and row["top_class_share"] is None


def test_permutations_mean_and_std_and_command_line_order() -> None:
    rows = []
    for perm, wrong in ((0, 1), (1, 3)):
        y = np.ones(10)
        pred = np.ones(10)
        pred[:wrong] = -1
        rows.append(_key("z", perm, "a", y, pred, True)[0])
        rows.append(_key("a", perm, "a", y, y, True)[0])
    out = pooled_configs(rows, {"z": {"budget": 5}, "a": {}})
    assert [r["label"] for r in out] == ["z", "a"]  # the command line's order, not the keys'
    assert out[0]["params"] == {"budget": 5}
    assert out[0]["mistake_rate"] == pytest.approx(20.0)
    assert out[0]["mistake_rate_std"] == pytest.approx(np.std([10.0, 30.0], ddof=1))
    assert [r["label"] for r in pooled_configs(rows)] == ["z", "a"]  # first seen


def test_a_missing_figure_is_none_not_a_partial_pool() -> None:
    a, _ = _key("c", 0, "a", np.ones(5), np.ones(5), True)
    b, _ = _key("c", 0, "b", np.ones(5), np.ones(5), True)
    b["noskill_mistake_rate"] = None  # a key recorded before the baselines existed
    (row,) = pooled_configs([a, b])
    assert row["noskill_mistake_rate"] is None and row["mistake_rate"] == 0.0


def test_a_missing_figure_has_no_std() -> None:
    # classification: no regression figures, and no top class share; their std is null too,
    # as in a plain run's summary.json (not 0.0, a spread of figures that do not exist)
    a, _ = _key("c", 0, "a", np.array([1.0, -1, 1]), np.array([1.0, 1, 1]), True)
    b, _ = _key("c", 1, "a", np.array([1.0, -1, 1]), np.array([-1.0, 1, 1]), True)
    (row,) = pooled_configs([a, b])
    for f in ("top_class_share", "noskill_avg_loss", "mae", "rmse", "r2"):
        assert row[f] is None and row[f"{f}_std"] is None, f
    assert row["mistake_rate_std"] > 0
