"""Per-key stream ordering inside a stateful DoFn.

Online learning is order-sensitive, but a runner may deliver a key's blocks in any order
(different bundles or workers, a reshuffle, retries). A stream's blocks partition its positions
``0, 1, 2, ...``; the key's state keeps a cursor ``next`` (the first position not yet
processed). An arriving block

* that starts at ``next`` is processed at once, followed by every buffered block that has
  become contiguous;
* that starts after ``next`` arrived early: it is parked in ordered-list state under its start
  position until the gap before it is filled;
* that starts before ``next`` was already processed (a redelivery): it is dropped.

So the memory held for ordering is the blocks that arrived early, i.e. it is bounded by the
disorder of the input and not by the stream length, and it lives in runner-managed state, not
in worker memory. Nothing here depends on the watermark or on the stream having an end, so the
same logic serves bounded and unbounded input.

The ordering must live in the *same* stateful DoFn as the learner: a runner may re-shuffle
between two transforms (e.g. to key-partition the input of a stateful ParDo), which would undo
an ordering produced by a separate step. :class:`OrderCursor` and :func:`release_in_order` are
therefore building blocks for such a DoFn (see ``learn.py``); :class:`OrderBlocks` is a
standalone transform built from them, used to test the ordering on its own.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import apache_beam as beam
from apache_beam.transforms.userstate import (
    BagStateSpec,
    OrderedListStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.utils.timestamp import Timestamp

from kernelstream.transforms.blocks import Block, BlockCoder


class OrderedList(Protocol):
    """The part of Beam's ordered-list runtime state used here (sort keys are timestamps)."""

    def add(self, elem: tuple[Timestamp, Any]) -> None: ...

    def read_range(self, min_ts: Timestamp, limit_ts: Timestamp) -> Any: ...

    def clear_range(self, min_ts: Timestamp, limit_ts: Timestamp) -> None: ...


def early_blocks_spec(name: str = "early_blocks") -> OrderedListStateSpec:
    """Ordered-list state of early blocks, sorted by start position."""
    return OrderedListStateSpec(name, BlockCoder())


def early_blocks_bag_spec(name: str = "early_blocks") -> BagStateSpec:
    """Bag state of early blocks, for runners without ordered-list state (wrap the runtime
    state in :class:`BagAsOrderedList`)."""
    return BagStateSpec(name, BlockCoder())


class BagAsOrderedList:
    """The :class:`OrderedList` operations on a bag of blocks (sort key: ``block.start``).

    For runners without ordered-list state (e.g. the Python BundleBasedDirectRunner that runs
    TestStream). A range read scans the bag, so each release costs O(blocks buffered): still
    bounded by the disorder, only with a larger constant than real ordered-list state.
    """

    def __init__(self, bag: Any) -> None:
        self.bag = bag

    def add(self, elem: tuple[Timestamp, Any]) -> None:
        self.bag.add(elem[1])

    def read_range(self, min_ts: Timestamp, limit_ts: Timestamp) -> list[tuple[Timestamp, Any]]:
        lo, hi = min_ts.micros, limit_ts.micros
        found = [b for b in self.bag.read() if lo <= b.start < hi]
        return [(_ts(b.start), b) for b in sorted(found, key=lambda b: b.start)]

    def clear_range(self, min_ts: Timestamp, limit_ts: Timestamp) -> None:
        lo, hi = min_ts.micros, limit_ts.micros
        keep = [b for b in self.bag.read() if not lo <= b.start < hi]
        self.bag.clear()
        for b in keep:
            self.bag.add(b)


@dataclass
class OrderCursor:
    """Ordering bookkeeping of one key (kept in the key's value state)."""

    next: int = 0  # first stream position not yet processed
    buffered: int = 0  # blocks parked in the ordered list
    buffered_rows: int = 0
    max_buffered: int = 0  # high-water mark of ``buffered`` (the observed disorder)
    duplicates: int = 0  # redelivered blocks dropped

    def to_json(self) -> list[int]:
        return [self.next, self.buffered, self.buffered_rows, self.max_buffered, self.duplicates]

    @classmethod
    def from_json(cls, v: list[int]) -> OrderCursor:
        return cls(*(int(x) for x in v))


def _ts(pos: int) -> Timestamp:
    return Timestamp(micros=pos)


def release_in_order(cursor: OrderCursor, early: OrderedList, block: Block) -> Iterator[Block]:
    """Yield the blocks that can be processed now, in stream order, after ``block`` arrived.

    The caller must consume the iterator completely (it updates ``cursor`` and ``early`` as it
    goes) and then persist ``cursor``. Each yielded block must be processed before the next one
    is requested.
    """
    if block.start < cursor.next:
        if block.end > cursor.next:
            raise ValueError(
                f"stream {block.key}: block [{block.start}, {block.end}) overlaps the processed "
                f"prefix [0, {cursor.next}); blocks must partition the stream positions"
            )
        cursor.duplicates += 1
        return
    if block.start > cursor.next:
        early.add((_ts(block.start), block))
        cursor.buffered += 1
        cursor.buffered_rows += block.n
        cursor.max_buffered = max(cursor.max_buffered, cursor.buffered)
        return
    yield block
    cursor.next = block.end
    # Only touch the ordered list while something is parked: on an in-order stream this costs
    # no state request at all.
    while cursor.buffered > 0:
        found = [b for _, b in early.read_range(_ts(cursor.next), _ts(cursor.next + 1))]
        if not found:
            break
        early.clear_range(_ts(cursor.next), _ts(cursor.next + 1))
        cursor.buffered -= len(found)
        cursor.buffered_rows -= sum(b.n for b in found)
        cursor.duplicates += len(found) - 1  # the same block parked twice
        nxt = found[0]
        yield nxt
        cursor.next = nxt.end


def drain_gaps(cursor: OrderCursor, early: OrderedList) -> list[Block]:
    """At the end of a stream: the parked blocks that never became contiguous (missing input),
    sorted by position. Clears them from the state."""
    if cursor.buffered <= 0:
        return []
    lo, hi = _ts(cursor.next), Timestamp(micros=(1 << 62))
    left = [b for _, b in early.read_range(lo, hi)]
    early.clear_range(lo, hi)
    cursor.buffered = cursor.buffered_rows = 0
    return left


class _OrderCursorCoder(beam.coders.Coder):
    def encode(self, c: OrderCursor) -> bytes:
        return ",".join(map(str, c.to_json())).encode()

    def decode(self, data: bytes) -> OrderCursor:
        return OrderCursor.from_json(data.decode().split(","))  # type: ignore[arg-type]

    def is_deterministic(self) -> bool:
        return True


_CURSOR = ReadModifyWriteStateSpec("cursor", _OrderCursorCoder())
_EARLY = early_blocks_spec()
_END = TimerSpec("end", beam.TimeDomain.WATERMARK)
# Beam's DoFn parameters are declared as argument defaults; module-level singletons keep them
# out of the function signatures' evaluation.
_CURSOR_PARAM = beam.DoFn.StateParam(_CURSOR)
_EARLY_PARAM = beam.DoFn.StateParam(_EARLY)
_END_PARAM = beam.DoFn.TimerParam(_END)


class _OrderBlocksDoFn(beam.DoFn):
    def process(
        self,
        element: tuple[str, Block],
        cursor_state: Any = _CURSOR_PARAM,
        early: Any = _EARLY_PARAM,
        end: Any = _END_PARAM,
        window: Any = beam.DoFn.WindowParam,
    ) -> Iterator[tuple[str, Block]]:
        key, block = element
        cursor = cursor_state.read()
        if cursor is None:
            cursor = OrderCursor()
            end.set(window.max_timestamp())
        for b in release_in_order(cursor, early, block):
            yield key, b
        cursor_state.write(cursor)

    @on_timer(_END)
    def on_end(
        self,
        key: Any = beam.DoFn.KeyParam,
        cursor_state: Any = _CURSOR_PARAM,
        early: Any = _EARLY_PARAM,
    ) -> Iterator[Any]:
        cursor = cursor_state.read()
        if cursor is not None:
            for b in drain_gaps(cursor, early):
                yield beam.pvalue.TaggedOutput(OrderBlocks.GAPS, (key, b))
        cursor_state.clear()


class OrderBlocks(beam.PTransform):
    """``(key, Block)`` in any order → the same blocks in stream order per key (main output),
    plus blocks that never became contiguous under tag ``gaps`` at the end of input.

    Downstream transforms are not guaranteed to see this order (see the module docstring);
    learning uses the same logic inside its own DoFn.
    """

    GAPS = "gaps"

    def expand(self, pcoll: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return (
            pcoll
            | "GlobalWindow" >> beam.WindowInto(beam.window.GlobalWindows())
            | "Order" >> beam.ParDo(_OrderBlocksDoFn())
            .with_outputs(self.GAPS, main="ordered")
        )


class ScrambleBlocks(beam.PTransform):
    """Deliver blocks in a seeded random order (a test and diagnostic aid: LearnPredict must
    give the same predictions whatever the order). Blocks are dealt into ``buckets`` by a
    seeded hash, grouped, emitted shuffled within each bucket, then reshuffled across bundles
    and workers — so they arrive out of order even on runners whose Reshuffle keeps order."""

    def __init__(self, seed: int = 0, buckets: int = 7) -> None:
        super().__init__()
        self.seed = seed
        self.buckets = buckets

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        seed, buckets = self.seed, self.buckets

        def deal(b: Block) -> tuple[int, Block]:
            h = zlib.crc32(f"{seed}/{b.key}/{b.start}".encode())
            return h % buckets, b

        def shuffled(kv: tuple[int, Any]) -> list[Block]:
            blocks = sorted(kv[1], key=lambda b: (b.key, b.start))
            random.Random(f"{seed}/{kv[0]}").shuffle(blocks)
            return blocks

        return (
            pcoll
            | "Deal" >> beam.Map(deal).with_output_types(tuple[int, Block])
            | "Group" >> beam.GroupByKey()
            | "Shuffle" >> beam.FlatMap(shuffled).with_output_types(Block)
            | "Reshuffle" >> beam.Reshuffle()
        )
