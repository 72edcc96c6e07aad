"""OKL-GD: kernel least-mean-square with an adaptive kernel size, adapted to classification as
in Zhang & Liao, IJCAI 2020.

Reference: B. Chen, J. Liang, N. Zheng and J. C. Príncipe, "Kernel least mean square with
adaptive kernel size", Neurocomputing 191, 2016 (KLMS-AKS); used as the baseline "OKL-GD" of
X. Zhang and S. Liao, IJCAI 2020, which describes its adaptation in one sentence
(hinge loss instead of the square loss, at most 2000 stored instances). Everything beyond that
sentence is a reconstruction (the KLMS-AKS width update, the hinge adaptation and the
memory rule are not specified by Zhang & Liao).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import TIE_PARAM, Param, positive
from kernelstream.learners.oks_sil import (
    IntervalWidthLearner,
    gaussian_interval_params,
    paper_initial_gamma,
)
from kernelstream.learners.registry import register

_NO_ROW = np.empty(0)  # distances and row of a round against no centre


def _sigma(gamma: float) -> float:
    return 1.0 / math.sqrt(2.0 * gamma)


@register
class OKLGD(IntervalWidthLearner):
    """OKL-GD: kernel OGD on the hinge loss where every support vector keeps the Gaussian width
    that was current when it was inserted, and the width is adapted by the KLMS-AKS rule.

    ``f(x) = Σ_j a_j exp(−‖x − x_j‖²/(2σ_j²))``. On a margin error (``y_t f(x_t) < 1``; the
    "error" ``e_t = −ℓ'(f, y_t) = y_t``, 0 otherwise and then nothing changes):

    1. width step (gradient of the loss w.r.t. the width of the most recent centre
       ``(x_last, e_last)``, constant factors absorbed in ``ρ``):
       ``σ ← σ + ρ e_t e_last κ_σ(x_last, x_t) ‖x_last − x_t‖² / σ³``, clipped to the interval Ω
       (``σ`` is the running width, which is the width of the most recent centre);
    2. add ``x_t`` with coefficient ``η e_t`` and the updated width ``σ``; when ``budget``
       centres are stored the **oldest** one is overwritten.

    Decisions (all UNCERTAIN: Zhang & Liao describe the adaptation in one sentence):

    * KLMS-AKS order (Chen et al. 2016): the width is updated first and the new centre gets the
      updated width; the kernel value in the step uses the running width, which is exactly the
      width of the most recent centre, so the step is the true (scaled) partial derivative;
    * only margin-error rounds add a centre and move the width (the hinge derivative is 0
      otherwise); ``e_last`` is the label of the most recently added centre;
    * the width stays in Zhang & Liao's interval Ω (same ``gamma_min``/``gamma_max`` as OKS-SIL);
    * the 2000-instance limit of Zhang & Liao drops the oldest centre (they do not say which);
    * ``ρ`` is constant (KLMS-AKS uses a fixed step; Zhang & Liao give no value); default 1.

    Observed behaviour (``kernelstream reproduce p0``): with Zhang & Liao's wide initial widths
    (``σ_1 ≥ 2^2.5`` on [0, 1]-scaled data) the ``1/σ³`` factor makes the steps tiny, so the
    kernel stays nearly constant and the learner predicts the majority class; a larger ``ρ``
    lets ``σ`` run to either end of Ω. A fixed good width does much better, so the published
    OKL-GD rows were probably produced by a different (unpublished) width rule.

    Parameters
    ----------
    budget
        Maximum number of stored centres (default 2000, Zhang & Liao's limit); the oldest is
        dropped.
    eta
        KOGD step size ``η`` (Zhang & Liao tune it in ``{10^-5..10^0}``; default 0.1).
    rho
        Width step size ``ρ`` (default 1).
    gamma
        Initial ``γ = 1/(2σ²)`` (``sigma`` is accepted); must lie in ``[gamma_min, gamma_max]``.
        Ignored when ``random_init=True``.
    gamma_min, gamma_max
        The interval Ω of ``γ`` (default 2^-12 to 2^12, i.e. ``σ ∈ [2^-6.5, 2^5.5]``).
    random_init
        Draw the initial width as in Zhang & Liao's experiments (``σ_1 = 2^{-(i+1)/2}``,
        ``i`` uniform in ``{-12..-6}``) from the learner's RNG — its only randomness (default
        False).
    tie
        Label predicted for a zero score.

    Cost: O(min(t, B)·d) per round; memory O(B·d).

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("okl-gd", budget=2, eta=0.5, gamma=0.5)
    >>> for x, y in [([0.0, 0.0], 1), ([1.0, 0.0], -1), ([0.0, 1.0], -1)]:
    ...     m.learn_one(x, y)
    >>> m.n_support_vectors  # the oldest centre was dropped
    2
    >>> [round(float(g), 4) for g in m.widths_gamma]  # γ per centre; slot 0 was overwritten
    [2.5262, 3.2296]
    """

    name = "okl-gd"
    params = (
        Param("budget", 2000, int, "maximum number of stored centres (oldest dropped)",
              positive, "> 0"),
        Param("eta", 0.1, float, "KOGD step size η", positive, "> 0"),
        Param("rho", 1.0, float, "width step size ρ (KLMS-AKS)", positive, "> 0"),
        *gaussian_interval_params("initial Gaussian parameter γ = 1/(2σ²) (sigma is accepted)"),
        TIE_PARAM,
    )
    randomized = False  # instances with random_init=True set it to True
    reference = ("Chen, Liang, Zheng & Príncipe, Neurocomputing 2016 (KLMS-AKS), hinge "
                 "adaptation of Zhang & Liao, IJCAI 2020")

    def _configure(self) -> None:
        self.randomized = self.random_init
        self._sig_lo = _sigma(self.gamma_max)
        self._sig_hi = _sigma(self.gamma_min)

    # the state the compiled rule updates lives in its arrays (no copy to sync per round)
    head = compiled.rule_state("_rule_ist", 0, "head")  # slot of the oldest centre once full
    last = compiled.rule_state("_rule_ist", 1, "last")  # slot of the most recent centre
    e_last = compiled.rule_state("_rule_fst", 0, "e_last")
    sigma = compiled.rule_state("_rule_fst", 1, "sigma")  # the running width σ

    def _setup(self, d: int) -> None:
        B = self.budget
        self._rule_ist = np.zeros(2, dtype=np.int64)  # head, last
        self._rule_fst = np.zeros(2)  # e_last, sigma
        self._fused = None  # step's head: of the arrays before
        self.X = np.zeros((B, d))
        self.sqn = np.zeros(B)
        self.a = np.zeros(B)
        self.g = np.zeros(B)  # γ_j of each centre
        self.n = 0
        self.head = 0  # slot of the oldest centre once full
        self.last = -1  # slot of the most recent centre
        self.e_last = 0.0
        g0 = paper_initial_gamma(self.rng) if self.random_init else self.gamma
        self.sigma = _sigma(g0)
        self._compiled = compiled.fk is not None  # compiled rows (per-centre widths) and blocks
        if self._compiled:
            self._nzwork = np.empty(d, dtype=np.int64)
            self._d2buf = np.empty(B)
            self._kbuf = np.empty(B)
        # the update compiled too (_ck_budget.c): blocks run in C, updates included
        self._rule = compiled.DIST_RULES[self.name] if self._compiled and compiled.bk else 0
        if self._rule:
            self._rule_prm = np.array([B, self.eta, self.rho, self._sig_lo, self._sig_hi])
            self._rule_scratch = np.empty(2 * B)

    @property
    def kernel_gamma(self) -> float | None:
        return self.current_gamma if self.dim is not None else None

    @property
    def n_support_vectors(self) -> int:
        return self.n if self.dim is not None else 0

    @property
    def current_gamma(self) -> float:
        """``γ = 1/(2σ²)`` of the running width (given to the next centre)."""
        return 0.5 / (self.sigma * self.sigma)

    @property
    def widths_gamma(self) -> np.ndarray:
        return self.g[: self.n].copy()

    # -- per round -------------------------------------------------------------------------
    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        n = self.n
        if n == 0:
            return 0.0, None
        if self._compiled:  # the numbers below, up to round-off (sums in another order)
            d2, k = np.empty(n), np.empty(n)
            f = compiled.fk.score(self._fmap(), self.a,
                                  x if x.flags.c_contiguous else np.ascontiguousarray(x), xx,
                                  d2, k, self._nzwork)
            return f, (d2, k)
        d2 = self.X[:n] @ x
        d2 *= -2.0
        d2 += self.sqn[:n]
        d2 += xx
        np.maximum(d2, 0.0, out=d2)
        k = d2 * self.g[:n]
        np.negative(k, out=k)
        np.exp(k, out=k)
        return float(self.a[:n] @ k), (d2, k)

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._rule:  # the same update compiled (_ck_budget.c), which the blocks run
            d2, k = aux if aux is not None else (_NO_ROW, _NO_ROW)
            self._rule_update(x, xx, y, score, d2, k)
            return
        if y * score >= 1.0:
            return
        sig = self.sigma
        j = self.last
        if j >= 0:  # width step on the most recent centre (its width is the running σ)
            d2, k = aux
            sig += self.rho * y * self.e_last * float(k[j]) * float(d2[j]) / (sig * sig * sig)
            sig = min(max(sig, self._sig_lo), self._sig_hi)
            self.sigma = sig
        if self.n < self.budget:
            j = self.n
            self.n += 1
        else:
            j = self.head
            self.head = (j + 1) % self.budget
        self.X[j] = x
        self.sqn[j] = xx
        self.a[j] = self.eta * y
        self.g[j] = 0.5 / (sig * sig)
        self.last = j
        self.e_last = y

    def _dist_args(self) -> tuple[tuple[Any, ...], np.ndarray, np.ndarray]:
        """The compiled rule's leading arguments, and its state arrays (updated in place)."""
        ist, fst = self._rule_ist, self._rule_fst
        return ((self._rule, self.X, self.sqn, self.a, self.g, None, None, self.n,
                 self._rule_prm, ist, fst, None, self._rule_scratch, self._nzwork), ist, fst)

    def _dist_done(self, n: int, ist: np.ndarray, fst: np.ndarray) -> None:
        self.n = n  # head, last, e_last, sigma: in ist, fst already

    def _run_block(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                   n_sv: np.ndarray | None, i: int, fired: Any) -> tuple[int, Any]:
        """Compiled rounds from row ``i``; a margin error runs :meth:`_update` with its
        distances and kernel row (other rounds change nothing)."""
        if self.n == 0:
            return i, None  # the first round: the per-example code
        d2, k = self._d2buf, self._kbuf

        def on_fire(j: int) -> tuple[Any, ...]:
            fired(j, (d2, k))  # whole buffers: the update reads one centre's entries
            return self._fmap(), self.a, self.n

        j, _ = compiled.fk.run(self._fmap(), self.a, X, zz, yv, i, X.shape[0], compiled.MARGIN,
                               None, 1.0, out, n_sv, self.n, d2, k, self._nzwork, on_fire)
        return j, None

    def _fmap(self) -> tuple[Any, ...]:
        return compiled.dist_map(self.X, self.sqn, self.n, self.g)

    # -- state -----------------------------------------------------------------------------
    def _get_state(self) -> dict[str, np.ndarray]:
        n = self.n
        return {
            "okl.X": self.X[:n].copy(), "okl.sqn": self.sqn[:n].copy(), "okl.a": self.a[:n].copy(),
            "okl.g": self.g[:n].copy(),
            "okl.ints": np.array([self.head, self.last], dtype=np.int64),
            "okl.floats": np.array([self.e_last, self.sigma]),
        }

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        n = len(state["okl.a"])
        self.X[:n] = state["okl.X"]
        self.sqn[:n] = state["okl.sqn"]
        self.a[:n] = state["okl.a"]
        self.g[:n] = state["okl.g"]
        self.n = n
        self.head, self.last = (int(v) for v in state["okl.ints"])
        self.e_last, self.sigma = (float(v) for v in state["okl.floats"])
