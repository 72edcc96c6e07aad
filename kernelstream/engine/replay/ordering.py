"""Restoring a stream's order from blocks that arrive in any order (no Beam).

Online learning is order-sensitive, but a runner may deliver a key's blocks in any order
(different bundles or workers, a reshuffle, retries). A stream's blocks partition its positions
``0, 1, 2, ...``; the key's state keeps a cursor ``next`` (the first position not yet
processed). An arriving block

* that starts at ``next`` is processed at once, followed by every parked block that has
  become contiguous;
* that starts after ``next`` arrived early: it is parked under its start position until the gap
  before it is filled;
* that starts before ``next`` was already processed (a redelivery): it is dropped.

So the memory held for ordering is the blocks that arrived early, i.e. it is bounded by the
disorder of the input and not by the stream length. Nothing here depends on a watermark or on
the stream having an end, so the same logic serves bounded and unbounded input. Where the
parked blocks live is the caller's: :class:`ParkedBlocks` is the interface (Beam's ordered-list
or bag state behind an adapter in ``kernelstream.transforms.replay.ordering``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from kernelstream.engine.replay.blocks import Block

END_OF_STREAM = 1 << 62  # a position past any stream's end (upper bound of range reads)


class ParkedBlocks(Protocol):
    """Blocks parked by start position; ranges are half-open ``[lo, hi)`` of start positions."""

    def add(self, start: int, block: Block) -> None: ...

    def read_range(self, lo: int, hi: int) -> Iterable[Block]: ...  # sorted by start

    def clear_range(self, lo: int, hi: int) -> None: ...


@dataclass
class OrderCursor:
    """Ordering bookkeeping of one key (kept in the key's value state)."""

    next: int = 0  # first stream position not yet processed
    buffered: int = 0  # blocks parked
    buffered_rows: int = 0
    max_buffered: int = 0  # high-water mark of ``buffered`` (the observed disorder)
    duplicates: int = 0  # redelivered blocks dropped

    def to_json(self) -> list[int]:
        return [self.next, self.buffered, self.buffered_rows, self.max_buffered, self.duplicates]

    @classmethod
    def from_json(cls, v: list[int]) -> OrderCursor:
        return cls(*(int(x) for x in v))


def release_in_order(cursor: OrderCursor, early: ParkedBlocks, block: Block) -> Iterator[Block]:
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
        early.add(block.start, block)
        cursor.buffered += 1
        cursor.buffered_rows += block.n
        cursor.max_buffered = max(cursor.max_buffered, cursor.buffered)
        return
    yield block
    cursor.next = block.end
    # Only touch the parked blocks while something is parked: on an in-order stream this costs
    # no state request at all.
    while cursor.buffered > 0:
        found = list(early.read_range(cursor.next, cursor.next + 1))
        if not found:
            break
        early.clear_range(cursor.next, cursor.next + 1)
        cursor.buffered -= len(found)
        cursor.buffered_rows -= sum(b.n for b in found)
        cursor.duplicates += len(found) - 1  # the same block parked twice
        nxt = found[0]
        yield nxt
        cursor.next = nxt.end


def drain_gaps(cursor: OrderCursor, early: ParkedBlocks) -> list[Block]:
    """At the end of a stream: the parked blocks that never became contiguous (missing input),
    sorted by position. Clears them from the state."""
    if cursor.buffered <= 0:
        return []
    left = list(early.read_range(cursor.next, END_OF_STREAM))
    early.clear_range(cursor.next, END_OF_STREAM)
    cursor.buffered = cursor.buffered_rows = 0
    return left
