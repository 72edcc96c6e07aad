"""``kernelstream tune DATA [-l LEARNER] [--grid key=v1,v2,... ...] [--random N]``.

The cells of the grid become the learner configurations of one replay run (labels
``cell00``, ``cell01``, ...) over the held-out tuning permutations ``--tune-perm`` onwards
(default 1000; a replay evaluates 0..R-1), so they are learnt by the replay's own machinery
(``pipelines.replay.replay``: the loop or the Beam pipeline, ``--workers N`` processes) like any
grid. Beside the cells, the configuration ``replay DATA`` runs (:data:`BASELINE`; the default
learner with its fixed parameters, which no ``-l``, or ``-l`` naming that learner, also tunes)
is learnt once as the baseline the choice must beat. The choice, ``tuned.json`` and its table
are :mod:`kernelstream.experiments.tuning`'s; ``replay --params-from OUT/tuned.json`` runs the
chosen parameters, read as they were tuned (the suggested command repeats the read options).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelstream import __version__, fs, learners
from kernelstream._json import json_safe
from kernelstream.data import widths
from kernelstream.engine.noskill import skill_warnings
from kernelstream.errors import ConfigError
from kernelstream.experiments import tuning, tuning_table
from kernelstream.pipelines import run_folder
from kernelstream.pipelines.commands._common import (
    Command,
    add_overwrite_argument,
    add_prepare_arguments,
    add_read_arguments,
    error,
)
from kernelstream.pipelines.commands._runs import (
    RefusedError,
    build_summary,
    execute,
    started,
    write_summary,
)
from kernelstream.pipelines.commands.replay import run_shard
from kernelstream.pipelines.config import (
    DEFAULT_BY_ROWS,
    DEFAULT_LEARNERS,
    PROG,
    check_at_least,
    check_limit,
    display_name,
    is_topic,
    learner_configs,
    parse_learner_spec,
    runners_for,
)
from kernelstream.pipelines.replay import sample_rows
from kernelstream.pipelines.replay.replay_args import (
    ReplayConfig,
    resolve_read,
    shard_arg,
    workers_arg,
)
from kernelstream.pipelines.replay.replay_checks import check_source

if TYPE_CHECKING:
    from kernelstream.engine.evaluate import EvalResult

TUNED_FILE = "tuned.json"
TABLE_FILE = "tuned.md"
SEEDING = ("permutation r = seeding.permutation(n, seed, r), i.e. SeedSequence([seed, r]), "
           "learner seed (seed, r, learner), as a replay draws r = 0..R-1: disjoint from the "
           "evaluation permutations for R <= the first tuning permutation")
# replay options that tune does not offer (a tuning run is a permuted replay of a data file)
_REPLAY_ONLY = {"stream": "none", "key_by": None, "kafka_idle": 5.0, "kafka_max_seconds": None,
                "kafka_out": None, "kafka_option": None, "checkpoint": None, "follow": None,
                "follow_runs": None, "params_from": None}


COMMAND = Command(
    "tune", help="choose hyper-parameters on held-out permutations (a grid replay)",
    description=(
        "Replay DATA for every cell of a hyper-parameter grid on the tuning permutations\n"
        "(r = --tune-perm onwards, never a replay's evaluation permutations 0..R-1), pick\n"
        "the cell with the lowest mistake rate (regression: average loss; ties: the\n"
        "earlier cell in grid order, or --ties loss), and write DIR/tuned.json (the\n"
        "parameters, every cell's score, the protocol) and DIR/tuned.md. The cells are the\n"
        "configurations of one replay run, so --workers N spreads them like any grid.\n"
        "Without -l it tunes what `replay DATA` runs (its learner and fixed parameters);\n"
        "the table ends with that default, untuned, and the no-skill rate of the same\n"
        "streams, and tune says when no cell beats the default."
    ),
    epilog=(
        "examples:\n"
        f"  {PROG} tune a9a --limit 5000\n"
        f"  {PROG} tune german -l bpa-s -p budget=100 -p gamma=0.0625 --grid c=0.25,0.5,1,2\n"
        f"  {PROG} tune a9a -l bogd -p budget=200 --grid eta=0.01,0.1,1 "
        "--grid lam=0.001,0.01 -j 2\n"
        f"  {PROG} replay a9a --params-from runs/tune-a9a-bogd/tuned.json -R 20"
    ),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``tune``'s arguments and handler (definitions only: no Beam)."""
    p.add_argument("data", metavar="DATA", help="embedded data set name or file path")
    p.add_argument("--learner", "-l", metavar="NAME",
                   help=f"the learner to tune (see `{PROG} learners`; default: the one `{PROG} "
                   "replay DATA` runs, with its fixed parameters, e.g. rff-rls "
                   "n_components=500 on dense rows, which it also starts from when named)")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="a fixed hyper-parameter of every cell (repeatable)")
    p.add_argument("--grid", "-g", action="append", metavar="KEY=V1,V2,...",
                   help="values of one hyper-parameter (repeatable: the cells are the product, "
                   "the first --grid varying slowest); 'auto' or 'auto*F' for a width is the "
                   "data-driven one (times F); default: the Gaussian width around it, "
                   f"{widths.tune_grid()}")
    p.add_argument("--random", type=int, metavar="N",
                   help="evaluate N cells of the grid drawn at random (seeded by --seed), for "
                   "large grids")
    p.add_argument("--seed", type=int, default=0,
                   help="base seed of the permutations, learners and --random (default: 0)")
    p.add_argument("--tune-perm", type=int, default=tuning.TUNE_PERM, metavar="R0",
                   help="the first tuning permutation index (default: "
                   f"{tuning.TUNE_PERM}, as the reproduction scripts)")
    p.add_argument("--tune-permutations", type=int, default=1, metavar="T",
                   help="tune on the mean over T permutations R0..R0+T-1 (default: 1, as the "
                   "papers: one permutation)")
    p.add_argument("--tune-rows", type=int, metavar="N",
                   help="learn only the first N positions of each tuning permutation (for "
                   "large data sets)")
    p.add_argument("--ties", choices=tuning.TIES, default="grid",
                   help="equal mistake rates: the earlier cell in grid order (grid, the "
                   "baselines' rule) or the lower average loss first (loss, as P3's SkeGD "
                   "tuning) (default: grid)")
    d = p.add_argument_group("data", "read options, as for replay")
    add_read_arguments(d)
    add_prepare_arguments(d)
    p.add_argument("--out", "-o", metavar="DIR",
                   help="output directory (default: runs/tune-<dataset>-<learner>); new, "
                   "empty, or a previous run with --overwrite")
    add_overwrite_argument(p)
    p.add_argument("--runner", choices=runners_for("tune"), default="direct",
                   help="direct: Apache Beam in-process; loop: the plain reference loop "
                   "(default: direct)")
    p.add_argument("--workers", "-j", type=workers_arg, default=1, metavar="N",
                   help="learn the cells in N processes, as replay --workers (default: 1)")
    p.add_argument("--shard", type=shard_arg, default=None, help=argparse.SUPPRESS)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=cmd_tune)


def _labels(cells: Sequence[int], n_cells: int) -> list[str]:
    width = len(str(max(n_cells - 1, 0)))
    return [f"cell{i:0{width}d}" for i in cells]


@dataclass(frozen=True)
class TuneConfig:
    """A ``kernelstream tune`` run: the replay that learns the grid (``replay``: one learner
    configuration per evaluated cell, on the tuning permutations), the grid's ``axes``, its
    ``cells`` and the evaluated cells' indices (``chosen``), the fixed ``-p`` values, how
    ties are broken, ``--random``, ``--overwrite`` and the command line."""

    replay: ReplayConfig
    axes: dict[str, list[str]]
    cells: tuple[dict[str, str], ...]
    chosen: tuple[int, ...]
    fixed: tuple[str, ...] = ()
    ties: str = "grid"
    random: int | None = None
    overwrite: bool = False
    argv: tuple[str, ...] = ()
    # the configuration ``replay DATA`` runs (learner, fixed parameters; widths auto), learnt
    # beside the cells as the table's baseline: the label of its configuration (a cell's when
    # a cell is the same configuration)
    baseline: str | None = None
    baseline_learner: str | None = None
    baseline_fixed: tuple[tuple[str, str], ...] = ()
    data: str = ""  # DATA as given (the suggested replay's)
    read_args: tuple[tuple[str, Any], ...] = ()  # tuning.read_args: the read options given

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: Sequence[str]) -> TuneConfig:
        """``tune``'s arguments → its config (``ValueError`` with the one line to print)."""
        if is_topic(args.data):
            raise ConfigError("tune replays permutations of a data file; a Kafka topic is one "
                              "stream in its own order")
        check_limit(args)  # before default_configuration reads the file's first rows
        check_source(args.data, args.runner)
        name = None
        if args.learner:
            label, name = parse_learner_spec(args.learner)
            if label != name:
                raise ConfigError(f"--learner {args.learner!r}: give the learner's name alone")
        user = list(args.param or [])
        base_name, base_params = default_configuration(args, name, user)
        name = name or base_name
        grid = args.grid
        # -p kernel=linear (or polynomial): a width that changes nothing, every cell alike
        kernel = next((v.strip() for k, _, v in (s.partition("=") for s in reversed(user))
                       if k.strip() == "kernel"), "gaussian")
        if not grid:  # the learner's Gaussian width, around the data-driven one
            if not any(p.name == "gamma" for p in learners.get(name).params):
                raise ConfigError(f"{name} has no Gaussian width to tune by default: give "
                                  "--grid KEY=V1,V2,...")
            if kernel != "gaussian":
                raise ConfigError(f"{name} with kernel={kernel} has no Gaussian width to "
                                  "tune: give --grid KEY=V1,V2,...")
            grid = [widths.tune_grid()]
        axes = tuning.parse_grid(grid)
        if kernel != "gaussian" and {"gamma", "sigma"} & set(axes):
            raise ConfigError(f"--grid {next(iter({'gamma', 'sigma'} & set(axes)))}=...: "
                              f"kernel={kernel} has no Gaussian width (every cell alike)")
        given = {_width(spec.partition("=")[0].strip()) for spec in user} | set(map(_width, axes))
        # the default learner starts from the default's fixed parameters (n_components=500),
        # unless -p or --grid sets them
        fixed = [f"{k}={v}" for k, v in base_params.items()
                 if name == base_name and _width(k) not in given] + user
        for spec in user:
            key = spec.partition("=")[0].strip()
            if "." in key:
                raise ConfigError(f"-p {spec!r}: tune has one learner; give -p KEY=VALUE")
            width = {"sigma", "gamma"}
            both = key if key in axes else next(iter(width & set(axes) - {key}), None)
            if both is not None and (key in axes or key in width):
                raise ConfigError(f"-p {key}=... and --grid {both}=...: give each parameter once")
        check_at_least(args, tune_perm=0, tune_permutations=1, tune_rows=1)
        cells = tuning.grid_cells(axes)
        chosen = (list(range(len(cells))) if args.random is None
                  else tuning.random_cells(len(cells), args.random, args.seed))
        labels = _labels(chosen, len(cells))
        ns = argparse.Namespace(**vars(args))
        for k, v in _REPLAY_ONLY.items():
            setattr(ns, k, getattr(ns, k, v))
        ns.learner = [f"{lab}={name}" for lab in labels] + [f"{BASELINE}={base_name}"]
        # every -p scoped to the cells: the baseline is the plain default
        ns.param = ([f"{lab}.{spec.strip()}" for lab in labels for spec in fixed]
                    + [f"{lab}.{k}={v}" for lab, i in zip(labels, chosen, strict=True)
                       for k, v in cells[i].items()]
                    + [f"{BASELINE}.{k}={v}" for k, v in base_params.items()])
        ns.permutations = args.tune_permutations
        if not args.out:
            ns.out = str(Path("runs") / f"tune-{display_name(args.data)}-{name}")
        replay = ReplayConfig.from_args(ns, argv)
        replay = replace(replay, first_permutation=args.tune_perm, stream_rows=args.tune_rows)
        # a cell that is the default configuration is learnt once (the same learner, seeds
        # and parameters give the same scores)
        base = replay.learners[-1]
        same = next((c.label for c in replay.learners[:-1]
                     if (c.learner, dict(c.params), c.target)
                     == (base.learner, dict(base.params), base.target)), None)
        if same is not None:
            replay = replace(replay, learners=replay.learners[:-1])
        return cls(replay=replay, axes=axes, cells=tuple(cells), chosen=tuple(chosen),
                   fixed=tuple(fixed), ties=args.ties, random=args.random,
                   overwrite=args.overwrite, argv=tuple(argv), baseline=same or BASELINE,
                   baseline_learner=base_name, baseline_fixed=tuple(base_params.items()),
                   data=args.data, read_args=tuple(tuning.read_args(args).items()))


BASELINE = "default"  # the label of the replay default's configuration in a tuning run


def _width(key: str) -> str:
    return "gamma" if key == "sigma" else key


def default_configuration(args: argparse.Namespace, name: str | None,
                          fixed: Sequence[str]) -> tuple[str, dict[str, str]]:
    """The learner and fixed parameters ``replay DATA`` runs on ``tune``'s data
    (``DEFAULT_BY_ROWS`` by the task and the file's rows, as ``ReplayConfig.from_args``
    chooses): for the task of learner ``name`` with ``fixed`` when one is named."""
    task = args.task
    if task is None and name is not None:  # the tuned learner's task (a stand-in width)
        task = learner_configs([name], fixed, auto_width=lambda: 1.0)[0].task
    task = task or "classification"
    # the read options resolved as the replay resolves them (--scale auto first: scaled rows
    # are dense), on a copy: the replay of the cells resolves them again and records why;
    # --sample: on the drawn rows, drawn here once (kept in args for that replay)
    drawn = sample_rows.drawn_sample(args, args.data)
    _, _, rows = resolve_read(argparse.Namespace(**{**_REPLAY_ONLY, **vars(args)}),
                              args.data if drawn is None else drawn.rows)
    base_name, params = (DEFAULT_BY_ROWS[task][rows] if rows is not None
                         else DEFAULT_LEARNERS.get(task, DEFAULT_LEARNERS["classification"]))
    return base_name, dict(params)


def cmd_tune(args: argparse.Namespace, argv: Sequence[str]) -> int:
    try:
        tune = TuneConfig.from_args(args, argv)
    except ValueError as exc:  # unknown learner, bad grid or parameter, inconsistent options
        return error("tune", str(exc))
    return run_tune(tune)


def run_tune(tune: TuneConfig) -> int:
    """The tuning run of ``tune``: the grid learnt, ``tuned.json``, its table and the choice
    printed; the exit code."""
    config, axes, cells, chosen = tune.replay, tune.axes, list(tune.cells), list(tune.chosen)
    if config.shard is not None:  # a worker process of --workers: its share of the cells
        return run_shard(config)
    try:
        with started(config, "tune", tune.overwrite) as pool:
            if not config.quiet:
                fixed = "".join(f" {spec}" for spec in tune.fixed)
                print(f"[tune] {config.learners[0].learner}{fixed}: {len(chosen)} of "
                      f"{len(cells)} cells x {config.permutations} tuning permutation(s) from "
                      f"r = {config.first_permutation}, beside the replay default "
                      f"({_baseline_text(tune)})", file=sys.stderr, flush=True)
            run = execute(config, "tune", pool)
    except RefusedError as exc:
        return exc.code
    if isinstance(run, int):  # the run failed: its error is printed
        return run
    doc = tuned_document(tune, run.results)
    write_summary(build_summary(config, run), config.out)
    path, table = write_tuned(doc, config.out)
    print(tuning_table.format_table(doc))
    if doc["baseline"] is not None:
        print(f"default: {_baseline_text(tune)}, untuned (replay {tune.data}'s configuration"
              + ("" if doc["baseline"]["cell"] is None else
                 f", the same configuration as cell {doc['baseline']['cell']}") + ")")
    best = ", ".join(f"{k}={tuning.param_text(v)}" for k, v in doc["tuned"].items())
    score = doc["score"]
    print(f"chosen: {best} (" + _score_text(score["metric"], score["value"]) + ")")
    replay = [PROG, "replay", tune.data, *tuning.read_flags(dict(tune.read_args))]
    base = doc["baseline"]
    if base is None or base["beaten"]:
        print(f"tuned: {path}  (table: {table}; use: "
              f"{shlex.join([*replay, '--params-from', path])})")
    else:  # tuning made nothing better: the default run is the one to use
        metric = score["metric"]
        # the usual path ran `replay DATA` before tune: its folder holds that run already
        made = Path("runs") / f"{display_name(tune.data)}-{tune.baseline_learner}"
        use = shlex.join(replay) + (
            f" (the run in {made}, if it was made with these options: no need to run it again)"
            if run_folder.inspect(str(made)).run is not None else "")
        print(f"tuned: {path}  (table: {table})\nno cell beats the default "
              f"({_baseline_text(tune)}: {_score_text(metric, base[metric])}): use the "
              f"default: {use}")
    # replay's warnings, on the chosen cell: no better than ignoring the features
    [cell] = [c for c in doc["cells"] if c["chosen"]]
    for line in skill_warnings(f"chosen cell {doc['cell']}", cell):
        print(f"{PROG} tune: {line}", file=sys.stderr)
    auto = next((float(c["params"]["gamma"]) / f for c in doc["cells"]
                 if (f := widths.auto_factor(c["grid"].get("gamma"))) is not None), None)
    lines = tune_warnings(axes, cells[doc["cell"]], config.read.limit, auto=auto,
                          sample=None if config.sample is None else config.sample[1])
    gain = _gain_warning(tune, run.results, doc)
    for line in [*lines, *([gain] if gain else [])]:
        print(f"{PROG} tune: warning: {line}", file=sys.stderr)
    return 0


def _gain_warning(tune: TuneConfig, results: Sequence[EvalResult],
                  doc: dict[str, Any]) -> str | None:
    """:func:`tuning.gain_warning` of the chosen cell against the replay default."""
    by_label = {r.label: r for r in results}
    base = None if tune.baseline is None else by_label.get(tune.baseline)
    chosen = next((r for r in results if r.label != tune.baseline
                   and _cell_of(tune, r.label) == doc["cell"]), None)
    if base is None or chosen is None or doc["baseline"] is None:
        return None
    examples = chosen.runs[0].examples if chosen.runs else None
    return tuning.gain_warning(_score(chosen, doc["cell"], chosen.label, {}),
                               _score(base, -1, base.label, {}), tune.replay.read.task,
                               examples)


def _cell_of(tune: TuneConfig, label: str) -> int | None:
    """The grid index of the evaluated cell ``label`` (None: not a cell)."""
    chosen = list(tune.chosen)
    return next((i for lab, i in zip(_labels(chosen, len(tune.cells)), chosen, strict=True)
                 if lab == label), None)


def _baseline_text(tune: TuneConfig) -> str:
    return " ".join([str(tune.baseline_learner), *(f"{k}={v}" for k, v in tune.baseline_fixed)])


def _score_text(metric: str, value: float | None) -> str:
    if value is None:
        return "no score"
    return (f"mistake rate {value:.4f}%" if metric == "mistake_rate"
            else f"average loss {value:.6g}")


def _axis_value(value: str, auto: float | None) -> float | None:
    """A grid value as a number to order its axis by: ``auto*F`` as F times the data-driven
    width ``auto`` (as F alone when it is not known); None for a name."""
    factor = widths.auto_factor(value)
    if factor is not None:
        return factor if auto is None else factor * auto
    try:
        return float(value)
    except ValueError:
        return None


def tune_warnings(axes: dict[str, list[str]], chosen: dict[str, str],
                  limit: int | None, *, auto: float | None = None,
                  sample: int | None = None) -> list[str]:
    """One line per reason to distrust the choice: a chosen value at the edge of a numeric
    grid axis (the best may lie beyond it; of two values, either is an edge; ``auto*F``
    values are ordered as F times the data-driven width ``auto``, by F when every value is
    one), and a choice made on the first ``limit`` rows or on ``sample`` random rows, which
    the suggested replay drops."""
    lines = []
    for key, values in axes.items():
        numbers = [_axis_value(v, auto) for v in values]
        mixed = auto is None and any(widths.is_auto(v) for v in values) and not all(
            widths.is_auto(v) for v in values)
        at = _axis_value(chosen.get(key, ""), auto)
        if at is None or mixed:  # a choice of names (kernel=...): no edge
            continue
        nums = sorted({v for v in numbers if v is not None})
        if len(nums) < len(set(numbers)):  # names among the numbers
            continue
        if len(nums) < 2 or at is None or nums[0] < at < nums[-1]:
            continue
        side, beyond = (("smallest", "below") if at == nums[0] else ("largest", "above"))
        lines.append(f"{key}={chosen[key]} is the {side} value of its grid "
                     f"({', '.join(values)}): the best may lie {beyond} it; extend --grid "
                     f"{key}=...")
    if limit is not None:
        lines.append(f"tuned on the first {limit} rows (--limit {limit}); the suggested replay "
                     "runs the whole file, where another value may be best (add --limit "
                     f"{limit} to replay the rows it was tuned on)")
    if sample is not None:
        lines.append(f"tuned on {sample} random rows (--sample {sample}); the suggested replay "
                     "runs the whole file, where another value may be best")
    return lines


def _score(r: EvalResult, index: int, label: str, grid: dict[str, str]) -> tuning.CellScore:
    s = r.to_summary()
    return tuning.CellScore(
        index=index, label=label, grid=grid, params=dict(r.params),
        mistake_rate=s["mistake_rate"], avg_loss=float(s["avg_loss"] or 0.0),
        mistake_rate_std=s["mistake_rate_std"], avg_loss_std=s["avg_loss_std"],
        n_support_vectors=s["n_support_vectors"], seconds=s["seconds"],
        per_permutation=[(p.permutation, p.mistake_rate, p.avg_loss) for p in r.runs],
        noskill_mistake_rate=s["noskill_mistake_rate"], noskill_avg_loss=s["noskill_avg_loss"],
        top_class_share=s["top_class_share"])


def tuned_document(tune: TuneConfig, results: Sequence[EvalResult]) -> dict[str, Any]:
    """The ``tuned.json`` document of a finished tuning run."""
    config, axes, cells, chosen = tune.replay, tune.axes, list(tune.cells), list(tune.chosen)
    by_label = {r.label: r for r in results}
    scores = [_score(by_label[label], i, label, cells[i])
              for label, i in zip(_labels(chosen, len(cells)), chosen, strict=True)]
    baseline = None
    if tune.baseline in by_label:
        # a cell that is the default configuration is its row too
        index = next((i for label, i in zip(_labels(chosen, len(cells)), chosen, strict=True)
                      if label == tune.baseline), -1)
        baseline = _score(by_label[tune.baseline], index, tune.baseline, {})
    first = by_label[scores[0].label]
    best = tuning.choose(scores, config.read.task, tune.ties)
    if (baseline is not None and baseline.index >= 0
            and not tuning.beats(best, baseline, config.read.task)):
        # a tie with the default, itself a cell: the default stays (a value at the grid's
        # edge that is no better must not be suggested, nor warned about)
        best = next(c for c in scores if c.index == baseline.index)
    src = tune.data or config.dataset
    doc = tuning.tuned_doc(
        learner=first.learner, task=config.read.task, loss=first.loss, cells=scores, chosen=best,
        ties=tune.ties, axes=axes,
        fixed=dict(spec.split("=", 1) for spec in tune.fixed),
        data={"dataset": config.dataset, "data": config.data, "examples": first.examples,
              "n_features": first.n_features, "task": config.read.task, "format": config.read.fmt,
              "scale": config.read.scale, "scale_target": config.read.scale_target,
              "limit": config.read.limit, "hash_features": config.read.hash_features,
              "rows": config.read.rows,
              "sample": None if config.sample is None else config.sample[1],
              **tuning.data_record(src), "read_args": dict(tune.read_args)},
        protocol={"seed": config.seed, "tune_perm": config.first_permutation,
                  "tune_permutations": config.permutations,
                  "permutations": list(range(config.first_permutation,
                                             config.first_permutation + config.permutations)),
                  "rows": config.stream_rows, "random": tune.random,
                  "cells_in_grid": len(cells), "seeding": SEEDING, "runner": config.runner,
                  "argv": list(tune.argv)},
        version=__version__, created=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        baseline=baseline, baseline_learner=tune.baseline_learner,
        baseline_fixed=dict(tune.baseline_fixed))
    return doc


def write_tuned(doc: dict[str, Any], out: str) -> tuple[str, str]:
    """``OUT/tuned.json`` and ``OUT/tuned.md`` (each written whole or not at all)."""
    path, table = fs.join(out, TUNED_FILE), fs.join(out, TABLE_FILE)
    fs.write_bytes_atomic(path, (json.dumps(json_safe(doc), indent=2, allow_nan=False)
                                 + "\n").encode())
    fs.write_bytes_atomic(table, tuning_table.format_markdown(doc).encode())
    return path, table
