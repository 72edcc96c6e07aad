"""The parsing half of a live stream's routing: what each Kafka record's bytes mean.

:class:`RecordParser` is the base of
:class:`~kernelstream.engine.live.routing.StreamRouter`. It owns turning one record's key and
value (or one block of LIBSVM values, :meth:`RecordParser._bulk_matrix`) into an event's
features and label or a label record's label, and the dead-letter row, with its reason and
position, of a record that cannot be parsed. Which records of a reader call take which path,
and which models each one goes to, is :mod:`kernelstream.engine.live.routing`. The stream's
:class:`LiveSpec` is here too: nearly all of it says how records are parsed.

Messages (key = event id, UTF-8; a record without key is a dead letter)
    * Feature record: one LIBSVM line (``--n-features`` required) or CSV line (label at
      ``label_column``, default last). The label token ``?`` (CSV: ``?`` or an empty field)
      means *unlabelled*; any other label token makes a *labelled* event.
    * Label record: value ``label:Y``, on an events topic or on the labels topic, where a bare
      ``Y`` is accepted too.
    * Labels map statelessly: regression labels are floats; classification labels with
      ``positive_label`` and ``negative_label`` (the stream's first other label, decided on
      its first records: ``pipelines.live.stream_width``) map those two and dead-letter a
      third, as a replay maps the first two labels it reads; with ``positive_label`` alone
      they are one-vs-rest (that token is +1, every other token -1); without either,
      numeric -1 and 0 are -1 and 1 is +1 (anything else is a dead letter).
    * ``key_by="id-prefix"``: one model per entity, the event id's text before its first ``/``
      (an id without one is a dead letter); otherwise one model per configuration.

Parse errors become dead letters (stage ``parse``) with the record's source
(``source_prefix`` + ``TOPIC/PARTITION``), offset and text. Values are decoded as the file
readers decode lines: UTF-8, a leading UTF-8 byte-order mark dropped (it is never part of a
label or a feature, nor of a dead letter's text). Every dead letter of a keyed message keeps
its key as ``event_id``, also when the value is not UTF-8 or is missing; a key that is not
UTF-8 itself (a dead letter) is kept with its undecodable bytes as ``\\xNN`` escapes
(:func:`event_id_of`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

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
from kernelstream.data.options import ReadOptions
from kernelstream.data.scaling import head_scaling
from kernelstream.engine.live.batch import value_text
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
    "RecordParser",
    "event_id_of",
]

KEY_BY = (None, "id-prefix")
LABEL_PREFIX = "label:"
LABEL_BYTES = LABEL_PREFIX.encode()
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
    (None or ``"id-prefix"``), ``rows``, ``hash_features`` (LIBSVM indices hashed into
    ``2**k`` columns) and ``scale_ranges`` (``--scale auto``: every dense row min-max scaled by
    the ranges of the stream's first records, ``scale`` then ``"01"``), and refuses the
    options that only a file has (scaling over the whole data, ``limit``, a header);
    ``source_prefix`` is put before ``TOPIC/PARTITION`` in dead letters' ``source`` (e.g.
    ``kafka://HOST:PORT/``); ``forget_after_ms`` (``--forget-entities-after``, with ``key_by``):
    an entity's models are dropped once the stream clock is this far past its last record
    (:mod:`kernelstream.engine.live.clock`; at least twice ``max(label_ttl_ms,
    metrics_window_ms)``, the two ticks that expire its events and forget their ids first)."""

    configs: tuple[Any, ...]
    read: ReadOptions
    seed: int = 0
    label_ttl_ms: int = 3_600_000
    metrics_window_ms: int = 60_000
    labels_topic: str | None = None
    source_prefix: str = ""
    negative_label: str | None = None  # with read.positive_label: the -1 class, else the rest
    forget_after_ms: int | None = None

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
        # each message is learnt as it comes: no pass over the data to scale by (only the
        # ranges of its first records, fixed before it starts), no end to cut at, no header
        if ((r.scale != "none") != (r.scale_ranges is not None) or r.scale not in ("none", "01")
                or r.scale_target != "none" or r.limit is not None or r.header):
            raise ValueError("scale (but by scale_ranges), scale_target, limit and header do "
                             "not apply to stream messages")
        if r.scale_ranges is not None:
            lo, hi = r.scale_ranges
            if len(lo) != len(hi) or not lo or self.width not in (None, len(lo)):
                raise ValueError(f"scale_ranges of {len(lo)} and {len(hi)} columns do not fit "
                                 f"rows of {self.width} features")
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
        if self.negative_label is not None and (r.task != "classification"
                                                or r.positive_label is None):
            raise ValueError("negative_label goes with positive_label, for classification")
        if self.label_ttl_ms < 1 or self.metrics_window_ms < 1:
            raise ValueError("label_ttl_ms and metrics_window_ms must be >= 1 ms")
        if self.forget_after_ms is not None:
            if r.key_by is None:
                raise ValueError("forget_after_ms forgets entities' models: it needs key_by")
            least = 2 * max(self.label_ttl_ms, self.metrics_window_ms)
            if self.forget_after_ms < least:
                raise ValueError(f"forget_after_ms must be at least twice max(label_ttl_ms, "
                                 f"metrics_window_ms) = {least} ms, got {self.forget_after_ms}")

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
    ``StreamRouter._fast_candidates`` keeps (a cast of ``recs``, for the type checker:
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

    def __init__(self, task: str, positive_label: str | None,
                 negative_label: str | None = None) -> None:
        self.other: float | None = None  # value of a token no map knows (one-vs-rest)
        self.default = task == "classification" and positive_label is None
        self.two = (None if negative_label is None or positive_label is None
                    else (positive_label, negative_label))
        if task == "regression":
            self.maps: tuple[LabelMap, ...] = (LabelMap.regression(),)
        elif self.two is not None:
            self.maps = (LabelMap(negative=negative_label, positive=positive_label),)
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
        if self.two is not None:
            raise ParseError(f"a third label {tok.strip()!r}: the stream maps {self.two[0]!r} "
                             f"to +1 and {self.two[1]!r} to -1 (the first two labels of its "
                             "first records)")
        if self.default:
            raise ParseError(f"unknown label {tok.strip()!r}: classification labels are -1 or "
                             "0 and 1 (--positive-label names the +1 class of others)")
        assert err is not None
        raise err


class RecordParser:
    """Parsing of a stream's records, one by one or a block of values at once (see the
    module docstring); :class:`~kernelstream.engine.live.routing.StreamRouter` routes
    with it."""

    def __init__(self, spec: LiveSpec, labels: Callable[[str], float] | None = None) -> None:
        self.spec = spec
        read = spec.read
        # a label token -> y: the stream's mapping, or ``labels`` (a stream's first read
        # keeps the tokens themselves: pipelines.live.stream_width)
        self.labels: Callable[[str], float] = (
            _LabelMapping(read.task, read.positive_label, spec.negative_label)
            if labels is None else labels)
        # the read options the per-record paths test, as plain attributes (read once here)
        self._libsvm = read.fmt == "libsvm"
        self._width = spec.width
        self._hash = read.hash_features
        self._by_entity = read.key_by is not None
        self._sources: dict[tuple[str, int], str] = {}  # (topic, partition) -> source
        self._sparse = spec.sparse
        # --scale auto: x -> (x - lo) / span for every dense row, whichever path parsed it
        self._lo: np.ndarray | None = None
        self._span: np.ndarray | None = None
        width = self._width
        if read.scale_ranges is not None:
            self._lo, self._span = head_scaling(read.scale_ranges)
            width = len(self._lo)  # CSV rows too: the scaled columns
        lc = -1 if read.label_column is None else int(read.label_column)
        self._csv = (lc, read.delimiter, None if width is None else width + 1)

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
            X = self._scaled(X)
            if ok.all():
                return X, list(range(len(values))), toks
            return X, [j if good else -1 for j, good in enumerate(ok.tolist())], toks
        X = self._scaled(np.concatenate([p[2] for p in parts]))
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
        elif self._lo is not None and isinstance(x, np.ndarray):
            x = self._scaled(x)
        return x, self._label_of(tok)

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        """Dense rows (one, or a matrix of them) as the learners get them: min-max scaled by
        ``scale_ranges`` when the stream scales (elementwise, so a row comes out the same
        bits on every path)."""
        if self._lo is None:
            return X
        return (X - self._lo) / self._span

