"""`kernelstream replay --stream`: the adversarial streams of paper 003 (ALGORITHMS.md §2.6)."""

from __future__ import annotations

import json
from pathlib import Path

from kernelstream import data
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


def test_stream_progress_of_a_regression_names_its_loss() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=200)
    msgs: list[str] = []
    res = evaluate_stream(X, y, "german-1", "rff-rls", {"loss": "square", "n_components": 50},
                          progress=msgs.append)
    assert res.runs[-1].mistake_rate is None
    assert msgs == [f"[rff-rls] stream german-1 1/1: average loss "
                    f"{res.runs[-1].avg_loss:.3g}"] and "mistakes" not in msgs[0]
