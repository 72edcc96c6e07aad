"""Shared block of the kernel-selection learners over ``K`` Gaussian widths (Yang et al. 2012;
Liao & Li, ECML-PKDD 2021; Li & Liao, ECML-PKDD 2022).

API
---
* :data:`SIGMAS_PARAM`, :func:`parse_sigmas` — the candidate widths ``σ_1..σ_K`` as one string
  parameter: comma-separated numbers, ``2^e`` tokens, or ``2^a:s:b`` ranges (inclusive, as the
  papers write ``2^{-2:0.5:3.5}``), e.g. ``"0.25,0.5,1"``, ``"2^-2:1:3"``.
* :data:`HORIZON_PARAM`, :func:`horizon_guess` — the stream length ``T`` of the T-dependent
  constants; ``None`` = unknown: ``T`` is guessed as ``1000·2^k ≥ t`` (a function of the round
  only, so it needs no state). :class:`HorizonTuning` — mixin re-deriving a learner's
  ``T``-dependent constants (``_retune(T)``) whenever that guess doubles.
* :class:`GaussianWidths` — the ``K`` kernels; ``rows(d2)`` turns ONE squared-distance row into
  the ``K × n`` kernel rows of every width (one ``exp``), :func:`sq_dist_row` computes that row.
* :class:`KernelPool` — one :class:`~kernelstream.learners.store.SVStore` per width (exact norm
  bookkeeping each); ``score(i, x, xx)`` evaluates one expansion, ``scores(x, xx)`` all of them;
  ``norm2`` (``K``), ``sizes`` (``K``), ``union_size``, ``reset(i)``, state helpers. Use it when
  the kernels keep *different* support sets and only some are evaluated per round (OKS, OKS++,
  IOKS, B(AO)2KS, EA2OKS). With the compiled kernels the stores are scored from one distance
  row to the union of their support vectors (points named by stream id; see the class).
* :class:`SharedPool` — all ``K`` kernels on ONE point set with a ``K × n`` coefficient matrix
  and ``K`` tracked norms: one new point costs one distance row reused for every width. Use it
  when the support set is shared (LKMBooks-type learners, or any learner adding each point to
  every kernel).
* :class:`SelectionLearner` — base class: ``randomized``/``draws_in_predict`` set, the widths
  configured from ``sigmas``, and the ``selected_kernel`` / ``kernel_distribution`` properties
  backed by ``self._selected`` (set in ``_score``) and ``self._distribution()`` (override).
* :class:`WeightedWidths`, :data:`LOSS_PARAM` — mixin of learners that combine the widths with
  weights ``p`` instead of drawing one (Raker, LKMBooks): task from the loss, widths,
  ``kernel_distribution = p``, ``selected_kernel = argmax p``.
* :class:`OptimisticMirror` — paper 001's AO2MD bookkeeping (§3.3): per-kernel ``f'_{t−1,i}``
  merged by stream id, tracked norms, the reservoir ``V`` (§1.7) with its kernel matrices, the
  values ``h_i = f'(x_v)`` at the reservoir points, and the O(M) generic correction
  ``f' ← Π_U(f' + a κ(x_t,·) + b μ̃)``. Used by B(AO)2KS, EA2OKS and BEA2OKS.

Gaussian kernels only (``κ(x, x) = 1``).

Compiled rounds (``kernelstream.learners.compiled.mk``, ``_ck_multi.c``): the scores of a
:class:`KernelPool`, the per-kernel arithmetic of :meth:`OptimisticMirror.correct` and of its
projection factors, and EA2OKS's update constants. The last three are the same IEEE operations
in the same order as the Python code they replace (bit-identical; the uniforms are drawn as
before). The scores change at round-off level against the numpy code: a point's inner product
with ``x`` is summed in index order over ``x``'s non-zeros (BLAS's gemv sums in blocks), the
exponential is ``_ck_multi``'s vectorised one (fdlibm's algorithm, within 1 ulp of libm;
numpy's SIMD exp differs from both by up to 1 ulp), and ``f_i = Σ_j a_ij k_ij`` is summed in
index order (BLAS's dot in blocks). On the reproduction checks (paper 001's learners on w7a and
german, paper 002's on german and spambase, 3 permutations each) the mistake rates stayed the
same but for one mistake in 4,601 rounds.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import Learner, Param, positive
from kernelstream.learners.experts import Reservoir
from kernelstream.learners.kernels import Gaussian, parse_sigmas
from kernelstream.learners.losses import LOSSES
from kernelstream.learners.store import SVStore, eval_stores

# -- parameters ----------------------------------------------------------------------------------
P1_SIGMAS = "2^-2:1:3"  # σ ∈ {2^-2, ..., 2^3}, K = 6 (papers 001 and 002, experiment 2)
HORIZON_GUESS0 = 1000  # first guess of T when the horizon is unknown (doubled as needed)

def _valid_sigmas(text: Any) -> bool:
    try:
        parse_sigmas(text)
    except ValueError:
        return False
    return True


SIGMAS_PARAM = Param(
    "sigmas", P1_SIGMAS, str,
    "Gaussian widths sigma_i of the K candidate kernels exp(-||x-x'||^2/(2 sigma_i^2)): "
    "comma-separated numbers or 2^e tokens, or a range 2^a:step:b (default 2^-2..2^3)",
    _valid_sigmas, "a list of widths > 0 (e.g. '0.5,1,2' or '2^-2:1:3')",
)
HORIZON_PARAM = Param(
    "horizon", None, int,
    "stream length T used by the T-dependent constants; None = unknown: T is guessed as "
    f"{HORIZON_GUESS0}·2^k, doubled whenever the round index exceeds it",
    positive, "> 0",
)


def horizon_guess(t: int, horizon: int | None) -> int:
    """``T`` for round ``t`` (1-based): the given horizon, else the smallest
    ``HORIZON_GUESS0·2^k ≥ t``."""
    if horizon is not None:
        return horizon
    T = HORIZON_GUESS0
    while T < t:
        T *= 2
    return T


class HorizonTuning:
    """Mixin for constants that depend on the stream length ``T`` (parameter ``horizon``).

    The learner derives them in ``_retune(T)``; :meth:`_tune_horizon` (in ``_setup``) sets the
    first ``T``, and :meth:`_round` (first thing of every update) re-derives them when the
    round index exceeds the doubling guess of an unknown horizon (:func:`horizon_guess`)."""

    horizon: int | None
    t: int
    _T: int

    def _retune(self, T: int) -> None:
        raise NotImplementedError

    def _tune_horizon(self) -> None:
        self._T = 0  # no previous T (``_retune`` may test it)
        self._retune(horizon_guess(self.t, self.horizon))

    def _round(self) -> int:
        """The 1-based index ``t`` of the round being learned."""
        t = self.t + 1
        if t > self._T and self.horizon is None:
            self._retune(horizon_guess(t, self.horizon))
        return t


# -- kernels -------------------------------------------------------------------------------------
def sq_dist_row(X: np.ndarray, sqn: np.ndarray, z: np.ndarray, zz: float) -> np.ndarray:
    """``‖X_j − z‖²`` for every row (one matrix–vector product; clipped at 0).

    ``X.dot(z)`` here and in the multi-kernel learners' hot paths is ``X @ z`` (the same BLAS
    call, the same bits) at less call overhead."""
    d = X.dot(z)
    d *= -2.0
    d += sqn
    d += zz
    return np.maximum(d, 0.0, out=d)


class GaussianWidths:
    """The ``K`` candidate Gaussian kernels ``exp(−γ_i ‖x − x'‖²)``, ``γ_i = 1/(2σ_i²)``."""

    def __init__(self, sigmas: np.ndarray) -> None:
        self.sigmas = np.asarray(sigmas, dtype=np.float64)
        self.K = len(self.sigmas)
        self.gammas = 1.0 / (2.0 * self.sigmas * self.sigmas)
        self._neg = -self.gammas[:, None]
        self.kernels = [Gaussian(g) for g in self.gammas]

    def rows(self, d2: np.ndarray) -> np.ndarray:
        """``K × n`` kernel values of every width from one squared-distance row."""
        return np.exp(self._neg * d2)

    def matrix(self, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
        """``K × n_A × n_B`` Gram matrices (tests, reservoir initialisation)."""
        from kernelstream.learners.kernels import sq_dists

        d2 = sq_dists(A, A if B is None else B)
        return np.exp(self._neg[:, :, None] * d2[None])


# -- pools ---------------------------------------------------------------------------------------
class KernelPool:
    """One kernel expansion ``f_i = Σ_j a_ij κ_i(x_ij, ·)`` per width, each an :class:`SVStore`
    with its exactly tracked ``‖f_i‖²``. Only the expansions asked for are evaluated.

    With the compiled kernels (:data:`~kernelstream.learners.compiled.mk`), the expansions
    are scored from one squared-distance row to the union of their support vectors: every
    stored point gets a slot of a shared distance cache named by its stream id (the same id
    is the same example, wherever it is stored: the learners store ``x_t`` under ``id = t``,
    and reservoir points under their own id), so a point that several kernels store costs one
    distance per round, and a kernel's score is the distance row gathered through its slots,
    one exponential per point and the dot with its coefficients (``_ck_multi.pool_scores``).
    The slots follow the stores lazily (appends, :meth:`reset`, a restored state): the stores
    keep their own points and coefficients, so callers may keep appending to
    ``stores[i]`` directly and the state format is unchanged. The stores are append-only
    (their coefficients may change; a point is never removed or replaced in place). Without
    the compiled kernels the numpy rows (:func:`~kernelstream.learners.store.eval_stores`)
    run."""

    def __init__(self, widths: GaussianWidths, dim: int, capacity: int = 64) -> None:
        self.widths = widths
        self.dim = int(dim)
        self.capacity = int(capacity)
        self.stores = [SVStore(dim, capacity=capacity) for _ in range(widths.K)]
        # the compiled entry point itself (not the module: learners pickle)
        # the C function (Any: no stub), None without it
        self._pool_scores: Any = None if compiled.mk is None else compiled.mk.pool_scores
        self._compiled = self._pool_scores is not None
        if self._compiled:
            K = widths.K
            self._neg = [float(-g) for g in widths.gammas]
            self._seen: list[SVStore | None] = [None] * K  # the store each slot list follows
            self._synced = [0] * K  # its points that have slots
            self._slot = [np.zeros(max(self.capacity, 1), dtype=np.int64) for _ in range(K)]
            self._ns = np.zeros(K, dtype=np.int64)
            self._last: tuple[tuple[Any, ...], ...] = ()
            self._last_ns: list[int] = []
            self._slot_of: dict[int, int] = {}  # stream id -> slot
            self._id_of: list[int] = []  # slot -> stream id (-1: none)
            self._refs: list[int] = []  # slot -> how many stores hold it
            self._free: list[int] = []
            self._cache = np.zeros(64)
            self._stamp = np.full(64, -1, dtype=np.int64)
            self._round = 0
            self._work = np.empty(2 * self.dim, dtype=np.int64)
            self._ebuf = np.empty(64)

    # -- the union of the support vectors (compiled scores) -------------------------------------
    def _new_slot(self, id_: int) -> int:
        if self._free:
            s = self._free.pop()
            self._id_of[s] = id_
            self._refs[s] = 1
        else:
            s = len(self._refs)
            self._id_of.append(id_)
            self._refs.append(1)
            if s >= len(self._cache):
                cap = 2 * len(self._cache)
                cache, stamp = np.zeros(cap), np.full(cap, -1, dtype=np.int64)
                cache[:s], stamp[:s] = self._cache[:s], self._stamp[:s]
                self._cache, self._stamp = cache, stamp
        if id_ >= 0:
            self._slot_of[id_] = s
        return s

    def _release(self, i: int) -> None:
        """Drop the slots of the points store ``i``'s slot list holds."""
        refs, id_of = self._refs, self._id_of
        for s in self._slot[i][: self._synced[i]].tolist():
            refs[s] -= 1
            if refs[s] == 0:
                if id_of[s] >= 0:
                    del self._slot_of[id_of[s]]
                id_of[s] = -1
                self._free.append(s)
        self._synced[i] = 0

    def _sync(self) -> tuple[tuple[Any, ...], ...]:
        """Give every stored point its slot (new points since the last call, or all the points
        of a store that was replaced or shrank) and return the stores as ``pool_scores``
        takes them."""
        ns = [sv.n for sv in self.stores]
        if ns == self._last_ns and self.stores == self._seen:  # == on stores: identity
            # nothing appended or replaced; the stores' arrays may still have been regrown
            # by an append that a removal undid, so compare them too
            last = self._last
            if all(sv.a is t[2] and sv.X is t[0] for sv, t in zip(self.stores, last,
                                                                   strict=True)):
                return last
        out = []
        for i, sv in enumerate(self.stores):
            n = sv.n
            if sv is not self._seen[i] or n < self._synced[i]:
                self._release(i)
                self._seen[i] = sv
            k = self._synced[i]
            if n > k:
                sl = self._slot[i]
                if len(sl) < n:
                    grown = np.zeros(max(2 * len(sl), n), dtype=np.int64)
                    grown[:k] = sl[:k]
                    self._slot[i] = sl = grown
                slot_of, refs = self._slot_of, self._refs
                for j, id_ in enumerate(sv.ids[k:n].tolist(), start=k):
                    s = slot_of.get(id_, -1) if id_ >= 0 else -1
                    if s >= 0:
                        refs[s] += 1
                    else:
                        s = self._new_slot(id_)
                    sl[j] = s
                self._synced[i] = n
                self._ns[i] = n
                if n > len(self._ebuf):
                    self._ebuf = np.empty(max(2 * len(self._ebuf), n))
            elif n != self._ns[i]:
                self._ns[i] = n
            out.append((sv.X, sv.sqn, sv.a, self._slot[i], self._neg[i]))
        self._last = tuple(out)
        self._last_ns = ns
        return self._last

    @property
    def union_size(self) -> int:
        """Distinct points over the stores (stored once per stream id; ids < 0 count once per
        store they are in)."""
        if self._compiled:
            self._sync()
            return len(self._refs) - len(self._free)
        ids = np.concatenate([s.ids[: s.n] for s in self.stores])
        return int(len(np.unique(ids[ids >= 0])) + np.count_nonzero(ids < 0))

    def _compiled_scores(self, x: np.ndarray, xx: float, which: np.ndarray | None) -> np.ndarray:
        stores = self._sync()
        if not x.flags.c_contiguous:  # e.g. predict_one on a column of a Fortran matrix
            x = np.ascontiguousarray(x)
        out = np.empty(self.widths.K if which is None else len(which))
        self._round += 1
        self._pool_scores(stores, self._ns, which, x, xx, self._cache, self._stamp,
                             self._round, out, self._work, self._ebuf)
        return out

    # -- scores -------------------------------------------------------------------------------
    def score(self, i: int, x: np.ndarray, xx: float) -> tuple[float, np.ndarray | None]:
        """``(f_i(x), κ_i(S_i, x))`` (``(0, None)`` for an empty store; the row is ``None``
        with the compiled scores, which do not keep it)."""
        sv = self.stores[i]
        n = sv.n
        if n == 0:
            return 0.0, None
        if self._compiled:
            return float(self._compiled_scores(x, xx, np.array([i], dtype=np.int64))[0]), None
        k = self.widths.kernels[i].row(sv.X[:n], sv.sqn[:n], x, xx)
        return float(sv.a[:n].dot(k)), k  # .dot: the BLAS dot of @, less call overhead

    def scores(self, x: np.ndarray, xx: float,
               which: np.ndarray | list[int] | None = None) -> np.ndarray:
        """``f_i(x)`` for ``i`` in ``which`` (all by default), in that order: the values of
        :meth:`score`, bit for bit (compiled: one distance row to the union; numpy: one
        product per store, the rest of the rows at once,
        :func:`~kernelstream.learners.store.eval_stores`)."""
        if self._compiled:
            return self._compiled_scores(
                x, xx, None if which is None else np.asarray(which, dtype=np.int64))
        if which is None:
            return eval_stores(self.stores, self.widths.kernels, x, xx)[0]
        idx = [int(i) for i in which]
        return eval_stores([self.stores[i] for i in idx],
                           [self.widths.kernels[i] for i in idx], x, xx)[0]

    @property
    def sizes(self) -> np.ndarray:
        return np.array([s.n for s in self.stores], dtype=np.int64)

    @property
    def n_support_vectors(self) -> int:
        return sum(s.n for s in self.stores)

    @property
    def norm2(self) -> np.ndarray:
        return np.array([s.norm2 for s in self.stores])

    def exact_norm2(self) -> np.ndarray:
        """``a_iᵀ K_i a_i`` recomputed from scratch for every kernel (tests)."""
        return np.array([s.exact_norm2(k) for s, k in zip(self.stores, self.widths.kernels,
                                                          strict=True)])

    def reset(self, i: int) -> None:
        """Empty expansion ``i`` (``f_i = 0``)."""
        self.stores[i] = SVStore(self.dim, capacity=self.capacity)

    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i, s in enumerate(self.stores):
            out.update(s.get_state(f"{prefix}{i}."))
        return out

    def set_state(self, state: dict[str, np.ndarray], prefix: str) -> None:
        self.stores = [SVStore.from_state(state, f"{prefix}{i}.", self.dim,
                                          capacity=self.capacity)
                       for i in range(self.widths.K)]


class SharedPool:
    """All ``K`` kernels on one point set: ``f_i = Σ_j A_ij κ_i(x_j, ·)``.

    ``scores(x, xx)`` costs one distance row ``O(n d)`` plus ``K n`` exponentials, and returns
    the ``K × n`` kernel rows for reuse by the update. The squared norms ``norm2`` (``K``) are
    tracked with the §1.3 identities, vectorised over the kernels: callers pass ``f_i(z)``
    (``K`` values they have already computed). ``κ(z, z) = 1`` (Gaussian).
    """

    def __init__(self, widths: GaussianWidths, dim: int, capacity: int = 64) -> None:
        self.widths = widths
        self.dim = int(dim)
        cap = max(int(capacity), 1)
        self.X = np.zeros((cap, self.dim))
        self.sqn = np.zeros(cap)
        self.A = np.zeros((widths.K, cap))
        self.ids = np.zeros(cap, dtype=np.int64)
        self.s = np.zeros(cap, dtype=np.int64)
        self.n = 0
        self.norm2 = np.zeros(widths.K)

    def rows(self, x: np.ndarray, xx: float) -> np.ndarray:
        n = self.n
        return self.widths.rows(sq_dist_row(self.X[:n], self.sqn[:n], x, xx))

    def scores(self, x: np.ndarray, xx: float) -> tuple[np.ndarray, np.ndarray]:
        """``(f (K,), κ rows (K, n))``."""
        n = self.n
        if n == 0:
            return np.zeros(self.widths.K), np.zeros((self.widths.K, 0))
        R = self.rows(x, xx)
        return np.einsum("kn,kn->k", self.A[:, :n], R), R

    def _grow(self) -> None:
        cap = 2 * len(self.sqn)
        for name in ("X", "sqn", "ids", "s"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)
        A = np.zeros((self.widths.K, cap))
        A[:, : self.n] = self.A[:, : self.n]
        self.A = A

    def append(self, z: np.ndarray, zz: float, coefs: np.ndarray, fz: np.ndarray,
               id_: int = -1, s: int = 0) -> int:
        """Add ``coefs_i κ_i(z, ·)`` to every ``f_i``; ``fz_i = f_i(z)`` before the addition."""
        if self.n == len(self.sqn):
            self._grow()
        j = self.n
        self.X[j] = z
        self.sqn[j] = zz
        self.A[:, j] = coefs
        self.ids[j] = id_
        self.s[j] = s
        self.n = j + 1
        self.norm2 += coefs * (2.0 * fz + coefs)
        return j

    def add_coef(self, j: int, c: np.ndarray, fxj: np.ndarray) -> None:
        """``A[:, j] += c`` (merge by id); ``fxj_i = f_i(x_j)`` before the change."""
        self.A[:, j] += c
        self.norm2 += c * (2.0 * fxj + c)

    def scale(self, c: np.ndarray | float) -> None:
        """``f_i ← c_i f_i``."""
        c = np.asarray(c, dtype=np.float64)
        self.A[:, : self.n] *= c[:, None] if c.ndim else c
        self.norm2 *= c * c

    def remove(self, j: int, fxj: np.ndarray) -> None:
        """Delete point ``j`` from every kernel (the last point moves into its slot)."""
        a = self.A[:, j].copy()
        self.norm2 += a * (a - 2.0 * fxj)
        last = self.n - 1
        if j != last:
            self.X[j] = self.X[last]
            self.sqn[j] = self.sqn[last]
            self.A[:, j] = self.A[:, last]
            self.ids[j] = self.ids[last]
            self.s[j] = self.s[last]
        self.A[:, last] = 0.0
        self.n = last

    def find_id(self, id_: int) -> int:
        hit = np.flatnonzero(self.ids[: self.n] == id_)
        return int(hit[0]) if len(hit) else -1

    def exact_norm2(self) -> np.ndarray:
        n = self.n
        if n == 0:
            return np.zeros(self.widths.K)
        G = self.widths.matrix(self.X[:n])
        A = self.A[:, :n]
        return np.einsum("kn,knm,km->k", A, G, A)

    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        n = self.n
        return {f"{prefix}X": self.X[:n].copy(), f"{prefix}sqn": self.sqn[:n].copy(),
                f"{prefix}A": self.A[:, :n].copy(), f"{prefix}ids": self.ids[:n].copy(),
                f"{prefix}s": self.s[:n].copy(), f"{prefix}norm2": self.norm2.copy()}

    def set_state(self, state: dict[str, np.ndarray], prefix: str) -> None:
        X = state[f"{prefix}X"]
        n = len(X)
        while len(self.sqn) < n:
            self._grow()
        self.X[:n] = X
        self.sqn[:n] = state[f"{prefix}sqn"]
        self.A[:, :n] = state[f"{prefix}A"]
        self.A[:, n:] = 0.0
        self.ids[:n] = state[f"{prefix}ids"]
        self.s[:n] = state[f"{prefix}s"]
        self.n = n
        self.norm2 = np.array(state[f"{prefix}norm2"], dtype=np.float64)


# -- learner base --------------------------------------------------------------------------------
class SelectionLearner(Learner):
    """Base of learners that select among ``K`` Gaussian widths (parameter ``sigmas``).

    Subclasses set ``self._selected`` to the kernel drawn in ``_score`` and implement
    ``_distribution()`` (the probability vector of the next draw).
    """

    randomized = True
    draws_in_predict: ClassVar[bool] = True

    sigmas: str
    _selected: int = -1

    def _configure(self) -> None:
        self.widths = GaussianWidths(parse_sigmas(self.sigmas))
        self.K = self.widths.K

    def _distribution(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def selected_kernel(self) -> int | None:
        """Index of the kernel that formed the last prediction (``None`` before the first)."""
        if self.dim is None or self._selected < 0:
            return None
        return int(self._selected)

    @property
    def kernel_distribution(self) -> np.ndarray:
        """Probabilities of the next draw (a fresh, normalised copy)."""
        if self.dim is None:
            return np.full(self.K, 1.0 / self.K)
        p = np.array(self._distribution(), dtype=np.float64)
        return p / p.sum()


LOSS_PARAM = Param("loss", "logistic", str,
                   "loss: logistic (classification), square or absolute (regression)",
                   choices=("logistic", "square", "absolute"))


class WeightedWidths(HorizonTuning):
    """Mixin of learners that *combine* the ``K`` widths with weights ``p`` rather than draw
    one (Raker, LKMBooks; full information, no randomness in predict): widths from
    ``sigmas``, the task from ``loss`` (:data:`LOSS_PARAM`), ``kernel_distribution`` = ``p``,
    ``selected_kernel`` = the kernel of largest weight."""

    loss: str
    sigmas: str
    dim: int | None
    p: np.ndarray

    def _configure(self) -> None:
        self.task = LOSSES[self.loss].task  # instance attribute: the loss decides the task
        self.widths = GaussianWidths(parse_sigmas(self.sigmas))
        self.K = self.widths.K

    @property
    def selected_kernel(self) -> int | None:
        """Index of the kernel with the largest weight."""
        return None if self.dim is None else int(np.argmax(self.p))

    @property
    def kernel_distribution(self) -> np.ndarray | None:
        """The combination weights ``p``."""
        return np.full(self.K, 1.0 / self.K) if self.dim is None else self.p.copy()


# -- paper 001's AO2MD bookkeeping (§3.3) --------------------------------------------------------
class RoundContext(NamedTuple):
    """What ``OptimisticMirror.context`` computes for ``x_t`` (used by predict and update)."""

    v: int  # reservoir size at the start of the round
    d2v: np.ndarray  # ‖x_v − x_t‖² (v)
    kv: np.ndarray  # κ_i(x_v, x_t) (K × v)
    mux: np.ndarray  # μ̃_i(x_t) (K)
    ip: np.ndarray  # ⟨f'_{t−1,i}, μ̃_i⟩ (K)
    scale: np.ndarray  # min(1, U/‖f̄_{t,i}‖) (K)
    lam: float  # step size λ of the round


class OptimisticMirror:
    """Per-kernel state of paper 001's adaptive optimistic mirror descent (Liao & Li 2021, §3.2).

    For each kernel ``i``: ``F_i`` = ``f'_{t−1,i}`` (an :class:`SVStore` of :class:`KernelPool`,
    points merged by stream id), ``n2_i = ‖f'_{t−1,i}‖²``, ``H[i, v] = f'_{t−1,i}(x_v)`` at the
    reservoir points. Shared by all kernels: the reservoir ``V`` (``M`` examples, Algorithm R),
    its kernel matrices ``KV`` (``K × M × M``), ``KVy = KV y_V``
    and ``m2_i = ‖μ̃_i‖² = y_Vᵀ KV_i y_V / v²``, where ``μ̃_i = (1/v) Σ_V y κ_i(x, ·)``.

    Per round: :meth:`context` (one distance row to the reservoir, reused by every width) gives
    ``μ̃_i(x_t)``, ``⟨f'_{t−1,i}, μ̃_i⟩`` and the projection factor of
    ``f̄_{t,i} = f'_{t−1,i} + λ μ̃_i``, so ``f_{t,i}(x_t) = s_i (f'_{t−1,i}(x_t) + λ μ̃_i(x_t))``;
    :meth:`correct` applies ``f'_{t,i} = Π_U(f'_{t−1,i} + a_i κ_i(x_t, ·) + b_i μ̃_i)`` in O(M) per
    kernel besides the append; :meth:`end_round` offers ``(x_t, y_t)`` to the reservoir and
    refreshes what depends on it.
    """

    def __init__(self, widths: GaussianWidths, dim: int, reservoir_size: int,
                 radius: float) -> None:
        K, M = widths.K, int(reservoir_size)
        self.widths = widths
        self.K, self.M = K, M
        self.radius = float(radius)
        self.U2 = self.radius * self.radius
        self.pool = KernelPool(widths, dim)
        self.res = Reservoir(M, dim)
        self.sqnV = np.zeros(M)
        self.KV = np.zeros((K, M, M))
        self.KVy = np.zeros((K, M))
        self.m2 = np.zeros(K)
        self.H = np.zeros((K, M))
        self.n2 = np.zeros(K)
        # position in store i of the point held in reservoir slot j (-1: not in the store yet)
        self.pos = np.full((K, M), -1, dtype=np.int64)
        self._missing = np.zeros(K, dtype=bool)  # some reservoir point is absent from F_i
        self._new_pos = np.full(K, -1, dtype=np.int64)  # where x_t went this round

    # -- per round ------------------------------------------------------------------------------
    def context(self, x: np.ndarray, xx: float, lam: float) -> RoundContext:
        v = self.res.n
        K = self.K
        if v == 0:
            z = np.zeros(K)
            e = np.zeros(0)
            d2v, kv, mux, ip = e, np.zeros((K, 0)), z, z
        else:
            d2v = sq_dist_row(self.res.X[:v], self.sqnV[:v], x, xx)
            kv = self.widths.rows(d2v)
            yv = self.res.y[:v]
            mux = kv.dot(yv)
            mux /= v
            ip = self.H[:, :v].dot(yv)
            ip /= v
        # ‖f̄_{t,i}‖² = ‖f'‖² + λ(2⟨f', μ̃⟩ + λ‖μ̃‖²) and the projection factor, in Python
        # floats per kernel (as in correct), or the same operations compiled
        U2, radius = self.U2, self.radius
        mk = compiled.mk
        if mk is not None:
            sc = np.empty(K)
            mk.mirror_scale(self.n2, ip, self.m2, lam, v, U2, radius, sc)
            return RoundContext(v, d2v, kv, mux, ip, sc, lam)
        scale = [1.0] * K
        for i, (n2, ipi, m2) in enumerate(zip(self.n2.tolist(), ip.tolist(), self.m2.tolist(),
                                              strict=True)):
            nbar2 = n2 + lam * (2.0 * ipi + lam * m2) if v else n2
            if nbar2 > U2:
                scale[i] = radius / math.sqrt(nbar2)
        return RoundContext(v, d2v, kv, mux, ip, np.array(scale), lam)

    def predict(self, i: int, fx: float, ctx: RoundContext) -> float:
        """``f_{t,i}(x_t)`` from ``fx = f'_{t−1,i}(x_t)``."""
        return float(ctx.scale[i]) * (fx + ctx.lam * float(ctx.mux[i]))

    def correct(self, a: np.ndarray, b: np.ndarray, x: np.ndarray, xx: float, fx: np.ndarray,
                ctx: RoundContext, t: int) -> np.ndarray:
        """``f'_{t,i} = Π_U(f'_{t−1,i} + a_i κ_i(x_t,·) + b_i μ̃_i)`` for every kernel.

        ``fx_i = f'_{t−1,i}(x_t)`` is needed where ``a_i ≠ 0`` (NaN elsewhere is fine). Returns
        ``f'_{t,i}(x_t)`` (NaN where ``fx_i`` is NaN). Kernels with ``a_i = b_i = 0`` are left
        unchanged.
        """
        v = ctx.v
        stores = self.pool.stores
        new_pos = self._new_pos
        new_pos.fill(-1)
        mk = compiled.mk
        if mk is not None:
            # the appends in Python (a few kernels a round), the rest of the loop below and the
            # updates of H in C, in the same order: x_t first, then the reservoir points F_i
            # lacks, then the merge and the projection
            if a.any():
                for i in np.flatnonzero(a).tolist():
                    new_pos[i] = stores[i].append(x, xx, float(a[i]), id_=t, s=t)
            if v and self._missing.any():
                for i in np.flatnonzero(self._missing & (b != 0.0)).tolist():
                    self._store_reservoir(i, v)
            out = np.empty(self.K)
            mk.mirror_correct(stores, self.pos, v, ctx.kv, self.KVy, self.res.y, a, b, fx,
                              self.n2, self.m2, ctx.ip, ctx.mux, self.H, self.U2, self.radius,
                              out)
            return out
        if v:
            H = self.H[:, :v]
            H += a[:, None] * ctx.kv
            H += (b / v)[:, None] * self.KVy[:, :v]
            coefs = np.multiply.outer(b, self.res.y[:v] / v)  # row i: b_i y_V / v
        # K is small: scalar Python arithmetic per kernel beats numpy calls on K-vectors
        n2 = self.n2.tolist()
        m2 = self.m2.tolist()
        ip = ctx.ip.tolist()
        mux = ctx.mux.tolist()
        a_l = a.tolist()
        b_l = b.tolist()
        fx_l = fx.tolist()
        out = fx_l[:]
        U2, radius = self.U2, self.radius
        missing, pos = self._missing, self.pos
        for i in range(self.K):
            ai, bi = a_l[i], b_l[i]
            if ai == 0.0 and bi == 0.0:
                continue
            sv = stores[i]
            # ‖f + aκ_x + bμ̃‖² = ‖f‖² + a² + b² m2 + 2a f(x) + 2b ⟨f, μ̃⟩ + 2ab μ̃(x)
            nn = n2[i] + bi * (bi * m2[i] + 2.0 * ip[i])
            if ai != 0.0:
                nn += ai * (ai + 2.0 * fx_l[i] + 2.0 * bi * mux[i])
                new_pos[i] = sv.append(x, xx, ai, id_=t, s=t)
            if bi != 0.0 and v:
                # F_i += Σ_v (b_i y_v / v) κ_i(x_v, ·), merged by stream id
                if missing[i]:
                    self._store_reservoir(i, v)
                sv.a[pos[i, :v]] += coefs[i]
            fac = 1.0
            if nn > U2:
                fac = radius / math.sqrt(nn)
                sv.a[: sv.n] *= fac
                if v:
                    self.H[i, :v] *= fac
                nn = U2
            elif nn < 0.0:  # round-off
                nn = 0.0
            n2[i] = nn
            sv.norm2 = nn
            out[i] = fac * (fx_l[i] + ai + bi * mux[i])
        self.n2 = np.array(n2)
        return np.array(out)

    def _store_reservoir(self, i: int, v: int) -> None:
        """Append to ``F_i`` (coefficient 0) the reservoir points it does not hold yet, so that
        ``F_i += Σ_v c_v κ_i(x_v, ·)`` merges by stream id."""
        sv = self.pool.stores[i]
        pos = self.pos[i]
        res = self.res
        for j in np.flatnonzero(pos[:v] < 0):
            pos[j] = sv.append(res.X[j], float(self.sqnV[j]), 0.0, id_=int(res.ids[j]),
                               s=int(res.ids[j]))
        self._missing[i] = False

    def end_round(self, rng: np.random.Generator, x: np.ndarray, xx: float, y: float, t: int,
                  ctx: RoundContext, fpx: np.ndarray) -> int:
        """Offer ``(x_t, y_t)`` (id ``t``) to the reservoir (§1.7) and refresh ``KV``,
        ``KVy``, ``m2``, ``H`` and the positions. ``fpx_i = f'_{t,i}(x_t)`` (NaN: evaluated
        here if needed). Returns the slot written or -1."""
        j = self.res.offer(rng, x, y, t)
        if j < 0:
            return -1
        v_old, v = ctx.v, self.res.n
        self.sqnV[j] = xx
        KV = self.KV
        KV[:, j, :v_old] = ctx.kv
        KV[:, :v_old, j] = ctx.kv
        KV[:, j, j] = 1.0
        yv = self.res.y[:v]
        self.KVy[:, :v] = KV[:, :v, :v] @ yv
        self.m2 = (self.KVy[:, :v] @ yv) / (v * v)
        todo = np.flatnonzero(np.isnan(fpx))
        if len(todo):
            fpx[todo] = self.pool.scores(x, xx, todo)
        self.H[:, j] = fpx
        self.pos[:, j] = self._new_pos
        self._missing |= self._new_pos < 0
        return j

    def reset_kernel(self, i: int) -> None:
        """``f'_{i} ← 0`` (BEA2OKS restart): empty store, zero norm and ``h_i``."""
        self.pool.reset(i)
        self.n2[i] = 0.0
        self.H[i] = 0.0
        self.pos[i] = -1
        self._missing[i] = self.res.n > 0

    # -- diagnostics and state ------------------------------------------------------------------
    def exact_h(self) -> np.ndarray:
        """``f'_i(x_v)`` recomputed from the stores (tests)."""
        v = self.res.n
        out = np.zeros((self.K, v))
        for i in range(self.K):
            for j in range(v):
                out[i, j] = self.pool.score(i, self.res.X[j], float(self.sqnV[j]))[0]
        return out

    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        v = self.res.n
        st = self.pool.get_state(f"{prefix}F")
        st.update(self.res.get_state(f"{prefix}V."))
        # the reservoir's Gram matrices are stored rather than rebuilt, so a
        # restored learner continues bit-identically (they are O(K M²), M ≈ ln T)
        st[f"{prefix}sqnV"] = self.sqnV[:v].copy()
        st[f"{prefix}KV"] = self.KV[:, :v, :v].copy()
        st[f"{prefix}KVy"] = self.KVy[:, :v].copy()
        st[f"{prefix}m2"] = self.m2.copy()
        st[f"{prefix}n2"] = self.n2.copy()
        st[f"{prefix}H"] = self.H[:, :v].copy()
        st[f"{prefix}pos"] = self.pos[:, :v].copy()
        st[f"{prefix}missing"] = self._missing.copy()
        return st

    def set_state(self, state: dict[str, np.ndarray], prefix: str) -> None:
        self.pool.set_state(state, f"{prefix}F")
        self.res.set_state(state, f"{prefix}V.")
        v = self.res.n
        self.sqnV[:v] = state[f"{prefix}sqnV"]
        self.KV[:, :v, :v] = state[f"{prefix}KV"]
        self.KVy[:, :v] = state[f"{prefix}KVy"]
        self.m2 = np.array(state[f"{prefix}m2"], dtype=np.float64)
        self.n2 = np.array(state[f"{prefix}n2"], dtype=np.float64)
        self.H[:, :v] = state[f"{prefix}H"]
        self.pos[:, :v] = state[f"{prefix}pos"]
        self._missing = np.array(state[f"{prefix}missing"], dtype=bool)
