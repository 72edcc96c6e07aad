"""Behavioural tests of the projection / low-rank / random-feature learners and their helpers:
linalg (bordered inverse, randomized eigen, pinv), rff, projectron(++), nogd, fogd.

The generic conformance checks (determinism, state round-trip, batch == loop, …) live in
test_conformance.py and are not repeated here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelstream.learners import make
from kernelstream.learners.kernels import Gaussian
from kernelstream.learners.linalg import (
    bordered_inverse,
    bordered_inverse_append,
    gram_append,
    gram_remove,
    inverse_remove,
    is_aligned,
    pinv,
    top_eigh,
)
from kernelstream.learners.rff import (
    RFF,
    compiled_layout,
    draw_learner_omega,
    draw_omega,
    scale_from_gamma,
    scale_from_sigma,
)


def _blobs(n: int, d: int = 4, seed: int = 0, noise: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] + 0.5 * np.sin(2 * X[:, 1]) >= 0, 1.0, -1.0)
    flip = rng.random(n) < noise
    y[flip] *= -1
    return X, y


# -- linalg ----------------------------------------------------------------------------------------
def test_bordered_inverse_equals_inv_after_many_inserts_and_removals() -> None:
    rng = np.random.default_rng(1)
    kern = Gaussian(0.3)
    pts: list[np.ndarray] = []
    cap = 60
    Kinv = np.zeros((cap, cap))
    G = np.zeros((cap, cap))
    for step in range(150):
        n = len(pts)
        if n >= 10 and (n == cap or rng.random() < 0.3):
            j = int(rng.integers(n))
            inverse_remove(Kinv, n, j)
            gram_remove(G, n, j)
            pts[j] = pts[-1]  # the SVStore.remove convention: last point moves into slot j
            pts.pop()
        else:
            x = rng.normal(size=6)
            if n:
                P = np.array(pts)
                k = kern.row(P, (P * P).sum(1), x, float(x @ x))
                d = Kinv[:n, :n] @ k
                delta = 1.0 - float(k @ d)
            else:
                k, d, delta = None, None, 1.0
            bordered_inverse_append(Kinv, n, d, delta)
            gram_append(G, n, k, 1.0)
            pts.append(x)
        if step % 25 == 24 or step == 149:
            n = len(pts)
            K = kern.matrix(np.array(pts))
            np.testing.assert_allclose(G[:n, :n], K, atol=1e-15)
            inv = np.linalg.inv(K)
            # backward-stable bound: error ≲ cond(K)·eps·‖K⁻¹‖ (cond ≈ 7e2 here)
            assert np.abs(Kinv[:n, :n] - inv).max() < 1e-9 * np.abs(inv).max()
            np.testing.assert_allclose(K @ Kinv[:n, :n], np.eye(n), atol=1e-9)


def test_bordered_inverse_allocating_form() -> None:
    rng = np.random.default_rng(2)
    A = rng.normal(size=(6, 6))
    K = A @ A.T + 6 * np.eye(6)
    Kinv = np.linalg.inv(K[:5, :5])
    d = Kinv @ K[:5, 5]
    out = bordered_inverse(Kinv, d, K[5, 5] - K[:5, 5] @ d)
    np.testing.assert_allclose(out, np.linalg.inv(K), rtol=1e-10)


def test_randomized_eig_close_to_exact_on_low_rank_psd() -> None:
    rng = np.random.default_rng(3)
    G = rng.normal(size=(150, 8))
    A = G @ G.T  # rank 8
    lam_e, V_e = top_eigh(A, 8, exact=True)
    r = np.random.default_rng(7)
    before = r.bit_generator.state["state"]["state"]
    lam_r, V_r = top_eigh(A, 8, exact=False, rng=r)
    assert r.bit_generator.state["state"]["state"] != before  # consumes the caller's rng
    assert np.all(np.diff(lam_r) <= 0) and np.all(np.diff(lam_e) <= 0)
    np.testing.assert_allclose(lam_r, lam_e, rtol=1e-9)
    np.testing.assert_allclose(V_r @ V_r.T, V_e @ V_e.T, atol=1e-8)  # same subspace
    np.testing.assert_allclose((V_r * lam_r) @ V_r.T, A, atol=1e-8 * np.abs(A).max())
    np.testing.assert_allclose(V_r.T @ V_r, np.eye(8), atol=1e-12)
    with pytest.raises(ValueError, match="rng"):
        top_eigh(A, 3, exact=False)


def test_randomized_eig_top_k_of_full_rank_matrix() -> None:
    rng = np.random.default_rng(4)
    Q = np.linalg.qr(rng.normal(size=(100, 100)))[0]
    lam = 0.5 ** np.arange(100)  # fast decay: 2 power iterations give near-exact top pairs
    A = (Q * lam) @ Q.T
    got, _ = top_eigh(A, 5, exact=False, rng=np.random.default_rng(0))
    np.testing.assert_allclose(got, lam[:5], rtol=1e-6)


def test_pinv_tolerance() -> None:
    rng = np.random.default_rng(5)
    U = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    V = np.linalg.qr(rng.normal(size=(4, 4)))[0]
    s = np.array([3.0, 1.0, 1e-3, 1e-10])  # the last is below the 1e-8 floor
    A = U[:, :4] @ np.diag(s) @ V.T
    P = pinv(A)
    expect = V @ np.diag([1 / 3.0, 1.0, 1e3, 0.0]) @ U[:, :4].T
    np.testing.assert_allclose(P, expect, atol=1e-9)
    full = rng.normal(size=(5, 3))
    np.testing.assert_allclose(pinv(full), np.linalg.pinv(full), atol=1e-12)


# -- random Fourier features -----------------------------------------------------------------------
def test_rff_unit_norm_and_shapes() -> None:
    f = RFF.draw(np.random.default_rng(0), 64, 5)
    X = np.random.default_rng(1).normal(size=(7, 5))
    Z = f.transform(X, scale=0.7)
    assert Z.shape == (7, 128)
    np.testing.assert_allclose((Z * Z).sum(1), 1.0, atol=1e-14)
    np.testing.assert_allclose(Z[3], f.transform(X[3], scale=0.7), atol=1e-15)
    multi = f.transform_multi(X, [0.7, 2.0])
    assert multi.shape == (2, 7, 128)
    np.testing.assert_allclose(multi[1], f.transform(X, scale=2.0), atol=1e-15)
    one = f.transform_multi(X[0], [0.7, 2.0])
    np.testing.assert_allclose(one[0], Z[0], atol=1e-15)
    assert math.isclose(scale_from_gamma(1 / 8), scale_from_sigma(2.0))


def test_rff_inner_products_approach_gaussian_kernel() -> None:
    rng = np.random.default_rng(6)
    X = rng.normal(size=(30, 4)) * 0.6
    gamma = 0.4
    K = Gaussian(gamma).matrix(X)
    errs = []
    for D in (50, 800, 12800):
        f = RFF.draw(np.random.default_rng(D), D, 4)
        Z = f.transform(X, scale=scale_from_gamma(gamma))
        errs.append(float(np.abs(Z @ Z.T - K).max()))
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 0.05  # Monte-Carlo error ~ 1/sqrt(D)
    # folding the scale into Ω (single-gamma form, rows N(0, 2γI)) gives the same map
    om = draw_omega(np.random.default_rng(9), 100, 4, scale_from_gamma(gamma))
    om1 = draw_omega(np.random.default_rng(9), 100, 4)
    np.testing.assert_allclose(RFF(om).transform(X), RFF(om1).transform(X, scale_from_gamma(gamma)),
                               atol=1e-12)



@pytest.mark.parametrize("D,d", [(100, 4), (3, 300), (40, 1)])
def test_learner_omega_same_draw_in_either_layout(D: int, d: int) -> None:
    # FOGD's and RFF-RLS's Ω: the compiled layout (a view of a contiguous Ωᵀ, which
    # compiled_layout keeps without a copy) holds draw_omega's numbers and leaves the generator
    # where draw_omega leaves it
    r1, r2 = np.random.default_rng(5), np.random.default_rng(5)
    om_t = draw_learner_omega(r1, D, d, 0.7, compiled=True)
    om = draw_learner_omega(r2, D, d, 0.7, compiled=False)
    assert om_t.shape == om.shape == (D, d) and om_t.T.flags.c_contiguous
    assert np.array_equal(om_t, om) and np.array_equal(om, draw_omega(np.random.default_rng(5),
                                                                      D, d, 0.7))
    assert r1.random() == r2.random()
    omega_t, omega, _ = compiled_layout(om_t)
    assert np.shares_memory(omega_t, om_t) and np.shares_memory(omega, om_t)

# -- Projectron ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["projectron", "projectron++"])
@pytest.mark.parametrize("params", [{"budget": 30}, {"budget": 0, "threshold": 0.2}])
def test_projectron_inverse_buffer_stays_aligned_through_copies(name: str, params: dict) -> None:
    # the compiled projection reads K^-1 in 64-byte vectors along its rows: the buffer starts
    # on a 64-byte boundary and its side is a multiple of 8 whether made, grown, restored,
    # deep-copied or unpickled; a copy continues bit-identically
    import copy
    import pickle

    X, y = _blobs(400, seed=5)
    m = make(name, gamma=0.5, **params)
    m.learn_one(X[0], y[0])  # the buffer is made with the first example
    assert is_aligned(m._Kinv) and m._Kinv.shape[0] in (16, 32)  # unbounded: 16; B = 30: 32
    m.predict_learn_many(X[1:300], y[1:300])
    restored = make(name, gamma=0.5, **params)
    restored.set_state(m.get_state())
    copies = [copy.deepcopy(m), pickle.loads(pickle.dumps(m)), restored]
    want = m.predict_learn_many(X[300:], y[300:])
    for c in copies:
        assert is_aligned(c._Kinv) and c._Kinv.shape[0] % 8 == 0
        np.testing.assert_array_equal(c.predict_learn_many(X[300:], y[300:]), want)
    assert is_aligned(m._Kinv)


@pytest.mark.parametrize("name", ["projectron", "projectron++"])
@pytest.mark.parametrize("params", [{"budget": 30}, {"budget": 0, "threshold": 0.2}])
def test_projectron_inverse_gram_and_norm_stay_exact(name: str, params: dict) -> None:
    X, y = _blobs(600, seed=2)
    m = make(name, gamma=0.5, **params)
    m.predict_learn_many(X, y)
    n = m.n_support_vectors
    assert n >= 20  # unbounded run grows its buffers past the initial 16
    if params["budget"]:
        assert n == params["budget"]
    K = m.kern.matrix(m.sv.points)
    np.testing.assert_allclose(m._Kinv[:n, :n], np.linalg.inv(K), rtol=1e-6, atol=1e-7)
    assert math.isclose(m.sv.norm2, m.sv.exact_norm2(m.kern), rel_tol=1e-8)


def test_projectron_threshold_controls_sv_growth() -> None:
    X, y = _blobs(600, seed=3)
    counts = []
    for eta in (0.1, 0.5, 0.9):
        m = make("projectron", budget=0, threshold=eta, gamma=0.5)
        m.predict_learn_many(X, y)
        counts.append(m.n_support_vectors)
    assert counts[0] > counts[1] > counts[2] >= 1
    with pytest.raises(ValueError, match="threshold"):
        make("projectron", budget=0)


@pytest.mark.parametrize("name", ["projectron", "projectron++"])
def test_duplicate_point_is_projected_exactly(name: str) -> None:
    """Δ = 0 for a copy of an SV: the projection equals the Perceptron update y κ(x,·) (the
    function is the same everywhere), and no SV is added even with room in the budget."""
    X, y = _blobs(200, seed=4)
    m = make(name, budget=500, gamma=0.5)
    m.predict_learn_many(X, y)
    n0 = m.n_support_vectors
    assert 0 < n0 < 500
    Z = np.random.default_rng(0).normal(size=(20, 4))
    for j in range(0, n0, max(1, n0 // 5)):
        xd = m.sv.points[j].copy()
        f = m.predict_one(xd)
        yd = -1.0 if f >= 0 else 1.0  # force a mistake
        before = np.array([m.predict_one(z) for z in Z])
        m.learn_one(xd, yd)
        after = np.array([m.predict_one(z) for z in Z])
        kz = np.exp(-0.5 * ((Z - xd) ** 2).sum(1))
        np.testing.assert_allclose(after, before + yd * kz, atol=1e-7)
        assert m.n_support_vectors == n0


def test_projectronpp_margin_update_is_passive_aggressive() -> None:
    """Margin error on a duplicate (Δ = 0, β ≥ 0 always): τ = ℓ/‖Pk‖² < 1 moves y f(x) to 1."""
    m = make("projectron++", budget=10, gamma=0.5)
    m.learn_one([0.0, 0.0], 1)  # first SV, a = 1
    m.learn_one([3.0, 0.0], 1)  # far: margin error (y f ≈ 0.011) but Δ ≈ 1, so β < 0
    assert m.n_support_vectors == 1  # margin errors never add SVs
    m.learn_one([0.0, 0.0], 1)  # f = 1: no loss, no update
    a0 = m.sv.coef.copy()
    m.learn_one([0.0, 0.0], -1)  # mistake on a duplicate: projected, a ← a − 1
    np.testing.assert_allclose(m.sv.coef, a0 - 1.0, atol=1e-12)
    m.sv.a[0] = 0.4  # set up a margin error on the duplicate: y f = 0.4
    m.learn_one([0.0, 0.0], 1)
    assert math.isclose(m.predict_one([0.0, 0.0]), 1.0, rel_tol=1e-12)
    assert m.n_support_vectors == 1


def test_projectronpp_margin_beta_rejects_far_points() -> None:
    """β = τ(2ℓ − τ‖Pk‖² − 2U√Δ) < 0 when x is nearly orthogonal to the span."""
    m = make("projectron++", budget=10, gamma=0.5)
    m.learn_one([0.0, 0.0], 1)
    m.sv.a[0] = 0.5 / math.exp(-0.5 * 0.04)  # f([0.2, 0]) = 0.5: margin error with ℓ = 0.5
    a0 = m.sv.coef.copy()
    m.learn_one([0.2, 0.0], 1)  # close: Δ ≈ 0.04, β ≥ 0 → update
    assert not np.array_equal(m.sv.coef, a0)
    m.sv.a[0] = 0.5 / math.exp(-0.5 * 4.0)  # f([2, 0]) = 0.5, but Δ ≈ 1: β < 0
    a1 = m.sv.coef.copy()
    m.learn_one([2.0, 0.0], 1)
    np.testing.assert_array_equal(m.sv.coef, a1)


# -- NOGD ------------------------------------------------------------------------------------------
def _nogd_before_switch(**params) -> tuple:
    """A NOGD whose store just filled (still stage 1), and the rest of the stream."""
    X, y = _blobs(400, seed=5)
    m = make("nogd", gamma=0.5, **params)
    for i in range(len(X)):
        m.learn_one(X[i], y[i])
        if m.n_support_vectors == m.budget:
            return m, X[i + 1 :], y[i + 1 :]
    raise AssertionError("budget never filled")


def test_nogd_full_rank_features_reproduce_kernel_on_landmarks() -> None:
    m, _, _ = _nogd_before_switch(budget=25, rank=25)
    assert m.stage == 1
    P = m.sv.points
    KB = m.kern.matrix(P)
    np.testing.assert_allclose(m._K[:25, :25], KB, atol=1e-15)  # incremental Gram
    m._switch()
    Z = m._M @ KB  # column j = z(landmark j)
    np.testing.assert_allclose(Z.T @ Z, KB, atol=1e-8)


def test_nogd_low_rank_features_are_best_rank_k_approximation() -> None:
    m, _, _ = _nogd_before_switch(budget=30, rank=6)
    KB = m.kern.matrix(m.sv.points)
    m._switch()
    assert m._M.shape == (6, 30)
    Z = m._M @ KB
    lam = np.linalg.eigvalsh(KB)[::-1]
    err = np.linalg.norm(KB - Z.T @ Z, 2)
    assert math.isclose(err, lam[6], rel_tol=1e-6)  # Eckart–Young: spectral error = λ_{k+1}


def test_nogd_carry_reproduces_stage1_predictions_at_switch() -> None:
    for init in ("carry", "zero"):
        m, _, _ = _nogd_before_switch(budget=20, rank=20, init=init)
        Z = np.random.default_rng(1).normal(size=(15, 4))
        f1 = np.array([m.predict_one(z) for z in Z])
        m._switch()
        f2 = np.array([m.predict_one(z) for z in Z])
        if init == "carry":
            np.testing.assert_allclose(f2, f1, atol=1e-8)
        else:
            np.testing.assert_array_equal(f2, 0.0)


def test_nogd_switches_on_first_loss_round_with_full_budget() -> None:
    m, Xr, yr = _nogd_before_switch(budget=15, rank=5, eta=0.5, eta2=0.25)
    assert m.stage == 1
    for i in range(len(Xr)):
        f = m.predict_one(Xr[i])
        m.learn_one(Xr[i], yr[i])
        if yr[i] * f < 1.0:  # the first loss round switches and takes a stage-2 step
            assert m.stage == 2
            z = m._M @ m.sv.row(m.kern, Xr[i], float(Xr[i] @ Xr[i]))
            np.testing.assert_allclose(m._w, 0.25 * yr[i] * z, atol=1e-14)  # zero init + η₂ y z
            break
        assert m.stage == 1
    assert m.stage == 2
    m.predict_learn_many(Xr[i + 1 :], yr[i + 1 :])
    assert m.n_support_vectors == 15
    assert m.effective_rank == 5 and make("nogd", budget=100).effective_rank == 20
    with pytest.raises(ValueError, match="rank"):
        make("nogd", budget=10, rank=11)


# -- FOGD ------------------------------------------------------------------------------------------
def test_fogd_uses_exact_normalised_features() -> None:
    X, y = _blobs(300, seed=6)
    m = make("fogd", seed=3, n_components=64, eta=0.3, gamma=0.25)
    scores = m.predict_learn_many(X, y)
    f = RFF(m._omega)
    assert f.omega.shape == (64, 4)
    Z = f.transform(X)  # Ω already carries the √(2γ) scale
    np.testing.assert_allclose((Z * Z).sum(1), 1.0, atol=1e-14)
    # replay the hinge OGD with the reference features
    w = np.zeros(128)
    ref = np.empty(300)
    for i in range(300):
        ref[i] = w @ Z[i]
        if y[i] * ref[i] < 1.0:
            w += 0.3 * y[i] * Z[i]
    np.testing.assert_allclose(scores, ref, atol=1e-10)
    np.testing.assert_allclose(m.w, w, atol=1e-10)
    assert m.n_support_vectors == 0


def test_fogd_omega_distribution_matches_gamma() -> None:
    m = make("fogd", seed=0, n_components=4000, gamma=2.0)
    m.predict_one(np.zeros(3))
    assert math.isclose(float(m._omega.var()), 4.0, rel_tol=0.05)  # rows N(0, 2γ I)
    lg = make("fogd", seed=0, n_components=32, loss="logistic", eta=0.1)
    lg.learn_one([1.0, 0.0], 1)
    assert math.isclose(lg.predict_one([1.0, 0.0]), 0.1 * 0.5, rel_tol=1e-12)  # −η ℓ'(0) = η/2
