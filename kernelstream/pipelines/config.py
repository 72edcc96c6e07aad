"""What the commands that build a run share, independent of the runner that carries it out:
the default learners, the runners' table, and the learner configurations resolved from
``--learner`` and ``-p`` (the run itself is each command's config: ``ReplayConfig`` in
``pipelines.replay.replay_args``, ``StreamConfig`` in ``pipelines.live.stream_config``), so
the configurations, their resolved hyper-parameters and their seeds are decided once, here.

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

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelstream import data, fs, kafka_client, learners
from kernelstream._suggest import did_you_mean
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.learner_widths import resolve_widths
from kernelstream.errors import ConfigError

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
# A replay's default by its task and by the rows its learners get (``ReadOptions.sparse_rows``,
# judged from the file's first rows: ``data.widths.file_rows``), also measured there: on dense
# rows RFF-RLS (online ridge regression on FOGD's random Fourier features) with 500 frequencies
# made fewer mistakes than FOGD with 1000, the previous default, on 13 of the 14 dense sets
# (with its own 200 it missed w7a's no-skill target), and a lower MSE on every regression set
# than RAKER, the previous regression default; BPA-S on sparse text. Without a file to look at
# (a Kafka topic, the stream), or on a sparse regression file, DEFAULT_LEARNERS's entry: a
# stream keeps a model per key, where RFF-RLS's matrix P (4 MB a model at D = 500) would
# weigh on memory and snapshots.
DEFAULT_BY_ROWS: dict[str, dict[str, tuple[str, dict[str, str]]]] = {
    "classification": {"dense": ("rff-rls", {"n_components": "500"}),
                       "sparse": ("bpa-s", {})},
    "regression": {"dense": ("rff-rls", {"loss": "square", "n_components": "500"}),
                   "sparse": DEFAULT_LEARNERS["regression"]},
}


def default_learner(task: str, rows: str, stream: str = "none",
                    key_by: str | None = None) -> tuple[str, dict[str, str]]:
    """The learner (name, fixed parameters) a replay that names none runs on a file of
    ``rows`` (:data:`DEFAULT_BY_ROWS`). An adversarial ``stream`` (``replay --stream``) runs
    DEFAULT_LEARNERS's entry whatever its rows: on german-1 built from five dense sets
    (spambase, german, magic04, svmguide3, phishing) RFF-RLS made 18-33 % mistakes against
    BPA-S's 6.5-7.6 % (no skill: 48-50 %), and on bank8FM RAKER's MSE was 0.021 against
    RFF-RLS's 0.033 (RFF-RLS never forgets, and the stream negates every other block). So does
    a model per entity (``--key-by``), as the live stream's: 4 MB of RFF-RLS per entity would
    take 100 entities to 400 MB."""
    if stream != "none" or key_by is not None:
        return DEFAULT_LEARNERS[task]
    return DEFAULT_BY_ROWS[task][rows]
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


def at_least(low: float, option: str, default: Any = None) -> Any:
    """A field of a command's config that must be >= ``low`` when given (None passes), its
    option named ``option`` in the message (:func:`check_declared`)."""
    return field(default=default, metadata={"at_least": low, "option": option})


def check_declared(config: Any) -> None:
    """Check the declarations of the fields of ``config`` (a dataclass), in their order:
    :class:`ConfigError` for the first :func:`at_least` field below its minimum, e.g.
    ``-R must be >= 1, got 0``. Each command's config calls it from ``__post_init__``."""
    for f in fields(config):
        low = f.metadata.get("at_least")
        value = getattr(config, f.name)
        if low is not None and value is not None and value < low:
            raise ConfigError(f"{f.metadata['option']} must be >= {low}, got {value}")


def check_at_least(args: Any, **minimums: int) -> None:
    """Raise :class:`ConfigError` for the first of the options (by destination, in the order
    given) whose value is below its minimum, e.g. ``--tune-rows must be >= 1, got 0``; an
    option that was not given (None) passes."""
    for dest, low in minimums.items():
        value = getattr(args, dest)
        if value is not None and value < low:
            raise ConfigError(f"--{dest.replace('_', '-')} must be >= {low}, got {value}")


def learner_line(config: LearnerConfig, message: str) -> str:
    """A learner's refusal (``check_width``'s ``NAME: ...``) for the configuration ``config``:
    its label in front only when it is not the learner's name, said once."""
    if config.label == config.learner and message.startswith(f"{config.learner}: "):
        return message
    return f"learner {config.label}: {message}"


def check_limit(args: Any) -> None:
    """``--limit`` checked before any row is read: >= 1, and at most ``sys.maxsize`` (the
    largest count the readers' ``itertools.islice`` takes)."""
    check_at_least(args, limit=1)
    limit = getattr(args, "limit", None)
    if limit is not None and limit > sys.maxsize:
        raise ConfigError(f"--limit must be <= {sys.maxsize}, got {limit}")


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
    default of every Gaussian width not given (``engine.learner_widths.resolve_widths``, the
    Python API's rule too); without it, an unset width keeps the learner's own default."""
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


def resolve_task(configs: Sequence[LearnerConfig], task: str | None,
                 option: str = "--task") -> str:
    """The task of the run: the one given, else the learners' own; they must all agree
    (``option``: how the messages name the given task, the CLI's ``--task`` or the Python
    API's ``task=``)."""
    tasks = {c.task for c in configs}
    if task is None:
        if len(tasks) > 1:
            raise ConfigError(
                "the configured learners mix classification and regression: "
                + ", ".join(f"{c.label} ({c.task})" for c in configs)
            )
        return tasks.pop()
    if task not in TASKS:
        raise ConfigError(f"{option} must be one of {', '.join(TASKS)}, got {task!r}")
    wrong = [c for c in configs if c.task != task]
    if wrong:
        parts = []
        for c in wrong:
            fits = [loss for loss, t in loss_tasks(c.learner).items() if t == task]
            hint = (f" (its task follows its loss: -p {c.label}.loss={' or '.join(fits)} "
                    f"makes it a {task} learner)" if fits else "")
            parts.append(f"{c.label} is a {c.task} learner{hint}")
        raise ConfigError(f"{option}{' ' if option.startswith('-') else ''}{task}, but "
                          + ", ".join(parts))
    return task


def default_out(dataset: str, configs: Sequence[LearnerConfig],
                params_from: str | None = None) -> Path:
    """``runs/<dataset>-<label>[+<label>...]`` (relative to the working directory). A run of
    ``--params-from DIR/tuned.json`` is named after DIR (``tune-X`` → ``tuned-X``, else
    ``DIR-tuned``), so that ``replay DATA``, ``tune DATA`` and the replay tune prints do
    not meet in one folder."""
    plain = f"{dataset}-{'+'.join(c.label for c in configs)}"
    if params_from is None:
        return Path("runs") / plain
    parts = params_from.replace("\\", "/").rstrip("/").split("/")
    folder = parts[-2] if len(parts) > 1 and parts[-1].endswith(".json") else parts[-1]
    if folder in ("", ".", "..") or folder.endswith(".json"):
        return Path("runs") / f"{plain}-tuned"
    tuned = "tuned-" + folder.removeprefix("tune-") if folder.startswith("tune-") else None
    return Path("runs") / (tuned or f"{folder}-tuned")
