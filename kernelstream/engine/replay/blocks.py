"""Blocks of consecutive stream rows and their predictions (no Beam).

Runners move examples in blocks, not one example at a time: Beam's per-element cost (~20 µs on
the FnApiRunner) and per-call overheads would dominate the learners. A :class:`Block` is
``block.n`` consecutive rows of one stream: positions ``start .. start + n - 1`` of the stream
named by ``key``; a :class:`PredictionBlock` holds what the learner made of them, column by
column. Their raw-buffer Beam coders live in ``kernelstream.transforms.replay.blocks``; the
stream key a block belongs to is :class:`~kernelstream.engine.keys.StreamKey`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernelstream.engine.keys import StreamKey
from kernelstream.sparse import CSR

# -- Block --------------------------------------------------------------------------------------


@dataclass(eq=False)
class Block:
    """``n`` consecutive rows of stream ``key``, at stream positions ``start .. start+n-1``.

    ``ids`` are the rows' identities in the source (row index in the file, 0-based), ``X`` is
    the ``(n, d)`` float64 feature matrix, dense or a :class:`~kernelstream.sparse.CSR` (wide
    or hashed data: memory grows with the non-zeros), and ``y`` the mapped labels (±1 or
    targets).
    """

    key: str
    start: int
    ids: np.ndarray
    X: np.ndarray | CSR
    y: np.ndarray

    def __post_init__(self) -> None:
        self.ids = np.ascontiguousarray(self.ids, dtype=np.int64).reshape(-1)
        if not isinstance(self.X, CSR):
            self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        self.y = np.ascontiguousarray(self.y, dtype=np.float64).reshape(-1)
        n = self.ids.shape[0]
        if len(self.X.shape) != 2 or self.X.shape[0] != n or self.y.shape[0] != n:
            raise ValueError(
                f"inconsistent block: ids {self.ids.shape}, X {self.X.shape}, y {self.y.shape}"
            )

    @property
    def n(self) -> int:
        return int(self.ids.shape[0])

    @property
    def sparse(self) -> bool:
        return isinstance(self.X, CSR)

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
            and self.sparse == other.sparse
            and self.X.shape == other.X.shape
            and _rows_equal(self.X, other.X)
            and np.array_equal(self.y, other.y, equal_nan=True)
        )

    def __repr__(self) -> str:
        kind = ", sparse" if self.sparse else ""
        return f"Block({self.key!r}, start={self.start}, n={self.n}, d={self.X.shape[1]}{kind})"


def concat_blocks(parts: list[Block]) -> Block:
    """Join contiguous pieces of one stream (sorted by start) into one block."""
    parts = sorted(parts, key=lambda b: b.start)
    for a, b in itertools.pairwise(parts):
        if a.end != b.start or a.key != b.key:
            raise ValueError(f"pieces are not contiguous: {a!r} then {b!r}")
    if len(parts) == 1:
        return parts[0]
    if any(p.sparse for p in parts):
        X: np.ndarray | CSR = CSR.vstack([p.X if isinstance(p.X, CSR) else CSR.from_dense(p.X)
                                          for p in parts])
    else:
        X = np.concatenate([p.X for p in parts])
    return Block(parts[0].key, parts[0].start, np.concatenate([p.ids for p in parts]), X,
                 np.concatenate([p.y for p in parts]))

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


def _rows_equal(a: np.ndarray | CSR, b: np.ndarray | CSR) -> bool:
    """Same rows, NaN equal to NaN (blocks of one stream are all sparse or all dense)."""
    if isinstance(a, CSR) or isinstance(b, CSR):
        return isinstance(a, CSR) and isinstance(b, CSR) and a.equals(b)
    return bool(np.array_equal(a, b, equal_nan=True))
