"""The checks of a replay run before any pipeline, beside its configuration
(:mod:`~kernelstream.pipelines.replay.replay_args`): what ``--workers``, ``--runner dask`` and
``--submit-only`` can carry out, the head of the data (``kernelstream.data.check``: empty,
binary, wrong delimiter, continuous labels, mostly rejected) and the learners' memory at the
data's width. Each failure is a ``ConfigError`` (or ``ValueError``): rc 2, one line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kernelstream import data, fs
from kernelstream._suggest import did_you_mean
from kernelstream.data import check as data_check
from kernelstream.errors import ConfigError, WidthError
from kernelstream.learners.registry import check_width, fmt_bytes, memory_estimate, memory_limit
from kernelstream.pipelines.config import PROG, is_topic, learner_line

if TYPE_CHECKING:
    from kernelstream.data.options import ReadOptions
    from kernelstream.pipelines.replay.replay_args import ReplayConfig


def check_workers(args: argparse.Namespace, kafka_src: bool) -> None:
    """``--workers N`` runs N copies of the run's pipeline on shares of its streams and merges
    their outputs (``pipelines.replay.workers``); refuse what that cannot carry out, one line
    each."""
    if kafka_src:
        raise ConfigError("--workers splits the streams of a data file over processes; a Kafka "
                          "topic is read once, in its own order, by one run: drop --workers")
    if args.stream != "none":
        raise ConfigError(f"--stream {args.stream} runs in memory on the loop runner: drop "
                          "--workers")
    if args.runner in ("portable", "beam"):
        raise ConfigError(f"--workers starts N local pipelines on the direct (or loop) runner; "
                          f"--runner {args.runner} spreads the work over that runner's own "
                          "workers (its options go after '--'): drop --workers")
    if args.kafka_out is not None:
        raise ConfigError("--kafka-out is not available with --workers: drop one of them")


# the local Dask cluster's worker processes when --workers is not given: two, as on a laptop
DASK_WORKERS = 2


def check_dask(args: argparse.Namespace, kafka_src: bool, scheduler: str | None) -> None:
    """``--runner dask`` runs the stateless replay (``pipelines.replay.dask_replay``): each of a
    file's permuted streams learnt whole by one task. Refuse what it cannot carry out, and a
    missing Dask, one line each."""
    if args.runner != "dask":
        raise ConfigError("--dask-scheduler names the cluster of --runner dask: add "
                          "--runner dask or drop --dask-scheduler")
    if kafka_src or args.kafka_out is not None:
        raise ConfigError("--runner dask replays a data file's permuted streams; a Kafka "
                          "topic (or --kafka-out) needs a streaming runner: --runner direct")
    if scheduler is not None:
        if args.workers is not None:
            raise ConfigError("--workers sizes a local Dask cluster; the cluster of "
                              "--dask-scheduler runs on its own workers: drop --workers")
        if not scheduler.startswith(("tcp://", "tls://", "inproc://", "ucx://", "ws://",
                                     "wss://")):
            raise ConfigError(f"--dask-scheduler {scheduler!r}: expected a scheduler "
                              "address such as tcp://HOST:8786")
    import importlib.util

    if importlib.util.find_spec("distributed") is None:
        raise ConfigError("--runner dask needs Dask: pip install 'kernelstream[dask]' "
                          "(or 'dask[distributed]')")


# Beam runners that run the job inside the launching process (or a helper it starts and stops):
# a job submitted there ends with the launcher. Lower case, "Runner" suffix optional.
IN_PROCESS_BEAM_RUNNERS = ("direct", "fnapi", "prism", "bundlebaseddirect", "switchingdirect",
                           "interactive", "render")


def check_submit_only(args: argparse.Namespace) -> None:
    """``--submit-only`` hands the job to a runner that runs it elsewhere and exits: refuse,
    one line each, a runner that would run it in this process (``direct``, ``loop``, the
    local job service of ``portable`` without ``--job_endpoint``, an in-process Beam
    runner) and what needs the end of the run (``--checkpoint``, ``--follow``,
    ``--workers``)."""
    pipeline_args = list(getattr(args, "pipeline_args", ()))
    named = [a.split("=", 1)[1] for a in pipeline_args if a.startswith("--runner=")]
    beam_runner = named[-1].lower().removesuffix("runner") if named else ""
    local = (args.runner not in ("portable", "beam")
             or (args.runner == "portable"
                 and not any(a.startswith("--job_endpoint") for a in pipeline_args))
             or (args.runner == "beam" and beam_runner in IN_PROCESS_BEAM_RUNNERS))
    if local:
        what = (f"--runner={named[-1]}" if args.runner == "beam" and named
                else f"the {args.runner} runner"
                + (" without --job_endpoint" if args.runner == "portable" else ""))
        raise ConfigError(f"--submit-only needs a runner that runs the job elsewhere (--runner "
                          f"beam -- --runner=DataflowRunner ..., or --runner portable -- "
                          f"--job_endpoint=HOST:PORT); {what} runs it in this process")
    for flag, on in (("--checkpoint", args.checkpoint is not None),
                     ("--follow", getattr(args, "follow", None) is not None),
                     ("--workers", (args.workers or 1) > 1)):
        if on:
            raise ConfigError(f"{flag} needs the end of the run, which --submit-only does not "
                              f"wait for: drop one of them")


# Rows a replay's up-front data check reads: enough to see what a file is, cheap on any size
# (parsed line by line: 5000 rows took 0.1-0.2 s, a fifth of a 50k-row loop replay's fixed cost)
_PRECHECK_RECORDS = 1000


def read_error(src: str, exc: Exception) -> ConfigError:
    """The one line of a file that cannot be read: the reader's first line, naming the file
    when the reader does not (pyarrow's "Parquet magic bytes not found in footer")."""
    line = str(exc).splitlines()[0] if str(exc) else repr(exc)
    name = str(src).rsplit("/", 1)[-1]
    return ConfigError(line if name and name in line else f"{src}: {line}")


def check_source(src: str, runner: str | None = None) -> None:
    """DATA before anything reads it: not empty (``""`` ran the default data set), not a
    directory, and a missing local file named with the closest embedded data set ("did you
    mean"); a missing file is left to the ``beam`` and ``portable`` runners, whose workers
    may see files this process does not."""
    if not src:
        raise ConfigError("DATA is empty: give an embedded data set's name or a file path")
    if is_topic(src) or fs.is_remote(src) or is_embedded(src):
        return
    path = fs.local_path(src)  # file://PATH too
    if os.path.isdir(path):
        raise ConfigError(f"{src} is a directory: give a data file")
    if not os.path.exists(path) and runner not in ("beam", "portable"):
        names = [n for name in data.embedded_datasets() for n in (
            name, *data.embedded_dataset_info(name).get("aliases", "").split(",")) if n]
        raise ConfigError(f"cannot read data: {src!r} is neither a file nor an embedded data "
                          "set" + did_you_mean(src, names))


def check_data(config: ReplayConfig) -> None:
    """Before the pipeline: the read options must fit the file (columns, --key-by), and its
    head must not be empty, binary, continuous labels for classification, or mostly
    rejected; each raises :class:`ConfigError` with one line naming the fix. Embedded data
    sets are checked too (read options such as --n-features can reject their rows); Kafka
    topics are checked by their source. Returns nothing; the width seen feeds
    :func:`check_memory`."""
    src = config.data
    width = config.read.n_features
    embedded = is_embedded(src)
    report = None
    if not is_topic(src) and (embedded or fs.exists(src)):
        # an embedded set too: it is valid, but read options (--n-features) can reject its rows
        read = replace(config.read, path=data_path(src))
        try:
            report = data_check.check_file(read, max_records=_PRECHECK_RECORDS)
        except (ValueError, OSError) as exc:
            raise read_error(src, exc) from None
        problem = data_check.verdict(report)
        if problem is not None:
            raise ConfigError(problem)
    nnz: int | None = None
    head = None  # the rows the width was seen on, when they are not the whole file
    if embedded:  # its manifest's width: its stored rows are as wide as the file's
        width = width or int(data.embedded_dataset_info(src)["features"])
    elif report is not None:  # a file read above
        if width is None and report.truncated:
            head = report.rows + report.dead.total
        width = width or report.width
        nnz = max(1, round(report.nnz_mean))
    if config.read.hash_features is not None:
        width, head = 1 << config.read.hash_features, None
    # the rows the learners will get (embedded sets are narrow and dense; --stream is dense)
    sparse = (config.stream == "none" and (nnz is not None or is_topic(src))
              and config.read.sparse_rows(width or 1))
    if report is not None and nnz is not None and not config.read.sparse_rows(width or 1):
        rows = report.rows if config.read.limit is None else min(report.rows, config.read.limit)
        check_dense_rows(config.read, width or 1, rows)
    check_memory(config.learners, width or 1, sparse=sparse, nnz=nnz, head=head)
    if report is not None and config.read.key_by is not None:
        check_entities(config, len(report.entities), report.rows + report.dead.total,
                       width or 1, sparse, nnz)


def check_entities(config: ReplayConfig, entities: int, records: int, width: int,
                   sparse: bool, nnz: int | None) -> None:
    """``--key-by``: a model per entity, so the entities of the file's first ``records``
    records (a lower bound on the file's) times the models' memory must fit (100 entities of
    rff-rls at D = 500 held 490 MB); else a :class:`ConfigError` naming the learner that
    weighs most and the fix."""
    sizes = [(memory_estimate(c.learner, dict(c.params), max(int(width), 1), sparse=sparse,
                              nnz_per_row=nnz)[0], c.label) for c in config.learners]
    per, heaviest = max(sizes)
    total, limit = entities * sum(s for s, _ in sizes), available_memory()
    if total <= limit:
        return
    raise ConfigError(
        f"--key-by {config.read.key_by}: a model per entity, and the first {records:,} "
        f"records hold {entities:,} entities: {fmt_bytes(total)} of models (learner "
        f"{heaviest}: {fmt_bytes(per)} each), more than the {fmt_bytes(limit)} available; use "
        "a budgeted learner (bpa-s, the default with --key-by) or a smaller model")


def check_dense_rows(read: ReadOptions, width: int, rows: int) -> None:
    """Refuse, before reading, dense rows (``--rows dense``, or scaled: ``--scale``) that
    cannot fit in memory: the run holds its ``rows`` rows (at least those the data check
    read) as ``rows × width`` float64s (``engine.replay.sources.finish_rows``' own check,
    which fails inside the pipeline)."""
    need, limit = rows * width * 8, available_memory()
    if need <= limit:
        return
    # what made them dense: --rows dense as asked, else the scaling
    why = ("--rows dense" if read.rows == "dense" or read.scale == "none"
           else f"--scale {read.scale} makes them dense")
    raise ConfigError(f"{read.path}: dense rows of {width:,} features ({why}) need "
                      f"{fmt_bytes(need)} for {rows:,} rows, more than the {fmt_bytes(limit)} "
                      f"available: keep them sparse (--scale none, --rows auto), hash the "
                      f"features (--hash-features K) or read fewer rows (--limit)")


def is_embedded(src: str) -> bool:
    try:
        data.embedded_dataset_info(src)
    except KeyError:
        return False
    return True


def data_path(src: str) -> str:
    """The file a data argument names: an embedded set's packaged file, else ``src``."""
    return str(data.embedded_path(src)) if is_embedded(src) else src


def available_memory() -> int:
    """Bytes a run may plan for (``learners.registry.memory_limit``: physical memory, or
    ``$KERNELSTREAM_MEMORY_LIMIT``)."""
    return memory_limit()


# A model that fits but plans more than this gets a note on stderr before the run starts.
_WARN_BYTES = 2 << 30


def check_memory(configs: Sequence[Any], width: int, sparse: bool = False,
                  nnz: int | None = None, head: int | None = None) -> None:
    """Refuse, before reading, a learner that cannot fit in this machine's memory at this
    width (the learners' own estimate, ``learners.registry.check_width``: e.g. budget ×
    width × 8 bytes of dense support vectors, or budget × non-zeros per row for sparse rows),
    with one line naming the fix. ``head``: the width was seen on the file's first ``head``
    records only (the file may be wider, and need more), which the line says."""
    for c in configs:
        try:
            check_width(c.learner, dict(c.params), max(int(width), 1), sparse=sparse,
                        nnz_per_row=nnz)
        except WidthError as e:
            seen = ("" if head is None else f" (width {width:,}: that of the file's first "
                    f"{head:,} records; the whole file may be wider)")
            raise ConfigError(learner_line(c, f"{e}{seen}")) from None
        need, what = memory_estimate(c.learner, dict(c.params), max(int(width), 1), sparse=sparse,
                                     nnz_per_row=nnz)
        if need > _WARN_BYTES:  # it fits, but a user should know before waiting for it
            print(f"{PROG}: note: learner {c.label} plans {fmt_bytes(need)} for {what}; "
                  "--hash-features K bounds the width" + (", or use a learner that keeps "
                  "sparse rows" if sparse else ""), file=sys.stderr)
