"""Restored states are checked against their own parameters: a state that no run of those
parameters could have written (relabelled, a budget edited under its support vectors, a
mis-sized array, a value the rounds cannot take) is refused by set_state / from_state with a
ValueError naming the learner and the entry, instead of a learner over its budget, a raw
numpy/C error, an OverflowError or a hang in a later round."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kernelstream import learners


def _stream(n: int, seed: int = 7, noise: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    z = rng.random(n) - 0.5 if noise else X[:, 0] * X[:, 1]  # noise: a mistake every other row
    return X, np.where(z > 0, 1.0, -1.0)


def _state(name: str, n: int = 100, noise: bool = False, **params: Any) -> dict[str, np.ndarray]:
    X, y = _stream(n, noise=noise)
    m = learners.make(name, seed=1, **params)
    m.predict_learn_many(X, y)
    return m.get_state()


def test_a_relabelled_state_over_the_budget_is_refused() -> None:
    st = _state("perceptron", 1500, noise=True)
    assert learners.from_state(st).n_support_vectors > 500
    st["__learner__"] = np.array("bogd")  # a perceptron's params are a subset of BOGD's
    with pytest.raises(ValueError, match=r"bogd: .*support vectors, over the bound 500"):
        learners.from_state(st)


def test_a_budget_edited_under_the_stored_support_vectors_is_refused() -> None:
    st = _state("bogd", 1500, noise=True, budget=500)
    params = json.loads(str(st["__params__"]))
    st["__params__"] = np.array(json.dumps({**params, "budget": 20}, sort_keys=True))
    m = learners.make("bogd")
    before = m.get_state()
    with pytest.raises(ValueError, match=r"bogd: .*500 support vectors, over the bound 20"):
        m.set_state(st)
    assert m.get_state().keys() == before.keys()


def _drop(a: np.ndarray) -> np.ndarray:
    return a[:-1].copy()


def _add(a: np.ndarray) -> np.ndarray:
    return np.concatenate([a, a[-1:]])


@pytest.mark.parametrize(("name", "key", "mutate"), [
    ("nogd", "nogd.w", _drop), ("nogd", "nogd.M", _add),
    ("skegd", "skegd.sk.pm", _drop), ("skegd", "skegd.sk.pp", _add),
    ("skegd", "skegd.Qt", lambda a: np.ascontiguousarray(a[:, :-1])),
    ("skegd", "skegd.w", _drop), ("skegd", "skegd.sk.landmarks", _drop),
])
def test_mis_sized_arrays_are_refused(name: str, key: str,
                                      mutate: Callable[[np.ndarray], np.ndarray]) -> None:
    st = _state(name, 160, budget=20, rank=4)
    st[key] = mutate(st[key])
    with pytest.raises(ValueError, match=rf"{name}: .*{key}.*shape"):
        learners.from_state(st)


def _set_last(st: dict[str, np.ndarray], key: str, value: float) -> dict[str, np.ndarray]:
    a = st[key].copy()
    a.flat[-1] = value
    return {**st, key: a}


@pytest.mark.parametrize(("name", "params", "key", "value"), [
    ("ea2oks", {"reservoir_size": 8}, "ek.r", 10**9),  # 4^r overflowed in from_state
    ("ea2oks", {"reservoir_size": 8}, "ao.V.seen", -5),  # ZeroDivisionError next round
    ("ioks", {}, "ioks.q", 1e308),  # OverflowError next round
    ("ioks", {}, "ioks.S", -1.0),  # math domain error next round
    ("oks++", {}, "oks++.L", -5.0),  # math domain error next round
    ("oks-sil", {"budget": 20}, "oks_sil.gamma", np.nan),  # the compiled rounds looped
    ("skegd", {"budget": 20, "rank": 4}, "skegd.sk.cols", 10**9),  # a 30 GB allocation
])
def test_values_the_rounds_cannot_take_are_refused(name: str, params: dict[str, Any], key: str,
                                                   value: float) -> None:
    st = _set_last(_state(name, 160, **params), key, value)
    with pytest.raises(ValueError, match=rf"{re.escape(name)}: .*{re.escape(key)}"):
        learners.from_state(st)


def test_bomkc_with_a_huge_count_gap_runs_in_bounded_memory() -> None:
    """A count of 10^9 mistakes (corrupted or real) made the power table 2^30 entries long."""
    st = _state("bomkc-dd", 100, budget=20)
    st = _set_last(st, "mk.counts", 10**9)
    m = learners.from_state(st)
    X, y = _stream(30, seed=8)
    m.predict_learn_many(X, y)
    assert len(m._powtab) < 100_000
