"""The Python API's replay reads the data as ``kernelstream replay`` does by default: ``scale``
and ``scale_target`` default to ``auto``, resolved by the CLI's rule on the file's first rows
(``pipelines.replay.auto_scale``), the task follows the learners, and the result records what
was decided as ``summary.json`` does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelstream.pipelines import cli
from kernelstream.pipelines.replay.replay import run_replay
from kernelstream.pipelines.replay.replay_args import ReplayConfig


def _spread_csv(path: Path) -> Path:
    """A classification CSV whose feature spreads differ by 1e4 (``--scale auto`` scales)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3)) * np.array([1.0, 100.0, 1e4])
    y = np.where(X[:, 0] + X[:, 1] / 100 > 0, 1, 0)
    path.write_text("".join(f"{a!r},{b!r},{c!r},{t}\n" for (a, b, c), t in
                            zip(X.tolist(), y.tolist(), strict=True)))
    return path


def _target_svm(path: Path) -> Path:
    """A regression file of targets far from unit scale (``--scale-target auto``
    standardises them)."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 3))
    y = 500.0 + 80.0 * np.sin(X[:, 0]) + 40.0 * X[:, 1]
    path.write_text("".join(f"{t!r} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(r))
                            + "\n" for r, t in zip(X.tolist(), y.tolist(), strict=True)))
    return path


def _cli(data: Path, out: Path, learner: list[str]) -> dict[str, Any]:
    assert cli.main(["replay", str(data), *learner, "--permutations", "2", "--runner", "loop",
                     "--out", str(out), "--quiet"]) == 0
    doc: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return doc


@pytest.mark.parametrize(("make", "learner", "params"), [
    (_spread_csv, ["-l", "rff-rls"], {}),
    (_target_svm, ["-l", "rff-rls", "-p", "loss=square"], {"loss": "square"}),
])
def test_run_replay_defaults_are_the_clis(tmp_path: Path, make: Any, learner: list[str],
                                          params: dict[str, Any]) -> None:
    data = make(tmp_path / ("d.csv" if make is _spread_csv else "d.svm"))
    doc = _cli(data, tmp_path / "cli", learner)
    res = run_replay(str(data), [("rff-rls", "rff-rls", params)], tmp_path / "api",
                     permutations=2, runner="loop")
    [ev] = res.eval_results()
    [cfg] = doc["configs"] if "configs" in doc else [doc]
    api = ev.to_summary()
    for key in ("task", "examples", "mistake_rate", "avg_loss", "rmse", "params"):
        assert api[key] == cfg[key], key
    assert res.scale == doc["scale"] and res.auto_scale == doc.get("auto_scale")
    target = res.configs[0].target
    want = doc.get("target_standardised")
    assert (target is None) == (want is None)
    if want is not None:
        assert target == (want["mean"], want["std"])
    if make is _spread_csv:  # the rule fired: scaled, and said why
        assert res.scale == "01" and res.auto_scale
    else:  # the target was standardised (regression features of one spread: kept)
        assert res.scale == "none" and target is not None


def test_auto_is_accepted_and_none_keeps_the_data(tmp_path: Path) -> None:
    data = _spread_csv(tmp_path / "d.csv")
    auto = ReplayConfig.of(str(data), [("p", "perceptron", {"gamma": 0.5})], tmp_path / "a",
                           scale="auto", scale_target="auto", runner="loop")
    assert auto.read.scale == "01" and auto.auto_scale
    kept = ReplayConfig.of(str(data), [("p", "perceptron", {"gamma": 0.5})], tmp_path / "n",
                           scale="none", runner="loop")
    assert kept.read.scale == "none" and kept.auto_scale is None


def test_a_task_the_learners_do_not_have_is_refused(tmp_path: Path) -> None:
    """``task="regression"`` with a classification learner: refused as the CLI refuses
    ``--task regression -l raker``, not a classification run of no examples."""
    path = _target_svm(tmp_path / "r.svm")
    with pytest.raises(ValueError, match="task=regression, but r is a classification learner"):
        run_replay(str(path), (("r", "raker", {}),), tmp_path / "o", task="regression",
                   runner="loop")
    with pytest.raises(ValueError, match="task=classification, but r is a regression"):
        ReplayConfig.of(str(path), (("r", "raker", {"loss": "square"}),), tmp_path / "o",
                        task="classification")
    # the learners' own task, given: accepted
    config = ReplayConfig.of(str(path), (("r", "raker", {"loss": "square"}),), tmp_path / "o",
                             task="regression")
    assert config.read.task == "regression"
