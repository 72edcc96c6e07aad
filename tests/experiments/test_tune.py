"""``kernelstream tune`` (held-out tuning permutations, grid cells as the configurations of one
replay) and ``replay --params-from``; the choice and ``tuned.json`` of
``kernelstream.experiments.tuning``."""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelstream import data
from kernelstream.data import widths
from kernelstream.engine.replay.sources import ReplayStreams
from kernelstream.experiments import tuning
from kernelstream.experiments.protocol import TUNED_DIR
from kernelstream.experiments.tuning import CellScore
from kernelstream.pipelines.cli import main
from kernelstream.pipelines.config import DEFAULT_BY_ROWS
from kernelstream.seeding import permutation

TUNED_PARAMS = TUNED_DIR / "tuned_params.json"


def _tuned_params() -> dict[str, Any]:
    return json.loads(TUNED_PARAMS.read_text())


def _tune(tmp_path: Path, *args: str, name: str = "t") -> dict[str, Any]:
    out = tmp_path / name
    assert main(["tune", *args, "--out", str(out), "-q"]) == 0
    return json.loads((out / "tuned.json").read_text())


# -- grids and the choice ------------------------------------------------------------------------


def test_grid_cells_vary_the_first_key_slowest() -> None:
    axes = tuning.parse_grid(["eta=1e-5, 0.1", "lam=1,10,100"])
    assert axes == {"eta": ["1e-5", "0.1"], "lam": ["1", "10", "100"]}
    cells = tuning.grid_cells(axes)
    assert cells[:4] == [{"eta": "1e-5", "lam": "1"}, {"eta": "1e-5", "lam": "10"},
                         {"eta": "1e-5", "lam": "100"}, {"eta": "0.1", "lam": "1"}]
    assert len(cells) == 6


@pytest.mark.parametrize(("specs", "msg"), [
    (["c"], "expected KEY=V1,V2"),
    (["c=1,,2"], "an empty value"),
    (["c=1", "c=2"], "given twice"),
    (["c=1,2,1"], "value(s) 1 given twice"),
    (["x.c=1"], "expected KEY=V1,V2"),
    ([], "no --grid"),
])
def test_bad_grids_are_refused(specs: list[str], msg: str) -> None:
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        tuning.parse_grid(specs)


def test_random_cells_are_seeded_distinct_and_in_grid_order() -> None:
    a = tuning.random_cells(100, 10, seed=0)
    assert a == tuning.random_cells(100, 10, seed=0) and a == sorted(set(a)) and len(a) == 10
    assert a != tuning.random_cells(100, 10, seed=1)
    assert tuning.random_cells(5, 9, seed=0) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="--random"):
        tuning.random_cells(5, 0, seed=0)


def _cell(i: int, mr: float | None, loss: float) -> CellScore:
    return CellScore(index=i, label=f"cell{i}", grid={"c": str(i)}, params={"c": i},
                     mistake_rate=mr, avg_loss=loss)


def _perms(i: int, rates: list[float], losses: list[float] | None = None) -> CellScore:
    losses = losses or [0.5] * len(rates)
    return CellScore(index=i, label=f"cell{i}", grid={}, params={},
                     mistake_rate=float(np.mean(rates)), avg_loss=float(np.mean(losses)),
                     per_permutation=[(10 + r, m, loss) for r, (m, loss)
                                      in enumerate(zip(rates, losses, strict=True))])


def test_a_gain_within_its_standard_error_is_flagged_as_noise() -> None:
    base = _perms(-1, [20.0, 22.0, 21.0])
    # paired: 0.5 pp better on average, differences 0.0, 1.5, 0.0: se 0.5, under twice it
    noisy = _perms(1, [20.0, 20.5, 21.0])
    line = tuning.gain_warning(noisy, base, "classification", 1000)
    assert line is not None and "0.5 pp" in line and "over 3 tuning permutations, paired" in line
    # the same gain on every permutation has no spread to judge by: the binomial error of
    # all their rows (1 pp over 3 x 1,000 rows: within it; 5 pp: not)
    line = tuning.gain_warning(_perms(1, [19.0, 21.0, 20.0]), base, "classification", 1000)
    assert line is not None and "the gain the same on all 3 tuning permutations" in line
    assert tuning.gain_warning(_perms(1, [15.0, 17.0, 16.0]), base, "classification",
                               1000) is None
    # few permutations: Student's t, not 2 (3 permutations: 4.3 standard errors; this gain
    # of 1.1 pp is 2.2 of them)
    line = tuning.gain_warning(_perms(1, [19.0, 20.0, 20.7]), base, "classification", 1000)
    assert line is not None and "4.3 times" in line
    # a diverged default (a non-finite loss): the gain is no question of noise
    rd = _perms(-1, [0.0, 0.0, 0.0], [1.0, math.inf, 1.5])
    assert tuning.gain_warning(_perms(1, [0.0] * 3, [0.9, 2.1, 1.4]), rd, "regression",
                               None) is None
    # no gain: nothing to say
    assert tuning.gain_warning(_perms(1, [21.0, 22.0, 21.0]), base, "classification",
                               1000) is None
    # one permutation of a mistake rate: the binomial error of n rows (0.5 pp of ~20 % over
    # 1,000 rows is well within it; 5 pp over 100,000 rows is not)
    one_base, one = _perms(-1, [20.0]), _perms(1, [19.5])
    line = tuning.gain_warning(one, one_base, "classification", 1000)
    assert line is not None and "one tuning permutation of 1,000 rows" in line
    assert "--tune-permutations 3 or more" in line
    assert tuning.gain_warning(_perms(1, [15.0]), one_base, "classification", 100_000) is None
    # a regression over permutations: the average loss's paired differences
    rb = _perms(-1, [0.0, 0.0, 0.0], [1.0, 2.0, 1.5])
    line = tuning.gain_warning(_perms(1, [0.0] * 3, [0.9, 2.1, 1.4]), rb, "regression", None)
    assert line is not None and "average loss" in line and "pp" not in line
    # one permutation of a regression: no error to judge by, nothing said
    assert tuning.gain_warning(_perms(1, [0.0], [0.9]), _perms(-1, [0.0], [1.0]),
                               "regression", 1000) is None


def test_ties_go_to_grid_order_or_to_the_loss() -> None:
    cells = [_cell(2, 10.0, 0.5), _cell(0, 12.0, 0.1), _cell(1, 10.0, 0.4), _cell(3, 10.0, 0.3)]
    assert tuning.choose(cells, "classification").index == 1  # earliest of the 10.0 cells
    assert tuning.choose(cells, "classification", "loss").index == 3
    # regression: the average loss alone decides
    assert tuning.choose(cells, "regression").index == 0
    # equal to 9 decimals is a tie (means of the same mistakes)
    near = [_cell(0, 0.1 + 0.2, 1.0), _cell(1, 0.3, 0.0)]
    assert tuning.choose(near, "classification").index == 0


# -- the papers' tuning, recovered ---------------------------------------------------------------


def _check_recovered(doc: dict[str, Any], selected: dict[str, Any], keys: list[str]) -> None:
    """``doc`` picks what the committed ``tuned_params.json`` selected, with the same scores."""
    assert {k: doc["params"][k] for k in keys} == {k: selected["params"][k] for k in keys}
    assert doc["score"]["value"] == pytest.approx(selected["tune_mistake_rate"], abs=5e-5)
    committed = dict(selected["grid"])
    for c in doc["cells"]:
        label = ",".join(f"{k}={tuning.param_text(c['params'][k]).removesuffix('.0')}"
                         for k in keys)
        assert c["mistake_rate"] == pytest.approx(committed[label], abs=5e-5), label


def test_tune_recovers_the_committed_german_values(tmp_path: Path) -> None:
    """P3 on german (the embedded german.numer_scale), at the KA width: BPA-S's C and, among
    BOGD's many ties (every small step gives 29.9 %), the first cell in grid order."""
    sel = _tuned_params()["p3"]["german"]["selected"]["ka"]
    gamma = repr(sel["bpa-s"]["params"]["gamma"])
    doc = _tune(tmp_path, "german", "-l", "bpa-s", "-p", "budget=100", "-p", f"gamma={gamma}",
                "--grid", "c=0.25,0.5,1", "--runner", "loop")
    _check_recovered(doc, sel["bpa-s"], ["c"])
    assert doc["tuned"] == {"c": 0.5} and doc["protocol"]["permutations"] == [1000]
    doc = _tune(tmp_path, "german", "-l", "bogd", "-p", "budget=100", "-p", "variant=sol",
                "-p", f"gamma={gamma}", "--grid", "eta=1e-05,0.0001",
                "--grid", "lam=0.0001,0.001", "--runner", "loop", name="bogd")
    _check_recovered(doc, sel["bogd"], ["eta", "lam"])
    assert len({c["mistake_rate"] for c in doc["cells"]}) == 1  # all four tie


def test_tune_recovers_the_committed_spambase_value(tmp_path: Path,
                                                    shared_datasets: Path) -> None:
    """P3 on spambase (UCI spambase.data, min-max [0, 1], spam = +1) at the KA width."""
    sel = _tuned_params()["p3"]["spambase"]["selected"]["ka"]["bpa-s"]
    doc = _tune(tmp_path, str(shared_datasets / "spambase.data"), "--scale", "01",
                "--positive-label", "1", "-l", "bpa-s", "-p", "budget=100",
                "-p", f"gamma={sel['params']['gamma']!r}", "--grid", "c=0.25,0.5,1",
                "--runner", "loop")
    _check_recovered(doc, sel, ["c"])
    assert doc["data"]["examples"] == 4601


def test_beam_and_workers_tune_as_the_loop(tmp_path: Path) -> None:
    args = ["german", "-l", "bpa-s", "-p", "budget=50", "--grid", "c=0.5,1,2",
            "--grid", "sigma=1,4"]
    loop = _tune(tmp_path, *args, "--runner", "loop", name="loop")
    beam = _tune(tmp_path, *args, "-j", "2", name="beam")

    def scores(doc: dict[str, Any]) -> list[Any]:
        return [(c["grid"], c["mistake_rate"], c["avg_loss"]) for c in doc["cells"]]

    assert scores(beam) == scores(loop) and beam["params"] == loop["params"]
    assert loop["protocol"]["grid"] == {"c": ["0.5", "1", "2"], "sigma": ["1", "4"]}
    assert "gamma" in loop["params"]  # sigma given, the learner's gamma stored


def test_held_out_permutations_prefix_and_random_cells(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    out = tmp_path / "t"
    assert main(["tune", "german", "-l", "pa-i", "--grid", "c=0.1,0.5,1,2,4",
                 "--random", "3", "--tune-permutations", "2", "--tune-perm", "7",
                 "--tune-rows", "300", "--runner", "loop", "-o", str(out), "-q"]) == 0
    stdout = capsys.readouterr().out
    doc = json.loads((out / "tuned.json").read_text())
    assert [c["cell"] for c in doc["cells"]] == tuning.random_cells(5, 3, seed=0)
    assert doc["protocol"]["permutations"] == [7, 8] and doc["data"]["examples"] == 300
    for c in doc["cells"]:
        assert [p["permutation"] for p in c["per_permutation"]] == [7, 8]
    assert sum(c["chosen"] for c in doc["cells"]) == 1
    assert "chosen: c=" in stdout and "tuned.json" in stdout
    md = (out / "tuned.md").read_text()
    assert md.startswith("# Tuning pa-i on german") and "**yes**" in md
    # the streams: the first 300 positions of permutations 7 and 8 of the whole data set
    X, _ = data.load_dataset("german")
    spec = ReplayStreams(("a",), seed=0, permutations=2, first=7, rows=300)
    assert list(spec.reps) == [7, 8]
    assert np.array_equal(spec.order(X.shape[0], 8), permutation(X.shape[0], 0, 8)[:300])


def test_regression_tunes_the_average_loss(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 3))
    yv = X @ [0.5, -1.0, 0.2]
    path = tmp_path / "r.csv"
    path.write_text("".join(",".join(repr(float(v)) for v in [*x, t]) + "\n"
                            for x, t in zip(X, yv, strict=True)))
    doc = _tune(tmp_path, str(path), "-l", "ioks", "-p", "loss=square", "--grid",
                "radius=0.1,1,10", "--runner", "loop")
    assert doc["task"] == "regression" and doc["score"]["metric"] == "avg_loss"
    best = min(doc["cells"], key=lambda c: c["avg_loss"])
    assert best["chosen"] and best["mistake_rate"] is None


@pytest.mark.parametrize(("args", "msg"), [
    (["german", "-l", "bpa-s", "--grid", "c=1", "-p", "c=2"], "-p c=... and --grid c=..."),
    (["german", "-l", "bpa-s", "--grid", "sigma=1,2", "-p", "gamma=2"],
     "-p gamma=... and --grid sigma=..."),
    (["german", "-l", "bpa-s", "--grid", "c=1,x"], "parameter 'c' must be float"),
    (["german", "-l", "bpa-s", "--grid", "nope=1"], "unknown parameter"),
    (["german", "-l", "x=bpa-s", "--grid", "c=1"], "the learner's name alone"),
    (["german", "-l", "bpa-s", "--grid", "c=1", "--tune-rows", "0"], "--tune-rows must be"),
    (["kafka://localhost:9/t", "-l", "bpa-s", "--grid", "c=1"], "a Kafka topic"),
    # a kernel without a width: every cell of a width grid would be the same run
    (["german", "-l", "perceptron", "-p", "kernel=linear"],
     "perceptron with kernel=linear has no Gaussian width to tune"),
    (["german", "-l", "perceptron", "-p", "kernel=polynomial", "--grid", "sigma=1,2"],
     "--grid sigma=...: kernel=polynomial has no Gaussian width"),
])
def test_bad_tune_commands_fail_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              args: list[str], msg: str) -> None:
    assert main(["tune", *args, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kernelstream tune: error:") and msg in err[0]


# -- replay --params-from ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tuned_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tuned")
    assert main(["tune", "german", "-l", "bpa-s", "-p", "budget=30", "--grid", "c=0.5,2",
                 "--tune-rows", "200", "--runner", "loop", "-o", str(out), "-q"]) == 0
    return out / "tuned.json"


def _replay_params(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = tmp_path / "r"
    assert main(["replay", "german", *args, "--limit", "50", "--runner", "loop", "-o",
                 str(out), "-q", "--overwrite"]) == 0
    return [c["params"] for c in json.loads((out / "summary.json").read_text())["configs"]]


def test_replay_runs_the_tuned_parameters(tmp_path: Path, tuned_file: Path) -> None:
    doc = json.loads(tuned_file.read_text())
    [params] = _replay_params(tmp_path, "--params-from", str(tuned_file))
    assert params == doc["params"] and params["budget"] == 30
    # an explicit -p wins, for every configuration of the tuned learner
    [params] = _replay_params(tmp_path, "--params-from", str(tuned_file), "-p", "budget=7")
    assert params["budget"] == 7 and params["c"] == doc["params"]["c"]
    a, b = _replay_params(tmp_path, "--params-from", str(tuned_file), "-l", "bpa-s",
                          "-l", "bogd", "-p", "bogd.budget=5")
    assert a == doc["params"] and b["budget"] == 5
    a, b = _replay_params(tmp_path, "--params-from", str(tuned_file), "-l", "x=bpa-s",
                          "-l", "y=bpa-s", "-p", "y.c=3")
    assert a == doc["params"] and b == {**doc["params"], "c": 3.0}


def test_params_from_a_wrong_file_fails_with_one_line(tmp_path: Path, tuned_file: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    other = tmp_path / "summary.json"
    other.write_text('{"schema": 1}')
    cases = [(["--params-from", str(other)], "not a tuned.json written by `kernelstream tune`"),
             (["--params-from", str(tmp_path / "none.json")], "cannot read it"),
             (["--params-from", str(tuned_file), "-l", "bogd"],
              "holds parameters of bpa-s, not of the run's learner(s) bogd")]
    for args, msg in cases:
        assert main(["replay", "german", *args, "-o", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], err


def test_params_from_notes_evaluation_on_tuning_permutations(
        tmp_path: Path, tuned_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _replay_params(tmp_path, "--params-from", str(tuned_file), "-R", "2")
    assert "note" not in capsys.readouterr().err
    doc = json.loads(tuned_file.read_text())
    assert tuning.overlap_note(doc, 0, 1001) is not None
    assert tuning.overlap_note(doc, 1, 1001) is None  # another seed: other permutations


# -- the grid's edge, the default configuration, the rows tuned on, no-skill ------------------


def test_the_edge_warning_orders_auto_widths_by_their_factor() -> None:
    """``auto*F`` values (the default gamma grid) are ordered by F, or by F times the width
    among numbers; the largest factor chosen is the edge."""
    from kernelstream.pipelines.commands.tune import tune_warnings

    grid = {"gamma": [f"auto*{f:g}" for f in widths.TUNE_FACTORS]}
    [top] = tune_warnings(grid, {"gamma": "auto*8"}, None)
    assert top.startswith("gamma=auto*8 is the largest value of its grid")
    [low] = tune_warnings(grid, {"gamma": "auto*0.125"}, None)
    assert "smallest" in low
    assert tune_warnings(grid, {"gamma": "auto"}, None) == []  # auto = auto*1, inside
    # a mix of numbers and factors, by the data-driven width (0.1 here): 0.5 is the largest
    mix = {"gamma": ["auto", "0.5", "auto*2"]}
    [edge] = tune_warnings(mix, {"gamma": "0.5"}, None, auto=0.1)
    assert "largest" in edge
    assert tune_warnings(mix, {"gamma": "auto*2"}, None, auto=0.1) == []


def test_tune_warns_when_the_default_grid_chooses_its_edge(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t"
    assert main(["tune", "german", "-l", "bpa-s", "-p", "budget=30", "--grid",
                 "gamma=auto*4,auto*8", "--tune-rows", "200", "--runner", "loop", "-q",
                 "-o", str(out)]) == 0
    err = capsys.readouterr().err
    chosen = json.loads((out / "tuned.json").read_text())["cells"]
    [value] = [c["grid"]["gamma"] for c in chosen if c["chosen"]]
    assert f"gamma={value} is the" in err, err  # either value of two is an edge


def _replay_summary(tmp_path: Path, data: str, *args: str, name: str = "r") -> dict[str, Any]:
    out = tmp_path / name
    assert main(["replay", data, *args, "--limit", "60", "--runner", "loop", "-o", str(out),
                 "-q", "--overwrite"]) == 0
    return json.loads((out / "summary.json").read_text())


def test_tune_suggests_and_replay_takes_the_read_options_tuned_with(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t"
    assert main(["tune", "german", "-l", "bpa-s", "-p", "budget=30", "--grid", "c=0.5,2",
                 "--scale", "pm1", "--tune-rows", "100", "--runner", "loop", "-q",
                 "-o", str(out)]) == 0
    stdout = capsys.readouterr().out
    tuned = out / "tuned.json"
    doc = json.loads(tuned.read_text())
    assert doc["data"]["read_args"]["scale"] == "pm1" and doc["data"]["file_bytes"] > 0
    if doc["baseline"]["beaten"]:
        assert f"use: kernelstream replay german --scale pm1 --params-from {tuned}" in stdout
    else:
        assert "use the default: kernelstream replay german --scale pm1" in stdout
    # no --scale: the tuned run's, said in one line
    s = _replay_summary(tmp_path, "german", "--params-from", str(tuned))
    err = capsys.readouterr().err
    assert s["scale"] == "pm1" and "reading the data as tuned: --scale pm1" in err, err
    assert "warning: the" not in err  # (replay's own no-skill warning may come)
    # an explicit other scaling wins, with one warning line; so do other data
    s = _replay_summary(tmp_path, "german", "--params-from", str(tuned), "--scale", "01",
                        "--task", "classification")
    err = capsys.readouterr().err.splitlines()
    assert s["scale"] == "01"
    assert [ln for ln in err if "warning: the" in ln] == [
        f"kernelstream: warning: the read options differ from those the parameters were "
        f"tuned with ({tuned}): --scale 01 (tuned: pm1)"]
    other = tmp_path / "other.csv"
    other.write_text("".join(f"{i % 7},{i % 3},{1 if i % 2 else -1}\n" for i in range(80)))
    _replay_summary(tmp_path, str(other), "--params-from", str(tuned), "--scale", "pm1")
    err = capsys.readouterr().err
    assert "tuned on german, not on other.csv" in err, err
    # an older tuned.json (no read_args, no file_bytes): its recorded scaling is taken
    old = tmp_path / "old.json"
    doc["data"] = {k: v for k, v in doc["data"].items() if k not in ("read_args", "file_bytes")}
    old.write_text(json.dumps(doc))
    s = _replay_summary(tmp_path, "german", "--params-from", str(old))
    assert s["scale"] == "pm1" and "warning: the" not in capsys.readouterr().err


def test_replay_params_from_warns_on_another_file_of_the_same_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    paths = []
    for n, folder in ((80, "a"), (60, "b")):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "d.csv"
        X = rng.normal(size=(n, 3))
        path.write_text("".join(",".join(f"{v:.4f}" for v in x) + f",{1 if x[0] > 0 else -1}\n"
                                for x in X))
        paths.append(str(path))
    out = tmp_path / "t"
    assert main(["tune", paths[0], "-l", "pa-i", "--grid", "c=0.5,1", "--runner", "loop",
                 "-q", "-o", str(out)]) == 0
    _replay_summary(tmp_path, paths[0], "--params-from", str(out / "tuned.json"))
    assert "warning: the" not in capsys.readouterr().err
    _replay_summary(tmp_path, paths[1], "--params-from", str(out / "tuned.json"))
    err = capsys.readouterr().err
    assert "the parameters were tuned on a d.csv of" in err and "this one has" in err, err


def test_tune_without_a_learner_tunes_the_replay_default(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """No -l: the learner and fixed parameters ``replay german`` runs (rff-rls with
    n_components=500 on dense rows), whose untuned configuration is a grid cell here."""
    learner, fixed = DEFAULT_BY_ROWS["classification"]["dense"]
    doc = _tune(tmp_path, "german", "--grid", "gamma=auto*0.5,auto", "--tune-rows", "150",
                "--runner", "loop")
    assert doc["learner"] == learner and doc["protocol"]["fixed"] == fixed
    assert doc["params"]["n_components"] == int(fixed["n_components"])
    base = doc["baseline"]
    assert base["learner"] == learner and base["cell"] == 1 and base["fixed"] == fixed
    assert base["mistake_rate"] == doc["cells"][1]["mistake_rate"]
    # the configuration `replay german` runs (the whole file: gamma=auto is estimated on the
    # rows a replay learns, and --limit would take fewer than the tuning run's)
    assert main(["replay", "german", "--seed", "0", "--runner", "loop", "-q",
                 "-o", str(tmp_path / "plain")]) == 0
    s = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert s["learner"] == learner and s["params"] == base["params"]
    # -l naming the default learner starts from the same fixed parameters; -p wins
    doc = _tune(tmp_path, "german", "-l", learner, "-p", "lam=2", "--grid", "gamma=auto*0.5",
                "--tune-rows", "150", "--runner", "loop", name="named")
    assert doc["protocol"]["fixed"] == {**fixed, "lam": "2"}
    assert doc["params"]["n_components"] == int(fixed["n_components"])
    assert doc["baseline"]["cell"] is None and doc["baseline"]["params"]["lam"] == 1.0
    # the default's own scores per permutation, for checking tune's gain warning by hand
    assert [p["permutation"] for p in doc["baseline"]["per_permutation"]] == [
        p["permutation"] for p in doc["cells"][0]["per_permutation"]]
    # a learner that is not the default keeps its own parameters, the baseline is the default
    doc = _tune(tmp_path, "german", "-l", "bpa-s", "-p", "budget=20", "--grid",
                "gamma=auto", "--tune-rows", "150", "--runner", "loop", name="other")
    assert doc["protocol"]["fixed"] == {"budget": "20"} and doc["baseline"]["learner"] == learner


def test_tune_says_when_no_cell_beats_the_default(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t"
    # a width far too large: every kernel value ~0, the default learns
    assert main(["tune", "german", "-l", "bpa-s", "-p", "budget=5", "--grid", "gamma=1000",
                 "--tune-rows", "300", "--runner", "loop", "-q", "-o", str(out)]) == 0
    stdout = capsys.readouterr().out
    doc = json.loads((out / "tuned.json").read_text())
    assert doc["baseline"]["beaten"] is False
    assert doc["baseline"]["mistake_rate"] < doc["score"]["value"]
    lines = stdout.splitlines()
    assert any(ln.startswith("default ") for ln in lines)  # the baseline row
    [no] = [ln for ln in lines if ln.startswith("no cell beats the default")]
    assert no.endswith("use the default: kernelstream replay german")
    assert "--params-from" not in stdout
    assert "**no cell beats it**" in (out / "tuned.md").read_text()
    # a replay of those parameters anyway says that the default did better
    assert main(["replay", "german", "--params-from", str(out / "tuned.json"), "--limit", "60",
                 "--runner", "loop", "-q", "-o", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert (f"warning: {out / 'tuned.json'}: its chosen cell (mistake rate "
            f"{doc['score']['value']:.4g}%) did not beat the untuned default (rff-rls "
            "n_components=500: ") in err, err


def test_a_tuned_file_whose_choice_is_the_default_replays_without_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t"
    assert main(["tune", "german", "--limit", "400", "--grid", "gamma=auto*0.125,auto",
                 "--runner", "loop", "-q", "-o", str(out)]) == 0
    doc = json.loads((out / "tuned.json").read_text())
    assert doc["baseline"]["beaten"] is False and doc["cell"] == doc["baseline"]["cell"]
    capsys.readouterr()
    assert main(["replay", "german", "--params-from", str(out / "tuned.json"), "--limit", "60",
                 "--runner", "loop", "-q", "-o", str(tmp_path / "r")]) == 0
    assert "did not beat the untuned default" not in capsys.readouterr().err


def test_tune_shows_the_no_skill_rate_and_warns_as_replay(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """A one-class prefix: every cell makes no mistake, as the majority class; the table
    says so, tuned.json records it and replay's warning is given."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    path = tmp_path / "one.csv"
    path.write_text("".join(",".join(f"{v:.4f}" for v in x) + f",{1 if i < 100 else -1}\n"
                            for i, x in enumerate(X)))
    out = tmp_path / "t"
    assert main(["tune", str(path), "-l", "pa-i", "--grid", "c=0.5,1", "--limit", "100",
                 "--runner", "loop", "-q", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    doc = json.loads((out / "tuned.json").read_text())
    assert doc["noskill"]["mistake_rate"] == 0.0 and doc["score"]["value"] == 0.0
    assert all(c["noskill_mistake_rate"] == 0.0 for c in doc["cells"])
    [row] = [ln for ln in captured.out.splitlines() if ln.startswith("no-skill")]
    assert "0.0000" in row
    assert ("kernelstream tune: warning: chosen cell 0: mistake rate 0% is not better than "
            "always predicting the majority class so far (0%)") in captured.err, captured.err


def test_a_cell_that_only_ties_the_default_is_not_chosen(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On german's first 400 rows a width 1/8 of auto makes as many mistakes as the default
    (auto, cell 1): the default stays chosen, and no edge warning points at 1/8."""
    out = tmp_path / "t"
    assert main(["tune", "german", "--limit", "400", "--grid", "gamma=auto*0.125,auto",
                 "--runner", "loop", "-q", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    doc = json.loads((out / "tuned.json").read_text())
    first, default = doc["cells"]
    assert first["mistake_rate"] == default["mistake_rate"]  # the tie this test is about
    assert doc["baseline"]["cell"] == 1 and doc["cell"] == 1 and default["chosen"]
    assert doc["baseline"]["beaten"] is False and "smallest value" not in err


def test_data_record_measures_the_file_a_replay_reads(tmp_path: Path) -> None:
    # tuned.json's file size: of the file replay_checks.data_path names (an embedded set's
    # packaged file), the one lookup the replay uses too
    from kernelstream.pipelines.replay.replay_checks import data_path

    assert tuning.data_record("german")["file_bytes"] == os.path.getsize(data_path("german"))
    f = tmp_path / "x.svm"
    f.write_text("1 1:1\n")
    assert tuning.data_record(str(f))["file_bytes"] == 6
    assert tuning.data_record(str(tmp_path / "missing"))["file_bytes"] is None
    assert tuning.data_record("kafka://localhost:9092/t")["file_bytes"] is None


def test_the_usual_path_runs_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``replay DATA``, ``tune DATA``, then the replay tune prints, each with its default
    out folder: the tuned replay gets its own (runs/tuned-...), not the first replay's."""
    monkeypatch.chdir(tmp_path)
    common = ["--limit", "120", "--runner", "loop", "-q"]
    assert main(["replay", "german", "-l", "bpa-s", *common]) == 0
    assert main(["tune", "german", "-l", "bpa-s", "--grid", "c=0.5,2", *common]) == 0
    stdout = capsys.readouterr().out
    tuned = Path("runs") / "tune-german-bpa-s" / "tuned.json"
    assert tuned.exists()
    # the command tune prints (or the plain one), as written
    [line] = [ln for ln in stdout.splitlines() if "use: " in ln or "use the default: " in ln]
    printed = line.split("use: ", 1)[-1].split("use the default: ", 1)[-1].rstrip(")")
    argv = shlex.split(printed)
    assert argv[:2] == ["kernelstream", "replay"]
    if "--params-from" in argv:
        assert main([*argv[1:], "--runner", "loop", "-q"]) == 0
    else:  # the tuned file's replay all the same: its own folder beside the plain replay's
        assert main(["replay", "german", "--params-from", str(tuned), *common]) == 0
    assert (Path("runs") / "tuned-german-bpa-s" / "summary.json").exists()
    # its folder names the file (runs/tune-german-bpa-s/tuned.json)
    assert main(["replay", "german", "--params-from", str(tuned.parent), *common,
                 "-o", "runs/folder"]) == 0
    s = json.loads((Path("runs") / "folder" / "summary.json").read_text())
    assert s["params"] == json.loads(tuned.read_text())["params"]


def test_default_out_of_a_tuned_replay_is_named_after_its_folder() -> None:
    from kernelstream.engine.learner_config import LearnerConfig
    from kernelstream.pipelines.config import default_out
    configs = (LearnerConfig("bpa-s", "bpa-s", {}),)
    assert default_out("a9a", configs) == Path("runs/a9a-bpa-s")
    assert default_out("a9a", configs, "runs/tune-a9a-bpa-s/tuned.json") == Path(
        "runs/tuned-a9a-bpa-s")
    assert default_out("a9a", configs, "runs/a9a-tune/tuned.json") == Path("runs/a9a-tune-tuned")
    assert default_out("a9a", configs, "runs/a9a-tune/") == Path("runs/a9a-tune-tuned")
    assert default_out("a9a", configs, "tuned.json") == Path("runs/a9a-bpa-s-tuned")


def test_tune_table_shows_no_sv_count_for_learners_that_keep_no_examples() -> None:
    """rff-rls keeps no examples: "-" under #SV, as replay's table shows it (not 0.0)."""
    from kernelstream.experiments import tuning_table
    cell = {"cell": 0, "grid": {"gamma": "auto"}, "chosen": True, "mistake_rate": 25.0,
            "avg_loss": 0.5, "n_support_vectors": 0.0, "seconds": 1.0}
    doc = {"protocol": {"grid": {"gamma": ["auto"]}}, "task": "classification",
           "loss": "hinge", "learner": "rff-rls", "cells": [cell],
           "baseline": {**cell, "learner": "bpa-s", "n_support_vectors": 500.0}}
    head, rff, default = tuning_table.table_rows(doc)
    sv = head.index("#SV")
    assert (rff[sv], default[sv]) == ("-", "500.0")


def test_no_cell_beats_the_default_names_the_plain_replay_already_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The usual path ran ``replay DATA`` first: tune's "use the default" says where that run
    is, instead of a command whose folder already holds it."""
    monkeypatch.chdir(tmp_path)
    assert main(["replay", "german", "--limit", "60", "--runner", "loop", "-q"]) == 0
    assert main(["tune", "german", "-l", "bpa-s", "-p", "budget=5", "--grid", "gamma=1000",
                 "--tune-rows", "300", "--runner", "loop", "-q"]) == 0
    [no] = [ln for ln in capsys.readouterr().out.splitlines()
            if ln.startswith("no cell beats the default")]
    assert no.endswith("use the default: kernelstream replay german (the run in "
                       f"{Path('runs') / 'german-rff-rls'}, if it was made with these options: "
                       "no need to run it again)"), no
