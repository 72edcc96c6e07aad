"""No-skill baselines and regression metrics through the command line: the warning of a run
no better than no-skill, summary.json, the metrics rows and the report, checked by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kernelstream.pipelines.cli import main
from kernelstream.seeding import permutation

A9A = Path(__file__).resolve().parents[1] / "data" / "a9a_300.svm"


def _labels(path: Path) -> list[float]:
    return [float(line.split()[0]) for line in path.read_text().splitlines() if line.strip()]


def _majority_rate(labels: list[float]) -> float:
    """The majority-class predictor's mistake rate, one label at a time (a tie: +1)."""
    pos = neg = wrong = 0
    for y in labels:
        wrong += (1.0 if pos >= neg else -1.0) != y
        pos, neg = pos + (y > 0), neg + (y <= 0)
    return 100.0 * wrong / len(labels)


def test_constant_predictions_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Gaussian width so narrow that every new example scores 0: +1 always (the tie rule),
    on data where -1 is the majority: both warnings, on stderr, after the table."""
    rng = np.random.default_rng(1)
    rows = [("+1" if rng.random() < 0.1 else "-1")
            + "".join(f" {j}:{float(rng.normal())!r}" for j in range(1, 6)) for _ in range(400)]
    data = tmp_path / "skewed.svm"
    data.write_text("\n".join(rows) + "\n")
    assert main(["replay", str(data), "--out", str(tmp_path / "run"), "--quiet",
                 "-l", "perceptron", "-p", "gamma=1e9"]) == 0
    err = capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["top_class_share"] == 1.0
    assert summary["noskill_mistake_rate"] == pytest.approx(
        _majority_rate([float(rows[i].split()[0]) for i in permutation(400, 0, 0)]))
    lines = [ln for ln in err.splitlines() if "warning:" in ln]
    assert len(lines) == 2, err
    assert lines[0].startswith("kernelstream: warning: perceptron: mistake rate ")
    assert "is not better than always predicting the majority class so far" in lines[0]
    assert lines[1] == ("kernelstream: warning: perceptron: 100.00% of the predictions are "
                        "one class")


def test_good_run_has_no_warning_and_the_baseline_by_hand(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["replay", str(A9A), "--out", str(out), "-l", "bogd",
                 "--permutations", "2"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err, captured.err
    head = captured.out.splitlines()[0]
    assert "no-skill (%)" in head
    labels = _labels(A9A)
    by_hand = [_majority_rate([labels[i] for i in permutation(len(labels), 0, r)])
               for r in range(2)]
    s = json.loads((out / "summary.json").read_text())
    assert [p["noskill_mistake_rate"] for p in s["per_permutation"]] == pytest.approx(by_hand)
    assert s["noskill_mistake_rate"] == pytest.approx(np.mean(by_hand))
    assert s["noskill_mistake_rate_std"] == pytest.approx(np.std(by_hand, ddof=1))
    assert s["mistake_rate"] < s["noskill_mistake_rate"]
    assert s["rmse"] is None and s["r2"] is None
    # the final metrics row of each permutation carries the same figure (summary.json is
    # read back from these rows)
    final = pq.read_table(out / "metrics").to_pylist()
    got = {r["permutation"]: r["noskill_mistake_rate"] for r in final if r["final"]}
    assert [got[0], got[1]] == [p["noskill_mistake_rate"] for p in s["per_permutation"]]


def test_regression_metrics_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 2))
    target = 3.0 + 2.0 * X[:, 0] - X[:, 1] + rng.normal(0, 0.1, 120)
    data = tmp_path / "reg.svm"
    data.write_text("".join(f"{t!r} 1:{a!r} 2:{b!r}\n"
                            for t, (a, b) in zip(target.tolist(), X.tolist(), strict=True)))
    out = tmp_path / "run"
    assert main(["replay", str(data), "--out", str(out), "--task", "regression",
                 "-l", "ioks", "-p", "loss=square"]) == 0
    text = capsys.readouterr().out
    for col in ("no-skill loss", "RMSE", "MAE", "R²"):
        assert col in text.splitlines()[0]
    p = pq.read_table(out / "predictions").sort_by("position").to_pydict()
    y, f = p["label"], p["predicted"]
    mean_sq = sq = ab = 0.0
    total = 0.0
    for i, (label, guess) in enumerate(zip(y, f, strict=True)):
        mean = total / i if i else 0.0  # the running mean before the label
        mean_sq += (mean - label) ** 2
        total += label
        sq += (guess - label) ** 2
        ab += abs(guess - label)
    s = json.loads((out / "summary.json").read_text())
    n = len(y)
    assert n == 120
    assert s["noskill_avg_loss"] == pytest.approx(mean_sq / n)  # the square loss
    assert s["rmse"] == pytest.approx(math.sqrt(sq / n))
    assert s["mae"] == pytest.approx(ab / n)
    assert s["r2"] == pytest.approx(1 - sq / mean_sq)
    assert s["avg_loss"] == pytest.approx(sq / n)
    assert s["noskill_mistake_rate"] is None and s["top_class_share"] is None
    final = [r for r in pq.read_table(out / "metrics").to_pylist() if r["final"]]
    assert final[0]["r2"] == pytest.approx(s["r2"]) and final[0]["mae"] == pytest.approx(s["mae"])
    # the report: the figures in its table, the no-skill reference in its curves
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(page)]) == 0
    html = page.read_text()
    assert "<th>no-skill</th><th>RMSE</th><th>MAE</th><th>R²</th>" in html
    assert "Dotted: the no-skill reference of the same streams, predicting the running mean" \
        in html
