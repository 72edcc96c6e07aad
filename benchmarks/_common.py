"""Shared helpers of the benchmark (speed) scripts: dataset definitions and loading, Kafka on
the local broker, and the scaffolding every script repeats (command-line options, json and
markdown files, the machine line). The papers' protocols, their tuning included, are the
package's (``kernelstream reproduce``, ``kernelstream.experiments``); so are the formats and
lines every results file shares, which this module re-exports.

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
import time  # noqa: E402
from collections.abc import Iterable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from kernelstream.engine import evaluate  # noqa: E402
from kernelstream.experiments import datasets as _datasets  # noqa: E402
from kernelstream.experiments import report as _report  # noqa: E402
from kernelstream.seeding import permutation  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"  # default --out-dir of the scripts
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


def permuted(X: np.ndarray, y: np.ndarray, base_seed: int, r: int,
             rows: int | None = None, dataset: str = "") -> tuple[np.ndarray, np.ndarray]:
    """The stream of permutation ``r`` (shared seeding, :mod:`kernelstream.seeding`, or the
    toolbox permutations of ``dataset``, :func:`stream_order`) as a contiguous copy; with
    ``rows``, only its first ``rows`` rounds."""
    perm = stream_order(dataset, X.shape[0], base_seed, r)
    if rows is not None:
        perm = perm[:rows]
    return np.ascontiguousarray(X[perm]), y[perm]


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
    """:func:`kernelstream.engine.evaluate.mean_std` (ddof=1), NaN for no values."""
    vals = list(v)
    return evaluate.mean_std(vals) if vals else (math.nan, math.nan)


# the machine and time lines of every results file: the package's (the code: git_head)
machines_line = _report.machines_line
machine_info = _report.machine_info
now_utc = _report.now_utc


def git_head() -> str:
    """``git rev-parse HEAD`` of the checkout the script runs from (the full hash), with a note
    when ``kernelstream/`` or ``benchmarks/`` (its results aside) differ from it."""
    # the code only: a results file the run is writing (benchmarks/results) is no change
    got = _report.git_commit(("kernelstream", "benchmarks", ":(exclude)benchmarks/results"),
                             short=False)
    if got is None:
        return "unknown (not a git checkout)"
    return got[0] + (" + uncommitted changes in kernelstream/ or benchmarks/" if got[1] else "")


def load_average() -> str:
    """The 1/5/15-minute load averages (``os.getloadavg()``), as ``a / b / c``."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def command_line(script: str, argv: Sequence[str]) -> str:
    """The command that ran a benchmark script, as a shell line."""
    import shlex

    return shlex.join(["python", f"benchmarks/{script}", *argv])


def provenance(script: str, argv: Sequence[str]) -> dict[str, str]:
    """What a results file's header must say about its run, taken at the start: the command,
    the code (``git rev-parse HEAD``) and the load average (the end's is added by the
    script when it is done: ``load_end``)."""
    return {"command": command_line(script, argv), "git_head": git_head(),
            "load_start": load_average()}


def provenance_line(prov: dict[str, str]) -> str:
    """The header line of :func:`provenance` (and ``load_end`` when present)."""
    end = f", {prov['load_end']} at the end" if prov.get("load_end") else ""
    return (f"Command: `{prov['command']}`; code: git {prov['git_head']}; load average "
            f"(1/5/15 min, 2 cores) {prov['load_start']} at the start{end}.")


# -- command line of the scripts -----------------------------------------------------------------
def script_parser(doc: str, epilog: bool = True) -> argparse.ArgumentParser:
    """Parser of a benchmark script: its docstring's first paragraph is the description, the
    rest (raw text) the epilog; with the shared ``--data-dir`` option."""
    head, _, rest = doc.partition("\n\n")
    ap = argparse.ArgumentParser(description=head, epilog=rest if epilog else None,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir_arg(ap)
    return ap


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


# -- markdown cells ------------------------------------------------------------------------------
def generated_line(script: str, stamp: str, detail: str = "") -> str:
    """The line under the title of every generated results markdown."""
    return (f"Generated by `benchmarks/{script}` on {stamp}" + (f" ({detail})" if detail else "")
            + ". Do not edit by hand.")


# number formats and verdict marks: the package's, as the tables `kernelstream reproduce` writes
fmt_pm = _report.fmt_pm
fmt_sv = _report.fmt_sv
pass_mark = _report.pass_mark
