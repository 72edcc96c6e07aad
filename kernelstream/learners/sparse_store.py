"""The sparse support-vector store: :class:`SparseSVStore`, the interface of
:class:`~kernelstream.learners.store.SVStore` over rows of text, URL or hashed data, whose
width may be 10^7+ (its own module: a pool of non-zeros and a column index, where the dense
store is one array)."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners._coefficients import _Coefficients
from kernelstream.learners.kernels import Kernel
from kernelstream.sparse import CSR, SparseRow

_MIN_GARBAGE = 4096  # non-zeros of released rows tolerated before compacting the pool
_RECENT = 2048  # columns of the small sorted level of SparseSVStore's column index
_lk: Any = compiled.lk  # the compiled column index (None: not built, or stale)


class SparseSVStore(_Coefficients):
    """The :class:`SVStore` interface over sparse support vectors (rows of text, URL or hashed
    data whose width may be 10^7+).

    The non-zeros of all SVs live in one pool (``indices``/``values`` arrays) where SV ``j``
    owns the segment ``[start_j, start_j + len_j)``, so the dots of a query with every SV are
    one elementwise product over the pool and one ``np.add.reduceat`` over the segments'
    (start, end) bounds: each segment is summed on its own, so the result does not depend on
    where it sits in the pool (bit-reproducible across compactions and restored states; a
    ``bincount`` over an owner array was 4x slower at news20 sizes). Replaced or removed rows
    leave garbage that is compacted once it outgrows the live rows, so memory is O(total nnz
    of the SVs), never O(width). Queries may be :class:`SparseRow` (sparse–sparse) or dense
    rows (sparse–dense).

    Columns are renumbered: the pool holds *local* column ids, given to the distinct columns
    of the stored rows in order of arrival (``_glob`` maps them back; ``_cols`` / ``_loc``
    are the known columns sorted, with their local ids, and ``_rcols`` / ``_rloc`` the recent
    ones, a small sorted level merged into them once it outgrows ``_RECENT`` or an eighth of
    them, so an append costs about its own non-zeros, not the known columns; with the compiled
    ``_ck_linear`` built, ``_ctab`` is a hash table of (column, local id) instead, one probe a
    non-zero). A query's non-zeros find their local ids and are scattered into a work vector as
    long as the known columns, so no work and no memory follows the largest index: a file
    whose indices are renumbered up to 2^31 − 1 runs as fast as the original (issue 28). The
    products and the order of every segment's sum are those of the global ids, so results do
    not change. A compaction that finds more known columns than twice the live non-zeros
    renumbers the live columns (those of removed rows are forgotten).
    """

    __slots__ = ("_bounds", "_buf", "_cols", "_ctab", "_garbage", "_glob", "_ind", "_len",
                 "_live", "_loc", "_nloc", "_rcols", "_rloc", "_start", "_used", "_val")
    _SLOT_ARRAYS = ("_start", "_len", "sqn", "a", "ids", "s")

    def __init__(self, dim: int, capacity: int = 16, nnz_capacity: int = 1024) -> None:
        super().__init__(dim, capacity)
        cap = len(self.a)
        self._start = np.zeros(cap, dtype=np.int64)
        self._len = np.zeros(cap, dtype=np.int64)
        nz = max(int(nnz_capacity), 16)
        self._ind = np.zeros(nz, dtype=np.int64)
        self._val = np.zeros(nz)
        self._used = 0
        self._bounds: np.ndarray | None = None  # reduceat bounds, rebuilt after a mutation
        self._live = np.zeros(0, dtype=np.int64)  # slots with non-zeros, in pool order
        self._garbage = 0
        self._cols = np.zeros(0, dtype=np.int64)  # known global columns, sorted
        self._loc = np.zeros(0, dtype=np.int64)  # their local ids
        self._rcols = np.zeros(0, dtype=np.int64)  # recent columns, sorted (a small level)
        self._rloc = np.zeros(0, dtype=np.int64)
        self._glob = np.zeros(16, dtype=np.int64)  # local id -> global column
        self._nloc = 0  # local ids in use
        self._buf = np.zeros(16)  # work vector over local ids (zeros between queries)
        self._ctab: np.ndarray | None = None  # the compiled index's table (else the levels)
        if _lk is not None:
            self._col_table(0)

    # -- views -----------------------------------------------------------------------------
    @property
    def points(self) -> CSR:
        """The SVs in slot order as a :class:`CSR` (copies)."""
        n = self.n
        lens = self._len[:n]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        pos = self._positions(n)
        return CSR(indptr, self._to_global(self._ind[pos]), self._val[pos], self.dim)

    @property
    def nnz(self) -> int:
        return int(self._len[: self.n].sum())

    @property
    def nbytes(self) -> int:
        """Bytes held (pool, per-slot arrays, work vector)."""
        per = (self.sqn, self.a, self.ids, self.s, self._start, self._len, self._ind, self._val,
               self._cols, self._loc, self._rcols, self._rloc, self._glob, self._buf)
        return sum(v.nbytes for v in per) + (0 if self._ctab is None else self._ctab.nbytes)

    def _positions(self, n: int) -> np.ndarray:
        """Pool positions of the first ``n`` slots' non-zeros, in slot order."""
        lens = self._len[:n]
        tot = int(lens.sum())
        offs = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(lens[:-1], out=offs[1:])
        return np.repeat(self._start[:n] - offs, lens) + np.arange(tot, dtype=np.int64)

    def sv_row(self, j: int) -> SparseRow:
        """SV ``j`` as a :class:`SparseRow` (copies: the pool moves on compaction)."""
        a = int(self._start[j])
        b = a + int(self._len[j])
        return SparseRow(self._to_global(self._ind[a:b]), self._val[a:b].copy(), self.dim)

    # -- evaluation ----------------------------------------------------------------------------
    def _segments(self) -> tuple[np.ndarray, np.ndarray]:
        """``(bounds, live)``: ``[s, e, s', e', …]`` of the non-empty segments in pool order
        and their slots; ``reduceat`` over ``bounds`` gives their sums at even positions."""
        if self._bounds is None:
            n = self.n
            live = np.flatnonzero(self._len[:n] > 0)
            live = live[np.argsort(self._start[live], kind="stable")]
            b = np.empty(2 * len(live), dtype=np.int64)
            b[0::2] = self._start[live]
            b[1::2] = self._start[live] + self._len[live]
            self._bounds, self._live = b, live
        return self._bounds, self._live

    def _col_table(self, more: int) -> None:
        """A new compiled column index holding local ids ``0 … _nloc − 1`` (``_glob``) with
        room for ``more`` new columns (load ≤ 1/2)."""
        k = self._nloc
        cap = 16
        while 2 * (k + more) > cap:
            cap *= 2
        tab = np.full(2 * cap, -1, dtype=np.int64)
        _lk.col_intern(tab, np.ascontiguousarray(self._glob[:k]), np.empty(k, np.int64), 0)
        self._ctab = tab

    def _to_global(self, ind: np.ndarray) -> np.ndarray:
        """The global columns of pool ids ``ind`` (a copy)."""
        return self._glob[ind]

    def _local(self, zi: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """``(local ids, which)``: the local ids of the known columns among ``zi`` and the
        mask of those known, None when all are (a probe, or binary searches in each level,
        per non-zero; none over the width)."""
        if self._ctab is not None:
            out = np.empty(len(zi), dtype=np.int64)
            if _lk.col_find(self._ctab, zi, out) == len(zi):  # the common case: no masks
                return out, None
            known = out >= 0
            return out[known], known
        found: np.ndarray | None = None
        hit: np.ndarray | None = None
        for cols, ids in ((self._cols, self._loc), (self._rcols, self._rloc)):
            if not len(cols):
                continue
            pos = np.searchsorted(cols, zi)
            np.minimum(pos, len(cols) - 1, out=pos)
            h = cols[pos] == zi
            if found is None:
                found, hit = ids[pos], h
            else:
                assert hit is not None
                found = np.where(h, ids[pos], found)
                hit |= h
        if found is None or hit is None:
            return np.zeros(0, dtype=np.int64), np.zeros(len(zi), dtype=bool)
        return found[hit], (None if bool(hit.all()) else hit)

    def _glob_room(self, m: int) -> None:
        """``_glob`` (and the work vector) with room for ``m`` more local ids."""
        k = self._nloc
        if k + m > len(self._glob):
            cap = max(2 * len(self._glob), k + m)
            glob = np.zeros(cap, dtype=np.int64)
            glob[:k] = self._glob[:k]
            self._glob = glob
            self._buf = np.zeros(cap)

    def _intern(self, zi: np.ndarray) -> np.ndarray:
        """Local ids of the columns ``zi`` (sorted, distinct), new columns given new ids."""
        if self._ctab is not None:
            k = self._nloc
            self._glob_room(len(zi))
            out = np.empty(len(zi), dtype=np.int64)
            nxt = _lk.col_intern(self._ctab, zi, out, k)
            if nxt < 0:
                self._col_table(len(zi))
                nxt = _lk.col_intern(self._ctab, zi, out, k)
            if nxt > k:
                new = out >= k
                self._glob[out[new]] = zi[new]
                self._nloc = int(nxt)
            return out
        loc, hit = self._local(zi)
        if hit is None:
            return loc
        new = zi[~hit]
        k, m = self._nloc, len(new)
        self._glob_room(m)
        ids = np.arange(k, k + m, dtype=np.int64)
        self._glob[k:k + m] = new
        self._nloc = k + m
        at = np.searchsorted(self._rcols, new)  # into the recent level (new is sorted)
        self._rcols = np.insert(self._rcols, at, new)
        self._rloc = np.insert(self._rloc, at, ids)
        if len(self._rcols) > max(_RECENT, len(self._cols) // 8):  # merged: O(known), rarely
            at = np.searchsorted(self._cols, self._rcols)
            self._cols = np.insert(self._cols, at, self._rcols)
            self._loc = np.insert(self._loc, at, self._rloc)
            self._rcols, self._rloc = self._rcols[:0], self._rloc[:0]
        out = np.empty(len(zi), dtype=np.int64)
        out[hit] = loc
        out[~hit] = ids
        return out

    def _renumber(self, glob_ind: np.ndarray) -> np.ndarray:
        """Forget every column and give ``glob_ind``'s distinct columns local ids 0, 1, … in
        sorted order; returns ``glob_ind`` in local ids (compaction and loads)."""
        cols, local = np.unique(glob_ind, return_inverse=True)
        k = len(cols)
        self._cols = cols
        self._loc = np.arange(k, dtype=np.int64)
        self._rcols, self._rloc = self._rcols[:0], self._rloc[:0]
        self._glob = np.zeros(max(k, 16), dtype=np.int64)
        self._glob[:k] = cols
        self._nloc = k
        self._buf = np.zeros(len(self._glob))
        if self._ctab is not None:
            self._col_table(0)
        return local.astype(np.int64, copy=False).reshape(-1)

    def dots(self, z: SparseRow | np.ndarray) -> np.ndarray:
        """``⟨x_j, z⟩`` for every stored point."""
        u = self._used + 1  # the pool keeps a spare zero at the end: a segment may end at u - 1
        ind = self._ind[:u]
        if isinstance(z, SparseRow):
            # scatter the query's known columns into the work vector over local ids (columns
            # no stored row has contribute nothing)
            loc, hit = self._local(z.indices)
            buf = self._buf
            buf[loc] = z.values if hit is None else z.values[hit]
            prods = buf[ind]
            buf[loc] = 0.0
        else:  # a dense query: gather its entries at the pool's columns
            prods = z[self._glob[ind]]
        prods *= self._val[:u]
        bounds, live = self._segments()
        out = np.zeros(self.n)
        if len(live):
            out[live] = np.add.reduceat(prods, bounds)[0::2]
        return out

    def row(self, kernel: Kernel, z: SparseRow | np.ndarray, zz: float) -> np.ndarray:
        return kernel.row_from_dots(self.dots(z), self.sqn[: self.n], zz)

    def eval_sv(self, kernel: Kernel, j: int) -> float:
        return self.eval(kernel, self.sv_row(j), float(self.sqn[j]))

    # -- mutation ------------------------------------------------------------------------------

    def _compact(self, extra: int) -> None:
        """Drop the garbage and make room for ``extra`` more non-zeros: live segments are
        packed in pool order, in place unless the pool must grow or shrink (moving segments
        down never overwrites one not yet moved, and only a live-sized temporary is made, so
        the peak stays near the pool's size). Each segment is summed on its own, so where it
        lands changes no result."""
        n = self.n
        slots = np.flatnonzero(self._len[:n] > 0)
        slots = slots[np.argsort(self._start[slots], kind="stable")]  # pool order
        lens = self._len[slots]
        live = int(lens.sum())
        starts = np.zeros(len(slots), dtype=np.int64)
        if len(slots) > 1:
            np.cumsum(lens[:-1], out=starts[1:])
        pos = np.repeat(self._start[slots] - starts, lens) + np.arange(live, dtype=np.int64)
        live_ind = self._ind[pos]
        if self._nloc > 2 * max(live, 1024):  # forget the columns of released rows
            live_ind = self._renumber(self._glob[live_ind])
        nz = len(self._ind)
        if live + extra >= nz or live + extra < nz // 4:  # grow, or give memory back
            nz = max(2 * (live + extra), 16)
            ind, val = np.zeros(nz, np.int64), np.zeros(nz)
            ind[:live] = live_ind
            val[:live] = self._val[pos]
            self._ind, self._val = ind, val
        else:
            self._ind[:live] = live_ind
            self._val[:live] = self._val[pos]
            end = min(self._used + 1, nz)  # the old tail, and the spare zero, become zeros
            self._ind[live:end] = 0
            self._val[live:end] = 0.0
        self._bounds = None
        self._start[:n] = 0  # empty slots own nothing
        self._start[slots] = starts
        self._used = live
        self._garbage = 0

    def _release(self, j: int) -> None:
        a = int(self._start[j])
        b = a + int(self._len[j])
        self._val[a:b] = 0.0  # garbage: zeros, summed by no segment
        self._garbage += b - a
        self._len[j] = 0
        self._bounds = None

    def _write(self, j: int, z: SparseRow | np.ndarray) -> None:
        if not isinstance(z, SparseRow):
            z = SparseRow.from_dense(np.asarray(z, dtype=np.float64))
        m = len(z.indices)
        if self._garbage > max(_MIN_GARBAGE, self._used - self._garbage):
            self._compact(m)
        if self._used + m >= len(self._ind):  # >=: one spare zero stays at the end
            self._compact(m)
        u = self._used
        self._ind[u:u + m] = self._intern(z.indices)
        self._val[u:u + m] = z.values
        self._bounds = None
        self._start[j] = u
        self._len[j] = m
        self._used = u + m

    def append(self, z: SparseRow | np.ndarray, zz: float, coef: float, id_: int = -1,
               s: int = 0, fz: float = 0.0, kzz: float = 1.0) -> int:
        if self.n == len(self.a):
            self._grow()
        j = self.n
        self.n = j + 1  # first: a compaction inside _write keeps slot j
        self._len[j] = 0
        self._write(j, z)
        self._set_coefs(j, zz, coef, id_, s)
        self.norm2 += 2.0 * coef * fz + coef * coef * kzz
        return j

    def replace(self, j: int, z: SparseRow | np.ndarray, zz: float, coef: float, id_: int = -1,
                s: int = 0) -> None:
        self._release(j)
        self._write(j, z)
        self._set_coefs(j, zz, coef, id_, s)
        self.norm2 = float("nan")

    def gram(self, kernel: Kernel) -> np.ndarray:
        """``K[i, j] = κ(x_i, x_j)`` of the stored points (one kernel row per SV)."""
        n = self.n
        return np.array([self.row(kernel, self.sv_row(i), float(self.sqn[i]))
                         for i in range(n)]).reshape(n, n)

    def exact_norm2(self, kernel: Kernel) -> float:
        a = self.coef
        return float(a @ self.gram(kernel) @ a) if self.n else 0.0

    def subset(self, idx: np.ndarray) -> SparseSVStore:
        """A new store holding SVs ``idx`` (coefficients 0), e.g. landmarks."""
        idx = np.asarray(idx, dtype=np.int64)
        P = self.points.take(idx)
        st = SparseSVStore(self.dim, capacity=max(len(idx), 1), nnz_capacity=P.nnz)
        st._load(P, self.sqn[idx])
        return st

    def _load(self, P: CSR, sqn: np.ndarray) -> None:
        n = P.n_rows
        m = P.nnz
        if m >= len(self._ind):
            self._ind, self._val = np.zeros(m + 1, np.int64), np.zeros(m + 1)
        self._ind[:m] = self._renumber(P.indices)
        self._val[:m] = P.data
        lens = np.diff(P.indptr)
        self._bounds = None
        self._start[:n] = P.indptr[:-1]
        self._len[:n] = lens
        self._used = m
        self._garbage = 0
        self.sqn[:n] = sqn
        self.n = n

    # -- state ---------------------------------------------------------------------------------
    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        P = self.points
        return {f"{prefix}indptr": P.indptr, f"{prefix}indices": P.indices,
                f"{prefix}data": P.data, **self._coef_state(prefix)}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], prefix: str, dim: int,
                   capacity: int = 16) -> SparseSVStore:
        indptr = np.asarray(state[f"{prefix}indptr"], dtype=np.int64)
        P = CSR(indptr, np.asarray(state[f"{prefix}indices"], dtype=np.int64),
                np.asarray(state[f"{prefix}data"], dtype=np.float64), int(dim)).check()
        n = P.n_rows
        st = cls(dim, capacity=max(capacity, n), nnz_capacity=2 * P.nnz)
        st._load(P, state[f"{prefix}sqn"])
        st._load_coefs(state, prefix)
        return st
