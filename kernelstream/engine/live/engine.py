"""Live streams with delayed labels: predict on arrival, learn when the label comes (no Beam).

One :class:`StreamEngine` serves every model of a ``kernelstream stream`` run. The Beam
pipeline and the reference loop (:func:`reference_outputs`) call the same two steps, so there is
one loop: :meth:`StreamEngine.route` parses a Kafka record once and names the models it goes to;
:meth:`StreamEngine.process` applies it to one model's :class:`ModelState` and returns rows.

Messages (key = event id, UTF-8; a record without key is a dead letter): how a record is
parsed is :mod:`kernelstream.engine.live.parsing` and which models it goes to
:mod:`kernelstream.engine.live.routing`, the half of the engine that :class:`StreamEngine`
holds (``router``) beside the per-model processing below.

This module owns that processing record by record: arrival (replayed offsets, the clock,
metrics windows), the label join (events waiting for their labels, expiry, duplicate and
unknown ids), the rows each record makes (:class:`LiveOutputs`), the metrics rows, and the
reference loop. The runs of records :meth:`StreamEngine.process_many` learns with one
``predict_learn_many`` call instead, with exactly this path's rows and state, are
:mod:`kernelstream.engine.live.runs` (:class:`~kernelstream.engine.live.runs.StreamRuns`,
the engine's base).

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
    A configuration with a ``target`` (``LearnerConfig.target``, ``--scale-target auto`` of a
    regression) passes it to each of them: its learners learn the standardised target and every
    score comes back in the target's units, as a replay's step does.
    A **tick** (``TICK`` in a model's batch: no record, only a timestamp) is steps 1-2 alone:
    the clock of a quiet ``--key-by`` entity's model moves to the stream's clock, so its
    events expire and its window closes (:mod:`kernelstream.engine.live.clock`, whose
    :class:`~kernelstream.engine.live.clock.QuietClock` the router places them with; a
    window that saw only a tick's expiries has a metrics row too). A **forget** (``FORGET``,
    with ``--forget-entities-after``) drops the model: its counts go to
    :attr:`LiveOutputs.forgotten`, and the state becomes a new model's (``renew``), which a
    later record of the entity starts from; a driver drops a state left new
    (:func:`forgotten_model`).
    Learning order is therefore label arrival order; predictions use the model as it is, and
    the update at label time scores x with the model as it is then. A model's learner is made
    on its first record, ``config.make(spec.seed, 0)`` (or given to :meth:`new_state`).
    Dead letters (stage ``join``): a feature record whose id is pending or resolved within the
    last ttl ("duplicate event id"), a label for an id never seen or already forgotten ("label
    for unknown event id"), for an expired id ("label for expired event id"), for an event
    the learner refused ("label for rejected event id"), or for an id already labelled
    ("duplicate label"). A ``ValueError`` of the learner is a dead letter of stage ``learn``
    and the run goes on; a refused event's id is remembered for a ttl as a resolved one is
    (the same id again within it is a "duplicate event id"). Parse errors are dead letters of
    :meth:`route`.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from kernelstream.engine.exact import exact_add, exact_value
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.live.batch import FEATURES as UNLABELLED_EVENT
from kernelstream.engine.live.batch import FORGET, TICK, EventBatch, ParsedRecord, text_and_source
from kernelstream.engine.live.batch import LABEL as LABEL_RECORD
from kernelstream.engine.live.batch import LABELLED as LABELLED_EVENT
from kernelstream.engine.live.clock import QuietClock
from kernelstream.engine.live.parsing import LiveSpec
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.routing import StreamRouter
from kernelstream.engine.live.rows import (
    OUTPUTS,
    OutcomeRow,
    PredictionRow,
    RowBlock,
    Rows,
    metrics_row,
    stream_dead_letter,
    unlabeled_row,
)
from kernelstream.engine.live.runs import StreamRuns
from kernelstream.engine.live.state import (
    EXPIRED,
    LABELLED,
    REJECTED,
    Forgotten,
    ModelState,
    Pending,
    StateCut,
)
from kernelstream.engine.live.state import cut_state as _cut_state
from kernelstream.engine.live.state import decode_state as _decode_state
from kernelstream.engine.live.state import encode_state as _encode_state
from kernelstream.engine.prequential import (
    judge_one,
    learn_row,
    predicted_label,
    score_row,
    step_row,
)
from kernelstream.engine.replay.core import selects_kernels
from kernelstream.learners.base import Learner
from kernelstream.sparse import CSR

__all__ = ["LiveOutputs", "StreamEngine", "forgotten_model", "quiet_clock",
           "reference_outputs"]

# reference_outputs routes and processes records in chunks of this many, as a stream's
# reader hands them over per call (the chunking never changes a model's rows or state).
REFERENCE_CHUNK = 1000


class LiveOutputs:
    """Rows by output name (:data:`~kernelstream.engine.live.rows.OUTPUTS`); one object can
    collect the rows of many :meth:`StreamEngine.process` calls. Predictions and outcomes
    are :class:`~kernelstream.engine.live.rows.Rows` (column blocks, read as row dicts),
    the other outputs lists of row dicts."""

    __slots__ = (*OUTPUTS, "_model", "_o", "_p", "_rid", "forgotten")

    def __init__(self) -> None:
        # the models forgotten (FORGET), in order: (model key, what it had counted)
        self.forgotten: list[tuple[str, Forgotten]] = []
        self.predictions = Rows()
        self.outcomes = Rows()
        self.unlabeled: list[dict[str, Any]] = []
        self.metrics: list[dict[str, Any]] = []
        self.dead_letters: list[dict[str, Any]] = []
        # rows of the model being processed, one named row each, until they become a
        # block of columns (_flush)
        self._model: tuple[str, str, str | None] = ("", "", None)
        self._rid = ""  # the model's ModelState.rid
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
        self._rid = st.rid

    def _flush(self) -> None:
        """The pending named rows as blocks (a named row of columns each) of the current
        model."""
        if self._p:
            self.predictions.append(RowBlock("predictions", *self._model,
                                             PredictionRow._make(zip(*self._p, strict=True)),
                                             self._rid))
            self._p = []
        if self._o:
            self.outcomes.append(RowBlock("outcomes", *self._model,
                                          OutcomeRow._make(zip(*self._o, strict=True)),
                                          self._rid))
            self._o = []


class StreamEngine(StreamRuns):
    """Routing (by its :class:`~kernelstream.engine.live.routing.StreamRouter`, ``router``)
    and processing of a stream's records (see the module docstring); the runs that
    :meth:`process_many` learns at once are its base's,
    :class:`~kernelstream.engine.live.runs.StreamRuns`."""

    def __init__(self, spec: LiveSpec, clock: QuietClock | None = None) -> None:
        self.spec = spec
        self.router = StreamRouter(spec, clock=clock)
        self.ttl = int(spec.label_ttl_ms)
        self.window = int(spec.metrics_window_ms)
        self.configs = {c.label: c for c in spec.configs}
        # with forgetting, a new model is stamped with where its first record was read
        # (ModelState.born: its rows' ids differ from a forgotten model's of the same key)
        self.stamp = spec.forget_after_ms is not None
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
                     out: LiveOutputs | None = None,
                     renew: Callable[[str], ModelState] | None = None) -> LiveOutputs:
        """Apply a model's routed records in order: exactly the rows and state of
        :meth:`process` one record at a time. A run of labelled events that nothing else
        interleaves (no window closes and no pending event expires inside it, no id seen
        before, no replayed offset) is learnt with one ``predict_learn_many`` call, which is
        bit-identical to the learner's per-row ``step``, and its rows and state changes are
        made for the whole run at once; kernel-selection learners learn one row at a time.
        Likewise a run of unlabelled events each followed at once by its label record
        (:meth:`_pair_run_end`): predicting, then learning from a fresh score of the same
        row on the same model, is the learner's ``step`` when its score draws nothing
        (``draws_in_predict`` false), so the run is one ``predict_learn_many`` too.

        A forget (``FORGET``) makes ``st`` in place the state ``renew(model_key)`` gives (a new
        model's: :meth:`new_state` when None; a stream's warm start gives its ``--init-from``
        learner), after the old one's counts went to ``out.forgotten``."""
        if out is None:
            out = LiveOutputs()
        b = parsed if isinstance(parsed, EventBatch) else EventBatch.of(parsed)
        kind = b.kind
        n = len(kind)
        self._stamp(st, b, 0)
        out._start(st)
        try:
            i = 0
            while i < n:
                if kind[i] == TICK:
                    self._tick(st, int(b.timestamp_ms[i]), out)
                    i += 1
                    continue
                if kind[i] == FORGET:
                    self._drop(st, renew or self.new_state, out)
                    i += 1
                    self._stamp(st, b, i)
                    out._flush()  # the rows so far are the forgotten model's
                    out._start(st)
                    continue
                if (kind[i] == UNLABELLED_EVENT and i + 3 < n and kind[i + 1] == LABEL_RECORD
                        and kind[i + 2] == UNLABELLED_EVENT and st.learner is not None
                        and not type(st.learner).draws_in_predict
                        and not selects_kernels(cast(Learner, st.learner))):
                    end = self._width_end(b, i, self._pair_run_end(st, b, i), 2)
                    if end - i >= 4 and self._learn_pairs(st, b, i, end, out):
                        i = end
                        continue
                p = b.record(i)
                if not self._arrive(st, p, out):
                    i += 1
                    continue
                if (i + 1 < n and kind[i] == LABELLED_EVENT and kind[i + 1] == LABELLED_EVENT
                        and not selects_kernels(cast(Learner, st.learner))):  # _arrive made it
                    end = self._width_end(b, i, self._run_end(st, b, i), 1)
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
        self._advance(st, p.timestamp_ms, out)
        st.window.records += 1
        st.records += 1
        if st.learner is None:
            st.learner = self.configs[st.config].make(self.spec.seed, 0)
        return True

    def _advance(self, st: ModelState, t: int, out: LiveOutputs) -> None:
        """Steps 1-2 at timestamp ``t``: the clock, the metrics window, expiry."""
        clock = st.clock_ms = t if st.clock_ms is None or t > st.clock_ms else st.clock_ms
        w = st.window
        if w.start is None:
            w.start = clock - clock % self.window
        elif clock >= w.start + self.window:
            if w.records or w.unlabeled:  # a window of a tick's expiries only has a row too
                out.metrics.append(self._metrics_row(st, final=False, closing=True))
            w.reset(clock - clock % self.window)
        self._expire(st, clock, out)

    def _tick(self, st: ModelState, t: int, out: LiveOutputs) -> None:
        """A clock tick at ``t`` (the stream clock; :mod:`kernelstream.engine.live.clock`):
        steps 1-2 with no record, so the events of a quiet model expire and its window
        closes. A model that never had a record has nothing to move."""
        if st.clock_ms is not None:
            self._advance(st, t, out)

    def _drop(self, st: ModelState, renew: Callable[[str], ModelState],
                out: LiveOutputs) -> None:
        """A forget (:mod:`kernelstream.engine.live.clock`): the model goes, its counts to
        ``out.forgotten``, and ``st`` becomes a new one. Its two ticks came first, so nothing
        is pending; a model that still holds events (none can) is kept, to lose nothing."""
        if st.pending or st.clock_ms is None:
            return
        out.forgotten.append((st.key, Forgotten(st.counts(), st.restored, st.seconds)))
        st.become(renew(st.key))

    def _stamp(self, st: ModelState, b: EventBatch, i: int) -> None:
        """With forgetting, a new model's birth place: its first record's in ``b`` (from
        ``i``; none there: the next batch's)."""
        if not self.stamp or st.born is not None or st.records:
            return
        kind = b.kind
        for j in range(i, len(kind)):
            if kind[j] < TICK:
                st.born = f"{b.topic[j]}:{b.partition[j]}:{b.offset[j]}"
                return

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
                                               ev.event_time_ms, clock, st.rid))

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

    def _rejected(self, st: ModelState, p: ParsedRecord, out: LiveOutputs,
                  e: ValueError) -> None:
        """An event the learner refused: a dead letter, and its id remembered for a ttl as a
        resolved one is, so that its label says so (not "unknown", which reads as early)."""
        self._dead(st, p, out, f"learner rejected the row: {e}", "learn")
        assert st.clock_ms is not None
        self._resolve(st, p.event_id, REJECTED, st.clock_ms)

    def _predict(self, st: ModelState, p: ParsedRecord, out: LiveOutputs) -> None:
        m = st.learner
        assert m is not None and p.x is not None
        t0 = time.perf_counter()
        try:
            score = score_row(m, p.x, self.configs[st.config].target)
        except ValueError as e:
            self._rejected(st, p, out, e)
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
            score = step_row(m, p.x, p.y, self.configs[st.config].target)
        except ValueError as e:
            self._rejected(st, p, out, e)
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
                      "label for expired event id" if status == EXPIRED else
                      "label for rejected event id" if status == REJECTED else
                      "duplicate label")
            self._dead(st, p, out, reason, "join")
            return
        m = st.learner
        assert m is not None and st.clock_ms is not None
        self._resolve(st, p.event_id, LABELLED, st.clock_ms)
        t0 = time.perf_counter()
        try:
            learn_row(m, ev.x, p.y, self.configs[st.config].target)
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
        if st.window.start is None or not (st.window.records or st.window.unlabeled):
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


def forgotten_model(st: ModelState) -> bool:
    """Whether a driver should drop ``st`` after a :meth:`StreamEngine.process_many` that
    forgot models: a model left new (by a forget, with no record since) holds nothing a new
    one would not."""
    return st.clock_ms is None


def quiet_clock(spec: LiveSpec) -> QuietClock | None:
    """The clock that ticks the quiet entities of a stream of ``spec`` (None without
    ``key_by``: a configuration's one model gets every record, and the stream's clock with
    it); its quiet interval is ``max(label TTL, metrics window)``."""
    if spec.read.key_by is None:
        return None
    return QuietClock(max(int(spec.label_ttl_ms), int(spec.metrics_window_ms)),
                      spec.forget_after_ms)


def reference_outputs(records: Iterable[SourceRecord], spec: LiveSpec,
                      states: Mapping[str, ModelState] | None = None, *,
                      flush: bool = False, chunk: int = REFERENCE_CHUNK,
                      ticks: bool = True, clock: QuietClock | None = None,
                      ) -> tuple[LiveOutputs, dict[str, ModelState]]:
    """THE loop: route and process ``records`` in the given order, one state per model (the
    given ``states`` are continued, and mutated), ``chunk`` records at a time as a stream's
    reader hands them over (:meth:`StreamEngine.route_many`, then
    :meth:`StreamEngine.process_many` per model; chunking never changes a model's rows or
    state, only how the lists interleave: per chunk, parse dead letters first, then the
    models in order of first appearance). ``flush``: end with every model's
    :meth:`~StreamEngine.flush_metrics` (the end of an input for good; a drained stream does
    not flush: its next run continues the window). ``ticks``: quiet entities' models get the
    ticks of a :func:`quiet_clock` (``clock``: continue that one, mutated, as ``states`` are;
    a stream read by partition, ``--merge partition``, has none). Returns the rows and the
    states by model key."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    engine = StreamEngine(spec, clock if clock is not None or not ticks else quiet_clock(spec))
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
            if out.forgotten and forgotten_model(st):
                del st_by_key[key]
    if flush:
        for st in st_by_key.values():
            out.metrics.extend(engine.flush_metrics(st, final=True))
    return out, st_by_key
