"""A replay run, :class:`ReplayConfig`, and its one translation from ``kernelstream replay``'s
arguments (:meth:`ReplayConfig.from_args`, also ``tune``'s and ``summary``'s): the decisions
made on the data file before the run (label map, width, sample, default learner) and the Kafka
options. The checks of the run before any pipeline (workers, data head, memory) are
:mod:`~kernelstream.pipelines.replay.replay_checks`. Each failure is a ``ConfigError``: rc 2,
one line."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from kernelstream import data, fs, kafka_client, learners
from kernelstream._suggest import did_you_mean
from kernelstream.data import label_mix, widths
from kernelstream.data.options import ReadOptions
from kernelstream.engine.learner_config import LearnerConfig, as_configs
from kernelstream.errors import ConfigError
from kernelstream.experiments import tuning
from kernelstream.pipelines.config import (
    DEFAULT_BY_ROWS,
    DEFAULT_DATASET,
    PROG,
    accepts,
    check_at_least,
    check_limit,
    default_learner,
    default_out,
    display_name,
    is_topic,
    learner_configs,
    parse_param_spec,
    resolve_task,
)
from kernelstream.pipelines.replay import auto_scale, sample_rows
from kernelstream.pipelines.replay.auto_scale import file_options, head_options
from kernelstream.pipelines.replay.plan import check_replay_options
from kernelstream.pipelines.replay.replay_checks import (
    DASK_WORKERS,
    check_dask,
    check_source,
    check_submit_only,
    check_workers,
    data_path,
    read_error,
)
from kernelstream.pipelines.replay.topic_head import TopicHead, api_topic_head, topic_head


def hash_bits(s: str) -> int:
    """argparse type of ``--hash-features``: K, 2^K or the power of two itself."""
    try:
        return data.hashing.parse_bits(s)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def workers_arg(s: str) -> int:
    """argparse type of ``--workers``: a count >= 1, or ``auto`` (the cores this process may
    run on)."""
    if s == "auto":
        return usable_cores()
    try:
        n = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of processes or 'auto', got {s!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (or 'auto'), got {n}")
    return n


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def shard_arg(s: str) -> tuple[int, int]:
    """argparse type of the hidden ``--shard I/N`` (0-based index I of N) that ``--workers``
    gives its worker processes."""
    i, sep, n = s.partition("/")
    try:
        shard = (int(i), int(n))
    except ValueError:
        shard = (-1, 0)
    if not sep or not 0 <= shard[0] < shard[1]:
        raise argparse.ArgumentTypeError(f"expected I/N with 0 <= I < N, got {s!r}")
    return shard


@dataclass(frozen=True)
class KafkaOptions:
    """A replay's Kafka side (``kernelstream.kafka_client``): how it reads a topic given as
    ``kafka://HOST:PORT/TOPIC`` (the read stops after ``idle`` seconds without a new record,
    and at the latest after ``max_seconds``), the client settings (``--kafka-option``),
    ``out`` = ``kafka://HOST:PORT/PREFIX`` to write the outputs also to PREFIX-* topics, and
    the ``checkpoint`` directory a topic's replay resumes from and writes to."""

    idle: float = 5.0
    max_seconds: float | None = None
    out: str | None = None
    client: tuple[tuple[str, str], ...] = ()  # kafka-python client settings
    checkpoint: str | None = None

    # the Python API's keyword for each field (``run_replay(..., kafka_idle=2.0)``)
    KEYWORDS: ClassVar[dict[str, str]] = {"kafka_idle": "idle", "kafka_max_seconds": "max_seconds",
                "kafka_out": "out", "kafka_options": "client", "checkpoint": "checkpoint"}

    def __post_init__(self) -> None:
        # lists from the Python API: tuples, so a config compares equal and stays as built
        object.__setattr__(self, "client", tuple(map(tuple, self.client)))


@dataclass(frozen=True)
class ReplayConfig:
    """One replay run, as the CLI's commands (``replay``, ``tune``, ``reproduce``) and the
    Python API (``pipelines.replay.replay.run_replay``, ``experiments.grid``) describe it:
    the data and how to read it (``read``), the learner configurations, the outputs (``out``
    and the Kafka ones), the runner and the engine's settings. ``pipelines.replay.replay.plan``
    turns it into the runners' plan.

    ``learners`` may be given as ``LearnerConfig`` s or ``(label, learner, params)`` tuples;
    ``dataset`` (the display name) defaults to the data's (:func:`display_name`)."""

    data: str  # embedded data set name, path, or topic kafka://HOST:PORT/TOPIC
    learners: tuple[LearnerConfig, ...]
    out: str  # output directory: a local path or a URL (gs://...)
    dataset: str = ""  # display name (embedded name, else the file or topic name)
    # how the data is read (format, columns, scaling, limit, task, key_by, hashing, rows);
    # its path is ``data``
    read: ReadOptions = field(default_factory=lambda: ReadOptions(path=""))
    seed: int = 0
    permutations: int = 1
    runner: str = "direct"
    stream: str = "none"  # adversarial stream preset (kernelstream.engine.orders) or "none"
    pipeline_args: tuple[str, ...] = ()  # Beam pipeline options after "--", passed through
    kafka: KafkaOptions = field(default_factory=KafkaOptions)  # topic reads, outputs, checkpoints
    # ``--workers N``: the streams split over N runner processes (``pipelines.replay.workers``; with
    # ``--runner dask``, the local Dask cluster's worker processes); ``shard`` = (index, N) in
    # one of those processes (the hidden ``--shard I/N``)
    workers: int = 1
    shard: tuple[int, int] | None = None
    # ``--runner dask``: the scheduler of an existing cluster (tcp://HOST:PORT); None: a local
    # cluster of ``workers`` processes (``pipelines.replay.dask_replay``)
    dask_scheduler: str | None = None
    # ``kernelstream tune``: the held-out tuning permutations first_permutation.. (a replay
    # evaluates 0..R-1), each cut to its first ``stream_rows`` positions when given
    first_permutation: int = 0
    stream_rows: int | None = None
    # the engine's settings (pipeline options after "--" override the first three)
    block_size: int = 1024  # rows a block: amortises Beam's per-element cost (~1 ms a block)
    metrics_window: int = 1000  # positions per metrics window
    reshuffle: bool | None = None  # None: when there are several streams and workers
    scramble: int | None = None  # seed: deliver blocks in a random order (tests)
    order: str = "permuted"  # "file": one stream in file order, read in parallel chunks
    # ``--sample N``: (the file the rows are drawn from, N); ``data`` is then the drawn file
    sample: tuple[str, int] | None = None
    # the CLI's ``--sample``: the rows drawn before the run's decisions, staged here until the
    # run's start moves them to ``data`` (``pipelines.replay.sample_rows``)
    staged_sample: str | None = None
    chunk_bytes: int = 16 << 20  # the chunks of order="file"
    quiet: bool = False
    argv: tuple[str, ...] = field(default_factory=tuple)
    # no learner named: the rows (``dense``/``sparse``) the default was chosen by
    # (:data:`DEFAULT_BY_ROWS`), recorded in summary.json; None otherwise
    default_rows: str | None = None
    # ``--scale auto`` that scaled: why (``pipelines.replay.auto_scale``), recorded in
    # summary.json; the value itself is ``read.scale``
    auto_scale: str | None = None
    # a Kafka topic's ``gamma=auto`` (:func:`topic_head`): where its widths came from
    # (``width_source``: ``auto``, ``default``, ``checkpoint``), the estimate
    # (``auto_gamma``) and the rows it came from (``width_records``), recorded in
    # summary.json as a stream records them; None: a file's (its number is in the params)
    widths: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "learners", tuple(as_configs(self.learners).values()))
        object.__setattr__(self, "out", os.fspath(self.out))
        # lists from the Python API: tuples, so a config compares equal and stays as built
        object.__setattr__(self, "pipeline_args", tuple(self.pipeline_args))
        if not self.dataset:
            object.__setattr__(self, "dataset", display_name(self.data))
        if self.read.path != self.data:  # one name of the data: ``data``
            object.__setattr__(self, "read", replace(self.read, path=self.data))
        # the widths left to the data (gamma unset or auto, ...: LearnerConfig.auto_widths),
        # from the file's first rows as the CLI's (a sample's: the drawn rows, ``data``; an
        # adversarial stream's: the file its rows are drawn from; a topic's: its first
        # examples, below). The CLI's configurations come resolved: nothing to read
        if any(c.auto_widths for c in self.learners) and is_topic(self.data):
            # a topic's first examples, as the CLI's and ``of``'s (the read and the target
            # as given: a ReplayConfig built directly states them)
            _, configs, _, record = api_topic_head(
                self.read, kafka_client.KafkaReadOptions(
                    kafka_client.KafkaTopic.parse(self.data), idle_seconds=self.kafka.idle,
                    max_seconds=self.kafka.max_seconds, client=self.kafka.client),
                self.learners, False, self.kafka.checkpoint, target=None)
            object.__setattr__(self, "learners", configs)
            if self.widths is None:
                object.__setattr__(self, "widths", record)
        if any(c.auto_widths for c in self.learners):
            head = head_options(self.read)
            auto_width = None if head is None else width_estimate(head)
            object.__setattr__(self, "learners",
                               tuple(c.with_widths(auto_width) for c in self.learners))

    @classmethod
    def of(cls, data: str, learners: Sequence[LearnerConfig | tuple[Any, ...]],
           out: str | os.PathLike[str], **options: Any) -> ReplayConfig:
        """The Python API's form: ``options`` are the fields of this class, of its
        :class:`~kernelstream.data.options.ReadOptions` (``scale=``, ``limit=``, ...) or its
        :class:`KafkaOptions` by their keywords (``kafka_idle=``, ``checkpoint=``, ...).

        The read is decided as ``kernelstream replay`` decides it: ``task`` not given is the
        learners' own (when they agree), and ``scale`` and ``scale_target`` default to
        ``"auto"``, resolved on the file's first rows by the CLI's rule
        (:func:`~kernelstream.pipelines.replay.auto_scale.resolve_options`; why it scaled is
        :attr:`auto_scale`, a standardised target each configuration's ``target``; an
        adversarial ``stream``'s on the file its rows are drawn from). A Kafka topic's
        ``scale="auto"`` and widths left to the data are decided on the first examples the
        run will read, as the CLI decides them (:func:`~kernelstream.pipelines.replay.
        topic_head.api_topic_head`; a resumed ``checkpoint``: what it recorded)."""
        configs = tuple(as_configs(learners).values())
        topic_scale = is_topic(data) and options.get("scale", auto_scale.AUTO) == auto_scale.AUTO
        topic_target = (is_topic(data)
                        and options.get("scale_target", auto_scale.AUTO) == auto_scale.AUTO)
        task = options.get("task")
        if task is None and len({c.task for c in configs}) == 1:  # the CLI's resolve_task
            task = configs[0].task
        elif task is not None and configs:  # a learner of the other task: refused, as the CLI
            resolve_task(configs, task, option="task=")
        # the features by the task given (none: tried as either), the target by the run's
        options, why, target, _ = auto_scale.resolve_options(data, options, task)
        if task is not None:
            options["task"] = task
        if target is not None:  # learnt standardised, every output in the target's units
            configs = tuple(replace(c, target=target) for c in configs)
        if why is not None:
            options.setdefault("auto_scale", why)
        reads = {f.name for f in fields(ReadOptions)} - {"path"}
        read = ReadOptions(path=data, **{k: v for k, v in options.items() if k in reads})
        # the label map decided before the run, as the CLI does (a one-class prefix maps as the
        # whole file; labels it cannot map: ConfigError)
        sample = options.get("sample")
        read = replace(read, positive_label=decided_positive_label(
            read, drawn_from=None if sample is None else sample[0]))
        kafka = KafkaOptions(**{KafkaOptions.KEYWORDS[k]: v for k, v in options.items()
                                if k in KafkaOptions.KEYWORDS})
        rest = {k: v for k, v in options.items()
                if k not in reads and k not in KafkaOptions.KEYWORDS}
        if is_topic(data):  # its head, read once now (a file's: its first rows, above)
            read, configs, why, rest["widths"] = api_topic_head(
                read, kafka_client.KafkaReadOptions(
                    kafka_client.KafkaTopic.parse(data), idle_seconds=kafka.idle,
                    max_seconds=kafka.max_seconds, client=kafka.client),
                configs, topic_scale, kafka.checkpoint,
                target=topic_target and read.task == "regression")
            if why is not None:
                rest["auto_scale"] = why
        return cls(data=data, learners=configs, out=os.fspath(out), read=read, kafka=kafka,
                   **rest)

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: Sequence[str]) -> ReplayConfig:
        """The run of ``kernelstream replay`` (and of ``tune``'s and ``summary``'s replay
        command lines) from its parsed arguments and ``argv`` (kept for ``--workers`` and
        ``summary.json``); validated: ``ConfigError`` (or ``ValueError``) on bad input."""
        # read options the task ignores are refused before any line is printed (ReadOptions');
        # only the task's fields: --scale auto is decided below (sparse rows: none)
        ReadOptions(path="", task=args.task or "classification",
                    positive_label=args.positive_label)
        check_limit(args)  # before the first read (the width, the rows, the label map)
        check_source(DEFAULT_DATASET if args.data is None else args.data, args.runner)
        learner_specs, param_specs = list(args.learner or []), list(args.param or [])
        params_from = getattr(args, "params_from", None)
        tuned = None
        if params_from is not None:  # kernelstream tune's choice, under the explicit -p values
            params_from = tuning.tuned_path(params_from)  # a tuning run's folder: its file
            tuned = tuning.read_tuned(params_from)
            learner_specs, param_specs = tuning.apply_tuned(tuned, params_from, learner_specs,
                                                            param_specs)
            # the rows it was tuned on: its scaling unless one is given; what differs, said
            notes = tuning.tuned_read_options(tuned, params_from, args,
                                              args.data or DEFAULT_DATASET)
            unbeaten = tuning.unbeaten_note(tuned, params_from)
            for line in [*notes, *([unbeaten] if unbeaten else [])]:
                if getattr(args, "shard", None) is None:
                    print(f"{PROG}: {line}", file=sys.stderr)
        src = DEFAULT_DATASET if args.data is None else args.data
        scale = args.scale  # as given: a topic's auto is decided on its head (topic_head)
        # --sample N: the rows drawn first, once; every decision below reads them, not the
        # file's head (the run learns them)
        drawn = sample_rows.drawn_sample(args, src)
        rows_src = src if drawn is None else drawn.rows
        # before the widths: gamma=auto is estimated on the rows as the learners get them
        scaled, hint, rows = resolve_read(args, rows_src, default=not learner_specs)
        if getattr(args, "shard", None) is None:  # (a shard's parent has said it)
            if scaled is not None:
                print(f"{PROG}: scaling features to [0, 1] ({scaled}; --scale none keeps "
                      "them)", file=sys.stderr)
            elif hint is not None:
                print(f"{PROG}: hint: {hint}", file=sys.stderr)
        # no learner named: the task's default for the rows the file gives, or for an
        # adversarial stream (recorded)
        task = args.task or "classification"
        if rows is not None:
            check_default_params(task, rows, param_specs, args.stream,
                                 getattr(args, "key_by", None))
        default = None if rows is None else default_learner(task, rows, args.stream,
                                                            getattr(args, "key_by", None))
        kafka_src = is_topic(src)
        # a topic's width is read last (below), once every refusal has had its say: until
        # then its configurations hold a stand-in (the widths change no check)
        configs = learner_configs(learner_specs, param_specs, task=args.task,
                                  auto_width=((lambda: 1.0) if kafka_src
                                              else file_width(args, rows_src)),
                                  default=default)
        task = resolve_task(configs, args.task)
        # a topic's target is standardised by its head (topic_head), a file's here
        topic_target = kafka_src and task == "regression" and args.scale_target == auto_scale.AUTO
        target, standardised = auto_scale.resolve_target(args, rows_src, task)
        if target is not None:  # the learners learn it standardised, every output in its units
            configs = tuple(replace(c, target=target) for c in configs)
        if standardised is not None and getattr(args, "shard", None) is None:
            print(f"{PROG}: {standardised}", file=sys.stderr)
        dataset = display_name(src)
        positive = run_positive_label(args, rows_src, task,
                                      drawn_from=None if drawn is None else drawn.source)
        settings = kafka_options(args, kafka_src)
        check_at_least(args, permutations=1, seed=0)
        check_replay_options(getattr(args, "pipeline_args", ()))  # -- --block_size=0
        if args.runner is None:  # adversarial streams are generated in memory: the loop's job
            args.runner = "loop" if args.stream != "none" else "direct"
        if args.stream != "none" and args.runner != "loop":
            raise ConfigError(f"--stream {args.stream} is only supported by the loop runner")
        if args.runner == "beam" and not any(a.startswith("--runner") for a in args.pipeline_args):
            raise ConfigError("--runner beam takes the Beam runner from the pipeline options "
                              "after '--', e.g. -- --runner=FlinkRunner --flink_master=HOST:8081")
        if args.scale_target != "none" and task != "regression":
            raise ConfigError("--scale-target applies to regression targets only "
                              "(--task regression)")
        if args.rows == "sparse" and args.scale != "none":
            raise ConfigError(f"--scale {args.scale} turns the zeros of sparse rows into "
                              "non-zeros: drop --scale or use --rows dense")
        if args.hash_features is not None and args.stream != "none":
            raise ConfigError("--hash-features applies to data files and topics, not --stream")
        out = args.out if args.out else str(default_out(dataset, configs, params_from))
        read_path, read_fmt, sample = src, args.format, None
        if drawn is not None:  # the run reads the rows in OUT/.sample/ (_runs.started)
            read_path, read_fmt = fs.join(out, ".sample", drawn.name), drawn.fmt
            sample = (drawn.source, drawn.n)
        shard = getattr(args, "shard", None)
        if tuned is not None and shard is None:
            note = tuning.overlap_note(tuned, args.seed, args.permutations)
            if note is not None:
                print(f"{PROG}: note: {note}", file=sys.stderr)
        dask_scheduler = getattr(args, "dask_scheduler", None)
        if args.runner == "dask" or dask_scheduler is not None:
            check_dask(args, kafka_src, dask_scheduler)
        workers = 1 if shard is not None else args.workers
        if workers is None:  # not given: one process, or a local Dask cluster of two
            workers = DASK_WORKERS if args.runner == "dask" else 1
        if workers > 1 and args.runner != "dask":
            check_workers(args, kafka_src)
        if getattr(args, "submit_only", False):
            check_submit_only(args)
        head = TopicHead(tuple(param_specs))
        if kafka_src:
            head = topic_head(args, src, settings, learner_specs, param_specs, default, scale,
                              target=topic_target)
            configs = learner_configs(learner_specs, head.param_specs, task=args.task,
                                      auto_width=head.auto_width, default=default)
            if head.widths is not None and head.widths["width_source"] == "default":
                # too few examples: the learners' default widths, decided (the head is
                # read once, not again by __post_init__)
                configs = tuple(replace(c, auto_widths={}) for c in configs)
            if head.target is not None:
                configs = tuple(replace(c, target=head.target) for c in configs)
            if head.scale_ranges is not None:
                args.scale, scaled = "01", head.auto_scale
        return cls(
            data=read_path,
            dataset=dataset,
            learners=configs,
            out=out,
            seed=args.seed,
            permutations=args.permutations,
            sample=sample,
            staged_sample=drawn.rows if drawn is not None and drawn.staged else None,
            read=ReadOptions.from_args(args, read_path, fmt=read_fmt, task=task,
                                       positive_label=positive,
                                       scale_ranges=head.scale_ranges),
            runner=args.runner,
            stream=args.stream,
            pipeline_args=tuple(getattr(args, "pipeline_args", ())),
            kafka=KafkaOptions(idle=args.kafka_idle, max_seconds=args.kafka_max_seconds,
                               out=args.kafka_out, client=settings, checkpoint=args.checkpoint),
            workers=workers,
            shard=shard,
            dask_scheduler=dask_scheduler,
            quiet=args.quiet,
            argv=tuple(argv),
            default_rows=rows,
            auto_scale=scaled,
            widths=head.widths,
        )


def run_positive_label(args: argparse.Namespace, src: str, task: str,
                       drawn_from: str | None = None) -> str | None:
    """``--positive-label`` as the run reads the file (or embedded set) ``src`` with
    (``data.label_mix.run_positive_label``): the file's +1 class when the rows read
    (``--limit``; ``--sample``'s, ``src`` drawn from ``drawn_from``) hold one class of the
    file's two, so they map as the whole file does; decided here, before any pipeline, so
    that every worker maps alike. A label not in the file, or a file of one class the map
    cannot place, is a ``ConfigError``."""
    # the labels only: unscaled (a topic's --scale auto is not decided yet)
    read = ReadOptions.from_args(args, src, task=task, scale="none", scale_target="none")
    return decided_positive_label(read, drawn_from=drawn_from)


def decided_positive_label(read: ReadOptions, drawn_from: str | None = None) -> str | None:
    """:func:`run_positive_label` of the read options of a file or embedded set (``read.path``;
    ``drawn_from``: the file its rows are drawn from, ``--sample``'s): the CLI's and the
    Python API's."""
    given = read.positive_label
    if read.task != "classification" or is_topic(read.path):
        return given
    path = data_path(read.path)
    # a remote file is left to the run, as file_options leaves it (a launcher may not reach it)
    if fs.is_remote(path) or not fs.exists(path):
        return given  # (a missing file: the run reports it)
    read = replace(read, path=path)
    if drawn_from is not None:  # the drawn rows' own map, the file's when they hold one class
        source = data_path(drawn_from)
        return sample_rows.sampled_positive_label(read, source)
    return label_mix.run_positive_label(read)


def file_width(args: argparse.Namespace, src: str) -> Callable[[], float] | None:
    """``gamma=auto`` of a replay of the file (or embedded set) ``src``: a function reading
    its first rows when a configuration asks (``data.widths.file_gamma``); ``None`` when
    :func:`file_options` has no file (a topic's learners keep their own default widths)."""
    opts = file_options(args, src)
    return None if opts is None else width_estimate(opts, say=_say)


def _say(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def width_estimate(opts: ReadOptions,
                   say: Callable[[str], None] | None = None) -> Callable[[], float]:
    """A function giving ``gamma=auto`` of the file of ``opts`` (:func:`head_options`), read
    on its first call only. A line about the estimate (a single row to measure) goes to
    ``say`` (the CLI prints it), else is a ``RuntimeWarning`` (the Python API's)."""
    @functools.cache
    def estimate() -> float:
        try:
            rows = widths.file_reservoir(opts)
            gamma = widths.auto_gamma(rows)  # widths.file_gamma
            if rows.shape[0] == 1:  # gamma is the fallback 1.0 (no pair): say so, once
                # (fewer or alike rows: the data check, which runs later, says more)
                line = (f"gamma=auto: a single row of {opts.path} to measure (no pair of "
                        "rows): gamma=1.0, the median heuristic's fallback; -p gamma=G sets "
                        "one")
                if say is None:
                    warnings.warn(line, RuntimeWarning, stacklevel=2)
                else:
                    say(line)
            return gamma
        except (ValueError, OSError) as exc:
            # a file that cannot be read is the read's error, the same line as check_data's
            # (not a gamma=auto problem: the estimate is only the first to read it)
            raise read_error(opts.path, exc) from None

    return estimate


def check_default_params(task: str, rows: str, param_specs: Sequence[str],
                         stream: str = "none", key_by: str | None = None) -> None:
    """A ``-p`` without ``--learner`` is for the default learner: one it does not have is a
    :class:`ConfigError` saying which learner the file's rows (or ``--stream``, or
    ``--key-by``) chose."""
    name = default_learner(task, rows, stream, key_by)[0]
    other = next(n for n, _ in DEFAULT_BY_ROWS[task].values() if n != name)
    on = (f"of --stream {stream}" if stream != "none" else "of a model per --key-by entity"
          if key_by is not None else f"on {rows} rows (this file's)")
    for spec in param_specs:
        scope, key, _ = parse_param_spec(spec)
        if scope is None and not accepts(name, key):
            # a misspelt parameter of the default learner first, then another learner's
            close = did_you_mean(key, [p.name for p in learners.get(name).params])
            if close:
                raise ConfigError(f"-p {spec}: the default learner {on}, {name}, has no "
                                  f"parameter {key!r}{close}")
            raise ConfigError(f"-p {spec}: the default learner {on} is {name}, which has no "
                              f"parameter {key!r}: name a learner with --learner, e.g. "
                              f"-l {other}")


def resolve_read(args: argparse.Namespace, src: str,
                 default: bool = True) -> tuple[str | None, str | None, str | None]:
    """The read decisions a replay makes on ``src`` before its learners, in this order
    (``replay`` and ``tune`` share it, so ``tune DATA`` tunes what ``replay DATA`` runs):
    ``--scale auto`` resolved in ``args`` (``auto_scale.resolve_features``: why it scaled, or
    a hint), then, when ``default`` (no learner named), the rows that choose the default
    learner (:func:`default_rows`, on the rows as scaled)."""
    scaled, hint = auto_scale.resolve_features(args, src)
    return scaled, hint, default_rows(args, src) if default else None


def default_rows(args: argparse.Namespace, src: str) -> str | None:
    """The rows (``dense``/``sparse``, ``data.widths.file_rows``) that choose a replay's
    default learner (:data:`~kernelstream.pipelines.config.DEFAULT_BY_ROWS`); ``None``
    without a file to look at (then the task's fixed default) or when it cannot be read (the
    run's own checks report why)."""
    opts = file_options(args, src)
    if opts is None:
        return None
    try:
        return widths.file_rows(opts)
    except (ValueError, OSError):
        return None


def kafka_options(args: argparse.Namespace, kafka_src: bool) -> tuple[tuple[str, str], ...]:
    """Check the Kafka options of a run (topic URLs, what a topic source allows) and return
    the client settings. kafka-python is imported only for runs that use Kafka."""
    if args.follow is not None and (args.checkpoint is None or args.follow <= 0):
        raise ConfigError("--follow SECONDS (> 0) repeats checkpointed runs: give --checkpoint")
    if args.follow_runs is not None and (args.follow is None or args.follow_runs < 1):
        raise ConfigError("--follow-runs N (>= 1) goes with --follow")
    if args.checkpoint is not None and not kafka_src:
        raise ConfigError("--checkpoint continues a Kafka topic (kafka:// DATA); a file replay "
                          "has nothing to continue")
    if not kafka_src and args.kafka_out is None:
        if args.kafka_option:
            raise ConfigError("--kafka-option needs a Kafka source or --kafka-out")
        return ()
    # kafka-python logs every failed connection attempt; the CLI reports the failure itself
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    if kafka_src:
        kafka_client.KafkaTopic.parse(args.data)
        if args.permutations != 1:
            raise ConfigError("a Kafka topic is one stream in its own order: --permutations "
                              "must be 1")
        if args.stream != "none":
            raise ConfigError("--stream builds adversarial streams from a data file, not a "
                              "Kafka topic")
        # the source's own checks, before the run: format, columns, no scaling
        read = ReadOptions.from_args(args, args.data)
        kafka_client.check_read_options(read)
        kafka_client.text_format_for(read)
    if args.kafka_out is not None:
        kafka_client.KafkaTopic.parse(args.kafka_out)
    if args.kafka_idle <= 0:
        raise ConfigError(f"--kafka-idle must be > 0, got {args.kafka_idle}")
    if args.kafka_max_seconds is not None and args.kafka_max_seconds <= 0:
        raise ConfigError(f"--kafka-max-seconds must be > 0, got {args.kafka_max_seconds}")
    return kafka_client.client_settings(args.kafka_option or [])
