"""Our budgeted learners beside the KOL (LIBOL/KOL C++ toolbox) figures of issue 14.

Measured in one run, on this machine:

1. Speed. Every budgeted single-kernel learner of the registry (a ``memory_bound()``: FOGD
   and RFF-RLS, fixed memory, included; the kernel-selection / multi-kernel learners, which
   have no single Gaussian row, are listed as excluded) at B = 200, one pass over the first
   ``--rows`` rows of permutation 0
   (:func:`kernelstream.seeding.permutation`) of a9a, magic04, SUSY_30k and w7a, in memory:
   examples/s and µs/round of ``predict_learn_many``, and the ratio to the kernel-row floor
   of ``benchmarks/learners.py`` (one Gaussian row against B = 200 stored points per round,
   ``Gaussian(γ).row``; FOGD: its random-feature map at D = 4B; RFF-RLS: that map at D = B
   plus its update by BLAS, ``dspmv`` + ``dspr`` on its packed P), timed alternately with the
   learner ``--repeats`` times (medians). Gaussian width: the tuned parameters of
   ``experiments/tuned/tuned_params.json`` (P3, kernel-alignment selection) where they cover the
   learner and data set, else γ = 1/mean‖x‖² of the rows used. With ``--pre-issue COMMIT``
   (default 6ab0a3a, the code before issue 14; ``--pre-issue ''`` skips it) the same passes
   also run on that commit's ``kernelstream/`` (``git archive`` into a temporary directory, a
   subprocess with ``PYTHONPATH`` pointing at it), which gives the issue's "≥ 2× the pre-issue
   examples/s" ratio (RFF-RLS is not in that commit: no ratio). KOL has no recursive least
   squares learner, so RFF-RLS has no peer in sections 2 and 4.
2. KOL's figures from the issue, printed as reference only (not re-measured here).
3. End to end: wall time and peak RSS (``RUSAGE_CHILDREN`` of a wrapper process) of
   ``python -m kernelstream.pipelines.cli replay FILE -l bpa-s -p budget=200 --runner R``
   (R = loop, direct) on a9a (the a9a training file) and SUSY_30k, beside the learning seconds
   of the run's summary.json, so the fixed cost (wall − learning) shows.
4. With ``--kol BIN`` (a KOL binary, built from github.com/LIBOL/KOL with Eigen, ``g++ -O2``
   as its CMakeLists; skipped without it): NOGD beside KOL's ``KERNEL-NOGD`` on a9a, magic04
   and SUSY_30k (issue 28: ours ≥ 1.5× KOL's examples/s), the same rows in the same order and
   the same B, rank, γ and steps, alternating one pass of ours and one KOL run ``--repeats``
   times (medians). KOL reads its binary cache (``-c``, written by an untimed first run) and
   its examples/s is the rows over its printed "Learning time"; ours is
   ``predict_learn_many`` on the rows in memory. The load average is recorded beside. A KOL
   run whose mistake rate is more than 5 points above ours did not run the same algorithm:
   *not comparable*, no verdict.

A section-1 timing too short to mean anything (benchmarks/learners.py's rule: a pass under
15 ms; an ok with the budget not full within the first quarter of the rows; a FAIL on a pass
mostly one-off cost)
gets no verdict (*too short*) and a WARNING line; a quick check (``--rows 5000 --repeats 2
--pre-issue '' --no-e2e``) says so where it cannot judge.

Progress goes to stderr; ``benchmarks/results/peers.md`` and ``.json`` are written.

Example::

    .venv/bin/python benchmarks/peers.py --rows 20000
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
import learners as bench_learners  # benchmarks/learners.py: learner_config and the floors
import numpy as np
from _peers_report import (
    BUDGET,
    FLOOR_TARGET,
    KOL_LEARNERS,
    KOL_RATIOS,
    SPEEDUP_SETS,
    render,
)
from _verdicts import fixed_cost, peer_not_comparable, timing_too_short

from kernelstream import data as ksdata
from kernelstream import learners
from kernelstream.experiments.protocol import TUNED_DIR
from kernelstream.learners import compiled
from kernelstream.seeding import learner_seed, permutation

STEM = "peers"
PRE_ISSUE = "6ab0a3a"
FLOOR_NAMES = {"rff": "rff map D=4B", "rls": "rff map D=B + BLAS dspmv/dspr"}
TUNED = TUNED_DIR / "tuned_params.json"

# name -> (loader kind, files, fmt, width, scale)
SETS: dict[str, dict[str, Any]] = {
    "a9a": {"common": True, "note": "a9a + a9a.t merged, 123 features"},
    "magic04": {"file": "magic04.data", "fmt": "csv", "scale": "01", "positive": "g",
                "note": "UCI magic04.data, label g (+1) / h, min-max [0, 1]"},
    "SUSY_30k": {"file": "SUSY_30k.libsvm", "fmt": "libsvm", "scale": "none", "width": 18,
                 "note": "SUSY_30k.libsvm, 18 raw features"},
    "w7a": {"common": True, "note": "w7a training file, 300 features"},
}
E2E_FILES = {"a9a": ("a9a", ["--n-features", "123"]), "SUSY_30k": ("SUSY_30k.libsvm", [])}

_CHILD = r"""
import json, sys, time
import numpy as np
import kernelstream
from kernelstream import learners
assert kernelstream.__file__.startswith(sys.path[0]), kernelstream.__file__  # the old commit
z = np.load(sys.argv[1])
X, y = np.ascontiguousarray(z["X"]), z["y"]
out = {}
for name, seed, params in json.loads(sys.argv[2]):
    try:
        m = learners.make(name, seed=seed, **params)
        t0 = time.perf_counter()
        m.predict_learn_many(X, y)
        out[name] = time.perf_counter() - t0
    except Exception as e:
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""

_WRAPPER = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.call(sys.argv[1:])
wall = time.perf_counter() - t0
print(json.dumps({"rc": rc, "wall": wall,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_set(name: str, data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    d = SETS[name]
    if d.get("common"):
        return _common.load_dataset(name, data_dir)
    X, y = ksdata.load(str(Path(data_dir) / d["file"]), fmt=d["fmt"],
                       n_features=d.get("width"), scale=d["scale"],
                       positive_label=d.get("positive"))
    return np.ascontiguousarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def inverse_mean_sqnorm(X: np.ndarray) -> float:
    """γ = 1/mean‖x‖² (the fallback width)."""
    return 1.0 / float(np.mean(np.einsum("ij,ij->i", X, X)))


def selected_learners() -> tuple[list[str], list[str]]:
    """(budgeted single-kernel learners, excluded budgeted kernel-selection/multi-kernel ones),
    by benchmarks/learners.py's classification (a floor of one Gaussian kernel: a row, or the
    random-feature map of FOGD and RFF-RLS)."""
    keep: list[str] = []
    excluded: list[str] = []
    for name in learners.available():
        if not learners.registry.bounded(name):
            continue
        _, kind, size = bench_learners.learner_config(name, BUDGET)
        (keep if kind != "n/a" and size is not None else excluded).append(name)
    return keep, excluded


def learner_params(name: str, dataset: str, gamma0: float, tuned: dict[str, Any]) -> tuple[
        dict[str, Any], str]:
    params, _, _ = bench_learners.learner_config(name, BUDGET)
    sel = tuned.get("p3", {}).get(dataset, {}).get("selected", {}).get("ka", {}).get(name)
    if sel:
        params.update(sel["params"])
        return params, "tuned"
    if "gamma" in params:
        params["gamma"] = gamma0
    return params, "1/mean‖x‖²"


def run_pre_issue(src: Path, Xp: np.ndarray, yp: np.ndarray,
                  jobs: list[tuple[str, tuple[int, int, int], dict[str, Any]]]) -> dict[
                      str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        npz = Path(tmp) / "stream.npz"
        np.savez(npz, X=Xp, y=yp)
        env = dict(os.environ, PYTHONPATH=str(src))
        # -P: without it `python -c` puts the working directory first on sys.path, and run
        # from the repository the child would time today's code, not the old commit's
        res = subprocess.run([sys.executable, "-P", "-c", _CHILD, str(npz), json.dumps(jobs)],
                             env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        log(f"pre-issue run failed: {res.stderr.strip()[-500:]}")
        return {}
    return json.loads(res.stdout.strip().splitlines()[-1])


def speed(a: Any, tuned: dict[str, Any], names: list[str], pre_src: Path | None) -> list[
        dict[str, Any]]:
    cells: list[dict[str, Any]] = []
    for ds in a.datasets:
        X, y = load_set(ds, a.data_dir)
        perm = permutation(X.shape[0], 0, 0)[: min(a.rows, X.shape[0])]
        Xp, yp = np.ascontiguousarray(X[perm]), y[perm]
        n = len(yp)
        gamma0 = inverse_mean_sqnorm(Xp)
        log(f"{ds}: {n} rows x {X.shape[1]} features, 1/mean|x|^2 = {gamma0:.4g}")
        load0 = os.getloadavg()[0]
        first = len(cells)
        jobs: list[tuple[str, tuple[int, int, int], dict[str, Any]]] = []
        for name in names:
            params, width = learner_params(name, ds, gamma0, tuned)
            _, kind, size = bench_learners.learner_config(name, BUDGET)
            gamma = float(params.get("gamma", gamma0))
            tl: list[float] = []
            tf: list[float] = []
            tp: list[float] = []
            tq: list[float] = []  # the first quarter of the rows: the pass's one-off cost
            nsv = 0
            for _ in range(max(1, a.repeats)):
                t, model = bench_learners.time_learner_model(name, params, Xp, yp)
                nsv = int(model.n_support_vectors)
                tl.append(t)
                tq.append(bench_learners.time_learner_model(name, params, Xp[:n // 4],
                                                            yp[:n // 4])[0])
                if kind in ("rff", "rls"):
                    tf.append(bench_learners.time_floor(kind, Xp, int(size or 1), gamma))
                else:
                    tf.append(bench_learners.time_row_floor(Xp, Xp[:BUDGET], gamma))
                if name in bench_learners.PROJECTRONS:
                    tp.append(bench_learners.time_projection_run(model, Xp))
            us = 1e6 * statistics.median(tl) / n
            fus = 1e6 * statistics.median(tf) / n
            fill = (bench_learners.budget_fill(name, params, Xp, yp) if "budget" in params
                    else None)
            short = timing_too_short(statistics.median(tl), n, fill,
                                     fixed_cost(statistics.median(tl), statistics.median(tq)),
                                     over=us > FLOOR_TARGET * fus)
            cell = {"dataset": ds, "learner": name, "rows": n, "params": params,
                    "width": width, "floor": FLOOR_NAMES.get(kind, f"row B={BUDGET}"),
                    "us_per_round": us, "examples_per_s": 1e6 / us, "floor_us": fus,
                    "ratio_floor": us / fus, "n_sv": nsv, "too_short": short}
            if tp and not math.isnan(statistics.median(tp)):
                cell["projection_us"] = 1e6 * statistics.median(tp) / n - fus
                cell["projection_rounds"] = bench_learners.projection_rounds(name, params, Xp,
                                                                             yp)
            cells.append(cell)
            jobs.append((name, learner_seed(0, 0, name), params))
            log(f"  {ds} {name}: {1e6 / us:,.0f} ex/s, {us:.1f} us/round, floor {fus:.1f}, "
                f"ratio {us / fus:.2f} ({width})" + (f"; TOO SHORT to judge: {short}"
                                                     if short else ""))
        for c in cells[first:]:
            c["load"] = [load0, os.getloadavg()[0]]
        if pre_src is not None:
            log(f"  {ds}: pre-issue {a.pre_issue} ...")
            pre = run_pre_issue(pre_src, Xp, yp, jobs)
            for c in cells:
                if c["dataset"] != ds:
                    continue
                v = pre.get(c["learner"])
                if isinstance(v, (int, float)):
                    c["pre_examples_per_s"] = n / v
                    c["speedup"] = c["examples_per_s"] / c["pre_examples_per_s"]
                    log(f"  {ds} {c['learner']}: pre-issue {n / v:,.0f} ex/s, "
                        f"speedup {c['speedup']:.2f}")
                elif v is not None:
                    c["pre_error"] = v
    return cells


# KOL's parseFloat (src/data/parser.h) gathers all the digits of a value into a 32-bit int:
# ``repr``'s 17 overflow it into garbage (KOL's NOGD then made 64.6 % mistakes on magic04).
# 9 significant digits fit, and round-trip the float32 KOL keeps.
KOL_DIGITS = 9


def write_libsvm(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    """The rows in LIBSVM format for KOL (labels ±1, 1-based indices, the non-zeros, values
    with :data:`KOL_DIGITS` significant digits)."""
    with open(path, "w") as fh:
        for xi, yi in zip(X, y, strict=True):
            nz = np.flatnonzero(xi)
            fh.write(("+1" if yi > 0 else "-1")
                     + "".join(f" {j + 1}:{float(xi[j]):.{KOL_DIGITS}g}" for j in nz) + "\n")


def _kol_run(cmd: list[str]) -> tuple[float, float]:
    """(learning seconds, mistake rate) of one KOL run, from its output."""
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    secs = acc = math.nan
    for line in res.stdout.splitlines():
        if line.startswith("Learning time:"):
            secs = float(line.split(":")[1].split()[0])
        elif line.startswith("Learn acuracy:"):  # sic
            acc = float(line.split(":")[1].strip().rstrip("%"))
    if math.isnan(secs):
        raise RuntimeError(f"KOL failed ({res.returncode}): {(res.stdout + res.stderr)[-300:]}")
    return secs, 1.0 - acc / 100.0


def time_nogd_floor(m: Any, Xp: np.ndarray) -> float:
    """Seconds of a trained NOGD's stage-2 rounds without their update: the kernel row,
    z = M k and the score of its map for every row of ``Xp`` (``fk.scores``, the compiled
    loop; NaN before the switch or without the compiled maps)."""
    if compiled.fk is None or not m._compiled or m.stage != 2:
        return math.nan
    zz = compiled.row_sqnorms(Xp)
    out = np.empty(len(Xp))
    t0 = time.perf_counter()
    compiled.fk.scores(m._fmap(), m._w, Xp, zz, out, m._kbuf, m._zbuf, m._nzwork)
    return time.perf_counter() - t0


def kol_nogd(a: Any, tuned: dict[str, Any]) -> list[dict[str, Any]]:
    """NOGD beside KOL's KERNEL-NOGD (section 4), alternating runs."""
    cells = []
    for ds in (d for d in a.datasets if d in SPEEDUP_SETS):
        X, y = load_set(ds, a.data_dir)
        perm = permutation(X.shape[0], 0, 0)[: min(a.rows, X.shape[0])]
        Xp, yp = np.ascontiguousarray(X[perm]), y[perm]
        n = len(yp)
        params, width = learner_params("nogd", ds, inverse_mean_sqnorm(Xp), tuned)
        eta = float(params.get("eta", 0.5))
        eta2 = float(params.get("eta2") or eta)
        rank = int(params.get("rank") or max(1, round(0.2 * BUDGET)))
        load0 = os.getloadavg()
        with tempfile.TemporaryDirectory() as tmp:
            svm, cache = Path(tmp) / f"{ds}.svm", Path(tmp) / f"{ds}.cache"
            write_libsvm(svm, Xp, yp)
            opts = ["-opt", "KERNEL-NOGD", "-loss", "Hinge", "-B", str(BUDGET), "-knogd",
                    str(rank), "-gamma", repr(float(params["gamma"])), "-eta", repr(eta),
                    "-eta1", repr(eta2)]
            _kol_run([a.kol, "-i", str(svm), "-c", str(cache), *opts])  # writes the cache
            ours, kol, floor = [], [], []
            for _ in range(max(1, a.repeats)):
                m = learners.make("nogd", seed=learner_seed(0, 0, "nogd"), **params)
                t0 = time.perf_counter()
                out = m.predict_learn_many(Xp, yp)
                ours.append(time.perf_counter() - t0)
                secs, kol_err = _kol_run([a.kol, "-c", str(cache), *opts])
                kol.append(secs)
                floor.append(time_nogd_floor(m, Xp))
        err = float(np.mean(np.where(out > 0, 1.0, -1.0) != yp))
        cell = {"dataset": ds, "rows": n, "params": params, "width": width, "rank": rank,
                "examples_per_s": n / statistics.median(ours),
                "kol_examples_per_s": n / statistics.median(kol),
                "floor_examples_per_s": n / statistics.median(floor), "mistake_rate": err,
                "kol_mistake_rate": kol_err, "load": [load0[0], os.getloadavg()[0]]}
        cell["ratio"] = cell["examples_per_s"] / cell["kol_examples_per_s"]
        cell["not_comparable"] = peer_not_comparable(err, kol_err)
        # best runs: on a loaded machine the least disturbed pass of each
        cell["best_ratio"] = min(kol) / min(ours)
        cells.append(cell)
        log(f"  {ds} nogd vs KOL: {cell['examples_per_s']:,.0f} vs "
            f"{cell['kol_examples_per_s']:,.0f} ex/s, ratio {cell['ratio']:.2f}")
    return cells


def _e2e_run(cmd: list[str], tmp: str) -> tuple[dict[str, Any], float]:
    """One wrapped CLI run: the wrapper's report (rc, wall, maxrss_kb) and the learning
    seconds of its summary.json."""
    res = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], capture_output=True,
                         text=True, check=False, cwd=_common.REPO)
    w = json.loads(res.stdout.strip().splitlines()[-1])
    summ_path = Path(tmp) / "summary.json"
    secs = math.nan
    if summ_path.exists():
        secs = _learning_seconds(json.loads(summ_path.read_text()))
    return w, secs


def end_to_end(a: Any) -> list[dict[str, Any]]:
    """Section 3: ``--e2e-repeats`` runs per file, alternating the runners; medians, and the
    load average before and after each file's runs."""
    out = []
    for ds, (fname, extra) in E2E_FILES.items():
        load0 = os.getloadavg()[0]
        runs: dict[str, list[tuple[dict[str, Any], float]]] = {"loop": [], "direct": []}
        cmds: dict[str, list[str]] = {}
        for _ in range(max(1, a.e2e_repeats)):
            for runner in runs:
                with tempfile.TemporaryDirectory() as tmp:
                    cmd = [sys.executable, "-m", "kernelstream.pipelines.cli", "replay",
                           str(Path(a.data_dir) / fname), "-l", "bpa-s", "-p",
                           f"budget={BUDGET}", *extra, "--runner", runner, "--out", tmp, "-q"]
                    runs[runner].append(_e2e_run(cmd, tmp))
                    cmds[runner] = cmd
        load1 = os.getloadavg()[0]
        for runner, rr in runs.items():
            walls = [w["wall"] for w, _ in rr]
            secs = statistics.median(s for _, s in rr)
            wall = statistics.median(walls)
            cmd = cmds[runner]
            cell = {"dataset": ds, "file": fname, "runner": runner,
                    "rc": max(w["rc"] for w, _ in rr), "wall_s": wall, "walls": walls,
                    "peak_rss_mb": max(w["maxrss_kb"] for w, _ in rr) / 1024,
                    "learning_s": secs, "fixed_s": wall - secs, "load": [load0, load1],
                    "command": " ".join(["python", *cmd[1:4], fname, *cmd[5:-3], "-q"])}
            out.append(cell)
            log(f"e2e {ds} {runner}: wall {wall:.2f}s (runs {', '.join(f'{x:.2f}' for x in walls)})"
                f", peak {cell['peak_rss_mb']:.0f} MB, learning {secs:.2f}s (rc {cell['rc']})")
    return out


def _learning_seconds(summary: Any) -> float:
    """The first ``seconds`` entry of a summary.json (the learner's mean learning time)."""
    if isinstance(summary, dict):
        if "seconds" in summary:
            v = summary["seconds"]
            if isinstance(v, dict):
                v = v.get("mean", next(iter(v.values()), math.nan))
            if isinstance(v, (list, tuple)):
                v = v[0]
            return float(v)
        for v in summary.values():
            s = _learning_seconds(v)
            if not math.isnan(s):
                return s
    if isinstance(summary, list):
        for v in summary:
            s = _learning_seconds(v)
            if not math.isnan(s):
                return s
    return math.nan


def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__, epilog=False)
    _common.add_output_args(ap, STEM, render_flag="--render")
    ap.add_argument("--rows", type=int, default=20000,
                    help="rounds per pass (default 20000; the whole set if smaller)")
    ap.add_argument("--repeats", type=int, default=5,
                    help="alternating learner/floor timings; medians reported (default 5: "
                         "with 3, floors of one data set moved by up to 1.5x between cells)")
    _common.add_list_arg(ap, "--datasets", SETS)
    ap.add_argument("--pre-issue", default=PRE_ISSUE,
                    help="commit whose kernelstream/ to time too (default %(default)s; '' "
                         "skips it)")
    ap.add_argument("--no-e2e", action="store_true", help="skip the end-to-end runs")
    ap.add_argument("--e2e-repeats", type=int, default=3,
                    help="end-to-end runs per file and runner, alternating; medians "
                         "(default %(default)s)")
    ap.add_argument("--kol", default="", help="a KOL binary: time NOGD beside its KERNEL-NOGD "
                    "(section 4; skipped without it)")
    a = ap.parse_args(argv)
    if a.render:  # the report again from its figures (a change of the report's form)
        stored = _common.read_json(a.out_dir / f"{STEM}.json")
        if not stored:
            ap.error(f"--render: no {a.out_dir / STEM}.json to render")
        stored.pop("git", None)  # (recorded by older versions: not the figures' revision)
        _common.write_report(a.out_dir, STEM, render(stored), stored)
        log(f"rendered {a.out_dir}/{STEM}.md from its .json")
        return 0
    a.datasets = _common.parse_list(ap, a.datasets, SETS, "dataset")
    prov = _common.provenance("peers.py", sys.argv[1:] if argv is None else argv)
    tuned = _common.read_json(TUNED)
    names, excluded = selected_learners()
    log(f"learners: {', '.join(names)}; excluded: {', '.join(excluded)}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        pre_src: Path | None = None
        if a.pre_issue:
            arch = subprocess.run(["git", "archive", a.pre_issue, "kernelstream"],
                                  cwd=_common.REPO, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=arch, check=True)
            pre_src = Path(tmp)
        cells = speed(a, tuned, names, pre_src)
    e2e = [] if a.no_e2e else end_to_end(a)
    kol = kol_nogd(a, tuned) if a.kol else []
    # the code's revision: provenance's git_head, taken before the timings (its "git" field,
    # git_provenance at the end, could name a commit made during the run, and ignored
    # benchmarks/)
    js = {"generated": _common.now_utc(),
          "machine": _common.machine_info(), "rows": a.rows, "repeats": a.repeats,
          "kernels": compiled.STATUS,
          "budget": BUDGET, "learners": names, "excluded": excluded,
          "e2e_repeats": a.e2e_repeats,
          "pre_issue": a.pre_issue or None, "speed": cells, "end_to_end": e2e,
          "kol_reference": {"learners": KOL_LEARNERS, "ratios": KOL_RATIOS}, "kol_nogd": kol,
          "seconds": time.perf_counter() - t0,
          **prov, "load_end": _common.load_average()}
    _common.write_report(a.out_dir, STEM, render(js), js)
    log(f"wrote {a.out_dir}/{STEM}.md/.json in {js['seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
