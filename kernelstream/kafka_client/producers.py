"""The live stream's producer of output rows (``stream --kafka-out``), on either Kafka client.

:func:`row_producer` gives a :class:`RowProducer`: confluent-kafka's (librdkafka: messages
batched and sent by its own C threads) where it is installed and every producer setting of
``--kafka-option`` has a librdkafka equivalent, else kafka-python's, whose ``send`` costs
~15 µs of Python a message and whose sender is a Python thread that waits for the GIL, so
under load it delays every message by up to a GIL switch interval (measured, tansu broker).
``--kafka-client`` chooses as for the reader: ``auto`` (the default) falls back to
kafka-python, ``confluent`` refuses settings that do not translate, ``kafka-python`` never
uses librdkafka. Both send what the stream asks for, nothing else: the message's key,
value and partition (the caller picks the partition), ``acks=all``.

What the stream needs of a producer: sends that do not block (:meth:`RowProducer.send`), and
at each snapshot's cut a mark (:meth:`RowProducer.mark`) that another thread can wait on
(:meth:`RowProducer.wait`): every row sent before the mark has reached the brokers, or the
wait raises the first failure. Sends made after the mark do not hold the wait up (a busy
stream never lets librdkafka's queue run empty, so ``flush`` alone could wait forever).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from kernelstream.kafka_client.clients import client_defaults, typed_settings
from kernelstream.kafka_client.confluent import (
    CONNECTION_SETTINGS,
    confluent_available,
    librdkafka_names,
    without_librdkafka,
)
from kernelstream.kafka_client.sink import producer

LOGGER = logging.getLogger("kernelstream.rdkafka")

# kafka-python producer setting -> librdkafka property (values pass as they are)
_PRODUCER_SAME = {
    **librdkafka_names("acks linger_ms compression_type batch_size retries delivery_timeout_ms "
                       "enable_idempotence request_timeout_ms",
                       max_request_size="message.max.bytes"),
    **CONNECTION_SETTINGS,
}
# kafka-python's own internals or probes, meaningless to librdkafka: dropped
_PRODUCER_IGNORED = frozenset({
    "bootstrap_timeout_ms", "max_block_ms", "metrics_enabled", "metrics_num_samples",
    "metrics_sample_window_ms", "metric_reporters",
})
# The stream's defaults (a --kafka-option of the same meaning wins): every in-sync replica
# acknowledges a row, idempotent sends (kafka-python's default: retries neither reorder nor
# double a partition's rows); a row waits at most LINGER_MS to share a request with its
# round's others (kafka-python's sender is given 2 ms: it needs them to win the GIL).
LINGER_MS = 1
KAFKA_PYTHON_LINGER_MS = 2


def producer_untranslatable(client: tuple[tuple[str, str], ...]) -> list[str]:
    """The producer settings among ``client`` without a librdkafka equivalent."""
    return without_librdkafka(client, client_defaults()[1], _PRODUCER_SAME, _PRODUCER_IGNORED)


def confluent_producer_config(bootstrap: str, client: tuple[tuple[str, str], ...] = ()
                              ) -> dict[str, Any]:
    """librdkafka settings of the row producer from kafka-python-named ``client`` settings
    (which must all translate, :func:`producer_untranslatable`)."""
    cfg: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": "kernelstream",
                           "acks": "all", "enable.idempotence": True, "linger.ms": LINGER_MS,
                           "socket.nagle.disable": True}
    for k, v in typed_settings(client, client_defaults()[1]).items():
        if isinstance(v, float) and not isinstance(v, bool):
            if v == float("inf"):
                continue  # kafka-python's "no limit" (retries): librdkafka's default
            v = int(v) if v.is_integer() else v
        if k in _PRODUCER_SAME:
            cfg[_PRODUCER_SAME[k]] = ("all" if k == "acks" and v in ("all", -1)
                                      else "none" if v is None else v)
        elif k == "ssl_check_hostname":
            cfg["ssl.endpoint.identification.algorithm"] = "https" if v else "none"
    return cfg


class RowProducer:
    """Sends rows; :meth:`mark` / :meth:`wait` for the snapshots (module docstring)."""

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions, sorted (waits for its metadata)."""
        raise NotImplementedError

    def send(self, topic: str, key: bytes, value: bytes, partition: int) -> None:
        raise NotImplementedError

    def poll(self) -> None:
        """Serve what the client has finished; raise a send's failure known by now."""
        raise NotImplementedError

    def mark(self) -> Any:
        """The rows sent so far (for :meth:`wait`, possibly on another thread)."""
        raise NotImplementedError

    def wait(self, mark: Any) -> None:
        """Return once every row sent before ``mark`` has reached the brokers; raise the
        first failure."""
        raise NotImplementedError

    def close(self, timeout: float) -> None:
        raise NotImplementedError


class _Generation:
    """The rows sent between two marks and their delivery reports (appended by librdkafka's
    callback, on whichever thread polls: ``list.append`` needs no lock)."""

    __slots__ = ("reports", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.reports: list[Any] = []

    def report(self, err: Any, msg: Any) -> None:
        self.reports.append(err)


def topic_partitions(producer: Any, topic: str, timeout: float = 30.0) -> list[int]:
    """A topic's partitions, sorted, as a confluent-kafka ``producer`` sees them (waits for
    a topic being created)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            md = producer.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))
            t = md.topics.get(topic)
            if t is not None and t.error is None and t.partitions:
                return sorted(t.partitions)
            why = "no partitions" if t is None or t.error is None else t.error.str()
        except KafkaException as e:
            why = str(e.args[0].str() if e.args else e)
        if time.monotonic() >= deadline:
            raise RuntimeError(f"Kafka output topic {topic}: {why}")
        time.sleep(0.2)  # a topic being created (auto-creation) shows up shortly


def wait_delivered(producer: Any, gen: _Generation, raise_errors: Any) -> None:
    """Until every row of ``gen`` has its delivery report (polling ``producer``); the first
    failed one raised."""
    while len(gen.reports) < gen.sent:
        producer.poll(0.01)
        raise_errors()
    for err in gen.reports:
        if err is not None:
            raise RuntimeError(f"Kafka output: a row was not delivered: {err.str()}")


def raise_client_errors(errors: list[Any]) -> None:
    """Raise the first fatal client-level error of ``errors`` (librdkafka's ``error_cb``
    list; each popped once, whichever thread gets it), log the others."""
    from confluent_kafka import KafkaError

    while errors:
        err = errors.pop(0)
        if err.fatal() or err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            raise RuntimeError(f"Kafka output: {err.str()}")
        LOGGER.debug("Kafka output: %s", err.str())


class ConfluentRows(RowProducer):
    """:class:`RowProducer` over ``confluent_kafka.Producer``."""

    def __init__(self, config: dict[str, Any]) -> None:
        from confluent_kafka import Producer

        self._errors: list[Any] = []  # client-level errors (brokers down, auth)
        self._p = Producer({**config, "error_cb": self._errors.append}, logger=LOGGER)
        # send() and mark() run on the stream's thread, wait() on the commit thread
        self._gen = _Generation()
        self._report = self._gen.report

    def partitions(self, topic: str, timeout: float = 30.0) -> list[int]:
        return topic_partitions(self._p, topic, timeout)

    def send(self, topic: str, key: bytes, value: bytes, partition: int) -> None:
        while True:
            try:
                self._p.produce(topic, value, key, partition, on_delivery=self._report)
                break
            except BufferError:  # librdkafka's queue is full: let it send
                self._p.poll(0.05)
        self._gen.sent += 1

    def poll(self) -> None:
        self._p.poll(0)
        self._raise_errors()

    def mark(self) -> _Generation:
        gen, self._gen = self._gen, _Generation()
        self._report = self._gen.report
        return gen

    def wait(self, mark: Any) -> None:
        wait_delivered(self._p, mark, self._raise_errors)

    def _raise_errors(self) -> None:
        raise_client_errors(self._errors)

    def close(self, timeout: float) -> None:
        self._p.flush(timeout)


class KafkaPythonRows(RowProducer):
    """:class:`RowProducer` over kafka-python's ``KafkaProducer`` (its futures)."""

    def __init__(self, bootstrap: str, client: tuple[tuple[str, str], ...]) -> None:
        # the sink's producer (acks=all, a short bootstrap timeout), sending at once
        self._p = producer(bootstrap.split(","),
                           (("linger_ms", str(KAFKA_PYTHON_LINGER_MS)), *client))
        self._futures: list[Any] = []

    def partitions(self, topic: str) -> list[int]:
        return sorted(self._p.partitions_for(topic))

    def send(self, topic: str, key: bytes, value: bytes, partition: int) -> None:
        self._futures.append(self._p.send(topic, key=key, value=value, partition=partition))

    def poll(self) -> None:
        # keep only what the brokers have not acknowledged yet; a failed send fails now
        waiting = []
        for f in self._futures:
            if not f.is_done:
                waiting.append(f)
            elif f.failed():
                f.get(timeout=0)
        self._futures = waiting

    def mark(self) -> list[Any]:
        return list(self._futures)

    def wait(self, mark: Any) -> None:
        self._p.flush()
        for f in mark:
            f.get(timeout=0)

    def close(self, timeout: float) -> None:
        self._p.close(timeout=timeout)


def row_producer(bootstrap: str, client: tuple[tuple[str, str], ...] = (),
                 kind: str = "auto") -> RowProducer:
    """The row producer for ``kind`` (``auto``, ``confluent``, ``kafka-python``; see the
    module docstring). ``confluent`` raises :class:`ValueError` where ``auto`` falls back."""
    if kind != "kafka-python":
        bad = producer_untranslatable(client)
        if confluent_available() and not bad:
            from confluent_kafka import KafkaException

            try:
                return ConfluentRows(confluent_producer_config(bootstrap, client))
            except KafkaException as e:
                if kind == "confluent":
                    raise ValueError(f"--kafka-client confluent: {e}") from None
                LOGGER.warning("confluent-kafka producer: %s; sending with kafka-python", e)
        elif kind == "confluent":
            why = ("the confluent-kafka package is not installed" if not bad else
                   f"no librdkafka equivalent for the producer setting(s) {', '.join(bad)}")
            raise ValueError(f"--kafka-client confluent: {why}")
    return KafkaPythonRows(bootstrap, client)


__all__: Sequence[str] = ("ConfluentRows", "KafkaPythonRows", "RowProducer",
                          "confluent_producer_config", "producer_untranslatable",
                          "row_producer")
