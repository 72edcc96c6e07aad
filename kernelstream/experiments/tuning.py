"""Hyper-parameter tuning on held-out permutations (``kernelstream tune``), without Beam.

The protocol is the one of the papers' reproductions (``kernelstream reproduce PAPER
--retune``, :mod:`kernelstream.experiments.retune`): every cell of a grid learns the same *tuning*
permutation(s) of the data, test-then-train, and the cell with the lowest mistake rate (the
lowest average loss for regression) wins; a tie goes to the cell that comes first in grid
order (``ties="grid"``), or first to the lower average loss and then to grid order
(``ties="loss"``, as P3's protocol tunes SkeGD).

Seeding. The tuning permutations are ``r = tune_perm, tune_perm + 1, ...`` (default 1000),
drawn as every replay draws its permutations (``seeding.permutation(n, seed, r)``, a
``SeedSequence([seed, r])``) with learner seeds ``(seed, r, learner)``. A replay evaluates
``r = 0 .. R-1``, so for ``R <= tune_perm`` no evaluation stream was seen while tuning, yet
a tuning stream can be replayed exactly. The papers' protocols tune on ``r = 1000`` of
base seed 0: the same streams.

A grid is ``--grid key=v1,v2,...`` per parameter; its cells are the Cartesian product with
the first key varying slowest (``eta`` × ``lam`` as the papers' grids loop). ``random`` keeps N of
the cells, drawn without replacement from a generator seeded apart from the permutations,
and in grid order, so ties still break the same way.

This module parses grids, picks cells, chooses the winner and reads and writes
``tuned.json`` (the chosen parameters, every cell's score and the protocol); its tables are
:mod:`kernelstream.experiments.tuning_table`, running the cells is the replay's
(``kernelstream.pipelines.commands.tune``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from kernelstream import fs
from kernelstream.errors import TunedFileError
from kernelstream.pipelines.config import (
    display_name,
    is_topic,
    parse_learner_spec,
    parse_param_spec,
)
from kernelstream.pipelines.replay.replay_checks import data_path

TUNED_KIND = "kernelstream.tuned"
TUNED_SCHEMA = 1
TUNE_PERM = 1000  # the first tuning permutation, as in the papers' protocols
TIES = ("grid", "loss")
_RANDOM_TAG = zlib.crc32(b"tune-random-cells")  # keeps cell draws apart from permutations
_DIGITS = 9  # scores equal to this many decimals tie (sums of the same mistakes are equal)


# -- grids ---------------------------------------------------------------------------------------


def parse_grid(specs: Sequence[str]) -> dict[str, list[str]]:
    """``["key=v1,v2", ...]`` → ``{key: [v1, v2]}`` in the order given (values as text: the
    learner's parameters convert them, as for ``-p``)."""
    axes: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        vals = [v.strip() for v in values.split(",")]
        if not sep or not key or "." in key:
            raise ValueError(f"--grid {spec!r}: expected KEY=V1,V2,...")
        if not all(vals):
            raise ValueError(f"--grid {spec!r}: an empty value")
        if key in axes:
            raise ValueError(f"--grid {key}=... given twice: list its values once")
        dups = sorted({v for v in vals if vals.count(v) > 1})
        if dups:
            raise ValueError(f"--grid {key}: value(s) {', '.join(dups)} given twice")
        axes[key] = vals
    if not axes:
        raise ValueError("no --grid KEY=V1,V2,... given")
    return axes


def grid_cells(axes: Mapping[str, Sequence[str]]) -> list[dict[str, str]]:
    """Every cell of the grid, the first key varying slowest."""
    keys = list(axes)
    return [dict(zip(keys, vals, strict=True))
            for vals in itertools.product(*(axes[k] for k in keys))]


def random_cells(n_cells: int, count: int, seed: int) -> list[int]:
    """``count`` distinct cell indices of ``n_cells``, drawn with ``seed``, in grid order
    (all of them when ``count >= n_cells``)."""
    if count < 1:
        raise ValueError(f"--random must be >= 1, got {count}")
    if count >= n_cells:
        return list(range(n_cells))
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, _RANDOM_TAG])))
    return sorted(int(i) for i in rng.choice(n_cells, size=count, replace=False))


# -- scores and the choice -------------------------------------------------------------------------


@dataclass
class CellScore:
    """One evaluated cell: its grid index and values, and its scores over the tuning
    permutations (means; ``per_permutation``: ``(r, mistake rate or None, average loss)``)."""

    index: int
    label: str
    grid: dict[str, str]  # the cell's grid values as given
    params: dict[str, Any]  # every resolved hyper-parameter of the cell
    mistake_rate: float | None
    avg_loss: float
    mistake_rate_std: float | None = None
    avg_loss_std: float | None = None
    n_support_vectors: float | None = None
    seconds: float | None = None
    per_permutation: list[tuple[int, float | None, float]] = field(default_factory=list)
    # the no-skill baseline of the same streams (``engine.noskill``; None where it does not
    # apply) and the share of the top predicted class, for ``engine.noskill.skill_warnings``
    noskill_mistake_rate: float | None = None
    noskill_avg_loss: float | None = None
    top_class_share: float | None = None

    def key(self, metric: str, ties: str) -> tuple[float, ...]:
        """Sort key of the choice: the metric, then (``ties="loss"``) the average loss."""
        main = self.avg_loss if metric == "avg_loss" else self.mistake_rate
        if main is None or not math.isfinite(main):
            main = math.inf
        key = [round(main, _DIGITS)]
        if ties == "loss" and metric != "avg_loss":
            key.append(round(self.avg_loss, _DIGITS) if math.isfinite(self.avg_loss)
                       else math.inf)
        return tuple(key)


_T = TypeVar("_T")


def first_best(points: Iterable[_T], score: Callable[[Any], Any] = lambda t: t[1]) -> _T:
    """The grid point of lowest ``score`` (default: the second item of a ``(point, score)``
    pair); ties go to the earlier grid point, as in :func:`choose` (``ties="grid"``). The
    papers' tuning protocols (:mod:`kernelstream.experiments.retune`) choose with it."""
    return min(points, key=score)


def metric_for(task: str) -> str:
    """What tuning minimises: the mistake rate (classification) or the average loss."""
    return "avg_loss" if task == "regression" else "mistake_rate"


def choose(cells: Sequence[CellScore], task: str, ties: str = "grid") -> CellScore:
    """The winning cell: lowest metric (:func:`metric_for`); ties as ``ties`` says, then the
    earlier cell in grid order."""
    if ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(TIES)}, got {ties!r}")
    if not cells:
        raise ValueError("no cell was evaluated")
    metric = metric_for(task)
    return min(sorted(cells, key=lambda c: c.index), key=lambda c: c.key(metric, ties))


def beats(cell: CellScore, baseline: CellScore, task: str) -> bool:
    """``cell`` scores strictly better than ``baseline`` (the same rounding as :func:`choose`:
    equal to 9 decimals is no better)."""
    metric = metric_for(task)
    return cell.key(metric, "grid") < baseline.key(metric, "grid")


# Student's t, 95 % two-sided, by degrees of freedom (tuning permutations - 1); 2 beyond
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 15: 2.13, 20: 2.09}


def gain_warning(chosen: CellScore, baseline: CellScore, task: str,
                 examples: int | None) -> str | None:
    """A line when the chosen cell beats the default by less than twice the gain's standard
    error, i.e. by what another draw of the tuning streams could give or take away (None
    otherwise, when it does not beat it, or when either diverged). Over several tuning
    permutations: the paired differences' standard error (the same streams for both), times
    Student's t for their number rather than 2 (4.30 for 3 permutations); over one, for a
    mistake rate:
    ``sqrt((p1(1-p1) + p2(1-p2))/n)`` over its ``examples`` rows, which ignores the pairing
    and so overstates the error (a flagged gain may be real; an unflagged one is not noise)."""
    if not beats(chosen, baseline, task) or chosen.index == baseline.index:
        return None
    metric = metric_for(task)
    at = 1 if metric == "mistake_rate" else 2  # (r, mistake rate, average loss)
    base = {p[0]: p[at] for p in baseline.per_permutation}
    diffs = []
    for p in chosen.per_permutation:
        mine, theirs = p[at], base.get(p[0])
        if mine is not None and theirs is not None:
            diffs.append(float(mine) - float(theirs))
    what = "mistake rate" if metric == "mistake_rate" else "average loss"
    unit = " pp" if metric == "mistake_rate" else ""
    if not all(map(math.isfinite, diffs)):
        return None  # a diverged default: the gain is no question of noise
    factor = 2.0
    # the same difference on every permutation has no spread to judge it by: then, as for
    # one permutation, the binomial error of the two mistake rates over all the rows
    spread = len(diffs) >= 2 and max(diffs) - min(diffs) > 1e-9
    if spread:
        gain = -float(np.mean(diffs))
        se = float(np.std(diffs, ddof=1)) / math.sqrt(len(diffs))
        how = f"over {len(diffs)} tuning permutations, paired"
        # few permutations: Student's t (95 %, two-sided) rather than 2
        dof = len(diffs) - 1
        factor = _T95[max(k for k in _T95 if k <= dof)] if dof <= max(_T95) else 2.0
    elif diffs and metric == "mistake_rate" and examples:
        p1, p2 = chosen.mistake_rate, baseline.mistake_rate
        assert p1 is not None and p2 is not None
        gain, n = p2 - p1, examples * len(diffs)
        se = 100 * math.sqrt((p1 / 100 * (1 - p1 / 100) + p2 / 100 * (1 - p2 / 100)) / n)
        how = (f"on one tuning permutation of {examples:,} rows" if len(diffs) == 1 else
               f"the gain the same on all {len(diffs)} tuning permutations: the binomial "
               f"error over their {n:,} rows")
    else:
        return None
    if gain >= factor * se:
        return None
    times = "twice" if factor == 2.0 else f"{factor:g} times"
    return (f"the chosen cell beats the default's {what} by {gain:.3g}{unit}, less than {times} "
            f"its standard error ({se:.3g}{unit}, {how}): the gain may be noise "
            + ("(--tune-permutations 3 or more tells it apart)" if len(diffs) < 3 else
               "(more --tune-permutations tell it apart)"))


def selection_text(task: str, ties: str) -> str:
    if task == "regression":
        return "lowest mean average loss over the tuning permutations; ties: the earlier cell"
    tie = ("the lower mean average loss, then the earlier cell in grid order" if ties == "loss"
           else "the earlier cell in grid order")
    return f"lowest mean mistake rate over the tuning permutations; ties: {tie}"


# -- tuned.json ------------------------------------------------------------------------------------


def tuned_doc(*, learner: str, task: str, loss: str, cells: Sequence[CellScore],
              chosen: CellScore, ties: str, axes: Mapping[str, Sequence[str]],
              fixed: Mapping[str, str], data: Mapping[str, Any], protocol: Mapping[str, Any],
              version: str, created: str, baseline: CellScore | None = None,
              baseline_learner: str | None = None,
              baseline_fixed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``tuned.json`` document: the chosen cell's parameters first (what
    ``replay --params-from`` applies), then its score, the no-skill baseline of the same
    streams, the replay default's score (``baseline``: ``baseline_learner`` with its
    parameters, untuned, learnt in the same run), the protocol and every cell."""
    metric = metric_for(task)
    base = None
    if baseline is not None:
        base = {"learner": baseline_learner, "label": baseline.label,
                "cell": baseline.index if baseline.index >= 0 else None,
                "fixed": dict(baseline_fixed or {}),
                "params": {k: v for k, v in baseline.params.items() if v is not None},
                "mistake_rate": baseline.mistake_rate, "avg_loss": baseline.avg_loss,
                "mistake_rate_std": baseline.mistake_rate_std,
                "avg_loss_std": baseline.avg_loss_std,
                "n_support_vectors": baseline.n_support_vectors, "seconds": baseline.seconds,
                # the default's own scores, for the paired comparison tune warns by
                "per_permutation": [{"permutation": r, "mistake_rate": m, "avg_loss": a}
                                    for r, m, a in baseline.per_permutation],
                "beaten": beats(chosen, baseline, task)}
    return {
        "kind": TUNED_KIND,
        "schema": TUNED_SCHEMA,
        "kernelstream_version": version,
        "created": created,
        "learner": learner,
        "task": task,
        "loss": loss,
        "params": {k: v for k, v in chosen.params.items() if v is not None},
        "tuned": {k: chosen.params.get(k, v) for k, v in chosen.grid.items()},
        "cell": chosen.index,
        "score": {"metric": metric, "value": getattr(chosen, metric),
                  "mistake_rate": chosen.mistake_rate, "avg_loss": chosen.avg_loss},
        "noskill": {"mistake_rate": chosen.noskill_mistake_rate,
                    "avg_loss": chosen.noskill_avg_loss},
        "baseline": base,
        "data": dict(data),
        "protocol": {
            **protocol,
            "metric": metric,
            "ties": ties,
            "selection": selection_text(task, ties),
            "grid": {k: list(v) for k, v in axes.items()},
            "fixed": dict(fixed),
        },
        "cells": [_cell_doc(c, c is chosen) for c in cells],
    }


def _cell_doc(c: CellScore, chosen: bool) -> dict[str, Any]:
    return {
        "cell": c.index, "label": c.label, "grid": dict(c.grid),
        "params": {k: c.params.get(k, v) for k, v in c.grid.items()},
        "mistake_rate": c.mistake_rate, "mistake_rate_std": c.mistake_rate_std,
        "avg_loss": c.avg_loss, "avg_loss_std": c.avg_loss_std,
        "n_support_vectors": c.n_support_vectors, "seconds": c.seconds,
        "noskill_mistake_rate": c.noskill_mistake_rate, "noskill_avg_loss": c.noskill_avg_loss,
        "top_class_share": c.top_class_share,
        "per_permutation": [{"permutation": r, "mistake_rate": m, "avg_loss": a}
                            for r, m, a in c.per_permutation],
        "chosen": chosen,
    }


def tuned_path(path: str) -> str:
    """``--params-from``'s file: ``path``, or the ``tuned.json`` in it when it is the folder
    of a tuning run (``--params-from runs/tune-a9a-rff-rls``)."""
    if not fs.is_remote(path) and os.path.isdir(path):
        return os.path.join(path, "tuned.json")
    return path


def read_tuned(path: str, text: str | None = None) -> dict[str, Any]:
    """The document of a ``tuned.json`` (``text``: its contents, else read from ``path``);
    :class:`TunedFileError` with one line when it is not one."""
    if text is None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise TunedFileError(f"--params-from {path}: cannot read it "
                                 f"({exc.strerror or exc})") from None
    try:
        doc = json.loads(text)
    except ValueError:
        raise TunedFileError(f"--params-from {path}: not a tuned.json (not JSON)") from None
    if not isinstance(doc, dict) or doc.get("kind") != TUNED_KIND:
        raise TunedFileError(f"--params-from {path}: not a tuned.json written by "
                             "`kernelstream tune`")
    if not isinstance(doc.get("schema"), int) or doc["schema"] > TUNED_SCHEMA:
        raise TunedFileError(f"--params-from {path}: tuned.json schema {doc.get('schema')!r} "
                             f"is newer than this kernelstream reads ({TUNED_SCHEMA})")
    if not isinstance(doc.get("learner"), str) or not isinstance(doc.get("params"), dict):
        raise TunedFileError(f"--params-from {path}: a tuned.json without its learner and "
                             "parameters")
    return doc


def param_text(v: Any) -> str:
    """A parameter value as ``-p`` text that converts back to the same value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)  # shortest text that reads back as the same float
    return str(v)


def apply_tuned(doc: Mapping[str, Any], path: str, learner_specs: Sequence[str],
                param_specs: Sequence[str]) -> tuple[list[str], list[str]]:
    """``replay --params-from``: the ``--learner`` and ``-p`` arguments with the tuned
    parameters added for every configuration of the tuned learner (no ``--learner``: that
    learner alone). A parameter the command line sets for a configuration (``-p key=...``
    or ``-p LABEL.key=...``; ``sigma`` counts as ``gamma``) keeps its value."""
    learner = str(doc["learner"])
    specs = list(learner_specs) or [learner]
    pairs = [parse_learner_spec(s) for s in specs]
    mine = [label for label, name in pairs if name == learner]
    if not mine:
        names = ", ".join(dict.fromkeys(name for _, name in pairs))
        raise TunedFileError(f"--params-from {path} holds parameters of {learner}, not of "
                             f"the run's learner(s) {names}")
    given: dict[str | None, set[str]] = {}
    for spec in param_specs:
        scope, key, _ = parse_param_spec(spec)
        given.setdefault(scope, set()).add("gamma" if key == "sigma" else key)
    out = list(param_specs)
    for label in mine:
        explicit = given.get(None, set()) | given.get(label, set())
        out += [f"{label}.{k}={param_text(v)}" for k, v in doc["params"].items()
                if v is not None and k not in explicit]
    return specs, out


# -- the rows tuned on ----------------------------------------------------------------------------

# The read options that change the rows a tuning run's learners see, with their defaults
# (``pipelines.commands._common``): ``tuned.json`` records them as given (``data.read_args``),
# the suggested replay repeats them and ``replay --params-from`` compares them. ``--limit`` and
# ``--sample`` choose the rows to tune on, not how they read: ``tune`` warns about those.
READ_OPTIONS: dict[str, Any] = {
    "format": None, "label_column": None, "n_features": None, "hash_features": None,
    "positive_label": None, "delimiter": None, "header": None, "task": None, "rows": "auto",
    "scale": "auto", "scale_target": "auto"}


def read_args(args: Any) -> dict[str, Any]:
    """The :data:`READ_OPTIONS` of parsed arguments, as given (before ``auto`` is resolved)."""
    return {k: getattr(args, k, default) for k, default in READ_OPTIONS.items()}


def _flag(key: str, value: Any) -> list[str]:
    flag = "--" + key.replace("_", "-")
    if isinstance(value, bool):  # --header / --no-header
        return [flag if value else "--no-" + flag[2:]]
    return [flag, "not given" if value is None else str(value)]


def read_flags(given: Mapping[str, Any]) -> list[str]:
    """The command-line options that repeat ``given`` (:func:`read_args`): those not at
    their defaults."""
    return [a for k, default in READ_OPTIONS.items()
            if given.get(k, default) != default for a in _flag(k, given[k])]


def _file_bytes(src: str) -> int | None:
    """The size of the file (or embedded set) ``src``; None for a topic or a remote or
    missing file (nothing is fetched to compare)."""
    if is_topic(src):
        return None
    try:
        path = data_path(src)
    except FileNotFoundError:  # an embedded set of a zipped install: no file to measure
        return None
    if fs.is_remote(path):
        return None
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def data_record(src: str) -> dict[str, Any]:
    """What ``tuned.json`` records of the file tuned on, for :func:`tuned_read_options`."""
    return {"source": src, "file_bytes": _file_bytes(src)}


def tuned_read_options(doc: Mapping[str, Any], path: str, args: Any, src: str) -> list[str]:
    """``replay --params-from``: take the tuned run's feature and target scaling when the
    replay of a file gives none (``--scale auto``: in place on ``args``), and one line each for
    what differs from the rows tuned on: the read options (:data:`READ_OPTIONS`, as given;
    a ``tuned.json`` before they were recorded: those it records) and the data file (its
    name, then its size). Returns the lines to print."""
    tuned = doc.get("data") or {}
    given = tuned.get("read_args")
    older = not isinstance(given, dict)
    if not isinstance(given, dict):  # an older tuned.json: its resolved options alone
        given = {k: tuned[k] for k in ("format", "hash_features", "rows", "scale", "task")
                 if tuned.get(k) is not None}
    lines = []
    took = []
    for key in ("scale", "scale_target"):
        value = given.get(key)
        # (a topic decides auto on its first records: no file's ranges to scale by)
        if getattr(args, key, None) == "auto" and value not in (None, "auto") and not is_topic(
                src):
            setattr(args, key, value)
            took += _flag(key, value)
    if took:
        lines.append(f"reading the data as tuned: {' '.join(took)} ({path}; give the option "
                     "to choose otherwise)")
    differ = []
    for key, value in given.items():
        if key not in READ_OPTIONS:
            continue
        mine, resolved = getattr(args, key, READ_OPTIONS[key]), tuned.get(key, value)
        if mine in (value, resolved):
            continue
        # not given: the task is the (tuned) learner's own, a width is decided on this file
        # as it was on the tuned one; an older tuned.json holds resolved values only
        if mine == READ_OPTIONS[key] and (older or key in ("task", "scale", "scale_target")):
            continue
        was = value if value not in (None, READ_OPTIONS[key]) or resolved is None else resolved
        differ.append(f"{' '.join(_flag(key, mine))} (tuned: {_flag(key, was)[-1]})")
    if differ:
        lines.append(f"warning: the read options differ from those the parameters were tuned "
                     f"with ({path}): {', '.join(differ)}")
    name, size = tuned.get("dataset"), tuned.get("file_bytes")
    mine_name, mine_size = display_name(src), _file_bytes(src)
    if name is not None and name != mine_name:
        lines.append(f"warning: the parameters were tuned on {name}, not on {mine_name} "
                     f"({path}): they may not suit these data")
    elif isinstance(size, int) and mine_size is not None and size != mine_size:
        lines.append(f"warning: the parameters were tuned on a {name} of {size:,} bytes, this "
                     f"one has {mine_size:,} ({path}): they may not suit these data")
    return lines


def unbeaten_note(doc: Mapping[str, Any], path: str) -> str | None:
    """``replay --params-from``: a warning when the tuning run found no cell better than the
    replay's untuned default (``baseline.beaten`` false), unless the chosen cell is that
    default itself (then the parameters are the default's own). None otherwise, and for a
    ``tuned.json`` without a baseline (written before tune learnt one)."""
    base = doc.get("baseline")
    if not isinstance(base, Mapping) or base.get("beaten", True):
        return None
    if base.get("cell") is not None and base["cell"] == doc.get("cell"):
        return None
    metric = (doc.get("score") or {}).get("metric", "mistake_rate")
    unit = "%" if metric == "mistake_rate" else ""
    chosen = (doc.get("score") or {}).get("value")
    fixed = " ".join(f"{k}={v}" for k, v in (base.get("fixed") or {}).items())
    default = " ".join(x for x in (str(base.get("learner")), fixed) if x)
    return (f"warning: {path}: its chosen cell ({metric.replace('_', ' ')} {chosen:.4g}{unit}) "
            f"did not beat the untuned default ({default}: {base.get(metric):.4g}{unit}) when "
            "tuned; the replay without --params-from runs that default")


def overlap_note(doc: Mapping[str, Any], seed: int, permutations: int) -> str | None:
    """A note when a replay's evaluation permutations 0..R-1 include a tuning permutation of
    ``doc`` (same seed): the evaluation would score streams the parameters were chosen on."""
    proto = doc.get("protocol", {})
    tuned = [int(r) for r in proto.get("permutations", [])]
    if proto.get("seed") != seed:
        return None
    seen = sorted(r for r in tuned if r < permutations)
    if not seen:
        return None
    return (f"evaluation permutations 0..{permutations - 1} include the tuning "
            f"permutation(s) {', '.join(map(str, seen))} (seed {seed}) the parameters were "
            "chosen on")
