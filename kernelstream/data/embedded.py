"""The small data sets shipped inside the package (``kernelstream/datasets``)."""

from __future__ import annotations

import csv
import io
import os
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from kernelstream import fs
from kernelstream.data.errors import (
    PathLike,
)

_EMBEDDED_PACKAGE = "kernelstream.datasets"


def _manifest() -> list[dict[str, str]]:
    text = resources.files(_EMBEDDED_PACKAGE).joinpath("MANIFEST.tsv").read_text("utf-8")
    return list(csv.DictReader(io.StringIO(text), delimiter="\t"))


def _find_embedded(name: str) -> dict[str, str] | None:
    for row in _manifest():
        aliases = [a for a in row.get("aliases", "").split(",") if a]
        if name == row["name"] or name in aliases:
            return row
    return None


def embedded_datasets() -> list[str]:
    """Names of the data sets shipped inside the package."""
    return [row["name"] for row in _manifest()]


def embedded_dataset_info(name: str) -> dict[str, str]:
    """The manifest row of an embedded data set (file, rows, features, labels, sha256, ...)."""
    row = _find_embedded(name)
    if row is None:
        raise KeyError(f"no embedded data set {name!r} (have: {embedded_datasets()})")
    return dict(row)


def embedded_path(name: str) -> Path:
    """Filesystem path of an embedded data set's file (for readers that need a path).

    Works for normal and editable installs; a zipped install has no such path.
    """
    row = embedded_dataset_info(name)
    res = resources.files(_EMBEDDED_PACKAGE).joinpath(row["file"])
    if not isinstance(res, Path):
        raise FileNotFoundError(f"embedded data set {name!r} is not a plain file ({res})")
    return res


def load_dataset(name_or_path: PathLike, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`load` an embedded data set by name (see :func:`embedded_datasets`) or a file.

    Keyword arguments go to :func:`load`.
    """
    from kernelstream.data import load  # lazy: the package imports this module
    name = os.fspath(name_or_path)
    row = _find_embedded(name) if isinstance(name, str) else None
    if row is not None:
        res = resources.files(_EMBEDDED_PACKAGE).joinpath(row["file"])
        kw.setdefault("fmt", row["format"])
        with resources.as_file(res) as p:
            return load(p, **kw)
    if not fs.exists(name):
        raise FileNotFoundError(
            f"{name!r} is neither an embedded data set ({embedded_datasets()}) nor a file"
        )
    return load(name, **kw)

