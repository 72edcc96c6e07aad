"""NOGD — Nyström Online Gradient Descent (Lu et al., JMLR 2016).

Reference: J. Lu, S. C. H. Hoi, J. Wang, P. Zhao and Z.-Y. Liu, "Large scale online kernel
learning", JMLR 17(47), 2016; the toolbox version [C-SOL] ``kernel_nogd`` is the baseline of
Zhang & Liao (ICML 2019, SkeGD).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, cast

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM, Learner, Param, positive
from kernelstream.learners.linalg import PINV_ATOL, PINV_RTOL, gram_append, top_eigh
from kernelstream.learners.registry import register
from kernelstream.learners.state import check_shape
from kernelstream.learners.store import SVStore


@register
class NOGD(compiled.FeatureMapRounds, KernelLearner):
    """Nyström OGD: kernel OGD until ``B`` SVs are stored, then linear OGD on Nyström features.

    * Stage 1 (``|S| < B``): if ``y f < 1`` add ``x`` with coefficient ``eta·y`` and grow the
      Gram matrix ``K_B`` (kept in a pre-allocated ``B × B`` buffer).
    * Switch, on the first loss round (``y f < 1``) with ``|S| = B``: exact eigen-decomposition
      ``K_B = V Λ Vᵀ``; keep the ``rank`` largest eigenpairs with
      ``λ > max(1e-8, 1e-12 λ_max)`` (the :func:`~kernelstream.learners.linalg.pinv` tolerance;
      non-positive and round-off ones are dropped, so the feature dimension can be smaller than
      ``rank``); ``M_N = Λ^{-1/2} Vᵀ``, features ``z(x) = M_N κ(X_S, x)``.
    * Stage 2 (including the switching round): predict ``wᵀz(x)``; if ``y wᵀz < 1``,
      ``w ← w + eta2·y·z(x)``. The SVs are then fixed landmarks.

    ``init`` chooses ``w`` at the switch: ``"zero"`` ([C-SOL]'s C++ class, default) or
    ``"carry"``: ``w = Λ^{1/2} Vᵀ a``, so ``wᵀz(x) = aᵀ V Vᵀ k`` reproduces the stage-1
    predictions (exactly at full rank). ``"carry"`` is what the NOGD authors' Matlab toolbox
    (LSOKL, ``NysGD.m``: ``w = alpha*pinv(M)``) does; Zhang & Liao (ICML 2019) took their baselines
    from it, so ``kernelstream reproduce baselines`` runs their protocol with
    ``init="carry"``.

    Memory O(B d + B² ) (the Gram matrix, then ``M_N``); stage-2 rounds cost
    O(B d + B·rank). ``n_support_vectors`` is the number of stored points (``B`` after the
    switch, when they serve as landmarks).

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    budget
        Number of stored points ``B`` (default 100).
    rank
        Nyström rank ``k``; default ``None`` = ``round(0.2·B)`` as [C-SOL] (Zhang & Liao used
        ``0.1·B``). Must be ``≤ budget``.
    eta
        Stage-1 step ``η₁`` (coefficient of a new SV); default 0.5.
    eta2
        Stage-2 step ``η₂``; ``None`` = same as ``eta``.
    init
        ``"zero"`` or ``"carry"`` (see above; default ``zero``).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> import numpy as np
    >>> from kernelstream.learners import make
    >>> m = make("nogd", budget=5, rank=3, eta=0.5)
    >>> X = np.random.default_rng(0).normal(size=(40, 2)); y = np.sign(X[:, 0]) + (X[:, 0] == 0)
    >>> _ = m.predict_learn_many(X, y)
    >>> m.n_support_vectors, m.stage
    (5, 2)
    """

    name = "nogd"
    params = (
        *KERNEL_PARAMS,
        Param("budget", 100, int, "number of stored points B (landmarks of stage 2)", positive,
              "> 0"),
        Param("rank", None, int,
              "Nystrom rank k (default round(0.2 B); Zhang & Liao 2019 used 0.1 B)",
              positive, "> 0"),
        Param("eta", 0.5, float, "stage-1 step eta1 (coefficient of a new SV)", positive, "> 0"),
        Param("eta2", None, float, "stage-2 step eta2 (default: eta)", positive, "> 0"),
        Param("init", "zero", str, "stage-2 weights at the switch: zero (C-SOL) or carry "
              "(reproduces the stage-1 predictions, as LSOKL's NysGD.m)",
              choices=("zero", "carry")),
        TIE_PARAM,
    )
    reference = "Lu, Hoi, Wang, Zhao & Liu, JMLR 2016; toolbox kernel_nogd"

    #: stage 1's updates of a block in C (``fk.grow``); False: :meth:`_update`, the reference,
    #: on each margin error (tests compare the two)
    compiled_stage1: ClassVar[bool] = True

    budget: int
    rank: int | None
    eta: float
    eta2: float | None
    init: str

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        if p["rank"] is not None and p["rank"] > p["budget"]:
            raise ValueError(f"{cls.name}: rank must be <= budget, got {p['rank']} > {p['budget']}")

    def _compiled_kernel(self) -> bool:
        return super()._compiled_kernel() and compiled.fk is not None

    @property
    def effective_rank(self) -> int:
        """The rank in use (``rank`` or its default ``round(0.2·B)``, at least 1)."""
        return self.rank if self.rank is not None else max(1, round(0.2 * self.budget))

    @property
    def stage(self) -> int:
        return 2 if self._stage2 else 1

    @classmethod
    def model_bytes(cls, params: dict[str, Any], n_features: int = 0) -> tuple[int, str]:
        # the budget's Gram matrix, and its eigen-decomposition when the budget fills
        B = int(params["budget"])
        return 3 * 8 * B * B, f"budget={B:,}: {B:,} x {B:,} Gram and eigenvector matrices"

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self._eta2 = self.eta if self.eta2 is None else self.eta2
        self._K = np.zeros((self.budget, self.budget))
        self._stage2 = False
        self._w = np.zeros(0)
        # compiled rounds (_compiled_kernel): stage 1's kernel row and score, stage 2's
        # z = M k and score, and blocks of rounds (_learn_rows)
        self._set_projection(np.zeros((0, self.budget)))
        if self._compiled:
            self._kbuf = np.empty(self.budget + 1)
            self._zbuf = np.empty(self.budget + 8)  # z of stage 2 is padded

    def _fmap(self) -> tuple[Any, ...]:
        """The compiled map of the current stage: the kernel row, or the Nyström features."""
        sv = cast(SVStore, self.sv)  # compiled rounds: a dense store
        if self._stage2:
            return compiled.proj_map(sv.X, sv.sqn, sv.n, self.kern, self._Mt, len(self._M))
        return compiled.row_map(sv.X, sv.sqn, sv.n, self.kern)

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        sv = self.sv
        n = sv.n
        if n == 0:
            return 0.0, None
        if self._compiled:  # the numbers below, up to round-off (sums in another order)
            k = np.empty(n)
            x = x if x.flags.c_contiguous else np.ascontiguousarray(x)
            if self._stage2:
                z = np.empty(self._Mt.shape[1])  # padded to the compiled map's width
                f = compiled.fk.score(self._fmap(), self._w, x, xx, k, z, self._nzwork)
                return f, z[:len(self._w)]
            return compiled.fk.score(self._fmap(), sv.a, x, xx, None, k, self._nzwork), k
        k = sv.row(self.kern, x, xx)
        if self._stage2:
            z = self._M @ k
            return float(self._w @ z), z
        return float(sv.a[:n] @ k), k

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if y * score >= 1.0:
            return
        if self._stage2:  # aux is z(x)
            self._w += (self._eta2 * y) * aux
            return
        sv = self.sv
        n = sv.n
        if n < self.budget:  # aux is the kernel row k (None for an empty store)
            kxx = self.kern.diag(xx)
            gram_append(self._K, n, aux, kxx)
            sv.append(x, xx, self.eta * y, id_=self.t, s=self.t, fz=score, kzz=kxx)
            return
        self._switch()
        z = self._M @ aux
        if y * float(self._w @ z) < 1.0:  # zero init: always; carry: as the stage-1 score
            self._w += (self._eta2 * y) * z

    def step(self, x: Any, y: Any) -> float:
        """Predict then learn; returns the pre-update score. In stage 2 on compiled rounds, a
        dense float64 row and a label of ±1 (int or float) make one compiled call
        (``fk.step``: the norm, ``z = M k``, the score and the step of ``w``, as the block
        driver does them) with the stage's map kept (:meth:`_set_projection` drops it);
        anything else, bad input included, takes :meth:`Learner.step`."""
        fmap = self._fused
        if fmap is not None and (type(y) is float or type(y) is int) and (y == 1 or y == -1):
            r = compiled.fk.step(fmap, self._w, x, y, compiled.MARGIN, self._eta2, 1.0,
                                 self._kbuf, self._zbuf, self._nzwork)
            if r is not None:
                if self._pending is not None:  # undoes a pending draw
                    self._drop_pending()
                self.t += 1
                return cast(float, r[0])
        # Learner's step: KernelLearner's fused round is a compiled rule's (NOGD has none)
        score = Learner.step(self, x, y)
        if self._stage2 and self._compiled and not self.sparse:  # the map of the next rounds
            self._fused = self._fmap()
        return score

    def _run_block(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                   n_sv: np.ndarray | None, i: int, fired: Any) -> tuple[int, Any]:
        """Compiled rounds from row ``i``. Stage 2's update is the step w += η₂ y z on margin
        errors, which the driver takes itself; stage 1's, a new SV and its Gram row, is
        ``fk.grow``'s, which stops at a margin error with ``B`` points: the switch, left to
        :meth:`_update` (with that row's kernel row). With ``compiled_stage1`` False stage 1
        runs :meth:`_update` on every margin error instead (the reference)."""
        sv = self.sv
        if sv.n == 0:
            return i, None  # the first round: the per-example code
        rows = X.shape[0]
        if self._stage2:
            j, _ = compiled.fk.run(self._fmap(), self._w, X, zz, yv, i, rows, compiled.MARGIN,
                                   self._eta2, 1.0, out, n_sv, sv.n, self._kbuf, self._zbuf,
                                   self._nzwork, None)
            return j, None
        k = self._zbuf
        if self.compiled_stage1 and len(sv.a) >= self.budget:
            dense = cast(SVStore, sv)  # compiled rounds: a dense store
            # row r is round t0 + r (learn_rounds keeps self.t at round i)
            j, dense.n, dense.norm2 = compiled.fk.grow(
                dense.X, dense.sqn, dense.a, dense.ids, dense.s, dense.n, self._kcode, self._kp,
                self._kdeg, self._K, X, zz, yv, i, rows, self.t - i, self.eta, self.budget,
                dense.norm2, out, n_sv, k, self._nzwork)
            return j, (k[:dense.n] if j < rows else None)

        def on_fire(j: int) -> tuple[Any, ...] | None:
            fired(j, k[:sv.n])
            return None if self._stage2 else (self._fmap(), sv.a, sv.n)

        j, _ = compiled.fk.run(self._fmap(), sv.a, X, zz, yv, i, rows, compiled.MARGIN, None,
                               1.0, out, n_sv, sv.n, self._kbuf, k, self._nzwork, on_fire)
        return j, None

    def _set_projection(self, M: np.ndarray) -> None:
        """``M_N`` (``r × B``), and for the compiled map its transpose (the ``r`` features
        then accumulate side by side)."""
        self._M = np.ascontiguousarray(M)
        self._fused = None  # step's map: of the old projection
        if self._compiled:
            self._Mt = compiled.padded_t(self._M)

    def _switch(self) -> None:
        """Nyström feature map from the Gram matrix of the ``B`` stored points."""
        lam, V = top_eigh(self._K, self.effective_rank, exact=True)
        tol = max(PINV_ATOL, PINV_RTOL * float(lam[0])) if len(lam) else math.inf
        keep = lam > tol
        lam, V = lam[keep], V[:, keep]
        self._set_projection((V / np.sqrt(lam)).T)  # M_N = Λ^{-1/2} Vᵀ (r × B)
        if self.init == "carry":
            self._w = np.sqrt(lam) * (V.T @ self.sv.a[: self.sv.n])
        else:
            self._w = np.zeros(len(lam))
        self._stage2 = True

    # -- state -----------------------------------------------------------------------------------
    def _get_state(self) -> dict[str, np.ndarray]:
        st = super()._get_state()
        n = self.sv.n
        st["nogd.K"] = self._K[:n, :n].copy()
        st["nogd.stage"] = np.array(self.stage, dtype=np.int64)
        st["nogd.M"] = self._M.copy()
        st["nogd.w"] = self._w.copy()
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        n = self.sv.n
        self._K[:n, :n] = state["nogd.K"]
        self._stage2 = int(state["nogd.stage"]) == 2
        M = np.asarray(state["nogd.M"], dtype=np.float64)
        # r ≤ rank features of the B stored points, and w of one entry each (a raw error in
        # a round otherwise)
        check_shape("nogd.M", M, (min(len(M), self.effective_rank), self.budget))
        self._set_projection(M)
        self._w = np.array(state["nogd.w"], dtype=np.float64)
        check_shape("nogd.w", self._w, (len(M),))
