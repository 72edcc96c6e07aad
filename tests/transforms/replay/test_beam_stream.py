"""Streaming semantics: the same transforms on unbounded input. A TestStream delivers the
blocks of one stream per registered learner out of order, in bursts with watermark advances;
predictions written by the streaming Parquet sinks are the plain loop's, bit for bit, and the
final metrics appear once the input ends.

TestStream runs only on Beam's BundleBasedDirectRunner (the FnApiRunner rejects it, Prism is
not available offline), which has no ordered-list state: LearnPredict keeps early blocks in
bag state there (``early_state="bag"``), the same ordering logic behind another state type.
"""

from __future__ import annotations

import random
from pathlib import Path

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing import test_stream

from kernelstream import learners
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.replay.blocks import Block
from kernelstream.engine.replay.outputs import (
    METRICS_SCHEMA,
    PREDICTIONS_SCHEMA,
    parquet_files,
    read_table,
)
from kernelstream.engine.replay.sources import ReplayStreams, array_loader, stream_blocks
from kernelstream.learners.testing import make_stream, small_params
from kernelstream.seeding import permutation
from kernelstream.transforms.replay.learn import LearnPredict
from kernelstream.transforms.replay.sinks import WriteParquet

SEED = 4


def test_teststream_out_of_order_with_watermarks_equals_loop(tmp_path: Path) -> None:
    n, B = 160, 20
    X, y = make_stream("classification", n, seed=3)
    configs = [LearnerConfig(name, name, small_params(name)) for name in learners.available()]
    spec = ReplayStreams(tuple(c.label for c in configs), seed=SEED, permutations=1, block_size=B)
    blocks = list(stream_blocks(array_loader(X, y)(), spec))
    random.Random(5).shuffle(blocks)

    stream = test_stream.TestStream().with_output_types(Block)
    t = 100
    for i in range(0, len(blocks), 5):  # bursts of 5 blocks, each followed by a watermark step
        stream = stream.add_elements(
            [beam.window.TimestampedValue(b, t + j) for j, b in enumerate(blocks[i : i + 5])])
        t += 10
        stream = stream.advance_watermark_to(t)
    stream = stream.advance_watermark_to_infinity()

    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=opts) as p:
        out = (p | stream
               | LearnPredict(configs, seed=SEED, metrics_window=40, early_state="bag"))
        _ = out.predictions | "WritePreds" >> WriteParquet(
            str(tmp_path / "predictions"), PREDICTIONS_SCHEMA, streaming_window=10)
        _ = out.metrics | "WriteMetrics" >> WriteParquet(
            str(tmp_path / "metrics"), METRICS_SCHEMA, streaming_window=10)

    assert len(parquet_files(tmp_path / "predictions")) > 1  # one file per window and shard
    preds = read_table(tmp_path / "predictions", PREDICTIONS_SCHEMA).to_pylist()
    assert len(preds) == len(configs) * n
    metrics = read_table(tmp_path / "metrics", METRICS_SCHEMA).to_pylist()
    max_buffered = 0
    for cfg in configs:
        for r in range(1):
            key = StreamKey(cfg.label, r).encode()
            mine = sorted((row for row in preds if row["key"] == key),
                          key=lambda row: row["position"])
            assert [row["position"] for row in mine] == list(range(n))
            perm = permutation(n, SEED, r)
            m = cfg.make(SEED, r)
            ref = np.array([m.step(X[j], y[j]) for j in perm])
            assert np.array_equal(np.array([row["score"] for row in mine]), ref), key
            assert [row["id"] for row in mine] == perm.tolist()
            rows = [row for row in metrics if row["key"] == key]
            final = [row for row in rows if row["final"]]
            assert len(final) == 1 and final[0]["examples"] == n
            assert sorted(row["window_end"] for row in rows if not row["final"]) == [
                40, 80, 120, 160]
            max_buffered = max(max_buffered, final[0]["max_buffered_blocks"])
    assert max_buffered > 0, "blocks were not delivered out of order"
