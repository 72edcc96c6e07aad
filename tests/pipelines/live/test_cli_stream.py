"""`kernelstream replay --stream`: the adversarial streams of paper 003 (ALGORITHMS.md §2.6)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernelstream import data
from kernelstream.data import widths
from kernelstream.data.options import ReadOptions
from kernelstream.engine.orders import evaluate_stream
from kernelstream.pipelines.cli import main


def _replay(tmp_path: Path, *args: str) -> tuple[int, dict | None]:
    out = tmp_path / "run"
    code = main(["replay", *args, "--out", str(out), "--quiet"])
    path = out / "summary.json"
    return code, json.loads(path.read_text()) if path.exists() else None


def test_replay_adversarial_stream(tmp_path, capsys) -> None:
    code, s = _replay(tmp_path, "german", "--learner", "skegd", "--stream", "german-1",
                      "--permutations", "2", "-p", "gamma=0.0625", "-p", "horizon=5000",
                      "-p", "theta=0.01")
    assert code == 0, capsys.readouterr().err
    assert s["stream"] == "german-1" and s["examples"] == 5000 and s["permutations"] == 2
    assert [p["examples"] for p in s["per_permutation"]] == [5000, 5000]
    assert 0 < s["mistake_rate"] < 50
    # the CLI result is the library's on the same stream seeds
    X, y = data.load_dataset("german")
    ref = evaluate_stream(X, y, "german-1", "skegd",
                          {"gamma": 0.0625, "horizon": 5000, "theta": 0.01}, permutations=2)
    assert [p["mistakes"] for p in s["per_permutation"]] == [p.mistakes for p in ref.runs]


def test_replay_without_stream_reports_none(tmp_path) -> None:
    code, s = _replay(tmp_path, "german", "--learner", "perceptron", "--limit", "50")
    assert code == 0 and s["stream"] == "none" and s["examples"] == 50


def test_replay_unknown_stream(tmp_path, capsys) -> None:
    code, s = _replay(tmp_path, "german", "--learner", "perceptron", "--stream", "german-3")
    assert code == 2 and s is None
    assert "german-1" in capsys.readouterr().err


# -- the data-driven defaults: those of a plain replay of the same file -------------------------
def _spread_csv(path: Path, regression: bool = False) -> Path:
    """Dense features, the widest 1,000 times the others' spread (``--scale auto`` scales
    them), and a label (+-1) or a target far from unit scale (``--scale-target auto``
    standardises it)."""
    rng = np.random.default_rng(5)
    X = rng.uniform(size=(300, 4)) * np.array([1.0, 1.0, 1.0, 1000.0])
    y = (50 + 20 * X[:, 0] if regression
         else np.where(X[:, 0] + rng.normal(0, 0.2, 300) > 0.5, 1, -1))
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.6f")
    return path


def _both(tmp_path: Path, *args: str) -> tuple[dict, dict]:
    """``replay ARGS`` plainly (loop runner) and with ``--stream german-1``: the summaries."""
    plain = tmp_path / "plain"
    assert main(["replay", *args, "--runner", "loop", "--out", str(plain), "--quiet"]) == 0
    code, s = _replay(tmp_path, *args, "--stream", "german-1")
    assert code == 0 and s is not None
    return json.loads((plain / "summary.json").read_text()), s


@pytest.mark.parametrize("scale", [[], ["--scale", "auto"]])
def test_stream_scales_and_estimates_gamma_as_a_plain_replay(tmp_path: Path, scale: list[str],
                                                             capsys) -> None:
    path = _spread_csv(tmp_path / "x.csv")
    plain, s = _both(tmp_path, str(path), "-l", "bpa-s", *scale)
    assert plain["scale"] == s["scale"] == "01" and s["auto_scale"] == plain["auto_scale"]
    assert s["params"]["gamma"] == plain["params"]["gamma"] != 0.5  # not bpa-s's own 0.5
    assert capsys.readouterr().err.count("scaling features to [0, 1]") == 2  # said both times
    # and learnt with: the library's stream over the scaled rows with that gamma
    X, y = data.load_dataset(str(path), scale="01")
    ref = evaluate_stream(X, y, "german-1", "bpa-s", {"gamma": s["params"]["gamma"]})
    assert [p["mistakes"] for p in s["per_permutation"]] == [p.mistakes for p in ref.runs]
    # the library's own default estimates the width from the same rows (it kept bpa-s's 0.5)
    lib = evaluate_stream(X, y, "german-1", "bpa-s", scale="01")
    assert lib.params["gamma"] == s["params"]["gamma"]
    assert [p.mistakes for p in lib.runs] == [p.mistakes for p in ref.runs]


def test_stream_accepts_gamma_auto(tmp_path: Path) -> None:
    path = _spread_csv(tmp_path / "x.csv")
    plain, s = _both(tmp_path, str(path), "-l", "bpa-s", "-p", "gamma=auto*2", "--scale", "none")
    assert s["scale"] == "none" and s["params"]["gamma"] == plain["params"]["gamma"]
    assert s["params"]["gamma"] == widths.rounded(
        2 * widths.file_gamma(ReadOptions(path=str(path))))


def test_stream_standardises_a_regression_target(tmp_path: Path) -> None:
    path = _spread_csv(tmp_path / "r.csv", regression=True)
    plain, s = _both(tmp_path, str(path), "--task", "regression", "-l", "raker",
                     "-p", "loss=square")
    assert s["scale_target"] == "auto"
    assert s["target_standardised"] == plain["target_standardised"] is not None


def test_stream_records_its_default_learner(tmp_path: Path) -> None:
    """No -l: the stream's default (bpa-s; raker for regression, whatever the rows: measured in
    ``config.default_learner``), recorded as a plain replay records its own."""
    code, s = _replay(tmp_path, str(_spread_csv(tmp_path / "x.csv")), "--stream", "german-1")
    assert code == 0 and s is not None and s["learner"] == "bpa-s"
    assert s["default_learner"] == {"rows": "dense", "learner": "bpa-s", "stream": "german-1"}
    assert s["params"]["gamma"] != 0.5  # gamma=auto
    code, s = _replay(tmp_path, str(_spread_csv(tmp_path / "r.csv", regression=True)),
                      "--task", "regression", "--stream", "german-1", "--overwrite")
    assert code == 0 and s is not None and s["learner"] == "raker"
    assert s["default_learner"]["learner"] == "raker" and s["target_standardised"] is not None


def test_evaluate_stream_refuses_a_scale_it_cannot_know() -> None:
    """``scale`` says how X was loaded ("auto" was decided by then): as evaluate's."""
    X, y = data.load_dataset("german")
    with pytest.raises(ValueError, match="scale must be one of none, 01, pm1, got 'auto'"):
        evaluate_stream(X, y, "german-1", "bpa-s", scale="auto")


def test_a_regression_streams_progress_gives_its_loss() -> None:
    lines: list[str] = []
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3))
    evaluate_stream(X, X[:, 0], "german-1", "raker", {"loss": "square"}, progress=lines.append)
    assert lines and "square loss" in lines[0] and "%" not in lines[0]  # was "-% mistakes"
