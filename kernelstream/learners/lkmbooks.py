"""LKMBooks — kernel selection by expert advice with a shared memory budget
as run by Li & Liao (ECML-PKDD 2022).

Reference: J. Li and S. Liao, "Worst-case regret analysis of computationally budgeted online
kernel selection", Machine Learning 111, 2022; rules and constants of the code [C-P2]
(``LKMBooks.zip``) of its baseline runs in J. Li and S. Liao, ECML-PKDD 2022.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners._selection import (
    HORIZON_PARAM,
    LOSS_PARAM,
    SIGMAS_PARAM,
    WeightedWidths,
    sq_dist_row,
)
from kernelstream.learners.base import TIE_PARAM, Learner, Param, positive, unit_open
from kernelstream.learners.losses import LOSSES
from kernelstream.learners.registry import register

NU: dict[str, float] = {"logistic": 1.0 / 7.0, "square": 0.25, "absolute": 0.2}
_LOSS_CODES = {"logistic": 0, "square": 1, "absolute": 2}  # _ck_experts.c's
_UNIFORMS = 4096  # uniforms drawn per call of the compiled block at most
_NO_U = np.empty(0)  # no uniforms: a round at the budget draws none


@register
class LKMBooks(WeightedWidths, Learner):
    """LKMBooks: one shared support set (at most ``budget`` points, shared coefficients)
    evaluated under every Gaussian width; the prediction is the ``p``-weighted combination.

    Round ``t`` (C-P2):

    1. ``f_i = Σ_j a_j κ_i(x_j, x)`` for every width (one distance row, ``K`` exponentials);
       ``f = Σ_i p_i f_i``.
    2. ``g = ℓ'(f, y)``; linearised, shifted expert losses ``c_i = g (f_i − min f)/g_max`` if
       ``g > 0``, else ``g (f_i − max f)/g_max`` (both ≥ 0); ``p_i ← p_i e^{−η c_i}``,
       renormalised; then ``g_max ← max(g_max, max f − min f)`` (``g_max`` starts at 1).
    3. ``P = min(1, B/((1−ν) T^{1−ν} t^ν))``; with probability ``P`` (one Bernoulli draw from
       the learner's RNG, only while ``|S| < B``) add ``x`` with coefficient ``−λ g/P``. Once
       the budget is full the hypotheses are fixed and only ``p`` adapts.

    Constants (C-P2): ``ν`` = 1/7 (logistic), 1/4 (square), 1/5 (absolute);
    ``λ = 10/√T`` (logistic) or ``√((1+ν)B)/(√(1−ν) T)`` (square, absolute);
    expert rate ``η = √(8 ln K/T)``. ``T`` is ``horizon``; unknown (None): a doubling guess
    ``1000·2^k`` (constants re-derived when it doubles). The C-P2 square-loss file omits the
    ``min(1, ·)`` (no effect for its parameter values). Memory ``O(Bd)``; cost
    ``O(Bd + KB)`` per round.

    ``selected_kernel`` is the kernel of largest weight; ``kernel_distribution`` is ``p``.

    Parameters
    ----------
    loss
        ``logistic`` (classification), ``square`` or ``absolute`` (regression); default
        ``logistic``.
    sigmas
        Gaussian widths (default ``2^-2..2^3``).
    budget
        ``B``; default 200 (Li & Liao 2022 tuned it to the time budget: 200–260).
    horizon
        Stream length ``T`` (default None: unknown, a doubling guess ``1000·2^k ≥ t``).
    nu
        ``ν`` in (0, 1); ``None`` = the C-P2 value of the loss.
    eta
        Gradient step ``λ``; ``None`` = the C-P2 formula.
    hedge_rate
        Expert rate ``η``; ``None`` = ``√(8 ln K/T)``.
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> import numpy as np
    >>> from kernelstream.learners import make
    >>> m = make("lkmbooks", seed=0, budget=30, horizon=300)
    >>> X = np.random.default_rng(0).normal(size=(300, 2)); y = np.where(X[:, 0] > 0, 1, -1)
    >>> _ = m.predict_learn_many(X, y)
    >>> m.n_support_vectors <= 30, round(float(m.kernel_distribution.sum()), 12)
    (True, 1.0)
    """

    name = "lkmbooks"
    params = (
        LOSS_PARAM,
        SIGMAS_PARAM,
        Param("budget", 200, int, "maximum number B of stored points (shared by all kernels)",
              positive, "> 0"),
        HORIZON_PARAM,
        Param("nu", None, float, "nu of the sampling probability (None: 1/7 logistic, 1/4 "
              "square, 1/5 absolute)", unit_open, "in (0, 1)"),
        Param("eta", None, float, "gradient step lambda (None: 10/sqrt(T) logistic, "
              "sqrt((1+nu)B)/(sqrt(1-nu) T) otherwise)", positive, "> 0"),
        Param("hedge_rate", None, float, "expert-advice rate eta (None: sqrt(8 ln K / T))",
              positive, "> 0"),
        TIE_PARAM,
    )
    randomized = True
    reference = ("Li & Liao, Machine Learning 2022; as in the code [C-P2] of Li & Liao, "
                 "ECML-PKDD 2022")

    loss: str
    sigmas: str
    budget: int
    horizon: int | None
    nu: float | None
    eta: float | None
    hedge_rate: float | None

    def _configure(self) -> None:
        super()._configure()
        self._deriv = LOSSES[self.loss].deriv
        self._nu = NU[self.loss] if self.nu is None else self.nu

    def _setup(self, d: int) -> None:
        B = self.budget
        self.X = np.zeros((B, d))
        self.sqn = np.zeros(B)
        self.a = np.zeros(B)
        self.n = 0
        self.p = np.full(self.K, 1.0 / self.K)
        self.gmax = 1.0
        self._tune_horizon()
        self._fused = None  # step's arguments, of the parameters before a restore

    def _retune(self, T: int) -> None:
        nu, B, K = self._nu, self.budget, self.K
        if self.eta is not None:
            self._lam = self.eta
        elif self.loss == "logistic":
            self._lam = 10.0 / math.sqrt(T)
        else:
            self._lam = math.sqrt((1.0 + nu) * B) / (math.sqrt(1.0 - nu) * T)
        self._rate = (math.sqrt(8.0 * math.log(K) / T) if self.hedge_rate is None
                      else self.hedge_rate)
        self._pden = (1.0 - nu) * T ** (1.0 - nu)
        self._T = T

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        n = self.n
        if n == 0:
            return 0.0, np.zeros(self.K)
        fv = self.widths.rows(sq_dist_row(self.X[:n], self.sqn[:n], x, xx)).dot(self.a[:n])
        return float(self.p.dot(fv)), fv

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        t = self._round()
        fv = aux
        g = self._deriv(score, y)
        lo, hi = float(fv.min()), float(fv.max())
        if g != 0.0 and hi > lo:
            c = (fv - lo) if g > 0.0 else (fv - hi)
            c *= g / self.gmax
            p = self.p * np.exp(-self._rate * c)
            z = p.sum()
            if z > 0.0 and math.isfinite(z):
                self.p = p / z
            else:
                # Every surviving weight underflowed (c can be far above 1: g_max is the range
                # seen *before* this round): the same update in the log domain.
                with np.errstate(divide="ignore"):
                    lw = np.log(self.p) - self._rate * c
                w = np.exp(lw - lw.max())
                self.p = w / w.sum()
        self.gmax = max(self.gmax, hi - lo)
        n = self.n
        if n < self.budget:
            prob = min(1.0, self.budget / (self._pden * t ** self._nu))
            if self.rng.random() < prob:
                self.X[n] = x
                self.sqn[n] = xx
                self.a[n] = -self._lam * g / prob
                self.n = n + 1

    # -- compiled rounds --------------------------------------------------------------------
    # step's kept arguments of ek.lkm_run: (T they were derived for, consts, neg γ, loss code,
    # 1-row zz, y and out, scratch); never pickled (rebuilt by the next step)
    _fused: tuple[Any, ...] | None = None

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st.pop("_fused", None)
        return st

    def step(self, x: Any, y: Any) -> float:
        """Predict then learn; returns the pre-update score. With the compiled blocks, a dense
        float64 row and a label of ±1 (int or float) run as a block of one row
        (``ek.lkm_run``, the block's code and numbers) with its arguments kept between rounds;
        a round it leaves to Python (the first points, a retune, the hedge's log-domain
        fallback), and anything else, bad input included, takes :meth:`Learner.step`."""
        ek = compiled.ek
        if (ek is not None and self.dim is not None and (type(y) is float or type(y) is int)
                and (y == 1 or y == -1) and 2 <= self.K <= 128 and self.dim >= 2
                and self.n >= 2 and (self.horizon is not None or self.t < self._T)):
            xx = self._fast_sqnorm(x)
            if xx - xx == 0.0:  # the fast lane's row, finite
                c = self._fused
                if c is None or c[0] != self._T:
                    c = self._fused = self._lkm_args()
                _, consts, neg, code, zz1, y1, out1, work = c
                zz1[0], y1[0] = xx, y
                rng, u, saved = self.rng, _NO_U, None
                if self.n < self.budget:  # the round's uniform, drawn as _update draws it
                    saved = rng.bit_generator.state
                    u = rng.random(1)
                j, self.n, self.gmax, used, _ = ek.lkm_run(
                    x.reshape(1, -1), zz1, y1, 0, 1, self.t + 1, out1, None, self.X, self.sqn,
                    self.a, self.p, neg, self.n, self.gmax, consts, code, u, *work)
                if j == 1:
                    if self._pending is not None:  # undoes a pending draw
                        self._drop_pending()
                    self.t += 1
                    return cast(float, out1.item(0))
                if saved is not None and used == 0:  # the Python round draws it again
                    rng.bit_generator.state = saved
        return super().step(x, y)

    def _lkm_args(self) -> tuple[Any, ...]:
        B, K = self.budget, self.K
        return (self._T, np.array([B, self._lam, self._rate, self._pden, self._nu]),
                -self.widths.gammas, _LOSS_CODES[self.loss], np.empty(1), np.empty(1),
                np.empty(1), (np.empty(B), np.empty(K * B), np.empty(K), np.empty(K)))

    # -- compiled blocks --------------------------------------------------------------------
    def _learn_rows(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        """The rounds of :meth:`_score` and :meth:`_update` in C (``compiled.ek.lkm_run``,
        numpy's own BLAS and exp: the same numbers), back here for the rounds it leaves to
        this code (the first points, a retune of an unknown horizon, the log-domain hedge).

        The Bernoulli draws: the uniforms of the next rounds are drawn ahead; the C code uses
        one per round that starts with ``|S| < B``, as :meth:`_update` does, and the Generator
        is rewound and advanced by the number used, so it ends where the per-example code
        leaves it."""
        ek = compiled.ek
        # a block of a few rows costs less per example than the compiled block's set-up
        if ek is None or self.K < 2 or self.K > 128 or X.shape[1] < 2 or X.shape[0] < 8:
            super()._learn_rows(X, zz, yv, out, n_sv)
            return
        B, K = self.budget, self.K
        work = (np.empty(B), np.empty(K * B), np.empty(K), np.empty(K))
        neg = -self.widths.gammas
        code = _LOSS_CODES[self.loss]
        rows = X.shape[0]
        rng = self.rng
        none = np.empty(0)
        i = 0
        while i < rows:
            end = rows
            if self.horizon is None:  # a round beyond the guess of T retunes (in Python)
                end = min(rows, i + max(self._T - self.t, 0))
            u, saved = none, None
            if self.n < B and end > i:
                saved = rng.bit_generator.state
                u = rng.random(min(end - i, _UNIFORMS))
            consts = np.array([B, self._lam, self._rate, self._pden, self._nu])
            j, self.n, self.gmax, used, status = ek.lkm_run(
                X, zz, yv, i, end, self.t + 1, out, n_sv, self.X, self.sqn, self.a, self.p,
                neg, self.n, self.gmax, consts, code, u, *work)
            if saved is not None and used < len(u):
                rng.bit_generator.state = saved  # back to before the draws, then the used ones
                rng.random(used)
            self.t += j - i
            if j >= rows:
                return
            if status == 1:  # uniforms used up: draw the next ones
                i = j
                continue
            s, aux = self._score(X[j], float(zz[j]))
            out[j] = s
            self._update(X[j], float(zz[j]), float(yv[j]), s, aux)
            self.t += 1
            if n_sv is not None:
                n_sv[j] = self.n
            i = j + 1

    @property
    def n_support_vectors(self) -> int:
        return self.n if self.dim is not None else 0

    def _get_state(self) -> dict[str, np.ndarray]:
        n = self.n
        return {"lkm.X": self.X[:n].copy(), "lkm.sqn": self.sqn[:n].copy(),
                "lkm.a": self.a[:n].copy(), "lkm.p": self.p.copy(),
                "lkm.gmax": np.array(self.gmax)}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        n = len(state["lkm.a"])
        self.X[:n] = state["lkm.X"]
        self.sqn[:n] = state["lkm.sqn"]
        self.a[:n] = state["lkm.a"]
        self.n = n
        self.p = np.array(state["lkm.p"], dtype=np.float64)
        self.gmax = float(state["lkm.gmax"])
