"""``--scale auto`` and ``--scale-target auto`` (the defaults of ``replay`` and ``tune``): the
scaling a file's first rows ask for, resolved before the run, printed and recorded
(``summary.json``: ``scale`` and ``auto_scale``; ``target_standardised``), so that a rerun is
exact.

Features: the rule is ``check``'s (:func:`kernelstream.data.check.scaling_advice`): dense
features whose spreads (standard deviations) differ by over ``SPREAD_RATIO`` times are min-max
scaled to ``[0, 1]``.
Measured on the shared sets (``benchmarks/results/defaults.md``) it fires on german, spambase
and covtype among the classification sets (german 30.4 % -> 27.7 %, spambase 29.8 % -> 11.7 %,
covtype 27.7 % -> 22.0 %) and on elevators, and nowhere else. Features are never output, so
nothing has to be undone.

A regression target is standardised, ``(y - mean) / std`` with the mean and standard deviation
of the first :data:`HEAD_ROWS` targets, inside the test-then-train step: the learner learns the
standardised target and its scores are mapped back (``LearnerConfig.target``,
``engine.prequential.step_block``), so the predictions, losses and metrics stay in the target's
units. The regression learners' defaults (step sizes, margins) assume a target of about unit
scale; on the shared sets it took raker's MSE ratio to the running mean from 1.13 to 0.53
(elevators, whose features it scales too), 0.17 to 0.11 (bank8FM) and 0.72 to 0.63 (bank32nh),
and the default rff-rls's from 0.87 to 0.15, 0.09 to 0.07 and 0.52 to 0.50.

Only the first :data:`HEAD_ROWS` rows of a local file or embedded set are read (at most its
``--limit`` rows: the rows the run learns; with ``--sample``, of the rows drawn:
``pipelines.replay.sample_rows``; ``--stream``'s rows are drawn from those rows, so it decides
as a plain replay of the file does); a remote file and sparse rows (scaling would fill in
their zeros) are left as they are. A Kafka topic's ``auto`` is decided on its first rows by
the same rule once its options have passed, and its rows are scaled by those rows' ranges
(``topic_head.topic_head``), as a live stream's records are by its first records'
(``pipelines.live.stream_width``; both through ``data.check.head_ranges``). A topic's
regression target is standardised by its first rows' targets
(``data.scaling.target_standardisation``, a file's rule), and a live stream's by the targets
among its first records (``pipelines.live.stream_width``).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from kernelstream import fs
from kernelstream.data import check as data_check
from kernelstream.data import widths
from kernelstream.data.options import ReadOptions
from kernelstream.data.scaling import target_standardisation
from kernelstream.pipelines.config import is_topic
from kernelstream.pipelines.replay.replay_checks import data_path

AUTO = "auto"
HEAD_ROWS = 1000  # the replay's up-front check reads as many (``replay_checks._PRECHECK_RECORDS``)


def file_options(args: argparse.Namespace, src: str) -> ReadOptions | None:
    """How a replay reads the file (or embedded set) ``src``, for a look at its first rows
    before the run (:func:`head_options`); ``None`` for a Kafka topic or a missing file (the
    run reports it). ``--stream`` reads the file too: its streams repeat the file's rows (at
    most its ``--limit``), so they are decided as a plain replay's are."""
    if is_topic(src):
        return None
    return head_options(ReadOptions.from_args(args, src))


def head_options(read: ReadOptions) -> ReadOptions | None:
    """How a replay with the read options ``read`` reads the first rows of its file (or
    embedded set): as the run reads its rows (at most its ``limit`` rows), less what does not
    change them (labels as they come); ``None`` for a Kafka topic or a missing file (the run
    reports it). The one builder of these options: the CLI's (:func:`file_options`), the
    Python API's (``ReplayConfig``) and ``auto``'s (:func:`_head_options`)."""
    if is_topic(read.path):
        return None
    path = data_path(read.path)
    # a remote file is looked at only when a configuration asks (a launcher may not reach it,
    # and then needs every width given)
    if not fs.is_remote(path) and not fs.exists(path):
        return None
    return ReadOptions(
        path=path, fmt=read.fmt, n_features=read.n_features, label_column=read.label_column,
        scale=read.scale, delimiter=read.delimiter, header=read.header, key_by=read.key_by,
        limit=read.limit,  # gamma=auto: at most the rows the run learns
        hash_features=read.hash_features, rows=read.rows)


def _head_options(args: argparse.Namespace, src: str) -> ReadOptions | None:
    """How ``auto`` reads the head of ``src``: :func:`file_options` unscaled, or None when
    auto looks at nothing (sparse rows, a remote file)."""
    if args.rows == "sparse":  # (checked first: scaled sparse rows are no ReadOptions)
        return None
    opts = file_options(args, src)
    if opts is None or fs.is_remote(opts.path):
        return None  # a remote file is not read up front
    return replace(opts, scale="none")


def _head(opts: ReadOptions, task: str) -> data_check.CheckReport | None:
    try:
        # at most the rows the run learns (--limit): rows it never sees decide nothing
        report = data_check.check_file(replace(opts, task=task),
                                       max_records=min(HEAD_ROWS, opts.limit or HEAD_ROWS))
    except (ValueError, OSError):
        return None  # the run's own checks report an unreadable file
    return report if report.rows * 2 > report.records else None


def resolve_features(args: argparse.Namespace, src: str) -> tuple[str | None, str | None]:
    """Resolve ``args.scale`` when it is ``auto`` (in place, to ``01`` or ``none``). Returns
    ``(why it scaled, None)``, ``(None, hint)`` for a regression whose target asks for
    scaling too (features left as they are), or ``(None, None)``. Runs before the widths are
    estimated: ``gamma=auto`` is measured on the rows as the learners get them."""
    if args.scale != AUTO:
        return None, None
    args.scale = "none"
    opts = _head_options(args, src)
    if opts is None:
        return None, None
    try:
        if widths.file_rows(opts) == "sparse":
            return None, None
    except (ValueError, OSError):
        return None, None
    # the labels do not matter for the ranges: read them as the task asks, else as either
    # (continuous labels fail as classes, and then the regression read is the one)
    for task in ([args.task] if args.task else ["classification", "regression"]):
        report = _head(opts, task)
        if report is None:
            continue
        report.rows_as = "dense"
        # a target the run leaves as it is (--scale-target none) can ask for scaling too;
        # auto standardises it (resolve_target), 01 scales it
        target = "none" if task == "regression" and args.scale_target == "none" else "01"
        advice = data_check.scaling_advice(report, "none", scale_target=target)
        if not advice.features:
            return None, None
        if advice.target:
            return None, (f"{'; '.join(advice.why)}: a Gaussian kernel may do better with "
                          f"{' '.join(advice.flags)} (predictions and losses are then in the "
                          "scaled target's units)")
        args.scale = "01"
        return advice.why[0], None
    return None, None


def resolve_target(args: argparse.Namespace, src: str,
                   task: str) -> tuple[tuple[float, float] | None, str | None]:
    """Resolve ``args.scale_target`` when it is ``auto`` (in place, to ``none``: the loader
    leaves the target alone) and return ``((mean, std), the line to print)`` of the
    standardisation of a regression target read from the first :data:`HEAD_ROWS` rows,
    ``(None, why not)`` when those targets give nothing to standardise by, or ``(None, None)``
    when nothing was read (not a regression, a topic, a remote file)."""
    if args.scale_target != AUTO:
        return None, None
    args.scale_target = "none"
    opts = _head_options(args, src) if task == "regression" else None
    report = None if opts is None else _head(opts, "regression")
    if report is None or not report.targets:
        return None, None
    return target_standardisation(report.targets)


def resolve_options(src: str, options: dict[str, Any],
                    task: str | None) -> tuple[dict[str, Any], str | None,
                                               tuple[float, float] | None, list[str]]:
    """The Python API's ``scale`` and ``scale_target`` (``run_replay``, ``ReplayConfig.of``;
    ``auto`` when not given, as the CLI's defaults) resolved exactly as ``kernelstream
    replay`` resolves them: :func:`resolve_features`, then :func:`resolve_target` for the
    run's ``task`` (None: the features are tried as either task, as without ``--task``).
    Returns ``options`` with both resolved (``none``/``01``), why the features were scaled
    (``ReplayConfig.auto_scale``), the target's standardisation (``LearnerConfig.target``)
    and the lines the CLI prints about them (a hint, a target left alone)."""
    # the API's keywords under the CLI's names: the head is read as the CLI reads it
    # (file_options, then head_options)
    args = argparse.Namespace(
        scale=options.get("scale", AUTO), scale_target=options.get("scale_target", AUTO),
        rows=options.get("rows", "auto"),
        format=options.get("fmt"), n_features=options.get("n_features"),
        label_column=options.get("label_column"), delimiter=options.get("delimiter"),
        header=options.get("header"), key_by=options.get("key_by"),
        hash_features=options.get("hash_features"), limit=options.get("limit"),
        task=options.get("task"))
    # (--sample: ``src`` is the drawn rows, which the run learns, as the CLI decides)
    why, hint = resolve_features(args, src)
    target, note = resolve_target(args, src, task or "classification")
    notes = [line for line in (hint, note) if line is not None]
    return ({**options, "scale": args.scale, "scale_target": args.scale_target}, why, target,
            notes)
