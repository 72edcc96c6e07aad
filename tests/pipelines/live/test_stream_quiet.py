"""A ``--key-by`` stream of one-off entities (a key per session): each entity's models get
clock ticks once it has been quiet for the TTL (``kernelstream.engine.live.clock``), so its
events expire and its state empties while the others go on; the stream's outputs are the
reference loop's, and a stream killed at the dangerous moments and restarted gives exactly
the uninterrupted one's rows, model states and clock (the clock is part of every snapshot).
"""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from stream_accounting import assert_accounting
from test_stream import (
    T0,
    Message,
    assert_same,
    create_topics,
    outputs,
    produce,
    reference_records,
    reference_tables,
    run_cli,
    spec_for,
    stream_argv,
)
from test_stream_crash import _env, _states

from kernelstream.engine.keys import StreamKey
from kernelstream.engine.live.clock import CLOCK_KEY, QuietClock
from kernelstream.engine.live.engine import reference_outputs
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.engine.live.state import decode_state
from kernelstream.kafka_client import local_broker
from kernelstream.transforms.live.stream import CRASH_ENV

pytestmark = pytest.mark.slow

TTL_MS = 1000  # the quiet interval too: max(TTL, window 1s)


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


def one_off_entities(n: int, seed: int) -> list[Message]:
    """``n`` entities ``s{i}``, one event each, 30 ms apart, on partition i % 2 of ``qev``;
    60 % labelled on ``qlab`` 0-1.5 s later (past the TTL for some); 20 % with a labelled
    second event 0-2.5 s later. Each partition in timestamp order, as a producer writes it."""
    rng = random.Random(seed)
    out: list[Message] = []
    for i in range(n):
        part, ts = i % 2, T0 + 30 * i
        x = f"1:{rng.random():.4f} 2:{rng.random():.4f}"
        y = rng.choice("+-") + "1"
        out.append(("qev", part, f"s{i}/e".encode(), f"? {x}".encode(), ts))
        if rng.random() < 0.6:
            out.append(("qlab", part, f"s{i}/e".encode(), y.encode(),
                        ts + rng.randint(0, 1500)))
        if rng.random() < 0.2:
            out.append(("qev", part, f"s{i}/f".encode(), f"{y} {x}".encode(),
                        ts + rng.randint(0, 2500)))
    return sorted(out, key=lambda m: (m[0], m[1], m[4]))


def _argv(hp: str, out: Path, ckpt: Path) -> list[str]:
    return stream_argv(hp, "kafka://BROKER/qev", "--labels", "kafka://BROKER/qlab",
                       "--n-features", "2", "-l", "perceptron", "-p", "kernel=linear",
                       "--key-by", "id-prefix", "--label-ttl", f"{TTL_MS}ms",
                       "--metrics-window", "1s", "--out", str(out), "--checkpoint", str(ckpt),
                       "--snapshot-every", "100", "--idle-stop", "3s", "-q", "--",
                       "--max_records=40")


CRASHES = ["learn:150", "before-commit:2", "after-commit:3"]


def test_quiet_entities_expire_and_a_killed_stream_ticks_as_one_run(
        broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["qev", "qlab"], 2)
    produce(broker, one_off_entities(300, seed=7))

    out_a, ckpt_a = tmp_path / "a", tmp_path / "ckpt-a"
    argv_a = _argv(broker, out_a, ckpt_a)
    r = run_cli(argv_a)
    assert r.returncode == 0, r.stderr
    records = reference_records(broker, ["qev", "qlab"], 2)
    spec = spec_for(argv_a[: argv_a.index("--")])
    want, states = reference_tables(records, spec)
    got = outputs(out_a)
    assert_same(got, want)  # the reference loop's, ticks included
    end = max(r.timestamp_ms for r in records)
    # every entity quiet for a TTL has nothing pending: only the last second's may
    pending = {StreamKey.decode(k).entity for k, st in states.items() if st.pending}
    last = {StreamKey.decode(k).entity for k, st in states.items()
            if st.clock_ms is not None and st.clock_ms > end - 2 * TTL_MS}
    assert pending <= last and len(last) < 120
    _, old = reference_outputs(records, spec, ticks=False)  # what the ticks change
    assert sum(len(st.pending) for st in old.values()) > 2 * sum(
        len(st.pending) for st in states.values()) + 50
    # quiet entities' unlabeled rows expire by the stream's clock, after their last record
    assert got["unlabeled"].num_rows > 0
    with SnapshotView.open(ckpt_a) as view:
        clock_a = view.get(CLOCK_KEY)
        assert clock_a is not None and len(view) == len(view.keys()) == len(states)
        assert CLOCK_KEY not in view and CLOCK_KEY not in view.keys()  # models only
    assert len(QuietClock.decode(clock_a, TTL_MS)) <= len(last) + 5

    out_b, ckpt_b = tmp_path / "b", tmp_path / "ckpt-b"
    assert_killed_run_is_one_run(_argv(broker, out_b, ckpt_b), out_a, ckpt_a)


def assert_killed_run_is_one_run(argv: list[str], out_a: Path, ckpt_a: Path) -> None:
    """Run ``argv`` (its own --out and --checkpoint) killed at each of :data:`CRASHES`, then
    to its end: its rows, model states, offsets, clock and counts are those of the
    uninterrupted run in ``out_a`` / ``ckpt_a``."""
    out_b = Path(argv[argv.index("--out") + 1])
    ckpt_b = Path(argv[argv.index("--checkpoint") + 1])
    for crash in CRASHES:
        r = run_cli(argv, env={**_env(), CRASH_ENV: crash})
        assert r.returncode == -signal.SIGKILL, (crash, r.returncode, r.stderr)
    r = run_cli(argv, env=_env())
    assert r.returncode == 0, r.stderr
    assert_same(outputs(out_b), outputs(out_a))
    sa, oa = _states(ckpt_a)
    sb, ob = _states(ckpt_b)
    assert ob == oa and sb == sa
    with SnapshotView.open(ckpt_a) as a, SnapshotView.open(ckpt_b) as b:
        assert b.get(CLOCK_KEY) == a.get(CLOCK_KEY)
    assert assert_accounting(out_b) == assert_accounting(out_a)


def _shifted(msgs: list[Message], first: int, dt: int, topics: tuple[str, str]) -> list[Message]:
    """``msgs`` with their entities renamed from ``first`` on, ``dt`` ms later, on
    ``topics``."""
    names = {"qev": topics[0], "qlab": topics[1]}
    out = []
    for topic, part, key, value, ts in msgs:
        assert key is not None
        entity, _, rest = key.decode().partition("/")
        k = f"s{int(entity[1:]) + first}/{rest}".encode()
        out.append((names[topic], part, k, value, ts + dt))
    return out


def test_a_resume_after_reading_by_partition_rebuilds_the_clock(
        broker: str, tmp_path: Path) -> None:
    """A run read by partition (``--merge partition``: no clock, so the snapshot's is left as
    the previous run wrote it) between two runs read as one merge: the last resumes with a
    clock rebuilt from the models, so the entities that went quiet during the partition run
    get their ticks too (before, the stale clock did not know them: pending for ever)."""
    topics = ("mev", "mlab")
    create_topics(broker, list(topics), 2)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = [a.replace("/qev", "/mev").replace("/qlab", "/mlab")
            for a in _argv(broker, out, ckpt)]
    cut = argv.index("--")
    left = []
    for i, merge in enumerate(["all", "partition", "all"]):
        produce(broker, _shifted(one_off_entities(150, seed=20 + i), 150 * i, 20_000 * i,
                                 topics))
        r = run_cli([*argv[:cut], "--merge", merge, *argv[cut:]])
        assert r.returncode == 0, (merge, r.stderr)
        with SnapshotView.open(ckpt) as view:
            assert view.info()["stream"]["merge"] == merge
            states = {k: decode_state(d, TTL_MS) for k, d in view.items()}
            clock = view.get(CLOCK_KEY)
        left.append({k for k, st in states.items() if st.pending})
    assert len(left[1]) > 50  # read by partition: no ticks, the quiet entities' events wait
    assert clock is not None
    now = QuietClock.decode(clock, TTL_MS).now
    assert now is not None and now > T0 + 40_000
    assert not left[1] & left[2], "an entity quiet since the partition run kept its events"
    assert all(st.clock_ms is not None and st.clock_ms > now - 2 * TTL_MS
               for k, st in states.items() if k in left[2])
    assert_accounting(out)
