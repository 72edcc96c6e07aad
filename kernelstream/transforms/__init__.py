"""Beam transforms of the replay pipeline: block sources, per-key ordering, the learner DoFn,
prequential metrics and Parquet sinks. Learners are used only through ``kernelstream.learners``
(registry and the ``Learner`` interface).

* ``blocks``: :class:`Block` / :class:`PredictionBlock` and their raw-buffer coders, stream keys.
* ``sources``: :class:`ReadPermutedStreams` (in-memory permuted replay) and
  :class:`ReadFileBlocks` (parallel chunked reader in file order), dead letters.
* ``ordering``: restoring each stream's order with state bounded by the disorder.
* ``learn``: :class:`LearnPredict`, the keyed stateful learner transform.
* ``metrics``: running/window accounting and summaries; ``sinks``: Parquet with explicit schemas.
* ``kafka``: :class:`ReadKafkaBlocks` (a topic as blocks; kafka-python) and :class:`WriteKafka`
  (output rows as JSON messages).
"""

from kernelstream.transforms.blocks import Block, PredictionBlock, StreamKey
from kernelstream.transforms.kafka import ReadKafkaBlocks, WriteKafka
from kernelstream.transforms.learn import LearnerConfig, LearnPredict
from kernelstream.transforms.sources import ReadFileBlocks, ReadOptions, ReadPermutedStreams

__all__ = [
    "Block",
    "LearnPredict",
    "LearnerConfig",
    "PredictionBlock",
    "ReadFileBlocks",
    "ReadKafkaBlocks",
    "ReadOptions",
    "ReadPermutedStreams",
    "StreamKey",
    "WriteKafka",
]
