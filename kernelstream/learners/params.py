"""Hyper-parameter declarations of the learners: :class:`Param` and the shared ones.

A learner lists its hyper-parameters as a tuple of :class:`Param` (name, default, type, a
check and its wording); :meth:`Param.coerce` turns what a user typed (a CLI string, a JSON
value) into the typed value or a one-line error naming the learner and the parameter. The
checks :func:`positive`, :func:`nonneg` and :func:`unit_open`, the parameters most kernel
learners share (:data:`KERNEL_PARAMS`, :data:`TIE_PARAM`) and the ``eta``/``lam`` pair of the
shrinking learners (:class:`ShrinkParams`) live here too.

Kept apart from :mod:`kernelstream.learners.base` because these are declarations and value
checks, with no learner behaviour: the learner class only calls :meth:`Param.coerce` when it
resolves its parameters. ``base`` re-exports every name, so
``from kernelstream.learners.base import Param`` keeps working.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Param:
    """One hyper-parameter: name (the paper's symbol in plain words), default, type, check."""

    name: str
    default: Any
    type: type
    doc: str
    check: Callable[[Any], bool] | None = None
    rule: str = ""  # human-readable form of ``check`` for error messages
    choices: tuple[Any, ...] | None = None

    def coerce(self, value: Any, learner: str) -> Any:
        if value is None and self.default is None:
            return None
        if self.name in DATA_WIDTHS:
            check_not_auto(learner, self.name, value, self.default)
        try:
            if self.type is bool and isinstance(value, str):
                low = value.strip().lower()
                if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(value)
                v: Any = low in ("1", "true", "yes", "on")
            elif self.type is int:
                fv = float(value)
                if not fv.is_integer():
                    raise ValueError(value)
                v = int(fv)
            else:
                v = self.type(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"{learner}: parameter {self.name!r} must be {self.type.__name__}, got {value!r}"
            ) from None
        if self.choices is not None and v not in self.choices:
            raise ValueError(
                f"{learner}: parameter {self.name!r} must be one of "
                f"{', '.join(map(str, self.choices))}; got {v!r}"
            )
        if self.type is float and not math.isfinite(v):
            raise ValueError(f"{learner}: parameter {self.name!r} must be finite, got {v!r}")
        if self.check is not None and not self.check(v):
            raise ValueError(f"{learner}: parameter {self.name!r} must be {self.rule}, got {v!r}")
        return v


# The Gaussian widths the commands and the Python API's evaluate/run_replay estimate from the
# data when asked "auto" (kernelstream.engine.learner_widths); a learner alone sees no data
DATA_WIDTHS = ("gamma", "sigma", "sigmas")


def check_not_auto(learner: str, name: str, value: Any, default: Any = None) -> None:
    """A one-line ``ValueError`` for a width ``"auto"``/``"auto*F"`` given to a learner built
    alone (``learners.make``): say where the number comes from, as code that can be pasted
    (``default``: the learner's own default ``sigmas`` grid, the one the estimate centres)."""
    if not isinstance(value, str):
        return
    text = value.strip().lower().replace(" ", "")
    if text != "auto" and not text.startswith("auto*"):
        return
    if text != "auto":  # a factor that is no number: not a question of where the data are
        try:
            factor = float(text[len("auto*"):])
        except ValueError:
            factor = math.nan
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"{learner}: {name}={value!r}: auto*F needs a positive number F "
                             "(e.g. auto*2)")
    w = "kernelstream.data.widths"
    grid = default if isinstance(default, str) and default else "2^-2:1:3"
    how = {"gamma": f"a number: {w}.auto_gamma(X[:1000])",
           "sigma": f"a number: {w}.gamma_to_sigma({w}.auto_gamma(X[:1000]))",
           "sigmas": f"a grid: {w}.centred_sigmas({w}.auto_gamma(X[:1000]), "
                     f"kernelstream.learners.kernels.parse_sigmas({grid!r}))"}[name]
    raise ValueError(f"{learner}: {name}={value!r} is a width estimated from the data, which a "
                     f"learner built alone does not see: give {how}, or pass the "
                     "configuration to kernelstream.engine.evaluate.evaluate or run_replay, "
                     "which estimate it as the CLI does")


def sigma_gamma(sigma: float) -> float:
    """``gamma = 1/(2σ²)`` of a Gaussian width ``sigma``; NaN unless ``sigma`` and ``gamma`` are
    both finite and > 0 (a tiny σ's square underflows to 0, a huge one's gamma to 0)."""
    if not (sigma > 0 and math.isfinite(sigma)):
        return math.nan
    s2 = 2.0 * sigma * sigma
    gamma = 1.0 / s2 if s2 > 0 else math.inf
    return gamma if 0 < gamma < math.inf else math.nan


SIGMA_RULE = "a number > 0 whose gamma = 1/(2 sigma^2) is finite and > 0 (about 1e-154 to 1e154)"


def positive(v: Any) -> bool:
    return v > 0


def nonneg(v: Any) -> bool:
    return v >= 0


def unit_open(v: Any) -> bool:
    return 0 < v < 1


class ShrinkParams:
    """Learner mixin of the learners whose coefficients shrink by ``1 − ηλ`` per round (OGD,
    BOGD, SkeGD, bounded OMKC's components): the attributes ``eta`` and ``lam`` and the check
    that the factor stays positive. A learner with more checks calls it through ``super()``."""

    name: ClassVar[str]
    eta: float
    lam: float

    @classmethod
    def check_params(cls, p: dict[str, Any]) -> None:
        if p["eta"] * p["lam"] >= 1.0:
            raise ValueError(f"{cls.name}: eta*lam must be < 1 (shrink factor 1 − ηλ > 0), "
                             f"got eta={p['eta']!r}, lam={p['lam']!r}")


# Parameters shared by every kernel learner; subclasses list them explicitly (``KERNEL_PARAMS``)
# so ``kernelstream learners`` shows a complete signature per learner.
KERNEL_PARAMS: tuple[Param, ...] = (
    Param("kernel", "gaussian", str, "kernel function",
          choices=("gaussian", "polynomial", "linear")),
    Param("gamma", 0.5, float,
          "Gaussian width: exp(-gamma ||x-x'||^2); sigma=s sets gamma=1/(2 s^2)", positive, "> 0"),
    Param("degree", 2, int, "degree of the (homogeneous) polynomial kernel", positive, "> 0"),
)
TIE_PARAM = Param("tie", "positive", str, "label predicted for a zero score",
                  choices=("positive", "negative"))
