"""Budgeted Passive-Aggressive, "simple" variant BPA-S (Wang & Vucetic, AISTATS 2010).

Reference: Z. Wang and S. Vucetic, "Online passive-aggressive algorithms on a budget",
AISTATS 2010. Baseline of Zhang & Liao (ICML 2019, SkeGD) and
Lu et al. (ACM TIST 2018, SPA).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM, Param, positive
from kernelstream.learners.registry import register


@register
class BPAS(KernelLearner):
    """PA-I on a budget: when full, replace the SV whose removal costs the least.

    If ``ℓ_t = [1 − y_t f_t(x_t)]_+ > 0``: ``τ = min(C, ℓ_t/κ(x_t,x_t))``. Below the budget
    ``x_t`` is added with ``τ y_t``. At the budget, removing SV ``r`` and giving ``x_t`` the
    coefficient ``β_r = a_r κ(x_r,x_t)/κ(x_t,x_t) + τ y_t`` scores

        ``Q_r = ½(a_r² κ_rr + β_r² κ_tt − 2 a_r β_r κ_rt)``
        ``      + C [1 − y_t(f_t(x_t) − a_r κ_rt + β_r κ_tt)]_+``

    and ``r* = argmin Q_r`` is overwritten in place by ``x_t`` with ``β_{r*}``.

    Implementation: substituting ``β_r`` gives ``β_r κ_tt − a_r κ_rt = τ y_t κ_tt``, so the hinge
    term is the same for every ``r``, and ``Q_r = ½(a_r² κ_rr − (a_r κ_rt)²/κ_tt) + const``. The
    argmin is therefore taken over ``a_r² κ_rr − (a_r κ_rt)²/κ_tt`` (for Gaussians
    ``a_r²(1 − κ_rt²)``), computed from the kernel row of the prediction in a few vector
    operations. Ties go to the lowest slot. The tracked ``‖f‖`` is not maintained once the
    budget is reached (NaN). If ``κ(x_t, x_t) = 0`` (polynomial/linear kernel, ``x_t = 0``)
    the round is skipped: ``κ(x_t, ·)`` is the zero function.

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    budget
        Maximum number of support vectors ``B`` (default 500).
    c
        Aggressiveness ``C > 0`` (default 1, the FORKS/LSOKL default).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("bpa-s", budget=1, c=1.0)
    >>> m.learn_one([0.0, 0.0], 1)
    >>> m.learn_one([5.0, 0.0], -1)
    >>> m.n_support_vectors, round(float(m.sv.coef[0]), 4)
    (1, -1.0)
    """

    name = "bpa-s"
    params = (
        *KERNEL_PARAMS,
        Param("budget", 500, int, "maximum number of support vectors B", positive, "> 0"),
        Param("c", 1.0, float, "aggressiveness C (upper bound of the step τ)", positive, "> 0"),
        TIE_PARAM,
    )
    update_when = "margin"  # zero hinge loss leaves the model alone
    reference = "Wang & Vucetic, AISTATS 2010 (BPA-Simple)"

    budget: int
    c: float

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self._unit_diag = self.kernel == "gaussian"  # κ(x, x) = 1 for every x

    def _rule_config(self) -> tuple[str, list[float]] | None:
        # compiled for κ(x, x) = 1 only: numpy's vectorised κ_rr (a power) may round otherwise
        return ("bpa-s", [self.budget, self.c]) if self._unit_diag else None

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._compiled_rule():  # the same update compiled (_ck_budget.c), blocks in C
            self._rule_update(x, xx, y, score, aux)
            return
        loss = 1.0 - y * score
        if loss <= 0.0:
            return
        kern = self.kern
        kt = kern.diag(xx)
        if kt <= 0.0:
            return
        tau = min(self.c, loss / kt)
        sv = self.sv
        n = sv.n
        if n < self.budget:
            sv.append(x, xx, tau * y, id_=self.t, s=self.t, fz=score, kzz=kt)
            return
        a = sv.a[:n]
        u = a * aux  # a_r κ_rt
        u *= u
        if self._unit_diag:
            q = a * a
        else:
            u /= kt
            q = a * a
            q *= kern.diag(sv.sqn[:n])  # κ_rr, vectorised (polynomial: ‖x_r‖^{2p})
        q -= u
        r = int(q.argmin())
        beta = float(a[r]) * float(aux[r]) / kt + tau * y
        sv.replace(r, x, xx, beta, id_=self.t, s=self.t)
