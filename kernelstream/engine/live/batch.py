"""The record containers of a live stream's routing are plain data with no parsing in them (the
engine reads them and never needs the router's parsers and label maps to do so):

* :class:`ParsedRecord` — one record after routing: a label record or an event (features
  ``x``, label ``y`` or None), with its topic, partition, offset, timestamp, text and source.
* :class:`EventBatch` — one model's records of a reader call, field by field (``kind`` of each
  record: :data:`FEATURES`, :data:`LABELLED` or :data:`LABEL`, and :data:`TICK` for a clock
  tick of :mod:`kernelstream.engine.live.clock`, which is no record, or :data:`FORGET` for its
  forget; features as rows of the
  vectorised parser's matrix or as per-record rows); it reads as a sequence of
  :class:`ParsedRecord` and gives the engine a run of labelled events without making them.
* :class:`Later`, :func:`text_and_source` — a record's dead-letter text and source, decoded
  only when a dead letter needs them.
* ``_Columns`` — what the router learns about each record of a call, by record index, until it
  splits them into the models' batches (one per configuration, or per entity).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from kernelstream.engine.live.clock import FORGET, TICK
from kernelstream.engine.live.records import SourceRecord
from kernelstream.sparse import CSR

if TYPE_CHECKING:  # the router fills these containers; they only read its routing tables
    from kernelstream.engine.live.clock import QuietClock
    from kernelstream.engine.live.routing import StreamRouter

__all__ = ["FEATURES", "FORGET", "LABEL", "LABELLED", "TICK", "EventBatch", "Later", "ParsedRecord",
           "text_and_source", "value_text"]

FEATURES, LABELLED, LABEL = 0, 1, 2  # what a routed record is: EventBatch.kind
# TICK and FORGET (engine.live.clock): a quiet entity's models' clock tick and forget, no
# record, only a timestamp (the stream clock); their other fields are empty (event id "",
# partition and offset -1)
_UNROUTED = 255  # a record of a call that is a dead letter


class ParsedRecord(NamedTuple):
    """A record after :meth:`StreamEngine.route`: a label (``label_only``) or an event with
    features ``x`` and label ``y`` (None: unlabelled), plus where it came from."""

    label_only: bool
    event_id: str
    x: np.ndarray | CSR | None  # a 1-row CSR when the spec's rows are sparse
    y: float | None
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    text: str
    source: str


class EventBatch:
    """One model's routed records of a reader call, field by field (what
    :meth:`StreamRouter.route_many` gives each model; models that get the same records, the
    configurations of one stream or of one entity, share it, read-only). ``batch[i]`` is
    record ``i``'s :class:`ParsedRecord`; the engine reads a run of labelled events from the
    fields directly (its features as a slice of ``X``).

    ``kind[i]``: :data:`FEATURES` (unlabelled event), :data:`LABELLED` (event with its label)
    or :data:`LABEL` (label record), or :data:`TICK` (a clock tick at ``timestamp_ms[i]``, no
    record: only :meth:`StreamEngine.process_many` reads it) or :data:`FORGET` (the models
    are dropped there); ``y[i]``: the label (None:
    unlabelled); features: row ``xrow[i]`` of ``X`` (the vectorised parser's matrix) or,
    where ``xrow[i]`` is -1, ``xs[i]`` (the line parser's row; none for labels). ``topic``,
    ``partition``, ``offset``, ``timestamp_ms`` and ``value`` are the records' own (the text of
    a dead letter is the value, decoded when needed)."""

    def __init__(self, kind: bytearray, event_id: list[str], y: list[float | None],
                 xrow: list[int], xs: dict[int, Any], X: np.ndarray | None,
                 topic: Sequence[str], partition: Sequence[int], offset: Sequence[int],
                 timestamp_ms: Sequence[int], value: Sequence[bytes], source_prefix: str,
                 sources: Sequence[str] | None = None) -> None:
        self.kind, self.event_id, self.y = kind, event_id, y
        self.xrow, self.xs, self.X = xrow, xs, X
        self.topic, self.partition, self.offset = topic, partition, offset
        self.timestamp_ms, self.value = timestamp_ms, value
        self.source_prefix = source_prefix
        self.sources = sources  # per record; None: source_prefix + TOPIC/PARTITION
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None
        self._single: bool | None = None

    @classmethod
    def of(cls, parsed: Sequence[ParsedRecord]) -> EventBatch:
        """The batch of parsed records (e.g. :meth:`StreamRouter.route` 's, one by one)."""
        return cls(bytearray(LABEL if p.label_only else FEATURES if p.y is None else LABELLED
                             for p in parsed), [p.event_id for p in parsed], [p.y for p in parsed],
                   [-1] * len(parsed),
                   {i: p.x for i, p in enumerate(parsed) if p.x is not None}, None,
                   [p.topic for p in parsed], [p.partition for p in parsed],
                   [p.offset for p in parsed], [p.timestamp_ms for p in parsed],
                   [p.text.encode("utf-8") for p in parsed], "", [p.source for p in parsed])

    def __len__(self) -> int:
        return len(self.kind)

    def x(self, i: int) -> np.ndarray | CSR | None:
        r = self.xrow[i]
        # a row of X: the vectorised parser made it
        return self.xs.get(i) if r < 0 else cast(np.ndarray, self.X)[r]

    def source(self, i: int) -> str:
        if self.sources is not None:
            return self.sources[i]
        return f"{self.source_prefix}{self.topic[i]}/{self.partition[i]}"

    def text(self, i: int) -> str:
        return value_text(self.value[i])

    def __getitem__(self, i: int) -> ParsedRecord:
        if i < 0:
            i += len(self.kind)
        return ParsedRecord(self.kind[i] == LABEL, self.event_id[i], self.x(i), self.y[i],
                            self.topic[i], int(self.partition[i]), int(self.offset[i]),
                            int(self.timestamp_ms[i]), self.text(i), self.source(i))

    def __iter__(self) -> Iterator[ParsedRecord]:
        return (self[i] for i in range(len(self.kind)))

    def record(self, i: int) -> ParsedRecord:
        """Record ``i`` for the engine's one-record path: ``text`` and ``source`` are a
        :class:`Later` (only a dead letter reads them: decoding every record's value would
        cost more than the rest of the record)."""
        return _new_tuple(ParsedRecord, (
            self.kind[i] == LABEL, self.event_id[i], self.x(i), self.y[i], self.topic[i],
            self.partition[i], self.offset[i], self.timestamp_ms[i], Later(self, i), None))

    def single_partition(self) -> bool:
        """Whether every record comes from one topic partition (made once)."""
        if self._single is None:
            n = len(self.kind)
            self._single = n == 0 or (self.topic.count(self.topic[0]) == n
                                      and self.partition.count(self.partition[0]) == n)
        return self._single

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(timestamps, offsets)`` as int64 arrays (made once)."""
        if self._arrays is None:
            self._arrays = (np.asarray(self.timestamp_ms, dtype=np.int64),
                            np.asarray(self.offset, dtype=np.int64))
        return self._arrays


class Later:
    """A record's dead-letter ``text`` and ``source``, made when asked for
    (:meth:`EventBatch.record`)."""

    __slots__ = ("batch", "i")

    def __init__(self, batch: EventBatch, i: int) -> None:
        self.batch, self.i = batch, i

    def text(self) -> str:
        return self.batch.text(self.i)

    def source(self) -> str:
        return self.batch.source(self.i)


def text_and_source(p: ParsedRecord) -> tuple[str, str]:
    """``(text, source)`` of a parsed record, whichever way it was made."""
    if isinstance(p.text, Later):
        return p.text.text(), p.text.source()
    return p.text, p.source


def value_text(value: bytes) -> str:
    """A record's value as text: UTF-8, less a leading byte-order mark (dropped as every file
    reader drops it, ``data.lines``: it is never part of a label or a feature)."""
    text = value.decode("utf-8")
    return text[1:] if text[:1] == "\ufeff" else text


_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__


class _Columns:
    """What :meth:`StreamRouter.route_many` learns about each record of a call, by record
    index, until it makes the models' :class:`EventBatch` es."""

    def __init__(self, n: int) -> None:
        self.kind = bytearray([_UNROUTED]) * n
        self.eid: list[str] = [""] * n
        self.y: list[float | None] = [None] * n
        self.xrow: list[int] = [-1] * n
        self.xs: dict[int, Any] = {}
        self.entity: list[str | None] = [None] * n
        self.dead: dict[int, dict[str, Any]] = {}
        self.X: np.ndarray | None = None

    def put(self, j: int, kind: int, eid: str, y: float | None, xrow: int, x: Any,
            entity: str | None) -> None:
        self.kind[j], self.eid[j], self.y[j], self.xrow[j] = kind, eid, y, xrow
        if x is not None:
            self.xs[j] = x
        self.entity[j] = entity

    def groups(self, router: StreamRouter, recs: list[SourceRecord]
               ) -> tuple[dict[str, EventBatch], list[dict[str, Any]]]:
        dead = [self.dead[j] for j in sorted(self.dead)]
        n = len(recs)
        if not n or len(dead) == n:
            return {}, dead
        topic, partition, offset, ts, _, value = zip(*recs, strict=True)
        prefix = router.spec.source_prefix
        if not router._by_entity:
            if dead:
                idx = [j for j in range(n) if self.kind[j] != _UNROUTED]
                b = self._take(idx, topic, partition, offset, ts, value, prefix)
            else:
                b = EventBatch(self.kind, self.eid, self.y, self.xrow, self.xs, self.X, topic,
                               partition, offset, ts, value, prefix)
            return dict.fromkeys(router._global_keys, b), dead
        by: dict[str, list[int]] = {}
        routed: list[int] = []
        for j in range(n):
            if self.kind[j] != _UNROUTED:
                routed.append(j)
                e = self.entity[j]
                assert e is not None
                ids = by.get(e)
                if ids is None:
                    by[e] = [j]
                else:
                    ids.append(j)
        # the ticks and forgets, (time, kind); the i-th is index -1 - i in an entity's list
        ticks: list[tuple[int, int]] = []
        if router.clock is not None:
            self._place_ticks(router.clock, routed, ts, by, ticks)
        out: dict[str, EventBatch] = {}
        for e, idx in by.items():
            b = self._take(idx, topic, partition, offset, ts, value, prefix, ticks)
            for pre in router._entity_prefixes:
                out[pre + e] = b
        return out, dead

    def _place_ticks(self, clock: QuietClock, routed: list[int], ts: Sequence[int],
                     by: dict[str, list[int]], ticks: list[tuple[int, int]]) -> None:
        """The clock's ticks and forgets of the routed records ``routed`` (record indices, in
        order) into the entities' lists ``by``, each right after the record that made it due
        (as index ``-1 - i``, its time and kind ``ticks[i]``)."""
        due = clock.record_many([cast(str, self.entity[j]) for j in routed],
                                [ts[j] for j in routed])
        if not due:
            return
        after: dict[str, list[tuple[int, int]]] = {}
        for k, e, t, what in due:
            after.setdefault(e, []).append((routed[k], -1 - len(ticks)))
            ticks.append((t, what))
        for e, marks in after.items():
            # records and ticks by position; a tick after record j sorts after it, and the
            # ticks after one record in the order they came (a second tick, then a forget)
            merged = [(j, 0, j) for j in by.get(e, ())] + [(j, 1, -1 - i) for j, i in marks]
            by[e] = [i if kind == 0 else -1 - i for _, kind, i in sorted(merged)]

    def _take(self, idx: list[int], topic: Sequence[str], partition: Sequence[int],
              offset: Sequence[int], ts: Sequence[int], value: Sequence[bytes], prefix: str,
              ticks: list[tuple[int, int]] | None = None) -> EventBatch:
        """The batch of records ``idx``; a negative index ``-1 - i`` is the tick or forget
        ``ticks[i]``."""
        if ticks and min(idx) < 0:
            return self._take_ticks(idx, topic, partition, offset, ts, value, prefix, ticks)
        xs = self.xs
        return EventBatch(bytearray([self.kind[j] for j in idx]),
                          [self.eid[j] for j in idx], [self.y[j] for j in idx],
                          [self.xrow[j] for j in idx],
                          {i: xs[j] for i, j in enumerate(idx) if j in xs}, self.X,
                          [topic[j] for j in idx], [partition[j] for j in idx],
                          [offset[j] for j in idx], [ts[j] for j in idx],
                          [value[j] for j in idx], prefix)

    def _take_ticks(self, idx: list[int], topic: Sequence[str], partition: Sequence[int],
                    offset: Sequence[int], ts: Sequence[int], value: Sequence[bytes],
                    prefix: str, ticks: list[tuple[int, int]]) -> EventBatch:
        """:meth:`_take` of a batch with ticks among its records."""
        xs = self.xs
        m = len(idx)
        kind = bytearray(m)
        eid: list[str] = [""] * m
        y: list[float | None] = [None] * m
        xrow = [-1] * m
        tp, pa, of = [""] * m, [-1] * m, [-1] * m
        tss, val = [0] * m, [b""] * m
        bxs: dict[int, Any] = {}
        for i, j in enumerate(idx):
            if j < 0:
                tss[i], kind[i] = ticks[-1 - j]
                continue
            kind[i], eid[i], y[i], xrow[i] = self.kind[j], self.eid[j], self.y[j], self.xrow[j]
            tp[i], pa[i], of[i], tss[i], val[i] = (topic[j], partition[j], offset[j], ts[j],
                                                   value[j])
            if j in xs:
                bxs[i] = xs[j]
        return EventBatch(kind, eid, y, xrow, bxs, self.X, tp, pa, of, tss, val, prefix)
