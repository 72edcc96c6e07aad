"""``LearnPredict``: any registered learner as a keyed, order-restoring stateful DoFn.

The learning is the engine's (:class:`~kernelstream.engine.replay.core.ReplayLearner`, the same code
the loop runner drives); this module adds only Beam state, ordering and timers. Per stream key
the DoFn keeps one value state (:class:`~kernelstream.engine.replay.core.ReplayState`, coded by
:class:`ReplayStateCoder`) and the blocks that arrived early (ordered-list or bag state, see
``ordering.py``). On a block it releases every block that is now contiguous and learns each in
stream order, then emits

* main output: one :class:`~kernelstream.engine.replay.blocks.PredictionBlock` per block (columnar;
  one row per example);
* ``metrics``: one row per completed window of ``metrics_window`` positions and a final row
  when the input ends (event-time timer at the end of the window);
* ``dead_letters``: rows the learner rejects and blocks stranded behind a gap at the end.

So its predictions are exactly the reference loop's whatever the runner does to bundling,
parallelism or arrival order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.transforms.window import GlobalWindows

from kernelstream.engine.deadletters import DEAD_LETTER_TAG
from kernelstream.engine.learner_config import LearnerConfig, as_configs
from kernelstream.engine.replay.blocks import Block, PredictionBlock
from kernelstream.engine.replay.checkpoints import SavedStates
from kernelstream.engine.replay.core import (
    Progress,
    ReplayLearner,
    ReplayState,
    decode_replay_state,
    encode_replay_state,
)
from kernelstream.engine.replay.metrics import METRICS_NAMESPACE
from kernelstream.engine.replay.ordering import ParkedBlocks, drain_gaps, release_in_order
from kernelstream.transforms.replay.blocks import StatelessCoder
from kernelstream.transforms.replay.ordering import EARLY_STATES, keyed_ordering_dofn

METRICS_TAG = "metrics"
STATES_TAG = "states"  # (stream key, ReplayStateCoder bytes) at the end of input: checkpoints


class ReplayStateCoder(StatelessCoder):
    """The engine's :func:`~kernelstream.engine.replay.core.encode_replay_state` format as a
    coder."""

    def encode(self, st: ReplayState) -> bytes:
        return encode_replay_state(st)

    def decode(self, data: bytes) -> ReplayState:
        return decode_replay_state(data)

    def is_deterministic(self) -> bool:
        return False


# -- the DoFn ------------------------------------------------------------------------------------


class _LearnPredictBase(beam.DoFn):
    """Learns each key's blocks in stream order (the DoFns with its state: :data:`_DOFNS`)."""

    def __init__(self, core: ReplayLearner, emit_states: bool = False,
                 saved: SavedStates | None = None, progress_total: int | None = None,
                 merged: bool = False) -> None:
        self.core = core
        self.progress_total = progress_total  # examples to learn, for progress lines
        self.merged = merged  # metrics and dead letters on the main output too
        self.emit_states = emit_states
        self.saved = saved  # a checkpoint's states, read by key when a stream first appears
        self.progress: Progress | None = None
        self.n_examples = Metrics.counter(METRICS_NAMESPACE, "examples")
        self.n_mistakes = Metrics.counter(METRICS_NAMESPACE, "mistakes")
        self.n_dead = Metrics.counter(METRICS_NAMESPACE, DEAD_LETTER_TAG)
        self.n_blocks = Metrics.counter(METRICS_NAMESPACE, "blocks")
        self.n_early = Metrics.counter(METRICS_NAMESPACE, "blocks_buffered")
        self.n_dups = Metrics.counter(METRICS_NAMESPACE, "duplicate_blocks")
        self.disorder = Metrics.distribution(METRICS_NAMESPACE, "buffered_blocks_on_arrival")
        self.learn_us = Metrics.distribution(METRICS_NAMESPACE, "learn_block_us")

    def setup(self) -> None:
        self.progress = Progress(total=self.progress_total)
        if self.saved is not None:  # one index per worker process, shared by its threads
            self.saved = SavedStates.shared(self.saved.files)

    def _out(self, tag: str, value: Any) -> Any:
        return value if self.merged else beam.pvalue.TaggedOutput(tag, value)

    def _element(self, element: tuple[str, Block], state: Any, early: ParkedBlocks, end: Any,
                 window: Any) -> Iterator[Any]:
        key, block = element
        if self.progress is None:
            self.progress = Progress(total=self.progress_total)
        st: ReplayState | None = state.read()
        if st is None:
            # a stream resumed from a checkpoint starts from its saved state
            saved = None if self.saved is None else self.saved.get(key)
            st = ReplayState() if saved is None else decode_replay_state(saved)
            # Fires when the input ends (bounded) or the watermark passes the end of the
            # window (unbounded): emit the final metrics and report stranded blocks.
            end.set(window.max_timestamp())
        buffered, dups = st.cursor.buffered, st.cursor.duplicates
        self.disorder.update(buffered)
        for b in release_in_order(st.cursor, early, block):
            res = self.core.learn(key, st, b)
            self.progress.learnt(key, st, b.n, res.seconds)
            self.n_blocks.inc()
            self.learn_us.update(int(res.seconds * 1e6))
            p = res.predictions
            self.n_examples.inc(p.n - len(res.dead_letters))
            self.n_mistakes.inc(int(np.count_nonzero(p.mistake == 1)))
            yield p
            for r in res.metrics:
                yield self._out(METRICS_TAG, r)
            for d in res.dead_letters:
                self.n_dead.inc()
                yield self._out(DEAD_LETTER_TAG, d)
        if st.cursor.buffered > buffered:
            self.n_early.inc(st.cursor.buffered - buffered)
        if st.cursor.duplicates > dups:
            self.n_dups.inc(st.cursor.duplicates - dups)
        state.write(st)

    def _end(self, key: str, state: Any, early: ParkedBlocks) -> Iterator[Any]:
        st: ReplayState | None = state.read()
        if st is None:
            return
        for d in self.core.gap_letters(key, st, drain_gaps(st.cursor, early)):
            self.n_dead.inc()
            yield self._out(DEAD_LETTER_TAG, d)
        yield self._out(METRICS_TAG, self.core.final_row(key, st))
        if self.emit_states:
            yield beam.pvalue.TaggedOutput(STATES_TAG, (key, encode_replay_state(st)))
        state.clear()


_STATE = ReadModifyWriteStateSpec("stream", ReplayStateCoder())
# one DoFn per place early blocks wait (LearnPredict's early_state)
_DOFNS = {early: keyed_ordering_dofn(_LearnPredictBase, name, _STATE, early) for early, name in
          (("ordered_list", "_LearnPredictDoFn"), ("bag", "_LearnPredictBagDoFn"))}
# module names for the classes, so a pickled DoFn refers to its class
_LearnPredictDoFn, _LearnPredictBagDoFn = _DOFNS.values()


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

    Checkpoints: ``saved_states`` (a checkpoint's
    :class:`~kernelstream.engine.replay.checkpoints.SavedStates`) gives streams the state they start
    from: a worker reads a stream's saved state by key when the stream first reaches it, so
    it holds only the states of its own streams (no side input of every state);
    ``emit_states`` adds the tagged output ``states`` with every stream's state at the end of
    input, in the same encoding (:class:`ReplayStateCoder`), so a later run continues the
    streams exactly. ``progress_total``: the examples the run learns, when known, for the
    progress lines' total and ETA (``engine.replay.core.Progress``).

    ``keyed``: the input is already ``(stream key, block)`` pairs (e.g.
    ``ReadPermutedStreams(keyed=True)``), so no keying step is added. Input in the global
    window (any source's) is learnt as it comes; other windowing is replaced by the global
    window first.

    ``merged``: the metrics and dead-letter rows go to the main output too, beside the
    prediction blocks (their tagged outputs stay empty): one PCollection for one sink (e.g.
    ``sinks.WriteOutputs`` routed by ``engine.replay.outputs.output_of``), one writing step fewer
    per output in the pipeline.
    """

    EARLY_STATES = EARLY_STATES

    def __init__(self, configs: Iterable[LearnerConfig | tuple[Any, ...]], seed: int = 0,
                 metrics_window: int = 1000, source: str = "",
                 early_state: str = "ordered_list",
                 saved_states: SavedStates | None = None,
                 emit_states: bool = False, progress_total: int | None = None,
                 keyed: bool = False, merged: bool = False) -> None:
        super().__init__()
        self.keyed = keyed
        self.merged = merged
        if early_state not in self.EARLY_STATES:
            raise ValueError(f"early_state must be one of {self.EARLY_STATES}")
        self.configs = as_configs(configs)
        self.seed = seed
        self.metrics_window = metrics_window
        self.source = source
        self.early_state = early_state
        self.saved_states = saved_states
        self.emit_states = emit_states
        self.progress_total = progress_total

    def expand(self, blocks: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        dofn = _DOFNS[self.early_state]
        # merged: the tagged outputs that stay empty are not declared (each declared output is
        # a PCollection, a coder and a receiver to build for nothing); one read anyway is made
        # on demand
        tags = (((STATES_TAG,) if self.emit_states else ()) if self.merged
                else (METRICS_TAG, DEAD_LETTER_TAG, STATES_TAG))
        keyed = blocks if self.keyed else blocks | "KeyByStream" >> beam.ParDo(_KeyByStream())
        if not keyed.windowing.is_default():
            # State and timers are per window: one global window keeps each stream whole,
            # bounded or unbounded.
            keyed = keyed | "GlobalWindow" >> beam.WindowInto(GlobalWindows())
        return (
            keyed
            | "LearnPredict" >> beam.ParDo(dofn(
                ReplayLearner(self.configs, self.seed, self.metrics_window, self.source),
                self.emit_states, self.saved_states, self.progress_total, self.merged))
            .with_input_types(tuple[str, Block])
            .with_output_types(Any if self.merged else PredictionBlock)
            .with_outputs(*tags, main="predictions", allow_unknown_tags=True)
        )
