"""Reproduction results (the JSON written beside ``benchmarks/results/*.md`` by the
``reproduce`` scripts) as tables.

The files differ from paper to paper, so they are read by shape, not by name: every list of
records at the top level becomes a table (split by its ``table`` or ``group`` field when it
has one), a mapping of records becomes a table with the keys as first column, and the
remaining top-level values are the file's settings (all there is in a file without
records, such as a benchmark's medians). Cells show numbers to four significant
digits, parameter mappings as ``key=value``, per-run lists as their count, and ``passed`` as
PASS / FAIL.

A paper's results (``PAPER.json`` of ``kernelstream reproduce``) are judged by the paper's own
rule (``experiments.protocol.judged_rule``): the counts are the verdicts its ``PAPER.md``
states, and a row the rule does not judge shows its mark as "not judged". Other files count
every row's ``passed``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelstream.errors import ReportError
from kernelstream.experiments.protocol import PAPERS, Judged, judged_rule
from kernelstream.experiments.report import results_paper

SPLIT_BY = ("table", "group")
VERDICT = "passed"  # a row's PASS / FAIL (p2's "verdict" is a flag: this row decides)
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
    passed: int = 0  # of the judged rows
    failed: int = 0
    unjudged: int = 0  # rows with a PASS / FAIL mark their paper does not count


@dataclass
class ResultFile:
    label: str
    path: str
    settings: list[tuple[str, str]]
    tables: list[ResultTable]
    paper: str | None = None  # the paper whose rule judged the rows


def _num(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    return f"{v:.4g}" if v != int(v) or abs(v) >= 1e6 else f"{int(v)}"


def fmt(v: Any, key: str = "") -> TableCell:
    """A value as a table cell."""
    if v is None:
        return TableCell("–")
    if isinstance(v, bool):
        if key == VERDICT:
            return TableCell("PASS", "pass") if v else TableCell("FAIL", "fail")
        return TableCell("yes" if v else "no")
    if isinstance(v, list | dict) and not v:
        return TableCell("none")  # e.g. a table a subset run left empty
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


def _cell(r: dict[str, Any], c: str, judged: bool) -> TableCell:
    cell = fmt(r.get(c), c)
    if c == VERDICT and isinstance(r.get(c), bool) and not judged:
        return TableCell(f"{cell.text} (not judged)", "unjudged")
    return cell


def _records_table(title: str, records: list[dict[str, Any]], drop: str | None = None,
                   judged: Callable[[dict[str, Any]], bool] | None = None) -> ResultTable:
    """``judged``: the rows the verdict counts (None: every row with a mark)."""
    columns = list(dict.fromkeys(k for r in records for k in r if k != drop))
    judge = [judged is None or judged(r) for r in records]
    cells = {c: [_cell(r, c, j) for r, j in zip(records, judge, strict=True)] for c in columns}
    constant = []
    if len(records) > 1:
        for c in list(columns):
            vals = {json.dumps(r.get(c), sort_keys=True) for r in records}
            if len(vals) == 1 and len({x.text for x in cells[c]}) == 1:
                constant.append((c, cells[c][0].text))
                columns.remove(c)
    if VERDICT in columns:  # first: the tables are wide, and it is what they are read for
        columns.insert(0, columns.pop(columns.index(VERDICT)))
    rows = [[cells[c][i] for c in columns] for i in range(len(records))]
    table = ResultTable(title, columns, rows, constant)
    # counted over the records, not the columns shown: a verdict shared by every row is a
    # constant column, and still the count
    marks = [(r.get(VERDICT), j) for r, j in zip(records, judge, strict=True)]
    table.passed = sum(v is True and j for v, j in marks)
    table.failed = sum(v is False and j for v, j in marks)
    table.unjudged = sum(isinstance(v, bool) and not j for v, j in marks)
    return table


def _tables(name: str, value: Any, rule: Judged | None = None) -> list[ResultTable]:
    judged = None if rule is None else (lambda r: rule(name, r))
    if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
        split = next((k for k in SPLIT_BY if all(k in r for r in value)), None)
        if split is None:
            return [_records_table(name, value, judged=judged)]
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in value:
            groups.setdefault(str(r[split]), []).append(r)
        return [_records_table(f"{name}: {split} {g}", rs, drop=split, judged=judged)
                for g, rs in groups.items()]
    if (isinstance(value, dict) and value
            and all(isinstance(r, dict) for r in value.values())):
        records = [{"name": k, **r} for k, r in value.items()]
        return [_records_table(name, records, judged=judged)]
    return []


# the fields by which a results file says where it came from (every file of
# benchmarks/results has one)
PROVENANCE = frozenset({"paper", "generated", "generated_by", "machine", "provenance"})


def paper_of(path: str, doc: dict[str, Any]) -> str | None:
    """The paper a results file is from: its ``paper`` field
    (:func:`~kernelstream.experiments.report.results_paper`, as ``reproduce --compare``
    tells them); None for other files. A file that looks like a paper's (named
    ``PAPER.json``, or its ``generated_by`` naming ``kernelstream reproduce``) without the
    field is a :class:`ReportError`: its counts would not be the paper's verdicts."""
    held = results_paper(doc)
    if held is not None:
        return held
    stem = os.path.splitext(os.path.basename(path))[0]
    by = str(doc.get("generated_by") or "").split()
    if stem in PAPERS or by[:2] == ["kernelstream", "reproduce"]:
        raise ReportError(f"{path}: no \"paper\" field, which every results file of "
                          "`kernelstream reproduce` has: regenerate it with `kernelstream "
                          f"reproduce {stem if stem in PAPERS else by[-1]}`")
    return None


def load_results(path: str, label: str) -> ResultFile:
    """Read a reproduction's JSON results."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: not a reproduction result (a JSON object is expected)")
    paper = paper_of(path, doc)
    rule = None if paper is None else judged_rule(paper)
    settings, tables = [], []
    for k, v in doc.items():
        found = _tables(k, v, rule)
        if found:
            tables += found
        else:
            text = fmt(v, k).text
            settings.append((k, text if len(text) <= 300 else text[:300] + " …"))
    if not tables and not PROVENANCE & set(doc):
        # any JSON object would otherwise make a page of its keys, rc 0
        raise ReportError(f"{path}: not a results file of `kernelstream reproduce` or the "
                          "benchmarks (no table, no paper/machine/generated field), nor a "
                          "run's summary.json")
    return ResultFile(label or os.path.basename(path), path, settings, tables, paper)
