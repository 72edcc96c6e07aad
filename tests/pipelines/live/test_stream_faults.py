"""Stop a running ``kernelstream stream`` gracefully in the middle of a backlog, restart it
on the same checkpoint, and compare with an uninterrupted run of the same topics.

A graceful stop (SIGINT, SIGTERM, ``--max-seconds``, ``--idle-stop``) is a checkpoint, not a
flush: the reader ends at the positions it has claimed, records its partition-group merge
still holds back are read again by the next run. So a stop and a restart give exactly the
outputs of one uninterrupted run, and of the reference loop over the topic contents: no row
missing, changed, extra or twice. (A drain that released the merge buffer as if every
partition had caught up put labels before events not read yet: permanent "label for unknown
event id" dead letters, and every later prediction of the model changed.)

``--idle-stop`` counts only while the reader has read everything on the broker (``behind`` 0
in the status file): neither a start-up nor a reader busy on a backlog is idle.

The backlog: an events topic and a labels topic of two partitions each, four entities
(``--key-by id-prefix``), labels late, ~5,700 records. Where the stops land, whatever this
machine's speed: a signal once a fifth of the backlog is read; ``--max-seconds 8s`` with the
run suspended (SIGSTOP) mid-backlog until its time is up; ``--idle-stop 500ms`` with the
broker frozen for 2 s as the pipeline starts (the old idle rule stopped there, nothing read).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from _helpers import without_warnings
from stream_accounting import assert_accounting
from test_stream import (
    STREAM_ARGS,
    T0,
    assert_same,
    create_topics,
    labelled_stream,
    one_line,
    outputs,
    produce,
    reap,
    reference_records,
    reference_tables,
    run_cli,
    spec_for,
    start_cli,
    status,
    stream_argv,
    wait_for_records,
)

from kernelstream.engine.live.rows import OUTPUTS
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.kafka_client import local_broker

EV, LAB = "fa", "fa-lab"
N_EVENTS = 3000


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


@dataclass
class Backlog:
    broker: str
    total: int  # records on the four partitions
    want: dict[str, pa.Table]  # the uninterrupted run's outputs (= the reference loop's)


def _argv(hp: str, out: Path, ckpt: Path, *extra: str) -> list[str]:
    return stream_argv(hp, f"kafka://BROKER/{EV}", "--labels", f"kafka://BROKER/{LAB}",
                       *STREAM_ARGS[3:], "--out", str(out), "--checkpoint", str(ckpt),
                       "--snapshot-every", "100", "-q", *extra, "--", "--max_records=20")


@pytest.fixture(scope="module")
def backlog(broker: str, tmp_path_factory: pytest.TempPathFactory) -> Backlog:
    create_topics(broker, [EV, LAB], 2)
    msgs = [((EV if m[0] == "ev" else LAB), *m[1:])
            for m in labelled_stream(N_EVENTS, 0, T0, seed=21)]
    produce(broker, msgs)
    tmp = tmp_path_factory.mktemp("uninterrupted")
    argv = _argv(broker, tmp / "out", tmp / "ckpt", "--idle-stop", "1s")
    r = run_cli(argv)
    assert r.returncode == 0, r.stderr
    want = outputs(tmp / "out")
    ref, _ = reference_tables(reference_records(broker, [EV, LAB], 2),
                              spec_for(argv[: argv.index("--")]))
    assert_same(want, ref)
    assert _summary(tmp / "out")["records"] == len(msgs)
    assert_accounting(tmp / "out", checkpoint=tmp / "ckpt")
    return Backlog(broker, len(msgs), want)


def _summary(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "summary.json").read_text()))


def _read(ckpt: Path) -> int:
    """Records the checkpoint's last snapshot has read (its offsets summed)."""
    with SnapshotView.open(ckpt) as view:
        return sum(view.offsets().values())


def _finish_and_compare(b: Backlog, out: Path, ckpt: Path, stopped: int) -> None:
    """The stop landed mid-backlog; a restart reads to the end; the outputs of both runs are
    the uninterrupted run's, each row once."""
    assert 0 < stopped < b.total, f"the stop did not land mid-backlog: {stopped}/{b.total}"
    assert _read(ckpt) == stopped  # the final snapshot is the stop's cut
    r = run_cli(_argv(b.broker, out, ckpt, "--idle-stop", "1s"))
    assert r.returncode == 0, r.stderr
    assert _read(ckpt) == b.total
    got = outputs(out)
    for name in OUTPUTS:
        ids = got[name].column("row_id").to_pylist()
        assert len(ids) == len(set(ids)), f"{name}: a row published twice"
    assert_same(got, b.want)
    assert_accounting(out, checkpoint=ckpt)  # over both runs: the counts add up
    print(f"stopped after {stopped:,} of {b.total:,} records")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_backlog_then_restart_equals_one_run(backlog: Backlog, tmp_path: Path,
                                                          sig: signal.Signals) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    proc = start_cli(_argv(backlog.broker, out, ckpt))
    try:
        wait_for_records(proc, out, backlog.total // 5)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        reap(proc)
    assert proc.returncode == 130, stderr
    stopped = _summary(out)["records"]
    epoch = SnapshotView.open(ckpt).head
    assert one_line(stderr) == (f"kernelstream stream: stopped ({sig.name}): {stopped:,} "
                                f"records, snapshot epoch {epoch} in {ckpt}")
    _finish_and_compare(backlog, out, ckpt, stopped)


@pytest.mark.slow
def test_max_seconds_mid_backlog_then_restart_equals_one_run(backlog: Backlog,
                                                             tmp_path: Path) -> None:
    """``--max-seconds 8s``; the process is suspended (SIGSTOP) mid-backlog until those 8 s
    have passed, so the stop lands mid-backlog however fast this machine reads."""
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    proc = start_cli(_argv(backlog.broker, out, ckpt, "--max-seconds", "8s"))
    try:
        wait_for_records(proc, out, backlog.total // 5)
        proc.send_signal(signal.SIGSTOP)
        try:
            # the run's clock starts before its Committer's ("started")
            time.sleep(max(0.0, status(out)["started"] + 8.5 - time.time()))
        finally:
            proc.send_signal(signal.SIGCONT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        reap(proc)
    assert proc.returncode == 0 and without_warnings(stderr).strip() == "", stderr
    summary = _summary(out)
    assert summary["stopped_by"] == "max-seconds"
    _finish_and_compare(backlog, out, ckpt, summary["records"])


def _broker_pid(hp: str) -> int:
    """The pid of the local broker listening at ``hp`` (its command line names the address)."""
    url = f"tcp://{hp}".encode()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if url in (d / "cmdline").read_bytes().split(b"\0"):
                    return int(d.name)
    raise AssertionError(f"no broker process listens at {hp}")


@pytest.mark.slow
def test_idle_stop_waits_for_the_backlog(backlog: Backlog, tmp_path: Path) -> None:
    """``--idle-stop 500ms`` on a backlog whose broker does not answer for 2 s as the pipeline
    starts (frozen with SIGSTOP once the status file appears, before the reader's first
    fetch): no record is read for longer than the idle time, but the reader does not know
    yet what the broker holds, so that is not idle; the run reads the whole backlog before
    it stops. (The old rule counted from the start: it stopped with nothing read.) A restart
    at the end of the topics stops again, adding nothing."""
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = _argv(backlog.broker, out, ckpt, "--idle-stop", "500ms")
    pid = _broker_pid(backlog.broker)
    proc = start_cli(argv)
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob(".run-*/status.json")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the pipeline did not start"
            time.sleep(0.002)
        os.kill(pid, signal.SIGSTOP)
        try:
            frozen_at = status(out).get("records")
            time.sleep(2.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        reap(proc)
    assert proc.returncode == 0 and without_warnings(stderr).strip() == "", stderr
    summary = _summary(out)
    assert summary["stopped_by"] == "idle"
    assert summary["records"] == backlog.total, "idle-stop fired before the backlog was read"
    assert _read(ckpt) == backlog.total
    r = run_cli(argv)
    assert r.returncode == 0 and without_warnings(r.stderr).strip() == "", r.stderr
    assert _summary(out)["records"] == 0
    got = outputs(out)
    for name in OUTPUTS:
        ids = got[name].column("row_id").to_pylist()
        assert len(ids) == len(set(ids)), f"{name}: a row published twice"
    assert_same(got, backlog.want)
    assert_accounting(out, checkpoint=ckpt)
    print(f"records read when the broker froze: {frozen_at}")


def test_idle_counts_only_while_the_reader_is_caught_up(tmp_path: Path) -> None:
    """The Stopper's idle rule on a status file it reads: records unchanged, but the reader
    behind the high watermark (or not knowing it yet) never counts as idle; caught up it does."""
    from kernelstream.pipelines.live.stream_monitor import Stopper
    from kernelstream.transforms.live import kafka_read

    status_path = tmp_path / "status.json"
    job = SimpleNamespace(status_path=str(status_path), drain_path=str(tmp_path / "drain"))
    config = SimpleNamespace(quiet=True, max_seconds=None, idle_stop=0.3, checkpoint=None)
    stopper = Stopper(config, job, str(tmp_path))

    def write(**doc: Any) -> None:
        status_path.write_text(json.dumps({"records": 10, **doc}))

    kafka_read.clear_drain()
    stopper._thread.start()
    try:
        for behind in (None, 7):  # start-up (no high watermark yet), then a stalled reader
            write(behind=behind)
            time.sleep(1.2)
            assert stopper.reason is None, behind
        write(behind=0)
        deadline = time.monotonic() + 10
        while stopper.reason is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stopper.reason == "idle"
    finally:
        stopper.uninstall()
        kafka_read.clear_drain()
    assert (tmp_path / "drain").read_text() == "idle\n"
