"""The exclusive writer lock of a checkpoint directory (``DIR/LOCK``).

It is split out of :mod:`kernelstream.engine.live.snapshot.store` because two kinds of checkpoint
use it: the stream's snapshot store and the bounded replay's checkpoints
(``kernelstream.pipelines.replay.replay``). The lock is ``fcntl.flock``: the kernel releases it when
its holder dies, even by ``kill -9``, so no stale lock survives a crash; the file's text names the
holder (pid, host, start time) for the one-line "in use" error.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Mapping
from typing import Any

LOCK = "LOCK"


class CheckpointInUse(RuntimeError):  # noqa: N818 (the name the design and CLI use)
    """Another run (or this one, opened twice) writes to the checkpoint directory."""

    def __init__(self, directory: str, holder: Mapping[str, Any] | None) -> None:
        self.directory = directory
        self.holder = dict(holder or {})
        h = self.holder
        who = ""
        if h.get("pid") is not None:
            who = f" (pid {h['pid']} on {h.get('host', '?')}, since {h.get('since', '?')})"
        super().__init__(f"checkpoint directory {directory} is in use by another run{who}; "
                         "stop it or choose another --checkpoint")


def utc_now_text() -> str:
    """Now, as the lock file and the snapshots record it (UTC, to the second)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def _holder(fd: int) -> dict[str, Any] | None:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        doc = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


class WriterLock:
    """The exclusive, non-blocking ``flock`` on ``DIR/LOCK`` (also usable by the bounded
    replay's checkpoints). Two opens in one process conflict too: flock belongs to the open
    file, not the process. A child forked while it is held shares it."""

    def __init__(self, directory: str, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: str) -> WriterLock:
        path = os.path.join(directory, LOCK)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise CheckpointInUse(directory, holder) from None
        except OSError as exc:
            os.close(fd)
            raise OSError(exc.errno, f"cannot lock {path} ({exc.strerror}): the checkpoint "
                          "directory needs a local or mounted file system with working locks"
                          ) from None
        import socket  # only to name the holder: the CLI imports this module for its errors

        try:
            text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                               "since": utc_now_text()}) + "\n"
            os.ftruncate(fd, 0)
            os.pwrite(fd, text.encode(), 0)
        except BaseException:
            os.close(fd)  # closing releases the lock
            raise
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no stale holder text once free
        finally:
            os.close(fd)  # closing the last descriptor drops the flock

