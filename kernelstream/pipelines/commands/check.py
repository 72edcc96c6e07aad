"""``kernelstream check DATA``: one fast pass over a data file or topic reporting what a replay
would see (rows, width, non-zeros, labels, dead-letter reasons); exit 2 with one line when a
replay would refuse it. Needs neither the learners nor pyarrow nor Beam.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kernelstream import data, fs, kafka_client
from kernelstream.data import check as data_check
from kernelstream.data import label_mix
from kernelstream.data.options import ReadOptions
from kernelstream.errors import ConfigError
from kernelstream.pipelines.commands._common import (
    Command,
    add_data_options,
    add_read_arguments,
    error,
)
from kernelstream.pipelines.config import at_least, check_declared, is_topic
from kernelstream.pipelines.replay.replay_checks import data_path


@dataclass(frozen=True)
class CheckConfig:
    """A ``kernelstream check`` run: how DATA is read (``read``: its path the embedded data
    set's file, or the file or topic given), ``--json``, and a topic's read (``--kafka-idle``,
    the ``--kafka-option`` settings, parsed when the topic is read)."""

    read: ReadOptions
    json: bool = False
    kafka_idle: float = 2.0
    kafka_options: tuple[str, ...] = ()
    limit: int | None = at_least(1, "--limit")

    def __post_init__(self) -> None:
        check_declared(self)
        if self.read.hash_features is not None:
            data.hashing.check_bits(self.read.hash_features)

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: Sequence[str] = ()) -> CheckConfig:
        """``check``'s arguments → its config (``ValueError`` with the one line to print)."""
        src = args.data
        try:
            src = data_path(src)
        except (KeyError, FileNotFoundError):
            pass
        read = ReadOptions.from_args(args, src)
        return cls(read=read, json=args.json, kafka_idle=args.kafka_idle,
                   kafka_options=tuple(args.kafka_option or ()), limit=args.limit)


def cmd_check(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    """Report what a replay would see in DATA; rc 2 (and the report) when it would refuse it."""
    try:
        config = CheckConfig.from_args(args, argv)
    except ValueError as exc:
        return error("check", str(exc))
    return run_check(config)


def run_check(config: CheckConfig) -> int:
    """The check of ``config``: the report on stdout; 2 with one line when a replay would
    refuse the data or it cannot be read."""
    opts = config.read
    src = opts.path
    try:
        if is_topic(src):
            logging.getLogger("kafka").setLevel(logging.CRITICAL)
            client = kafka_client.client_settings(list(config.kafka_options))
            report = data_check.check_topic(opts, config.kafka_idle, client)
        else:
            if not fs.exists(src):
                return error("check", f"no such file or embedded data set: {src}")
            report = data_check.check_file(opts)
    except (ValueError, OSError, ConnectionError) as exc:
        return error("check", str(exc).splitlines()[0] if str(exc) else repr(exc))
    if opts.hash_features is not None:
        report.width = 1 << opts.hash_features
    if not is_topic(src) or opts.fmt or opts.hash_features is not None:
        report.rows_as = "sparse" if opts.sparse_rows(max(report.width, 1)) else "dense"
    found = data_check.diagnose(report)
    problem = None if found is None else found.text
    if problem is None and not is_topic(src):  # the labels as replay decides them
        try:
            label_mix.run_positive_label(opts)
        except ConfigError as exc:
            problem = str(exc)
    if config.json:
        doc = report.to_dict()
        doc["problem"] = problem
        print(json.dumps(doc, indent=2))
    elif found is None or found.task is None:  # (a table read as the wrong task, a
        for line in report.lines():             # regression file's as classes, misleads:
            print(line)                         # the one line says what to do)
    if problem is not None:
        return error("check", problem)
    return 0


COMMAND = Command(
    "check", help="report what a replay would see in a data set",
    description=(
        "One fast pass over DATA (a LIBSVM, CSV or Parquet file, gzip/bz2/xz compressed or "
        "not, an embedded data set, or kafka://HOST:PORT/TOPIC): rows, width, non-zeros per "
        "row, label classes and counts, dead-letter reasons with counts and first line "
        "numbers (offsets for a topic). Exit 2 with one line on stderr when a replay would "
        "refuse the data."
    ),
    wrap=True,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``check``'s arguments and handler."""
    p.add_argument("data", metavar="DATA")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    add_data_options(p, {"--task": "how labels are read (default: classification)"},
                     task={"default": "classification"})
    add_read_arguments(p)
    add_data_options(p, {"--key-by": "as for replay",
                         "--limit": "stop after N rows, as replay --limit does (the bad "
                                    "records among them not counted)"})
    p.add_argument("--kafka-idle", type=float, default=2.0, metavar="SECONDS",
                   help="a topic: stop after this long without a record (default: 2)")
    p.add_argument("--kafka-option", action="append", metavar="KEY=VALUE",
                   help="kafka-python client setting (repeatable)")
    p.set_defaults(handler=cmd_check)
