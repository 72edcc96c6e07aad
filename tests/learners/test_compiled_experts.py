"""The compiled expert blocks (_ck_experts, kernelstream.learners.compiled.ek): the BLAS
routines, exp loop and sum they call give numpy's numbers bit for bit; LKMBooks's compiled
block equals its numpy per-example code, and EA2OKS's / BEA2OKS's their per-example code,
exactly (scores, support counts per row, state, the Generator's state), for every loss, every
block split, an unknown horizon, the hedge's log-domain fallback, BEA2OKS's restarts, the
reference quirks and a restored learner."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kernelstream.learners import compiled, make

ek = compiled.ek
needs_ek = pytest.mark.skipif(ek is None, reason=f"expert blocks not in use: {compiled.STATUS}")


def _stream(n: int, d: int, task: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.6)
    if task == "classification":
        y = np.where(X[:, 0] - X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    else:
        y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    return X, y


def _steps(name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray
           ) -> tuple[np.ndarray, Any]:
    """The per-example code (whose parts run on _ck_multi, as before the compiled block);
    the learner's ``n_sv_rows``: its support count after each row."""
    m = make(name, **params)
    s, n_sv = [], []
    for i in range(len(X)):
        s.append(m.step(X[i], y[i]))
        n_sv.append(m.n_support_vectors)
    m.n_sv_rows = np.array(n_sv, dtype=np.int64)
    return np.array(s), m


def _blocks(name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray,
            sizes: list[int]) -> tuple[np.ndarray, Any]:
    m = make(name, **params)
    out, n_sv, i, k = [], np.zeros(len(X), dtype=np.int64), 0, 0
    while i < len(X):
        j = min(len(X), i + sizes[k % len(sizes)])
        out.append(m.predict_learn_many(X[i:j], y[i:j], n_sv=n_sv[i:j]))
        i, k = j, k + 1
    m.n_sv_rows = n_sv
    return np.concatenate(out), m


def _numpy_run(params: dict[str, Any], X: np.ndarray, y: np.ndarray,
               monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, Any]:
    """The numpy reference: per-example rounds without the compiled block."""
    with monkeypatch.context() as mp:
        mp.setattr(compiled, "ek", None)
        return _steps("lkmbooks", params, X, y)


def _block_run(params: dict[str, Any], X: np.ndarray, y: np.ndarray,
               sizes: list[int]) -> tuple[np.ndarray, Any]:
    return _blocks("lkmbooks", params, X, y, sizes)


def _assert_same(a: tuple[np.ndarray, Any], b: tuple[np.ndarray, Any]) -> None:
    (sa, ma), (sb, mb) = a, b
    assert sa.tobytes() == sb.tobytes()
    assert ma.t == mb.t and ma.n_support_vectors == mb.n_support_vectors
    st_a, st_b = ma.get_state(), mb.get_state()
    assert st_a.keys() == st_b.keys()
    for key in st_a:
        assert np.asarray(st_a[key]).tobytes() == np.asarray(st_b[key]).tobytes(), key
    assert ma.rng.bit_generator.state == mb.rng.bit_generator.state
    if hasattr(ma, "n_sv_rows") and hasattr(mb, "n_sv_rows"):
        assert ma.n_sv_rows.tolist() == mb.n_sv_rows.tolist()


@needs_ek
def test_bound_routines_are_numpys() -> None:
    rng = np.random.default_rng(1)
    for m, n in ((2, 2), (6, 5), (6, 200), (200, 123), (13, 31)):
        A = rng.standard_normal((m, n))
        x = rng.standard_normal(n)
        y = np.empty(m)
        v = rng.uniform(-800.0, 5.0, size=m * n)
        want = np.exp(v)
        w = rng.standard_normal(1 + (m + n) % 128)
        dt, sm = ek.check(A, x, y, v, w)
        assert y.tobytes() == A.dot(x).tobytes()
        assert v.tobytes() == want.tobytes()
        assert dt == w.dot(w) and sm == w.sum()


@needs_ek
@pytest.mark.parametrize("params", [
    {"budget": 40, "horizon": 1500},
    {"budget": 25},  # unknown horizon: retunes at rounds 1001
    {"budget": 60, "loss": "square", "horizon": 1500},
    {"budget": 30, "loss": "absolute"},
    {"budget": 40, "horizon": 1500, "sigmas": "2^-2:0.5:3.5"},  # K = 12: numpy's pairwise sum
    {"budget": 40, "horizon": 1500, "hedge_rate": 2000.0},  # ~100 log-domain fallbacks
])
def test_block_equals_numpy_per_example(params: dict[str, Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    task = "regression" if params.get("loss") in ("square", "absolute") else "classification"
    X, y = _stream(1500, 7, task)
    params = {"seed": 3, **params}
    ref = _numpy_run(params, X, y, monkeypatch)
    in_c = [0]

    class Counting:  # ek, counting the rounds its block runs
        def __getattr__(self, name: str) -> Any:
            return getattr(ek, name)

        def lkm_run(self, *args: Any) -> Any:
            res = ek.lkm_run(*args)
            in_c[0] += res[0] - args[3]
            return res

    monkeypatch.setattr(compiled, "ek", Counting())
    _assert_same(ref, _block_run(params, X, y, [1500]))
    assert in_c[0] > 1000  # most rounds ran compiled
    _assert_same(ref, _block_run(params, X, y, [1, 37, 500, 3, 9]))


@needs_ek
def test_restored_learner_continues_in_the_compiled_block(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    X, y = _stream(1200, 5, "classification", seed=4)
    params = {"seed": 7, "budget": 30, "horizon": 1200}
    ref = _numpy_run(params, X, y, monkeypatch)
    m = make("lkmbooks", **params)
    first = m.predict_learn_many(X[:500], y[:500])
    m2 = make("lkmbooks", **params)
    m2.set_state(m.get_state())
    rest = m2.predict_learn_many(X[500:], y[500:])
    _assert_same(ref, (np.concatenate([first, rest]), m2))


@needs_ek
def test_bad_calls_raise() -> None:
    X, y = _stream(10, 3, "classification")
    m = make("lkmbooks", seed=0, budget=5, horizon=10)
    m.predict_learn_many(X[:3], y[:3])
    zz = np.einsum("ij,ij->i", X, X)
    out = np.empty(10)
    w = (np.empty(5), np.empty(30), np.empty(6), np.empty(6))
    with pytest.raises(ValueError, match="wrong sizes"):
        ek.lkm_run(X, zz, y, 0, 10, 1, out, None, m.X, m.sqn, m.a, m.p, -m.widths.gammas,
                   m.n, m.gmax, np.zeros(4), 0, np.empty(0), *w)
    with pytest.raises(TypeError, match="float64"):
        ek.lkm_run(X, zz, y.astype(np.int64), 0, 10, 1, out, None, m.X, m.sqn, m.a, m.p,
                   -m.widths.gammas, m.n, m.gmax, np.zeros(5), 0, np.empty(0), *w)
    with pytest.raises(TypeError, match="32 arguments"):
        ek.ea2oks_run(X, zz, y)
    with pytest.raises(TypeError, match="stores must be a tuple"):
        ek.ea2oks_run(*([X, zz, y, 0, 10, 0, out, None, np.empty(9), []] + [None] * 22))
    with pytest.raises(TypeError, match="5 arguments"):
        ek.ea2oks_step((), X[0])
    with pytest.raises(TypeError, match="kept must be a tuple of 27"):
        ek.ea2oks_step((None,) * 28, X[0], 1.0, 1.0, 0)


@needs_ek
def test_ea2oks_step_refuses_positions_outside_a_store() -> None:
    """Arguments out of step with each other (a reservoir position beyond its store's count,
    or absent from a store not marked as missing it) raise instead of indexing outside the
    store."""
    X, y = _stream(200, 4, "classification", seed=3)
    m = make("bea2oks", seed=1, budget=50, horizon=200)
    m.predict_learn_many(X, y)
    kept = m._step_args()
    assert kept is not None
    state = m.get_state()
    ns, pos, missing = kept[1], kept[10], kept[11]
    i = int(np.argmax(ns))
    for bad_pos, bad_missing in ((int(ns[i]), 0), (-1, 0)):
        saved = pos[i, 0], missing[i]
        pos[i, 0], missing[i] = bad_pos, bad_missing
        with pytest.raises(ValueError, match="outside its store"):
            ek.ea2oks_step(kept, X[0], float(X[0] @ X[0]), 1.0, m.t)
        pos[i, 0], missing[i] = saved
    after = m.get_state()
    assert all(np.array_equal(state[k], after[k]) for k in state)  # nothing written


# -- EA2OKS / BEA2OKS -------------------------------------------------------------------------
def _assert_same_ea(a: tuple[np.ndarray, Any], b: tuple[np.ndarray, Any]) -> None:
    _assert_same(a, b)
    (_, ma), (_, mb) = a, b
    assert ma.selected_kernel == mb.selected_kernel
    assert ma.restarts.tolist() == mb.restarts.tolist()
    assert [s.norm2 for s in ma.mirror.pool.stores] == [s.norm2 for s in mb.mirror.pool.stores]


@needs_ek
@pytest.mark.parametrize(("name", "params"), [
    ("ea2oks", {"horizon": 1500}),
    ("ea2oks", {}),  # unknown horizon: λ's guess of T doubles at round 1001
    ("ea2oks", {"horizon": 1500, "reference_quirks": True, "sigmas": "2^-2:0.5:3.5"}),
    ("ea2oks", {"eta": 0.3, "reservoir_size": 3, "radius": 2.0}),  # projections
    ("bea2oks", {"budget": 30, "horizon": 1500}),  # restarts
    ("bea2oks", {"budget": 25, "reference_quirks": True}),
])
def test_ea2oks_block_equals_per_example(name: str, params: dict[str, Any],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _stream(1500, 6, "classification", seed=2)
    params = {"seed": 3, **params}
    ref = _steps(name, params, X, y)
    in_c = [0]

    class Counting:  # ek, counting the rounds its block runs
        def __getattr__(self, attr: str) -> Any:
            return getattr(ek, attr)

        def ea2oks_run(self, *args: Any) -> Any:
            res = ek.ea2oks_run(*args)
            in_c[0] += res[0] - args[3]
            return res

    monkeypatch.setattr(compiled, "ek", Counting())
    _assert_same_ea(ref, _blocks(name, params, X, y, [1500]))
    assert in_c[0] > 1200  # most rounds ran compiled
    if name == "bea2oks":
        assert ref[1].restarts.sum() > 0
    _assert_same_ea(ref, _blocks(name, params, X, y, [1, 200, 7, 333, 8, 9]))
    monkeypatch.setattr(compiled, "ek", None)  # without the block: the per-example code
    _assert_same_ea(ref, _blocks(name, params, X, y, [500]))


@needs_ek
def test_restored_ea2oks_continues_in_the_compiled_block() -> None:
    X, y = _stream(1200, 5, "classification", seed=6)
    params = {"seed": 1, "budget": 40, "horizon": 1200}
    ref = _steps("bea2oks", params, X, y)
    m = make("bea2oks", **params)
    first = m.predict_learn_many(X[:600], y[:600])
    m2 = make("bea2oks", **params)
    m2.set_state(m.get_state())
    rest = m2.predict_learn_many(X[600:], y[600:])
    _assert_same(ref, (np.concatenate([first, rest]), m2))


@pytest.mark.parametrize(("name", "params"), [
    ("lkmbooks", {"budget": 20, "horizon": 300}),
    ("lkmbooks", {"budget": 20, "horizon": 300, "sigmas": "1.0"}),
    ("ea2oks", {"horizon": 300}),
    ("ea2oks", {"horizon": 300, "sigmas": "1.0"}),
    ("ea2oks", {"horizon": 300, "reservoir_size": 1}),
])
@pytest.mark.parametrize("d", [1, 3])
def test_shapes_numpy_treats_apart_equal_per_example(name: str, params: dict[str, Any],
                                                      d: int) -> None:
    """One feature, one kernel, a reservoir of one: the per-example code either way."""
    X, _ = _stream(300, d, "regression", seed=8)  # a stream of d features
    y = np.where(X[:, 0] > 0.1, 1.0, -1.0)
    params = {"seed": 2, **params}
    _assert_same(_steps(name, params, X, y), _blocks(name, params, X, y, [300]))
