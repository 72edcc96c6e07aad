"""One partition group's consumer and merge, without Beam: what the stream's splittable DoFn
(:mod:`kernelstream.transforms.live.kafka_read`) keeps across its calls. It polls the group's
partitions (kafka-python or confluent-kafka, :mod:`kernelstream.kafka_client.confluent`),
holds back a partition whose buffer is full, and releases records in the merged order of
:class:`~kernelstream.engine.live.merge.GroupMerger` once every partition has caught up or idled.
Kept apart from the DoFn so that it can be tested and benchmarked on its own
(``benchmarks/reader_clients.py``).

Caught up, precisely (the determinism contract of :mod:`kernelstream.engine.live.merge` rests on
it): a partition counts as caught up once, for ``merge_idle_ms`` on end, its buffer was empty
and its position at or past a high watermark *confirmed* by the broker, i.e. received in a
fetch result after the consumer's assignment and after the last lost broker connection
(:meth:`ConfluentConsumer.hw_confirmed`, :class:`FetchEvidence`). A high watermark cached
from before an outage confirms nothing: while the broker is unreachable no partition becomes
caught up, so no record is released past a partition whose records the broker may hold
unread, and an outage changes no output. And a record passes a caught-up (empty) partition
only once it has been known to exist for ``merge_idle_ms`` (below a high watermark seen that
long ago; :meth:`GroupReader.ready`): a broker builds a fetch response partition by
partition, so one response can hold a record appended after another partition's record it
reports no trace of, and the empty partition's high watermark must come from a later fetch
than the record's append. A backlog is known from the first fetch on, so only the records
at the live end wait. The reader also fails
(:class:`~kernelstream.engine.offsets.LogChanged`) on a high watermark below the position
already read for longer than :data:`LOST_AFTER_S` (the broker came back without its data;
Apache Kafka reports in each fetch response the high watermark from before it read the
records, so a response can hold records past its own high watermark: only a later response
can say the log is shorter), and on partitions that the broker,
answering, no longer has after ``PROBE_EVERY_S`` of unreachability (librdkafka waits
silently for a deleted topic; confluent-kafka only: :meth:`ConfluentConsumer.missing`)."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from kernelstream.engine.live.merge import GroupMerger
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.offsets import Fingerprint, LogChanged, OffsetOutOfLog, fingerprint
from kernelstream.kafka_client.partitions import PartitionGroup

# how long the broker may stay unreachable before the reader asks the cluster's metadata
# whether its partitions still exist (a broker back without its data, a deleted topic)
PROBE_EVERY_S = 5.0


def _resume(consumer: Any, tps: Sequence[Any]) -> None:
    """``consumer.resume(*tps)``, working around a kafka-python 3.0 stall: its fetcher puts a
    resumed partition's parked records back in line only when the in-line slot is None, but a
    drained slot holds an empty ``PartitionRecords`` (falsy, not None), so the parked records,
    and with them the partition, would wait forever (a multi-topic group with a backlog stopped
    for good). A drained slot is as good as none (the fetcher replaces it either way): clear it
    so the next poll restores them. confluent-kafka's consumer has no such slot."""
    consumer.resume(*tps)
    fetcher = getattr(consumer, "_fetcher", None)
    slot = getattr(fetcher, "_next_partition_records", None)
    if slot is not None and not slot:
        fetcher._next_partition_records = None  # type: ignore[union-attr]


LOGGER = logging.getLogger("kernelstream.kafka")


class FetchWait:
    """Raises the consumer's ``fetch_max_wait_ms`` when its fetches stop returning records
    although the reader is behind the high watermark.

    A broker that needs longer than the wait to find the records of a fetch answers with
    none, every time: tansu's memory storage lists every batch of the partition on each fetch
    and stops the listing at the wait, so a topic written one record per batch outgrows any
    fixed wait (``benchmarks/results/kafka_io.md``). After :data:`STUCK_S` without progress
    behind the high watermark the wait doubles, up to :data:`MAX_MS` (and under the request
    timeout), each time with a warning. Apache Kafka answers a fetch behind the high
    watermark with records at once, so there it changes nothing (but under ``read_committed``
    an open transaction holds a reader back too: a longer wait is harmless). Both consumers
    are handled: the confluent one (``set_fetch_wait``) and kafka-python's, whose fetcher
    reads the setting for each request."""

    STUCK_S = 1.0
    MAX_MS = 2000

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.since: float | None = None  # since when no partition behind made progress

    def get(self) -> int:
        c = self.consumer
        if hasattr(c, "fetch_wait_ms"):
            return int(c.fetch_wait_ms)
        return int(c.config["fetch_max_wait_ms"])

    def _ceiling(self) -> int:
        c = self.consumer
        timeout = (c.request_timeout_ms if hasattr(c, "request_timeout_ms")
                   else c.config["request_timeout_ms"])
        return min(self.MAX_MS, int(timeout) // 2)

    def observe(self, behind: bool, progressed: bool, now: float, where: str) -> None:
        """After a fetch: ``behind``, a fetching partition is short of its high watermark;
        ``progressed``, one of them got records."""
        if progressed or not behind:
            self.since = None
            return
        if self.since is None:
            self.since = now
            return
        if now - self.since < self.STUCK_S:
            return
        self.since = now
        old = self.get()
        new = min(self._ceiling(), 2 * old)
        if new <= old:
            return
        c = self.consumer
        if hasattr(c, "set_fetch_wait"):
            c.set_fetch_wait(new)
        else:  # kafka-python: the fetcher builds each request from its config
            c.config["fetch_max_wait_ms"] = new
            c._fetcher.config["fetch_max_wait_ms"] = new
        LOGGER.warning("Kafka reader: no record for %.0f s at %s although the broker has more; "
                       "fetch_max_wait_ms %d -> %d ms (a broker that takes longer than the wait "
                       "to find them, e.g. tansu with many small batches; set it with "
                       "--kafka-option fetch_max_wait_ms=MS)", self.STUCK_S, where, old, new)

class FetchEvidence:
    """What kafka-python's consumer does not tell: whether the broker answers and which
    partitions' high watermarks came from a fetch after the last lost connection (see the
    module docstring). Hooks the consumer's fetch callbacks (``_handle_fetch_response``,
    ``_handle_fetch_error`` of its fetcher, set per instance; kafka-python 2.x/3.x): a
    response confirms the partitions it answers, a failed fetch (the connection lost, timed
    out, cancelled) unconfirms them all. A kafka-python without those hooks confirms every
    high watermark, as before. A high watermark is taken into the consumer's state when
    ``poll`` parses the response, which may be a poll after the response arrived: kafka-python's
    confirmation can run ahead of its watermark by one poll; librdkafka's cannot."""

    def __init__(self, consumer: Any, tps: Sequence[Any]) -> None:
        self.broker_reachable = True
        self.heard_at: float | None = None
        fetcher = getattr(consumer, "_fetcher", None)
        on_response: Any = getattr(fetcher, "_handle_fetch_response", None)
        on_error: Any = getattr(fetcher, "_handle_fetch_error", None)
        self.hooked = on_response is not None and on_error is not None
        self.confirmed = dict.fromkeys(tps, not self.hooked)
        if not self.hooked:
            return

        def response(node_id: Any, fetch_offsets: Any, *args: Any) -> Any:
            out = on_response(node_id, fetch_offsets, *args)
            for tp in fetch_offsets:
                if tp in self.confirmed:
                    self.confirmed[tp] = True
            self.broker_reachable = True
            self.heard_at = time.monotonic()
            return out

        def error(node_id: Any, exception: Any) -> Any:
            self.broker_reachable = False
            self.confirmed = dict.fromkeys(self.confirmed, False)
            return on_error(node_id, exception)

        fetcher._handle_fetch_response = response  # type: ignore[union-attr]
        fetcher._handle_fetch_error = error  # type: ignore[union-attr]


# how long a high watermark may stay below what the broker served before the log counts as
# lost: longer than the longest fetch wait, so that a later fetch response has come in
LOST_AFTER_S = FetchWait.MAX_MS / 1000 + 1.0


class GroupReader:
    """A group's consumer and merge, kept across ``process()`` calls. ``claimed`` is where the
    last call's restriction ended; a call whose restriction starts elsewhere (a retried
    bundle, a residual run by another instance first) seeks back and refills the merge."""

    def __init__(self, group: PartitionGroup, consumer: Any, merge_idle_ms: int) -> None:
        self.keys = group.partitions
        # the confluent-kafka consumer takes plain (topic, partition) tuples and returns
        # SourceRecords itself (poll_records); kafka-python's wants its TopicPartitions
        self.direct = hasattr(consumer, "poll_records")
        if self.direct:
            self.tps: list[Any] = list(self.keys)
        else:
            from kafka import TopicPartition

            self.tps = [TopicPartition(t, p) for t, p in self.keys]
        self.index = {tp: i for i, tp in enumerate(self.keys)}
        self.consumer = consumer
        self.consumer.assign(self.tps)
        self.evidence = None if self.direct else FetchEvidence(consumer, self.tps)
        self.merger = GroupMerger(self.keys)
        self.merge_idle_s = merge_idle_ms / 1000.0
        self.claimed: list[int] | None = None
        self.fetched: list[int] = []
        # per partition, the position the broker has served this reader to since the last
        # seek (None before it served anything): a sought offset is not something served
        self.served: list[int | None] = [None] * len(self.keys)
        # per partition, since when its high watermark has been below what was served
        self.short_since: list[float | None] = [None] * len(self.keys)
        self.idle_since: list[float | None] = [None] * len(self.keys)
        self.newest_ts: list[int | None] = [None] * len(self.keys)
        # each partition's high watermark in the last fetch response (None before one)
        self.highwater: list[int | None] = [None] * len(self.keys)
        self.paused: set[int] = set()
        self.fetch_wait = FetchWait(consumer)
        # the last record emitted of each partition (the reader sets it) and its fingerprint
        self.last: list[Any] = [None] * len(self.keys)
        self._fp: list[Fingerprint | None] = [None] * len(self.keys)
        self._probe_at: float | None = None  # when to ask whether the partitions still exist
        # per partition: (highest offset known to exist, since when) of the high watermarks
        # seen less than merge_idle_ms ago, and the highest offset known for longer
        self._arrived: list[deque[tuple[int, float]]] = [deque() for _ in self.keys]
        self._ripe: list[int] = [-1] * len(self.keys)

    @property
    def broker_reachable(self) -> bool:
        """False from a lost broker connection until a fetch result after it."""
        ev = self.evidence if self.evidence is not None else self.consumer
        return bool(getattr(ev, "broker_reachable", True))

    def confirmed(self, i: int) -> bool:
        """Whether partition ``i``'s high watermark came from a fetch after the assignment
        and the last lost connection (module docstring)."""
        if self.evidence is not None:
            return self.evidence.confirmed[self.tps[i]]
        check = getattr(self.consumer, "hw_confirmed", None)
        return True if check is None else bool(check(self.tps[i]))

    def fingerprint(self, i: int) -> Fingerprint | None:
        """The fingerprint of the last record emitted of partition ``i`` (None: none yet)."""
        rec = self.last[i]
        if rec is None:
            return None
        fp = self._fp[i]
        if fp is None or fp.offset != rec.offset:
            fp = self._fp[i] = fingerprint(rec.offset, rec.timestamp_ms, rec.key, rec.value)
        return fp

    def sync(self, start: Sequence[int]) -> None:
        if self.claimed == list(start):
            return
        self.merger.clear()
        for tp, off in zip(self.tps, start, strict=True):
            self.consumer.seek(tp, off)
        self.claimed = list(start)
        self.fetched = list(start)
        self.served = [None] * len(self.keys)
        self.short_since = [None] * len(self.keys)
        self.idle_since = [None] * len(self.keys)
        self._arrived = [deque() for _ in self.keys]
        self._ripe = [-1] * len(self.keys)
        if self.paused:
            _resume(self.consumer, self.tps)
            self.paused = set()

    def caught_up(self, stop: Sequence[int] | None, now: float) -> set[tuple[str, int]]:
        """The partitions with nothing more to merge now: at their stop, or fetched to a
        confirmed high watermark and empty for ``merge_idle_ms`` (module docstring)."""
        out = set()
        for i, key in enumerate(self.keys):
            since = self.idle_since[i]
            if (stop is not None and self.fetched[i] >= stop[i]) or (
                    since is not None and now - since >= self.merge_idle_s):
                out.add(key)
        return out

    def ready(self, stop: Sequence[int] | None, now: float,
              limit: int | None = None) -> list[SourceRecord]:
        """The records the merge can release now (at most ``limit``): past caught-up
        partitions only those known to exist for ``merge_idle_ms`` (module docstring)."""
        ripe = self._ripe
        cutoff = now - self.merge_idle_s
        for i, arrived in enumerate(self._arrived):
            while arrived and arrived[0][1] <= cutoff:
                ripe[i] = max(ripe[i], arrived.popleft()[0])
        return self.merger.ready(self.caught_up(stop, now), limit, ripe)

    def wait_s(self, budget_s: float, now: float) -> float:
        """How long the next poll may block: ``budget_s``, or less when buffered records wait
        only for another partition's idle time, or their own, to pass."""
        if not len(self.merger):
            return budget_s
        ends = [s + self.merge_idle_s - now for s in self.idle_since if s is not None]
        ends += [a[0][1] + self.merge_idle_s - now for a in self._arrived if a]
        return max(0.001, min([budget_s, *[e for e in ends if e > 0]]))

    def fetch(self, timeout_s: float, stop: Sequence[int] | None, max_records: int,
              linger_s: float = 0.0) -> None:
        # Not fetched: partitions at their stop (producers go on writing) and partitions with
        # a full buffer (their records wait for an older partition: bounded memory)
        cap = max(1000, 4 * max_records)
        hold = {i for i, key in enumerate(self.keys)
                if (stop is not None and self.fetched[i] >= stop[i])
                or self.merger.buffered(key) >= cap}
        if hold != self.paused:
            if self.paused - hold:
                _resume(self.consumer, [self.tps[i] for i in self.paused - hold])
            if hold - self.paused:
                self.consumer.pause(*[self.tps[i] for i in hold - self.paused])
            self.paused = hold
        if len(hold) == len(self.keys):
            return
        if self.direct:  # raises OffsetOutOfLog itself
            recs = self.consumer.poll_records(timeout_s, max_records, linger_s)
            if stop is not None:
                index = self.index
                recs = [r for r in recs if r.offset < stop[index[(r.topic, r.partition)]]]
            self.merger.add(recs)
        else:
            recs = self._poll_kafka_python(timeout_s, stop, max_records)
        now = time.monotonic()
        behind = progressed = False
        where = ""
        for i, tp in enumerate(self.tps):
            if i not in self.paused:
                pos = int(self.consumer.position(tp))
                if pos > self.fetched[i]:
                    progressed = True
                    self.served[i] = pos
                self.fetched[i] = pos
            hw = self.consumer.highwater(tp)
            if hw is not None:
                self.highwater[i] = int(hw)
            if i not in self.paused and hw is not None and self.fetched[i] < hw:
                behind = True
                where = where or f"{self.keys[i][0]}/{self.keys[i][1]} offset {self.fetched[i]}"
            if hw is not None and len(self.keys) > 1:  # a group of one merges nothing
                # records below hw exist from now on (when they may pass: see ready)
                known = self._arrived[i]
                if hw - 1 > (known[-1][0] if known else self._ripe[i]):
                    known.append((hw - 1, now))
            confirmed = self.confirmed(i)
            served = self.served[i]
            short = self.short_since[i]
            if hw is None or served is None or hw >= served:
                self.short_since[i] = None
            elif short is None:
                # Apache Kafka takes a response's high watermark before it reads the records
                # (kafka.cluster.Partition.readRecords), so records appended meanwhile come
                # with a high watermark below them: only a later response tells
                self.short_since[i] = now
            elif now - short > LOST_AFTER_S:
                # a broker's high watermark never goes back below what it served, confirmed
                # or not: a newer response still below it comes from a broker that lost the
                # data. (A resume sought past the log's end is not this: librdkafka reports
                # it as out of range, OffsetOutOfLog, before anything is served.)
                raise LogChanged(self.keys[i][0], self.keys[i][1],
                                 f"the broker's high watermark {hw} is below offset "
                                 f"{served}, where this stream had read to (the "
                                 "broker came back without its data, or the topic was "
                                 "recreated)")
            idle = (confirmed and self.merger.buffered(self.keys[i]) == 0 and hw is not None
                    and self.fetched[i] >= hw)
            if not idle:
                self.idle_since[i] = None
            elif self.idle_since[i] is None:
                self.idle_since[i] = now
        if self.broker_reachable:  # an outage is no reason to wait longer afterwards
            self.fetch_wait.observe(behind, progressed, now, where)
        self._probe(now)

    def _probe(self, now: float) -> None:
        """Unreachable for ``PROBE_EVERY_S``: fail if the broker answers without our
        partitions (module docstring); ask again every ``PROBE_EVERY_S``."""
        if self.broker_reachable:
            self._probe_at = None
            return
        if self._probe_at is None:
            self._probe_at = now + PROBE_EVERY_S
            return
        if now < self._probe_at:
            return
        self._probe_at = now + PROBE_EVERY_S
        check = getattr(self.consumer, "missing", None)
        gone = None if check is None else check()
        if gone:
            raise LogChanged(gone[0][0], gone[0][1],
                             "the broker answers, but has no such partition any more (it "
                             "came back without its data, or the topic was deleted)")

    def _poll_kafka_python(self, timeout_s: float, stop: Sequence[int] | None,
                           max_records: int) -> list[SourceRecord]:
        from kafka.errors import OffsetOutOfRangeError

        try:
            batch = self.consumer.poll(timeout_ms=int(timeout_s * 1000),
                                       max_records=max_records)
        except OffsetOutOfRangeError as e:  # records deleted (retention) before we read them
            raise self._out_of_log(e) from None
        out: list[SourceRecord] = []
        for tp, recs in batch.items():
            i = self.index[(tp.topic, tp.partition)]
            end = None if stop is None else stop[i]
            out += [SourceRecord(r.topic, r.partition, r.offset, int(r.timestamp), r.key,
                                 r.value)
                    for r in recs if end is None or r.offset < end]
        self.merger.add(out)
        return out

    def _out_of_log(self, e: Exception) -> Exception:
        where = e.args[0] if e.args and isinstance(e.args[0], dict) else {}
        for tp, offset in where.items():
            lo = self.consumer.beginning_offsets([tp]).get(tp)
            hi = self.consumer.end_offsets([tp]).get(tp)
            return OffsetOutOfLog(tp.topic, tp.partition, int(offset), lo, hi)
        return e

    def close(self) -> None:
        self.consumer.close()
