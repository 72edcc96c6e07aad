"""The compiled per-round kernels, and the numpy code the learners fall back to without them.

A round of a budgeted kernel learner is cheap arithmetic (a kernel row against ~200 stored
points) wrapped in about a dozen numpy calls of ~0.5 µs each; compiled, the row, the score and
the "does this round update?" test cost what their arithmetic costs. ``_ckernels`` (C, built
with the package by ``pip install``; ``setup.py``) holds the parts every single-kernel learner
shares: the example's squared norm, its kernel row and score, and a block driver that runs
test-then-train up to the next round that changes the model. The learners' updates stay in
Python, written as their papers state them, except those of the budget learners, which
``_ck_budget`` compiles too ("budget rules" below); the README explains why C rather than a JIT.

Every sum is sequential in index order, so a round's numbers depend on nothing but its inputs:
the block driver and the per-example path agree bit for bit (both call the same C code), and
results differ from the numpy fallback (BLAS products, SIMD ``exp``) at round-off level only.

``KERNELSTREAM_COMPILED=0`` in the environment selects the numpy code (for comparisons);
:data:`STATUS` says which code runs and why.
"""

from __future__ import annotations

import hashlib
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


# ---- feature maps: _ck_features.c (FOGD, NOGD, SkeGD, OKL-GD, OKS-SIL) ----------------------
#
# The learners whose round is a feature map and a linear score rather than one kernel
# expansion: random Fourier features (FOGD), a kernel row times a matrix (the Nystrom and
# sketched maps of NOGD and SkeGD), a kernel row (their first stages), and Gaussian rows that
# keep their squared distances (OKL-GD, OKS-SIL). A map is a tuple the C side reads (built by
# the helpers below, per call: the learners replace their arrays as they learn); ``fk.score``
# computes one round, ``fk.run`` a block up to the next round the learner's Python update
# must see (``run`` in _ck_features.c says how), inside :func:`learn_rounds`. Same numerical
# rules as _ckernels.c.

FEATURES_ABI = 1  # the _ck_features.c interface this module calls (its KF_ABI)
FM_RFF, FM_PROJ, FM_ROW, FM_DIST = 0, 1, 2, 3
ALWAYS, MISTAKE, MARGIN = TRIGGERS["always"], TRIGGERS["mistake"], TRIGGERS["margin"]


def _load_features() -> ModuleType | None:
    if ck is None:  # same switch and same staleness rule as _ckernels
        return None
    try:
        from kernelstream.learners import _ck_features  # type: ignore[attr-defined]  # C, no stub
    except ImportError:
        return None
    if (getattr(_ck_features, "ABI", None) != FEATURES_ABI
            or getattr(_ck_features, "SOURCE_HASH", None) != ck.SOURCE_HASH):
        return None
    return _ck_features


fk: Any = _load_features()  # Any: as ``ck``


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
    ``z = M k`` keeps all ``r`` sums in registers, eight at a time."""
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

BUDGET_ABI = 2  # the _ck_budget.c interface this module calls (its KB_ABI)
RULES = {"rbp": 1, "forgetron": 2, "forgetron-p1": 3, "bogd": 4, "bogd-p1": 5, "bpa-s": 6,
         "projectron": 7, "projectron++": 8}


def _load_budget() -> ModuleType | None:
    if ck is None:  # same switch and same staleness rule as _ckernels
        return None
    try:
        from kernelstream.learners import _ck_budget  # type: ignore[attr-defined]  # C, no stub
    except ImportError:
        return None
    if (getattr(_ck_budget, "ABI", None) != BUDGET_ABI
            or getattr(_ck_budget, "SOURCE_HASH", None) != ck.SOURCE_HASH):
        return None
    return _ck_budget


bk: Any = _load_budget()  # Any: as ``ck``

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


class DistRuleRounds(CompiledSqnorms):
    """Learner mixin of the distance-row learners (OKL-GD, OKS-SIL): a block runs their
    compiled rule (:func:`run_dist_rule`) when they have one, else the feature-map block driver
    (:func:`learn_rounds` with the learner's ``_run_block``), else numpy's loop."""

    def _learn_rows(self: Any, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        if not self._compiled:
            cast(Any, super())._learn_rows(X, zz, yv, out, n_sv)  # the Learner after the mixin
        elif self._rule:
            run_dist_rule(self, X, zz, yv, out, n_sv)
        else:
            learn_rounds(self, X, zz, yv, out, n_sv, self._run_block)


# ---- multi-kernel scores: _ck_multi.c (EA2OKS, BEA2OKS, B(AO)2KS, OKS, OKS++, IOKS, OMKC) ----
#
# Several kernel expansions scored from one squared-distance row to the union of their support
# vectors: ``mk.pool_scores`` for one store per kernel whose points carry slots in a shared
# distance cache (:class:`~kernelstream.learners._pools.KernelPool`), ``mk.multi_scores`` for
# (point, kernel, coefficient) entries over one point set
# (:class:`~kernelstream.learners._multikernel.MultiStore`). Same numerical rules as
# _ckernels.c: a store's score is the single-kernel compiled score of that store, bit for bit.

MULTI_ABI = 1  # the _ck_multi.c interface this module calls (its KM_ABI)


def _load_multi() -> ModuleType | None:
    if ck is None:  # same switch and same staleness rule as _ckernels
        return None
    try:
        from kernelstream.learners import _ck_multi  # type: ignore[attr-defined]  # C, no stub
    except ImportError:
        return None
    if (getattr(_ck_multi, "ABI", None) != MULTI_ABI
            or getattr(_ck_multi, "SOURCE_HASH", None) != ck.SOURCE_HASH):
        return None
    return _ck_multi


mk: Any = _load_multi()  # Any: as ``ck``


if ck is not None and fk is None:  # say so: these learners then run their numpy code
    STATUS += ("; feature maps (fogd, nogd, skegd, okl-gd, oks-sil): numpy, _ck_features is "
               "not built or stale")
if ck is not None and bk is None:
    STATUS += ("; budget updates (rbp, forgetron, bogd, bpa-s, projectron, projectron++): "
               "numpy, _ck_budget is not built or stale")
if ck is not None and mk is None:
    STATUS += ("; multi-kernel scores (ea2oks, bea2oks, bao2ks, oks, oks++, ioks, omkc-*, "
               "bomkc-spa): numpy, _ck_multi is not built or stale")
