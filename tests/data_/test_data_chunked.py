"""Block-wise whole-file loading (kernelstream.data._CHUNK_BYTES): with tiny blocks, load()
must give bit for bit the results and errors of a parse of the whole file in one block."""

from __future__ import annotations

import bz2
import gzip
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelstream import data
from kernelstream.data import ParseError, load, scale_minmax

WHOLE = 1 << 30  # one block: the file is parsed at once
SMALL = [1, 7, 64, 301]


def outcome(path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple:
    """Everything observable about a load: arrays bit for bit, or the error and its line."""
    monkeypatch.setattr(data, "_CHUNK_BYTES", chunk)
    try:
        X, y = load(path, **kw)
    except (ParseError, ValueError) as e:
        return ("error", type(e).__name__, str(e), getattr(e, "line", None))
    assert X.dtype == np.float64 and X.flags.c_contiguous and X.flags.owndata
    return ("ok", X.shape, X.tobytes(), y.tobytes())


def assert_same_all_chunks(path: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple:
    ref = outcome(path, WHOLE, monkeypatch, **kw)
    for chunk in SMALL:
        assert outcome(path, chunk, monkeypatch, **kw) == ref, (chunk, kw)
    return ref


def numbered_lines(n: int, start: int = 1) -> list[str]:
    """Plain data lines with varied (some unsorted) pairs, integer and decimal values."""
    out = []
    for i in range(start, start + n):
        pairs = [f"{(i * 7 + k) % 9 + 1}:{(i * k) % 5 - 2}.{k}" for k in range(i % 4)]
        if i % 3 == 0:
            pairs.reverse()
        out.append(" ".join([("+1", "-1")[i % 2], *dict.fromkeys(pairs)]))
    return out


MESSY = (
    "# header comment\n\n"
    + "\n".join(numbered_lines(20))
    + "\r\n+1 3:1.5 1:2  # trailing comment\r\n   \n-1\n\t\n"
    + "\n".join(numbered_lines(20, 21))
    + "\n-1 2:1e-3 5:7"  # no final newline
)


@pytest.mark.parametrize("kw", [{}, {"n_features": 9}, {"scale": "pm1"}, {"task": "regression"}])
def test_blocks_equal_whole_file_messy(tmp_path, monkeypatch, kw):
    p = write(tmp_path / "m.svm", MESSY)
    ref = assert_same_all_chunks(p, monkeypatch, **kw)
    assert ref[0] == "ok" and ref[1][0] == 43


def test_blocks_equal_whole_file_without_comments(tmp_path, monkeypatch):
    # every block takes the bulk path
    p = write(tmp_path / "b.svm", "\n".join(numbered_lines(60)) + "\n\n+1 9:2\n")
    ref = assert_same_all_chunks(p, monkeypatch, n_features=9)
    X = np.frombuffer(ref[2]).reshape(ref[1])
    assert X.shape == (61, 9) and X[-1].tolist() == [0] * 8 + [2]


def test_error_in_a_later_block_has_its_global_line(tmp_path, monkeypatch):
    lines = numbered_lines(50)
    lines[36] = "+1 1:1 oops"  # line 37
    for extra in ("", "# a comment in the file sends its blocks to the exact parser\n"):
        p = write(tmp_path / "e.svm", extra + "\n".join(lines) + "\n")
        ref = assert_same_all_chunks(p, monkeypatch)
        assert ref[0] == "error" and "bad token 'oops'" in ref[2]
        assert ref[3] == 37 + extra.count("\n")


@pytest.mark.parametrize("bad", ["+1 3:1 3:2", "+1 1:nan", "+1 0:1", b"+1 1:\xe9", "\x00\x01"])
def test_every_error_kind_in_a_later_block(tmp_path, monkeypatch, bad):
    head = "\n".join(numbered_lines(30)).encode() + b"\n"
    raw = head + (bad.encode() if isinstance(bad, str) else bad) + b"\n+1 1:1\n"
    ref = assert_same_all_chunks(write(tmp_path / "k.svm", raw), monkeypatch)
    assert ref[0] == "error" and ref[3] == 31


def test_index_beyond_n_features_in_a_later_block(tmp_path, monkeypatch):
    lines = numbered_lines(40)
    lines[32] = "-1 12:1 2:1 10:3"  # line 33, unsorted: which index is named depends on the parser
    p = write(tmp_path / "w.svm", "\n".join(lines) + "\n")
    ref = assert_same_all_chunks(p, monkeypatch, n_features=9)
    assert ref[2].endswith(":33: index exceeds n_features: index 12 > n_features=9")
    # A comment anywhere (even in another block) sent the whole file to the exact parser,
    # which sorts each row and so named the smallest index beyond n_features.
    p2 = write(tmp_path / "w2.svm", "\n".join(lines) + "\n# trailer\n")
    ref2 = assert_same_all_chunks(p2, monkeypatch, n_features=9)
    assert ref2[2].endswith(":33: index exceeds n_features: index 10 > n_features=9")


def test_syntax_error_after_a_wide_index_wins(tmp_path, monkeypatch):
    lines = numbered_lines(40)
    lines[3] = "+1 50:1"  # too wide, line 4
    lines[35] = "+1 1:x"  # bad value, line 36: reported first, as every line is parsed first
    p = write(tmp_path / "s.svm", "\n".join(lines) + "\n")
    ref = assert_same_all_chunks(p, monkeypatch, n_features=9)
    assert ref[3] == 36 and "bad value" in ref[2]


def test_label_errors_after_all_blocks(tmp_path, monkeypatch):
    lines = numbered_lines(40)
    lines[30] = "7 1:1"  # third class, line 31
    p = write(tmp_path / "l.svm", "\n".join(lines) + "\n")
    ref = assert_same_all_chunks(p, monkeypatch)
    assert ref[3] == 31 and "third distinct label '7'" in ref[2]
    assert assert_same_all_chunks(p, monkeypatch, task="regression")[0] == "ok"


@pytest.mark.parametrize("limit", [0, 1, 5, 17, 18, 41, 100])
def test_limit_across_blocks(tmp_path, monkeypatch, limit):
    # comment and blank lines do not count; the bad line after the limit is never read
    text = MESSY.replace("\n-1\n", "\n# c\n-1\n") + "\nnot libsvm at all\n"
    p = write(tmp_path / "lim.svm", text)
    ref = assert_same_all_chunks(p, monkeypatch, limit=limit, n_features=9)
    if limit <= 43:
        assert ref[0] == "ok" and ref[1] == (limit, 9)
    else:
        assert ref[0] == "error" and ref[3] == text.count("\n")


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress])
def test_compressed_blocks(tmp_path, monkeypatch, compress):
    plain = assert_same_all_chunks(write(tmp_path / "p.svm", MESSY), monkeypatch)
    p = write(tmp_path / "c.svm.gz", compress(MESSY.encode()))
    assert assert_same_all_chunks(p, monkeypatch) == plain
    assert assert_same_all_chunks(p, monkeypatch, limit=30) == outcome(
        tmp_path / "p.svm", WHOLE, monkeypatch, limit=30
    )


def test_corrupt_gzip_reported_before_a_bad_line(tmp_path, monkeypatch):
    # The whole-file read failed on the truncated stream before any line was parsed.
    body = "+1 1:1 x\n" + "+1 1:1\n" * 3000
    packed = gzip.compress(body.encode())
    p = write(tmp_path / "t.svm.gz", packed[: len(packed) // 2])
    ref = assert_same_all_chunks(p, monkeypatch)
    assert ref[0] == "error" and "corrupt compressed file" in ref[2]
    # ... but a limited read stops before the damage and reports the line
    ref = assert_same_all_chunks(p, monkeypatch, limit=3)
    assert ref[3] == 1 and "bad token 'x'" in ref[2]


def test_line_longer_than_a_block(tmp_path, monkeypatch):
    long = "+1 " + " ".join(f"{i}:{i / 7!r}" for i in range(1, 400))
    p = write(tmp_path / "long.svm", f"-1 1:1\n{long}\n-1 2:2\n{long}")
    ref = assert_same_all_chunks(p, monkeypatch)
    assert ref[1] == (4, 399)


def test_compact_parts_without_n_features(tmp_path, monkeypatch):
    # indices beyond uint16 and values that float32 cannot hold must come back exactly
    text = "+1 1:0.1 70000:3\n-1 2:-0 3:1e-300\n+1 65535:1.5\n-1 5:16777217\n"
    ref = assert_same_all_chunks(write(tmp_path / "c.svm", text), monkeypatch)
    X = np.frombuffer(ref[2]).reshape(ref[1])
    assert X.shape == (4, 70000) and X[0, 0] == 0.1 and X[2, 65534] == 1.5
    assert X[3, 4] == 16777217.0 and X[1, 2] == 1e-300 and np.signbit(X[1, 1])


def test_scaling_in_load_is_bit_identical_to_scale_minmax(tmp_path):
    p = write(tmp_path / "s.svm", MESSY)
    X, _ = load(p)
    for kind in ("01", "pm1"):
        assert load(p, scale=kind)[0].tobytes() == scale_minmax(X, kind).tobytes()


CSV = (
    "a,b,c,label\r\n"
    + "".join(f"{i * 0.1!r},{-i},{i % 3},{'gh'[i % 2]}\r\n" for i in range(60))
    + "\r\n"
    + "1,2,3,g"
)


@pytest.mark.parametrize("kw", [{}, {"limit": 25}, {"scale": "pm1"}, {"n_features": 3}])
def test_csv_blocks_equal_whole_file(tmp_path, monkeypatch, kw):
    p = write(tmp_path / "d.csv", CSV)
    ref = assert_same_all_chunks(p, monkeypatch, **kw)
    assert ref[0] == "ok" and ref[1] == (kw.get("limit", 61), 3)
    gz = write(tmp_path / "d.csv.gz", gzip.compress(CSV.encode()))
    assert assert_same_all_chunks(gz, monkeypatch, **kw) == ref


def test_csv_error_line_and_empty(tmp_path, monkeypatch):
    p = write(tmp_path / "e.csv", CSV.replace("5.0,-50,", "5.0,x,"))
    ref = assert_same_all_chunks(p, monkeypatch)
    assert ref[0] == "error" and ref[3] == 52
    ref = assert_same_all_chunks(write(tmp_path / "h.csv", "a,b,label\n"), monkeypatch)
    assert ref[0] == "ok" and ref[1] == (0, 0)


def test_peak_memory_is_about_the_result(tmp_path, monkeypatch):
    # 2.6 MB of text: a whole-file parse needed ~20 X in temporaries; by blocks the traced
    # peak is X plus a block's worth (and scaling makes no second copy of X).
    rows = [
        f"{'+-'[i % 2]}1 " + " ".join(f"{k}:{(i * k) % 977}" for k in range(1, 17))
        for i in range(25_000)
    ]
    p = write(tmp_path / "big.svm", "\n".join(rows) + "\n")
    monkeypatch.setattr(data, "_CHUNK_BYTES", 1 << 14)
    x_bytes = 25_000 * 16 * 8
    tracemalloc.start()
    try:
        X, _ = load(p, n_features=16, scale="01")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert X.nbytes == x_bytes
    assert peak < 1.5 * x_bytes, peak / x_bytes


_pair = st.tuples(
    st.integers(1, 12),
    st.sampled_from(["1", "-0", "007", ".5", "2.50", "1e-3", "0.1", "99", "x", "nan", "+3"]),
).map(lambda t: f"{t[0]}:{t[1]}")
_line = st.one_of(
    st.tuples(
        st.sampled_from(["+1", "-1", "0", "1", "2"]),
        st.lists(st.tuples(st.sampled_from([" ", "\t", "  "]), _pair), max_size=5),
    ).map(lambda t: t[0] + "".join(s + p for s, p in t[1])),
    st.sampled_from(["", "  ", "# c", "+1 1:1 # c", "\x00"]),
)


@settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    st.lists(st.tuples(_line, st.sampled_from(["\n", "\r\n"])), max_size=25),
    st.sampled_from([1, 5, 23, 80]),
    st.sampled_from([None, 4, 12]),
    st.sampled_from([None, 0, 3, 9]),
)
def test_blocks_equal_whole_file_property(tmp_path_factory, lines, chunk, n_features, limit):
    text = "".join(line + end for line, end in lines)
    p = write(tmp_path_factory.mktemp("h") / "f.svm", text)
    kw = {"n_features": n_features, "limit": limit, "task": "regression"}
    with pytest.MonkeyPatch.context() as mp:
        assert outcome(p, chunk, mp, **kw) == outcome(p, WHOLE, mp, **kw)
