"""Beam transforms of the replay pipeline around the engine (``kernelstream.engine``): block
sources, per-key ordering state, the learner DoFn and Parquet sinks. They hold only Beam
state, coders and timers; the learning, metrics, dead letters and outputs are the engine's.

* ``blocks``: raw-buffer coders of the engine's blocks (registered on import).
* ``sources``: :class:`ReadPermutedStreams` (in-memory permuted replay) and
  :class:`ReadFileBlocks` (parallel chunked reader in file order).
* ``ordering``: parking blocks that arrive early in ordered-list or bag state.
* ``learn``: :class:`LearnPredict`, the keyed stateful learner transform.
* ``sinks``: Parquet files from bundles; ``checkpoint``: reading and writing stream states.
* ``kafka``: :class:`ReadKafkaBlocks` (a topic as blocks) and :class:`WriteKafka` (output rows
  as JSON messages), on ``kernelstream.kafka_client``.
"""

from kernelstream.transforms.replay.blocks import BlockCoder, PredictionBlockCoder
from kernelstream.transforms.replay.kafka import ReadKafkaBlocks, WriteKafka
from kernelstream.transforms.replay.learn import LearnPredict
from kernelstream.transforms.replay.sources import ReadFileBlocks, ReadPermutedStreams

__all__ = [
    "BlockCoder",
    "LearnPredict",
    "PredictionBlockCoder",
    "ReadFileBlocks",
    "ReadKafkaBlocks",
    "ReadPermutedStreams",
    "WriteKafka",
]
