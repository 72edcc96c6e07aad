"""Blocks, coders, ordering and LearnPredict on the FnApiRunner: Beam predictions are the
plain prequential loop's, bit for bit, whatever order the blocks arrive in."""

from __future__ import annotations

import contextlib
import math
import pickle
import random
from collections import defaultdict
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelstream import learners
from kernelstream.engine.evaluate import evaluate
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.replay.blocks import Block, PredictionBlock, concat_blocks
from kernelstream.engine.replay.core import ReplayState
from kernelstream.engine.replay.metrics import exact_add, exact_value
from kernelstream.engine.replay.ordering import OrderCursor, release_in_order
from kernelstream.engine.replay.sources import ReplayStreams, array_loader, stream_blocks
from kernelstream.learners.testing import make_stream, small_params
from kernelstream.seeding import permutation
from kernelstream.transforms.replay.blocks import BlockCoder, PredictionBlockCoder
from kernelstream.transforms.replay.learn import LearnPredict, ReplayStateCoder
from kernelstream.transforms.replay.ordering import OrderBlocks, ScrambleBlocks
from kernelstream.transforms.replay.sources import ReadPermutedStreams

SEED = 7


# -- coders ---------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 9), d=st.integers(1, 6), start=st.integers(0, 2**40),
       key=st.text(min_size=0, max_size=12))
def test_block_coder_round_trip(n: int, d: int, start: int, key: str) -> None:
    rng = np.random.default_rng(n * 31 + d)
    X = rng.normal(size=(n, d))
    if n:
        X[0, 0] = np.nan  # raw buffers keep every bit, NaN included
    b = Block(key, start, rng.integers(0, 10**12, n), X, rng.choice([-1.0, 1.0], n))
    data = BlockCoder().encode(b)
    assert b"pickle" not in data[:8]
    back = BlockCoder().decode(data)
    assert back.equals(b)
    assert back.X.flags.writeable  # decoded arrays are the learner's to keep
    # compact: the header is small next to the raw buffers
    assert len(data) - 8 * n * (d + 2) < 40 + len(key.encode())


def test_block_coder_rejects_foreign_bytes() -> None:
    with pytest.raises(ValueError, match="magic"):
        BlockCoder().decode(b"XXX\x01" + bytes(40))
    good = BlockCoder().encode(Block("k#0", 0, [1], [[1.0]], [1.0]))
    with pytest.raises(ValueError, match="version"):
        BlockCoder().decode(good[:3] + b"\x09" + good[4:])
    with pytest.raises(ValueError, match="truncated"):
        BlockCoder().decode(good[:-3])


def test_prediction_block_coder_round_trip() -> None:
    n = 5
    p = PredictionBlock("c#1@u", 10, np.arange(n), np.linspace(-1, 1, n), np.ones(n),
                        -np.ones(n), np.arange(n) * 0.5, [1, 0, 1, 0, -1], [3] * n,
                        [-1, 2, 2, 0, -1])
    q = PredictionBlockCoder().decode(PredictionBlockCoder().encode(p))
    assert q.rows() == p.rows()
    assert q.rows()[4]["mistake"] is None and q.rows()[1]["selected_kernel"] == 2


def test_stream_key() -> None:
    k = StreamKey("bogd-200", 3, "user@x#1")
    assert StreamKey.decode(k.encode()) == k
    assert StreamKey.decode("a#0") == StreamKey("a", 0, None)
    with pytest.raises(ValueError):
        StreamKey("a#b", 0).encode()


def test_concat_blocks_requires_contiguity() -> None:
    a = Block("k#0", 0, [0, 1], np.zeros((2, 2)), [1, 1])
    b = Block("k#0", 2, [2], np.ones((1, 2)), [-1])
    assert concat_blocks([b, a]).equals(Block("k#0", 0, [0, 1, 2],
                                              np.r_[np.zeros((2, 2)), np.ones((1, 2))],
                                              [1, 1, -1]))
    with pytest.raises(ValueError):
        concat_blocks([a, b.slice(0, 0).with_key("k#0"), Block("k#0", 5, [5], [[0, 0]], [1])])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=60),
       st.integers(1, 7))
def test_exact_sum_is_fsum_whatever_the_cut(values: list[float], cut: int) -> None:
    total = 0
    for i in range(0, len(values), cut):
        total = exact_add(total, np.array(values[i : i + cut]))
    exact = sum(map(Fraction, values), Fraction(0))
    try:
        ref = float(exact)  # correctly rounded, as fsum
    except OverflowError:  # beyond float64: we give ±inf
        assert math.isinf(exact_value(total))
        return
    assert exact_value(total) == ref
    with contextlib.suppress(OverflowError):  # fsum gives up on intermediate overflow
        assert exact_value(total) == math.fsum(values)


def test_exact_sum_of_many_large_mantissas() -> None:
    v = np.nextafter(np.ones(5000), 2.0) * 3.0  # mantissas near 2**53: int64 chunking matters
    assert exact_value(exact_add(0, v)) == math.fsum(v.tolist())


# -- ordering -------------------------------------------------------------------------------------
class FakeOrderedList:
    """In-memory parked blocks (the engine's ``ParkedBlocks``, as Beam's state adapters)."""

    def __init__(self) -> None:
        self.items: list[tuple[int, Block]] = []

    def add(self, start: int, block: Block) -> None:
        self.items.append((start, block))

    def read_range(self, lo: int, hi: int) -> list[Block]:
        return [b for k, b in sorted(self.items, key=lambda t: t[0]) if lo <= k < hi]

    def clear_range(self, lo: int, hi: int) -> None:
        self.items = [(k, b) for k, b in self.items if not lo <= k < hi]


def _blocks(sizes: list[int]) -> list[Block]:
    out, pos = [], 0
    for s in sizes:
        out.append(Block("k#0", pos, np.arange(pos, pos + s), np.zeros((s, 1)), np.ones(s)))
        pos += s
    return out


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=25), st.randoms(use_true_random=False),
       st.integers(0, 5))
def test_release_in_order(sizes: list[int], rnd: random.Random, n_dups: int) -> None:
    blocks = _blocks(sizes)
    arrivals = blocks + [rnd.choice(blocks) for _ in range(n_dups)]  # redeliveries
    rnd.shuffle(arrivals)
    cur, early = OrderCursor(), FakeOrderedList()
    released: list[int] = []
    arrived: list[int] = []
    for b in arrivals:
        arrived.append(b.start)
        released += [x.start for x in release_in_order(cur, early, b)]
        # memory is bounded by the disorder: only the arrivals past the gap are kept
        assert len(early.items) == cur.buffered == sum(s >= cur.next for s in arrived)
    assert released == [b.start for b in blocks]
    assert cur.next == sum(sizes) and cur.buffered == 0 and early.items == []
    assert cur.duplicates == n_dups


def test_release_in_order_in_order_stream_touches_no_state() -> None:
    class NoState(FakeOrderedList):
        def read_range(self, lo: int, hi: int) -> Any:
            raise AssertionError("an in-order stream must not read the ordered list")

    cur, early = OrderCursor(), NoState()
    for b in _blocks([3, 3, 3]):
        assert [x.start for x in release_in_order(cur, early, b)] == [b.start]
    assert cur.max_buffered == 0


def test_release_in_order_rejects_overlap() -> None:
    cur = OrderCursor(next=4)
    with pytest.raises(ValueError, match="overlaps"):
        list(release_in_order(cur, FakeOrderedList(), _blocks([2, 4])[1]))  # [2, 6)


# -- state coder ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", learners.available())
def test_stream_state_coder_continues_bit_identically(name: str) -> None:
    """Learner state moved through the coder between blocks changes nothing."""
    params = small_params(name)
    task = learners.make(name, **params).task
    X, y = make_stream(task, 240, seed=1)
    ref = learners.make(name, seed=(1, 2, 3), **params).predict_learn_many(X, y)
    st = ReplayState(learner=learners.make(name, seed=(1, 2, 3), **params))
    coder = ReplayStateCoder()
    got = []
    for s in range(0, 240, 50):
        assert st.learner is not None
        got.append(st.learner.predict_learn_many(X[s : s + 50], y[s : s + 50]))
        st = coder.decode(coder.encode(st))
    assert np.array_equal(np.concatenate(got), ref)


# -- LearnPredict vs the loop -----------------------------------------------------------------
def _configs() -> list[LearnerConfig]:
    """Every registered learner with small settings, plus a regression configuration of each
    learner that offers the square loss."""
    out = [LearnerConfig(n, n, small_params(n)) for n in learners.available()]
    for n in learners.available():
        loss = [p for p in learners.get(n).params if p.name == "loss"]
        if loss and loss[0].choices and "square" in loss[0].choices:
            out.append(LearnerConfig(f"{n}-square", n, {**small_params(n), "loss": "square"}))
    return out


def loop_scores(cfg: LearnerConfig, X: np.ndarray, y: np.ndarray, seed: int,
                r: int) -> np.ndarray:
    """The reference: the per-example predict-then-learn loop of ALGORITHMS.md §2.1."""
    perm = permutation(X.shape[0], seed, r)
    m = cfg.make(seed, r)
    return np.array([m.step(X[j], y[j]) for j in perm])


def test_learn_predict_equals_loop_for_every_learner_out_of_order(tmp_path: Any) -> None:
    configs = _configs()
    n, R = 260, 2
    X, yc = make_stream("classification", n, seed=11)
    _, yr = make_stream("regression", n, seed=11)
    cls_cfgs = [c for c in configs if learners.make(c.learner, **c.params).task
                == "classification"]
    reg_cfgs = [c for c in configs if c not in cls_cfgs]
    spec_c = ReplayStreams(tuple(c.label for c in cls_cfgs), seed=SEED, permutations=R,
                        block_size=32)
    spec_r = ReplayStreams(tuple(c.label for c in reg_cfgs) or ("none",), seed=SEED,
                        permutations=R, block_size=32)
    cp, cf = Collector(tmp_path / "p"), Collector(tmp_path / "f")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        bc = (p | "SrcC" >> ReadPermutedStreams(array_loader(X, yc), spec_c)).blocks
        br = (p | "SrcR" >> ReadPermutedStreams(array_loader(X, yr), spec_r)).blocks
        if not reg_cfgs:
            br = br | beam.Filter(lambda b: False)
        out = ((bc, br) | beam.Flatten() | ScrambleBlocks(seed=3)
               | LearnPredict(configs, seed=SEED, metrics_window=100))
        cp(out.predictions, "Preds")
        cf(out.metrics | beam.Filter(lambda r: r["final"]), "Finals")
        assert_that(out.dead_letters, equal_to([]), label="NoDeadLetters")
    preds: list[PredictionBlock] = cp.load()
    finals: list[dict[str, Any]] = cf.load()

    by_key: dict[str, list[PredictionBlock]] = defaultdict(list)
    for pb in preds:
        by_key[pb.key].append(pb)
    assert len(by_key) == len(configs) * R
    disorder = 0
    final_by_key = {f["key"]: f for f in finals}
    for cfg in configs:
        y = yr if cfg in reg_cfgs else yc
        for r in range(R):
            key = StreamKey(cfg.label, r).encode()
            parts = sorted(by_key[key], key=lambda b: b.start)
            assert [b.start for b in parts] == list(range(0, n, 32))
            got = np.concatenate([b.score for b in parts])
            ref = loop_scores(cfg, X, y, SEED, r)
            assert np.array_equal(got, ref), f"{key}: Beam scores differ from the loop"
            ids = np.concatenate([b.ids for b in parts])
            assert np.array_equal(ids, permutation(n, SEED, r))
            disorder += final_by_key[key]["max_buffered_blocks"]
        # the summary derived from the metrics output equals the reference evaluate()
        ev = evaluate(X, y, cfg.learner, cfg.params, seed=SEED, permutations=R, progress=None)
        for r, run in enumerate(ev.runs):
            f = final_by_key[StreamKey(cfg.label, r).encode()]
            assert f["examples"] == run.examples
            assert f["mistakes"] == run.mistakes
            assert f["mistake_rate"] == run.mistake_rate
            assert f["avg_loss"] == run.avg_loss
            assert f["n_support_vectors"] == run.n_support_vectors
    assert disorder > 0, "the test did not deliver blocks out of order"


class Collector:
    """Gathers a PCollection into a pickle file (DoFns are pickled, so a list in the test
    would only receive copies); ``load()`` after the pipeline has run."""

    def __init__(self, path: Any) -> None:
        self.path = str(path)

    def __call__(self, pcoll: beam.PCollection, label: str) -> None:
        path = self.path

        def dump(items: list[Any]) -> None:
            with open(path, "wb") as f:
                pickle.dump(items, f)

        _ = pcoll | f"{label}ToList" >> beam.combiners.ToList() | f"{label}Dump" >> beam.Map(dump)

    def load(self) -> list[Any]:
        with open(self.path, "rb") as f:
            return pickle.load(f)


def test_key_by_entity_streams_equal_per_entity_loops(tmp_path: Any) -> None:
    n = 300
    X, y = make_stream("classification", n, seed=5)
    ents = np.array(["a", "b", "c"])[np.random.default_rng(0).integers(0, 3, n)]
    cfg = LearnerConfig("bogd", "bogd", {"budget": 10})
    spec = ReplayStreams(("bogd",), seed=SEED, permutations=2, block_size=16)
    cp = Collector(tmp_path / "p")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        src = p | ReadPermutedStreams(array_loader(X, y, entities=ents), spec)
        out = src.blocks | ScrambleBlocks(seed=1) | LearnPredict([cfg], seed=SEED)
        cp(out.predictions, "Preds")
    preds: list[PredictionBlock] = cp.load()
    by_key: dict[str, list[PredictionBlock]] = defaultdict(list)
    for pb in preds:
        by_key[pb.key].append(pb)
    assert len(by_key) == 6
    for r in range(2):
        perm = permutation(n, SEED, r)
        for e in "abc":
            rows = perm[ents[perm] == e]
            m = cfg.make(SEED, r)
            ref = np.array([m.step(X[j], y[j]) for j in rows])
            parts = sorted(by_key[StreamKey("bogd", r, e).encode()], key=lambda b: b.start)
            assert np.array_equal(np.concatenate([b.score for b in parts]), ref)
            assert np.array_equal(np.concatenate([b.ids for b in parts]), rows)


def test_order_blocks_transform_reports_gaps(tmp_path: Any) -> None:
    X, y = make_stream("classification", 40, seed=2)
    spec = ReplayStreams(("c",), seed=0, block_size=8)
    blocks = list(stream_blocks(array_loader(X, y)(), spec))
    missing = blocks.pop(2)  # positions 16..23 never arrive
    random.Random(0).shuffle(blocks)
    co = Collector(tmp_path / "o")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = (p | beam.Create([(b.key, b) for b in blocks])
               .with_output_types(tuple[str, Block]) | OrderBlocks())
        co(out.ordered | beam.Map(lambda kv: kv[1].start), "Ordered")
        assert_that(out.gaps | beam.Map(lambda kv: kv[1].start), equal_to([24, 32]),
                    label="Gaps")
    assert co.load() == [0, 8]
    assert missing.start == 16
