"""``--scale-target auto`` on ``kernelstream stream`` (a regression): a fresh stream
standardises the target by the mean and standard deviation of the targets among its first
records (labelled events, ``label:Y`` records and its ``--labels`` topic's records, read once
with ``gamma=auto``); its learners learn ``(y - mean) / std`` and every output stays in the
target's units, so the outputs equal the reference loop's with that target. The snapshot
records it: a resumed stream keeps it although its own first records would give another, and
reads nothing; ``--scale-target none`` cannot continue such models, and learns a fresh
stream's targets as they come.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from test_stream import (
    T0,
    Message,
    assert_same,
    create_topics,
    labelled_stream,
    outputs,
    produce,
    reap,
    reference_records,
    reference_tables,
    run_cli,
    spec_for,
    start_cli,
    stream_argv,
)

from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.kafka_client import local_broker
from kernelstream.pipelines import cli
from kernelstream.pipelines.live import stream_width
from kernelstream.pipelines.live.stream_config import StreamConfig

_NUMBER = re.compile(rb"^[-+]?[0-9.]+$")


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


def regression(msgs: Sequence[Message], topic: str, base: float,
               spread: float) -> list[Message]:
    """``msgs`` (german's ±1 labels) on ``topic`` and ``topic-lab`` with every label ``y``
    written as the target ``base + spread * y + i % 7`` (far from unit scale)."""
    out = []
    for i, (t, p, k, v, ts) in enumerate(msgs):
        def target(tok: bytes, i: int = i) -> bytes:
            return repr(base + spread * float(tok) + i % 7).encode()

        if t == "lab":
            v = target(v) if _NUMBER.match(v) else v
        elif v.startswith(b"label:"):
            v = b"label:" + target(v[6:]) if _NUMBER.match(v[6:]) else v
        else:
            tok, sep, rest = v.partition(b" ")
            v = target(tok) + sep + rest if _NUMBER.match(tok) else v
        out.append((topic if t == "ev" else f"{topic}-lab", p, k, v, ts))
    return out


def argv_for(broker: str, topic: str, tmp_path: Path,
             *extra: str) -> tuple[list[str], Path, Path]:
    """A checkpointed regression stream of ``topic`` (labels on ``topic-lab``), one model per
    entity, that stops 2 s after its last record: its argv, out and checkpoint folders."""
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    return stream_argv(
        broker, f"kafka://BROKER/{topic}", "--labels", f"kafka://BROKER/{topic}-lab",
        "--n-features", "24", "--task", "regression", "-l", "raker", "-p", "loss=square",
        "-p", "n_components=40", "--key-by", "id-prefix", "--label-ttl", "2s",
        "--metrics-window", "1s", "--seed", "3", "--out", str(out), "--checkpoint",
        str(ckpt), "--snapshot-every", "150", "--idle-stop", "2s", *extra), out, ckpt


def test_a_stream_standardises_its_target_and_a_restart_keeps_it(broker: str,
                                                                 tmp_path: Path) -> None:
    create_topics(broker, ["rg", "rg-lab"], 2)
    produce(broker, regression(labelled_stream(240, 0, T0, seed=7), "rg", 1000.0, 250.0))
    argv, out, ckpt = argv_for(broker, "rg", tmp_path)
    first = run_cli(argv)
    assert first.returncode == 0, first.stderr
    assert "kernelstream stream: standardising the target by the mean" in first.stderr
    assert "of the first" in first.stderr and "rows of rg,rg-lab" in first.stderr
    s1 = json.loads((out / "summary.json").read_text())
    t = s1["target_standardised"]
    assert s1["scale_target"] == "auto" and 750 < t["mean"] < 1250 and 200 < t["std"] < 300
    with SnapshotView.open(ckpt) as view:
        assert view.info()["configs"]["raker"]["target"] == [t["mean"], t["std"]]
    # predictions in the target's units: RMSE well below the target's spread
    assert s1["rmse"] is not None and s1["rmse"] < 2 * t["std"]

    # the next records alone would give another target: the resumed run keeps the recorded one
    produce(broker, regression(labelled_stream(200, 240, T0 + 60_000, seed=8), "rg", -50.0,
                               10.0))
    second = run_cli([*argv, "-q"])
    assert second.returncode == 0, second.stderr
    assert "standardising" not in second.stderr and "gamma=auto" not in second.stderr
    s2 = json.loads((out / "summary.json").read_text())
    assert s2["target_standardised"] == t
    # models that learnt a standardised target cannot go on with it as it comes
    refused = run_cli([*argv, "--scale-target", "none", "-q"])
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "drop --scale-target none to continue them" in refused.stderr
    spec = spec_for(argv)
    assert spec.configs[0].target == (t["mean"], t["std"])
    # both runs' outputs: those of one uninterrupted reference loop with the first target
    wanted, _ = reference_tables(reference_records(broker, ["rg", "rg-lab"], 2), spec)
    assert_same(outputs(out), wanted)
    labels = outputs(out)["outcomes"].column("label").to_numpy()
    assert labels.min() < 0 < 700 < labels.max()  # the labels as they came


def test_scale_target_none_learns_the_target_as_it_comes(broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["rn", "rn-lab"], 2)
    produce(broker, regression(labelled_stream(160, 0, T0, seed=9), "rn", 1000.0, 250.0))
    argv, out, _ = argv_for(broker, "rn", tmp_path, "--scale-target", "none")
    r = run_cli(argv)
    assert r.returncode == 0, r.stderr
    assert "standardising" not in r.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert (doc["scale_target"], doc["target_standardised"]) == ("none", None)
    spec = spec_for(argv)
    assert spec.configs[0].target is None
    wanted, _ = reference_tables(reference_records(broker, ["rn", "rn-lab"], 2), spec)
    assert_same(outputs(out), wanted)
    assert np.isfinite(doc["avg_loss"])


def test_scale_target_01_is_refused(tmp_path: Path) -> None:
    r = run_cli(["stream", "kafka://127.0.0.1:9/t", "--n-features", "3", "--task",
                 "regression", "--scale-target", "01", "--out", str(tmp_path / "o")])
    assert r.returncode == 2
    assert "--scale-target 01: a stream cannot read its target's range in advance" in r.stderr


def test_the_head_read_waits_for_labels_that_come_late(broker: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: the first 1,000 feature records are on the topic, their labels come a
    second later on the labels topic; the read goes on past the feature records until the
    topics are quiet, and the stream standardises by all 150 targets."""
    # fewer than 1,000 targets: the topics read to their end (quiet) end the read here
    monkeypatch.setattr(stream_width, "QUIET_S", 5.0)
    create_topics(broker, ["lt", "lt-lab"], 1)
    produce(broker, [("lt", 0, f"e{i}".encode(), f"? 1:{i % 7}.5 2:{i % 3}.0".encode(),
                      T0 + i) for i in range(1100)])
    labels = [("lt-lab", 0, f"e{i}".encode(), repr(100.0 + i).encode(), T0 + 5000 + i)
              for i in range(150)]
    argv = stream_argv(broker, "kafka://BROKER/lt", "--labels", "kafka://BROKER/lt-lab",
                       "--n-features", "2", "--task", "regression", "-l", "raker", "-p",
                       "loss=square", "--width-wait", "30s")
    config = StreamConfig.from_args(cli.build_parser().parse_args(argv))
    assert config.wants_target
    start = {("lt", 0): 0, ("lt-lab", 0): 0}
    later = threading.Timer(1.0, produce, (broker, labels))
    later.start()
    try:
        head = stream_width.first_rows(config, start, config.width_wait)
    finally:
        later.join()
    assert head.rows.shape[0] == 1000
    assert head.targets == [100.0 + i for i in range(150)]
    got = stream_width.resolve(config, start)
    y = np.array(head.targets)
    assert got.target == (float(y.mean()), float(y.std()))


@pytest.mark.parametrize("batch", [7, 500])
def test_the_head_read_takes_the_first_1000_targets_whatever_the_batches(
        broker: str, batch: int) -> None:
    """In process: 1,500 labels interleaved in time with 1,100 events (every tenth labelled
    itself), produced in small batches; the read takes exactly the first 1,000 targets in the
    stream's order (by timestamp over both topics), whatever the client's poll batches
    (``max_poll_records``), and the stream standardises by them."""
    topic = f"ft{batch}"
    create_topics(broker, [topic, f"{topic}-lab"], 1)
    events = [(topic, 0, f"e{i}".encode(),
               (f"{5000.0 + i!r}" if i % 10 == 0 else "?").encode()
               + f" 1:{i % 7}.5 2:{i % 3}.0".encode(), T0 + 10 * i) for i in range(1100)]
    labels = [(f"{topic}-lab", 0, f"x{i}".encode(), repr(100.0 + i).encode(), T0 + 10 * i + 5)
              for i in range(1500)]
    for lo in range(0, 1500, 50):  # small record batches on the log
        produce(broker, events[lo:lo + 50] + labels[lo:lo + 50])
    in_order = sorted([(ts, float(v.split(b" ")[0])) for _, _, _, v, ts in events
                       if not v.startswith(b"?")] + [(ts, float(v)) for *_, v, ts in labels])
    first = [v for _, v in in_order[:1000]]
    argv = stream_argv(broker, f"kafka://BROKER/{topic}", "--labels",
                       f"kafka://BROKER/{topic}-lab", "--n-features", "2", "--task",
                       "regression", "-l", "raker", "-p", "loss=square", "--width-wait", "60s",
                       "--kafka-option", f"max_poll_records={batch}")
    config = StreamConfig.from_args(cli.build_parser().parse_args(argv))
    start = {(topic, 0): 0, (f"{topic}-lab", 0): 0}
    head = stream_width.first_rows(config, start, config.width_wait)
    assert head.targets == first
    assert head.rows.shape[0] == 1000
    y = np.array(first)
    assert stream_width.resolve(config, start).target == (float(y.mean()), float(y.std()))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_head_read_is_the_documented_stop(broker: str, tmp_path: Path,
                                                            sig: signal.Signals) -> None:
    """A SIGINT or SIGTERM while the up-front read waits for the first records (an empty
    topic): exit 130 with the one "stopped" line, saying the stream had not started; nothing
    written, no snapshot."""
    topic = f"hr{sig.name.lower()}"
    create_topics(broker, [topic, f"{topic}-lab"], 1)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    proc = start_cli(stream_argv(
        broker, f"kafka://BROKER/{topic}", "--labels", f"kafka://BROKER/{topic}-lab",
        "--n-features", "2", "--task", "regression", "-l", "raker", "-p", "loss=square",
        "--width-wait", "120s",
        "--out", str(out), "--checkpoint", str(ckpt)))
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        line = ""
        while "waiting for the first records" not in line:  # the read's progress line
            assert time.monotonic() < deadline and proc.poll() is None, line
            line = proc.stderr.readline()
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        reap(proc)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"kernelstream stream: stopped ({sig.name}) before the stream started: 0 records, "
        f"no snapshot yet (nothing to resume from) in {ckpt}")
    assert "interrupted" not in stderr and not (out / "summary.json").exists()
