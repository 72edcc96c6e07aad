"""Min-max scaling of features and regression targets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kernelstream.data.errors import (
    SCALES,
    TARGET_SCALES,
    Scale,
    TargetScale,
)
from kernelstream.data.options import Ranges


def fit_minmax(X: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-column ``(lo, hi)`` of a 2-D array (zeros for an empty one), over the rows the
    learners take (squared norm ≤ :data:`KERNEL_MAX`; all of them when none is)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    if X.shape[0] == 0:
        z = np.zeros(X.shape[1], dtype=np.float64)
        return z, z.copy()
    # rows every learner refuses (dead letters of the run) do not stretch the others' ranges
    usable = learnable_rows(X)
    if not usable.all() and usable.any():
        X = X[usable]
    return X.min(axis=0), X.max(axis=0)


def scale_minmax(X: Any, kind: Scale = "01", lo: Any = None, hi: Any = None) -> np.ndarray:
    """Min-max scale each column to ``[0, 1]`` (``"01"``) or ``[-1, 1]`` (``"pm1"``).

    ``lo``/``hi`` default to :func:`fit_minmax` of ``X``; pass a training set's to scale a test
    set the same way (its values may then fall outside the range; they are not clipped).
    Constant columns (``hi == lo``) map to 0 rather than dividing by zero. ``"none"`` returns
    ``X`` as a float64 array unchanged. Always returns a new array for the other kinds.
    """
    if kind not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {kind!r}")
    X = np.asarray(X, dtype=np.float64)
    if kind == "none":
        return X
    if lo is None or hi is None:
        flo, fhi = fit_minmax(X)
        lo = flo if lo is None else lo
        hi = fhi if hi is None else hi
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    span = hi - lo
    const = ~(span > 0)
    Z = (X - lo) / np.where(const, 1.0, span)
    if kind == "pm1":
        Z = 2.0 * Z - 1.0
    Z[:, const] = 0.0
    return np.ascontiguousarray(Z)


def _scale_minmax_inplace(X: np.ndarray, kind: Scale) -> np.ndarray:
    """:func:`scale_minmax` of ``X`` (2-D float64, fitted on itself) overwriting ``X``.

    The same operations in the same order, so the result is bit-identical to it.
    """
    if kind == "none":
        return X
    lo, hi = fit_minmax(X)
    span = hi - lo
    const = ~(span > 0)
    X -= lo
    X /= np.where(const, 1.0, span)
    if kind == "pm1":
        X *= 2.0
        X -= 1.0
    X[:, const] = 0.0
    return X


def head_scaling(ranges: Ranges) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, span)`` of ``--scale auto``'s ranges, decided on the first rows of data read once
    (a Kafka topic's replay, a live stream): a row is scaled as ``(x - lo) / span``. A column
    constant over those rows is shifted only (span 1), since it may vary later."""
    lo, hi = (np.asarray(r, dtype=np.float64) for r in ranges)
    return lo, np.where(hi > lo, hi - lo, 1.0)


def ranges_doc(ranges: Ranges | None) -> dict[str, list[float]] | None:
    """``--scale auto`` 's ranges as checkpoints, snapshots, ``submitted.json`` and
    ``summary.json`` record them: ``{"lo": [...], "hi": [...]}``, or None (unscaled)."""
    return None if ranges is None else {"lo": list(ranges[0]), "hi": list(ranges[1])}


def ranges_from_doc(doc: dict[str, Any] | None) -> Ranges | None:
    """The ranges :func:`ranges_doc` recorded (None: unscaled)."""
    if not doc:
        return None
    return tuple(map(float, doc["lo"])), tuple(map(float, doc["hi"]))


# The largest |target| a learner accepts (``kernelstream.learners.base.Y_MAX``, which this layer
# does not import; a test keeps the two equal): larger ones, and non-finite ones, are dead
# letters of the run, so the head statistics leave them out.
TARGET_MAX = 1e50
# The largest squared norm ‖x‖² any learner accepts (``kernelstream.learners.base.KERNEL_MAX``,
# the Gaussian and linear kernels' bound; a polynomial one's is smaller): a row beyond it is a
# dead letter of every learner, so the head statistics (ranges, spreads) leave it out.
KERNEL_MAX = 1e100


def learnable_rows(X: np.ndarray) -> np.ndarray:
    """Which rows of a dense 2-D array some learner takes: ‖x‖² ≤ :data:`KERNEL_MAX` (NaN,
    inf and overflowing rows are not)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.einsum("ij,ij->i", X, X) <= KERNEL_MAX


def target_standardisation(targets: Sequence[float], source: str | None = None,
                           minimum: int = 2,
                           ) -> tuple[tuple[float, float] | None, str]:
    """``((mean, std), the line to print)`` of the standardisation of a regression target by
    its first values ``targets`` (a file's, or those of the Kafka topic ``source``), or
    ``(None, why not)``: fewer than ``minimum`` of them, or a constant one; the target is then
    learnt as it comes. Targets the learners refuse (non-finite, or beyond :data:`TARGET_MAX`)
    are left out."""
    t = np.asarray(targets, dtype=np.float64)
    # a target every learner refuses (a dead letter of the run) says nothing of the others
    t = t[np.abs(t) <= TARGET_MAX]
    rows = (f"its first {len(t):,} rows" if source is None
            else f"the first {len(t):,} rows of {source}")
    if t.size < max(2, minimum):
        return None, (f"--scale-target auto: {t.size} target{'s' if t.size != 1 else ''} "
                      f"among the first records of {source or 'the data'}, fewer than "
                      f"{max(2, minimum)}: too few to standardise by; the target is learnt as "
                      "it comes")
    # checked first: numpy's std of an infinite value warns (inf - inf) before it says nan
    finite = bool(np.isfinite(t).all())
    with np.errstate(over="ignore", invalid="ignore"):  # a huge target: its std is inf
        mean, std = (float(t.mean()), float(t.std())) if finite else (np.nan, np.nan)
    if not (np.isfinite(mean) and np.isfinite(std) and std > 0):
        return None, (f"--scale-target auto: the target is constant or not finite over {rows}: "
                      "nothing to standardise by; it is learnt as it comes")
    return (mean, std), (f"standardising the target by the mean {mean:.4g} and standard "
                         f"deviation {std:.4g} of {rows}; predictions and losses stay in its "
                         "units (--scale-target none keeps it as it is)")


def scale_target_minmax(y: Any, kind: TargetScale = "01") -> np.ndarray:
    """Min-max scale a regression target vector to ``[0, 1]`` (``"01"``); a constant target
    maps to 0; ``"none"`` returns ``y`` as a float64 array unchanged."""
    if kind not in TARGET_SCALES:
        raise ValueError(f"scale_target must be one of {TARGET_SCALES}, got {kind!r}")
    y = np.asarray(y, dtype=np.float64)
    if kind == "none" or y.size == 0:
        return y
    lo, hi = float(y.min()), float(y.max())
    if not hi > lo:
        return np.zeros_like(y)
    return (y - lo) / (hi - lo)

