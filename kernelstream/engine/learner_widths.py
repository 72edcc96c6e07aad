"""The Gaussian widths a learner configuration leaves to the data, and their resolution: the one
rule of the CLI (``pipelines.config.learner_configs``) and of the Python API
(:func:`kernelstream.engine.evaluate.evaluate`, ``run_replay``, through
:meth:`~kernelstream.engine.learner_config.LearnerConfig.with_widths`), so the same
configuration learns with the same width both ways.

Left to the data (``data.widths``: the median heuristic on the data's first rows):

* ``gamma`` unset on a learner with a Gaussian kernel, ``gamma="auto"`` or ``"auto*F"``
  (F times the estimate), ``sigma="auto"`` or ``"auto*F"`` (the same width:
  ``gamma = 1 / (2 sigma^2)``, so ``auto*F`` on sigma is ``auto*(1/F^2)`` on gamma);
* ``sigmas`` (a multi-kernel learner's grid) unset or ``"auto"``: the learner's default grid
  centred on the estimate (``data.widths.centred_sigmas``).

A number given is kept, so resolving a resolved configuration changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kernelstream import learners
from kernelstream.data import widths
from kernelstream.errors import ConfigError
from kernelstream.learners.kernels import parse_sigmas


def _sigma_as_gamma(name: str, raw: dict[str, Any]) -> None:
    """``sigma=auto[*F]`` → ``gamma=auto[*1/F^2]`` in place (one width), for a learner with
    ``gamma`` (another's ``sigma`` is ``resolve_params``'s error to report)."""
    if not widths.is_auto(raw.get("sigma")) or "gamma" in raw:
        return  # (both given: resolve_params says to give one)
    if "gamma" not in {p.name for p in learners.get(name).params}:
        return
    f = widths.auto_factor(raw.pop("sigma")) or 1.0
    raw["gamma"] = widths.AUTO if f == 1.0 else f"{widths.AUTO}*{1.0 / (f * f)!r}"


def pending_widths(name: str, given: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(the other parameters, the widths left to the data)`` of learner ``name`` given
    ``given``: the second maps ``gamma``/``sigmas`` to what was asked (``"auto"``,
    ``"auto*F"``), or to None when the width was not given at all (module docstring)."""
    raw = dict(given)
    _sigma_as_gamma(name, raw)
    params = {p.name: p for p in learners.get(name).params}
    kernel = raw.get("kernel", params["kernel"].default if "kernel" in params else "gaussian")
    pending: dict[str, Any] = {}
    if "gamma" in params and "sigma" not in raw and (
            widths.is_auto(raw.get("gamma")) or ("gamma" not in raw and kernel == "gaussian")):
        pending["gamma"] = raw.pop("gamma", None)
    if "sigmas" in params and ("sigmas" not in raw or widths.is_auto(raw["sigmas"])):
        pending["sigmas"] = raw.pop("sigmas", None)
    return raw, pending


def resolve_widths(name: str, raw: dict[str, Any],
                   auto_width: Callable[[], float] | None) -> Callable[[], float] | None:
    """Replace, in place, the widths learner ``name``'s raw parameters leave to the data
    (:func:`pending_widths`) by numbers: ``gamma`` by ``auto_width()`` (times F for
    ``auto*F``), ``sigmas`` by the learner's default grid centred on it. Returns
    ``auto_width`` memoised once called, so that a grid of configurations reads the data once;
    ``None`` when nothing was asked of it or it was not given (then an unset width keeps the
    learner's default and an explicit ``auto`` is a ``ConfigError``)."""
    rest, pending = pending_widths(name, raw)
    if not pending:
        return None
    if auto_width is None:
        explicit = [k for k, v in pending.items() if v is not None]
        if explicit:
            raise ConfigError(f"{name}: {explicit[0]}=auto is estimated from the data's first "
                              "rows, which this command does not read: give a number")
        return None
    value = auto_width()
    raw.clear()
    raw.update(rest)
    if "gamma" in pending:
        factor = widths.auto_factor(pending["gamma"]) or 1.0
        raw["gamma"] = repr(value if factor == 1.0 else widths.rounded(value * factor))
    if "sigmas" in pending:
        default = next(p.default for p in learners.get(name).params if p.name == "sigmas")
        raw["sigmas"] = widths.centred_sigmas(value, parse_sigmas(str(default)).tolist())
    return lambda: value
