"""A CSV file read with the wrong label column says which column looks like the label (or
keeps the rows from being read), in ``check`` and ``replay`` alike; the refusals name only
fixes that work (``kernelstream.data.label_hint``, ``data.check.diagnose``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelstream.pipelines import cli

LOOP = ["-q", "-l", "perceptron", "--runner", "loop"]


def refusals(capsys: pytest.CaptureFixture[str], tmp_path: Path, path: Path,
             *extra: str) -> list[str]:
    """The one-line refusal of ``check`` and of ``replay`` (each rc 2)."""
    lines = []
    for argv in (["check", str(path), *extra],
                 ["replay", str(path), *LOOP, *extra, "--out", str(tmp_path / "run")]):
        rc = cli.main(argv)
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert rc == 2 and len(err) == 1, (argv, err)
        lines.append(err[0])
    return lines


def test_a_header_naming_the_label_first_suggests_its_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # was: "60 of 60 records would be rejected (most: 'non-numeric value' ...): check
    # --format, --delimiter, --task or --positive-label"
    p = tmp_path / "t.csv"
    p.write_text("target,f0,f1\n" + "".join(f"{'gh'[i % 2]},0.{i},1.{i}\n" for i in range(60)))
    for line in refusals(capsys, tmp_path, p):
        assert "column 0 is named 'target'" in line and "--label-column target" in line, line
    assert cli.main(["replay", str(p), *LOOP, "--label-column", "target", "--out",
                     str(tmp_path / "ok")]) == 0


def test_a_numeric_label_first_suggests_its_position(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Spambase with its class moved first: the last column (counts) read as labels gave
    "more than two label classes ... --positive-label"; the class column is sorted, so its
    head shows one value."""
    p = tmp_path / "s.csv"
    p.write_text("".join(f"{int(i < 1200)},0.{i % 7},{i * 3 % 101}\n" for i in range(1500)))
    for line in refusals(capsys, tmp_path, p):
        assert "column 0 holds one value (1)" in line and "--label-column 0" in line, line
        assert "--positive-label" not in line


def test_a_text_column_is_named_with_the_way_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "id.csv"
    p.write_text("id,f0,label\n" + "".join(f"u{i},0.{i},{i % 2}\n" for i in range(60)))
    for line in refusals(capsys, tmp_path, p):
        assert "column 0 ('id') is not numeric (e.g. 'u0')" in line and "Parquet" in line, line


def test_three_classes_do_not_send_the_user_to_positive_label(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Replay learns two classes: --positive-label on a 3-class file was refused with the
    very message that suggested it."""
    p = tmp_path / "abc.csv"
    p.write_text("0.1,0.2,a\n0.3,0.1,b\n" + "".join(f"0.{i},0.{i % 3},c\n" for i in range(60)))
    for line in refusals(capsys, tmp_path, p):
        assert "more than two label classes" in line and "two classes" in line, line
        assert "--positive-label" not in line and "--task regression" not in line, line


def test_check_counts_labels_by_value(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    # 1, 1.0, 0 and 0.0 are two classes to the replay; check said "4 distinct"
    p = tmp_path / "v.csv"
    p.write_text("".join(f"0.{i},{['1', '1.0', '0', '0.0'][i % 4]}\n" for i in range(40)))
    assert cli.main(["check", str(p)]) == 0
    out = capsys.readouterr().out
    assert "labels        2 distinct: 1: 20, 0: 20" in out, out
