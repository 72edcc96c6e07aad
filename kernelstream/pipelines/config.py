"""What a ``kernelstream replay`` run is, independent of the runner that carries it out.

The CLI parses its arguments into a :class:`ReplayConfig`; every runner (the plain ``loop`` now,
the Beam ``direct``/``portable`` runners later) takes the same object, so the configurations,
their resolved hyper-parameters and their seeds are decided once, here.

Learner configurations (grid mode)
----------------------------------
``--learner`` may be repeated; each occurrence is one configuration, written ``NAME`` or
``LABEL=NAME`` (the label defaults to the name and must be unique, so the same learner can
appear twice with different parameters). ``-p`` values are scoped by label:

* ``-p LABEL.key=value`` sets ``key`` for that configuration only;
* ``-p key=value`` sets ``key`` for the only configuration, or — with several — for every
  configuration whose learner has that parameter (an error if none has it, so typos are
  caught). Scoped values win over unscoped ones.

Every configuration's parameters are resolved (defaults filled in, types checked) before any
data is read, so a bad value fails fast.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kernelstream import data, fs, kafka_client, learners
from kernelstream._suggest import did_you_mean
from kernelstream.data import widths
from kernelstream.data.options import ReadOptions
from kernelstream.engine.learner_config import LearnerConfig, as_configs
from kernelstream.learners.kernels import parse_sigmas

if TYPE_CHECKING:
    from kernelstream.learners import Learner

PROG = "kernelstream"  # the command's name in usage lines and messages
# The learner of a run that names none, per task: chosen by measurement over every shared data
# set (benchmarks/defaults.py, benchmarks/results/defaults.md), with the learner's own defaults
# (so `replay DATA` and `replay DATA -l NAME` are the same run) and the data-driven width
# (gamma=auto, kernelstream.data.widths).
DEFAULT_LEARNERS: dict[str, tuple[str, dict[str, str]]] = {
    "classification": ("bpa-s", {}),
    "regression": ("raker", {"loss": "square"}),
}
DEFAULT_LEARNER, DEFAULT_PARAMS = DEFAULT_LEARNERS["classification"]
# A replay's classification default by the rows its learners get (``ReadOptions.sparse_rows``,
# judged from the file's first rows: ``data.widths.file_rows``), also measured there: FOGD
# with 1000 frequencies led on dense rows (a9a 16.5 % vs 19.5, covtype, SUSY, spambase; with
# its default 400 it missed w7a's no-skill target), BPA-S on sparse text. Without a file to
# look at (a Kafka topic, the stream), DEFAULT_LEARNERS's entry.
DEFAULT_BY_ROWS: dict[str, tuple[str, dict[str, str]]] = {
    "dense": ("fogd", {"n_components": "1000"}),
    "sparse": ("bpa-s", {}),
}
DEFAULT_DATASET = "german"

SCALES = ("none", "01", "pm1")
TARGET_SCALES = ("none", "01")
TASKS = ("classification", "regression")


@dataclass(frozen=True)
class RunnerInfo:
    """A runner and the commands that accept it (``--runner NAME``)."""

    name: str
    commands: frozenset[str]
    beam: bool  # the run imports Apache Beam
    doc: str


# The one table of runners: named here so that the CLI can offer them without importing the
# replay machinery (``kernelstream.pipelines.replay.replay``) or Beam.
RUNNERS: dict[str, RunnerInfo] = {r.name: r for r in (
    RunnerInfo("direct", frozenset({"replay", "tune", "reproduce", "stream"}), True,
               "Beam's FnApiRunner in this process (named explicitly: no Prism download)"),
    RunnerInfo("portable", frozenset({"replay", "reproduce", "stream"}), True,
               "Beam's local job service (started and stopped here) or the --job_endpoint "
               "given after '--' (e.g. a Flink job server)"),
    RunnerInfo("beam", frozenset({"replay", "reproduce"}), True,
               "the Beam runner named by --runner=... after '--' (FlinkRunner, DataflowRunner)"),
    RunnerInfo("loop", frozenset({"replay", "tune", "reproduce"}), False,
               "the engine in a plain Python loop (no Beam import)"),
    RunnerInfo("dask", frozenset({"replay"}), True,
               "Beam's DaskRunner on a dask.distributed cluster: a local one (--workers) or "
               "the --dask-scheduler given; a file's permuted streams only"),
)}


def runners_for(command: str) -> tuple[str, ...]:
    """The runners ``command`` accepts, in the table's order."""
    return tuple(name for name, r in RUNNERS.items() if command in r.commands)


def check_runner(runner: str, command: str = "replay") -> str:
    """``runner`` if ``command`` accepts it, else ``ValueError`` naming the ones it does."""
    names = runners_for(command)
    if runner not in names:
        raise ValueError(f"runner must be one of {', '.join(names)}, got {runner!r}")
    return runner


_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_+\-]*$")


class ConfigError(ValueError):
    """An invalid replay configuration (reported to the user without a traceback)."""


def check_at_least(args: Any, **minimums: int) -> None:
    """Raise :class:`ConfigError` for the first of the options (by destination, in the order
    given) whose value is below its minimum, e.g. ``--tune-rows must be >= 1, got 0``; an
    option that was not given (None) passes."""
    for dest, low in minimums.items():
        value = getattr(args, dest)
        if value is not None and value < low:
            raise ConfigError(f"--{dest.replace('_', '-')} must be >= {low}, got {value}")


class DataError(ValueError):
    """The data of a run cannot be read (missing file, parse error, unusable contents). Runners
    raise it for anything that goes wrong while reading, so the CLI can tell data problems
    (exit 2) from failures during learning."""


class WorkerError(Exception):
    """A worker process of ``replay --workers`` (``pipelines.replay.workers``) failed: ``code`` is
    the exit code the run ends with, ``lines`` what to print on stderr (the worker's own error
    line where it wrote one)."""

    def __init__(self, code: int, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.code = code
        self.lines = lines


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
    chunk_bytes: int = 16 << 20  # the chunks of order="file"
    quiet: bool = False
    argv: tuple[str, ...] = field(default_factory=tuple)
    # no learner named: the rows (``dense``/``sparse``) the default was chosen by
    # (:data:`DEFAULT_BY_ROWS`), recorded in summary.json; None otherwise
    default_rows: str | None = None
    # ``--scale auto`` that scaled: why (``pipelines.replay.auto_scale``), recorded in
    # summary.json; the value itself is ``read.scale``
    auto_scale: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "learners", tuple(as_configs(self.learners).values()))
        object.__setattr__(self, "out", os.fspath(self.out))
        # lists from the Python API: tuples, so a config compares equal and stays as built
        object.__setattr__(self, "pipeline_args", tuple(self.pipeline_args))
        if not self.dataset:
            object.__setattr__(self, "dataset", display_name(self.data))
        if self.read.path != self.data:  # one name of the data: ``data``
            object.__setattr__(self, "read", replace(self.read, path=self.data))

    @classmethod
    def of(cls, data: str, learners: Sequence[LearnerConfig | tuple[Any, ...]],
           out: str | os.PathLike[str], **options: Any) -> ReplayConfig:
        """The Python API's form: ``options`` are the fields of this class, of its
        :class:`~kernelstream.data.options.ReadOptions` (``scale=``, ``limit=``, ...) or its
        :class:`KafkaOptions` by their keywords (``kafka_idle=``, ``checkpoint=``, ...)."""
        reads = {f.name for f in fields(ReadOptions)} - {"path"}
        read = ReadOptions(path=data, **{k: v for k, v in options.items() if k in reads})
        kafka = KafkaOptions(**{KafkaOptions.KEYWORDS[k]: v for k, v in options.items()
                                if k in KafkaOptions.KEYWORDS})
        rest = {k: v for k, v in options.items()
                if k not in reads and k not in KafkaOptions.KEYWORDS}
        return cls(data=data, learners=tuple(as_configs(learners).values()), out=os.fspath(out),
                   read=read, kafka=kafka, **rest)


def display_name(src: str) -> str:
    """The name a run shows for its data: an embedded data set's canonical name (aliases
    too), else the file's or the topic's name."""
    try:
        return str(data.embedded_dataset_info(src)["name"])
    except KeyError:
        return src.rsplit("/", 1)[-1] if is_topic(src) else Path(src).name


def is_topic(src: object) -> bool:
    """Whether ``src`` is a Kafka topic URL (``kafka_client.is_kafka_url``). The Kafka client
    package is imported only for a path with a URL scheme: a file path needs none of it."""
    if not (isinstance(src, str) and fs.is_remote(src)):
        return False
    return kafka_client.is_kafka_url(src)


def _learner(name: str) -> type[Learner]:
    """The registered learner class ``name`` (ValueError listing the available ones). The
    registry imports the learner modules on first use: commands that name no learner
    (``check``) never load them."""
    return learners.get(name)


def _make(name: str, **params: Any) -> Learner:
    return learners.make(name, **params)


def parse_learner_spec(spec: str) -> tuple[str, str]:
    """``NAME`` or ``LABEL=NAME`` → ``(label, name)``."""
    label, sep, name = spec.partition("=")
    if not sep:
        label = name = spec
    label, name = label.strip(), name.strip()
    if not name:
        raise ConfigError(f"--learner {spec!r}: missing learner name")
    _learner(name)  # unknown name: ValueError listing the available learners
    if not _LABEL_RE.match(label):
        raise ConfigError(
            f"--learner {spec!r}: label {label!r} must start with a letter or digit and "
            "contain only letters, digits, '_', '+', '-'"
        )
    return label, name


def parse_param_spec(spec: str) -> tuple[str | None, str, str]:
    """``[LABEL.]key=value`` → ``(label or None, key, value)``. The scope is split at the last
    dot of the key (parameter names have none; labels have none either)."""
    key, sep, value = spec.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"-p {spec!r}: expected key=value or LABEL.key=value")
    scope, dot, name = key.rpartition(".")
    if not dot:
        return None, key, value.strip()
    if not scope or not name:
        raise ConfigError(f"-p {spec!r}: expected key=value or LABEL.key=value")
    return scope, name, value.strip()


def accepts(name: str, key: str) -> bool:
    """Learner ``name`` has a parameter ``key`` (``sigma``: one with ``gamma``)."""
    names = {p.name for p in _learner(name).params}
    return key in names or (key == "sigma" and "gamma" in names)


def learner_configs(
    learner_specs: Sequence[str], param_specs: Sequence[str], *, task: str | None = None,
    auto_width: Callable[[], float] | None = None,
    default: tuple[str, dict[str, str]] | None = None,
) -> tuple[LearnerConfig, ...]:
    """Resolve ``--learner`` and ``-p`` arguments (see the module docstring). With no
    ``--learner``, ``default`` (learner, parameters) when given, else the
    :data:`DEFAULT_LEARNERS` entry of ``task`` (classification when None). ``auto_width``
    (the run's data → ``gamma``, called at most once) resolves ``gamma=auto``, which is the
    default of every Gaussian width not given (:func:`resolve_widths`); without it, an unset
    width keeps the learner's own default."""
    given = list(learner_specs)
    defaults: dict[str, str] = {}
    if not given:
        name, params = default or DEFAULT_LEARNERS.get(task or "classification",
                                                       DEFAULT_LEARNERS["classification"])
        given, defaults = [name], dict(params)
    pairs = [parse_learner_spec(s) for s in given]
    labels = [lab for lab, _ in pairs]
    dups = sorted({lab for lab in labels if labels.count(lab) > 1})
    if dups:
        raise ConfigError(
            f"learner label(s) {', '.join(dups)} given twice; name repeated learners "
            "with --learner LABEL=NAME"
        )
    unscoped: dict[str, str] = {}
    scoped: dict[str, dict[str, str]] = {lab: {} for lab in labels}
    for spec in param_specs:
        scope, key, value = parse_param_spec(spec)
        if scope is None:
            unscoped[key] = value
        elif scope in scoped:
            scoped[scope][key] = value
        else:
            raise ConfigError(
                f"-p {spec!r}: no learner configuration labelled {scope!r} "
                f"(configurations: {', '.join(labels)}){did_you_mean(scope, labels)}"
            )
    if len(pairs) > 1:
        for key in unscoped:
            if not any(accepts(name, key) for _, name in pairs):
                raise ConfigError(
                    f"-p {key}=...: no configured learner has a parameter {key!r} "
                    f"(learners: {', '.join(name for _, name in pairs)})"
                    + did_you_mean(key, [p.name for _, name in pairs
                                         for p in _learner(name).params])
                )
    out = []
    for label, name in pairs:
        raw = dict(defaults)
        if len(pairs) == 1:
            raw.update(unscoped)
        else:
            raw.update({k: v for k, v in unscoped.items() if accepts(name, k)})
        raw.update(scoped[label])
        if "sigma" in raw and "gamma" in raw:
            # an unscoped sigma and a scoped gamma (or the reverse): the scoped one wins
            drop = "gamma" if "sigma" in scoped[label] else "sigma"
            raw.pop(drop)
        width = resolve_widths(name, raw, auto_width)
        if width is not None:
            auto_width = width  # estimated once for every configuration
        out.append(LearnerConfig(label, name, raw))
    return tuple(out)


def resolve_widths(name: str, raw: dict[str, Any],
                   auto_width: Callable[[], float] | None) -> Callable[[], float] | None:
    """Replace, in place, the ``auto`` widths of learner ``name``'s raw parameters by numbers:
    ``gamma`` (unset, with a Gaussian kernel, or ``auto``) by ``auto_width()``, and ``sigmas``
    (unset or ``auto``) by the learner's default grid centred on that width
    (``data.widths.centred_sigmas``). Returns ``auto_width`` memoised once called, so that a
    grid of configurations reads the data once; ``None`` when it was not given (then an unset
    width keeps the learner's default and an explicit ``auto`` is a ``ConfigError``)."""
    params = {p.name: p for p in _learner(name).params}
    wants: list[str] = []
    kernel = raw.get("kernel", params["kernel"].default if "kernel" in params else "gaussian")
    if "gamma" in params and "sigma" not in raw and (
            widths.is_auto(raw.get("gamma")) or ("gamma" not in raw and kernel == "gaussian")):
        wants.append("gamma")
    if "sigmas" in params and ("sigmas" not in raw or widths.is_auto(raw["sigmas"])):
        wants.append("sigmas")
    if not wants:
        return None
    if auto_width is None:
        explicit = [k for k in wants if widths.is_auto(raw.get(k))]
        if explicit:
            raise ConfigError(f"{name}: {explicit[0]}=auto is estimated from the data's first "
                              "rows, which this command does not read: give a number")
        return None
    value = auto_width()
    if "gamma" in wants:
        factor = widths.auto_factor(raw.get("gamma")) or 1.0
        raw["gamma"] = repr(value if factor == 1.0 else widths.rounded(value * factor))
    if "sigmas" in wants:
        grid = parse_sigmas(str(params["sigmas"].default)).tolist()
        raw["sigmas"] = widths.centred_sigmas(value, grid)
    return lambda: value


def loss_tasks(name: str) -> dict[str, str]:
    """``{loss: task}`` for a learner whose ``loss`` parameter decides its task (e.g. ``ioks``:
    logistic → classification, square/absolute → regression); empty for the others."""
    cls = _learner(name)
    loss = next((p for p in cls.params if p.name == "loss" and p.choices), None)
    out: dict[str, str] = {}
    for choice in loss.choices if loss is not None and loss.choices else ():
        try:
            out[choice] = _make(name, loss=choice).task
        except ValueError:  # a loss the default settings reject
            continue
    return out


def resolve_task(configs: Sequence[LearnerConfig], task: str | None) -> str:
    """The task of the run: the one given, else the learners' own; they must all agree."""
    tasks = {c.task for c in configs}
    if task is None:
        if len(tasks) > 1:
            raise ConfigError(
                "the configured learners mix classification and regression: "
                + ", ".join(f"{c.label} ({c.task})" for c in configs)
            )
        return tasks.pop()
    if task not in TASKS:
        raise ConfigError(f"--task must be one of {', '.join(TASKS)}, got {task!r}")
    wrong = [c for c in configs if c.task != task]
    if wrong:
        parts = []
        for c in wrong:
            fits = [loss for loss, t in loss_tasks(c.learner).items() if t == task]
            hint = (f" (its task follows its loss: -p {c.label}.loss={' or '.join(fits)} "
                    f"makes it a {task} learner)" if fits else "")
            parts.append(f"{c.label} is a {c.task} learner{hint}")
        raise ConfigError(f"--task {task}, but " + ", ".join(parts))
    return task


def default_out(dataset: str, configs: Sequence[LearnerConfig]) -> Path:
    """``runs/<dataset>-<label>[+<label>...]`` (relative to the working directory)."""
    return Path("runs") / f"{dataset}-{'+'.join(c.label for c in configs)}"
