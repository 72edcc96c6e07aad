"""The one sniffer: format (by name, then content), CSV delimiter and header row."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from kernelstream import fs
from kernelstream.data.errors import (
    Format,
    PathLike,
)
from kernelstream.data.lines import strip_bom

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


def first_data_line(path: PathLike) -> tuple[int, str] | None:
    """``(line_number, text)`` of the first non-blank line (decoded leniently, without its line
    ending and byte-order mark), for format, delimiter and header sniffing."""
    with fs.open_binary(path) as f:
        with contextlib.suppress(*fs.DECOMPRESS_ERRORS):
            for lineno, raw in enumerate(f, 1):
                text = strip_bom(raw).decode("utf-8", errors="replace").rstrip("\r\n")
                if text.strip():
                    return lineno, text
    return None


def _first_data_line(path: PathLike) -> str | None:
    """The first non-blank line, stripped."""
    first = first_data_line(path)
    return None if first is None else first[1].strip()


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
    if fs.magic(path).startswith(_PARQUET_MAGIC):
        return "parquet"
    first = _first_data_line(path)
    if first is None:
        return "libsvm"
    toks = first.split("#", 1)[0].split()
    if len(toks) > 1 and ":" in toks[1]:
        return "libsvm"
    if any(d in first for d in DELIMITERS):
        return "csv"
    return "libsvm"


DELIMITERS = (",", "\t", ";")


def sniff_delimiter(path: PathLike, first: str | None = None) -> str | None:
    """The CSV delimiter: tab for a ``.tsv`` name, else the first of comma, tab, semicolon
    found in the first data line (``first``, read from the file when not given), else None
    (runs of whitespace)."""
    if Path(_strip_compression_suffix(Path(path).name)).suffix.lower() == ".tsv":
        return "\t"
    if first is None:
        first = _first_data_line(path) or ""
    return next((d for d in DELIMITERS if d in first), None)


_sniff_delimiter = sniff_delimiter


def _is_number(s: str) -> bool:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] == '"':  # a quoted number ("1.5") is a number
        s = s[1:-1]
    try:
        float(s)
    except ValueError:
        return False
    return True


def looks_like_header(fields: Sequence[str], skip: Sequence[int]) -> bool:
    """True when the row has feature fields and none of them parses as a number. The fields at
    the 0-based positions ``skip`` (label, key) are not looked at: a label such as ``g`` must
    not make a data row look like a header."""
    n = len(fields)
    keep = {c % n for c in skip if -n <= c < n}
    feats = [f for i, f in enumerate(fields) if i not in keep]
    return bool(feats) and not any(_is_number(f) for f in feats)


def _looks_like_header(fields: Sequence[str], label_column: int) -> bool:
    """True when no feature field parses as a number (the label field is ignored)."""
    n = len(fields)
    if not -n <= label_column < n:
        return False
    return looks_like_header(fields, [label_column])

