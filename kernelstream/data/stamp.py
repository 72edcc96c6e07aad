"""A run's input file must not change while the run reads it: the run records its size and
modification time when it starts (:func:`run_stamp`, in ``ReadOptions.stamp``) and every reader
of the run checks them when it has read the file (:func:`check_unchanged`, one ``stat``), so a
file still being written fails the run with one line instead of giving readers (Dask tasks,
``--workers`` processes, the two passes of the chunked reader) different rows."""

from __future__ import annotations

import os

from kernelstream import fs
from kernelstream.errors import FileChangedError

# ``replay --workers``: the parent's stamp of the input, for the workers it starts
# ("PATH\tSIZE\tMTIME_NS"), so that every worker checks against the run's start
STAMP_ENV = "KERNELSTREAM_INPUT_STAMP"

Stamp = tuple[int, int]


def file_stamp(path: str) -> Stamp | None:
    """``(size, mtime_ns)`` of a local file now; None for a remote or missing one."""
    if fs.is_remote(path):
        return None
    try:
        st = os.stat(fs.local_path(path))
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def run_stamp(path: str) -> Stamp | None:
    """The stamp of ``path`` at the run's start: the one the parent process of ``--workers``
    recorded (:data:`STAMP_ENV`), else the file's now."""
    given = os.environ.get(STAMP_ENV, "")
    if given:
        where, size, mtime = given.rsplit("\t", 2)
        if where == os.path.abspath(fs.local_path(path)):
            return int(size), int(mtime)
    return file_stamp(path)


def stamp_env(path: str) -> dict[str, str]:
    """The environment entry that hands :func:`run_stamp` of ``path`` to worker processes."""
    st = run_stamp(path)
    if st is None:
        return {}
    return {STAMP_ENV: f"{os.path.abspath(fs.local_path(path))}\t{st[0]}\t{st[1]}"}


def check_unchanged(path: str, stamp: Stamp | None) -> None:
    """Raise :class:`FileChangedError` when ``path`` no longer has the run's ``stamp``."""
    if stamp is None:
        return
    now = file_stamp(path)
    if now != stamp:
        size = "gone" if now is None else str(now[0])
        raise FileChangedError(f"{path} changed while the run read it (size {stamp[0]} -> {size}): "
                          "replay a file that is not being written")
