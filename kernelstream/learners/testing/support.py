"""What the conformance checks share: the synthetic streams, the fast parameter settings, and
the assertions that name what differs.

Split from the checks themselves (:mod:`~kernelstream.learners.testing.trajectory`,
:mod:`~kernelstream.learners.testing.interface`) because both kinds use them, and because test
suites outside the conformance run use :func:`make_stream` and :func:`small_params` directly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from kernelstream.learners import registry
from kernelstream.learners.base import Learner

D = 5  # features of the synthetic streams
N = 500  # rounds of the main stream
N_LONG = 3000  # rounds of the memory check
TAIL = 60  # rounds run after a state restore
BUDGET = 20

# Size-like parameters shrunk for speed, by parameter name (applied only if the learner has it).
SMALL: dict[str, Any] = {
    "budget": BUDGET,
    "n_components": 16,
    "n_features": 16,
    "rank": 4,
    "reservoir_size": 8,
}

# Per-learner extra settings, only for what SMALL cannot express. Keep this minimal.
OVERRIDES: dict[str, dict[str, Any]] = {
    # predictions are 0 until the selection window is full: select early so the checks
    # exercise the Projectron phase too
    "proj-ka": {"selection_window": 60},
}

# -- helpers -----------------------------------------------------------------------------------
def small_params(name: str) -> dict[str, Any]:
    """Fast settings for ``name``: :data:`SMALL` for the parameters it has, plus overrides."""
    cls = registry.get(name)
    names = {p.name for p in cls.params}
    out = {k: v for k, v in SMALL.items() if k in names}
    out.update(OVERRIDES.get(name, {}))
    return out


def make_stream(task: str, n: int, d: int = D, noise: float = 0.0,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A learnable non-linear stream; ``noise`` flips labels (classification) or adds Gaussian
    noise (regression)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2 % d] + 0.3 * X[:, -1]
    if task == "regression":
        return X, 0.5 * f + noise * rng.normal(size=n)
    y = np.where(f >= 0.0, 1.0, -1.0)
    flip = rng.random(n) < noise
    y[flip] = -y[flip]
    return X, y


def new(name: str, params: dict[str, Any], seed: Any = 0) -> Learner:
    return registry.make(name, seed=seed, **params)


def stream_for(m: Learner, n: int = N, noise: float = 0.0,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return make_stream(m.task, n, noise=noise, seed=seed)


def run_steps(m: Learner, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.array([m.step(X[i], y[i]) for i in range(len(X))], dtype=np.float64)


def assert_states_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray], what: str) -> None:
    """Bit-for-bit equality of two states (same keys, dtypes, shapes and bytes)."""
    if set(a) != set(b):
        raise AssertionError(f"{what}: state keys differ: {sorted(set(a) ^ set(b))}")
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            raise AssertionError(f"{what}: state entry {k!r} differs")


def assert_scores_equal(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if not np.array_equal(a, b):
        i = int(np.flatnonzero(a != b)[0]) if a.shape == b.shape else -1
        raise AssertionError(
            f"{what}: scores differ (first at index {i}: "
            f"{a[i] if i >= 0 else a.shape} vs {b[i] if i >= 0 else b.shape})"
        )


def expect_error(fn: Callable[[], Any], pattern: str, what: str) -> str:
    """``fn()`` must raise ValueError whose message matches ``pattern`` (case-insensitive)."""
    try:
        fn()
    except ValueError as e:
        msg = str(e)
        if not re.search(pattern, msg, re.IGNORECASE):
            raise AssertionError(f"{what}: unclear error message {msg!r} "
                                 f"(expected to match {pattern!r})") from None
        return msg
    raise AssertionError(f"{what}: no ValueError raised")



# -- diagnoses added to a failure's message ----------------------------------------------------
def global_rng_hint(name: str, params: dict[str, Any]) -> str:
    """A hint when ``name``'s run depends on numpy's global RNG: two learners of one seed agree
    when ``np.random`` is reseeded alike before each and differ when it is reseeded otherwise
    (three runs, made only after a check failed; the global state is put back). Else ``""``."""
    saved = np.random.get_state()
    runs = []
    try:
        for g in (1, 1, 2):
            np.random.seed(g)
            m = new(name, params)
            X, y = stream_for(m)
            runs.append(run_steps(m, X, y))
    except Exception:  # the diagnosis must not hide the check's own failure
        return ""
    finally:
        np.random.set_state(saved)
    if np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[0], runs[2]):
        return ("; the runs follow numpy's global RNG (np.random reseeded alike before two "
                "learners of one seed makes them agree): does it draw from np.random instead "
                "of self.rng?")
    return ""


def update_when_hint(m: Learner) -> str:
    """What to suspect when a learner that declares ``update_when`` (the rounds the compiled
    block driver calls ``_update`` on) disagrees with its own per-row path, else ``""``."""
    when = getattr(type(m), "update_when", "always")
    if when == "always":
        return ""
    return (f"; {m.name} declares update_when={when!r}: the compiled blocks skip _update on "
            "the other rounds, so an _update that changes the model (or draws) on one of "
            "those breaks this")


def differing_attributes(a: Any, b: Any, prefix: str = "", depth: int = 3) -> list[str]:
    """The attributes (dotted paths) whose arrays or numbers differ between two learners (or
    the objects they hold, ``depth`` levels down), and those only one side has; objects of
    other kinds are left out."""
    out: list[str] = []
    ua, ub = _attrs(a), _attrs(b)
    for k in sorted(set(ua) | set(ub)):
        path = f"{prefix}{k}"
        if (k in ua) != (k in ub):
            out.append(path)
            continue
        u, v = ua[k], ub[k]
        if isinstance(u, np.ndarray) and isinstance(v, np.ndarray):
            if u.ndim == v.ndim:  # grown stores: a capacity on either axis
                common = tuple(slice(0, min(p, q)) for p, q in zip(u.shape, v.shape, strict=True))
                u, v = u[common], v[common]
            if u.dtype != v.dtype or u.shape != v.shape or not np.array_equal(
                    u, v, equal_nan=u.dtype.kind in "fc"):
                out.append(path)
        elif isinstance(u, (bool, int, float, np.number)) and isinstance(
                v, (bool, int, float, np.number)):
            if u != v and not (u != u and v != v):  # NaN equals NaN here
                out.append(path)
        elif isinstance(u, np.random.Generator) and isinstance(v, np.random.Generator):
            if u.bit_generator.state != v.bit_generator.state:
                out.append(path)
        elif depth > 1 and type(u) is type(v) and _attrs(u):
            out += differing_attributes(u, v, path + ".", depth - 1)
        elif depth > 1 and isinstance(u, (list, tuple)) and isinstance(v, (list, tuple)):
            for i, (p, q) in enumerate(zip(u, v, strict=False)):
                out += differing_attributes(p, q, f"{path}[{i}].", depth - 1) if _attrs(p) \
                    else []
    return out


def _attrs(o: Any) -> dict[str, Any]:
    """An object's attributes from ``__dict__`` and ``__slots__`` (none for builtins)."""
    if isinstance(o, (np.ndarray, np.generic, str, bytes, int, float, bool, type(None))):
        return {}
    d = dict(getattr(o, "__dict__", {}))
    for cls in type(o).__mro__:
        slots = getattr(cls, "__slots__", ())
        for s in (slots,) if isinstance(slots, str) else slots:
            if s not in d and hasattr(o, s):
                d[s] = getattr(o, s)
    return {k: v for k, v in d.items() if not k.startswith("__")}
