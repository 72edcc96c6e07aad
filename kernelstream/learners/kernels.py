"""Kernels and kernel-target alignment (Cristianini et al., NIPS 2001).

Every kernel evaluates one *row* ``κ(X, z)`` against a matrix of stored points in a single
vectorised pass (``row``), or from the inner products ``X z`` computed by a sparse store
(``row_from_dots``). Gaussian rows reuse cached squared row norms of ``X``:
``‖x − z‖² = ‖x‖² + ‖z‖² − 2 xᵀz`` (clipped at 0), so a row costs one matrix–vector product.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import overload

import numpy as np

from kernelstream.learners.params import sigma_gamma

KERNELS = ("gaussian", "polynomial", "linear")

#: ``np.exp(x)`` is exactly ``+0.0`` for every float64 ``x`` below this bound: ``e^x`` rounds to
#: 0 below ``ln 2^-1075 ≈ −745.133`` (between that and ``≈ −708.4`` it is subnormal, not 0);
#: −746 leaves a margin for the rounding of the libm. numpy's ``exp`` is about 7x slower on
#: such arguments than on ordinary ones (and subnormal results cost ~35x), which matters where
#: narrow widths underflow on most stored points
#: (:meth:`~kernelstream.learners._multikernel.MultiStore.scores`).
EXP_ZERO_BELOW = -746.0


class Kernel:
    """A positive-definite kernel on ``R^d``.

    ``row(X, sqn, z, zz)`` returns ``κ(X_j, z)`` for every row of ``X`` given the cached squared
    norms ``sqn = ‖X_j‖²`` and ``zz = ‖z‖²``; ``diag(zz)`` returns ``κ(z, z)``.
    """

    name: str = "kernel"

    def row(self, X: np.ndarray, sqn: np.ndarray, z: np.ndarray, zz: float) -> np.ndarray:
        raise NotImplementedError

    def row_from_dots(self, d: np.ndarray, sqn: np.ndarray, zz: float) -> np.ndarray:
        """The row from the inner products ``d = X z`` (overwritten): the sparse stores compute
        ``d`` by sparse–sparse or sparse–dense products, then share the kernel's formula."""
        raise NotImplementedError

    @overload
    def diag(self, zz: float) -> float: ...
    @overload
    def diag(self, zz: np.ndarray) -> np.ndarray | float: ...
    def diag(self, zz: float | np.ndarray) -> float | np.ndarray:
        """``κ(z, z)`` from ``zz = ‖z‖²``; of each entry of an array of them too (BPA-S), a
        scalar for a kernel whose diagonal is constant."""
        raise NotImplementedError

    def matrix(self, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
        """Full kernel matrix ``κ(A_i, B_j)`` (for tests, alignment and Gram matrices)."""
        raise NotImplementedError


class Gaussian(Kernel):
    """``κ(x, x') = exp(−gamma ‖x − x'‖²)`` with ``gamma = 1 / (2 sigma²)``."""

    name = "gaussian"

    def __init__(self, gamma: float) -> None:
        self.gamma = float(gamma)
        self._neg_gamma = -self.gamma

    def row(self, X: np.ndarray, sqn: np.ndarray, z: np.ndarray, zz: float) -> np.ndarray:
        d = X @ z
        d *= -2.0
        d += sqn
        d += zz
        np.maximum(d, 0.0, out=d)  # round-off can make a distance slightly negative
        d *= self._neg_gamma
        return np.exp(d, out=d)

    def row_from_dots(self, d: np.ndarray, sqn: np.ndarray, zz: float) -> np.ndarray:
        # the tail of ``row`` (kept inline there: the dense path saves a call per round)
        d *= -2.0
        d += sqn
        d += zz
        np.maximum(d, 0.0, out=d)
        d *= self._neg_gamma
        return np.exp(d, out=d)

    @overload
    def diag(self, zz: float) -> float: ...
    @overload
    def diag(self, zz: np.ndarray) -> np.ndarray | float: ...
    def diag(self, zz: float | np.ndarray) -> float | np.ndarray:
        return 1.0

    def matrix(self, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
        return np.exp(-self.gamma * sq_dists(A, A if B is None else B))


class Polynomial(Kernel):
    """Homogeneous polynomial ``κ(x, x') = (xᵀx')^degree`` (the multi-kernel pool of Lu et
    al., ACM TIST 2018)."""

    name = "polynomial"

    def __init__(self, degree: int) -> None:
        self.degree = int(degree)

    def row(self, X: np.ndarray, sqn: np.ndarray, z: np.ndarray, zz: float) -> np.ndarray:
        d = X @ z
        return d if self.degree == 1 else np.power(d, self.degree, out=d)

    def row_from_dots(self, d: np.ndarray, sqn: np.ndarray, zz: float) -> np.ndarray:
        return d if self.degree == 1 else np.power(d, self.degree, out=d)

    @overload
    def diag(self, zz: float) -> float: ...
    @overload
    def diag(self, zz: np.ndarray) -> np.ndarray | float: ...
    def diag(self, zz: float | np.ndarray) -> float | np.ndarray:
        return zz**self.degree

    def matrix(self, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
        return (A @ (A if B is None else B).T) ** self.degree


class Linear(Polynomial):
    """``κ(x, x') = xᵀx'``."""

    name = "linear"

    def __init__(self) -> None:
        super().__init__(1)


def make_kernel(name: str, gamma: float = 0.5, degree: int = 2) -> Kernel:
    if name == "gaussian":
        return Gaussian(gamma)
    if name == "polynomial":
        return Polynomial(degree)
    if name == "linear":
        return Linear()
    raise ValueError(f"unknown kernel {name!r}; valid kernels: {', '.join(KERNELS)}")


def sq_dists(A: np.ndarray, B: np.ndarray, aa: np.ndarray | None = None,
             bb: np.ndarray | None = None) -> np.ndarray:
    """Pairwise squared Euclidean distances, clipped at 0. ``aa``, ``bb``: the squared norms of
    the rows of ``A``, ``B`` when known (``(A * A).sum(1)``), which then are not squared again."""
    aa = (A * A).sum(1) if aa is None else aa
    bb = (B * B).sum(1) if bb is None else bb
    d = aa[:, None] + bb[None, :] - 2.0 * (A @ B.T)
    return np.maximum(d, 0.0, out=d)


def gaussian_rows_multi(d2: np.ndarray, gammas: Sequence[float] | np.ndarray) -> np.ndarray:
    """Several Gaussian widths on the same squared distances, shape ``(len(gammas), *d2.shape)``."""
    g = np.asarray(gammas, dtype=np.float64).reshape((-1,) + (1,) * d2.ndim)
    return np.exp(-g * d2[None])


def kernel_alignment(
    X: np.ndarray, y: np.ndarray, gammas: Sequence[float], block: int = 1024
) -> np.ndarray:
    """Kernel–target alignment ``yᵀKy / (m ‖K‖_F)`` of Gaussian kernels (Cristianini et al., NIPS
    2001), one per gamma.

    Computed blockwise so memory stays ``O(block · m)``; the squared distances of a block are
    computed once and reused for every width.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    g = np.asarray(gammas, dtype=np.float64)
    m = X.shape[0]
    yKy = np.zeros(len(g))
    fro2 = np.zeros(len(g))
    for s in range(0, m, block):
        d2 = sq_dists(X[s : s + block], X)
        for i, gi in enumerate(g):
            K = np.exp(-gi * d2)
            yKy[i] += y[s : s + block] @ (K @ y)
            fro2[i] += np.einsum("ij,ij->", K, K)
    return yKy / (m * np.sqrt(fro2))


# -- lists of Gaussian widths (the multi-kernel learners' ``sigmas``) -----------------------------
_RANGE = re.compile(r"^2\^\(?(-?[\d.]+):(-?[\d.]+):(-?[\d.]+)\)?$")
_POW = re.compile(r"^2\^\(?(-?[\d.]+)\)?$")


def parse_sigmas(text: str) -> np.ndarray:
    """Widths from ``"0.25,0.5"``, ``"2^-2,2^-1"`` or ``"2^-2:0.5:3.5"`` (inclusive range of
    exponents); raises ValueError unless every width is a finite number > 0 (at least one)."""
    vals: list[float] = []
    try:
        for tok in str(text).replace(";", ",").split(","):
            tok = tok.strip().replace(" ", "")
            if not tok:
                continue
            m = _RANGE.match(tok)
            if m:
                a, s, b = (float(g) for g in m.groups())
                if not s > 0 or b < a or (b - a) / s > 1000:
                    raise ValueError(tok)
                n = math.floor((b - a) / s + 1e-9) + 1
                vals += [2.0 ** (a + k * s) for k in range(n)]
                continue
            m = _POW.match(tok)
            vals.append(2.0 ** float(m.group(1)) if m else float(tok))
    except (ValueError, OverflowError):
        raise ValueError(f"not a list of widths: {text!r}") from None
    if not vals or any(math.isnan(sigma_gamma(v)) for v in vals):
        raise ValueError(f"widths must be numbers > 0 whose gamma = 1/(2 sigma^2) is finite "
                         f"and > 0 (about 1e-154 to 1e154), got {text!r}")
    return np.array(vals, dtype=np.float64)
