"""OMKC family (Hoi, Jin, Zhao & Yang 2013) as used by Lu et al., and its bounded versions
(Lu et al., ACM TIST 2018, Algorithms 3 and 4).

Unbounded: ``omkc-u``, ``omkc-dd``, ``omkc-sd`` (Perceptron components) and ``omkc-ddpa``,
``omkc-sdpa`` (PA-I components). Bounded: ``bomkc-dd`` (Algorithm 3, budget ``B/m`` per
component) and ``bomkc-sd`` (Algorithm 4, total budget ``B``), whose "budget maintenance" is
one of the library's single-kernel budget learners (``budget_maintenance`` ∈ {``rbp``,
``forgetron``, ``bogd``, ``bpa-s``}) run as the component of every kernel.

References: S. C. H. Hoi, R. Jin, P. Zhao and T. Yang, "Online multiple kernel
classification", Machine Learning 90(2), 2013; J. Lu, D. Sahoo, P. Zhao and S. C. H. Hoi,
ACM TIST 9(4), 2018 (§6.2 and Algorithms 3–4).
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners._multikernel import (
    DELTA_PARAM,
    DISCOUNT_PARAM,
    M_KERNELS,
    POLY_DEGREES,
    StoreCombination,
    pool_diag,
    pool_kernel_params,
)
from kernelstream.learners._omkc_rounds import CompiledRounds
from kernelstream.learners.base import TIE_PARAM, Param, nonneg, positive
from kernelstream.learners.params import ShrinkParams
from kernelstream.learners.registry import get, register
from kernelstream.learners.store import SVStore, eval_stores

_REF = "Hoi, Jin, Zhao & Yang, Machine Learning 2013; Lu et al., ACM TIST 2018, §6.2"
_PA_C = Param("c", 0.1, float, "PA-I aggressiveness C of every component (τ ≤ C)", positive,
              "> 0")


class _OMKC(StoreCombination):
    """Unbounded OMKC: one Perceptron or PA-I component per pool kernel, Hedge-weighted vote.

    Class switches: ``pa`` (PA-I components), ``stochastic`` (SD: update with probability
    ``p_i``), ``uniform_weights`` (U: ``θ`` fixed).
    """

    max_poly_degree = max(POLY_DEGREES)  # the pool's polynomials (the input bound)

    pa: ClassVar[bool] = False
    stochastic: ClassVar[bool] = False

    c: float
    delta: float

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        ys = y * aux
        mist = ys <= 0.0  # M_i = 1[y f^i(x) ≤ 0] (Hoi et al. 2013), also the Perceptron trigger
        upd = (ys < 1.0) if self.pa else mist  # PA-I: positive hinge loss (⊇ mistakes)
        idx = np.flatnonzero(upd)
        if not len(idx):
            return
        if self.stochastic:
            # SD: Z_i ~ B(p_i) for the kernels that would change (an update or a discount);
            # for the others Z_i has no effect, so it is not drawn.
            p = self._sample_weight(self._theta, self.delta)[idx]
            idx = idx[self.rng.random(len(idx)) < p]
            if not len(idx):
                return
        disc = idx[mist[idx]]  # mistakes ⊆ updates, so this is every discounted kernel
        kxx = pool_diag(xx)[idx]
        ok = kxx > 0.0  # κ_i(x, ·) = 0 (polynomial kernel at x = 0) is never stored
        if not ok.all():
            idx, kxx = idx[ok], kxx[ok]
        if self.pa:
            coef = np.minimum(self.c, (1.0 - ys[idx]) / kxx) * y
        else:
            coef = np.full(len(idx), y)
        self.store.add(x, xx, idx, coef, id_=self.t)
        if len(disc):
            self._discount(disc)


_DOC_COMMON = """
    Pool: the 16 kernels of Lu et al. 2018 (``(xᵀx')^p``, ``p = 1..3``; Gaussians with
    ``σ = 2^-6..2^6``). Score = vote ``Σ_i θ_i sign(f^i(x))`` with ``sign(0) = 0`` (an
    exactly-zero kernel abstains; a zero vote is labelled by ``tie``).
    ``M_i = 1[y f^i(x) ≤ 0]``. ``n_support_vectors`` sums the SVs of all kernels (Lu et al.'s
    #SV; a point stored by several kernels counts once per kernel, but is kept once in memory).
    Unbounded: at most one SV per kernel and round. A zero function ``κ_i(x_t, ·)``
    (polynomial kernel at ``x_t = 0``) is never stored."""


@register
class OMKCU(_OMKC):
    __doc__ = """OMKC-U: uniform combination of 16 kernel Perceptrons.

    Every component adds ``x_t`` with coefficient ``y_t`` on its own mistake; ``θ = 1/m``
    fixed. Deterministic.
    """ + _DOC_COMMON + """

    Parameters
    ----------
    tie
        Label predicted for a zero score/vote.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("omkc-u")
    >>> m.learn_one([0.5, 0.5], -1)  # f^i = 0: every component errs and stores x
    >>> m.n_support_vectors
    16
    """
    name = "omkc-u"
    params = (TIE_PARAM,)
    uniform_weights = True
    reference = _REF


@register
class OMKCDD(_OMKC):
    __doc__ = """OMKC-DD: deterministic combination, deterministic (Perceptron) updates.

    Every component with ``M_i = 1`` adds ``x_t`` with ``y_t``; ``θ_i ← θ_i γ^{M_i}``,
    renormalised. Deterministic.
    """ + _DOC_COMMON + """

    Parameters
    ----------
    discount
        Hedge discount ``γ ∈ (0, 1)`` (default 0.99, as Lu et al.).
    tie
        Label predicted for a zero score/vote.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("omkc-dd")
    >>> m.learn_one([0.5, 0.5], -1)
    >>> m.n_support_vectors, float(m.kernel_distribution[0])
    (16, 0.0625)
    """
    name = "omkc-dd"
    params = (DISCOUNT_PARAM, TIE_PARAM)
    reference = _REF


@register
class OMKCSD(_OMKC):
    __doc__ = """OMKC-SD: deterministic combination, stochastic (Perceptron) updates.

    ``p_i = (1 − δ) θ_i / max_j θ_j + δ``; ``Z_i ~ B(p_i)``; only if ``Z_i = 1``:
    ``θ_i ← θ_i γ^{M_i}`` and a Perceptron update on a mistake; ``θ`` renormalised (Lu et al.'s
    Algorithm 4 without the budget). ``Z_i`` is drawn only for kernels with ``M_i = 1`` (for
    the others it changes nothing), one uniform each in kernel order.
    """ + _DOC_COMMON + """

    Parameters
    ----------
    discount
        Hedge discount ``γ ∈ (0, 1)`` (default 0.99).
    delta
        Smoothing ``δ ∈ (0, 1)`` (default 0.001).
    tie
        Label predicted for a zero score/vote.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("omkc-sd", seed=0)
    >>> m.learn_one([0.5, 0.5], -1)  # p_i = 1 at the start
    >>> m.n_support_vectors
    16
    """
    name = "omkc-sd"
    params = (DISCOUNT_PARAM, DELTA_PARAM, TIE_PARAM)
    stochastic = True
    randomized = True
    reference = "Hoi, Jin, Zhao & Yang, MLJ 2013; Lu et al., ACM TIST 2018, Algorithm 4"


@register
class OMKCDDPA(_OMKC):
    __doc__ = """OMKC-DDPA: OMKC-DD with PA-I components (Lu et al.'s stronger baseline).

    Every component with ``ℓ_i = [1 − y f^i(x_t)]_+ > 0`` adds ``x_t`` with ``τ_i y_t``,
    ``τ_i = min(C, ℓ_i/κ_i(x_t, x_t))``; ``θ_i ← θ_i γ^{M_i}``, renormalised. Deterministic.
    """ + _DOC_COMMON + """

    Parameters
    ----------
    c
        PA-I aggressiveness ``C`` (default 0.1, as Lu et al.).
    discount
        Hedge discount ``γ ∈ (0, 1)`` (default 0.99).
    tie
        Label predicted for a zero score/vote.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("omkc-ddpa")
    >>> m.learn_one([0.5, 0.5], 1)
    >>> m.n_support_vectors
    16
    """
    name = "omkc-ddpa"
    params = (_PA_C, DISCOUNT_PARAM, TIE_PARAM)
    pa = True
    reference = _REF


@register
class OMKCSDPA(_OMKC):
    __doc__ = """OMKC-SDPA: OMKC-SD with PA-I components.

    ``Z_i ~ B(p_i)``, ``p_i = (1 − δ) θ_i / max_j θ_j + δ``, drawn for the kernels with a
    positive hinge loss; if ``Z_i = 1`` the PA-I update ``τ_i = min(C, ℓ_i/κ_i(x_t, x_t))`` and
    ``θ_i ← θ_i γ^{M_i}``; ``θ`` renormalised.
    """ + _DOC_COMMON + """

    Parameters
    ----------
    c
        PA-I aggressiveness ``C`` (default 0.1).
    discount
        Hedge discount ``γ ∈ (0, 1)`` (default 0.99).
    delta
        Smoothing ``δ ∈ (0, 1)`` (default 0.001).
    tie
        Label predicted for a zero score/vote.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("omkc-sdpa", seed=0)
    >>> m.learn_one([0.5, 0.5], 1)
    >>> m.n_support_vectors
    16
    """
    name = "omkc-sdpa"
    params = (_PA_C, DISCOUNT_PARAM, DELTA_PARAM, TIE_PARAM)
    pa = True
    stochastic = True
    randomized = True
    reference = _REF


# -- bounded versions (Lu et al. 2018, Algorithms 3 and 4) ----------------------------------------
MAINTENANCE = ("rbp", "forgetron", "bogd", "bpa-s")


class _BoundedOMKC(ShrinkParams, CompiledRounds):
    """OMKC whose components are the library's single-kernel budget learners.

    Each pool kernel ``i`` gets its own instance of the learner named by
    ``budget_maintenance`` (``rbp``, ``forgetron`` self-tuned, ``bogd`` in the [C-SOL]
    variant, ``bpa-s``), built with that kernel; its public ``score_checked`` /
    ``learn_checked`` do the "normal update" below its budget and the "budget maintenance" at
    it, so no budget rule is re-implemented here. All components share this learner's RNG
    (one stream, saved once).
    Their scores (``KernelLearner._score``: ``f^i(x)`` and the kernel row the update reuses)
    are computed for all ``m`` at once by :func:`~kernelstream.learners.store.eval_stores`,
    bit for bit. With the compiled kernels, blocks and single rows run in C
    (:class:`~kernelstream.learners._omkc_rounds.CompiledRounds`), bit for bit as these rounds.
    """

    max_poly_degree = max(POLY_DEGREES)  # the pool's polynomials (the input bound)

    stochastic: ClassVar[bool] = False  # Algorithm 4 (SD) rather than 3 (DD)

    budget: int
    budget_maintenance: str
    c: float

    def _configure(self) -> None:
        # RBP draws its evictions; the other maintenances are deterministic
        self.randomized = type(self).randomized or self.budget_maintenance == "rbp"

    def _component_params(self) -> dict[str, Any]:
        m = self.budget_maintenance
        if m == "bogd":
            return {"eta": self.eta, "lam": self.lam, "variant": "sol"}
        if m == "bpa-s":
            return {"c": self.c}
        return {}

    def _component_budgets(self) -> list[int]:
        raise NotImplementedError

    def stored_rows(self, n_rounds: int | None = None) -> int:
        # besides the budget's rows, each component has a spare slot and a d-long buffer (the
        # example's non-zero indices); SD's components share the budget, and each keeps the
        # capacity its store doubled to: about twice the budget in all
        return (2 if self.stochastic else 1) * self.budget + 2 * M_KERNELS

    def _setup(self, d: int) -> None:
        super()._setup(d)
        cls = get(self.budget_maintenance)
        extra = self._component_params()
        # _score evaluates the components' stores directly (KernelLearner._score)
        assert issubclass(cls, KernelLearner) and cls._score is KernelLearner._score
        self.comps: list[KernelLearner] = []
        for i, b in enumerate(self._component_budgets()):
            c = cls(seed=0, budget=b, tie=self.tie, **pool_kernel_params(i), **extra)
            c.rng = self.rng  # one random stream for the whole learner
            c._init_dim(d)  # the store is preallocated for ``b`` SVs
            self.comps.append(c)

    # ‖x‖² as the components compute it (compiled or numpy), so they learn what they would alone
    def _sqnorm(self, x: np.ndarray) -> float:
        return compiled.sqnorm(x)

    def _row_sqnorms(self, X: np.ndarray) -> np.ndarray:
        return compiled.row_sqnorms(X)

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        comps = self.comps
        if comps[0]._compiled:  # each component's compiled score
            s = np.empty(len(comps))
            rows: list[Any] = []
            for i, c in enumerate(comps):
                s[i], row = c.score_checked(x, xx)
                rows.append(row)
            return self._vote(s), (s, rows)
        # every component's KernelLearner._score at once: s_i = f^i(x) and its kernel row,
        # reused by the component's update (bit for bit, see eval_stores)
        # dense stores: these learners do not take sparse rows
        s, rows = eval_stores(cast("list[SVStore]", [c.sv for c in comps]),
                              [c.kern for c in comps], x, xx)
        return self._vote(s), (s, rows)

    def _learn_component(self, i: int, x: np.ndarray, xx: float, y: float, s: float,
                         row: Any) -> None:
        self.comps[i].learn_checked(x, xx, y, s, row)

    @property
    def n_support_vectors(self) -> int:
        return sum(c.n_support_vectors for c in self.comps) if self.dim is not None else 0

    def _get_state(self) -> dict[str, np.ndarray]:
        st = super()._get_state()
        for i, c in enumerate(self.comps):
            st[f"c{i}.t"] = np.array(c.t, dtype=np.int64)
            st.update({f"c{i}.{k}": v for k, v in c._get_state().items()})
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        for i, c in enumerate(self.comps):
            pre = f"c{i}."
            c.t = int(state[f"{pre}t"])
            c._set_state({k[len(pre):]: v for k, v in state.items() if k.startswith(pre)})


_BOUNDED_PARAMS = (
    Param("budget", 1600, int, "total budget B of support vectors over all kernels", positive,
          "> 0"),
    Param("budget_maintenance", "rbp", str,
          "single-kernel budget learner used by every component", choices=MAINTENANCE),
    Param("eta", 0.1, float, "BOGD step size η (budget_maintenance='bogd')", positive, "> 0"),
    Param("lam", 0.0, float, "BOGD regularisation λ (budget_maintenance='bogd')", nonneg,
          ">= 0"),
    Param("c", 0.1, float, "BPA-S aggressiveness C (budget_maintenance='bpa-s')", positive,
          "> 0"),
)

_DOC_BOUNDED = """
    Components: one instance per pool kernel of the budget learner named by
    ``budget_maintenance`` — ``rbp`` (random eviction), ``forgetron`` (self-tuned, oldest
    evicted), ``bogd`` ([C-SOL] variant: oldest evicted, ``η``, ``λ``) or ``bpa-s`` (``C``) —
    whose own rules perform the normal update and, at the budget, the maintenance. Score = vote
    ``Σ_i θ_i sign(f^i(x))``; ``M_i = 1[y f^i(x) ≤ 0]``. ``n_support_vectors`` sums all
    components (≤ ``budget``).

    Design: one registered name per algorithm with a ``budget_maintenance`` choice (rather than
    eight names such as ``omkc-dd-rbp``), because the combination logic is identical and only
    the component class changes; the components are the library's own learners, so their
    update rules are not re-implemented."""


@register
class BOMKCDD(_BoundedOMKC):
    __doc__ = """Bounded OMKC-DD (Lu et al. 2018, Algorithm 3): per-component budget ``B/m``.

    Every round every component is updated with its own rule (Perceptron-type for ``rbp`` and
    ``forgetron``, hinge for ``bogd`` and ``bpa-s``); a component holding its budget applies
    the maintenance instead of a plain insertion. ``θ_i ← θ_i γ^{M_i}``, renormalised. The
    budget ``B`` is split as evenly as possible (``⌊B/m⌋``, the first ``B mod m`` kernels get
    one more; Lu et al.'s budgets are multiples of 16), so ``B ≥ 16`` is required.
    """ + _DOC_BOUNDED + """

    Parameters
    ----------
    budget
        Total budget ``B`` (default 1600; Lu et al. set it to BOMKC(SPA)'s #SV).
    budget_maintenance
        ``rbp``, ``forgetron``, ``bogd`` or ``bpa-s`` (default ``rbp``).
    eta, lam
        BOGD step size (default 0.1) and regularisation (default 0) (Lu et al. search
        ``{1, 0.1, …, 10^-4}``).
    c
        BPA-S aggressiveness (default 0.1, Lu et al.'s PA learning rate).
    discount
        Hedge discount ``γ`` (default 0.99).
    tie
        Label predicted for a zero score/vote.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("bomkc-dd", budget=32, budget_maintenance="forgetron")
    >>> for i in range(20):
    ...     m.learn_one([float(i % 3), float(i % 5)], 1 if i % 2 else -1)
    >>> m.n_support_vectors <= 32
    True
    """
    name = "bomkc-dd"
    params = (*_BOUNDED_PARAMS, DISCOUNT_PARAM, TIE_PARAM)
    randomized = False  # instances with budget_maintenance="rbp" set it to True
    reference = "Lu, Sahoo, Zhao & Hoi, ACM TIST 2018, Algorithm 3"

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        super().check_params(p)
        if p["budget"] < M_KERNELS:
            raise ValueError(f"{cls.name}: budget must be >= {M_KERNELS} (B/m per kernel), got "
                             f"{p['budget']!r}")

    def _component_budgets(self) -> list[int]:
        q, r = divmod(self.budget, M_KERNELS)
        return [q + (i < r) for i in range(M_KERNELS)]

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        self._fused = None  # this round changes what om.step keeps, in Python
        s, rows = aux
        for i in range(M_KERNELS):
            self._learn_component(i, x, xx, y, float(s[i]), rows[i])
        mist = y * s <= 0.0
        if mist.any():
            self._discount(mist)


@register
class BOMKCSD(_BoundedOMKC):
    __doc__ = """Bounded OMKC-SD (Lu et al. 2018, Algorithm 4): total budget ``B``.

    For every kernel ``i``: ``p_i = (1 − δ) θ_i / max_j θ_j + δ``, ``Z_i ~ B(p_i)`` (``m``
    uniforms per round, kernels in order, with the weights of the prediction); if ``Z_i = 1``:
    ``θ_i ← θ_i γ^{M_i}`` and the component is updated — a normal update while
    ``Σ_j |S_j| < B``, otherwise its budget maintenance (the component acts as if its budget
    were its current size, so its evictions stay inside it and the total never exceeds ``B``).
    ``θ`` is renormalised at the end of the round.

    Reconstruction details (not in the paper): the component's budget is set to its current
    size while the total is full, and ring-buffer heads are re-pointed at its oldest SV before
    each call; a component holding no SV when the total is full is not updated (it has nothing
    to evict); sizes therefore freeze once the budget is reached.
    """ + _DOC_BOUNDED + """

    Parameters
    ----------
    budget
        Total budget ``B`` (default 1600).
    budget_maintenance
        ``rbp``, ``forgetron``, ``bogd`` or ``bpa-s`` (default ``rbp``).
    eta, lam
        BOGD step size (default 0.1) and regularisation (default 0).
    c
        BPA-S aggressiveness (default 0.1).
    discount
        Hedge discount ``γ`` (default 0.99).
    delta
        Smoothing ``δ`` (default 0.001).
    tie
        Label predicted for a zero score/vote.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("bomkc-sd", seed=0, budget=10, budget_maintenance="bpa-s")
    >>> for i in range(20):
    ...     m.learn_one([float(i % 3), float(i % 5)], 1 if i % 2 else -1)
    >>> m.n_support_vectors <= 10
    True
    """
    name = "bomkc-sd"
    params = (*_BOUNDED_PARAMS, DISCOUNT_PARAM, DELTA_PARAM, TIE_PARAM)
    randomized = True
    stochastic = True
    reference = "Lu, Sahoo, Zhao & Hoi, ACM TIST 2018, Algorithm 4"

    delta: float

    def _component_budgets(self) -> list[int]:
        # Placeholder (small preallocation); the effective budget is set before every call.
        return [1] * M_KERNELS

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        self._fused = None  # this round changes what om.step keeps, in Python
        s, rows = aux
        p = self._sample_weight(self._theta, self.delta)
        z = self.rng.random(M_KERNELS) < p
        total = self.n_support_vectors
        B = self.budget
        for i in np.flatnonzero(z):
            c = self.comps[i]
            sv = c.sv
            n = sv.n
            if total >= B:
                if n == 0:
                    continue
                c.budget = n
                if hasattr(c, "_head"):
                    c._head = sv.oldest()
            else:
                c.budget = B
            self._learn_component(int(i), x, xx, y, float(s[i]), rows[i])
            total += sv.n - n
        disc = z & (y * s <= 0.0)
        if disc.any():
            self._discount(disc)
