"""Wide rows given dense (``--scale 01``, ``--rows dense``): the width estimate never densifies
them and the memory pre-check refuses, with one line, what cannot fit; ``gamma=auto``,
``--scale auto`` and the target's standardisation look at no row beyond ``--limit``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernelstream.data import widths
from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import ParsedRow, iter_file_rows
from kernelstream.data.scaling import scale_minmax
from kernelstream.pipelines.cli import main
from kernelstream.sparse import CSR

DATA = Path(__file__).resolve().parents[2] / "data"
A9A = str(DATA / "a9a_300.svm")
RCV1 = str(DATA / "rcv1_100.svm")


def _rows(X: np.ndarray) -> list[ParsedRow]:
    out = []
    for x in X:
        c = np.flatnonzero(x)
        out.append(ParsedRow(label="1", idx=c + 1, vals=x[c], entity=None))
    return out


@pytest.mark.parametrize("scale", ["01", "pm1"])
def test_scaled_reservoir_is_sparse_with_the_scaled_rows_distances(scale: str) -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 8)) * np.arange(1, 9)
    X[np.abs(X) < 1.0] = 0.0
    X[:, 2] = 5.0  # constant, written by every row
    X[:, 3] = rng.uniform(2.0, 3.0, 60)  # every row writes it: its minimum is not 0
    X[:, 4] = 0.0  # never written
    rows = widths.reservoir_from_rows(_rows(X), scale=scale)
    assert isinstance(rows, CSR) and rows.shape == X.shape
    assert widths.median_gamma(rows) == pytest.approx(
        widths.median_gamma(scale_minmax(X, scale)), rel=1e-9)  # type: ignore[arg-type]


def test_width_estimate_never_densifies_wide_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: CSR) -> np.ndarray:
        raise MemoryError("densified")

    monkeypatch.setattr(CSR, "to_dense", refuse)
    assert widths.file_gamma(ReadOptions(path=RCV1, scale="01")) > 0


def test_gamma_auto_is_estimated_on_the_rows_the_run_learns(tmp_path: Path) -> None:
    # rows whose spread grows along the file: the first 40 give another width than all 300
    rng = np.random.default_rng(5)
    csv = tmp_path / "grow.csv"
    csv.write_text("".join(f"{x[0]:.5f},{x[1]:.5f},{int(x[0] > 0)}\n"
                           for i in range(300) for x in [rng.normal(size=2) * (1 + i / 10)]))
    first = widths.auto_gamma(widths.reservoir_from_rows(_good(str(csv))[:40]))
    assert widths.file_gamma(ReadOptions(path=str(csv), limit=40)) == first
    assert first != widths.file_gamma(ReadOptions(path=str(csv)))
    out = tmp_path / "r"
    assert main(["replay", str(csv), "-l", "bpa-s", "--limit", "40", "--runner", "loop", "-q",
                 "--scale", "none", "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["params"]["gamma"] == first


def _good(path: str) -> list[ParsedRow]:
    return [row for _, _, row in iter_file_rows(ReadOptions(path=path))
            if isinstance(row, ParsedRow)]


@pytest.mark.parametrize("flags", [["--rows", "dense"], ["--scale", "01"]])
def test_dense_wide_rows_that_cannot_fit_are_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        flags: list[str]) -> None:
    # 100 rows of rcv1's 47,000-odd columns need ~36 MiB dense: more than this "machine" has
    monkeypatch.setenv("KERNELSTREAM_MEMORY_LIMIT", str(16 << 20))
    assert main(["replay", RCV1, *flags, "-l", "bpa-s", "-p", "gamma=0.1", "-p", "budget=5",
                 "--runner", "loop", "-q", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "dense rows of" in err and "--limit" in err
    monkeypatch.setenv("KERNELSTREAM_MEMORY_LIMIT", str(1 << 30))  # fits: it runs
    assert main(["replay", RCV1, *flags, "-l", "bpa-s", "-p", "gamma=0.1", "-p", "budget=5",
                 "--limit", "20", "--runner", "loop", "-q", "--out", str(tmp_path / "p")]) == 0


def test_scale_auto_decides_on_the_rows_the_run_learns(tmp_path: Path) -> None:
    # feature 2 spreads 5000 times wider only after row 50: --limit 40 never sees it
    rng = np.random.default_rng(6)
    csv = tmp_path / "late.csv"
    csv.write_text("".join(f"{x[0]:.4f},{x[1]:.4f},{x[2]:.4f},"
                           f"{x[3] * (5000 if i >= 50 else 1):.4f},{i % 2}\n"
                           for i in range(200) for x in [rng.uniform(size=4)]))
    for limit, scale in (("40", "none"), ("200", "01")):
        out = tmp_path / limit
        assert main(["replay", str(csv), "-l", "bpa-s", "--limit", limit, "--runner", "loop",
                     "-q", "--out", str(out)]) == 0
        assert json.loads((out / "summary.json").read_text())["scale"] == scale
