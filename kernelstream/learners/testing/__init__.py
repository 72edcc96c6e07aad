"""Common conformance checks for online learners, in the spirit of River's ``check_estimator``
and scikit-learn's common estimator checks.

>>> from kernelstream.learners.testing import check_learner
>>> check_learner("perceptron")  # raises AssertionError listing every failed check

Every check is a function ``check_xxx(name, params)`` that raises ``AssertionError`` (or lets
an unexpected exception through) when the learner breaks the contract of
:class:`~kernelstream.learners.base.Learner`. ``CHECKS`` maps
check names to :class:`Check` entries and :func:`cases` lists the applicable
``(configuration, check, params)`` triples of a learner, so a test suite can parametrise over
every registered learner without skips. :func:`small_params` derives fast settings (small
budget, few random features, …) from a learner's ``Param`` list; :func:`configurations` adds
one configuration per non-default value of each choice / boolean parameter.

The checks live in :mod:`~kernelstream.learners.testing.trajectory` (a learner's dynamics
over a stream) and :mod:`~kernelstream.learners.testing.interface` (what it declares and
accepts), their shared streams, settings and assertions in
:mod:`~kernelstream.learners.testing.support`; every ``check_xxx`` and the helpers named above
can be imported from here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

from kernelstream.learners import registry
from kernelstream.learners.base import Learner
from kernelstream.learners.testing.interface import (
    check_bad_input,
    check_bad_params,
    check_metadata,
    check_sparse_rows,
)
from kernelstream.learners.testing.support import OVERRIDES, make_stream, new, small_params
from kernelstream.learners.testing.trajectory import (
    SCORE_BOUND,
    check_batch_equals_loop,
    check_bounded_memory,
    check_bounded_scores,
    check_first_prediction,
    check_pickle,
    check_predict_is_pure,
    check_reproducible,
    check_row_lanes,
    check_seeds,
    check_state_roundtrip,
)


class Check(NamedTuple):
    fn: Callable[[str, dict[str, Any]], None]
    applies: Callable[[Learner], bool]  # given a learner built with the configuration
    per_config: bool  # run for every configuration, not only the default one


def _always(m: Learner) -> bool:
    return True


def _kernel_and_loss(m: Learner) -> bool:
    spec = {p.name: p.choices for p in type(m).params}
    return spec.get("kernel") is not None and spec.get("loss") is not None


def check_kernel_loss_pairs(name: str, params: dict[str, Any]) -> None:
    """:func:`check_bounded_scores` of every pair of the learner's kernel and loss choices:
    :func:`configurations` varies one parameter at a time, and the two interact (a fixed
    step against the kernel's scale: squared hinge with the polynomial kernel diverges where
    either alone does not)."""
    spec = {p.name: p.choices for p in registry.get(name).params}
    kernels, losses = spec["kernel"], spec["loss"]
    assert kernels is not None and losses is not None
    failed = []
    for kernel, loss in itertools.product(kernels, losses):
        try:
            check_bounded_scores(name, {**params, "kernel": kernel, "loss": loss})
        except AssertionError as e:
            failed.append(f"kernel={kernel}, loss={loss}: {e}")
    assert not failed, "; ".join(failed)


CHECKS: dict[str, Check] = {
    "metadata": Check(check_metadata, _always, False),
    "bad_params": Check(check_bad_params, _always, False),
    "pickle": Check(check_pickle, _always, False),
    "reproducible": Check(check_reproducible, _always, True),
    "seeds": Check(check_seeds, _always, True),
    "state_roundtrip": Check(check_state_roundtrip, _always, True),
    "predict_is_pure": Check(check_predict_is_pure, _always, True),
    "batch_equals_loop": Check(check_batch_equals_loop, _always, True),
    "row_lanes": Check(check_row_lanes, _always, True),
    "bounded_memory": Check(check_bounded_memory, lambda m: m.memory_bound() is not None, True),
    "first_prediction": Check(check_first_prediction, _always, True),
    "bad_input": Check(check_bad_input, _always, True),
    "sparse_rows": Check(check_sparse_rows, _always, True),
    "bounded_scores": Check(check_bounded_scores, _always, True),
    "kernel_loss_pairs": Check(check_kernel_loss_pairs, _kernel_and_loss, False),
}

# choice-valued parameters not worth a configuration of their own (checked elsewhere)
SKIP_VARIATION = {"tie"}


def configurations(name: str) -> list[tuple[str, dict[str, Any]]]:
    """``("default", small_params)`` plus one configuration per non-default value of every
    choice or boolean parameter (kernel, loss, variant, quirk switches, …), one at a time."""
    base = small_params(name)
    out = [("default", base)]
    for p in registry.get(name).params:
        if p.name in SKIP_VARIATION or p.name in OVERRIDES.get(name, {}):
            continue
        values = p.choices if p.choices is not None else (False, True) if p.type is bool else ()
        out += [(f"{p.name}={v}", {**base, p.name: v}) for v in values if v != p.default]
    return out


def cases(name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(configuration id, check, params)`` for every applicable check of ``name``."""
    out = []
    for cid, params in configurations(name):
        m = new(name, params)
        for c, chk in CHECKS.items():
            if (chk.per_config or cid == "default") and chk.applies(m):
                out.append((cid, c, params))
    return out


def check_learner(name: str, **params: Any) -> None:
    """Run every applicable check on ``name`` — on the given ``params``, or on every
    configuration of :func:`configurations` — and raise ``AssertionError`` listing all
    failures."""
    todo = ([("given", c, params) for c, chk in CHECKS.items() if chk.applies(new(name, params))]
            if params else cases(name))
    failures = []
    for cid, c, ps in todo:
        try:
            CHECKS[c].fn(name, ps)
        except Exception as e:  # report every failing check, not only the first
            failures.append(f"[{cid}] {c}: {type(e).__name__}: {e}")
    if failures:
        raise AssertionError(f"{name} fails {len(failures)} check(s):\n  " + "\n  ".join(failures))


__all__ = ["CHECKS", "SCORE_BOUND", "SKIP_VARIATION", "Check", "cases", "check_bad_input",
           "check_bad_params", "check_batch_equals_loop", "check_bounded_memory",
           "check_bounded_scores", "check_first_prediction", "check_kernel_loss_pairs",
           "check_learner", "check_metadata", "check_pickle", "check_predict_is_pure",
           "check_reproducible", "check_row_lanes", "check_seeds", "check_sparse_rows",
           "check_state_roundtrip",
           "configurations", "make_stream", "small_params"]
