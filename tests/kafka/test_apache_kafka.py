"""``kernelstream stream`` on Apache Kafka itself: one KRaft node started from the Maven jars
(``kafka_client.apache_broker``), not the tansu stand-in the other tests use.

The stream's Parquet outputs over a labelled topic pair with late labels must equal the
reference loop's (as in ``tests/pipelines/live/test_stream.py``, whose helpers are used), and a
``read_committed`` consumer must see none of an aborted transaction's records, which tansu
shows. Skipped, with the reason, where java or mvn is missing or the jars do not resolve
(``.ci/run`` fetches them first).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines" / "live"))
from _helpers import without_warnings
from test_stream import (  # the stream tests' helpers, one copy
    STREAM_ARGS,
    T0,
    assert_same,
    create_topics,
    labelled_stream,
    outputs,
    produce,
    reference_records,
    reference_tables,
    run_cli,
    spec_for,
    stream_argv,
)

pytestmark = pytest.mark.slow


def test_stream_on_apache_kafka_equals_the_reference_loop(kafka: str, tmp_path: Path) -> None:
    create_topics(kafka, ["ev", "lab"], 2)
    produce(kafka, labelled_stream(300, 0, T0, seed=7))
    out = tmp_path / "out"
    argv = stream_argv(kafka, *STREAM_ARGS, "--out", str(out), "--checkpoint",
                       str(tmp_path / "ckpt"), "--idle-stop", "2s", "-q")
    res = run_cli(argv)
    assert res.returncode == 0, res.stderr
    assert without_warnings(res.stderr).strip() == "", res.stderr
    want, _ = reference_tables(reference_records(kafka, ["ev", "lab"], 2), spec_for(argv))
    got = outputs(out)
    assert got["predictions"].num_rows > 200
    assert_same(got, want)


def test_read_committed_hides_an_aborted_transaction(kafka: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    create_topics(kafka, ["tx"], 1)
    prod = KafkaProducer(bootstrap_servers=kafka, transactional_id="kernelstream-test-tx")
    try:
        prod.init_transactions()
        prod.begin_transaction()
        for i in range(5):
            prod.send("tx", f"aborted {i}".encode(), partition=0)
        prod.flush()  # on the log, then aborted
        prod.abort_transaction()
        prod.begin_transaction()
        for i in range(3):
            prod.send("tx", f"committed {i}".encode(), partition=0)
        prod.commit_transaction()
    finally:
        prod.close()

    def values(isolation: str) -> list[bytes]:
        c = KafkaConsumer(bootstrap_servers=kafka, isolation_level=isolation,
                          enable_auto_commit=False, consumer_timeout_ms=3000)
        tp = TopicPartition("tx", 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        try:
            return [m.value for m in c]
        finally:
            c.close()

    assert values("read_committed") == [f"committed {i}".encode() for i in range(3)]
    # the aborted records are in the log: only the isolation level hides them
    assert len(values("read_uncommitted")) == 8
