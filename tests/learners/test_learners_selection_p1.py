"""Behavioural tests of paper 001's kernel-selection learners and OKS (ALGORITHMS.md §3.2–3.6)
and of the shared selection block (``_selection.py``).

* selection distributions are probability vectors at every round (hypothesis, random streams);
* the AO2MD corrections of B(AO)2KS / EA2OKS against a naive re-implementation with explicit
  Gram matrices (reservoir coefficients ``b y_v / v``, new-SV coefficients, projection), and
  the predictions ``Π_U(f' + λ μ̃)(x_t)``;
* incremental norms and reservoir values equal exact recomputations;
* GREEN-IX and E(K) epochs; the quirk switches; BEA2OKS memory.

The generic contract (determinism, state round trip, batch == loop) is covered by
``test_conformance.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelstream.learners import make
from kernelstream.learners._selection import (
    GaussianWidths,
    KernelPool,
    SharedPool,
    horizon_guess,
    parse_sigmas,
)
from kernelstream.learners.bao2ks import GreenIX, derive_reservoir_size
from kernelstream.learners.ea2oks import ExpWeights
from kernelstream.learners.store import eval_stores


def stream(n: int, d: int = 3, noise: float = 0.1, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2 % d] >= 0, 1.0, -1.0)
    flip = rng.random(n) < noise
    y[flip] = -y[flip]
    return X, y


SIGMAS = "0.5,1,2"

CONFIGS = [
    ("oks", {"convention": "p0"}),
    ("oks", {"convention": "p1"}),
    ("oks", {"convention": "p1", "reference_quirks": True}),
    ("oks", {"convention": "p2"}),
    ("oks", {"convention": "p2", "loss": "square"}),
    ("bao2ks", {}),
    ("bao2ks", {"reference_quirks": True}),
    ("ea2oks", {}),
    ("bea2oks", {"budget": 6}),
    ("bea2oks", {"budget": 6, "reference_quirks": True}),
]


# -- selection distributions ---------------------------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=st.sampled_from(CONFIGS), n=st.integers(1, 40), d=st.integers(1, 4),
       seed=st.integers(0, 10**6), scale=st.sampled_from([0.01, 1.0, 30.0]),
       horizon=st.sampled_from([None, 40]))
def test_distribution_is_a_probability_vector_every_round(cfg, n, d, seed, scale,
                                                         horizon) -> None:
    name, kw = cfg
    extra = {} if name == "oks" else {"reservoir_size": 3}
    m = make(name, seed=seed, sigmas=SIGMAS, horizon=horizon, **extra, **kw)
    rng = np.random.default_rng(seed)
    X = scale * rng.normal(size=(n, d))
    y = rng.normal(size=n) if m.task == "regression" else np.where(rng.random(n) < 0.5, -1.0, 1.0)
    assert m.selected_kernel is None
    for t in range(n):
        p = m.kernel_distribution
        assert p.shape == (3,) and np.isfinite(p).all() and (p >= 0).all()
        assert abs(p.sum() - 1.0) < 1e-12
        s = m.predict_one(X[t])
        i = m.selected_kernel
        assert i is not None and 0 <= i < 3 and p[i] > 0  # drawn from p
        assert np.isfinite(s) and m.predict_one(X[t]) == s
        m.learn_one(X[t], y[t])


# -- naive AO2MD reference -----------------------------------------------------------------------
def _gauss(A: np.ndarray, B: np.ndarray, gamma: float) -> np.ndarray:
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return np.exp(-gamma * d2)


class Naive:
    """f'_i and μ̃_i as {stream id: coefficient} dicts; norms and values from explicit Grams."""

    def __init__(self, X: np.ndarray, gammas: np.ndarray) -> None:
        self.X = X
        self.g = gammas

    def value(self, i: int, f: dict[int, float], x: np.ndarray) -> float:
        if not f:
            return 0.0
        ids = np.array(sorted(f))
        a = np.array([f[k] for k in ids])
        return float(a @ _gauss(self.X[ids], x[None], self.g[i])[:, 0])

    def norm2(self, i: int, f: dict[int, float]) -> float:
        if not f:
            return 0.0
        ids = np.array(sorted(f))
        a = np.array([f[k] for k in ids])
        return float(a @ _gauss(self.X[ids], self.X[ids], self.g[i]) @ a)


def _add(f: dict[int, float], g: dict[int, float], c: float = 1.0) -> dict[int, float]:
    out = dict(f)
    for k, v in g.items():
        out[k] = out.get(k, 0.0) + c * v
    return out


def _store_dict(store) -> dict[int, float]:
    n = store.n
    return {int(k): float(a) for k, a in zip(store.ids[:n], store.a[:n], strict=True)}


def _assert_dict_close(got: dict[int, float], want: dict[int, float], what: str) -> None:
    keys = set(got) | set(want)
    g = np.array([got.get(k, 0.0) for k in sorted(keys)])
    w = np.array([want.get(k, 0.0) for k in sorted(keys)])
    np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12, err_msg=what)


@pytest.mark.parametrize("name", ["bao2ks", "ea2oks"])
@pytest.mark.parametrize("radius", [0.7, 50.0])
def test_corrections_match_naive_ao2md(name: str, radius: float) -> None:
    """Every round: prediction = Π_U(f' + λμ̃)(x_t) and f'_t = Π_U(f' + a κ(x_t,·) + b μ̃) with
    the reservoir coefficients b y_v / v, a = λKy (B(AO)2KS, kernel J) or λy/P (EA2OKS)."""
    n = 90
    X, y = stream(n, seed=3, noise=0.2)
    eta = 0.6
    m = make(name, seed=5, sigmas=SIGMAS, eta=eta, radius=radius, reservoir_size=4)
    K = m.K
    nv = Naive(X, m.widths.gammas)
    fprime = [dict() for _ in range(K)]
    projected = added = 0
    for t in range(n):
        x = X[t]
        s = m.predict_one(x)  # (the first call also allocates the state)
        aux = m._pending[2][0]  # (aux, the draw): draws_in_predict
        mir = m.mirror
        v = mir.res.n
        rid = mir.res.ids[:v].copy()
        ry = mir.res.y[:v].copy()
        mu = {int(k): float(yy) / v for k, yy in zip(rid, ry, strict=True)} if v else {}
        # predictions of f_{t,i} = Π_U(f'_{t-1,i} + λ μ̃_i) at x_t, naively
        fbar = [_add(fprime[i], mu, eta) for i in range(K)]
        fpred = np.empty(K)
        for i in range(K):
            nb = nv.norm2(i, fbar[i])
            fpred[i] = nv.value(i, fbar[i], x) * (min(1.0, radius / math.sqrt(nb)) if nb > 0
                                                  else 1.0)
        I = m.selected_kernel
        assert s == pytest.approx(fpred[I], rel=1e-9, abs=1e-12)
        m.learn_one(x, y[t])
        # expected corrections
        a = np.zeros(K)
        b = np.zeros(K)
        if name == "bao2ks":
            j = aux[1]
            b[:] = eta
            b[j] = eta * (1 - K)
            if y[t] * fpred[j] < 1:
                a[j] = eta * K * y[t]
        else:
            after = [_store_dict(st_) for st_ in m.mirror.pool.stores]
            for i in range(K):
                if y[t] * fpred[i] >= 1:
                    continue
                m2 = nv.norm2(i, mu)
                g = math.sqrt(max(1.0 + m2 - 2 * y[t] * nv.value(i, mu, x), 0.0))
                P = g / (m._beta * (g + math.sqrt(m2)))
                if t in after[i]:  # the Bernoulli draw added x_t
                    added += 1
                    a[i] = eta * y[t] / P
                    b[i] = eta * (1 - 1 / P)
                else:
                    b[i] = eta
        for i in range(K):
            new = _add(_add(fprime[i], {t: a[i]} if a[i] else {}), mu, b[i])
            nn = nv.norm2(i, new)
            if nn > radius**2:
                projected += 1
                new = {k: c * radius / math.sqrt(nn) for k, c in new.items()}
            fprime[i] = new
            got = _store_dict(m.mirror.pool.stores[i])
            _assert_dict_close(got, new, f"round {t}, kernel {i}")
        mir = m.mirror
        exact = np.array([nv.norm2(i, fprime[i]) for i in range(K)])
        np.testing.assert_allclose(mir.n2, exact, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(mir.H[:, :mir.res.n], mir.exact_h(), rtol=1e-9, atol=1e-11)
        if radius < 1:
            assert (mir.n2 <= radius**2 * (1 + 1e-12)).all()
    assert m.mirror.res.n == 4
    assert (projected > 0) == (radius < 1)
    assert name == "bao2ks" or added > 0


def test_reservoir_points_are_merged_by_id() -> None:
    """A point stays once per store however many rounds add its reservoir coefficient."""
    X, y = stream(200, seed=1)
    m = make("bao2ks", seed=2, sigmas=SIGMAS, reservoir_size=5, horizon=200)
    m.predict_learn_many(X, y)
    for sv in m.mirror.pool.stores:
        ids = sv.ids[: sv.n]
        assert len(np.unique(ids)) == len(ids)
    # every current reservoir point is in every store at its recorded position
    mir = m.mirror
    for i, sv in enumerate(mir.pool.stores):
        for j in range(mir.res.n):
            if mir.pos[i, j] >= 0:
                assert sv.ids[mir.pos[i, j]] == mir.res.ids[j]


# -- norms ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,kw", [("bao2ks", {}), ("ea2oks", {}), ("bea2oks", {"budget": 15}),
                                     ("ea2oks", {"radius": 1.5})])
def test_incremental_norms_equal_exact(name: str, kw: dict) -> None:
    X, y = stream(400, d=4, seed=7, noise=0.3)
    m = make(name, seed=1, sigmas="2^-1:1:2", horizon=400, **kw)
    for t in range(400):
        m.learn_one(X[t], y[t])
        if t % 40 == 39:
            mir = m.mirror
            np.testing.assert_allclose(mir.n2, mir.pool.exact_norm2(), rtol=1e-9, atol=1e-10)
            np.testing.assert_allclose(mir.H[:, :mir.res.n], mir.exact_h(), rtol=1e-9,
                                       atol=1e-10)
            assert (mir.n2 <= m.radius**2 * (1 + 1e-12)).all()


@pytest.mark.parametrize("convention", ["p0", "p1", "p2"])
def test_oks_store_norms_exact(convention: str) -> None:
    X, y = stream(300, seed=4)
    m = make("oks", seed=0, convention=convention, horizon=300)
    m.predict_learn_many(X, y)
    np.testing.assert_allclose(m.pool.norm2, m.pool.exact_norm2(), rtol=1e-9, atol=1e-12)


def test_shared_pool_norms_and_scores() -> None:
    rng = np.random.default_rng(0)
    w = GaussianWidths(parse_sigmas("0.5,1,3"))
    pool = SharedPool(w, 3, capacity=2)
    for step in range(120):
        x = rng.normal(size=3)
        xx = float(x @ x)
        f, _ = pool.scores(x, xx)
        if pool.n:  # scores equal per-kernel evaluation
            for i, k in enumerate(w.kernels):
                want = pool.A[i, :pool.n] @ k.row(pool.X[:pool.n], pool.sqn[:pool.n], x, xx)
                assert f[i] == pytest.approx(want, rel=1e-12, abs=1e-14)
        op = rng.integers(4) if pool.n else 0
        if op == 0:
            pool.append(x, xx, rng.normal(size=3), f, id_=step, s=step)
        elif op == 1:
            j = int(rng.integers(pool.n))
            fj, _ = pool.scores(pool.X[j], float(pool.sqn[j]))
            pool.add_coef(j, rng.normal(size=3), fj)
        elif op == 2:
            pool.scale(rng.uniform(0.5, 1.5, size=3))
        else:
            j = int(rng.integers(pool.n))
            fj, _ = pool.scores(pool.X[j], float(pool.sqn[j]))
            pool.remove(j, fj)
        np.testing.assert_allclose(pool.norm2, pool.exact_norm2(), rtol=1e-9, atol=1e-10)
    st_ = pool.get_state("p.")
    other = SharedPool(w, 3)
    other.set_state(st_, "p.")
    x = rng.normal(size=3)
    np.testing.assert_array_equal(other.scores(x, float(x @ x))[0], pool.scores(x, float(x @ x))[0])


def test_kernel_pool_scores() -> None:
    w = GaussianWidths(parse_sigmas("1,2"))
    pool = KernelPool(w, 2)
    pool.stores[1].append(np.array([1.0, 0.0]), 1.0, 2.0)
    np.testing.assert_allclose(pool.scores(np.zeros(2), 0.0), [0.0, 2.0 * math.exp(-1 / 8)])
    pool.reset(1)
    assert pool.n_support_vectors == 0


def test_kernel_pool_scores_are_the_single_scores_bit_for_bit() -> None:
    """KernelPool.scores (eval_stores: one product per store, the rest of the rows at once)
    gives exactly the values of score(i) and of each store's own row, for any subset."""
    rng = np.random.default_rng(7)
    w = GaussianWidths(parse_sigmas("2^-3:1:2"))
    d = 13
    pool = KernelPool(w, d, capacity=4)
    for i, n in enumerate([0, 1, 37, 5, 120, 64]):
        for _ in range(n):
            z = rng.normal(size=d) * rng.uniform(0.1, 3.0)
            pool.stores[i].append(z, float(z @ z), float(rng.normal()))
    for _ in range(20):
        x = rng.normal(size=d) * rng.uniform(0.1, 3.0)
        xx = float(x @ x)
        single = [pool.score(i, x, xx)[0] for i in range(w.K)]
        np.testing.assert_array_equal(pool.scores(x, xx), single)
        np.testing.assert_array_equal(pool.scores(x, xx, [4, 0, 2]),
                                      [single[4], single[0], single[2]])
        f, rows = eval_stores(pool.stores, w.kernels, x, xx)
        for i, (sv, kern) in enumerate(zip(pool.stores, w.kernels, strict=True)):
            if sv.n:
                np.testing.assert_array_equal(rows[i], sv.row(kern, x, xx))
                assert f[i] == sv.eval(kern, x, xx)
            else:
                assert rows[i] is None and f[i] == 0.0


# -- parameters ----------------------------------------------------------------------------------
def test_parse_sigmas_ranges() -> None:
    np.testing.assert_allclose(parse_sigmas("2^-2:1:3"), 2.0 ** np.arange(-2, 4))
    assert len(parse_sigmas("2^-2:0.5:3.5")) == 12  # K12 of paper 001
    assert len(parse_sigmas("2^-1:0.5:2.5")) == 8
    np.testing.assert_allclose(parse_sigmas("2^-1:1:2"), [0.5, 1, 2, 4])
    np.testing.assert_allclose(parse_sigmas("0.25, 2^3"), [0.25, 8.0])
    # 1e-300 and 1e200: their gammas 1/(2σ²) are inf and 0 (numpy warnings, then NaN scores)
    for bad in ("", "a", "0", "-1", "2^1:0:3", "2^3:1:1", "nan", "1e-300", "1,1e200"):
        with pytest.raises(ValueError):
            parse_sigmas(bad)
    with pytest.raises(ValueError, match="sigmas"):
        make("bao2ks", sigmas="x")
    with pytest.raises(ValueError, match="raker: parameter 'sigmas'"):
        make("raker", sigmas="1e-300")


def test_reservoir_size_and_horizon() -> None:
    assert derive_reservoir_size(None, 24692, quirks=False) == 11  # ⌈ln T⌉ (paper)
    assert derive_reservoir_size(None, 24692, quirks=True) == 10  # round(ln T) (code)
    assert derive_reservoir_size(7, 24692, quirks=True) == 7
    assert make("bao2ks", horizon=24692, reference_quirks=True).M == 10
    assert make("ea2oks", horizon=48842).M == 11
    assert horizon_guess(1, None) == 1000 and horizon_guess(1001, None) == 2000
    assert horizon_guess(5, 77) == 77


# -- bandit / expert epochs ----------------------------------------------------------------------
def test_green_ix_epochs() -> None:
    K, dg = 4, 0.01
    g = GreenIX(K, dg)
    psi = K * math.log(K / dg)
    assert g.tau == 1 and g.rate == pytest.approx(0.25 / 8) and g.zeta == g.rate
    assert g.gamma == pytest.approx(0.25 / 4)
    while g.tau == 1:
        pt = g.frozen()
        g.update(0, 1.0, float(pt[0]))
        lhat = g.Lhat
        g.check_epoch()
        # a new epoch starts exactly when ε² L̂ > Ψ (ε = 1/2 in epoch 1)
        assert (g.tau == 2) == (0.25 * lhat > psi)
    assert g.Lhat == lhat  # never reset
    assert (g.L == 0).all() and np.allclose(g.p, 1 / K)
    assert g.eps == 0.25 and g.rate == pytest.approx(0.125 / 8)
    assert g.gamma == pytest.approx(0.125 / K)
    # freezing: entries below γ are zeroed and the rest renormalised
    g.p = np.array([0.9, 0.09, 0.005, 0.005])
    assert g.gamma > 0.005
    np.testing.assert_allclose(g.frozen(), np.array([0.9, 0.09, 0, 0]) / 0.99)


def test_green_ix_epoch_boundary() -> None:
    g = GreenIX(3, 0.01)
    g.Lhat = g.psi / 0.25  # ε² L̂ = Ψ: not yet
    g.check_epoch()
    assert g.tau == 1
    g.Lhat += 1e-9
    g.check_epoch()
    assert g.tau == 2


def test_expert_epochs_start_twice_then_guess_64() -> None:
    e = ExpWeights(6, 20.0)
    e.check_epoch()  # round 1
    assert e.r == 2
    e.update(np.full(6, 0.1))
    e.check_epoch()  # round 2
    assert e.r == 3 and e.rate == pytest.approx(math.log1p(math.sqrt(2 * math.log(6) / 64)))
    for _ in range(100):
        e.update(np.array([0.0, 1, 1, 1, 1, 1]))
        e.check_epoch()
    assert e.r == 3  # min L stays 0
    while e.r == 3:
        e.update(np.full(6, 1.0))
        e.check_epoch()
    assert e.r == 4 and (e.L == 0).all()


def test_ea2oks_learner_epochs_and_distribution() -> None:
    X, y = stream(50, seed=2)
    m = make("ea2oks", seed=0, horizon=50)
    m.learn_one(X[0], y[0])
    assert m.experts.r == 3  # the first two rounds start new epochs (code behaviour)
    np.testing.assert_allclose(m.kernel_distribution, m.experts.p / m.experts.p.sum())


# -- quirk switches ------------------------------------------------------------------------------
def test_oks_p1_quirk_step_and_hedge() -> None:
    X, y = stream(2, seed=0)
    T = 100
    for quirks in (False, True):
        m = make("oks", seed=0, horizon=T, reference_quirks=quirks)
        m.predict_one(X[0])
        i = m.selected_kernel
        p_i = float(m.kernel_distribution[i])
        m.learn_one(X[0], y[0])  # score 0: hinge loss 1, predicted +1
        lam = 5 / math.sqrt(T)
        coef = m.pool.stores[i].a[0]
        mistake = float(y[0] != 1.0)
        if quirks:
            assert coef == pytest.approx(lam * y[0])  # no importance weighting
            assert m.L[i] == pytest.approx(mistake / p_i)  # 0-1 loss
            q = np.exp(-(0.2 / 6) * m.L)  # rate δ/K
        else:
            assert coef == pytest.approx(lam * y[0] / p_i)
            assert m.L[i] == pytest.approx(1.0 / p_i)  # hinge loss
            q = np.exp(-math.sqrt(2 * 0.8 * math.log(6) / (6 * T)) * m.L)
        np.testing.assert_allclose(m.p, 0.8 * q / q.sum() + 0.2 / 6)


def test_oks_p2_appends_every_round() -> None:
    X, y = stream(60, seed=0)
    m = make("oks", seed=0, horizon=60, convention="p2", loss="logistic")
    m.predict_learn_many(X, y)
    assert m.n_support_vectors == 60
    with pytest.raises(ValueError, match="classification"):
        make("oks", reference_quirks=True, loss="square")


def test_bao2ks_quirk_feedback() -> None:
    """Quirks: no GREEN-IX feedback when I = J, and an unclipped (possibly negative) loss."""
    X, y = stream(300, seed=9, noise=0.0)
    for quirks in (False, True):
        m = make("bao2ks", seed=4, sigmas="1,2", horizon=300, eta=1.0, reference_quirks=quirks)
        neg_seen = False
        for t in range(300):
            s = m.predict_one(X[t])
            aux = m._pending[2][0]  # (aux, the draw): draws_in_predict
            i, j, pti = aux[0], aux[1], aux[6]
            L_before, lhat = m.bandit.L.copy(), m.bandit.Lhat
            tau, zeta = m.bandit.tau, m.bandit.zeta
            m.learn_one(X[t], y[t])
            if m.bandit.tau != tau:
                continue  # epoch change reset L
            dl = m.bandit.Lhat - lhat
            if quirks and i == j:
                assert dl == 0.0 and (m.bandit.L == L_before).all()
            else:
                raw = (1 - y[t] * s) / 21.0
                want = raw if quirks else max(raw, 0.0)
                assert dl == pytest.approx(want / (zeta + pti), rel=1e-12, abs=1e-15)
                assert (dl < 0) == (quirks and raw < 0)
                neg_seen |= dl < 0
        assert m.same_draw_rounds > 0 and m.same_draw_mistakes <= m.same_draw_rounds
        assert neg_seen == quirks


def test_bea2oks_restart_rule_and_memory() -> None:
    X, y = stream(600, d=3, seed=11, noise=0.3)
    B = 12
    for quirks in (False, True):
        m = make("bea2oks", seed=3, budget=B, horizon=600, reservoir_size=4,
                 reference_quirks=quirks)
        M = m.M
        peak = np.zeros(m.K, dtype=np.int64)
        orig = m._restart

        def spy(orig=orig, m=m, peak=peak) -> None:
            np.maximum(peak, m.mirror.pool.sizes, out=peak)  # sizes before the restart test
            orig()

        m._restart = spy
        for t in range(600):
            m.learn_one(X[t], y[t])
            sizes = m.support_sizes
            assert (sizes <= B).all() if quirks else (sizes < B).all()
        assert (peak <= B + M + 1).all()  # within a round: at most B (+ M + 1)
        assert m.restarts.sum() > 0
        if quirks:
            assert (peak > B).any()
    # EA2OKS with the same seed keeps growing
    e = make("ea2oks", seed=3, horizon=600, reservoir_size=4)
    e.predict_learn_many(X, y)
    assert e.support_sizes.max() > B


def test_restart_zeroes_the_kernel() -> None:
    X, y = stream(200, seed=5, noise=0.3)
    m = make("bea2oks", seed=1, budget=10, horizon=200)
    m.predict_one(X[0])
    for t in range(200):
        before = m.restarts.copy()
        m.learn_one(X[t], y[t])
        for i in np.flatnonzero(m.restarts > before):
            assert m.mirror.pool.stores[i].n == 0
            assert m.mirror.n2[i] == 0.0 and (m.mirror.H[i] == 0).all()
