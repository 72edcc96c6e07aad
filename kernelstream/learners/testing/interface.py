"""Conformance checks of what a learner declares and what it accepts: its metadata and
documented parameters, clear errors for bad parameters and bad rows (the learner left
unchanged), and sparse rows (CSR) learnt as their dense equal.

These check the learner's interface, apart from the checks of its dynamics over a stream
(:mod:`~kernelstream.learners.testing.trajectory`); the suite that runs both is
:mod:`kernelstream.learners.testing`.
"""

from __future__ import annotations

import math
import pickle
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from kernelstream.errors import WidthError
from kernelstream.learners import registry
from kernelstream.learners.base import Learner, Param, state_from_bytes, state_to_bytes
from kernelstream.learners.registry import check_width
from kernelstream.learners.testing.support import (
    N_LONG,
    D,
    N,
    assert_scores_equal,
    assert_states_equal,
    expect_error,
    new,
    run_steps,
    stream_for,
)
from kernelstream.sparse import CSR


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
    bound = new(name, params).memory_bound()
    assert bound is None or (isinstance(bound, int) and bound >= 0), (
        f"memory_bound() must be None or an int >= 0, got {bound!r}")
    m = new(name, params)
    if m.draws_in_predict:
        assert m.randomized, "draws_in_predict is True but randomized is False"
    assert repr(m).startswith(type(m).__name__), f"repr {repr(m)!r}"


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
        expect_error(partial(fresh.predict_one, bad), r"nan|finite|feature|1-d|shape",
                     f"first x={bad!r}")
        expect_error(partial(fresh.learn_one, bad, y[0]), r"nan|finite|feature|1-d|shape",
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
    xs["huge finite x"] = np.full(D, 1e60)  # ‖x‖² finite, above every learner's input bound
    cases: list[tuple[str, Callable[[], Any], str]] = []
    for what, bx in xs.items():
        cases += [
            (f"predict_one, {what}", partial(m.predict_one, bx), r"nan|finite|overflow"),
            (f"learn_one, {what}", partial(m.learn_one, bx, 1.0), r"nan|finite|overflow"),
            (f"step, {what}", partial(m.step, bx, 1.0), r"nan|finite|overflow"),
        ]
        blk = X[60:70].copy()
        blk[4] = bx
        cases.append((f"predict_learn_many, {what} in row 4",
                      partial(m.predict_learn_many, blk, y[60:70]), r"nan|finite|overflow|row"))
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
        ("learn_one, label '1'", lambda: m.learn_one(x0, "1"), r"label|target|number"),
        ("learn_one, label True", lambda: m.learn_one(x0, True), r"label|target|number"),
        ("predict_learn_many, labels as strings",
         lambda: m.predict_learn_many(X[60:62], [str(v) for v in y[60:62]]), r"label"),
        ("predict_one, x 'ab'", lambda: m.predict_one("ab"), re.escape(name)),
        ("predict_one, complex x", lambda: m.predict_one(x0 + 1j), re.escape(name)),
        ("learn_one, ragged x", lambda: m.learn_one([1.0, [2.0, 3.0]] + [0.0] * (D - 2), 1.0),
         re.escape(name)),
        ("predict_learn_many, ragged X",
         lambda: m.predict_learn_many([list(X[60]), list(X[61][:-1])], y[60:62]),
         re.escape(name)),
        ("predict_learn_many, n_sv too short (checked before any row)",
         lambda: m.predict_learn_many(X[60:70], y[60:70], n_sv=np.empty(3, dtype=np.int64)),
         r"n_sv"),
        ("predict_one, 1-row CSR with float indices",
         lambda: m.predict_one(CSR(np.array([0, 2]), np.array([0.0, 1.0]), np.ones(2), D)),
         re.escape(name)),
        ("predict_one, 1-row CSR with indices and values of different lengths",
         lambda: m.predict_one(CSR(np.array([0, 2]), np.array([0, 1]), np.ones(3), D)),
         re.escape(name)),
    ]
    if task == "classification":
        for lab in (0.0, 2.0, 0.5, np.nan, -1.0000001):
            cases.append((f"learn_one, label {lab}", partial(m.learn_one, x0, lab), r"label"))
            cases.append((f"step, label {lab}", partial(m.step, x0, lab), r"label"))
        yb = y[60:70].copy()
        yb[3] = 0.0
        cases.append(("predict_learn_many, label 0 in block",
                      lambda: m.predict_learn_many(X[60:70], yb), r"label"))
    else:
        for lab in (np.nan, np.inf, 1e200):
            cases.append((f"learn_one, target {lab}", partial(m.learn_one, x0, lab),
                          r"target|finite|label"))
        yb = y[60:70].copy()
        yb[3] = np.nan
        cases.append(("predict_learn_many, NaN target in block",
                      lambda: m.predict_learn_many(X[60:70], yb), r"target|finite|label"))
    for what, fn, pat in cases:
        with np.errstate(over="ignore"):  # the overflowing x warns before it is rejected
            expect_error(fn, pat, what)
        assert_states_equal(m.get_state(), before, f"{what}: state changed")
    bad_seeds: tuple[Any, ...] = (1.5, None, -1, "12", True)
    for seed in bad_seeds:
        expect_error(partial(registry.make, name, seed=seed, **params), rf"{re.escape(name)}.*seed",
                     f"seed={seed!r}")
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
            expect_error(partial(new, name, {**params, p.name: "abc"}), re.escape(p.name),
                         f"{p.name}='abc'")
            expect_error(partial(new, name, {**params, p.name: [1]}), re.escape(p.name),
                         f"{p.name}=[1]")
            if p.type is float:
                expect_error(partial(new, name, {**params, p.name: float("nan")}),
                             re.escape(p.name), f"{p.name}=nan")
            if p.type is int:
                expect_error(partial(new, name, {**params, p.name: 2.5}), re.escape(p.name),
                             f"{p.name}=2.5")
            if p.check is not None and not p.check(-1):
                expect_error(partial(new, name, {**params, p.name: -1}), re.escape(p.name),
                             f"{p.name}=-1")
        if p.choices is not None:
            expect_error(partial(new, name, {**params, p.name: "bogus"}), re.escape(p.name),
                         f"{p.name}='bogus'")
        if p.type is bool:
            expect_error(partial(new, name, {**params, p.name: "maybe"}), re.escape(p.name),
                         f"{p.name}='maybe'")
    if "budget" in ps:
        for v in (-5, 0, 2.5, "x"):
            expect_error(partial(new, name, {**params, "budget": v}), r"budget", f"budget={v!r}")
    nog = {k: v for k, v in params.items() if k != "gamma"}
    if "gamma" in ps:
        a = new(name, {**nog, "sigma": 2.0})
        b = new(name, {**nog, "gamma": 0.125})
        gamma = a.hparams["gamma"]
        assert math.isclose(gamma, 0.125, rel_tol=1e-15), f"sigma=2 gave gamma={gamma}"
        X, y = stream_for(a, 100)
        assert_scores_equal(run_steps(a, X, y), run_steps(b, X, y), "sigma=2 vs gamma=1/8")
        for bad in (-1.0, 0.0, float("nan"), "abc"):
            expect_error(partial(new, name, {**nog, "sigma": bad}), r"sigma",
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


def _check_odd_csr_arrays(name: str, params: dict[str, Any], C: CSR, y: np.ndarray) -> None:
    """CSR rows with int32 indices and float32 data, as strided views (valid CSR) learn as
    the float64 rows of the same values: converted once at the input, not summed in float32
    (or wrapped in int64) and not refused by the compiled kernels after a half round."""
    v32 = C.data.astype(np.float32)
    ref = CSR(C.indptr, C.indices, v32.astype(np.float64), C.n_features)
    odd = CSR(C.indptr.astype(np.int32), np.repeat(C.indices.astype(np.int32), 2)[::2],
              np.repeat(v32, 2)[::2], C.n_features)
    m = new(name, params, seed=3)
    want = m.predict_learn_many(ref, y)
    st = m.get_state()
    for how, fn in (("block", lambda m: m.predict_learn_many(odd, y)),
                    ("steps", lambda m: _csr_steps(m, odd, y))):
        m = new(name, params, seed=3)
        assert_scores_equal(fn(m), want, f"sparse: int32/float32 strided CSR, {how}")
        assert_states_equal(m.get_state(), st, f"sparse: int32/float32 strided CSR, {how}")


def check_sparse_rows(name: str, params: dict[str, Any]) -> None:
    """Sparse input (1-row CSR / CSR blocks): deterministic; predict_learn_many over blocks ==
    predict_one/learn_one == step loop, bit for bit; a state saved mid-stream (sparse SVs
    included, through bytes) and a pickled copy continue bit-identically; a budgeted sparse
    learner's state stops growing; results agree with the same rows given dense (to round-off
    for learners that run sparse, exactly for those that densify); a learner that keeps dense
    rows refuses an enormous width with one line before learning, and a sparse learner runs at
    that width with memory independent of it; int32/float32 strided CSR arrays learn as their
    float64 values; bad sparse input is rejected and leaves the learner unchanged."""
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
    _check_odd_csr_arrays(name, params, C, y)
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
    if ref.memory_bound() is not None and ref.accepts_sparse:  # sparse SVs: state bounded too
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
        msg = expect_error(lambda: w.predict_learn_many(wide, y[:40]), r"would take.*more than",
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

