"""The compiled per-round kernels, and the numpy code the learners fall back to without them.

A round of a budgeted kernel learner is cheap arithmetic (a kernel row against ~200 stored
points) wrapped in about a dozen numpy calls of ~0.5 µs each; compiled, the row, the score and
the "does this round update?" test cost what their arithmetic costs. ``_ckernels`` (C, built
with the package by ``pip install``; ``setup.py``) holds the parts every single-kernel learner
shares: the example's squared norm, its kernel row and score, and a block driver that runs
test-then-train up to the next round that changes the model. The learners' updates stay in
Python, written as their papers state them, except those of the budget learners, which
``_ck_budget`` compiles too ("budget rules" below), and NOGD's first stage (``fk.grow``); the
README explains why C rather than a JIT.

Every sum is sequential in index order, so a round's numbers depend on nothing but its inputs:
the block driver and the per-example path agree bit for bit (both call the same C code), and
results differ from the numpy fallback (BLAS products, SIMD ``exp``) at round-off level only.

``KERNELSTREAM_COMPILED=0`` in the environment selects the numpy code (for comparisons);
:data:`STATUS` says which code runs and why.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    from kernelstream.learners.kernels import Kernel

ABI = 1  # the _ckernels.c interface this module calls (its KS_ABI)

KERNEL_CODES = {"gaussian": 0, "polynomial": 1, "linear": 2}
#: When a round updates the model (the learner's ``_update`` returns at once otherwise):
#: ``always``; ``mistake``: ``y f(x) ≤ 0``; ``margin``: ``y f(x) < 1``.
TRIGGERS = {"always": 0, "mistake": 1, "margin": 2}


def source_hash() -> str | None:
    """Hash of the C sources next to this module (``None`` in an install without them):
    ``setup.py`` builds the same hash into the extension."""
    files = sorted(Path(__file__).parent.glob("_ck*.[ch]"))
    if not files:  # an installed wheel ships the build, not the source
        return None
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:16]


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("KERNELSTREAM_COMPILED", "1").strip().lower() in ("0", "false", "no",
                                                                         "off"):
        return None, "numpy (KERNELSTREAM_COMPILED=0)"
    try:
        from kernelstream.learners import _ckernels  # type: ignore[attr-defined]  # C, no stub
    except ImportError:
        return None, ("numpy (the compiled kernels are not built: reinstall with a C compiler, "
                      "`pip install -e .`)")
    want = source_hash()
    if getattr(_ckernels, "ABI", None) != ABI or (
            want is not None and getattr(_ckernels, "SOURCE_HASH", None) != want):
        warnings.warn("kernelstream: the compiled kernels are older than _ckernels.c; using "
                      "numpy until they are rebuilt (`pip install -e .`)", stacklevel=2)
        return None, "numpy (the compiled kernels are stale: rebuild with `pip install -e .`)"
    return _ckernels, "compiled (C)"


# Any: the C modules have no stubs, and a learner calls them only behind a flag set from
# ``ck is not None`` (or fk/bk/mk), which mypy cannot follow across objects
ck: Any
STATUS: str
ck, STATUS = _load()


def _load_ext(module: str, abi: int) -> ModuleType | None:
    """The compiled module ``module`` of this package if it is built for interface ``abi`` from
    the sources ``_ckernels`` was built from, else None (same switch and staleness rule)."""
    if ck is None:
        return None
    try:
        mod = importlib.import_module(f"kernelstream.learners.{module}")
    except ImportError:
        return None
    if getattr(mod, "ABI", None) != abi or getattr(mod, "SOURCE_HASH", None) != ck.SOURCE_HASH:
        return None
    return mod


def sqnorm(x: np.ndarray) -> float:
    """``‖x‖²`` of a float64 vector, the same number in the per-example and block paths."""
    if ck is not None:
        return ck.sqnorm(x if x.flags.c_contiguous else np.ascontiguousarray(x))
    return float(x @ x)


def row_sqnorms(X: np.ndarray) -> np.ndarray:
    """:func:`sqnorm` of every row of a C-ordered float64 matrix."""
    out = np.empty(X.shape[0])
    if ck is not None:
        ck.sqnorms(X, out)
    else:
        for i in range(X.shape[0]):
            xi = X[i]
            out[i] = float(xi @ xi)
    return out


# ---- feature maps: _ck_features.c (FOGD, RFF-RLS, NOGD, SkeGD, OKL-GD, OKS-SIL) -------------
#
# The learners whose round is a feature map and a linear score rather than one kernel
# expansion: random Fourier features (FOGD), a kernel row times a matrix (the Nystrom and
# sketched maps of NOGD and SkeGD), a kernel row (their first stages), and Gaussian rows that
# keep their squared distances (OKL-GD, OKS-SIL). A map is a tuple the C side reads (built by
# the helpers below, per call: the learners replace their arrays as they learn); ``fk.score``
# computes one round, ``fk.run`` a block up to the next round the learner's Python update
# must see (``run`` in _ck_features.c says how), inside :func:`learn_rounds`; ``fk.grow`` runs
# a kernel OGD stage that stores its margin errors (NOGD's stage 1) with its update in C;
# ``fk.rls_run`` / ``rls_update`` / ``rls_step`` are RFF-RLS's whole rounds on FOGD's map.
# Same numerical rules as _ckernels.c.

FEATURES_ABI = 5  # the _ck_features.c interface this module calls (its KF_ABI)
FM_RFF, FM_PROJ, FM_ROW, FM_DIST = 0, 1, 2, 3
ALWAYS, MISTAKE, MARGIN = TRIGGERS["always"], TRIGGERS["mistake"], TRIGGERS["margin"]


fk: Any = _load_ext("_ck_features", FEATURES_ABI)  # Any: as ``ck``


def rff_map(omega_t: np.ndarray, scale: float) -> tuple[Any, ...]:
    """``z = [cos Ωx; sin Ωx]`` from ``Ωᵀ`` (``d × D``, C order), score ``scale·⟨w, z⟩``."""
    return (FM_RFF, omega_t, scale)


def row_map(X: np.ndarray, sqn: np.ndarray, n: int, kern: Kernel) -> tuple[Any, ...]:
    """``z = κ(X[:n], x)`` (the compiled kernel row), score ``⟨a, z⟩``."""
    return (FM_ROW, X, sqn, n, KERNEL_CODES[kern.name], float(getattr(kern, "_neg_gamma", 0.0)),
            int(getattr(kern, "degree", 1)), 1.0)


def proj_map(X: np.ndarray, sqn: np.ndarray, n: int, kern: Kernel, Mt: np.ndarray,
             r: int) -> tuple[Any, ...]:
    """``k = κ(X[:n], x)``, ``z = M k`` (``r`` features, written to ``z[:r]`` of a buffer of
    ``Mt``'s width) from ``Mt`` = :func:`padded_t` of ``M``, score ``⟨w, z⟩``."""
    return (FM_PROJ, X, sqn, n, KERNEL_CODES[kern.name],
            float(getattr(kern, "_neg_gamma", 0.0)), int(getattr(kern, "degree", 1)), Mt, r, 1.0)


def padded_t(M: np.ndarray) -> np.ndarray:
    """``Mᵀ`` (``n × r``) in C order with zero columns up to a multiple of 8: the compiled
    ``z = M k`` keeps all ``r`` sums in registers, in blocks of eight columns."""
    r, n = M.shape
    Mt = np.zeros((n, -(-r // 8) * 8))
    Mt[:, :r] = M.T
    return Mt


def dist_map(X: np.ndarray, sqn: np.ndarray, n: int, g: np.ndarray | float) -> tuple[Any, ...]:
    """``k = ‖X_j − x‖²`` (clipped at 0), ``z_j = exp(−k_j g_j)`` (one ``g`` per row or one for
    all), score ``⟨a, z⟩``."""
    return (FM_DIST, X, sqn, n, g if isinstance(g, np.ndarray) else float(g), 1.0)


def kernel_ok(kern: Kernel) -> bool:
    """A kernel the compiled rows know."""
    return kern.name in KERNEL_CODES


def learn_rounds(learner: Any, X: np.ndarray, zz: np.ndarray, yv: np.ndarray,
                 out: np.ndarray, n_sv: np.ndarray | None,
                 block: Callable[..., tuple[int, Any]]) -> None:
    """Test-then-train over a block whose rounds run compiled.

    ``block(X, zz, yv, out, n_sv, i, fired)`` runs rows ``i..j-1`` through ``fk.run`` and
    returns ``(j, aux)``: row ``j`` was scored (``out[j]``) with the auxiliary value ``aux``
    and waits for its update, or ``aux`` is None and row ``j`` (if any) is a round for the
    per-example code (a scheduled event, an empty model, a change of stage). ``fired(j,
    aux)`` is the update of a row the driver scored: ``fk.run``'s ``on_fire`` callbacks call
    it, so a learner whose updates keep its map's shape never leaves the driver."""
    rows = X.shape[0]
    update = learner._update
    t0 = learner.t  # rounds before row 0

    def fired(j: int, aux: Any) -> None:
        learner.t = t0 + j
        update(X[j], float(zz[j]), float(yv[j]), float(out[j]), aux)
        learner.t = t0 + j + 1
        if n_sv is not None:
            n_sv[j] = learner.n_support_vectors

    i = 0
    while i < rows:
        j, aux = block(X, zz, yv, out, n_sv, i, fired)
        learner.t = t0 + j
        if j >= rows:
            return
        if aux is None:
            s, aux = learner._score(X[j], float(zz[j]))
            out[j] = s
        fired(j, aux)
        i = j + 1


def head(buf: np.ndarray, n: int) -> np.ndarray:
    """``buf[:n]``, without a new view when that is the whole buffer."""
    return buf if n == len(buf) else buf[:n]


class CompiledSqnorms:
    """Learner mixin: ``‖x‖²`` by :func:`sqnorm` / :func:`row_sqnorms`, the compiled sums
    (one C call per block instead of a Python loop over its rows; numpy's without them)."""

    def _sqnorm(self, x: np.ndarray) -> float:
        return sqnorm(x)

    def _row_sqnorms(self, X: np.ndarray) -> np.ndarray:
        return row_sqnorms(X)


class FeatureMapRounds(CompiledSqnorms):
    """Learner mixin of the feature-map learners whose blocks run in :func:`learn_rounds`
    (NOGD, SkeGD, OKL-GD, OKS-SIL): with the compiled kernels (the learner's ``_compiled``) a
    block goes to the driver with the learner's ``_run_block``, else to numpy's loop."""

    @classmethod
    def compiled_rounds(cls) -> bool:
        return True

    @classmethod
    def compiled_updates(cls) -> bool:
        # the driver's own steps (NOGD's grow and second stage, SkeGD's shrink-and-step, the
        # rule of OKL-GD / OKS-SIL); only scheduled events return to Python
        return True

    def _learn_rows(self: Any, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        if self._compiled:
            learn_rounds(self, X, zz, yv, out, n_sv, self._run_block)
        else:
            cast(Any, super())._learn_rows(X, zz, yv, out, n_sv)  # the Learner after the mixin


# ---- budget rules: _ck_budget.c (RBP, Forgetron, BOGD, BPA-S, Projectron, Projectron++) --
#
# The update of a budget learner compiled as one C function per learner (its ``_update``,
# operation for operation), built from shared steps: append / replace / scale, f(x_r) at a
# stored point, BPA-S's removal costs, the projection K⁻¹k and the bordered K⁻¹ update.
# ``bk.run`` runs a whole block (row, score and update per round) without returning to Python;
# ``bk.update`` is one round's update, which the learner's ``_update`` calls on the
# per-example path, so both paths run the same C code. A learner names its rule with
# ``budget_rule`` (KernelLearner says how); the numpy ``_update`` stays the reference and the
# fallback. Same numerical rules as _ckernels.c; the rules equal the numpy updates bit for
# bit given the same kernel row (the Projectron's K⁻¹k and kᵀK⁻¹k too: numpy sums them in the
# compiled order, linalg.project_rows / linalg.dot4).

BUDGET_ABI = 3  # the _ck_budget.c interface this module calls (its KB_ABI)
RULES = {"rbp": 1, "forgetron": 2, "forgetron-p1": 3, "bogd": 4, "bogd-p1": 5, "bpa-s": 6,
         "projectron": 7, "projectron++": 8}


bk: Any = _load_ext("_ck_budget", BUDGET_ABI)  # Any: as ``ck``


def rule_state(arrays: str, i: int, name: str) -> property:
    """The attribute ``name`` as item ``i`` of a compiled rule's state array ``arrays``
    (``_rule_ist`` or ``_rule_fst``, made by the learner's set-up before it sets the
    attribute): the array is the only copy, which the rule updates in place, so no round
    copies the attributes in or out."""

    def get(self: Any) -> Any:
        return getattr(self, arrays).item(i)

    def put(self: Any, v: Any) -> None:
        getattr(self, arrays)[i] = v

    return property(get, put, doc=f"{name}: item {i} of the compiled rule's {arrays}")

#: The rules of the learners whose rows keep their distances (``bk.update_dist`` /
#: ``bk.run_dist``), and what a rule did with a round: all of it, nothing (the learner's
#: Python update does the round), or all but the RLD solve (OKS-SIL, a nearly singular sample)
DIST_RULES = {"okl-gd": 1, "oks-sil": 2}
DONE, DEFER_ALL, DEFER_RLD = 0, 1, 2


def run_dist_rule(learner: Any, X: np.ndarray, zz: np.ndarray, yv: np.ndarray,
                  out: np.ndarray, n_sv: np.ndarray | None) -> None:
    """Test-then-train over a block with a compiled distance-row rule (``bk.run_dist``):
    ``learner._dist_args()`` gives the rule's leading arguments and state arrays,
    ``learner._dist_done(n, ist, fst)`` takes the results back, and a round the rule hands
    over goes to ``learner._deferred(x, xx, y, score, d2, k, status, idx)``."""
    rows = X.shape[0]
    d2, k = learner._d2buf, learner._kbuf
    i = 0
    while i < rows:
        args, ist, fst = learner._dist_args()
        # row r is round t0 + r: t0 = learner.t - i
        j, status, n, idx = bk.run_dist(*args, X, zz, yv, i, learner.t - i, out, n_sv, d2, k)
        learner._dist_done(n, ist, fst)
        learner.t += j - i
        if status == DONE:
            return
        learner._deferred(X[j], float(zz[j]), float(yv[j]), float(out[j]), d2[:n], k[:n],
                          status, idx)
        learner.t += 1
        if n_sv is not None:
            n_sv[j] = learner.n_support_vectors
        i = j + 1


class DistRuleRounds(FeatureMapRounds):
    """Learner mixin of the distance-row learners (OKL-GD, OKS-SIL): a block runs their
    compiled rule (:func:`run_dist_rule`) when they have one, else as
    :class:`FeatureMapRounds` runs it."""

    _pending: tuple[bytes, float, Any] | None  # Learner's: the cache step clears

    def _learn_rows(self: Any, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        if self._compiled and self._rule:
            run_dist_rule(self, X, zz, yv, out, n_sv)
        else:
            cast(Any, super())._learn_rows(X, zz, yv, out, n_sv)

    # step's kept arguments of bk.step_dist (the rule's head): None until a round builds them
    # and after a set-up or restore (the learner's _setup drops them); never pickled
    _fused: tuple[Any, ...] | None = None

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st.pop("_fused", None)  # holds the bit generator's capsule, which does not pickle
        return st

    def step(self: Any, x: Any, y: Any) -> float:
        """Predict then learn; returns the pre-update score. With a compiled rule, a dense
        float64 row and a label of ±1 (int or float) make one compiled call (``bk.step_dist``:
        the norm, the row, the score and the update, :func:`run_dist_rule`'s per-row code)
        with the rule's head kept between rounds (its state arrays are the learner's
        attributes); anything else, bad input included, takes ``Learner.step``."""
        fused = self._fused
        if (fused is not None and type(x) is np.ndarray and (type(y) is float or type(y) is int)
                and (y == 1 or y == -1)):
            d2, k = self._d2buf, self._kbuf
            r = bk.step_dist(fused, self.n_support_vectors, x, y, self.t, d2, k)
            if r is not None:
                if self._pending is not None:  # undoes a pending draw
                    self._drop_pending()
                score, xx, status, n, idx = r
                self._dist_done(n, fused[9], fused[10])
                if status != DONE:
                    self._deferred(x, xx, float(y), score, d2[:n], k[:n], status, idx)
                self.t += 1
                return cast(float, score)
        score = cast(Any, super()).step(x, y)
        if self._rule and not self.sparse:  # the head of the next rounds
            self._fused = self._dist_args()[0]
        return cast(float, score)

    def _rule_update(self: Any, x: np.ndarray, xx: float, y: float, score: float,
                     d2: np.ndarray, k: np.ndarray) -> None:
        """One round's update by the compiled rule (``bk.update_dist``, the code the blocks
        run) from the round's distances and kernel values; a round the rule hands over goes to
        ``_deferred`` as in :func:`run_dist_rule`."""
        if y * score >= 1.0:  # zero hinge loss: the rules' first test, which changes nothing
            return
        args, ist, fst = self._dist_args()
        _, status, n, idx = bk.update_dist(
            *args, x if x.flags.c_contiguous else np.ascontiguousarray(x), xx, y, score, d2, k,
            self.t)
        self._dist_done(n, ist, fst)
        if status != DONE:
            self._deferred(x, xx, y, score, d2, k, status, idx)


# ---- multi-kernel scores: _ck_multi.c (EA2OKS, BEA2OKS, B(AO)2KS, OKS, OKS++, IOKS, OMKC) ----
#
# Several kernel expansions scored from one squared-distance row to the union of their support
# vectors: ``mk.pool_scores`` for one store per kernel whose points carry slots in a shared
# distance cache (:class:`~kernelstream.learners._pools.KernelPool`), ``mk.multi_scores`` for
# (point, kernel, coefficient) entries over one point set
# (:class:`~kernelstream.learners._multikernel.MultiStore`). Same numerical rules as
# _ckernels.c: a store's score is the single-kernel compiled score of that store, bit for bit.

MULTI_ABI = 1  # the _ck_multi.c interface this module calls (its KM_ABI)


mk: Any = _load_ext("_ck_multi", MULTI_ABI)  # Any: as ``ck``

# ---- linear models and column indexes: _ck_linear.c (the primal linear learners,
# learners/_primal.py; the sparse store's column index, learners/sparse_store.py) ------------

LINEAR_ABI = 1  # the _ck_linear.c interface this module calls (its KL_ABI)
lk: Any = _load_ext("_ck_linear", LINEAR_ABI)  # Any: as ``ck``


# ---- bounded OMKC: _ck_omkc.c (bomkc-dd, bomkc-sd) -------------------------------------------
#
# A block of bounded OMKC's rounds in C: the 16 components' rows and scores, the Hedge weights,
# SD's update draws and the components' budget rules (_ck_budget.c's functions, compiled into
# _ck_omkc, and BPA-S's numpy update for the polynomial kernels). Numbers C cannot reproduce
# come from numpy: the powers γ^k of the weights (a table, :func:`omkc_rounds` grows it when
# ``om.run`` stops for it), the polynomial BPA-S's κ(x, x), and the vote ``θ·sign(s)`` (BLAS's
# summation order), from the scores and weights the block records. ``om.run`` also stops before
# a round with a full store (SD's components grow as in Python, up to the total budget).
# The per-example path (``_omkc_rounds.CompiledRounds.step``): ``om.fuse`` keeps the parsed
# components between rounds and ``om.step`` runs one round a call, its vote by numpy's ddot
# (om_vote).

OMKC_ABI = 2  # the _ck_omkc.c interface this module calls (its KO_ABI)


# Any: as ``ck``; the budget rules it calls must be compiled too
om: Any = _load_ext("_ck_omkc", OMKC_ABI) if bk is not None else None


_om_vote: bool | None = None  # om.step's vote is numpy's (om_vote decides it once)


def om_vote() -> bool:
    """Whether ``om.step`` returns the vote itself: numpy's ``cblas_ddot`` bound into
    ``_ck_omkc`` (found as :func:`_numpy_blas` finds it, on first use) and its vote equal to
    ``θ·sign(s)`` by numpy, bit for bit, on random weights and scores (zeros and NaN among
    them). Else the caller votes from the round's scores and weights."""
    global _om_vote
    if _om_vote is None:
        _om_vote = False
        blas = _numpy_blas() if om is not None else None
        if blas is not None:
            om.bind_dot(blas[1], blas[2])
            rng = np.random.default_rng(20261128)
            ok = True
            for _ in range(200):
                w = rng.random(16) * 10.0 ** rng.uniform(-300.0, 0.0, size=16)
                theta = w / w.sum()
                s = rng.normal(size=16) * (rng.random(16) < 0.7)
                s[rng.random(16) < 0.05] = np.nan
                s[rng.random(16) < 0.1] = -0.0
                want = float(theta.dot(np.sign(s)))
                got = om.vote(theta, s)
                ok = ok and np.array([got]).tobytes() == np.array([want]).tobytes()
            _om_vote = ok
            if not ok:  # step returns True: the caller votes
                om.bind_dot(0, False)
    return _om_vote


def _omkc_head(c: Any) -> tuple[tuple[Any, ...], Any]:
    """A component's head for ``om.run`` (its store with room for an append) and whether it
    has a compiled rule (whose state arrays ``om.run`` updates in place): None for a polynomial
    BPA-S (no rule in _ck_budget; _ck_omkc.c has it, from a head of BPA-S's compiled rule)."""
    if c._compiled_rule():
        return c._rule_args()[0], True  # grows a full store
    sv = c.sv
    if len(sv.a) == sv.n:
        sv._grow()
    return (RULES["bpa-s"], sv.X, sv.sqn, sv.a, sv.ids, sv.s, sv.n, sv.norm2, c._kcode, c._kp,
            c._kdeg, np.array([c.budget, c.c]), np.zeros(0, dtype=np.int64), np.zeros(0), None,
            None, np.empty(3 * len(sv.a)), c._nzwork), None


def omkc_rounds(learner: Any, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                n_sv: np.ndarray | None, sd: bool) -> None:
    """Test-then-train over a block of bounded OMKC (``learner``: an ``omkc._BoundedOMKC``
    whose components score compiled, with a compiled rule or as BPA-S), equal bit for bit to
    its per-example rounds."""
    comps = learner.comps
    m = len(comps)
    rows = X.shape[0]
    S, T = np.empty((rows, m)), np.empty((rows, m))
    has_head = np.array([hasattr(c, "_head") for c in comps], dtype=np.int64)
    out_n = np.empty(m, dtype=np.int64)
    i = 0
    while i < rows:
        heads, back = zip(*(_omkc_head(c) for c in comps), strict=True)
        # numpy's κ(x, x) (kern.diag: a power) of a polynomial BPA-S's points and rows
        diags = tuple(None if b is not None else (c.kern.diag(c.sv.sqn), c.kern.diag(zz))
                      for c, b in zip(comps, back, strict=True))
        ct = np.array([c.t for c in comps], dtype=np.int64)
        budgets = np.array([c.budget for c in comps], dtype=np.int64)
        j, status, norms = om.run(sd, heads, diags, has_head, ct, budgets, learner._counts,
                                  learner._theta.copy(), learner._powers(),
                                  getattr(learner, "delta", 0.0), learner.budget,
                                  learner.rng.bit_generator.capsule, X, zz, yv, i, S, T, n_sv,
                                  out_n)
        for k, c in enumerate(comps):
            c.sv.n, c.sv.norm2 = int(out_n[k]), norms[k]
            c.t, c.budget = int(ct[k]), int(budgets[k])
        learner._refresh_theta()
        if j > i:  # the vote, as Combination._vote computes it (np.dot per row)
            out[i:j] = np.matmul(T[i:j, None, :], np.sign(S[i:j])[:, :, None])[:, 0, 0]
        learner.t += j - i
        if status == om.POWERS:
            learner._powers(grow=True)
        i = j  # om.FULL: the heads above grow the full stores


if ck is not None and fk is None:  # say so: these learners then run their numpy code
    STATUS += ("; feature maps (fogd, rff-rls, nogd, skegd, okl-gd, oks-sil): numpy, "
               "_ck_features is not built or stale")
if ck is not None and bk is None:
    STATUS += ("; budget updates (rbp, forgetron, bogd, bpa-s, projectron, projectron++): "
               "numpy, _ck_budget is not built or stale")
if ck is not None and mk is None:
    STATUS += ("; multi-kernel scores (ea2oks, bea2oks, bao2ks, oks, oks++, ioks, omkc-*, "
               "bomkc-spa): numpy, _ck_multi is not built or stale")


# ---- expert blocks: _ck_experts.c (LKMBooks, EA2OKS, BEA2OKS) -----------------------------
#
# Whole test-then-train blocks of learners whose per-example code calls numpy (BLAS products,
# numpy's exp): the C code calls the routines numpy calls, found here, so its results are
# numpy's bit for bit (and EA2OKS's store scores use _ck_multi's exponential, as
# KernelPool's). ``ek`` is None (the learners run their per-example code) when the build is
# missing or stale, when numpy's BLAS is not found, or when the routines differ from numpy on
# the check below.

EXPERTS_ABI = 2  # the _ck_experts.c interface this module calls (its KE_ABI)
_BLAS_NAMES = (("scipy_cblas_dgemv64_", "scipy_cblas_ddot64_", True),
               ("cblas_dgemv64_", "cblas_ddot64_", True),
               ("scipy_cblas_dgemv", "scipy_cblas_ddot", False),
               ("cblas_dgemv", "cblas_ddot", False))


def _numpy_blas() -> tuple[int, int, bool] | None:
    """Addresses of numpy's cblas_dgemv and cblas_ddot and whether they take 64-bit ints: the
    first loaded library that exports them, numpy's own (a path under numpy) first."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            # the 6th field is the mapped file's path (absent for anonymous maps)
            paths = {p[5].strip() for p in (ln.split(None, 5) for ln in f) if len(p) == 6}
    except OSError:
        return None
    libs = sorted((p for p in paths if ".so" in p and "blas" in p.lower()),
                  key=lambda p: "numpy" not in p)
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for gemv, dot, ilp64 in _BLAS_NAMES:
            if hasattr(lib, gemv) and hasattr(lib, dot):
                addr = ctypes.cast(getattr(lib, gemv), ctypes.c_void_p).value
                daddr = ctypes.cast(getattr(lib, dot), ctypes.c_void_p).value
                if addr and daddr:
                    return addr, daddr, ilp64
    return None


def _experts_agree(mod: ModuleType) -> bool:
    """Whether the bound routines give numpy's numbers, bit for bit, on random data."""
    rng = np.random.default_rng(20261125)
    for m, n in ((2, 2), (6, 2), (6, 3), (6, 7), (6, 33), (6, 200), (3, 123), (200, 123),
                 (17, 8), (9, 300), (12, 5), (8, 9)):
        A = rng.normal(size=(m, n))
        x = rng.normal(size=n)
        y = np.empty(m)
        v = rng.uniform(-800.0, 5.0, size=m * n)
        want_v = np.exp(v)
        k = 1 + (m * n) % 40  # sums of 1..40 values, of spread magnitudes
        w = rng.normal(size=k) * 10.0 ** rng.uniform(-3.0, 3.0, size=k)
        dt, sm = mod.check(A, x, y, v, w)
        if (y.tobytes() != A.dot(x).tobytes() or v.tobytes() != want_v.tobytes()
                or dt != w.dot(w) or sm != w.sum()):
            return False
    return True


def _load_experts() -> ModuleType | None:
    mod = _load_ext("_ck_experts", EXPERTS_ABI)
    if mod is None:
        return None
    blas = _numpy_blas()
    if blas is None:
        return None
    mod.bind(*blas, np.exp)
    if mk is not None:  # EA2OKS's stores are scored with _ck_multi's exponential
        mod.bind_vexp(mk.vexp_capsule)
    return mod if _experts_agree(mod) else None


ek: Any = _load_experts()  # Any: as ``ck``

if ck is not None and ek is None:
    STATUS += ("; expert blocks (lkmbooks, ea2oks, bea2oks): per-example code, _ck_experts is "
               "not built or stale, or numpy's BLAS was not found or differs")
if ck is not None and bk is not None and om is None:
    STATUS += "; bounded OMKC blocks (bomkc-dd, bomkc-sd): Python rounds, _ck_omkc is not built"
