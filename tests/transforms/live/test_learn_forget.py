"""The Learn DoFn and ``--forget-entities-after``, without a broker: a model forgotten by a run
that resumed from a snapshot holding it leaves a marker in the key's Beam state, so the key
starts afresh when it sends again, in this worker or in another one the runner moved the key's
state to (``--state_in_beam``), never from the resumed snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _helpers import live_spec

from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.batch import FORGET, TICK, EventBatch
from kernelstream.engine.live.engine import StreamEngine, reference_outputs
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.snapshot.store import SnapshotStore
from kernelstream.engine.live.state import Forgotten
from kernelstream.transforms.live import stream as live
from kernelstream.transforms.live.stream_job import STATES_TAG, StreamJob

KEY = "perc#0@u1"


class BeamState:
    """A ReadModifyWriteState that keeps what is written through the runner's coder (as a
    runner that moves state between processes does)."""

    def __init__(self, coder: live.ModelStateCoder) -> None:
        self.coder, self.data = coder, None

    def read(self) -> Any:
        return None if self.data is None else self.coder.decode(self.data)

    def write(self, value: Any) -> None:
        self.data = self.coder.encode(value)

    def clear(self) -> None:
        self.data = None


def _rec(offset: int, ts: int, key: str, value: str) -> SourceRecord:
    return SourceRecord("ev", 0, offset, ts, key.encode(), value.encode())


def _ticks_then_forget(times: list[int]) -> EventBatch:
    n = len(times)
    return EventBatch(bytearray([TICK] * (n - 1) + [FORGET]), [""] * n, [None] * n, [-1] * n,
                      {}, None, [""] * n, [-1] * n, [-1] * n, times, [b""] * n, "")


@pytest.mark.parametrize("in_worker", [True, False])
def test_a_forgotten_key_starts_afresh_not_from_the_resumed_snapshot(
        tmp_path: Path, in_worker: bool) -> None:
    spec = live_spec(configs=(LearnerConfig("perc", "perceptron", {"kernel": "linear"}),),
                     n_features=3, key_by="id-prefix", label_ttl_ms=1000,
                     metrics_window_ms=1000, forget_after_ms=3000)
    # the run before: u1's model, in the snapshot this run resumes from
    _, states = reference_outputs([_rec(0, 0, "u1/a", "+1 1:1"), _rec(1, 10, "u1/b", "-1 2:1")],
                                  spec, ticks=False)
    engine = StreamEngine(spec)
    with SnapshotStore.open(tmp_path / "ckpt") as store:
        epoch = store.commit({KEY: engine.encode_state(states[KEY])}, {("ev", 0): 2}, {})
    job = StreamJob(spec=spec, bootstrap="h:1", topics=("ev",), out=str(tmp_path / "out"),
                    control=str(tmp_path / "control"), part="p",
                    checkpoint=str(tmp_path / "ckpt"), resume_epoch=epoch,
                    start_offsets=(("ev", 0, 2),), state_in_beam=not in_worker)
    learn = live.learn_dofn(job)
    learn.setup()
    try:
        state = BeamState(live.ModelStateCoder(1000, in_worker))
        items = list(learn.learn((KEY, _ticks_then_forget([2000, 3500, 5000])), state, 0))
        gone = [v for tag, v in items if tag == STATES_TAG]
        assert [k for k, _ in gone] == [KEY] and isinstance(gone[0][1], Forgotten)
        counts = gone[0][1].counts
        assert (counts["records"], counts["skipped"], counts["pending"]) == (2, 0, 0)
        assert gone[0][1].restored == (2, 0, 0)
        marker = state.read()
        assert marker is not None and marker.st is None  # not restorable from the snapshot
        # the key sends again (here, or where the runner moved its Beam state)
        moved = BeamState(state.coder)
        moved.data = state.data
        for where in (state,) if in_worker else (state, moved):  # (a token stays in-process)
            batch = [p for _, p in engine.route(_rec(7, 9000, "u1/c", "? 1:3"))]
            items = list(learn.learn((KEY, batch), where, 0))
            learn.finish_bundle()
            st = where.read().st
            assert (st.records, st.position, st.restored) == (1, 1, None)
            ids = [r["row_id"] for tag, rows in items if tag == "predictions" for r in rows]
            assert ids == ["perc#0@u1~ev:0:7/p/0"]  # a new model's, not the third of the old
    finally:
        learn.teardown()


class CountingState(BeamState):
    def __init__(self, coder: live.ModelStateCoder) -> None:
        super().__init__(coder)
        self.reads = self.writes = 0

    def read(self) -> Any:
        self.reads += 1
        return super().read()

    def write(self, value: Any) -> None:
        self.writes += 1
        super().write(value)


def test_a_bundle_reads_a_model_held_by_the_worker_once(tmp_path: Path) -> None:
    """Beam's state read (~30 us a time) once per key and bundle, not once per round: the
    model, written once, is the same object every round; a new bundle reads it again."""
    spec = live_spec(configs=(LearnerConfig("perc", "perceptron", {"kernel": "linear"}),),
                     n_features=3, key_by="id-prefix")
    engine = StreamEngine(spec)
    job = StreamJob(spec=spec, bootstrap="h:1", topics=("ev",), out=str(tmp_path / "out"),
                    control=str(tmp_path / "control"), part="p")
    learn = live.learn_dofn(job)
    learn.setup()
    try:
        state = CountingState(live.ModelStateCoder(1000, True))
        seen = []
        for bundle in range(2):
            learn.start_bundle()
            for i in range(3):
                off = 3 * bundle + i
                batch = [p for _, p in engine.route(_rec(off, 10 * off, f"u1/e{off}",
                                                         "+1 1:1"))]
                items = list(learn.learn((KEY, batch), state, 0))
                seen += [st for tag, (_, st) in
                         ((t, v) for t, v in items if t == STATES_TAG)]
            list(learn.finish_bundle())
            assert state.reads == bundle + 1
        assert state.writes == 1 and all(st is seen[0] for st in seen)
        assert seen[0].records == 6
    finally:
        learn.teardown()
