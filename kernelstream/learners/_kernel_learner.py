"""Shared machinery of single-kernel learners that keep one support-vector store (a dense
:class:`SVStore`, or a :class:`SparseSVStore` when the learner runs on sparse rows)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kernelstream.learners.base import Learner
from kernelstream.learners.kernels import Kernel, make_kernel
from kernelstream.learners.store import AnyStore, make_store, store_from_state


class KernelLearner(Learner):
    """A learner whose hypothesis is one kernel expansion ``f = Σ_j a_j κ(x_j, ·)``.

    ``_score`` returns ``(f(x), k)`` with the kernel row ``k = κ(X_S, x)`` as the cached
    auxiliary value, so the update never recomputes it.
    """

    capacity_param: ClassVar[str | None] = "budget"  # parameter bounding the store, if any
    accepts_sparse = True  # x reaches only the store and the kernel (sparse SVs in sparse mode)

    kernel: str
    gamma: float
    degree: int

    def _setup(self, d: int) -> None:
        self.kern: Kernel = make_kernel(self.kernel, self.gamma, self.degree)
        cap = getattr(self, self.capacity_param, 16) if self.capacity_param else 16
        self.sv: AnyStore = make_store(d, int(cap) + 1, self.sparse)

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        sv = self.sv
        if sv.n == 0:
            return 0.0, None
        k = sv.row(self.kern, x, xx)
        return float(sv.a[: sv.n] @ k), k

    @property
    def n_support_vectors(self) -> int:
        return self.sv.n if self.dim is not None else 0

    def _get_state(self) -> dict[str, np.ndarray]:
        return self.sv.get_state("sv.")

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        cap = getattr(self, self.capacity_param, 16) if self.capacity_param else 16
        self.sv = store_from_state(state, "sv.", self.dim, capacity=int(cap) + 1)
