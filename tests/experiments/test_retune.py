"""``kernelstream reproduce PAPER --retune``: the papers' tuning protocols in the package
(``kernelstream.experiments.retune``), run as replay keys, and the tuned files as package data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kernelstream.experiments import grid
from kernelstream.experiments.grid import Context, Run, run_grid
from kernelstream.experiments.protocol import TUNED_DIR
from kernelstream.pipelines import cli
from kernelstream.pipelines.cli import main

REPO = Path(__file__).resolve().parents[2]


def _without_dates(x: Any) -> Any:
    """A tuned file's entries without when they were tuned (``tuned_at``)."""
    if isinstance(x, dict):
        return {k: _without_dates(v) for k, v in x.items() if k != "tuned_at"}
    if isinstance(x, list):
        return [_without_dates(v) for v in x]
    return x


def _tuned_name(paper: str) -> str:
    from kernelstream.experiments.retune import TUNED_FILES

    return TUNED_FILES[paper]


def _committed(paper: str) -> dict[str, Any]:
    return json.loads((TUNED_DIR / _tuned_name(paper)).read_text())


def _drop(doc: dict[str, Any], *path: str) -> None:
    for k in path[:-1]:
        doc = doc[k]
    del doc[path[-1]]


# paper -> (its options, the german entries the retune must write back exactly as committed:
# what the benchmarks/reproduce_*.py scripts wrote with the same streams, seeds and grids)
CASES: dict[str, tuple[tuple[str, ...], list[tuple[str, ...]]]] = {
    "p0": ((), [("german",)]),
    "p4": (("--tables", "p4-5"), [("p4-5", "german")]),
    "p3": (("--tables", "p3-3,p3-4"),
           [("skegd", "german"), ("fogd_german",), ("adversarial_tuned",)]),
    # the diagnostics (LSOKL's own german file at its KA width: 7 learners' grids); the P3
    # group's online width sweep in the committed file predates NOGD's carried-over stage-1
    # model (its entries were kept by the script's --reuse-widths), so it is not redone here
    "baselines": (("--tables", "diag"), [("diagnostics", "lsokl-german")]),
}


@pytest.mark.slow
@pytest.mark.parametrize("paper", list(CASES))
def test_retune_on_german_writes_the_committed_parameters(shared_datasets: Path,
                                                         tmp_path: Path, paper: str) -> None:
    # the tuned files without german's entries: the retune must write them back, and copy
    # the rest
    args, parts = CASES[paper]
    tuned = tmp_path / "tuned"
    shutil.copytree(TUNED_DIR, tuned)
    committed = _committed(paper)
    doc = _committed(paper)
    for part in parts:
        _drop(doc, *part)
    (tuned / _tuned_name(paper)).write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert main(["reproduce", paper, "--data-dir", str(shared_datasets), "--datasets", "german",
                 "--retune-only", "--tuned-dir", str(tuned), "--out-dir", str(out), "-q",
                 *args]) == 0
    new = json.loads((out / _tuned_name(paper)).read_text())
    meta = new.pop("meta")
    assert (meta["tune_perm"], meta["base_seed"]) == (1000, 0)
    assert meta["written_by"] == f"kernelstream reproduce {paper} --retune"
    committed.pop("meta")
    assert _without_dates(new) == _without_dates(committed)


@pytest.mark.slow
def test_retune_p2_matches_sizes_to_the_reference_time(shared_datasets: Path,
                                                       tmp_path: Path) -> None:
    # P2's matching is a timing of this machine: its numbers cannot be the committed ones,
    # its shape and bounds can (each size on its grid, rounded to 10, the reference timed)
    from kernelstream.experiments import p2

    out = tmp_path / "out"
    assert main(["reproduce", "p2", "--data-dir", str(shared_datasets), "--datasets",
                 "phishing", "--tables", "p2-5", "--retune-only", "--out-dir", str(out),
                 "-q"]) == 0
    doc = json.loads((out / _tuned_name("p2")).read_text())
    committed = _committed("p2")
    assert sorted(doc["calibration"]) == sorted(committed["calibration"])
    cal = doc["calibration"]["T5|phishing"]
    assert cal != committed["calibration"]["T5|phishing"]  # measured again
    assert (cal["reference"], cal["rows"]) == ("rf-oks++", 5000) and cal["reference_us"] > 0
    assert sorted(cal["matched"]) == sorted(committed["calibration"]["T5|phishing"]["matched"])
    for name, size in cal["matched"].items():
        grid = p2.RF_GRID[name]
        assert max(10, grid[0]) <= size <= grid[-1] + 5 and size % 10 == 0
    assert doc["meta"]["calib_perm"] == 1000


def test_retune_then_evaluate_reads_the_retuned_file(shared_datasets: Path,
                                                     tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # --retune: the tuned file goes to --out-dir and the evaluation reads it from there (a
    # retuned entry that differs from the package's shows in the table's parameters)
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    doc = _committed("p0")
    doc["german"]["oks-sil"]["params"]["eta"] = 0.5  # not a grid value: retuning replaces it
    (tuned / _tuned_name("p0")).write_text(json.dumps(doc))
    out = tmp_path / "out"
    rc = main(["reproduce", "p0", "--data-dir", str(shared_datasets), "--datasets", "german",
               "-R", "1", "--retune", "--tuned-dir", str(tuned), "--out-dir", str(out), "-q"])
    assert rc == 0
    assert f"p0: retuned: {out / _tuned_name('p0')}" in capsys.readouterr().out
    cells = json.loads((out / "p0.json").read_text())["cells"]
    sil = next(c for c in cells if c["learner"] == "oks-sil")
    assert sil["params"]["eta"] == _committed("p0")["german"]["oks-sil"]["params"]["eta"]
    # --retune-only writes the file and evaluates nothing
    out2 = tmp_path / "out2"
    assert main(["reproduce", "p0", "--data-dir", str(shared_datasets), "--datasets", "german",
                 "--retune-only", "--out-dir", str(out2), "-q"]) == 0
    assert sorted(p.name for p in out2.iterdir()) == [_tuned_name("p0")]


@pytest.mark.parametrize("workers", [1, 2])
def test_grid_runs_the_replay_api_not_the_cli(shared_datasets: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              workers: int) -> None:
    # the keys of a table and of a tuning run go to run_replay (two shards with workers=2),
    # never through the command line, and give what one process gives
    def no_cli(argv: Any = None) -> int:
        raise AssertionError(f"cli.main called: {argv}")

    monkeypatch.setattr(cli, "main", no_cli)
    runs = [Run("german", "bogd", {"budget": 50, "eta": 0.1, "lam": 0.01}),
            Run("german", "perceptron", {}),
            Run("german", "bogd", {"budget": 50, "eta": 0.1, "lam": 0.01}, permutations=1,
                first_permutation=1000, rows=300)]
    ctx = Context(shared_datasets, tmp_path / "w", 2, workers=workers, quiet=True)
    res = run_grid(runs, ctx)
    assert [[k.r for k in rr] for rr in res] == [[0, 1], [0, 1], [1000]]
    assert res[2][0].examples == 300
    ref = run_grid(runs, Context(shared_datasets, tmp_path / "ref", 2, runner="loop",
                                 quiet=True))
    assert [[(k.mistakes, k.n_sv) for k in rr] for rr in res] == \
        [[(k.mistakes, k.n_sv) for k in rr] for rr in ref]


def test_tuning_runs_refuse_what_they_cannot_read() -> None:
    with pytest.raises(ValueError, match="evaluation run"):
        run_grid([Run("german", "bogd", {}, permutation=0, first_permutation=1000)],
                 Context(Path("."), Path("."), 1))
    assert grid._seeded("german", 0, Path("."))


def test_tuned_files_are_package_data(german_dir: Path, tmp_path: Path) -> None:
    # an installed package (no checkout, no benchmarks/ beside it) reproduces with its own
    # tuned files, which pyproject ships in the wheel
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "tuned/*.json" in conf["tool"]["setuptools"]["package-data"]["kernelstream.experiments"]
    assert sorted(p.name for p in TUNED_DIR.glob("*.json")) == [
        "tuned_p2.json", "tuned_p4.json", "tuned_params.json", "tuned_params_p0.json",
        "tuned_params_skegd.json"]
    site = tmp_path / "site"
    shutil.copytree(REPO / "kernelstream", site / "kernelstream",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-m", "kernelstream.pipelines.cli", "reproduce", "baselines",
         "--data-dir", str(german_dir), "--datasets", "german", "--tables", "p3", "-R", "1",
         "--out-dir", str(tmp_path / "out"), "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "baselines: passed" in proc.stdout


def test_a_partial_retune_keeps_the_files_date_and_adds_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a retune of german copies the other data sets' entries: the file's "tuned_at" and
    # "tuning_seconds" stay those of the whole protocol, and german's retune is recorded
    # beside them; a retune of everything replaces both
    from kernelstream.experiments import p0, report, retune
    from kernelstream.experiments.protocol import Options

    def protocol(doc: dict[str, Any], opts: Options) -> None:
        retune._meta(doc, opts)
        for ds in opts.pick(p0.DATA):
            doc.setdefault(ds, {})["x"] = {"tuned_at": report.now_utc()}

    monkeypatch.setattr(retune, "_PROTOCOLS", {**retune._PROTOCOLS, "p0": protocol})
    monkeypatch.setattr(report, "now_utc", lambda: "2026-12-01 10:00 UTC")
    committed = _committed("p0")["meta"]

    def run(out: str, datasets: list[str] | None, tuned_dir: Path | None = None) -> dict:
        opts = Options(Context(tmp_path, tmp_path / "w", 1), tmp_path / out, tuned_dir,
                       datasets)
        return json.loads(retune.retune("p0", opts).read_text())["meta"]

    meta = run("a", ["german"])
    assert (meta["tuned_at"], meta["tuning_seconds"]) == (committed["tuned_at"],
                                                          committed["tuning_seconds"])
    [part] = meta["partial_retunes"]
    assert (part["datasets"], part["tuned_at"]) == (["german"], "2026-12-01 10:00 UTC")
    assert report.tuning_when(meta) == (f"{committed['tuned_at']}; german retuned "
                                        "2026-12-01 10:00 UTC (0.0 min)")
    # a second partial retune of the file adds to it; the same data set again replaces it
    meta = run("b", ["german", "w7a"], tmp_path / "a")
    assert [p["datasets"] for p in meta["partial_retunes"]] == [["german", "w7a"]]
    meta = run("c", ["a9a"], tmp_path / "b")
    assert [p["datasets"] for p in meta["partial_retunes"]] == [["german", "w7a"], ["a9a"]]
    meta = run("d", None, tmp_path / "c")
    assert meta["tuned_at"] == "2026-12-01 10:00 UTC" and "partial_retunes" not in meta
    assert meta["tuning_seconds"] < 1.0
