"""Paper 002's learners (ALGORITHMS.md §3.7–3.9, §4.11, §4.12): OKS++, IOKS, RF-OKS++, RF-IOKS,
RF-OKS, Raker, LKMBooks — selection distributions, the IOKS bisection (§8 b), regression end to
end (target scaling, CLI), quirk switches and the spec's formulas."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelstream import data
from kernelstream.engine.evaluate import evaluate
from kernelstream.learners import make
from kernelstream.learners.ioks import tsallis_omd_step
from kernelstream.learners.kernels import Gaussian
from kernelstream.learners.testing import make_stream
from kernelstream.pipelines.cli import main as cli_main

SELECTORS = ["oks++", "ioks", "rf-oks++", "rf-ioks", "rf-oks", "raker", "lkmbooks"]
SMALL = {"rf-oks++": {"n_components": 16}, "rf-ioks": {"n_components": 16},
         "rf-oks": {"n_components": 16}, "raker": {"n_components": 8}, "lkmbooks": {"budget": 10}}
LOSSES = {"oks++": ["logistic", "square"], "ioks": ["logistic", "absolute", "square"],
          "rf-oks++": ["logistic", "square"], "rf-ioks": ["logistic", "absolute", "square"],
          "rf-oks": ["logistic", "absolute", "square"],
          "raker": ["logistic", "square", "absolute"],
          "lkmbooks": ["logistic", "square", "absolute"]}


def _valid_prob(p: np.ndarray, K: int, what: str) -> None:
    assert p.shape == (K,), what
    assert np.all(np.isfinite(p)) and np.all(p >= 0.0), f"{what}: {p}"
    assert abs(p.sum() - 1.0) <= 1e-9, f"{what}: sums to {p.sum()!r}"


# -- selection distributions are probability vectors at every round ----------------------------
@pytest.mark.parametrize("name", SELECTORS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), d=st.integers(1, 4),
       scale=st.sampled_from([1e-3, 1.0, 30.0]), loss_ix=st.integers(0, 2),
       quirks=st.booleans(), horizon=st.sampled_from([None, 5, 40]))
def test_distribution_is_probability_vector_every_round(name: str, seed: int, n: int, d: int,
                                                        scale: float, loss_ix: int,
                                                        quirks: bool,
                                                        horizon: int | None) -> None:
    loss = LOSSES[name][loss_ix % len(LOSSES[name])]
    params: dict = {**SMALL.get(name, {}), "loss": loss}
    m0 = make(name, seed=seed, **params)
    names = {p.name for p in type(m0).params}
    if "reference_quirks" in names:
        params["reference_quirks"] = quirks
    if "horizon" in names:
        params["horizon"] = horizon
    m = make(name, seed=seed, **params)
    rng = np.random.default_rng(seed)
    X = scale * rng.normal(size=(n, d))
    if m.task == "classification":
        y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    else:
        y = scale * rng.normal(size=n)
    K = 6
    _valid_prob(m.kernel_distribution, K, "before the first round")
    for t in range(n):
        s = m.predict_one(X[t])
        assert math.isfinite(s)
        sel = m.selected_kernel
        assert sel is not None and 0 <= sel < K
        _valid_prob(m.kernel_distribution, K, f"round {t} (after predict)")
        m.learn_one(X[t], y[t])
        _valid_prob(m.kernel_distribution, K, f"round {t} (after learn)")


def test_bandit_floor() -> None:
    """OKS++ keeps p_i ≥ δ_t/K > 0; RF-OKS keeps p_i ≥ (K/T)^{1/3}/K."""
    X, y = make_stream("classification", 300, noise=0.1)
    m = make("rf-oks", seed=0, n_components=16, horizon=300)
    floor = (6 / 300) ** (1 / 3) / 6
    for t in range(300):
        m.step(X[t], y[t])
        assert m.kernel_distribution.min() >= floor - 1e-12


# -- the IOKS bisection (§3.8 step 6, §8 b) -----------------------------------------------------
ADVERSARIAL = [
    ("all equal", np.full(6, 1 / 6), np.full(6, 0.05)),
    ("one dominant", np.array([1 - 5e-10, 1e-10, 1e-10, 1e-10, 1e-10, 1e-10]), np.full(6, 0.1)),
    ("dominant other", np.array([1e-10, 1 - 5e-10, 1e-10, 1e-10, 1e-10, 1e-10]), np.full(6, 0.1)),
    ("mixed rates", np.array([0.05, 0.1, 0.4, 0.2, 0.2, 0.05]),
     np.array([1e-4, 0.3, 2.0, 0.01, 5.0, 0.2])),
    ("two arms", np.array([0.3, 0.7]), np.array([0.5, 0.5])),
]
LOSS_VALUES = [1e-300, 1e-12, 1e-5, 0.3, 1.0, 50.0, 1e4, 1e8, 1e300]


@pytest.mark.parametrize(("what", "q", "eta"), ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
@pytest.mark.parametrize("lhat", LOSS_VALUES)
@pytest.mark.parametrize("tol", [1e-5, 1e-7])
@pytest.mark.parametrize("tighten", [True, False])
def test_bisection_adversarial(what: str, q: np.ndarray, eta: np.ndarray, lhat: float,
                               tol: float, tighten: bool) -> None:
    for i in range(len(q)):
        r = tsallis_omd_step(q, eta, i, lhat, tol=tol, tighten=tighten)
        assert r.residual <= tol, f"{what}, arm {i}, lhat {lhat}: |F-1| = {r.residual}"
        assert 0.0 <= r.lam <= lhat, f"λ* = {r.lam} outside [0, {lhat}]"
        assert r.iterations < 200
        _valid_prob(r.q, len(q), f"{what}, arm {i}")
        raw = tsallis_omd_step(q, eta, i, lhat, tol=tol, normalize=False, tighten=tighten).q
        assert abs(raw.sum() - 1.0) <= tol + 1e-12  # the code's unnormalised iterate
        # the arm that suffered the loss loses mass, every other arm gains (λ* ≥ 0)
        others = np.arange(len(q)) != i
        assert raw[i] <= q[i] * (1 + 1e-12)
        assert np.all(raw[others] >= q[others] * (1 - 1e-12))


@settings(max_examples=200, deadline=None)
@given(alpha=st.lists(st.floats(0.01, 10.0), min_size=2, max_size=8),
       log_eta=st.lists(st.floats(-6.0, 1.0), min_size=8, max_size=8),
       log_l=st.floats(-12.0, 12.0), i=st.integers(0, 7), seed=st.integers(0, 1000))
def test_bisection_random(alpha: list[float], log_eta: list[float], log_l: float, i: int,
                          seed: int) -> None:
    K = len(alpha)
    q = np.random.default_rng(seed).dirichlet(alpha)
    q = np.maximum(q, 1e-300)
    q /= q.sum()
    eta = 10.0 ** np.array(log_eta[:K])
    lhat = 10.0**log_l
    r = tsallis_omd_step(q, eta, i % K, lhat, tol=1e-7)
    assert r.residual <= 1e-7
    assert 0.0 <= r.lam <= lhat
    _valid_prob(r.q, K, "random")
    # λ* agrees with a much tighter solve: F is convex increasing, so between the two roots
    # its slope is at least F'(min λ) = (8/7) Σ η_j base_j^{-15/7}
    ref = tsallis_omd_step(q, eta, i % K, lhat, tol=1e-13)
    lo = min(r.lam, ref.lam)
    ell = np.zeros(K)
    ell[i % K] = lhat
    base = q ** (-7 / 8) + eta * (ell - lo)
    slope = 8 / 7 * float(np.sum(eta * base ** (-15 / 7)))
    assert abs(r.lam - ref.lam) <= 1.01 * (r.residual + ref.residual) / slope + 1e-12 * lhat


def _plain_bisection(q: np.ndarray, eta: np.ndarray, i: int, lhat: float, tol: float,
                     normalize: bool) -> tuple[float, list[float], int]:
    """§3.8 step 6 as written: try λ = hi, then λ = 0, then bisect [0, hi] (reference)."""
    a = [float(v) ** (-7 / 8) if v > 0 else math.inf for v in q]
    pole = min([a[j] / eta[j] for j in range(len(q)) if j != i and eta[j] > 0], default=math.inf)
    hi = min(lhat, (1 - 1e-12) * pole)

    def terms(lam: float) -> list[float]:
        return [(a[j] + eta[j] * (lhat - lam)) ** (-8 / 7) if j == i
                else (a[j] - eta[j] * lam) ** (-8 / 7) for j in range(len(q))]

    def big_f(lam: float) -> float:  # arm i first, then the others in order
        t = terms(lam)
        s = t[i]
        for j, v in enumerate(t):
            if j != i:
                s += v
        return s

    lo, lam, it = 0.0, hi, 0
    f = big_f(hi)
    if abs(f - 1) > tol:
        lam = 0.0
        f = big_f(0.0)
        while abs(f - 1) > tol and it < 200:
            lam = 0.5 * (lo + hi)
            f = big_f(lam)
            it += 1
            lo, hi = (lam, hi) if f < 1 else (lo, lam)
    q_new = terms(lam)
    if normalize:
        tot = 0.0
        for v in q_new:
            tot += v
        q_new = [v / tot for v in q_new]
    return lam, q_new, it


@pytest.mark.parametrize(("what", "q", "eta"), ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
@pytest.mark.parametrize("normalize", [True, False])
def test_plain_bisection_is_the_reference(what: str, q: np.ndarray, eta: np.ndarray,
                                          normalize: bool) -> None:
    """tighten=False is exactly §3.8's bisection (bit for bit: same points, same result)."""
    for lhat in LOSS_VALUES:
        for i in range(len(q)):
            r = tsallis_omd_step(q, eta, i, lhat, normalize=normalize, tighten=False)
            lam, q_ref, it = _plain_bisection(q, eta, i, lhat, 1e-5, normalize)
            assert (r.lam, r.iterations) == (lam, it), f"{what}, arm {i}, lhat {lhat}"
            assert r.q.tolist() == q_ref, f"{what}, arm {i}, lhat {lhat}"


@settings(max_examples=300, deadline=None)
@given(alpha=st.lists(st.floats(0.01, 10.0), min_size=2, max_size=8),
       log_eta=st.lists(st.floats(-6.0, 1.0), min_size=8, max_size=8),
       log_l=st.floats(-12.0, 12.0), i=st.integers(0, 7), seed=st.integers(0, 1000),
       tol=st.sampled_from([1e-5, 1e-7]))
def test_tight_bracket_within_tolerance_of_plain(alpha: list[float], log_eta: list[float],
                                                 log_l: float, i: int, seed: int,
                                                 tol: float) -> None:
    """The convexity bracket changes where in the tolerance window λ* lands, not the window:
    both meet |F − 1| ≤ tol, and since every q_j increases with λ the raw iterates differ by
    F(λ_max) − F(λ_min) ≤ 2 tol in L1."""
    K = len(alpha)
    q = np.maximum(np.random.default_rng(seed).dirichlet(alpha), 1e-300)
    q /= q.sum()
    eta, lhat = 10.0 ** np.array(log_eta[:K]), 10.0**log_l
    tight = tsallis_omd_step(q, eta, i % K, lhat, tol=tol, normalize=False)
    plain = tsallis_omd_step(q, eta, i % K, lhat, tol=tol, normalize=False, tighten=False)
    assert tight.residual <= tol and plain.residual <= tol
    assert np.abs(tight.q - plain.q).sum() <= 2 * tol * (1 + 1e-9) + 1e-15


def test_tight_bracket_needs_fewer_steps() -> None:
    """What the bracket is for: far fewer bisection steps on IOKS-like steps (K = 6, rates
    around η₀ ≈ 8 K^{3/8}/(U √T √ln T) for T in the thousands, clipped estimates ≲ 10)."""
    rng = np.random.default_rng(5)
    steps = {True: 0, False: 0}
    for _ in range(300):
        q = rng.dirichlet(np.full(6, 2.0))
        eta = np.full(6, 10.0 ** rng.uniform(-3, -1.5))
        lhat = 10.0 ** rng.uniform(-2, 1)
        i = int(rng.integers(6))
        for tighten in steps:
            steps[tighten] += tsallis_omd_step(q, eta, i, lhat, tighten=tighten).iterations
    assert steps[True] * 3 <= steps[False], steps


def test_bisection_zero_loss_keeps_q() -> None:
    q = np.array([0.2, 0.3, 0.5])
    r = tsallis_omd_step(q, np.full(3, 0.1), 1, 0.0)
    assert r.lam == 0.0 and np.array_equal(r.q, q)


def test_bisection_can_fail() -> None:
    """The tolerance is really checked: one step of bisection cannot reach 1e-12."""
    q = np.full(6, 1 / 6)
    r = tsallis_omd_step(q, np.full(6, 0.3), 0, 5.0, tol=1e-12, max_iter=1)
    assert r.residual > 1e-12 and r.iterations == 1


# -- regression end to end ---------------------------------------------------------------------
@pytest.mark.parametrize(("name", "loss"), [(n, lo) for n in SELECTORS for lo in LOSSES[n]
                                            if lo != "logistic"])
def test_regression_learners(name: str, loss: str) -> None:
    X, y = make_stream("regression", 400, noise=0.05, seed=2)
    y = (y - y.min()) / (y.max() - y.min())  # targets in [0, 1] as paper 002
    params = {**SMALL.get(name, {}), "loss": loss}
    if name in ("ioks", "rf-ioks", "rf-oks", "raker", "lkmbooks"):
        params["horizon"] = 400
    m = make(name, seed=1, **params)
    assert m.task == "regression"
    with pytest.raises(ValueError, match=r"label|target"):
        m.learn_one(X[0], float("nan"))
    res = evaluate(X, y, name, params, permutations=2, progress=None)
    assert res.task == "regression" and res.loss == loss
    assert res.mistake_rate is None
    assert all(r.mistake_rate is None for r in res.runs)
    baseline = float(np.mean((0.0 - y) ** 2) if loss == "square" else np.mean(np.abs(y)))
    if (name, loss) == ("rf-oks", "square"):
        # Known: the P2 OKS constants (λ = 25√δ/√(KT), importance-weighted step) make the
        # step multiplier 2λ/p_I exceed 2 once p_I reaches its floor δ/K, so rarely drawn
        # kernels diverge (reported; ALGORITHMS.md §3.2 gives c = 25 for square loss).
        assert math.isfinite(res.avg_loss)
        return
    # better than predicting 0 all along (the first prediction)
    assert res.avg_loss < baseline, f"{name}/{loss}: {res.avg_loss} vs {baseline}"


def test_classification_learners_reject_regression_targets() -> None:
    m = make("oks++", loss="logistic")
    assert m.task == "classification"
    with pytest.raises(ValueError, match="label"):
        m.learn_one([0.0, 1.0], 0.3)
    assert make("oks++", loss="square").task == "regression"


def _write_libsvm(path, X: np.ndarray, y: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    with open(path, "w") as f:
        for xi, yi in zip(X, y, strict=True):
            f.write(f"{float(yi)!r} "
                    + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(xi)) + "\n")


def test_load_scale_target(tmp_path) -> None:  # type: ignore[no-untyped-def]
    X = np.array([[1.0, 5.0], [2.0, 7.0], [4.0, 9.0]])
    y = np.array([10.0, 30.0, 20.0])
    p = tmp_path / "r.libsvm"
    _write_libsvm(p, X, y)
    _, y0 = data.load(p, task="regression")
    assert np.array_equal(y0, y)
    Xs, ys = data.load(p, task="regression", scale="01", scale_target="01")
    assert np.allclose(ys, [0.0, 1.0, 0.5])
    assert Xs.min() == 0.0 and Xs.max() == 1.0
    with pytest.raises(ValueError, match="regression"):
        data.load(p, task="classification", scale_target="01")
    with pytest.raises(ValueError, match="scale_target"):
        data.load(p, task="regression", scale_target="pm1")  # type: ignore[arg-type]
    assert np.array_equal(data.scale_target_minmax(np.full(3, 2.0)), np.zeros(3))


def test_cli_replay_regression(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    X = rng.random((150, 3)) * 50.0
    y = 100.0 + 40.0 * np.sin(X[:, 0] / 10.0)
    p = tmp_path / "reg.libsvm"
    _write_libsvm(p, X, y)
    out = tmp_path / "out"
    rc = cli_main(["replay", str(p), "--task", "regression", "--scale", "01",
                   "--scale-target", "01", "--learner", "oks++", "-p", "loss=square",
                   "--out", str(out), "-q"])
    assert rc == 0
    doc = json.loads((out / "summary.json").read_text())
    assert doc["task"] == "regression" and doc["scale_target"] == "01"
    assert doc["mistake_rate"] is None and doc["loss"] == "square"
    assert 0.0 < doc["avg_loss"] < 0.5  # targets scaled to [0, 1]
    rc = cli_main(["replay", str(p), "--task", "regression", "--learner", "oks++",
                   "-p", "loss=square", "--out", str(tmp_path / "raw"), "-q"])
    raw = json.loads((tmp_path / "raw" / "summary.json").read_text())
    assert rc == 0 and raw["avg_loss"] > 10.0 * doc["avg_loss"]  # unscaled targets ~ 100
    # --scale-target on a classification run is refused
    rc = cli_main(["replay", str(p), "--learner", "oks++", "--scale-target", "01",
                   "--out", str(tmp_path / "bad"), "-q"])
    assert rc == 2


# -- quirk switches ----------------------------------------------------------------------------
def _scores(name: str, X: np.ndarray, y: np.ndarray, **kw) -> np.ndarray:  # type: ignore[no-untyped-def]
    return make(name, seed=3, **kw).predict_learn_many(X, y)


def test_oks_pp_c0_quirk_matches_formula() -> None:
    """One round by hand: f = 0, so the quirk's c₀ = e^{−yf} = 1 (intended c₀ = 90^{2/3})."""
    x = np.array([0.3, -0.2])
    K, U = 6, 15.0
    for quirk, c0 in ((False, (U * K) ** (2 / 3)), (True, 1.0)):
        m = make("oks++", seed=0, reference_quirks=quirk)
        m.predict_one(x)
        i = m.selected_kernel
        m.learn_one(x, 1.0)
        lt = math.log(2.0) * K  # ℓ̃ = ln 2 / (1/K)
        L = np.zeros(K)
        L[i] = lt
        eta = math.sqrt(2 * math.log(K)) / math.sqrt(1 + lt * lt / K)
        q = np.exp(-eta * (L - L.min()))
        q /= q.sum()
        delta = 0.5 * c0 / max(c0, 2 * lt ** (1 / 3))
        assert np.allclose(m.p, (1 - delta) * q + delta / K, rtol=1e-13, atol=0)
        lam = math.sqrt(0.75) * U ** (4 / 3) * max(c0**3, 8 * lt) ** (-1 / 6) / (
            K ** (1 / 6) * math.sqrt(1 + lt))
        a = m._hyp.stores[i].coef
        coef = lam * 0.5 * K  # −λ ℓ'/p with ℓ' = −1/2, then the projection onto ‖f‖ ≤ U
        assert np.allclose(a, [min(coef, U)], rtol=1e-13)


def test_oks_pp_quirk_only_for_logistic() -> None:
    X, y = make_stream("classification", 200, noise=0.1)
    assert not np.array_equal(_scores("oks++", X, y), _scores("oks++", X, y,
                                                              reference_quirks=True))
    Xr, yr = make_stream("regression", 200)
    assert np.array_equal(_scores("oks++", Xr, yr, loss="square"),
                          _scores("oks++", Xr, yr, loss="square", reference_quirks=True))
    assert np.array_equal(_scores("rf-oks++", Xr, yr, loss="square", n_components=16),
                          _scores("rf-oks++", Xr, yr, loss="square", n_components=16,
                                  reference_quirks=True))


def test_ioks_quirk_no_renormalisation() -> None:
    X, y = make_stream("classification", 300, noise=0.1)
    a = make("ioks", seed=0, horizon=300)
    b = make("ioks", seed=0, horizon=300, reference_quirks=True)
    a.predict_learn_many(X, y)
    b.predict_learn_many(X, y)
    assert abs(a.q.sum() - 1.0) < 1e-12
    assert abs(b.q.sum() - 1.0) <= 1e-5 * 300  # drift bounded by the tolerance per round
    assert a.q.tobytes() != b.q.tobytes()
    _valid_prob(b.kernel_distribution, 6, "quirk")


def test_raker_cumulative_sigma_quirk() -> None:
    X, y = make_stream("classification", 150, noise=0.1)
    sig = np.array([0.25, 0.5, 1, 2, 4, 8])
    quirk = _scores("raker", X, y, n_components=8, horizon=150, reference_quirks=True)
    same = _scores("raker", X, y, n_components=8, horizon=150,
                   sigmas=",".join(repr(float(s)) for s in np.cumprod(sig)))
    plain = _scores("raker", X, y, n_components=8, horizon=150)
    assert np.allclose(quirk, same, rtol=1e-12, atol=1e-15)
    assert not np.allclose(quirk, plain)


# -- formulas and invariants -------------------------------------------------------------------
def test_oks_pp_tracked_norm_exact_and_projected() -> None:
    X, y = make_stream("regression", 300, noise=0.1)
    m = make("oks++", seed=0, loss="square")
    m.predict_learn_many(X, y)
    for i, sv in enumerate(m._hyp.stores):
        if sv.n == 0:
            continue
        exact = sv.exact_norm2(Gaussian(1.0 / (2.0 * m.widths.sigmas[i] ** 2)))
        assert math.isclose(sv.norm2, exact, rel_tol=1e-8, abs_tol=1e-10)
        assert sv.norm <= 1.0 + 1e-9  # U = 1 for square loss
    assert m.n_support_vectors == 300  # one SV per round


def test_rf_box_projection() -> None:
    X, y = make_stream("classification", 300, noise=0.1)
    for name, kw in (("rf-oks++", {}), ("rf-ioks", {"horizon": 300})):
        m = make(name, seed=0, n_components=16, **kw)  # U = 15: box ±15/√16
        m.predict_learn_many(X, y)
        assert np.abs(m._hyp.W).max() == 3.75  # the clip is active and exact


def test_ioks_constants_and_doubling() -> None:
    T, K = 5000, 6
    m = make("ioks", horizon=T)
    m.predict_learn_many(np.zeros((1, 2)), [1.0])
    assert math.isclose(m._eta0, 8 * K**0.375 / (15 * math.sqrt(T) * math.sqrt(math.log(T))))
    assert math.isclose(m._delta, T**-0.75)
    assert math.isclose(m._kappa, math.exp(2 / (3 * math.log(T))))
    u = make("ioks")  # unknown horizon: T guessed 1000, then 2000 after round 1000
    X, y = make_stream("classification", 1001)
    u.predict_learn_many(X[:1000], y[:1000])
    assert u._T == 1000
    e = u.eta.copy()
    u.predict_learn_many(X[1000:], y[1000:])
    assert u._T == 2000
    ratio = math.sqrt(1000 * math.log(1000)) / math.sqrt(2000 * math.log(2000))
    grown = u.eta / e
    assert np.all((np.isclose(grown, ratio)) | np.isclose(grown, ratio * u._kappa))


def test_lkmbooks_budget_and_sampling() -> None:
    X, y = make_stream("classification", 600, noise=0.2)
    m = make("lkmbooks", seed=0, budget=25, horizon=600)
    for t in range(600):
        m.step(X[t], y[t])
        assert m.n_support_vectors <= 25
    assert m.n_support_vectors == 25  # E[#SV] = B/(1-ν)² (t/T)^{1-ν} exceeds B before T
    nu, T, B = 1 / 7, 600, 25
    assert math.isclose(m._pden, (1 - nu) * T ** (1 - nu))
    assert math.isclose(min(1.0, B / (m._pden * 1**nu)), min(1.0, B / ((1 - nu) * T ** (1 - nu))))


def test_selected_kernel_of_combiners_is_argmax() -> None:
    X, y = make_stream("classification", 200, noise=0.1)
    for name in ("raker", "lkmbooks"):
        m = make(name, seed=0, **SMALL[name])
        assert m.selected_kernel is None
        m.predict_learn_many(X, y)
        assert m.selected_kernel == int(np.argmax(m.kernel_distribution))
        assert not m.draws_in_predict and m.randomized


def test_lkmbooks_weights_survive_underflow() -> None:
    """Regression (found by the property test above): with g_max the range seen *before* a
    round, one round's linearised losses can be far above 1 and underflow every remaining
    weight; the update then continues in the log domain instead of dividing 0 by 0."""
    seed, n = 350429680, 14
    m = make("lkmbooks", seed=seed, **{**SMALL.get("lkmbooks", {}), "loss": "square",
                                        "horizon": 5})
    rng = np.random.default_rng(seed)
    X = 30.0 * rng.normal(size=(n, 1))
    y = 30.0 * rng.normal(size=n)
    for t in range(n):
        assert math.isfinite(m.predict_one(X[t]))
        m.learn_one(X[t], y[t])
        _valid_prob(m.kernel_distribution, 6, f"round {t}")
