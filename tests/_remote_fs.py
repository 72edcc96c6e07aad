"""A Beam file system for the scheme ``kstest://`` that stores its files under a local
directory: a stand-in for ``gs://`` in tests (anything that bypasses Beam's ``FileSystems``
and calls ``open``/``os``/``pathlib`` on such a URL fails). Importing the module registers
it (Beam finds file systems as ``FileSystem`` subclasses)."""

from __future__ import annotations

import os
from typing import Any

from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.localfilesystem import LocalFileSystem

SCHEME = "kstest"
PREFIX = f"{SCHEME}://"
ROOT_ENV = "KERNELSTREAM_TEST_FS_ROOT"


def _root() -> str:
    return os.environ[ROOT_ENV]


def to_local(url: str) -> str:
    if not url.startswith(PREFIX):
        raise ValueError(f"not a {PREFIX} URL: {url!r}")
    return os.path.join(_root(), url[len(PREFIX):])


def to_url(path: str) -> str:
    return PREFIX + os.path.relpath(path, _root()).replace(os.sep, "/")


class RemoteTestFileSystem(LocalFileSystem):
    @classmethod
    def scheme(cls) -> str:
        return SCHEME

    def join(self, basepath: str, *paths: str) -> str:
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path: str) -> None:
        super().mkdirs(to_local(path))

    def has_dirs(self) -> bool:
        return False  # like an object store

    def _list(self, dir_or_prefix: str) -> Any:
        root = to_local(dir_or_prefix)
        if not os.path.exists(root):
            return
        for dirpath, _, files in os.walk(root):
            for name in files:
                f = os.path.join(dirpath, name)
                yield FileMetadata(to_url(f), os.path.getsize(f), os.path.getmtime(f))

    def _path_open(self, path: str, mode: str, mime_type: Any, compression_type: Any) -> Any:
        return super()._path_open(to_local(path), mode, mime_type, compression_type)

    def create(self, path: str, mime_type: Any = "application/octet-stream",
               compression_type: Any = CompressionTypes.AUTO) -> Any:
        os.makedirs(os.path.dirname(to_local(path)), exist_ok=True)  # objects need no dirs
        return self._path_open(path, "wb", mime_type, compression_type)

    def copy(self, src: list[str], dst: list[str]) -> None:
        super().copy([to_local(p) for p in src], [to_local(p) for p in dst])

    def rename(self, src: list[str], dst: list[str]) -> None:
        super().rename([to_local(p) for p in src], [to_local(p) for p in dst])

    # implemented on os directly: LocalFileSystem's versions call the (URL) methods above
    def exists(self, path: str) -> bool:
        return os.path.exists(to_local(path))

    def size(self, path: str) -> int:
        return os.path.getsize(to_local(path))

    def last_updated(self, path: str) -> float:
        return os.path.getmtime(to_local(path))

    def checksum(self, path: str) -> str:
        return str(self.size(path))

    def metadata(self, path: str) -> FileMetadata:
        return FileMetadata(path, self.size(path), self.last_updated(path))

    def delete(self, paths: list[str]) -> None:
        for p in paths:
            os.unlink(to_local(p))
