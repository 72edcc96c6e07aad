"""The Beam graph of ``kernelstream stream``: one unbounded pipeline, fused into one stage.

::

    Impulse → ReadKafkaPartitions → Route → Learn (state per model key) → [KafkaOut] → Commit
              (records, progress)                                      items

Nothing here shuffles: on the FnApiRunner (also behind Beam's local job service) a stage after
a shuffle runs only once the unbounded source's stage has finished, i.e. never, and so does a
stage after a ``Flatten`` (measured: the FnApiRunner materializes a Flatten's inputs). So the
graph is one chain and every DoFn is fused into the reader's stage: each bundle is one reader
call, its records (one :class:`~kernelstream.transforms.kafka_read.RecordBatch` element:
Beam's per-element cost, ~20 µs a DoFn, is paid per call and model, not per record) followed
by the reader's progress (``progress_in_records``), and Learn's ``finish_bundle`` (the states
it wrote) runs before Commit's. Everything Commit needs travels through Learn as *items*
``(name, payload)``: ``(output, rows)`` for the five outputs (a list of rows each),
``("states", (key, ModelState))`` and ``("progress", ReadProgress)``; Route hands progress
and its dead letters to Learn under the key ``""`` (no model has it), and Learn passes them
on. :class:`SplitOutputs` turns items into one PCollection of rows per output.

On a runner that inserts a keyed shuffle before the stateful Learn (Flink, Dataflow) the graph
stays correct, but Commit then runs downstream of that shuffle, and a snapshot is a consistent
cut only if that runner delivers each worker's items in order: there, use the runner's own
checkpointing.

* :class:`RouteRecords` parses a reader call's records at once
  (:meth:`StreamEngine.route_many`) into one ``(model key, [parsed, ...])`` element per model
  (in record order); unparsable records become ``dead_letters`` rows.
* The Learn DoFn (:func:`learn_dofn`) keeps each model's
  :class:`~kernelstream.engine.stream_state.ModelState` in ``ReadModifyWriteState`` (coded by
  the engine's own bytes, :class:`ModelStateCoder`). A key whose state is empty is restored
  from the snapshot the run resumed from (``SnapshotView.get``, read lazily by key: no side
  input), else warm-started from ``--init-from``, else new. It applies a model's records
  with :meth:`StreamEngine.process_many`; its rows leave as one item per output, and at
  ``finish_bundle`` the states it wrote.
* :class:`Committer` (one per worker, not keyed) appends rows to pending Parquet files of the
  current epoch, keeps the newest state of each touched model and the reader's offsets, and
  at ``finish_bundle``, when ``snapshot_every`` records or ``snapshot_seconds`` have passed
  (or the stream drains): closes the files, commits states + offsets as one snapshot epoch
  (``engine.snapshot.SnapshotStore``), then publishes the files. Without a checkpoint
  directory the same happens minus the commit, so every output file is complete and
  readable while the job runs.
* :class:`WriteKafkaRows` sends every row at once to ``PREFIX-<output>``, keyed by its
  ``row_id`` (the deterministic identity: a row replayed after a crash is the same message
  again), a model's rows to one partition (in order). Commit waits for its sends before it
  commits each snapshot (on the commit thread), so a committed row has always reached
  Kafka; rows sent after the last snapshot are sent again after a crash (same key).

``KERNELSTREAM_CRASH_AT=POINT:N[,POINT:N...]`` (tests only) kills the worker with SIGKILL at
the N-th pass of a named point (:data:`CRASH_POINTS`).
"""

from __future__ import annotations

import gc
import json
import math
import operator
import os
import signal
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam import typehints
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.worker.statecache import CacheAware
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from kernelstream._json import json_safe
from kernelstream.engine.events import StreamEngine
from kernelstream.engine.stream_routing import StreamSpec
from kernelstream.engine.stream_rows import OUTPUTS
from kernelstream.transforms.kafka_read import (
    Batched,
    ReadKafkaPartitions,
    ReadProgress,
    RecordBatch,
    drain_requested,
)

STATES_TAG = "states"
PROGRESS_TAG = "progress"
DEAD_LETTERS = "dead_letters"
PASS_KEY = ""  # Route → Learn: items for Commit, not for a model (model keys are CONFIG#...)
CRASH_ENV = "KERNELSTREAM_CRASH_AT"
CRASH_POINTS = (
    "start",  # Committer.setup: the worker has just started
    "learn",  # Learn.process, after a record's rows are emitted: mid-bundle
    "kafka-flush",  # WriteKafkaRows.flush before a snapshot: rows acknowledged, not committed
    "before-commit",  # Committer: output files of the epoch closed, snapshot not committed
    "after-commit",  # Committer: snapshot committed, its output files not yet published
)
STATUS_FILE = "status.json"
DRAIN_FILE = "drain"
ROW_GROUP = 8192  # rows buffered per output before they become a Parquet row group
CONVERT_SLICE = 256  # rows converted to Arrow per call on the commit thread (see _write_rows)


@dataclass(frozen=True)
class StreamJob:
    """Everything the workers of one ``kernelstream stream`` run need (picklable, plain).

    ``start_offsets``: ``(topic, partition, next offset)`` of every input partition (the
    resumed snapshot's, else each partition's beginning). ``resume_epoch``: the snapshot epoch
    in ``checkpoint`` the run resumed from (models are restored from it by key). ``init_from``
    / ``init_kind``: warm start of models without a snapshot (``"stream"``: a stream
    checkpoint directory; ``"replay"``: a replay checkpoint directory). ``control``: a local
    directory of this run for the drain request (``drain``) and the workers' status file
    (``status.json``). ``part``: tells this run's output files apart."""

    spec: StreamSpec
    bootstrap: str
    topics: tuple[str, ...]
    out: str
    control: str
    part: str
    labels_topic: str | None = None
    client: tuple[tuple[str, str], ...] = ()
    start_offsets: tuple[tuple[str, int, int], ...] = ()
    checkpoint: str | None = None
    resume_epoch: int | None = None
    init_from: str | None = None
    init_kind: str | None = None
    kafka_out: str | None = None  # bootstrap servers of the output topics
    kafka_topics: tuple[tuple[str, str], ...] = ()  # output name -> topic
    snapshot_every: int = 10_000
    snapshot_seconds: float = 10.0
    info: tuple[tuple[str, Any], ...] = ()  # committed with every snapshot (JSON-able)
    poll_timeout_ms: int = 200
    max_records: int = 1000
    merge_idle_ms: int = 50
    call_ms: int = 500  # how long a reader call (a bundle) goes on reading
    state_in_beam: bool = False  # models as bytes in Beam state (see ModelStateCoder)

    @property
    def drain_path(self) -> str:
        return os.path.join(self.control, DRAIN_FILE)

    @property
    def status_path(self) -> str:
        return os.path.join(self.control, STATUS_FILE)

    def offsets(self) -> dict[tuple[str, int], int]:
        return {(t, p): o for t, p, o in self.start_offsets}

    def output_topics(self) -> dict[str, str]:
        """Output name → Kafka topic (``PREFIX-predictions``, ...); empty without Kafka out."""
        return dict(self.kafka_topics)


class StreamPipelineOptions(PipelineOptions):
    """Reader tuning of a live stream, given after ``--`` as Beam pipeline options."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument("--poll_timeout_ms", type=int, default=None,
                            help="how long an idle reader blocks per call (default 200)")
        parser.add_argument("--max_records", type=int, default=None,
                            help="records per reader round (default 1000)")
        parser.add_argument("--call_ms", type=int, default=None,
                            help="how long a reader call, i.e. a bundle, goes on reading "
                            "(default 500; snapshots and the status file wait for its end)")
        parser.add_argument("--merge_idle_ms", type=int, default=None,
                            help="how long an empty partition of a group must stay caught up "
                            "before the others' records pass it (default 50)")
        parser.add_argument("--state_in_beam", action="store_true", default=False,
                            help="keep each model as bytes in Beam state, committed every "
                            "bundle (for runners that checkpoint or move Beam state "
                            "themselves: Flink, Dataflow); default: in the worker's memory")


def draining(job: StreamJob) -> bool:
    """Whether this run was asked to drain (in this process, or by the drain file)."""
    return drain_requested() or os.path.exists(job.drain_path)


# -- crash hooks (tests) ------------------------------------------------------------------------

_crash_plan: dict[str, int] | None = None
_crash_seen: dict[str, int] = {}


# Beam's state sampler (per bundle processor) starts a thread with each bundle and joins it at
# the bundle's end; the thread sleeps in steps growing from 2 ms to its sampling period (200 ms
# by default, and no option sets it), so the join waits ~10-17 % of a bundle's length: ~100 ms
# at the end of a 500 ms reader call, during which no record is read (measured on Beam 2.77).
# A short period bounds that wait; sampling only feeds Beam's msec counters.
SAMPLING_PERIOD_MS = 5


def short_state_sampling() -> None:
    """Make the state samplers of bundle processors created from now on in this process sample
    every :data:`SAMPLING_PERIOD_MS` (see above). Idempotent; leaves a period someone else
    set alone."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    if init.__defaults__ == (statesampler.DEFAULT_SAMPLING_PERIOD_MS,):
        init.__defaults__ = (SAMPLING_PERIOD_MS,)


def crash_point(name: str, passes: int = 1) -> None:
    """SIGKILL this process at the N-th pass of ``name`` when ``KERNELSTREAM_CRASH_AT``
    asks for it (``POINT:N``, comma-separated); otherwise nothing. ``passes``: this call
    counts as that many passes (e.g. one per record of a batch)."""
    global _crash_plan
    if _crash_plan is None:
        _crash_plan = {}
        for item in os.environ.get(CRASH_ENV, "").split(","):
            point, _, n = item.strip().partition(":")
            if point:
                _crash_plan[point] = int(n or 1)
    if name not in _crash_plan:
        return
    before = _crash_seen.get(name, 0)
    seen = _crash_seen[name] = before + passes
    if before < _crash_plan[name] <= seen:
        os.kill(os.getpid(), signal.SIGKILL)


# -- coders ---------------------------------------------------------------------------------------


class HeldState(CacheAware):
    """A model's state as Beam state holds it. The SDK's state cache weighs every value it
    keeps by walking all its objects (``objsize``) at each bundle's commit: ~26 ms for a
    BOGD B=200 model on a9a with an hour of remembered ids, more than the model's update.
    This holder gives it a size estimate instead (learner arrays + ~200 bytes per pending
    or remembered event)."""

    __slots__ = ("st", "token")

    def __init__(self, st: Any) -> None:
        self.st = st
        self.token = uuid.uuid4().hex  # names it in this worker's memory (ModelStateCoder)

    def get_referents_for_cache(self) -> list[Any]:
        return []

    def __sizeof__(self) -> int:
        st = self.st
        learner = 0
        if st.learner is not None:
            learner = sum(getattr(v, "nbytes", 64)
                          for v in getattr(st.learner, "__dict__", {}).values())
        return 1024 + learner + 200 * (len(st.pending) + len(st.resolved))


# Models this worker process holds, by the token its Beam state carries (see ModelStateCoder).
_HELD: dict[str, HeldState] = {}


class ModelStateCoder(beam.coders.Coder):
    """A :class:`HeldState` as Beam state stores it, in one of two ways:

    * ``in_worker`` (the default on the in-process and portable-local runners): the model stays
      in this worker's memory and the state carries only a token naming it. Those runners keep
      Beam state in memory and commit it at the end of *every* bundle; encoding a model there
      (~5-25 ms for BOGD B=200 with an hour of remembered ids) would cost more than learning
      at live rates, and buys nothing: their state dies with the process anyway, and a restart
      restores the models from the run's own snapshots (``--checkpoint``).
    * otherwise: the engine's own versioned bytes of the
      :class:`~kernelstream.engine.stream_state.ModelState` (no pickle; ``ttl_ms`` rebuilds
      the expiry deadlines on decode): for runners that move or checkpoint Beam state
      themselves (Flink, Dataflow), selected with ``--state_in_beam``.
    """

    def __init__(self, ttl_ms: int, in_worker: bool = True) -> None:
        self.ttl_ms = int(ttl_ms)
        self.in_worker = bool(in_worker)

    def encode(self, value: Any) -> bytes:
        if self.in_worker:
            token = value.token
            _HELD[token] = value
            return b"W" + token.encode()
        from kernelstream.engine.stream_state import encode_state

        return b"B" + encode_state(value.st)

    def decode(self, encoded: bytes) -> Any:
        kind, body = encoded[:1], encoded[1:]
        if kind == b"W":
            held = _HELD.get(body.decode())
            if held is None:  # Beam moved the state to another process: bytes are needed
                raise RuntimeError("a model's Beam state names a model held by another worker "
                                   "process; run this runner with --state_in_beam")
            return held
        from kernelstream.engine.stream_state import decode_state

        return HeldState(decode_state(body, self.ttl_ms))

    def is_deterministic(self) -> bool:
        return False  # wall-clock seconds are part of the state

    def estimate_size(self, value: Any) -> int:
        # Beam samples element sizes; encoding a large learner just to count it is waste
        return 1024

    def __eq__(self, other: object) -> bool:
        return (type(self) is type(other) and self.ttl_ms == other.ttl_ms  # type: ignore[attr-defined]
                and self.in_worker == other.in_worker)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.ttl_ms, self.in_worker))



# -- route ----------------------------------------------------------------------------------------


class RouteRecords(beam.DoFn):
    """A ``RecordBatch`` (or one ``SourceRecord``) → ``(model key, [ParsedRecord, ...])`` per
    model, in record order; its unparsable records → ``("", ("dead_letters", rows))``; a
    ``ReadProgress`` → ``("", ("progress", it))``."""

    def __init__(self, job: StreamJob) -> None:
        self.job = job
        self.engine: StreamEngine | None = None

    def setup(self) -> None:
        self.engine = StreamEngine(self.job.spec)

    def process(self, rec: Any) -> Iterator[Any]:
        assert self.engine is not None
        if isinstance(rec, ReadProgress):
            yield PASS_KEY, (PROGRESS_TAG, rec)
            return
        groups, dead = self.engine.route_many(
            rec.records if isinstance(rec, RecordBatch) else (rec,))
        if dead:
            yield PASS_KEY, (DEAD_LETTERS, dead)
        yield from groups.items()


# -- learn ----------------------------------------------------------------------------------------


class _InitStates:
    """Warm-start learners of ``--init-from`` by model key: a stream checkpoint (read by key
    on demand) or a replay checkpoint (its states loaded once)."""

    def __init__(self, path: str, kind: str, engine: StreamEngine) -> None:
        self.engine = engine
        self.view: Any = None
        self.replay: dict[str, bytes] | None = None
        if kind == "stream":
            from kernelstream.engine.snapshot import SnapshotView

            self.view = SnapshotView.open(path)
        else:
            from kernelstream.engine import checkpoints

            ckpt = checkpoints.latest(path)
            self.replay = {} if ckpt is None else dict(checkpoints.read_states(ckpt))

    def learner(self, key: str) -> Any:
        if self.view is not None:
            data = self.view.get(key)
            return None if data is None else self.engine.decode_state(data).learner
        assert self.replay is not None
        data = self.replay.get(key)
        if data is None:
            return None
        from kernelstream.engine.core import decode_stream_state

        return decode_stream_state(data).learner

    def close(self) -> None:
        if self.view is not None:
            self.view.close()


class _LearnBase(beam.DoFn):
    """The Learn DoFn without its state parameter (see :func:`learn_dofn`)."""

    def __init__(self, job: StreamJob) -> None:
        self.job = job
        self.engine: StreamEngine | None = None
        self.snapshot: Any = None
        self.init: _InitStates | None = None
        self.wrote: dict[str, Any] = {}
        self.last_ts: Timestamp | None = None

    def setup(self) -> None:
        # A stream worker lives long and allocates small objects per record (rows, Kafka
        # futures): what is alive now (modules, runner, pipeline: ~100k objects) leaves the
        # cyclic collector's view, so a full collection no longer walks it (~50 ms a time,
        # every few thousand records: throughput and latency spikes).
        gc.freeze()
        short_state_sampling()  # for the bundle processors this worker creates later
        self.engine = StreamEngine(self.job.spec)
        if self.job.checkpoint is not None and self.job.resume_epoch is not None:
            from kernelstream.engine.snapshot import SnapshotView

            self.snapshot = SnapshotView.open(self.job.checkpoint, self.job.resume_epoch)
        if self.job.init_from is not None:
            self.init = _InitStates(self.job.init_from, self.job.init_kind or "stream",
                                    self.engine)

    def teardown(self) -> None:
        if self.snapshot is not None:
            self.snapshot.close()
        if self.init is not None:
            self.init.close()

    def start_bundle(self) -> None:
        self.wrote = {}

    def restore(self, key: str) -> Any:
        """The state of a model this worker has none of: from the snapshot the run resumed
        from, else a new state (warm-started from ``--init-from`` when it has the model)."""
        assert self.engine is not None
        if self.snapshot is not None:
            data = self.snapshot.get(key)
            if data is not None:
                return self.engine.decode_state(data)
        if self.init is not None:
            learner = self.init.learner(key)
            if learner is not None:
                return self.engine.new_state(key, learner)
        return self.engine.new_state(key)

    def learn(self, element: tuple[str, Any], model: Any, ts: Timestamp) -> Iterator[Any]:
        key, parsed = element
        if key == PASS_KEY:
            yield parsed
            return
        assert self.engine is not None
        held = model.read()
        st = self.restore(key) if held is None else held.st
        out = self.engine.process_many(key, st, parsed)
        model.write(HeldState(st) if held is None else held)
        self.wrote[key] = st
        self.last_ts = ts
        for name, rows in out.items():
            if rows:
                yield name, rows
        crash_point("learn", len(parsed))

    def finish_bundle(self) -> Iterator[Any]:
        # the states this bundle wrote, for the snapshot (objects: in a fused stage nothing
        # is encoded; the Committer encodes only what it commits)
        ts = self.last_ts if self.last_ts is not None else Timestamp(0)
        for key, st in self.wrote.items():
            yield WindowedValue((STATES_TAG, (key, st)), ts, (GlobalWindow(),))
        self.wrote = {}


def learn_dofn(job: StreamJob) -> beam.DoFn:
    """The stateful Learn DoFn of ``job``: its ``ReadModifyWriteState`` coder needs the run's
    label TTL, and Beam reads state specs from the class, so the class is made per run."""
    spec = ReadModifyWriteStateSpec("model", ModelStateCoder(job.spec.label_ttl_ms,
                                                        not job.state_in_beam))

    model_param = beam.DoFn.StateParam(spec)

    class StreamLearnDoFn(_LearnBase):
        def process(self, element: tuple[str, Any], model: Any = model_param,
                    ts: Any = beam.DoFn.TimestampParam) -> Iterator[Any]:
            yield from self.learn(element, model, ts)

    return StreamLearnDoFn(job)


# -- Kafka out ------------------------------------------------------------------------------------


def _json_default(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    raise TypeError(f"not JSON: {type(v).__name__}")


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_json_default)


def row_message(row: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """``(key, value)`` of an output row on Kafka: its ``row_id`` and the row as JSON (NaN
    and infinities as null). Rows are flat, so one pass over the values does; most rows have
    no NaN at all and are encoded as they are (the encoder refuses NaN: then that pass)."""
    key = str(row["row_id"]).encode("utf-8")
    try:
        return key, _ENCODER.encode(row).encode("utf-8")
    except (ValueError, TypeError):
        pass
    flat = {k: (None if v.__class__ is float and not math.isfinite(v)
                else json_safe(v) if isinstance(v, list | tuple) else v)
            for k, v in row.items()}
    return key, _ENCODER.encode(flat).encode("utf-8")


# The Kafka writer of a run in this process, for the Committer to flush before it commits.
_KAFKA_WRITERS: dict[str, WriteKafkaRows] = {}


class WriteKafkaRows(beam.DoFn):
    """Items ``(output name, rows)`` → a message per row on that output's topic, sent at once
    (``linger_ms`` 2 unless ``--kafka-option`` says otherwise). Every item is passed on to
    the Committer, which waits for them (:meth:`sent` at a snapshot's cut, then :meth:`wait`)
    before it commits that snapshot: a committed row has reached Kafka (a failed send fails
    the run, and nothing is committed). Bundles in between do not wait for the brokers."""

    def __init__(self, job: StreamJob) -> None:
        self.job = job
        self.topics: dict[str, str] = {}
        self.producer: Any = None
        self.futures: list[Any] = []
        self.partitions: dict[str, list[int]] = {}
        self.where: dict[tuple[str, str], int] = {}

    def setup(self) -> None:
        from kernelstream.kafka_client.clients import KafkaTopic
        from kernelstream.kafka_client.sink import KafkaWriter

        assert self.job.kafka_out is not None
        self.topics = self.job.output_topics()
        # one producer for every output topic (KafkaWriter's: acks=all), sending at once
        first = next(iter(self.topics.values()))
        settings = (("linger_ms", "2"), *self.job.client)
        self.producer = KafkaWriter(KafkaTopic(self.job.kafka_out, first), settings).producer
        self.futures = []
        self.partitions = {t: sorted(self.producer.partitions_for(t))
                           for t in self.topics.values()}
        self.where = {}
        _KAFKA_WRITERS[self.job.control] = self

    def _partition(self, topic: str, row: Mapping[str, Any]) -> int:
        """A model's rows go to one partition, in order (murmur2 of the model key, as Kafka's
        default partitioner would place that key); a parse dead letter's by its source."""
        by = row.get("key") or row.get("source") or ""
        p = self.where.get((topic, by))
        if p is None:
            from kafka.partitioner.default import murmur2

            parts = self.partitions[topic]
            p = self.where[(topic, by)] = parts[(murmur2(by.encode()) & 0x7FFFFFFF)
                                                % len(parts)]
        return p

    def process(self, item: tuple[str, Any]) -> Iterator[tuple[str, Any]]:
        name, rows = item
        topic = self.topics.get(name)
        if topic is not None:  # an output sent to Kafka (not states, progress)
            send, futures = self.producer.send, self.futures
            for row in rows:
                key, value = row_message(row)
                futures.append(send(topic, key=key, value=value,
                                    partition=self._partition(topic, row)))
        yield item

    def finish_bundle(self) -> None:
        # keep only what the brokers have not acknowledged yet; a failed send fails now
        waiting = []
        for f in self.futures:
            if not f.is_done:
                waiting.append(f)
            elif f.failed():
                f.get(timeout=0)
        self.futures = waiting

    def sent(self) -> list[Any]:
        """The sends not yet known to be acknowledged (a copy): what :meth:`wait` checks."""
        return list(self.futures)

    def wait(self, futures: list[Any]) -> None:
        """Wait until the brokers have every row sent so far, and raise the error of any of
        ``futures`` (:meth:`sent` at a snapshot's cut) that failed. Thread-safe: the
        Committer's commit thread calls it while this DoFn goes on sending."""
        self.producer.flush()
        for f in futures:
            f.get(timeout=0)
        crash_point("kafka-flush")

    def teardown(self) -> None:
        if _KAFKA_WRITERS.get(self.job.control) is self:
            del _KAFKA_WRITERS[self.job.control]
        if self.producer is not None:
            self.producer.close(timeout=5)
            self.producer = None


# -- commit ---------------------------------------------------------------------------------------

# A snapshot store opened by the launching process, for a Committer running in that same
# process (FnApiRunner, LOOPBACK workers): flock belongs to the open file, so the worker must
# use the launcher's store rather than lock the directory a second time.
_LOCAL_STORES: dict[str, Any] = {}


def register_local_store(directory: str, store: Any) -> None:
    _LOCAL_STORES[os.path.realpath(directory)] = store


def unregister_local_store(directory: str) -> None:
    _LOCAL_STORES.pop(os.path.realpath(directory), None)


@dataclass
class _Totals:
    records: int = 0  # offsets consumed (the reader's progress)
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTPUTS, 0))
    published: int = 0  # rows in published files
    last_ts_ms: int | None = None  # newest record timestamp seen

    def as_doc(self) -> dict[str, Any]:
        return {"records": self.records, "rows": dict(self.rows), "published": self.published,
                "last_ts_ms": self.last_ts_ms}


# The column of an output's rows that holds the timestamp of the record that made the row.
_RECORD_TIME = {"predictions": "event_time_ms", "outcomes": "label_time_ms"}


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
    thread fails the run at the next bundle's end."""

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
        self.states: dict[str, Any] = {}
        self.pending: dict[str, int] = {}  # model key -> pending events (for the status)
        self.buffers: dict[str, list[dict[str, Any]]] = {n: [] for n in OUTPUTS}
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
        self.changed = False
        crash_point("start")
        self._status(force=True)

    def teardown(self) -> None:
        if getattr(self, "pool", None) is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
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
            before = self.offsets.get(tp)
            if before is None or value.next_offset > before:
                moved = 0 if before is None else value.next_offset - before
                self.since_records += moved
                self.totals.records += moved
                self.offsets[tp] = value.next_offset
                self.changed = True
            return
        if tag == STATES_TAG:
            key, st = value
            if self.store is not None:
                self.states[key] = st
            self.pending[key] = len(st.pending)
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
            ms = max(map(operator.itemgetter(field), value))
            if self.totals.last_ts_ms is None or ms > self.totals.last_ts_ms:
                self.totals.last_ts_ms = ms
        if len(buf) >= ROW_GROUP:
            self._write(tag)

    def finish_bundle(self) -> None:
        self._collect()
        drain = draining(self.job)
        due = (self.since_records >= self.job.snapshot_every
               or time.monotonic() - self.last_snapshot >= self.job.snapshot_seconds)
        if self.changed and (due or drain):
            self._snapshot(wait=drain)
        elif drain:
            self._settle()
        self._status()

    # -- files and snapshots ---------------------------------------------------------------
    def _write(self, name: str) -> None:
        """Hand the buffered rows of ``name`` to the commit thread (a row group of this
        epoch's pending file)."""
        rows = self.buffers[name]
        if not rows:
            return
        self.buffers[name] = []
        self.in_epoch += len(rows)
        self.tasks.append(self.pool.submit(self._write_rows, name, self.epoch, rows))

    def _write_rows(self, name: str, epoch: int, rows: list[dict[str, Any]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from kernelstream.engine.snapshot import pending_path

        schema = self.schemas[name]
        w = self.writers.get((name, epoch))
        if w is None:
            path = pending_path(self.job.out, name, epoch, self.job.part)
            w = self.writers[(name, epoch)] = pq.ParquetWriter(path, schema)
        # pyarrow converts Python rows holding the GIL, and a C call is never preempted: in
        # slices, the stream's thread gets the GIL back every ~2 ms instead of once per 8192
        # rows (~40 ms). (Encoding the row group releases the GIL.)
        table = pa.Table.from_batches(
            [pa.RecordBatch.from_pylist(rows[i:i + CONVERT_SLICE], schema=schema)
             for i in range(0, len(rows), CONVERT_SLICE)], schema=schema)
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
        bundle's end, unless ``wait`` or the stream has read two intervals
        (``snapshot_every``) since the last cut: then it waits, so snapshots keep to their
        interval and a restart never replays more than that."""
        if self.inflight is not None:
            if not wait and self.since_records < 2 * self.job.snapshot_every:
                return  # the next bundle's end tries again
            self._settle()
        for name in OUTPUTS:
            self._write(name)
        cuts = None  # encoded on the commit thread (an hour of remembered ids: seconds)
        if self.store is not None:
            cuts = {k: self.engine.cut_state(st) for k, st in self.states.items()}
        info = dict(self.job.info)
        info["totals"] = self.totals.as_doc()
        writer = _KAFKA_WRITERS.get(self.job.control)
        sent = None if writer is None else writer.sent()
        self.inflight = self.pool.submit(self._commit, self.epoch, cuts, dict(self.offsets),
                                         info, writer, sent, self.in_epoch)
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
                sent: list[Any] | None, rows: int) -> tuple[int, int]:
        """On the commit thread: the snapshot of ``epoch`` (its rows already written)."""
        from kernelstream.engine.snapshot import publish

        if writer is not None:
            writer.wait(sent or [])  # nothing committed that has not reached Kafka
        for key in [k for k in self.writers if k[1] == epoch]:
            self.writers.pop(key).close()  # complete files (footer) before the commit
        crash_point("before-commit")
        if self.store is not None:
            assert cuts is not None
            states = {k: c.encode() for k, c in cuts.items()}
            committed = self.store.commit(states, offsets, info)
            if committed != epoch:
                raise RuntimeError(f"snapshot epoch {committed} committed as {epoch}: another "
                                   "writer in this checkpoint directory?")
        crash_point("after-commit")
        publish(self.job.out, OUTPUTS, epoch, remove_uncommitted=False)
        return epoch, rows

    def _status(self, force: bool = False) -> None:
        """The status file the launcher's progress lines read (throttled; atomic)."""
        now = time.monotonic()
        if not force and now - self.last_status < 0.5:
            return
        self.last_status = now
        wall = time.time()
        last = self.totals.last_ts_ms
        doc = {"time": wall, "started": self.started, "pid": os.getpid(),
               # now - newest record timestamp processed
               "lag_ms": None if last is None else max(0, int(wall * 1000) - last),
               "epoch": self.committed,
               "pending": sum(self.pending.values()),
               "buffered": self.in_epoch + sum(len(b) for b in self.buffers.values()),
               **self.totals.as_doc()}
        tmp = f"{self.job.status_path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, self.job.status_path)
        except OSError:
            pass  # progress display only


# -- the composite --------------------------------------------------------------------------------


class LiveStreamOutputs(NamedTuple):
    """``items`` of a live stream (module docstring): ``(output name, rows)``,
    ``("states", (key, ModelState))``, ``("progress", ReadProgress)``."""

    items: beam.PCollection


class LiveStream(beam.PTransform):
    """``PBegin`` → the live stream of ``job`` (module docstring), with its Parquet outputs
    and snapshots (Committer) and, with ``job.kafka_out``, its Kafka outputs."""

    def __init__(self, job: StreamJob) -> None:
        super().__init__()
        self.job = job

    def expand(self, pbegin: beam.pvalue.PBegin) -> LiveStreamOutputs:
        short_state_sampling()  # the in-process runners build their workers here
        job = self.job
        read = pbegin | "Read" >> ReadKafkaPartitions(
            job.bootstrap, job.topics, job.labels_topic, start_offsets=job.offsets(),
            client=job.client, poll_timeout_ms=job.poll_timeout_ms,
            max_records=job.max_records, merge_idle_ms=job.merge_idle_ms,
            drain_path=job.drain_path, progress_in_records=True, batch_records=True,
            call_ms=job.call_ms, call_records=job.snapshot_every)
        items = (read.records
                 | "Route" >> beam.ParDo(RouteRecords(job)).with_output_types(
                     typehints.Tuple[str, Batched])
                 | "Learn" >> beam.ParDo(learn_dofn(job)).with_output_types(Batched))
        to_commit = items
        if job.kafka_out is not None:
            to_commit = items | "KafkaOut" >> beam.ParDo(WriteKafkaRows(job)
                                                         ).with_output_types(Batched)
        _ = to_commit | "Commit" >> beam.ParDo(Committer(job))
        return LiveStreamOutputs(items)


class _Split(beam.DoFn):
    def process(self, item: tuple[str, Any]) -> Iterator[Any]:
        name, rows = item
        if name in OUTPUTS:
            for row in rows:
                yield beam.pvalue.TaggedOutput(name, row)


class SplitOutputs(beam.PTransform):
    """Items → one PCollection of rows per output (``predictions``, ``outcomes``,
    ``unlabeled``, ``metrics``, ``dead_letters``), for composing a stream with other
    transforms."""

    def expand(self, items: beam.PCollection) -> Any:
        return items | "Split" >> beam.ParDo(_Split()).with_outputs(*OUTPUTS)


__all__ = ["CRASH_POINTS", "Committer", "LiveStream", "LiveStreamOutputs", "ModelStateCoder",
           "ReadProgress", "RouteRecords", "SplitOutputs", "StreamJob", "StreamPipelineOptions",
           "WriteKafkaRows", "crash_point", "learn_dofn", "register_local_store",
           "row_message", "unregister_local_store"]
