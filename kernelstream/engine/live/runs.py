"""The runs of :meth:`StreamEngine.process_many
<kernelstream.engine.live.engine.StreamEngine.process_many>`: a model's records learnt with
one ``predict_learn_many`` call instead of one record at a time.

:class:`StreamRuns` is a base of :class:`~kernelstream.engine.live.engine.StreamEngine`; it
owns, for the two kinds of run, finding where the run ends, learning it as one block and
making its rows as column blocks (:class:`~kernelstream.engine.live.rows.RowBlock`):

* a run of labelled events (:meth:`StreamRuns._run_end`, :meth:`StreamRuns._learn_run`):
  each would be one ``step``, with a prediction and an outcome row of delay 0;
* a run of unlabelled events each followed at once by its label record
  (:meth:`StreamRuns._pair_run_end`, :meth:`StreamRuns._learn_pairs`): predicting, then
  learning from a fresh score of the same row on the same model, is the learner's ``step``
  when its score draws nothing.

A run gives exactly the rows and state of the one-record path (steps 0-3 of
:mod:`kernelstream.engine.live.engine`, which owns arrival, the label join, expiry, dead
letters and metrics windows): its bounds are conservative, so a run holds no replayed
offset, no id seen before, no window end and no expiry deadline, and in it steps 0-2 only
move the clock and the applied offsets. A learner that refuses the block (its validation
comes before any update) leaves everything unchanged and the caller goes one by one.
Kernel-selection learners never take a run (the engine checks). The helpers both paths use
(the loss function cache, forgetting resolved ids) are here, on the base.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.batch import FEATURES as UNLABELLED_EVENT
from kernelstream.engine.live.batch import FORGET, TICK, EventBatch
from kernelstream.engine.live.batch import LABEL as LABEL_RECORD
from kernelstream.engine.live.rows import OutcomeRow, PredictionRow, Repeat, RowBlock
from kernelstream.engine.live.state import LABELLED, ModelState
from kernelstream.engine.prequential import judge, learner_loss, step_block
from kernelstream.learners.base import Learner
from kernelstream.sparse import CSR

if TYPE_CHECKING:  # the engine's row collector: a run only appends to it
    from kernelstream.engine.live.engine import LiveOutputs

__all__ = ["StreamRuns"]


class StreamRuns:
    """The run paths of :class:`~kernelstream.engine.live.engine.StreamEngine` (its base; see
    the module docstring). They read the engine's label ttl and metrics window and share its
    loss-function cache."""

    ttl: int  # label_ttl_ms
    window: int  # metrics_window_ms
    _losses: dict[str, Any]  # config name -> loss function of its learners
    configs: dict[str, LearnerConfig]  # config name -> its configuration (``target``)

    def _run_end(self, st: ModelState, b: EventBatch, i: int) -> int:
        """The end (exclusive) of the run of labelled events starting at ``b[i]`` (which has
        arrived): records that will each be one ``step`` with nothing reading the learner,
        nor anything but the run itself changing the state, in between. Conservative: an id
        seen before, a replayed offset, a window closing or a pending event's deadline ends
        the run, and those records go one by one."""
        kind = b.kind
        n = len(kind)
        end = n
        for other in (UNLABELLED_EVENT, LABEL_RECORD, TICK, FORGET):  # the first of another kind
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

    def _block_step(self, st: ModelState, X: Any, y: np.ndarray, n_sv: np.ndarray,
                    b: EventBatch, i: int, end: int, first: int, out: LiveOutputs,
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
            scores = step_block(m, X, y, n_sv[1:], target=self.configs[st.config].target)
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
            labelled=Repeat(True)), out._rid))
        out.outcomes.append(RowBlock("outcomes", key, config, entity, OutcomeRow(
            event_id=ids, learn_position=learn_pos, prediction_position=pos, event_time_ms=ts,
            label_time_ms=ts, score=scores, predicted=predicted, label=y, mistake=mistake,
            loss=loss, delay_ms=Repeat(0), n_support_vectors=n_sv[1:], label_topic=topic,
            label_partition=part, label_offset=off), out._rid))
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
        ``predict_learn_many``: the rows and state of ``StreamEngine._predict`` then ``_label``,
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
            labelled=Repeat(False)), out._rid))
        out.outcomes.append(RowBlock("outcomes", key, config, entity, OutcomeRow(
            event_id=ids, learn_position=learn_pos, prediction_position=pos,
            event_time_ms=ev_ts, label_time_ms=lab_ts, score=scores, predicted=predicted,
            label=y, mistake=mistake, loss=loss, delay_ms=delay, n_support_vectors=n_sv[1:],
            label_topic=lab_topic, label_partition=lab_part, label_offset=off[1::2]),
            out._rid))
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
        label delays ``delays``), counted in ``st`` as ``StreamEngine._learnt`` and ``_outcome``
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

    @staticmethod
    def _width_end(b: EventBatch, i: int, end: int, step: int) -> int:
        """``end``, or where before it the features of ``b[i:end:step]`` first change width.
        A learner checks a block's width once, so rows of another width (a CSV event with
        another column count) must not join a block: each goes on its own and is its own
        ``learn`` dead letter, as on the one-record path."""
        rows = b.xrow
        if end - i <= step or all(rows[j] >= 0 for j in range(i, end, step)):
            return end  # rows of the batch matrix: one width
        width = _width(b.x(i))
        for j in range(i + step, end, step):
            if _width(b.x(j)) != width:
                return j
        return end

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

    # -- shared with the one-record path ----------------------------------------------------
    def _loss_fn(self, config: str, m: Learner) -> Any:
        """The loss function of the learners of ``config`` (looked up once)."""
        loss_fn = self._losses.get(config)
        if loss_fn is None:
            loss_fn = self._losses[config] = learner_loss(m).value
        return loss_fn

    @staticmethod
    def _forget(st: ModelState, clock: int) -> None:
        """Forget the ids resolved at least a ttl before ``clock``, when any are due."""
        if st.forget.next_at <= clock:
            st.forget_until(clock)


def _width(x: np.ndarray | CSR | None) -> int:
    """A row's width: its columns (dense) or its space's (sparse)."""
    if isinstance(x, CSR):
        return int(x.n_features)
    return -1 if x is None else int(np.shape(x)[-1])
