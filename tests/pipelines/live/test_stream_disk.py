"""``kernelstream stream`` on a full disk: an epoch is committed only with every file written.

A small tmpfs is the ``--out`` folder, and separately the ``--checkpoint`` folder; a filler
file eats its free space at a chosen moment (after the run has read its records, before its
drain's snapshot). The run fails in one line (exit 1), the snapshot's ``HEAD`` does not move
and no published file is unreadable; a second start while the disk is still full fails the
same way, in one line; once the filler is gone, a restart to the end of the topics makes
outputs equal to an uninterrupted run's. Also, without a broker: a row group the disk refused
stops its epoch's commit, and a cut-short published file is found; and with one, such a file
is refused at start in one line naming it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _helpers import live_spec, without_warnings
from stream_accounting import assert_accounting
from test_stream import (
    T0,
    Message,
    create_topics,
    labelled_stream,
    one_line,
    outputs,
    produce,
    reap,
    run_cli,
    start_cli,
    stream_argv,
    wait_for_records,
)

from kernelstream.engine.live.rows import OUTPUTS
from kernelstream.engine.live.snapshot.outputs import EMPTY
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.kafka_client import local_broker

pytestmark = pytest.mark.slow

NO_SPACE = "No space left on device"


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (skips the test where it cannot be)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """A file in ``directory`` eating every free byte of its file system."""
    path = directory / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, bytes(chunk)) == chunk:
                    pass
    finally:
        os.close(fd)
    with pytest.raises(OSError):  # full indeed
        (directory / "probe").write_bytes(bytes(4096))
    return path


def head(ckpt: Path) -> int | None:
    return SnapshotView.open(ckpt).head


def published(out: Path) -> list[Path]:
    """The epochs' published files (not a folder's empty schema file)."""
    return sorted(f for f in out.glob("*/part-*.parquet") if f.name != EMPTY)


def assert_all_readable(out: Path, upto: int | None) -> None:
    """Every published file reads back, and belongs to a committed epoch (<= ``upto``)."""
    for f in published(out):
        pq.read_table(f)
        m = re.match(r"part-e(\d+)-", f.name)
        assert m is not None and upto is not None and int(m.group(1)) <= upto, f


def _renamed(msgs: list[Message], topic: str) -> list[Message]:
    return [((topic if m[0] == "ev" else f"{topic}-lab"), *m[1:]) for m in msgs]


def _argv(hp: str, topic: str, out: Path, ckpt: Path, *more: str) -> list[str]:
    return stream_argv(hp, f"kafka://BROKER/{topic}", "--labels", f"kafka://BROKER/{topic}-lab",
                       "--n-features", "24", "-l", "b=bogd", "-p", "b.budget=20", "-l",
                       "perceptron", "--key-by", "id-prefix", "--label-ttl", "2s",
                       "--metrics-window", "1s", "--out", str(out), "--checkpoint", str(ckpt),
                       "-q", *more, "--", "--max_records=40")


TO_THE_END = ("--snapshot-every", "100", "--idle-stop", "2s")
NO_SNAPSHOT_BEFORE_DRAIN = ("--snapshot-every", "1000000", "--snapshot-seconds", "1h")


def _full_disk_then_resume(hp: str, topic: str, tmp_path: Path, out: Path, ckpt: Path,
                           full: Path, words: str) -> None:
    """The scenario of the module docstring; ``full``: the tmpfs that fills up; ``words``:
    what the failure's line says about the file it could not write."""
    create_topics(hp, [topic, f"{topic}-lab"], 2)
    produce(hp, _renamed(labelled_stream(240, 0, T0, seed=21), topic))
    r = run_cli(_argv(hp, topic, out, ckpt, *TO_THE_END))
    assert r.returncode == 0, r.stderr
    h1 = head(ckpt)
    assert h1 is not None and h1 >= 2
    more = _renamed(labelled_stream(240, 240, T0 + 60_000, seed=22), topic)
    produce(hp, more)

    # the disk fills up once the run has read every record; its drain's snapshot fails
    proc = start_cli(_argv(hp, topic, out, ckpt, *NO_SNAPSHOT_BEFORE_DRAIN))
    try:
        wait_for_records(proc, out, len(more))
        filler = fill(full)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        reap(proc)
    assert proc.returncode == 1, stderr
    line = one_line(stderr)
    print(line)
    assert NO_SPACE in line and words.format(epoch=h1 + 1) in line, line
    assert line.endswith(f"resumes from snapshot epoch {h1} in {ckpt}"), line
    assert head(ckpt) == h1
    assert_all_readable(out, h1)

    # a second start while the disk is still full: the same, before the pipeline (exit 2),
    # or at its first snapshot if the files it dropped made some room (exit 1)
    r = run_cli(_argv(hp, topic, out, ckpt, *TO_THE_END))
    assert r.returncode in (1, 2), r.stderr
    assert NO_SPACE in one_line(r.stderr), r.stderr
    print(f"still full: exit {r.returncode}: {r.stderr.strip()}")
    assert head(ckpt) == h1
    assert_all_readable(out, h1)

    # room again: the resume loses nothing
    filler.unlink()
    r = run_cli(_argv(hp, topic, out, ckpt, *TO_THE_END))
    assert r.returncode == 0, r.stderr
    assert without_warnings(r.stderr).strip() == "", r.stderr
    h2 = head(ckpt)
    assert h2 is not None and h2 > h1
    assert_all_readable(out, h2)

    # an uninterrupted run of the same topics, with the width the first run estimated from
    # the records there were then (gamma=auto: the runs on the checkpoint all kept it)
    with SnapshotView.open(ckpt) as view:
        gamma = view.info()["widths"]["gamma"]
    ref_out, ref_ckpt = tmp_path / "ref-out", tmp_path / "ref-ckpt"
    r = run_cli(_argv(hp, topic, ref_out, ref_ckpt, "-p", f"gamma={gamma!r}", *TO_THE_END))
    assert r.returncode == 0, r.stderr
    got, want = outputs(out), outputs(ref_out)
    for name in OUTPUTS:
        ids = got[name].column("row_id").to_pylist()
        assert len(ids) == len(set(ids)), f"{name}: a row published twice"
        assert got[name].num_rows == want[name].num_rows, name
        assert got[name].equals(want[name]), name
    assert want["outcomes"].num_rows > 0 and want["dead_letters"].num_rows > 0
    # the counts add up over the failed, refused and resumed runs, and equal one run's
    assert assert_accounting(out, checkpoint=ckpt) == assert_accounting(ref_out,
                                                                         checkpoint=ref_ckpt)


def test_out_on_a_full_disk_commits_nothing_then_resumes_whole(broker: str,
                                                                tmp_path: Path) -> None:
    with tmpfs(tmp_path / "mnt", "4m") as mnt:
        _full_disk_then_resume(broker, "dout", tmp_path, mnt / "out", tmp_path / "ckpt", mnt,
                               "(epoch {epoch} not committed)")


def test_checkpoint_on_a_full_disk_commits_nothing_then_resumes_whole(broker: str,
                                                                       tmp_path: Path) -> None:
    with tmpfs(tmp_path / "mnt", "2m") as mnt:
        ckpt = mnt / "ckpt"
        _full_disk_then_resume(broker, "dckpt", tmp_path, tmp_path / "out", ckpt, mnt,
                               f"cannot write snapshot epoch {{epoch}} in {ckpt}")


# -- a cut-short published file ----------------------------------------------------------


def test_a_cut_short_published_file_is_refused_at_start(broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["cut", "cut-lab"], 2)
    produce(broker, _renamed(labelled_stream(120, 0, T0, seed=23), "cut"))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = _argv(broker, "cut", out, ckpt, *TO_THE_END)
    r = run_cli(argv)
    assert r.returncode == 0, r.stderr
    h = head(ckpt)
    # what an older version published on a full disk: a file cut short at 32 KiB, or empty
    victim = sorted((out / "predictions").glob("part-*.parquet"))[0]
    data = victim.read_bytes()
    for size in (len(data) // 2, 0):
        victim.write_bytes(data[:size])
        r = run_cli(argv)
        assert r.returncode == 2, r.stderr
        line = one_line(r.stderr)
        assert f"{victim} is unreadable" in line and "move the file away" in line, line
        assert victim.stat().st_size == size and head(ckpt) == h  # left as it was


def test_check_published_names_the_first_cut_short_file(tmp_path: Path) -> None:
    import pyarrow as pa

    from kernelstream.engine.live.snapshot.outputs import UnreadableOutputError, check_published

    d = tmp_path / "outcomes"
    d.mkdir()
    for i in (1, 2, 3):
        pq.write_table(pa.table({"row_id": [f"r{i}"] * 1000}), d / f"part-e000000{i}-p.parquet")
    (d / ".pending").mkdir()
    (d / ".pending" / "e0000004-p.parquet").write_bytes(b"")  # not published: not checked
    assert check_published(tmp_path, ["outcomes", "metrics"]) == 3
    whole = (d / "part-e0000002-p.parquet").read_bytes()
    for cut in (whole[:-1], whole[: len(whole) // 2], whole[:11], b""):
        (d / "part-e0000002-p.parquet").write_bytes(cut)
        with pytest.raises(UnreadableOutputError, match=re.escape(
                f"{d / 'part-e0000002-p.parquet'} is unreadable ({len(cut)} bytes")):
            check_published(tmp_path, ["outcomes"])


# -- the commit thread -------------------------------------------------------------------


def test_a_row_group_the_disk_refused_stops_its_epochs_commit(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              ) -> None:
    """A row group handed to the commit thread fails (ENOSPC); the snapshot cut after it must
    not commit (old code: the commit ran after the failed write, published the file, and the
    error came later)."""
    from kernelstream.engine.learner_config import LearnerConfig
    from kernelstream.engine.live.rows import Rows
    from kernelstream.transforms.live.committer import Committer
    from kernelstream.transforms.live.kafka_read import ReadProgress
    from kernelstream.transforms.live.stream_job import PROGRESS_TAG, StreamJob

    out, ckpt, control = tmp_path / "out", tmp_path / "ckpt", tmp_path / "control"
    control.mkdir()
    spec = live_spec(configs=(LearnerConfig("a", "perceptron", {}),), n_features=3,
                     key_by="id-prefix")
    job = StreamJob(spec=spec, bootstrap="h:1", topics=("ev",), out=str(out),
                    control=str(control), part="p", checkpoint=str(ckpt),
                    start_offsets=(("ev", 0, 0),))
    real = pq.ParquetWriter.write_table
    calls: list[int] = []
    # the refused write waits until the progress below has been handed over: otherwise, on a
    # loaded machine, the commit thread may fail first and the progress reports the error
    # before the snapshot this test is about is attempted
    progress_in = threading.Event()

    def first_fails(self: pq.ParquetWriter, table: object, row_group_size: int | None = None,
                    ) -> None:
        calls.append(1)
        if len(calls) == 1:
            progress_in.wait(60)
            raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] "
                          f"{NO_SPACE}")  # pyarrow's words
        real(self, table, row_group_size=row_group_size)

    c = Committer(job)
    c.setup()
    monkeypatch.setattr(pq.ParquetWriter, "write_table", first_fails)
    try:
        def unlabeled(i: int) -> dict[str, object]:
            return {"row_id": f"a#0@u/u/{i}", "key": "a#0@u", "config": "a", "entity": "u",
                    "event_id": f"u/{i}", "position": i, "event_time_ms": T0 + i,
                    "expired_at_ms": T0 + i + 1}

        c.process(("unlabeled", Rows([unlabeled(0), unlabeled(1)])))
        c._write("unlabeled")  # a row group of epoch 1 (the disk refuses it)
        c.process(("unlabeled", Rows([unlabeled(2)])))
        c.process((PROGRESS_TAG, ReadProgress("ev", 0, 3)))
        progress_in.set()
        with pytest.raises((OSError, RuntimeError), match=NO_SPACE) as caught:
            c._snapshot(wait=True)
        c.pool.submit(lambda: None).result()  # the commit thread has done all it was given
        assert not (ckpt / "HEAD").exists()
        assert published(out) == []
        assert "unlabeled/.pending/e0000001-p.parquet (epoch 1 not committed)" in str(
            caught.value)
        assert "\n" not in str(caught.value)
        with pytest.raises(RuntimeError, match=NO_SPACE):  # and nothing after it either
            c._snapshot(wait=True)
        assert not (ckpt / "HEAD").exists() and published(out) == []
    finally:
        c.teardown()
