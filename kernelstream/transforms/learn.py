"""``LearnPredict``: any registered learner as a keyed, order-restoring stateful DoFn.

Each stream key (see :class:`~kernelstream.transforms.blocks.StreamKey`) owns one learner. The
DoFn keeps, per key, one value state (:class:`StreamState`: the learner, the ordering cursor and
the prequential accumulators; coded compactly by :class:`StreamStateCoder`) and an ordered list
of blocks that arrived early (``ordering.py``). On a block it releases every block that is now
contiguous and, for each in stream order, runs the learner's batch path
``predict_learn_many`` (bit-identical to the per-example loop), then emits

* main output: one :class:`PredictionBlock` per block (columnar; one row per example);
* ``metrics``: one row per completed window of ``metrics_window`` positions and a final row
  when the input ends (event-time timer at the end of the window);
* ``dead_letters``: rows the learner rejects and blocks stranded behind a gap at the end.

The learner is built from the key's configuration on first use, with the seed and permutation
conventions of the reference loop (``kernelstream.evaluate``), so its predictions are exactly
the loop's whatever the runner does to bundling, parallelism or arrival order. This module knows
learners only through the registry and the :class:`~kernelstream.learners.Learner` interface.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer

from kernelstream import learners
from kernelstream.evaluate import learner_loss
from kernelstream.learners.base import Learner, state_from_bytes, state_to_bytes
from kernelstream.seeding import learner_seed
from kernelstream.transforms.blocks import (
    Block,
    PredictionBlock,
    StreamKey,
    check_config_name,
)
from kernelstream.transforms.metrics import StreamMetrics, metrics_row
from kernelstream.transforms.ordering import (
    BagAsOrderedList,
    OrderCursor,
    OrderedList,
    drain_gaps,
    early_blocks_bag_spec,
    early_blocks_spec,
    release_in_order,
)
from kernelstream.transforms.sources import dead_letter

METRICS_NAMESPACE = "kernelstream"
METRICS_TAG = "metrics"
DEAD_LETTER_TAG = "dead_letters"
STATES_TAG = "states"  # (stream key, StreamStateCoder bytes) at the end of input: checkpoints


# -- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearnerConfig:
    """One learner configuration of a run: ``name`` labels it (first field of the stream key),
    ``learner`` is the registry name, ``seed_name`` the name hashed into the learner seed
    (default: the registry name, as in ``kernelstream.evaluate.evaluate``)."""

    name: str
    learner: str
    params: Mapping[str, Any] = field(default_factory=dict)
    seed_name: str | None = None

    def __post_init__(self) -> None:
        check_config_name(self.name)
        # Fail at pipeline construction, not inside a worker.
        resolved = learners.get(self.learner).resolve_params(dict(self.params))
        object.__setattr__(self, "params", resolved)

    @property
    def effective_seed_name(self) -> str:
        return self.seed_name or self.learner

    def make(self, base_seed: int, rep: int) -> Learner:
        return learners.make(
            self.learner, seed=learner_seed(base_seed, rep, self.effective_seed_name),
            **self.params,
        )


def as_configs(configs: Iterable[LearnerConfig | tuple[Any, ...]]) -> dict[str, LearnerConfig]:
    """``LearnerConfig`` objects or ``(name, learner, params[, seed_name])`` tuples → by name."""
    out: dict[str, LearnerConfig] = {}
    for c in configs:
        cfg = c if isinstance(c, LearnerConfig) else LearnerConfig(*c)
        if cfg.name in out:
            raise ValueError(f"configuration name {cfg.name!r} given twice")
        out[cfg.name] = cfg
    if not out:
        raise ValueError("no learner configuration given")
    return out


# -- per-key state --------------------------------------------------------------------------------


@dataclass
class StreamState:
    """Everything one stream key keeps between blocks."""

    cursor: OrderCursor = field(default_factory=OrderCursor)
    learner: Learner | None = None
    metrics: StreamMetrics = field(default_factory=StreamMetrics)
    rejected: int = 0  # rows the learner refused (dead letters)


_STATE_MAGIC = b"KSS"
_STATE_VERSION = 1


class StreamStateCoder(beam.coders.Coder):
    """``KSS`` v1 | u32 length + JSON of the scalar fields | learner state as ``.npz``
    (``Learner.get_state``: numpy arrays only, versioned by the learner base class; no pickle).
    JSON floats round-trip exactly (``repr``)."""

    def encode(self, st: StreamState) -> bytes:
        meta = json.dumps([st.cursor.to_json(), st.metrics.to_json(), st.rejected]).encode()
        blob = b"" if st.learner is None else state_to_bytes(st.learner.get_state())
        return b"".join((_STATE_MAGIC, bytes([_STATE_VERSION]), struct.pack("<I", len(meta)),
                         meta, blob))

    def decode(self, data: bytes) -> StreamState:
        if data[:3] != _STATE_MAGIC or data[3] != _STATE_VERSION:
            raise ValueError("not a kernelstream stream state (or an unsupported version)")
        (n,) = struct.unpack_from("<I", data, 4)
        cur, met, rejected = json.loads(bytes(data[8 : 8 + n]))
        blob = bytes(data[8 + n :])
        learner = None
        if blob:
            state = state_from_bytes(blob)
            learner = learners.get(str(state["__learner__"])).from_state(state)
        return StreamState(OrderCursor.from_json(cur), learner, StreamMetrics.from_json(met),
                           int(rejected))

    def is_deterministic(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


# -- progress ------------------------------------------------------------------------------------

PROGRESS_LOGGER = "kernelstream.progress"
_progress_log = logging.getLogger(PROGRESS_LOGGER)


class Progress:
    """Progress lines while streams are learnt, at most one every ``every`` seconds per
    worker, on the ``kernelstream.progress`` logger (INFO): the CLI prints them on stderr; on
    a cluster they land in the worker logs. Counts are this worker's."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.t0 = self.last = time.monotonic()
        self.examples = 0

    def learnt(self, key: str, st: StreamState, n: int) -> None:
        self.examples += n
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        tot = st.metrics.total
        err = ""
        if st.learner is not None and st.learner.task == "classification" and tot.examples:
            err = f", mistake rate {100.0 * tot.mistakes / tot.examples:.2f}%"
        el = now - self.t0
        _progress_log.info("%s examples learnt in %.0f s (%s/s); stream %s at %s examples%s",
                           f"{self.examples:,}", el, f"{self.examples / el:,.0f}", key,
                           f"{tot.examples:,}", err)


# -- one stream's learning, without Beam ---------------------------------------------------------


def _selects_kernels(learner: Learner) -> bool:
    """Kernel-selection learners override ``selected_kernel``; their per-example trace needs a
    per-example call (still the learner's batch path, one row at a time)."""
    return type(learner).selected_kernel is not Learner.selected_kernel


@dataclass
class BlockResult:
    predictions: PredictionBlock
    metrics: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]
    seconds: float


class StreamLearner:
    """Learning of the streams of a run, one block at a time in stream order (pure Python).

    The Beam DoFn and the plain loop (``beam_replay.run_loop_outputs``) both use it, so their
    outputs can be compared file to file; the Beam-specific part is only state and ordering.
    """

    def __init__(self, configs: Mapping[str, LearnerConfig], seed: int, metrics_window: int,
                 source: str = "") -> None:
        if metrics_window < 1:
            raise ValueError(f"metrics_window must be >= 1, got {metrics_window}")
        self.configs = dict(configs)
        self.seed = int(seed)
        self.metrics_window = int(metrics_window)
        self.source = source

    def new_learner(self, key: str) -> Learner:
        sk = StreamKey.decode(key)
        cfg = self.configs.get(sk.config)
        if cfg is None:
            raise KeyError(f"stream {key!r}: no configuration named {sk.config!r}")
        return cfg.make(self.seed, sk.rep)

    def learn(self, key: str, st: StreamState, b: Block) -> BlockResult:
        """Test-then-train over block ``b`` (the next block of the stream)."""
        if st.learner is None:
            st.learner = self.new_learner(key)
        m = st.learner
        n = b.n
        score = np.zeros(n)
        n_sv = np.empty(n, dtype=np.int64)
        sel = np.full(n, -1, dtype=np.int64)
        ok = np.ones(n, dtype=bool)
        dead: list[dict[str, Any]] = []
        t0 = time.perf_counter()
        per_row = _selects_kernels(m)
        dist: np.ndarray | None = None  # per-row kernel distribution of selection learners
        if not per_row and n:
            before = m.t
            try:
                score[:] = m.predict_learn_many(b.X, b.y)
                n_sv[:] = m.n_support_vectors
            except ValueError:
                # The batch path validates the whole block before changing anything; if it
                # did change the learner the error is not a bad row, so let the bundle fail.
                if m.t != before:
                    raise
                per_row = True
        if per_row:
            for i in range(n):
                try:
                    score[i] = m.predict_learn_many(b.X[i : i + 1], b.y[i : i + 1])[0]
                except ValueError as exc:
                    ok[i] = False
                    dead.append(dead_letter(self.source, None, _row_text(b, i), str(exc),
                                            "learn", key, b.start + i, int(b.ids[i])))
                else:
                    n_sv[i] = m.n_support_vectors
                    k = m.selected_kernel
                    sel[i] = -1 if k is None else int(k)
                # after row i (a rejected row leaves the learner as it was)
                p = m.kernel_distribution
                if p is not None:
                    if dist is None:
                        dist = np.empty((n, p.shape[0]))
                    dist[i] = p
        seconds = time.perf_counter() - t0

        y = b.y
        if m.task == "classification":
            predicted = np.fromiter(map(m.predict_label, score.tolist()), np.float64, count=n)
            mistake = (predicted != y).astype(np.int8)
        else:
            predicted = score.copy()
            mistake = np.full(n, -1, dtype=np.int8)
        loss_fn = learner_loss(m).value
        loss = np.fromiter(map(loss_fn, score.tolist(), y.tolist()), np.float64, count=n)
        if dead:
            st.rejected += len(dead)
            bad = ~ok
            score[bad] = loss[bad] = predicted[bad] = np.nan
            mistake[bad] = -1
            n_sv[bad] = m.n_support_vectors
        preds = PredictionBlock(b.key, b.start, b.ids, score, predicted, y, loss, mistake, n_sv,
                                sel)
        rows = [
            self.metrics_row(key, st, pos, final=False,
                             distribution=None if dist is None else dist[pos - b.start - 1])
            for pos in st.metrics.account(b.start, ok, mistake, loss, seconds,
                                          self.metrics_window)
        ]
        st.cursor.next = max(st.cursor.next, b.end)
        return BlockResult(preds, rows, dead, seconds)

    def metrics_row(self, key: str, st: StreamState, position: int, final: bool,
                    distribution: np.ndarray | None = None) -> dict[str, Any]:
        sk = StreamKey.decode(key)
        m = st.learner
        ident = {
            "key": key,
            "config": sk.config,
            "learner": self.configs[sk.config].learner,
            "permutation": sk.rep,
            "entity": sk.entity,
            "task": None if m is None else m.task,
            "loss_name": None if m is None else learner_loss(m).name,
        }
        return metrics_row(
            ident, st.metrics, position=position, final=final,
            classify=m is None or m.task == "classification",
            n_support_vectors=0 if m is None else int(m.n_support_vectors),
            extra={"n_features": None if m is None else m.dim, "rejected": st.rejected,
                   "duplicate_blocks": st.cursor.duplicates,
                   "max_buffered_blocks": st.cursor.max_buffered,
                   "kernel_distribution": None if distribution is None
                   else [float(v) for v in distribution]},
        )

    def final_row(self, key: str, st: StreamState) -> dict[str, Any]:
        p = None if st.learner is None else st.learner.kernel_distribution
        return self.metrics_row(key, st, st.cursor.next, final=True, distribution=p)


# -- the DoFn ------------------------------------------------------------------------------------


_STATE = ReadModifyWriteStateSpec("stream", StreamStateCoder())
_EARLY = early_blocks_spec()
_EARLY_BAG = early_blocks_bag_spec()
_END = TimerSpec("end", beam.TimeDomain.WATERMARK)
_END_BAG = TimerSpec("end", beam.TimeDomain.WATERMARK)  # a spec has one callback: one per DoFn
# Beam declares state/timer parameters as argument defaults; module-level singletons.
_STATE_PARAM = beam.DoFn.StateParam(_STATE)
_EARLY_PARAM = beam.DoFn.StateParam(_EARLY)
_EARLY_BAG_PARAM = beam.DoFn.StateParam(_EARLY_BAG)
_END_PARAM = beam.DoFn.TimerParam(_END)
_END_BAG_PARAM = beam.DoFn.TimerParam(_END_BAG)


class _LearnPredictBase(beam.DoFn):
    """The element and end-of-input logic; subclasses declare the state of early blocks."""

    def __init__(self, core: StreamLearner, emit_states: bool = False) -> None:
        self.core = core
        self.emit_states = emit_states
        self.progress: Progress | None = None
        self.n_examples = Metrics.counter(METRICS_NAMESPACE, "examples")
        self.n_mistakes = Metrics.counter(METRICS_NAMESPACE, "mistakes")
        self.n_dead = Metrics.counter(METRICS_NAMESPACE, "dead_letters")
        self.n_blocks = Metrics.counter(METRICS_NAMESPACE, "blocks")
        self.n_early = Metrics.counter(METRICS_NAMESPACE, "blocks_buffered")
        self.n_dups = Metrics.counter(METRICS_NAMESPACE, "duplicate_blocks")
        self.disorder = Metrics.distribution(METRICS_NAMESPACE, "buffered_blocks_on_arrival")
        self.learn_us = Metrics.distribution(METRICS_NAMESPACE, "learn_block_us")

    def setup(self) -> None:
        self.progress = Progress()

    def _element(self, element: tuple[str, Block], state: Any, early: OrderedList, end: Any,
                 window: Any, initial: Mapping[str, bytes]) -> Iterator[Any]:
        key, block = element
        if self.progress is None:
            self.progress = Progress()
        st: StreamState | None = state.read()
        if st is None:
            # a stream resumed from a checkpoint starts from its saved state
            saved = initial.get(key)
            st = StreamState() if saved is None else StreamStateCoder().decode(saved)
            # Fires when the input ends (bounded) or the watermark passes the end of the
            # window (unbounded): emit the final metrics and report stranded blocks.
            end.set(window.max_timestamp())
        buffered, dups = st.cursor.buffered, st.cursor.duplicates
        self.disorder.update(buffered)
        for b in release_in_order(st.cursor, early, block):
            res = self.core.learn(key, st, b)
            self.progress.learnt(key, st, b.n)
            self.n_blocks.inc()
            self.learn_us.update(int(res.seconds * 1e6))
            p = res.predictions
            self.n_examples.inc(p.n - len(res.dead_letters))
            self.n_mistakes.inc(int(np.count_nonzero(p.mistake == 1)))
            yield p
            for r in res.metrics:
                yield beam.pvalue.TaggedOutput(METRICS_TAG, r)
            for d in res.dead_letters:
                self.n_dead.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER_TAG, d)
        if st.cursor.buffered > buffered:
            self.n_early.inc(st.cursor.buffered - buffered)
        if st.cursor.duplicates > dups:
            self.n_dups.inc(st.cursor.duplicates - dups)
        state.write(st)

    def _end(self, key: str, state: Any, early: OrderedList) -> Iterator[Any]:
        st: StreamState | None = state.read()
        if st is None:
            return
        for b in drain_gaps(st.cursor, early):
            for i in range(b.n):
                self.n_dead.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER_TAG, dead_letter(
                    self.core.source, None, "", f"stream gap: positions from {st.cursor.next} "
                    "never arrived before the end of input, so this later row was not learnt",
                    "order", key, b.start + i, int(b.ids[i])))
        yield beam.pvalue.TaggedOutput(METRICS_TAG, self.core.final_row(key, st))
        if self.emit_states:
            yield beam.pvalue.TaggedOutput(STATES_TAG, (key, StreamStateCoder().encode(st)))
        state.clear()


class _LearnPredictDoFn(_LearnPredictBase):
    """Early blocks in ordered-list state (FnApiRunner, portable runners)."""

    def process(
        self,
        element: tuple[str, Block],
        initial: Mapping[str, bytes],
        state: Any = _STATE_PARAM,
        early: Any = _EARLY_PARAM,
        end: Any = _END_PARAM,
        window: Any = beam.DoFn.WindowParam,
    ) -> Iterator[Any]:
        yield from self._element(element, state, early, end, window, initial)

    @on_timer(_END)
    def on_end(self, key: Any = beam.DoFn.KeyParam, state: Any = _STATE_PARAM,
               early: Any = _EARLY_PARAM) -> Iterator[Any]:
        yield from self._end(key, state, early)


class _LearnPredictBagDoFn(_LearnPredictBase):
    """Early blocks in bag state, for runners without ordered-list state."""

    def process(
        self,
        element: tuple[str, Block],
        initial: Mapping[str, bytes],
        state: Any = _STATE_PARAM,
        early: Any = _EARLY_BAG_PARAM,
        end: Any = _END_BAG_PARAM,
        window: Any = beam.DoFn.WindowParam,
    ) -> Iterator[Any]:
        yield from self._element(element, state, BagAsOrderedList(early), end, window,
                                 initial)

    @on_timer(_END_BAG)
    def on_end(self, key: Any = beam.DoFn.KeyParam, state: Any = _STATE_PARAM,
               early: Any = _EARLY_BAG_PARAM) -> Iterator[Any]:
        yield from self._end(key, state, BagAsOrderedList(early))


def _row_text(b: Block, i: int) -> str:
    """A readable rendering of a rejected row for the dead-letter output."""
    nz = np.flatnonzero(b.X[i])
    feats = " ".join(f"{j + 1}:{b.X[i, j]!r}" for j in nz[:50])
    return f"{b.y[i]!r} {feats}" + (" ..." if nz.shape[0] > 50 else "")


@beam.typehints.with_input_types(Block)
@beam.typehints.with_output_types(tuple[str, Block])
class _KeyByStream(beam.DoFn):
    def process(self, b: Block) -> Iterator[tuple[str, Block]]:
        yield b.key, b


class LearnPredict(beam.PTransform):
    """Blocks (any order, any number of keys) → predictions, metrics and dead letters.

    Apply to a ``PCollection[Block]``; returns a ``DoOutputsTuple`` with the main output
    ``predictions`` (``PredictionBlock``) and the tagged outputs ``metrics`` and
    ``dead_letters`` (dict rows). Every block key must name one of ``configs``.

    ``early_state`` chooses where blocks that arrived early wait: ``"ordered_list"``
    (ordered-list state, read by position range: FnApiRunner, portable runners) or ``"bag"``
    (bag state, for runners without ordered lists such as the BundleBasedDirectRunner that
    runs TestStream). Both keep only the early blocks.

    Checkpoints: ``initial_states`` (a ``PCollection`` of ``(stream key, state bytes)``, as a
    dict side input) gives streams the state they start from; ``emit_states`` adds the
    tagged output ``states`` with every stream's state at the end of input, in the same
    encoding (:class:`StreamStateCoder`), so a later run continues the streams exactly.
    """

    EARLY_STATES = ("ordered_list", "bag")

    def __init__(self, configs: Iterable[LearnerConfig | tuple[Any, ...]], seed: int = 0,
                 metrics_window: int = 1000, source: str = "",
                 early_state: str = "ordered_list",
                 initial_states: beam.PCollection | None = None,
                 emit_states: bool = False) -> None:
        super().__init__()
        if early_state not in self.EARLY_STATES:
            raise ValueError(f"early_state must be one of {self.EARLY_STATES}")
        self.configs = as_configs(configs)
        self.seed = seed
        self.metrics_window = metrics_window
        self.source = source
        self.early_state = early_state
        self.initial_states = initial_states
        self.emit_states = emit_states

    def expand(self, blocks: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        dofn = _LearnPredictDoFn if self.early_state == "ordered_list" else _LearnPredictBagDoFn
        # Always a side input (empty without a checkpoint): an optional one would need a
        # defaulted parameter before the state parameters, which Beam does not map.
        initial = self.initial_states
        if initial is None:
            initial = (blocks.pipeline | "NoSavedStates"
                       >> beam.Create([]).with_output_types(tuple[str, bytes]))
        return (
            blocks
            | "KeyByStream" >> beam.ParDo(_KeyByStream())
            # State and timers are per window: one global window keeps each stream whole,
            # bounded or unbounded.
            | "GlobalWindow" >> beam.WindowInto(beam.window.GlobalWindows())
            | "LearnPredict" >> beam.ParDo(dofn(
                StreamLearner(self.configs, self.seed, self.metrics_window, self.source),
                self.emit_states), beam.pvalue.AsDict(initial))
            .with_input_types(tuple[str, Block], dict[str, bytes])
            .with_output_types(PredictionBlock)
            .with_outputs(METRICS_TAG, DEAD_LETTER_TAG, STATES_TAG, main="predictions")
        )
