"""The live stream's row producer (``kafka_client.producers``) on a real broker (tansu), with
either client: the messages sent, a mark that waits for the rows sent before it and not for
later ones, a topic auto-created on first use; the translation of kafka-python settings and
the choice of client; a send to a broker that never answers fails the wait."""

from __future__ import annotations

import threading
import time

import pytest
from _helpers import new_topic, partition_records

from kernelstream.kafka_client.producers import (
    ConfluentRows,
    KafkaPythonRows,
    confluent_producer_config,
    producer_untranslatable,
    row_producer,
)


@pytest.mark.parametrize("kind", ["confluent", "kafka-python"])
def test_rows_arrive_and_a_mark_waits_for_what_came_before_it(broker: str, kind: str) -> None:
    topic = new_topic(broker, 2)
    p = row_producer(broker, (), kind)
    assert isinstance(p, ConfluentRows if kind == "confluent" else KafkaPythonRows)
    assert p.partitions(topic) == [0, 1]
    for i in range(300):
        p.send(topic, f"k{i}".encode(), f"v{i}".encode(), i % 2)
    mark = p.mark()
    for i in range(300, 320):  # after the mark: the wait does not need them
        p.send(topic, f"k{i}".encode(), f"v{i}".encode(), i % 2)
    done = threading.Event()
    t = threading.Thread(target=lambda: (p.wait(mark), done.set()))  # as the commit thread
    t.start()
    t.join(30)
    assert done.is_set()
    p.poll()
    p.close(10)
    got = {part: [(r.key, r.value) for r in partition_records(broker, topic, part)]
           for part in (0, 1)}
    for part in (0, 1):  # every row once, a partition's rows in the order sent
        assert got[part] == [(f"k{i}".encode(), f"v{i}".encode())
                             for i in range(part, 320, 2)]


def test_an_output_topic_is_created_on_first_use(broker: str) -> None:
    p = row_producer(broker, (), "confluent")
    parts = p.partitions("made-by-the-producer")  # as many as the broker's default
    assert parts and parts == list(range(len(parts)))
    p.close(5)


def test_a_send_that_cannot_be_delivered_fails_the_wait() -> None:
    # nothing listens on port 1: librdkafka gives up after the delivery timeout
    p = row_producer("127.0.0.1:1", (("delivery_timeout_ms", "1500"),
                                     ("request_timeout_ms", "1000")), "confluent")
    p.send("t", b"k", b"v", 0)
    mark = p.mark()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="not delivered"):
        p.wait(mark)
    assert time.monotonic() - t0 < 20
    p.close(0)


def test_producer_settings_translate_or_choose_kafka_python() -> None:
    client = (("acks", "1"), ("linger_ms", "5"), ("security_protocol", "SASL_SSL"),
              ("sasl_mechanism", "SCRAM-SHA-512"), ("ssl_check_hostname", "false"),
              ("fetch_max_wait_ms", "20"))  # a consumer setting: not the producer's
    assert producer_untranslatable(client) == []
    cfg = confluent_producer_config("h:1", client)
    assert (cfg["acks"], cfg["linger.ms"], cfg["security.protocol"], cfg["sasl.mechanism"],
            cfg["ssl.endpoint.identification.algorithm"]) == (
        1, 5, "SASL_SSL", "SCRAM-SHA-512", "none")
    assert "fetch.wait.max.ms" not in cfg
    assert confluent_producer_config("h:1")["acks"] == "all"
    assert confluent_producer_config("h:1", (("retries", "5"),))["retries"] == 5
    assert producer_untranslatable((("transactional_id", "x"), ("compression_type", "gzip"),
                                    ("sasl_mechanism", "OAUTHBEARER"))) == [
        "transactional_id", "sasl_mechanism=OAUTHBEARER"]
    with pytest.raises(ValueError, match="--kafka-client confluent: no librdkafka equivalent"):
        row_producer("127.0.0.1:1", (("transactional_id", "x"),), "confluent")
