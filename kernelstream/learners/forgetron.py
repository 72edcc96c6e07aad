"""Forgetron: self-tuned (Dekel et al.) and the fixed-shrink variant of Liao & Li's
code (ECML-PKDD 2021) (Dekel, Shalev-Shwartz & Singer, SIAM J. Comput. 2008).

Reference: O. Dekel, S. Shalev-Shwartz and Y. Singer, "The Forgetron: a kernel-based
perceptron on a budget", SIAM J. Computing 37(5), 2008. Baseline of Liao & Li 2021, Zhang & Liao
2019 and Lu et al. 2018.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM, Param, positive
from kernelstream.learners.registry import register


@register
class Forgetron(KernelLearner):
    """Budget perceptron that shrinks all coefficients and forgets the oldest support vector.

    Support vectors live in a ring of ``B`` slots: the oldest is overwritten in place by the
    newest, so FIFO eviction costs no search.

    ``variant="self-tuned"`` (default; the budget toolboxes of Zhang & Liao, ICML 2019, and
    Lu et al., ACM TIST 2018). On a mistake
    (``y_t f_t(x_t) ≤ 0``): ``M ← M + 1`` and ``x_t`` is added with ``y_t`` (giving ``f'``). If
    that exceeds the budget, with ``r`` the oldest SV, ``σ_r = |a_r|``, ``μ = y_r f'(x_r)``, the
    shrink ``φ`` is the largest value in ``(0, 1]`` with ``A φ² + b φ + c ≤ 0``,
    ``A = σ_r² − 2σ_r μ``, ``b = 2σ_r``, ``c = Q − 15M/32``; all coefficients are multiplied by
    ``φ``, ``Q ← Q + A φ² + b φ`` (= ``Ψ(σ_r φ, φ μ)``) and ``r`` is deleted. This keeps
    ``Q ≤ 15M/32``. ``f'(x_r)`` costs one extra kernel row per eviction.
    The root is computed as ``φ = −2c / (b + √(b² − 4Ac))``, algebraically identical to the
    textbook root ``(−b + √(b² − 4Ac)) / (2A)`` for both signs of ``A`` (and ``= −c/b`` for ``A =
    0``) but free of cancellation when ``|A|`` is small; it is clamped to ``[0, 1]``.
    QUIRK (``reference_quirks=True``): for ``A < 0`` the C++ toolbox takes the other root
    ``(−b − √(b² − 4Ac)) / (2A)``, which is > 1 and is applied unclamped (coefficients grow);
    ``Q`` then lands exactly on ``15M/32``.

    ``variant="p1"`` (``Forgetron.R`` of Liao & Li 2021, "Forgetron-σ"). On a mistake, with
    ``U_F = ¼ √((B+1)/ln(B+1))`` and ``φ = min((B+1)^{−1/(2(B+1))}, U_F / ‖f + y_t κ(x_t,·)‖)``:
    if ``|S| = B`` the oldest SV is dropped; ``x_t`` is added with ``y_t``; all coefficients are
    multiplied by ``φ``. ``‖f‖`` is tracked with the exact norm identities of
    :mod:`kernelstream.learners.store` (dropping the oldest costs one extra kernel row). The
    paper's ``‖f'‖`` is read as in the R code: the norm of ``f + y_t κ(x_t, ·)`` *before* the oldest
    SV is dropped. The code's special first round (always stored) coincides with the generic rule,
    since ``f_1 = 0`` is a mistake. ``reference_quirks`` has no effect in this variant.

    Parameters
    ----------
    kernel, gamma, degree
        Kernel (Gaussian ``exp(-gamma‖x−x'‖²)`` by default; ``sigma`` is accepted for gamma).
    budget
        Maximum number of support vectors ``B`` (default 500, as in Liao & Li's code).
    variant
        ``self-tuned`` or ``p1`` (default ``self-tuned``).
    reference_quirks
        Replicate the C++ toolbox's wrong root for ``A < 0`` (self-tuned only; default False).
    tie
        Label predicted for a zero score.

    Example
    -------
    >>> from kernelstream.learners import make
    >>> m = make("forgetron", budget=2)
    >>> for x, y in [([0.0, 0.0], 1), ([1.0, 0.0], -1), ([2.0, 0.0], 1)]:
    ...     m.learn_one(x, y)
    >>> m.n_support_vectors, m.mistakes
    (2, 3)
    """

    name = "forgetron"
    params = (
        *KERNEL_PARAMS,
        Param("budget", 500, int, "maximum number of support vectors B", positive, "> 0"),
        Param("variant", "self-tuned", str,
              "self-tuned (Dekel et al.) or p1 (code of Liao & Li 2021)",
              choices=("self-tuned", "p1")),
        Param("reference_quirks", False, bool,
              "replicate the C++ toolbox's wrong root for A < 0 (self-tuned)"),
        TIE_PARAM,
    )
    update_when = "mistake"  # a correct prediction leaves the model alone
    reference = "Dekel, Shalev-Shwartz & Singer, SIAM J. Computing 2008 (self-tuned)"
    rule_ints = ("_head", "mistakes")
    rule_floats = ("damage",)

    budget: int
    variant: str
    reference_quirks: bool
    mistakes: int = 0  # M: mistakes so far
    damage: float = 0.0  # Q: accumulated damage of the shrinks (self-tuned)

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self.mistakes = 0
        self.damage = 0.0
        self._head = 0  # ring slot of the oldest SV once the store is full
        b1 = self.budget + 1
        self._p1_shrink = b1 ** (-0.5 / b1)
        self._p1_radius = 0.25 * math.sqrt(b1 / math.log(b1))

    def _rule_config(self) -> tuple[str, list[float]] | None:
        if self.variant == "p1":
            return "forgetron-p1", [self.budget, self._p1_shrink, self._p1_radius]
        return "forgetron", [self.budget, float(self.reference_quirks)]

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if self._compiled_rule():  # the same update compiled (_ck_budget.c), blocks in C
            self._rule_update(x, xx, y, score, aux)
            return
        if y * score > 0.0:
            return
        self.mistakes += 1
        if self.variant == "p1":
            self._update_p1(x, xx, y, score, aux)
            return
        sv = self.sv
        if sv.n < self.budget:
            sv.append(x, xx, y, id_=self.t, s=self.t, fz=score, kzz=self.kern.diag(xx))
            return
        r = self._head
        a = sv.a
        ar = float(a[r])
        # σ_r μ = a_r f'(x_r) since a_r = σ_r y_r; f' = f + y_t κ(x_t, ·), and aux[r] = κ(x_r, x_t).
        am = ar * (self._eval_sv(r) + y * float(aux[r]))
        A = ar * ar - 2.0 * am
        b = 2.0 * abs(ar)
        c = self.damage - 15.0 * self.mistakes / 32.0
        if A + b + c <= 0.0:
            phi = 1.0
        else:
            disc = b * b - 4.0 * A * c
            sq = math.sqrt(disc) if disc > 0.0 else 0.0
            if self.reference_quirks and A < 0.0:
                phi = (-b - sq) / (2.0 * A)
            else:
                den = b + sq
                phi = min(max(-2.0 * c / den, 0.0), 1.0) if den > 0.0 and disc >= 0.0 else 0.0
        if phi != 1.0:
            a[: sv.n] *= phi
        self.damage += (A * phi + b) * phi
        sv.replace(r, x, xx, phi * y, id_=self.t, s=self.t)
        self._head = (r + 1) % self.budget

    def _update_p1(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        sv = self.sv
        kern = self.kern
        kt = kern.diag(xx)
        norm2 = sv.norm2 + 2.0 * y * score + kt  # ‖f + y_t κ(x_t, ·)‖²
        phi = self._p1_shrink
        if norm2 > 0.0:
            phi = min(phi, self._p1_radius / math.sqrt(norm2))
        if sv.n < self.budget:
            sv.append(x, xx, y, id_=self.t, s=self.t, fz=score, kzz=kt)
        else:
            r = self._head
            ar = float(sv.a[r])
            # ‖f + y κ_t − a_r κ_r‖² = norm2 + a_r² κ_rr − 2 a_r f(x_r) − 2 y a_r κ(x_r, x_t)
            norm2 += ar * (ar * kern.diag(float(sv.sqn[r])) - 2.0 * self._eval_sv(r)
                           - 2.0 * y * float(aux[r]))
            sv.replace(r, x, xx, y, id_=self.t, s=self.t)
            sv.norm2 = max(norm2, 0.0)
            self._head = (r + 1) % self.budget
        sv.scale(phi)

    def _get_state(self) -> dict[str, np.ndarray]:
        st = super()._get_state()
        st["forgetron.M"] = np.array(self.mistakes, dtype=np.int64)
        st["forgetron.Q"] = np.array(self.damage, dtype=np.float64)
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        self.mistakes = int(state["forgetron.M"])
        self.damage = float(state["forgetron.Q"])
        # Insertion rounds are unique and increasing, so the ring head is the oldest slot.
        n = self.sv.n
        self._head = int(np.argmin(self.sv.s[:n])) if n >= self.budget else 0
