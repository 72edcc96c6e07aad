"""``kernelstream summary RUN_DIR``: the summary table and ``summary.json`` of a replay whose
job was handed to its runner by ``replay --submit-only`` (Dataflow, a Flink job server), once
that job has finished: the run's configuration is rebuilt from the command line kept in
``RUN_DIR/submitted.json``, and its results are read back from the Parquet outputs exactly
as ``replay`` reads them after a run it waited for (``pipelines.replay.replay.read_outputs``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kernelstream import fs
from kernelstream.pipelines.commands import replay as replay_command
from kernelstream.pipelines.commands._common import Command, command_parser, error
from kernelstream.pipelines.commands._runs import (
    SUBMITTED,
    build_summary,
    run_output,
    write_summary,
)
from kernelstream.pipelines.commands.replay import print_run
from kernelstream.pipelines.config import PROG, is_topic
from kernelstream.pipelines.replay import replay, sample_rows
from kernelstream.pipelines.replay.replay_args import ReplayConfig

COMMAND = Command(
    "summary", help="summary.json of a replay submitted with --submit-only, once it finished",
    description=(
        "Read back the Parquet outputs of a replay submitted with `replay --submit-only`\n"
        f"(its RUN_DIR holds {SUBMITTED}) once its job has finished, print the summary\n"
        "table and write RUN_DIR/summary.json, as `replay` does after a run it waited for.\n"
        "RUN_DIR may be a URL (gs://...) with the file system's Beam extra installed."),
    epilog=(
        "example:\n"
        f"  {PROG} replay gs://B/data/a9a --out gs://B/runs/a9a --runner beam --submit-only \\\n"
        "      -- --runner=DataflowRunner ...\n"
        f"  {PROG} summary gs://B/runs/a9a      # after the Dataflow job has succeeded"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``summary``'s arguments and handler."""
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="the --out directory of `replay --submit-only`")
    p.set_defaults(handler=cmd_summary)


def cmd_summary(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    """Write ``RUN_DIR/summary.json`` of a finished submitted run; 2 with one line when
    ``RUN_DIR`` holds no submitted run or its job has not written its outputs (yet)."""
    out = args.run_dir
    path = fs.join(out, SUBMITTED)
    if not fs.exists(path):
        return error("summary", f"no {SUBMITTED} in {out}: RUN_DIR is the --out of "
                     f"`{PROG} replay --submit-only`")
    try:
        with fs.open_read(path) as fh:
            submitted = json.loads(fh.read())
        config = submitted_config(submitted, out)
    except (OSError, ValueError, KeyError, TypeError, SystemExit) as exc:
        return error("summary", f"{path}: not a submitted run's record ({exc})")
    # the sinks rename each output's files into place when the job's input is complete:
    # no metrics file means the job has not finished, or failed
    if not fs.list_files(fs.join(out, "metrics"), "*.parquet"):
        return error("summary", f"no metrics in {fs.join(out, 'metrics')} yet: job "
                     f"{submitted.get('job_id')} has not finished, or it failed")
    res = replay.read_outputs(out, {}, config.runner, 0.0)
    run = run_output(config, res)
    doc = build_summary(config, run)
    doc["job_id"] = submitted.get("job_id")
    print_run(config, run, write_summary(doc, out))
    return 0


def submitted_config(submitted: dict[str, Any], out: str) -> ReplayConfig:
    """The configuration of the run ``submitted`` (``OUT/submitted.json``) records, its
    outputs in ``out``: its command line parsed again, a Kafka topic's widths and scaling
    taken from the record (``topic_head``) instead of the topic."""
    run_args = command_parser(replay_command).parse_args(submitted["argv"])
    run_args.pipeline_args = list(submitted["pipeline_args"])
    run_args.recorded_head = submitted.get("topic_head")
    # --sample: the rows the run learnt are in out/.sample/: decided on them, not drawn again
    run_args.out = out
    setattr(run_args, sample_rows.IN_PLACE, True)
    if run_args.recorded_head is None and is_topic(run_args.data or ""):
        # a record of an earlier version, which read the head again but never standardised a
        # topic's target: rebuilt as that version ran it
        run_args.scale_target = "none"
    # the outputs are where they are now (the run's --out may have been relative)
    return replace(ReplayConfig.from_args(run_args, submitted["argv"]), out=out)
