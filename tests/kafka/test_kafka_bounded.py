"""The bounded replay of a Kafka topic (``kernelstream replay kafka://...``) as a production
job: it ends at a snapshot of the log's end however busy the topic, one writer per checkpoint
directory, resume offsets checked against the log, idempotent Kafka outputs, orphaned
``--follow`` outputs removed, saved states read by key, a down broker and Ctrl-C reported in
one line.

The end-to-end tests run the tansu broker of the ``test`` extra
(``kernelstream.kafka_client.local_broker``).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _helpers import TP, Msg, ScriptedConsumer, consume, new_topic, output_columns, produce

from kernelstream.engine.replay import checkpoints as ckpts
from kernelstream.kafka_client import (
    ID_PARTITION_SHIFT,
    KafkaReadOptions,
    KafkaTopic,
    SourcePosition,
    iter_topic_records,
    partition_for,
)
from kernelstream.pipelines.cli import main

OFFSET_MASK = (1 << ID_PARTITION_SHIFT) - 1

# -- without a broker -----------------------------------------------------------------------------


def _default_sigint() -> None:
    """SIGINT as a terminal leaves it, in a child about to run the CLI."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_read_stops_at_the_snapshot_not_at_idle() -> None:
    """With stop offsets the read ends as soon as every partition reached its end (here long
    before ``idle_seconds``), drops records written after the snapshot, pauses finished
    partitions, and a finished partition does not hold the merge back."""
    opts = KafkaReadOptions(KafkaTopic("h:1", "t"), idle_seconds=30, poll_ms=1,
                            stop=((0, 3), (1, 1)))
    # partition 1 is done after its first record; partition 0 has a record past its end
    fake = ScriptedConsumer([{1: [(0, 5)]}, {0: [(0, 10), (1, 20)]}, {0: [(2, 30), (3, 40)]},
                      {0: [(4, 50)]}], 2)
    t0 = time.monotonic()
    got = [(r.partition, r.offset) for r in
           iter_topic_records(opts, merge=True, consumer_factory=lambda o: fake)]
    assert time.monotonic() - t0 < 5
    assert got == [(1, 0), (0, 0), (0, 1), (0, 2)]
    assert sorted(fake.paused) == [0, 1] and fake.batches == [{0: [(4, 50)]}]
    # resumed at its end: nothing to read, no poll at all
    fake = ScriptedConsumer([{0: [(3, 1)]}], 1)
    opts = KafkaReadOptions(KafkaTopic("h:1", "t"), idle_seconds=30, stop=((0, 3),))
    assert list(iter_topic_records(opts, merge=False, consumer_factory=lambda o: fake,
                                   start={0: 3})) == []
    assert fake.polls == 0


def test_offset_out_of_range_is_an_error() -> None:
    """The consumer never resets a position outside the log (auto_offset_reset is "none" and
    cannot be set); the fetch error becomes OffsetOutOfLog, one line with the log's range."""
    from kafka.errors import OffsetOutOfRangeError

    from kernelstream.engine.live.snapshot.store import OffsetOutOfLog
    from kernelstream.kafka_client import READ_DEFAULTS, client_settings

    assert READ_DEFAULTS["auto_offset_reset"] == "none"
    with pytest.raises(ValueError, match="set by kernelstream"):
        client_settings(["auto_offset_reset=earliest"])

    class Gone(ScriptedConsumer):
        def poll(self, timeout_ms: int = 0) -> dict[Any, list[Msg]]:
            raise OffsetOutOfRangeError({TP("t", 0): 70})

        def beginning_offsets(self, tps: list[Any]) -> dict[Any, int]:
            return dict.fromkeys(tps, 0)

        def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
            return dict.fromkeys(tps, 5)

    opts = KafkaReadOptions(KafkaTopic("h:1", "t"), stop=((0, 80),))
    with pytest.raises(OffsetOutOfLog, match="cannot resume t/0 at offset 70: its log now "
                       "runs from offset 0 to 5"):
        list(iter_topic_records(opts, merge=False, consumer_factory=lambda o: Gone([], 1),
                                start={0: 70}))


def test_saved_states_are_read_by_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """States files are written in row groups of about GROUP_BYTES; a lookup reads one group
    (the index holds keys only); it pickles as its file names; an old checkpoint file in one
    row group reads the same."""
    monkeypatch.setattr(ckpts, "GROUP_BYTES", 2500)
    ck = ckpts.Checkpoint(str(tmp_path), 1)
    states = {f"c#0@u{i:03d}": bytes([i % 256]) * 1000 for i in range(40)}
    ckpts.write_states(ck, iter(states.items()), "a")
    (path,) = ck.state_files()
    assert pq.ParquetFile(path).num_row_groups == 14  # 3 states (3 KB) a group, 40 states
    saved = ckpts.SavedStates.of(ck)
    clone = pickle.loads(pickle.dumps(saved))
    assert clone.files == saved.files and clone._index is None  # nothing read yet
    assert saved.get("c#0@u017") == states["c#0@u017"] and len(saved._states) <= 3
    assert saved.get("missing") is None and len(saved) == 40 and "c#0@u000" in saved
    assert all(saved.get(k) == v for k, v in reversed(states.items()))
    assert dict(ckpts.read_states(ck)) == states
    # a file written before the row-group limit: one group of everything
    old = tmp_path / "ckpt-000002-streams-old.parquet"
    pq.write_table(pa.Table.from_pylist([{"key": k, "state": v} for k, v in states.items()],
                                        schema=ckpts.STATES_SCHEMA), old)
    legacy = ckpts.SavedStates([str(old)])
    assert legacy.get("c#0@u039") == states["c#0@u039"]
    assert ckpts.SavedStates.shared(saved.files) is ckpts.SavedStates.shared(saved.files)


def test_broker_down_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unreachable source or --kafka-out broker: one line, exit 2, in seconds, before any
    pipeline starts."""
    for args, what in ((["kafka://127.0.0.1:1/t", "--n-features", "3"], ""),
                       (["german", "--kafka-out", "kafka://127.0.0.1:1/x"], "--kafka-out")):
        t0 = time.monotonic()
        rc = main(["replay", *args, "--runner", "direct", "--out", str(tmp_path / "o"), "-q"])
        elapsed = time.monotonic() - t0
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err
        assert "cannot connect to the Kafka broker(s) 127.0.0.1:1" in err[0] and what in err[0]
        assert elapsed < 15


def test_ctrl_c_on_the_default_runner(tmp_path: Path) -> None:
    """SIGINT while the direct runner learns: exit 130 and one line, no traceback."""
    rng = np.random.default_rng(0)
    X = rng.random((20000, 10))
    y = np.where(X[:, 0] + X[:, 1] > 1, 1, -1)
    path = tmp_path / "big.libsvm"
    path.write_text("".join(f"{t:+d} " + " ".join(f"{j + 1}:{v:.3f}" for j, v in enumerate(x))
                            + "\n" for x, t in zip(X, y, strict=True)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path), "--learner",
         "bogd", "-p", "budget=1000", "-R", "50", "--runner", "direct",
         "--out", str(tmp_path / "o")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a fatal error says why on stderr (glibc writes its aborts to the terminal otherwise;
        # one full run here ended by SIGABRT with nothing said)
        env={**os.environ, "LIBC_FATAL_STDERR_": "1", "PYTHONFAULTHANDLER": "1"},
        # SIGINT as a terminal leaves it (a shell that runs the suite in the background ignores it,
        # and the child would inherit that)
        preexec_fn=_default_sigint)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first progress line: learning is under way
            if line.startswith("[progress]"):
                break
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [ln for ln in rest.splitlines() if not ln.startswith("[progress]")]
    assert proc.returncode == 130 and lines == ["kernelstream: interrupted"], rest[-3000:]


# -- against a broker -----------------------------------------------------------------------------


def _rows(n: int, seed: int = 0, keys: int = 0) -> list[tuple[bytes | None, bytes]]:
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    y = np.where(X[:, 0] + X[:, 1] > 1, 1, -1)
    return [(f"user{i % keys}".encode() if keys else None,
             (",".join(f"{v:.4f}" for v in x) + f",{t}").encode())
            for i, (x, t) in enumerate(zip(X, y, strict=True))]


def _csv_args(url: str, *more: str) -> list[str]:
    return ["replay", url, "--format", "csv", "--learner", "pa-i", "-q", *more]


def test_busy_topic_ends_at_the_snapshot_and_follow_continues(broker: str,
                                                              tmp_path: Path) -> None:
    """One message every 0.2 s while `--follow` runs with --kafka-idle 2 (which never went
    idle before): each run ends in seconds and learns exactly the records up to the end
    offsets it started at (recorded as ``read_to`` in its checkpoint), the next run the
    rest; the output folder of a run that never committed is removed first."""
    topic = new_topic(broker)
    rows = _rows(1000, seed=1)
    produce(broker, topic, rows[:60])
    stop = threading.Event()

    def trickle() -> None:
        from kafka import KafkaProducer

        prod = KafkaProducer(bootstrap_servers=broker, linger_ms=0)
        for key, value in rows[60:]:
            prod.send(topic, key=key, value=value)
            prod.flush()
            if stop.wait(0.2):
                break
        prod.close()

    ck, out = tmp_path / "ck", tmp_path / "o"
    orphan = out / "ckpt-000009" / "predictions"  # a crashed run's outputs
    orphan.mkdir(parents=True)
    (orphan / "part-x.parquet").write_bytes(b"PAR1")
    # the crashed run had marked its folder, with this checkpoint: this run continues it
    from kernelstream.pipelines.run_folder import write_marker

    write_marker(str(out), "replay", checkpoint=str(ck))
    writer = threading.Thread(target=trickle)
    writer.start()
    try:
        t0 = time.monotonic()
        rc = main(_csv_args(f"kafka://{broker}/{topic}", "--kafka-idle", "2",
                            "--kafka-max-seconds", "40", "--checkpoint", str(ck),
                            "--follow", "1", "--follow-runs", "2", "--runner", "direct",
                            "--out", str(out)))
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        writer.join()
    assert rc == 0 and elapsed < 25, elapsed
    assert not (out / "ckpt-000009").exists()
    lo, ends = 0, []
    for n in (1, 2):
        info = json.loads((ck / f"ckpt-{n:06d}.committed").read_text())
        ((part, end),) = info["read_to"]
        pos = SourcePosition.from_json(json.loads((ck / f"ckpt-{n:06d}.source.json")
                                                  .read_text()))
        assert part == 0 and pos.offsets == {0: end}
        pred = output_columns(out / f"ckpt-{n:06d}", "predictions")
        assert sorted(int(i) & OFFSET_MASK for i in pred["id"]) == list(range(lo, end))
        lo = end
        ends.append(end)
    assert 60 <= ends[0] < ends[1]  # the producer kept writing between the runs


def test_one_writer_per_checkpoint_and_ctrl_c_on_follow(broker: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """`--follow` holds the checkpoint directory for the whole command: a second run fails at
    once (one line, exit 2), between the follower's runs too. SIGINT stops the follower with
    exit 130 and one line, and frees the directory."""
    topic = new_topic(broker)
    produce(broker, topic, _rows(50, seed=2))
    url = f"kafka://{broker}/{topic}"
    ck = tmp_path / "ck"
    follower = subprocess.Popen(
        [sys.executable, "-m", "kernelstream.pipelines.cli",
         *_csv_args(url, "--kafka-idle", "1", "--checkpoint", str(ck), "--follow", "0.5",
                    "--runner", "loop", "--out", str(tmp_path / "f"))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # SIGINT as a terminal leaves it (a shell that runs the suite in the background ignores it,
        # and the child would inherit that)
        preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + 60
        while not (ck / "ckpt-000002.committed").exists():  # two runs: between runs now
            assert follower.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        for runner in ("direct", "loop"):
            t0 = time.monotonic()
            rc = main(_csv_args(url, "--checkpoint", str(ck), "--runner", runner,
                                "--out", str(tmp_path / "second")))
            elapsed = time.monotonic() - t0
            err = capsys.readouterr().err.strip().splitlines()
            assert rc == 2 and len(err) == 1 and elapsed < 3, (err, elapsed)
            assert f"is in use by another run (pid {follower.pid} " in err[0]
        assert (not (tmp_path / "second").exists()
                or not output_columns(tmp_path / "second", "predictions"))
        follower.send_signal(signal.SIGINT)
        _, err_text = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    lines = err_text.splitlines()
    assert follower.returncode == 130, err_text[-3000:]
    assert len(lines) == 2 and lines[0].startswith("following "), err_text[-3000:]
    assert lines[1].startswith("kernelstream: interrupted after ")
    # the lock went with the process: the directory is usable again
    assert main(_csv_args(url, "--checkpoint", str(ck), "--runner", "loop",
                          "--out", str(tmp_path / "after"))) == 0


def test_resume_offset_outside_the_log_fails_at_once(broker: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    """The topic was deleted and recreated shorter: the checkpoint's offset lies past the
    log's end; the run fails before its pipeline starts (one line, exit 2) and commits
    nothing."""
    from kafka.admin import KafkaAdminClient

    topic = new_topic(broker)
    produce(broker, topic, _rows(40, seed=3))
    url = f"kafka://{broker}/{topic}"
    ck = tmp_path / "ck"
    assert main(_csv_args(url, "--checkpoint", str(ck), "--runner", "loop",
                          "--out", str(tmp_path / "o1"))) == 0
    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.delete_topics([topic])
    admin.close()
    time.sleep(0.3)
    new_topic(broker, name=topic)
    produce(broker, topic, _rows(5, seed=4))
    capsys.readouterr()
    t0 = time.monotonic()
    rc = main(_csv_args(url, "--checkpoint", str(ck), "--runner", "direct",
                        "--out", str(tmp_path / "o2")))
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and elapsed < 10, (err, elapsed)
    assert (f"cannot resume {topic}/0 at offset 40: its log now runs from offset 0 to 5"
            in err[0])
    assert [c.number for c in ckpts.committed(str(ck))] == [1]


def test_kafka_outputs_have_deterministic_keys(broker: str, tmp_path: Path) -> None:
    """Two runs of the same replay (a rerun after a crash) write every row twice as the same
    message: same key (the row's identity), same bytes (metrics: same key), same partition,
    the one Kafka's partitioner gives the row's entity."""
    topic = new_topic(broker, partitions=2)
    msgs = _rows(300, seed=5, keys=5)
    msgs.insert(40, (b"user1", b"not,a,row"))
    produce(broker, topic, msgs)
    prefix = f"run-{uuid.uuid4().hex[:8]}"
    for name in ("predictions", "metrics", "dead-letters"):
        new_topic(broker, partitions=3, name=f"{prefix}-{name}")
    for i in range(2):
        assert main(_csv_args(f"kafka://{broker}/{topic}", "--key-by", "key", "--kafka-idle",
                              "1", "--kafka-out", f"kafka://{broker}/{prefix}", "--runner",
                              "loop", "--out", str(tmp_path / f"o{i}"))) == 0
    pred = output_columns(tmp_path / "o0", "predictions")
    for name, n in (("predictions", 300), ("dead-letters", 1), ("metrics", None)):
        got: dict[bytes, list[tuple[int, bytes]]] = defaultdict(list)
        for part, key, value in consume(broker, f"{prefix}-{name}"):
            got[key].append((part, value))
        assert all(len(v) == 2 for v in got.values())
        if n is not None:
            assert len(got) == n
            assert all(a == b for a, b in got.values())  # byte-identical duplicates
        for (part, value), _ in got.values():
            row = json.loads(value)
            assert part == partition_for(row.get("entity") or row["source"], [0, 1, 2])
    keys = {f"{k}/p/{p}".encode() for k, p in zip(pred["key"], pred["position"], strict=True)}
    assert keys == {key for _, key, _ in consume(broker, f"{prefix}-predictions")}
