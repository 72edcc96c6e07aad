"""OSKL — online sparse kernel learning by unbiased sampling of gradient steps
(Zhang et al., ICML 2013; reconstruction).

Reference: L. Zhang, J. Yi, R. Jin, M. Lin and X. He, "Online kernel learning with a near
optimal sparsity bound", ICML 2013. Baseline of Lu et al. (ACM TIST 2018, SPA), Tables 2 and 3.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM, Param, nonneg, positive
from kernelstream.learners.losses import get_loss
from kernelstream.learners.registry import register
from kernelstream.learners.spa import AVERAGED_PARAM, AveragedKernelLearner


@register
class OSKL(AveragedKernelLearner):
    """Kernel OGD with a smooth loss whose gradient steps are sampled, so most rounds add no SV.

    Round ``t`` (reconstruction, moderate confidence):
    ``u_t = |ℓ'(f_t(x_t), y_t)|``; if ``u_t > 0`` draw ``Z_t ~ B(min(1, u_t/G))``; if
    ``Z_t = 1`` store ``x_t`` with coefficient ``η G y_t`` — an unbiased estimate of the
    gradient step ``−η ℓ'(f_t(x_t), y_t) κ(x_t, ·)`` whenever ``u_t ≤ G``. Then, if
    ``radius > 0``, ``f`` is projected onto ``‖f‖ ≤ R``. ``E[#SV] = Σ_t min(1, u_t/G)``, so ``G``
    trades sparsity against step size (Lu et al. tune ``G`` so that OSKL's #SV matches SPA's).

    Loss: ``logistic`` (default; ``|ℓ'| ≤ 1``, so ``G ≥ 1`` keeps the estimate unbiased) or
    ``squared-hinge`` (``|ℓ'| = 2[1 − y f]_+`` is unbounded; rounds with ``u_t > G`` are sampled
    with probability 1 and take the step ``η G``). UNCERTAIN (reconstructed from the abstract and
    the standard description): the loss and the projection radius used by Lu et al. (ACM TIST 2018)
    are not known; no projection by default.

    **Averaged classifier** (``averaged=True``, as Lu et al. report OSKL): score
    ``f̄_t(x) = (1/t) Σ_{τ≤t} f_τ(x)``. Projection rescales old coefficients, so the closed form
    of SPA does not apply; instead every SV keeps its accumulated coefficient
    ``A_j = Σ_{τ<t} a_j^{(τ)}`` (one vector addition per round, as the [C-SOL] averaging does) and
    ``Σ_{τ≤t} f_τ(x) = (A + a)ᵀk``: O(|S| d) per round. The averaged classifier has the same
    support vectors as the last one. ``‖f‖`` is tracked exactly (the identities of
    :mod:`kernelstream.learners.store`).

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    eta
        Step size ``η > 0`` (default 0.1; Lu et al. tune ``{10^3, …, 10^-3}``).
    grad_bound
        Sampling constant ``G > 0`` (default 10): probability ``u_t/G``, step ``η G``.
    loss
        ``logistic`` or ``squared-hinge`` (default ``logistic``).
    radius
        Projection radius ``R`` of ``‖f‖ ≤ R``; default 0: no projection.
    averaged
        Predict with the averaged classifier (default True) or the last one.
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("oskl", seed=0, eta=1.0, grad_bound=0.5)
    >>> m.learn_one([0.0, 0.0], 1)  # u = |ℓ'(0)| = 1/2 = G: always sampled
    >>> m.n_support_vectors, float(m.sv.coef[0])
    (1, 0.5)
    """

    name = "oskl"
    params = (
        *KERNEL_PARAMS,
        Param("eta", 0.1, float, "step size η", positive, "> 0"),
        Param("grad_bound", 10.0, float, "sampling constant G (probability |ℓ'|/G, step ηG)",
              positive, "> 0"),
        Param("loss", "logistic", str, "smooth classification loss",
              choices=("logistic", "squared-hinge")),
        Param("radius", 0.0, float, "projection radius R of ‖f‖ ≤ R (0 = none)", nonneg,
              ">= 0"),
        AVERAGED_PARAM,
        TIE_PARAM,
    )
    randomized = True
    reference = "Zhang, Yi, Jin, Lin & He, ICML 2013 (reconstruction)"

    eta: float
    grad_bound: float
    loss: str
    radius: float
    averaged: bool

    def _configure(self) -> None:
        self._dloss = get_loss(self.loss).deriv

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self._acc = np.zeros(len(self.sv.a))  # A_j = Σ_{τ<t} a_j^{(τ)}, parallel to the store

    def _average(self, f: float, k: np.ndarray, n: int) -> float:
        return (float(self._acc[:n] @ k) + f) / (self.t + 1)

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        sv = self.sv
        n = sv.n
        if self.averaged and n:
            self._acc[:n] += sv.a[:n]  # f_t joins the running sum
        f = aux
        u = abs(self._dloss(f, y))
        if u <= 0.0:
            return
        G = self.grad_bound
        if self.rng.random() >= u / G:  # u/G ≥ 1 always passes
            return
        j = sv.append(x, xx, self.eta * G * y, id_=self.t, s=self.t, fz=f,
                      kzz=self.kern.diag(xx))
        self._acc = self._per_sv(self._acc, j)
        self._acc[j] = 0.0
        if self.radius > 0.0:
            sv.project(self.radius)

    def _get_state(self) -> dict[str, np.ndarray]:
        st = super()._get_state()
        st["oskl.acc"] = self._acc[: self.sv.n].copy()
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        self._acc = np.zeros(len(self.sv.a))
        acc = state["oskl.acc"]
        self._acc[: len(acc)] = acc
