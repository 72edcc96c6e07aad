"""Raw lines and blocks of whole lines of a (decompressed) file, for the readers of every text
format. A UTF-8 byte-order mark at the start of a line (editors put one at the start of a file;
concatenated files have one further down) is dropped here, before any parsing, so it can never
become part of a label or a header name."""

from __future__ import annotations

import io
import os
from collections.abc import Generator, Iterator
from typing import IO, Any, NamedTuple

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


class StreamEnd(NamedTuple):
    """The end of a compressed file whose decompression fails: the error, and the bytes of
    the line it cuts (a truncated stream; empty when the cut falls after a newline)."""

    error: BaseException
    partial: bytes


class _ErrorIsEnd(io.RawIOBase):
    """A decompressing file whose read error is an end of file (kept in ``error``): a
    buffered reader over it hands out every byte decompressed before the error, where
    iterating the decompressing file itself drops its buffered last line."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self.error: BaseException | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self.error is not None:
            return 0
        try:
            data = self._f.read1(len(b))  # one read: nothing decompressed is held back
        except fs.DECOMPRESS_ERRORS as e:
            self.error = e
            return 0
        b[: len(data)] = data
        return len(data)


def iter_lines(f: IO[bytes]) -> Iterator[bytes | StreamEnd]:
    """The raw lines of ``f`` (from :func:`fs.open_binary`). A compressed file whose
    decompression fails ends with a :class:`StreamEnd` instead of raising: after trailing
    garbage or a bad checksum, every line before it is yielded (the last one too when it has
    no newline, as when it has one); a truncated stream's cut last line is the StreamEnd's
    ``partial``. Plain files are iterated directly (the fast path)."""
    if not fs.decompressing(f):
        yield from f
        return
    src = _ErrorIsEnd(f)
    last = b""  # only the last line can lack a newline
    for raw in io.BufferedReader(src, 1 << 16):
        if not raw.endswith(b"\n"):
            last = raw
            break
        yield raw
    if last and not isinstance(src.error, EOFError):  # a whole line: garbage comes after it
        yield last
        last = b""
    if src.error is not None:
        yield StreamEnd(src.error, last)


def _iter_raw_lines(path: PathLike) -> Iterator[tuple[int, bytes | ParseError]]:
    """``(line_number, raw_bytes)`` lazily; a decompression failure ends the stream with a
    ``ParseError`` item instead of raising."""
    lineno = 0
    with fs.open_binary(path) as f:
        for raw in iter_lines(f):
            lineno += 1
            if isinstance(raw, StreamEnd):
                yield lineno, ParseError(f"corrupt compressed file ({raw.error})",
                                         os.fspath(path))
                return
            yield lineno, strip_bom(raw)


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

