"""Speed of every registered learner against the bare kernel-row cost it cannot avoid.

For each learner: rounds per second of ``predict_learn_many`` over the first ``--rows`` rows of
a fixed permutation of a9a (budgeted learners at ``--budget``, NOGD with rank ``0.1·B``, FOGD
with ``D = 4B`` random features), and, interleaved with it in the same run, the *floor*: one
Gaussian row and score per round against ``B`` stored points, computed by the same compiled
row the learners use, in a compiled loop over the rows (numpy's ``Gaussian(γ).row`` in a Python
loop when the compiled kernels are not built; FOGD: the random-feature map ``z(x)`` at its
``D``; RFF-RLS, at ``D = B`` frequencies: that map plus its ``O(D²)`` update done by the
reference library, BLAS's packed symmetric ``u = P z`` and rank-1 ``P -= r u uᵀ``
(``dspmv`` + ``dspr`` through scipy, one thread) on ``D(2D+1)`` doubles per round, where the
learner fuses both into one pass; ``--param`` sets other ``D``). Learner and
floor are timed alternately ``--repeats`` times and the medians are compared, which cancels
most of the noise of a shared machine. The target is learner/floor ≤ 1.5 for every budgeted
single-kernel learner at B = 200, FOGD and RFF-RLS (fixed memory) included (issue 14; 2.5
before their updates were compiled);
PASS/FAIL lines say whether it is met, for all of them and
for the budget baselines (RBP, Forgetron, Projectron(++), BPA-S, BOGD, NOGD, FOGD; the script always
exits 0). Unbudgeted learners run on ``--unbudgeted-rows`` rows and their floor (at the final #SV)
is shown but not judged.

Multi-kernel learners (K kernel expansions) are judged against their *union-row floor*: per
round, one squared-distance row to ``n`` points (``n`` = the learner's union of support
vectors at the end of the run: its distinct stored points), then for each of its K kernels
the ``n`` exponentials and the dot with ``n`` coefficients, by the compiled row and
exponential the learners use (``_ck_multi.floor_scores``), in a compiled loop. Target:
learner/floor ≤ 2 (``MULTI_TARGET``), timed alternately like the others (unbudgeted ones
``--multi-repeats`` times). The random-feature learners (raker, rf-*) keep no support vectors
and proj-ka is one Projectron after its selection pass: no union row (n/a).

With ``--pre-issue COMMIT`` (default 6ab0a3a, the code before issue 14; ``''`` skips it),
ea2oks and omkc-dd (``SPEEDUP_LEARNERS``) are also timed on that commit's ``kernelstream/`` in
a child process (``python -P``, asserting it imports the old code; benchmarks/peers.py's
mechanism) over the first ``--speedup-rows`` rows, alternating with today's code
``--speedup-repeats`` times; the ratio of the medians is judged against ≥ 2×.

The Projectrons carry a cost the row floor does not: every update at the budget needs the
projection ``d = K⁻¹k`` (and ``kᵀd``), a pass over the ``B × B`` inverse (320 kB at B = 200)
in a fixed order, so results stay bit-identical, which reads every entry; Projectron++ skips
the margin errors its bound proves cannot update (on a9a nearly all of them). For them the
*projection floor* is measured too, by their own compiled code: the block driver on the
trained learner with every label 0 (``y f = 0`` counts as a mistake, and ``a += 0·d`` changes
nothing), alternating with the learner; one projection costs that minus the row floor, and the
row + projection floor of a learner is the row floor plus one projection per round that
cannot do without it: its mistakes and its margin errors that update (counted by an untimed
per-example pass). Their ratio to the row floor is judged like the others'; the table after
the verdicts says how much of it the projections take.

The *per-example path* (issue 28): every budgeted learner is also timed row by row, ``step``
per row of the same rows on a fresh learner, alternating with its block run; the scores must
equal the block's bit for bit (checked on every repeat). The rate of ``step`` against the
block's is judged against ≥ ``PER_EXAMPLE_TARGET`` (0.5). The floors of that path are shown
below the table: a Python loop calling a method that does nothing, one compiled call with a
single buffer (``‖x‖²`` of the row) and the compiled kernel row against one stored point (the
call's fixed cost, with the argument handling of a learner's score).

A timing too short to mean anything gets no verdict (*too short*, with the reason, and a
WARNING line): a pass under 15 ms; an ok when the budget was not full within the first quarter
of the rows (rounds against fewer points are cheaper than the floor's); a FAIL when the pass
was more than half one-off cost (estimated from a pass over the first quarter of the rows,
timed alongside). benchmarks/_verdicts.py says why these bounds. Quick mode (a few minutes;
what it cannot judge says so)::

    .venv/bin/python benchmarks/learners.py --rows 10000 --repeats 3 --unbudgeted-rows 1000 \
        --multi-repeats 1 --pre-issue ''

The markdown goes to stdout (progress to stderr); ``benchmarks/results/learners_speed.md`` is
made by::

    .venv/bin/python benchmarks/learners.py --rows 20000 --budget 200 \
        > benchmarks/results/learners_speed.md
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
import numpy as np
from _common import load_dataset
from _floors import (
    per_example_floors,
    time_floor,
    time_projection_run,
    time_row_floor,
    time_union_floor,
    union_shape,
)
from _verdicts import (
    MAX_FILL_FRACTION,
    MAX_FIXED_SHARE,
    MIN_PASS_SECONDS,
    TOO_SHORT,
    first_full_round,
    fixed_cost,
    timing_too_short,
)

from kernelstream import learners
from kernelstream.errors import ConfigError
from kernelstream.pipelines.config import parse_param_spec
from kernelstream.seeding import learner_seed, permutation

TARGET = 1.5  # budgeted single-kernel learners: learner/floor at B = 200
GAMMA = 0.4  # P4's a9a setting; only the unbudgeted learners' #SV depends on it
PER_EXAMPLE_TARGET = 0.5  # issue 28: step's examples/s ≥ 0.5 × the block path's
MULTI_TARGET = 2.0  # issue 14: multi-kernel learners ≤ 2× their union-row floor
SPEEDUP_TARGET = 2.0  # issue 14: ea2oks and omkc-dd ≥ 2× the pre-issue commit
SPEEDUP_LEARNERS = ("ea2oks", "omkc-dd")
PRE_ISSUE = "6ab0a3a"
NO_UNION = {"raker": "random features", "rf-oks": "random features",
            "rf-oks++": "random features", "rf-ioks": "random features",
            "proj-ka": "one Projectron after selection"}


# the random-feature learners of one kernel: (floor kind, D per unit of budget). FOGD at D = 4B
# (issue 14's setting); RFF-RLS at D = B (its default 200 at B = 200: a round is O(D²))
RFF_FLOORS = {"fogd": ("rff", 4), "rff-rls": ("rls", 1)}
PROJECTRONS = ("projectron", "projectron++")  # a projection floor is measured for them
# budgeted learners whose rounds run compiled only in blocks: the floor of a per-row path on
# their block driver
BASELINES = ("rbp", "forgetron", "projectron", "projectron++", "bpa-s", "bogd", "nogd", "fogd")


def learner_config(name: str, budget: int, extra: dict[str, Any] | None = None) -> tuple[
        dict[str, Any], str, int | None]:
    """(params, floor kind, floor size) of a learner. Kinds: "row" = one Gaussian row
    against ``size`` points (None: its final #SV), "rff" = feature map with ``size``
    frequencies, "rls" = that map plus one pass over RFF-RLS's packed ``P`` (``size``
    frequencies), "n/a" = multi-kernel learners (no single-row floor). ``extra``: parameters
    that override these (``--param``), ``n_components`` included."""
    cls = learners.get(name)
    pnames = {p.name for p in cls.params}
    params: dict[str, Any] = {}
    if "gamma" in pnames:
        params["gamma"] = GAMMA
    if name in RFF_FLOORS:  # fixed memory: D frequencies, no stored rows
        params["n_components"] = RFF_FLOORS[name][1] * budget
        params.update(extra or {})
        return params, RFF_FLOORS[name][0], int(params["n_components"])
    if name in ("nogd", "skegd"):
        params["rank"] = max(1, budget // 10)
    kind = "row" if "gamma" in pnames else "n/a"
    params.update(extra or {})
    if "budget" in pnames and cls().memory_bound() is not None:
        params.setdefault("budget", budget)
        return params, kind, int(params["budget"])
    return params, kind, None


def time_learner(name: str, params: dict[str, Any], Xp: np.ndarray, yp: np.ndarray) -> tuple[
        float, int]:
    t, m = time_learner_model(name, params, Xp, yp)
    return t, int(m.n_support_vectors)


def time_learner_model(name: str, params: dict[str, Any], Xp: np.ndarray,
                       yp: np.ndarray) -> tuple[float, Any]:
    """Seconds of one ``predict_learn_many`` pass, and the learner after it."""
    t, m, _ = time_learner_scores(name, params, Xp, yp)
    return t, m


def time_learner_scores(name: str, params: dict[str, Any], Xp: np.ndarray,
                        yp: np.ndarray) -> tuple[float, Any, np.ndarray]:
    """:func:`time_learner_model` with the pass's scores."""
    m = learners.make(name, seed=learner_seed(0, 0, name), **params)
    t0 = time.perf_counter()
    scores = m.predict_learn_many(Xp, yp)
    return time.perf_counter() - t0, m, scores


def time_steps(name: str, params: dict[str, Any], Xp: np.ndarray, yp: np.ndarray,
               block_scores: np.ndarray) -> float:
    """Seconds of ``step`` on every row of ``Xp`` in turn (a fresh learner); raises when a
    score differs from the block path's ``block_scores`` (they must be bit-identical)."""
    m = learners.make(name, seed=learner_seed(0, 0, name), **params)
    step = m.step
    out = np.empty(len(yp))
    rows = list(Xp)  # row views made before the clock starts, as a caller holds its rows
    labels = yp.tolist()
    t0 = time.perf_counter()
    for i, x in enumerate(rows):
        out[i] = step(x, labels[i])
    t = time.perf_counter() - t0
    if not np.array_equal(out, block_scores):
        bad = int(np.flatnonzero(out != block_scores)[0])
        raise RuntimeError(f"{name}: step's score of row {bad} differs from the block path's")
    return t


def pre_issue_speedups(a: Any, X: np.ndarray, y: np.ndarray,
                       perm: np.ndarray) -> list[tuple[str, int, float, float]]:
    """``(learner, rows, µs/round today, µs/round at --pre-issue)`` of ``SPEEDUP_LEARNERS``,
    medians of ``--speedup-repeats`` alternating runs (benchmarks/peers.py's child process)."""
    import subprocess
    import tempfile

    from peers import run_pre_issue

    n = min(len(perm), a.speedup_rows)
    Xp, yp = np.ascontiguousarray(X[perm[:n]]), y[perm[:n]]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        arch = subprocess.run(["git", "archive", a.pre_issue, "kernelstream"],
                              cwd=_common.REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=arch, check=True)
        for name in SPEEDUP_LEARNERS:
            params, _, _ = learner_config(name, a.budget)
            now: list[float] = []
            old: list[float] = []
            for _ in range(max(1, a.speedup_repeats)):
                now.append(time_learner(name, params, Xp, yp)[0])
                v = run_pre_issue(Path(tmp), Xp, yp,
                                  [(name, learner_seed(0, 0, name), params)]).get(name)
                if not isinstance(v, (int, float)):
                    raise RuntimeError(f"{name} at {a.pre_issue}: {v}")
                old.append(float(v))
            out.append((name, n, 1e6 * statistics.median(now) / n,
                        1e6 * statistics.median(old) / n))
            print(f"  {name}: {out[-1][2]:.1f} us/round, {a.pre_issue}: {out[-1][3]:.1f}, "
                  f"speedup {out[-1][3] / out[-1][2]:.2f}", file=sys.stderr, flush=True)
    return out


def projection_rounds(name: str, params: dict[str, Any], Xp: np.ndarray,
                      yp: np.ndarray) -> float:
    """Fraction of a Projectron(++)'s rounds that cannot do without the projection ``d = K⁻¹k``:
    the mistakes and the margin errors that update (an untimed per-example pass, which checks
    whether a round changed the coefficients)."""
    m: Any = learners.make(name, seed=learner_seed(0, 0, name), **params)
    need = 0
    for i in range(len(yp)):
        sv = getattr(m, "sv", None)  # made at the first round
        before = sv.a[:sv.n].copy() if sv is not None else np.empty(0)
        s = m.step(Xp[i], yp[i])
        if yp[i] * s <= 0.0 or not np.array_equal(before, m.sv.a[:len(before)]):
            need += 1
    return need / len(yp)


def parse_params(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """``--param LEARNER.KEY=VALUE`` items as {learner: {key: value}}: the CLI's
    ``-p LABEL.key=value`` (``parse_param_spec``) with the learner's name as the label, each
    value typed by the learner's declaration of it (``sigma`` given as ``gamma``)."""
    given: dict[str, dict[str, str]] = {}
    for it in items or []:
        try:
            scope, key, value = parse_param_spec(it)
        except ConfigError:
            scope = None
        if scope is None:
            raise SystemExit(f"--param {it!r}: expected LEARNER.KEY=VALUE, e.g. "
                             "rff-rls.n_components=500")
        given.setdefault(scope, {})[key] = value
    out: dict[str, dict[str, Any]] = {}
    for name, kv in given.items():
        try:
            typed = learners.get(name).resolve_params(kv)
        except ValueError as exc:
            raise SystemExit(f"--param: {exc}") from None
        out[name] = {k: typed[k] for k in ("gamma" if k == "sigma" else k for k in kv)}
    return out


def budget_fill(name: str, params: dict[str, Any], Xp: np.ndarray, yp: np.ndarray) -> int:
    """The round at which the learner's #SV first reached its budget on these rows (-1: never;
    an untimed pass)."""
    m = learners.make(name, seed=learner_seed(0, 0, name), **params)
    n_sv = np.zeros(len(yp), dtype=np.int64)
    m.predict_learn_many(Xp, yp, n_sv=n_sv)
    return first_full_round(n_sv, int(params["budget"]))


def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__, epilog=False)
    ap.add_argument("--dataset", default="a9a", help="benchmark dataset (default a9a)")
    ap.add_argument("--rows", type=int, default=20000,
                    help="rounds per timing of budgeted learners (default 20000)")
    ap.add_argument("--budget", type=int, default=200, help="budget B (default 200)")
    ap.add_argument("--repeats", type=int, default=5,
                    help="alternating learner/floor repeats; medians are reported (default 5)")
    ap.add_argument("--unbudgeted-rows", type=int, default=5000,
                    help="rounds for unbudgeted learners, which are slow (default 5000)")
    ap.add_argument("--unbudgeted-repeats", type=int, default=1,
                    help="repeats for unbudgeted learners, which are slow (default 1)")
    ap.add_argument("--learners", default="",
                    help="comma-separated learner names (default: every registered learner)")
    ap.add_argument("--multi-repeats", type=int, default=3,
                    help="repeats for unbudgeted multi-kernel learners (default 3)")
    ap.add_argument("--pre-issue", default=PRE_ISSUE,
                    help="commit whose ea2oks/omkc-dd to time too (default %(default)s; '' "
                         "skips it)")
    ap.add_argument("--speedup-rows", type=int, default=5000,
                    help="rows of the pre-issue comparison (default 5000)")
    ap.add_argument("--speedup-repeats", type=int, default=3,
                    help="alternating today/pre-issue runs (default 3)")
    ap.add_argument("--param", action="append", metavar="LEARNER.KEY=VALUE",
                    help="a learner's parameter (repeatable), e.g. rff-rls.n_components=500 "
                         "(the floor follows D)")
    a = ap.parse_args(argv)
    prov = _common.provenance("learners.py", sys.argv[1:] if argv is None else argv)
    extra = parse_params(a.param)

    names = [s for s in a.learners.split(",") if s] or learners.available()
    X, y = load_dataset(a.dataset, a.data_dir)
    perm = permutation(X.shape[0], 0, 0)
    print(f"# learner speed vs kernel-row floor — {a.dataset}, B={a.budget}, gamma={GAMMA}; "
          f"{_common.now_utc()}; {_common.machine_info()}")
    print()
    print(_common.provenance_line(prov))
    speedups = pre_issue_speedups(a, X, y, perm) if a.pre_issue else []
    rows: list[tuple[str, str, int, float, float, float, str]] = []
    step_us: dict[str, float] = {}  # budgeted learners: step's µs per row
    proj_rows: list[tuple[str, float, float, float, float]] = []
    failed: list[str] = []
    too_short: dict[str, str] = {}  # learners whose timing cannot be judged, and why
    for name in names:
        try:
            params, kind, size = learner_config(name, a.budget, extra.get(name))
            bounded = size is not None
            n = min(len(perm), a.rows if bounded else a.unbudgeted_rows)
            Xp, yp = np.ascontiguousarray(X[perm[:n]]), y[perm[:n]]
            reps = a.repeats if bounded else (
                a.multi_repeats if kind == "n/a" else a.unbudgeted_repeats)
            tl: list[float] = []
            tf: list[float] = []
            tp: list[float] = []
            ts: list[float] = []
            tq: list[float] = []  # the first quarter of the rows: the pass's one-off cost
            nsv = 0
            shape = None
            for _ in range(max(1, reps)):  # alternate learner / floor
                t, model, scores = time_learner_scores(name, params, Xp, yp)
                nsv = int(model.n_support_vectors)
                tl.append(t)
                tq.append(time_learner_scores(name, params, Xp[:n // 4], yp[:n // 4])[0])
                if bounded:  # the per-example path on the same rows, same results
                    ts.append(time_steps(name, params, Xp, yp, scores))
                if kind in ("rff", "rls"):
                    tf.append(time_floor(kind, Xp, int(size or 1), float(params["gamma"])))
                elif kind == "row":
                    nb = size if size is not None else nsv
                    tf.append(time_row_floor(Xp, Xp[:nb], GAMMA) if nb else math.nan)
                    if name in PROJECTRONS and bounded:
                        tp.append(time_projection_run(model, Xp))
                elif name not in NO_UNION:
                    shape = union_shape(model)
                    if shape is not None and shape[0]:
                        tf.append(time_union_floor(Xp, *shape))
            fill = budget_fill(name, params, Xp, yp) if "budget" in params else None
        except Exception as e:  # a learner that fails is reported, not fatal
            print(f"{name}: ERROR {type(e).__name__}: {e}", file=sys.stderr)
            failed.append(name)
            continue
        us = 1e6 * statistics.median(tl) / n
        fus = 1e6 * statistics.median(tf) / n if tf else math.nan
        ratio = us / fus if fus > 0 else math.nan
        limit = MULTI_TARGET if kind == "n/a" else TARGET
        short = timing_too_short(statistics.median(tl), n, fill,
                                 fixed_cost(statistics.median(tl), statistics.median(tq)),
                                 over=bool(ratio > limit) if ratio == ratio else None)
        if kind == "n/a" and shape is not None and tf:
            bud = (str(size) if bounded else "none") + f" (union {shape[0]}, K={len(shape[1])})"
            flag = (f"FAIL (> {MULTI_TARGET:g}× union floor)" if ratio > MULTI_TARGET
                    else f"ok (≤ {MULTI_TARGET:g}× union floor)")
        elif kind == "n/a":
            bud = str(size) if bounded else "none"
            flag = f"n/a (multi-kernel: {NO_UNION.get(name, 'no union row')})"
        elif bounded:
            bud = f"D={size}" if kind in ("rff", "rls") else str(size)
            if "rank" in params:
                bud += f" (k={params['rank']})"
            flag = "FAIL" if ratio > TARGET else "ok"
        else:
            bud = f"none (#SV {nsv})"
            flag = "n/a (unbudgeted; floor at final #SV)"
        if short and (flag in ("ok", "FAIL") or "union floor" in flag):
            flag = f"{TOO_SHORT} ({short})"  # no verdict: the timing does not measure a round
            too_short[name] = short
        rows.append((name, bud, n, us, fus, ratio, flag))
        if ts:
            step_us[name] = 1e6 * statistics.median(ts) / n
        if tp and not math.isnan(statistics.median(tp)):
            proj_rows.append((name, projection_rounds(name, params, Xp, yp),
                              1e6 * statistics.median(tp) / n - fus, fus, us))
        print(f"  {name}: {us:.1f} us/round, floor {fus:.1f} us/round, ratio {ratio:.2f}"
              + (f", step {step_us[name]:.1f} us/row" if name in step_us else "")
              + (f"; TOO SHORT to judge: {short}" if name in too_short else ""),
              file=sys.stderr, flush=True)

    print()
    print(f"| learner | budget | rounds | µs/round | floor µs/round | ratio | ≤ {TARGET}× | "
          f"step µs/row | step / block ex/s | ≥ {PER_EXAMPLE_TARGET}× |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---|")
    for name, bud, n, us, fus, ratio, flag in rows:
        f = "–" if math.isnan(fus) else f"{fus:.1f}"
        r = "–" if math.isnan(ratio) else f"{ratio:.2f}"
        sus = step_us.get(name)
        if sus is None:
            st = "– | – | –"
        else:
            mark = (TOO_SHORT if name in too_short
                    else _common.pass_mark(us / sus >= PER_EXAMPLE_TARGET))
            st = f"{sus:.1f} | {us / sus:.2f} | {mark}"
        print(f"| {name} | {bud} | {n} | {us:.1f} | {f} | {r} | {flag} | {st} |")
    print()
    if failed:
        print(f"ERRORS: {', '.join(failed)}")
    if too_short:
        warn = (f"WARNING: {len(too_short)} timing(s) too short to judge, no verdict: "
                + "; ".join(f"{k} ({v})" for k, v in too_short.items())
                + f". A pass must last ≥ {1e3 * MIN_PASS_SECONDS:.0f} ms; an ok needs the "
                f"budget full within the first {100 * MAX_FILL_FRACTION:.0f} % of the rows, a "
                f"FAIL a pass at most {100 * MAX_FIXED_SHARE:.0f} % one-off cost: more --rows.")
        print(warn)
        print(warn, file=sys.stderr)
    others = [r[0] for r in rows if r[6] in ("ok", "FAIL") and r[0] not in BASELINES]
    every = "every budgeted single-kernel learner" + (
        f" (the baselines and {', '.join(others)})" if others else "")
    for label, pool in ((every, None),
                        ("the budget baselines, the budgeted learners of issue 2", BASELINES)):
        judged = [r for r in rows if r[6] in ("ok", "FAIL") and (pool is None or r[0] in pool)]
        bad = [r[0] for r in judged if r[6] == "FAIL"]
        if not judged:
            if any(k in too_short for k in (pool or too_short)):
                print(f"NO VERDICT ({label}): no timing long enough to judge")
            continue
        verdict = "FAIL" if bad else "PASS"
        detail = f": over {TARGET}x: {', '.join(bad)}" if bad else ""
        print(f"{verdict} ({label}): {len(judged) - len(bad)}/{len(judged)} within {TARGET}x the "
              f"kernel-row floor at B={a.budget}{detail}")
    judged_steps = {k: v for k, v in step_us.items() if k not in too_short}
    if judged_steps:
        us_of = {r[0]: r[3] for r in rows}
        slow = [f"{k} ({us_of[k] / v:.2f})" for k, v in judged_steps.items()
                if us_of[k] / v < PER_EXAMPLE_TARGET]
        print(f"{'FAIL' if slow else 'PASS'} (per-example path, every budgeted learner"
              + (" not too short" if too_short else "") + "): "
              f"{len(judged_steps) - len(slow)}/{len(judged_steps)} with step ≥ "
              f"{PER_EXAMPLE_TARGET}x the "
              f"block path's examples/s, scores bit-identical" +
              (f"; below: {', '.join(slow)}" if slow else ""))
    multi = [r for r in rows if "union floor" in r[6]]
    if multi:
        bad = [f"{r[0]} ({r[5]:.2f})" for r in multi if r[6].startswith("FAIL")]
        print(f"{'FAIL' if bad else 'PASS'} (multi-kernel learners with a union row): "
              f"{len(multi) - len(bad)}/{len(multi)} within {MULTI_TARGET:g}x their union-row "
              f"floor" + (f": over: {', '.join(bad)}" if bad else ""))
    if step_us:
        print()
        print("Floors of the per-example path (µs per call, best of 5 passes over the rows):")
        print()
        for what, v in per_example_floors(X, GAMMA):
            print(f"- {what}: {v:.2f} µs")
    if proj_rows:
        print()
        print(f"Projection floor ({', '.join(r[0] for r in proj_rows)}): every update at the "
              f"budget needs d = K⁻¹k and kᵀd, one pass over the {a.budget}×{a.budget} inverse "
              f"({8 * a.budget * a.budget // 1000} kB) in a fixed order (results bit-identical "
              "to the reference), which reads every entry: no exact shortcut. Its cost by the "
              "learners' compiled code (the block driver on the trained learner with every "
              "round a projection, minus the row floor, alternating with the others), and the "
              "floor of row + one projection per round that needs it (the mistakes, and "
              "Projectron++'s margin errors that update; the margin errors its bound cannot "
              "prove idle are projected too, and not counted here):")
        print()
        print("| learner | rounds needing a projection | projection µs | projection / row floor | "
              "row + projection floor µs/round | learner / that floor |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, rate, pus, fus, us in proj_rows:
            pf = fus + rate * pus
            print(f"| {name} | {100 * rate:.1f}% | {pus:.1f} | {pus / fus:.2f} | {pf:.1f} | "
                  f"{us / pf:.2f} |")
    if a.pre_issue and speedups:
        print()
        print(f"Speed-up over commit {a.pre_issue} (a9a, first {speedups[0][1]} rows of "
              f"permutation 0, default parameters; medians of {a.speedup_repeats} alternating "
              f"runs, the old code in a child process):")
        print()
        print(f"| learner | rows | µs/round | {a.pre_issue} µs/round | speed-up | "
              f"≥ {SPEEDUP_TARGET:g}× |")
        print("|---|---:|---:|---:|---:|---|")
        for name, n, now, old in speedups:
            print(f"| {name} | {n} | {now:.1f} | {old:.1f} | {old / now:.2f} | "
                  f"{_common.pass_mark(old / now >= SPEEDUP_TARGET)} |")
    print()
    print(f"Load average (1/5/15 min) at the end: {_common.load_average()} (at the start: "
          f"{prov['load_start']}).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
