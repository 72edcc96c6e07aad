"""IOKS — improved online kernel selection for Lipschitz losses: online mirror descent with a
1/8-power (Tsallis-type) regulariser whose normalisation is found by bisection, per-arm
increasing learning rates and a clipped loss estimator.

Reference: J. Li and S. Liao, "Improved regret bounds for online kernel selection under bandit
feedback", ECML-PKDD 2022; rules from the authors' R code [C-P2]
(``IOKS-absolute.R``, ``IOKS-logistic.R``, ``IOKS-square.R``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from kernelstream.learners._selection import HORIZON_PARAM, SIGMAS_PARAM, HorizonTuning
from kernelstream.learners.base import TIE_PARAM, Param, positive
from kernelstream.learners.oks_pp import QUIRKS_DOC, BanditSelector, KernelHyp
from kernelstream.learners.registry import register
from kernelstream.learners.state import check_reals, check_shape

_P = -7.0 / 8.0  # mirror map exponent: ∇ψ(q)_j = −q_j^{−7/8}/η_j
_INV = -8.0 / 7.0  # its inverse
_K87 = 8.0 / 7.0  # F'(λ) = (8/7) Σ_j η_j base_j^{−15/7}


class OMDResult(NamedTuple):
    lam: float  # the normaliser λ*
    q: np.ndarray  # the new iterate (renormalised if asked)
    residual: float  # |F(λ*) − 1| before renormalisation
    iterations: int  # bisection steps taken (0 if an end point was accepted)


def tsallis_omd_step(q: np.ndarray, eta: np.ndarray, i: int, lhat: float, tol: float = 1e-5,
                     max_iter: int = 200, normalize: bool = True,
                     tighten: bool = True) -> OMDResult:
    """One IOKS mirror-descent step with loss estimate ``lhat`` on arm ``i`` (0 elsewhere).

    Finds ``λ*`` with ``F(λ) = Σ_j (q_j^{−7/8} + η_j(ℓ̂_j − λ))^{−8/7} = 1`` by bisection and
    returns ``q_j ← (q_j^{−7/8} + η_j(ℓ̂_j − λ*))^{−8/7}``. ``F`` is increasing, ``F(0) ≤ 1`` and
    ``F(ℓ̂_i) ≥ 1``, so ``λ* ∈ [0, ℓ̂_i]``; the upper end is lowered to just below the first
    pole ``min_{j≠i} q_j^{−7/8}/η_j`` (where a base would reach 0 — possible when the estimate is
    large), which keeps every base positive. As [C-P2]: ``λ = hi`` then ``λ = 0`` are tried
    first, then bisection until ``|F − 1| ≤ tol`` (or ``max_iter`` steps). ``normalize``
    divides the result by its sum (the code does not; the difference is ≤ ``tol``).

    ``tighten`` (default) starts the bisection from a narrower bracket, free from the two end
    points already evaluated: ``F`` is convex (a sum of convex terms), so the chord through
    ``(0, F(0))`` and ``(hi, F(hi))`` crosses 1 below ``λ*`` and the tangents at ``0`` and
    ``hi`` cross 1 above it (widened by 1e-9 relative against round-off). The stopping rule is
    unchanged, so the result still satisfies ``|F(λ*) − 1| ≤ tol``; it is another point of
    that window than the plain bisection's, reached in ~1–2 steps instead of ~6–12. Every
    ``q_j`` increases with ``λ``, so the two raw iterates differ by at most
    ``F(λ_max) − F(λ_min) ≤ 2·tol`` in L1. ``tighten=False`` is the plain bisection on
    ``[0, hi]`` (bit-identical to the earlier implementation).
    """
    if lhat <= 0.0:
        qs = q.tolist()
        qn = np.array(qs)
        return OMDResult(0.0, qn / qn.sum() if normalize else qn, abs(sum(qs) - 1.0), 0)
    lam, qs, residual, it = _omd(q.tolist(), eta.tolist(), i, lhat, tol, max_iter, normalize,
                                 tighten)
    return OMDResult(lam, np.array(qs), residual, it)


def _omd(qs: list[float], es: list[float], i: int, lhat: float, tol: float, max_iter: int,
         normalize: bool, tighten: bool = True) -> tuple[float, list[float], float, int]:
    """:func:`tsallis_omd_step` on Python lists (``lhat > 0``): ``(λ*, q, |F − 1|, steps)``.

    Plain float arithmetic: ``K`` is small and this runs every round, where numpy calls on
    ``K``-vectors would cost more than the arithmetic. ``F`` is summed in a fixed order
    (arm ``i`` first), so results do not depend on the Python version's ``sum``.
    """
    # base_j(λ) = q_j^{-7/8} − η_j λ for j ≠ i and q_i^{-7/8} + η_i (ℓ̂ − λ) for i; the latter
    # is evaluated as written (ℓ̂ − λ first): a huge ℓ̂ would otherwise swamp q_i^{-7/8}.
    # A zero q_j has an infinite base (its term stays 0).
    inv = _INV  # a local: read on every power
    a = [qj ** _P if qj > 0.0 else math.inf for qj in qs]
    ai, ei = a[i], es[i]
    A = a[:i] + a[i + 1:]  # the other arms, in order
    E = es[:i] + es[i + 1:]
    pole = math.inf
    for aj, ej in zip(A, E, strict=True):
        if ej > 0.0:
            r = aj / ej
            if r < pole:
                pole = r
    hi = min(lhat, (1.0 - 1e-12) * pole)
    # F(hi) and F'(hi)·7/8 = Σ η_j base_j^{-15/7} = Σ η_j term_j / base_j
    b = ai + ei * (lhat - hi)
    f = b ** inv
    dh = ei * f / b
    for aj, ej in zip(A, E, strict=True):
        b = aj - ej * hi
        t = b ** inv
        f += t
        dh += ej * t / b
    lam = hi
    it = 0
    if abs(f - 1.0) > tol:
        fhi = f
        lam = 0.0
        b = ai + ei * lhat
        f = b ** inv
        d0 = ei * f / b
        for aj, ej in zip(A, E, strict=True):
            t = aj ** inv
            f += t
            d0 += ej * t / aj
        lo = 0.0
        if tighten and abs(f - 1.0) > tol:
            lo, hi = _convex_bracket(hi, f, fhi, d0, dh)
        while abs(f - 1.0) > tol and it < max_iter:
            lam = 0.5 * (lo + hi)
            f = (ai + ei * (lhat - lam)) ** inv
            for aj, ej in zip(A, E, strict=True):
                f += (aj - ej * lam) ** inv
            it += 1
            if f < 1.0:
                lo = lam
            else:
                hi = lam
    qn = [(aj - ej * lam) ** inv for aj, ej in zip(A, E, strict=True)]
    qn.insert(i, (ai + ei * (lhat - lam)) ** inv)
    if normalize:
        tot = 0.0
        for v in qn:
            tot += v
        qn = [v / tot for v in qn]
    return lam, qn, abs(f - 1.0), it


def _convex_bracket(hi: float, f0: float, fhi: float, d0: float,
                    dh: float) -> tuple[float, float]:
    """``[lo, hi]`` around ``λ*`` from ``F(0)``, ``F(hi)`` and the slopes ``(8/7)·d0``,
    ``(8/7)·dh`` there, for a convex increasing ``F``; bounds that are not finite or fall outside
    ``[0, hi]`` (``F(0) > 1``, round-off) are ignored."""
    lo = 0.0
    if fhi > f0:
        c = hi * ((1.0 - f0) / (fhi - f0)) * (1.0 - 1e-9)  # chord: F ≤ chord ⇒ λ* ≥ c
        if 0.0 < c < hi:
            lo = c
    up = hi
    if d0 > 0.0:  # tangent at 0: F ≥ tangent ⇒ λ* ≤ u
        u = (1.0 - f0) / (_K87 * d0) * (1.0 + 1e-9)
        if lo < u < up:
            up = u
    if dh > 0.0:  # tangent at hi
        u = hi - (fhi - 1.0) / (_K87 * dh)
        u += 1e-9 * abs(u)
        if lo < u < up:
            up = u
    return lo, up


# (U, G1, l_max) per loss (C-P2)
IOKS_CONSTANTS: dict[str, tuple[float, float, float]] = {
    "absolute": (1.0, 1.0, 1.0), "logistic": (15.0, 1.0, 1.0), "square": (1.0, 4.0, 1.0),
}


class IOKSRule(HorizonTuning):
    """The scalar part of IOKS (step sizes, thresholds, clipped estimate and OMD step of the
    authors' code [C-P2]), shared by IOKS and RF-IOKS.

    State: ``S`` (Σ of squared importance-weighted gradients per arm), per-arm rates ``η``,
    thresholds ``ρ``, the OMD iterate ``q``. ``T``-dependent constants (``η₀``, ``δ = T^{−3/4}``,
    ``κ_η = exp(2/(3 ln T))``) follow :class:`HorizonTuning`; when a guessed ``T`` doubles, all
    ``η_j`` are rescaled by the ratio of the two ``η₀``."""

    loss: str
    radius: float | None
    horizon: int | None
    reference_quirks: bool
    tol: float
    K: int
    p: np.ndarray
    t: int

    def _setup_rule(self: Any) -> None:
        U0, G1, lmax = IOKS_CONSTANTS[self.loss]
        U = U0 if self.radius is None else self.radius
        self._radius = U
        self._G1 = 2.0 * (U + 1.0) if self.loss == "square" else G1  # Lipschitz on |f| ≤ U
        self._lmax = lmax
        self._absolute = self.loss == "absolute"
        # QUIRK (C-P2 IOKS-square.R): the clipping test uses p_I ≥ max η instead of >
        self._ge = bool(self.reference_quirks) and self.loss == "square"
        K = self.K
        self.S = np.zeros(K)
        self.rho = np.full(K, 2.0 * K)
        self.q = np.full(K, 1.0 / K)
        self._tune_horizon()
        self.eta = np.full(K, self._eta0)

    def _retune(self: Any, T: int) -> None:
        lnT = math.log(T) if T > 1 else 1.0
        U, K = self._radius, self.K
        eta0 = 8.0 * self._lmax * K ** 0.375 / (self._G1 * U * math.sqrt(T) * math.sqrt(lnT))
        if self._T and hasattr(self, "eta"):
            self.eta *= eta0 / self._eta0
        self._eta0 = eta0
        self._delta = min(1.0, T ** -0.75)
        self._kappa = math.exp(2.0 / (3.0 * lnT))
        self._T = T

    def _rule(self: Any, i: int, ell: float, g: float, yf: float) -> float:
        # K-vectors as Python floats (the same IEEE operations as the numpy forms, fewer calls)
        self._round()
        p_i = float(self.p[i])
        gt = g / p_i
        # the absolute-loss code adds 1/p_I² even when f = y (ℓ' = 0)
        self.S[i] += 1.0 / (p_i * p_i) if self._absolute else gt * gt
        lam = math.sqrt(0.5) * self._radius / math.sqrt(1.0 + float(self.S[i]))
        coef = -lam * gt
        es = self.eta.tolist()
        m = max(es)
        ln = ell / self._lmax
        lhat = ln / p_i if (p_i >= m if self._ge else p_i > m) else ln / (p_i + m)
        if lhat > 0.0:
            qs = _omd(self.q.tolist(), es, i, lhat, self.tol, 200, not self.reference_quirks)[1]
            self.q = np.array(qs)
        else:
            qs = self.q.tolist()
        d = self._delta
        w, c = 1.0 - d, d / self.K
        p = [w * qj + c for qj in qs]  # p = (1 − δ) q + δ/K
        self.p = np.array(p)
        rho = self.rho.tolist()
        for j, pj in enumerate(p):
            inv = 1.0 / pj
            if inv > rho[j]:
                self.rho[j] = 2.0 * inv
                self.eta[j] *= self._kappa
        return coef

    def _rule_state(self: Any) -> dict[str, np.ndarray]:
        return {"ioks.S": self.S.copy(), "ioks.eta": self.eta.copy(),
                "ioks.rho": self.rho.copy(), "ioks.q": self.q.copy()}

    def _set_rule_state(self: Any, state: dict[str, np.ndarray]) -> None:
        self.S = np.array(state["ioks.S"], dtype=np.float64)
        self.eta = np.array(state["ioks.eta"], dtype=np.float64)
        self.rho = np.array(state["ioks.rho"], dtype=np.float64)
        self.q = np.array(state["ioks.q"], dtype=np.float64)
        for k, lo, hi in (("S", 0.0, math.inf), ("eta", 0.0, math.inf), ("rho", 0.0, math.inf),
                          ("q", 0.0, 1.0)):  # what the rounds' logs and powers can take
            check_shape(f"ioks.{k}", getattr(self, k), (self.K,))
            check_reals(f"ioks.{k}", getattr(self, k), lo, hi)


IOKS_PARAMS: tuple[Param, ...] = (
    Param("loss", "logistic", str,
          "loss: logistic (classification), absolute or square (regression)",
          choices=("logistic", "absolute", "square")),
    SIGMAS_PARAM,
    HORIZON_PARAM,
    Param("radius", None, float,
          "ball radius U (None: 15 for logistic, 1 for absolute and square, as C-P2)",
          positive, "> 0"),
    Param("tol", 1e-5, float, "bisection tolerance on |F(lambda) - 1| (C-P2: 1e-5)",
          lambda v: 0 < v < 1, "in (0, 1)"),
    Param("reference_quirks", False, bool, QUIRKS_DOC),
    TIE_PARAM,
)


@register
class IOKS(IOKSRule, KernelHyp, BanditSelector):
    """IOKS: bandit kernel selection by online mirror descent with a 1/8-power regulariser.

    Each round ``I ~ p`` is drawn (in ``predict_one``), ``f = f_I(x)`` predicts, and with
    ``∇̃ = ℓ'(f, y)/p_I`` (rules of the authors' code, C-P2):

    * ``S_I += ∇̃²`` (absolute loss: ``1/p_I²``), ``λ_I = √½ U/√(1 + S_I)``;
      ``f_I ← f_I − λ_I ∇̃ κ_I(x, ·)`` (an SV every round), projected onto ``‖f_I‖ ≤ U``;
    * clipped estimate ``ℓ̂_I = (ℓ/l_max)/p_I`` if ``p_I > max_j η_j``, else
      ``(ℓ/l_max)/(p_I + max_j η_j)``;
    * ``q_j ← (q_j^{−7/8} + η_j(ℓ̂_j − λ*))^{−8/7}`` with ``λ*`` normalising ``q`` (bisection
      to ``|F(λ*) − 1| ≤ tol``, :func:`tsallis_omd_step`), ``p = (1 − δ) q + δ/K``;
    * every arm with ``1/p_j > ρ_j``: ``ρ_j ← 2/p_j``, ``η_j ← κ_η η_j``.

    Constants (C-P2): ``η₀ = 8 l_max K^{3/8}/(G₁ U √T √ln T)``, ``δ = T^{−3/4}``,
    ``κ_η = exp(2/(3 ln T))``, ``ρ = 2K`` initially; ``(U, G₁, l_max)`` = (1, 1, 1) absolute,
    (15, 1, 1) logistic, (1, 4, 1) square. ``T`` is ``horizon``; when it is unknown (None) a
    doubling guess ``1000·2^k`` is used and the constants are re-derived when it doubles (the
    paper assumes a known ``T``). Unbounded memory (one SV per round).

    The bisection starts from a bracket narrowed by the convexity of ``F`` (about 1–2 steps
    instead of 6–12 per round, see :func:`tsallis_omd_step`); its stopping rule is [C-P2]'s, so
    ``λ*`` is another point of the same tolerance window than the plain bisection on
    ``[0, ℓ̂_I]`` would return (``q`` within ``2·tol`` in L1 per round). Runs therefore match the
    plain bisection to tolerance level only, not bit for bit.

    ``reference_quirks=True`` replicates the code: ``q`` is not renormalised after the bisection
    (its sum is within ``tol`` of 1; the sampling distribution is renormalised by the draw
    anyway), and with square loss the clipping test is ``p_I ≥ max_j η_j``. Default False:
    renormalised ``q`` and the strict test of the other two files.

    Parameters
    ----------
    loss
        ``logistic`` (classification) or ``absolute`` / ``square`` (regression; the task
        follows the loss); default ``logistic``.
    sigmas
        Candidate Gaussian widths (default ``2^-2..2^3``).
    horizon
        Stream length ``T`` (default None: unknown, a doubling guess; see above).
    radius
        ``U``; ``None`` = the C-P2 value of the loss.
    tol
        Bisection tolerance on ``|F(λ) − 1|``; default 1e-05.
    reference_quirks
        See above (default False).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> import numpy as np
    >>> from kernelstream.learners import make
    >>> m = make("ioks", seed=0, loss="absolute", horizon=200)
    >>> X = np.random.default_rng(0).random((200, 2)); y = X[:, 0] * X[:, 1]
    >>> _ = m.predict_learn_many(X, y)
    >>> m.task, m.n_support_vectors, round(float(m.kernel_distribution.sum()), 12)
    ('regression', 200, 1.0)
    """

    name = "ioks"
    params = IOKS_PARAMS
    reference = ("Li & Liao, ECML-PKDD 2022, authors' code IOKS-{absolute,logistic,"
                 "square}.R (JunfLi-TJU/OKS-Bandit)")
