"""Exactly-once Kafka outputs of a live stream (``stream --kafka-out ... --kafka-exactly-once``):
each snapshot's rows in one Kafka transaction, committed once the snapshot is.

A snapshot (epoch ``E``) of the stream commits its output files and model states together
(:mod:`kernelstream.engine.live.snapshot.store`); its rows also went to Kafka as they were
made. :class:`TransactionalRows` sends the rows of epoch ``E`` inside a transaction of one
of two transactional producers (``ID-0``, ``ID-1``, taking turns by epoch), and commits it,
with a *marker* message ``{"epoch": E}`` (key ``ID``) on the stream's ``PREFIX-epochs`` topic,
only after the snapshot is committed and its files published. A consumer reading with
``isolation.level=read_committed`` therefore sees a row once its snapshot is durable, and
never sees the rows of an epoch a crash cut short: a restarted stream makes them again from
its last snapshot. Two producers because the stream goes on sending the next epoch's rows
while the commit thread commits the last one; the Committer cuts epoch ``E + 1`` only once
``E`` is committed, so each producer has at most one transaction open.

A crash between the snapshot's commit and the transaction's leaves epoch ``E`` durable in
the files and absent from Kafka (the restarted producers fence the old ones, which aborts
that transaction). The restart finds the last epoch whose marker Kafka has
(:func:`last_committed_epoch`) and sends the rows of the epochs after it, up to the snapshot it
resumes from, from their published output files, in one transaction with their markers
(:meth:`TransactionalRows.recover`), before anything new. A stream that turns this on for a
checkpoint written without it first commits a marker for the snapshot it resumes from (its
earlier rows were sent at least once, as then): the marker says where exactly-once starts.

Needs Apache Kafka (0.11 or later: transactions) and confluent-kafka. The transactional ids
and the markers' key are the checkpoint's own (``kafka_client.names.checkpoint_id``: a random
id made with the checkpoint and kept in it), so a checkpoint directory made again at the
same path, or the same path on another machine, is another writer; one checkpoint has one
writer at a time, as its lock ensures. A checkpoint restored from a backup older than what
Kafka has of it is refused (its epochs would be sent twice).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from kernelstream.kafka_client.names import MAX_TXN_TIMEOUT_MS
from kernelstream.kafka_client.producers import (
    LOGGER,
    _Generation,
    raise_client_errors,
    topic_partitions,
    wait_delivered,
)

# how long a transactional call may wait for the brokers (init fences the previous writer)
TXN_TIMEOUT_S = 60.0
# how long the markers' reader waits for another writer's open transaction to end
MARKERS_WAIT_S = MAX_TXN_TIMEOUT_MS / 1000 + 60


def transaction_timeout_ms(snapshot_seconds: float, message_timeout_ms: int = 0) -> int:
    """``transaction.timeout.ms`` of a stream snapshotting every ``snapshot_seconds``: 4
    intervals (a cut waits while the last commit runs), at least a minute and the messages'
    delivery timeout, at most the brokers' cap."""
    return int(min(MAX_TXN_TIMEOUT_MS, max(60_000, 4000 * snapshot_seconds,
                                          message_timeout_ms)))


class TransactionalRows:
    """The row producer of an exactly-once stream (module docstring): :meth:`send` and
    :meth:`poll` as the plain one's; :meth:`mark` at a snapshot's cut ends the epoch's
    transaction for sending (the next epoch's rows go to the other producer), :meth:`wait`
    flushes it, :meth:`commit` commits it with its marker once the snapshot is durable."""

    def __init__(self, config: dict[str, Any], ident: str, markers: str,
                 snapshot_seconds: float = 10.0) -> None:
        from confluent_kafka import Producer

        self.ident, self.markers = ident, markers
        self._errors: list[Any] = []
        # a transaction stays open for a snapshot interval and its commit; the brokers abort
        # one open longer (and cap the timeout at transaction.max.timeout.ms, 15 min)
        timeout_ms = transaction_timeout_ms(snapshot_seconds,
                                            int(config.get("message.timeout.ms", 0)))
        self._slots = [Producer({**config, "transactional.id": f"{ident}-{i}",
                                 "transaction.timeout.ms": timeout_ms,
                                 "error_cb": self._errors.append}, logger=LOGGER)
                       for i in (0, 1)]
        for p in self._slots:  # fences a previous writer's producers: its open one aborts
            p.init_transactions(TXN_TIMEOUT_S)
        self._cur = 0
        self._open = [False, False]
        self._gen = _Generation()
        self._begin()

    def _begin(self) -> None:
        if self._open[self._cur]:
            raise RuntimeError("Kafka output: the next epoch's transaction is still open "
                               "(its snapshot was not committed)")
        self._slots[self._cur].begin_transaction()
        self._open[self._cur] = True

    # -- the stream's thread ------------------------------------------------------------------
    def partitions(self, topic: str, timeout: float = 30.0) -> list[int]:
        return topic_partitions(self._slots[0], topic, timeout)

    def send(self, topic: str, key: bytes, value: bytes, partition: int) -> None:
        p = self._slots[self._cur]
        while True:
            try:
                p.produce(topic, value, key, partition, on_delivery=self._gen.report)
                break
            except BufferError:
                p.poll(0.05)
        self._gen.sent += 1

    def poll(self) -> None:
        self._slots[self._cur].poll(0)
        self._raise_errors()

    def mark(self) -> tuple[int, _Generation]:
        """At a snapshot's cut: the epoch's producer and its rows; later rows go to the other
        producer, in a new transaction, once these have reached the brokers (two producers'
        appends to a partition are not ordered: a model's rows must stay in order)."""
        done = (self._cur, self._gen)
        self.wait(done)
        self._cur ^= 1
        self._gen = _Generation()
        self._begin()
        return done

    # -- the commit thread --------------------------------------------------------------------
    def wait(self, mark: Any) -> None:
        """Every row of the marked epoch has reached the brokers (inside its transaction)."""
        slot, gen = mark
        wait_delivered(self._slots[slot], gen, self._raise_errors)

    def commit(self, mark: Any, epoch: int) -> None:
        """Commit the marked epoch's transaction, with its marker (its snapshot is
        durable)."""
        self._commit(mark[0], [epoch])

    def _commit(self, slot: int, epochs: list[int]) -> None:
        """Commit ``slot``'s transaction with the markers of ``epochs`` (commit_transaction
        sends everything first)."""
        p = self._slots[slot]
        for e in epochs:
            p.produce(self.markers, json.dumps({"epoch": e}).encode(), self.ident.encode(), 0)
        p.commit_transaction(TXN_TIMEOUT_S)
        self._open[slot] = False

    def recover(self, last: int | None, resumed: int | None,
                rows_of: Callable[[int], Iterable[tuple[str, bytes, bytes, int]]],
                starts: bool = False) -> int:
        """Before anything new: the epochs after ``last`` (the last one Kafka has a marker
        of; None: none) up to ``resumed`` (the snapshot the run resumed from; None: a new
        stream), their rows from ``rows_of(epoch)`` (``(topic, key, value, partition)``, from
        the published files), with their markers, in one transaction. ``starts``:
        exactly-once starts at ``resumed`` (a new stream, or one whose snapshot was written
        without it): its marker only; else no marker is refused. Returns the rows sent."""
        start = resumed or 0
        if starts:
            last = None
        elif last is None:  # its first run committed a marker before any snapshot
            raise RuntimeError(
                f"Kafka output: {self.markers} has no epoch marker of this checkpoint "
                f"({self.ident}), whose snapshot {start} was written sending exactly once (the "
                "markers topic deleted, or the checkpoint's id changed?): which epochs reached "
                "Kafka is not known; start over with a new --checkpoint")
        elif last > start:
            raise RuntimeError(
                f"Kafka output: {self.markers} has epoch {last} of this checkpoint, its "
                f"snapshot is epoch {start} (a checkpoint restored from an older copy?): its "
                "epochs would be sent twice; start over with a new --checkpoint")
        epochs = [start] if last is None else list(range(last + 1, start + 1))
        if not epochs:
            return 0
        if last is not None:
            for e in epochs:
                for topic, key, value, part in rows_of(e):
                    self.send(topic, key, value, part)
        sent = self._gen.sent
        self.wait((self._cur, self._gen))
        self._commit(self._cur, epochs)
        self._gen = _Generation()
        self._begin()
        return sent

    def _raise_errors(self) -> None:
        raise_client_errors(self._errors)

    def close(self, timeout: float) -> None:
        """Abort what is still open (rows after the last snapshot: a next run makes them
        again) and let go."""
        for slot, p in enumerate(self._slots):
            if self._open[slot]:
                try:
                    p.abort_transaction(timeout)
                except Exception as exc:  # (a broker gone: the next writer's fence aborts it)
                    LOGGER.debug("Kafka output: abort: %s", exc)
                self._open[slot] = False
            p.flush(timeout)


def last_committed_epoch(config: dict[str, Any], markers: str, ident: str,
                         timeout: float = MARKERS_WAIT_S) -> int | None:
    """The epoch of the newest marker ``markers`` holds (committed) for ``ident``; None:
    none. Reads to the end of the log: while another writer's transaction is open there (a
    stream sharing the prefix), a committed reader stops at its start, so this waits for it
    to end (at most ``timeout``) rather than answer from before it."""
    from confluent_kafka import Consumer, TopicPartition

    def consumer(level: str) -> Any:
        return Consumer({"bootstrap.servers": config["bootstrap.servers"],
                         "group.id": f"{ident}-markers", "enable.auto.commit": False,
                         "isolation.level": level, "auto.offset.reset": "earliest",
                         **{k: v for k, v in config.items()
                            if k.startswith(("security.", "sasl.", "ssl."))}})

    tp = TopicPartition(markers, 0)
    probe = consumer("read_uncommitted")
    try:
        _, high = probe.get_watermark_offsets(tp, timeout=TXN_TIMEOUT_S)  # every record's
    finally:
        probe.close()
    c = consumer("read_committed")
    try:
        c.assign([TopicPartition(markers, 0, 0)])
        last = None
        start = time.monotonic()
        said = False
        pos = 0
        while pos < high:
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"Kafka output: another writer's transaction on {markers} "
                                   f"stayed open for {timeout:.0f} s")
            m = c.poll(0.2)
            if m is None:
                pos = max(pos, int(c.position([tp])[0].offset))
                if not said and time.monotonic() - start > 5:
                    LOGGER.warning("Kafka output: waiting for a transaction open on %s to "
                                   "end", markers)
                    said = True
                continue
            if m.error():
                continue
            pos = int(m.offset() or 0) + 1
            if m.key() == ident.encode():  # the newest marker (they come in order)
                last = int(json.loads(m.value() or b"{}")["epoch"])
        return last
    finally:
        c.close()


__all__ = ["TXN_TIMEOUT_S", "TransactionalRows", "last_committed_epoch",
           "transaction_timeout_ms"]
