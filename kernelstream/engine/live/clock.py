"""The stream's event-time clock, and the ticks that move quiet entities' models with it.

With ``--key-by`` each entity has its own models, and a model's event-time clock moves only
with the records routed to it (:mod:`kernelstream.engine.live.engine`, steps 1-2). An entity
that stops sending would keep its pending events, its open metrics window and its remembered
ids for ever: a key per session or per device seen once makes that state grow without bound.

:class:`QuietClock` is the router's remedy. It follows the *stream clock*, the latest timestamp
of the records routed so far in the reader's order (one merge of every partition: the same
records in the same order give the same clock), and each entity's own clock. When the stream
clock has passed an entity's clock by the *quiet interval* ``Q = max(label TTL, metrics
window)``, the entity's models get a **tick** at the stream clock: a clock advance with no
record (the engine's :meth:`~kernelstream.engine.live.engine.StreamEngine.process_many`). By
then every pending event of those models is at least a TTL old and expires, and their metrics
window has ended and closes. A second tick one quiet interval later forgets the ids resolved
at the first, and closes the window the expiries were counted in; after it the models hold
their learners and counters only, and the entity leaves the clock until it sends again.

A tick goes into the entity's batch right after the record that moved the stream clock past
the entity's deadline, so where ticks fall depends on the records and their order alone, never
on how a reader's calls cut them. The clock's state (:meth:`QuietClock.encode`) is part of
every snapshot of the stream (under :data:`CLOCK_KEY`, beside the models' states, at the same
cut), so a restored stream ticks exactly where the uninterrupted one would have.

Cost: one dictionary update per routed record, and a heap entry per entity the clock follows
(an entity that sent within the last two quiet intervals).
"""

from __future__ import annotations

import heapq
import json
import struct

__all__ = ["CLOCK_KEY", "TICKS_PER_QUIET", "QuietClock"]

# The key of the clock's state in a stream snapshot: not a model key (no '#': StreamKey.decode
# refuses it, so readers that walk a snapshot's models skip it).
CLOCK_KEY = "~clock"
# Ticks an entity gets after its last record before the clock stops following it: the first
# expires its pending events and closes its window, the second forgets the ids the first
# resolved (remembered for a TTL) and closes the window their expiries were counted in.
TICKS_PER_QUIET = 2
_MAGIC = b"KSCK"
_VERSION = 1


class QuietClock:
    """The stream clock and the ticks of quiet entities (module docstring).

    ``quiet_ms``: the quiet interval, ``max(label TTL, metrics window)`` of the stream."""

    __slots__ = ("_due", "_left", "clock", "now", "quiet_ms")

    def __init__(self, quiet_ms: int) -> None:
        if quiet_ms < 1:
            raise ValueError(f"the quiet interval must be >= 1 ms, got {quiet_ms}")
        self.quiet_ms = int(quiet_ms)
        self.now: int | None = None  # the stream clock: the latest routed record's timestamp
        self.clock: dict[str, int] = {}  # entity -> its models' clock, as far as records and
        self._left: dict[str, int] = {}  # ticks tell it; entity -> ticks before it is let go
        # (deadline, entity): one entry per followed entity; a deadline may be early (the
        # entity sent since), and is then pushed back when it comes up
        self._due: list[tuple[int, str]] = []

    def __len__(self) -> int:
        """Entities the clock follows."""
        return len(self.clock)

    def record(self, entity: str, ts: int) -> list[tuple[str, int]]:
        """A record of ``entity`` at ``ts`` was routed: the ticks due after it, ``(entity,
        stream clock)`` in deadline order (usually none)."""
        return [(e, t) for _, e, t in self.record_many([entity], [ts])]

    def record_many(self, entities: list[str], ts: list[int]) -> list[tuple[int, str, int]]:
        """:meth:`record` of each ``(entities[k], ts[k])`` in order: the ticks due,
        ``(k, entity, stream clock)`` for a tick right after record ``k``, in deadline order
        after each record."""
        if not ts:
            return []
        q = self.quiet_ms
        clock, left, due = self.clock, self._left, self._due
        now = self.now
        last = max(ts) if now is None else max(now, max(ts))
        # the common case: no deadline, old or new (each at least min(ts) + q), is reached in
        # this call, so only the entities' clocks move
        quiet = (not due or due[0][0] > last) and min(ts) + q > last
        ticks: list[tuple[int, str, int]] = []
        for k, (e, t) in enumerate(zip(entities, ts, strict=True)):
            c = clock.get(e)
            if c is None:
                clock[e] = t
                heapq.heappush(due, (t + q, e))
            elif t > c:
                clock[e] = t
            if quiet:
                continue
            if now is None or t > now:
                now = t
            left[e] = TICKS_PER_QUIET
            while due[0][0] <= now:
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
                if not due:
                    break
        if quiet:
            left.update(dict.fromkeys(entities, TICKS_PER_QUIET))
            now = last
        self.now = now
        return ticks

    # -- snapshots ---------------------------------------------------------------------------
    def encode(self) -> bytes:
        """Versioned bytes of the clock (JSON inside, no pickle): what a snapshot keeps."""
        doc = {"quiet_ms": self.quiet_ms, "now": self.now,
               "entities": [[e, c, self._left[e]] for e, c in self.clock.items()],
               # sorted: a valid heap whatever order the entries came in (the same bytes
               # for the same clock, however the reader's calls cut the stream)
               "due": [[d, e] for d, e in sorted(self._due)]}
        js = json.dumps(doc, separators=(",", ":")).encode()
        return b"".join((_MAGIC, bytes([_VERSION]), struct.pack("<I", len(js)), js))

    def cut(self) -> _ClockCut:
        """The clock's bytes at this moment (a snapshot's cut; encoded at once: the clock
        follows a few entities per model, and a cut must not change with it)."""
        return _ClockCut(self.encode())

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
        return out


class _ClockCut:
    """:meth:`QuietClock.cut`: bytes ready for the snapshot (the models' cuts' interface)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def encode(self) -> bytes:
        return self.data
