"""``--sample N`` ahead of the run's decisions: the rows are drawn once, first
(:func:`drawn_sample`), and every data-driven decision of the run reads them, not the head of
the file they come from: ``gamma=auto``, ``--scale auto`` and its ranges' rule,
``--scale-target auto``, the rows (dense/sparse) that choose the default learner, the label
map (:func:`sampled_positive_label`). So ``replay DATA --sample N`` decides as a replay of the
drawn rows does.

The output folder is not claimed yet when the decisions are made (its default name follows
the learner chosen), so the rows are drawn into a staging file of their own; the run's start
(``commands._runs.started``, once the folder is claimed) moves them to ``OUT/.sample/``
(:func:`place`), where the run reads them. A worker process of ``--workers`` and ``kernelstream
summary`` find them there and decide on them without a draw."""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace

from kernelstream import fs
from kernelstream.data import label_mix
from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import TextFormat
from kernelstream.data.sample import EXTENSIONS, draw_sample
from kernelstream.errors import ConfigError
from kernelstream.pipelines.config import PROG, display_name, is_topic
from kernelstream.pipelines.replay.replay_checks import data_path

_CACHE = "drawn_sample"  # the attribute of the parsed arguments that holds the draw
IN_PLACE = "sample_in_place"  # set by a command whose rows are already in OUT/.sample/


@dataclass(frozen=True)
class DrawnSample:
    """``--sample N``'s rows: drawn from ``source`` (an embedded set's file) in format
    ``fmt``, named ``name`` in ``OUT/.sample/``; ``rows`` is the local file the decisions
    read: a staging file that :func:`place` moves (``staged``), or the placed file (a local
    copy of a remote one)."""

    source: str
    n: int
    fmt: str
    name: str
    rows: str
    staged: bool


def check_sample(args: argparse.Namespace, src: str) -> None:
    """``--sample``'s refusals (``ConfigError``): N < 1, with ``--limit``, of a topic or
    ``--stream``."""
    if args.sample < 1:
        raise ConfigError(f"--sample must be >= 1, got {args.sample}")
    if args.limit is not None:
        raise ConfigError("--sample N draws N random rows, --limit N takes the first N: "
                          "give one of them")
    if is_topic(src) or getattr(args, "stream", "none") != "none":
        raise ConfigError("--sample draws rows of a data file (not a Kafka topic or --stream)")


def drawn_sample(args: argparse.Namespace, src: str) -> DrawnSample | None:
    """The rows of ``--sample N`` of the file (or embedded set) ``src``, drawn on the first
    call and kept in ``args`` (``tune`` decides its baseline on them before its replay
    does: one draw); None without ``--sample``. A ``--shard`` worker, or a command that set
    :data:`IN_PLACE`, reads the rows its run placed in ``args.out``. ``ConfigError`` when
    the file cannot be read."""
    if getattr(args, "sample", None) is None:
        return None
    cached: DrawnSample | None = getattr(args, _CACHE, None)
    if cached is not None:
        return cached
    check_sample(args, src)
    source = data_path(src)
    fmt = args.format or ReadOptions(path=source).resolved_fmt()
    name = f"{display_name(src)}-{args.sample}-seed{args.seed}.{EXTENSIONS.get(fmt, fmt)}"
    if getattr(args, "shard", None) is not None or getattr(args, IN_PLACE, False):
        placed = fs.join(args.out, ".sample", name)
        drawn = DrawnSample(source, args.sample, fmt, name, _local(placed, name), False)
    else:
        stage = tempfile.mkdtemp(prefix="kernelstream-sample-")
        atexit.register(shutil.rmtree, stage, True)  # (a run refused before its start)
        drawn = DrawnSample(source, args.sample, fmt, name, os.path.join(stage, name), True)
        # the file's lines as they are, from anywhere in it: no limit, no scaling and no label
        # map (both decided on the rows drawn)
        raw = ReadOptions.from_args(args, source, fmt=fmt, limit=None, scale="none",
                                    scale_target="none", positive_label=None)
        got = _draw(drawn, args.seed, raw)
        if got < drawn.n:
            print(f"{PROG}: note: --sample {drawn.n}: the file has only {got} rows, all taken",
                  file=sys.stderr)
    setattr(args, _CACHE, drawn)
    return drawn


def _draw(drawn: DrawnSample, seed: int, read: ReadOptions) -> int:
    """Draw the rows into ``drawn.rows`` (a CSV's header copied); the rows written."""
    try:
        header = None
        if drawn.fmt == "csv":
            header = TextFormat.detect(read.path, "csv", read.label_column, read.delimiter,
                                       read.header, read.key_by).header_line
        return draw_sample(drawn.source, drawn.fmt, drawn.n, seed, drawn.rows, header)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--sample {drawn.n}: cannot read {drawn.source}: {exc}") from None


def _local(path: str, name: str) -> str:
    """``path``, or a local copy of a remote one (the decisions read local files only)."""
    if not fs.is_remote(path) or not fs.exists(path):
        return path  # (a missing file decides nothing: the run reports it)
    stage = tempfile.mkdtemp(prefix="kernelstream-sample-")
    atexit.register(shutil.rmtree, stage, True)
    copy = os.path.join(stage, name)
    with fs.open_read(path) as fh, open(copy, "wb") as out:
        shutil.copyfileobj(fh, out)
    return copy


def place(drawn: str, dest: str) -> None:
    """Move the staged rows ``drawn`` to where the run reads them (``dest``, in
    ``OUT/.sample/``)."""
    if fs.is_remote(dest):
        with open(drawn, "rb") as fh:
            fs.write_bytes_atomic(dest, fh.read())
        os.unlink(drawn)
        return
    local = fs.local_path(dest)
    os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)
    shutil.move(drawn, local)


def sampled_positive_label(read: ReadOptions, source: str) -> str | None:
    """The label map of a run over drawn rows (``read``: of the drawn file) from the file
    ``source``: rows of two classes or more map as their own (``None``; the map is the
    same whatever the rows' order, so also the file's); rows of one class, or a given
    ``--positive-label``, are decided on the file's labels as a whole
    (``label_mix.run_positive_label``), so that a draw of one class maps as the file does."""
    if read.positive_label is None and label_mix.class_count(read, stop=2) >= 2:
        return None
    return label_mix.run_positive_label(replace(read, path=source), whole_file=True)
