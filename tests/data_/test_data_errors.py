"""The error policy of the data layer: ``ErrorPolicy`` (raise or collect) and ``BadLines``, which
applies it and counts what it collects; the readers that take it."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from _helpers import write

from kernelstream import data
from kernelstream.data import (
    BadLines,
    ErrorPolicy,
    LabelMap,
    ParseError,
    iter_csv_records,
    iter_libsvm_records,
    iter_records,
    load,
)
from kernelstream.data import check as data_check


def test_collect_counts_by_reason_kind_with_first_line() -> None:
    bad = BadLines()
    assert bad.policy is ErrorPolicy.COLLECT and not bad and bad.total == 0
    errs = [ParseError("bad value 'x' at index 3", "f", 4),
            ParseError("empty field in column 2", "f", 7),
            ParseError("bad value '?' at index 1", "f", 9)]
    assert [bad.add(e) for e in errs] == errs  # handed back unchanged
    assert bad and bad.total == 3
    # the kind is the reason's leading phrase (reason_kind, as ``kernelstream check`` shows it)
    assert bad.counts == {"bad value": 2, "empty field in column 2": 1}
    assert bad.first_line == {"bad value": 4, "empty field in column 2": 7}
    assert bad.to_dict() == {"bad value": {"count": 2, "first_line": 4},
                             "empty field in column 2": {"count": 1, "first_line": 7}}


def test_raise_raises_the_located_error_alone() -> None:
    bad = BadLines(ErrorPolicy.RAISE)
    err = ParseError("empty label in column 3", "f.csv", 5)
    try:
        raise KeyError("while handling something else")
    except KeyError:
        with pytest.raises(ParseError) as ei:
            bad.add(err)
    assert ei.value is err and str(ei.value) == "f.csv:5: empty label in column 3"
    assert ei.value.__suppress_context__  # as the readers' "raise ... from None"
    assert not bad  # nothing collected


def test_policy_values_and_coercion() -> None:
    assert ErrorPolicy("raise") is ErrorPolicy.RAISE and ErrorPolicy.COLLECT == "collect"
    assert BadLines("raise").policy is ErrorPolicy.RAISE  # type: ignore[arg-type]
    mine = BadLines()
    assert BadLines.of(mine) is mine and BadLines.of(ErrorPolicy.RAISE).policy == "raise"
    with pytest.raises(ValueError):
        ErrorPolicy("ignore")
    assert pickle.loads(pickle.dumps(ErrorPolicy.COLLECT)) is ErrorPolicy.COLLECT
    assert data.ErrorPolicy is ErrorPolicy and "BadLines" in data.__all__


CSV = "f1,f2,y\n1,2,a\n3,x,b\n\n5,6,b\n7,,a\n8,9,c\n"


def test_iterators_collect_by_default_and_count(tmp_path: Path) -> None:
    p = write(tmp_path / "r.csv", CSV)
    bad = BadLines()
    recs = list(iter_records(p, label_map=LabelMap("a", "b"), errors=bad))
    assert [r[0] for r in recs] == [2, 3, 5, 6, 7]
    assert bad.to_dict() == {"empty field in column 1": {"count": 1, "first_line": 6},
                             "non-numeric value": {"count": 1, "first_line": 3},
                             "unknown label": {"count": 1, "first_line": 7}}
    errs = [r[2] for r in recs if isinstance(r[2], ParseError)]
    assert [(e.path, e.line) for e in errs] == [(str(p), 3), (str(p), 6), (str(p), 7)]
    # the same bad lines without a collector, from the format's own iterator
    assert [r[0] for r in iter_csv_records(p) if isinstance(r[2], ParseError)] == [3, 6]


def test_raise_policy_raises_what_load_raises(tmp_path: Path) -> None:
    p = write(tmp_path / "r.csv", CSV)
    with pytest.raises(ParseError) as from_load:
        load(p)
    for records in (iter_records(p, errors=ErrorPolicy.RAISE),
                    iter_csv_records(p, errors=ErrorPolicy.RAISE)):
        with pytest.raises(ParseError) as from_iter:
            list(records)
        assert str(from_iter.value) == str(from_load.value)
    # columns counted from 0, as --label-column counts them
    assert str(from_load.value) == f"{p}:3: non-numeric value 'x' in column 1"
    # the policy applies to the records within the limit only
    assert len(list(iter_records(p, limit=1, errors=ErrorPolicy.RAISE))) == 1
    assert load(p, limit=1, positive_label="a")[0].tolist() == [[1, 2]]


def test_libsvm_iterator_and_loader_share_the_line_rules(tmp_path: Path) -> None:
    p = write(tmp_path / "d.svm", b"+1 1:1\n# c\n\n-1 2:x\n+1 0:1\n\xff\n")
    bad = BadLines()
    recs = list(iter_libsvm_records(p, errors=bad))
    assert [r[0] for r in recs] == [1, 4, 5, 6]
    assert bad.counts == {"bad value": 1, "non-positive index 0": 1, "undecodable bytes": 1}
    with pytest.raises(ParseError) as ei:
        list(iter_libsvm_records(p, errors=ErrorPolicy.RAISE))
    with pytest.raises(ParseError) as from_load:
        load(p)
    assert str(ei.value) == str(from_load.value) == f"{p}:4: bad value 'x' at index 2"


def test_check_report_collects_dead_letters(tmp_path: Path) -> None:
    p = write(tmp_path / "d.svm", "+1 1:1\n-1 2:x\n+1 3:y\n-1 0:1\n+1 1:2\n")
    rep = data_check.check_file(data.ReadOptions(str(p)))
    assert isinstance(rep.dead, BadLines) and rep.dead.policy is ErrorPolicy.COLLECT
    assert rep.records == 5 and rep.rows == 2 and rep.dead.total == 3
    assert rep.to_dict()["dead_letters"] == {"bad value": {"count": 2, "first_line": 2},
                                             "non-positive index 0": {"count": 1,
                                                                      "first_line": 4}}
    assert "most: 'bad value', 2 times, first at line 2" in (data_check.verdict(rep) or "")
