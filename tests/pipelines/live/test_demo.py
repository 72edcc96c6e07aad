"""``kernelstream demo`` end to end: its counts add up. The producer stops first (events for
``--seconds``, then their labels), the stream reads every record produced before it drains,
so the stream's ``records`` are the events and labels the demo says it produced."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_stream import run_cli

_PRODUCED = re.compile(r"^produced ([\d,]+) events \(([\d,]+) malformed\), ([\d,]+) labels "
                       r"\(([\d,]+) withheld: they expire after [\d.]+ s\): ([\d,]+) records, "
                       r"all read by the stream$", re.M)


def _n(s: str) -> int:
    return int(s.replace(",", ""))


def test_the_demo_reads_every_record_it_produced(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    r = run_cli(["demo", "--seconds", "3", "--rate", "200", "--delay-max", "1s", "--out",
                 str(out), "-q"], timeout=300)
    assert r.returncode == 0, r.stderr
    m = _PRODUCED.search(r.stdout)
    assert m is not None, r.stdout
    events, labels, total = _n(m[1]), _n(m[3]), _n(m[5])
    assert events >= 500 and labels > 0 and total == events + labels
    doc = json.loads((out / "summary.json").read_text())
    # every record produced was read, and the stream stopped because it had
    assert doc["records"] == doc["offsets"] == total
    assert doc["stopped_by"] == "until"
    assert doc["predictions"] + doc["parse_dead_letters"] == events
    assert f"{total:,} records in" in r.stdout  # the stream's own summary line says the same
