"""OKS++ — online kernel selection with adaptive parameter tuning for smooth losses
(Li & Liao, ECML-PKDD 2022), plus the skeleton shared by that paper's bandit selectors (IOKS
and the random-feature variants):
draw a kernel in ``predict_one``, update only that kernel, with two hypothesis back-ends (one
kernel expansion per width, or one random-feature weight vector per width). The width
parameter, the horizon convention and the kernel pool come from ``_selection``.

Reference: J. Li and S. Liao, "Improved regret bounds for online kernel selection under bandit
feedback", ECML-PKDD 2022; the update rules follow the authors' R code [C-P2]
(``OKS++logistic.R``, ``OKS++square.R``), because the paper copy lost its formulas.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners._selection import SIGMAS_PARAM, KernelPool, SelectionLearner
from kernelstream.learners.base import TIE_PARAM, Param, positive
from kernelstream.learners.experts import categorical, hedge
from kernelstream.learners.losses import LOSSES
from kernelstream.learners.registry import register
from kernelstream.learners.rff import FeaturePool
from kernelstream.learners.state import check_reals, check_shape

QUIRKS_DOC = "replicate the authors' R code [C-P2] instead of the intended rule (see docstring)"


# -- the bandit selector skeleton ----------------------------------------------------------------
class BanditSelector(SelectionLearner):
    """Shared skeleton of OKS++/IOKS/OKS-type learners: draw ``I ~ p`` in ``_score`` (the
    randomness that forms the prediction, cached for the update), predict with ``f_I(x)``,
    update only kernel ``I``. Subclasses implement ``_setup_hyp``, ``_eval``, ``_rule`` (the
    scalar selection rule, returning the gradient-step coefficient), ``_step`` and the rule's
    state (``_setup_rule``, ``_rule_state``, ``_set_rule_state``). The widths
    (``sigmas``), ``selected_kernel`` and ``kernel_distribution`` come from
    :class:`~kernelstream.learners._selection.SelectionLearner`."""

    loss: str
    _radius: float | None
    _hyp: Any  # the back-end of the *Hyp mixin (KernelPool or FeaturePool)

    def _configure(self) -> None:
        super()._configure()
        lf = LOSSES[self.loss]
        self.task = lf.task  # instance attribute: the loss decides the task
        self._lossf = lf

    def _setup(self, d: int) -> None:
        self.p = np.full(self.K, 1.0 / self.K)
        self._selected = -1
        self._setup_rule()
        self._setup_hyp(d)

    def _distribution(self) -> np.ndarray:
        return self.p

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        i = categorical(self.rng, self.p)
        self._selected = i
        f, h = self._eval(i, x, xx)
        return f, (i, h)

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        i, h = aux
        lf = self._lossf
        coef = self._rule(i, lf.value(score, y), lf.deriv(score, y), y * score)
        self._step(i, x, xx, score, coef, h)

    # hooks
    def _setup_rule(self) -> None:
        raise NotImplementedError

    def _setup_hyp(self, d: int) -> None:
        raise NotImplementedError

    def _eval(self, i: int, x: np.ndarray, xx: float) -> tuple[float, Any]:
        raise NotImplementedError

    def _rule(self, i: int, ell: float, g: float, yf: float) -> float:
        raise NotImplementedError

    def _step(self, i: int, x: np.ndarray, xx: float, f: float, coef: float, h: Any) -> None:
        raise NotImplementedError

    def _rule_state(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _set_rule_state(self, state: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def _get_state(self) -> dict[str, np.ndarray]:
        st = {"sel.p": self.p.copy(), "sel.last": np.array(self._selected, dtype=np.int64)}
        st.update(self._rule_state())
        st.update(self._hyp.get_state("hyp."))
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self.p = np.array(state["sel.p"], dtype=np.float64)
        self._selected = int(state["sel.last"])
        self._set_rule_state(state)
        self._hyp.set_state(state, "hyp.")


class KernelHyp(compiled.CompiledSqnorms):
    """Mixin: one kernel expansion per width (:class:`~kernelstream.learners._selection.
    KernelPool`); only the sampled one is evaluated. The step appends ``x`` with the given
    coefficient (even 0, as [C-P2]) and projects onto ``‖f_I‖ ≤ U`` using the exactly tracked
    norm ``‖f + cκ_x‖² = ‖f‖² + 2c f(x) + c²``.

    ``‖x‖²`` is the compiled sequential sum (:class:`~kernelstream.learners.compiled.
    CompiledSqnorms`), like the pool's compiled scores: BLAS's ``x @ x`` sums in blocks that
    depend on the kernel OpenBLAS picks for the CPU, so a run would round differently on
    another host (issue 28)."""

    _hyp: Any

    def _setup_hyp(self: Any, d: int) -> None:
        self._hyp = KernelPool(self.widths, d)

    def _eval(self: Any, i: int, x: np.ndarray, xx: float) -> tuple[float, Any]:
        return self._hyp.score(i, x, xx)[0], None

    def _step(self: Any, i: int, x: np.ndarray, xx: float, f: float, coef: float,
              h: Any) -> None:
        sv = self._hyp.stores[i]
        sv.append(x, xx, coef, id_=self.t, s=self.t, fz=f, kzz=1.0)
        if self._radius is not None:
            sv.project(self._radius)

    @property
    def n_support_vectors(self: Any) -> int:
        return self._hyp.n_support_vectors if self.dim is not None else 0


class FeatureHyp:
    """Mixin: the random-feature back-end (:class:`~kernelstream.learners.rff.FeaturePool`,
    only the sampled kernel's features are computed) with box clipping
    ``±U/√D`` when ``_radius`` is set. ``n_support_vectors`` is 0 (no stored examples)."""

    _hyp: Any
    n_components: int

    def _setup_hyp(self: Any, d: int) -> None:
        self._hyp = FeaturePool(self.rng, d, self.widths.sigmas, self.n_components)
        r = self._radius
        self._clip = None if r is None else r / math.sqrt(self.n_components)

    def _eval(self: Any, i: int, x: np.ndarray, xx: float) -> tuple[float, Any]:
        return self._hyp.eval(i, x, xx)

    def _step(self: Any, i: int, x: np.ndarray, xx: float, f: float, coef: float,
              h: Any) -> None:
        self._hyp.step(i, h, coef, self._clip)

    @property
    def n_support_vectors(self: Any) -> int:
        return 0

    def memory_bound(self: Any) -> int | None:
        return 0  # random features: no stored rows (memory fixed by n_components)


# -- OKS++ ---------------------------------------------------------------------------------------
def fixed_hedge(cum_loss: np.ndarray, eta: float) -> np.ndarray:
    """:func:`~kernelstream.learners.experts.hedge` whose numbers depend on nothing but its
    inputs: the exponential is ``_ck_multi``'s (fdlibm's algorithm, the one the pool's scores
    use) and the normaliser a sequential sum. numpy's ``exp`` takes a SIMD loop on CPUs with
    AVX-512 and libm's elsewhere, so numpy's weights round differently from host to host
    (issue 28). Without the compiled kernels: :func:`hedge`."""
    mk = compiled.mk
    if mk is None:
        return hedge(cum_loss, eta)
    z = -eta * (cum_loss - cum_loss.min())
    mk.exp(z)
    tot = 0.0
    for v in z.tolist():
        tot += v
    z /= tot
    return z


# (U, C0) per loss (C-P2); G = 1 for both.
OKSPP_CONSTANTS: dict[str, tuple[float, float]] = {"logistic": (15.0, 1.0), "square": (1.0, 4.0)}


class OKSPPRule:
    """The scalar part of OKS++ (losses, exploration and Hedge of the authors' code [C-P2]), shared
    by OKS++ and RF-OKS++.

    Mixin over :class:`BanditSelector`; state: cumulative importance-weighted losses ``L``,
    ``C̃``, ``V``, the Hedge distribution ``q`` (``p`` lives in the selector)."""

    loss: str
    radius: float | None
    reference_quirks: bool
    K: int
    p: np.ndarray

    def _setup_rule(self: Any) -> None:
        U0, C0 = OKSPP_CONSTANTS[self.loss]
        U = U0 if self.radius is None else self.radius
        G = 1.0
        K = self.K
        self._radius = U
        self._C0 = C0
        self._c0 = (G * C0) ** (1.0 / 3.0) * (U * K) ** (2.0 / 3.0)
        # λ_I = lam_num · max(c0³, 8 C̃)^(-1/6) / √(1 + L_I)
        gc = 1.0 if self._quirk_c0 else (G * C0) ** (1.0 / 3.0)
        self._lam_num = math.sqrt(0.75) * U ** (4.0 / 3.0) / (K ** (1.0 / 6.0) * gc)
        self._hedge0 = math.sqrt(2.0 * math.log(K)) if K > 1 else 0.0
        self.L = np.zeros(K)
        self.q = np.full(K, 1.0 / K)
        self.Ct = 0.0
        self.V = 0.0

    @property
    def _quirk_c0(self: Any) -> bool:
        return bool(self.reference_quirks) and self.loss == "logistic"

    def _rule(self: Any, i: int, ell: float, g: float, yf: float) -> float:
        p_i = float(self.p[i])
        lt = ell / p_i
        self.Ct += lt
        self.V += lt * lt * float(self.q[i])
        self.L[i] += lt
        # QUIRK (C-P2 logistic files): c0 is overwritten by e^{-y f} of the current round
        c0 = math.exp(-yf) if self._quirk_c0 else self._c0
        lam = self._lam_num * max(c0 ** 3, 8.0 * self.Ct) ** (-1.0 / 6.0) / math.sqrt(
            1.0 + float(self.L[i]))
        coef = -lam * g / p_i
        ct3 = self.Ct ** (1.0 / 3.0)
        delta = 0.5 * c0 / max(c0, 2.0 * ct3)
        eta = self._hedge0 / math.sqrt(1.0 + self.V)
        self.q = self._weights(self.L, eta)
        K = self.K
        self.p = (1.0 - delta) * self.q + delta / K
        return coef

    def _weights(self: Any, L: np.ndarray, eta: float) -> np.ndarray:
        """The Hedge distribution ``softmax(−η L)`` (numpy's :func:`~kernelstream.learners.
        experts.hedge`; OKS++ overrides it with :func:`fixed_hedge`)."""
        return hedge(L, eta)

    def _rule_state(self: Any) -> dict[str, np.ndarray]:
        return {"oks++.L": self.L.copy(), "oks++.q": self.q.copy(),
                "oks++.CV": np.array([self.Ct, self.V])}

    def _set_rule_state(self: Any, state: dict[str, np.ndarray]) -> None:
        self.L = np.array(state["oks++.L"], dtype=np.float64)
        self.q = np.array(state["oks++.q"], dtype=np.float64)
        self.Ct, self.V = (float(v) for v in state["oks++.CV"])
        # sums of losses and a distribution: what the rounds' roots and logs can take
        check_shape("oks++.L", self.L, (self.K,))
        check_shape("oks++.q", self.q, (self.K,))
        check_reals("oks++.L", self.L, 0.0)
        check_reals("oks++.q", self.q, 0.0, 1.0)
        check_reals("oks++.CV", state["oks++.CV"], 0.0)


OKSPP_PARAMS: tuple[Param, ...] = (
    Param("loss", "logistic", str, "loss: logistic (classification) or square (regression)",
          choices=("logistic", "square")),
    SIGMAS_PARAM,
    Param("radius", None, float, "ball radius U (None: 15 for logistic, 1 for square, as C-P2)",
          positive, "> 0"),
    Param("reference_quirks", False, bool, QUIRKS_DOC),
    TIE_PARAM,
)


@register
class OKSPlusPlus(OKSPPRule, KernelHyp, BanditSelector):
    """OKS++: bandit-feedback kernel selection with data-dependent step sizes, exploration
    rate and Hedge rate (smooth losses).

    Each round ``I ~ p`` is drawn (in ``predict_one``), ``f = f_I(x)`` predicts, and only
    ``f_I`` is updated (rules of the authors' code, C-P2): with ``ℓ̃ = ℓ/p_I``,
    ``C̃ += ℓ̃``, ``V += ℓ̃² q_I``, ``L_I += ℓ̃``;
    ``λ_I = √(3/4) U^{4/3} max(c₀³, 8C̃)^{−1/6} / (K^{1/6} (G C₀)^{1/3} √(1 + L_I))``;
    ``f_I ← f_I − λ_I (ℓ'/p_I) κ_I(x, ·)`` (an SV every round), projected onto ``‖f_I‖ ≤ U``
    with the exactly tracked norm; ``δ = ½ c₀ / max(c₀, 2 C̃^{1/3})``,
    ``η = √(2 ln K)/√(1 + V)``, ``q = softmax(−η L)``, ``p = (1 − δ) q + δ/K``, where
    ``c₀ = (G C₀)^{1/3}(U K)^{2/3}``. Constants (C-P2): logistic ``U = 15, C₀ = 1``; square
    ``U = 1, C₀ = 4``; ``G = 1``. Unbounded memory (one SV per round).

    ``reference_quirks=True`` (logistic only; no effect for square loss) replicates
    ``OKS++logistic.R``, where the variable holding ``c₀`` is overwritten by ``e^{−y_t f_t}``
    of the current round, so that value replaces ``c₀`` in ``λ_I`` and ``δ`` (and the factor
    ``(G C₀)^{1/3} = 1`` is omitted). The published logistic numbers (Tables 2, 5
    and 8 of the paper) were produced that way; the default (False) is the intended rule.

    Parameters
    ----------
    loss
        ``logistic`` (classification, labels ±1) or ``square`` (regression; the task follows
        the loss); default ``logistic``.
    sigmas
        Candidate Gaussian widths (default ``2^-2..2^3``).
    radius
        ``U``; ``None`` = the C-P2 value of the loss.
    reference_quirks
        See above (default False).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> import numpy as np
    >>> from kernelstream.learners import make
    >>> m = make("oks++", seed=0)
    >>> X = np.random.default_rng(0).normal(size=(200, 2)); y = np.where(X[:, 0] > 0, 1, -1)
    >>> _ = m.predict_learn_many(X, y)
    >>> m.n_support_vectors, round(float(m.kernel_distribution.sum()), 12)
    (200, 1.0)
    """

    name = "oks++"
    params = OKSPP_PARAMS

    def _weights(self, L: np.ndarray, eta: float) -> np.ndarray:
        return fixed_hedge(L, eta)  # reproducible on any host (issue 28)
    reference = ("Li & Liao, ECML-PKDD 2022, authors' code OKS++logistic.R / "
                 "OKS++square.R (JunfLi-TJU/OKS-Bandit)")
