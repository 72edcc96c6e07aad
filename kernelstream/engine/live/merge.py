"""The deterministic merge of a partition group, streamed and in one go.

A *partition group* is partition ``p`` of every input topic of a stream: the events topics in
the order they were given, then the labels topic. The topic's position in that list is its
*topic index*. The records of a group are merged by ``(timestamp_ms, topic index, offset)``
as a k-way merge of the partitions' heads: the next record is the smallest head among the
group's partitions, and each partition keeps its own offset order (Kafka timestamps need not
grow within a partition, so this is a merge of sequences, not a sort).

:func:`merged` is that merge over known partition contents (the reference loop's order).
:class:`GroupMerger` produces the same order while the records arrive in fetch batches of any
size and interleaving: it releases a head only when every other partition of the group either
has a record buffered (so its next record is known) or is *caught up*: the reader has fetched
everything it holds (for ``merge_idle_ms``), so its next record will come later.

The determinism contract of a stream (a model fed by one group is reproduced bit for bit by
the reference loop): the streamed order is exactly :func:`merged` of the final contents as
long as no record is appended to its partition more than ``merge_idle_ms`` (less the fetch
latency) after a record of another partition of the group that comes after it in merge
order. Producers that write a group's records in timestamp order meet it. The reader
(:mod:`kernelstream.kafka_client.group_reader`) keeps its side on fresh evidence only: a
partition is caught up when its position is at a high watermark that came from a fetch result
after the last lost broker connection and its buffer has been empty for ``merge_idle_ms``,
and a record passes such a partition only once it has been known to exist (below a high
watermark seen) for ``merge_idle_ms`` (``ready``'s ``ripe``), so that partition's evidence
comes from a later fetch than the record's append. So a broker
outage (connections cut, refused, a broker restarted with its data) changes no result: no
partition is caught up while the broker is unreachable, and after it each one waits for a
fetch of its own. What the contract cannot cover: a producer that appends records older than
ones already released (e.g. one that buffered them through an outage of its own).

A group of one partition (a single-topic stream) is passed through without any hold.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence

from kernelstream.engine.live.records import SourceRecord

TopicPartition = tuple[str, int]

_OFFSET = operator.itemgetter(2)  # SourceRecord.offset
_WHERE = operator.itemgetter(0, 1)  # (topic, partition)


def merge_key(rec: SourceRecord, topic_index: int) -> tuple[int, int, int]:
    """The merge order of a record whose topic is ``topic_index`` in its group."""
    return (rec.timestamp_ms, topic_index, rec.offset)


def merged(records_by_partition: Sequence[Iterable[SourceRecord]]) -> list[SourceRecord]:
    """The records of one partition group in merge order. ``records_by_partition``: each
    partition's records in offset order, in the group's topic order (events topics, then the
    labels topic)."""
    keyed = [_keyed(recs, i) for i, recs in enumerate(records_by_partition)]
    return [r for _, r in heapq.merge(*keyed, key=lambda kr: kr[0])]


def _keyed(recs: Iterable[SourceRecord], i: int) -> Iterator[tuple[tuple[int, int, int],
                                                                  SourceRecord]]:
    # a function, not a generator expression in the comprehension: that would read ``i``
    # late, when the merge runs, and see the last topic index for every partition
    return ((merge_key(r, i), r) for r in recs)


class GroupMerger:
    """The streamed merge of one partition group (see the module docstring).

    ``partitions``: the group's ``(topic, partition)`` in topic-index order. :meth:`add`
    buffers fetched records (each partition's in offset order; records at or below an offset
    already added are ignored, so a re-fetch after a seek does no harm); :meth:`ready` and
    :meth:`drain` release them in merge order. :attr:`next_offsets` is, per partition, the
    offset after the last record released (None before the first): what a reader may claim.
    """

    def __init__(self, partitions: Sequence[TopicPartition]) -> None:
        if not partitions:
            raise ValueError("a partition group needs at least one partition")
        if len(set(partitions)) != len(partitions):
            raise ValueError(f"a partition appears twice in the group {list(partitions)}")
        self.partitions: tuple[TopicPartition, ...] = tuple(partitions)
        self._index = {tp: i for i, tp in enumerate(self.partitions)}
        self._buf: list[deque[SourceRecord]] = [deque() for _ in self.partitions]
        self._added: list[int] = [-1] * len(self.partitions)  # highest offset added
        self.next_offsets: list[int | None] = [None] * len(self.partitions)
        # heads of the non-empty buffers: (merge key, partition index)
        self._heap: list[tuple[tuple[int, int, int], int]] = []

    def __len__(self) -> int:
        """Records buffered (added, not yet released)."""
        return sum(len(b) for b in self._buf)

    def buffered(self, tp: TopicPartition) -> int:
        return len(self._buf[self._index[tp]])

    def add(self, records: Iterable[SourceRecord]) -> None:
        if (len(self.partitions) == 1 and isinstance(records, list) and records
                and self._add_one(records)):
            return
        for r in records:
            i = self._index.get((r.topic, r.partition))
            if i is None:
                raise ValueError(f"record of {r.topic}/{r.partition} is not in the group "
                                 f"{list(self.partitions)}")
            if r.offset <= self._added[i]:
                continue
            self._added[i] = r.offset
            buf = self._buf[i]
            if not buf:
                heapq.heappush(self._heap, (merge_key(r, i), i))
            buf.append(r)

    def _add_one(self, records: list[SourceRecord]) -> bool:
        """:meth:`add` of a group of one partition when ``records`` are its own, new and in
        offset order (a consumer's fetch): appended at once, the checks at C speed instead of
        a Python step per record (a fifth of the reader's own time on a drain). False, with
        nothing done, otherwise (:meth:`add` goes record by record)."""
        offsets = list(map(_OFFSET, records))
        if (offsets[0] <= self._added[0]
                or set(map(_WHERE, records)) != {self.partitions[0]}
                or not all(map(operator.lt, offsets, itertools.islice(offsets, 1, None)))):
            return False
        buf = self._buf[0]
        if not buf:
            heapq.heappush(self._heap, (merge_key(records[0], 0), 0))
        buf.extend(records)
        self._added[0] = offsets[-1]
        return True

    def clear(self) -> None:
        """Forget the buffered records (the reader seeks back to re-read them)."""
        for b in self._buf:
            b.clear()
        self._heap.clear()
        self._added = [-1] * len(self.partitions)
        self.next_offsets = [None] * len(self.partitions)

    def ready(self, caught_up: Iterable[TopicPartition] = (),
              limit: int | None = None,
              ripe: Sequence[int] | None = None) -> list[SourceRecord]:
        """The records that can be released now, in merge order: a head goes out while every
        other partition has a record buffered or is in ``caught_up``. ``limit``: at most this
        many (the rest stay buffered, in order). ``ripe``: per partition, the highest offset
        that may pass an empty partition (one in ``caught_up``); a later record waits until
        the caller says it is ripe (the reader: known to exist for ``merge_idle_ms``, so
        the empty partition's evidence is newer than it)."""
        if len(self.partitions) == 1:
            return self._release(limit, lambda: True)
        done = set(caught_up)
        up = [tp in done for tp in self.partitions]
        # partitions that hold the merge back: empty and not caught up
        return self._release(limit, lambda: all(up[j] or self._buf[j]
                                                for j in range(len(self.partitions))),
                             ripe)

    def drain(self, limit: int | None = None) -> list[SourceRecord]:
        """Everything buffered (or the first ``limit``), in merge order, as if every partition
        were caught up: the end of a finite input. (The stream's reader never calls it: a
        stop there is a checkpoint, and held-back records are read again by the next run.)"""
        return self._release(limit, lambda: True)

    def _release(self, limit: int | None, may_release: Callable[[], bool],
                 ripe: Sequence[int] | None = None) -> list[SourceRecord]:
        bufs = self._buf
        if len(bufs) == 1:  # one partition: its records in offset order, nothing to merge
            buf = bufs[0]
            k = len(buf) if limit is None else min(limit, len(buf))
            if k == len(buf):
                out = list(buf)
                buf.clear()
            else:
                out = [buf.popleft() for _ in range(k)]
            if out:
                self.next_offsets[0] = out[-1].offset + 1
            self._heap = [(merge_key(buf[0], 0), 0)] if buf else []
            return out
        out = []
        heap = self._heap
        # re-checked after each run: the released partition may have run dry
        while heap and (limit is None or len(out) < limit) and may_release():
            i = heap[0][1]
            buf = bufs[i]
            # passing an empty partition: only records ripe enough (see ready)
            last = (None if ripe is None or all(bufs[j] for j in range(len(bufs)) if j != i)
                    else ripe[i])
            if last is not None and buf[0].offset > last:
                break  # the smallest head must wait, and everything after it
            heapq.heappop(heap)
            # a run of partition i: its records go out while they come before every other
            # partition's head (the others do not change meanwhile, and i is not empty, so
            # what may_release saw still holds)
            nt, ni = (heap[0][0][0], heap[0][1]) if heap else (None, 0)
            while True:
                r = buf.popleft()
                out.append(r)
                if not buf or (limit is not None and len(out) >= limit):
                    break
                if last is not None and buf[0].offset > last:
                    break
                t = buf[0].timestamp_ms
                if nt is not None and (t > nt or (t == nt and i > ni)):
                    break
            self.next_offsets[i] = r.offset + 1
            if buf:
                heapq.heappush(heap, (merge_key(buf[0], i), i))
        return out
