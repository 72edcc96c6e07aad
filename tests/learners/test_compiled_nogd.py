"""NOGD's compiled rounds (issue 28): stage 1's updates in C (``_ck_features.grow``) give the
numbers of the reference ``_update``, bit for bit, in blocks and one example at a time, across
the switch and a state round trip; ``grow`` refuses bad calls."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from kernelstream.learners import Learner, compiled, make
from kernelstream.learners.kernels import make_kernel
from kernelstream.learners.nogd import NOGD

fk = compiled.fk
needs_fk = pytest.mark.skipif(fk is None, reason=f"compiled kernels not in use: {compiled.STATUS}")


def _dense(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def _binary(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """0/1 rows with ~15% ones (a9a-like: the sparse kernel row)."""
    rng = np.random.default_rng(seed)
    X = (rng.random((n, d)) < 0.15).astype(np.float64)
    y = np.where(X[:, :5].sum(axis=1) - X[:, 5:10].sum(axis=1) + 0.2 * rng.standard_normal(n)
                 > 0, 1.0, -1.0)
    return X, y


def _unit(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Min-max scaled rows in [0, 1] (magic04-like), labels by a circle."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    y = np.where(((X[:, :2] - 0.5) ** 2).sum(axis=1) < 0.12, 1.0, -1.0)
    return X, y


DATA = {"dense": _dense(700, 8, 0), "binary": _binary(700, 40, 1), "unit": _unit(700, 5, 2)}
# (data, parameters): Gaussian at several widths and ranks, both inits, a budget the stream
# never fills (no switch), and the polynomial and linear kernels (their kappa(x, x) in C)
CASES = [
    ("dense", {"budget": 30, "gamma": 0.2}),
    ("dense", {"budget": 30, "gamma": 0.2, "rank": 30, "init": "carry", "eta2": 0.05}),
    ("binary", {"budget": 40, "gamma": 0.1, "rank": 9, "eta": 0.1}),
    ("binary", {"budget": 25, "gamma": 0.3, "init": "carry"}),
    ("unit", {"budget": 50, "gamma": 2.0, "rank": 17}),
    ("unit", {"budget": 5000, "gamma": 1.0}),
    ("dense", {"budget": 20, "kernel": "polynomial", "degree": 3, "eta": 0.01}),
    ("unit", {"budget": 20, "kernel": "polynomial", "degree": 2, "rank": 8}),
    ("binary", {"budget": 20, "kernel": "linear", "eta": 0.05}),
]
IDS = [f"{d}-{'-'.join(f'{k}={v}' for k, v in p.items())}" for d, p in CASES]


def _assert_same(a: Learner, b: Learner) -> None:
    sa, sb = a.get_state(), b.get_state()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].tobytes() == sb[k].tobytes(), k


def _reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage 1 by ``_update`` on every margin error (the code before grow)."""
    monkeypatch.setattr(NOGD, "compiled_stage1", False)


def _blocks(m: Learner, X: np.ndarray, y: np.ndarray, sizes: list[int]) -> tuple[np.ndarray,
                                                                                   np.ndarray]:
    """Scores and n_sv of the rows learnt in consecutive blocks of the given sizes (cycled)."""
    out, nsv, i, j = [], [], 0, 0
    while i < len(y):
        s = sizes[j % len(sizes)]
        n_sv = np.zeros(min(s, len(y) - i), dtype=np.int64)
        out.append(m.predict_learn_many(X[i:i + s], y[i:i + s], n_sv=n_sv))
        nsv.append(n_sv)
        i, j = i + s, j + 1
    return np.concatenate(out), np.concatenate(nsv)


@needs_fk
@pytest.mark.parametrize(("data", "params"), CASES, ids=IDS)
def test_compiled_stage1_equals_the_reference_update(data: str, params: dict[str, Any],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = DATA[data]
    m = make("nogd", seed=5, **params)
    calls: list[int] = []
    update = NOGD._update

    def counted(self: NOGD, *args: Any) -> None:
        calls.append(self.t)
        update(self, *args)

    with monkeypatch.context() as mp:
        mp.setattr(NOGD, "_update", counted)
        s, nsv = _blocks(m, X, y, [len(y)])
    assert m._compiled
    assert len(calls) == 1 + (m.stage == 2)  # the first round and the switch: in Python
    with monkeypatch.context() as mp:
        _reference(mp)
        r = make("nogd", seed=5, **params)
        s_ref, nsv_ref = _blocks(r, X, y, [len(y)])
    assert s.tobytes() == s_ref.tobytes()
    assert nsv.tolist() == nsv_ref.tolist()
    _assert_same(m, r)
    # the same on the per-example path (the reference _update) and in uneven blocks
    e = make("nogd", seed=5, **params)
    s_one = np.array([e.step(x, t) for x, t in zip(X, y, strict=True)])
    assert s_one.tobytes() == s.tobytes()
    _assert_same(m, e)
    b = make("nogd", seed=5, **params)
    s_b, nsv_b = _blocks(b, X, y, [1, 7, 64, 3, 250])
    assert s_b.tobytes() == s.tobytes() and nsv_b.tolist() == nsv.tolist()
    _assert_same(m, b)
    if params["budget"] < 100:
        assert m.stage == 2 and m.n_support_vectors == params["budget"]  # the switch ran
    else:
        assert m.stage == 1


@needs_fk
@pytest.mark.parametrize("cut", [3, 17, 60, 400])  # in stage 1, near the switch, in stage 2
def test_state_round_trip_mid_stream(cut: int, monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = DATA["dense"]
    params = {"budget": 30, "gamma": 0.2, "rank": 12, "init": "carry"}
    with monkeypatch.context() as mp:  # the reference, uninterrupted
        _reference(mp)
        whole = make("nogd", seed=6, **params)
        s_whole = whole.predict_learn_many(X, y)
    first = make("nogd", seed=6, **params)
    s1 = first.predict_learn_many(X[:cut], y[:cut])
    for restored in (Learner.from_state(first.get_state()), pickle.loads(pickle.dumps(first))):
        s2 = restored.predict_learn_many(X[cut:], y[cut:])
        assert np.concatenate([s1, s2]).tobytes() == s_whole.tobytes()
        _assert_same(restored, whole)


@needs_fk
def test_grow_stops_at_a_full_store_with_the_row() -> None:
    X, y = DATA["dense"]
    m = make("nogd", seed=7, budget=10, gamma=0.2)
    m.predict_learn_many(X[:1], y[:1])  # the first round: the per-example code
    sv = m.sv
    k, work = np.empty(11), np.empty(8, dtype=np.int64)
    out, nsv = np.full(len(y), np.nan), np.zeros(len(y), dtype=np.int64)
    i, n, norm2 = fk.grow(sv.X, sv.sqn, sv.a, sv.ids, sv.s, sv.n, m._kcode, m._kp, m._kdeg,
                          m._K, X, m._row_sqnorms(X), y, 1, len(y), 0, m.eta, m.budget,
                          sv.norm2, out, nsv, k, work)
    assert n == 10 and 10 <= i < len(y) and y[i] * out[i] < 1.0  # a margin error, full store
    assert nsv[i - 1] == 10 and np.isnan(out[i + 1])  # nothing after it
    assert sv.ids[:n].tolist() == sv.s[:n].tolist() and sv.ids[n - 1] < i
    kern = make_kernel("gaussian", 0.2, 2)
    np.testing.assert_allclose(m._K, kern.matrix(sv.X[:n]), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(k[:n], kern.row(sv.X[:n], sv.sqn[:n], X[i], float(X[i] @ X[i])),
                               rtol=1e-12)
    a = sv.a[:n]
    assert norm2 == pytest.approx(float(a @ m._K @ a), rel=1e-12)


@needs_fk
def test_grow_refuses_bad_calls() -> None:
    Xs, K = np.zeros((4, 3)), np.zeros((4, 4))
    sqn, a = np.zeros(4), np.zeros(4)
    ids, s = np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64)
    X, zz, y, out = np.ones((3, 3)), np.full(3, 3.0), np.ones(3), np.empty(3)
    k, work = np.empty(4), np.empty(3, dtype=np.int64)

    def call(**kw: Any) -> Any:
        args = {"Xs": Xs, "sqn": sqn, "a": a, "ids": ids, "s": s, "n": 1, "kcode": 0, "p": -1.0,
                "degree": 2, "K": K, "X": X, "zz": zz, "y": y, "start": 0, "stop": 3, "t0": 0,
                "eta": 0.5, "limit": 4, "norm2": 0.0, "out": out, "nsv": None, "k": k,
                "work": work}
        args.update(kw)
        return fk.grow(*args.values())

    # rows 0 and 1 are margin errors (scores 0 and 0.5: appended), row 2 scores 1.0
    assert call() == (3, 3, 0.5 ** 2 + (2 * 0.5 * 0.5 + 0.5 ** 2))
    with pytest.raises(ValueError, match="wrong size"):
        call(limit=5)  # more than the store holds
    with pytest.raises(ValueError, match="wrong size"):
        call(K=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="wrong size"):
        call(k=np.empty(3))
    with pytest.raises(ValueError, match="wrong size"):
        call(X=np.ones((3, 2)))
    with pytest.raises(ValueError, match="block arrays"):
        call(stop=4)
    with pytest.raises(ValueError, match="block arrays"):
        call(nsv=np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="unknown kernel"):
        call(kcode=7)
    with pytest.raises(TypeError, match="int64"):
        call(ids=np.zeros(4))
    with pytest.raises(TypeError, match="writable"):
        ro = np.zeros(4)
        ro.flags.writeable = False
        call(a=ro)
