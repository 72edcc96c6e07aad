"""Snapshots of a live stream: learner states and source offsets, committed together.

This is the exactly-once core of ``kernelstream stream --checkpoint DIR``. A snapshot is an
*epoch* (1, 2, ...) and the directory holds::

    DIR/LOCK                     flock'ed by the one writer; text: its pid, host, start time
    DIR/HEAD                     the newest committed epoch (text), replaced atomically
    DIR/epoch-0000007/
        states.kss               the state bytes of the models that changed since epoch 6
                                 (a *delta*; empty bytes: a *tombstone*, the model was
                                 forgotten), or of every model (a *base*)
        offsets.json             the next offset to read of every (topic, partition)
                                 and, where known, the fingerprint of the last record read
                                 before it ("last": offset, timestamp_ms, digest)
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

A reader loads only the indexes of the ``states.kss`` files (a key -> location map, about 100
bytes a key; the format is :mod:`kernelstream.engine.live.snapshot.files`) and reads a model's
bytes on demand with ``pread``, so a worker that sees few models never loads the others (this
replaces the replay's ``AsDict`` side input of every state).

The writer lock (:mod:`kernelstream.engine.writer_lock`) is ``fcntl.flock``: the kernel
releases it when its holder dies, even by ``kill -9``, so no stale lock survives a crash.
Hence the stream's snapshots need a local or mounted file system with working locks (not an
object store such as ``gs://``). The same file system also stages the stream's output files:
:func:`~kernelstream.engine.live.snapshot.outputs.pending_path` and
:func:`~kernelstream.engine.live.snapshot.outputs.publish` keep rows of an uncommitted epoch out of
the published files.

The names this module has always offered stay importable from here: the lock
(:class:`WriterLock`, :class:`CheckpointInUse`), the file errors (:class:`CorruptSnapshotError`),
the offset check (:class:`OffsetOutOfLog`, :func:`check_offsets`, in
:mod:`kernelstream.engine.offsets`) and the output files (:func:`pending_path`,
:func:`published_path`, :func:`publish`, :func:`remove_orphans`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from kernelstream import fs
from kernelstream.engine.live.clock import CLOCK_KEY
from kernelstream.engine.live.snapshot.files import (
    Blob,
    CorruptSnapshotError,
    Part,
    fsync_dir,
    is_base,
    local_dir,
    read_blob,
    read_part,
    state_blobs,
    write_file,
    write_states,
)
from kernelstream.engine.live.snapshot.outputs import (
    Published,
    pending_path,
    publish,
    published_path,
    remove_orphans,
)
from kernelstream.engine.offsets import Fingerprint, OffsetOutOfLog, check_offsets
from kernelstream.engine.writer_lock import LOCK, CheckpointInUse, WriterLock, utc_now_text

HEAD = "HEAD"
STATES = "states.kss"
OFFSETS = "offsets.json"
INFO = "info.json"
COMPACT_EVERY = 16
KEEP = 2

_EPOCH_DIR = re.compile(r"^epoch-(\d{7,})$")
_SLOT = 1 << 40  # index value = slot * _SLOT + position in that file's index


# ---------------------------------------------------------------------------------------------
# Directory helpers


def epoch_dir(directory: str, epoch: int) -> str:
    return os.path.join(directory, f"epoch-{epoch:07d}")


def _epochs_on_disk(directory: str) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := _EPOCH_DIR.match(name)))


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
        self._parts: list[Part] = []  # the chain, oldest first, once the index is built
        self._where: dict[str, int] | None = None
        self._bases: dict[int, bool] = {}
        self._meta: dict[int, dict[str, Any]] = {}

    @classmethod
    def open(cls, directory: str | os.PathLike[str], epoch: int | None = None) -> SnapshotView:
        """The snapshot of ``epoch`` (default: ``HEAD`` now; None when nothing was committed)."""
        d = local_dir(directory)
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

    def fingerprints(self) -> dict[tuple[str, int], Fingerprint]:
        """The :class:`~kernelstream.engine.offsets.Fingerprint` of the last record read of
        each ``(topic, partition)`` as of :attr:`head`, where the snapshot has one (older
        snapshots have none: they resume without this check)."""
        if self._head is None:
            return {}
        doc = self._json(self._head, OFFSETS)
        return {(str(o["topic"]), int(o["partition"])): Fingerprint.from_doc(o["last"])
                for o in doc["offsets"] if o.get("last")}

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
        """The model's state bytes as of :attr:`head` (None: never snapshotted); the router
        clock's for :data:`~kernelstream.engine.live.clock.CLOCK_KEY`."""
        with self._mutex:  # the index and its files change together on a commit
            pos = self._index().get(key)
            if pos is None:
                return None
            part = self._parts[pos // _SLOT]
        return read_blob(part, pos % _SLOT)

    def __contains__(self, key: object) -> bool:
        """Whether a model of this key was snapshotted (as :meth:`keys`: the router clock's
        state is no model; :meth:`get` reads it)."""
        return key != CLOCK_KEY and key in self._index()

    def __len__(self) -> int:
        """The number of models."""
        return len(self._index()) - (CLOCK_KEY in self._index())

    def keys(self) -> list[str]:
        """Every model's key, sorted (the router clock's state is no model)."""
        return sorted(k for k in self._index() if k != CLOCK_KEY)

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every model's ``(key, state bytes)``, file by file in file order (sequential
        reads; one state in memory at a time)."""
        where = self._index()
        by_slot: dict[int, list[int]] = {}
        for key, pos in where.items():
            if key == CLOCK_KEY:
                continue
            by_slot.setdefault(pos // _SLOT, []).append(pos % _SLOT)
        for slot in sorted(by_slot):
            part = self._parts[slot]
            for i in sorted(by_slot[slot], key=lambda j: int(part.offsets[j])):
                yield part.keys[i], read_blob(part, i)

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
            self._bases[epoch] = is_base(self._states_path(epoch), epoch)
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
                parts: list[Part] = []
                where = {}
                if self._head is not None:
                    for slot, e in enumerate(self._chain(self._head)):
                        part = read_part(self._states_path(e), e)
                        parts.append(part)
                        # newer files come later and override (C-speed update)
                        where.update(zip(part.keys, range(slot * _SLOT,
                                                          slot * _SLOT + len(part.keys)),
                                         strict=True))
                        _drop_tombstones(where, part)
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
        d = local_dir(directory)
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
                fsync_dir(d)
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
               info: Mapping[str, Any],
               fingerprints: Mapping[tuple[str, int], Fingerprint] | None = None) -> int:
        """Commit a new epoch: ``states`` = the bytes of the models changed since the last
        commit (older models carry over; empty bytes drop a model, a tombstone of
        ``--forget-entities-after``), ``offsets`` = the full map of next offsets to read,
        ``info`` = run info (JSON; other objects are stored as their ``str``),
        ``fingerprints`` = the last record read of some partitions (below their offsets).
        Returns the new epoch; on any error nothing is committed."""
        if not self._lock.held:
            raise RuntimeError(f"the snapshot store of {self.directory} is closed")
        blobs = state_blobs(states)
        offs = _offsets_doc(offsets, fingerprints or {})
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
            part = write_states(os.path.join(d, STATES), e, base, blobs)
            write_file(os.path.join(d, OFFSETS), _json_bytes({"epoch": e, "offsets": offs}))
            meta = {"epoch": e, "kind": "base" if base else "delta",
                    "base": e if base else self._chain(self._head or 0)[0],
                    "keys": len(blobs), "committed_at": utc_now_text(), "info": plain}
            write_file(os.path.join(d, INFO), _json_bytes(meta))
            fsync_dir(d)
            fsync_dir(self.directory)
            tmp = os.path.join(self.directory, HEAD + ".tmp")
            write_file(tmp, f"{e}\n".encode())
            os.replace(tmp, os.path.join(self.directory, HEAD))  # the commit point
        except BaseException:
            # HEAD decides: an interrupt right after the replace must not undo a commit
            if _head_text(self.directory) != str(e):
                shutil.rmtree(d, ignore_errors=True)
                raise
            self._advance(e, base, part, meta)
            raise
        self._advance(e, base, part, meta)
        fsync_dir(self.directory)  # HEAD's new entry survives a power cut
        self._prune()
        return e

    # -- internals --------------------------------------------------------------------------

    def _full(self, fresh: list[tuple[str, Blob]]) -> list[tuple[str, Blob]]:
        """Every model's newest bytes: ``fresh`` ones, the others copied from their files (a
        base holds no tombstone: a key forgotten is simply not there)."""
        new = dict(fresh)
        where = self._index()
        for key, pos in where.items():
            if key not in new:
                part, i = self._parts[pos // _SLOT], pos % _SLOT
                new[key] = Blob(int(part.lengths[i]), int(part.crcs[i]), None, part,
                                int(part.offsets[i]))
        return sorted((k, b) for k, b in new.items() if b.length)

    def _advance(self, e: int, base: bool, part: Part, meta: dict[str, Any]) -> None:
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
            _drop_tombstones(self._where, part)

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


def _drop_tombstones(where: dict[str, int], part: Part) -> None:
    """Keys whose newest bytes are ``part``'s empty ones (a forgotten model's tombstone) are
    in no snapshot from then on."""
    if part.base or not len(part.lengths) or part.lengths.min() > 0:
        return
    for i in np.flatnonzero(part.lengths == 0).tolist():
        where.pop(part.keys[i], None)


def _offsets_doc(offsets: Mapping[tuple[str, int], int],
                 fingerprints: Mapping[tuple[str, int], Fingerprint]) -> list[dict[str, Any]]:
    out = []
    for (topic, partition), offset in sorted(offsets.items()):
        if not isinstance(topic, str) or int(partition) < 0 or int(offset) < 0:
            raise ValueError(f"bad source offset {(topic, partition)!r} -> {offset!r}")
        entry: dict[str, Any] = {"topic": topic, "partition": int(partition),
                                 "offset": int(offset)}
        fp = fingerprints.get((topic, partition))
        if fp is not None and fp.offset < int(offset):  # a record read before the offset
            entry["last"] = fp.as_doc()
        out.append(entry)
    return out


def _json_bytes(doc: Any) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def read_states_from(path: str | os.PathLike[str]) -> Iterator[tuple[str, bytes]]:
    """Every ``(model key, state bytes)`` of a stream checkpoint directory's ``HEAD`` (warm
    start, export). Raises ``ValueError`` at once when ``path`` holds no stream snapshot; a
    replay checkpoint is the caller's to read (``transforms.replay.checkpoint``)."""
    if not is_snapshot_dir(path):
        raise ValueError(f"{os.fspath(path)} holds no stream snapshot (no {HEAD} file)")
    view = SnapshotView.open(path)

    def items() -> Iterator[tuple[str, bytes]]:
        with view:
            yield from view.items()

    return items()


__all__ = ["COMPACT_EVERY", "HEAD", "INFO", "KEEP", "LOCK", "OFFSETS", "STATES", "CheckpointInUse",
           "CorruptSnapshotError", "OffsetOutOfLog", "Published", "SnapshotStore", "SnapshotView",
           "WriterLock", "check_offsets", "epoch_dir", "is_snapshot_dir", "pending_path",
           "publish", "published_path", "read_states_from", "remove_orphans"]
