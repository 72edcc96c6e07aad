"""The stream's event-time clock, and the ticks that move quiet entities' models with it.

With ``--key-by`` each entity has its own models, and a model's event-time clock moves only
with the records routed to it (:mod:`kernelstream.engine.live.engine`, steps 1-2). An entity
that stops sending would keep its pending events, its open metrics window and its remembered
ids for ever: no ``unlabeled`` row for its last events, no metrics row for its last window,
and their features held in every snapshot.

:class:`QuietClock` is the router's remedy. It follows each entity's clock (the latest
timestamp of its records and ticks) and the *stream clock*: the latest time that
:data:`QUORUM` different entities have reached with their records, in the reader's order (one
merge of every partition: the same records in the same order give the same clock). A quorum,
not the latest timestamp of all: one device whose clock runs a year ahead would otherwise move
every other entity's time a year on and expire their events before their labels come; with
three, no two such devices can. When the stream clock has passed an entity's clock by the
*quiet interval* ``Q = max(label TTL, metrics window)``, the entity's models get a **tick** at
the stream clock: a clock advance with no record (the engine's
:meth:`~kernelstream.engine.live.engine.StreamEngine.process_many`). By then every pending
event of those models is at least a TTL old and expires, and their metrics window has ended
and closes. A second tick one quiet interval later forgets the ids resolved at the first, and
closes the window the expiries were counted in; after it the models hold their learners and
counters only, and the entity leaves the clock until it sends again.

A tick goes into the entity's batch right after the record that moved the stream clock past
the entity's deadline, so where ticks fall depends on the records and their order alone, never
on how a reader's calls cut them. The clock's state (:meth:`QuietClock.encode`) is part of
every snapshot of the stream (under :data:`CLOCK_KEY`, beside the models' states, at the same
cut), so a restored stream ticks exactly where the uninterrupted one would have. A snapshot
without a current clock (written before clocks existed, or by a run that read by partition)
is resumed with a clock rebuilt from its models' states (:meth:`QuietClock.rebuilt`).

Cost: a few comparisons and a dictionary update per routed record, and a heap entry per entity
the clock follows (an entity that sent within the last two quiet intervals).
"""

from __future__ import annotations

import heapq
import json
import struct
from collections.abc import Iterable

__all__ = ["CLOCK_KEY", "QUORUM", "TICKS_PER_QUIET", "QuietClock"]

# The key of the clock's state in a stream snapshot: not a model key (no '#': StreamKey.decode
# refuses it, so readers that walk a snapshot's models skip it).
CLOCK_KEY = "~clock"
# Different entities whose records must reach a time before the stream clock does.
QUORUM = 3
# Ticks an entity gets after its last record before the clock stops following it: the first
# expires its pending events and closes its window, the second forgets the ids the first
# resolved (remembered for a TTL) and closes the window their expiries were counted in.
TICKS_PER_QUIET = 2
_MAGIC = b"KSCK"
_VERSION = 2  # 2: the quorum's entities (version 1, without them, is not read: rebuilt)


class QuietClock:
    """The stream clock and the ticks of quiet entities (module docstring).

    ``quiet_ms``: the quiet interval, ``max(label TTL, metrics window)`` of the stream."""

    __slots__ = ("_due", "_left", "_top", "clock", "now", "quiet_ms")

    def __init__(self, quiet_ms: int) -> None:
        if quiet_ms < 1:
            raise ValueError(f"the quiet interval must be >= 1 ms, got {quiet_ms}")
        self.quiet_ms = int(quiet_ms)
        self.now: int | None = None  # the stream clock (None until QUORUM entities sent)
        self.clock: dict[str, int] = {}  # entity -> its models' clock, as far as records and
        self._left: dict[str, int] = {}  # ticks tell it; entity -> ticks before it is let go
        # (deadline, entity): one entry per followed entity; a deadline may be early (the
        # entity sent since), and is then pushed back when it comes up
        self._due: list[tuple[int, str]] = []
        # the QUORUM entities with the latest records: [timestamp, entity], latest first
        self._top: list[tuple[int, str]] = []

    def __len__(self) -> int:
        """Entities the clock follows."""
        return len(self.clock)

    def record_many(self, entities: list[str], ts: list[int]) -> list[tuple[int, str, int]]:
        """Records of ``entities[k]`` at ``ts[k]`` were routed, in this order: the ticks due,
        ``(k, entity, stream clock)`` for a tick right after record ``k``, in deadline order
        after each record (usually none)."""
        if not ts:
            return []
        q = self.quiet_ms
        clock, left, due, top = self.clock, self._left, self._due, self._top
        now = self.now
        # the common case: no deadline, old or new (each at least min(ts) + q), can be reached
        # in this call (the stream clock stays at or below the latest timestamp), so only the
        # entities' clocks and the quorum move
        last = max(ts) if now is None else max(now, max(ts))
        quiet = (not due or due[0][0] > last) and min(ts) + q > last
        ticks: list[tuple[int, str, int]] = []
        for k, (e, t) in enumerate(zip(entities, ts, strict=True)):
            c = clock.get(e)
            if c is None:
                clock[e] = t
                heapq.heappush(due, (t + q, e))
            elif t > c:
                clock[e] = t
            if len(top) < QUORUM or t > top[-1][0]:  # (else it changes nothing there)
                _join_top(top, e, t)
                if len(top) == QUORUM:
                    now = int(top[-1][0])
            if quiet:
                continue
            left[e] = TICKS_PER_QUIET
            if now is None:
                continue
            while due and due[0][0] <= now:
                _, e2 = heapq.heappop(due)
                c2 = clock[e2]
                if c2 + q > now:  # it sent since this deadline was set
                    heapq.heappush(due, (c2 + q, e2))
                    continue
                ticks.append((k, e2, now))
                n_left = left[e2] - 1
                if n_left:
                    left[e2] = n_left
                    clock[e2] = now
                    heapq.heappush(due, (now + q, e2))
                else:  # quiet for good: nothing left in its models for a tick to do
                    del clock[e2], left[e2]
        if quiet:
            left.update(dict.fromkeys(entities, TICKS_PER_QUIET))
        self.now = now
        return ticks

    @classmethod
    def rebuilt(cls, quiet_ms: int, models: Iterable[tuple[str, int]]) -> QuietClock:
        """A clock for a stream whose snapshot has no current one: each entity's clock is the
        latest of its models' (``(entity, model clock)`` pairs, of the models that still hold
        something a tick would act on), every such entity is followed afresh, and the quorum
        is taken from those clocks."""
        out = cls(quiet_ms)
        for e, c in models:
            if c > out.clock.get(e, c - 1):
                out.clock[e] = c
        for e, c in out.clock.items():
            out._left[e] = TICKS_PER_QUIET
            out._due.append((c + out.quiet_ms, e))
            _join_top(out._top, e, c)
        heapq.heapify(out._due)
        if len(out._top) == QUORUM:
            out.now = int(out._top[-1][0])
        return out

    # -- snapshots ---------------------------------------------------------------------------
    def encode(self) -> bytes:
        """Versioned bytes of the clock (JSON inside, no pickle): what a snapshot keeps."""
        return self.cut().encode()

    def cut(self) -> _ClockCut:
        """The clock at this moment, detached (a snapshot's cut: copies made here, on the
        stream's thread; the bytes made by ``encode()``, on the commit thread)."""
        return _ClockCut(self.quiet_ms, self.now, dict(self.clock), dict(self._left),
                         list(self._due), list(self._top))

    @classmethod
    def decode(cls, data: bytes, quiet_ms: int) -> QuietClock:
        """The clock of :meth:`encode`'s bytes, for a stream whose quiet interval is
        ``quiet_ms`` (a snapshot of another interval is refused: the resume compares the TTL and
        window first, so this means corrupt bytes)."""
        if data[:4] != _MAGIC or len(data) < 9:
            raise ValueError("not a stream clock state")
        if data[4] != _VERSION:
            raise ValueError(f"unsupported stream clock state version {data[4]}")
        (n,) = struct.unpack("<I", data[5:9])
        doc = json.loads(data[9:9 + n])
        if int(doc["quiet_ms"]) != quiet_ms:
            raise ValueError(f"stream clock state of a {doc['quiet_ms']} ms quiet interval, "
                             f"this stream's is {quiet_ms} ms")
        out = cls(quiet_ms)
        out.now = None if doc["now"] is None else int(doc["now"])
        for e, c, left in doc["entities"]:
            out.clock[e] = int(c)
            out._left[e] = int(left)
        out._due = [(int(d), e) for d, e in doc["due"]]
        heapq.heapify(out._due)
        out._top = [(int(t), e) for t, e in doc["top"]]
        return out


def _join_top(top: list[tuple[int, str]], e: str, t: int) -> None:
    """``e``'s record at ``t`` into the quorum's list (latest first, at most :data:`QUORUM`
    entities, ties by entity: one order whatever came first)."""
    for i, (at, who) in enumerate(top):
        if who == e:
            if t <= at:
                return
            top[i] = (t, e)
            break
    else:
        if len(top) == QUORUM:
            if t <= top[-1][0]:
                return
            top.pop()
        top.append((t, e))
    top.sort(reverse=True)


class _ClockCut:
    """:meth:`QuietClock.cut`: the clock's contents at a cut, encoded when asked (the models'
    cuts' interface)."""

    __slots__ = ("clock", "due", "left", "now", "quiet_ms", "top")

    def __init__(self, quiet_ms: int, now: int | None, clock: dict[str, int],
                 left: dict[str, int], due: list[tuple[int, str]],
                 top: list[tuple[int, str]]) -> None:
        self.quiet_ms, self.now, self.clock, self.left = quiet_ms, now, clock, left
        self.due, self.top = due, top

    def encode(self) -> bytes:
        doc = {"quiet_ms": self.quiet_ms, "now": self.now,
               "entities": [[e, c, self.left[e]] for e, c in self.clock.items()],
               # sorted: a valid heap whatever order the entries came in (the same bytes
               # for the same clock, however the reader's calls cut the stream)
               "due": [[d, e] for d, e in sorted(self.due)],
               "top": [[t, e] for t, e in self.top]}
        js = json.dumps(doc, separators=(",", ":")).encode()
        return b"".join((_MAGIC, bytes([_VERSION]), struct.pack("<I", len(js)), js))
