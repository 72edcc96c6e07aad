"""Blocks of consecutive stream rows and their compact Beam coders.

The pipeline moves examples in blocks, not one element per example: Beam's per-element cost
(~20 µs on the FnApiRunner) and pickling numpy arrays (~300 µs) would dominate the learners.
A :class:`Block` is ``block.n`` consecutive rows of one stream: positions
``start .. start + n - 1`` of the stream named by ``key``. The coders below write the raw
numpy buffers behind a small fixed header (no pickle), so encoding a block is a few memcpys.

Stream keys
-----------
Every stream is one learner configuration on one ordering of the data, optionally restricted to
one entity (``--key-by``)::

    StreamKey(config="bogd-200", rep=0, entity=None).encode() == "bogd-200#0"
    StreamKey("bogd-200", 3, "user-17").encode() == "bogd-200#3@user-17"

The encoded string is the Beam key, so all of a stream's blocks meet in one stateful DoFn.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np

# -- stream keys --------------------------------------------------------------------------------


class StreamKey(NamedTuple):
    """Identity of one stream: configuration name, repetition (permutation index), entity."""

    config: str
    rep: int
    entity: str | None = None

    def encode(self) -> str:
        check_config_name(self.config)
        base = f"{self.config}#{int(self.rep)}"
        return base if self.entity is None else f"{base}@{self.entity}"

    @classmethod
    def decode(cls, key: str) -> StreamKey:
        config, sep, rest = key.partition("#")
        if not sep:
            raise ValueError(f"not a stream key: {key!r}")
        rep, at, entity = rest.partition("@")
        return cls(config, int(rep), entity if at else None)

    def with_config(self, config: str) -> StreamKey:
        return self._replace(config=config)


def check_config_name(name: str) -> str:
    """Configuration names are the first field of the key, so they cannot hold ``#``/``@``."""
    if not name or "#" in name or "@" in name:
        raise ValueError(f"configuration names must be non-empty without '#' or '@': {name!r}")
    return name


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


# -- Block --------------------------------------------------------------------------------------


@dataclass(eq=False)
class Block:
    """``n`` consecutive rows of stream ``key``, at stream positions ``start .. start+n-1``.

    ``ids`` are the rows' identities in the source (row index in the file, 0-based), ``X`` is
    the dense ``(n, d)`` float64 feature matrix and ``y`` the mapped labels (±1 or targets).
    """

    key: str
    start: int
    ids: np.ndarray
    X: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        self.ids = np.ascontiguousarray(self.ids, dtype=np.int64).reshape(-1)
        self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        self.y = np.ascontiguousarray(self.y, dtype=np.float64).reshape(-1)
        n = self.ids.shape[0]
        if self.X.ndim != 2 or self.X.shape[0] != n or self.y.shape[0] != n:
            raise ValueError(
                f"inconsistent block: ids {self.ids.shape}, X {self.X.shape}, y {self.y.shape}"
            )

    @property
    def n(self) -> int:
        return int(self.ids.shape[0])

    @property
    def end(self) -> int:
        """Position just after the block's last row."""
        return self.start + self.n

    def with_key(self, key: str) -> Block:
        """The same rows under another stream key (arrays shared, not copied)."""
        return Block(key, self.start, self.ids, self.X, self.y)

    def slice(self, lo: int, hi: int) -> Block:
        """Rows ``lo .. hi-1`` of the block (local indices)."""
        return Block(self.key, self.start + lo, self.ids[lo:hi], self.X[lo:hi], self.y[lo:hi])

    def equals(self, other: Block) -> bool:
        return (
            self.key == other.key
            and self.start == other.start
            and np.array_equal(self.ids, other.ids)
            and self.X.shape == other.X.shape
            and np.array_equal(self.X, other.X, equal_nan=True)
            and np.array_equal(self.y, other.y, equal_nan=True)
        )

    def __repr__(self) -> str:
        return f"Block({self.key!r}, start={self.start}, n={self.n}, d={self.X.shape[1]})"


def concat_blocks(parts: list[Block]) -> Block:
    """Join contiguous pieces of one stream (sorted by start) into one block."""
    parts = sorted(parts, key=lambda b: b.start)
    for a, b in itertools.pairwise(parts):
        if a.end != b.start or a.key != b.key:
            raise ValueError(f"pieces are not contiguous: {a!r} then {b!r}")
    if len(parts) == 1:
        return parts[0]
    return Block(
        parts[0].key,
        parts[0].start,
        np.concatenate([p.ids for p in parts]),
        np.concatenate([p.X for p in parts]),
        np.concatenate([p.y for p in parts]),
    )


_BLOCK_MAGIC = b"KSB"
_BLOCK_HEAD = struct.Struct("<qII")  # start, n, d


class BlockCoder(beam.coders.Coder):
    """``KSB`` v1 | key (u32 length + utf-8) | start i64, n u32, d u32 | ids i64[n] | y f64[n]
    | X f64[n*d] (C order), little-endian raw buffers."""

    def encode(self, b: Block) -> bytes:
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
        off = _check_header(data, _BLOCK_MAGIC)
        key, off = _unpack_str(data, off)
        start, n, d = _BLOCK_HEAD.unpack_from(data, off)
        off += _BLOCK_HEAD.size
        ids, off = _take(data, off, "<i8", n)
        y, off = _take(data, off, "<f8", n)
        X, off = _take(data, off, "<f8", n * d)
        return Block(key, start, ids, X.reshape(n, d), y)

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> Any:
        return Block

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


# -- PredictionBlock ----------------------------------------------------------------------------


@dataclass(eq=False)
class PredictionBlock:
    """The predictions of one processed block, column by column (one row per example).

    ``predicted`` is the ±1 label (classification) or the score itself (regression);
    ``mistake`` is 1/0 (classification) or -1 (regression: no mistakes); ``n_sv`` is the
    learner's support-vector count after the example (exactly per example for kernel-selection
    learners, else after the example's block); ``selected_kernel`` is -1 where the learner has
    none.
    """

    key: str
    start: int
    ids: np.ndarray
    score: np.ndarray
    predicted: np.ndarray
    y: np.ndarray
    loss: np.ndarray
    mistake: np.ndarray
    n_sv: np.ndarray
    selected_kernel: np.ndarray

    _F64 = ("score", "predicted", "y", "loss")
    _I64 = ("ids", "n_sv", "selected_kernel")

    def __post_init__(self) -> None:
        for f in self._F64:
            setattr(self, f, np.ascontiguousarray(getattr(self, f), dtype=np.float64))
        for f in self._I64:
            setattr(self, f, np.ascontiguousarray(getattr(self, f), dtype=np.int64))
        self.mistake = np.ascontiguousarray(self.mistake, dtype=np.int8)
        n = self.ids.shape[0]
        for f in (*self._F64, *self._I64, "mistake"):
            if getattr(self, f).shape != (n,):
                raise ValueError(f"PredictionBlock column {f} has shape {getattr(self, f).shape}")

    @property
    def n(self) -> int:
        return int(self.ids.shape[0])

    @property
    def positions(self) -> np.ndarray:
        return np.arange(self.start, self.start + self.n, dtype=np.int64)

    def rows(self) -> list[dict[str, Any]]:
        """Plain per-example dicts (for tests and small outputs)."""
        sk = StreamKey.decode(self.key)
        return [
            {
                "key": self.key,
                "config": sk.config,
                "permutation": sk.rep,
                "entity": sk.entity,
                "position": self.start + i,
                "id": int(self.ids[i]),
                "score": float(self.score[i]),
                "predicted": float(self.predicted[i]),
                "label": float(self.y[i]),
                "loss": float(self.loss[i]),
                "mistake": None if self.mistake[i] < 0 else bool(self.mistake[i]),
                "n_support_vectors": int(self.n_sv[i]),
                "selected_kernel": None if self.selected_kernel[i] < 0
                else int(self.selected_kernel[i]),
            }
            for i in range(self.n)
        ]


_PRED_MAGIC = b"KSP"
_PRED_HEAD = struct.Struct("<qI")  # start, n


class PredictionBlockCoder(beam.coders.Coder):
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

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


# Registered so that typed PCollections (``with_output_types(Block)`` or
# ``tuple[str, Block]``) use the raw-buffer coders instead of pickle.
beam.coders.registry.register_coder(Block, BlockCoder)
beam.coders.registry.register_coder(PredictionBlock, PredictionBlockCoder)
