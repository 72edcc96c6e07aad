"""The test-then-train loop: the one place a learner is run over a stream (no Beam).

:class:`PrequentialPass` feeds a learner consecutive blocks of rows through its batch path
``predict_learn_many``, which scores every row with the hypothesis as it stands and then learns
it, and is bit-identical to the per-example loop whatever the block sizes. It keeps the
pre-update scores and the seconds spent inside ``predict_learn_many`` only. Every driver runs
it: the in-memory evaluation (``kernelstream.engine.evaluate``: permutations, adaptive blocks,
progress lines), the adversarial streams (``kernelstream.engine.orders``) and one block of a stream
at a time (:class:`~kernelstream.engine.replay.core.ReplayLearner`, used by the loop runner and the
Beam DoFn). :func:`outcomes` turns scores into predicted labels, mistakes and losses the same way
for all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from kernelstream.learners.base import Learner
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
                 skip_rejected: bool = False) -> None:
        if block_size is not None and block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.model, self.X, self.y, self.rows = model, X, y, rows
        self.n = int(X.shape[0] if rows is None else rows.shape[0])
        self.scores = np.full(self.n, np.nan)
        self.seconds = 0.0  # inside predict_learn_many only
        self.done = 0  # rows passed (learnt or rejected)
        self.block_size = block_size
        self.skip_rejected = skip_rejected

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
                self.scores[lo:hi] = self.model.predict_learn_many(Xb, yb)
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


def outcomes(model: Learner, scores: np.ndarray,
             y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(predicted, mistake, loss)`` of pre-update ``scores`` against labels ``y``: the
    learner's own ``predict_label`` (its tie rule) and mistakes 1/0 for classification, the
    score itself and mistake -1 for regression; the loss is :func:`learner_loss`'s."""
    n = int(scores.shape[0])
    if model.task == "classification":
        predicted = np.fromiter(map(model.predict_label, scores.tolist()), np.float64, count=n)
        mistake = (predicted != y).astype(np.int8)
    else:
        predicted = scores.copy()
        mistake = np.full(n, -1, dtype=np.int8)
    loss_fn = learner_loss(model).value
    loss = np.fromiter(map(loss_fn, scores.tolist(), y.tolist()), np.float64, count=n)
    return predicted, mistake, loss
