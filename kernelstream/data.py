"""Reading labelled data sets: LIBSVM text, CSV and Parquet, plus the data sets shipped inside
the package.

Two kinds of entry points:

* **Line parsers** (:func:`parse_libsvm_line`, :func:`parse_csv_line`) and record iterators
  (:func:`iter_libsvm_records`, :func:`iter_csv_records`, :func:`iter_records`) for streaming
  sources. The iterators read lazily and never raise on bad input: each line comes out as
  ``(line_number, raw_text, parsed_or_ParseError)`` so a caller can route bad lines to a
  dead-letter output.
* **Whole-file loading** (:func:`load`, :func:`load_dataset`) into a dense ``float64`` matrix and
  a label vector, raising :class:`ParseError` (``"path:line: reason"``) on the first bad line.

Format rules (the same in every entry point):

* LIBSVM: ``label idx:val idx:val ...``; indices are 1-based integers; anything after ``#`` is a
  comment. Indices given out of order are **accepted and sorted** (their order carries no
  meaning and several converters write them unsorted); a **duplicate index is an error**
  (which value is meant is ambiguous). A line with a label and no pairs is an all-zero example.
* CSV: one example per line, one label column (default: the last), no quoting. A header row is
  recognised when *none* of its feature fields parses as a number; the label field is not
  looked at, so non-numeric labels such as ``g``/``h`` cannot be mistaken for a header.
* Lines that are blank (for LIBSVM: blank after removing the comment) are skipped by the file
  readers; line numbers are physical, 1-based line numbers of the (decompressed) file. CRLF
  endings and a last line without newline are fine; ``.gz``/``.bz2``/``.xz`` files are
  recognised by their magic bytes and decompressed on the fly.
* Labels: classification maps exactly two classes to -1/+1 (:class:`LabelMap`): the class
  named by ``positive_label``, else the larger of two numeric labels (-1/+1, 0/1, 1/2), else
  the second in sorted order (g/h -> h) is +1. Numeric labels compare by value ("+1" == "1").
  A third class is an error naming it; regression keeps ``float(label)``.
* :class:`ParseError` reasons start with a fixed phrase so callers can classify errors
  without parsing prose: "empty line", "missing label", "bad token", "non-integer index",
  "non-positive index", "index too large", "bad value", "non-finite value", "duplicate
  index", "binary garbage", "undecodable bytes", "index exceeds n_features", "wrong number of
  columns", "empty field", "non-numeric value", "empty label", "third distinct label",
  "unknown label", "non-numeric label", "missing value", "corrupt compressed file".

Only numpy and the standard library are imported here; pyarrow is imported inside the Parquet
path only.
"""

from __future__ import annotations

import array
import bz2
import contextlib
import csv
import gzip
import io
import itertools
import json
import lzma
import math
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

import numpy as np

from kernelstream import fs

__all__ = [
    "Example",
    "LabelMap",
    "ParseError",
    "densify",
    "embedded_dataset_info",
    "embedded_datasets",
    "embedded_path",
    "fit_minmax",
    "infer_format",
    "iter_csv_records",
    "iter_libsvm_records",
    "iter_records",
    "load",
    "load_dataset",
    "parse_csv_line",
    "parse_libsvm_line",
    "scale_minmax",
    "scale_target_minmax",
]

PathLike = str | os.PathLike[str]
Format = Literal["libsvm", "csv", "parquet"]
Task = Literal["classification", "regression"]
Scale = Literal["none", "01", "pm1"]
TargetScale = Literal["none", "01"]

FORMATS: tuple[str, ...] = ("libsvm", "csv", "parquet")
SCALES: tuple[str, ...] = ("none", "01", "pm1")
TARGET_SCALES: tuple[str, ...] = ("none", "01")
TASKS: tuple[str, ...] = ("classification", "regression")


# --------------------------------------------------------------------------------------------
# Errors


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


# --------------------------------------------------------------------------------------------
# Line parsers

# LIBSVM stores indices as C ints; larger ones are corrupt data, not features.
MAX_INDEX = 2**31 - 1

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


def _is_int_token(s: str) -> bool:
    body = s[1:] if s[:1] in "+-" else s
    return body.isascii() and body.isdigit()


def _diagnose_libsvm(body: Sequence[str]) -> None:
    """Raise the ParseError of the first bad ``idx:val`` token; return if every token is fine.

    Slow and exact: only called once the fast path in :func:`_parse_libsvm_lists` has seen a
    problem, so the happy path never pays for it.
    """
    for tok in body:
        a, sep, b = tok.partition(":")
        if not sep or not a or not b or ":" in b:
            raise ParseError(f"bad token {tok!r} (expected index:value)")
        if not _is_int_token(a):
            raise ParseError(f"non-integer index {a!r} in {tok!r}")
        if int(a) <= 0:
            raise ParseError(f"non-positive index {int(a)} (indices are 1-based)")
        if int(a) > MAX_INDEX:
            raise ParseError(f"index too large: {int(a)} > {MAX_INDEX}")
        if "_" in b or not b.isascii():
            raise ParseError(f"bad value {b!r} at index {int(a)}")
        try:
            v = float(b)
        except ValueError:
            raise ParseError(f"bad value {b!r} at index {int(a)}") from None
        if not math.isfinite(v):
            raise ParseError(f"non-finite value {b!r} at index {int(a)}")


def _parse_libsvm_lists(line: str) -> tuple[str, list[int], list[float]]:
    """:func:`parse_libsvm_line` returning plain lists (sorted by index)."""
    cut = line.find("#")
    if cut >= 0:
        line = line[:cut]
    _check_garbage(line)
    toks = line.split()
    if not toks:
        raise ParseError("empty line")
    label = toks[0]
    if ":" in label:
        raise ParseError(f"missing label (line starts with the pair {label!r})")
    body = toks[1:]
    if not body:
        return label, [], []
    # int()/float() accept underscores ("1_0") and non-ASCII digits; LIBSVM does not.
    if "_" in line or not (line.isascii() or "".join(body).isascii()):
        _diagnose_libsvm(body)
    try:
        pairs = [t.split(":") for t in body]
        idx = [int(a) for a, _ in pairs]
        val = [float(b) for _, b in pairs]
    except ValueError:
        _diagnose_libsvm(body)
        raise ParseError("bad token") from None  # unreachable: the diagnosis raises
    # One C-level pass each; sum() is nan/inf iff some value is (or the sum overflows, in
    # which case the diagnosis finds nothing and we go on).
    if min(idx) <= 0 or max(idx) > MAX_INDEX or not math.isfinite(sum(val)):
        _diagnose_libsvm(body)
    s_idx = sorted(idx)
    if s_idx != idx:
        order = sorted(range(len(idx)), key=idx.__getitem__)
        idx = s_idx
        val = [val[i] for i in order]
    if len(set(idx)) != len(idx):
        dup = next(a for a, b in itertools.pairwise(idx) if a == b)
        raise ParseError(f"duplicate index {dup}")
    return label, idx, val


def parse_libsvm_line(line: str) -> tuple[str, np.ndarray, np.ndarray]:
    """Parse one LIBSVM line into ``(label_token, indices, values)``.

    ``indices`` are the 1-based feature indices (``int64``, sorted ascending, unique) and
    ``values`` the matching ``float64`` values. The label token is returned as written (e.g.
    ``"+1"``); map it with a :class:`LabelMap`. A comment after ``#`` is ignored.

    Raises :class:`ParseError` (without path/line) for an empty line, a missing label, a token
    that is not ``index:value``, a non-integer or non-positive index, a bad or non-finite
    value, a duplicate index, or control characters (binary data).
    """
    label, idx, val = _parse_libsvm_lists(line)
    return label, np.array(idx, dtype=np.int64), np.array(val, dtype=np.float64)


def _diagnose_csv(fields: Sequence[str], columns: Sequence[int]) -> None:
    """Raise the ParseError of the first bad feature field; return if all are fine."""
    for f, col in zip(fields, columns, strict=True):
        s = f.strip()
        if not s:
            raise ParseError(f"empty field in column {col}")
        if "_" in s or not s.isascii():
            raise ParseError(f"non-numeric value {s!r} in column {col}")
        try:
            v = float(s)
        except ValueError:
            raise ParseError(f"non-numeric value {s!r} in column {col}") from None
        if not math.isfinite(v):
            raise ParseError(f"non-finite value {s!r} in column {col}")


def _clean_label(tok: str) -> str:
    # Strip whitespace and one level of double quotes ("g" -> g): labels are the only
    # non-numeric field, so the only one a CSV writer is likely to quote.
    tok = tok.strip()
    if len(tok) >= 2 and tok[0] == tok[-1] == '"':
        tok = tok[1:-1].strip()
    return tok


def _parse_csv_lists(
    line: str, label_column: int, delimiter: str | None, n_columns: int | None
) -> tuple[str, list[float]]:
    _check_garbage(line)
    if not line.strip():
        raise ParseError("empty line")
    fields = line.split(delimiter)
    n = len(fields)
    if n_columns is not None and n != n_columns:
        raise ParseError(f"wrong number of columns: expected {n_columns}, got {n}")
    if not -n <= label_column < n:
        raise ParseError(f"wrong number of columns: no label column {label_column} in {n} columns")
    lc = label_column % n
    label = _clean_label(fields.pop(lc))
    if not label:
        raise ParseError(f"empty label in column {lc + 1}")
    if "_" in line or not line.isascii():
        _diagnose_csv(fields, _feature_columns(n, lc))
    try:
        feats = [float(f) for f in fields]
    except ValueError:
        _diagnose_csv(fields, _feature_columns(n, lc))
        raise ParseError("non-numeric value") from None  # unreachable
    if not math.isfinite(sum(feats)):
        _diagnose_csv(fields, _feature_columns(n, lc))
    return label, feats


def _feature_columns(n: int, label_col: int) -> list[int]:
    """1-based column numbers of the feature fields (for error messages)."""
    return [c + 1 for c in range(n) if c != label_col]


def parse_csv_line(
    line: str,
    label_column: int = -1,
    delimiter: str | None = ",",
    *,
    n_columns: int | None = None,
) -> tuple[str, np.ndarray]:
    """Parse one CSV line into ``(label_token, features)`` (dense ``float64``).

    ``label_column`` is a 0-based column position (negative counts from the end).
    ``delimiter=None`` splits on runs of whitespace. The column count is checked only when
    ``n_columns`` is given (a line parser cannot know the file's width; the file readers pass
    the width of the first row). Fields are not unquoted, except that one pair of double quotes
    around the label is removed. Error messages use 1-based column numbers.
    """
    label, feats = _parse_csv_lists(line, label_column, delimiter, n_columns)
    return label, np.array(feats, dtype=np.float64)


def densify(indices: Any, values: Any, n_features: int) -> np.ndarray:
    """The dense ``float64`` vector of length ``n_features`` of a sparse LIBSVM example."""
    idx = np.asarray(indices, dtype=np.int64)
    x = np.zeros(int(n_features), dtype=np.float64)
    if idx.size:
        hi = int(idx.max())
        if hi > n_features:
            raise ParseError(f"index exceeds n_features: index {hi} > n_features={n_features}")
        lo = int(idx.min())
        if lo <= 0:
            raise ParseError(f"non-positive index {lo} (indices are 1-based)")
        x[idx - 1] = values
    return x


# --------------------------------------------------------------------------------------------
# Labels


def _label_key(tok: str) -> float | str:
    """Numeric labels compare by value, so "+1", "1" and "1.0" are one class."""
    try:
        v = float(tok)
    except ValueError:
        return tok
    return v if math.isfinite(v) else tok


def _distinct_classes(tokens: Iterable[str]) -> list[str]:
    """First spelling of each distinct label (by :func:`_label_key`), in order of appearance."""
    seen: dict[float | str, str] = {}
    for tok in tokens:
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
        if self.task == "regression":
            try:
                v = float(tok)
            except ValueError:
                raise ParseError(f"non-numeric label {tok!r}") from None
            if not math.isfinite(v):
                raise ParseError(f"non-numeric label {tok!r} (not finite)")
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


# --------------------------------------------------------------------------------------------
# Files

_GZIP_MAGIC = b"\x1f\x8b"
_BZ2_MAGIC = b"BZh"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_PARQUET_MAGIC = b"PAR1"
_COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz")
_EXT_FORMATS = {
    ".csv": "csv",
    ".data": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".libsvm": "libsvm",
    ".svm": "libsvm",
    ".svmlight": "libsvm",
}
# Errors a decompressor raises on corrupt or truncated input.
_DECOMPRESS_ERRORS = (OSError, EOFError, lzma.LZMAError)


def _magic(path: PathLike) -> bytes:
    if fs.is_remote(path):
        with fs.open_read(path) as f:
            return f.read(6)
    with open(path, "rb") as f:
        return f.read(6)


def _open_binary(path: PathLike) -> IO[bytes]:
    """Open for binary reading, decompressing gzip/bz2/xz (detected by magic bytes). URLs
    (``gs://`` ...) are read through Beam's file systems (:mod:`kernelstream.fs`)."""
    if fs.is_remote(path):
        return fs.open_binary(path)
    head = _magic(path)
    if head.startswith(_GZIP_MAGIC):
        return gzip.open(path, "rb")
    if head.startswith(_BZ2_MAGIC):
        return bz2.open(path, "rb")
    if head.startswith(_XZ_MAGIC):
        return lzma.open(path, "rb")
    return open(path, "rb")


def _read_bytes(path: PathLike, f: IO[bytes], size: int = -1) -> bytes:
    try:
        return f.read(size)
    except _DECOMPRESS_ERRORS as e:
        raise ParseError(f"corrupt compressed file ({e})", os.fspath(path)) from e


def _first_data_line(path: PathLike) -> str | None:
    """The first non-blank line (decoded leniently), for format and delimiter sniffing."""
    with _open_binary(path) as f:
        with contextlib.suppress(*_DECOMPRESS_ERRORS):
            for raw in f:
                text = raw.decode("utf-8", errors="replace").strip()
                if text:
                    return text
    return None


def _strip_compression_suffix(name: str) -> str:
    for suf in _COMPRESSED_SUFFIXES:
        if name.lower().endswith(suf):
            return name[: -len(suf)]
    return name


def infer_format(path: PathLike) -> Format:
    """``"libsvm"``, ``"csv"`` or ``"parquet"`` from the file name, else from the content.

    By extension (after dropping .gz/.bz2/.xz): .csv/.data/.tsv -> csv, .parquet/.pq ->
    parquet, .libsvm/.svm/.svmlight -> libsvm. Otherwise: Parquet magic bytes -> parquet; a
    first line whose second token has a ``:`` -> libsvm; a first line with a comma, tab or
    semicolon -> csv; anything else -> libsvm.
    """
    name = _strip_compression_suffix(Path(path).name)
    ext = Path(name).suffix.lower()
    if ext in _EXT_FORMATS:
        return _EXT_FORMATS[ext]  # type: ignore[return-value]
    if _magic(path).startswith(_PARQUET_MAGIC):
        return "parquet"
    first = _first_data_line(path)
    if first is None:
        return "libsvm"
    toks = first.split("#", 1)[0].split()
    if len(toks) > 1 and ":" in toks[1]:
        return "libsvm"
    if any(d in first for d in (",", "\t", ";")):
        return "csv"
    return "libsvm"


def _sniff_delimiter(path: PathLike) -> str | None:
    if Path(_strip_compression_suffix(Path(path).name)).suffix.lower() == ".tsv":
        return "\t"
    first = _first_data_line(path) or ""
    for d in (",", "\t", ";"):
        if d in first:
            return d
    return None  # runs of whitespace


def _decode_line(raw: bytes) -> tuple[str, ParseError | None]:
    """``(text, error)``: text without the line ending; error if it is not UTF-8."""
    try:
        return raw.decode("utf-8").rstrip("\r\n"), None
    except UnicodeDecodeError as e:
        text = raw.decode("utf-8", errors="backslashreplace").rstrip("\r\n")
        return text, ParseError(f"undecodable bytes (not UTF-8 text at byte {e.start})")


def _iter_raw_lines(path: PathLike) -> Iterator[tuple[int, bytes | ParseError]]:
    """``(line_number, raw_bytes)`` lazily; a decompression failure ends the stream with a
    ``ParseError`` item instead of raising."""
    lineno = 0
    with _open_binary(path) as f:
        try:
            for raw in f:
                lineno += 1
                yield lineno, raw
        except _DECOMPRESS_ERRORS as e:
            yield lineno + 1, ParseError(f"corrupt compressed file ({e})", os.fspath(path))


def _libsvm_blank(text: str) -> bool:
    return not text.split("#", 1)[0].strip()


# --------------------------------------------------------------------------------------------
# Record iterators (streaming; never raise on bad data)


def iter_libsvm_records(
    path: PathLike,
) -> Iterator[tuple[int, str, tuple[str, np.ndarray, np.ndarray] | ParseError]]:
    """Lazily yield ``(line_number, raw_text, (label, indices, values) | ParseError)``.

    Blank and comment-only lines are skipped. Bad lines (including binary garbage and
    undecodable bytes) come out as a located :class:`ParseError`; the iterator does not raise
    on bad data (a missing file still raises ``OSError`` on the first ``next``).
    """
    spath = os.fspath(path)
    for lineno, raw in _iter_raw_lines(path):
        if isinstance(raw, ParseError):
            yield lineno, "", raw
            return
        text, err = _decode_line(raw)
        if err is None:
            if _libsvm_blank(text):
                continue
            try:
                yield lineno, text, parse_libsvm_line(text)
                continue
            except ParseError as e:
                err = e
        elif not raw.strip():
            continue
        yield lineno, text, err.located(spath, lineno)


def _resolve_label_column(
    label_column: int | str | None, header_fields: Sequence[str] | None
) -> int:
    """0-based label position; names need the header. Integers are range-checked per line."""
    if label_column is None:
        return -1
    if isinstance(label_column, str):
        if header_fields is None:
            raise ValueError(f"label_column {label_column!r} is a name but the file has no header")
        names = [_clean_label(h) for h in header_fields]
        if label_column not in names:
            raise ValueError(f"no column named {label_column!r} in the header {names}")
        return names.index(label_column)
    return int(label_column)


def _looks_like_header(fields: Sequence[str], label_column: int) -> bool:
    """True when no feature field parses as a number (the label field is ignored)."""
    n = len(fields)
    if not -n <= label_column < n:
        return False
    lc = label_column % n
    feats = [f for i, f in enumerate(fields) if i != lc]
    if not feats:
        return False
    for f in feats:
        try:
            float(f)
        except ValueError:
            continue
        return False
    return True


def iter_csv_records(
    path: PathLike,
    *,
    label_column: int | str | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    n_columns: int | None = None,
) -> Iterator[tuple[int, str, tuple[str, np.ndarray] | ParseError]]:
    """Lazily yield ``(line_number, raw_text, (label, features) | ParseError)`` for a CSV file.

    ``label_column``: 0-based position (default last) or, with a header, a column name.
    ``delimiter``: default sniffed from the first line (comma, tab, semicolon, else
    whitespace). ``header``: ``None`` auto-detects (see the module doc). Every row must have
    the width of the header or, without one, of the first row (or ``n_columns`` if given).
    Blank lines are skipped. A label column name missing from the header raises ValueError.
    """
    if delimiter is None:
        delimiter = _sniff_delimiter(path)
    if isinstance(label_column, str):
        if header is False:
            raise ValueError(f"label_column {label_column!r} is a name but header=False")
        header = True
    spath = os.fspath(path)
    lc: int | None = None  # set from the first non-blank line
    for lineno, raw in _iter_raw_lines(path):
        if isinstance(raw, ParseError):
            yield lineno, "", raw
            return
        text, err = _decode_line(raw)
        if err is not None:
            if raw.strip():
                yield lineno, text, err.located(spath, lineno)
            continue
        if not text.strip():
            continue
        if lc is None:
            fields = text.split(delimiter)
            if header is None:
                is_header = _looks_like_header(fields, _resolve_label_column(label_column, None))
            else:
                is_header = header
            lc = _resolve_label_column(label_column, fields if is_header else None)
            if n_columns is None:
                n_columns = len(fields)
            if is_header:
                continue
        try:
            label, feats = _parse_csv_lists(text, lc, delimiter, n_columns)
        except ParseError as e:
            yield lineno, text, e.located(spath, lineno)
            continue
        yield lineno, text, (label, np.array(feats, dtype=np.float64))


class Example(NamedTuple):
    """One parsed example: dense features, mapped label (nan without a LabelMap), raw label."""

    x: np.ndarray
    y: float
    label: str


def iter_records(
    path: PathLike,
    *,
    fmt: Format | None = None,
    n_features: int | None = None,
    label_map: LabelMap | None = None,
    label_column: int | str | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    limit: int | None = None,
) -> Iterator[tuple[int, str, Example | ParseError]]:
    """Lazily yield ``(line_number, raw_text, Example | ParseError)`` in any format.

    Every good record is an :class:`Example` with a dense ``x`` of a fixed width: LIBSVM needs
    ``n_features`` (a stream cannot look ahead for the largest index; an index beyond it is a
    ParseError of that line), CSV rows must have ``n_features + 1`` columns when it is given.
    ``y`` is ``label_map(label)`` (an unknown label is a ParseError of that line) or ``nan``
    when no map is given. Parquet rows are numbered from 1 and their raw text is a JSON object.
    ``limit`` stops after that many records (good or bad). Bad data never raises.
    """
    fmt = fmt or infer_format(path)
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if fmt == "libsvm" and n_features is None:
        raise ValueError("n_features is required to stream a LIBSVM file")
    if fmt == "libsvm" and label_column is not None:
        raise ValueError("label_column does not apply to LIBSVM files")
    return _iter_records(path, fmt, n_features, label_map, label_column, delimiter, header, limit)


def _iter_records(
    path: PathLike,
    fmt: str,
    n_features: int | None,
    label_map: LabelMap | None,
    label_column: int | str | None,
    delimiter: str | None,
    header: bool | None,
    limit: int | None,
) -> Iterator[tuple[int, str, Example | ParseError]]:
    spath = os.fspath(path)
    source: Iterator[tuple[int, str, Any]]
    if fmt == "libsvm":
        source = iter_libsvm_records(path)
    elif fmt == "csv":
        n_cols = None if n_features is None else n_features + 1
        source = iter_csv_records(
            path, label_column=label_column, delimiter=delimiter, header=header, n_columns=n_cols
        )
    else:
        source = _iter_parquet_records(path, label_column, n_features)
    count = 0
    for lineno, text, parsed in source:
        if limit is not None and count >= limit:
            return
        count += 1
        if isinstance(parsed, ParseError):
            yield lineno, text, parsed
            continue
        try:
            if fmt == "libsvm":
                label, idx, val = parsed
                assert n_features is not None
                x = densify(idx, val, n_features)
            else:
                label, x = parsed
            y = math.nan if label_map is None else label_map(label)
        except ParseError as e:
            yield lineno, text, e.located(spath, lineno)
            continue
        yield lineno, text, Example(x, y, label)


# --------------------------------------------------------------------------------------------
# Whole-file loading


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


@dataclass
class _Sparse:
    """Parsed LIBSVM rows in flat (CSR-like) form."""

    labels: _Labels
    counts: np.ndarray  # pairs per row
    idx: np.ndarray  # 1-based, int64 (within a row in file order)
    val: np.ndarray


# Bytes the LIBSVM fast path handles itself; anything else ("#", "_", non-ASCII, control
# characters) sends the file to the exact per-line parser.
_BULK_BYTES = bytes(b for b in range(0x20, 0x7F) if b not in b"#_") + b"\t\r\n"
_TO_SPACE = bytes.maketrans(b"\t\r", b"  ")
_COLON_NL_TO_SPACE = bytes.maketrans(b":\n", b"  ")
_MAX_BULK_LABEL = 64  # longer label tokens go to the exact path
_MAX_INT_VALUE_DIGITS = 15  # integer values up to 10^15 - 1 are exact in float64


def _gather_digits(
    buf: np.ndarray, last: np.ndarray, length: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """Integer value and "all digits" flag of the digit strings ``buf[last-length+1 .. last]``.

    Works one digit place at a time (``width`` gathers of one byte per string) rather than
    over the whole buffer, so it is cheap for the short numbers LIBSVM files are full of.
    Requires ``1 <= length``; bytes beyond a string's length are ignored.
    """
    value = np.zeros(len(last), dtype=np.int64)
    ok = np.ones(len(last), dtype=bool)
    place = 1
    for k in range(width):
        d = buf[last - k] - np.uint8(0x30)  # uint8: bytes below "0" wrap to > 9
        if k == 0:  # every string has a last digit: no mask needed
            ok &= d <= 9
            value += d
        else:
            has = length > k
            ok &= (d <= 9) | ~has
            d[~has] = 0
            value += d.astype(np.int64) * place
        place *= 10
    return value, ok


def _libsvm_bulk(data: bytes, line0: int = 0) -> _Sparse | None:
    """Vectorised LIBSVM parse of whole lines of a (decompressed) file, or None if unsure.

    ``line0`` is the number of lines before ``data`` in the file (line numbers are global).

    The per-line parser costs several µs a line; this path finds tokens, labels and line
    numbers with numpy on the raw bytes, computes indices and integer values from their
    digits and converts the other values with one ``np.fromstring`` call. It only accepts
    input whose meaning it can vouch for (plain ASCII, every pair ``digits:value``, finite
    values, no duplicate index); for anything else it returns None and :func:`_libsvm_exact`
    decides and reports the first bad line. A property test checks that both paths agree.
    """
    if data.translate(None, _BULK_BYTES):
        return None
    # Newlines at both ends: every token then has whitespace on both sides, the last line
    # needs no newline, and line k (1-based) is preceded by exactly k newlines.
    text = b"\n" + data.translate(_TO_SPACE) + b"\n"
    buf = np.frombuffer(text, dtype=np.uint8)
    newline = buf == 0x0A
    ws = newline | (buf == 0x20)
    starts = np.flatnonzero(ws[:-1] & ~ws[1:]) + 1
    ends = np.flatnonzero(~ws[:-1] & ws[1:]) + 1  # exclusive
    # A token starts a line (is a label) iff the gap before it holds a newline. Most gaps are
    # one byte; count newlines (by binary search) only in the longer ones.
    gap_start = np.empty_like(starts)
    gap_start[:1] = 0
    gap_start[1:] = ends[:-1]
    is_label = buf[starts - 1] == 0x0A
    long_gap = np.flatnonzero(starts - gap_start > 1)
    nl = np.flatnonzero(newline)
    if long_gap.size:
        before = np.searchsorted(nl, starts[long_gap]) - np.searchsorted(nl, gap_start[long_gap])
        is_label[long_gap] = before > 0
    label_tok = np.flatnonzero(is_label)
    lab_starts, lab_ends = starts[label_tok], ends[label_tok]
    p_starts, p_ends = starts[~is_label], ends[~is_label]
    n, ntok = len(lab_starts), len(p_starts)
    colons = np.flatnonzero(buf == 0x3A)
    # Equal counts plus "colon k lies strictly inside pair token k" means: every pair has
    # exactly one colon with a non-empty index and value around it, and no label has one.
    if len(colons) != ntok:
        return None
    if not (np.all(colons > p_starts) and np.all(colons < p_ends - 1)):
        return None
    lab_len = lab_ends - lab_starts
    if n and int(lab_len.max()) > _MAX_BULK_LABEL:
        return None
    counts = np.diff(np.append(label_tok, len(starts))) - 1  # pairs per line
    if ntok:
        index_len = colons - p_starts
        width = int(index_len.max())
        if width > 10:  # beyond MAX_INDEX anyway; let the exact path say so
            return None
        idx, ok = _gather_digits(buf, colons - 1, index_len, width)
        if not ok.all():
            return None
        val = _bulk_values(text, buf, colons, p_ends, index_len, width, lab_starts, lab_len)
        if val is None:
            return None
        if not (np.all(idx > 0) and np.all(idx <= MAX_INDEX) and np.all(np.isfinite(val))):
            return None
        rows = np.repeat(np.arange(n), counts)
        same_row = rows[1:] == rows[:-1]
        if np.any((np.diff(idx) <= 0) & same_row):
            # Unsorted rows are fine for a dense result; duplicates are not.
            s_idx = idx[np.lexsort((idx, rows))]
            if np.any((np.diff(s_idx) == 0) & same_row):
                return None
    else:
        idx = np.zeros(0, dtype=np.int64)
        val = np.zeros(0, dtype=np.float64)
    linenos = np.searchsorted(nl, lab_starts) + line0  # = the number of newlines before it
    return _Sparse(_bulk_labels(buf, lab_starts, lab_len, linenos), counts, idx, val)


def _bulk_values(
    text: bytes,
    buf: np.ndarray,
    colons: np.ndarray,
    p_ends: np.ndarray,
    index_len: np.ndarray,
    index_width: int,
    lab_starts: np.ndarray,
    lab_len: np.ndarray,
) -> np.ndarray | None:
    """The float64 values of all pairs, or None if one is not a number numpy can read.

    Plain integers (optionally signed), the bulk of many LIBSVM files, are computed from their
    digits (exact, so equal to ``float()``); the rest go through one ``np.fromstring``.
    """
    val_len = p_ends - colons - 1
    first = buf[colons + 1]
    signed = (first == 0x2D) | (first == 0x2B)
    n_digits = val_len - signed
    # Candidates for the integer path: no ".", "e" or "E" in the value (found with one pass
    # over the buffer; a hit inside a label only costs a candidate) and at most 15 digits.
    cand_mask = (n_digits > 0) & (n_digits <= _MAX_INT_VALUE_DIGITS)
    marks = np.flatnonzero((buf == 0x2E) | ((buf | 0x20) == 0x65))
    if marks.size:
        owner = np.searchsorted(colons, marks) - 1
        cand_mask[owner[owner >= 0]] = False
    cand = np.flatnonzero(cand_mask)
    val = np.empty(len(colons), dtype=np.float64)
    is_int = np.zeros(len(colons), dtype=bool)
    if cand.size:
        width = int(n_digits[cand].max())
        ints, ok = _gather_digits(buf, p_ends[cand] - 1, n_digits[cand], width)
        cand = cand[ok]
        val[cand] = ints[ok]
        neg = cand[first[cand] == 0x2D]
        val[neg] *= -1.0  # also gives -0.0 for "-0", as float() does
        is_int[cand] = True
    rest = np.flatnonzero(~is_int)
    if rest.size:
        # Blank everything but the remaining values (labels, indices, colons, integer values),
        # then let numpy's (correctly rounded) parser read them in order.
        vt = np.frombuffer(text.translate(_COLON_NL_TO_SPACE), dtype=np.uint8).copy()
        for k in range(index_width):
            vt[(colons - 1 - k)[index_len > k]] = 0x20
        for k in range(int(lab_len.max())):
            vt[(lab_starts + k)[lab_len > k]] = 0x20
        done_ends, done_len = p_ends[is_int], val_len[is_int]
        for k in range(int(done_len.max(initial=0))):
            vt[(done_ends - 1 - k)[done_len > k]] = 0x20
        try:
            parsed = np.fromstring(vt.tobytes(), dtype=np.float64, sep=" ")
        except ValueError:
            return None
        if len(parsed) != rest.size:
            return None
        val[rest] = parsed
    return val


def _bulk_labels(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, linenos: np.ndarray
) -> _Labels:
    """Label tokens as fixed-width byte strings, reduced to distinct tokens with numpy."""
    n = len(starts)
    if n == 0:
        return _Labels([], np.zeros(0, dtype=np.int64), linenos.astype(np.int64))
    width = int(lengths.max())
    cols = np.arange(width)
    pos = np.minimum(starts[:, None] + cols, len(buf) - 1)
    chars = np.where(cols < lengths[:, None], buf[pos], 0).astype(np.uint8)
    fixed = np.ascontiguousarray(chars).view(f"S{width}").ravel()
    uniq, inverse = np.unique(fixed, return_inverse=True)
    first = np.full(len(uniq), n, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(n))
    order = np.argsort(first)  # distinct tokens in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    tokens = [bytes(u).decode("ascii") for u in uniq[order]]
    return _Labels(tokens, rank[inverse].astype(np.int64), linenos.astype(np.int64))


def parse_libsvm_lines(
    lines: Sequence[bytes], n_features: int
) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    """Many one-line LIBSVM records at once (e.g. Kafka messages), with the file loader's
    vectorised parser (:func:`_libsvm_bulk`): ``(label token per line, dense X (n,
    n_features), ok)``, or None when that parser cannot vouch for every line (a comment, a
    bad token, a blank or multi-line record, ...): the caller then parses line by line with
    :func:`parse_libsvm_line`, which also gives the errors. Row ``i`` equals
    ``densify(*parse_libsvm_line(lines[i])[1:], n_features)`` bit for bit where ``ok[i]``;
    rows with an index beyond ``n_features`` have ``ok`` False (and zeros): the line parser
    and :func:`densify` report them."""
    n, d = len(lines), int(n_features)
    if n == 0:
        return [], np.zeros((0, d), dtype=np.float64), np.ones(0, dtype=bool)
    data = b"\n".join(lines)
    if data.count(b"\n") != n - 1:
        return None  # a record holding a newline: the line parser sees one line, we two
    sp = _libsvm_bulk(data)
    if sp is None or len(sp.counts) != n:
        return None  # a blank record has no row
    rows = np.repeat(np.arange(n), sp.counts)
    beyond = sp.idx > d
    ok = np.ones(n, dtype=bool)
    ok[rows[beyond]] = False
    keep = ok[rows]
    X = np.zeros((n, d), dtype=np.float64)
    X[rows[keep], sp.idx[keep] - 1] = sp.val[keep]
    tokens = sp.labels.tokens
    return [tokens[c] for c in sp.labels.codes.tolist()], X, ok


def _libsvm_exact(data: bytes, path: str, line0: int = 0) -> _Sparse:
    """Per-line LIBSVM parse with :func:`parse_libsvm_line`; raises on the first bad line.

    ``line0`` is the number of lines before ``data`` in the file (line numbers are global).
    """
    labels: list[str] = []
    linenos: list[int] = []
    counts: list[int] = []
    idx: list[int] = []
    val: list[float] = []
    for lineno, raw in enumerate(data.split(b"\n"), line0 + 1):
        text, err = _decode_line(raw)
        if err is not None:
            if not raw.strip():
                continue
            raise err.located(path, lineno)
        if _libsvm_blank(text):
            continue
        try:
            label, i, v = _parse_libsvm_lists(text)
        except ParseError as e:
            raise e.located(path, lineno) from None
        labels.append(label)
        linenos.append(lineno)
        counts.append(len(i))
        idx.extend(i)
        val.extend(v)
    return _Sparse(
        _encode_labels(labels, linenos),
        np.asarray(counts, dtype=np.int64),
        np.asarray(idx, dtype=np.int64),
        np.asarray(val, dtype=np.float64),
    )


# Whole-file loading reads the file in blocks of whole lines of about this many (decompressed)
# bytes and parses one block at a time, so that the parser's temporaries (several bytes of
# masks and int64 positions per input byte) stay bounded and the peak memory is about the
# result X plus one block's worth. Tests shrink it to cross block boundaries.
_CHUNK_BYTES = 1 << 18


def _iter_line_blocks(path: PathLike, limit: int | None, size: int) -> Iterator[bytes]:
    """The decompressed file as consecutive blocks of whole lines of about ``size`` bytes
    (longer when one line is). Every block but the last ends with a newline, so the line
    numbers of a block start after the newlines of the blocks before it.

    With ``limit``, stops after the ``limit``-th LIBSVM data line (blank and comment-only
    lines do not count) and reads nothing beyond it. A decompression error raises
    :class:`ParseError` ("corrupt compressed file") when the read reaches it.
    """
    with _open_binary(path) as f:
        if limit is None:
            pending: list[bytes] = []  # a line longer than one read, in pieces
            while block := _read_bytes(path, f, size):
                cut = block.rfind(b"\n") + 1
                if not cut:
                    pending.append(block)
                    continue
                head, tail = block[:cut], block[cut:]
                if pending:
                    pending.append(head)
                    head = b"".join(pending)
                pending = [tail] if tail else []
                yield head
            if pending:
                yield b"".join(pending)
            return
        out: list[bytes] = []
        n = nbytes = 0
        try:
            for raw in f:
                if n >= limit:
                    break
                out.append(raw)
                nbytes += len(raw)
                if raw.split(b"#", 1)[0].strip():
                    n += 1
                if nbytes >= size:
                    yield b"".join(out)
                    out, nbytes = [], 0
        except _DECOMPRESS_ERRORS as e:
            raise ParseError(f"corrupt compressed file ({e})", os.fspath(path)) from e
        if out:
            yield b"".join(out)


def _grow_rows(X: np.ndarray, n: int) -> None:
    """Resize ``X`` in place to ``n`` rows (new rows are zero).

    ``ndarray.resize`` reallocates; for large arrays (mmap'ed by glibc) that remaps pages
    instead of copying, so growing X block by block never holds two copies of it. ``X`` must
    have no views (hence refcheck=False is safe: the callers keep none).
    """
    X.resize((n, X.shape[1]), refcheck=False)


def _compact_pairs(idx: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``idx``/``val`` in the smallest types that hold them exactly (indices are at most
    MAX_INDEX; many files hold only small integers or values exact in float32)."""
    idx = idx.astype(np.uint16 if int(idx.max()) < 2**16 else np.int32)
    v32 = val.astype(np.float32)
    if np.array_equal(v32.astype(np.float64).view(np.int64), val.view(np.int64)):
        val = v32  # bit for bit the same float64 values once written into X
    return idx, val


class _LibsvmBuilder:
    """Collects parsed LIBSVM blocks into the dense X and the labels of :func:`_load_libsvm`.

    With ``n_features`` known, each block is written into X (grown in place) and dropped.
    Without it the width is only known at the end: blocks are kept as compact sparse parts
    (:func:`_compact_pairs`) and written into X once it is allocated. Either way the result
    and every error are those of a parse of the whole file at once:

    * syntax errors first (the caller parses all blocks before :meth:`finish`), then an index
      beyond ``n_features``, reported at the first such line;
    * its index is the first one beyond ``n_features`` in file order when every block took
      the bulk path, else the smallest one in that line: the whole file would then have gone
      through the exact parser, whose rows are sorted.
    """

    def __init__(self, n_features: int | None) -> None:
        self.d = None if n_features is None else int(n_features)
        direct = self.d is not None and self.d >= 0
        self.X = np.zeros((0, self.d), dtype=np.float64) if direct else None
        self.parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray] | None] = []
        self.table: dict[str, int] = {}
        self.codes: list[np.ndarray] = []
        self.linenos: list[np.ndarray] = []
        self.n = 0
        self.max_idx = 0
        self.all_bulk = True
        self.too_large: tuple[int, int, int] | None = None  # (line, first index, smallest)

    def add(self, sp: _Sparse, bulk: bool) -> None:
        self.all_bulk &= bulk
        tokens, codes, linenos = sp.labels
        remap = np.array(
            [self.table.setdefault(t, len(self.table)) for t in tokens], dtype=np.int64
        )
        self.codes.append(remap[codes])
        self.linenos.append(linenos)
        row0, self.n = self.n, self.n + len(codes)
        if not sp.idx.size:
            if self.X is not None:
                _grow_rows(self.X, self.n)
            return
        self.max_idx = max(self.max_idx, int(sp.idx.max()))
        if self.d is None:
            self.parts.append((row0, sp.counts, *_compact_pairs(sp.idx, sp.val)))
            return
        if self.too_large is None and self.max_idx > self.d:
            self.too_large = self._first_too_large(sp, self.d)
            self.X = None  # the load fails; only the syntax of the rest is still checked
        if self.X is not None:
            _grow_rows(self.X, self.n)
            rows = np.repeat(np.arange(row0, self.n), sp.counts)
            self.X[rows, sp.idx - 1] = sp.val

    @staticmethod
    def _first_too_large(sp: _Sparse, d: int) -> tuple[int, int, int]:
        bad = int(np.argmax(sp.idx > d))
        ends = np.cumsum(sp.counts)
        r = int(np.searchsorted(ends, bad, side="right"))
        row = sp.idx[int(ends[r] - sp.counts[r]) : int(ends[r])]
        return int(sp.labels.linenos[r]), int(sp.idx[bad]), int(row[row > d].min())

    def finish(self, path: str) -> tuple[np.ndarray, _Labels]:
        d = self.max_idx if self.d is None else self.d
        if self.too_large is not None:
            line, first, smallest = self.too_large
            index = first if self.all_bulk else smallest
            raise ParseError(
                f"index exceeds n_features: index {index} > n_features={d}", path, line
            )
        labels = _Labels(
            list(self.table),
            np.concatenate(self.codes) if self.codes else np.zeros(0, dtype=np.int64),
            np.concatenate(self.linenos) if self.linenos else np.zeros(0, dtype=np.int64),
        )
        self.codes = self.linenos = []
        if self.X is not None:
            return self.X, labels
        X = np.zeros((self.n, d), dtype=np.float64)
        for k, part in enumerate(self.parts):
            assert part is not None
            self.parts[k] = None  # free each part once it is in X
            row0, counts, idx, val = part
            rows = np.repeat(np.arange(row0, row0 + len(counts)), counts)
            X[rows, idx - 1] = val
        return X, labels


def _load_libsvm(
    path: PathLike, n_features: int | None, limit: int | None
) -> tuple[np.ndarray, _Labels]:
    spath = os.fspath(path)
    out = _LibsvmBuilder(n_features)
    line0 = 0  # lines before the current block
    with contextlib.closing(_iter_line_blocks(path, limit, _CHUNK_BYTES)) as blocks:
        for block in blocks:
            try:
                sp = _libsvm_bulk(block, line0) if b"#" not in block else None
                bulk = sp is not None
                if sp is None:
                    sp = _libsvm_exact(block, spath, line0)
            except ParseError:
                # Reading the whole file first reported a corrupt compressed file before any
                # bad line: read the rest (as far as a whole-file read went) before raising.
                for _ in blocks:
                    pass
                raise
            out.add(sp, bulk)
            line0 += block.count(b"\n")
    return out.finish(spath)


def _load_csv(
    path: PathLike,
    n_features: int | None,
    limit: int | None,
    label_column: int | str | None,
    delimiter: str | None,
    header: bool | None,
) -> tuple[np.ndarray, _Labels]:
    # Rows go straight into X (grown in place a block at a time), labels into int64 codes:
    # no per-row arrays or label strings are kept for the whole file.
    table: dict[str, int] = {}
    codes = array.array("q")
    linenos = array.array("q")
    X: np.ndarray | None = None
    block_rows = 1
    n_cols = None if n_features is None else n_features + 1
    records = iter_csv_records(
        path, label_column=label_column, delimiter=delimiter, header=header, n_columns=n_cols
    )
    n = 0
    for lineno, _text, parsed in records:
        if limit is not None and n >= limit:
            break
        if isinstance(parsed, ParseError):
            raise parsed
        label, x = parsed
        if X is None:
            X = np.zeros((0, len(x)), dtype=np.float64)
            block_rows = max(1, _CHUNK_BYTES // (8 * len(x) + 8))
        if n == len(X):  # doubling while small, then a block at a time
            _grow_rows(X, n + min(block_rows, max(n, 64)))
        X[n] = x
        n += 1
        codes.append(table.setdefault(label, len(table)))
        linenos.append(lineno)
    if X is None:
        X = np.zeros((0, n_features or 0), dtype=np.float64)
    else:
        _grow_rows(X, n)  # drop the unused rows of the last block
    return X, _Labels(
        list(table), np.array(codes, dtype=np.int64), np.array(linenos, dtype=np.int64)
    )


def _parquet_table(
    path: PathLike, label_column: int | str | None, n_features: int | None
) -> tuple[Any, str, list[str]]:
    """``(ParquetFile, label column name, feature column names)``."""
    import pyarrow as pa  # lazy: only the Parquet path needs pyarrow
    import pyarrow.parquet as pq

    spath = os.fspath(path)
    pf = pq.ParquetFile(fs.open_read(spath) if fs.is_remote(spath) else spath)
    schema = pf.schema_arrow
    names = schema.names
    if label_column is None:
        label_column = "label"
    if isinstance(label_column, int):
        if not -len(names) <= label_column < len(names):
            raise ValueError(f"label_column {label_column} out of range for {len(names)} columns")
        label_name = names[label_column]
    else:
        label_name = label_column
    if label_name not in names:
        raise ValueError(f"{spath}: no label column {label_name!r} (columns: {names})")

    def numeric(t: Any) -> bool:
        return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))

    feats = [c for c in names if c != label_name and numeric(schema.field(c).type)]
    if n_features is not None and len(feats) != n_features:
        raise ValueError(f"{spath}: {len(feats)} numeric feature columns, n_features={n_features}")
    return pf, label_name, feats


def _load_parquet(
    path: PathLike,
    n_features: int | None,
    limit: int | None,
    label_column: int | str | None,
) -> tuple[np.ndarray, _Labels]:
    import pyarrow.compute as pc

    spath = os.fspath(path)
    pf, label_name, feats = _parquet_table(path, label_column, n_features)
    table = pf.read(columns=[*feats, label_name])
    if limit is not None:
        table = table.slice(0, limit)
    n = table.num_rows

    def first_null(col: Any) -> int:
        return int(np.argmax(pc.is_null(col).to_numpy(zero_copy_only=False))) + 1

    cols = []
    for c in feats:
        col = table.column(c)
        if col.null_count:
            raise ParseError(f"missing value in column {c!r}", spath, first_null(col))
        cols.append(col.to_numpy().astype(np.float64))
    X = np.column_stack(cols) if cols else np.zeros((n, 0), dtype=np.float64)
    finite = np.isfinite(X)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise ParseError(f"non-finite value {X[r, c]!r} in column {feats[c]!r}", spath, int(r) + 1)
    lab = table.column(label_name)
    if lab.null_count:
        raise ParseError(f"missing value in label column {label_name!r}", spath, first_null(lab))
    # A label column is long but has few distinct values: map those, not every row.
    enc = pc.dictionary_encode(lab).combine_chunks()
    tokens = [str(v) for v in enc.dictionary.to_pylist()]
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return X, _Labels(tokens, codes, np.arange(1, n + 1, dtype=np.int64))


def _iter_parquet_records(
    path: PathLike, label_column: int | str | None, n_features: int | None
) -> Iterator[tuple[int, str, tuple[str, np.ndarray] | ParseError]]:
    spath = os.fspath(path)
    pf, label_name, feats = _parquet_table(path, label_column, n_features)
    row = 0
    for batch in pf.iter_batches(columns=[*feats, label_name]):
        for rec in batch.to_pylist():
            row += 1
            text = json.dumps(rec, default=str)
            try:
                vals = [rec[c] for c in feats]
                for c, v in zip(feats, vals, strict=True):
                    if v is None:
                        raise ParseError(f"missing value in column {c!r}")
                    if not math.isfinite(float(v)):
                        raise ParseError(f"non-finite value {v!r} in column {c!r}")
                if rec[label_name] is None:
                    raise ParseError(f"missing value in label column {label_name!r}")
            except ParseError as e:
                yield row, text, e.located(spath, row)
                continue
            yield row, text, (str(rec[label_name]), np.array(vals, dtype=np.float64))


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


def load(
    path: PathLike,
    *,
    fmt: Format | None = None,
    n_features: int | None = None,
    label_column: int | str | None = None,
    task: Task = "classification",
    scale: Scale = "none",
    limit: int | None = None,
    positive_label: str | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    label_map: LabelMap | None = None,
    scale_target: TargetScale = "none",
) -> tuple[np.ndarray, np.ndarray]:
    """Load a whole data set as ``(X, y)``: ``X`` dense ``float64`` ``(n, d)`` C-contiguous,
    ``y`` ``float64`` (±1 for classification, the target for regression).

    * ``fmt``: ``"libsvm"`` (also gzip/bz2/xz-compressed), ``"csv"`` or ``"parquet"``; inferred
      by :func:`infer_format` when None.
    * ``n_features``: LIBSVM width (default: the largest index seen; a larger index is an
      error). For CSV/Parquet a check of the width.
    * ``label_column``: CSV position (default last) or header name; Parquet name or position
      (default ``"label"``; all other numeric columns are features). Not for LIBSVM.
    * ``task``: ``"classification"`` maps the two label classes to ±1 (see
      :meth:`LabelMap.from_labels` for which is +1; ``positive_label`` overrides), or use an
      explicit ``label_map`` (e.g. when a limited read may miss a class).
      ``"regression"`` keeps numeric targets.
    * ``scale``: ``"none"``, ``"01"`` or ``"pm1"`` min-max scaling of each feature over the
      loaded rows (:func:`scale_minmax`).
    * ``limit``: read only the first ``limit`` examples.
    * ``delimiter``/``header``: CSV options (default sniffed / auto-detected).
    * ``scale_target``: ``"none"`` or ``"01"`` — min-max scaling of a regression target to
      ``[0, 1]`` over the loaded rows (:func:`scale_target_minmax`; paper 002 rescales its
      regression targets). Regression only.

    Raises :class:`ParseError` naming file and line on the first malformed line (syntax errors
    of all lines are checked before label errors).

    Text files are parsed in blocks of lines and written into ``X`` as they go, and scaling
    works in place, so the peak memory is about ``X`` plus one block's temporaries.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if scale_target not in TARGET_SCALES:
        raise ValueError(f"scale_target must be one of {TARGET_SCALES}, got {scale_target!r}")
    if scale_target != "none" and task != "regression":
        raise ValueError("scale_target applies to regression targets only (task='regression')")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    fmt = fmt or infer_format(path)
    spath = os.fspath(path)
    if fmt == "libsvm":
        if label_column is not None:
            raise ValueError("label_column does not apply to LIBSVM files")
        X, labels = _load_libsvm(path, n_features, limit)
    elif fmt == "csv":
        X, labels = _load_csv(path, n_features, limit, label_column, delimiter, header)
    elif fmt == "parquet":
        X, labels = _load_parquet(path, n_features, limit, label_column)
    else:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    y = _map_labels(labels, task, positive_label, label_map, spath)
    X = _scale_minmax_inplace(X, scale)  # X is ours: no second copy of it
    y = scale_target_minmax(y, scale_target)
    return np.ascontiguousarray(X, dtype=np.float64), y


# --------------------------------------------------------------------------------------------
# Scaling


def fit_minmax(X: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-column ``(lo, hi)`` of a 2-D array (zeros for an empty one)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    if X.shape[0] == 0:
        z = np.zeros(X.shape[1], dtype=np.float64)
        return z, z.copy()
    return X.min(axis=0), X.max(axis=0)


def scale_minmax(X: Any, kind: Scale = "01", lo: Any = None, hi: Any = None) -> np.ndarray:
    """Min-max scale each column to ``[0, 1]`` (``"01"``) or ``[-1, 1]`` (``"pm1"``).

    ``lo``/``hi`` default to :func:`fit_minmax` of ``X``; pass a training set's to scale a test
    set the same way (its values may then fall outside the range; they are not clipped).
    Constant columns (``hi == lo``) map to 0 rather than dividing by zero. ``"none"`` returns
    ``X`` as a float64 array unchanged. Always returns a new array for the other kinds.
    """
    if kind not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {kind!r}")
    X = np.asarray(X, dtype=np.float64)
    if kind == "none":
        return X
    if lo is None or hi is None:
        flo, fhi = fit_minmax(X)
        lo = flo if lo is None else lo
        hi = fhi if hi is None else hi
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    span = hi - lo
    const = ~(span > 0)
    Z = (X - lo) / np.where(const, 1.0, span)
    if kind == "pm1":
        Z = 2.0 * Z - 1.0
    Z[:, const] = 0.0
    return np.ascontiguousarray(Z)


def _scale_minmax_inplace(X: np.ndarray, kind: Scale) -> np.ndarray:
    """:func:`scale_minmax` of ``X`` (2-D float64, fitted on itself) overwriting ``X``.

    The same operations in the same order, so the result is bit-identical to it.
    """
    if kind == "none":
        return X
    lo, hi = fit_minmax(X)
    span = hi - lo
    const = ~(span > 0)
    X -= lo
    X /= np.where(const, 1.0, span)
    if kind == "pm1":
        X *= 2.0
        X -= 1.0
    X[:, const] = 0.0
    return X


def scale_target_minmax(y: Any, kind: TargetScale = "01") -> np.ndarray:
    """Min-max scale a regression target vector to ``[0, 1]`` (``"01"``); a constant target
    maps to 0; ``"none"`` returns ``y`` as a float64 array unchanged."""
    if kind not in TARGET_SCALES:
        raise ValueError(f"scale_target must be one of {TARGET_SCALES}, got {kind!r}")
    y = np.asarray(y, dtype=np.float64)
    if kind == "none" or y.size == 0:
        return y
    lo, hi = float(y.min()), float(y.max())
    if not hi > lo:
        return np.zeros_like(y)
    return (y - lo) / (hi - lo)


# --------------------------------------------------------------------------------------------
# Embedded data sets

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
