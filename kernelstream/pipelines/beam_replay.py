"""The replay pipeline on Beam: build, run, and read back its outputs.

``run_replay`` evaluates several learner configurations on several permutations of a data set
(and, with ``key_by``, one model per entity) in one pipeline, each stream as its own key::

    source (blocks + dead letters) → [Reshuffle] → LearnPredict → Parquet sinks
                                                   ├─ predictions/
                                                   ├─ metrics/
                                                   └─ dead_letters/

and returns one summary dict per stream key, derived from the metrics output. Runners:

* ``direct`` — Beam's FnApiRunner, named explicitly (the DirectRunner would first try to fetch
  the Prism binary). ``--direct_num_workers=N --direct_running_mode=multi_processing`` in
  ``pipeline_args`` runs it on N worker processes.
* ``portable`` — the portable path Flink uses: the pipeline is submitted with
  ``PortableRunner`` to the ``--job_endpoint`` in ``pipeline_args`` (e.g. Beam's Flink job
  server) or, without one, to a Beam local job service started on a free port and stopped
  afterwards, with a LOOPBACK environment unless ``--environment_type`` is given (EXTERNAL:
  a worker pool, see ``deploy/``).
* ``beam`` — the Beam runner named by ``--runner=...`` in ``pipeline_args`` (FlinkRunner,
  DataflowRunner, ...).
* ``loop`` — :func:`run_loop_outputs`: the same streams and the same per-block learning code,
  in a plain Python loop, writing the same Parquet files, so outputs compare one to one.

:func:`run_replay_config` adapts a CLI :class:`~kernelstream.pipelines.config.ReplayConfig` and
returns ``EvalResult`` s, the CLI runner signature.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from kernelstream import data as ksdata
from kernelstream import fs
from kernelstream._services import serve
from kernelstream.evaluate import EvalResult
from kernelstream.pipelines.config import ConfigError
from kernelstream.transforms import checkpoint as ckpts
from kernelstream.transforms.blocks import Block, PredictionBlock
from kernelstream.transforms.kafka import (
    KafkaBlocks,
    KafkaReadOptions,
    KafkaTopic,
    KafkaWriter,
    ReadKafkaBlocks,
    SourcePosition,
    WriteKafka,
    check_read_options,
    is_kafka_url,
    output_topics,
    prediction_rows,
)
from kernelstream.transforms.learn import (
    LearnerConfig,
    LearnPredict,
    Progress,
    StreamLearner,
    StreamState,
    StreamStateCoder,
    as_configs,
)
from kernelstream.transforms.metrics import eval_results, key_summaries
from kernelstream.transforms.ordering import ScrambleBlocks
from kernelstream.transforms.sinks import (
    DEAD_LETTER_SCHEMA,
    METRICS_SCHEMA,
    PREDICTIONS_SCHEMA,
    WriteParquet,
    ensure_nonempty,
    iter_rows,
    predictions_batch,
    rows_batch,
)
from kernelstream.transforms.sources import (
    FileLoader,
    ReadFileBlocks,
    ReadOptions,
    ReadPermutedStreams,
    StreamSpec,
    load_rows,
    stream_blocks,
)

RUNNERS = ("direct", "portable", "beam", "loop")
ORDERS = ("permuted", "file")
# Where LearnPredict parks early blocks. Ordered-list state is what the FnApiRunner and
# Beam's local job service implement best, but support for it through the portable Fn API on
# Flink and Dataflow is not established (apache/beam#21358, #20666), so "auto" uses bag state
# (supported everywhere; a range read scans only the parked blocks) on every other runner.
EARLY_STATES = ("auto", "ordered_list", "bag")
OUTPUTS = ("predictions", "metrics", "dead_letters")


class ReplayPipelineOptions(PipelineOptions):
    """Pipeline options of the replay pipeline (also settable as ``--block_size`` etc.)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument("--block_size", type=int, default=None,
                            help="rows per block moved through the pipeline")
        parser.add_argument("--metrics_window", type=int, default=None,
                            help="positions per metrics window")
        parser.add_argument("--reshuffle_blocks", default=None,
                            choices=("true", "false"),
                            help="redistribute blocks across workers before learning")
        parser.add_argument("--early_state", default=None, choices=EARLY_STATES,
                            help="state holding blocks that arrive early: ordered_list, bag, "
                            "or auto (ordered_list on the in-process runners, bag elsewhere)")


@dataclass
class ReplayRun:
    """What a replay run was asked to do (plain values; see :func:`run_replay`)."""

    data: str
    configs: list[LearnerConfig]
    out: str  # local directory or a URL (gs://...)
    read: ReadOptions
    seed: int = 0
    permutations: int = 1
    block_size: int = 1024  # large enough to amortise Beam's per-element cost (~1 ms a block)
    metrics_window: int = 1000
    reshuffle: bool | None = None  # None: when there are several streams and workers
    scramble: int | None = None  # seed: deliver blocks in a random order (tests)
    order: str = "permuted"  # "file": one stream in file order, read in parallel chunks
    chunk_bytes: int = 16 << 20
    runner: str = "direct"
    pipeline_args: list[str] = field(default_factory=list)
    early_state: str = "auto"
    kafka: KafkaReadOptions | None = None  # the data is a Kafka topic (``transforms.kafka``)
    kafka_out: KafkaTopic | None = None  # also write the outputs to PREFIX-{predictions,...}
    kafka_client: tuple[tuple[str, str], ...] = ()  # kafka-python settings of the sink
    checkpoint: str | None = None  # resume from / write checkpoints here (Kafka sources)
    # set by execute(): the checkpoint resumed from and the one this run writes
    resume_from: ckpts.Checkpoint | None = None
    writes: ckpts.Checkpoint | None = None

    @property
    def resume_position(self) -> SourcePosition | None:
        return None if self.resume_from is None else self.resume_from.position()

    @property
    def spec(self) -> StreamSpec:
        return StreamSpec(tuple(c.name for c in self.configs), seed=self.seed,
                          permutations=self.permutations, block_size=self.block_size,
                          shuffle=self.order == "permuted")


@dataclass
class ReplayResult:
    """Per-key summaries (from the metrics output), Beam counters, and where the outputs are."""

    summaries: list[dict[str, Any]]
    counters: dict[str, int]
    out: str  # local directory or a URL (gs://...)
    runner: str
    seconds: float

    def eval_results(self, configs: Sequence[LearnerConfig], seed: int) -> list[EvalResult]:
        return eval_results(self.summaries, configs, seed=seed)


def resolve_data(name_or_path: str, fmt: str | None) -> tuple[str, str | None]:
    """An embedded data set name or a file path → ``(path, fmt)``."""
    p = os.fspath(name_or_path)
    if not fs.exists(p):
        with contextlib.suppress(KeyError):
            info = ksdata.embedded_dataset_info(p)
            return str(ksdata.embedded_path(p)), fmt or info.get("format")
        raise FileNotFoundError(f"{p!r} is neither a file nor an embedded data set")
    return p, fmt


def make_run(
    data: str,
    configs: Sequence[LearnerConfig | tuple[Any, ...]],
    out: str | os.PathLike[str],
    *,
    seed: int = 0,
    permutations: int = 1,
    limit: int | None = None,
    scale: str = "none",
    fmt: str | None = None,
    task: str = "classification",
    n_features: int | None = None,
    label_column: int | str | None = None,
    positive_label: str | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    scale_target: str = "none",
    key_by: int | str | None = None,
    block_size: int = 1024,
    metrics_window: int = 1000,
    reshuffle: bool | None = None,
    scramble: int | None = None,
    order: str = "permuted",
    chunk_bytes: int = 16 << 20,
    runner: str = "direct",
    pipeline_args: Sequence[str] = (),
    kafka_idle: float = 5.0,
    kafka_max_seconds: float | None = None,
    kafka_out: str | None = None,
    kafka_client: Sequence[tuple[str, str]] = (),
    checkpoint: str | None = None,
) -> ReplayRun:
    """A :class:`ReplayRun` (see :func:`run_replay`); ``data`` may be a file, an embedded data
    set or a topic ``kafka://HOST:PORT/TOPIC`` (read as in ``transforms.kafka``, stopping
    after ``kafka_idle`` seconds without new records or ``kafka_max_seconds`` in all);
    ``kafka_out`` (``kafka://HOST:PORT/PREFIX``) also sends the three outputs to the topics
    PREFIX-predictions, PREFIX-metrics and PREFIX-dead-letters. ``checkpoint`` (a directory,
    Kafka sources only) resumes from the newest checkpoint there and writes the next one
    (``transforms.checkpoint``)."""
    if checkpoint is not None and not is_kafka_url(data):
        raise ValueError("checkpoints continue a Kafka topic: a file replay has nothing to "
                         "continue (give a kafka:// source)")
    kafka = None
    if is_kafka_url(data):
        kafka = KafkaReadOptions(KafkaTopic.parse(data), idle_seconds=kafka_idle,
                                 max_seconds=kafka_max_seconds, client=tuple(kafka_client))
        if permutations != 1:
            raise ValueError("a Kafka topic is one stream in its own order: permutations must "
                             "be 1")
        order = "file"
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    if order == "file" and permutations != 1:
        raise ValueError("order='file' is a single stream: permutations must be 1")
    if runner not in RUNNERS:
        raise ValueError(f"runner must be one of {', '.join(RUNNERS)}, got {runner!r}")
    path, fmt = (data, fmt) if kafka is not None else resolve_data(data, fmt)
    opts = PipelineOptions(list(pipeline_args)).view_as(ReplayPipelineOptions)
    if opts.block_size:
        block_size = opts.block_size
    if opts.metrics_window:
        metrics_window = opts.metrics_window
    if opts.reshuffle_blocks:
        reshuffle = opts.reshuffle_blocks == "true"
    early_state = opts.early_state or "auto"
    read = ReadOptions(path=path, fmt=fmt, n_features=n_features, label_column=label_column,
                       task=task, scale=scale, limit=limit, positive_label=positive_label,
                       delimiter=delimiter, header=header, key_by=key_by,
                       scale_target=scale_target)
    if kafka is not None:
        check_read_options(read)
    return ReplayRun(data=os.fspath(data), configs=list(as_configs(configs).values()),
                     out=os.fspath(out), read=read, seed=seed, permutations=permutations,
                     block_size=block_size, metrics_window=metrics_window, reshuffle=reshuffle,
                     scramble=scramble, order=order, chunk_bytes=chunk_bytes, runner=runner,
                     pipeline_args=list(pipeline_args), early_state=early_state,
                     kafka=kafka,
                     kafka_out=None if kafka_out is None else KafkaTopic.parse(kafka_out),
                     kafka_client=tuple(kafka_client),
                     checkpoint=None if checkpoint is None else os.fspath(checkpoint))


def run_replay(data: str, configs: Sequence[LearnerConfig | tuple[Any, ...]],
               out: str | os.PathLike[str], **kw: Any) -> ReplayResult:
    """Run the replay of ``data`` for ``configs`` (``LearnerConfig`` s or
    ``(name, learner, params)`` tuples) and write ``out/{predictions,metrics,dead_letters}/``
    as Parquet. Keyword arguments are those of :func:`make_run` (data options as in
    ``data.load``, ``seed``, ``permutations``, ``limit``, ``scale``, ``key_by``,
    ``block_size``, ``metrics_window``, ``reshuffle``, ``scramble``, ``order``,
    ``chunk_bytes``, ``runner``, ``pipeline_args``).

    ``order="permuted"`` (the default, ALGORITHMS.md §2.1) loads the data set on one worker
    to permute it; ``order="file"`` streams the file in its own order through the chunked
    reader, for files larger than one worker's memory."""
    return execute(make_run(data, configs, out, **kw))


def execute(run: ReplayRun) -> ReplayResult:
    _clear_outputs(run.out)
    configs = {c.name: {"learner": c.learner, "params": c.params} for c in run.configs}
    if run.checkpoint is not None:
        fs.makedirs(run.checkpoint)
        run = replace(run, resume_from=ckpts.latest(run.checkpoint),
                      writes=ckpts.next_checkpoint(run.checkpoint))
        if run.resume_from is not None:
            try:
                ckpts.check_configs(run.resume_from, configs)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    t0 = time.perf_counter()
    if run.runner == "loop":
        counters = _run_loop(run)
    else:
        counters = _run_beam(run)
    seconds = time.perf_counter() - t0
    if run.writes is not None:
        ckpts.commit(run.writes, {
            "resumed_from": None if run.resume_from is None else run.resume_from.number,
            "data": run.data, "seed": run.seed, "configs": configs})
    for name, schema in zip(OUTPUTS, (PREDICTIONS_SCHEMA, METRICS_SCHEMA, DEAD_LETTER_SCHEMA),
                            strict=True):
        ensure_nonempty(fs.join(run.out, name), schema)
    summaries = key_summaries(iter_rows(fs.join(run.out, "metrics"), METRICS_SCHEMA))
    return ReplayResult(summaries, counters, run.out, run.runner, seconds)


def _clear_outputs(out: str) -> None:
    """Remove the Parquet files of a previous run in the output directories (only those, and
    the hidden temporary files a crashed run of the sinks may have left)."""
    for name in OUTPUTS:
        d = fs.join(out, name)
        fs.delete([*fs.list_files(d, "*.parquet"), *fs.list_files(d, ".*.parquet.tmp")])


# -- Beam ----------------------------------------------------------------------------------------


def build_pipeline(p: beam.Pipeline, run: ReplayRun) -> None:
    """Add the replay transforms to ``p``."""
    if run.kafka is not None:
        src = p | "Read" >> ReadKafkaBlocks(run.kafka, run.read, run.spec.configs,
                                            run.block_size, run.resume_position)
    elif run.order == "file":
        src = p | "Read" >> ReadFileBlocks(run.read, run.spec.configs, run.block_size,
                                           run.chunk_bytes)
    else:
        src = p | "Read" >> ReadPermutedStreams(FileLoader(run.read), run.spec)
    blocks = src.blocks
    if run.scramble is not None:
        blocks = blocks | "Scramble" >> ScrambleBlocks(run.scramble)
    elif run.reshuffle or (run.reshuffle is None and _workers(run) > 1 and (
            len(run.configs) * run.permutations > 1 or run.read.key_by is not None)):
        # Spread the streams over workers; LearnPredict restores each stream's order. (With
        # one stream or one worker the shuffle would only cost time.)
        blocks = blocks | "Reshuffle" >> beam.Reshuffle()
    saved = (None if run.resume_from is None
             else p | "SavedStates" >> ckpts.ReadStates(run.resume_from))
    out = blocks | "Learn" >> LearnPredict(run.configs, seed=run.seed,
                                           metrics_window=run.metrics_window,
                                           source=run.read.path,
                                           early_state=resolve_early_state(run),
                                           initial_states=saved,
                                           emit_states=run.writes is not None)
    if run.writes is not None:
        _ = out.states | "Checkpoint" >> ckpts.WriteCheckpoint(run.writes, saved,
                                                              src.position)
    dead = (src.dead_letters, out.dead_letters) | "DeadLetters" >> beam.Flatten()
    _ = out.predictions | "WritePredictions" >> WriteParquet(
        fs.join(run.out, "predictions"), PREDICTIONS_SCHEMA)
    _ = out.metrics | "WriteMetrics" >> WriteParquet(fs.join(run.out, "metrics"), METRICS_SCHEMA)
    _ = dead | "WriteDeadLetters" >> WriteParquet(fs.join(run.out, "dead_letters"),
                                                  DEAD_LETTER_SCHEMA)
    if run.kafka_out is not None:
        topics = output_topics(run.kafka_out)
        for name, pcoll in (("predictions", out.predictions), ("metrics", out.metrics),
                            ("dead_letters", dead)):
            _ = pcoll | f"Kafka_{name}" >> WriteKafka(topics[name], run.kafka_client)


def resolve_early_state(run: ReplayRun) -> str:
    """The early-block state of ``run`` (see :data:`EARLY_STATES`): "auto" is ordered-list
    state on the FnApiRunner and on Beam's local job service (``portable`` without a
    ``--job_endpoint``), bag state on any other runner (Flink, Dataflow, ...)."""
    if run.early_state != "auto":
        return run.early_state
    local = run.runner == "direct" or (run.runner == "portable" and not any(
        a.startswith("--job_endpoint") for a in run.pipeline_args))
    return "ordered_list" if local else "bag"


def _workers(run: ReplayRun) -> int:
    from apache_beam.options.pipeline_options import DirectOptions

    return int(PipelineOptions(run.pipeline_args).view_as(DirectOptions).direct_num_workers
               or 1)


def _run_beam(run: ReplayRun) -> dict[str, int]:
    args = list(run.pipeline_args)
    with contextlib.ExitStack() as stack:
        if run.runner == "portable":
            if not any(a.startswith("--job_endpoint") for a in args):
                # no job server given: start Beam's local one (the portable path Flink uses);
                # its SDK workers run in this process (LOOPBACK) unless an environment is
                # named (e.g. EXTERNAL: a worker pool, as in deploy/flink)
                endpoint = stack.enter_context(local_job_service())
                args += [f"--job_endpoint={endpoint}"]
                if not any(a.startswith("--environment_type") for a in args):
                    args += ["--environment_type=LOOPBACK"]
            p = beam.Pipeline(options=PipelineOptions(["--runner=PortableRunner", *args]))
        elif run.runner == "beam":
            # the runner named in the pass-through options (FlinkRunner, DataflowRunner, ...)
            if not any(a.startswith("--runner") for a in args):
                raise ValueError("runner 'beam' needs a Beam --runner=... pipeline option")
            p = beam.Pipeline(options=PipelineOptions(args))
        else:
            p = beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(args))
        build_pipeline(p, run)
        result = p.run()
        result.wait_until_finish()
        return _counters(result)


def _counters(result: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        res = result.metrics().query()
    except Exception:  # a runner without metrics support: counters are a diagnostic only
        return out
    for c in res.get("counters", []):
        if c.key.metric.namespace == "kernelstream":
            name = c.key.metric.name
            out[name] = out.get(name, 0) + int(c.committed or c.attempted or 0)
    return out


@contextlib.contextmanager
def local_job_service(timeout: float = 60.0) -> Iterator[str]:
    """Start Beam's local job service (the portable runner's job server) on a free port;
    yield its endpoint; stop it (this process only) on exit."""
    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                "--port", str(port)]

    with serve(argv, "the Beam job service", "localhost", timeout) as port:
        yield f"localhost:{port}"


# -- the plain loop ------------------------------------------------------------------------------


def run_loop_outputs(data: str, configs: Sequence[LearnerConfig | tuple[Any, ...]],
                     out: str | os.PathLike[str], **kw: Any) -> ReplayResult:
    """:func:`run_replay` with the plain loop: the same files from a Python loop."""
    return execute(replace(make_run(data, configs, out, **kw), runner="loop"))


def _loop_source(run: ReplayRun, dead: list[dict[str, Any]],
                 position: list[SourcePosition]) -> Iterator[Block]:
    """The run's blocks in stream order; its source's dead letters are appended to ``dead``,
    and a Kafka read's end position to ``position``."""
    if run.kafka is None:
        ds = load_rows(run.read)
        dead += ds.dead_letters
        yield from stream_blocks(ds, run.spec)
        return
    kb = KafkaBlocks(run.kafka.topic, run.read, run.spec.configs, run.block_size,
                     run.resume_position)
    for item in kb.read_topic(run.kafka):
        if isinstance(item, Block):
            yield item
        else:
            dead.append(item)
    position.append(kb.position())


def _run_loop(run: ReplayRun) -> dict[str, int]:
    core = StreamLearner({c.name: c for c in run.configs}, run.seed, run.metrics_window,
                         run.read.path)
    coder = StreamStateCoder()
    saved = ({} if run.resume_from is None
             else dict(ckpts.read_states(run.resume_from)))
    states: dict[str, StreamState] = {}
    position: list[SourcePosition] = []
    for name in OUTPUTS:
        fs.makedirs(fs.join(run.out, name))
    counters = {"examples": 0, "mistakes": 0, "dead_letters": 0, "blocks": 0}
    metrics: list[dict[str, Any]] = []
    dead: list[dict[str, Any]] = []
    writers = ({} if run.kafka_out is None else
               {k: KafkaWriter(t, run.kafka_client)
                for k, t in output_topics(run.kafka_out).items()})
    with fs.open_write(fs.join(run.out, "predictions", "part-loop.parquet")) as fh, \
            pq.ParquetWriter(fh, PREDICTIONS_SCHEMA) as w:
        progress = Progress()
        for b in _loop_source(run, dead, position):
            st = states.get(b.key)
            if st is None:  # a resumed stream starts from its saved state
                st = states[b.key] = (coder.decode(saved[b.key]) if b.key in saved
                                      else StreamState())
            res = core.learn(b.key, st, b)
            progress.learnt(b.key, st, b.n)
            p: PredictionBlock = res.predictions
            w.write_batch(predictions_batch(p))
            if writers:
                writers["predictions"].write(prediction_rows(p))
            metrics += res.metrics
            dead += res.dead_letters
            counters["blocks"] += 1
            counters["examples"] += p.n - len(res.dead_letters)
            counters["mistakes"] += int((p.mistake == 1).sum())
    counters["dead_letters"] = len(dead)  # the source's and the learners'
    metrics += [core.final_row(k, st) for k, st in states.items()]
    if run.writes is not None:
        saved.update((k, coder.encode(st)) for k, st in states.items())
        rows = [{"key": k, "state": v} for k, v in saved.items()]
        if rows:
            with fs.open_write(fs.join(run.writes.directory,
                                       f"{run.writes.states_prefix}-loop.parquet")) as fh:
                pq.write_table(pa.Table.from_batches([rows_batch(rows, ckpts.STATES_SCHEMA)]),
                               fh)
        fs.write_bytes_atomic(run.writes.source_path,
                              json.dumps(position[0].to_json()).encode())
    if writers:
        writers["metrics"].write(metrics)
        writers["dead_letters"].write(dead)
        for wr in writers.values():
            wr.close()
    for name, rows, schema in (("metrics", metrics, METRICS_SCHEMA),
                               ("dead_letters", dead, DEAD_LETTER_SCHEMA)):
        if rows:
            with fs.open_write(fs.join(run.out, name, "part-loop.parquet")) as fh:
                pq.write_table(pa.Table.from_batches([rows_batch(rows, schema)]), fh)
    return counters


# -- CLI adapter ---------------------------------------------------------------------------------


def replay_for_config(config: Any, runner: str | None = None,
                      pipeline_args: Sequence[str] = (), **kw: Any) -> ReplayResult:
    """Run a CLI ``ReplayConfig`` (``kernelstream.pipelines.config``) on ``runner`` (default:
    the config's) and return the :class:`ReplayResult`."""
    configs = [LearnerConfig(c.label, c.name, c.params, c.seed_name) for c in config.learners]
    return run_replay(
        config.data, configs, config.out, seed=config.seed, permutations=config.permutations,
        limit=config.limit, scale=config.scale, fmt=config.fmt, task=config.task,
        n_features=config.n_features, label_column=config.label_column,
        positive_label=config.positive_label, delimiter=config.delimiter,
        header=config.header, scale_target=config.scale_target, key_by=config.key_by,
        runner=runner or config.runner,
        pipeline_args=list(config.pipeline_args) + list(pipeline_args),
        kafka_idle=config.kafka_idle, kafka_max_seconds=config.kafka_max_seconds,
        kafka_out=config.kafka_out, kafka_client=config.kafka_options,
        checkpoint=config.checkpoint, **kw,
    )


def run_replay_config(config: Any, runner: str | None = None,
                      pipeline_args: Sequence[str] = (), **kw: Any) -> list[EvalResult]:
    """:func:`replay_for_config`, as the per-configuration ``EvalResult`` s (the loop's
    ``summary.json`` schema)."""
    res = replay_for_config(config, runner, pipeline_args, **kw)
    configs = [LearnerConfig(c.label, c.name, c.params, c.seed_name) for c in config.learners]
    return res.eval_results(configs, config.seed)
