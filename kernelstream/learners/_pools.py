"""The ``K`` Gaussian kernels of the selection learners and the stores of their expansions.

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

This is the data half of :mod:`kernelstream.learners._selection`, kept in its own module: it
knows nothing of how a learner selects or weighs the widths (that module's base classes and
rules), only how the expansions are stored, scored and saved. Gaussian kernels only
(``κ(x, x) = 1``); ``_selection`` re-exports every name.

Compiled rounds (``kernelstream.learners.compiled.mk``, ``_ck_multi.c``): the scores of a
:class:`KernelPool` (the other compiled parts of the selection learners, in
:mod:`~kernelstream.learners._mirror` and EA2OKS, are bit-identical to their Python code).
The scores change at round-off level against the numpy code: a point's inner product
with ``x`` is summed in index order over ``x``'s non-zeros (BLAS's gemv sums in blocks), the
exponential is ``_ck_multi``'s vectorised one (fdlibm's algorithm, within 1 ulp of libm;
numpy's SIMD exp differs from both by up to 1 ulp), and ``f_i = Σ_j a_ij k_ij`` is summed in
index order (BLAS's dot in blocks). On the reproduction checks (the learners of Liao & Li 2021
on w7a and german, those of Li & Liao 2022 on german and spambase, 3 permutations
each) the mistake rates stayed the same but for one mistake in 4,601 rounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.kernels import Gaussian, sq_dists
from kernelstream.learners.store import SVStore, eval_stores


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
        if self._compiled:  # the sync's references would keep the old store's rows alive
            self._seen[i] = None  # _sync then resyncs store i, as it does for any new store
            self._last = ()
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
    tracked with the exact identities of :mod:`kernelstream.learners.store`, vectorised over the
    kernels: callers pass ``f_i(z)`` (``K`` values they have already computed). ``κ(z, z) = 1``
    (Gaussian).
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

