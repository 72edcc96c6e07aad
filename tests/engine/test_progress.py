"""Progress lines of Beam and loop replays (``kernelstream.progress`` logger; the CLI prints
them on stderr unless ``--quiet``)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from kernelstream.engine.replay import core
from kernelstream.engine.replay.core import PROGRESS_LOGGER, Progress, ReplayState
from kernelstream.pipelines.cli import main


def test_progress_line(caplog: pytest.LogCaptureFixture) -> None:
    st = ReplayState()
    st.metrics.total.add(10, 3, np.zeros(0), 0.1)
    p = Progress(every=0.0)
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        p.learnt("bogd#0", st, 10)
    assert "10 examples learnt" in caplog.text and "stream bogd#0 at 10 examples" in caplog.text
    p = Progress(every=3600.0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        p.learnt("bogd#0", st, 10)
    assert caplog.text == ""  # throttled


@pytest.mark.parametrize("runner", ["direct", "loop"])
def test_cli_prints_progress_unless_quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          runner: str) -> None:
    init = Progress.__init__
    monkeypatch.setattr(core.Progress, "__init__",
                        lambda self, every=0.0, total=None: init(self, every=0.0, total=total))
    args = ["replay", "--runner", runner, "--out", str(tmp_path / "o"), "--", "--block_size=200"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "[progress]" in err and "mistake rate" in err
    assert main(["replay", "-q", "--overwrite", *args[1:]]) == 0  # the same folder again
    assert "[progress]" not in capsys.readouterr().err


def test_progress_shows_a_total_an_eta_and_the_learning_rate(
        caplog: pytest.LogCaptureFixture) -> None:
    st = ReplayState()
    p = Progress(every=0.0, total=1000)
    p.t0 -= 40.0  # 40 s of wall clock, most of it waiting for records
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        p.learnt("bogd#0", st, 200, 0.1)
        p.learnt("bogd#0", st, 50, 0.025)
    last = caplog.records[-1].getMessage()
    assert last.startswith("250 of 1,000 examples (25%) learnt in 40 s, ETA 2 min 0")
    # learning throughput: 250 examples in 0.125 s of learning, not 250 / 40 s
    assert "(learning 2,000/s)" in last
    assert "of" not in Progress(total=None).line("k", st, p.t0).split("learnt")[0]
    assert core.fmt_duration(59.4) == "59 s" and core.fmt_duration(7260) == "2 h 01 min"


def _run(path: Path, **kw: object) -> object:
    from kernelstream.pipelines.replay.replay import make_run

    return make_run(str(path), [("a", "pa-i", {}), ("b", "pa-i", {})], path.parent / "o", **kw)


def test_expected_examples_counts_records_times_streams(tmp_path: Path) -> None:
    from kernelstream.pipelines.replay.replay import expected_examples

    lib = tmp_path / "d.libsvm"
    lib.write_bytes(b"+1 1:1\n\n-1 2:1\r\n+1 1:2\n\n\n-1 1:3")  # 4 records, last unended
    assert expected_examples(_run(lib)) == 2 * 4
    assert expected_examples(_run(lib, permutations=3)) == 6 * 4
    assert expected_examples(_run(lib, limit=3, permutations=2)) == 4 * 3
    assert expected_examples(_run(lib, stream_rows=2, first_permutation=1000)) == 2 * 2
    # two shards: a stream each
    assert [expected_examples(_run(lib, shard=(i, 2))) for i in (0, 1)] == [4, 4]
    csv = tmp_path / "d.csv"
    csv.write_text("f1,f2,label\n1,2,a\n3,4,b\n5,6,a\n")
    assert expected_examples(_run(csv)) == 2 * 3
    run = _run(csv)
    csv.unlink()  # unreadable: no total, the run itself reports the file
    assert expected_examples(run) is None


@pytest.mark.parametrize("runner", ["direct", "loop"])
def test_replay_and_tune_progress_have_totals(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              runner: str) -> None:
    init = Progress.__init__
    monkeypatch.setattr(core.Progress, "__init__",
                        lambda self, every=0.0, total=None: init(self, every=0.0, total=total))
    assert main(["replay", "-R", "2", "--runner", runner, "--out", str(tmp_path / "o"),
                 "--", "--block_size=200"]) == 0
    err = capsys.readouterr().err
    assert "[progress] 200 of 2,000 examples (10%)" in err and "ETA" in err
    assert main(["tune", "german", "-l", "pa-i", "--grid", "c=0.5,1,2", "--tune-rows", "400",
                 "--runner", runner, "-o", str(tmp_path / "t"), "--", "--block_size=200"]) == 0
    err = capsys.readouterr().err
    # 3 cells and the untuned default beside them, 400 rows each
    assert "3 of 3 cells" in err and "[progress] 200 of 1,600 examples" in err


def test_stream_progress_rate_is_learning_throughput() -> None:
    from types import SimpleNamespace

    from kernelstream.pipelines.live.stream_monitor import Stopper
    from kernelstream.transforms.live.committer import _Totals

    t = _Totals()
    t.model("a", 100, 0.05)
    t.model("b", 50, 0.05)
    t.model("a", 300, 0.15)  # a's counters grew: only the growth adds
    assert (t.learnt, t.learn_seconds) == (350, pytest.approx(0.2))
    stop = Stopper(SimpleNamespace(quiet=True), SimpleNamespace(), "out")
    doc = {**t.as_doc(), "records": 350, "rows": {"outcomes": 350}}
    line = stop.progress_line(doc, stop.t0 + 60.0)  # a minute, mostly idle
    assert "labels learnt 350 (learning 1,750/s)" in line
    t.model("b", 150, 0.1)  # 100 more labels in 0.05 s of learning
    doc.update(learnt=t.learnt, learn_seconds=t.learn_seconds)
    line = stop.progress_line(doc, stop.t0 + 120.0)
    assert "(learning 2,000/s)" in line
    line = stop.progress_line(doc, stop.t0 + 180.0)  # idle: the run's rate
    assert "(learning 1,800/s)" in line
