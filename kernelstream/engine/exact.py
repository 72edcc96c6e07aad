"""Exact float sums of a stream, whatever its cut into blocks (pure Python and numpy).

Used by the metrics (:mod:`kernelstream.engine.replay.metrics`, which re-exports them), the live
stream's totals and the no-skill baselines (:mod:`kernelstream.engine.noskill`).
"""

from __future__ import annotations

import math

import numpy as np

# Every finite float64 is an integer multiple of 2**-1127 once its 53-bit mantissa is made an
# integer (frexp exponents go down to -1073), so sums scaled by 2**1127 are exact Python ints.
_SCALE = 1127
# A non-finite value (an overflowing loss is inf) cannot be summed exactly: it adds this much,
# beyond any sum of finite floats (2**1024 each, scaled), so that exact_value says ±inf (nan
# counts as +inf: the sums are of losses and squared errors) and no caller ever raises.
_NONFINITE = 1 << (_SCALE + 1100)


def exact_add(total: int, values: np.ndarray) -> int:
    """``total`` (an exact sum scaled by ``2**1127``) plus the finite ``values``, exactly.

    Vectorised: values are split into integer mantissas and exponents, mantissas are summed
    per exponent in int64 (chunks small enough not to overflow), and only those few sums are
    shifted into the Python integer. :func:`exact_value` of the result is the correctly
    rounded sum — bit for bit ``math.fsum`` of every value ever added, however the stream
    was cut into blocks.
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        return total
    bad = ~np.isfinite(v)
    if bad.any():
        neg = int(np.count_nonzero(v[bad] < 0))
        total += (int(bad.sum()) - 2 * neg) * _NONFINITE
        v = v[~bad]
    m, e = np.frexp(v)
    mant = (m * 9007199254740992.0).astype(np.int64)  # m * 2**53: exact
    order = np.argsort(e, kind="stable")
    es, ms = e[order], mant[order]
    cuts = np.flatnonzero(np.diff(es)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, es.size], strict=True):
        shift = int(es[lo]) - 53 + _SCALE
        for c in range(lo, hi, 1024):  # |mantissa| < 2**53: 1024 of them fit in int64
            total += int(ms[c : min(hi, c + 1024)].sum()) << shift
    return total


def exact_value(total: int) -> float:
    """The correctly rounded float of an exact scaled sum (int / int rounds correctly);
    ±inf beyond the float range (where ``math.fsum`` raises)."""
    try:
        return total / (1 << _SCALE)
    except OverflowError:
        return math.inf if total > 0 else -math.inf
