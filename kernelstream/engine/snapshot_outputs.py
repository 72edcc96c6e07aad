"""Output files that become visible only with a committed snapshot, and the bounded replay's
orphaned ``--follow`` output folders.

A stream's writers stage each epoch's rows in ``OUT/<output>/.pending/`` (:func:`pending_path`)
and :func:`publish` renames them into place once that epoch is committed, so a reader never
sees rows of a snapshot that a crash undid. :func:`remove_orphans` is the replay's counterpart
(folders of runs whose checkpoint never committed). These are file-naming rules around the
snapshot store rather than part of it, hence their own module; like the store they need a
local or mounted file system.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from typing import NamedTuple

from kernelstream import fs
from kernelstream.engine.snapshot_files import fsync_dir, local_dir

_PENDING = ".pending"
_PENDING_NAME = re.compile(r"^e(\d{7,})-(.+)$")


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
            fsync_dir(odir)
    return Published(published, removed)


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
