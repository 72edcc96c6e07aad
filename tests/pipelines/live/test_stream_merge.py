"""How the stream's reader orders the records of several partitions (``--merge``).

A model fed by several partitions (one per configuration without ``--key-by``) has one
event-time clock. Read a partition group at a time (``--merge partition``), one group's backlog
moved that clock past the other group's events before their labels came, and they expired
early; with ``--merge all`` (the default) every partition is one timestamp order, so the
stream's outputs are the reference loop's over that one merge, whatever the reader's timing.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_accounting import assert_accounting
from test_stream import (
    assert_same,
    create_topics,
    outputs,
    produce,
    read_back,
    reference_records,
    reference_tables,
    run_cli,
    spec_for,
    stream_argv,
)

from kernelstream import data
from kernelstream.engine.live.merge import merged
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.kafka_client import local_broker
from kernelstream.kafka_client.partitions import ALL, PartitionGroup, partition_groups

T0 = 1_700_000_000_000
TTL = "3s"


@pytest.fixture(scope="module")
def broker():  # type: ignore[no-untyped-def]
    with local_broker() as hp:
        yield hp


# -- the groups ----------------------------------------------------------------------------------


INFO = {("ev", 0): (0, 10), ("ev", 1): (2, 7), ("lab", 0): (0, 4), ("lab", 1): (1, 9)}


def test_merge_all_is_one_group_of_every_partition_topic_by_topic() -> None:
    (g,) = partition_groups(INFO, ["ev", "lab"], {("ev", 1): 5})
    assert g == PartitionGroup(ALL, ("ev", "lab"), (0, 5, 0, 1), None, 2)
    assert g.partitions == [("ev", 0), ("ev", 1), ("lab", 0), ("lab", 1)]
    (b,) = partition_groups(INFO, ["ev", "lab"], None,
                            {("ev", 0): 9, ("ev", 1): 7, ("lab", 0): 3, ("lab", 1): 2})
    assert b.stop == (9, 7, 3, 2) and b.start == (0, 2, 0, 1)
    # a group per partition number, as before
    per = partition_groups(INFO, ["ev", "lab"], {("ev", 1): 5}, merge="partition")
    assert per == [PartitionGroup(0, ("ev", "lab"), (0, 0)),
                   PartitionGroup(1, ("ev", "lab"), (5, 1))]
    assert [p.partitions for p in per] == [[("ev", 0), ("lab", 0)], [("ev", 1), ("lab", 1)]]
    # topics of one partition: the same group either way (the reader's cache key too)
    one = {("ev", 0): (0, 3), ("lab", 0): (0, 3)}
    assert (partition_groups(one, ["ev", "lab"])
            == partition_groups(one, ["ev", "lab"], merge="partition")
            == [PartitionGroup(0, ("ev", "lab"), (0, 0))])
    with pytest.raises(ValueError, match="merge 'any': expected one of all, partition"):
        partition_groups(INFO, ["ev", "lab"], merge="any")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 4))
def test_one_merge_keeps_each_groups_own_order(seed: int, n_topics: int, n_parts: int) -> None:
    """Restricted to partition p, the merge of every partition (topic by topic) is the merge
    of p's group alone: a model fed by one group sees the same records in the same order
    under either --merge (ties of timestamp included)."""
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(n_topics)]
    parts = {(t, p): [SourceRecord(t, p, o, rng.randint(0, 30), None, b"")
                      for o in range(rng.randint(0, 12))]
             for t in topics for p in range(n_parts)}
    everything = merged([parts[(t, p)] for t in topics for p in range(n_parts)])
    for p in range(n_parts):
        assert ([r for r in everything if r.partition == p]
                == merged([parts[(t, p)] for t in topics]))


# -- a backlog over two partitions ----------------------------------------------------------------


def backlog(n: int, seed: int) -> list[tuple[str, int, bytes, bytes, int]]:
    """``n`` unlabelled german events, 30 ms apart, alternately on partitions 0 and 1 of
    ``ev`` (one shared model: no --key-by), each labelled on the same partition of ``lab``
    0-2.5 s later; 5 % of them stamped 20 s late (written where they arrive). Each partition
    in the order a live producer writes it."""
    X, y = data.load_dataset("german")
    rng = random.Random(seed)
    ev: list[tuple[int, tuple[str, int, bytes, bytes, int]]] = []
    lab: list[tuple[int, tuple[str, int, bytes, bytes, int]]] = []
    for i in range(n):
        part, row, arrive = i % 2, i % len(y), T0 + 30 * i
        ts = arrive - 20_000 if rng.random() < 0.05 else arrive
        feats = " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(X[row]) if v != 0)
        key = f"e{i}".encode()
        ev.append((arrive, ("ev", part, key, f"? {feats}".encode(), ts)))
        delay = rng.randint(0, 2500)
        lab.append((arrive + delay, ("lab", part, key, f"{int(y[row]):+d}".encode(),
                                     ts + delay)))
    return [m for _, m in sorted(ev + lab, key=lambda am: (am[1][0], am[1][1], am[0]))]


ARGS = ("kafka://BROKER/ev", "--labels", "kafka://BROKER/lab", "--n-features", "24",
        "-l", "bogd", "-p", "budget=50", "--label-ttl", TTL, "--metrics-window", "2s",
        "--seed", "5", "--idle-stop", "2s", "-q")


def test_a_shared_models_backlog_over_two_partitions_expires_by_one_clock(
        broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["ev", "lab"], 2)
    produce(broker, backlog(1200, seed=3))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    # small reader rounds: the groups would take turns every ~50 records if read apart
    argv = stream_argv(broker, *ARGS, "--out", str(out), "--checkpoint", str(ckpt),
                       "--", "--max_records=100", "--call_ms=0")
    r = run_cli(argv)
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["merge"] == "all"
    assert SnapshotView.open(ckpt).info()["stream"]["merge"] == "all"
    assert_accounting(out)
    spec = spec_for(argv[: argv.index("--")])
    want, _ = reference_tables(reference_records(broker, ["ev", "lab"], 2), spec)
    got = outputs(out)
    assert_same(got, want)
    # the scenario tells the two apart: one group after the other (what reading a group at
    # a time does to a backlog) expires far more of the shared model's events
    apart, _ = reference_tables(reference_records(broker, ["ev", "lab"], 2, "partition"), spec)
    assert apart["unlabeled"].num_rows > 1.5 * got["unlabeled"].num_rows
    assert got["outcomes"].num_rows > apart["outcomes"].num_rows
    # every event: learnt or expired (none pending once the labels are read: the TTL passed)
    n_ev = sum(len(p) for p in read_back(broker, "ev", 2))
    assert got["predictions"].num_rows == n_ev
    assert got["outcomes"].num_rows + got["unlabeled"].num_rows + summary["pending"] == n_ev


def test_a_resume_keeps_the_recorded_merge_unless_told(broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["rev", "rlab"], 2)
    msgs = [(("rev" if m[0] == "ev" else "rlab"), *m[1:]) for m in backlog(200, seed=4)]
    produce(broker, msgs)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    base = [a.replace("/ev", "/rev").replace("/lab", "/rlab") for a in ARGS]
    argv = stream_argv(broker, *base, "--out", str(out), "--checkpoint", str(ckpt))
    first = run_cli([*argv, "--merge", "partition"])
    assert first.returncode == 0, first.stderr
    assert json.loads((out / "summary.json").read_text())["merge"] == "partition"
    # no --merge: the checkpoint's (older checkpoints, which record none: partition)
    second = run_cli(argv)
    assert second.returncode == 0, second.stderr
    assert json.loads((out / "summary.json").read_text())["merge"] == "partition"
    # a resume may change it: it is how the partitions are read, not what the models are
    third = run_cli([*argv, "--merge", "all"])
    assert third.returncode == 0, third.stderr
    assert json.loads((out / "summary.json").read_text())["merge"] == "all"
    assert_accounting(out)
