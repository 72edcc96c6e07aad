"""A Kafka topic's records → :class:`~kernelstream.engine.replay.blocks.Block` s and dead letters,
as the file readers make them, so everything downstream of a replay is the same.

:class:`KafkaBlocks` serves the Beam source (``transforms.replay.kafka``) and the loop runner alike;
it is kept apart from the read (:mod:`kernelstream.kafka_client.bounded`) because this is the
part that knows the message formats, the label mapping and the row identities, and it also
records where a read ended (:class:`SourcePosition`) so a checkpointed run continues there.

The message formats, the order of records, what a single pass cannot know and the row ids
are described in the package's docstring (:mod:`kernelstream.kafka_client`, "Reading").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernelstream.data import ParseError, densify
from kernelstream.data.hashing import hash_row
from kernelstream.data.labels import StreamLabels
from kernelstream.data.libsvm import check_top_index
from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import ParsedRow, TextFormat
from kernelstream.data.scaling import head_scaling
from kernelstream.engine.deadletters import dead_letter
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.replay.blocks import Block
from kernelstream.kafka_client.bounded import KafkaReadOptions, KafkaRecord, iter_topic_records
from kernelstream.kafka_client.clients import KafkaTopic
from kernelstream.sparse import CSR

MESSAGE_KEY = "key"  # ``key_by`` value naming the Kafka message key as the entity
ID_PARTITION_SHIFT = 48  # row id = partition << 48 | offset


@dataclass
class SourcePosition:
    """Where a read of a topic ended, so the next run continues exactly there: the next offset
    of every partition, the next stream position of every entity (None: the one stream
    without ``key_by``), the label classes in the order they were admitted and the feature
    dimension. Plain JSON (a checkpoint's ``source.json``)."""

    topic: str
    offsets: dict[int, int] = field(default_factory=dict)
    positions: dict[str | None, int] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    n_features: int | None = None

    VERSION = 1

    def to_json(self) -> dict[str, Any]:
        return {"version": self.VERSION, "topic": self.topic,
                "offsets": [[p, o] for p, o in sorted(self.offsets.items())],
                "positions": [[e, n] for e, n in self.positions.items()],
                "labels": list(self.labels), "n_features": self.n_features}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SourcePosition:
        if doc.get("version") != cls.VERSION:
            raise ValueError(f"unsupported source position version {doc.get('version')!r}")
        return cls(str(doc["topic"]), {int(p): int(o) for p, o in doc["offsets"]},
                   {e: int(n) for e, n in doc["positions"]}, [str(c) for c in doc["labels"]],
                   None if doc["n_features"] is None else int(doc["n_features"]))


@dataclass
class _Rows:
    start: int = 0
    ids: list[int] = field(default_factory=list)
    X: list[Any] = field(default_factory=list)  # dense rows, or (0-based columns, values)
    y: list[float] = field(default_factory=list)


def text_format_for(read: ReadOptions) -> TextFormat:
    """The line format of the topic's messages: ``read.fmt``, LIBSVM by default (a stream
    cannot be sniffed reliably: its first message may be a bad one). CSV: delimiter
    ``read.delimiter``, default ``,``."""
    fmt = read.fmt or "libsvm"
    if fmt == "libsvm":
        if read.label_column is not None:
            raise ValueError("label_column does not apply to LIBSVM messages")
        if read.key_by not in (None, MESSAGE_KEY):
            raise ValueError("key_by of LIBSVM messages can only be 'key' (the message key)")
        if read.n_features is None and read.hash_features is None:
            raise ValueError("LIBSVM messages need n_features (--n-features) or hashed "
                             "features (--hash-features): a topic is read once, so the "
                             "dimension cannot be taken from a scan")
        return TextFormat("libsvm")
    if fmt != "csv":
        raise ValueError(f"Kafka messages are LIBSVM or CSV lines, not {fmt!r}")
    delim = read.delimiter or ","
    for what, col in (("label_column", read.label_column), ("key_by", read.key_by)):
        if isinstance(col, str) and not (what == "key_by" and col == MESSAGE_KEY):
            raise ValueError(f"{what} of CSV messages is a 0-based column position (messages "
                             f"have no header), got {col!r}")
    lc = -1 if read.label_column is None else int(read.label_column)
    kc = read.key_by if isinstance(read.key_by, int) else None
    if kc is not None and lc < 0:
        raise ValueError("with a CSV key column give the label column as a position >= 0")
    if kc is not None and kc == lc:
        raise ValueError("the key_by column cannot be the label column")
    return TextFormat("csv", delim, lc, kc, None, None)


class KafkaBlocks:
    """Records → blocks of every configuration's stream(s) and dead-letter rows (used by the
    Beam source and by the loop runner). Rows are CSR or dense by ``read.sparse_rows`` of the
    width (``n_features``, or ``2**hash_features`` with hashing), as in a file replay."""

    def __init__(self, topic: KafkaTopic, read: ReadOptions, configs: Sequence[str],
                 block_size: int, resume: SourcePosition | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.topic, self.read, self.configs, self.B = topic, read, tuple(configs), block_size
        self.labels = StreamLabels(read.task, read.positive_label)
        self.tf = text_format_for(read)  # bad options fail here, before any record
        self.hash = read.hash_features
        self.d = (1 << self.hash) if self.hash is not None else read.n_features
        self.lo: np.ndarray | None = None  # --scale auto: x -> (x - lo) / span, dense rows
        if read.scale_ranges is not None:
            self.lo, self.span = head_scaling(read.scale_ranges)
        self.rows: dict[str | None, _Rows] = {}
        self.offsets: dict[int, int] = {}  # next offset of each partition
        self.examples = 0
        self.records = 0
        if resume is not None:
            if resume.topic != topic.topic:
                raise ValueError(f"the checkpoint is of topic {resume.topic!r}, not "
                                 f"{topic.topic!r}")
            if self.d is not None and resume.n_features not in (None, self.d):
                raise ValueError(f"the checkpoint has {resume.n_features} features, not "
                                 f"{self.d}")
            for c in resume.labels:  # the same classes, admitted in the same order
                self.labels(c)
            self.d = resume.n_features if resume.n_features is not None else self.d
            self.offsets = dict(resume.offsets)
            self.rows = {e: _Rows(start=n) for e, n in resume.positions.items()}

    def position(self) -> SourcePosition:
        """Where the records given so far end (see :class:`SourcePosition`)."""
        return SourcePosition(self.topic.topic, dict(self.offsets),
                              {e: r.start + len(r.ids) for e, r in self.rows.items()},
                              list(self.labels.classes), self.d)

    def source(self, partition: int) -> str:
        return f"{self.topic.url}/{partition}"

    @property
    def full(self) -> bool:
        return self.read.limit is not None and self.examples >= self.read.limit

    def add(self, rec: KafkaRecord) -> Iterator[Block | dict[str, Any]]:
        """The blocks completed by ``rec`` and its dead letter, if it is one."""
        self.records += 1
        self.offsets[rec.partition] = rec.offset + 1
        text, example = self.parse(rec)
        if isinstance(example, ParseError):
            yield dead_letter(self.source(rec.partition), rec.offset, text, example.reason)
            return
        entity, y, x, _ = example
        r = self.rows.setdefault(entity, _Rows())
        r.ids.append((rec.partition << ID_PARTITION_SHIFT) | rec.offset)
        r.X.append(x)
        r.y.append(y)
        self.examples += 1
        if len(r.ids) >= self.B:
            yield from self._emit(entity, r)

    def parse(self, rec: KafkaRecord) -> tuple[str, tuple[str | None, float, Any, ParsedRow]
                                                | ParseError]:
        """The text of ``rec`` and its example: ``(entity, label, row as the learners get it,
        the parsed row)``, or the :class:`ParseError` that makes it a dead letter. Admits its
        label class and (CSV) fixes the width, as the run does."""
        raw = rec.value if rec.value is not None else b""
        text, row = self.tf.parse(rec.offset, raw)
        try:
            if row is None:
                raise ParseError("no example in the message (a comment line)")
            if isinstance(row, ParseError):
                raise row
            entity = self._entity(rec, row)
            y = self.labels(row.label)
            x = self._row(row)
        except ParseError as e:
            return text, e
        return text, (entity, y, x, row)

    def _row(self, row: ParsedRow) -> Any:
        """The row as the learners get it: dense, or ``(columns, values)`` for CSR blocks."""
        if row.idx is None:  # CSV: the first valid row fixes the (unhashed) width
            n = int(row.vals.shape[0])
            if self.hash is None:
                if self.d is None:
                    self.d = n
                if n != self.d:
                    raise ParseError(f"wrong number of columns: {n} features, expected {self.d}")
            elif self.read.n_features is not None and n != self.read.n_features:
                raise ParseError(f"wrong number of columns: {n} features, expected "
                                 f"{self.read.n_features}")
            cols = np.arange(n, dtype=np.int64)
        else:
            check_top_index(row.idx, self.read.n_features)
            cols = row.idx - 1
        assert self.d is not None
        if self.hash is not None:
            cols, vals = hash_row(cols, row.vals, self.hash)
        else:
            vals = row.vals
        if self.read.sparse_rows(self.d):
            keep = vals != 0  # CSV zeros are no non-zeros
            return (cols[keep], vals[keep]) if row.idx is None else (cols, vals)
        x = row.vals if row.idx is None and self.hash is None else densify(cols + 1, vals,
                                                                          self.d)
        if self.lo is None:
            return x
        if len(x) != len(self.lo):
            raise ParseError(f"wrong number of columns: {len(x)} features, expected "
                             f"{len(self.lo)} (the scaled columns)")
        return (np.asarray(x, dtype=np.float64) - self.lo) / self.span

    def _entity(self, rec: KafkaRecord, row: ParsedRow) -> str | None:
        if self.read.key_by == MESSAGE_KEY:
            if rec.key is None:
                raise ParseError("the message has no key (key_by='key': one model per key)")
            try:
                return rec.key.decode("utf-8")
            except UnicodeDecodeError:
                raise ParseError("the message key is not UTF-8 text") from None
        return row.entity

    def _emit(self, entity: str | None, r: _Rows) -> Iterator[Block]:
        n = len(r.ids)
        ids, y = np.asarray(r.ids, dtype=np.int64), np.asarray(r.y)
        X: np.ndarray | CSR
        if isinstance(r.X[0], tuple):
            counts = np.fromiter((len(c) for c, _ in r.X), np.int64, count=n)
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            X = CSR(indptr, np.concatenate([c for c, _ in r.X]).astype(np.int64),
                    np.concatenate([v for _, v in r.X]).astype(np.float64), int(self.d or 1))
        else:
            X = np.array(r.X)
        for c in self.configs:
            yield Block(StreamKey(c, 0, entity).encode(), r.start, ids, X, y)
        r.start += n
        r.ids, r.X, r.y = [], [], []

    def flush(self) -> Iterator[Block]:
        """The last, partial block of every stream."""
        for entity, r in self.rows.items():
            if r.ids:
                yield from self._emit(entity, r)

    def run(self, records: Iterator[KafkaRecord]) -> Iterator[Block | dict[str, Any]]:
        """Every block and dead letter of ``records`` (stops at ``read.limit`` examples)."""
        for rec in records:
            if self.full:
                break
            yield from self.add(rec)
        yield from self.flush()

    def read_topic(self, opts: KafkaReadOptions) -> Iterator[Block | dict[str, Any]]:
        """:meth:`run` over the topic's records (:func:`iter_topic_records`)."""
        records = iter_topic_records(opts, merge=self.read.key_by is None, start=self.offsets)
        try:
            yield from self.run(records)
        finally:
            records.close()  # closes the consumer when the limit stops the read early


def head_rows(opts: KafkaReadOptions, read: ReadOptions, limit: int,
              rejected: dict[str, int] | None = None) -> tuple[list[ParsedRow], int]:
    """The first ``limit`` examples a fresh replay of the topic (``opts``, bounded by its
    ``stop`` snapshot) will learn, as parsed rows, and the number of records read for
    them: read from the topic's beginning by the replay's own reader and parser
    (:class:`KafkaBlocks`: a record it would dead-letter is skipped, not counted), the
    partitions merged by ``(timestamp, partition, offset)`` even with ``key_by`` (whose run
    interleaves them as they arrive), so the rows depend on the topic's contents alone.
    What ``gamma=auto`` of a topic replay is estimated from
    (``pipelines.replay.topic_head.topic_head``). ``rejected``: counts the skipped records
    by their dead letters' reason."""
    blocks = KafkaBlocks(opts.topic, read, (), 1)
    records = iter_topic_records(opts, merge=True)
    rows: list[ParsedRow] = []
    n = 0
    try:
        for rec in records:
            n += 1
            _, example = blocks.parse(rec)
            if isinstance(example, ParseError):
                if rejected is not None:
                    rejected[example.reason] = rejected.get(example.reason, 0) + 1
                continue
            rows.append(example[3])
            if len(rows) >= limit:
                break
    finally:
        records.close()
    return rows, n


def check_read_options(read: ReadOptions) -> None:
    """Reject the file-reading options a single pass over a stream cannot honour."""
    if read.scale != "none" and read.scale_ranges is None:
        raise ValueError("min-max scaling needs the whole data set; a Kafka topic is read once "
                         "(scale the features before producing them, use --scale none, or "
                         "--scale auto: the ranges of its first rows when they differ a lot)")
    if read.scale_target != "none":
        raise ValueError("target scaling needs the whole data set; a Kafka topic is read once")
    if read.fmt not in (None, "libsvm", "csv"):
        raise ValueError(f"Kafka messages are LIBSVM or CSV lines, not {read.fmt!r}")
    if read.header:
        raise ValueError("Kafka messages are rows without a header")

