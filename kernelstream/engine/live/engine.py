"""Live streams with delayed labels: predict on arrival, learn when the label comes (no Beam).

One :class:`StreamEngine` serves every model of a ``kernelstream stream`` run. The Beam
pipeline and the reference loop (:func:`reference_outputs`) call the same two steps, so there is
one loop: :meth:`StreamEngine.route` parses a Kafka record once and names the models it goes to;
:meth:`StreamEngine.process` applies it to one model's :class:`ModelState` and returns rows.

Messages (key = event id, UTF-8; a record without key is a dead letter): how a record is
parsed and which models it goes to is :mod:`kernelstream.engine.live.routing`, the half of
the engine that :class:`StreamEngine` holds (``router``) beside the per-model processing below.

What a model does with a record at timestamp ``t`` (milliseconds), in this order
    0. A record at or before the model's last applied offset of its partition
       (``ModelState.applied``) is skipped without output: replay after a restore is idempotent.
    1. The model's event-time clock becomes ``max(clock, t)``. If the clock reached the end of
       the current metrics window ``[k W, (k+1) W)``, that window's ``metrics`` row is emitted
       and the window containing the clock opens (windows nothing happened in have no row).
       Everything the record causes counts in the window of the clock (a late record counts in
       the open window).
    2. Ids resolved at least ``label_ttl_ms`` ago (clock time) are forgotten; then every pending
       event with ``event_ts + ttl <= clock`` expires, in (deadline, position) order, as an
       ``unlabeled`` row (``expired_at_ms`` = the clock) and is remembered as expired for ttl.
    3. The record itself, through the step and outcome rule of
       :mod:`kernelstream.engine.prequential` (the replay's too):
       * unlabelled feature record: ``score = score_row(learner, x)``, a ``predictions`` row,
         and the event waits (x, score, predicted label, event time, prediction position);
       * labelled feature record: ``step_row(learner, x, y)`` (the learner's one-row
         test-then-train, the same per-round code as ``step_block``), a prediction row
         and an ``outcomes`` row with delay 0;
       * label record for a pending id: ``learn_row(learner, x, y)`` on the stored x, and an
         outcome row: the score and predicted label made on arrival, the label, ``mistake``
         (classification) and ``loss`` (``judge_one``), ``delay_ms`` =
         label timestamp - event timestamp, and the number of support vectors after learning.
    Learning order is therefore label arrival order; predictions use the model as it is, and
    the update at label time scores x with the model as it is then. A model's learner is made
    on its first record, ``config.make(spec.seed, 0)`` (or given to :meth:`new_state`).
    Dead letters (stage ``join``): a feature record whose id is pending or resolved within the
    last ttl ("duplicate event id"), a label for an id never seen or already forgotten ("label
    for unknown event id"), for an expired id ("label for expired event id"), or for an id
    already labelled ("duplicate label"). A ``ValueError`` of the learner is a dead letter of
    stage ``learn`` and the run goes on. Parse errors are dead letters of :meth:`route`.

    ``score_row`` drops the learner's score cache (the round's work ``predict_one`` keeps for
    the next ``learn_one`` of the same x, e.g. OKS's random kernel draw), so a label always
    learns from a fresh score: a restored state (which has no cache) continues bit for bit.

Counts add up: every routed (record, model) that is not skipped gives a prediction, an outcome,
both (a labelled event) or one dead letter; per model ``predictions = outcomes + unlabeled +
pending + learn_rejected`` (:meth:`ModelState.counts`; the run-wide identities are
:mod:`kernelstream.engine.live.accounting`'s). Memory per model is bounded by the events
of one ttl (pending) and of two ttls (remembered ids).

Metrics rows (one per closed window, plus :meth:`StreamEngine.flush_metrics` where an input
ends for good; a stream's drain does not flush: it is a checkpoint, and the next run closes
the window):
window and cumulative counts, mistakes and mistake rate (percent), loss sums (exactly rounded:
``math.fsum`` per window, :func:`~kernelstream.engine.exact.exact_add` cumulative), the
cumulative no-skill baseline and regression metrics (``total_`` + the names of
:data:`kernelstream.engine.noskill.FIGURES`: the outcomes in learning order, i.e. label
arrival order), label
delay p50/p99 over the window's outcomes (delay 0 included) by the nearest-rank method,
pending events, support vectors, and ``seconds`` (wall clock inside learner calls) with
``examples_per_second`` (window records / seconds): the only non-deterministic fields.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from kernelstream.engine.exact import exact_add, exact_value
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.live.batch import FEATURES as UNLABELLED_EVENT
from kernelstream.engine.live.batch import LABEL as LABEL_RECORD
from kernelstream.engine.live.batch import LABELLED as LABELLED_EVENT
from kernelstream.engine.live.batch import EventBatch, ParsedRecord, text_and_source
from kernelstream.engine.live.merge import merged as merge_group  # the reference loop's order
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.routing import BULK_MIN, LiveSpec, StreamRouter
from kernelstream.engine.live.rows import (
    OUTPUTS,
    OutcomeRow,
    PredictionRow,
    Repeat,
    RowBlock,
    Rows,
    metrics_row,
    stream_dead_letter,
    unlabeled_row,
)
from kernelstream.engine.live.state import EXPIRED, LABELLED, ModelState, Pending, StateCut
from kernelstream.engine.live.state import cut_state as _cut_state
from kernelstream.engine.live.state import decode_state as _decode_state
from kernelstream.engine.live.state import encode_state as _encode_state
from kernelstream.engine.prequential import (
    judge,
    judge_one,
    learn_row,
    learner_loss,
    predicted_label,
    score_row,
    step_block,
    step_row,
)
from kernelstream.engine.replay.core import selects_kernels
from kernelstream.learners.base import Learner
from kernelstream.sparse import CSR

__all__ = [
    "BULK_MIN",
    "EventBatch",
    "LiveOutputs",
    "LiveSpec",
    "ModelState",
    "ParsedRecord",
    "StreamEngine",
    "merge_group",
    "reference_outputs",
]

# reference_outputs routes and processes records in chunks of this many, as a stream's
# reader hands them over per call (the chunking never changes a model's rows or state).
REFERENCE_CHUNK = 1000


class LiveOutputs:
    """Rows by output name (:data:`~kernelstream.engine.live.rows.OUTPUTS`); one object can
    collect the rows of many :meth:`StreamEngine.process` calls. Predictions and outcomes
    are :class:`~kernelstream.engine.live.rows.Rows` (column blocks, read as row dicts),
    the other outputs lists of row dicts."""

    __slots__ = (*OUTPUTS, "_model", "_p", "_o")

    def __init__(self) -> None:
        self.predictions = Rows()
        self.outcomes = Rows()
        self.unlabeled: list[dict[str, Any]] = []
        self.metrics: list[dict[str, Any]] = []
        self.dead_letters: list[dict[str, Any]] = []
        # rows of the model being processed, one named row each, until they become a
        # block of columns (_flush)
        self._model: tuple[str, str, str | None] = ("", "", None)
        self._p: list[PredictionRow] = []
        self._o: list[OutcomeRow] = []

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)

    def items(self) -> list[tuple[str, Any]]:
        return [(n, getattr(self, n)) for n in OUTPUTS]

    def __len__(self) -> int:
        return sum(len(getattr(self, n)) for n in OUTPUTS)

    def _start(self, st: ModelState) -> None:
        self._model = (st.key, st.config, st.entity)

    def _flush(self) -> None:
        """The pending named rows as blocks (a named row of columns each) of the current
        model."""
        if self._p:
            self.predictions.append(RowBlock("predictions", *self._model,
                                             PredictionRow._make(zip(*self._p, strict=True))))
            self._p = []
        if self._o:
            self.outcomes.append(RowBlock("outcomes", *self._model,
                                          OutcomeRow._make(zip(*self._o, strict=True))))
            self._o = []


class StreamEngine:
    """Routing (by its :class:`~kernelstream.engine.live.routing.StreamRouter`, ``router``)
    and processing of a stream's records (see the module docstring)."""

    def __init__(self, spec: LiveSpec) -> None:
        self.spec = spec
        self.router = StreamRouter(spec)
        self.ttl = int(spec.label_ttl_ms)
        self.window = int(spec.metrics_window_ms)
        self.configs = {c.label: c for c in spec.configs}
        self._losses: dict[str, Any] = {}  # config name -> loss function of its learners

    # -- routing: the router's (once per record, or per reader call) ----------------------
    def route(self, rec: SourceRecord) -> list[tuple[str, ParsedRecord]] | dict[str, Any]:
        """:meth:`StreamRouter.route <kernelstream.engine.live.routing.StreamRouter.route>`."""
        return self.router.route(rec)

    def route_many(self, records: Iterable[SourceRecord]
                   ) -> tuple[dict[str, EventBatch], list[dict[str, Any]]]:
        """:meth:`StreamRouter.route_many
        <kernelstream.engine.live.routing.StreamRouter.route_many>`."""
        return self.router.route_many(records)

    # -- state -------------------------------------------------------------------------------
    def new_state(self, model_key: str, learner: Any = None) -> ModelState:
        """A model's empty state (``learner``: start from a trained learner, e.g. a replay's)."""
        sk = StreamKey.decode(model_key)
        if sk.config not in self.configs:
            raise KeyError(f"model {model_key!r}: no configuration named {sk.config!r}")
        return ModelState(model_key, sk.config, sk.entity, learner)

    def encode_state(self, st: ModelState) -> bytes:
        """Versioned compact bytes of ``st`` (no pickle; see ``engine.live.state``)."""
        return _encode_state(st)

    def cut_state(self, st: ModelState) -> StateCut:
        """``st`` detached at this moment; its ``encode()`` gives :meth:`encode_state`'s bytes
        and may run on another thread while ``st`` goes on changing."""
        return _cut_state(st)

    def decode_state(self, data: bytes) -> ModelState:
        return _decode_state(data, self.ttl)

    # -- processing --------------------------------------------------------------------------
    def process(self, model_key: str, st: ModelState, parsed: ParsedRecord,
                out: LiveOutputs | None = None) -> LiveOutputs:
        """Apply one routed record to the model's state ``st`` (mutated); rows go to ``out``
        (a new :class:`LiveOutputs` when None), which is returned (:meth:`process_many` of one
        record)."""
        return self.process_many(model_key, st, (parsed,), out)

    def process_many(self, model_key: str, st: ModelState,
                     parsed: EventBatch | Sequence[ParsedRecord],
                     out: LiveOutputs | None = None) -> LiveOutputs:
        """Apply a model's routed records in order: exactly the rows and state of
        :meth:`process` one record at a time. A run of labelled events that nothing else
        interleaves (no window closes and no pending event expires inside it, no id seen
        before, no replayed offset) is learnt with one ``predict_learn_many`` call, which is
        bit-identical to the learner's per-row ``step``, and its rows and state changes are
        made for the whole run at once; kernel-selection learners learn one row at a time.
        Likewise a run of unlabelled events each followed at once by its label record
        (:meth:`_pair_run_end`): predicting, then learning from a fresh score of the same
        row on the same model, is the learner's ``step`` when its score draws nothing
        (``draws_in_predict`` false), so the run is one ``predict_learn_many`` too."""
        if out is None:
            out = LiveOutputs()
        b = parsed if isinstance(parsed, EventBatch) else EventBatch.of(parsed)
        kind = b.kind
        n = len(kind)
        out._start(st)
        try:
            i = 0
            while i < n:
                if (kind[i] == UNLABELLED_EVENT and i + 3 < n and kind[i + 1] == LABEL_RECORD
                        and kind[i + 2] == UNLABELLED_EVENT and st.learner is not None
                        and not type(st.learner).draws_in_predict
                        and not selects_kernels(cast(Learner, st.learner))):
                    end = self._pair_run_end(st, b, i)
                    if end - i >= 4 and self._learn_pairs(st, b, i, end, out):
                        i = end
                        continue
                p = b.record(i)
                if not self._arrive(st, p, out):
                    i += 1
                    continue
                if (i + 1 < n and kind[i] == LABELLED_EVENT and kind[i + 1] == LABELLED_EVENT
                        and not selects_kernels(cast(Learner, st.learner))):  # _arrive made it
                    end = self._run_end(st, b, i)
                    if end - i >= 2 and self._learn_run(st, b, i, end, out):
                        i = end
                        continue
                self._act(st, p, out)
                i += 1
        finally:
            out._flush()
        return out

    def _arrive(self, st: ModelState, p: ParsedRecord, out: LiveOutputs) -> bool:
        """Steps 0-2 of a record (module docstring); False: skipped (already applied)."""
        tp = (p.topic, p.partition)
        last = st.applied.get(tp)
        if last is not None and p.offset <= last:
            st.skipped += 1
            return False
        st.applied[tp] = p.offset
        t = p.timestamp_ms
        clock = st.clock_ms = t if st.clock_ms is None or t > st.clock_ms else st.clock_ms
        w = st.window
        if w.start is None:
            w.start = clock - clock % self.window
        elif clock >= w.start + self.window:
            if w.records:
                out.metrics.append(self._metrics_row(st, final=False, closing=True))
            w.reset(clock - clock % self.window)
        self._expire(st, clock, out)
        w.records += 1
        st.records += 1
        if st.learner is None:
            st.learner = self.configs[st.config].make(self.spec.seed, 0)
        return True

    def _act(self, st: ModelState, p: ParsedRecord, out: LiveOutputs) -> None:
        """Step 3 of a record that arrived."""
        if p.label_only:
            self._label(st, p, out)
        elif p.event_id in st.pending or p.event_id in st.resolved:
            self._dead(st, p, out, "duplicate event id", "join")
        elif p.y is None:
            self._predict(st, p, out)
        else:
            self._predict_learn(st, p, out)

    def _run_end(self, st: ModelState, b: EventBatch, i: int) -> int:
        """The end (exclusive) of the run of labelled events starting at ``b[i]`` (which has
        arrived): records that will each be one ``step`` with nothing reading the learner,
        nor anything but the run itself changing the state, in between. Conservative: an id
        seen before, a replayed offset, a window closing or a pending event's deadline ends
        the run, and those records go one by one."""
        kind = b.kind
        n = len(kind)
        end = n
        for other in (0, 2):  # the first record of another kind (FEATURES, LABEL)
            j = kind.find(other, i + 1, end)
            if j >= 0:
                end = j
        ids = b.event_id[i:end]
        pending, resolved = st.pending, st.resolved
        ts, off = b.arrays()
        if not (len(set(ids)) == len(ids) and pending.keys().isdisjoint(ids)
                and resolved.keys().isdisjoint(ids) and b.single_partition()
                and bool(np.all(off[i + 1:end] > off[i:end - 1]))):
            end = self._run_end_scan(st, b, i, end)
            if end - i < 2:
                return end
        # the run stops before the first record whose clock reaches the end of the window
        # or the next expiry deadline (those happen at that record's arrival)
        assert st.clock_ms is not None and st.window.start is not None
        limit = st.window.start + self.window
        if st.expiry and st.expiry[0][0] < limit:
            limit = st.expiry[0][0]
        clock = np.maximum.accumulate(np.maximum(ts[i:end], st.clock_ms))
        return i + int(np.searchsorted(clock, limit, side="left"))

    def _run_end_scan(self, st: ModelState, b: EventBatch, i: int, end: int) -> int:
        """:meth:`_run_end` 's bound on ids and offsets, record by record (records of several
        partitions, duplicates, replays)."""
        pending, resolved = st.pending, st.resolved
        if b.event_id[i] in pending or b.event_id[i] in resolved:
            return i  # a duplicate event id: a dead letter
        ids = {b.event_id[i]}
        applied = {(b.topic[i], b.partition[i]): b.offset[i]}
        for j in range(i + 1, end):
            eid = b.event_id[j]
            if eid in ids or eid in pending or eid in resolved:
                return j
            tp = (b.topic[j], b.partition[j])
            last = applied.get(tp)
            if last is None:
                last = st.applied.get(tp)
            if last is not None and b.offset[j] <= last:
                return j
            ids.add(eid)
            applied[tp] = b.offset[j]
        return end

    @staticmethod
    def _block_step(st: ModelState, X: Any, y: np.ndarray, n_sv: np.ndarray, b: EventBatch,
                    i: int, end: int, first: int, out: LiveOutputs,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool] | None:
        """The learning of a run of :meth:`_learn_run` or :meth:`_learn_pairs`: one
        ``predict_learn_many`` of ``X, y`` (``n_sv`` after each round into ``n_sv[1:]``),
        then steps 0-2 of records ``b[i:end]``, which in such a run only move the clock and
        the applied offsets (of records ``first..end-1``: the caller applied the others).
        None, with nothing changed, when the learner refuses the block (its validation comes
        before any update); else the scores, the run's timestamps, offsets and clock at each
        record, and whether it is of one partition."""
        m = st.learner
        assert m is not None and st.clock_ms is not None
        before = m.t
        t0 = time.perf_counter()
        try:
            scores = step_block(m, X, y, n_sv[1:])
        except ValueError:
            if m.t != before:
                raise  # not a bad row: the learner failed half way (as ReplayLearner does)
            return None
        st.add_seconds(time.perf_counter() - t0)  # one window: no window closes in a run
        out._flush()  # the rows before the run come first
        ts, off = b.arrays()
        ts, off = ts[i:end], off[i:end]
        clock = np.maximum.accumulate(np.maximum(ts, st.clock_ms))
        st.clock_ms = int(clock[-1])
        single = b.single_partition()
        if single:
            st.applied[(b.topic[i], b.partition[i])] = int(off[-1])
        else:
            for j in range(first, end):
                st.applied[(b.topic[j], b.partition[j])] = b.offset[j]
        return scores, ts, off, clock, single

    def _learn_run(self, st: ModelState, b: EventBatch, i: int, end: int,
                   out: LiveOutputs) -> bool:
        """Records ``b[i:end]`` (a run of :meth:`_run_end`; ``b[i]`` has arrived) with one
        ``predict_learn_many``, their rows as column blocks. False, with nothing changed,
        when the learner refuses the block (its validation comes before any update): the
        caller goes one by one."""
        m = st.learner
        assert m is not None and st.clock_ms is not None
        k = end - i
        n_sv = np.empty(k + 1, dtype=np.int64)
        n_sv[0] = m.n_support_vectors
        X = self._run_rows(b, i, end)
        y = np.array(b.y[i:end], dtype=np.float64)
        # steps 0-2 of records i+1..end-1: the run holds no replay, no window end and no
        # expiry (_run_end), so they only move the clock and the counters
        step = self._block_step(st, X, y, n_sv, b, i, end, i + 1, out)
        if step is None:
            return False
        scores, ts, off, clock, single = step
        w = st.window
        w.records += k - 1
        st.records += k - 1
        # step 3: a prediction and an outcome row each
        ids = b.event_id[i:end]
        predicted, mistake, loss, pos, learn_pos = self._judge(
            st, m, scores, y, itertools.repeat(0, k))
        topic: Any = Repeat(b.topic[i]) if single else list(b.topic[i:end])
        part: Any = Repeat(b.partition[i]) if single else list(b.partition[i:end])
        key, config, entity = out._model
        out.predictions.append(RowBlock("predictions", key, config, entity, PredictionRow(
            event_id=ids, position=pos, event_time_ms=ts, topic=topic, partition=part,
            offset=off, score=scores, predicted=predicted, n_support_vectors=n_sv[:k],
            labelled=Repeat(True))))
        out.outcomes.append(RowBlock("outcomes", key, config, entity, OutcomeRow(
            event_id=ids, learn_position=learn_pos, prediction_position=pos, event_time_ms=ts,
            label_time_ms=ts, score=scores, predicted=predicted, label=y, mistake=mistake,
            loss=loss, delay_ms=Repeat(0), n_support_vectors=n_sv[1:], label_topic=topic,
            label_partition=part, label_offset=off)))
        # the ids are resolved at each record's clock, then forgotten as step 2 would have
        st.remember_many((clock + self.ttl).tolist(), ids, LABELLED)
        self._forget(st, st.clock_ms)
        return True

    def _pair_run_end(self, st: ModelState, b: EventBatch, i: int) -> int:
        """The end (exclusive) of the run of (unlabelled event, its label record) pairs
        starting at ``b[i]`` (not arrived yet) that :meth:`_learn_pairs` may learn at once:
        new distinct ids, offsets past the model's applied ones, and a clock that reaches
        neither the end of the metrics window, nor a pending event's deadline, nor the
        pair's own event's deadline (each of those goes one record at a time)."""
        if st.clock_ms is None or st.window.start is None:
            return i
        limit = st.window.start + self.window
        if st.expiry and st.expiry[0][0] < limit:
            limit = st.expiry[0][0]
        # the common case at once: strict alternation, one partition, new distinct ids
        kinds = np.frombuffer(b.kind, dtype=np.uint8)
        end = i + 2 * ((len(kinds) - i) // 2)
        bad = (kinds[i:end:2] != UNLABELLED_EVENT) | (kinds[i + 1:end:2] != LABEL_RECORD)
        if bad.any():
            end = i + 2 * int(np.argmax(bad))
        ids = b.event_id
        ev_ids = ids[i:end:2]
        ts, off = b.arrays()
        last = st.applied.get((b.topic[i], b.partition[i]))
        if not (ev_ids == ids[i + 1:end:2] and len(set(ev_ids)) == len(ev_ids)
                and st.pending.keys().isdisjoint(ev_ids)
                and st.resolved.keys().isdisjoint(ev_ids) and b.single_partition()
                and (last is None or off[i] > last)
                and bool(np.all(off[i + 1:end] > off[i:end - 1]))):
            return self._pair_run_scan(st, b, i, end, limit)
        # the clock at each label (it has reached the pair's event's too)
        clock = np.maximum.accumulate(np.maximum(ts[i:end], st.clock_ms))[1::2]
        late = (clock >= limit) | (clock >= ts[i:end:2] + self.ttl)
        return i + 2 * int(np.argmax(late)) if late.any() else end

    def _pair_run_scan(self, st: ModelState, b: EventBatch, i: int, end: int,
                       limit: int) -> int:
        """:meth:`_pair_run_end` pair by pair (records of several partitions, ids seen
        before, replays), up to ``end``."""
        kind, ids = b.kind, b.event_id
        n = end
        pending, resolved, applied = st.pending, st.resolved, st.applied
        ts, off = b.timestamp_ms, b.offset
        topic, part = b.topic, b.partition
        assert st.clock_ms is not None
        clock = st.clock_ms
        ttl = self.ttl
        seen: set[str] = set()
        last: dict[tuple[str, int], int] = {}
        j = i
        while j + 1 < n and kind[j] == UNLABELLED_EVENT and kind[j + 1] == LABEL_RECORD:
            eid = ids[j]
            if ids[j + 1] != eid or eid in seen or eid in pending or eid in resolved:
                break
            tp, tq = (topic[j], part[j]), (topic[j + 1], part[j + 1])
            lo = last.get(tp, applied.get(tp))
            if lo is not None and off[j] <= lo:
                break
            lo = off[j] if tq == tp else last.get(tq, applied.get(tq))
            if lo is not None and off[j + 1] <= lo:
                break
            t_ev, t_lab = ts[j], ts[j + 1]
            c = max(clock, t_ev, t_lab)
            if c >= limit or c >= t_ev + ttl:
                break
            clock = c
            last[tp] = off[j]
            last[tq] = off[j + 1]
            seen.add(eid)
            j += 2
        return j

    def _learn_pairs(self, st: ModelState, b: EventBatch, i: int, end: int,
                     out: LiveOutputs) -> bool:
        """The (event, label) pairs ``b[i:end]`` (a run of :meth:`_pair_run_end`) with one
        ``predict_learn_many``: the rows and state of :meth:`_predict` then :meth:`_label`,
        pair by pair. False, with nothing changed, when the learner refuses the block (the
        caller goes one by one)."""
        m = st.learner
        assert m is not None and st.clock_ms is not None
        k = (end - i) // 2
        n_sv = np.empty(k + 1, dtype=np.int64)
        n_sv[0] = m.n_support_vectors
        X = self._pair_rows(b, i, end)
        y = np.array(b.y[i + 1:end:2], dtype=np.float64)
        # steps 0-2: the clock at each record; no replay, window end or expiry in the run
        step = self._block_step(st, X, y, n_sv, b, i, end, i, out)
        if step is None:
            return False
        scores, ts, off, clock, single = step
        w = st.window
        w.records += 2 * k
        st.records += 2 * k
        ids = b.event_id[i:end:2]
        ev_ts, lab_ts = ts[0::2], ts[1::2]
        delay = lab_ts - ev_ts
        predicted, mistake, loss, pos, learn_pos = self._judge(
            st, m, scores, y, delay.tolist())
        key, config, entity = out._model
        if single:
            ev_topic: Any = Repeat(b.topic[i])
            ev_part: Any = Repeat(b.partition[i])
            lab_topic, lab_part = ev_topic, ev_part
        else:
            ev_topic, ev_part = list(b.topic[i:end:2]), list(b.partition[i:end:2])
            lab_topic, lab_part = list(b.topic[i + 1:end:2]), list(b.partition[i + 1:end:2])
        out.predictions.append(RowBlock("predictions", key, config, entity, PredictionRow(
            event_id=ids, position=pos, event_time_ms=ev_ts, topic=ev_topic, partition=ev_part,
            offset=off[0::2], score=scores, predicted=predicted, n_support_vectors=n_sv[:k],
            labelled=Repeat(False))))
        out.outcomes.append(RowBlock("outcomes", key, config, entity, OutcomeRow(
            event_id=ids, learn_position=learn_pos, prediction_position=pos,
            event_time_ms=ev_ts, label_time_ms=lab_ts, score=scores, predicted=predicted,
            label=y, mistake=mistake, loss=loss, delay_ms=delay, n_support_vectors=n_sv[1:],
            label_topic=lab_topic, label_partition=lab_part, label_offset=off[1::2])))
        # each id resolved at its label's clock, then forgotten as step 2 would have
        st.remember_many((clock[1::2] + self.ttl).tolist(), ids, LABELLED)
        self._forget(st, st.clock_ms)
        return True

    @staticmethod
    def _pair_rows(b: EventBatch, i: int, end: int) -> np.ndarray | CSR:
        """The features of the events ``b[i:end:2]``: a slice of the batch matrix when they
        are consecutive rows of it, else stacked."""
        rows = b.xrow[i:end:2]
        r0, k = rows[0], len(rows)
        if r0 >= 0 and rows[-1] - r0 == k - 1 and rows == list(range(r0, r0 + k)):
            return cast(np.ndarray, b.X)[r0:r0 + k]
        xs = [b.x(j) for j in range(i, end, 2)]
        if isinstance(xs[0], CSR):
            return CSR.vstack(cast("list[CSR]", xs))
        return np.stack(cast("list[np.ndarray]", xs))

    def _judge(self, st: ModelState, m: Learner, scores: np.ndarray, y: np.ndarray,
               delays: Iterable[int],
               ) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray, np.ndarray]:
        """The outcomes of rows a run has just learnt (pre-update ``scores``, labels ``y``,
        label delays ``delays``), counted in ``st`` as :meth:`_learnt` and :meth:`_outcome`
        count one: predicted labels, mistakes, losses
        (:func:`~kernelstream.engine.prequential.judge`), prediction and learn positions."""
        k = int(scores.shape[0])
        loss_fn = self._loss_fn(st.config, m)
        predicted, wrong, loss = judge(m, scores, y, loss_fn)
        w = st.window
        mistake: Any = Repeat(None)
        if wrong is not None:
            mistakes = int(np.count_nonzero(wrong))
            mistake = wrong
            st.mistakes += mistakes
            w.mistakes += mistakes
        st.noskill.add(y, predicted, m.task == "classification", loss_fn)
        pos = np.arange(st.position, st.position + k, dtype=np.int64)
        learn_pos = np.arange(st.learnt, st.learnt + k, dtype=np.int64)
        st.position += k
        st.learnt += k
        w.predictions += k
        w.outcomes += k
        w.losses.extend(loss.tolist())
        w.delays.extend(delays)
        return predicted, mistake, loss, pos, learn_pos

    def _loss_fn(self, config: str, m: Learner) -> Any:
        """The loss function of the learners of ``config`` (looked up once)."""
        loss_fn = self._losses.get(config)
        if loss_fn is None:
            loss_fn = self._losses[config] = learner_loss(m).value
        return loss_fn

    @staticmethod
    def _run_rows(b: EventBatch, i: int, end: int) -> np.ndarray | CSR:
        """The features of ``b[i:end]``: a slice of the batch matrix when they are
        consecutive rows of it, else stacked."""
        rows = b.xrow[i:end]
        r0 = rows[0]
        if r0 >= 0 and rows[-1] - r0 == end - i - 1 and rows == list(range(r0, r0 + end - i)):
            return cast(np.ndarray, b.X)[r0:r0 + end - i]  # rows of X: it exists
        # events: each has its features, all of one kind (a stream is dense or sparse)
        xs = [b.x(j) for j in range(i, end)]
        if isinstance(xs[0], CSR):
            return CSR.vstack(cast("list[CSR]", xs))
        return np.stack(cast("list[np.ndarray]", xs))

    @staticmethod
    def _forget(st: ModelState, clock: int) -> None:
        if st.forget.next_at <= clock:
            st.forget_until(clock)

    def _expire(self, st: ModelState, clock: int, out: LiveOutputs) -> None:
        self._forget(st, clock)
        heap, pending = st.expiry, st.pending
        while heap and heap[0][0] <= clock:
            _, pos, eid = heapq.heappop(heap)
            ev = pending.get(eid)
            if ev is None or ev.position != pos:
                continue  # labelled meanwhile
            del pending[eid]
            self._resolve(st, eid, EXPIRED, clock)
            st.unlabeled += 1
            st.window.unlabeled += 1
            out.unlabeled.append(unlabeled_row(st.key, st.config, st.entity, eid, pos,
                                               ev.event_time_ms, clock))

    def _resolve(self, st: ModelState, eid: str, status: int, clock: int) -> None:
        st.remember(clock + self.ttl, eid, status)

    def _dead(self, st: ModelState, p: ParsedRecord, out: LiveOutputs, reason: str, stage: str,
              position: int | None = None) -> None:
        st.dead_letters += 1
        st.window.dead_letters += 1
        text, source = text_and_source(p)
        out.dead_letters.append(stream_dead_letter(
            source, p.topic, p.partition, p.offset, text, reason, stage, st.key,
            p.event_id, position))

    def _predict(self, st: ModelState, p: ParsedRecord, out: LiveOutputs) -> None:
        m = st.learner
        assert m is not None and p.x is not None
        t0 = time.perf_counter()
        try:
            score = score_row(m, p.x)
        except ValueError as e:
            self._dead(st, p, out, f"learner rejected the row: {e}", "learn")
            return
        st.add_seconds(time.perf_counter() - t0)
        predicted = predicted_label(m, score)
        pos = st.position
        st.position += 1
        st.window.predictions += 1
        # a row of route_many's batch matrix: keep a copy, not the whole batch, while it waits
        x = p.x if isinstance(p.x, CSR) or p.x.base is None else p.x.copy()
        st.pending[p.event_id] = Pending(x, score, predicted, p.timestamp_ms, pos)
        heapq.heappush(st.expiry, (p.timestamp_ms + self.ttl, pos, p.event_id))
        # positional: a named row per record without keyword binding (the type checker
        # checks the count; the fields are the schema's)
        out._p.append(PredictionRow(p.event_id, pos, p.timestamp_ms, p.topic, p.partition,
                                    p.offset, score, predicted, int(m.n_support_vectors),
                                    False))

    def _predict_learn(self, st: ModelState, p: ParsedRecord, out: LiveOutputs) -> None:
        m = st.learner
        assert m is not None
        n_sv = int(m.n_support_vectors)
        t0 = time.perf_counter()
        try:
            score = step_row(m, p.x, p.y)
        except ValueError as e:
            self._dead(st, p, out, f"learner rejected the row: {e}", "learn")
            return
        st.add_seconds(time.perf_counter() - t0)
        self._learnt(st, p, out, float(score), n_sv, int(m.n_support_vectors))

    def _learnt(self, st: ModelState, p: ParsedRecord, out: LiveOutputs, score: float,
                n_sv_before: int, n_sv_after: int) -> None:
        """The rows of a labelled event the learner has just learnt (``score`` before)."""
        m = st.learner
        assert m is not None
        predicted = predicted_label(m, score)
        pos = st.position
        st.position += 1
        st.window.predictions += 1
        assert st.clock_ms is not None
        assert p.x is not None  # a labelled event has its features
        self._resolve(st, p.event_id, LABELLED, st.clock_ms)
        out._p.append(PredictionRow(p.event_id, pos, p.timestamp_ms, p.topic, p.partition,
                                    p.offset, score, predicted, n_sv_before, True))
        self._outcome(st, p, out, Pending(p.x, score, predicted, p.timestamp_ms, pos),
                      n_sv_after)

    def _label(self, st: ModelState, p: ParsedRecord, out: LiveOutputs) -> None:
        ev = st.pending.pop(p.event_id, None)
        if ev is None:
            status = st.resolved.get(p.event_id)
            reason = ("label for unknown event id" if status is None else
                      "label for expired event id" if status == EXPIRED else "duplicate label")
            self._dead(st, p, out, reason, "join")
            return
        m = st.learner
        assert m is not None and st.clock_ms is not None
        self._resolve(st, p.event_id, LABELLED, st.clock_ms)
        t0 = time.perf_counter()
        try:
            learn_row(m, ev.x, p.y)
        except ValueError as e:
            st.learn_rejected += 1
            self._dead(st, p, out, f"learner rejected the row: {e}", "learn", ev.position)
            return
        st.add_seconds(time.perf_counter() - t0)
        self._outcome(st, p, out, ev, int(m.n_support_vectors))

    def _outcome(self, st: ModelState, p: ParsedRecord, out: LiveOutputs, ev: Pending,
                 n_sv: int) -> None:
        m = st.learner
        assert m is not None and p.y is not None
        y = p.y
        loss_fn = self._losses.get(st.config) or self._loss_fn(st.config, m)
        classify = m.task == "classification"
        mistake, loss = judge_one(classify, ev.score, ev.predicted, y, loss_fn)
        w = st.window
        if mistake:
            st.mistakes += 1
            w.mistakes += 1
        st.noskill.add_one(y, ev.predicted, classify, loss_fn)
        delay = p.timestamp_ms - ev.event_time_ms
        lp = st.learnt
        st.learnt += 1
        w.outcomes += 1
        w.losses.append(loss)
        w.delays.append(delay)
        out._o.append(OutcomeRow(p.event_id, lp, ev.position, ev.event_time_ms,
                                 p.timestamp_ms, ev.score, ev.predicted, y, mistake, loss,
                                 delay, n_sv, p.topic, p.partition, p.offset))

    # -- metrics -----------------------------------------------------------------------------
    def flush_metrics(self, st: ModelState, final: bool = True) -> list[dict[str, Any]]:
        """The open window's metrics so far (end of input), or nothing when it saw no
        record. ``st`` is not changed: the window goes on, and the row's id
        (``{key}/m/{start}/partial/{records}``) differs from the closed window's."""
        if st.window.start is None or not st.window.records:
            return []
        return [self._metrics_row(st, final=final, closing=False)]

    def _metrics_row(self, st: ModelState, final: bool, closing: bool) -> dict[str, Any]:
        m = st.learner
        total_loss = exact_add(st.loss_total, np.asarray(st.window.losses, dtype=np.float64))
        if closing:
            st.loss_total = total_loss
        return metrics_row(st, self.configs[st.config].learner, self.window,
                           (m.task if m is not None else self.spec.read.task) == "classification",
                           exact_value(total_loss), final, closing)


# -- the reference loop ------------------------------------------------------------------------


def reference_outputs(records: Iterable[SourceRecord], spec: LiveSpec,
                      states: Mapping[str, ModelState] | None = None, *,
                      flush: bool = False,
                      chunk: int = REFERENCE_CHUNK) -> tuple[LiveOutputs, dict[str, ModelState]]:
    """THE loop: route and process ``records`` in the given order, one state per model (the
    given ``states`` are continued, and mutated), ``chunk`` records at a time as a stream's
    reader hands them over (:meth:`StreamEngine.route_many`, then
    :meth:`StreamEngine.process_many` per model; chunking never changes a model's rows or
    state, only how the lists interleave: per chunk, parse dead letters first, then the
    models in order of first appearance). ``flush``: end with every model's
    :meth:`~StreamEngine.flush_metrics` (the end of an input for good; a drained stream does
    not flush: its next run continues the window). Returns the rows and the
    states by model key."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    engine = StreamEngine(spec)
    out = LiveOutputs()
    st_by_key: dict[str, ModelState] = dict(states or {})
    it = iter(records)
    while batch := list(itertools.islice(it, chunk)):
        groups, dead = engine.route_many(batch)
        out.dead_letters.extend(dead)
        for key, parsed in groups.items():
            st = st_by_key.get(key)
            if st is None:
                st = st_by_key[key] = engine.new_state(key)
            engine.process_many(key, st, parsed, out)
    if flush:
        for st in st_by_key.values():
            out.metrics.extend(engine.flush_metrics(st, final=True))
    return out, st_by_key
