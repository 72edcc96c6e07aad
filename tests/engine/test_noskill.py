"""The no-skill baselines and regression metrics (engine.noskill) by hand, the warnings and
the significant-digit formatting of losses and rates (kernelstream.numbers)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelstream.engine.evaluate import EvalResult, PermutationResult, evaluate
from kernelstream.engine.noskill import NoSkill, skill_warnings
from kernelstream.learners.losses import get_loss
from kernelstream.numbers import sig, sig_pm
from kernelstream.pipelines.commands._runs import format_table

SQUARE = get_loss("square").value


def test_majority_class_by_hand() -> None:
    y = np.array([-1.0, -1.0, 1.0, 1.0, 1.0, -1.0])
    # the majority so far: +1 (tie, none seen), -1, -1, -1 (2 to 1), +1 (tie 2-2), +1 (3-2):
    # wrong at rows 0, 2, 3 and 5
    predicted = np.array([1.0, 1.0, 1.0, -1.0, 1.0, 1.0])
    acc = NoSkill()
    acc.add(y, predicted, classify=True)
    f = acc.figures(True)
    assert f["noskill_mistake_rate"] == pytest.approx(100.0 * 4 / 6)
    assert f["top_class_share"] == pytest.approx(5 / 6)
    assert f["rmse"] is None and f["noskill_avg_loss"] is None


def test_regression_by_hand() -> None:
    y = np.array([1.0, 3.0, 2.0])
    predicted = np.array([0.5, 2.0, 4.0])
    acc = NoSkill()
    acc.add(y, predicted, classify=False, loss=SQUARE)
    f = acc.figures(False)
    # running mean before each label: 0 (none seen), 1, 2 -> errors 1, 2, 0: SSE 5
    assert f["noskill_avg_loss"] == pytest.approx(5 / 3)
    # the run's errors -0.5, -1, 2: SSE 5.25, absolute 3.5
    assert f["rmse"] == pytest.approx(math.sqrt(5.25 / 3))
    assert f["mae"] == pytest.approx(3.5 / 3)
    assert f["r2"] == pytest.approx(1 - 5.25 / 5)
    assert f["noskill_mistake_rate"] is None and f["top_class_share"] is None


@pytest.mark.parametrize("classify", [True, False])
def test_any_cut_and_one_by_one_give_the_same_bits(classify: bool) -> None:
    rng = np.random.default_rng(3)
    n = 700
    y = np.where(rng.random(n) < 0.3, 1.0, -1.0) if classify else rng.normal(5, 1e3, n)
    predicted = np.where(rng.random(n) < 0.5, 1.0, -1.0) if classify else y + rng.normal(0, 3, n)
    whole, cut, one = NoSkill(), NoSkill(), NoSkill()
    whole.add(y, predicted, classify, SQUARE)
    for lo in range(0, n, 97):
        cut.add(y[lo:lo + 97], predicted[lo:lo + 97], classify, SQUARE)
        cut = NoSkill.from_json(cut.to_json())  # a snapshot in between
    for a, b in zip(y.tolist(), predicted.tolist(), strict=True):
        one.add_one(a, b, classify, SQUARE)
    assert whole == cut == one
    assert whole.figures(classify) == one.figures(classify)


def test_the_reference_loop_reports_the_baseline_per_permutation_and_mean() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = np.where(X[:, 0] > 0.8, 1.0, -1.0)
    res = evaluate(X, y, "perceptron", permutations=3, progress=None)
    s = res.to_summary()
    rates = [p["noskill_mistake_rate"] for p in s["per_permutation"]]
    # each permutation by hand: the majority of the labels so far, in that stream's order
    from kernelstream.seeding import permutation

    for r, rate in enumerate(rates):
        pos = neg = wrong = 0
        for label in y[permutation(200, 0, r)]:
            guess = 1.0 if pos >= neg else -1.0
            wrong += guess != label
            pos, neg = pos + (label > 0), neg + (label <= 0)
        assert rate == pytest.approx(100.0 * wrong / 200)
    assert s["noskill_mistake_rate"] == pytest.approx(np.mean(rates))
    assert s["noskill_mistake_rate_std"] == pytest.approx(np.std(rates, ddof=1))


def test_warnings() -> None:
    bad = {"mistake_rate": 9.71, "noskill_mistake_rate": 9.71, "top_class_share": 0.9998}
    lines = skill_warnings("bogd", bad)
    assert len(lines) == 2
    assert lines[0].startswith("warning: bogd: mistake rate 9.71% is not better than")
    assert "99.98% of the predictions are one class" in lines[1]
    assert skill_warnings("bogd", {"mistake_rate": 8.5, "noskill_mistake_rate": 9.71,
                                   "top_class_share": 0.93}) == []
    worse = {"mistake_rate": None, "avg_loss": 4.1e-6, "noskill_avg_loss": 8.2e-7}
    assert skill_warnings("ioks", worse) == [
        "warning: ioks: average loss 4.1e-06 is not better than predicting the running mean "
        "of the labels (8.2e-07)"]
    assert skill_warnings("ioks", {**worse, "avg_loss": 1e-7}) == []


def test_a_diverged_learner_is_warned_about_once() -> None:
    big = {"mistake_rate": None, "avg_loss": 6.086e130, "noskill_avg_loss": 1.2}
    [line] = skill_warnings("rf-oks", big)
    assert line.startswith("warning: rf-oks: the learner diverged: average loss 6.09e+130, "
                           "5.07e+130 times the no-skill loss (1.20)")
    [line] = skill_warnings("oks", {**big, "avg_loss": float("inf")})
    assert "diverged: average loss inf;" in line
    assert "diverged" in skill_warnings("oks", {**big, "avg_loss": float("nan")})[0]
    # a poor learner is not a diverged one
    assert "not better than" in skill_warnings("oks", {**big, "avg_loss": 5.0})[0]


def test_significant_digits() -> None:
    assert sig(6.086174860914408e130) == "6.09e+130"  # not its 130 digits
    assert sig(-2.6e128) == "-2.6e+128"
    assert sig(999999.0) == "999999.00" and sig(1.5e6) == "1.5e+06"
    assert sig(8.2e-07) == "8.2e-07"
    assert sig(0.0123) == "0.0123"
    assert sig(0.98765) == "0.988"
    assert sig(26.666666) == "26.67"
    assert sig(1234.5678) == "1234.57"
    assert sig(0.0) == "0" and sig(None) == "-"
    assert sig_pm(9.7142, 0.0) == "9.71 ± 0"


def test_summary_table_never_prints_a_small_loss_as_zero() -> None:
    res = EvalResult("ioks", "ioks", {}, 0, "ioks", "regression", "square", 10, 2)
    res.runs.append(PermutationResult(0, 10, None, None, 8.2e-07, 3, 0.01, 1000.0,
                                      noskill_avg_loss=1.64e-07, rmse=9.055e-4, mae=7e-4,
                                      r2=-4.0))
    table = format_table([res.to_summary()])
    assert "0.0000" not in table
    head, row = table.splitlines()
    for col in ("no-skill loss", "RMSE", "MAE", "R²"):
        assert col in head
    assert "8.2e-07 ± 0 (square)" in row and "1.64e-07 ± 0" in row
    assert "0.000905 ± 0" in row and "-4.00 ± 0" in row


def test_states_saved_before_the_baseline_still_load() -> None:
    """A replay stream's state from before these baselines (three fields) loads with an
    empty baseline; a current one round-trips it."""
    from kernelstream.engine.replay.metrics import StreamMetrics

    old = StreamMetrics.from_json([[5, 1, "0", 0.5], [2, 0, "0", 0.1], 4])
    assert old.noskill == NoSkill() and old.total.examples == 5
    m = StreamMetrics()
    m.noskill.add(np.array([1.0, -1.0]), np.array([1.0, 1.0]), True)
    assert StreamMetrics.from_json(m.to_json()).noskill == m.noskill


def test_stream_summary_lines_show_the_baseline() -> None:
    from kernelstream.pipelines.live.stream_summary import format_summary

    doc = {"records": 10, "seconds": 1.0, "records_per_second": 10.0, "predictions": 5,
           "outcomes": 4, "delay_p50_ms": 3, "delay_p99_ms": 9, "unlabeled": 0,
           "pending": 1, "rejected": 0, "dead_letters": 0, "metrics": 1, "out": "o",
           "snapshot_epoch": None, "mistake_rate": None, "avg_loss": 8.2e-07,
           "noskill_avg_loss": 1.5e-07, "rmse": 9.06e-4, "mae": 7e-4, "r2": -4.47}
    line = format_summary(doc, None).splitlines()[1]
    assert ("avg loss 8.2e-07 (no-skill 1.5e-07)  RMSE 0.000906  MAE 0.0007  R² -4.47"
            in line)
    doc.update(mistake_rate=9.7142, noskill_mistake_rate=9.71)
    assert "mistake rate 9.71% (no-skill 9.71%)" in format_summary(doc, None)
    # a run stopped before its first snapshot: no "snapshot epoch None"
    assert format_summary(doc, "C").endswith(
        "outputs: o  no snapshot yet (nothing to resume from) in C")
    doc["snapshot_epoch"] = 7
    assert format_summary(doc, "C").endswith("outputs: o  snapshot epoch 7 in C")


def test_the_stopped_line_names_the_snapshot_or_its_absence() -> None:
    from kernelstream.pipelines.live.stream import stopped_line

    assert stopped_line("SIGINT", 0, None, "C", "O") == (
        "kernelstream stream: stopped (SIGINT): 0 records, no snapshot yet (nothing to resume "
        "from) in C")
    assert stopped_line("SIGTERM", 1234, 7, "C", "O") == (
        "kernelstream stream: stopped (SIGTERM): 1,234 records, snapshot epoch 7 in C")
    assert stopped_line("SIGINT", 5, None, None, "O") == (
        "kernelstream stream: stopped (SIGINT): 5 records, outputs in O")
