"""Seed derivation shared by every runner (the R permutations), so that the plain loop and the
Beam pipeline draw exactly the same permutations and learner randomness."""

from __future__ import annotations

import zlib

import numpy as np


def learner_id(name: str) -> int:
    """A stable small integer for a learner configuration name (not Python's salted hash)."""
    return zlib.crc32(name.encode("utf-8"))


def permutation(n: int, base_seed: int, r: int) -> np.ndarray:
    """The stream order of repetition ``r``: a permutation seeded with ``(base_seed, r)``."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([base_seed, r])))
    return rng.permutation(n)


def learner_seed(base_seed: int, r: int, name: str) -> tuple[int, int, int]:
    """The learner seed of repetition ``r``: ``(base_seed, r, learner_id)``."""
    return (int(base_seed), int(r), learner_id(name))
