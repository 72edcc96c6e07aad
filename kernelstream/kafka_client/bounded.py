"""The bounded read of one Kafka topic: from its beginning (or a checkpoint's offsets) up to a
snapshot of its end offsets, as :class:`KafkaRecord` s.

This is what ``kernelstream replay kafka://...`` (Beam and the loop runner alike) and
``kernelstream check`` read through; it stands apart from the blocks built from the records
(:mod:`kernelstream.kafka_client.blocks`) so the read's stopping rules and its reproducible
merge order live in one place. Kafka orders records within a partition only: without
``key_by`` the partitions are merged by ``(timestamp, partition, offset)``, an order that
depends only on the topic's contents, so a replay is reproducible.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from kernelstream.engine.offsets import OffsetOutOfLog, check_offsets
from kernelstream.kafka_client.clients import (
    READ_DEFAULTS,
    KafkaTopic,
    client_defaults,
    error_text,
    typed_settings,
)
from kernelstream.kafka_client.partitions import kafka_partition_info


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
    cfg = {**READ_DEFAULTS, **typed_settings(opts.client, client_defaults()[0])}
    return KafkaConsumer(bootstrap_servers=opts.topic.servers(), group_id=None,
                         enable_auto_commit=False, client_id="kernelstream", **cfg)


def iter_topic_records(opts: KafkaReadOptions, merge: bool,
                       consumer_factory: Callable[[KafkaReadOptions], Any] = _consumer,
                       start: Mapping[int, int] | None = None) -> Generator[KafkaRecord]:
    """The topic's records from the beginning (or, for the partitions in ``start``, from the
    offset given there) until the read stops (see :class:`KafkaReadOptions`; with
    ``opts.stop`` only the records below those end offsets). ``merge``: one sequence ordered
    by ``(timestamp, partition, offset)``; otherwise each partition's records in offset
    order, partitions interleaved as they arrive. A read position outside the log raises
    :class:`~kernelstream.engine.offsets.OffsetOutOfLog`."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError, OffsetOutOfRangeError

    try:
        consumer = consumer_factory(opts)
    except KafkaError as e:  # e.g. NoBrokersAvailable: a data problem, not a crash
        raise ConnectionError(f"{opts.topic.url}: cannot connect ({error_text(e)})") from None
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
                raise ConnectionError(f"{opts.topic.url}: {error_text(e)}") from None
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
    :class:`~kernelstream.engine.offsets.OffsetOutOfLog` (one line, with the log's range)."""
    where = e.args[0] if e.args and isinstance(e.args[0], dict) else {}
    for tp, offset in where.items():
        lo: int | None
        hi: int | None
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
    partition's log (:class:`~kernelstream.engine.offsets.OffsetOutOfLog`: the topic was
    recreated, truncated or its records expired)."""
    t = opts.topic.topic
    info = kafka_partition_info(opts.topic.bootstrap, [t], opts.client,
                                metadata_timeout=opts.metadata_timeout)
    check_offsets({(t, int(p)): int(o) for p, o in (resume or {}).items()},
                  {tp: b for tp, (b, _) in info.items()}, {tp: e for tp, (_, e) in info.items()})
    return replace(opts, stop=tuple(sorted((p, e) for (_, p), (_, e) in info.items())))

