"""Incremental randomized sketches of a growing kernel matrix (Zhang & Liao, ICML 2019, §3).

The kernel matrix ``K`` of an ordered row list ``R = (r_1, …, r_n)`` is seen through two sketch
matrices with one row per element of ``R``:

* ``S_p ∈ R^{n×s_p}`` — a sparse Johnson–Lindenstrauss transform (SJLT, block construction):
  the ``s_p`` columns are cut into ``d_b`` contiguous blocks of sizes ``⌈s_p/d_b⌉``/``⌊s_p/d_b⌋``
  (as :func:`numpy.array_split` does); row ``j`` has one nonzero per block, in a uniformly drawn
  column of the block, with a uniform sign ``±1/√d_b``. Rows are drawn when they are created.
* ``S_m ∈ R^{n×s_m}`` — column sampling: ``s_m`` distinct *landmark* rows of the initial rows,
  drawn uniformly without replacement; rows appended later have a zero sampling vector.

:class:`IncrementalSketch` keeps ``Φ_pp = S_pᵀ K S_p`` (``s_p × s_p``) and ``Φ_pm = S_pᵀ K S_m``
(``s_p × s_m``). Appending a row ``r`` with kernel column ``ψ = κ(r, R)``, ``ξ = κ(r, r)`` and
landmark row ``k_L = κ(r, landmarks)`` is a rank-1 modification (the new sampling row is zero):

    Φ_pm ← Φ_pm + s k_Lᵀ,    u = S_pᵀ ψ,    Φ_pp ← Φ_pp + s uᵀ + u sᵀ + ξ s sᵀ,

where ``s`` is the new SJLT row (``d_b`` nonzeros), so an update costs ``O(n d_b + s_p + s_m)``
besides ``ψ``. :meth:`IncrementalSketch.recompute` rebuilds both products from the stored rows
(tests check that it equals the incremental state). :meth:`IncrementalSketch.feature_matrix`
turns the sketches into the explicit feature map of the paper,
``Q = Φ_pm^† V Σ^{1/2}`` with ``Φ_pp ≈ V Σ Vᵀ`` (rank ``k``), so ``φ(x) = Qᵀ κ(landmarks, x)`` and
``κ(x, x') ≈ φ(x)ᵀφ(x')``.

All randomness comes from the caller's generator (the learner's ``self.rng``).
"""

from __future__ import annotations

import math

import numpy as np

from kernelstream.learners.linalg import pinv, top_eigh
from kernelstream.learners.state import check_ints, check_shape


def block_layout(sketch_size: int, nonzeros: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and widths of the ``nonzeros`` SJLT blocks covering ``sketch_size`` columns
    (sizes as :func:`numpy.array_split`: the first ``sketch_size % nonzeros`` blocks get one
    column more)."""
    if not 1 <= nonzeros <= sketch_size:
        raise ValueError(f"need 1 <= nonzeros <= sketch_size, got {nonzeros}, {sketch_size}")
    q, r = divmod(sketch_size, nonzeros)
    widths = np.array([q + (1 if b < r else 0) for b in range(nonzeros)], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(widths)[:-1])).astype(np.int64)
    return offsets, widths


def sjlt_dense(cols: np.ndarray, vals: np.ndarray, sketch_size: int) -> np.ndarray:
    """Dense ``n × sketch_size`` matrix of the SJLT rows ``cols``/``vals`` (``n × d_b``)."""
    n = cols.shape[0]
    S = np.zeros((n, sketch_size))
    if n:
        S[np.repeat(np.arange(n), cols.shape[1]), cols.ravel()] = vals.ravel()
    return S


class IncrementalSketch:
    """``S_pᵀKS_p`` and ``S_pᵀKS_m`` of a growing row list, kept by rank-1 modifications.

    The sketch stores only the SJLT rows (column indices and values, ``n × d_b``) and the
    landmark indices; the points of the rows and the kernel live with the caller, who passes
    kernel values in.

    Parameters
    ----------
    sketch_size
        ``s_p``, columns of the SJLT.
    n_landmarks
        ``s_m``, sampled columns (landmarks).
    nonzeros
        ``d_b``, SJLT blocks = nonzeros per row (``1 ≤ d_b ≤ s_p``).
    """

    def __init__(self, sketch_size: int, n_landmarks: int, nonzeros: int) -> None:
        self.s_p = int(sketch_size)
        self.s_m = int(n_landmarks)
        self.d_b = int(nonzeros)
        self._off, self._wid = block_layout(self.s_p, self.d_b)
        self._wid2 = 2 * self._wid  # one integer draw per block: column (v >> 1), sign (v & 1)
        self._val = 1.0 / math.sqrt(self.d_b)
        self.cols = np.zeros((16, self.d_b), dtype=np.int64)
        self.vals = np.zeros((16, self.d_b))
        self.n = 0  # stored SJLT rows
        self.landmarks = np.zeros(0, dtype=np.int64)  # indices into the row list
        self.pp = np.zeros((self.s_p, self.s_p))
        self.pm = np.zeros((self.s_p, self.s_m))

    # -- SJLT rows -----------------------------------------------------------------------------
    def draw_rows(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
        """``m`` fresh SJLT rows: column indices and values, each ``m × d_b``."""
        v = rng.integers(0, self._wid2, size=(m, self.d_b))
        cols = self._off + (v >> 1)
        vals = np.where((v & 1).astype(bool), self._val, -self._val)
        return cols, vals

    def _append_rows(self, cols: np.ndarray, vals: np.ndarray) -> None:
        m = cols.shape[0]
        need = self.n + m
        if need > self.cols.shape[0]:
            cap = max(need, 2 * self.cols.shape[0])
            for name in ("cols", "vals"):
                old = getattr(self, name)
                new = np.zeros((cap, self.d_b), dtype=old.dtype)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
        self.cols[self.n : need] = cols
        self.vals[self.n : need] = vals
        self.n = need

    def dense(self) -> np.ndarray:
        """``S_p`` as a dense ``n × s_p`` matrix (tests, initialisation)."""
        return sjlt_dense(self.cols[: self.n], self.vals[: self.n], self.s_p)

    # -- building and updating -----------------------------------------------------------------
    def initialize(self, K: np.ndarray, rng: np.random.Generator) -> None:
        """Start from the Gram matrix ``K`` (``n × n``) of the first ``n`` rows: draw their SJLT
        rows, then ``s_m`` distinct landmarks uniformly among them, and compute
        ``Φ_pp = S_pᵀ K S_p``, ``Φ_pm = S_pᵀ K[:, landmarks]``."""
        n = K.shape[0]
        if self.s_m > n:
            raise ValueError(f"cannot sample {self.s_m} landmarks from {n} rows")
        self.n = 0
        cols, vals = self.draw_rows(rng, n)
        self._append_rows(cols, vals)
        self.landmarks = np.asarray(rng.choice(n, self.s_m, replace=False), dtype=np.int64)
        self.recompute(K)

    def recompute(self, K: np.ndarray) -> None:
        """Rebuild ``Φ_pp`` and ``Φ_pm`` from the stored rows and the full Gram matrix ``K`` of
        the row list (``n × n``)."""
        if K.shape != (self.n, self.n):
            raise ValueError(f"K must be {self.n} x {self.n}, got {K.shape}")
        S = self.dense()
        pp = S.T @ (K @ S)
        self.pp = 0.5 * (pp + pp.T)  # symmetric up to round-off in the sums
        self.pm = S.T @ K[:, self.landmarks]

    def add_row(self, psi: np.ndarray, xi: float, k_land: np.ndarray,
                rng: np.random.Generator, store: bool = True) -> None:
        """Rank-1 modifications for a new row with kernel values ``psi`` against the first
        ``len(psi)`` stored rows (normally all ``n``), ``xi = κ(r, r)`` and ``k_land`` against the
        landmarks. ``store=False`` applies the update without keeping the new SJLT row (the
        [C-FORKS] simplification: ``psi`` then covers the initial rows only)."""
        (cols,), (vals,) = self.draw_rows(rng, 1)
        m = psi.shape[0]
        # u = S_pᵀ ψ over the existing rows: O(m d_b)
        u = np.bincount(self.cols[:m].ravel(), weights=(self.vals[:m] * psi[:, None]).ravel(),
                        minlength=self.s_p)
        self.pm[cols] += vals[:, None] * k_land[None, :]
        # the d_b columns of a row lie in distinct blocks, so fancy-index updates never collide
        self.pp[cols] += vals[:, None] * u[None, :]
        self.pp[:, cols] += u[:, None] * vals[None, :]
        self.pp[np.ix_(cols, cols)] += xi * np.multiply.outer(vals, vals)
        if store:
            self._append_rows(cols[None, :], vals[None, :])

    # -- feature map ---------------------------------------------------------------------------
    def feature_matrix(self, rank: int, exact: bool = True,
                       rng: np.random.Generator | None = None) -> np.ndarray:
        """``Q = Φ_pm^† V Σ^{1/2}`` (``s_m × rank``) with ``Φ_pp ≈ V Σ Vᵀ`` the ``rank`` largest
        eigenpairs (exact ``eigh``, or the randomized range finder of
        :func:`~kernelstream.learners.linalg.top_eigh` drawing from ``rng``); negative round-off
        eigenvalues are clipped to 0."""
        lam, V = top_eigh(self.pp, rank, exact=exact, rng=rng)
        np.maximum(lam, 0.0, out=lam)
        return pinv(self.pm) @ (V * np.sqrt(lam))

    # -- state ---------------------------------------------------------------------------------
    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}cols": self.cols[: self.n].copy(),
            f"{prefix}vals": self.vals[: self.n].copy(),
            f"{prefix}landmarks": self.landmarks.copy(),
            f"{prefix}pp": self.pp.copy(),
            f"{prefix}pm": self.pm.copy(),
        }

    def set_state(self, state: dict[str, np.ndarray], prefix: str) -> None:
        cols = np.asarray(state[f"{prefix}cols"], dtype=np.int64).reshape(-1, self.d_b)
        vals = np.asarray(state[f"{prefix}vals"], dtype=np.float64).reshape(-1, self.d_b)
        landmarks = np.array(state[f"{prefix}landmarks"], dtype=np.int64)
        pp = np.array(state[f"{prefix}pp"], dtype=np.float64)
        pm = np.array(state[f"{prefix}pm"], dtype=np.float64)
        # sizes and indices from the parameters: checked here, not by a round's raw error
        check_shape(f"{prefix}vals", vals, cols.shape)
        check_ints(f"{prefix}cols", cols, 0, self.s_p)
        check_shape(f"{prefix}landmarks", landmarks, (self.s_m,))
        check_ints(f"{prefix}landmarks", landmarks, 0, len(cols))
        check_shape(f"{prefix}pp", pp, (self.s_p, self.s_p))
        check_shape(f"{prefix}pm", pm, (self.s_p, self.s_m))
        self.n = 0
        self._append_rows(cols, vals)
        self.landmarks, self.pp, self.pm = landmarks, pp, pm
