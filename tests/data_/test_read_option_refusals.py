"""Read options that the file would ignore or misread are refused up front with the option's
own name (``--delimiter``, ``--n-features``, ``--label-column``), and LIBSVM lines of formats
kernelstream does not read say what they are (svmlight's ``qid:``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from kernelstream import data
from kernelstream.pipelines import cli

DATASETS = Path(__file__).resolve().parents[2] / "kernelstream" / "datasets"


def one_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(list(argv)) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    return err[0]


def test_a_typed_backslash_t_is_a_tab_and_a_long_delimiter_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # both were taken, then every row was one column: "wrong delimiter?"
    p = tmp_path / "t.txt"
    p.write_text("".join(f"0.{i}\t0.{i % 3}\t{i % 2}\n" for i in range(40)))
    assert cli.main(["check", str(p), "--format", "csv", "--delimiter", "\\t"]) == 0
    assert "rows          40" in capsys.readouterr().out
    for bad in (";;", ""):
        line = one_line(capsys, "check", str(p), "--format", "csv", "--delimiter", bad)
        assert "--delimiter: must be one character" in line, line


def test_options_the_format_ignores_are_refused_by_their_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "c.csv"
    csv.write_text("".join(f"0.{i},0.{i % 3},{i % 2}\n" for i in range(40)))
    line = one_line(capsys, "check", str(csv), "--n-features", "50")  # was silently ignored
    assert "--n-features applies to LIBSVM and Parquet files" in line, line
    svm = tmp_path / "s.svm"
    svm.write_text("".join(f"{i % 2} 1:0.{i}\n" for i in range(40)))
    line = one_line(capsys, "check", str(svm), "--label-column", "2")
    assert line.endswith("whose label is each line's first token"), line
    assert "--label-column applies to CSV and Parquet" in line and "label_column" not in line


def test_svmlight_qid_tokens_are_named(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    # every row was a dead letter "non-integer index 'qid'", the fix "check --format, ..."
    p = tmp_path / "rank.svm"
    p.write_text("".join(f"{i % 2} qid:{i // 5} 1:0.{i}\n" for i in range(40)))
    line = one_line(capsys, "check", str(p))
    assert "'qid tokens are not supported'" in line and "remove the qid:N tokens" in line


def test_a_value_beyond_float32_loads_without_a_numpy_warning(tmp_path: Path) -> None:
    p = tmp_path / "big.svm"
    p.write_text("1 1:0.5\n-1 1:1e308 2:3\n1 2:0.25\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # was: RuntimeWarning: overflow encountered in cast
        X = data.load(str(p))[0]
    assert X[1, 0] == 1e308
