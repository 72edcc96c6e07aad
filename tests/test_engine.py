"""The Beam-free engine: its test-then-train loop, and that the loop runner never imports Beam."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernelstream import learners
from kernelstream.engine.prequential import PrequentialPass
from kernelstream.learners.testing import make_stream, small_params


def _fresh(code: str, cwd: Path) -> str:
    """Run ``code`` in a new interpreter (this one may have imported Beam already)."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_engine_modules_import_no_beam(tmp_path: Path) -> None:
    out = _fresh(
        "import importlib, pkgutil, sys, kernelstream.engine as e\n"
        "for m in pkgutil.iter_modules(e.__path__):\n"
        "    importlib.import_module(f'kernelstream.engine.{m.name}')\n"
        "import kernelstream.kafka_client, kernelstream.pipelines.replay\n"
        "print('apache_beam' in sys.modules)", tmp_path)
    assert out.split() == ["False"]


def test_loop_runner_and_learners_import_no_beam(tmp_path: Path) -> None:
    out = _fresh(
        "import sys\n"
        "from kernelstream.pipelines.cli import main\n"
        "assert main(['learners', 'bogd']) == 0\n"
        "code = main(['replay', '--runner', 'loop', '--limit', '50', '-q', '--out', 'run'])\n"
        "print(code, 'apache_beam' in sys.modules)", tmp_path)
    assert out.split()[-2:] == ["0", "False"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["runner"] == "loop" and summary["predictions"] == 50
    assert (tmp_path / "run" / "predictions" / "part-loop.parquet").exists()


@pytest.mark.parametrize("name", ["bogd", "perceptron", "omkc-u", "fogd"])
@pytest.mark.parametrize("block_size", [None, 1, 7, 1000])
def test_pass_is_the_per_example_loop(name: str, block_size: int | None) -> None:
    """Whatever the blocks and the row order, a pass scores as the per-example loop does."""
    params = small_params(name)
    X, y = make_stream(learners.make(name, **params).task, 300, seed=3)
    rows = np.random.default_rng(0).permutation(300)
    ref = learners.make(name, seed=(1, 2), **params)
    want = np.array([ref.predict_learn_many(X[i : i + 1], y[i : i + 1])[0] for i in rows])
    model = learners.make(name, seed=(1, 2), **params)
    run = PrequentialPass(model, X, y, rows, block_size=block_size)
    spans = [(lo, hi) for lo, hi, err in run.blocks() if err is None]
    assert spans[0][0] == 0 and spans[-1][1] == 300 and run.done == 300
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    np.testing.assert_array_equal(run.scores, want)
    assert run.seconds > 0


def test_pass_skips_rejected_rows() -> None:
    """With ``skip_rejected`` a refused row is reported and left unscored; the rest learn on."""
    X, y = make_stream("classification", 20, seed=1)
    y[5] = 0.5  # not a ±1 label: the batch path refuses it before changing anything
    model = learners.make("perceptron")
    with pytest.raises(ValueError):
        PrequentialPass(model, X, y, block_size=20).run()
    assert model.t == 0
    run = PrequentialPass(model, X, y, block_size=1, skip_rejected=True)
    errors = [lo for lo, _, err in run.blocks() if err is not None]
    assert errors == [5] and np.isnan(run.scores[5]) and model.t == 19
    keep = np.arange(20) != 5
    ref = learners.make("perceptron").predict_learn_many(X[keep], y[keep])
    np.testing.assert_array_equal(run.scores[keep], ref)
