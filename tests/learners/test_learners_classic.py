"""Behavioural tests of the classic baselines (ALGORITHMS.md §4.2–4.5, §4.7, §4.8): OGD, PA-I,
RBP, Forgetron, BPA-S and BOGD.

Hand-computed first rounds on a tiny 2-D stream, invariants of the budget maintenance and
brute-force cross-checks. The generic contract (determinism, state round trip, batch == loop)
is covered by ``test_conformance.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelstream.learners import get, make

# Tiny 2-D stream, Gaussian gamma = 0.5: κ(x1,x2) = κ(x1,x3) = e^{-1/2}, κ(x2,x3) = e^{-1}.
X3 = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
Y3 = np.array([1.0, -1.0, 1.0])
E5, E1 = math.exp(-0.5), math.exp(-1.0)


def noisy_stream(n: int, d: int = 3, noise: float = 0.2, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2 % d] >= 0, 1.0, -1.0)
    flip = rng.random(n) < noise
    y[flip] = -y[flip]
    return X, y


def coefs_by_round(m) -> dict[int, float]:
    """Stored coefficients keyed by insertion round ``s`` (slot order is not meaningful)."""
    sv = m.sv
    return {int(s): float(a) for s, a in zip(sv.s[: sv.n], sv.a[: sv.n], strict=True)}


def gauss(a: np.ndarray, b: np.ndarray, gamma: float) -> float:
    return math.exp(-gamma * float((a - b) @ (a - b)))


# -- OGD ---------------------------------------------------------------------------------------
def test_ogd_first_rounds_by_hand() -> None:
    eta, lam = 0.5, 0.1
    s = 1 - eta * lam
    m = make("ogd", gamma=0.5, eta=eta, lam=lam)
    scores = m.predict_learn_many(X3, Y3)
    a1 = eta  # round 1: f = 0 < 1, add η y
    f2 = a1 * E5
    f3 = a1 * s * E5 - eta * E1
    np.testing.assert_allclose(scores, [0.0, f2, f3], rtol=1e-12)
    assert f3 < 1.0
    assert coefs_by_round(m) == pytest.approx({0: a1 * s * s, 1: -eta * s, 2: eta}, rel=1e-12)
    assert m.sv.norm2 == pytest.approx(m.sv.exact_norm2(m.kern), rel=1e-10)


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
def test_ogd_matches_closed_form_coefficients(loss: str) -> None:
    """Coefficient of the SV of round s after T rounds: −η ℓ'(f_s(x_s), y_s) (1 − ηλ)^{T−1−s}."""
    from kernelstream.learners.losses import get_loss

    eta, lam, gamma = 0.3, 0.4, 0.7
    s = 1 - eta * lam
    X, y = noisy_stream(80, d=2, seed=1)
    m = make("ogd", gamma=gamma, eta=eta, lam=lam, loss=loss)
    scores = m.predict_learn_many(X, y)
    deriv = get_loss(loss).deriv
    grads: dict[int, float] = {}
    for t in range(len(y)):
        f = sum(-eta * g * s ** (t - 1 - j) * gauss(X[j], X[t], gamma) for j, g in grads.items())
        assert scores[t] == pytest.approx(f, abs=1e-12)
        if deriv(f, y[t]) != 0.0:
            grads[t] = deriv(f, y[t])
    T = len(y)
    want = {j: -eta * g * s ** (T - 1 - j) for j, g in grads.items()}
    got = coefs_by_round(m)
    assert got.keys() == want.keys()
    for j in want:
        assert got[j] == pytest.approx(want[j], rel=1e-10, abs=1e-15)
    assert m.sv.norm2 == pytest.approx(m.sv.exact_norm2(m.kern), rel=1e-9)


# -- PA-I --------------------------------------------------------------------------------------
def test_pa_first_rounds_by_hand() -> None:
    C = 1.2
    m = make("pa-i", gamma=0.5, c=C)
    scores = m.predict_learn_many(X3, Y3)
    tau1 = 1.0  # ℓ = 1, κ = 1
    tau2 = min(C, 1.0 + E5)  # = C: the loss 1 + e^{-1/2} is clipped
    f3 = tau1 * E5 - tau2 * E1
    tau3 = min(C, 1.0 - f3)  # not clipped
    assert tau2 == C and tau3 < C
    np.testing.assert_allclose(scores, [0.0, E5, f3], rtol=1e-12)
    assert coefs_by_round(m) == pytest.approx({0: tau1, 1: -tau2, 2: tau3}, rel=1e-12)


def test_pa_divides_by_self_kernel() -> None:
    m = make("pa-i", kernel="linear", c=10.0)
    m.learn_one([2.0, 0.0], 1)  # ℓ = 1, κ(x,x) = 4 ⇒ τ = 1/4
    m.learn_one([0.0, 0.0], 1)  # κ(x,x) = 0: zero function, nothing stored
    # the linear kernel's primal form keeps w = 0.25 · [2, 0] (one term, as the dual's SV)
    assert m.n_support_vectors == 1
    if getattr(m, "_primal", False):
        assert m.weights[1].tolist() == [0.5, 0.0]
    else:
        assert coefs_by_round(m) == {0: 0.25}
    assert m.predict_one([2.0, 0.0]) == pytest.approx(1.0)  # PA-I reaches the margin exactly


# -- RBP ---------------------------------------------------------------------------------------
FAR_X = np.array([[0.0], [10.0], [20.0], [30.0], [40.0]])  # kernel values ≈ 0: all mistakes
FAR_Y = np.array([1.0, -1.0, 1.0, -1.0, 1.0])


def test_rbp_evicts_uniformly_at_random() -> None:
    B, trials = 4, 2000
    counts = np.zeros(B)
    for seed in range(trials):
        m = make("rbp", seed=seed, budget=B, gamma=0.5)
        m.predict_learn_many(FAR_X[:B], FAR_Y[:B])
        m.learn_one(FAR_X[B], FAR_Y[B])
        got = coefs_by_round(m)
        assert len(got) == B and got[B] == 1.0  # the new mistake is stored with y_t
        gone = set(range(B)) - set(got)
        assert len(gone) == 1
        assert all(got[j] == FAR_Y[j] for j in got)  # survivors untouched
        counts[gone.pop()] += 1
    freq = counts / trials
    assert np.all(np.abs(freq - 1 / B) < 0.04), freq  # ~4 standard deviations


# -- Forgetron ---------------------------------------------------------------------------------
FX = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])  # κ(x1,x3) = e^{-2}
FY = np.array([1.0, -1.0, 1.0])


@pytest.mark.parametrize("quirks", [False, True])
def test_forgetron_first_eviction_by_hand(quirks: bool) -> None:
    m = make("forgetron", gamma=0.5, budget=2, reference_quirks=quirks)
    scores = m.predict_learn_many(FX, FY)
    np.testing.assert_allclose(scores, [0.0, E5, math.exp(-2.0) - E5], rtol=1e-12)
    assert m.mistakes == 3
    # Evict x1 (σ = 1, y = +1): μ = f'(x1) = f(x1) + y3 κ(x3, x1).
    mu = (1.0 - E5) + math.exp(-2.0)
    A, b, c = 1.0 - 2.0 * mu, 2.0, -15.0 * 3 / 32
    assert A < 0 and A + b + c > 0  # the branch where C-SOL takes the wrong root
    sq = math.sqrt(b * b - 4 * A * c)
    phi = (-b - sq) / (2 * A) if quirks else (-b + sq) / (2 * A)
    assert (phi > 1.0) if quirks else (0.0 < phi < 1.0)
    assert coefs_by_round(m) == pytest.approx({1: -phi, 2: phi}, rel=1e-12)
    assert m.damage == pytest.approx(A * phi * phi + b * phi, rel=1e-12)
    if quirks:  # the other root also satisfies the constraint with equality
        assert m.damage == pytest.approx(15.0 * 3 / 32, rel=1e-12)


@pytest.mark.parametrize("quirks", [False, True])
def test_forgetron_damage_stays_below_bound(quirks: bool) -> None:
    X, y = noisy_stream(1500, noise=0.3, seed=2)
    m = make("forgetron", gamma=1.0, budget=8, reference_quirks=quirks)
    evictions = 0
    for t in range(len(y)):
        m.learn_one(X[t], y[t])
        assert m.damage <= 15.0 * m.mistakes / 32.0 + 1e-9
        assert m.n_support_vectors <= 8
        if not quirks:  # φ ∈ (0, 1] ⇒ every |a_j| = σ_j ≤ 1
            assert np.all(np.abs(m.sv.coef) <= 1.0 + 1e-12)
        evictions = max(evictions, m.mistakes - 8)
    assert evictions > 100  # the budget maintenance was exercised


def test_forgetron_p1_first_rounds_by_hand() -> None:
    B = 2
    thr = (B + 1) ** (-1 / (2 * (B + 1)))
    U = 0.25 * math.sqrt((B + 1) / math.log(B + 1))
    m = make("forgetron", gamma=0.5, budget=B, variant="p1")
    m.learn_one(FX[0], 1)
    phi1 = min(thr, U / 1.0)
    assert coefs_by_round(m) == pytest.approx({0: phi1}, rel=1e-12)
    f2 = phi1 * E5
    m.learn_one(FX[1], -1)  # f2 > 0: mistake
    norm2 = phi1**2 - 2 * f2 + 1.0  # ‖f − κ(x2,·)‖²
    phi2 = min(thr, U / math.sqrt(norm2))
    assert coefs_by_round(m) == pytest.approx({0: phi1 * phi2, 1: -phi2}, rel=1e-12)
    assert m.sv.norm2 == pytest.approx(phi2 * phi2 * norm2, rel=1e-12)


@pytest.mark.parametrize("variant", ["self-tuned", "p1"])
def test_forgetron_keeps_the_last_mistakes(variant: str) -> None:
    """FIFO: the stored rounds are the B most recent mistakes; p1 tracks ‖f‖ exactly."""
    X, y = noisy_stream(600, noise=0.3, seed=3)
    B = 6
    m = make("forgetron", gamma=0.8, budget=B, variant=variant)
    mistakes: list[int] = []
    for t in range(len(y)):
        if y[t] * m.predict_one(X[t]) <= 0.0:
            mistakes.append(t)
        m.learn_one(X[t], y[t])
        sv = m.sv
        assert sorted(int(v) for v in sv.s[: sv.n]) == mistakes[-B:]
        if variant == "p1":
            assert sv.norm2 == pytest.approx(sv.exact_norm2(m.kern), rel=1e-8, abs=1e-12)
    assert m.mistakes == len(mistakes) > 5 * B


def test_forgetron_below_budget_is_the_perceptron() -> None:
    X, y = noisy_stream(300, noise=0.2, seed=8)
    f = make("forgetron", gamma=0.8, budget=10**4)
    p = make("perceptron", gamma=0.8)
    np.testing.assert_array_equal(f.predict_learn_many(X, y), p.predict_learn_many(X, y))


# -- BPA-S -------------------------------------------------------------------------------------
def bpas_brute_force(P, sqn, a, x, y, f, C, kern):
    """ALGORITHMS.md §4.7 verbatim: (r*, β_{r*}) minimising Q_r."""
    kt = kern.diag(float(x @ x))
    tau = min(C, (1.0 - y * f) / kt)
    best = None
    for r in range(len(a)):
        krt = float(kern.matrix(P[r : r + 1], x[None])[0, 0])
        krr = kern.diag(float(sqn[r]))
        beta = a[r] * krt / kt + tau * y
        Q = 0.5 * (a[r] ** 2 * krr + beta**2 * kt - 2 * a[r] * beta * krt) + C * max(
            0.0, 1.0 - y * (f - a[r] * krt + beta * kt)
        )
        if best is None or Q < best[0]:
            best = (Q, r, beta)
    assert best is not None
    return best[1], best[2]


@pytest.mark.parametrize(
    "params",
    [dict(gamma=0.7, c=0.7), dict(gamma=0.3, c=2.0), dict(kernel="polynomial", degree=2, c=0.5)],
)
def test_bpas_removes_the_argmin_q(params: dict) -> None:
    B = 5
    X, y = noisy_stream(300, noise=0.25, seed=4)
    m = make("bpa-s", budget=B, **params)
    checked = 0
    for t in range(len(y)):
        sv = m.sv if m.dim is not None else None
        before = None
        if sv is not None and sv.n == B:
            before = (sv.points.copy(), sv.sqn[:B].copy(), sv.coef.copy(), sv.ids[:B].copy())
        f = m.predict_one(X[t])
        m.learn_one(X[t], y[t])
        assert m.sv.n <= B
        if before is None or y[t] * f >= 1.0:
            continue
        P, sqn, a, ids = before
        r, beta = bpas_brute_force(P, sqn, a, X[t], y[t], f, m.c, m.kern)
        now = {int(i): float(c) for i, c in zip(m.sv.ids[:B], m.sv.coef, strict=True)}
        assert set(now) == (set(map(int, ids)) - {int(ids[r])}) | {t}
        assert now[t] == pytest.approx(beta, rel=1e-10, abs=1e-14)
        for i, c in zip(ids, a, strict=True):  # survivors untouched
            if i != ids[r]:
                assert now[int(i)] == c
        checked += 1
    assert checked > 50


def test_bpas_first_rounds_by_hand() -> None:
    m = make("bpa-s", gamma=0.5, budget=2, c=1.0)
    m.predict_learn_many(X3, Y3)
    # Rounds 1–2 as PA-I (τ = 1 both, loss 1 + e^{-1/2} clipped at C = 1).
    f3 = E5 - E1
    tau = min(1.0, 1.0 - f3)
    # Removal scores a_r²(1 − κ_r3²) (hinge term is the same for every r): 1 − e^{-1} for x1,
    # 1 − e^{-2} for x2 ⇒ x1 goes, x3 gets β = a_1 κ(x1, x3) + τ.
    assert coefs_by_round(m) == pytest.approx({1: -1.0, 2: E5 + tau}, rel=1e-12)


# -- BOGD --------------------------------------------------------------------------------------
def test_bogd_sol_removes_the_oldest_without_rescaling() -> None:
    eta, lam, B = 0.5, 0.2, 4
    s = 1 - eta * lam
    X, y = noisy_stream(200, noise=0.2, seed=5)
    m = make("bogd", gamma=0.6, budget=B, eta=eta, lam=lam)
    assert not m.randomized
    replaced = 0
    for t in range(len(y)):
        before = coefs_by_round(m) if m.dim is not None else {}
        f = m.predict_one(X[t])
        m.learn_one(X[t], y[t])
        after = coefs_by_round(m)
        assert len(after) <= B
        expect = {j: c * s for j, c in before.items()}
        if y[t] * f < 1.0:
            if len(before) == B:
                del expect[min(before)]  # the oldest insertion round
                replaced += 1
            expect[t] = eta * y[t]
        assert after == pytest.approx(expect, rel=1e-12)
    assert replaced > 30


def test_bogd_p1_rescales_and_clips() -> None:
    eta, lam, gb, B = 0.4, 0.05, 1.5, 5
    s = 1 - eta * lam
    X, y = noisy_stream(400, noise=0.3, seed=6)
    m = make("bogd", seed=3, gamma=0.5, budget=B, eta=eta, lam=lam, variant="p1", coef_bound=gb)
    assert m.randomized and not get("bogd").randomized
    replaced, clipped = 0, 0
    for t in range(len(y)):
        before = coefs_by_round(m) if m.dim is not None else {}
        f = m.predict_one(X[t])
        m.learn_one(X[t], y[t])
        after = coefs_by_round(m)
        assert len(after) <= B
        if y[t] * f >= 1.0 or len(before) < B:
            expect = {j: c * s for j, c in before.items()}
            if y[t] * f < 1.0:
                expect[t] = eta * y[t]
            assert after == pytest.approx(expect, rel=1e-12)
            continue
        replaced += 1
        gone = set(before) - set(after)
        assert len(gone) == 1 and t in after
        raw = {j: c * s * B / (B - 1) for j, c in before.items() if j not in gone}
        raw[t] = eta * y[t]
        top = max(abs(v) for v in raw.values())
        clip = min(1.0, eta * gb / top)
        clipped += clip < 1.0
        assert after == pytest.approx({j: v * clip for j, v in raw.items()}, rel=1e-12)
        assert max(abs(v) for v in after.values()) <= eta * gb * (1 + 1e-12)
    assert replaced > 50 and clipped > 10


# -- shared invariants and validation ------------------------------------------------------------
BUDGETED = [
    ("rbp", {}),
    ("forgetron", {}),
    ("forgetron", {"variant": "p1"}),
    ("forgetron", {"reference_quirks": True}),
    ("bpa-s", {}),
    ("bogd", {"eta": 0.5}),
    ("bogd", {"eta": 0.5, "lam": 0.1, "variant": "p1"}),
]


@pytest.mark.parametrize(("name", "params"), BUDGETED, ids=[f"{n}-{p}" for n, p in BUDGETED])
def test_budget_is_never_exceeded(name: str, params: dict) -> None:
    assert make(name, budget=7, **params).memory_bound() == 7
    X, y = noisy_stream(400, noise=0.3, seed=7)
    m = make(name, seed=1, budget=7, gamma=0.5, **params)
    sizes = []
    for t in range(len(y)):
        m.learn_one(X[t], y[t])
        sizes.append(m.n_support_vectors)
    assert max(sizes) == 7 and sizes[-1] == 7


def test_class_attributes() -> None:
    for name in ("ogd", "pa-i"):
        cls = get(name)
        assert cls().memory_bound() is None and not cls.randomized
    assert get("rbp").randomized
    assert not get("forgetron").randomized and not get("bpa-s").randomized


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("ogd", {"eta": 0.0}, "eta"),
        ("ogd", {"lam": -1.0}, "lam"),
        ("ogd", {"eta": 2.0, "lam": 0.5}, "eta\\*lam"),
        ("ogd", {"loss": "square"}, "loss"),
        ("pa-i", {"c": 0.0}, "'c'"),
        ("rbp", {"budget": 0}, "budget"),
        ("rbp", {"budget": 2.5}, "budget"),
        ("forgetron", {"variant": "p2"}, "variant"),
        ("forgetron", {"reference_quirks": "maybe"}, "reference_quirks"),
        ("bpa-s", {"c": -1.0}, "'c'"),
        ("bogd", {"variant": "p1", "budget": 1}, "budget >= 2"),
        ("bogd", {"coef_bound": 0.0}, "coef_bound"),
        ("bogd", {"eta": float("inf")}, "eta"),
    ],
)
def test_bad_parameters_raise(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make(name, **params)
