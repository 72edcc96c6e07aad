"""The Beam-free engine: its test-then-train loop, and that the loop runner never imports Beam."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

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
        "import kernelstream.kafka_client, kernelstream.pipelines.replay.replay\n"
        "print('apache_beam' in sys.modules)", tmp_path)
    assert out.split() == ["False"]


def test_parquet_modules_import_no_pyarrow(tmp_path: Path) -> None:
    """The modules that read or write Parquet import pyarrow on first use
    (``kernelstream._arrow``), so the commands import them at their top for free; the schemas
    are pyarrow's when first read, equal to what the readers expect."""
    out = _fresh(
        "import sys\n"
        "import kernelstream.pipelines.cli, kernelstream.pipelines.replay.replay\n"
        "import kernelstream.pipelines.replay.loop, kernelstream.report\n"
        "from kernelstream.engine.replay import checkpoints, outputs\n"
        "print('pyarrow' in sys.modules)\n"
        "import pyarrow as pa\n"
        "print(isinstance(outputs.PREDICTIONS_SCHEMA, pa.Schema),\n"
        "      outputs.SCHEMAS['metrics'] is outputs.METRICS_SCHEMA,\n"
        "      checkpoints.STATES_SCHEMA.names == ['key', 'state'])", tmp_path)
    assert out.split() == ["False", "True", "True", "True"]


# What a command may load only when it needs it: Beam (its runners), pyarrow and
# pyarrow.dataset (Parquet), the learner modules and the compiled kernels (learning: the
# registry loads every learner module on first use, so ``bogd`` stands for them all; the
# package ``kernelstream.learners`` and its registry are free) and the Kafka client (topics:
# its modules; the package itself loads them on first use, so ``kafka_client.names`` is free).
_LEARNING = ("kernelstream.learners.bogd", "kernelstream.learners.compiled")
_HEAVY = ("apache_beam", "pyarrow", "pyarrow.dataset", *_LEARNING,
          "kernelstream.kafka_client.clients", "kafka")


def _cli_modules(args: list[str], cwd: Path) -> tuple[int, set[str]]:
    """``kernelstream ARGS`` in a new interpreter: its exit code and the modules of
    :data:`_HEAVY` it imported."""
    out = _fresh(
        "import json, sys\n"
        "from kernelstream.pipelines.cli import main\n"
        f"code = main({args!r})\n"
        f"print(json.dumps([code, [m for m in {_HEAVY!r} if m in sys.modules]]))", cwd)
    code, mods = json.loads(out.splitlines()[-1])
    return code, set(mods)


def test_cli_commands_import_what_they_need(tmp_path: Path) -> None:
    """``learners`` and ``check`` (an embedded data set, LIBSVM and CSV files) import neither
    Beam nor pyarrow, and ``check`` not the learner modules nor the compiled kernels; ``replay
    --runner loop`` on a file imports pyarrow for its Parquet outputs, but no Beam, no
    pyarrow.dataset and no Kafka client."""
    rng = np.random.default_rng(0)
    small = tmp_path / "small.libsvm"
    small.write_text("".join(f"{rng.choice(['+1', '-1'])} 1:{rng.random():.3f} "
                             f"3:{rng.random():.3f}\n" for _ in range(60)))
    assert _cli_modules(["learners"], tmp_path) == (0, set(_LEARNING))
    assert _cli_modules(["learners", "perceptron"], tmp_path) == (0, set(_LEARNING))
    assert _cli_modules(["check", "german"], tmp_path) == (0, set())
    assert _cli_modules(["check", str(small)], tmp_path) == (0, set())
    (tmp_path / "small.csv").write_text("a,b,label\n1,2,1\n3,4,-1\n5,6,1\n")
    assert _cli_modules(["check", str(tmp_path / "small.csv")], tmp_path) == (0, set())
    replay = ["replay", str(small), "--runner", "loop", "-l", "bogd", "-q", "--out", "run"]
    assert _cli_modules(replay, tmp_path) == (0, {"pyarrow", *_LEARNING})
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["runner"] == "loop" and summary["predictions"] == 60
    assert summary["examples"] == 60 and summary["n_support_vectors"] > 0
    assert (tmp_path / "run" / "predictions" / "part-loop.parquet").exists()


def test_read_table_reads_as_pyarrow_does(tmp_path: Path) -> None:
    """``outputs.read_table`` reads a file of the output's schema without pyarrow.dataset,
    and gives what ``pq.read_table(schema=...)`` gives, for such a file and for one written
    before a column was added (the column reads as nulls)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kernelstream.engine.replay.outputs import METRICS_SCHEMA, read_table, write_rows

    row = {f.name: None for f in METRICS_SCHEMA}
    row.update(key="k", config="c", learner="bogd", permutation=0, final=True, window_start=0,
               window_end=4, examples=4, n_support_vectors=2, seconds=0.5, window_examples=4,
               window_seconds=0.5, rejected=0, duplicate_blocks=0, max_buffered_blocks=0,
               kernel_distribution=[0.25, 0.75])
    write_rows(str(tmp_path / "new.parquet"), [row], METRICS_SCHEMA)
    old = pa.schema([f for f in METRICS_SCHEMA if f.name != "kernel_distribution"])
    pq.write_table(pa.Table.from_pylist([row], schema=old), tmp_path / "old.parquet")
    got = read_table(tmp_path, METRICS_SCHEMA)
    want = pa.concat_tables([pq.read_table(tmp_path / f, schema=METRICS_SCHEMA)
                             for f in ("new.parquet", "old.parquet")])
    assert got.schema.equals(want.schema, check_metadata=True) and got.equals(want)
    assert got.column("kernel_distribution").to_pylist() == [[0.25, 0.75], None]


@given(st.binary(max_size=40).map(lambda b: bytes(b" \t\r\n\f\vx"[c % 7] for c in b)))
def test_blank_line_check_is_the_one_pattern(raw: bytes) -> None:
    """The fast blank-line check of ``load_rows`` finds what the single pattern it replaces
    found: an empty or whitespace-only line at the start or after a newline."""
    import re

    from kernelstream.engine.replay.sources import _has_blank_line

    one = re.compile(rb"(?:\A|\n)[ \t\r\f\v]*(?:\n|\Z)")
    assert _has_blank_line(raw) == (one.search(raw) is not None)


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


def test_an_output_folder_without_files_gets_one_empty_file_of_its_schema(
        tmp_path: Path) -> None:
    """One function gives every kind of output folder its empty file: a replay's outputs, its
    checkpoint's states and a stream's outputs (``ensure_schemas``). Written whole (no
    temporary file left); a folder with a file of its own is left as it is, and a checkpoint
    gets its own even when the one before left files beside it."""
    from kernelstream._arrow import pq
    from kernelstream.engine.live.rows import stream_schemas
    from kernelstream.engine.live.snapshot.outputs import EMPTY, ensure_schemas
    from kernelstream.engine.replay import checkpoints, outputs

    d = tmp_path / "metrics"
    assert outputs.ensure_nonempty(str(d), outputs.METRICS_SCHEMA)
    assert sorted(p.name for p in d.iterdir()) == [EMPTY]
    assert pq.read_table(d / EMPTY).schema.equals(outputs.METRICS_SCHEMA)
    assert not outputs.ensure_nonempty(str(d), outputs.METRICS_SCHEMA)  # has its file
    ck = tmp_path / "ckpt"
    ck.mkdir()
    (ck / "ckpt-000001-streams-empty.parquet").write_bytes((d / EMPTY).read_bytes())
    second = checkpoints.Checkpoint(str(ck), 2)
    assert outputs.ensure_nonempty(second.directory, checkpoints.STATES_SCHEMA,
                                   prefix=second.states_prefix)
    assert [Path(f).name for f in second.state_files()] == ["ckpt-000002-streams-empty.parquet"]
    out = tmp_path / "stream"
    schemas = stream_schemas()
    assert ensure_schemas(out, schemas) == list(schemas)
    assert ensure_schemas(out, schemas) == []
    assert all(sorted(p.name for p in (out / n).iterdir()) == [EMPTY] for n in schemas)
