"""OKS-SIL: hypothesis sketching for online kernel selection in a continuous kernel space
(Zhang & Liao, IJCAI 2020, Algorithm 1).

Reference: X. Zhang and S. Liao, "Hypothesis Sketching for Online Kernel Selection in
Continuous Kernel Space", IJCAI 2020 (Algorithm 1). No code is public; the rules are
the paper's Sections 3–4 and Algorithm 1.

The hypothesis is a *sketch* ``f_t = Σ_{j∈V} ω_j κ_{γ_t}(x̃_j, ·)`` over a buffer ``V`` of at most
``B`` points, all evaluated with the current Gaussian parameter ``γ_t``. The buffer is maintained
by the randomized linear-dependency (RLD) test, the weights by kernelized OGD on the hinge loss
with a *compensation* step, and ``γ`` by a gradient step on the sketched instantaneous loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import TIE_PARAM, Learner, Param, positive
from kernelstream.learners.experts import sample_without_replacement, weighted_distinct
from kernelstream.learners.linalg import PINV_ATOL, PINV_RTOL, pinv
from kernelstream.learners.registry import register
from kernelstream.learners.state import check_reals
from kernelstream.learners.store import SVStore

# Ω of the paper: σ ∈ [2^-6.5, 2^5.5] ⇔ γ = 1/(2σ²) ∈ [2^-12, 2^12].
GAMMA_MIN = 2.0**-12
GAMMA_MAX = 2.0**12
# Initial width of the paper's experiments: σ_1 = 2^{-(i+1)/2}, i uniform in {-12..-6}, i.e.
# γ_1 = 2^i.
INIT_EXPONENTS = np.arange(-12, -5)


_NO_ROW = np.empty(0)  # kernel values and distances of a round against an empty buffer


def paper_initial_gamma(rng: np.random.Generator) -> float:
    """Draw Zhang & Liao's initial kernel parameter ``γ_1 = 2^i``, ``i`` uniform in ``{-12, …, -6}``
    (``σ_1 = 2^{-(i+1)/2} ∈ {2^5.5, …, 2^2.5}``); one integer draw from ``rng``."""
    return float(2.0 ** int(INIT_EXPONENTS[int(rng.integers(len(INIT_EXPONENTS)))]))


def rld_residual(K_s: np.ndarray | Sequence[Sequence[float]], psi_s: np.ndarray | Sequence[float],
                 kxx: float = 1.0) -> tuple[list[float], float]:
    """Quantities of the randomized linear-dependency (RLD) test (Zhang & Liao, IJCAI 2020,
    §3, eq. (1)): ``α* = pinv(K̃_s) ψ̃`` and
    ``δ = κ(x,x) − ψ̃ᵀα*`` clamped at 0 — the squared RKHS distance from ``κ(·, x)`` to the span
    of the sampled basis functions (the least-squares residual, also when ``K̃_s`` is
    singular).

    The ``s × s`` system is tiny (``s = 3``) and solved every update, where numpy's per-call
    overhead would cost more than the kernel row: a Cholesky solve in plain floats is used when
    it provably equals the pseudo-inverse, i.e. when the smallest eigenvalue exceeds the
    pseudo-inverse cut-off. That bound comes free from the factorisation:
    ``λ_min ≥ det / λ_max^{s−1} ≥ det / tr^{s−1}`` with ``det = Π L_jj²``. Otherwise (nearly
    duplicate sampled points) the SVD pseudo-inverse (:func:`~kernelstream.learners.linalg.pinv`)
    decides."""
    K = K_s.tolist() if isinstance(K_s, np.ndarray) else K_s
    b = psi_s.tolist() if isinstance(psi_s, np.ndarray) else list(psi_s)
    s = len(b)
    sol = _chol_solve(K, b, s) if s <= 8 else None  # O(s³) Python loops: small s only
    if sol is None:
        Ka = np.array(K, dtype=np.float64).reshape(s, s)
        ba = np.array(b, dtype=np.float64)
        alpha_a = pinv(Ka) @ ba
        alpha, quad = alpha_a.tolist(), float(ba @ alpha_a)
    else:
        alpha, quad = sol
    delta = kxx - quad
    return alpha, (delta if delta > 0.0 else 0.0)


def _chol_solve(K: Sequence[Sequence[float]], b: Sequence[float],
                s: int) -> tuple[list[float], float] | None:
    """``(K⁻¹b, bᵀK⁻¹b)`` by Cholesky in Python floats, or None when ``K`` is not safely
    positive definite (smallest eigenvalue possibly below ``pinv``'s cut-off)."""
    L = [[0.0] * s for _ in range(s)]
    det = 1.0
    tr = 0.0
    for j in range(s):
        Lj = L[j]
        Kj = K[j]
        tr += Kj[j]
        v = Kj[j]
        for k in range(j):
            v -= Lj[k] * Lj[k]
        if not v > 0.0:
            return None
        det *= v
        r = math.sqrt(v)
        Lj[j] = r
        for i in range(j + 1, s):
            Li = L[i]
            w = K[i][j]
            for k in range(j):
                w -= Li[k] * Lj[k]
            Li[j] = w / r
    if not det > max(PINV_ATOL, PINV_RTOL * tr) * tr ** (s - 1):
        return None
    z = [0.0] * s  # L z = b, so bᵀK⁻¹b = zᵀz
    quad = 0.0
    for i in range(s):
        Li = L[i]
        w = b[i]
        for k in range(i):
            w -= Li[k] * z[k]
        w /= Li[i]
        z[i] = w
        quad += w * w
    alpha = [0.0] * s  # Lᵀ α = z
    for i in range(s - 1, -1, -1):
        w = z[i]
        for k in range(i + 1, s):
            w -= L[k][i] * alpha[k]
        alpha[i] = w / L[i][i]
    return alpha, quad


def rld_residual_unit3(k01: float, k02: float, k12: float, b0: float, b1: float,
                       b2: float) -> tuple[list[float], float] | None:
    """:func:`rld_residual` for the default ``s = 3`` with a unit diagonal (Gaussian kernel),
    the Cholesky solve unrolled (it runs on every OKS-SIL update); None when ``K̃_s`` is too
    close to singular for the bound of :func:`rld_residual`, which then decides."""
    v1 = 1.0 - k01 * k01
    if not v1 > 0.0:
        return None
    l11 = math.sqrt(v1)
    l21 = (k12 - k02 * k01) / l11
    v2 = 1.0 - k02 * k02 - l21 * l21
    # λ_min ≥ det / tr² with det = v1 v2 and tr = 3 (the cut-off is 1e-8; 3e-12 tr is smaller)
    if not v2 > 0.0 or not v1 * v2 > 9.0 * PINV_ATOL:
        return None
    l22 = math.sqrt(v2)
    z1 = (b1 - k01 * b0) / l11
    z2 = (b2 - k02 * b0 - l21 * z1) / l22
    a2 = z2 / l22
    a1 = (z1 - l21 * a2) / l11
    a0 = b0 - k01 * a1 - k02 * a2
    delta = 1.0 - (b0 * b0 + z1 * z1 + z2 * z2)
    return [a0, a1, a2], (delta if delta > 0.0 else 0.0)


# Margin of the repeated-point shortcut of the RLD test (rld_repeat_delta): far above the
# round-off of either computation of δ (relative ~1e-10 at the condition number allowed there).
RLD_REPEAT_MARGIN = 1e-8


def rld_repeat_delta(k01: float, k02: float, k12: float, b0: float, b1: float,
                     b2: float) -> float | None:
    """``δ`` of the RLD test for ``s = 3`` (unit diagonal) when the sample holds one point twice
    (``K̃_s`` singular: ``K_ij = 1``, the same ψ̃ and the same kernel values to the third point),
    from the distinct points by a 2 × 2 Cholesky solve: the residual that the pseudo-inverse of
    :func:`rld_residual` gives, in exact arithmetic (ψ̃ lies in the range of ``K̃_s``). None when
    no point repeats or the distinct ones are nearly dependent (``1 − k² ≤ 1e-3``: condition
    number over ~5000), where only the pseudo-inverse decides. Duplicate rows are common (a9a),
    and the SVD of the pseudo-inverse costs more than the rest of such a round."""
    if k01 == 1.0 and b0 == b1 and k02 == k12:
        k, u, v = k02, b0, b2
    elif k02 == 1.0 and b0 == b2 and k01 == k12:
        k, u, v = k01, b0, b1
    elif k12 == 1.0 and b1 == b2 and k01 == k02:
        k, u, v = k01, b0, b1
    else:
        return None
    if k == 1.0:  # one point three times
        if u != v:
            return None
        quad = u * u
    else:
        v1 = 1.0 - k * k
        if not v1 > 1e-3:
            return None
        z = (v - k * u) / math.sqrt(v1)
        quad = u * u + z * z
    delta = 1.0 - quad
    return delta if delta > 0.0 else 0.0


def gaussian_interval_params(initial_doc: str) -> tuple[Param, ...]:
    """``gamma`` (initial value), the interval Ω and ``random_init``: shared by OKS-SIL and
    OKL-GD, whose widths both live in Zhang & Liao's continuous interval."""
    return (
        Param("gamma", 0.5, float, initial_doc, positive, "> 0"),
        Param("gamma_min", GAMMA_MIN, float, "lower end of the interval Ω of γ (default 2^-12, "
              "i.e. σ ≤ 2^5.5)", positive, "> 0"),
        Param("gamma_max", GAMMA_MAX, float, "upper end of the interval Ω of γ (default 2^12, "
              "i.e. σ ≥ 2^-6.5)", positive, "> 0"),
        Param("random_init", False, bool, "draw the initial width as in Zhang & Liao's experiments "
              "(γ_1 = 2^i, i uniform in {-12..-6}) from the learner's RNG instead of using gamma"),
    )


class IntervalWidthLearner(compiled.DistRuleRounds, Learner):
    """Base of the budgeted hinge learners whose Gaussian width moves in the interval Ω
    (OKS-SIL, OKL-GD): the attributes of the parameters they share (the budget, the step sizes
    ``η`` and ``ρ``, those of :func:`gaussian_interval_params`) and the check of Ω."""

    budget: int
    eta: float
    rho: float
    gamma: float
    gamma_min: float
    gamma_max: float
    random_init: bool

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        if not p["gamma_min"] < p["gamma_max"]:
            raise ValueError(f"{cls.name}: gamma_min must be < gamma_max, got "
                             f"{p['gamma_min']!r} and {p['gamma_max']!r}")
        if not p["gamma_min"] <= p["gamma"] <= p["gamma_max"]:
            raise ValueError(f"{cls.name}: initial gamma must lie in [gamma_min, gamma_max] = "
                             f"[{p['gamma_min']!r}, {p['gamma_max']!r}], got {p['gamma']!r}")


@register
class OKSSIL(IntervalWidthLearner):
    """OKS-SIL: budgeted kernel OGD (hinge loss) whose Gaussian width is learned online in a
    continuous interval Ω, with a buffer of at most ``B`` points kept by a randomized
    linear-dependency (RLD) test.

    Predict: ``ψ_j = exp(−γ_t‖x_t − x̃_j‖²)``, ``f_t = ω·ψ`` (0 on an empty buffer). Learn
    (only when ``y_t f_t < 1``; otherwise nothing changes):

    1. buffer not full: append ``x_t`` with ``ω = η y_t``;
    2. buffer full: sample ``s`` distinct indices with probabilities ``ψ/Σψ`` (uniform if
       ``Σψ`` underflows to 0), ``α* = pinv(K̃_s) ψ̃``, ``δ_t = 1 − ψ̃ᵀα*`` (the squared RKHS
       distance of ``κ(·,x_t)`` to the span of the sample);

       * ``δ_t > ν`` (RLD holds): replace the point of smallest ``|ω_r|`` (first on ties) by
         ``x_t`` and set ``ω_r = −η ℓ'(f^b, y_t)`` with the sketched score after the basis
         change ``f^b = f_t − ω_r ψ_r + ω_r`` (so ``ω_r`` is 0 if ``y_t f^b ≥ 1``);
       * otherwise compensation: ``ω_{k_a} += η y_t α*_a`` on the sampled points;
    3. if the buffer changed (cases 1 and RLD-holds), kernel step with the kernel values at the
       old parameter: ``γ ← γ − ρ_t y_t Σ_j ω_j^{(t+1)} ψ_j ‖x_t − x̃_j‖²`` (the new point has
       distance 0 and contributes nothing), ``ρ_t = rho/t``, then ``γ`` is clipped to
       ``[gamma_min, gamma_max]``.

    Decisions on the points the paper leaves open:

    * the projection of ``γ`` onto Ω is not written in the paper; it is a clip (recon);
    * the kernel step uses the paper's hinge formula, i.e. ``ℓ' = −y_t`` without re-checking
      the margin of the updated sketch ``f^w`` (default). ``recheck_margin=True`` uses the
      general-loss form ``γ ← γ + ρ_t ℓ'(f^w, y_t) Σ_j ω_j ψ_j ‖x_t − x̃_j‖²`` instead, which
      skips the step when ``y_t f^w ≥ 1``;
    * the round counter of ``ρ_t = 1/t`` counts every round (also the zero-loss ones), ``t = 1``
      for the first example.

    The buffer is stored in an :class:`~kernelstream.learners.store.SVStore`; its RKHS norm is
    not tracked (the kernel changes every update, ``sv.norm2`` is NaN).

    Parameters
    ----------
    budget
        Buffer size ``B`` (default 150, Zhang & Liao's value for ``T < 10^4``; 200 otherwise).
    eta
        KOGD step size ``η`` (Zhang & Liao tune it in ``{10^-5..10^0}``; default 0.1).
    sample_size
        RLD sample size ``s`` (default 3).
    nu
        RLD threshold ``ν`` (default 0.9; the test is ``δ_t > ν``).
    rho
        Scale of the kernel-parameter step ``ρ_t = rho/t`` (default 1: the
        paper's ``ρ_t = 1/t``).
    gamma
        Initial kernel parameter ``γ_1`` of ``exp(−γ‖x−x'‖²)`` (``sigma`` is accepted); must lie
        in ``[gamma_min, gamma_max]``. Ignored when ``random_init=True``.
    gamma_min, gamma_max
        The interval Ω for ``γ`` (default 2^-12 to 2^12, i.e. ``σ ∈ [2^-6.5, 2^5.5]``).
    random_init
        Draw ``γ_1`` as in Zhang & Liao's experiments (``σ_1 = 2^{-(i+1)/2}``, ``i`` uniform in
        ``{-12..-6}``) from the learner's RNG (default False).
    recheck_margin
        Use ``ℓ'(f^w, y_t)`` in the kernel step instead of the paper's ``−y_t`` (see above;
        default False).
    tie
        Label predicted for a zero score.

    Randomness: the RLD sample (and the initial width with ``random_init``), from ``self.rng``
    inside the update; predictions are deterministic.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("oks-sil", budget=2, eta=0.5, gamma=0.5)
    >>> for x, y in [([0.0, 0.0], 1), ([2.0, 0.0], -1), ([0.0, 2.0], -1), ([4.0, 4.0], 1)]:
    ...     m.learn_one(x, y)
    >>> m.n_support_vectors
    2
    >>> m.gamma_min <= m.current_gamma <= m.gamma_max
    True
    """

    name = "oks-sil"
    params = (
        Param("budget", 150, int, "buffer size B (maximum number of stored points)", positive,
              "> 0"),
        Param("eta", 0.1, float, "KOGD step size η", positive, "> 0"),
        Param("sample_size", 3, int, "RLD sample size s", positive, "> 0"),
        Param("nu", 0.9, float, "RLD threshold ν: replace a point when δ_t > ν", positive, "> 0"),
        Param("rho", 1.0, float, "kernel-parameter step ρ_t = rho / t", positive, "> 0"),
        *gaussian_interval_params("initial Gaussian parameter γ_1 of exp(-γ||x-x'||²) "
                                  "(sigma=s sets γ = 1/(2 s²))"),
        Param("recheck_margin", False, bool, "kernel step with ℓ'(f^w, y) (general-loss form) "
              "instead of the paper's -y"),
        TIE_PARAM,
    )
    randomized = True
    reference = "Zhang & Liao, IJCAI 2020, Algorithm 1"

    sample_size: int
    nu: float
    recheck_margin: bool

    # γ lives in the compiled rule's float state (no copy to sync per round)
    current_gamma = compiled.rule_state("_rule_fst", 0, "current_gamma")

    def _setup(self, d: int) -> None:
        self._rule_ist = np.zeros(0, dtype=np.int64)
        self._rule_fst = np.zeros(1)  # γ
        self._fused = None  # step's head: of the arrays before
        self.sv = SVStore(d, capacity=self.budget)
        self.sv.norm2 = math.nan  # not tracked: the kernel changes (see class docstring)
        self.current_gamma = paper_initial_gamma(self.rng) if self.random_init else self.gamma
        self._compiled = compiled.fk is not None  # compiled rows (distances kept) and blocks
        if self._compiled:
            self._nzwork = np.empty(d, dtype=np.int64)
            self._d2buf = np.empty(self.budget)
            self._psibuf = np.empty(self.budget)
        # the update compiled too (_ck_budget.c; the paper's s = 3): blocks run in C
        self._rule = (compiled.DIST_RULES[self.name]
                      if self._compiled and compiled.bk and self.sample_size == 3 else 0)
        if self._rule:
            self._kbuf = self._psibuf
            self._rule_prm = np.array([self.budget, self.eta, 3, self.nu, self.rho,
                                       self.gamma_min, self.gamma_max, self.recheck_margin],
                                      dtype=np.float64)
            self._rule_scratch = np.empty(2 * self.budget)

    @property
    def kernel_gamma(self) -> float | None:
        return float(self.current_gamma) if self.dim is not None else None

    @property
    def n_support_vectors(self) -> int:
        return self.sv.n if self.dim is not None else 0

    # -- per round -------------------------------------------------------------------------
    def _sq_dists(self, x: np.ndarray, xx: float) -> np.ndarray:
        """``‖x − x̃_j‖²`` to the buffer points (clamped at 0 against round-off)."""
        sv = self.sv
        n = sv.n
        full = n == len(sv.a)  # the steady state: no slicing
        d2 = (sv.X if full else sv.X[:n]) @ x
        d2 *= -2.0
        d2 += sv.sqn if full else sv.sqn[:n]
        d2 += xx
        return np.maximum(d2, 0.0, out=d2)

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        sv = self.sv
        n = sv.n
        if n == 0:
            return 0.0, None
        if self._compiled:  # ψ and the distances in one pass (as below, up to round-off)
            psi, d2 = np.empty(n), np.empty(n)
            f = compiled.fk.score(self._fmap(), sv.a,
                                  x if x.flags.c_contiguous else np.ascontiguousarray(x), xx,
                                  d2, psi, self._nzwork)
            return f, (psi, d2)
        # ψ in place over the distances, which the update computes again if it needs them
        psi = self._sq_dists(x, xx)
        psi *= -self.current_gamma
        np.exp(psi, out=psi)
        return float((sv.a if n == len(sv.a) else sv.a[:n]) @ psi), (psi, None)

    def _dists(self, x: np.ndarray, xx: float, d2: np.ndarray | None) -> np.ndarray:
        """The round's distances to the buffer: kept by the compiled score, else computed."""
        return self._sq_dists(x, xx) if d2 is None else d2

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._rule:  # the same update compiled (_ck_budget.c), which the blocks run
            psi, d2 = aux if aux is not None else (_NO_ROW, _NO_ROW)
            self._rule_update(x, xx, y, score, d2, psi)
            return
        self._update_numpy(x, xx, y, score, aux)

    def _deferred(self, x: np.ndarray, xx: float, y: float, score: float, d2: np.ndarray,
                  psi: np.ndarray, status: int, idx: list[int] | None) -> None:
        """A round the compiled rule handed back: all of it, or the RLD test of its sample."""
        if status == compiled.DEFER_ALL:
            self._update_numpy(x, xx, y, score, (psi, d2))
        else:
            assert idx is not None  # for mypy: DEFER_RLD comes with its sample
            self._rld_update(x, xx, y, score, psi, d2, idx)

    def _update_numpy(self, x: np.ndarray, xx: float, y: float, score: float,
                      aux: Any) -> None:
        if y * score >= 1.0:  # zero hinge loss: buffer, weights and γ stay
            return
        sv = self.sv
        n = sv.n
        eta = self.eta
        psi, d2 = aux if n else (None, None)
        if n < self.budget:
            d2 = self._dists(x, xx, d2) if n else None  # before x_t joins the buffer
            sv.append(x, xx, eta * y, id_=self.t, s=self.t)
            if n:  # the new point has distance 0: the step only sees the old points
                assert d2 is not None and psi is not None  # for mypy: n > 0
                self._kernel_step(y, d2, psi, sv.a[:n], score + eta * y)
            return
        assert psi is not None  # for mypy: n ≥ budget > 0
        s = self.sample_size
        if s <= n and np.count_nonzero(psi) >= s:
            # the common case: ψ ≥ 0, so this is what sample_without_replacement(ψ, s) draws
            idx = weighted_distinct(self.rng, psi, s)
        else:  # fewer than s positive kernel values (underflow): uniform fill-up
            idx = sample_without_replacement(self.rng, psi if psi.any() else np.ones(n),
                                             s).tolist()
        self._rld_update(x, xx, y, score, psi, d2, idx)

    def _rld_update(self, x: np.ndarray, xx: float, y: float, score: float, psi: np.ndarray,
                    d2: np.ndarray | None, idx: list[int]) -> None:
        """The full buffer's update given the RLD sample ``idx``: swap or compensate."""
        sv = self.sv
        a = sv.a[:sv.n]
        eta = self.eta
        alpha, delta = self._rld(idx, psi)
        if delta > self.nu:  # RLD holds: swap the smallest-|ω| point for x_t (α unused)
            r = int(np.abs(a).argmin())
            ar = float(a[r])
            fb = score - ar * float(psi[r]) + ar  # old weight on the new basis function κ(x_t,·)
            new_w = eta * y if y * fb < 1.0 else 0.0
            d2 = self._dists(x, xx, d2)  # before x_t takes slot r
            sv.replace(r, x, xx, new_w, id_=self.t, s=self.t)
            # the replaced slot now holds x_t (distance 0): drop its term from the step
            psi[r] = 0.0
            d2[r] = 0.0
            self._kernel_step(y, d2, psi, a, fb - ar + new_w)  # f^w = f_t − ω_r ψ_r + ω_r^new
        else:  # compensation: project the gradient onto the sampled basis functions
            assert alpha is not None  # _rld leaves α out only when δ > ν
            c = eta * y
            for j, al in zip(idx, alpha, strict=True):
                a[j] += c * al

    def _rld(self, idx: list[int], psi: np.ndarray) -> tuple[list[float] | None, float]:
        """``(α*, δ_t)`` of the RLD test on the sampled points ``idx`` (α* None when a repeated
        sampled point shows ``δ_t > ν`` beyond round-off: the swap, which needs no α*).
        ``K̃_s`` is built in Python floats from one Gram product (its unit diagonal exact): with
        ``s = 3`` a handful of numpy calls would cost more than the arithmetic, and this runs
        every update. The default ``s = 3`` is written out (about 2 µs less per update than
        the general loop, which matters at OKS-SIL's margin to the kernel-row floor)."""
        neg_g = -self.current_gamma
        if self._compiled:  # K̃_s and ψ̃ in one call (the formulas below, index-order sums)
            K, b = compiled.fk.sample_kernel(self.sv.X, psi, idx, neg_g)
            if len(idx) != 3:
                return rld_residual(K, b)
            return self._rld3(K[0][1], K[0][2], K[1][2], *b)
        Xs = self.sv.X.take(idx, axis=0)
        G = np.dot(Xs, Xs.T).tolist()
        if len(idx) == 3:
            (g00, g01, g02), (_, g11, g12), (_, _, g22) = G
            d01 = g00 + g11 - 2.0 * g01
            d02 = g00 + g22 - 2.0 * g02
            d12 = g11 + g22 - 2.0 * g12
            k01 = math.exp(neg_g * d01) if d01 > 0.0 else 1.0
            k02 = math.exp(neg_g * d02) if d02 > 0.0 else 1.0
            k12 = math.exp(neg_g * d12) if d12 > 0.0 else 1.0
            return self._rld3(k01, k02, k12, *psi.take(idx).tolist())
        m = len(idx)
        K = [[1.0] * m for _ in idx]
        for i in range(1, m):
            Gi = G[i]
            for j in range(i):
                d = Gi[i] + G[j][j] - 2.0 * Gi[j]
                K[i][j] = K[j][i] = math.exp(neg_g * d) if d > 0.0 else 1.0
        return rld_residual(K, psi.take(idx).tolist())

    def _rld3(self, k01: float, k02: float, k12: float, b0: float, b1: float,
              b2: float) -> tuple[list[float] | None, float]:
        """:meth:`_rld` for ``s = 3`` from the off-diagonal kernel values and ψ̃."""
        sol = rld_residual_unit3(k01, k02, k12, b0, b1, b2)
        if sol is not None:
            return sol
        delta = rld_repeat_delta(k01, k02, k12, b0, b1, b2)
        if delta is not None and delta > self.nu + RLD_REPEAT_MARGIN:
            return None, delta
        return rld_residual([[1.0, k01, k02], [k01, 1.0, k12], [k02, k12, 1.0]], [b0, b1, b2])

    def _kernel_step(self, y: float, d2: np.ndarray, psi: np.ndarray, a: np.ndarray,
                     fw: float) -> None:
        """``γ ← clip(γ + ρ_t g Σ_j a_j ψ_j d²_j)`` with ``g = −y`` (paper) or ``ℓ'(f^w, y)``."""
        if self.recheck_margin:
            if y * fw >= 1.0:
                return
        grad = float(a @ (psi * d2))
        g = self.current_gamma - (self.rho / (self.t + 1)) * y * grad
        self.current_gamma = min(max(g, self.gamma_min), self.gamma_max)

    def _dist_args(self) -> tuple[tuple[Any, ...], np.ndarray, np.ndarray]:
        """The compiled rule's leading arguments, and its state arrays (updated in place)."""
        sv = self.sv
        ist, fst = self._rule_ist, self._rule_fst
        return ((self._rule, sv.X, sv.sqn, sv.a, None, sv.ids, sv.s, sv.n, self._rule_prm,
                 ist, fst, self.rng.bit_generator.capsule, self._rule_scratch, self._nzwork),
                ist, fst)

    def _dist_done(self, n: int, ist: np.ndarray, fst: np.ndarray) -> None:
        self.sv.n = n  # γ: in fst already

    def _run_block(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                   n_sv: np.ndarray | None, i: int, fired: Any) -> tuple[int, Any]:
        """Compiled rounds from row ``i``; a margin error runs :meth:`_update` with ψ and the
        distances (other rounds change nothing)."""
        sv = self.sv
        if sv.n == 0:
            return i, None  # the first round: the per-example code
        psi, d2 = self._psibuf, self._d2buf

        def on_fire(j: int) -> tuple[Any, ...]:
            n = sv.n
            fired(j, (compiled.head(psi, n), compiled.head(d2, n)))
            return self._fmap(), sv.a, sv.n

        j, _ = compiled.fk.run(self._fmap(), sv.a, X, zz, yv, i, X.shape[0], compiled.MARGIN,
                               None, 1.0, out, n_sv, sv.n, d2, psi, self._nzwork, on_fire)
        return j, None

    def _fmap(self) -> tuple[Any, ...]:
        sv = self.sv
        return compiled.dist_map(sv.X, sv.sqn, sv.n, self.current_gamma)

    # -- state -----------------------------------------------------------------------------
    def _get_state(self) -> dict[str, np.ndarray]:
        st = self.sv.get_state("sv.")
        st["oks_sil.gamma"] = np.array(self.current_gamma)
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        assert self.dim is not None  # for mypy: set_state fixes it first
        self.sv = SVStore.from_state(state, "sv.", self.dim, capacity=self.budget)
        self._fused = None  # step's head names the store's arrays
        self.current_gamma = float(state["oks_sil.gamma"])
        check_reals("oks_sil.gamma", self.current_gamma, 0.0)  # a NaN width loops in C
