"""``--scale auto`` (the default of ``replay`` and ``tune``): the feature scaling a file's
first rows ask for, resolved to ``01`` or ``none`` before the run, printed and recorded
(``summary.json``: ``scale``, and ``auto_scale`` saying why), so that a rerun is exact.

The rule is ``check``'s (:func:`kernelstream.data.check.scaling_advice`): dense features whose
ranges differ by over ``RANGE_RATIO`` times are min-max scaled to ``[0, 1]``. Measured on the
shared sets (``benchmarks/results/defaults.md``) it fires on german, spambase and covtype among
the classification sets, where scaling cut the default's mistakes (german 30.4 % -> 27.7 %,
spambase 29.8 % -> 11.7 %, covtype 27.7 % -> 22.0 %), and nowhere else, so every other run is
unchanged. It looks at the first :data:`HEAD_ROWS` rows of a local file or embedded set; a Kafka
topic, ``--stream``, a remote file and sparse rows are never scaled (min-max scaling would fill
in a sparse row's zeros; a topic's or a remote file's rows are not read before the run).

A regression target far from unit scale (elevators) needs ``--scale-target 01`` as well, and
scaled features alone made elevators worse (1.13 -> 1.58 x the running mean's MSE). A scaled
target is not undone in the outputs (predictions and losses are in its units), so it is never
automatic: such a run keeps its features as they are and prints one hint naming both flags.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from kernelstream import data, fs
from kernelstream.data import check as data_check
from kernelstream.data import widths
from kernelstream.data.options import ReadOptions
from kernelstream.pipelines.config import is_topic

AUTO = "auto"
HEAD_ROWS = 1000  # the replay's up-front check reads as many (``replay_args._PRECHECK_RECORDS``)


def _head_options(args: argparse.Namespace, src: str) -> ReadOptions | None:
    """How the head of ``src`` is read (unscaled), or None when auto looks at nothing."""
    if is_topic(src) or args.stream != "none" or args.rows == "sparse":
        return None
    try:
        path = str(data.embedded_path(src))
    except KeyError:
        path = src
    if fs.is_remote(path) or not fs.exists(path):
        return None  # a remote file is not read up front; a missing one is reported later
    return ReadOptions(path=path, fmt=args.format, n_features=args.n_features,
                       label_column=_column(args.label_column), delimiter=args.delimiter,
                       header=args.header, key_by=_column(args.key_by),
                       hash_features=args.hash_features, rows=args.rows)


def _column(value: str | None) -> int | str | None:
    """A column option as the replay reads it: a position when it is a number, else a name."""
    return int(value) if value is not None and value.lstrip("-").isdigit() else value


def _head(opts: ReadOptions, task: str) -> data_check.CheckReport | None:
    try:
        report = data_check.check_file(replace(opts, task=task), max_records=HEAD_ROWS)
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
