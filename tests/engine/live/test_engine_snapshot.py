"""The stream's snapshot store: one writer, atomic epochs, deltas + compaction, staged outputs."""

from __future__ import annotations

import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelstream.engine.live.snapshot import store as snap
from kernelstream.engine.live.snapshot.store import (
    CheckpointInUse,
    CorruptSnapshotError,
    OffsetOutOfLog,
    SnapshotStore,
    SnapshotView,
)

ROOT = Path(__file__).resolve().parents[3]


def _child(code: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _epochs(d: Path) -> list[int]:
    return sorted(int(p.name[len("epoch-"):]) for p in d.glob("epoch-*"))


# -- the writer lock ----------------------------------------------------------------------------

def test_second_writer_in_the_same_process_gets_one_line(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    store = SnapshotStore.open(d)
    with pytest.raises(CheckpointInUse) as exc:
        SnapshotStore.open(d)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"checkpoint directory {d} is in use by another run (pid {os.getpid()} "
                          "on ")
    assert msg.endswith("; stop it or choose another --checkpoint")
    assert exc.value.holder["pid"] == os.getpid()
    store.close()
    assert (d / "LOCK").read_text() == ""  # no stale holder once free
    SnapshotStore.open(d).close()


def test_kill_9_frees_the_lock_and_the_engine_stays_free_of_beam(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    child = _child(f"""
        import sys, time
        from kernelstream.engine.live.snapshot.store import SnapshotStore
        s = SnapshotStore.open({str(d)!r})
        s.commit({{"a": b"1"}}, {{("t", 0): 5}}, {{}})
        print("apache_beam" in sys.modules, flush=True)
        time.sleep(60)
    """)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line == "False", child.stderr.read() if child.stderr else line
        with pytest.raises(CheckpointInUse, match=rf"\(pid {child.pid} on .+, since .+\)"):
            SnapshotStore.open(d)
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with SnapshotStore.open(d) as store:
        assert store.head == 1
        assert store.get("a") == b"1"
        assert store.offsets() == {("t", 0): 5}


def test_kill_9_in_the_middle_of_commits_leaves_a_whole_snapshot(tmp_path: Path) -> None:
    """Killed at arbitrary moments of a commit loop and restarted each time, the directory
    serves exactly one epoch: every key's bytes are those of that epoch (key k changes in the
    epochs e with e % 3 == k % 3), with its offsets and info."""
    d = tmp_path / "ck"
    code = f"""
        from kernelstream.engine.live.snapshot.store import SnapshotStore
        s = SnapshotStore.open({str(d)!r}, compact_every=2)
        first = True
        while True:
            e = s.head + 1 if s.head else 1
            ch = {{f"k{{k}}": f"k{{k}}@{{e}}".encode() * 50 for k in range(30)
                  if e == 1 or e % 3 == k % 3}}
            s.commit(ch, {{("t", 0): e}}, {{"e": e}})
            if first:
                print("go", flush=True)
                first = False
    """
    heads = []
    for delay in (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.07):
        child = _child(code)
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "go", child.stderr and child.stderr.read()
            time.sleep(delay)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        with SnapshotStore.open(d) as store:
            h = store.head
            assert h is not None and h > (heads[-1] if heads else 0)
            heads.append(h)
            assert store.offsets() == {("t", 0): h} and store.info() == {"e": h}
            assert _epochs(d)[-1] == h  # the unfinished epoch, if any, was removed
            for k in range(30):
                last = max([1, *(e for e in range(2, h + 1) if e % 3 == k % 3)])
                assert store.get(f"k{k}") == f"k{k}@{last}".encode() * 50


# -- epochs, deltas, compaction -----------------------------------------------------------------

def test_round_trip_over_deltas_and_compaction(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    rng = random.Random(7)
    keys = [f"cfg{i % 3}#0@user{i}" for i in range(150)] + ["ünïcode#0@ä"]
    truth: dict[str, bytes] = {}
    store = SnapshotStore.open(d, compact_every=3)
    assert store.head is None and store.get(keys[0]) is None and store.offsets() == {}
    kinds = []
    for e in range(1, 13):
        # epoch 1 writes every key; later ones a few (keys 0-9 never change again)
        changed = keys if e == 1 else rng.sample(keys[10:], 20)
        states = {k: rng.randbytes(rng.randrange(1, 300)) for k in changed}
        if e > 1:  # a few models forgotten (empty bytes: a tombstone), some to come back
            states.update(dict.fromkeys(rng.sample(keys[10:], 3), b""))
        truth.update(states)
        truth = {k: v for k, v in truth.items() if v}
        offsets = {("events", p): 100 * e + p for p in range(3)}
        assert store.commit(states, offsets, {"epoch": e, "obj": Path("x")}) == e
        kinds.append(store.record()["kind"])
        assert store.head == e and store.offsets() == offsets
        assert store.info() == {"epoch": e, "obj": "x"}
        assert all(store.get(k) == v for k, v in truth.items())
        assert store.get("nobody") is None
        assert store.keys() == sorted(truth) and len(store) == len(truth)
        assert all(store.get(k) is None and k not in store for k in set(keys) - truth.keys())
    # a base, then 3 deltas, then a base again (never more than 3 deltas since a base)
    assert kinds == ["base", "delta", "delta", "delta"] * 3
    assert store.base == 9
    # kept: the chains of the 2 newest epochs (9..12), and the one resumed from (none)
    assert _epochs(d) == [9, 10, 11, 12]
    store.close()

    view = SnapshotView.open(d)
    assert view.head == 12 and view.keys() == sorted(truth) and len(view) == len(truth)
    assert dict(view.items()) == truth
    assert all(view.get(k) == v for k, v in truth.items())
    view.close()
    assert dict(snap.read_states_from(d)) == truth


def test_a_view_reads_only_the_states_asked_for(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "ck"
    with SnapshotStore.open(d) as store:
        store.commit({f"k{i}": bytes([i]) * 1000 for i in range(100)}, {}, {})
        store.commit({"k1": b"new"}, {}, {})
    reads: list[int] = []
    real = os.pread
    monkeypatch.setattr(snap.os, "pread", lambda fd, n, off: reads.append(n) or real(fd, n, off))
    view = SnapshotView.open(d)
    assert view.get("k5") == bytes([5]) * 1000 and view.get("k1") == b"new"
    assert reads == [1000, 3]  # the indexes are read with read(); only two states


def test_a_view_pinned_to_the_resume_epoch_survives_the_run(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    with SnapshotStore.open(d, compact_every=1) as store:
        for e in range(1, 4):
            store.commit({"a": f"a{e}".encode(), f"only{e}": b"x"}, {}, {})
    store = SnapshotStore.open(d, compact_every=1)
    assert store.resumed_from == 3
    view = pickle.loads(pickle.dumps(SnapshotView.open(d, store.resumed_from)))
    for e in range(4, 10):
        store.commit({"a": f"a{e}".encode()}, {}, {})
    assert view.get("a") == b"a3" and view.get("only2") == b"x"
    assert 3 in _epochs(d)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(store)
    store.close()
    with SnapshotStore.open(d, compact_every=1) as store:  # a new run: the old chain may go
        store.commit({"a": b"a10"}, {}, {})
        store.commit({"a": b"a11"}, {}, {})
        assert 3 not in _epochs(d)
        assert store.get("a") == b"a11" and store.get("only2") == b"x"


def test_an_epoch_without_head_is_removed_on_open(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    with SnapshotStore.open(d) as store:
        store.commit({"a": b"1", "b": b"1"}, {("t", 0): 1}, {"n": 1})
        store.commit({"a": b"2"}, {("t", 0): 2}, {"n": 2})
    # a crash after writing epoch 3's directory but before HEAD
    edir = d / "epoch-0000003"
    edir.mkdir()
    (edir / "states.kss").write_bytes(b"half a file")
    (d / "HEAD.tmp").write_text("3\n")
    assert SnapshotView.open(d).head == 2  # readers follow HEAD only
    with SnapshotStore.open(d) as store:
        assert not edir.exists() and not (d / "HEAD.tmp").exists()
        assert store.head == 2 and store.info() == {"n": 2}
        assert store.get("a") == b"2" and store.get("b") == b"1"
        assert store.commit({"b": b"3"}, {("t", 0): 3}, {"n": 3}) == 3
        assert store.get("b") == b"3"


def test_a_failed_commit_commits_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "ck"
    store = SnapshotStore.open(d)
    store.commit({"a": b"1"}, {("t", 0): 1}, {})
    with pytest.raises(TypeError, match="must be bytes"):
        store.commit({"a": "text"}, {}, {})  # type: ignore[dict-item]

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(snap.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        store.commit({"a": b"2"}, {("t", 0): 2}, {})
    monkeypatch.undo()
    assert store.head == 1 and _epochs(d) == [1] and store.get("a") == b"1"
    assert store.commit({"a": b"3"}, {("t", 0): 3}, {}) == 2 and store.get("a") == b"3"
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.commit({}, {}, {})


def test_damage_is_reported_not_served(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    with SnapshotStore.open(d) as store:
        store.commit({"a": b"state-of-a", "b": b"state-of-b"}, {}, {})
    kss = d / "epoch-0000001" / "states.kss"
    data = bytearray(kss.read_bytes())
    data[-1] ^= 0xFF  # the last blob: b's
    kss.write_bytes(bytes(data))
    view = SnapshotView.open(d)
    assert view.get("a") == b"state-of-a"
    with pytest.raises(CorruptSnapshotError, match="damaged state of 'b'"):
        view.get("b")
    data[12] ^= 0xFF  # the header's epoch
    kss.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="holds epoch"):
        SnapshotView.open(d).get("a")
    (d / "HEAD").write_text("9\n")
    with pytest.raises(CorruptSnapshotError, match="names epoch 9"):
        SnapshotView.open(d)


def test_wrong_directories_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="local or mounted file system"):
        SnapshotStore.open("gs://bucket/ck")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SnapshotStore.open(tmp_path / "none", create=False)
    (tmp_path / "replay").mkdir()
    (tmp_path / "replay" / "ckpt-000001.committed").write_text("{}")
    with pytest.raises(ValueError, match="checkpoints of `kernelstream replay`"):
        SnapshotStore.open(tmp_path / "replay")
    with pytest.raises(ValueError, match="no stream snapshot"):
        snap.read_states_from(tmp_path / "replay")


# -- outputs ------------------------------------------------------------------------------------

def test_publish_rolls_committed_files_forward_and_drops_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    paths = {}
    for output in ("predictions", "outcomes"):
        for e in (1, 2, 3):
            p = snap.pending_path(out, output, e, "w0-1")
            Path(p).write_bytes(f"{output}{e}".encode())
            paths[output, e] = p
    assert paths["predictions", 2] == str(out / "predictions/.pending/e0000002-w0-1.parquet")
    # after a commit of epoch 1 while epoch 2's files are open: nothing is dropped
    assert snap.publish(out, ["predictions"], 1, remove_uncommitted=False) == (1, 0)
    # on start after a crash: epoch 2 committed but unpublished, epoch 3 never committed
    assert snap.publish(out, None, 2) == (3, 2)
    assert snap.publish(out, None, 2) == (0, 0)
    for output in ("predictions", "outcomes"):
        assert sorted(p.name for p in (out / output).glob("part-*")) == [
            "part-e0000001-w0-1.parquet", "part-e0000002-w0-1.parquet"]
        assert (out / output / "part-e0000002-w0-1.parquet").read_bytes() == f"{output}2".encode()
        assert list((out / output / ".pending").iterdir()) == []
    assert snap.published_path(out, "outcomes", 2, "w0-1") == str(
        out / "outcomes/part-e0000002-w0-1.parquet")
    assert snap.publish(out, ["metrics"], 5) == (0, 0)  # no such output yet
    assert snap.publish(tmp_path / "none", None, None) == (0, 0)
    with pytest.raises(ValueError, match="bad output file part"):
        snap.pending_path(out, "predictions", 1, "a/b")


def test_remove_orphans_of_follow_runs(tmp_path: Path) -> None:
    def make(*nums: int) -> Path:
        out = tmp_path / f"out{nums}"
        for n in nums:
            (out / f"ckpt-{n:06d}" / "predictions").mkdir(parents=True)
        (out / "summary.json").parent.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text("{}")
        return out

    def names(out: Path) -> list[str]:
        return sorted(p.name for p in out.iterdir())

    out = make(1, 2, 3, 4, 5)
    removed = snap.remove_orphans(out, [2, 4])  # 3 failed between; 5 failed last; 1 pruned
    assert removed == [str(out / "ckpt-000003"), str(out / "ckpt-000005")]
    assert names(out) == ["ckpt-000001", "ckpt-000002", "ckpt-000004", "summary.json"]
    out = make(1, 2)
    assert len(snap.remove_orphans(out, [])) == 2 and names(out) == ["summary.json"]
    assert snap.remove_orphans(tmp_path / "none", [1]) == []
    with pytest.raises(ValueError, match="local or mounted"):
        snap.remove_orphans("gs://b/out", [1])


# -- source offsets -----------------------------------------------------------------------------

def test_check_offsets() -> None:
    begin = {("ev", 0): 500, ("ev", 1): 0, ("lab", 0): 0}
    end = {("ev", 0): 900, ("ev", 1): 40, ("lab", 0): 0}
    snap.check_offsets({("ev", 0): 500, ("ev", 1): 40, ("lab", 0): 0}, begin, end)
    snap.check_offsets({}, begin, end)
    cases = {
        ("ev", 0, 120): "cannot resume ev/0 at offset 120: its log now runs from offset 500 "
                        "to 900, so records this checkpoint has not read were deleted",
        ("ev", 1, 41): "cannot resume ev/1 at offset 41: its log now runs from offset 0 to 40, "
                       "so the topic was recreated or truncated",
        ("ev", 7, 3): "cannot resume ev/7 at offset 3: the topic has no partition 7",
    }
    for (topic, p, off), start in cases.items():
        with pytest.raises(OffsetOutOfLog) as exc:
            snap.check_offsets({("ev", 0): 600, (topic, p): off}, begin, end)
        msg = str(exc.value)
        assert msg.startswith(start) and "\n" not in msg
        assert msg.endswith("; start over with a new --checkpoint directory")
        assert (exc.value.topic, exc.value.partition, exc.value.offset) == (topic, p, off)
