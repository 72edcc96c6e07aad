"""SkeGD and its sketching block (ALGORITHMS.md §3.10, §8 d), INys and the kernel-approximation
error (§2.7), the adversarial streams (§2.6)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kernelstream.engine.orders import PRESETS, adversarial_stream, evaluate_stream, preset_stream
from kernelstream.learners import make
from kernelstream.learners.base import state_from_bytes, state_to_bytes
from kernelstream.learners.kernels import Gaussian
from kernelstream.learners.nystrom import IncrementalNystrom, relative_kernel_error
from kernelstream.learners.skegd import SkeGD
from kernelstream.learners.sketch import IncrementalSketch, block_layout, sjlt_dense
from kernelstream.learners.testing import make_stream

GAMMA = 0.3


def _data(n: int = 400, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return make_stream("classification", n, d=d, noise=0.1, seed=seed)


# -- the sketching block -----------------------------------------------------------------------
@pytest.mark.parametrize(("sp", "db"), [(75, 4), (150, 4), (15, 4), (10, 1), (7, 7)])
def test_sjlt_rows_have_one_signed_nonzero_per_block(sp: int, db: int) -> None:
    sk = IncrementalSketch(sp, 3, db)
    cols, vals = sk.draw_rows(np.random.default_rng(1), 500)
    off, wid = block_layout(sp, db)
    assert list(wid) == [len(b) for b in np.array_split(np.arange(sp), db)]  # array_split sizes
    assert off[0] == 0 and off[-1] + wid[-1] == sp
    assert np.all((cols >= off) & (cols < off + wid))  # column b lies in block b
    assert np.allclose(np.abs(vals), 1.0 / math.sqrt(db))
    S = sjlt_dense(cols, vals, sp)
    assert np.all(np.count_nonzero(S, axis=1) == db)
    # every column of every block is used, both signs occur
    assert len(np.unique(cols)) == sp and (vals > 0).any() and (vals < 0).any()


def test_rank1_updates_equal_full_recomputation() -> None:
    """§8 (d): Φ_pp = S_pᵀKS_p and Φ_pm = S_pᵀKS_m kept by rank-1 modifications equal a full
    recomputation on the row list."""
    rng = np.random.default_rng(3)
    X, _ = _data(160)
    kern = Gaussian(GAMMA)
    B, sp, sm, db = 40, 30, 8, 4
    sk = IncrementalSketch(sp, sm, db)
    sk.initialize(kern.matrix(X[:B]), rng)
    sqn = np.einsum("ij,ij->i", X, X)
    for n in range(B, len(X)):
        psi = kern.row(X[:n], sqn[:n], X[n], sqn[n])
        sk.add_row(psi, 1.0, psi[sk.landmarks], rng)
    assert sk.n == len(X)
    pp, pm = sk.pp.copy(), sk.pm.copy()
    S = sk.dense()
    K = kern.matrix(X)
    np.testing.assert_allclose(pp, S.T @ K @ S, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pm, S.T @ K[:, sk.landmarks], rtol=1e-10, atol=1e-10)
    sk.recompute(K)
    np.testing.assert_allclose(pp, sk.pp, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pm, sk.pm, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pp, pp.T, rtol=1e-12, atol=1e-12)
    # the landmarks are distinct rows of the initial buffer
    assert len(set(sk.landmarks.tolist())) == sm and sk.landmarks.max() < B


@pytest.mark.parametrize("exact", [True, False])
def test_learner_sketches_match_its_row_list(exact: bool) -> None:
    """Inside SkeGD (update every round): the sketches equal S_pᵀKS_p, S_pᵀKS_m of its rows R,
    and φ is Qᵀ κ(landmarks, x)."""
    X, y = _data(300)
    m = make("skegd", seed=2, budget=30, rank=5, gamma=GAMMA, eta=0.5, lam=0.01,
             update_cycle=1, exact_svd=exact)
    m.predict_learn_many(X, y)
    assert m.stage == 2 and m.n_updates == len(X) - m.init_round
    R = m.sv.points
    assert m.n_sketch_rows == 30 + m.n_updates == len(R)
    K = m.kern.matrix(R)
    S = m._sk.dense()
    np.testing.assert_allclose(m._sk.pp, S.T @ K @ S, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(m._sk.pm, S.T @ K[:, m._sk.landmarks], rtol=1e-9, atol=1e-9)
    Phi = m.feature_map(X[:7])
    kL = m.kern.matrix(X[:7], R[m._sk.landmarks])
    np.testing.assert_allclose(Phi, kL @ m._Qt.T, rtol=1e-12)
    assert Phi.shape == (7, 5)


def test_feature_map_approximates_the_kernel() -> None:
    """With generous sketch sizes φ(x)ᵀφ(x') ≈ κ(x, x') (Theorem 1 of paper 003)."""
    X, y = _data(400, d=3)
    m = make("skegd", seed=0, budget=120, sketch_size=120, tau=0.5, rank=40, gamma=GAMMA,
             eta=0.5, lam=0.0, exact_svd=True, update_cycle=50)
    m.predict_learn_many(X, y)
    err = relative_kernel_error(m.feature_map(X), X, gamma=GAMMA)
    assert err < 0.02, err


# -- SkeGD's procedure -------------------------------------------------------------------------
def _run_until_stage2(m, X, y):  # type: ignore[no-untyped-def]
    for i in range(len(X)):
        s = m.predict_one(X[i])
        m.learn_one(X[i], y[i])
        if m.stage == 2:
            return i, s
    raise AssertionError("never reached stage 2")


@pytest.mark.parametrize("quirks", [False, True])
def test_initialisation_carries_the_stage1_prediction(quirks: bool) -> None:
    X, y = _data(200)
    m = make("skegd", seed=1, budget=25, rank=4, gamma=GAMMA, eta=0.5, lam=0.01,
             reference_quirks=quirks)
    i, s = _run_until_stage2(m, X, y)
    assert m.init_round == i + 1 and m.n_support_vectors == m._sm
    after = m.predict_one(X[i])
    if quirks:  # [C-FORKS] also takes a gradient step at T₀
        phi = m.feature_map(X[i : i + 1])[0]
        assert math.isclose(after, s * (1 - 0.005) + 0.5 * y[i] * float(phi @ phi),
                            rel_tol=1e-9, abs_tol=1e-12)
    else:  # paper: w = f φ/‖φ‖², no gradient step in round T₀
        assert math.isclose(after, s, rel_tol=1e-9, abs_tol=1e-12)


def test_update_rounds_follow_the_cycle_and_rescale() -> None:
    """Update rounds are the t with t mod ρ = 1 after T₀; the rescaled w̄ keeps the prediction
    at x_t, so after the round f_{t+1}(x_t) = f_t(x_t) + η y ‖φ_{t+1}(x_t)‖² on a loss round
    (λ = 0, hinge) and f_t(x_t) otherwise."""
    X, y = _data(400)
    rho, eta = 37, 0.5
    m = make("skegd", seed=4, budget=20, rank=4, gamma=GAMMA, eta=eta, lam=0.0,
             update_cycle=rho)
    updated = []
    for t in range(1, len(X) + 1):
        before = m.n_updates
        s = m.predict_one(X[t - 1])
        m.learn_one(X[t - 1], y[t - 1])
        if m.n_updates > before:
            updated.append(t)
            phi = m.feature_map(X[t - 1 : t])[0]
            want = s + (eta * y[t - 1] * float(phi @ phi) if y[t - 1] * s < 1 else 0.0)
            assert math.isclose(m.predict_one(X[t - 1]), want, rel_tol=1e-9, abs_tol=1e-12)
    t0 = m.init_round
    assert updated == [t for t in range(t0 + 1, len(X) + 1) if t % rho == 1]
    assert len(updated) > 5 and m.n_sketch_rows == 20 + len(updated)


def test_horizon_sets_the_cycle_and_unknown_horizon_is_geometric() -> None:
    m = make("skegd", budget=100, horizon=1000)
    assert m.update_cycle_rounds == math.floor(0.3 * 900)
    assert make("skegd", budget=100, horizon=5000, theta=0.001).update_cycle_rounds == 4
    assert make("skegd", budget=100, horizon=5000, update_cycle=9).update_cycle_rounds == 9
    assert make("skegd").update_cycle_rounds is None
    # unknown horizon: next update max(1, ⌊θ(t − B)⌋) rounds after the previous one
    X, y = _data(3000)
    m = make("skegd", seed=0, budget=20, rank=4, gamma=GAMMA, theta=0.3)
    rounds = []
    for t in range(1, len(X) + 1):
        before = m.n_updates
        m.step(X[t - 1], y[t - 1])
        if m.n_updates > before:
            rounds.append(t)
    prev = [m.init_round, *rounds[:-1]]
    assert rounds == [p + max(1, math.floor(0.3 * (p - 20))) for p in prev]
    assert len(rounds) < 40  # logarithmic, not linear, in the stream length


def test_per_round_memory_is_bounded() -> None:
    """Known horizon: at most B + ⌊(T−B)/ρ⌋ + 1 sketch rows, state size flat after the first
    updates; quirks: R is the buffer forever."""
    X, y = _data(4000)
    T = len(X)
    m = make("skegd", seed=0, budget=30, rank=5, gamma=GAMMA, horizon=T, theta=0.05)
    rho = m.update_cycle_rounds
    sizes = []
    for i in range(T):
        m.step(X[i], y[i])
        assert m.n_support_vectors <= 30
        if (i + 1) % 1000 == 0:
            sizes.append(len(state_to_bytes(m.get_state())))
    assert m.n_sketch_rows <= 30 + (T - 30) // rho + 1
    assert max(sizes) - min(sizes[1:]) < 4096  # only one small row per update
    q = make("skegd", seed=0, budget=30, rank=5, gamma=GAMMA, update_cycle=2,
             reference_quirks=True)
    q.predict_learn_many(X[:1500], y[:1500])
    assert q.n_updates > 100 and q.n_sketch_rows == 30 and q._sk.n == 30


def test_quirks_ignore_zero_loss_rounds() -> None:
    X, y = _data(300)
    m = make("skegd", seed=0, budget=15, rank=3, gamma=GAMMA, eta=1.0, lam=0.0,
             reference_quirks=True, update_cycle=3)
    m.predict_learn_many(X[:200], y[:200])
    for i in range(200, 300):
        s = m.predict_one(X[i])
        before = {k: v for k, v in m.get_state().items() if k not in ("__t__",)}
        m.learn_one(X[i], y[i])
        if y[i] * s >= 1.0:
            after = m.get_state()
            assert all(np.array_equal(after[k], v) for k, v in before.items())


def test_restored_learner_continues_bit_identically() -> None:
    """Cut in stage 1, at T₀, right after update rounds and between them (randomized SVD)."""
    X, y = _data(600)
    params = dict(budget=25, rank=4, gamma=GAMMA, eta=0.5, lam=0.01, update_cycle=13)
    ref = make("skegd", seed=9, **params)
    scores = ref.predict_learn_many(X, y)
    for cut in (10, 26, 27, 40, 53, 54, 300, 599):
        a = make("skegd", seed=9, **params)
        a.predict_learn_many(X[:cut], y[:cut])
        b = make("skegd", seed=0)
        b.set_state(state_from_bytes(state_to_bytes(a.get_state())))
        assert np.array_equal(b.predict_learn_many(X[cut:], y[cut:]), scores[cut:]), cut


def test_learns_a_nonlinear_concept() -> None:
    X, y = make_stream("classification", 3000, d=2, seed=5)  # 45.5% minority class
    m = make("skegd", seed=0, budget=100, rank=20, tau=0.4, gamma=1.0, eta=0.5, lam=0.0,
             horizon=3000)
    s = m.predict_learn_many(X, y)
    assert np.mean(np.where(s >= 0, 1.0, -1.0)[1000:] != y[1000:]) < 0.12


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"budget": 10, "tau": 2.0}, "landmarks"),
        ({"budget": 20, "rank": 16}, "rank"),
        ({"budget": 8, "sjlt_nonzeros": 7}, "sjlt_nonzeros"),
        # a default s_p comes from the budget: the message names the budget the user set
        ({"budget": 1}, r"s_p = floor\(3 \* budget / 4\) = 1 for budget=1 \(raise budget"),
        ({"budget": 20, "sketch_size": 2}, r"sketch_size s_p = 2, or lower sjlt_nonzeros"),
        ({"eta": 2.0, "lam": 0.5}, "eta\\*lam must be < 1"),
        ({"theta": 1.0}, "theta"),
    ],
)
def test_bad_parameters(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make("skegd", **params)


def test_feature_map_needs_stage2() -> None:
    m = make("skegd", budget=50)
    with pytest.raises(ValueError, match="stage 2"):
        m.feature_map(np.zeros((1, 3)))


# -- INys and the approximation error ----------------------------------------------------------
def test_inys_uses_the_first_examples_and_is_exact_at_full_rank() -> None:
    X, _ = _data(120, d=3)
    inys = IncrementalNystrom(budget=40, rank=40, gamma=GAMMA)
    with pytest.raises(ValueError, match="40 examples"):
        inys.feature_map(X)
    inys.partial_fit(X[:25]).partial_fit(X[25:60]).partial_fit(X[60:])
    assert inys.ready and inys.n_seen == 120 and np.array_equal(inys.landmarks, X[:40])
    Phi = inys.feature_map(X[:40])
    np.testing.assert_allclose(Phi @ Phi.T, Gaussian(GAMMA).matrix(X[:40]), atol=1e-6)
    assert IncrementalNystrom(budget=50).rank == 10  # default k = 0.2 B


def test_relative_kernel_error() -> None:
    X, _ = _data(300, d=3)
    rng = np.random.default_rng(0)
    Phi = rng.normal(size=(300, 4))
    K = Gaussian(GAMMA).matrix(X)
    want = np.sum((Phi @ Phi.T - K) ** 2) / np.sum(K**2)
    assert math.isclose(relative_kernel_error(Phi, X, gamma=GAMMA, block=64), want,
                        rel_tol=1e-10)


# -- adversarial streams -----------------------------------------------------------------------
def test_adversarial_stream_structure() -> None:
    X, y = _data(50)
    Xs, ys = adversarial_stream(X, y, n_blocks=30, block_len=7, seed=(1, 2))
    assert Xs.shape == (210, X.shape[1]) and ys.shape == (210,)
    for b in range(30):
        blk, lab = Xs[7 * b : 7 * b + 7], ys[7 * b : 7 * b + 7]
        assert np.all(blk == blk[0]) and np.all(lab == lab[0])  # one repeated instance
        j = int(np.flatnonzero(np.all(X == blk[0], axis=1))[0])
        assert lab[0] == (-y[j] if (b + 1) % 2 == 0 else y[j])  # flipped on even blocks
    again = adversarial_stream(X, y, 30, 7, seed=(1, 2))
    assert np.array_equal(again[0], Xs) and np.array_equal(again[1], ys)
    other = adversarial_stream(X, y, 30, 7, seed=(1, 3))
    assert not np.array_equal(other[0], Xs)


def test_presets_and_stream_evaluation() -> None:
    assert (PRESETS["german-1"].length, PRESETS["german-2"].length) == (5000, 10000)
    X, y = _data(100)
    Xs, ys = preset_stream("german-1", X, y, seed=0, r=1)
    assert Xs.shape[0] == 5000 and np.all(Xs[:10] == Xs[0])
    with pytest.raises(ValueError, match="unknown stream"):
        preset_stream("german-3", X, y, seed=0)
    res = evaluate_stream(X, y, "german-1", "perceptron", {"gamma": GAMMA}, seed=0,
                          permutations=2, progress=None)
    assert res.examples == 5000 and [r.permutation for r in res.runs] == [0, 1]
    from kernelstream.seeding import learner_seed

    m = make("perceptron", seed=learner_seed(0, 1, "perceptron"), gamma=GAMMA)
    s = m.predict_learn_many(Xs, ys)
    assert res.runs[1].mistakes == int(np.sum(np.where(s >= 0, 1.0, -1.0) != ys))


@pytest.mark.parametrize("params", [{}, {"update_cycle": 7}, {"horizon": 900, "theta": 0.05},
                                    {"update_cycle": 3, "reference_quirks": True}])
def test_sketch_rows_stay_within_max_sketch_rows(params: dict[str, Any]) -> None:
    # R grows by one row per update round (the paper); max_sketch_rows(t) is the bound the
    # memory check counts, nearly reached when the buffer fills early
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2000, 4))
    y = np.where(rng.random(2000) < 0.5, 1.0, -1.0)
    m = SkeGD(seed=0, budget=20, gamma=GAMMA, **params)
    for i in range(len(X)):
        m.step(X[i], y[i])
        bound = m.max_sketch_rows(i + 1)
        assert m.n_sketch_rows <= bound, (i + 1, m.n_sketch_rows, bound)
        assert len(m.sv.a) + len(m._land.a) <= m.stored_rows(i + 1)  # capacities
    # T₀ = 25 here, not the earliest 21: a few geometric steps of 1 are missed
    assert m.max_sketch_rows(len(X)) - m.n_sketch_rows <= 4, (m.n_sketch_rows, m.init_round)
    if params.get("reference_quirks"):
        assert m.max_sketch_rows(10**9) == 20
    elif not params:  # unknown horizon: logarithmic, ~log(T/B)/log(1.3) updates
        assert m.max_sketch_rows(10**9) == 98 and m.n_sketch_rows > 40
