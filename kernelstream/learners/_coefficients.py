"""The coefficient bookkeeping both support-vector stores share
(:class:`~kernelstream.learners.store.SVStore`,
:class:`~kernelstream.learners.sparse_store.SparseSVStore`)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from kernelstream.learners.kernels import Kernel


class _Coefficients:
    """What both stores do with the coefficients ``a``, ages ``s``, ids and ``‖f‖²`` of
    their ``n`` support vectors (the points themselves are each store's own)."""

    # the slots of what this class's methods assign (mypy checks assignments against them)
    __slots__ = ("a", "dim", "ids", "n", "norm2", "s", "sqn")
    a: np.ndarray
    ids: np.ndarray
    s: np.ndarray
    sqn: np.ndarray
    n: int
    norm2: float
    dim: int
    # the arrays with one entry (row) per slot, which grow and move together
    _SLOT_ARRAYS: ClassVar[tuple[str, ...]]

    def __init__(self, dim: int, capacity: int) -> None:
        self.dim = int(dim)
        cap = max(int(capacity), 1)
        self.sqn = np.zeros(cap)
        self.a = np.zeros(cap)
        self.ids = np.zeros(cap, dtype=np.int64)
        self.s = np.zeros(cap, dtype=np.int64)
        self.n = 0
        self.norm2 = 0.0

    @property
    def coef(self) -> np.ndarray:
        return self.a[: self.n]

    def __len__(self) -> int:
        return self.n

    def row(self, kernel: Kernel, z: Any, zz: float) -> np.ndarray:
        """``κ(x_j, z)`` for every stored point (a fresh array the caller may keep)."""
        raise NotImplementedError

    def dot(self, k: np.ndarray) -> float:
        """``f(z) = aᵀ k`` for a row ``k`` returned by :meth:`row`."""
        return float(self.a[: self.n] @ k) if self.n else 0.0

    def eval(self, kernel: Kernel, z: Any, zz: float) -> float:
        return self.dot(self.row(kernel, z, zz)) if self.n else 0.0

    def _grow(self) -> None:
        cap = 2 * len(self.a)
        for name in self._SLOT_ARRAYS:
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def _set_coefs(self, j: int, zz: float, coef: float, id_: int, s: int) -> None:
        """Slot ``j``'s entries besides its point."""
        self.sqn[j] = zz
        self.a[j] = coef
        self.ids[j] = id_
        self.s[j] = s

    def _release(self, j: int) -> None:
        """Give up slot ``j``'s point before the slot is reused (the sparse pool's garbage)."""

    def remove(self, j: int, fxj: float | None = None, kjj: float = 1.0) -> None:
        """Delete SV ``j`` by moving the last SV into its slot (order is not meaningful; the
        insertion round ``s`` keeps FIFO information). ``fxj = f(x_j)`` and
        ``kjj = κ(x_j, x_j)`` keep ``‖f‖²`` exact; without ``fxj`` the tracked norm is unknown
        (``norm2`` NaN, as after ``replace``) and :attr:`norm` raises."""
        aj = float(self.a[j])
        if fxj is not None:
            self.norm2 += -2.0 * aj * fxj + aj * aj * kjj
        else:  # the store has no kernel to compute f(x_j): no norm rather than a wrong one
            self.norm2 = math.nan
        self._release(j)
        last = self.n - 1
        if j != last:
            for name in self._SLOT_ARRAYS:
                arr = getattr(self, name)
                arr[j] = arr[last]
        self.n = last

    def _coef_state(self, prefix: str) -> dict[str, np.ndarray]:
        """The state entries both stores share (after each store's points)."""
        n = self.n
        return {f"{prefix}sqn": self.sqn[:n].copy(), f"{prefix}a": self.a[:n].copy(),
                f"{prefix}ids": self.ids[:n].copy(), f"{prefix}s": self.s[:n].copy(),
                f"{prefix}norm2": np.array(self.norm2)}

    def _load_coefs(self, state: dict[str, np.ndarray], prefix: str) -> None:
        """The :meth:`_coef_state` entries besides ``sqn``, for the ``n`` loaded points."""
        n = self.n
        self.a[:n] = state[f"{prefix}a"]
        self.ids[:n] = state[f"{prefix}ids"]
        self.s[:n] = state[f"{prefix}s"]
        self.norm2 = float(state[f"{prefix}norm2"])

    def scale(self, c: float) -> None:
        self.a[: self.n] *= c
        self.norm2 *= c * c

    def add_coef(self, j: int, c: float, fxj: float = 0.0, kjj: float = 1.0) -> None:
        """``a_j += c`` (merge by id); ``fxj = f(x_j)`` keeps ``‖f‖²`` exact."""
        self.a[j] += c
        self.norm2 += 2.0 * c * fxj + c * c * kjj

    def find_id(self, id_: int) -> int:
        hit = np.flatnonzero(self.ids[: self.n] == id_)
        return int(hit[0]) if len(hit) else -1

    def oldest(self) -> int:
        return int(np.argmin(self.s[: self.n]))

    @property
    def norm(self) -> float:
        """``‖f‖`` as tracked; a ValueError once a ``replace`` or a ``remove`` without ``fxj``
        has made it unknown (a NaN would pass every ``>`` test, :meth:`project` included)."""
        if math.isnan(self.norm2):
            raise ValueError("the store's norm is not tracked: a replace(), or a remove() "
                             "without fxj = f(x_j), left it unknown")
        return float(np.sqrt(max(self.norm2, 0.0)))

    def project(self, radius: float) -> None:
        """Project onto the ball ``‖f‖ ≤ radius`` by rescaling (no-op for ``‖f‖ = 0``)."""
        nrm = self.norm
        if nrm > radius and nrm > 0.0:
            self.scale(radius / nrm)
