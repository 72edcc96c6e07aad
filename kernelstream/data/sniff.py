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


def _first_data_line(path: PathLike) -> str | None:
    """The first non-blank line (decoded leniently), for format and delimiter sniffing."""
    with fs.open_binary(path) as f:
        with contextlib.suppress(*fs.DECOMPRESS_ERRORS):
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
    if fs.magic(path).startswith(_PARQUET_MAGIC):
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

