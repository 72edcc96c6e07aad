"""The published-numbers tables (``kernelstream/experiments/published/*.txt``) and their reader."""

from __future__ import annotations

from importlib import resources

import pytest

from kernelstream.experiments import baselines, p0, p2, p4, published


def _names() -> list[str]:
    folder = resources.files("kernelstream.experiments").joinpath("published")
    return sorted(f.name.removesuffix(".txt") for f in folder.iterdir()
                  if f.name.endswith(".txt"))


@pytest.mark.parametrize("name", _names())
def test_every_table_reads_with_rows_of_one_width(name: str) -> None:
    t = published.table(name)
    widths = {len(row) for rows in t.values() for row in rows.values()}
    assert t and len(widths) == 1


def test_numbers_keep_their_printed_kind() -> None:
    assert published.table("p4-2")["a9a"]["oskl"] == (82.01, 0.32, 4.08, 1344)
    assert isinstance(published.table("p4-2")["a9a"]["oskl"][3], int)
    assert published.table("baselines-p4-2")["w7a"]["ogd"] == (98.06, 0.02, 38.16, "10.1k")
    assert published.table("p2-5")["SUSY"]["raker"] == (40, 33.62, 1.20, 6.75)


def test_the_modules_use_the_tables() -> None:
    assert p0.PUBLISHED["svmguide3-01"] == p0.PUBLISHED["svmguide3"]
    assert p0.PUBLISHED["w7a"]["proj-ka"] == (5.430, 1.816, 622.044)
    assert p4.P45_PUB["svmguide3-train"]["bomkc-spa"] == (22.21, 0.24, 2777.1, 92.50, 0.20)
    assert p4.P46_PUB["a9a"]["sd-bpas"] == (17.01, 0.11, 14544, 93.4)
    assert baselines.P3_PUBLISHED["w7a"]["nogd"] == (2.903, 0.009, 17.923)
    assert p2.published("6", "bank8FM", "raker") == (50, 0.0238, 0.0002, 7.93)
    assert p2.T3["elevators"]["oks++"] == (0.0046, 0.0001, 12.75)


def test_a_row_of_the_wrong_width_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "x.txt").write_text("# c\ndataset learner a b\nd l 1\n")
    monkeypatch.setattr(published.resources, "files", lambda _pkg: tmp_path)
    with pytest.raises(ValueError, match=r"published/x.txt: row 'd l 1' has 3 columns, the "
                                         r"header 4"):
        published.table("x")
