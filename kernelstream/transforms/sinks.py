"""Beam Parquet sinks, for batch and streaming pipelines (schemas and record batches are the
engine's: ``kernelstream.engine.outputs``).

A :class:`ParquetSink` streams record batches through ``pyarrow.parquet.ParquetWriter`` and
writes the footer when its file is finished. Metrics and dead-letter rows (few) are buffered
dicts.

Two ways of writing files, chosen by :class:`WriteParquet`:

* bounded input (the replay): each bundle writes its records to one temporary file and emits
  its name; once the input is complete a finalizing step (the list of names as a side input)
  renames the files of committed bundles to ``<prefix>-<uuid>.parquet`` and deletes the
  temporary files of failed attempts, so a retried bundle leaves no duplicate rows. Three
  light transforms instead of ``fileio.WriteToFiles``' dozen: this saves ~0.4 s of pipeline
  construction and start-up per run (three outputs), which matters for short replays.
* unbounded input (``streaming_window``): ``fileio.WriteToFiles`` over fixed windows (not
  ``beam.io.WriteToParquet``, which corrupts the last file of a streaming write), so files
  are finalised as the watermark passes each window.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import FixedWindows, GlobalWindow, GlobalWindows
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from kernelstream.engine.blocks import PredictionBlock
from kernelstream.engine.outputs import predictions_batch, rows_batch


class ParquetSink(fileio.FileSink):
    """Writes ``PredictionBlock`` s or dict rows to one Parquet file of ``schema``.
    ``group_bytes``: end a row group once its rows' bytes and strings reach this size (the
    checkpoint's states, read back one row group at a time)."""

    ROW_BUFFER = 8192

    def __init__(self, schema: pa.Schema, group_bytes: int | None = None) -> None:
        self.schema = schema
        self.group_bytes = group_bytes
        self._writer: pq.ParquetWriter | None = None
        self._rows: list[dict[str, Any]] = []
        self._size = 0

    def open(self, fh: Any) -> None:
        self._writer = pq.ParquetWriter(fh, self.schema)
        self._rows = []

    def write(self, record: Any) -> None:
        assert self._writer is not None
        if isinstance(record, PredictionBlock):
            self._writer.write_batch(predictions_batch(record))
            return
        self._rows.append(record)
        if self.group_bytes is not None:
            self._size += sum(len(v) for v in record.values() if isinstance(v, bytes | str))
        if len(self._rows) >= self.ROW_BUFFER or (self.group_bytes is not None
                                                   and self._size >= self.group_bytes):
            self._flush_rows()

    def _flush_rows(self) -> None:
        if self._rows and self._writer is not None:
            self._writer.write_batch(rows_batch(self._rows, self.schema))
        self._rows = []
        self._size = 0

    def flush(self) -> None:
        # WriteToFiles calls flush right before closing the file: finish the Parquet file
        # (footer) here; the file handle itself is closed by WriteToFiles.
        self._flush_rows()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WriteParquet(beam.PTransform):
    """Write a PCollection of ``PredictionBlock`` s or dict rows as Parquet files under
    ``directory``: ``<prefix>-<uuid>.parquet``, one file per bundle, for bounded input.

    ``streaming_window`` (seconds): for unbounded input, window the elements into fixed
    windows first, so files (``<prefix>-<window>-<shard>.parquet``) are finalised as the
    watermark passes each window. ``shards`` fixes the number of files per window (this also
    uses ``fileio.WriteToFiles``).
    """

    def __init__(self, directory: str, schema: pa.Schema, prefix: str = "part",
                 shards: int | None = None, streaming_window: float | None = None,
                 group_bytes: int | None = None) -> None:
        super().__init__()
        self.directory = str(directory)
        self.schema = schema
        self.prefix = prefix
        self.shards = shards
        self.streaming_window = streaming_window
        self.group_bytes = group_bytes  # bounded input only (see ParquetSink)

    def _write(self, pcoll: beam.PCollection, prefix: str, label: str) -> Any:
        schema = self.schema
        return pcoll | label >> fileio.WriteToFiles(
            path=self.directory,
            file_naming=fileio.default_file_naming(prefix, ".parquet"),
            sink=lambda _dest: ParquetSink(schema),
            shards=self.shards,
        )

    def expand(self, pcoll: beam.PCollection) -> Any:
        if not self.streaming_window:
            if self.shards is None:
                return self._write_bounded(pcoll)
            return self._write(pcoll, self.prefix, "WriteToFiles")
        # Elements stamped at the end of the global window (what end-of-input timers emit,
        # e.g. the final metrics) would land in a fixed window past the end of time that never
        # closes, and any grouping of them would find the watermark already past their window
        # (late data, dropped). They are few: each bundle of them is written to a file of its
        # own, without grouping.
        parts = pcoll | "SplitEndOfTime" >> beam.ParDo(_SplitEndOfTime()).with_outputs(
            _SplitEndOfTime.END, main="timely")
        timely = parts.timely | "Window" >> beam.WindowInto(
            FixedWindows(self.streaming_window))
        at_end = parts[_SplitEndOfTime.END] | "WriteEndOfTime" >> beam.ParDo(
            _WriteBundleFile(self.directory, f"{self.prefix}-end", self.schema))
        return self._write(timely, self.prefix, "WriteToFiles"), at_end


    def _write_bounded(self, pcoll: beam.PCollection) -> beam.PCollection:
        # A token per transform instance: the finalizer deletes only its own leftovers.
        token = uuid.uuid4().hex[:12]
        parts = (pcoll
                 | "GlobalWindow" >> beam.WindowInto(GlobalWindows())
                 | "WriteParts" >> beam.ParDo(
                     _WriteBundleParts(self.directory, self.prefix, token, self.schema,
                                       self.group_bytes)))
        # The side input is complete only when every bundle of the input has committed.
        return (pcoll.pipeline
                | "Finalize" >> beam.Impulse()
                | "RenameParts" >> beam.ParDo(
                    _FinalizeParts(self.directory, self.prefix, token),
                    beam.pvalue.AsList(parts)))


def _temp_name(prefix: str, token: str) -> str:
    # Hidden and without the .parquet suffix: readers never pick up an unfinished file.
    return f".{prefix}-{token}-{uuid.uuid4().hex}.parquet.tmp"


class _WriteBundleParts(beam.DoFn):
    """Write each bundle's records to one temporary Parquet file (opened on the first record,
    record batches streamed, footer at the end of the bundle) and emit its path."""

    def __init__(self, directory: str, prefix: str, token: str, schema: pa.Schema,
                 group_bytes: int | None = None) -> None:
        self.directory = directory
        self.prefix = prefix
        self.token = token
        self.schema = schema
        self.group_bytes = group_bytes
        self._path: str | None = None
        self._fh: Any = None
        self._sink: ParquetSink | None = None

    def start_bundle(self) -> None:
        self._path = self._fh = self._sink = None

    def process(self, record: Any) -> None:
        if self._sink is None:
            self._path = FileSystems.join(self.directory, _temp_name(self.prefix, self.token))
            self._fh = FileSystems.create(self._path, mime_type="application/octet-stream",
                                          compression_type=CompressionTypes.UNCOMPRESSED)
            self._sink = ParquetSink(self.schema, self.group_bytes)
            self._sink.open(self._fh)
        self._sink.write(record)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._sink is None:
            return
        self._sink.flush()
        self._fh.close()
        path = self._path
        self._path = self._fh = self._sink = None
        yield WindowedValue(path, MIN_TIMESTAMP, (GlobalWindow(),))


class _FinalizeParts(beam.DoFn):
    """Rename the committed bundles' temporary files to their final names; delete the
    temporary files of this sink that no committed bundle wrote (failed attempts)."""

    def __init__(self, directory: str, prefix: str, token: str) -> None:
        self.directory = directory
        self.prefix = prefix
        self.token = token

    def process(self, _: Any, parts: list[str]) -> None:
        keep = set(parts)
        src, dst = [], []
        for p in sorted(keep):
            final = FileSystems.join(self.directory, FileSystems.split(p)[1][1:]
                                     .removesuffix(".tmp"))
            if FileSystems.exists(p):  # absent: a retried finalizer already moved it
                src.append(p)
                dst.append(final)
        if src:
            FileSystems.rename(src, dst)
        pattern = FileSystems.join(self.directory, f".{self.prefix}-{self.token}-*.parquet.tmp")
        stale = [m.path for r in FileSystems.match([pattern]) for m in r.metadata_list
                 if m.path not in keep]
        if stale:
            FileSystems.delete(stale)


class _WriteBundleFile(beam.DoFn):
    """Write each bundle's elements to one Parquet file (for the few end-of-input rows)."""

    def __init__(self, directory: str, prefix: str, schema: pa.Schema) -> None:
        self.directory = directory
        self.prefix = prefix
        self.schema = schema
        self._items: list[Any] = []

    def start_bundle(self) -> None:
        self._items = []

    def process(self, element: Any) -> None:
        self._items.append(element)

    def finish_bundle(self) -> None:
        if not self._items:
            return
        batches = [predictions_batch(x) for x in self._items if isinstance(x, PredictionBlock)]
        rows = [x for x in self._items if not isinstance(x, PredictionBlock)]
        if rows:
            batches.append(rows_batch(rows, self.schema))
        name = f"{self.prefix}-{uuid.uuid4().hex}.parquet"
        path = FileSystems.join(self.directory, name)
        with FileSystems.create(path, mime_type="application/octet-stream",
                                compression_type=CompressionTypes.UNCOMPRESSED) as fh:
            with pq.ParquetWriter(fh, self.schema) as w:
                for b in batches:
                    w.write_batch(b)
        self._items = []


class _SplitEndOfTime(beam.DoFn):
    END = "end_of_time"

    def process(self, element: Any,
                timestamp: Any = beam.DoFn.TimestampParam) -> Iterator[Any]:
        if timestamp >= GlobalWindow().max_timestamp():
            yield beam.pvalue.TaggedOutput(self.END, element)
        else:
            yield element

