"""Losses and their derivatives with respect to the score.

Scalar functions on purpose: learners call them once per round on Python floats, where numpy
ufunc dispatch would cost more than the arithmetic. They never raise: a loss too large for a
float is ``inf`` (a run judges every row, whatever its target).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple


class Loss(NamedTuple):
    name: str
    value: Callable[[float, float], float]
    deriv: Callable[[float, float], float]
    task: str  # "classification" or "regression"


def _hinge(f: float, y: float) -> float:
    m = 1.0 - y * f
    return m if m > 0.0 else 0.0


def _hinge_d(f: float, y: float) -> float:
    return -y if y * f < 1.0 else 0.0


def _logistic(f: float, y: float) -> float:
    z = -y * f  # ln(1 + e^z), stable for both signs
    return z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))


def _logistic_d(f: float, y: float) -> float:
    z = y * f  # −y / (1 + e^{y f}) = −y · expit(−y f)
    if z >= 0:
        e = math.exp(-z)
        return -y * e / (1.0 + e)
    return -y / (1.0 + math.exp(z))


def _square(f: float, y: float) -> float:
    try:
        return (f - y) ** 2
    except OverflowError:  # |f - y| > ~1.3e154: Python's float ** raises where * gives inf
        return math.inf


def _square_d(f: float, y: float) -> float:
    return 2.0 * (f - y)


def _absolute(f: float, y: float) -> float:
    return abs(f - y)


def _absolute_d(f: float, y: float) -> float:
    return 1.0 if f > y else (-1.0 if f < y else 0.0)


def _sq_hinge(f: float, y: float) -> float:
    m = 1.0 - y * f
    return m * m if m > 0.0 else 0.0


def _sq_hinge_d(f: float, y: float) -> float:
    m = 1.0 - y * f
    return -2.0 * y * m if m > 0.0 else 0.0


LOSSES: dict[str, Loss] = {
    "hinge": Loss("hinge", _hinge, _hinge_d, "classification"),
    "logistic": Loss("logistic", _logistic, _logistic_d, "classification"),
    "squared-hinge": Loss("squared-hinge", _sq_hinge, _sq_hinge_d, "classification"),
    "square": Loss("square", _square, _square_d, "regression"),
    "absolute": Loss("absolute", _absolute, _absolute_d, "regression"),
}


def get_loss(name: str) -> Loss:
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; valid losses: {', '.join(LOSSES)}") from None
