"""``kernelstream stream`` arguments → a checked :class:`StreamConfig` (no Beam, no broker).

Every option error is one line (:class:`~kernelstream.errors.ConfigError`, exit 2)
before Beam is imported or a broker contacted; the config is what the up-front checks
(:mod:`~kernelstream.pipelines.live.stream_prepare`) and the run
(:mod:`kernelstream.pipelines.live.stream`) then work from. It stands apart so that the parsing
rules of a stream command (durations, topic URLs, output names) can be read and tested without the
launcher around them.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kernelstream import kafka_client as kafka_lib
from kernelstream.data.options import Ranges, ReadOptions
from kernelstream.data.scaling import ranges_doc, ranges_from_doc
from kernelstream.engine.learner_config import LearnerConfig, recorded_target, records
from kernelstream.engine.live.parsing import LiveSpec
from kernelstream.engine.live.rows import OUTPUTS
from kernelstream.engine.live.snapshot.store import SnapshotView, is_snapshot_dir
from kernelstream.engine.replay import checkpoints
from kernelstream.errors import ConfigError, WidthError
from kernelstream.kafka_client.names import (
    KAFKA_CLIENTS,
    MAX_SNAPSHOT_SECONDS,
    MERGES,
    SCHEME,
)
from kernelstream.learners.registry import check_width
from kernelstream.pipelines.config import (
    DEFAULT_LEARNERS,
    check_at_least,
    learner_configs,
    learner_line,
    parse_learner_spec,
    resolve_task,
)
from kernelstream.pipelines.width_specs import auto_width_spec as _auto_width_spec
from kernelstream.pipelines.width_specs import recorded_width_specs as _width_specs

EXIT_STOPPED = 130
KEY_BY = ("id-prefix",)
OUTPUT_NAMES = OUTPUTS  # the stream's outputs, by name

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# where a stream's Gaussian widths come from (``summary.json``'s ``width_source``): estimated
# from its first records (``gamma=auto``), continued from --init-from, the learners' fixed
# defaults (no records to estimate from), or fixed by the command (-p, or no width at all)
WIDTH_SOURCES = ("auto", "init-from", "default", "given")
WIDTH_WAIT = "30s"  # --width-wait: how long a fresh stream waits for its first records
# settings that StreamConfig.stream_doc once wrote only when not default: a snapshot without
# them was written with these
STREAM_DOC_DEFAULTS = {"rows": "auto", "hash_features": None, "negative_label": None}


def output_topic_names(prefix: str) -> dict[str, str]:
    """Output name → its topic with ``--kafka-out kafka://HOST/PREFIX``: PREFIX-predictions,
    PREFIX-outcomes, PREFIX-unlabeled, PREFIX-metrics, PREFIX-dead-letters."""
    return {name: f"{prefix}-{name.replace('_', '-')}" for name in OUTPUT_NAMES}


def _forget_ms(text: str | None, key_by: str | None, ttl: float, window: float) -> int | None:
    """``--forget-entities-after`` in milliseconds (None: not given, or ``never``)."""
    if text is None or text == "never":
        return None
    ms = max(1, round(parse_duration(text, "--forget-entities-after") * 1000))
    if key_by is None:
        raise ConfigError("--forget-entities-after forgets entities' models: it goes with "
                          "--key-by")
    least = 2 * max(max(1, round(ttl * 1000)), max(1, round(window * 1000)))
    if ms < least:
        raise ConfigError(f"--forget-entities-after {text}: at least twice max(--label-ttl, "
                          f"--metrics-window) = {duration_text(least)} (an entity's last "
                          "events expire, and their ids are forgotten, before its models go)")
    return ms


def duration_text(ms: int) -> str:
    """``ms`` milliseconds in the largest unit :func:`parse_duration` reads that holds it
    whole: ``2h``, ``90s``, ``1500ms``."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def parse_duration(text: str, what: str) -> float:
    """``"10m"``, ``"2.5s"``, ``"500ms"``, ``"1h"``, ``"7d"`` or plain seconds → seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise ConfigError(f"{what} {text!r}: expected a duration such as 500ms, 10s, 10m, 2h, "
                          "7d (a number alone: seconds)")
    value = float(m.group(1)) * _UNIT_S[m.group(2) or "s"]
    if not value > 0:
        raise ConfigError(f"{what} must be > 0, got {text!r}")
    return value


def parse_topics(url: str, what: str) -> tuple[str, tuple[str, ...]]:
    """``kafka://HOST:PORT[,HOST:PORT]/TOPIC[,TOPIC2...]`` → ``(bootstrap, topics)``."""
    if not url.startswith(SCHEME):
        raise ConfigError(f"{what} {url!r}: expected kafka://HOST:PORT/TOPIC[,TOPIC...]")
    servers, sep, names = url[len(SCHEME):].partition("/")
    topics = tuple(t for t in names.split(",")) if sep else ()
    if not topics or any(not t for t in topics):
        raise ConfigError(f"{what} {url!r}: expected kafka://HOST:PORT/TOPIC[,TOPIC...]")
    for t in topics:
        try:
            kafka_lib.KafkaTopic.parse(f"{SCHEME}{servers}/{t}")
        except ValueError as exc:
            raise ConfigError(f"{what}: {exc}") from None
    if len(set(topics)) != len(topics):
        raise ConfigError(f"{what} {url!r}: a topic is named twice")
    return servers, topics


class UpfrontError(Exception):
    """A check before the run failed (one line, exit 2; ``stream_prepare`` and the first
    records' read, ``stream_width``, raise it)."""


@dataclass(frozen=True)
class StreamConfig:
    """A fully checked ``kernelstream stream`` command (no Beam, no broker contacted)."""

    bootstrap: str
    topics: tuple[str, ...]
    labels_topic: str | None
    configs: tuple[LearnerConfig, ...]
    spec: LiveSpec
    out: str | None  # None: the checkpoint's, else runs/stream-<topic>-<learners>
    checkpoint: str | None = None
    kafka_out: tuple[str, str] | None = None  # (bootstrap, prefix)
    kafka_outputs: tuple[str, ...] = OUTPUT_NAMES  # the outputs sent to Kafka
    kafka_exactly_once: bool = False  # their rows in a transaction per snapshot
    client: tuple[tuple[str, str], ...] = ()
    kafka_client: str = "auto"  # the reader's client (kafka_client.confluent.reader_consumer)
    # --merge: how the reader groups the partitions (kafka_client.partitions.MERGES); None
    # until resolved (stream_prepare): a checkpoint's recorded one, else "all"
    merge: str | None = None
    # --forget-entities-after was given (spec.forget_after_ms: its value, None for never);
    # when not, a resume takes the checkpoint's (stream_prepare)
    forget_given: bool = False
    init_from: str | None = None
    max_seconds: float | None = None
    idle_stop: float | None = None
    snapshot_every: int = 100_000
    snapshot_seconds: float = 10.0
    runner: str = "direct"
    pipeline_args: tuple[str, ...] = ()
    quiet: bool = False
    argv: tuple[str, ...] = field(default_factory=tuple)
    overwrite: bool = False  # replace a previous run in --out (pipelines.run_folder)
    # the learner arguments the configurations are resolved from (again, once the width is
    # known: :meth:`with_widths`), ``-p`` including the --init-from widths
    learner_specs: tuple[str, ...] = ()
    param_specs: tuple[str, ...] = ()
    task_arg: str | None = None
    # a configuration leaves its Gaussian width to the data (``gamma=auto``, the default of
    # an unset one): the configurations hold the learners' defaults until it is resolved
    wants_width: bool = False
    width_source: str = "given"  # WIDTH_SOURCES
    auto_gamma: float | None = None  # the estimate, when width_source is "auto"
    width_records: int | None = None  # the feature records it was estimated from
    width_wait: float = 30.0  # --width-wait, seconds
    # --scale: "auto" (the default) or "none"; auto is decided on the same first records as
    # gamma=auto (stream_width) until then ``wants_scale``; the ranges are ``spec.read``'s
    # ``scale_ranges`` (the parser applies them) and ``auto_scale`` says why (None: unscaled)
    scale: str = "auto"
    wants_scale: bool = False
    auto_scale: str | None = None
    # --scale-target: "auto" (the default) or "none"; a regression's auto is decided on the
    # targets among the same first records (stream_width), until then ``wants_target``; the
    # (mean, std) its configurations learn the target by is each one's ``target``
    scale_target: str = "auto"
    wants_target: bool = False
    # --positive-label of a classification: the other class is the first other label of the
    # same first records (stream_width), until then ``wants_labels``; ``spec.negative_label``
    wants_labels: bool = False
    # the width of the first feature record read for the above (stream_width), when any was
    head_width: int | None = None

    @property
    def all_topics(self) -> tuple[str, ...]:
        return (*self.topics, *([self.labels_topic] if self.labels_topic else []))

    def configs_doc(self) -> dict[str, Any]:
        """The learner configurations as a checkpoint records them (the replay's form)."""
        return records(self.configs)

    def widths_doc(self) -> dict[str, Any]:
        """Where the widths came from, as the snapshots and ``summary.json`` record it."""
        return {"source": self.width_source, "gamma": self.auto_gamma,
                "records": self.width_records}

    @property
    def scale_ranges(self) -> Ranges | None:
        """``--scale auto`` 's ``(lo, hi)`` of each column (None: the features as they are)."""
        return self.spec.read.scale_ranges

    def scale_doc(self) -> dict[str, Any]:
        """How the features are scaled, as the snapshots and ``summary.json`` record it (a
        replay's keys: ``scale`` ``01`` or ``none``, ``auto_scale`` why, ``scale_ranges``
        ``{"lo": [...], "hi": [...]}`` or None)."""
        return {"scale": self.spec.read.scale, "auto_scale": self.auto_scale,
                "scale_ranges": ranges_doc(self.scale_ranges)}

    def with_scale(self, ranges: Ranges | None,
                   why: str | None) -> StreamConfig:
        """This config with ``--scale auto`` decided: every dense row min-max scaled by
        ``ranges`` (the parser's ``LiveSpec.read.scale_ranges``), or, None, the features as
        they are; raises ``ValueError`` when the ranges do not fit the rows."""
        read = replace(self.spec.read, scale="none" if ranges is None else "01",
                       scale_ranges=ranges)
        return replace(self, spec=replace(self.spec, read=read), wants_scale=False,
                       auto_scale=None if ranges is None else why)

    def with_recorded_scale(self, doc: dict[str, Any] | None, why: str | None = None,
                            ) -> StreamConfig:
        """This config continuing models learnt with the scaling ``doc`` records
        (:meth:`scale_doc`, or a replay checkpoint's ``{"scale_ranges": ...}``; None: a
        snapshot of a version that never scaled): its ranges, or none; nothing is read.
        ``why`` replaces the recorded reason."""
        ranges = ranges_from_doc((doc or {}).get("scale_ranges"))
        return self.with_scale(ranges, why or (doc or {}).get("auto_scale"))

    @property
    def target(self) -> tuple[float, float] | None:
        """``--scale-target auto`` 's ``(mean, std)`` (None: the target as it comes)."""
        return self.configs[0].target if self.configs else None

    def target_doc(self) -> dict[str, Any]:
        """How a regression target is learnt, as ``summary.json`` records it (a replay's
        keys: ``scale_target`` the effective value, ``auto`` when standardised, else ``none``;
        the snapshots have it in each configuration's ``target``)."""
        t = self.target
        return {"scale_target": "none" if t is None else "auto",
                "target_standardised": None if t is None else {"mean": t[0], "std": t[1]}}

    def with_target(self, target: tuple[float, float] | None) -> StreamConfig:
        """This config with ``--scale-target auto`` decided: its learners learn the target
        standardised by ``target = (mean, std)``, or, None, as it comes."""
        configs = tuple(replace(c, target=target) for c in self.configs)
        return replace(self, configs=configs, spec=replace(self.spec, configs=configs),
                       wants_target=False)

    def with_recorded_target(self, saved: dict[str, Any]) -> StreamConfig:
        """This config continuing models whose recorded configurations ``saved`` learnt the
        target standardised (``LearnerConfig.record`` 's ``target``) or not; nothing is read.
        ``--scale-target none`` keeps its own (``stream_prepare`` refuses it against a
        standardised one)."""
        if self.scale_target != "auto":
            return self
        return self.with_target(recorded_target(saved))

    def with_negative_label(self, label: str | None) -> StreamConfig:
        """This config with the class its ``--positive-label`` is against decided: ``label``
        is -1 and any third label a dead letter, or, None, every other label is -1."""
        return replace(self, spec=replace(self.spec, negative_label=label), wants_labels=False)

    def with_widths(self, gamma: float | None, source: str,
                    records: int | None = None) -> StreamConfig:
        """This config with its data-driven widths resolved: ``gamma=auto`` stands for
        ``gamma`` (``engine.learner_widths.resolve_widths``, as a replay resolves it; a sigma grid
        is centred on it), or, with ``gamma`` None, for the learners' own defaults."""
        params = self.param_specs
        if gamma is None:  # an explicit auto falls back as an unset width does
            params = tuple(p for p in params if not _auto_width_spec(p))
        return self._resolved(params, gamma, source, records)

    def with_recorded(self, saved: dict[str, Any], doc: dict[str, Any] | None) -> StreamConfig:
        """This config resuming a snapshot whose configurations are ``saved`` and widths
        ``doc`` (:meth:`widths_doc`; None: written by a version that kept the learners'
        defaults): a configuration whose width is left to the data continues with the
        recorded one; nothing is estimated again."""
        if not self.wants_width:
            return self
        params = tuple(p for p in self.param_specs if not _auto_width_spec(p))
        params += tuple(_width_specs(saved, [(c.label, c.learner) for c in self.configs],
                                     params))
        doc = doc or {}
        source = str(doc.get("source")) if doc.get("source") in WIDTH_SOURCES else "default"
        gamma = doc.get("gamma") if source == "auto" else None
        resumed = self._resolved(params, None, source, doc.get("records"))
        return replace(resumed, auto_gamma=gamma if isinstance(gamma, float) else None)

    def _resolved(self, params: tuple[str, ...], gamma: float | None, source: str,
                  records: int | None) -> StreamConfig:
        configs = learner_configs(self.learner_specs, params, task=self.task_arg,
                                  auto_width=None if gamma is None else (lambda: gamma))
        configs = tuple(replace(c, target=self.target) for c in configs)  # as decided
        return replace(self, configs=configs, spec=replace(self.spec, configs=configs),
                       param_specs=params, wants_width=False, width_source=source,
                       auto_gamma=gamma, width_records=records)

    def stream_doc(self) -> dict[str, Any]:
        """What a checkpoint's models depend on besides the learners: every setting (a
        resume compares each, :data:`STREAM_DOC_DEFAULTS` standing for one an older
        snapshot left out), and the ``--init-from`` its new models start from."""
        s, r = self.spec, self.spec.read
        return {"topics": list(self.topics), "labels_topic": self.labels_topic,
                "seed": s.seed, "format": r.fmt, "n_features": s.width,
                "label_column": r.label_column, "delimiter": r.delimiter, "task": r.task,
                "positive_label": r.positive_label, "key_by": r.key_by,
                "label_ttl_ms": s.label_ttl_ms, "metrics_window_ms": s.metrics_window_ms,
                "rows": r.rows, "hash_features": r.hash_features,
                "negative_label": s.negative_label, "merge": self.merge,
                "forget_after_ms": s.forget_after_ms,
                # --kafka-exactly-once and its topics: once on, kept (stream_prepare)
                "kafka_exactly_once": self.kafka_exactly_once,
                "kafka_out_prefix": None if self.kafka_out is None else self.kafka_out[1],
                "init_from": None if self.init_from is None else os.path.realpath(self.init_from)}

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: Sequence[str] = ()) -> StreamConfig:
        """``kernelstream stream`` arguments → its config, the one place they are turned into
        one; raises ``ValueError`` (one line) on bad input."""
        bootstrap, topics = parse_topics(args.source, "SOURCE")
        labels_topic = None
        if args.labels is not None:
            lb, lt = parse_topics(args.labels, "--labels")
            if len(lt) != 1:
                raise ConfigError("--labels names one topic")
            if lb != bootstrap:
                raise ConfigError(f"--labels must be on the events' brokers ({bootstrap}), "
                                  f"got {lb}")
            if lt[0] in topics:
                raise ConfigError(f"--labels topic {lt[0]!r} is also an events topic")
            labels_topic = lt[0]
        learner_specs, param_specs = tuple(args.learner or ()), tuple(init_widths(args))
        # gamma=auto, the default of an unset Gaussian width, is resolved once the stream's
        # first records are read (stream_prepare): until then, the learners' own defaults
        wanted: list[bool] = []

        def asked() -> float:  # resolve_widths asks only for a width left to the data
            wanted.append(True)
            return 1.0

        learner_configs(learner_specs, param_specs, task=args.task, auto_width=asked)
        configs = learner_configs(learner_specs,
                                  [p for p in param_specs if not _auto_width_spec(p)],
                                  task=args.task)
        task = resolve_task(configs, args.task)
        width_source = ("default" if wanted
                        else "init-from" if len(param_specs) > len(args.param or ())
                        else "given")
        width_wait = parse_duration(getattr(args, "width_wait", None) or WIDTH_WAIT,
                                    "--width-wait")
        scale = getattr(args, "scale", None) or "auto"
        if scale not in ("auto", "none"):
            raise ConfigError(f"--scale {scale}: a stream cannot read its data's ranges in "
                              "advance; --scale auto scales by its first records' ranges "
                              "when they differ widely, --scale none keeps the features")
        scale_target = getattr(args, "scale_target", None) or "auto"
        if scale_target not in ("auto", "none"):
            raise ConfigError(f"--scale-target {scale_target}: a stream cannot read its "
                              "target's range in advance; --scale-target auto standardises it "
                              "by its first records' targets, none learns it as it comes")
        fmt = args.format or "libsvm"
        hash_bits = getattr(args, "hash_features", None)
        if fmt == "libsvm" and args.n_features is None and hash_bits is None:
            raise ConfigError("LIBSVM messages need --n-features or --hash-features (a stream "
                              "cannot be scanned first)")
        if hash_bits is not None and args.n_features is not None:
            raise ConfigError("--hash-features fixes the width at 2^K: drop --n-features")
        if fmt == "libsvm" and args.label_column is not None:
            raise ConfigError("--label-column applies to CSV messages (--format csv)")
        check_at_least(args, n_features=1)
        label_column = None
        if args.label_column is not None:
            try:
                label_column = int(args.label_column)
            except ValueError:
                raise ConfigError(f"--label-column of CSV messages is a 0-based position (messages "
                                  f"have no header), got {args.label_column!r}") from None
        ttl = parse_duration(args.label_ttl, "--label-ttl")
        window = parse_duration(args.metrics_window, "--metrics-window")
        forget_ms = _forget_ms(getattr(args, "forget_entities_after", None), args.key_by,
                               ttl, window)
        check_at_least(args, snapshot_every=1)
        snapshot_seconds = parse_duration(args.snapshot_seconds, "--snapshot-seconds")
        max_seconds = (None if args.max_seconds is None
                       else parse_duration(args.max_seconds, "--max-seconds"))
        idle_stop = None if args.idle_stop is None else parse_duration(args.idle_stop,
                                                                       "--idle-stop")
        kafka_out = None
        if args.kafka_out is not None:
            ob, ot = parse_topics(args.kafka_out, "--kafka-out")
            if len(ot) != 1:
                raise ConfigError("--kafka-out names one topic prefix: kafka://HOST:PORT/PREFIX")
            kafka_out = (ob, ot[0])
        kafka_outputs = OUTPUT_NAMES
        if args.kafka_outputs is not None:
            names = tuple(dict.fromkeys(n.strip().replace("-", "_")
                                        for n in args.kafka_outputs.split(",") if n.strip()))
            bad = [n for n in names if n not in OUTPUT_NAMES]
            if bad or not names:
                raise ConfigError(f"--kafka-outputs {args.kafka_outputs!r}: a comma-separated list "
                                  f"of {', '.join(OUTPUT_NAMES)}")
            if kafka_out is None:
                raise ConfigError("--kafka-outputs goes with --kafka-out")
            kafka_outputs = names
        client = kafka_lib.client_settings(args.kafka_option or [])
        exactly_once = bool(getattr(args, "kafka_exactly_once", False))
        if exactly_once:
            if kafka_out is None or args.checkpoint is None:
                raise ConfigError("--kafka-exactly-once commits the --kafka-out rows with the "
                                  "--checkpoint snapshots: it needs both")
            if getattr(args, "kafka_client", None) == "kafka-python":
                raise ConfigError("--kafka-exactly-once needs the confluent-kafka client "
                                  "(transactions): drop --kafka-client kafka-python")
            problem = kafka_lib.check_confluent(client)
            if problem is not None:
                raise ConfigError(f"--kafka-exactly-once: {problem}")
            interval = parse_duration(args.snapshot_seconds, "--snapshot-seconds")
            if interval > MAX_SNAPSHOT_SECONDS:
                raise ConfigError(f"--kafka-exactly-once keeps a Kafka transaction open for a "
                                  f"snapshot interval: --snapshot-seconds must be at most "
                                  f"{duration_text(int(MAX_SNAPSHOT_SECONDS * 1000))} (the "
                                  "brokers cap a transaction at 15 minutes)")
            delivery = dict(client).get("delivery_timeout_ms")
            if delivery is not None and float(delivery) > 900_000:
                raise ConfigError("--kafka-exactly-once: delivery_timeout_ms must be at most "
                                  "900000 (a transaction's limit)")
        merge = getattr(args, "merge", None)
        if merge is not None and merge not in MERGES:
            raise ConfigError(f"--merge {merge!r}: expected one of {', '.join(MERGES)}")
        kafka_client = getattr(args, "kafka_client", None) or "auto"
        if kafka_client not in KAFKA_CLIENTS:
            raise ConfigError(f"--kafka-client {kafka_client!r}: expected one of "
                              f"{', '.join(KAFKA_CLIENTS)}")
        if kafka_client == "confluent":  # asked for explicitly: no silent fallback
            problem = kafka_lib.check_confluent(client)
            if problem is not None:
                raise ConfigError(problem)
        pipeline_args = tuple(getattr(args, "pipeline_args", ()) or ())
        if any(a.startswith("--direct_num_workers") and a.split("=", 1)[-1] not in ("1", "0")
               for a in pipeline_args):
            raise ConfigError("a stream runs on one worker (its snapshot is one consistent cut of "
                              "every model and offset): drop --direct_num_workers")
        for path, what in ((args.checkpoint, "--checkpoint"), (args.out, "--out"),
                           (args.init_from, "--init-from")):
            if path is not None and "://" in path:
                raise ConfigError(f"{what} {path}: a stream's files need a local or mounted file "
                                  "system (a lock, renames), not an object store")
        if (args.init_from is not None and args.checkpoint is not None
                and os.path.realpath(args.init_from) == os.path.realpath(args.checkpoint)):
            raise ConfigError("--init-from is the --checkpoint directory itself: a checkpoint "
                              "resumes on its own")
        try:
            read = ReadOptions(
                path=args.source, fmt=fmt, n_features=args.n_features, label_column=label_column,
                delimiter=args.delimiter or ",", task=task, positive_label=args.positive_label,
                key_by=None if args.key_by is None else args.key_by,
                rows=getattr(args, "rows", "auto"), hash_features=hash_bits)
            spec = LiveSpec(
                configs=configs, read=read, seed=args.seed, label_ttl_ms=max(1, round(ttl * 1000)),
                metrics_window_ms=max(1, round(window * 1000)), labels_topic=labels_topic,
                source_prefix=f"{SCHEME}{bootstrap}/", forget_after_ms=forget_ms)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        _check_width(spec)
        return cls(
            bootstrap=bootstrap, topics=topics, labels_topic=labels_topic, configs=configs,
            spec=spec, out=args.out, checkpoint=args.checkpoint, kafka_out=kafka_out,
            kafka_outputs=kafka_outputs, kafka_exactly_once=exactly_once,
            client=client, kafka_client=kafka_client, merge=merge,
            forget_given=getattr(args, "forget_entities_after", None) is not None,
            init_from=args.init_from, max_seconds=max_seconds, idle_stop=idle_stop,
            snapshot_every=args.snapshot_every, snapshot_seconds=snapshot_seconds,
            runner=args.runner, pipeline_args=pipeline_args, quiet=args.quiet, argv=tuple(argv),
            overwrite=bool(getattr(args, "overwrite", False)),
            learner_specs=learner_specs, param_specs=param_specs, task_arg=args.task,
            wants_width=bool(wanted), width_source=width_source, width_wait=width_wait,
            # sparse rows are never min-max scaled (it would fill in their zeros)
            scale=scale, wants_scale=scale == "auto" and not spec.sparse,
            scale_target=scale_target,
            wants_target=scale_target == "auto" and task == "regression",
            wants_labels=task == "classification" and args.positive_label is not None)


def _check_width(spec: LiveSpec) -> None:
    """Refuse a learner whose memory at this width cannot fit (one line: why, what instead),
    before anything connects: ``learners.registry.check_width``."""
    if spec.width is None:  # CSV: the first record fixes the width
        return
    for c in spec.configs:
        try:
            check_width(c.learner, dict(c.params), spec.width, sparse=spec.sparse)
        except WidthError as e:
            raise ConfigError(learner_line(c, str(e))) from None


def init_widths(args: argparse.Namespace) -> list[str]:
    """The ``-p`` values of a stream, plus, with ``--init-from``, the Gaussian widths
    (``gamma``, ``sigmas``) its configurations were learnt with, for every configuration of
    the same label and learner that is given none: the models continue with the widths they
    were learnt with, as ``gamma=auto`` was resolved by that run. Without ``--init-from`` (or
    for a configuration it does not have), ``gamma=auto`` is estimated from the stream's
    first records (:mod:`~kernelstream.pipelines.live.stream_width`)."""
    specs = list(args.param or [])
    if args.init_from is None or not os.path.isdir(args.init_from):
        return specs  # prepare() reports a missing directory
    pairs = [parse_learner_spec(spec)
             for spec in args.learner or [DEFAULT_LEARNERS["classification"][0]]]
    return specs + _width_specs(_saved_configs(args.init_from), pairs, specs)


def _saved_configs(path: str) -> dict[str, Any]:
    """The configurations recorded by a stream snapshot or a replay checkpoint (empty when
    neither: prepare() reports it)."""
    try:
        if is_snapshot_dir(path):
            with SnapshotView.open(path) as view:
                return dict(view.info().get("configs") or {})
        ckpt = checkpoints.latest(path)
        return dict(ckpt.info().get("configs") or {}) if ckpt is not None else {}
    except (OSError, ValueError):
        return {}
