"""Shared machinery of single-kernel learners that keep one support-vector store (a dense
:class:`SVStore`, or a :class:`SparseSVStore` when the learner runs on sparse rows).

On dense rows, rounds run through the compiled kernels (:mod:`kernelstream.learners.compiled`)
when they are built: the kernel row and score of every round, and, in blocks, every round up
to the next one that changes the model. A learner says when that is with ``update_when``
(its ``_update`` must then leave the model alone on the other rounds, apart from scaling the
coefficients by ``_idle_scale``); the conformance suite's block-versus-loop check holds it to
that.

A budget learner whose update is compiled too (``_ck_budget.c``) names it in
:meth:`KernelLearner._rule_config`; its ``_update`` then hands each round to
:meth:`KernelLearner._rule_update` and blocks run entirely in C. The attributes the update
changes besides the store are listed in ``rule_ints`` / ``rule_floats`` (and the matrix
``rule_matrix``), which the compiled update reads and writes: they live in the rule's state
arrays (properties of the class), so no round copies them in or out. :meth:`KernelLearner.step`
runs such a round in one compiled call (``bk.step``: the norm, the row, the score and the
update, the block driver's per-row code) with the call's arguments kept between rounds."""

from __future__ import annotations

from typing import Any, ClassVar, cast

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.base import Learner
from kernelstream.learners.kernels import Kernel, make_kernel
from kernelstream.learners.store import AnyStore, SVStore, make_store, store_from_state

_NO_ROW = np.empty(0)  # the kernel row of a round against an empty store


class KernelLearner(Learner):
    """A learner whose hypothesis is one kernel expansion ``f = Σ_j a_j κ(x_j, ·)``.

    ``_score`` returns ``(f(x), k)`` with the kernel row ``k = κ(X_S, x)`` as the cached
    auxiliary value, so the update never recomputes it.
    """

    accepts_sparse = True  # x reaches only the store and the kernel (sparse SVs in sparse mode)
    #: capacity of an unbounded store before it first grows (registry.memory_estimate)
    initial_rows: ClassVar[int] = 17
    #: rounds whose ``_update`` changes the model (compiled.TRIGGERS); "always" is always safe
    update_when: ClassVar[str] = "always"

    #: learner attributes the compiled update (``_rule_config``) reads and writes, in the
    #: order of its state arrays (int64, float64), and its matrix (e.g. the Projectron's K⁻¹)
    rule_ints: ClassVar[tuple[str, ...]] = ()
    rule_floats: ClassVar[tuple[str, ...]] = ()
    rule_matrix: ClassVar[str | None] = None
    budget: int  # B of the learners with a compiled rule (every rule's first constant)

    kernel: str
    gamma: float
    degree: int
    # bk.step's arguments kept between rounds (KernelLearner.step): None until a round builds
    # them, and after anything that replaces an array they name; never pickled
    _fused: tuple[Any, ...] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for arrays, names in (("_rule_ist", "rule_ints"), ("_rule_fst", "rule_floats")):
            if names in cls.__dict__:
                for i, name in enumerate(cls.__dict__[names]):
                    setattr(cls, name, compiled.rule_state(arrays, i, name))

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st.pop("_fused", None)  # holds the bit generator's capsule, which does not pickle
        return st

    def _setup(self, d: int) -> None:
        # the rule's state arrays first: the subclass's _setup sets the attributes they hold
        self._rule_ist = np.zeros(len(self.rule_ints), dtype=np.int64)
        self._rule_fst = np.zeros(len(self.rule_floats))
        self.kern: Kernel = make_kernel(self.kernel, self.gamma, self.degree)
        cap = self.memory_bound() or 16  # a budget preallocates its store
        self.sv: AnyStore = make_store(d, cap + 1, self.sparse)
        self._idle_scale = 1.0  # coefficient scaling of a round that does not update
        self._compiled_setup()

    def _sqnorm(self, x: np.ndarray) -> float:
        # the compiled rounds' own sum (before the first row too); the flag is kept once the
        # store exists (_compiled_setup): asking again costs more than the sum of a row
        if self._sq_compiled if self.dim is not None else self._compiled_kernel():
            return compiled.sqnorm(x)
        return float(x @ x)

    def _row_sqnorms(self, X: np.ndarray) -> np.ndarray:
        return compiled.row_sqnorms(X) if self._compiled_kernel() else super()._row_sqnorms(X)

    @classmethod
    def compiled_rounds(cls) -> bool:
        """Whether this learner's dense rounds run on the compiled kernels (when built)."""
        return cls._score is KernelLearner._score

    @classmethod
    def compiled_updates(cls) -> bool:
        """Only with a compiled rule (:meth:`_rule_config`) named by a class that owns the
        ``_update`` in force, as :meth:`_compiled_rule` decides; otherwise the kernel rows and
        scores run in C and every updating round calls the Python ``_update``."""
        if not cls.compiled_rounds():
            return False
        owner = next(c for c in cls.__mro__ if "_rule_config" in c.__dict__)
        updater = next(c for c in cls.__mro__ if "_update" in c.__dict__)
        return owner is not KernelLearner and issubclass(owner, updater)

    def _compiled_kernel(self) -> bool:
        """Rounds scored by the compiled kernels (learners scoring their own way keep numpy
        throughout, so their numbers do not change)."""
        return (compiled.ck is not None and self.compiled_rounds()
                and self.hparams.get("kernel") in compiled.KERNEL_CODES)

    def _compiled_setup(self) -> None:
        """Use the compiled rounds on dense stores with a kernel they know (else numpy)."""
        code = compiled.KERNEL_CODES.get(self.kern.name)
        self._sq_compiled = self._compiled_kernel()
        # a flag, not the module: learners are pickled (Beam ships them)
        self._compiled = self._compiled_kernel() and not self.sparse and code is not None
        if self._compiled:
            assert self.dim is not None  # for mypy: set before _setup / _set_state run
            self._kcode = code
            self._kp = float(getattr(self.kern, "_neg_gamma", 0.0))
            self._kdeg = int(getattr(self.kern, "degree", 1))
            self._nzwork = np.empty(self.dim, dtype=np.int64)  # the example's non-zeros
            self._krow = np.empty(0)
        self._rule = -1  # compiled update: decided at the first round (after the subclass's setup)
        self._fused = None

    def _rule_config(self) -> tuple[str, list[float]] | None:
        """``(name in compiled.RULES, its constants)`` of the compiled form of ``_update`` for
        this instance, or None (numpy update)."""
        return None

    def _compiled_rule(self) -> int:
        """The compiled update's code (``compiled.RULES``), 0 for the numpy ``_update``: only
        on compiled rounds, and only when the class that names the rule also owns the
        ``_update`` in force (a subclass that changes the update keeps numpy)."""
        rule = self._rule
        if rule < 0:
            rule = 0
            cls = type(self)
            owner = next(c for c in cls.__mro__ if "_rule_config" in c.__dict__)
            updater = next(c for c in cls.__mro__ if "_update" in c.__dict__)
            cfg = self._rule_config() if self._compiled and compiled.bk is not None else None
            if cfg is not None and issubclass(owner, updater):
                rule = compiled.RULES[cfg[0]]
                self._rule_prm = np.array(cfg[1], dtype=np.float64)
                self._rule_scratch = np.empty(0)
                self._rule_trigger = compiled.TRIGGERS[self._update_trigger()]
            self._rule = rule
        return rule

    def _rule_args(self) -> tuple[tuple[Any, ...], np.ndarray, np.ndarray]:
        """The compiled update's leading arguments (store, kernel, constants, state), and the
        state arrays it updates in place (the ``rule_ints`` / ``rule_floats`` attributes)."""
        sv = cast(SVStore, self.sv)  # compiled rules run on dense stores only
        cap = len(sv.a)
        if sv.n == cap:  # room for an append (C does not grow the store)
            sv._grow()
            cap = len(sv.a)
        if len(self._rule_scratch) < 3 * cap:
            self._rule_scratch = np.empty(3 * cap)
        # the budget as of now: multi-kernel learners move their components' budgets
        self._rule_prm[0] = self.budget
        ist, fst = self._rule_ist, self._rule_fst
        mat = getattr(self, self.rule_matrix) if self.rule_matrix else None
        return ((self._rule, sv.X, sv.sqn, sv.a, sv.ids, sv.s, sv.n, sv.norm2, self._kcode,
                 self._kp, self._kdeg, self._rule_prm, ist, fst, mat,
                 self.rng.bit_generator.capsule, self._rule_scratch, self._nzwork), ist, fst)

    def step(self, x: Any, y: Any) -> float:
        """Predict then learn; returns the pre-update score. With a compiled rule, a dense
        float64 row and a label of ±1 (int or float) make one compiled call (``bk.step``),
        whose arguments are kept while the arrays they name stay (the store's ``a`` is
        replaced whenever the store grows or is restored; :meth:`_compiled_setup` drops them
        on a restore); anything else, bad input included, takes :meth:`Learner.step`."""
        fused = self._fused
        if fused is not None and (type(y) is float or type(y) is int) and (y == 1 or y == -1):
            sv = self.sv
            if fused[3] is sv.a:
                r = compiled.bk.step(fused, sv.n, sv.norm2, self.budget, x, y, self.t)
                if r is not None:
                    if self._pending is not None:  # undoes a pending draw
                        self._drop_pending()
                    self.t += 1
                    score: float
                    score, sv.n, sv.norm2 = r
                    return score
        score = super().step(x, y)
        if self._rule > 0 and self.task == "classification":  # the arguments of the next round
            self._fused = self._rule_args()[0]
        return score

    def _rule_update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        """One round's update by the compiled rule (the one the block driver runs). A round
        that ``update_when`` says leaves the model alone only scales the coefficients by
        ``_idle_scale`` (what the rule would do), without the call's packing."""
        m = y * score
        trigger = self._rule_trigger
        if (trigger == 1 and m > 0.0) or (trigger == 2 and m >= 1.0):
            if self._idle_scale != 1.0 and self.sv.n:
                self.sv.scale(self._idle_scale)
            return
        args = self._rule_args()[0]
        sv = self.sv
        sv.n, sv.norm2 = compiled.bk.update(
            *args, x if x.flags.c_contiguous else np.ascontiguousarray(x), xx, y, score,
            _NO_ROW if aux is None else aux, self.t)

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        sv = self.sv
        n = sv.n
        if n == 0:
            return 0.0, None
        if self._compiled:
            ds = cast(SVStore, sv)  # compiled rounds: a dense store
            k = np.empty(n)
            f = compiled.ck.score(ds.X, ds.sqn, ds.a, n, self._kcode, self._kp, self._kdeg,
                               x if x.flags.c_contiguous else np.ascontiguousarray(x), xx, k,
                               self._nzwork)
            return f, k
        k = sv.row(self.kern, x, xx)
        return float(sv.a[:n] @ k), k

    def _step_checked(self, x: np.ndarray, xx: float, y: float) -> float:
        # a compiled rule's round without the generic layers: the compiled score into a kept
        # row buffer (the rule only reads it), then the rule's trigger test, which ends most
        # rounds; the same C code and numbers as _score then _update
        if self._rule <= 0 and (not self._compiled or not self._compiled_rule()):
            return super()._step_checked(x, xx, y)
        sv = cast(SVStore, self.sv)  # compiled rules run on dense stores only
        n = sv.n
        if n == 0:
            score, krow = 0.0, None
        else:
            krow = self._krow
            if len(krow) < n:
                krow = self._krow = np.empty(len(sv.a))
            score = compiled.ck.score(
                sv.X, sv.sqn, sv.a, n, self._kcode, self._kp, self._kdeg,
                x if x.flags.c_contiguous else np.ascontiguousarray(x), xx, krow, self._nzwork)
        self._rule_update(x, xx, y, score, krow)
        self.t += 1
        return score

    def _eval_sv(self, j: int) -> float:
        """``f(x_j)`` at stored point ``j``, by the same row code as the scores."""
        sv = self.sv
        if self._compiled:
            sv = cast(SVStore, sv)  # compiled rounds: a dense store
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
        if self._compiled_rule():  # the whole block in C, updates included
            args = self._rule_args()[0]
            sv = self.sv
            sv.n, sv.norm2 = compiled.bk.run(*args, X, zz, yv, self.t, out, n_sv)
            self.t += X.shape[0]
            return
        trigger = compiled.TRIGGERS[self._update_trigger()]
        # locals: this loop runs once per updating round, where Python's cost is the cost
        run, update, work = ck.run, self._update, self._nzwork
        kc, kp, kd, idle = self._kcode, self._kp, self._kdeg, self._idle_scale
        rows = X.shape[0]
        i = 0
        while i < rows:
            # an update may replace the store or grow its arrays; compiled: a dense store
            sv = cast(SVStore, self.sv)
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
        assert self.dim is not None  # for mypy: set_state fixes it first
        cap = self.memory_bound() or 16
        self.sv = store_from_state(state, "sv.", self.dim, capacity=cap + 1)
        self._compiled_setup()
