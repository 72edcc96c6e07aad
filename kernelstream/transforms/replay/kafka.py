"""Kafka topics as a Beam source of examples and as a Beam sink of the run's outputs.

Beam's own ``ReadFromKafka`` is a Java cross-language transform (it needs Maven jars and a Java
expansion service); these transforms are pure Python on kafka-python, so they run wherever the
pipeline runs. What a message holds, the read's order and stop rule, and the JSON of an output
row are ``kernelstream.kafka_client``'s (Beam-free, shared with the loop runner).

Source: :class:`ReadKafkaBlocks`
    One worker reads the topic through :class:`~kernelstream.kafka_client.KafkaBlocks` and
    emits its blocks, dead letters and the end position (for a checkpoint).

Sink: :class:`WriteKafka`
    Each bundle flushes its producer before it completes: delivery is at least once (a retried
    bundle, or the rerun of a run that failed before its checkpoint, writes its rows again),
    and a row written twice is the same message under the same key
    (``kafka_client.row_id``), so consumers drop duplicates by key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from kernelstream.data.options import ReadOptions
from kernelstream.engine.deadletters import DEAD_LETTER_TAG
from kernelstream.engine.replay.blocks import Block, PredictionBlock
from kernelstream.engine.replay.metrics import METRICS_NAMESPACE
from kernelstream.kafka_client.blocks import KafkaBlocks, SourcePosition, check_read_options
from kernelstream.kafka_client.bounded import KafkaReadOptions
from kernelstream.kafka_client.clients import KafkaTopic
from kernelstream.kafka_client.sink import KafkaWriter, prediction_rows

POSITION_TAG = "position"


class _ReadTopic(beam.DoFn):
    def __init__(self, opts: KafkaReadOptions, read: ReadOptions, configs: tuple[str, ...],
                 block_size: int, resume: SourcePosition | None) -> None:
        self.opts, self.read, self.configs, self.B = opts, read, configs, block_size
        self.resume = resume
        self.n_dead = Metrics.counter(METRICS_NAMESPACE, DEAD_LETTER_TAG)
        self.n_rows = Metrics.counter(METRICS_NAMESPACE, "rows_read")
        self.n_records = Metrics.counter(METRICS_NAMESPACE, "kafka_records")

    def process(self, _: Any) -> Iterator[Any]:
        kb = KafkaBlocks(self.opts.topic, self.read, self.configs, self.B, self.resume)
        for item in kb.read_topic(self.opts):
            if isinstance(item, Block):
                yield item
            else:
                self.n_dead.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER_TAG, item)
        yield beam.pvalue.TaggedOutput(POSITION_TAG, json.dumps(kb.position().to_json()))
        self.n_rows.inc(kb.examples)
        self.n_records.inc(kb.records)


class KafkaSourceOutputs(NamedTuple):
    """``blocks`` and ``dead_letters`` as every source's, plus ``position``: one JSON string,
    the :class:`SourcePosition` where the read ended (for a checkpoint)."""

    blocks: beam.PCollection
    dead_letters: beam.PCollection
    position: beam.PCollection


class ReadKafkaBlocks(beam.PTransform):
    """``PBegin`` → the topic's examples as blocks of every configuration's stream (one per
    entity with ``key_by``; ``rep`` 0), plus ``dead_letters`` and the end ``position``. One
    worker reads the topic (the learners, not the read, are the cost); see the module
    docstring for order and options. ``resume`` continues where an earlier read ended."""

    def __init__(self, opts: KafkaReadOptions, read: ReadOptions, configs: Sequence[str],
                 block_size: int = 1024, resume: SourcePosition | None = None) -> None:
        super().__init__()
        check_read_options(read)
        # bad options (or a checkpoint of another topic) fail at construction
        KafkaBlocks(opts.topic, read, configs, block_size, resume)
        self.opts, self.read, self.configs, self.B = opts, read, tuple(configs), block_size
        self.resume = resume

    def expand(self, pbegin: beam.pvalue.PBegin) -> KafkaSourceOutputs:
        out = (pbegin
               | "Impulse" >> beam.Impulse()
               | "ReadTopic" >> beam.ParDo(_ReadTopic(self.opts, self.read, self.configs,
                                                      self.B, self.resume))
               .with_outputs(DEAD_LETTER_TAG, POSITION_TAG, main="blocks"))
        return KafkaSourceOutputs(out.blocks, out[DEAD_LETTER_TAG], out[POSITION_TAG])



class _WriteRows(beam.DoFn):
    def __init__(self, topic: KafkaTopic, client: tuple[tuple[str, str], ...]) -> None:
        self.topic, self.client = topic, client
        self.n_sent = Metrics.counter(METRICS_NAMESPACE, f"kafka_sent_{topic.topic}")
        self.writer: KafkaWriter | None = None

    def setup(self) -> None:
        self.writer = KafkaWriter(self.topic, self.client)

    def process(self, item: Any) -> None:
        assert self.writer is not None
        rows = prediction_rows(item) if isinstance(item, PredictionBlock) else [item]
        self.writer.write(rows)

    def finish_bundle(self) -> None:
        assert self.writer is not None
        self.n_sent.inc(self.writer.flush())

    def teardown(self) -> None:
        if self.writer is not None:
            self.writer.producer.close()


class WriteKafka(beam.PTransform):
    """Rows (dicts of an output schema) or ``PredictionBlock`` s → JSON messages on a topic
    (see the module docstring). Returns nothing useful (a sink)."""

    def __init__(self, topic: KafkaTopic, client: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__()
        self.topic, self.client = topic, client

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | "Produce" >> beam.ParDo(_WriteRows(self.topic, self.client))

