"""Shared helpers of the benchmark scripts: dataset definitions and loading, the prequential
runner (test-then-train over R random permutations, as the papers) with the shared seeding, a small
process pool (≤ 2 workers), and the scaffolding every reproduction script repeats (command-line
options, the tune / evaluate / render skeleton, json files, best-of-grid selection, markdown cells).

The scripts import this module as ``_common``: they put ``benchmarks/`` on ``sys.path`` and
import it before numpy, so that its first lines limit BLAS to one thread per process::

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common  # first: it limits BLAS to one thread per process before numpy loads
    import numpy as np
    from _common import load_dataset, ...  # the names a script uses throughout

and call the scaffolding (options, tuned / results files) as ``_common.<name>``.
"""

from __future__ import annotations

import os

# One BLAS thread per process: the machine has 2 cores and we run up to 2 workers.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, TypeVar  # noqa: E402

import numpy as np  # noqa: E402

from kernelstream import evaluate, learners  # noqa: E402
from kernelstream.engine.prequential import PrequentialPass, predicted_labels  # noqa: E402
from kernelstream.experiments import datasets as _datasets  # noqa: E402
from kernelstream.experiments import report as _report  # noqa: E402
from kernelstream.seeding import learner_seed, permutation  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"  # default --out-dir of the scripts
MAX_WORKERS = 2
# P3's Gaussian width grid σ = 2^e, e ∈ {-5, -4.5, …, 7} (kernel alignment and width sweeps)
SIGMA_EXPONENTS = [e / 2 for e in range(-10, 15)]


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


# The protocol data sets are the package's (kernelstream.experiments.datasets): one table for
# the scripts and for ``kernelstream reproduce``.
DATASETS = _datasets.DATASETS
DatasetDef = _datasets.DatasetDef


_PERMS: dict[str, np.ndarray] = {}  # dataset -> its toolbox permutations (0-based rows)


def load_dataset(name: str, data_dir: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a benchmark dataset as defined in :data:`DATASETS` (labels ±1; the
    package's loader, cached), and its toolbox permutations when it has a permutation file."""
    X, y = _datasets.load_dataset(name, data_dir)
    d = DATASETS[name]
    if d.perm_file is not None and name not in _PERMS:
        ids = np.loadtxt(Path(data_dir) / d.perm_file, dtype=np.int64, ndmin=2) - 1
        if any(sorted(row.tolist()) != list(range(len(y))) for row in ids):
            raise ValueError(f"{d.perm_file}: every row must be a permutation of 1..{len(y)}")
        _PERMS[name] = ids
    return X, y


def stream_order(dataset: str, n: int, base_seed: int, r: int) -> np.ndarray:
    """Row order of permutation ``r``: the dataset's toolbox permutation ``r`` if it has one
    (:attr:`DatasetDef.perm_file`, loaded by :func:`load_dataset`), else the shared seeding."""
    ids = _PERMS.get(dataset)
    if ids is not None and r < len(ids):
        return ids[r]
    return permutation(n, base_seed, r)


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

    def record(self) -> dict[str, Any]:
        """The per-run entry of a results json."""
        return {"r": self.spec.r, "mistake_rate": self.mistake_rate, "n_sv": self.n_sv,
                "seconds": self.seconds}


def permuted(X: np.ndarray, y: np.ndarray, base_seed: int, r: int,
             rows: int | None = None, dataset: str = "") -> tuple[np.ndarray, np.ndarray]:
    """The stream of permutation ``r`` (shared seeding, :mod:`kernelstream.seeding`, or the
    toolbox permutations of ``dataset``, :func:`stream_order`) as a contiguous copy; with
    ``rows``, only its first ``rows`` rounds."""
    perm = stream_order(dataset, X.shape[0], base_seed, r)
    if rows is not None:
        perm = perm[:rows]
    return np.ascontiguousarray(X[perm]), y[perm]


def run_prequential(spec: RunSpec, X: np.ndarray, y: np.ndarray) -> RunResult:
    """Test-then-train over permutation ``r`` (shared seeding): the engine's pass
    (:class:`~kernelstream.engine.prequential.PrequentialPass`) in one block, its mistakes by
    the engine's outcome rule; times only the learning loop."""
    Xp, yp = permuted(X, y, spec.base_seed, spec.r, spec.rows, spec.dataset)
    m = learners.make(spec.learner, seed=learner_seed(spec.base_seed, spec.r, spec.learner),
                      **spec.params)
    run = PrequentialPass(m, Xp, yp, block_size=max(1, len(yp))).run()
    secs = run.seconds
    wrong = predicted_labels(m, run.scores) != yp
    extra: dict[str, Any] = {}
    if hasattr(m, "init_round"):
        # two-stage learners (SkeGD): also the mistakes made after the switch round T₀ over
        # all T rounds, the count of the public SkeGD code [C-FORKS] (stage-1 mistakes dropped)
        t0 = m.init_round
        extra["init_round"] = t0
        extra["mistake_rate_after_init"] = (
            100.0 * float(np.sum(wrong[t0:])) / len(yp) if t0 is not None else 0.0)
    return RunResult(spec, 100.0 * float(np.mean(wrong)), len(yp), int(m.n_support_vectors),
                     secs, extra)


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


def run_all(specs: Sequence[RunSpec], data_dir: Path, workers: int = 1,
            cost: Callable[[RunSpec], float] | None = None) -> list[RunResult]:
    """:func:`run_many` for runs that must all succeed (a failed run raises ``RuntimeError``);
    results in the order of ``specs``. With ``cost``, the costliest runs start first, which
    keeps both workers busy until the end."""
    order = list(range(len(specs)))
    if cost is not None:
        order.sort(key=lambda i: -cost(specs[i]))
    res = run_many([specs[i] for i in order], data_dir, workers=workers)
    out: list[RunResult | None] = [None] * len(specs)
    for i, r in zip(order, res, strict=True):
        if not isinstance(r, RunResult):
            raise RuntimeError(f"run failed: {specs[i]}: {r}")
        out[i] = r
    return [r for r in out if r is not None]


_T = TypeVar("_T")


def best_of_grid(results: Iterable[_T], score: Callable[[_T], Any] = lambda t: t[1]) -> _T:
    """The grid point of lowest ``score`` (default: the second item of a ``(point, score)``
    pair); ties go to the earlier grid point."""
    return min(results, key=score)


# -- Kafka on the local broker (kafka_io.py, streaming.py) ---------------------------------------
def read_lines(path: Path | str) -> list[bytes]:
    """The non-blank lines of a data file (compressed or not), without their line ends."""
    from kernelstream import fs

    with fs.open_binary(str(path)) as f:
        return [ln.rstrip(b"\r\n") for ln in f if ln.strip()]


def create_topics(bootstrap: str, topics: Iterable[str], partitions: int = 1) -> None:
    """Create ``topics`` with ``partitions`` partitions each (replication 1: one broker)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1)
                             for t in topics])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, values: Sequence[bytes],
            keys: Sequence[bytes] | None = None, create: bool = True) -> float:
    """Send ``values`` (with message ``keys``, if given) to ``topic`` as fast as the client
    goes, creating it with one partition first unless ``create`` is false; seconds taken."""
    from kafka import KafkaProducer

    if create:
        create_topics(bootstrap, [topic])
    prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 18)
    t0 = time.perf_counter()
    if keys is None:
        for v in values:
            prod.send(topic, value=v)
    else:
        for k, v in zip(keys, values, strict=True):
            prod.send(topic, key=k, value=v)
    prod.flush()
    prod.close()
    return time.perf_counter() - t0


# -- misc ----------------------------------------------------------------------------------------
def gamma_of(sigma: float) -> float:
    """Gaussian γ of the width σ: exp(−γ‖x − x′‖²) = exp(−‖x − x′‖² / (2σ²))."""
    return 1.0 / (2.0 * sigma * sigma)


def mean_std(v: Iterable[float]) -> tuple[float, float]:
    """:func:`kernelstream.evaluate.mean_std` (ddof=1), NaN for no values."""
    vals = list(v)
    return evaluate.mean_std(vals) if vals else (math.nan, math.nan)


def machines_line(cells: list[dict[str, Any]], key: Callable[[dict[str, Any]], str],
                  what: str) -> str:
    """The machine the cells ran on, or, when runs merged from different invocations ran on
    different machines, each machine with the ``key(cell)`` labels (tables, dataset/learner
    cells) it computed. A cell without a ``machine`` entry ran on this one."""
    groups: dict[str, list[str]] = {}
    for c in cells:
        vals = groups.setdefault(c.get("machine") or machine_info(), [])
        if key(c) not in vals:
            vals.append(key(c))
    if len(groups) <= 1:
        return next(iter(groups), machine_info())
    return "; ".join(f"{m} ({what} {', '.join(v)})" for m, v in groups.items())


# the machine, time and code lines of every results file: the package's
machine_info = _report.machine_info
now_utc = _report.now_utc
git_provenance = _report.git_provenance


# -- command line of the scripts -----------------------------------------------------------------
def script_parser(doc: str, epilog: bool = True) -> argparse.ArgumentParser:
    """Parser of a benchmark script: its docstring's first paragraph is the description, the
    rest (raw text) the epilog; with the shared ``--data-dir`` option."""
    head, _, rest = doc.partition("\n\n")
    ap = argparse.ArgumentParser(description=head, epilog=rest if epilog else None,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir_arg(ap)
    return ap


def add_tuning_args(ap: argparse.ArgumentParser, default_tuned: Path) -> None:
    """``--tune``, ``--tune-only`` and ``--tuned-file`` (see :func:`tune_step`)."""
    ap.add_argument("--tune", action="store_true", help="run the tuning step first and "
                    "(over)write the tuned file (entries of other datasets are kept)")
    ap.add_argument("--tune-only", action="store_true", help="tune, write the file, stop")
    ap.add_argument("--tuned-file", type=Path, default=default_tuned,
                    help="tuned parameters (default %(default)s)")


def add_eval_args(ap: argparse.ArgumentParser, permutations: int, help: str, *,
                  short: str | None = None, tune_perm: bool = False) -> None:
    """``--permutations`` (R: the evaluation runs permutations r = 0..R−1; ``help`` says what
    R counts in this script), ``--base-seed`` and, with ``tune_perm``, ``--tune-perm`` (the
    permutation index tuning uses, never an evaluation permutation)."""
    flags = ("--permutations", short) if short else ("--permutations",)
    ap.add_argument(*flags, type=int, default=permutations, help=help)
    ap.add_argument("--base-seed", type=int, default=0, help="base seed (default 0)")
    if tune_perm:
        ap.add_argument("--tune-perm", type=int, default=1000,
                        help="permutation index used for tuning only (default 1000)")


def add_list_arg(ap: argparse.ArgumentParser, flag: str, choices: Iterable[str],
                 help: str = "comma-separated subset of %(default)s") -> None:
    """A comma-separated option defaulting to all of ``choices`` (parse with
    :func:`parse_list`)."""
    ap.add_argument(flag, default=",".join(choices), help=help)


def parse_list(ap: argparse.ArgumentParser, value: str, choices: Iterable[str] | None = None,
               what: str = "value") -> list[str]:
    """The items of a comma-separated option; with ``choices``, an unknown item is a usage
    error."""
    items = [v for v in value.split(",") if v]
    if choices is not None:
        allowed = list(choices)
        for v in items:
            if v not in allowed:
                ap.error(f"unknown {what} {v!r} (choose from {', '.join(allowed)})")
    return items


def add_output_args(ap: argparse.ArgumentParser, stem: str, render_flag: str | None = None,
                    merge: bool = False) -> None:
    """``--out-dir`` (where ``<stem>.md`` / ``<stem>.json`` go), the script's no-compute flag
    ``render_flag`` if it has one (rewrite the markdown from the stored json) and, with
    ``merge``, ``--merge`` (keep the cells of the stored json that this run does not redo)."""
    ap.add_argument("--out-dir", type=Path, default=RESULTS,
                    help=f"where {stem}.md/.json go (default %(default)s)")
    if merge:
        ap.add_argument("--merge", action="store_true",
                        help=f"keep the cells of an existing {stem}.json that this run does "
                             "not redo (re-run a subset, e.g. --datasets german or "
                             "--learners X)")
    if render_flag:
        ap.add_argument(render_flag, action="store_true",
                        help=f"rewrite {stem}.md from the existing {stem}.json (no runs)")


def warn_unregistered(names: Iterable[str]) -> None:
    """Warn (stderr) about requested learners that are not registered; they are skipped."""
    missing = [m for m in names if m not in learners.available()]
    if missing:
        print(f"warning: not registered (skipped): {', '.join(missing)}", file=sys.stderr)


# -- the tune / evaluate / render skeleton -------------------------------------------------------
# the JSON format of every tuned-parameter and results file: the package's
json_default = _report.json_default
write_json = _report.write_json


def write_report(out_dir: Path, stem: str, lines: list[str], results: dict[str, Any]) -> None:
    """Write a script's outputs into ``out_dir`` (created if needed): ``<stem>.md`` (the
    markdown lines) and ``<stem>.json`` (the results the markdown is rendered from)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    write_json(out / f"{stem}.json", results)


def read_json(path: Path) -> dict[str, Any]:
    """A json file, or ``{}`` if it does not exist (no tuning yet)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else {}


def tune_step(ap: argparse.ArgumentParser, a: argparse.Namespace, tuned: dict[str, Any],
              tune: Callable[[], None]) -> bool:
    """With ``--tune`` / ``--tune-only``: run ``tune()`` (which fills ``tuned``) and write
    ``a.tuned_file``; without them the tuned file must exist. True: stop now (``--tune-only``)."""
    if a.tune or a.tune_only:
        tune()
        write_json(a.tuned_file, tuned)
        print(f"wrote {a.tuned_file}", file=sys.stderr)
        return bool(a.tune_only)
    if not tuned:
        ap.error(f"{a.tuned_file} not found: run with --tune first")
    return False


def tuning_meta(a: argparse.Namespace) -> dict[str, Any]:
    """What every tuned file records first: when and where it was tuned, the base seed and the
    tuning permutation."""
    return {"tuned_at": now_utc(), "machine": machine_info(), "base_seed": a.base_seed,
            "tune_perm": a.tune_perm}


def read_results(a: argparse.Namespace, stem: str) -> dict[str, Any]:
    """The stored ``<out-dir>/<stem>.json`` for a render-only run; its permutations and base
    seed replace the command line's, since the report describes the stored runs."""
    js = json.loads((Path(a.out_dir) / f"{stem}.json").read_text())
    a.permutations, a.base_seed = js["permutations"], js["base_seed"]
    return js


# -- markdown cells ------------------------------------------------------------------------------
def generated_line(script: str, stamp: str, detail: str = "") -> str:
    """The line under the title of every generated results markdown."""
    return (f"Generated by `benchmarks/{script}` on {stamp}" + (f" ({detail})" if detail else "")
            + ". Do not edit by hand.")


# number formats and verdict marks: the package's, as the tables `kernelstream reproduce` writes
fmt_pm = _report.fmt_pm
fmt_sv = _report.fmt_sv
pass_mark = _report.pass_mark
