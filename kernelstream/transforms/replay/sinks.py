"""Beam Parquet sinks, for batch and streaming pipelines (schemas and record batches are the
engine's: ``kernelstream.engine.replay.outputs``).

A :class:`ParquetSink` streams record batches through ``pyarrow.parquet.ParquetWriter`` and
writes the footer when its file is finished. Metrics and dead-letter rows (few) are buffered
dicts.

Two ways of writing files:

* bounded input (the replay; :class:`WriteOutputs`, or :class:`WriteParquet` for one
  output): each bundle writes its records to one temporary file per output and emits the
  names; once the input is complete a finalizing step (the list of names as a side input)
  renames the files of committed bundles to ``<prefix>-<token>-<uuid>.parquet`` and deletes
  the temporary files of failed attempts, so a retried bundle leaves no duplicate rows. A
  light DoFn per input and one finalizer for all of a run's outputs instead of
  ``fileio.WriteToFiles``' dozen transforms per output: pipeline construction and start-up
  are a short replay's main fixed cost.
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

from kernelstream.engine.replay.blocks import PredictionBlock
from kernelstream.engine.replay.outputs import PredictionWriter, predictions_batch, rows_batch


class ParquetSink(fileio.FileSink):
    """Writes ``PredictionBlock`` s or dict rows to one Parquet file of ``schema``.
    ``group_bytes``: end a row group once its rows' bytes and strings reach this size (the
    checkpoint's states, read back one row group at a time)."""

    ROW_BUFFER = 8192

    def __init__(self, schema: pa.Schema, group_bytes: int | None = None) -> None:
        self.schema = schema
        self.group_bytes = group_bytes
        self._writer: pq.ParquetWriter | None = None
        self._blocks: PredictionWriter | None = None
        self._rows: list[dict[str, Any]] = []
        self._size = 0

    def open(self, fh: Any) -> None:
        self._writer = pq.ParquetWriter(fh, self.schema)
        self._blocks = PredictionWriter(self._writer)
        self._rows = []

    def write(self, record: Any) -> None:
        assert self._writer is not None and self._blocks is not None
        if isinstance(record, PredictionBlock):
            self._blocks.write(record)
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
        if self._blocks is not None:
            self._blocks.flush()
            self._blocks = None
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
        return _write_bounded((pcoll,), {"out": (self.directory, self.schema)}, _OneOutput(),
                              self.prefix, self.group_bytes)


class _OneOutput:
    """The route of a single-output :class:`WriteOutputs`."""

    def __call__(self, record: Any) -> str:
        return "out"


class WriteOutputs(beam.PTransform):
    """Bounded PCollections → Parquet files of several outputs, through one sink: each
    record goes to the output ``route(record)`` names (a key of ``outputs``: its directory
    and schema), and each bundle writes at most one file per output.

    Apply to one PCollection or a tuple of them. Every bundle streams its records into hidden
    temporary files and emits their names; once the input is complete a finalizing step (the
    names as a side input) renames the committed bundles' files to
    ``<prefix>-<token>-<uuid>.parquet`` and deletes the temporary files of failed attempts,
    so a retried bundle leaves no duplicate rows. One light writing step per input and one
    finalizer for all the outputs of a run: each transform of a pipeline costs its
    construction, translation and bundle set-up, a fixed cost that dominates a short replay.

    ``finalize=False`` leaves the finalizing step (a stage of its own, with a side input per
    input) out of the pipeline: the caller calls :meth:`finalize` once the pipeline has
    finished. Only for runners that never retry a bundle (a failed bundle fails the run),
    such as the in-process FnApiRunner: there every temporary file of the sink is a
    committed bundle's.
    """

    def __init__(self, outputs: dict[str, tuple[str, pa.Schema]], route: Any,
                 prefix: str = "part", group_bytes: int | None = None,
                 finalize: bool = True) -> None:
        super().__init__()
        self.outputs = {k: (str(d), s) for k, (d, s) in outputs.items()}
        self.route = route  # picklable: record -> output name
        self.prefix = prefix
        self.group_bytes = group_bytes
        self.in_pipeline = finalize
        # A token per transform instance: the finalizer touches only its own files.
        self.token = uuid.uuid4().hex[:12]

    def expand(self, pcolls: Any) -> Any:
        if isinstance(pcolls, beam.PCollection):
            pcolls = (pcolls,)
        return _write_bounded(tuple(pcolls), self.outputs, self.route, self.prefix,
                              self.group_bytes, self.token, self.in_pipeline)

    def finalize(self) -> None:
        """Give every temporary file of this sink its final name (``finalize=False``, after
        the pipeline has finished without error)."""
        finalize_parts(_directories(self.outputs), self.prefix, self.token, None)


def _write_bounded(pcolls: tuple[beam.PCollection, ...],
                   outputs: dict[str, tuple[str, pa.Schema]], route: Any, prefix: str,
                   group_bytes: int | None, token: str | None = None,
                   finalize: bool = True) -> Any:
    """The transforms of :class:`WriteOutputs` (also :class:`WriteParquet`'s, for bounded
    input), applied in the caller's ``expand``. One writing step per input, fused with the
    step that makes the input (a Flatten first would make the FnApiRunner buffer every
    record until the input ends). Without ``finalize``: the writing steps' outputs."""
    # A token per transform instance: the finalizer deletes only its own leftovers.
    token = token or uuid.uuid4().hex[:12]
    parts = []
    for i, pc in enumerate(pcolls):
        sfx = "" if len(pcolls) == 1 else str(i)
        parts.append(_globally_windowed(pc, f"GlobalWindow{sfx}")
                     | f"WriteParts{sfx}" >> beam.ParDo(_WriteBundleParts(
                         outputs, route, prefix, token, group_bytes)))
    if not finalize:
        return tuple(parts)
    # The side inputs are complete only when every bundle of the input has committed.
    return (pcolls[0].pipeline
            | "Finalize" >> beam.Impulse()
            | "RenameParts" >> beam.ParDo(_FinalizeParts(_directories(outputs), prefix, token),
                                          *(beam.pvalue.AsList(p) for p in parts)))


def _directories(outputs: dict[str, tuple[str, pa.Schema]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(d for d, _ in outputs.values()))


def _globally_windowed(pcoll: beam.PCollection, label: str) -> beam.PCollection:
    """``pcoll`` in the global window with the default trigger (most inputs already are:
    then no transform is added)."""
    if pcoll.windowing.is_default():
        return pcoll
    return pcoll | label >> beam.WindowInto(GlobalWindows())


def _temp_name(prefix: str, token: str) -> str:
    # Hidden and without the .parquet suffix: readers never pick up an unfinished file.
    return f".{prefix}-{token}-{uuid.uuid4().hex}.parquet.tmp"


class _WriteBundleParts(beam.DoFn):
    """Write each bundle's records to one temporary Parquet file per output (opened on the
    output's first record, record batches streamed, footer at the end of the bundle) and
    emit their paths."""

    def __init__(self, outputs: dict[str, tuple[str, pa.Schema]], route: Any, prefix: str,
                 token: str, group_bytes: int | None = None) -> None:
        self.outputs = outputs
        self.route = route
        self.prefix = prefix
        self.token = token
        self.group_bytes = group_bytes
        self._open: dict[str, tuple[str, Any, ParquetSink]] = {}

    def start_bundle(self) -> None:
        self._open = {}

    def process(self, record: Any) -> None:
        name = self.route(record)
        got = self._open.get(name)
        if got is None:
            directory, schema = self.outputs[name]
            path = FileSystems.join(directory, _temp_name(self.prefix, self.token))
            fh = FileSystems.create(path, mime_type="application/octet-stream",
                                    compression_type=CompressionTypes.UNCOMPRESSED)
            sink = ParquetSink(schema, self.group_bytes)
            sink.open(fh)
            got = self._open[name] = (path, fh, sink)
        got[2].write(record)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        files, self._open = self._open, {}
        for path, fh, sink in files.values():
            sink.flush()
            fh.close()
            yield WindowedValue(path, MIN_TIMESTAMP, (GlobalWindow(),))


class _FinalizeParts(beam.DoFn):
    """Rename the committed bundles' temporary files to their final names; delete the
    temporary files of this sink that no committed bundle wrote (failed attempts)."""

    def __init__(self, directories: tuple[str, ...], prefix: str, token: str) -> None:
        self.directories = directories
        self.prefix = prefix
        self.token = token

    def process(self, _: Any, *parts: list[str]) -> None:
        finalize_parts(self.directories, self.prefix, self.token,
                       {p for ps in parts for p in ps})


def finalize_parts(directories: tuple[str, ...], prefix: str, token: str,
                   keep: set[str] | None) -> None:
    """Rename the temporary files ``keep`` (None: every temporary file of ``token``) to their
    final names and delete the other temporary files of ``token`` (failed attempts)."""
    # every file of the directories, filtered here: an object store lists by a prefix that
    # ends at the first wildcard, and not every store lists a prefix that is not a directory
    mine = f".{prefix}-{token}-"
    found = [m.path for r in FileSystems.match([FileSystems.join(d, "*") for d in directories])
             for m in r.metadata_list
             if (n := FileSystems.split(m.path)[1]).startswith(mine) and n.endswith(".tmp")]
    if keep is None:
        keep = set(found)
    src, dst = [], []
    for p in sorted(keep):
        directory, name = FileSystems.split(p)
        if FileSystems.exists(p):  # absent: a retried finalizer already moved it
            src.append(p)
            dst.append(FileSystems.join(directory, name[1:].removesuffix(".tmp")))
    if src:
        FileSystems.rename(src, dst)
    stale = [p for p in found if p not in keep]
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

