"""Which column of a CSV file looks like its label, or keeps its rows from being read, when a
run's verdict (:func:`kernelstream.data.check.diagnose`) says the rows cannot be learnt: the
fix is then often ``--label-column``, which the verdict alone never named.

Read on the error path only: the first :data:`HEAD_LINES` lines, split as the reader splits
them. Columns are counted from 0, as ``--label-column`` counts them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kernelstream.data.csv import _split_quoted
from kernelstream.data.labels import class_key
from kernelstream.data.lines import _decode_line, _iter_raw_lines
from kernelstream.data.options import ReadOptions
from kernelstream.data.sniff import _is_number, _looks_like_header, sniff_delimiter

HEAD_LINES = 1000
# header names that say "this is the label" (lowercase, quotes stripped)
LABEL_NAMES = frozenset({"label", "labels", "target", "class", "y", "outcome"})


def _lines(path: str) -> Iterator[str]:
    n = 0
    for _, raw in _iter_raw_lines(path):
        if isinstance(raw, Exception):
            return
        text, err = _decode_line(raw)
        if err is None and text.strip():
            yield text
            n += 1
            if n >= HEAD_LINES:
                return


def _head(opts: ReadOptions) -> tuple[list[str] | None, list[list[str]], int] | None:
    """``(header fields or None, data rows of the first row's width, label position)`` of the
    file's first lines as the CSV reader would take them; None when there is nothing to say."""
    lines = list(_lines(opts.path))
    if not lines:
        return None
    delim = opts.delimiter if opts.delimiter is not None else sniff_delimiter(opts.path,
                                                                              lines[0])
    split = [ln.split(delim) if '"' not in ln else _split_quoted(ln, delim) for ln in lines]
    split = [[f.strip().strip('"') for f in fields] for fields in split]
    first, n = split[0], len(split[0])
    lc = opts.label_column
    pos = -1 if lc is None or isinstance(lc, str) else lc
    header = (opts.header if opts.header is not None
              else isinstance(lc, str) or _looks_like_header(first, pos))
    if isinstance(lc, str):
        if not header or lc not in first:
            return None
        pos = first.index(lc)
    if not -n <= pos < n:
        return None
    rows = [f for f in split[1 if header else 0:] if len(f) == n]
    return (first if header else None), rows, pos % n


def csv_hint(opts: ReadOptions, task: str) -> str | None:
    """One phrase for a CSV file whose rows the run would reject or misread: another column
    that looks like the label (a header name such as ``label``/``target``/``class``/``y``,
    or, classifying, a column of two values where the label column has more), else a feature
    column that is not numeric and how to proceed; None when no column stands out."""
    if opts.resolved_fmt() != "csv":
        return None
    with contextlib.suppress(OSError, ValueError, UnicodeError):
        head = _head(opts)
        if head is not None:
            return _hint(*head, task)
    return None


def _hint(header: list[str] | None, rows: list[list[str]], lc: int, task: str) -> str | None:
    n = len(header) if header is not None else (len(rows[0]) if rows else 0)
    if header is not None:
        for c, name in enumerate(header):
            if c != lc and name.lower() in LABEL_NAMES:
                return (f"column {c} is named {name!r}: if it is the label, give "
                        f"--label-column {name}")
    if not rows:
        return None
    # each column's classes as the labels would count them (1 and 1.0 alike), first token each
    classes: list[dict[float | str, str]] = [{} for _ in range(n)]
    for r in rows:
        for c, v in enumerate(r):
            classes[c].setdefault(class_key(v), v)
    if task == "classification" and len(classes[lc]) > 2:
        # a label column holds two classes, whole numbers or words; a file sorted by class
        # shows one in its head, so the first and last columns may show one
        def label_like(c: int, most: int) -> bool:
            keys = classes[c]
            return (c != lc and 0 < len(keys) <= most
                    and all(isinstance(k, str) or k == int(k) for k in keys))

        ends = [c for c in (0, n - 1) if label_like(c, 2)]
        pairs = [c for c in range(n) if label_like(c, 2) and len(classes[c]) == 2]
        for c in [*[c for c in ends if len(classes[c]) == 2], *pairs, *ends][:1]:
            shown = ", ".join(sorted(classes[c].values()))
            return (f"column {c} holds {'two values' if len(classes[c]) == 2 else 'one value'}"
                    f" ({shown}) in the first rows, as a label would: if it is the label, "
                    f"give --label-column {c}")
    for c in range(n):
        bad = [v for r in rows if not _is_number(v := r[c])]
        if c != lc and bad and len(bad) * 2 >= len(rows):
            name = f" ({header[c]!r})" if header is not None else ""
            return (f"column {c}{name} is not numeric (e.g. {bad[0]!r}): CSV features must be "
                    "numbers: remove that column from the file, or convert the file to "
                    "Parquet, whose non-numeric columns are skipped")
    return None
