"""FOGD — Fourier Online Gradient Descent (Lu et al., JMLR 2016).

Reference: J. Lu, S. C. H. Hoi, J. Wang, P. Zhao and Z.-Y. Liu, "Large scale online kernel
learning", JMLR 17(47), 2016; the toolbox version [C-SOL] ``kernel_fogd`` is a baseline of
Zhang & Liao (ICML 2019, SkeGD).
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import (
    KERNEL_PARAMS,
    TIE_PARAM,
    Learner,
    Param,
    positive,
)
from kernelstream.learners.losses import LOSSES
from kernelstream.learners.registry import register
from kernelstream.learners.rff import (
    PickleOmegaOnce,
    compiled_layout,
    draw_learner_omega,
    scale_from_gamma,
)

_GAMMA = next(p for p in KERNEL_PARAMS if p.name == "gamma")


@register
class FOGD(PickleOmegaOnce, compiled.CompiledSqnorms, Learner):
    """Linear OGD on random Fourier features of a Gaussian kernel.

    ``Ω`` (``D × d``, rows ``N(0, 2γ I)`` i.e. ``N(0, σ^{-2} I)``) is drawn once from the
    learner's RNG when the first example fixes ``d``; ``z(x) = D^{-1/2}[cos(Ωx); sin(Ωx)]``
    (exact form, ``‖z‖ = 1``; [C-SOL] omits ``D^{-1/2}`` and uses a fast cosine). Prediction
    ``f = wᵀz(x)``; hinge update: if ``y f < 1``, ``w ← w + η y z(x)``; any other loss
    ``w ← w − η ℓ'(f, y) z(x)``. The constant ``D^{-1/2}`` is applied to the scalar score and step
    rather than to the ``2D``-vector (same model, fewer array operations).

    Memory is bounded by ``n_components`` (``Ω`` and ``2D`` weights), not by stored examples:
    ``n_support_vectors`` is 0 and there is no capacity parameter. ``Ω`` and ``w`` are part of the
    state, so a restored learner continues bit-identically.

    Parameters
    ----------
    gamma
        Gaussian width ``exp(-gamma‖x−x'‖²)`` (``sigma`` accepted).
    n_components
        Number ``D`` of random frequencies (features ``2D``); default 400. Zhang & Liao used
        ``D = 4B``.
    eta
        Step size ``η``; default 0.5.
    loss
        ``hinge``, ``logistic`` or ``squared-hinge`` (default ``hinge``).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("fogd", seed=0, n_components=100, eta=0.5)
    >>> m.predict_one([0.0, 1.0])
    0.0
    >>> m.learn_one([0.0, 1.0], 1)
    >>> round(m.predict_one([0.0, 1.0]), 12)
    0.5
    """

    name = "fogd"
    params = (
        _GAMMA,
        Param("n_components", 400, int, "number D of random Fourier frequencies (2D features)",
              positive, "> 0"),
        Param("eta", 0.5, float, "step size", positive, "> 0"),
        Param("loss", "hinge", str, "loss", choices=("hinge", "logistic", "squared-hinge")),
        TIE_PARAM,
    )
    randomized = True
    reference = "Lu, Hoi, Wang, Zhao & Liu, JMLR 2016; toolbox kernel_fogd"

    gamma: float
    n_components: int
    eta: float
    loss: str

    @classmethod
    def compiled_rounds(cls) -> bool:
        return True  # the feature maps of kernelstream.learners.compiled

    def _setup(self, d: int) -> None:
        D = self.n_components
        self._omega = draw_learner_omega(self.rng, D, d, scale_from_gamma(self.gamma),
                                         compiled=compiled.fk is not None)
        self._c = 1.0 / math.sqrt(D)
        self.w = np.zeros(2 * D)
        self._hinge = self.loss == "hinge"
        self._deriv = LOSSES[self.loss].deriv
        self._compiled_setup()

    def _compiled_setup(self) -> None:
        """With the compiled map, keep ``Ωᵀ`` (``d × D``) and ``Ω`` as its view: the projection
        runs over the example's non-zeros, one contiguous column of ``Ωᵀ`` each."""
        self._compiled = compiled.fk is not None
        if self._compiled:
            self._omega_t, self._omega, self._nzwork = compiled_layout(self._omega)
            self._zbuf = np.empty(len(self.w))

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        if self._compiled:  # the same z and score as below, up to round-off
            z = np.empty(len(self.w))
            f = compiled.fk.score(compiled.rff_map(self._omega_t, self._c), self.w,
                                  x if x.flags.c_contiguous else np.ascontiguousarray(x), xx,
                                  None, z, self._nzwork)
            return f, z
        u = self._omega @ x
        D = len(u)
        z = np.empty(2 * D)  # the raw [cos; sin]; z(x) = c · this
        np.cos(u, out=z[:D])
        np.sin(u, out=z[D:])
        return self._c * float(self.w @ z), z

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._hinge:
            if y * score < 1.0:
                self.w += (self.eta * self._c * y) * aux
            return
        g = self._deriv(score, y)
        if g != 0.0:
            self.w += (-self.eta * self._c * g) * aux

    def _learn_rows(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        if not (self._compiled and self._hinge):
            super()._learn_rows(X, zz, yv, out, n_sv)
            return
        # the hinge update is the linear model's step w += (η c y) z on margin errors, which
        # the compiled driver takes itself: the whole block runs in one call
        rows = X.shape[0]
        compiled.fk.run(compiled.rff_map(self._omega_t, self._c), self.w, X, zz, yv, 0, rows,
                        compiled.MARGIN, self.eta * self._c, 1.0, out, n_sv, 0, None,
                        self._zbuf, self._nzwork, None)
        self.t += rows

    def step(self, x: Any, y: Any) -> float:
        """Predict then learn; returns the pre-update score. With the compiled map and the
        hinge loss, a dense float64 row and a label of ±1 (int or float) make one compiled
        call (``fk.step``: the norm, ``z``, the score and the step of ``w``, as the block
        driver does them); anything else, bad input included, takes :meth:`Learner.step`."""
        if (self.dim is not None and self._compiled and self._hinge
                and (type(y) is float or type(y) is int) and (y == 1 or y == -1)):
            r = compiled.fk.step(compiled.rff_map(self._omega_t, self._c), self.w, x, y,
                                 compiled.MARGIN, self.eta * self._c, 1.0, None, self._zbuf,
                                 self._nzwork)
            if r is not None:
                if self._pending is not None:  # undoes a pending draw
                    self._drop_pending()
                self.t += 1
                return cast(float, r[0])
        return super().step(x, y)

    def _step_checked(self, x: np.ndarray, xx: float, y: float) -> float:
        if not (self._compiled and self._hinge):
            return super()._step_checked(x, xx, y)
        # one row through the block driver: its update is in place, in C, where the numpy
        # update allocates a 2D-wide temporary; the same numbers (the driver's own rounds)
        one = self.__dict__.get("_one")
        if one is None:
            one = self._one = (np.empty(1), np.empty(1), np.empty(1))
        zz1, y1, out1 = one
        zz1[0], y1[0] = xx, y
        compiled.fk.run(compiled.rff_map(self._omega_t, self._c), self.w, x.reshape(1, -1),
                        zz1, y1, 0, 1, compiled.MARGIN, self.eta * self._c, 1.0, out1, None, 0,
                        None, self._zbuf, self._nzwork, None)
        self.t += 1
        return out1.item(0)

    def memory_bound(self) -> int | None:
        return 0  # random features: no stored rows (memory fixed by n_components)

    def _get_state(self) -> dict[str, np.ndarray]:
        return {"fogd.omega": self._omega.copy(), "fogd.w": self.w.copy()}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self.__dict__.pop("_omega_t", None)  # the Ωᵀ _setup drew: freed before the copy below
        self._omega = np.ascontiguousarray(state["fogd.omega"], dtype=np.float64)
        # The Ω drawn again by _setup is overwritten here; Learner.set_state restores the RNG
        # afterwards, so that draw leaves no trace.
        self.w = np.array(state["fogd.w"], dtype=np.float64)
        self._compiled_setup()
