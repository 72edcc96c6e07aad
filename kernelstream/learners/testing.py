"""Common conformance checks for online learners, in the spirit of River's ``check_estimator``
and scikit-learn's common estimator checks.

>>> from kernelstream.learners.testing import check_learner
>>> check_learner("perceptron")  # raises AssertionError listing every failed check

Every check is a function ``check_xxx(name, params)`` that raises ``AssertionError`` (or lets
an unexpected exception through) when the learner breaks the contract of
:class:`~kernelstream.learners.base.Learner` (ALGORITHMS.md §1.1, §1.11, §8). ``CHECKS`` maps
check names to :class:`Check` entries and :func:`cases` lists the applicable
``(configuration, check, params)`` triples of a learner, so a test suite can parametrise over
every registered learner without skips. :func:`small_params` derives fast settings (small
budget, few random features, …) from a learner's ``Param`` list; :func:`configurations` adds
one configuration per non-default value of each choice / boolean parameter.
"""

from __future__ import annotations

import math
import pickle
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from kernelstream.learners import registry
from kernelstream.learners._selection import parse_sigmas
from kernelstream.learners.base import Learner, Param, state_from_bytes, state_to_bytes
from kernelstream.learners.registry import WidthError, check_width
from kernelstream.sparse import CSR

D = 5  # features of the synthetic streams
N = 500  # rounds of the main stream
N_LONG = 3000  # rounds of the memory check
TAIL = 60  # rounds run after a state restore
BUDGET = 20

# Size-like parameters shrunk for speed, by parameter name (applied only if the learner has it).
SMALL: dict[str, Any] = {
    "budget": BUDGET,
    "n_components": 16,
    "n_features": 16,
    "rank": 4,
    "reservoir_size": 8,
}

# Per-learner extra settings, only for what SMALL cannot express. Keep this minimal.
OVERRIDES: dict[str, dict[str, Any]] = {
    # predictions are 0 until the selection window is full: select early so the checks
    # exercise the Projectron phase too
    "proj-ka": {"selection_window": 60},
}

# Per-learner bound on ``n_support_vectors`` given the resolved parameters, for learners whose
# bound is not simply ``budget`` (e.g. a budget per kernel). Default: ``params["budget"]``.
SV_BOUND: dict[str, Callable[[dict[str, Any]], int]] = {
    # BEA2OKS budgets each of its K kernels separately
    "bea2oks": lambda p: len(parse_sigmas(p["sigmas"])) * p["budget"],
}


# -- helpers -----------------------------------------------------------------------------------
def small_params(name: str) -> dict[str, Any]:
    """Fast settings for ``name``: :data:`SMALL` for the parameters it has, plus overrides."""
    cls = registry.get(name)
    names = {p.name for p in cls.params}
    out = {k: v for k, v in SMALL.items() if k in names}
    out.update(OVERRIDES.get(name, {}))
    return out


def make_stream(task: str, n: int, d: int = D, noise: float = 0.0,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A learnable non-linear stream; ``noise`` flips labels (classification) or adds Gaussian
    noise (regression)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2 % d] + 0.3 * X[:, -1]
    if task == "regression":
        return X, 0.5 * f + noise * rng.normal(size=n)
    y = np.where(f >= 0.0, 1.0, -1.0)
    flip = rng.random(n) < noise
    y[flip] = -y[flip]
    return X, y


def new(name: str, params: dict[str, Any], seed: Any = 0) -> Learner:
    return registry.make(name, seed=seed, **params)


def stream_for(m: Learner, n: int = N, noise: float = 0.0,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return make_stream(m.task, n, noise=noise, seed=seed)


def run_steps(m: Learner, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.array([m.step(X[i], y[i]) for i in range(len(X))], dtype=np.float64)


def budget_bound(name: str, params: dict[str, Any]) -> int | None:
    if name in SV_BOUND:
        return SV_BOUND[name](params)
    return params.get("budget")


def assert_states_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray], what: str) -> None:
    """Bit-for-bit equality of two states (same keys, dtypes, shapes and bytes)."""
    if set(a) != set(b):
        raise AssertionError(f"{what}: state keys differ: {sorted(set(a) ^ set(b))}")
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            raise AssertionError(f"{what}: state entry {k!r} differs")


def assert_scores_equal(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if not np.array_equal(a, b):
        i = int(np.flatnonzero(a != b)[0]) if a.shape == b.shape else -1
        raise AssertionError(
            f"{what}: scores differ (first at index {i}: "
            f"{a[i] if i >= 0 else a.shape} vs {b[i] if i >= 0 else b.shape})"
        )


def expect_error(fn: Callable[[], Any], pattern: str, what: str) -> str:
    """``fn()`` must raise ValueError whose message matches ``pattern`` (case-insensitive)."""
    try:
        fn()
    except ValueError as e:
        msg = str(e)
        if not re.search(pattern, msg, re.IGNORECASE):
            raise AssertionError(f"{what}: unclear error message {msg!r} "
                                 f"(expected to match {pattern!r})") from None
        return msg
    raise AssertionError(f"{what}: no ValueError raised")


# -- checks ------------------------------------------------------------------------------------
def check_metadata(name: str, params: dict[str, Any]) -> None:
    """Docstring and source reference; consistent class flags; documented parameters."""
    cls = registry.get(name)
    assert cls.name == name, f"registered as {name!r} but cls.name is {cls.name!r}"
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
    assert cls.reference.strip(), f"{cls.__name__}.reference is empty (cite the source)"
    assert cls.task in ("classification", "regression"), f"bad task {cls.task!r}"
    pnames = [p.name for p in cls.params]
    assert len(set(pnames)) == len(pnames), f"duplicate parameter names {pnames}"
    for p in cls.params:
        assert isinstance(p, Param), f"{p!r} is not a Param"
        assert p.doc.strip(), f"parameter {p.name!r} has no doc"
        p.coerce(p.default, name)  # the default passes its own check
    if "budget" in pnames:
        assert cls.budgeted, "has a 'budget' parameter but budgeted is False"
    cap = getattr(cls, "capacity_param", None)
    assert cap is None or cap in pnames, f"capacity_param {cap!r} is not a parameter"
    m = new(name, params)
    if m.draws_in_predict:
        assert m.randomized, "draws_in_predict is True but randomized is False"
    assert repr(m).startswith(type(m).__name__), f"repr {repr(m)!r}"


def check_reproducible(name: str, params: dict[str, Any]) -> None:
    """Same seed ⇒ bit-identical scores and state; scores are finite floats."""
    for seed in (0, (3, 1, 4)):
        a, b = new(name, params, seed), new(name, params, seed)
        X, y = stream_for(a)
        sa = [a.step(X[i], y[i]) for i in range(len(X))]
        assert all(isinstance(s, float) for s in sa), "step must return a Python float"
        sa_arr = np.array(sa)
        assert np.isfinite(sa_arr).all(), "non-finite score"
        assert_scores_equal(sa_arr, run_steps(b, X, y), f"seed {seed!r}, two runs")
        assert_states_equal(a.get_state(), b.get_state(), f"seed {seed!r}, final state")
        nsv = a.n_support_vectors
        assert isinstance(nsv, (int, np.integer)) and nsv >= 0, f"n_support_vectors={nsv!r}"


def check_seeds(name: str, params: dict[str, Any]) -> None:
    """Different seeds differ iff the learner is randomized."""
    runs = []
    for seed in range(4):
        m = new(name, params, seed)
        X, y = stream_for(m)
        runs.append(run_steps(m, X, y))
    distinct = any(not np.array_equal(runs[0], r) for r in runs[1:])
    if new(name, params).randomized:  # may depend on the parameters (e.g. a variant)
        assert distinct, "randomized=True but seeds 0..3 give identical scores"
    else:
        assert not distinct, "randomized=False but different seeds give different scores"


def _valid_state(st: dict[str, np.ndarray], where: str) -> None:
    assert "__version__" in st, f"{where}: state has no '__version__'"
    assert "__learner__" in st, f"{where}: state has no '__learner__'"
    for k, v in st.items():
        assert isinstance(k, str), f"{where}: state key {k!r} is not a str"
        assert type(v) is np.ndarray, f"{where}: state[{k!r}] is {type(v).__name__}, not ndarray"
        assert v.dtype != object, f"{where}: state[{k!r}] has object dtype"


def check_state_roundtrip(name: str, params: dict[str, Any]) -> None:
    """get_state/set_state mid-stream continues bit-identically (directly, through bytes,
    through ``from_state``, into a learner that already learned something else)."""
    cls = registry.get(name)
    ref = new(name, params, seed=7)
    X, y = stream_for(ref)
    n = len(X)
    nsv = np.empty(n, dtype=np.int64)
    scores = np.empty(n)
    for i in range(n):
        scores[i] = ref.step(X[i], y[i])
        nsv[i] = ref.n_support_vectors
    bound = budget_bound(name, ref.hparams)
    cuts = {0, 1, 2, n // 2, n - TAIL}
    full = np.flatnonzero(nsv >= bound) if bound is not None else np.array([], dtype=np.int64)
    if len(full):  # right after the budget fills (rounds are 1-based in nsv[i])
        cuts |= {int(full[0]) + 1, int(full[0]) + 2}
    cuts = sorted(c for c in cuts if 0 <= c <= n - TAIL)
    # reference snapshots at cut + TAIL
    want: dict[int, dict[str, np.ndarray]] = {}
    chk = new(name, params, seed=7)
    for i in range(n):
        chk.step(X[i], y[i])
        if i + 1 - TAIL in cuts:
            want[i + 1 - TAIL] = chk.get_state()
    Xo, yo = make_stream(ref.task, 50, seed=99)
    for cut in cuts:
        a = new(name, params, seed=7)
        run_steps(a, X[:cut], y[:cut])
        st = a.get_state()
        _valid_state(st, f"cut {cut}")
        # the original keeps going unperturbed (and must not mutate the state it handed out)
        assert_scores_equal(run_steps(a, X[cut:cut + TAIL], y[cut:cut + TAIL]),
                            scores[cut:cut + TAIL], f"cut {cut}: original after get_state")
        blob = state_to_bytes(st)
        _valid_state(state_from_bytes(blob), f"cut {cut} (bytes)")
        used = new(name, params, seed=123)
        run_steps(used, Xo, yo)
        targets: list[tuple[str, Callable[[], Learner]]] = [
            ("set_state on a used learner", lambda u=used, s=st: _set(u, s)),
            ("set_state on a default-parameter learner",
             lambda s=st: _set(registry.make(name, seed=5), s)),
            ("bytes", lambda b=blob: _set(new(name, params, 321), state_from_bytes(b))),
            ("cls.from_state", lambda s=st: cls.from_state(s)),
            ("Learner.from_state", lambda s=st: Learner.from_state(s)),
            ("set_state twice from one dict", lambda s=st: _set(new(name, params, 321), s)),
        ]
        for what, build in targets:
            b = build()
            assert type(b) is cls, f"cut {cut}, {what}: got {type(b).__name__}"
            flags = [(f, getattr(b, f), getattr(ref, f))
                     for f in ("task", "randomized", "draws_in_predict", "budgeted")]
            assert all(u == v for _, u, v in flags), f"cut {cut}, {what}: flags {flags}"
            assert_scores_equal(run_steps(b, X[cut:cut + TAIL], y[cut:cut + TAIL]),
                                scores[cut:cut + TAIL], f"cut {cut}, {what}")
            assert_states_equal(b.get_state(), want[cut], f"cut {cut}, {what}: state")
    # versions and names are checked, and a rejected state leaves the learner unchanged
    st = ref.get_state()
    m = new(name, params)
    run_steps(m, X[:30], y[:30])
    before = m.get_state()
    bad = dict(st)
    bad["__version__"] = np.array(st["__version__"] + 1000)
    expect_error(lambda: m.set_state(bad), r"version", "wrong state version")
    expect_error(lambda: cls.from_state(bad), r"version", "from_state, wrong version")
    bad = dict(st)
    bad["__learner__"] = np.array("no-such-learner")
    expect_error(lambda: m.set_state(bad), r"no-such-learner", "wrong learner name")
    expect_error(lambda: Learner.from_state(bad), r"no-such-learner", "Learner.from_state")
    assert_states_equal(m.get_state(), before, "rejected set_state changed the learner")
    other = next((o for o in registry.available() if o != name), None)
    if other is not None:
        o = new(other, small_params(other))
        expect_error(lambda: o.set_state(st), re.escape(name), f"{name} state into {other}")


def _set(m: Learner, st: dict[str, np.ndarray]) -> Learner:
    m.set_state(st)
    return m


def check_pickle(name: str, params: dict[str, Any]) -> None:
    """A pickled copy (how Beam ships objects) continues bit-identically."""
    m = new(name, params, seed=5)
    X, y = stream_for(m)
    run_steps(m, X[:100], y[:100])
    c = pickle.loads(pickle.dumps(m))
    assert_scores_equal(run_steps(c, X[100:200], y[100:200]), run_steps(m, X[100:200], y[100:200]),
                        "pickled copy")


def check_predict_is_pure(name: str, params: dict[str, Any]) -> None:
    """predict_one 0, 1 or 3 times before each learn_one (same array, an equal list, a reused
    buffer) leaves the trajectory unchanged; repeated predict_one returns the same value."""
    ref = new(name, params)
    draws = ref.draws_in_predict
    X, y = stream_for(ref)
    Xc, yc = make_stream(ref.task, 50, seed=11)
    ref_scores = run_steps(ref, X, y)
    ref_state = ref.get_state()
    ref_cont = run_steps(ref, Xc, yc)
    for k in (0, 1, 3):
        for form in ("array", "list", "buffer"):
            if k == 0 and form != "array":
                continue
            what = f"predict_one x{k} ({form})"
            m = new(name, params)
            buf = np.empty(D)
            got = np.empty(len(X))
            for i in range(len(X)):
                if form == "array":
                    x: Any = X[i]
                elif form == "list":
                    x = X[i].tolist()
                else:  # one buffer refilled in place every round
                    buf[:] = X[i]
                    x = buf
                vals = [m.predict_one(x) for _ in range(k)]
                if form == "list":
                    x = X[i].tolist()  # an equal, distinct object
                if k:
                    assert all(v == vals[0] for v in vals), f"{what}: repeated values {vals}"
                    got[i] = vals[0]
                m.learn_one(x, y[i])
            if k:
                assert_scores_equal(got, ref_scores, what)
            assert_states_equal(m.get_state(), ref_state, f"{what}: final state")
            assert_scores_equal(run_steps(m, Xc, yc), ref_cont, f"{what}: subsequent scores")
    if not draws:
        m = new(name, params)
        for i in range(len(X)):
            if i in (1, 2, 25, len(X) // 2, len(X) - 1):
                before = m.get_state()
                m.predict_one(X[i])
                assert_states_equal(m.get_state(), before, f"round {i}: predict_one changed state")
            m.step(X[i], y[i])
    # a prediction for another x (here: a buffer refilled in place after predict_one) must not
    # leak into the update
    a, b = new(name, params), new(name, params)
    buf = np.empty(D)
    for i in range(len(X) - 1):
        if i % 5 == 0:
            buf[:] = X[i + 1]
            a.predict_one(buf)
            if draws:  # same number of draws on both sides
                b.predict_one(X[i + 1].copy())
        buf[:] = X[i]
        a.learn_one(buf, y[i])
        b.learn_one(X[i], y[i])
    assert_states_equal(a.get_state(), b.get_state(), "prediction for another x leaked")


def check_batch_equals_loop(name: str, params: dict[str, Any]) -> None:
    """predict_learn_many over blocks == predict_one/learn_one loop == step loop."""
    ref = new(name, params)
    X, y = stream_for(ref)
    ref_scores = run_steps(ref, X, y)
    ref_state = ref.get_state()
    m = new(name, params)
    got = np.empty(len(X))
    for i in range(len(X)):
        got[i] = m.predict_one(X[i])
        m.learn_one(X[i], y[i])
    assert_scores_equal(got, ref_scores, "predict_one/learn_one loop vs step loop")
    assert_states_equal(m.get_state(), ref_state, "predict_one/learn_one loop: final state")
    for bs in (1, 7, 64, len(X)):
        m = new(name, params)
        parts = [m.predict_learn_many(X[s:s + bs], y[s:s + bs]) for s in range(0, len(X), bs)]
        got = np.concatenate(parts)
        assert got.dtype == np.float64, f"predict_learn_many returned {got.dtype}"
        assert_scores_equal(got, ref_scores, f"predict_learn_many, blocks of {bs}")
        assert_states_equal(m.get_state(), ref_state, f"predict_learn_many, blocks of {bs}")
    # non-contiguous and list inputs behave the same
    m = new(name, params)
    got = m.predict_learn_many(np.asfortranarray(X[:100]), list(y[:100]))
    assert_scores_equal(got, ref_scores[:100], "predict_learn_many, Fortran-order X")
    assert len(new(name, params).predict_learn_many(np.empty((0, D)), [])) == 0


def check_bounded_memory(name: str, params: dict[str, Any]) -> None:
    """Budgeted learners: n_support_vectors ≤ bound every round of a long noisy stream, and the
    serialised state stops growing once the budget is full."""
    m = new(name, params)
    bound = budget_bound(name, m.hparams)
    X, y = stream_for(m, N_LONG, noise=0.3, seed=3)
    sizes: dict[int, int] = {}
    for i in range(N_LONG):
        m.step(X[i], y[i])
        if bound is not None:
            nsv = m.n_support_vectors
            assert nsv <= bound, f"round {i + 1}: n_support_vectors={nsv} > bound {bound}"
        if i + 1 in (N_LONG // 2, N_LONG):
            sizes[i + 1] = len(state_to_bytes(m.get_state()))
    half, end = sizes[N_LONG // 2], sizes[N_LONG]
    slack = max(1024, half // 50)
    assert end <= half + slack, f"state grows: {half} bytes at {N_LONG // 2}, {end} at {N_LONG}"


def check_first_prediction(name: str, params: dict[str, Any]) -> None:
    """First score is 0 (§8 i); a zero score follows the tie rule (§1.1.1)."""
    cls = registry.get(name)
    m = new(name, params)
    X, _ = make_stream(m.task, 3)
    s = m.predict_one(X[0])
    assert s == 0.0, f"first prediction is {s}, expected 0"
    if m.task == "classification":
        tie = "tie" in {p.name for p in cls.params}
        assert m.predict_label(0.0) == 1.0, "a zero score must predict +1 by default"
        if tie:
            mp = new(name, {**params, "tie": "positive"})
            assert mp.predict_label(mp.predict_one(X[0])) == 1.0, "tie=positive: first label"
            mn = new(name, {**params, "tie": "negative"})
            assert mn.predict_label(mn.predict_one(X[0])) == -1.0, "tie=negative: first label"
        for sc, lab in ((1e-300, 1.0), (-1e-300, -1.0), (2.0, 1.0), (-2.0, -1.0)):
            assert m.predict_label(sc) == lab, f"predict_label({sc}) != {lab}"


def check_bad_input(name: str, params: dict[str, Any]) -> None:
    """Invalid x / y raise a clear ValueError and leave the learner unchanged and usable."""
    ref = new(name, params)
    task = ref.task
    X, y = stream_for(ref, 120)
    ref_scores = run_steps(ref, X, y)
    x0 = X[0]
    # a fresh learner: bad first examples must not fix the dimension (or anything else)
    fresh = new(name, params)
    empty = fresh.get_state()
    for bad in ([np.nan] * 3, [1.0, np.inf], [0.0] * 0, np.ones((1, D))):
        expect_error(lambda b=bad: fresh.predict_one(b), r"nan|finite|feature|1-d|shape",
                     f"first x={bad!r}")
        expect_error(lambda b=bad: fresh.learn_one(b, y[0]), r"nan|finite|feature|1-d|shape",
                     f"first learn_one x={bad!r}")
    if task == "classification":
        expect_error(lambda: fresh.learn_one(x0, 0.0), r"label", "first label 0")
    expect_error(lambda: fresh.predict_learn_many(np.full((3, 2), np.nan), [1.0] * 3),
                 r"nan|finite", "first block with NaN")
    expect_error(lambda: fresh.predict_learn_many(np.ones((3, 0)), [1.0] * 3),
                 r"feature", "block with 0 features")
    assert_states_equal(fresh.get_state(), empty, "rejected first inputs changed a fresh learner")

    m = new(name, params)
    run_steps(m, X[:60], y[:60])
    before = m.get_state()
    xs = {f"{v} in x": np.where(np.arange(D) == 2, v, x0) for v in (np.nan, np.inf, -np.inf)}
    xs["overflowing x"] = np.full(D, 1e200)
    cases: list[tuple[str, Callable[[], Any], str]] = []
    for what, bx in xs.items():
        cases += [
            (f"predict_one, {what}", lambda b=bx: m.predict_one(b), r"nan|finite|overflow"),
            (f"learn_one, {what}", lambda b=bx: m.learn_one(b, 1.0), r"nan|finite|overflow"),
            (f"step, {what}", lambda b=bx: m.step(b, 1.0), r"nan|finite|overflow"),
        ]
        blk = X[60:70].copy()
        blk[4] = bx
        cases.append((f"predict_learn_many, {what} in row 4",
                      lambda b=blk: m.predict_learn_many(b, y[60:70]), r"nan|finite|overflow|row"))
    short, long_ = x0[: D - 1], np.append(x0, 0.0)
    cases += [
        ("predict_one, wrong dimension", lambda: m.predict_one(short),
         rf"{D}.*{D - 1}|{D - 1}.*{D}"),
        ("learn_one, wrong dimension", lambda: m.learn_one(long_, 1.0),
         rf"{D}.*{D + 1}|{D + 1}.*{D}"),
        ("step, wrong dimension", lambda: m.step(short, 1.0), r"feature|dimension"),
        ("predict_one, 2-D x", lambda: m.predict_one(x0[None, :]), r"1-d|shape|dimension"),
        ("learn_one, 2-D x", lambda: m.learn_one(x0[None, :], 1.0), r"1-d|shape|dimension"),
        ("predict_one, scalar x", lambda: m.predict_one(1.0), r"1-d|shape|dimension"),
        ("predict_learn_many, wrong dimension",
         lambda: m.predict_learn_many(X[60:70, :-1], y[60:70]), r"feature|dimension"),
        ("predict_learn_many, 1-D X", lambda: m.predict_learn_many(x0, [1.0]), r"2-d|shape"),
        ("predict_learn_many, X/y lengths", lambda: m.predict_learn_many(X[60:70], y[60:69]),
         r"10.*9|9.*10|length|rows"),
        ("learn_one, label 'a'", lambda: m.learn_one(x0, "a"), r"label|target|number"),
        ("learn_one, label None", lambda: m.learn_one(x0, None), r"label|target|number"),
    ]
    if task == "classification":
        for lab in (0.0, 2.0, 0.5, np.nan, -1.0000001):
            cases.append((f"learn_one, label {lab}", lambda v=lab: m.learn_one(x0, v), r"label"))
            cases.append((f"step, label {lab}", lambda v=lab: m.step(x0, v), r"label"))
        yb = y[60:70].copy()
        yb[3] = 0.0
        cases.append(("predict_learn_many, label 0 in block",
                      lambda: m.predict_learn_many(X[60:70], yb), r"label"))
    else:
        for lab in (np.nan, np.inf):
            cases.append((f"learn_one, target {lab}", lambda v=lab: m.learn_one(x0, v),
                          r"target|finite|label"))
        yb = y[60:70].copy()
        yb[3] = np.nan
        cases.append(("predict_learn_many, NaN target in block",
                      lambda: m.predict_learn_many(X[60:70], yb), r"target|finite|label"))
    for what, fn, pat in cases:
        with np.errstate(over="ignore"):  # the overflowing x warns before it is rejected
            expect_error(fn, pat, what)
        assert_states_equal(m.get_state(), before, f"{what}: state changed")
    # a pending prediction followed by a bad label: the prediction is kept for the retry
    s = m.predict_one(X[60])
    assert s == ref_scores[60], f"score after rejected inputs {s} != {ref_scores[60]}"
    expect_error(lambda: m.learn_one(X[60], 3.0 if task == "classification" else np.nan),
                 r"label|target|finite", "bad label after predict_one")
    m.learn_one(X[60], y[60])
    assert_scores_equal(run_steps(m, X[61:], y[61:]), ref_scores[61:], "after rejected inputs")


def check_bad_params(name: str, params: dict[str, Any]) -> None:
    """Unknown / ill-typed / out-of-range parameters raise ValueError; sigma works for gamma."""
    cls = registry.get(name)
    ps = {p.name: p for p in cls.params}
    msg = expect_error(lambda: new(name, {**params, "no_such_param": 1}), r"no_such_param",
                       "unknown parameter")
    missing = [p for p in ps if p not in msg]
    assert not missing, f"unknown-parameter error does not list valid names {missing}: {msg!r}"
    for p in cls.params:
        if p.type in (int, float):
            expect_error(lambda p=p: new(name, {**params, p.name: "abc"}), re.escape(p.name),
                         f"{p.name}='abc'")
            expect_error(lambda p=p: new(name, {**params, p.name: [1]}), re.escape(p.name),
                         f"{p.name}=[1]")
            if p.type is float:
                expect_error(lambda p=p: new(name, {**params, p.name: float("nan")}),
                             re.escape(p.name), f"{p.name}=nan")
            if p.type is int:
                expect_error(lambda p=p: new(name, {**params, p.name: 2.5}), re.escape(p.name),
                             f"{p.name}=2.5")
            if p.check is not None and not p.check(-1):
                expect_error(lambda p=p: new(name, {**params, p.name: -1}), re.escape(p.name),
                             f"{p.name}=-1")
        if p.choices is not None:
            expect_error(lambda p=p: new(name, {**params, p.name: "bogus"}), re.escape(p.name),
                         f"{p.name}='bogus'")
        if p.type is bool:
            expect_error(lambda p=p: new(name, {**params, p.name: "maybe"}), re.escape(p.name),
                         f"{p.name}='maybe'")
    if "budget" in ps:
        for v in (-5, 0, 2.5, "x"):
            expect_error(lambda v=v: new(name, {**params, "budget": v}), r"budget", f"budget={v!r}")
    nog = {k: v for k, v in params.items() if k != "gamma"}
    if "gamma" in ps:
        a = new(name, {**nog, "sigma": 2.0})
        b = new(name, {**nog, "gamma": 0.125})
        assert math.isclose(a.gamma, 0.125, rel_tol=1e-15), f"sigma=2 gave gamma={a.gamma}"
        X, y = stream_for(a, 100)
        assert_scores_equal(run_steps(a, X, y), run_steps(b, X, y), "sigma=2 vs gamma=1/8")
        for bad in (-1.0, 0.0, float("nan"), "abc"):
            expect_error(lambda v=bad: new(name, {**nog, "sigma": v}), r"sigma",
                         f"sigma={bad!r}")
        expect_error(lambda: new(name, {**nog, "sigma": 1.0, "gamma": 1.0}), r"sigma|gamma",
                     "both sigma and gamma")
    else:
        expect_error(lambda: new(name, {**nog, "sigma": 1.0}), r"sigma", "sigma without gamma")


def sparse_stream(m: Learner, n: int = N, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A stream with about 40% zeros (so sparse rows differ from dense ones), as dense rows."""
    X, y = stream_for(m, n, seed=seed)
    X = X * (np.random.default_rng(seed + 1).random(X.shape) < 0.6)
    return X, y


def _csr_steps(m: Learner, C: CSR, y: np.ndarray) -> np.ndarray:
    return np.array([m.step(C.rows(i, i + 1), y[i]) for i in range(C.n_rows)], dtype=np.float64)


def check_sparse_rows(name: str, params: dict[str, Any]) -> None:
    """Sparse input (1-row CSR / CSR blocks): deterministic; predict_learn_many over blocks ==
    predict_one/learn_one == step loop, bit for bit; a state saved mid-stream (sparse SVs
    included, through bytes) and a pickled copy continue bit-identically; a budgeted sparse
    learner's state stops growing; results agree with the same rows given dense (to round-off
    for learners that run sparse, exactly for those that densify); a learner that keeps dense
    rows refuses an enormous width with one line before learning, and a sparse learner runs at
    that width with memory independent of it; bad sparse input is rejected and leaves the
    learner unchanged."""
    ref = new(name, params, seed=3)
    X, y = sparse_stream(ref)
    C = CSR.from_dense(X)
    n = len(X)
    scores = _csr_steps(ref, C, y)
    st_ref = ref.get_state()
    assert bool(st_ref.get("__sparse__", False)) == ref.accepts_sparse, "sparse mode flag"
    if ref.accepts_sparse:
        assert not any(k.endswith(".X") for k in st_ref), "sparse mode keeps dense SV rows"
    again = new(name, params, seed=3)
    assert_scores_equal(_csr_steps(again, C, y), scores, "sparse: same seed, second run")
    assert_states_equal(again.get_state(), st_ref, "sparse: same seed, final state")
    m = new(name, params, seed=3)
    got = np.empty(n)
    for i in range(n):
        got[i] = m.predict_one(C.rows(i, i + 1))
        m.learn_one(C.rows(i, i + 1), y[i])
    assert_scores_equal(got, scores, "sparse: predict_one/learn_one loop vs step loop")
    assert_states_equal(m.get_state(), st_ref, "sparse: predict_one/learn_one final state")
    for bs in (1, 7, n):
        m = new(name, params, seed=3)
        got = np.concatenate([m.predict_learn_many(C.rows(s, s + bs), y[s:s + bs])
                              for s in range(0, n, bs)])
        assert_scores_equal(got, scores, f"sparse: predict_learn_many, blocks of {bs}")
        assert_states_equal(m.get_state(), st_ref, f"sparse: predict_learn_many, blocks of {bs}")
    for cut in (1, n // 2):
        a = new(name, params, seed=3)
        a.predict_learn_many(C.rows(0, cut), y[:cut])
        b = new(name, params, seed=99)
        b.set_state(state_from_bytes(state_to_bytes(a.get_state())))
        tail = C.rows(cut, n)
        assert_scores_equal(b.predict_learn_many(tail, y[cut:]), scores[cut:],
                            f"sparse: restored at {cut}")
        assert_states_equal(b.get_state(), st_ref, f"sparse: restored at {cut}, final state")
        c = pickle.loads(pickle.dumps(a))  # how Beam ships a learner
        assert_scores_equal(c.predict_learn_many(tail, y[cut:]), scores[cut:],
                            f"sparse: pickled at {cut}")
    if ref.budgeted and ref.accepts_sparse:  # sparse SVs: the state stops growing too
        mb = new(name, params, seed=3)
        Xl, yl = sparse_stream(mb, N_LONG // 2, seed=5)
        yl = np.where(np.random.default_rng(6).random(len(yl)) < 0.3, -yl, yl)
        Cl = CSR.from_dense(Xl)
        half = len(yl) // 2
        mb.predict_learn_many(Cl.rows(0, half), yl[:half])
        s_half = len(state_to_bytes(mb.get_state()))
        mb.predict_learn_many(Cl.rows(half, len(yl)), yl[half:])
        s_end = len(state_to_bytes(mb.get_state()))
        assert s_end <= s_half + max(1024, s_half // 50), (
            f"sparse state grows: {s_half} bytes at {half}, {s_end} at {len(yl)}")
    dense = run_steps(new(name, params, seed=3), X, y)
    if ref.accepts_sparse:
        scale = max(1.0, float(np.max(np.abs(dense))))
        bad = np.abs(scores - dense) > 1e-9 * scale
        assert not bad.any(), (f"sparse vs dense: round {int(np.flatnonzero(bad)[0])}: "
                               f"{scores[bad][0]!r} vs {dense[bad][0]!r}")
    else:  # densified rows are the dense rows
        assert_scores_equal(scores, dense, "densified sparse rows vs dense rows")
    # widths: 2^31 - 1 columns, a handful of non-zeros per row
    wide = CSR(C.indptr[:41], C.indices[: C.indptr[40]] * 400_000_000, C.data[: C.indptr[40]],
               (1 << 31) - 1)
    w = new(name, params, seed=3)
    if ref.accepts_sparse:
        check_width(name, w.hparams, wide.n_features, sparse=True, nnz_per_row=5)
        sw = w.predict_learn_many(wide, y[:40])
        assert_scores_equal(sw, _csr_steps(new(name, params, seed=3), wide, y[:40]),
                            "sparse at width 2^31-1: block vs loop")
        nbytes = len(state_to_bytes(w.get_state()))
        assert nbytes < 400_000, f"state of {nbytes} bytes at width 2^31-1"
    else:
        empty = w.get_state()
        msg = expect_error(lambda: w.predict_learn_many(wide, y[:40]), r"need.*more than",
                           "dense learner at width 2^31-1")
        assert "\n" not in msg and "sparse" in msg, f"width error is not one helpful line: {msg!r}"
        try:
            check_width(name, w.hparams, wide.n_features, sparse=True, nnz_per_row=5)
        except WidthError:
            pass
        else:
            raise AssertionError("check_width accepts width 2^31-1 for a dense learner")
        assert_states_equal(w.get_state(), empty, "refused width changed the learner")
    # bad sparse input
    m = new(name, params, seed=3)
    m.predict_learn_many(C.rows(0, 30), y[:30])
    before = m.get_state()
    one = C.rows(30, 31)
    nanrow = CSR(one.indptr, one.indices, np.full(len(one.data), np.nan), one.n_features)
    two = C.rows(30, 32)
    unsorted = CSR(np.array([0, 2]), np.array([3, 1]), np.array([1.0, 1.0]), D)
    narrow = CSR(one.indptr, one.indices, one.data, D + 1)
    blk_nan = CSR(two.indptr, two.indices, np.where(np.arange(two.nnz) == 0, np.nan, two.data),
                  D)
    for what, fn, pat in (
        ("predict_one, NaN", lambda: m.predict_one(nanrow), r"nan|finite"),
        ("learn_one, NaN", lambda: m.learn_one(nanrow, 1.0), r"nan|finite"),
        ("predict_one, 2-row CSR", lambda: m.predict_one(two), r"1-row"),
        ("step, unsorted indices", lambda: m.step(unsorted, 1.0), r"increasing"),
        ("predict_one, wrong width", lambda: m.predict_one(narrow), rf"{D}.*{D + 1}"),
        ("predict_learn_many, NaN in block", lambda: m.predict_learn_many(blk_nan, y[:2]),
         r"nan|finite"),
        ("predict_learn_many, X/y lengths", lambda: m.predict_learn_many(two, y[:3]),
         r"2.*3|rows"),
    ):
        expect_error(fn, pat, what)
        assert_states_equal(m.get_state(), before, f"{what}: state changed")


class Check(NamedTuple):
    fn: Callable[[str, dict[str, Any]], None]
    applies: Callable[[Learner], bool]  # given a learner built with the configuration
    per_config: bool  # run for every configuration, not only the default one


def _always(m: Learner) -> bool:
    return True


CHECKS: dict[str, Check] = {
    "metadata": Check(check_metadata, _always, False),
    "bad_params": Check(check_bad_params, _always, False),
    "pickle": Check(check_pickle, _always, False),
    "reproducible": Check(check_reproducible, _always, True),
    "seeds": Check(check_seeds, _always, True),
    "state_roundtrip": Check(check_state_roundtrip, _always, True),
    "predict_is_pure": Check(check_predict_is_pure, _always, True),
    "batch_equals_loop": Check(check_batch_equals_loop, _always, True),
    "bounded_memory": Check(check_bounded_memory, lambda m: m.budgeted, True),
    "first_prediction": Check(check_first_prediction, _always, True),
    "bad_input": Check(check_bad_input, _always, True),
    "sparse_rows": Check(check_sparse_rows, _always, True),
}

# choice-valued parameters not worth a configuration of their own (checked elsewhere)
SKIP_VARIATION = {"tie"}


def configurations(name: str) -> list[tuple[str, dict[str, Any]]]:
    """``("default", small_params)`` plus one configuration per non-default value of every
    choice or boolean parameter (kernel, loss, variant, quirk switches, …), one at a time."""
    base = small_params(name)
    out = [("default", base)]
    for p in registry.get(name).params:
        if p.name in SKIP_VARIATION or p.name in OVERRIDES.get(name, {}):
            continue
        values = p.choices if p.choices is not None else (False, True) if p.type is bool else ()
        out += [(f"{p.name}={v}", {**base, p.name: v}) for v in values if v != p.default]
    return out


def cases(name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(configuration id, check, params)`` for every applicable check of ``name``."""
    out = []
    for cid, params in configurations(name):
        m = new(name, params)
        for c, chk in CHECKS.items():
            if (chk.per_config or cid == "default") and chk.applies(m):
                out.append((cid, c, params))
    return out


def check_learner(name: str, **params: Any) -> None:
    """Run every applicable check on ``name`` — on the given ``params``, or on every
    configuration of :func:`configurations` — and raise ``AssertionError`` listing all
    failures."""
    todo = ([("given", c, params) for c, chk in CHECKS.items() if chk.applies(new(name, params))]
            if params else cases(name))
    failures = []
    for cid, c, ps in todo:
        try:
            CHECKS[c].fn(name, ps)
        except Exception as e:  # report every failing check, not only the first
            failures.append(f"[{cid}] {c}: {type(e).__name__}: {e}")
    if failures:
        raise AssertionError(f"{name} fails {len(failures)} check(s):\n  " + "\n  ".join(failures))
