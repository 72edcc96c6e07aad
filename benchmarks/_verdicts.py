"""Verdicts of the speed benchmarks that must not pass on noise (pure functions, no timing).

A figure measured on a shared machine is an interval, not a number: these helpers turn
repeated measurements into one (distribution-free, from the order statistics) and give
``PASS`` / ``FAIL`` only when the whole interval is on one side of a target, else
``inconclusive``; and they say when a timing is too short to mean anything at all.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

INCONCLUSIVE = "inconclusive"
TOO_SHORT = "too short"

# --- intervals ----------------------------------------------------------------------------------


def median_coverage(n: int) -> float:
    """Probability that the min–max range of ``n`` independent samples holds their
    distribution's median: ``1 − 2·0.5ⁿ`` (both ends miss it only if all ``n`` fall on one
    side). 0.94 at n = 5, 0.98 at n = 7; 0 for fewer than 2 samples."""
    return 0.0 if n < 2 else 1.0 - 2.0 * 0.5 ** n


def paired_rate(rows: int, big: Sequence[float], small: Sequence[float]) -> dict[str, Any]:
    """The rate ``rows / (wall(big) − wall(small))`` of paired runs (each big run beside its
    small one, so drift between runs cancels): the median of the paired differences, their
    spread (min, max, interquartile range) and the rate's interval from the min–max of the
    differences (a difference ≤ 0 leaves the rate unbounded above: ``hi`` = inf), which
    holds the median difference with probability :func:`median_coverage`."""
    if len(big) != len(small) or not big:
        raise ValueError("paired_rate: needs as many big as small runs, at least one")
    diffs = [b - s for b, s in zip(big, small, strict=True)]
    med, lo_d, hi_d = statistics.median(diffs), min(diffs), max(diffs)
    q = statistics.quantiles(diffs, n=4, method="inclusive") if len(diffs) > 1 else [med] * 3

    def rate(d: float) -> float:
        return rows / d if d > 0 else math.inf

    return {"diffs": diffs, "median_diff": med, "min_diff": lo_d, "max_diff": hi_d,
            "iqr_diff": q[2] - q[0], "rate": rate(med) if med > 0 else math.nan,
            "rate_lo": rate(hi_d) if hi_d > 0 else math.nan, "rate_hi": rate(lo_d),
            "coverage": median_coverage(len(diffs))}


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, median, max) of repeated measurements of one quantity."""
    return min(values), statistics.median(values), max(values)


def ratio_interval(num: tuple[float, float, float],
                   den: tuple[float, float, float]) -> tuple[float, float, float]:
    """(lo, mid, hi) of ``num / den`` for two positive quantities each given as (lo, mid, hi):
    the extremes of the quotient over both intervals."""
    lo = num[0] / den[2] if den[2] > 0 else 0.0
    hi = num[2] / den[0] if den[0] > 0 else math.inf
    return lo, num[1] / den[1], hi


def interval_verdict(lo: float, hi: float, target: float) -> str:
    """``PASS`` when the whole interval ``[lo, hi]`` is at or above ``target``, ``FAIL`` when
    all of it is below, else :data:`INCONCLUSIVE` (NaN ends are inconclusive too: never a
    verdict on noise)."""
    if math.isnan(lo) or math.isnan(hi):
        return INCONCLUSIVE
    if lo >= target:
        return "PASS"
    if hi < target:
        return "FAIL"
    return INCONCLUSIVE


# --- timings too short to measure ---------------------------------------------------------------

# The stream's status file is rewritten every ~0.1 s: a drain window must hold a few of its
# ticks (and as many distinct counts) for its two ends to be read at all.
STATUS_TICK_S = 0.1
MIN_DRAIN_TICKS = 3


def drain_too_short(window_s: float, samples: int) -> str | None:
    """Why a drain window (first count past 10 % to the last, in seconds, with ``samples``
    distinct status counts in it) is too short to give a rate, or None."""
    if window_s < MIN_DRAIN_TICKS * STATUS_TICK_S or samples < MIN_DRAIN_TICKS:
        return (f"window {window_s:.2f} s, {samples} status counts: under "
                f"{MIN_DRAIN_TICKS} status ticks of {STATUS_TICK_S:g} s")
    return None


# A learner's timed pass must span several scheduler time slices (CFS's base slice is 3 ms):
# shorter, one stall, or the first touch of a floor's or learner's buffers (~ms each), is much
# of the pass, and the review's 4-ms passes (2,000 rows at 2 µs) put bpa-s at 0.39x its floor.
# 15 ms is 5 slices, and keeps the default runs (20,000 rows, ≥ 0.75 µs a round; magic04's
# 19,020 rows at ~1 µs) judged.
MIN_PASS_SECONDS = 0.015
# It must be mostly rounds at the full budget, the state the floor (a row against B points)
# models: the budget full by a quarter of the rows at the latest.
MAX_FILL_FRACTION = 0.25
# And the pass must not be mostly a one-off cost (construction, first-row set-up, a stage
# switch: SKEGD's sketch costs ~20 ms once), which a stream amortises and a short pass does
# not (the review's skegd at 3,000 rows: 6.85x its floor). The one-off cost is estimated from
# a pass over the first quarter of the rows: t(n) = F + c n, t(n/4) = F + c n/4.
MAX_FIXED_SHARE = 0.5


def fixed_cost(t_full: float, t_quarter: float) -> float:
    """The one-off seconds ``F`` of ``t = F + c·rows``, from a pass over all rows (``t_full``)
    and over their first quarter (``t_quarter``); 0 when the quarter is the cheaper per row."""
    return max(0.0, (4.0 * t_quarter - t_full) / 3.0)


def timing_too_short(seconds: float, rows: int, fill_round: int | None = None,
                     fixed_s: float | None = None, over: bool | None = None) -> str | None:
    """Why a learner's timing (median seconds of one pass over ``rows`` rounds; the round at
    which its budget filled, None if it has none to fill, -1 if it never filled; its one-off
    cost, :func:`fixed_cost`) cannot be judged against its floor, or None. With ``over`` (the
    ratio to the floor is over its target, or not), only what could have changed that verdict
    counts: a budget filled late makes the learner's rounds cheaper than the floor's (it can
    only make a pass too easy), a one-off cost makes the pass dearer (it can only make a fail);
    a pass too short to time counts either way."""
    why = []
    if seconds < MIN_PASS_SECONDS:
        why.append(f"pass {1e3 * seconds:.0f} ms < {1e3 * MIN_PASS_SECONDS:.0f} ms")
    if fill_round is not None and over is not True and (
            fill_round < 0 or fill_round > MAX_FILL_FRACTION * rows):
        why.append("budget never full" if fill_round < 0 else
                   f"budget full only at round {fill_round:,} of {rows:,}")
    if (fixed_s is not None and over is not False and seconds > 0
            and fixed_s > MAX_FIXED_SHARE * seconds):
        why.append(f"one-off cost {1e3 * fixed_s:.0f} ms = {100 * fixed_s / seconds:.0f} % "
                   "of the pass")
    return "; ".join(why) or None


def first_full_round(n_sv: Sequence[int] | Any, budget: int) -> int:
    """The first round (0-based) after which ``n_sv`` (the learner's #SV after each round)
    reached ``budget``; -1 if it never did."""
    for i, v in enumerate(n_sv):
        if int(v) >= budget:
            return i
    return -1


def drain_replay_ratio(drain_rates: Sequence[float], too_short: str | None,
                       replay: dict[str, Any], target: float) -> dict[str, Any]:
    """The stream's drain rate over the file replay's rate (:func:`paired_rate`'s dict) as
    (lo, mid, hi) from the drain runs' min–max and the replay's interval, and its verdict
    against ``target``: :data:`TOO_SHORT` when a drain window was too short to measure, else
    :func:`interval_verdict`'s."""
    lo, mid, hi = ratio_interval(spread(drain_rates),
                                 (replay["rate_lo"], replay["rate"], replay["rate_hi"]))
    if too_short:
        verdict = TOO_SHORT
    else:
        verdict = interval_verdict(lo, hi, target)
    return {"lo": lo, "ratio": mid, "hi": hi, "verdict": verdict}


# A peer timed beside us must have run the same algorithm: the same rows, order, budget and
# steps give mistake rates within a point or two (float against double and another
# eigen-solver moved KOL's NOGD on a9a by 0.1 point); 5 points more means its run went wrong
# (KOL's NOGD made 64.6 % mistakes on magic04, worse than no-skill's 35 %, when the values we
# wrote overflowed its parser), and its speed is not that of the algorithm.
PEER_ERROR_GAP = 0.05


def peer_not_comparable(ours: float, peer: float, gap: float = PEER_ERROR_GAP) -> str | None:
    """Why a peer's run (its mistake rate ``peer``, ours ``ours``, fractions) cannot be
    compared with ours on speed, or None."""
    if peer != peer:
        return "did not report its mistake rate"
    if peer > ours + gap:
        return (f"made {100 * peer:.1f} % mistakes against our {100 * ours:.1f} % "
                f"(more than {100 * gap:.0f} points worse: not the same algorithm's run)")
    return None
