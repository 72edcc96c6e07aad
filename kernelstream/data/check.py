"""What a replay would see in a data set, in one fast pass: rows, width, non-zeros per row,
label classes and dead-letter reasons (``kernelstream check``), and the verdict that stops a
run which would only look successful (an empty or binary file, continuous labels in a
classification run, most rows rejected)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kernelstream.data.errors import BadLines, ParseError
from kernelstream.data.errors import reason_kind as reason_kind  # its former home
from kernelstream.data.labels import class_key
from kernelstream.data.options import ReadOptions

_BINARY = ("binary garbage", "undecodable bytes", "corrupt compressed file")


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
            **({"rows_as": self.rows_as} if self.rows_as is not None else {}),
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
        yield f"  labels        {len(self.labels)} distinct: {classes}{more}"
        yield f"  dead letters  {self.dead.total}"
        for k, v in d["dead_letters"].items():
            yield f"    {k}: {v['count']} (first at line {v['first_line']})"
        if self.truncated:
            yield "  (stopped early: --limit)"


def scan(items: Iterable[tuple[int, str, Any]], report: CheckReport,
         max_records: int | None = None) -> CheckReport:
    """Fold ``(line, text, ParsedRow | ParseError)`` items into ``report``; rows of a third
    class (classification) and non-numeric targets (regression) count as the dead letters they
    would be in a replay."""
    classes: list[float | str] = []
    for line, _text, row in items:
        if max_records is not None and report.records >= max_records:
            report.truncated = True
            break
        if not isinstance(row, ParseError):
            err = _label_error(row.label, report.task, classes)
            if err is not None:
                row = ParseError(err, None, line)
        if isinstance(row, ParseError):
            report.dead.add(ParseError(row.reason, row.path, line))  # at the item's line
            continue
        nnz = int((row.vals != 0).sum()) if row.idx is None else len(row.idx)
        width = len(row.vals) if row.idx is None else (int(row.idx[-1]) if len(row.idx) else 0)
        if report.rows == 0:
            report.nnz_min = report.nnz_max = nnz
        report.nnz_min, report.nnz_max = min(report.nnz_min, nnz), max(report.nnz_max, nnz)
        report.nnz_sum += nnz
        report.width = max(report.width, width)
        report.rows += 1
        tok = row.label.strip()
        report.labels[tok] = report.labels.get(tok, 0) + 1
    return report


def _label_error(tok: str, task: str, classes: list[float | str]) -> str | None:
    if task == "regression":
        try:
            float(tok)
        except ValueError:
            return f"non-numeric label {tok.strip()!r}"
        return None
    k = class_key(tok)
    if k in classes:
        return None
    if len(classes) < 2:
        classes.append(k)
        return None
    return "unknown label (a third class)"


def verdict(report: CheckReport) -> str | None:
    """One line naming what makes the data unfit for the run and the likely fix, or None."""
    n = report.records
    dead = n - report.rows
    if n == 0:
        return f"{report.source}: no data lines (an empty file?)"
    binary = sum(report.dead.counts.get(k, 0) for k in _BINARY)
    if binary * 2 > n:
        return (f"{report.source}: not a {report.fmt} text file ({binary} of {n} lines are "
                "binary or not UTF-8): check the file or --format")
    if report.fmt == "csv" and report.rows and report.width == 0:
        return (f"{report.source}: every row has a single column: wrong delimiter? "
                "(give --delimiter, or --format)")
    if report.task == "classification":
        numeric = [class_key(t) for t in report.labels]
        floats = [v for v in numeric if isinstance(v, float)]
        third = report.dead.counts.get("unknown label", 0)
        third_line = report.dead.first_line.get("unknown label", 0)
        distinct = len(report.labels) + (1 if third else 0)
        if third * 2 > n and floats and any(v != int(v) for v in floats):
            return (f"{report.source}: the labels look continuous ({third} of {n} rows "
                    f"would be rejected as a third class, e.g. at line {third_line}): "
                    "use --task regression")
        if third * 2 > n:
            return (f"{report.source}: more than two label classes ({third} of {n} rows "
                    f"are a third class, first at line {third_line}): use --task regression or "
                    f"name the positive class with --positive-label (distinct so far: "
                    f"{distinct})")
    if dead * 2 > n:
        kind, count = max(report.dead.counts.items(), key=lambda kv: kv[1])
        line = report.dead.first_line[kind]
        return (f"{report.source}: {dead} of {n} records would be rejected (most: {kind!r}, "
                f"{count} times, first at line {line}): check --format, --delimiter, --task "
                "or --positive-label")
    return None


def check_file(opts: ReadOptions, max_records: int | None = None) -> CheckReport:
    """Scan a file (LIBSVM, CSV, Parquet; gzip/bz2/xz) with the replay's own row reader."""
    from kernelstream.data.rows import iter_file_rows  # the pipelines' reader

    report = CheckReport(opts.path, opts.resolved_fmt(), opts.task)
    return scan(iter_file_rows(opts), report, max_records or opts.limit)


def check_topic(opts: ReadOptions, idle_seconds: float = 2.0,
                client: tuple[tuple[str, str], ...] = ()) -> CheckReport:
    """Scan a Kafka topic (``opts.path`` is ``kafka://HOST:PORT/TOPIC``) from its start to the
    end offsets of now, as a replay would parse its messages."""
    from kernelstream.kafka_client import (
        KafkaReadOptions,
        KafkaTopic,
        iter_topic_records,
        snapshot_ends,
        text_format_for,
    )

    tf = text_format_for(opts)
    kopts = snapshot_ends(KafkaReadOptions(KafkaTopic.parse(opts.path),
                                           idle_seconds=idle_seconds, client=client))

    def items() -> Iterator[tuple[int, str, Any]]:
        for rec in iter_topic_records(kopts, merge=True):
            text, row = tf.parse(rec.offset, rec.value or b"")
            if row is None:
                row = ParseError("no example in the message (a comment line)", None, rec.offset)
            yield rec.offset, text, row

    report = CheckReport(opts.path, tf.fmt, opts.task)
    return scan(items(), report, opts.limit)
