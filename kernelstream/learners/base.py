"""The learner interface shared by every online kernel learner.

A learner is a small state machine over a stream of ``(x, y)`` rounds:

* ``predict_one(x) -> score`` uses only the past (it never sees ``y``) and does not change the
  learning trajectory: whatever it computes (kernel row, random draws of the round) is cached
  for the following ``learn_one`` of the same ``x``.
* ``learn_one(x, y)`` performs the round-``t`` update.
* ``predict_learn_many(X, y) -> scores`` runs test-then-train over a block and returns the
  pre-update scores; it runs the very same per-round code, so it is bit-identical to the loop.
* ``get_state()`` / ``set_state()`` move the whole learner (parameters, RNG, stores) as a flat
  ``dict`` of numpy arrays; :func:`state_to_bytes` packs it without pickle.

Subclasses declare ``params`` (a tuple of :class:`Param`) and implement ``_setup``,
``_score``, ``_update``, ``_get_state`` and ``_set_state``.

**Sparse rows.** Every method that takes an example accepts either a dense row (a 1-D float
sequence; a 2-D array for a block) or a sparse one: a 1-row :class:`~kernelstream.sparse.CSR`
for one example and a :class:`~kernelstream.sparse.CSR` for a block (``(indices, values)``
tuples are *not* accepted: they would be ambiguous with a 2-feature dense row). The first
example decides the learner's *mode*:

* learners with ``accepts_sparse = True`` (those that touch ``x`` only through the support
  vector store and the kernel) run in sparse mode when the first example is sparse: the store
  keeps sparse SVs with cached squared norms and kernel rows come from sparse–sparse products
  (dense rows given later are used as they are: sparse–dense products). Memory grows with
  the non-zeros, never with the width;
* every other learner (and a sparse-capable one whose first example was dense) converts a
  sparse row to a dense one of width ``n_features`` before using it, which is only allowed
  when :func:`kernelstream.learners.registry.check_width` finds that its d-wide memory fits
  (checked when the first example fixes the width; :class:`WidthError` otherwise).

Sparse and dense input give the same results up to round-off (sums run in another order); for
one input type the batch path stays bit-identical to the per-example path.

The parameter declarations (:class:`Param`, :data:`KERNEL_PARAMS`, :data:`TIE_PARAM`) live in
:mod:`kernelstream.learners.params` and the state's format helpers (seed and RNG as arrays,
:func:`state_to_bytes`) in :mod:`kernelstream.learners.state`; both are re-exported here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from kernelstream._suggest import did_you_mean

# the input checks and bounds (inputs.py): KERNEL_MAX and Y_MAX re-exported
from kernelstream.learners.inputs import KERNEL_MAX, Y_MAX, RowChecks

# Param and the shared parameters (params.py), the seed/RNG/bytes helpers of the state
# (state.py): re-exported, every learner and caller imports them from here
from kernelstream.learners.params import (
    KERNEL_PARAMS,
    SIGMA_RULE,
    TIE_PARAM,
    Param,
    nonneg,
    positive,
    sigma_gamma,
    unit_open,
)
from kernelstream.learners.registry import check_width, get
from kernelstream.learners.state import (
    STATE_VERSION,
    Layout,
    Seed,
    _rng_from_array,
    _rng_to_array,
    _seed_json,
    _seed_seq,
    check_header,
    check_layout,
    check_seed,
    state_from_bytes,
    state_name,
    state_nbytes,
    state_to_bytes,
)
from kernelstream.sparse import CSR, SparseRow

_LAYOUTS: dict[tuple[Any, ...], Layout] = {}  # Learner._layout's

__all__ = [
    "KERNEL_MAX",
    "KERNEL_PARAMS",
    "STATE_VERSION",
    "TIE_PARAM",
    "Y_MAX",
    "Learner",
    "Param",
    "Seed",
    "nonneg",
    "positive",
    "state_from_bytes",
    "state_nbytes",
    "state_to_bytes",
    "unit_open",
]


class Learner(RowChecks):
    """Base class of all online learners."""

    name: ClassVar[str] = "learner"
    params: ClassVar[tuple[Param, ...]] = ()
    # not ClassVars: some learners decide them per instance (the loss, a variant)
    task: str = "classification"
    randomized: bool = False  # consumes its RNG (different seeds give different runs)
    # randomness that forms the prediction, drawn in predict_one
    draws_in_predict: ClassVar[bool] = False
    # attributes a draw in _score sets besides the generator (e.g. the kernel drawn): kept
    # with predict_one's cached round, not in the learner, until learn_one of the same x
    _draw_attrs: ClassVar[tuple[str, ...]] = ()
    accepts_sparse: ClassVar[bool] = False  # runs on sparse rows natively (module docstring)
    reference: ClassVar[str] = ""
    # largest polynomial degree among kernels that are not the ``kernel``/``degree`` parameters
    # (the multi-kernel pool's), for the input bound (``inputs.RowChecks``)
    max_poly_degree: ClassVar[int] = 1
    # state entries whose _set_state also reads an older shape (theirs to check)
    legacy_state_keys: ClassVar[frozenset[str]] = frozenset()
    # predicts with a weighted combination of its kernels, not one of them: its
    # kernel_distribution is weights, its selected_kernel (if any) the largest one (the report)
    combines_kernels: ClassVar[bool] = False

    def __init__(self, seed: Seed = 0, **params: Any) -> None:
        self.seed = seed
        self.hparams = self.resolve_params(params)
        for k, v in self.hparams.items():
            setattr(self, k, v)
        self._configure()
        self.rng = np.random.Generator(np.random.PCG64(_seed_seq(check_seed(seed, self.name))))
        self._max_xx = self._input_bound()
        self.dim: int | None = None
        self.sparse = False  # sparse mode (sparse SVs), fixed by the first example
        self.t = 0  # rounds learned so far
        self._pending: tuple[bytes, float, Any] | None = None  # (x bytes, score, aux)

    # -- parameters ----------------------------------------------------------------------------
    @classmethod
    def resolve_params(cls, given: dict[str, Any]) -> dict[str, Any]:
        given = dict(given)
        names = {p.name for p in cls.params}
        if "sigma" in given and "gamma" in names:
            if "gamma" in given:
                raise ValueError(f"{cls.name}: give either gamma or sigma, not both")
            raw = given.pop("sigma")
            try:
                sigma = float(raw)
            except (TypeError, ValueError):
                sigma = math.nan
            given["gamma"] = sigma_gamma(sigma)
            if math.isnan(given["gamma"]):  # the value as given, not a gamma it never named
                raise ValueError(f"{cls.name}: parameter 'sigma' must be {SIGMA_RULE}, "
                                 f"got {raw!r}")
        unknown = sorted(set(given) - names)
        if unknown:
            valid = ", ".join(p.name for p in cls.params) or "(none)"
            raise ValueError(
                f"{cls.name}: unknown parameter(s) {', '.join(unknown)}; valid parameters: {valid}"
                + (" (sigma is accepted for gamma)" if "gamma" in names else "")
                + "".join(did_you_mean(u, names) for u in unknown)
            )
        out = {p.name: p.coerce(given.get(p.name, p.default), cls.name) for p in cls.params}
        cls.check_params(out)
        return out

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        """Cross-parameter checks (override)."""

    def _init_dim(self, d: int, sparse: bool = False, nnz: int | None = None) -> None:
        check_width(type(self), self.hparams, d, sparse=sparse, nnz_per_row=nnz)
        self.dim = d
        self.sparse = bool(sparse and self.accepts_sparse)
        self._setup(d)

    # -- public API ----------------------------------------------------------------------------
    # Each call first tries the fast lane (_fast_sqnorm): a row that is already what
    # _check_x would make of it skips the conversion and the shape checks; anything else, bad
    # input included, takes _check_x, which converts it or says what is wrong.
    def predict_one(self, x: Any) -> float:
        """Score of ``x`` under the current hypothesis (never sees the label)."""
        xx = self._fast_sqnorm(x)
        if xx - xx != 0.0:  # not the fast lane, or not finite (NaN/inf): _check_x says which
            x, xx = self._check_x(x)
        # by value: equal lists/copies hit, a buffer refilled in place misses
        key = x.key() if type(x) is SparseRow else x.tobytes()
        p = self._pending
        if p is not None and p[0] == key:
            return p[1]
        if self.draws_in_predict:
            # The round's draw is a function of the state at the round's start. predict_one
            # makes it in place and keeps that state (the generator and _draw_attrs) with the
            # cached round; whatever does not learn that round from the cache (a prediction of
            # another row, step, a block, get_state) puts it back first (_drop_pending). So
            # predicting other rows (a monitor, a probe) leaves the trajectory alone, and a
            # state saved after predict_one continues bit for bit: its learn_one draws the same.
            if p is not None:
                self._drop_pending()
            before = self.rng.bit_generator.state, [getattr(self, a) for a in self._draw_attrs]
            score, aux = self._score(x, xx)
            self._pending = (key, score, (aux, before))
            return score
        score, aux = self._score(x, xx)
        self._pending = (key, score, aux)
        return score

    def _undraw(self, before: tuple[Any, list[Any]]) -> None:
        """Put back the generator and ``_draw_attrs`` a cached round's draw moved on."""
        self.rng.bit_generator.state = before[0]
        for a, v in zip(self._draw_attrs, before[1], strict=True):
            setattr(self, a, v)

    def _drop_pending(self) -> None:
        """Forget ``predict_one``'s cached round, undoing its draw (``draws_in_predict``): what
        runs next scores afresh from the state at the round's start."""
        p = self._pending
        if p is not None:
            self._pending = None
            if self.draws_in_predict:
                self._undraw(p[2][1])

    def learn_one(self, x: Any, y: Any) -> None:
        """Round-``t`` update with the true label."""
        yf = self._check_y(y)  # labels first: a rejected call must not fix the dimension
        xx = self._fast_sqnorm(x)
        if xx - xx != 0.0:
            x, xx = self._check_x(x)
        p = self._pending
        if p is not None and p[0] == (x.key() if type(x) is SparseRow else x.tobytes()):
            self._pending = None
            # a draw was made in place: the learner has already moved on as it moved it
            self._update(x, xx, yf, p[1], p[2][0] if self.draws_in_predict else p[2])
            self.t += 1
        else:
            if p is not None:
                self._drop_pending()
            self._step_checked(x, xx, yf)

    def step(self, x: Any, y: Any) -> float:
        """Predict then learn; returns the pre-update score."""
        yf = self._check_y(y)
        xx = self._fast_sqnorm(x)
        if xx - xx != 0.0:
            x, xx = self._check_x(x)
        if self._pending is not None:
            self._drop_pending()
        return self._step_checked(x, xx, yf)

    def _step_checked(self, x: Any, xx: float, y: float) -> float:
        """One round (score, update, count) on a checked row and label; returns the score.
        :meth:`step` and a :meth:`learn_one` without a cached score run it; a learner may do
        it in fewer calls, with the numbers of :meth:`_score` then :meth:`_update`."""
        score, aux = self._score(x, xx)
        self._update(x, xx, y, score, aux)
        self.t += 1
        return score

    def memory_bound(self) -> int | None:
        """The most rows (support vectors) this learner stores on any stream with its
        parameters, or None when that number grows with the stream. The default reads the
        ``budget`` parameter (0 or absent: unbounded); a learner whose bound is something
        else says so here (a budget per kernel; 0 for random features, which store no rows).
        The conformance suite checks it (``bounded_memory``) and ``kernelstream learners``
        lists a learner as budgeted when its default parameters give a bound."""
        budget = self.hparams.get("budget")
        return int(budget) if budget else None

    # -- composition: a learner made of learners drives its parts through these two ------------
    def score_checked(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        """``(score, aux)`` of a row the composing learner has already checked (``xx``: its
        squared norm, computed as this learner computes it): the pre-update score and what
        :meth:`learn_checked` reuses (e.g. the kernel row)."""
        return self._score(x, xx)

    def learn_checked(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        """One round on a checked row and label whose :meth:`score_checked` gave ``score, aux``:
        the update and the round count, as :meth:`step` does them."""
        self._update(x, xx, y, score, aux)
        self.t += 1

    def predict_learn_many(self, X: Any, y: Any, n_sv: np.ndarray | None = None) -> np.ndarray:
        """Test-then-train over a block; returns the pre-update scores. Same per-round code as
        :meth:`step`, so the results are bit-identical to the per-example loop. The block is
        validated up front, so a bad row raises before any state changes. ``n_sv`` (an int
        array of one entry per row) receives :attr:`n_support_vectors` after each row, for
        callers that report it per row. ``X`` may be a :class:`~kernelstream.sparse.CSR`
        block (the module docstring says how sparse rows are used)."""
        if isinstance(X, CSR):
            return self._predict_learn_many_sparse(X, y, n_sv)
        X = np.ascontiguousarray(self._as_float(X, True))
        if X.ndim != 2:
            raise ValueError(f"{self.name}: X must be a 2-D array, got shape {X.shape}")
        n = X.shape[0]
        yv = self._block_labels(y, n)
        self._check_n_sv(n_sv, n)
        out = np.empty(n)
        if n == 0:
            return out
        if self.dim is not None and X.shape[1] != self.dim:
            raise ValueError(f"{self.name}: expected {self.dim} features, got {X.shape[1]}")
        if X.shape[1] == 0:
            raise ValueError(f"{self.name}: x must have at least one feature")
        # squared row norms are non-finite iff a row holds NaN/inf or overflows, so a bad row is
        # rejected before any state changes
        zz = self._row_sqnorms(X)
        bad = ~(zz <= self._max_xx)  # NaN/inf, or beyond the input bound
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self._check_xx(float(zz[i]), f"row {i} of the block")
        for yi in np.unique(yv):
            self._check_y(yi)
        if self.dim is None:
            self._init_dim(X.shape[1])
        if self._pending is not None:
            self._drop_pending()
        self._learn_rows(X, zz, yv, out, n_sv)
        return out

    @classmethod
    def model_bytes(cls, params: dict[str, Any], n_features: int = 0) -> tuple[int, str] | None:
        """``(bytes, what)`` of a model part that neither stored rows nor a random-feature
        projection accounts for (e.g. a second-order matrix, a buffer of ``n_features``-wide
        rows), for :func:`~kernelstream.learners.registry.memory_estimate`; ``None`` when
        there is none. ``params`` are resolved."""
        return None

    def stored_rows(self, n_rounds: int | None = None) -> int | None:
        """The most ``d``-wide rows this learner holds after ``n_rounds`` rounds (None: any
        number), what :func:`~kernelstream.learners.registry.memory_estimate` counts:
        :meth:`memory_bound`, unless the learner keeps rows its hypothesis does not count
        (SkeGD's sketch rows) or none at all."""
        return self.memory_bound()

    @classmethod
    def compiled_rounds(cls) -> bool:
        """Whether this learner's dense rounds run on the compiled kernels (when built; see
        :mod:`kernelstream.learners.compiled`)."""
        return False

    @classmethod
    def compiled_updates(cls) -> bool:
        """Whether those compiled rounds make the updates too, with the default parameters
        (False where the block driver calls back the learner's Python ``_update``)."""
        return cls.compiled_rounds()

    def _learn_rows(self, X: np.ndarray, zz: np.ndarray, yv: np.ndarray, out: np.ndarray,
                    n_sv: np.ndarray | None) -> None:
        """Test-then-train over validated dense rows (``zz``: their squared norms): the
        per-example code, row by row. Learners with compiled rounds override it."""
        self._rounds(((X[i], float(zz[i])) for i in range(X.shape[0])), yv, out, n_sv)

    def _rounds(self, rows: Iterator[tuple[Any, float]], yv: np.ndarray, out: np.ndarray,
                n_sv: np.ndarray | None) -> None:
        """The per-example round (score, update, count) over checked ``(x, ‖x‖²)`` rows: the
        dense and sparse block paths share it, so both stay bit-identical to :meth:`step`."""
        score_fn, update_fn = self._score, self._update
        for i, (x, xx) in enumerate(rows):
            s, aux = score_fn(x, xx)
            out[i] = s
            update_fn(x, xx, float(yv[i]), s, aux)
            self.t += 1
            if n_sv is not None:
                n_sv[i] = self.n_support_vectors

    def _block_labels(self, y: Any, n: int) -> np.ndarray:
        try:
            ya = np.asarray(y)
            if ya.dtype.kind not in "iuf":  # strings, bools, complex: not labels
                raise TypeError(ya.dtype)
            yv = np.asarray(ya, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name}: labels must be real numbers, got {y!r}") from None
        if yv.shape[0] != n:
            raise ValueError(f"{self.name}: X has {n} rows but y has {yv.shape[0]} labels")
        return yv

    def _check_n_sv(self, n_sv: np.ndarray | None, n: int) -> None:
        """``n_sv`` is checked before any round: a wrong one would fail after rows were learnt."""
        if n_sv is not None and (not isinstance(n_sv, np.ndarray) or n_sv.shape != (n,)
                                 or n_sv.dtype.kind not in "iu"):
            raise ValueError(f"{self.name}: n_sv must be an int array of {n} entries (one per "
                             f"row), got {getattr(n_sv, 'shape', n_sv)!r}")

    def _predict_learn_many_sparse(self, X: CSR, y: Any,
                                   n_sv: np.ndarray | None) -> np.ndarray:
        """:meth:`predict_learn_many` over a CSR block: the per-example code of a 1-row CSR,
        row by row (bit-identical to the loop)."""
        n = X.n_rows
        yv = self._block_labels(y, n)
        self._check_n_sv(n_sv, n)
        out = np.empty(n)
        if n == 0:
            return out
        nf = int(X.n_features)
        self._width(nf)
        try:  # int64/float64 C arrays, as the kernels read them (float64 data: no copy)
            X = X.canonical()
        except ValueError as e:
            raise ValueError(f"{self.name}: bad sparse block: {e}") from None
        if X.indptr.ndim != 1 or len(X.indptr) != n + 1 or X.indptr[0] != 0:
            raise ValueError(f"{self.name}: bad sparse block: indptr must start at 0")
        # validated in chunks of rows: the checks' temporaries stay small next to the block
        step = max(1, (1 << 16) * n // max(X.nnz, 1))
        for a in range(0, n, step):
            part = X.rows(a, a + step)
            try:
                part.check()
            except ValueError as e:
                raise ValueError(f"{self.name}: bad sparse block (rows {a}-"
                                 f"{a + part.n_rows - 1}): {e}") from None
            sq = part.row_sq_norms()  # non-finite iff a row overflows (values are finite)
            if not np.all(sq <= self._max_xx):
                i = int(np.flatnonzero(~(sq <= self._max_xx))[0])
                self._check_xx(float(sq[i]), f"row {a + i} of the block")
        for yi in np.unique(yv):
            self._check_y(yi)
        if self.dim is None:
            self._init_dim(nf, sparse=True, nnz=max(1, X.nnz // n))
        if self._pending is not None:
            self._drop_pending()
        self._learn_sparse_rows(X, yv, out, n_sv)
        return out

    def _learn_sparse_rows(self, X: CSR, yv: np.ndarray, out: np.ndarray,
                           n_sv: np.ndarray | None) -> None:
        """Test-then-train over a checked CSR block: the per-example code, row by row (the
        primal linear learners override it with a compiled block)."""
        self._rounds(self._sparse_rows(X), yv, out, n_sv)

    def _sparse_rows(self, X: CSR) -> Iterator[tuple[Any, float]]:
        """The rows of a checked CSR block as :meth:`_sparse_input` gives them, one at a time
        (a row is converted when its round comes)."""
        ptr, ind, dat = X.indptr, X.indices, X.data
        nf = int(X.n_features)
        for i in range(X.n_rows):
            a, b = int(ptr[i]), int(ptr[i + 1])
            vals = dat[a:b]
            yield self._sparse_input(ind[a:b], vals, nf, float(vals @ vals))

    def predict_label(self, score: float) -> float:
        """±1 label of a score; ``tie`` decides a zero score (``positive``: a zero score predicts
        +1)."""
        if score > 0.0:
            return 1.0
        if score < 0.0:
            return -1.0
        return -1.0 if getattr(self, "tie", "positive") == "negative" else 1.0

    @property
    def n_support_vectors(self) -> int:
        return 0

    @property
    def selected_kernel(self) -> int | None:
        """Index of the kernel used for the last prediction (kernel-selection learners)."""
        return None

    @property
    def kernel_distribution(self) -> np.ndarray | None:
        """Current selection probabilities over the candidate kernels (selection learners)."""
        return None

    @property
    def kernel_gamma(self) -> float | None:
        """Gaussian γ a learner that chooses or learns its width predicts with now (OKS-SIL,
        OKL-GD, Proj-KA); None for a fixed width or before a width exists."""
        return None

    @property
    def diagnostics(self) -> dict[str, Any] | None:
        """Numbers of the learner's state that a report reads after a run (JSON values: the
        replay writes them in each stream's final metrics row); None: nothing to report."""
        g = self.kernel_gamma
        return None if g is None else {"kernel_gamma": g}

    # -- subclass hooks ------------------------------------------------------------------------
    def _configure(self) -> None:
        """Derive per-instance settings from ``self.hparams`` (runs on init and on set_state)."""

    def _setup(self, d: int) -> None:
        """Allocate per-dimension state once the first example fixes ``d``."""

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        raise NotImplementedError

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        raise NotImplementedError

    def _get_state(self) -> dict[str, np.ndarray]:
        return {}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        pass

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict[str, np.ndarray]:
        """All of the learner as numpy arrays (versioned; no pickled objects)."""
        if self._pending is not None:
            self._drop_pending()  # the state at the round's start, before a pending draw
        st: dict[str, np.ndarray] = {
            "__learner__": np.array(self.name),
            "__version__": np.array(STATE_VERSION, dtype=np.int64),
            "__params__": np.array(json.dumps(self.hparams, sort_keys=True)),
            "__seed__": np.array(json.dumps(_seed_json(self.seed))),
            "__rng__": _rng_to_array(self.rng),
            "__dim__": np.array(-1 if self.dim is None else self.dim, dtype=np.int64),
            "__t__": np.array(self.t, dtype=np.int64),
        }
        if self.dim is not None:
            if self.sparse:  # only in sparse mode: dense states keep their exact old layout
                st["__sparse__"] = np.array(True)
            st.update(self._get_state())
        return st

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Become the learner ``state`` holds. All or nothing: the state is restored onto a
        fresh instance, checked, and only then swapped in, so a rejected state (a ValueError
        naming the learner and the offending entry) leaves this learner as it was. The
        restored learner owns copies of the arrays (the caller may reuse the dict)."""
        # the dict itself, not a copy: compiled state may hold it (the rounds write ``t``)
        self.__dict__ = self._restored(state).__dict__

    def _restored(self, state: dict[str, np.ndarray]) -> Learner:
        who = self.name
        h = check_header(state, who)
        obj = type(self)(seed=h.seed, **h.params)  # resolves and checks the parameters
        obj.t = h.t
        if h.dim >= 0:
            obj._init_dim(h.dim, sparse=h.sparse)
            check_layout(who, obj._layout(), state, self.legacy_state_keys)
            # copies, never the caller's; C order, as the learner's own (a Fortran-ordered
            # matrix would be summed in another order, a round-off off)
            own = {k: np.array(v, copy=True, order="C") for k, v in state.items()}
            try:
                obj._set_state(own)
            except KeyError as e:
                raise ValueError(f"{who}: state misses {e.args[0]!r}") from None
            except (IndexError, TypeError, ValueError, AttributeError, OverflowError,
                    ZeroDivisionError) as e:
                raise ValueError(f"{who}: inconsistent state ({e})") from None
            bound = obj.memory_bound()  # a budget the state's own parameters set (or edited)
            if bound is not None and obj.n_support_vectors > bound:
                raise ValueError(f"{who}: inconsistent state: {obj.n_support_vectors} support "
                                 f"vectors, over the bound {bound} of its parameters")
        try:
            _rng_from_array(obj.rng, h.rng)
        except (TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"{who}: bad state['__rng__'] ({e})") from None
        obj._pending = None
        return obj

    def _layout(self) -> Layout:
        """Dtype and shape of each array of this learner just set up (no round yet): what a
        state of its parameters and width must match (:func:`check_layout`). Kept per class,
        parameters, width and mode, so repeated restores (a stream's state read back) pay
        for one ``_get_state`` only."""
        key = (type(self), json.dumps(self.hparams, sort_keys=True), self.dim, self.sparse)
        lay = _LAYOUTS.get(key)
        if lay is None:
            if len(_LAYOUTS) >= 256:
                _LAYOUTS.clear()
            lay = _LAYOUTS[key] = {k: (v.dtype, v.shape) for k, v in self._get_state().items()}
        return lay

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> Learner:
        """Rebuild a learner from :meth:`get_state`; ``Learner.from_state`` picks the class by
        the stored learner name."""
        name = state_name(state, "" if cls is Learner else cls.name)
        if cls is Learner:
            cls = get(name)
        if name != cls.name:
            raise ValueError(f"state belongs to learner {name!r}, not {cls.name!r}")
        obj = cls()  # default parameters: set_state builds the learner of the state's own
        obj.set_state(state)
        return obj

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in self.hparams.items())
        return f"{type(self).__name__}({ps})"
