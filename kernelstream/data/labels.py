"""The one label map: raw label tokens to -1/+1 (classification) or floats (regression), for
whole-file loading (:func:`_map_labels`), file streams (:func:`label_map_for`) and topics that
admit classes as they arrive (:class:`StreamLabels`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from kernelstream.data.errors import (
    TASKS,
    ParseError,
    Task,
)


def _clean_label(tok: str) -> str:
    # Strip whitespace and one level of double quotes ("g" -> g): labels are the only
    # non-numeric field, so the only one a CSV writer is likely to quote.
    tok = tok.strip()
    if len(tok) >= 2 and tok[0] == tok[-1] == '"':
        tok = tok[1:-1].strip()
    return tok


def _label_key(tok: str) -> float | str:
    """Numeric labels compare by value, so "+1", "1" and "1.0" are one class. (A non-finite
    one, "nan" or "inf", is never a class: :func:`nonfinite_label`.)"""
    try:
        v = float(tok)
    except ValueError:
        return tok
    return v if math.isfinite(v) else tok


def nonfinite_label(tok: str) -> bool:
    """Whether a label token is a number that is not finite (nan, inf): a row so labelled is a
    dead letter ("non-finite label") in either task, and never a class of its own."""
    try:
        return not math.isfinite(float(_clean_label(tok)))
    except ValueError:
        return False


def never_a_class(tok: str) -> bool:
    """Whether a label token is never a class: empty, or not finite (:func:`nonfinite_label`).
    Its row is a dead letter, so it is skipped wherever the first labels decide the classes
    (a file's, ``data.label_mix``; a stream's first records, ``stream_width``)."""
    return not _clean_label(tok) or nonfinite_label(tok)


def nonfinite_label_error(tok: str) -> ParseError:
    return ParseError(f"non-finite label {_clean_label(tok)!r}")


def _distinct_classes(tokens: Iterable[str]) -> list[str]:
    """First spelling of each distinct label (by :func:`_label_key`), in order of appearance;
    non-finite labels are not classes."""
    seen: dict[float | str, str] = {}
    for tok in tokens:
        if not nonfinite_label(tok):
            seen.setdefault(_label_key(tok.strip()), tok.strip())
    return list(seen.values())


def _third_label_error(classes: Sequence[str]) -> ParseError:
    return ParseError(
        f"third distinct label {classes[2]!r} (already seen {classes[0]!r} and {classes[1]!r};"
        " classification needs exactly two classes)"
    )


@dataclass(frozen=True)
class LabelMap:
    """Maps raw label tokens to ``-1.0``/``+1.0`` (classification) or to floats (regression).

    Build it from the label set with :meth:`from_labels` (a streaming reader can do so from a
    known set without reading the file), from explicit classes (``LabelMap("0", "1")``), or
    with :meth:`regression`. :meth:`to_dict`/:meth:`from_dict` give plain JSON-able data.

    Numeric labels are compared by value (``"+1" == "1" == "1.0"``), others as stripped
    strings. Calling the map on a token of neither class raises :class:`ParseError`
    ("unknown label ...").
    """

    negative: str | None = None
    positive: str | None = None
    task: Task = "classification"
    _cache: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.task == "regression":
            if self.negative is not None or self.positive is not None:
                raise ValueError("a regression LabelMap has no classes")
            return
        if self.negative is None and self.positive is None:
            raise ValueError("a classification LabelMap needs at least one class")
        for name in ("negative", "positive"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, str(v).strip())
                if nonfinite_label(str(v)):
                    raise ValueError(f"a class cannot be a non-finite label: {v!r}")
        if (
            self.negative is not None
            and self.positive is not None
            and _label_key(self.negative) == _label_key(self.positive)
        ):
            raise ValueError(f"negative and positive label are the same: {self.negative!r}")

    @classmethod
    def regression(cls) -> LabelMap:
        """Labels are real-valued targets: ``float(token)``."""
        return cls(task="regression")

    @classmethod
    def from_labels(
        cls,
        labels: Iterable[str],
        *,
        positive_label: str | None = None,
        task: Task = "classification",
    ) -> LabelMap:
        """The map for a label set (repetitions allowed, e.g. a whole label column).

        With two classes the one named by ``positive_label`` maps to +1; without it, the larger
        of two numeric labels (-1/+1, 0/1, 1/2 -> +1, 1, 2), otherwise the second in sorted
        string order (g/h -> h). A single class is accepted when ``positive_label`` says which
        side it is on, or when it is numeric -1 or 0 (negative) or 1 (positive), as a file with
        one class (e.g. a test split) is still a valid ±1 or 0/1 file. A third class raises
        :class:`ParseError` naming it.
        """
        if task == "regression":
            return cls.regression()
        classes = _distinct_classes(str(t) for t in labels)
        if len(classes) > 2:
            raise _third_label_error(classes)
        if not classes:
            if positive_label is None:
                raise ValueError("no labels given")
            return cls(positive=positive_label)
        pos_key = None if positive_label is None else _label_key(str(positive_label).strip())
        if len(classes) == 1:
            (only,) = classes
            k = _label_key(only)
            if pos_key is not None:
                return cls(positive=only) if k == pos_key else cls(only, str(positive_label))
            if k in (-1.0, 0.0):
                return cls(negative=only)
            if k == 1.0:
                return cls(positive=only)
            raise ValueError(
                f"only one label ({only!r}) seen: cannot tell its class; pass positive_label or"
                " the full label set"
            )
        a, b = classes
        if pos_key is not None:
            if _label_key(a) == pos_key:
                return cls(b, a)
            if _label_key(b) == pos_key:
                return cls(a, b)
            raise ValueError(f"positive_label {positive_label!r} is not one of {a!r}, {b!r}")
        ka, kb = _label_key(a), _label_key(b)
        if isinstance(ka, float) and isinstance(kb, float):
            return cls(a, b) if ka < kb else cls(b, a)
        return cls(a, b) if a < b else cls(b, a)

    @property
    def classes(self) -> tuple[str | None, str | None]:
        """``(negative, positive)`` tokens (``None`` for a side never seen)."""
        return self.negative, self.positive

    def __call__(self, token: str) -> float:
        """The label value of a raw token; :class:`ParseError` if it is not a known class."""
        cached = self._cache.get(token)
        if cached is not None:
            return cached
        tok = _clean_label(token)
        if nonfinite_label(tok):
            raise nonfinite_label_error(tok)
        if self.task == "regression":
            try:
                v = float(tok)
            except ValueError:
                raise ParseError(f"non-numeric label {tok!r}") from None
        else:
            k = _label_key(tok)
            if self.positive is not None and k == _label_key(self.positive):
                v = 1.0
            elif self.negative is not None and k == _label_key(self.negative):
                v = -1.0
            else:
                known = " or ".join(repr(c) for c in self.classes if c is not None)
                raise ParseError(f"unknown label {tok!r} (expected {known})")
        if len(self._cache) < 1024:  # distinct spellings are few; bound it against junk
            self._cache[token] = v
        return v

    def map_many(self, tokens: Sequence[str]) -> np.ndarray:
        """``float64`` array of the mapped tokens (each distinct token is looked up once)."""
        table = {t: self(t) for t in dict.fromkeys(tokens)}
        return np.fromiter(map(table.__getitem__, tokens), dtype=np.float64, count=len(tokens))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form; inverse of :meth:`from_dict`."""
        if self.task == "regression":
            return {"task": "regression"}
        return {"task": self.task, "negative": self.negative, "positive": self.positive}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabelMap:
        unknown = set(d) - {"task", "negative", "positive"}
        if unknown:
            raise ValueError(f"unknown LabelMap fields: {sorted(unknown)}")
        return cls(d.get("negative"), d.get("positive"), d.get("task", "classification"))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


class _Labels(NamedTuple):
    """Raw labels of the loaded rows as distinct tokens (first-appearance order) and codes."""

    tokens: list[str]
    codes: np.ndarray  # int64, row -> index into tokens
    linenos: np.ndarray  # physical line (or Parquet row) number of each row


def _encode_labels(labels: Sequence[str], linenos: Sequence[int]) -> _Labels:
    table: dict[str, int] = {}
    codes = np.fromiter(
        (table.setdefault(t, len(table)) for t in labels), dtype=np.int64, count=len(labels)
    )
    return _Labels(list(table), codes, np.asarray(linenos, dtype=np.int64))


def _map_labels(
    labels: _Labels,
    task: str,
    positive_label: str | None,
    label_map: LabelMap | None,
    path: str,
) -> np.ndarray:
    """y for every row; label errors name the first line that has the offending label."""
    tokens, codes, linenos = labels

    def line_of(k: int) -> int:
        return int(linenos[int(np.argmax(codes == k))])

    if not tokens:
        return np.zeros(0, dtype=np.float64)
    if label_map is None:
        if task == "regression":
            label_map = LabelMap.regression()
        else:
            classes = _distinct_classes(tokens)  # tokens are in first-appearance order
            if len(classes) > 2:
                k = next(i for i, t in enumerate(tokens) if t.strip() == classes[2])
                raise _third_label_error(classes).located(path, line_of(k))
            try:
                label_map = LabelMap.from_labels(classes, positive_label=positive_label)
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
    values = np.empty(len(tokens), dtype=np.float64)
    for k, tok in enumerate(tokens):
        try:
            values[k] = label_map(tok)
        except ParseError as e:
            raise e.located(path, line_of(k)) from None
    return values[codes]


# Label maps of streams (files read in chunks, topics)


def class_key(tok: str) -> float | str:
    """Labels of one class: numeric labels compare by value, others as stripped strings (the
    rule of :class:`LabelMap`)."""
    return _label_key(tok.strip())


def label_map_for(tokens: Iterable[str], task: str,
                  positive_label: str | None = None) -> LabelMap:
    """The label map of a run: regression targets, or the first two classes in stream order
    (``LabelMap.from_labels`` decides which is +1). Rows of a further class become dead
    letters ("unknown label") instead of failing the whole run."""
    if task == "regression":
        return LabelMap.regression()
    classes: list[str] = []
    seen: set[float | str] = set()
    for tok in dict.fromkeys(tokens):
        if nonfinite_label(tok):
            continue  # a dead letter, not a class
        k = class_key(tok)
        if k not in seen and len(classes) < 2:
            seen.add(k)
            classes.append(tok.strip())
    return LabelMap.from_labels(classes, positive_label=positive_label)


class StreamLabels:
    """Label tokens → ±1 as they arrive (classification), or floats (regression).

    Each new class is admitted only if the map of the classes seen so far
    (``LabelMap.from_labels``) stays consistent with the classes already mapped; otherwise
    the row is an error ("third label", or a label whose class cannot be told yet).
    """

    def __init__(self, task: str, positive_label: str | None) -> None:
        self.task = task
        self.positive = positive_label
        self.classes: list[str] = []
        self.map: LabelMap | None = LabelMap.regression() if task == "regression" else None

    def __call__(self, tok: str) -> float:
        if self.task == "regression":
            assert self.map is not None
            return self.map(tok)
        if nonfinite_label(tok):
            raise nonfinite_label_error(tok)
        if self.map is not None:
            try:
                return self.map(tok)
            except ParseError:
                pass  # a new class: try to admit it below
        try:
            new = LabelMap.from_labels([*self.classes, tok.strip()],
                                       positive_label=self.positive)
        except ValueError as e:
            hint = "" if self.positive is not None else " (give positive_label / --positive-label)"
            raise ParseError(f"label {tok.strip()!r}: {e}{hint}") from None
        for c in self.classes:
            if self.map is not None and new(c) != self.map(c):
                raise ParseError(f"label {tok.strip()!r} would change the class of the earlier "
                                 f"label {c!r}: give positive_label / --positive-label")
        self.map = new
        self.classes.append(tok.strip())
        return new(tok)
