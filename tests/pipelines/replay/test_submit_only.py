"""``replay --submit-only`` and ``kernelstream summary RUN_DIR``: the replay is handed to a
runner that runs it elsewhere (here Beam's local job service, a separate process, with SDK
workers from a worker pool: the deploy/flink path), the CLI exits once it is submitted, and
``summary`` later reads the finished job's outputs back into the summary a waited run writes.
In-process runners are refused with one line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import WorkerPool, start_worker_pool

from kernelstream.pipelines.replay.beam_replay import local_job_service

BIN = Path(sys.executable).parent / "kernelstream"
RUN = ["german", "-l", "a=bogd", "-l", "b=perceptron", "-p", "a.budget=20", "-R", "2",
       "--limit", "300", "--seed", "4", "-q"]
BEAM_OPTIONS = ["--block_size=32", "--metrics_window=100"]


def kernelstream(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *argv], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("how", [
    [],  # the direct runner
    ["--runner", "loop"],
    ["--runner", "portable"],  # Beam's local job service, started and stopped by the CLI
    ["--runner", "beam", "--", "--runner=DirectRunner"],
    ["--runner", "beam", "--", "--runner=PrismRunner"],
])
def test_submit_only_is_refused_for_in_process_runners(tmp_path: Path, how: list[str]) -> None:
    out = tmp_path / "out"
    res = kernelstream("replay", *RUN, "--out", str(out), "--submit-only", *how)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--submit-only needs a runner that runs the job elsewhere" in \
        lines[0], res.stderr
    assert not out.exists()


def test_submit_only_refuses_a_checkpoint(tmp_path: Path) -> None:
    res = kernelstream("replay", "kafka://127.0.0.1:9/t", "--n-features", "3", "--checkpoint",
                       str(tmp_path / "ck"), "--out", str(tmp_path / "o"), "--submit-only",
                       "--runner", "beam", "--", "--runner=DataflowRunner")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "kernelstream replay: error: --checkpoint needs the end of the run, which "
        "--submit-only does not wait for: drop one of them"]


def test_summary_without_a_submitted_run_is_one_line(tmp_path: Path) -> None:
    res = kernelstream("summary", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"kernelstream summary: error: no submitted.json in {tmp_path}: RUN_DIR is the --out "
        "of `kernelstream replay --submit-only`"]


@pytest.fixture(scope="module")
def worker_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerPool]:
    with start_worker_pool(tmp_path_factory.mktemp("pool") / "pool.log") as pool:
        yield pool


def _job_state(endpoint: str, job_id: str) -> str:
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
        state = stub.GetState(beam_job_api_pb2.GetJobStateRequest(job_id=job_id)).state
    return str(beam_job_api_pb2.JobState.Enum.Name(state))


def _without_run_details(doc: Any) -> Any:
    """The summary less what describes the run rather than the results: timings, the runner,
    the command line, the job id."""
    if isinstance(doc, dict):
        return {k: _without_run_details(v) for k, v in doc.items()
                if "second" not in k and k not in ("runner", "argv", "job_id")}
    if isinstance(doc, list):
        return [_without_run_details(v) for v in doc]
    return doc


@pytest.mark.slow
def test_submit_only_then_summary_equals_a_waited_run(tmp_path: Path,
                                                       worker_pool: WorkerPool) -> None:
    out = tmp_path / "submitted"
    with local_job_service() as endpoint:
        res = kernelstream("replay", *RUN, "--out", str(out), "--runner", "portable",
                           "--submit-only", "--", f"--job_endpoint={endpoint}",
                           "--environment_type=EXTERNAL",
                           f"--environment_config={worker_pool.endpoint}", *BEAM_OPTIONS)
        assert res.returncode == 0, res.stderr
        m = re.search(r"submitted: job (\S+) \(portable runner\)", res.stdout)
        assert m, res.stdout
        assert f"kernelstream summary {out}" in res.stdout
        assert not (out / "summary.json").exists()
        submitted = json.loads((out / "submitted.json").read_text())
        assert submitted["job_id"] == m.group(1)
        # the job runs on after the CLI has exited
        deadline = time.monotonic() + 240
        while (state := _job_state(endpoint, m.group(1))) not in ("DONE", "FAILED",
                                                                   "CANCELLED"):
            assert time.monotonic() < deadline, state
            time.sleep(0.5)
        assert state == "DONE"

    # a copy of the record without the outputs: the job "has not finished"
    early = tmp_path / "early"
    early.mkdir()
    (early / "submitted.json").write_text((out / "submitted.json").read_text())
    res = kernelstream("summary", str(early))
    assert res.returncode == 2
    assert "has not finished, or it failed" in res.stderr and len(res.stderr.splitlines()) == 1

    res = kernelstream("summary", str(out))
    assert res.returncode == 0, res.stderr
    assert "mistake rate" in res.stdout and f"summary: {out / 'summary.json'}" in res.stdout
    got = json.loads((out / "summary.json").read_text())
    assert got["job_id"] == m.group(1) and got["runner"] == "portable"

    ref = tmp_path / "waited"
    res = kernelstream("replay", *RUN, "--out", str(ref), "--runner", "loop", "--",
                       *BEAM_OPTIONS)
    assert res.returncode == 0, res.stderr
    want = json.loads((ref / "summary.json").read_text())
    assert got["predictions"] == want["predictions"] == 2 * 2 * 300
    assert _without_run_details(got) == _without_run_details(want)


@pytest.mark.slow
def test_the_flex_template_launcher_submits_and_exits(tmp_path: Path,
                                                      worker_pool: WorkerPool) -> None:
    """deploy/dataflow/flex/launch.py as Dataflow's template launcher runs it (parameters and
    pipeline options as ``--name=value``), with the portable runner standing in for
    Dataflow: it exits once the job is submitted, and the job writes the outputs."""
    from kernelstream import data

    X, y = data.load_dataset("german", limit=200)
    src = tmp_path / "german.libsvm"
    src.write_text("".join(
        f"{int(yi):+d} " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(xi) if v)
        + "\n" for xi, yi in zip(X, y, strict=True)))
    out = tmp_path / "out"
    launcher = Path(__file__).resolve().parents[3] / "deploy" / "dataflow" / "flex" / "launch.py"
    with local_job_service() as endpoint:
        res = subprocess.run(
            [sys.executable, str(launcher), f"--data={src}", f"--out={out}",
             "--learners=perceptron", "--params=gamma=0.5", "--seed=3",
             "--runner=PortableRunner", f"--job_endpoint={endpoint}",
             "--environment_type=EXTERNAL", f"--environment_config={worker_pool.endpoint}"],
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, res.stderr
        job = json.loads((out / "submitted.json").read_text())["job_id"]
        assert f"submitted: job {job}" in res.stdout
        deadline = time.monotonic() + 240
        while (state := _job_state(endpoint, job)) not in ("DONE", "FAILED", "CANCELLED"):
            assert time.monotonic() < deadline, state
            time.sleep(0.5)
        assert state == "DONE"
    res = kernelstream("summary", str(out))
    assert res.returncode == 0, res.stderr
    assert json.loads((out / "summary.json").read_text())["predictions"] == 200
