"""The EXTERNAL environment of the portable runner, as deploy/flink uses it: SDK workers are
started by a Beam worker pool (``apache_beam.runners.worker.worker_pool_main``, the entry point
of the worker-pool container) instead of running inside the launching process (LOOPBACK).

Here the job server is Beam's local job service rather than Flink's, and the worker pool is a
local process that starts each SDK worker as ``python -c ...`` — so the venv's ``python`` must
come first on its PATH and have kernelstream installed, which is what deploy/Dockerfile sets
up in the container. The replay's outputs must equal the plain loop's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from _helpers import WorkerPool, start_worker_pool

from kernelstream import data
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.replay.outputs import METRICS_SCHEMA, PREDICTIONS_SCHEMA, read_table
from kernelstream.pipelines import cli
from kernelstream.pipelines.replay.beam_replay import local_job_service, resolve_early_state
from kernelstream.pipelines.replay.replay import make_run, run_loop_outputs, run_replay

pytestmark = pytest.mark.slow

ROWS = 120
# Metrics columns that describe the run, not the stream: timings and observed disorder.
RUN_COLUMNS = ("seconds", "examples_per_second", "window_seconds", "window_examples_per_second",
               "max_buffered_blocks", "duplicate_blocks")


@pytest.fixture(scope="module")
def german(tmp_path_factory: pytest.TempPathFactory) -> Path:
    X, y = data.load_dataset("german", limit=ROWS)
    path = tmp_path_factory.mktemp("data") / "german.libsvm"
    with open(path, "w") as f:
        for xi, yi in zip(X, y, strict=True):
            f.write(f"{int(yi):+d} " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(xi)
                                                 if v != 0) + "\n")
    return path


@pytest.fixture(scope="module")
def worker_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerPool]:
    with start_worker_pool(tmp_path_factory.mktemp("pool") / "pool.log") as pool:
        yield pool


def _sorted(out: Path, name: str) -> pa.Table:
    if name == "predictions":
        return read_table(out / name, PREDICTIONS_SCHEMA).sort_by(
            [("key", "ascending"), ("position", "ascending")])
    t = read_table(out / name, METRICS_SCHEMA)
    cols = [c for c in METRICS_SCHEMA.names if c not in RUN_COLUMNS]
    return t.select(cols).sort_by([("key", "ascending"), ("window_end", "ascending"),
                                   ("final", "ascending")])


def test_cli_portable_with_job_endpoint_and_external_workers(german: Path, tmp_path: Path,
                                                             worker_pool: WorkerPool) -> None:
    """``kernelstream replay --runner portable -- --job_endpoint=... --environment_type=EXTERNAL
    --environment_config=HOST:PORT`` — the deploy/flink recipe with Beam's local job service
    standing in for Flink's job server."""
    before = worker_pool.workers_started()
    common = [str(german), "--learner", "a=bogd", "--learner", "b=perceptron",
              "-p", "a.budget=20", "-R", "2", "--seed", "5", "-q"]
    with local_job_service() as job:
        code = cli.main(["replay", *common, "--runner", "portable", "--out",
                         str(tmp_path / "ext"), "--", f"--job_endpoint={job}",
                         "--environment_type=EXTERNAL",
                         f"--environment_config={worker_pool.endpoint}",
                         "--block_size=16", "--metrics_window=50"])
    assert code == 0
    assert worker_pool.workers_started() > before, "no SDK worker was started by the pool"
    assert cli.main(["replay", *common, "--runner", "loop", "--out", str(tmp_path / "loop"),
                     "--", "--block_size=16", "--metrics_window=50"]) == 0
    for name in ("predictions", "metrics"):
        a, b = _sorted(tmp_path / "ext", name), _sorted(tmp_path / "loop", name)
        assert a.num_rows == b.num_rows > 0
        assert a.equals(b), f"{name} differ between the EXTERNAL run and the loop"
    assert _sorted(tmp_path / "ext", "predictions").num_rows == 2 * 2 * ROWS


def test_local_job_service_with_external_environment(german: Path, tmp_path: Path,
                                                     worker_pool: WorkerPool) -> None:
    """Without ``--job_endpoint`` the portable runner starts the local job service itself and
    keeps the environment it is given (EXTERNAL), instead of LOOPBACK."""
    before = worker_pool.workers_started()
    configs = [LearnerConfig("bogd", "bogd", {"budget": 15})]
    kw = dict(seed=2, block_size=32, metrics_window=40)
    res = run_replay(str(german), configs, tmp_path / "ext", runner="portable",
                     pipeline_args=["--environment_type=EXTERNAL",
                                    f"--environment_config={worker_pool.endpoint}"], **kw)
    assert worker_pool.workers_started() > before
    loop = run_loop_outputs(str(german), configs, tmp_path / "loop", **kw)
    assert _sorted(tmp_path / "ext", "predictions").equals(_sorted(tmp_path / "loop",
                                                                    "predictions"))
    assert [s["mistakes"] for s in res.summaries] == [s["mistakes"] for s in loop.summaries]


@pytest.mark.parametrize("runner,args,expected", [
    ("direct", [], "ordered_list"),
    ("portable", [], "ordered_list"),  # Beam's local job service
    ("portable", ["--job_endpoint=localhost:8099"], "bag"),  # e.g. Flink's job server
    ("beam", ["--runner=FlinkRunner"], "bag"),
    ("beam", ["--runner=DataflowRunner"], "bag"),
    ("direct", ["--early_state=bag"], "bag"),
    ("beam", ["--runner=FlinkRunner", "--early_state=ordered_list"], "ordered_list"),
])
def test_early_state_follows_the_runner(runner: str, args: list[str], expected: str) -> None:
    """Ordered-list state only where it is known to work; bag state on Flink/Dataflow."""
    run = make_run("german", [LearnerConfig("b", "bogd", {})], "unused", runner=runner,
                   pipeline_args=args)
    assert resolve_early_state(run) == expected
