"""The test-then-train step and loop: the one place a learner is run over a stream (no Beam).

The step (score a row with the hypothesis as it stands, then learn it) and the outcome rule
(predicted label, mistake, loss of a pre-update score) are written here once, in the forms
their callers need, and nowhere else:

* :func:`step_block` (a block, row by row) and :func:`step_row` (one row): the learner's
  ``predict_learn_many`` and ``step``, the same per-round code, bit-identical whatever the
  block sizes;
* :func:`score_row` and :func:`learn_row`: the two halves of the step apart in time, for a
  live event predicted on arrival and learnt when its label comes
  (:mod:`kernelstream.engine.events`);
* :func:`predicted_labels` / :func:`predicted_label` (the tie rule), :func:`judge` /
  :func:`judge_one` (mistakes and losses) and :func:`outcomes`.

:class:`PrequentialPass` feeds a learner consecutive blocks of rows through its batch path
``predict_learn_many``, which scores every row with the hypothesis as it stands and then learns
it, and is bit-identical to the per-example loop whatever the block sizes. It keeps the
pre-update scores and the seconds spent inside ``predict_learn_many`` only. Every driver runs
it: the in-memory evaluation (``kernelstream.engine.evaluate``: permutations, adaptive blocks,
progress lines), the adversarial streams (``kernelstream.engine.orders``), one block of a stream
at a time (:class:`~kernelstream.engine.replay.core.ReplayLearner`, used by the loop runner and
the Beam DoFn) and the speed benchmarks' passes. The live engine calls the step's functions per
event.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kernelstream.learners.base import Y_MAX, Learner
from kernelstream.learners.losses import Loss, get_loss
from kernelstream.sparse import CSR

# Adaptive blocks are sized to take about this long, so progress stays responsive for slow
# learners while fast learners do not pay the per-call overhead of predict_learn_many too
# often. The block size never changes the result.
TARGET_BLOCK_SECONDS = 0.2
MIN_BLOCK, MAX_BLOCK = 16, 65536


class PrequentialPass:
    """One test-then-train pass of ``model`` over the rows ``X[rows]``, ``y[rows]`` (all rows,
    in order, when ``rows`` is None), in blocks.

    ``block_size`` fixes the rows per ``predict_learn_many`` call; None sizes blocks to take
    about :data:`TARGET_BLOCK_SECONDS` each. ``skip_rejected``: a block the learner refuses
    with a ``ValueError`` (the batch path validates a block before changing anything) is
    reported by :meth:`blocks` and passed over, its scores left NaN, instead of ending the pass
    (meant for blocks of one row). Rows are gathered per block, so a permuted pass never copies
    the whole data set.
    """

    def __init__(self, model: Learner, X: np.ndarray | CSR, y: np.ndarray,
                 rows: np.ndarray | None = None, *, block_size: int | None = None,
                 skip_rejected: bool = False,
                 target: tuple[float, float] | None = None) -> None:
        if block_size is not None and block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.model, self.X, self.y, self.rows = model, X, y, rows
        self.n = int(X.shape[0] if rows is None else rows.shape[0])
        self.scores = np.full(self.n, np.nan)
        self.seconds = 0.0  # inside predict_learn_many only
        self.done = 0  # rows passed (learnt or rejected)
        self.block_size = block_size
        self.skip_rejected = skip_rejected
        self.target = target

    def _next_size(self, size: int, rows: int, dt: float) -> int:
        """The next adaptive block size after ``rows`` rows took ``dt`` seconds. Never more
        rows than done so far: an unbudgeted learner's cost per row grows with its #SV, which
        can then at most double within a block, so a block cannot overshoot by much."""
        rate = rows / max(dt, 1e-9)
        return int(min(max(rate * TARGET_BLOCK_SECONDS, size / 4, MIN_BLOCK),
                       max(self.done, MIN_BLOCK), MAX_BLOCK))

    def blocks(self) -> Iterator[tuple[int, int, ValueError | None]]:
        """Run the pass; after each block yield ``(lo, hi, error)``: rows ``lo .. hi-1`` were
        learnt (``error`` None) or refused (``skip_rejected``). The learner is left as the
        block left it, so a caller may inspect it (support vectors, selected kernel)."""
        size = self.block_size or MIN_BLOCK * 4
        while self.done < self.n:
            lo, hi = self.done, min(self.n, self.done + size)
            if self.rows is None:
                Xb, yb = self.X[lo:hi], self.y[lo:hi]
            else:
                idx = self.rows[lo:hi]
                Xb, yb = self.X[idx], self.y[idx]
            error = None
            t0 = time.perf_counter()
            try:
                self.scores[lo:hi] = step_block(self.model, Xb, yb, target=self.target)
            except ValueError as exc:
                if not self.skip_rejected:
                    raise
                error = exc
            dt = time.perf_counter() - t0
            self.seconds += dt
            self.done = hi
            if self.block_size is None:
                size = self._next_size(size, hi - lo, dt)
            yield lo, hi, error

    def run(self) -> PrequentialPass:
        """The whole pass at once (no per-block inspection)."""
        for _ in self.blocks():
            pass
        return self


# -- the step ----------------------------------------------------------------------------------


def step_block(model: Learner, X: Any, y: Any, n_sv: np.ndarray | None = None,
               target: tuple[float, float] | None = None) -> np.ndarray:
    """Test then train over a block: each row scored with the hypothesis as the rows before it
    left it, then learnt; the pre-update scores (``n_sv``: the support vectors after each row
    into it). Bit-identical to :func:`step_row` row by row. A ``ValueError`` of the block's
    validation comes before any update (the learner is unchanged).

    ``target = (mean, std)`` (a configuration's ``LearnerConfig.target``): the learner learns
    ``(y - mean) / std`` and its scores come back as ``mean + std * score``, so the scores, and
    every loss judged from them, are in the target's own units."""
    if target is None:
        return model.predict_learn_many(X, y, n_sv=n_sv)
    mean, std = target
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # a huge target: refused just below
        z = (y - mean) / std
    bad = ~(np.abs(z) <= Y_MAX)
    if bad.any():
        i = int(np.argmax(bad))
        _refuse_target(model, float(y.flat[i]), float(z.flat[i]))
    return mean + std * model.predict_learn_many(X, z, n_sv=n_sv)


def _standardise(model: Learner, y: Any, mean: float, std: float) -> float:
    """``(y - mean) / std``, or the learner's refusal naming ``y`` as given."""
    z = (float(y) - mean) / std
    if not abs(z) <= Y_MAX:
        _refuse_target(model, float(y), z)
    return z


def _refuse_target(model: Learner, y: float, z: float) -> None:
    """The ValueError of a target the learner would refuse once standardised: its own message
    on the target as given (not the standardised inf), else one naming both."""
    model._check_y(y)
    raise ValueError(f"{model.name}: regression target {y!r} is {z!r} standardised: it must "
                     f"be finite with |y| <= {Y_MAX:g} (the bound that keeps the rounds finite)")


def step_row(model: Learner, x: Any, y: Any,
             target: tuple[float, float] | None = None) -> float:
    """Test then train on one labelled row: its pre-update score (``target``: as for
    :func:`step_block`, with the same arithmetic, so a block and its rows agree bit for
    bit)."""
    if target is None:
        return model.step(x, y)
    mean, std = target
    return mean + std * model.step(x, _standardise(model, y, mean, std))


def score_row(model: Learner, x: Any, target: tuple[float, float] | None = None) -> float:
    """The first half of a step apart in time: ``x`` scored with the hypothesis as it stands.
    The learner's score cache (the round's work kept for a ``learn_one`` of the same x, e.g.
    OKS's random kernel draw) is dropped, so the later :func:`learn_row` scores afresh, as a
    model restored in between (which has no cache) does: the result does not depend on a
    restart. ``target``: as for :func:`step_block`, the score in the target's units."""
    score = model.predict_one(x)
    model._drop_pending()
    if target is None:
        return score
    mean, std = target
    return mean + std * score


def learn_row(model: Learner, x: Any, y: Any,
              target: tuple[float, float] | None = None) -> None:
    """The second half: learn the labelled row ``x`` with the hypothesis as it stands now
    (``target``: ``y`` standardised by it first, as :func:`step_block` learns it)."""
    if target is None:
        model.learn_one(x, y)
        return
    mean, std = target
    model.learn_one(x, _standardise(model, y, mean, std))


# -- the outcome rule ---------------------------------------------------------------------------


def learner_loss(learner: Learner) -> Loss:
    """The loss a prequential run measures: the learner's training loss when it has one (a
    ``loss`` parameter or attribute), else hinge for classification and square loss
    ``(f - y)**2`` (no 1/2, as P2 reports it) for regression."""
    loss = getattr(learner, "loss", None)
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str):
        return get_loss(loss)
    return get_loss("square" if learner.task == "regression" else "hinge")


def predicted_label(model: Learner, score: float) -> float:
    """What a pre-update ``score`` predicts: the learner's ``predict_label`` (its tie rule for a
    zero score) for classification, the score itself for regression. A NaN score (the learner
    diverged) predicts NaN, no class: a mistake whatever the label."""
    if model.task != "classification":
        return score
    return model.predict_label(score) if score == score else math.nan


def predicted_labels(model: Learner, scores: np.ndarray) -> np.ndarray:
    """:func:`predicted_label` of every score (regression: ``scores`` itself). The base class's
    ``predict_label`` (the sign; ``tie`` for zero) is applied as one array expression, another
    learner's row by row; a NaN score predicts NaN."""
    if model.task != "classification":
        return scores
    if type(model).predict_label is Learner.predict_label:
        tie = model.predict_label(0.0)
        out = np.where(scores > 0.0, 1.0, np.where(scores < 0.0, -1.0, tie))
    else:
        out = np.fromiter(map(model.predict_label, scores.tolist()), np.float64,
                          count=int(scores.shape[0]))
    diverged = np.isnan(scores)
    if diverged.any():
        out[diverged] = math.nan
    return out


def judge(model: Learner, scores: np.ndarray, y: np.ndarray,
          loss_fn: Callable[[float, float], float] | None = None,
          ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """``(predicted, wrong, loss)`` of pre-update ``scores`` against labels ``y``:
    :func:`predicted_labels`, ``predicted != y`` (booleans; None for regression) and each
    row's ``loss_fn(score, y)`` (default :func:`learner_loss`'s). :func:`judge_one` of each
    row. A NaN score is the learner's divergence (a rejected row never reaches here): a
    mistake (its predicted NaN is no label) of infinite loss, never a loss that a hinge's
    ``max(0, nan)`` would make 0 and an average would hide."""
    predicted = predicted_labels(model, scores)
    wrong = predicted != y if model.task == "classification" else None
    if loss_fn is None:
        loss_fn = learner_loss(model).value
    n = int(scores.shape[0])
    try:
        loss = np.fromiter(map(loss_fn, scores.tolist(), y.tolist()), np.float64, count=n)
    except OverflowError:  # a loss function of the learner's own that raises: inf there
        fn = loss_fn
        loss = np.fromiter((_loss(fn, f, t) for f, t in zip(scores.tolist(), y.tolist(),
                                                             strict=True)), np.float64, count=n)
    diverged = np.isnan(scores)
    if diverged.any():
        loss[diverged] = math.inf
    return predicted, wrong, loss


def _loss(loss_fn: Callable[[float, float], float], score: float, y: float) -> float:
    """``loss_fn(score, y)``, ``inf`` where it overflows or ``score`` is NaN (:func:`judge`):
    judging a row never ends a run (the library's losses return inf themselves; a learner's
    own loss may raise)."""
    if score != score:
        return math.inf
    try:
        return float(loss_fn(score, y))
    except OverflowError:
        return math.inf


def judge_one(classify: bool, score: float, predicted: float, y: float,
              loss_fn: Callable[[float, float], float]) -> tuple[bool | None, float]:
    """:func:`judge` of one row whose ``predicted`` value (:func:`predicted_label`) was made
    earlier: ``(wrong, loss)``, ``wrong`` None for regression (``classify`` false)."""
    return (predicted != y if classify else None), _loss(loss_fn, score, y)


def outcomes(model: Learner, scores: np.ndarray,
             y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(predicted, mistake, loss)`` of pre-update ``scores`` against labels ``y``, as the
    replay's outputs hold them: :func:`judge`'s, with mistakes 1/0 (``int8``) for
    classification and -1 for regression."""
    predicted, wrong, loss = judge(model, scores, y)
    if wrong is None:  # regression: the arrays belong to the caller, apart from ``scores``
        return scores.copy(), np.full(int(scores.shape[0]), -1, dtype=np.int8), loss
    return predicted, wrong.astype(np.int8), loss
