"""The one test-then-train step and the one outcome rule (``kernelstream.engine.prequential``):
every driver (the replay's pass, the live engine, the speed benchmarks) runs a learner through
them only, the block and row forms agree, and the live rows are named rows of the schema."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelstream.data.options import ReadOptions
from kernelstream.engine import learner_config, prequential
from kernelstream.engine.evaluate import evaluate_runs
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.engine import StreamEngine, reference_outputs
from kernelstream.engine.live.parsing import LiveSpec
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.routing import StreamRouter
from kernelstream.engine.live.rows import (
    OUTCOME_FIELDS,
    PREDICTION_FIELDS,
    OutcomeRow,
    PredictionRow,
    stream_schemas,
)
from kernelstream.engine.prequential import (
    judge,
    judge_one,
    outcomes,
    predicted_label,
    predicted_labels,
    step_block,
    step_row,
)
from kernelstream.learners import make
from kernelstream.learners.base import Learner
from kernelstream.learners.testing import make_stream
from kernelstream.pipelines.replay.replay import run_replay
from kernelstream.seeding import learner_seed

# the learner calls a driver makes: the step's (scores and learning) and the tie rule's
LEARNER_CALLS = ("predict_one", "learn_one", "step", "predict_learn_many", "predict_label")
PERCEPTRON = LearnerConfig("perc", "perceptron", {"kernel": "linear"})
TOPIC = ReadOptions("kafka://h:1/ev", n_features=3)  # LIBSVM messages of 3 features


def spy_class(calls: set[tuple[str, str]], name: str = "perceptron",
              **params: Any) -> type[Learner]:
    """A subclass of learner ``name``'s class that records ``(method, calling module)`` of
    each :data:`LEARNER_CALLS` call made from outside the learners package (a learner's own
    methods call each other). It overrides ``predict_label`` (the same rule), so block
    outcomes call it row by row."""
    base = type(make(name, **params))

    def spied(method: str) -> Any:
        f = getattr(base, method)

        def call(self: Any, *a: Any, **k: Any) -> Any:
            caller = str(sys._getframe(1).f_globals.get("__name__"))
            if not caller.startswith("kernelstream.learners"):
                calls.add((method, caller))
            return f(self, *a, **k)
        return call

    return type("Spy", (base,), {m: spied(m) for m in LEARNER_CALLS})


def rec(offset: int, ts: int, key: str, value: str) -> SourceRecord:
    return SourceRecord("ev", 0, offset, ts, key.encode(), value.encode())


def live_records() -> list[SourceRecord]:
    """Records that take each of the live engine's ways to learn: a run of labelled events
    (one block), a lone labelled event (one row), events whose labels come later (scored on
    arrival, learnt at the label) and a run of (event, label) pairs (one block)."""
    vals = ["1 1:0.5 2:-1", "-1 1:-0.5 3:0.25", "1 2:0.75", "-1 1:-1 2:0.5"]
    out: list[SourceRecord] = []

    def add(key: str, value: str) -> None:
        out.append(rec(len(out), len(out), key, value))

    for i, v in enumerate(vals):  # a labelled run
        add(f"r{i}", v)
    add("d0", "? 1:0.5")  # delayed: two events, then their labels
    add("d1", "? 2:-0.5")
    add("lone", "1 3:1")  # a labelled event between unlabelled ones
    add("d1", "label:-1")
    add("d0", "label:1")
    for i in range(4):  # a run of pairs
        add(f"p{i}", "? " + vals[i].split(" ", 1)[1])
        add(f"p{i}", f"label:{vals[i].split(' ', 1)[0]}")
    add("end", "? 1:1")
    return out


def test_the_live_engine_runs_its_learner_through_the_prequential_step() -> None:
    calls: set[tuple[str, str]] = set()
    spec = LiveSpec(configs=(PERCEPTRON,), read=TOPIC, label_ttl_ms=10_000,
                    metrics_window_ms=10_000)
    engine = StreamEngine(spec)
    spy = spy_class(calls, kernel="linear")(
        seed=learner_seed(spec.seed, 0, PERCEPTRON.seed_name), kernel="linear")
    out, _ = reference_outputs(live_records(), spec,
                               {"perc#0": engine.new_state("perc#0", spy)})
    want, _ = reference_outputs(live_records(), spec)  # the spy changes nothing
    assert [dict(r) for r in out.outcomes] == [dict(r) for r in want.outcomes]
    assert len(out.outcomes) == 4 + 2 + 1 + 4
    assert {m for m, _ in calls} == set(LEARNER_CALLS)  # every way was taken
    assert {c for _, c in calls} == {"kernelstream.engine.prequential"}, calls


def test_the_replay_and_the_evaluation_run_the_learner_through_the_prequential_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay's loop runner (``ReplayLearner``) and the in-memory evaluation make every
    learner call from :mod:`kernelstream.engine.prequential` (a call from their own modules
    would show as such)."""
    calls: set[tuple[str, str]] = set()
    spy = spy_class(calls, "bogd", budget=20)
    monkeypatch.setattr(learner_config.learners, "make",
                        lambda name, seed=0, **p: spy(seed=seed, **p))
    cfg = LearnerConfig("b", "bogd", {"budget": 20})
    run_replay("german", [cfg], str(tmp_path / "run"), permutations=2, runner="loop")
    X, y = make_stream("classification", 300, 4, seed=2)
    evaluate_runs(lambda r: (X, y, None), cfg, seed=0, permutations=2, block_size=None)
    assert {c for _, c in calls} == {"kernelstream.engine.prequential"}, calls
    assert {m for m, _ in calls} >= {"predict_learn_many"}


@pytest.mark.parametrize("tie", ["positive", "negative", "spy"])
def test_the_outcome_rule_is_one_rule_by_block_and_by_row(tie: str) -> None:
    """:func:`judge` (a block, the sign as one array expression when the learner keeps the
    base class's ``predict_label``) equals :func:`judge_one` of :func:`predicted_label` row
    by row, zero, negative zero and NaN scores included, and :func:`outcomes` is its int8
    form."""
    m = (spy_class(set(), kernel="linear")(seed=0, kernel="linear") if tie == "spy"
         else make("perceptron", kernel="linear", tie=tie))
    scores = np.array([1.5, -0.25, 0.0, -0.0, np.nan, 3.0, -2.0, 0.0])
    y = np.array([1.0, 1.0, -1.0, 1.0, -1.0, -1.0, -1.0, 1.0])
    loss_fn = prequential.learner_loss(m).value
    predicted, wrong, loss = judge(m, scores, y)
    assert wrong is not None
    one = [(p := predicted_label(m, s), *judge_one(True, s, p, t, loss_fn))
           for s, t in zip(scores.tolist(), y.tolist(), strict=True)]
    assert (predicted.tobytes() == np.array([p for p, _, _ in one]).tobytes()
            == predicted_labels(m, scores).tobytes())
    assert wrong.tolist() == [w for _, w, _ in one]
    assert loss.tobytes() == np.array([v for _, _, v in one]).tobytes()
    tie_label = -1.0 if tie == "negative" else 1.0
    assert predicted[[2, 3, 7]].tolist() == [tie_label] * 3
    # a NaN score is a divergence: no class (a mistake whatever the label) of infinite loss
    assert np.isnan(predicted[4]) and wrong[4] and loss[4] == np.inf
    p2, mistake, loss2 = outcomes(m, scores, y)
    assert p2.tobytes() == predicted.tobytes() and loss2.tobytes() == loss.tobytes()
    assert mistake.dtype == np.int8 and mistake.tolist() == wrong.astype(int).tolist()


def test_the_outcome_rule_of_a_regression() -> None:
    m = make("oks", loss="square")
    assert m.task == "regression"
    scores, y = np.array([0.5, -1.0, 0.0]), np.array([1.0, -1.0, 2.0])
    predicted, wrong, loss = judge(m, scores, y)
    assert wrong is None and predicted.tolist() == scores.tolist()
    assert judge_one(False, 0.5, predicted_label(m, 0.5), 1.0,
                     prequential.learner_loss(m).value) == (None, loss[0])
    p2, mistake, _ = outcomes(m, scores, y)
    assert p2 is not scores and mistake.tolist() == [-1, -1, -1]
    _, _, loss = judge(m, np.array([np.nan, 0.5]), np.array([1.0, 1.0]))
    assert loss.tolist() == [np.inf, 0.25]  # a NaN score: an infinite loss, as a classifier's


def test_a_learner_scoring_nan_diverged_in_every_driver(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rff-rls with a ridge whose 1/λ² overflows (refused since; its check is lifted here)
    scores NaN from the second row on: those rows were nulls as rejected rows are (yet no
    dead letters), their hinge loss max(0, nan) = 0 averaged in. Now each driver counts them
    diverged, as mistakes of infinite loss, and the replay's warning says so."""
    from kernelstream.engine.replay.outputs import METRICS_SCHEMA, PREDICTIONS_SCHEMA, read_table
    from kernelstream.learners.rff_rls import RFFRLS

    monkeypatch.setattr(RFFRLS, "check_params", classmethod(lambda cls, p: None))
    cfg = LearnerConfig("r", "rff-rls", {"lam": 1e-300, "n_components": 20})
    with pytest.warns(RuntimeWarning, match="diverged: average loss inf, 998 rows scored NaN"):
        res = run_replay("german", [cfg], str(tmp_path / "run"), runner="loop")
    (r,) = res.eval_results([cfg], 0)
    run = r.runs[0]
    assert run.diverged == 998 and run.mistakes >= 998 and run.avg_loss == np.inf
    assert r.to_summary()["diverged"] == 998
    preds = read_table(tmp_path / "run" / "predictions", PREDICTIONS_SCHEMA)
    assert preds["score"].null_count == 0  # NaN, not the null of a rejected row
    assert sum(preds["mistake"].to_pylist()) == run.mistakes
    final = [m for m in read_table(tmp_path / "run" / "metrics", METRICS_SCHEMA).to_pylist()
             if m["final"]]
    assert final[0]["diverged"] == 998 and final[0]["rejected"] == 0
    X, y = make_stream("classification", 50, 4, seed=2)
    (ev,) = evaluate_runs(lambda _: (X, y, None), cfg, seed=0, permutations=1,
                          block_size=None).runs
    assert ev.diverged >= 40 and ev.avg_loss == np.inf
    # the live engine (its blocks and its single events): the same rule
    spec = LiveSpec(configs=(cfg,), read=TOPIC, label_ttl_ms=10_000, metrics_window_ms=10_000)
    rows = [dict(o) for o in reference_outputs(live_records(), spec)[0].outcomes]
    nan = [o for o in rows if np.isnan(o["score"])]
    assert len(nan) == len(rows) - 2 and all(o["mistake"] and o["loss"] == np.inf for o in nan)


def test_the_live_rows_are_named_rows_of_the_schema() -> None:
    schemas = stream_schemas()
    ident = ["row_id", "key", "config", "entity"]
    assert schemas["predictions"].names == [*ident, *PredictionRow._fields]
    assert schemas["outcomes"].names == [*ident, *OutcomeRow._fields]
    assert (PREDICTION_FIELDS, OUTCOME_FIELDS) == (PredictionRow._fields, OutcomeRow._fields)
    spec = LiveSpec(configs=(PERCEPTRON,), read=TOPIC, label_ttl_ms=10_000,
                    metrics_window_ms=10_000)
    out, _ = reference_outputs(live_records(), spec)
    for rows, fields in ((out.predictions, PREDICTION_FIELDS), (out.outcomes, OUTCOME_FIELDS)):
        assert rows
        for part in rows.parts:  # every block's columns are a named row
            assert isinstance(part.cols, PredictionRow | OutcomeRow), type(part.cols)
            assert part.cols._fields == fields
        assert all(list(r)[4:] == list(fields) for r in rows)


def test_the_engine_holds_its_router() -> None:
    spec = LiveSpec(configs=(PERCEPTRON,), read=TOPIC)
    engine = StreamEngine(spec)
    assert not isinstance(engine, StreamRouter)
    assert isinstance(engine.router, StreamRouter) and engine.router.spec is spec
    r = SourceRecord("ev", 0, 0, 0, None, b"1 1:0.5")  # no key: a dead letter
    assert engine.route(r) == engine.router.route(r) == engine.route_many([r])[1][0]


# -- a standardised regression target (``LearnerConfig.target``, ``--scale-target auto``) --------
def _regression(n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(8)
    X = rng.normal(size=(n, 4))
    return X, 0.02 + 0.006 * np.tanh(X[:, 0] - X[:, 1])  # a target far from unit scale


def test_a_standardised_target_is_learnt_standardised_and_scored_in_its_units() -> None:
    X, y = _regression()
    mean, std = float(y[:100].mean()), float(y[:100].std())

    def fresh() -> Learner:
        return make("raker", seed=3, loss="square")

    block = step_block(fresh(), X, y, target=(mean, std))
    m = fresh()
    rows = np.array([step_row(m, X[i], y[i], target=(mean, std)) for i in range(len(y))])
    assert np.array_equal(block, rows)  # the block and its rows agree bit for bit
    plain = fresh().predict_learn_many(X, (y - mean) / std)
    assert np.array_equal(block, mean + std * plain)  # learnt standardised, mapped back
    unscaled = step_block(fresh(), X, y)
    mse = float(np.mean((block - y) ** 2))
    assert mse < float(np.mean((unscaled - y) ** 2))
    assert abs(float(block[100:].mean()) - mean) < 3 * std  # scores in the target's units


def test_a_configuration_carries_its_target_into_the_evaluation() -> None:
    X, y = _regression()
    cfg = LearnerConfig("r", "raker", {"loss": "square"}, target=(0.02, 0.006))
    assert cfg.record()["target"] == [0.02, 0.006]
    assert "target" not in LearnerConfig("r", "raker", {"loss": "square"}).record()
    seen: list[np.ndarray] = []
    evaluate_runs(lambda r: (X, y, None), cfg, seed=0, permutations=1, block_size=64,
                  on_run=lambda r, res: None,
                  on_block=lambda r, run, res: seen.append(run.scores.copy()))
    m = cfg.make(0, 0)
    assert np.array_equal(seen[-1], 0.02 + 0.006 * m.predict_learn_many(X, (y - 0.02) / 0.006))
    with pytest.raises(ValueError, match="std > 0"):
        LearnerConfig("r", "raker", {"loss": "square"}, target=(0.0, 0.0))
