"""What an output folder (``--out`` of ``replay``, ``tune``, ``stream`` and ``demo``) may be.

A folder is a *kernelstream run folder* when it holds :data:`MARKER`, ``.kernelstream-run``: a
small JSON file (the command, the version, when it started, the ``--checkpoint`` it continues)
that every run writes into its folder before anything else. Folders written before the
marker existed are recognised by a ``summary.json``, ``tuned.json`` or ``submitted.json``
whose JSON names a ``kernelstream_version``.

:func:`claim` applies the rules, each refusal one line (exit 2 at the command line):

- a folder that does not exist, or is empty: used (the marker is written);
- a folder that holds anything else than a kernelstream run: refused, with or without
  ``--overwrite`` (which never removes what kernelstream did not write);
- a run that stopped before it wrote anything (only the marker, ``--sample``'s rows): used;
- a previous run: refused unless ``--overwrite``, which first removes what a run writes
  there (:data:`RUN_ENTRIES`: the output folders, ``summary.json``, ``tuned.json``/``.md``,
  ``submitted.json``, ``--follow``'s ``ckpt-NNNNNN/``, the stream's control folders, the
  demo's ``checkpoint/``, the marker) and keeps anything else; a file in its output folders
  that no run writes (``predictions/notes.txt``) is refused, not deleted with them;
- the continuation of the same run: used as it is. A ``--checkpoint`` run (``stream``,
  ``replay`` on a topic) continues the run whose marker names the same checkpoint folder
  (a stream restarted after a crash, a ``--follow`` started again). A topic replay that
  resumes a checkpoint whose run wrote this folder is refused (``commands._runs``): each
  checkpointed run writes its own folder, and clearing it would lose those outputs.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kernelstream import __version__, fs
from kernelstream.engine.replay.outputs import EMPTY  # an output folder with no rows yet
from kernelstream.errors import OutFolderError

MARKER = ".kernelstream-run"

# What runs write into their folder (file or folder names, glob patterns): all that
# --overwrite removes. The outputs of a replay (predictions, metrics, dead_letters) and of a
# stream (also outcomes, unlabeled), the documents, --follow's per-run folders, the stream's
# control folders, the demo's checkpoint, --sample's rows.
RUN_ENTRIES = ("predictions", "metrics", "dead_letters", "outcomes", "unlabeled",
               "summary.json", "tuned.json", "tuned.md", "submitted.json", "ckpt-[0-9]*",
               ".run-*", "checkpoint", ".sample", MARKER)
# The output folders among them, and the files runs write into those (Parquet parts, their
# writers' hidden temporary files): anything else there is the user's, and --overwrite,
# which removes those folders whole, refuses rather than delete it.
OUTPUT_DIRS = ("predictions", "metrics", "dead_letters", "outcomes", "unlabeled")
OUTPUT_FILES = ("part-*.parquet", ".*")
# the documents a run of an earlier version (no marker) is recognised by
_LEGACY_DOCS = ("summary.json", "tuned.json", "submitted.json")


@dataclass(frozen=True)
class Folder:
    """What :func:`inspect` found: ``entries`` (names directly in the folder, sorted) and
    ``run`` (the marker's document, or the legacy document's; None: no kernelstream run)."""

    path: str
    entries: tuple[str, ...]
    run: dict[str, Any] | None

    @property
    def empty(self) -> bool:
        return not self.entries


def _entries(out: str) -> list[str]:
    """The names directly in ``out`` (remote: the first path part of every object under
    it); ``[]`` when it does not exist."""
    if fs.is_remote(out):
        from apache_beam.io.filesystems import FileSystems

        base = out.rstrip("/") + "/"
        try:
            found = FileSystems.match([base + "**"])[0].metadata_list
        except Exception:  # Beam raises its own errors for a missing prefix
            return []
        return sorted({m.path[len(base):].split("/", 1)[0] for m in found} - {""})
    p = fs.local_path(out)
    if not os.path.exists(p):
        return []
    if not os.path.isdir(p):
        raise OutFolderError(f"--out {out} is a file, not a folder")
    return sorted(os.listdir(p))


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with fs.open_read(path) as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def inspect(out: str, ignore: Iterable[str] = ()) -> Folder:
    """What ``out`` holds (``ignore``: names not counted, e.g. a checkpoint folder this run
    has just made inside it)."""
    skip = set(ignore)
    entries = tuple(e for e in _entries(out) if e not in skip)
    run = None
    if MARKER in entries:
        run = _read_json(fs.join(out, MARKER)) or {"command": "?"}
    else:
        for name in _LEGACY_DOCS:
            if name in entries:
                doc = _read_json(fs.join(out, name))
                if doc is not None and "kernelstream_version" in doc:
                    run = {"command": {"tuned.json": "tune"}.get(name, "replay"),
                           "created": None, "legacy": name}
                    break
    return Folder(out, entries, run)


def same_path(a: str | None, b: str | None) -> bool:
    """Whether ``a`` and ``b`` name the same folder (local: after links)."""
    if a is None or b is None:
        return False
    if fs.is_remote(a) or fs.is_remote(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def entry_within(out: str, path: str | None) -> tuple[str, ...]:
    """The name in ``out`` under which ``path`` lies (a checkpoint folder kept inside the
    output folder), as a 1-tuple; ``()`` when it lies elsewhere."""
    if path is None or fs.is_remote(out) or fs.is_remote(path):
        return ()
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(fs.local_path(out)))
    first = rel.split(os.sep, 1)[0]
    return () if first in (os.curdir, os.pardir) or os.path.isabs(rel) else (first,)


def continues(folder: Folder, checkpoint: str | None) -> bool:
    """Whether a run with ``--checkpoint checkpoint`` continues the run in ``folder``: its
    marker names the same checkpoint folder."""
    return (checkpoint is not None and folder.run is not None
            and same_path(folder.run.get("checkpoint"), checkpoint))


# what a run writes before its data is checked: a folder holding only these is a run that
# stopped at its start (a typo in the data's name), reused without --overwrite
_STARTED_ONLY = (MARKER, ".sample", ".run-*")




def _nothing_written(folder: Folder) -> bool:
    return folder.run is not None and all(
        any(fnmatch.fnmatchcase(e, pat) for pat in _STARTED_ONLY) or _empty_output(folder, e)
        for e in folder.entries)


def _empty_output(folder: Folder, entry: str) -> bool:
    """Whether ``entry`` is an output folder holding nothing but its empty schema file (a
    stream writes those at its start)."""
    if fs.is_remote(folder.path):
        return False
    path = os.path.join(fs.local_path(folder.path), entry)
    return os.path.isdir(path) and os.listdir(path) == [EMPTY]


def check(out: str, *, overwrite: bool, continuing: bool = False,
          ignore: Iterable[str] = ()) -> Folder:
    """The rules of the module docstring, without changing anything: raises
    :class:`OutFolderError` (one line) where ``out`` may not be used; returns what it holds."""
    folder = inspect(out, ignore)
    if folder.empty or continuing or _nothing_written(folder):
        return folder
    if folder.run is None:
        shown = ", ".join(folder.entries[:3]) + (", ..." if len(folder.entries) > 3 else "")
        raise OutFolderError(
            f"--out {out} is not empty ({shown}) and holds no kernelstream run (no {MARKER} "
            "or summary.json): choose a new or empty folder"
            + (" (--overwrite only replaces a previous kernelstream run)" if overwrite else ""))
    if not overwrite:
        run = folder.run
        when = f" of {run['created']}" if run.get("created") else ""
        raise OutFolderError(
            f"--out {out} holds a previous kernelstream {run.get('command', '?')} run{when}: "
            "add --overwrite to replace it, or choose another folder")
    foreign = _foreign_files(folder)
    if foreign:
        raise OutFolderError(
            f"--out {out}: {foreign[0]} was not written by kernelstream, and --overwrite would "
            "delete it with the previous run's outputs: move it out of the folder first")
    return folder


def _foreign_files(folder: Folder) -> list[str]:
    """Files in a run's local output folders (:data:`OUTPUT_DIRS`) that no run writes
    (:data:`OUTPUT_FILES`), as ``predictions/notes.txt``."""
    if fs.is_remote(folder.path):
        return []  # a bucket's listing is the run's own writers'; not checked
    root = fs.local_path(folder.path)
    found = []
    for name in folder.entries:
        path = os.path.join(root, name)
        if name not in OUTPUT_DIRS or not os.path.isdir(path) or os.path.islink(path):
            continue
        found += [f"{name}/{e}" for e in sorted(os.listdir(path))
                  if not any(fnmatch.fnmatchcase(e, pat) for pat in OUTPUT_FILES)]
    return found


def remove_previous(folder: Folder, keep: Iterable[str] = ()) -> list[str]:
    """Remove the :data:`RUN_ENTRIES` of a previous run from its folder (not ``keep``);
    returns the names removed. Anything else in the folder stays."""
    spared = set(keep)
    gone = [e for e in folder.entries if e not in spared
            and any(fnmatch.fnmatchcase(e, pat) for pat in RUN_ENTRIES)]
    for name in gone:
        path = fs.join(folder.path, name)
        if fs.is_remote(path):
            from apache_beam.io.filesystems import FileSystems

            found = FileSystems.match([path, path.rstrip("/") + "/**"])
            fs.delete(sorted({m.path for r in found for m in r.metadata_list}))
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    return gone


def write_marker(out: str, command: str, checkpoint: str | None = None,
                 argv: Iterable[str] = ()) -> None:
    """Mark ``out`` as a kernelstream run folder (made if missing)."""
    fs.makedirs(out)
    doc = {"command": command, "kernelstream_version": __version__,
           "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "checkpoint": (None if checkpoint is None else
                          checkpoint if fs.is_remote(checkpoint)
                          else os.path.realpath(checkpoint)),
           "argv": list(argv)}
    fs.write_bytes_atomic(fs.join(out, MARKER), (json.dumps(doc, indent=2) + "\n").encode())


def release(out: str, made: bool) -> None:
    """Undo the :func:`claim` of a folder that was empty (``made``: that did not exist), for
    a run refused before it wrote anything (its data check): the marker and what the start
    wrote (``--sample``'s rows) are removed, and a folder the claim made too, so that a
    refusal leaves the folder as it was."""
    with contextlib.suppress(OSError, OutFolderError):
        remove_previous(inspect(out))
        if made and not fs.is_remote(out):
            os.rmdir(fs.local_path(out))  # only if empty: what another process put there stays


def claim(out: str, command: str, *, overwrite: bool, checkpoint: str | None = None,
          resumes: bool = False, argv: Iterable[str] = (), ignore: Iterable[str] = (),
          continuing: bool | None = None, dry: bool = False) -> list[str]:
    """Check ``out`` (:func:`check`), remove a previous run with ``overwrite``, and write this
    run's marker; returns the names removed (``dry``: only check, change nothing). Raises
    :class:`OutFolderError`.

    ``continuing``: whether this run continues the one in ``out`` (default: :func:`continues`,
    by the marker's checkpoint); ``resumes``: whether its checkpoint holds a state to resume
    from. ``overwrite`` on a run that resumes is refused (the outputs are committed with the
    checkpoint's states); on one with nothing to resume it starts the folder over.
    ``ignore``: names in ``out`` neither counted nor removed (the run's own checkpoint)."""
    skip = tuple(ignore)
    folder = inspect(out, skip)
    if continuing is None:
        continuing = continues(folder, checkpoint)
    if continuing and overwrite:
        if resumes:
            raise OutFolderError(
                f"--overwrite starts the run in --out {out} over, but --checkpoint "
                f"{checkpoint} continues it: drop --overwrite, or give a new --checkpoint")
        continuing = False  # nothing to resume: start over
    check(out, overwrite=overwrite, continuing=continuing, ignore=skip)
    if dry:
        return []
    removed = []
    if folder.run is not None and overwrite:
        removed = remove_previous(folder, keep=skip)
    if not continuing or MARKER not in folder.entries:
        write_marker(out, command, checkpoint, argv)
    return removed
