"""The state of one live-stream model (:mod:`kernelstream.engine.live.engine`) and its bytes.

Encoding (no pickle), version 2::

    b"KSEV" | u8 version | u32 n | JSON of the scalars (n bytes)
           | u32 m | arrays (m bytes, little-endian, shapes in the JSON)
           | learner state as .npz (``learners.base.state_to_bytes``; empty: no learner yet)

The arrays are the pending events' features, scores, predicted labels, event times and
prediction positions, the open metrics window's losses and delays, and the remembered
(resolved) event ids: their forget times (i8), statuses (u1), UTF-8 lengths (i4) and bytes,
raw, in that order. (Version 1 kept the remembered ids in the JSON, which made a snapshot of
an hour's ids cost seconds; it is still read.)
The expiry heap is rebuilt from the pending events: its pop order, (deadline, position), is a
total order, so a decoded state expires events exactly as the original would.

The remembered ids are most of a long-lived model's bytes (an hour of ids: millions) and
change only at the ends (new ids at the back, forgotten ones off the front; an id's entry
never changes while it is remembered). So they are kept column by column in segments
(:class:`Remembered`), and each id is encoded once: a cut seals the segment of the ids
remembered since the previous cut into an :class:`IdChunk`, and the bytes of a snapshot are
the chunks' bytes joined, minus the ids forgotten since (the same bytes as encoding them all
again). The metrics window's losses and delays, which only grow until it closes, are encoded
a cut's worth at a time in the same way.
"""

from __future__ import annotations

import heapq
import json
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from kernelstream import learners
from kernelstream.engine.noskill import NoSkill
from kernelstream.learners.base import Learner, state_from_bytes, state_to_bytes
from kernelstream.sparse import CSR

MAGIC = b"KSEV"
VERSION = 2
SPARSE_VERSION = 3  # pending features as CSR rows (written only by sparse streams)
READS = (1, 2, 3)  # versions decode_state reads
# status of a resolved event id: labelled, expired, or its event refused by the learner
LABELLED, EXPIRED, REJECTED = 1, 2, 3


class Pending(NamedTuple):
    """An event scored on arrival, waiting for its label."""

    x: np.ndarray | CSR  # a 1-row CSR in a sparse stream
    score: float
    predicted: float
    event_time_ms: int
    position: int


@dataclass(slots=True)
class Window:
    """Accumulators of the open metrics window ``[start, start + W)``."""

    start: int | None = None
    records: int = 0
    predictions: int = 0
    outcomes: int = 0
    mistakes: int = 0
    unlabeled: int = 0
    dead_letters: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    delays: list[int] = field(default_factory=list)
    # the encoding's cache: losses and delays [0, coded) as arrays, a chunk per cut (both
    # lists only grow until the window closes; a window can hold a minute of outcomes)
    coded: int = 0
    coded_losses: list[np.ndarray] = field(default_factory=list)
    coded_delays: list[np.ndarray] = field(default_factory=list)

    def reset(self, start: int) -> None:
        self.start = start
        self.records = self.predictions = self.outcomes = self.mistakes = 0
        self.unlabeled = self.dead_letters = 0
        self.seconds = 0.0
        self.losses = []
        self.delays = []
        self.coded = 0
        self.coded_losses = []
        self.coded_delays = []


class IdChunk(NamedTuple):
    """Remembered ids in the encoding's columns: forget times, statuses, UTF-8 lengths (and
    their running ends, to cut the bytes at an entry) and bytes."""

    at: np.ndarray  # <i8
    status: np.ndarray  # u1
    lens: np.ndarray  # <i4
    ends: np.ndarray  # cumulative byte lengths (int64)
    raw: bytes

    @classmethod
    def of(cls, ats: list[int], ids: list[str], status: bytearray) -> IdChunk:
        text = "".join(ids)
        if text.isascii():  # one byte per character: no encoding per id
            raw, lens = text.encode("ascii"), np.fromiter(map(len, ids), "<i4", len(ids))
        else:
            parts = [e.encode("utf-8") for e in ids]
            raw, lens = b"".join(parts), np.fromiter(map(len, parts), "<i4", len(ids))
        return cls(np.array(ats, "<i8"), np.frombuffer(bytes(status), "u1"), lens,
                   np.cumsum(lens, dtype=np.int64), raw)

    def tail(self, k: int) -> tuple[Any, Any, Any, Any]:
        """The columns from entry ``k`` of the chunk on (views, no copies)."""
        if k == 0:
            return self.at, self.status, self.lens, self.raw
        return (self.at[k:], self.status[k:], self.lens[k:],
                memoryview(self.raw)[int(self.ends[k - 1]):])


class _Segment:
    """Consecutive remembered ids: ``ids[head:]`` are still remembered. Open (the last one),
    it grows by lists; sealed by a cut, its forget times are ``chunk.at`` (an array, sought
    by bisection) and ``chunk`` holds its encoding."""

    __slots__ = ("ats", "chunk", "head", "ids", "status")

    def __init__(self, ats: list[int] | None = None, ids: list[str] | None = None,
                 status: bytearray | None = None) -> None:
        self.ats: list[int] = [] if ats is None else ats
        self.ids: list[str] = [] if ids is None else ids
        self.status = bytearray() if status is None else status
        self.head = 0
        self.chunk: IdChunk | None = None


class Remembered:
    """The ids a model remembers (labelled or expired events, for a TTL), in the order they
    are forgotten: ``(forget at, id)`` with a status each, appended at the back (forget times
    never decrease: the clock plus the TTL), forgotten off the front. Kept by segments, one
    per snapshot interval, each encoded once (:meth:`cut`), so a snapshot does not encode an
    hour of ids again, nor does a cut copy them; reads as its ``(forget at, id)`` pairs."""

    __slots__ = ("n", "next_at", "segs")

    def __init__(self) -> None:
        self.segs: list[_Segment] = [_Segment()]
        self.n = 0
        self.next_at: float = math.inf  # forget time of the first id (inf: none)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[int, str]]:
        for s in self.segs:
            ats = s.chunk.at.tolist() if s.chunk is not None else s.ats
            yield from zip(ats[s.head:], s.ids[s.head:], strict=True)

    def statuses(self) -> list[int]:
        return [st for s in self.segs for st in s.status[s.head:]]

    def append(self, at: int, eid: str, status: int) -> None:
        s = self.segs[-1]
        s.ats.append(at)
        s.ids.append(eid)
        s.status.append(status)
        if not self.n:
            self.next_at = at
        self.n += 1

    def extend(self, ats: list[int], ids: list[str], status: int) -> None:
        if not ids:
            return
        s = self.segs[-1]
        s.ats.extend(ats)
        s.ids.extend(ids)
        s.status.extend(bytes((status,)) * len(ids))
        if not self.n:
            self.next_at = ats[0]
        self.n += len(ids)

    def forget(self, clock: int) -> list[str]:
        """Forget the ids whose forget time is at or before ``clock``; they are returned."""
        out: list[str] = []
        segs = self.segs
        while self.n and self.next_at <= clock:
            s = segs[0]
            if s.chunk is not None:
                k = int(np.searchsorted(s.chunk.at, clock, side="right"))
            else:
                k, ats = s.head, s.ats
                while k < len(ats) and ats[k] <= clock:
                    k += 1
            out.extend(s.ids[s.head:k])
            self.n -= k - s.head
            s.head = k
            if k == len(s.ids):  # the segment is done
                if len(segs) > 1:
                    del segs[0]
                else:
                    segs[0] = _Segment()
            s = segs[0]
            if self.n:
                self.next_at = (int(s.chunk.at[s.head]) if s.chunk is not None
                                else s.ats[s.head])
            else:
                self.next_at = math.inf
        return out

    def cut(self) -> tuple[tuple[IdChunk, int], ...]:
        """Seal the open segment (encode its ids, once) and return every segment's chunk with
        its first id still remembered: the remembered ids of this moment, encoded."""
        s = self.segs[-1]
        if len(s.ids) > s.head:
            s.chunk = IdChunk.of(s.ats, s.ids, s.status)
            s.ats = []  # its forget times are the chunk's now
            self.segs.append(_Segment())
        elif s.head:  # an open segment whose ids are all forgotten: start afresh
            self.segs[-1] = _Segment()
        return tuple((t.chunk, t.head) for t in self.segs if t.chunk is not None
                     and t.head < len(t.ids))


@dataclass(slots=True, eq=False)
class ModelState:
    """Everything one model keeps between records (see ``events`` for the semantics)."""

    key: str
    config: str
    entity: str | None
    learner: Learner | None = None
    clock_ms: int | None = None  # max record timestamp seen: the model's event time
    position: int = 0  # predictions made (the next prediction's position)
    learnt: int = 0  # outcomes (the next outcome's learn position)
    records: int = 0  # records processed (not skipped)
    mistakes: int = 0
    unlabeled: int = 0
    dead_letters: int = 0
    learn_rejected: int = 0  # labels of pending events the learner refused
    skipped: int = 0  # records at or before ``applied`` (replayed after a restore)
    loss_total: int = 0  # exact sum of the closed windows' losses (metrics.exact_add)
    seconds: float = 0.0  # wall clock inside learner calls
    noskill: NoSkill = field(default_factory=NoSkill)  # every outcome so far, in order
    pending: dict[str, Pending] = field(default_factory=dict)
    expiry: list[tuple[int, int, str]] = field(default_factory=list)  # heap, may hold stale
    # event id -> LABELLED | EXPIRED | REJECTED
    resolved: dict[str, int] = field(default_factory=dict)
    forget: Remembered = field(default_factory=Remembered)  # (forget at, id), in order
    applied: dict[tuple[str, int], int] = field(default_factory=dict)  # last offset processed
    window: Window = field(default_factory=Window)
    # where its first record was read, "topic:partition:offset", with
    # --forget-entities-after (None otherwise, or before it was on): its rows' ids carry it,
    # so a model of a key forgotten before never repeats the forgotten one's row ids
    born: str | None = None
    # (records, skipped, pending) when a run restored this state from its snapshot; not
    # encoded: the run's accounting counts what it adds (engine.live.accounting)
    restored: tuple[int, int, int] | None = None

    @property
    def rid(self) -> str:
        """What its rows' ``row_id`` s start with: the key, and where it was born if known."""
        return self.key if self.born is None else f"{self.key}~{self.born}"

    def become(self, other: ModelState) -> None:
        """Take ``other``'s contents, in place (a forgotten model renewed: its holders, Beam
        state and the snapshot's cut among them, keep this object)."""
        for name in self.__slots__:
            setattr(self, name, getattr(other, name))

    def remember(self, at: int, eid: str, status: int) -> None:
        """Remember ``eid`` (``status``: LABELLED, EXPIRED, REJECTED) until the clock reaches
        ``at``."""
        self.resolved[eid] = status
        self.forget.append(at, eid, status)

    def remember_many(self, ats: list[int], ids: list[str], status: int) -> None:
        """:meth:`remember` of every ``(ats[j], ids[j])`` (ids not remembered now, distinct),
        in that order."""
        self.resolved.update(dict.fromkeys(ids, status))
        self.forget.extend(ats, ids, status)

    def forget_until(self, clock: int) -> None:
        """Forget the ids remembered until ``clock`` or before."""
        if self.forget.next_at <= clock:
            resolved = self.resolved
            for eid in self.forget.forget(clock):
                del resolved[eid]

    def add_seconds(self, dt: float) -> None:
        self.seconds += dt
        self.window.seconds += dt

    def counts(self) -> dict[str, int]:
        """Counters that add up: ``predictions == outcomes + unlabeled + pending +
        learn_rejected``; every processed record gave a prediction, outcome or dead letter."""
        return {"records": self.records, "skipped": self.skipped, "predictions": self.position,
                "outcomes": self.learnt, "unlabeled": self.unlabeled,
                "pending": len(self.pending), "learn_rejected": self.learn_rejected,
                "dead_letters": self.dead_letters, "mistakes": self.mistakes}


class Forgotten(NamedTuple):
    """A model dropped by its entity's forget (``--forget-entities-after``,
    :mod:`kernelstream.engine.live.clock`), as the snapshot and the accounting need it: what
    it had counted when it went (``counts``: :meth:`ModelState.counts`; ``restored``: its
    ``(records, skipped, pending)`` when this run restored it; ``seconds`` in learner calls).
    As a snapshot's state it is a tombstone: no bytes (:meth:`encode`), the key leaves the
    snapshot."""

    counts: dict[str, int]
    restored: tuple[int, int, int] | None
    seconds: float

    def cut(self) -> Forgotten:
        return self

    def encode(self) -> bytes:
        return b""


def encode_state(st: ModelState) -> bytes:
    """``st`` as bytes (module docstring)."""
    return cut_state(st).encode()


class StateCut(NamedTuple):
    """A model's state at one moment, detached from the live one: the learner already as
    bytes, the remembered ids as encoded chunks (``ids``: each with its first id still
    remembered), the rest as copies of its containers (``dict.copy`` and friends: ~20 ns an
    entry). :meth:`encode` may then run on another thread while the live state goes on
    changing; a snapshot takes its cut between records and encodes it off the stream's
    thread."""

    st: ModelState
    learner: bytes
    ids: tuple[tuple[IdChunk, int], ...]

    def encode(self) -> bytes:
        return _encode(self.st, self.learner, self.ids)


def cut_state(st: ModelState) -> StateCut:
    """A :class:`StateCut` of ``st`` (see there). Pending events' feature rows are never
    changed once stored, so they are shared, not copied. The ids remembered since the last
    cut are encoded here (once each)."""
    ids = st.forget.cut()
    w = st.window
    if len(w.losses) > w.coded:
        w.coded_losses.append(np.array(w.losses[w.coded:], "<f8"))
        w.coded_delays.append(np.array(w.delays[w.coded:], "<i8"))
        w.coded = len(w.losses)
    copy = ModelState(
        st.key, st.config, st.entity, clock_ms=st.clock_ms, position=st.position,
        learnt=st.learnt, records=st.records, mistakes=st.mistakes, unlabeled=st.unlabeled,
        dead_letters=st.dead_letters, learn_rejected=st.learn_rejected, skipped=st.skipped,
        loss_total=st.loss_total, seconds=st.seconds, noskill=replace(st.noskill),
        pending=st.pending.copy(),
        applied=st.applied.copy(),
        window=Window(w.start, w.records, w.predictions, w.outcomes, w.mistakes, w.unlabeled,
                      w.dead_letters, w.seconds, coded=w.coded,
                      coded_losses=w.coded_losses.copy(), coded_delays=w.coded_delays.copy()),
        born=st.born)
    blob = b"" if st.learner is None else state_to_bytes(st.learner.get_state())
    return StateCut(copy, blob, ids)


def _encode(st: ModelState, blob: bytes, chunks: tuple[tuple[IdChunk, int], ...]) -> bytes:
    ids = list(st.pending)
    evs = list(st.pending.values())
    n = len(evs)
    sparse = n > 0 and isinstance(evs[0].x, CSR)
    d = 0 if n == 0 else int(evs[0].x.shape[-1])
    w = st.window
    meta = {
        "key": st.key, "config": st.config, "entity": st.entity, "clock": st.clock_ms,
        "counts": [st.position, st.learnt, st.records, st.mistakes, st.unlabeled,
                   st.dead_letters, st.learn_rejected, st.skipped],
        "loss_total": str(st.loss_total), "seconds": st.seconds,
        "noskill": st.noskill.to_json(),
        "pending": ids, "n": n, "d": d,
        "n_resolved": sum(len(c.at) - head for c, head in chunks),
        "applied": [[t, p, o] for (t, p), o in st.applied.items()],
        "window": [w.start, w.records, w.predictions, w.outcomes, w.mistakes, w.unlabeled,
                   w.dead_letters, w.seconds, w.coded],
    }
    if st.born is not None:  # (absent otherwise: the bytes of the states before it)
        meta["born"] = st.born
    parts: list[Any] = []  # bytes and arrays, joined as buffers
    if n:
        if sparse:  # nnz per row, then all column indices, then all values
            rows = CSR.vstack([e.x for e in evs], d)  # type: ignore[misc]
            parts.append(np.diff(rows.indptr).astype("<i8").tobytes())
            parts.append(rows.indices.astype("<i8", copy=False).tobytes())
            parts.append(rows.data.astype("<f8", copy=False).tobytes())
        else:
            dense = [np.asarray(e.x) for e in evs]  # a dense stream's events hold arrays
            parts.append(np.stack(dense).astype("<f8", copy=False).tobytes())
        parts.append(np.array([e.score for e in evs], "<f8").tobytes())
        parts.append(np.array([e.predicted for e in evs], "<f8").tobytes())
        parts.append(np.array([e.event_time_ms for e in evs], "<i8").tobytes())
        parts.append(np.array([e.position for e in evs], "<i8").tobytes())
    parts.extend(w.coded_losses)  # the window's losses and delays, as cut
    parts.extend(w.coded_delays)
    if chunks:  # every remembered id: the chunks' columns, in turn
        cols = [c.tail(head) for c, head in chunks]
        for j in range(4):
            parts.extend(c[j] for c in cols)
    size = sum(memoryview(p).nbytes for p in parts)
    js = json.dumps(meta, separators=(",", ":")).encode()
    version = SPARSE_VERSION if sparse else VERSION  # old builds refuse sparse states
    return b"".join((MAGIC, bytes([version]), struct.pack("<I", len(js)), js,
                     struct.pack("<I", size), *parts, blob))


def state_clock(data: bytes) -> tuple[str | None, int | None, bool]:
    """``(entity, clock, busy)`` of :func:`encode_state` bytes, from their JSON alone (no array
    decoded): ``busy``, whether the model holds anything a clock tick acts on (pending events,
    remembered ids, a window that saw records or expiries)."""
    if data[:4] != MAGIC or data[4] not in READS:
        raise ValueError("not a kernelstream stream-model state")
    (nj,) = struct.unpack_from("<I", data, 5)
    meta: dict[str, Any] = json.loads(bytes(data[9 : 9 + nj]))
    w = meta["window"]
    resolved = meta.get("n_resolved", len(meta.get("resolved") or ()))  # version 1: a list
    busy = bool(meta["n"] or resolved or w[1] or w[5])
    return meta.get("entity"), meta.get("clock"), busy


def decode_state(data: bytes, ttl_ms: int) -> ModelState:
    """The :class:`ModelState` of :func:`encode_state` bytes (``ttl_ms`` rebuilds the expiry
    heap's deadlines)."""
    data = bytes(data)
    if data[:4] != MAGIC:
        raise ValueError("not a kernelstream stream-model state")
    version = data[4]
    if version not in READS:
        raise ValueError(f"unsupported stream-model state version {version} "
                         f"(this build reads {', '.join(map(str, READS))})")
    (nj,) = struct.unpack_from("<I", data, 5)
    meta: dict[str, Any] = json.loads(data[9 : 9 + nj])
    at = 9 + nj
    (na,) = struct.unpack_from("<I", data, at)
    arrays, blob = memoryview(data)[at + 4 : at + 4 + na], data[at + 4 + na :]
    off = 0

    def take(dtype: str, count: int) -> np.ndarray:
        nonlocal off
        a = np.frombuffer(arrays, dtype, count, off).astype(dtype[1:])  # own, native copy
        off += a.nbytes
        return a

    n, d = int(meta["n"]), int(meta["d"])
    st = ModelState(meta["key"], meta["config"], meta["entity"])
    if n:
        X: Any
        if version == SPARSE_VERSION:
            counts = take("<i8", n)
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            nnz = int(indptr[-1])
            rows = CSR(indptr, take("<i8", nnz), take("<f8", nnz), d)
            X = [rows.rows(i, i + 1) for i in range(n)]
        else:
            X = take("<f8", n * d).reshape(n, d)
        score, pred = take("<f8", n).tolist(), take("<f8", n).tolist()
        ts, pos = take("<i8", n).tolist(), take("<i8", n).tolist()
        for i, eid in enumerate(meta["pending"]):
            st.pending[eid] = Pending(X[i], score[i], pred[i], ts[i], pos[i])
        st.expiry = [(ts[i] + ttl_ms, pos[i], eid) for i, eid in enumerate(meta["pending"])]
        heapq.heapify(st.expiry)
    win = meta["window"]
    k = int(win[8])
    records, predictions, outcomes, mistakes, unlabeled, dead_letters = map(int, win[1:7])
    st.window = Window(win[0], records, predictions, outcomes, mistakes, unlabeled,
                       dead_letters, float(win[7]), take("<f8", k).tolist(),
                       take("<i8", k).tolist())
    st.clock_ms = meta["clock"]
    st.born = meta.get("born")
    (st.position, st.learnt, st.records, st.mistakes, st.unlabeled, st.dead_letters,
     st.learn_rejected, st.skipped) = map(int, meta["counts"])
    st.loss_total, st.seconds = int(meta["loss_total"]), float(meta["seconds"])
    # states saved before the no-skill baseline have none: it counts from the restore on
    st.noskill = NoSkill.from_json(meta.get("noskill"))
    if version == 1:
        for eid, status, forget_at in meta["resolved"]:
            st.remember(int(forget_at), eid, int(status))
    elif m := int(meta["n_resolved"]):
        at, status = take("<i8", m).tolist(), take("|u1", m).tolist()
        ends = np.cumsum(take("<i4", m)).tolist()
        raw = bytes(arrays[off:off + (ends[-1] if ends else 0)])
        ids = [raw[a:b].decode("utf-8") for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        st.resolved = dict(zip(ids, status, strict=True))
        st.forget.segs[0] = _Segment(at, ids, bytearray(status))
        st.forget.n = len(ids)
        st.forget.next_at = at[0]
    st.applied = {(t, int(p)): int(o) for t, p, o in meta["applied"]}
    if blob:
        st.learner = learners.from_state(state_from_bytes(blob))
    return st
