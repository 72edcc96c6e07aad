"""The primal form of the linear-kernel learners (issue 28): Perceptron, PA-I and OGD with
``kernel="linear"`` keep one weight vector ``w`` instead of their support vectors.

With ``κ(x, x') = xᵀx'`` the expansion ``f = Σ_j a_j κ(x_j, ·)`` is the linear function
``f(x) = wᵀx`` with ``w = Σ_j a_j x_j``: every update that would store ``x_t`` with
coefficient ``c`` adds ``c x_t`` to ``w`` instead. A round then costs the non-zeros of ``x_t``
(not the stored points times their non-zeros), and memory is one vector, not one row per
update. The learners choose it by themselves whenever ``kernel="linear"`` and the compiled
module ``_ck_linear`` is built (:data:`lk`; without it, or with ``KERNELSTREAM_COMPILED=0``,
they keep the dual form). The results are the dual form's up to round-off (sums run in
another order; ``tests/learners/test_primal_linear.py`` checks it for the three learners, dense
and sparse), and exact wherever the dual form is exact: a Perceptron on integer data holds
integers either way.

Dense rows use a dense ``w`` of width ``d``. Sparse rows keep ``w`` over the columns seen so
far in an open-addressing hash table of (column, weight) entries (``_ck_linear.c``), so neither
time nor memory follows the largest index. OGD's shrink ``(1 − ηλ)`` multiplies a ``scale`` beside
``w`` (``f = scale · wᵀx``), one multiplication per round instead of one per weight.

:attr:`n_support_vectors` still counts the terms the dual form would hold (the updates), so
per-row reports are unchanged. The state is versioned numpy data (``lin.*``: the weights, the
sparse columns in increasing order, the counters); a dual state (``sv.*``, e.g. saved before this
form existed) loads into the primal form by summing its expansion.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.store import AnyStore, make_store, store_from_state
from kernelstream.sparse import CSR, SparseRow

lk: Any = compiled.lk  # the compiled primal rounds (None: not built, or stale)

#: the compiled rules (_ck_linear.c): the update of each learner, and "add a given term"
R_PERCEPTRON, R_PA1, R_OGD_HINGE, R_ADD = 0, 1, 2, 3
_MIN_TABLE = 16  # entries of a new sparse table


class _Terms:
    """What stands for the store in the primal form: its ``n`` is the number of terms the
    dual form would hold (``KernelLearner.n_support_vectors`` and the compiled block paths
    read ``sv.n``)."""

    __slots__ = ("_counts",)

    def __init__(self, counts: np.ndarray) -> None:
        self._counts = counts

    @property
    def n(self) -> int:
        return int(self._counts[0])


class LinearPrimal(KernelLearner):
    """A :class:`KernelLearner` that runs in the primal form when its kernel is linear (module
    docstring). A subclass names its compiled update in :meth:`_primal_rule` and starts its
    ``_update`` with ``if self._primal: return self._primal_update(x, y, score)``."""

    #: False keeps the dual form (tests compare the two forms)
    primal_linear: ClassVar[bool] = True

    def _primal_rule(self) -> tuple[int, list[float]]:
        """``(rule, constants)`` of this instance's compiled update (``R_*``)."""
        raise NotImplementedError

    @classmethod
    def compiled_rounds(cls) -> bool:
        # the dual form's rounds, as KernelLearner's (this class's _score only dispatches)
        return cls._score is LinearPrimal._score

    @classmethod
    def _primal_applies(cls) -> bool:
        """Only when the class that names the rule also owns the ``_update`` and ``_score`` in
        force (a subclass that changes either keeps the dual form)."""
        owner = next(c for c in cls.__mro__ if "_primal_rule" in c.__dict__)
        updater = next(c for c in cls.__mro__ if "_update" in c.__dict__)
        scorer = next(c for c in cls.__mro__ if "_score" in c.__dict__)
        return issubclass(owner, updater) and scorer is LinearPrimal

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self._primal = bool(self.primal_linear and lk is not None and self.kernel == "linear"
                            and self._primal_applies())
        if self._primal:
            rule, prm = self._primal_rule()
            self._lin_rule = rule
            self._lin_prm = np.array(prm + [0.0] * (2 - len(prm)), dtype=np.float64)
            self._lin_ist = np.zeros(2, dtype=np.int64)  # terms added, sparse columns held
            self._lin_fst = np.array([1.0, 0.0])  # scale, ‖f‖²
            self.sv = cast(AnyStore, _Terms(self._lin_ist))
            # dense w, or the sparse table: (column, weight) entries, float64 pairs
            self._lin_w: np.ndarray | None = None if self.sparse else np.zeros(d)
            self._lin_tab: np.ndarray | None = None
            if self.sparse:
                self._lin_table(np.zeros(0, dtype=np.int64), np.zeros(0), 0)

    # -- the weight vector -----------------------------------------------------------------
    def _lin_table(self, cols: np.ndarray, w: np.ndarray, more: int,
                   cap: int = _MIN_TABLE) -> None:
        """A new sparse table of at least ``cap`` entries holding ``cols`` / ``w`` with room
        for ``more`` new columns (load ≤ 1/2 after them)."""
        while 2 * (len(cols) + more) > cap:
            cap *= 2
        tab = np.zeros(2 * cap)
        tab.view(np.int64)[0::2] = -1  # every key empty
        lk.insert(tab, cols, w)
        self._lin_tab = tab
        self._lin_ist[1] = len(cols)

    def _lin_entries(self, ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``(columns, weights)`` of the sparse table (copies), by increasing column when
        ``ordered`` (a table's order changes no result, only its state's bytes)."""
        assert self._lin_tab is not None
        keys = self._lin_tab.view(np.int64)[0::2]
        live = np.flatnonzero(keys != -1)
        cols, w = keys[live], self._lin_tab[1::2][live]
        if not ordered:
            return cols, w
        order = np.argsort(cols, kind="stable")
        return cols[order], w[order]

    def _lin_grow(self, more: int) -> None:
        """Room for ``more`` new columns: a table twice as large (or more), rehashed."""
        assert self._lin_tab is not None
        cols, w = self._lin_entries(ordered=False)
        self._lin_table(cols, w, more, len(self._lin_tab))  # twice the entries at least

    def _lin_rescale(self) -> None:
        """Fold the scale into the weights (before it underflows)."""
        if self._lin_w is not None:
            self._lin_w *= self._lin_fst[0]
        else:
            assert self._lin_tab is not None
            self._lin_tab[1::2] *= self._lin_fst[0]  # empty entries hold 0
        self._lin_fst[0] = 1.0

    def _lin_row(self, x: Any) -> tuple[np.ndarray | None, np.ndarray]:
        """``(columns or None, values)`` of a row as the compiled calls take it."""
        if type(x) is SparseRow:
            return x.indices, x.values
        x = np.ascontiguousarray(x, dtype=np.float64)
        if self.sparse:  # a dense row given to a sparse-mode learner: its non-zeros
            r = SparseRow.from_dense(x)
            return r.indices, r.values
        return None, x

    @property
    def weights(self) -> tuple[np.ndarray | None, np.ndarray]:
        """``(columns, w)`` of the primal form (columns None: dense ``w``), copies, with the
        scale folded in; raises ``AttributeError`` in the dual form."""
        if not getattr(self, "_primal", False):
            raise AttributeError(f"{self.name}: no weight vector (dual form)")
        if self._lin_w is not None:
            return None, self._lin_w * self._lin_fst[0]
        cols, w = self._lin_entries()
        return cols, w * self._lin_fst[0]

    # -- rounds ------------------------------------------------------------------------------
    def _score(self, x: Any, xx: float) -> tuple[float, Any]:
        if not self._primal:
            return super()._score(x, xx)
        idx, vals = self._lin_row(x)
        # float: the scale is a numpy scalar, and callers write the score into their rows
        return float(lk.score(self._lin_w, self._lin_tab, idx, vals) * self._lin_fst[0]), None

    def _primal_update(self, x: Any, y: float, score: float, rule: int | None = None,
                       prm: np.ndarray | None = None) -> None:
        """The compiled update of one round (``rule`` / ``prm``: another rule, e.g. R_ADD)."""
        idx, vals = self._lin_row(x)
        args = (self._lin_rule if rule is None else rule,
                self._lin_prm if prm is None else prm, self._lin_ist, self._lin_fst)
        while lk.update(*args, self._lin_w, self._lin_tab, idx, vals, y, score) < 0:
            self._lin_grow(len(vals))

    def _lin_run(self, indptr: np.ndarray | None, indices: np.ndarray | None,
                 data: np.ndarray, yv: np.ndarray, out: np.ndarray,
                 n_sv: np.ndarray | None) -> None:
        """A whole block in C, the table grown whenever a row might not fit."""
        nsv = None if n_sv is None else np.zeros(len(yv), dtype=np.int64)
        i, rows = 0, len(yv)
        while True:
            i = lk.run(self._lin_rule, self._lin_prm, self._lin_ist, self._lin_fst, self._lin_w,
                       self._lin_tab, indptr, indices, data, yv, i, out, nsv)
            if i >= rows:
                break
            assert indptr is not None  # only a sparse row can need a larger table
            self._lin_grow(int(indptr[i + 1] - indptr[i]))
        self.t += rows
        if n_sv is not None and nsv is not None:
            n_sv[:] = nsv

    def _blocks_compiled(self) -> bool:
        # a learner whose rule needs Python (OGD's other losses) runs row by row
        return self._primal and self._lin_rule != R_ADD

    def _learn_rows(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        if not self._primal:
            super()._learn_rows(X, zz, yv, out, n_sv)
            return
        if self.sparse or not self._blocks_compiled():  # the per-example code, row by row
            self._rounds(((X[i], float(zz[i])) for i in range(X.shape[0])), yv, out, n_sv)
            return
        self._lin_run(None, None, np.ascontiguousarray(X), np.ascontiguousarray(yv), out, n_sv)

    def _learn_sparse_rows(self, X: CSR, yv: np.ndarray, out: np.ndarray,
                           n_sv: np.ndarray | None) -> None:
        if not (self._blocks_compiled() and self.sparse):
            super()._learn_sparse_rows(X, yv, out, n_sv)
            return
        a = int(X.indptr[0])
        self._lin_run(np.ascontiguousarray(X.indptr - a, dtype=np.int64),
                      np.ascontiguousarray(X.indices[a:], dtype=np.int64),
                      np.ascontiguousarray(X.data[a:], dtype=np.float64),
                      np.ascontiguousarray(yv), out, n_sv)

    # -- state -------------------------------------------------------------------------------
    def _get_state(self) -> dict[str, np.ndarray]:
        if not self._primal:
            return super()._get_state()
        st = {"lin.counts": self._lin_ist.copy(), "lin.f": self._lin_fst.copy()}
        if self._lin_w is not None:
            st["lin.w"] = self._lin_w.copy()
        else:
            st["lin.cols"], st["lin.w"] = self._lin_entries()
        return st

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        assert self.dim is not None  # for mypy: set_state fixes it first
        if not self._primal:
            if "lin.w" in state:  # a primal state in the dual form (no compiled module)
                self._dual_from_lin(state)
            else:
                super()._set_state(state)
            return
        if "lin.w" not in state:  # a dual state: sum its expansion into w
            self._lin_from_dual(state)
            return
        self._lin_ist[:] = state["lin.counts"]
        self._lin_fst[:] = state["lin.f"]
        w = np.asarray(state["lin.w"], dtype=np.float64)
        if not self.sparse:
            if w.shape != (self.dim,):
                raise ValueError(f"{self.name}: state's weights have shape {w.shape}, "
                                 f"not ({self.dim},)")
            self._lin_w = w.copy()
            return
        cols = np.ascontiguousarray(state["lin.cols"], dtype=np.int64)
        k = len(cols)
        if len(w) != k or int(self._lin_ist[1]) != k:
            raise ValueError(f"{self.name}: state's sparse weights are inconsistent")
        if k and (int(cols[0]) < 0 or int(cols[-1]) >= self.dim
                  or not bool(np.all(cols[1:] > cols[:-1]))):
            raise ValueError(f"{self.name}: state's sparse columns must be increasing, "
                             f"in [0, {self.dim})")
        self._lin_table(cols, np.ascontiguousarray(w), 0)

    def _dual_from_lin(self, state: dict[str, np.ndarray]) -> None:
        """The dual form of a primal state: one support vector ``w`` with coefficient
        ``scale`` (the same function; #SV is then 1)."""
        assert self.dim is not None
        self.sv = make_store(self.dim, (self.memory_bound() or 16) + 1, self.sparse)
        w = np.ascontiguousarray(state["lin.w"], dtype=np.float64)
        x: Any = (SparseRow(np.asarray(state["lin.cols"], dtype=np.int64), w, self.dim)
                  if self.sparse else w)
        scale, norm2 = (float(v) for v in state["lin.f"])
        self.sv.append(x, float(w @ w), scale, id_=0, s=0)
        self.sv.norm2 = norm2
        self._compiled_setup()

    def _lin_from_dual(self, state: dict[str, np.ndarray]) -> None:
        assert self.dim is not None
        sv = store_from_state(state, "sv.", self.dim)
        pts = sv.points
        coef = sv.coef
        rows = pts if isinstance(pts, CSR) else CSR.from_dense(pts)
        add = np.zeros(2)
        for j in range(sv.n):  # in slot order, each term added as an update adds it
            a, b = int(rows.indptr[j]), int(rows.indptr[j + 1])
            x: Any = (SparseRow(rows.indices[a:b], rows.data[a:b], self.dim) if self.sparse
                      else rows.sparse_row(j).to_dense())
            add[0] = coef[j]
            self._primal_update(x, 0.0, 0.0, R_ADD, add)
        self._lin_ist[0] = sv.n
        self._lin_fst[1] = sv.norm2
