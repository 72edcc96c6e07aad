"""File access for local paths and remote URLs (``gs://``, ``s3://``, ``hdfs://``, ...).

Local paths use the standard library directly (no Beam import, no overhead). A path with a
scheme goes through Apache Beam's ``FileSystems``, which is how a pipeline on Dataflow reads
its input from and writes its outputs to Cloud Storage: any file system Beam has a plugin for
(``apache-beam[gcp]`` for ``gs://``, ``[aws]`` for ``s3://``) works the same way. Paths are
plain strings; :func:`join` builds them for both kinds.
"""

from __future__ import annotations

import lzma
import os
import re
import shutil
from collections.abc import Callable, Iterable
from typing import IO, Any

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_remote(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a URL for Beam's file systems (``file://`` counts as local)."""
    p = os.fspath(path)
    return bool(_SCHEME.match(p)) and not p.startswith("file://")


def local_path(path: str | os.PathLike[str]) -> str:
    p = os.fspath(path)
    return p[len("file://"):] if p.startswith("file://") else p


def _beam() -> Any:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def join(base: str | os.PathLike[str], *parts: str) -> str:
    b = os.fspath(base)
    if is_remote(b):
        return "/".join([b.rstrip("/"), *(p.strip("/") for p in parts)])
    return os.path.join(local_path(b), *parts)


def exists(path: str | os.PathLike[str]) -> bool:
    p = os.fspath(path)
    return bool(_beam().exists(p)) if is_remote(p) else os.path.exists(local_path(p))


def is_file(path: str | os.PathLike[str]) -> bool:
    """A readable file (remote: an existing object; object stores have no directories)."""
    p = os.fspath(path)
    return exists(p) if is_remote(p) else os.path.isfile(local_path(p))


def size(path: str | os.PathLike[str]) -> int:
    p = os.fspath(path)
    if is_remote(p):
        return int(_beam().match([p])[0].metadata_list[0].size_in_bytes)
    return os.path.getsize(local_path(p))


def makedirs(path: str | os.PathLike[str]) -> None:
    """Create a directory and its parents (remote object stores need none: no-op there)."""
    p = os.fspath(path)
    if not is_remote(p):
        os.makedirs(local_path(p), exist_ok=True)


def list_files(directory: str | os.PathLike[str], pattern: str = "*") -> list[str]:
    """The files directly in ``directory`` whose name matches the glob ``pattern``, sorted
    (``[]`` when the directory does not exist)."""
    d = os.fspath(directory)
    if is_remote(d):
        res = _beam().match([join(d, pattern)])[0]
        return sorted(m.path for m in res.metadata_list
                      if "/" not in m.path[len(d.rstrip("/")) + 1:])
    import glob

    base = local_path(d)
    return sorted(f for f in glob.glob(os.path.join(glob.escape(base), pattern))
                  if os.path.isfile(f))


def delete(paths: Iterable[str]) -> None:
    ps = list(paths)
    remote = [p for p in ps if is_remote(p)]
    if remote:
        _beam().delete(remote)
    for p in ps:
        if not is_remote(p):
            os.unlink(local_path(p))


def open_read(path: str | os.PathLike[str]) -> IO[bytes]:
    """The raw bytes of a file (no decompression), seekable."""
    p = os.fspath(path)
    if is_remote(p):
        from apache_beam.io.filesystem import CompressionTypes

        return _beam().open(p, compression_type=CompressionTypes.UNCOMPRESSED)
    return open(local_path(p), "rb")


def open_write(path: str | os.PathLike[str]) -> IO[bytes]:
    """A new file for binary writing (replaces an existing one)."""
    p = os.fspath(path)
    if is_remote(p):
        from apache_beam.io.filesystem import CompressionTypes

        return _beam().create(p, compression_type=CompressionTypes.UNCOMPRESSED)
    return open(local_path(p), "wb")


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a whole file so that readers never see half of it (local: temporary file and
    rename; remote object stores publish an object only when it is closed)."""
    p = os.fspath(path)
    if is_remote(p):
        with open_write(p) as f:
            f.write(data)
        return
    lp = local_path(p)
    tmp = lp + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    shutil.move(tmp, lp)


_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz"}
# What a decompressor raises on corrupt or truncated input (readers turn it into a located
# "corrupt compressed file" error).
DECOMPRESS_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, lzma.LZMAError)


def magic(path: str | os.PathLike[str], n: int = 6) -> bytes:
    """The first ``n`` raw (not decompressed) bytes of the file."""
    with open_read(path) as f:
        return f.read(n)


def compression(path: str | os.PathLike[str]) -> str | None:
    """``"gzip"``, ``"bz2"`` or ``"xz"`` by the file's magic bytes (not its name), else None."""
    head = magic(path)
    return next((kind for m, kind in _MAGIC.items() if head.startswith(m)), None)


def open_binary(path: str | os.PathLike[str]) -> IO[bytes]:
    """The file for binary reading, decompressed when it is gzip/bz2/xz (by magic bytes)."""
    kind = compression(path)
    if kind is None:
        return open_read(path)
    import bz2
    import gzip

    if not is_remote(path):
        opener: Callable[[str, str], IO[bytes]] = {  # type: ignore[assignment]
            "gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}[kind]
        return opener(local_path(path), "rb")
    raw = open_read(path)
    cls = {"gzip": gzip.GzipFile, "bz2": bz2.BZ2File, "xz": lzma.LZMAFile}[kind]
    return _Owning(cls(fileobj=raw) if kind == "gzip" else cls(raw), raw)  # type: ignore


def decompressing(f: Any) -> bool:
    """Whether ``f`` (from :func:`open_binary`) decompresses (its reads can fail)."""
    import bz2
    import gzip

    return isinstance(f, (gzip.GzipFile, bz2.BZ2File, lzma.LZMAFile, _Owning))


class _Owning:
    """A decompressing reader that also closes the remote file under it."""

    def __init__(self, f: Any, raw: IO[bytes]) -> None:
        self._f, self._raw = f, raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __iter__(self) -> Any:
        return iter(self._f)

    def __enter__(self) -> _Owning:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            self._raw.close()
