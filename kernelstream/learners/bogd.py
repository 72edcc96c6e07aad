"""Bounded Online Gradient Descent, BOGD (Zhao et al., ICML 2012).

Reference: P. Zhao, J. Wang, P. Wu, R. Jin and S. C. H. Hoi, "Fast bounded online gradient
descent algorithms for scalable kernel-based online learning", ICML 2012. Baseline of Liao &
Li (ECML-PKDD 2021, "BOGD-σ"), Zhang & Liao (ICML 2019, SkeGD, Table 3) and Lu et al. (ACM
TIST 2018, SPA, Table 2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.base import (
    KERNEL_PARAMS,
    TIE_PARAM,
    Param,
    nonneg,
    positive,
)
from kernelstream.learners.params import ShrinkParams
from kernelstream.learners.registry import register


@register
class BOGD(ShrinkParams, KernelLearner):
    """Kernel OGD with the hinge loss on a budget of ``B`` support vectors.

    Every round ``a ← (1 − η λ) a``; on a margin error (``y_t f_t(x_t) < 1``, score taken
    before the shrink) ``x_t`` gets coefficient ``η y_t``. Below the budget it is appended.
    At the budget:

    * ``variant="sol"`` (default; the C++ budget toolbox behind Zhang & Liao (ICML 2019) and Lu et
      al. (ACM TIST 2018)): the **oldest** SV is replaced (ring of slots, no search), no rescaling,
      no clipping. Deterministic.
    * ``variant="p1"`` (``BOGD.R``, the code of Liao & Li, ECML-PKDD 2021): a uniformly random
      SV ``r`` is replaced, the coefficients are rescaled by ``B/(B−1)`` (unbiased removal), then
      all are scaled by ``min(1, η γ_B / max_j |a_j|)`` so that ``max_j |a_j| ≤ η γ_B``. Needs
      ``B ≥ 2``; the slot is ``⌊U·B⌋`` with ``U = rng.random()``.

    UNCERTAIN: which of the two implementations produced
    the BOGD rows of Zhang & Liao 2019 and Lu et al. 2018 is not certain; the toolbox one (``sol``)
    is the likely one and is the default. Liao & Li's tables use ``p1``.

    Once the budget is reached SVs are overwritten in place, so the tracked ``‖f‖`` is not
    maintained (``sv.norm2`` is NaN); BOGD never needs it.

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    budget
        Maximum number of support vectors ``B`` (default 500, as in Liao & Li's code).
    eta
        Step size ``η > 0`` (default 0.1; Liao & Li use ``5/√T``).
    lam
        Regularisation ``λ ≥ 0`` (default 0; Liao & Li use ``8/T²``, negligible for its
        ``T``); ``η λ < 1`` is required.
    variant
        ``sol`` or ``p1`` (default ``sol``).
    coef_bound
        ``γ_B > 0``, the ℓ∞ bound in units of ``η`` (``p1`` only; default 1, Liao & Li's grid
        ``{1, 2, 4, 8, 16}``).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("bogd", budget=2, eta=0.5)
    >>> for x, y in [([0.0], 1), ([3.0], -1), ([6.0], 1)]:
    ...     m.learn_one(x, y)
    >>> sorted(int(t) for t in m.sv.s[: m.n_support_vectors])  # the oldest (round 0) is gone
    [1, 2]
    """

    name = "bogd"
    params = (
        *KERNEL_PARAMS,
        Param("budget", 500, int, "maximum number of support vectors B", positive, "> 0"),
        Param("eta", 0.1, float, "step size η", positive, "> 0"),
        Param("lam", 0.0, float, "regularisation λ (coefficients shrink by 1 − ηλ per round)",
              nonneg, ">= 0"),
        Param("variant", "sol", str,
              "sol: oldest removal (C++ toolbox); p1: uniform removal + B/(B-1) + clipping",
              choices=("sol", "p1")),
        Param("coef_bound", 1.0, float, "γ_B: max |a_j| ≤ η γ_B after clipping (p1 only)",
              positive, "> 0"),
        TIE_PARAM,
    )
    randomized = False  # the default variant; instances of variant "p1" set it to True
    update_when = "margin"  # zero hinge loss: only the shrink (_idle_scale)
    reference = "Zhao, Wang, Wu, Jin & Hoi, ICML 2012"
    rule_ints = ("_head",)

    budget: int
    variant: str
    coef_bound: float

    def _configure(self) -> None:
        self.randomized = self.variant == "p1"

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        super().check_params(p)
        if p["variant"] == "p1" and p["budget"] < 2:
            raise ValueError(f"{cls.name}: variant 'p1' rescales by B/(B-1) and needs "
                             f"budget >= 2, got {p['budget']!r}")

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self._shrink = 1.0 - self.eta * self.lam
        self._idle_scale = self._shrink  # what _update does when y f ≥ 1 (compiled rounds)
        B = self.budget
        # p1 at the budget: the per-round shrink and the B/(B−1) rescale in one multiply.
        self._p1_factor = self._shrink * B / (B - 1) if B > 1 else self._shrink
        self._clip = self.eta * self.coef_bound
        self._head = 0  # ring slot of the oldest SV (variant sol)

    def _rule_config(self) -> tuple[str, list[float]] | None:
        if self.variant == "p1":
            return "bogd-p1", [self.budget, self.eta, self._shrink, self._p1_factor, self._clip]
        return "bogd", [self.budget, self.eta, self._shrink]

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._compiled_rule():  # the same update compiled (_ck_budget.c), blocks in C
            self._rule_update(x, xx, y, score, aux)
            return
        sv = self.sv
        n = sv.n
        shrink = self._shrink
        if y * score >= 1.0:
            if shrink != 1.0 and n:
                sv.scale(shrink)
            return
        coef = self.eta * y
        if n < self.budget:
            if shrink != 1.0 and n:
                sv.scale(shrink)
            sv.append(x, xx, coef, id_=self.t, s=self.t, fz=score * shrink,
                      kzz=self.kern.diag(xx))
        elif self.variant == "sol":
            if shrink != 1.0:
                sv.scale(shrink)
            r = self._head
            sv.replace(r, x, xx, coef, id_=self.t, s=self.t)
            self._head = (r + 1) % self.budget
        else:
            a = sv.a[:n]
            a *= self._p1_factor
            sv.replace(int(self.rng.random() * n), x, xx, coef, id_=self.t, s=self.t)
            m = float(np.abs(a).max())
            if m > self._clip:
                a *= self._clip / m

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        # Insertion rounds are unique and increasing, so the ring head is the oldest slot.
        n = self.sv.n
        self._head = int(np.argmin(self.sv.s[:n])) if n >= self.budget else 0
