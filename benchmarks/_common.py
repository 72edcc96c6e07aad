"""Shared helpers of the benchmark scripts: dataset definitions and loading, the prequential
runner (ALGORITHMS.md §2.1) with the shared seeding, and a small process pool (≤ 2 workers).

The scripts import this module as ``_common`` (they put ``benchmarks/`` on ``sys.path``).
"""

from __future__ import annotations

import os

# One BLAS thread per process: the machine has 2 cores and we run up to 2 workers.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from kernelstream import data as ksdata  # noqa: E402
from kernelstream import evaluate, learners  # noqa: E402
from kernelstream.seeding import learner_seed, permutation  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
MAX_WORKERS = 2


# -- data ----------------------------------------------------------------------------------------
def default_data_dir() -> Path:
    env = os.environ.get("KERNELSTREAM_DATA")
    return Path(env) if env else (REPO / ".." / "shared" / "datasets").resolve()


def add_data_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir", type=Path, default=default_data_dir(),
        help="directory holding the dataset files (default: $KERNELSTREAM_DATA or "
             "../shared/datasets relative to the repository; now %(default)s)",
    )


@dataclass(frozen=True)
class DatasetDef:
    name: str
    files: tuple[str, ...]  # concatenated in this order ("merged" train + test)
    fmt: str  # "libsvm" | "csv" (label in the last column)
    scale: str  # "none" (already scaled) | "01" (min-max of the merged data to [0, 1])
    n_features: int
    paper_n: int  # rows used by papers P3/P4
    note: str = ""


DATASETS: dict[str, DatasetDef] = {
    d.name: d
    for d in (
        DatasetDef("german", ("german.numer_scale",), "libsvm", "none", 24, 1000,
                   "LIBSVM german.numer_scale (features already in [-1, 1])"),
        # Raw values: LIBSVM has no scaled svmguide3, and the toolboxes the papers ran
        # (LIBOL, LSOKL) ship svmguide3.mat with these raw values (MANIFEST.tsv); §2.8's
        # min-max reconstruction misses P3's NOGD and P0's OKS-SIL, the raw file matches both.
        DatasetDef("svmguide3", ("svmguide3", "svmguide3.t"), "libsvm", "none", 22, 1284,
                   "svmguide3 + svmguide3.t merged (1,243 + 41), raw values as in the toolboxes' "
                   "svmguide3.mat (LIBSVM has no scaled copy)"),
        DatasetDef("svmguide3-01", ("svmguide3", "svmguide3.t"), "libsvm", "01", 22, 1284,
                   "the same merged svmguide3 rows min-max scaled to [0, 1] on the merged data "
                   "(§2.8 recon; sensitivity check only)"),
        DatasetDef("spambase", ("spambase.data",), "csv", "01", 57, 4601,
                   "UCI spambase, min-max [0, 1]; spam = +1"),
        DatasetDef("spambase_raw", ("spambase.data",), "csv", "none", 57, 4601,
                   "UCI spambase with its raw, unscaled features (diagnostic only)"),
        DatasetDef("a9a", ("a9a", "a9a.t"), "libsvm", "none", 123, 48842,
                   "a9a + a9a.t merged (32,561 + 16,281), binary features as is"),
        DatasetDef("w7a", ("w7a",), "libsvm", "none", 300, 49749,
                   "DEVIATION: only the w7a training file (24,692 rows) is available; "
                   "P3/P4 used train + test merged (49,749 rows). Binary features as is"),
    )
}


def _load_file(path: Path, fmt: str, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """One file with raw numeric labels (a file may hold one class only, e.g. svmguide3.t, so
    the ±1 mapping is done on the merged labels) and no scaling."""
    X, y = ksdata.load(str(path), fmt=fmt, n_features=n_features, task="regression",
                       scale="none")
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def _to_pm1(y: np.ndarray) -> np.ndarray:
    vals = np.unique(y)
    if vals.size != 2:
        raise ValueError(f"expected two labels, got {vals}")
    return np.where(y == vals[1], 1.0, -1.0)  # larger raw label -> +1


_CACHE: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}


def load_dataset(name: str, data_dir: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a benchmark dataset as defined in :data:`DATASETS` (labels ±1); cached."""
    key = (name, str(data_dir))
    if key in _CACHE:
        return _CACHE[key]
    d = DATASETS[name]
    parts = [_load_file(Path(data_dir) / f, d.fmt, d.n_features) for f in d.files]
    X = np.ascontiguousarray(np.vstack([p[0] for p in parts]), dtype=np.float64)
    y = _to_pm1(np.concatenate([p[1] for p in parts]))
    if d.scale == "01":
        X = ksdata.scale_minmax(X, "01")
    _CACHE[key] = (X, y)
    return X, y


# -- prequential runner --------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSpec:
    learner: str
    params: dict[str, Any]
    dataset: str
    r: int  # permutation index
    base_seed: int = 0
    rows: int | None = None  # only the first ``rows`` rounds of the permutation
    tag: str = ""  # free label carried into the result (e.g. "tune")


@dataclass
class RunResult:
    spec: RunSpec
    mistake_rate: float  # %
    n_rounds: int
    n_sv: int
    seconds: float  # learning loop only
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = asdict(self.spec)
        return d


def run_prequential(spec: RunSpec, X: np.ndarray, y: np.ndarray) -> RunResult:
    """Test-then-train over permutation ``r`` (shared seeding); times only the learning loop."""
    perm = permutation(X.shape[0], spec.base_seed, spec.r)
    if spec.rows is not None:
        perm = perm[: spec.rows]
    Xp = np.ascontiguousarray(X[perm])
    yp = y[perm]
    m = learners.make(spec.learner, seed=learner_seed(spec.base_seed, spec.r, spec.learner),
                      **spec.params)
    t0 = time.perf_counter()
    scores = m.predict_learn_many(Xp, yp)
    secs = time.perf_counter() - t0
    tie = m.predict_label(0.0)
    pred = np.where(scores > 0, 1.0, np.where(scores < 0, -1.0, tie))
    mr = 100.0 * float(np.mean(pred != yp))
    return RunResult(spec, mr, len(yp), int(m.n_support_vectors), secs)


# -- process pool --------------------------------------------------------------------------------
_WORKER_DATA_DIR: Path | None = None


def _worker_init(data_dir: str) -> None:
    global _WORKER_DATA_DIR
    _WORKER_DATA_DIR = Path(data_dir)


def _worker_run(spec: RunSpec) -> RunResult | str:
    try:
        assert _WORKER_DATA_DIR is not None
        X, y = load_dataset(spec.dataset, _WORKER_DATA_DIR)
        return run_prequential(spec, X, y)
    except Exception as e:  # report, don't kill the pool
        return f"{type(e).__name__}: {e}"


def fmt_params(p: dict[str, Any]) -> str:
    return ",".join(f"{k}={_fmt_num(v)}" for k, v in sorted(p.items())) or "-"


def _fmt_num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def run_many(
    specs: Sequence[RunSpec],
    data_dir: Path,
    workers: int = MAX_WORKERS,
    progress: bool = True,
    on_result: Callable[[RunResult], None] | None = None,
) -> list[RunResult | str]:
    """Run specs on a pool of ``min(workers, 2)`` processes; results in input order (a failed run
    yields its error message). Per-run lines go to stderr."""
    workers = max(1, min(int(workers), MAX_WORKERS))
    for name in sorted({s.dataset for s in specs}):
        load_dataset(name, data_dir)  # parent loads once; forked workers inherit the cache
    out: list[RunResult | str] = [""] * len(specs)
    t0 = time.perf_counter()
    n = len(specs)

    def report(i: int, res: RunResult | str, done: int) -> None:
        out[i] = res
        if isinstance(res, RunResult) and on_result is not None:
            on_result(res)
        if progress:
            s = specs[i]
            head = (f"[{done}/{n} {time.perf_counter() - t0:7.1f}s] {s.tag} {s.dataset} "
                    f"{s.learner}({fmt_params(s.params)}) r={s.r}")
            if isinstance(res, RunResult):
                print(f"{head}: mistakes {res.mistake_rate:.3f}% #SV {res.n_sv} "
                      f"{res.seconds:.2f}s", file=sys.stderr, flush=True)
            else:
                print(f"{head}: FAILED {res}", file=sys.stderr, flush=True)

    if workers == 1 or n <= 1:
        _worker_init(str(data_dir))
        for i, s in enumerate(specs):
            report(i, _worker_run(s), i + 1)
        return out
    ctx = mp.get_context("fork")
    with ctx.Pool(workers, initializer=_worker_init, initargs=(str(data_dir),)) as pool:
        # Longest (largest) first keeps both workers busy until the end.
        for done, (i, res) in enumerate(
            pool.imap_unordered(_indexed_run, list(enumerate(specs)), chunksize=1), start=1
        ):
            report(i, res, done)
    return out


def _indexed_run(item: tuple[int, RunSpec]) -> tuple[int, RunResult | str]:
    return item[0], _worker_run(item[1])


# -- misc ----------------------------------------------------------------------------------------
def mean_std(v: Iterable[float]) -> tuple[float, float]:
    """:func:`kernelstream.evaluate.mean_std` (ddof=1), NaN for no values."""
    vals = list(v)
    return evaluate.mean_std(vals) if vals else (math.nan, math.nan)


def machine_info() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores (shared), Python {platform.python_version()}, "
            f"numpy {np.__version__}")


def now_utc() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
