"""CSV text: the line parser, record iteration and whole-file loading."""

from __future__ import annotations

import array
import math
import os
from collections.abc import Iterator, Sequence

import numpy as np

from kernelstream.data.errors import (
    BadLines,
    ErrorPolicy,
    ParseError,
    PathLike,
    _check_garbage,
)
from kernelstream.data.labels import (
    _clean_label,
    _Labels,
)
from kernelstream.data.lines import (
    _decode_line,
    _grow_rows,
    _iter_raw_lines,
)
from kernelstream.data.sniff import (
    _looks_like_header,
    _sniff_delimiter,
)


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


def _header_option(label_column: int | str | None, header: bool | None) -> bool | None:
    """``header`` as the readers use it: a label column name implies a header row."""
    if isinstance(label_column, str):
        if header is False:
            raise ValueError(f"label_column {label_column!r} is a name but header=False")
        return True
    return header


def _layout(
    first: str, label_column: int | str | None, delimiter: str | None, header: bool | None
) -> tuple[bool, int, int]:
    """``(is_header, label position, width)`` from the first non-blank line: the one rule of
    both whole-file paths and the record iterator."""
    fields = first.split(delimiter)
    if header is None:
        header = _looks_like_header(fields, _resolve_label_column(label_column, None))
    return header, _resolve_label_column(label_column, fields if header else None), len(fields)


def iter_csv_records(
    path: PathLike,
    *,
    label_column: int | str | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    n_columns: int | None = None,
    errors: ErrorPolicy | BadLines = ErrorPolicy.COLLECT,
) -> Iterator[tuple[int, str, tuple[str, np.ndarray] | ParseError]]:
    """Lazily yield ``(line_number, raw_text, (label, features) | ParseError)`` for a CSV file.

    ``label_column``: 0-based position (default last) or, with a header, a column name.
    ``delimiter``: default sniffed from the first line (comma, tab, semicolon, else
    whitespace). ``header``: ``None`` auto-detects (see the module doc). Every row must have
    the width of the header or, without one, of the first row (or ``n_columns`` if given).
    Blank lines are skipped. A label column name missing from the header raises ValueError.
    ``errors``: bad lines are yielded as located :class:`ParseError` (``COLLECT``, the
    default) or the first one raises (``RAISE``); a :class:`BadLines` also counts them.
    """
    bad = BadLines.of(errors)
    if delimiter is None:
        delimiter = _sniff_delimiter(path)
    header = _header_option(label_column, header)
    spath = os.fspath(path)
    lc: int | None = None  # set from the first non-blank line
    for lineno, raw in _iter_raw_lines(path):
        if isinstance(raw, ParseError):
            yield lineno, "", bad.add(raw)
            return
        text, err = _decode_line(raw)
        if err is not None:
            if raw.strip():
                yield lineno, text, bad.add(err.located(spath, lineno))
            continue
        if not text.strip():
            continue
        if lc is None:
            is_header, lc, width = _layout(text, label_column, delimiter, header)
            if n_columns is None:
                n_columns = width
            if is_header:
                continue
        try:
            label, feats = _parse_csv_lists(text, lc, delimiter, n_columns)
        except ParseError as e:
            yield lineno, text, bad.add(e.located(spath, lineno))
            continue
        yield lineno, text, (label, np.array(feats, dtype=np.float64))


def _load_csv(
    path: PathLike,
    n_features: int | None,
    limit: int | None,
    label_column: int | str | None,
    delimiter: str | None,
    header: bool | None,
    chunk_bytes: int,
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
    bad = BadLines(ErrorPolicy.RAISE)
    n = 0
    for lineno, _text, parsed in records:
        if limit is not None and n >= limit:
            break  # the policy applies to the lines read, not to the one after the limit
        if isinstance(parsed, ParseError):
            bad.add(parsed)  # raises
            continue
        label, x = parsed
        if X is None:
            X = np.zeros((0, len(x)), dtype=np.float64)
            block_rows = max(1, chunk_bytes // (8 * len(x) + 8))
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
