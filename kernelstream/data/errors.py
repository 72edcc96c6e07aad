"""Errors of the data layer: :class:`ParseError` (a located bad line), the option value sets,
and the error policy (``raise`` for the Python API, ``collect`` = dead letters for pipelines)."""

from __future__ import annotations

import os
import re
from typing import Literal

PathLike = str | os.PathLike[str]


Format = Literal["libsvm", "csv", "parquet"]


Task = Literal["classification", "regression"]


Scale = Literal["none", "01", "pm1"]


TargetScale = Literal["none", "01"]


FORMATS: tuple[str, ...] = ("libsvm", "csv", "parquet")


SCALES: tuple[str, ...] = ("none", "01", "pm1")


TARGET_SCALES: tuple[str, ...] = ("none", "01")


TASKS: tuple[str, ...] = ("classification", "regression")


class ParseError(ValueError):
    """A malformed line (or label, or file). ``str(err)`` is ``"path:line: reason"``.

    ``path`` and ``line`` (1-based) are ``None`` when unknown, e.g. when a line parser is called
    on a string; the file readers fill them in.
    """

    def __init__(self, reason: str, path: str | None = None, line: int | None = None) -> None:
        # All three go into ``args`` so that pickling (Beam dead-letter outputs) round-trips.
        super().__init__(reason, path, line)
        self.reason = reason
        self.path = None if path is None else os.fspath(path)
        self.line = line

    def __str__(self) -> str:
        if self.path is not None and self.line is not None:
            return f"{self.path}:{self.line}: {self.reason}"
        if self.path is not None:
            return f"{self.path}: {self.reason}"
        if self.line is not None:
            return f"line {self.line}: {self.reason}"
        return self.reason

    def located(self, path: PathLike | None, line: int | None) -> ParseError:
        """A copy carrying ``path`` and ``line`` (keeping any location already set)."""
        p = self.path if self.path is not None else (None if path is None else os.fspath(path))
        return ParseError(self.reason, p, self.line if self.line is not None else line)


# ASCII control characters other than TAB, LF, CR: NUL bytes and the like mean binary data,
# and str.split() would otherwise treat some of them (\x1c-\x1f, \v, \f) as separators.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _check_garbage(line: str) -> None:
    # isprintable() is a fast C check that passes almost every real line; only lines with
    # tabs, CR/LF or something odd pay for the regex.
    if not line.isprintable():
        m = _CONTROL.search(line)
        if m is not None:
            raise ParseError(f"binary garbage (control character {m.group()!r})")

