"""Projectron and Projectron++ (Orabona, Keshet & Caputo, ICML 2008).

Reference: F. Orabona, J. Keshet and B. Caputo, "The Projectron: a bounded kernel-based
Perceptron", ICML 2008 (journal version: "Bounded kernel-based online learning", JMLR 10, 2009).
The budget variant is the one of the LIBOL/LSOKL toolboxes ([C-SOL] ``kernel_projectron``,
``kernel_projectronpp``) used as baselines by Zhang & Liao (ICML 2019, SkeGD) and
Lu et al. (ACM TIST 2018, SPA).

Both learners keep ``K_S^{-1}`` in a pre-allocated square buffer updated in place by the
bordered-inverse formula (:mod:`kernelstream.learners.linalg`), so an added support vector costs
O(|S|²) and a projection one matrix–vector product; ``d* = K_S^{-1} k`` is only computed on
rounds that may update (mistakes, and margin errors for ++). The projection and ``kᵀd*`` are
summed in the order of the compiled rule (:func:`~kernelstream.learners.linalg.project_rows`,
:func:`~kernelstream.learners.linalg.dot4`), so this numpy update and the compiled one
(``_ck_budget.c``) give the same bits. The buffer starts on a 64-byte boundary and its side is
a multiple of 8 (:func:`~kernelstream.learners.linalg.aligned_zeros`), so the compiled
projection's vector loads never straddle two cache lines (numpy's own allocations are 16-byte
aligned: a projection then costs ~25% more).

The compiled Projectron++ also skips, once the budget is full (``K_S^{-1}`` no longer changes),
the margin errors whose update test ``β ≥ 0`` certainly fails, from a bound of ``‖P k_t‖²`` by
the spectrum of ``K_S^{-1}`` (computed once) and the rows of the row's 16 largest entries:
O(16 |S|) instead of O(|S|²), with a margin that makes a skipped round one whose computed ``β``
is negative, so the results do not change (on a9a at B = 200, 99% of its margin errors do not
update, and nearly all of them are skipped). With an ill-conditioned ``K_S^{-1}`` (wide
kernels: a9a at γ = 1/16, SUSY_30k) the bound can rarely succeed; a round gives it up after one
O(|S|) pass, when even ``ρ(‖k‖² − 16 max|k_j|²)`` leaves no room.

Design decision (Projectron++): Orabona, Keshet & Caputo (JMLR 2009) write the update with
``‖P k_t‖² = d*ᵀ K_S d*`` and keep ``K_S``. Since
``K_S d* = k`` this equals ``kᵀ d* = κ(x,x) − Δ``, a by-product of ``Δ``; using it saves the
``K_S`` buffer (B² floats) and one O(B²) product per margin error (the dominant cost of ++ on
noisy streams), with the same update up to round-off.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM, Param, nonneg
from kernelstream.learners.linalg import (
    aligned_zeros,
    bordered_inverse_append,
    dot4,
    grow_square,
    is_aligned,
    project_rows,
)
from kernelstream.learners.registry import register

# Δ below this fraction of κ(x,x) is round-off of an in-span point (e.g. a duplicate SV): project
# instead of adding. Same absolute scale as the pinv tolerance (linalg.pinv); it also caps the
# entries of K_S^{-1} near 1e8·κ, which keeps the incremental inverse accurate.
DELTA_RTOL = 1e-8
_MIN_CAP = 16

_PARAMS = (
    *KERNEL_PARAMS,
    Param("budget", 100, int, "maximum number of support vectors B; 0 = unbounded "
          "(original Projectron, needs threshold > 0)", nonneg, ">= 0"),
    Param("threshold", 0.0, float, "projection threshold eta_P: on a mistake project when the "
          "squared projection error Delta <= eta_P^2 (0 = budget version: add while |S| < B)",
          nonneg, ">= 0"),
    TIE_PARAM,
)


def budget_u(budget: int) -> float:
    """``U = ¼ √((B+1)/ln(B+1))`` ([C-SOL]; "projection parameter U" of Zhang & Liao 2020)."""
    return 0.25 * math.sqrt((budget + 1) / math.log(budget + 1))


class _Projectron(KernelLearner):
    """Shared machinery of ``projectron`` and ``projectron++`` (see their docstrings)."""

    params = _PARAMS
    plusplus: ClassVar[bool] = False
    update_when = "mistake"  # a correct prediction leaves the model alone (++: margin)
    rule_matrix = "_Kinv"

    budget: int
    threshold: float

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        if p["budget"] == 0 and p["threshold"] == 0.0:
            raise ValueError(f"{cls.name}: budget=0 (unbounded) needs threshold > 0")

    # -- setup / buffers -------------------------------------------------------------------------
    def _cap_for(self, n: int) -> int:
        """Buffer side: ``B`` rounded up to a multiple of 8 (so every row of the aligned buffer
        starts on a 64-byte boundary) when budgeted, else the smallest ``16·2^j ≥ n`` (the same
        rule as the doubling in :meth:`_add`, so a restored learner gets the same layout)."""
        if self.budget:
            return -(-self.budget // 8) * 8
        cap = _MIN_CAP
        while cap < n:
            cap *= 2
        return cap

    @classmethod
    def model_bytes(cls, params: dict[str, Any], n_features: int = 0) -> tuple[int, str]:
        B = int(params["budget"])  # K⁻¹ of the stored points
        return 8 * B * B, f"budget={B:,}: a {B:,} x {B:,} inverse Gram matrix"

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self._thr2 = self.threshold * self.threshold
        # Margin-error penalty factor c in β = τ(2ℓ − τ‖Pk‖² − 2c√Δ): the paper's 1/η_P when a
        # threshold is given, else the toolbox constant U(B).
        self._cm = 1.0 / self.threshold if self.threshold > 0.0 else budget_u(self.budget)
        self._Kinv = aligned_zeros(self._cap_for(0))
        self._forget_bounds()

    def __setstate__(self, state: dict[str, Any]) -> None:
        # copy.deepcopy and pickle rebuild _Kinv with numpy's 16-byte alignment: realign it
        self.__dict__.update(state)
        Kinv = state.get("_Kinv")
        if Kinv is not None and not is_aligned(Kinv):
            self._Kinv = grow_square(Kinv, Kinv.shape[0], Kinv.shape[0])

    # Projectron++'s compiled rule keeps two numbers derived from K⁻¹ (_ck_budget.c,
    # margin_skips: a bound of its spectrum and its largest asymmetry) to skip margin errors
    # that cannot update; NaN = unknown, reset whenever K⁻¹ changes; not state (a restored
    # learner recomputes them).
    _kinv_rho: float
    _kinv_asym: float

    def _forget_bounds(self) -> None:
        self._kinv_rho = self._kinv_asym = math.nan

    # -- per-round update ------------------------------------------------------------------------
    def _rule_config(self) -> tuple[str, list[float]] | None:
        if not self.budget:  # unbounded: K⁻¹'s buffer grows, which numpy does
            return None
        return self.name, [self.budget, self._thr2, self._cm]

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._compiled_rule():  # the same update compiled (_ck_budget.c), blocks in C
            self._rule_update(x, xx, y, score, aux)
            return
        m = y * score
        if m <= 0.0:  # mistake (perceptron trigger y f ≤ 0, as the kernel Perceptron)
            self._mistake(x, xx, y, score, aux)
        elif m < 1.0 and self.plusplus:  # margin error 0 < ℓ = 1 − y f < 1
            self._margin(xx, y, score, aux, 1.0 - m)

    def _mistake(self, x: np.ndarray, xx: float, y: float, score: float, k: Any) -> None:
        sv = self.sv
        n = sv.n
        kxx = self.kern.diag(xx)
        if n == 0:
            if kxx > 0.0:  # κ(x,x) = 0 (zero vector, polynomial kernel) spans nothing
                self._add(x, xx, y, score, None, kxx, kxx)
            return
        d = project_rows(self._Kinv[:n, :n], k)  # d* = K_S^{-1} k: the projection's coefficients
        kd = dot4(k, d)  # = ‖P k_t‖² = kᵀK⁻¹k
        delta = kxx - kd  # squared projection error
        room = self.budget == 0 or n < self.budget
        if room and delta > self._thr2 and delta > DELTA_RTOL * kxx:
            self._add(x, xx, y, score, d, delta, kxx)
            return
        # project: f ← f + y P k_t. ⟨f, P k_t⟩ = aᵀK d* = aᵀk = f(x_t), ‖P k_t‖² = kᵀd*.
        a = sv.a[:n]
        a += y * d
        sv.norm2 += 2.0 * y * score + kd

    def _add(self, x: np.ndarray, xx: float, y: float, score: float, d: np.ndarray | None,
             delta: float, kxx: float) -> None:
        sv = self.sv
        n = sv.n
        if n == self._Kinv.shape[0]:  # only when unbounded: double the buffer
            self._Kinv = grow_square(self._Kinv, n, 2 * n)
        bordered_inverse_append(self._Kinv, n, d, delta)
        self._forget_bounds()
        sv.append(x, xx, y, id_=self.t, s=self.t, fz=score, kzz=kxx)

    def _margin(self, xx: float, y: float, score: float, k: Any, loss: float) -> None:
        # Only ++ gets here, with |S| ≥ 1 (an empty store scores 0, a mistake).
        sv = self.sv
        n = sv.n
        d = project_rows(self._Kinv[:n, :n], k)
        pk2 = dot4(k, d)  # ‖P k_t‖² = d*ᵀ K_S d* = kᵀ d* (K_S d* = k; see module docstring)
        delta = self.kern.diag(xx) - pk2
        if not pk2 > 0.0:  # ‖P k_t‖² = 0: no direction to move in
            return
        tau = loss / pk2
        if tau > 1.0:
            tau = 1.0
        root = math.sqrt(delta) if delta > 0.0 else 0.0  # Δ < 0 only by round-off
        if tau * (2.0 * loss - tau * pk2 - 2.0 * self._cm * root) >= 0.0:
            ty = tau * y
            a = sv.a[:n]
            a += ty * d
            sv.norm2 += 2.0 * ty * score + tau * tau * pk2

    # -- state -----------------------------------------------------------------------------------
    def _get_state(self) -> dict[str, np.ndarray]:
        st = super()._get_state()
        n = self.sv.n
        st["proj.Kinv"] = self._Kinv[:n, :n].copy()
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        n = self.sv.n
        self._Kinv = aligned_zeros(self._cap_for(n))
        self._Kinv[:n, :n] = state["proj.Kinv"]
        self._forget_bounds()


@register
class Projectron(_Projectron):
    """Projectron: a Perceptron that projects instead of adding a support vector.

    On a mistake (``y f(x) ≤ 0``) it computes ``d* = K_S^{-1} k`` (the projection of ``κ(x,·)``
    onto the span of the SVs) and the squared projection error ``Δ = κ(x,x) − kᵀd*``. It adds
    ``x`` with coefficient ``y`` (bordered update of ``K_S^{-1}``) when there is room and
    ``Δ > threshold²``; otherwise it projects: ``a ← a + y d*`` (no new SV).

    * Default (``threshold=0``, ``budget=B``): the budget Projectron of the LIBOL/LSOKL
      toolboxes — add while ``|S| < B``, then always project.
    * ``budget=0, threshold=η_P``: the original (unbounded) Projectron of Orabona et al.
    * Both > 0: a threshold Projectron that also never exceeds ``B`` SVs.

    Decision (design): one rule covers both published versions, no ``mode`` switch; ``budget=0``
    with ``threshold=0`` is rejected (it would be an unbounded Perceptron with an O(|S|²) inverse).
    Edge cases: ``Δ ≤ 1e-8·κ(x,x)`` counts as in span (round-off of a duplicate point),
    so a duplicate never becomes an SV; the first SV initialises ``K_S^{-1} = [1/κ(x,x)]``.

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    budget
        Maximum number of SVs ``B`` (default 100, Zhang & Liao's choice, ICML 2019, for
        T ≤ 10 000); 0 = unbounded.
    threshold
        ``η_P`` of the original Projectron (default 0: budget version).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("projectron", budget=2, gamma=0.5)
    >>> for x, y in [([0.0, 0.0], 1), ([3.0, 0.0], -1), ([0.0, 3.0], -1), ([0.0, 0.0], -1)]:
    ...     m.learn_one(x, y)
    >>> m.n_support_vectors
    2
    """

    name = "projectron"
    reference = "Orabona, Keshet & Caputo, ICML 2008 / JMLR 2009; budget version of [C-SOL]"


@register
class ProjectronPP(_Projectron):
    """Projectron++: the Projectron plus passive-aggressive projected updates on margin errors.

    Mistakes (``y f ≤ 0``) are handled as by :class:`Projectron`. On a margin error
    (``0 < ℓ = 1 − y f < 1``) it computes ``d*``, ``Δ``, ``‖P k‖² = d*ᵀ K_S d*``,
    ``τ = min(ℓ/‖P k‖², 1)`` and ``β = τ(2ℓ − τ‖P k‖² − 2c√Δ)``; if ``β ≥ 0`` it updates
    ``a ← a + τ y d*`` (never adds an SV on margin errors). ``c = U = ¼√((B+1)/ln(B+1))`` (toolbox
    constant) when ``threshold = 0``, else ``c = 1/η_P`` (paper). ``‖P k‖² = 0`` skips the update;
    ``Δ < 0`` by round-off is taken as 0. ``‖P k‖²`` is computed as ``kᵀd*`` (equal to
    ``d*ᵀ K_S d*``; see the module docstring), so no ``K_S`` is stored: memory O(B d + B²).

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    budget
        Maximum number of SVs ``B`` (default 100); 0 = unbounded (needs ``threshold > 0``).
    threshold
        ``η_P`` of the original Projectron++ (default 0: budget version with the constant ``U``).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("projectron++", budget=50, gamma=0.5)
    >>> m.learn_one([0.0, 1.0], 1)
    >>> m.learn_one([0.1, 1.0], 1)  # margin error: never a new SV
    >>> m.n_support_vectors
    1
    """

    name = "projectron++"
    plusplus = True
    rule_floats = ("_kinv_rho", "_kinv_asym")
    rule_caches = rule_floats  # derived from K⁻¹, not model state
    update_when = "margin"  # mistakes and margin errors y f < 1
    reference = "Orabona, Keshet & Caputo 2008/2009; budget version of [C-SOL]"
