"""Prequential metrics of a stream: running and per-window accounting, the metrics rows, and
the per-key summaries derived from them (pure Python; no Beam).

A stream's metrics are kept with its learner (``core.ReplayState``), the only place that sees
the stream in order.
Every ``window`` positions it emits a row with the cumulative values (examples, mistakes,
mistake rate, average loss, support vectors, learner seconds, throughput) and the values of the
window just completed, and the cumulative no-skill baseline and regression metrics
(:mod:`kernelstream.engine.noskill`); when the input ends it emits a ``final`` row. Loss
sums are exact (:func:`exact_add`), so a summary derived from the rows equals the reference loop's
``math.fsum``-based numbers bit for bit, however the stream was cut into blocks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernelstream import learners
from kernelstream.engine.evaluate import EvalResult, PermutationResult
from kernelstream.engine.exact import exact_add, exact_value
from kernelstream.engine.noskill import FIGURES, NoSkill

METRICS_NAMESPACE = "kernelstream"  # of the runners' counters (Beam metrics)

@dataclass
class Accumulator:
    """Prequential counts over a span of the stream."""

    examples: int = 0
    mistakes: int = 0
    loss: int = 0  # exact sum of the losses, scaled (see exact_add)
    seconds: float = 0.0
    diverged: int = 0  # rows the learner scored NaN (``prequential.judge``: mistakes, loss inf)

    def add(self, examples: int, mistakes: int, losses: np.ndarray, seconds: float,
            diverged: int = 0) -> None:
        self.examples += examples
        self.mistakes += mistakes
        self.loss = exact_add(self.loss, losses)
        self.seconds += seconds
        self.diverged += diverged

    def to_json(self) -> list[Any]:
        return [self.examples, self.mistakes, str(self.loss), self.seconds, self.diverged]

    @classmethod
    def from_json(cls, v: list[Any]) -> Accumulator:
        return cls(int(v[0]), int(v[1]), int(v[2]), float(v[3]), int(v[4]) if len(v) > 4 else 0)


@dataclass
class StreamMetrics:
    """Running and current-window accumulators of one stream, and its running no-skill
    baseline (:class:`~kernelstream.engine.noskill.NoSkill`)."""

    total: Accumulator = field(default_factory=Accumulator)
    window: Accumulator = field(default_factory=Accumulator)
    window_start: int = 0
    noskill: NoSkill = field(default_factory=NoSkill)

    def to_json(self) -> list[Any]:
        return [self.total.to_json(), self.window.to_json(), self.window_start,
                self.noskill.to_json()]

    @classmethod
    def from_json(cls, v: list[Any]) -> StreamMetrics:
        return cls(Accumulator.from_json(v[0]), Accumulator.from_json(v[1]), int(v[2]),
                   NoSkill.from_json(v[3] if len(v) > 3 else None))

    def account(self, start: int, ok: np.ndarray, mistake: np.ndarray, loss: np.ndarray,
                seconds: float, window: int, *, y: np.ndarray, predicted: np.ndarray,
                classify: bool, loss_fn: Callable[[float, float], float] | None = None,
                ) -> Iterator[int]:
        """Add a learnt block (positions ``start..``; ``ok`` marks learnt rows, ``mistake`` is
        1/0/-1, ``seconds`` the learner time of the block; ``y``, ``predicted`` and the run's
        ``loss_fn`` feed the no-skill baseline). Yields the position of each window boundary
        crossed — the caller emits a row there — and then resets the window."""
        n = ok.shape[0]
        i = 0
        while i < n:
            boundary = (self.window_start // window + 1) * window
            take = min(n - i, boundary - (start + i))
            sl = slice(i, i + take)
            okk = ok[sl]
            ex = int(okk.sum())
            mi = int(np.count_nonzero(mistake[sl][okk] == 1))
            ls = loss[sl][okk]
            # a learnt row predicts NaN only when its score was NaN (prequential.judge)
            dv = int(np.count_nonzero(np.isnan(predicted[sl][okk])))
            sec = seconds * take / n  # learner time is measured per block: pro rata
            self.total.add(ex, mi, ls, sec, dv)
            self.window.add(ex, mi, ls, sec, dv)
            self.noskill.add(y[sl][okk], predicted[sl][okk], classify, loss_fn)
            i += take
            if start + i == boundary:
                yield boundary
                self.window = Accumulator()
                self.window_start = boundary


def metrics_row(key: dict[str, Any], m: StreamMetrics, *, position: int, final: bool,
                classify: bool, n_support_vectors: int, extra: dict[str, Any]) -> dict[str, Any]:
    """One metrics row (schema ``outputs.METRICS_SCHEMA``). ``key`` holds the identity columns
    (key, config, learner, permutation, entity, task, loss_name)."""
    tot, win = m.total, m.window

    def rate(a: Accumulator) -> float | None:
        return 100.0 * a.mistakes / a.examples if classify and a.examples else None

    def avg(a: Accumulator) -> float | None:
        return exact_value(a.loss) / a.examples if a.examples else None

    def eps(a: Accumulator) -> float | None:
        return a.examples / a.seconds if a.seconds > 0 else None

    return {
        **key,
        "final": final,
        "window_start": m.window_start,
        "window_end": position,
        "examples": tot.examples,
        "mistakes": tot.mistakes if classify else None,
        "mistake_rate": rate(tot),
        "avg_loss": avg(tot),
        "loss_sum": exact_value(tot.loss),
        "diverged": tot.diverged,
        "n_support_vectors": n_support_vectors,
        "seconds": tot.seconds,
        "examples_per_second": eps(tot),
        "window_examples": win.examples,
        "window_mistakes": win.mistakes if classify else None,
        "window_mistake_rate": rate(win),
        "window_avg_loss": avg(win),
        "window_seconds": win.seconds,
        "window_examples_per_second": eps(win),
        **extra,
        **m.noskill.figures(classify),
    }


# -- summaries -----------------------------------------------------------------------------------


def latest_rows(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The most advanced metrics row of each key: the final row when the input has ended,
    else the last window row (an unbounded stream's summary so far)."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        cur = best.get(r["key"])
        rank = (bool(r["final"]), int(r["window_end"]))
        if cur is None or rank > (bool(cur["final"]), int(cur["window_end"])):
            best[r["key"]] = r
    return best


def key_summaries(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary dict per stream key, from the metrics rows, sorted by key."""
    out = []
    for key, r in sorted(latest_rows(rows).items()):
        out.append({
            "key": key,
            "config": r["config"],
            "learner": r["learner"],
            "permutation": r["permutation"],
            "entity": r["entity"],
            "task": r["task"],
            "loss": r["loss_name"],
            "complete": bool(r["final"]),
            "examples": r["examples"],
            "mistakes": r["mistakes"],
            "mistake_rate": r["mistake_rate"],
            "avg_loss": r["avg_loss"],
            "n_support_vectors": r["n_support_vectors"],
            "seconds": r["seconds"],
            "examples_per_second": r["examples_per_second"],
            "n_features": r["n_features"],
            "rejected": r["rejected"],
            "diverged": r.get("diverged") or 0,  # (None in outputs older than it)
            # the learner's state after the last example (None in outputs older than these)
            "kernel_distribution": r.get("kernel_distribution"),
            "diagnostics": None if r.get("diagnostics") is None else json.loads(r["diagnostics"]),
            # the no-skill baseline and regression metrics (None in outputs older than these)
            **{f: r.get(f) for f in FIGURES},
        })
    return out


def eval_results(summaries: Sequence[dict[str, Any]], configs: Sequence[Any], *,
                 seed: int) -> list[EvalResult]:
    """The per-configuration :class:`~kernelstream.engine.evaluate.EvalResult` s of a run (one
    ``PermutationResult`` per permutation, in order), so ``summary.json`` has the loop's
    schema. ``configs`` are ``engine.learner_config.LearnerConfig`` s; per-entity keys are
    not aggregated here (their summaries stay per key)."""
    out = []
    for cfg in configs:
        mine = sorted((s for s in summaries if s["config"] == cfg.label and s["entity"] is None),
                      key=lambda s: s["permutation"])
        if not mine:
            continue
        m = learners.make(cfg.learner, **cfg.params)
        res = EvalResult(
            learner=cfg.learner, label=cfg.label, params=dict(m.hparams), seed=int(seed),
            seed_name=cfg.seed_name, task=m.task, loss=mine[0]["loss"],
            examples=int(mine[0]["examples"]), n_features=int(mine[0]["n_features"] or 0),
        )
        for s in mine:
            res.runs.append(PermutationResult(
                permutation=int(s["permutation"]),
                examples=int(s["examples"]),
                mistakes=s["mistakes"],
                mistake_rate=s["mistake_rate"],
                avg_loss=float(s["avg_loss"] or 0.0),
                n_support_vectors=int(s["n_support_vectors"]),
                seconds=float(s["seconds"]),
                examples_per_second=s["examples_per_second"],
                **{f: s[f] for f in FIGURES},
                diverged=int(s["diverged"]),
            ))
        out.append(res)
    return out
