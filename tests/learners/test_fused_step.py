"""The fused per-example rounds (``Learner.step`` in one compiled call: ``bk.step`` of the budget
rules, ``bk.step_dist`` of the distance-row rules, ``fk.step`` of the feature maps, ``om.step``
of bounded OMKC) equal the reference round, ``_score`` then ``_update``, bit for bit: through a
state round trip on the same learner, a pickle and a restore mid-stream, and with bad input
(rejected, changing nothing) and input the fused call leaves to the generic path (lists, other
label types) between good rows."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kernelstream.learners import compiled, make

# (learner, parameters, the compiled entry its fused rounds call)
CASES = [
    ("rbp", {}, "bk.step"),
    ("rbp", {"kernel": "polynomial", "degree": 2}, "bk.step"),
    ("forgetron", {}, "bk.step"),
    ("forgetron", {"reference_quirks": True}, "bk.step"),
    ("forgetron", {"variant": "p1"}, "bk.step"),
    ("bogd", {"eta": 0.3, "lam": 0.2}, "bk.step"),
    ("bogd", {"variant": "p1", "eta": 0.3, "lam": 0.1, "coef_bound": 0.5}, "bk.step"),
    ("bpa-s", {"c": 0.5}, "bk.step"),
    ("projectron", {}, "bk.step"),
    ("projectron++", {}, "bk.step"),
    ("projectron++", {"threshold": 0.2}, "bk.step"),
    ("okl-gd", {"gamma": 0.2}, "bk.step_dist"),
    ("oks-sil", {"gamma": 0.2}, "bk.step_dist"),
    ("nogd", {"gamma": 0.2, "rank": 4}, "fk.step"),
    ("skegd", {"gamma": 0.2, "rank": 4}, "fk.step"),
    ("fogd", {"gamma": 0.2, "n_components": 16}, "fk.step"),
    ("lkmbooks", {"horizon": 500}, "ek.lkm_run"),
    ("lkmbooks", {"loss": "square"}, "ek.lkm_run"),  # unknown horizon: retunes in Python
    ("ea2oks", {}, "ek.ea2oks_step"),
    ("bea2oks", {}, "ek.ea2oks_step"),
    ("bomkc-dd", {}, "om.step"),
    ("bomkc-dd", {"budget_maintenance": "forgetron"}, "om.step"),
    ("bomkc-dd", {"budget_maintenance": "bpa-s", "c": 0.5}, "om.step"),
    ("bomkc-sd", {}, "om.step"),
    ("bomkc-sd", {"budget_maintenance": "bogd", "eta": 0.3, "lam": 0.2}, "om.step"),
]

needs_compiled = pytest.mark.skipif(
    compiled.bk is None or compiled.fk is None or compiled.ek is None or compiled.om is None,
    reason=f"budget rules, feature maps, expert or OMKC blocks not compiled: {compiled.STATUS}")


def _data(n: int, d: int = 7, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.7)
    y = np.where(X[:, 0] - 0.6 * X[:, 1] + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return np.ascontiguousarray(X), y


def _make(name: str, params: dict[str, Any]) -> Any:
    extra = ({} if name in ("fogd", "ea2oks")
             else {"budget": 40 if name in ("lkmbooks", "bea2oks", "bomkc-dd", "bomkc-sd")
                   else 10})
    return make(name, seed=3, **extra, **params)


def _reference_round(m: Any, x: Any, y: float) -> float:
    """One round by the reference code: the checks, ``_score``, ``_update``, the count."""
    xc, xx = m._check_x(x)
    score, aux = m._score(xc, xx)
    m._update(xc, xx, float(y), score, aux)
    m.t += 1
    return float(score)


def _counting(monkeypatch: pytest.MonkeyPatch, entry: str) -> Counter[str]:
    """Counts the calls of the compiled entry ``entry`` that did a round (not None; the
    one-row blocks of ``ek.lkm_run``: that ran their row; ``ek.ea2oks_step``: that ended in
    a done round, status 0 or 3)."""
    mod = {"bk": compiled.bk, "fk": compiled.fk, "ek": compiled.ek,
           "om": compiled.om}[entry.split(".")[0]]
    fn_name = entry.split(".")[1]
    fn: Callable[..., Any] = getattr(mod, fn_name)
    seen: Counter[str] = Counter()

    def wrapped(*args: Any) -> Any:
        r = fn(*args)
        if fn_name == "ea2oks_step":
            done = r[0] in (0, 3)
        else:
            done = r is not None and (not entry.startswith("ek.") or r[0] == 1)
        seen["done" if done else "declined"] += 1
        return r

    monkeypatch.setattr(mod, fn_name, wrapped)
    return seen


def _assert_same_state(a: Any, b: Any) -> None:
    sa, sb = a.get_state(), b.get_state()
    assert sa.keys() == sb.keys()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)


@needs_compiled
@pytest.mark.parametrize(("name", "params", "entry"), CASES)
def test_fused_step_equals_score_then_update(name: str, params: dict[str, Any], entry: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(420)
    seen = _counting(monkeypatch, entry)
    m, ref = _make(name, params), _make(name, params)
    bad = 0
    for i in range(len(X)):
        x, yi = X[i], float(y[i])
        if i == 150:  # a restore on the same learner: every array the fused call kept is new
            m.set_state(m.get_state())
        elif i == 230:  # a pickled copy (Beam ships learners): nothing stale travels with it
            m = pickle.loads(pickle.dumps(m))
        elif i == 300:
            m = type(m).from_state(m.get_state())
        if i % 9 == 4 and i > 0:  # bad input between good rows: rejected, nothing changes
            bad += 1
            before = m.get_state()
            for bx, by in ((np.full_like(x, np.nan), yi), (np.full_like(x, np.inf), yi),
                           (x[:-1].copy(), yi), (x[None], yi), (x, float("nan")), (x, "one")):
                with pytest.raises(ValueError):
                    m.step(bx, by)
            after = m.get_state()
            for key in before:
                np.testing.assert_array_equal(before[key], after[key], err_msg=key)
        if i % 13 == 6:  # good input the fused call leaves to the generic path
            s = m.step(x.tolist(), np.float64(yi))
        elif i % 13 == 7:
            s = m.step(x, int(yi))  # an int label: the fused call takes it too
        else:
            s = m.step(x, yi)
        r = _reference_round(ref, x, yi)
        assert s == r or (np.isnan(s) and np.isnan(r)), f"row {i}: {s!r} != {r!r}"
    _assert_same_state(m, ref)
    assert m.t == ref.t == len(X) and bad
    # the rounds ran fused, not the generic path: most of them (the stage-2 learners start
    # after their budget's first stage); declined: only the bad rows (4 of each 6 reach it),
    # and bomkc-sd's rounds that find a store full (om.step grows none: at most 16 x 6
    # doublings to the total budget of 40)
    assert seen["done"] > len(X) // 2, seen
    assert seen["declined"] <= 4 * bad + (96 if name == "bomkc-sd" else 0), seen


@needs_compiled
@pytest.mark.parametrize(("name", "params", "ints", "floats"), [
    ("forgetron", {}, ("_head", "mistakes"), ("damage",)),
    ("bogd", {"eta": 0.3}, ("_head",), ()),
    ("projectron++", {}, (), ("_kinv_rho", "_kinv_asym")),
    ("okl-gd", {"gamma": 0.2}, ("head", "last"), ("e_last", "sigma")),
    ("oks-sil", {"gamma": 0.2}, (), ("current_gamma",)),
])
def test_rule_state_lives_in_the_rule_arrays(name: str, params: dict[str, Any],
                                            ints: tuple[str, ...],
                                            floats: tuple[str, ...]) -> None:
    """The attributes a compiled rule updates read the rule's arrays (no copy to sync per
    round), and a write by the numpy update lands there."""
    X, y = _data(80, seed=1)
    m = _make(name, params)
    m.predict_learn_many(X, y)
    assert m._rule > 0
    for arrays, names in (("_rule_ist", ints), ("_rule_fst", floats)):
        for i, attr in enumerate(names):
            v, held = getattr(m, attr), getattr(m, arrays)[i]
            assert v == held or (np.isnan(v) and np.isnan(held)), attr
            setattr(m, attr, 1)
            assert getattr(m, arrays)[i] == 1, attr


def _ea_view(m: Any) -> tuple[Any, ...]:
    """What ``ek.ea2oks_step`` keeps current in the learner's attributes (besides its arrays)."""
    ex, mir = m.experts, m.mirror
    return (m.t, m._selected, ex.r, ex.rate, ex.Lmin, mir.res.seen, mir._missing.tolist(),
            [(sv.n, sv.norm2) for sv in mir.pool.stores], m.rng.bit_generator.state)


@needs_compiled
@pytest.mark.parametrize("params", [
    {"budget": 30},  # unknown horizon: λ's guess of T doubles at round 1001
    {"budget": 25, "horizon": 1300, "reference_quirks": True},
    {"horizon": 1300, "eta": 0.3, "reservoir_size": 3, "radius": 2.0},  # ea2oks: projections
])
def test_ea2oks_step_keeps_every_attribute(params: dict[str, Any],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """BEA2OKS's / EA2OKS's fused step (``ek.ea2oks_step``, its uniforms drawn from the bit
    generator in C) against the reference round after every row: the score, every attribute
    the call sets and the Generator's state, through every way a call ends (a done round, a
    restart after it, an accepted reservoir offer whose draws are given back, a store to
    grow), an epoch change of the experts, a new guess of T, Python rounds by
    ``predict_one`` / ``learn_one``, blocks and restores in between, and a Generator holding a
    32-bit half (which the give-back must keep); and steps alone give the block path's
    numbers."""
    name = "bea2oks" if "budget" in params else "ea2oks"
    X, y = _data(1300, d=6, seed=5)
    fn = compiled.ek.ea2oks_step
    ends: Counter[int] = Counter()

    def counting(*args: Any) -> Any:
        r = fn(*args)
        ends[r[0]] += 1
        if r[0] == 2:
            ends[-1] += r[2] > 0  # draws given back
        if r[3]:
            ends[-2] += 1  # the mirror's missing flags followed
        return r

    monkeypatch.setattr(compiled.ek, "ea2oks_step", counting)
    m, ref = make(name, seed=4, **params), make(name, seed=4, **params)
    epochs = set()
    i = 0
    while i < len(X):
        x, yi = X[i], float(y[i])
        if i == 400:  # a 32-bit half in both Generators (nothing here draws one)
            for g in (m.rng, ref.rng):
                st = g.bit_generator.state
                st["has_uint32"], st["uinteger"] = 1, 12345
                g.bit_generator.state = st
        if i % 97 == 50:  # a Python round between fused ones (its own score, then learn)
            assert m.predict_one(x) == ref.predict_one(x)
            m.learn_one(x, yi)
            ref.learn_one(x, yi)
            i += 1
            continue
        if i % 151 == 80:  # a block between fused rounds (it keeps its own arguments)
            got = m.predict_learn_many(X[i:i + 9], y[i:i + 9])
            assert got.tolist() == [_reference_round(ref, X[k], float(y[k]))
                                    for k in range(i, i + 9)], f"rows {i}.."
            i += 9
            continue
        if i % 211 == 120:  # a restore on the same learner, right after a fused round
            m.set_state(m.get_state())
        s = m.step(x, int(yi) if i % 2 else yi)
        assert s == _reference_round(ref, x, yi), f"row {i}"
        assert _ea_view(m) == _ea_view(ref), f"row {i}"
        epochs.add(m.experts.r)
        i += 1
    _assert_same_state(m, ref)
    assert ends[0] > 900 and ends[2] and ends[-1] == ends[2], ends
    assert len(epochs) > 1
    if name == "bea2oks":
        assert ends[3] and ends[-2] and m.restarts.sum() > 0, ends
    else:  # an unbounded store outgrows its arrays
        assert ends[4], ends
    # steps alone against the block path: the same scores and state
    steps, blocks = make(name, seed=4, **params), make(name, seed=4, **params)
    s_steps = np.array([steps.step(X[i], float(y[i])) for i in range(len(X))])
    s_blocks = blocks.predict_learn_many(X, y)
    assert s_steps.tobytes() == s_blocks.tobytes()
    _assert_same_state(steps, blocks)
