"""A replay run folder as the report sees it: its summary rows, per-configuration curves
(:mod:`kernelstream.report.curves`), per-entity results and dead letters.

Only local folders are read, and from the Parquet outputs only the columns a figure needs.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernelstream._arrow import pa, pc, pq
from kernelstream.data.errors import reason_kind
from kernelstream.engine.pooled import mean_std_finite, pooled_configs
from kernelstream.errors import ReportError
from kernelstream.report.checks import check_summary
from kernelstream.report.curves import (
    MAX_PREDICTION_ROWS,
    Series,
    metrics_curves,
    prediction_curves,
    selection_shares,
)

PREDICTION_COLUMNS = ["config", "permutation", "position", "mistake", "loss",
                      "n_support_vectors", "label", "predicted"]
METRICS_COLUMNS = ["config", "learner", "permutation", "entity", "task", "loss_name", "final",
                   "window_start", "window_end", "mistake_rate", "avg_loss",
                   "window_mistake_rate", "window_avg_loss", "n_support_vectors",
                   "window_examples_per_second", "kernel_distribution",
                   "noskill_mistake_rate", "noskill_avg_loss"]  # (absent in older outputs)
DEAD_COLUMNS = ["source", "stage", "key", "line", "position", "raw", "reason"]
FIRST_LINES = 5  # line numbers shown per dead-letter reason
STAGES = ("parse", "learn", "order")


@dataclass
class DeadGroup:
    """The dead letters of one stage and kind of reason."""

    stage: str
    kind: str
    count: int
    first: list[str]  # where the first ones are: "line 12" or "bogd#0 position 7"
    reason: str  # the first one's full reason
    raw: str  # the first one's raw input


@dataclass
class EntityRow:
    """One entity of one configuration, over the permutations."""

    config: str
    entity: str
    examples: float
    rate: float | None  # mistake rate (%) mean over permutations; None for regression
    rate_std: float
    avg_loss: float | None
    n_sv: float
    rejected: int


@dataclass
class LoadedRun:
    """Everything the page shows about one run folder."""

    label: str
    path: str
    summary: dict[str, Any]
    rows: list[dict[str, Any]]  # summary table rows, one per configuration
    series: list[Series]
    entities: list[EntityRow] = field(default_factory=list)
    dead: list[DeadGroup] = field(default_factory=list)
    dead_total: int | None = 0  # None: the run has no dead_letters/ output
    notes: list[str] = field(default_factory=list)

    @property
    def key_by(self) -> str | None:
        kb = self.summary.get("key_by")
        return None if kb is None else str(kb)


def is_run_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "summary.json"))


def _files(directory: Path) -> list[str]:
    return sorted(str(p) for p in directory.glob("*.parquet")) if directory.is_dir() else []


def read_columns(directory: Path, columns: list[str]) -> pa.Table | None:
    """Those columns of every Parquet file of an output directory (absent ones skipped), or
    None when it has no files."""
    files = _files(directory)
    if not files:
        return None
    tables = []
    for f in files:
        with _damaged(f):
            pf = pq.ParquetFile(f)
            have = set(pf.schema_arrow.names)
            tables.append(pf.read(columns=[c for c in columns if c in have]))
    return pa.concat_tables(tables, promote_options="permissive")


def row_count(directory: Path) -> int:
    total = 0
    for f in _files(directory):
        with _damaged(f):
            total += pq.ParquetFile(f).metadata.num_rows
    return total


@contextmanager
def _damaged(file: str) -> Iterator[None]:
    """A Parquet file that cannot be read (truncated, overwritten) refused in one line."""
    try:
        yield
    except (pa.ArrowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReportError(f"{file}: damaged: not a readable Parquet file ({first})") from exc


def _config_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Summary table rows: ``configs`` as written, or for ``--key-by`` runs one row per
    configuration pooled over its entities (``engine.pooled``: per permutation, then
    mean ± std)."""
    if summary.get("configs"):
        return [dict(c) for c in summary["configs"]]
    return pooled_configs(summary.get("keys") or [])


def _entities(summary: dict[str, Any]) -> list[EntityRow]:
    """Per-entity results over the permutations, worst first (highest mistake rate, or
    average loss for regression)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for k in summary.get("keys") or []:
        groups.setdefault((k["config"], str(k["entity"])), []).append(k)
    out = []
    for (config, entity), ks in groups.items():
        rate, rate_std = mean_std_finite([k.get("mistake_rate") for k in ks])
        loss, _ = mean_std_finite([k.get("avg_loss") for k in ks])
        out.append(EntityRow(config, entity, float(np.mean([k["examples"] for k in ks])),
                             rate, rate_std, loss,
                             float(np.mean([k["n_support_vectors"] for k in ks])),
                             int(sum(k.get("rejected") or 0 for k in ks))))

    def badness(e: EntityRow) -> float:
        v = e.rate if e.rate is not None else e.avg_loss
        return -math.inf if v is None else v

    return sorted(out, key=lambda e: (-badness(e), e.config, e.entity))


def _dead_letters(directory: Path) -> tuple[list[DeadGroup], int]:
    """Dead letters grouped by stage and reason kind, largest first within a stage."""
    t = read_columns(directory, DEAD_COLUMNS)
    if t is None or t.num_rows == 0:
        return [], 0
    agg = t.group_by(["stage", "reason"]).aggregate([("reason", "count")]).to_pylist()
    kinds: dict[tuple[str, str], list[str]] = {}
    counts: dict[tuple[str, str], int] = {}
    for a in agg:
        g = (a["stage"], reason_kind(a["reason"]))
        kinds.setdefault(g, []).append(a["reason"])
        counts[g] = counts.get(g, 0) + a["reason_count"]
    out = []
    for (stage, kind), reasons in kinds.items():
        rows = t.filter(pc.and_(pc.equal(t.column("stage"), stage),
                                pc.is_in(t.column("reason"), pa.array(reasons))))
        rows = rows.sort_by([("line", "ascending"), ("key", "ascending"),
                             ("position", "ascending")]).slice(0, FIRST_LINES).to_pylist()
        first = [f"line {r['line']}" if r.get("line") is not None
                 else f"{r.get('key')} position {r.get('position')}" for r in rows]
        out.append(DeadGroup(stage, kind, counts[(stage, kind)], first, rows[0]["reason"],
                             rows[0]["raw"]))
    order = {s: i for i, s in enumerate(STAGES)}
    out.sort(key=lambda g: (order.get(g.stage, len(order)), -g.count, g.kind))
    return out, t.num_rows


def load_run(path: str, label: str) -> LoadedRun:
    """Read a run folder (``summary.json`` and the Parquet outputs of a replay)."""
    root = Path(path)
    try:
        summary = json.loads((root / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: cannot read summary.json: {exc}") from exc
    if not isinstance(summary, dict) or summary.get("command") == "stream":
        raise ReportError(f"{path}: not a replay run folder (reports read the outputs of "
                          "`kernelstream replay`)")
    if not {"schema", "kernelstream_version"} & set(summary):  # any JSON named summary.json
        raise ReportError(f"{path}: its summary.json was not written by kernelstream (no "
                          "schema, no kernelstream_version)")
    check_summary(summary, str(root / "summary.json"))
    rows = _config_rows(summary)
    run = LoadedRun(label, path, summary, rows, [])
    key_by = summary.get("key_by") is not None
    metrics = read_columns(root / "metrics", METRICS_COLUMNS)
    meta: dict[str, dict[str, Any]] = {}
    has_kernels = False
    if metrics is not None:
        for name in pc.unique(metrics.column("config")).to_pylist():
            first = metrics.filter(pc.equal(metrics.column("config"), name)).slice(0, 1)
            meta[name] = first.select(["learner", "task", "loss_name"]).to_pylist()[0]
        if "kernel_distribution" in metrics.column_names:  # older runs have none
            dist = metrics.column("kernel_distribution")
            has_kernels = dist.null_count < len(dist)
    series: dict[str, Series] = {}
    for row in rows:
        name = str(row["label"])
        m = meta.get(name, {})
        series[name] = Series(name, str(row.get("learner") or m.get("learner")),
                              str(row.get("task") or m.get("task") or summary.get("task")),
                              str(row.get("loss") or m.get("loss_name") or ""))
    params = {str(r["label"]): dict(r.get("params") or {}) for r in rows}
    n_pred = row_count(root / "predictions")
    from_predictions = 0 < n_pred <= MAX_PREDICTION_ROWS
    predictions = None
    if from_predictions:
        cols = (PREDICTION_COLUMNS + (["entity", "id"] if key_by else [])
                + (["selected_kernel"] if has_kernels else []))
        predictions = read_columns(root / "predictions", cols)
        if predictions is not None and predictions.num_rows:
            prediction_curves(predictions, series, int(summary.get("seed") or 0), key_by)
    elif n_pred:
        run.notes.append(f"{n_pred:,} prediction rows: " + (
            "no curves for this per-entity run" if key_by else "curves drawn from the metrics/ "
            "windows"))
    if metrics is not None and not key_by:
        metrics_curves(metrics, series, params, from_predictions)
        if predictions is not None:
            selection_shares(predictions, series, params)
    if key_by:
        run.notes.append("one model per entity (--key-by): curves follow the permuted stream "
                         "over all entities, #SV is summed over the entities; examples/s and "
                         "kernel distributions are per entity in metrics/")
        run.entities = _entities(summary)
    if metrics is None and not n_pred:
        run.notes.append("no predictions/ or metrics/ (an adversarial --stream run writes "
                         "summary.json only): the summary table only")
    run.series = list(series.values())
    if (root / "dead_letters").is_dir():
        run.dead, run.dead_total = _dead_letters(root / "dead_letters")
    else:
        run.dead_total = None
    return run


def run_labels(paths: list[str]) -> list[str]:
    """Short distinct names for run folders: the folder name, with its parents as needed."""
    if not paths:
        return []
    parts = [Path(os.path.abspath(p)).parts for p in paths]
    depth = 1
    while True:
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels) or depth >= max(len(p) for p in parts):
            break
        depth += 1
    if len(set(labels)) < len(labels):  # the same folder twice
        labels = [f"{lab} ({i + 1})" for i, lab in enumerate(labels)]
    return labels
