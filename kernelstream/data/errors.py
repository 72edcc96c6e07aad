"""Errors of the data layer: :class:`ParseError` (a located bad line), the option value sets,
and the error policy (:class:`ErrorPolicy`: ``raise`` for the Python API, ``collect`` = dead
letters for pipelines) with :class:`BadLines`, which applies it and counts what it collects."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

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


def strict_float(s: str, bad: str, nonfinite: str) -> float:
    """``float(s)`` under the data layer's number syntax (ASCII, no ``_`` digit separators),
    else ``ParseError(bad)``; a NaN or infinity is ``ParseError(nonfinite)``. The readers'
    slow, exact diagnosis of a token the fast path refused."""
    if "_" in s or not s.isascii():
        raise ParseError(bad)
    try:
        v = float(s)
    except ValueError:
        raise ParseError(bad) from None
    if not math.isfinite(v):
        raise ParseError(nonfinite)
    return v


def _check_garbage(line: str) -> None:
    # isprintable() is a fast C check that passes almost every real line; only lines with
    # tabs, CR/LF or something odd pay for the regex.
    if not line.isprintable():
        m = _CONTROL.search(line)
        if m is not None:
            raise ParseError(f"binary garbage (control character {m.group()!r})")



class ErrorPolicy(StrEnum):
    """What a reader does with a bad line.

    ``RAISE``: raise its located :class:`ParseError` (the Python API: :func:`load` stops at the
    first bad line). ``COLLECT``: hand it on as an item and go on reading (pipelines turn it
    into a dead letter). The values are the strings ``"raise"`` and ``"collect"``.
    """

    RAISE = "raise"
    COLLECT = "collect"


# A reason starts with a fixed phrase (see ParseError); details follow "(" or ":" or a quoted
# value. The phrase ends at a word's end: a value such as np.float64(nan) or 1.5 is not cut
# into it ("non-finite value np").
_REASON = re.compile(r"^[a-z][a-z0-9_ -]*[a-z0-9](?=$|[\s:;,(])")


def reason_kind(reason: str) -> str:
    """The fixed leading phrase of a reason ("bad token", "binary garbage", ...)."""
    m = _REASON.match(reason)
    return m.group().strip() if m else reason


@dataclass
class BadLines:
    """The bad lines of one read under an :class:`ErrorPolicy`.

    Readers pass every located :class:`ParseError` through :meth:`add`: under ``RAISE`` it
    raises; under ``COLLECT`` it is counted by reason kind (:func:`reason_kind`), the line of
    the first of each kind is kept, and it is returned for the reader to hand on. Only counts
    are kept (not the errors), so a long stream of bad lines costs no memory.
    """

    policy: ErrorPolicy = ErrorPolicy.COLLECT
    counts: dict[str, int] = field(default_factory=dict)
    first_line: dict[str, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.policy = ErrorPolicy(self.policy)  # also accepts "raise"/"collect"

    @classmethod
    def of(cls, errors: ErrorPolicy | str | BadLines) -> BadLines:
        """``errors`` itself when it is a collector (the caller reads its counts), else a new
        one with that policy."""
        return errors if isinstance(errors, BadLines) else cls(ErrorPolicy(errors))

    def add(self, err: ParseError) -> ParseError:
        """Apply the policy to ``err`` (located by the caller): raise it, or count and return
        it."""
        if self.policy is ErrorPolicy.RAISE:
            raise err from None  # the located error alone, as the readers always raised it
        kind = reason_kind(err.reason)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.first_line.setdefault(kind, err.line)
        return err

    @property
    def total(self) -> int:
        """The number of bad lines collected."""
        return sum(self.counts.values())

    def __bool__(self) -> bool:
        return bool(self.counts)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """``{kind: {"count": n, "first_line": line}}`` sorted by kind (JSON-able)."""
        return {k: {"count": c, "first_line": self.first_line[k]}
                for k, c in sorted(self.counts.items())}
