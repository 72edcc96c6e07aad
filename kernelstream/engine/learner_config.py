"""One learner configuration of a run: the object the CLI, the Python API, the engine and the
Beam transforms all pass around.

It lives below both the pipelines and the engine (the engine never imports ``pipelines``). The
learner modules load only when it is asked for something only a learner knows (resolved
parameters, the task, a learner): the registry loads them on first use, so commands that name
no learner never do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kernelstream import learners
from kernelstream.engine.keys import check_config_name
from kernelstream.engine.learner_widths import pending_widths, resolve_widths
from kernelstream.seeding import learner_seed

if TYPE_CHECKING:
    from kernelstream.learners import Learner


@dataclass(frozen=True)
class LearnerConfig:
    """``label``: the configuration's name in the run (unique; the first field of its stream
    keys and the scope of ``-p LABEL.key=value``); ``learner``: the registry name; ``params``:
    its hyper-parameters (resolved here: defaults filled in, types checked, so a bad value
    fails when the run is built, not inside a worker); ``seed_name``: the name hashed into the
    learner seed, the registry name unless given, so a configuration's result depends neither
    on its label nor on the other configurations of its grid. ``target``: ``(mean, std)`` a
    regression target is standardised by before the learner sees it, the scores mapped back
    (``engine.prequential.step_block``), so every output stays in the target's units; None:
    the labels as they are. ``auto_widths``: the Gaussian widths left to the data
    (``engine.learner_widths``: ``gamma``/``sigmas`` → ``"auto"``, ``"auto*F"`` or None when
    not given), which ``params`` holds as the learner's defaults until :meth:`with_widths`
    puts the data's numbers there (``evaluate`` and ``run_replay`` do); found here from the
    parameters given, so it need not be passed."""

    label: str
    learner: str
    params: Mapping[str, Any] = field(default_factory=dict)
    seed_name: str = ""
    target: tuple[float, float] | None = None
    auto_widths: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_config_name(self.label)
        rest, pending = pending_widths(self.learner, self.params)
        # (a replace() of a pending configuration passes its resolved params: the defaults)
        object.__setattr__(self, "auto_widths", {**self.auto_widths, **pending})
        resolved = learners.get(self.learner).resolve_params(rest)
        object.__setattr__(self, "params", resolved)
        if not self.seed_name:
            object.__setattr__(self, "seed_name", self.learner)
        if self.target is not None:
            mean, std = (float(v) for v in self.target)
            if not (math.isfinite(mean) and math.isfinite(std) and std > 0):
                raise ValueError(f"{self.label}: target standardisation needs a finite mean "
                                 f"and a std > 0, got {self.target}")
            object.__setattr__(self, "target", (mean, std))

    def with_widths(self, auto_width: Callable[[], float] | None) -> LearnerConfig:
        """This configuration with the widths it leaves to the data (``auto_widths``) set
        from ``auto_width()`` (the data's ``gamma=auto``: ``data.widths``), as the CLI sets
        them (``engine.learner_widths.resolve_widths``); itself when it leaves none. Without
        ``auto_width`` (no data to look at), an unset width keeps the learner's default and
        an explicit ``auto`` is a ``ConfigError``."""
        if not self.auto_widths:
            return self
        raw = {k: v for k, v in self.params.items() if k not in self.auto_widths}
        raw.update({k: v for k, v in self.auto_widths.items() if v is not None})
        if resolve_widths(self.learner, raw, auto_width) is None:
            return self
        return replace(self, params=raw, auto_widths={})

    @cached_property
    def task(self) -> str:
        """``classification`` or ``regression``: it can follow the parameters (e.g. a
        regression loss), so an instance is asked."""
        return self.make(0, 0).task

    def make(self, base_seed: int, rep: int) -> Learner:
        """The learner of permutation ``rep`` (seed ``seeding.learner_seed``)."""
        return learners.make(self.learner, seed=learner_seed(base_seed, rep, self.seed_name),
                             **self.params)

    def record(self) -> dict[str, Any]:
        """What a checkpoint records of the configuration (``engine.replay.checkpoints``)."""
        doc: dict[str, Any] = {"learner": self.learner, "params": dict(self.params)}
        if self.target is not None:
            doc["target"] = list(self.target)
        return doc


def as_configs(configs: Iterable[LearnerConfig | tuple[Any, ...]]) -> dict[str, LearnerConfig]:
    """``LearnerConfig`` objects or ``(label, learner, params[, seed_name])`` tuples → by
    label."""
    if configs is None or isinstance(configs, (str, LearnerConfig)):
        raise ValueError("learner configurations are a list of LearnerConfig objects or "
                         "(label, learner, params) tuples, e.g. [('b', 'bpa-s', {})]; got "
                         f"{configs!r}")
    out: dict[str, LearnerConfig] = {}
    for c in configs:
        cfg = c if isinstance(c, LearnerConfig) else LearnerConfig(*c)
        if cfg.label in out:
            raise ValueError(f"configuration name {cfg.label!r} given twice")
        out[cfg.label] = cfg
    if not out:
        raise ValueError("no learner configuration given (a list of LearnerConfig objects or "
                         "(label, learner, params) tuples, e.g. [('b', 'bpa-s', {})])")
    return out


def learner_config(learner: str | LearnerConfig, params: Mapping[str, Any] | None = None,
                   label: str | None = None, seed_name: str | None = None) -> LearnerConfig:
    """``learner`` itself when it is a :class:`LearnerConfig` (then nothing else may be
    given), else the configuration of the registry name ``learner`` (label: the name)."""
    if isinstance(learner, LearnerConfig):
        if params or label or seed_name:
            raise TypeError("a LearnerConfig holds its own params, label and seed_name")
        return learner
    return LearnerConfig(label or learner, learner, params or {}, seed_name or "")


def records(configs: Iterable[LearnerConfig]) -> dict[str, dict[str, Any]]:
    """``{label: record}``: the configurations as a checkpoint records them."""
    return {c.label: c.record() for c in configs}


def recorded_target(saved: dict[str, Any]) -> tuple[float, float] | None:
    """The ``(mean, std)`` the recorded configurations ``saved`` (:func:`records`) learnt a
    regression target by (``target``; one for all of a run's), or None: as it came."""
    for doc in saved.values():
        if isinstance(doc, dict) and doc.get("target") is not None:
            mean, std = doc["target"]
            return float(mean), float(std)
    return None
