"""One model of a run: ``LearnerConfig``, ``ReplayConfig``, the runner table, and the paths
that build them (CLI arguments, ``run_replay`` keywords, ``kernelstream.engine.evaluate``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from kernelstream import data
from kernelstream.data.options import ReadOptions
from kernelstream.engine.evaluate import evaluate
from kernelstream.engine.learner_config import LearnerConfig, as_configs, learner_config
from kernelstream.engine.orders import evaluate_stream
from kernelstream.pipelines import cli
from kernelstream.pipelines.config import RUNNERS, check_runner, learner_configs, runners_for
from kernelstream.pipelines.replay.replay import make_run, plan, run_config, run_replay
from kernelstream.pipelines.replay.replay_args import ReplayConfig


def test_learner_config_fields_and_defaults() -> None:
    c = LearnerConfig("b", "bogd", {"budget": "20"})
    assert (c.label, c.learner, c.seed_name) == ("b", "bogd", "bogd")
    assert c.params["budget"] == 20 and "eta" in c.params  # resolved: typed, defaults filled
    assert c.task == "classification"
    assert LearnerConfig("sq", "oks", {"loss": "square"}).task == "regression"
    assert LearnerConfig("x", "bogd", seed_name="other").seed_name == "other"
    with pytest.raises(ValueError, match="'#' or '@'"):
        LearnerConfig("a#b", "bogd")
    with pytest.raises(ValueError):
        LearnerConfig("a", "no-such-learner")


def test_cli_learner_specs_give_the_engine_object() -> None:
    """``--learner LABEL=NAME -p LABEL.key=v`` resolves straight to the engine's objects."""
    got = learner_configs(["bogd", "p=perceptron"], ["bogd.budget=20"])
    assert got == (LearnerConfig("bogd", "bogd", {"budget": 20}),
                   LearnerConfig("p", "perceptron"))
    assert got[1].seed_name == "perceptron"  # the registry name: results do not follow labels
    assert as_configs([("a", "pa-i", {})]) == {"a": LearnerConfig("a", "pa-i")}
    with pytest.raises(ValueError, match="given twice"):
        as_configs([("a", "pa-i", {}), ("a", "bogd", {})])
    # no list (None, one configuration alone, a name): what is expected, not a TypeError
    for bad in (None, LearnerConfig("a", "pa-i"), "bpa-s"):
        with pytest.raises(ValueError, match=r"a list of LearnerConfig objects or \(label"):
            as_configs(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no learner configuration given"):
        as_configs([])


def test_runner_table_names_each_commands_runners() -> None:
    assert runners_for("replay") == ("direct", "portable", "beam", "loop", "dask")
    assert runners_for("tune") == ("direct", "loop")
    assert runners_for("stream") == ("direct", "portable")
    assert not RUNNERS["loop"].beam and RUNNERS["direct"].beam
    assert check_runner("loop") == "loop"
    with pytest.raises(ValueError, match="runner must be one of direct, portable"):
        check_runner("loop", "stream")
    # the CLI offers exactly the table's runners
    sub = cli.build_parser()._subparsers._group_actions[0].choices
    for command in ("replay", "tune", "reproduce", "stream"):
        runner = next(a for a in sub[command]._actions if a.dest == "runner")
        assert set(runner.choices) == set(runners_for(command)), command


def test_run_replay_keywords_are_the_config_fields(tmp_path: Path) -> None:
    configs = [LearnerConfig("b", "bogd", {"budget": 10})]
    run = make_run("german", configs, tmp_path, limit=100, block_size=7, runner="loop")
    cfg = ReplayConfig(data="german", learners=tuple(configs), out=str(tmp_path),
                       read=ReadOptions(path="german", limit=100), block_size=7, runner="loop")
    assert run == plan(cfg)
    assert cfg == ReplayConfig.of("german", configs, tmp_path, limit=100, block_size=7,
                                  runner="loop")
    assert cfg.dataset == "german" and run.data.read.limit == 100
    assert run.execution.block_size == 7
    # the read options' path is the data's, however they were given
    assert ReplayConfig(data="german", learners=tuple(configs), out="o").read.path == "german"
    with pytest.raises(TypeError, match="no_such_option"):
        make_run("german", configs, tmp_path, no_such_option=1)
    with pytest.raises(ValueError, match="runner must be one of"):
        make_run("german", configs, tmp_path, runner="nope")
    # pipeline options after "--" win over the config's engine settings
    assert plan(ReplayConfig(data="german", learners=tuple(configs), out=str(tmp_path),
                             pipeline_args=("--block_size=5",))).execution.block_size == 5


def test_cli_arguments_and_python_api_build_the_same_run(tmp_path: Path) -> None:
    """The replay command's config and ``run_replay``'s keywords give one plan and one result."""
    args = cli.build_parser().parse_args(
        ["replay", "german", "-l", "b=bogd", "-p", "budget=10", "-p", "gamma=0.5",  # not auto
         "--limit", "200", "--permutations", "2", "--runner", "loop",
         "--out", str(tmp_path / "cli")])
    assert isinstance(args, argparse.Namespace)
    config = ReplayConfig.from_args(args, ["replay"])
    assert config.learners == (LearnerConfig("b", "bogd", {"budget": 10, "gamma": 0.5}),)
    a = run_config(config)
    b = run_replay("german", config.learners, tmp_path / "api", limit=200, permutations=2,
                   runner="loop")
    strip = ("seconds", "examples_per_second")
    assert ([{k: v for k, v in s.items() if k not in strip} for s in a.summaries]
            == [{k: v for k, v in s.items() if k not in strip} for s in b.summaries])
    assert plan(config) == make_run("german", config.learners, config.out, limit=200,
                                    permutations=2, runner="loop")


def test_evaluate_takes_a_learner_config() -> None:
    X, y = data.load_dataset("german")
    X, y = X[:300], y[:300]
    cfg = LearnerConfig("lab", "bogd", {"budget": 30})
    a = evaluate(X, y, cfg, seed=3, permutations=2, progress=None)
    b = evaluate(X, y, "bogd", {"budget": 30}, seed=3, permutations=2, label="lab",
                 progress=None)
    assert a.label == b.label == "lab" and a.seed_name == "bogd"
    assert [r.mistakes for r in a.runs] == [r.mistakes for r in b.runs]
    assert np.isclose(a.runs[0].avg_loss, b.runs[0].avg_loss, rtol=0, atol=0)
    s = evaluate_stream(X, y, "german-1", cfg, permutations=1, progress=None)
    assert s.label == "lab"
    with pytest.raises(TypeError, match="holds its own"):
        learner_config(cfg, {"budget": 5})


def test_a_stream_reports_progress_during_a_repetition_with_the_same_scores(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/cli.md's ``[label] permutation r/R: rows done/n, examples/s`` lines come between
    blocks of a stream too (it was one block: only the final line), and the blocks change no
    figure."""
    from kernelstream.engine import orders
    X, y = data.load_dataset("german", scale="01")
    lines: list[str] = []
    a = evaluate_stream(X, y, "german-1", "bpa-s", progress=lines.append, progress_interval=0)
    assert lines[0] == "[bpa-s] permutation 1/1: 1,024/5,000 rows, " + lines[0].split(", ")[-1]
    assert lines[0].endswith(" ex/s") and lines[-1].startswith("[bpa-s] stream german-1 1/1:")
    monkeypatch.setattr(orders, "STREAM_BLOCK", 10**9)  # the whole stream in one block
    b = evaluate_stream(X, y, "german-1", "bpa-s")
    assert (a.runs[0].mistakes, a.runs[0].avg_loss) == (b.runs[0].mistakes, b.runs[0].avg_loss)


def test_stream_preset_on_a_beam_runner_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Adversarial streams run in memory on the loop runner; the one refusal is the CLI's."""
    code = cli.main(["replay", "german", "--stream", "german-1", "--runner", "direct",
                     "--quiet"])
    assert code == 2
    assert "only supported by the loop runner" in capsys.readouterr().err
