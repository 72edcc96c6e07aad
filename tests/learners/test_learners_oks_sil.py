"""Unit tests of paper 000's learners: OKS-SIL (§3.1), OKL-GD (§4.13), Proj-KA (§4.14)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelstream.learners import make
from kernelstream.learners.base import _seed_seq
from kernelstream.learners.experts import sample_without_replacement
from kernelstream.learners.kernels import kernel_alignment, sq_dists
from kernelstream.learners.linalg import pinv
from kernelstream.learners.oks_sil import (
    GAMMA_MAX,
    GAMMA_MIN,
    _chol_solve,
    rld_repeat_delta,
    rld_residual,
    rld_residual_unit3,
)
from kernelstream.learners.proj_ka import P0_EXPONENTS, alignment_pow2, select_width
from kernelstream.learners.testing import make_stream


def _gauss(A: np.ndarray, B: np.ndarray, g: float) -> np.ndarray:
    return np.exp(-g * sq_dists(A, B))


def _lstsq_residual(S: np.ndarray, x: np.ndarray, g: float) -> tuple[np.ndarray, float]:
    """``min_α ‖κ(·,x) − Σ α_i κ(·,S_i)‖²`` with ``numpy.linalg.lstsq`` on explicit features:
    the Gram matrix of ``[S; x]`` is factored as ``Φᵀ Φ`` (eigen-decomposition)."""
    P = np.vstack([S, x[None, :]])
    G = _gauss(P, P, g)
    lam, V = np.linalg.eigh(G)
    keep = lam > 1e-12 * lam.max()  # round-off directions would split duplicate points apart
    Phi = (V[:, keep] * np.sqrt(lam[keep])).T  # columns = feature vectors, G = ΦᵀΦ
    A, b = Phi[:, :-1], Phi[:, -1]
    alpha, *_ = np.linalg.lstsq(A, b, rcond=1e-10)  # cutoff: duplicates are exact
    r = b - A @ alpha
    return alpha, float(r @ r)


# -- OKS-SIL: RLD residual (§8 e) ------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_rld_delta_equals_lstsq_residual(seed: int) -> None:
    rng = np.random.default_rng(seed)
    g = float(rng.choice([0.05, 0.5, 2.0]))
    S = rng.normal(size=(3, 4))
    x = S[0] + 0.3 * rng.normal(size=4) if seed % 2 else rng.normal(size=4)
    alpha, delta = rld_residual(_gauss(S, S, g), _gauss(S, x[None, :], g)[:, 0])
    alpha_ls, delta_ls = _lstsq_residual(S, x, g)
    assert delta == pytest.approx(delta_ls, abs=1e-9)
    np.testing.assert_allclose(alpha, alpha_ls, atol=1e-6)


@pytest.mark.parametrize("seed", range(40))
def test_rld_fast_paths_equal_pseudo_inverse(seed: int) -> None:
    """The Cholesky paths (generic and the unrolled s = 3 one) give the SVD pseudo-inverse's
    ``α*`` and ``δ`` to round-off whenever they accept a sample, and decline exactly the
    nearly singular ones (duplicate points), which :func:`pinv` then handles."""
    rng = np.random.default_rng(seed)
    g = float(rng.choice([0.01, 0.3, 3.0]))
    S = rng.normal(size=(3, 5))
    if seed % 4 == 0:
        S[2] = S[1] + 1e-7 * rng.normal(size=5)  # nearly duplicate: must fall back
    x = rng.normal(size=5)
    K = _gauss(S, S, g)
    np.fill_diagonal(K, 1.0)
    b = _gauss(S, x[None, :], g)[:, 0]
    ref_alpha = pinv(K) @ b
    ref_delta = max(1.0 - float(b @ ref_alpha), 0.0)
    alpha, delta = rld_residual(K, b)
    assert delta == pytest.approx(ref_delta, abs=1e-9)
    np.testing.assert_allclose(alpha, ref_alpha, rtol=1e-7, atol=1e-9)
    fast = rld_residual_unit3(K[0, 1], K[0, 2], K[1, 2], *b.tolist())
    chol = _chol_solve(K.tolist(), b.tolist(), 3)
    if seed % 4 == 0:
        assert fast is None and chol is None
    else:
        assert fast is not None and chol is not None
        np.testing.assert_allclose(fast[0], ref_alpha, rtol=1e-7, atol=1e-9)
        assert fast[1] == pytest.approx(ref_delta, abs=1e-9)


def test_rld_delta_singular_sample() -> None:
    """Duplicate sampled points (singular K̃_s): δ is still the least-squares residual."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=3), rng.normal(size=3)
    S = np.vstack([a, a, b])
    x = a + 0.1
    _, delta = rld_residual(_gauss(S, S, 0.5), _gauss(S, x[None, :], 0.5)[:, 0])
    assert delta == pytest.approx(_lstsq_residual(S, x, 0.5)[1], abs=1e-9)
    _, d0 = rld_residual(_gauss(S, S, 0.5), _gauss(S, a[None, :], 0.5)[:, 0])
    assert d0 == pytest.approx(0.0, abs=1e-9)  # x in the span: δ = 0 (clamped, never < 0)


@pytest.mark.parametrize("seed", range(30))
def test_rld_repeat_delta_equals_pseudo_inverse(seed: int) -> None:
    """A sample that holds one point twice (in any two of the three places, or three times):
    the 2 × 2 shortcut gives the pseudo-inverse's δ far within RLD_REPEAT_MARGIN; it declines
    samples without a repeat and nearly dependent distinct points."""
    rng = np.random.default_rng(seed)
    g = float(rng.choice([0.01, 0.3, 3.0]))
    u, v, x = rng.normal(size=5), rng.normal(size=5), rng.normal(size=5)
    if seed % 5 == 4:
        v = u + 1e-4 * rng.normal(size=5)  # nearly dependent: declined
    pos = [(0, 0, 1), (0, 1, 0), (1, 0, 0), (0, 0, 0)][seed % 4]
    S = np.vstack([(u, v)[p] for p in pos])
    K = _gauss(S, S, g)
    np.fill_diagonal(K, 1.0)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        if pos[i] == pos[j]:
            K[i, j] = K[j, i] = 1.0  # what the compiled and Python Gram give: d = 0
    b = _gauss(S, x[None, :], g)[:, 0]
    ref_delta = max(1.0 - float(b @ (pinv(K) @ b)), 0.0)
    got = rld_repeat_delta(K[0, 1], K[0, 2], K[1, 2], *b.tolist())
    if seed % 5 == 4 and pos != (0, 0, 0):
        assert got is None
    else:
        assert got is not None and abs(got - ref_delta) < 1e-11
    assert rld_repeat_delta(0.5, 0.4, 0.3, 0.2, 0.2, 0.1) is None  # no repeat


def _reference_oks_sil(X: np.ndarray, y: np.ndarray, seed: int, B: int, eta: float, s: int,
                       nu: float, g: float) -> tuple[np.ndarray, list[float], list[int]]:
    """A direct transcription of §3.1 with δ and α from ``numpy.linalg.lstsq`` (explicit
    features), same RNG stream as the learner."""
    rng = np.random.Generator(np.random.PCG64(_seed_seq(seed)))
    V: list[np.ndarray] = []
    w: list[float] = []
    scores, gammas, sizes = [], [], []
    for t in range(len(X)):
        x, yt = X[t], y[t]
        Vm = np.array(V) if V else np.zeros((0, X.shape[1]))
        d2 = sq_dists(Vm, x[None, :])[:, 0] if V else np.zeros(0)
        psi = np.exp(-g * d2)
        f = float(np.dot(w, psi)) if V else 0.0
        scores.append(f)
        if yt * f < 1.0:
            if len(V) < B:
                V.append(x.copy())
                w.append(eta * yt)
                changed = True
            else:
                p = psi if psi.sum() > 0 else np.ones(len(V))
                idx = sample_without_replacement(rng, p, s)
                alpha, delta = _lstsq_residual(Vm[idx], x, g)
                if delta > nu:
                    r = int(np.argmin(np.abs(w)))
                    fb = f - w[r] * psi[r] + w[r]
                    V[r] = x.copy()
                    w[r] = eta * yt if yt * fb < 1.0 else 0.0
                    d2[r] = 0.0
                    changed = True
                else:
                    for a_i, k in zip(alpha, idx, strict=True):
                        w[k] += eta * float(a_i) * yt  # −η α ℓ' with the hinge ℓ' = −y
                    changed = False
            if changed:
                n_old = len(d2)
                grad = float(np.dot(w[:n_old], psi[:n_old] * d2)) if n_old else 0.0
                g = min(max(g - (1.0 / (t + 1)) * yt * grad, GAMMA_MIN), GAMMA_MAX)
        gammas.append(g)
        sizes.append(len(V))
    return np.array(scores), gammas, sizes


def test_oks_sil_matches_lstsq_reference() -> None:
    """The learner follows the transcription of §3.1 whose RLD test uses lstsq (§8 e): same
    scores, widths and buffer sizes over a stream that exercises all three branches."""
    X, y = make_stream("classification", 300, d=3, noise=0.1, seed=4)
    params = dict(budget=12, eta=0.3, sample_size=3, nu=0.5, gamma=0.8)
    m = make("oks-sil", seed=11, **params)
    got, gam, size = [], [], []
    for i in range(len(X)):
        got.append(m.step(X[i], y[i]))
        gam.append(m.current_gamma)
        size.append(m.n_support_vectors)
    ref, rgam, rsize = _reference_oks_sil(X, y, 11, 12, 0.3, 3, 0.5, 0.8)
    np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(gam, rgam, rtol=1e-7)
    assert size == rsize
    assert max(size) == 12


# -- OKS-SIL: hand-checked rounds ------------------------------------------------------------------
def test_oks_sil_append_and_kernel_step_by_hand() -> None:
    m = make("oks-sil", budget=5, eta=0.5, gamma=0.5)
    x1, x2 = np.array([0.0, 0.0]), np.array([1.0, 0.0])
    assert m.step(x1, 1.0) == 0.0  # round 1: append ω = η y, no old point, γ unchanged
    assert m.current_gamma == 0.5
    f2 = m.step(x2, -1.0)  # round 2: ψ = e^{-0.5}, f = 0.5 e^{-0.5}, margin error
    assert f2 == pytest.approx(0.5 * math.exp(-0.5))
    # γ ← γ − ρ_2 y Σ ω_j ψ_j d²_j = 0.5 − (1/2)(−1)(0.5 · e^{-0.5} · 1)
    assert m.current_gamma == pytest.approx(0.5 + 0.25 * math.exp(-0.5))
    np.testing.assert_allclose(m.sv.coef, [0.5, -0.5])
    # zero hinge loss: nothing changes
    m2 = make("oks-sil", budget=5, eta=2.0, gamma=0.5)
    m2.learn_one(x1, 1.0)
    before = m2.get_state()
    assert m2.step(x1, 1.0) == 2.0  # y f = 2 ≥ 1
    after = m2.get_state()
    assert all(before[k].tobytes() == after[k].tobytes() for k in before if k != "__t__")


def test_oks_sil_compensation_by_hand() -> None:
    """B = s = 1, a new point close to the stored one: δ = 1 − ψ² ≤ ν ⇒ ω += η y α, α = ψ."""
    m = make("oks-sil", budget=1, sample_size=1, eta=0.5, nu=0.9, gamma=0.5)
    m.learn_one([0.0], 1.0)
    psi = math.exp(-0.5 * 0.01)
    f = m.step([0.1], -1.0)
    assert f == pytest.approx(0.5 * psi)
    assert 1 - psi**2 <= 0.9
    assert m.sv.coef[0] == pytest.approx(0.5 - 0.5 * psi)
    assert m.current_gamma == 0.5  # buffer unchanged: no kernel step
    np.testing.assert_array_equal(m.sv.points, [[0.0]])


def test_oks_sil_replacement_by_hand() -> None:
    """B = 2 full, a far point: δ ≈ 1 > ν ⇒ the smallest-|ω| point is replaced by x_t with
    ω = η y (f^b has margin < 1), and γ moves using the remaining point only."""
    m = make("oks-sil", budget=2, sample_size=1, eta=0.5, gamma=0.5)
    m.learn_one([0.0], 1.0)
    m.learn_one([3.0], 1.0)  # ψ = e^{-4.5}: margin error, append; γ step from point 0
    g = m.current_gamma
    w = m.sv.coef.copy()
    assert abs(w[0]) == abs(w[1])  # tie: the first index is replaced
    f = m.step([10.0], -1.0)  # far from both: ψ ≈ 0, δ ≈ 1
    np.testing.assert_array_equal(m.sv.points[:, 0], [10.0, 3.0])
    assert m.sv.coef[0] == -0.5
    d2 = 49.0
    psi = math.exp(-g * d2)
    assert f == pytest.approx(w[0] * math.exp(-g * 100.0) + w[1] * psi)
    want = g - (1.0 / 3.0) * (-1.0) * (w[1] * psi * d2)  # the replaced slot contributes 0
    assert m.current_gamma == pytest.approx(min(max(want, GAMMA_MIN), GAMMA_MAX))


def test_oks_sil_replacement_weight_zero_when_fb_has_margin() -> None:
    """ω_r = −η ℓ'(f^b): 0 when the old weight on the new basis function already gives
    y f^b ≥ 1."""
    m = make("oks-sil", budget=1, sample_size=1, eta=2.0, gamma=0.5)
    m.learn_one([0.0], 1.0)  # ω = 2
    m.step([10.0], 1.0)  # f ≈ 0: margin error; RLD holds; f^b = f − 2ψ + 2 ≈ 2 ⇒ ω_r = 0
    np.testing.assert_array_equal(m.sv.points, [[10.0]])
    assert m.sv.coef[0] == 0.0


def test_oks_sil_width_stays_in_interval_and_memory_bounded() -> None:
    X, y = make_stream("classification", 1500, d=4, noise=0.3, seed=2)
    lo, hi = 0.2, 0.6
    seen_lo = seen_hi = False
    for rho, recheck in ((50.0, False), (50.0, True)):
        m = make("oks-sil", budget=15, eta=1.0, rho=rho, gamma=0.4, gamma_min=lo, gamma_max=hi,
                 recheck_margin=recheck)
        for i in range(len(X)):
            m.learn_one(X[i], y[i])
            g = m.current_gamma
            assert lo <= g <= hi
            seen_lo |= g == lo
            seen_hi |= g == hi
            assert m.n_support_vectors <= 15
        assert m.n_support_vectors == 15
    assert seen_lo and seen_hi  # the clip is exercised at both ends
    # default interval Ω = [2^-12, 2^12] ⇔ σ ∈ [2^-6.5, 2^5.5]
    assert (GAMMA_MIN, GAMMA_MAX) == (2.0**-12, 2.0**12)
    with pytest.raises(ValueError, match="gamma"):
        make("oks-sil", gamma=1e4)
    with pytest.raises(ValueError, match="gamma_min"):
        make("oks-sil", gamma_min=1.0, gamma_max=0.5)


def test_oks_sil_random_init_is_p0_grid() -> None:
    seen = set()
    for seed in range(60):
        m = make("oks-sil", seed=seed, random_init=True)
        m.predict_one([0.0, 1.0])
        seen.add(math.log2(m.current_gamma))
    assert seen == set(range(-12, -5))  # σ_1 = 2^{-(i+1)/2}, i ∈ {-12..-6} ⇔ γ_1 = 2^i


def test_oks_sil_learns() -> None:
    X, y = make_stream("classification", 2000, d=3, seed=5)
    m = make("oks-sil", budget=50, eta=0.5, gamma=0.5)
    s = m.predict_learn_many(X, y)
    late = np.mean(np.where(s[1000:] >= 0, 1.0, -1.0) != y[1000:])
    assert late < 0.25


# -- OKL-GD ----------------------------------------------------------------------------------------
def test_okl_gd_memory_rule_drops_oldest() -> None:
    m = make("okl-gd", budget=3, eta=0.5, gamma=0.5)
    pts = [[float(i) * 3.0, 0.0] for i in range(5)]
    for i, p in enumerate(pts):  # alternating labels far apart: every round is a margin error
        m.learn_one(p, 1.0 if i % 2 == 0 else -1.0)
    assert m.n_support_vectors == 3
    assert sorted(m.X[:3, 0].tolist()) == [6.0, 9.0, 12.0]  # rounds 3..5 kept, oldest dropped
    X, y = make_stream("classification", 800, d=3, noise=0.3, seed=1)
    m = make("okl-gd", budget=40, eta=0.1)
    for i in range(len(X)):
        m.learn_one(X[i], y[i])
        assert m.n_support_vectors <= 40


def test_okl_gd_width_step_by_hand() -> None:
    m = make("okl-gd", budget=10, eta=0.5, rho=0.7, gamma=0.5)  # σ = 1
    m.learn_one([0.0, 0.0], 1.0)
    assert m.current_gamma == 0.5  # no previous centre: no width step
    k = math.exp(-0.5 * 4.0)
    f = m.step([2.0, 0.0], 1.0)  # same label: e_t e_last = +1 ⇒ σ grows
    assert f == pytest.approx(0.5 * k)
    sigma = 1.0 + 0.7 * 1.0 * 1.0 * k * 4.0 / 1.0
    assert m.current_gamma == pytest.approx(0.5 / sigma**2)
    np.testing.assert_allclose(m.widths_gamma, [0.5, 0.5 / sigma**2])  # new centre: new width
    # a zero-loss round changes nothing
    m2 = make("okl-gd", eta=5.0, gamma=0.5)
    m2.learn_one([0.0], 1.0)
    m2.learn_one([0.0], 1.0)
    assert m2.n_support_vectors == 1


def test_okl_gd_width_in_interval_and_randomness() -> None:
    X, y = make_stream("classification", 600, d=3, noise=0.2, seed=3)
    m = make("okl-gd", budget=100, eta=0.5, rho=100.0, gamma=0.5, gamma_min=0.1, gamma_max=1.0)
    for i in range(len(X)):
        m.learn_one(X[i], y[i])
        assert 0.1 - 1e-12 <= m.current_gamma <= 1.0 + 1e-12
    assert not make("okl-gd").randomized and make("okl-gd", random_init=True).randomized


# -- Proj-KA ---------------------------------------------------------------------------------------
def test_alignment_pow2_equals_direct() -> None:
    X, y = make_stream("classification", 700, d=4, noise=0.1, seed=6)
    X = X / 3.0
    got = alignment_pow2(X, y, block=128)
    want = kernel_alignment(X, y, [2.0**e for e in P0_EXPONENTS])
    np.testing.assert_allclose(got, want, rtol=1e-8)
    np.testing.assert_allclose(alignment_pow2(X, y, [-2, -1, 0, 1], block=1000),
                               kernel_alignment(X, y, [0.25, 0.5, 1.0, 2.0]), rtol=1e-10)
    with pytest.raises(ValueError):
        alignment_pow2(X, y, [0, 2])


def test_proj_ka_online_selection_then_projectron() -> None:
    X, y = make_stream("classification", 600, d=4, seed=7)
    W = 150
    m = make("proj-ka", budget=30, selection_window=W)
    s = m.predict_learn_many(X, y)
    assert np.all(s[:W] == 0.0)
    i, g, _ = select_width(X[:W], y[:W])
    assert m.selected_kernel == i and m.current_gamma == g
    ref = make("projectron", budget=30, gamma=g)
    ref.predict_learn_many(X[:W], y[:W])  # replay of the window
    np.testing.assert_array_equal(s[W:], ref.predict_learn_many(X[W:], y[W:]))
    assert m.n_support_vectors == ref.n_support_vectors <= 30
    # without replay the Projectron starts empty at round W + 1
    m2 = make("proj-ka", budget=30, selection_window=W, replay=False)
    s2 = m2.predict_learn_many(X, y)
    assert s2[W] == 0.0
    ref2 = make("projectron", budget=30, gamma=g)
    np.testing.assert_array_equal(s2[W:], ref2.predict_learn_many(X[W:], y[W:]))
