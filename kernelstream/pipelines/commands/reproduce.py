"""``kernelstream reproduce {baselines,p0,p3,...,all}``: the papers' tables, published beside ours.

Each paper's protocol lives in ``kernelstream.experiments.<paper>`` (Beam-free: its tables as
grids of keys, the published numbers, the verdicts, the markdown and JSON it writes); its runs
are keys of the replay pipeline (``experiments.grid``), so ``--runner``, ``--workers`` and
Beam's options after ``--`` work as they do for ``replay``. The tuned parameters are the
package's (``kernelstream/experiments/tuned/``); ``--retune`` first redoes the paper's tuning
protocol (``experiments.retune``; docs/protocols.md) and evaluates with what it chose.
"""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile
from pathlib import Path
from typing import Any

from kernelstream.errors import ProtocolError
from kernelstream.experiments.grid import Context, ReplayError
from kernelstream.experiments.protocol import Options
from kernelstream.pipelines.commands._common import Command, error
from kernelstream.pipelines.config import PROG, runners_for
from kernelstream.pipelines.replay.replay_args import workers_arg

# paper -> module of kernelstream.experiments, in the order ``all`` runs them
PAPERS = {"baselines": "baselines", "p0": "p0", "p1": "p1", "p2": "p2", "p3": "p3", "p4": "p4"}


def default_out_dir(paper: str) -> Path:
    """Where ``reproduce PAPER`` writes without ``--out-dir``: ``runs/reproduce-PAPER``,
    relative to the current directory."""
    return Path("runs") / f"reproduce-{paper}"


def _csv(s: str) -> list[str]:
    return [v.strip() for v in s.split(",") if v.strip()]


COMMAND = Command(
    "reproduce", help="rerun a paper's tables and judge them against the published numbers",
    description=(
        "Runs a paper's tables with the committed tuned parameters (package data), as keys of\n"
        "the replay pipeline, and writes TABLE.md (published beside ours, PASS/FAIL, the\n"
        "machine) and TABLE.json into --out-dir (default: runs/reproduce-PAPER; never the\n"
        "checkout's committed benchmarks/results/ unless named). --retune first redoes the\n"
        "paper's tuning protocol on the held-out permutation 1000 (its grids and selection\n"
        "rule; p2: the time-budget matching of this machine), writes the tuned file into\n"
        "--out-dir and evaluates with it (see docs/protocols.md). Beam pipeline options go\n"
        "after `--`."
    ),
    epilog=(
        "examples:\n"
        f"  {PROG} reproduce baselines --data-dir ~/datasets --workers 2\n"
        f"  {PROG} reproduce p3 --tables p3-3 --datasets german -R 2 --out-dir /tmp/p3\n"
        f"  {PROG} reproduce p0 --datasets german --retune --out-dir /tmp/p0\n"
        f"  {PROG} reproduce all -- --direct_num_workers=2 "
        "--direct_running_mode=multi_processing"
    ),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``reproduce``'s arguments and handler (definitions only)."""
    p.add_argument("paper", choices=(*PAPERS, "all"),
                   help="the tables to reproduce (all: " + ", ".join(PAPERS) + ")")
    env = os.environ.get("KERNELSTREAM_DATA")
    p.add_argument("--data-dir", type=Path, default=Path(env) if env else None,
                   help="directory of the data set files (default: $KERNELSTREAM_DATA)")
    p.add_argument("--tables", type=_csv, metavar="T[,T...]",
                   help="only these tables of the paper (default: all; names in the module's "
                   "TABLES, e.g. p3,p4,diag for baselines)")
    p.add_argument("--datasets", type=_csv, metavar="D[,D...]",
                   help="only these data sets (default: all of the paper's)")
    p.add_argument("--permutations", "-R", type=int, metavar="R",
                   help="permutations per configuration (default: the paper's protocol)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default: 0)")
    p.add_argument("--out-dir", type=Path,
                   help="where TABLE.md/.json go (default: runs/reproduce-PAPER in the current "
                   "directory; the committed results are benchmarks/results of the checkout, "
                   "which only an explicit --out-dir replaces)")
    p.add_argument("--tuned-dir", type=Path,
                   help="directory of the tuned files (tuned_params*.json, tuned_p*.json) "
                   "(default: the package's, kernelstream/experiments/tuned/)")
    p.add_argument("--retune", action="store_true",
                   help="first redo the paper's tuning protocol for --datasets/--tables "
                   "(held-out permutation 1000), write its tuned file into --out-dir "
                   "(the other data sets' entries copied from the file it updates) and "
                   "evaluate with it (p1 has nothing tuned)")
    p.add_argument("--retune-only", action="store_true",
                   help="--retune, then stop before the evaluation")
    p.add_argument("--work-dir", type=Path,
                   help="prepared data files and the replays' outputs (default: a temporary "
                   "directory, removed afterwards)")
    p.add_argument("--runner", choices=runners_for("reproduce"), default="direct",
                   help="the replay's runner (default: direct)")
    p.add_argument("--workers", "-j", type=workers_arg, default=1, metavar="N",
                   help="split each replay's keys over N processes (as replay --workers)")
    p.add_argument("--compare", type=Path, metavar="JSON|DIR",
                   help="afterwards, list the cells whose numbers differ from a committed "
                   "results JSON (a directory: its <paper>.json for each paper); exit 1 if "
                   "any differ (timings and the machine are not compared)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=cmd_reproduce)


def cmd_reproduce(args: argparse.Namespace, argv: Any = None) -> int:
    # the protocols import learner modules and the compiled kernels: loaded by a run, not by
    # the CLI's parser
    from kernelstream.experiments.retune import TUNED_FILES
    from kernelstream.experiments.retune import retune as retune_paper

    if args.data_dir is None:
        return error("reproduce", "no data directory: give --data-dir or set KERNELSTREAM_DATA")
    if not args.data_dir.is_dir():
        return error("reproduce", f"--data-dir {args.data_dir} is not a directory")
    if args.permutations is not None and args.permutations < 1:
        return error("reproduce", f"-R must be >= 1, got {args.permutations}")
    # a subset run must not overwrite the checkout's committed tables: those are replaced
    # only by naming them (--out-dir benchmarks/results, as the benchmarks/ scripts do)
    out_dir = args.out_dir or default_out_dir(args.paper)
    if args.tuned_dir is not None and not args.tuned_dir.is_dir():
        return error("reproduce", f"--tuned-dir {args.tuned_dir} is not a directory")
    retune = args.retune or args.retune_only
    papers = list(PAPERS) if args.paper == "all" else [args.paper]
    mods = {p: importlib.import_module(f"kernelstream.experiments.{PAPERS[p]}") for p in papers}
    known = [t for m in mods.values() for t in m.TABLES]
    unknown = [t for t in args.tables or () if t not in known]
    if unknown:  # with "all", a table names the paper it belongs to
        return error("reproduce", f"{args.paper} has no table {', '.join(unknown)} (tables: "
                      f"{', '.join(known)})")
    names = list(dict.fromkeys(d for m in mods.values() for d in m.DATA))
    unknown = [d for d in args.datasets or () if d not in names]
    if unknown:
        return error("reproduce", f"{args.paper} has no data set {', '.join(unknown)} (data sets: "
                      f"{', '.join(names)})")
    if args.compare is not None and not args.compare.is_dir() and len(papers) > 1:
        return error("reproduce", "--compare FILE.json needs one paper (give a directory of "
                      "results for all)")
    if args.compare is not None and not args.compare.exists():
        return error("reproduce", f"--compare {args.compare} not found")
    differ = False
    retuned: dict[str, Path] = {}  # shared: p3 reads the widths `all --retune` chose first
    with tempfile.TemporaryDirectory(prefix="kernelstream-reproduce-") as tmp:
        work = args.work_dir or Path(tmp)
        for paper, mod in mods.items():
            if args.tables and not set(args.tables) & set(mod.TABLES):
                continue
            ctx = Context(args.data_dir, work / paper, args.permutations or mod.PERMUTATIONS,
                          seed=args.seed, runner=args.runner, workers=args.workers,
                          pipeline_args=list(getattr(args, "pipeline_args", [])),
                          quiet=args.quiet, keep_outputs=args.work_dir is not None)
            opts = Options(ctx, out_dir, args.tuned_dir, args.datasets, args.tables, retuned)
            try:
                if retune and paper in TUNED_FILES:
                    path = retune_paper(paper, opts)
                    print(f"{paper}: retuned: {path}")
                if args.retune_only:
                    continue
                res = mod.reproduce(opts)
            except (ProtocolError, FileNotFoundError) as exc:
                return error("reproduce", str(exc))
            except ReplayError as exc:
                return error("reproduce", str(exc), 1)
            print(f"{paper}: passed {res.passed}/{res.judged} judged cells in "
                  f"{res.wall_seconds / 60:.1f} min; wrote "
                  + ", ".join(str(f) for f in res.files))
            if args.compare is not None:
                differ |= _compare(args.compare, paper, opts.out_dir / f"{paper}.json")
    return 1 if differ else 0


def _compare(given: Path, paper: str, ours: Path) -> bool:
    """Print the differences of ``ours`` from the committed JSON; True if there are any."""
    # the compiled kernels (experiments.report names them): not loaded by the CLI's parser
    from kernelstream.experiments import report

    path = given / f"{paper}.json" if given.is_dir() else given
    if not path.exists():
        print(f"{paper}: no {path} to compare with")
        return False
    n, diffs = report.compare_results(report.read_json(path), report.read_json(ours))
    print(f"{paper}: compared {n} entries with {path}: "
          + (f"{len(diffs)} differ" if diffs else "numbers identical"))
    for d in diffs:
        print(f"  {d}")
    return bool(diffs)
