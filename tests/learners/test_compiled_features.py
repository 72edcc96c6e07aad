"""The compiled feature maps (kernelstream.learners.compiled, _ck_features.c): random Fourier
features, kernel rows times a matrix, Gaussian rows that keep their distances, and the block
driver of FOGD, NOGD, SkeGD, OKL-GD and OKS-SIL. The same numbers as the numpy code up to
round-off, the same draws where numpy's are exact, safe on bad calls."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from kernelstream.learners import compiled, make
from kernelstream.learners.experts import weighted_distinct
from kernelstream.learners.kernels import make_kernel

fk = compiled.fk
needs_fk = pytest.mark.skipif(fk is None, reason=f"compiled kernels not in use: {compiled.STATUS}")

FEATURE_LEARNERS = ("fogd", "nogd", "skegd", "okl-gd", "oks-sil")


def _data(n: int = 400, d: int = 12, density: float = 1.0, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < density)
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return np.ascontiguousarray(X), y


@needs_fk
def test_cos_sin_are_within_two_ulp() -> None:
    rng = np.random.default_rng(1)
    for scale in (1.0, 30.0, 1e3, 9e4):
        u = rng.standard_normal(3001) * scale
        z = np.empty(2 * len(u))
        work = np.empty(1, dtype=np.int64)
        fk.score(compiled.rff_map(np.ascontiguousarray(u[None, :]), 1.0), np.zeros(len(z)),
                 np.ones(1), 1.0, None, z, work)
        D = len(u)
        assert np.max(np.abs(z[:D] - np.cos(u))) <= 2.3e-16
        assert np.max(np.abs(z[D:] - np.sin(u))) <= 2.3e-16
    far = np.array([2e5, -3e7, 1e300, 0.0])  # beyond the reduction: libm's numbers
    z = np.empty(8)
    fk.score(compiled.rff_map(np.ascontiguousarray(far[None, :]), 1.0), np.zeros(8),
             np.ones(1), 1.0, None, z, np.empty(1, dtype=np.int64))
    assert z.tolist() == [math.cos(v) for v in far] + [math.sin(v) for v in far]


@needs_fk
@pytest.mark.parametrize("density", [1.0, 0.2])
def test_maps_match_numpy(density: float) -> None:
    rng = np.random.default_rng(2)
    X, _ = _data(30, 9, density)
    x = X[0] * 1.1
    xx = float(x @ x)
    sqn = np.einsum("ij,ij->i", X, X)
    work = np.empty(9, dtype=np.int64)
    # random Fourier features
    om = rng.standard_normal((20, 9))
    w = rng.standard_normal(40)
    z = np.empty(40)
    f = fk.score(compiled.rff_map(np.ascontiguousarray(om.T), 0.3), w, x, xx, None, z, work)
    zr = np.concatenate([np.cos(om @ x), np.sin(om @ x)])
    np.testing.assert_allclose(z, zr, rtol=0, atol=1e-13)
    assert math.isclose(f, 0.3 * float(w @ zr), rel_tol=1e-12)
    for kernel in ("gaussian", "polynomial", "linear"):
        kern = make_kernel(kernel, 0.2, 3)
        krow = kern.row(X[:25], sqn[:25], x, xx)
        a = rng.standard_normal(25)
        k = np.empty(25)
        f = fk.score(compiled.row_map(X, sqn, 25, kern), a, x, xx, None, k, work)
        np.testing.assert_allclose(k, krow, rtol=1e-12, atol=1e-15)
        assert math.isclose(f, float(a @ krow), rel_tol=1e-11, abs_tol=1e-13)
        M = rng.standard_normal((4, 25))
        v = rng.standard_normal(4)
        k, z = np.empty(25), np.empty(4)
        k, z = np.empty(25), np.empty(8)
        f = fk.score(compiled.proj_map(X, sqn, 25, kern, compiled.padded_t(M), 4), v, x, xx, k,
                     z, work)
        np.testing.assert_allclose(z[:4], M @ krow, rtol=1e-11, atol=1e-13)
        assert math.isclose(f, float(v @ (M @ krow)), rel_tol=1e-10, abs_tol=1e-12)
    # Gaussian rows that keep their distances: one width, or one per row
    d2 = np.maximum(sqn[:25] - 2.0 * (X[:25] @ x) + xx, 0.0)
    for g in (0.3, rng.random(25)):
        k, z = np.empty(25), np.empty(25)
        a = rng.standard_normal(25)
        f = fk.score(compiled.dist_map(X, sqn, 25, g), a, x, xx, k, z, work)
        np.testing.assert_allclose(k, d2, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(z, np.exp(-d2 * g), rtol=1e-12)
        assert math.isclose(f, float(a @ np.exp(-d2 * g)), rel_tol=1e-11, abs_tol=1e-13)


@needs_fk
@pytest.mark.parametrize("name", FEATURE_LEARNERS)
def test_learner_runs_compiled_and_matches_numpy(name: str, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    X, y = _data(600, 10)
    kw = {"n_components": 50} if name == "fogd" else {"budget": 40}
    if name in ("nogd", "skegd"):
        kw["rank"] = 6
    m = make(name, seed=3, gamma=0.1, **kw)
    s = m.predict_learn_many(X, y)
    assert m._compiled and type(m).compiled_rounds()
    monkeypatch.setattr(compiled, "fk", None)
    r = make(name, seed=3, gamma=0.1, **kw)
    s_ref = r.predict_learn_many(X, y)
    assert not r._compiled
    # round-off only: the same decisions on all but a handful of near-zero scores
    assert np.mean(np.sign(s) != np.sign(s_ref)) < 0.02
    np.testing.assert_allclose(s[:50], s_ref[:50], rtol=1e-9, atol=1e-12)


@needs_fk
def test_fogd_keeps_its_state_orientation(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(50, 7)
    m = make("fogd", seed=4, n_components=30)
    m.predict_learn_many(X[:30], y[:30])
    c = pickle.loads(pickle.dumps(m))  # Ω travels once, and comes back as one matrix
    assert np.shares_memory(c._omega, c._omega_t)
    np.testing.assert_array_equal(c.predict_learn_many(X[30:], y[30:]),
                                  m.predict_learn_many(X[30:], y[30:]))
    monkeypatch.setattr(compiled, "fk", None)
    r = make("fogd", seed=4, n_components=30)
    r.predict_learn_many(X[:30], y[:30])
    om, om_ref = m.get_state()["fogd.omega"], r.get_state()["fogd.omega"]
    assert om.shape == (30, 7) and om.flags.c_contiguous
    assert np.array_equal(om, om_ref)  # the same draw, stored as before


@needs_fk
def test_cdf_search_is_numpys_search() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 7, 200):
        w = rng.random(n) * (rng.random(n) < 0.7)
        w[0] += 1e-3
        u = rng.random(50)
        c = np.cumsum(w)
        want = np.searchsorted(c, u * c[-1], side="right").tolist()
        assert fk.cdf_search(w, u) == want


def test_weighted_distinct_draws_as_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    w = np.random.default_rng(6).random(150) ** 8  # skewed: repeats and redraws happen
    got = [weighted_distinct(np.random.default_rng(s), w, 3) for s in range(40)]
    monkeypatch.setattr(compiled, "fk", None)
    ref = [weighted_distinct(np.random.default_rng(s), w, 3) for s in range(40)]
    assert got == ref


@needs_fk
def test_sample_kernel() -> None:
    X, _ = _data(10, 5)
    psi = np.random.default_rng(7).random(10)
    idx = [4, 1, 7]
    K, b = fk.sample_kernel(X, psi, idx, -0.25)
    Xs = X[idx]
    d = np.einsum("ij,ij->i", Xs, Xs)
    Kref = np.exp(-0.25 * (d[:, None] + d[None, :] - 2.0 * Xs @ Xs.T))
    np.testing.assert_allclose(np.array(K), Kref, rtol=1e-12)
    assert [K[i][i] for i in range(3)] == [1.0, 1.0, 1.0] and K[0][2] == K[2][0]
    assert b == psi[idx].tolist()


@needs_fk
def test_bad_calls_raise_instead_of_reading_out_of_bounds() -> None:
    X = np.zeros((4, 3))
    sqn, a, k, z = np.zeros(4), np.zeros(4), np.empty(4), np.empty(4)
    work = np.empty(3, dtype=np.int64)
    x = np.ones(3)
    kern = make_kernel("gaussian", 1.0, 2)
    with pytest.raises(ValueError, match="exceeds the store"):
        fk.score(compiled.row_map(X, sqn, 5, kern), a, x, 3.0, None, z, work)
    with pytest.raises(ValueError, match="malformed"):
        fk.score((compiled.FM_ROW, X, sqn, 2, 1.0), a, x, 3.0, None, z, work)
    with pytest.raises(ValueError, match="wrong size"):
        fk.score(compiled.row_map(X, sqn, 2, kern), a, np.ones(4), 3.0, None, z, work)
    with pytest.raises(ValueError, match="must be n x r"):
        fk.score(compiled.proj_map(X, sqn, 3, kern, np.zeros((2, 8)), 4), a, x, 3.0, k, z, work)
    with pytest.raises(ValueError, match="wrong size"):  # z must hold the padded features
        fk.score(compiled.proj_map(X, sqn, 3, kern, np.zeros((3, 8)), 4), a, x, 3.0, k, z, work)
    with pytest.raises(ValueError, match="needs k"):
        fk.score(compiled.dist_map(X, sqn, 2, 1.0), a, x, 3.0, None, z, work)
    with pytest.raises(TypeError, match="float64"):
        fk.score(compiled.rff_map(X.astype(np.float32), 1.0), a, x, 3.0, None, z, work)
    with pytest.raises(IndexError):
        fk.sample_kernel(X, sqn, [0, 9], -1.0)
    # the block driver: sizes, and what on_fire may answer
    Z, y = np.ones((3, 3)), np.ones(3)
    fm = compiled.row_map(X, sqn, 2, kern)
    args = (Z, np.full(3, 3.0), y, 0, 3, compiled.ALWAYS, None, 1.0, np.empty(3), None, 2, k, z,
            work)
    with pytest.raises(ValueError, match="wrong size"):
        fk.run(fm, a, Z, np.ones(2), y, 0, 3, 0, None, 1.0, np.empty(3), None, 2, k, z, work,
               None)
    with pytest.raises(TypeError, match="on_fire must return"):
        fk.run(fm, a, *args, lambda i: 1)
    with pytest.raises(ValueError, match="exceeds the store"):
        fk.run(fm, a, *args, lambda i: (compiled.row_map(X, sqn, 9, kern), a, 2))

    def boom(i: int) -> None:
        raise RuntimeError("update failed")

    with pytest.raises(RuntimeError, match="update failed"):
        fk.run(fm, a, *args, boom)
    assert fk.run(fm, a, *args, lambda i: None) == (1, False)  # stops after row 0
    assert fk.run(fm, a, *args, None) == (0, True)  # hands row 0 back
