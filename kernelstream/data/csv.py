"""CSV text: the line parser, record iteration and whole-file loading (a pyarrow fast path for
clean files, the per-line parser for everything else)."""

from __future__ import annotations

import array
import contextlib
import csv as _csv  # the standard library's (this module is kernelstream.data.csv)
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from kernelstream._suggest import did_you_mean
from kernelstream.data.errors import (
    BadLines,
    ErrorPolicy,
    ParseError,
    PathLike,
    _check_garbage,
    strict_float,
)
from kernelstream.data.labels import (
    _clean_label,
    _Labels,
)
from kernelstream.data.lines import (
    _decode_line,
    _grow_rows,
    _iter_line_blocks,
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
        strict_float(s, f"non-numeric value {s!r} in column {col}",
                     f"non-finite value {s!r} in column {col}")


def _parse_csv_lists(
    line: str, label_column: int, delimiter: str | None, n_columns: int | None
) -> tuple[str, list[float]]:
    fields = _split_fields(line, delimiter, n_columns)
    n = len(fields)
    if not -n <= label_column < n:
        raise ParseError(f"wrong number of columns: no label column {label_column} in {n} columns")
    lc = label_column % n
    label = _clean_label(fields.pop(lc))
    if not label:
        raise ParseError(f"empty label in column {lc}")
    return label, _features(line, fields, n, (lc,))


def parse_keyed_csv_fields(
    line: str, label_column: int, key_column: int, delimiter: str | None,
    n_columns: int | None
) -> tuple[str, list[float], str]:
    """``(label, features, key)`` of a line with a ``--key-by`` column (0-based positions in
    the full field list): split once, quoting-aware like every line, and reasons count
    columns as without a key column."""
    fields = _split_fields(line, delimiter, n_columns)
    n = len(fields)
    for what, c in (("key", key_column), ("label", label_column)):
        if not -n <= c < n:
            raise ParseError(f"wrong number of columns: no {what} column {c} in {n} columns")
    label_column, key_column = label_column % n, key_column % n
    key = _clean_label(fields[key_column])
    if not key:  # not an entity of its own
        raise ParseError("missing key-by value (the key column is empty)")
    label = _clean_label(fields[label_column])
    if not label:
        raise ParseError(f"empty label in column {label_column}")
    skip = (label_column, key_column)
    del fields[max(skip)]  # the higher one first: the lower one keeps its place
    del fields[min(skip)]
    return label, _features(line, fields, n, skip), key


def _split_fields(line: str, delimiter: str | None, n_columns: int | None) -> list[str]:
    _check_garbage(line)
    if not line.strip():
        raise ParseError("empty line")
    # a quote anywhere: standard CSV quoting (the rare slow path; plain lines only split)
    fields = line.split(delimiter) if '"' not in line else _split_quoted(line, delimiter)
    if n_columns is not None and len(fields) != n_columns:
        raise ParseError(f"wrong number of columns: expected {n_columns}, got {len(fields)}")
    return fields


def _features(line: str, fields: list[str], n: int, skip: tuple[int, ...]) -> list[float]:
    """The feature ``fields`` (the ``n`` columns but ``skip``) as floats, else the ParseError
    of the first bad one."""
    if ("_" in line or not line.isascii()) and any(
            "_" in f or not f.isascii() for f in fields):  # float() would take 1_0 or ٣
        _diagnose_csv(fields, _feature_columns(n, skip))
    try:
        feats = [float(f) for f in fields]
    except ValueError:
        _diagnose_csv(fields, _feature_columns(n, skip))
        raise ParseError("non-numeric value") from None  # unreachable
    if not math.isfinite(sum(feats)):
        _diagnose_csv(fields, _feature_columns(n, skip))
    return feats


def _split_quoted(line: str, delimiter: str | None) -> list[str]:
    """The fields of a line with quotes: split as standard CSV (a quoted field may hold the
    delimiter, ``""`` is a quote; runs of whitespace or a longer delimiter split plainly),
    each then stripped of spaces and one pair of double quotes (``"1.5"``, `` "g"``)."""
    if delimiter is None or len(delimiter) != 1:
        fields = line.split(delimiter)
    else:
        fields = next(_csv.reader([line], delimiter=delimiter))
    return [_clean_label(f) for f in fields]


def _feature_columns(n: int, skip: tuple[int, ...]) -> list[int]:
    """Column numbers of the feature fields (for error messages): from 0, as
    ``--label-column`` counts them."""
    return [c for c in range(n) if c not in skip]


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
    the width of the first row). Standard CSV quoting is accepted (``"1.5","g"``): quoted
    fields are unquoted, features and label alike. Error messages count columns from 0, as
    ``label_column`` does.
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
            raise ValueError(f"no column named {label_column!r} in the header {names}"
                             + did_you_mean(label_column, names))
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
    fields = first.split(delimiter) if '"' not in first else _split_quoted(first, delimiter)
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


class CsvRead(NamedTuple):
    """A whole-file read of :func:`_load_csv`: the file and ``data.load``'s options for it."""

    path: PathLike
    n_features: int | None
    limit: int | None
    label_column: int | str | None
    delimiter: str | None
    header: bool | None
    chunk_bytes: int


def _load_csv(read: CsvRead) -> tuple[np.ndarray, _Labels]:
    """The whole file as ``(X, labels)``; raises the first bad line. Clean files are parsed
    by pyarrow; whenever its result could differ from the per-line parser's (or there is a
    bad line to report), the per-line parser reads the file instead."""
    fast = _load_csv_arrow(read)
    return _load_csv_lines(read) if fast is None else fast


def _load_csv_lines(read: CsvRead) -> tuple[np.ndarray, _Labels]:
    """The per-line path of :func:`_load_csv` (the reference for the fast path)."""
    path, n_features, limit, label_column, delimiter, header, chunk_bytes = read
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


# The pyarrow fast path. It reads only what it can vouch for: blocks of printable ASCII, tabs
# and LF or CRLF line ends (no control characters or bytes the per-line parser would reject
# or decode differently, no lone CR, which pyarrow would take for a line end), one
# single-character delimiter, no quoting. Feature columns are converted by pyarrow as float64
# (fast_float: correctly rounded, like float(); tests compare the bits); it rejects every
# string float() rejects and more ("1_0", "1e-2\r"), which sends the file to the per-line
# parser, as does any non-finite value, empty label, wrong width or unreadable block.
_FAST_BYTES = bytes(range(0x20, 0x7F)) + b"\t\r\n"

# Each pyarrow call costs about a millisecond on top of its parse, so the fast path reads
# blocks a few times larger than the per-line path's; its temporaries are about the size of a
# block's rows (not several bytes per input byte as in the LIBSVM parser), so the peak memory
# stays about X plus a block.
_ARROW_BLOCK_FACTOR = 4


def _load_csv_arrow(read: CsvRead) -> tuple[np.ndarray, _Labels] | None:
    """:func:`_load_csv_lines`'s result parsed by pyarrow, or None when it cannot vouch for
    it. Raises only what the per-line path raises before reading a line (option errors)."""
    path, n_features, limit, label_column, delimiter, header, chunk_bytes = read
    try:
        import pyarrow  # noqa: F401  (lazy: the data package imports numpy only)
    except ImportError:
        return None
    if limit == 0:
        return None
    if delimiter is None:
        delimiter = _sniff_delimiter(path)
    header = _header_option(label_column, header)
    if delimiter is None or len(delimiter) != 1 or delimiter in "\r\n" \
            or delimiter.encode() not in _FAST_BYTES:
        return None  # runs of whitespace, or a delimiter pyarrow cannot split on
    size = _ARROW_BLOCK_FACTOR * chunk_bytes
    reader = _ArrowBlocks(delimiter, n_features, limit, size)
    try:
        with contextlib.closing(_iter_line_blocks(path, None, size)) as blocks:
            for block in blocks:
                if not reader.add(block, label_column, header):
                    return None
                if reader.full():
                    break
    except ParseError:
        return None  # a corrupt compressed file: the per-line path says where it stands
    return reader.result()


class _ArrowBlocks:
    """The state of a fast-path read: the layout (from the first non-blank line), X grown in
    place block by block, label codes and line numbers, as :func:`_load_csv_lines` keeps
    them."""

    def __init__(self, delimiter: str, n_features: int | None, limit: int | None,
                 chunk_bytes: int) -> None:
        self.delimiter = delimiter
        self.n_cols = None if n_features is None else n_features + 1
        self.limit = limit
        self.chunk_bytes = chunk_bytes
        self.lc: int | None = None  # label position, once the layout is known
        self.X: np.ndarray | None = None
        self.n = 0
        self.line0 = 0  # lines before the current block
        self.table: dict[str, int] = {}
        self.codes: list[np.ndarray] = []
        self.linenos: list[np.ndarray] = []

    def full(self) -> bool:
        return self.limit is not None and self.n >= self.limit

    def add(self, block: bytes, label_column: int | str | None, header: bool | None) -> bool:
        """Parse one block of whole lines into the result; False when the per-line parser
        must decide."""
        if block.translate(None, _FAST_BYTES):
            return False
        if b"\r" in block and block.count(b"\r") != block.count(b"\r\n"):
            return False
        buf = np.frombuffer(block, dtype=np.uint8)
        ends = np.flatnonzero(buf == 0x0A)
        if not block.endswith(b"\n"):
            ends = np.append(ends, len(block))  # a last line without newline
        starts = np.empty_like(ends)
        starts[:1] = 0
        starts[1:] = ends[:-1] + 1
        line0, self.line0 = self.line0, self.line0 + len(ends)
        # The lines pyarrow makes rows of: not empty once a CR before the LF is dropped.
        # Blank lines holding spaces or tabs are rows to pyarrow only: they fail the width or
        # label check below, and the per-line path decides.
        length = ends - starts
        cr = np.zeros(len(ends), dtype=bool)
        has = length > 0
        cr[has] = buf[ends[has] - 1] == 0x0D
        rows = np.flatnonzero(length > cr)
        cut = 0
        if self.lc is None:
            k = self._first_line(block, starts, ends, rows)
            if k is None:
                return True  # blank lines only: the layout comes from a later block
            text = block[starts[k] : ends[k]].decode("ascii").rstrip("\r\n")
            is_header, self.lc, width = _layout(text, label_column, self.delimiter, header)
            if self.n_cols is None:
                self.n_cols = width
            if not -self.n_cols <= self.lc < self.n_cols or self.n_cols < 2:
                return False  # every row an error, or no feature column
            self.lc %= self.n_cols
            cut = int(ends[k]) + 1 if is_header else int(starts[k])
            rows = rows[starts[rows] >= cut]
        if not len(rows):
            return True
        table = self._read(block, cut)
        if table is None or table.num_rows != len(rows):
            return False
        m = len(rows) if self.limit is None else min(len(rows), self.limit - self.n)
        return self._append(table.slice(0, m), rows[:m] + line0 + 1)

    @staticmethod
    def _first_line(block: bytes, starts: np.ndarray, ends: np.ndarray,
                    rows: np.ndarray) -> int | None:
        """Index of the first line with more than whitespace (the per-line rule of a blank
        line), or None."""
        for k in rows.tolist():
            if block[starts[k] : ends[k]].strip():
                return int(k)
        return None

    def _read(self, block: bytes, cut: int) -> Any:
        """The block from byte ``cut`` as a pyarrow table (features float64, the label as
        raw text), or None when pyarrow rejects it."""
        import pyarrow as pa
        import pyarrow.csv as pacsv

        assert self.n_cols is not None and self.lc is not None
        names = [f"c{j}" for j in range(self.n_cols)]
        types = {c: pa.float64() for c in names}
        types[names[self.lc]] = pa.string()
        try:
            return pacsv.read_csv(
                pa.BufferReader(pa.py_buffer(block)[cut:]),
                read_options=pacsv.ReadOptions(column_names=names, use_threads=False),
                parse_options=pacsv.ParseOptions(
                    delimiter=self.delimiter, quote_char=False, escape_char=False,
                    newlines_in_values=False, ignore_empty_lines=True,
                ),
                convert_options=pacsv.ConvertOptions(
                    column_types=types, null_values=[], strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
        except pa.ArrowException:  # a bad value or row: the per-line path names it
            return None

    def _append(self, table: Any, linenos: np.ndarray) -> bool:
        import pyarrow.compute as pc

        assert self.n_cols is not None and self.lc is not None
        m = table.num_rows
        labels = pc.dictionary_encode(table.column(self.lc).combine_chunks())
        # distinct raw labels in order of first appearance; cleaning may merge some
        remap: list[int] = []
        for tok in labels.dictionary.to_pylist():
            clean = _clean_label(tok)
            if not clean:
                return False  # "empty label": the per-line path reports it
            remap.append(self.table.setdefault(clean, len(self.table)))
        if self.X is None:
            self.X = np.zeros((0, self.n_cols - 1), dtype=np.float64)
        if self.n + m > len(self.X):  # doubling while small, then a block's worth at a time
            block_rows = max(1, self.chunk_bytes // (8 * self.n_cols))
            _grow_rows(self.X, self.n + m + min(block_rows, self.n))
        rows = self.X[self.n : self.n + m]
        feats = [j for j in range(self.n_cols) if j != self.lc]
        for k, j in enumerate(feats):
            rows[:, k] = table.column(j).to_numpy()
        if not np.isfinite(rows).all():
            return False  # "non-finite value" (or inf/nan spelled out): per-line reports it
        self.n += m
        indices = labels.indices.to_numpy(zero_copy_only=False)
        self.codes.append(np.asarray(remap, dtype=np.int64)[indices])
        self.linenos.append(linenos.astype(np.int64))
        return True

    def result(self) -> tuple[np.ndarray, _Labels] | None:
        if self.X is None or self.n == 0:
            return None  # no rows: the per-line path gives the empty result's shape
        _grow_rows(self.X, self.n)  # drop the unused rows
        return self.X, _Labels(list(self.table), np.concatenate(self.codes),
                               np.concatenate(self.linenos))
