"""`kernelstream learners` shows the task of learners whose task follows their `loss`
parameter (e.g. ``ioks`` with ``loss="square"`` is a regression learner) as
"classification, regression (by loss)", in the text, markdown and json formats."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from kernelstream import learners
from kernelstream.pipelines.cli import main
from kernelstream.pipelines.config import loss_tasks

BY_LOSS = "classification, regression (by loss)"
# learners documented to run regression with a square / absolute loss
LOSS_TASK = ["oks", "oks++", "ioks", "rf-oks++", "rf-ioks", "rf-oks", "raker", "lkmbooks",
             "rff-rls"]


def _markdown_rows(capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    assert main(["learners", "--format", "markdown"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    return rows


@pytest.mark.parametrize("name", LOSS_TASK)
def test_text_shows_both_tasks(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["learners", name]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith(f"{name}  [{BY_LOSS}"), header


def test_markdown_task_column(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _markdown_rows(capsys)
    assert set(rows) == set(learners.available())
    for name in LOSS_TASK:
        assert rows[name][2] == BY_LOSS, rows[name]
    # a loss parameter whose choices are all classification losses is not "by loss"
    for name in ("perceptron", "ogd", "oskl", "skegd", "spa"):
        assert rows[name][2] == "classification", rows[name]


def test_json_lists_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["learners", "raker", "--format", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["task"] == ["classification", "regression"]  # every task it runs
    assert info["default_task"] == "classification"  # the task of its defaults
    assert info["tasks"] == info["task"]  # the name of earlier versions


def test_listed_tasks_are_the_real_ones(capsys: pytest.CaptureFixture[str]) -> None:
    """Every learner listed with regression learns a real-valued target with one of its
    regression losses; every other learner rejects one."""
    rows = _markdown_rows(capsys)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 3)), rng.normal(size=20)
    for name, cells in rows.items():
        # the learner's own task for each loss choice (rff-rls's are not all losses.LOSSES')
        reg = [c for c, task in loss_tasks(name).items() if task == "regression"]
        if "regression" in cells[2]:
            assert reg, name
            m = learners.make(name, loss=reg[0])
            assert m.task == "regression"
            assert np.isfinite(m.predict_learn_many(X, y)).all()
        else:
            with pytest.raises(ValueError, match="label"):
                learners.make(name).predict_learn_many(X, y)


def test_closed_pipe_exits_quietly() -> None:
    """`kernelstream learners | head -1`: no traceback when the reader closes the pipe."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from kernelstream.pipelines.cli import main; "
         "sys.exit(main(['learners', '--format', 'markdown']))"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    # Close the read end before the child (still importing) writes anything, so its
    # first write hits a closed pipe whatever the pipe buffer size.
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err, err


def test_learners_table_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    """The learners table of docs/learners/README.md is the generated one (regenerate it when
    learners change)."""
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "docs" / "learners" / "README.md"
    assert main(["learners", "--format", "markdown"]) == 0
    generated = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("|")]
    text = readme.read_text().splitlines()
    start = text.index("<!-- generated with: kernelstream learners --format markdown -->") + 1
    table = []
    for line in text[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    assert table == generated, (
        "docs/learners/README.md's learners table is out of date: run `kernelstream learners "
        "--format markdown` and put the lines it prints that start with '|' in place of the "
        "table under its '<!-- generated with: ... -->' line")


def test_task_mismatch_names_the_loss_that_fits(tmp_path, capsys: pytest.CaptureFixture[str]
                                                ) -> None:
    """--task regression with a learner whose task follows its loss says which loss makes it
    a regression learner; a learner without such a loss gets no hint."""
    code = main(["replay", "--task", "regression", "-l", "ioks", "-l", "bogd", "--limit", "10",
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "ioks is a classification learner (its task follows its loss: " \
           "-p ioks.loss=absolute or square makes it a regression learner)" in err
    assert "bogd is a classification learner" in err and "bogd.loss" not in err


def test_auto_note_names_the_label_the_listing_prints(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """The footnote under `kernelstream learners` quotes the label that the parameter lines
    print before the Python default of an estimated gamma ("learners.make: 0.5")."""
    assert main(["learners", "bogd"]) == 0
    out = capsys.readouterr().out
    label = re.search(r"\(.*?; (\S+:) 0\.5\)", out)
    assert label, out
    assert f'the number after "{label[1]}" is the default' in out


def test_compiled_label_says_whether_updates_are_compiled(
        capsys: pytest.CaptureFixture[str]) -> None:
    """"compiled rounds" only where the updates run in C too; a learner whose compiled block
    calls back its Python ``_update`` is marked so. The label agrees with what a kernel
    learner with its defaults does (a compiled rule, ``_compiled_rule``)."""
    from kernelstream.learners import compiled
    from kernelstream.learners._kernel_learner import KernelLearner

    assert main(["learners"]) == 0
    heads = {ln.split("  [")[0]: ln for ln in capsys.readouterr().out.splitlines()
             if "  [" in ln}
    assert heads["rbp"].endswith(", compiled rounds]")
    assert heads["perceptron"].endswith(", compiled scores, Python updates]")
    if compiled.ck is None or compiled.bk is None:
        return
    X = np.random.default_rng(0).normal(size=(40, 3))
    y = np.where(X[:, 0] > 0, 1, -1)
    for name in learners.available():
        cls = learners.get(name)
        if (not (issubclass(cls, KernelLearner) and cls.compiled_rounds())
                or issubclass(cls, compiled.FeatureMapRounds)):  # NOGD: its driver's steps
            continue
        m = learners.make(name, seed=0, gamma=0.5)
        m.predict_learn_many(X, y)
        assert bool(m._compiled_rule()) == cls.compiled_updates(), name
