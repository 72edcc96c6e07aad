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


# A learner's timed pass must be long next to what moves it on a shared 2-core machine: one
# scheduler time slice (3-24 ms under Linux CFS) taken by another process, and the pass's fixed
# cost (the learner's construction and first-row set-up: buffers, Ω draws, ~1-10 ms). At
# 0.2 s one such event moves a pass by at most ~10 %, inside the 1.5x targets' margin; a
# 3,000-row pass of a 2-µs learner (6 ms) is mostly such events.
MIN_PASS_SECONDS = 0.2
# and it must be mostly rounds at the full budget, the state the floor (a row against B
# points) models: the budget full by a quarter of the rows at the latest
MAX_FILL_FRACTION = 0.25


def timing_too_short(seconds: float, rows: int, fill_round: int | None = None) -> str | None:
    """Why a learner's timing (median seconds of one pass over ``rows`` rounds; the round at
    which its budget filled, None if it has none to fill, -1 if it never filled) cannot be
    judged against its floor, or None."""
    why = []
    if seconds < MIN_PASS_SECONDS:
        why.append(f"pass {1e3 * seconds:.0f} ms < {1e3 * MIN_PASS_SECONDS:.0f} ms")
    if fill_round is not None and (fill_round < 0 or fill_round > MAX_FILL_FRACTION * rows):
        why.append("budget never full" if fill_round < 0 else
                   f"budget full only at round {fill_round:,} of {rows:,}")
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
