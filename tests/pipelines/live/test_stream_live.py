"""``kernelstream stream`` following a live producer that sends one record per batch, with the
reader's default settings.

A service sends each record as it happens: one record per batch. On tansu (memory storage)
each batch is an object that every fetch lists, and a listing stops at the fetch's
``fetch_max_wait_ms``: with the old default (10 ms) a topic of some thousands of one-record
batches was never read further, the stream dead-lettered the labels of the events it had
not read and stopped idle with most of the topic unread. Here ~1,000 records/s (events, each
followed ~100 ms later by its ``label:Y`` record on the same topic) for 20 s: the stream must
read every record and its outputs must equal the reference loop's on the topic's contents.
Asserts on data only (the machine may be slow); the stream ends with ``--idle-stop``.
"""

from __future__ import annotations

import heapq
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stream_accounting import assert_accounting
from test_stream import (
    assert_same,
    create_topics,
    outputs,
    read_back,
    reap,
    reference_tables,
    spec_for,
    start_cli,
    status,
    stream_argv,
)

from kernelstream import data
from kernelstream.kafka_client import local_broker

pytestmark = pytest.mark.slow
pytest.importorskip("confluent_kafka")

EVENTS = 10_000  # each with its label record: 20,000 records
RATE = 1000.0  # records/s
LABEL_DELAY_S = 0.1


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


def live_producer(broker: str, topic: str, sent: list[int], failed: list[Any]) -> None:
    """Send the events (``? FEATURES``, key ``e<i>``) at :data:`RATE` / 2 per second and each
    one's ``label:Y`` :data:`LABEL_DELAY_S` later, one record per batch (librdkafka's
    ``batch.num.messages=1``, no linger), each record timestamped with its send time."""
    from confluent_kafka import Producer

    try:
        X, y = data.load_dataset("german")
        prod = Producer({"bootstrap.servers": broker, "linger.ms": 0,
                         "batch.num.messages": 1, "acks": 1})
        prod.list_topics(topic, timeout=10)
        due: list[tuple[float, int, bytes, bytes]] = []
        t0 = time.monotonic()
        for i in range(EVENTS):
            row = i % len(y)
            feats = " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(X[row]) if v != 0)
            t = t0 + 2 * i / RATE
            heapq.heappush(due, (t, 2 * i, f"e{i}".encode(), f"? {feats}".encode()))
            heapq.heappush(due, (t + LABEL_DELAY_S, 2 * i + 1, f"e{i}".encode(),
                                 f"label:{int(y[row]):+d}".encode()))

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(err)

        while due:
            t, _, key, value = heapq.heappop(due)
            delay = t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            prod.produce(topic, key=key, value=value, timestamp=int(time.time() * 1000),
                         on_delivery=delivered)
            prod.poll(0)
            sent[0] += 1
        assert prod.flush(60) == 0, "records not delivered"
    except BaseException as e:  # reported by the test
        failed.append(e)


def test_a_live_one_record_per_batch_stream_is_read_whole(broker: str, tmp_path: Path) -> None:
    topic = "live"
    create_topics(broker, [topic], 1)
    out = tmp_path / "out"
    # the reader's defaults: no --kafka-option, no --kafka-client
    argv = stream_argv(broker, f"kafka://BROKER/{topic}", "--n-features", "24", "-l",
                       "b=bogd", "-p", "b.budget=20", "-l", "perceptron", "--out", str(out),
                       "--idle-stop", "10s", "--max-seconds", "240s", "-q")
    proc = start_cli(argv)
    try:
        deadline = time.monotonic() + 120
        while not status(out):  # started: its status file is written
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the stream did not start"
            time.sleep(0.1)
        sent: list[int] = [0]
        failed: list[Any] = []
        producer = threading.Thread(target=live_producer, args=(broker, topic, sent, failed))
        producer.start()
        producer.join(timeout=300)
        assert not producer.is_alive() and not failed, failed
        _, stderr = proc.communicate(timeout=300)
    finally:
        reap(proc)
    assert proc.returncode == 0, stderr
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    records = read_back(broker, topic, 1)[0]
    assert len(records) == sent[0] == 2 * EVENTS
    assert summary["records"] == len(records), (summary["records"], len(records), stderr)
    got = outputs(out)
    reasons = [r["reason"] for r in got["dead_letters"].to_pylist()]
    assert not any(r.startswith("label for unknown event id") for r in reasons), reasons[:5]
    assert got["predictions"].num_rows == 2 * EVENTS  # each event, by both learners
    want, _ = reference_tables(records, spec_for(argv))
    assert_same(got, want)
    assert_accounting(out, summary)
