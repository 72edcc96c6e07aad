"""Name → learner class registry behind :func:`kernelstream.learners.make`, and the up-front
memory/width check :func:`check_width` that pipelines call before reading any data.

The registry is the one seam to the learner modules: importing it (or the package) loads none of
them; the first function that looks a learner up (:func:`get`, :func:`available`, :func:`make`,
...) imports every module of the package whose name does not start with ``_``, so each
``@register`` has run. Commands that name no learner (``check``, the CLI's parser) never pay for
them (``tests/engine/replay/test_engine.py``)."""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from kernelstream._suggest import did_you_mean
from kernelstream.errors import WidthError
from kernelstream.learners.kernels import parse_sigmas
from kernelstream.learners.params import check_not_auto
from kernelstream.learners.state import state_name

if TYPE_CHECKING:  # the learners import this module; it needs only their class attributes
    from kernelstream.learners.base import Learner, Seed

_REGISTRY: dict[str, type[Learner]] = {}
_loaded = False
# Beam may build learners on several threads of a fresh worker: one loads, the others wait
_load_lock = threading.RLock()

L = TypeVar("L", bound="type[Learner]")


def register(cls: L) -> L:
    """Class decorator: make a learner available under ``cls.name``."""
    name = cls.name
    if name != name.lower() or " " in name or "_" in name:
        raise ValueError(f"learner names are lower-case with hyphens, got {name!r} "
                         f"(class {cls.__qualname__} in module {cls.__module__})")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        first = _REGISTRY[name]
        raise ValueError(f"learner {name!r} is registered twice: by {first.__qualname__} in "
                         f"module {first.__module__} and by {cls.__qualname__} in module "
                         f"{cls.__module__} (each learner needs its own name)")
    _REGISTRY[name] = cls
    return cls


def _load_all() -> None:
    """Import every learner module once (their ``@register`` fills the registry). A module
    already imported (unpickling a learner imports its class's module) is simply kept."""
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if _loaded:
            return
        for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
            if not mod.name.startswith("_") and mod.name != "testing":
                importlib.import_module(f"{__package__}.{mod.name}")
        _loaded = True


def available() -> list[str]:
    """Names of every registered learner, sorted."""
    _load_all()
    return sorted(_REGISTRY)


def get(name: str) -> type[Learner]:
    _load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown learner {name!r}{did_you_mean(name, available()) or ';'} available learners: "
            f"{', '.join(available())}"
        ) from None


def make(name: str, seed: Seed = 0, **params: Any) -> Learner:
    """Build a learner by name, e.g. ``make("bogd", seed=1, budget=200, eta=0.1)``. Gaussian
    widths are numbers here: ``"auto"`` (the data's width) is a ``ValueError`` saying how to
    get it (``learners.params.check_not_auto``)."""
    cls = get(name)
    if "sigma" in params:  # (gamma and sigmas: Param.coerce checks them)
        check_not_auto(name, "sigma", params["sigma"])
    return cls(seed=seed, **params)


def from_state(state: dict[str, np.ndarray]) -> Learner:
    """The learner a :meth:`~kernelstream.learners.base.Learner.get_state` dict holds, of the
    class its stored name is registered under, continuing bit-identically.

    >>> from kernelstream import learners
    >>> m = learners.make("bogd", seed=3, budget=20)
    >>> m.learn_one([0.5, -1.0], 1.0)
    >>> copy = learners.from_state(m.get_state())
    >>> copy.predict_one([0.2, 0.1]) == m.predict_one([0.2, 0.1])
    True
    """
    return get(state_name(state)).from_state(state)


# -- width and memory ----------------------------------------------------------------------------
_SLOT_BYTES = 64  # per stored row besides its features (norm, coefficient, ids, pool offsets)
_DEFAULT_NNZ = 1024  # non-zeros per row assumed for a sparse estimate when none is known
_MIN_ROWS = 64  # initial capacity (per kernel) of the stores of unbounded learners


def bounded(name: str | type[Learner]) -> bool:
    """Whether the learner's stored rows are bounded with its default parameters
    (:meth:`~kernelstream.learners.base.Learner.memory_bound`): a *budgeted* learner."""
    return _cls(name)().memory_bound() is not None


def stores_rows(name: str) -> bool:
    """Whether the learner keeps examples (support vectors) at all: not the random-feature
    learners (``memory_bound() == 0``), whose #SV is always 0 and is shown as "-". An unknown
    name: True (its count is shown as it is)."""
    try:
        return _cls(name)().memory_bound() != 0
    except ValueError:
        return True


def sparse_learners() -> list[str]:
    """Names of the learners that run on sparse rows natively (memory O(non-zeros))."""
    return [n for n in available() if _REGISTRY[n].accepts_sparse]


def memory_limit() -> int:
    """Bytes a learner may plan for: the machine's physical memory (8 GiB if unknown), or
    ``$KERNELSTREAM_MEMORY_LIMIT`` (bytes) when set."""
    env = os.environ.get("KERNELSTREAM_MEMORY_LIMIT")
    if env:
        return int(float(env))
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 8 << 30


def _n_kernels(params: dict[str, Any]) -> int:
    return len(parse_sigmas(params["sigmas"])) if "sigmas" in params else 1


def _cls(name: str | type[Learner]) -> type[Learner]:
    return name if isinstance(name, type) else get(name)


def memory_estimate(name: str | type[Learner], params: dict[str, Any], n_features: int,
                    sparse: bool = False, nnz_per_row: int | None = None,
                    n_rows: int | None = None) -> tuple[int, str]:
    """``(bytes, what)``: the memory the learner's model plans for at this width (its peak,
    transient copies included), and the part that dominates it (for messages). Stored rows
    cost ``8 d`` bytes dense, ``16 nnz`` sparse (only for learners that take sparse rows
    natively; others densify), as many as
    :meth:`~kernelstream.learners.base.Learner.stored_rows` says for a stream of ``n_rows``
    rows (None: a long one); random-feature learners add their ``D × d`` projection (one,
    shared by every width), and a learner's
    :meth:`~kernelstream.learners.base.Learner.model_bytes` the rest (e.g. RFF-RLS's matrix
    ``P``, Proj-KA's selection window). Unbounded learners count their stores' initial
    capacity only (``initial_rows`` per kernel: their growth with the stream is not bounded
    by a parameter)."""
    need, what, _ = _estimate(name, params, n_features, sparse, nnz_per_row, n_rows)
    return need, what


def _estimate(name: str | type[Learner], params: dict[str, Any], n_features: int,
              sparse: bool, nnz_per_row: int | None,
              n_rows: int | None) -> tuple[int, str, str]:
    """:func:`memory_estimate` and the part that dominates it: ``rows`` (stored or buffered
    rows), ``projection`` (random features' ``D × d``) or ``model`` (``model_bytes``)."""
    cls = _cls(name)
    p = cls.resolve_params(params)
    d = int(n_features)
    native = bool(sparse and cls.accepts_sparse)
    nnz = min(d, nnz_per_row if nnz_per_row is not None else _DEFAULT_NNZ)
    row = (16 * nnz if native else 8 * d) + _SLOT_BYTES
    k = _n_kernels(p)
    # an instance, not a class-level formula: stored_rows reads what the constructor derives
    # from the params (SkeGD's schedule, EA2OKS's parsed widths, ...), the learner's own
    # layout knowledge, kept in one place; it allocates nothing until a row fixes d (every
    # learner: at most ~0.15 ms and ~9 KiB)
    bound = cls(**params).stored_rows(n_rows)
    # a bound preallocates its store (one spare slot); unbounded stores start small
    rows = bound + 1 if bound else 0 if bound == 0 else getattr(cls, "initial_rows", _MIN_ROWS) * k
    stored = rows * row
    D = int(p.get("n_components") or 0)
    # one D x d draw; per width a weight vector and a round's feature maps (2D each)
    proj = 8 * d * D + 8 * 2 * D * 4 * k
    extra, extra_what = cls.model_bytes(p, d) or (0, "")
    total = stored + proj + extra
    if extra > max(stored, proj):
        return total, extra_what, "model"
    if proj > stored:
        return total, (f"a {p['n_components']:,} x {d:,} random-feature projection"
                       + (f" shared by {k} kernels" if k > 1 else "")), "projection"
    if p.get("selection_window"):  # a buffer of rows before the budgeted part starts
        return (total, f"selection_window={p['selection_window']:,} buffered rows of {d:,} "
                f"features", "rows")
    what = (f"budget={p['budget']:,} stored rows" if p.get("budget")
            else "its stored rows") + (f" of {d:,} features" if not native else
                                       f" of ~{nnz:,} non-zeros")
    return total, what, "rows"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # unreachable


_HASH_HINT_BITS = 18  # the --hash-features width a refusal suggests


def check_width(name: str | type[Learner], params: dict[str, Any], n_features: int,
                sparse: bool = False, nnz_per_row: int | None = None,
                limit_bytes: int | None = None, n_rows: int | None = None) -> None:
    """Raise :class:`WidthError` (one line: why, and what to use instead) unless learner
    ``name`` with ``params`` fits in memory on rows of ``n_features`` columns (``sparse``:
    given as sparse rows with about ``nnz_per_row`` non-zeros; ``n_rows``: the stream's length
    when known, see :func:`memory_estimate`). Pipelines call it before
    reading data; learners call it when their first example fixes the width."""
    limit = memory_limit() if limit_bytes is None else int(limit_bytes)
    need, what, part = _estimate(name, params, n_features, sparse, nnz_per_row, n_rows)
    if need <= limit:
        return
    cls = _cls(name)
    head = (f"{cls.name}: {what} would take {fmt_bytes(need)}, more than the "
            f"{fmt_bytes(limit)} available")
    # the fix depends on what dominates: hashing narrows the rows, not n_components
    if part == "model":
        raise WidthError(f"{head}; lower "
                         + ("n_components" if "n_components" in cls.resolve_params(params)
                            else "the parameters that size it"))
    if part == "projection":
        fixes = ["lower n_components"]
        if n_features > 1 << _HASH_HINT_BITS:
            fixes.append(f"hash the features to fewer columns (--hash-features "
                         f"2^{_HASH_HINT_BITS})")
            if not cls.accepts_sparse:
                alt = ", ".join(sparse_learners())
                fixes.append(f"use a learner that takes sparse rows: {alt}")
        raise WidthError(f"{head}; {', '.join(fixes[:-1])}{', or ' if len(fixes) > 1 else ''}"
                         f"{fixes[-1]}")
    budget = "lower the budget" if "budget" in params or "budget" in what else ""
    if cls.accepts_sparse and (sparse or n_features <= 4096):
        raise WidthError(f"{head}; {budget or 'use fewer features'}")
    if cls.accepts_sparse and n_features > 4096:
        raise WidthError(f"{head}; {budget + ', or ' if budget else ''}give the rows as sparse "
                         f"CSR (memory then grows with the non-zeros, not the width)")
    alt = ", ".join(sparse_learners())
    raise WidthError(f"{head} (this learner keeps dense {n_features:,}-wide rows); "
                     f"{budget + ', ' if budget else ''}hash the features to fewer columns "
                     f"(--hash-features 2^{_HASH_HINT_BITS}) or use a learner that takes sparse "
                     f"rows: {alt}")
