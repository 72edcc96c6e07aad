"""Tests of kernelstream.data: line parsers, label maps, file loading, scaling, embedded data."""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
import json
import lzma
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from _helpers import write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelstream import data
from kernelstream.data import (
    Example,
    LabelMap,
    ParseError,
    densify,
    embedded_dataset_info,
    embedded_datasets,
    fit_minmax,
    infer_format,
    iter_csv_records,
    iter_libsvm_records,
    iter_records,
    load,
    load_dataset,
    parse_csv_line,
    parse_libsvm_line,
    scale_minmax,
)

# --------------------------------------------------------------------------------------------
# ParseError


def test_parse_error_message_and_attributes():
    e = ParseError("bad token 'x'", "a/b.txt", 7)
    assert str(e) == "a/b.txt:7: bad token 'x'"
    assert (e.reason, e.path, e.line) == ("bad token 'x'", "a/b.txt", 7)
    assert isinstance(e, ValueError)
    assert str(ParseError("empty line")) == "empty line"


def test_parse_error_located_and_pickle():
    e = ParseError("empty line").located("f.svm", 3)
    assert str(e) == "f.svm:3: empty line"
    # an existing location wins (the innermost reader knows best)
    assert e.located("other", 9).line == 3
    back = pickle.loads(pickle.dumps(e))
    assert (back.reason, back.path, back.line) == ("empty line", "f.svm", 3)
    assert str(back) == str(e)


# --------------------------------------------------------------------------------------------
# LIBSVM line parser


def test_parse_libsvm_line_basic():
    label, idx, val = parse_libsvm_line("+1 1:0.5 3:-2 10:1e-3")
    assert label == "+1"
    assert idx.dtype == np.int64 and val.dtype == np.float64
    assert idx.tolist() == [1, 3, 10]
    assert val.tolist() == [0.5, -2.0, 1e-3]


@pytest.mark.parametrize(
    "line",
    ["-1 2:1 4:2 # a comment", "-1\t2:1\t4:2\r\n", "  -1 2:1  4:2  ", "-1 4:2 2:1"],
)
def test_parse_libsvm_line_whitespace_comment_unsorted(line):
    label, idx, val = parse_libsvm_line(line)
    assert label == "-1"
    assert idx.tolist() == [2, 4]  # unsorted input comes out sorted, values follow
    assert val.tolist() == [1.0, 2.0]


def test_parse_libsvm_line_label_only_is_all_zero_example():
    label, idx, val = parse_libsvm_line("-1")
    assert label == "-1" and idx.size == 0 and val.size == 0


MALFORMED_LIBSVM = [
    ("", "empty line"),
    ("   \t ", "empty line"),
    ("# just a comment", "empty line"),
    ("1:0.5 2:1", "missing label"),
    ("+1 1:0.5 3", "bad token"),
    ("+1 1:", "bad token"),
    ("+1 :5", "bad token"),
    ("+1 1:2:3", "bad token"),
    ("+1 a:1", "non-integer index"),
    ("+1 1.5:1", "non-integer index"),
    ("+1 1_0:1", "non-integer index"),
    ("+1 0:1", "non-positive index"),
    ("+1 -3:1", "non-positive index"),
    ("+1 99999999999:1", "index too large"),
    ("+1 1234567890123456789012345:1", "index too large"),
    ("+1 1:abc", "bad value"),
    ("+1 1:1_0", "bad value"),
    ("+1 1:0x10", "bad value"),
    ("+1 1:\u0661", "bad value"),  # an Arabic-Indic digit: float() takes it, LIBSVM does not
    ("+1 1:nan", "non-finite value"),
    ("+1 1:-inf", "non-finite value"),
    ("+1 1:1e400", "non-finite value"),
    ("+1 1:1 2:2 1:3", "duplicate index"),
    ("+1 2:1 2:1", "duplicate index"),
    ("\x00\x01\x02\x03", "binary garbage"),
    ("+1 1:1\x00", "binary garbage"),
    ("+1\x1c1:1", "binary garbage"),
]


@pytest.mark.parametrize(("line", "reason"), MALFORMED_LIBSVM)
def test_parse_libsvm_line_malformed(line, reason):
    with pytest.raises(ParseError) as ei:
        parse_libsvm_line(line)
    assert ei.value.reason.startswith(reason), ei.value.reason
    assert ei.value.path is None and ei.value.line is None


def test_parse_libsvm_line_duplicate_names_the_index():
    with pytest.raises(ParseError, match="duplicate index 7"):
        parse_libsvm_line("1 7:1 3:1 7:2")


# --------------------------------------------------------------------------------------------
# CSV line parser


def test_parse_csv_line_basic():
    label, x = parse_csv_line("1.5,-2,3e2,g", -1)
    assert label == "g" and x.tolist() == [1.5, -2.0, 300.0] and x.dtype == np.float64
    label, x = parse_csv_line("h;1;2", 0, ";")
    assert label == "h" and x.tolist() == [1.0, 2.0]
    label, x = parse_csv_line(" 1  2\t3 ", -1, None)  # whitespace-delimited
    assert label == "3" and x.tolist() == [1.0, 2.0]
    label, x = parse_csv_line('1,2,"g"\r\n', -1, n_columns=3)
    assert label == "g" and x.tolist() == [1.0, 2.0]


MALFORMED_CSV = [
    ("", "empty line"),
    ("1,2,3,g", "wrong number of columns"),
    ("1,g", "wrong number of columns"),
    ("1,,g", "empty field"),
    ("1,?,g", "non-numeric value"),
    ("1,1_0,g", "non-numeric value"),
    ("1,nan,g", "non-finite value"),
    ("1,inf,g", "non-finite value"),
    ("1,2,", "empty label"),
    ("1,2\x00,g", "binary garbage"),
]


@pytest.mark.parametrize(("line", "reason"), MALFORMED_CSV)
def test_parse_csv_line_malformed(line, reason):
    with pytest.raises(ParseError) as ei:
        parse_csv_line(line, -1, ",", n_columns=3)
    assert ei.value.reason.startswith(reason), ei.value.reason


def test_parse_csv_line_error_names_original_column():
    # the column of the line (not of the features), from 0 as --label-column counts: it said
    # "column 3" here, one more than the --label-column that names it
    with pytest.raises(ParseError, match="column 2"):
        parse_csv_line("g,1,x,2", 0)
    with pytest.raises(ParseError, match="empty label in column 0"):
        parse_csv_line(",1,2,2", 0)


# --------------------------------------------------------------------------------------------
# densify


def test_densify():
    x = densify(np.array([1, 4]), np.array([2.0, -1.0]), 5)
    assert x.tolist() == [2.0, 0.0, 0.0, -1.0, 0.0]
    assert densify([], [], 3).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ParseError, match="index exceeds n_features"):
        densify([1, 6], [1.0, 1.0], 5)


# --------------------------------------------------------------------------------------------
# Labels


@pytest.mark.parametrize(
    ("labels", "negative", "positive"),
    [
        (["-1", "+1"], "-1", "+1"),
        (["+1", "-1"], "-1", "+1"),
        (["0", "1"], "0", "1"),
        (["1", "0"], "0", "1"),
        (["1", "2"], "1", "2"),
        (["2", "1", "2"], "1", "2"),
        (["g", "h"], "g", "h"),
        (["h", "g"], "g", "h"),
        (["2", "10"], "2", "10"),  # numeric order, not string order
    ],
)
def test_label_map_two_classes(labels, negative, positive):
    m = LabelMap.from_labels(labels)
    assert m.classes == (negative, positive)
    assert m(negative) == -1.0 and m(positive) == 1.0
    assert m.map_many(labels).tolist() == [1.0 if t == positive else -1.0 for t in labels]


def test_label_map_positive_label_override_and_numeric_spellings():
    m = LabelMap.from_labels(["g", "h"], positive_label="g")
    assert (m("g"), m("h")) == (1.0, -1.0)
    m = LabelMap.from_labels(["-1", "+1"], positive_label="-1")
    assert (m("-1"), m("+1")) == (1.0, -1.0)
    m = LabelMap.from_labels(["0", "1"])
    assert m("1.0") == m("+1") == m(" 1 ") == 1.0 and m("0.0") == -1.0
    with pytest.raises(ValueError, match="positive_label"):
        LabelMap.from_labels(["0", "1"], positive_label="2")


def test_label_map_third_label_is_named():
    with pytest.raises(ParseError, match="third distinct label 'x'") as ei:
        LabelMap.from_labels(["a", "b", "a", "x", "b"])
    assert ei.value.reason.startswith("third distinct label")
    # "+1" and "1" are one class, so this is only two classes
    assert LabelMap.from_labels(["+1", "1", "-1"]).classes == ("-1", "+1")


def test_label_map_unknown_label_and_single_class():
    m = LabelMap("0", "1")
    with pytest.raises(ParseError, match="unknown label '2'"):
        m("2")
    assert LabelMap.from_labels(["+1", "+1"]).classes == (None, "+1")
    assert LabelMap.from_labels(["0"]).classes == ("0", None)
    assert LabelMap.from_labels(["g"], positive_label="h").classes == ("g", "h")
    with pytest.raises(ValueError, match="only one label"):
        LabelMap.from_labels(["2"])  # 1/2 or 2/4? cannot tell
    with pytest.raises(ValueError):
        LabelMap("1", "+1")



def test_run_positive_label_is_the_files_map_for_a_one_class_prefix(tmp_path: Path) -> None:
    """``--limit``/``--sample`` rows of one class map as the whole file's (its +1 class); a
    file of one string class, or a --positive-label that is none of its labels, is a
    one-line ConfigError before any run (they used to fail inside the pipeline, or map every
    row to -1)."""
    from kernelstream.data.label_mix import run_positive_label
    from kernelstream.data.options import ReadOptions
    from kernelstream.errors import ConfigError

    f = write(tmp_path / "sorted.csv", "".join(f"{i},{i % 7},{'g' if i < 60 else 'h'}\n"
                                              for i in range(100)))

    def decide(path: Path = f, **kw: object) -> str | None:
        return run_positive_label(ReadOptions(path=str(path), **kw))  # type: ignore[arg-type]

    assert decide(limit=30) == "h"  # g rows only: the file's map (h is +1)
    assert decide() is None and decide(limit=80) is None  # the rows read hold both
    assert run_positive_label(ReadOptions(path=str(f)), whole_file=True) == "h"
    assert decide(limit=30, positive_label="g") == "g"
    assert decide(limit=30, task="regression") is None
    with pytest.raises(ConfigError, match=r"--positive-label 'G' is not among the file's "
                       r"labels: 'g', 'h'; did you mean 'g'\?"):
        decide(limit=30, positive_label="G")
    one = write(tmp_path / "one.csv", "1,2,g\n3,4,g\n")
    with pytest.raises(ConfigError, match=r"only one label \('g'\) in the file.*"
                       "--positive-label g"):
        decide(one)
    with pytest.raises(ConfigError, match="only one label"):
        decide(one, limit=1)
    assert decide(one, positive_label="h") == "h"  # a file of negatives: valid
    # an empty label is a dead letter, never a class (labels.never_a_class): not the third
    # label of 'no' and 'yes' (a false refusal before)
    blank = write(tmp_path / "blank.csv", "1,2,\n3,4,no\n5,6,yes\n7,8,no\n")
    assert decide(blank, positive_label="yes") == "yes"
    neg = write(tmp_path / "neg.libsvm", "-1 1:0.5\n-1 2:1\n")
    assert decide(neg) is None  # -1 alone is a class the map can place
    cod = write(tmp_path / "cod.libsvm", "-1 1:1\n-1 1:2\n+1 1:3\n")
    assert decide(cod, limit=2) == "+1"  # the same y as before: -1 stays -1
    assert load(cod, limit=2, positive_label="+1")[1].tolist() == [-1, -1]

def test_label_map_serialisation_and_regression():
    m = LabelMap.from_labels(["h", "g"])
    d = json.loads(json.dumps(m.to_dict()))
    assert LabelMap.from_dict(d) == m
    assert LabelMap.from_dict(json.loads(m.to_json()))("h") == 1.0
    assert pickle.loads(pickle.dumps(m))("g") == -1.0
    r = LabelMap.regression()
    assert r("0.25") == 0.25 and LabelMap.from_dict(r.to_dict()) == r
    with pytest.raises(ParseError, match="non-numeric label"):
        r("abc")
    with pytest.raises(ParseError, match="non-finite label"):
        r("nan")


# --------------------------------------------------------------------------------------------
# LIBSVM files

GOOD_LIBSVM = "+1 1:0.5 3:1\n-1 2:2\n"


@pytest.mark.parametrize(("line", "reason"), [c for c in MALFORMED_LIBSVM if c[1] != "empty line"])
@pytest.mark.parametrize("with_comment", [False, True])
def test_load_libsvm_reports_file_and_line(tmp_path, line, reason, with_comment):
    # blank line 3 keeps physical numbering honest; the bad line is line 4. A comment on
    # line 1 sends the whole file through the exact per-line parser instead of the fast path.
    head = "+1 1:0.5 3:1 # ok\n" if with_comment else "+1 1:0.5 3:1\n"
    p = write(tmp_path / "bad.svm", head + "-1 2:2\n\n" + line + "\n-1 1:1\n")
    with pytest.raises(ParseError) as ei:
        load(p)
    e = ei.value
    assert (e.path, e.line) == (str(p), 4), str(e)
    assert e.reason.startswith(reason), e.reason
    assert str(e).startswith(f"{p}:4: ")


@pytest.mark.parametrize("bad", [b"\xff\xfe\x00garbage", b"-1 1:\xe9", b"\x89PNG\r\n\x1a"])
def test_load_libsvm_binary_garbage(tmp_path, bad):
    p = write(tmp_path / "bin.svm", GOOD_LIBSVM.encode() + bad + b"\n+1 1:1\n")
    with pytest.raises(ParseError) as ei:
        load(p)
    assert ei.value.line == 3
    assert ei.value.reason.startswith(("undecodable bytes", "binary garbage"))


def test_load_libsvm_basic_crlf_no_trailing_newline(tmp_path):
    text = "+1 1:0.5 3:1\r\n-1 2:2 \r\n\r\n-1\r\n+1 3:-1"
    X, y = load(write(tmp_path / "a.svm", text))
    assert X.dtype == np.float64 and X.flags.c_contiguous
    assert X.tolist() == [[0.5, 0, 1], [0, 2, 0], [0, 0, 0], [0, 0, -1]]
    assert y.tolist() == [1, -1, -1, 1]


def test_load_libsvm_n_features(tmp_path):
    p = write(tmp_path / "a.svm", GOOD_LIBSVM)
    assert load(p, n_features=5)[0].shape == (2, 5)
    with pytest.raises(ParseError) as ei:
        load(p, n_features=2)
    assert ei.value.line == 1 and ei.value.reason.startswith("index exceeds n_features")
    # a label-only file has no features unless told
    assert load(write(tmp_path / "b.svm", "1\n0\n"))[0].shape == (2, 0)


def test_load_libsvm_unsorted_rows(tmp_path):
    X, _ = load(write(tmp_path / "u.svm", "1 3:3 1:1\n0 2:2 1:1 4:4\n"))
    assert X.tolist() == [[1, 0, 3, 0], [1, 2, 0, 4]]


def test_load_libsvm_labels(tmp_path):
    p = write(tmp_path / "t.svm", "2 1:1\n1 1:2\n2 1:3\n")
    assert load(p)[1].tolist() == [1, -1, 1]
    assert load(p, positive_label="1")[1].tolist() == [-1, 1, -1]
    assert load(p, label_map=LabelMap("2", "1"))[1].tolist() == [-1, 1, -1]
    p3 = write(tmp_path / "t3.svm", "2 1:1\n1 1:2\n\n3 1:3\n1 1:1\n")
    with pytest.raises(ParseError, match="third distinct label '3'") as ei:
        load(p3)
    assert ei.value.line == 4
    with pytest.raises(ParseError, match="unknown label '3'") as ei:
        load(p3, label_map=LabelMap("1", "2"))
    assert ei.value.line == 4
    pr = write(tmp_path / "r.svm", "0.5 1:1\n-2.25 1:2\n")
    assert load(pr, task="regression")[1].tolist() == [0.5, -2.25]
    with pytest.raises(ParseError, match="non-numeric label") as ei:
        load(write(tmp_path / "r2.svm", "0.5 1:1\nx 1:2\n"), task="regression")
    assert ei.value.line == 2


def test_load_empty_file(tmp_path):
    X, y = load(write(tmp_path / "e.svm", ""))
    assert X.shape == (0, 0) and y.shape == (0,)
    X, y = load(write(tmp_path / "e2.svm", "\n\n"), n_features=3)
    assert X.shape == (0, 3)


def test_load_limit(tmp_path):
    p = write(tmp_path / "l.svm", "\n# header comment\n1 1:1\n\n0 2:1\n1 3:1\nthis is not libsvm\n")
    X, y = load(p, limit=2)
    assert X.tolist() == [[1, 0], [0, 1]] and y.tolist() == [1, -1]
    assert load(p, limit=0)[0].shape[0] == 0
    with pytest.raises(ParseError) as ei:
        load(p, limit=4)
    assert ei.value.line == 7


@pytest.mark.parametrize(
    ("suffix", "compress"),
    [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress), ("", gzip.compress)],
)
def test_compressed_round_trip(tmp_path, suffix, compress):
    text = "+1 1:0.5 3:1\n-1 2:2\n-1 1:-1 2:1e-3 3:7"
    plain = load(write(tmp_path / "plain.svm", text))
    p = write(tmp_path / f"packed.svm{suffix}", compress(text.encode()))  # "" = no hint in name
    X, y = load(p)
    assert np.array_equal(X, plain[0]) and np.array_equal(y, plain[1])
    assert np.array_equal(load(p, limit=2)[0], plain[0][:2])
    recs = list(iter_libsvm_records(p))
    assert [r[0] for r in recs] == [1, 2, 3]


def test_corrupt_gzip(tmp_path):
    good = gzip.compress(("+1 1:1\n" * 2000).encode())
    p = write(tmp_path / "c.svm.gz", good[: len(good) // 2])
    with pytest.raises(ParseError, match="corrupt compressed file"):
        load(p)
    recs = list(iter_libsvm_records(p))  # no exception: the stream ends with the error
    assert isinstance(recs[-1][2], ParseError)
    assert recs[-1][2].reason.startswith("corrupt compressed file")


# --------------------------------------------------------------------------------------------
# Record iterators


def test_iter_libsvm_records_routes_bad_lines(tmp_path):
    raw = b"+1 1:1\n\xff\xfe\xfd\n\n+1 1:1 1:2\n\x00\x00\x00\n# c\n-1 2:1\r\nnot:ok 1:1"
    p = write(tmp_path / "mixed.svm", raw)
    recs = list(iter_libsvm_records(p))
    assert [r[0] for r in recs] == [1, 2, 4, 5, 7, 8]
    kinds = [r[2].reason.split(" ")[0] if isinstance(r[2], ParseError) else "ok" for r in recs]
    assert kinds == ["ok", "undecodable", "duplicate", "binary", "ok", "missing"]
    bad = recs[1][2]
    assert (bad.path, bad.line) == (str(p), 2)
    assert recs[4][1] == "-1 2:1"  # raw text has no line ending
    assert recs[4][2][0] == "-1" and recs[4][2][1].tolist() == [2]


def test_iter_records_examples(tmp_path):
    p = write(tmp_path / "s.svm", "1 1:1\n0 3:2\n1 9:1\n2 1:1\n")
    recs = list(iter_records(p, n_features=3, label_map=LabelMap("0", "1")))
    assert isinstance(recs[0][2], Example)
    assert recs[0][2].y == 1.0 and recs[0][2].x.tolist() == [1, 0, 0]
    assert recs[1][2].y == -1.0 and recs[1][2].label == "0"
    assert recs[2][2].reason.startswith("index exceeds n_features") and recs[2][2].line == 3
    assert recs[3][2].reason.startswith("unknown label") and recs[3][2].line == 4
    assert len(list(iter_records(p, n_features=3, limit=2))) == 2
    assert np.isnan(next(iter_records(p, n_features=3))[2].y)
    with pytest.raises(ValueError, match="n_features"):
        iter_records(p)


# --------------------------------------------------------------------------------------------
# CSV files


def test_csv_without_header_gh_labels_crlf(tmp_path):
    # g/h labels are non-numeric but the row is data: header detection looks at features only
    text = "1.5,2,g\r\n3,4.25,h\r\n\r\n5,6,g"
    p = write(tmp_path / "m.data", text)
    assert infer_format(p) == "csv"
    X, y = load(p)
    assert X.tolist() == [[1.5, 2], [3, 4.25], [5, 6]]
    assert y.tolist() == [-1, 1, -1]  # h sorts second -> +1
    assert load(p, positive_label="g")[1].tolist() == [1, -1, 1]


def test_csv_with_header(tmp_path):
    p = write(tmp_path / "h.csv", "a,b,is_x\n0.5,1,1\n0,0,0\n")
    X, y = load(p)
    assert X.tolist() == [[0.5, 1], [0, 0]] and y.tolist() == [1, -1]
    X, y = load(p, label_column="a", task="regression")
    assert X.tolist() == [[1, 1], [0, 0]] and y.tolist() == [0.5, 0]
    # all-numeric header cannot be detected; header=True says so
    p2 = write(tmp_path / "n.csv", "1,2,3\n0.5,1,1\n0,0,0\n")
    assert load(p2, header=True)[0].shape == (2, 2)
    with pytest.raises(ValueError, match="no column named"):
        load(p, label_column="zzz")


def test_csv_label_first_and_delimiters(tmp_path):
    p = write(tmp_path / "s.csv", "1;0.5;2\n0;1.5;3\n")
    X, y = load(p, label_column=0)
    assert X.tolist() == [[0.5, 2], [1.5, 3]] and y.tolist() == [1, -1]
    p = write(tmp_path / "t.tsv", "0.5\t2\t1\n1.5\t3\t0\n")
    assert load(p)[0].tolist() == [[0.5, 2], [1.5, 3]]
    p = write(tmp_path / "w.txt", "1 0.5 2\n0 1.5 3\n")
    X, _ = load(p, fmt="csv", label_column=0)
    assert X.tolist() == [[0.5, 2], [1.5, 3]]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("1,2", "wrong number of columns"),
        ("1,2,3,g", "wrong number of columns"),
        ("1,?,g", "non-numeric value"),
        ("1,,g", "empty field"),
        ("1,inf,g", "non-finite value"),
        ("1,2,k", "third distinct label"),
    ],
)
def test_csv_errors_name_line(tmp_path, bad, reason):
    p = write(tmp_path / "e.csv", f"x,y,cls\n1,2,g\n\n3,4,h\n{bad}\n5,6,g")
    with pytest.raises(ParseError) as ei:
        load(p)
    assert ei.value.line == 5 and ei.value.path == str(p)
    assert ei.value.reason.startswith(reason), ei.value.reason


def test_csv_limit_and_records(tmp_path):
    p = write(tmp_path / "r.csv", "f1,f2,label\n1,2,a\n3,x,b\n5,6,b\n")
    X, y = load(p, limit=1, positive_label="a")
    assert X.tolist() == [[1, 2]] and y.tolist() == [1]
    recs = list(iter_csv_records(p))
    assert [r[0] for r in recs] == [2, 3, 4]
    assert isinstance(recs[1][2], ParseError) and recs[1][2].line == 3
    ex = list(iter_records(p, label_map=LabelMap("a", "b")))
    assert ex[2][2].y == 1.0 and ex[2][2].x.tolist() == [5, 6]


# --------------------------------------------------------------------------------------------
# Parquet


def test_parquet_round_trip(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.table(
        {
            "f_float": pa.array([0.5, 1.5, -2.0, 3.0]),
            "id": pa.array(["a", "b", "c", "d"]),  # non-numeric: not a feature
            "label": pa.array(["g", "h", "h", "g"]),
            "f_int": pa.array([1, 2, 3, 4], type=pa.int32()),
        }
    )
    p = tmp_path / "t.parquet"
    pq.write_table(table, p, row_group_size=3)  # two row groups
    assert infer_format(p) == "parquet"
    X, y = load(p)
    assert X.tolist() == [[0.5, 1], [1.5, 2], [-2, 3], [3, 4]]
    assert X.flags.c_contiguous and X.dtype == np.float64
    assert y.tolist() == [-1, 1, 1, -1]
    assert load(p, limit=2)[0].shape == (2, 2)
    assert load(p, scale="01")[0][:, 0].tolist() == [0.5, 0.7, 0.0, 1.0]
    X, y = load(p, label_column="f_int", task="regression")
    assert y.tolist() == [1, 2, 3, 4] and X.shape == (4, 1)
    p2 = tmp_path / "noext"  # found by its magic bytes
    p2.write_bytes(p.read_bytes())
    assert infer_format(p2) == "parquet"
    recs = list(iter_records(p, label_map=LabelMap("g", "h")))
    assert [r[0] for r in recs] == [1, 2, 3, 4] and recs[1][2].y == 1.0


def test_parquet_bad_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    p = tmp_path / "n.parquet"
    pq.write_table(pa.table({"x": [1.0, None, 3.0], "label": [0, 1, 1]}), p)
    with pytest.raises(ParseError, match="missing value") as ei:
        load(p)
    assert ei.value.line == 2
    pq.write_table(pa.table({"x": [1.0, 2.0, float("nan")], "label": [0, 1, 1]}), p)
    with pytest.raises(ParseError, match="non-finite") as ei:
        load(p)
    assert ei.value.line == 3
    recs = list(iter_records(p))
    assert isinstance(recs[2][2], ParseError) and recs[2][2].line == 3
    pq.write_table(pa.table({"x": [1.0], "y": [1]}), p)
    with pytest.raises(ValueError, match="no label column"):
        load(p)


# --------------------------------------------------------------------------------------------
# Scaling


def test_scaling_ranges_and_constant_columns():
    X = np.array([[1.0, 5.0, -3.0], [3.0, 5.0, 1.0], [2.0, 5.0, -1.0]])
    Z = scale_minmax(X, "01")
    assert Z.min(axis=0).tolist() == [0, 0, 0] and Z.max(axis=0).tolist() == [1, 0, 1]
    assert Z[:, 1].tolist() == [0, 0, 0]  # constant column -> 0, no division by zero
    P = scale_minmax(X, "pm1")
    assert P.min(axis=0).tolist() == [-1, 0, -1] and P.max(axis=0).tolist() == [1, 0, 1]
    assert P[:, 0].tolist() == [-1, 1, 0]
    assert np.array_equal(scale_minmax(X, "none"), X)
    assert X[0, 0] == 1.0  # input untouched
    lo, hi = fit_minmax(X)
    assert lo.tolist() == [1, 5, -3] and hi.tolist() == [3, 5, 1]
    T = scale_minmax(np.array([[4.0, 9.0, 1.0]]), "01", lo, hi)  # reuse training range
    assert T.tolist() == [[1.5, 0.0, 1.0]]
    with pytest.raises(ValueError):
        scale_minmax(X, "zscore")
    assert scale_minmax(np.zeros((0, 3)), "01").shape == (0, 3)


def test_load_scale(tmp_path):
    p = write(tmp_path / "s.svm", "1 1:2 2:10\n0 1:4\n1 1:3 2:5\n")
    X, _ = load(p, scale="01")
    assert X.tolist() == [[0, 1], [1, 0], [0.5, 0.5]]
    X, _ = load(p, scale="pm1")
    assert X.tolist() == [[-1, 1], [1, -1], [0, 0]]


# --------------------------------------------------------------------------------------------
# Formats


def test_infer_format(tmp_path):
    assert infer_format(write(tmp_path / "a.csv", "1 1:1\n")) == "csv"  # extension wins
    assert infer_format(write(tmp_path / "a.data.gz", gzip.compress(b"1,2\n"))) == "csv"
    assert infer_format(write(tmp_path / "a9a", "\n-1 3:1 5:1\n")) == "libsvm"
    assert infer_format(write(tmp_path / "w7a.t", "-1\n+1 2:1\n")) == "libsvm"
    assert infer_format(write(tmp_path / "plain.txt", "1.0,2.0,g\n")) == "csv"
    assert infer_format(write(tmp_path / "packed", gzip.compress(b"0 1:1\n"))) == "libsvm"


def test_data_module_imports_neither_beam_nor_pyarrow():
    code = (
        "import sys, kernelstream; before = set(sys.modules); import kernelstream.data; "
        "new = set(sys.modules) - before; "
        "bad = sorted(m for m in new if m.split('.')[0] in ('apache_beam', 'pyarrow')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------------------------
# Fast path == exact path (property test)

_VALUE_TOKENS = [
    *["1", "0", "-0", "+0", "00", "+5", "-6", "007", "999999999999999", "-999999999999999"],
    *["1234567890123456789", "-12345678901234567", ".5", "5.", "+1e-3", "1E5", "-2.50"],
    *["1e-320", "-.0"],
]
_BAD_PAIRS = [
    "1:",
    ":1",
    "a:1",
    "1:x",
    "1:2:3",
    "0:1",
    "-1:2",
    "1.5:2",
    "+2:1",
    "1:nan",
    "1:inf",
    "1:0x10",
    "1:1e400",
    "99999999999:1",
    "1:1-2",
    "1:1.2.3",
    "1:1e",
    "1:.",
    "3",
    "1:+-1",
]
_LABELS = ["+1", "-1", "1", "0", "2", "g", "0.25", "1:1", "+"]

_floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
_value = st.one_of(
    st.sampled_from(_VALUE_TOKENS),
    _floats.map(repr),
    _floats.map("{:.6g}".format),
    st.integers(-(10**17), 10**17).map(str),
)
_pair = st.tuples(st.integers(1, 12), _value).map(lambda t: f"{t[0]}:{t[1]}")
_sep = st.sampled_from([" ", " ", "\t", "  "])
_ending = st.sampled_from(["\n", "\n", "\r\n", " \n"])


def _lines(clean: bool) -> st.SearchStrategy[str]:
    # clean files hold only well-formed pairs (the fast path should mostly accept them, but
    # duplicates still occur); dirty ones mix in every kind of bad token and line
    token = _pair if clean else st.one_of(_pair, _pair, _pair, st.sampled_from(_BAD_PAIRS))
    labels = st.sampled_from(_LABELS[:-2] if clean else _LABELS)
    line = st.tuples(labels, st.lists(st.tuples(_sep, token), max_size=6)).map(
        lambda t: t[0] + "".join(s + tok for s, tok in t[1])
    )
    if clean:
        return st.one_of(line, line, line, st.just(""))
    return st.one_of(line, st.sampled_from(["", "   ", "\t", "\x00\x01", "# c", "1 1:1 # c"]))


_files = st.booleans().flatmap(
    lambda clean: st.lists(st.tuples(_lines(clean), _ending), max_size=8)
)


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(_files, st.booleans())
def test_bulk_path_agrees_with_exact_parser(lines, drop_last_newline):
    text = "".join(line + end for line, end in lines)
    if drop_last_newline:
        text = text.rstrip("\r\n")
    raw = text.encode()
    try:
        exact = data._libsvm_exact(raw, "f")
    except ParseError as e:
        exact_err = e
        exact = None
    bulk = data._libsvm_bulk(raw)
    if bulk is None:
        return  # the exact parser decides; nothing to compare
    assert exact is not None, f"bulk accepted what the exact parser rejects: {exact_err}"
    assert bulk.labels.linenos.tolist() == exact.labels.linenos.tolist()
    assert [bulk.labels.tokens[c] for c in bulk.labels.codes] == [
        exact.labels.tokens[c] for c in exact.labels.codes
    ]
    assert bulk.counts.tolist() == exact.counts.tolist()
    # same pairs per row (bulk keeps file order within a row, exact sorts)
    rows = np.repeat(np.arange(len(bulk.counts)), bulk.counts)
    order = np.lexsort((bulk.idx, rows))
    assert bulk.idx[order].tolist() == exact.idx.tolist()
    assert bulk.val[order].tobytes() == exact.val.tobytes()  # bit-identical floats


def test_bulk_path_is_taken_for_plain_files():
    assert data._libsvm_bulk(b"+1 1:0.5 3:1\r\n-1 3:2 1:1e-3 \n\n-1") is not None
    assert data._libsvm_bulk(b"+1 1:0.5 1:1\n") is None  # duplicate: exact path reports it


# --------------------------------------------------------------------------------------------
# Embedded data sets


def test_embedded_german():
    assert "german" in embedded_datasets()
    X, y = load_dataset("german")
    assert X.shape == (1000, 24) and X.dtype == np.float64 and X.flags.c_contiguous
    assert Counter(y.tolist()) == {-1.0: 700, 1.0: 300}
    assert X.min() >= -1.0 and X.max() <= 1.0  # the LIBSVM-scaled version
    assert np.array_equal(load_dataset("german_scale")[0], X)  # alias
    assert load_dataset("german", limit=10)[0].shape == (10, 24)


def test_embedded_manifest_matches_files():
    for name in embedded_datasets():
        info = embedded_dataset_info(name)
        path = data.embedded_path(name)
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        assert hashlib.sha256(raw).hexdigest() == info["sha256"]
        assert info["licence"]
        X, y = load_dataset(name)
        assert X.shape == (int(info["rows"]), int(info["features"]))
        expected = dict(tok.rsplit(":", 1) for tok in info["labels"].split())
        m = LabelMap.from_labels(list(expected))
        assert Counter(y.tolist()) == {m(k): int(v) for k, v in expected.items()}


def test_load_dataset_paths(tmp_path):
    p = write(tmp_path / "x.svm", GOOD_LIBSVM)
    assert load_dataset(p)[0].shape == (2, 3)
    assert load_dataset(str(p))[0].shape == (2, 3)
    with pytest.raises(FileNotFoundError, match="neither an embedded data set"):
        load_dataset(tmp_path / "missing")
    with pytest.raises(KeyError):
        embedded_dataset_info("nope")


# --------------------------------------------------------------------------------------------
# Real data sets (shared/datasets)

SHARED = ["german", "svmguide3", "spambase", "mushrooms", "magic04", "a9a", "w7a"]


def _shared_manifest(folder: Path) -> dict[str, dict[str, str]]:
    text = (folder / "MANIFEST.tsv").read_text(encoding="utf-8")
    return {r["name"]: r for r in csv.DictReader(io.StringIO(text), delimiter="\t")}


@pytest.mark.parametrize("name", SHARED)
def test_shared_dataset_shape_and_labels(shared_datasets, name):
    row = _shared_manifest(shared_datasets)[name]
    X, y = load(shared_datasets / row["file"])
    assert X.shape == (int(row["n_examples"]), int(row["n_features"]))
    expected = dict(tok.rsplit(":", 1) for tok in row["labels"].split())
    m = LabelMap.from_labels(list(expected))
    assert Counter(y.tolist()) == {m(k): int(v) for k, v in expected.items()}
    assert np.isfinite(X).all()


def test_target_standardisation_says_why_it_does_not() -> None:
    """``--scale-target auto`` 's rule on the first targets: their mean and (population)
    standard deviation, or None with the reason: fewer than ``minimum`` (non-finite targets left
    out), a constant target."""
    from kernelstream.data.scaling import target_standardisation

    y = [2.0, 4.0, 4.0, 6.0]
    (mean, std), line = target_standardisation(y, "kafka://h:1/t")
    assert (mean, std) == (4.0, float(np.std(y))) and "of the first 4 rows of kafka://h:1/t" in line
    target, line = target_standardisation(y, "kafka://h:1/t", minimum=5)
    assert target is None and "4 targets among the first records" in line
    assert "fewer than 5" in line and "learnt as it comes" in line
    target, line = target_standardisation([3.0, 3.0, 3.0])
    assert target is None and "constant or not finite over its first" in line
    # a non-finite target is left out (a dead letter of the run): one finite one is too few
    target, line = target_standardisation([1.0, float("inf")])
    assert target is None and "fewer than 2" in line
    assert target_standardisation([1.0])[0] is None
