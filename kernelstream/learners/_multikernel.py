"""Shared block of the multiple-kernel learners of Lu et al., ACM TIST 2018.

* :data:`POOL` — the ``m = 16`` kernels of Lu et al. (§6.2.2): three homogeneous polynomial kernels
  ``(xᵀx')^p``, ``p = 1, 2, 3`` (indices 0–2), and thirteen Gaussian kernels
  ``exp(−‖x − x'‖²/(2σ²))``, ``σ = 2^-6, …, 2^6`` (indices 3–15).
* :class:`MultiStore` — the kernel expansions ``f^i = Σ_j a_ij κ_i(x_j, ·)`` of all ``m``
  kernels over one shared set of stored points. A point that several kernels store is kept
  once; each (point, kernel) pair is an *entry* with its coefficient. All ``m`` scores
  ``f^i(x)`` come from one matrix–vector product over the distinct points plus a gather, an
  ``exp`` and a ``bincount`` over the entries — a fixed number of numpy calls per round
  whatever ``m``, and work ``O(n_points · d + n_entries)``. For the OMKC-U/DD family, whose
  components store mostly the same mistakes, this is several times cheaper than one store per
  kernel (Lu et al., Table 5: 234k SVs over 16 kernels on a9a, at most T = 48,842 points).
  Append-only: the unbounded learners never remove an SV nor change a coefficient.

  Compiled (``kernelstream.learners.compiled.mk``, ``_ck_multi.multi_scores``): the points are
  kept as the columns of ``XT`` (``d × capacity``), so the inner products over the example's
  non-zeros read a few contiguous columns; every entry's term is as in the numpy code and the
  sums run in entry order as ``bincount``'s do, and entries whose ``exp`` underflows are left
  out as there. Round-off-level differences from the numpy code: the inner products are summed
  in index order (BLAS's gemv in blocks), the exponential is ``_ck_multi``'s vectorised one
  (fdlibm's algorithm, within 1 ulp of libm, like numpy's SIMD exp) and a cubic kernel value is
  ``(v·v)·v`` (``pow`` rounds once). The votes use only the signs of the scores: on german and
  svmguide3 (3 permutations) OMKC's mistake rates were unchanged, BOMKC(SPA)'s sampled
  trajectory moved on one of six runs (22.90 → 23.36 %).
* :class:`StoreCombination` — :class:`Combination` whose ``m`` expansions live in one
  :class:`MultiStore` (the unbounded OMKC family and BOMKC(SPA)).
* :class:`Combination` — a base learner for the Hedge-weighted vote
  ``ŷ = sign(Σ_i θ_i sign(f^i(x)))`` with ``θ_i ∝ γ^{M_i}`` (``M_i`` = discount events of
  kernel ``i``, ``γ`` = ``discount``). ``θ`` is recomputed from the integer counts in the
  stable form ``γ^{M_i − min M} / Σ_j γ^{M_j − min M}`` (Hedge), which equals the papers'
  multiply-and-renormalise recursion and never underflows to an all-zero vector.

  Inner ``sign(0) = 0`` (a kernel with an exactly zero score abstains); only the vote itself
  follows the tie rule. DEVIATION from applying the global tie rule to each kernel's
  zero score, for two reasons: the first score of every learner must be 0 (a conformance
  rule), and with the strict mistake indicator ``M_i = 1[y f^i < 0]`` of Lu et al.'s Algorithm 2 a
  kernel whose score underflows to exactly 0 (``σ = 2^-6``: ``exp(−2048‖x − x'‖²) = 0`` for any two
  distinct points of a binary data set) would never be discounted and would vote for the tie
  label forever with the largest weight. The predicted label differs only when some, but not
  all, kernel scores are exactly 0.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import Learner, Param, unit_open
from kernelstream.learners.kernels import EXP_ZERO_BELOW

POLY_DEGREES: tuple[int, ...] = (1, 2, 3)
SIGMA_EXPONENTS: tuple[int, ...] = tuple(range(-6, 7))
SIGMAS = np.array([2.0**e for e in SIGMA_EXPONENTS])
GAMMAS = 1.0 / (2.0 * SIGMAS * SIGMAS)
N_POLY = len(POLY_DEGREES)
M_KERNELS = N_POLY + len(SIGMAS)

# per pool kernel: its degree (polynomial entries) and its −γ (Gaussian entries)
_POLY_DEG = np.array([float(p) for p in POLY_DEGREES] + [0.0] * len(SIGMAS))
_NEG_GAMMA = np.concatenate([np.zeros(N_POLY), -GAMMAS])

#: The pool as ``(kernel, params)`` pairs usable with any single-kernel learner, e.g.
#: ``make("perceptron", **POOL[5][1] | {"kernel": POOL[5][0]})``.
POOL: tuple[tuple[str, dict[str, Any]], ...] = (
    *(("polynomial", {"degree": p}) for p in POLY_DEGREES),
    *(("gaussian", {"gamma": float(g)}) for g in GAMMAS),
)


def pool_kernel_params(i: int) -> dict[str, Any]:
    """Keyword parameters selecting pool kernel ``i`` in a single-kernel learner."""
    kind, p = POOL[i]
    return {"kernel": kind, **p}


def pool_labels() -> list[str]:
    """Human-readable names of the pool kernels (``poly1``…, ``sigma=2^-6``…)."""
    return [f"poly{p}" for p in POLY_DEGREES] + [f"sigma=2^{e}" for e in SIGMA_EXPONENTS]


def pool_diag(xx: float) -> np.ndarray:
    """``κ_i(x, x)`` of every pool kernel given ``‖x‖²``: ``‖x‖^{2p}`` and 1."""
    out = np.ones(M_KERNELS)
    out[:N_POLY] = [xx**p for p in POLY_DEGREES]
    return out


def pool_rows(X: np.ndarray, x: np.ndarray) -> np.ndarray:
    """All ``m`` kernel rows ``κ_i(X_j, x)`` as an ``(m, n)`` array (reference/testing)."""
    dots = X @ x
    d2 = np.maximum((X * X).sum(1) + x @ x - 2.0 * dots, 0.0)
    out = np.empty((M_KERNELS, X.shape[0]))
    for i, p in enumerate(POLY_DEGREES):
        out[i] = dots**p
    out[N_POLY:] = np.exp(-GAMMAS[:, None] * d2[None, :])
    return out


class MultiStore:
    """``m`` kernel expansions over one shared, append-only set of points (see module doc)."""

    def __init__(self, dim: int, capacity: int = 64) -> None:
        self.dim = int(dim)
        cap = max(int(capacity), 1)
        # the points: rows of _X (numpy), or columns of XT (compiled: the dots of the example's
        # non-zeros then read a few contiguous columns instead of a cache line of every row)
        self.XT: np.ndarray | None = None
        self._X: np.ndarray | None = None
        if compiled.mk is not None:
            self.XT = np.zeros((self.dim, cap))
        else:
            self._X = np.zeros((cap, self.dim))
        self.sqn = np.zeros(cap)
        self.ids = np.zeros(cap, dtype=np.int64)  # stream round of each point
        self.n = 0  # distinct points
        # Gaussian entries: point index, kernel index, coefficient, −γ of the kernel.
        self.g_pt = np.zeros(cap, dtype=np.int64)
        self.g_k = np.zeros(cap, dtype=np.int64)
        self.g_a = np.zeros(cap)
        self.g_ng = np.zeros(cap)
        self.ng = 0
        # Polynomial entries: point index, kernel index, coefficient, degree (float for pow).
        self.p_pt = np.zeros(cap, dtype=np.int64)
        self.p_k = np.zeros(cap, dtype=np.int64)
        self.p_a = np.zeros(cap)
        self.p_deg = np.zeros(cap)
        self.np_ = 0
        self.counts = np.zeros(M_KERNELS, dtype=np.int64)  # SVs per kernel
        if compiled.mk is not None:  # scratch of the compiled scores
            self._dots = np.empty(cap)
            self._ebuf = np.empty(2 * cap)
            self._work = np.empty(2 * self.dim, dtype=np.int64)

    @property
    def X(self) -> np.ndarray:  # noqa: N802 (the attribute it replaces)
        """The stored points as rows (``capacity × d``; a view of ``XT`` when compiled)."""
        # _X exists exactly when XT does not
        return cast(np.ndarray, self._X) if self.XT is None else self.XT.T

    @property
    def n_entries(self) -> int:
        return self.ng + self.np_

    def scores(self, x: np.ndarray, xx: float) -> np.ndarray:
        """``f^i(x)`` for every kernel ``i`` (shape ``(m,)``)."""
        n = self.n
        if n == 0:
            return np.zeros(M_KERNELS)
        mk = compiled.mk
        if mk is not None:
            if not x.flags.c_contiguous:  # e.g. predict_one on a row of a Fortran matrix
                x = np.ascontiguousarray(x)
            out = np.empty(M_KERNELS)
            if len(self._dots) < n:
                self._dots = np.empty(len(self.sqn))
            if len(self._ebuf) < 2 * self.ng:
                self._ebuf = np.empty(2 * len(self.g_a))
            mk.multi_scores(self.XT, self.sqn, n, x, xx, self.g_pt, self.g_k, self.g_a,
                                  self.g_ng, self.ng, self.p_pt, self.p_k, self.p_a,
                                  self.p_deg, self.np_, out, self._dots, self._work, self._ebuf)
            return out
        dots = self.X[:n].dot(x)  # = @, less call overhead
        ng, npo = self.ng, self.np_
        if ng:
            # same arithmetic order as kernels.Gaussian.row
            d2 = dots * -2.0
            d2 += self.sqn[:n]
            d2 += xx
            np.maximum(d2, 0.0, out=d2)
            v = d2[self.g_pt[:ng]]
            v *= self.g_ng[:ng]
            out = self._gaussian_sums(v)
        else:
            out = np.zeros(M_KERNELS)
        if npo:
            v = dots[self.p_pt[:npo]]
            np.power(v, self.p_deg[:npo], out=v)
            v *= self.p_a[:npo]
            out += np.bincount(self.p_k[:npo], weights=v, minlength=M_KERNELS)
        return out

    def _gaussian_sums(self, v: np.ndarray) -> np.ndarray:
        """``Σ_e a_e exp(v_e)`` per kernel over the Gaussian entries (``v`` = their
        ``−γ ‖x_j − x‖²``, overwritten): ``np.bincount(g_k, a · exp(v))`` bit for bit, without
        the ``exp`` of most entries where it is exactly 0 (``v <`` :data:`EXP_ZERO_BELOW`; the
        narrow widths on almost every point), on which numpy's exp is ~7x slower.

        Such an entry contributes ``a · 0 = ±0``, and adding ``±0`` to bincount's running sum
        (started at ``+0``, entries in order) changes nothing, so these entries may be zeroed
        or left out as long as the others keep their order. By their share (the cheapest way
        at each, measured): up to 1/10, plain exp; up to 3/8, exp of 0 in their place, then
        zeroed; more, only the other entries are gathered, exponentiated and summed."""
        ng = self.ng
        under = v < EXP_ZERO_BELOW
        nu = np.count_nonzero(under)
        if 8 * nu <= 3 * ng:
            iu = np.flatnonzero(under) if 10 * nu > ng else None
            if iu is not None:
                v[iu] = 0.0
            np.exp(v, out=v)
            if iu is not None:
                v[iu] = 0.0
            v *= self.g_a[:ng]
            return np.bincount(self.g_k[:ng], weights=v, minlength=M_KERNELS)
        keep = np.flatnonzero(np.logical_not(under, out=under))
        if len(keep) == 0:  # every entry underflows (bincount of nothing would be int64)
            return np.zeros(M_KERNELS)
        w = v[keep]
        np.exp(w, out=w)
        w *= self.g_a[keep]
        return np.bincount(self.g_k[keep], weights=w, minlength=M_KERNELS)

    def add(self, x: np.ndarray, xx: float, kernels: np.ndarray, coefs: np.ndarray,
            id_: int = -1) -> None:
        """Store ``x`` once and give kernel ``kernels[r]`` the coefficient ``coefs[r]`` on it.
        ``kernels`` must be increasing (as ``np.flatnonzero`` returns them)."""
        if len(kernels) == 0:
            return
        if self.n == len(self.sqn):
            self._grow_points()
        j = self.n
        self.X[j] = x
        self.sqn[j] = xx
        self.ids[j] = id_
        self.n = j + 1
        self.counts[kernels] += 1
        cut = int(kernels.searchsorted(N_POLY))
        if cut:
            self._add_entries(False, j, kernels[:cut], coefs[:cut], _POLY_DEG[kernels[:cut]])
        if cut < len(kernels):
            self._add_entries(True, j, kernels[cut:], coefs[cut:], _NEG_GAMMA[kernels[cut:]])

    def _add_entries(self, gauss: bool, j: int, ks: np.ndarray, cs: np.ndarray,
                     extra: np.ndarray) -> None:
        n0 = self.ng if gauss else self.np_
        n1 = n0 + len(ks)
        if gauss:
            if n1 > len(self.g_pt):
                self._grow_entries(self._G_ENTRY, n0, n1)
            pt, k, a, e = self.g_pt, self.g_k, self.g_a, self.g_ng
            self.ng = n1
        else:
            if n1 > len(self.p_pt):
                self._grow_entries(self._P_ENTRY, n0, n1)
            pt, k, a, e = self.p_pt, self.p_k, self.p_a, self.p_deg
            self.np_ = n1
        pt[n0:n1] = j
        k[n0:n1] = ks
        a[n0:n1] = cs
        e[n0:n1] = extra

    def _grow_entries(self, names: tuple[str, ...], n0: int, n1: int) -> None:
        cap = max(2 * len(getattr(self, names[0])), n1)
        for nm in names:
            old = getattr(self, nm)
            new = np.zeros(cap, dtype=old.dtype)
            new[:n0] = old[:n0]
            setattr(self, nm, new)

    def _grow_points(self) -> None:
        cap = 2 * len(self.sqn)
        if self.XT is not None:
            XT = np.zeros((self.dim, cap))
            XT[:, : self.n] = self.XT[:, : self.n]
            self.XT = XT
        for nm in ("_X", "sqn", "ids") if self._X is not None else ("sqn", "ids"):
            old = getattr(self, nm)
            new = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, nm, new)

    def coefficients(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(points, coefficients)`` of kernel ``i``'s expansion (copies; for inspection)."""
        if i < N_POLY:
            sel = self.p_k[: self.np_] == i
            return self.X[self.p_pt[: self.np_][sel]].copy(), self.p_a[: self.np_][sel].copy()
        sel = self.g_k[: self.ng] == i
        return self.X[self.g_pt[: self.ng][sel]].copy(), self.g_a[: self.ng][sel].copy()

    # -- state -----------------------------------------------------------------------------
    _G_ENTRY = ("g_pt", "g_k", "g_a", "g_ng")
    _P_ENTRY = ("p_pt", "p_k", "p_a", "p_deg")
    _ENTRY = _G_ENTRY + _P_ENTRY

    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        st = {f"{prefix}X": self.X[: self.n].copy(), f"{prefix}sqn": self.sqn[: self.n].copy(),
              f"{prefix}ids": self.ids[: self.n].copy(), f"{prefix}counts": self.counts.copy()}
        for nm in self._ENTRY:
            used = self.ng if nm[0] == "g" else self.np_
            st[f"{prefix}{nm}"] = getattr(self, nm)[:used].copy()
        return st

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], prefix: str, dim: int) -> MultiStore:
        X = state[f"{prefix}X"]
        ng, npo = len(state[f"{prefix}g_pt"]), len(state[f"{prefix}p_pt"])
        st = cls(dim, capacity=max(len(X), ng, npo, 1))
        st.n = len(X)
        st.X[: st.n] = X
        st.sqn[: st.n] = state[f"{prefix}sqn"]
        st.ids[: st.n] = state[f"{prefix}ids"]
        st.counts[:] = state[f"{prefix}counts"]
        st.ng, st.np_ = ng, npo
        for nm in cls._ENTRY:
            v = state[f"{prefix}{nm}"]
            getattr(st, nm)[: len(v)] = v
        return st


# -- Hedge-weighted vote over the pool -----------------------------------------------------------
DISCOUNT_PARAM = Param("discount", 0.99, float, "Hedge discount γ ∈ (0, 1): θ_i ← θ_i γ^{M_i}",
                       unit_open, "in (0, 1)")
DELTA_PARAM = Param("delta", 0.001, float,
                    "smoothing δ ∈ (0, 1) of the update probability (1−δ)θ_i/max θ + δ",
                    unit_open, "in (0, 1)")


class Combination(Learner):
    """Base of the pool learners: per-kernel scores ``s``, weights ``θ`` and the vote.

    Subclasses provide ``_kernel_scores(x, xx)`` and call :meth:`_discount` with the kernels
    whose weight is discounted this round. ``_score`` returns the vote ``Σ_i θ_i sign(s_i)``
    (``sign(0) = 0``; a zero vote follows ``tie``) with ``s`` as the auxiliary value.
    """

    uniform_weights: ClassVar[bool] = False  # OMKC-U: θ fixed at 1/m
    combines_kernels: ClassVar[bool] = True

    discount: float
    tie: str

    def _setup(self, d: int) -> None:
        self.m = M_KERNELS
        self._counts = np.zeros(self.m, dtype=np.int64)  # discount events M_i
        self._theta = np.full(self.m, 1.0 / self.m)

    def _kernel_scores(self, x: np.ndarray, xx: float) -> np.ndarray:
        raise NotImplementedError

    def _vote(self, s: np.ndarray) -> float:
        """``Σ_i θ_i sign(s_i)`` with ``sign(0) = 0``: a kernel whose score is exactly 0
        abstains, and a zero vote is labelled by the tie rule (``predict_label``)."""
        return float(self._theta.dot(np.sign(s)))

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        s = self._kernel_scores(x, xx)
        return self._vote(s), s

    def _discount(self, mask: np.ndarray) -> None:
        """``θ_i ← θ_i γ`` for the kernels in ``mask`` (boolean or index array), renormalised."""
        if self.uniform_weights:
            return
        self._counts[mask] += 1
        self._refresh_theta()

    def _refresh_theta(self) -> None:
        c = self._counts
        w = np.power(self.discount, (c - c.min()).astype(np.float64))
        self._theta = w / w.sum()

    def _sample_weight(self, theta: np.ndarray, delta: float) -> np.ndarray:
        """``p_i = (1 − δ) θ_i / max_j θ_j + δ`` (update probability factor, Lu et al. 2018,
        Alg. 2/4)."""
        return (1.0 - delta) * (theta / theta.max()) + delta

    @property
    def kernel_distribution(self) -> np.ndarray | None:
        return None if self.dim is None else self._theta.copy()

    def _get_state(self) -> dict[str, np.ndarray]:
        return {"mk.counts": self._counts.copy()}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self._counts = state["mk.counts"].astype(np.int64).copy()
        if not self.uniform_weights:
            self._refresh_theta()


class StoreCombination(Combination):
    """:class:`Combination` over one :class:`MultiStore` (``self.store``): the scores, the SV
    count (entries: a point stored by several kernels counts once per kernel) and the state.
    Subclasses write ``_update`` (``self.store.add`` and :meth:`_discount`)."""

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self.store = MultiStore(d)

    def _kernel_scores(self, x: np.ndarray, xx: float) -> np.ndarray:
        return self.store.scores(x, xx)

    @property
    def n_support_vectors(self) -> int:
        return self.store.n_entries if self.dim is not None else 0

    def _get_state(self) -> dict[str, np.ndarray]:
        return {**super()._get_state(), **self.store.get_state("store.")}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        assert self.dim is not None  # for mypy: set_state fixes it first
        self.store = MultiStore.from_state(state, "store.", self.dim)
