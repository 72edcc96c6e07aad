"""The Python API's Gaussian widths are the CLI's: a width left to the data (unset, ``auto``)
is estimated from the data's first rows by ``evaluate``, ``run_replay`` and
``kernelstream replay`` alike, and the number is what each records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelstream import data, learners
from kernelstream.data import widths
from kernelstream.engine.evaluate import evaluate
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.pipelines import cli
from kernelstream.pipelines.replay.replay import run_replay
from kernelstream.pipelines.replay.replay_args import ReplayConfig

PERMS = 2  # over the whole of german (1000 rows: the estimate's first rows are all of X)


def _cli(tmp_path: Path, name: str, specs: list[str], scale: str) -> dict[str, Any]:
    out = tmp_path / f"cli-{name}-{scale}"
    argv = ["replay", "german", "-l", name, *specs, "--permutations", str(PERMS),
            "--runner", "loop", "--scale", scale, "--out", str(out), "--quiet"]
    assert cli.main(argv) == 0
    doc: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return doc


@pytest.mark.parametrize(("name", "params", "scale"), [
    ("rff-rls", {"n_components": 50}, "none"),  # gamma unset
    ("rff-rls", {"n_components": 50, "gamma": "auto"}, "01"),  # scaled rows: the head's own
    ("bpa-s", {"sigma": "auto*2"}, "none"),
    ("ea2oks", {}, "none"),  # sigmas unset: the default grid centred on the data's width
])
def test_cli_run_replay_and_evaluate_learn_with_the_same_width(
        tmp_path: Path, name: str, params: dict[str, Any], scale: str) -> None:
    specs = [a for k, v in params.items() for a in ("-p", f"{k}={v}")]
    doc = _cli(tmp_path, name, specs, scale)
    res = run_replay("german", [LearnerConfig(name, name, params)], tmp_path / "api",
                     permutations=PERMS, runner="loop", scale=scale)
    (api,) = res.eval_results()
    X, y = data.load_dataset("german", scale=scale)
    ev = evaluate(X, y, name, params, permutations=PERMS, progress=None, scale=scale)
    key = "sigmas" if name == "ea2oks" else "gamma"
    assert doc["params"][key] == api.params[key] == ev.params[key]
    assert doc["params"][key] != learners.get(name)().hparams[key]  # not the class default
    assert doc["mistake_rate"] == api.mistake_rate == ev.mistake_rate
    assert doc["params"] == api.params == ev.params


def test_width_is_the_files_first_rows_before_the_permutation() -> None:
    X, y = data.load_dataset("german")
    res = evaluate(X, y, "rff-rls", {"n_components": 20}, progress=None)
    opts = data.ReadOptions(path=str(data.embedded_path("german")))
    assert res.params["gamma"] == widths.file_gamma(opts) == widths.array_gamma(X[:1000])
    # auto*F: F times the estimate, rounded as the CLI's
    res2 = evaluate(X, y, "rff-rls", {"n_components": 20, "gamma": "auto*4"}, progress=None)
    assert res2.params["gamma"] == widths.rounded(4 * res.params["gamma"])


def test_a_resolved_configuration_is_kept_as_it_is(tmp_path: Path) -> None:
    given = LearnerConfig("r", "rff-rls", {"gamma": 0.25, "n_components": 20})
    assert given.auto_widths == {} and given.with_widths(lambda: 1 / 0) is given
    config = ReplayConfig.of("german", [given], tmp_path)
    assert config.learners == (given,)
    # the CLI's configuration (its widths resolved) passed back to the API: unchanged
    again = ReplayConfig.of("german", config.learners, tmp_path)
    assert again.learners == config.learners
    pending = LearnerConfig("r", "rff-rls", {"n_components": 20})
    assert pending.auto_widths == {"gamma": None}
    resolved = ReplayConfig.of("german", [pending], tmp_path).learners[0]
    assert resolved.auto_widths == {} and resolved.with_widths(lambda: 1 / 0) is resolved


def test_a_replay_config_built_directly_resolves_too(tmp_path: Path) -> None:
    """``ReplayConfig(...)`` (docs/python-api.md's form) learns with the width ``of`` does."""
    pending = (LearnerConfig("r", "rff-rls", {"n_components": 20}),
               LearnerConfig("e", "ea2oks", {}))
    built = ReplayConfig(data="german", learners=pending, out=str(tmp_path))
    assert built == ReplayConfig.of("german", pending, tmp_path)
    gamma = widths.file_gamma(data.ReadOptions(path=str(data.embedded_path("german"))))
    assert built.learners[0].params["gamma"] == gamma
    assert not any(c.auto_widths for c in built.learners)


def test_a_single_row_to_measure_is_a_warning_of_the_api(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the library does not print (the CLI prints the same line: test_bad_records)
    path = tmp_path / "d.svm"
    path.write_text("".join(f"{1 if i % 2 else -1} 1:{i / 7:.3f} 2:{i % 3}\n" for i in range(9)))
    with pytest.warns(RuntimeWarning, match=r"gamma=auto: a single row of .* gamma=1\.0"):
        config = ReplayConfig.of(str(path), [LearnerConfig("r", "rff-rls", {})], tmp_path,
                                 limit=1)
    assert config.learners[0].params["gamma"] == 1.0
    assert capsys.readouterr().err == ''

def test_an_adversarial_stream_resolves_as_its_file(tmp_path: Path) -> None:
    """``stream=``'s rows are drawn from the file: its width and scaling are the file's."""
    cfg = [LearnerConfig("b", "bpa-s", {"gamma": "auto"})]
    plain = ReplayConfig.of("german", cfg, tmp_path)
    stream = ReplayConfig.of("german", cfg, tmp_path, stream="german-1", runner="loop")
    assert stream.learners == plain.learners and stream.read == plain.read
    assert stream.auto_scale == plain.auto_scale


@pytest.mark.parametrize(("name", "params", "hint"), [
    ("rff-rls", {"gamma": "auto"}, "widths.auto_gamma(X[:1000])"),
    ("bpa-s", {"gamma": "AUTO*2"}, "widths.auto_gamma(X[:1000])"),
    ("rff-rls", {"sigma": "auto"}, "gamma_to_sigma"),
    ("ea2oks", {"sigmas": "auto"}, "centred_sigmas"),
])
def test_make_without_data_says_where_the_width_comes_from(
        name: str, params: dict[str, Any], hint: str) -> None:
    with pytest.raises(ValueError, match="estimated from the data") as err:
        learners.make(name, **params)
    msg = str(err.value)
    assert "\n" not in msg and hint in msg and "evaluate" in msg and "run_replay" in msg


@pytest.mark.parametrize("width", ["auto*x", "auto*-2", "auto*0", "AUTO*nan"])
def test_a_bad_auto_factor_asks_for_a_number_not_for_the_data(width: str) -> None:
    """``auto*x`` is a typo, not a width to estimate: the CLI printed the Python API's advice
    (``kernelstream.data.widths.auto_gamma(X[:1000])``) for it."""
    for name, key in (("bogd", "gamma"), ("bogd", "sigma"), ("raker", "sigmas")):
        with pytest.raises(ValueError, match=r"auto\*F needs a positive number F") as err:
            learners.make(name, **{key: width})
        assert "estimated from the data" not in str(err.value)
    assert cli.main(["replay", "german", "-l", "bogd", "-p", f"gamma={width}"]) == 2


@pytest.mark.parametrize("name", ["raker", "ea2oks"])
def test_make_sigmas_auto_hint_is_pasteable(name: str) -> None:
    """The grid hint is code: pasted with the data's X it gives a grid the learner takes,
    the learner's own default grid centred on the data's width."""
    import kernelstream.data.widths
    import kernelstream.learners.kernels

    with pytest.raises(ValueError, match="estimated from the data") as err:
        learners.make(name, sigmas="auto")
    code = str(err.value).split("give a grid: ", 1)[1].split(", or pass the", 1)[0]
    assert repr(learners.make(name).hparams["sigmas"]) in code  # the learner's default grid
    X = np.random.default_rng(0).normal(size=(200, 4))
    grid = eval(code, {"kernelstream": kernelstream, "X": X})
    assert grid == widths.centred_sigmas(widths.auto_gamma(X), [0.25, 0.5, 1, 2, 4, 8])
    assert learners.make(name, sigmas=grid).hparams["sigmas"] == grid
