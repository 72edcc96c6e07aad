"""Helpful errors shared by the command line and the Python API: "did you mean" for a
misspelt name (a learner, a parameter, an option) and the one-line explanation of a row given
in a shape the learners do not take (a dict)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


def close_matches(word: str, choices: Iterable[str], n: int = 1) -> list[str]:
    """The ``n`` names of ``choices`` closest to ``word`` (difflib's ratio >= 0.6; a name
    that differs only in case or ``_``/``-`` first)."""
    names = list(dict.fromkeys(choices))
    norm = word.lower().replace("_", "-")
    exact = [c for c in names if c.lower().replace("_", "-") == norm and c != word]
    return (exact + [m for m in difflib.get_close_matches(word, names, n=n) if m not in exact]
            )[:n]


def did_you_mean(word: str, choices: Iterable[str], quote: bool = True) -> str:
    """``"; did you mean 'bogd'?"`` for the closest of ``choices`` to ``word``, or ``""``."""
    found = close_matches(word, choices)
    if not found:
        return ""
    return f"; did you mean {found[0]!r}?" if quote else f"; did you mean {found[0]}?"


def row_error(who: str, x: Any, many: bool = False) -> ValueError | None:
    """The one-line error for a row (``many``: a block of rows) of a kind the learners do not
    take, e.g. a dict ``{feature: value}``; None when ``x`` is not such a row, so the caller
    re-raises numpy's own error. Called only once numpy has failed to read ``x``: never on
    the path of a valid row."""
    first = x
    if many and isinstance(x, list | tuple) and x:
        first = x[0]
    if not isinstance(first, dict) and not (many and isinstance(x, dict)):
        return None
    shape = ("a 2-D array (rows x features: a numpy array or a list of equal-length lists) "
             "or a kernelstream.sparse.CSR" if many else
             "a 1-D sequence of numbers (a numpy array or a list, one value per feature) or "
             "a 1-row kernelstream.sparse.CSR")
    return ValueError(
        f"{who}: {'X' if many else 'x'} must be {shape}, got "
        f"{'rows given as dicts' if first is not x else 'a dict'}; for {{feature: value}} "
        "rows put each value at its feature's position (e.g. sklearn's DictVectorizer), or "
        "build a CSR (kernelstream.sparse.CSR.from_dense)")
