"""What a replay would see in a data set, in one fast pass: rows, width, non-zeros per row,
label classes and dead-letter reasons (``kernelstream check``), and the verdict that stops a
run which would only look successful (an empty or binary file, continuous labels in a
classification run, most rows rejected)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernelstream import kafka_client
from kernelstream.data.errors import BadLines, ParseError
from kernelstream.data.errors import reason_kind as reason_kind  # its former home
from kernelstream.data.label_hint import csv_hint
from kernelstream.data.labels import LabelMap, class_key, nonfinite_label
from kernelstream.data.libsvm import check_top_index
from kernelstream.data.options import Ranges, ReadOptions
from kernelstream.data.rows import iter_file_rows  # the pipelines' reader
from kernelstream.data.scaling import KERNEL_MAX, learnable_rows

MISSING_KEY = "missing key-by value"  # the reason kind of a row without its --key-by value
_BINARY = ("binary garbage", "undecodable bytes", "corrupt compressed file")
# the features whose ranges a check keeps (3 numbers each): wider data is sparse text or
# hashed indices, which are never min-max scaled
RANGE_FEATURES = 1 << 16


@dataclass
class CheckReport:
    """The counts of one pass. ``dead`` collects the dead letters (count and first line per
    reason kind)."""

    source: str
    fmt: str
    task: str
    rows: int = 0
    width: int = 0
    nnz_min: int = 0
    nnz_max: int = 0
    nnz_sum: int = 0
    labels: dict[str, int] = field(default_factory=dict)
    dead: BadLines = field(default_factory=BadLines)
    truncated: bool = False  # stopped at max_records
    rows_as: str | None = None  # "sparse" (CSR) or "dense": how a replay would hand rows over
    # per feature (0-based): smallest and largest value written, rows that write it (a sparse
    # row's missing feature is a 0, counted in by ``ranges``); the targets (regression)
    lo: np.ndarray = field(default_factory=lambda: np.zeros(0))
    hi: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    targets: list[float] = field(default_factory=list)
    # per feature: the sum and the sum of squares of the values written (the spreads)
    total: np.ndarray = field(default_factory=lambda: np.zeros(0))
    total_sq: np.ndarray = field(default_factory=lambda: np.zeros(0))
    keyed: bool = False  # --key-by: the entities of the rows are counted
    # rows every learner refuses (‖x‖² over KERNEL_MAX or not finite): counted in ``rows``
    # (they parse), left out of the feature statistics (one value near 1e308 says nothing of
    # the others' scale)
    refused: int = 0
    entities: set[str] = field(default_factory=set)
    read: ReadOptions | None = None  # a file's read options (label_hint looks at its columns)

    def add_values(self, cols: np.ndarray, vals: np.ndarray) -> None:
        """Fold one row's non-zeros (0-based columns, unique) into the feature ranges (of the
        first :data:`RANGE_FEATURES` features: memory stays bounded on any width)."""
        if len(cols) and int(cols.max()) >= RANGE_FEATURES:
            keep = cols < RANGE_FEATURES
            cols, vals = cols[keep], vals[keep]
        if len(cols) and int(cols.max()) >= len(self.lo):
            n = max(int(cols.max()) + 1, 2 * len(self.lo))
            self.lo = np.concatenate([self.lo, np.full(n - len(self.lo), np.inf)])
            self.hi = np.concatenate([self.hi, np.full(n - len(self.hi), -np.inf)])
            self.seen = np.concatenate([self.seen, np.zeros(n - len(self.seen), np.int64)])
        if len(self.total) < len(self.lo):
            pad = np.zeros(len(self.lo) - len(self.total))
            self.total = np.concatenate([self.total, pad])
            self.total_sq = np.concatenate([self.total_sq, pad])
        self.lo[cols] = np.minimum(self.lo[cols], vals)
        self.hi[cols] = np.maximum(self.hi[cols], vals)
        self.seen[cols] += 1
        self.total[cols] += vals
        self.total_sq[cols] += vals * vals

    @property
    def stat_rows(self) -> int:
        """The rows the feature statistics (ranges, spreads) are over."""
        return self.rows - self.refused

    def spreads(self) -> np.ndarray:
        """The standard deviation of each of the ``width`` features (at most
        :data:`RANGE_FEATURES`) over the rows scanned, the zeros a row leaves out included."""
        w = min(self.width, RANGE_FEATURES)
        out = np.zeros(w)
        n = self.stat_rows
        if not n:
            return out
        k = min(w, len(self.total))
        with np.errstate(over="ignore", invalid="ignore"):  # values near 1e308: an inf spread
            mean = self.total[:k] / n
            var = self.total_sq[:k] / n - mean * mean
        out[:k] = np.sqrt(np.maximum(np.where(np.isnan(var), np.inf, var), 0.0))
        return out

    def ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(min, max)`` of each of the ``width`` features (at most :data:`RANGE_FEATURES`)
        over the rows scanned, the zeros a row leaves out included (a feature never written
        is 0)."""
        w = min(self.width, RANGE_FEATURES)
        if not self.stat_rows:
            return np.zeros(w), np.zeros(w)
        lo, hi, seen = self.lo[:w], self.hi[:w], self.seen[:w]
        pad = w - len(lo)
        lo = np.concatenate([lo, np.zeros(pad)]) if pad > 0 else lo
        hi = np.concatenate([hi, np.zeros(pad)]) if pad > 0 else hi
        seen = np.concatenate([seen, np.zeros(pad, np.int64)]) if pad > 0 else seen
        gaps = seen < self.stat_rows  # some rows leave it out: a 0 there
        return (np.where(gaps, np.minimum(lo, 0.0), lo),
                np.where(gaps, np.maximum(hi, 0.0), hi))

    def feature_summary(self) -> dict[str, Any] | None:
        """The spread of the feature ranges (the first :data:`RANGE_FEATURES` features): the
        smallest and largest value, the narrowest and widest range (max - min) of the features
        that vary, and how many are constant."""
        if not self.stat_rows or not self.width:
            return None
        lo, hi = self.ranges()
        span = hi - lo
        varying = span[span > 0]
        return {"min": float(lo.min()), "max": float(hi.max()),
                "narrowest_range": float(varying.min()) if len(varying) else 0.0,
                "widest_range": float(varying.max()) if len(varying) else 0.0,
                "widest_feature": int(np.argmax(span)) + 1 if len(varying) else None,
                "constant": int((span == 0).sum()), "spread_ratio": spread_ratio(self),
                **({"rows_left_out": self.refused} if self.refused else {})}

    def target_summary(self) -> dict[str, float] | None:
        """min, max, mean and standard deviation of a regression target."""
        if not self.targets:
            return None
        t = np.asarray(self.targets)
        with np.errstate(over="ignore", invalid="ignore"):  # a huge target: its std is inf
            return {"min": float(t.min()), "max": float(t.max()), "mean": float(t.mean()),
                    "std": float(t.std())}

    @property
    def records(self) -> int:
        return self.rows + self.dead.total

    @property
    def nnz_mean(self) -> float:
        return self.nnz_sum / self.rows if self.rows else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "format": self.fmt, "task": self.task,
            "records": self.records, "rows": self.rows, "width": self.width,
            "nnz_per_row": {"min": self.nnz_min, "mean": round(self.nnz_mean, 3),
                            "max": self.nnz_max},
            "labels": dict(sorted(self.labels.items(), key=lambda kv: -kv[1])),
            "dead_letters": self.dead.to_dict(),
            "truncated": self.truncated,
            **({"entities": len(self.entities),
                "missing_keys": self.dead.counts.get(MISSING_KEY, 0)} if self.keyed else {}),
            **({"rows_as": self.rows_as} if self.rows_as is not None else {}),
            "features": self.feature_summary(),
            **({"target": self.target_summary()} if self.task == "regression" else {}),
            "hint": scaling_hint(self),
        }

    def lines(self) -> Iterator[str]:
        """The report as text."""
        d = self.to_dict()
        yield f"{self.source}: {self.fmt}, {self.records} records"
        yield f"  rows          {self.rows}"
        yield f"  width         {self.width}" + (f" ({self.rows_as} rows)" if self.rows_as
                                                       else "")
        nz = d["nnz_per_row"]
        yield f"  non-zeros/row min {nz['min']}, mean {nz['mean']}, max {nz['max']}"
        classes = ", ".join(f"{k}: {v}" for k, v in list(d["labels"].items())[:10])
        more = f" (+{len(self.labels) - 10} more)" if len(self.labels) > 10 else ""
        yield f"  labels        {len(self.labels)} distinct: {classes or 'none'}{more}"
        if self.keyed:
            yield (f"  entities      {len(self.entities)} (--key-by); rows without a key: "
                   f"{self.dead.counts.get(MISSING_KEY, 0)}")
        f = d["features"]
        if f is not None:
            widest = f"feature {f['widest_feature']}" if f["widest_feature"] else "-"
            yield (f"  features      values {f['min']:.4g} .. {f['max']:.4g}; ranges "
                   f"{f['narrowest_range']:.4g} .. {f['widest_range']:.4g} (widest: "
                   f"{widest}); {f['constant']} constant")
            if self.refused:
                yield (f"                ({self.refused} row{'s' if self.refused != 1 else ''} "
                       f"left out: squared norm over {KERNEL_MAX:g} or not finite, which "
                       "every learner refuses)")
            if f["spread_ratio"] is not None and self.rows_as != "sparse":
                # what --scale auto decides by, beside its threshold
                yield (f"                standard deviations: the widest {f['spread_ratio']:.3g}x "
                       f"the median (--scale auto scales over {SPREAD_RATIO:g}x)")
        t = d.get("target")
        if t is not None:
            yield (f"  target        {t['min']:.4g} .. {t['max']:.4g}, mean {t['mean']:.4g}, "
                   f"std {t['std']:.4g}")
        yield f"  dead letters  {self.dead.total}"
        for k, v in d["dead_letters"].items():
            yield f"    {k}: {v['count']} (first at line {v['first_line']})"
        if self.truncated:
            yield "  (stopped early: --limit)"
        if d["hint"] is not None:
            yield f"hint: {d['hint']}"


def scan(items: Iterable[tuple[int, str, Any]], report: CheckReport,
         max_records: int | None = None, n_features: int | None = None,
         max_rows: int | None = None) -> CheckReport:
    """Fold ``(line, text, ParsedRow | ParseError)`` items into ``report``; rows of a third
    class (classification), non-numeric or non-finite targets (regression) and LIBSVM rows
    with an index over ``n_features`` count as the dead letters they would be in a replay.
    Stops after ``max_records`` records or ``max_rows`` rows (a replay's ``--limit``: its
    examples, the dead letters among them not counted)."""
    classes: list[float | str] = []
    names: dict[float | str, str] = {}
    for line, _text, row in items:
        if ((max_records is not None and report.records >= max_records)
                or (max_rows is not None and report.rows >= max_rows)):
            report.truncated = True
            break
        if not isinstance(row, ParseError):
            err = _label_error(row.label, report.task, classes)
            if err is None and row.idx is not None:
                try:  # the replay's rule (engine.replay.sources)
                    check_top_index(row.idx, n_features)
                except ParseError as e:
                    err = e.reason
            if err is not None:
                row = ParseError(err, None, line)
        if isinstance(row, ParseError):
            report.dead.add(ParseError(row.reason, row.path, line))  # at the item's line
            continue
        nnz = int((row.vals != 0).sum()) if row.idx is None else len(row.idx)
        vals = np.asarray(row.vals, np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            xx = float(np.dot(vals, vals))
        if not xx <= KERNEL_MAX:  # a dead letter of every learner: no part of the statistics
            report.refused += 1
        elif row.idx is None:
            cols = np.flatnonzero(vals)
            report.add_values(cols, vals[cols])
        else:
            report.add_values(np.asarray(row.idx, np.int64) - 1, vals)
        if report.task == "regression":
            report.targets.append(float(row.label))
        width = len(row.vals) if row.idx is None else (int(row.idx[-1]) if len(row.idx) else 0)
        if report.rows == 0:
            report.nnz_min = report.nnz_max = nnz
        report.nnz_min, report.nnz_max = min(report.nnz_min, nnz), max(report.nnz_max, nnz)
        report.nnz_sum += nnz
        report.width = max(report.width, width)
        report.rows += 1
        if row.entity is not None:
            report.entities.add(row.entity)
        # by value, as the replay maps them (1 and 1.0 are one class), shown as first written
        name = names.setdefault(class_key(row.label), row.label.strip())
        report.labels[name] = report.labels.get(name, 0) + 1
    return report


def _label_error(tok: str, task: str, classes: list[float | str]) -> str | None:
    if task == "regression" or nonfinite_label(tok):
        try:
            LabelMap.regression()(tok)  # the replay's own rule (non-numeric, non-finite)
        except ParseError as e:
            return e.reason
        return None
    k = class_key(tok)
    if k in classes:
        return None
    if len(classes) < 2:
        classes.append(k)
        return None
    return "unknown label (a third class)"


@dataclass(frozen=True)
class Verdict:
    """What makes the data unfit for the run (:func:`diagnose`): the line naming it and the
    likely fix (``text``), and the task the labels ask for when the fix is to read them as
    another (``task``; None: the task is not the problem)."""

    text: str
    task: str | None = None


def verdict(report: CheckReport) -> str | None:
    """One line naming what makes the data unfit for the run and the likely fix, or None."""
    found = diagnose(report)
    return None if found is None else found.text


def diagnose(report: CheckReport) -> Verdict | None:
    """:func:`verdict` with the task the labels ask for (:class:`Verdict`), or None."""
    n = report.records
    dead = n - report.rows
    if n == 0:
        return Verdict(f"{report.source}: no data lines (an empty file?)")
    binary = sum(report.dead.counts.get(k, 0) for k in _BINARY)
    if binary * 2 > n:
        return Verdict(f"{report.source}: not a {report.fmt} text file ({binary} of {n} lines "
                       "are binary or not UTF-8): check the file or --format")
    if report.fmt == "csv" and report.rows and report.width == 0:
        return Verdict(f"{report.source}: every row has a single column: wrong delimiter? "
                       "(give --delimiter, or --format)")
    if report.task == "classification":
        numeric = [class_key(t) for t in report.labels]
        floats = [v for v in numeric if isinstance(v, float)]
        third = report.dead.counts.get("unknown label", 0)
        third_line = report.dead.first_line.get("unknown label", 0)
        distinct = len(report.labels) + (1 if third else 0)
        hint = _column_hint(report) if third * 2 > n else ""
        if third * 2 > n and floats and any(v != int(v) for v in floats):
            return Verdict(f"{report.source}: the labels look continuous ({third} of {n} "
                           f"rows would be rejected as a third class, e.g. at line "
                           f"{third_line}): use --task regression{hint}", task="regression")
        if third * 2 > n:
            # replay learns two classes (the live stream's --positive-label is one against
            # the rest; replay's only names which of two is +1)
            fix = ("use --task regression if they are numbers on a scale" if
                   len(floats) == len(numeric) else "replay learns two classes: map the "
                   "file's labels to two")
            return Verdict(f"{report.source}: more than two label classes ({third} of {n} "
                           f"rows are a third class, first at line {third_line}; distinct so "
                           f"far: {distinct}): {fix}{hint}")
    if dead * 2 > n:
        kind, count = max(report.dead.counts.items(), key=lambda kv: kv[1])
        line = report.dead.first_line[kind]
        fix = {"index exceeds n_features": "check --n-features",
               "compressed file ends early": "the file is cut short: fetch or write it again",
               "qid tokens are not supported": "remove the qid:N tokens from the file",
               }.get(kind, "")
        if not fix:
            generic = "check --format, --delimiter, --task or --positive-label"
            hint = _column_hint(report).removeprefix("; or ")
            fix = f"{hint}, or {generic}" if hint else generic
        if kind.startswith("empty label") and count == n:
            # a trailing delimiter on each line: an empty last column, read as the label
            fix = ("the label column is empty in every row: a delimiter at the end of each "
                   "line? strip it, or give --label-column")
        return Verdict(f"{report.source}: {dead} of {n} records would be rejected (most: "
                       f"{kind!r}, {count} times, first at line {line}): {fix}")
    return None


def all_rejected_line(source: str, read: int, rejected: Mapping[str, int], flags: str,
                      what: str = "records") -> str:
    """The refusal of a head of ``read`` records that would all be dead letters (a topic's,
    a stream's first read), by their most common reason (``rejected``: count by reason; a
    reason that names its record, e.g. its key, is once each: the first is said)."""
    reason, k = max(rejected.items(), key=lambda kv: kv[1])
    most = f"most: {reason!r}, {k:,} times" if k > 1 else f"the first: {reason!r}"
    return (f"{source}: {sum(rejected.values()):,} of {read:,} {what} would be rejected "
            f"({most}): check {flags}")


def _column_hint(report: CheckReport) -> str:
    """``"; or COLUMN HINT"`` (:func:`label_hint.csv_hint`) for a CSV file, else ``""``."""
    hint = None if report.read is None else csv_hint(report.read, report.task)
    return "" if hint is None else f"; or {hint}"


# When to scale (check's hint; the default --scale auto of replay and tune applies it): the
# widest feature's standard deviation this many times the median one (features that vary), or
# a regression target whose standard deviation is this far from 1 either way. Measured on the
# first 1000 rows of the shared sets (benchmarks/results/defaults.md): the scaled ones are
# german.numer 52.9, spambase 2,480, covtype 4,850, elevators 4,870, where --scale 01 cut the
# default's mistakes (spambase 34.5 % -> 12.1 %, covtype 39.7 % -> 30.0 %); every other set is
# at most 10.8 (bank8FM; bank32nh 5.4, madelon 6.0; scaled, binary and one-hot sets 1 .. 3),
# and bank8FM and bank32nh are where scaling made the MSE worse. Spreads, not the min-max
# ranges of before (threshold 100): one row moves a range, so german.numer (range ratio 121)
# went unscaled with one all-zero row added (ratio 74) or one truncated line in a 200-row copy
# (104 -> 63), and lost 3 pp; its spread ratio stays at 51-53 under either.
SPREAD_RATIO = 25.0
TARGET_STD_FACTOR = 20.0


@dataclass(frozen=True)
class ScalingAdvice:
    """What the rows scanned ask for: min-max scaling of the features (``features``) and/or of a
    regression target (``target``), and why (one phrase each)."""

    features: bool = False
    target: bool = False
    why: tuple[str, ...] = ()

    @property
    def flags(self) -> tuple[str, ...]:
        return (("--scale 01",) if self.features else ()) + (
            ("--scale-target 01",) if self.target else ())


def scaling_advice(report: CheckReport, scale: str = "none",
                   scale_target: str = "none") -> ScalingAdvice:
    """The scaling the scanned rows ask for: the features when the rows are dense and their
    standard deviations differ by over :data:`SPREAD_RATIO` times, a regression target whose
    spread is outside ``1/TARGET_STD_FACTOR .. TARGET_STD_FACTOR``. A Gaussian kernel's
    distances are dominated by the widest features, and a learner starting from f = 0 takes
    long to reach a target of a tiny or huge scale. Sparse rows are never min-max scaled (it
    would fill in their zeros). ``scale``/``scale_target``: the run's own options (one already
    given is not advised)."""
    if not report.rows or not report.width:
        return ScalingAdvice()
    features = target = False
    why: list[str] = []
    ratio = spread_ratio(report)
    if scale == "none" and report.rows_as != "sparse" and ratio is not None:
        if ratio > SPREAD_RATIO:
            lo, hi = report.ranges()
            widest = int(np.argmax(report.spreads()))
            features = True
            why.append(f"feature spreads (standard deviations) differ by {ratio:.3g}x "
                       f"(widest: feature {widest + 1}, {lo[widest]:.4g} .. {hi[widest]:.4g})")
    t = report.target_summary()
    if t is not None and scale_target == "none" and t["std"] > 0 and not (
            1 / TARGET_STD_FACTOR <= t["std"] <= TARGET_STD_FACTOR):
        target = True
        why.append(f"the target's standard deviation is {t['std']:.3g}")
    return ScalingAdvice(features, target, tuple(why))


def spread_ratio(report: CheckReport) -> float | None:
    """The widest feature's standard deviation over the median one of the features that vary
    (:func:`scaling_advice` compares it with :data:`SPREAD_RATIO`); None for fewer than two
    such features."""
    sd = report.spreads()
    varying = sd[sd > 0]
    if len(varying) < 2:
        return None
    return float(varying.max() / np.median(varying))


def head_ranges(X: np.ndarray, report: CheckReport | None = None,
                ) -> tuple[Ranges | None, str | None]:
    """``--scale auto`` of data read once (a Kafka topic's replay, a live stream) from its
    first rows ``X`` (dense, as the learners get them): ``((lo, hi) of each column of X,
    why)`` when :func:`scaling_advice` asks for the features to be scaled, else
    ``(None, None)``. The rule is judged on ``report`` (the rows scanned as a file's check
    scans them), or on ``X`` itself when None (a stream's rows are parsed by its own
    router). Fewer than two rows: nothing to judge."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 2:
        # rows every learner refuses (‖x‖² over KERNEL_MAX) say nothing of the others' ranges
        X = X[learnable_rows(X)]
    if X.ndim != 2 or X.shape[0] < 2:
        return None, None
    lo, hi = X.min(axis=0), X.max(axis=0)
    if report is None:
        n, d = X.shape
        with np.errstate(over="ignore"):  # a column's sum of squares may still overflow
            report = CheckReport("", "", "classification", rows=n, width=d, lo=lo, hi=hi,
                                 seen=np.full(d, n, np.int64), total=X.sum(axis=0),
                                 total_sq=(X * X).sum(axis=0))
    report.rows_as = "dense"
    # the target is left as it is (no --scale-target): the features are advised alone
    advice = scaling_advice(report, "none", scale_target="01")
    if not advice.features:
        return None, None
    return (tuple(lo.tolist()), tuple(hi.tolist())), advice.why[0]


def scaling_hint(report: CheckReport, scale: str = "none",
                 scale_target: str = "none") -> str | None:
    """:func:`scaling_advice` as one line naming the flags, or None (``check``'s hint; a
    ``replay`` or ``tune`` applies it itself with the default ``--scale auto``)."""
    advice = scaling_advice(report, scale, scale_target)
    if not advice.flags:
        return None
    why = "; ".join(advice.why)
    if advice.target:
        # not --scale-target 01: min-max scaling did worse than the default standardising on
        # all three shared regression sets (docs/which-learner.md, benchmarks defaults.md)
        feats = "min-max scale such features (--scale auto) and " if advice.features else ""
        return (f"{why}: keep replay and tune's defaults, which {feats}standardise the target "
                "(--scale-target auto); --scale-target 01 did worse on the shared regression "
                "sets")
    return (f"{why}: a Gaussian kernel may do better with {' '.join(advice.flags)} (replay "
            "and tune apply it by default: --scale auto)")


def check_file(opts: ReadOptions, max_records: int | None = None) -> CheckReport:
    """Scan a file (LIBSVM, CSV, Parquet; gzip/bz2/xz) with the replay's own row reader."""
    report = CheckReport(opts.path, opts.resolved_fmt(), opts.task,
                         keyed=opts.key_by is not None, read=opts)
    # ``check --limit``: a replay's (rows); the callers' own ``max_records`` bound the head
    limit = opts.limit if max_records is None else None
    return scan(iter_file_rows(opts), report, max_records, opts.n_features, limit)


def check_topic(opts: ReadOptions, idle_seconds: float = 2.0,
                client: tuple[tuple[str, str], ...] = ()) -> CheckReport:
    """Scan a Kafka topic (``opts.path`` is ``kafka://HOST:PORT/TOPIC``) from its start to the
    end offsets of now, as a replay would parse its messages."""
    tf = kafka_client.text_format_for(opts)
    topic = kafka_client.KafkaTopic.parse(opts.path)
    kopts = kafka_client.snapshot_ends(
        kafka_client.KafkaReadOptions(topic, idle_seconds=idle_seconds, client=client))

    def items() -> Iterator[tuple[int, str, Any]]:
        for rec in kafka_client.iter_topic_records(kopts, merge=True):
            text, row = tf.parse(rec.offset, rec.value or b"")
            if row is None:
                row = ParseError("no example in the message (a comment line)", None, rec.offset)
            yield rec.offset, text, row

    report = CheckReport(opts.path, tf.fmt, opts.task)
    return scan(items(), report, None, opts.n_features, opts.limit)
