"""The Committer's status file, without a broker: the rows it reports as written (published +
buffered, the progress line's ``outputs``) count the rows of a snapshot still being committed,
so the count never drops while a commit runs."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from _helpers import live_spec

from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.rows import Rows
from kernelstream.transforms.live.committer import Committer
from kernelstream.transforms.live.kafka_read import ReadProgress
from kernelstream.transforms.live.stream_job import PROGRESS_TAG, StreamJob

T0 = 1_700_000_000_000


def _unlabeled(i: int) -> dict[str, object]:
    return {"row_id": f"a#0@u/u/{i}", "key": "a#0@u", "config": "a", "entity": "u",
            "event_id": f"u/{i}", "position": i, "event_time_ms": T0 + i,
            "expired_at_ms": T0 + i + 1}


def _job(tmp_path: Path, **kw: Any) -> StreamJob:
    """A keyed perceptron stream's job, with a checkpoint (``kw``: more of its fields)."""
    control = tmp_path / "control"
    control.mkdir()
    spec = live_spec(configs=(LearnerConfig("a", "perceptron", {}),), n_features=3,
                     key_by="id-prefix")
    return StreamJob(spec=spec, bootstrap="h:1", topics=("ev",), out=str(tmp_path / "out"),
                     control=str(control), part="p", checkpoint=str(tmp_path / "ckpt"),
                     start_offsets=(("ev", 0, 0),), **kw)


def test_rows_of_the_snapshot_being_committed_count_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(tmp_path)
    release = threading.Event()
    real = Committer._commit

    def held(self: Committer, *args: Any, **kw: Any) -> tuple[int, int]:
        release.wait(60)  # a slow commit (fsyncs, a big state): still running below
        return real(self, *args, **kw)

    monkeypatch.setattr(Committer, "_commit", held)

    def written() -> int:
        c._status(force=True)
        st = json.loads(Path(job.status_path).read_text())
        return int(st["published"]) + int(st["buffered"])

    c = Committer(job)
    c.setup()
    try:
        c.process(("unlabeled", Rows([_unlabeled(i) for i in range(3)])))
        c.process((PROGRESS_TAG, ReadProgress("ev", 0, 3)))
        assert written() == 3
        c._snapshot()  # cut: its 3 rows go to the commit thread, which is held
        c.process(("unlabeled", Rows([_unlabeled(3)])))
        assert c.inflight is not None and not c.inflight.done()
        assert written() == 4  # old code: 1 (the 3 rows being committed counted nowhere)
        release.set()
        c._settle()
        assert written() == 4
        st = json.loads(Path(job.status_path).read_text())
        assert (st["published"], st["buffered"], st["epoch"]) == (3, 1, 1)
    finally:
        release.set()
        c.teardown()


def test_a_snapshot_with_kafka_outputs_needs_their_writer(tmp_path: Path) -> None:
    """With ``--kafka-out``, a snapshot waits for its rows' delivery: a Committer that finds
    no Kafka writer in its process (a runner that split them) refuses to commit one (before:
    it committed without waiting, and an exactly-once transaction never committed)."""
    job = _job(tmp_path, kafka_out="h:1/pre")
    c = Committer(job)
    c.setup()
    try:
        c.process(("unlabeled", Rows([_unlabeled(0)])))
        c.process((PROGRESS_TAG, ReadProgress("ev", 0, 1)))
        with pytest.raises(RuntimeError, match="Kafka writer runs in another worker process"):
            c._snapshot()
    finally:
        c.teardown()
