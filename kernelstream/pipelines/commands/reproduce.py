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
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelstream._suggest import did_you_mean
from kernelstream.errors import ConfigError, OutFolderError, ProtocolError
from kernelstream.experiments.grid import Context, ReplayError
from kernelstream.experiments.protocol import PAPERS, Options
from kernelstream.pipelines import run_folder
from kernelstream.pipelines.commands._common import Command, error
from kernelstream.pipelines.config import PROG, at_least, check_declared, runners_for
from kernelstream.pipelines.replay.replay_args import workers_arg


def default_out_dir(paper: str) -> Path:
    """Where ``reproduce PAPER`` writes without ``--out-dir``: ``runs/reproduce-PAPER``,
    relative to the current directory."""
    return Path("runs") / f"reproduce-{paper}"


def claim_out_dir(out: Path, overwrite: bool, tuned_files: Iterable[str] = ()) -> None:
    """``--out-dir``'s rule, as ``replay --out``'s (``pipelines.run_folder``): a new or empty
    folder is used; so is an earlier reproduction's, known by what it wrote there (a
    ``PAPER.json`` results file, as in the checkout's benchmarks/results/, or a retuned file
    of ``tuned_files``), whose files of the same names are replaced; any other non-empty
    folder only with ``overwrite``. Raises :class:`OutFolderError` (one line)."""
    folder = run_folder.inspect(str(out))
    if folder.empty or overwrite or _reproduced(out, tuned_files):
        return
    shown = ", ".join(folder.entries[:3]) + (", ..." if len(folder.entries) > 3 else "")
    raise OutFolderError(
        f"--out-dir {out} is not empty ({shown}) and holds no kernelstream reproduction "
        "(no PAPER.json results): choose a new or empty folder, or add --overwrite to write "
        "the tables into it")


def _reproduced(out: Path, tuned_files: Iterable[str]) -> bool:
    """``out`` holds a results file (``experiments.report``) or a retuned file a
    reproduction wrote."""
    for name in [f"{paper}.json" for paper in PAPERS] + list(tuned_files):
        try:
            doc = json.loads((out / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and (name not in {f"{p}.json" for p in PAPERS}
                                      or {"machine", "pipeline_args"} <= set(doc)):
            return True
    return False


def _csv(s: str) -> list[str]:
    return [v.strip() for v in s.split(",") if v.strip()]


COMMAND = Command(
    "reproduce", help="rerun a paper's tables and judge them against the published numbers",
    description=(
        "Runs a paper's tables with the committed tuned parameters (package data), as keys of\n"
        "the replay pipeline, and writes PAPER.md (published beside ours, PASS/FAIL, the\n"
        "machine) and PAPER.json into --out-dir (default: runs/reproduce-PAPER; never the\n"
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
                   help="where PAPER.md/.json go, e.g. p3.md (default: runs/reproduce-PAPER in "
                   "the current directory; the committed results are benchmarks/results of the "
                   "checkout, "
                   "which only an explicit --out-dir replaces)")
    p.add_argument("--overwrite", action="store_true",
                   help="also write into a non-empty --out-dir that holds no earlier "
                   "reproduction (its PAPER.md/.json of the same names are replaced; other "
                   "files stay)")
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
                   "any differ (timings and the machine are not compared), 2 if no entry "
                   "was compared; another paper's file, or a directory without it, is "
                   "refused before the run")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=cmd_reproduce)


@dataclass(frozen=True)
class ReproduceConfig:
    """A ``kernelstream reproduce`` run: the ``papers`` to run (``paper``: as given, ``all``
    or one), where the data sets are, the tables, data sets and permutations asked for, where
    the results, the tuned files and the prepared data go, ``--retune``, the replays' runner
    and workers, and the results to ``--compare`` with. Checked as built: ``ConfigError``
    with the one line to print."""

    paper: str
    data_dir: Path
    out_dir: Path
    tables: tuple[str, ...] | None = None
    datasets: tuple[str, ...] | None = None
    permutations: int | None = at_least(1, "-R")
    seed: int = 0
    tuned_dir: Path | None = None
    retune: bool = False
    retune_only: bool = False
    work_dir: Path | None = None
    runner: str = "direct"
    workers: int = 1
    compare: Path | None = None
    quiet: bool = False
    pipeline_args: tuple[str, ...] = ()
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not self.data_dir.is_dir():
            raise ConfigError(f"--data-dir {self.data_dir} is not a directory")
        check_declared(self)
        if self.tuned_dir is not None and not self.tuned_dir.is_dir():
            raise ConfigError(f"--tuned-dir {self.tuned_dir} is not a directory")
        mods = self.modules()
        known = [t for m in mods.values() for t in m.TABLES]
        unknown = [t for t in self.tables or () if t not in known]
        if unknown:  # with "all", a table names the paper it belongs to
            raise ConfigError(f"{self.paper} has no table {', '.join(unknown)} (tables: "
                              f"{', '.join(known)}){did_you_mean(unknown[0], known)}")
        names = list(dict.fromkeys(d for m in mods.values() for d in m.DATA))
        unknown = [d for d in self.datasets or () if d not in names]
        if unknown:
            raise ConfigError(f"{self.paper} has no data set {', '.join(unknown)} (data sets: "
                              f"{', '.join(names)}){did_you_mean(unknown[0], names)}")
        papers, _ = self.plan()
        if not papers:  # `all --tables T --datasets D`: no paper of T has D
            raise ConfigError(
                f"no paper of --tables {', '.join(self.tables or ())} has the data set "
                f"{', '.join(self.datasets or ())} (" + "; ".join(
                    f"{p}: {', '.join(m.DATA)}" for p, m in mods.items()
                    if set(self.tables or ()) & set(m.TABLES)) + ")")
        if self.compare is not None and not self.compare.is_dir() and len(mods) > 1:
            raise ConfigError("--compare FILE.json needs one paper (give a directory of "
                              "results for all)")
        if self.compare is not None and not self.compare.exists():
            raise ConfigError(f"--compare {self.compare} not found")
        if self.compare is not None:
            for paper in papers:
                _check_compare(self.compare, paper)

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: Any = None) -> ReproduceConfig:
        """``reproduce``'s arguments → its config. A subset run must not overwrite the
        checkout's committed tables: those are replaced only by naming them (``--out-dir
        benchmarks/results``, as the benchmarks/ scripts do)."""
        if args.data_dir is None:
            raise ConfigError("no data directory: give --data-dir or set KERNELSTREAM_DATA")
        return cls(
            paper=args.paper, data_dir=args.data_dir,
            out_dir=args.out_dir or default_out_dir(args.paper),
            tables=None if args.tables is None else tuple(args.tables),
            datasets=None if args.datasets is None else tuple(args.datasets),
            permutations=args.permutations, seed=args.seed, tuned_dir=args.tuned_dir,
            retune=args.retune or args.retune_only, retune_only=args.retune_only,
            work_dir=args.work_dir, runner=args.runner, workers=args.workers,
            compare=args.compare, quiet=args.quiet,
            pipeline_args=tuple(getattr(args, "pipeline_args", ()) or ()),
            overwrite=args.overwrite)

    def modules(self) -> dict[str, Any]:
        """Paper -> its protocol module (``kernelstream.experiments.<paper>``), in the order
        ``all`` runs them."""
        papers = list(PAPERS) if self.paper == "all" else [self.paper]
        return {p: importlib.import_module(f"kernelstream.experiments.{PAPERS[p]}")
                for p in papers}

    def plan(self) -> tuple[dict[str, Any], list[str]]:
        """The papers of :meth:`modules` this run reproduces, and one note for each paper of
        ``all`` it leaves out because it has none of ``--datasets`` (it would write empty
        tables; one without any table of ``--tables`` is left out silently: tables are named
        after their paper)."""
        papers: dict[str, Any] = {}
        notes: list[str] = []
        for paper, mod in self.modules().items():
            if self.tables and not set(self.tables) & set(mod.TABLES):
                continue
            if self.datasets and not set(self.datasets) & set(mod.DATA):
                notes.append(f"{paper}: skipped: no data set {', '.join(self.datasets)} "
                             f"(its data sets: {', '.join(mod.DATA)})")
                continue
            papers[paper] = mod
        return papers, notes


def cmd_reproduce(args: argparse.Namespace, argv: Any = None) -> int:
    try:
        config = ReproduceConfig.from_args(args, argv)
    except ConfigError as exc:
        return error("reproduce", str(exc))
    return run_reproduce(config)


def run_reproduce(config: ReproduceConfig) -> int:
    """The reproduction of ``config``: each paper's tables written (after its retuning with
    ``--retune``), compared with ``--compare``; 1 when numbers differ, 2 with one line when a
    protocol cannot run or ``--compare`` compared no entry."""
    # the protocols import learner modules and the compiled kernels: loaded by a run, not by
    # the CLI's parser
    from kernelstream.experiments.retune import TUNED_FILES, retune

    try:
        claim_out_dir(config.out_dir, config.overwrite, TUNED_FILES.values())
    except OutFolderError as exc:
        return error("reproduce", str(exc))
    except OSError as exc:
        return error("reproduce", f"cannot read --out-dir {config.out_dir}: {exc}")
    tables = None if config.tables is None else list(config.tables)
    datasets = None if config.datasets is None else list(config.datasets)
    rc = 0
    retuned: dict[str, Path] = {}  # shared: p3 reads the widths `all --retune` chose first
    papers, notes = config.plan()
    for note in notes:
        print(note)
    with tempfile.TemporaryDirectory(prefix="kernelstream-reproduce-") as tmp:
        work = config.work_dir or Path(tmp)
        for paper, mod in papers.items():
            ctx = Context(config.data_dir, work / paper, config.permutations or mod.PERMUTATIONS,
                          seed=config.seed, runner=config.runner, workers=config.workers,
                          pipeline_args=list(config.pipeline_args),
                          quiet=config.quiet, keep_outputs=config.work_dir is not None)
            opts = Options(ctx, config.out_dir, config.tuned_dir, datasets, tables, retuned)
            try:
                if config.retune and paper in TUNED_FILES:
                    path = retune(paper, opts)
                    print(f"{paper}: retuned: {path}")
                if config.retune_only:
                    continue
                res = mod.reproduce(opts)
            except (ProtocolError, FileNotFoundError) as exc:
                return error("reproduce", str(exc))
            except ReplayError as exc:
                return error("reproduce", str(exc), 1)
            print(f"{paper}: passed {res.passed}/{res.judged} judged cells in "
                  f"{res.wall_seconds / 60:.1f} min; wrote "
                  + ", ".join(str(f) for f in res.files))
            if config.compare is not None:
                rc = max(rc, _compare(config.compare, paper, opts.out_dir / f"{paper}.json"))
    return rc


def _compare_path(given: Path, paper: str) -> Path:
    return given / f"{paper}.json" if given.is_dir() else given


def _report() -> Any:
    """:mod:`kernelstream.experiments.report`, imported when a comparison needs it."""
    # the compiled kernels (experiments.report names them): not loaded by the CLI's parser
    from kernelstream.experiments import report

    return report


def _check_compare(given: Path, paper: str) -> None:
    """Before the run: ``--compare`` names ``paper``'s results (a folder: its
    ``<paper>.json``), or :class:`ConfigError` (one line). A comparison with another paper's
    file, or none, would compare no entry."""
    path = _compare_path(given, paper)
    if not path.is_file():
        raise ConfigError(f"--compare {given} has no {paper}.json to compare {paper} with")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--compare {path} is not a results JSON: {exc}") from exc
    held = _report().results_paper(doc)
    if held != paper:
        raise ConfigError(f"--compare {path} holds {held}'s results, not {paper}'s" if held
                          else f"--compare {path} has no \"paper\" field: not a results file "
                          f"of `kernelstream reproduce {paper}`")


def _compare(given: Path, paper: str, ours: Path) -> int:
    """Print the differences of ``ours`` from the committed JSON: 0 if there are none, 1 if
    any, 2 (one error line) if no entry could be compared: a check that compared nothing
    did not find the numbers identical."""
    report = _report()
    path = _compare_path(given, paper)
    old, new = report.read_json(path), report.read_json(ours)
    n, diffs, skipped = report.compare_results(old, new)
    if n == 0 and not diffs:
        return error("reproduce", f"--compare {path}: no entry of this {paper} run is in it, "
                     "nothing was compared")
    print(f"{paper}: compared {n} entries with {path}: "
          + (f"{len(diffs)} differ" if diffs else "numbers identical"))
    for d in diffs:
        print(f"  {d}")
    r_old, r_new = old.get("permutations"), new.get("permutations")
    if r_old != r_new and r_old is not None and r_new is not None:
        # means over other permutations differ by construction (docs/reproducing.md)
        print(f"{paper}: -R {r_new} here, {r_old} in {path}: only the runs of the permutations "
              "both have were compared, not the means over them")
    if skipped:
        print(f"{paper}: {len(skipped)} entries not compared at another -R:")
        for d in skipped:
            print(f"  {d}")
    return 1 if diffs else 0
