"""Prequential (test-then-train) evaluation in memory: the reference of every runner.

For each repetition ``r`` the stream is ``X[permutation(n, seed, r)]`` and a fresh learner is
built with ``learner_seed(seed, r, seed_name)`` (both from :mod:`kernelstream.seeding`, which the
Beam runners use too, so every runner sees identical streams). Every example is first scored
with the current hypothesis, then learnt; the metrics use only the pre-update scores.

Metrics per repetition:

* ``mistake_rate`` — ``100 · #{predict_label(score) ≠ y} / n`` (classification only; the tie
  rule for a zero score is the learner's own ``predict_label``, i.e. its ``tie`` parameter).
* ``avg_loss`` — mean of ``loss(score, y)``. The loss is the learner's training loss when it
  has one (a ``loss`` parameter or attribute), else hinge for classification and square loss
  ``(f − y)²`` (no ½, as P2 reports it) for regression (``engine.prequential.learner_loss``).
* ``n_support_vectors`` — at the end of the repetition.
* the no-skill baseline of the same stream (:mod:`kernelstream.engine.noskill`):
  ``noskill_mistake_rate``, the majority-class predictor's mistake rate, and
  ``top_class_share`` (classification); ``noskill_avg_loss``, the running-mean predictor's
  average loss, and the run's ``rmse``, ``mae`` and ``r2`` (against the running-mean
  predictor; regression). Summaries carry their means and ``_std`` s like the others.
* ``seconds`` — wall-clock time spent inside ``predict_learn_many`` only: gathering the
  permuted rows, metric bookkeeping and progress output are excluded (the papers time the learning
  loop only).

``limit`` is not handled here: it means "the first N rows of the file" and is applied when
loading (``kernelstream.data.load(limit=N)``), so the permutations are drawn over those N rows.
That keeps the stream independent of how the file is read and lets a streaming reader stop
early.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from kernelstream._suggest import row_error
from kernelstream.data import widths
from kernelstream.data.errors import SCALES
from kernelstream.engine.learner_config import LearnerConfig, learner_config
from kernelstream.engine.noskill import FIGURES, NoSkill, skill_warnings
from kernelstream.engine.prequential import PrequentialPass, learner_loss, outcomes
from kernelstream.learners.base import Learner
from kernelstream.seeding import permutation
from kernelstream.sparse import CSR

ProgressFn = Callable[[str], None]


def stderr_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class PermutationResult:
    """Metrics of one repetition (one permutation of the stream)."""

    permutation: int  # r, the repetition index passed to seeding.permutation
    examples: int
    mistakes: int | None  # None for regression
    mistake_rate: float | None  # percent; None for regression
    avg_loss: float
    n_support_vectors: int
    seconds: float
    examples_per_second: float | None  # None when the clock measured 0 s
    # no-skill baseline and regression metrics (engine.noskill.FIGURES; None where they do
    # not apply)
    noskill_mistake_rate: float | None = None  # percent: the majority-class predictor's
    noskill_avg_loss: float | None = None  # the running-mean predictor's
    rmse: float | None = None
    mae: float | None = None
    r2: float | None = None  # against the running-mean predictor
    top_class_share: float | None = None  # of the run's predictions, in its top class
    diverged: int = 0  # rows the learner scored NaN (mistakes of infinite loss)


@dataclass
class EvalResult:
    """All repetitions of one learner configuration on one data set."""

    learner: str  # registry name
    label: str  # configuration label (== learner unless given)
    params: dict[str, Any]  # every resolved hyper-parameter
    seed: int
    seed_name: str  # name passed to seeding.learner_seed
    task: str
    loss: str
    examples: int
    n_features: int
    runs: list[PermutationResult] = field(default_factory=list)

    @property
    def permutations(self) -> int:
        return len(self.runs)

    def _stat(self, key: str) -> tuple[float | None, float | None]:
        vals = [getattr(r, key) for r in self.runs]
        if not vals or any(v is None for v in vals):
            return None, None
        return mean_std(vals)

    @property
    def mistake_rate(self) -> float | None:
        return self._stat("mistake_rate")[0]

    @property
    def avg_loss(self) -> float:
        return float(self._stat("avg_loss")[0] or 0.0)

    @property
    def seconds(self) -> float:
        return float(self._stat("seconds")[0] or 0.0)

    @property
    def warnings(self) -> list[str]:
        """The warnings ``kernelstream replay`` prints about these figures
        (:func:`~kernelstream.engine.noskill.skill_warnings`, one line each): the learner
        diverged, it is no better than the no-skill baseline, or it predicts one class
        (without their ``warning:`` prefix)."""
        return [w.removeprefix("warning: ") for w in skill_warnings(self.label,
                                                                    self.to_summary())]

    def to_summary(self) -> dict[str, Any]:
        """JSON-ready dict: means, sample stds (``ddof=1``; 0 for one repetition) and the
        per-permutation list. ``examples_per_second`` is ``examples / mean seconds``."""
        out: dict[str, Any] = {
            "learner": self.learner,
            "label": self.label,
            "params": dict(self.params),
            "seed_name": self.seed_name,
            "task": self.task,
            "loss": self.loss,
            "examples": self.examples,
            "n_features": self.n_features,
            "permutations": self.permutations,
        }
        for key in ("mistake_rate", "avg_loss", "n_support_vectors", "seconds", *FIGURES):
            m, s = self._stat(key)
            out[key], out[f"{key}_std"] = m, s
        sec = out["seconds"]
        out["examples_per_second"] = self.examples / sec if sec else None
        out["diverged"] = sum(r.diverged for r in self.runs)
        out["per_permutation"] = [asdict(r) for r in self.runs]
        return out


def mean_std(values: list[float] | np.ndarray) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``, as the papers' R ``sd()``; 0 for a
    single value)."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        raise ValueError("mean_std of no values")
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0



def block_progress(progress: Callable[[str], None] | None, permutations: int,
                   interval: float) -> Callable[[int, PrequentialPass, EvalResult], None]:
    """An ``on_block`` for :func:`evaluate_runs`: ``progress`` gets a line during a
    repetition (rows done, examples/s), at most every ``interval`` seconds."""
    last = time.monotonic()

    def report(r: int, run: PrequentialPass, res: EvalResult) -> None:
        nonlocal last
        now = time.monotonic()
        if progress is not None and now - last >= interval:
            last = now
            rate_s = f"{run.done / run.seconds:,.0f} ex/s" if run.seconds > 0 else "-"
            progress(f"[{res.label}] permutation {r + 1}/{permutations}: "
                     f"{run.done:,}/{run.n:,} rows, {rate_s}")

    return report

def evaluate(
    X: np.ndarray | CSR,
    y: np.ndarray,
    learner: str | LearnerConfig,
    params: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    permutations: int = 1,
    label: str | None = None,
    seed_name: str | None = None,
    block_size: int | None = None,
    progress: ProgressFn | None = stderr_progress,
    progress_interval: float = 2.0,
    scale: str = "none",
) -> EvalResult:
    """Run the prequential loop ``permutations`` times and return every repetition's metrics.

    ``X`` is a dense 2-D array or a :class:`kernelstream.sparse.CSR` (sparse rows, given to
    the learners as they are, as a replay of a sparse file does).

    ``learner`` is a registry name (with ``params``, ``label``) or a whole
    :class:`~kernelstream.engine.learner_config.LearnerConfig`, the object of a replay.
    ``seed_name`` (default: the learner's registry name) is the name hashed into the learner
    seed. Using the registry name rather than the configuration label means a configuration's
    result does not depend on its label or on the other configurations of a grid.

    Gaussian widths left to the data (``gamma`` unset or ``"auto"``, ``sigma="auto"``,
    ``sigmas`` unset or ``"auto"``: ``engine.learner_widths``) are estimated from the first
    ``data.widths.RESERVOIR_ROWS`` rows of ``X`` in its own order (before any permutation),
    as ``kernelstream replay`` estimates them from a file's first rows
    (``data.widths.array_gamma``); ``scale`` is the min-max scaling ``X`` was loaded with
    (``data.load(scale=...)``; nothing is scaled here), for the estimate to scale those rows
    over themselves as the CLI's does. The number learnt with is in the result's ``params``.

    ``block_size`` fixes the rows per ``predict_learn_many`` call (default: adaptive). Progress
    lines go to ``progress`` at most every ``progress_interval`` seconds (``None``: silent).

    The result's :attr:`EvalResult.warnings` (a diverged learner, one no better than the
    no-skill baseline, one predicting one class: what ``kernelstream replay`` prints) are also
    issued with ``warnings.warn(..., RuntimeWarning)``.
    """
    if not isinstance(X, CSR):  # sparse rows go to the learners as they are, as a replay's
        try:
            X = np.ascontiguousarray(X, dtype=np.float64)
        except (TypeError, ValueError) as exc:  # rows as dicts: say what is expected
            raise row_error("evaluate", X, many=True) or exc from None
    yv = np.asarray(y, dtype=np.float64).reshape(-1)
    if len(X.shape) != 2:
        raise ValueError(f"X must be a 2-D array, got shape {X.shape}")
    n = X.shape[0]
    if n == 0:
        raise ValueError("the data set has no examples")
    if yv.shape[0] != n:
        raise ValueError(f"X has {n} rows but y has {yv.shape[0]} labels")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    report = block_progress(progress, permutations, progress_interval)
    config = learner_config(learner, params, label, seed_name).with_widths(
        lambda: widths.array_gamma(X, scale))
    result = evaluate_runs(lambda r: (X, yv, permutation(n, seed, r)), config, seed=seed,
                           permutations=permutations, block_size=block_size, on_block=report)
    warn_skill(result)
    return result


def warn_skill(result: EvalResult, stacklevel: int = 3) -> None:
    """Issue ``result.warnings`` as ``RuntimeWarning`` s (``stacklevel``: at the caller of
    the public function that calls this)."""
    for line in result.warnings:
        warnings.warn(line, RuntimeWarning, stacklevel=stacklevel)


Stream = tuple[np.ndarray | CSR, np.ndarray, np.ndarray | None]  # X, y, rows (None: all, in order)


def evaluate_runs(stream: Callable[[int], Stream], config: LearnerConfig, *, seed: int,
                  permutations: int, block_size: int | None,
                  on_block: Callable[[int, PrequentialPass, EvalResult], None] | None = None,
                  on_run: Callable[[int, EvalResult], None] | None = None) -> EvalResult:
    """The repetitions of a prequential evaluation: repetition ``r`` runs a fresh learner
    of ``config`` seeded ``learner_seed(seed, r, config.seed_name)`` over ``stream(r)`` (the
    rows ``X[rows]`` in order) with the engine's
    :class:`~kernelstream.engine.prequential.PrequentialPass` (``block_size`` as there), then
    measures it from the whole score vector (independent of the block sizes). ``on_block``
    is called after every block, ``on_run`` after every repetition."""
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    if block_size is not None and block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    result: EvalResult | None = None
    for r in range(permutations):
        X, y, rows = stream(r)
        model = config.make(seed, r)
        run = PrequentialPass(model, X, y, rows, block_size=block_size, target=config.target)
        if result is None:
            result = EvalResult(
                learner=config.learner, label=config.label, params=dict(model.hparams),
                seed=int(seed), seed_name=config.seed_name, task=model.task,
                loss=learner_loss(model).name, examples=run.n, n_features=X.shape[1],
            )
        for _ in run.blocks():
            if on_block is not None:
                on_block(r, run, result)
        result.runs.append(run_metrics(model, run.scores, y if rows is None else y[rows], r,
                                       run.seconds))
        if on_run is not None:
            on_run(r, result)
    assert result is not None
    return result


def run_metrics(model: Learner, scores: np.ndarray, y: np.ndarray, r: int,
                seconds: float) -> PermutationResult:
    """The metrics of one prequential pass (repetition ``r``) from its pre-update ``scores``
    and labels ``y`` (:func:`~kernelstream.engine.prequential.outcomes`), the loss summed with
    ``fsum`` so it does not depend on order or grouping."""
    n = len(y)
    classify = model.task == "classification"
    predicted, mistake, loss = outcomes(model, scores, y)
    mistakes = int(np.count_nonzero(mistake == 1)) if classify else 0
    loss_sum = math.fsum(loss.tolist())
    noskill = NoSkill()
    noskill.add(y, predicted, classify, learner_loss(model).value)
    return PermutationResult(
        permutation=r,
        examples=n,
        mistakes=mistakes if classify else None,
        mistake_rate=100.0 * mistakes / n if classify else None,
        avg_loss=loss_sum / n,
        n_support_vectors=int(model.n_support_vectors),
        seconds=seconds,
        examples_per_second=n / seconds if seconds > 0 else None,
        **noskill.figures(classify),
        diverged=int(np.count_nonzero(np.isnan(predicted))),  # NaN scores (prequential.judge)
    )
