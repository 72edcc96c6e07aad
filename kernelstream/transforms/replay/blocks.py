"""Compact Beam coders of :class:`~kernelstream.engine.replay.blocks.Block` and
:class:`~kernelstream.engine.replay.blocks.PredictionBlock`.

Pickling numpy arrays costs ~300 µs an element; these coders write the raw numpy buffers behind
a small fixed header (no pickle), so encoding a block is a few memcpys. Importing this module
registers them for the two types, so typed PCollections use them.
"""

from __future__ import annotations

import struct
from typing import Any

import apache_beam as beam
import numpy as np

from kernelstream.engine.replay.blocks import Block, PredictionBlock
from kernelstream.sparse import CSR

# -- raw buffer packing -------------------------------------------------------------------------

# Header of every coded value: 3-byte magic (one per record type) + 1-byte format version, so a
# reader can reject data written by an incompatible build instead of misreading it.
_VERSION = 1


def _header(magic: bytes) -> bytes:
    return magic + bytes([_VERSION])


def _check_header(data: bytes, magic: bytes) -> int:
    if data[:3] != magic:
        raise ValueError(f"not a {magic.decode()} record (bad magic {bytes(data[:3])!r})")
    if data[3] != _VERSION:
        raise ValueError(f"{magic.decode()} record version {data[3]} (this build reads {_VERSION})")
    return 4


def _pack_str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<I", len(b)) + b


def _unpack_str(data: bytes, off: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<I", data, off)
    off += 4
    return bytes(data[off : off + n]).decode("utf-8"), off + n


def _take(data: bytes, off: int, dtype: Any, count: int) -> tuple[np.ndarray, int]:
    """``count`` items of ``dtype`` at ``off``, copied out of the (immutable) input buffer so
    learners may keep or modify rows."""
    dt = np.dtype(dtype)
    end = off + dt.itemsize * count
    if end > len(data):
        raise ValueError("truncated record")
    return np.frombuffer(data, dtype=dt, count=count, offset=off).copy(), end


class StatelessCoder(beam.coders.Coder):
    """A coder without parameters: all instances of one class are equal."""

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


_BLOCK_MAGIC = b"KSB"
_BLOCK_HEAD = struct.Struct("<qII")  # start, n, d
_SPARSE_MAGIC = b"KSS"
_SPARSE_HEAD = struct.Struct("<qIQQ")  # start, n, d, nnz


class BlockCoder(StatelessCoder):
    """Dense: ``KSB`` v1 | key (u32 length + utf-8) | start i64, n u32, d u32 | ids i64[n] |
    y f64[n] | X f64[n*d] (C order). Sparse (CSR rows): ``KSS`` v1 | key | start i64, n u32,
    d u64, nnz u64 | ids i64[n] | y f64[n] | indptr i64[n+1] | indices i64[nnz] | data
    f64[nnz]. Little-endian raw buffers."""

    def encode(self, b: Block) -> bytes:
        if isinstance(b.X, CSR):
            X = b.X.rows(0, b.n)  # rebased, so indptr starts at 0
            return b"".join((
                _header(_SPARSE_MAGIC),
                _pack_str(b.key),
                _SPARSE_HEAD.pack(b.start, b.n, X.n_features, X.nnz),
                b.ids.astype("<i8", copy=False).tobytes(),
                b.y.astype("<f8", copy=False).tobytes(),
                X.indptr.astype("<i8", copy=False).tobytes(),
                X.indices.astype("<i8", copy=False).tobytes(),
                X.data.astype("<f8", copy=False).tobytes(),
            ))
        n, d = b.X.shape
        return b"".join((
            _header(_BLOCK_MAGIC),
            _pack_str(b.key),
            _BLOCK_HEAD.pack(b.start, n, d),
            b.ids.astype("<i8", copy=False).tobytes(),
            b.y.astype("<f8", copy=False).tobytes(),
            b.X.astype("<f8", copy=False).tobytes(),
        ))

    def decode(self, data: bytes) -> Block:
        if data[:3] == _SPARSE_MAGIC:
            return self._decode_sparse(data)
        off = _check_header(data, _BLOCK_MAGIC)
        key, off = _unpack_str(data, off)
        start, n, d = _BLOCK_HEAD.unpack_from(data, off)
        off += _BLOCK_HEAD.size
        ids, off = _take(data, off, "<i8", n)
        y, off = _take(data, off, "<f8", n)
        X, off = _take(data, off, "<f8", n * d)
        return Block(key, start, ids, X.reshape(n, d), y)

    @staticmethod
    def _decode_sparse(data: bytes) -> Block:
        off = _check_header(data, _SPARSE_MAGIC)
        key, off = _unpack_str(data, off)
        start, n, d, nnz = _SPARSE_HEAD.unpack_from(data, off)
        off += _SPARSE_HEAD.size
        ids, off = _take(data, off, "<i8", n)
        y, off = _take(data, off, "<f8", n)
        indptr, off = _take(data, off, "<i8", n + 1)
        indices, off = _take(data, off, "<i8", nnz)
        vals, off = _take(data, off, "<f8", nnz)
        return Block(key, start, ids, CSR(indptr, indices, vals, d), y)

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> Any:
        return Block


_PRED_MAGIC = b"KSP"
_PRED_HEAD = struct.Struct("<qI")  # start, n


class PredictionBlockCoder(StatelessCoder):
    """``KSP`` v1 | key | start i64, n u32 | ids, n_sv, selected_kernel i64[n] | score,
    predicted, y, loss f64[n] | mistake i8[n]."""

    def encode(self, p: PredictionBlock) -> bytes:
        parts = [_header(_PRED_MAGIC), _pack_str(p.key), _PRED_HEAD.pack(p.start, p.n)]
        parts += [getattr(p, f).astype("<i8", copy=False).tobytes() for f in p._I64]
        parts += [getattr(p, f).astype("<f8", copy=False).tobytes() for f in p._F64]
        parts.append(p.mistake.tobytes())
        return b"".join(parts)

    def decode(self, data: bytes) -> PredictionBlock:
        off = _check_header(data, _PRED_MAGIC)
        key, off = _unpack_str(data, off)
        start, n = _PRED_HEAD.unpack_from(data, off)
        off += _PRED_HEAD.size
        cols: dict[str, np.ndarray] = {}
        for f in PredictionBlock._I64:
            cols[f], off = _take(data, off, "<i8", n)
        for f in PredictionBlock._F64:
            cols[f], off = _take(data, off, "<f8", n)
        cols["mistake"], off = _take(data, off, "i1", n)
        return PredictionBlock(key=key, start=start, **cols)

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> Any:
        return PredictionBlock


# Registered so that typed PCollections (``with_output_types(Block)`` or
# ``tuple[str, Block]``) use the raw-buffer coders instead of pickle.
beam.coders.registry.register_coder(Block, BlockCoder)
beam.coders.registry.register_coder(PredictionBlock, PredictionBlockCoder)
