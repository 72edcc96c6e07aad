"""Live streams with delayed labels: predict on arrival, learn when the label comes (no Beam).

One :class:`StreamEngine` serves every model of a ``kernelstream stream`` run. The Beam
pipeline and the reference loop (:func:`reference_outputs`) call the same two steps, so there is
one loop: :meth:`StreamEngine.route` parses a Kafka record once and names the models it goes to;
:meth:`StreamEngine.process` applies it to one model's :class:`ModelState` and returns rows.

Messages (key = event id, UTF-8; a record without key is a dead letter): how a record is
parsed and which models it goes to is :mod:`kernelstream.engine.stream_routing`, the half of
the engine that :class:`StreamEngine` extends with the per-model processing below.

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
    3. The record itself:
       * unlabelled feature record: ``score = learner.predict_one(x)``, a ``predictions`` row,
         and the event waits (x, score, predicted label, event time, prediction position);
       * labelled feature record: ``learner.step(x, y)`` (the base class's one-row
         test-then-train, the same per-round code as ``predict_learn_many``), a prediction row
         and an ``outcomes`` row with delay 0;
       * label record for a pending id: ``learner.learn_one(x, y)`` on the stored x, and an
         outcome row: the score and predicted label made on arrival, the label, ``mistake``
         (classification), ``loss = learner_loss(learner).value(score, y)``, ``delay_ms`` =
         label timestamp - event timestamp, and the number of support vectors after learning.
    Learning order is therefore label arrival order; predictions use the model as it is, and
    the update at label time scores x with the model as it is then. A model's learner is made
    on its first record, ``config.make(spec.seed, 0)`` (or given to :meth:`new_state`).
    Dead letters (stage ``join``): a feature record whose id is pending or resolved within the
    last ttl ("duplicate event id"), a label for an id never seen or already forgotten ("label
    for unknown event id"), for an expired id ("label for expired event id"), or for an id
    already labelled ("duplicate label"). A ``ValueError`` of the learner is a dead letter of
    stage ``learn`` and the run goes on. Parse errors are dead letters of :meth:`route`.

    The learner's score cache (``predict_one`` keeps the round's work, e.g. OKS's random
    kernel draw, for the next ``learn_one`` of the same x) is dropped after each prediction,
    so a label always learns from a fresh score: a restored state (which has no cache)
    continues bit for bit.

Counts add up: every routed (record, model) that is not skipped gives a prediction, an outcome
or a dead letter; per model ``predictions = outcomes + unlabeled + pending + learn_rejected``
(:meth:`ModelState.counts`). Memory per model is bounded by the events of one ttl (pending) and
of two ttls (remembered ids).

Metrics rows (one per closed window, plus :meth:`StreamEngine.flush_metrics` at drain/end):
window and cumulative counts, mistakes and mistake rate (percent), loss sums (exactly rounded:
``math.fsum`` per window, :func:`~kernelstream.engine.metrics.exact_add` cumulative), label
delay p50/p99 over the window's outcomes (delay 0 included) by the nearest-rank method,
pending events, support vectors, and ``seconds`` (wall clock inside learner calls) with
``examples_per_second`` (window records / seconds): the only non-deterministic fields.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from kernelstream.engine.blocks import StreamKey
from kernelstream.engine.core import selects_kernels
from kernelstream.engine.merge import merged as merge_group  # the reference loop's order
from kernelstream.engine.metrics import exact_add, exact_value
from kernelstream.engine.prequential import learner_loss
from kernelstream.engine.records import SourceRecord
from kernelstream.engine.stream_routing import BULK_MIN, ParsedRecord, StreamRouter, StreamSpec
from kernelstream.engine.stream_rows import (
    OUTPUTS,
    metrics_row,
    outcome_row,
    prediction_row,
    stream_dead_letter,
    unlabeled_row,
)
from kernelstream.engine.stream_state import EXPIRED, LABELLED, ModelState, Pending, StateCut
from kernelstream.engine.stream_state import cut_state as _cut_state
from kernelstream.engine.stream_state import decode_state as _decode_state
from kernelstream.engine.stream_state import encode_state as _encode_state
from kernelstream.sparse import CSR

__all__ = ["BULK_MIN", "ModelState", "Outputs", "ParsedRecord", "StreamEngine", "StreamSpec",
           "merge_group", "reference_outputs"]

# reference_outputs routes and processes records in chunks of this many, as a stream's
# reader hands them over per call (the chunking never changes a model's rows or state).
REFERENCE_CHUNK = 1000


class Outputs:
    """Rows by output name (:data:`~kernelstream.engine.stream_rows.OUTPUTS`); one object can
    collect the rows of many :meth:`StreamEngine.process` calls."""

    __slots__ = OUTPUTS

    def __init__(self) -> None:
        self.predictions: list[dict[str, Any]] = []
        self.outcomes: list[dict[str, Any]] = []
        self.unlabeled: list[dict[str, Any]] = []
        self.metrics: list[dict[str, Any]] = []
        self.dead_letters: list[dict[str, Any]] = []

    def __getitem__(self, name: str) -> list[dict[str, Any]]:
        return getattr(self, name)  # type: ignore[no-any-return]

    def items(self) -> list[tuple[str, list[dict[str, Any]]]]:
        return [(n, getattr(self, n)) for n in OUTPUTS]

    def __len__(self) -> int:
        return sum(len(getattr(self, n)) for n in OUTPUTS)


class StreamEngine(StreamRouter):
    """Routing (:class:`~kernelstream.engine.stream_routing.StreamRouter`) and processing of a
    stream's records (see the module docstring)."""

    def __init__(self, spec: StreamSpec) -> None:
        super().__init__(spec)
        self.ttl = int(spec.label_ttl_ms)
        self.window = int(spec.metrics_window_ms)
        self.configs = {c.name: c for c in spec.configs}
        self._losses: dict[str, Any] = {}  # config name -> loss function of its learners

    # -- state -------------------------------------------------------------------------------
    def new_state(self, model_key: str, learner: Any = None) -> ModelState:
        """A model's empty state (``learner``: start from a trained learner, e.g. a replay's)."""
        sk = StreamKey.decode(model_key)
        if sk.config not in self.configs:
            raise KeyError(f"model {model_key!r}: no configuration named {sk.config!r}")
        return ModelState(model_key, sk.config, sk.entity, learner)

    def encode_state(self, st: ModelState) -> bytes:
        """Versioned compact bytes of ``st`` (no pickle; see ``engine.stream_state``)."""
        return _encode_state(st)

    def cut_state(self, st: ModelState) -> StateCut:
        """``st`` detached at this moment; its ``encode()`` gives :meth:`encode_state`'s bytes
        and may run on another thread while ``st`` goes on changing."""
        return _cut_state(st)

    def decode_state(self, data: bytes) -> ModelState:
        return _decode_state(data, self.ttl)

    # -- processing --------------------------------------------------------------------------
    def process(self, model_key: str, st: ModelState, parsed: ParsedRecord,
                out: Outputs | None = None) -> Outputs:
        """Apply one routed record to the model's state ``st`` (mutated); rows go to ``out``
        (a new :class:`Outputs` when None), which is returned (:meth:`process_many` of one
        record)."""
        return self.process_many(model_key, st, (parsed,), out)

    def process_many(self, model_key: str, st: ModelState, parsed: Sequence[ParsedRecord],
                     out: Outputs | None = None) -> Outputs:
        """Apply a model's routed records in order: exactly the rows and state of
        :meth:`process` one record at a time. A run of labelled events that nothing else
        interleaves (no window closes inside it, no duplicate id) is learnt with one
        ``predict_learn_many`` call, which is bit-identical to the learner's per-row
        ``step``; kernel-selection learners learn one row at a time."""
        if out is None:
            out = Outputs()
        n = len(parsed)
        i = 0
        while i < n:
            p = parsed[i]
            i += 1
            if not self._arrive(st, p, out):
                continue
            if (i < n and not p.label_only and p.y is not None
                    and not selects_kernels(st.learner)):  # type: ignore[arg-type]
                end = self._run_end(st, parsed, i - 1)
                if end - i >= 1 and self._learn_run(st, parsed, i - 1, end, out):
                    i = end
                    continue
            self._act(st, p, out)
        return out

    def _arrive(self, st: ModelState, p: ParsedRecord, out: Outputs) -> bool:
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

    def _act(self, st: ModelState, p: ParsedRecord, out: Outputs) -> None:
        """Step 3 of a record that arrived."""
        if p.label_only:
            self._label(st, p, out)
        elif p.event_id in st.pending or p.event_id in st.resolved:
            self._dead(st, p, out, "duplicate event id", "join")
        elif p.y is None:
            self._predict(st, p, out)
        else:
            self._predict_learn(st, p, out)

    def _run_end(self, st: ModelState, ps: Sequence[ParsedRecord], i: int) -> int:
        """The end (exclusive) of the run of labelled events starting at ``ps[i]`` (which has
        arrived): records that will each be one ``step`` with nothing reading the learner in
        between. Conservative: an id seen before, a window closing or a replayed offset ends
        the run, and those records go one by one."""
        pending, resolved = st.pending, st.resolved
        p = ps[i]
        if p.event_id in pending or p.event_id in resolved:
            return i
        ids = {p.event_id}
        applied = {(p.topic, p.partition): p.offset}
        clock = st.clock_ms
        assert clock is not None and st.window.start is not None
        close_at = st.window.start + self.window
        for j in range(i + 1, len(ps)):
            q = ps[j]
            if q.label_only or q.y is None:
                return j
            eid = q.event_id
            if eid in ids or eid in pending or eid in resolved:
                return j
            tp = (q.topic, q.partition)
            last = applied.get(tp)
            if last is None:
                last = st.applied.get(tp)
            if last is not None and q.offset <= last:
                return j
            if q.timestamp_ms > clock:
                clock = q.timestamp_ms
                if clock >= close_at:
                    return j
            ids.add(eid)
            applied[tp] = q.offset
        return len(ps)

    def _learn_run(self, st: ModelState, ps: Sequence[ParsedRecord], i: int, end: int,
                   out: Outputs) -> bool:
        """Records ``ps[i:end]`` (a run of :meth:`_run_end`; ``ps[i]`` has arrived) with one
        ``predict_learn_many``. False, with nothing changed, when the learner refuses the
        block (its validation comes before any update): the caller goes one by one."""
        m = st.learner
        assert m is not None
        run = ps[i:end]
        k = len(run)
        n_sv = np.empty(k + 1, dtype=np.int64)
        n_sv[0] = m.n_support_vectors
        X = (CSR.vstack([q.x for q in run]) if isinstance(run[0].x, CSR)  # type: ignore[misc]
             else np.stack([q.x for q in run]))  # type: ignore[misc]
        y = np.fromiter((q.y for q in run), np.float64, count=k)  # type: ignore[misc]
        before = m.t
        t0 = time.perf_counter()
        try:
            scores = m.predict_learn_many(X, y, n_sv=n_sv[1:]).tolist()
        except ValueError:
            if m.t != before:
                raise  # not a bad row: the learner failed half way (as StreamLearner does)
            return False
        st.add_seconds(time.perf_counter() - t0)  # one window: no window closes in a run
        svs = n_sv.tolist()
        for r, q in enumerate(run):
            if r:
                self._arrive(st, q, out)
            self._learnt(st, q, out, scores[r], svs[r], svs[r + 1])
        return True

    def _expire(self, st: ModelState, clock: int, out: Outputs) -> None:
        forget, resolved = st.forget, st.resolved
        while forget and forget[0][0] <= clock:
            del resolved[forget.popleft()[1]]
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
        st.resolved[eid] = status
        st.forget.append((clock + self.ttl, eid))

    def _dead(self, st: ModelState, p: ParsedRecord, out: Outputs, reason: str, stage: str,
              position: int | None = None) -> None:
        st.dead_letters += 1
        st.window.dead_letters += 1
        out.dead_letters.append(stream_dead_letter(
            p.source, p.topic, p.partition, p.offset, p.text, reason, stage, st.key,
            p.event_id, position))

    def _predict(self, st: ModelState, p: ParsedRecord, out: Outputs) -> None:
        m = st.learner
        assert m is not None and p.x is not None
        t0 = time.perf_counter()
        try:
            score = m.predict_one(p.x)
        except ValueError as e:
            self._dead(st, p, out, f"learner rejected the row: {e}", "learn")
            return
        # drop the score cache: a label learns from a fresh score, restored or not
        m._pending = None
        st.add_seconds(time.perf_counter() - t0)
        predicted = m.predict_label(score) if m.task == "classification" else score
        pos = st.position
        st.position += 1
        st.window.predictions += 1
        # a row of route_many's batch matrix: keep a copy, not the whole batch, while it waits
        x = p.x if isinstance(p.x, CSR) or p.x.base is None else p.x.copy()
        st.pending[p.event_id] = Pending(x, score, predicted, p.timestamp_ms, pos)
        heapq.heappush(st.expiry, (p.timestamp_ms + self.ttl, pos, p.event_id))
        out.predictions.append(prediction_row(
            st.key, st.config, st.entity, p.event_id, pos, p.timestamp_ms, p.topic,
            p.partition, p.offset, score, predicted, int(m.n_support_vectors), False))

    def _predict_learn(self, st: ModelState, p: ParsedRecord, out: Outputs) -> None:
        m = st.learner
        assert m is not None
        n_sv = int(m.n_support_vectors)
        t0 = time.perf_counter()
        try:
            score = m.step(p.x, p.y)
        except ValueError as e:
            self._dead(st, p, out, f"learner rejected the row: {e}", "learn")
            return
        st.add_seconds(time.perf_counter() - t0)
        self._learnt(st, p, out, float(score), n_sv, int(m.n_support_vectors))

    def _learnt(self, st: ModelState, p: ParsedRecord, out: Outputs, score: float,
                n_sv_before: int, n_sv_after: int) -> None:
        """The rows of a labelled event the learner has just learnt (``score`` before)."""
        m = st.learner
        assert m is not None
        predicted = m.predict_label(score) if m.task == "classification" else score
        pos = st.position
        st.position += 1
        st.window.predictions += 1
        assert st.clock_ms is not None
        self._resolve(st, p.event_id, LABELLED, st.clock_ms)
        out.predictions.append(prediction_row(
            st.key, st.config, st.entity, p.event_id, pos, p.timestamp_ms, p.topic,
            p.partition, p.offset, score, predicted, n_sv_before, True))
        self._outcome(st, p, out, Pending(p.x, score, predicted, p.timestamp_ms, pos),
                      n_sv_after)

    def _label(self, st: ModelState, p: ParsedRecord, out: Outputs) -> None:
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
            m.learn_one(ev.x, p.y)
        except ValueError as e:
            st.learn_rejected += 1
            self._dead(st, p, out, f"learner rejected the row: {e}", "learn", ev.position)
            return
        st.add_seconds(time.perf_counter() - t0)
        self._outcome(st, p, out, ev, int(m.n_support_vectors))

    def _outcome(self, st: ModelState, p: ParsedRecord, out: Outputs, ev: Pending,
                 n_sv: int) -> None:
        m = st.learner
        assert m is not None and p.y is not None
        y = p.y
        loss_fn = self._losses.get(st.config)
        if loss_fn is None:
            loss_fn = self._losses[st.config] = learner_loss(m).value
        loss = float(loss_fn(ev.score, y))
        mistake = None
        w = st.window
        if m.task == "classification":
            mistake = ev.predicted != y
            if mistake:
                st.mistakes += 1
                w.mistakes += 1
        delay = p.timestamp_ms - ev.event_time_ms
        lp = st.learnt
        st.learnt += 1
        w.outcomes += 1
        w.losses.append(loss)
        w.delays.append(delay)
        out.outcomes.append(outcome_row(
            st.key, st.config, st.entity, p.event_id, lp, ev.position, ev.event_time_ms,
            p.timestamp_ms, ev.score, ev.predicted, y, mistake, loss, n_sv,
            p.topic, p.partition, p.offset))

    # -- metrics -----------------------------------------------------------------------------
    def flush_metrics(self, st: ModelState, final: bool = True) -> list[dict[str, Any]]:
        """The open window's metrics so far (drain, end of input), or nothing when it saw no
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
                           (m.task if m is not None else self.spec.task) == "classification",
                           exact_value(total_loss), final, closing)


# -- the reference loop ------------------------------------------------------------------------


def reference_outputs(records: Iterable[SourceRecord], spec: StreamSpec,
                      states: Mapping[str, ModelState] | None = None, *,
                      flush: bool = False,
                      chunk: int = REFERENCE_CHUNK) -> tuple[Outputs, dict[str, ModelState]]:
    """THE loop: route and process ``records`` in the given order, one state per model (the
    given ``states`` are continued, and mutated), ``chunk`` records at a time as a stream's
    reader hands them over (:meth:`StreamEngine.route_many`, then
    :meth:`StreamEngine.process_many` per model; chunking never changes a model's rows or
    state, only how the lists interleave: per chunk, parse dead letters first, then the
    models in order of first appearance). ``flush``: end with every model's
    :meth:`~StreamEngine.flush_metrics` (as a drained stream does). Returns the rows and the
    states by model key."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    engine = StreamEngine(spec)
    out = Outputs()
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
