"""Name → learner class registry behind :func:`kernelstream.learners.make`."""

from __future__ import annotations

from typing import Any, TypeVar

from kernelstream.learners.base import Learner, Seed

_REGISTRY: dict[str, type[Learner]] = {}

L = TypeVar("L", bound=type[Learner])


def register(cls: L) -> L:
    """Class decorator: make a learner available under ``cls.name``."""
    name = cls.name
    if name != name.lower() or " " in name or "_" in name:
        raise ValueError(f"learner names are lower-case with hyphens, got {name!r}")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"learner {name!r} is registered twice")
    _REGISTRY[name] = cls
    return cls


def available() -> list[str]:
    """Names of every registered learner, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> type[Learner]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown learner {name!r}; available learners: {', '.join(available())}"
        ) from None


def make(name: str, seed: Seed = 0, **params: Any) -> Learner:
    """Build a learner by name, e.g. ``make("bogd", seed=1, budget=200, eta=0.1)``."""
    return get(name)(seed=seed, **params)
