"""Kernel Passive-Aggressive PA-I (Crammer et al., JMLR 2006).

Reference: K. Crammer, O. Dekel, J. Keshet, S. Shalev-Shwartz and Y. Singer, "Online
passive-aggressive algorithms", JMLR 7, 2006. Baseline of Lu et al. (ACM TIST 2018, SPA).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernelstream.learners._primal import R_PA1, LinearPrimal
from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM, Param, positive
from kernelstream.learners.registry import register


@register
class PAI(LinearPrimal):
    """PA-I: on a positive hinge loss ``ℓ_t`` store ``x_t`` with coefficient ``τ_t y_t``.

    ``ℓ_t = [1 − y_t f_t(x_t)]_+`` and ``τ_t = min(C, ℓ_t / κ(x_t, x_t))``.
    Unbounded: one support vector per margin error.
    Edge case: if ``κ(x_t, x_t) = 0`` (polynomial/linear kernel and ``x_t = 0``) the new term
    ``κ(x_t, ·)`` is the zero function, so nothing is stored.
    With ``kernel="linear"`` it keeps one weight vector instead (``w += τ_t y_t x_t``; the
    primal form of :mod:`kernelstream.learners._primal`, automatic when the compiled kernels
    are built): the same results up to round-off, at a cost that follows the example's
    non-zeros; ``n_support_vectors`` still counts the updates.

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    c
        Aggressiveness ``C > 0`` (default 1; Lu et al. use ``{0.25, 0.5, 1, 2}``).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("pa-i", c=0.5)
    >>> m.learn_one([0.0, 1.0], -1)
    >>> float(m.sv.coef[0])
    -0.5
    """

    name = "pa-i"
    params = (
        *KERNEL_PARAMS,
        Param("c", 1.0, float, "aggressiveness C (upper bound of the step τ)", positive, "> 0"),
        TIE_PARAM,
    )
    update_when = "margin"  # zero hinge loss leaves the model alone
    reference = "Crammer, Dekel, Keshet, Shalev-Shwartz & Singer, JMLR 2006 (PA-I)"

    c: float

    def _primal_rule(self) -> tuple[int, list[float]]:
        return R_PA1, [self.c]

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._primal:
            self._primal_update(x, y, score)
            return
        loss = 1.0 - y * score
        if loss > 0.0:
            kt = self.kern.diag(xx)
            if kt > 0.0:
                tau = min(self.c, loss / kt)
                self.sv.append(x, xx, tau * y, id_=self.t, s=self.t, fz=score, kzz=kt)
