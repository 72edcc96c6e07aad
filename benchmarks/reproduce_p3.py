"""Published vs ours: SkeGD (paper 003, Zhang & Liao, ICML 2019), ALGORITHMS.md §5.4.

* Table P3-3 — online mistake rate of SkeGD on german, svmguide3, spambase (B = 100) and a9a,
  w7a (B = 200): hinge loss, τ = 0.2, s_p = 3B/4, s_m = τ s_p, d_b = 4, k = 0.1B,
  ρ = ⌊θ(T − B)⌋ with θ = 0.3 (the paper's "ρ = 0.3T"; ``horizon`` = T = stream length),
  randomized eigen-decomposition. Each run is counted two ways: all T rounds (the paper's
  printed formula) and only the mistakes after the stage switch T₀, over T (how the public
  SkeGD code [C-FORKS] counts; the verdict). PASS = ours ≤ published + 2 pp.
* Table P3-4 — adversarial streams german-1 / german-2 (§2.6, :mod:`kernelstream.streams`):
  SkeGD with θ ∈ {0.1, 0.01, 0.005, 0.001}, NOGD (B = 100, k = 10, stage-1 model carried over
  as LSOKL does) and FOGD with D = 4B = 400, with η (and λ) tuned as Section 6.3 tunes, on a
  separate german-1 stream ("stream-tuned", the verdict), and — the other reading of the
  paper's "identical parameters" — with the η and λ tuned on i.i.d. german ("german-η": SkeGD's
  of Table P3-3, NOGD's of ``benchmarks/tuned_params.json``, FOGD's tuned on german).
  PROS-N-KONS is not implemented.
* Table P3-2 — kernel approximation (§2.7): relative error ``‖K̃ − K‖_F²/‖K‖_F²`` on the whole
  stream of german and svmguide3, B ∈ {100, 200}, for IRS (SkeGD's feature map after the last
  round, s_p = 3B/4, s_m = B/2 i.e. τ = 2/3, k = 0.2B, d_b = 4, θ = 0.3) and INys (landmarks =
  the first B examples of the stream, rank 0.2B).

Widths: the Gaussian width of every dataset comes from ``benchmarks/tuned_params.json`` (written
by ``reproduce_baselines.py --tune``): **ka** = kernel–target alignment over σ ∈ 2^(-5:0.5:7) —
the paper's rule — and, reported as a second row where it differs, **online** = the width the
seven P3 baselines found best by online mistake rate (not the paper's rule). If that file has
no entry for a dataset, the KA width is computed here the same way.

``--tune`` (writes ``benchmarks/tuned_params_skegd.json``) tunes what the paper tuned, on the
tuning permutation (index ``--tune-perm``, default 1000, never an evaluation permutation):
SkeGD η ∈ 10^(-5..0) × λ ∈ 10^(-4..1) (ηλ < 1) for each dataset and width, and FOGD's η ∈
10^(-5..0) on german for Table P3-4 (plus the stream-tuned variant on german-1 stream index
``--tune-perm``). Best = lowest mistake rate; ties (common: all small steps give the majority
rate) go to the lower average hinge loss. The evaluation then runs permutations (streams)
0..R−1 and writes ``benchmarks/results/p3.md`` and ``p3.json`` (``--render-only`` rebuilds the
markdown from the json). Runs are sequential (one process); the full run takes ~10 minutes.

Examples::

    .venv/bin/python benchmarks/reproduce_p3.py --tune              # tune + evaluate
    .venv/bin/python benchmarks/reproduce_p3.py                     # evaluate (committed tuning)
    .venv/bin/python benchmarks/reproduce_p3.py --tables p3-3 --datasets german -R 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
import numpy as np
from _common import SIGMA_EXPONENTS, RunSpec, fmt_params, fmt_pm, load_dataset, mean_std, permuted

from kernelstream import learners
from kernelstream.learners.kernels import kernel_alignment
from kernelstream.learners.nystrom import IncrementalNystrom, relative_kernel_error
from kernelstream.seeding import learner_seed, permutation
from kernelstream.streams import PRESETS, evaluate_stream, preset_stream

# -- published numbers (ALGORITHMS.md §5.4) ------------------------------------------------------
P3_3: dict[str, tuple[float, float, float]] = {  # SkeGD mistake %, std, seconds
    "german": (27.932, 0.481, 0.076), "svmguide3": (21.388, 0.122, 0.082),
    "spambase": (31.301, 0.531, 0.322), "a9a": (18.524, 0.283, 11.736),
    "w7a": (2.782, 0.001, 7.452),
}
P3_3_NOGD = {"german": 29.881, "svmguide3": 22.891, "spambase": 34.332, "a9a": 18.843,
             "w7a": 2.903}
P3_4: dict[str, dict[str, tuple[float, float, float]]] = {  # row -> stream -> (%, std, s)
    "fogd": {"german-1": (37.493, 0.724, 0.140), "german-2": (32.433, 0.196, 0.265)},
    "nogd": {"german-1": (30.918, 0.003, 0.405), "german-2": (26.737, 0.002, 0.778)},
    "skegd θ=0.1": {"german-1": (17.320, 0.136, 0.329), "german-2": (7.865, 0.059, 0.597)},
    "skegd θ=0.01": {"german-1": (17.272, 0.112, 0.402), "german-2": (7.407, 0.086, 0.633)},
    "skegd θ=0.005": {"german-1": (16.578, 0.360, 0.484), "german-2": (7.266, 0.065, 0.672)},
    "skegd θ=0.001": {"german-1": (16.687, 0.155, 1.183), "german-2": (6.835, 0.136, 1.856)},
}
P3_4_PROS = {"german-1": (27.633, 0.416, 33.984), "german-2": (17.737, 0.900, 98.873)}
THETAS = (0.1, 0.01, 0.005, 0.001)
P3_2: dict[tuple[str, int], dict[str, tuple[float, float, float]]] = {  # (ds, B) -> approach
    ("german", 100): {"INys": (0.078, 0.012, 0.054), "IRS": (0.059, 0.008, 0.047)},
    ("german", 200): {"INys": (0.047, 0.006, 0.081), "IRS": (0.031, 0.003, 0.066)},
    ("svmguide3", 100): {"INys": (0.037, 0.001, 0.083), "IRS": (0.018, 0.001, 0.065)},
    ("svmguide3", 200): {"INys": (0.031, 0.001, 0.092), "IRS": (0.012, 0.002, 0.077)},
}
DATASETS_P3 = ("german", "svmguide3", "spambase", "a9a", "w7a")
TABLES = ("p3-3", "p3-4", "p3-2")
BUDGET = {"german": 100, "svmguide3": 100, "spambase": 100, "a9a": 200, "w7a": 200}
TOLERANCE_PP = 2.0

ETA = [10.0**e for e in range(-5, 1)]
LAM = [10.0**e for e in range(-4, 2)]

BASE_TUNED = _common.BENCH / "tuned_params.json"
DEFAULT_TUNED = _common.BENCH / "tuned_params_skegd.json"
BASELINES_JSON = _common.RESULTS / "baselines.json"


def gamma_of_log2(sigma_log2: float) -> float:
    return 1.0 / (2.0 * 4.0**sigma_log2)


def skegd_fixed(ds: str, n: int) -> dict[str, Any]:
    """Settings fixed by the paper for Table P3-3 (defaults of the learner otherwise:
    s_p = ⌊3B/4⌋, τ = 0.2, k = round(0.1B), d_b = 4, θ = 0.3, hinge, randomized SVD)."""
    return {"budget": BUDGET[ds], "horizon": n, "theta": 0.3}


def skegd_grid() -> list[dict[str, Any]]:
    return [{"eta": e, "lam": lam} for e in ETA for lam in LAM if e * lam < 1.0]


def lsokl_width(ds: str, base: dict[str, Any]) -> tuple[str, float] | None:
    """``(dataset, log2 σ)`` of the LSOKL-files diagnostic of ``ds`` (the toolbox's unscaled
    file in its own permutations, KA width as tuned by ``reproduce_baselines.py``), if any."""
    entry = base.get("diagnostics", {}).get(f"lsokl-{ds}", {})
    cfg = next((v for k, v in entry.items() if k != "note"), None)
    return (f"{ds}_lsokl", float(cfg["sigma_log2"])) if cfg else None


def widths(ds: str, base: dict[str, Any], a: argparse.Namespace) -> dict[str, float]:
    """``{"ka": e, "online": e'}`` (log2 σ) from the baselines' tuning file, else KA here."""
    e = base.get("p3", {}).get(ds, {})
    if "sigma_ka_log2" in e:
        out = {"ka": float(e["sigma_ka_log2"])}
        if "sigma_online_log2" in e:
            out["online"] = float(e["sigma_online_log2"])
        return out
    X, y = load_dataset(ds, a.data_dir)
    idx = permutation(X.shape[0], a.base_seed, a.tune_perm)[: a.ka_rows]
    ka = kernel_alignment(X[idx], y[idx], [gamma_of_log2(s) for s in SIGMA_EXPONENTS])
    return {"ka": SIGMA_EXPONENTS[int(np.argmax(ka))]}


# -- tuning --------------------------------------------------------------------------------------
def _score_run(learner: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray,
               seed: Any) -> tuple[float, float]:
    """(mistake %, average hinge loss) of one prequential pass over ``X`` in its order."""
    m = learners.make(learner, seed=seed, **params)
    s = m.predict_learn_many(X, y)
    pred = _common.predicted_labels(m, s)
    return 100.0 * float(np.mean(pred != y)), float(np.mean(np.maximum(0.0, 1.0 - y * s)))


def _select(learner: str, grid: list[dict[str, Any]], X: np.ndarray, y: np.ndarray,
            seed: Any, tag: str) -> dict[str, Any]:
    """Lowest mistake rate on the tuning stream; ties (frequent: small steps all give the
    majority-class rate) go to the lower average hinge loss, the objective the learners
    minimise, then to the earlier grid point."""
    res = []
    for p in grid:
        mr, hl = _score_run(learner, p, X, y, seed)
        res.append((round(mr, 9), hl))
        print(f"[tune {tag}] {learner}({fmt_params(p)}): {mr:.3f}% hinge {hl:.4f}",
              file=sys.stderr, flush=True)
    i = _common.best_of_grid(range(len(grid)), lambda j: res[j])
    return {"params": grid[i], "tune_mistake_rate": round(res[i][0], 4),
            "tune_hinge": round(res[i][1], 5),
            "grid": [[fmt_params({k: v for k, v in p.items() if k in ("eta", "eta2", "lam")}),
                      round(mr, 4), round(hl, 5)] for p, (mr, hl) in zip(grid, res, strict=True)]}


def tune(a: argparse.Namespace, tuned: dict[str, Any], base: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    meta = tuned.setdefault("meta", {})
    meta.update({**_common.tuning_meta(a), "eta": ETA, "lam": LAM,
                 "widths_from": str(BASE_TUNED.name),
                 "selection": "lowest mistake rate, ties by lower average hinge loss"})
    sk = tuned.setdefault("skegd", {})
    for ds in a.datasets:
        X, y = load_dataset(ds, a.data_dir)
        n = X.shape[0]
        Xp, yp = permuted(X, y, a.base_seed, a.tune_perm)
        seed = learner_seed(a.base_seed, a.tune_perm, "skegd")
        entry = sk.setdefault(ds, {})
        for mode, e in widths(ds, base, a).items():
            if mode == "online" and e == entry.get("ka", {}).get("sigma_log2"):
                entry["online"] = {"same_as": "ka"}
                continue
            grid = [{**skegd_fixed(ds, n), **g, "gamma": gamma_of_log2(e)} for g in skegd_grid()]
            entry[mode] = {"sigma_log2": e,
                           **_select("skegd", grid, Xp, yp, seed, f"{ds} {mode}")}
        lk = lsokl_width(ds, base)
        if lk is not None:  # diagnostic: the LSOKL toolbox's own file
            run_ds, e = lk
            Xq, yq = permuted(*load_dataset(run_ds, a.data_dir), a.base_seed, a.tune_perm)
            grid = [{**skegd_fixed(ds, n), **g, "gamma": gamma_of_log2(e)} for g in skegd_grid()]
            entry["lsokl"] = {"sigma_log2": e, "run_dataset": run_ds,
                              **_select("skegd", grid, Xq, yq, seed, f"{run_ds} ka")}
    if "german" in a.datasets and "p3-4" in a.tables:
        tune_adversarial(a, tuned, base)
    meta["tuning_seconds"] = round(time.perf_counter() - t0, 1)


def tune_adversarial(a: argparse.Namespace, tuned: dict[str, Any], base: dict[str, Any]) -> None:
    """FOGD's η on german (the paper's protocol for Table P3-4: parameters of the i.i.d.
    setting), and — not the paper's protocol, reported separately — η (and λ) of SkeGD, NOGD
    and FOGD on a separate german-1 stream (index ``tune_perm``)."""
    X, y = load_dataset("german", a.data_dir)
    e = widths("german", base, a)["ka"]
    g = gamma_of_log2(e)
    Xp, yp = permuted(X, y, a.base_seed, a.tune_perm)
    fogd_grid = [{"n_components": 400, "eta": eta, "gamma": g} for eta in ETA]
    tuned["fogd_german"] = {"sigma_log2": e, **_select(
        "fogd", fogd_grid, Xp, yp, learner_seed(a.base_seed, a.tune_perm, "fogd"), "german")}
    Xs, ys = preset_stream("german-1", X, y, a.base_seed, a.tune_perm)
    T = PRESETS["german-1"].length
    grids = {
        "skegd": [{"budget": 100, "horizon": T, "theta": 0.01, **p, "gamma": g}
                  for p in skegd_grid()],
        "nogd": [{"budget": 100, "rank": 10, "init": "carry", "eta": eta, "eta2": eta,
                  "gamma": g}
                 for eta in ETA],
        "fogd": fogd_grid,
    }
    adv = tuned.setdefault("adversarial_tuned", {"stream": "german-1", "index": a.tune_perm,
                                                 "sigma_log2": e})
    for name, grid in grids.items():
        adv[name] = _select(name, grid, Xs, ys, learner_seed(a.base_seed, a.tune_perm, name),
                            "german-1")


# -- evaluation ----------------------------------------------------------------------------------
def eval_p3_3(a: argparse.Namespace, tuned: dict[str, Any]) -> list[dict[str, Any]]:
    cells = []
    ours_nogd = _baseline_nogd()
    for ds in a.datasets:
        for mode in ("ka", "online", "lsokl"):
            cfg = tuned.get("skegd", {}).get(ds, {}).get(mode)
            if cfg is None or "params" not in cfg:
                continue
            run_ds = cfg.get("run_dataset", ds)
            specs = [RunSpec("skegd", cfg["params"], run_ds, r, a.base_seed,
                             tag=f"P3-3 {mode}") for r in range(a.permutations)]
            res = _common.run_all(specs, a.data_dir)
            mr, sd = mean_std(r.mistake_rate for r in res)
            ma, sa = mean_std(r.extra["mistake_rate_after_init"] for r in res)
            _, y = load_dataset(ds, a.data_dir)
            pub = P3_3[ds]
            cells.append({
                "dataset": ds, "width": mode, "sigma_log2": cfg["sigma_log2"],
                "params": cfg["params"], "published": pub, "published_nogd": P3_3_NOGD[ds],
                "ours_nogd": ours_nogd.get((ds, mode)),
                # the paper's formula: every mistake of the T rounds
                "mistake_mean": mr, "mistake_std": sd, "diff": mr - pub[0],
                "passed_formula": bool(mr <= pub[0] + TOLERANCE_PP),
                # [C-FORKS] count (verdict): mistakes after T₀ only, over T
                "after_init_mean": ma, "after_init_std": sa, "diff_after_init": ma - pub[0],
                "passed": bool(ma <= pub[0] + TOLERANCE_PP),
                "init_round_mean": float(np.mean([r.extra["init_round"] or r.n_rounds
                                                  for r in res])),
                "minority_rate": 100.0 * float(min(np.mean(y > 0), np.mean(y < 0))),
                "seconds": float(np.mean([r.seconds for r in res])),
                "runs": [{"r": r.spec.r, "mistake_rate": r.mistake_rate,
                          "mistake_rate_after_init": r.extra["mistake_rate_after_init"],
                          "init_round": r.extra["init_round"], "seconds": r.seconds}
                         for r in res],
            })
    return cells


def _baseline_nogd() -> dict[tuple[str, str], float]:
    """Our NOGD of Table P3-3 (benchmarks/results/baselines.json), for context."""
    out: dict[tuple[str, str], float] = {}
    for c in _common.read_json(BASELINES_JSON).get("cells", []):
        if c.get("learner") != "nogd" or "mistake_mean" not in c:
            continue
        if c.get("group") == "P3":
            for mode in ("ka", "online"):
                if mode in str(c.get("width", "")):
                    out[(c["dataset"], mode)] = c["mistake_mean"]
        elif c.get("width") == f"lsokl-{c['dataset']}":
            out[(c["dataset"], "lsokl")] = c["mistake_mean"]
    return out


def eval_p3_4(a: argparse.Namespace, tuned: dict[str, Any],
              base: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of both variants: **protocol** (the german parameters of Table P3-3 for SkeGD, of
    the baselines' tuning for NOGD, FOGD's η tuned on german — the paper's "identical
    parameters") and **stream-tuned** (η, λ tuned on a separate german-1 stream)."""
    X, y = load_dataset("german", a.data_dir)
    variants: dict[str, dict[str, dict[str, Any]]] = {"stream-tuned": {}, "german-η": {}}
    if "fogd_german" in tuned:
        variants["german-η"]["fogd"] = tuned["fogd_german"]["params"]
    nogd = base.get("p3", {}).get("german", {}).get("selected", {}).get("ka", {}).get("nogd")
    if nogd:
        variants["german-η"]["nogd"] = nogd["params"]
    sk = tuned.get("skegd", {}).get("german", {}).get("ka")
    if sk and "params" in sk:
        variants["german-η"]["skegd"] = sk["params"]
    for name in ("fogd", "nogd", "skegd"):
        cfg = tuned.get("adversarial_tuned", {}).get(name)
        if cfg:
            variants["stream-tuned"][name] = cfg["params"]
    cells = []
    for variant, cfgs in variants.items():
        for stream in ("german-1", "german-2"):
            T = PRESETS[stream].length
            todo = [(n, n, p) for n, p in cfgs.items() if n != "skegd"]
            if "skegd" in cfgs:
                todo += [(f"skegd θ={th:g}", "skegd",
                          {**cfgs["skegd"], "horizon": T, "theta": th}) for th in THETAS]
            for row, name, params in todo:
                res = evaluate_stream(X, y, stream, name, params, seed=a.base_seed,
                                      permutations=a.permutations)
                mr, sd = mean_std([r.mistake_rate for r in res.runs])
                pub = P3_4[row][stream]
                cells.append({
                    "variant": variant, "stream": stream, "row": row, "learner": name,
                    "params": res.params, "published": pub, "mistake_mean": mr,
                    "mistake_std": sd, "diff": mr - pub[0],
                    "passed": bool(mr <= pub[0] + TOLERANCE_PP),
                    "seconds": float(np.mean([r.seconds for r in res.runs])),
                    "runs": [{"r": r.permutation, "mistake_rate": r.mistake_rate,
                              "seconds": r.seconds} for r in res.runs],
                })
                print(f"[P3-4 {variant}] {stream} {row}: {mr:.3f} ± {sd:.3f}",
                      file=sys.stderr, flush=True)
    return cells


def eval_p3_2(a: argparse.Namespace, tuned: dict[str, Any]) -> list[dict[str, Any]]:
    cells = []
    for ds in ("german", "svmguide3"):
        X, y = load_dataset(ds, a.data_dir)
        n = X.shape[0]
        entry = tuned.get("skegd", {}).get(ds, {})
        modes = [m for m in ("ka", "online") if "params" in entry.get(m, {})]
        for mode in modes:
            cfg = entry[mode]
            g = cfg["params"]["gamma"]
            for B in (100, 200):
                irs_p = {**cfg["params"], "budget": B, "tau": 2.0 / 3.0, "rank": B // 5,
                         "sjlt_nonzeros": 4, "horizon": n, "theta": 0.3}
                err = {"IRS": [], "INys": []}
                secs = {"IRS": [], "INys": []}
                for r in range(a.permutations):
                    Xp, yp = permuted(X, y, a.base_seed, r)
                    m = learners.make("skegd", seed=learner_seed(a.base_seed, r, "skegd"),
                                      **irs_p)
                    t0 = time.perf_counter()
                    m.predict_learn_many(Xp, yp)
                    secs["IRS"].append(time.perf_counter() - t0)
                    err["IRS"].append(relative_kernel_error(m.feature_map(Xp), Xp, gamma=g))
                    t0 = time.perf_counter()
                    inys = IncrementalNystrom(B, rank=B // 5, gamma=g).partial_fit(Xp)
                    secs["INys"].append(time.perf_counter() - t0)
                    err["INys"].append(relative_kernel_error(inys.feature_map(Xp), Xp,
                                                             gamma=g))
                for ap in ("INys", "IRS"):
                    mu, sd = mean_std(err[ap])
                    cells.append({"dataset": ds, "budget": B, "width": mode,
                                  "sigma_log2": cfg["sigma_log2"], "approach": ap,
                                  "published": P3_2[(ds, B)][ap], "error_mean": mu,
                                  "error_std": sd, "seconds": float(np.mean(secs[ap])),
                                  "errors": err[ap]})
                print(f"[P3-2] {ds} B={B} {mode}: INys {np.mean(err['INys']):.4f} IRS "
                      f"{np.mean(err['IRS']):.4f}", file=sys.stderr, flush=True)
    return cells


# -- output --------------------------------------------------------------------------------------
NOTES = """## Notes

* **Implementation** (`kernelstream/learners/skegd.py`, `sketch.py`): the paper's Algorithm 1 as
  specified in ALGORITHMS.md §3.10 — KOGD with λ-shrinkage until B loss examples are buffered,
  initialisation at the first round with a full buffer (w carries the stage-1 prediction at
  x_{T₀}, no gradient step), rank-1 updates of S_pᵀKS_p and S_pᵀKS_m on update rounds
  t mod ρ = 1 with the new row appended to R, randomized eigen-decomposition (oversampling 10,
  2 power iterations: not given by the paper), w̄ rescaling, regularised OGD every stage-2
  round. `reference_quirks` ([C-FORKS]) is off. Tuning ties (frequent: every small step gives
  the same mistakes) are broken by the lower average hinge loss on the tuning permutation.
* **Table P3-3: which mistakes are counted decides german and svmguide3.** Counted over all
  T rounds (the formula printed in §6.3) our german and svmguide3 means sit at the
  minority-class rate (column "minority class %"): at the KA width the tuned SkeGD ends up as
  the constant majority predictor, and both cells miss the tolerance. The only public SkeGD code
  ([C-FORKS], `OKL_fun.hpp`, `SkeGD::SkeGD_learning` and `OL_experiment.cpp`) increments its
  mistake counter only once the sketch is initialised (`wheather_init == 1`) and divides by
  the stream length N, so the stage-1 rounds (about the first B loss rounds, column "mean T₀",
  where a kernel model with B ≤ 100 points is still learning) never count. Counted that way
  the same runs land within the tolerance of the published german and svmguide3 numbers
  (column "after T₀"), and the spread agrees too: on german the published ± 0.48 matches the
  spread of how many minority-class examples fall into the first T₀ rounds, which is what
  varies between permutations when stage 2 predicts the majority class. w7a is the clearest
  case: at the KA width (σ = 2^7, a nearly constant kernel) SkeGD predicts the majority class
  in stage 2, and the published 2.782 ± 0.001 — *below* the 3.00 % majority-class rate, which
  no such predictor reaches over all rounds — is our after-T₀ count to a hundredth of a point.
  The paper's own code is not public, so this is the best evidence of how the published
  numbers were counted; the
  verdict therefore uses the after-T₀ count, and the all-rounds count is shown next to it. The
  learner is unchanged (ALGORITHMS.md §3.10; [C-FORKS]'s algorithmic simplifications stay behind
  `reference_quirks`, off here). What the all-rounds count shows is real: with the paper's
  s_m = τ·s_p = 0.15·B landmarks (15 for B = 100) and rank 0.1·B, hinge OGD on SkeGD's features
  (whose scales follow the eigenvalues) does not beat the majority class on these two small
  sets. Side runs with η up to 1000, λ = 0, `reference_quirks=True` with d_b = 1, rank 8–75,
  θ = 0.01, and german's raw LSOKL values were no better; raising τ makes it worse (τ = 1:
  32.9–33.7 % on german) because with s_p = s_m the sketched least-squares problem is
  ill-conditioned. The feature map itself is good: on svmguide3 at the KA width a
  least-squares linear classifier on the final 10-dimensional map errs on 21.5 % of the stream
  in sample, and on german with rank 20 on 26.4 %. spambase, a9a and w7a pass either way; on
  spambase every learner of ours is far better than published (see `baselines.md`), which
  points to a different preprocessing in the paper. svmguide3 is used with its raw values, as
  the toolboxes ship it (`_common`); the min-max scaled copy gave the same picture.
* **Table P3-3, rows `lsokl` (not judged).** `baselines.md` shows that P3 most likely ran
  german and spambase from the LSOKL toolbox's own unscaled files in LSOKL's own 20
  permutations: there our RBP, Forgetron, Projectron(++) and NOGD land within about 1 pp of
  the published numbers, which they do not with the spec's scaled data. SkeGD on those files
  (KA width of the raw data, η and λ tuned the same way on our tuning permutation): german
  passes on the after-T₀ count, as with the scaled file; spambase misses, after T₀ and over
  all rounds. On the tuning permutation the tuned SkeGD is close to the published mean, on
  LSOKL's permutations it is worse and far more spread out than published (the std
  column), so on unscaled spambase — whose distances are dominated by three run-length
  features up to ~16,000 — SkeGD's 15-landmark feature map is fragile; with the spec's
  [0, 1] scaling it is far better than published. We judge the spec's preprocessing
  (ALGORITHMS.md §2.8) and report this row so the gap is visible.
* **Table P3-4.** Tuned the way Section 6.3 tunes (η and λ on data of the same kind, here a
  separate german-1 stream: η = 1, λ = 0.1) SkeGD beats the published numbers at every θ, and
  smaller θ (more sketch updates) gives fewer mistakes at a higher cost, as in the paper. With
  german's i.i.d. η = 0.1 reused as it is, w moves too little to follow a label that flips
  every block (34–42 %). Our FOGD and NOGD are far better than published on these streams
  (η = 1 lets them adapt within a block), and FOGD beats SkeGD here, so the paper's ranking
  (SkeGD ≪ NOGD < FOGD) is not reproduced. PROS-N-KONS is not implemented (ALGORITHMS.md §4.18).
* **Table P3-2.** The errors depend strongly on the width: at the KA widths the kernels are
  smooth and both errors are far below the published ones. Our IRS error is consistently
  *larger* than INys's (about 2–4×), the opposite of the paper: with s_p = 75 sketch columns for
  s_m = 50 landmarks (s_p/s_m = 1.5) the sketched problem (2) is poorly conditioned (the theory
  needs s_p ≫ s_m), and INys uses B landmarks against IRS's B/2. An offline dense computation of
  the same formula (german, σ = 2^1, 50 landmarks from the first 100 rows, rank 20) gives 0.14
  at s_p = 75 and 0.09 at s_p = 300, against 0.077 for plain Nyström and 0.053 for modified
  Nyström on the same 50 landmarks (and 0.071 for INys with 100), so the incremental updates
  are not the cause (they equal a full recomputation, `tests/test_learners_sketch.py`). IRS time
  is the whole SkeGD pass over the stream; INys time only builds its map.
* **Times** are pure Python/numpy on a shared 2-core machine; not comparable to the paper's C++.
"""


def write_outputs(a: argparse.Namespace, tuned: dict[str, Any], p33: list[dict[str, Any]],
                  p34: list[dict[str, Any]], p32: list[dict[str, Any]], wall: float,
                  generated: str | None = None) -> None:
    generated = generated or _common.now_utc()
    L: list[str] = [
        "# Paper 003 (SkeGD): published vs ours",
        "",
        _common.generated_line("reproduce_p3.py", generated,
                               f"evaluation wall time {wall / 60:.1f} min"),
        "",
        f"* Machine: {_common.machine_info()}; one process; Python learners (the paper: "
        "C++/Matlab, 4-core i7), so seconds are not comparable.",
        f"* Protocol: prequential test-then-train, mean ± std (ddof=1) over R = "
        f"{a.permutations} permutations (Table P3-4: R independent adversarial streams) "
        f"r = 0..{a.permutations - 1}, base seed {a.base_seed}; the paper used 20. Mistake = "
        "`predict_label(score) ≠ y` (tie → +1).",
        f"* Tuning (`--tune`, `benchmarks/tuned_params_skegd.json`, tuned "
        f"{tuned.get('meta', {}).get('tuned_at', '?')}) on permutation r = "
        f"{tuned.get('meta', {}).get('tune_perm', '?')}, never used for evaluation: SkeGD "
        "η ∈ 10^(-5..0) × λ ∈ 10^(-4..1) (ηλ < 1); FOGD η ∈ 10^(-5..0) (german). Widths from "
        "`benchmarks/tuned_params.json`: **ka** = kernel–target alignment (the paper's rule), "
        "**online** = the width the P3 baselines found best online (not the paper's rule; shown "
        "where it differs).",
        "* SkeGD settings: hinge loss, B = 100 (german, svmguide3, spambase) / 200 (a9a, w7a), "
        "s_p = 3B/4, τ = 0.2 (s_m = 0.15B), k = 0.1B, d_b = 4, ρ = ⌊0.3(T − B)⌋ (horizon = T), "
        "randomized eigen-decomposition.",
        f"* PASS = ours ≤ published + {TOLERANCE_PP:g} pp (judged for SkeGD).",
        "* Data: " + "; ".join(f"{d.name}: {d.note}" for d in _common.DATASETS.values()
                              if d.name in DATASETS_P3) + ".",
        "",
    ]
    if p33:
        ka = [c for c in p33 if c["width"] == "ka"]
        npass = sum(c["passed"] for c in ka)
        nform = sum(c["passed_formula"] for c in ka)
        L += [
            "## Table P3-3: SkeGD mistake rate (%)",
            "",
            "Two counts of the same runs: **all rounds** = every mistake of the T rounds over T "
            "(the formula printed in the paper, §6.3); **after T₀** = only the mistakes made "
            "after the round T₀ at which stage 2 starts, over T — how the only public SkeGD "
            "code ([C-FORKS] `OKL_fun.hpp`: `wrong` counts only once the sketch is "
            "initialised, the rate is `wrong/N`) counts them. The verdict (PASS) uses the "
            "after-T₀ count, the one that reproduces the published numbers (see the notes). "
            "Widths: **ka**, **online** as above; **lsokl** (not judged) = german and spambase "
            "as the LSOKL toolbox ships them, unscaled, in its own 20 permutations, at their KA "
            "width (the `lsokl-*` diagnostics of `baselines.md`).",
            "",
            f"KA width (the paper's protocol): **{npass}/{len(ka)} PASS** on the after-T₀ count "
            f"(verdict); {nform}/{len(ka)} on the all-rounds count.",
            "",
            "| dataset | width | params | published % | ours, all rounds % | diff | ours, after "
            "T₀ % | diff | PASS (after T₀) | mean T₀ | minority class % | NOGD pub. / ours % "
            "| s/run (ours / pub.) |",
            "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for c in p33:
            pm, ps, psec = c["published"]
            shown = {k: v for k, v in c["params"].items() if k in ("eta", "lam")}
            nogd = c["ours_nogd"]
            L.append(
                f"| {c['dataset']} | {c['width']}: σ=2^{c['sigma_log2']:g} | "
                f"{fmt_params(shown)} | {fmt_pm(pm, ps)} | "
                f"{fmt_pm(c['mistake_mean'], c['mistake_std'])} | {c['diff']:+.2f} | "
                f"{fmt_pm(c['after_init_mean'], c['after_init_std'])} | "
                f"{c['diff_after_init']:+.2f} | {_common.pass_mark(c['passed'])}"
                f"{' (not judged)' if c['width'] == 'lsokl' else ''} | "
                f"{c['init_round_mean']:.0f} | {c['minority_rate']:.2f} | "
                f"{c['published_nogd']:.3f} / {'–' if nogd is None else f'{nogd:.3f}'} | "
                f"{c['seconds']:.2f} / {psec:g} |")
        L.append("")
    if p34:
        st = [c["passed"] for c in p34 if c["learner"] == "skegd"
              and c["variant"] == "stream-tuned"]
        ge = [c["passed"] for c in p34 if c["learner"] == "skegd" and c["variant"] == "german-η"]
        L += [
            "## Table P3-4: adversarial streams, mistake rate (%)",
            "",
            "The paper \"use[s] identical parameters to those used in Section 6.3\", where the "
            "set parameters are B, τ, s_p, s_m, d and k and the step size and regulariser are "
            "*tuned* per data set. Two readings: **stream-tuned** (verdict) = Section 6.3's "
            "procedure applied to the adversarial data: η (and λ) of each learner tuned on a "
            "separate german-1 stream (index "
            f"{tuned.get('adversarial_tuned', {}).get('index', '?')}; SkeGD at θ = 0.01), then "
            "used for both streams and every θ; **german-η** = the η and λ tuned on i.i.d. "
            "german for Table P3-3 reused as they are (SkeGD; NOGD with its german parameters "
            "of `baselines.md`; FOGD, D = 4B = 400, η tuned on german). PASS marks SkeGD.",
            "",
            f"SkeGD: **{sum(st)}/{len(st)} PASS** stream-tuned (verdict); {sum(ge)}/{len(ge)} "
            "with the german η.",
            "",
            "| variant | algorithm | german-1 published | german-1 ours | german-2 published | "
            "german-2 ours | s/run g-1 / g-2 (ours) |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for variant in dict.fromkeys(c["variant"] for c in p34):
            vc = [c for c in p34 if c["variant"] == variant]
            for row in dict.fromkeys(c["row"] for c in vc):
                cs = {c["stream"]: c for c in vc if c["row"] == row}
                parts = []
                for st in ("german-1", "german-2"):
                    c = cs.get(st)
                    if c is None:
                        parts += ["–", "–"]
                        continue
                    mark = " " + _common.pass_mark(c["passed"]) if row.startswith("skegd") else ""
                    parts += [fmt_pm(*c["published"][:2]),
                              fmt_pm(c["mistake_mean"], c["mistake_std"]) + mark]
                secs = " / ".join(f"{cs[s]['seconds']:.2f}" for s in ("german-1", "german-2")
                                  if s in cs)
                L.append(f"| {variant} | {row} | {' | '.join(parts)} | {secs} |")
        L.append(f"| – | PROS-N-KONS | {P3_4_PROS['german-1'][0]:.3f} ± "
                 f"{P3_4_PROS['german-1'][1]:.3f} | not implemented | "
                 f"{P3_4_PROS['german-2'][0]:.3f} ± {P3_4_PROS['german-2'][1]:.3f} | "
                 "not implemented | |")
        keys = ("budget", "rank", "n_components", "eta", "eta2", "lam")
        prm = {f"{c['variant']} {c['learner']}": {k: v for k, v in c["params"].items()
                                                 if k in keys and v is not None}
               for c in p34}
        L += ["", "Parameters: " + "; ".join(f"{r}: {fmt_params(p)}" for r, p in prm.items())
              + ".", ""]
    if p32:
        L += [
            "## Table P3-2: kernel approximation, relative error ‖K̃ − K‖_F² / ‖K‖_F²",
            "",
            "| dataset | B | width | approach | published | ours | s/run (ours / pub.) |",
            "|---|---:|---|---|---:|---:|---:|",
        ]
        for c in p32:
            pm, ps, psec = c["published"]
            L.append(f"| {c['dataset']} | {c['budget']} | {c['width']}: σ=2^{c['sigma_log2']:g} "
                     f"| {c['approach']} | {pm:.3f} ± {ps:.3f} | {c['error_mean']:.4f} ± "
                     f"{c['error_std']:.4f} | {c['seconds']:.3f} / {psec:g} |")
        L.append("")
    L.append(NOTES.strip())
    js = {"generated": generated, "machine": _common.machine_info(), "permutations": a.permutations,
          "base_seed": a.base_seed, "tolerance_pp": TOLERANCE_PP, "wall_seconds": wall,
          "tuned_meta": tuned.get("meta", {}), "table_p3_3": p33, "table_p3_4": p34,
          "table_p3_2": p32}
    _common.write_report(a.out_dir, "p3", L, js)


# -- main ----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__)
    _common.add_tuning_args(ap, DEFAULT_TUNED)
    _common.add_eval_args(ap, 20, "R evaluation permutations / streams (default 20, as the paper)",
                          short="-R", tune_perm=True)
    ap.add_argument("--ka-rows", type=int, default=2000,
                    help="rows for kernel alignment when tuned_params.json has no width")
    _common.add_list_arg(ap, "--datasets", DATASETS_P3)
    _common.add_list_arg(ap, "--tables", TABLES)
    _common.add_output_args(ap, "p3", "--render-only")
    a = ap.parse_args(argv)
    a.datasets = _common.parse_list(ap, a.datasets, DATASETS_P3, "dataset")
    a.tables = _common.parse_list(ap, a.tables, TABLES, "table")
    tuned = _common.read_json(a.tuned_file)
    if a.render_only:
        js = _common.read_results(a, "p3")
        write_outputs(a, tuned, js["table_p3_3"], js["table_p3_4"], js["table_p3_2"],
                      js["wall_seconds"], generated=js["generated"])
        return 0
    base = _common.read_json(BASE_TUNED)
    if _common.tune_step(ap, a, tuned, lambda: tune(a, tuned, base)):
        return 0
    t0 = time.perf_counter()
    p33 = eval_p3_3(a, tuned) if "p3-3" in a.tables else []
    p34 = eval_p3_4(a, tuned, base) if "p3-4" in a.tables and "german" in a.datasets else []
    p32 = eval_p3_2(a, tuned) if "p3-2" in a.tables else []
    write_outputs(a, tuned, p33, p34, p32, time.perf_counter() - t0)
    print(f"wrote {a.out_dir / 'p3.md'} and p3.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
