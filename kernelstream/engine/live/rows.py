"""The output rows of a live stream (:mod:`kernelstream.engine.live.engine`) and their schemas.

Rows are plain dicts (predictions and outcomes: column blocks that read as dicts, see below),
built by the same code for the reference loop and the Beam pipeline. Every row carries
``row_id``, a deterministic identity from which output files and Kafka message keys derive:
replaying a record after a restore rebuilds the same row under the same id, so outputs
deduplicated by ``row_id`` equal an uninterrupted run's.

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

With ``--forget-entities-after``, ``{key}`` in these ids is ``{key}~{born}`` for a model
made while forgetting is on, ``born`` being where its first record was read
(``topic:partition:offset``): a key forgotten and made again gives a new model whose counts
start over, and its rows' ids must not repeat the forgotten model's.

Predictions and outcomes, one or two rows per record, are kept column by column
(:class:`RowBlock`, collected in a :class:`Rows`): a run of events the engine learns at once
gives its rows as arrays, and they become Arrow columns without a Python object per value
(:meth:`Rows.table`). A :class:`Rows` still reads as the sequence of its row dicts (iteration,
``len``), which is how the Kafka output and the tests see it.

The pyarrow schemas are built on demand (:func:`stream_schemas`) so the engine does not import
pyarrow.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from kernelstream.engine.deadletters import dead_letter
from kernelstream.engine.noskill import FIGURES
from kernelstream.engine.replay import outputs

if TYPE_CHECKING:
    from kernelstream.engine.live.state import ModelState

OUTPUTS = ("predictions", "outcomes", "unlabeled", "metrics", "dead_letters")
ID_PARTITION_SHIFT = 48  # dead-letter ``id`` = partition << 48 | offset, as the replay's


class PredictionRow(NamedTuple):
    """The per-row fields of a ``predictions`` row, in schema order (``row_id``, ``key``,
    ``config`` and ``entity`` come first: the model's, and the id made of ``position``). The
    engine builds one per row, or one whose fields are the columns of a run of rows
    (:class:`RowBlock`)."""

    event_id: Any
    position: Any
    event_time_ms: Any
    topic: Any
    partition: Any
    offset: Any
    score: Any
    predicted: Any
    n_support_vectors: Any
    labelled: Any


class OutcomeRow(NamedTuple):
    """The per-row fields of an ``outcomes`` row, in schema order (after ``row_id``, ``key``,
    ``config``, ``entity``; the id is made of ``learn_position``): one row, or the columns of a
    run of rows (:class:`RowBlock`)."""

    event_id: Any
    learn_position: Any
    prediction_position: Any
    event_time_ms: Any
    label_time_ms: Any
    score: Any
    predicted: Any
    label: Any
    mistake: Any
    loss: Any
    delay_ms: Any
    n_support_vectors: Any
    label_topic: Any
    label_partition: Any
    label_offset: Any


# the field lists are the row types' own, so a row and its schema cannot drift apart
PREDICTION_FIELDS: tuple[str, ...] = PredictionRow._fields
OUTCOME_FIELDS: tuple[str, ...] = OutcomeRow._fields
# output -> (its fields, the row id's infix, the index of the field the id is made of)
COLUMNAR = {"predictions": (PREDICTION_FIELDS, "/p/", PREDICTION_FIELDS.index("position")),
            "outcomes": (OUTCOME_FIELDS, "/o/", OUTCOME_FIELDS.index("learn_position"))}
ROW_TYPES: dict[str, type[PredictionRow] | type[OutcomeRow]] = {
    "predictions": PredictionRow, "outcomes": OutcomeRow}


class Repeat:
    """A column of a :class:`RowBlock` with one value on every row."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        return (Repeat, (self.value,))


def _values(c: Any, n: int) -> list[Any]:
    """A column's values as Python objects."""
    if isinstance(c, Repeat):
        return [c.value] * n
    return c.tolist() if isinstance(c, np.ndarray) else list(c)


class RowBlock:
    """Rows of one columnar output (:data:`COLUMNAR`) of one model: ``cols``, the output's
    named row (:data:`ROW_TYPES`) of columns, holds each field for the ``n`` rows, as a list,
    a numpy array or a :class:`Repeat` (a sequence of columns in field order is made one; a
    wrong count of columns is a ``TypeError``).
    ``row_id`` derives from the position field; ``key``, ``config`` and ``entity`` are the
    model's, the same on every row."""

    __slots__ = ("cols", "config", "entity", "key", "n", "output", "rid")

    def __init__(self, output: str, key: str, config: str, entity: str | None,
                 cols: Sequence[Any], rid: str | None = None) -> None:
        self.output, self.key, self.config, self.entity = output, key, config, entity
        self.rid = key if rid is None else rid  # the row ids' start (ModelState.rid)
        self.cols = ROW_TYPES[output]._make(cols)
        self.n = len(self.cols[0])  # the first field (event ids) is never a Repeat

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[dict[str, Any]]:
        fields, infix, at = COLUMNAR[self.output]
        cols = [_values(c, self.n) for c in self.cols]
        head = {"row_id": "", "key": self.key, "config": self.config, "entity": self.entity}
        pre = f"{self.rid}{infix}"
        for vals in zip(*cols, strict=True):
            row = dict(head)
            row["row_id"] = f"{pre}{vals[at]}"
            row.update(zip(fields, vals, strict=True))
            yield row

    def count_true(self, field: str) -> int:
        """The rows whose ``field`` (a boolean field) is true."""
        c = self.cols[COLUMNAR[self.output][0].index(field)]
        if isinstance(c, Repeat):
            return self.n if c.value else 0
        return int(np.count_nonzero(c)) if isinstance(c, np.ndarray) else sum(map(bool, c))

    def max_of(self, field: str) -> int:
        """The largest value of ``field`` (an integer field)."""
        c = self.cols[COLUMNAR[self.output][0].index(field)]
        if isinstance(c, Repeat):
            return int(c.value)
        return int(c.max()) if isinstance(c, np.ndarray) else int(max(c))


def _blocks_batch(blocks: list[RowBlock], schema: Any) -> Any:
    """Blocks of one output, in order, as one Arrow record batch of ``schema``: each column
    gathered over the blocks, then converted at once (a block per reader round and model can
    hold a single row: converting blocks one by one cost ~0.2 ms each)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    fields, infix, at = COLUMNAR[blocks[0].output]
    sizes = [b.n for b in blocks]
    n = sum(sizes)
    string = pa.string()

    def same(values: list[Any]) -> bool:
        return all(v == values[0] for v in values)

    def gathered(j: int, typ: Any) -> Any:
        cs = [b.cols[j] for b in blocks]
        if all(isinstance(c, Repeat) for c in cs) and same([c.value for c in cs]):
            return pa.repeat(pa.scalar(cs[0].value, typ), n)
        numeric = pa.types.is_int64(typ) or pa.types.is_float64(typ)  # never null here
        if numeric and any(isinstance(c, np.ndarray) for c in cs):  # runs' arrays
            dtype = np.int64 if pa.types.is_int64(typ) else np.float64
            return pa.array(np.concatenate([
                np.full(k, c.value, dtype) if isinstance(c, Repeat) else np.asarray(c, dtype)
                for c, k in zip(cs, sizes, strict=True)]), typ)
        # Python values (one-record rows: many small blocks), strings, booleans (maybe null):
        # one list, converted by one call
        return pa.array(list(itertools.chain.from_iterable(
            itertools.repeat(c.value, k) if isinstance(c, Repeat) else c
            for c, k in zip(cs, sizes, strict=True))), typ)

    def model(attr: str) -> Any:
        vals = [getattr(b, attr) for b in blocks]
        if same(vals):
            return pa.repeat(pa.scalar(vals[0], string), n)
        return pa.array([v for v, k in zip(vals, sizes, strict=True) for _ in range(k)],
                        string)

    pos = gathered(at, pa.int64())
    keys = [b.rid for b in blocks]
    prefix: Any = (f"{keys[0]}{infix}" if same(keys) else
                   pa.array([f"{v}{infix}" for v, k in zip(keys, sizes, strict=True)
                             for _ in range(k)], string))
    arrays = [pc.binary_join_element_wise(prefix, pc.cast(pos, string), ""),
              model("key"), model("config"), model("entity")]
    for j, name in enumerate(fields):
        arrays.append(pos if j == at else gathered(j, schema.field(name).type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class Rows:
    """The rows of one output: row dicts and :class:`RowBlock` s, in order. Reads as the
    sequence of its row dicts (``len``, iteration, ``==`` a list of dicts)."""

    __slots__ = ("n", "parts")

    def __init__(self, rows: Iterable[Any] = ()) -> None:
        self.parts: list[dict[str, Any] | RowBlock] = []
        self.n = 0
        self.extend(rows)

    def append(self, row: dict[str, Any] | RowBlock) -> None:
        if isinstance(row, RowBlock):
            if not row.n:
                return
            self.n += row.n
        else:
            self.n += 1
        self.parts.append(row)

    def extend(self, rows: Iterable[Any]) -> None:
        if isinstance(rows, Rows):
            self.parts.extend(rows.parts)
            self.n += rows.n
            return
        for r in rows:
            self.append(r)

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for p in self.parts:
            if isinstance(p, RowBlock):
                yield from p
            else:
                yield p

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Row ``i`` (by a walk over the parts: for inspection, not for loops)."""
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("row index out of range")
        for p in self.parts:
            if not isinstance(p, RowBlock):
                if i == 0:
                    return p
                i -= 1
            elif i < p.n:
                return next(itertools.islice(iter(p), i, None))
            else:
                i -= p.n
        raise AssertionError("unreachable")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rows | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({list(self)!r})"

    def count_true(self, field: str) -> int:
        """The rows whose ``field`` (a boolean field) is true."""
        return sum(p.count_true(field) if isinstance(p, RowBlock) else bool(p[field])
                   for p in self.parts)

    def max_of(self, field: str) -> int:
        """The largest value of an integer ``field`` over every row (rows not empty)."""
        return max(p.max_of(field) if isinstance(p, RowBlock) else int(p[field])
                   for p in self.parts)

    def table(self, schema: Any, slice_rows: int = 256) -> Any:
        """The rows as one Arrow table of ``schema``: blocks column by column, row dicts
        ``slice_rows`` at a time (pyarrow converts Python rows holding the GIL; in slices,
        another thread gets it back every few ms)."""
        import pyarrow as pa

        batches: list[Any] = []
        dicts: list[dict[str, Any]] = []
        blocks: list[RowBlock] = []

        def flush() -> None:
            for i in range(0, len(dicts), slice_rows):
                batches.append(pa.RecordBatch.from_pylist(dicts[i:i + slice_rows],
                                                          schema=schema))
            dicts.clear()
            if blocks:
                batches.append(_blocks_batch(blocks, schema))
                blocks.clear()

        for p in self.parts:  # runs of blocks and runs of dicts, in order
            if isinstance(p, RowBlock):
                if dicts:
                    flush()
                blocks.append(p)
            else:
                if blocks:
                    flush()
                dicts.append(p)
        flush()
        return pa.Table.from_batches(batches, schema=schema)


def unlabeled_row(key: str, config: str, entity: str | None, event_id: str, position: int,
                  event_time_ms: int, expired_at_ms: int, rid: str | None = None
                  ) -> dict[str, Any]:
    """A prediction whose label never came within the TTL (``rid``: the model's
    ``ModelState.rid``, the key when None)."""
    return {"row_id": f"{key if rid is None else rid}/u/{position}", "key": key,
            "config": config, "entity": entity,
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
    row_id = f"{st.rid}/m/{w.start}" + ("" if closing else f"/partial/{st.records}")

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
        # the model's outcomes so far against the no-skill predictor (engine.noskill)
        **{f"total_{k}": v for k, v in st.noskill.figures(classify).items()},
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


# Columns of few distinct values, dictionary-encoded in the Parquet files; the others (ids,
# positions, times, scores) are nearly all distinct, and trying a dictionary on them first
# (pyarrow's default) costs 3-6x the write time for larger files.
DICTIONARY_COLUMNS = {
    "predictions": ["key", "config", "entity", "topic", "partition", "predicted",
                    "n_support_vectors", "labelled"],
    "outcomes": ["key", "config", "entity", "predicted", "label", "mistake",
                 "n_support_vectors", "label_topic", "label_partition"],
    "unlabeled": ["key", "config", "entity"],
    "metrics": ["key", "config", "entity", "learner", "final"],
    "dead_letters": ["source", "stage", "key", "reason"],
}


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
        # cumulative no-skill baseline and regression metrics (null where they do not apply)
        *(pa.field(f"total_{f}", f64) for f in FIGURES),
    ])
    # the replay's dead-letter columns (``line`` = the record's offset) + identity, event id
    dead_letters = outputs.DEAD_LETTER_SCHEMA.append(req("row_id", s)).append(
        pa.field("event_id", s))
    return {"predictions": predictions, "outcomes": outcomes, "unlabeled": unlabeled,
            "metrics": metrics, "dead_letters": dead_letters}
