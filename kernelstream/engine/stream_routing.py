"""The first half of a live stream's loop: parse each Kafka record once and name its models.

:class:`StreamRouter` holds the routing half of :class:`~kernelstream.engine.events.StreamEngine`
(which extends it with the per-model processing): :meth:`StreamRouter.route_many` turns a
reader call's records into the :class:`ParsedRecord` s of each model plus the dead-letter rows
of records that cannot be parsed. It lives apart from the processing because it needs no model
state at all, only the stream's :class:`StreamSpec`, and because its speed concerns (the
vectorised LIBSVM parser, halving blocks it declines) are separate from the learning ones.

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
(``source_prefix`` + ``TOPIC/PARTITION``), offset and text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from kernelstream.data import (
    LabelMap,
    ParseError,
    densify,
    parse_csv_line,
    parse_libsvm_line,
    parse_libsvm_lines,
)
from kernelstream.data.hashing import check_bits, hash_row
from kernelstream.data.libsvm import check_top_index
from kernelstream.data.options import AUTO_SPARSE_WIDTH, ROWS
from kernelstream.engine.blocks import StreamKey
from kernelstream.engine.records import SourceRecord
from kernelstream.engine.stream_rows import stream_dead_letter
from kernelstream.sparse import CSR

KEY_BY = (None, "id-prefix")
LABEL_PREFIX = "label:"
UNLABELLED = "?"
# Fewer LIBSVM feature records than this per route_many call are parsed line by line: numpy's
# fixed cost per call of the vectorised parser is about that of a few lines.
BULK_MIN = 8


@dataclass(frozen=True)
class StreamSpec:
    """Everything a worker needs to run the models of a stream (picklable).

    ``configs`` are ``LearnerConfig``-like (``.name``, ``.learner``, ``.make(seed, rep)``);
    ``source_prefix`` is put before ``TOPIC/PARTITION`` in dead letters' ``source`` (e.g.
    ``kafka://HOST:PORT/``)."""

    configs: tuple[Any, ...]
    seed: int = 0
    fmt: str = "libsvm"
    n_features: int | None = None
    label_column: int | None = None
    delimiter: str | None = ","
    task: str = "classification"
    positive_label: str | None = None
    key_by: str | None = None
    label_ttl_ms: int = 3_600_000
    metrics_window_ms: int = 60_000
    labels_topic: str | None = None
    source_prefix: str = ""
    rows: str = "auto"  # features as dense rows or 1-row CSR (data.options.ROWS)
    hash_features: int | None = None  # k: LIBSVM indices hashed into 2**k columns

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", tuple(self.configs))
        names = [c.name for c in self.configs]
        if not names:
            raise ValueError("no learner configuration given")
        if len(set(names)) != len(names):
            raise ValueError(f"configuration names given twice: {names}")
        if self.fmt not in ("libsvm", "csv"):
            raise ValueError(f"stream messages are LIBSVM or CSV lines, not {self.fmt!r}")
        if self.hash_features is not None:
            if self.fmt != "libsvm":
                raise ValueError("hash_features applies to LIBSVM messages")
            check_bits(self.hash_features)
            object.__setattr__(self, "n_features", 1 << self.hash_features)
        if self.fmt == "libsvm":
            if self.n_features is None:
                raise ValueError("LIBSVM messages need n_features (--n-features or "
                                 "--hash-features)")
            if self.label_column is not None:
                raise ValueError("label_column does not apply to LIBSVM messages")
        if self.n_features is not None and self.n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {self.n_features}")
        if self.task not in ("classification", "regression"):
            raise ValueError(f"task must be classification or regression, got {self.task!r}")
        if self.key_by not in KEY_BY:
            raise ValueError(f"key_by must be one of {KEY_BY}, got {self.key_by!r}")
        if self.label_ttl_ms < 1 or self.metrics_window_ms < 1:
            raise ValueError("label_ttl_ms and metrics_window_ms must be >= 1 ms")
        if self.rows not in ROWS:
            raise ValueError(f"rows must be one of {', '.join(ROWS)}, got {self.rows!r}")

    @property
    def sparse(self) -> bool:
        """Whether events carry 1-row CSR features: ``rows='sparse'``, or ``auto`` with LIBSVM
        messages wider than ``AUTO_SPARSE_WIDTH`` (as a file replay decides)."""
        if self.rows != "auto":
            return self.rows == "sparse"
        return self.fmt == "libsvm" and (self.n_features or 0) > AUTO_SPARSE_WIDTH

    @property
    def bulk(self) -> bool:
        """Whether the vectorised LIBSVM parser (dense rows of the raw indices) may be used."""
        return self.fmt == "libsvm" and not self.sparse and self.hash_features is None


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


class _Labels:
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

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self.labels = _Labels(spec.task, spec.positive_label)
        self._global_keys = [StreamKey(c.name, 0).encode() for c in spec.configs]
        self._entity_prefixes = [k + "@" for k in self._global_keys]
        self._sources: dict[tuple[str, int], str] = {}  # (topic, partition) -> source
        self._sparse = spec.sparse
        lc = -1 if spec.label_column is None else int(spec.label_column)
        self._csv = (lc, spec.delimiter,
                     None if spec.n_features is None else spec.n_features + 1)

    def route(self, rec: SourceRecord) -> list[tuple[str, ParsedRecord]] | dict[str, Any]:
        """Parse ``rec`` once: ``(model key, parsed)`` per model it goes to, or the dead-letter
        row of a record that cannot be parsed (:meth:`route_many` of one record)."""
        groups, dead = self.route_many((rec,))
        if dead:
            return dead[0]
        return [(k, ps[0]) for k, ps in groups.items()]

    def route_many(self, records: Iterable[SourceRecord]
                   ) -> tuple[dict[str, list[ParsedRecord]], list[dict[str, Any]]]:
        """Parse many records at once: the parsed records of each model in record order, the
        models in order of first appearance, and the dead-letter rows of the records that
        cannot be parsed (in record order). LIBSVM feature records are parsed together by the
        vectorised parser when it vouches for all of them, else line by line; either way each
        record gives what :meth:`route` gives it."""
        heads: list[list[Any] | dict[str, Any]] = [self._head(rec) for rec in records]
        feats = [i for i, h in enumerate(heads) if h.__class__ is list and h[4] is None]
        if feats:
            self._parse_features(heads, feats)
        groups: dict[str, list[ParsedRecord]] = {}
        dead: list[dict[str, Any]] = []
        for h in heads:
            if h.__class__ is dict:
                dead.append(h)  # type: ignore[arg-type]
                continue
            rec, source, text, eid, label_only, x, y, entity, _ = h
            parsed = ParsedRecord(label_only, eid, x, y, rec.topic, rec.partition, rec.offset,
                                  int(rec.timestamp_ms), text, source)
            if entity is None:
                for k in self._global_keys:
                    ps = groups.get(k)
                    if ps is None:
                        groups[k] = [parsed]
                    else:
                        ps.append(parsed)
            else:
                for pre in self._entity_prefixes:
                    groups.setdefault(pre + entity, []).append(parsed)
        return groups, dead

    def _head(self, rec: SourceRecord) -> list[Any] | dict[str, Any]:
        """What a record is, short of parsing features: its dead-letter row, or ``[rec,
        source, text, event id, label_only, x, y, entity, entity error]`` with
        ``label_only`` None for a feature record (parsed next, then the entity error, if
        any, makes it a dead letter: the errors come in :meth:`route`'s order)."""
        source = self._sources.get((rec.topic, rec.partition))
        if source is None:
            source = self._sources[(rec.topic, rec.partition)] = (
                f"{self.spec.source_prefix}{rec.topic}/{rec.partition}")
        text, eid = "", None
        try:
            if rec.value is None:
                raise ParseError("empty message (no value)")
            try:
                text = rec.value.decode("utf-8")
            except UnicodeDecodeError as e:
                text = rec.value.decode("utf-8", errors="backslashreplace")
                raise ParseError(f"undecodable bytes (not UTF-8 text at byte {e.start})"
                                 ) from None
            if not rec.key:
                raise ParseError("no event id (the message has no key)")
            try:
                eid = rec.key.decode("utf-8")
            except UnicodeDecodeError:
                raise ParseError("the event id (message key) is not UTF-8 text") from None
            entity = entity_error = None
            if self.spec.key_by is not None:
                entity, sep, _ = eid.partition("/")
                if not sep or not entity:
                    entity_error = (f"event id {eid!r} has no entity prefix (--key-by "
                                    "id-prefix wants ENTITY/ID)")
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

    def _parse_features(self, heads: list[list[Any] | dict[str, Any]],
                        feats: list[int]) -> None:
        """Parse the feature records ``heads[i]`` (``i`` in ``feats``) in place: x and y, or
        the dead-letter row."""
        bulk: list[tuple[str, np.ndarray] | None] = [None] * len(feats)
        # the bulk parser builds dense rows: not for sparse rows (wide data)
        if self.spec.bulk and len(feats) >= BULK_MIN:
            # comments and multi-line records never pass the bulk parser: leave them out
            values = [heads[i][0].value for i in feats]  # type: ignore[index]
            js = [j for j, v in enumerate(values) if b"#" not in v and b"\n" not in v]
            for j, row in zip(js, self._bulk([values[j] for j in js]), strict=True):
                bulk[j] = row
        ys: dict[str, float | ParseError | None] = {}  # label token -> y (bulk path)
        for j, i in enumerate(feats):
            h = heads[i]
            assert isinstance(h, list)
            row = bulk[j]
            try:
                if row is not None:
                    tok, x = row
                    y = ys.get(tok, ys)
                    if y is ys:
                        try:
                            y = ys[tok] = self._label_of(tok)
                        except ParseError as e:
                            y = ys[tok] = e
                    if isinstance(y, ParseError):
                        raise y
                else:
                    x, y = self._features(h[2])
            except ParseError as e:
                heads[i] = stream_dead_letter(h[1], h[0].topic, h[0].partition, h[0].offset,
                                              h[2], e.reason, event_id=h[3])
                continue
            if h[8] is not None:  # entity error
                heads[i] = stream_dead_letter(h[1], h[0].topic, h[0].partition, h[0].offset,
                                              h[2], h[8], event_id=h[3])
                continue
            h[4], h[5], h[6] = False, x, y

    def _bulk(self, values: list[bytes]) -> list[tuple[str, np.ndarray] | None]:
        """``(label token, x)`` of each LIBSVM line by the vectorised parser, None for the
        lines left to the line parser: a block it declines is halved (down to
        :data:`BULK_MIN` lines), so one bad record costs a few calls, not the block."""
        assert self.spec.n_features is not None
        if len(values) < BULK_MIN:
            return [None] * len(values)
        res = parse_libsvm_lines(values, self.spec.n_features)
        if res is not None:
            toks, X, ok = res
            return [(t, X[j]) if good else None
                    for j, (t, good) in enumerate(zip(toks, ok.tolist(), strict=True))]
        if len(values) < 2 * BULK_MIN:
            return [None] * len(values)
        h = len(values) // 2
        return self._bulk(values[:h]) + self._bulk(values[h:])

    def _label_of(self, tok: str) -> float | None:
        return None if tok.strip() == UNLABELLED else self.labels(tok)

    def _features(self, text: str) -> tuple[np.ndarray | CSR, float | None]:
        x: np.ndarray | CSR
        if self.spec.fmt == "libsvm":
            tok, idx, vals = parse_libsvm_line(text)
            d = self.spec.n_features
            assert d is not None
            k = self.spec.hash_features
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
