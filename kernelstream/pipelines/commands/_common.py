"""What several commands share: how a command's parser is made from its :class:`Command`
texts, the one-line error, progress lines on stderr, and the options more than one command
offers (the learners, the read and preparation options), each defined once here.

Nothing here imports the learners, the engine or Beam at import time: the CLI builds every
command's parser from these helpers, also for ``learners`` and ``check``.
"""

from __future__ import annotations

import argparse
import ast
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from kernelstream import data
from kernelstream._suggest import close_matches, did_you_mean
from kernelstream.data.check import SPREAD_RATIO
from kernelstream.data.options import AUTO_SPARSE_WIDTH, ROWS
from kernelstream.engine.replay.core import PROGRESS_LOGGER
from kernelstream.pipelines.config import (
    DEFAULT_BY_ROWS,
    DEFAULT_LEARNER,
    DEFAULT_LEARNERS,
    DEFAULT_PARAMS,
    PROG,
    SCALES,
    TARGET_SCALES,
    TASKS,
)
from kernelstream.pipelines.replay.replay_args import hash_bits


def error(cmd: str, msg: str, code: int = 2) -> int:
    """Print ``kernelstream CMD: error: MSG`` on stderr; return the exit code."""
    print(f"{PROG} {cmd}: error: {msg}", file=sys.stderr, flush=True)
    return code


def progress_to_stderr(on: bool, shard: tuple[int, int] | None = None) -> None:
    """Show the learners' progress lines (``kernelstream.progress`` logger, INFO; logged
    where learning runs, in-process for the direct and loop runners) on stderr; a worker of
    ``--workers`` (``shard``) names itself in them."""
    log = logging.getLogger(PROGRESS_LOGGER)
    log.propagate = False  # not through Beam's root handler: one line each, our format
    for h in list(log.handlers):
        if getattr(h, "_kernelstream", False):
            log.removeHandler(h)
    if on:
        h = logging.StreamHandler(sys.stderr)
        tag = "" if shard is None else f"worker {shard[0] + 1}/{shard[1]}: "
        h.setFormatter(logging.Formatter(f"[progress] {tag}%(message)s"))
        h._kernelstream = True  # type: ignore[attr-defined]
        log.addHandler(h)
    log.setLevel(logging.INFO if on else logging.WARNING)


def add_learner_arguments(p: argparse.ArgumentParser, stream: bool = False,
                          task: bool = True) -> None:
    """``--learner``, ``-p`` and ``--seed`` (``config.learner_configs``): shared by ``replay``,
    ``stream`` and ``demo`` (``stream``: the help states a live stream's default alone;
    ``task=False``: a command without ``--task``, the demo, whose events are classified)."""
    def spec(name: str, params: dict[str, str]) -> str:
        return " ".join([name, *(f"-p {k}={v}" for k, v in params.items())])

    def by_rows(task: str) -> str:
        return ", ".join(f"{spec(*learner)} on {rows} rows"
                         for rows, learner in DEFAULT_BY_ROWS[task].items())

    if stream:
        regression = (f", with --task regression {spec(*DEFAULT_LEARNERS['regression'])}"
                      if task else "")
        default = (f"{spec(DEFAULT_LEARNER, DEFAULT_PARAMS)}{regression}; Gaussian widths "
                   "gamma=auto, from the stream's first records")
    else:
        default = (f"a replay of a file: {by_rows('classification')} (by its first rows), "
                   f"with --task regression {by_rows('regression')}; else (a topic, "
                   "--stream, --key-by) "
                   f"{spec(DEFAULT_LEARNER, DEFAULT_PARAMS)}, with --task regression "
                   f"{spec(*DEFAULT_LEARNERS['regression'])}; replay and tune set Gaussian "
                   "widths to gamma=auto, from the data")
    p.add_argument("--learner", "-l", action="append", metavar="[LABEL=]NAME",
                   help=f"learner (repeatable; default: {default}); see `{PROG} learners` and "
                   "docs/which-learner.md")
    p.add_argument("-p", "--param", action="append", metavar="[LABEL.]KEY=VALUE",
                   help="learner hyper-parameter (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default: 0)")


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose unknown options get a "did you mean" from the
    options of the command they were given to (``--opton`` → ``--option``), and whose unknown
    command gets the closest command."""

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            target = self._command_parser(ns) or self
            options = [o for o in target._option_string_actions if o.startswith("--")]
            hints = [m for tok in extras if tok.startswith("--")
                     for m in close_matches(tok.split("=", 1)[0], options)]
            target.error(f"unrecognized arguments: {' '.join(extras)}"
                         + (f" (did you mean {' '.join(dict.fromkeys(hints))}?)" if hints
                            else ""))
        return ns

    def _command_parser(self, ns: argparse.Namespace) -> argparse.ArgumentParser | None:
        """The parser of the command ``ns`` was parsed for (None: no subcommands)."""
        for action in self._subparsers._group_actions if self._subparsers else ():
            if isinstance(action, argparse._SubParsersAction):
                chosen = getattr(ns, action.dest or "", None)
                return action.choices.get(chosen) if chosen is not None else None
        return None

    def error(self, message: str) -> NoReturn:
        """A usage error as the CLI's other errors: one line (argparse's own prints the whole
        usage, ~25 lines for ``replay``, above it), with a "did you mean" for an invalid
        choice (a command, ``--runner dirct``) and where the usage is."""
        hint = _choice_hint(message)
        if hint:
            message += f" ({hint})"
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


def _choice_hint(message: str) -> str:
    """``did you mean 'direct'?`` for argparse's ``invalid choice: 'dirct' (choose from
    'beam', 'direct', ...)``, or ``""``."""
    _, sep, rest = message.partition("invalid choice: ")
    bad_text, sep2, choices_text = rest.partition(" (choose from ")
    if not sep or not sep2:
        return ""
    try:
        bad = ast.literal_eval(bad_text)
        choices = ast.literal_eval(f"[{choices_text.removesuffix(')')}]")
    except (ValueError, SyntaxError):
        return ""
    if not isinstance(bad, str) or bad in choices:
        return ""
    return did_you_mean(bad, [str(c) for c in choices]).removeprefix("; ")


def add_overwrite_argument(p: Any) -> None:
    """``--overwrite``: shared by the commands that write a run folder (``replay``, ``tune``,
    ``stream``, ``demo``; the rules are ``pipelines.run_folder``'s)."""
    p.add_argument("--overwrite", action="store_true",
                   help="replace the previous kernelstream run in --out (its outputs, "
                   "summary and checkpoints kept there are removed; other files stay). A "
                   "non-empty folder that holds no kernelstream run is never used")


@dataclass(frozen=True)
class Command:
    """What the help says of a command: ``help``, its line in ``kernelstream --help``; the
    ``description`` and ``epilog`` of ``kernelstream NAME --help``. Their line breaks are kept
    (examples are laid out by hand) unless ``wrap``: argparse then re-flows the text to the
    terminal's width."""

    name: str
    help: str
    description: str
    epilog: str | None = None
    wrap: bool = False


def add_command(sub: Any, command: Command) -> argparse.ArgumentParser:
    """Add ``command``'s parser, with its texts, to the subparsers ``sub``; returns it for the
    command's arguments."""
    return sub.add_parser(
        command.name, help=command.help, description=command.description,
        epilog=command.epilog,
        formatter_class=(argparse.HelpFormatter if command.wrap
                         else argparse.RawDescriptionHelpFormatter))


def command_parser(*commands: Any) -> Parser:
    """The parser of ``kernelstream COMMAND ...`` for ``commands``, modules of
    :mod:`kernelstream.pipelines.commands` (each with ``COMMAND`` and ``add_arguments``): the
    CLI's (``pipelines.cli.build_parser``, all of them), and the one a command parses another
    command's line with (``demo`` a ``stream``'s, ``summary`` a submitted ``replay``'s), so it
    needs no import of the CLI, which imports every command."""
    parser = Parser(prog=PROG, description="Online kernel learning on data streams.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands:
        command.add_arguments(add_command(sub, command.COMMAND))
    return parser


def delimiter(s: str) -> str:
    """``--delimiter``: one character; ``\\t`` typed as two characters (a shell's quotes keep
    the backslash) is a tab. A longer one was taken, then split every row into one column."""
    if s == "\\t":
        return "\t"
    if len(s) != 1:
        raise argparse.ArgumentTypeError(f"must be one character (\\t for a tab), got {s!r}")
    return s


# How each data option parses (type, choices, metavar, default), defined once for every command
# that offers it; the help texts are the commands' own, since a file, a topic's messages and a
# check read them to different ends.
DATA_OPTIONS: dict[str, dict[str, Any]] = {
    "--format": {"choices": data.FORMATS},
    "--label-column": {"metavar": "COL"},
    "--n-features": {"type": int, "metavar": "D"},
    "--hash-features": {"type": hash_bits, "metavar": "K"},
    "--positive-label": {"metavar": "LABEL"},
    "--delimiter": {"type": delimiter, "metavar": "CHAR"},
    "--header": {"action": argparse.BooleanOptionalAction, "default": None},
    "--key-by": {"metavar": "COL"},
    "--limit": {"type": int, "metavar": "N"},
    "--sample": {"type": int, "metavar": "N"},
    "--scale": {"choices": SCALES, "default": "none"},
    "--scale-target": {"choices": TARGET_SCALES, "default": "none"},
    "--task": {"choices": TASKS},
    "--rows": {"choices": ROWS, "default": "auto"},
}


def add_data_options(p: Any, helps: Mapping[str, str], **changes: dict[str, Any]) -> None:
    """Add the :data:`DATA_OPTIONS` that ``helps`` names, in its order and with its help texts
    (``p``: a parser or an argument group); ``changes``, keyed by an option's destination
    (``task={"default": "classification"}``), replace some of its keywords for this command."""
    dests = {flag: flag.removeprefix("--").replace("-", "_") for flag in helps}
    stray = sorted(set(changes) - set(dests.values()))
    if stray:  # a misspelt change would otherwise be dropped silently
        raise ValueError(f"changes to options not added: {stray}")
    for flag, text in helps.items():
        p.add_argument(flag, **{**DATA_OPTIONS[flag], **changes.get(dests[flag], {})}, help=text)


# replay's and tune's texts of the read options (a file, read in one pass after sniffing it)
READ_HELP = {
    "--format": "data format (default: from the file name, else its content)",
    "--label-column": "label column of a CSV/Parquet file: 0-based position (negative counts "
    "from the end; CSV default: last) or header name (Parquet default: label)",
    "--n-features": "feature dimension of a LIBSVM file (default: largest index seen)",
    "--hash-features": "hash feature indices (CSV: column positions) into 2^K columns, values "
    "of colliding features summed; K, 2^K or the power of two itself (for click logs and open "
    "vocabularies)",
    "--positive-label": "raw label mapped to +1 (the file's other label to -1)",
    "--delimiter": "CSV delimiter (default: sniffed)",
    "--header": "the CSV file has (or has not) a header row (default: auto-detect)",
}

PREPARE_HELP = {
    "--limit": "use only the first N rows of the file (before permuting; a warning when "
    "their label mix differs from the file's)",
    "--sample": "use N rows of the file drawn at random (seeded by --seed, reproducible; "
    "kept in file order, written to DIR/.sample/), instead of the first N (--limit); gamma=auto, "
    "--scale auto, --scale-target auto and the default learner are decided on those rows",
    "--scale": "feature scaling: none, min-max to [0,1] or to [-1,1]; auto: [0,1] when the "
    f"file's first rows are dense and their feature spreads differ by over {SPREAD_RATIO:g}x, "
    "else none (default: auto; the choice is printed and recorded in summary.json)",
    "--scale-target": "regression target: none, min-max to [0,1] (predictions and losses are "
    "then in the scaled units), or auto: standardised by the mean and standard deviation of "
    "the file's first rows inside the learning step, every output in the target's units "
    "(default: auto)",
    "--task": "default: the learners' task (classification maps labels to ±1)",
    "--rows": "rows to the learners as dense arrays or sparse CSR (memory grows with the "
    "non-zeros); auto: sparse for LIBSVM or hashed data wider than "
    f"{AUTO_SPARSE_WIDTH:,} columns (default: auto)",
}


def add_read_arguments(p: Any) -> None:
    """How a data file is read (``data.options.ReadOptions``): ``--format``,
    ``--label-column``, ``--n-features``, ``--hash-features``, ``--positive-label``,
    ``--delimiter`` and ``--header``; shared by ``replay``, ``check`` and ``tune`` (``p``: a
    parser or an argument group)."""
    add_data_options(p, READ_HELP)


def add_prepare_arguments(p: Any) -> None:
    """What is done to the rows read before they are learnt: ``--limit``, ``--scale``,
    ``--scale-target``, ``--task`` and ``--rows``; shared by ``replay`` and ``tune``."""
    add_data_options(p, PREPARE_HELP, scale={"choices": ("auto", *SCALES), "default": "auto"},
                     scale_target={"choices": ("auto", *TARGET_SCALES), "default": "auto"})
