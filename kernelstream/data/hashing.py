"""Feature hashing: feature indices (or CSV/Parquet column positions) into ``2**k`` columns.

The hash is fixed and independent of any seed, so a model trained on hashed data can be fed by
another process, run or machine: column = the top ``k`` bits of the splitmix64 finalizer of the
(0-based) feature index as an unsigned 64-bit integer::

    z = index + 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    z = z ^ (z >> 31)
    column = z >> (64 - k)

all modulo 2**64. Values of features that land in one column are summed.
"""

from __future__ import annotations

import numpy as np

from kernelstream.sparse import CSR

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def check_bits(k: int) -> int:
    """``k`` if it is a usable number of hash bits (1..31), else ValueError (one line)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 31:
        raise ValueError(f"hash_features takes a number of bits from 1 to 31 (2^k columns), "
                         f"got {k!r}")
    return k


def parse_bits(text: str) -> int:
    """Hash bits from how people write a table size: ``18``, ``2^18``, ``2**18`` or
    ``262144`` (a power of two above 31 is read as the number of columns)."""
    t = text.strip().replace(" ", "")
    for pre in ("2^", "2**"):
        if t.startswith(pre):
            t = t[len(pre):]
            break
    else:
        if t.isdigit() and int(t) > 31:
            n = int(t)
            if n & (n - 1):
                raise ValueError(f"hash_features takes K from 1 to 31 (2^K columns) or a "
                                 f"power of two, got {n}")
            return check_bits(n.bit_length() - 1)
    if not t.isdigit():
        raise ValueError(f"hash_features takes K, 2^K or a power of two, got {text!r}")
    return check_bits(int(t))


def hash_index(index: np.ndarray | int, k: int) -> np.ndarray:
    """Columns in ``[0, 2**k)`` of 0-based feature indices (int64 array), vectorised."""
    check_bits(k)
    z = np.asarray(index, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):  # wrap-around is the point of the mix
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(64 - k)).astype(np.int64)


def hash_row(cols: np.ndarray, vals: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """One row's 0-based columns hashed into ``2**k``: sorted, colliding values summed (the
    row-at-a-time form of :func:`hash_csr`, for streams)."""
    h = hash_index(cols, k)
    order = np.argsort(h, kind="stable")
    h, v = h[order], np.asarray(vals, dtype=np.float64)[order]
    new = np.ones(len(h), dtype=bool)
    new[1:] = h[1:] != h[:-1]
    if new.all():
        return h, v
    starts = np.flatnonzero(new)
    return h[starts], np.add.reduceat(v, starts)


def hash_csr(X: CSR, k: int) -> CSR:
    """``X`` with its columns hashed into ``2**k``: colliding values summed, columns of each
    row strictly increasing again, exact zeros of a sum kept (they are rare and harmless)."""
    rows = np.repeat(np.arange(X.n_rows, dtype=np.int64), np.diff(X.indptr))
    return csr_from_pairs(rows, hash_index(X.indices, k), X.data, X.n_rows, 1 << k)


def csr_from_pairs(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n_rows: int,
                   n_features: int) -> CSR:
    """A :class:`CSR` from ``(row, 0-based column, value)`` triples in any order; the values
    of a repeated ``(row, column)`` are summed."""
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    if len(rows):
        new = np.ones(len(rows), dtype=bool)
        new[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        starts = np.flatnonzero(new)
        vals = np.add.reduceat(vals, starts) if len(starts) < len(rows) else vals
        rows, cols = rows[starts], cols[starts]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    return CSR(indptr, cols.astype(np.int64), np.asarray(vals, dtype=np.float64),
               int(n_features))
