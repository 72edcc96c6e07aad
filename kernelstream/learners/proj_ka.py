"""Proj-KA: kernel selection by kernel–target alignment, then the budget Projectron
(baseline of Zhang & Liao, IJCAI 2020).

Reference: X. Zhang and S. Liao, IJCAI 2020, Section 6: "the two-pass algorithm
Proj-KA uses the first m = min{T, 10^4} instances to form a validation set, selects the kernel
using the kernel alignment criterion [Kandola et al. 2002] on the validation set, and runs
Projectron [Orabona et al. 2008] with the selected kernel". Alignment: Cristianini et al., NIPS
2001; Projectron: the budget version of Orabona, Keshet & Caputo, ICML 2008 (the existing
``projectron`` learner is reused).

:func:`alignment_pow2` evaluates the uncentered alignment of every width of a grid
``γ = 2^e`` (consecutive integer ``e``; P0's 25 widths are ``e = -12..12``) at the cost of one
``exp`` per kernel entry: ``exp(−2^{e+1} d²) = exp(−2^e d²)²``, so each further width is one
in-place squaring, and ``‖K_e‖_F² = Σ K_{e+1}``. Only the upper block-triangle of the symmetric
kernel matrix is formed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import TIE_PARAM, Learner, Param, positive
from kernelstream.learners.kernels import sq_dists
from kernelstream.learners.projectron import Projectron
from kernelstream.learners.registry import register

# P0's candidate set: σ ∈ {2^{-(i+1)/2} : i = -12..12} ⇔ γ = 1/(2σ²) = 2^i.
P0_EXPONENTS = np.arange(-12, 13)


def alignment_pow2(X: np.ndarray, y: np.ndarray, exponents: np.ndarray | list[int] = P0_EXPONENTS,
                   block: int = 512) -> np.ndarray:
    """Kernel–target alignment ``yᵀKy / (m‖K‖_F)`` (Cristianini et al., NIPS 2001; uncentered) of
    the Gaussian kernels ``exp(−2^e ‖x−x'‖²)`` for consecutive integer exponents ``e`` (increasing),
    one value per exponent. Equal to :func:`kernelstream.learners.kernels.kernel_alignment` on the
    same widths up to round-off (relative ~1e-9 after 24 squarings); memory ``O(block · m)``."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    e = np.asarray(exponents)
    if e.ndim != 1 or len(e) == 0 or np.any(np.diff(e) != 1) or np.any(e != np.round(e)):
        raise ValueError("exponents must be consecutive increasing integers")
    m = X.shape[0]
    k = len(e)
    yKy = np.zeros(k)
    fro2 = np.zeros(k + 1)  # fro2[i] collects Σ K_{e_i}²; Σ K_{e_i}² = Σ K_{e_{i+1}}
    g0 = 2.0 ** float(e[0])
    # ‖x‖² of every row once, a block of rows at a time, given to sq_dists: left to it, it would
    # square all of X[s:] (an m x d temporary, as large as the window); the same numbers
    c = max(1, (1 << 17) // max(X.shape[1], 1))  # rows squared at once: ≤ 1 MB
    sq = np.concatenate([(X[s:s + c] * X[s:s + c]).sum(1) for s in range(0, m, c)]
                        or [np.zeros(0)])
    for s in range(0, m, block):
        b = min(block, m - s)
        # rows of this block × columns from the block onwards
        K = sq_dists(X[s:s + b], X[s:], sq[s:s + b], sq[s:])
        K *= -g0
        np.exp(K, out=K)
        yb, yr = y[s:s + b], y[s:]
        for i in range(k + 1):
            if i:
                K *= K  # K_{e_i} = K_{e_{i-1}}²
                # symmetric: off-diagonal blocks count twice, the diagonal block once
                tot = float(K.sum())
                diag = float(K[:, :b].sum())
                fro2[i - 1] += 2.0 * tot - diag
            if i < k:
                v = K @ yr
                full = float(yb @ v)
                dg = float(yb @ (K[:, :b] @ yb))
                yKy[i] += 2.0 * full - dg
    return yKy / (m * np.sqrt(fro2[:k]))


def select_width(X: np.ndarray, y: np.ndarray,
                 exponents: np.ndarray | list[int] = P0_EXPONENTS) -> tuple[int, float,
                                                                             np.ndarray]:
    """Index of the best-aligned width (first maximum), its ``γ = 2^e`` and all alignments."""
    ka = alignment_pow2(X, y, exponents)
    i = int(np.argmax(ka))
    return i, float(2.0 ** float(np.asarray(exponents)[i])), ka


@register
class ProjKA(Learner):
    """Proj-KA as an online learner: buffer the first ``selection_window`` rows, select the
    Gaussian width with the largest kernel–target alignment on them, then run the budget
    Projectron with that width.

    * Rounds ``1..m`` (``m = selection_window``): the rows (and labels, once learned) are
      buffered and the score is 0 (the ``tie`` label is predicted); no model exists yet.
    * After the ``m``-th row is learned: uncentered alignment of the 25 widths of P0
      (``σ = 2^{-(i+1)/2}``, ``γ = 2^i``, ``i = -12..12``) on the buffered rows; the first
      maximiser is selected (``selected_kernel`` = its index ``i + 12``, ``current_gamma`` its
      ``γ``), a ``projectron`` (budget version) with that width is created and, with
      ``replay=True`` (default), trained on the buffered rows in order (their predictions were
      already made, so this only uses their labels). The buffer is then freed.
    * Later rounds: predictions and updates of that Projectron.

    Difference from the paper (a DECISION, since the paper's protocol needs hindsight): P0's Proj-KA
    is a *two-pass* method — it selects on the first ``m = min(T, 10^4)`` rows of the stream and
    then runs Projectron over **all** ``T`` rows, counting every mistake, so the first ``m``
    predictions already use the selected kernel (hindsight selection). A streaming learner cannot
    see labels before it predicts, so here the first ``m`` predictions are 0.
    ``kernelstream reproduce p0`` runs the paper's protocol (:func:`select_width` on the first
    ``min(T, 10^4)`` rows of each permutation, then ``projectron`` over the whole permutation) and
    this learner side by side. P0 quotes Projectron's ``U = ¼√((B+1)/ln(B+1))``; the budget
    Projectron does not use it (only Projectron++ does). Budget = OKS-SIL's budget (recon: the paper
    does not state it).

    A stream shorter than ``selection_window`` never leaves the first phase (all scores 0).
    Memory: ``O(m·d)`` until the selection, then Projectron's ``O(B·d + B²)``.

    Parameters
    ----------
    budget
        Projectron budget ``B`` (default 150, the OKS-SIL budget of P0 for ``T < 10^4``).
    selection_window
        Rows buffered for the alignment before learning starts (default 1000; P0 used
        ``min(T, 10^4)`` in hindsight).
    replay
        Train the Projectron on the buffered rows right after the selection (default True).
    tie
        Label predicted for a zero score (every round of the first phase).

    Example
    -------
    >>> import numpy as np
    >>> from kernelstream.learners import make
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    >>> m = make("proj-ka", budget=50, selection_window=100)
    >>> scores = m.predict_learn_many(X, y)
    >>> bool(np.all(scores[:100] == 0)), m.selected_kernel is not None
    (True, True)
    """

    name = "proj-ka"
    params = (
        Param("budget", 150, int, "Projectron budget B", positive, "> 0"),
        Param("selection_window", 1000, int, "rows buffered for the kernel alignment before "
              "learning starts (predictions are 0 meanwhile)", positive, "> 0"),
        Param("replay", True, bool, "train the Projectron on the buffered rows after selecting"),
        TIE_PARAM,
    )
    randomized = False
    reference = ("Zhang & Liao, IJCAI 2020, baseline Proj-KA; Orabona et al. 2008; "
                 "alignment: Cristianini et al., NIPS 2001")

    budget: int
    selection_window: int
    replay: bool
    tie: str

    def stored_rows(self, n_rounds: int | None = None) -> int:
        """The window's rows, with the inner Projectron's ``budget`` while it replays them
        (:meth:`memory_bound` is the inner budget: the window is not the hypothesis)."""
        m = self.selection_window
        return (m if n_rounds is None else min(m, int(n_rounds))) + self.budget

    @classmethod
    def model_bytes(cls, params: dict[str, Any], n_features: int = 0) -> tuple[int, str]:
        # the window's labels and the selection's work (alignment_pow2): two min(512, m) x m
        # blocks at once, after the rows squared ~1 MB at a time
        m = int(params["selection_window"])
        return (8 * m + max(16 * min(512, m) * m, 8 * max(n_features, 1 << 17)),
                f"the kernel alignment of {m:,} buffered rows")

    def _setup(self, d: int) -> None:
        self._wx = np.zeros((self.selection_window, d))
        self._wy = np.zeros(self.selection_window)
        self._nw = 0
        self._sel = -1
        self.inner: Projectron | None = None

    def _make_inner(self, i: int) -> Projectron:
        inner = Projectron(seed=0, budget=self.budget,
                           gamma=float(2.0 ** float(P0_EXPONENTS[i])), tie=self.tie)
        assert self.dim is not None  # for mypy: the inner learner starts after the first row
        inner._init_dim(self.dim)
        return inner

    @property
    def kernel_gamma(self) -> float | None:
        return self.current_gamma

    @property
    def n_support_vectors(self) -> int:
        return self.inner.n_support_vectors if self.inner is not None else 0

    @property
    def selected_kernel(self) -> int | None:
        return self._sel if self.dim is not None and self._sel >= 0 else None

    @property
    def current_gamma(self) -> float | None:
        return self.inner.gamma if self.dim is not None and self.inner is not None else None

    # -- per round -------------------------------------------------------------------------
    # ‖x‖² as the inner Projectron computes it (compiled or numpy), so after the window it
    # learns exactly what a Projectron replaying the stream would
    def _sqnorm(self, x: np.ndarray) -> float:
        return compiled.sqnorm(x)

    def _row_sqnorms(self, X: np.ndarray) -> np.ndarray:
        return compiled.row_sqnorms(X)

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        if self.inner is None:
            return 0.0, None
        return self.inner._score(x, xx)

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        inner = self.inner
        if inner is not None:
            inner._update(x, xx, y, score, aux)
            inner.t += 1
            return
        j = self._nw
        self._wx[j] = x
        self._wy[j] = y
        self._nw = j + 1
        if self._nw == self.selection_window:
            self._select()

    def _select(self) -> None:
        i, _, _ = select_width(self._wx, self._wy)
        self._sel = i
        self.inner = self._make_inner(i)
        if self.replay:
            self.inner.predict_learn_many(self._wx, self._wy)
        self._wx = np.zeros((0, self._wx.shape[1]))  # free the window
        self._wy = np.zeros(0)

    # -- state -----------------------------------------------------------------------------
    def _get_state(self) -> dict[str, np.ndarray]:
        if self.inner is None:
            n = self._nw
            return {"pka.X": self._wx[:n].copy(), "pka.y": self._wy[:n].copy()}
        st = {f"pka.inner.{k}": v for k, v in self.inner.get_state().items()}
        st["pka.selected"] = np.array(self._sel, dtype=np.int64)
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        if "pka.selected" in state:
            self._sel = int(state["pka.selected"])
            self.inner = self._make_inner(self._sel)
            pre = "pka.inner."
            self.inner.set_state({k[len(pre):]: v for k, v in state.items()
                                  if k.startswith(pre)})
            if self.inner.dim != self.dim:  # the inner learner runs on the same rows
                raise ValueError(f"pka.inner.__dim__ is {self.inner.dim}, not {self.dim}")
            assert self.dim is not None  # for mypy: set_state fixes it first
            self._wx = np.zeros((0, self.dim))
            self._wy = np.zeros(0)
        else:
            n = len(state["pka.y"])
            self._wx[:n] = state["pka.X"]
            self._wy[:n] = state["pka.y"]
            self._nw = n
