"""``--sample N`` decides on the rows it draws (``pipelines.replay.sample_rows``): gamma=auto,
``--scale auto``, ``--scale-target auto``, the default learner's rows and the label map are
those of a replay of the drawn file, not of the first rows of the file they are drawn from
(which they were: a file whose head differs from the rest ran another configuration)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelstream.pipelines.cli import main

N = 300  # rows drawn from files of 2,000 whose first 1,000 (every head reader's) differ


def _shifted_csv(path: Path, regression: bool = False) -> Path:
    """1,000 rows of three features of unit spread (labels ``a``; targets of unit spread),
    then 1,000 whose first feature spreads 1,000 times wider (labels ``b``; targets 1,000
    times wider): the head asks for no scaling and a wide width, the file for both."""
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(1000, 3)), rng.normal(size=(1000, 3)) * [1000.0, 1, 1]])
    y: list[str] = (["a"] * 1000 + ["b"] * 1000 if not regression else
                    [f"{v:.6g}" for v in np.concatenate([rng.normal(size=1000),
                                                         1000 * rng.normal(size=1000)])])
    path.write_text("".join(f"{a:.6g},{b:.6g},{c:.6g},{lab}\n"
                            for (a, b, c), lab in zip(X, y, strict=True)))
    return path


def _wide_libsvm(path: Path) -> Path:
    """1,000 rows of indices up to 5 (dense rows: the default learner is rff-rls), then
    1,000 reaching index 3,000 (wider than ``AUTO_SPARSE_WIDTH``: sparse rows, bpa-s)."""
    rng = np.random.default_rng(1)
    lines = []
    for i in range(2000):
        top = 5 if i < 1000 else 3000
        idx = {int(rng.integers(1, top + 1)) for _ in range(3)} | ({top} if i % 2 else set())
        lab = "+1" if rng.random() < 0.5 else "-1"
        lines.append(lab + "".join(f" {j}:{rng.random():.4f}" for j in sorted(idx)) + "\n")
    path.write_text("".join(lines))
    return path


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def _sample_and_drawn(tmp_path: Path, data: Path, *args: str) -> tuple[dict[str, Any],
                                                                       dict[str, Any]]:
    """The summaries of ``replay DATA --sample N`` and of a replay of the rows it drew."""
    common = ["--runner", "loop", "-q", *args]
    assert main(["replay", str(data), "--sample", str(N), "--seed", "5", *common,
                 "--out", str(tmp_path / "sampled")]) == 0
    [drawn] = (tmp_path / "sampled" / ".sample").iterdir()
    copy = tmp_path / f"drawn{drawn.suffix}"
    shutil.copy(drawn, copy)
    assert main(["replay", str(copy), "--seed", "5", *common,
                 "--out", str(tmp_path / "drawn")]) == 0
    return _summary(tmp_path / "sampled"), _summary(tmp_path / "drawn")


# what a replay decides on its data, and what it learns by it
DECIDED = ("scale", "auto_scale", "scale_target", "target_standardised", "default_learner",
           "examples", "task", "mistake_rate", "avg_loss")


def _decided(doc: dict[str, Any]) -> dict[str, Any]:
    return {**{k: doc.get(k) for k in DECIDED}, "params": [c["params"] for c in doc["configs"]]}


def test_sample_scales_and_measures_the_width_on_the_rows_drawn(tmp_path: Path) -> None:
    sampled, drawn = _sample_and_drawn(tmp_path, _shifted_csv(tmp_path / "shift.csv"))
    assert _decided(sampled) == _decided(drawn)
    # the draw's rows ask for scaling (the head's do not), and its width is theirs
    assert sampled["scale"] == "01" and "differ by" in sampled["auto_scale"]
    assert sampled["default_learner"] == {"rows": "dense", "learner": "rff-rls"}


def test_sample_standardises_the_target_of_the_rows_drawn(tmp_path: Path) -> None:
    sampled, drawn = _sample_and_drawn(tmp_path, _shifted_csv(tmp_path / "reg.csv", True),
                                       "--task", "regression", "--scale", "none")
    assert _decided(sampled) == _decided(drawn)
    # the head's targets spread about 1, the draw's (half of them from the tail) far more
    assert sampled["target_standardised"]["std"] > 100


def test_sample_chooses_the_default_learner_by_the_rows_drawn(tmp_path: Path) -> None:
    sampled, drawn = _sample_and_drawn(tmp_path, _wide_libsvm(tmp_path / "wide.libsvm"))
    assert _decided(sampled) == _decided(drawn)
    assert sampled["default_learner"] == {"rows": "sparse", "learner": "bpa-s"}


def test_sample_is_drawn_once_and_before_the_folder_is_claimed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """tune decides its baseline and its replay on one draw; a file that cannot be drawn
    from is refused before the output folder is made."""
    from kernelstream.pipelines.replay import sample_rows

    calls: list[str] = []
    draw = sample_rows.draw_sample

    def counted(src: str, *a: Any, **kw: Any) -> int:
        calls.append(src)
        return draw(src, *a, **kw)

    monkeypatch.setattr(sample_rows, "draw_sample", counted)
    data = _wide_libsvm(tmp_path / "wide.libsvm")
    out = tmp_path / "t"
    assert main(["tune", str(data), "--sample", str(N), "--grid", "c=0.5,2", "--runner", "loop",
                 "-q", "--out", str(out)]) == 0
    assert calls == [str(data)]
    tuned = json.loads((out / "tuned.json").read_text())
    assert tuned["learner"] == "bpa-s"  # the draw's rows are sparse (the head's dense)
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "missing.csv"), "--sample", "5", "-q",
                 "--out", str(tmp_path / "never")]) == 2
    # refused as DATA before any draw (the same line as without --sample)
    assert "missing.csv' is neither a file nor an embedded data set" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def test_tune_sample_tunes_the_width_of_the_rows_drawn(tmp_path: Path) -> None:
    """tune's default grid is around gamma=auto: the draw's, as a tune of the drawn file."""
    data = _shifted_csv(tmp_path / "shift.csv")
    common = ["-l", "rff-rls", "-p", "n_components=50", "--tune-permutations", "1",
              "--runner", "loop", "-q", "--seed", "2"]
    assert main(["tune", str(data), "--sample", str(N), *common,
                 "--out", str(tmp_path / "ts")]) == 0
    [drawn] = (tmp_path / "ts" / ".sample").iterdir()
    copy = tmp_path / "drawn.csv"
    shutil.copy(drawn, copy)
    assert main(["tune", str(copy), *common, "--out", str(tmp_path / "td")]) == 0
    a, b = (json.loads((tmp_path / d / "tuned.json").read_text()) for d in ("ts", "td"))
    assert [c["params"] for c in a["cells"]] == [c["params"] for c in b["cells"]]
    assert a["tuned"] == b["tuned"]
    assert _summary(tmp_path / "ts")["scale"] == "01"


def test_sample_workers_and_summary_decide_on_the_placed_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--workers' processes and ``summary``'s rebuild read the rows in OUT/.sample/ (no
    draw of their own) and so run (record) what the parent decided."""
    from kernelstream.pipelines.commands.summary import submitted_config
    from kernelstream.pipelines.replay import sample_rows

    data = _shifted_csv(tmp_path / "shift.csv")
    args = ["replay", str(data), "--sample", str(N), "-R", "2", "--runner", "loop", "-q"]
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    assert main([*args, "--workers", "2", "--out", str(tmp_path / "two")]) == 0
    one, two = _summary(tmp_path / "one"), _summary(tmp_path / "two")
    assert _decided(one) == _decided(two)

    def no_draw(*_: Any, **__: Any) -> int:
        raise AssertionError("drew the sample again")

    monkeypatch.setattr(sample_rows, "draw_sample", no_draw)
    config = submitted_config({"argv": [*args, "--out", "elsewhere"], "pipeline_args": []},
                              str(tmp_path / "one"))
    assert config.read.scale == one["scale"] == "01"
    assert dict(config.learners[0].params)["gamma"] == one["params"]["gamma"]


def test_sampled_label_map(tmp_path: Path) -> None:
    """Drawn rows of two classes map as their own (the file is not read again); rows of one
    class map as the file does."""
    from kernelstream.data.options import ReadOptions
    from kernelstream.pipelines.replay.sample_rows import sampled_positive_label

    both = tmp_path / "both.csv"
    both.write_text("1,g\n2,h\n")
    one = tmp_path / "one.csv"
    one.write_text("1,g\n2,g\n")
    whole = tmp_path / "whole.csv"
    whole.write_text("1,g\n2,g\n3,h\n")
    assert sampled_positive_label(ReadOptions(path=str(both)), str(tmp_path / "gone")) is None
    assert sampled_positive_label(ReadOptions(path=str(one)), str(whole)) == "h"
    assert sampled_positive_label(ReadOptions(path=str(both), positive_label="g"),
                                  str(whole)) == "g"
