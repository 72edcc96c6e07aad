"""Kernel expansion store ``f(·) = Σ_j a_j κ(x_j, ·)``.

Points live in a pre-allocated ``capacity × d`` array that grows geometrically, so appending is
amortised O(d) and a kernel row is one matrix–vector product on a contiguous slice. The squared
RKHS norm ``‖f‖²`` is tracked with exact identities (no re-evaluation of the Gram matrix);
callers pass the values they have already computed (``f(z)``, ``κ(z, z)``), which is why every
mutating method takes them as arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kernelstream.learners._coefficients import _Coefficients
from kernelstream.learners.kernels import Gaussian, Kernel
from kernelstream.learners.sparse_store import SparseSVStore


class SVStore(_Coefficients):
    __slots__ = ("X",)
    _SLOT_ARRAYS = ("X", "sqn", "a", "ids", "s")

    def __init__(self, dim: int, capacity: int = 16) -> None:
        super().__init__(dim, capacity)
        self.X = np.zeros((len(self.a), self.dim))

    @property
    def points(self) -> np.ndarray:
        return self.X[: self.n]

    # -- evaluation ----------------------------------------------------------------------------
    def row(self, kernel: Kernel, z: np.ndarray, zz: float) -> np.ndarray:
        n = self.n
        return kernel.row(self.X[:n], self.sqn[:n], z, zz)

    def eval_sv(self, kernel: Kernel, j: int) -> float:
        """``f(x_j)`` at a stored point."""
        return self.eval(kernel, self.X[j], float(self.sqn[j]))

    # -- mutation ------------------------------------------------------------------------------
    def append(self, z: np.ndarray, zz: float, coef: float, id_: int = -1, s: int = 0,
               fz: float = 0.0, kzz: float = 1.0) -> int:
        """Add ``coef κ(z, ·)``; ``fz = f(z)`` before the addition keeps ``‖f‖²`` exact."""
        if self.n == len(self.a):
            self._grow()
        j = self.n
        self.X[j] = z
        self._set_coefs(j, zz, coef, id_, s)
        self.n = j + 1
        self.norm2 += 2.0 * coef * fz + coef * coef * kzz
        return j

    def replace(self, j: int, z: np.ndarray, zz: float, coef: float, id_: int = -1,
                s: int = 0) -> None:
        """Overwrite slot ``j`` (remove-then-add in one step). Invalidates the tracked norm;
        learners that need ``‖f‖`` use :meth:`remove` and :meth:`append` instead."""
        self.X[j] = z
        self._set_coefs(j, zz, coef, id_, s)
        self.norm2 = float("nan")

    def exact_norm2(self, kernel: Kernel) -> float:
        """``aᵀ K a`` recomputed from scratch (debugging and tests)."""
        P, a = self.points, self.coef
        return float(a @ kernel.matrix(P) @ a) if self.n else 0.0

    def subset(self, idx: np.ndarray) -> SVStore:
        """A new store holding SVs ``idx`` (coefficients 0), e.g. landmarks."""
        idx = np.asarray(idx, dtype=np.int64)
        st = SVStore(self.dim, capacity=max(len(idx), 1))
        st.X[: len(idx)] = self.X[idx]
        st.sqn[: len(idx)] = self.sqn[idx]
        st.n = len(idx)
        return st

    # -- state ---------------------------------------------------------------------------------
    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}X": self.X[:self.n].copy(), **self._coef_state(prefix)}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], prefix: str, dim: int,
                   capacity: int = 16) -> SVStore:
        X = state[f"{prefix}X"]
        n = len(X)
        st = cls(dim, capacity=max(capacity, n))
        st.X[:n] = X
        st.sqn[:n] = state[f"{prefix}sqn"]
        st.n = n
        st._load_coefs(state, prefix)
        return st


def eval_stores(stores: Sequence[SVStore], kernels: Sequence[Kernel], z: np.ndarray,
                zz: float) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """``(f, rows)``: ``f_i = stores[i].eval(kernels[i], z, zz)`` and ``rows[i] =
    stores[i].row(kernels[i], z, zz)`` (``None`` for an empty store) for several dense stores,
    each with its own kernel, bit for bit, in fewer numpy calls (multi-kernel learners).

    Each store keeps its own matrix–vector product: a BLAS product's value for a point depends
    on the matrix the point sits in (its place in the kernel's blocks), so one product over the
    union of the stores would change last bits. The elementwise rest of the Gaussian rows (the
    steps of :meth:`Gaussian.row`, in its order) then runs once over their concatenation, and
    every ``f_i`` is the same dot product of the store's coefficients with its own segment
    (views into one fresh array). Other kernels are evaluated one by one. ``ndarray.dot`` is
    the ``@`` of :meth:`SVStore.row` and :meth:`SVStore.dot` (the same BLAS calls, gemv and
    dot) at a third of its call overhead."""
    f = np.zeros(len(stores))
    rows: list[np.ndarray | None] = [None] * len(stores)
    gauss: list[int] = []
    sizes: list[int] = []
    negs: list[float] = []
    dots: list[np.ndarray] = []
    sqns: list[np.ndarray] = []
    for i, (sv, kern) in enumerate(zip(stores, kernels, strict=True)):
        n = sv.n
        if n == 0:
            continue
        if isinstance(kern, Gaussian):
            gauss.append(i)
            sizes.append(n)
            negs.append(kern._neg_gamma)
            dots.append(sv.X[:n].dot(z))
            sqns.append(sv.sqn[:n])
        else:
            k = kern.row(sv.X[:n], sv.sqn[:n], z, zz)
            rows[i] = k
            f[i] = sv.a[:n].dot(k)
    if gauss:
        d = np.concatenate(dots)
        d *= -2.0
        d += np.concatenate(sqns)
        d += zz
        np.maximum(d, 0.0, out=d)
        d *= np.repeat(np.array(negs), sizes)
        np.exp(d, out=d)
        o = 0
        for i, n in zip(gauss, sizes, strict=True):
            k = d[o:o + n]
            o += n
            rows[i] = k
            f[i] = stores[i].a[:n].dot(k)
    return f, rows


AnyStore = SVStore | SparseSVStore


def make_store(dim: int, capacity: int, sparse: bool) -> AnyStore:
    """A dense :class:`SVStore` or a :class:`SparseSVStore` (the learner's input type decides)."""
    return SparseSVStore(dim, capacity=capacity) if sparse else SVStore(dim, capacity=capacity)


def store_from_state(state: dict[str, np.ndarray], prefix: str, dim: int,
                     capacity: int = 16) -> AnyStore:
    """Restore whichever store :meth:`get_state` saved under ``prefix``."""
    if f"{prefix}indptr" in state:
        return SparseSVStore.from_state(state, prefix, dim, capacity=capacity)
    return SVStore.from_state(state, prefix, dim, capacity=capacity)
