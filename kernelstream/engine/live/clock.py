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

With ``forget_ms`` (``--forget-entities-after``) the clock follows the entity on: once the
stream clock is ``forget_ms`` past the entity's last activity (its last record, as the clock
saw it at the first tick) and both ticks have come, its models get a **forget**: they are
dropped, with their learners, and an entity that sends again starts afresh (from
``--init-from`` when given), as a new entity does. Models of entities that come and go (a key
per session, a device seen once) then no longer pile up in memory and in every snapshot.

A tick goes into the entity's batch right after the record that moved the stream clock past
the entity's deadline, so where ticks fall depends on the records and their order alone, never
on how a reader's calls cut them. The clock's state (:meth:`QuietClock.encode`) is part of
every snapshot of the stream (under :data:`CLOCK_KEY`, beside the models' states, at the same
cut), so a restored stream ticks exactly where the uninterrupted one would have. A snapshot
without a current clock (written before clocks existed, or by a run that read by partition)
is resumed with a clock rebuilt from its models' states (:meth:`QuietClock.rebuilt`).

Cost: a few comparisons and a dictionary update per routed record, and a heap entry per entity
the clock follows (an entity that sent within the last two quiet intervals; with
``forget_ms``, within that long).
"""

from __future__ import annotations

import heapq
import json
import struct
from collections.abc import Iterable

__all__ = ["CLOCK_KEY", "FORGET", "QUORUM", "TICK", "TICKS_PER_QUIET", "QuietClock"]

# The key of the clock's state in a stream snapshot: not a model key (no '#': StreamKey.decode
# refuses it, so readers that walk a snapshot's models skip it).
CLOCK_KEY = "~clock"
# Different entities whose records must reach a time before the stream clock does.
QUORUM = 3
# Ticks an entity gets after its last record before the clock stops following it: the first
# expires its pending events and closes its window, the second forgets the ids the first
# resolved (remembered for a TTL) and closes the window their expiries were counted in.
TICKS_PER_QUIET = 2
# what the clock gives an entity's models after a record (EventBatch kinds, engine.live.batch)
TICK = 3  # a clock advance with no record
FORGET = 4  # drop the models (after both ticks, ``forget_ms`` past the entity's last record)
_MAGIC = b"KSCK"
# 2: the quorum's entities (version 1, without them, is not read: rebuilt); 3: each entity's
# last activity once ticked (for forgetting; version 2 is read: none yet)
_VERSION = 3
_READS = (2, 3)


class QuietClock:
    """The stream clock and the ticks of quiet entities (module docstring).

    ``quiet_ms``: the quiet interval, ``max(label TTL, metrics window)`` of the stream;
    ``forget_ms``: forget an entity's models this long after its last record (None: never)."""

    __slots__ = ("_due", "_left", "_next", "_seen", "_top", "clock", "forget_ms", "now",
                 "quiet_ms")

    def __init__(self, quiet_ms: int, forget_ms: int | None = None) -> None:
        if quiet_ms < 1:
            raise ValueError(f"the quiet interval must be >= 1 ms, got {quiet_ms}")
        if forget_ms is not None and forget_ms < 1:
            raise ValueError(f"forget_ms must be >= 1 ms, got {forget_ms}")
        self.quiet_ms = int(quiet_ms)
        self.forget_ms = None if forget_ms is None else int(forget_ms)
        self.now: int | None = None  # the stream clock (None until QUORUM entities sent)
        self.clock: dict[str, int] = {}  # entity -> its models' clock, as far as records and
        # ticks tell it; entity -> ticks before it is let go (0: both came, a forget is due)
        self._left: dict[str, int] = {}
        # entity -> its last activity, kept at its first tick (the forget's deadline counts
        # from it; the ticks move the entity's clock on)
        self._seen: dict[str, int] = {}
        # (deadline, entity) heap; a deadline may be early (the entity sent since: pushed
        # back when it comes up). Each followed entity has one live entry, _next[e]'s; an
        # entry of another deadline is stale (its entity sent while its forget was due, and
        # is followed afresh from an earlier deadline) and is skipped when it comes up
        self._due: list[tuple[int, str]] = []
        self._next: dict[str, int] = {}
        # the QUORUM entities with the latest records: [timestamp, entity], latest first
        self._top: list[tuple[int, str]] = []

    def __len__(self) -> int:
        """Entities the clock follows."""
        return len(self.clock)

    def record_many(self, entities: list[str], ts: list[int]) -> list[tuple[int, str, int, int]]:
        """Records of ``entities[k]`` at ``ts[k]`` were routed, in this order: what is due,
        ``(k, entity, stream clock, TICK or FORGET)`` right after record ``k``, in deadline
        order after each record (usually nothing)."""
        if not ts:
            return []
        q, forget = self.quiet_ms, self.forget_ms
        clock, left, due, top = self.clock, self._left, self._due, self._top
        now = self.now
        # the common case: no deadline, old or new (each at least min(ts) + q), can be reached
        # in this call (the stream clock stays at or below the latest timestamp), so only the
        # entities' clocks and the quorum move
        last = max(ts) if now is None else max(now, max(ts))
        quiet = (not due or due[0][0] > last) and min(ts) + q > last
        out: list[tuple[int, str, int, int]] = []
        for k, (e, t) in enumerate(zip(entities, ts, strict=True)):
            c = clock.get(e)
            if c is None:
                clock[e] = t
                self._push(t + q, e)
            else:
                if t > c:
                    clock[e] = c = t
                if forget is not None and left.get(e) == 0:  # a forget was due: it sent
                    left[e] = TICKS_PER_QUIET
                    self._push(c + q, e)  # (its forget's entry goes stale)
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
                d, e2 = heapq.heappop(due)
                if self._next.get(e2) == d:
                    del self._next[e2]
                    self._come_up(e2, k, now, out)
        if quiet:
            left.update(dict.fromkeys(entities, TICKS_PER_QUIET))
        self.now = now
        return out

    def _come_up(self, e: str, k: int, now: int, out: list[tuple[int, str, int, int]]) -> None:
        """The live entry of ``e`` came up at stream clock ``now`` (after record ``k``): its
        tick or forget into ``out`` if due, else its entry pushed back."""
        clock, left, q = self.clock, self._left, self.quiet_ms
        n = left[e]
        c = clock[e]
        if n == 0:  # both ticks came: its forget
            assert self.forget_ms is not None
            at = self._seen[e] + self.forget_ms
            if at > now:
                self._push(at, e)
            else:
                out.append((k, e, now, FORGET))
                self._let_go(e)
            return
        if c + q > now:  # it sent since this deadline was set
            self._push(c + q, e)
            return
        if n == TICKS_PER_QUIET:
            self._seen[e] = c
        out.append((k, e, now, TICK))
        n -= 1
        clock[e] = now
        if n:
            left[e] = n
            self._push(now + q, e)
        elif self.forget_ms is None:  # quiet for good: nothing left for a tick to do
            self._let_go(e)
        else:
            left[e] = 0
            at = self._seen[e] + self.forget_ms  # (kept at its first tick)
            if at <= now:
                out.append((k, e, now, FORGET))
                self._let_go(e)
            else:
                self._push(at, e)

    def _push(self, d: int, e: str) -> None:
        """``e``'s live entry is now at ``d`` (any other of its entries goes stale); the heap
        is rebuilt of the live entries once stale ones make up most of it."""
        due = self._due
        heapq.heappush(due, (d, e))
        self._next[e] = d
        if len(due) > 2 * len(self._next) + 64:
            due[:] = sorted((d2, e2) for e2, d2 in self._next.items())  # (sorted: a heap)

    def _let_go(self, e: str) -> None:
        del self.clock[e], self._left[e]
        self._seen.pop(e, None)
        self._next.pop(e, None)

    @classmethod
    def rebuilt(cls, quiet_ms: int, models: Iterable[tuple[str, int]],
                forget_ms: int | None = None) -> QuietClock:
        """A clock for a stream whose snapshot has no current one: each entity's clock is the
        latest of its models' (``(entity, model clock)`` pairs: of the models that still hold
        something a tick would act on, and with ``forget_ms`` of every model, so that the
        entities gone quiet before are forgotten too), every such entity is followed afresh,
        and the quorum is taken from those clocks."""
        out = cls(quiet_ms, forget_ms)
        for e, c in models:
            if c > out.clock.get(e, c - 1):
                out.clock[e] = c
        for e, c in out.clock.items():
            out._left[e] = TICKS_PER_QUIET
            out._due.append((c + out.quiet_ms, e))
            out._next[e] = c + out.quiet_ms
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
        return _ClockCut(self.quiet_ms, self.forget_ms, self.now, dict(self.clock),
                         dict(self._left), dict(self._seen), dict(self._next), list(self._top))

    @classmethod
    def decode(cls, data: bytes, quiet_ms: int, forget_ms: int | None = None) -> QuietClock:
        """The clock of :meth:`encode`'s bytes, for a stream whose quiet interval is
        ``quiet_ms`` and whose forget interval is ``forget_ms``. Bytes of another quiet
        interval are refused (the resume compares the TTL and window first, so this means
        corrupt bytes), and so are those of another forget interval (``--forget-entities-after``
        may change on a resume: the caller rebuilds the clock then)."""
        if data[:4] != _MAGIC or len(data) < 9:
            raise ValueError("not a stream clock state")
        if data[4] not in _READS:
            raise ValueError(f"unsupported stream clock state version {data[4]}")
        (n,) = struct.unpack("<I", data[5:9])
        doc = json.loads(data[9:9 + n])
        if int(doc["quiet_ms"]) != quiet_ms:
            raise ValueError(f"stream clock state of a {doc['quiet_ms']} ms quiet interval, "
                             f"this stream's is {quiet_ms} ms")
        if doc.get("forget_ms") != forget_ms:
            raise ValueError(f"stream clock state of forget interval {doc.get('forget_ms')}, "
                             f"this stream's is {forget_ms}")
        out = cls(quiet_ms, forget_ms)
        out.now = None if doc["now"] is None else int(doc["now"])
        for e, c, left, *seen in doc["entities"]:
            out.clock[e] = int(c)
            out._left[e] = int(left)
            if seen:
                out._seen[e] = int(seen[0])
        for d, e in doc["due"]:  # (older versions' bytes may hold stale entries: the earliest)
            if e in out.clock and int(d) < out._next.get(e, int(d) + 1):
                out._next[e] = int(d)
        out._due = sorted((d, e) for e, d in out._next.items())
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

    __slots__ = ("clock", "forget_ms", "left", "next", "now", "quiet_ms", "seen", "top")

    def __init__(self, quiet_ms: int, forget_ms: int | None, now: int | None,
                 clock: dict[str, int], left: dict[str, int], seen: dict[str, int],
                 nxt: dict[str, int], top: list[tuple[int, str]]) -> None:
        self.quiet_ms, self.forget_ms, self.now, self.clock = quiet_ms, forget_ms, now, clock
        self.left, self.seen, self.next, self.top = left, seen, nxt, top

    def encode(self) -> bytes:
        seen = self.seen
        doc = {"quiet_ms": self.quiet_ms, "forget_ms": self.forget_ms, "now": self.now,
               "entities": [[e, c, self.left[e]] if e not in seen
                            else [e, c, self.left[e], seen[e]] for e, c in self.clock.items()],
               # the live entries, sorted: the same bytes for the same clock, however the
               # reader's calls cut the stream and whatever stale entries its heap holds
               "due": [[d, e] for d, e in sorted((d, e) for e, d in self.next.items())],
               "top": [[t, e] for t, e in self.top]}
        js = json.dumps(doc, separators=(",", ":")).encode()
        return b"".join((_MAGIC, bytes([_VERSION]), struct.pack("<I", len(js)), js))
