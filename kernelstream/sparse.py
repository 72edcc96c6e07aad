"""Compressed sparse rows: the one sparse matrix type of kernelstream (numpy only).

Rows of text, URL and hashed-feature data have a few hundred non-zeros among 10^4-10^9
columns; a dense row would make the widest index decide the memory of a run. A :class:`CSR`
holds ``n_rows`` rows as three arrays (``indptr``, ``indices``, ``data``), so its memory grows
with the non-zeros only. Within a row the column indices are strictly increasing (0-based),
which the kernels' sparse products rely on; :meth:`CSR.check` verifies it.

Both the data layer (readers build CSR blocks) and the learners (which take CSR rows) use
this module; it imports nothing of either.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CSR"]


@dataclass(frozen=True, eq=False)
class CSR:
    """``n_rows`` × ``n_features`` rows: row ``i`` has columns ``indices[indptr[i]:indptr[i+1]]``
    (strictly increasing, 0-based) with values ``data[...]``. ``indptr`` is int64 of length
    ``n_rows + 1`` starting at 0; ``indices`` int64; ``data`` float64."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_features: int

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_rows, int(self.n_features)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1] - self.indptr[0])

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.indices.nbytes + self.data.nbytes)

    def __len__(self) -> int:
        return self.n_rows

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row ``i`` as ``(indices, values)`` views."""
        a, b = int(self.indptr[i]), int(self.indptr[i + 1])
        return self.indices[a:b], self.data[a:b]

    def rows(self, start: int, stop: int) -> CSR:
        """Rows ``start:stop`` (views of the arrays; ``indptr`` rebased to 0)."""
        n = self.n_rows
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        stop = max(start, stop)
        a, b = int(self.indptr[start]), int(self.indptr[stop])
        return CSR(self.indptr[start:stop + 1] - a, self.indices[a:b], self.data[a:b],
                   self.n_features)

    def take(self, order: np.ndarray) -> CSR:
        """The rows in ``order`` (a permutation or any index array), as a new CSR."""
        order = np.asarray(order, dtype=np.int64)
        lo, hi = self.indptr[order], self.indptr[order + 1]
        counts = hi - lo
        indptr = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        # positions of every kept non-zero: the start of its row plus its rank within it
        pos = np.repeat(lo - indptr[:-1], counts) + np.arange(int(indptr[-1]), dtype=np.int64)
        return CSR(indptr, self.indices[pos], self.data[pos], self.n_features)

    def to_dense(self) -> np.ndarray:
        """The dense ``(n_rows, n_features)`` float64 matrix (only for narrow data)."""
        out = np.zeros(self.shape, dtype=np.float64)
        rows = np.repeat(np.arange(self.n_rows), np.diff(self.indptr))
        out[rows, self.indices] = self.data
        return out

    @classmethod
    def from_dense(cls, X: np.ndarray) -> CSR:
        """The non-zeros of a dense 2-D array (explicit zeros dropped)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"CSR.from_dense needs a 2-D array, got shape {X.shape}")
        rows, cols = np.nonzero(X)
        indptr = np.zeros(X.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=X.shape[0]), out=indptr[1:])
        return cls(indptr, cols.astype(np.int64), X[rows, cols], int(X.shape[1]))

    @classmethod
    def empty(cls, n_features: int) -> CSR:
        return cls(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64),
                   np.zeros(0, dtype=np.float64), int(n_features))

    def check(self) -> CSR:
        """Raise ``ValueError`` (one line) unless the arrays form valid rows; returns self."""
        p, j, v = self.indptr, self.indices, self.data
        if p.ndim != 1 or len(p) < 1 or p[0] != 0:
            raise ValueError("CSR: indptr must be 1-D and start at 0")
        if np.any(np.diff(p) < 0) or p[-1] != len(j) or len(j) != len(v):
            raise ValueError("CSR: indptr must be non-decreasing and end at len(indices) "
                             "== len(data)")
        if len(j) and (j.min() < 0 or j.max() >= self.n_features):
            raise ValueError(f"CSR: column indices must lie in [0, {self.n_features})")
        if len(j) > 1:
            step = np.diff(j)
            starts = p[1:-1]
            inside = np.ones(len(step), dtype=bool)  # False: the step into a new row
            inside[starts[(starts > 0) & (starts < len(j))] - 1] = False
            if np.any((step <= 0) & inside):
                raise ValueError("CSR: column indices must be strictly increasing within "
                                 "each row")
        if not np.all(np.isfinite(v)):
            raise ValueError("CSR: values must be finite")
        return self
