"""Compressed sparse rows: the one sparse matrix type of kernelstream (numpy only).

Rows of text, URL and hashed-feature data have a few hundred non-zeros among 10^4-10^9
columns; a dense row would make the widest index decide the memory of a run. A :class:`CSR`
holds ``n_rows`` rows as three arrays (``indptr``, ``indices``, ``data``), so its memory grows
with the non-zeros only. Within a row the column indices are strictly increasing (0-based),
which the kernels' sparse products rely on; :meth:`CSR.check` verifies it.

Both the data layer (readers build CSR blocks) and the learners (which take CSR rows) use
this module; it imports nothing of either.

The learners' convention: one sparse example is a 1-row :class:`CSR`, a block of examples is
a :class:`CSR` (see :mod:`kernelstream.learners.base`). Inside the learners a single row
travels as a :class:`SparseRow` (``indices``, ``values``, ``n_features``), which the support
vector store and the kernels read. :meth:`CSR.from_libsvm_bytes` is a small vectorised
LIBSVM reader for benchmarks and tests (the data layer has its own readers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CSR", "MAX_FEATURES", "SparseRow"]

#: The widest row space a CSR may have (:meth:`CSR.check`): int64's largest value, as the
#: column indices are int64 and a learner's state stores its width as one.
MAX_FEATURES = (1 << 63) - 1


class SparseRow:
    """One sparse row: strictly increasing 0-based ``indices`` (int64) with float64 ``values``,
    of a space of ``n_features`` columns. Cheap to build (no copies, no checks): the learners
    make one per round from a checked :class:`CSR`."""

    __slots__ = ("indices", "n_features", "values")

    def __init__(self, indices: np.ndarray, values: np.ndarray, n_features: int) -> None:
        self.indices = indices
        self.values = values
        self.n_features = n_features

    @property
    def nnz(self) -> int:
        return len(self.indices)

    def key(self) -> bytes:
        """Bytes that identify the row by value (the learners' predict/learn cache key)."""
        return (len(self.indices).to_bytes(8, "little") + self.indices.tobytes()
                + self.values.tobytes())

    def to_dense(self) -> np.ndarray:
        out = np.zeros(self.n_features)
        out[self.indices] = self.values
        return out

    @classmethod
    def from_dense(cls, x: np.ndarray) -> SparseRow:
        idx = np.flatnonzero(x)
        return cls(idx.astype(np.int64, copy=False), np.ascontiguousarray(x[idx], np.float64),
                   len(x))



def _c_array(a: np.ndarray, dtype: type) -> np.ndarray:
    """``a`` itself when C-contiguous of ``dtype``, else a C-ordered copy of that type (its
    shape kept: the checks report a wrong one)."""
    if a.dtype == dtype and a.flags.c_contiguous:
        return a
    return np.array(a, dtype=dtype, order="C")


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

    def sparse_row(self, i: int) -> SparseRow:
        """Row ``i`` as a :class:`SparseRow` (views)."""
        a, b = int(self.indptr[i]), int(self.indptr[i + 1])
        return SparseRow(self.indices[a:b], self.data[a:b], int(self.n_features))

    def row_sq_norms(self) -> np.ndarray:
        """``‖row‖²`` of every row (summed in index order, as the learners do), in float64
        whatever the data's type (integer squares would wrap)."""
        d = np.asarray(self.data, dtype=np.float64)
        sq = d * d
        out = np.zeros(self.n_rows)
        nz = np.diff(self.indptr) > 0
        if len(sq):
            out[nz] = np.add.reduceat(sq, self.indptr[:-1][nz] - self.indptr[0])
        return out

    def rows(self, start: int, stop: int) -> CSR:
        """Rows ``start:stop`` (views of the arrays; ``indptr`` rebased to 0)."""
        n = self.n_rows
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        stop = max(start, stop)
        a, b = int(self.indptr[start]), int(self.indptr[stop])
        return CSR(self.indptr[start:stop + 1] - a, self.indices[a:b], self.data[a:b],
                   self.n_features)

    def __getitem__(self, sel: slice | np.ndarray) -> CSR:
        """Rows by a step-1 slice (views) or an index array (a copy), as numpy rows are
        selected: runners slice blocks of rows without knowing whether they are dense."""
        if isinstance(sel, slice):
            start, stop, step = sel.indices(self.n_rows)
            if step != 1:
                return self.take(np.arange(start, stop, step))
            return self.rows(start, stop)
        arr = np.asarray(sel)
        if arr.dtype == bool:
            arr = np.flatnonzero(arr)
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise TypeError(f"CSR rows are selected by a slice or a 1-D index array, got {sel!r}")
        return self.take(arr)

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
    def one_row(cls, indices: np.ndarray, values: np.ndarray, n_features: int) -> CSR:
        """One example as a 1-row CSR (0-based, strictly increasing ``indices``; not copied)."""
        return cls(np.array([0, len(indices)], dtype=np.int64), indices, values, int(n_features))

    @classmethod
    def vstack(cls, parts: list[CSR], n_features: int | None = None) -> CSR:
        """Blocks of rows, one after the other, as one CSR (width ``n_features``, default the
        widest part's)."""
        d = int(n_features if n_features is not None
                else max((p.n_features for p in parts), default=1))
        if not parts:
            return cls.empty(d)
        offsets = np.cumsum([0] + [p.nnz for p in parts[:-1]])
        indptr = np.concatenate([np.zeros(1, dtype=np.int64)]
                                + [p.indptr[1:] - p.indptr[0] + o
                                   for p, o in zip(parts, offsets, strict=True)])
        return cls(indptr, np.concatenate([p.indices[p.indptr[0]:p.indptr[-1]] for p in parts]),
                   np.concatenate([p.data[p.indptr[0]:p.indptr[-1]] for p in parts]), d)

    def equals(self, other: CSR) -> bool:
        """Same shape and the same stored entries (values compared bit for bit, NaN = NaN)."""
        return (self.shape == other.shape
                and np.array_equal(self.indptr - self.indptr[0], other.indptr - other.indptr[0])
                and np.array_equal(self.indices[self.indptr[0]:self.indptr[-1]],
                                   other.indices[other.indptr[0]:other.indptr[-1]])
                and np.array_equal(self.data[self.indptr[0]:self.indptr[-1]],
                                   other.data[other.indptr[0]:other.indptr[-1]], equal_nan=True))

    @classmethod
    def empty(cls, n_features: int) -> CSR:
        return cls(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64),
                   np.zeros(0, dtype=np.float64), int(n_features))

    def canonical(self) -> CSR:
        """The same rows as C-contiguous int64 ``indptr``/``indices`` and float64 ``data``,
        what the learners and their compiled kernels read (arrays already so are not copied).
        Integer or float32 data become float64 here, once, so ‖x‖² and every product are
        summed in float64 (int64 squares would wrap). Raises ``ValueError`` for arrays that
        are not numbers; :meth:`check` the result."""
        if (self.indptr.dtype.kind not in "iu" or self.indices.dtype.kind not in "iu"
                or self.data.dtype.kind not in "iuf"):
            raise ValueError("CSR: indptr and indices must be integer arrays, data real numbers")
        p, j, v = (_c_array(self.indptr, np.int64), _c_array(self.indices, np.int64),
                   _c_array(self.data, np.float64))
        if p is self.indptr and j is self.indices and v is self.data:
            return self
        return CSR(p, j, v, self.n_features)

    def check(self) -> CSR:
        """Raise ``ValueError`` (one line) unless the arrays form valid rows; returns self."""
        p, j, v = self.indptr, self.indices, self.data
        if p.dtype.kind not in "iu" or j.dtype.kind not in "iu" or v.dtype.kind not in "iuf":
            raise ValueError("CSR: indptr and indices must be integer arrays, data real numbers")
        if p.ndim != 1 or len(p) < 1 or p[0] != 0:
            raise ValueError("CSR: indptr must be 1-D and start at 0")
        if np.any(np.diff(p) < 0) or p[-1] != len(j) or len(j) != len(v):
            raise ValueError("CSR: indptr must be non-decreasing and end at len(indices) "
                             "== len(data)")
        if not 0 <= self.n_features <= MAX_FEATURES:
            raise ValueError(f"CSR: n_features must lie in [0, 2^63 - 1], got {self.n_features}")
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

    @classmethod
    def from_libsvm_bytes(cls, data: bytes, n_features: int | None = None,
                          zero_based: bool = False) -> tuple[CSR, np.ndarray]:
        """Parse LIBSVM/SVMlight text (``label idx:val ...`` per line; ``#`` comments and
        ``qid:`` tokens ignored) into ``(CSR, labels)``. Indices are 1-based unless
        ``zero_based``; rows are sorted by index and a duplicate index is an error. The width
        is ``n_features`` or the largest index + 1. Parsing briefly holds one Python token per
        index and value (several times the text size), so parse in a separate step from a
        memory-measured run."""
        labels: list[float] = []
        counts: list[int] = []
        feats: list[bytes] = []
        for lineno, raw in enumerate(data.splitlines(), 1):
            line = raw.split(b"#", 1)[0].strip()
            if not line:
                continue
            head, _, rest = line.replace(b"\t", b" ").partition(b" ")
            if b"qid:" in rest:
                rest = b" ".join(t for t in rest.split() if not t.startswith(b"qid:"))
            try:
                labels.append(float(head))
            except ValueError:
                raise ValueError(f"LIBSVM line {lineno}: bad label {head[:40]!r}") from None
            counts.append(rest.count(b":"))
            feats.append(rest)
        blob = b" ".join(feats).replace(b":", b" ").decode("ascii", "replace")
        flat = np.array(blob.split(), dtype=np.float64) if blob.strip() else np.zeros(0)
        cnt = np.asarray(counts, dtype=np.int64)
        if len(flat) != 2 * int(cnt.sum()):
            raise ValueError("LIBSVM: every feature must be written idx:value")
        fidx, vals = flat[0::2], np.ascontiguousarray(flat[1::2])
        if np.any(fidx != np.floor(fidx)):
            raise ValueError("LIBSVM: feature indices must be integers")
        idx = fidx.astype(np.int64) - (0 if zero_based else 1)
        if len(idx) and idx.min() < 0:
            raise ValueError("LIBSVM: feature indices must be >= " + ("0" if zero_based else "1"))
        indptr = np.zeros(len(cnt) + 1, dtype=np.int64)
        np.cumsum(cnt, out=indptr[1:])
        rows = np.repeat(np.arange(len(cnt)), cnt)
        if len(idx) > 1:
            step = np.diff(idx)
            same = rows[1:] == rows[:-1]
            if np.any((step <= 0) & same):  # unsorted rows: sort each by index
                order = np.lexsort((idx, rows))
                idx, vals = idx[order], vals[order]
                if np.any((np.diff(idx) == 0) & same):
                    raise ValueError("LIBSVM: a feature index is repeated within a line")
        width = int(idx.max()) + 1 if len(idx) else 0
        if n_features is not None:
            if width > n_features:
                raise ValueError(f"LIBSVM: index {width} exceeds n_features={n_features}")
            width = int(n_features)
        return cls(indptr, idx, vals, max(width, 1)), np.asarray(labels, dtype=np.float64)
