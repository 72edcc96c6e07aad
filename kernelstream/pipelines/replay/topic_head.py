"""The head of a Kafka topic that a replay reads before it starts: ``gamma=auto`` and
``--scale auto`` decided on the first examples the run will read, as a file's are on its
first rows (:func:`topic_head`; ``kernelstream.pipelines.replay.auto_scale`` is the file's
side), and what a resumed ``--checkpoint`` recorded of them (:func:`checkpoint_info`)."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kernelstream import kafka_client
from kernelstream.data import check as data_check
from kernelstream.data import widths
from kernelstream.data.labels import StreamLabels
from kernelstream.data.options import Ranges, ReadOptions
from kernelstream.data.scaling import ranges_from_doc, target_standardisation
from kernelstream.engine.learner_config import LearnerConfig, recorded_target
from kernelstream.engine.replay import checkpoints as ckpts
from kernelstream.errors import ConfigError
from kernelstream.pipelines.config import PROG, learner_configs, resolve_task
from kernelstream.pipelines.replay import auto_scale
from kernelstream.pipelines.width_specs import auto_width_spec, recorded_width_specs
from kernelstream.sparse import CSR


@dataclass(frozen=True)
class TopicHead:
    """What a replay of a Kafka topic takes from the first rows it will read
    (:func:`topic_head`): its ``-p`` arguments, the width function of ``learner_configs``
    and the record of :attr:`ReplayConfig.widths`, and ``--scale auto`` 's ranges and why
    (None: the features as they are)."""

    param_specs: tuple[str, ...]
    auto_width: Callable[[], float] | None = None
    widths: dict[str, Any] | None = None
    scale_ranges: Ranges | None = None
    auto_scale: str | None = None
    # --scale-target auto of a regression: the (mean, std) the learners learn the target by
    target: tuple[float, float] | None = None


def topic_head(args: argparse.Namespace, src: str, settings: tuple[tuple[str, str], ...],
               learner_specs: Sequence[str], param_specs: Sequence[str],
               default: tuple[str, dict[str, str]] | None, scale: str,
               target: bool = False) -> TopicHead:
    """``gamma=auto`` and ``--scale auto`` (``scale``: the option as given) of a replay of
    the Kafka topic ``src``, as a file's, from the first
    :data:`~kernelstream.data.widths.RESERVOIR_ROWS` examples the run will read
    (``kafka_client.head_rows``: from the topic's beginning, the replay's reader and parser,
    dead-lettered records skipped), read up to the log's end now, at most ``--kafka-idle``
    seconds without a record, ``--kafka-max-seconds`` in all; nothing is read when no
    configuration leaves its width to the data and ``--scale`` is not ``auto``.

    * Scaling: ``check``'s rule (:func:`head_scaling`) on those rows; when it fires, every
      row is min-max scaled by *their* ranges (a topic is read once; later values may fall
      outside ``[0, 1]``), one line says so.
    * The target (``target``: a regression with ``--scale-target auto``): standardised by
      the mean and standard deviation of those rows' targets (a file's rule,
      ``data.scaling.target_standardisation``); the learners learn it so, every output stays
      in its units.
    * The width: ``data.widths.rows_gamma``, the file's function, on those rows (scaled as
      the learners get them). Fewer than two examples (an empty topic, or nothing readable
      within ``--kafka-idle``): the learners' default widths, said in one line on stderr.
    * A run resuming a ``--checkpoint`` continues with the widths and ranges it recorded
      (its learners' states were learnt with them) and reads nothing; so does ``summary`` of
      a submitted run (``args.recorded_head``: what ``submitted.json`` recorded of its head).

    A broker that does not answer or a missing topic is the run's error, raised here as the
    run's own check would raise it (one line, exit 2, without a second wait)."""
    wanted: list[bool] = []

    def probe() -> float:  # which configurations want a width, before anything is read
        wanted.append(True)
        return 1.0

    probed = learner_configs(learner_specs, param_specs, task=args.task, auto_width=probe,
                             default=default)
    want_scale = scale == auto_scale.AUTO
    submitted = getattr(args, "recorded_head", None)  # ``summary`` of a submitted run
    saved = submitted if submitted is not None else checkpoint_info(args.checkpoint)
    if (saved is not None and not target
            and recorded_target(dict(saved.get("configs") or {})) is not None):
        raise ConfigError(f"--checkpoint {args.checkpoint}: its models learnt a standardised "
                          "regression target (--scale-target auto); resume it as it ran "
                          "(--task regression, --scale-target auto)")
    if not wanted and not want_scale and not target:
        return TopicHead(tuple(param_specs))
    given = [p for p in param_specs if not auto_width_spec(p)]
    if saved is not None:
        ranges = ranges_from_doc(saved.get("scale_ranges")) if want_scale else None
        why = None if ranges is None else saved.get("auto_scale",
                                                    "the ranges the checkpoint recorded")
        configs = dict(saved.get("configs") or {})
        kept = recorded_target(configs) if target else None
        if not wanted:
            return TopicHead(tuple(param_specs), scale_ranges=ranges, auto_scale=why,
                             target=kept)
        specs = given + recorded_width_specs(configs, [(c.label, c.learner) for c in probed],
                                             given)
        record = saved.get("widths") if submitted is not None else None
        return TopicHead(tuple(specs), None, record or {
            "width_source": "checkpoint", "auto_gamma": None, "width_records": None},
                         ranges, why, kept)
    # the head unscaled: its scaling is what read_head decides on it
    read = ReadOptions.from_args(args, src, task=resolve_task(probed, args.task), scale="none",
                                 scale_target="none")
    opts = kafka_client.KafkaReadOptions(kafka_client.KafkaTopic.parse(src),
                                         idle_seconds=args.kafka_idle,
                                         max_seconds=args.kafka_max_seconds, client=settings)
    try:
        h = read_head(read, opts, want_scale, target, _say, "--scale none")
    except FileNotFoundError as exc:
        raise ConfigError(f"cannot read data: {exc}") from None
    head, records, read, ranges, why, standardised = (h.rows, h.records, h.read, h.ranges,
                                                       h.why, h.target)
    if not wanted:
        return TopicHead(tuple(param_specs), scale_ranges=ranges, auto_scale=why,
                         target=standardised)
    if len(head) >= 2:
        gamma = widths.rows_gamma(head, read)
        return TopicHead(tuple(param_specs), lambda: gamma, {
            "width_source": "auto", "auto_gamma": gamma, "width_records": len(head)},
            ranges, why, standardised)
    own = ", ".join(f"{c.label} {k}={c.params[k]}"
                    for c in learner_configs(learner_specs, given, task=args.task,
                                             default=default)
                    for k in ("gamma", "sigmas") if k in c.params)
    # a warning, not progress: shown with --quiet too
    print(f"{PROG}: gamma=auto: {len(head)} example{'s' if len(head) != 1 else ''} among "
          f"{records:,} records of {src} (read to its end, or --kafka-idle "
          f"{args.kafka_idle:g} s without one): too few to estimate a width from; the "
          f"learners' default widths ({own or 'none'}), recorded as width_source "
          "\"default\"", file=sys.stderr, flush=True)
    return TopicHead(tuple(given), None, {"width_source": "default", "auto_gamma": None,
                                          "width_records": len(head)}, target=standardised)



@dataclass(frozen=True)
class HeadRows:
    """The first examples of a topic (:func:`read_head`) and what they decided."""

    rows: list[Any]
    records: int  # the records read to find them (dead letters included)
    read: ReadOptions  # scaled by ``ranges`` when they are given
    ranges: Ranges | None
    why: str | None  # why it scaled (None: it did not)
    target: tuple[float, float] | None  # the regression target's standardisation


def read_head(read: ReadOptions, kafka: kafka_client.KafkaReadOptions, want_scale: bool,
              target: bool, say: Callable[[str], None], keep: str) -> HeadRows:
    """Read the first :func:`head_size` examples of the topic the run will read and decide
    on them, by the file's rules, ``--scale auto`` (``want_scale``: :func:`head_scaling`)
    and a regression's ``--scale-target auto`` (``target``); each decision is said in a
    line to ``say`` (``keep``: how to keep the features as they are). A broker that does not
    answer is a ``ConfigError`` (the run's own check would stop on it at once)."""
    rejected: dict[str, int] = {}
    try:
        rows, records = kafka_client.head_rows(kafka_client.snapshot_ends(kafka), read,
                                               head_size(read.limit), rejected)
    except ConnectionError as exc:
        raise ConfigError(str(exc)) from None
    src = read.path
    if not rows and rejected:  # every record read is a dead letter: refused, as a file is
        raise ConfigError(data_check.all_rejected_line(
            src, records, rejected,
            "--format, --n-features, --label-column, --task or --positive-label"))
    ranges, why = head_scaling(rows, read) if want_scale else (None, None)
    if ranges is not None:
        read = replace(read, scale="01", scale_ranges=ranges)
        say(f"scaling features to [0, 1] by the ranges of the first {len(rows):,} rows of "
            f"{src} ({why}; a topic is read once: later values may fall outside them; "
            f"{keep} keeps the features)")
    standardised = None
    if target:
        labels = StreamLabels("regression", None)
        standardised, line = target_standardisation([labels(r.label) for r in rows], src)
        say(line)
    return HeadRows(rows, records, read, ranges, why, standardised)


def _say(line: str) -> None:  # the CLI's
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _warn(line: str) -> None:  # the Python API's (at the caller of run_replay)
    warnings.warn(line, RuntimeWarning, stacklevel=6)


def head_size(limit: int | None) -> int:
    """The examples a topic's decisions read: the run's first
    :data:`~kernelstream.data.widths.RESERVOIR_ROWS`, or all it reads (``limit``) when fewer,
    as a file's ``--limit`` run decides on the rows it learns."""
    return widths.RESERVOIR_ROWS if limit is None else min(widths.RESERVOIR_ROWS, limit)


def head_scaling(head: Sequence[Any], read: ReadOptions,
                 ) -> tuple[Ranges | None, str | None]:
    """``--scale auto`` of a topic from its first rows ``head`` (parsed, as ``read`` reads
    them): ``((lo, hi) of each of the learners' columns over them, why)`` when they are dense
    and ``check`` 's rule (``data.check.scaling_advice``, a file's) asks for scaling, else
    ``(None, None)``. The columns are the learners' (hashed, ``--n-features`` wide, or the
    first CSV row's width, as ``kafka_client.KafkaBlocks`` fixes it)."""
    if len(head) < 2:
        return None, None
    if read.hash_features is not None:
        width: int | None = 1 << read.hash_features
    else:
        width = read.n_features or (len(head[0].vals) if head[0].idx is None else None)
    if width is None or read.sparse_rows(width):
        return None, None
    report = data_check.scan(((i, "", row) for i, row in enumerate(head)),
                             data_check.CheckReport(read.path, read.fmt or "libsvm", read.task))
    rows = widths.reservoir_from_rows(head, width, read.hash_features)  # CSR: unscaled
    X = rows.to_dense() if isinstance(rows, CSR) else np.asarray(rows)
    return data_check.head_ranges(X, report)  # the rule, shared with the live stream


def checkpoint_info(directory: str | None) -> dict[str, Any] | None:
    """What the newest committed checkpoint in ``directory`` recorded (its learner
    configurations, ``configs``, and ``--scale auto`` 's ``scale_ranges``); None without
    one (a fresh run)."""
    if directory is None:
        return None
    try:
        ckpt = ckpts.latest(directory)
        return None if ckpt is None else dict(ckpt.info())
    except (OSError, ValueError):
        return None  # the run reports an unreadable checkpoint


def api_topic_head(read: ReadOptions, kafka: kafka_client.KafkaReadOptions,
                   configs: tuple[LearnerConfig, ...], want_scale: bool,
                   checkpoint: str | None, target: bool | None = False,
                   ) -> tuple[ReadOptions, tuple[LearnerConfig, ...], str | None,
                              dict[str, Any] | None]:
    """The Python API's :func:`topic_head` (``run_replay`` of a ``kafka://`` topic): the
    widths ``configs`` leave to the data, ``scale="auto"`` (``want_scale``) and a regression's
    ``scale_target="auto"`` (``target``; None: the configurations' own, neither decided nor
    checked against the checkpoint, for a ``ReplayConfig`` built directly) decided on the first
    :func:`head_size` examples the run will read, by the CLI's rules; a run resuming
    ``checkpoint`` continues with the ranges, parameters and target standardisation it
    recorded. Returns the read options (scaled or not), the configurations (numbers for their
    widths, their ``target``), why it scaled (None: it did not) and the record of
    ``ReplayConfig.widths``. Lines the CLI prints are ``RuntimeWarning`` s here."""
    wanted = any(c.auto_widths for c in configs)
    src = read.path
    saved = checkpoint_info(checkpoint)
    kept = None if saved is None else recorded_target(dict(saved.get("configs") or {}))
    if kept is not None and target is False:
        raise ConfigError(f"checkpoint {checkpoint}: its models learnt a standardised "
                          "regression target; resume it as it ran (task='regression', "
                          "scale_target='auto')")
    if not wanted and not want_scale and not target:
        return read, configs, None, None
    if saved is not None:  # its learners' states were learnt with these: nothing is read
        ranges = ranges_from_doc(saved.get("scale_ranges")) if want_scale else None
        why = None if ranges is None else saved.get("auto_scale",
                                                    "the ranges the checkpoint recorded")
        if ranges is not None:
            read = replace(read, scale="01", scale_ranges=ranges)
        recorded = dict(saved.get("configs") or {})
        configs = tuple(
            replace(c, params={**c.params, **(recorded[c.label].get("params") or {})},
                    auto_widths={})
            if c.auto_widths and c.label in recorded else c for c in configs)
        if kept is not None and target:
            configs = tuple(replace(c, target=kept) for c in configs)
        return read, configs, why, {"width_source": "checkpoint", "auto_gamma": None,
                                    "width_records": None} if wanted else None
    h = read_head(read, kafka, want_scale, bool(target), _warn, "scale='none'")
    head, records, read, why = h.rows, h.records, h.read, h.why
    if h.target is not None:
        configs = tuple(replace(c, target=h.target) for c in configs)
    if not wanted:
        return read, configs, why, None
    if len(head) < 2:
        _warn(f"gamma=auto: {len(head)} example(s) among {records:,} records of {src}: too "
              "few to estimate a width from; the learners' default widths")
        return read, tuple(c.with_widths(None) for c in configs), why, {
            "width_source": "default", "auto_gamma": None, "width_records": len(head)}
    gamma = widths.rows_gamma(head, read)
    return read, tuple(c.with_widths(lambda: gamma) for c in configs), why, {
        "width_source": "auto", "auto_gamma": gamma, "width_records": len(head)}
