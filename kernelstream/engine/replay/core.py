"""The prequential core of a run's streams: per-key state and block learning.

Each stream key (see :class:`~kernelstream.engine.keys.StreamKey`) owns one learner, built on first
use from the key's :class:`~kernelstream.engine.learner_config.LearnerConfig` with the seed and
permutation conventions of the reference loop (``kernelstream.engine.evaluate``), and one
:class:`ReplayState`: the learner, the ordering cursor and the prequential accumulators, coded
compactly by :func:`encode_replay_state` (no pickle). :class:`ReplayLearner` learns a stream one
block at a time in stream order with the engine's test-then-train loop
(:class:`~kernelstream.engine.prequential.PrequentialPass`) and returns the block's predictions,
metrics rows and dead letters. The loop runner (``pipelines.replay.loop``) and the Beam DoFn
(``kernelstream.transforms.replay.learn``, which adds state, ordering and timers) both drive it, so
their outputs compare file to file. Learners are known only through the registry and the
:class:`~kernelstream.learners.Learner` interface.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernelstream import learners
from kernelstream.engine.deadletters import dead_letter
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.prequential import PrequentialPass, learner_loss, outcomes
from kernelstream.engine.replay.blocks import Block, PredictionBlock
from kernelstream.engine.replay.metrics import StreamMetrics, metrics_row
from kernelstream.engine.replay.ordering import OrderCursor
from kernelstream.learners.base import Learner, state_from_bytes, state_to_bytes
from kernelstream.numbers import sig
from kernelstream.sparse import CSR

# -- per-key state --------------------------------------------------------------------------------


@dataclass
class ReplayState:
    """Everything one stream key keeps between blocks."""

    cursor: OrderCursor = field(default_factory=OrderCursor)
    learner: Learner | None = None
    metrics: StreamMetrics = field(default_factory=StreamMetrics)
    rejected: int = 0  # rows the learner refused (dead letters)


_STATE_MAGIC = b"KSS"
_STATE_VERSION = 1


def encode_replay_state(st: ReplayState) -> bytes:
    """``KSS`` v1 | u32 length + JSON of the scalar fields | learner state as ``.npz``
    (``Learner.get_state``: numpy arrays only, versioned by the learner base class; no pickle).
    JSON floats round-trip exactly (``repr``)."""
    meta = json.dumps([st.cursor.to_json(), st.metrics.to_json(), st.rejected]).encode()
    blob = b"" if st.learner is None else state_to_bytes(st.learner.get_state())
    return b"".join((_STATE_MAGIC, bytes([_STATE_VERSION]), struct.pack("<I", len(meta)),
                     meta, blob))


def decode_replay_state(data: bytes) -> ReplayState:
    """The :class:`ReplayState` of :func:`encode_replay_state` bytes."""
    if data[:3] != _STATE_MAGIC or data[3] != _STATE_VERSION:
        raise ValueError("not a kernelstream stream state (or an unsupported version)")
    (n,) = struct.unpack_from("<I", data, 4)
    cur, met, rejected = json.loads(bytes(data[8 : 8 + n]))
    blob = bytes(data[8 + n :])
    learner = None
    if blob:
        state = state_from_bytes(blob)
        learner = learners.from_state(state)
    return ReplayState(OrderCursor.from_json(cur), learner, StreamMetrics.from_json(met),
                       int(rejected))


# -- progress ------------------------------------------------------------------------------------

PROGRESS_LOGGER = "kernelstream.progress"
_progress_log = logging.getLogger(PROGRESS_LOGGER)


class Progress:
    """Progress lines while streams are learnt, at most one every ``every`` seconds per
    worker, on the ``kernelstream.progress`` logger (INFO): the CLI prints them on stderr; on
    a cluster they land in the worker logs. Counts are this worker's.

    With ``total`` (the examples this worker will learn, when known in advance) a line shows
    the share done and an ETA from the wall-clock pace so far. The rate shown is learning
    throughput: examples over the seconds spent learning them (the blocks' learning time),
    so a source that waits for records (a Kafka topic going idle) does not dilute it."""

    def __init__(self, every: float = 5.0, total: int | None = None) -> None:
        self.every = every
        self.total = total if total is not None and total > 0 else None
        self.t0 = self.last = time.monotonic()
        self.examples = 0
        self.busy = 0.0  # seconds spent learning

    def learnt(self, key: str, st: ReplayState, n: int, seconds: float = 0.0) -> None:
        """``n`` more examples of stream ``key`` learnt in ``seconds``."""
        self.examples += n
        self.busy += seconds
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        _progress_log.info("%s", self.line(key, st, now))

    def line(self, key: str, st: ReplayState, now: float) -> str:
        tot = st.metrics.total
        err = ""
        if st.learner is not None and st.learner.task == "classification" and tot.examples:
            err = f", mistake rate {sig(100.0 * tot.mistakes / tot.examples)}%"
        el = now - self.t0
        done = f"{self.examples:,} examples"
        eta = ""
        if self.total is not None:
            share = min(self.examples / self.total, 1.0)
            done = f"{self.examples:,} of {self.total:,} examples ({100.0 * share:.0f}%)"
            if self.examples:
                left = max(self.total - self.examples, 0) * el / self.examples
                eta = f", ETA {fmt_duration(left)}"
        rate = "-" if self.busy <= 0 else f"{self.examples / self.busy:,.0f}"
        return (f"{done} learnt in {fmt_duration(el)}{eta} (learning {rate}/s); "
                f"stream {key} at {tot.examples:,} examples{err}")


def fmt_duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``: a duration for progress lines."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


# -- one stream's learning -------------------------------------------------------------------------


def selects_kernels(learner: Learner) -> bool:
    """Kernel-selection learners override ``selected_kernel``; their per-example trace needs a
    per-example call (still the learner's batch path, one row at a time)."""
    return type(learner).selected_kernel is not Learner.selected_kernel


@dataclass
class BlockResult:
    predictions: PredictionBlock
    metrics: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]
    seconds: float


def _diagnostics(m: Learner) -> str | None:
    d = m.diagnostics
    return None if d is None else json.dumps(d, sort_keys=True)  # floats by repr: exact


class ReplayLearner:
    """Learning of the streams of a run, one block at a time in stream order.

    The Beam DoFn and the loop runner (``pipelines.replay.loop``) both use it, so their outputs
    can be compared file to file; the Beam-specific part is only state and ordering.
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

    def learn(self, key: str, st: ReplayState, b: Block) -> BlockResult:
        """Test-then-train over block ``b`` (the next block of the stream)."""
        if st.learner is None:
            st.learner = self.new_learner(key)
        m = st.learner
        n = b.n
        n_sv = np.empty(n, dtype=np.int64)
        sel = np.full(n, -1, dtype=np.int64)
        ok = np.ones(n, dtype=bool)
        dead: list[dict[str, Any]] = []
        per_row = selects_kernels(m)
        dist: np.ndarray | None = None  # per-row kernel distribution of selection learners
        target = self.configs[StreamKey.decode(key).config].target
        run = PrequentialPass(m, b.X, b.y, block_size=max(n, 1), target=target)
        if not per_row and n:
            before = m.t
            try:
                run.run()
                n_sv[:] = m.n_support_vectors
            except ValueError:
                # The batch path validates the whole block before changing anything; if it
                # did change the learner the error is not a bad row, so let the bundle fail.
                if m.t != before:
                    raise
                per_row = True
        if per_row:
            run = PrequentialPass(m, b.X, b.y, block_size=1, skip_rejected=True, target=target)
            for i, _, exc in run.blocks():
                if exc is not None:
                    ok[i] = False
                    dead.append(dead_letter(self.source, None, _row_text(b, i),
                                            f"learner rejected the row: {exc}", "learn", key,
                                            b.start + i, int(b.ids[i])))
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
        score = run.scores
        score[~ok] = 0.0  # rejected rows: no score (NaN below), but outcomes need a number
        predicted, mistake, loss = outcomes(m, score, b.y)
        if dead:
            st.rejected += len(dead)
            bad = ~ok
            score[bad] = loss[bad] = predicted[bad] = np.nan
            mistake[bad] = -1
            n_sv[bad] = m.n_support_vectors
        preds = PredictionBlock(b.key, b.start, b.ids, score, predicted, b.y, loss, mistake,
                                n_sv, sel)
        rows = [
            self.metrics_row(key, st, pos, final=False,
                             distribution=None if dist is None else dist[pos - b.start - 1])
            for pos in st.metrics.account(b.start, ok, mistake, loss, run.seconds,
                                          self.metrics_window, y=b.y, predicted=predicted,
                                          classify=m.task == "classification",
                                          loss_fn=learner_loss(m).value)
        ]
        st.cursor.next = max(st.cursor.next, b.end)
        return BlockResult(preds, rows, dead, run.seconds)

    def metrics_row(self, key: str, st: ReplayState, position: int, final: bool,
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
                   else [float(v) for v in distribution],
                   "diagnostics": None if m is None or not final else _diagnostics(m)},
        )

    def final_row(self, key: str, st: ReplayState) -> dict[str, Any]:
        p = None if st.learner is None else st.learner.kernel_distribution
        return self.metrics_row(key, st, st.cursor.next, final=True, distribution=p)

    def gap_letters(self, key: str, st: ReplayState, stranded: list[Block]) -> list[dict[str, Any]]:
        """Dead letters of the rows of blocks stranded behind a gap at the end of the input."""
        return [dead_letter(self.source, None, "", f"stream gap: positions from "
                            f"{st.cursor.next} never arrived before the end of input, so this "
                            "later row was not learnt", "order", key, b.start + i, int(b.ids[i]))
                for b in stranded for i in range(b.n)]


def _row_text(b: Block, i: int) -> str:
    """A readable rendering of a rejected row for the dead-letter output."""
    if isinstance(b.X, CSR):
        nz, vals = b.X.row(i)
    else:
        nz = np.flatnonzero(b.X[i])
        vals = b.X[i, nz]
    feats = " ".join(f"{j + 1}:{v!r}" for j, v in zip(nz[:50].tolist(), vals[:50].tolist(),
                                                          strict=True))
    return f"{float(b.y[i])!r} {feats}" + (" ..." if nz.shape[0] > 50 else "")
