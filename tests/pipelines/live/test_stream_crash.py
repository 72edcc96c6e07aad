"""``kill -9`` a running ``kernelstream stream`` at the dangerous moments, restart it on the
same checkpoint each time, and compare with an uninterrupted run of the same topic.

The kills come from the stream itself (``KERNELSTREAM_CRASH_AT=POINT:N``, see
``transforms.live.stream.CRASH_POINTS``): right after start, mid-bundle in the learner, after a
Kafka output flush, after the output files are written but before the snapshot commit, after
the commit but before the files are published; plus one from outside at a random moment.
Afterwards the outputs equal the uninterrupted run's: the Parquet files exactly (each row once),
the Kafka output topics once deduplicated by message key (= ``row_id``); nothing is missing;
the learners' states in the last snapshot are byte-identical (all but the wall-clock
seconds they carry); and the accounting totals of all runs equal the uninterrupted run's and
add up (``stream_accounting.assert_accounting``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stream_accounting import assert_accounting
from test_stream import (
    T0,
    WALL_CLOCK,
    create_topics,
    labelled_stream,
    outputs,
    produce,
    run_cli,
    start_cli,
    stream_argv,
    wait_for_records,
)

from kernelstream.engine.live.rows import OUTPUTS
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.engine.live.state import decode_state, encode_state
from kernelstream.kafka_client import local_broker
from kernelstream.transforms.live.stream import CRASH_ENV

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


CRASHES = ["start:1", "learn:90", "kafka-flush:3", "before-commit:2", "after-commit:1"]


def _argv(hp: str, out: Path, ckpt: Path, prefix: str) -> list[str]:
    return stream_argv(hp, "kafka://BROKER/cr", "--labels", "kafka://BROKER/cr-lab",
                       "--n-features", "24", "-l", "b=bogd", "-p", "b.budget=20", "-l",
                       "perceptron", "--key-by", "id-prefix", "--label-ttl", "2s",
                       "--metrics-window", "1s", "--out", str(out), "--checkpoint", str(ckpt),
                       "--kafka-out", f"kafka://BROKER/{prefix}", "--snapshot-every", "100",
                       "--idle-stop", "3s", "-q", "--", "--max_records=40")


def _kafka_rows(hp: str, prefix: str) -> tuple[dict[str, dict[str, Any]], int]:
    """The output topics' messages by key (the last of duplicates: they are equal) and the
    number of messages in all."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=hp, enable_auto_commit=False, group_id=None)
    topics = [f"{prefix}-{n.replace('_', '-')}" for n in OUTPUTS]
    tps = [TopicPartition(t, p) for t in topics for p in c.partitions_for_topic(t) or ()]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    rows: dict[str, dict[str, Any]] = {}
    total = 0
    idle = time.monotonic()
    while time.monotonic() - idle < 2.0:
        for recs in c.poll(timeout_ms=200).values():
            idle = time.monotonic()
            for r in recs:
                total += 1
                doc = {k: v for k, v in json.loads(r.value).items() if k not in WALL_CLOCK}
                key = r.key.decode()
                assert rows.get(key, doc) == doc, f"{key}: two different messages"
                rows[key] = doc
    c.close()
    return rows, total


def _states(ckpt: Path) -> tuple[dict[str, bytes], dict[tuple[str, int], int]]:
    """Every model's state bytes with the wall-clock seconds zeroed, and the offsets."""
    with SnapshotView.open(ckpt) as view:
        out = {}
        for key, data in view.items():
            st = decode_state(data, 2000)
            st.seconds = 0.0
            st.window.seconds = 0.0
            out[key] = encode_state(st)
        return out, view.offsets()


def test_kill_at_any_moment_then_restart_equals_one_run(broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["cr", "cr-lab"], 2)
    msgs = [(("cr" if m[0] == "ev" else "cr-lab"), *m[1:])
            for m in labelled_stream(420, 0, T0, seed=11)]
    produce(broker, msgs)

    # the uninterrupted run
    out_a, ckpt_a = tmp_path / "a", tmp_path / "ckpt-a"
    r = run_cli(_argv(broker, out_a, ckpt_a, "a"))
    assert r.returncode == 0, r.stderr

    # the same, killed again and again
    out_b, ckpt_b = tmp_path / "b", tmp_path / "ckpt-b"
    argv = _argv(broker, out_b, ckpt_b, "b")
    epochs = []
    for crash in CRASHES:
        r = run_cli(argv, env={**_env(), CRASH_ENV: crash})
        assert r.returncode == -signal.SIGKILL, (crash, r.returncode, r.stderr)
        epochs.append(SnapshotView.open(ckpt_b).head if (ckpt_b / "HEAD").exists() else None)
    # and once from outside, at a random moment once it reads
    delay = random.uniform(0.0, 1.5)
    proc = start_cli(argv, env=_env())
    try:
        wait_for_records(proc, out_b, 1)
        time.sleep(delay)
        proc.kill()
    finally:
        proc.communicate()
    r = run_cli(argv, env=_env())  # to the end of the topic
    assert r.returncode == 0, r.stderr
    assert epochs[-1] is not None and epochs[-1] >= 2, epochs  # the killed runs made progress
    print(f"epochs after each kill: {epochs}; random kill {delay:.2f} s after the first read")

    got, want = outputs(out_b), outputs(out_a)
    for name in OUTPUTS:
        ids = got[name].column("row_id").to_pylist()
        assert len(ids) == len(set(ids)), f"{name}: a row published twice"
        assert got[name].num_rows == want[name].num_rows > 0 or name == "unlabeled", name
        assert got[name].equals(want[name]), f"{name} differ (random kill after {delay:.2f} s)"
    ka, na = _kafka_rows(broker, "a")
    kb, nb = _kafka_rows(broker, "b")
    assert kb == ka, "Kafka outputs differ once deduplicated by row_id"
    assert len(ka) == sum(t.num_rows for t in want.values())
    assert na == len(ka) and nb > len(kb)  # duplicates only where killed (and it was)
    # gamma=auto (no width given): estimated once from the topic's first records, and the
    # killed and resumed runs continued with that number
    with SnapshotView.open(ckpt_a) as va, SnapshotView.open(ckpt_b) as vb:
        ia, ib = va.info(), vb.info()
    assert ia["widths"]["source"] == "auto" and ia["widths"]["gamma"] != 0.5
    assert ia["configs"]["b"]["params"]["gamma"] == ia["widths"]["gamma"]
    assert ib["configs"] == ia["configs"] and ib["widths"] == ia["widths"]
    sa, oa = _states(ckpt_a)
    sb, ob = _states(ckpt_b)
    assert ob == oa
    assert sb.keys() == sa.keys() and len(sa) == 8
    for key in sa:
        assert sb[key] == sa[key], key
    # the counts of all the killed runs and the last one, as the snapshot keeps them, are the
    # uninterrupted run's, and add up on the files
    assert assert_accounting(out_b) == assert_accounting(out_a)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != CRASH_ENV}
