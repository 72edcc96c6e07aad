"""The stream reader's confluent-kafka consumer (``kafka_client.confluent``) on a real broker
(tansu): the records kafka-python reads, positions, seeking back, pause/resume, the high
watermark the reader's idle detection uses; the out-of-log error on librdkafka's own mock
cluster (tansu never answers a fetch with OFFSET_OUT_OF_RANGE: it waits for the offset);
the translation of kafka-python settings and the choice of client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from _helpers import new_topic, partition_records

from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.offsets import OffsetOutOfLog
from kernelstream.kafka_client import PartitionGroup, client_settings
from kernelstream.kafka_client.confluent import (
    GROUP_ID,
    ConfluentConsumer,
    confluent_config,
    reader_consumer,
    untranslatable,
)
from kernelstream.kafka_client.group_reader import GroupReader
from kernelstream.transforms.live import kafka_read as kr

T0 = 1_700_000_000_000


def _produce(broker: str, topic: str, msgs: list[tuple[bytes | None, bytes, int, int]]) -> None:
    """``(key, value, partition, timestamp_ms)`` messages, flushed."""
    from kafka import KafkaProducer

    prod = KafkaProducer(bootstrap_servers=broker, linger_ms=0)
    for key, value, part, ts in msgs:
        prod.send(topic, key=key, value=value, partition=part, timestamp_ms=ts)
    prod.flush()
    prod.close()


def _read(c: ConfluentConsumer, n: int, timeout: float = 10.0) -> list[SourceRecord]:
    """``n`` records (fails on fewer within ``timeout``), then nothing more for 0.3 s."""
    out: list[SourceRecord] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"only {len(out)} of {n} records"
        out += c.poll_records(0.1, 1000)
    t = time.monotonic()
    while time.monotonic() - t < 0.3:
        out += c.poll_records(0.05, 1000)
    return out


@pytest.fixture()
def consumer(broker: str) -> Iterator[ConfluentConsumer]:
    cfg = confluent_config(broker)
    assert cfg is not None
    c = ConfluentConsumer(cfg)
    yield c
    c.close()


def _messages(n: int) -> list[tuple[bytes | None, bytes, int, int]]:
    # keys: none, empty and some; timestamps out of offset order; an empty value
    keys = [None, b"", b"k"]
    return [(keys[i % 3], b"v%d" % i if i % 7 else b"", i % 2, T0 + (i * 7919) % 1000)
            for i in range(n)]


def test_the_records_kafka_python_reads(broker: str, consumer: ConfluentConsumer) -> None:
    topic = new_topic(broker, 2)
    _produce(broker, topic, _messages(60))
    want = [partition_records(broker, topic, p) for p in (0, 1)]
    assert [len(w) for w in want] == [30, 30]
    consumer.assign([(topic, 0), (topic, 1)])
    consumer.seek((topic, 0), 0)
    consumer.seek((topic, 1), 4)
    got = _read(consumer, 56)
    assert all(type(r) is SourceRecord for r in got)
    assert [r for r in got if r.partition == 0] == want[0]
    assert [r for r in got if r.partition == 1] == want[1][4:]
    assert {r.key for r in got} == {None, b"", b"k"}
    assert b"" in {r.value for r in got}
    # kafka-python's poll() shape too
    consumer.seek((topic, 1), 28)
    batch: dict[Any, list[Any]] = {}
    deadline = time.monotonic() + 10
    while sum(map(len, batch.values())) < 2 and time.monotonic() < deadline:
        for tp, recs in consumer.poll(timeout_ms=100, max_records=10).items():
            batch.setdefault(tp, []).extend(recs)
    ((tp, recs),) = batch.items()
    assert (tp.topic, tp.partition) == (topic, 1)
    assert [(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value) for r in recs] == [
        tuple(r) for r in want[1][28:]]


def test_a_poll_returns_once_records_are_there(broker: str, consumer: ConfluentConsumer
                                               ) -> None:
    """As kafka-python's: the first records end the wait (librdkafka's consume() would wait
    for ``max_records`` of them or the whole timeout)."""
    topic = new_topic(broker, 1)
    _produce(broker, topic, _messages(6)[::2])
    consumer.assign([(topic, 0)])
    consumer.seek((topic, 0), 0)
    t0 = time.monotonic()
    got = consumer.poll_records(8.0, 1000)
    took = time.monotonic() - t0
    assert got and took < 4, took
    t0 = time.monotonic()
    assert consumer.poll_records(0.3, 1000) == [] or len(got) < 3
    assert time.monotonic() - t0 < 2


def test_a_poll_that_waited_lingers_for_the_records_after_its_first(
        broker: str, consumer: ConfluentConsumer) -> None:
    """``linger_s`` (``--poll_linger_ms``): a poll that had to wait for its first record
    waits up to that long more, so records sent just after it come in the same round."""
    import threading

    topic = new_topic(broker, 1)
    consumer.assign([(topic, 0)])
    consumer.seek((topic, 0), 0)
    msgs = _messages(6)[::2]

    def send() -> None:
        _produce(broker, topic, msgs[:1])
        time.sleep(0.3)
        _produce(broker, topic, msgs[1:])

    sender = threading.Thread(target=send)
    sender.start()
    try:
        t0 = time.monotonic()
        got = consumer.poll_records(10.0, 1000, linger_s=3.0)
        took = time.monotonic() - t0
    finally:
        sender.join()
    assert [r.offset for r in got] == list(range(len(msgs))) and took < 8, took


def test_positions_seek_back_pause_and_resume(broker: str, consumer: ConfluentConsumer
                                              ) -> None:
    topic = new_topic(broker, 2)
    _produce(broker, topic, _messages(400))
    p0, p1 = (topic, 0), (topic, 1)
    consumer.assign([p0, p1])
    consumer.seek(p0, 10)
    consumer.seek(p1, 0)
    assert consumer.position(p0) == 10 and consumer.position(p1) == 0  # before any fetch
    got = _read(consumer, 390)
    assert consumer.position(p0) == 200 and consumer.position(p1) == 200
    assert [r.offset for r in got if r.partition == 0] == list(range(10, 200))

    consumer.seek(p0, 150)  # back: the same records again, from there
    assert consumer.position(p0) == 150 and consumer.position(p1) == 200
    again = _read(consumer, 50)
    assert [r.offset for r in again] == list(range(150, 200))
    assert [r[4:] for r in again] == [r[4:] for r in got if r.partition == 0][140:]

    # paused: nothing of that partition, its position stays; resumed: on from there
    consumer.seek(p0, 0)
    consumer.seek(p1, 0)
    consumer.pause(p1)
    first = _read(consumer, 200)
    assert {r.partition for r in first} == {0}
    assert consumer.position(p1) == 0
    consumer.resume(p1)
    rest = _read(consumer, 200)
    assert [r.offset for r in rest] == list(range(200))
    assert {r.partition for r in rest} == {1}

    # paused part way (records of it already prefetched are dropped, then fetched again)
    consumer.seek(p0, 0)
    consumer.seek(p1, 0)
    seen = {0: [], 1: []}  # type: dict[int, list[int]]
    for r in consumer.poll_records(5.0, 30):
        seen[r.partition].append(r.offset)
    part = max(seen, key=lambda q: len(seen[q]))
    consumer.pause((topic, part))
    paused_at = consumer.position((topic, part))
    assert paused_at == seen[part][-1] + 1
    for r in _read(consumer, 200 - len(seen[1 - part])):
        seen[r.partition].append(r.offset)
    assert consumer.position((topic, part)) == paused_at
    consumer.resume((topic, part))
    for r in _read(consumer, 200 - len(seen[part])):
        seen[r.partition].append(r.offset)
    assert seen == {0: list(range(200)), 1: list(range(200))}


def test_high_watermark_and_the_readers_idle_detection(broker: str) -> None:
    """``highwater`` is the true end (tansu's reported end offsets are lower), so a
    ``GroupReader`` on this consumer sees a drained partition as caught up after
    ``merge_idle_ms``, and a new record ends that."""
    topic = new_topic(broker, 1)
    _produce(broker, topic, _messages(20)[::2])  # 10 records on partition 0
    c = reader_consumer(broker, (), "confluent")
    assert isinstance(c, ConfluentConsumer)
    group = PartitionGroup(0, (topic,), (0,))
    reader = GroupReader(group, c, merge_idle_ms=100)
    try:
        reader.sync((0,))
        assert c.highwater((topic, 0)) is None  # no fetch response yet
        assert c.end_offsets([(topic, 0)])[(topic, 0)] == 1  # tansu: too low
        released: list[SourceRecord] = []
        deadline = time.monotonic() + 10
        while (topic, 0) not in reader.caught_up(None, time.monotonic()):
            assert time.monotonic() < deadline, "never caught up"
            reader.fetch(0.05, None, 1000)
            released += reader.merger.ready(reader.caught_up(None, time.monotonic()))
        assert c.highwater((topic, 0)) == 10 and reader.fetched == [10]
        assert [r.offset for r in released] == list(range(10))
        since = reader.idle_since[0]
        assert since is not None and time.monotonic() - since >= 0.1
        _produce(broker, topic, [(b"k", b"late", 0, T0)])
        deadline = time.monotonic() + 10
        while c.highwater((topic, 0)) != 11:
            assert time.monotonic() < deadline, "the new record's watermark never came"
            reader.fetch(0.05, None, 1000)
            if reader.fetched == [10]:  # fetched the watermark, not yet the record
                assert reader.idle_since[0] is None
        while reader.fetched != [11]:
            assert time.monotonic() < deadline
            reader.fetch(0.05, None, 1000)
        assert [r.value for r in reader.merger.drain()] == [b"late"]
    finally:
        reader.close()


def test_a_broker_outage_is_waited_out() -> None:
    """As with kafka-python: the reader waits (librdkafka reconnects), it does not fail."""
    from kernelstream.kafka_client import local_broker

    with local_broker() as b:
        topic = new_topic(b, 1)
        _produce(b, topic, [(None, b"x", 0, T0)])
        c = reader_consumer(b, (), "confluent")
        assert isinstance(c, ConfluentConsumer)
        c.assign([(topic, 0)])
        c.seek((topic, 0), 0)
        assert len(_read(c, 1)) == 1
    try:  # the broker is gone
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2:
            assert c.poll_records(0.2, 100) == []
        assert c.position((topic, 0)) == 1
    finally:
        c.close()


# -- out of the log: librdkafka's mock cluster ------------------------------------------------


@pytest.fixture()
def mock_cluster() -> Iterator[str]:
    """librdkafka's in-process mock broker (it answers a fetch beyond the log with
    OFFSET_OUT_OF_RANGE, which tansu does not), hosted by a producer; its bootstrap."""
    import logging

    from confluent_kafka import Producer

    quiet = logging.getLogger("kernelstream.test.rdkafka")
    quiet.setLevel(logging.CRITICAL)
    host = Producer({"test.mock.num.brokers": 1}, logger=quiet)
    brokers = host.list_topics(timeout=10).brokers.values()
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)
    prod = Producer({"bootstrap.servers": bootstrap}, logger=quiet)
    for i in range(5):
        prod.produce("t", b"v%d" % i, partition=0)
    assert prod.flush(10) == 0
    yield bootstrap
    host.flush(0)


def test_offset_beyond_the_log_raises_offset_out_of_log(mock_cluster: str) -> None:
    c = reader_consumer(mock_cluster, (), "confluent")
    assert isinstance(c, ConfluentConsumer)
    reader = GroupReader(PartitionGroup(0, ("t",), (0,)), c, merge_idle_ms=50)
    try:
        reader.sync((2,))  # inside: read normally
        deadline = time.monotonic() + 10
        while reader.fetched != [5]:
            assert time.monotonic() < deadline
            reader.fetch(0.1, None, 100)
        assert [r.value for r in reader.merger.drain()] == [b"v2", b"v3", b"v4"]
        reader.sync((9,))
        with pytest.raises(OffsetOutOfLog, match=r"cannot resume t/0 at offset 9: its log now "
                                                 r"runs from offset 0 to 5") as e:
            while time.monotonic() < deadline:
                reader.fetch(0.1, None, 100)
        assert (e.value.offset, e.value.beginning, e.value.end) == (9, 0, 5)
    finally:
        reader.close()


def test_transaction_markers_are_passed_like_records(mock_cluster: str) -> None:
    """A transaction's commit marker takes an offset without a record: the position moves
    past it (kafka-python's does too), so the reader claims it and sees the partition
    caught up at the high watermark."""
    import logging

    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": mock_cluster, "transactional.id": "tx"},
                    logger=logging.getLogger("kernelstream.test.rdkafka"))
    prod.init_transactions(10)
    prod.begin_transaction()
    for i in range(3):
        prod.produce("tx", b"x%d" % i, partition=0)
    prod.commit_transaction(10)
    c = reader_consumer(mock_cluster, (), "confluent")
    reader = GroupReader(PartitionGroup(0, ("tx",), (0,)), c, merge_idle_ms=50)
    try:
        reader.sync((0,))
        deadline = time.monotonic() + 10
        released: list[SourceRecord] = []
        while ("tx", 0) not in reader.caught_up(None, time.monotonic()):
            assert time.monotonic() < deadline, (reader.fetched, c.highwater(("tx", 0)))
            reader.fetch(0.05, None, 100)
            released += reader.merger.drain()  # one partition: nothing to wait for
        assert reader.fetched == [4] and c.highwater(("tx", 0)) == 4
        assert [r.offset for r in released] == [0, 1, 2]
        # and after seeking back onto the marker itself
        reader.sync((3,))
        while ("tx", 0) not in reader.caught_up(None, time.monotonic()):
            assert time.monotonic() < deadline, (reader.fetched, c.highwater(("tx", 0)))
            reader.fetch(0.05, None, 100)
        assert reader.fetched == [4] and len(reader.merger) == 0
    finally:
        reader.close()


# -- settings and the choice of client --------------------------------------------------------


def test_kafka_python_settings_translate_or_fall_back(broker: str) -> None:
    client = client_settings([
        "security_protocol=SASL_SSL", "sasl_mechanism=SCRAM-SHA-512",
        "sasl_plain_username=u", "sasl_plain_password=p", "ssl_cafile=/ca.pem",
        "ssl_check_hostname=false", "fetch_max_wait_ms=25", "request_timeout_ms=7000",
        "max_poll_records=10",  # the reader passes its own: dropped
        "linger_ms=3",  # a producer setting: never reaches a consumer
    ])
    assert untranslatable(client) == []
    cfg = confluent_config("h:1,g:2", client)
    assert cfg is not None
    want = {"bootstrap.servers": "h:1,g:2", "group.id": GROUP_ID, "enable.auto.commit": False,
            "auto.offset.reset": "error", "isolation.level": "read_uncommitted",
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/ca.pem",
            "ssl.endpoint.identification.algorithm": "none", "fetch.wait.max.ms": 25,
            "socket.timeout.ms": 7000}
    assert {k: cfg.get(k) for k in want} == want
    assert not any("." not in k for k in cfg), cfg  # only librdkafka names
    assert confluent_config("h:1")["fetch.wait.max.ms"] == 100  # type: ignore[index]

    # no librdkafka equivalent: auto falls back to kafka-python, confluent refuses
    for odd in (["sasl_mechanism=OAUTHBEARER"], ["api_version=2.5.0"],
                ["sasl_kerberos_domain_name=example.com"]):
        settings = client_settings(odd)
        assert untranslatable(settings) and confluent_config("h:1", settings) is None
        fallback = reader_consumer(broker, settings, "auto")
        try:
            from kafka import KafkaConsumer

            assert isinstance(fallback, KafkaConsumer)
        finally:
            fallback.close()
        with pytest.raises(ValueError, match="no librdkafka equivalent"):
            reader_consumer(broker, settings, "confluent")
    auto = reader_consumer(broker, (), "auto")
    assert isinstance(auto, ConfluentConsumer)
    auto.close()
    with pytest.raises(ValueError, match="expected one of"):
        reader_consumer(broker, (), "librdkafka")
    with pytest.raises(ValueError, match="kafka_client"):
        kr.ReadKafkaPartitions(broker, ["t"], kafka_client="librdkafka")


def test_a_librdkafka_that_refuses_the_settings(broker: str, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    """e.g. a librdkafka older than one of the reader's properties: auto reads with
    kafka-python, confluent fails in one line."""
    from kafka import KafkaConsumer

    from kernelstream.kafka_client import confluent

    monkeypatch.setitem(confluent._BASE, "no.such.property", 1)
    fallback = reader_consumer(broker, (), "auto")
    try:
        assert isinstance(fallback, KafkaConsumer)
    finally:
        fallback.close()
    with pytest.raises(ValueError, match=r"--kafka-client confluent: .*no\.such\.property"):
        reader_consumer(broker, (), "confluent")
