"""The pyarrow fast path of whole-file CSV loading: bit for bit the per-line parser's result on
every file it takes, and the per-line parser (its errors and messages) for every file it does
not take."""

from __future__ import annotations

import bz2
import gzip
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelstream import data
from kernelstream.data import ParseError, load
from kernelstream.data.csv import CsvRead, _load_csv_arrow, _load_csv_lines

CHUNK = data._CHUNK_BYTES


def _args(path: Path, chunk: int, kw: dict[str, Any]) -> CsvRead:
    return CsvRead(path, kw.get("n_features"), kw.get("limit"), kw.get("label_column"),
                   kw.get("delimiter"), kw.get("header"), chunk)


def per_line(path: Path, chunk: int = CHUNK, **kw: Any) -> tuple:
    """Everything observable about the per-line path: arrays bit for bit and labels, or the
    error."""
    try:
        X, lab = _load_csv_lines(_args(path, chunk, kw))
    except (ParseError, ValueError) as e:
        return ("error", type(e).__name__, str(e))
    return ("ok", X.shape, X.tobytes(), lab.tokens, lab.codes.tolist(), lab.linenos.tolist())


def fast(path: Path, chunk: int = CHUNK, **kw: Any) -> tuple | None:
    """The fast path's result in :func:`per_line`'s form, or None when it declines."""
    out = _load_csv_arrow(_args(path, chunk, kw))
    if out is None:
        return None
    X, lab = out
    assert X.dtype == np.float64 and X.flags.c_contiguous and X.flags.owndata
    return ("ok", X.shape, X.tobytes(), lab.tokens, lab.codes.tolist(), lab.linenos.tolist())


def assert_fast_equal(path: Path, chunks: tuple[int, ...] = (CHUNK,), **kw: Any) -> tuple:
    """The fast path takes the file and agrees with the per-line path bit for bit."""
    ref = per_line(path, **kw)
    assert ref[0] == "ok", ref
    for chunk in chunks:
        got = fast(path, chunk, **kw)
        assert got is not None, f"fast path declined a clean file (chunk {chunk}, {kw})"
        assert got == ref, (chunk, kw)
    return ref


def assert_declined(path: Path, **kw: Any) -> tuple:
    """The fast path leaves the file to the per-line path, so load() gives its outcome."""
    assert fast(path, **kw) is None
    ref = per_line(path, **kw)
    try:
        X, _ = load(path, fmt="csv", **kw)
        got: tuple = ("ok", X.shape, X.tobytes())
    except (ParseError, ValueError) as e:
        got = ("error", type(e).__name__, str(e))
    assert got == ref[: len(got)]
    return ref


# -- real data sets ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("magic04.data", {}),
        ("magic04.data", {"limit": 777}),
        ("spambase.data", {}),
        ("spambase.data", {"label_column": 0, "n_features": 57}),
        ("river_phishing.csv", {}),
        ("river_phishing.csv", {"label_column": "is_phishing"}),
        ("river_phishing.csv", {"label_column": "https"}),
    ],
)
def test_real_files(shared_datasets: Path, name: str, kw: dict[str, Any]) -> None:
    ref = assert_fast_equal(shared_datasets / name, chunks=(CHUNK, 4096), **kw)
    assert ref[1][0] > 0


def test_real_file_compressed(shared_datasets: Path, tmp_path: Path) -> None:
    raw = (shared_datasets / "magic04.data").read_bytes()
    ref = per_line(shared_datasets / "magic04.data")
    for name, packed in [("m.data.gz", gzip.compress(raw)), ("m.data.bz2", bz2.compress(raw))]:
        p = write(tmp_path / name, packed)
        assert fast(p) == ref  # decompression belongs to kernelstream.fs, on both paths


# -- synthetic files ---------------------------------------------------------------------------


def _decimals(rng: random.Random) -> str:
    """A number with many digits, an exponent or a sign: the spellings float() and pyarrow
    must round alike."""
    kind = rng.randrange(6)
    if kind == 0:
        return repr(rng.uniform(-1e6, 1e6))
    if kind == 1:  # more digits than a double holds: correct rounding is tested
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(17, 30)))
        return f"{rng.choice(['', '-', '+'])}{digits[:3]}.{digits[3:]}"
    if kind == 2:
        return f"{rng.uniform(1, 10):.{rng.randint(1, 20)}f}e{rng.randint(-330, 307)}"
    if kind == 3:
        return rng.choice(["-0", "-0.0", "-.0", "+0", "0e5", "-0e-3", "1e-320", "4.9e-324",
                           "2.4703282292062327e-324", "2.4703282292062328e-324", "1E+5",
                           "-1e-400", "1.7976931348623157e308", "9007199254740993", "5.", ".5",
                           "007", "0.1000000000000000055511151231257827021181583404541015625"])
    if kind == 4:
        return str(rng.randint(-(10**20), 10**20))
    return f"{rng.gauss(0, 1):.6g}"


def _synthetic(rows: int, cols: int, seed: int, delim: str = ",", space: bool = False) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(rows):
        fields = [_decimals(rng) for _ in range(cols)]
        if space:  # whitespace around fields: float() and pyarrow both skip it
            fields = [rng.choice(["", " ", "  ", "\t"]) + f + rng.choice(["", " ", "\t"])
                      for f in fields]
        lines.append(delim.join([*fields, rng.choice(["a", "b", ' "b" ', "a "])]))
    return "\n".join(lines) + "\n"


def test_many_decimals_exponents_negative_zero(tmp_path: Path) -> None:
    p = write(tmp_path / "d.csv", _synthetic(3000, 7, seed=1))
    ref = assert_fast_equal(p, chunks=(CHUNK, 1, 300))
    X = np.frombuffer(ref[2]).reshape(ref[1])
    assert np.signbit(X[X == 0]).any()  # negative zeros made it through, as zeros with sign


@pytest.mark.parametrize("delim", [",", ";", "\t", "|"])
def test_whitespace_around_fields_and_delimiters(tmp_path: Path, delim: str) -> None:
    text = _synthetic(500, 4, seed=2, delim=delim, space=delim != "\t")
    p = write(tmp_path / "w.csv", text)
    # the tabs around fields would be sniffed before ";": name the delimiter
    assert_fast_equal(p, chunks=(CHUNK, 64), delimiter=delim)
    if delim in ",\t":
        assert_fast_equal(p)  # sniffed


def test_tsv_name_header_crlf_bom(tmp_path: Path) -> None:
    body = "x1\tx2\tcls\r\n\r\n" + _synthetic(200, 2, seed=3, delim="\t").replace("\n", "\r\n")
    p = write(tmp_path / "h.tsv", b"\xef\xbb\xbf" + body.encode())
    ref = assert_fast_equal(p, chunks=(CHUNK, 1, 97))
    assert ref[1] == (200, 2) and ref[5][0] == 3  # header on line 1, a blank line 2
    assert_fast_equal(p, label_column="cls", n_features=2)
    assert_fast_equal(p, label_column=-1, header=True, limit=150)


def test_header_options_labels_and_limit(tmp_path: Path) -> None:
    p = write(tmp_path / "l.csv", "\n\n  \nlabel;f1;f2\n1;0.5;2\n0;1.5;-3e2\n\n1;2;2\n")
    assert_fast_equal(p, label_column=0)
    assert_fast_equal(p, label_column="label")
    assert_fast_equal(p, label_column=-3, limit=2)
    assert_fast_equal(p, label_column=0, limit=1, n_features=2)
    q = write(tmp_path / "n.csv", "1,2,3\n0.5,1,1\n0,0,0")  # numeric header: header=True
    assert assert_fast_equal(q, header=True)[1] == (2, 2)
    assert assert_fast_equal(q)[1] == (3, 2)


def test_compressed_synthetic(tmp_path: Path) -> None:
    text = "a,b,y\n" + _synthetic(800, 2, seed=4)
    ref = per_line(write(tmp_path / "p.csv", text))
    assert fast(write(tmp_path / "p.csv.gz", gzip.compress(text.encode())), 512) == ref
    assert fast(write(tmp_path / "p.csv.bz2", bz2.compress(text.encode())), 512) == ref


# -- the per-line path decides -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1,2,g\n3,inf,h\n", "non-finite value"),
        ("1,2,g\n3,nan,h\n", "non-finite value"),
        ("1,2,g\n3,1e400,h\n", "non-finite value"),
        ("1,2,g\n3,1_0,h\n", "non-numeric value"),
        ("1,2,g\n3,x,h\n", "non-numeric value"),
        ("1,2,g\n3,,h\n", "empty field"),
        ("1,2,g\n3,4,\n", "empty label"),
        ("1,2,g\n3,4,\"\"\n", "empty label"),
        ("1,2,g\n3,4\n", "wrong number of columns"),
        ("1,2,g\n3,4,h\x00\n", "binary garbage"),
        ("1,2,g\n3,4,h\xe9\n", "undecodable bytes"),
    ],
)
def test_bad_lines_are_reported_by_the_per_line_parser(tmp_path: Path, text: str,
                                                       reason: str) -> None:
    p = write(tmp_path / "e.csv", text.encode("latin-1"))
    ref = assert_declined(p)
    assert ref[0] == "error" and f"{p}:2: {reason}" in ref[2], ref


@pytest.mark.parametrize(
    ("text", "kw"),
    [
        ("1,2,g\r3,4,h\n", {}),  # a lone CR: pyarrow would end the line there
        ("1,2,g\n   \n3,4,h\n", {}),  # a blank line of spaces: pyarrow would make it a row
        ("1,2,g\n\t\n3,4,h\n", {"delimiter": "\t"}),
        ("1,2,g\r\r\n3,4,h\n", {}),
        ("1,2,g\n3,4,h\r", {}),
        ("1,2,é\n3,4,h\n", {}),  # non-ASCII
        ("1,2,g\n\x0b\n3,4,h\n", {}),  # blank to str.strip(), a control character to pyarrow
        ("1 2 g\n3 4 h\n", {}),  # runs of whitespace
        ("1,2,g\n3,4,h\n", {"label_column": 5}),  # no such column
        ("1,2,g\n3,4,h\n", {"delimiter": ", "}),  # not one character
        ("g\nh\n", {}),  # no feature column
        ("a,b,y\n", {}),  # a header only: no rows
        ("1,2,g\n", {"limit": 0}),
    ],
)
def test_uncertain_files_are_declined(tmp_path: Path, text: str, kw: dict[str, Any]) -> None:
    assert_declined(write(tmp_path / "u.csv", text), **kw)


def test_corrupt_gzip_is_declined(tmp_path: Path) -> None:
    packed = gzip.compress(("1,2,g\n" * 5000).encode())
    p = write(tmp_path / "c.csv.gz", packed[: len(packed) // 2])
    ref = assert_declined(p, delimiter=",")
    assert "corrupt compressed file" in ref[2]


def test_bad_line_after_the_limit_is_not_an_error(tmp_path: Path) -> None:
    p = write(tmp_path / "b.csv", "1,2,g\n3,4,h\n5,x,h\n")
    assert fast(p, limit=2) is None  # pyarrow rejects the block; the per-line path reads on
    assert load(p, limit=2)[0].tolist() == [[1, 2], [3, 4]]
    assert assert_fast_equal(write(tmp_path / "c.csv", "1,2,g\n3,4,h\n" * 99 + "5,x,h\n"),
                             chunks=(16,), limit=2)[1] == (2, 2)


def test_option_errors_are_the_per_line_errors(tmp_path: Path) -> None:
    p = write(tmp_path / "o.csv", "a,b,y\n1,2,g\n")
    for kw in ({"label_column": "zzz"}, {"label_column": "y", "header": False}):
        with pytest.raises(ValueError) as fast_err:
            _load_csv_arrow(_args(p, CHUNK, kw))
        assert per_line(p, **kw) == ("error", "ValueError", str(fast_err.value))


# -- property: whatever the fast path takes, it takes as the per-line path does ----------------

_TOKENS = ["1", "-0", "+.5", "1e5", "1E-3", "5.", "007", "0x10", "1_0", "inf", "-nan", "1e",
           ".", "+-1", " 2 ", "\t3", "", " ", "1e400", "1e-400", "2.5e-324", '"1"', "1,5",
           "3.14159265358979323846"]
_field = st.one_of(st.sampled_from(_TOKENS),
                   st.floats(allow_nan=False, allow_infinity=False).map(repr))
_label = st.sampled_from(["a", "b", ' "a"', "", " ", "1", "+1", "c_d"])
_row = st.tuples(st.one_of(st.lists(_field, min_size=3, max_size=3),
                           st.lists(_field, min_size=2, max_size=4)), _label)
_end = st.sampled_from(["\n", "\r\n", "\n\n", "\n \n"])


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_row, _end), min_size=1, max_size=6), st.booleans(),
       st.sampled_from([CHUNK, 1, 16]))
def test_fast_path_never_disagrees(tmp_path: Path, rows: list, header: bool, chunk: int) -> None:
    text = "f1,f2,f3,y\n" if header else ""
    text += "".join(",".join([*feats, label]) + end for (feats, label), end in rows)
    p = write(tmp_path / "h.csv", text)
    got = fast(p, chunk)
    if got is not None:
        assert got == per_line(p, chunk)


def test_quoted_numbers_read_as_the_unquoted_file(tmp_path: Path) -> None:
    """Standard CSV quoting (issue: quoted numbers were "non-numeric value"): quoted features
    read as the unquoted file does, by the per-line parser, ``load`` and the pipelines' row
    reader; a quoted label may hold the delimiter; a quoted header is still a header and a
    quoted data row is not one."""
    from kernelstream.data.options import ReadOptions
    from kernelstream.data.rows import iter_file_rows

    plain = write(tmp_path / "p.csv", "0.5,1.5,g\n2,-3e-1,h\n7,8,g\n")
    quoted = write(tmp_path / "q.csv", '"0.5","1.5","g"\n"2", "-3e-1" ,"h"\n7,"8",g\n')
    ref = assert_fast_equal(plain)
    assert per_line(quoted) == ref
    Xp, yp = load(plain)
    Xq, yq = load(quoted)
    assert Xq.tobytes() == Xp.tobytes() and yq.tolist() == yp.tolist()
    rows = [r for _, _, r in iter_file_rows(ReadOptions(path=str(quoted)))]
    assert [(r.label, r.vals.tolist()) for r in rows] == [
        ("g", [0.5, 1.5]), ("h", [2.0, -0.3]), ("g", [7.0, 8.0])]
    assert data.parse_csv_line('1,2,"g,1"')[0] == "g,1"
    header = write(tmp_path / "h.csv", '"f1","f2","label"\n"1","2","g"\n"3","4","h"\n')
    assert per_line(header)[1] == (2, 2)
