"""``kernelstream stream --kafka-out ... --kafka-exactly-once`` on Apache Kafka: a consumer
reading the output topics with ``isolation.level=read_committed`` sees every row of the
stream's published files exactly once, however the stream was killed and resumed: mid-bundle,
after a snapshot's commit, and between a snapshot and its Kafka transaction (whose rows the
restart sends from the published files). Without the option, the same kills leave duplicates
(at-least-once, deduplicated by ``row_id``). Skipped where Apache Kafka is unavailable."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines" / "live"))
from stream_accounting import assert_accounting
from test_stream import (  # the stream tests' helpers, one copy
    OUTPUTS,
    T0,
    labelled_stream,
    outputs,
    produce,
    run_cli,
    stream_argv,
)
from test_stream_crash import _env

from kernelstream.transforms.live.stream import CRASH_ENV

pytestmark = pytest.mark.slow

# (kafka-commit: the snapshot and its files are durable, its Kafka transaction is not)
CRASHES = ["learn:150", "kafka-commit:2", "after-commit:2", "kafka-commit:1"]


def _argv(hp: str, out: Path, ckpt: Path, prefix: str, *extra: str) -> list[str]:
    return stream_argv(hp, "kafka://BROKER/xo", "--labels", "kafka://BROKER/xo-lab",
                       "--n-features", "24", "-l", "perceptron", "--key-by", "id-prefix",
                       "--label-ttl", "2s", "--metrics-window", "1s", "--out", str(out),
                       "--checkpoint", str(ckpt), "--kafka-out", f"kafka://BROKER/{prefix}",
                       *extra, "--snapshot-every", "100", "--idle-stop", "3s", "-q", "--",
                       "--max_records=40")


def committed_row_ids(hp: str, prefix: str, order: list[str] | None = None) -> Counter[str]:
    """How often each row id is on the output topics, for a read_committed consumer
    (``order``: the prediction ids as each partition holds them, appended to)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": hp, "group.id": f"check-{prefix}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest"})
    topics = [f"{prefix}-{n.replace('_', '-')}" for n in OUTPUTS]
    md = c.list_topics(timeout=10)
    c.assign([TopicPartition(t, p, 0) for t in topics for p in md.topics[t].partitions])
    ids: Counter[str] = Counter()
    idle = time.monotonic()
    while time.monotonic() - idle < 3.0:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        idle = time.monotonic()
        row = json.loads(m.value())
        ids[row["row_id"]] += 1
        if order is not None and m.topic().endswith("-predictions"):
            order.append(f"{m.partition()}|{row['key']}|{row['position']}")
    c.close()
    return ids


def test_read_committed_consumers_see_every_row_once_across_kills(
        kafka: str, tmp_path: Path) -> None:
    _topics(kafka, "xo", "xo-lab")
    produce(kafka, [(("xo" if m[0] == "ev" else "xo-lab"), *m[1:])
                    for m in labelled_stream(420, 0, T0, seed=13)])

    out, ckpt = tmp_path / "eo", tmp_path / "ckpt-eo"
    argv = _argv(kafka, out, ckpt, "eo", "--kafka-exactly-once")
    for crash in CRASHES:
        r = run_cli(argv, env={**_env(), CRASH_ENV: crash})
        assert r.returncode == -signal.SIGKILL, (crash, r.returncode, r.stderr)
    r = run_cli(argv, env=_env())
    assert r.returncode == 0, r.stderr
    files = outputs(out)
    want = Counter(i for name in OUTPUTS for i in files[name].column("row_id").to_pylist())
    assert sum(want.values()) > 500 and max(want.values()) == 1
    order: list[str] = []
    got = committed_row_ids(kafka, "eo", order)
    assert got == want, (f"{sum(got.values())} messages for {len(want)} rows: "
                         f"{sum(1 for n in got.values() if n > 1)} twice, "
                         f"{len(want.keys() - got.keys())} missing")
    assert_accounting(out)
    # a model's rows in its partition in order (the two producers never interleave them)
    last: dict[str, int] = {}
    for item in order:
        where, pos = item.rsplit("|", 1)
        assert int(pos) > last.get(where, -1), f"{where}: position {pos} after {last[where]}"
        last[where] = int(pos)
    # once on, kept: a resume without it would leave a crashed epoch out of Kafka
    i = argv.index("--kafka-exactly-once")
    r = run_cli(argv[:i] + argv[i + 1:])
    assert r.returncode == 2 and "sends its rows exactly once" in r.stderr, r.stderr

    # the same kills without the option: the rows are all there, some twice
    out2, ckpt2 = tmp_path / "al", tmp_path / "ckpt-al"
    argv2 = _argv(kafka, out2, ckpt2, "al")
    for crash in ("learn:150", "after-commit:2"):
        r = run_cli(argv2, env={**_env(), CRASH_ENV: crash})
        assert r.returncode == -signal.SIGKILL, (crash, r.returncode, r.stderr)
    r = run_cli(argv2, env=_env())
    assert r.returncode == 0, r.stderr
    plain = committed_row_ids(kafka, "al")
    assert plain.keys() == want.keys() and sum(plain.values()) > len(want)


def _topics(kafka: str, *names: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:  # the records are stamped years ago: kept (Kafka deletes by timestamp otherwise)
        admin.create_topics([NewTopic(t, 2, 1, topic_configs={"retention.ms": "-1"})
                             for t in names])
    finally:
        admin.close()


def test_turned_on_after_a_run_without_it_sends_nothing_again(
        kafka: str, tmp_path: Path) -> None:
    """A run with the option killed before its first snapshot (a marker 0 only), one without
    it to the end, one with it: exactly-once starts at that snapshot, no epoch is sent
    again (before: every row twice)."""
    _topics(kafka, "xt", "xt-lab")
    produce(kafka, [(("xt" if m[0] == "ev" else "xt-lab"), *m[1:])
                    for m in labelled_stream(420, 0, T0, seed=17)])
    out, ckpt = tmp_path / "t", tmp_path / "ckpt-t"
    argv = [a.replace("/xo", "/xt") for a in _argv(kafka, out, ckpt, "tg")]
    on = [*argv[:argv.index("--")], "--kafka-exactly-once", *argv[argv.index("--"):]]
    r = run_cli(on, env={**_env(), CRASH_ENV: "learn:60"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert not (ckpt / "HEAD").exists()
    for a in (argv, on):
        r = run_cli(a, env=_env())
        assert r.returncode == 0, r.stderr
    files = outputs(out)
    want = Counter(i for name in OUTPUTS for i in files[name].column("row_id").to_pylist())
    got = committed_row_ids(kafka, "tg")
    assert got == want, f"{sum(got.values())} messages for {len(want)} rows"


def test_exactly_once_needs_its_checkpoint_and_the_confluent_client(
        kafka: str, tmp_path: Path) -> None:
    argv = _argv(kafka, tmp_path / "o", tmp_path / "c", "np", "--kafka-exactly-once")
    i = argv.index("--checkpoint")
    r = run_cli(argv[:i] + argv[i + 2:])
    assert r.returncode == 2 and "needs both" in r.stderr, r.stderr
    r = run_cli([*argv[:i], "--kafka-client", "kafka-python", *argv[i:]])
    assert r.returncode == 2 and "confluent-kafka client" in r.stderr, r.stderr
    r = run_cli([*argv[:i], "--snapshot-seconds", "10m", *argv[i:]])
    assert r.returncode == 2 and "--snapshot-seconds must be at most 225s" in r.stderr, r.stderr


def test_a_checkpoint_is_its_own_writer(tmp_path: Path) -> None:
    """The transactional id is made with the checkpoint and kept in it: a resume has the same
    (it fences the crashed writer), a checkpoint made again at the same path has another."""
    from kernelstream.kafka_client.names import checkpoint_id
    from kernelstream.kafka_client.transactions import TransactionalRows

    d = tmp_path / "ckpt"
    d.mkdir()
    first = checkpoint_id(str(d))
    assert first.startswith("kernelstream-") and checkpoint_id(str(d)) == first
    (d / "KAFKA_ID").unlink()
    assert checkpoint_id(str(d)) != first
    # the id its snapshots recorded wins: a lost file is written again, another is refused
    (d / "KAFKA_ID").unlink()
    assert checkpoint_id(str(d), first) == first and checkpoint_id(str(d)) == first
    (d / "KAFKA_ID").write_text("kernelstream-other\n")
    with pytest.raises(ValueError, match="holds the transactional id kernelstream-other"):
        checkpoint_id(str(d), first)
    # Kafka holding a later epoch of it than its snapshot (restored from an older copy)
    rows = TransactionalRows.__new__(TransactionalRows)
    rows.markers, rows._slots, rows._cur = "p-epochs", [None, None], 0
    with pytest.raises(RuntimeError, match="restored from an older copy"):
        rows.recover(7, 5, lambda e: [])
    # no marker of a checkpoint that was sending exactly once: its first run made one before
    # any snapshot, so the topic or the id was lost; sending only the newest would drop the
    # epochs a crash kept out of Kafka (before: marker 5 alone, silently)
    rows.ident = "kernelstream-x"
    with pytest.raises(RuntimeError, match="has no epoch marker of this checkpoint"):
        rows.recover(None, 5, lambda e: [])


def test_a_lost_id_file_is_restored_from_the_snapshot(kafka: str, tmp_path: Path) -> None:
    """A crash between a snapshot and its Kafka transaction, then the checkpoint's KAFKA_ID
    lost: the resume takes the id its snapshots recorded, finds its markers, sends the
    crashed epoch, and the consumer sees every row once (before: a new id found no marker,
    and the crashed epoch's rows never reached Kafka)."""
    _topics(kafka, "xl", "xl-lab")
    produce(kafka, [(("xl" if m[0] == "ev" else "xl-lab"), *m[1:])
                    for m in labelled_stream(300, 0, T0, seed=19)])
    out, ckpt = tmp_path / "l", tmp_path / "ckpt-l"
    argv = [a.replace("/xo", "/xl") for a in _argv(kafka, out, ckpt, "lo",
                                                   "--kafka-exactly-once")]
    r = run_cli(argv, env={**_env(), CRASH_ENV: "kafka-commit:2"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    ident = (ckpt / "KAFKA_ID").read_text().strip()
    (ckpt / "KAFKA_ID").unlink()
    r = run_cli(argv, env=_env())
    assert r.returncode == 0, r.stderr
    assert (ckpt / "KAFKA_ID").read_text().strip() == ident
    files = outputs(out)
    want = Counter(i for name in OUTPUTS for i in files[name].column("row_id").to_pylist())
    got = committed_row_ids(kafka, "lo")
    assert got == want, (f"{sum(got.values())} messages for {len(want)} rows: "
                         f"{len(want.keys() - got.keys())} missing")
