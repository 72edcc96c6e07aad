"""What the command line says when it refuses or lists: a read error is the read's (not a
``gamma=auto`` problem), the memory check of an embedded set uses its width, the learners'
listing shows the widths the commands use, ``sigma=auto``, the demo's recorded command line,
stds within rounding noise, and argparse's usage errors as one line with "did you mean"."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernelstream.numbers import sig_pm
from kernelstream.pipelines.cli import build_parser, main
from kernelstream.pipelines.commands import demo

REPLAY = ["--runner", "loop", "-q", "--limit", "40"]


def _err_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _csv(path: Path) -> Path:
    path.write_text("f1,f2,is_phishing\n" + "".join(f"{i % 7},{i % 3},{i % 2}\n"
                                                    for i in range(60)))
    return path


# -- 1: a read error is the same line with or without gamma=auto ------------------------------
@pytest.mark.parametrize("case", ["misspelt label column", "parquet without label", "folder",
                                  "empty", "misspelt data set", "text read as parquet"])
def test_a_read_error_is_the_reads_own_line(tmp_path: Path, case: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    if case == "misspelt label column":
        args = [str(_csv(tmp_path / "p.csv")), "--label-column", "is_phising"]
        expected = "did you mean 'is_phishing'?"
    elif case == "parquet without label":
        pq.write_table(pa.table({"f1": [0.1, 0.2, 0.3], "labl": [1, -1, 1]}),
                       tmp_path / "p.parquet")
        args = [str(tmp_path / "p.parquet")]
        expected = "did you mean 'labl'?"
    elif case == "folder":  # named as such, not "[Errno 21] Is a directory"
        (tmp_path / "d").mkdir()
        args = [str(tmp_path / "d")]
        expected = f"{tmp_path / 'd'} is a directory: give a data file"
    elif case == "empty":  # not the default data set
        args, expected = [""], "DATA is empty"
    elif case == "misspelt data set":
        args, expected = ["germna"], "did you mean 'german'?"
    else:  # pyarrow's line names no file
        args = [str(_csv(tmp_path / "p.csv")), "--format", "parquet"]
        expected = f"{tmp_path / 'p.csv'}: Parquet magic bytes not found"
    lines = []
    for width in ([], ["-p", "gamma=0.5"]):  # the default is gamma=auto
        out = tmp_path / f"run{len(width)}"
        assert main(["replay", *args, "-l", "bogd", *width, *REPLAY, "--out", str(out)]) == 2
        lines.append(_err_line(capsys))
        assert not out.exists()  # refused: no folder left behind either
    assert lines[0] == lines[1], lines
    assert "gamma=auto" not in lines[0] and '"' not in lines[0] and expected in lines[0]


# -- 2: the memory check of an embedded set ---------------------------------------------------
def test_the_memory_check_of_an_embedded_set_uses_its_width(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from kernelstream import data

    big = ["-l", "bogd", "-p", "budget=1000000000", "-p", "gamma=0.5", *REPLAY]
    assert main(["replay", "german", *big, "--out", str(tmp_path / "a")]) == 2
    embedded = _err_line(capsys)
    assert main(["replay", str(data.embedded_path("german")), "--format", "libsvm", *big,
                 "--out", str(tmp_path / "b")]) == 2
    assert embedded == _err_line(capsys)
    assert "of 24 features" in embedded and "first" not in embedded  # the set's own width
    # the learner named once, and a verb that fits any estimate's subject
    assert embedded.startswith("kernelstream replay: error: bogd: budget=1,000,000,000 stored "
                               "rows of 24 features would take "), embedded
    assert main(["replay", "german", "-l", "big=bogd", *big[2:], "--out",
                 str(tmp_path / "c")]) == 2
    assert "error: learner big: bogd: budget=" in _err_line(capsys)


def test_a_memory_refusal_on_a_file_head_says_the_width_is_its_first_rows(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The pre-check sees the first 1,000 records of a file: a refusal at their width says so
    (the file's rows may be wider); with --n-features the width is the file's."""
    path = tmp_path / "wide-later.svm"
    rows = [f"{'+1' if i % 2 else '-1'} 1:{i % 7}.5 3:1" for i in range(1100)]
    rows.append("+1 1:0.5 50:1")  # past the first 1,000 records: a wider row
    path.write_text("\n".join(rows) + "\n")
    big = ["-l", "bogd", "-p", "budget=100000000000", "-p", "gamma=0.5", *REPLAY]
    assert main(["replay", str(path), *big, "--out", str(tmp_path / "a")]) == 2
    line = _err_line(capsys)
    assert "stored rows of 3 features" in line
    assert line.endswith("(width 3: that of the file's first 1,000 records; the whole file "
                         "may be wider)"), line
    assert main(["replay", str(path), *big, "--n-features", "50",
                 "--out", str(tmp_path / "b")]) == 2
    assert "first 1,000 records" not in _err_line(capsys)


# -- 3: the learners' listing ---------------------------------------------------------------
def test_the_listing_shows_auto_widths_and_starts_with_the_defaults(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["learners"]) == 0
    text = capsys.readouterr().out
    names = [ln.split()[0] for ln in text.splitlines()
             if ln and not ln.startswith((" ", "start here", "auto:", "per-round"))]
    assert names[:3] == ["rff-rls", "bpa-s", "raker"]
    assert len(names) == len(set(names))
    gammas = [ln.split() for ln in text.splitlines() if ln.strip().startswith("gamma ")]
    assert gammas and all(g[2] == "auto" for g in gammas), gammas
    assert text.count("\nauto: ") == 1  # said once
    assert main(["learners", "bogd", "--format", "json"]) == 0
    params = {p["name"]: p for p in json.loads(capsys.readouterr().out)["params"]}
    assert params["gamma"]["cli_default"] == "auto" and params["gamma"]["default"] == 0.5
    assert "cli_default" not in params["budget"]


# -- 4: sigma=auto ----------------------------------------------------------------------------
def test_sigma_auto_is_gamma_auto(tmp_path: Path) -> None:
    gammas = []
    for width in ("gamma=auto", "sigma=auto"):
        out = tmp_path / width.replace("=", "-")
        assert main(["replay", "german", "-l", "bogd", "-p", width, *REPLAY, "--out",
                     str(out)]) == 0
        gammas.append(json.loads((out / "summary.json").read_text())["params"]["gamma"])
    assert gammas[0] == gammas[1] and isinstance(gammas[0], float)


def test_sigma_auto_factor_scales_sigma() -> None:
    from kernelstream.pipelines.config import learner_configs

    (c,) = learner_configs(["bogd"], ["sigma=auto*2"], auto_width=lambda: 0.5)
    assert float(c.params["gamma"]) == pytest.approx(0.125)  # sigma doubled: gamma / 4


# -- 5: the demo's command line ---------------------------------------------------------------
def test_the_demo_records_its_command_line_once(tmp_path: Path) -> None:
    argv = ["demo", "--seconds", "3", "--out", str(tmp_path / "d")]
    args = build_parser().parse_args(argv)
    args.pipeline_args = []
    config = demo.DemoConfig.from_args(args, argv)
    stream = config.stream_config("127.0.0.1:9", str(tmp_path / "ck"), 3.0)
    assert list(stream.argv) == argv


# -- 7: small output polish -------------------------------------------------------------------
def test_a_std_within_rounding_noise_prints_as_zero() -> None:
    assert sig_pm(28.0, 4.35e-15) == "28.00 ± 0"
    assert sig_pm(0.0123, 1e-6) == "0.0123 ± 1e-06"  # small, but a spread


def test_a_std_has_its_means_decimals() -> None:
    # one rule: a mean with two decimals gives its std two decimals (not 0.7 beside 1.20)
    assert sig_pm(28.9, 0.7) == "28.90 ± 0.70" and sig_pm(33.0, 1.2) == "33.00 ± 1.20"
    assert sig_pm(28.0, 0.5) == "28.00 ± 0.50" and sig_pm(29.9, 0.2828) == "29.90 ± 0.28"
    assert sig_pm(30.0, 0.001) == "30.00 ± 0.001"  # a spread two decimals would round away
    assert sig_pm(0.591, 0.00142) == "0.591 ± 0.00142"  # a mean below 1: significant digits
    assert sig_pm(2e7, 3e6) == "2e+07 ± 3e+06"


@pytest.mark.parametrize(("argv", "hint"), [
    (["replay", "--runner", "dirct"], "did you mean 'direct'?"),
    (["replay", "--task", "regresion"], "did you mean 'regression'?"),
    (["learners", "--format", "jsn"], "did you mean 'json'?"),
    (["replay", "-R", "x"], "invalid int value"),
    ([], "required"),
])
def test_a_usage_error_is_one_line(argv: list[str], hint: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    line = _err_line(capsys)
    command = " ".join(["kernelstream", *argv[:1]])
    assert line.startswith(f"{command}: error: ") and hint in line
    assert line.endswith(f"see `{command} --help`")
