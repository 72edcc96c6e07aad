"""The default learner, measured: ``kernelstream replay DATA`` with no learner and no parameters
on every shared data set, against scikit-learn's linear ``SGDClassifier(loss="hinge")`` and the
no-skill predictor, in the same run and the same order.

For every classification set of ``MANIFEST.tsv`` (train files; the ``*_test`` splits left out)
the script runs ``kernelstream replay DATA --out TMP`` (one permutation, seed 0: the defaults)
and reads back its per-row predictions (row ids in stream order, labels, scores); then, over
those rows in that order:

* **SGD**: scikit-learn's ``SGDClassifier(loss="hinge")`` (defaults: L2, ``alpha=1e-4``, the
  ``optimal`` learning rate, an intercept) trained one row at a time, each row predicted before
  it is learnt. ``partial_fit`` costs ~1.5 ms a call, 15 minutes on covtype alone, so the
  benchmark runs the same per-row update in numpy (:func:`sgd_hinge`, sklearn's ``_plain_sgd``
  for one sample per call, the sparse intercept decay 0.01 included) and checks it against
  ``SGDClassifier.partial_fit`` on the first :data:`SKLEARN_CHECK_ROWS` rows of every set: the
  predictions must be identical, else the script stops.
* **no-skill**: the running majority class (the class seen most so far; +1 on a tie, before
  any row).

For every regression set, ``kernelstream replay DATA --task regression`` against the running
mean (the mean of the targets seen so far; 0 before any), both as MSE.

Done when (issue 27): the default beats its no-skill rate by ≥ 20 % of that rate on every
classification set, is within 1 percentage point of SGD (or better) on ≥ 75 % of them, and has
an MSE ≤ 0.8 × the running mean's on every regression set. The table says per set whether it
does; a set that does not is reported as measured.

The default classifier depends on the rows the file gives its learners
(``pipelines.config.DEFAULT_BY_ROWS``: rff-rls on dense rows, bpa-s on sparse ones; the
table's last column); so does the regression default (rff-rls ``loss=square`` on dense rows).
For every small classification set (≤ :data:`FLOOR_MAX_ROWS` rows) whose
no-skill target the default misses, :func:`floor` measures the best any registered learner ×
width × scaling reaches, chosen in hindsight, scikit-learn's one-pass linear models, and
an idealised learner that no one-pass learner can be expected to beat (:func:`ideal_floor`:
batch models refit on every row seen, tuned in hindsight); ``--no-floors`` skips it.

``--also NAME='-l fogd -p n_components=800'`` adds a column with another configuration (the
candidates the default was chosen from); ``{scale_gamma}`` (``{median_gamma}``) in it
stands for that estimator's width of the set, e.g. ``-p gamma={scale_gamma}``: the estimator
``auto`` did not choose. Results: ``--out-dir``/defaults.md and .json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
import numpy as np
from _defaults_report import (
    ALSO,
    FLOOR_ORDERS,
    IDEAL_EVERY,
    IDEAL_GRID,
    IDEAL_TOP,
    REGRESSION_RUNS,
    SKLEARN_ONE_PASS,
    render,
)

from kernelstream import data as ksdata
from kernelstream.data import widths
from kernelstream.data.options import AUTO_SPARSE_WIDTH
from kernelstream.data.scaling import scale_minmax
from kernelstream.sparse import CSR

SKLEARN_CHECK_ROWS = 500
ALPHA = 1e-4  # SGDClassifier's default


# the keys of a set's result that are not --also columns
RESULT_KEYS = {"name", "task", "rows", "learner", "params", "seconds", "hints", "default",
               "no_skill", "sgd", "sgd_seconds", "beats_no_skill", "near_sgd", "ratio", "hint",
               "unscaled", "default_scale",
               "default_learner", "floor", "target_standardised", "refused", *REGRESSION_RUNS}


def manifest(data_dir: Path) -> list[dict[str, str]]:
    """The shared sets to run: every MANIFEST row but the ``*_test`` splits, with ``task``."""
    with open(data_dir / "MANIFEST.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    out = []
    for r in rows:
        if r["name"].endswith("_test"):
            continue
        r["task"] = "regression" if r["labels"].startswith("continuous") else "classification"
        out.append(r)
    return out


class RefusedError(RuntimeError):
    """``kernelstream replay`` refused the configuration (exit 2, its one-line reason)."""


def replay(path: Path, task: str, out: Path, extra: list[str]) -> dict[str, Any]:
    """``kernelstream replay PATH [--task regression] EXTRA --out OUT``; its summary.json and
    predictions (stream order)."""
    cmd = [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path),
           "--out", str(out), "-q", *(["--task", "regression"] if task == "regression" else []),
           *extra]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 2:  # the CLI's one-line refusal of a configuration
        raise RefusedError(proc.stderr.strip().splitlines()[-1].removeprefix(
            "kernelstream replay: error: "))
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: rc {proc.returncode}: {proc.stderr.strip()}")
    summary = json.loads((out / "summary.json").read_text())
    import pyarrow.parquet as pq

    table = pq.read_table(out / "predictions", columns=["position", "id", "score", "predicted",
                                                         "label"]).sort_by("position")
    cols = {k: table.column(k).to_numpy() for k in ("id", "score", "predicted", "label")}
    return {"summary": summary, "seconds": time.monotonic() - t0, "notes": proc.stderr, **cols}


def load_rows(path: Path, task: str) -> CSR | np.ndarray:
    """The file's rows as the replay reads them (LIBSVM wider than the replay's sparse
    threshold as CSR, else dense)."""
    if ksdata.infer_format(path) == "libsvm":
        X, _ = ksdata.load_sparse(path, task=task)  # type: ignore[arg-type]
        return X.to_dense() if X.shape[1] <= AUTO_SPARSE_WIDTH else X
    X, _ = ksdata.load(path, task=task)  # type: ignore[arg-type]
    return X


def sgd_hinge(X: CSR | np.ndarray, y: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Predictions (each before its row is learnt) of ``SGDClassifier(loss="hinge")``
    ``partial_fit`` one row at a time over ``X[rows]``: sklearn's update for one sample
    (``_sgd_fast._plain_sgd``: ``eta = 1 / (alpha (t0 + t - 1))``, ``t0`` from its ``optimal``
    schedule, weight decay ``1 - eta alpha`` applied through the weight scale, intercept
    decay 0.01 for sparse input), prediction ``+1`` iff the decision is > 0."""
    sparse = isinstance(X, CSR)
    w = np.zeros(X.shape[1])
    b = 0.0
    decay = 0.01 if sparse else 1.0
    typw = np.sqrt(1.0 / np.sqrt(ALPHA))
    t0 = 1.0 / (typw / max(1.0, 1.0) * ALPHA)  # hinge: |dloss(1, -typw)| = 1
    preds = np.empty(len(rows))
    for t, i in enumerate(rows.tolist(), 1):
        if sparse:
            c, v = X.row(i)
            p = float(np.dot(w[c], v)) + b
        else:
            v = X[i]
            p = float(np.dot(w, v)) + b
        preds[t - 1] = 1.0 if p > 0 else -1.0
        eta = 1.0 / (ALPHA * (t0 + t - 1))
        upd = eta * y[t - 1] if y[t - 1] * p <= 1.0 else 0.0
        s = max(0.0, 1.0 - eta * ALPHA)
        if upd != 0.0:
            if sparse:
                w[c] += v * (upd / s)
            else:
                w += v * (upd / s)
            b += upd * decay
        w *= s
    return preds


def check_against_sklearn(X: CSR | np.ndarray, y: np.ndarray, rows: np.ndarray,
                          mine: np.ndarray) -> None:
    """Stop unless :func:`sgd_hinge` predicts as ``SGDClassifier.partial_fit`` does on the
    first :data:`SKLEARN_CHECK_ROWS` rows (sklearn predicts −1 from its zero initial model)."""
    import scipy.sparse as sp
    from sklearn.linear_model import SGDClassifier

    k = min(SKLEARN_CHECK_ROWS, len(rows))
    M = (sp.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape) if isinstance(X, CSR)
         else X)
    clf = SGDClassifier(loss="hinge", random_state=0)
    classes = np.array([-1.0, 1.0])
    ref = np.empty(k)
    for t in range(k):
        xi = M[rows[t]:rows[t] + 1]
        ref[t] = clf.predict(xi)[0] if t else -1.0
        clf.partial_fit(xi, y[t:t + 1], classes=classes)
    bad = np.flatnonzero(ref != mine[:k])
    if len(bad):
        raise SystemExit(f"numpy SGD differs from sklearn's partial_fit at row {bad[0]}")


def running_majority(y: np.ndarray) -> np.ndarray:
    """Predictions of the running majority class (+1 on a tie and before any row)."""
    pos = np.concatenate([[0], np.cumsum(y > 0)[:-1]])
    seen = np.arange(len(y))
    return np.where(pos >= seen - pos, 1.0, -1.0)


def running_mean(y: np.ndarray) -> np.ndarray:
    """Predictions of the running mean (0 before any row)."""
    csum = np.concatenate([[0.0], np.cumsum(y)[:-1]])
    return np.divide(csum, np.arange(len(y)), out=np.zeros(len(y)),
                     where=np.arange(len(y)) > 0)


def run_set(r: dict[str, str], data_dir: Path, tmp: Path,
            also: dict[str, list[str]], floors: bool = True) -> dict[str, Any]:
    path = data_dir / r["file"]
    name, task = r["name"], r["task"]
    res: dict[str, Any] = {"name": name, "task": task}
    default = replay(path, task, tmp / name, [])
    s = default["summary"]
    res.update(rows=int(s["examples"]), learner=s["learner"], params=s["params"],
               default_learner=s.get("default_learner"),
               seconds=round(default["seconds"], 1),
               hints=[ln for ln in default["notes"].splitlines() if "hint" in ln])
    y, ids = default["label"], default["id"].astype(np.int64)
    if task == "classification":
        res["default"] = 100.0 * float(np.mean(default["predicted"] != y))
        res["no_skill"] = 100.0 * float(np.mean(running_majority(y) != y))
        X = load_rows(path, task)
        t0 = time.monotonic()
        preds = sgd_hinge(X, y, ids)
        check_against_sklearn(X, y, ids, preds)
        res["sgd"] = 100.0 * float(np.mean(preds != y))
        res["sgd_seconds"] = round(time.monotonic() - t0, 1)
        res["beats_no_skill"] = res["default"] <= 0.8 * res["no_skill"]
        res["near_sgd"] = res["default"] <= res["sgd"] + 1.0
        if floors and not res["beats_no_skill"] and res["rows"] <= FLOOR_MAX_ROWS:
            res["floor"] = floor(r, data_dir, tmp, ids, y)
    else:
        res["default"] = float(np.mean((default["score"] - y) ** 2))
        res["no_skill"] = float(np.mean((running_mean(y) - y) ** 2))
        res["ratio"] = res["default"] / res["no_skill"]
        res["beats_no_skill"] = res["ratio"] <= 0.8
    res["default_scale"] = s["scale"]
    runs = dict(also)
    if s.get("auto_scale"):  # --scale auto scaled the default's features: the run without
        runs["unscaled"] = ["--scale", "none"]
    if res["hints"]:  # the flags the hint names, e.g. "... may do better with --scale 01"
        named = res["hints"][0].rsplit(" with ", 1)[1].split(" (")[0]
        runs["hint"] = named.split()
    for label, args in runs.items():
        if task == "regression" and label != "hint" and not any(a == "--task" for a in args):
            continue
        for which in ("median", "scale"):
            if any(f"{{{which}_gamma}}" in a for a in args):
                g = estimate(path, which, s["scale"])
                args = [a.replace(f"{{{which}_gamma}}", repr(g)) for a in args]
        # the loop runner: the same streams and results as the default (direct) runner's,
        # without Beam's start-up
        try:
            other = replay(path, task, tmp / f"{name}-{label}", ["--runner", "loop", *args])
        except RefusedError as e:  # e.g. fogd's projection on url's 3.2 million columns
            res.setdefault("refused", {})[label] = str(e)
            continue
        y2 = other["label"]
        if task == "classification":
            res[label] = 100.0 * float(np.mean(other["predicted"] != y2))
        else:  # as a ratio to the running mean of the same (maybe scaled) targets
            res[label] = (float(np.mean((other["score"] - y2) ** 2))
                          / float(np.mean((running_mean(y2) - y2) ** 2)))
    if task == "regression":
        res["target_standardised"] = s.get("target_standardised")
        for label, args in REGRESSION_RUNS.items():
            other = replay(path, task, tmp / f"{name}-{label}", ["--runner", "loop", *args])
            y2 = other["label"]
            res[label] = (float(np.mean((other["score"] - y2) ** 2))
                          / float(np.mean((running_mean(y2) - y2) ** 2)))
    return res


# the floor of a set the default misses the no-skill target on: sets this small only (each
# costs ~36 replays per scaling)
FLOOR_MAX_ROWS = 5000
FLOOR_SCALES = ("none", "01")


def floor(r: dict[str, str], data_dir: Path, tmp: Path, ids: np.ndarray,
          y: np.ndarray) -> dict[str, Any]:
    """The best mistake rate, chosen in hindsight (an oracle), of every registered
    classification learner × the width grid ``gamma=auto × 1/8 .. 8`` (``sigmas``: the
    default grid centred on each of those widths; a learner with a fixed kernel pool once) ×
    ``--scale`` none / 01, on the replay's order (seed 0), and of scikit-learn's one-pass
    linear models (:data:`SKLEARN_ONE_PASS`, each row predicted before it is learnt, raw and
    min-max scaled over the file) in that same order."""
    from kernelstream import learners
    from kernelstream.data.options import ReadOptions
    from kernelstream.learners.kernels import parse_sigmas
    from kernelstream.learners.registry import available

    path = data_dir / r["file"]
    best: dict[str, Any] = {"rate": float("inf")}
    runs = 0
    names: set[str] = set()
    skipped: list[str] = []  # configurations the learner refused
    for scale in FLOOR_SCALES:
        g = widths.file_gamma(ReadOptions(path=str(path), scale=scale))
        for name in available():
            cls = learners.get(name)
            if cls.task != "classification":
                continue
            names.add(name)
            params = {p.name: p for p in cls.params}
            specs: dict[str, list[str]] = {}
            for f in widths.TUNE_FACTORS:
                label = "w" + f"{f:g}".replace(".", "_")
                if "gamma" in params:
                    specs[label] = [f"gamma=auto*{f:g}"]
                elif "sigmas" in params:
                    grid = parse_sigmas(str(params["sigmas"].default)).tolist()
                    specs[label] = [f"sigmas={widths.centred_sigmas(g * f, grid)}"]
            if not specs:
                specs["pool"] = []
            scaled = ["--scale", scale]  # "none" too: the default is --scale auto
            configs = floor_replay(path, tmp / f"{r['name']}-floor", name, specs, scaled)
            if configs is None:  # a width the learner refuses (e.g. outside its range): alone
                configs, refused = [], []
                for label, ps in specs.items():
                    one = floor_replay(path, tmp / f"{r['name']}-floor", name, {label: ps},
                                       scaled)
                    configs += one or []
                    refused += [] if one else [f"{name} {label} {scale}"]
                skipped += refused
            runs += len(configs)
            for c in configs:
                if c["mistake_rate"] < best["rate"]:
                    widths_given = {k: c["params"][k] for k in ("gamma", "sigmas")
                                    if k in c["params"]}
                    best = {"rate": c["mistake_rate"], "learner": name, "scale": scale,
                            "width": c["label"], **widths_given}
    X = load_rows(path, "classification")
    dense = X.to_dense() if isinstance(X, CSR) else np.asarray(X, np.float64)
    lo, hi = dense.min(axis=0), dense.max(axis=0)
    scaled = (dense - lo) / np.where(hi > lo, hi - lo, 1.0)
    linear = {}
    for model in SKLEARN_ONE_PASS:
        for scale, M in (("none", dense), ("01", scaled)):
            linear[f"{model} {scale}"] = 100.0 * float(np.mean(
                one_pass(model, M, y, ids) != y))
    ideal = ideal_floor(dense, y, ids)
    return {"oracle": best, "configs": runs, "learners": len(names), "refused": skipped,
            "sklearn": linear, "ideal": ideal,
            "orders": other_orders(path, tmp / f"{r['name']}-orders", ideal["model_index"])}


def ideal_floor(X: np.ndarray, y: np.ndarray, ids: np.ndarray) -> dict[str, Any]:
    """What no one-pass learner can be expected to beat: a batch model (scikit-learn's RBF
    ``SVC`` or ``LogisticRegression``, :data:`IDEAL_GRID`) refit on *every row seen so far*
    before it predicts the next, in the replay's order, on features standardised by the
    whole file's mean and deviation (statistics of rows not yet seen: optimistic), with its
    hyper-parameters chosen in hindsight: the best prequential mistake rate (%) any of them
    reaches. Also the best 10-fold cross-validated error (%) of the grid on the whole file:
    the batch generalisation error with 90 % of the rows to learn from."""
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    Z = standardised(X)
    full = np.empty(len(y))
    full[ids] = y  # the labels in file order, for the cross-validation
    Zs = Z[ids]

    def name(kind: str, kw: dict[str, float]) -> str:
        return f"{kind}({', '.join(f'{k}={v:g}' for k, v in kw.items())})"

    coarse = sorted((refit_prequential(Zs, y, i, IDEAL_EVERY), i)
                    for i in range(len(IDEAL_GRID)))
    fine = [(refit_prequential(Zs, y, i, 1), i) for _, i in coarse[:IDEAL_TOP]]
    rate, i = min(fine)
    folds = StratifiedKFold(10, shuffle=True, random_state=0)
    cv = min((100.0 * (1.0 - float(np.mean(cross_val_score(ideal_model(j), Z, full,
                                                             cv=folds)))), name(*IDEAL_GRID[j]))
             for j in range(len(IDEAL_GRID)))
    return {"rate": rate, "model": name(*IDEAL_GRID[i]), "model_index": i,
            "every_10": coarse[0][0], "every_10_model": name(*IDEAL_GRID[coarse[0][1]]),
            "cv": cv[0], "cv_model": cv[1], "configs": len(IDEAL_GRID)}


def standardised(X: np.ndarray) -> np.ndarray:
    """``X`` standardised by its whole mean and deviation (the idealised learner's view)."""
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def ideal_model(i: int) -> Any:
    """A fresh scikit-learn model of :data:`IDEAL_GRID` entry ``i``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    kind, kw = IDEAL_GRID[i]
    return SVC(**kw) if kind == "SVC" else LogisticRegression(max_iter=5000, **kw)


def refit_prequential(Zs: np.ndarray, y: np.ndarray, i: int, every: int) -> float:
    """The prequential mistake rate (%) of :data:`IDEAL_GRID` model ``i`` refit on all the rows
    seen so far every ``every`` rows (``Zs``: the rows in stream order, labels ``y``); the first
    row is predicted −1 and one class seen so far predicts that class."""
    preds = np.full(len(y), -1.0)
    for s in range(1, len(y), every):
        seen = y[:s]
        nxt = slice(s, min(s + every, len(y)))
        preds[nxt] = (seen[0] if np.all(seen == seen[0])  # one class so far
                      else ideal_model(i).fit(Zs[:s], seen).predict(Zs[nxt]))
    return 100.0 * float(np.mean(preds != y))


def other_orders(path: Path, out: Path, ideal_index: int) -> dict[str, Any]:
    """The default (``kernelstream replay DATA -R FLOOR_ORDERS``, the loop runner) and the
    idealised learner's model (:data:`IDEAL_GRID` entry ``ideal_index``, the one chosen in
    hindsight on the default's order, refit after every row) in each of the replay's first
    :data:`FLOOR_ORDERS` orders (order 0: the default's): per order, the mistake rates (%) of
    both and the no-skill rate; an order's target is 0.8 × its no-skill rate."""
    import pyarrow.parquet as pq

    cmd = [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path), "--out",
           str(out), "--overwrite", "-q", "--runner", "loop", "-R", str(FLOOR_ORDERS)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: rc {proc.returncode}: {proc.stderr.strip()}")
    table = pq.read_table(out / "predictions", columns=[
        "permutation", "position", "id", "predicted", "label"]).sort_by(
            [("permutation", "ascending"), ("position", "ascending")])
    cols = {k: table.column(k).to_numpy() for k in ("permutation", "id", "predicted", "label")}
    dense = load_rows(path, "classification")
    Z = standardised(dense.to_dense() if isinstance(dense, CSR)
                     else np.asarray(dense, np.float64))
    default, no_skill, ideal = [], [], []
    for p in range(FLOOR_ORDERS):
        sel = cols["permutation"] == p
        y = cols["label"][sel]
        default.append(100.0 * float(np.mean(cols["predicted"][sel] != y)))
        no_skill.append(100.0 * float(np.mean(running_majority(y) != y)))
        ideal.append(refit_prequential(Z[cols["id"][sel].astype(np.int64)], y, ideal_index, 1))
    return {"default": default, "no_skill": no_skill, "ideal": ideal}


def floor_replay(path: Path, out: Path, name: str, specs: dict[str, list[str]],
                 extra: list[str]) -> list[dict[str, Any]] | None:
    """One loop replay of learner ``name`` under the labels of ``specs`` (their ``-p``
    values); its summary's configurations, or None when the run was refused."""
    cmd = [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path), "--out",
           str(out), "--overwrite", "-q", "--runner", "loop", *extra]
    for label, ps in specs.items():
        cmd += ["-l", f"{label}={name}", *(a for q in ps for a in ("-p", f"{label}.{q}"))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 2:  # a configuration error (one line): e.g. a width out of range
        return None
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: rc {proc.returncode}: {proc.stderr.strip()}")
    configs: list[dict[str, Any]] = json.loads((out / "summary.json").read_text())["configs"]
    return configs


def one_pass(model: str, X: np.ndarray, y: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Predictions of scikit-learn's ``model`` (defaults, ``random_state=0``) trained by
    ``partial_fit`` one row of ``X[rows]`` at a time, each predicted before it is learnt
    (−1 before the first)."""
    import warnings

    from sklearn.linear_model import PassiveAggressiveClassifier, Perceptron, SGDClassifier

    warnings.filterwarnings("ignore", "Class PassiveAggressiveClassifier is deprecated",
                            FutureWarning)  # (sklearn 1.8) the same model, until 1.10
    clf = {"Perceptron": lambda: Perceptron(random_state=0),
           "PassiveAggressiveClassifier": lambda: PassiveAggressiveClassifier(random_state=0),
           "SGDClassifier(log_loss)": lambda: SGDClassifier(loss="log_loss", random_state=0),
           }[model]()
    classes = np.array([-1.0, 1.0])
    preds = np.empty(len(rows))
    for t, i in enumerate(rows.tolist()):
        xi = X[i:i + 1]
        preds[t] = clf.predict(xi)[0] if t else -1.0
        clf.partial_fit(xi, y[t:t + 1], classes=classes)
    return preds


def estimate(path: Path, which: str, scale: str = "none") -> float:
    """The width of either estimator (``median`` or ``scale``) on the reservoir
    ``gamma=auto`` reads (its rows scaled as the default run's: ``scale``), 4 significant
    digits: the column of the estimator not chosen."""
    from kernelstream.data.options import ReadOptions
    from kernelstream.data.rows import iter_file_rows

    rows = (row for _, _, row in iter_file_rows(ReadOptions(path=str(path)))
            if not isinstance(row, ksdata.errors.ParseError))
    if which == "median":
        return widths.rounded(widths.median_gamma(widths.reservoir_from_rows(rows, scale=scale)))
    # the variance over every entry needs the scaled values themselves (the reservoir keeps
    # only what distances need: each column's shift cancels there, not in this variance)
    res = widths.reservoir_from_rows(rows)
    if scale != "none":
        res = scale_minmax(res.to_dense(), scale)  # type: ignore[arg-type]
    return widths.rounded(widths.scale_gamma(res))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_data_dir_arg(p)
    p.add_argument("--out-dir", type=Path, default=_common.RESULTS)
    p.add_argument("--only", help="comma-separated set names (default: every shared set)")
    p.add_argument("--also", action="append", metavar="NAME='REPLAY ARGS'",
                   help="another configuration as a column (repeatable; default: "
                   + ", ".join(f"{k}='{v}'" for k, v in ALSO.items()) + ")")
    p.add_argument("--no-floors", action="store_true",
                   help="skip the oracle floor of the small sets the target is missed on")
    p.add_argument("--render", type=Path, metavar="JSON",
                   help="only write defaults.md again from a defaults.json")
    args = p.parse_args(argv)
    if args.render is not None:
        doc = json.loads(args.render.read_text())
        results = doc["sets"] if isinstance(doc, dict) else doc  # (the first files: a list)
        names = [k for k in results[0] if k not in RESULT_KEYS]
        args.out_dir.mkdir(parents=True, exist_ok=True)
        (args.out_dir / "defaults.md").write_text(render(results, names))
        return 0
    also = {}
    for spec in args.also if args.also is not None else [f"{k}={v}" for k, v in ALSO.items()]:
        label, _, rest = spec.partition("=")
        also[label] = shlex.split(rest)
    sets = manifest(args.data_dir)
    if args.only:
        keep = set(args.only.split(","))
        sets = [r for r in sets if r["name"] in keep]
    results = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ks-defaults-") as tmp:
        for k, r in enumerate(sets, 1):
            print(f"[{k}/{len(sets)}] {r['name']} ({r['task']}, {int(r['n_examples']):,} rows)"
                  f" ...", file=sys.stderr, flush=True)
            res = run_set(r, args.data_dir, Path(tmp), also, floors=not args.no_floors)
            results.append(res)
            # the sets so far, so that a run stopped part-way keeps what it measured
            args.out_dir.mkdir(parents=True, exist_ok=True)
            (args.out_dir / "defaults.partial.json").write_text(
                json.dumps({"sets": results}, indent=1) + "\n")
            print(f"    default {res['default']:.4g} ({res['learner']}), no-skill "
                  f"{res['no_skill']:.4g}" + (f", SGD {res['sgd']:.2f}" if "sgd" in res else "")
                  + f"; {time.monotonic() - started:.0f} s so far", file=sys.stderr, flush=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    # an object, as every results file (``kernelstream report`` reads them all)
    (args.out_dir / "defaults.json").write_text(json.dumps({"sets": results}, indent=1) + "\n")
    (args.out_dir / "defaults.md").write_text(render(results, list(also)))
    (args.out_dir / "defaults.partial.json").unlink(missing_ok=True)
    print(f"wrote {args.out_dir / 'defaults.md'} ({time.monotonic() - started:.0f} s)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
