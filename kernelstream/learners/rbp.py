"""Randomized Budget Perceptron (Cavallanti et al., MLJ 2007).

Reference: G. Cavallanti, N. Cesa-Bianchi and C. Gentile, "Tracking the best hyperplane with a
simple budget Perceptron", Machine Learning 69(2–3), 2007. Baseline of Zhang & Liao (ICML 2019,
SkeGD) and Lu et al. (ACM TIST 2018, SPA).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM, Param, positive
from kernelstream.learners.registry import register


@register
class RBP(KernelLearner):
    """Budget perceptron that evicts a uniformly random support vector when full.

    On a mistake (``y_t f_t(x_t) ≤ 0``): if ``|S| = B``, one of the ``B`` stored SVs is chosen
    uniformly at random and overwritten in place by ``x_t`` with coefficient ``y_t``; otherwise
    ``x_t`` is appended. Overwriting in place skips the tracked ``‖f‖`` (not used here), so
    ``sv.norm2`` is NaN once the budget has been reached.

    The evicted slot is ``⌊U·B⌋`` with ``U = rng.random()`` (one uniform draw per eviction,
    uniform up to 2⁻⁵³; cheaper than ``rng.integers``).

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    budget
        Maximum number of support vectors ``B`` (default 500, the budget of Liao & Li's runs).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("rbp", seed=1, budget=2)
    >>> for x, y in [([0.0], 1), ([3.0], -1), ([6.0], 1), ([9.0], -1)]:
    ...     m.learn_one(x, y)
    >>> m.n_support_vectors
    2
    """

    name = "rbp"
    params = (
        *KERNEL_PARAMS,
        Param("budget", 500, int, "maximum number of support vectors B", positive, "> 0"),
        TIE_PARAM,
    )
    randomized = True
    update_when = "mistake"  # a correct prediction leaves the model alone
    reference = "Cavallanti, Cesa-Bianchi & Gentile, Machine Learning 2007"

    budget: int

    def _rule_config(self) -> tuple[str, list[float]] | None:
        return "rbp", [self.budget]

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._compiled_rule():  # the same update compiled (_ck_budget.c), blocks in C
            self._rule_update(x, xx, y, score, aux)
            return
        if y * score <= 0.0:
            sv = self.sv
            n = sv.n
            if n >= self.budget:
                sv.replace(int(self.rng.random() * n), x, xx, y, id_=self.t, s=self.t)
            else:
                sv.append(x, xx, y, id_=self.t, s=self.t, fz=score, kzz=self.kern.diag(xx))
