"""The first half of a live stream's loop: parse each Kafka record once and name its models.

:class:`StreamRouter` is the routing half of
:class:`~kernelstream.engine.live.engine.StreamEngine` (which holds one beside its per-model
processing): :meth:`StreamRouter.route_many` turns a
reader call's records into an :class:`EventBatch` per model (its records field by field; each
reads as a sequence of :class:`ParsedRecord` s) plus the dead-letter rows of records that
cannot be parsed. It lives apart from the processing because it needs no model state at all,
only the stream's :class:`LiveSpec`, and because its speed concerns (keys decoded in one
pass, the vectorised LIBSVM parser and the halving of blocks it declines, label values mapped
once) are separate from the learning ones.

This module owns the pass over a reader call: which records take the fast paths (plain
feature records, plain label records) and which go one by one, the columns each fills, and
the models each record goes to: with ``key_by="id-prefix"`` one model per entity, otherwise
one per configuration; model keys are ``StreamKey(config, 0, entity)`` encoded, as the
replay's permutation 0; and, given a :class:`~kernelstream.engine.live.clock.QuietClock`, the
ticks of entities gone quiet, placed in their batches after the record that made them due.
What a record's bytes mean (the message formats, label mapping, line
and block parsers, and the dead letters of parse errors) is its base,
:class:`~kernelstream.engine.live.parsing.RecordParser`
(:mod:`kernelstream.engine.live.parsing`, which also holds :class:`LiveSpec`). The record
containers it fills are :mod:`kernelstream.engine.live.batch`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

import numpy as np

from kernelstream.data import ParseError
from kernelstream.data.lines import BOM
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.live.batch import (
    FEATURES,
    LABEL,
    LABELLED,
    EventBatch,
    ParsedRecord,
    _Columns,
)
from kernelstream.engine.live.clock import QuietClock
from kernelstream.engine.live.parsing import (
    BULK_MIN,
    LABEL_BYTES,
    LiveSpec,
    RecordParser,
    _entity_error,
    _Whole,
)
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.rows import stream_dead_letter

__all__ = ["StreamRouter"]


# Below this many candidates _fast_candidates tests each value on its own: the same records
# (a match cannot span the joined values' newline), without the ~20 us of numpy calls that a
# live round of a few records would pay every time.
SMALL_ROUND = 32


def _find_all(data: bytes, sub: bytes) -> list[int]:
    """The start of every occurrence of ``sub`` in ``data`` (bytes.find: a fast C search)."""
    out = []
    find = data.find
    i = find(sub)
    while i >= 0:
        out.append(i)
        i = find(sub, i + 1)
    return out


class StreamRouter(RecordParser):
    """Routing of a stream's records (see the module docstring), parsed by its base
    :class:`~kernelstream.engine.live.parsing.RecordParser`."""

    def __init__(self, spec: LiveSpec, labels: Callable[[str], float] | None = None,
                 clock: QuietClock | None = None) -> None:
        super().__init__(spec, labels)
        self._bulk_ok = spec.bulk
        self._global_keys = [StreamKey(c.label, 0).encode() for c in spec.configs]
        self._entity_prefixes = [k + "@" for k in self._global_keys]
        self._label_values: dict[bytes, Any] = {}  # label record value -> y or ParseError
        # the ticks of quiet entities (per-entity models only: a configuration's one model
        # gets every record, so its clock is the stream's)
        self.clock = clock if self._by_entity else None

    def route(self, rec: SourceRecord) -> list[tuple[str, ParsedRecord]] | dict[str, Any]:
        """Parse ``rec`` once: ``(model key, parsed)`` per model it goes to, or the dead-letter
        row of a record that cannot be parsed (:meth:`route_many` of one record; a router
        without a clock: a tick is no record)."""
        if self.clock is not None:
            raise ValueError("route() gives records, not ticks: use route_many() with a clock")
        groups, dead = self.route_many((rec,))
        if dead:
            return dead[0]
        made: dict[int, ParsedRecord] = {}  # models sharing a batch share the record
        return [(k, made.setdefault(id(b), b[0])) for k, b in groups.items()]

    def route_many(self, records: Iterable[SourceRecord]
                   ) -> tuple[dict[str, EventBatch], list[dict[str, Any]]]:
        """Parse many records at once: an :class:`EventBatch` of each model's records in
        record order, the models in order of first appearance, and the dead-letter rows of
        the records that cannot be parsed (in record order). Each record gives what
        :meth:`route` gives it.

        Plain feature records (a key, a value that is not a label, on an events topic) take
        the fast path: keys decoded in one pass and, for dense LIBSVM rows, every value parsed
        by the vectorised parser into one matrix (the batch's ``X``, whose rows the learner
        reads in runs without copying them). Plain label records (ASCII ``label:Y``, or ``Y``
        on the labels topic) map each distinct value once. Records the parser does not vouch
        for and anything odd go through :meth:`_head` and the line parser, which also word
        the errors; tests hold the fast paths to that record-by-record path."""
        recs = records if isinstance(records, list) else list(records)
        n = len(recs)
        b = _Columns(n)
        fast = self._fast_candidates(recs)
        slow = self._route_fast(recs, fast, b) if fast else list(range(n))
        if slow:
            slow = self._route_labels(recs, slow, b)
        if slow:
            self._route_slow(recs, slow, b)
        return b.groups(self, recs)

    def _fast_candidates(self, recs: list[SourceRecord]) -> list[int]:
        """Records that may be plain feature records: a key, a value holding no label
        prefix, comment or newline, on an events topic."""
        lt = self.spec.labels_topic
        cand = [j for j, r in enumerate(recs)
                if r.value is not None and r.key and r.topic != lt]
        if cand:
            whole = cast("list[_Whole]", recs)
            values = [whole[j].value for j in cand]
            if len(cand) < SMALL_ROUND:  # a live round's few records: numpy costs more
                return [j for j, v in zip(cand, values, strict=True)
                        if not (LABEL_BYTES in v or b"#" in v or b"\n" in v or BOM in v)]
            joined = b"\n".join(values)
            if joined.count(b"\n") != len(cand) - 1:
                cand = [j for j, v in zip(cand, values, strict=True)
                        if not (LABEL_BYTES in v or b"#" in v or b"\n" in v or BOM in v)]
            elif b"#" in joined or LABEL_BYTES in joined or BOM in joined:
                # label records among them (events each followed by its label), and values
                # with a byte-order mark (the line parser drops it, _head): the records the
                # matches fall in, found in one pass over the joined values
                hits = (_find_all(joined, LABEL_BYTES) + _find_all(joined, b"#")
                        + _find_all(joined, BOM))
                ends = np.cumsum(np.fromiter(map(len, values), np.int64, len(values)) + 1)
                keep = np.ones(len(cand), dtype=bool)
                keep[np.searchsorted(ends, hits, side="right")] = False
                cand = np.asarray(cand)[keep].tolist()
        return cand

    def _route_fast(self, recs: list[SourceRecord], cand: list[int], b: _Columns
                    ) -> list[int]:
        """Route the candidates of :meth:`_fast_candidates` into ``b``; the records left to
        :meth:`_route_slow` (every record not routed here), in order."""
        whole = cast("list[_Whole]", recs)
        keys = [whole[j].key for j in cand]
        try:
            eids = [k.decode("utf-8") for k in keys]
        except UnicodeDecodeError:  # the slow path words it, record by record
            ok = []
            for j in cand:
                try:
                    whole[j].key.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                ok.append(j)
            cand = ok
            eids = [whole[j].key.decode("utf-8") for j in cand]
        entities: list[str | None] | None = None
        if self._by_entity:
            entities = [e.partition("/")[0] if "/" in e else "" for e in eids]
        done = bytearray(len(recs))  # 1: routed (or a dead letter) here
        if self._bulk_ok and len(cand) >= BULK_MIN:
            values = [whole[j].value for j in cand]
            X, rows, toks = self._bulk_matrix(values)
            if X is not None:
                b.X = X
            ys: dict[str, float | ParseError | None] = {}
            if -1 not in rows and (entities is None or "" not in entities):
                for tok in set(toks):
                    try:
                        ys[tok] = self._label_of(tok)
                    except ParseError as e:
                        ys[tok] = e
                labels = list(ys.values())
                if not any(isinstance(y, ParseError) for y in labels):
                    # every candidate a good feature record: the columns as they come
                    yc = cast("list[float | None]", [ys[t] for t in toks])  # no ParseError
                    m = len(cand)
                    kinds = (bytearray([LABELLED]) * m if None not in labels
                             else bytearray([FEATURES]) * m if labels == [None]
                             else bytearray(FEATURES if y is None else LABELLED for y in yc))
                    if m == len(recs):
                        b.kind, b.y, b.eid, b.xrow = kinds, yc, eids, rows
                        if entities is not None:
                            b.entity = entities
                        return []
                    self._scatter(b, cand, kinds, eids, yc, rows, entities)
                    routed = set(cand)
                    return [j for j in range(len(recs)) if j not in routed]
            for c, j in enumerate(cand):
                row = rows[c]
                if row < 0:
                    continue  # the line parser decides
                tok = toks[c]
                y: Any = ys.get(tok, ys)  # a label, a ParseError, or ys: not seen yet
                if y is ys:
                    try:
                        y = ys[tok] = self._label_of(tok)
                    except ParseError as e:
                        y = ys[tok] = e
                done[j] = 1
                rec = whole[j]
                entity = None if entities is None else entities[c]
                if isinstance(y, ParseError):
                    b.dead[j] = stream_dead_letter(self._source(rec), rec.topic, rec.partition,
                                                   rec.offset, rec.value.decode(),
                                                   y.reason, event_id=eids[c])
                elif entity == "":
                    b.dead[j] = stream_dead_letter(
                        self._source(rec), rec.topic, rec.partition, rec.offset,
                        rec.value.decode(), _entity_error(eids[c]),
                        event_id=eids[c])
                else:
                    b.put(j, FEATURES if y is None else LABELLED, eids[c], y, row, None,
                          entity)
        return [j for j in range(len(recs)) if not done[j]]

    @staticmethod
    def _scatter(b: _Columns, cand: list[int], kinds: bytearray, eids: list[str],
                 ys: list[float | None], rows: list[int], entities: list[str | None] | None,
                 ) -> None:
        """Put the routed records ``cand`` (their columns in order) into ``b``. Evenly
        spaced ones (events each followed by a label record) are put by slices."""
        c0, m = cand[0], len(cand)
        step = cand[1] - c0 if m > 1 else 1
        if step > 0 and cand == list(range(c0, c0 + step * m, step)):
            sl = slice(c0, c0 + step * m, step)
            b.kind[sl], b.eid[sl], b.y[sl], b.xrow[sl] = kinds, eids, ys, rows
            if entities is not None:
                b.entity[sl] = entities
            return
        for c, j in enumerate(cand):
            b.kind[j], b.eid[j], b.y[j], b.xrow[j] = kinds[c], eids[c], ys[c], rows[c]
            if entities is not None:
                b.entity[j] = entities[c]

    def _labels_at_once(self, recs: list[SourceRecord], idx: list[int], b: _Columns) -> bool:
        """:meth:`_route_labels` of the common case at once: every record of ``idx`` an ASCII
        ``label:Y`` record with a key, its value already mapped to a label, no entities.
        False (nothing done): go record by record."""
        if self._by_entity or len(idx) < BULK_MIN:
            return False
        whole = cast("list[_Whole]", recs)
        vals = [whole[j].value for j in idx]
        keys = [whole[j].key for j in idx]
        if None in vals or not all(keys):
            return False
        toks = [v[6:] for v in vals if v[:6] == LABEL_BYTES]
        cache = self._label_values
        if len(toks) != len(idx) or not b"".join(vals).isascii() or not all(
                isinstance(cache.get(t), float) for t in set(toks)):
            return False
        ys = [cache[t] for t in toks]
        joined = b"\n".join(keys)
        if joined.count(b"\n") != len(keys) - 1:
            return False
        try:
            eids = joined.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            return False
        self._scatter(b, idx, bytearray([LABEL]) * len(idx), eids,
                      cast("list[float | None]", ys), [-1] * len(idx), None)
        return True

    def _route_labels(self, recs: list[SourceRecord], idx: list[int], b: _Columns
                      ) -> list[int]:
        """Route the plain label records among ``recs[idx]`` (a key, an ASCII value: ``label:Y``,
        or ``Y`` on the labels topic) into ``b``, each distinct label value mapped once;
        the records left to :meth:`_route_slow`, in order."""
        if self._labels_at_once(recs, idx, b):
            return []
        lt = self.spec.labels_topic
        cache = self._label_values
        left = []
        for j in idx:
            r = recs[j]
            v, k = r.value, r.key
            if not k or v is None or not v.isascii():
                left.append(j)
                continue
            if v[:6] == LABEL_BYTES:
                token = v[6:]
            elif r.topic == lt and v[:1] and not v[:1].isspace():
                token = v
            else:
                left.append(j)
                continue
            y = cache.get(token, cache)
            if y is cache:
                if len(cache) > 4096:  # label values are few; a flood of odd ones is not
                    cache.clear()
                try:
                    # what _head gives the label: the text stripped, less its prefix
                    y = cache[token] = self.labels(token.decode("ascii").rstrip())
                except ParseError as e:
                    y = cache[token] = e
            try:
                eid = k.decode("utf-8")
            except UnicodeDecodeError:
                left.append(j)  # the slow path words it
                continue
            if isinstance(y, ParseError):
                b.dead[j] = stream_dead_letter(self._source(r), r.topic, r.partition,
                                               r.offset, v.decode("ascii"), y.reason,
                                               event_id=eid)
                continue
            entity = None
            if self._by_entity:
                entity = eid.partition("/")[0] if "/" in eid else ""
                if not entity:
                    b.dead[j] = stream_dead_letter(self._source(r), r.topic, r.partition,
                                                   r.offset, v.decode("ascii"),
                                                   _entity_error(eid), event_id=eid)
                    continue
            b.put(j, LABEL, eid, y, -1, None, entity)
        return left

    def _route_slow(self, recs: list[SourceRecord], idx: list[int], b: _Columns) -> None:
        """Route records one by one: :meth:`_head`, then the line parser."""
        for j in idx:
            h = self._head(recs[j])
            if isinstance(h, dict):
                b.dead[j] = h
                continue
            rec, source, text, eid, label_only, x, y, entity, entity_error = h
            if label_only:
                b.put(j, LABEL, eid, y, -1, None, entity)
                continue
            try:
                x, y = self._features(text)
            except ParseError as e:
                b.dead[j] = stream_dead_letter(source, rec.topic, rec.partition, rec.offset,
                                               text, e.reason, event_id=eid)
                continue
            if entity_error is not None:
                b.dead[j] = stream_dead_letter(source, rec.topic, rec.partition, rec.offset,
                                               text, entity_error, event_id=eid)
                continue
            b.put(j, FEATURES if y is None else LABELLED, eid, y, -1, x, entity)
