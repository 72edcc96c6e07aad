"""The output rows of a live stream (:mod:`kernelstream.engine.events`) and their schemas.

Rows are plain dicts, one function per output, so the reference loop and the Beam pipeline
build them the same way. Every row carries ``row_id``, a deterministic identity from which
output files and Kafka message keys derive: replaying a record after a restore rebuilds the
same row under the same id, so outputs deduplicated by ``row_id`` equal an uninterrupted run's.

==============  ===========================================================================
output          ``row_id``
==============  ===========================================================================
predictions     ``{key}/p/{position}``        position = the model's prediction count
outcomes        ``{key}/o/{learn_position}``  learn_position = the model's outcome count
unlabeled       ``{key}/u/{position}``        the expired prediction's position (an event id
                                              may be reused once forgotten; a position not)
metrics         ``{key}/m/{window_start_ms}`` a closed window;
                ``{key}/m/{window_start_ms}/partial/{records}`` a flushed open window
dead_letters    ``dl/{topic}/{partition}/{offset}/{key or ''}``
==============  ===========================================================================

The pyarrow schemas are built on demand (:func:`stream_schemas`) so the engine does not import
pyarrow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kernelstream.engine.deadletters import dead_letter

if TYPE_CHECKING:
    from kernelstream.engine.stream_state import ModelState

OUTPUTS = ("predictions", "outcomes", "unlabeled", "metrics", "dead_letters")
ID_PARTITION_SHIFT = 48  # dead-letter ``id`` = partition << 48 | offset, as the replay's


def prediction_row(key: str, config: str, entity: str | None, event_id: str, position: int,
                   event_time_ms: int, topic: str, partition: int, offset: int, score: float,
                   predicted: float, n_support_vectors: int, labelled: bool) -> dict[str, Any]:
    """A prediction made on arrival (``labelled``: the label came with the features)."""
    return {"row_id": f"{key}/p/{position}", "key": key, "config": config, "entity": entity,
            "event_id": event_id, "position": position, "event_time_ms": event_time_ms,
            "topic": topic, "partition": partition, "offset": offset, "score": score,
            "predicted": predicted, "n_support_vectors": n_support_vectors,
            "labelled": labelled}


def outcome_row(key: str, config: str, entity: str | None, event_id: str, learn_position: int,
                prediction_position: int, event_time_ms: int, label_time_ms: int, score: float,
                predicted: float, label: float, mistake: bool | None, loss: float,
                n_support_vectors: int, label_topic: str, label_partition: int,
                label_offset: int) -> dict[str, Any]:
    """A learnt example: the prediction made on arrival against its label."""
    return {"row_id": f"{key}/o/{learn_position}", "key": key, "config": config,
            "entity": entity, "event_id": event_id, "learn_position": learn_position,
            "prediction_position": prediction_position, "event_time_ms": event_time_ms,
            "label_time_ms": label_time_ms, "score": score, "predicted": predicted,
            "label": label, "mistake": mistake, "loss": loss,
            "delay_ms": label_time_ms - event_time_ms, "n_support_vectors": n_support_vectors,
            "label_topic": label_topic, "label_partition": label_partition,
            "label_offset": label_offset}


def unlabeled_row(key: str, config: str, entity: str | None, event_id: str, position: int,
                  event_time_ms: int, expired_at_ms: int) -> dict[str, Any]:
    """A prediction whose label never came within the TTL."""
    return {"row_id": f"{key}/u/{position}", "key": key, "config": config, "entity": entity,
            "event_id": event_id, "position": position, "event_time_ms": event_time_ms,
            "expired_at_ms": expired_at_ms}


def metrics_row(st: ModelState, learner: str, window_ms: int, classify: bool,
                total_loss_sum: float, final: bool, closing: bool) -> dict[str, Any]:
    """The metrics of the open window of ``st`` (``closing``: the window ends now; else a
    partial row of a flush) with the model's cumulative counts; ``total_loss_sum`` is the
    exactly rounded sum of every loss so far, this window's included."""
    w = st.window
    assert w.start is not None
    delays = sorted(w.delays)
    row_id = f"{st.key}/m/{w.start}" + ("" if closing else f"/partial/{st.records}")

    def rate(mistakes: int, n: int) -> float | None:
        return 100.0 * mistakes / n if classify and n else None

    loss_sum = math.fsum(w.losses)
    m = st.learner
    return {
        "row_id": row_id, "key": st.key, "config": st.config, "entity": st.entity,
        "learner": learner, "final": final, "window_start_ms": w.start,
        "window_end_ms": w.start + window_ms,
        "records": w.records, "predictions": w.predictions, "outcomes": w.outcomes,
        "unlabeled": w.unlabeled, "dead_letters": w.dead_letters,
        "mistakes": w.mistakes if classify else None,
        "mistake_rate": rate(w.mistakes, w.outcomes),
        "loss_sum": loss_sum, "avg_loss": loss_sum / w.outcomes if w.outcomes else None,
        "delay_p50_ms": nearest_rank(delays, 50), "delay_p99_ms": nearest_rank(delays, 99),
        "pending": len(st.pending),
        "n_support_vectors": 0 if m is None else int(m.n_support_vectors),
        "total_records": st.records, "total_predictions": st.position,
        "total_outcomes": st.learnt, "total_unlabeled": st.unlabeled,
        "total_dead_letters": st.dead_letters,
        "total_mistakes": st.mistakes if classify else None,
        "total_mistake_rate": rate(st.mistakes, st.learnt),
        "total_loss_sum": total_loss_sum,
        "total_avg_loss": total_loss_sum / st.learnt if st.learnt else None,
        "seconds": w.seconds,
        "examples_per_second": w.records / w.seconds if w.seconds > 0 else None,
        "total_seconds": st.seconds,
    }


def stream_dead_letter(source: str, topic: str, partition: int, offset: int, raw: str,
                       reason: str, stage: str = "parse", key: str | None = None,
                       event_id: str | None = None,
                       position: int | None = None) -> dict[str, Any]:
    """The replay's dead-letter row (``line`` = the record's offset) plus ``row_id`` and the
    record's ``event_id``."""
    row = dead_letter(source, offset, raw, reason, stage, key, position,
                      (partition << ID_PARTITION_SHIFT) | offset)
    row["row_id"] = f"dl/{topic}/{partition}/{offset}/{key or ''}"
    row["event_id"] = event_id
    return row


def nearest_rank(sorted_values: Sequence[int], p: float) -> int | None:
    """The ``p``-th percentile by the nearest-rank method: the smallest value with at least
    ``p`` percent of the values at or below it (``sorted_values[ceil(p/100 * n) - 1]``; an
    observed value, exact for integers). None for no values."""
    n = len(sorted_values)
    if n == 0:
        return None
    return sorted_values[max(1, math.ceil(p / 100.0 * n)) - 1]


def stream_schemas() -> dict[str, Any]:
    """The pyarrow schema of every output, by name (:data:`OUTPUTS`)."""
    import pyarrow as pa

    s, i64, f64, b = pa.string(), pa.int64(), pa.float64(), pa.bool_()

    def req(name: str, t: Any) -> Any:
        return pa.field(name, t, nullable=False)

    ident = [req("row_id", s), req("key", s), req("config", s), pa.field("entity", s)]
    predictions = pa.schema([
        *ident, req("event_id", s), req("position", i64), req("event_time_ms", i64),
        req("topic", s), req("partition", i64), req("offset", i64), req("score", f64),
        req("predicted", f64), req("n_support_vectors", i64), req("labelled", b),
    ])
    outcomes = pa.schema([
        *ident, req("event_id", s), req("learn_position", i64),
        req("prediction_position", i64), req("event_time_ms", i64), req("label_time_ms", i64),
        req("score", f64), req("predicted", f64), req("label", f64),
        pa.field("mistake", b),  # null for regression
        req("loss", f64), req("delay_ms", i64), req("n_support_vectors", i64),
        req("label_topic", s), req("label_partition", i64), req("label_offset", i64),
    ])
    unlabeled = pa.schema([
        *ident, req("event_id", s), req("position", i64), req("event_time_ms", i64),
        req("expired_at_ms", i64),
    ])
    counts = ("records", "predictions", "outcomes", "unlabeled", "dead_letters")
    metrics = pa.schema([
        *ident, req("learner", s), req("final", b), req("window_start_ms", i64),
        req("window_end_ms", i64),
        *(req(c, i64) for c in counts),
        pa.field("mistakes", i64), pa.field("mistake_rate", f64),  # null for regression
        req("loss_sum", f64), pa.field("avg_loss", f64),  # null without outcomes
        pa.field("delay_p50_ms", i64), pa.field("delay_p99_ms", i64),
        req("pending", i64), req("n_support_vectors", i64),
        *(req(f"total_{c}", i64) for c in counts),
        pa.field("total_mistakes", i64), pa.field("total_mistake_rate", f64),
        req("total_loss_sum", f64), pa.field("total_avg_loss", f64),
        # wall clock, learner calls only: the only non-deterministic fields
        req("seconds", f64), pa.field("examples_per_second", f64), req("total_seconds", f64),
    ])
    from kernelstream.engine.outputs import DEAD_LETTER_SCHEMA

    # the replay's dead-letter columns (``line`` = the record's offset) + identity, event id
    dead_letters = DEAD_LETTER_SCHEMA.append(req("row_id", s)).append(pa.field("event_id", s))
    return {"predictions": predictions, "outcomes": outcomes, "unlabeled": unlabeled,
            "metrics": metrics, "dead_letters": dead_letters}
