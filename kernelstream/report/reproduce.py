"""Reproduction results (the JSON written beside ``benchmarks/results/*.md`` by the
``reproduce`` scripts) as tables.

The files differ from paper to paper, so they are read by shape, not by name: every list of
records at the top level becomes a table (split by its ``table`` or ``group`` field when it
has one), a mapping of records becomes a table with the keys as first column, and the
remaining top-level values are the file's settings (all there is in a file without
records, such as a benchmark's medians). Cells show numbers to four significant
digits, parameter mappings as ``key=value``, per-run lists as their count, and ``passed`` as
PASS / FAIL.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from kernelstream.errors import ReportError

SPLIT_BY = ("table", "group")
VERDICTS = ("passed", "verdict")
LONG_LIST = 6  # longer lists of numbers are summarised


@dataclass
class TableCell:
    text: str
    css: str = ""


@dataclass
class ResultTable:
    title: str
    columns: list[str]
    rows: list[list[TableCell]]
    constant: list[tuple[str, str]] = field(default_factory=list)  # same in every row
    passed: int = 0
    failed: int = 0


@dataclass
class ResultFile:
    label: str
    path: str
    settings: list[tuple[str, str]]
    tables: list[ResultTable]


def _num(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    return f"{v:.4g}" if v != int(v) or abs(v) >= 1e6 else f"{int(v)}"


def fmt(v: Any, key: str = "") -> TableCell:
    """A value as a table cell."""
    if v is None:
        return TableCell("–")
    if isinstance(v, bool):
        if key in VERDICTS:
            return TableCell("PASS", "pass") if v else TableCell("FAIL", "fail")
        return TableCell("yes" if v else "no")
    if isinstance(v, int):
        return TableCell(str(v))
    if isinstance(v, float):
        return TableCell(_num(v))
    if isinstance(v, dict):
        return TableCell(", ".join(f"{k}={fmt(x).text}" for k, x in v.items()), "params")
    if isinstance(v, list):
        if v and all(isinstance(x, dict) for x in v):
            return TableCell(f"{len(v)} runs" if key == "runs" else f"{len(v)} records")
        if all(isinstance(x, int | float) and not isinstance(x, bool) for x in v):
            if len(v) > LONG_LIST:
                mean = sum(v) / len(v)
                return TableCell(f"{len(v)} values, mean {_num(float(mean))}")
            return TableCell(", ".join(fmt(x).text for x in v))
        return TableCell(", ".join(fmt(x).text for x in v[:LONG_LIST])
                    + (", …" if len(v) > LONG_LIST else ""))
    return TableCell(str(v))


def _records_table(title: str, records: list[dict[str, Any]],
                   drop: str | None = None) -> ResultTable:
    columns = list(dict.fromkeys(k for r in records for k in r if k != drop))
    constant = []
    if len(records) > 1:
        for c in list(columns):
            vals = [json.dumps(r.get(c), sort_keys=True) for r in records]
            if len(set(vals)) == 1:
                constant.append((c, fmt(records[0].get(c), c).text))
                columns.remove(c)
    rows = [[fmt(r.get(c), c) for c in columns] for r in records]
    table = ResultTable(title, columns, rows, constant)
    for c in VERDICTS:
        if c in columns:
            verdicts = [r.get(c) for r in records]
            table.passed = sum(v is True for v in verdicts)
            table.failed = sum(v is False for v in verdicts)
            break
    return table


def _tables(name: str, value: Any) -> list[ResultTable]:
    if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
        split = next((k for k in SPLIT_BY if all(k in r for r in value)), None)
        if split is None:
            return [_records_table(name, value)]
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in value:
            groups.setdefault(str(r[split]), []).append(r)
        return [_records_table(f"{name}: {split} {g}", rs, drop=split)
                for g, rs in groups.items()]
    if (isinstance(value, dict) and value
            and all(isinstance(r, dict) for r in value.values())):
        records = [{"name": k, **r} for k, r in value.items()]
        return [_records_table(name, records)]
    return []


def load_results(path: str, label: str) -> ResultFile:
    """Read a reproduction's JSON results."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: not a reproduction result (a JSON object is expected)")
    settings, tables = [], []
    for k, v in doc.items():
        found = _tables(k, v)
        if found:
            tables += found
        else:
            text = fmt(v, k).text
            settings.append((k, text if len(text) <= 300 else text[:300] + " …"))
    return ResultFile(label or os.path.basename(path), path, settings, tables)
