"""Output rows as Kafka messages (``replay --kafka-out``): :class:`KafkaWriter` and the message
key, value and partition of a row.

Kept apart from the reading side because the two share nothing but the client settings: a row
is written as a JSON object under a deterministic key (its identity, :func:`row_id`) in the
partition of its entity, so a retried run's duplicates can be dropped by key and one entity's
rows stay in order.

The message format is described in the package's docstring (:mod:`kernelstream.kafka_client`,
"Writing").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kernelstream._json import json_safe
from kernelstream.engine.deadletters import DEAD_LETTER_TAG
from kernelstream.engine.replay.blocks import PredictionBlock
from kernelstream.engine.replay.outputs import predictions_batch
from kernelstream.kafka_client.clients import (
    READ_DEFAULTS,
    KafkaTopic,
    client_defaults,
    typed_settings,
)


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
    return predictions_batch(p).to_pylist()


def _producer(topic: KafkaTopic, client: tuple[tuple[str, str], ...]) -> Any:
    return producer(topic.servers(), client)


def producer(servers: Any, client: tuple[tuple[str, str], ...] = ()) -> Any:
    """kafka-python's producer of output rows for ``servers`` (with ``client`` settings)."""
    from kafka import KafkaProducer

    # Large batches: kafka-python's per-message cost is what limits the sink;
    # acks="all": an output counts as written once every in-sync replica has it;
    # bootstrap_timeout_ms: an unreachable broker fails in seconds. All can be overridden
    # with --kafka-option.
    cfg: dict[str, Any] = {"acks": "all", "linger_ms": 50, "batch_size": 1 << 20,
                           "bootstrap_timeout_ms": READ_DEFAULTS["bootstrap_timeout_ms"]}
    cfg.update(typed_settings(client, client_defaults()[1]))
    return KafkaProducer(bootstrap_servers=servers, client_id="kernelstream", **cfg)


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


OUTPUT_TOPICS = {"predictions": "predictions", "metrics": "metrics",
                 DEAD_LETTER_TAG: "dead-letters"}


def output_topics(prefix: KafkaTopic) -> dict[str, KafkaTopic]:
    """``kafka://HOST/PREFIX`` → the topics ``PREFIX-predictions``, ``PREFIX-metrics`` and
    ``PREFIX-dead-letters`` of the three outputs."""
    return {out: KafkaTopic(prefix.bootstrap, f"{prefix.topic}-{suffix}")
            for out, suffix in OUTPUT_TOPICS.items()}
