"""Paper 004's learners: SPA, BOMKC(SPA), OSKL, the OMKC family and its bounded versions
(ALGORITHMS.md §2.2, §3.11, §3.12, §4.16, §4.17, §8 h)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from kernelstream.learners import make
from kernelstream.learners._multikernel import (
    GAMMAS,
    M_KERNELS,
    N_POLY,
    POOL,
    MultiStore,
    pool_diag,
    pool_kernel_params,
    pool_rows,
)
from kernelstream.learners.kernels import EXP_ZERO_BELOW, Gaussian, make_kernel
from kernelstream.learners.testing import make_stream


def _gauss(a: np.ndarray, b: np.ndarray, gamma: float) -> float:
    return float(np.exp(-gamma * np.sum((np.asarray(a) - np.asarray(b)) ** 2)))


def _stream(n: int, d: int = 4, noise: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    X, y = make_stream("classification", n, d=d, noise=noise, seed=seed)
    return X * 0.5, y  # moderate norms keep the polynomial kernels tame


# -- SPA ---------------------------------------------------------------------------------------
def test_spa_expected_sv_bound() -> None:
    """§8 h: E[#SV] ≤ αT/β. On a noisy stream the cap α binds almost every round, so the mean
    over seeds must sit just below αT/β (a broken sampler fails either way)."""
    T, alpha, beta = 1500, 0.2, 10.0
    X, y = _stream(T, noise=0.5, seed=1)
    counts = []
    for seed in range(30):
        m = make("spa", seed=seed, gamma=0.5, eta=0.1, alpha=alpha, beta=beta)
        m.predict_learn_many(X, y)
        counts.append(m.n_support_vectors)
    c = np.asarray(counts, dtype=float)
    bound = alpha * T / beta
    se = c.std(ddof=1) / np.sqrt(len(c))
    assert c.mean() <= bound + 3 * se, (c.mean(), bound)
    assert c.mean() >= 0.8 * bound, (c.mean(), bound)


def test_spa_sv_bound_with_large_beta_is_sparse() -> None:
    T = 2000
    X, y = _stream(T, seed=2)
    for beta in (20.0, 200.0):
        nsv = []
        for s in range(10):
            m = make("spa", seed=s, gamma=0.5, beta=beta)
            m.predict_learn_many(X, y)
            nsv.append(m.n_support_vectors)
        bound = T / beta
        assert np.mean(nsv) <= bound + 3 * np.sqrt(bound / len(nsv)), (beta, nsv)


def test_spa_averaged_has_the_support_vectors_of_the_last() -> None:
    """The averaged classifier is a reweighting of the last one's SVs (same store, same
    draws), and its score equals the brute-force mean of the past hypotheses."""
    X, y = _stream(400, seed=3)
    probe = X[7] + 0.1
    avg = make("spa", seed=5, gamma=0.7, eta=0.5, beta=2.0)
    last = make("spa", seed=5, gamma=0.7, eta=0.5, beta=2.0, averaged=False)
    total = 0.0
    for t in range(len(X)):
        total += last.predict_one(probe)  # f_{t+1}(probe), t rounds learned
        got = avg.predict_one(probe)
        assert got == pytest.approx(total / (t + 1), rel=1e-10, abs=1e-12)
        avg.learn_one(X[t], y[t])
        last.learn_one(X[t], y[t])
    assert avg.n_support_vectors == last.n_support_vectors > 0
    np.testing.assert_array_equal(avg.sv.points, last.sv.points)
    np.testing.assert_array_equal(avg.sv.coef, last.sv.coef)


def test_spa_averaged_weights_closed_form() -> None:
    """f̄_t(x) = Σ_j a_j (t − s_j)/t κ(x_j, x) with s_j the 1-based storing round."""
    X, y = _stream(300, seed=4)
    m = make("spa", seed=9, gamma=0.3, eta=1.0, beta=3.0)
    m.predict_learn_many(X, y)
    z = X[11] * 0.9
    t = m.t + 1  # rounds of the next prediction
    s1 = m.sv.s[: m.n_support_vectors] + 1
    k = Gaussian(0.3).row(m.sv.points, (m.sv.points ** 2).sum(1), z, float(z @ z))
    want = float(np.sum(m.sv.coef * (t - s1) / t * k))
    assert m.predict_one(z) == pytest.approx(want, rel=1e-10)


def test_spa_hand_checked_first_rounds() -> None:
    g, eta = 0.5, 0.5
    x1, x2, x3 = np.array([0.0, 1.0]), np.array([1.0, 0.0]), np.array([1.0, 1.0])
    m = make("spa", seed=0, gamma=g, eta=eta, alpha=1.0, beta=1.0)
    assert m.predict_one(x1) == 0.0
    m.learn_one(x1, 1)  # ℓ = 1, ρ = 1: Z = 1, τ = min(η, 1) = 0.5
    np.testing.assert_allclose(m.sv.coef, [0.5])
    k12 = _gauss(x1, x2, g)
    assert m.predict_one(x2) == pytest.approx(0.5 * 0.5 * k12)  # f̄_2 = (0 + f_2)/2
    m.learn_one(x2, -1)  # ℓ = 1 + 0.5 k12 ≥ 1: ρ = 1, τ = min(0.5, ℓ) = 0.5
    np.testing.assert_allclose(m.sv.coef, [0.5, -0.5])
    k13, k23 = _gauss(x1, x3, g), _gauss(x2, x3, g)
    # f̄_3 = (f_1 + f_2 + f_3)/3 = (0 + 0.5 k13 + 0.5 k13 − 0.5 k23)/3
    assert m.predict_one(x3) == pytest.approx((k13 - 0.5 * k23) / 3)


def test_spa_sampling_replicates_the_rng() -> None:
    """Replay the Bernoulli draws: Z_t = U_t < ρ_t with one uniform per positive-loss round."""
    X, y = _stream(200, seed=6)
    eta, alpha, beta, g = 0.3, 1.0, 4.0, 0.8
    m = make("spa", seed=11, gamma=g, eta=eta, alpha=alpha, beta=beta, averaged=False)
    for t in range(len(X)):
        f = m.predict_one(X[t])
        loss = max(0.0, 1.0 - y[t] * f)
        rng = copy.deepcopy(m.rng)
        n0 = m.n_support_vectors
        m.learn_one(X[t], y[t])
        if loss == 0.0:
            assert m.n_support_vectors == n0
            continue
        rho = min(alpha, loss) / beta
        if rng.random() < rho:
            assert m.n_support_vectors == n0 + 1
            assert m.sv.coef[-1] == pytest.approx(min(eta / rho, loss) * y[t])
        else:
            assert m.n_support_vectors == n0


def test_spa_quirk_tau_without_kxx() -> None:
    X, y = _stream(150, seed=7)
    # Gaussian: κ(x, x) = 1, the quirk changes nothing
    a = make("spa", seed=1, gamma=0.5, beta=2.0, eta=5.0)
    b = make("spa", seed=1, gamma=0.5, beta=2.0, eta=5.0, reference_quirks=True)
    np.testing.assert_array_equal(a.predict_learn_many(X, y), b.predict_learn_many(X, y))
    # polynomial: first round τ = min(η/ρ, ℓ/‖x‖⁴) vs min(η/ρ, ℓ)
    x = np.array([2.0, 0.0])
    for quirk, want in ((False, 1.0 / 16.0), (True, 1.0)):
        m = make("spa", seed=0, kernel="polynomial", degree=2, eta=5.0, beta=1.0,
                 reference_quirks=quirk)
        m.learn_one(x, 1)
        assert float(m.sv.coef[0]) == pytest.approx(want)


def test_spa_rejects_beta_below_alpha() -> None:
    with pytest.raises(ValueError, match="beta"):
        make("spa", alpha=2.0, beta=1.0)


# -- the shared pool ---------------------------------------------------------------------------
def test_pool_definition() -> None:
    assert M_KERNELS == 16 and N_POLY == 3 and len(POOL) == 16
    assert [p.get("degree") for _, p in POOL[:3]] == [1, 2, 3]
    sig = np.sqrt(1.0 / (2.0 * GAMMAS))
    np.testing.assert_allclose(sig, 2.0 ** np.arange(-6, 7))
    np.testing.assert_allclose(pool_diag(0.5), [0.5, 0.25, 0.125] + [1.0] * 13)


def test_multistore_scores_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    d = 5
    st = MultiStore(d, capacity=2)  # forces growth
    ref_pts: list[list[np.ndarray]] = [[] for _ in range(M_KERNELS)]
    ref_a: list[list[float]] = [[] for _ in range(M_KERNELS)]
    for t in range(60):
        x = rng.normal(size=d) * 0.4
        ks = np.flatnonzero(rng.random(M_KERNELS) < 0.3)
        cs = rng.normal(size=len(ks))
        st.add(x, float(x @ x), ks, cs, id_=t)
        for k, c in zip(ks, cs, strict=True):
            ref_pts[k].append(x)
            ref_a[k].append(c)
    z = rng.normal(size=d) * 0.4
    want = np.array([
        sum(a * float(pool_rows(np.array([p]), z)[i, 0]) for p, a in
            zip(ref_pts[i], ref_a[i], strict=True)) for i in range(M_KERNELS)])
    np.testing.assert_allclose(st.scores(z, float(z @ z)), want, rtol=1e-10, atol=1e-12)
    assert st.n_entries == sum(len(a) for a in ref_a)
    np.testing.assert_array_equal(st.counts, [len(a) for a in ref_a])
    # a Gaussian entry is bit-identical to the single-kernel row
    i = 9
    P, a = st.coefficients(i)
    k = make_kernel("gaussian", gamma=float(GAMMAS[i - N_POLY])).row(P, (P * P).sum(1), z,
                                                                    float(z @ z))
    assert st.scores(z, float(z @ z))[i] == pytest.approx(float(a @ k), rel=1e-13)
    # state round trip
    st2 = MultiStore.from_state(st.get_state("p."), "p.", d)
    np.testing.assert_array_equal(st2.scores(z, float(z @ z)), st.scores(z, float(z @ z)))


def test_exp_zero_below_is_exactly_zero() -> None:
    """Arguments below EXP_ZERO_BELOW are left out of MultiStore's exp: their exp must be +0."""
    x = np.concatenate([[EXP_ZERO_BELOW, -1e300, -np.inf], np.linspace(EXP_ZERO_BELOW, -2e3, 1001)])
    e = np.exp(x)
    assert (e == 0.0).all() and not np.signbit(e).any()
    assert np.exp(-745.0) > 0.0  # a subnormal: must not be skipped (and it is not: > bound)


@pytest.mark.parametrize("share", [0.0, 0.05, 0.2, 0.6, 1.0])
def test_multistore_skipped_exps_keep_sums_bit_identical(share: float) -> None:
    """MultiStore._gaussian_sums (each of its three ways: plain, zeroed, gathered) equals the
    plain bincount of a·exp(v) bit for bit, with subnormal and signed-zero terms."""
    rng = np.random.default_rng(3)
    ng = 4000
    st = MultiStore(2, capacity=ng)
    st.ng = ng
    st.g_k[:] = rng.integers(N_POLY, M_KERNELS, ng)
    st.g_a[:] = rng.normal(size=ng) * 10.0 ** rng.integers(-300, 300, ng)
    under = rng.random(ng) < share
    v = np.where(under, -rng.uniform(746.0, 1e6, ng), -rng.uniform(0.0, 40.0, ng))
    v[rng.random(ng) < 0.01] = -745.0  # subnormal results
    want = np.bincount(st.g_k[:ng], weights=np.exp(v) * st.g_a[:ng], minlength=M_KERNELS)
    got = st._gaussian_sums(v.copy())
    assert np.array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("name", "single", "extra"), [
    ("omkc-u", "perceptron", {}),
    ("omkc-dd", "perceptron", {}),
    ("omkc-ddpa", "pa-i", {"c": 0.1}),
])
def test_deterministic_omkc_components_equal_single_kernel_learners(
        name: str, single: str, extra: dict[str, Any]) -> None:
    """U/DD components are kernel Perceptrons, DDPA components PA-I (C = 0.1), one per kernel."""
    X, y = _stream(120, seed=8)
    m = make(name)
    singles = [make(single, **pool_kernel_params(i), **extra) for i in range(M_KERNELS)]
    for t in range(len(X)):
        xx = float(X[t] @ X[t])
        s = m.store.scores(X[t], xx) if m.dim is not None else np.zeros(M_KERNELS)
        want = np.array([c.predict_one(X[t]) for c in singles])
        np.testing.assert_allclose(s, want, rtol=1e-9, atol=1e-9)
        m.learn_one(X[t], y[t])
        for c in singles:
            c.learn_one(X[t], y[t])
    assert m.n_support_vectors == sum(c.n_support_vectors for c in singles)


# -- BOMKC(SPA) --------------------------------------------------------------------------------
def _replay_bomkc(m: Any, x: np.ndarray, y: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Expected (stored kernels, their coefficients, new θ) of one BOMKC(SPA) round, computed
    from the spec with a copy of the learner's RNG."""
    xx = float(x @ x)
    s = m.store.scores(x, xx) if m.dim is not None else np.zeros(M_KERNELS)
    theta = m.kernel_distribution if m.dim is not None else np.full(M_KERNELS, 1 / M_KERNELS)
    counts = m._counts.copy() if m.dim is not None else np.zeros(M_KERNELS, dtype=int)
    ys = y * s
    mist = ys <= 0  # a zero score counts as a mistake (bomkc.py DECISION)
    new_counts = counts + mist
    w = m.discount ** (new_counts - new_counts.min())
    new_theta = w / w.sum()
    th_p = new_theta if m.reference_quirks else theta
    p = (1 - m.delta) * th_p / th_p.max() + m.delta
    loss = np.maximum(0.0, 1.0 - ys)
    idx = np.flatnonzero(loss > 0)
    rng = copy.deepcopy(m.rng)
    u = rng.random(len(idx))
    rho = np.minimum(m.alpha, loss[idx]) / m.beta
    z = u < rho * p[idx]
    sel = idx[z]
    kxx = pool_diag(xx)[sel]
    ell = loss[sel] if m.reference_quirks else loss[sel] / kxx
    tau = np.minimum(m.eta / rho[z], ell)
    return sel, tau * y, new_theta


@pytest.mark.parametrize("quirk", [False, True])
def test_bomkc_rounds_replayed_from_the_spec(quirk: bool) -> None:
    X, y = _stream(250, seed=9)
    m = make("bomkc-spa", seed=3, beta=2.0, eta=0.2, reference_quirks=quirk)
    for t in range(len(X)):
        sel, coef, theta = _replay_bomkc(m, X[t], y[t])
        before = m.store.counts.copy() if m.dim is not None else np.zeros(M_KERNELS, dtype=int)
        m.learn_one(X[t], y[t])
        added = m.store.counts - before
        np.testing.assert_array_equal(np.flatnonzero(added), sel)
        for k, c in zip(sel, coef, strict=True):
            assert m.store.coefficients(int(k))[1][-1] == pytest.approx(c, rel=1e-12)
        np.testing.assert_allclose(m.kernel_distribution, theta, rtol=1e-12)


def test_bomkc_quirks_change_the_run() -> None:
    X, y = _stream(300, seed=10)
    a = make("bomkc-spa", seed=4, beta=2.0)
    b = make("bomkc-spa", seed=4, beta=2.0, reference_quirks=True)
    assert not np.array_equal(a.predict_learn_many(X, y), b.predict_learn_many(X, y))


def test_bomkc_weights_are_a_distribution() -> None:
    X, y = _stream(500, noise=0.2, seed=11)
    m = make("bomkc-spa", seed=0, beta=3.0)
    assert m.kernel_distribution is None
    for t in range(len(X)):
        m.learn_one(X[t], y[t])
        th = m.kernel_distribution
        assert th.shape == (16,) and np.all(th >= 0) and th.sum() == pytest.approx(1.0)
    assert th.max() > 1.5 * th.min()  # it has learnt something: not uniform any more
    # vote = Σ θ_i sign(s_i)
    s = m.store.scores(X[0], float(X[0] @ X[0]))
    assert m.predict_one(X[0]) == pytest.approx(float(th @ np.sign(s)))


def test_bomkc_hand_checked_first_rounds() -> None:
    x1, x2 = np.array([0.5, 0.5]), np.array([0.5, -0.25])
    eta, beta = 0.1, 4.0
    m = make("bomkc-spa", seed=21, eta=eta, beta=beta)
    assert m.predict_one(x1) == 0.0
    u = np.random.Generator(np.random.PCG64(np.random.SeedSequence(21))).random(16)
    m.learn_one(x1, -1)  # s = 0: ℓ = 1, ρ = 1/4, p = 1; every kernel errs (tie +1 ≠ −1)
    sel = np.flatnonzero(u < 0.25)
    np.testing.assert_array_equal(np.flatnonzero(m.store.counts), sel)
    kxx = pool_diag(0.5)
    for k in sel:  # τ = min(η/ρ, 1/κ(x,x)) = min(0.4, 2^p) = 0.4
        assert m.store.coefficients(int(k))[1][0] == pytest.approx(-min(eta * beta, 1 / kxx[k]))
    np.testing.assert_allclose(m.kernel_distribution, np.full(16, 1 / 16))  # all discounted
    rows = pool_rows(x1[None, :], x2)[:, 0]
    want = np.zeros(16)
    want[sel] = -0.4 * rows[sel]
    s = m.store.scores(x2, float(x2 @ x2))
    np.testing.assert_allclose(s, want, rtol=1e-12)
    assert m.predict_one(x2) == pytest.approx(np.sign(want).sum() / 16)


# -- OMKC --------------------------------------------------------------------------------------
def test_omkc_dd_hand_checked_first_rounds() -> None:
    x1, x2 = np.array([0.5, 0.5]), np.array([0.5, -0.25])  # x1·x2 = 0.125 > 0
    m = make("omkc-dd")
    m.learn_one(x1, -1)  # all 16 components err on f = 0 and store x1 with −1
    assert m.n_support_vectors == 16
    np.testing.assert_allclose(m.kernel_distribution, np.full(16, 1 / 16))  # all discounted
    k12 = pool_rows(x1[None, :], x2)[:, 0]
    s = m.store.scores(x2, float(x2 @ x2))
    np.testing.assert_allclose(s, -k12, rtol=1e-12)
    assert s[3] == 0.0  # σ = 2^-6: exp(−2048 · 0.5625) underflows, the kernel abstains
    assert m.predict_one(x2) == pytest.approx(-15 / 16)
    m.learn_one(x2, 1)  # f^i(x2) ≤ 0 for every i: all err, all store x2 with +1
    np.testing.assert_allclose(m.kernel_distribution, np.full(16, 1 / 16))
    assert m.n_support_vectors == 32
    # round 3: f^i(x3) = −κ_i(x1, x3) + κ_i(x2, x3); y = +1 errs iff f^i(x3) ≤ 0
    x3 = np.array([0.5, 0.1])
    f = -pool_rows(x1[None, :], x3)[:, 0] + pool_rows(x2[None, :], x3)[:, 0]
    m.learn_one(x3, 1)
    mist = f <= 0
    assert mist.sum() == 3  # the polynomial kernels
    w = 0.99 ** mist
    np.testing.assert_allclose(m.kernel_distribution, w / w.sum(), rtol=1e-12)
    assert m.n_support_vectors == 32 + mist.sum()


def test_omkc_sd_replays_the_draws() -> None:
    X, y = _stream(200, seed=12)
    for name in ("omkc-sd", "omkc-sdpa"):
        m = make(name, seed=2)
        m.learn_one(X[0], y[0])
        for t in range(1, len(X)):
            xx = float(X[t] @ X[t])
            s = m.store.scores(X[t], xx)
            th = m.kernel_distribution
            ys = y[t] * s
            upd = ys < 1 if m.pa else ys <= 0
            idx = np.flatnonzero(upd)
            p = (1 - m.delta) * th / th.max() + m.delta
            z = copy.deepcopy(m.rng).random(len(idx)) < p[idx]
            sel = idx[z]
            counts = m._counts.copy()
            n0 = m.store.counts.copy()
            m.learn_one(X[t], y[t])
            np.testing.assert_array_equal(np.flatnonzero(m.store.counts - n0), sel)
            np.testing.assert_array_equal(m._counts - counts, np.isin(np.arange(16), sel)
                                          & (ys <= 0))


def test_omkc_u_keeps_uniform_weights() -> None:
    X, y = _stream(100, seed=13)
    m = make("omkc-u")
    m.predict_learn_many(X, y)
    np.testing.assert_array_equal(m.kernel_distribution, np.full(16, 1 / 16))


# -- bounded OMKC ------------------------------------------------------------------------------
@pytest.mark.parametrize("maint", ["forgetron", "bogd", "bpa-s"])
def test_bomkc_dd_components_are_the_budget_learners(maint: str) -> None:
    """Algorithm 3: each component runs the library's budget learner with budget B/m."""
    X, y = _stream(300, noise=0.2, seed=14)
    B = 16 * 5 + 3
    m = make("bomkc-dd", budget=B, budget_maintenance=maint, eta=0.3, lam=0.01, c=0.1)
    extra = {"bogd": {"eta": 0.3, "lam": 0.01}, "bpa-s": {"c": 0.1}}.get(maint, {})
    singles = [make(maint, budget=5 + (i < 3), **pool_kernel_params(i), **extra)
               for i in range(M_KERNELS)]
    m.predict_learn_many(X, y)
    for c in singles:
        c.predict_learn_many(X, y)
    for i, c in enumerate(singles):
        np.testing.assert_array_equal(m.comps[i].sv.coef, c.sv.coef)
        assert m.comps[i].n_support_vectors <= 5 + (i < 3)
    assert m.n_support_vectors <= B


@pytest.mark.parametrize("maint", ["rbp", "forgetron", "bogd", "bpa-s"])
def test_bomkc_sd_respects_the_total_budget(maint: str) -> None:
    X, y = _stream(600, noise=0.3, seed=15)
    B = 40
    m = make("bomkc-sd", seed=1, budget=B, budget_maintenance=maint)
    full = False
    for t in range(len(X)):
        m.learn_one(X[t], y[t])
        assert m.n_support_vectors <= B
        full = full or m.n_support_vectors == B
    assert full
    th = m.kernel_distribution
    assert th.sum() == pytest.approx(1.0)


def test_bomkc_dd_rejects_small_budget() -> None:
    with pytest.raises(ValueError, match="budget"):
        make("bomkc-dd", budget=10)


# -- OSKL --------------------------------------------------------------------------------------
@pytest.mark.parametrize("radius", [0.0, 0.5, 1e-200])
def test_oskl_averaged_matches_brute_force(radius: float) -> None:
    """Averaged score = mean of the past hypotheses, also with projection (which rescales old
    coefficients) and
    with a tiny radius (coefficients near 1e-200)."""
    X, y = _stream(200, seed=16)
    probe = X[3] * 0.7
    kw = {"gamma": 0.5, "eta": 0.5, "grad_bound": 1.0, "radius": radius}
    avg = make("oskl", seed=2, **kw)
    last = make("oskl", seed=2, averaged=False, **kw)
    total = 0.0
    for t in range(len(X)):
        total += last.predict_one(probe)
        assert avg.predict_one(probe) == pytest.approx(total / (t + 1), rel=1e-9, abs=1e-300)
        avg.learn_one(X[t], y[t])
        last.learn_one(X[t], y[t])
        if radius > 0 and last.n_support_vectors:
            nrm2 = last.sv.exact_norm2(last.kern)
            assert nrm2 <= radius**2 * (1 + 1e-9)
    np.testing.assert_array_equal(avg.sv.points, last.sv.points)


def test_oskl_sampling_rate() -> None:
    """E[#SV] = Σ_t min(1, |ℓ'_t|/G); with G = 1 and the logistic loss every |ℓ'| ≤ 1."""
    X, y = _stream(400, seed=17)
    m = make("oskl", seed=0, gamma=0.5, eta=0.2, grad_bound=4.0, averaged=False)
    expect = 0.0
    for t in range(len(X)):
        f = m.predict_one(X[t])
        expect += 1.0 / (1.0 + np.exp(y[t] * f)) / 4.0
        m.learn_one(X[t], y[t])
    assert abs(m.n_support_vectors - expect) < 4 * np.sqrt(expect)
    np.testing.assert_allclose(np.abs(m.sv.coef), 0.2 * 4.0)



def test_multistore_scores_when_every_gaussian_entry_underflows() -> None:
    """Every Gaussian exp exactly 0 (a far point) next to polynomial entries: the scores stay
    float64 (numpy's bincount of no entries is int64, and adding the polynomial sums to it
    raised on svmguide3 in reproduce_p4)."""
    from kernelstream.learners._multikernel import MultiStore

    st = MultiStore(3)
    x0 = np.array([0.1, 0.2, 0.0])
    st.add(x0, float(x0 @ x0), np.array([0, 3, 4]), np.array([0.5, 1.0, -1.0]))
    far = np.array([400.0, -400.0, 400.0])
    s = st.scores(far, float(far @ far))
    assert s.dtype == np.float64
    # the compiled dot sums in index order, numpy's may not: equal up to round-off
    assert s[0] == pytest.approx(0.5 * float(x0 @ far), rel=1e-15, abs=0.0)
    assert s[3] == 0.0 and s[4] == 0.0
