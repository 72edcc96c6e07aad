"""The stream reader raises its fetch wait when fetches behind the high watermark return nothing
(``group_reader.FetchWait``): on tansu (memory storage) a fetch lists every batch of the
partition and stops at ``fetch_max_wait_ms``, so a topic of many one-record batches is never
read past what a short wait can list."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from kernelstream.kafka_client import PartitionGroup
from kernelstream.kafka_client.confluent import reader_consumer
from kernelstream.kafka_client.group_reader import FetchWait, GroupReader


class _Consumer:
    """kafka-python's consumer as FetchWait sees it: its settings and its fetcher's."""

    def __init__(self, wait_ms: int, timeout_ms: int = 10_000) -> None:
        self.config = {"fetch_max_wait_ms": wait_ms, "request_timeout_ms": timeout_ms}
        self._fetcher = type("F", (), {"config": dict(self.config)})()


def test_the_wait_doubles_only_after_a_second_without_progress_behind(
        caplog: pytest.LogCaptureFixture) -> None:
    c = _Consumer(100, timeout_ms=1000)
    w = FetchWait(c)
    w.observe(behind=True, progressed=False, now=10.0, where="t/0 offset 5")
    w.observe(behind=True, progressed=False, now=10.9, where="t/0 offset 5")
    assert w.get() == 100
    w.observe(behind=True, progressed=True, now=11.5, where="t/0 offset 5")  # progress: reset
    w.observe(behind=True, progressed=False, now=12.0, where="t/0 offset 9")
    assert w.get() == 100
    w.observe(behind=False, progressed=False, now=13.5, where="")  # caught up: reset
    w.observe(behind=True, progressed=False, now=14.0, where="t/0 offset 9")
    with caplog.at_level(logging.WARNING, logger="kernelstream.kafka"):
        w.observe(behind=True, progressed=False, now=15.0, where="t/0 offset 9")
    assert w.get() == 200 and c._fetcher.config["fetch_max_wait_ms"] == 200
    assert "t/0 offset 9" in caplog.text and "100 -> 200" in caplog.text
    for now in (16.0, 17.0, 18.0, 19.0):
        w.observe(behind=True, progressed=False, now=now, where="t/0 offset 9")
    assert w.get() == 500  # under the request timeout (half of it)


def _produce_one_per_batch(broker: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": broker, "batch.num.messages": 1, "linger.ms": 0})
    for i in range(n):
        while True:
            try:
                prod.produce(topic, key=b"k", value=f"{i}".encode())
                break
            except BufferError:
                prod.poll(0.01)
        prod.poll(0)
    assert prod.flush(60) == 0


@pytest.mark.slow
@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_a_topic_of_many_small_batches_is_read_whole(broker: str, client: str) -> None:
    pytest.importorskip("confluent_kafka")
    from kafka.admin import KafkaAdminClient, NewTopic

    topic, n = f"small-batches-{client}", 6000
    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    _produce_one_per_batch(broker, topic, n)
    group = PartitionGroup(0, (topic,), (0,))
    # 1 ms: far too short for tansu to list 6,000 batches (it returns no record at all)
    consumer: Any = reader_consumer(broker, (("fetch_max_wait_ms", "1"),), client)
    reader = GroupReader(group, consumer, merge_idle_ms=50)
    reader.sync(group.start)
    got: list[int] = []
    deadline = time.monotonic() + 120
    try:
        while len(got) < n and time.monotonic() < deadline:
            reader.fetch(0.2, None, 1000)
            got += [r.offset for r in reader.merger.ready(
                reader.caught_up(None, time.monotonic()), limit=1000)]
        assert got == list(range(n)), f"{len(got)} of {n} records read"
        assert reader.fetch_wait.get() > 1
    finally:
        reader.close()
