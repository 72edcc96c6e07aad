"""Regenerate ``tests/slow_tests.json``: the tests the fast lane (``pytest -m "not slow"``)
leaves out, measured, as pytest-split keeps its durations file.

    python -m pytest -p no:cacheprovider --durations=0 > /tmp/suite.log
    python tests/_slow_tests.py /tmp/suite.log

A test is slow when its setup, call and teardown together took more than ``SLOW_SECONDS`` in
that run. ``tests/conftest.py`` marks the listed tests ``slow`` at collection, beside the
tests marked ``@pytest.mark.slow`` in their modules. A new test is in the fast lane until the
next regeneration.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

SLOW_SECONDS = 0.3  # the fast lane then sums to about 2 minutes on 2 cores
FILE = Path(__file__).resolve().parent / "slow_tests.json"
_LINE = re.compile(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+)")


def slow_tests(log: str) -> dict[str, float]:
    """Node id -> seconds of every test over ``SLOW_SECONDS`` in a ``--durations=0`` log."""
    seconds: Counter[str] = Counter()
    for line in log.splitlines():
        m = _LINE.match(line)
        if m:
            seconds[m.group(2)] += float(m.group(1))
    return {k: round(v, 2) for k, v in sorted(seconds.items()) if v > SLOW_SECONDS}


if __name__ == "__main__":
    found = slow_tests(Path(sys.argv[1]).read_text())
    if not found:
        sys.exit(f"no durations in {sys.argv[1]}: run pytest with --durations=0")
    FILE.write_text(json.dumps(found, indent=0, sort_keys=True) + "\n")
    print(f"{len(found)} slow tests ({sum(found.values()):.0f} s) -> {FILE}")
