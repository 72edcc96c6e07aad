"""RFF-RLS — recursive least squares (online ridge regression) on random Fourier features.

References: A. Rahimi and B. Recht, "Random features for large-scale kernel machines", NIPS
2007 (the features); V. Vovk, "Competitive on-line statistics", International Statistical
Review 69(2), 2001, and K. S. Azoury and M. K. Warmuth, "Relative loss bounds for on-line
density estimation with the exponential family of distributions", Machine Learning 43(3),
2001 (online ridge regression); Y. Engel, S. Mannor and R. Meir, "The kernel recursive
least-squares algorithm", IEEE Transactions on Signal Processing 52(8), 2004 (kernel RLS).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import (
    KERNEL_PARAMS,
    TIE_PARAM,
    Y_MAX,
    Learner,
    Param,
    positive,
)
from kernelstream.learners.losses import Loss, get_loss
from kernelstream.learners.registry import register
from kernelstream.learners.rff import (
    PickleOmegaOnce,
    compiled_layout,
    draw_learner_omega,
    features,
    scale_from_gamma,
)

_GAMMA = next(p for p in KERNEL_PARAMS if p.name == "gamma")


@register
class RFFRLS(PickleOmegaOnce, compiled.CompiledSqnorms, Learner):
    """Online ridge regression (recursive least squares) on random Fourier features of a
    Gaussian kernel: the second-order counterpart of ``fogd``, on the same features.

    ``Ω`` (``D × d``, rows ``N(0, 2γ I)``) is drawn once from the learner's RNG when the first
    example fixes ``d``, exactly as FOGD draws it; ``z(x) = D^{-1/2}[cos(Ωx); sin(Ωx)]``
    (``k = 2D`` features, ``‖z‖ = 1``). Prediction ``f = wᵀz(x)``. The state is ``w`` and
    ``P = A⁻¹`` with ``A = λI + Σ z zᵀ`` over the rows learnt so far (initially ``P = I/λ``,
    ``w = 0``), so that ``w = A⁻¹ Σ y z`` is always the ridge solution of the past rows. Every
    row is learnt (no margin condition): with ``u = P z`` and ``s = 1 + zᵀu``,

        w ← w + u (y − f)/s,    P ← P − u uᵀ/s    (Sherman–Morrison).

    ``y`` is the ±1 label for classification (``loss="square-pm1"``: least squares on the
    labels) and the target (standardised by the run, if asked) for regression
    (``loss="square"``); the loss chooses the task, as for the other learners that run both.
    The prequential loss reported is hinge for classification (as for every classifier
    without a margin loss of its own) and square for regression.

    ``P`` stays exactly symmetric: the compiled rounds keep only its upper triangle, packed
    row by row (half the memory, and half the memory traffic, which bounds a round's time);
    the numpy reference keeps the full matrix and updates both triangles by the same products
    ``(u_i u_j)·(1/s)``. :attr:`P` is the full matrix, the state its packed upper triangle
    (either path restores the other's, and a state holding the full matrix, as saved before
    the triangle was packed, restores as well). A round
    costs ``O(k²)`` (``u = P z`` and the rank-1 update, one pass over ``P`` per row in the
    compiled block driver) plus FOGD's ``O(Dd)`` features.

    Memory: ``Ω`` (``D × d``) and ``P`` (``k(k+1)/2`` doubles, ``k = 2D``: 0.64 MB at
    ``D = 200``, 4 MB at ``D = 500``, 16 MB at ``D = 1000``; the numpy reference, without the
    compiled kernels, holds the full ``k²``), no stored examples (``n_support_vectors`` is 0).
    ``Ω``, ``w`` and ``P``'s triangle are the state, so a restored learner continues
    bit-identically.

    Parameters
    ----------
    gamma
        Gaussian width ``exp(-gamma‖x−x'‖²)`` (``sigma`` accepted). Unset or ``auto``, the
        CLI, ``evaluate`` and ``run_replay`` estimate it from the data
        (``kernelstream.data.widths``); :func:`~kernelstream.learners.make` needs a number.
    n_components
        Number ``D`` of random frequencies (features ``2D``; ``P`` keeps ``D(2D+1)``
        entries); default 200.
    lam
        Ridge ``λ > 0``: ``A`` starts at ``λI``; default 1.
    loss
        ``square-pm1`` (classification: least squares on the ±1 labels) or ``square``
        (regression); default ``square-pm1``.
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("rff-rls", seed=0, n_components=100)
    >>> m.predict_one([0.0, 1.0])
    0.0
    >>> m.learn_one([0.0, 1.0], 1)
    >>> round(m.predict_one([0.0, 1.0]), 12)  # ‖z‖ = 1, λ = 1: w = z/2
    0.5
    >>> make("rff-rls", loss="square").task
    'regression'
    """

    name = "rff-rls"
    legacy_state_keys = frozenset({"rls.P"})  # the full D x D matrix of older states
    params = (
        _GAMMA,
        Param("n_components", 200, int,
              "number D of random Fourier frequencies (2D features; P holds D(2D+1) numbers)",
              positive, "> 0"),
        Param("lam", 1.0, float, "ridge λ (A = λI + Σ z zᵀ)", positive, "> 0"),
        Param("loss", "square-pm1", str,
              "loss: square-pm1 (classification, least squares on ±1 labels) or square "
              "(regression)", choices=("square-pm1", "square")),
        TIE_PARAM,
    )
    randomized = True
    reference = ("Rahimi & Recht, NIPS 2007; Vovk 2001 / Azoury & Warmuth 2001; Engel, Mannor & "
                 "Meir, IEEE TSP 2004")

    gamma: float
    n_components: int
    lam: float
    # the choice is hparams["loss"]; the attribute is the loss a prequential run reports
    # (engine.prequential.learner_loss), set by _configure
    loss: Loss

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        # P starts as I/λ and each round adds a (P z)(P z)ᵀ term: 1/λ² must be finite, or the
        # scores turn NaN from the first rounds on (λ ≳ 1.5e-154)
        lam2 = p["lam"] * p["lam"]
        if not (lam2 > 0 and math.isfinite(1.0 / lam2)):
            raise ValueError(f"{cls.name}: parameter 'lam' must be large enough that 1/lam^2 is "
                             f"finite (about 1.5e-154 or more), got {p['lam']!r}")

    def _configure(self) -> None:
        regression = self.hparams["loss"] == "square"
        self.task = "regression" if regression else "classification"  # the loss decides it
        self.loss = get_loss("square" if regression else "hinge")

    @classmethod
    def compiled_rounds(cls) -> bool:
        return True  # rls_run / rls_update / rls_step of _ck_features

    @classmethod
    def model_bytes(cls, params: dict[str, Any], n_features: int = 0) -> tuple[int, str]:
        k = 2 * int(params["n_components"])
        if compiled.fk is None:  # the numpy reference keeps the full matrix
            return 8 * k * k, f"a {k:,} x {k:,} matrix P (n_components={params['n_components']:,})"
        return (8 * (k * (k + 1) // 2),
                f"the upper triangle of a {k:,} x {k:,} matrix P "
                f"(n_components={params['n_components']:,})")

    def _setup(self, d: int) -> None:
        D = self.n_components
        self._omega = draw_learner_omega(self.rng, D, d, scale_from_gamma(self.gamma),
                                         compiled=compiled.fk is not None)
        self._c = 1.0 / math.sqrt(D)
        self.w = np.zeros(2 * D)
        k = 2 * D
        if compiled.fk is not None:  # I/λ packed as the rounds keep it, never the full k × k
            self._P = np.zeros(k * (k + 1) // 2)
            j = np.arange(k)
            self._P[j * k - j * (j - 1) // 2] = 1.0 / self.lam
        else:
            self._P = np.eye(k) / self.lam
        self._compiled_setup()

    def _compiled_setup(self) -> None:
        """With the compiled map, keep ``Ωᵀ`` (``d × D``) and ``Ω`` as its view (FOGD's
        layout), the driver's buffers (two rows' ``z`` and ``u = P z``), and ``P`` as the
        rounds keep it: its upper triangle packed row by row (the numpy reference: the full
        matrix). ``_P`` arrives in either form."""
        self._compiled = compiled.fk is not None
        k = len(self.w)
        full = self._P.ndim == 2
        if self._compiled and full:
            self._P = _pack(self._P)
        elif not self._compiled and not full:
            self._P = _unpack(self._P, k)
        if self._compiled:
            self._omega_t, self._omega, self._nzwork = compiled_layout(self._omega)
            self._zbuf = np.empty(2 * len(self.w))
            self._ubuf = np.empty(2 * len(self.w))

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        if self._compiled:  # FOGD's compiled map: the raw [cos; sin], f = c⟨w, ·⟩
            z = np.empty(len(self.w))
            f = compiled.fk.score(compiled.rff_map(self._omega_t, self._c), self.w,
                                  x if x.flags.c_contiguous else np.ascontiguousarray(x), xx,
                                  None, z, self._nzwork)
            z *= self._c  # as rls_run scales it
            return f, z
        z = features(self._omega @ x)  # D^{-1/2} [cos; sin], the c of the compiled map
        return float(self.w @ z), z

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._compiled:  # the same step in C (rls_run's, so both paths agree bit for bit)
            compiled.fk.rls_update(self.w, self._P, aux, self._ubuf, y, score)
            return
        # the reference: Sherman–Morrison on A = λI + Σ z zᵀ; np.outer's (i, j) and (j, i)
        # are the same product, so P stays exactly symmetric
        z = aux
        u = self._P @ z
        s = 1.0 + float(z @ u)
        self.w += u * ((y - score) / s)
        self._P -= np.outer(u, u) * (1.0 / s)

    def _learn_rows(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        if not self._compiled:
            super()._learn_rows(X, zz, yv, out, n_sv)
            return
        compiled.fk.rls_run(compiled.rff_map(self._omega_t, self._c), self.w, self._P, X, yv,
                            out, self._zbuf, self._ubuf, self._nzwork)
        self.t += X.shape[0]
        if n_sv is not None:
            n_sv[:] = 0

    def step(self, x: Any, y: Any) -> float:
        """Predict then learn; returns the pre-update score. With the compiled map, a dense
        float64 row and a label of ±1 (classification) or a finite float (regression) make
        one compiled call (``fk.rls_step``: the norm, ``z``, the score and the update, as
        ``rls_run`` does them); anything else, bad input included, takes
        :meth:`Learner.step`."""
        if self.dim is not None and self._compiled and (type(y) is float or type(y) is int):
            ok = (y == 1 or y == -1) if self.task == "classification" else abs(y) <= Y_MAX
            if ok:
                r = compiled.fk.rls_step(compiled.rff_map(self._omega_t, self._c), self.w,
                                         self._P, x, float(y), self._zbuf, self._ubuf,
                                         self._nzwork)
                if r is not None:
                    if self._pending is not None:  # undoes a pending draw
                        self._drop_pending()
                    self.t += 1
                    return float(r[0])
        return super().step(x, y)

    def _step_checked(self, x: np.ndarray, xx: float, y: float) -> float:
        if not self._compiled:
            return super()._step_checked(x, xx, y)
        # one row through the block driver: no 2D-wide temporaries
        one = self.__dict__.get("_one")
        if one is None:
            one = self._one = (np.empty(1), np.empty(1))
        y1, out1 = one
        y1[0] = y
        compiled.fk.rls_run(compiled.rff_map(self._omega_t, self._c), self.w, self._P,
                            x.reshape(1, -1), y1, out1, self._zbuf, self._ubuf, self._nzwork)
        self.t += 1
        return out1.item(0)

    @property
    def P(self) -> np.ndarray:  # noqa: N802 (the P = A⁻¹ of the papers and the docstring)
        """``P = A⁻¹``, both triangles (a new array; from the compiled rounds' packed upper
        triangle, mirrored exactly)."""
        return _unpack(self._P, len(self.w)) if self._compiled else self._P.copy()

    def memory_bound(self) -> int | None:
        return 0  # random features: no stored rows (memory fixed by n_components)

    def _get_state(self) -> dict[str, np.ndarray]:
        # P's upper triangle packed row by row (k(k+1)/2 numbers: half the full matrix)
        P = self._P.copy() if self._compiled else _pack(self._P)
        return {"rls.omega": self._omega.copy(), "rls.w": self.w.copy(), "rls.P": P}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        # the Ω drawn again by _setup is overwritten; Learner.set_state restores the RNG last
        self.__dict__.pop("_omega_t", None)  # the Ωᵀ _setup drew: freed before the copy below
        self._omega = np.ascontiguousarray(state["rls.omega"], dtype=np.float64)
        self.w = np.array(state["rls.w"], dtype=np.float64)
        # packed (k(k+1)/2) or, as saved before P was packed, the full mirrored k x k matrix:
        # the same upper triangle either way, which is all either path reads
        P = np.array(state["rls.P"], dtype=np.float64, order="C")
        k = len(self.w)
        if P.shape not in ((k * (k + 1) // 2,), (k, k)):
            raise ValueError(f"rff-rls state: rls.P has shape {P.shape}, not ({k * (k + 1) // 2},) "
                             f"(the packed triangle) or ({k}, {k})")
        self._P = P
        self._compiled_setup()


def _pack(P: np.ndarray) -> np.ndarray:
    """The upper triangle of the ``k × k`` matrix ``P``, row by row: row ``j`` holds
    ``P[j, j:]`` from offset ``jk − j(j−1)/2`` (``k(k+1)/2`` numbers, the compiled rounds'
    layout)."""
    k = len(P)
    out = np.empty(k * (k + 1) // 2)
    o = 0
    for j in range(k):  # row by row: no k(k+1)/2-long index arrays
        out[o:o + k - j] = P[j, j:]
        o += k - j
    return out


def _unpack(packed: np.ndarray, k: int) -> np.ndarray:
    """The symmetric ``k × k`` matrix of :func:`_pack`'s triangle (both triangles the same
    numbers)."""
    P = np.empty((k, k))
    o = 0
    for j in range(k):
        P[j, j:] = packed[o:o + k - j]
        P[j:, j] = packed[o:o + k - j]
        o += k - j
    return P
