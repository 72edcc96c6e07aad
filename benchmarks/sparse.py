"""Sparse, high-dimensional rows (issue 13): BOGD, BPA-S, NOGD and SkeGD on text, URL and tf-idf
data given as CSR rows, and the sparse path against the dense path on narrow data.

Part 1 — the sparse sets of ``--data-dir`` (news20 train, url_Day0-5_mini, vw_rcv1_small,
reuters_moneyfx; a file that is missing is reported and skipped): every learner at B =
``--budget`` runs once over the whole file (permutation 0 of ``kernelstream.seeding``: the
files are grouped by class) in a fresh subprocess, so that its peak RSS is its own. The parent
parses the LIBSVM text into CSR (``CSR.from_libsvm_bytes``; labels ``> 0`` are the positive
class) and hands the arrays over as ``.npy`` files. The child first warms the learner up on a
small synthetic sparse stream (lazy imports, BLAS/LAPACK buffers), resets its peak RSS
(``/proc/self/clear_refs``) and takes its RSS as the *baseline*; then it loads the CSR, runs
``predict_learn_many`` over all rows (test-then-train) and reports its peak RSS (``VmHWM``).
The memory check: the growth of the peak over the baseline must stay within 1.5× (CSR bytes +
model bytes), model bytes being every numpy array the learner holds at the end. The Gaussian
width is ``gamma = 1 / mean‖x‖²`` of the file (distances of typical pairs give κ ≈ e^-2); step
sizes are the learners' defaults. Nothing is tuned: the tables are about memory and speed, and a
Gaussian kernel on raw term counts at B = 200 learns little on news20 and rcv1 (the table shows
the minority-class rate, the mistake rate of always predicting the majority, beside it).

Part 2 — a9a and w8a (w7a when w8a is absent), ``--rows`` rows (permutation 0): the same
learners on the same rows given dense and as CSR, timed alternately ``--repeats`` times in this
process; the table gives the median µs/round of both and their ratio, the mistakes of both, and
the largest score difference relative to the largest score.

Part 3 — end to end: ``kernelstream replay`` of every sparse set with BPA-S at B = ``--budget``
(its defaults) on the loop and direct runners, each in a fresh process; wall time (process
start to exit, imports included) and peak RSS of the process and all it waited for
(``RUSAGE_CHILDREN`` of a wrapper). The first 2,000 news20 rows also run with ``--rows dense``,
the path every run took before sparse rows, for comparison in the same run.

Part 4 — renumbered columns (issue 28): the first ``--renum-rows`` news20 rows (permutation 0)
as they are and with every column ``j`` renumbered to ``j·k`` (``k`` the largest factor that
keeps indices below 2^31 − 1; the order within a row is kept, so the sums are the same), width
2^31 − 1, for the sparse learners above and the Gaussian Perceptron and PA-I, timed
alternately ``--repeats`` times in this process (``predict_learn_many`` over the rows): the
scores must be bit-identical and the speed ratio (renumbered / original time) at most 1.2.

Part 5 — linear models on text (issue 28): the linear-kernel Perceptron and PA-I (the primal
form, ``kernelstream.learners._primal``) over the whole news20 and rcv1 files (permutation 0),
one ``predict_learn_many`` call each in this process (the block validation included, the file
already parsed into CSR), median of ``--repeats``; beside them in the same run
scikit-learn's ``SGDClassifier`` (hinge loss, constant step 1, no regularisation: the
Perceptron-like SGD) test-then-train one row at a time (``decision_function`` then
``partial_fit`` on 1-row CSR matrices), and Vowpal Wabbit's Python binding (``--loss_function
hinge``, ``predict`` then ``learn`` per text line) when it is installed. The end-to-end wall
time of ``kernelstream replay -l perceptron -p kernel=linear`` (process start to exit) is given
too.

``--parts 4,5`` runs only those parts and keeps the other parts' results of the stored
``sparse.json`` (their date is shown).

Example::

    .venv/bin/python benchmarks/sparse.py            # writes results/sparse.md and .json
    .venv/bin/python benchmarks/sparse.py --parts 4,5
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
import numpy as np
from _sparse_report import RSS_FACTOR, mib, render

from kernelstream import learners
from kernelstream.seeding import permutation
from kernelstream.sparse import CSR

LEARNERS = ("bogd", "bpa-s", "nogd", "skegd")
SPARSE_SETS = (
    ("news20", "news20bydate_train.binary.svm"),
    ("url_mini", "url_Day0-5_mini.svm"),
    ("rcv1_small", "vw_rcv1_small.svm"),
    ("reuters_moneyfx", "reuters_moneyfx.trn"),
)
DENSE_SETS = (("a9a", ("a9a",), 123), ("w8a", ("w8a", "w7a"), 300))


def read_libsvm(path: Path, n_features: int | None = None) -> tuple[CSR, np.ndarray]:
    X, lab = CSR.from_libsvm_bytes(path.read_bytes(), n_features=n_features)
    return X.check(), np.where(lab > 0, 1.0, -1.0)


def gamma_for(X: CSR) -> float:
    m = float(np.mean(X.row_sq_norms()))
    return 1.0 / m if m > 0 else 1.0


def params_for(name: str, budget: int, gamma: float) -> dict[str, Any]:
    return {"budget": budget, "gamma": gamma}


# -- the child: one measured run -----------------------------------------------------------------
def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def model_nbytes(obj: Any) -> int:
    """Bytes of every distinct numpy array reachable from ``obj`` through attributes, slots,
    lists, tuples and dicts (the learner's in-memory model)."""
    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            total += o.nbytes if o.base is None else 0  # views cost nothing extra
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif hasattr(o, "__dict__") or hasattr(type(o), "__slots__"):
            if isinstance(o, (type, np.random.Generator)):
                continue
            stack.extend(vars(o).values() if hasattr(o, "__dict__") else ())
            for s in getattr(type(o), "__slots__", ()):
                if hasattr(o, s):
                    stack.append(getattr(o, s))
    return total


def warm_up(name: str, params: dict[str, Any]) -> None:
    """Run the learner once on a small synthetic sparse stream (past the budget, so NOGD and
    SkeGD reach stage 2), so that lazy imports and BLAS/LAPACK work buffers exist before the
    baseline is taken: they are the same for any data."""
    rng = np.random.default_rng(0)
    n, d, k = 2 * int(params["budget"]) + 50, 1000, 5
    idx = np.sort(np.argsort(rng.random((n, d)), axis=1)[:, :k], axis=1).ravel()
    X = CSR(np.arange(n + 1, dtype=np.int64) * k, idx.astype(np.int64), rng.random(n * k), d)
    learners.make(name, seed=0, **params).predict_learn_many(X, rng.choice([-1.0, 1.0], n))


def _reset_peak() -> bool:
    try:  # "5" resets VmHWM to the current RSS (Linux >= 4.0)
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def worker(folder: str, name: str, params_json: str) -> None:
    params = json.loads(params_json)
    warm_up(name, params)
    gc.collect()
    reset = _reset_peak()
    base = _status_kib("VmRSS") * 1024  # interpreter, libraries, warmed-up buffers
    d = Path(folder)
    X = CSR(np.load(d / "indptr.npy"), np.load(d / "indices.npy"), np.load(d / "data.npy"),
            int(np.load(d / "n_features.npy")))
    y = np.load(d / "y.npy")
    m = learners.make(name, seed=0, **params)
    t = time.perf_counter()
    s = m.predict_learn_many(X, y)
    sec = time.perf_counter() - t
    print(json.dumps({
        "rows": int(X.n_rows), "seconds": sec,
        "mistakes": int(np.sum(np.where(s >= 0.0, 1.0, -1.0) != y)),
        "rss_base": base, "rss_peak": _status_kib("VmHWM") * 1024,
        "csr_bytes": X.nbytes, "model_bytes": model_nbytes(m), "sparse_mode": bool(m.sparse),
        "peak_reset": reset,
    }))


def run_child(folder: Path, name: str, params: dict[str, Any]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(folder), name,
           json.dumps(params)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{name}: child failed: {tail}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- part 2: sparse vs dense in one process ------------------------------------------------------
def time_pair(name: str, params: dict[str, Any], Xd: np.ndarray, Xs: CSR, y: np.ndarray,
              repeats: int) -> dict[str, Any]:
    td: list[float] = []
    ts: list[float] = []
    sd = ss = np.zeros(0)
    for _ in range(max(1, repeats)):  # alternate dense / sparse
        m = learners.make(name, seed=0, **params)
        t = time.perf_counter()
        sd = m.predict_learn_many(Xd, y)
        td.append(time.perf_counter() - t)
        m = learners.make(name, seed=0, **params)
        t = time.perf_counter()
        ss = m.predict_learn_many(Xs, y)
        ts.append(time.perf_counter() - t)
    n = len(y)
    dense_us = 1e6 * statistics.median(td) / n
    sparse_us = 1e6 * statistics.median(ts) / n
    scale = max(float(np.max(np.abs(sd))), 1e-300)
    return {
        "rows": n, "dense_us": dense_us, "sparse_us": sparse_us, "ratio": sparse_us / dense_us,
        "dense_mistakes": int(np.sum(np.where(sd >= 0, 1.0, -1.0) != y)),
        "sparse_mistakes": int(np.sum(np.where(ss >= 0, 1.0, -1.0) != y)),
        "max_rel_diff": float(np.max(np.abs(ss - sd)) / scale),
    }


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:5])
        return 0
    ap = _common.script_parser(__doc__, epilog=False)
    _common.add_output_args(ap, "sparse")
    ap.add_argument("--budget", type=int, default=200, help="budget B (default 200)")
    ap.add_argument("--rows", type=int, default=5000,
                    help="rows of a9a / w8a for the sparse-vs-dense timing (default 5000)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="alternating dense/sparse repeats; medians are reported (default 3)")
    ap.add_argument("--learners", default=",".join(LEARNERS),
                    help=f"comma-separated learner names (default {','.join(LEARNERS)})")
    ap.add_argument("--no-replay", dest="replay", action="store_false",
                    help="skip part 3 (end-to-end kernelstream replay runs)")
    ap.add_argument("--parts", default="1,2,3,4,5",
                    help="parts to run (default all); the others are kept from sparse.json")
    ap.add_argument("--renum-rows", type=int, default=3000,
                    help="news20 rows of the renumbering comparison (default 3000)")
    a = ap.parse_args(argv)
    parts = {int(s) for s in a.parts.split(",") if s}
    names = [s for s in a.learners.split(",") if s]
    started = time.time()
    stamp = _common.now_utc()
    res: dict[str, Any] = {"generated": stamp, "machine": _common.machine_info(),
                           "budget": a.budget, "sparse_sets": [], "dense_sets": [],
                           "missing": []}
    if parts != {1, 2, 3, 4, 5}:  # keep the stored results of the parts not rerun
        old = _common.read_json(Path(a.out_dir) / "sparse.json")
        keep = {1: ("sparse_sets",), 2: ("dense_sets",), 3: ("replays",), 4: ("renumbered",),
                5: ("linear",)}
        for part, keys in keep.items():
            if part not in parts:
                for k in keys:
                    if k in old:
                        res[k] = old[k]
                res.setdefault("kept", {})[str(part)] = old.get("generated", "?")
        res["missing"] = old.get("missing", []) if 1 not in parts else []
    if 4 in parts:
        res["renumbered"] = renumbered(Path(a.data_dir), names, a.budget, a.renum_rows,
                                       a.repeats)
    if 5 in parts:
        res["linear"] = linear_text(Path(a.data_dir), a.repeats)
    if 1 not in parts:
        return _finish(a, res, started)
    # part 1
    for label, fname in SPARSE_SETS:
        path = Path(a.data_dir) / fname
        if not path.exists():
            res["missing"].append(fname)
            print(f"{fname}: missing, skipped", file=sys.stderr)
            continue
        X, y = read_libsvm(path)
        perm = permutation(X.n_rows, 0, 0)  # the files are grouped by class
        X, y = X.take(perm), y[perm]
        gamma = gamma_for(X)
        info = {"dataset": label, "file": fname, "rows": X.n_rows, "width": X.n_features,
                "minority_rate": float(min(np.mean(y > 0), np.mean(y < 0))),
                "nnz": X.nnz, "max_index": int(X.indices.max()) + 1 if X.nnz else 0,
                "csr_bytes": X.nbytes, "gamma": gamma, "runs": []}
        with tempfile.TemporaryDirectory(prefix="ks-sparse-") as tmp:
            for k, v in (("indptr", X.indptr), ("indices", X.indices), ("data", X.data),
                         ("y", y), ("n_features", np.array(X.n_features))):
                np.save(Path(tmp) / f"{k}.npy", v)
            del X
            for name in names:
                params = params_for(name, a.budget, gamma)
                try:
                    r = run_child(Path(tmp), name, params)
                except RuntimeError as e:
                    print(str(e), file=sys.stderr)
                    info["runs"].append({"learner": name, "error": str(e)})
                    continue
                grow = r["rss_peak"] - r["rss_base"]
                r.update(learner=name, params=params, rss_growth=grow,
                         rss_ratio=grow / (r["csr_bytes"] + r["model_bytes"]))
                r["pass"] = r["rss_ratio"] <= RSS_FACTOR
                info["runs"].append(r)
                print(f"  {label} {name}: {r['rows'] / r['seconds']:.0f} ex/s, mistakes "
                      f"{r['mistakes'] / r['rows']:.3f}, rss ratio {r['rss_ratio']:.2f}",
                      file=sys.stderr, flush=True)
        res["sparse_sets"].append(info)
    # part 2
    for label, candidates, width in DENSE_SETS:
        path = next((Path(a.data_dir) / c for c in candidates
                     if (Path(a.data_dir) / c).exists()), None)
        if path is None:
            res["missing"].append("/".join(candidates))
            continue
        X, y = read_libsvm(path, n_features=width)
        perm = permutation(X.n_rows, 0, 0)[: a.rows]
        Xs, y = X.take(perm), y[perm]
        Xd = Xs.to_dense()
        gamma = gamma_for(Xs)
        info = {"dataset": label, "file": path.name, "rows": Xs.n_rows, "width": width,
                "gamma": gamma, "runs": []}
        for name in names:
            r = time_pair(name, params_for(name, a.budget, gamma), Xd, Xs, y, a.repeats)
            r["learner"] = name
            info["runs"].append(r)
            print(f"  {path.name} {name}: sparse/dense {r['ratio']:.2f}", file=sys.stderr,
                  flush=True)
        res["dense_sets"].append(info)
    # part 3
    res["replays"] = replays(Path(a.data_dir), a.budget) if a.replay and 3 in parts else []
    return _finish(a, res, started)


def _finish(a: Any, res: dict[str, Any], started: float) -> int:
    res["minutes"] = (time.time() - started) / 60
    _common.write_report(a.out_dir, "sparse", render(res), res)
    print(f"wrote {Path(a.out_dir) / 'sparse.md'}", file=sys.stderr)
    return 0


# -- part 4: renumbered columns ------------------------------------------------------------------
def _timed(fn: Any) -> tuple[float, float, Any]:
    """``(wall seconds, CPU seconds of this process, result)`` of ``fn()``: the machine is
    shared, so the CPU time (``process_time``) is the steadier measure of the work done."""
    w, c = time.perf_counter(), time.process_time()
    r = fn()
    return time.perf_counter() - w, time.process_time() - c, r


def renumbered(data_dir: Path, names: list[str], budget: int, rows: int,
               repeats: int) -> dict[str, Any]:
    path = data_dir / SPARSE_SETS[0][1]
    if not path.exists():
        return {}
    X, y = read_libsvm(path)
    perm = permutation(X.n_rows, 0, 0)[:rows]
    X, y = X.take(perm), y[perm]
    width = (1 << 31) - 1
    k = (width - 1) // X.n_features
    W = CSR(X.indptr, X.indices * k, X.data, width)
    gamma = gamma_for(X)
    runs = []
    for name in [*names, "perceptron", "pa-i"]:
        params = params_for(name, budget, gamma) if name in names else {"gamma": gamma}
        t: dict[str, list[tuple[float, float]]] = {"orig": [], "renum": []}
        got: dict[str, np.ndarray] = {}
        for _ in range(max(1, repeats)):  # alternate original / renumbered
            for key, Z in (("orig", X), ("renum", W)):
                m = learners.make(name, seed=0, **params)
                wall, cpu, got[key] = _timed(lambda m=m, Z=Z: m.predict_learn_many(Z, y))
                t[key].append((wall, cpu))
        so, sw = got["orig"], got["renum"]
        r = {"learner": name, "params": params,
             "orig_s": statistics.median(w for w, _ in t["orig"]),
             "renum_s": statistics.median(w for w, _ in t["renum"]),
             "orig_cpu": statistics.median(c for _, c in t["orig"]),
             "renum_cpu": statistics.median(c for _, c in t["renum"]),
             "identical": bool(np.array_equal(so, sw)),
             "mistakes": int(np.sum(np.where(so >= 0, 1.0, -1.0) != y))}
        r["ratio"] = r["renum_cpu"] / r["orig_cpu"]
        r["wall_ratio"] = r["renum_s"] / r["orig_s"]
        runs.append(r)
        print(f"  renumbered {name}: ratio {r['ratio']:.2f}, identical {r['identical']}",
              file=sys.stderr, flush=True)
    return {"rows": X.n_rows, "width": X.n_features, "factor": k, "max_index": int(W.indices.max()),
            "runs": runs}


# -- part 5: linear models on text ---------------------------------------------------------------
def _sklearn_sgd(X: CSR, y: np.ndarray) -> dict[str, Any]:
    import scipy.sparse as sp
    from sklearn.linear_model import SGDClassifier

    M = sp.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape)
    clf = SGDClassifier(loss="hinge", penalty=None, learning_rate="constant", eta0=1.0)
    out = np.zeros(len(y))
    rows = [M[i] for i in range(len(y))]  # sliced beforehand: not part of the learning
    classes = np.array([-1.0, 1.0])

    def loop() -> None:
        for i, r in enumerate(rows):
            if i:
                out[i] = clf.decision_function(r)[0]
            clf.partial_fit(r, y[i:i + 1], classes=classes)

    sec, cpu, _ = _timed(loop)
    return {"seconds": sec, "cpu": cpu,
            "mistakes": int(np.sum(np.where(out >= 0, 1.0, -1.0) != y))}


def _vw(X: CSR, y: np.ndarray) -> dict[str, Any] | None:
    try:
        from vowpalwabbit import Workspace
    except ImportError:
        return None
    lines = []
    for i in range(X.n_rows):
        a, b = int(X.indptr[i]), int(X.indptr[i + 1])
        feats = " ".join(f"{j}:{v!r}" for j, v in zip(X.indices[a:b].tolist(),
                                                       X.data[a:b].tolist(), strict=True))
        lines.append((f"{int(y[i])} | {feats}", f" | {feats}"))
    vw = Workspace("--loss_function hinge --quiet")
    out = np.zeros(len(y))

    def loop() -> None:
        for i, (lab, unl) in enumerate(lines):
            out[i] = vw.predict(unl)
            vw.learn(lab)

    sec, cpu, _ = _timed(loop)
    vw.finish()
    return {"seconds": sec, "cpu": cpu,
            "mistakes": int(np.sum(np.where(out >= 0, 1.0, -1.0) != y)),
            "version": _vw_version()}


def _vw_version() -> str:
    try:
        from importlib.metadata import version
        return version("vowpalwabbit")
    except Exception:  # only a label
        return "?"


def linear_text(data_dir: Path, repeats: int) -> list[dict[str, Any]]:
    out = []
    for label, fname in (SPARSE_SETS[0], SPARSE_SETS[2]):
        path = data_dir / fname
        if not path.exists():
            continue
        X, y = read_libsvm(path)
        perm = permutation(X.n_rows, 0, 0)
        X, y = X.take(perm), y[perm]
        info: dict[str, Any] = {"dataset": label, "rows": X.n_rows, "nnz": X.nnz, "runs": []}
        for name in ("perceptron", "pa-i"):
            secs: list[tuple[float, float]] = []
            s = np.zeros(0)
            m = learners.make(name, kernel="linear")
            for _ in range(max(1, repeats)):
                m = learners.make(name, kernel="linear")
                wall, cpu, s = _timed(lambda m=m, X=X, y=y: m.predict_learn_many(X, y))
                secs.append((wall, cpu))
            info["runs"].append({"learner": f"{name} (kernel=linear)",
                                 "primal": bool(getattr(m, "_primal", False)),
                                 "seconds": statistics.median(w for w, _ in secs),
                                 "cpu": statistics.median(c for _, c in secs),
                                 "mistakes": int(np.sum(np.where(s >= 0, 1.0, -1.0) != y))})
        info["runs"].append({"learner": "sklearn SGDClassifier.partial_fit per row (hinge)",
                             **_sklearn_sgd(X, y)})
        v = _vw(X, y)
        if v is not None:
            info["runs"].append({"learner": f"Vowpal Wabbit {v.pop('version')} per row "
                                            "(hinge)", **v})
        info["replay"] = _replay_linear(path)
        for r in info["runs"]:
            print(f"  {label} {r['learner']}: {X.n_rows / r['seconds']:.0f} ex/s",
                  file=sys.stderr, flush=True)
        out.append(info)
    return out


def _replay_linear(path: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ks-replay-") as out:
        argv = [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path), "-l",
                "perceptron", "-p", "kernel=linear", "--out", out, "--quiet"]
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        sec = time.perf_counter() - t
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"seconds": sec, "examples": summary["examples"],
            "mistake_rate": summary["mistake_rate"]}


_WRAPPER = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "rc = subprocess.run(sys.argv[1:], capture_output=True).returncode; "
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)"
            ".ru_maxrss, rc)")


def replay_once(path: Path, budget: int, runner: str, extra: list[str]) -> dict[str, Any]:
    """One ``kernelstream replay`` in a fresh process: seconds, peak RSS, examples."""
    with tempfile.TemporaryDirectory(prefix="ks-replay-") as out:
        argv = [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path), "-l",
                "bpa-s", "-p", f"budget={budget}", "--runner", runner, "--out", out,
                "--quiet", *extra]
        res = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True,
                             text=True, check=True)
        secs, rss_kib, rc = res.stdout.split()
        if int(rc) != 0:
            raise RuntimeError(f"replay {path.name} {runner} {extra}: exit {rc}")
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"runner": runner, "extra": extra, "seconds": float(secs),
            "rss_peak": int(rss_kib) * 1024, "examples": summary["examples"],
            "mistake_rate": summary["mistake_rate"], "rows": summary.get("rows")}


def replays(data_dir: Path, budget: int) -> list[dict[str, Any]]:
    out = []
    for label, fname in SPARSE_SETS:
        path = data_dir / fname
        if not path.exists():
            continue
        for runner in ("loop", "direct"):
            r = replay_once(path, budget, runner, [])
            r["dataset"] = label
            out.append(r)
            print(f"  replay {label} {runner}: {r['examples'] / r['seconds']:.0f} ex/s, "
                  f"{mib(r['rss_peak'])} MiB", file=sys.stderr, flush=True)
        if label == "news20":
            for rows in ("sparse", "dense"):
                r = replay_once(path, budget, "loop", ["--limit", "2000", "--rows", rows])
                r["dataset"] = f"{label} (first 2,000 rows, --rows {rows})"
                out.append(r)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
