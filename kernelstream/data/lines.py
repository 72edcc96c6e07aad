"""Raw lines and blocks of whole lines of a (decompressed) file, for the readers of every text
format. A UTF-8 byte-order mark at the start of a line (editors put one at the start of a file;
concatenated files have one further down) is dropped here, before any parsing, so it can never
become part of a label or a header name."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import IO

import numpy as np

from kernelstream import fs
from kernelstream.data.errors import (
    ParseError,
    PathLike,
)

BOM = b"\xef\xbb\xbf"
_NL_BOM = b"\n" + BOM


def strip_bom(raw: bytes) -> bytes:
    """``raw`` (one line) without a leading UTF-8 byte-order mark."""
    return raw[3:] if raw[:3] == BOM else raw


def strip_boms(block: bytes) -> bytes:
    """``block`` (whole lines) without the byte-order marks that start any of its lines."""
    if BOM not in block:  # the common case: one fast scan, no copy
        return block
    return strip_bom(block).replace(_NL_BOM, b"\n")


def _read_bytes(path: PathLike, f: IO[bytes], size: int = -1) -> bytes:
    try:
        return f.read(size)
    except fs.DECOMPRESS_ERRORS as e:
        raise ParseError(f"corrupt compressed file ({e})", os.fspath(path)) from e


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
    with fs.open_binary(path) as f:
        try:
            for raw in f:
                lineno += 1
                yield lineno, strip_bom(raw)
        except fs.DECOMPRESS_ERRORS as e:
            yield lineno + 1, ParseError(f"corrupt compressed file ({e})", os.fspath(path))


def _iter_line_blocks(path: PathLike, limit: int | None, size: int) -> Generator[bytes]:
    """The decompressed file as consecutive blocks of whole lines of about ``size`` bytes
    (longer when one line is). Every block but the last ends with a newline, so the line
    numbers of a block start after the newlines of the blocks before it.

    With ``limit``, stops after the ``limit``-th LIBSVM data line (blank and comment-only
    lines do not count) and reads nothing beyond it. A decompression error raises
    :class:`ParseError` ("corrupt compressed file") when the read reaches it.
    """
    with fs.open_binary(path) as f:
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
                yield strip_boms(head)
            if pending:
                yield strip_boms(b"".join(pending))
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
                    yield strip_boms(b"".join(out))
                    out, nbytes = [], 0
        except fs.DECOMPRESS_ERRORS as e:
            raise ParseError(f"corrupt compressed file ({e})", os.fspath(path)) from e
        if out:
            yield strip_boms(b"".join(out))


def _grow_rows(X: np.ndarray, n: int) -> None:
    """Resize ``X`` in place to ``n`` rows (new rows are zero).

    ``ndarray.resize`` reallocates; for large arrays (mmap'ed by glibc) that remaps pages
    instead of copying, so growing X block by block never holds two copies of it. ``X`` must
    have no views (hence refcheck=False is safe: the callers keep none).
    """
    X.resize((n, X.shape[1]), refcheck=False)

