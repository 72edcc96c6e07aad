"""Kernel Perceptron (Freund & Schapire, MLJ 1999).

Reference: Y. Freund and R. E. Schapire, "Large margin classification using the perceptron
algorithm", Machine Learning 37(3), 1999 (kernelised Rosenblatt perceptron). Baseline of
Lu et al. (ACM TIST 2018, SPA), Table 2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernelstream.learners._primal import R_PERCEPTRON, LinearPrimal
from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM
from kernelstream.learners.registry import register


@register
class Perceptron(LinearPrimal):
    """Kernel Perceptron: on a mistake (``y f(x) ≤ 0``) store ``x`` with coefficient ``y``.

    Unbounded: the number of support vectors equals the number of mistakes. With
    ``kernel="linear"`` it keeps one weight vector instead (``w += y x`` on a mistake; the
    primal form of :mod:`kernelstream.learners._primal`, automatic when the compiled kernels
    are built): the same results up to round-off, exact on integer data, at a cost that
    follows the example's non-zeros; ``n_support_vectors`` still counts the mistakes.

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    tie
        Label predicted for a zero score (``positive``: the first prediction is +1).

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("perceptron", gamma=0.5)
    >>> m.predict_one([0.0, 1.0])
    0.0
    >>> m.learn_one([0.0, 1.0], -1)
    >>> m.n_support_vectors
    1
    """

    name = "perceptron"
    params = (*KERNEL_PARAMS, TIE_PARAM)
    update_when = "mistake"  # a correct prediction leaves the model alone
    reference = "Freund & Schapire, Machine Learning 1999"

    def _primal_rule(self) -> tuple[int, list[float]]:
        return R_PERCEPTRON, []

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._primal:
            self._primal_update(x, y, score)
            return
        # y f ≤ 0 is the perceptron trigger; with the "negative" tie rule a zero score on a
        # negative example is not a mistake, but it still triggers (margin 0).
        if y * score <= 0.0:
            self.sv.append(x, xx, y, id_=self.t, s=self.t, fz=score, kzz=self.kern.diag(xx))
