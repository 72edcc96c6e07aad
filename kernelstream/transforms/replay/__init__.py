"""Beam transforms of the replay pipeline around the replay engine
(``kernelstream.engine.replay``): block sources, per-key ordering state, the learner DoFn and
Parquet sinks.

* ``blocks``: raw-buffer coders of the engine's blocks (registered on import).
* ``sources``: :class:`~.sources.ReadPermutedStreams` (in-memory permuted replay) and
  :class:`~.sources.ReadFileBlocks` (parallel chunked reader in file order).
* ``ordering``: parking blocks that arrive early in ordered-list or bag state.
* ``learn``: :class:`~.learn.LearnPredict`, the keyed stateful learner transform.
* ``sinks``: Parquet files from bundles; ``checkpoint``: reading and writing stream states.
* ``kafka``: :class:`~.kafka.ReadKafkaBlocks` (a topic as blocks) and
  :class:`~.kafka.WriteKafka` (output rows as JSON messages), on ``kernelstream.kafka_client``.
"""

# the blocks' coders are registered with Beam whenever a replay transform is imported
from kernelstream.transforms.replay import blocks as _blocks  # noqa: F401
