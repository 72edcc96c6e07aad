"""Checkpoints: a run over a Kafka topic that continues exactly where the previous run ended
(the files and their bookkeeping, without Beam; the Beam transforms that read and write the
states are in ``kernelstream.transforms.checkpoint``).

A checkpoint directory (local or any Beam file system URL) holds numbered checkpoints, each
written by one run::

    DIR/ckpt-000003-streams-<uuid>.parquet   every stream's state: key, encode_stream_state bytes
    DIR/ckpt-000003.source.json              where the read ended (kafka_client.SourcePosition)
    DIR/ckpt-000003.committed                written last, once the run has succeeded

A run resumes from the newest *committed* checkpoint: each partition is read from the offset
after the last record the previous run consumed, each stream starts from its saved state
(learner, ordering cursor, prequential counters) and stream position, and the label classes
and feature dimension are those already seen. Learner state and read offsets are committed
together, so a run that fails leaves the previous checkpoint in force and the next run
consumes the same records again: the models see every record exactly once, while the
outputs of a failed run may be written again (at least once). A resumed stream learns
exactly as one long run would (bit-identical scores), except for a merged multi-partition
stream, whose merge order is decided within each run.

Streams without new records in a run keep their saved state (the new checkpoint carries
them over). The two newest committed checkpoints are kept, older ones and the files of
failed runs are deleted.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kernelstream import fs
from kernelstream.engine.outputs import ensure_nonempty, write_rows
from kernelstream.kafka_client import SourcePosition

STATES_SCHEMA = pa.schema([
    pa.field("key", pa.string(), nullable=False),
    pa.field("state", pa.binary(), nullable=False),
])
_NAME = re.compile(r"ckpt-(\d{6})\.committed$")
KEEP = 2


@dataclass(frozen=True)
class Checkpoint:
    """Checkpoint ``number`` in ``directory``."""

    directory: str
    number: int

    @property
    def name(self) -> str:
        return f"ckpt-{self.number:06d}"

    @property
    def states_prefix(self) -> str:
        return f"{self.name}-streams"

    @property
    def source_path(self) -> str:
        return fs.join(self.directory, f"{self.name}.source.json")

    @property
    def marker(self) -> str:
        return fs.join(self.directory, f"{self.name}.committed")

    def state_files(self) -> list[str]:
        return fs.list_files(self.directory, f"{self.states_prefix}-*.parquet")

    def info(self) -> dict[str, Any]:
        """What :func:`commit` recorded (the run's configurations, ...)."""
        with fs.open_read(self.marker) as f:
            return dict(json.loads(f.read()))

    def position(self) -> SourcePosition:
        with fs.open_read(self.source_path) as f:
            return SourcePosition.from_json(json.loads(f.read()))


def committed(directory: str) -> list[Checkpoint]:
    """The committed checkpoints in ``directory``, oldest first."""
    out = []
    for path in fs.list_files(directory, "ckpt-*.committed"):
        m = _NAME.search(path)
        if m:
            out.append(Checkpoint(directory, int(m.group(1))))
    return sorted(out, key=lambda c: c.number)


def latest(directory: str) -> Checkpoint | None:
    cs = committed(directory)
    return cs[-1] if cs else None


def next_checkpoint(directory: str) -> Checkpoint:
    """The checkpoint a new run writes: one past every checkpoint file present (so the files
    of a failed attempt are never mistaken for this run's)."""
    nums = [n for p in fs.list_files(directory, "ckpt-*") if (n := _number(p)) is not None]
    return Checkpoint(directory, max(nums, default=0) + 1)


def _number(path: str) -> int | None:
    m = re.search(r"ckpt-(\d{6})", path)
    return None if m is None else int(m.group(1))


def _plain(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


def check_configs(ckpt: Checkpoint, configs: dict[str, Any]) -> None:
    """A checkpoint continues the learners that wrote it: refuse other configurations (their
    saved states would silently keep the old learners)."""
    saved = ckpt.info().get("configs")
    if _plain(saved) != _plain(configs):
        raise ValueError(
            f"the checkpoint {ckpt.name} in {ckpt.directory} was written by the learner "
            f"configurations {json.dumps(saved, default=str)}; this run has "
            f"{json.dumps(configs, default=str)}. Use the same configurations, or a new "
            "checkpoint directory")


def commit(ckpt: Checkpoint, info: dict[str, Any]) -> None:
    """Make ``ckpt`` the one the next run resumes from, then prune (see the module doc)."""
    ensure_nonempty(ckpt.directory, STATES_SCHEMA, prefix=ckpt.states_prefix)
    if not fs.exists(ckpt.source_path):
        raise RuntimeError(f"checkpoint {ckpt.name}: the source position was not written")
    fs.write_bytes_atomic(ckpt.marker, (json.dumps(
        {"checkpoint": ckpt.number, "committed_at": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **_plain(info)}, indent=2) + "\n").encode())
    keep = {c.number for c in committed(ckpt.directory)[-KEEP:]}
    fs.delete([p for p in fs.list_files(ckpt.directory, "ckpt-*")
               if (n := _number(p)) is not None and n not in keep])


def state_file(path: str) -> Iterator[tuple[str, bytes]]:
    with fs.open_read(path) as f:
        t = pq.read_table(f, schema=STATES_SCHEMA)
    yield from zip(t.column("key").to_pylist(), t.column("state").to_pylist(), strict=True)


def read_states(ckpt: Checkpoint) -> Iterator[tuple[str, bytes]]:
    """Every ``(stream key, state bytes)`` of a checkpoint (the loop runner's reader)."""
    for path in ckpt.state_files():
        yield from state_file(path)


def write_states(ckpt: Checkpoint, states: Mapping[str, bytes], name: str) -> None:
    """Write ``states`` (stream key → state bytes) as one file ``name`` of ``ckpt``."""
    if states:
        write_rows(fs.join(ckpt.directory, f"{ckpt.states_prefix}-{name}.parquet"),
                   [{"key": k, "state": v} for k, v in states.items()], STATES_SCHEMA)


def write_position(ckpt: Checkpoint, position: SourcePosition | str) -> None:
    """Write where the read ended (a :class:`SourcePosition` or its JSON)."""
    js = position if isinstance(position, str) else json.dumps(position.to_json())
    fs.write_bytes_atomic(ckpt.source_path, js.encode())
