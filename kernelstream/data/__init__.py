"""Reading labelled data sets: LIBSVM text, CSV and Parquet, plus the data sets shipped inside
the package.

Two kinds of entry points:

* **Line parsers** (:func:`parse_libsvm_line`, :func:`parse_csv_line`) and record iterators
  (:func:`iter_libsvm_records`, :func:`iter_csv_records`, :func:`iter_records`) for streaming
  sources. The iterators read lazily and by default never raise on bad input: each line comes
  out as ``(line_number, raw_text, parsed_or_ParseError)`` so a caller can route bad lines to a
  dead-letter output.
* **Whole-file loading** (:func:`load`, :func:`load_dataset`) into a dense ``float64`` matrix and
  a label vector, raising :class:`ParseError` (``"path:line: reason"``) on the first bad line.
* The **error policy** (:class:`ErrorPolicy`) names the two behaviours: ``RAISE`` (whole-file
  loading) and ``COLLECT`` (the iterators' default); the iterators take ``errors=`` to choose.
  :class:`BadLines` applies a policy and counts what it collects (per reason kind, with the
  first line of each), as ``kernelstream check`` reports dead letters.

Format rules (the same in every entry point):

* LIBSVM: ``label idx:val idx:val ...``; indices are 1-based integers; anything after ``#`` is a
  comment. Indices given out of order are **accepted and sorted** (their order carries no
  meaning and several converters write them unsorted); a **duplicate index is an error**
  (which value is meant is ambiguous). A line with a label and no pairs is an all-zero example.
* CSV: one example per line, one label column (default: the last), no quoting. A header row is
  recognised when *none* of its feature fields parses as a number; the label field is not
  looked at, so non-numeric labels such as ``g``/``h`` cannot be mistaken for a header.
* Lines that are blank (for LIBSVM: blank after removing the comment) are skipped by the file
  readers; line numbers are physical, 1-based line numbers of the (decompressed) file. CRLF
  endings and a last line without newline are fine; ``.gz``/``.bz2``/``.xz`` files are
  recognised by their magic bytes and decompressed on the fly.
* Labels: classification maps exactly two classes to -1/+1 (:class:`LabelMap`): the class
  named by ``positive_label``, else the larger of two numeric labels (-1/+1, 0/1, 1/2), else
  the second in sorted order (g/h -> h) is +1. Numeric labels compare by value ("+1" == "1").
  A third class is an error naming it; regression keeps ``float(label)``.
* :class:`ParseError` reasons start with a fixed phrase so callers can classify errors
  without parsing prose: "empty line", "missing label", "bad token", "non-integer index",
  "non-positive index", "index too large", "bad value", "non-finite value", "duplicate
  index", "binary garbage", "undecodable bytes", "index exceeds n_features", "wrong number of
  columns", "empty field", "non-numeric value", "empty label", "third distinct label",
  "unknown label", "non-numeric label", "non-finite label" (nan, inf: never a class),
  "missing value", "corrupt compressed file".

The package is split by job: :mod:`~kernelstream.data.libsvm`, :mod:`~kernelstream.data.csv`
and :mod:`~kernelstream.data.parquet` read one format each, :mod:`~kernelstream.data.labels`
holds the one label map, :mod:`~kernelstream.data.sniff` guesses format, delimiter and header,
:mod:`~kernelstream.data.lines` splits (decompressed) files into lines and blocks,
:mod:`~kernelstream.data.scaling` and :mod:`~kernelstream.data.embedded` do what they say, and
:mod:`~kernelstream.data.errors` holds :class:`ParseError` and the error policy. Opening files
and decompression belong to :mod:`kernelstream.fs` alone. Every name is re-exported here.

Only numpy and the standard library are imported at import time; pyarrow is imported inside the
Parquet reader and the CSV fast path only. The CSV fast path (whole-file loading of clean files)
gives bit for bit the per-line parser's result and leaves every other file to it, so errors and
their messages are the per-line parser's.
"""

from __future__ import annotations

import os

import numpy as np

from kernelstream.data.csv import (
    CsvRead,
    _load_csv,
    iter_csv_records,
    parse_csv_line,
)
from kernelstream.data.embedded import (
    embedded_dataset_info,
    embedded_datasets,
    embedded_path,
    load_dataset,
)
from kernelstream.data.errors import (
    FORMATS,
    SCALES,
    TARGET_SCALES,
    TASKS,
    BadLines,
    ErrorPolicy,
    Format,
    ParseError,
    PathLike,
    Scale,
    TargetScale,
    Task,
)
from kernelstream.data.hashing import check_bits, hash_index
from kernelstream.data.labels import LabelMap, _map_labels
from kernelstream.data.labels import _clean_label as _clean_label
from kernelstream.data.libsvm import (
    MAX_INDEX,
    _load_libsvm,
    _load_libsvm_csr,
    densify,
    iter_libsvm_records,
    parse_libsvm_line,
    parse_libsvm_lines,
)
from kernelstream.data.libsvm import _libsvm_bulk as _libsvm_bulk
from kernelstream.data.libsvm import _libsvm_exact as _libsvm_exact
from kernelstream.data.options import ReadOptions
from kernelstream.data.parquet import _load_parquet
from kernelstream.data.records import Example, iter_records
from kernelstream.data.scaling import (
    _scale_minmax_inplace,
    fit_minmax,
    scale_minmax,
    scale_target_minmax,
)
from kernelstream.data.sniff import infer_format
from kernelstream.sparse import CSR

__all__ = [
    "FORMATS",
    "MAX_INDEX",
    "SCALES",
    "TARGET_SCALES",
    "TASKS",
    "BadLines",
    "ErrorPolicy",
    "Example",
    "LabelMap",
    "ParseError",
    "ReadOptions",
    "densify",
    "embedded_dataset_info",
    "embedded_datasets",
    "embedded_path",
    "fit_minmax",
    "hash_index",
    "infer_format",
    "iter_csv_records",
    "iter_libsvm_records",
    "iter_records",
    "load",
    "load_dataset",
    "load_sparse",
    "parse_csv_line",
    "parse_libsvm_line",
    "parse_libsvm_lines",
    "scale_minmax",
    "scale_target_minmax",
]


# Whole-file loading reads the file in blocks of whole lines of about this many (decompressed)
# bytes and parses one block at a time, so that the parser's temporaries (several bytes of
# masks and int64 positions per input byte) stay bounded and the peak memory is about the
# result X plus one block's worth. Tests shrink it to cross block boundaries.
_CHUNK_BYTES = 1 << 18


def load(
    path: PathLike,
    *,
    fmt: Format | None = None,
    n_features: int | None = None,
    label_column: int | str | None = None,
    task: Task = "classification",
    scale: Scale = "none",
    limit: int | None = None,
    positive_label: str | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    label_map: LabelMap | None = None,
    scale_target: TargetScale = "none",
) -> tuple[np.ndarray, np.ndarray]:
    """Load a whole data set as ``(X, y)``: ``X`` dense ``float64`` ``(n, d)`` C-contiguous,
    ``y`` ``float64`` (±1 for classification, the target for regression).

    * ``fmt``: ``"libsvm"`` (also gzip/bz2/xz-compressed), ``"csv"`` or ``"parquet"``; inferred
      by :func:`infer_format` when None.
    * ``n_features``: LIBSVM width (default: the largest index seen; a larger index is an
      error). For CSV/Parquet a check of the width.
    * ``label_column``: CSV position (default last) or header name; Parquet name or position
      (default ``"label"``; all other numeric columns are features). Not for LIBSVM.
    * ``task``: ``"classification"`` maps the two label classes to ±1 (see
      :meth:`LabelMap.from_labels` for which is +1; ``positive_label`` overrides), or use an
      explicit ``label_map`` (e.g. when a limited read may miss a class).
      ``"regression"`` keeps numeric targets.
    * ``scale``: ``"none"``, ``"01"`` or ``"pm1"`` min-max scaling of each feature over the
      loaded rows (:func:`scale_minmax`).
    * ``limit``: read only the first ``limit`` examples.
    * ``delimiter``/``header``: CSV options (default sniffed / auto-detected).
    * ``scale_target``: ``"none"`` or ``"01"`` — min-max scaling of a regression target to
      ``[0, 1]`` over the loaded rows (:func:`scale_target_minmax`; Li & Liao (ECML-PKDD 2022)
      rescale their regression targets). Regression only.

    Raises :class:`ParseError` naming file and line on the first malformed line (syntax errors
    of all lines are checked before label errors).

    Text files are parsed in blocks of lines and written into ``X`` as they go, and scaling
    works in place, so the peak memory is about ``X`` plus one block's temporaries.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if scale_target not in TARGET_SCALES:
        raise ValueError(f"scale_target must be one of {TARGET_SCALES}, got {scale_target!r}")
    if scale_target != "none" and task != "regression":
        raise ValueError("scale_target applies to regression targets only (task='regression')")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    fmt = fmt or infer_format(path)
    spath = os.fspath(path)
    if fmt == "libsvm":
        if label_column is not None:
            raise ValueError("label_column does not apply to LIBSVM files")
        X, labels = _load_libsvm(path, n_features, limit, _CHUNK_BYTES)
    elif fmt == "csv":
        X, labels = _load_csv(
            CsvRead(path, n_features, limit, label_column, delimiter, header, _CHUNK_BYTES))
    elif fmt == "parquet":
        X, labels = _load_parquet(path, n_features, limit, label_column)
    else:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    y = _map_labels(labels, task, positive_label, label_map, spath)
    X = _scale_minmax_inplace(X, scale)  # X is ours: no second copy of it
    y = scale_target_minmax(y, scale_target)
    return np.ascontiguousarray(X, dtype=np.float64), y


def load_sparse(
    path: PathLike,
    *,
    n_features: int | None = None,
    task: Task = "classification",
    limit: int | None = None,
    positive_label: str | None = None,
    label_map: LabelMap | None = None,
    hash_features: int | None = None,
) -> tuple[CSR, np.ndarray]:
    """Load a LIBSVM file as ``(X, y)`` with ``X`` a :class:`~kernelstream.sparse.CSR`
    (columns 0-based and strictly increasing per row): memory grows with the non-zeros, never
    with the largest index. Labels, ``n_features``, ``limit`` and errors are as in
    :func:`load`; ``hash_features=k`` hashes the feature indices into ``2**k`` columns
    (:mod:`kernelstream.data.hashing`), summing collisions."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if hash_features is not None:
        check_bits(hash_features)
    X, labels = _load_libsvm_csr(path, n_features, limit, _CHUNK_BYTES, hash_features)
    return X, _map_labels(labels, task, positive_label, label_map, os.fspath(path))
