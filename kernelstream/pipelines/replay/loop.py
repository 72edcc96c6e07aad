"""The loop runner: a replay run's streams through the engine in a plain Python loop (no Beam).

The same sources (a data set in memory, or a Kafka topic through ``kafka_client``), the same
per-block learning (:class:`~kernelstream.engine.replay.core.ReplayLearner`) and the same Parquet
outputs and checkpoint files as the Beam runners, written with pyarrow directly, so the files
of the two compare one to one. A run's blocks arrive in stream order here, so no ordering
state is needed.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kernelstream import fs, kafka_client
from kernelstream._arrow import pq
from kernelstream.engine.deadletters import DEAD_LETTER_TAG
from kernelstream.engine.replay import checkpoints as ckpts
from kernelstream.engine.replay import outputs
from kernelstream.engine.replay.blocks import Block
from kernelstream.engine.replay.core import (
    Progress,
    ReplayLearner,
    ReplayState,
    decode_replay_state,
    encode_replay_state,
)
from kernelstream.engine.replay.outputs import OUTPUTS, PredictionWriter, write_rows
from kernelstream.engine.replay.sources import load_rows, stream_blocks
from kernelstream.pipelines.replay.plan import ReplayRun

if TYPE_CHECKING:
    # the Kafka client is imported by the runs that use a topic (a file replay needs none)
    from kernelstream.kafka_client.blocks import SourcePosition
    from kernelstream.kafka_client.sink import KafkaWriter

PART = "part-loop"  # the name of the loop's file in every output directory


def loop_source(run: ReplayRun, dead: list[dict[str, Any]],
                position: list[SourcePosition]) -> Iterator[Block]:
    """The run's blocks in stream order; its source's dead letters are appended to ``dead``,
    and a Kafka read's end position to ``position``."""
    if run.data.kafka is None:
        ds = load_rows(run.data.read)
        if run.spec.source_dead_letters:  # one shard of replay --workers reports them
            dead += ds.dead_letters
        yield from stream_blocks(ds, run.spec)
        return
    kb = kafka_client.KafkaBlocks(run.data.kafka.topic, run.data.read, run.spec.configs,
                                  run.execution.block_size, run.recovery.resume_position)
    for item in kb.read_topic(run.data.kafka):
        if isinstance(item, Block):
            yield item
        else:
            dead.append(item)
    position.append(kb.position())


def run_loop(run: ReplayRun) -> dict[str, int]:
    """Learn every stream of ``run``, write its outputs (and checkpoint files) and return the
    counters the Beam runners report (examples, mistakes, dead letters, blocks)."""
    core = ReplayLearner({c.label: c for c in run.learners.configs}, run.protocol.seed,
                         run.outputs.metrics_window, run.data.read.path)
    resume = run.recovery.resume_from
    # a resumed stream's saved state is read by key when the stream first appears
    saved = None if resume is None else ckpts.SavedStates.of(resume)
    states: dict[str, ReplayState] = {}
    position: list[SourcePosition] = []
    for name in OUTPUTS:
        fs.makedirs(fs.join(run.outputs.out, name))
    counters = {"examples": 0, "mistakes": 0, DEAD_LETTER_TAG: 0, "blocks": 0}
    metrics: list[dict[str, Any]] = []
    dead: list[dict[str, Any]] = []
    writers: dict[str, KafkaWriter] = {}
    if run.outputs.kafka_out is not None:  # the Kafka client: imported by the runs that use it
        writers = {k: kafka_client.KafkaWriter(t, run.outputs.kafka_client)
                   for k, t in kafka_client.output_topics(run.outputs.kafka_out).items()}
    # the shards of replay --workers write into the same directories: one name each
    part = PART if run.execution.shards == 1 else f"{PART}-{run.execution.shard}"
    predictions = fs.join(run.outputs.out, "predictions", f"{part}.parquet")
    try:
        _learn_all(run, core, saved, states, loop_source(run, dead, position), predictions,
                   writers, metrics, dead, counters)
    except BaseException:
        # stopped (Ctrl-C, an error): the file closed on the way out would read as a
        # whole run's predictions; no part of them is kept (docs/cli.md, exit codes)
        with contextlib.suppress(Exception):
            fs.delete([predictions])
        raise
    counters[DEAD_LETTER_TAG] = len(dead)  # the source's and the learners'
    metrics += [core.final_row(k, st) for k, st in states.items()]
    if run.recovery.writes is not None:
        # this run's streams, then the saved ones it did not touch, streamed from their files
        new = ((k, encode_replay_state(st)) for k, st in states.items())
        old = ((k, v) for k, v in (() if resume is None else ckpts.read_states(resume))
               if k not in states)
        ckpts.write_states(run.recovery.writes, itertools.chain(new, old), "loop")
        ckpts.write_position(run.recovery.writes, position[0])
    if writers:
        writers["metrics"].write(metrics)
        writers[DEAD_LETTER_TAG].write(dead)
        for wr in writers.values():
            wr.close()
    for name, rows in (("metrics", metrics), (DEAD_LETTER_TAG, dead)):
        if rows:
            write_rows(fs.join(run.outputs.out, name, f"{part}.parquet"), rows,
                       outputs.SCHEMAS[name])
    return counters


def _learn_all(run: ReplayRun, core: ReplayLearner, saved: ckpts.SavedStates | None,
               states: dict[str, ReplayState], blocks: Iterator[Block], predictions: str,
               writers: dict[str, KafkaWriter], metrics: list[dict[str, Any]],
               dead: list[dict[str, Any]], counters: dict[str, int]) -> None:
    """The loop of :func:`run_loop`: every block learnt, its predictions written to the file
    ``predictions`` (and the Kafka writers), its metrics, dead letters and counts added."""
    with fs.open_write(predictions) as fh, \
            pq.ParquetWriter(fh, outputs.PREDICTIONS_SCHEMA) as pw:
        w = PredictionWriter(pw)
        progress = Progress(total=run.execution.expected_examples)
        for b in blocks:
            st = states.get(b.key)
            if st is None:  # a resumed stream starts from its saved state
                data = None if saved is None else saved.get(b.key)
                st = states[b.key] = (ReplayState() if data is None
                                      else decode_replay_state(data))
            res = core.learn(b.key, st, b)
            progress.learnt(b.key, st, b.n, res.seconds)
            p = res.predictions
            w.write(p)
            if writers:
                writers["predictions"].write(kafka_client.prediction_rows(p))
            metrics += res.metrics
            dead += res.dead_letters
            counters["blocks"] += 1
            counters["examples"] += p.n - len(res.dead_letters)
            counters["mistakes"] += int((p.mistake == 1).sum())
        w.flush()
