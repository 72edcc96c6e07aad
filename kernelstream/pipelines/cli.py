"""The ``kernelstream`` command line: the parser and :func:`main`.

Every command is a module of :mod:`kernelstream.pipelines.commands` with ``COMMAND`` (its
help texts, a ``_common.Command``) and ``add_arguments(p)`` (its arguments; the handler via
``set_defaults(handler=...)``); what several share (the one-line error, progress lines, the
learner and data options) is :mod:`~kernelstream.pipelines.commands._common`, and the run
machinery ``replay`` and ``tune`` share (runners, ``summary.json``) is
:mod:`~kernelstream.pipelines.commands._runs`.
"""

from __future__ import annotations

import os

# One BLAS thread unless the user says otherwise, set before numpy is first imported. The
# learners do one small matrix-vector product per example; multi-threaded BLAS gains nothing
# there and, on a busy 2-core machine, its spinning threads made a kernel row 40x slower.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402

# The command modules are imported here, and what they import at their top is cheap: pyarrow,
# Beam, Dask, the Kafka clients, matplotlib, the learner modules and the compiled kernels load
# on first use, each behind its seam (tests/test_imports.py), so `learners` and `check` start
# in a fraction of a replay's time.
from kernelstream import __version__  # noqa: E402
from kernelstream.pipelines.beam_noise import quiet_beam_import  # noqa: E402
from kernelstream.pipelines.commands import (  # noqa: E402
    check,
    demo,
    learners,
    replay,
    report,
    reproduce,
    stream,
    summary,
    tune,
)
from kernelstream.pipelines.commands._common import command_parser  # noqa: E402
from kernelstream.pipelines.config import PROG  # noqa: E402

# the commands in the order `kernelstream --help` lists them
COMMANDS = (learners, replay, summary, check, stream, demo, tune, report, reproduce)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(*COMMANDS)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kernelstream`` console script; returns the exit code."""
    quiet_beam_import()  # before the runners import Beam
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after "--" is passed to Beam as pipeline options (runner, workers, ...).
    pipeline_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, pipeline_args = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.pipeline_args = pipeline_args
    except SystemExit as exc:  # --help, --version, usage errors: keep argparse's exit code
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return int(args.handler(args, argv))  # each command module's set_defaults
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`kernelstream learners | head`): exit quietly, as Unix
        # tools do; point stdout at devnull so the interpreter's final flush cannot raise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
