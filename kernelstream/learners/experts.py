"""Expert-advice and bandit building blocks: exponential weights,
uniform smoothing, importance-weighted and implicit-exploration loss estimates, categorical and
Bernoulli draws, weighted sampling without replacement, and a reservoir sample.

All randomness comes from the caller's ``numpy.random.Generator``.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

import numpy as np

from kernelstream.learners import compiled


def hedge(cum_loss: np.ndarray, eta: float, lmin: Any = None) -> np.ndarray:
    """Exponential weights ``q_i ∝ exp(−η (L_i − min L))`` (stable form); ``lmin``: ``min L``
    if the caller has it."""
    z = np.exp(-eta * (cum_loss - (cum_loss.min() if lmin is None else lmin)))
    return z / z.sum()


def smooth(q: np.ndarray, delta: float) -> np.ndarray:
    """``p = (1 − δ) q + δ/K``, so every ``p_i ≥ δ/K``."""
    return (1.0 - delta) * q + delta / len(q)


def multiplicative(theta: np.ndarray, beta: float, losses: np.ndarray) -> np.ndarray:
    """The form of Lu et al., ACM TIST 2018: ``θ_i ← θ_i β^{loss_i}``, renormalised."""
    t = theta * np.power(beta, losses)
    return t / t.sum()


def importance_weighted(loss: float, chosen: int, p: np.ndarray, zeta: float = 0.0) -> np.ndarray:
    """``ℓ̃_i = ℓ 1[I = i] / (p_i + ζ)``; ``ζ > 0`` is the implicit-exploration (IX) estimator."""
    est = np.zeros(len(p))
    est[chosen] = loss / (p[chosen] + zeta)
    return est


def categorical(rng: np.random.Generator, p: np.ndarray) -> int:
    """Draw ``I ~ p`` after renormalising round-off (one uniform draw, inverse CDF).

    Python floats for the few arms of a selection learner (the same sequential cumulative sum
    and right-side search as ``np.cumsum`` / ``np.searchsorted``, without their call
    overhead); numpy for long vectors."""
    if len(p) > 32:
        c = np.cumsum(p)
        u = rng.random() * c[-1]
        return min(int(np.searchsorted(c, u, side="right")), len(p) - 1)
    cum = []
    tot = 0.0
    for v in p.tolist():
        tot += v
        cum.append(tot)
    return min(bisect_right(cum, rng.random() * tot), len(cum) - 1)


def bernoulli(rng: np.random.Generator, q: float) -> bool:
    """``True`` with probability ``clip(q, 0, 1)``."""
    return rng.random() < min(max(q, 0.0), 1.0)


def sample_without_replacement(rng: np.random.Generator, p: np.ndarray, s: int) -> np.ndarray:
    """Successive weighted sampling of ``s`` distinct indices (what ``Generator.choice(n, s,
    replace=False, p=p)`` does); when fewer than ``s`` weights are positive the rest is filled
    uniformly from the remaining indices."""
    p = np.asarray(p, dtype=np.float64)
    n = len(p)
    s = min(s, n)
    k = min(s, int(np.count_nonzero(p > 0)))
    chosen = weighted_distinct(rng, p, k) if k else []
    if k < s:
        rest = np.setdiff1d(np.arange(n), np.array(chosen, dtype=np.int64))
        chosen = [*chosen, *rng.choice(rest, s - k, replace=False).tolist()]
    return np.array(chosen, dtype=np.int64)


def weighted_distinct(rng: np.random.Generator, w: np.ndarray, k: int) -> list[int]:
    """``k`` distinct indices drawn successively with probabilities proportional to ``w``
    (``w ≥ 0`` with at least ``k`` positive entries), in draw order.

    The scheme of ``Generator.choice(replace=False, p=...)``: rounds of ``k − found`` uniforms
    against the cumulative weights, repeats dropped (first occurrences kept), the found indices
    zeroed before the next round — rejection of repeats, so each draw is from the remaining
    weights renormalised, i.e. successive sampling. Written out on *unnormalised* weights (the
    uniforms are scaled by the total instead of dividing the whole CDF) because numpy's
    ``choice`` costs ~30 µs per call in argument checks and ``np.unique``, more than OKS-SIL's
    whole kernel row; it runs every OKS-SIL update. With the compiled kernels, the cumulative
    sum and the search are one call (``cdf_search``: the same sums, the same indices)."""
    found: list[int] = []
    fk = compiled.fk
    if fk is not None:
        w = np.ascontiguousarray(w, dtype=np.float64)
    while True:
        u = rng.random(k - len(found))
        if fk is not None:
            hits = fk.cdf_search(w, u)
        else:
            cdf = w.cumsum()
            # u < 1 gives fl(u·tot) < tot under round-to-nearest, so "right" lands on an index
            # of positive weight, never past the end
            hits = cdf.searchsorted(u * cdf[-1], side="right").tolist()
        for j in hits:
            if j not in found:
                found.append(j)
        if len(found) == k:
            return found
        w = w.copy()
        w[found] = 0.0


class Reservoir:
    """Vitter's Algorithm R over ``(x, y, id)`` with capacity ``M`` (Vitter, ACM TOMS 1985).

    Call :meth:`offer` at the end of every round; the stored rows are then a uniform sample of
    the rounds offered so far. Rows live in preallocated arrays so the state is compact.
    """

    def __init__(self, capacity: int, dim: int) -> None:
        self.capacity = int(capacity)
        self.X = np.zeros((self.capacity, dim))
        self.y = np.zeros(self.capacity)
        self.ids = np.full(self.capacity, -1, dtype=np.int64)
        self.n = 0  # rows filled
        self.seen = 0  # rounds offered

    def offer(self, rng: np.random.Generator, x: np.ndarray, y: float, id_: int) -> int:
        """Offer round ``id_``; returns the slot written, or -1 if the example was not kept."""
        self.seen += 1
        if self.n < self.capacity:
            j = self.n
            self.n += 1
        elif self.capacity and rng.random() < self.capacity / self.seen:
            j = int(rng.random() * self.capacity)
        else:
            return -1
        self.X[j] = x
        self.y[j] = y
        self.ids[j] = id_
        return j

    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}X": self.X[: self.n].copy(),
            f"{prefix}y": self.y[: self.n].copy(),
            f"{prefix}ids": self.ids[: self.n].copy(),
            f"{prefix}seen": np.array(self.seen, dtype=np.int64),
        }

    def set_state(self, state: dict[str, np.ndarray], prefix: str) -> None:
        n = len(state[f"{prefix}y"])
        self.X[:n] = state[f"{prefix}X"]
        self.y[:n] = state[f"{prefix}y"]
        self.ids[:n] = state[f"{prefix}ids"]
        self.n = n
        self.seen = int(state[f"{prefix}seen"])
        if self.seen < n:  # Algorithm R draws with probability capacity / seen
            raise ValueError(f"state[{prefix + 'seen'!r}] = {self.seen} is below the {n} "
                             "rows stored")
