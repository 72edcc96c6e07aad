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

The record containers it fills are :mod:`kernelstream.engine.live.batch`.

Messages (key = event id, UTF-8; a record without key is a dead letter)
    * Feature record: one LIBSVM line (``--n-features`` required) or CSV line (label at
      ``label_column``, default last). The label token ``?`` (CSV: ``?`` or an empty field)
      means *unlabelled*; any other label token makes a *labelled* event.
    * Label record: value ``label:Y``, on an events topic or on the labels topic, where a bare
      ``Y`` is accepted too.
    * Labels map statelessly: regression labels are floats; classification labels with
      ``positive_label`` are one-vs-rest (that token is +1, every other token -1), without it
      numeric -1 and 0 are -1 and 1 is +1 (anything else is a dead letter).
    * ``key_by="id-prefix"``: one model per entity, the event id's text before its first ``/``
      (an id without one is a dead letter); otherwise one model per configuration. Model keys
      are ``StreamKey(config, 0, entity)`` encoded, as the replay's permutation 0.

Parse errors become dead letters (stage ``parse``) with the record's source
(``source_prefix`` + ``TOPIC/PARTITION``), offset and text. Values are decoded as the file
readers decode lines: UTF-8, a leading UTF-8 byte-order mark dropped (it is never part of a
label or a feature, nor of a dead letter's text). Every dead letter of a keyed message keeps
its key as ``event_id``, also when the value is not UTF-8 or is missing; a key that is not
UTF-8 itself (a dead letter) is kept with its undecodable bytes as ``\\xNN`` escapes
(:func:`event_id_of`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import numpy as np

from kernelstream.data import (
    LabelMap,
    ParseError,
    densify,
    parse_csv_line,
    parse_libsvm_line,
    parse_libsvm_lines,
)
from kernelstream.data.hashing import hash_row
from kernelstream.data.libsvm import check_top_index
from kernelstream.data.lines import BOM
from kernelstream.data.options import ReadOptions
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.live.batch import (
    FEATURES,
    LABEL,
    LABELLED,
    EventBatch,
    ParsedRecord,
    _Columns,
    value_text,
)
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.rows import stream_dead_letter
from kernelstream.sparse import CSR

__all__ = [
    "BULK_MIN",
    "KEY_BY",
    "LABEL_BYTES",
    "LABEL_PREFIX",
    "UNLABELLED",
    "LiveSpec",
    "StreamRouter",
    "event_id_of",
]

KEY_BY = (None, "id-prefix")
LABEL_PREFIX = "label:"
LABEL_BYTES = LABEL_PREFIX.encode()


def _find_all(data: bytes, sub: bytes) -> list[int]:
    """The start of every occurrence of ``sub`` in ``data`` (bytes.find: a fast C search)."""
    out = []
    find = data.find
    i = find(sub)
    while i >= 0:
        out.append(i)
        i = find(sub, i + 1)
    return out
UNLABELLED = "?"
# Fewer LIBSVM feature records than this per route_many call are parsed line by line: numpy's
# fixed cost per call of the vectorised parser is about that of a few lines.
BULK_MIN = 8


@dataclass(frozen=True)
class LiveSpec:
    """Everything a worker needs to run the models of a stream (picklable).

    ``configs`` are ``engine.learner_config.LearnerConfig`` s;
    ``read`` says how records are parsed, as for a replay: its ``path`` is the topic URL
    (``kafka://HOST:PORT/TOPIC[,TOPIC...]``, as a replay of a topic names it); a stream reads
    its ``fmt`` (LIBSVM when None, or CSV), ``n_features``, ``label_column`` (CSV: a 0-based
    position), ``delimiter`` (``,`` when None), ``task``, ``positive_label``, ``key_by``
    (None or ``"id-prefix"``), ``rows`` and ``hash_features`` (LIBSVM indices hashed into
    ``2**k`` columns), and refuses the options that only a file has (scaling, ``limit``, a
    header);
    ``source_prefix`` is put before ``TOPIC/PARTITION`` in dead letters' ``source`` (e.g.
    ``kafka://HOST:PORT/``)."""

    configs: tuple[Any, ...]
    read: ReadOptions
    seed: int = 0
    label_ttl_ms: int = 3_600_000
    metrics_window_ms: int = 60_000
    labels_topic: str | None = None
    source_prefix: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", tuple(self.configs))
        names = [c.label for c in self.configs]
        if not names:
            raise ValueError("no learner configuration given")
        if len(set(names)) != len(names):
            raise ValueError(f"configuration names given twice: {names}")
        r = self.read
        if r.fmt is None or r.delimiter is None:  # a topic cannot be sniffed: the defaults
            r = replace(r, fmt=r.fmt or "libsvm", delimiter=r.delimiter or ",")
            object.__setattr__(self, "read", r)
        if r.fmt not in ("libsvm", "csv"):
            raise ValueError(f"stream messages are LIBSVM or CSV lines, not {r.fmt!r}")
        # each message is learnt as it comes: no pass over the data to scale by, no end to
        # cut at, no header line
        if r.scale != "none" or r.scale_target != "none" or r.limit is not None or r.header:
            raise ValueError("scale, scale_target, limit and header do not apply to stream "
                             "messages")
        if r.hash_features is not None and r.fmt != "libsvm":
            raise ValueError("hash_features applies to LIBSVM messages")
        if r.fmt == "libsvm":
            if self.width is None:
                raise ValueError("LIBSVM messages need n_features (--n-features or "
                                 "--hash-features)")
            if r.label_column is not None:
                raise ValueError("label_column does not apply to LIBSVM messages")
        elif r.label_column is not None and not isinstance(r.label_column, int):
            raise ValueError("label_column of CSV messages is a 0-based position (messages "
                             f"have no header), got {r.label_column!r}")
        if r.n_features is not None and r.n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {r.n_features}")
        if r.task not in ("classification", "regression"):
            raise ValueError(f"task must be classification or regression, got {r.task!r}")
        if r.key_by not in KEY_BY:
            raise ValueError(f"key_by must be one of {KEY_BY}, got {r.key_by!r}")
        if self.label_ttl_ms < 1 or self.metrics_window_ms < 1:
            raise ValueError("label_ttl_ms and metrics_window_ms must be >= 1 ms")

    @property
    def width(self) -> int | None:
        """The columns of an event's features: ``2**hash_features`` when hashing, else
        ``read.n_features`` (None: CSV messages, whose first record fixes it)."""
        k = self.read.hash_features
        return self.read.n_features if k is None else 1 << k

    @property
    def sparse(self) -> bool:
        """Whether events carry 1-row CSR features: ``rows='sparse'``, or ``auto`` with LIBSVM
        messages wider than ``AUTO_SPARSE_WIDTH`` (``ReadOptions.sparse_rows``, as a file
        replay decides)."""
        return self.read.sparse_rows(self.width or 0)

    @property
    def bulk(self) -> bool:
        """Whether the vectorised LIBSVM parser (dense rows of the raw indices) may be used."""
        r = self.read
        return r.fmt == "libsvm" and not self.sparse and r.hash_features is None


class _Whole(Protocol):
    """A record with its key and value, as the fast paths read the records that
    :meth:`StreamRouter._fast_candidates` keeps (a cast of ``recs``, for the type checker:
    only those records are read through it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> bytes: ...


def event_id_of(key: bytes | None) -> tuple[str | None, bool]:
    """A message key as its event id, and whether the key is UTF-8 text. None: no key (or an
    empty one). A key that is not UTF-8 is kept readable for its dead letter: its valid
    UTF-8 as text, every other byte as a ``\\xNN`` escape (``backslashreplace``)."""
    if not key:
        return None, True
    try:
        return key.decode("utf-8"), True
    except UnicodeDecodeError:
        return key.decode("utf-8", errors="backslashreplace"), False


def _entity_error(eid: str) -> str:
    return f"event id {eid!r} has no entity prefix (--key-by id-prefix wants ENTITY/ID)"

class _LabelMapping:
    """The stateless label mapping of the module docstring, on ``data.LabelMap``."""

    def __init__(self, task: str, positive_label: str | None) -> None:
        self.other: float | None = None  # value of a token no map knows (one-vs-rest)
        self.default = task == "classification" and positive_label is None
        if task == "regression":
            self.maps: tuple[LabelMap, ...] = (LabelMap.regression(),)
        elif positive_label is not None:
            self.maps, self.other = (LabelMap(positive=positive_label),), -1.0
        else:
            self.maps = (LabelMap("-1", "1"), LabelMap(negative="0"))

    def __call__(self, tok: str) -> float:
        if not tok.strip():
            raise ParseError("empty label")
        err: ParseError | None = None
        for m in self.maps:
            try:
                return m(tok)
            except ParseError as e:
                err = e
        if self.other is not None:
            return self.other
        if self.default:
            raise ParseError(f"unknown label {tok.strip()!r}: classification labels are -1 or "
                             "0 and 1 (--positive-label names the +1 class of others)")
        assert err is not None
        raise err


class StreamRouter:
    """Parsing and routing of a stream's records (see the module docstring)."""

    def __init__(self, spec: LiveSpec) -> None:
        self.spec = spec
        read = spec.read
        self.labels = _LabelMapping(read.task, read.positive_label)
        # the read options the per-record paths test, as plain attributes (read once here)
        self._libsvm = read.fmt == "libsvm"
        self._width = spec.width
        self._hash = read.hash_features
        self._by_entity = read.key_by is not None
        self._bulk_ok = spec.bulk
        self._global_keys = [StreamKey(c.label, 0).encode() for c in spec.configs]
        self._entity_prefixes = [k + "@" for k in self._global_keys]
        self._sources: dict[tuple[str, int], str] = {}  # (topic, partition) -> source
        self._label_values: dict[bytes, Any] = {}  # label record value -> y or ParseError
        self._sparse = spec.sparse
        lc = -1 if read.label_column is None else int(read.label_column)
        self._csv = (lc, read.delimiter, None if self._width is None else self._width + 1)

    def route(self, rec: SourceRecord) -> list[tuple[str, ParsedRecord]] | dict[str, Any]:
        """Parse ``rec`` once: ``(model key, parsed)`` per model it goes to, or the dead-letter
        row of a record that cannot be parsed (:meth:`route_many` of one record)."""
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

    def _source(self, rec: SourceRecord | _Whole) -> str:
        source = self._sources.get((rec.topic, rec.partition))
        if source is None:
            source = self._sources[(rec.topic, rec.partition)] = (
                f"{self.spec.source_prefix}{rec.topic}/{rec.partition}")
        return source

    def _head(self, rec: SourceRecord) -> list[Any] | dict[str, Any]:
        """What a record is, short of parsing features: its dead-letter row, or ``[rec,
        source, text, event id, label_only, x, y, entity, entity error]`` with
        ``label_only`` None for a feature record (parsed next, then the entity error, if
        any, makes it a dead letter: the errors come in :meth:`route`'s order)."""
        source = self._source(rec)
        text = ""
        # the key first: every dead letter of a keyed message names its event id
        eid, key_ok = event_id_of(rec.key)
        try:
            if rec.value is None:
                raise ParseError("empty message (no value)")
            try:
                text = value_text(rec.value)
            except UnicodeDecodeError as e:
                text = rec.value.decode("utf-8", errors="backslashreplace")
                raise ParseError(f"undecodable bytes (not UTF-8 text at byte {e.start})"
                                 ) from None
            if eid is None:
                raise ParseError("no event id (the message has no key)")
            if not key_ok:
                raise ParseError("the event id (message key) is not UTF-8 text")
            entity = entity_error = None
            if self._by_entity:
                entity, sep, _ = eid.partition("/")
                if not sep or not entity:
                    entity_error = _entity_error(eid)
            s = text.strip()
            if s.startswith(LABEL_PREFIX):
                y = self.labels(s[len(LABEL_PREFIX):])
                return self._label_head(rec, source, text, eid, y, entity, entity_error)
            if rec.topic == self.spec.labels_topic:
                y = self.labels(s)
                return self._label_head(rec, source, text, eid, y, entity, entity_error)
        except ParseError as e:
            return stream_dead_letter(source, rec.topic, rec.partition, rec.offset, text,
                                      e.reason, event_id=eid)
        return [rec, source, text, eid, None, None, None, entity, entity_error]

    def _label_head(self, rec: SourceRecord, source: str, text: str, eid: str, y: float,
                    entity: str | None, entity_error: str | None) -> list[Any] | dict[str, Any]:
        if entity_error is not None:
            return stream_dead_letter(source, rec.topic, rec.partition, rec.offset, text,
                                      entity_error, event_id=eid)
        return [rec, source, text, eid, True, None, y, entity, None]

    def _bulk_matrix(self, values: list[bytes]
                     ) -> tuple[np.ndarray | None, list[int], list[str]]:
        """The vectorised parser's dense rows of LIBSVM lines: one matrix, and per line its
        row there and label token (row -1: left to the line parser). A block the parser
        declines is halved (down to :data:`BULK_MIN` lines), so one bad record costs a few
        calls, not the block; the halves' rows are then gathered into one matrix."""
        parts: list[tuple[int, list[str], np.ndarray, np.ndarray]] = []
        self._bulk(values, 0, parts)
        rows = [-1] * len(values)
        toks = [""] * len(values)
        if not parts:
            return None, rows, toks
        if len(parts) == 1 and parts[0][2].shape[0] == len(values):
            _, toks, X, ok = parts[0]
            if ok.all():
                return X, list(range(len(values))), toks
            return X, [j if good else -1 for j, good in enumerate(ok.tolist())], toks
        X = np.concatenate([p[2] for p in parts])
        r = 0
        for at, ptoks, PX, ok in parts:
            for j, good in enumerate(ok.tolist()):
                if good:
                    rows[at + j] = r + j
                    toks[at + j] = ptoks[j]
            r += PX.shape[0]
        return X, rows, toks

    def _bulk(self, values: list[bytes], at: int,
              parts: list[tuple[int, list[str], np.ndarray, np.ndarray]]) -> None:
        assert self._width is not None
        if len(values) < BULK_MIN:
            return
        res = parse_libsvm_lines(values, self._width)
        if res is not None:
            parts.append((at, *res))
            return
        if len(values) < 2 * BULK_MIN:
            return
        h = len(values) // 2
        self._bulk(values[:h], at, parts)
        self._bulk(values[h:], at + h, parts)

    def _label_of(self, tok: str) -> float | None:
        return None if tok.strip() == UNLABELLED else self.labels(tok)

    def _features(self, text: str) -> tuple[np.ndarray | CSR, float | None]:
        x: np.ndarray | CSR
        if self._libsvm:
            tok, idx, vals = parse_libsvm_line(text)
            d = self._width
            assert d is not None
            k = self._hash
            if k is not None:  # raw indices of any size, hashed into d = 2**k columns
                cols, vals = hash_row(idx - 1, vals, k)
                x = CSR.one_row(cols, vals, d) if self._sparse else densify(cols + 1, vals, d)
            elif self._sparse:
                check_top_index(idx, d)
                x = CSR.one_row(idx - 1, vals, d)
            else:
                x = densify(idx, vals, d)
        else:
            lc, delim, ncol = self._csv
            try:
                tok, x = parse_csv_line(text, lc, delim, n_columns=ncol)
            except ParseError as e:
                if not e.reason.startswith("empty label"):
                    raise
                fields = text.split(delim)  # an empty label field: unlabelled
                fields[lc] = UNLABELLED
                tok, x = parse_csv_line((delim or " ").join(fields), lc, delim, n_columns=ncol)
        if self._sparse and not isinstance(x, CSR):
            x = CSR.from_dense(x[None, :])
        return x, self._label_of(tok)
