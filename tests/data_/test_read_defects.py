"""Reading defects found by a QA pass of ``kernelstream replay`` (each test fails on the code
before its fix): ``--key-by`` column numbers and quoted keys, the last line of a compressed
file that ends in garbage, ``check --limit``, the JSON raw of Parquet label rejections, a file
that changes during the run, CR line endings. Outputs are the same on every runner."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _helpers import strip_run_fields

from kernelstream.data import ParseError
from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import iter_file_rows
from kernelstream.engine.replay.outputs import comparable_table
from kernelstream.pipelines import cli

LOOP = ["-q", "-l", "perceptron"]
RUNNERS: list[list[str]] = [["--runner", "loop"], ["--runner", "direct"],
                            ["--runner", "direct", "-j", "2"]]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, [ln for ln in err.splitlines() if ln.strip()], out


def summary(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "summary.json").read_text()))


def dead_letters(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for f in sorted((out / "dead_letters").glob("*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


def svm_rows(n: int) -> str:
    """``n`` LIBSVM rows of labels ±1 (both classes from the first rows)."""
    return "".join(f"{'+1' if i % 3 == 0 else '-1'} 1:{(i % 7) / 7:.3f} 2:{(i % 5) / 5:.3f} "
                   f"3:{i % 2}\n" for i in range(n))


def replay_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str], path: Path,
                      *args: str, dask: bool = False) -> Path:
    """Replay ``path`` on every runner; assert equal outputs; return the loop's folder."""
    runners = RUNNERS + ([["--runner", "dask"]] if dask else [])
    outs = []
    for i, r in enumerate(runners):
        o = tmp_path / f"run{i}"
        rc, err, _ = run(capsys, "replay", str(path), *LOOP, "-R", "2", *args, *r,
                         "--out", str(o))
        assert rc == 0, (r, err)
        outs.append(o)
    for o in outs[1:]:
        for name in ("predictions", "metrics", "dead_letters"):
            a, b = comparable_table(outs[0], name), comparable_table(o, name)
            assert a.equals(b), (name, o)
        assert strip_run_fields(summary(outs[0])) == strip_run_fields(summary(o))
    return outs[0]


# -- 1, 2: --key-by on a CSV file: column numbers of the whole line, quoted keys ----------------
def test_key_by_reasons_count_every_column(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "col.csv"
    path.write_text("k,a,b,label\n" + "".join(
        f"{i % 3},{i / 40:.3f},{'x' if i == 5 else i % 4 / 4},{i % 2}\n" for i in range(40)))
    o = replay_everywhere(tmp_path, capsys, path, "--key-by", "k")
    (d,) = dead_letters(o)
    assert d["reason"] == "non-numeric value 'x' in column 2", d
    # check reads with the same reader
    bad = [r for _, _, r in iter_file_rows(ReadOptions(str(path), key_by="k"))
           if isinstance(r, ParseError)]
    assert [e.reason for e in bad] == ["non-numeric value 'x' in column 2"]


def test_key_by_a_quoted_key_with_the_delimiter(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "q.csv"
    names = ['"Smith, J"', "Doe", '"Roe, R"']
    path.write_text("who,a,b,label\n" + "".join(
        f"{names[i % 3]},{i / 40:.3f},{i % 4 / 4},{i % 2}\n" for i in range(40)))
    o = replay_everywhere(tmp_path, capsys, path, "--key-by", "who")
    assert dead_letters(o) == []
    s = summary(o)
    assert s["examples"] == 40 and s["dead_letters"] == 0, s
    rc, err, out = run(capsys, "check", str(path), "--key-by", "who")
    assert rc == 0 and "entities      3" in out, (err, out)


# -- 3: a compressed file ending in garbage keeps a last line without a newline ----------------
@pytest.mark.parametrize("damage", ["garbage", "crc"])
def test_last_line_before_compressed_garbage(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             damage: str) -> None:
    text = svm_rows(300).rstrip("\n").encode()  # no final newline
    packed = gzip.compress(text)
    if damage == "garbage":
        packed += b"trailing garbage"
    else:
        b = bytearray(packed)
        b[-8] ^= 0xFF  # the CRC of the data
        packed = bytes(b)
    path = tmp_path / "t.svm.gz"
    path.write_bytes(packed)
    o = replay_everywhere(tmp_path, capsys, path)
    assert summary(o)["examples"] == 300, summary(o)
    (d,) = dead_letters(o)
    assert d["line"] == 301 and d["reason"].startswith("corrupt compressed file"), d
    from kernelstream.data import iter_records

    recs = list(iter_records(path, n_features=3))
    assert len(recs) == 301 and recs[-1][0] == 301


def test_truncated_compressed_file_keeps_the_cut_line(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    text = svm_rows(3000).encode()
    packed = gzip.compress(text)
    path = tmp_path / "t.svm.gz"
    path.write_bytes(packed[: len(packed) // 2])
    o = replay_everywhere(tmp_path, capsys, path)
    (d,) = dead_letters(o)
    assert d["reason"].startswith("compressed file ends early"), d
    cut = text.split(b"\n")[d["line"] - 1].decode()
    assert d["raw"] and cut.startswith(d["raw"]), d


# -- 4: check --limit counts what replay --limit counts: rows, not records ----------------------
def test_check_limit_counts_rows_as_replay_does(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "d.svm"
    lines = svm_rows(60).splitlines()
    for i in range(0, 30, 3):  # bad lines among the first rows
        lines.insert(i, "+1 1:abc")
    path.write_text("\n".join(lines) + "\n")
    rc, err, out = run(capsys, "check", str(path), "--limit", "20", "--json")
    assert rc == 0, err
    rep = json.loads(out)
    o = replay_everywhere(tmp_path, capsys, path, "--limit", "20")
    s = summary(o)
    assert rep["rows"] == s["examples"] == 20, (rep, s)
    assert rep["records"] == 20 + len(dead_letters(o)), rep


# -- 5: a Parquet row rejected for its label has the record as JSON for raw ---------------------
def test_parquet_label_rejections_have_json_raw(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa

    n = 60
    labels = [float(i % 2) for i in range(n)]
    labels[7], labels[30] = float("inf"), 2.0  # a non-finite label, a third class
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"who": [f"u{i % 3}" for i in range(n)],
                             "a": [i / n for i in range(n)], "b": [(i % 5) / 5 for i in range(n)],
                             "label": labels}), path)
    o = replay_everywhere(tmp_path, capsys, path, "--key-by", "who")
    dead = sorted(dead_letters(o), key=lambda d: d["line"])
    assert [d["line"] for d in dead] == [8, 31], dead
    for d in dead:
        rec = json.loads(d["raw"])
        i = d["line"] - 1
        assert rec["who"] == f"u{i % 3}" and rec["a"] == i / n, d
    assert json.loads(dead[1]["raw"])["label"] == 2.0


# -- 6: a file that changes while the run reads it fails the run, on every runner --------------
@pytest.mark.parametrize("runner", [["--runner", "loop"], ["--runner", "direct"],
                                    ["--runner", "direct", "-j", "2"],
                                    ["--runner", "dask"]])
def test_a_file_that_grows_during_the_run_fails_it(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    runner: list[str]) -> None:
    if runner[1] == "dask":
        pytest.importorskip("distributed")
    from kernelstream.data import stamp
    from kernelstream.pipelines.replay import replay

    path = tmp_path / "g.svm"
    path.write_text(svm_rows(300))
    size = path.stat().st_size

    def shorter(p: str) -> tuple[int, int] | None:  # the file as it was: 7 bytes shorter
        st = stamp.file_stamp(p)
        return None if st is None else (st[0] - 7, st[1])

    monkeypatch.setattr(stamp, "run_stamp", shorter)  # --workers: the parent's
    monkeypatch.setattr(replay, "run_stamp", shorter)  # a run's own
    o = tmp_path / "out"
    rc, err, _ = run(capsys, "replay", str(path), *LOOP, *runner, "--out", str(o))
    assert rc == 2 and len(err) == 1, err
    assert err[0].endswith(f"{path} changed while the run read it (size {size - 7} -> {size}): "
                           "replay a file that is not being written"), err
    assert not (o / "summary.json").exists()
    if runner[1] in ("loop", "direct") and len(runner) == 2:  # the chunked file-order reader
        from kernelstream.engine.learner_config import LearnerConfig
        from kernelstream.errors import FileChangedError

        with pytest.raises(FileChangedError, match="changed while the run read it"):
            replay.run_replay(str(path), [LearnerConfig("perceptron", "perceptron", {})],
                              tmp_path / "file-order", order="file", runner=runner[1])


def test_a_line_written_while_the_loop_reads_is_detected(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelstream.engine.replay import sources

    path = tmp_path / "g.svm"
    text = svm_rows(300)
    # a bad line (read line by line), and a writer half-way through the last line
    path.write_text("+1 1:abc\n" + text + "+1 1:0.5 2:0.")
    read = sources.iter_file_rows

    def writing(opts: Any) -> Any:
        for i, item in enumerate(read(opts)):
            if i == 10:
                with path.open("a") as f:
                    f.write("25 3:1\n")
            yield item

    monkeypatch.setattr(sources, "iter_file_rows", writing)
    rc, err, _ = run(capsys, "replay", str(path), *LOOP, "--runner", "loop",
                     "--out", str(tmp_path / "o"))
    assert rc == 2 and "changed while the run read it" in err[0], err


# -- 7: a CR-only line ending is named in the dead letter's reason -----------------------------
@pytest.mark.parametrize("fmt", ["libsvm", "csv"])
def test_cr_line_endings_are_named(tmp_path: Path, fmt: str) -> None:
    if fmt == "libsvm":
        path = tmp_path / "cr.svm"
        path.write_bytes(b"+1 1:0.5\n-1 1:0.25\n+1 1:0.5\r-1 1:0.75\n")
    else:
        path = tmp_path / "cr.csv"
        path.write_bytes(b"0.5,1\n0.25,0\n0.5,1\r0.75,0\n")
    bad = [r for _, _, r in iter_file_rows(ReadOptions(str(path)))
           if isinstance(r, ParseError)]
    assert len(bad) == 1 and bad[0].line == 3, bad
    assert bad[0].reason.startswith("carriage return inside the line (CR-only line endings?"), bad
