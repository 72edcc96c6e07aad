"""Output files that become visible only with a committed snapshot, and the bounded replay's
orphaned ``--follow`` output folders.

A stream's writers stage each epoch's rows in ``OUT/<output>/.pending/`` (:func:`pending_path`),
:func:`seal` proves them whole and durable before the epoch commits, and :func:`publish` renames
them into place once it is committed, so a reader never sees rows of a snapshot that a crash
undid, nor a file that a full disk cut short. :func:`check_published` finds, at start, a
published file that is unreadable all the same (a crash of an older version, a damaged disk).
:func:`remove_orphans` is the replay's counterpart
(folders of runs whose checkpoint never committed). These are file-naming rules around the
snapshot store rather than part of it, hence their own module; like the store they need a
local or mounted file system.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterable
from typing import Any, NamedTuple

from kernelstream import fs
from kernelstream.engine.live.snapshot.files import fsync_dir, local_dir
from kernelstream.engine.replay.outputs import EMPTY, ensure_nonempty

_PENDING = ".pending"
_PENDING_NAME = re.compile(r"^e(\d{7,})-(.+)$")


_MAGIC = b"PAR1"


class UnreadableOutputError(RuntimeError):
    """An output file that does not read back whole (see :func:`seal`,
    :func:`check_published`); the message names the file."""


class Published(NamedTuple):
    published: int  # pending files of committed epochs renamed into place
    removed: int  # pending files of uncommitted epochs deleted


def pending_path(out_dir: str | os.PathLike[str], output: str, epoch: int, part: str,
                 suffix: str = ".parquet") -> str:
    """Where a writer stages ``output``'s rows of ``epoch`` (``OUT/<output>/.pending/
    e0000007-<part>.parquet``; the ``.pending`` folder is created). ``part`` tells the
    writer's files of one epoch apart."""
    if not part or "/" in part or "/" in output or "/" in suffix:
        raise ValueError(f"bad output file part: output={output!r} part={part!r}")
    if epoch < 1:
        raise ValueError(f"epoch must be >= 1, got {epoch}")
    d = os.path.join(local_dir(out_dir), output, _PENDING)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"e{epoch:07d}-{part}{suffix}")


def published_path(out_dir: str | os.PathLike[str], output: str, epoch: int, part: str,
                   suffix: str = ".parquet") -> str:
    """The name a pending file gets once its epoch is committed (``OUT/<output>/
    part-e0000007-<part>.parquet``)."""
    return os.path.join(local_dir(out_dir), output, f"part-e{epoch:07d}-{part}{suffix}")


def publish(out_dir: str | os.PathLike[str], outputs: Iterable[str] | None, head: int | None,
            *, remove_uncommitted: bool = True) -> Published:
    """Publish the pending files of epochs <= ``head`` (rename into ``OUT/<output>/``) and
    delete those of later epochs, which a crash left uncommitted. Call it after each commit
    (with ``remove_uncommitted=False`` while the next epoch's files are already open) and on
    start, where it rolls a commit forward whose publishing a crash cut short. Idempotent.
    ``outputs`` None: every folder of ``out_dir`` with pending files."""
    root = local_dir(out_dir)
    if outputs is None:
        try:
            outputs = sorted(n for n in os.listdir(root)
                             if os.path.isdir(os.path.join(root, n, _PENDING)))
        except FileNotFoundError:
            outputs = []
    published = removed = 0
    for output in outputs:
        odir = os.path.join(root, output)
        pdir = os.path.join(odir, _PENDING)
        try:
            names = sorted(os.listdir(pdir))
        except FileNotFoundError:
            continue
        moved = False
        for name in names:
            m = _PENDING_NAME.match(name)
            if m is None:
                continue
            src = os.path.join(pdir, name)
            if head is not None and int(m.group(1)) <= head:
                os.replace(src, os.path.join(odir, f"part-{name}"))
                published += 1
                moved = True
            elif remove_uncommitted:
                os.unlink(src)
                removed += 1
        if moved:  # the renames survive a power cut (else the next start redoes them)
            with contextlib.suppress(FileNotFoundError):  # rows now carry the schema
                os.unlink(os.path.join(odir, EMPTY))
            fsync_dir(odir)
    return Published(published, removed)


def seal(path: str, rows: int) -> None:
    """Before an epoch commits: its pending file ``path`` (closed; ``rows`` were handed to
    its writer) fsynced and read back (the Parquet footer, and its row count), then its
    folder's entries fsynced. A write the disk refused or cut short fails here
    (:class:`UnreadableOutputError`, ``OSError``), so the commit never happens. Two fsyncs a
    file, on the commit thread: ~45 ms for an epoch's five files on a VM's disk (measured; the
    snapshot's own commit ~35 ms), of which reading the footers back ~3 ms."""
    import pyarrow.parquet as pq

    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        n = pq.read_metadata(path).num_rows
    except ValueError as exc:  # pyarrow's ArrowInvalid: no footer, bad magic, ...
        raise UnreadableOutputError(f"it does not read back ({exc})") from None
    if n != rows:
        raise UnreadableOutputError(f"it reads back {n} rows, {rows} were written to it")
    fsync_dir(os.path.dirname(path))


def parquet_damage(path: str) -> str | None:
    """Why ``path`` is not a whole Parquet file (None: it looks whole). Reads 12 bytes, not
    the footer (~15 us, against ~100 us for its metadata): a file cut short ends mid-data,
    where the footer's length and magic are not."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < 12:
            return f"{size} bytes, too short for a Parquet file"
        head, tail = os.pread(fd, 4, 0), os.pread(fd, 8, size - 8)
    finally:
        os.close(fd)
    footer = int.from_bytes(tail[:4], "little")
    if head != _MAGIC or tail[4:] != _MAGIC or footer > size - 12:
        return f"{size} bytes, no Parquet footer (cut short)"
    return None


def check_published(out_dir: str | os.PathLike[str], outputs: Iterable[str]) -> int:
    """Raise :class:`UnreadableOutputError` naming the first published file of ``outputs`` that is
    not whole (:func:`parquet_damage`); the number of files checked. Files are published
    only after :func:`seal`, so this finds what a crash or a bug of an older version, or a
    damaged disk, left: rows of a committed epoch, which the snapshot cannot make again (its
    models have learnt past them, and older snapshots are pruned)."""
    root = local_dir(out_dir)
    n = 0
    for output in outputs:
        odir = os.path.join(root, output)
        try:
            names = sorted(os.listdir(odir))
        except FileNotFoundError:
            continue
        for name in names:
            if not (name.startswith("part-") and name.endswith(".parquet")):
                continue
            path = os.path.join(odir, name)
            why = parquet_damage(path)
            if why is not None:
                raise UnreadableOutputError(f"{path} is unreadable ({why})")
            n += 1
    return n


def ensure_schemas(out_dir: str | os.PathLike[str], schemas: dict[str, Any]) -> list[str]:
    """Give every output folder of ``schemas`` (name -> pyarrow schema) that holds no
    published file an empty one of its schema (:data:`EMPTY`), as a replay does, so a
    reader finds every folder and its columns whether or not rows came (:func:`publish`
    removes it with the folder's first rows): the replay's
    :func:`~kernelstream.engine.replay.outputs.ensure_nonempty` on each (written to a
    temporary name and renamed: a crash never leaves a cut one). The names written."""
    root = local_dir(out_dir)
    return [output for output, schema in schemas.items()
            if ensure_nonempty(os.path.join(root, output), schema)]


# -- the bounded replay's --follow outputs ---------------------------------------------------

_RUN_DIR = re.compile(r"^ckpt-(\d{6,})$")


def remove_orphans(out_dir: str | os.PathLike[str], committed: Iterable[int]) -> list[str]:
    """Delete the output folders ``OUT/ckpt-NNNNNN/`` of ``replay --follow`` runs whose
    checkpoint never committed; the deleted paths. ``committed``: the numbers of the
    checkpoints still committed in the checkpoint directory.

    A folder is an orphan when its number is not committed and above the oldest committed
    one (with none committed: every folder). Folders below the oldest kept checkpoint stay:
    pruning removed the record of whether they committed. Calling this before every run,
    while holding the checkpoint directory's
    :class:`~kernelstream.engine.writer_lock.WriterLock`, therefore removes every
    orphan, and before a failed run's number is used again. Local paths only."""
    if fs.is_remote(os.fspath(out_dir)):
        raise ValueError(f"{os.fspath(out_dir)}: orphan removal needs a local or mounted "
                         "file system")
    root = fs.local_path(os.fspath(out_dir))
    done = set(committed)
    floor = min(done, default=0)
    removed = []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    for name in names:
        m = _RUN_DIR.match(name)
        path = os.path.join(root, name)
        if m is None or not os.path.isdir(path):
            continue
        n = int(m.group(1))
        if n not in done and n > floor:
            shutil.rmtree(path)
            removed.append(path)
    return removed
