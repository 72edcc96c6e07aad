"""The papers' tuning protocols: ``kernelstream reproduce PAPER --retune`` (docs/protocols.md).

Each function here redoes what produced a committed tuned file of
:data:`kernelstream.experiments.protocol.TUNED_DIR` (package data), as the papers tuned:

* ``baselines`` → ``tuned_params.json``: the P3 group's Gaussian width by kernel–target
  alignment (Cristianini, Shawe-Taylor, Elisseeff & Kandola, "On kernel-target alignment",
  NIPS 2001) and by the online mistake rate, then each learner's grid at each width (Zhang &
  Liao, "Incremental randomized sketching for online kernel learning", ICML 2019, §6); the P4
  group's step sizes (Lu, Sahoo, Zhao & Hoi, "Sparse passive-aggressive learning for bounded
  online kernel methods", ACM TIST 2018, §6); the diagnostics' grids.
* ``p0`` → ``tuned_params_p0.json``: the KOGD step size of OKS-SIL, OKL-GD and OKS (Zhang &
  Liao, "Online kernel selection via incremental sketched kernel alignment", IJCAI 2020, §6).
* ``p3`` → ``tuned_params_skegd.json``: SkeGD's η × λ at each width of ``tuned_params.json``,
  FOGD's η on german, and the stream-tuned german-1 variants (Zhang & Liao, ICML 2019, §6,
  Table 4).
* ``p4`` → ``tuned_p4.json``: SPA's η; BPA-S, BOGD and OSKL at SPA's #SV; Per(*)'s kernel;
  BOGD's η, λ of the P4-6 rows (Lu et al., ACM TIST 2018, §6, Tables 2, 5, 6).
* ``p2`` → ``tuned_p2.json``: the time-budget matching of the random-feature sizes (Li & Liao,
  "Improved regret bounds for online kernel selection under bandit feedback", ECML-PKDD 2022,
  §6.2).

Every grid point is a key of the replay (:func:`kernelstream.experiments.grid.run_grid`, the
engine's one test-then-train loop) on the held-out *tuning permutation*
:data:`~kernelstream.experiments.tuning.TUNE_PERM` (1000, ``Run.first_permutation``; never one
of the evaluation permutations 0..R−1), whole or cut to a prefix (``Run.rows``); the learner
seed is ``seeding.learner_seed(seed, 1000, learner)``. The choice is
:func:`~kernelstream.experiments.tuning.first_best`: the lowest mistake rate, ties to the earlier
grid point (P3's SkeGD: to the lower average hinge loss first). These are the streams, seeds and
rules the benchmarks/reproduce_*.py scripts used, so a retune of the committed setting writes
the committed parameters (tests/experiments/test_retune.py checks it on german).

P2's matching is a measurement, not a grid: the per-round CPU time of this process (best of 3,
``time.process_time``; the replay's timings are wall clock, which the other processes of a
shared machine inflate) of each size on the calibration stream, a line fitted and solved for
the reference learner's time. Its sizes are the machine's: recalibrate only on the machine whose
sizes you want.

A retune updates the entries of the data sets it ran in a copy of the tuned file it read (the
package's, or ``--tuned-dir``'s) and writes that copy to the run's ``--out-dir``; the evaluation
that follows reads it from there (``Options.retuned``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kernelstream import learners
from kernelstream.engine.orders import PRESETS
from kernelstream.experiments import baselines, p0, p2, p3, p4, report
from kernelstream.experiments.datasets import load_dataset
from kernelstream.experiments.grid import KeyResult, Run, run_grid
from kernelstream.experiments.protocol import Options
from kernelstream.experiments.tuning import TUNE_PERM, first_best
from kernelstream.learners._multikernel import M_KERNELS, pool_kernel_params, pool_labels
from kernelstream.learners.kernels import kernel_alignment, sq_dists
from kernelstream.seeding import learner_seed, permutation

# paper -> its tuned file (the file its evaluation reads)
_MODULES = {"baselines": baselines, "p0": p0, "p2": p2, "p3": p3, "p4": p4}
TUNED_FILES = {paper: m.TUNED_FILE for paper, m in _MODULES.items()}
# P3's Gaussian width grid σ = 2^e, e ∈ {-5, -4.5, …, 7} (kernel alignment and width sweeps)
SIGMA_EXPONENTS = [e / 2 for e in range(-10, 15)]
KA_ROWS = 2000  # rows of the tuning permutation for kernel alignment
WIDTH_ROWS = 10_000  # rows of the tuning permutation for the online width selection
P4_TUNE_ROWS = 60_000  # P4: longer streams are tuned on this prefix (covtype)
P4_PER_TUNE_ROWS = 10_000  # P4-5: Per(*) on a9a and magic04 (16 kernel Perceptrons)
P46_TUNE_ROWS = 20_000  # P4-6: BOGD's η, λ
P2_CALIB_ROWS = 5000  # P2: rows of the calibration stream (permutation TUNE_PERM)


def retune(paper: str, opts: Options) -> Path:
    """Run ``paper``'s tuning protocol for ``opts``' data sets (and tables), write the updated
    tuned file into ``opts.out_dir`` and record it in ``opts.retuned``; its path.

    The file's ``meta`` (when, where, how long) describes its last retune of the whole
    protocol; a retune of some data sets or tables leaves it as read, since the other entries
    are copied unchanged, and adds itself to ``meta["partial_retunes"]`` instead (what it
    retuned, when, in how many seconds: :func:`report.tuning_when` shows them)."""
    name = TUNED_FILES[paper]
    doc = report.read_json(opts.tuned_file(name))
    before = dict(doc.get("meta", {}))
    t0 = time.perf_counter()
    _PROTOCOLS[paper](doc, opts)
    seconds = round(time.perf_counter() - t0, 1)
    mod = _MODULES[paper]
    datasets, tables = opts.pick(mod.DATA), opts.pick(mod.TABLES, "table")
    if datasets == list(mod.DATA) and tables == list(mod.TABLES):
        meta = doc.setdefault("meta", {})
        meta["tuning_seconds"] = seconds
        meta.pop("partial_retunes", None)  # every entry is this retune's now
    else:
        now = doc.get("meta", {})
        part = {"datasets": datasets, "seconds": seconds,
                **({"tables": tables} if tables != list(mod.TABLES) else {}),
                **{k: now[k] for k in ("tuned_at", "calibrated_at", "machine", "base_seed")
                   if k in now}}
        # an earlier partial retune of no more than this one's is superseded
        older = [p for p in before.get("partial_retunes", [])
                 if not (set(p.get("datasets", ())) <= set(datasets)
                         and set(p.get("tables", mod.TABLES)) <= set(tables))]
        meta = doc["meta"] = {**before, "partial_retunes": [*older, part]}
    meta["written_by"] = f"kernelstream reproduce {paper} --retune"
    path = Path(opts.out_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    report.write_json(path, doc)
    opts.retuned[name] = path
    return path


def _meta(doc: dict[str, Any], opts: Options, **more: Any) -> dict[str, Any]:
    """The tuned file's ``meta``, updated with what every retune records first: when and where
    it was tuned, the base seed and the tuning permutation."""
    meta: dict[str, Any] = doc.setdefault("meta", {})
    meta.update({"tuned_at": report.now_utc(), "machine": report.machine_info(),
                 "base_seed": opts.ctx.seed, "tune_perm": TUNE_PERM, **more})
    return meta


def _run(ds: str, learner: str, params: dict[str, Any], rows: int | None = None,
         stream: str | None = None) -> Run:
    """A grid point on the tuning permutation (its first ``rows`` positions)."""
    return Run(ds, learner, params, stream=stream, permutations=1, first_permutation=TUNE_PERM,
               rows=rows)


def _scores(runs: list[Run], opts: Options) -> list[KeyResult]:
    """The result of each tuning run (one replay per data set and prefix)."""
    return [rr[0] for rr in run_grid(runs, opts.ctx)]


def _n(ds: str, opts: Options) -> int:
    return int(load_dataset(ds, opts.ctx.data_dir)[1].shape[0])


def _tuning_rows(ds: str, opts: Options, ka_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``ka_rows`` rows of the tuning permutation (kernel alignment's sample)."""
    X, y = load_dataset(ds, opts.ctx.data_dir)
    idx = permutation(X.shape[0], opts.ctx.seed, TUNE_PERM)[:ka_rows]
    return X[idx], y[idx]


# -- P0 ----------------------------------------------------------------------------------------
def _p0(doc: dict[str, Any], opts: Options) -> None:
    meta = doc.setdefault("meta", {})
    for e in (e for k, v in doc.items() if k != "meta" for e in v.values()):
        e.setdefault("tuned_at", meta.get("tuned_at", "?"))  # before meta moves to this run
    _meta(doc, opts, eta_grid=p0.ETA_GRID)
    for ds in opts.pick(p0.P0_DATASETS):
        n = _n(ds, opts)
        plan = [(name, sp, p0.fixed_params(name, n)) for name in p0.P0_LEARNERS
                if name in learners.available() and (sp := p0.step_param(name)) is not None]
        runs = [_run(ds, name, {**fx, sp: v}) for name, sp, fx in plan for v in p0.ETA_GRID]
        res = iter(_scores(runs, opts))
        entry = doc.setdefault(ds, {})
        for name, sp, fx in plan:
            rr = [(v, next(res).mistake_rate) for v in p0.ETA_GRID]
            best, mr = first_best(rr)  # ties: the smaller step (earlier)
            entry[name] = {"params": {**fx, sp: best}, "tuned": sp,
                           "tuned_at": report.now_utc(), "tune_mistake_rate": round(mr, 4),
                           "grid": [[v, round(m, 4)] for v, m in rr]}


# -- P3 (SkeGD) ----------------------------------------------------------------------------------
P3_ETA = [10.0**e for e in range(-5, 1)]
P3_LAM = [10.0**e for e in range(-4, 2)]


def _gamma_log2(sigma_log2: float) -> float:
    return 1.0 / (2.0 * 4.0**sigma_log2)


def _skegd_grid() -> list[dict[str, Any]]:
    return [{"eta": e, "lam": lam} for e in P3_ETA for lam in P3_LAM if e * lam < 1.0]


def _skegd_fixed(ds: str, n: int) -> dict[str, Any]:
    """Settings fixed by the paper for Table P3-3 (the learner's defaults otherwise)."""
    return {"budget": p3.BUDGET[ds], "horizon": n, "theta": 0.3}


def _select(runs: list[Run], opts: Options) -> dict[str, Any]:
    """Lowest mistake rate on the tuning stream; ties (frequent: small steps all give the
    majority-class rate) go to the lower average hinge loss, the objective the learners
    minimise, then to the earlier grid point."""
    res = [(round(k.mistake_rate, 9), k.avg_loss if k.avg_loss is not None else math.inf)
           for k in _scores(runs, opts)]
    i = first_best(range(len(runs)), lambda j: res[j])
    shown = ("eta", "eta2", "lam")
    return {"params": runs[i].params, "tune_mistake_rate": round(res[i][0], 4),
            "tune_hinge": round(res[i][1], 5),
            "grid": [[report.fmt_params({k: v for k, v in r.params.items() if k in shown}),
                      round(mr, 4), round(hl, 5)] for r, (mr, hl) in zip(runs, res, strict=True)]}


def _p3_widths(ds: str, base: dict[str, Any], opts: Options) -> dict[str, float]:
    """``{"ka": e, "online": e'}`` (log2 σ) from ``tuned_params.json``, else KA here."""
    e = base.get("p3", {}).get(ds, {})
    if "sigma_ka_log2" in e:
        out = {"ka": float(e["sigma_ka_log2"])}
        if "sigma_online_log2" in e:
            out["online"] = float(e["sigma_online_log2"])
        return out
    X, y = _tuning_rows(ds, opts, KA_ROWS)
    ka = kernel_alignment(X, y, [_gamma_log2(s) for s in SIGMA_EXPONENTS])
    return {"ka": SIGMA_EXPONENTS[int(np.argmax(ka))]}


def _p3(doc: dict[str, Any], opts: Options) -> None:
    base = report.read_json(opts.tuned_file(p3.BASE_TUNED_FILE))
    _meta(doc, opts, eta=P3_ETA, lam=P3_LAM, widths_from=p3.BASE_TUNED_FILE,
          selection="lowest mistake rate, ties by lower average hinge loss")
    sk = doc.setdefault("skegd", {})
    datasets = opts.pick(p3.DATASETS_P3)
    for ds in datasets:
        n = _n(ds, opts)
        entry = sk.setdefault(ds, {})
        for mode, e in _p3_widths(ds, base, opts).items():
            if mode == "online" and e == entry.get("ka", {}).get("sigma_log2"):
                entry["online"] = {"same_as": "ka"}
                continue
            grid = [_run(ds, "skegd", {**_skegd_fixed(ds, n), **g, "gamma": _gamma_log2(e)})
                    for g in _skegd_grid()]
            entry[mode] = {"sigma_log2": e, **_select(grid, opts)}
        lk = base.get("diagnostics", {}).get(f"lsokl-{ds}", {})
        cfg = next((v for k, v in lk.items() if k != "note"), None)
        if cfg:  # diagnostic: the LSOKL toolbox's own file at its KA width
            run_ds, e = f"{ds}_lsokl", float(cfg["sigma_log2"])
            grid = [_run(run_ds, "skegd", {**_skegd_fixed(ds, n), **g, "gamma": _gamma_log2(e)})
                    for g in _skegd_grid()]
            entry["lsokl"] = {"sigma_log2": e, "run_dataset": run_ds, **_select(grid, opts)}
    if "german" in datasets and "p3-4" in opts.pick(p3.TABLES, "table"):
        _p3_adversarial(doc, base, opts)


def _p3_adversarial(doc: dict[str, Any], base: dict[str, Any], opts: Options) -> None:
    """FOGD's η on german (the paper's protocol for Table P3-4: parameters of the i.i.d.
    setting), and — not the paper's protocol, reported separately — η (and λ) of SkeGD, NOGD
    and FOGD on a german-1 stream of its own (index ``TUNE_PERM``)."""
    e = _p3_widths("german", base, opts)["ka"]
    g = _gamma_log2(e)
    fogd = [{"n_components": 400, "eta": eta, "gamma": g} for eta in P3_ETA]
    doc["fogd_german"] = {"sigma_log2": e, **_select([_run("german", "fogd", p) for p in fogd],
                                                     opts)}
    T = PRESETS["german-1"].length
    grids = {
        "skegd": [{"budget": 100, "horizon": T, "theta": 0.01, **p, "gamma": g}
                  for p in _skegd_grid()],
        "nogd": [{"budget": 100, "rank": 10, "init": "carry", "eta": eta, "eta2": eta,
                  "gamma": g} for eta in P3_ETA],
        "fogd": fogd,
    }
    adv = doc.setdefault("adversarial_tuned", {"stream": "german-1", "index": TUNE_PERM,
                                               "sigma_log2": e})
    for name, grid in grids.items():
        adv[name] = _select([_run("german", name, p, stream="german-1") for p in grid], opts)


# -- P4 ----------------------------------------------------------------------------------------
P4_ETA = [10.0**e for e in range(3, -4, -1)]
P4_C = [0.25, 0.5, 1.0, 2.0]


def _p4_rows(ds: str, opts: Options) -> int | None:
    """A long stream is tuned on a prefix of the tuning permutation."""
    return P4_TUNE_ROWS if _n(ds, opts) > 2 * P4_TUNE_ROWS else None


def _p4(doc: dict[str, Any], opts: Options) -> None:
    _meta(doc, opts, tune_rows=P4_TUNE_ROWS, per_tune_rows=P4_PER_TUNE_ROWS,
          eta_grid=P4_ETA, c_grid=P4_C, p42_gamma=p4.P42_GAMMA)
    tables = opts.pick(p4.TABLES, "table")
    if "p4-2" in tables:
        p42 = doc.setdefault("p4-2", {})
        for ds in opts.pick(p4.P42_DATASETS):
            rows = _p4_rows(ds, opts)
            entry: dict[str, Any] = {"rows": rows}
            base = {"gamma": p4.P42_GAMMA}
            # SPA is cheap: always tuned on the whole tuning permutation (a prefix misleads:
            # on covtype the first 60k rows prefer η = 0.001, 32 % error on the full stream,
            # against 28 % for η ≥ 1)
            spa_p = {**base, "alpha": 1.0, "beta": p4.P42_BETA[ds]}
            spa = list(zip(P4_ETA, _scores([_run(ds, "spa", {**spa_p, "eta": e})
                                            for e in P4_ETA], opts), strict=True))
            e_best, r_best = first_best(spa, lambda t: t[1].mistake_rate)
            entry["spa"] = {"params": {**spa_p, "eta": e_best},
                            "tune_mistake_rate": r_best.mistake_rate, "tune_n_sv": r_best.n_sv,
                            "grid": [[e, r.mistake_rate, r.n_sv] for e, r in spa]}
            # the baselines are tuned at B = SPA's #SV on the rows they are tuned on
            B = int(r_best.n_sv if rows is None else _scores(
                [_run(ds, "spa", {**spa_p, "eta": e_best}, rows)], opts)[0].n_sv)
            entry["tune_budget"] = B
            grids: dict[str, list[dict[str, Any]]] = {
                "bpa-s": [{"c": c} for c in P4_C],
                "bogd": [{"eta": e, "lam": 0.0, "variant": "sol"} for e in P4_ETA],
            }
            runs = [_run(ds, m, {**base, "budget": max(B, 1), **g}, rows)
                    for m, grid in grids.items() for g in grid]
            res = iter(_scores(runs, opts))
            for m, grid in grids.items():
                rr = [(g, next(res)) for g in grid]
                g, r = first_best(rr, lambda t: t[1].mistake_rate)
                entry[m] = {"params": {**base, **g}, "tune_mistake_rate": r.mistake_rate,
                            "tune_budget": B,
                            "grid": [[report.fmt_params(g), r.mistake_rate] for g, r in rr]}
            entry["oskl"] = _p4_oskl(ds, rows, B, opts)
            p42[ds] = entry
    if "p4-5" in tables:
        p45 = doc.setdefault("p4-5", {})
        for ds in opts.pick(p4.P45_DATASETS):
            n = _n(ds, opts)
            rows = min(P4_PER_TUNE_ROWS, n) if ds in p4.LARGE_OMKC else _p4_rows(ds, opts)
            rows = None if rows is not None and rows >= n else rows
            per = _scores([_run(ds, "perceptron", pool_kernel_params(i), rows)
                           for i in range(M_KERNELS)], opts)
            i, r = first_best(enumerate(per), lambda t: t[1].mistake_rate)
            p45[ds] = {"per*": {"params": pool_kernel_params(i), "kernel": pool_labels()[i],
                                "tune_mistake_rate": r.mistake_rate, "rows": rows,
                                "grid": [[pool_labels()[j], q.mistake_rate, q.n_sv]
                                         for j, q in enumerate(per)]}}
    if "p4-6" in tables:
        _p46(doc, opts)


def _p46(doc: dict[str, Any], opts: Options) -> None:
    """BOGD's η, λ of the DD-/SD-BOGD rows on the first :data:`P46_TUNE_ROWS` rows of the
    tuning permutation, at the evaluation budget: our BOMKC(SPA)'s #SV in ``p4.json`` of
    ``--out-dir`` (its Table P4-5 row), else the published one."""
    p46 = doc.setdefault("p4-6", {})
    cells = report.read_json(Path(opts.out_dir) / f"{p4.NAME}.json").get("cells", [])
    for ds in opts.pick(p4.P46_DATASETS):
        B = p4.bomkc_sv(cells, ds) or int(p4.P46_PUB[ds]["dd-rbp"][2])
        entry = p46.setdefault(ds, {})
        for m in [m for m in p4.P46_VARIANTS if p4.P46_VARIANTS[m][1] == "bogd"]:
            # ηλ ≥ 1 would flip or zero the hypothesis every round (the learner rejects it)
            grid = [{"eta": e, "lam": lam} for e in p4.P46_BOGD_GRID
                    for lam in p4.P46_BOGD_GRID if e * lam < 1.0]
            res = _scores([_run(ds, p4.P46_VARIANTS[m][0],
                                {**p4.p46_params(m), **g, "budget": B}, P46_TUNE_ROWS)
                           for g in grid], opts)
            g, r = first_best(zip(grid, res, strict=True), lambda t: t[1].mistake_rate)
            entry[m] = {"params": {**p4.p46_params(m), **g},
                        "tune_mistake_rate": r.mistake_rate, "tune_budget": B,
                        "rows": P46_TUNE_ROWS,
                        "grid": [[report.fmt_params(g), r.mistake_rate]
                                 for g, r in zip(grid, res, strict=True)]}


def _p4_oskl(ds: str, rows: int | None, target: int, opts: Options) -> dict[str, Any]:
    """For each η: G with #SV ≈ target (secant steps on log G, since #SV ∝ 1/G; at most 5);
    then the best η. The η's steps run side by side, one replay per step."""
    base = {"gamma": p4.P42_GAMMA, "loss": "logistic"}
    G = dict.fromkeys(P4_ETA, 10.0)
    best: dict[float, tuple[float, KeyResult]] = {}
    active = list(P4_ETA)
    for _ in range(5):
        if not active:
            break
        res = _scores([_run(ds, "oskl", {**base, "eta": e, "grad_bound": G[e]}, rows)
                       for e in active], opts)
        still = []
        for e, r in zip(active, res, strict=True):
            if e not in best or abs(r.n_sv - target) < abs(best[e][1].n_sv - target):
                best[e] = (G[e], r)
            if abs(r.n_sv - target) > max(0.03 * target, 2):
                G[e] = G[e] * max(r.n_sv, 1) / max(target, 1)
                still.append(e)
        active = still
    out = [(e, *best[e]) for e in P4_ETA]
    e, g, r = first_best(out, lambda t: t[2].mistake_rate)
    return {"params": {**base, "eta": e, "grad_bound": g}, "tune_mistake_rate": r.mistake_rate,
            "tune_n_sv": r.n_sv, "target_n_sv": target,
            "grid": [[ee, gg, rr.mistake_rate, rr.n_sv] for ee, gg, rr in out]}


# -- baselines (P3 group, P4 group, diagnostics) ------------------------------------------------
def _centered_alignment(X: np.ndarray, y: np.ndarray, gammas: list[float]) -> np.ndarray:
    """Centered kernel–target alignment (Cortes, Mohri & Rostamizadeh, "Algorithms for
    learning kernels based on centered alignment", JMLR 2012), for the record."""
    d2 = sq_dists(X, X)
    out = []
    for g in gammas:
        K = np.exp(-g * d2)
        Kc = K - K.mean(0)[None, :] - K.mean(1)[:, None] + K.mean()
        out.append(float(y @ Kc @ y) / (float(np.linalg.norm(Kc)) * len(y)))
    return np.asarray(out)


def _ka_select(ds: str, opts: Options) -> tuple[float, np.ndarray, np.ndarray]:
    """KA-selected log2 width, and the alignment and centered alignment of every σ, on the
    first :data:`KA_ROWS` rows of the tuning permutation."""
    X, y = _tuning_rows(ds, opts, KA_ROWS)
    gam = [report.gamma_of(2.0**e) for e in SIGMA_EXPONENTS]
    ka = kernel_alignment(X, y, gam)
    return SIGMA_EXPONENTS[int(np.argmax(ka))], ka, _centered_alignment(X, y, gam)


def _sigma_log2_of(gamma: float) -> float:
    return round(2.0 * math.log2(1.0 / math.sqrt(2.0 * gamma))) / 2.0


def _best_per_learner(runs: list[Run], res: list[KeyResult], names: list[str],
                      shown: Callable[[str, str], bool],
                      extra: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Each learner's best grid point (lowest mistake rate) with ``extra`` and the whole grid
    (parameters ``k`` with ``shown(learner, k)``), as stored in the tuned file."""
    out = {}
    for m in names:
        rr = [(r.params, k.mistake_rate) for r, k in zip(runs, res, strict=True)
              if r.learner == m]
        params, mr = first_best(rr)
        out[m] = {"params": params, **(extra or {}), "tune_mistake_rate": round(mr, 4),
                  "grid": [[report.fmt_params({k: v for k, v in p.items() if shown(m, k)}),
                            round(v, 4)] for p, v in rr] if len(rr) > 1 else []}
    return out


def _width_runs(ds: str, names: list[str], e: float, rows: int | None = None) -> list[Run]:
    return [_run(ds, m, {**baselines.p3_fixed(m, ds), **g, "gamma": report.gamma_of(2.0**e)},
                 rows) for m in names for g in baselines.p3_grid(m)]


def _baselines(doc: dict[str, Any], opts: Options) -> None:
    avail = set(learners.available())
    p3_l = [m for m in baselines.P3_LEARNERS if m in avail]
    p4_l = [m for m in baselines.P4_LEARNERS if m in avail]
    _meta(doc, opts, ka_rows=KA_ROWS, width_rows=WIDTH_ROWS, sigma_grid="2^-5:0.5:7",
          eta_p3=baselines.ETA_P3, lam_p3=baselines.LAM_P3, bpas_c=baselines.BPAS_C,
          eta_p4=baselines.ETA_P4, pai_c=baselines.PAI_C, p4_gamma=baselines.P4_GAMMA)
    datasets = opts.pick(baselines.P3_DATASETS)
    tables = opts.pick(baselines.TABLES, "table")
    p3t = doc.setdefault("p3", {})
    for ds in datasets if "p3" in tables else []:
        entry = p3t.setdefault(ds, {})
        # 1. kernel alignment on a subsample of the tuning permutation
        e_ka, ka, cka = _ka_select(ds, opts)
        entry["sigma_ka_log2"] = e_ka
        entry["sigma_centered_ka_log2"] = SIGMA_EXPONENTS[int(np.argmax(cka))]
        entry["alignment"] = {f"{e:g}": round(float(v), 6)
                              for e, v in zip(SIGMA_EXPONENTS, ka, strict=True)}
        entry["centered_alignment"] = {f"{e:g}": round(float(v), 6)
                                       for e, v in zip(SIGMA_EXPONENTS, cka, strict=True)}
        # 2. the width by online mistake rate: for each σ, the mean over learners of their
        # best-of-grid mistake rate on the first WIDTH_ROWS rows of the tuning permutation
        rows = min(_n(ds, opts), WIDTH_ROWS)
        runs = [r for e in SIGMA_EXPONENTS for r in _width_runs(ds, p3_l, e, rows)]
        res = _scores(runs, opts)
        scores: dict[float, float] = {}
        per_sigma: dict[str, dict[str, float]] = {}
        per = len(runs) // len(SIGMA_EXPONENTS)
        for i, e in enumerate(SIGMA_EXPONENTS):
            mine = list(zip(runs[i * per:(i + 1) * per], res[i * per:(i + 1) * per],
                            strict=True))
            best = {m: min(k.mistake_rate for r, k in mine if r.learner == m) for m in p3_l}
            per_sigma[f"{e:g}"] = {m: round(v, 4) for m, v in best.items()}
            scores[e] = float(np.mean(list(best.values())))
        e_on = min(scores, key=lambda e: (scores[e], e))
        entry["sigma_online_log2"] = e_on
        entry["online_width_rows"] = rows
        entry["online_width_score"] = {f"{e:g}": round(v, 4) for e, v in sorted(scores.items())}
        entry["online_width_best_per_learner"] = per_sigma
        # 3. hyper-parameters on the whole tuning permutation for each selected width
        sel = entry.setdefault("selected", {})
        for mode, e in (("ka", e_ka), ("online", e_on)):
            runs = _width_runs(ds, p3_l, e)
            sel.setdefault(mode, {}).update(_best_per_learner(
                runs, _scores(runs, opts), p3_l,
                lambda m, k: k in baselines.p3_grid(m)[0], {"sigma_log2": e}))
    p4t = doc.setdefault("p4", {})
    for ds in [d for d in datasets if d in baselines.P4_DATASETS] if "p4" in tables else []:
        runs = [_run(ds, m, {**g, "gamma": baselines.P4_GAMMA})
                for m in p4_l for g in baselines.p4_grid(m)]
        p4t.setdefault(ds, {}).update(_best_per_learner(
            runs, _scores(runs, opts), p4_l, lambda m, k: k != "gamma"))
    if "diag" in tables:
        _diagnostics(doc, datasets, opts)


def _diagnostics(doc: dict[str, Any], datasets: list[str], opts: Options) -> None:
    """The diagnostic configurations' grids on the tuning permutation (whole)."""
    avail = set(learners.available())
    out = doc.setdefault("diagnostics", {})
    for k in [k for k in out if k not in {d.key for d in baselines.DIAGNOSTICS}]:
        del out[k]  # a diagnostic that no longer exists
    for d in baselines.DIAGNOSTICS:
        names = [m for m in d.learners if m in avail]
        if d.pub_dataset not in datasets or not names:
            continue
        exps = [_ka_select(d.dataset, opts)[0]] if d.width == "ka" else SIGMA_EXPONENTS
        runs = [_run(d.dataset, m, {**baselines.p3_fixed(m, d.pub_dataset), **dict(d.fixed),
                                    **g, "gamma": report.gamma_of(2.0**e)})
                for e in exps for m in names for g in _diag_grid(d, m)]
        res = _scores(runs, opts)
        entry = out.setdefault(d.key, {})
        entry["note"] = d.note
        for m in names:
            r, k = first_best([(r, k) for r, k in zip(runs, res, strict=True) if r.learner == m],
                              lambda t: t[1].mistake_rate)
            entry[m] = {"params": r.params, "sigma_log2": _sigma_log2_of(r.params["gamma"]),
                        "tune_mistake_rate": round(k.mistake_rate, 4)}


def _diag_grid(d: baselines.Diag, m: str) -> list[dict[str, Any]]:
    if m == "nogd" and d.eta2_free:
        return [{"eta": e1, "eta2": e2} for e1 in baselines.ETA_P3 for e2 in baselines.ETA_P3]
    return baselines.p3_grid(m)


# -- P2: time-budget matching -----------------------------------------------------------------
def _per_round_us(name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray,
                  reps: int = 3) -> float:
    """Best-of-``reps`` per-round *CPU* time of this process (µs) of one pass over the
    stream: on a shared machine the wall clock mostly measures the other processes' load."""
    best = math.inf
    for rep in range(reps):
        m = learners.make(name, seed=learner_seed(0, 10_000 + rep, name), **params)
        t0 = time.process_time()
        m.predict_learn_many(X, y)
        best = min(best, time.process_time() - t0)
    return best / len(y) * 1e6


def _calibrate(tb: str, ds: str, opts: Options) -> dict[str, Any]:
    """Per-round times of table ``tb``'s reference learner (D = 400) and of every sized
    learner on its grid; each size solved from ``time = a + b·size`` for the reference's."""
    loss = p2.LOSS_OF_TABLE[tb]
    X, y = load_dataset(p2.DS[ds], opts.ctx.data_dir)
    rows = min(len(y), P2_CALIB_ROWS)
    idx = permutation(X.shape[0], opts.ctx.seed, TUNE_PERM)[:rows]
    Xc, yc = np.ascontiguousarray(X[idx]), y[idx]
    ref = "rf-ioks" if loss == "absolute" else "rf-oks++"
    ref_params: dict[str, Any] = {"loss": loss, "n_components": 400, "reference_quirks": True}
    if ref == "rf-ioks":
        ref_params["horizon"] = rows
    t_ref = _per_round_us(ref, ref_params, Xc, yc)
    out: dict[str, Any] = {"reference": ref, "reference_us": t_ref, "rows": rows,
                           "grid_us": {}, "matched": {}, "machine": report.machine_info()}
    for name, grid in p2.RF_GRID.items():
        if name == ref or (name == "rf-ioks" and loss == "absolute"):
            continue
        ts = [_per_round_us(name, {"loss": loss, p2.SIZE_PARAM[name]: g, "horizon": rows},
                            Xc, yc) for g in grid]
        out["grid_us"][name] = dict(zip(map(str, grid), ts, strict=True))
        b, c = np.polyfit(np.array(grid, dtype=float), np.array(ts), 1)
        if b > 0:
            g_star = (t_ref - c) / b
        else:  # timing noise: take the closest grid point
            g_star = grid[int(np.argmin(np.abs(np.array(ts) - t_ref)))]
        g_star = min(max(g_star, grid[0]), grid[-1])
        out["matched"][name] = max(10, round(g_star / 10.0) * 10)
        opts.ctx.log(f"calibration T{tb} {ds} {name}: reference {t_ref:.1f} us, grid "
                     + ", ".join(f"{g}:{t:.1f}" for g, t in zip(grid, ts, strict=True))
                     + f" -> {out['matched'][name]}")
    return out


def _p2(doc: dict[str, Any], opts: Options) -> None:
    doc["meta"] = {"written_by": "kernelstream reproduce p2 --retune",
                   "calibrated_at": report.now_utc(), "calib_perm": TUNE_PERM,
                   "calib_rows": P2_CALIB_ROWS, "base_seed": opts.ctx.seed}
    cal = doc.setdefault("calibration", {})
    tables = [t.removeprefix("p2-") for t in opts.pick(p2.TABLES, "table")]
    datasets = opts.pick(p2.DATA)
    for tb, pub in (("5", p2.T5), ("6", p2.T6), ("7", p2.T7)):
        for ds in [d for d in pub if d in datasets and tb in tables]:
            cal[f"T{tb}|{ds}"] = _calibrate(tb, ds, opts)


_PROTOCOLS: dict[str, Callable[[dict[str, Any], Options], None]] = {
    "baselines": _baselines, "p0": _p0, "p2": _p2, "p3": _p3, "p4": _p4}
