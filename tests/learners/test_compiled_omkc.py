"""The compiled blocks of bounded OMKC (kernelstream.learners._ck_omkc, compiled.omkc_rounds):
blocks equal the per-example rounds bit for bit (scores, #SV, state, weights, random stream)
for both algorithms and every budget maintenance, also across restores and when the weights'
power table must grow; so do the fused per-example rounds (om.step, one call a row), with the
vote in C or in Python; the numpy fallback learns the same model up to round-off; bad calls
raise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kernelstream.learners import compiled, make

om = compiled.om
needs_om = pytest.mark.skipif(om is None, reason=f"bounded OMKC blocks not compiled: "
                              f"{compiled.STATUS}")

LEARNERS = ("bomkc-dd", "bomkc-sd")
MAINTENANCE = ("rbp", "forgetron", "bogd", "bpa-s")


def _data(n: int = 360, d: int = 7, density: float = 0.6, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < density)
    X[::37] = 0.0  # x = 0: the polynomial kernels' zero function
    y = np.where(X[:, 0] - 0.7 * X[:, 2] + 0.4 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return np.ascontiguousarray(X), y


def _make(name: str, bm: str, budget: int, **kw: Any) -> Any:
    extra = {"eta": 0.3, "lam": 0.2} if bm == "bogd" else {"c": 0.5} if bm == "bpa-s" else {}
    return make(name, seed=11, budget=budget, budget_maintenance=bm, **extra, **kw)


def _fingerprint(m: Any) -> dict[str, bytes]:
    st = m.get_state()
    out = {k: np.asarray(v).tobytes() + str(np.asarray(v).dtype).encode() for k, v in st.items()}
    out["theta"] = m.kernel_distribution.tobytes()
    out["rng"] = repr(m.rng.bit_generator.state).encode()
    out["comps"] = repr([(c.t, c.budget, getattr(c, "_head", None), getattr(c, "damage", None))
                         for c in m.comps]).encode()
    return out


def _per_example(m: Any, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out, nsv = np.empty(len(y)), np.empty(len(y), dtype=np.int64)
    for i in range(len(y)):
        out[i] = m.step(X[i], y[i])
        nsv[i] = m.n_support_vectors
    return out, nsv


def _blocks(m: Any, X: np.ndarray, y: np.ndarray, cuts: list[int]) -> tuple:
    out, nsv = np.empty(len(y)), np.empty(len(y), dtype=np.int64)
    for a, b in zip([0, *cuts], [*cuts, len(y)], strict=True):
        out[a:b] = m.predict_learn_many(X[a:b], y[a:b], n_sv=nsv[a:b])
    return out, nsv


def _assert_same(a: tuple, b: tuple, ma: Any, mb: Any) -> None:
    np.testing.assert_array_equal(a[0].view(np.int64), b[0].view(np.int64))  # bits, NaN-safe
    np.testing.assert_array_equal(a[1], b[1])
    fa, fb = _fingerprint(ma), _fingerprint(mb)
    assert fa.keys() == fb.keys()
    for key in fa:
        assert fa[key] == fb[key], key


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("bm", MAINTENANCE)
@pytest.mark.parametrize("budget", [20, 70])
def test_blocks_equal_the_per_example_rounds(name: str, bm: str, budget: int) -> None:
    X, y = _data()
    ref = _make(name, bm, budget)
    want = _per_example(ref, X, y)
    m = _make(name, bm, budget)
    m.step(X[0], y[0])  # the first round per example, then blocks of uneven sizes
    got = _blocks(m, X[1:], y[1:], [1, 90, 200])
    got = (np.concatenate([want[0][:1], got[0]]), np.concatenate([want[1][:1], got[1]]))
    _assert_same(got, want, m, ref)
    assert m.n_support_vectors <= budget
    for c in m.comps:  # stores grow on demand (SD: not to the total budget each)
        assert len(c.sv.a) <= 2 * max(c.sv.n, 1) + 1


def _fused_steps(m: Any, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``step`` row by row with Python float labels (om.step's rounds, where it applies)."""
    out, nsv = np.empty(len(y)), np.empty(len(y), dtype=np.int64)
    labels = y.tolist()
    for i in range(len(y)):
        out[i] = m.step(X[i], labels[i])
        nsv[i] = m.n_support_vectors
    return out, nsv


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("bm", MAINTENANCE)
@pytest.mark.parametrize("budget", [20, 70])
def test_fused_steps_equal_the_blocks(name: str, bm: str, budget: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """om.step's rounds (one call a row, on the state om.fuse keeps) equal the block path bit
    for bit: scores, #SV, state, weights, the components' counters and the random stream."""
    X, y = _data()
    calls = {"done": 0, "declined": 0}
    step = om.step

    def counted(*args: Any) -> Any:
        r = step(*args)
        calls["done" if r is not None else "declined"] += 1
        return r

    monkeypatch.setattr(om, "step", counted)
    m, ref = _make(name, bm, budget), _make(name, bm, budget)
    _assert_same(_fused_steps(m, X, y), _blocks(ref, X, y, []), m, ref)
    # declined: a store full (SD grows them) or the power table short, then fused again
    assert calls["done"] >= len(y) - 1 - calls["declined"] and calls["declined"] <= 40


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("path", ["fused", "blocks"])
def test_a_polynomial_scale(name: str, path: str) -> None:
    """Large norms: the cubic kernel's κ(x, x) = ‖x‖⁶ (numpy's power, of the row and of the
    points om.step keeps) drives BPA-S's removals. ``fused``: om.step's rounds equal the
    blocks; ``blocks``: the blocks equal the per-example rounds."""
    X, y = _data(seed=3)
    X *= 4.0
    ref, m = _make(name, "bpa-s", 32), _make(name, "bpa-s", 32)
    if path == "fused":
        _assert_same(_fused_steps(m, X, y), _blocks(ref, X, y, [150]), m, ref)
        assert m._fused is not None and len(m._fused_zd) == 3
    else:
        _assert_same(_blocks(m, X, y, [150]), _per_example(ref, X, y), m, ref)


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
def test_fused_rounds_mixed_with_learn_one(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """predict_one is om.score's (the test half of om.step, changing nothing) and learn_one an
    om.step round, bad rows rejected between them: every row's numbers are the block
    path's."""
    X, y = _data(seed=6)
    ref = _make(name, "bogd", 40)
    want = _blocks(ref, X, y, [])
    m = _make(name, "bogd", 40)
    calls = [0]
    step = om.step

    def counted(*args: Any) -> Any:
        r = step(*args)
        calls[0] += r is not None
        return r

    monkeypatch.setattr(om, "step", counted)
    labels = y.tolist()
    for i in range(len(y)):
        if i % 3 == 0:
            s = m.step(X[i], labels[i])
        elif i % 3 == 1:
            with pytest.raises(ValueError, match="NaN"):  # om.score declines, the checks say
                m.predict_one(np.full_like(X[i], np.nan))
            s = m.predict_one(X[i])  # om.score, once the state is kept
            m.learn_one(X[i], labels[i])
        else:
            s = want[0][i]
            m.learn_one(X[i].tolist(), int(labels[i]))  # converted, then om.step's round
        assert np.array([s]).tobytes() == want[0][i:i + 1].tobytes(), i
        assert m.n_support_vectors == want[1][i]
    _assert_same(want, want, m, ref)
    assert calls[0] >= len(y) // 2 and m._fused is not None


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
def test_fused_steps_grow_a_short_power_table(name: str) -> None:
    X, y = _data(seed=2)
    ref = _make(name, "rbp", 30, discount=0.7)
    want = _blocks(ref, X, y, [])
    m = _make(name, "rbp", 30, discount=0.7)
    m.step(X[0], float(y[0]))
    m._powtab = np.power(m.discount, np.arange(2, dtype=np.float64))
    m._fused = None  # fused again with the short table: om.step declines when it is too short
    got = _fused_steps(m, X[1:], y[1:])
    _assert_same((np.concatenate([want[0][:1], got[0]]), np.concatenate([want[1][:1], got[1]])),
                 want, m, ref)
    assert len(m._powtab) > 2


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
def test_fused_steps_vote_in_python_without_numpy_ddot(name: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without numpy's ddot bound (compiled.om_vote False) om.step returns True and the vote is
    Combination._vote's on the round's scores and weights: the same numbers."""
    X, y = _data(seed=5)
    ref = _make(name, "forgetron", 40)
    want = _blocks(ref, X, y, [])
    assert compiled.om_vote() or om.vote(np.zeros(16), np.zeros(16)) is None
    om.bind_dot(0, False)
    try:
        assert om.vote(np.full(16, 1 / 16), np.ones(16)) is None
        monkeypatch.setattr(compiled, "_om_vote", False)
        m = _make(name, "forgetron", 40)
        _assert_same(_fused_steps(m, X, y), want, m, ref)
    finally:
        monkeypatch.setattr(compiled, "_om_vote", None)
        compiled.om_vote()  # binds it again


@needs_om
def test_the_compiled_vote_is_numpys() -> None:
    if not compiled.om_vote():
        pytest.skip("numpy's ddot is not bound here: step votes in Python")
    rng = np.random.default_rng(7)
    for _ in range(50):
        theta = rng.dirichlet(np.full(16, 0.3))
        s = rng.normal(size=16) * (rng.random(16) < 0.6)
        assert np.array([om.vote(theta, s)]).tobytes() == np.array(
            [theta.dot(np.sign(s))]).tobytes()


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
def test_restored_learner_continues_in_blocks(name: str) -> None:
    X, y = _data(seed=1)
    ref = _make(name, "forgetron", 40)
    want = _per_example(ref, X, y)
    m = _make(name, "forgetron", 40)
    first = m.predict_learn_many(X[:200], y[:200])
    r = _make(name, "forgetron", 40)
    r.set_state(m.get_state())
    rest = r.predict_learn_many(X[200:], y[200:])
    np.testing.assert_array_equal(np.concatenate([first, rest]).view(np.int64),
                                  want[0].view(np.int64))
    fr, fref = _fingerprint(r), _fingerprint(ref)
    del fr["comps"], fref["comps"]  # SD's budgets of the last round: set again before use
    assert fr == fref


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
def test_a_short_power_table_grows_between_calls(name: str) -> None:
    X, y = _data(seed=2)
    ref = _make(name, "rbp", 30, discount=0.7)
    want = _per_example(ref, X, y)
    m = _make(name, "rbp", 30, discount=0.7)
    m.step(X[0], y[0])
    m._powtab = np.power(m.discount, np.arange(2, dtype=np.float64))  # forces om.POWERS
    got = _blocks(m, X[1:], y[1:], [])
    _assert_same((np.concatenate([want[0][:1], got[0]]), np.concatenate([want[1][:1], got[1]])),
                 want, m, ref)
    assert len(m._powtab) > 2


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
def test_the_power_table_ends_where_the_powers_underflow(name: str) -> None:
    """The table of γ^k grew with the largest gap between the kernels' mistake counts, i.e.
    with the stream (2^19 entries, mostly 0, after 600k rounds): it now ends at the first
    power that underflows (k = 1075 for γ = 0.5), and the rounds are the same numbers."""
    X, y = _data(seed=3)
    m0 = _make(name, "rbp", 30, discount=0.5)
    m0.predict_learn_many(X[:60], y[:60])
    st = m0.get_state()
    st["mk.counts"] = st["mk.counts"] + np.arange(16) * 400  # gaps up to 6000 mistakes

    def restored() -> Any:
        r = _make(name, "rbp", 30, discount=0.5)
        r.set_state(st)
        return r

    ref = restored()
    want = _per_example(ref, X[60:], y[60:])  # fused steps (om.step)
    m = restored()
    _assert_same(_blocks(m, X[60:], y[60:], [7, 100]), want, m, ref)  # om.run
    for r in (ref, m):
        assert len(r._powtab) == 1076 and r._powtab[-1] == 0.0 and r._powtab[-2] > 0.0
    theta = np.power(0.5, (m._counts - m._counts.min()).astype(np.float64))
    np.testing.assert_array_equal(m.kernel_distribution, theta / theta.sum())


@needs_om
@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("bm", MAINTENANCE)
def test_numpy_fallback_learns_the_same_model(name: str, bm: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(n=200, seed=4)
    m = _make(name, bm, 40)
    out = m.predict_learn_many(X, y)
    for mod in ("ck", "bk", "mk", "om"):
        monkeypatch.setattr(compiled, mod, None)
    ref = _make(name, bm, 40)
    want = ref.predict_learn_many(X, y)
    assert not any(c._compiled for c in ref.comps)  # numpy rows and updates throughout
    np.testing.assert_array_equal(np.sign(out), np.sign(want))
    sa, sb = m.get_state(), ref.get_state()
    assert sa.keys() == sb.keys()
    for key in sa:
        if sa[key].dtype.kind == "f":
            np.testing.assert_allclose(sa[key], sb[key], rtol=1e-9, atol=1e-12, err_msg=key)
        else:
            np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)


@needs_om
def test_bad_calls_raise() -> None:
    with pytest.raises(TypeError, match="takes 20 arguments"):
        om.run(False)
    m = _make("bomkc-dd", "rbp", 32)
    X, y = _data(n=5)
    m.predict_learn_many(X, y)
    args = [False, (), (None,) * 16, np.zeros(16, dtype=np.int64), np.zeros(16, dtype=np.int64),
            np.zeros(16, dtype=np.int64), np.zeros(16, dtype=np.int64), np.zeros(16),
            np.ones(4), 0.0, 32, None, X, np.zeros(5), y, 0, np.empty((5, 16)),
            np.empty((5, 16)), None, np.empty(16, dtype=np.int64)]
    with pytest.raises(ValueError, match="heads must be a tuple of 16"):
        om.run(*args)
    args[1] = tuple(c._rule_args()[0] for c in m.comps)
    args[16] = np.empty((2, 16))  # too few rows for the scores
    with pytest.raises(ValueError, match="wrong sizes"):
        om.run(*args)
    with pytest.raises(TypeError, match="takes 16 arguments"):
        om.fuse(False)
    with pytest.raises(ValueError):  # not a fused object
        om.step(object(), X[0], 1.0)
    heads = args[1]
    counts, theta, powtab = np.zeros(16, dtype=np.int64), np.full(16, 1 / 16), np.ones(4)
    fargs = [False, heads, np.zeros(16, dtype=np.int64), np.zeros(16, dtype=np.int64),
             np.full(16, 2, dtype=np.int64), counts, theta, powtab, 0.0, 32, m.rng.bit_generator,
             np.empty(16), np.empty(15), tuple(vars(c) for c in m.comps),
             tuple(c.sv for c in m.comps), (None,) * 16]
    with pytest.raises(ValueError, match="wrong sizes"):  # T holds 15
        om.fuse(*fargs)
    fargs[12] = np.empty(16)
    fargs[13] = tuple(m.comps)
    with pytest.raises(TypeError, match="must hold dicts"):
        om.fuse(*fargs)
    fargs[14] = ()
    with pytest.raises(ValueError, match="stores must be a tuple of 16"):
        om.fuse(*fargs)
