"""One config model (issue 29): every command that builds a run turns its arguments into one
frozen config with ``Config.from_args(args, argv)``, checked as it is built; the handler only
runs it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kernelstream.errors import ConfigError
from kernelstream.pipelines.commands import check, demo, replay, reproduce, stream, tune
from kernelstream.pipelines.commands._common import command_parser
from kernelstream.pipelines.live.stream_config import StreamConfig
from kernelstream.pipelines.replay.replay_args import ReplayConfig


def _args(command: ModuleType, argv: list[str]) -> Any:
    args = command_parser(command).parse_args(argv)
    args.pipeline_args = []
    return args


def _commands(tmp_path: Path) -> list[tuple[ModuleType, type, list[str]]]:
    out = str(tmp_path / "run")
    return [
        (replay, ReplayConfig, ["replay", "german", "--runner", "loop", "-l", "bogd", "--out",
                                out]),
        (tune, tune.TuneConfig, ["tune", "german", "-l", "bogd", "--grid", "eta=0.1,0.2",
                                 "--runner", "loop", "--out", out]),
        (reproduce, reproduce.ReproduceConfig, ["reproduce", "p0", "--data-dir",
                                                str(tmp_path), "-R", "2"]),
        (check, check.CheckConfig, ["check", "german", "--limit", "50"]),
        (demo, demo.DemoConfig, ["demo", "--seconds", "3", "--delay-max", "2s"]),
        (stream, StreamConfig, ["stream", "kafka://h:1/t", "--n-features", "4"]),
    ]


def test_every_run_command_has_one_frozen_config(tmp_path: Path) -> None:
    for command, config_class, argv in _commands(tmp_path):
        config = config_class.from_args(_args(command, argv), argv)
        assert isinstance(config, config_class), command.__name__
        assert dataclasses.is_dataclass(config)
        first = dataclasses.fields(config)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(config, first, None)


def test_configs_hold_what_the_handlers_ran_on(tmp_path: Path) -> None:
    argv = ["tune", "german", "-l", "bogd", "--grid", "eta=0.1,0.2,0.4", "--random", "2",
            "--ties", "loss", "-p", "budget=50", "--tune-perm", "7", "--runner", "loop",
            "--out", str(tmp_path / "t")]
    t = tune.TuneConfig.from_args(_args(tune, argv), argv)
    assert (t.ties, t.random, t.fixed, t.argv) == ("loss", 2, ("budget=50",), tuple(argv))
    assert len(t.chosen) == 2 and t.axes == {"eta": ["0.1", "0.2", "0.4"]}
    assert t.replay.first_permutation == 7
    # the two cells, then the replay default (german's rows are dense) as the baseline
    assert [c.learner for c in t.replay.learners] == ["bogd", "bogd", "rff-rls"]
    assert t.baseline == t.replay.learners[-1].label
    argv = ["demo", "--seconds", "4", "--rate", "20", "--delay-max", "1.5s", "-l", "pa",
            "--seed", "3", "--out", str(tmp_path / "d")]
    d = demo.DemoConfig.from_args(_args(demo, argv), argv)
    assert (d.seconds, d.rate, d.delay_max, d.learners, d.seed) == (4.0, 20.0, 1.5, ("pa",), 3)
    stream_argv = d.stream_argv("127.0.0.1:9", "ck", 3.0)
    assert stream_argv[:2] == ["stream", "kafka://127.0.0.1:9/demo-events"]
    assert ["-l", "pa"] == stream_argv[-2:] and "--max-seconds" in stream_argv
    argv = ["reproduce", "all", "--data-dir", str(tmp_path), "--retune-only"]
    r = reproduce.ReproduceConfig.from_args(_args(reproduce, argv), argv)
    assert r.retune and r.retune_only and list(r.modules()) == list(reproduce.PAPERS)


@pytest.mark.parametrize(("command", "argv", "message"), [
    (check, ["check", "german", "--limit", "0"], "--limit must be >= 1, got 0"),
    # before any row is read (not islice's message from the width's or the rows' read)
    (replay, ["replay", "german", "--limit", "-5"], "--limit must be >= 1, got -5"),
    (replay, ["replay", "/nonexistent/x.csv", "--limit", "0"], "--limit must be >= 1, got 0"),
    (replay, ["replay", "german", "--limit", "99999999999999999999"],
     "--limit must be <= 9223372036854775807, got 99999999999999999999"),
    (tune, ["tune", "german", "--limit", "-5"], "--limit must be >= 1, got -5"),
    (reproduce, ["reproduce", "p0", "--data-dir", ".", "-R", "0"], "-R must be >= 1, got 0"),
    (reproduce, ["reproduce", "p0", "--data-dir", ".", "--tables", "nope"],
     "p0 has no table nope"),
    (demo, ["demo", "--rate", "0"], "--seconds and --rate must be > 0"),
    (tune, ["tune", "german", "-l", "bogd", "--grid", "eta=1", "--tune-rows", "0"],
     "--tune-rows must be >= 1, got 0"),
    # parsed as replay parses it (one value, every command), refused by the stream's config
    (stream, ["stream", "kafka://h:1/t", "--n-features", "4", "--scale", "01"],
     "--scale 01: a stream cannot read its data's ranges in advance"),
])
def test_from_args_refuses_bad_options_in_one_line(command: ModuleType, argv: list[str],
                                                   message: str) -> None:
    config_class = {check: check.CheckConfig, reproduce: reproduce.ReproduceConfig,
                    replay: ReplayConfig,
                    demo: demo.DemoConfig, tune: tune.TuneConfig,
                    stream: StreamConfig}[command]
    with pytest.raises(ConfigError) as exc:
        config_class.from_args(_args(command, argv), argv)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_read_options_come_from_the_options_of_one_builder(tmp_path: Path) -> None:
    # ReadOptions.from_args: every field but the path, a topic's head ranges and the file's
    # stamp when the run started is an option of replay (a new field without one, or a
    # renamed option, would stay at its default)
    from kernelstream.data.options import ReadOptions

    given = {"fmt": ("--format", "csv"), "n_features": ("--n-features", 5),
             "label_column": ("--label-column", 2), "task": ("--task", "regression"),
             "scale": ("--scale", "01"), "limit": ("--limit", 7),
             "delimiter": ("--delimiter", ";"), "header": ("--header", True),
             "key_by": ("--key-by", "id"), "scale_target": ("--scale-target", "01"),
             "hash_features": ("--hash-features", 10), "rows": ("--rows", "dense")}
    names = {f.name for f in dataclasses.fields(ReadOptions)} - {"path", "scale_ranges",
                                                                 "stamp"}
    assert names - set(given) == {"positive_label"}  # (classification's: below)
    argv = ["replay", "x.csv", *(a for flag, v in given.values() for a in (
        [flag] if v is True else [flag, str(v)]))]
    read = ReadOptions.from_args(_args(replay, argv), "x.csv")
    assert {k: getattr(read, k) for k in given} == {k: v for k, (_, v) in given.items()}
    read = ReadOptions.from_args(_args(replay, ["replay", "x", "--positive-label", "yes"]), "x")
    assert (read.positive_label, read.task, read.scale) == ("yes", "classification", "auto")
    # a command without an option keeps the field's default (check has no --scale)
    read = ReadOptions.from_args(_args(check, ["check", "x"]), "x")
    assert (read.scale, read.rows) == ("none", "auto")
