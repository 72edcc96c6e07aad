"""`kernelstream report` on reproduction results: the PASS / FAIL counts are the verdicts each
paper's markdown states (its own ``judged`` rule), whatever the table's shape."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernelstream.errors import ReportError
from kernelstream.pipelines.cli import main
from kernelstream.report.reproduce import ResultFile, ResultTable, load_results

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _load(name: str) -> ResultFile:
    return load_results(str(RESULTS / name), name)


def _tables(res: ResultFile) -> dict[str, ResultTable]:
    return {t.title: t for t in res.tables}


def _total(res: ResultFile) -> tuple[int, int]:
    return (sum(t.passed for t in res.tables),
            sum(t.passed + t.failed for t in res.tables))


def _md_counts(name: str, pattern: str) -> list[tuple[int, int]]:
    md = (RESULTS / name).read_text()
    return [(int(a), int(b)) for a, b in re.findall(pattern, md)]


def test_counts_are_the_papers_verdicts() -> None:
    p0 = _load("p0.json")
    assert [(_total(p0))] == _md_counts("p0.md", r"OKS-SIL passed (\d+)/(\d+)") == [(6, 6)]
    cells = _tables(p0)["cells"]
    assert (cells.passed, cells.failed, cells.unjudged) == (6, 0, 29)
    p2 = _load("p2.json")
    assert [_total(p2)] == _md_counts("p2.md", r"Verdict rows passed: (\d+)/(\d+)") == [(28, 28)]
    p3 = _tables(_load("p3.json"))
    ka, adv = _md_counts("p3.md", r"\*\*(\d+)/(\d+) PASS\*\*")
    assert (p3["table_p3_3"].passed, p3["table_p3_3"].passed + p3["table_p3_3"].failed) == ka
    assert p3["table_p3_3"].unjudged == 6  # the online and lsokl widths
    assert (p3["table_p3_4"].passed, p3["table_p3_4"].passed + p3["table_p3_4"].failed) == adv
    assert p3["table_p3_4"].unjudged == 16  # german-η SkeGD, FOGD and NOGD
    assert [_total(_load("p4.json"))] == _md_counts("p4.md", r"Passed (\d+)/(\d+) judged")
    assert [_total(_load("baselines.json"))] == _md_counts("baselines.md",
                                                           r"Passed (\d+)/(\d+) cells")


def test_p2_verdict_is_a_flag_and_unjudged_marks_say_so() -> None:
    t = _tables(_load("p2.json"))["cells: table 2"]
    col, passed = t.columns.index("verdict"), t.columns.index("passed")
    assert passed == 0  # the wide tables' verdict first, on screen
    assert {r[col].text for r in t.rows} == {"yes", "no"}
    # the rows that do not decide: their mark, but not judged (bank8FM's verdict rows too)
    marks = {(r[col].text, r[passed].text) for r in t.rows}
    assert ("no", "PASS (not judged)") in marks and ("yes", "PASS") in marks


def _subset(tmp_path: Path) -> Path:
    """A p3.json as `reproduce p3 --tables p3-3 --datasets german` writes it: every row the
    same verdict, two tables empty."""
    doc = json.loads((RESULTS / "p3.json").read_text())
    doc["table_p3_3"] = [c for c in doc["table_p3_3"] if c["dataset"] == "german"]
    assert len(doc["table_p3_3"]) == 2 and all(c["passed"] for c in doc["table_p3_3"])
    doc["table_p3_4"], doc["table_p3_2"] = [], []
    path = tmp_path / "p3.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_shared_verdict_is_still_counted(tmp_path: Path) -> None:
    res = load_results(str(_subset(tmp_path)), "p3.json")
    (t,) = res.tables
    assert (t.passed, t.failed, t.unjudged) == (1, 0, 1)
    # the verdict column stays: the judged and the unjudged row differ
    assert "passed" in t.columns
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "p3.json"), "--out", str(out)]) == 0
    page = out.read_text()
    assert "table_p3_3 (2 rows) — <span class=pass>1 PASS</span>" in page
    assert "p3: passed 1/1 judged rows" in page
    # the tables the subset did not run: "none", not a blank value
    assert "<td>table_p3_4</td><td>none</td>" in page
    assert "<td>table_p3_2</td><td>none</td>" in page


@pytest.mark.parametrize("judged", [True, False])
def test_every_row_passing_keeps_its_count(tmp_path: Path, judged: bool) -> None:
    # a file of no paper: every row's mark counts, even when it is the same in every row
    doc = {"cells": [{"dataset": d, "mistake_mean": m, "passed": judged}
                     for d, m in (("german", 25.0), ("a9a", 16.0))]}
    path = tmp_path / "other.json"
    path.write_text(json.dumps(doc))
    (t,) = load_results(str(path), "other.json").tables
    assert (t.passed, t.failed) == ((2, 0) if judged else (0, 2))
    assert ("passed", "PASS" if judged else "FAIL") in t.constant


def test_a_papers_file_without_its_paper_field_is_an_error(tmp_path: Path) -> None:
    # its verdict counts follow the paper's rule: without the field they would not
    doc = json.loads((RESULTS / "p3.json").read_text())
    del doc["paper"]
    path = tmp_path / "p3.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ReportError, match=r'p3\.json: no "paper" field.*reproduce p3'):
        load_results(str(path), "p3.json")
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**doc, "generated_by": "kernelstream reproduce p3"}))
    with pytest.raises(ReportError, match="reproduce p3"):
        load_results(str(path), "mine.json")
