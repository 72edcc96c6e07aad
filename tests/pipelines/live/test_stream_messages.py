"""What a stream prints and refuses, in the words of its options: durations as they are given
(``2h``, not ``7200000 ms``), the lag of an old backlog in hours, not millions of seconds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernelstream.pipelines.live.stream_config import duration_text, parse_duration
from kernelstream.pipelines.live.stream_monitor import Stopper
from kernelstream.pipelines.live.stream_prepare import _setting


@pytest.mark.parametrize(("ms", "text"), [(7_200_000, "2h"), (90_000, "90s"), (1500, "1500ms"),
                                          (60_000, "1m"), (172_800_000, "2d"), (1, "1ms")])
def test_durations_read_back_as_given(ms: int, text: str) -> None:
    assert duration_text(ms) == text
    assert round(parse_duration(text, "--x") * 1000) == ms


def test_settings_in_messages() -> None:
    assert _setting("metrics_window_ms", 60_000) == "1m"
    assert _setting("hash_features", None) == "none"
    assert _setting("topics", ["a", "b"]) == "a,b"


@pytest.mark.parametrize(("lag_ms", "shown"), [(1500, "lag 1.50 s"),
                                               (3 * 86_400_000 + 60_000, "lag 72 h 01 min")])
def test_the_progress_line_gives_a_long_lag_in_hours(lag_ms: int, shown: str) -> None:
    stopper = Stopper(SimpleNamespace(quiet=True), None, "/nowhere")  # type: ignore[arg-type]
    line = stopper.progress_line({"records": 10, "lag_ms": lag_ms}, stopper.t0 + 1)
    assert shown in line, line
