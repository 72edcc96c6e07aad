"""rff-rls: recursive least squares on random Fourier features is online ridge regression
exactly (w, P and every prequential score equal the closed-form ridge solution on the learner's
own features), stays stable over long runs, learns a smooth regression, and its compiled
rounds (_ck_features.c: rls_update, rls_run, rls_step) give the numpy reference's numbers up
to round-off and each other's bit for bit; the state holds P's packed upper triangle and a
state with the full matrix (the format before) restores and continues bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelstream.learners import compiled, make
from kernelstream.learners.rff_rls import RFFRLS

needs_fk = pytest.mark.skipif(compiled.fk is None,
                              reason=f"compiled kernels not in use: {compiled.STATUS}")


@pytest.fixture(params=["compiled", "numpy"])
def lane(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test on the compiled rounds (when built) and on the numpy reference."""
    if request.param == "numpy":
        monkeypatch.setattr(compiled, "fk", None)
    elif compiled.fk is None:
        pytest.skip(f"compiled kernels not in use: {compiled.STATUS}")
    return str(request.param)


def _features(m, X: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The learner's own z(x) rows: D^{-1/2}[cos Ωx; sin Ωx] from its stored Ω."""
    om = m.get_state()["rls.omega"]
    U = X @ om.T
    return np.hstack([np.cos(U), np.sin(U)]) / math.sqrt(om.shape[0])


def _data(n: int, d: int, task: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2 % d]
    if task == "regression":
        return X, f + 0.1 * rng.normal(size=n)
    return X, np.where(f + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_equals_the_exact_ridge_solution(lane: str, task: str) -> None:
    n, lam = 160, 0.3
    X, y = _data(n, 4, task)
    loss = "square" if task == "regression" else "square-pm1"
    m = make("rff-rls", seed=2, n_components=30, gamma=0.4, lam=lam, loss=loss)
    assert m.task == task
    s = m.predict_learn_many(X[:100], y[:100])
    s = np.concatenate([s, [m.step(X[i], y[i]) for i in range(100, n)]])
    assert m._compiled == (lane == "compiled")
    Z = _features(m, X)
    k = Z.shape[1]
    A = lam * np.eye(k) + Z.T @ Z
    st = m.get_state()
    np.testing.assert_allclose(st["rls.w"], np.linalg.solve(A, Z.T @ y), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(m.P, np.linalg.inv(A), rtol=1e-9, atol=1e-12)
    # every prequential score is the ridge solution of the rows before it, at this row
    want = [Z[i] @ np.linalg.solve(lam * np.eye(k) + Z[:i].T @ Z[:i], Z[:i].T @ y[:i])
            for i in range(n)]
    assert s[0] == 0.0
    np.testing.assert_allclose(s, want, rtol=1e-9, atol=1e-12)


def test_long_runs_stay_exact_and_symmetric(lane: str) -> None:
    n, lam = 20_000, 0.01
    X, y = _data(n, 6, "regression", seed=3)
    m = make("rff-rls", seed=5, n_components=40, gamma=0.3, lam=lam, loss="square")
    for a in range(0, n, 2_500):
        m.predict_learn_many(X[a:a + 2_500], y[a:a + 2_500])
    P, w = m.P, m.get_state()["rls.w"]
    assert np.array_equal(P, P.T)  # bit for bit
    if lane == "numpy":  # the reference updates both triangles by the same products
        assert np.array_equal(m._P, m._P.T)
    else:  # the compiled rounds keep the upper triangle only, packed row by row
        k = len(w)
        assert m._P.shape == (k * (k + 1) // 2,)
        assert np.array_equal(P[np.triu_indices(k)], m._P)
    assert np.linalg.eigvalsh(P).min() > 0.0
    Z = _features(m, X)
    A = lam * np.eye(Z.shape[1]) + Z.T @ Z
    exact = np.linalg.solve(A, Z.T @ y)
    assert np.linalg.norm(w - exact) <= 1e-7 * np.linalg.norm(exact)
    assert np.linalg.norm(P - np.linalg.inv(A)) <= 1e-7 * np.linalg.norm(P)


def test_learns_a_smooth_regression(lane: str) -> None:
    rng = np.random.default_rng(7)
    n = 3_000
    X = rng.uniform(-2.0, 2.0, size=(n, 3))
    y = np.sin(2.0 * X[:, 0]) * np.cos(X[:, 1]) + 0.5 * X[:, 2] ** 2 + 0.05 * rng.normal(size=n)
    m = make("rff-rls", seed=1, n_components=100, gamma=0.5, loss="square")
    s = m.predict_learn_many(X, y)
    running_mean = np.concatenate([[0.0], np.cumsum(y)[:-1] / np.arange(1, n)])
    mse, base = np.mean((s - y) ** 2), np.mean((running_mean - y) ** 2)
    assert mse < 0.1 * base, (mse, base)
    assert np.mean((s[-1000:] - y[-1000:]) ** 2) < 0.05 * base  # and keeps improving


@needs_fk
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_compiled_matches_the_numpy_reference(task: str, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    X, y = _data(800, 9, task, seed=4)
    loss = "square" if task == "regression" else "square-pm1"
    kw = {"seed": 3, "n_components": 60, "gamma": 0.1, "lam": 0.5, "loss": loss}
    m = make("rff-rls", **kw)
    s = m.predict_learn_many(X, y)
    assert m._compiled and type(m).compiled_rounds()
    monkeypatch.setattr(compiled, "fk", None)
    r = make("rff-rls", **kw)
    s_ref = r.predict_learn_many(X, y)
    assert not r._compiled
    # round-off only: the ridge solution is well conditioned, so it does not grow
    np.testing.assert_allclose(s, s_ref, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(m.w, r.w, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(m.P, r.P, rtol=1e-9, atol=1e-12)
    assert np.array_equal(r._P, r._P.T)


@needs_fk
def test_compiled_paths_agree_bit_for_bit() -> None:
    """Block driver (its fused next-row pass, over uneven blocks), fused step, predict_one
    then learn_one (score + rls_update) and learn_one alone: the same numbers."""
    X, y = _data(300, 5, "regression", seed=6)
    kw = {"seed": 8, "n_components": 25, "gamma": 0.3, "loss": "square"}
    a, b, c, e = (make("rff-rls", **kw) for _ in range(4))
    sa = np.concatenate([a.predict_learn_many(X[i:j], y[i:j])
                         for i, j in ((0, 1), (1, 97), (97, 98), (98, 300))])
    sb = np.array([b.step(X[i], y[i]) for i in range(300)])
    sc = []
    for i in range(300):
        sc.append(c.predict_one(X[i]))
        c.learn_one(X[i], y[i])
    for i in range(300):
        e.learn_one(X[i], y[i])
    assert np.array_equal(sa, sb) and np.array_equal(sa, np.array(sc))
    for m in (b, c, e):
        assert np.array_equal(m.w, a.w) and np.array_equal(m.P, a.P)
    assert np.array_equal(a.P, a.P.T)


@needs_fk
def test_compiled_calls_refuse_bad_arguments() -> None:
    fk = compiled.fk
    k = 8
    eye = np.eye(k)[np.triu_indices(k)]  # P's packed upper triangle
    w, P, z, u = np.zeros(k), eye.copy(), np.ones(k), np.empty(2 * k)
    with pytest.raises(ValueError, match="wrong size"):
        fk.rls_update(w, np.eye(k + 1)[np.triu_indices(k + 1)], z, u, 1.0, 0.0)
    with pytest.raises(ValueError, match="wrong size"):  # the full matrix: not P's layout
        fk.rls_update(w, np.eye(k), z, u, 1.0, 0.0)
    with pytest.raises(TypeError):
        fk.rls_update(w, P.astype(np.float32), z, u, 1.0, 0.0)
    om_t = np.ones((3, k // 2))
    X, out, work = np.ones((2, 3)), np.empty(2), np.empty(3, dtype=np.int64)
    with pytest.raises(ValueError, match="random Fourier"):
        fk.rls_run(compiled.dist_map(X, np.ones(2), 2, 0.5), w, P, X, np.ones(2), out,
                   np.empty(2 * k), u, work)
    with pytest.raises(ValueError, match="wrong size"):  # z must hold two rows
        fk.rls_run(compiled.rff_map(om_t, 0.5), w, P, X, np.ones(2), out, np.empty(k), u,
                   work)
    with pytest.raises(ValueError, match="wrong size"):  # fewer labels than rows
        fk.rls_run(compiled.rff_map(om_t, 0.5), w, P, X, np.ones(1), out, np.empty(2 * k), u,
                   work)
    assert fk.rls_step(compiled.rff_map(om_t, 0.5), w, P, np.ones(4), 1.0, z, u, work) is None
    assert np.array_equal(P, eye) and not w.any()  # nothing changed


def test_state_packs_p_and_restores_the_full_matrix_format(lane: str) -> None:
    """The state keeps P's upper triangle packed row by row (k(k+1)/2 numbers, half the full
    matrix; the compiled rounds hold it so too); a state saved with the full k x k matrix (as
    before P was packed) restores, as does the packed one, and both continue bit for bit like
    a learner that never stopped."""
    X, y = _data(400, 6, "classification", seed=9)
    kw = {"seed": 4, "n_components": 30, "gamma": 0.2, "lam": 0.7}
    k = 60
    ref = make("rff-rls", **kw)
    s_ref = np.concatenate([ref.predict_learn_many(X[:150], y[:150]),
                            ref.predict_learn_many(X[150:], y[150:])])
    m = make("rff-rls", **kw)
    s0 = m.predict_learn_many(X[:150], y[:150])
    st = m.get_state()
    assert st["rls.P"].shape == (k * (k + 1) // 2,)
    assert np.array_equal(st["rls.P"], m.P[np.triu_indices(k)])
    assert m._P.nbytes == (k * (k + 1) // 2 if lane == "compiled" else k * k) * 8
    assert RFFRLS.model_bytes(kw)[0] == m._P.nbytes
    old = dict(st, **{"rls.P": m.P})  # the full, mirrored matrix
    for state in (st, old):
        r = make("rff-rls", **kw)
        r.set_state(state)
        assert np.array_equal(r.P, m.P)
        s = np.concatenate([s0, r.predict_learn_many(X[150:], y[150:])])
        assert np.array_equal(s, s_ref)
        assert np.array_equal(r.P, ref.P) and np.array_equal(r.w, ref.w)
    r = make("rff-rls", **kw)
    with pytest.raises(ValueError, match=r"rls\.P has shape"):
        r.set_state(dict(st, **{"rls.P": st["rls.P"][1:]}))
