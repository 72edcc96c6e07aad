"""Incremental Nyström (INys) feature map and the kernel-approximation error of
Zhang & Liao, ICML 2019 (§6.2, Table 2).

INys (Lu et al., JMLR 2016, as Zhang & Liao 2019, §6.2, describe it) fixes its landmarks to the
first ``B`` examples of the stream and approximates the kernel matrix by ``K̃ = C W_k^† Cᵀ`` with
``C = κ(X, landmarks)``, ``W = κ(landmarks, landmarks)`` and ``W_k`` its best rank-``k``
approximation. Its explicit feature map is ``φ(x) = Λ_k^{-1/2} V_kᵀ κ(landmarks, x)`` with
``W ≈ V_k Λ_k V_kᵀ`` (eigenvalues at or below the :func:`~kernelstream.learners.linalg.pinv`
tolerance are dropped, as NOGD does), so ``K̃ = Φ Φᵀ``. The rank used by Zhang & Liao is not stated;
(UNCERTAIN) ``k = 0.2 B``, the rank of its IRS, is the default.

This is a helper (not a registered learner): it only builds a feature map from a stream.
:class:`~kernelstream.learners.skegd.SkeGD` offers the same ``feature_map`` API, so both can be
compared with :func:`relative_kernel_error`.

>>> import numpy as np
>>> X = np.random.default_rng(0).normal(size=(200, 3))
>>> inys = IncrementalNystrom(budget=40, gamma=0.5).partial_fit(X)
>>> inys.ready, inys.feature_map(X).shape
(True, (200, 8))
>>> bool(relative_kernel_error(inys.feature_map(X), X, gamma=0.5) < 0.1)
True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernelstream.learners.kernels import make_kernel
from kernelstream.learners.linalg import PINV_ATOL, PINV_RTOL, top_eigh


class IncrementalNystrom:
    """INys: a rank-``k`` Nyström feature map on the first ``budget`` examples of a stream.

    Parameters
    ----------
    budget
        ``B``, number of landmarks (the first ``B`` examples seen).
    rank
        ``k``; default ``round(0.2 B)`` (≥ 1, ≤ ``B``).
    kernel, gamma, degree
        Kernel as in the learners (Gaussian ``exp(-gamma‖x−x'‖²)`` by default).
    """

    def __init__(self, budget: int, rank: int | None = None, kernel: str = "gaussian",
                 gamma: float = 0.5, degree: int = 2) -> None:
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        self.budget = int(budget)
        self.rank = max(1, round(0.2 * self.budget)) if rank is None else int(rank)
        if not 1 <= self.rank <= self.budget:
            raise ValueError(f"rank must be in [1, budget], got {self.rank}")
        self.kern = make_kernel(kernel, gamma, degree)
        self._rows: list[np.ndarray] = []
        self.landmarks: np.ndarray | None = None
        self._M: np.ndarray | None = None  # Λ_k^{-1/2} V_kᵀ (r × B)
        self.n_seen = 0

    @property
    def ready(self) -> bool:
        """The landmarks are fixed (``budget`` examples seen)."""
        return self._M is not None

    def partial_fit(self, X: Any) -> IncrementalNystrom:
        """Consume a block of the stream; the map is fixed once ``budget`` rows were seen (later
        rows only count towards ``n_seen``)."""
        A = np.atleast_2d(np.asarray(X, dtype=np.float64))
        self.n_seen += A.shape[0]
        if self.ready:
            return self
        need = self.budget - sum(len(r) for r in self._rows)
        self._rows.append(A[:need])
        if sum(len(r) for r in self._rows) == self.budget:
            L = np.vstack(self._rows)
            self._rows = []
            lam, V = top_eigh(self.kern.matrix(L), self.rank, exact=True)
            tol = max(PINV_ATOL, PINV_RTOL * float(lam[0])) if len(lam) else math.inf
            keep = lam > tol
            self._M = np.ascontiguousarray((V[:, keep] / np.sqrt(lam[keep])).T)
            self.landmarks = L
        return self

    def feature_map(self, X: Any) -> np.ndarray:
        """``φ(x)`` for each row of ``X`` (``n × r``, ``r ≤ rank``)."""
        if self._M is None or self.landmarks is None:
            raise ValueError(f"INys needs {self.budget} examples before it has a feature map "
                             f"(seen {self.n_seen})")
        A = np.atleast_2d(np.asarray(X, dtype=np.float64))
        return self.kern.matrix(A, self.landmarks) @ self._M.T


def relative_kernel_error(Phi: np.ndarray, X: np.ndarray, kernel: str = "gaussian",
                          gamma: float = 0.5, degree: int = 2, block: int = 2048) -> float:
    """``‖ΦΦᵀ − K‖_F² / ‖K‖_F²`` for the exact kernel matrix ``K`` of ``X`` (Zhang & Liao 2019,
    Table 2), computed in row blocks (memory ``O(block · n)``)."""
    kern = make_kernel(kernel, gamma, degree)
    X = np.asarray(X, dtype=np.float64)
    Phi = np.asarray(Phi, dtype=np.float64)
    num = den = 0.0
    for s in range(0, X.shape[0], block):
        K = kern.matrix(X[s : s + block], X)
        E = Phi[s : s + block] @ Phi.T - K
        num += float(np.einsum("ij,ij->", E, E))
        den += float(np.einsum("ij,ij->", K, K))
    return num / den
