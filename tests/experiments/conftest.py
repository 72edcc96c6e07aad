"""Fixtures of the reproduction and tuning tests."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from kernelstream import data


@pytest.fixture()
def german_dir(tmp_path: Path) -> Path:
    """A data directory holding german.numer_scale (the package's embedded copy)."""
    d = tmp_path / "data"
    d.mkdir()
    with gzip.open(data.embedded_path("german"), "rb") as src, \
            open(d / "german.numer_scale", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return d
