"""Published vs ours: paper 002 (Li & Liao, ECML-PKDD 2022 — OKS++, IOKS and their
random-feature versions).

Tables reproduced on the datasets available here:

* Table 2 (logistic loss, AMR %): OKS, IOKS, OKS++ on phishing, a9a (32,561-row training file),
  magic04, SUSY (first 20,000 rows of ``SUSY_30k.libsvm``; P2 used an undocumented random
  20,000-row subsample of the 5M rows).
* Tables 3 / 4 (square / absolute loss, AL): OKS, IOKS (, OKS++) on elevators and bank32nh
  (P2's "bank" is the 32-feature Delve bank: "bank (Num:8192, Fea: 32)" in the README of the
  authors' code). bank8FM, the 8-feature variant of the same Delve family, is also run and
  shown beside the published "bank" column for orientation only (not judged).
* Time-constrained Tables 5 (+8) / 6 (+9) / 7 (+10): RF-OKS, LKMBooks, Raker, RF-IOKS,
  RF-OKS++ on phishing, a9a (+ magic04, SUSY) / elevators, bank32nh (+ bank8FM) / elevators,
  bank32nh (+ bank8FM). Hardware and ailerons are not available.

Protocol (P2's §6): prequential test-then-train, 10 permutations ``r = 0..9``
(``kernelstream.seeding``), mean ± std (ddof=1); K = 6 Gaussian kernels
``σ ∈ {2^-2..2^3}``; every T-dependent constant uses the true stream length (``horizon = n``).
Preprocessing (P2 rescales into fixed intervals; the ones below are our reading): phishing
and a9a as distributed; magic04, SUSY features min-max scaled to [0, 1]; elevators, bank32nh,
bank8FM features min-max scaled to [-1, 1] and targets to [0, 1] (as the authors' own elevators file
is).

Time-budget matching (P2's §6.2), on this machine: per dataset and loss, the per-round time of
RF-OKS++ with D = 400 (RF-IOKS with D = 400 for the absolute loss) is measured on a calibration
stream (permutation ``--calib-perm``, first ``--calib-rows`` rows, best of 3 runs, CPU time of
the process because the machine is shared); for
RF-OKS, RF-IOKS, Raker (D) and LKMBooks (B) the per-round time is measured on a small grid of
sizes, a line ``time = a + b·size`` is fitted and solved for the reference time (rounded to
10, clamped to the grid). Because a Python round has a large fixed cost, RF-IOKS (whose
bisection costs a few extra microseconds) is also run with the paper's D ("paper D").

Quirks (of the authors' R code, C-P2): OKS++/RF-OKS++ logistic are run with
``reference_quirks=True`` (the code that produced the published numbers: c₀ overwritten by e^{−yf})
and False (intended rule); Raker with the cumulative-σ quirk (published) and without; IOKS on the
regression tables with and without its quirks (no renormalisation; ``≥`` clipping test for square
loss). The pass verdict of a proposed algorithm uses the setting that produced the published numbers
("code").

PASS (proposed algorithms OKS++, IOKS, RF-OKS++, RF-IOKS): AMR ≤ published + 2 pp
(classification), AL ≤ 1.25 × published (regression).

Results are written after every cell to ``benchmarks/results/p2.json`` / ``p2.md``;
``--resume`` skips cells already in the json (same permutations), so an interrupted run can
be continued. One process, no worker pool.

Examples::

    nice -n 10 .venv/bin/python benchmarks/reproduce_p2.py --resume
    .venv/bin/python benchmarks/reproduce_p2.py --tables 3,4 --permutations 2 --out-dir /tmp/p2
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
import numpy as np
from _common import mean_std

from kernelstream import data as ksdata
from kernelstream import learners
from kernelstream.evaluate import evaluate
from kernelstream.seeding import learner_seed


# -- data ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class P2Data:
    name: str
    file: str
    fmt: str
    task: str
    scale: str
    n_features: int | None = None
    limit: int | None = None
    positive_label: str | None = None
    note: str = ""


DATA: dict[str, P2Data] = {d.name: d for d in (
    P2Data("phishing", "phishing", "libsvm", "classification", "none", 68,
           note="LIBSVM phishing as distributed (11,055 × 68, unit-length rows; P2 file "
                "`phishing`)"),
    P2Data("a9a", "a9a", "libsvm", "classification", "none", 123,
           note="LIBSVM a9a training file (32,561 × 123, binary features), as P2"),
    P2Data("magic04", "magic04.data", "csv", "classification", "01", 10, positive_label="g",
           note="UCI magic04 (19,020 × 10), min-max [0, 1] (P2 file `magic04-N`); g = +1"),
    P2Data("SUSY", "SUSY_30k.libsvm", "libsvm", "classification", "01", 18, limit=20000,
           note="DEVIATION: first 20,000 rows of a 30,000-row random SUSY subset "
                "(P2: another random 20,000-row subsample), min-max [0, 1] over those rows"),
    # regression features in [-1, 1], targets in [0, 1]: the authors' own elevators file
    # (JunfLi-TJU/ACML2021-Journal-Track, regression/elevators.train) is our rows scaled so
    P2Data("elevators", "elevators.libsvm", "libsvm", "regression", "pm1", 18,
           note="elevators (16,599 × 18), features min-max [-1, 1] and target [0, 1], as the "
                "authors' elevators.train (ACML2021-Journal-Track) is scaled"),
    P2Data("bank32nh", "bank32nh.libsvm", "libsvm", "regression", "pm1", 32,
           note="Delve bank32nh (8,192 × 32), P2's \"bank (Num:8192, Fea: 32)\" (README of "
                "JunfLi-TJU/OKS-Bandit); features min-max [-1, 1], target [0, 1], as elevators"),
    P2Data("bank8FM", "bank8FM.libsvm", "libsvm", "regression", "pm1", 8,
           note="not in P2: Delve bank8FM (8,192 × 8), the 8-feature variant, shown beside "
                "P2's bank numbers for orientation (not judged). Features min-max [-1, 1], "
                "target [0, 1], as elevators"),
)}


def load(name: str, data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    d = DATA[name]
    reg = d.task == "regression"
    return ksdata.load(str(Path(data_dir) / d.file), fmt=d.fmt, n_features=d.n_features,
                       task=d.task, scale=d.scale, limit=d.limit,
                       positive_label=d.positive_label, scale_target="01" if reg else "none")


# -- published numbers (P2's Tables 2-10) --------------------------------------------------------
# Tables 2-4: mean, std, seconds per run. P2's "bank" column is bank32nh; bank8FM rows are
# set beside the same numbers (indicative, below).
T2 = {
    "phishing": {"oks": (13.80, 0.34, 17.34), "ioks": (13.25, 0.28, 6.58),
                 "oks++": (7.80, 0.49, 32.31)},
    "a9a": {"oks": (19.65, 0.12, 208.84), "ioks": (17.46, 0.12, 103.91),
            "oks++": (16.57, 0.31, 474.65)},
    "magic04": {"oks": (22.23, 0.22, 6.31), "ioks": (21.50, 0.18, 4.02),
                "oks++": (17.88, 0.57, 11.06)},
    "SUSY": {"oks": (32.98, 0.66, 9.97), "ioks": (31.75, 0.30, 6.68),
             "oks++": (27.84, 0.70, 19.88)},
}
T3 = {
    "elevators": {"oks": (0.0068, 0.0001, 3.23), "ioks": (0.0077, 0.0001, 4.08),
                  "oks++": (0.0046, 0.0001, 12.75)},
    "bank32nh": {"oks": (0.0240, 0.0002, 1.51), "ioks": (0.0252, 0.0002, 1.57),
                "oks++": (0.0205, 0.0006, 4.24)},
}
T4 = {
    "elevators": {"oks": (0.0507, 0.0001, 4.76), "ioks": (0.0492, 0.0004, 5.20)},
    "bank32nh": {"oks": (0.0961, 0.0009, 1.55), "ioks": (0.0961, 0.0008, 1.64)},
}
# Tables 5-10: B-D, mean, std, per-round time (1e-5 s). Tables 6/9 are printed ×100 in P2.
T5 = {
    "phishing": {"rf-oks": (500, 14.61, 0.65, 9.63), "lkmbooks": (250, 12.50, 1.03, 9.46),
                 "raker": (70, 13.60, 1.00, 9.35), "rf-ioks": (380, 15.59, 0.39, 9.66),
                 "rf-oks++": (400, 9.15, 0.56, 9.20)},
    "a9a": {"rf-oks": (450, 21.25, 0.12, 11.61), "lkmbooks": (220, 20.06, 0.54, 11.53),
            "raker": (90, 24.08, 0.00, 11.30), "rf-ioks": (380, 22.99, 0.20, 11.95),
            "rf-oks++": (400, 17.28, 0.29, 11.19)},
    "magic04": {"rf-oks": (500, 22.45, 0.21, 6.45), "lkmbooks": (250, 22.73, 0.96, 6.67),
                "raker": (40, 22.83, 0.70, 6.80), "rf-ioks": (380, 22.21, 0.26, 6.59),
                "rf-oks++": (400, 18.41, 0.35, 6.28)},
    "SUSY": {"rf-oks": (500, 33.78, 0.45, 6.89), "lkmbooks": (220, 38.47, 0.77, 6.89),
             "raker": (40, 33.62, 1.20, 6.75), "rf-ioks": (320, 33.93, 0.27, 6.94),
             "rf-oks++": (400, 28.93, 0.96, 6.63)},
}
T6 = {
    "elevators": {"rf-oks": (450, 0.0072, 0.0002, 6.47), "lkmbooks": (220, 0.0090, 0.0004, 6.72),
                  "raker": (40, 0.0070, 0.0004, 6.57), "rf-ioks": (380, 0.0089, 0.0001, 6.83),
                  "rf-oks++": (400, 0.0051, 0.0002, 6.45)},
    "bank32nh": {"rf-oks": (450, 0.0255, 0.0003, 7.57), "lkmbooks": (220, 0.0224, 0.0002, 7.52),
                "raker": (50, 0.0238, 0.0002, 7.93), "rf-ioks": (370, 0.0263, 0.0002, 7.89),
                "rf-oks++": (400, 0.0214, 0.0005, 7.30)},
}
T7 = {
    "elevators": {"rf-oks": (530, 0.0515, 0.0004, 7.13), "lkmbooks": (230, 0.0550, 0.0014, 7.35),
                  "raker": (50, 0.0550, 0.0012, 7.41), "rf-ioks": (400, 0.0515, 0.0007, 7.63)},
    "bank32nh": {"rf-oks": (500, 0.0969, 0.0004, 8.63), "lkmbooks": (250, 0.0941, 0.0004, 8.28),
                "raker": (50, 0.0980, 0.0004, 8.87), "rf-ioks": (400, 0.0994, 0.0015, 8.80)},
}
LOSS_OF_TABLE = {"2": "logistic", "3": "square", "4": "absolute", "5": "logistic",
                 "6": "square", "7": "absolute"}
TABLE_NAMES = {"2": "Table 2 (logistic loss; AMR %)", "3": "Table 3 (square loss; AL)",
               "4": "Table 4 (absolute loss; AL)",
               "5": "Tables 5 + 8 (time-constrained, logistic loss; AMR %)",
               "6": "Tables 6 + 9 (time-constrained, square loss; AL)",
               "7": "Tables 7 + 10 (time-constrained, absolute loss; AL)"}
PROPOSED = ("oks++", "ioks", "rf-oks++", "rf-ioks")
INDICATIVE = ("bank8FM",)  # compared with P2's numbers on a different dataset variant
for _t in (T3, T4, T6, T7):
    _t["bank8FM"] = _t["bank32nh"]
TOL_PP = 2.0
TOL_RATIO = 1.25
RF_GRID = {"rf-oks": [50, 200, 400, 800, 1200], "rf-ioks": [50, 200, 400, 800, 1200],
           "raker": [10, 25, 50, 100, 150], "lkmbooks": [100, 200, 400, 800, 1600]}
SIZE_PARAM = {"rf-oks": "n_components", "rf-ioks": "n_components", "raker": "n_components",
              "lkmbooks": "budget", "rf-oks++": "n_components"}


def published(table: str, ds: str, learner: str) -> tuple[float, ...] | None:
    t = {"2": T2, "3": T3, "4": T4, "5": T5, "6": T6, "7": T7}[table]
    return t.get(ds, {}).get(learner)


# -- cells ---------------------------------------------------------------------------------------
@dataclass
class Cell:
    table: str
    dataset: str
    learner: str
    setting: str  # "code" (the published setting), "intended", "paper D", "matched", ...
    params: dict[str, Any]
    priority: int  # lower runs first
    verdict: bool  # this row decides the PASS of a proposed algorithm

    @property
    def key(self) -> str:
        return f"T{self.table}|{self.dataset}|{self.learner}|{self.setting}"


def kernel_cells(tables: list[str], datasets: list[str], n: dict[str, int]) -> list[Cell]:
    out: list[Cell] = []
    for tb, pub in (("2", T2), ("3", T3), ("4", T4)):
        if tb not in tables:
            continue
        loss = LOSS_OF_TABLE[tb]
        for ds in [d for d in pub if d in datasets]:
            T = n[ds]
            big = 9 if ds == "a9a" else 0
            out.append(Cell(tb, ds, "oks", "p2", {"convention": "p2", "loss": loss,
                                                   "horizon": T}, 2 + big, False))
            out.append(Cell(tb, ds, "ioks", "code", {"loss": loss, "horizon": T,
                                                     "reference_quirks": True}, 1 + big, True))
            if tb != "2":  # the IOKS quirks hardly matter for logistic loss (renormalisation)
                out.append(Cell(tb, ds, "ioks", "intended", {"loss": loss, "horizon": T},
                                3, False))
            if tb == "2":
                out.append(Cell(tb, ds, "oks++", "code", {"loss": loss,
                                                          "reference_quirks": True},
                                1 + big, True))
                out.append(Cell(tb, ds, "oks++", "intended", {"loss": loss}, 4 + big, False))
            elif tb == "3":
                out.append(Cell(tb, ds, "oks++", "code", {"loss": loss}, 1, True))
    return out


def rf_cells(tables: list[str], datasets: list[str], n: dict[str, int],
             sizes: dict[str, dict[str, Any]]) -> list[Cell]:
    out: list[Cell] = []
    for tb, pub in (("5", T5), ("6", T6), ("7", T7)):
        if tb not in tables:
            continue
        loss = LOSS_OF_TABLE[tb]
        for ds in [d for d in pub if d in datasets]:
            T = n[ds]
            cal = sizes.get(f"T{tb}|{ds}", {}).get("matched", {})
            pr = 5 if ds == "a9a" else 4
            if "rf-oks++" in pub[ds]:
                out.append(Cell(tb, ds, "rf-oks++", "code",
                                {"loss": loss, "n_components": 400, "reference_quirks": True},
                                pr, True))
                if loss == "logistic":
                    out.append(Cell(tb, ds, "rf-oks++", "intended",
                                    {"loss": loss, "n_components": 400}, pr + 1, False))
            D_ioks = 400 if loss == "absolute" else cal.get("rf-ioks")
            if D_ioks is not None:
                out.append(Cell(tb, ds, "rf-ioks", "code" if loss == "absolute" else "matched",
                                {"loss": loss, "n_components": D_ioks, "horizon": T,
                                 "reference_quirks": True}, pr, True))
            if loss != "absolute":
                out.append(Cell(tb, ds, "rf-ioks", "paper D",
                                {"loss": loss, "n_components": pub[ds]["rf-ioks"][0],
                                 "horizon": T, "reference_quirks": True}, pr, False))
            if "rf-oks" in cal:
                out.append(Cell(tb, ds, "rf-oks", "matched",
                                {"loss": loss, "n_components": cal["rf-oks"], "horizon": T},
                                pr + 1, False))
            if "lkmbooks" in cal:
                out.append(Cell(tb, ds, "lkmbooks", "matched",
                                {"loss": loss, "budget": cal["lkmbooks"], "horizon": T},
                                pr + 1, False))
            if "raker" in cal:
                for q, lab in ((True, "code"), (False, "intended")):
                    out.append(Cell(tb, ds, "raker", f"matched, {lab}",
                                    {"loss": loss, "n_components": cal["raker"], "horizon": T,
                                     "reference_quirks": q}, pr + 1, False))
    return out


# -- time-budget matching (P2's §6.2) -------------------------------------------------------------
def per_round_us(name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray,
                 reps: int) -> float:
    """Best-of-``reps`` per-round *CPU* time of this process (µs): on a shared machine the
    wall clock mostly measures the other processes' load."""
    best = math.inf
    for rep in range(reps):
        m = learners.make(name, seed=learner_seed(0, 10_000 + rep, name), **params)
        t0 = time.process_time()
        m.predict_learn_many(X, y)
        best = min(best, time.process_time() - t0)
    return best / len(y) * 1e6


def calibrate(tb: str, ds: str, X: np.ndarray, y: np.ndarray, a: argparse.Namespace
              ) -> dict[str, Any]:
    loss = LOSS_OF_TABLE[tb]
    rows = min(len(y), a.calib_rows)
    Xc, yc = _common.permuted(X, y, a.base_seed, a.calib_perm, rows)
    ref = "rf-ioks" if loss == "absolute" else "rf-oks++"
    common = {"loss": loss}
    ref_params = {**common, "n_components": 400, "reference_quirks": True}
    if ref == "rf-ioks":
        ref_params["horizon"] = rows
    t_ref = per_round_us(ref, ref_params, Xc, yc, 3)
    out: dict[str, Any] = {"reference": ref, "reference_us": t_ref, "rows": rows,
                           "grid_us": {}, "matched": {}, "machine": _common.machine_info()}
    for name, grid in RF_GRID.items():
        if name == ref or (name == "rf-ioks" and loss == "absolute"):
            continue
        ts = []
        for g in grid:
            ps = {**common, SIZE_PARAM[name]: g, "horizon": rows}
            ts.append(per_round_us(name, ps, Xc, yc, 3))
        out["grid_us"][name] = dict(zip(map(str, grid), ts, strict=True))
        b, c = np.polyfit(np.array(grid, dtype=float), np.array(ts), 1)
        if b > 0:
            g_star = (t_ref - c) / b
        else:  # timing noise: take the closest grid point
            g_star = grid[int(np.argmin(np.abs(np.array(ts) - t_ref)))]
        g_star = min(max(g_star, grid[0]), grid[-1])
        out["matched"][name] = max(10, round(g_star / 10.0) * 10)
        print(f"   calib T{tb} {ds} {name}: ref {t_ref:.1f}us, grid "
              + ", ".join(f"{g}:{t:.1f}" for g, t in zip(grid, ts, strict=True))
              + f" -> {out['matched'][name]}", file=sys.stderr, flush=True)
    return out


# -- running -------------------------------------------------------------------------------------
def run_cell(c: Cell, X: np.ndarray, y: np.ndarray, a: argparse.Namespace) -> dict[str, Any]:
    res = evaluate(X, y, c.learner, c.params, seed=a.base_seed, permutations=a.permutations,
                   progress=None)
    classify = res.task == "classification"
    vals = [r.mistake_rate if classify else r.avg_loss for r in res.runs]
    m, s = mean_std(vals)
    secs = [r.seconds for r in res.runs]
    n = res.examples
    out: dict[str, Any] = {
        "table": c.table, "dataset": c.dataset, "learner": c.learner, "setting": c.setting,
        "params": c.params, "verdict": c.verdict, "task": res.task, "loss": res.loss,
        "metric": "AMR %" if classify else "AL", "mean": m, "std": s,
        "seconds": float(np.mean(secs)), "seconds_std": mean_std(secs)[1],
        "per_round_1e5s": float(np.mean(secs)) / n * 1e5,
        "n_sv": float(np.mean([r.n_support_vectors for r in res.runs])),
        "examples": n, "permutations": a.permutations, "machine": _common.machine_info(),
        "runs": [{"r": r.permutation, "value": v, "seconds": r.seconds}
                 for r, v in zip(res.runs, vals, strict=True)],
    }
    pub = published(c.table, c.dataset, c.learner)
    if pub is not None:
        pm = pub[0] if c.table in ("2", "3", "4") else pub[1]
        out["published"] = list(pub)
        out["published_mean"] = pm
        if classify:
            out["diff"] = m - pm
            ok = m <= pm + TOL_PP
        else:
            out["ratio"] = m / pm
            ok = m <= TOL_RATIO * pm
        out["passed"] = bool(ok)
    return out


# -- output --------------------------------------------------------------------------------------
def _fmt(v: float, metric: str) -> str:
    if not math.isfinite(v) or abs(v) >= 1e3:
        return f"{v:.1e} (diverged)"
    return f"{v:.2f}" if metric.startswith("AMR") else f"{v:.4f}"


def write_outputs(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    cells = doc["cells"]
    L: list[str] = [
        "# Paper 002 (OKS++, IOKS, random-feature versions): published vs ours",
        "",
        f"Generated by `benchmarks/reproduce_p2.py` ({doc.get('updated', '')}; evaluation wall "
        f"time so far {doc.get('wall_seconds', 0) / 60:.1f} min). Do not edit by hand.",
        "",
        "* Machine: " + _common.machines_line(cells, lambda c: c["table"], "tables")
        + "; one process; Python learners (P2 "
        "used R on an i7-1165G7, so seconds are not comparable; time-matched sizes are "
        "calibrated on the machine that runs the table).",
        f"* Protocol: prequential test-then-train, mean ± std (ddof=1) over R = "
        f"{a.permutations} permutations r = 0..{a.permutations - 1} (`kernelstream.seeding`, "
        f"base seed {a.base_seed}), as P2 (10). K = 6 Gaussian kernels σ ∈ {{2^-2..2^3}}; "
        "T-dependent constants use the true stream length. AMR = mistake rate (%); AL = "
        "average training loss of the sampled hypothesis (square loss without ½).",
        "* Data: " + "; ".join(f"**{d.name}**: {d.note}" for d in DATA.values()) + ".",
        "* PASS (proposed algorithms only): AMR ≤ published + 2 pp; AL ≤ 1.25 × published. "
        "The verdict row of each proposed algorithm is its **code** setting (the one that "
        "produced the published numbers); other settings are shown for comparison "
        "(`intended` = `reference_quirks=False`).",
        "* Tables 6/9 of P2 print AL × 100; the published values below are converted back.",
        "",
    ]
    verdicts = [c for c in cells if c.get("verdict") and "passed" in c]
    same = [c for c in verdicts if c["dataset"] not in INDICATIVE]
    other = [c for c in verdicts if c["dataset"] in INDICATIVE]
    L += [f"**Verdict rows passed: {sum(c['passed'] for c in same)}/{len(same)}** on the "
          "datasets P2 used; "
          f"{sum(c['passed'] for c in other)}/{len(other)} on bank8FM, compared with P2's "
          "32-feature bank (bank32nh; a different dataset: indicative only, marked *).", ""]
    for tb in ("2", "3", "4", "5", "6", "7"):
        rows = [c for c in cells if c["table"] == tb]
        if not rows:
            continue
        rf = tb in ("5", "6", "7")
        L += [f"## {TABLE_NAMES[tb]}", ""]
        if rf:
            L += ["| dataset | algorithm | setting | B-D (ours / P2) | ours | published | "
                  "diff / ratio | PASS | time 1e-5 s/round (ours / P2) |",
                  "|---|---|---|---|---:|---:|---:|---|---:|"]
        else:
            L += ["| dataset | algorithm | setting | ours | published | diff / ratio | PASS "
                  "| s/run (ours / P2) | #SV |",
                  "|---|---|---|---|---:|---:|---:|---|---:|"]
        for c in rows:
            met = c["metric"]
            ours = f"{_fmt(c['mean'], met)} ± {_fmt(c['std'], met).replace(' (diverged)', '')}"
            pub = c.get("published")
            if pub is None:
                ps, dr = "–", ""
            else:
                pm, psd = (pub[0], pub[1]) if not rf else (pub[1], pub[2])
                ps = f"{_fmt(pm, met)} ± {_fmt(psd, met)}"
                dr = (f"{c['diff']:+.2f} pp" if "diff" in c else f"×{c['ratio']:.3g}")
            if c["learner"] in PROPOSED and "passed" in c:
                star = "*" if c["dataset"] in INDICATIVE else ""
                pas = _common.pass_mark(c["passed"]) + star + (
                    " (verdict)" if c["verdict"] else "")
            else:
                pas = ""
            if rf:
                size = c["params"].get(SIZE_PARAM[c["learner"]], "")
                psize = pub[0] if pub is not None else "–"
                ptime = f"{pub[3]:g}" if pub is not None else "–"
                L.append(f"| {c['dataset']} | {c['learner']} | {c['setting']} | {size} / "
                         f"{psize} | {ours} | {ps} | {dr} | {pas} | "
                         f"{c['per_round_1e5s']:.2f} / {ptime} |")
            else:
                ptime = f"{pub[2]:g}" if pub is not None else "–"
                L.append(f"| {c['dataset']} | {c['learner']} | {c['setting']} | {ours} | {ps} | "
                         f"{dr} | {pas} | {c['seconds']:.1f} / {ptime} | {c['n_sv']:.0f} |")
        L.append("")
    cal = doc.get("calibration", {})
    if cal:
        L += ["## Time-budget matching (§2.5) on this machine", "",
              "Per-round CPU time in µs on the calibration stream (best of 3 runs; CPU rather "
              "than wall time because the machine is shared by several jobs), and the size "
              "solved from a linear fit. The time columns of the tables above are wall "
              "times of the evaluation runs (noisier for the same reason).", "",
              "| table / dataset | reference (µs) | RF-OKS D | RF-IOKS D | Raker D | "
              "LKMBooks B | grid (size:µs) |",
              "|---|---|---|---|---|---|---|"]
        for k, v in cal.items():
            m = v.get("matched", {})
            grid = "; ".join(f"{nm} " + ", ".join(f"{g}:{t:.0f}" for g, t in gs.items())
                             for nm, gs in v.get("grid_us", {}).items())
            L.append(f"| {k} | {v['reference']} D=400: {v['reference_us']:.1f} | "
                     f"{m.get('rf-oks', '–')} | {m.get('rf-ioks', '400 (ref)')} | "
                     f"{m.get('raker', '–')} | {m.get('lkmbooks', '–')} | {grid} |")
        L.append("")
    L += NOTES
    _common.write_report(a.out_dir, "p2", L, doc)


NOTES = [
    "## Notes",
    "",
    "* **OKS++ / RF-OKS++ logistic quirk** (§3.7): in `OKS++logistic.R` the variable holding "
    "c₀ = (G C₀)^{1/3}(U K)^{2/3} ≈ 20.1 is overwritten by e^{−y_t f_t} of the current round "
    "before it is used in λ_I and δ_t. With the intended constant, δ_t = ½c₀/max(c₀, 2C̃^{1/3}) "
    "keeps a large uniform exploration for most of the stream (C̃^{1/3} only reaches c₀/2 after "
    "C̃ ≈ 1000); with the quirk c₀ = e^{−yf} < 1 on correct rounds, so δ_t is more than an "
    "order of magnitude smaller. "
    "The published numbers come from the quirk (`code` rows); `intended` rows show the rule "
    "as specified. The square-loss files use the constant c₀ (no quirk).",
    "* **IOKS quirks** (no renormalisation of q after the bisection, `≥` in the square-loss "
    "clipping test) change results only within the bisection tolerance; they are run both "
    "ways on the regression tables only.",
    "* **Raker quirk**: `Raker-*.R` divides Ωx by σ_j cumulatively, so kernel j has width "
    "Π_{l≤j} σ_l; `code` = with it (published), `intended` = the stated widths.",
    "* **Time-budget matching** is done on this machine with CPU time (§2.5, see the table "
    "above). A Python round has a large fixed cost, so sizes differ from P2's: LKMBooks' round "
    "(one vectorised distance row over ≤ B points) is cheap, hence a large B; RF-IOKS pays a few "
    "µs per round for its bisection (on a bracket narrowed around the previous solution), hence "
    "a somewhat smaller D than P2's. Its `paper D` row uses P2's D (380/370/320) and isolates "
    "the algorithm from that implementation cost.",
    "* **OKS with the P2 constants and square loss** (`oks`, convention p2, and `rf-oks`): the "
    "step is λ ℓ'/p_I with λ = 25√δ/√(KT); once p_I sits at its floor δ/K the step multiplier "
    "2λ/p_I exceeds 2 (for T = 8,192: 2·0.034/0.015 ≈ 4.5) and a rarely drawn wide kernel "
    "can diverge. With [0, 1] features it did on bank8FM (8,192 rows); with the authors' "
    "[-1, 1] scaling (below) no run diverges here, but short streams remain at risk. The "
    "authors' OKS code is only in a zip archive that could not be read, so whether it differs "
    "is unknown (ALGORITHMS.md gives c = 25).",
    "* **IOKS and RF-IOKS on bank8FM** (not judged, see Data): they follow the R "
    "code (`IOKS-absolute.R` compared line by line; a direct Python port of the R file gives "
    "the same losses on the same permutations to within sampling noise). On bank8FM their "
    "projection onto the ball of radius U = 1 binds: in a side analysis a single σ = 1 kernel "
    "with the IOKS step reaches an absolute loss of about 0.099 with the projection and 0.045 "
    "without (final RKHS norm ≈ 2.5), and the selected kernel sits on the ball in 27–63 % of "
    "the rounds (σ = 1 .. 0.25), against 3–24 % on elevators. OKS, which does not project, is "
    "not limited this way.",
    "* **Data**: P2's bank is Delve bank32nh: the README of the authors' code "
    "(JunfLi-TJU/OKS-Bandit) lists \"bank (Num:8192, Fea: 32)\". Its rows are judged. The "
    "bank8FM rows (the 8-feature variant, not in P2) are shown beside the same published "
    "numbers for orientation only. Deviations: SUSY is a different random 20,000-row "
    "subsample; ailerons and Hardware (TomsHardware) are not available.",
    "* **Rescaling intervals** (lost from the paper text, §2.8): regression features are "
    "scaled to [-1, 1] and targets to [0, 1] — the authors' own elevators file "
    "(JunfLi-TJU/ACML2021-Journal-Track, `regression/elevators.train`) equals our elevators "
    "rows scaled that way (first row to 4e-9); with [0, 1] features every elevators loss "
    "was 2–25 % lower than published, with [-1, 1] they land on the published means. "
    "Classification features keep [0, 1] (magic04, SUSY; phishing and a9a as distributed).",
    "",
]


# -- main ----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__)
    _common.add_eval_args(ap, 10, "R (default 10, as P2)")
    ap.add_argument("--tables", default="2,3,4,5,6,7",
                    help="comma-separated subset of 2..7 (5/6/7 include the appendix tables "
                         "8/9/10 of the same loss)")
    _common.add_list_arg(ap, "--datasets", DATA)
    ap.add_argument("--calib-perm", type=int, default=1000,
                    help="permutation used for time calibration only (default 1000)")
    ap.add_argument("--calib-rows", type=int, default=5000)
    ap.add_argument("--resume", action="store_true",
                    help="keep cells (and calibrations) already in the output json")
    _common.add_output_args(ap, "p2", "--report-only")
    a = ap.parse_args(argv)
    tables = _common.parse_list(ap, a.tables)
    datasets = _common.parse_list(ap, a.datasets, DATA, "dataset")
    avail = set(learners.available())
    doc: dict[str, Any] = {"cells": [], "calibration": {}}
    jpath = Path(a.out_dir) / "p2.json"
    if a.resume and jpath.exists():
        old = json.loads(jpath.read_text())
        if old.get("permutations") == a.permutations and old.get("base_seed") == a.base_seed:
            doc = old
    doc.update({"generated_by": "benchmarks/reproduce_p2.py", "machine": _common.machine_info(),
                "permutations": a.permutations, "base_seed": a.base_seed,
                "tolerance_pp": TOL_PP, "tolerance_ratio": TOL_RATIO})
    if a.report_only:
        if not jpath.exists():
            ap.error(f"{jpath} not found")
        write_outputs(a, _common.read_results(a, "p2"))
        return 0
    done = {f"T{c['table']}|{c['dataset']}|{c['learner']}|{c['setting']}" for c in doc["cells"]}
    t_start = time.perf_counter()
    wall0 = float(doc.get("wall_seconds", 0.0))
    cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def get(ds: str) -> tuple[np.ndarray, np.ndarray]:
        if ds not in cache:
            cache[ds] = load(ds, a.data_dir)
        return cache[ds]

    n = {ds: len(get(ds)[1]) for ds in datasets}
    cells = kernel_cells(tables, datasets, n)
    # calibrate the time-constrained tables (cheap), then build their cells
    for tb, pub in (("5", T5), ("6", T6), ("7", T7)):
        if tb not in tables:
            continue
        for ds in [d for d in pub if d in datasets]:
            key = f"T{tb}|{ds}"
            if key not in doc["calibration"]:
                X, y = get(ds)
                doc["calibration"][key] = calibrate(tb, ds, X, y, a)
    cells += rf_cells(tables, datasets, n, doc["calibration"])
    cells = [c for c in cells if c.learner in avail]
    order = sorted(range(len(cells)), key=lambda i: (cells[i].priority, i))

    def save() -> None:
        doc["cells"].sort(key=lambda c: (c["table"], list(DATA).index(c["dataset"]),
                                         c["learner"], c["setting"]))
        doc["updated"] = _common.now_utc()
        doc["wall_seconds"] = wall0 + time.perf_counter() - t_start
        write_outputs(a, doc)

    save()
    for k, i in enumerate(order, start=1):
        c = cells[i]
        if c.key in done:
            continue
        X, y = get(c.dataset)
        t0 = time.perf_counter()
        res = run_cell(c, X, y, a)
        doc["cells"].append(res)
        done.add(c.key)
        extra = (f" published {res['published_mean']}, "
                 f"{'PASS' if res['passed'] else 'FAIL'}" if "passed" in res else "")
        print(f"[{k}/{len(cells)} {time.perf_counter() - t_start:7.1f}s] {c.key}: "
              f"{res['mean']:.4f} ± {res['std']:.4f}{extra} ({time.perf_counter() - t0:.1f}s)",
              file=sys.stderr, flush=True)
        save()
    save()
    print(f"wrote {Path(a.out_dir) / 'p2.md'} and p2.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
