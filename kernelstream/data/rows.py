"""Reading data files record by record for the pipelines: LIBSVM, CSV and Parquet rows,
tolerant of bad lines (the ``collect`` error policy).

The line rules are the data layer's (its public line parsers do the parsing): blank lines and
LIBSVM comment-only lines carry no example. Unlike ``data.load``, which stops at the first bad
line (``raise``), these readers turn every bad line into a ``ParseError`` located at its line,
so the callers can emit it as a dead letter and go on. Blank lines are reported too ("empty
line"), so that every physical line of a text file is either a row, a dead letter, a comment
or the CSV header. :class:`~kernelstream.data.options.ReadOptions` are a run's reading
options.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from kernelstream import fs
from kernelstream._suggest import did_you_mean
from kernelstream.data import (  # the line rules of data.load, so the readers agree with it
    ParseError,
    _clean_label,
    parse_csv_line,
    parse_libsvm_line,
)
from kernelstream.data.csv import _split_quoted, parse_keyed_csv_fields
from kernelstream.data.lines import StreamEnd, iter_lines, strip_bom
from kernelstream.data.options import ReadOptions
from kernelstream.data.sniff import first_data_line, looks_like_header, sniff_delimiter


class ParsedRow(NamedTuple):
    """A syntactically valid row: raw label token, 1-based indices (LIBSVM; None for dense
    formats), values, and the ``--key-by`` entity (None without one)."""

    label: str
    idx: np.ndarray | None
    vals: np.ndarray
    entity: str | None


@dataclass(frozen=True)
class TextFormat:
    """How to parse the lines of one LIBSVM or CSV file (resolved once, from its head).

    CSV: ``label_col``/``key_col`` are 0-based positions in the full field list; the header
    (recognised as data.py does: no feature field parses as a number) is line ``header_line``.
    """

    fmt: str
    delimiter: str | None = None
    label_col: int = -1
    key_col: int | None = None
    n_columns: int | None = None
    header_line: int | None = None

    @classmethod
    def detect(cls, path: str, fmt: str, label_column: int | str | None = None,
               delimiter: str | None = None, header: bool | None = None,
               key_by: int | str | None = None) -> TextFormat:
        if fmt == "libsvm":
            if label_column is not None:
                raise ValueError("label_column does not apply to LIBSVM files")
            if key_by is not None:
                raise ValueError("--key-by needs a CSV or Parquet file (a named column)")
            return cls("libsvm")
        if fmt != "csv":
            raise ValueError(f"not a text format: {fmt!r}")
        head = first_data_line(path)
        if head is None:
            return cls("csv", delimiter)
        lineno, first = head
        if delimiter is None:
            delimiter = sniff_delimiter(path, first)
        fields = first.split(delimiter) if '"' not in first else _split_quoted(first, delimiter)
        n = len(fields)
        names = [_clean_label(f) for f in fields]
        if header is None:
            header = isinstance(label_column, str) or isinstance(key_by, str)
            if not header:
                lc = _column(label_column, None, n, "label_column", default=n - 1)
                kc = None if key_by is None else _column(key_by, None, n, "key_by")
                header = looks_like_header(fields, [lc] if kc is None else [lc, kc])
        hdr = names if header else None
        lc = _column(label_column, hdr, n, "label_column", default=n - 1)
        kc = None if key_by is None else _column(key_by, hdr, n, "key_by")
        if kc == lc:
            raise ValueError("the --key-by column cannot be the label column")
        return cls("csv", delimiter, lc, kc, n, lineno if header else None)

    def parse(self, lineno: int, raw: bytes) -> tuple[str, ParsedRow | ParseError | None]:
        """``(text, row)`` for one physical line; row is None for a line without an example
        (comment, header) and a ``ParseError`` (located at ``lineno``) for a bad line."""
        raw = strip_bom(raw)
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            text = raw.decode("utf-8", errors="backslashreplace").rstrip("\r\n")
            return text, ParseError(f"undecodable bytes (not UTF-8 text at byte {e.start})",
                                    None, lineno)
        try:
            if not text.strip():
                raise ParseError("empty line")
            if self.fmt == "libsvm":
                if not text.split("#", 1)[0].strip():
                    return text, None  # comment-only line
                label, idx, vals = parse_libsvm_line(text)
                return text, ParsedRow(label, idx, vals, None)
            if lineno == self.header_line:
                return text, None
            if self.key_col is not None:
                lab, feats, key = parse_keyed_csv_fields(text, self.label_col, self.key_col,
                                                         self.delimiter, self.n_columns)
                return text, ParsedRow(lab, None, np.array(feats, dtype=np.float64), key)
            label, vals = parse_csv_line(text, self.label_col, self.delimiter,
                                         n_columns=self.n_columns)
            return text, ParsedRow(label, None, vals, None)
        except ParseError as e:
            reason = e.reason
            if "\r" in text:  # lines end only at \n: CR-only endings make one long line
                reason = ("carriage return inside the line (CR-only line endings? convert "
                          f"them to newlines): {reason}")
            return text, ParseError(reason, None, lineno)


def _column(col: int | str | None, header: list[str] | None, n: int, what: str,
            default: int | None = None) -> int:
    if col is None:
        if default is None:
            raise ValueError(f"{what} is required")
        return default
    if isinstance(col, str) and not col.lstrip("-").isdigit():
        if header is None:
            raise ValueError(f"{what} {col!r} is a name but the file has no header")
        if col not in header:
            raise ValueError(f"no column named {col!r} in the header {header}"
                             + did_you_mean(col, header))
        return header.index(col)
    c = int(col)
    if not -n <= c < n:
        raise ValueError(f"{what} {c} out of range for {n} columns")
    return c % n


def iter_parquet_rows(path: str, label_column: int | str | None = None,
                      key_by: int | str | None = None, row_groups: list[int] | None = None,
                      first_row: int = 1) -> Iterator[tuple[int, str, ParsedRow | ParseError]]:
    """``(row_number, raw_text, row | ParseError)`` of a Parquet file (or of some of its row
    groups; ``first_row`` numbers the first one). Features are every numeric column other than
    the label (default ``"label"``) and key columns, as in ``data.load``; the raw text of a bad
    row is its JSON."""
    import json

    pf, feats, label, key = _parquet_columns(path, label_column, key_by)
    cols = [*feats, label] + ([key] if key is not None else [])
    row = first_row
    batches = (pf.iter_batches(columns=cols, row_groups=row_groups) if row_groups is not None
               else pf.iter_batches(columns=cols))
    for batch in batches:
        n = batch.num_rows
        F = np.empty((n, len(feats)))
        null = np.zeros((n, len(feats)), dtype=bool)
        for j, c in enumerate(feats):
            arr = batch.column(c)
            null[:, j] = np.asarray(arr.is_null())
            F[:, j] = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        labels = batch.column(label).to_pylist()
        keys = batch.column(key).to_pylist() if key is not None else None
        for i in range(n):
            err = None
            if null[i].any():
                err = f"missing value in column {feats[int(np.argmax(null[i]))]!r}"
            elif not np.isfinite(F[i]).all():
                j = int(np.argmax(~np.isfinite(F[i])))
                err = f"non-finite value {str(float(F[i, j]))!r} in column {feats[j]!r}"
            elif labels[i] is None:
                err = f"missing value in label column {label!r}"
            elif keys is not None and (keys[i] is None or str(keys[i]).strip() == ""):
                err = f"missing key-by value (column {key!r} is null or empty)"
            if err is not None:
                rec = {c: batch.column(c)[i].as_py() for c in cols}
                yield row + i, json.dumps(rec, default=str), ParseError(err, None, row + i)
                continue
            ent = None if keys is None else str(keys[i])
            yield row + i, "", ParsedRow(str(labels[i]), None, F[i].copy(), ent)
        row += n


def _parquet_columns(path: str, label_column: int | str | None, key_by: int | str | None
                     ) -> tuple[Any, list[str], str, str | None]:
    """``(ParquetFile, feature columns, label column, key column)`` of a Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(fs.open_read(path) if fs.is_remote(path) else path)
    names = pf.schema_arrow.names
    label = _parquet_col(label_column if label_column is not None else "label", names)
    key = None if key_by is None else _parquet_col(key_by, names)

    def numeric(t: Any) -> bool:
        return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))

    feats = [c for c in names if c not in (label, key) and numeric(pf.schema_arrow.field(c).type)]
    return pf, feats, label, key


def parquet_records_json(path: str, label_column: int | str | None, key_by: int | str | None,
                         numbers: set[int]) -> dict[int, str]:
    """The raw text (JSON, as :func:`iter_parquet_rows` gives its bad rows) of the rows
    ``numbers`` (from 1) of a Parquet file: for the rows that parse but are rejected later
    (their label), read again since the reader keeps no text for its good rows."""
    import json

    pf, feats, label, key = _parquet_columns(path, label_column, key_by)
    cols = [*feats, label] + ([key] if key is not None else [])
    out: dict[int, str] = {}
    row = 1
    for batch in pf.iter_batches(columns=cols):
        for n in sorted(k for k in numbers if row <= k < row + batch.num_rows):
            i = n - row
            out[n] = json.dumps({c: batch.column(c)[i].as_py() for c in cols}, default=str)
        row += batch.num_rows
        if row > max(numbers, default=0):
            break
    return out


def _parquet_col(col: int | str, names: list[str]) -> str:
    if isinstance(col, int):
        if not -len(names) <= col < len(names):
            raise ValueError(f"column {col} out of range for {len(names)} columns")
        return names[col]
    if col not in names:
        raise ValueError(f"no column {col!r} in the Parquet file (columns: {names})"
                         + did_you_mean(col, names))
    return col


def iter_file_rows(opts: ReadOptions) -> Iterator[tuple[int, str, ParsedRow | ParseError]]:
    """Every record of the file as ``(line, raw_text, row | ParseError)``, lazily; lines
    without an example (comments, header) are left out."""
    fmt = opts.resolved_fmt()
    opts.check_format(fmt)  # an option the format would ignore is refused, not dropped
    if fmt == "parquet":
        yield from iter_parquet_rows(opts.path, opts.label_column, opts.key_by)
        return
    tf = TextFormat.detect(opts.path, fmt, opts.label_column, opts.delimiter, opts.header,
                           opts.key_by)
    with fs.open_binary(opts.path) as f:
        for lineno, raw in enumerate(iter_lines(f), 1):
            if isinstance(raw, StreamEnd):  # the rows before it are read: the rest is one record
                yield lineno, partial_text(raw), ParseError(
                    decompress_reason(raw.error, lineno - 1), None, lineno)
                return
            text, row = tf.parse(lineno, raw)
            if row is not None:
                yield lineno, text, row


def partial_text(end: StreamEnd) -> str:
    """The raw text of a compressed file's failure dead letter: its cut line, if any."""
    return strip_bom(end.partial).decode("utf-8", errors="backslashreplace")


def decompress_reason(e: BaseException, lines: int) -> str:
    """The dead-letter reason of a compressed file whose decompression fails after ``lines``
    lines: truncated ("compressed file ends early", what a cut download or a full disk
    leaves), or corrupt."""
    if isinstance(e, EOFError):
        return (f"compressed file ends early (the stream stops after line {lines}; the "
                "lines read before it are kept)")
    return f"corrupt compressed file ({e})"
