"""The live stream's Committer: Parquet output files, snapshots and the status file.

:class:`Committer` (one per worker, not keyed) appends rows to pending Parquet files of the
current epoch, keeps the newest state of each touched model and the reader's offsets, and,
when ``snapshot_every`` records or ``snapshot_seconds`` have passed (checked at each reader
round's progress, and at ``finish_bundle``; at a drain, the last ``finish_bundle`` always
snapshots, at the positions the reader claimed: a drain is a checkpoint): closes the files,
commits states + offsets as one snapshot epoch
(:class:`~kernelstream.engine.live.snapshot.store.SnapshotStore`), then publishes the files. Without
a checkpoint directory the same happens minus the commit, so every output file is complete and
readable while the job runs. The slow half runs on one commit thread (see the class).

It is the stream's only stateful end and its exactly-once boundary, with its own threading,
so it lives apart from the graph (:mod:`kernelstream.transforms.live.stream`) that feeds it.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

import apache_beam as beam

from kernelstream.engine.live.accounting import Accounting
from kernelstream.engine.live.clock import CLOCK_KEY
from kernelstream.engine.live.engine import StreamEngine
from kernelstream.engine.live.rows import (
    COLUMNAR,
    DICTIONARY_COLUMNS,
    OUTPUTS,
    RowBlock,
    Rows,
    stream_schemas,
)
from kernelstream.engine.live.snapshot.outputs import (
    UnreadableOutputError,
    pending_path,
    publish,
    seal,
)
from kernelstream.engine.live.snapshot.store import SnapshotStore
from kernelstream.engine.live.state import Forgotten
from kernelstream.transforms.live.kafka_rows import kafka_writer
from kernelstream.transforms.live.stream_job import (
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


class EpochWriteError(RuntimeError):
    """A file of an epoch (an output file, or the snapshot) could not be written whole: that
    epoch is not committed, nor any later one; the run fails with this one line."""


def _why(exc: BaseException) -> str:
    """An error's reason in few words (pyarrow's OSErrors repeat it: "[Errno 28] Error
    writing bytes to file. Detail: [errno 28] No space left on device")."""
    if isinstance(exc, OSError) and exc.errno:
        return f"[Errno {exc.errno}] {os.strerror(exc.errno)}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


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
    # the run's accounting (records, offsets, rows, ..., and ``all`` runs on the checkpoint)
    counts: Accounting = field(default_factory=lambda: Accounting({}))
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

    def forget(self, key: str, gone: Forgotten) -> None:
        """A model forgotten: its last counters folded in, its key started over."""
        self.counts.forget(key, gone.counts, gone.restored)
        n0, s0 = self.models.pop(key, (0, 0.0))
        self.learnt += gone.counts["outcomes"] - n0
        self.learn_seconds += gone.seconds - s0

    def as_doc(self) -> dict[str, Any]:
        return {**self.counts.run(), "all": self.counts.all(), "rows": dict(self.rows),
                "published": self.published, "last_ts_ms": self.last_ts_ms,
                "learnt": self.learnt, "learn_seconds": self.learn_seconds}


# The column of an output's rows that holds the timestamp of the record that made the row.
_RECORD_TIME = {"predictions": "event_time_ms", "outcomes": "label_time_ms"}


def _warm_up(schemas: dict[str, Any]) -> None:
    """Convert and write a row of each columnar output once, to nowhere: pyarrow's first
    conversion and Parquet write in a process take ~40 ms (kernel registry, writer set-up),
    which would otherwise come with the first rows of the stream, on the commit thread,
    holding the GIL the stream's thread needs."""
    import io

    import pyarrow.parquet as pq

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
    thread fails the run at the next reader progress.

    An epoch commits only once every one of its files is whole and durable: the pending
    files closed, fsynced and read back with the row counts handed to them
    (:func:`~kernelstream.engine.live.snapshot.outputs.seal`), their folders fsynced, and the
    snapshot written and fsynced by the store. The first error on the commit thread (a
    full disk, say) is kept (``failed``): the commit thread writes and commits nothing after
    it, and the stream's thread raises it (:class:`EpochWriteError`, one line) at its next
    look."""

    def __init__(self, job: StreamJob) -> None:
        self.job = job
        self.store: Any = None
        self.own_store = False

    # -- life cycle ------------------------------------------------------------------------
    def setup(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        job = self.job
        self.schemas = stream_schemas()
        _warm_up(self.schemas)
        if job.checkpoint is not None:
            self.store = _LOCAL_STORES.get(os.path.realpath(job.checkpoint))
            if self.store is None:
                self.store = SnapshotStore.open(job.checkpoint)
                self.own_store = True
            self.committed = self.store.head
        else:
            self.committed = None
        self.epoch = (self.committed or 0) + 1  # the epoch whose files rows go to now
        self.engine = StreamEngine(job.spec)
        self.offsets = job.offsets()
        self.highwater: dict[tuple[str, int], int] = {}  # the reader's, for ``behind``
        # the last record read of each partition (kept from the resumed snapshot until the
        # reader reads one), committed with the offsets; whether each reader hears the broker
        self.marks: dict[tuple[str, int], Any] = (
            {} if self.store is None else self.store.fingerprints())
        self.reachable: dict[tuple[str, int], bool] = {}
        self.states: dict[str, Any] = {}
        self.buffers: dict[str, Rows] = {n: Rows() for n in OUTPUTS}
        self.writers: dict[tuple[str, int], Any] = {}  # commit thread only
        self.handed: dict[str, int] = dict.fromkeys(OUTPUTS, 0)  # this epoch's rows, by output
        self.failed: BaseException | None = None  # the commit thread's first error
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="kernelstream-commit")
        self.tasks: list[Any] = []  # futures of row-group writes (their errors)
        self.inflight: Any = None  # the future of the snapshot being committed
        self.in_epoch = 0  # rows handed to this epoch's pending files
        self.committing = 0  # rows of the snapshot being committed (published once it is)
        self.since_records = 0
        self.last_snapshot = time.monotonic()
        self.last_status = 0.0
        self.started = time.time()
        # the counts of the earlier runs on the checkpoint, as of the snapshot resumed from
        # (None: a snapshot older than these counts)
        base: dict[str, Any] | None = {}
        if self.committed is not None:
            base = (self.store.info().get("totals") or {}).get("all")
        self.totals = _Totals(Accounting(base))
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
            # files of an uncommitted epoch (the next start deletes them): their footers may
            # not fit on a full disk, and a teardown error would be Beam's traceback
            with contextlib.suppress(Exception):
                w.close()
        self.writers = {}
        if self.own_store and self.store is not None:
            self.store.close()
            self.store = None

    # -- elements --------------------------------------------------------------------------
    def process(self, item: tuple[str, Any]) -> None:
        tag, value = item
        if tag == PROGRESS_TAG:
            tp = (value.topic, value.partition)
            if value.highwater is not None:
                self.highwater[tp] = value.highwater
            self.reachable[tp] = value.broker_reachable
            if value.last_record is not None:
                self.marks[tp] = value.last_record
            before = self.offsets.get(tp)
            moved = 0
            if before is None or value.next_offset > before:
                moved = 0 if before is None else value.next_offset - before
                self.since_records += moved
                self.records_at = time.time()
                self.offsets[tp] = value.next_offset
                self.changed = True
            self.totals.counts.progress(moved, value.records)
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
            if key == CLOCK_KEY:  # the router's clock (engine.live.clock): no model
                return
            if isinstance(st, Forgotten):  # a tombstone: the key leaves the snapshot
                self.totals.forget(key, st)
                self.changed = True
                return
            self.totals.counts.state(key, st)
            self.totals.model(key, st.learnt, st.seconds)
            self.changed = True
            return
        if not value:
            return
        buf = self.buffers[tag]
        buf.extend(value)
        self.totals.rows[tag] += len(value)
        self.totals.counts.rows(tag, value)
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
        self.handed[name] += len(rows)
        self.tasks.append(self.pool.submit(self._write_rows_or_fail, name, self.epoch, rows))

    def _fail(self, exc: Exception, what: str) -> NoReturn:
        """On the commit thread, in an ``except``: keep its first error (nothing is written
        or committed after it) and raise it, as :class:`EpochWriteError` (``what``: the
        file) if it is the file system's."""
        if not isinstance(exc, OSError | UnreadableOutputError):
            if self.failed is None:
                self.failed = exc
            raise exc
        err = EpochWriteError(f"{what}: {_why(exc)}")
        if self.failed is None:
            self.failed = err
        raise err from exc

    def _write_rows(self, name: str, epoch: int, rows: Rows) -> None:
        import pyarrow.parquet as pq

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

    def _write_rows_or_fail(self, name: str, epoch: int, rows: Rows) -> None:
        """On the commit thread: :meth:`_write_rows`, unless an error came before (nothing
        is written after it); its error kept (see :meth:`_fail`)."""
        if self.failed is not None:
            return  # raised by the task that failed, and by every commit after it
        try:
            self._write_rows(name, epoch, rows)
        except Exception as exc:
            w = self.writers.get((name, epoch))
            path = os.path.join(self.job.out, name, ".pending") if w is None else w.where
            self._fail(exc, f"cannot write the output file {path} (epoch {epoch} not "
                       "committed)")

    def _collect(self) -> None:
        """Raise the commit thread's errors; take in a finished snapshot."""
        if self.failed is not None:
            raise self.failed
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
            self.committing = 0
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
            cuts = {k: st.cut() if k == CLOCK_KEY or isinstance(st, Forgotten)
                    else self.engine.cut_state(st) for k, st in self.states.items()}
        info = dict(self.job.info)
        info["totals"] = self.totals.as_doc()
        writer = kafka_writer(self.job.control)
        if writer is None and self.job.kafka_out is not None:
            # a snapshot must wait for its rows' delivery (and commit their transaction):
            # every item passes the writer first, so it runs here unless a runner split them
            raise RuntimeError("--kafka-out: the Kafka writer runs in another worker process "
                               "than the snapshots' Committer; this runner cannot send the "
                               "stream's outputs to Kafka (run it in one process)")
        sent = None if writer is None else writer.sent()
        self.inflight = self.pool.submit(self._commit, self.epoch, cuts, dict(self.offsets),
                                         info, writer, sent, self.in_epoch, self.handed,
                                         dict(self.marks))
        self.epoch += 1
        self.committing = self.in_epoch  # still unpublished: counted as buffered until then
        self.in_epoch = 0
        self.handed = dict.fromkeys(OUTPUTS, 0)
        self.states = {}
        self.since_records = 0
        self.changed = False
        self.last_snapshot = time.monotonic()
        if wait:
            self._settle()

    def _commit(self, epoch: int, cuts: dict[str, Any] | None,
                offsets: dict[tuple[str, int], int], info: dict[str, Any], writer: Any,
                sent: Any, rows: int, handed: dict[str, int],
                marks: dict[tuple[str, int], Any] | None = None) -> tuple[int, int]:
        """On the commit thread: the snapshot of ``epoch`` (its rows already handed to the
        writers; ``handed``: how many of each output). Nothing is committed after an error
        of this thread (``failed``), nor before the epoch's files are sealed."""
        if self.failed is not None:
            raise self.failed
        what = f"epoch {epoch} not committed"
        try:
            if writer is not None:
                writer.wait(sent)  # nothing committed that has not reached Kafka
            for name, n in handed.items():
                if n:
                    w = self.writers.pop((name, epoch))
                    what = f"cannot write the output file {w.where} (epoch {epoch} not committed)"
                    w.close()  # complete files (footer) before the commit
                    seal(w.where, n)  # durable and whole, or no commit
            crash_point("before-commit")
            if self.store is not None:
                assert cuts is not None
                states = {k: c.encode() for k, c in cuts.items()}
                what = f"cannot write snapshot epoch {epoch} in {self.store.directory}"
                committed = self.store.commit(states, offsets, info, marks)
                if committed != epoch:
                    raise RuntimeError(f"snapshot epoch {committed} committed as {epoch}: "
                                       "another writer in this checkpoint directory?")
            crash_point("after-commit")
            what = f"epoch {epoch} committed, but publishing its output files failed"
            publish(self.job.out, OUTPUTS, epoch, remove_uncommitted=False)
            if writer is not None:  # --kafka-exactly-once: the epoch's Kafka transaction
                what = f"epoch {epoch} committed, but its Kafka transaction failed"
                writer.committed(sent, epoch)
        except Exception as exc:
            self._fail(exc, what)
        return epoch, rows

    def _behind(self) -> int | None:
        """Records on the broker the reader has not released yet (over every input partition:
        high watermark - next offset), or None while a partition's high watermark is unknown
        (its reader has had no fetch response yet). ``--idle-stop`` counts only at 0."""
        total = 0
        for tp, off in self.offsets.items():
            hw = self.highwater.get(tp)
            if hw is None:
                return None
            total += max(0, hw - off)
        return total

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
               # every row not in a published file yet: also those of the snapshot being
               # committed (else published + buffered dropped while a commit ran)
               "buffered": (self.in_epoch + self.committing
                            + sum(len(b) for b in self.buffers.values())),
               "behind": self._behind(),
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

