"""Snapshots of a live stream: learner states and source offsets, committed together.

This is the exactly-once core of ``kernelstream stream --checkpoint DIR``. A snapshot is an
*epoch* (1, 2, ...) and the directory holds::

    DIR/LOCK                     flock'ed by the one writer; text: its pid, host, start time
    DIR/HEAD                     the newest committed epoch (text), replaced atomically
    DIR/epoch-0000007/
        states.kss               the state bytes of the models that changed since epoch 6
                                 (a *delta*), or of every model (a *base*)
        offsets.json             the next offset to read of every (topic, partition)
        info.json                the run's free-form info (configurations, spec, counts, ...)

A commit writes the epoch directory completely, fsyncs it, and then replaces ``HEAD``: a crash
at any moment leaves either the old or the new snapshot in force, never a mixture. An epoch
directory newer than ``HEAD`` is the remains of a commit that did not finish; the next writer
removes it when it opens the directory. Because ``states.kss`` holds only what changed, a
model's state as of ``HEAD`` is its bytes in the newest epoch of the chain *base, delta, ...,
HEAD* that holds it. After ``compact_every`` deltas the commit writes a base again (copying
the untouched models' bytes through from the older files, one at a time), and epochs no
longer needed are deleted: the snapshots of the ``keep`` newest epochs stay restorable, and
so does the one the writer resumed from, for as long as it is open (readers pinned to it,
see :class:`SnapshotView`, keep working during the whole run).

``states.kss`` (little-endian; no pickle)::

    header   magic "KSSTATE\\0", version u16, flags u16 (1 = base), epoch u64, count u64,
             key bytes u64, CRC-32 of the index u32
    index    key ends u64[count], blob offsets u64[count], blob lengths u64[count],
             blob CRC-32s u32[count], the UTF-8 keys concatenated (sorted by key)
    blobs    the state bytes, in index order

A reader loads only the indexes (a key -> location map, about 100 bytes a key) and reads a
model's bytes on demand with ``pread``, so a worker that sees few models never loads the
others (this replaces the replay's ``AsDict`` side input of every state).

The writer lock is ``fcntl.flock``: the kernel releases it when its holder dies, even by
``kill -9``, so no stale lock survives a crash. Hence the stream's snapshots need a local or
mounted file system with working locks (not an object store such as ``gs://``). The same
file system also stages the stream's output files: :func:`pending_path` and :func:`publish`
keep rows of an uncommitted epoch out of the published files.

Also here, free of Beam: :func:`check_offsets` (a resume offset outside the log fails loudly)
and :func:`remove_orphans` (the output folders of ``replay --follow`` runs that never
committed).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from kernelstream import fs

LOCK = "LOCK"
HEAD = "HEAD"
STATES = "states.kss"
OFFSETS = "offsets.json"
INFO = "info.json"
COMPACT_EVERY = 16
KEEP = 2

_EPOCH_DIR = re.compile(r"^epoch-(\d{7,})$")
_MAGIC = b"KSSTATE\x00"
_VERSION = 1
_FLAG_BASE = 1
# magic, version, flags, epoch, count, key bytes, index CRC-32
_HEADER = struct.Struct("<8sHHQQQI")
_ENTRY = 8 + 8 + 8 + 4  # key end, offset, length, crc
_SLOT = 1 << 40  # index value = slot * _SLOT + position in that file's index
_CHUNK = 1 << 20


class CheckpointInUse(RuntimeError):  # noqa: N818 (the name the design and CLI use)
    """Another run (or this one, opened twice) writes to the checkpoint directory."""

    def __init__(self, directory: str, holder: Mapping[str, Any] | None) -> None:
        self.directory = directory
        self.holder = dict(holder or {})
        h = self.holder
        who = ""
        if h.get("pid") is not None:
            who = f" (pid {h['pid']} on {h.get('host', '?')}, since {h.get('since', '?')})"
        super().__init__(f"checkpoint directory {directory} is in use by another run{who}; "
                         "stop it or choose another --checkpoint")


class OffsetOutOfLog(ValueError):  # noqa: N818 (shared with the Kafka reader)
    """A resume offset lies outside the partition's log (see :func:`check_offsets`)."""

    def __init__(self, topic: str, partition: int, offset: int, beginning: int | None,
                 end: int | None) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.beginning, self.end = beginning, end
        where = f"cannot resume {topic}/{partition} at offset {offset}"
        if beginning is None or end is None:
            why = f"the topic has no partition {partition} now (was it recreated?)"
        elif offset < beginning:
            why = (f"its log now runs from offset {beginning} to {end}, so records this "
                   "checkpoint has not read were deleted (retention, or the topic was recreated)")
        else:
            why = (f"its log now runs from offset {beginning} to {end}, so the topic was "
                   "recreated or truncated since the checkpoint")
        super().__init__(f"{where}: {why}; start over with a new --checkpoint directory")


class CorruptSnapshotError(RuntimeError):
    """A snapshot file is damaged or missing (not a state the writer can leave behind)."""


# ---------------------------------------------------------------------------------------------
# The writer lock


def _since() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def _holder(fd: int) -> dict[str, Any] | None:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        doc = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


class WriterLock:
    """The exclusive, non-blocking ``flock`` on ``DIR/LOCK`` (also usable by the bounded
    replay's checkpoints). Two opens in one process conflict too: flock belongs to the open
    file, not the process. A child forked while it is held shares it."""

    def __init__(self, directory: str, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: str) -> WriterLock:
        path = os.path.join(directory, LOCK)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise CheckpointInUse(directory, holder) from None
        except OSError as exc:
            os.close(fd)
            raise OSError(exc.errno, f"cannot lock {path} ({exc.strerror}): the checkpoint "
                          "directory needs a local or mounted file system with working locks"
                          ) from None
        try:
            text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                               "since": _since()}) + "\n"
            os.ftruncate(fd, 0)
            os.pwrite(fd, text.encode(), 0)
        except BaseException:
            os.close(fd)  # closing releases the lock
            raise
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no stale holder text once free
        finally:
            os.close(fd)  # closing the last descriptor drops the flock


# ---------------------------------------------------------------------------------------------
# states.kss


@dataclass
class _Part:
    """The index of one ``states.kss`` (positions are absolute file offsets)."""

    epoch: int
    base: bool
    path: str
    keys: list[str]
    offsets: np.ndarray
    lengths: np.ndarray
    crcs: np.ndarray
    fd: int | None = field(default=None, repr=False)

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


class _Blob(NamedTuple):
    """What one key's state bytes are written from: memory, or an older file (copied)."""

    length: int
    crc: int
    data: bytes | None
    part: _Part | None = None
    offset: int = 0


def _read_header(f: Any, path: str, epoch: int) -> tuple[bool, int, int, int]:
    raw = f.read(_HEADER.size)
    if len(raw) < _HEADER.size:
        raise CorruptSnapshotError(f"{path}: truncated header")
    magic, version, flags, ep, n, key_bytes, crc = _HEADER.unpack(raw)
    if magic != _MAGIC:
        raise CorruptSnapshotError(f"{path}: not a kernelstream state file")
    if version != _VERSION:
        raise CorruptSnapshotError(f"{path}: state file version {version}, this kernelstream reads "
                              f"version {_VERSION}")
    if ep != epoch:
        raise CorruptSnapshotError(f"{path}: holds epoch {ep}, expected {epoch}")
    return bool(flags & _FLAG_BASE), n, key_bytes, crc


def _is_base(path: str, epoch: int) -> bool:
    try:
        with open(path, "rb") as f:
            return _read_header(f, path, epoch)[0]
    except FileNotFoundError:
        raise CorruptSnapshotError(f"{path} is missing") from None


def _read_part(path: str, epoch: int) -> _Part:
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise CorruptSnapshotError(f"{path} is missing") from None
    with f:
        base, n, key_bytes, crc = _read_header(f, path, epoch)
        index = f.read(n * _ENTRY + key_bytes)
    if len(index) != n * _ENTRY + key_bytes or zlib.crc32(index) != crc:
        raise CorruptSnapshotError(f"{path}: damaged index")
    ends = np.frombuffer(index, "<u8", n, 0)
    offsets = np.frombuffer(index, "<u8", n, 8 * n)
    lengths = np.frombuffer(index, "<u8", n, 16 * n)
    crcs = np.frombuffer(index, "<u4", n, 24 * n)
    area = index[n * _ENTRY:]
    starts = [0, *ends[:-1].tolist()] if n else []
    keys = [area[s:e].decode() for s, e in zip(starts, ends.tolist(), strict=True)]
    return _Part(epoch, base, path, keys, offsets, lengths, crcs)


def _open_fd(part: _Part) -> int:
    if part.fd is None:
        try:
            part.fd = os.open(part.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise CorruptSnapshotError(f"{part.path} is missing (deleted by a newer run's "
                                  "compaction?)") from None
    return part.fd


def _read_blob(part: _Part, i: int) -> bytes:
    off, n, crc = int(part.offsets[i]), int(part.lengths[i]), int(part.crcs[i])
    data = os.pread(_open_fd(part), n, off)
    if len(data) != n or zlib.crc32(data) != crc:
        raise CorruptSnapshotError(f"{part.path}: damaged state of {part.keys[i]!r}")
    return data


def _copy_blob(blob: _Blob, out: Any) -> None:
    assert blob.part is not None
    fd, pos, left, crc = _open_fd(blob.part), blob.offset, blob.length, 0
    while left:
        chunk = os.pread(fd, min(left, _CHUNK), pos)
        if not chunk:
            raise CorruptSnapshotError(f"{blob.part.path}: truncated state")
        crc = zlib.crc32(chunk, crc)
        out.write(chunk)
        pos += len(chunk)
        left -= len(chunk)
    if crc != blob.crc:
        raise CorruptSnapshotError(f"{blob.part.path}: damaged state at offset {blob.offset}")


def _write_states(path: str, epoch: int, base: bool, blobs: list[tuple[str, _Blob]]) -> _Part:
    """Write ``states.kss`` (``blobs`` sorted by key), fsynced; its index as a :class:`_Part`."""
    n = len(blobs)
    encoded = [k.encode() for k, _ in blobs]
    area = b"".join(encoded)
    ends = np.cumsum(np.fromiter((len(b) for b in encoded), np.uint64, n), dtype="<u8")
    lengths = np.fromiter((b.length for _, b in blobs), "<u8", n)
    crcs = np.fromiter((b.crc for _, b in blobs), "<u4", n)
    start = _HEADER.size + n * _ENTRY + len(area)
    offsets = np.empty(n, "<u8")
    if n:
        offsets[0] = start
        np.cumsum(lengths[:-1], out=offsets[1:])
        offsets[1:] += np.uint64(start)
    index = b"".join([ends.tobytes(), offsets.tobytes(), lengths.tobytes(), crcs.tobytes(), area])
    header = _HEADER.pack(_MAGIC, _VERSION, _FLAG_BASE if base else 0, epoch, n, len(area),
                          zlib.crc32(index))
    with open(path, "wb") as f:
        f.write(header)
        f.write(index)
        for _, blob in blobs:
            if blob.data is not None:
                f.write(blob.data)
            else:
                _copy_blob(blob, f)
        f.flush()
        os.fsync(f.fileno())
    return _Part(epoch, base, path, [k for k, _ in blobs], offsets, lengths, crcs)


# ---------------------------------------------------------------------------------------------
# Directory helpers


def _local_dir(directory: str | os.PathLike[str]) -> str:
    d = os.fspath(directory)
    if fs.is_remote(d):
        raise ValueError(f"checkpoint directory {d}: a stream's snapshots need a local or mounted "
                         "file system (the writer lock is a file lock), not an object store")
    return fs.local_path(d)


def epoch_dir(directory: str, epoch: int) -> str:
    return os.path.join(directory, f"epoch-{epoch:07d}")


def _epochs_on_disk(directory: str) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := _EPOCH_DIR.match(name)))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _head_text(directory: str) -> str | None:
    try:
        with open(os.path.join(directory, HEAD), "rb") as f:
            return f.read().decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None


def _read_head(directory: str) -> int | None:
    path = os.path.join(directory, HEAD)
    text = _head_text(directory)
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise CorruptSnapshotError(f"{path}: not an epoch number: {text[:40]!r}")
    head = int(text)
    if not os.path.isdir(epoch_dir(directory, head)):
        raise CorruptSnapshotError(f"{path} names epoch {head}, but {epoch_dir(directory, head)} "
                              "is missing")
    return head


def is_snapshot_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a committed stream snapshot (a ``HEAD``)."""
    p = os.fspath(path)
    return not fs.is_remote(p) and os.path.isfile(os.path.join(fs.local_path(p), HEAD))


def _refuse_replay_checkpoint(directory: str) -> None:
    if any(n.startswith("ckpt-") and n.endswith(".committed") for n in os.listdir(directory)):
        raise ValueError(f"{directory} holds checkpoints of `kernelstream replay`; a stream "
                         "needs its own --checkpoint directory (warm-start from it with "
                         "--init-from)")


def _plain(doc: Any) -> Any:
    """JSON-ready copy (objects without a JSON form become their ``str``)."""
    return json.loads(json.dumps(doc, default=str))


# ---------------------------------------------------------------------------------------------
# Readers and the writer


class SnapshotView:
    """A read-only snapshot: the state of every model as of epoch ``head``, without the lock.

    Open it with :meth:`open`. A worker that restores models lazily pins the epoch its run
    resumed from (:attr:`SnapshotStore.resumed_from`): ``SnapshotView.open(dir, epoch)``.
    It pickles as ``(directory, head)`` and reads nothing until first used, so a DoFn can
    carry it. Thread-safe."""

    def __init__(self, directory: str, head: int | None) -> None:
        self.directory = directory
        self._head = head
        self._mutex = threading.RLock()
        self._parts: list[_Part] = []  # the chain, oldest first, once the index is built
        self._where: dict[str, int] | None = None
        self._bases: dict[int, bool] = {}
        self._meta: dict[int, dict[str, Any]] = {}

    @classmethod
    def open(cls, directory: str | os.PathLike[str], epoch: int | None = None) -> SnapshotView:
        """The snapshot of ``epoch`` (default: ``HEAD`` now; None when nothing was committed)."""
        d = _local_dir(directory)
        head = _read_head(d)
        if epoch is not None:
            if head is None or not 1 <= epoch <= head or not os.path.isdir(epoch_dir(d, epoch)):
                raise CorruptSnapshotError(f"{d} has no committed epoch {epoch} (HEAD: {head})")
            head = epoch
        return cls(d, head)

    def __reduce__(self) -> Any:
        return (SnapshotView, (self.directory, self._head))

    def __enter__(self) -> SnapshotView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def head(self) -> int | None:
        """The epoch served (None: no snapshot yet; every :meth:`get` is None)."""
        return self._head

    def offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to read of every ``(topic, partition)`` as of :attr:`head`."""
        if self._head is None:
            return {}
        doc = self._json(self._head, OFFSETS)
        return {(str(o["topic"]), int(o["partition"])): int(o["offset"])
                for o in doc["offsets"]}

    def info(self) -> dict[str, Any]:
        """The ``info`` committed with :attr:`head` (``{}`` when none)."""
        if self._head is None:
            return {}
        return dict(self._json(self._head, INFO)["info"])

    def record(self, epoch: int | None = None) -> dict[str, Any]:
        """``info.json`` of an epoch as written: epoch, kind, base, keys, committed_at, info."""
        e = self._head if epoch is None else epoch
        return {} if e is None else dict(self._json(e, INFO))

    def get(self, key: str) -> bytes | None:
        """The model's state bytes as of :attr:`head` (None: never snapshotted)."""
        with self._mutex:  # the index and its files change together on a commit
            pos = self._index().get(key)
            if pos is None:
                return None
            part = self._parts[pos // _SLOT]
        return _read_blob(part, pos % _SLOT)

    def __contains__(self, key: object) -> bool:
        return key in self._index()

    def __len__(self) -> int:
        return len(self._index())

    def keys(self) -> list[str]:
        """Every model's key, sorted."""
        return sorted(self._index())

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every ``(key, state bytes)``, file by file in file order (sequential reads; one
        state in memory at a time)."""
        where = self._index()
        by_slot: dict[int, list[int]] = {}
        for pos in where.values():
            by_slot.setdefault(pos // _SLOT, []).append(pos % _SLOT)
        for slot in sorted(by_slot):
            part = self._parts[slot]
            for i in sorted(by_slot[slot], key=lambda j: int(part.offsets[j])):
                yield part.keys[i], _read_blob(part, i)

    def close(self) -> None:
        with self._mutex:
            for part in self._parts:
                part.close()
            self._parts, self._where = [], None

    # -- internals --------------------------------------------------------------------------

    def _json(self, epoch: int, name: str) -> dict[str, Any]:
        if name == INFO and epoch in self._meta:
            return self._meta[epoch]
        path = os.path.join(epoch_dir(self.directory, epoch), name)
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read())
        except FileNotFoundError:
            raise CorruptSnapshotError(f"{path} is missing") from None
        except ValueError as exc:
            raise CorruptSnapshotError(f"{path}: {exc}") from None
        if name == INFO:
            self._meta[epoch] = doc
        return dict(doc)

    def _states_path(self, epoch: int) -> str:
        return os.path.join(epoch_dir(self.directory, epoch), STATES)

    def _base_flag(self, epoch: int) -> bool:
        if epoch not in self._bases:
            self._bases[epoch] = _is_base(self._states_path(epoch), epoch)
        return self._bases[epoch]

    def _chain(self, epoch: int) -> list[int]:
        """The epochs whose files make up ``epoch``'s snapshot: its base, then the deltas."""
        out = [epoch]
        while not self._base_flag(out[-1]):
            if out[-1] <= 1:
                raise CorruptSnapshotError(f"{self.directory}: epoch 1 is not a full snapshot")
            out.append(out[-1] - 1)
        return out[::-1]

    def _index(self) -> dict[str, int]:
        where = self._where
        if where is not None:
            return where
        with self._mutex:
            if self._where is None:
                parts: list[_Part] = []
                where = {}
                if self._head is not None:
                    for slot, e in enumerate(self._chain(self._head)):
                        part = _read_part(self._states_path(e), e)
                        parts.append(part)
                        # newer files come later and override (C-speed update)
                        where.update(zip(part.keys, range(slot * _SLOT,
                                                          slot * _SLOT + len(part.keys)),
                                         strict=True))
                self._parts, self._where = parts, where
            return self._where


class SnapshotStore(SnapshotView):
    """The one writer of a checkpoint directory (see the module doc). Open it with
    :meth:`open`; :meth:`commit` adds an epoch; reads serve the newest committed epoch.
    Commit from one thread, and read from others through a :class:`SnapshotView` (a commit
    that compacts closes the files this object reads from)."""

    def __init__(self, directory: str, head: int | None, lock: WriterLock,
                 compact_every: int, keep: int) -> None:
        super().__init__(directory, head)
        self._lock = lock
        self.compact_every = compact_every
        self.keep = keep
        self.resumed_from = head  # its chain survives compaction while this store is open

    @classmethod
    def open(cls, directory: str | os.PathLike[str], create: bool = True, *,  # type: ignore[override]
             compact_every: int = COMPACT_EVERY, keep: int = KEEP) -> SnapshotStore:
        """Lock ``directory`` (created if ``create``) for writing, remove the remains of an
        unfinished commit, and serve its ``HEAD``. Raises :class:`CheckpointInUse` when
        another writer holds it."""
        if compact_every < 0 or keep < 1:
            raise ValueError(f"compact_every must be >= 0 and keep >= 1, got {compact_every} "
                             f"and {keep}")
        d = _local_dir(directory)
        if not os.path.isdir(d):
            if not create:
                raise FileNotFoundError(f"checkpoint directory {d} does not exist")
            os.makedirs(d, exist_ok=True)
        _refuse_replay_checkpoint(d)
        lock = WriterLock.acquire(d)
        try:
            head = _read_head(d)
            removed = False
            for e in _epochs_on_disk(d):
                if head is None or e > head:
                    shutil.rmtree(epoch_dir(d, e))  # an unfinished commit's remains
                    removed = True
            if os.path.exists(tmp := os.path.join(d, HEAD + ".tmp")):
                os.unlink(tmp)
                removed = True
            if removed:
                _fsync_dir(d)
            store = cls(d, head, lock, compact_every, keep)
            store._prune()  # a crash during the last prune may have left old epochs
        except BaseException:
            lock.release()
            raise
        return store

    def __reduce__(self) -> Any:
        raise TypeError("the snapshot writer cannot be pickled; give workers "
                        "SnapshotView.open(directory, store.resumed_from)")

    @property
    def base(self) -> int | None:
        """The epoch of the full snapshot under :attr:`head`."""
        return None if self._head is None else self._chain(self._head)[0]

    def close(self) -> None:
        """Release the lock (and the open files); the store serves nothing afterwards."""
        super().close()
        self._lock.release()

    def commit(self, states: Mapping[str, bytes], offsets: Mapping[tuple[str, int], int],
               info: Mapping[str, Any]) -> int:
        """Commit a new epoch: ``states`` = the bytes of the models changed since the last
        commit (older models carry over), ``offsets`` = the full map of next offsets to read,
        ``info`` = run info (JSON; other objects are stored as their ``str``). Returns the
        new epoch; on any error nothing is committed."""
        if not self._lock.held:
            raise RuntimeError(f"the snapshot store of {self.directory} is closed")
        blobs = _blobs(states)
        offs = _offsets_doc(offsets)
        plain = _plain(dict(info))
        e = (self._head or 0) + 1
        base = self._head is None or e - self._chain(self._head)[0] > self.compact_every
        if base:
            blobs = self._full(blobs)
        d = epoch_dir(self.directory, e)
        if os.path.exists(d):
            shutil.rmtree(d)  # a failed commit attempt of this store
        try:
            os.mkdir(d)
            part = _write_states(os.path.join(d, STATES), e, base, blobs)
            _write_file(os.path.join(d, OFFSETS), _json_bytes({"epoch": e, "offsets": offs}))
            meta = {"epoch": e, "kind": "base" if base else "delta",
                    "base": e if base else self._chain(self._head or 0)[0],
                    "keys": len(blobs), "committed_at": _since(), "info": plain}
            _write_file(os.path.join(d, INFO), _json_bytes(meta))
            _fsync_dir(d)
            _fsync_dir(self.directory)
            tmp = os.path.join(self.directory, HEAD + ".tmp")
            _write_file(tmp, f"{e}\n".encode())
            os.replace(tmp, os.path.join(self.directory, HEAD))  # the commit point
        except BaseException:
            # HEAD decides: an interrupt right after the replace must not undo a commit
            if _head_text(self.directory) != str(e):
                shutil.rmtree(d, ignore_errors=True)
                raise
            self._advance(e, base, part, meta)
            raise
        self._advance(e, base, part, meta)
        _fsync_dir(self.directory)  # HEAD's new entry survives a power cut
        self._prune()
        return e

    # -- internals --------------------------------------------------------------------------

    def _full(self, fresh: list[tuple[str, _Blob]]) -> list[tuple[str, _Blob]]:
        """Every model's newest bytes: ``fresh`` ones, the others copied from their files."""
        new = dict(fresh)
        where = self._index()
        for key, pos in where.items():
            if key not in new:
                part, i = self._parts[pos // _SLOT], pos % _SLOT
                new[key] = _Blob(int(part.lengths[i]), int(part.crcs[i]), None, part,
                                 int(part.offsets[i]))
        return sorted(new.items())

    def _advance(self, e: int, base: bool, part: _Part, meta: dict[str, Any]) -> None:
        """Serve epoch ``e`` (the index, if built, learns what ``part`` holds)."""
        with self._mutex:
            self._head = e
            self._bases[e] = base
            self._meta[e] = meta
            if self._where is None:
                return
            if base:  # every key is in the new base: the older files serve nothing
                for old in self._parts:
                    old.close()
                self._parts, self._where = [], {}
            self._parts.append(part)
            slot = len(self._parts) - 1
            self._where.update(zip(part.keys, range(slot * _SLOT, slot * _SLOT + len(part.keys)),
                                   strict=True))

    def _prune(self) -> None:
        """Delete the epochs no kept snapshot needs (see the module doc)."""
        if self._head is None:
            return
        needed: set[int] = set()
        for e in range(max(1, self._head - self.keep + 1), self._head + 1):
            needed.update(self._chain(e))
        if self.resumed_from is not None:
            needed.update(self._chain(self.resumed_from))
        for e in _epochs_on_disk(self.directory):
            if e <= self._head and e not in needed:
                shutil.rmtree(epoch_dir(self.directory, e), ignore_errors=True)
                self._bases.pop(e, None)
                self._meta.pop(e, None)


def _blobs(states: Mapping[str, bytes]) -> list[tuple[str, _Blob]]:
    out = []
    for key, value in states.items():
        if not isinstance(key, str):
            raise TypeError(f"state keys must be str, got {type(key).__name__}: {key!r}")
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"the state of {key!r} must be bytes, got {type(value).__name__}")
        data = bytes(value)
        out.append((key, _Blob(len(data), zlib.crc32(data), data)))
    return sorted(out)


def _offsets_doc(offsets: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
    out = []
    for (topic, partition), offset in sorted(offsets.items()):
        if not isinstance(topic, str) or int(partition) < 0 or int(offset) < 0:
            raise ValueError(f"bad source offset {(topic, partition)!r} -> {offset!r}")
        out.append({"topic": topic, "partition": int(partition), "offset": int(offset)})
    return out


def _json_bytes(doc: Any) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def read_states_from(path: str | os.PathLike[str]) -> Iterator[tuple[str, bytes]]:
    """Every ``(model key, state bytes)`` of a stream checkpoint directory's ``HEAD`` (warm
    start, export). Raises ``ValueError`` at once when ``path`` holds no stream snapshot; a
    replay checkpoint is the caller's to read (``transforms.checkpoint``)."""
    if not is_snapshot_dir(path):
        raise ValueError(f"{os.fspath(path)} holds no stream snapshot (no {HEAD} file)")
    view = SnapshotView.open(path)

    def items() -> Iterator[tuple[str, bytes]]:
        with view:
            yield from view.items()

    return items()


# ---------------------------------------------------------------------------------------------
# Output files committed with the snapshot

_PENDING = ".pending"
_PENDING_NAME = re.compile(r"^e(\d{7,})-(.+)$")


class Published(NamedTuple):
    published: int  # pending files of committed epochs renamed into place
    removed: int  # pending files of uncommitted epochs deleted


def pending_path(out_dir: str | os.PathLike[str], output: str, epoch: int, part: str,
                 suffix: str = ".parquet") -> str:
    """Where a writer stages ``output``'s rows of ``epoch`` (``OUT/<output>/.pending/
    e0000007-<part>.parquet``; the ``.pending`` folder is created). ``part`` tells the
    writer's files of one epoch apart."""
    if not part or "/" in part or "/" in output or "/" in suffix:
        raise ValueError(f"bad output file part: output={output!r} part={part!r}")
    if epoch < 1:
        raise ValueError(f"epoch must be >= 1, got {epoch}")
    d = os.path.join(_local_dir(out_dir), output, _PENDING)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"e{epoch:07d}-{part}{suffix}")


def published_path(out_dir: str | os.PathLike[str], output: str, epoch: int, part: str,
                   suffix: str = ".parquet") -> str:
    """The name a pending file gets once its epoch is committed (``OUT/<output>/
    part-e0000007-<part>.parquet``)."""
    return os.path.join(_local_dir(out_dir), output, f"part-e{epoch:07d}-{part}{suffix}")


def publish(out_dir: str | os.PathLike[str], outputs: Iterable[str] | None, head: int | None,
            *, remove_uncommitted: bool = True) -> Published:
    """Publish the pending files of epochs <= ``head`` (rename into ``OUT/<output>/``) and
    delete those of later epochs, which a crash left uncommitted. Call it after each commit
    (with ``remove_uncommitted=False`` while the next epoch's files are already open) and on
    start, where it rolls a commit forward whose publishing a crash cut short. Idempotent.
    ``outputs`` None: every folder of ``out_dir`` with pending files."""
    root = _local_dir(out_dir)
    if outputs is None:
        try:
            outputs = sorted(n for n in os.listdir(root)
                             if os.path.isdir(os.path.join(root, n, _PENDING)))
        except FileNotFoundError:
            outputs = []
    published = removed = 0
    for output in outputs:
        odir = os.path.join(root, output)
        pdir = os.path.join(odir, _PENDING)
        try:
            names = sorted(os.listdir(pdir))
        except FileNotFoundError:
            continue
        moved = False
        for name in names:
            m = _PENDING_NAME.match(name)
            if m is None:
                continue
            src = os.path.join(pdir, name)
            if head is not None and int(m.group(1)) <= head:
                os.replace(src, os.path.join(odir, f"part-{name}"))
                published += 1
                moved = True
            elif remove_uncommitted:
                os.unlink(src)
                removed += 1
        if moved:  # the renames survive a power cut (else the next start redoes them)
            _fsync_dir(odir)
    return Published(published, removed)


# ---------------------------------------------------------------------------------------------
# Source offsets


def check_offsets(committed: Mapping[tuple[str, int], int],
                  beginning: Mapping[tuple[str, int], int],
                  end: Mapping[tuple[str, int], int]) -> None:
    """Refuse to resume where the log no longer matches the checkpoint: raise
    :class:`OffsetOutOfLog` (one line) for the first ``(topic, partition)`` whose committed
    next offset is below the log's ``beginning`` (records were deleted unread) or above its
    ``end`` (the topic was recreated or truncated), or that no longer exists.

    ``end`` is the offset after the last record (where the next record will be written).
    Brokers that report it too low (tansu) must not fail a valid resume: the reader passes
    ``max(reported end, highest offset seen + 1)``. Partitions in the log but not in
    ``committed`` (new ones) are not checked: they are read from their beginning."""
    for (topic, partition), offset in sorted(committed.items()):
        tp = (topic, partition)
        lo, hi = beginning.get(tp), end.get(tp)
        if lo is None or hi is None or not lo <= offset <= hi:
            raise OffsetOutOfLog(topic, partition, offset, lo, hi)


# ---------------------------------------------------------------------------------------------
# The bounded replay's --follow outputs

_RUN_DIR = re.compile(r"^ckpt-(\d{6,})$")


def remove_orphans(out_dir: str | os.PathLike[str], committed: Iterable[int]) -> list[str]:
    """Delete the output folders ``OUT/ckpt-NNNNNN/`` of ``replay --follow`` runs whose
    checkpoint never committed; the deleted paths. ``committed``: the numbers of the
    checkpoints still committed in the checkpoint directory.

    A folder is an orphan when its number is not committed and above the oldest committed
    one (with none committed: every folder). Folders below the oldest kept checkpoint stay:
    pruning removed the record of whether they committed. Calling this before every run,
    while holding the checkpoint directory's :class:`WriterLock`, therefore removes every
    orphan, and before a failed run's number is used again. Local paths only."""
    if fs.is_remote(os.fspath(out_dir)):
        raise ValueError(f"{os.fspath(out_dir)}: orphan removal needs a local or mounted "
                         "file system")
    root = fs.local_path(os.fspath(out_dir))
    done = set(committed)
    floor = min(done, default=0)
    removed = []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    for name in names:
        m = _RUN_DIR.match(name)
        path = os.path.join(root, name)
        if m is None or not os.path.isdir(path):
            continue
        n = int(m.group(1))
        if n not in done and n > floor:
            shutil.rmtree(path)
            removed.append(path)
    return removed
