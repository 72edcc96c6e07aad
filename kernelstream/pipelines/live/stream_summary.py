"""The summary of a finished ``kernelstream stream`` run: counts of the rows it published, the
mistake rate, mean loss and label delays of its outcomes (read back from its Parquet files),
with the no-skill baseline of the same outcomes and, for regression, RMSE, MAE and R²
(:mod:`kernelstream.engine.noskill`), as ``summary.json`` and as the lines printed at the end.

Kept apart from the launcher because it only reads the run's output files after the pipeline
has ended, and its document (:data:`SUMMARY_SCHEMA`) is a stable output of its own.

``learners`` holds each configuration's learner and parameters as learnt with (``gamma=auto``
resolved), ``width_source`` where its widths came from (``auto``, ``init-from``, ``default``,
``given``: :data:`~kernelstream.pipelines.live.stream_config.WIDTH_SOURCES`), ``auto_gamma``
and ``width_records`` the estimate and the feature records it came from
(:mod:`~kernelstream.pipelines.live.stream_width`); ``scale`` (``01`` or ``none``),
``auto_scale`` (why ``--scale auto`` scaled) and ``scale_ranges`` (``{"lo", "hi"}`` of each
column, the first records', by which every record was min-max scaled; None) as a replay's.

Accounting (``docs/stream-accounting.md``; the counts and identities are
:mod:`kernelstream.engine.live.accounting`'s). The top-level counts are **this run's**:
``predictions``, ``labelled``, ``outcomes``, ``unlabeled``, ``metrics``, ``dead_letters``,
``parse_dead_letters`` and ``rejected`` counted in the run's own published files
(``part-e*-<run>.parquet``, ``run`` below); ``offsets``, ``records``, ``processed`` and
``skipped`` as the run's reader and models counted them; ``pending`` (every model's, at the end) and
``pending_start`` (at the run's start: the resumed snapshot's; None when that snapshot
predates these counts) from the models' states. With ``C = len(configs)``::

    records <= offsets
    C * (records - parse_dead_letters) == processed + skipped
    processed == predictions + outcomes - labelled + (dead_letters - parse_dead_letters)
    predictions + pending_start == outcomes + unlabeled + pending + rejected

``totals`` holds the same counts for **all runs on the checkpoint** (the last snapshot's,
``info["totals"]["all"]``; ``pending_start`` 0), crashed runs included: its row counts equal
the rows of every published file in ``OUT`` when only this checkpoint's runs wrote there, and
the identities hold on it too. Without ``--checkpoint`` every run starts anew and ``totals``
is the run's counts; None when the run resumed from a snapshot older than these counts.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
from typing import Any

from kernelstream._json import json_safe
from kernelstream.engine.live.rows import nearest_rank
from kernelstream.engine.noskill import NoSkill
from kernelstream.engine.prequential import learner_loss
from kernelstream.numbers import sig
from kernelstream.pipelines.live.stream_config import OUTPUT_NAMES, SCHEME, StreamConfig

SUMMARY_SCHEMA = 1


def _run_files(out: str, name: str, part: str) -> list[str]:
    return sorted(glob.glob(os.path.join(out, name, f"part-e*-{part}.parquet")))


def summary(config: StreamConfig, out: str, part: str, status: dict[str, Any], seconds: float,
            epoch: int | None, stopped_by: str | None) -> dict[str, Any]:
    """The run's summary: counts of the rows this run published, the mistake rate and label
    delays of its outcomes (read back from its files)."""
    import pyarrow.parquet as pq

    counts: dict[str, int] = {}
    mistakes = labelled = 0
    kinds = {"labelled": 0, "parse_dead_letters": 0, "rejected": 0}
    delays: list[int] = []
    losses: list[float] = []
    for name in OUTPUT_NAMES:
        files = _run_files(out, name, part)
        counts[name] = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        if name == "predictions":
            for f in files:
                kinds["labelled"] += sum(
                    bool(v) for v in pq.read_table(f, columns=["labelled"])
                    .column("labelled").to_pylist())
        elif name == "dead_letters":
            for f in files:
                t = pq.read_table(f, columns=["stage", "position"])
                for stage, pos in zip(t.column("stage").to_pylist(),
                                      t.column("position").to_pylist(), strict=True):
                    kinds["parse_dead_letters"] += stage == "parse"
                    kinds["rejected"] += stage == "learn" and pos is not None
        elif name == "outcomes":
            for f in files:
                t = pq.read_table(f, columns=["mistake", "delay_ms", "loss"])
                ms = [m for m in t.column("mistake").to_pylist() if m is not None]
                mistakes += sum(ms)
                labelled += len(ms)
                delays += t.column("delay_ms").to_pylist()
                losses += t.column("loss").to_pylist()
    delays.sort()
    noskill = _noskill(config, _run_files(out, "outcomes", part))
    records = int(status.get("records", 0))
    # the reader's and the models' counts of this run (the status file; see the docstring)
    run = {f: status.get(f, 0 if f not in ("pending", "pending_start") else None)
           for f in ("offsets", "processed", "skipped", "pending", "pending_start")}
    return {
        "schema": SUMMARY_SCHEMA, "command": "stream",
        "source": f"{SCHEME}{config.bootstrap}/{','.join(config.topics)}",
        "labels": (None if config.labels_topic is None
                   else f"{SCHEME}{config.bootstrap}/{config.labels_topic}"),
        "configs": list(config.configs_doc()),
        # the parameters learnt with (gamma=auto resolved) and where the widths came from
        "learners": config.configs_doc(), "width_source": config.width_source,
        "auto_gamma": config.auto_gamma, "width_records": config.width_records,
        **config.scale_doc(),  # --scale auto: whether, why and by which ranges
        **config.target_doc(),  # --scale-target auto: the (mean, std) the target is learnt by
        "out": out, "checkpoint": config.checkpoint,
        "snapshot_epoch": epoch, "run": part, "seconds": seconds, "stopped_by": stopped_by,
        "records": records, "records_per_second": records / seconds if seconds > 0 else None,
        **counts, **kinds, **run,
        "totals": status.get("all"),
        "mistake_rate": 100.0 * mistakes / labelled if labelled else None,
        "avg_loss": math.fsum(losses) / len(losses) if losses else None,
        **noskill,
        "delay_p50_ms": nearest_rank(delays, 50), "delay_p99_ms": nearest_rank(delays, 99),
        "argv": list(config.argv),
    }


def _noskill(config: StreamConfig, files: list[str]) -> dict[str, float | None]:
    """The no-skill baseline and regression metrics of this run's outcomes
    (:class:`~kernelstream.engine.noskill.NoSkill`): each model's outcomes in learning order
    (the baseline starts afresh at the run's start, as the run's mistake rate counts only its
    own outcomes), pooled over the models as the mistake rate is."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = ["key", "config", "learn_position", "label", "predicted", "mistake"]
    tables = [pq.read_table(f, columns=cols) for f in files]
    if not tables or not sum(t.num_rows for t in tables):
        return NoSkill().figures(True)
    t = pa.concat_tables(tables).sort_by([("key", "ascending"), ("learn_position", "ascending")])
    keys = t.column("key").to_numpy(zero_copy_only=False)
    y = t.column("label").to_numpy()
    pred = t.column("predicted").to_numpy()
    regress = t.column("mistake").null_count == t.num_rows  # mistakes: classification only
    losses = {c.label: learner_loss(c.make(config.spec.seed, 0)).value for c in config.configs}
    parts = []
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    conf = t.column("config").to_pylist()
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(keys)], strict=True):
        acc = NoSkill()
        acc.add(y[lo:hi], pred[lo:hi], not regress, losses.get(conf[lo]))
        parts.append(acc)
    return NoSkill.pooled(parts).figures(not regress)


def write_summary(out: str, doc: dict[str, Any]) -> None:
    """``OUT/summary.json`` (atomic; a summary that cannot be written is skipped)."""
    tmp = os.path.join(out, ".summary.json.tmp")
    with contextlib.suppress(OSError):
        with open(tmp, "w") as f:
            f.write(json.dumps(json_safe(doc), indent=2, allow_nan=False) + "\n")
        os.replace(tmp, os.path.join(out, "summary.json"))


def _ms(v: int | None) -> str:
    return "-" if v is None else (f"{v / 1000:.2f} s" if abs(v) >= 1000 else f"{v} ms")


def _count(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def format_summary(doc: dict[str, Any], checkpoint: str | None) -> str:
    mr = doc["mistake_rate"]
    if mr is not None:  # beside the majority-class predictor's on the same outcomes
        quality = (f"  mistake rate {sig(mr)}% (no-skill "
                   f"{sig(doc.get('noskill_mistake_rate'))}%)")
    elif doc.get("avg_loss") is not None:  # regression
        quality = (f"  avg loss {sig(doc['avg_loss'])} (no-skill "
                   f"{sig(doc.get('noskill_avg_loss'))})  RMSE {sig(doc.get('rmse'))}  "
                   f"MAE {sig(doc.get('mae'))}  R² {sig(doc.get('r2'))}")
    else:
        quality = ""
    lines = [
        f"{doc['records']:,} records in {doc['seconds']:.1f} s "
        f"({(doc['records_per_second'] or 0):,.0f}/s)",
        f"predictions {doc['predictions']:,}  outcomes {doc['outcomes']:,}" + quality
        + f"  label delay p50 {_ms(doc['delay_p50_ms'])} p99 {_ms(doc['delay_p99_ms'])}",
        f"unlabeled {doc['unlabeled']:,}  pending {_count(doc['pending'])}  rejected "
        f"{doc['rejected']:,}  dead letters {doc['dead_letters']:,}  metrics rows "
        f"{doc['metrics']:,}",
        f"outputs: {doc['out']}" + (f"  snapshot epoch {doc['snapshot_epoch']} in {checkpoint}"
                                    if checkpoint else ""),
    ]
    return "\n".join(lines)

