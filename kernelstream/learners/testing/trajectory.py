"""Conformance checks of what a learner does over a stream: the same seed gives the same run,
seeds matter exactly when it is randomized, a saved or pickled learner continues bit for bit,
predicting changes nothing, blocks equal the per-row loop, a budget bounds memory, and the
first prediction is 0.

These are the checks of the contract's dynamics, kept apart from the checks of what a learner
declares and accepts (:mod:`~kernelstream.learners.testing.interface`); the suite that runs
both is :mod:`kernelstream.learners.testing`.
"""

from __future__ import annotations

import json
import math
import pickle
import re
from collections.abc import Callable
from functools import partial, wraps
from typing import Any

import numpy as np

from kernelstream.learners import registry
from kernelstream.learners.base import Learner, state_from_bytes, state_to_bytes
from kernelstream.learners.testing.support import (
    N_LONG,
    TAIL,
    D,
    assert_scores_equal,
    assert_states_equal,
    differing_attributes,
    expect_error,
    global_rng_hint,
    make_stream,
    new,
    run_steps,
    small_params,
    stream_for,
    update_when_hint,
)

CheckFn = Callable[[str, dict[str, Any]], None]


def _diagnosed(update_when: bool = False) -> Callable[[CheckFn], CheckFn]:
    """A check whose failure message gets the likely cause appended: a learner whose runs
    follow numpy's global RNG (``global_rng_hint``), and with ``update_when`` a learner that
    declares the rounds its compiled blocks skip (``update_when_hint``)."""
    def wrap(check: CheckFn) -> CheckFn:
        @wraps(check)
        def run(name: str, params: dict[str, Any]) -> None:
            try:
                check(name, params)
            except AssertionError as e:
                hint = global_rng_hint(name, params)
                if update_when:
                    hint += update_when_hint(new(name, params))
                if hint:
                    raise AssertionError(f"{e}{hint}") from e
                raise
        return run
    return wrap


@_diagnosed()
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


# |score| above this on the suite's streams (N(0, 1) features, labels ±1 or targets of about
# unit size) is a diverged learner: the sound configurations stay under 200 (rbp with the
# polynomial kernel: 160), while a diverging one can stay finite for the stream's 500 rows
# (skegd with the polynomial kernel and squared hinge: 7e111) and overflow only later
SCORE_BOUND = 1e6


def declared_divergent(m: Learner) -> dict[str, Any] | None:
    """The entry of ``m``'s class's ``known_divergent`` (parameter values whose scores
    diverge on ordinary data by the specified rule, documented with the learner) that its
    parameters match, or None."""
    for d in getattr(type(m), "known_divergent", ()):
        if all(m.hparams.get(k) == v for k, v in d.items()):
            return dict(d)
    return None


def check_bounded_scores(name: str, params: dict[str, Any]) -> None:
    """Scores stay finite and within :data:`SCORE_BOUND` over the stream, unless the class
    declares the configuration in ``known_divergent`` (whose entries must name its
    parameters and their allowed values): a finite score alone lets a learner at 1e111 pass."""
    cls = registry.get(name)
    spec = {p.name: p for p in cls.params}
    for d in getattr(cls, "known_divergent", ()):
        for k, v in d.items():
            assert k in spec, f"known_divergent names {k!r}, which is not a parameter"
            choices = spec[k].choices
            assert choices is None or v in choices, (
                f"known_divergent names {k}={v!r}, not one of {choices}")
    m = new(name, params)
    if declared_divergent(m) is not None:
        return
    X, y = stream_for(m)
    with np.errstate(over="ignore", invalid="ignore"):
        s = m.predict_learn_many(X, y)
    top = float(np.max(np.abs(s))) if np.isfinite(s).all() else math.inf
    assert top <= SCORE_BOUND, (
        f"scores diverge: max |score| {top:.3g} over {len(s)} rows (bound {SCORE_BOUND:g}); "
        "a configuration that diverges by its specified rule is documented and declared in "
        "the class's known_divergent")


@_diagnosed()
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


@_diagnosed()
def check_state_roundtrip(name: str, params: dict[str, Any]) -> None:
    """get_state/set_state mid-stream continues bit-identically (directly, through bytes,
    through ``from_state``, into a learner that already learned something else, from
    Fortran-ordered copies of its arrays); inconsistent states (a budget below the support
    vectors stored among them) are refused, leaving the learner unchanged."""
    cls = registry.get(name)
    ref = new(name, params, seed=7)
    X, y = stream_for(ref)
    n = len(X)
    nsv = np.empty(n, dtype=np.int64)
    scores = np.empty(n)
    for i in range(n):
        scores[i] = ref.step(X[i], y[i])
        nsv[i] = ref.n_support_vectors
    bound = ref.memory_bound()
    at = {0, 1, 2, n // 2, n - TAIL}
    full = np.flatnonzero(nsv >= bound) if bound is not None else np.array([], dtype=np.int64)
    if len(full):  # right after the budget fills (rounds are 1-based in nsv[i])
        at |= {int(full[0]) + 1, int(full[0]) + 2}
    cuts = sorted(c for c in at if 0 <= c <= n - TAIL)
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
            ("set_state on a used learner", partial(_set, used, st)),
            ("set_state on a default-parameter learner",
             partial(_set_new, partial(registry.make, name, seed=5), st)),
            ("bytes", partial(_set_new, partial(new, name, params, 321), state_from_bytes(blob))),
            ("cls.from_state", partial(cls.from_state, st)),
            ("Learner.from_state", partial(Learner.from_state, st)),
            ("set_state twice from one dict",
             partial(_set_new, partial(new, name, params, 321), st)),
            ("Fortran-ordered arrays", partial(_set_new, partial(new, name, params, 321), {
                k: np.asfortranarray(v) if v.ndim > 1 else v for k, v in st.items()})),
        ]
        for what, build in targets:
            b = build()
            assert type(b) is cls, f"cut {cut}, {what}: got {type(b).__name__}"
            flags = [(f, getattr(b, f), getattr(ref, f))
                     for f in ("task", "randomized", "draws_in_predict")]
            flags.append(("memory_bound", b.memory_bound(), ref.memory_bound()))
            assert all(u == v for _, u, v in flags), f"cut {cut}, {what}: flags {flags}"
            try:
                assert_scores_equal(run_steps(b, X[cut:cut + TAIL], y[cut:cut + TAIL]),
                                    scores[cut:cut + TAIL], f"cut {cut}, {what}")
                assert_states_equal(b.get_state(), want[cut], f"cut {cut}, {what}: state")
            except AssertionError as e:
                raise AssertionError(f"{e}{_restore_diff(name, params, X, y, cut, build)}"
                                     ) from e
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
    # inconsistent states: a ValueError naming the learner and the entry, nothing changed
    own = [k for k in st if not k.startswith("__")]
    bads: list[tuple[str, str, dict[str, np.ndarray]]] = [
        ("missing __learner__", "__learner__", {k: v for k, v in st.items() if k != "__learner__"}),
        ("truncated __rng__", "__rng__", {**st, "__rng__": st["__rng__"][:3]}),
        ("negative __t__", "__t__", {**st, "__t__": np.array(-1)}),
        ("__dim__ + 1", r"", {**st, "__dim__": np.array(int(st["__dim__"]) + 1)}),
    ]
    for k in own[:2] + own[-1:]:
        bads.append((f"missing {k}", rf"miss.*|{re.escape(k.rsplit('.', 1)[-1])}",
                     {q: v for q, v in st.items() if q != k}))
    for k in own:
        v = st[k]
        if v.dtype == np.float64 and v.ndim and v.shape[0] > 1:
            bads.append((f"{k} as float32", re.escape(k.rsplit(".", 1)[-1]),
                         {**st, k: v.astype(np.float32)}))
            if v.ndim == 2 and v.shape[1] > 1:  # a width or a parameter's size
                bads.append((f"{k} with a column less", re.escape(k.rsplit(".", 1)[-1]),
                             {**st, k: v[:, :-1]}))
            break
    small = {**ref.hparams, "budget": ref.n_support_vectors // 2}
    if "budget" in ref.hparams and (_bound(name, small) or 1 << 62) < ref.n_support_vectors:
        # a budget edited under the support vectors stored (or another learner's state
        # relabelled): refused (the state's arrays may not fit first), not a learner over
        # its own bound
        bads.append(("budget below its support vectors",
                     r"support vectors|budget|shape|inconsistent state",
                     {**st, "__params__": np.array(json.dumps(small, sort_keys=True))}))
    for what, key, bad in bads:
        expect_error(partial(m.set_state, bad), rf"{re.escape(name)}.*(?:{key})",
                     f"state, {what}")
        expect_error(partial(registry.from_state, bad), rf"{re.escape(name)}|{key}",
                     f"from_state, {what}")
        assert_states_equal(m.get_state(), before, f"rejected state ({what}) changed the learner")
    # the restored learner owns its arrays: the caller's dict may change afterwards
    cut = n // 2
    a = new(name, params, seed=7)
    run_steps(a, X[:cut], y[:cut])
    st = a.get_state()
    b = Learner.from_state(st)
    for v in st.values():
        if v.dtype.kind in "fiu" and v.size and v.flags.writeable:
            v[...] = v * 2 + 1 if v.dtype.kind == "f" else v + 1
    assert_scores_equal(run_steps(b, X[cut:cut + TAIL], y[cut:cut + TAIL]),
                        scores[cut:cut + TAIL], "restored learner after the state was mutated")
    other = next((o for o in registry.available() if o != name), None)
    if other is not None:
        o = new(other, small_params(other))
        expect_error(lambda: o.set_state(st), re.escape(name), f"{name} state into {other}")


def _bound(name: str, params: dict[str, Any]) -> int | None:
    """``memory_bound()`` of the learner of these parameters; None for none or bad ones."""
    try:
        return registry.make(name, **params).memory_bound()
    except ValueError:
        return None


def _restore_diff(name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray, cut: int,
                  build: Callable[[], Learner]) -> str:
    """The attributes in which a learner restored by ``build`` differs from the one that saved
    the state (rebuilt: ``cut`` rounds of seed 7), for a failed round trip's message."""
    try:
        ref = new(name, params, seed=7)
        run_steps(ref, X[:cut], y[:cut])
        diff = differing_attributes(build(), ref)
    except Exception:  # the diagnosis must not hide the check's own failure
        return ""
    if not diff:
        return ""
    own = [d for d in diff if not d.rsplit(".", 1)[-1].startswith("_")]
    private = [d for d in diff if d not in own]
    text = ("; right after the restore these attributes differ from the learner that saved "
            f"the state, or only one of them has them: {', '.join(own[:8]) or '(no public one)'}")
    if private:  # scratch buffers and caches are among these
        text += f" (private, scratch buffers included: {', '.join(private[:8])})"
    return text + ": are they in get_state / set_state?"


def _set(m: Learner, st: dict[str, np.ndarray]) -> Learner:
    m.set_state(st)
    return m


def _set_new(make: Callable[[], Learner], st: dict[str, np.ndarray]) -> Learner:
    return _set(make(), st)


@_diagnosed()
def check_pickle(name: str, params: dict[str, Any]) -> None:
    """A pickled copy (how Beam ships objects) continues bit-identically."""
    m = new(name, params, seed=5)
    X, y = stream_for(m)
    run_steps(m, X[:100], y[:100])
    c = pickle.loads(pickle.dumps(m))
    assert_scores_equal(run_steps(c, X[100:200], y[100:200]), run_steps(m, X[100:200], y[100:200]),
                        "pickled copy")


@_diagnosed(update_when=True)
def check_predict_is_pure(name: str, params: dict[str, Any]) -> None:
    """predict_one 0, 1 or 3 times before each learn_one (same array, an equal list, a reused
    buffer) leaves the trajectory unchanged; repeated predict_one returns the same value."""
    ref = new(name, params)
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
    # predict_one changes no state, for a learner whose score draws too (it takes the round's
    # draw without advancing its generator), and a state saved after it continues bit for bit
    m = new(name, params)
    for i in range(len(X)):
        if i in (1, 2, 25, len(X) // 2, len(X) - 1):
            before = m.get_state()
            s = m.predict_one(X[i])
            assert_states_equal(m.get_state(), before, f"round {i}: predict_one changed state")
            r = _set(new(name, params), m.get_state())
            assert r.predict_one(X[i]) == s, f"round {i}: restored learner predicts otherwise"
            r.learn_one(X[i], y[i])
            m.learn_one(X[i], y[i])
            assert_states_equal(r.get_state(), m.get_state(),
                                f"round {i}: restored after predict_one, then learn_one")
        else:
            m.step(X[i], y[i])
    assert_states_equal(m.get_state(), ref_state, "predict_one then learn_one vs step")
    # predictions for other rows (a monitor's probe; a buffer refilled in place after
    # predict_one) between a row's predict_one and learn_one do not leak into the trajectory
    a, b = new(name, params), new(name, params)
    buf = np.empty(D)
    probe = Xc[0]
    got_a, got_b = np.empty(len(X) - 1), np.empty(len(X) - 1)
    for i in range(len(X) - 1):
        got_a[i] = a.predict_one(X[i])
        got_b[i] = b.predict_one(X[i])
        if i % 5 == 0:
            buf[:] = X[i + 1]
            a.predict_one(buf)
            a.predict_one(probe)
        buf[:] = X[i]
        a.learn_one(buf, y[i])
        b.learn_one(X[i], y[i])
    assert_scores_equal(got_a, got_b, "predictions for other rows changed the scores")
    assert_states_equal(a.get_state(), b.get_state(), "prediction for another x leaked")
    # nor into a step or a block that follows them (each undoes a pending round's draw)
    c = new(name, params)
    got_c = np.empty(len(X))
    for i in range(len(X)):
        if i % 3 == 0:
            c.predict_one(probe)
        if i % 2:  # a Python float label: the compiled step paths take only those
            got_c[i] = c.step(X[i], float(y[i]))
        else:
            got_c[i] = c.predict_learn_many(X[i:i + 1], y[i:i + 1])[0]
    assert_scores_equal(got_c, ref_scores, "a prediction of another row, then step / a block")
    assert_states_equal(c.get_state(), ref_state,
                        "a prediction of another row, then step / a block")


@_diagnosed(update_when=True)
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


@_diagnosed()
def check_row_lanes(name: str, params: dict[str, Any]) -> None:
    """Rows that need no conversion (C-contiguous float64 vectors, which the per-example
    methods take as they are) and rows that do (lists, float32, strided views, other byte
    orders) give the same run bit for bit, through step and through predict_one/learn_one,
    in any mix; and a bad row after fast ones is still rejected, leaving the learner as it
    was."""
    ref = new(name, params)
    X, y = stream_for(ref, 200)
    ref_scores = run_steps(ref, X, y)  # X[i]: contiguous float64 rows
    ref_state = ref.get_state()
    wide = np.zeros((len(X), 2 * D))
    wide[:, ::2] = X  # strided views of the same numbers
    forms: list[Callable[[int], Any]] = [
        lambda i: X[i].tolist(), lambda i: wide[i, ::2],
        lambda i: X[i].astype(">f8"), lambda i: X[i].copy(),
    ]
    if X.astype(np.float32).astype(np.float64).tobytes() == X.tobytes():  # exact in float32
        forms.append(lambda i: X[i].astype(np.float32))
    for k, form in enumerate(forms):
        m = new(name, params)
        got = np.empty(len(X))
        for i in range(len(X)):
            x = form(i) if (i + k) % 2 else X[i]  # the lanes alternate
            if i % 3:
                got[i] = m.step(x, y[i])
            else:
                got[i] = m.predict_one(x)
                m.learn_one(form(i) if (i + k) % 2 == 0 else X[i], y[i])
        assert_scores_equal(got, ref_scores, f"rows of form {k} mixed with contiguous rows")
        assert_states_equal(m.get_state(), ref_state, f"rows of form {k}: final state")
    m = new(name, params)
    run_steps(m, X[:50], y[:50])
    before = m.get_state()
    for bad in (np.full(D, np.nan), np.full(D + 1, 1.0), np.full(D - 1, 1.0)):
        expect_error(partial(m.step, bad, y[50]), r"nan|finite|feature", f"step, x={bad!r}")
        expect_error(partial(m.predict_one, bad), r"nan|finite|feature", f"predict_one, x={bad!r}")
    expect_error(partial(m.step, X[50], 0.5 if m.task == "classification" else np.nan),
                 r"label|target|finite", "step, bad label with a contiguous row")
    assert_states_equal(m.get_state(), before, "rejected rows changed the learner")


def state_rows(state: dict[str, np.ndarray], d: int) -> int:
    """Rows of ``d`` features a state holds (stores, buffers, reservoirs; not a random-feature
    projection ``…omega``, which has ``d`` columns too)."""
    return sum(v.shape[0] for k, v in state.items()
               if v.ndim == 2 and v.shape[1] == d and not k.endswith("omega"))


def check_bounded_memory(name: str, params: dict[str, Any]) -> None:
    """Budgeted learners: n_support_vectors ≤ bound every round of a long noisy stream; the
    rows the state holds stay within :meth:`~kernelstream.learners.base.Learner.stored_rows`
    of the rounds so far (what the memory estimate counts: SkeGD's sketch rows grow with the
    stream, as that bound says); and the serialised state stops growing once the budget is
    full, but for the rows that bound lets it add."""
    m = new(name, params)
    bound = m.memory_bound()
    X, y = stream_for(m, N_LONG, noise=0.3, seed=3)
    D = X.shape[1]
    sizes: dict[int, int] = {}
    for i in range(N_LONG):
        m.step(X[i], y[i])
        if bound is not None:
            nsv = m.n_support_vectors
            assert nsv <= bound, f"round {i + 1}: n_support_vectors={nsv} > bound {bound}"
        if (i + 1) % 100 == 0 or i + 1 == N_LONG:
            st = m.get_state()
            rows, most = state_rows(st, D), m.stored_rows(i + 1)
            assert most is not None and rows <= most, (
                f"round {i + 1}: the state holds {rows} rows, stored_rows({i + 1}) = {most}")
            if i + 1 in (N_LONG // 2, N_LONG):
                sizes[i + 1] = len(state_to_bytes(st))
    half, end = sizes[N_LONG // 2], sizes[N_LONG]
    grow = int(m.stored_rows(N_LONG) or 0) - int(m.stored_rows(N_LONG // 2) or 0)
    slack = max(1024, half // 50) + 8 * (D + 2) * grow
    assert end <= half + slack, f"state grows: {half} bytes at {N_LONG // 2}, {end} at {N_LONG}"


def check_first_prediction(name: str, params: dict[str, Any]) -> None:
    """First score is 0; a zero score follows the tie rule (``positive``: predict +1)."""
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

