"""Where ``reproduce --out-dir`` and ``report --out`` may write: never over a user's files
without ``--overwrite``; and a replay refused by its data check leaves no folder behind."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from kernelstream.pipelines import run_folder
from kernelstream.pipelines.cli import main


def _err_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# -- reproduce --out-dir ----------------------------------------------------------------------
@pytest.fixture
def fake_p0(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """``reproduce p0`` writing p0.md/p0.json as the protocol does, without running it."""
    from kernelstream.experiments import p0, report

    written: list[Path] = []

    def fake(opts: object) -> object:
        out = Path(opts.out_dir)  # type: ignore[attr-defined]
        report.write_report(out, "p0", ["ours"], {"machine": "m", "pipeline_args": []})
        written.append(out)
        return types.SimpleNamespace(passed=0, judged=0, wall_seconds=0.0,
                                     files=[out / "p0.md"])

    monkeypatch.setattr(p0, "reproduce", fake)
    return written


def test_reproduce_refuses_a_folder_of_other_files(tmp_path: Path, fake_p0: list[Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "p0.md").write_text("my notes")
    base = ["reproduce", "p0", "--data-dir", str(tmp_path), "--out-dir", str(mine), "-q"]
    assert main(base) == 2
    line = _err_line(capsys)
    assert "is not empty (p0.md)" in line and "--overwrite" in line
    assert (mine / "p0.md").read_text() == "my notes" and fake_p0 == []
    assert main([*base, "--overwrite"]) == 0  # asked for
    assert (mine / "p0.md").read_text() == "ours\n"


def test_reproduce_writes_into_its_own_folders(tmp_path: Path, fake_p0: list[Path]) -> None:
    new = tmp_path / "new"
    base = ["reproduce", "p0", "--data-dir", str(tmp_path), "-q", "--out-dir"]
    assert main([*base, str(new)]) == 0
    assert sorted(p.name for p in new.iterdir()) == ["p0.json", "p0.md"]
    assert main([*base, str(new)]) == 0  # a previous reproduction: its tables replaced
    retuned = tmp_path / "retuned"  # what --retune-only leaves
    retuned.mkdir()
    (retuned / "tuned_params_p0.json").write_text("{}")
    assert main([*base, str(retuned)]) == 0
    results = tmp_path / "results"  # as the checkout's benchmarks/results: no marker
    results.mkdir()
    (results / "p0.json").write_text(json.dumps({"machine": "m", "pipeline_args": []}))
    (results / "notes.md").write_text("kept")
    assert main([*base, str(results)]) == 0
    assert (results / "notes.md").read_text() == "kept"
    assert not (results / run_folder.MARKER).exists()
    assert fake_p0 == [new, new, retuned, results]


# -- report --out -----------------------------------------------------------------------------
def _run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    assert main(["replay", "german", "-l", "bogd", "-p", "gamma=0.5", "--limit", "40",
                 "--runner", "loop", "-q", "--out", str(out)]) == 0
    return out


def test_report_never_replaces_a_file_it_did_not_write(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    pytest.importorskip("matplotlib")
    run = _run(tmp_path)
    capsys.readouterr()
    mine = tmp_path / "mine.html"
    mine.write_text("<html><title>my page</title></html>")
    assert main(["report", str(run), "--out", str(mine)]) == 2
    assert "is not a kernelstream report" in _err_line(capsys)
    assert mine.read_text() == "<html><title>my page</title></html>"
    ours = tmp_path / "ours.html"
    assert main(["report", str(run), "--out", str(ours)]) == 0
    assert main(["report", str(run), "--out", str(ours)]) == 0  # its own page: replaced
    assert main(["report", str(run), "--out", str(mine), "--overwrite"]) == 0
    assert "kernelstream report" in mine.read_text()
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(tmp_path)]) == 2
    assert "is a folder" in _err_line(capsys)


# -- replay refused by its data check -------------------------------------------------------
def test_a_refused_replay_leaves_its_folder_as_it_was(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    big = ["replay", "german", "-l", "bogd", "-p", "budget=1000000000", "-p", "gamma=0.5",
           "--runner", "loop", "-q", "--out"]
    assert main([*big, str(tmp_path / "new")]) == 2
    assert "lower the budget" in _err_line(capsys)
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    assert main([*big, str(tmp_path / "empty")]) == 2
    assert "lower the budget" in _err_line(capsys)
    assert list((tmp_path / "empty").iterdir()) == []  # kept, and empty
    (tmp_path / "empty" / "x").write_text("mine")  # refused before the data check: as it was
    assert main([*big, str(tmp_path / "empty")]) == 2
    assert "holds no kernelstream run" in _err_line(capsys)
    assert [p.name for p in (tmp_path / "empty").iterdir()] == ["x"]


def test_overwrite_keeps_the_previous_run_when_the_new_one_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["replay", "german", "-l", "perceptron", "--limit", "50", "--runner", "loop",
                 "-q", "--out", str(out)]) == 0
    capsys.readouterr()  # (the first run's own warnings)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    summary = (out / "summary.json").read_text()
    assert main(["replay", "german", "-l", "bogd", "-p", "budget=1000000000", "-p",
                 "gamma=0.5", "--runner", "loop", "-q", "--out", str(out), "--overwrite"]) == 2
    assert "lower the budget" in _err_line(capsys)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert (out / "summary.json").read_text() == summary


def test_overwrite_refuses_to_delete_a_user_file_inside_an_output_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--overwrite removes the previous run's output folders whole: a file the user put in
    one (predictions/notes.txt) is refused, not deleted with them."""
    out = tmp_path / "run"
    args = ["replay", "german", "-l", "bpa-s", "--limit", "40", "--runner", "loop", "-q",
            "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    notes = out / "predictions" / "notes.txt"
    notes.write_text("mine")
    assert main([*args, "--overwrite"]) == 2
    assert "predictions/notes.txt was not written by kernelstream" in _err_line(capsys)
    assert notes.read_text() == "mine" and (out / "summary.json").exists()
    notes.unlink()
    assert main([*args, "--overwrite"]) == 0  # the run's own files only: replaced


def test_an_interrupted_loop_replay_keeps_no_partial_predictions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C during a loop replay: no predictions/part-loop.parquet that would read as a
    whole run's (there is no summary.json either); the folder is still a run's, for
    --overwrite."""
    from kernelstream.pipelines.replay import loop

    calls = []

    def learnt(self: object, *args: object) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(loop.Progress, "learnt", learnt)
    out = tmp_path / "run"
    args = ["replay", "german", "-l", "bpa-s", "--runner", "loop", "-q", "--out", str(out),
            "--", "--block_size=100"]
    assert main(args) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not list((out / "predictions").glob("*.parquet"))
    assert not (out / "summary.json").exists() and (out / run_folder.MARKER).exists()
    monkeypatch.undo()
    assert main([*args[:-2], "--overwrite"]) == 0
