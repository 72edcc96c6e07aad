"""The live stream's Committer: Parquet output files, snapshots and the status file.

:class:`Committer` (one per worker, not keyed) appends rows to pending Parquet files of the
current epoch, keeps the newest state of each touched model and the reader's offsets, and,
when ``snapshot_every`` records or ``snapshot_seconds`` have passed (checked at each reader
round's progress, and at ``finish_bundle``, where the stream also drains): closes the files,
commits states + offsets as one snapshot epoch
(:class:`~kernelstream.engine.snapshot.SnapshotStore`), then publishes the files. Without a
checkpoint directory the same happens minus the commit, so every output file is complete and
readable while the job runs. The slow half runs on one commit thread (see the class).

It is the stream's only stateful end and its exactly-once boundary, with its own threading,
so it lives apart from the graph (:mod:`kernelstream.transforms.stream`) that feeds it.
"""

from __future__ import annotations

import json
import operator
import os
import time
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam

from kernelstream.engine.events import StreamEngine
from kernelstream.engine.stream_rows import DICTIONARY_COLUMNS, OUTPUTS, Rows
from kernelstream.transforms.kafka_rows import kafka_writer
from kernelstream.transforms.stream_job import (
    PROGRESS_TAG,
    STATES_TAG,
    StreamJob,
    crash_point,
    draining,
)

# The status file (progress lines, benchmarks) is rewritten at most this often: ~0.2 ms a
# time, and a rate measured from it over a sub-second drain needs several points.
STATUS_EVERY_S = 0.1
ROW_GROUP = 8192  # rows buffered per output before they become a Parquet row group
CONVERT_SLICE = 256  # rows converted to Arrow per call on the commit thread (see _write_rows)


# A snapshot store opened by the launching process, for a Committer running in that same
# process (FnApiRunner, LOOPBACK workers): flock belongs to the open file, so the worker must
# use the launcher's store rather than lock the directory a second time.
_LOCAL_STORES: dict[str, Any] = {}


def register_local_store(directory: str, store: Any) -> None:
    _LOCAL_STORES[os.path.realpath(directory)] = store


def unregister_local_store(directory: str) -> None:
    _LOCAL_STORES.pop(os.path.realpath(directory), None)


def _freeze_startup_heap() -> None:
    """Leave the start-up heap out of Python's cyclic garbage collections from now on.

    Beam, pyarrow, the runner and the Kafka clients leave ~100k tracked objects; a full
    collection walks all of them in one go, holding the GIL for 40-120 ms, and the stream's
    allocations trigger one every few seconds: those pauses were its worst event latencies.
    ``gc.freeze`` moves every object alive now to a generation collections skip; what the
    stream allocates afterwards is collected as before. (Garbage first, so none is frozen.)"""
    import gc

    gc.collect()
    gc.freeze()


@dataclass
class _Totals:
    records: int = 0  # offsets consumed (the reader's progress)
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTPUTS, 0))
    published: int = 0  # rows in published files
    last_ts_ms: int | None = None  # newest record timestamp seen
    # labels the models learnt and the seconds they spent in learner calls (their states'
    # counters, summed): learning throughput, which waits for records do not dilute
    learnt: int = 0
    learn_seconds: float = 0.0
    models: dict[str, tuple[int, float]] = field(default_factory=dict)

    def model(self, key: str, learnt: int, seconds: float) -> None:
        """A model's counters as its state was handed over (they only grow)."""
        n0, s0 = self.models.get(key, (0, 0.0))
        self.models[key] = (learnt, seconds)
        self.learnt += learnt - n0
        self.learn_seconds += seconds - s0

    def as_doc(self) -> dict[str, Any]:
        return {"records": self.records, "rows": dict(self.rows), "published": self.published,
                "last_ts_ms": self.last_ts_ms, "learnt": self.learnt,
                "learn_seconds": self.learn_seconds}


# The column of an output's rows that holds the timestamp of the record that made the row.
_RECORD_TIME = {"predictions": "event_time_ms", "outcomes": "label_time_ms"}


def _warm_up(schemas: dict[str, Any]) -> None:
    """Convert and write a row of each columnar output once, to nowhere: pyarrow's first
    conversion and Parquet write in a process take ~40 ms (kernel registry, writer set-up),
    which would otherwise come with the first rows of the stream, on the commit thread,
    holding the GIL the stream's thread needs."""
    import io

    import pyarrow.parquet as pq

    from kernelstream.engine.stream_rows import COLUMNAR, RowBlock

    for name, (fields, _, _) in COLUMNAR.items():
        types = [str(schemas[name].field(f).type) for f in fields]
        cols = [["x"] if t == "string" else [True] if t == "bool" else [0] for t in types]
        table = Rows([RowBlock(name, "k", "c", None, cols)]).table(schemas[name])
        with pq.ParquetWriter(io.BytesIO(), schemas[name],
                              use_dictionary=DICTIONARY_COLUMNS[name]) as w:
            w.write_table(table)


class Committer(beam.DoFn):
    """Pending output files, snapshots and the status file (see the module docstring).
    Elements: ``(output name, rows)``, ``("states", (key, ModelState))`` and
    ``("progress", ReadProgress)``.

    The slow half of the work runs on one commit thread, in order, so the stream goes on
    reading while it runs: turning buffered rows into Parquet row groups, and a snapshot's
    wait for Kafka, the models' encoding, file closing, commit (fsyncs) and publishing
    (~100-300 ms, and seconds for models remembering an hour of ids, that would otherwise
    stall every record behind it). A snapshot's *cut* is taken here, between elements: the
    states detached (``StreamEngine.cut_state``), the offsets copied, the rows of its epoch
    handed over; rows that come later go to the next epoch's files. One snapshot is in
    flight at a time (a due snapshot is put off while the previous one commits, see
    :meth:`_snapshot`); at drain the last one is waited for, and an error on the commit
    thread fails the run at the next reader progress."""

    def __init__(self, job: StreamJob) -> None:
        self.job = job
        self.store: Any = None
        self.own_store = False

    # -- life cycle ------------------------------------------------------------------------
    def setup(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from kernelstream.engine.stream_rows import stream_schemas

        job = self.job
        self.schemas = stream_schemas()
        _warm_up(self.schemas)
        if job.checkpoint is not None:
            self.store = _LOCAL_STORES.get(os.path.realpath(job.checkpoint))
            if self.store is None:
                from kernelstream.engine.snapshot import SnapshotStore

                self.store = SnapshotStore.open(job.checkpoint)
                self.own_store = True
            self.committed = self.store.head
        else:
            self.committed = None
        self.epoch = (self.committed or 0) + 1  # the epoch whose files rows go to now
        self.engine = StreamEngine(job.spec)
        self.offsets = job.offsets()
        # the last record read of each partition (kept from the resumed snapshot until the
        # reader reads one), committed with the offsets; whether each reader hears the broker
        self.marks: dict[tuple[str, int], Any] = (
            {} if self.store is None else self.store.fingerprints())
        self.reachable: dict[tuple[str, int], bool] = {}
        self.states: dict[str, Any] = {}
        self.pending: dict[str, int] = {}  # model key -> pending events (for the status)
        self.buffers: dict[str, Rows] = {n: Rows() for n in OUTPUTS}
        self.writers: dict[tuple[str, int], Any] = {}  # commit thread only
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="kernelstream-commit")
        self.tasks: list[Any] = []  # futures of row-group writes (their errors)
        self.inflight: Any = None  # the future of the snapshot being committed
        self.in_epoch = 0  # rows handed to this epoch's pending files
        self.since_records = 0
        self.last_snapshot = time.monotonic()
        self.last_status = 0.0
        self.started = time.time()
        self.totals = _Totals()
        self.records_at: float | None = None  # wall time the records count last moved
        self.changed = False
        # Learn hands over a model's state right after its rows (models held in this worker),
        # so a snapshot can be cut at any reader progress, mid-bundle; with models as bytes in
        # Beam state the states come at Learn's finish_bundle, and so do the snapshots
        self.cut_anywhere = not job.state_in_beam
        crash_point("start")
        self._status(force=True)
        _freeze_startup_heap()

    def teardown(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.shutdown(wait=True)
            del self.pool
        for w in self.writers.values():
            w.close()  # files of an uncommitted epoch: the next start deletes them
        self.writers = {}
        if self.own_store and self.store is not None:
            self.store.close()
            self.store = None

    # -- elements --------------------------------------------------------------------------
    def process(self, item: tuple[str, Any]) -> None:
        tag, value = item
        if tag == PROGRESS_TAG:
            tp = (value.topic, value.partition)
            self.reachable[tp] = value.broker_reachable
            if value.last_record is not None:
                self.marks[tp] = value.last_record
            before = self.offsets.get(tp)
            if before is None or value.next_offset > before:
                moved = 0 if before is None else value.next_offset - before
                self.since_records += moved
                self.totals.records += moved
                self.records_at = time.time()
                self.offsets[tp] = value.next_offset
                self.changed = True
            if self.cut_anywhere and value.last:
                # the group's offsets cover every record it emitted, those have been learnt,
                # their rows are here, and Learn has passed on the state of every model they
                # touched: a consistent cut
                self._collect()
                if self.changed and self._due():
                    self._snapshot()
                self._status()
            return
        if tag == STATES_TAG:
            key, st = value
            if self.store is not None:
                self.states[key] = st
            self.pending[key] = len(st.pending)
            self.totals.model(key, st.learnt, st.seconds)
            self.changed = True
            return
        if not value:
            return
        buf = self.buffers[tag]
        buf.extend(value)
        self.totals.rows[tag] += len(value)
        self.changed = True
        field = _RECORD_TIME.get(tag)  # the newest record's timestamp, for the lag
        if field is not None:
            ms = (value.max_of(field) if isinstance(value, Rows)
                  else max(map(operator.itemgetter(field), value)))
            if self.totals.last_ts_ms is None or ms > self.totals.last_ts_ms:
                self.totals.last_ts_ms = ms
        if len(buf) >= ROW_GROUP:
            self._write(tag)

    def finish_bundle(self) -> None:
        self._collect()
        drain = draining(self.job)
        if self.changed and (self._due() or drain):
            self._snapshot(wait=drain)
        elif drain:
            self._settle()
        self._status()

    def _due(self) -> bool:
        return (self.since_records >= self.job.snapshot_every
                or time.monotonic() - self.last_snapshot >= self.job.snapshot_seconds)

    # -- files and snapshots ---------------------------------------------------------------
    def _write(self, name: str) -> None:
        """Hand the buffered rows of ``name`` to the commit thread (a row group of this
        epoch's pending file)."""
        rows = self.buffers[name]
        if not rows:
            return
        self.buffers[name] = Rows()
        self.in_epoch += len(rows)
        self.tasks.append(self.pool.submit(self._write_rows, name, self.epoch, rows))

    def _write_rows(self, name: str, epoch: int, rows: Rows) -> None:
        import pyarrow.parquet as pq

        from kernelstream.engine.snapshot_outputs import pending_path

        schema = self.schemas[name]
        w = self.writers.get((name, epoch))
        if w is None:
            path = pending_path(self.job.out, name, epoch, self.job.part)
            w = self.writers[(name, epoch)] = pq.ParquetWriter(
                path, schema, use_dictionary=DICTIONARY_COLUMNS[name])
        # pyarrow converts Python rows holding the GIL, and a C call is never preempted: row
        # dicts go in slices, so the stream's thread gets the GIL back every ~2 ms instead of
        # once per 8192 rows (~40 ms); column blocks convert without a Python object per
        # value. (Encoding the row group releases the GIL.)
        table = rows.table(schema, CONVERT_SLICE)
        w.write_table(table, row_group_size=max(1, len(rows)))

    def _collect(self) -> None:
        """Raise the commit thread's errors; take in a finished snapshot."""
        if self.tasks:
            left = []
            for f in self.tasks:
                if f.done():
                    f.result()
                else:
                    left.append(f)
            self.tasks = left
        if self.inflight is not None and self.inflight.done():
            epoch, rows = self.inflight.result()
            self.inflight = None
            self.committed = epoch
            self.totals.published += rows
            self._status(force=True)

    def _settle(self) -> None:
        """Wait for everything handed to the commit thread."""
        for f in self.tasks:
            f.result()
        self.tasks = []
        if self.inflight is not None:
            self.inflight.result()  # raises its error
            self._collect()

    def _snapshot(self, wait: bool = False) -> None:
        """Cut a snapshot here and commit it on the commit thread (``wait``: and wait for
        it). While the previous one is still being committed it is deferred to a later
        round's end, unless ``wait`` or the stream has read two intervals
        (``snapshot_every``) since the last cut: then it waits, so snapshots keep to their
        interval and a restart never replays more than that."""
        if self.inflight is not None:
            if not wait and self.since_records < 2 * self.job.snapshot_every:
                return  # the next round's end tries again
            self._settle()
        for name in OUTPUTS:
            self._write(name)
        cuts = None  # encoded on the commit thread (an hour of remembered ids: seconds)
        if self.store is not None:
            cuts = {k: self.engine.cut_state(st) for k, st in self.states.items()}
        info = dict(self.job.info)
        info["totals"] = self.totals.as_doc()
        writer = kafka_writer(self.job.control)
        sent = None if writer is None else writer.sent()
        self.inflight = self.pool.submit(self._commit, self.epoch, cuts, dict(self.offsets),
                                         info, writer, sent, self.in_epoch, dict(self.marks))
        self.epoch += 1
        self.in_epoch = 0
        self.states = {}
        self.since_records = 0
        self.changed = False
        self.last_snapshot = time.monotonic()
        if wait:
            self._settle()

    def _commit(self, epoch: int, cuts: dict[str, Any] | None,
                offsets: dict[tuple[str, int], int], info: dict[str, Any], writer: Any,
                sent: Any, rows: int, marks: dict[tuple[str, int], Any] | None = None,
                ) -> tuple[int, int]:
        """On the commit thread: the snapshot of ``epoch`` (its rows already written)."""
        from kernelstream.engine.snapshot_outputs import publish

        if writer is not None:
            writer.wait(sent)  # nothing committed that has not reached Kafka
        for key in [k for k in self.writers if k[1] == epoch]:
            self.writers.pop(key).close()  # complete files (footer) before the commit
        crash_point("before-commit")
        if self.store is not None:
            assert cuts is not None
            states = {k: c.encode() for k, c in cuts.items()}
            committed = self.store.commit(states, offsets, info, marks)
            if committed != epoch:
                raise RuntimeError(f"snapshot epoch {committed} committed as {epoch}: another "
                                   "writer in this checkpoint directory?")
        crash_point("after-commit")
        publish(self.job.out, OUTPUTS, epoch, remove_uncommitted=False)
        return epoch, rows

    def _status(self, force: bool = False) -> None:
        """The status file the launcher's progress lines read (throttled; atomic)."""
        now = time.monotonic()
        if not force and now - self.last_status < STATUS_EVERY_S:
            return
        self.last_status = now
        wall = time.time()
        last = self.totals.last_ts_ms
        # records_at: when ``records`` was reached (the file is rewritten at most every
        # STATUS_EVERY_S, so its time can be later), e.g. for measuring rates
        doc = {"time": wall, "started": self.started, "pid": os.getpid(),
               "records_at": self.records_at,
               # now - newest record timestamp processed
               "lag_ms": None if last is None else max(0, int(wall * 1000) - last),
               "epoch": self.committed,
               "pending": sum(self.pending.values()),
               "buffered": self.in_epoch + sum(len(b) for b in self.buffers.values()),
               # every reader hears from the broker (None before the first progress)
               "broker_reachable": (all(self.reachable.values()) if self.reachable
                                    else None),
               **self.totals.as_doc()}
        tmp = f"{self.job.status_path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, self.job.status_path)
        except OSError:
            pass  # progress display only

