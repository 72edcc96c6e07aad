"""Per-key stream ordering inside a stateful DoFn: Beam state for the engine's ordering.

The ordering itself (:class:`~kernelstream.engine.replay.ordering.OrderCursor`,
:func:`~kernelstream.engine.replay.ordering.release_in_order`) is the engine's; here the blocks that
arrived early are parked in runner-managed state, not in worker memory: ordered-list state
(:class:`OrderedListBlocks`) or bag state (:class:`BagBlocks`) for runners without ordered lists.

The ordering must live in the *same* stateful DoFn as the learner: a runner may re-shuffle
between two transforms (e.g. to key-partition the input of a stateful ParDo), which would undo
an ordering produced by a separate step (see ``learn.py``). :class:`OrderBlocks` is a standalone
transform built from the same pieces, used to test the ordering on its own.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms.userstate import (
    BagStateSpec,
    OrderedListStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.timestamp import Timestamp

from kernelstream.engine.replay.blocks import Block
from kernelstream.engine.replay.ordering import (
    OrderCursor,
    ParkedBlocks,
    drain_gaps,
    release_in_order,
)
from kernelstream.transforms.replay.blocks import BlockCoder


def early_blocks_spec(name: str = "early_blocks") -> OrderedListStateSpec:
    """Ordered-list state of early blocks, sorted by start position (wrap the runtime state
    in :class:`OrderedListBlocks`)."""
    return OrderedListStateSpec(name, BlockCoder())


def early_blocks_bag_spec(name: str = "early_blocks") -> BagStateSpec:
    """Bag state of early blocks, for runners without ordered-list state (wrap the runtime
    state in :class:`BagBlocks`)."""
    return BagStateSpec(name, BlockCoder())


def _ts(pos: int) -> Timestamp:
    return Timestamp(micros=pos)


class OrderedListBlocks:
    """The engine's :class:`~kernelstream.engine.replay.ordering.ParkedBlocks` on Beam's
    ordered-list runtime state (sort key: the start position as a timestamp in microseconds)."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def add(self, start: int, block: Block) -> None:
        self.state.add((_ts(start), block))

    def read_range(self, lo: int, hi: int) -> list[Block]:
        return [b for _, b in self.state.read_range(_ts(lo), _ts(hi))]

    def clear_range(self, lo: int, hi: int) -> None:
        self.state.clear_range(_ts(lo), _ts(hi))


class BagBlocks:
    """:class:`~kernelstream.engine.replay.ordering.ParkedBlocks` on a bag of blocks.

    For runners without ordered-list state (e.g. the Python BundleBasedDirectRunner that runs
    TestStream). A range read scans the bag, so each release costs O(blocks buffered): still
    bounded by the disorder, only with a larger constant than real ordered-list state.
    """

    def __init__(self, bag: Any) -> None:
        self.bag = bag

    def add(self, start: int, block: Block) -> None:
        self.bag.add(block)

    def read_range(self, lo: int, hi: int) -> list[Block]:
        return sorted((b for b in self.bag.read() if lo <= b.start < hi), key=lambda b: b.start)

    def clear_range(self, lo: int, hi: int) -> None:
        keep = [b for b in self.bag.read() if not lo <= b.start < hi]
        self.bag.clear()
        for b in keep:
            self.bag.add(b)


class _OrderCursorCoder(beam.coders.Coder):
    def encode(self, c: OrderCursor) -> bytes:
        return ",".join(map(str, c.to_json())).encode()

    def decode(self, data: bytes) -> OrderCursor:
        return OrderCursor.from_json(data.decode().split(","))  # type: ignore[arg-type]

    def is_deterministic(self) -> bool:
        return True


EARLY_STATES = ("ordered_list", "bag")  # where a DoFn keeps its early blocks


def keyed_ordering_dofn(base: type, name: str, value: ReadModifyWriteStateSpec,
                        early_state: str) -> type:
    """``base`` with the state and timer of a per-key ordering DoFn declared, as class ``name``
    of ``base``'s module: per key the value state ``value`` and the early blocks in
    ordered-list or bag state (``early_state``), and a timer at the end of the window.
    ``process`` calls ``base._element(element, value_state, early, end_timer, window)`` and the
    timer ``base._end(key, value_state, early)``, ``early`` as a
    :class:`~kernelstream.engine.replay.ordering.ParkedBlocks`."""
    if early_state not in EARLY_STATES:
        raise ValueError(f"early_state must be one of {EARLY_STATES}, got {early_state!r}")
    bag = early_state == "bag"
    parked = BagBlocks if bag else OrderedListBlocks
    # Beam declares state and timers as argument defaults; a timer spec takes one callback,
    # so each DoFn gets its own.
    end_spec = TimerSpec("end", beam.TimeDomain.WATERMARK)
    value_param = beam.DoFn.StateParam(value)
    early_param = beam.DoFn.StateParam(early_blocks_bag_spec() if bag else early_blocks_spec())
    end_param = beam.DoFn.TimerParam(end_spec)

    def process(self: Any, element: tuple[str, Block], value_state: Any = value_param,
                early: Any = early_param, end: Any = end_param,
                window: Any = beam.DoFn.WindowParam) -> Iterator[Any]:
        yield from self._element(element, value_state, parked(early), end, window)

    @on_timer(end_spec)
    def on_end(self: Any, key: Any = beam.DoFn.KeyParam, value_state: Any = value_param,
               early: Any = early_param) -> Iterator[Any]:
        yield from self._end(key, value_state, parked(early))

    return type(name, (base,), {
        "process": process, "on_end": on_end, "__module__": base.__module__,
        "__qualname__": name,
        "__doc__": f"{base.__doc__} Early blocks in {early_state.replace('_', '-')} state."})


class _OrderBlocks(beam.DoFn):
    """Releases each key's blocks in stream order."""

    def _element(self, element: tuple[str, Block], cursor_state: Any, early: ParkedBlocks,
                 end: Any, window: Any) -> Iterator[tuple[str, Block]]:
        key, block = element
        cursor = cursor_state.read()
        if cursor is None:
            cursor = OrderCursor()
            end.set(window.max_timestamp())
        for b in release_in_order(cursor, early, block):
            yield key, b
        cursor_state.write(cursor)

    def _end(self, key: Any, cursor_state: Any, early: ParkedBlocks) -> Iterator[Any]:
        cursor = cursor_state.read()
        if cursor is not None:
            for b in drain_gaps(cursor, early):
                yield beam.pvalue.TaggedOutput(OrderBlocks.GAPS, (key, b))
        cursor_state.clear()


_OrderBlocksDoFn = keyed_ordering_dofn(
    _OrderBlocks, "_OrderBlocksDoFn", ReadModifyWriteStateSpec("cursor", _OrderCursorCoder()),
    "ordered_list")


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
            | "GlobalWindow" >> beam.WindowInto(GlobalWindows())
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
