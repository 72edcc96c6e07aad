"""The files of a stream snapshot at the byte level: ``states.kss`` and the durable writes.

:mod:`kernelstream.engine.live.snapshot.store` decides *what* an epoch holds and when it is
committed; this module only knows how one ``states.kss`` is laid out, written (fsynced) and read
back (an index first, then each model's bytes on demand with ``pread``, CRC-checked), plus the fsync
and local-path helpers that the store and the output publishing
(:mod:`kernelstream.engine.live.snapshot.outputs`) share. Keeping the format here lets the store
read as the commit protocol it is.

``states.kss`` (little-endian; no pickle)::

    header   magic "KSSTATE\\0", version u16, flags u16 (1 = base), epoch u64, count u64,
             key bytes u64, CRC-32 of the index u32
    index    key ends u64[count], blob offsets u64[count], blob lengths u64[count],
             blob CRC-32s u32[count], the UTF-8 keys concatenated (sorted by key)
    blobs    the state bytes, in index order
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from kernelstream import fs

_MAGIC = b"KSSTATE\x00"
_VERSION = 1
_FLAG_BASE = 1
# magic, version, flags, epoch, count, key bytes, index CRC-32
_HEADER = struct.Struct("<8sHHQQQI")
_ENTRY = 8 + 8 + 8 + 4  # key end, offset, length, crc
_CHUNK = 1 << 20


class CorruptSnapshotError(RuntimeError):
    """A snapshot file is damaged or missing (not a state the writer can leave behind)."""


@dataclass
class Part:
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


class Blob(NamedTuple):
    """What one key's state bytes are written from: memory, or an older file (copied)."""

    length: int
    crc: int
    data: bytes | None
    part: Part | None = None
    offset: int = 0


def read_header(f: Any, path: str, epoch: int) -> tuple[bool, int, int, int]:
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


def is_base(path: str, epoch: int) -> bool:
    try:
        with open(path, "rb") as f:
            return read_header(f, path, epoch)[0]
    except FileNotFoundError:
        raise CorruptSnapshotError(f"{path} is missing") from None


def read_part(path: str, epoch: int) -> Part:
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise CorruptSnapshotError(f"{path} is missing") from None
    with f:
        base, n, key_bytes, crc = read_header(f, path, epoch)
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
    return Part(epoch, base, path, keys, offsets, lengths, crcs)


def _open_fd(part: Part) -> int:
    if part.fd is None:
        try:
            part.fd = os.open(part.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise CorruptSnapshotError(f"{part.path} is missing (deleted by a newer run's "
                                  "compaction?)") from None
    return part.fd


def read_blob(part: Part, i: int) -> bytes:
    off, n, crc = int(part.offsets[i]), int(part.lengths[i]), int(part.crcs[i])
    data = os.pread(_open_fd(part), n, off)
    if len(data) != n or zlib.crc32(data) != crc:
        raise CorruptSnapshotError(f"{part.path}: damaged state of {part.keys[i]!r}")
    return data


def _copy_blob(blob: Blob, out: Any) -> None:
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


def write_states(path: str, epoch: int, base: bool, blobs: list[tuple[str, Blob]]) -> Part:
    """Write ``states.kss`` (``blobs`` sorted by key), fsynced; its index as a :class:`Part`."""
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
    return Part(epoch, base, path, [k for k, _ in blobs], offsets, lengths, crcs)


def state_blobs(states: Mapping[str, bytes]) -> list[tuple[str, Blob]]:
    """``{key: state bytes}`` checked and ready for :func:`write_states` (sorted by key)."""
    out = []
    for key, value in states.items():
        if not isinstance(key, str):
            raise TypeError(f"state keys must be str, got {type(key).__name__}: {key!r}")
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"the state of {key!r} must be bytes, got {type(value).__name__}")
        data = bytes(value)
        out.append((key, Blob(len(data), zlib.crc32(data), data)))
    return sorted(out)


# -- durable local files -------------------------------------------------------------------


def local_dir(directory: str | os.PathLike[str]) -> str:
    """``directory`` as a local path; an object store URL is refused (no file locks)."""
    d = os.fspath(directory)
    if fs.is_remote(d):
        raise ValueError(f"checkpoint directory {d}: a stream's snapshots need a local or mounted "
                         "file system (the writer lock is a file lock), not an object store")
    return fs.local_path(d)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
