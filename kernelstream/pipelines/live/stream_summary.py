"""The summary of a finished ``kernelstream stream`` run: counts of the rows it published, the
mistake rate, mean loss and label delays of its outcomes (read back from its Parquet files),
with the no-skill baseline of the same outcomes and, for regression, RMSE, MAE and R²
(:mod:`kernelstream.engine.noskill`), as ``summary.json`` and as the lines printed at the end.
The run-wide figures pool every configuration's outcomes; ``by_config`` has each
configuration's own (its keys pooled), which the printed lines and the no-skill warnings use
when there are several: a blend of two learners compares neither with its baseline.

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

``forgotten``: the models this run dropped by ``--forget-entities-after``
(``forget_after_ms``; None: never), each after its last events expired.

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
from kernelstream.engine.noskill import NoSkill, skill_warnings
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
    noskill, by_config = _by_config(config, _run_files(out, "outcomes", part))
    records = int(status.get("records", 0))
    # the reader's and the models' counts of this run (the status file; see the docstring)
    run = {f: status.get(f, 0 if f not in ("pending", "pending_start") else None)
           for f in ("offsets", "processed", "skipped", "pending", "pending_start")}
    return {
        "schema": SUMMARY_SCHEMA, "command": "stream",
        "source": f"{SCHEME}{config.bootstrap}/{','.join(config.topics)}",
        "labels": (None if config.labels_topic is None
                   else f"{SCHEME}{config.bootstrap}/{config.labels_topic}"),
        "merge": config.merge,  # how the reader ordered the partitions' records (--merge)
        # the models' settings: per entity (--key-by), their TTL and metrics window, and
        # --forget-entities-after (None: never) with the models this run forgot by it
        "key_by": config.spec.read.key_by, "label_ttl_ms": config.spec.label_ttl_ms,
        "metrics_window_ms": config.spec.metrics_window_ms,
        "forget_after_ms": config.spec.forget_after_ms,
        "forgotten": int((status.get("forgotten") or {}).get("models") or 0),
        "configs": list(config.configs_doc()),
        # the parameters learnt with (gamma=auto resolved) and where the widths came from
        "learners": config.configs_doc(), "width_source": config.width_source,
        "auto_gamma": config.auto_gamma, "width_records": config.width_records,
        **config.scale_doc(),  # --scale auto: whether, why and by which ranges
        **config.target_doc(),  # --scale-target auto: the (mean, std) the target is learnt by
        # --positive-label's other class, decided on the first records (None: the rest)
        "negative_label": config.spec.negative_label,
        "out": out, "checkpoint": config.checkpoint,
        "snapshot_epoch": epoch, "run": part, "seconds": seconds, "stopped_by": stopped_by,
        "records": records, "records_per_second": records / seconds if seconds > 0 else None,
        **counts, **kinds, **run,
        "totals": status.get("all"),
        "mistake_rate": 100.0 * mistakes / labelled if labelled else None,
        "avg_loss": math.fsum(losses) / len(losses) if losses else None,
        **noskill,  # run-wide: every configuration's outcomes together (by_config: each's)
        "by_config": by_config,
        "delay_p50_ms": nearest_rank(delays, 50), "delay_p99_ms": nearest_rank(delays, 99),
        "argv": list(config.argv),
    }


def _by_config(config: StreamConfig, files: list[str],
               ) -> tuple[dict[str, float | None], list[dict[str, Any]]]:
    """The no-skill baseline and regression metrics of this run's outcomes
    (:class:`~kernelstream.engine.noskill.NoSkill`), pooled over every model (the run-wide
    fields), and one row per configuration (``by_config``), its keys pooled: each model's
    outcomes in learning order (the baseline starts afresh at the run's start, as the run's
    mistake rate counts only its own outcomes), its mistakes over its outcomes, its mean loss,
    label delays and the no-skill figures of the same rows. Configurations in command-line
    order; one without outcomes has its row with ``outcomes`` 0 and None figures."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = ["key", "config", "learn_position", "label", "predicted", "mistake", "loss",
            "delay_ms"]
    tables = [pq.read_table(f, columns=cols) for f in files]
    n = sum(t.num_rows for t in tables)
    t = (pa.concat_tables(tables).sort_by([("key", "ascending"),
                                           ("learn_position", "ascending")])
         if n else None)
    regress = t is not None and t.column("mistake").null_count == n  # mistakes: classification
    losses = {c.label: learner_loss(c.make(config.spec.seed, 0)).value for c in config.configs}
    parts: dict[str, list[NoSkill]] = {c.label: [] for c in config.configs}
    rows: dict[str, dict[str, list[Any]]] = {
        c.label: {"keys": [], "mistake": [], "loss": [], "delay_ms": []} for c in config.configs}
    if t is not None:
        keys = t.column("key").to_numpy(zero_copy_only=False)
        y = t.column("label").to_numpy()
        pred = t.column("predicted").to_numpy()
        conf = t.column("config").to_pylist()
        cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n], strict=True):
            acc = NoSkill()
            acc.add(y[lo:hi], pred[lo:hi], not regress, losses.get(conf[lo]))
            parts.setdefault(conf[lo], []).append(acc)
            got = rows.setdefault(conf[lo], {"keys": [], "mistake": [], "loss": [],
                                             "delay_ms": []})
            got["keys"].append(keys[lo])
            for c in ("mistake", "loss", "delay_ms"):
                got[c] += t.column(c)[lo:hi].to_pylist()
    out = []
    for label, got in rows.items():
        ms = [m for m in got["mistake"] if m is not None]
        delays = sorted(got["delay_ms"])
        out.append({
            "label": label, "keys": len(got["keys"]), "outcomes": len(got["loss"]),
            "mistakes": sum(ms) if ms else None,
            "mistake_rate": 100.0 * sum(ms) / len(ms) if ms else None,
            "avg_loss": math.fsum(got["loss"]) / len(got["loss"]) if got["loss"] else None,
            **NoSkill.pooled(parts.get(label, [])).figures(not regress),
            "delay_p50_ms": nearest_rank(delays, 50), "delay_p99_ms": nearest_rank(delays, 99)})
    pooled = NoSkill.pooled([a for ps in parts.values() for a in ps]).figures(not regress)
    return pooled, out


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


def _quality(fig: dict[str, Any]) -> str:
    """The mistake rate (classification) or average loss and errors (regression) of
    ``fig`` (the run's or one configuration's), beside the no-skill baseline of the same
    outcomes; "" before any outcome."""
    if fig.get("mistake_rate") is not None:
        return (f"  mistake rate {sig(fig['mistake_rate'])}% (no-skill "
                f"{sig(fig.get('noskill_mistake_rate'))}%)")
    if fig.get("avg_loss") is not None:  # regression
        return (f"  avg loss {sig(fig['avg_loss'])} (no-skill "
                f"{sig(fig.get('noskill_avg_loss'))})  RMSE {sig(fig.get('rmse'))}  "
                f"MAE {sig(fig.get('mae'))}  R² {sig(fig.get('r2'))}")
    return ""


def format_summary(doc: dict[str, Any], checkpoint: str | None) -> str:
    # several configurations: one line each (its keys pooled), never their blend
    per = doc.get("by_config") or []
    lines = [
        f"{doc['records']:,} records in {doc['seconds']:.1f} s "
        f"({(doc['records_per_second'] or 0):,.0f}/s)",
        f"predictions {doc['predictions']:,}  outcomes {doc['outcomes']:,}"
        + (_quality(doc) if len(per) <= 1 else "")
        + f"  label delay p50 {_ms(doc['delay_p50_ms'])} p99 {_ms(doc['delay_p99_ms'])}",
        *([f"  {c['label']}: outcomes {c['outcomes']:,} of {c['keys']:,} "
           f"key{'s' if c['keys'] != 1 else ''}" + _quality(c) for c in per]
          if len(per) > 1 else []),
        f"unlabeled {doc['unlabeled']:,}  pending {_count(doc['pending'])}  rejected "
        f"{doc['rejected']:,}  dead letters {doc['dead_letters']:,}  metrics rows "
        f"{doc['metrics']:,}" + (f"  models forgotten {doc.get('forgotten') or 0:,}"
                                 if doc.get("forget_after_ms") else ""),
        f"outputs: {doc['out']}" + (f"  {snapshot_phrase(doc['snapshot_epoch'])} in {checkpoint}"
                                    if checkpoint else ""),
    ]
    return "\n".join(lines)


def warnings(doc: dict[str, Any]) -> list[str]:
    """The no-skill warnings of the run's outcomes: each configuration's, on its own outcomes
    (its keys pooled); the run's when the summary has no ``by_config``."""
    per = doc.get("by_config")
    if not per:
        return skill_warnings("this run's outcomes", doc)
    if len(per) == 1:
        return skill_warnings("this run's outcomes", per[0])
    return [w for c in per for w in skill_warnings(f"{c['label']}'s outcomes", c)]


def snapshot_phrase(epoch: int | None) -> str:
    """Where a restart resumes: the snapshot epoch, or that there is none yet."""
    return (f"snapshot epoch {epoch}" if epoch is not None
            else "no snapshot yet (nothing to resume from)")
