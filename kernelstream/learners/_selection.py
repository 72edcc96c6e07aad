"""Shared block of the kernel-selection learners over ``K`` Gaussian widths (Yang et al. 2012;
Liao & Li, ECML-PKDD 2021; Li & Liao, ECML-PKDD 2022): their parameters and base classes.

API
---
* :data:`SIGMAS_PARAM`, :func:`parse_sigmas` — the candidate widths ``σ_1..σ_K`` as one string
  parameter: comma-separated numbers, ``2^e`` tokens, or ``2^a:s:b`` ranges (inclusive, as the
  papers write ``2^{-2:0.5:3.5}``), e.g. ``"0.25,0.5,1"``, ``"2^-2:1:3"``.
* :data:`HORIZON_PARAM`, :func:`horizon_guess` — the stream length ``T`` of the T-dependent
  constants; ``None`` = unknown: ``T`` is guessed as ``1000·2^k ≥ t`` (a function of the round
  only, so it needs no state). :class:`HorizonTuning` — mixin re-deriving a learner's
  ``T``-dependent constants (``_retune(T)``) whenever that guess doubles.
* :class:`SelectionLearner` — base class: ``randomized``/``draws_in_predict`` set, the widths
  configured from ``sigmas``, and the ``selected_kernel`` / ``kernel_distribution`` properties
  backed by ``self._selected`` (set in ``_score``) and ``self._distribution()`` (override).
* :class:`WeightedWidths`, :data:`LOSS_PARAM` — mixin of learners that combine the widths with
  weights ``p`` instead of drawing one (Raker, LKMBooks): task from the loss, widths,
  ``kernel_distribution = p``, ``selected_kernel = argmax p``.

The kernels and the stores the learners keep per width live in their own modules and are
re-exported here (the learners and tests import them from this module):

* :mod:`kernelstream.learners._pools` — :class:`GaussianWidths`, :func:`sq_dist_row`,
  :class:`KernelPool` (a store per width) and :class:`SharedPool` (one point set for all).
* :mod:`kernelstream.learners._mirror` — :class:`OptimisticMirror` and :class:`RoundContext`,
  the AO2MD bookkeeping of Liao & Li, ECML-PKDD 2021 (B(AO)2KS, EA2OKS, BEA2OKS).

Gaussian kernels only (``κ(x, x) = 1``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

# the kernels and stores are re-exported (learners and tests import them from here)
from kernelstream.learners._mirror import OptimisticMirror, RoundContext
from kernelstream.learners._pools import GaussianWidths, KernelPool, SharedPool, sq_dist_row
from kernelstream.learners.base import Learner, Param, positive
from kernelstream.learners.kernels import parse_sigmas
from kernelstream.learners.losses import LOSSES

__all__ = [
    "HORIZON_GUESS0",
    "HORIZON_PARAM",
    "LOSS_PARAM",
    "P1_SIGMAS",
    "SIGMAS_PARAM",
    "GaussianWidths",
    "HorizonTuning",
    "KernelPool",
    "OptimisticMirror",
    "RoundContext",
    "SelectionLearner",
    "SharedPool",
    "WeightedWidths",
    "horizon_guess",
    "parse_sigmas",
    "sq_dist_row",
]


# -- parameters ----------------------------------------------------------------------------------
P1_SIGMAS = "2^-2:1:3"  # σ ∈ {2^-2, ..., 2^3}, K = 6 (Liao & Li 2021, experiment 2; Li & Liao 2022)
HORIZON_GUESS0 = 1000  # first guess of T when the horizon is unknown (doubled as needed)

def _valid_sigmas(text: Any) -> bool:
    try:
        return len(parse_sigmas(text)) > 0  # a list parse_sigmas accepts is never empty
    except ValueError:
        return False


SIGMAS_PARAM = Param(
    "sigmas", P1_SIGMAS, str,
    "Gaussian widths sigma_i of the K candidate kernels exp(-||x-x'||^2/(2 sigma_i^2)): "
    "comma-separated numbers or 2^e tokens, or a range 2^a:step:b (default 2^-2..2^3)",
    _valid_sigmas,
    "a list of widths > 0 within about 1e-154 to 1e154 (e.g. '0.5,1,2' or '2^-2:1:3')",
)
HORIZON_PARAM = Param(
    "horizon", None, int,
    "stream length T used by the T-dependent constants; None = unknown: T is guessed as "
    f"{HORIZON_GUESS0}·2^k, doubled whenever the round index exceeds it",
    positive, "> 0",
)


def horizon_guess(t: int, horizon: int | None) -> int:
    """``T`` for round ``t`` (1-based): the given horizon, else the smallest
    ``HORIZON_GUESS0·2^k ≥ t``."""
    if horizon is not None:
        return horizon
    T = HORIZON_GUESS0
    while T < t:
        T *= 2
    return T


class HorizonTuning:
    """Mixin for constants that depend on the stream length ``T`` (parameter ``horizon``).

    The learner derives them in ``_retune(T)``; :meth:`_tune_horizon` (in ``_setup``) sets the
    first ``T``, and :meth:`_round` (first thing of every update) re-derives them when the
    round index exceeds the doubling guess of an unknown horizon (:func:`horizon_guess`)."""

    horizon: int | None
    t: int
    _T: int

    def _retune(self, T: int) -> None:
        raise NotImplementedError

    def _tune_horizon(self) -> None:
        self._T = 0  # no previous T (``_retune`` may test it)
        self._retune(horizon_guess(self.t, self.horizon))

    def _round(self) -> int:
        """The 1-based index ``t`` of the round being learned."""
        t = self.t + 1
        if t > self._T and self.horizon is None:
            self._retune(horizon_guess(t, self.horizon))
        return t


# -- learner base --------------------------------------------------------------------------------
class SelectionLearner(Learner):
    """Base of learners that select among ``K`` Gaussian widths (parameter ``sigmas``).

    Subclasses set ``self._selected`` to the kernel drawn in ``_score`` and implement
    ``_distribution()`` (the probability vector of the next draw).
    """

    randomized = True
    draws_in_predict: ClassVar[bool] = True
    _draw_attrs: ClassVar[tuple[str, ...]] = ("_selected",)

    sigmas: str
    _selected: int = -1

    def _configure(self) -> None:
        self.widths = GaussianWidths(parse_sigmas(self.sigmas))
        self.K = self.widths.K

    def _distribution(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def selected_kernel(self) -> int | None:
        """Index of the kernel that formed the last prediction (``None`` before the first)."""
        if self.dim is None or self._selected < 0:
            return None
        return int(self._selected)

    @property
    def kernel_distribution(self) -> np.ndarray:
        """Probabilities of the next draw (a fresh, normalised copy)."""
        if self.dim is None:
            return np.full(self.K, 1.0 / self.K)
        p = np.array(self._distribution(), dtype=np.float64)
        return p / p.sum()


LOSS_PARAM = Param("loss", "logistic", str,
                   "loss: logistic (classification), square or absolute (regression)",
                   choices=("logistic", "square", "absolute"))


class WeightedWidths(HorizonTuning):
    """Mixin of learners that *combine* the ``K`` widths with weights ``p`` rather than draw
    one (Raker, LKMBooks; full information, no randomness in predict): widths from
    ``sigmas``, the task from ``loss`` (:data:`LOSS_PARAM`), ``kernel_distribution`` = ``p``,
    ``selected_kernel`` = the kernel of largest weight."""

    combines_kernels: ClassVar[bool] = True
    loss: str
    sigmas: str
    dim: int | None
    p: np.ndarray

    def _configure(self) -> None:
        self.task = LOSSES[self.loss].task  # instance attribute: the loss decides the task
        self.widths = GaussianWidths(parse_sigmas(self.sigmas))
        self.K = self.widths.K

    @property
    def selected_kernel(self) -> int | None:
        """Index of the kernel with the largest weight."""
        return None if self.dim is None else int(np.argmax(self.p))

    @property
    def kernel_distribution(self) -> np.ndarray | None:
        """The combination weights ``p``."""
        return np.full(self.K, 1.0 / self.K) if self.dim is None else self.p.copy()

