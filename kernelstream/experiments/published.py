"""The papers' published numbers, kept as text tables in ``published/`` beside this module.

A table file holds ``#`` comment lines (what the columns mean, where the paper prints them),
a header naming the columns, then one row per data set and learner with the numbers as the
paper prints them. Whole numbers are read as ``int``, other numbers as ``float`` and anything
else (such as ``9.9k``) as text.

>>> table("p4-6")["a9a"]["dd-rbp"]
(19.9, 0.49, 14544, 81.5)
"""

from __future__ import annotations

from importlib import resources
from typing import Any


def _value(token: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(token)
        except ValueError:
            pass
    return token


def table(name: str) -> dict[str, dict[str, tuple[Any, ...]]]:
    """Table ``published/<name>.txt`` as data set -> learner -> the row's other columns."""
    path = f"published/{name}.txt"
    text = resources.files(__package__).joinpath(path).read_text(encoding="utf-8")
    rows = [line.split() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    header = rows[0]
    out: dict[str, dict[str, tuple[Any, ...]]] = {}
    for row in rows[1:]:
        if len(row) != len(header):
            raise ValueError(f"{path}: row {' '.join(row)!r} has {len(row)} columns, "
                             f"the header {len(header)}")
        out.setdefault(row[0], {})[row[1]] = tuple(_value(t) for t in row[2:])
    return out
