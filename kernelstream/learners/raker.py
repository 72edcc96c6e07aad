"""Raker — random-feature online multi-kernel learning, as run by
Li & Liao (ECML-PKDD 2022).

Reference: Y. Shen, T. Chen and G. B. Giannakis, "Random feature-based online multi-kernel
learning in environments with unknown dynamics", JMLR 20(22), 2019; the version and constants
below are those of the code [C-P2] (``Raker.zip``) of its baseline runs in J. Li and S. Liao,
ECML-PKDD 2022.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernelstream.learners._selection import (
    HORIZON_PARAM,
    LOSS_PARAM,
    SIGMAS_PARAM,
    WeightedWidths,
)
from kernelstream.learners.base import TIE_PARAM, Learner, Param, nonneg, positive
from kernelstream.learners.experts import hedge
from kernelstream.learners.oks_pp import QUIRKS_DOC
from kernelstream.learners.registry import register
from kernelstream.learners.rff import FeaturePool

# (step constant c in η = c/√T, regulariser μ, loss scale l_max) per loss (C-P2)
RAKER_CONSTANTS: dict[str, tuple[float, float, float]] = {
    "logistic": (5.0, 0.005, 2.0), "square": (5.0, 0.01, 1.0), "absolute": (1.0, 0.01, 2.0),
}


def loss_and_grad(loss: str, f: np.ndarray, y: float) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ``ℓ(f_i, y)`` and ``ℓ'(f_i, y)`` for a vector of scores (the scalings of
    :mod:`kernelstream.learners.losses`)."""
    if loss == "logistic":
        m = y * f
        return np.logaddexp(0.0, -m), -y / (1.0 + np.exp(np.minimum(m, 700.0)))
    r = f - y
    if loss == "square":
        return r * r, 2.0 * r
    return np.abs(r), np.sign(r)


@register
class Raker(WeightedWidths, Learner):
    """Raker: one random-feature model per Gaussian width, combined by exponential weights
    (full information: every model is updated every round).

    Round (C-P2): ``z_i = z_i(x)`` from one shared draw ``Ω`` (``D × d``, ``N(0, 1)``) rescaled
    by ``1/σ_i``; ``f_i = W_i·z_i``; prediction ``f = Σ_i p_i f_i``. For every ``i``:
    ``L_i += (ℓ(f_i, y) + μ‖W_i‖²)/l_max`` (pre-update ``W_i``),
    ``W_i ← (1 − 2ημ) W_i − η ℓ'(f_i, y) z_i``; then ``p = softmax(−η L)``. One step size
    ``η`` for the models and the weights. Constants (C-P2): ``η = 5/√T`` (logistic, square) or
    ``1/√T`` (absolute), ``μ`` = 0.005 (logistic) or 0.01, ``l_max`` = 2 (logistic, absolute)
    or 1 (square). ``T`` is ``horizon``; unknown (None): a doubling guess ``1000·2^k`` (η is
    re-derived when it doubles). Memory ``O(Dd + KD)``; cost ``O(Dd + KD)`` per round.

    The original algorithm draws independent features per kernel and uses two step sizes; the
    shared draw and single ``η`` are those of the code that produced Li & Liao's numbers.

    ``reference_quirks=True`` replicates ``Raker-*.R``: ``Ωx`` is divided by ``σ_j``
    cumulatively inside the kernel loop, so kernel ``j`` effectively has width
    ``Π_{l≤j} σ_l`` (for ``2^-2..2^3``: ``2^-2, 2^-3, 2^-3, 2^-2, 2^0, 2^3``). The published
    Raker numbers used it; default False uses the stated widths.

    ``selected_kernel`` is the kernel of largest weight (Raker combines, it does not select);
    ``kernel_distribution`` is ``p``.

    Parameters
    ----------
    loss
        ``logistic`` (classification), ``square`` or ``absolute`` (regression); default
        ``logistic``.
    sigmas
        Gaussian widths (default ``2^-2..2^3``).
    n_components
        ``D`` per kernel; default 50 (Li & Liao 2022 tuned it to the time budget: 40–100).
    horizon
        Stream length ``T`` (default None: unknown, a doubling guess ``1000·2^k ≥ t``).
    eta
        Step size; ``None`` = the C-P2 formula above.
    mu
        Regularisation ``μ``; ``None`` = the C-P2 value of the loss.
    loss_max
        Loss scale ``l_max`` of the weights; ``None`` = the C-P2 value of the loss.
    reference_quirks
        See above (default False).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> import numpy as np
    >>> from kernelstream.learners import make
    >>> m = make("raker", seed=0, n_components=20, horizon=100)
    >>> X = np.random.default_rng(0).normal(size=(100, 3)); y = np.where(X[:, 0] > 0, 1, -1)
    >>> _ = m.predict_learn_many(X, y)
    >>> round(float(m.kernel_distribution.sum()), 12)
    1.0
    """

    name = "raker"
    params = (
        LOSS_PARAM,
        SIGMAS_PARAM,
        Param("n_components", 50, int, "number D of random Fourier frequencies (shared draw)",
              positive, "> 0"),
        HORIZON_PARAM,
        Param("eta", None, float, "step size (None: 5/sqrt(T), or 1/sqrt(T) for absolute loss)",
              positive, "> 0"),
        Param("mu", None, float, "regularisation mu (None: 0.005 logistic, 0.01 otherwise)",
              nonneg, ">= 0"),
        Param("loss_max", None, float, "loss scale l_max of the kernel weights (None: 2 "
              "logistic and absolute, 1 square)", positive, "> 0"),
        Param("reference_quirks", False, bool, QUIRKS_DOC),
        TIE_PARAM,
    )
    randomized = True
    reference = ("Shen, Chen & Giannakis, JMLR 2019; as in the code [C-P2] of Li & Liao, "
                 "ECML-PKDD 2022")

    loss: str
    sigmas: str
    n_components: int
    horizon: int | None
    eta: float | None
    mu: float | None
    loss_max: float | None
    reference_quirks: bool

    def _configure(self) -> None:
        super()._configure()
        sig = self.widths.sigmas
        # QUIRK: cumulative division by σ_j in the C-P2 kernel loop
        self._feature_widths = np.cumprod(sig) if self.reference_quirks else sig
        c, mu, lmax = RAKER_CONSTANTS[self.loss]
        self._c = c
        self._mu = mu if self.mu is None else self.mu
        self._lmax = lmax if self.loss_max is None else self.loss_max

    def _setup(self, d: int) -> None:
        self._rf = FeaturePool(self.rng, d, self._feature_widths, self.n_components)
        self.L = np.zeros(self.K)
        self.p = np.full(self.K, 1.0 / self.K)
        self._tune_horizon()

    def _retune(self, T: int) -> None:
        self._eta = self._c / math.sqrt(T) if self.eta is None else self.eta
        self._T = T

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        fv, Z = self._rf.eval_all(x)  # K scores, K × 2D features
        return float(self.p.dot(fv)), (fv, Z)

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        self._round()
        fv, Z = aux
        W, eta, mu = self._rf.W, self._eta, self._mu
        ell, g = loss_and_grad(self.loss, fv, y)
        self.L += (ell + mu * np.einsum("ij,ij->i", W, W)) / self._lmax
        if mu:
            W *= 1.0 - 2.0 * eta * mu
        W -= (eta * g)[:, None] * Z
        self.p = hedge(self.L, eta)

    def memory_bound(self) -> int | None:
        return 0  # random features: no stored rows (memory fixed by n_components)

    def _get_state(self) -> dict[str, np.ndarray]:
        return {**self._rf.get_state("raker."), "raker.L": self.L.copy(),
                "raker.p": self.p.copy()}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self._rf.set_state(state, "raker.")
        self.L = np.array(state["raker.L"], dtype=np.float64)
        self.p = np.array(state["raker.p"], dtype=np.float64)
