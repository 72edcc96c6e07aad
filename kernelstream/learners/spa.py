"""Sparse Passive-Aggressive learning, SPA (Lu et al., ACM TIST 2018, Algorithm 1).

Also shared with the other learners of that paper: :class:`AveragedKernelLearner` and
:data:`AVERAGED_PARAM` (the averaged classifier's scoring; SPA and OSKL), and the SPA
parameters (:func:`spa_params`, :class:`SPAParams`; SPA and BOMKC(SPA)).

Reference: J. Lu, D. Sahoo, P. Zhao and S. C. H. Hoi, "Sparse Passive-Aggressive learning for
bounded online kernel methods", ACM TIST 9(4), 2018 (Algorithm 1).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM, Param, positive
from kernelstream.learners.registry import register


def spa_params(beta: float, beta_doc: str) -> tuple[Param, ...]:
    """SPA's ``eta``, ``alpha`` and ``beta`` (default ``beta``; the learners differ there)."""
    return (
        Param("eta", 0.1, float, "aggressiveness η (τ ≤ η/ρ)", positive, "> 0"),
        Param("alpha", 1.0, float, "loss cap α of the sampling probability", positive, "> 0"),
        Param("beta", beta, float, beta_doc, positive, "> 0"),
    )


class SPAParams:
    """Learner mixin of SPA and BOMKC(SPA): the attributes of :func:`spa_params` and
    ``reference_quirks``, and the check that ``ρ = min(α, ℓ)/β`` is a probability."""

    name: ClassVar[str]
    eta: float
    alpha: float
    beta: float
    reference_quirks: bool

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        if p["beta"] < p["alpha"]:
            raise ValueError(f"{cls.name}: beta must be >= alpha (ρ = min(α, ℓ)/β ≤ 1), got "
                             f"alpha={p['alpha']!r}, beta={p['beta']!r}")


AVERAGED_PARAM = Param("averaged", True, bool,
                       "predict with the averaged classifier (1/t) Σ f_τ")


class AveragedKernelLearner(KernelLearner):
    """A single-kernel learner that can predict with the averaged classifier
    ``f̄_t = (1/t) Σ_{τ≤t} f_τ`` (Lu et al., ACM TIST 2018, §6.1.3; parameter ``averaged``).

    ``_score`` returns ``(score, f_t(x))``: the score is ``f̄_t(x)`` (from ``_average``, given
    ``f_t(x)`` and the one kernel row ``k``) or ``f_t(x)``, and the auxiliary value is always
    ``f_t(x)``, which the update uses. :meth:`_per_sv` keeps a per-SV array the length of the
    store as it grows.
    """

    averaged: bool

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        sv = self.sv
        n = sv.n
        if n == 0:
            return 0.0, 0.0
        k = sv.row(self.kern, x, xx)
        f = float(sv.a[:n] @ k)
        if not self.averaged:
            return f, f
        return self._average(f, k, n), f

    def _average(self, f: float, k: np.ndarray, n: int) -> float:
        """``f̄_t(x)`` from ``f = f_t(x)`` and the kernel row ``k`` of the ``n`` SVs."""
        raise NotImplementedError

    def _per_sv(self, arr: np.ndarray, j: int) -> np.ndarray:
        """``arr`` (parallel to the store) grown to the store's capacity, keeping ``arr[:j]``."""
        cap = len(self.sv.a)
        if len(arr) < cap:
            grown = np.zeros(cap)
            grown[:j] = arr[:j]
            return grown
        return arr


@register
class SPA(SPAParams, AveragedKernelLearner):
    """PA-I-like hinge-loss updates on a random subset of rounds sampled by the loss.

    Round ``t``: ``ℓ_t = [1 − y_t f_t(x_t)]_+`` (loss of the *current* hypothesis ``f_t``, never
    of the average), ``ρ_t = min(α, ℓ_t)/β``. If ``ρ_t > 0`` one Bernoulli ``Z_t ~ B(ρ_t)`` is
    drawn; if ``Z_t = 1``, ``x_t`` is stored with coefficient ``τ_t y_t``,
    ``τ_t = min(η/ρ_t, ℓ_t/κ(x_t, x_t))`` (the closed form of
    ``argmin_f ½‖f − f_t‖² + (Z_t/ρ_t) η ℓ_t(f)``). Existing coefficients never change, so the
    expected number of support vectors is at most ``αT/β``. Cost O(|S| d) per round.

    **Averaged classifier** (``averaged=True``, the paper's tables): the score is
    ``f̄_t(x) = (1/t) Σ_{τ≤t} f_τ(x) = Σ_j a_j (t − s_j)/t · κ(x_j, x)`` with ``s_j`` the round
    that stored SV ``j`` (``f_1 = 0``). It is computed as ``(T·aᵀk − (a∘s)ᵀk)/(T + 1)`` with
    ``T`` the rounds learned so far, i.e. two dot products with the one kernel row ``k`` that the
    update needs anyway. **The averaged classifier has exactly the support vectors of the last
    classifier ``f_t``** (same store, only the weights differ), so ``n_support_vectors`` is the
    #SV of both. The update always uses ``f_t(x_t)``.

    Edge cases: ``κ(x_t, x_t) = 0`` (polynomial/linear kernel at ``x_t = 0``) skips the round
    without a draw; ``β < α`` is rejected (``ρ`` could exceed 1).

    QUIRK (``reference_quirks=True``): the C++ toolbox ([C-SOL]) uses ``τ = min(η/ρ, ℓ)``, i.e.
    assumes ``κ(x, x) = 1``; identical for the Gaussian kernel, different for polynomial ones.

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; the paper uses ``gamma = 0.4``;
        ``sigma`` is accepted for gamma).
    eta
        Aggressiveness ``η > 0`` (default 0.1, the paper's multi-kernel value; its
        single-kernel table tunes ``η ∈ {10^3, …, 10^-3}``).
    alpha
        Loss cap ``α > 0`` of the sampling probability (default 1, as in the paper).
    beta
        Sparsity control ``β ≥ α`` (default 5, the paper's online-to-batch value; its Table 2
        uses 20 or 200). ``E[#SV] ≤ αT/β``.
    averaged
        Predict with the averaged classifier ``f̄_t`` (default True, as in the paper) or with
        the last one ``f_t``.
    reference_quirks
        ``τ = min(η/ρ, ℓ)`` as in [C-SOL] (default False: divide by ``κ(x, x)``).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("spa", seed=0, eta=1.0, beta=1.0)
    >>> m.learn_one([0.0, 0.0], 1)      # ℓ = 1, ρ = 1: stored with τ = min(1, 1) = 1
    >>> m.n_support_vectors, float(m.sv.coef[0])
    (1, 1.0)
    >>> m.predict_one([0.0, 0.0])        # f̄_2 = (f_1 + f_2)/2 = (0 + 1)/2
    0.5
    """

    name = "spa"
    params = (
        *KERNEL_PARAMS,
        *spa_params(5.0, "sparsity control β ≥ α (E[#SV] ≤ αT/β)"),
        AVERAGED_PARAM,
        Param("reference_quirks", False, bool, "τ = min(η/ρ, ℓ) ignoring κ(x,x) ([C-SOL])"),
        TIE_PARAM,
    )
    randomized = True
    reference = "Lu, Sahoo, Zhao & Hoi, ACM TIST 2018, Algorithm 1 (averaged: §6.1.3)"

    averaged: bool

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self._as = np.zeros(len(self.sv.a))  # a_j · s_j, parallel to the store

    def _average(self, f: float, k: np.ndarray, n: int) -> float:
        T = self.t
        return (T * f - float(self._as[:n] @ k)) / (T + 1)

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        f = aux  # f_t(x_t): the update uses the last hypothesis, not the average
        loss = 1.0 - y * f
        if loss <= 0.0:
            return
        kt = self.kern.diag(xx)
        if kt <= 0.0:
            return
        rho = (loss if loss < self.alpha else self.alpha) / self.beta
        if self.rng.random() >= rho:
            return
        tau = min(self.eta / rho, loss if self.reference_quirks else loss / kt)
        sv = self.sv
        j = sv.append(x, xx, tau * y, id_=self.t, s=self.t, fz=f, kzz=kt)
        self._as = self._per_sv(self._as, j)
        self._as[j] = tau * y * self.t

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        sv = self.sv
        self._as = np.zeros(len(sv.a))
        self._as[: sv.n] = sv.a[: sv.n] * sv.s[: sv.n]
