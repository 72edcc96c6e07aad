"""The compiled multi-kernel scores (_ck_multi, kernelstream.learners.compiled.mk): the
exponential within 1 ulp of libm's, every score equal to a plain sequential reference bit for
bit (one distance per point of the union, shared by the kernels), the compiled AO2MD
correction equal to the Python loop it replaces, and bad calls raise."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from kernelstream.learners import compiled, make
from kernelstream.learners._multikernel import GAMMAS, M_KERNELS, N_POLY, MultiStore
from kernelstream.learners._selection import GaussianWidths, KernelPool

mk = compiled.mk
needs_mk = pytest.mark.skipif(mk is None, reason=f"compiled kernels not in use: {compiled.STATUS}")


def _exp(v: np.ndarray) -> np.ndarray:
    out = np.array(v, dtype=np.float64)
    mk.exp(out)
    return out


def _dist(x: np.ndarray, xx_: float, z: np.ndarray, zz: float) -> float:
    """The compiled squared distance, written out: the dot in index order over z's
    non-zeros, then (-2 dot + ||x||^2) + ||z||^2 clipped at 0."""
    s = 0.0
    for i in np.flatnonzero(z):
        s += float(x[i]) * float(z[i])
    v = s * -2.0
    v += xx_
    v += zz
    return v if v > 0.0 else 0.0


def _pool_ref(pool: KernelPool, z: np.ndarray, zz: float) -> list[float]:
    out = []
    for i, sv in enumerate(pool.stores):
        args = np.array([_dist(sv.X[j], float(sv.sqn[j]), z, zz) * -float(pool.widths.gammas[i])
                         for j in range(sv.n)])
        k = _exp(args)
        f = 0.0
        for j in range(sv.n):
            f += float(sv.a[j]) * float(k[j])
        out.append(f)
    return out


def _data(n: int, d: int, density: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < density)
    return np.ascontiguousarray(X)


@needs_mk
def test_exp_within_one_ulp_of_libm_and_zero_below_the_bound() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([-rng.random(200_000) * 760, -rng.random(20_000) * 1e-6,
                        [0.0, -0.0, -708.4, -745.1, -745.2, -746.0, -746.5, -1e300, 3.0]])
    got = _exp(x)
    ref = np.array([math.exp(t) if t >= -746.0 else 0.0 for t in x])
    ulps = np.abs(got.view(np.int64) - ref.view(np.int64))
    assert ulps.max() <= 1
    assert (got[x < -746.0] == 0.0).all() and got[-1] == math.exp(3.0)


@needs_mk
@pytest.mark.parametrize("density", [1.0, 0.2])
def test_pool_scores_share_one_distance_per_point(density: float) -> None:
    """Stores holding the same stream ids (the same examples) and others of their own: every
    score equals the sequential reference bit for bit, for all kernels, a subset, and after a
    reset and a restored state."""
    X = _data(80, 9, density)
    Z = _data(6, 9, density, seed=1)
    widths = GaussianWidths(np.array([0.5, 1.0, 2.0, 4.0]))
    pool = KernelPool(widths, 9, capacity=4)
    rng = np.random.default_rng(2)
    sq = compiled.row_sqnorms(X)
    for t in range(60):
        for i in range(4):
            if rng.random() < 0.5:
                pool.stores[i].append(X[t], float(sq[t]), float(rng.standard_normal()),
                                      id_=t, s=t)
    assert pool.union_size < sum(s.n for s in pool.stores)
    assert pool.union_size == len(np.unique(np.concatenate([s.ids[: s.n] for s in pool.stores])))
    zz = compiled.row_sqnorms(Z)
    for z, q in zip(Z, zz, strict=True):
        ref = _pool_ref(pool, z, float(q))
        assert pool.scores(z, float(q)).tolist() == ref
        assert pool.scores(z, float(q), [2, 0]).tolist() == [ref[2], ref[0]]
        assert pool.score(3, z, float(q))[0] == ref[3]
    pool.reset(1)
    pool.stores[1].append(X[70], float(sq[70]), 0.7, id_=70, s=70)
    st = pool.get_state("p.")
    again = KernelPool(widths, 9)
    again.set_state(st, "p.")
    for z, q in zip(Z, zz, strict=True):
        ref = _pool_ref(pool, z, float(q))
        assert pool.scores(z, float(q)).tolist() == ref
        assert again.scores(z, float(q)).tolist() == ref
    assert again.union_size == pool.union_size


@needs_mk
@pytest.mark.parametrize("density", [1.0, 0.2])
def test_multistore_scores_match_the_sequential_reference(density: float) -> None:
    X = _data(50, 7, density)
    Z = _data(5, 7, density, seed=3)
    st = MultiStore(7, capacity=4)
    rng = np.random.default_rng(4)
    sq = compiled.row_sqnorms(X)
    for t in range(len(X)):
        ks = np.flatnonzero(rng.random(M_KERNELS) < 0.4)
        st.add(X[t], float(sq[t]), ks, rng.standard_normal(len(ks)), id_=t)
    zz = compiled.row_sqnorms(Z)
    for z, q in zip(Z, zz, strict=True):
        ref = [0.0] * M_KERNELS
        for e in range(st.np_):
            j, k, deg = int(st.p_pt[e]), int(st.p_k[e]), st.p_deg[e]
            s = 0.0
            for i in np.flatnonzero(z):
                s += float(X[j, i]) * float(z[i])
            v = s if deg == 1 else s * s if deg == 2 else s * s * s
            ref[k] += v * float(st.p_a[e])
        for e in range(st.ng):
            j, k = int(st.g_pt[e]), int(st.g_k[e])
            arg = _dist(X[j], float(sq[j]), z, float(q)) * float(st.g_ng[e])
            if arg >= -746.0:
                ref[k] += float(_exp(np.array([arg]))[0]) * float(st.g_a[e])
        assert st.scores(z, float(q)).tolist() == ref
    assert np.array_equal(st.X[: st.n], X)  # the columns read back as the rows stored


@needs_mk
def test_floor_scores_match_the_reference() -> None:
    X = _data(30, 6, 0.5)
    Z = _data(4, 6, 0.5, seed=5)
    ng = -np.concatenate([np.zeros(N_POLY), GAMMAS[:3]])
    A = np.random.default_rng(6).standard_normal((len(ng), 30))
    sq, zz = compiled.row_sqnorms(X), compiled.row_sqnorms(Z)
    out = np.empty((4, len(ng)))
    mk.floor_scores(np.ascontiguousarray(X.T), sq, 30, ng, A, Z, zz, out,
                    np.empty(2 * 30 + 2 * 6, dtype=np.int64))
    for r in range(4):
        d2 = np.array([_dist(X[j], float(sq[j]), Z[r], float(zz[r])) for j in range(30)])
        for k in range(len(ng)):
            e = _exp(d2 * ng[k])
            f = 0.0
            for j in range(30):
                f += float(A[k, j]) * float(e[j])
            assert out[r, k] == f


@needs_mk
def test_compiled_mirror_correction_equals_the_python_loop(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """EA2OKS state after a round whose correction ran compiled == after the Python loop, bit
    for bit (same inputs: a deep copy of the learner before the round)."""
    X = _data(120, 5, 1.0)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    m = make("ea2oks", seed=0, horizon=120)
    m.predict_learn_many(X[:100], y[:100])
    for t in range(100, 110):
        twin = copy.deepcopy(m)
        m.learn_one(X[t], y[t])
        with monkeypatch.context() as mp:
            mp.setattr(compiled, "mk", None)  # the Python loop of OptimisticMirror.correct
            twin.learn_one(X[t], y[t])
        a, b = m.get_state(), twin.get_state()
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]), k


@needs_mk
def test_bad_calls_raise() -> None:
    pool = KernelPool(GaussianWidths(np.array([1.0])), 3)
    pool.stores[0].append(np.ones(3), 3.0, 1.0, id_=0)
    stores = pool._sync()
    out, work, eb = np.empty(1), np.empty(6, dtype=np.int64), np.empty(8)
    bad_ns = np.array([10**6], dtype=np.int64)  # more points than the store can hold
    with pytest.raises(ValueError):
        mk.pool_scores(stores, bad_ns, None, np.ones(3), 3.0, pool._cache, pool._stamp, 1, out,
                       work, eb)
    with pytest.raises(ValueError):
        mk.pool_scores(stores, pool._ns, np.array([3], dtype=np.int64), np.ones(3), 3.0,
                       pool._cache, pool._stamp, 1, out, work, eb)
    with pytest.raises(TypeError):
        mk.pool_scores(stores, pool._ns, None, np.ones(3, dtype=np.float32), 3.0, pool._cache,
                       pool._stamp, 1, out, work, eb)
    st = MultiStore(3)
    st.add(np.ones(3), 3.0, np.array([5]), np.array([1.0]))
    st.g_pt[0] = 7  # an entry pointing past the stored points
    with pytest.raises(ValueError):
        st.scores(np.ones(3), 3.0)


@needs_mk
@pytest.mark.parametrize("name", ["ea2oks", "bao2ks", "oks", "omkc-dd", "bomkc-spa"])
def test_rows_of_any_memory_layout(name: str) -> None:
    """predict_one / learn_one take rows of a Fortran-ordered matrix (non-contiguous views),
    with the scores of contiguous copies up to round-off (numpy's products of the learners'
    Python parts, e.g. ‖x‖², may round a strided row differently)."""
    X = _data(60, 5, 1.0)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    F = np.asfortranarray(X)
    a, b = make(name, seed=0), make(name, seed=0)
    for t in range(len(X)):
        sa, sb = a.predict_one(F[t]), b.predict_one(X[t].copy())
        assert sa == pytest.approx(sb, rel=1e-9, abs=1e-12)
        a.learn_one(F[t], y[t])
        b.learn_one(X[t].copy(), y[t])
