"""SkeGD — sketched online gradient descent with incremental randomized sketching
(Zhang & Liao, ICML 2019, Algorithm 1).

Reference: X. Zhang and S. Liao, "Incremental Randomized Sketching for Online Kernel Learning",
ICML 2019. [C-FORKS] (a third-party C++ re-implementation) is the source of the
``reference_quirks`` variant.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, cast

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import (
    KERNEL_PARAMS,
    TIE_PARAM,
    Learner,
    Param,
    nonneg,
    positive,
    unit_open,
)
from kernelstream.learners.kernels import Kernel, make_kernel
from kernelstream.learners.linalg import gram_append
from kernelstream.learners.losses import LOSSES
from kernelstream.learners.params import ShrinkParams
from kernelstream.learners.registry import register
from kernelstream.learners.sketch import IncrementalSketch
from kernelstream.learners.sparse_store import SparseSVStore
from kernelstream.learners.state import check_ints, check_shape
from kernelstream.learners.store import (
    AnyStore,
    SVStore,
    make_store,
    store_from_state,
)
from kernelstream.sparse import CSR

CLASSIFICATION_LOSSES = tuple(n for n, loss in LOSSES.items() if loss.task == "classification")
_TINY = 1e-12  # ‖φ‖² below this: no rescaling (the new feature vector carries no direction)


def sizes(p: dict[str, Any]) -> tuple[int, int, int]:
    """Effective ``(s_p, s_m, k)`` from resolved parameters: ``s_p = sketch_size`` or
    ``⌊3B/4⌋``; ``s_m = max(1, round(tau·s_p))``; ``k = rank`` or ``max(1, round(B/10))``."""
    B = p["budget"]
    sp = p["sketch_size"] if p["sketch_size"] is not None else max(1, (3 * B) // 4)
    sm = max(1, round(p["tau"] * sp))
    k = p["rank"] if p["rank"] is not None else max(1, round(0.1 * B))
    return sp, sm, k


@register
class SkeGD(ShrinkParams, compiled.FeatureMapRounds, Learner):
    """SkeGD: kernel OGD until ``B`` SVs are buffered, then linear OGD on a time-varying explicit
    feature map built from two incremental randomized sketches of the kernel matrix.

    **Stage 1** (buffer holds fewer than ``B`` points at the start of the round): kernel OGD
    (KOGD): ``α ← (1 − ηλ) α``; if the loss is nonzero, ``x_t`` joins the buffer with
    coefficient ``−η ℓ'(f_t(x_t), y_t)`` (hinge: ``η y_t``).

    **Initialisation round** ``T₀`` (first round whose start finds ``B`` buffered points): the
    rows ``R`` of the sketched kernel matrix are the buffer; ``S_p`` (SJLT, ``sjlt_nonzeros``
    blocks) and ``s_m`` landmarks are drawn, ``Φ_pp = S_pᵀKS_p``, ``Φ_pm = S_pᵀKS_m``
    (:class:`~kernelstream.learners.sketch.IncrementalSketch`), ``Φ_pp ≈ VΣVᵀ`` (rank ``k``) and
    ``Q = Φ_pm^† V Σ^{1/2}``; the feature map is ``φ(x) = Qᵀ κ(landmarks, x) ∈ R^k``. The stage-1
    hypothesis is carried over by matching its value at ``x_{T₀}``:
    ``w = f_{T₀}(x_{T₀}) φ(x_{T₀}) / ‖φ(x_{T₀})‖²``. No gradient step in that round.

    **Stage 2**: predict ``wᵀφ(x_t)``. On an *update round* the sketches get the rank-1
    modifications of ``x_t`` (``ψ = κ(x_t, R)``), ``x_t`` is appended to ``R``, ``Q`` is recomputed
    and ``w`` is rescaled to keep its prediction at ``x_t`` under the new map
    (``w̄ = f_t(x_t) φ_{t+1}(x_t)/‖φ_{t+1}(x_t)‖²``). Every stage-2 round then takes the
    regularised OGD step ``w ← (1 − ηλ) w̄ − η ℓ'(w̄ᵀφ_{t+1}(x_t), y_t) φ_{t+1}(x_t)``.

    **Update cycle** ``ρ``: update rounds are the rounds ``t`` (1-based stream index) with
    ``t mod ρ = 1`` (every stage-2 round if ``ρ ≤ 1``), as in the paper's Algorithm 1.

    * ``update_cycle`` given: ``ρ = update_cycle``.
    * else ``horizon`` (the stream length ``T``) given: ``ρ = ⌊theta·(T − B)⌋`` (the paper;
      ``theta = 0.3`` is its "ρ = 0.3T"). Rounds past ``T`` keep that ``ρ``.
    * neither (a stream of unknown length): the cycle is recomputed at every update as if the
      stream ended there — after an update (or the initialisation) at round ``t`` the next
      update comes ``max(1, ⌊theta·(t − B)⌋)`` rounds later. Updates are then geometrically
      spaced (about ``log(T)/log(1 + theta)`` of them in ``T`` rounds instead of ``⌊1/theta⌋``),
      so the row list ``R`` and the cost of an update grow only logarithmically with the
      stream.

    Memory: the ``B`` buffer points, one row of ``R`` per update round, ``Φ_pp`` (``s_p²``),
    ``Φ_pm`` (``s_p s_m``), ``Q`` and ``w``; normal stage-2 rounds cost ``O(s_m d + s_m k)``.
    ``n_support_vectors`` counts the points the hypothesis is expressed with: the buffer in
    stage 1, the ``s_m`` landmarks in stage 2 (the rows of ``R`` are sketch memory:
    ``n_sketch_rows``). :meth:`feature_map` returns ``φ(x)`` under the current map. The budget
    bounds the hypothesis (:meth:`memory_bound` = ``B``), not ``R``: the paper appends a row
    per update round, so ``R`` grows like ``O(B + log T)`` with an unknown horizon and
    linearly with an explicit ``update_cycle``; :meth:`max_sketch_rows` is that bound and
    :meth:`stored_rows` what the memory check counts.

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    budget
        ``B``, stage-1 buffer size; default 100 (paper: 100 if ``T ≤ 10 000``, else 200).
    sketch_size
        ``s_p``, SJLT columns; default None: ``⌊3B/4⌋``.
    tau
        ``τ``, landmarks ``s_m = round(τ s_p)``; default 0.2 (the paper's; its
        kernel-approximation experiment uses ``s_m = B/2``, i.e. ``τ = 2/3``).
    rank
        ``k``, rank of the eigen-decomposition of ``Φ_pp``; default None: ``round(0.1 B)``.
    sjlt_nonzeros
        ``d_b``, SJLT blocks = nonzeros per row of ``S_p``; default 4 (the paper's).
    eta, lam
        Step size ``η`` (default 0.5) and L2 regularisation ``λ`` (default 0.001); ``ηλ < 1``
        (the paper tuned ``η ∈ 10^{-5..0}``, ``λ ∈ 10^{-4..1}``). ``lam = 0`` is [C-FORKS]'
        unregularised KOGD.
    horizon, theta, update_cycle
        Stream length ``T`` (default None: unknown), ``θ`` (default 0.3) and an explicit ``ρ``
        (default None: from ``T`` and ``θ``; see *Update cycle*).
    loss
        ``hinge`` (the paper's), ``logistic`` or ``squared-hinge``; default ``hinge``.
        ``squared-hinge`` with the polynomial or linear kernel diverges on ordinary data (kept: the
        specification's rule; :attr:`known_divergent`): the gradient ``−2y[1 − yf]_+`` grows with
        ``|f|`` at a fixed ``η``, so a step with ``η ‖φ(x)‖² > 1`` (about ``η k(x, x)``) overshoots
        the margin by more than it corrects and ``w`` grows geometrically until it overflows.
        Measured on german (``[-1, 1]``-scaled, ``‖x‖² ≤ 22``): polynomial, 563 non-finite scores
        of 1000 (from row 437; a9a's first 2000 rows: 1355); linear, 46 (from row 953; a9a: 677).
        ``η < 1 / max k(x, x)`` keeps them finite (linear ``eta=0.04``, polynomial ``eta=1/600``:
        |f| ≤ 6.3 and 3.1); the Gaussian kernel has ``k(x, x) = 1``.
    exact_svd
        ``True``: exact ``eigh`` of ``Φ_pp`` (deterministic given the sketches; tests).
        ``False`` (the paper; default False): randomized eigen-decomposition (Halko et al.;
        oversampling 10, 2 power iterations — not given by the paper), drawing from the
        learner's RNG. ``Φ_pm^†`` is always the exact SVD pseudo-inverse of
        :func:`~kernelstream.learners.linalg.pinv`.
    reference_quirks
        ``True`` replicates the [C-FORKS] re-implementation (QUIRK): nothing happens
        on zero-loss rounds; the update cycle counts loss rounds of the whole stream (an update
        when that count ``c`` has ``c mod ρ = 1``); the initialisation waits for the first loss
        round with a full buffer and takes a gradient step; ``ψ`` is computed against the ``B``
        buffer points only (``R`` never grows, the new SJLT row is not kept); no ``w̄``
        rescaling; the gradient uses the pre-update score. [C-FORKS]' other differences are
        settings (``sjlt_nonzeros=1``, ``rank = 0.1 s_p``, ``lam=0``) or evaluation (mistakes
        counted after ``T₀`` only, over all ``T`` rounds: ``init_round`` gives ``T₀``, and
        ``kernelstream reproduce p3`` reports both counts) and are not switched by this flag.
        The paper's rule is the default False.
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> import numpy as np
    >>> from kernelstream.learners import make
    >>> m = make("skegd", seed=0, budget=20, rank=4, eta=0.5, lam=0.0, horizon=300)
    >>> X = np.random.default_rng(0).normal(size=(300, 2)); y = np.where(X[:, 0] >= 0, 1.0, -1.0)
    >>> _ = m.predict_learn_many(X, y)
    >>> m.stage, m.feature_map(X[:3]).shape
    (2, (3, 4))
    """

    name = "skegd"
    params = (
        *KERNEL_PARAMS,
        Param("budget", 100, int, "stage-1 buffer size B", positive, "> 0"),
        Param("sketch_size", None, int, "SJLT sketch size s_p (default floor(3B/4))", positive,
              "> 0"),
        Param("tau", 0.2, float, "landmarks s_m = round(tau * s_p)", positive, "> 0"),
        Param("rank", None, int, "rank k of the eigen-decomposition of the sketch "
              "(default round(0.1 B))", positive, "> 0"),
        Param("sjlt_nonzeros", 4, int, "SJLT blocks d_b (nonzeros per sketch row)", positive,
              "> 0"),
        Param("eta", 0.5, float, "step size", positive, "> 0"),
        Param("lam", 0.001, float, "L2 regularisation lambda (eta*lam < 1)", nonneg, ">= 0"),
        Param("horizon", None, int, "stream length T for the update cycle "
              "rho = floor(theta (T - B)); None = unknown (geometric schedule)", positive, "> 0"),
        Param("theta", 0.3, float, "update-cycle fraction theta", unit_open, "in (0, 1)"),
        Param("update_cycle", None, int, "explicit update cycle rho (overrides horizon/theta)",
              positive, "> 0"),
        Param("loss", "hinge", str, "classification loss", choices=CLASSIFICATION_LOSSES),
        Param("exact_svd", False, bool, "exact eigh of the sketch (True) or randomized "
              "(paper, uses the learner's RNG)"),
        Param("reference_quirks", False, bool, "replicate the [C-FORKS] simplifications"),
        TIE_PARAM,
    )
    randomized = True
    accepts_sparse = True  # buffer, rows R and landmarks are store rows (sparse in sparse mode)
    reference = ("Zhang & Liao, ICML 2019, Algorithm 1; [C-FORKS]; "
                 "FORKS re-implementation for reference_quirks")
    # diverge on ordinary data (``loss``): the conformance suite exempts them by name
    known_divergent: ClassVar[tuple[dict[str, Any], ...]] = (
        {"kernel": "polynomial", "loss": "squared-hinge"},
        {"kernel": "linear", "loss": "squared-hinge"},
    )

    kernel: str
    gamma: float
    degree: int
    budget: int
    sketch_size: int | None
    tau: float
    rank: int | None
    sjlt_nonzeros: int
    horizon: int | None
    theta: float
    update_cycle: int | None
    loss: str
    exact_svd: bool
    reference_quirks: bool

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        sp, sm, k = sizes(p)
        B = p["budget"]
        if sm > B:
            raise ValueError(f"{cls.name}: landmarks s_m = round(tau * s_p) = {sm} must be <= "
                             f"budget {B} (lower tau or sketch_size)")
        # name the parameters the user set: a default s_p or k comes from the budget
        s_p = (f"sketch_size s_p = {sp}" if p["sketch_size"] is not None else
               f"sketch_size s_p = floor(3 * budget / 4) = {sp} for budget={B} (raise budget "
               "or set sketch_size)")
        if k > sp:
            raise ValueError(f"{cls.name}: rank {k} must be <= {s_p}, or lower rank")
        if p["sjlt_nonzeros"] > sp:
            raise ValueError(f"{cls.name}: sjlt_nonzeros {p['sjlt_nonzeros']} must be <= "
                             f"{s_p}, or lower sjlt_nonzeros")
        super().check_params(p)

    def _configure(self) -> None:
        self._sp, self._sm, self._k = sizes(self.hparams)
        self._shrink = 1.0 - self.eta * self.lam
        if self.update_cycle is not None:
            self._rho: int | None = self.update_cycle
        elif self.horizon is not None:
            self._rho = math.floor(self.theta * (self.horizon - self.budget))
        else:
            self._rho = None  # geometric schedule
        self._deriv = LOSSES[self.loss].deriv

    # -- properties ----------------------------------------------------------------------------
    @property
    def update_cycle_rounds(self) -> int | None:
        """The fixed ``ρ`` in use (``None``: geometric schedule of an unknown horizon)."""
        return self._rho

    @property
    def stage(self) -> int:
        return self._stage if self.dim is not None else 1

    @property
    def init_round(self) -> int | None:
        """``T₀`` (1-based), or ``None`` while in stage 1."""
        return self._t0 if self.dim is not None and self._stage == 2 else None

    @property
    def n_updates(self) -> int:
        """Update rounds so far (sketch modifications after the initialisation)."""
        return self._n_updates if self.dim is not None else 0

    @property
    def n_sketch_rows(self) -> int:
        """Rows of the sketched kernel matrix (``B`` + update rounds; ``B`` with the quirks)."""
        if self.dim is None or self._stage == 1:
            return 0
        return self.sv.n

    @property
    def n_support_vectors(self) -> int:
        if self.dim is None:
            return 0
        return self.sv.n if self._stage == 1 else self._sm

    # -- memory: the hypothesis is budgeted (memory_bound = B), the rows R are not ----------
    def max_sketch_rows(self, n_rounds: int) -> int:
        """The most rows ``R`` can have after ``n_rounds`` rounds: ``B`` plus the update rounds
        when the buffer fills as early as it can (round ``B + 1`` is then ``T₀``; a later
        ``T₀`` gives fewer updates). ``B`` with the quirks (``R`` never grows); with a fixed
        ``ρ``, ``⌊(T − 1)/ρ⌋ − ⌊B/ρ⌋`` updates (every round if ``ρ ≤ 1``: linear in ``T``);
        with the geometric schedule about ``log(T/B)/log(1 + theta)``."""
        B, T = self.budget, int(n_rounds)
        if self.reference_quirks or T <= B + 1:
            return B
        rho = self._rho
        if rho is not None:
            return B + (T - B - 1 if rho <= 1 else (T - 1) // rho - B // rho)
        n, c = B, B + 1  # the initialisation round, then _schedule_next's steps
        while True:
            c += max(1, math.floor(self.theta * (c - B)))
            if c > T:
                return n
            n += 1

    def stored_rows(self, n_rounds: int | None = None) -> int:
        """Rows held after ``n_rounds`` rounds (None: ``10⁹`` rounds with the geometric
        schedule, ``horizon`` or ``10⁶`` with a fixed ``ρ``): ``R``'s store (capacity ``B + 1``,
        doubled as ``R`` grows, the old arrays alive while it grows) and the ``s_m``
        landmarks. ``R`` is not capped: the paper appends one row per update round (memory
        ``O(n d)``, ``n = B + ⌊(T − B)/ρ⌋``), so with an unknown horizon it grows like
        ``O(B + log T)``, and with an explicit ``update_cycle`` linearly."""
        if n_rounds is None:
            n_rounds = 10**9 if self._rho is None else (self.horizon or 10**6)
        n, cap = self.max_sketch_rows(n_rounds), self.budget + 1
        grown = 0
        while cap < n:
            grown, cap = cap, 2 * cap
        return cap + grown + self._sm

    @classmethod
    def model_bytes(cls, params: dict[str, Any], n_features: int = 0) -> tuple[int, str]:
        # stage 1's Gram matrix of the buffer (B x B) and the initialisation's products of
        # it (K_B S_p, ...), the sketches Φ_pp, Φ_pm and Q
        B = int(params["budget"])
        sp, sm, k = sizes(params)
        return (8 * (3 * B * B + sp * sp + sp * sm + sm * k),
                f"budget={B:,}: {B:,} x {B:,} matrices")

    def feature_map(self, X: Any) -> np.ndarray:
        """``φ(x)`` of the current (last) feature map for each row of ``X`` (``n × k``), so that
        ``κ(x, x') ≈ φ(x)ᵀφ(x')`` (the paper's eq. 4). Only exists in stage 2."""
        if self.dim is None or self._stage != 2:
            raise ValueError(f"{self.name}: no feature map before stage 2 (the buffer of "
                             f"budget={self.budget} points is not full yet)")
        if isinstance(X, CSR):
            X = X.canonical().check()  # float64 sums, int64 C arrays
            if X.n_features != self.dim:
                raise ValueError(f"{self.name}: expected {self.dim} features, got "
                                 f"{X.n_features}")
            sq = X.row_sq_norms()
            # CSR rows are a sparse learner's (a dense store fails on them either way)
            sparse_land = cast(SparseSVStore, self._land)
            K = np.array([sparse_land.row(self.kern, X.sparse_row(i), float(sq[i]))
                          for i in range(X.n_rows)]).reshape(X.n_rows, self._land.n)
            return K @ self._Qt.T
        A = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if A.shape[1] != self.dim:
            raise ValueError(f"{self.name}: expected {self.dim} features, got {A.shape[1]}")
        if self.sparse:  # sparse landmarks: dense rows against them (sparse–dense products)
            K = np.array([self._land.row(self.kern, a, float(a @ a)) for a in A])
            return K.reshape(len(A), self._land.n) @ self._Qt.T
        return self.kern.matrix(A, cast(SVStore, self._land).points) @ self._Qt.T

    # -- learner hooks -------------------------------------------------------------------------
    def _setup(self, d: int) -> None:
        self.kern: Kernel = make_kernel(self.kernel, self.gamma, self.degree)
        B = self.budget
        # stage 1: the buffer; stage 2: the rows R
        self.sv: AnyStore = make_store(d, B + 1, self.sparse)
        self._K = np.zeros((B, B))  # Gram matrix of the buffer (stage 1 only)
        self._stage = 1
        self._t0 = 0
        self._n_updates = 0
        self._loss_rounds = 0  # loss rounds of the whole stream (quirk clock)
        self._next = 0  # next update round (geometric schedule)
        self._sk = IncrementalSketch(self._sp, self._sm, self.sjlt_nonzeros)
        self._land: AnyStore = make_store(d, 1, self.sparse)  # the s_m landmarks (stage 2)
        self._w = np.zeros(self._k)
        # compiled rounds (dense rows, a kernel the compiled rows know): the kernel row and
        # score of stage 1, φ = Qᵀ κ(landmarks, x) and its score in stage 2, and blocks of
        # rounds (_learn_rows)
        self._compiled = (compiled.fk is not None and not self.sparse
                          and compiled.kernel_ok(self.kern))
        self._set_feature_matrix(np.zeros((self._k, self._sm)))
        if self._compiled:
            self._nzwork = np.empty(d, dtype=np.int64)
            self._kbuf = np.empty(B + 1)
            self._zbuf = np.empty(B + 8)  # φ of stage 2 is padded

    def _fmap(self) -> tuple[Any, ...]:
        """The compiled map of the current stage: the buffer's kernel row, or φ."""
        # compiled rounds: dense stores
        if self._stage == 2:
            land = cast(SVStore, self._land)
            return compiled.proj_map(land.X, land.sqn, land.n, self.kern, self._Q, self._k)
        sv = cast(SVStore, self.sv)
        return compiled.row_map(sv.X, sv.sqn, sv.n, self.kern)

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        # compiled: the numbers below, up to round-off (sums in another order)
        if self._compiled and (self._stage == 2 or self.sv.n):
            x = x if x.flags.c_contiguous else np.ascontiguousarray(x)
            if self._stage == 2:
                k_land, phi = np.empty(self._land.n), np.empty(self._Q.shape[1])  # padded
                f = compiled.fk.score(self._fmap(), self._w, x, xx, k_land, phi, self._nzwork)
                return f, (k_land, phi[:self._k])
            k = np.empty(self.sv.n)
            return compiled.fk.score(self._fmap(), self.sv.a, x, xx, None, k, self._nzwork), k
        if self._stage == 2:
            k_land = self._land.row(self.kern, x, xx)
            phi = self._Qt @ k_land
            return float(self._w @ phi), (k_land, phi)
        sv = self.sv
        n = sv.n
        if n == 0:
            return 0.0, None
        k = sv.row(self.kern, x, xx)
        return float(sv.a[:n] @ k), k

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        g = self._deriv(score, y)
        quirks = self.reference_quirks
        if quirks:
            if g == 0.0:
                return  # [C-FORKS]: zero-loss rounds change nothing
            self._loss_rounds += 1
        if self._stage == 2:
            self._stage2(x, xx, y, score, aux, g)
            return
        sv = self.sv
        n = sv.n
        if n < self.budget:  # stage 1: KOGD
            if self._shrink != 1.0 and n:
                sv.scale(self._shrink)
            if g != 0.0:
                kxx = self.kern.diag(xx)
                gram_append(self._K, n, aux, kxx)
                sv.append(x, xx, -self.eta * g, id_=self.t, s=self.t,
                          fz=score * self._shrink, kzz=kxx)
            return
        self._initialize(score, aux, g)

    def step(self, x: Any, y: Any) -> float:
        """Predict then learn; returns the pre-update score. A stage-2 round that is not an
        update round, with the hinge loss and without the quirks, on compiled rounds, a dense
        float64 row and a label of ±1 (int or float), is one compiled call (``fk.step``: the
        norm, ``φ``, the score, the shrink and the step of ``w``, as the block driver takes
        them); anything else, bad input included, takes :meth:`Learner.step`."""
        if (self.dim is not None and self._stage == 2 and self._compiled
                and (type(y) is float or type(y) is int) and (y == 1 or y == -1)
                and self.loss == "hinge" and not self.reference_quirks
                and self._rounds_to_update() > 0):
            r = compiled.fk.step(self._fmap(), self._w, x, y, compiled.MARGIN, self.eta,
                                 self._shrink, self._kbuf, self._zbuf, self._nzwork)
            if r is not None:
                if self._pending is not None:  # undoes a pending draw
                    self._drop_pending()
                self.t += 1
                return cast(float, r[0])
        return cast(float, super().step(x, y))

    def _run_block(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                   n_sv: np.ndarray | None, i: int, fired: Any) -> tuple[int, Any]:
        """Compiled rounds from row ``i``. Stage 2 with the hinge loss: a round that is not an
        update round is ``w ← (1 − ηλ) w``, then ``w += η y φ`` on a margin error, which the
        driver takes itself, up to the next update round (the per-example code). Otherwise
        every round whose update does more than nothing (with the quirks, or without
        shrinkage: the loss rounds; else all) runs :meth:`_update` from the driver, which
        stops when the stage changes."""
        rows = X.shape[0]
        hinge, quirks = self.loss == "hinge", self.reference_quirks
        quiet = (compiled.MARGIN if hinge and (quirks or self._shrink == 1.0)
                 else compiled.ALWAYS)
        kb, zb = self._kbuf, self._zbuf
        if self._stage == 2:
            if hinge and not quirks:
                stop = min(rows, i + self._rounds_to_update())
                j, _ = compiled.fk.run(self._fmap(), self._w, X, zz, yv, i, stop,
                                       compiled.MARGIN, self.eta, self._shrink, out, n_sv,
                                       self._sm, kb, zb, self._nzwork, None)
                return j, None

            def on_fire2(j: int) -> tuple[Any, ...]:
                fired(j, (kb[:self._land.n], zb[:self._k]))
                return self._fmap(), self._w, self._sm

            j, _ = compiled.fk.run(self._fmap(), self._w, X, zz, yv, i, rows, quiet, None, 1.0,
                                   out, n_sv, self._sm, kb, zb, self._nzwork, on_fire2)
            return j, None
        sv = self.sv
        if sv.n == 0 or (sv.n >= self.budget and not quirks):
            return i, None  # the first round, or the initialisation: the per-example code

        def on_fire1(j: int) -> tuple[Any, ...] | None:
            fired(j, zb[:sv.n])
            if self._stage == 2 or (sv.n >= self.budget and not quirks):
                return None
            return self._fmap(), sv.a, sv.n

        j, _ = compiled.fk.run(self._fmap(), sv.a, X, zz, yv, i, rows, quiet, None, 1.0, out,
                               n_sv, sv.n, kb, zb, self._nzwork, on_fire1)
        return j, None

    def _rounds_to_update(self) -> int:
        """Rounds from the current one (round ``t + 1``) to the next stage-2 update round
        (0: this one), by the paper's clock (:meth:`_is_update`)."""
        c = self.t + 1
        rho = self._rho
        if rho is None:
            return max(0, self._next - c)
        return 0 if rho <= 1 else (1 - c) % rho

    def _clock(self) -> int:
        """The index the update cycle runs on: the round (paper) or the loss-round count."""
        return self._loss_rounds if self.reference_quirks else self.t + 1

    def _schedule_next(self, c: int) -> None:
        if self._rho is None:
            self._next = c + max(1, math.floor(self.theta * (c - self.budget)))

    def _is_update(self, c: int) -> bool:
        rho = self._rho
        if rho is None:
            return c >= self._next
        return rho <= 1 or c % rho == 1

    def _refresh(self) -> None:
        Q = self._sk.feature_matrix(self._k, exact=self.exact_svd, rng=self.rng)
        self._set_feature_matrix(Q.T)

    def _set_feature_matrix(self, Qt: np.ndarray) -> None:
        """``Qᵀ`` (``k × s_m``), and for the compiled map ``Q`` itself (the ``k`` features
        then accumulate side by side)."""
        self._Qt = np.ascontiguousarray(Qt)
        if self._compiled:
            self._Q = compiled.padded_t(self._Qt)

    def _initialize(self, score: float, k_buf: np.ndarray, g: float) -> None:
        """Round ``T₀``: sketches of the buffer's Gram matrix, feature map, carried-over ``w``."""
        B = self.budget
        sk = self._sk
        sk.initialize(self._K[:B, :B], self.rng)
        self._K = np.zeros((0, 0))  # not needed any more
        idx = sk.landmarks
        self._land = self.sv.subset(idx)
        self._refresh()
        phi = self._Qt @ k_buf[idx]
        nrm2 = float(phi @ phi)
        self._w = (score / nrm2) * phi if nrm2 > _TINY else np.zeros(self._k)
        if self.reference_quirks and g != 0.0:  # [C-FORKS] also takes a gradient step at T₀
            self._w *= self._shrink
            self._w += (-self.eta * g) * phi
        self._stage = 2
        self._t0 = self.t + 1
        self._schedule_next(self._clock())

    def _stage2(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any,
                g: float) -> None:
        k_land, phi = aux
        c = self._clock()
        fbar = score
        if self._is_update(c):
            quirks = self.reference_quirks
            psi = self.sv.row(self.kern, x, xx)  # against R (the buffer only, with the quirks)
            self._sk.add_row(psi, self.kern.diag(xx), k_land, self.rng, store=not quirks)
            if not quirks:
                self.sv.append(x, xx, 0.0, id_=self.t, s=self.t)
            self._refresh()
            self._n_updates += 1
            self._schedule_next(c)
            phi = self._Qt @ k_land
            if not quirks:
                nrm2 = float(phi @ phi)
                if nrm2 > _TINY:  # w̄ keeps the current prediction at x_t under the new map
                    self._w = (score / nrm2) * phi
                else:
                    fbar = float(self._w @ phi)
            if not quirks:
                g = self._deriv(fbar, y)
        w = self._w
        if self._shrink != 1.0:
            w *= self._shrink
        if g != 0.0:
            w += (-self.eta * g) * phi

    # -- state ---------------------------------------------------------------------------------
    def _get_state(self) -> dict[str, np.ndarray]:
        st = self.sv.get_state("sv.")
        st["skegd.ints"] = np.array([self._stage, self._t0, self._n_updates, self._loss_rounds,
                                     self._next], dtype=np.int64)
        if self._stage == 1:
            n = self.sv.n
            st["skegd.K"] = self._K[:n, :n].copy()
        else:
            st.update(self._sk.get_state("skegd.sk."))
            st["skegd.Qt"] = self._Qt.copy()
            st["skegd.w"] = self._w.copy()
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        assert self.dim is not None  # for mypy: set_state fixes it first
        self.sv = store_from_state(state, "sv.", self.dim, capacity=self.budget + 1)
        ints = [int(v) for v in state["skegd.ints"]]
        self._stage, self._t0, self._n_updates, self._loss_rounds, self._next = ints
        if self._stage == 1:
            n = self.sv.n
            self._K[:n, :n] = state["skegd.K"]
        else:
            self._K = np.zeros((0, 0))
            self._sk.set_state(state, "skegd.sk.")
            check_ints("skegd.sk.landmarks", self._sk.landmarks, 0, self.sv.n)
            self._land = self.sv.subset(self._sk.landmarks)
            Qt = np.asarray(state["skegd.Qt"], dtype=np.float64)
            check_shape("skegd.Qt", Qt, (min(len(Qt), self._k), self._sm))  # ≤ k features
            self._set_feature_matrix(Qt)
            self._w = np.array(state["skegd.w"], dtype=np.float64)
            check_shape("skegd.w", self._w, (len(Qt),))
