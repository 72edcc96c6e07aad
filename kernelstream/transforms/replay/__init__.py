"""Beam transforms of the replay: block sources, per-key ordering state, the learner DoFn,
Parquet sinks, checkpoints and Kafka topics as sources and sinks."""
