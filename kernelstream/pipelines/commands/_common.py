"""What several commands share: the one-line error, progress lines on stderr, and the argument
groups more than one command offers (the learners, the read and preparation options), each
defined once here.

Nothing here imports the learners, the engine or Beam at import time: the CLI builds every
command's parser from these helpers, also for ``learners`` and ``check``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from kernelstream import data
from kernelstream.data.options import AUTO_SPARSE_WIDTH, ROWS
from kernelstream.pipelines.config import (
    DEFAULT_LEARNER,
    DEFAULT_PARAMS,
    PROG,
    SCALES,
    TARGET_SCALES,
    TASKS,
)
from kernelstream.pipelines.replay_args import hash_bits


def error(cmd: str, msg: str, code: int = 2) -> int:
    """Print ``kernelstream CMD: error: MSG`` on stderr; return the exit code."""
    print(f"{PROG} {cmd}: error: {msg}", file=sys.stderr, flush=True)
    return code


def progress_to_stderr(on: bool, shard: tuple[int, int] | None = None) -> None:
    """Show the learners' progress lines (``kernelstream.progress`` logger, INFO; logged
    where learning runs, in-process for the direct and loop runners) on stderr; a worker of
    ``--workers`` (``shard``) names itself in them."""
    from kernelstream.engine.core import PROGRESS_LOGGER  # the engine: a replay's own import

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


def add_learner_arguments(p: argparse.ArgumentParser) -> None:
    """``--learner``, ``-p`` and ``--seed`` (``config.learner_configs``): shared by ``replay``,
    ``stream`` and ``demo``."""
    default_params = " ".join(f"-p {k}={v}" for k, v in DEFAULT_PARAMS.items())
    p.add_argument("--learner", "-l", action="append", metavar="[LABEL=]NAME",
                   help=f"learner (repeatable; default: {DEFAULT_LEARNER} {default_params}); "
                   f"see `{PROG} learners`")
    p.add_argument("-p", "--param", action="append", metavar="[LABEL.]KEY=VALUE",
                   help="learner hyper-parameter (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default: 0)")


def add_read_arguments(p: Any) -> None:
    """How a data file is read (``data.options.ReadOptions``): ``--format``,
    ``--label-column``, ``--n-features``, ``--positive-label``, ``--delimiter``, ``--header``
    and ``--hash-features``; shared by ``replay``, ``check`` and ``tune`` (``p``: a parser or
    an argument group)."""
    p.add_argument("--format", choices=data.FORMATS,
                   help="data format (default: from the file name, else its content)")
    p.add_argument("--label-column", metavar="COL",
                   help="label column of a CSV/Parquet file: 0-based position (negative counts "
                   "from the end; CSV default: last) or header name (Parquet default: label)")
    p.add_argument("--n-features", type=int, metavar="D",
                   help="feature dimension of a LIBSVM file (default: largest index seen)")
    p.add_argument("--hash-features", type=hash_bits, metavar="K",
                   help="hash feature indices (CSV: column positions) into 2^K columns, "
                   "values of colliding features summed; K, 2^K or the power of two itself "
                   "(for click logs and open vocabularies)")
    p.add_argument("--positive-label", metavar="LABEL",
                   help="raw label mapped to +1 (all others to -1)")
    p.add_argument("--delimiter", metavar="CHAR", help="CSV delimiter (default: sniffed)")
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="the CSV file has (or has not) a header row (default: auto-detect)")


def add_prepare_arguments(p: Any) -> None:
    """What is done to the rows read before they are learnt: ``--limit``, ``--scale``,
    ``--scale-target``, ``--task`` and ``--rows``; shared by ``replay`` and ``tune``."""
    p.add_argument("--limit", type=int, metavar="N",
                   help="use only the first N rows of the file (before permuting)")
    p.add_argument("--scale", choices=SCALES, default="none",
                   help="feature scaling: none, min-max to [0,1] or to [-1,1] (default: none)")
    p.add_argument("--scale-target", choices=TARGET_SCALES, default="none",
                   help="regression target scaling: none or min-max to [0,1] (default: none)")
    p.add_argument("--task", choices=TASKS,
                   help="default: the learners' task (classification maps labels to ±1)")
    p.add_argument("--rows", choices=ROWS, default="auto",
                   help="rows to the learners as dense arrays or sparse CSR (memory grows with "
                   "the non-zeros); auto: sparse for LIBSVM or hashed data wider than "
                   f"{AUTO_SPARSE_WIDTH:,} columns (default: auto)")
