"""Kernel expansion store ``f(·) = Σ_j a_j κ(x_j, ·)`` (ALGORITHMS.md §1.3).

Points live in a pre-allocated ``capacity × d`` array that grows geometrically, so appending is
amortised O(d) and a kernel row is one matrix–vector product on a contiguous slice. The squared
RKHS norm ``‖f‖²`` is tracked with exact identities (no re-evaluation of the Gram matrix);
callers pass the values they have already computed (``f(z)``, ``κ(z, z)``), which is why every
mutating method takes them as arguments.
"""

from __future__ import annotations

import numpy as np

from kernelstream.learners.kernels import Kernel


class SVStore:
    __slots__ = ("X", "a", "dim", "ids", "n", "norm2", "s", "sqn")

    def __init__(self, dim: int, capacity: int = 16) -> None:
        self.dim = int(dim)
        cap = max(int(capacity), 1)
        self.X = np.zeros((cap, self.dim))
        self.sqn = np.zeros(cap)
        self.a = np.zeros(cap)
        self.ids = np.zeros(cap, dtype=np.int64)
        self.s = np.zeros(cap, dtype=np.int64)
        self.n = 0
        self.norm2 = 0.0

    # -- views -----------------------------------------------------------------------------
    @property
    def points(self) -> np.ndarray:
        return self.X[: self.n]

    @property
    def coef(self) -> np.ndarray:
        return self.a[: self.n]

    def __len__(self) -> int:
        return self.n

    # -- evaluation ----------------------------------------------------------------------------
    def row(self, kernel: Kernel, z: np.ndarray, zz: float) -> np.ndarray:
        """``κ(x_j, z)`` for every stored point (a fresh array the caller may keep)."""
        n = self.n
        return kernel.row(self.X[:n], self.sqn[:n], z, zz)

    def dot(self, k: np.ndarray) -> float:
        """``f(z) = aᵀ k`` for a row ``k`` returned by :meth:`row`."""
        return float(self.a[: self.n] @ k) if self.n else 0.0

    def eval(self, kernel: Kernel, z: np.ndarray, zz: float) -> float:
        return self.dot(self.row(kernel, z, zz)) if self.n else 0.0

    def eval_sv(self, kernel: Kernel, j: int) -> float:
        """``f(x_j)`` at a stored point."""
        return self.eval(kernel, self.X[j], float(self.sqn[j]))

    # -- mutation ------------------------------------------------------------------------------
    def _grow(self) -> None:
        cap = 2 * len(self.a)
        for name in ("X", "sqn", "a", "ids", "s"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def append(self, z: np.ndarray, zz: float, coef: float, id_: int = -1, s: int = 0,
               fz: float = 0.0, kzz: float = 1.0) -> int:
        """Add ``coef κ(z, ·)``; ``fz = f(z)`` before the addition keeps ``‖f‖²`` exact."""
        if self.n == len(self.a):
            self._grow()
        j = self.n
        self.X[j] = z
        self.sqn[j] = zz
        self.a[j] = coef
        self.ids[j] = id_
        self.s[j] = s
        self.n = j + 1
        self.norm2 += 2.0 * coef * fz + coef * coef * kzz
        return j

    def replace(self, j: int, z: np.ndarray, zz: float, coef: float, id_: int = -1,
                s: int = 0) -> None:
        """Overwrite slot ``j`` (remove-then-add in one step). Invalidates the tracked norm;
        learners that need ``‖f‖`` use :meth:`remove` and :meth:`append` instead."""
        self.X[j] = z
        self.sqn[j] = zz
        self.a[j] = coef
        self.ids[j] = id_
        self.s[j] = s
        self.norm2 = float("nan")

    def remove(self, j: int, fxj: float | None = None, kjj: float = 1.0) -> None:
        """Delete SV ``j`` by moving the last SV into its slot (order is not meaningful; the
        insertion round ``s`` keeps FIFO information). ``fxj = f(x_j)`` keeps ``‖f‖²`` exact."""
        aj = float(self.a[j])
        if fxj is not None:
            self.norm2 += -2.0 * aj * fxj + aj * aj * kjj
        last = self.n - 1
        if j != last:
            self.X[j] = self.X[last]
            self.sqn[j] = self.sqn[last]
            self.a[j] = self.a[last]
            self.ids[j] = self.ids[last]
            self.s[j] = self.s[last]
        self.n = last

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
        return float(np.sqrt(max(self.norm2, 0.0)))

    def project(self, radius: float) -> None:
        """Project onto the ball ``‖f‖ ≤ radius`` by rescaling (no-op for ``‖f‖ = 0``)."""
        nrm = self.norm
        if nrm > radius and nrm > 0.0:
            self.scale(radius / nrm)

    def exact_norm2(self, kernel: Kernel) -> float:
        """``aᵀ K a`` recomputed from scratch (debugging and tests)."""
        P, a = self.points, self.coef
        return float(a @ kernel.matrix(P) @ a) if self.n else 0.0

    # -- state ---------------------------------------------------------------------------------
    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        n = self.n
        return {
            f"{prefix}X": self.X[:n].copy(),
            f"{prefix}sqn": self.sqn[:n].copy(),
            f"{prefix}a": self.a[:n].copy(),
            f"{prefix}ids": self.ids[:n].copy(),
            f"{prefix}s": self.s[:n].copy(),
            f"{prefix}norm2": np.array(self.norm2),
        }

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], prefix: str, dim: int,
                   capacity: int = 16) -> SVStore:
        X = state[f"{prefix}X"]
        n = len(X)
        st = cls(dim, capacity=max(capacity, n))
        st.X[:n] = X
        st.sqn[:n] = state[f"{prefix}sqn"]
        st.a[:n] = state[f"{prefix}a"]
        st.ids[:n] = state[f"{prefix}ids"]
        st.s[:n] = state[f"{prefix}s"]
        st.n = n
        st.norm2 = float(state[f"{prefix}norm2"])
        return st
