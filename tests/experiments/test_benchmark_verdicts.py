"""The speed benchmarks' verdicts (benchmarks/_verdicts.py): never PASS on noise, and say when a
timing is too short to judge."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _verdicts as v


def test_paired_rate_takes_the_median_of_paired_differences_and_their_spread() -> None:
    big, small = [3.0, 2.7, 2.9], [2.5, 2.5, 2.3]  # differences 0.5, 0.2, 0.6
    r = v.paired_rate(1000, big, small)
    assert r["median_diff"] == pytest.approx(0.5)  # not median(big) - median(small) = 0.4
    assert (r["min_diff"], r["max_diff"]) == pytest.approx((0.2, 0.6))
    assert r["rate"] == pytest.approx(2000)
    assert (r["rate_lo"], r["rate_hi"]) == pytest.approx((1000 / 0.6, 5000))
    assert r["coverage"] == pytest.approx(0.75)


def test_a_difference_within_the_noise_leaves_the_rate_unbounded() -> None:
    # the committed a9a replay: one paired difference was negative (the N-row run faster)
    r = v.paired_rate(47842, [2.9, 2.4, 3.2], [2.5, 2.6, 2.4])
    assert r["rate_hi"] == math.inf
    assert r["rate_lo"] > 0


def test_interval_verdict_passes_or_fails_only_clear_of_the_target() -> None:
    assert v.interval_verdict(0.6, 0.9, 0.5) == "PASS"
    assert v.interval_verdict(0.2, 0.45, 0.5) == "FAIL"
    assert v.interval_verdict(0.3, 1.4, 0.5) == v.INCONCLUSIVE
    assert v.interval_verdict(math.nan, 1.0, 0.5) == v.INCONCLUSIVE


def test_ratio_of_the_committed_a9a_pairs_run_is_inconclusive() -> None:
    """streaming.md's "a9a pairs 0.529 PASS (≥ 0.5)": drains 55,580–85,681 events/s against a
    replay rate whose differences ran from -0.16 to 0.82 s."""
    walls_n = [3.079, 2.701, 2.905, 2.442, 3.248, 3.253, 2.597]
    walls_s = [2.256, 2.471, 2.331, 2.603, 2.680, 2.876, 2.488]
    replay = v.paired_rate(48842 - 1000, walls_n, walls_s)
    drains = [85681.0, 81121.0, 55580.0, 55993.0, 67040.0]
    rv = v.drain_replay_ratio(drains, None, replay, 0.5)
    assert rv["lo"] < 0.5 < rv["hi"]
    assert rv["verdict"] == v.INCONCLUSIVE
    assert rv["ratio"] == pytest.approx(67040.0 / replay["rate"])


def test_ratio_clear_of_the_target_passes_and_a_short_drain_does_not() -> None:
    replay = v.paired_rate(10000, [2.0, 2.1, 2.05], [1.0, 1.1, 1.0])  # 9,524–10,000 ex/s
    rv = v.drain_replay_ratio([9000.0, 9500.0, 9800.0], None, replay, 0.5)
    assert rv["verdict"] == "PASS"
    short = v.drain_replay_ratio([9000.0, 9500.0, 9800.0], "window 0.05 s", replay, 0.5)
    assert short["verdict"] == v.TOO_SHORT


def test_drain_window_under_a_few_status_ticks_is_too_short() -> None:
    assert v.drain_too_short(0.05, 2) is not None  # the small check: under one tick
    assert v.drain_too_short(1.0, 2) is not None  # one interval between two counts
    assert v.drain_too_short(0.5, 6) is None


def test_learner_timing_too_short_by_time_by_an_unfilled_budget_or_a_one_off_cost() -> None:
    # learners.py --rows 2000: bpa-s's pass took 4 ms (0.39x its floor)
    assert "ms" in (v.timing_too_short(0.004, 2000, 201) or "")
    assert v.timing_too_short(0.04, 20000, 201, 0.002) is None
    assert "never" in (v.timing_too_short(0.5, 2000, -1) or "")
    assert "round 846" in (v.timing_too_short(0.5, 2000, 846) or "")  # projectron
    assert v.timing_too_short(0.5, 2000, None) is None  # nothing to fill (random features)
    # --rows 3000: skegd 35 ms a pass, ~20 ms of it its one-off sketch (6.85x its floor)
    f = v.fixed_cost(0.035, 0.0226)
    assert f == pytest.approx(0.0185, abs=1e-3)
    assert "one-off" in (v.timing_too_short(0.035, 3000, 199, f) or "")
    assert v.fixed_cost(0.04, 0.009) == 0.0  # the quarter cheaper per row: nothing one-off
    assert v.first_full_round([1, 5, 200, 200], 200) == 2
    assert v.first_full_round([1, 5], 200) == -1


def test_a_late_budget_blocks_only_a_pass_and_a_one_off_cost_only_a_fail() -> None:
    # skegd at 20,000 rows: 1.03x its floor with a 20-ms one-off cost (56 %): the pass stands
    assert v.timing_too_short(0.038, 20000, 199, 0.021, over=False) is None
    assert v.timing_too_short(0.038, 20000, 199, 0.021, over=True) is not None
    # a budget full late: the learner's rounds were cheaper than the floor's
    assert v.timing_too_short(0.5, 2000, 846, None, over=False) is not None
    assert v.timing_too_short(0.5, 2000, 846, None, over=True) is None
    # too short to time: no verdict either way
    assert v.timing_too_short(0.004, 2000, 201, 0.0, over=False) is not None
    assert v.timing_too_short(0.004, 2000, 201, 0.0, over=True) is not None


def test_a_peer_run_far_less_accurate_than_ours_is_not_a_speed_comparison() -> None:
    # peers.md section 4: KOL's NOGD on magic04 and SUSY_30k, and on a9a
    assert "64.6 %" in (v.peer_not_comparable(0.18623, 0.64553) or "")
    assert v.peer_not_comparable(0.24590, 0.45570) is not None
    assert v.peer_not_comparable(0.17460, 0.17575) is None
    assert v.peer_not_comparable(0.2, math.nan) is not None
