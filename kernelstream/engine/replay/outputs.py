"""The run's Parquet outputs without Beam: schemas, record batches, writing and reading back.

Every runner writes three outputs, each a directory of Parquet files with an explicit schema:
``predictions/`` (one row per example and stream), ``metrics/`` (window and final rows per
stream) and ``dead_letters/``. Prediction blocks become record batches column by column (no
per-row Python objects). The Beam sinks (``kernelstream.transforms.replay.sinks``) and the loop
runner (``pipelines.replay.loop``) write these same batches, so their files compare one to one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from kernelstream import fs
from kernelstream._arrow import pa, pq
from kernelstream.engine.deadletters import DEAD_LETTER_TAG
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.live.snapshot.files import fsync_dir
from kernelstream.engine.replay.blocks import PredictionBlock


def _schema(spec: str) -> pa.Schema:
    """A schema from ``name:type`` words in column order (``!`` after the type: never null;
    ``#`` starts a comment to the end of the line)."""
    # Arrow type of each word of a schema spec
    types = {"string": pa.string(), "int32": pa.int32(), "int64": pa.int64(),
             "float64": pa.float64(), "bool": pa.bool_(), "float64[]": pa.list_(pa.float64())}
    fields = []
    for line in spec.splitlines():
        for word in line.split("#", 1)[0].split():
            name, kind = word.split(":")
            fields.append(pa.field(name, types[kind.rstrip("!")], nullable=kind[-1] != "!"))
    return pa.schema(fields)


_PREDICTIONS = """
    key:string! config:string! permutation:int32! entity:string
    position:int64!  # 0-based position in the stream
    id:int64!  # row of the data set (0-based)
    score:float64  # pre-update score (null: row rejected by the learner)
    predicted:float64 label:float64! loss:float64  # predicted: ±1 label, or regression's score
    mistake:bool n_support_vectors:int64!  # mistake: null for regression
    selected_kernel:int64  # null for single-kernel learners
"""

_METRICS = """
    key:string! config:string! learner:string! permutation:int32! entity:string task:string
    loss_name:string final:bool! window_start:int64! window_end:int64! examples:int64!
    mistakes:int64 mistake_rate:float64 avg_loss:float64 loss_sum:float64
    n_support_vectors:int64! seconds:float64! examples_per_second:float64
    window_examples:int64! window_mistakes:int64 window_mistake_rate:float64
    window_avg_loss:float64 window_seconds:float64! window_examples_per_second:float64
    n_features:int64 rejected:int64!
    diverged:int64  # learnt rows the learner scored NaN (mistakes of infinite loss)
    duplicate_blocks:int64! max_buffered_blocks:int64!
    # kernel-selection learners: their distribution over the kernel pool after the row at
    # ``window_end`` - 1 (null for single-kernel learners)
    kernel_distribution:float64[]
    # final rows: ``Learner.diagnostics`` after the last example as a JSON object (e.g.
    # OKS-SIL's learnt width, B(AO)2KS's same-draw rounds); null elsewhere and for learners
    # without diagnostics
    diagnostics:string
    # cumulative no-skill baseline and regression metrics (engine.noskill; null where they do
    # not apply): the majority-class predictor's mistake rate (%) and the share of the run's
    # predictions in its most predicted class (classification); the running-mean
    # predictor's average loss, the run's RMSE, MAE and R² against that predictor (regression)
    noskill_mistake_rate:float64 noskill_avg_loss:float64 rmse:float64 mae:float64 r2:float64
    top_class_share:float64
"""

_DEAD_LETTERS = """
    source:string!
    stage:string!  # parse | learn | order
    key:string  # stream key (learn/order stages)
    line:int64  # 1-based line (or Parquet row) of the source file
    position:int64 id:int64 raw:string! reason:string!
"""

_SPECS = {"predictions": _PREDICTIONS, "metrics": _METRICS, DEAD_LETTER_TAG: _DEAD_LETTERS}
OUTPUTS = tuple(_SPECS)  # the output directories of a run
# the schemas' names: built from the specs above when first read (:func:`__getattr__`)
_NAMES = {"PREDICTIONS_SCHEMA": "predictions", "METRICS_SCHEMA": "metrics",
          "DEAD_LETTER_SCHEMA": DEAD_LETTER_TAG}

if TYPE_CHECKING:
    PREDICTIONS_SCHEMA: pa.Schema
    METRICS_SCHEMA: pa.Schema
    DEAD_LETTER_SCHEMA: pa.Schema
    SCHEMAS: dict[str, pa.Schema]


@cache
def _schemas() -> dict[str, pa.Schema]:
    return {name: _schema(spec) for name, spec in _SPECS.items()}


def __getattr__(name: str) -> Any:
    """``PREDICTIONS_SCHEMA``, ``METRICS_SCHEMA``, ``DEAD_LETTER_SCHEMA`` and ``SCHEMAS`` (the
    three by output), built on first use: they are pyarrow objects, and importing this module
    must not load pyarrow (:mod:`kernelstream._arrow`)."""
    if name == "SCHEMAS":
        return _schemas()
    if name in _NAMES:
        return _schemas()[_NAMES[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def output_of(record: PredictionBlock | dict[str, Any]) -> str:
    """The output a record of a run goes to: a prediction block to ``predictions``, a row
    with a ``reason`` (only dead letters have one) to ``dead_letters``, any other row to
    ``metrics``. Lets one sink write all three outputs of a run."""
    if isinstance(record, PredictionBlock):
        return "predictions"
    return DEAD_LETTER_TAG if "reason" in record else "metrics"


def predictions_batch(p: PredictionBlock) -> pa.RecordBatch:
    """One prediction block as a record batch of :data:`PREDICTIONS_SCHEMA`."""
    sk = StreamKey.decode(p.key)
    n = p.n
    # a rejected row's score and loss are NaN; a diverged row's NaN score has an inf loss
    bad = np.isnan(p.score) & np.isnan(p.loss)
    return pa.RecordBatch.from_arrays([
        pa.array([p.key] * n, pa.string()),
        pa.array([sk.config] * n, pa.string()),
        pa.array(np.full(n, sk.rep, dtype=np.int32)),
        pa.array([sk.entity] * n, pa.string()),
        pa.array(p.positions),
        pa.array(p.ids),
        pa.array(p.score, mask=bad),
        pa.array(p.predicted, mask=bad),
        pa.array(p.y),
        pa.array(p.loss, mask=bad),
        pa.array(p.mistake == 1, mask=p.mistake < 0),
        pa.array(p.n_sv),
        pa.array(p.selected_kernel, mask=p.selected_kernel < 0),
    ], schema=_schemas()["predictions"])


# Prediction rows per Parquet row group. Each write of a record batch ends a row group, whose
# column chunks, statistics and page headers cost about a millisecond whatever its size: one
# group per 1024-row block took 0.05 s of a 50k-row replay. Larger groups buy little more and
# cost memory (32768 rows: +12 MB of peak RSS).
GROUP_ROWS = 8192


class PredictionWriter:
    """Prediction blocks into a ``pyarrow.parquet.ParquetWriter`` (of
    :data:`PREDICTIONS_SCHEMA`), about :data:`GROUP_ROWS` rows per row group; :meth:`flush`
    writes what is buffered (before the writer closes)."""

    def __init__(self, writer: pq.ParquetWriter) -> None:
        self.writer = writer
        self.batches: list[pa.RecordBatch] = []
        self.rows = 0

    def write(self, p: PredictionBlock) -> None:
        self.batches.append(predictions_batch(p))
        self.rows += p.n
        if self.rows >= GROUP_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.batches:
            self.writer.write_table(pa.Table.from_batches(self.batches, _schemas()["predictions"]),
                                    row_group_size=max(1, self.rows))
        self.batches, self.rows = [], 0


def rows_batch(rows: Sequence[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(list(rows), schema=schema)


def write_rows(path: str, rows: Sequence[dict[str, Any]], schema: pa.Schema) -> None:
    """One Parquet file of ``rows`` (local path or URL)."""
    with fs.open_write(path) as fh:
        pq.write_table(pa.Table.from_batches([rows_batch(rows, schema)]), fh)


# -- reading back ---------------------------------------------------------------------------------


def parquet_files(directory: str | Path) -> list[str]:
    """The finished Parquet files of an output directory (local or a URL), sorted."""
    return fs.list_files(directory, "*.parquet")


def read_table(directory: str | Path, schema: pa.Schema) -> pa.Table:
    """All Parquet files of an output directory as one table (empty table of ``schema`` when
    the directory has none)."""
    files = parquet_files(directory)
    if not files:
        return schema.empty_table()
    tables = []
    for f in files:
        if fs.is_remote(f):
            with fs.open_read(f) as fh:
                tables.append(_read_file(fh, schema))
        else:
            tables.append(_read_file(f, schema))
    return pa.concat_tables(tables)


def _read_file(source: str | IO[bytes], schema: pa.Schema) -> pa.Table:
    """One Parquet file as a table of ``schema``. A file of exactly that schema (every file
    the runners write) is read as it is: ``pq.read_table(schema=...)`` would import
    ``pyarrow.dataset`` (~40 ms and ~16 MB), a third of a small replay's fixed cost. Any
    other file (e.g. one written before a column was added) goes through ``read_table``'s
    schema projection, as before."""
    with pq.ParquetFile(source) as pf:
        if pf.schema_arrow.equals(schema):
            # labelled with ``schema`` itself, as read_table labels it (Parquet names a list's
            # items "element", the schema "item")
            return pa.Table.from_arrays(pf.read().columns, schema=schema)
    if not isinstance(source, str):
        source.seek(0)
    return pq.read_table(source, schema=schema)


EMPTY = "part-empty.parquet"  # an output folder's file when it has no rows (yet)


def ensure_nonempty(directory: str | Path, schema: pa.Schema, prefix: str = "part") -> bool:
    """Give an output directory that holds none of its files (``{prefix}-*.parquet``: Beam
    writes nothing for an empty PCollection, a stream has no rows yet) an empty one of
    ``schema`` (``{prefix}-empty.parquet``), so readers always find the schema; whether it
    wrote one. A replay's outputs and checkpoints and a stream's outputs
    (``engine.live.snapshot.outputs.ensure_schemas``). A local file is written to a temporary
    name, renamed and its directory synced: a crash never leaves a cut one (an object store
    publishes an object only when it is closed)."""
    if fs.list_files(directory, f"{prefix}-*.parquet"):
        return False
    fs.makedirs(directory)
    name = f"{prefix}-empty.parquet"
    if fs.is_remote(directory):
        with fs.open_write(fs.join(directory, name)) as fh:
            pq.write_table(schema.empty_table(), fh)
        return True
    local = fs.local_path(directory)
    tmp = os.path.join(local, f".{name}.tmp")  # (clear_outputs removes one left behind)
    pq.write_table(schema.empty_table(), tmp)
    os.replace(tmp, os.path.join(local, name))
    fsync_dir(local)
    return True


def iter_rows(directory: str | Path, schema: pa.Schema) -> Iterator[dict[str, Any]]:
    yield from read_table(directory, schema).to_pylist()



# Metrics columns that describe the run (timings, the runner's buffering), not the stream:
# they differ between two runs of the same replay.
RUN_METRIC_COLUMNS = ("seconds", "examples_per_second", "window_seconds",
                      "window_examples_per_second", "max_buffered_blocks", "duplicate_blocks")
_ROW_ORDER = {"predictions": ["key", "position"], "metrics": ["key", "window_end", "final"],
              "dead_letters": ["line", "key", "position"]}


def comparable_table(out: str | Path, name: str) -> pa.Table:
    """Output ``name`` of the run in ``out`` in a canonical row order and without the
    metrics' run columns (:data:`RUN_METRIC_COLUMNS`): two runs of the same replay (other
    runners, worker counts, block deliveries) give equal tables."""
    t = read_table(Path(out) / name, _schemas()[name]).sort_by(
        [(c, "ascending") for c in _ROW_ORDER[name]])
    return t.drop_columns(list(RUN_METRIC_COLUMNS)) if name == "metrics" else t
