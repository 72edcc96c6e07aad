"""The label mix of a prefix against the whole file, for ``--limit N``'s warning: a file sorted
by label (cod-rna) gives a one-class prefix that nothing learns from; and the label map of a
run decided before it starts (:func:`run_positive_label`: such a prefix maps as the whole file,
a file of one string label or a ``--positive-label`` none of its labels is refused).

Only the labels are read: the first token of a LIBSVM line, the label field of a CSV line
(no feature is parsed), Parquet's label column. A file larger than :data:`FULL_PASS_BYTES`
(uncompressed) is not read whole: its mix is estimated from :data:`WINDOWS` windows spread
evenly over it, which costs the same on any size. Measured on covtype.binary (42 MB, 581k
rows): a full pass 0.35 s.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator

from kernelstream import fs
from kernelstream._suggest import did_you_mean
from kernelstream.data.labels import LabelMap, class_key, never_a_class
from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import TextFormat
from kernelstream.errors import ConfigError

FULL_PASS_BYTES = 16 << 20  # a larger file is sampled in windows
WINDOWS, WINDOW_BYTES = 64, 64 << 10  # 4 MiB read from a large file, ~50k lines
SHARE_POINTS = 10.0  # a class share that differs by more points than this is a different mix


def _label_of(line: bytes, fmt: str, delimiter: bytes, col: int) -> bytes | None:
    s = line.strip()
    if not s or s.startswith(b"#"):
        return None
    if fmt == "libsvm":
        return s.split(None, 1)[0]
    fields = s.split(delimiter)
    try:
        return fields[col].strip().strip(b'"')
    except IndexError:
        return None


def _windows(path: str) -> Iterator[bytes]:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        for i in range(WINDOWS):
            f.seek(size * i // WINDOWS)
            chunk = f.read(WINDOW_BYTES).split(b"\n")
            yield from chunk[1:-1]  # whole lines only (the first and last may be cut)


def _iter_labels(read: ReadOptions) -> Iterator[str]:
    """The raw label of every example line (a CSV's header, comments and blank lines
    skipped), in file order; Parquet's label column. Empty and non-finite labels (nan, inf)
    are left out: their rows are dead letters, never a class (``labels.never_a_class``)."""
    return (t for t in _iter_raw_labels(read) if not never_a_class(t))


def _iter_raw_labels(read: ReadOptions) -> Iterator[str]:
    fmt = read.resolved_fmt()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        name = read.label_column if isinstance(read.label_column, str) else "label"
        with fs.open_read(read.path) as fh:
            labels = pq.read_table(fh, columns=[name]).column(0).to_pylist()
        yield from (str(v) for v in labels)
        return
    delimiter, col, header = b",", -1, None
    if fmt == "csv":
        tf = TextFormat.detect(read.path, "csv", read.label_column, read.delimiter,
                               read.header, read.key_by)
        delimiter, col, header = (tf.delimiter or ",").encode(), tf.label_col, tf.header_line
    with fs.open_binary(read.path) as f, contextlib.suppress(*fs.DECOMPRESS_ERRORS):
        # (a truncated compressed file: the labels before the cut; the run dead-letters it)
        for lineno, line in enumerate(f, 1):
            lab = None if lineno == header else _label_of(line, fmt, delimiter, col)
            if lab is not None:
                yield lab.decode("utf-8", "replace")


def label_mix(read: ReadOptions, limit: int) -> tuple[Counter[str], Counter[str]] | None:
    """``(prefix, file)``: the label counts of the first ``limit`` examples and of the file
    (estimated from windows for a large file); None when not known (a Kafka topic, a Parquet
    file without its label column, an unreadable file)."""
    fmt = read.resolved_fmt()
    try:
        path = read.path
        sampled = (fmt != "parquet" and not fs.is_remote(path) and fs.compression(path) is None
                   and os.path.getsize(fs.local_path(path)) > FULL_PASS_BYTES)
        prefix: Counter[str] = Counter()
        whole: Counter[str] = Counter()
        n = 0
        for text in _iter_labels(read):
            whole[text] += 1
            if n < limit:
                prefix[text] += 1
                n += 1
            elif sampled:  # the prefix is read; the file's mix comes from windows
                break
        if sampled:
            delimiter, col = b",", -1
            if fmt == "csv":
                tf = TextFormat.detect(path, "csv", read.label_column, read.delimiter,
                                       read.header, read.key_by)
                delimiter, col = (tf.delimiter or ",").encode(), tf.label_col
            whole = Counter(s for line in _windows(path)
                            if (t := _label_of(line, fmt, delimiter, col)) is not None
                            and not never_a_class(s := t.decode("utf-8", "replace")))
    except (OSError, ValueError, KeyError, ImportError):
        return None
    return prefix, whole


def _fold(counts: Counter[str], positive: str | None) -> Counter[str]:
    """With ``--positive-label``, the classes the learners see: that label against the rest."""
    if positive is None:
        return counts
    out: Counter[str] = Counter()
    for k, v in counts.items():
        out["+1" if k == positive else "-1"] += v
    return out


def _shares(counts: Counter[str]) -> dict[str, float]:
    total = sum(counts.values()) or 1
    return {k: 100.0 * v / total for k, v in counts.items()}


def mix_warning(read: ReadOptions, limit: int) -> str | None:
    """The one-line warning when the first ``limit`` examples' label mix differs markedly
    from the file's: a class of the file absent from the prefix, or a class share off by more
    than :data:`SHARE_POINTS` points; None otherwise (and for regression, where labels are
    targets, and when the prefix is the whole file)."""
    if read.task != "classification" or read.path.startswith("kafka://"):
        return None
    found = label_mix(read, limit)
    if found is None:
        return None
    # (two classes are shown by their own names, whichever is +1)
    positive = read.positive_label if len(found[1]) > 2 else None
    prefix, whole = (_fold(c, positive) for c in found)
    if not whole or prefix == whole:  # the prefix is the whole file
        return None
    ps, ws = _shares(prefix), _shares(whole)
    absent = [k for k in ws if k not in ps]
    off = max(abs(ps.get(k, 0.0) - ws[k]) for k in ws)
    if not absent and off <= SHARE_POINTS:
        return None

    def show(s: dict[str, float]) -> str:
        top = sorted(s.items(), key=lambda kv: -kv[1])[:4]
        return ", ".join(f"{k} {v:.0f}%" for k, v in top) + (", ..." if len(s) > 4 else "")

    why = (f"class {', '.join(absent[:3])} absent" if absent
           else f"a class share {off:.0f} points off")
    return (f"--limit {limit} learns the first {sum(prefix.values()):,} rows, whose labels "
            f"({show(ps)}) differ from the file's ({show(ws)}; {why}): the file may be "
            f"sorted by label; --sample {limit} takes random rows")


def class_count(read: ReadOptions, stop: int | None = None) -> int:
    """The distinct classes (``labels.class_key``) among the labels of ``read``'s rows,
    read only until ``stop`` are seen; 0 when they cannot be read."""
    keys: set[float | str] = set()
    try:
        for tok in _iter_labels(read):
            keys.add(class_key(tok))
            if stop is not None and len(keys) >= stop:
                break
    except (OSError, ValueError, KeyError, ImportError):
        return 0
    return len(keys)


def run_positive_label(read: ReadOptions, whole_file: bool = False) -> str | None:
    """The ``positive_label`` a classification run reads ``read`` with, decided on the file's
    labels before the run (only the labels are read, and only as far as needed).

    The rows read (the first ``read.limit``, or the whole file) decide the ±1 map
    (``LabelMap.from_labels``); when they hold one class and the file two, the file's map is
    returned (its +1 class), so a prefix of a file sorted by label maps as the whole file
    does. ``whole_file``: the rows are drawn from anywhere in the file (``--sample``): the
    map is the file's when the file has two classes. A given ``positive_label`` is kept; it
    must be one of the labels of a file that has several (:class:`ConfigError`, with a "did
    you mean"). A file of one class that the map cannot place (not -1, 0 or 1) is a
    :class:`ConfigError` naming it and ``--positive-label``. Regression, Kafka topics and
    unreadable files (the run's own checks report them): ``read.positive_label``."""
    given = read.positive_label
    if read.task != "classification" or read.path.startswith("kafka://"):
        return given
    pos_key = None if given is None else class_key(given)
    rows = None if whole_file else read.limit  # the rows the run maps: the first `rows`
    seen: dict[float | str, str] = {}  # the file's classes, first spelling, in file order
    in_rows: set[float | str] = set()
    try:
        for i, tok in enumerate(_iter_labels(read)):
            k = class_key(tok)
            seen.setdefault(k, tok.strip())
            if pos_key is not None:
                if k == pos_key:
                    if len(seen) <= 2:
                        return given  # one of the file's labels
                    break  # a later class: the run maps the first two classes only (below)
                continue
            if rows is None or i < rows:
                in_rows.add(k)
            if not whole_file and (len(in_rows) >= 2 or (len(seen) >= 2 and rows is None)):
                return None  # the rows read hold two classes: their own map is the file's
            if not whole_file and len(seen) >= 2:  # one class in the rows, two in the file
                return LabelMap.from_labels(list(seen.values())[:2]).positive
            if whole_file and len(seen) > 2:
                return None  # more classes than a map takes: the rows' own first two
    except (OSError, ValueError, KeyError, ImportError):
        return given  # the run's own checks say what is wrong with the file
    classes = list(seen.values())
    if pos_key is not None and pos_key in seen:  # (ConfigError is a ValueError: out here)
        a, b = classes[:2]
        raise ConfigError(
            f"--positive-label {given!r} is the file's third label, after {a!r} and {b!r}: a "
            "run maps the first two labels it reads (and sends rows of any other label to "
            "dead letters), so it cannot map this one")
    if given is not None:
        if len(classes) < 2:
            return given  # a file of one class: the label names the other side
        shown = ", ".join(repr(c) for c in classes[:5]) + (", ..." if len(classes) > 5 else "")
        raise ConfigError(f"--positive-label {given!r} is not among the file's labels: "
                          f"{shown}{did_you_mean(given, classes)}")
    if len(classes) == 2:  # --sample: the file's map, whichever classes the draw holds
        return LabelMap.from_labels(classes).positive
    if len(classes) == 1 and class_key(classes[0]) not in (-1.0, 0.0, 1.0):
        (only,) = classes
        raise ConfigError(f"{read.path}: only one label ({only!r}) in the file: cannot tell "
                          "whether it is the positive or the negative class; give "
                          f"--positive-label {only} if it is the positive one, else the other "
                          "class's label")
    return None
