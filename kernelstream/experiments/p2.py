"""Li & Liao ("Improved regret bounds for online kernel selection under bandit
feedback", ECML-PKDD 2022: OKS++, IOKS and their random-feature versions), published vs ours.

* Table 2 (``p2-2``; logistic loss, AMR %): OKS, IOKS, OKS++ on phishing, a9a (the 32,561-row
  training file), magic04 and SUSY (the first 20,000 rows of a 30,000-row subset).
* Tables 3 / 4 (``p2-3``, ``p2-4``; square / absolute loss, AL): OKS, IOKS (, OKS++) on
  elevators and bank32nh (the paper's "bank": 8,192 rows, 32 features; judged), and bank8FM,
  the 8-feature variant, beside the same published numbers for orientation only.
* Time-constrained Tables 5 + 8 / 6 + 9 / 7 + 10 (``p2-5``, ``p2-6``, ``p2-7``): RF-OKS,
  LKMBooks, Raker, RF-IOKS, RF-OKS++ at sizes matched to the per-round time of RF-OKS++
  (RF-IOKS for the absolute loss) with D = 400. The matched sizes are a measurement of one
  machine: ``kernelstream reproduce p2 --retune`` writes them to ``tuned_p2.json`` and
  the tables read them from there, as the other papers read their tuned parameters.

Protocol: prequential test-then-train, R = 10 permutations (``kernelstream.seeding``), mean ±
std (ddof = 1); six Gaussian kernels σ ∈ {2^-2, ..., 2^3}; every horizon is the true stream
length. Classification rows are mistake rates, regression rows the mean prequential loss of
the replay (square loss without ½). PASS (OKS++, IOKS, RF-OKS++, RF-IOKS, at the setting that
produced the published numbers, "code"): AMR ≤ published + 2 pp, AL ≤ 1.25 × published.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernelstream.experiments import report
from kernelstream.experiments.datasets import DATASETS, load_dataset
from kernelstream.experiments.grid import Run, run_grid
from kernelstream.experiments.protocol import Options, Outcome
from kernelstream.experiments.published import table as published_table

NAME = "p2"
TABLES = ("p2-2", "p2-3", "p2-4", "p2-5", "p2-6", "p2-7")
PERMUTATIONS = 10
TUNED_FILE = "tuned_p2.json"  # the time-matched sizes (reproduce p2 --retune)
# the paper's data set names -> the protocol data sets they are (experiments.datasets)
DS = {"phishing": "phishing", "a9a": "a9a-train", "magic04": "magic04-01", "SUSY": "SUSY-20k",
      "elevators": "elevators", "bank32nh": "bank32nh", "bank8FM": "bank8FM"}
DATA = tuple(DS)  # the data sets of the tables (``--datasets``)

# -- published numbers ---------------------------------------------------------------------------
# Tables 2-4 (mean, std, seconds per run) and 5-10 (B-D, mean, std, per-round time in 1e-5 s;
# Tables 6/9 are printed ×100 in P2), as published/p2-<table>.txt. P2's "bank" column is
# bank32nh; bank8FM rows are set beside the same numbers (indicative, below).
PUBLISHED: dict[str, dict[str, dict[str, tuple[Any, ...]]]] = {
    t: published_table(f"p2-{t}") for t in "234567"}
T2, T3, T4, T5, T6, T7 = PUBLISHED.values()
LOSS_OF_TABLE = {"2": "logistic", "3": "square", "4": "absolute", "5": "logistic",
                 "6": "square", "7": "absolute"}
TABLE_NAMES = {"2": "Table 2 (logistic loss; AMR %)", "3": "Table 3 (square loss; AL)",
               "4": "Table 4 (absolute loss; AL)",
               "5": "Tables 5 + 8 (time-constrained, logistic loss; AMR %)",
               "6": "Tables 6 + 9 (time-constrained, square loss; AL)",
               "7": "Tables 7 + 10 (time-constrained, absolute loss; AL)"}
PROPOSED = ("oks++", "ioks", "rf-oks++", "rf-ioks")
INDICATIVE = ("bank8FM",)  # compared with P2's numbers on a different dataset variant
T3["bank8FM"], T4["bank8FM"] = T3["bank32nh"], T4["bank32nh"]
T6["bank8FM"], T7["bank8FM"] = T6["bank32nh"], T7["bank32nh"]
TOL_PP = 2.0
TOL_RATIO = 1.25
RF_GRID = {"rf-oks": [50, 200, 400, 800, 1200], "rf-ioks": [50, 200, 400, 800, 1200],
           "raker": [10, 25, 50, 100, 150], "lkmbooks": [100, 200, 400, 800, 1600]}
SIZE_PARAM = {"rf-oks": "n_components", "rf-ioks": "n_components", "raker": "n_components",
              "lkmbooks": "budget", "rf-oks++": "n_components"}


def published(table: str, ds: str, learner: str) -> tuple[float, ...] | None:
    # T2-T4 hold (mean, std, seconds), T5-T7 (size, mean, std, seconds)
    return PUBLISHED[table].get(ds, {}).get(learner)


def _table_rows(group: str, tables: list[str], datasets: list[str], n: dict[str, int]
                ) -> Iterator[tuple[str, str, str, int, dict[str, tuple[Any, ...]]]]:
    """(table, data set, loss, stream length, the data set's published rows) for the tables
    of ``group`` among ``tables`` and the data sets they publish among ``datasets``."""
    for tb in group:
        if tb in tables:
            pub = PUBLISHED[tb]
            for ds in [d for d in pub if d in datasets]:
                yield tb, ds, LOSS_OF_TABLE[tb], n[ds], pub[ds]


# -- cells ---------------------------------------------------------------------------------------
@dataclass
class Cell:
    """One row of a table: a learner configuration on a data set (table "2" .. "7")."""

    table: str
    dataset: str
    learner: str
    setting: str  # "code" (the published setting), "intended", "paper D", "matched", ...
    params: dict[str, Any]
    verdict: bool  # this row decides the PASS of a proposed algorithm


def kernel_cells(tables: list[str], datasets: list[str], n: dict[str, int]) -> list[Cell]:
    """The rows of Tables 2-4 (``n``: each data set's stream length, the horizon)."""
    out: list[Cell] = []
    for tb, ds, loss, T, _ in _table_rows("234", tables, datasets, n):
        out.append(Cell(tb, ds, "oks", "p2", {"convention": "p2", "loss": loss,
                                               "horizon": T}, False))
        out.append(Cell(tb, ds, "ioks", "code", {"loss": loss, "horizon": T,
                                                 "reference_quirks": True}, True))
        if tb != "2":  # the IOKS quirks hardly matter for logistic loss (renormalisation)
            out.append(Cell(tb, ds, "ioks", "intended", {"loss": loss, "horizon": T}, False))
        if tb == "2":
            out.append(Cell(tb, ds, "oks++", "code", {"loss": loss,
                                                      "reference_quirks": True}, True))
            out.append(Cell(tb, ds, "oks++", "intended", {"loss": loss}, False))
        elif tb == "3":
            out.append(Cell(tb, ds, "oks++", "code", {"loss": loss}, True))
    return out


def rf_cells(tables: list[str], datasets: list[str], n: dict[str, int],
             sizes: dict[str, dict[str, Any]]) -> list[Cell]:
    """The rows of the time-constrained tables at the sizes of ``sizes`` (the calibration of
    ``tuned_p2.json``; a size not calibrated leaves its row out)."""
    out: list[Cell] = []
    for tb, ds, loss, T, pub in _table_rows("567", tables, datasets, n):
        cal = sizes.get(f"T{tb}|{ds}", {}).get("matched", {})
        if "rf-oks++" in pub:
            out.append(Cell(tb, ds, "rf-oks++", "code", {"loss": loss, "n_components": 400,
                                                         "reference_quirks": True}, True))
            if loss == "logistic":
                out.append(Cell(tb, ds, "rf-oks++", "intended",
                                {"loss": loss, "n_components": 400}, False))
        D_ioks = 400 if loss == "absolute" else cal.get("rf-ioks")
        if D_ioks is not None:
            out.append(Cell(tb, ds, "rf-ioks", "code" if loss == "absolute" else "matched",
                            {"loss": loss, "n_components": D_ioks, "horizon": T,
                             "reference_quirks": True}, True))
        if loss != "absolute":
            out.append(Cell(tb, ds, "rf-ioks", "paper D",
                            {"loss": loss, "n_components": pub["rf-ioks"][0],
                             "horizon": T, "reference_quirks": True}, False))
        if "rf-oks" in cal:
            out.append(Cell(tb, ds, "rf-oks", "matched",
                            {"loss": loss, "n_components": cal["rf-oks"], "horizon": T}, False))
        if "lkmbooks" in cal:
            out.append(Cell(tb, ds, "lkmbooks", "matched",
                            {"loss": loss, "budget": cal["lkmbooks"], "horizon": T}, False))
        if "raker" in cal:
            for q, lab in ((True, "code"), (False, "intended")):
                out.append(Cell(tb, ds, "raker", f"matched, {lab}",
                                {"loss": loss, "n_components": cal["raker"], "horizon": T,
                                 "reference_quirks": q}, False))
    return out


# -- evaluation ----------------------------------------------------------------------------------
def cell_result(c: Cell, res: list[Any], R: int) -> dict[str, Any]:
    """A table row from its runs (``grid.KeyResult`` s), as the old script's rows."""
    classify = DATASETS[DS[c.dataset]].task == "classification"
    # 100·k/n as kernelstream.engine.evaluate computes it (the old table came from there)
    vals = [100.0 * r.mistakes / r.examples if classify else float(r.avg_loss) for r in res]
    m, s = report.mean_std(vals)
    secs = [r.seconds for r in res]
    n = res[0].examples
    out: dict[str, Any] = {
        "table": c.table, "dataset": c.dataset, "learner": c.learner, "setting": c.setting,
        "params": c.params, "verdict": c.verdict,
        "task": "classification" if classify else "regression", "loss": c.params["loss"],
        "metric": "AMR %" if classify else "AL", "mean": m, "std": s,
        "seconds": float(np.mean(secs)), "seconds_std": report.mean_std(secs)[1],
        "per_round_1e5s": float(np.mean(secs)) / n * 1e5,
        "n_sv": float(np.mean([r.n_sv for r in res])),
        "examples": n, "permutations": R, "machine": report.machine_info(),
        "runs": [{"r": r.r, "value": v, "seconds": r.seconds}
                 for r, v in zip(res, vals, strict=True)],
    }
    report.noskill(out, res, m)
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


def reproduce(opts: Options) -> Outcome:
    """Run the tables asked for and write ``p2.md`` / ``p2.json``."""
    ctx = opts.ctx
    tables = [t.removeprefix("p2-") for t in opts.pick(TABLES, "table")]
    datasets = opts.pick(DATA)
    t0 = time.perf_counter()
    n = {ds: len(load_dataset(DS[ds], ctx.data_dir)[1]) for ds in datasets}
    calibration: dict[str, Any] = {}
    if any(t in ("5", "6", "7") for t in tables):
        tuned = report.read_json(opts.tuned_file(TUNED_FILE))
        calibration = {k: v for k, v in tuned.get("calibration", {}).items()
                       if k.split("|")[0][1:] in tables and k.split("|")[1] in datasets}
    cells = kernel_cells(tables, datasets, n) + rf_cells(tables, datasets, n, calibration)
    runs = [Run(DS[c.dataset], c.learner, c.params) for c in cells]
    rows = [cell_result(c, res, ctx.permutations)
            for c, res in zip(cells, run_grid(runs, ctx), strict=True)]
    rows.sort(key=lambda c: (c["table"], DATA.index(c["dataset"]), c["learner"], c["setting"]))
    wall = time.perf_counter() - t0
    doc = {"generated_by": f"kernelstream reproduce {NAME}", "machine": report.machine_info(),
           "permutations": ctx.permutations, "base_seed": ctx.seed, "runner": ctx.runner,
           "workers": ctx.workers, "pipeline_args": ctx.pipeline_args, "tolerance_pp": TOL_PP,
           "tolerance_ratio": TOL_RATIO, "updated": report.now_utc(), "wall_seconds": wall,
           "cells": rows, "calibration": calibration}
    write_outputs(opts, doc)
    verdicts = [c for c in rows if judged("cells", c)]
    return Outcome(NAME, sum(c["passed"] for c in verdicts), len(verdicts), wall,
                   (opts.out_dir / f"{NAME}.md", opts.out_dir / f"{NAME}.json"))


def judged(key: str, cell: dict[str, Any]) -> bool:
    """A cell P2's verdict counts (``protocol.Judged``): a proposed algorithm's verdict row
    (its code setting) on a data set P2 used (bank8FM is indicative only)."""
    return (key == "cells" and bool(cell.get("verdict")) and "passed" in cell
            and cell.get("dataset") not in INDICATIVE)


# -- output --------------------------------------------------------------------------------------
def _fmt(v: float, metric: str) -> str:
    if not math.isfinite(v) or abs(v) >= 1e3:
        return f"{v:.1e} (diverged)"
    return f"{v:.2f}" if metric.startswith("AMR") else f"{v:.4f}"


def write_outputs(opts: Options, doc: dict[str, Any]) -> None:
    """``p2.md`` and ``p2.json`` (``doc``) in the output directory."""
    R, ctx = doc["permutations"], opts.ctx
    cells = doc["cells"]
    L: list[str] = [
        "# Paper 002 (OKS++, IOKS, random-feature versions): published vs ours",
        "",
        report.generated_line(NAME, doc["updated"],
                              f"evaluation wall time {doc['wall_seconds'] / 60:.1f} min"),
        "",
        "* Machine: " + report.machines_line(cells, lambda c: c["table"], "tables")
        + "; " + report.runner_line(ctx) + " (P2 used R on an i7-1165G7, so seconds are not "
        "comparable; time-matched sizes are calibrated by `kernelstream reproduce p2 "
        "--retune`, on the machine named in the calibration table).",
        f"* Protocol: prequential test-then-train, mean ± std (ddof=1) over R = "
        f"{R} permutations r = 0..{R - 1} (`kernelstream.seeding`, "
        f"base seed {ctx.seed}), as P2 (10). K = 6 Gaussian kernels σ ∈ {{2^-2..2^3}}; "
        "T-dependent constants use the true stream length. AMR = mistake rate (%); AL = "
        "average training loss of the sampled hypothesis (square loss without ½).",
        "* Data: " + "; ".join(f"**{d}**: {DATASETS[DS[d]].note}" for d in DATA) + ".",
        "* PASS (proposed algorithms only): AMR ≤ published + 2 pp; AL ≤ 1.25 × published. "
        "The verdict row of each proposed algorithm is its **code** setting (the one that "
        "produced the published numbers); other settings are shown for comparison "
        "(`intended` = `reference_quirks=False`).",
        report.NOSKILL_NOTE,
        "* Tables 6/9 of P2 print AL × 100; the published values below are converted back.",
        "",
    ]
    same = [c for c in cells if judged("cells", c)]
    other = [c for c in cells if c.get("verdict") and "passed" in c
             and c["dataset"] in INDICATIVE]
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
                pas = report.pass_mark(c["passed"], c) + star + (
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
        L += ["## Time-budget matching (§2.5), from `tuned_p2.json`", "",
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
    report.write_report(opts.out_dir, NAME, L, doc)


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
    "is unknown (c = 25 is the constant of the authors' R code for the logistic and square "
    "losses, `learners/oks.py`).",
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


