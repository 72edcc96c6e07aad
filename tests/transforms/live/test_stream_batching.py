"""The stream graph's batch plumbing, without a broker: Route turns one reader call's records
into one element per model (what ``route`` gives each record, in order) plus one dead-letter
item; Kafka messages of rows equal the NaN-safe encoding whichever path encodes them; a
crash point counts the passes of a batch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace

from _helpers import live_spec, route_one_by_one

from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.clock import CLOCK_KEY
from kernelstream.engine.live.engine import StreamEngine
from kernelstream.engine.live.records import SourceRecord
from kernelstream.transforms.live.kafka_read import ReadProgress, RecordBatch
from kernelstream.transforms.live.stream import (
    CRASH_ENV,
    DEAD_LETTERS,
    PASS_KEY,
    PROGRESS_TAG,
    STATES_TAG,
    RouteRecords,
    StreamJob,
    row_message,
)
from kernelstream.transforms.live.stream_job import CALL_MS, LONG_CALL_MS


def job() -> StreamJob:
    spec = live_spec(configs=(LearnerConfig("a", "perceptron", {}),
                              LearnerConfig("b", "bogd", {"budget": 4})),
                     n_features=3, key_by="id-prefix")
    return StreamJob(spec=spec, bootstrap="h:1", topics=("ev",), out="/nonexistent",
                     control="/nonexistent", part="p")


def test_route_gives_one_element_per_model_and_one_dead_letter_item() -> None:
    recs = [SourceRecord("ev", 0, i, 100 + i, f"u{i % 3}/e{i}".encode(),
                         (f"+1 1:{i} 3:0.5" if i % 7 else "+1 1:x").encode())
            for i in range(30)]
    recs.append(SourceRecord("ev", 0, 30, 200, b"noprefix", b"+1 1:1"))
    route = RouteRecords(job())
    route.setup()
    out = list(route.process(RecordBatch(recs)))
    want, dead = route_one_by_one(StreamEngine(job().spec), recs)
    assert out[0] == (PASS_KEY, (DEAD_LETTERS, dead))
    assert len(dead) == 6
    assert [k for k, _ in out[1:-1]] == list(want)  # models in order of first appearance
    for k, ps in out[1:-1]:
        assert [(p.event_id, p.offset, p.y, p.x.tolist()) for p in ps] == [
            (p.event_id, p.offset, p.y, p.x.tolist()) for p in want[k]]
    # then the router's clock of quiet entities (--key-by), for Commit to snapshot
    assert out[-1] == (PASS_KEY, (STATES_TAG, (CLOCK_KEY, route.engine.router.clock)))
    assert route.engine is not None and route.engine.router.clock is not None
    # the stream clock: the latest time three entities reached with routed records (u2 129,
    # u0 127, u1 125; the dead letters, e.g. u1's at 128, move nothing)
    assert route.engine.router.clock.now == 125
    prog = ReadProgress("ev", 0, 31)
    assert list(route.process(prog)) == [(PASS_KEY, (PROGRESS_TAG, prog))]
    one = list(route.process(recs[1]))  # a single record still goes through
    assert [k for k, _ in one] == ["a#0@u1", "b#0@u1", PASS_KEY] and len(one[0][1]) == 1


def test_a_route_dofn_set_up_again_goes_on_with_the_runs_clock() -> None:
    """The clock of quiet entities lives with the run, not with one DoFn instance: a Route
    DoFn a runner rebuilds in the same process continues it (the resumed snapshot's clock
    would be behind the models, which live on)."""
    j = replace(job(), control=f"/nonexistent/{os.getpid()}-rebuilt")
    first = RouteRecords(j)
    first.setup()
    list(first.process(RecordBatch([SourceRecord("ev", 0, i, 100 + i, f"u{i}/e".encode(),
                                                 b"+1 1:0.5") for i in range(5)])))
    again = RouteRecords(j)
    again.setup()
    assert first.engine is not None and again.engine is not None
    assert again.engine.router.clock is first.engine.router.clock
    assert again.engine.router.clock is not None and again.engine.router.clock.now == 102
    other = RouteRecords(replace(j, control=j.control + "-other"))  # another run: its own
    other.setup()
    assert other.engine is not None and other.engine.router.clock is not None
    assert other.engine.router.clock.now is None


def test_row_message_encodes_nan_as_null_on_either_path() -> None:
    plain = {"row_id": "k/p/1", "score": 0.1, "mistake": None, "n": 3, "ok": True}
    key, value = row_message(plain)
    assert key == b"k/p/1"
    assert json.loads(value) == plain
    odd = {"row_id": "k/m/0", "loss_sum": math.nan, "avg": -math.inf, "xs": [1.0, math.nan]}
    key, value = row_message(odd)
    assert key == b"k/m/0"
    assert value == b'{"row_id":"k/m/0","loss_sum":null,"avg":null,"xs":[1.0,null]}'


def test_a_crash_point_counts_every_record_of_a_batch() -> None:
    code = ("from kernelstream.transforms.live.stream import crash_point\n"
            "crash_point('learn', 40)\nprint('alive', flush=True)\n"
            "crash_point('learn', 40)\nprint('not reached', flush=True)\n")
    env = {**os.environ, CRASH_ENV: "learn:70"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == -9
    assert r.stdout == "alive\n"


def test_a_single_partition_group_reads_in_long_calls() -> None:
    """A reader call (bundle) lasts long for one group with worker-held models (snapshots do
    not wait for its end): one partition, or every partition merged (--merge all, the
    default); groups taking turns (--merge partition), or models in Beam state, keep short
    calls."""
    one = (("ev", 0, 0), ("lab", 0, 0))
    two = (*one, ("ev", 1, 0), ("lab", 1, 0))
    base = job()
    assert replace(base, start_offsets=one).reader_call_ms == LONG_CALL_MS > CALL_MS
    assert replace(base, start_offsets=two).reader_call_ms == LONG_CALL_MS
    assert replace(base, start_offsets=two, merge="partition").reader_call_ms == CALL_MS
    assert replace(base, start_offsets=one, state_in_beam=True).reader_call_ms == CALL_MS
    assert replace(base, start_offsets=one, call_ms=123).reader_call_ms == 123
