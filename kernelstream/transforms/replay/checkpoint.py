"""Beam transforms of checkpoints: read a checkpoint's stream states on workers (to carry the
states of streams this run did not touch over to its checkpoint), and write this run's states
and source position (the layout and its bookkeeping are in
``kernelstream.engine.replay.checkpoints``; the learner restores a stream's state by key,
``engine.replay.checkpoints.SavedStates``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from kernelstream.engine.replay.checkpoints import (
    GROUP_BYTES,
    STATES_SCHEMA,
    Checkpoint,
    state_file,
    write_position,
)
from kernelstream.transforms.replay.sinks import WriteParquet


class _ReadStateFile(beam.DoFn):
    def process(self, path: str) -> Iterator[tuple[str, bytes]]:
        yield from state_file(path)


class ReadStates(beam.PTransform):
    """``PBegin`` → ``(stream key, state bytes)`` of a checkpoint (file names through
    ``Create``; the states themselves are read by workers, one row group at a time)."""

    def __init__(self, ckpt: Checkpoint) -> None:
        super().__init__()
        self.files = ckpt.state_files()

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (pbegin
                | "Files" >> beam.Create(self.files)
                | "Read" >> beam.ParDo(_ReadStateFile())
                .with_output_types(tuple[str, bytes]))


def _newest(kv: tuple[str, dict[str, list[bytes]]]) -> tuple[str, bytes]:
    key, g = kv
    new = g["new"]
    return key, (new[0] if new else g["old"][0])


class WriteCheckpoint(beam.PTransform):
    """``(stream key, state bytes)`` of this run (+ ``saved`` ones of the checkpoint resumed
    from, carried over where this run did not touch the stream) and the source ``position``
    (one JSON string) → the files of ``ckpt`` (not yet committed: see
    :func:`kernelstream.engine.replay.checkpoints.commit`)."""

    def __init__(self, ckpt: Checkpoint, saved: beam.PCollection | None,
                 position: beam.PCollection) -> None:
        super().__init__()
        self.ckpt, self.saved, self.position = ckpt, saved, position

    def expand(self, states: beam.PCollection) -> Any:
        if self.saved is not None:
            states = ({"old": self.saved, "new": states}
                      | "CarryOver" >> beam.CoGroupByKey()
                      | "Newest" >> beam.Map(_newest))
        _ = (states
             | "Rows" >> beam.Map(lambda kv: {"key": kv[0], "state": kv[1]})
             | "WriteStates" >> WriteParquet(self.ckpt.directory, STATES_SCHEMA,
                                             prefix=self.ckpt.states_prefix,
                                             group_bytes=GROUP_BYTES))
        ckpt = self.ckpt
        return self.position | "WriteSource" >> beam.Map(lambda js: write_position(ckpt, js))
