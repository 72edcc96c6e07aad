"""The partitions of a live stream's topics: their offset ranges and the partition groups the
unbounded reader (``transforms/live/kafka_read.py``) reads together.

A stream joins events and labels by partition number, so every input topic must have the same
partitions. A group is what one reader merges into one order (by timestamp:
:mod:`kernelstream.engine.live.merge`), with the offset each of its partitions starts at (a
snapshot's, checked against the log) and, for a bounded read, where each stops. Two ways to
group them (:data:`MERGES`):

* ``all`` (the stream's default): one group of every partition of every topic. Every model
  then sees the records in one timestamp order, whatever the reader's timing, so a model fed
  by several partitions (one per configuration without ``--key-by``, or an entity whose
  records are spread over partitions) expires its events by one clock that no partition's
  backlog runs ahead of. One reader reads it all.
* ``partition``: partition ``p`` of each topic is a group, and the groups are read in turn (or
  in parallel, by a runner that splits the read). Right when each model is fed by one
  partition number (``--key-by`` with each entity's events and labels in partition ``p`` of
  their topics); a model fed by several groups has one event-time clock that every group moves,
  so one group's backlog can expire another group's events before their labels come. The bounded
replay's end snapshot (:func:`~kernelstream.kafka_client.bounded.snapshot_ends`) also measures
the log here, which is why :func:`kafka_partition_info` is not in the reader itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from kernelstream.engine.offsets import check_offsets, fingerprint_mismatch
from kernelstream.kafka_client.clients import SCHEME, assigned_consumer, error_text
from kernelstream.kafka_client.names import MERGES  # how partitions are grouped (above)

ALL = -1  # PartitionGroup.partition of the one group of every partition


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
        raise ConnectionError(f"Kafka broker(s) {bootstrap}: {error_text(e)}") from None
    finally:
        if own:
            c.close()


class PartitionGroup(NamedTuple):
    """Partition ``partition`` of every input topic (events topics, then the labels topic: the
    topic index of the merge), or with ``partition`` :data:`ALL` partitions ``0 ..
    n_partitions - 1`` of every topic (topic by topic), the offset to start each at and, for
    a bounded read, the offset to stop each before (None: read on until drained); both in the
    order of :attr:`partitions`."""

    partition: int
    topics: tuple[str, ...]
    start: tuple[int, ...]
    stop: tuple[int, ...] | None = None
    n_partitions: int = 1  # partitions per topic: those of a group of ALL

    @property
    def partitions(self) -> list[tuple[str, int]]:
        """The group's partitions in merge order: topic by topic (events topics, then the
        labels topic), each topic's by number. Records of the same timestamp go in this
        order, so those of partition ``p`` keep the order the group of ``p`` alone gives."""
        if self.partition == ALL:
            return [(t, p) for t in self.topics for p in range(self.n_partitions)]
        return [(t, self.partition) for t in self.topics]


def partition_groups(info: Mapping[tuple[str, int], tuple[int, int]], topics: Sequence[str],
                     start_offsets: Mapping[tuple[str, int], int] | None = None,
                     stop_offsets: Mapping[tuple[str, int], int] | None = None,
                     merge: str = "all") -> list[PartitionGroup]:
    """The partition groups of a stream over ``topics`` (events topics, then the labels
    topic), from :func:`kafka_partition_info`'s ``info``: with ``merge="all"`` one group of
    every partition (topics of one partition each: partition 0 of each, as ``partition``
    gives), with ``"partition"`` one group per partition number (see the module docstring).
    Every topic must have the same number of partitions (co-partitioned, as a join needs),
    else :class:`ValueError`.

    A partition starts at its ``start_offsets`` entry (e.g. a snapshot's), else at its
    beginning; a start offset outside ``[beginning, end]`` raises
    :class:`~kernelstream.engine.offsets.OffsetOutOfLog`. With ``stop_offsets`` (a bounded
    read: every partition needs one, between its start and its end) a group ends there."""
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
    if merge not in MERGES:
        raise ValueError(f"merge {merge!r}: expected one of {', '.join(MERGES)}")
    if merge == "partition" or len(groups) == 1:
        return groups
    # topic by topic: the order of PartitionGroup.partitions
    k = len(topics)
    return [PartitionGroup(ALL, tuple(topics),
                           tuple(g.start[i] for i in range(k) for g in groups),
                           None if stop_offsets is None else tuple(
                               g.stop[i] for i in range(k) for g in groups  # type: ignore[index]
                           ), len(groups))]


def check_fingerprints(bootstrap: str, marks: Mapping[tuple[str, int], Any],
                       info: Mapping[tuple[str, int], tuple[int, int]],
                       client: tuple[tuple[str, str], ...] = (),
                       timeout: float = 5.0) -> list[tuple[str, int]]:
    """Check that the record a snapshot last read of each partition is still there: ``marks``
    ``{(topic, partition): Fingerprint}`` (:meth:`SnapshotView.fingerprints`), ``info`` from
    :func:`kafka_partition_info`. Raises :class:`~kernelstream.engine.offsets.LogChanged`
    (one line) for the first partition whose record at the fingerprint's offset has another
    timestamp, key or value: the topic was deleted and recreated (with at least as many
    records, else the committed offset is past the log's end and
    :func:`~kernelstream.engine.offsets.check_offsets` fails first).

    A fingerprint that cannot be checked is passed: its record was deleted by retention
    (the offset is below the log's beginning) or compacted away (the first record at or
    after the offset comes later), or no record came within ``timeout`` seconds. Those
    are what a long-lived topic does to old records, and the committed offset itself is
    still inside the log (checked before); a recreated topic is caught wherever its record
    at that offset is readable. Returns the partitions it could not check."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError, OffsetOutOfRangeError

    todo = {TopicPartition(t, p): fp for (t, p), fp in sorted(marks.items())
            if (t, p) in info and info[(t, p)][0] <= fp.offset < info[(t, p)][1]}
    unchecked = [tp for tp in sorted(marks) if tp not in info
                 or not info[tp][0] <= marks[tp].offset < info[tp][1]]
    if not todo:
        return unchecked
    found: dict[Any, Any] = {}
    c = assigned_consumer(bootstrap, client)
    try:
        c.assign(list(todo))
        for tp, fp in todo.items():
            c.seek(tp, fp.offset)
        deadline = time.monotonic() + timeout
        while len(found) < len(todo) and time.monotonic() < deadline:
            try:
                batch = c.poll(timeout_ms=100)
            except OffsetOutOfRangeError:  # deleted meanwhile (retention): not checkable
                break
            for tp, recs in batch.items():
                if tp not in found and recs:
                    found[tp] = recs[0]
                    c.pause(tp)
    except KafkaError as e:
        raise ConnectionError(f"Kafka broker(s) {bootstrap}: {error_text(e)}") from None
    finally:
        c.close()
    for tp, fp in todo.items():
        r = found.get(tp)
        if r is None or r.offset != fp.offset:
            unchecked.append((tp.topic, tp.partition))
            continue
        err = fingerprint_mismatch(tp.topic, tp.partition, fp, r.offset, int(r.timestamp),
                                   r.key, r.value)
        if err is not None:
            raise err
    return unchecked
