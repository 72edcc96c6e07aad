"""The Beam graph of ``kernelstream stream``: one unbounded pipeline, fused into one stage.

::

    Impulse → ReadKafkaPartitions → Route → Learn (state per model key) → [KafkaOut] → Commit
              (records, progress)                                      items

Nothing here shuffles: on the FnApiRunner (also behind Beam's local job service) a stage after
a shuffle runs only once the unbounded source's stage has finished, i.e. never, and so does a
stage after a ``Flatten`` (measured: the FnApiRunner materializes a Flatten's inputs). So the
graph is one chain and every DoFn is fused into the reader's stage: each bundle is one reader
call, its records (one :class:`~kernelstream.transforms.live.kafka_read.RecordBatch` element:
Beam's per-element cost, ~20 µs a DoFn, is paid per call and model, not per record) followed
by the reader's progress (``progress_in_records``). Everything Commit needs travels through
Learn as *items* ``(name, payload)``: ``(output, rows)`` for the five outputs (a list of rows
each), ``("states", (key, ModelState))`` (right after a model's rows) and ``("progress",
ReadProgress)``; Route hands progress and its dead letters to Learn under the key ``""`` (no
model has it), and Learn passes them on. So at a round's last progress item Commit holds
every row and state the records before it made, and it may cut a snapshot there,
mid-bundle: a bundle (a reader call, ``call_ms``) is not bounded by the snapshot interval,
and its end, ~10-20 ms of Beam's bookkeeping during which nothing is read, comes rarely.
:class:`SplitOutputs` turns items into one PCollection of rows per output.

On a runner that inserts a keyed shuffle before the stateful Learn (Flink, Dataflow) the graph
stays correct, but Commit then runs downstream of that shuffle, and a snapshot is a consistent
cut only if that runner delivers each worker's items in order: there, use the runner's own
checkpointing.

* :class:`RouteRecords` parses a reader call's records at once
  (:meth:`StreamEngine.route_many`) into one ``(model key, [parsed, ...])`` element per model
  (in record order; with ``--key-by``, quiet entities' models get their clock ticks there,
  :mod:`kernelstream.engine.live.clock`); unparsable records become ``dead_letters`` rows.
  The router's clock travels to Commit as a state (key
  :data:`~kernelstream.engine.live.clock.CLOCK_KEY`), so a snapshot cuts it with the models.
* The Learn DoFn (:func:`learn_dofn`) keeps each model's
  :class:`~kernelstream.engine.live.state.ModelState` in ``ReadModifyWriteState`` (coded by
  the engine's own bytes, :class:`ModelStateCoder`). A key whose state is empty is restored
  from the snapshot the run resumed from (``SnapshotView.get``, read lazily by key: no side
  input), else warm-started from ``--init-from``, else new. It applies a model's records
  with :meth:`StreamEngine.process_many`; its rows leave as one item per output, then its
  state (the live object; with ``--state_in_beam``, where each bundle decodes its own copy,
  the states it wrote leave at ``finish_bundle``, and snapshots wait for a bundle's end).
* :class:`~kernelstream.transforms.live.committer.Committer` (one per worker, not keyed) writes the
  rows to Parquet files and commits the states and offsets as snapshots (its module says how).
* :class:`~kernelstream.transforms.live.kafka_rows.WriteKafkaRows` sends every row at once to
  ``PREFIX-<output>``, keyed by its ``row_id``; Commit waits for its sends before it commits
  each snapshot.

What the DoFns share (the job, the item tags, the drain check, the crash hooks of the tests,
``KERNELSTREAM_CRASH_AT``) is :mod:`kernelstream.transforms.live.stream_job`; the names this module
has always offered (:class:`StreamJob`, :class:`Committer`, :class:`WriteKafkaRows`,
:func:`row_message`, :func:`crash_point`, ...) stay importable from here.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam import typehints
from apache_beam.runners.worker.statecache import CacheAware
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from kernelstream.engine.live.accounting import state_tally
from kernelstream.engine.live.clock import CLOCK_KEY, QuietClock
from kernelstream.engine.live.engine import StreamEngine, forgotten_model, quiet_clock
from kernelstream.engine.live.rows import OUTPUTS
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.engine.live.state import decode_state, encode_state, state_clock
from kernelstream.engine.replay import checkpoints
from kernelstream.engine.replay.core import decode_replay_state
from kernelstream.transforms.live.committer import (
    Committer,
    register_local_store,
    unregister_local_store,
)
from kernelstream.transforms.live.kafka_read import (
    Batched,
    ReadKafkaPartitions,
    ReadProgress,
    RecordBatch,
)
from kernelstream.transforms.live.kafka_rows import WriteKafkaRows, row_message
from kernelstream.transforms.live.stream_job import (
    CRASH_ENV,
    CRASH_POINTS,
    DEAD_LETTERS,
    PASS_KEY,
    PROGRESS_TAG,
    STATES_TAG,
    StreamJob,
    StreamPipelineOptions,
    crash_point,
)

# Beam's state sampler (per bundle processor) starts a thread with each bundle and joins it at
# the bundle's end; the thread sleeps in steps growing from 2 ms to its sampling period (200 ms
# by default, and no option sets it), so the join waits ~10-17 % of a bundle's length: ~100 ms
# at the end of a 500 ms reader call, during which no record is read (measured on Beam 2.77).
# A short period bounds that wait; sampling only feeds Beam's msec counters.
SAMPLING_PERIOD_MS = 5
SWITCH_INTERVAL_S = 0.001  # the GIL switch interval of a stream worker (see _LearnBase.setup)
GC_YOUNG_THRESHOLD = 20_000  # allocations between young collections (see _LearnBase.setup)


def short_state_sampling() -> None:
    """Make the state samplers of bundle processors created from now on in this process sample
    every :data:`SAMPLING_PERIOD_MS` (see above). Idempotent; leaves a period someone else
    set alone."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    if init.__defaults__ == (statesampler.DEFAULT_SAMPLING_PERIOD_MS,):
        init.__defaults__ = (SAMPLING_PERIOD_MS,)


# -- coders ---------------------------------------------------------------------------------------


class HeldState(CacheAware):
    """A model's state as Beam state holds it. The SDK's state cache weighs every value it
    keeps by walking all its objects (``objsize``) at each bundle's commit: ~26 ms for a
    BOGD B=200 model on a9a with an hour of remembered ids, more than the model's update.
    This holder gives it a size estimate instead (learner arrays + ~200 bytes per pending
    or remembered event). ``st`` None: the model was forgotten by this run
    (``--forget-entities-after``) and the snapshot the run resumed from still holds it, so
    the key must start afresh, never from there (a marker in the key's own Beam state, so
    it moves with the key on runners that move state)."""

    __slots__ = ("st", "token")

    def __init__(self, st: Any) -> None:
        self.st = st
        self.token = uuid.uuid4().hex  # names it in this worker's memory (ModelStateCoder)

    def get_referents_for_cache(self) -> list[Any]:
        return []

    def __sizeof__(self) -> int:
        st = self.st
        if st is None:
            return 64
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
      :class:`~kernelstream.engine.live.state.ModelState` (no pickle; ``ttl_ms`` rebuilds
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
        return b"G" if value.st is None else b"B" + encode_state(value.st)

    def decode(self, encoded: bytes) -> Any:
        kind, body = encoded[:1], encoded[1:]
        if kind == b"W":
            held = _HELD.get(body.decode())
            if held is None:  # Beam moved the state to another process: bytes are needed
                raise RuntimeError("a model's Beam state names a model held by another worker "
                                   "process; run this runner with --state_in_beam")
            return held
        if kind == b"G":  # a forgotten model's marker (HeldState)
            return HeldState(None)
        return HeldState(decode_state(body, self.ttl_ms))

    def is_deterministic(self) -> bool:
        return False  # wall-clock seconds are part of the state

    def estimate_size(self, value: Any) -> int:
        # Beam samples element sizes; encoding a large learner just to count it is waste
        return 1024

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, type(self)):
            return False
        return self.ttl_ms == other.ttl_ms and self.in_worker == other.in_worker

    def __hash__(self) -> int:
        return hash((type(self), self.ttl_ms, self.in_worker))


# -- route ----------------------------------------------------------------------------------------

# The router clock of each run in this worker process, by the run's control directory.
_CLOCKS: dict[str, QuietClock | None] = {}


class RouteRecords(beam.DoFn):
    """A ``RecordBatch`` (or one ``SourceRecord``) → ``(model key, [ParsedRecord, ...])`` per
    model, in record order; its unparsable records → ``("", ("dead_letters", rows))``; a
    ``ReadProgress`` → ``("", ("progress", it))``."""

    def __init__(self, job: StreamJob) -> None:
        self.job = job
        self.engine: StreamEngine | None = None

    def setup(self) -> None:
        # a Route DoFn set up again in this process (a runner may rebuild its DoFns) goes on
        # with the run's live clock, as Learn's models live on in _HELD: the resumed
        # snapshot's would be behind the models
        key = self.job.control
        if key not in _CLOCKS:
            while len(_CLOCKS) >= 8:  # runs of this process before: done
                del _CLOCKS[next(iter(_CLOCKS))]
            _CLOCKS[key] = route_clock(self.job)
        self.engine = StreamEngine(self.job.spec, _CLOCKS[key])

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
        clock = self.engine.router.clock
        if clock is not None:  # the live object, as states go: the Committer cuts it
            yield PASS_KEY, (STATES_TAG, (CLOCK_KEY, clock))


def route_clock(job: StreamJob) -> QuietClock | None:
    """The router's clock of quiet entities (:mod:`kernelstream.engine.live.clock`): for
    ``--key-by`` streams read as one merge (``--merge all``; read by partition, the groups
    take turns and no one clock orders them), continued from the snapshot the run resumed
    from. A snapshot whose clock is not current (written by a run that read by partition,
    which left the clock as it was, or before clocks existed, or by a run with another
    ``--forget-entities-after``) gets one rebuilt from its models' states (their JSON only),
    so that no entity quiet by then is missed: with a forget interval, every model's entity
    is followed (those let go before are forgotten in their turn)."""
    clock = quiet_clock(job.spec)
    if clock is None or job.merge != "all":
        return None
    if job.checkpoint is None or job.resume_epoch is None:
        return clock
    with SnapshotView.open(job.checkpoint, job.resume_epoch) as view:
        data = view.get(CLOCK_KEY)
        if data is not None and (view.info().get("stream") or {}).get("merge") == "all":
            with contextlib.suppress(ValueError):  # another version's: rebuilt below
                return QuietClock.decode(data, clock.quiet_ms, clock.forget_ms)
        models = []
        for _, state in view.items():
            entity, at, busy = state_clock(state)
            if entity is not None and at is not None and (busy or clock.forget_ms):
                models.append((entity, at))
    return QuietClock.rebuilt(clock.quiet_ms, models, clock.forget_ms)


# -- learn ----------------------------------------------------------------------------------------


class _InitStates:
    """Warm-start learners of ``--init-from`` by model key: a stream checkpoint (read by key
    on demand) or a replay checkpoint (its states loaded once)."""

    def __init__(self, path: str, kind: str, engine: StreamEngine) -> None:
        self.engine = engine
        self.view: Any = None
        self.replay: dict[str, bytes] | None = None
        if kind == "stream":
            self.view = SnapshotView.open(path)
        else:
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
        return decode_replay_state(data).learner

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
        self.read_cache: dict[str, HeldState | None] = {}  # this bundle's reads (_read)
        self.last_ts: Timestamp | None = None

    def setup(self) -> None:
        # A stream worker lives long and allocates small objects per record (rows, Kafka
        # futures): what is alive now (modules, runner, pipeline: ~100k objects) leaves the
        # cyclic collector's view, so a full collection no longer walks it (~50 ms a time,
        # every few thousand records: throughput and latency spikes).
        gc.freeze()
        # Each record makes a few small tuples and lists, so the default young-generation
        # threshold (700 allocations) ran a collection every few hundred records; at 20,000 an
        # event + label backlog drained ~30 % faster (alternating runs), each collection
        # still well under a millisecond.
        gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)
        # The commit thread's Python work (rows to Arrow, snapshots) holds the GIL in turns
        # with this thread: a record that arrives meanwhile waited up to the switch interval
        # (5 ms by default) for it, 1 ms here (measured: p99 of that wait 8 -> 4.5 ms).
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        short_state_sampling()  # for the bundle processors this worker creates later
        self.engine = StreamEngine(self.job.spec)
        if self.job.checkpoint is not None and self.job.resume_epoch is not None:
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
        self.read_cache = {}

    def _read(self, key: str, model: Any) -> Any:
        """``model.read()``, once a bundle per key with models held by this worker: Beam's
        state read (its cache's lookups, ~30 us) was paid every round, a few hundred a
        second at live rates, for a value only this DoFn writes."""
        if self.job.state_in_beam:
            return model.read()
        if key not in self.read_cache:
            self.read_cache[key] = model.read()
        return self.read_cache[key]

    def _write(self, key: str, model: Any, held: HeldState | None) -> None:
        """``model.write(held)``, or ``model.clear()`` for None; the bundle's read of
        ``key`` (:meth:`_read`) follows."""
        if held is None:
            model.clear()
        else:
            model.write(held)
        if not self.job.state_in_beam:
            self.read_cache[key] = held

    def restore(self, key: str) -> Any:
        """The state of a model this worker has none of: from the snapshot the run resumed
        from, else a new one (:meth:`fresh`)."""
        assert self.engine is not None
        if self.snapshot is not None:
            data = self.snapshot.get(key)
            if data is not None:
                st = self.engine.decode_state(data)
                st.restored = state_tally(st)  # the run's accounting starts here
                return st
        return self.fresh(key)

    def fresh(self, key: str) -> Any:
        """A new model's state, warm-started from ``--init-from`` when it has the model."""
        assert self.engine is not None
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
        held = self._read(key, model)
        if held is None:
            st = self.restore(key)
        elif held.st is None:  # forgotten by this run: afresh, not the resumed snapshot's
            st = self.fresh(key)
        else:
            st = held.st
        out = self.engine.process_many(key, st, parsed, renew=self.fresh)
        gone = bool(out.forgotten) and forgotten_model(st)
        if held is not None and (gone or held.st is not st):
            _HELD.pop(held.token, None)  # (a model forgotten, or a marker replaced)
        if gone:  # forgotten, no record since: out of Beam state and this worker's memory
            self.wrote.pop(key, None)
            if self.snapshot is not None and key in self.snapshot:
                self._write(key, model, HeldState(None))  # the marker (HeldState)
            else:
                self._write(key, model, None)
        elif held is None or held.st is not st or self.job.state_in_beam:
            # Kept in this worker, the model changes in place: Beam's state (its token) is
            # written once. (Each write makes the SDK's state cache weigh the value at the
            # bundle's end, ~3 ms a key on Beam 2.77: objsize scans every module first.)
            self._write(key, model, held if held is not None and held.st is st
                        else HeldState(st))
        self.last_ts = ts
        for name, rows in out.items():
            if rows:
                yield name, rows
        for forgotten in out.forgotten:  # tombstones, before the state of a model made since
            yield STATES_TAG, forgotten
        if gone:  # (its tombstone, above, is its state)
            crash_point("learn", len(parsed))
            return
        if self.job.state_in_beam:
            self.wrote[key] = st  # handed over at finish_bundle (a new object each bundle)
        else:
            yield STATES_TAG, (key, st)  # the live object: the Committer may cut it any time
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
            poll_linger_ms=job.poll_linger_ms,
            drain_path=job.drain_path, progress_in_records=True, batch_records=True,
            # snapshots wait for a bundle's end only with models in Beam state
            call_ms=job.reader_call_ms,
            call_records=job.snapshot_every if job.state_in_beam else 0,
            kafka_client=job.kafka_client, merge=job.merge)
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


__all__ = ["CRASH_ENV", "CRASH_POINTS", "DEAD_LETTERS", "PASS_KEY", "PROGRESS_TAG", "STATES_TAG",
           "Committer", "LiveStream", "LiveStreamOutputs", "ModelStateCoder", "ReadProgress",
           "RouteRecords", "SplitOutputs", "StreamJob", "StreamPipelineOptions",
           "WriteKafkaRows", "crash_point", "learn_dofn", "register_local_store", "route_clock",
           "row_message", "unregister_local_store"]
