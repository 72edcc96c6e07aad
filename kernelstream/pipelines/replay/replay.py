"""A replay run: what it is asked to do, its runners, and its results (imports no Beam).

``run_replay`` evaluates several learner configurations on several permutations of a data set
(and, with ``key_by``, one model per entity), each stream as its own key, and writes
``out/{predictions,metrics,dead_letters}/`` as Parquet; it returns one summary dict per stream
key, derived from the metrics output. Runners (``pipelines.config.RUNNERS``):

* ``loop`` — ``kernelstream.pipelines.replay.loop``: the engine in a plain Python loop, writing the
  same Parquet files, so outputs compare one to one. It never imports Beam.
* ``direct``, ``portable``, ``beam`` — the Beam pipeline of ``kernelstream.pipelines.
  beam_replay`` (imported only for them) on Beam's FnApiRunner, the portable job API (a local
  job service or a ``--job_endpoint``), or the runner named by ``--runner=...`` in
  ``pipeline_args``.
* ``dask`` — ``kernelstream.pipelines.replay.dask_replay``: Beam's DaskRunner on a dask.distributed
  cluster, each stream learnt whole by one task through the loop's core (no state or timers:
  a file's permuted streams only).

Every run is a :class:`~kernelstream.pipelines.replay.replay_args.ReplayConfig` (the CLI's
commands build it from their arguments with ``ReplayConfig.from_args``, :func:`run_replay`
from its keywords), made into the runners' plan
(:class:`~kernelstream.pipelines.replay.plan.ReplayRun`) by :func:`plan` and carried out by
:func:`execute`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from kernelstream import data as ksdata
from kernelstream import fs, kafka_client
from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import TextFormat
from kernelstream.data.scaling import ranges_doc
from kernelstream.data.stamp import run_stamp
from kernelstream.engine.evaluate import EvalResult
from kernelstream.engine.learner_config import LearnerConfig, records
from kernelstream.engine.replay import checkpoints as ckpts
from kernelstream.engine.replay import outputs
from kernelstream.engine.replay.core import PROGRESS_LOGGER
from kernelstream.engine.replay.metrics import key_summaries, latest_rows
from kernelstream.engine.replay.outputs import OUTPUTS, ensure_nonempty, iter_rows
from kernelstream.engine.writer_lock import WriterLock
from kernelstream.errors import ConfigError
from kernelstream.pipelines.config import check_runner, is_topic
from kernelstream.pipelines.replay.loop import run_loop
from kernelstream.pipelines.replay.plan import (
    ORDERS,
    Data,
    Execution,
    Learners,
    Outputs,
    Protocol,
    Recovery,
    ReplayResult,
    ReplayRun,
    _replay_options,
)
from kernelstream.pipelines.replay.replay_args import ReplayConfig

if TYPE_CHECKING:  # the Kafka client is imported by the runs that read or write a topic
    from kernelstream.kafka_client import KafkaTopic


def resolve_data(name_or_path: str, fmt: str | None) -> tuple[str, str | None]:
    """An embedded data set name or a file path → ``(path, fmt)``."""
    p = os.fspath(name_or_path)
    if not fs.exists(p):
        with contextlib.suppress(KeyError):
            info = ksdata.embedded_dataset_info(p)
            return str(ksdata.embedded_path(p)), fmt or info.get("format")
        raise FileNotFoundError(f"{p!r} is neither a file nor an embedded data set")
    return p, fmt


def make_run(data: str, configs: Sequence[LearnerConfig | tuple[Any, ...]],
             out: str | os.PathLike[str], **options: Any) -> ReplayRun:
    """The plan (:func:`plan`) of ``ReplayConfig.of(data, configs, out, **options)``: the
    Python API's short form; ``options`` are fields of :class:`ReplayConfig` or of its read
    options."""
    return plan(ReplayConfig.of(data, configs, out, **options))


def plan(config: ReplayConfig) -> ReplayRun:
    """The runners' :class:`ReplayRun` of ``config``: the data resolved (an embedded name to
    its file), the pipeline options after ``--`` applied, and what a run cannot do refused.

    ``data`` may be a topic ``kafka://HOST:PORT/TOPIC`` (read as in ``kafka_client``, up to the
    log's end when the run starts; ``kafka_idle``: how long a partition may deliver nothing
    before that end, ``kafka_max_seconds``: the read's limit in all); ``kafka_out``
    (``kafka://HOST:PORT/PREFIX``) also sends the three outputs to the topics
    PREFIX-predictions, PREFIX-metrics and PREFIX-dead-letters. ``checkpoint`` (a directory,
    Kafka sources only) resumes from the newest checkpoint there and writes the next one
    (``engine.replay.checkpoints``). ``shard`` = (I, N): learn only the streams of shard I of N, for
    ``replay --workers`` (``pipelines.replay.workers``), which clears and reads back the outputs.
    ``first_permutation``/``stream_rows``: the permutations ``first_permutation`` onwards,
    each cut to its first ``stream_rows`` positions (``kernelstream tune``)."""
    c = config
    shard, shards = c.shard or (0, 1)
    topic = is_topic(c.data)
    order = "file" if topic else c.order
    if shards > 1 and (topic or order != "permuted" or c.kafka.checkpoint is not None):
        raise ValueError("shards split the streams of a permuted file replay: a Kafka topic, "
                         "a file-order stream or a checkpoint is one stream read once")
    if c.runner == "dask" and (topic or order != "permuted" or c.kafka.out is not None):
        raise ValueError("the dask runner learns a file's permuted streams, each in one task: "
                         "a Kafka topic, a file-order stream or --kafka-out needs another "
                         "runner")
    if c.kafka.checkpoint is not None and not topic:
        raise ValueError("checkpoints continue a Kafka topic: a file replay has nothing to "
                         "continue (give a kafka:// source)")
    kafka = None
    if topic:
        kafka = kafka_client.KafkaReadOptions(_parse_topic(c.data), idle_seconds=c.kafka.idle,
                                              max_seconds=c.kafka.max_seconds,
                                              client=c.kafka.client)
        if c.permutations != 1:
            raise ValueError("a Kafka topic is one stream in its own order: permutations must "
                             "be 1")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    if order == "file" and c.permutations != 1:
        raise ValueError("order='file' is a single stream: permutations must be 1")
    if order == "file" and (c.first_permutation or c.stream_rows is not None):
        raise ValueError("order='file' is the whole stream in its own order: no "
                         "first_permutation or stream_rows")
    check_runner(c.runner)
    path, fmt = (c.data, c.read.fmt) if topic else resolve_data(c.data, c.read.fmt)
    opts = _replay_options(c.pipeline_args)
    reshuffle = c.reshuffle
    if opts.reshuffle_blocks:
        reshuffle = opts.reshuffle_blocks == "true"
    read = replace(c.read, path=path, fmt=fmt)
    if not topic and read.stamp is None:  # its readers check the file is as it was now
        read = replace(read, stamp=run_stamp(path))
    if kafka is not None:
        kafka_client.check_read_options(read)
    return ReplayRun(
        protocol=Protocol(seed=c.seed, permutations=c.permutations, order=order,
                          first_permutation=c.first_permutation, stream_rows=c.stream_rows),
        data=Data(source=c.data, read=read, kafka=kafka, chunk_bytes=c.chunk_bytes,
                  auto_scale=c.auto_scale),
        learners=Learners(tuple(c.learners)),
        outputs=Outputs(out=c.out, metrics_window=opts.metrics_window or c.metrics_window,
                        kafka_out=None if c.kafka.out is None else _parse_topic(c.kafka.out),
                        kafka_client=c.kafka.client),
        recovery=Recovery(checkpoint=c.kafka.checkpoint),
        execution=Execution(runner=c.runner, pipeline_args=tuple(c.pipeline_args),
                            block_size=opts.block_size or c.block_size, reshuffle=reshuffle,
                            scramble=c.scramble, early_state=opts.early_state or "auto",
                            shard=shard, shards=shards, dask_scheduler=c.dask_scheduler,
                            dask_workers=c.workers))


def _parse_topic(url: str) -> KafkaTopic:
    return kafka_client.KafkaTopic.parse(url)


def run_replay(data: str, configs: Sequence[LearnerConfig | tuple[Any, ...]],
               out: str | os.PathLike[str], **options: Any) -> ReplayResult:
    """Run the replay of ``data`` for ``configs`` (``LearnerConfig`` s or
    ``(label, learner, params)`` tuples) and write ``out/{predictions,metrics,dead_letters}/``
    as Parquet; ``options`` are fields of :class:`ReplayConfig` (``seed``, ``permutations``,
    ``runner``, ``block_size``, ``order`` ...) or of its read options (``scale``, ``limit``,
    ``key_by`` ..., as in ``data.load``).

    The read is decided as ``kernelstream replay`` decides it (``ReplayConfig.of``): ``task``
    not given is the learners', and ``scale`` and ``scale_target`` default to ``"auto"``,
    resolved on the file's first rows by the CLI's rule; the result's ``scale`` and
    ``auto_scale`` (why it scaled) and its configurations' ``target`` (a standardised
    regression target) say what was decided. ``scale="none"``, ``scale_target="none"`` keep
    the data as it is.

    ``order="permuted"`` (the default, the papers' protocol) loads the data set on one worker
    to permute it; ``order="file"`` streams the file in its own order through the chunked
    reader, for files larger than one worker's memory.

    Gaussian widths left to the data (``gamma`` unset or ``"auto"``, ``sigma="auto"``,
    ``sigmas`` unset or ``"auto"``) are estimated from the file's first rows as ``kernelstream
    replay`` estimates them (:class:`ReplayConfig`); the numbers learnt with are the params of
    the result's ``configs`` and ``eval_results()``.

    The result's ``warnings`` (a diverged learner, one no better than the no-skill baseline,
    one predicting one class: what ``kernelstream replay`` prints) are also issued with
    ``warnings.warn(..., RuntimeWarning)``."""
    result = execute(make_run(data, configs, out, **options))
    for line in result.warnings:
        warnings.warn(line, RuntimeWarning, stacklevel=2)
    return result


def run_loop_outputs(data: str, configs: Sequence[LearnerConfig | tuple[Any, ...]],
                     out: str | os.PathLike[str], **options: Any) -> ReplayResult:
    """:func:`run_replay` on the loop runner: the same files from a plain Python loop."""
    return run_replay(data, configs, out, **{**options, "runner": "loop"})


_HELD = threading.local()  # the checkpoint locks this thread holds: {directory: lock}


@contextlib.contextmanager
def checkpoint_lock(directory: str | None) -> Iterator[None]:
    """Hold the checkpoint directory's writer lock (``engine.live.snapshot.store.WriterLock``: a
    ``flock`` the kernel drops when the holder dies) for the block: a second run on the
    directory fails at once with :class:`~kernelstream.engine.live.snapshot.store.CheckpointInUse`.
    Re-entrant within a thread, so ``--follow`` holds it across its runs. Object-store
    directories (``gs://``...) have no file locks: there, one writer at a time is the
    user's to ensure."""
    if directory is None or fs.is_remote(directory):
        yield
        return
    d = os.path.realpath(fs.local_path(directory))
    held: dict[str, WriterLock] = _HELD.__dict__.setdefault("locks", {})
    if d in held:
        yield
        return
    os.makedirs(d, exist_ok=True)
    held[d] = WriterLock.acquire(d)
    try:
        yield
    finally:
        held.pop(d).release()


def execute(run: ReplayRun) -> ReplayResult:
    """Run ``run`` (under its checkpoint directory's lock, see :func:`checkpoint_lock`)."""
    with checkpoint_lock(run.recovery.checkpoint):
        return _execute(run)


def _execute(run: ReplayRun) -> ReplayResult:
    configs = records(run.learners.configs)
    if run.recovery.checkpoint is not None:
        fs.makedirs(run.recovery.checkpoint)
        run = replace(run, recovery=replace(
            run.recovery, resume_from=ckpts.latest(run.recovery.checkpoint),
            writes=ckpts.next_checkpoint(run.recovery.checkpoint)))
        if run.recovery.resume_from is not None:
            try:
                ckpts.check_configs(run.recovery.resume_from, configs)
                _check_resume_read(run)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    run = _check_brokers(run)
    if run.execution.shards == 1:  # a shard's outputs are cleared by the parent, first
        clear_outputs(run.outputs.out)
    if run.execution.expected_examples is None and logging.getLogger(
            PROGRESS_LOGGER).isEnabledFor(logging.INFO):
        # a total for the progress lines (counted only when they show)
        run = replace(run, execution=replace(run.execution,
                                             expected_examples=expected_examples(run)))
    t0 = time.perf_counter()
    try:
        if run.execution.runner == "loop":
            counters = run_loop(run)
        elif run.execution.runner == "dask":  # Beam and dask.distributed: only for the runs on Dask
            from kernelstream.pipelines.replay.dask_replay import run_dask

            counters = run_dask(run)
        else:
            counters = _beam().run_beam(run)
        seconds = time.perf_counter() - t0
        carried: list[dict[str, Any]] = []  # a resume without new rows: the state it continues
        if run.recovery.writes is not None:
            assert run.data.kafka is not None and run.data.kafka.stop is not None
            resume = run.recovery.resume_from
            carried = _carry_metrics(run)
            ckpts.commit(run.recovery.writes, {
                "resumed_from": None if resume is None else resume.number,
                "data": run.data.source, "seed": run.protocol.seed, "configs": configs,
                # --scale auto's ranges of the first run's first rows: the next runs keep them
                "scale_ranges": ranges_doc(run.data.read.scale_ranges),
                # the +1 class of the labels seen: a resume may not map them otherwise
                "positive_label": run.data.read.positive_label,
                # the snapshot of the log's end the read stopped at (partition -> offset)
                "read_to": [[p, o] for p, o in run.data.kafka.stop],
                # the folder holding this run's outputs: the next run must not clear it
                "out": _where(run.outputs.out)})
    except BaseException:
        # outputs of a run that committed no checkpoint: the next run writes them again
        if run.recovery.writes is not None and not fs.exists(run.recovery.writes.marker):
            with contextlib.suppress(Exception):
                clear_outputs(run.outputs.out)
        raise
    res = (ReplayResult([], counters, run.outputs.out, run.execution.runner, seconds)
           if run.execution.shards > 1  # the parent reads back the outputs of all the shards
           else read_outputs(run.outputs.out, counters, run.execution.runner, seconds))
    if carried:
        res = replace(res, summaries=key_summaries(carried))
    # what it learnt with: the widths the API resolved from the data are in their params
    return replace(res, configs=tuple(run.learners.configs), seed=run.protocol.seed,
                   scale=run.data.read.scale, auto_scale=run.data.auto_scale)


def _check_resume_read(run: ReplayRun) -> None:
    """Refuse a resume into the output folder of the run it continues (clearing it would lose
    that run's rows), or that would read the topic otherwise than the checkpoint's runs did:
    another ``--positive-label`` (the classes seen would flip midway) or another width."""
    ckpt, read = run.recovery.resume_from, run.data.read
    assert ckpt is not None
    info = ckpt.info()
    if info.get("out") == _where(run.outputs.out):  # (the CLI refuses it before its claim)
        raise ValueError(f"--out {run.outputs.out} holds the outputs of the run that committed "
                         f"{ckpt.name} of {ckpt.directory}, which this run continues: give "
                         "this run a new output folder")
    if "positive_label" in info and info["positive_label"] != read.positive_label:
        def shown(v: str | None) -> str:
            return "the default (-1/0 and 1)" if v is None else repr(v)
        raise ValueError(
            f"the checkpoint {ckpt.name} in {ckpt.directory} was learnt with --positive-label "
            f"{shown(info['positive_label'])}; this run has {shown(read.positive_label)}: "
            "use the same, or a new checkpoint directory")
    d = 1 << read.hash_features if read.hash_features is not None else read.n_features
    saved = ckpt.position().n_features
    if d is not None and saved is not None and d != saved:
        raise ValueError(f"the checkpoint {ckpt.name} in {ckpt.directory} has {saved} "
                         f"features, not {d}: use the same --n-features, or a new checkpoint "
                         "directory")


def _carry_metrics(run: ReplayRun) -> list[dict[str, Any]]:
    """Write the checkpoint's newest metrics row of every stream so far (the resumed
    checkpoint's, then this run's); returns them when this run wrote none (nothing new on
    the topic: its summary is the state it continues), else ``[]``."""
    assert run.recovery.writes is not None
    schema = outputs.METRICS_SCHEMA
    new = list(iter_rows(fs.join(run.outputs.out, "metrics"), schema))
    resume = run.recovery.resume_from
    old = [] if resume is None else ckpts.read_metrics(resume, schema)
    ckpts.write_metrics(run.recovery.writes, list(latest_rows([*old, *new]).values()), schema)
    return old if not new else []


def _where(out: str) -> str:
    return out if fs.is_remote(out) else os.path.realpath(fs.local_path(out))


def _check_brokers(run: ReplayRun) -> ReplayRun:
    """``run`` with its topic read's end fixed at the log's end now, once the brokers have
    answered and the resume offsets are found in the log: checked in seconds, before any
    pipeline starts."""
    if run.data.kafka is not None:
        resume = run.recovery.resume_position
        run = replace(run, data=replace(run.data, kafka=kafka_client.snapshot_ends(
            run.data.kafka, None if resume is None else resume.offsets)))
    if run.outputs.kafka_out is not None:
        kafka_client.check_reachable(run.outputs.kafka_out.bootstrap, run.outputs.kafka_client,
                                     f"--kafka-out {run.outputs.kafka_out.url}")
    return run


def submit(run: ReplayRun) -> str:
    """Hand ``run`` to its runner and return at once (``replay --submit-only``), the job's
    id: the runner writes the outputs; ``kernelstream summary OUT`` reads them back once the
    job has finished (:func:`read_outputs`). No checkpoint: committing one needs the end of
    the run."""
    if run.recovery.checkpoint is not None:
        raise ConfigError("a checkpoint is committed when the run ends: --submit-only cannot "
                          "write one")
    run = _check_brokers(run)
    clear_outputs(run.outputs.out)
    return str(_beam().submit_beam(run))


def _beam() -> ModuleType:
    """:mod:`~kernelstream.pipelines.replay.beam_replay`, imported on first call: the replay's
    one seam to Beam (Dask's runner too goes through Beam)."""
    # Beam takes a second to import: only for the runs on its runners, never for the loop's
    from kernelstream.pipelines.replay import beam_replay

    return beam_replay


def check_pipeline_options(config: ReplayConfig) -> None:
    """Beam's pipeline options after ``--`` parsed before the run, for the runners on Beam
    (:func:`~kernelstream.pipelines.replay.beam_replay.check_beam_options`)."""
    if config.runner != "loop" and config.pipeline_args:
        _beam().check_beam_options(config.pipeline_args)


def load_runner(runner: str) -> None:
    """Import what a run on ``runner`` imports (Beam, but for the loop runner) now: a worker
    of ``--workers`` does it while its parent checks the data, before it is let go."""
    if runner != "loop":
        _beam()


def expected_examples(run: ReplayRun) -> int | None:
    """The examples ``run`` learns over all the streams it runs (a shard: its own), for the
    progress lines' total and ETA: the file's records (a count of its lines, or Parquet's
    row count: a pass that costs a fraction of the parse), at most ``limit`` and
    ``stream_rows``, times the streams. An upper bound when lines turn out to be dead
    letters; None when not known in advance (a Kafka topic, a remote file) or unreadable."""
    if run.data.kafka is not None or fs.is_remote(run.data.read.path):
        return None
    try:
        n = _count_records(run.data.read)
    except (OSError, ValueError):
        return None
    for cap in (run.data.read.limit, run.protocol.stream_rows):
        if cap is not None:
            n = min(n, cap)
    spec = run.spec
    if run.data.read.key_by is not None:  # every row is in one entity's stream; entities spread
        return n * len(run.learners.configs) * spec.permutations // spec.shards
    return n * sum(spec.owns(i, r) for i in range(len(run.learners.configs)) for r in spec.reps)


def _count_records(read: ReadOptions) -> int:
    """Records of a local data file: Parquet rows, or non-blank lines less a CSV header."""
    fmt = read.resolved_fmt()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(fs.local_path(read.path)).metadata.num_rows)
    n, after_newline = 0, True
    with fs.open_binary(read.path) as f, contextlib.suppress(*fs.DECOMPRESS_ERRORS):
        while chunk := f.read(1 << 22):  # (a truncated file: the lines before the cut)
            # a line counts at its newline when that follows something (not an empty line)
            nl = np.frombuffer(chunk, dtype=np.uint8) == 10
            prev = np.concatenate(([after_newline], nl[:-1]))
            n += int(np.count_nonzero(nl & ~prev))
            after_newline = bool(nl[-1])
    n += not after_newline  # a last line without a newline
    if fmt == "csv":
        tf = TextFormat.detect(read.path, "csv", read.label_column, read.delimiter,
                               read.header, read.key_by)
        n -= tf.header_line is not None
    return max(n, 0)


def read_outputs(out: str, counters: dict[str, int], runner: str,
                 seconds: float) -> ReplayResult:
    """The result of a finished run from its outputs: an empty file in each output directory
    that got none (readers always find the schema), and the per-key summaries of
    ``metrics/``."""
    for name in OUTPUTS:
        ensure_nonempty(fs.join(out, name), outputs.SCHEMAS[name])
    summaries = key_summaries(iter_rows(fs.join(out, "metrics"), outputs.METRICS_SCHEMA))
    return ReplayResult(summaries, counters, out, runner, seconds)


def clear_outputs(out: str) -> None:
    """Remove the Parquet files of a previous run in the output directories (only those, and
    the hidden temporary files a crashed run of the sinks may have left)."""
    for name in OUTPUTS:
        d = fs.join(out, name)
        fs.delete([*fs.list_files(d, "*.parquet"), *fs.list_files(d, ".*.parquet.tmp")])


# -- CLI adapter ---------------------------------------------------------------------------------


def run_config(config: ReplayConfig, **changes: Any) -> ReplayResult:
    """Run ``config`` (with ``changes``: other :class:`ReplayConfig` field values, e.g. a
    shard of ``replay --workers``) and return the :class:`ReplayResult`."""
    return execute(plan(replace(config, **changes) if changes else config))


def run_replay_config(config: ReplayConfig, **changes: Any) -> list[EvalResult]:
    """:func:`run_config`, as the per-configuration ``EvalResult`` s (the loop's
    ``summary.json`` schema)."""
    return run_config(config, **changes).eval_results(config.learners, config.seed)
