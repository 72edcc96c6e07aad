"""Record iteration in any format: ``(line, raw_text, Example | ParseError)``, bad data handled
by an :class:`~kernelstream.data.errors.ErrorPolicy` (by default never raising)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from kernelstream.data.csv import (
    iter_csv_records,
)
from kernelstream.data.errors import (
    FORMATS,
    BadLines,
    ErrorPolicy,
    Format,
    ParseError,
    PathLike,
)
from kernelstream.data.labels import (
    LabelMap,
)
from kernelstream.data.libsvm import (
    densify,
    iter_libsvm_records,
)
from kernelstream.data.parquet import _iter_parquet_records
from kernelstream.data.sniff import (
    infer_format,
)


class Example(NamedTuple):
    """One parsed example: dense features, mapped label (nan without a LabelMap), raw label."""

    x: np.ndarray
    y: float
    label: str


def iter_records(
    path: PathLike,
    *,
    fmt: Format | None = None,
    n_features: int | None = None,
    label_map: LabelMap | None = None,
    label_column: int | str | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    limit: int | None = None,
    errors: ErrorPolicy | BadLines = ErrorPolicy.COLLECT,
) -> Iterator[tuple[int, str, Example | ParseError]]:
    """Lazily yield ``(line_number, raw_text, Example | ParseError)`` in any format.

    Every good record is an :class:`Example` with a dense ``x`` of a fixed width: LIBSVM needs
    ``n_features`` (a stream cannot look ahead for the largest index; an index beyond it is a
    ParseError of that line), CSV rows must have ``n_features + 1`` columns when it is given.
    ``y`` is ``label_map(label)`` (an unknown label is a ParseError of that line) or ``nan``
    when no map is given. Parquet rows are numbered from 1 and their raw text is a JSON object.
    ``limit`` stops after that many records (good or bad). ``errors``: with the default
    ``ErrorPolicy.COLLECT`` bad data never raises (a bad record is a located
    :class:`ParseError`); ``ErrorPolicy.RAISE`` raises the first one; a :class:`BadLines` given
    here also counts them by reason.
    """
    fmt = fmt or infer_format(path)
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if fmt == "libsvm" and n_features is None:
        raise ValueError("n_features is required to stream a LIBSVM file")
    if fmt == "libsvm" and label_column is not None:
        raise ValueError("label_column does not apply to LIBSVM files")
    return _iter_records(path, fmt, n_features, label_map, label_column, delimiter, header, limit,
                         BadLines.of(errors))


def _iter_records(
    path: PathLike,
    fmt: str,
    n_features: int | None,
    label_map: LabelMap | None,
    label_column: int | str | None,
    delimiter: str | None,
    header: bool | None,
    limit: int | None,
    bad: BadLines,
) -> Iterator[tuple[int, str, Example | ParseError]]:
    spath = os.fspath(path)
    source: Iterator[tuple[int, str, Any]]
    if fmt == "libsvm":
        source = iter_libsvm_records(path)
    elif fmt == "csv":
        n_cols = None if n_features is None else n_features + 1
        source = iter_csv_records(
            path, label_column=label_column, delimiter=delimiter, header=header, n_columns=n_cols
        )
    else:
        source = _iter_parquet_records(path, label_column, n_features)
    # The sources hand every bad line on; the policy applies here, to the records within the
    # limit only.
    count = 0
    for lineno, text, parsed in source:
        if limit is not None and count >= limit:
            return
        count += 1
        if isinstance(parsed, ParseError):
            yield lineno, text, bad.add(parsed)
            continue
        try:
            if fmt == "libsvm":  # (label, indices, values)
                label, idx, val = parsed[0], parsed[1], parsed[-1]
                assert n_features is not None
                x = densify(idx, val, n_features)
            else:  # (label, dense row)
                label, x = parsed[0], parsed[-1]
            y = math.nan if label_map is None else label_map(label)
        except ParseError as e:
            yield lineno, text, bad.add(e.located(spath, lineno))
            continue
        yield lineno, text, Example(x, y, label)

