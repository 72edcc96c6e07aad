"""No-skill baselines of a prequential run and its regression metrics: one accumulator.

A run is only useful if it beats a predictor that ignores the features. :class:`NoSkill`
measures that predictor with the run's own prequential rule (predict, then see the label),
over the rows the run learnt, in the order it learnt them:

* **classification** — the *majority-class* predictor: before each label it predicts the
  class seen most often so far; a tie (the first example included) predicts ``+1``, as a
  zero score does for the learners (their default ``tie="positive"``). ``+1`` is a label
  ``> 0``, anything else ``-1``. Its mistake rate (percent) is the no-skill rate.
  The accumulator also counts the run's own ``+1`` predictions, so a run that predicts one
  class (almost) always is spotted (``top_class_share``).
* **regression** — the *running-mean* predictor: before each label it predicts the mean of
  the labels seen so far (``0`` before the first); its average loss under the run's loss is
  the no-skill loss. The run's own ``rmse`` and ``mae`` come from its predictions, and
  ``r2 = 1 - SSE(run) / SSE(running mean)``: the coefficient of determination against the
  running-mean predictor (not against the final mean, which no prequential predictor knows
  in advance), so ``r2 > 0`` exactly when the run's squared error beats the no-skill one,
  and a live stream has it too.

The replay (``engine.replay.metrics.StreamMetrics``), the in-memory reference loop
(``kernelstream.engine.evaluate``) and the live stream (``engine.live.engine``) all feed this class,
so the figures are derived in one place. They do not depend on how the stream is cut into blocks:
counts are integers, error and loss sums are exact (:func:`metrics.exact_add`), and the running
label sum is a left-to-right float sum carried from block to block (``np.cumsum`` adds in order), so
any cut gives the same figures bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernelstream.engine.exact import _NONFINITE, _SCALE, exact_add, exact_value
from kernelstream.numbers import sig

# ``top_class_share`` at or above this: the run predicts one class (a warning)
ONE_CLASS_SHARE = 0.999
# the figures a :class:`NoSkill` gives (:meth:`NoSkill.figures`), the names of the metrics
# columns and summary fields (a live stream's metrics rows prefix them with ``total_``)
FIGURES = ("noskill_mistake_rate", "noskill_avg_loss", "rmse", "mae", "r2", "top_class_share")


@dataclass
class NoSkill:
    """Prequential no-skill baseline and regression error sums of one stream (see module)."""

    examples: int = 0
    positives: int = 0  # labels > 0 seen (classification)
    predicted_positive: int = 0  # the run's +1 predictions (classification)
    majority_mistakes: int = 0  # the majority-class predictor's mistakes
    label_sum: float = 0.0  # left-to-right sum of the labels (regression)
    mean_loss: int = 0  # exact sum of the running-mean predictor's losses (scaled)
    mean_sq: int = 0  # exact sum of its squared errors
    sq_err: int = 0  # exact sum of the run's squared errors
    abs_err: int = 0  # exact sum of the run's absolute errors

    def add(self, y: np.ndarray, predicted: np.ndarray, classify: bool,
            loss: Callable[[float, float], float] | None = None) -> None:
        """The learnt rows ``y`` (labels) with the run's ``predicted`` labels (classification)
        or values (regression), in learning order; ``loss`` is the run's loss function
        (regression: the running-mean predictor's loss is measured with it)."""
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        n = int(y.shape[0])
        if n == 0:
            return
        predicted = np.asarray(predicted, dtype=np.float64).reshape(-1)
        if classify:
            pos = y > 0
            before = self.positives + np.cumsum(pos) - pos  # +1 labels before each row
            seen = self.examples + np.arange(n)
            majority = np.where(2 * before >= seen, 1.0, -1.0)  # a tie predicts +1
            self.majority_mistakes += int(np.count_nonzero(majority != np.where(pos, 1.0, -1.0)))
            self.positives += int(np.count_nonzero(pos))
            self.predicted_positive += int(np.count_nonzero(predicted > 0))
        else:
            sums = np.cumsum(np.concatenate(([self.label_sum], y)))  # in order: exact carry
            counts = self.examples + np.arange(n, dtype=np.float64)
            mean = np.divide(sums[:-1], counts, out=np.zeros(n), where=counts > 0)
            if loss is not None:
                self.mean_loss = exact_add(self.mean_loss, np.fromiter(
                    map(loss, mean.tolist(), y.tolist()), np.float64, count=n))
            with np.errstate(over="ignore", invalid="ignore"):  # huge targets: inf, summed
                d = mean - y
                err = predicted - y
                d2, err2 = d * d, err * err
            self.mean_sq = exact_add(self.mean_sq, d2)
            self.sq_err = exact_add(self.sq_err, err2)
            self.abs_err = exact_add(self.abs_err, np.abs(err))
            self.label_sum = float(sums[-1])
        self.examples += n

    def add_one(self, y: float, predicted: float, classify: bool,
                loss: Callable[[float, float], float] | None = None) -> None:
        """:meth:`add` of one row, in plain Python (a live stream learns labels one at a
        time): the same arithmetic, so the same figures bit for bit."""
        if classify:
            pos = y > 0
            majority = 1.0 if 2 * self.positives >= self.examples else -1.0
            self.majority_mistakes += majority != (1.0 if pos else -1.0)
            self.positives += pos
            self.predicted_positive += predicted > 0
        else:
            mean = self.label_sum / self.examples if self.examples else 0.0
            if loss is not None:
                self.mean_loss = _exact_add_one(self.mean_loss, float(loss(mean, y)))
            d = mean - y
            self.mean_sq = _exact_add_one(self.mean_sq, d * d)
            e = predicted - y
            self.sq_err = _exact_add_one(self.sq_err, e * e)
            self.abs_err = _exact_add_one(self.abs_err, abs(e))
            self.label_sum += y
        self.examples += 1

    def figures(self, classify: bool) -> dict[str, float | None]:
        """:data:`FIGURES` (None where they do not apply or before any example):
        ``noskill_mistake_rate`` (percent) and ``top_class_share`` (the share of the run's
        predictions that are its most predicted class) for classification;
        ``noskill_avg_loss``, ``rmse``, ``mae`` and ``r2`` for regression."""
        out: dict[str, float | None] = dict.fromkeys(FIGURES)
        n = self.examples
        if not n:
            return out
        if classify:
            out["noskill_mistake_rate"] = 100.0 * self.majority_mistakes / n
            out["top_class_share"] = max(self.predicted_positive, n - self.predicted_positive) / n
            return out
        sse, base = exact_value(self.sq_err), exact_value(self.mean_sq)
        out["noskill_avg_loss"] = exact_value(self.mean_loss) / n
        out["rmse"] = math.sqrt(sse / n)
        out["mae"] = exact_value(self.abs_err) / n
        out["r2"] = 1.0 - sse / base if base > 0 else None
        return out

    @classmethod
    def pooled(cls, parts: list[NoSkill]) -> NoSkill:
        """The counts and sums of several streams together (their :meth:`figures` are then
        pooled over every row, as a run's mistake rate over all its models; ``label_sum``,
        which only predicts a stream's next mean, is not kept)."""
        out = cls()
        for p in parts:
            out.examples += p.examples
            out.positives += p.positives
            out.predicted_positive += p.predicted_positive
            out.majority_mistakes += p.majority_mistakes
            out.mean_loss += p.mean_loss
            out.mean_sq += p.mean_sq
            out.sq_err += p.sq_err
            out.abs_err += p.abs_err
        return out

    def to_json(self) -> list[Any]:
        """JSON-ready (exact sums as decimal strings, the float sum by ``repr``)."""
        return [self.examples, self.positives, self.predicted_positive, self.majority_mistakes,
                self.label_sum, str(self.mean_loss), str(self.mean_sq), str(self.sq_err),
                str(self.abs_err)]

    @classmethod
    def from_json(cls, v: list[Any] | None) -> NoSkill:
        """The accumulator of :meth:`to_json`; a fresh one for ``None`` (a state saved before
        these baselines existed: they then count from the restore on)."""
        if v is None:
            return cls()
        return cls(int(v[0]), int(v[1]), int(v[2]), int(v[3]), float(v[4]),
                   *(int(s) for s in v[5:9]))


def _exact_add_one(total: int, v: float) -> int:
    """``exact_add(total, [v])`` without numpy (the same scaled integer)."""
    if not math.isfinite(v):  # (an overflowing loss): as exact_add counts it
        return total + (-_NONFINITE if v < 0 else _NONFINITE)
    m, e = math.frexp(v)
    return total + (int(m * 9007199254740992.0) << (e - 53 + _SCALE))


# An average loss this many times the no-skill loss (or non-finite) is a diverged learner,
# not a poor one: e.g. oks with loss=square on bank8FM reached an MSE of 1e128.
DIVERGED_FACTOR = 1e6


def diverged(loss: float, noskill: float | None) -> bool:
    """Whether an average ``loss`` says the learner diverged: not finite, or over
    :data:`DIVERGED_FACTOR` times the ``noskill`` loss of the same stream."""
    if not math.isfinite(loss):
        return True
    return (noskill is not None and math.isfinite(noskill) and noskill > 0
            and loss > DIVERGED_FACTOR * noskill)


def skill_warnings(label: str, figures: dict[str, Any]) -> list[str]:
    """One-line warnings about a run's results (``figures``: a summary with ``mistake_rate``
    and ``avg_loss`` besides :data:`FIGURES`, any of them None): diverged (:func:`diverged`),
    not better than the no-skill baseline, or (classification) at least
    :data:`ONE_CLASS_SHARE` of the predictions in one class."""
    out = []
    rate, base = figures.get("mistake_rate"), figures.get("noskill_mistake_rate")
    if rate is not None and base is not None and rate >= base:
        out.append(f"warning: {label}: mistake rate {sig(rate)}% is not better than always "
                   f"predicting the majority class so far ({sig(base)}%)")
    loss, base = figures.get("avg_loss"), figures.get("noskill_avg_loss")
    if loss is not None and diverged(loss, base):
        times = (f", {sig(loss / base)} times the no-skill loss ({sig(base)})"
                 if base and math.isfinite(loss) else "")
        if figures.get("diverged"):  # rows scored NaN: mistakes of infinite loss
            times += f", {figures['diverged']:,} rows scored NaN"
        out.append(f"warning: {label}: the learner diverged: average loss {sig(loss)}{times}; "
                   "its steps are too large for these data (a smaller step size, or a learner "
                   "that stays stable)")
    elif rate is None and loss is not None and base is not None and loss >= base:
        out.append(f"warning: {label}: average loss {sig(loss)} is not better than predicting "
                   f"the running mean of the labels ({sig(base)})")
    share = figures.get("top_class_share")
    if share is not None and share >= ONE_CLASS_SHARE:
        out.append(f"warning: {label}: {sig(100.0 * share)}% of the predictions are one class")
    return out
