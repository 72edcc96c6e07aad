"""The ``-p`` width arguments of a run that continues recorded learners: a replay resuming a
Kafka topic's ``--checkpoint`` (``pipelines.replay.topic_head.topic_head``) and a stream
started from ``--init-from`` or resuming its snapshot (``pipelines.live.stream_config``).
A configuration whose Gaussian width is left to the data continues with the number its
record holds instead of estimating it again (its saved state was learnt with that one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelstream.data import widths
from kernelstream.experiments.tuning import param_text  # -p text of a recorded value
from kernelstream.pipelines.config import parse_param_spec


def recorded_width_specs(saved: dict[str, Any], pairs: Sequence[tuple[str, str]],
                         given_specs: Sequence[str]) -> list[str]:
    """``LABEL.gamma=X`` / ``LABEL.sigmas=S``: the widths ``saved`` (recorded
    configurations) has for each ``(label, learner)`` of ``pairs`` with the same learner
    there and no width among ``given_specs``."""
    given = [s.partition("=")[0].strip() for s in given_specs]
    specs = []
    for label, name in pairs:
        have = saved.get(label)
        if not isinstance(have, dict) or have.get("learner") != name:
            continue
        params = have.get("params") or {}
        for key, aliases in (("gamma", ("gamma", "sigma")), ("sigmas", ("sigmas",))):
            if key in params and not any(g in aliases or g in {f"{label}.{a}" for a in aliases}
                                         for g in given):
                specs.append(f"{label}.{key}={param_text(params[key])}")
    return specs


def auto_width_spec(spec: str) -> bool:
    """``-p [LABEL.]gamma=auto`` (or ``sigma=auto``, ``sigmas=auto``, ``auto*F``): a width
    left to the data."""
    try:
        _, key, value = parse_param_spec(spec)
    except ValueError:
        return False  # learner_configs reports it
    return key in ("gamma", "sigma", "sigmas") and widths.is_auto(value)
