"""Beam transforms around the engine (``kernelstream.engine``), one room per engine: they hold
only Beam state, coders and timers; the learning, metrics, dead letters and outputs are the
engine's.

* :mod:`.replay` — the replay pipeline's: block sources, per-key ordering state, the learner
  DoFn, Parquet sinks, checkpoints, and Kafka topics as a source and a sink.
* :mod:`.live` — the live stream's (``kernelstream stream``): the Kafka reader over partition
  groups, the stream's graph and job, output rows to Kafka and the committer of output files
  and snapshots.
"""
