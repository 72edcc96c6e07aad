"""The primal form of the linear-kernel Perceptron, PA-I and OGD (issue 28,
:mod:`kernelstream.learners._primal`): one weight vector whose results equal the dual form's
up to round-off (dense and sparse rows), exactly on integer data, with a state that
round-trips bit for bit and dual states that still load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelstream.learners import Learner, make
from kernelstream.learners._primal import LinearPrimal, lk
from kernelstream.sparse import CSR

pytestmark = pytest.mark.skipif(lk is None, reason="the compiled _ck_linear is not built")

DATA = Path(__file__).resolve().parents[1] / "data"
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("perceptron", {}),
    ("pa-i", {"c": 0.5}),
    ("ogd", {"eta": 0.3}),
    ("ogd", {"eta": 0.3, "lam": 0.01}),
    ("ogd", {"eta": 0.2, "lam": 0.02, "loss": "logistic"}),
]


def _rcv1() -> tuple[CSR, np.ndarray]:
    X, y = CSR.from_libsvm_bytes((DATA / "rcv1_100.svm").read_bytes())
    return X, np.where(y > 0, 1.0, -1.0)


def _wide(X: CSR) -> CSR:  # the same rows, columns spread up to 2^31 - 2
    return CSR(X.indptr, X.indices * 40_000, X.data, (1 << 31) - 1)


@pytest.mark.parametrize(("name", "params"), CONFIGS)
@pytest.mark.parametrize("rows", ["sparse", "dense", "wide"])
def test_primal_equals_dual_up_to_round_off(name: str, params: dict[str, Any], rows: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _rcv1()
    Z: Any = {"sparse": X, "dense": X.to_dense(), "wide": _wide(X)}[rows]
    p = make(name, kernel="linear", **params)
    sp = p.predict_learn_many(Z, y)
    assert p._primal and p.weights  # one weight vector, no support vectors
    # a Python float, as the dual's (the stream writes scores into its rows as they are)
    assert type(p.predict_one(Z[:1] if isinstance(Z, CSR) else Z[0])) is float
    with monkeypatch.context() as mp:
        mp.setattr(LinearPrimal, "primal_linear", False)
        d = make(name, kernel="linear", **params)
        sd = d.predict_learn_many(Z, y)
        assert not d._primal
    np.testing.assert_allclose(sp, sd, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(sd))))
    assert np.array_equal(np.sign(sp), np.sign(sd))
    assert p.n_support_vectors == d.n_support_vectors  # the terms the dual form holds
    assert p.sv.n == d.sv.n
    # the per-example path is the block's, bit for bit
    one = make(name, kernel="linear", **params)
    loop = [one.step(Z[i:i + 1] if isinstance(Z, CSR) else Z[i], y[i]) for i in range(len(y))]
    assert np.array_equal(np.array(loop), sp)
    # w is the dual's expansion Σ a_j x_j; the sparse table follows the columns seen
    cols, w = p.weights
    pts, coef = d.sv.points, d.sv.coef
    if isinstance(pts, CSR):
        owner = np.repeat(np.arange(pts.n_rows), np.diff(pts.indptr))
        want_cols, inv = np.unique(pts.indices, return_inverse=True)
        want = np.zeros(len(want_cols))
        np.add.at(want, inv, coef[owner] * pts.data)
        assert cols is not None and np.array_equal(cols, want_cols)
        assert len(p._lin_tab) <= 8 * max(len(cols), 8)
    else:
        want = coef @ pts
        assert cols is None
    np.testing.assert_allclose(w, want, rtol=1e-9, atol=1e-12 * float(np.max(np.abs(want))))


@pytest.mark.parametrize("name", ["perceptron", "ogd"])
def test_exact_on_integer_data(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Integer rows and integer coefficients: both forms compute integers exactly, so the
    scores are equal, not merely close."""
    rng = np.random.default_rng(5)
    X = rng.integers(-3, 4, size=(400, 30)).astype(np.float64)
    y = np.where(X[:, 0] - X[:, 1] + rng.integers(-2, 3, 400) > 0, 1.0, -1.0)
    kw = {"eta": 1.0} if name == "ogd" else {}
    for Z in (X, CSR.from_dense(X)):
        sp = make(name, kernel="linear", **kw).predict_learn_many(Z, y)
        with monkeypatch.context() as mp:
            mp.setattr(LinearPrimal, "primal_linear", False)
            sd = make(name, kernel="linear", **kw).predict_learn_many(Z, y)
        assert np.array_equal(sp, sd)
        assert np.array_equal(sp, np.round(sp))


@pytest.mark.parametrize(("name", "params"), CONFIGS)
@pytest.mark.parametrize("rows", ["sparse", "dense"])
def test_state_round_trip_and_dual_states(name: str, params: dict[str, Any], rows: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _rcv1()
    Z: Any = X if rows == "sparse" else X.to_dense()
    m = make(name, kernel="linear", **params)
    m.predict_learn_many(Z[:60], y[:60])
    st = m.get_state()
    assert any(k.startswith("lin.") for k in st) and not any(k.startswith("sv.") for k in st)
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in st.values())
    back = Learner.from_state(st)
    rest = m.predict_learn_many(Z[60:], y[60:])
    assert np.array_equal(back.predict_learn_many(Z[60:], y[60:]), rest)
    for k, v in back.get_state().items():
        assert np.array_equal(v, m.get_state()[k]), k
    # a dual state (as saved before the primal form existed) loads into the primal form
    with monkeypatch.context() as mp:
        mp.setattr(LinearPrimal, "primal_linear", False)
        d = make(name, kernel="linear", **params)
        d.predict_learn_many(Z[:60], y[:60])
        dst = d.get_state()
        dual_rest = d.predict_learn_many(Z[60:], y[60:])
    assert any(k.startswith("sv.") for k in dst)
    conv = Learner.from_state(dst)
    assert conv._primal and conv.n_support_vectors == int(dst["sv.a"].shape[0])
    np.testing.assert_allclose(conv.predict_learn_many(Z[60:], y[60:]), dual_rest, rtol=1e-9,
                               atol=1e-9 * float(np.max(np.abs(dual_rest))))


@pytest.mark.parametrize("rows", ["sparse", "dense"])
def test_primal_state_loads_into_the_dual_form(rows: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A build without the compiled module (dual form) still loads a primal state: one
    support vector w, the same function."""
    X, y = _rcv1()
    Z: Any = X if rows == "sparse" else X.to_dense()
    m = make("pa-i", kernel="linear")
    m.predict_learn_many(Z[:60], y[:60])
    st = m.get_state()
    probe = [m.predict_one(Z[i:i + 1] if rows == "sparse" else Z[i]) for i in range(60, 80)]
    monkeypatch.setattr(LinearPrimal, "primal_linear", False)
    d = Learner.from_state(st)
    assert not d._primal and d.sv.n == 1
    got = [d.predict_one(Z[i:i + 1] if rows == "sparse" else Z[i]) for i in range(60, 80)]
    np.testing.assert_allclose(got, probe, rtol=1e-9, atol=1e-12)


def test_subclass_changing_the_update_keeps_the_dual_form() -> None:
    from kernelstream.learners.perceptron import Perceptron

    class Halved(Perceptron):
        def _update(self, x: Any, xx: float, y: float, score: float, aux: Any) -> None:
            super()._update(x, xx, 0.5 * y, score, aux)

    m = Halved(kernel="linear")
    m.learn_one([1.0, 0.0], -1)
    assert not m._primal and m.sv.n == 1
