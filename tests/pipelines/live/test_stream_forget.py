"""``kernelstream stream --key-by ... --forget-entities-after``: the models of entities quiet
for that long leave the worker and the snapshot (a tombstone in the next one), an entity that
comes back starts afresh, the outputs are the reference loop's, and a stream killed at the
dangerous moments and restarted gives exactly the uninterrupted one's rows, model states,
clock and counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from stream_accounting import assert_accounting
from test_stream import (
    assert_same,
    create_topics,
    outputs,
    produce,
    reference_records,
    reference_tables,
    run_cli,
    spec_for,
)
from test_stream_quiet import (
    TTL_MS,
    _argv,
    _shifted,
    assert_killed_run_is_one_run,
    one_off_entities,
)

from kernelstream.engine.live.clock import CLOCK_KEY, QuietClock
from kernelstream.engine.live.engine import reference_outputs
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.kafka_client import local_broker

pytestmark = pytest.mark.slow

FORGET = "2s"  # twice the quiet interval (TTL 1 s, window 1 s): the least it may be


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


def _forget_argv(hp: str, out: Path, ckpt: Path, topics: tuple[str, str] = ("fev", "flab"),
                 *extra: str) -> list[str]:
    argv = [a.replace("/qev", f"/{topics[0]}").replace("/qlab", f"/{topics[1]}")
            for a in _argv(hp, out, ckpt)]
    cut = argv.index("--")
    return [*argv[:cut], *extra, *argv[cut:]]


def test_forgotten_entities_leave_the_snapshot_and_a_killed_stream_forgets_as_one_run(
        broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["fev", "flab"], 2)
    produce(broker, _shifted(one_off_entities(300, seed=8), 0, 0, ("fev", "flab")))

    out_a, ckpt_a = tmp_path / "a", tmp_path / "ckpt-a"
    argv_a = _forget_argv(broker, out_a, ckpt_a, ("fev", "flab"),
                          "--forget-entities-after", FORGET)
    r = run_cli(argv_a)
    assert r.returncode == 0, r.stderr
    records = reference_records(broker, ["fev", "flab"], 2)
    spec = spec_for(argv_a[: argv_a.index("--")])
    assert spec.forget_after_ms == 2000
    want, states = reference_tables(records, spec)
    got = outputs(out_a)
    assert_same(got, want)  # the reference loop's, forgets included
    i = argv_a.index("--forget-entities-after")
    _, kept = reference_outputs(records, spec_for(argv_a[:i] + argv_a[i + 2: argv_a.index("--")]))
    ref, _ = reference_outputs(records, spec)
    assert len(kept) == 300 and len(states) < 120  # only the last seconds' entities stay
    with SnapshotView.open(ckpt_a) as view:
        assert sorted(view.keys()) == sorted(states)  # the forgotten: tombstones, not there
        clock_a = view.get(CLOCK_KEY)
        assert view.info()["stream"]["forget_after_ms"] == 2000
    assert clock_a is not None and QuietClock.decode(clock_a, TTL_MS, 2000).forget_ms == 2000
    summary = json.loads((out_a / "summary.json").read_text())
    # (an entity whose second event came after its forget was forgotten twice)
    assert summary["forgotten"] == len(ref.forgotten) >= 300 - len(states)
    assert summary["forget_after_ms"] == 2000

    assert_accounting(out_a)
    out_b, ckpt_b = tmp_path / "b", tmp_path / "ckpt-b"
    assert_killed_run_is_one_run(_forget_argv(broker, out_b, ckpt_b, ("fev", "flab"),
                                              "--forget-entities-after", FORGET), out_a, ckpt_a)


def test_forgetting_turned_on_for_a_running_stream_forgets_the_old_entities(
        broker: str, tmp_path: Path) -> None:
    """A checkpoint written without forgetting, resumed with ``--forget-entities-after``: the
    clock is rebuilt from every model, so the entities of the first run go too; a third run
    without the option keeps the recorded one."""
    topics = ("gev", "glab")
    create_topics(broker, list(topics), 2)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    produce(broker, _shifted(one_off_entities(150, seed=30), 0, 0, topics))
    r = run_cli(_forget_argv(broker, out, ckpt, topics))
    assert r.returncode == 0, r.stderr
    with SnapshotView.open(ckpt) as view:
        assert len(view) == 150 and view.info()["stream"]["forget_after_ms"] is None
    produce(broker, _shifted(one_off_entities(150, seed=31), 150, 20_000, topics))
    r = run_cli(_forget_argv(broker, out, ckpt, topics, "--forget-entities-after", FORGET))
    assert r.returncode == 0, r.stderr
    with SnapshotView.open(ckpt) as view:
        first = [k for k in view.keys() if int(k.rsplit("@s", 1)[1]) < 150]
        assert not first, "entities of the run before forgetting kept their models"
        assert len(view) < 120 and view.info()["stream"]["forget_after_ms"] == 2000
    produce(broker, _shifted(one_off_entities(150, seed=32), 300, 40_000, topics))
    r = run_cli(_forget_argv(broker, out, ckpt, topics))
    assert r.returncode == 0, r.stderr
    with SnapshotView.open(ckpt) as view:
        assert view.info()["stream"]["forget_after_ms"] == 2000  # kept: not given
        assert len(view) < 120
    assert_accounting(out)
    r = run_cli(_forget_argv(broker, out, ckpt, topics, "--forget-entities-after", "never"))
    assert r.returncode == 2 and "once on, forgetting stays on" in r.stderr, r.stderr
    # another window than the checkpoint's: one line (the recorded forget interval, too short
    # for it, is never checked first)
    argv = _forget_argv(broker, out, ckpt, topics)
    argv[argv.index("--metrics-window") + 1] = "1m"
    r = run_cli(argv)
    assert r.returncode == 2, r.stderr
    assert "other stream settings (--metrics-window 1s -> 1m)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    # a checkpoint that forgets is not read by partition (nothing would be forgotten)
    r = run_cli(_forget_argv(broker, out, ckpt, topics, "--merge", "partition"))
    assert r.returncode == 2 and "forgets quiet entities, which needs --merge all" in r.stderr


@pytest.fixture(scope="module")
def bad(broker: str) -> str:
    """The broker, with the topics of the refused runs."""
    create_topics(broker, ["hev", "hlab"], 2)
    return broker


@pytest.mark.parametrize(("extra", "message"), [
    (["--forget-entities-after", "1500ms"], "at least twice max(--label-ttl, --metrics-window) "
                                            "= 2s"),
    (["--forget-entities-after", "5s", "--merge", "partition"], "needs --merge all"),
    (["--forget-entities-after", "soon"], "--forget-entities-after"),
])
def test_bad_forget_settings_are_refused(bad: str, tmp_path: Path, extra: list[str],
                                         message: str) -> None:
    broker = bad
    r = run_cli(_forget_argv(broker, tmp_path / "o", tmp_path / "c", ("hev", "hlab"), *extra))
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_forgetting_needs_entities(bad: str, tmp_path: Path) -> None:
    argv = _forget_argv(bad, tmp_path / "o", tmp_path / "c", ("hev", "hlab"),
                        "--forget-entities-after", "5s")
    i = argv.index("--key-by")
    r = run_cli(argv[:i] + argv[i + 2:])
    assert r.returncode == 2 and "goes with --key-by" in r.stderr, r.stderr
