"""Parquet files: label and numeric feature columns, whole-file loading and record iteration.
pyarrow is imported lazily."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from kernelstream import fs
from kernelstream._suggest import did_you_mean
from kernelstream.data.errors import (
    ParseError,
    PathLike,
)
from kernelstream.data.labels import (
    _Labels,
)


def _parquet_table(
    path: PathLike, label_column: int | str | None, n_features: int | None
) -> tuple[Any, str, list[str]]:
    """``(ParquetFile, label column name, feature column names)``."""
    import pyarrow as pa  # lazy: only the Parquet path needs pyarrow
    import pyarrow.parquet as pq

    spath = os.fspath(path)
    pf = pq.ParquetFile(fs.open_read(spath) if fs.is_remote(spath) else spath)
    schema = pf.schema_arrow
    names = schema.names
    if label_column is None:
        label_column = "label"
    if isinstance(label_column, int):
        if not -len(names) <= label_column < len(names):
            raise ValueError(f"label_column {label_column} out of range for {len(names)} columns")
        label_name = names[label_column]
    else:
        label_name = label_column
    if label_name not in names:
        raise ValueError(f"{spath}: no label column {label_name!r} (columns: {names})"
                         + did_you_mean(label_name, names))

    def numeric(t: Any) -> bool:
        return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))

    feats = [c for c in names if c != label_name and numeric(schema.field(c).type)]
    if n_features is not None and len(feats) != n_features:
        raise ValueError(f"{spath}: {len(feats)} numeric feature columns, n_features={n_features}")
    return pf, label_name, feats


def _load_parquet(
    path: PathLike,
    n_features: int | None,
    limit: int | None,
    label_column: int | str | None,
) -> tuple[np.ndarray, _Labels]:
    import pyarrow.compute as pc

    spath = os.fspath(path)
    pf, label_name, feats = _parquet_table(path, label_column, n_features)
    table = pf.read(columns=[*feats, label_name])
    if limit is not None:
        table = table.slice(0, limit)
    n = table.num_rows

    def first_null(col: Any) -> int:
        return int(np.argmax(pc.is_null(col).to_numpy(zero_copy_only=False))) + 1

    cols = []
    for c in feats:
        col = table.column(c)
        if col.null_count:
            raise ParseError(f"missing value in column {c!r}", spath, first_null(col))
        cols.append(col.to_numpy().astype(np.float64))
    X = np.column_stack(cols) if cols else np.zeros((n, 0), dtype=np.float64)
    finite = np.isfinite(X)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise ParseError(f"non-finite value {str(float(X[r, c]))!r} in column {feats[c]!r}",
                         spath, int(r) + 1)
    lab = table.column(label_name)
    if lab.null_count:
        raise ParseError(f"missing value in label column {label_name!r}", spath, first_null(lab))
    # A label column is long but has few distinct values: map those, not every row.
    enc = pc.dictionary_encode(lab).combine_chunks()
    tokens = [str(v) for v in enc.dictionary.to_pylist()]
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return X, _Labels(tokens, codes, np.arange(1, n + 1, dtype=np.int64))


def _iter_parquet_records(
    path: PathLike, label_column: int | str | None, n_features: int | None
) -> Iterator[tuple[int, str, tuple[str, np.ndarray] | ParseError]]:
    spath = os.fspath(path)
    pf, label_name, feats = _parquet_table(path, label_column, n_features)
    row = 0
    for batch in pf.iter_batches(columns=[*feats, label_name]):
        for rec in batch.to_pylist():
            row += 1
            text = json.dumps(rec, default=str)
            try:
                vals = [rec[c] for c in feats]
                for c, v in zip(feats, vals, strict=True):
                    if v is None:
                        raise ParseError(f"missing value in column {c!r}")
                    if not math.isfinite(float(v)):
                        raise ParseError(f"non-finite value {str(float(v))!r} in column {c!r}")
                if rec[label_name] is None:
                    raise ParseError(f"missing value in label column {label_name!r}")
            except ParseError as e:
                yield row, text, e.located(spath, row)
                continue
            yield row, text, (str(rec[label_name]), np.array(vals, dtype=np.float64))

