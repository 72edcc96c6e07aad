"""Progress lines of Beam and loop replays (``kernelstream.progress`` logger; the CLI prints
them on stderr unless ``--quiet``)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from kernelstream.engine import core
from kernelstream.engine.core import PROGRESS_LOGGER, Progress, StreamState
from kernelstream.pipelines.cli import main


def test_progress_line(caplog: pytest.LogCaptureFixture) -> None:
    st = StreamState()
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
                        lambda self, every=0.0: init(self, every=0.0))
    args = ["replay", "--runner", runner, "--out", str(tmp_path / "o"), "--", "--block_size=200"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "[progress]" in err and "mistake rate" in err
    assert main(["replay", "-q", *args[1:]]) == 0
    assert "[progress]" not in capsys.readouterr().err
