"""The unbounded Kafka reader of ``kernelstream stream``: a splittable DoFn over partition groups.

:class:`ReadKafkaPartitions` reads one or more events topics and an optional labels topic
(co-partitioned: the same number of partitions) with confluent-kafka (librdkafka: C decoding,
background prefetch; :mod:`kernelstream.kafka_client.confluent`) where it is installed and the
client settings translate, else kafka-python, as *partition groups*: every partition of every
topic as one element (``merge="all"``, the default), or partition ``p`` of every topic as one
(``"partition"``; :mod:`kernelstream.kafka_client.partitions`). A group's records are merged by
``(timestamp, index in the group, offset)`` (:mod:`kernelstream.engine.live.merge`), so a
model fed by one group sees its records in an order the topic contents alone decide.

Restriction: :class:`GroupRestriction`, the next offset of each partition of the group and,
for a bounded read, the offsets to stop before (``stop``), else an open end. Its tracker
claims *positions* ``(partition index, next offset)``: a record at offset ``o`` claims
``o + 1``, and offsets without records (transaction markers, compacted records) are claimed
when the consumer moves past them. A checkpoint (``try_split(0)``) leaves the primary ending
at the claimed positions and a residual that continues from them.

Each ``process()`` call, on a consumer cached per group by the DoFn instance (no consumer
group: partitions are ``assign()``ed and sought), runs rounds: one ``poll`` that blocks while
the group is idle (the FnApiRunner reruns a deferred residual at once, ignoring its delay, so
the wait must be here), then the merge's ready records (at most ``max_records``) with their
Kafka timestamps (one element each, or all of them as one :class:`RecordBatch` with
``batch_records``: Beam's per-element cost then comes once per round), then a
:class:`ReadProgress` per partition on the ``progress`` output. With ``call_ms`` 0 a call is
one round; otherwise rounds go on for ``call_ms`` (or until ``call_records`` records), and
the call then defers the remainder.
A fused downstream DoFn handles each element as it is emitted, so a long call adds no
latency, while the costs Beam has per bundle (state commits, its state sampler's thread, the
downstream ``finish_bundle`` s) come once per call; a fused ``finish_bundle`` sees the
records and the progress covering them. The watermark follows the
released records' timestamps (the oldest partition's newest record); a caught-up partition
counts as wall-clock time minus ``idle_watermark_lag_ms``, so event-time timers fire while
the stream is quiet. Caught up needs a high watermark the broker confirmed after the last
lost connection (:mod:`kernelstream.kafka_client.group_reader`), so while the broker is
unreachable the watermark stays where the records put it. (The FnApiRunner, measured on
Beam 2.77, does not use this watermark: a DoFn fused after the reader sees its event-time
timers fire right after the bundle that set them, whatever their time, because that stage's
input is the finished ``Impulse``.)

Stopping: a bounded read (``stop_offsets``) ends when every partition is claimed up to its
stop, however fast producers keep writing. An unbounded read ends on *drain*:
:func:`request_drain` (the CLI's signal handler calls it; same process as the SDK harness:
the FnApiRunner and LOOPBACK workers) or the file ``drain_path`` appearing (any worker that
sees the path, e.g. an EXTERNAL worker pool on the same machine). A drain is a checkpoint,
not a flush: the next round releases nothing more, emits the progress of the positions
claimed so far and finishes its restriction there without residual, so the pipeline ends.
Records fetched but held back by the merge stay unclaimed: the run that resumes from those
positions reads them again, in the order an uninterrupted read would have released them (as
after a kill). Releasing them at the drain instead would put, e.g., a label before the event
it labels that was not fetched yet: a dead letter for good.
"""

from __future__ import annotations

import math
import operator
import os
import pickle
import threading
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp

from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.offsets import Fingerprint
from kernelstream.kafka_client.confluent import KAFKA_CLIENTS, reader_consumer
from kernelstream.kafka_client.group_reader import GroupReader
from kernelstream.kafka_client.partitions import (
    MERGES,
    PartitionGroup,
    kafka_partition_info,
    partition_groups,
)
from kernelstream.transforms.live.kafka_restriction import (
    FINISH,
    GroupRestriction,
    GroupRestrictions,
    GroupWatermarks,
)

# re-exported: the reader's restriction is part of its interface (tests, runners' coders)
from kernelstream.transforms.live.kafka_restriction import (
    GroupRestrictionCoder as GroupRestrictionCoder,
)
from kernelstream.transforms.live.kafka_restriction import GroupTracker as GroupTracker

PROGRESS_TAG = "progress"
_TIMESTAMP = operator.itemgetter(3)  # SourceRecord.timestamp_ms

_DRAIN = threading.Event()
DRAIN_CHECK_S = 0.02  # how often a reader looks for the drain file (see _ReadGroups._draining)


def request_drain() -> None:
    """Ask every reader of this process to finish at the positions it has claimed and end."""
    _DRAIN.set()


def drain_requested() -> bool:
    return _DRAIN.is_set()


def clear_drain() -> None:
    """Forget a drain request (before another run in the same process)."""
    _DRAIN.clear()


class RecordBatch(NamedTuple):
    """The records one reader call released, in the group's merge order (``batch_records``):
    one element instead of one per record, so what follows pays Beam's per-element cost once
    per call. Its element timestamp is the smallest record timestamp."""

    records: list[SourceRecord]


class Batched:
    """Type hint of batch elements (:class:`RecordBatch` es and what a stream makes of them:
    a model's parsed records, items holding row lists): their coder is :class:`BatchCoder`."""


class BatchCoder(beam.coders.Coder):
    """Batches between DoFns: pickled where a runner moves them (in the fused stage of the
    direct runner nothing is encoded) and sized by a fixed guess. Beam samples element sizes
    for its metrics by encoding elements (the first ten of every PCollection, then fewer);
    for a thousand parsed records that is ~10 ms of pickling feature vectors, a fifth of the
    time learning them takes."""

    def _create_impl(self) -> Any:
        from apache_beam.coders.coder_impl import CallbackCoderImpl

        return CallbackCoderImpl(_pickle_dumps, pickle.loads, _batch_size_guess)

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self) -> Any:
        return Batched

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


def _pickle_dumps(value: Any) -> bytes:
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def _batch_size_guess(value: Any) -> int:
    return 1 << 16


beam.coders.registry.register_coder(Batched, BatchCoder)


class ReadProgress(NamedTuple):
    """After a reader's round: the next offset to read of ``topic``/``partition``; every record
    before it has been emitted (a snapshot's source offset). A round emits one per partition
    of its group; ``last`` marks the group's last one, after which the offsets of every
    partition of the group cover what the round emitted (a consistent cut). ``records``: the
    records the round emitted, on its last progress (0 on the others); offsets without a
    record (transaction markers, aborted or compacted records) are not records.
    ``highwater``: the partition's high watermark in the reader's last fetch response (None
    before one), so ``highwater - next_offset`` records are on the broker and not read yet.
    ``broker_reachable``: whether the reader's consumer hears from the broker (False from a
    lost connection until a fetch result after it). ``last_record``: the
    :class:`~kernelstream.engine.offsets.Fingerprint` of the last record emitted of the
    partition by this reader (None before the first), which a snapshot keeps to detect a
    recreated topic at a resume."""

    topic: str
    partition: int
    next_offset: int
    last: bool = True
    records: int = 0
    highwater: int | None = None
    broker_reachable: bool = True
    last_record: Fingerprint | None = None


# -- restriction: kernelstream.transforms.live.kafka_restriction ----------------------------------

_TRACKER = beam.DoFn.RestrictionParam(GroupRestrictions())
_WATERMARK = beam.DoFn.WatermarkEstimatorParam(GroupWatermarks())


# -- the splittable DoFn ------------------------------------------------------------------------


class _ReadGroups(beam.DoFn):
    """Reads partition groups (elements: :class:`PartitionGroup`); bounded restrictions."""

    def __init__(self, bootstrap: str, client: tuple[tuple[str, str], ...], poll_timeout_ms: int,
                 max_records: int, merge_idle_ms: int, idle_watermark_lag_ms: int,
                 drain_path: str | None, progress_in_records: bool = False,
                 batch_records: bool = False, call_ms: int = 0,
                 call_records: int = 0, kafka_client: str = "auto",
                 poll_linger_ms: int = 0) -> None:
        self.bootstrap, self.client, self.kafka_client = bootstrap, client, kafka_client
        self.poll_linger_ms = poll_linger_ms
        self.call_ms, self.call_records = call_ms, call_records
        self.progress_in_records = progress_in_records
        self.batch_records = batch_records
        self.poll_timeout_ms, self.max_records = poll_timeout_ms, max_records
        self.merge_idle_ms, self.idle_lag_ms = merge_idle_ms, idle_watermark_lag_ms
        self.drain_path = drain_path
        self._drain_checked, self._drain_seen = -math.inf, False
        self._readers: dict[tuple[int, tuple[str, ...], int], GroupReader] = {}

    def setup(self) -> None:
        self._readers = {}
        self._drain_checked, self._drain_seen = -math.inf, False

    def teardown(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers = {}

    def _draining(self) -> bool:
        if drain_requested():
            return True
        if self.drain_path is None:
            return False
        # the drain file is looked for at most every DRAIN_CHECK_S, not every round: a stat
        # per round (hundreds a second at live rates) for a request that is never urgent
        now = time.monotonic()
        if now - self._drain_checked >= DRAIN_CHECK_S:
            self._drain_checked = now
            self._drain_seen = os.path.exists(self.drain_path)
        return self._drain_seen

    def process(self, group: PartitionGroup,
                tracker: Any = _TRACKER, watermark: Any = _WATERMARK,
                ) -> Iterator[Any]:
        yield from self._read(group, tracker, watermark)

    @staticmethod
    def reader_key(group: PartitionGroup) -> tuple[int, tuple[str, ...], int]:
        """What names ``group``'s cached reader: its partitions (not where it starts)."""
        return (group.partition, tuple(group.topics), group.n_partitions)

    def _read(self, group: PartitionGroup, tracker: Any, watermark: Any) -> Iterator[Any]:
        rest: GroupRestriction = tracker.current_restriction()
        cache_key = self.reader_key(group)
        reader = self._readers.get(cache_key)
        if reader is None:
            # resolved here, on the worker: "auto" takes confluent-kafka where it imports
            try:
                consumer = reader_consumer(self.bootstrap, self.client, self.kafka_client)
            except ConnectionError:
                # kafka-python's consumer needs the broker to be made: in an outage this
                # call only says so (its progress) and the next one tries again
                yield from self._unreachable(group, rest, tracker, watermark)
                return
            reader = GroupReader(group, consumer,
                                  self.merge_idle_ms)
            self._readers[cache_key] = reader
        reader.sync(rest.start)
        assert reader.claimed is not None
        claimed = reader.claimed
        stop = rest.stop
        # several groups of this instance run in turn: they share the poll and call budgets
        share = max(1, len(self._readers))
        budget = max(0.01, self.poll_timeout_ms / 1000.0 / share)
        call_end = time.monotonic() + self.call_ms / 1000.0 / share
        n_call = 0
        while True:
            draining = self._draining()
            if draining:
                # a drain is a checkpoint: records the merge holds back stay unclaimed (a
                # restart reads them again, as after a kill), since releasing them early would
                # put them before records not fetched yet (a label before its event)
                out = []
            else:
                now = time.monotonic()
                out = reader.ready(stop, now, self.max_records)
                if len(out) < self.max_records:
                    wait = 0.0 if out else reader.wait_s(budget, now)
                    if self.call_ms:
                        wait = min(wait, max(0.001, call_end - now))
                    reader.fetch(wait, stop, self.max_records, self.poll_linger_ms / 1000.0)
                    out += reader.ready(stop, time.monotonic(), self.max_records - len(out))
            split_away = yield from self._emit(reader, out, claimed, stop, tracker, watermark)
            n_call += len(out)
            if split_away:
                reader.claimed = None  # the merge gave out records nobody emitted: seek next
                return
            finished = GroupRestriction(tuple(claimed), stop).done()
            if draining and not finished:
                tracker.try_claim(FINISH)
            if draining or finished:
                reader.close()
                del self._readers[cache_key]
                return
            if time.monotonic() >= call_end or 0 < self.call_records <= n_call:
                break
        tracker.defer_remainder()

    def _unreachable(self, group: PartitionGroup, rest: GroupRestriction, tracker: Any,
                     watermark: Any) -> Iterator[Any]:
        """No consumer (the broker unreachable when it was made): progress at the start
        offsets, ``broker_reachable`` False, then defer (or finish, when draining)."""
        wm = watermark.current_watermark()
        wm = MIN_TIMESTAMP if wm is None else wm
        keys = group.partitions
        for i, ((topic, p), off) in enumerate(zip(keys, rest.start, strict=True)):
            item = TimestampedValue(ReadProgress(topic, p, off, i == len(keys) - 1,
                                                 broker_reachable=False), wm)
            yield item if self.progress_in_records else beam.pvalue.TaggedOutput(PROGRESS_TAG,
                                                                                 item)
        if self._draining():
            tracker.try_claim(FINISH)
        else:
            tracker.defer_remainder()

    def _emit(self, reader: GroupReader, out: list[SourceRecord], claimed: list[int],
              stop: Sequence[int] | None, tracker: Any, watermark: Any
              ) -> Generator[Any, None, bool]:
        """Claim and emit ``out`` (one element each, or one :class:`RecordBatch`), claim the
        offsets without records behind them, and emit the progress; True when the runner
        split the restriction away meanwhile."""
        split_away = False
        emitted = 0
        if self.batch_records:
            batch, split_away = self._claim_runs(reader, out, claimed, tracker)
            emitted = len(batch)
            if batch:
                oldest = min(map(_TIMESTAMP, batch))
                yield TimestampedValue(RecordBatch(batch), Timestamp(micros=oldest * 1000))
        else:
            for rec in out:
                i = reader.index[(rec.topic, rec.partition)]
                if not tracker.try_claim((i, rec.offset + 1)):
                    split_away = True  # the runner split the restriction meanwhile
                    break
                claimed[i] = rec.offset + 1
                reader.last[i] = rec
                prev = reader.newest_ts[i]
                reader.newest_ts[i] = (rec.timestamp_ms if prev is None
                                       else max(prev, rec.timestamp_ms))
                emitted += 1
                yield TimestampedValue(rec, Timestamp(micros=rec.timestamp_ms * 1000))
        if not split_away:
            # offsets without records (markers, compacted away, past a stop) behind an empty
            # buffer are claimed too, so progress and stops move past them
            for i, key in enumerate(reader.keys):
                target = reader.fetched[i] if stop is None else min(reader.fetched[i], stop[i])
                if target > claimed[i] and reader.merger.buffered(key) == 0:
                    if not tracker.try_claim((i, target)):
                        split_away = True
                        break
                    claimed[i] = target
        self._advance_watermark(reader, stop, watermark)
        wm = watermark.current_watermark()
        wm = MIN_TIMESTAMP if wm is None else wm
        final = len(reader.keys) - 1
        reachable = reader.broker_reachable
        for i, ((topic, p), off) in enumerate(zip(reader.keys, claimed, strict=True)):
            item = TimestampedValue(ReadProgress(topic, p, off, i == final,
                                                 emitted if i == final else 0,
                                                 reader.highwater[i], reachable,
                                                 reader.fingerprint(i)), wm)
            yield item if self.progress_in_records else beam.pvalue.TaggedOutput(PROGRESS_TAG,
                                                                                 item)
        return split_away

    @staticmethod
    def _claim_runs(reader: GroupReader, out: list[SourceRecord], claimed: list[int],
                    tracker: Any) -> tuple[list[SourceRecord], bool]:
        """Claim ``out`` a run at a time (consecutive records of one partition: one claim
        of the run's last offset, not one per record) and return the records claimed, a
        prefix of ``out`` in merge order, and whether the runner split the restriction
        away meanwhile (a split lands between claims, so between runs)."""
        n = len(out)
        j = 0
        while j < n:
            first = out[j]
            topic, part = first.topic, first.partition
            k = n if len(reader.keys) == 1 else j + 1
            while k < n and out[k].partition == part and out[k].topic == topic:
                k += 1
            i = reader.index[(topic, part)]
            nxt = out[k - 1].offset + 1
            if not tracker.try_claim((i, nxt)):
                return out[:j], True
            claimed[i] = nxt
            reader.last[i] = out[k - 1]
            newest = max(map(_TIMESTAMP, out[j:k]) if k - j < n else map(_TIMESTAMP, out))
            prev = reader.newest_ts[i]
            reader.newest_ts[i] = newest if prev is None else max(prev, newest)
            j = k
        return out, False

    def _advance_watermark(self, reader: GroupReader, stop: Sequence[int] | None,
                           watermark: Any) -> None:
        """The oldest partition's newest record timestamp; a caught-up partition counts as
        now minus the idle lag. Never backwards, and not while the broker is unreachable
        (no partition is caught up then: nothing confirms it)."""
        if not reader.broker_reachable:
            return
        up = reader.caught_up(stop, time.monotonic())
        idle_ms = int(time.time() * 1000) - self.idle_lag_ms
        marks = []
        for i, key in enumerate(reader.keys):
            ts = reader.newest_ts[i]
            if key in up:
                ts = idle_ms if ts is None else max(ts, idle_ms)
            if ts is None:
                return  # a partition with nothing read yet and not caught up: no estimate
            marks.append(ts)
        mark = Timestamp(micros=min(marks) * 1000)
        current = watermark.current_watermark()
        if current is None or mark > current:
            watermark.set_watermark(mark)


class _ReadGroupsUnbounded(_ReadGroups):
    """Reads partition groups without stop offsets (an unbounded output)."""

    @beam.DoFn.unbounded_per_element()
    def process(self, group: PartitionGroup,
                tracker: Any = _TRACKER, watermark: Any = _WATERMARK,
                ) -> Iterator[Any]:
        yield from self._read(group, tracker, watermark)


class _ListGroups(beam.DoFn):
    """Impulse → the partition groups, their start offsets checked against the log."""

    def __init__(self, bootstrap: str, topics: tuple[str, ...],
                 client: tuple[tuple[str, str], ...],
                 start: dict[tuple[str, int], int] | None,
                 stop: dict[tuple[str, int], int] | None, merge: str) -> None:
        self.bootstrap, self.topics, self.client = bootstrap, topics, client
        self.start, self.stop, self.merge = start, stop, merge

    def process(self, _: Any) -> Iterator[PartitionGroup]:
        info = kafka_partition_info(self.bootstrap, self.topics, self.client)
        yield from partition_groups(info, self.topics, self.start, self.stop, self.merge)


class KafkaReadOutputs(NamedTuple):
    """``records``: :class:`~kernelstream.engine.live.records.SourceRecord` s, timestamped with
    their Kafka timestamps (or a :class:`RecordBatch` per reader call); ``progress``:
    :class:`ReadProgress` after each reader call."""

    records: beam.PCollection
    progress: beam.PCollection


class ReadKafkaPartitions(beam.PTransform):
    """``PBegin`` → the records of ``topics`` (events topics, then ``labels_topic``) by
    partition group (see the module docstring) and the reader's progress.

    ``merge``: ``"all"`` reads every partition as one group, merged into one timestamp order;
    ``"partition"`` reads partition ``p`` of every topic as a group, the groups in turn
    (:mod:`kernelstream.kafka_client.partitions` says when each is right).
    ``start_offsets``: ``{(topic, partition): next offset}`` (a snapshot's), else each
    partition's beginning; an offset outside the log raises
    :class:`~kernelstream.engine.offsets.OffsetOutOfLog`. ``stop_offsets``: a bounded read
    up to these offsets (one for every partition; e.g. the end offsets of
    :func:`~kernelstream.kafka_client.kafka_partition_info` when the run starts), else an
    unbounded read until drained (:func:`request_drain` or ``drain_path`` existing).
    ``client``: kafka-python consumer settings (``KEY=VALUE`` pairs of
    :func:`~kernelstream.kafka_client.client_settings`). ``kafka_client``: the readers'
    consumer (:func:`~kernelstream.kafka_client.confluent.reader_consumer`): ``auto``
    (confluent-kafka where it imports and the settings translate, else kafka-python),
    ``confluent`` or ``kafka-python``. ``poll_timeout_ms``: how long an idle
    reader blocks per call (shared by the groups of one worker); ``max_records``: at most
    this many records per call; ``merge_idle_ms``: how long an empty partition of a group must
    stay caught up before the others' records pass it (see
    :mod:`kernelstream.engine.live.merge`). ``progress_in_records``: the progress goes into the
    records output, after the records it covers (``progress`` is then empty): one
    PCollection for a consumer that needs both in order, without a ``Flatten`` (the
    FnApiRunner breaks fusion at a Flatten, and a stage after the unbounded read never
    runs). ``batch_records``: one :class:`RecordBatch` per round instead of one element per
    record (the progress still follows it). ``call_ms``: how long a call goes on reading
    (rounds) before it defers the remainder, i.e. how long a bundle lasts (shared by the
    groups of one worker); 0: one round per call. ``call_records``: a call also ends once it
    has emitted this many records (0: no limit), e.g. so that a downstream snapshot every N
    records can happen at a bundle's end. ``poll_linger_ms``: a round that had to wait for
    its first record waits up to this long more for others to come with it (confluent-kafka
    reader only): fewer, larger rounds (less CPU a record at live rates), each record later
    by up to that much; 0: a round takes what came with its first record."""

    def __init__(self, bootstrap: str, topics: Sequence[str], labels_topic: str | None = None,
                 start_offsets: Mapping[tuple[str, int], int] | None = None,
                 stop_offsets: Mapping[tuple[str, int], int] | None = None,
                 client: tuple[tuple[str, str], ...] = (), poll_timeout_ms: int = 200,
                 max_records: int = 1000, merge_idle_ms: int = 50,
                 idle_watermark_lag_ms: int = 1000, drain_path: str | None = None,
                 progress_in_records: bool = False, batch_records: bool = False,
                 call_ms: int = 0, call_records: int = 0, kafka_client: str = "auto",
                 merge: str = "all", poll_linger_ms: int = 0) -> None:
        super().__init__()
        if merge not in MERGES:
            raise ValueError(f"merge {merge!r}: expected one of {', '.join(MERGES)}")
        self.merge = merge
        if isinstance(topics, str) or not topics:
            raise ValueError("ReadKafkaPartitions needs a sequence of one or more topics")
        all_topics = (*topics, *([labels_topic] if labels_topic else []))
        if len(set(all_topics)) != len(all_topics):
            raise ValueError(f"a topic is given twice: {list(all_topics)}")
        if (poll_timeout_ms < 1 or max_records < 1
                or min(merge_idle_ms, call_ms, call_records, poll_linger_ms) < 0):
            raise ValueError("poll_timeout_ms and max_records must be >= 1, merge_idle_ms, "
                             "call_ms, call_records and poll_linger_ms >= 0")
        if kafka_client not in KAFKA_CLIENTS:
            raise ValueError(f"kafka_client {kafka_client!r}: expected one of "
                             f"{', '.join(KAFKA_CLIENTS)}")
        self.kafka_client = kafka_client
        self.bootstrap, self.topics, self.client = bootstrap, tuple(all_topics), tuple(client)
        self.start = None if start_offsets is None else dict(start_offsets)
        self.stop = None if stop_offsets is None else dict(stop_offsets)
        self.poll_timeout_ms, self.max_records = poll_timeout_ms, max_records
        self.merge_idle_ms, self.idle_lag_ms = merge_idle_ms, idle_watermark_lag_ms
        self.drain_path = drain_path
        self.progress_in_records = progress_in_records
        self.batch_records = batch_records
        self.call_ms, self.call_records = call_ms, call_records
        self.poll_linger_ms = poll_linger_ms

    def expand(self, pbegin: beam.pvalue.PBegin) -> KafkaReadOutputs:
        cls = _ReadGroups if self.stop is not None else _ReadGroupsUnbounded
        dofn = cls(self.bootstrap, self.client, self.poll_timeout_ms, self.max_records,
                   self.merge_idle_ms, self.idle_lag_ms, self.drain_path,
                   self.progress_in_records, self.batch_records, self.call_ms,
                   self.call_records, self.kafka_client, self.poll_linger_ms)
        out = (pbegin
               | "Impulse" >> beam.Impulse()
               | "ListGroups" >> beam.ParDo(_ListGroups(self.bootstrap, self.topics,
                                                        self.client, self.start, self.stop,
                                                        self.merge))
               | "ReadGroups" >> (beam.ParDo(dofn).with_output_types(Batched)
                                  if self.batch_records else beam.ParDo(dofn)
                                  ).with_outputs(PROGRESS_TAG, main="records"))
        return KafkaReadOutputs(out.records, out[PROGRESS_TAG])
