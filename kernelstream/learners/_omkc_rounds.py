"""The compiled rounds of bounded OMKC (Lu, Sahoo, Zhao & Hoi, ACM TIST 2018, Algorithms 3
and 4; ``bomkc-dd``, ``bomkc-sd`` in :mod:`kernelstream.learners.omkc`).

:class:`CompiledRounds` is the learners' side of ``_ck_omkc.c``: whole blocks in C
(``compiled.omkc_rounds``) and the per-example path, one compiled call a row (``om.step``,
``om.score``) on the state ``om.fuse`` keeps between rounds, with the Python round wherever C
declines. Either way the numbers are the per-example Python rounds' bit for bit
(``docs/design/compiled-kernels.md``). Its own module because it is plumbing of the compiled
code, not the algorithm: the components, their scores and updates stay in
:mod:`~kernelstream.learners.omkc`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners._multikernel import Combination


class CompiledRounds(Combination):
    """Bounded OMKC's rounds in C where its components allow it (compiled rows and rules, or
    BPA-S's update for a polynomial kernel, on dense rows): a block by
    ``compiled.omkc_rounds`` (the components' compiled rows and rules, the weights and draws),
    bit for bit the rounds of the per-example path; so do :meth:`step`, :meth:`predict_one`
    and :meth:`learn_one`, one compiled call a row (``om.step``, ``om.score``) under the same
    conditions. Subclasses build ``comps`` (the 16 components) and say whether they are
    Algorithm 4 (``stochastic``); a Python ``_update`` sets ``_fused`` to None."""

    stochastic: ClassVar[bool]  # Algorithm 4 (SD) rather than 3 (DD)
    # om.step's kept state (om.fuse): None until a round builds it, and after anything that
    # changes what it holds in Python code (an _update, a block, a set-up or restore); never
    # pickled. _fusable: whether the components allow it (decided once per set-up).
    _fused: Any = None
    _fusable: bool | None = None
    _fused_zd: list[tuple[Any, np.ndarray]]  # (kernel, κ(x, x) of the row) per polynomial BPA-S

    budget: int
    comps: list[KernelLearner]

    def __getstate__(self) -> dict[str, Any]:
        st = dict(self.__dict__)
        st.pop("_fused", None)  # a capsule, which does not pickle (and holds the arrays)
        return st

    def step(self, x: Any, y: Any) -> float:
        """Predict then learn; returns the pre-update score. With the components' rounds
        compiled (as the blocks'), a dense float64 row and a label of ±1 (int or float) make
        one compiled call (``om.step``: the norm, the 16 scores, the vote, the updates and
        weights, ``omkc_rounds``' per-row code) on the state ``om.fuse`` keeps between rounds;
        the vote is :meth:`Combination._vote`'s (numpy's ddot, or numpy itself on the round's
        scores and weights). Anything else, bad input included, takes ``Learner.step`` (whose
        checked round is ``om.step``'s too), and a round ``om.step`` declines (a full store, a
        short power table) ``_score`` then ``_update``, after which the kept state is made
        again."""
        fused = self._fused
        if (fused is not None and (type(y) is float or type(y) is int) and (y == 1 or y == -1)):
            if self._fused_zd:  # a polynomial BPA-S: κ(x, x) of the row first (numpy's)
                xx = self._fast_sqnorm(x)
                if xx - xx != 0.0:  # not the fast lane, or not finite: Learner.step's checks
                    return super().step(x, y)
                self._row_diags(xx)
            vote: Any = compiled.om.step(fused, x, y)
            if vote is not None:
                if self._pending is not None:  # undoes a pending draw
                    self._drop_pending()
                self.t += 1
                if vote is True:  # no vote in C (compiled.om_vote): Combination._vote's
                    return float(self._fused_T.dot(np.sign(self._fused_S)))
                return vote  # a float: the vote
        return super().step(x, y)

    def predict_one(self, x: Any) -> float:
        """Score of ``x``: with the kept state, one compiled call (``om.score``, the test half
        of ``om.step``) and no cached round (``learn_one`` learns by ``om.step``); else, bad
        input included, ``Learner.predict_one``."""
        fused = self._fused
        if fused is not None:
            vote: Any = compiled.om.score(fused, x)
            if vote is not None:
                if self._pending is not None:  # undoes a pending draw
                    self._drop_pending()
                if vote is True:
                    return float(self._fused_T.dot(np.sign(self._fused_S)))
                return vote  # a float: the vote
        return super().predict_one(x)

    def learn_one(self, x: Any, y: Any) -> None:
        """Round-``t`` update with the true label; with the kept state, an ``om.step`` round
        (which scores the row again, to the numbers ``predict_one`` gave) rather than
        ``_update`` in Python from ``predict_one``'s cached round."""
        if self._fused is not None:
            if self._pending is not None:  # undoes a pending draw
                self._drop_pending()
        super().learn_one(x, y)

    def _step_checked(self, x: Any, xx: float, y: float) -> float:
        # a checked round (step's other inputs, learn_one without predict_one's score) by
        # om.step too; a round it declines runs _score then _update, and the kept state is
        # made again
        fused = self._fused
        if fused is not None:
            if self._fused_zd:
                self._row_diags(xx)
            vote: Any = compiled.om.step(fused, x, y)
            if vote is not None:
                self.t += 1
                if vote is True:
                    return float(self._fused_T.dot(np.sign(self._fused_S)))
                return vote  # a float: the vote
        score = super()._step_checked(x, xx, y)
        if self._fused is None and self._fusable is not False:
            self._fuse()
        return score

    def _row_diags(self, xx: float) -> None:
        """``κ(x, x)`` of the row for ``om.step``'s polynomial BPA-S components, by numpy's
        power as the blocks' ``kern.diag`` (the stored points' are updated from these)."""
        zz = np.array([xx])
        for kern, zd in self._fused_zd:
            zd[:] = kern.diag(zz)

    def _fuse(self) -> None:
        """Make ``om.step``'s kept state from the learner as it is now (``_fused``), when the
        components allow it: compiled rows and a compiled rule each, or BPA-S's update for a
        polynomial kernel (``omkc_rounds``' conditions), on dense rows."""
        if self._fusable is None:
            compiled.om_vote()  # binds numpy's ddot, or leaves the vote to step
            # om.step sets the components' t and budget in their instance dicts: plain
            # attributes, no class attribute (a property) of that name
            self._fusable = (compiled.om is not None and self.dim is not None
                             and not self.sparse
                             and all(c._compiled and (c._compiled_rule() or c.name == "bpa-s")
                                     and not any(k in vars(cls) for cls in type(c).__mro__
                                                 for k in ("t", "budget"))
                                     for c in self.comps))
        if not self._fusable:
            return
        comps = self.comps
        cnt = self._counts
        powtab = self._powers()
        while int(cnt.max() - cnt.min()) + 1 >= len(powtab) and powtab[-1] != 0.0:
            powtab = self._powers(grow=True)  # om.step declined for it
        heads, rules = zip(*(compiled._omkc_head(c) for c in comps), strict=True)  # grows
        # a polynomial BPA-S's κ_jj of its points (om.step keeps them) and of the row (step)
        diags = tuple(None if r is not None else (c.kern.diag(c.sv.sqn), np.empty(1))
                      for c, r in zip(comps, rules, strict=True))
        self._fused_zd = [(c.kern, g[1]) for c, g in zip(comps, diags, strict=True)
                          if g is not None]
        self._fused_S, self._fused_T = np.empty(len(comps)), np.empty(len(comps))
        self._fused = compiled.om.fuse(
            self.stochastic, heads, np.array([hasattr(c, "_head") for c in comps], dtype=np.int64),
            np.array([c.t for c in comps], dtype=np.int64),
            np.array([c.budget for c in comps], dtype=np.int64), self._counts, self._theta,
            powtab, getattr(self, "delta", 0.0), self.budget, self.rng.bit_generator,
            self._fused_S, self._fused_T, tuple(vars(c) for c in comps),
            tuple(c.sv for c in comps), diags)

    def _learn_rows(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        self._fused = None  # the block changes the state in its own calls
        # whole blocks in C (compiled.omkc_rounds): compiled scores, and compiled rules (BPA-S
        # with a polynomial kernel has none in _ck_budget; _ck_omkc has it)
        if compiled.om is not None and all(
                c._compiled and (c._compiled_rule() or c.name == "bpa-s") for c in self.comps):
            compiled.omkc_rounds(self, X, zz, yv, out, n_sv, self.stochastic)
        else:
            super()._learn_rows(X, zz, yv, out, n_sv)

    def _powers(self, grow: bool = False) -> np.ndarray:
        """``γ^k`` for ``k < L`` by ``np.power`` (so the compiled weights are numpy's
        ``_refresh_theta`` numbers), ``L`` doubled on request (derived data, not state) up to
        the first power that underflows to 0: the table ends there (the C code reads every
        later power as that 0), so its length is bounded by γ, not by the stream."""
        tab = getattr(self, "_powtab", None)
        if tab is None or (grow and tab[-1] != 0.0):
            n = 1024 if tab is None else 2 * len(tab)
            tab = np.power(self.discount, np.arange(n, dtype=np.float64))
            nz = np.flatnonzero(tab)
            if len(nz) and nz[-1] + 1 < n:  # zeros from here on: keep the first one
                tab = tab[:nz[-1] + 2].copy()
            self._powtab = tab
        return tab

    def _setup(self, d: int) -> None:
        super()._setup(d)
        self._fused = self._fusable = None

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        super()._set_state(state)
        self._fused = None  # (the set-up dropped it too) the weights and stores are new
