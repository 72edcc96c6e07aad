"""``kernelstream tune DATA -l LEARNER --grid key=v1,v2,... [--grid ...] [--random N]``.

The cells of the grid become the learner configurations of one replay run (labels
``cell00``, ``cell01``, ...) over the held-out tuning permutations ``--tune-perm`` onwards
(default 1000; a replay evaluates 0..R-1), so they are learnt by the replay's own machinery
(``pipelines.replay.replay``: the loop or the Beam pipeline, ``--workers N`` processes) like any
grid. The choice, ``tuned.json`` and its table are :mod:`kernelstream.experiments.tuning`'s;
``replay --params-from OUT/tuned.json`` runs the chosen parameters.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelstream import __version__, fs, learners
from kernelstream._json import json_safe
from kernelstream.data import widths
from kernelstream.errors import ConfigError
from kernelstream.experiments import tuning
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
    PROG,
    check_at_least,
    display_name,
    is_topic,
    parse_learner_spec,
    runners_for,
)
from kernelstream.pipelines.replay.replay_args import ReplayConfig, shard_arg, workers_arg

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
        "configurations of one replay run, so --workers N spreads them like any grid."
    ),
    epilog=(
        "examples:\n"
        f"  {PROG} tune german -l bpa-s -p budget=100 -p sigma=2.83 --grid c=0.25,0.5,1,2\n"
        f"  {PROG} tune a9a -l bogd -p budget=200 --grid eta=0.01,0.1,1 "
        "--grid lam=0.001,0.01 -j 2\n"
        f"  {PROG} replay a9a --params-from runs/tune-a9a-bogd/tuned.json -R 20"
    ),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``tune``'s arguments and handler (definitions only: no Beam)."""
    p.add_argument("data", metavar="DATA", help="embedded data set name or file path")
    p.add_argument("--learner", "-l", required=True, metavar="NAME",
                   help=f"the learner to tune (see `{PROG} learners`)")
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

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: Sequence[str]) -> TuneConfig:
        """``tune``'s arguments → its config (``ValueError`` with the one line to print)."""
        if is_topic(args.data):
            raise ConfigError("tune replays permutations of a data file; a Kafka topic is one "
                              "stream in its own order")
        label, name = parse_learner_spec(args.learner)
        if label != name:
            raise ConfigError(f"--learner {args.learner!r}: give the learner's name alone")
        grid = args.grid
        if not grid:  # the learner's Gaussian width, around the data-driven one
            if not any(p.name == "gamma" for p in learners.get(name).params):
                raise ConfigError(f"{name} has no Gaussian width to tune by default: give "
                                  "--grid KEY=V1,V2,...")
            grid = [widths.tune_grid()]
        axes = tuning.parse_grid(grid)
        fixed = list(args.param or [])
        for spec in fixed:
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
        ns.learner = [f"{lab}={name}" for lab in labels]
        ns.param = fixed + [f"{lab}.{k}={v}" for lab, i in zip(labels, chosen, strict=True)
                            for k, v in cells[i].items()]
        ns.permutations = args.tune_permutations
        if not args.out:
            ns.out = str(Path("runs") / f"tune-{display_name(args.data)}-{name}")
        replay = ReplayConfig.from_args(ns, argv)
        replay = replace(replay, first_permutation=args.tune_perm, stream_rows=args.tune_rows)
        return cls(replay=replay, axes=axes, cells=tuple(cells), chosen=tuple(chosen),
                   fixed=tuple(fixed), ties=args.ties, random=args.random,
                   overwrite=args.overwrite, argv=tuple(argv))


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
                print(f"[tune] {config.learners[0].learner}: {len(chosen)} of {len(cells)} cells x "
                      f"{config.permutations} tuning permutation(s) from r = "
                      f"{config.first_permutation}", file=sys.stderr, flush=True)
            run = execute(config, "tune", pool)
    except RefusedError as exc:
        return exc.code
    if isinstance(run, int):  # the run failed: its error is printed
        return run
    doc = tuned_document(tune, run.results)
    write_summary(build_summary(config, run), config.out)
    path, table = write_tuned(doc, config.out)
    print(tuning.format_table(doc))
    best = ", ".join(f"{k}={tuning.param_text(v)}" for k, v in doc["tuned"].items())
    score = doc["score"]
    print(f"chosen: {best} (" + (f"mistake rate {score['value']:.4f}%" if score["metric"]
                                 == "mistake_rate" else f"average loss {score['value']:.6g}")
          + ")")
    print(f"tuned: {path}  (table: {table}; use: {PROG} replay {config.data} --params-from "
          f"{path})")
    for line in tune_warnings(axes, cells[doc["cell"]], config.read.limit):
        print(f"{PROG} tune: warning: {line}", file=sys.stderr)
    return 0


def tune_warnings(axes: dict[str, list[str]], chosen: dict[str, str],
                  limit: int | None) -> list[str]:
    """One line per reason to distrust the choice: a chosen value at the edge of a numeric
    grid axis (the best may lie beyond it; of two values, either is an edge), and a choice
    made on the first ``limit`` rows, which the suggested replay drops."""
    lines = []
    for key, values in axes.items():
        try:
            nums = sorted({float(v) for v in values})
            at = float(chosen[key])
        except (KeyError, ValueError):  # a choice of names (kernel=...): no edge
            continue
        if len(nums) < 2 or nums[0] < at < nums[-1]:
            continue
        side, beyond = (("smallest", "below") if at == nums[0] else ("largest", "above"))
        lines.append(f"{key}={chosen[key]} is the {side} value of its grid "
                     f"({', '.join(values)}): the best may lie {beyond} it; extend --grid "
                     f"{key}=...")
    if limit is not None:
        lines.append(f"tuned on the first {limit} rows (--limit {limit}); the suggested replay "
                     "runs the whole file, where another value may be best (add --limit "
                     f"{limit} to replay the rows it was tuned on)")
    return lines


def tuned_document(tune: TuneConfig, results: Sequence[EvalResult]) -> dict[str, Any]:
    """The ``tuned.json`` document of a finished tuning run."""
    config, axes, cells, chosen = tune.replay, tune.axes, list(tune.cells), list(tune.chosen)
    by_label = {r.label: r for r in results}
    scores = []
    for label, i in zip(_labels(chosen, len(cells)), chosen, strict=True):
        r = by_label[label]
        s = r.to_summary()
        scores.append(tuning.CellScore(
            index=i, label=label, grid=cells[i], params=dict(r.params),
            mistake_rate=s["mistake_rate"], avg_loss=float(s["avg_loss"] or 0.0),
            mistake_rate_std=s["mistake_rate_std"], avg_loss_std=s["avg_loss_std"],
            n_support_vectors=s["n_support_vectors"], seconds=s["seconds"],
            per_permutation=[(p.permutation, p.mistake_rate, p.avg_loss) for p in r.runs]))
    first = results[0]
    best = tuning.choose(scores, config.read.task, tune.ties)
    return tuning.tuned_doc(
        learner=first.learner, task=config.read.task, loss=first.loss, cells=scores, chosen=best,
        ties=tune.ties, axes=axes,
        fixed=dict(spec.split("=", 1) for spec in tune.fixed),
        data={"dataset": config.dataset, "data": config.data, "examples": first.examples,
              "n_features": first.n_features, "task": config.read.task, "format": config.read.fmt,
              "scale": config.read.scale, "scale_target": config.read.scale_target,
              "limit": config.read.limit, "hash_features": config.read.hash_features,
              "rows": config.read.rows,
              "sample": None if config.sample is None else config.sample[1]},
        protocol={"seed": config.seed, "tune_perm": config.first_permutation,
                  "tune_permutations": config.permutations,
                  "permutations": list(range(config.first_permutation,
                                             config.first_permutation + config.permutations)),
                  "rows": config.stream_rows, "random": tune.random,
                  "cells_in_grid": len(cells), "seeding": SEEDING, "runner": config.runner,
                  "argv": list(tune.argv)},
        version=__version__, created=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))


def write_tuned(doc: dict[str, Any], out: str) -> tuple[str, str]:
    """``OUT/tuned.json`` and ``OUT/tuned.md`` (each written whole or not at all)."""
    path, table = fs.join(out, TUNED_FILE), fs.join(out, TABLE_FILE)
    fs.write_bytes_atomic(path, (json.dumps(json_safe(doc), indent=2, allow_nan=False)
                                 + "\n").encode())
    fs.write_bytes_atomic(table, tuning.format_markdown(doc).encode())
    return path, table
