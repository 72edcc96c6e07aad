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

