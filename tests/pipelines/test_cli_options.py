"""The options several commands share parse the same everywhere (one definition each), and the
lower bounds of numeric options give one message."""

from __future__ import annotations

import argparse

import pytest

from kernelstream.errors import ConfigError
from kernelstream.pipelines import cli
from kernelstream.pipelines.commands._common import add_data_options
from kernelstream.pipelines.config import check_at_least

# a value each data option accepts, with a minimal command line per command
VALUES = {"--format": "csv", "--label-column": "0", "--n-features": "7",
          "--hash-features": "1024", "--positive-label": "1", "--delimiter": ";",
          "--key-by": "0", "--limit": "5", "--task": "regression", "--rows": "sparse",
          "--scale": "01", "--scale-target": "01"}
BASE = {"replay": ["replay"], "check": ["check", "d"], "tune": ["tune", "d", "-l", "x", "-g",
        "a=1"], "stream": ["stream", "kafka://h:1/t"]}
# stream's --key-by is its own option (one model per event-id prefix), not a column
OWN = {("stream", "--key-by")}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    return cli.build_parser()._subparsers._group_actions[0].choices


def test_a_data_option_parses_the_same_in_every_command_that_offers_it() -> None:
    parsers = _parsers()
    seen: dict[str, dict[str, object]] = {}
    for command, base in BASE.items():
        offered = {o for a in parsers[command]._actions for o in a.option_strings}
        for flag, value in VALUES.items():
            if flag in offered and (command, flag) not in OWN:
                dest = flag.removeprefix("--").replace("-", "_")
                args = cli.build_parser().parse_args([*base, flag, value])
                seen.setdefault(flag, {})[command] = getattr(args, dest)
    assert seen["--hash-features"] == dict.fromkeys(BASE, 10)  # 2^10 given as the power
    assert set(seen["--n-features"]) == set(BASE) and set(seen["--n-features"].values()) == {7}
    for flag, by_command in seen.items():
        assert len(set(map(repr, by_command.values()))) == 1, (flag, by_command)
    assert set(seen) == set(VALUES)  # each value reached a command


def test_a_change_to_an_option_not_added_is_refused() -> None:
    p = argparse.ArgumentParser()
    with pytest.raises(ValueError, match=r"not added: \['tsak'\]"):
        add_data_options(p, {"--task": "t"}, tsak={"default": "regression"})
    add_data_options(p, {"--task": "t"}, task={"default": "regression"})
    assert p.parse_args([]).task == "regression"


def test_check_at_least_names_the_first_option_below_its_minimum() -> None:
    args = argparse.Namespace(limit=None, seed=-1, tune_rows=0)
    check_at_least(args, limit=1)  # not given: passes
    with pytest.raises(ConfigError, match=r"^--seed must be >= 0, got -1$"):
        check_at_least(args, limit=1, seed=0, tune_rows=1)
    with pytest.raises(ConfigError, match=r"^--tune-rows must be >= 1, got 0$"):
        check_at_least(args, tune_rows=1, seed=0)


def test_the_learner_help_names_only_options_of_its_command() -> None:
    """demo's --learner help said "with --task regression", an option demo does not have."""
    import re
    for name in ("demo", "stream", "replay"):
        parser = _parsers()[name]
        [action] = [a for a in parser._actions if "--learner" in a.option_strings]
        named = set(re.findall(r"(--[a-z][a-z-]*)", action.help or ""))
        assert named <= set(parser._option_string_actions), (name, named)
