"""Shared machinery of single-kernel learners that keep one support-vector store (a dense
:class:`SVStore`, or a :class:`SparseSVStore` when the learner runs on sparse rows).

On dense rows, rounds run through the compiled kernels (:mod:`kernelstream.learners.compiled`)
when they are built: the kernel row and score of every round, and, in blocks, every round up
to the next one that changes the model. A learner says when that is with ``update_when``
(its ``_update`` must then leave the model alone on the other rounds, apart from scaling the
coefficients by ``_idle_scale``); the conformance suite's block-versus-loop check holds it to
that."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import Learner
from kernelstream.learners.kernels import Kernel, make_kernel
from kernelstream.learners.store import AnyStore, make_store, store_from_state


class KernelLearner(Learner):
    """A learner whose hypothesis is one kernel expansion ``f = Σ_j a_j κ(x_j, ·)``.

    ``_score`` returns ``(f(x), k)`` with the kernel row ``k = κ(X_S, x)`` as the cached
    auxiliary value, so the update never recomputes it.
    """

    capacity_param: ClassVar[str | None] = "budget"  # parameter bounding the store, if any
    accepts_sparse = True  # x reaches only the store and the kernel (sparse SVs in sparse mode)
    #: rounds whose ``_update`` changes the model (compiled.TRIGGERS); "always" is always safe
    update_when: ClassVar[str] = "always"

    kernel: str
    gamma: float
    degree: int

    def _setup(self, d: int) -> None:
        self.kern: Kernel = make_kernel(self.kernel, self.gamma, self.degree)
        cap = getattr(self, self.capacity_param, 16) if self.capacity_param else 16
        self.sv: AnyStore = make_store(d, int(cap) + 1, self.sparse)
        self._idle_scale = 1.0  # coefficient scaling of a round that does not update
        self._compiled_setup()

    def _sqnorm(self, x: np.ndarray) -> float:
        if self._compiled_kernel():  # the compiled rounds' own sum (before the first row too)
            return compiled.sqnorm(x)
        return float(x @ x)

    def _row_sqnorms(self, X: np.ndarray) -> np.ndarray:
        return compiled.row_sqnorms(X) if self._compiled_kernel() else super()._row_sqnorms(X)

    @classmethod
    def compiled_rounds(cls) -> bool:
        """Whether this learner's dense rounds run on the compiled kernels (when built)."""
        return cls._score is KernelLearner._score

    def _compiled_kernel(self) -> bool:
        """Rounds scored by the compiled kernels (learners scoring their own way keep numpy
        throughout, so their numbers do not change)."""
        return (compiled.ck is not None and self.compiled_rounds()
                and self.hparams.get("kernel") in compiled.KERNEL_CODES)

    def _compiled_setup(self) -> None:
        """Use the compiled rounds on dense stores with a kernel they know (else numpy)."""
        code = compiled.KERNEL_CODES.get(self.kern.name)
        # a flag, not the module: learners are pickled (Beam ships them)
        self._compiled = self._compiled_kernel() and not self.sparse and code is not None
        if self._compiled:
            self._kcode = code
            self._kp = float(getattr(self.kern, "_neg_gamma", 0.0))
            self._kdeg = int(getattr(self.kern, "degree", 1))
            self._nzwork = np.empty(self.dim, dtype=np.int64)  # the example's non-zeros
            self._krow = np.empty(0)

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        sv = self.sv
        n = sv.n
        if n == 0:
            return 0.0, None
        if self._compiled:
            k = np.empty(n)
            f = compiled.ck.score(sv.X, sv.sqn, sv.a, n, self._kcode, self._kp, self._kdeg,
                               x if x.flags.c_contiguous else np.ascontiguousarray(x), xx, k,
                               self._nzwork)
            return f, k
        k = sv.row(self.kern, x, xx)
        return float(sv.a[:n] @ k), k

    def _eval_sv(self, j: int) -> float:
        """``f(x_j)`` at stored point ``j``, by the same row code as the scores."""
        sv = self.sv
        if self._compiled:
            return self._score(sv.X[j], float(sv.sqn[j]))[0]
        return sv.eval_sv(self.kern, j)

    @classmethod
    def _update_trigger(cls) -> str:
        """``update_when``, if the class that declares it also knows the ``_update`` in force
        (a subclass that overrides ``_update`` without declaring its own gets "always")."""
        owner = next(c for c in cls.__mro__ if "update_when" in c.__dict__)
        updater = next(c for c in cls.__mro__ if "_update" in c.__dict__)
        return cls.update_when if issubclass(owner, updater) else "always"

    def _learn_rows(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        ck = compiled.ck
        if (not self._compiled
                or type(self).n_support_vectors is not KernelLearner.n_support_vectors):
            super()._learn_rows(X, zz, yv, out, n_sv)
            return
        trigger = compiled.TRIGGERS[self._update_trigger()]
        # locals: this loop runs once per updating round, where Python's cost is the cost
        run, update, work = ck.run, self._update, self._nzwork
        kc, kp, kd, idle = self._kcode, self._kp, self._kdeg, self._idle_scale
        rows = X.shape[0]
        i = 0
        while i < rows:
            sv = self.sv  # an update may replace the store or grow its arrays
            n = sv.n
            if len(self._krow) < n:
                self._krow = np.empty(len(sv.a))
            krow = self._krow
            stop, sv.norm2 = run(sv.X, sv.sqn, sv.a, n, kc, kp, kd, X, zz, yv, i, trigger, idle,
                                 sv.norm2, out, n_sv, krow, work)
            self.t += stop - i
            if stop == rows:
                break
            update(X[stop], zz.item(stop), yv.item(stop), out.item(stop),
                   krow[:n].copy() if n else None)
            self.t += 1
            if n_sv is not None:
                n_sv[stop] = self.sv.n
            i = stop + 1

    @property
    def n_support_vectors(self) -> int:
        return self.sv.n if self.dim is not None else 0

    def _get_state(self) -> dict[str, np.ndarray]:
        return self.sv.get_state("sv.")

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        cap = getattr(self, self.capacity_param, 16) if self.capacity_param else 16
        self.sv = store_from_state(state, "sv.", self.dim, capacity=int(cap) + 1)
        self._compiled_setup()
