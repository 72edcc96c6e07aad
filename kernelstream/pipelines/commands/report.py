"""``kernelstream report RUN_DIR [RUN_DIR ...] [--out report.html]``: one self-contained HTML
page from replay run folders (overlaid for comparison) and reproduction results files.

Only the argument definitions and the handler live here; reading and drawing are in
:mod:`kernelstream.report`, which needs matplotlib (the ``report`` extra) and never Beam.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

from kernelstream.errors import ReportError
from kernelstream.pipelines.commands._common import Command, error
from kernelstream.pipelines.config import PROG
from kernelstream.report import is_report, render_report

DEFAULT_OUT = "report.html"
INSTALL = "pip install 'kernelstream[report]'"


COMMAND = Command(
    "report", help="an HTML report of run folders (figures inline; opens from a file)",
    description=(
        "Write one self-contained HTML page (images inline, no server needed) from replay\n"
        "run folders: the summary table; mistake rate (loss for regression), cumulative and\n"
        "windowed, per configuration with a band over the permutations; #SV and\n"
        "examples/s over the stream; kernel distributions of kernel-selection learners;\n"
        "per-entity results of --key-by runs; dead letters by stage and reason. Several\n"
        "folders are overlaid. A reproduction's results JSON gets its tables. Needs\n"
        f"matplotlib: {INSTALL}."),
    epilog=(
        "examples:\n"
        f"  {PROG} report runs/demo\n"
        f"  {PROG} report runs/a9a-bogd runs/a9a-grid --out a9a.html\n"
        f"  {PROG} report benchmarks/results/p3.json --out p3.html"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``report``'s arguments and handler."""
    p.add_argument("paths", nargs="+", metavar="RUN_DIR",
                   help="a replay's output folder (with summary.json), or a results .json file")
    p.add_argument("--out", "-o", default=DEFAULT_OUT, metavar="FILE",
                   help=f"the HTML file to write (default: {DEFAULT_OUT}); an existing file "
                   "is replaced only when it is a kernelstream report")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out even when it is not a kernelstream report")
    p.set_defaults(handler=cmd_report)



def cmd_report(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    """Render the report; 2 with one line when matplotlib is missing or an input is
    unusable."""
    try:
        import matplotlib  # noqa: F401  (the report extra)
    except ImportError:
        return error("report", f"the report needs matplotlib: {INSTALL}")
    if os.path.isdir(args.out):
        return error("report", f"--out {args.out} is a folder: give the HTML file to write")
    if os.path.exists(args.out) and not args.overwrite and not is_report(args.out):
        # checked before drawing: a file the user wrote is never replaced by surprise
        return error("report", f"--out {args.out} exists and is not a kernelstream report: "
                     "choose another file, or add --overwrite to replace it")
    start = time.perf_counter()
    try:
        out = render_report(list(args.paths), args.out)
    except ReportError as exc:
        return error("report", str(exc))
    except OSError as exc:
        return error("report", f"cannot write {args.out}: {exc}")
    print(f"report: {out} ({time.perf_counter() - start:.1f} s)")
    return 0
