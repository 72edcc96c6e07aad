"""The compiled per-round kernels, and the numpy code the learners fall back to without them.

A round of a budgeted kernel learner is cheap arithmetic (a kernel row against ~200 stored
points) wrapped in about a dozen numpy calls of ~0.5 µs each; compiled, the row, the score and
the "does this round update?" test cost what their arithmetic costs. ``_ckernels`` (C, built
with the package by ``pip install``; ``setup.py``) holds the parts every single-kernel learner
shares: the example's squared norm, its kernel row and score, and a block driver that runs
test-then-train up to the next round that changes the model. The learners' updates stay in
Python, written as their papers state them; the README explains why C rather than a JIT.

Every sum is sequential in index order, so a round's numbers depend on nothing but its inputs:
the block driver and the per-example path agree bit for bit (both call the same C code), and
results differ from the numpy fallback (BLAS products, SIMD ``exp``) at round-off level only.

``KERNELSTREAM_COMPILED=0`` in the environment selects the numpy code (for comparisons);
:data:`STATUS` says which code runs and why.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np

ABI = 1  # the _ckernels.c interface this module calls (its KS_ABI)

KERNEL_CODES = {"gaussian": 0, "polynomial": 1, "linear": 2}
#: When a round updates the model (the learner's ``_update`` returns at once otherwise):
#: ``always``; ``mistake``: ``y f(x) ≤ 0``; ``margin``: ``y f(x) < 1``.
TRIGGERS = {"always": 0, "mistake": 1, "margin": 2}


def source_hash() -> str | None:
    """Hash of the C sources next to this module (``None`` in an install without them):
    ``setup.py`` builds the same hash into the extension."""
    files = sorted(Path(__file__).parent.glob("_ck*.[ch]"))
    if not files:  # an installed wheel ships the build, not the source
        return None
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:16]


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("KERNELSTREAM_COMPILED", "1").strip().lower() in ("0", "false", "no",
                                                                         "off"):
        return None, "numpy (KERNELSTREAM_COMPILED=0)"
    try:
        from kernelstream.learners import _ckernels
    except ImportError:
        return None, ("numpy (the compiled kernels are not built: reinstall with a C compiler, "
                      "`pip install -e .`)")
    want = source_hash()
    if getattr(_ckernels, "ABI", None) != ABI or (
            want is not None and getattr(_ckernels, "SOURCE_HASH", None) != want):
        warnings.warn("kernelstream: the compiled kernels are older than _ckernels.c; using "
                      "numpy until they are rebuilt (`pip install -e .`)", stacklevel=2)
        return None, "numpy (the compiled kernels are stale: rebuild with `pip install -e .`)"
    return _ckernels, "compiled (C)"


ck, STATUS = _load()


def sqnorm(x: np.ndarray) -> float:
    """``‖x‖²`` of a float64 vector, the same number in the per-example and block paths."""
    if ck is not None:
        return ck.sqnorm(x if x.flags.c_contiguous else np.ascontiguousarray(x))
    return float(x @ x)


def row_sqnorms(X: np.ndarray) -> np.ndarray:
    """:func:`sqnorm` of every row of a C-ordered float64 matrix."""
    out = np.empty(X.shape[0])
    if ck is not None:
        ck.sqnorms(X, out)
    else:
        for i in range(X.shape[0]):
            xi = X[i]
            out[i] = float(xi @ xi)
    return out
