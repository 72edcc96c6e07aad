"""SkeGD (Zhang & Liao, ICML 2019): Tables 3, 4 and 2, published vs ours.

* Table P3-3 (``p3-3``) — online mistake rate of SkeGD on german, svmguide3, spambase
  (B = 100) and a9a, w7a (B = 200): hinge loss, τ = 0.2, s_p = 3B/4, s_m = τ s_p, d_b = 4,
  k = 0.1B, ρ = ⌊θ(T − B)⌋ with θ = 0.3. Each run is counted two ways: all T rounds (the
  paper's printed formula) and only the mistakes after the stage switch T₀, over T (how the
  public SkeGD code counts; the verdict). T₀ is read from the replay's predictions
  (``grid.switch_round``). PASS = ours ≤ published + 2 pp.
* Table P3-4 (``p3-4``) — adversarial streams german-1 / german-2
  (:mod:`kernelstream.engine.orders`): SkeGD with θ ∈ {0.1, 0.01, 0.005, 0.001}, NOGD and FOGD,
  with η (and λ) tuned on a separate german-1 stream ("stream-tuned", the verdict) and with
  the ones tuned on i.i.d. german ("german-η"). Each stream is its own file for the replay
  (``datasets.prepare_stream``).
* Table P3-2 (``p3-2``) — kernel approximation: relative error ``‖K̃ − K‖_F²/‖K‖_F²`` on the
  whole stream of german and svmguide3, B ∈ {100, 200}, for IRS (SkeGD's feature map after
  the last round) and INys (landmarks = the first B examples). Not a prequential table: the
  error needs the learner's final feature map, so it is computed in this process.

Parameters come from ``tuned_params_skegd.json`` (``kernelstream reproduce p3 --retune``) and
the widths and NOGD's german parameters from ``tuned_params.json``; the NOGD context column of
Table P3-3 is read from ``baselines.json`` in the output directory. R = 20.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from kernelstream import learners
from kernelstream.engine.orders import PRESETS
from kernelstream.experiments import report
from kernelstream.experiments.datasets import DATASETS, load_dataset
from kernelstream.experiments.grid import Run, run_grid
from kernelstream.experiments.protocol import Options, Outcome
from kernelstream.learners.nystrom import IncrementalNystrom, relative_kernel_error
from kernelstream.seeding import learner_seed, permutation

NAME = "p3"
TABLES = ("p3-3", "p3-4", "p3-2")
PERMUTATIONS = 20
TUNED_FILE = "tuned_params_skegd.json"
BASE_TUNED_FILE = "tuned_params.json"

# -- published numbers (Zhang & Liao, ICML 2019, Tables 2-4) -------------------------------------
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
BUDGET = {"german": 100, "svmguide3": 100, "spambase": 100, "a9a": 200, "w7a": 200}
TOLERANCE_PP = 2.0
DATA = DATASETS_P3  # the data sets of the tables (``--datasets``)



# -- evaluation ----------------------------------------------------------------------------------
def eval_p3_3(opts: Options, tuned: dict[str, Any], datasets: list[str],
              ours_nogd: dict[tuple[str, str], float]) -> list[dict[str, Any]]:
    todo: list[tuple[str, str, dict[str, Any]]] = []
    for ds in datasets:
        for mode in ("ka", "online", "lsokl"):
            cfg = tuned.get("skegd", {}).get(ds, {}).get(mode)
            if cfg is not None and "params" in cfg:
                todo.append((ds, mode, cfg))
    runs = [Run(cfg.get("run_dataset", ds), "skegd", cfg["params"], switch=True)
            for ds, mode, cfg in todo]
    cells = []
    for (ds, mode, cfg), res in zip(todo, run_grid(runs, opts.ctx), strict=True):
        after = [100.0 * float(r.mistakes_after_init or 0) / r.examples for r in res]
        mr, sd = report.mean_std(r.mistake_rate for r in res)
        ma, sa = report.mean_std(after)
        _, y = load_dataset(ds, opts.ctx.data_dir)
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
            "init_round_mean": float(np.mean([r.init_round or r.examples for r in res])),
            "minority_rate": 100.0 * float(min(np.mean(y > 0), np.mean(y < 0))),
            "seconds": float(np.mean([r.seconds for r in res])),
            "runs": [{"r": r.r, "mistake_rate": r.mistake_rate,
                      "mistake_rate_after_init": a, "init_round": r.init_round,
                      "seconds": r.seconds} for r, a in zip(res, after, strict=True)],
        })
        # the mark sits on the verdict, which is judged on the after-T₀ count
        report.noskill(cells[-1], res, ma)
    return cells


def baseline_nogd(opts: Options) -> dict[tuple[str, str], float]:
    """Our NOGD of Table P3-3 (``baselines.json`` of the output directory), for context."""
    out: dict[tuple[str, str], float] = {}
    for c in report.read_json(opts.out_dir / "baselines.json").get("cells", []):
        if c.get("learner") != "nogd" or "mistake_mean" not in c:
            continue
        if c.get("group") == "P3":
            for mode in ("ka", "online"):
                if mode in str(c.get("width", "")):
                    out[(c["dataset"], mode)] = c["mistake_mean"]
        elif c.get("width") == f"lsokl-{c['dataset']}":
            out[(c["dataset"], "lsokl")] = c["mistake_mean"]
    return out


def eval_p3_4(opts: Options, tuned: dict[str, Any],
              base: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of both variants: **german-η** (the german parameters of Table P3-3 for SkeGD, of
    the baselines' tuning for NOGD, FOGD's η tuned on german — the paper's "identical
    parameters") and **stream-tuned** (η, λ tuned on a separate german-1 stream)."""
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
    todo: list[tuple[str, str, str, str, dict[str, Any]]] = []
    for variant, cfgs in variants.items():
        for stream in ("german-1", "german-2"):
            T = PRESETS[stream].length
            rows = [(n, n, p) for n, p in cfgs.items() if n != "skegd"]
            if "skegd" in cfgs:
                rows += [(f"skegd θ={th:g}", "skegd",
                          {**cfgs["skegd"], "horizon": T, "theta": th}) for th in THETAS]
            todo += [(variant, stream, row, name, params) for row, name, params in rows]
    runs = [Run("german", name, params, stream=stream) for _, stream, _, name, params in todo]
    cells = []
    for (variant, stream, row, name, params), res in zip(todo, run_grid(runs, opts.ctx),
                                                        strict=True):
        # 100·k/n as kernelstream.engine.evaluate computes it (the old table came from there)
        rates = [100.0 * r.mistakes / r.examples for r in res]
        mr, sd = report.mean_std(rates)
        pub = P3_4[row][stream]
        cells.append({
            "variant": variant, "stream": stream, "row": row, "learner": name,
            "params": dict(learners.make(name, **params).hparams), "published": pub,
            "mistake_mean": mr, "mistake_std": sd, "diff": mr - pub[0],
            "passed": bool(mr <= pub[0] + TOLERANCE_PP),
            "seconds": float(np.mean([r.seconds for r in res])),
            "runs": [{"r": r.r, "mistake_rate": m, "seconds": r.seconds}
                     for r, m in zip(res, rates, strict=True)],
        })
        report.noskill(cells[-1], res, mr)
    return cells


def eval_p3_2(opts: Options, tuned: dict[str, Any]) -> list[dict[str, Any]]:
    """Kernel approximation errors (computed here: see the module docstring)."""
    ctx = opts.ctx
    cells = []
    for ds in ("german", "svmguide3"):
        X, y = load_dataset(ds, ctx.data_dir)
        n = X.shape[0]
        entry = tuned.get("skegd", {}).get(ds, {})
        modes = [m for m in ("ka", "online") if "params" in entry.get(m, {})]
        for mode in modes:
            cfg = entry[mode]
            g = cfg["params"]["gamma"]
            for B in (100, 200):
                irs_p = {**cfg["params"], "budget": B, "tau": 2.0 / 3.0, "rank": B // 5,
                         "sjlt_nonzeros": 4, "horizon": n, "theta": 0.3}
                err: dict[str, list[float]] = {"IRS": [], "INys": []}
                secs: dict[str, list[float]] = {"IRS": [], "INys": []}
                for r in range(ctx.permutations):
                    perm = permutation(n, ctx.seed, r)
                    Xp, yp = np.ascontiguousarray(X[perm]), y[perm]
                    m: Any = learners.make("skegd", seed=learner_seed(ctx.seed, r, "skegd"),
                                      **irs_p)
                    t0 = time.perf_counter()
                    m.predict_learn_many(Xp, yp)  # the state after the whole stream
                    secs["IRS"].append(time.perf_counter() - t0)
                    err["IRS"].append(relative_kernel_error(m.feature_map(Xp), Xp, gamma=g))
                    t0 = time.perf_counter()
                    inys = IncrementalNystrom(B, rank=B // 5, gamma=g).partial_fit(Xp)
                    secs["INys"].append(time.perf_counter() - t0)
                    err["INys"].append(relative_kernel_error(inys.feature_map(Xp), Xp,
                                                             gamma=g))
                for ap in ("INys", "IRS"):
                    mu, sd = report.mean_std(err[ap])
                    cells.append({"dataset": ds, "budget": B, "width": mode,
                                  "sigma_log2": cfg["sigma_log2"], "approach": ap,
                                  "published": P3_2[(ds, B)][ap], "error_mean": mu,
                                  "error_std": sd, "seconds": float(np.mean(secs[ap])),
                                  "errors": err[ap]})
                ctx.log(f"P3-2 {ds} B={B} {mode}: INys {np.mean(err['INys']):.4f} IRS "
                        f"{np.mean(err['IRS']):.4f}")
    return cells


def reproduce(opts: Options) -> Outcome:
    """Run the tables asked for and write ``p3.md`` / ``p3.json``."""
    tuned = report.read_json(opts.tuned_file(TUNED_FILE))
    base = report.read_json(opts.tuned_file(BASE_TUNED_FILE))
    datasets = opts.pick(DATASETS_P3)
    tables = opts.pick(TABLES, "table")
    t0 = time.perf_counter()
    p33 = eval_p3_3(opts, tuned, datasets, baseline_nogd(opts)) if "p3-3" in tables else []
    p34 = eval_p3_4(opts, tuned, base) if "p3-4" in tables and "german" in datasets else []
    p32 = eval_p3_2(opts, tuned) if "p3-2" in tables else []
    wall = time.perf_counter() - t0
    write_outputs(opts, tuned, p33, p34, p32, wall)
    # the verdicts: Table P3-3 at the KA width (after T₀), Table P3-4's stream-tuned SkeGD
    verdicts = ([c for c in p33 if judged("table_p3_3", c)]
                + [c for c in p34 if judged("table_p3_4", c)])
    return Outcome(NAME, sum(c["passed"] for c in verdicts), len(verdicts), wall,
                   (opts.out_dir / f"{NAME}.md", opts.out_dir / f"{NAME}.json"))


def judged(key: str, cell: dict[str, Any]) -> bool:
    """A cell P3's verdict counts (``protocol.Judged``): Table P3-3 at the KA width (after
    T₀), Table P3-4's stream-tuned SkeGD."""
    if key == "table_p3_3":
        return "passed" in cell and cell.get("width") == "ka"
    return (key == "table_p3_4" and "passed" in cell and cell.get("learner") == "skegd"
            and cell.get("variant") == "stream-tuned")


# -- output --------------------------------------------------------------------------------------
NOTES = """## Notes

* **Implementation** (`kernelstream/learners/skegd.py`, `sketch.py`): the paper's Algorithm 1 as
  specified in Zhang & Liao, "Incremental randomized sketching for online kernel learning",
  ICML 2019, Algorithm 1 — KOGD with λ-shrinkage until B loss examples are buffered,
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
  learner is unchanged (the paper's Algorithm 1; [C-FORKS]'s algorithmic simplifications stay behind
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
  (min-max to [0, 1], `experiments.datasets`) and report this row so the gap is visible.
* **Table P3-4.** Tuned the way Section 6.3 tunes (η and λ on data of the same kind, here a
  separate german-1 stream: η = 1, λ = 0.1) SkeGD beats the published numbers at every θ, and
  smaller θ (more sketch updates) gives fewer mistakes at a higher cost, as in the paper. With
  german's i.i.d. η = 0.1 reused as it is, w moves too little to follow a label that flips
  every block (34–42 %). Our FOGD and NOGD are far better than published on these streams
  (η = 1 lets them adapt within a block), and FOGD beats SkeGD here, so the paper's ranking
  (SkeGD ≪ NOGD < FOGD) is not reproduced. PROS-N-KONS (Calandriello, Lazaric
  & Valko, "Second-order kernel online convex optimization with adaptive sketching", ICML 2017)
  is not implemented.
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


def write_outputs(opts: Options, tuned: dict[str, Any], p33: list[dict[str, Any]],
                  p34: list[dict[str, Any]], p32: list[dict[str, Any]], wall: float) -> None:
    ctx = opts.ctx
    R = ctx.permutations
    generated = report.now_utc()
    L: list[str] = [
        *report.preamble(NAME, "# Paper 003 (SkeGD): published vs ours", generated,
                         f"evaluation wall time {wall / 60:.1f} min", ctx,
                         "; Python learners (the paper: C++/Matlab, 4-core i7), so seconds are "
                         "not comparable."),
        f"* Protocol: prequential test-then-train, mean ± std (ddof=1) over R = "
        f"{R} permutations (Table P3-4: R independent adversarial streams) "
        f"r = 0..{R - 1}, base seed {ctx.seed}; the paper used 20. Mistake = "
        "`predict_label(score) ≠ y` (tie → +1).",
        f"* Tuning (`kernelstream reproduce p3 --retune`, `tuned_params_skegd.json`, "
        f"tuned {report.tuning_when(tuned.get('meta', {}))}) on permutation r = "
        f"{tuned.get('meta', {}).get('tune_perm', '?')}, never used for evaluation: SkeGD "
        "η ∈ 10^(-5..0) × λ ∈ 10^(-4..1) (ηλ < 1); FOGD η ∈ 10^(-5..0) (german). Widths from "
        "`tuned_params.json`: **ka** = kernel–target alignment (the paper's rule), "
        "**online** = the width the P3 baselines found best online (not the paper's rule; shown "
        "where it differs).",
        "* SkeGD settings: hinge loss, B = 100 (german, svmguide3, spambase) / 200 (a9a, w7a), "
        "s_p = 3B/4, τ = 0.2 (s_m = 0.15B), k = 0.1B, d_b = 4, ρ = ⌊0.3(T − B)⌋ (horizon = T), "
        "randomized eigen-decomposition.",
        f"* PASS = ours ≤ published + {TOLERANCE_PP:g} pp (judged for SkeGD).",
        report.NOSKILL_NOTE,
        "* Data: " + "; ".join(f"{d.name}: {d.note}" for d in DATASETS.values()
                              if d.name in DATASETS_P3) + ".",
        "",
    ]
    if p33:
        ka = [c for c in p33 if judged("table_p3_3", c)]
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
                f"{report.fmt_params(shown)} | {report.fmt_pm(pm, ps)} | "
                f"{report.fmt_pm(c['mistake_mean'], c['mistake_std'])} | {c['diff']:+.2f} | "
                f"{report.fmt_pm(c['after_init_mean'], c['after_init_std'])} | "
                f"{c['diff_after_init']:+.2f} | {report.pass_mark(c['passed'], c)}"
                f"{' (not judged)' if c['width'] == 'lsokl' else ''} | "
                f"{c['init_round_mean']:.0f} | {c['minority_rate']:.2f} | "
                f"{c['published_nogd']:.3f} / {'–' if nogd is None else f'{nogd:.3f}'} | "
                f"{c['seconds']:.2f} / {psec:g} |")
        L.append("")
    if p34:
        st = [c["passed"] for c in p34 if judged("table_p3_4", c)]
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
                for stream in ("german-1", "german-2"):
                    cell = cs.get(stream)
                    if cell is None:
                        parts += ["–", "–"]
                        continue
                    mark = (" " + report.pass_mark(cell["passed"], cell)
                            if row.startswith("skegd")
                            else "")
                    parts += [report.fmt_pm(*cell["published"][:2]),
                              report.fmt_pm(cell["mistake_mean"], cell["mistake_std"]) + mark]
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
        L += ["", "Parameters: " + "; ".join(f"{r}: {report.fmt_params(p)}" for r, p in prm.items())
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
    js = {"generated": generated, "machine": report.machine_info(), "permutations": R,
          "runner": ctx.runner, "workers": ctx.workers, "pipeline_args": ctx.pipeline_args,
          "base_seed": ctx.seed, "tolerance_pp": TOLERANCE_PP, "wall_seconds": wall,
          "tuned_meta": tuned.get("meta", {}), "table_p3_3": p33, "table_p3_4": p34,
          "table_p3_2": p32}
    report.write_report(opts.out_dir, NAME, L, js)


