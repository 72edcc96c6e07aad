"""The live stream's Kafka output: :class:`WriteKafkaRows` sends every row to
``PREFIX-<output>`` as it passes, and :func:`row_message` is a row's message.

A row is keyed by its ``row_id`` (the deterministic identity: a row replayed after a crash is
the same message again), and a model's rows go to one partition, in order. The Committer waits
for these sends before it commits each snapshot (:func:`kafka_writer` finds this process's
writer), so a committed row has always reached Kafka; rows sent after the last snapshot are
sent again after a crash (same key). With ``--kafka-exactly-once`` each snapshot's rows are
one Kafka transaction, committed after the snapshot (:mod:`kernelstream.kafka_client.transactions`):
a ``read_committed`` consumer sees every row once. It is its own module because it is the
only part of the stream that talks to the output brokers, and the Committer needs only its
hand-off.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import apache_beam as beam
import numpy as np

from kernelstream._json import json_safe
from kernelstream.engine.live.snapshot.outputs import published_path
from kernelstream.kafka_client.producers import confluent_producer_config, row_producer
from kernelstream.kafka_client.transactions import TransactionalRows, last_committed_epoch
from kernelstream.transforms.live.stream_job import StreamJob, crash_point


def _json_default(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    raise TypeError(f"not JSON: {type(v).__name__}")


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_json_default)


def row_message(row: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """``(key, value)`` of an output row on Kafka: its ``row_id`` and the row as JSON (NaN
    and infinities as null). Rows are flat, so one pass over the values does; most rows have
    no NaN at all and are encoded as they are (the encoder refuses NaN: then that pass)."""
    key = str(row["row_id"]).encode("utf-8")
    try:
        return key, _ENCODER.encode(row).encode("utf-8")
    except (ValueError, TypeError):
        pass
    flat = {k: (None if v.__class__ is float and not math.isfinite(v)
                else json_safe(v) if isinstance(v, list | tuple) else v)
            for k, v in row.items()}
    return key, _ENCODER.encode(flat).encode("utf-8")


# The Kafka writer of a run in this process, for the Committer to flush before it commits.
_KAFKA_WRITERS: dict[str, WriteKafkaRows] = {}


class WriteKafkaRows(beam.DoFn):
    """Items ``(output name, rows)`` → a message per row on that output's topic, sent at once
    by the run's row producer (:func:`~kernelstream.kafka_client.producers.row_producer`:
    confluent-kafka unless ``--kafka-client kafka-python`` or settings it cannot take).
    Every item is passed on to the Committer, which waits for them (:meth:`sent` at a
    snapshot's cut, then :meth:`wait`) before it commits that snapshot: a committed row has
    reached Kafka (a failed send fails the run, and nothing is committed). Bundles in
    between do not wait for the brokers."""

    def __init__(self, job: StreamJob) -> None:
        self.job = job
        self.topics: dict[str, str] = {}
        self.producer: Any = None
        self.partitions: dict[str, list[int]] = {}
        self.where: dict[tuple[str, str], int] = {}

    def setup(self) -> None:
        assert self.job.kafka_out is not None
        self.topics = self.job.output_topics()
        self.where = {}
        if self.job.kafka_markers is None:
            self.producer = row_producer(self.job.kafka_out, self.job.client,
                                         self.job.kafka_client)
            self.partitions = {t: self.producer.partitions(t) for t in self.topics.values()}
        else:
            self._transactional()
        _KAFKA_WRITERS[self.job.control] = self

    def _transactional(self) -> None:
        """The exactly-once producer; the epochs a crash kept out of Kafka sent first."""
        job = self.job
        assert job.kafka_out is not None and job.kafka_markers is not None
        assert job.kafka_txn_id is not None
        config = confluent_producer_config(job.kafka_out, job.client)
        ident = job.kafka_txn_id
        self.producer = TransactionalRows(config, ident, job.kafka_markers,
                                          job.snapshot_seconds)
        self.partitions = {t: self.producer.partitions(t) for t in self.topics.values()}
        last = last_committed_epoch(config, job.kafka_markers, ident)
        self.producer.recover(last, job.resume_epoch, self._published_rows,
                              starts=job.kafka_eos_starts)

    def _published_rows(self, epoch: int) -> Iterator[tuple[str, bytes, bytes, int]]:
        """The Kafka messages of the rows of ``epoch``'s published output files (each run's
        part of it: its ``published_path`` with any part)."""
        import glob

        import pyarrow.parquet as pq

        for name, topic in self.topics.items():
            files = sorted(glob.glob(published_path(self.job.out, name, epoch, "*")))
            for path in files:
                for row in pq.read_table(path).to_pylist():
                    key, value = row_message(row)
                    yield topic, key, value, self._partition(topic, row)

    def _partition(self, topic: str, row: Mapping[str, Any]) -> int:
        """A model's rows go to one partition, in order (murmur2 of the model key, as Kafka's
        default partitioner would place that key); a parse dead letter's by its source."""
        by = row.get("key") or row.get("source") or ""
        p = self.where.get((topic, by))
        if p is None:
            from kafka.partitioner.default import murmur2

            parts = self.partitions[topic]
            p = self.where[(topic, by)] = parts[(murmur2(by.encode()) & 0x7FFFFFFF)
                                                % len(parts)]
        return p

    def process(self, item: tuple[str, Any]) -> Iterator[tuple[str, Any]]:
        name, rows = item
        topic = self.topics.get(name)
        if topic is not None:  # an output sent to Kafka (not states, progress)
            send = self.producer.send
            for row in rows:
                key, value = row_message(row)
                send(topic, key, value, self._partition(topic, row))
            self.producer.poll()
        yield item

    def finish_bundle(self) -> None:
        self.producer.poll()  # a failed send fails now

    def sent(self) -> Any:
        """A mark of the rows sent so far: what :meth:`wait` waits for."""
        return self.producer.mark()

    def wait(self, sent: Any) -> None:
        """Wait until the brokers have every row sent before ``sent`` (:meth:`sent` at a
        snapshot's cut), and raise the error of one that failed. Thread-safe: the
        Committer's commit thread calls it while this DoFn goes on sending."""
        self.producer.wait(sent)
        crash_point("kafka-flush")

    def committed(self, sent: Any, epoch: int) -> None:
        """The snapshot ``epoch`` cut at ``sent`` is committed and its files published:
        with ``--kafka-exactly-once``, its rows' transaction is committed (on the commit
        thread)."""
        if self.job.kafka_markers is not None:
            crash_point("kafka-commit")
            self.producer.commit(sent, epoch)

    def teardown(self) -> None:
        if _KAFKA_WRITERS.get(self.job.control) is self:
            del _KAFKA_WRITERS[self.job.control]
        if self.producer is not None:
            self.producer.close(5)
            self.producer = None


def kafka_writer(control: str) -> WriteKafkaRows | None:
    """The Kafka writer of the run whose control directory is ``control``, when it runs in
    this process (the Committer flushes it before each commit), else None."""
    return _KAFKA_WRITERS.get(control)
