"""Checkpoints: a run over a Kafka topic that continues exactly where the previous run ended
(the files and their bookkeeping, without Beam; the Beam transforms that read and write the
states are in ``kernelstream.transforms.replay.checkpoint``).

A checkpoint directory (local or any Beam file system URL) holds numbered checkpoints, each
written by one run::

    DIR/LOCK                                 flock'ed by the writing run (local directories)
    DIR/ckpt-000003-streams-<uuid>.parquet   every stream's state: key, encode_replay_state bytes
                                             (row groups of ~GROUP_BYTES: read by key)
    DIR/ckpt-000003.source.json              where the read ended (kafka_client.SourcePosition)
    DIR/ckpt-000003.metrics.parquet          the newest metrics row of every stream so far
    DIR/ckpt-000003.committed                written last, once the run has succeeded

A run resumes from the newest *committed* checkpoint: each partition is read from the offset
after the last record the previous run consumed, each stream starts from its saved state
(learner, ordering cursor, prequential counters; read by key, :class:`SavedStates`) and
stream position, and the label classes and feature dimension are those already seen.
Learner state and read offsets are committed together, so a run that fails leaves the
previous checkpoint in force and the next run consumes the same records again: the models
see every record exactly once. The outputs of a failed run are written again by the next
run with the same contents (Parquet files of the failed run are deleted; Kafka messages
carry deterministic keys, so duplicates can be dropped by key). A resumed stream learns
exactly as one long run would (bit-identical scores), except for a merged multi-partition
stream, whose merge order is decided within each run.

Streams without new records in a run keep their saved state (the new checkpoint carries
them over). The two newest committed checkpoints are kept, older ones and the files of
failed runs are deleted.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from kernelstream import fs, kafka_client
from kernelstream._arrow import pa, pq
from kernelstream.engine.replay.outputs import ensure_nonempty

if TYPE_CHECKING:  # the Kafka client: imported when a checkpoint's position is read
    from kernelstream.kafka_client.blocks import SourcePosition

    STATES_SCHEMA: pa.Schema


@cache
def _states_schema() -> pa.Schema:
    return pa.schema([
        pa.field("key", pa.string(), nullable=False),
        pa.field("state", pa.binary(), nullable=False),
    ])


def __getattr__(name: str) -> Any:
    """``STATES_SCHEMA``, built on first use: importing this module must not load pyarrow
    (:mod:`kernelstream._arrow`)."""
    if name == "STATES_SCHEMA":
        return _states_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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

    @property
    def metrics_path(self) -> str:
        return fs.join(self.directory, f"{self.name}.metrics.parquet")

    def state_files(self) -> list[str]:
        return fs.list_files(self.directory, f"{self.states_prefix}-*.parquet")

    def info(self) -> dict[str, Any]:
        """What :func:`commit` recorded (the run's configurations, ...)."""
        with fs.open_read(self.marker) as f:
            return dict(json.loads(f.read()))

    def position(self) -> SourcePosition:
        with fs.open_read(self.source_path) as f:
            return kafka_client.SourcePosition.from_json(json.loads(f.read()))


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
    ensure_nonempty(ckpt.directory, _states_schema(), prefix=ckpt.states_prefix)
    if not fs.exists(ckpt.source_path):
        raise RuntimeError(f"checkpoint {ckpt.name}: the source position was not written")
    fs.write_bytes_atomic(ckpt.marker, (json.dumps(
        {"checkpoint": ckpt.number, "committed_at": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **_plain(info)}, indent=2) + "\n").encode())
    keep = {c.number for c in committed(ckpt.directory)[-KEEP:]}
    fs.delete([p for p in fs.list_files(ckpt.directory, "ckpt-*")
               if (n := _number(p)) is not None and n not in keep])


def write_metrics(ckpt: Checkpoint, rows: Sequence[dict[str, Any]], schema: pa.Schema) -> None:
    """The newest metrics row of every stream learnt so far (``rows``), before the commit: a
    resume without new records reports them."""
    with fs.open_write(ckpt.metrics_path) as fh:
        pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), fh)


def read_metrics(ckpt: Checkpoint, schema: pa.Schema) -> list[dict[str, Any]]:
    """What :func:`write_metrics` wrote (none in a checkpoint of an earlier version)."""
    if not fs.exists(ckpt.metrics_path):
        return []
    with fs.open_read(ckpt.metrics_path) as fh:
        return list(pq.read_table(fh, schema=schema).to_pylist())


def state_file(path: str) -> Iterator[tuple[str, bytes]]:
    """Every ``(stream key, state bytes)`` of one states file, one row group in memory at a
    time."""
    with fs.open_read(path) as f:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=["key", "state"])
            yield from zip(t.column("key").to_pylist(), t.column("state").to_pylist(),
                           strict=True)


def read_states(ckpt: Checkpoint) -> Iterator[tuple[str, bytes]]:
    """Every ``(stream key, state bytes)`` of a checkpoint, file by file."""
    for path in ckpt.state_files():
        yield from state_file(path)


# A states file's row groups hold about this many bytes of states: a by-key read
# (SavedStates.get) reads one row group, so this bounds what a lookup reads and keeps.
GROUP_BYTES = 4 << 20
_GROUP_ROWS = 1 << 16  # and at most this many (small states)


def _groups(items: Iterable[tuple[str, bytes]]) -> Iterator[list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = []
    size = 0
    for k, v in items:
        rows.append({"key": k, "state": v})
        size += len(k) + len(v)
        if size >= GROUP_BYTES or len(rows) >= _GROUP_ROWS:
            yield rows
            rows, size = [], 0
    if rows:
        yield rows


def write_states(ckpt: Checkpoint, states: Iterable[tuple[str, bytes]] | Mapping[str, bytes],
                 name: str) -> None:
    """Write ``states`` (stream key → state bytes, or ``(key, bytes)`` pairs, streamed) as
    one file ``name`` of ``ckpt``, in row groups of about :data:`GROUP_BYTES`."""
    items = states.items() if isinstance(states, Mapping) else states
    groups = _groups(items)
    first = next(groups, None)
    if first is None:
        return
    with fs.open_write(fs.join(ckpt.directory, f"{ckpt.states_prefix}-{name}.parquet")) as fh, \
            pq.ParquetWriter(fh, _states_schema()) as w:
        for rows in itertools.chain([first], groups):
            w.write_table(pa.Table.from_pylist(rows, schema=_states_schema()))


class SavedStates:
    """A checkpoint's states read by key, for workers that restore streams lazily (instead
    of every state on every worker).

    Pickles as its file names and reads nothing until the first :meth:`get`; then it indexes
    the keys of every states file once (the ``key`` column only: about 100 bytes a key) and
    reads a key's state from its row group (about :data:`GROUP_BYTES`; the last group read
    is kept for the keys next to it). So a worker holds the states of the streams it learns,
    not the checkpoint's. :meth:`shared` gives one instance per process and file list
    (thread-safe), for DoFns that run in several threads. Checkpoints written before states
    files had small row groups read the same, a whole file per group."""

    _shared: ClassVar[dict[tuple[str, ...], SavedStates]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()
    _SHARED_KEEP = 2  # a long-lived worker (--follow) drops older runs' indexes

    def __init__(self, files: Sequence[str]) -> None:
        self.files = tuple(files)
        self._lock = threading.Lock()
        self._index: dict[str, int] | None = None  # key -> file << 48 | group << 24 | row
        self._group: tuple[int, int] | None = None
        self._states: list[bytes] = []

    @classmethod
    def of(cls, ckpt: Checkpoint) -> SavedStates:
        return cls(ckpt.state_files())

    @classmethod
    def shared(cls, files: Sequence[str]) -> SavedStates:
        key = tuple(files)
        with cls._shared_lock:
            saved = cls._shared.pop(key, None) or cls(key)
            cls._shared[key] = saved  # newest last
            while len(cls._shared) > cls._SHARED_KEEP:
                del cls._shared[next(iter(cls._shared))]
            return saved

    def __reduce__(self) -> Any:
        return (SavedStates, (self.files,))

    def _build(self) -> dict[str, int]:
        index: dict[str, int] = {}
        for fi, path in enumerate(self.files):
            with fs.open_read(path) as f:
                pf = pq.ParquetFile(f)
                for g in range(pf.num_row_groups):
                    keys = pf.read_row_group(g, columns=["key"]).column(0).to_pylist()
                    if g >= 1 << 24 or len(keys) >= 1 << 24:
                        raise ValueError(f"{path}: too many row groups or states in a row "
                                         "group for the state index (2**24 each)")
                    base = (fi << 48) | (g << 24)
                    index.update(zip(keys, range(base, base + len(keys)), strict=True))
        return index

    def _where(self) -> dict[str, int]:
        if self._index is None:
            self._index = self._build()
        return self._index

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._where()

    def __len__(self) -> int:
        with self._lock:
            return len(self._where())

    def keys(self) -> list[str]:
        """Every stream key of the checkpoint (the ``key`` columns only are read)."""
        with self._lock:
            return list(self._where())

    def get(self, key: str) -> bytes | None:
        """The saved state bytes of stream ``key`` (None: not in the checkpoint)."""
        with self._lock:
            pos = self._where().get(key)
            if pos is None:
                return None
            fi, g, i = pos >> 48, (pos >> 24) & 0xFFFFFF, pos & 0xFFFFFF
            if self._group != (fi, g):
                self._group, self._states = None, []  # drop the old group before reading
                with fs.open_read(self.files[fi]) as f:
                    col = pq.ParquetFile(f).read_row_group(g, columns=["state"]).column(0)
                self._states = col.to_pylist()
                self._group = (fi, g)
            return self._states[i]


def write_position(ckpt: Checkpoint, position: SourcePosition | str) -> None:
    """Write where the read ended (a :class:`SourcePosition` or its JSON)."""
    js = position if isinstance(position, str) else json.dumps(position.to_json())
    fs.write_bytes_atomic(ckpt.source_path, js.encode())
