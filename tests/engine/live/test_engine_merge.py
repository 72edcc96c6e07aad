"""The partition-group merge: streamed (GroupMerger) equals the one-go merge (merged)."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernelstream.engine.live.merge import GroupMerger, merged
from kernelstream.engine.live.records import SourceRecord


def _partition(topic: str, p: int, stamps: list[int], gaps: list[int]) -> list[SourceRecord]:
    """Records in offset order (with offset gaps, as compaction or transaction markers leave),
    timestamps as given (not monotone: producers set them)."""
    out, off = [], 0
    for ts, gap in zip(stamps, gaps, strict=True):
        off += gap
        out.append(SourceRecord(topic, p, off, ts, f"{topic}-{off}".encode(), b"v"))
        off += 1
    return out


@st.composite
def groups(draw: st.DrawFn) -> list[list[SourceRecord]]:
    k = draw(st.integers(1, 4))
    parts = []
    for i in range(k):
        n = draw(st.integers(0, 25))
        # few distinct timestamps: ties between topics and within a partition are common
        stamps = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
        gaps = draw(st.lists(st.sampled_from([0, 0, 0, 1, 3]), min_size=n, max_size=n))
        parts.append(_partition(f"topic{i}", 7, stamps, gaps))
    return parts


def _stream(parts: list[list[SourceRecord]], rng: random.Random, truthful: bool,
            limit: int | None) -> list[SourceRecord]:
    """Feed ``parts`` to a GroupMerger in random fetch batches of random partitions; call
    ready() after every batch (caught up = everything of that partition fetched, when
    ``truthful``; never otherwise), drain at the end."""
    tps = [(f"topic{i}", 7) for i in range(len(parts))]
    m = GroupMerger(tps)
    pos = [0] * len(parts)
    out: list[SourceRecord] = []
    while any(pos[i] < len(p) for i, p in enumerate(parts)):
        i = rng.choice([i for i, p in enumerate(parts) if pos[i] < len(p)])
        n = rng.randint(1, 6)
        batch = parts[i][pos[i]:pos[i] + n]
        if rng.random() < 0.2 and pos[i] > 0:  # a re-fetch overlapping what was added
            batch = parts[i][max(0, pos[i] - 2):pos[i] + n]
        m.add(batch)
        pos[i] += n
        caught = [tps[j] for j, p in enumerate(parts) if pos[j] >= len(p)] if truthful else []
        out += m.ready(caught, limit=limit)
    if truthful:
        out += m.ready(tps)
    out += m.drain()
    assert len(m) == 0
    return out


@given(groups(), st.randoms(use_true_random=False), st.booleans(),
       st.one_of(st.none(), st.integers(1, 3)))
def test_streamed_merge_equals_merged(parts: list[list[SourceRecord]], rng: random.Random,
                                      truthful: bool, limit: int | None) -> None:
    assert _stream(parts, rng, truthful, limit) == merged(parts)


@given(groups())
def test_merged_keeps_partition_order_and_is_a_permutation(
        parts: list[list[SourceRecord]]) -> None:
    out = merged(parts)
    assert sorted(out) == sorted(r for p in parts for r in p)
    for i, p in enumerate(parts):
        assert [r for r in out if r.topic == f"topic{i}"] == p


def test_topic_index_breaks_ties() -> None:
    a = _partition("a", 0, [0, 0], [0, 0])
    b = _partition("b", 0, [0], [0])
    # equal timestamps: the first topic's records first, whatever the topic names
    assert merged([a, b]) == [*a, *b]
    assert merged([b, a]) == [*b, *a]


def test_merge_order_and_hold() -> None:
    ev = _partition("events", 0, [5, 1, 9], [0, 0, 0])  # not monotone: 5 then 1
    lab = _partition("labels", 0, [5, 6], [0, 0])
    # heads merge: events@5 (index 0) before labels@5, then events@1 (its partition's order)
    assert [(r.topic, r.offset) for r in merged([ev, lab])] == [
        ("events", 0), ("events", 1), ("labels", 0), ("labels", 1), ("events", 2)]
    m = GroupMerger([("events", 0), ("labels", 0)])
    m.add(ev)
    assert m.ready() == []  # labels/0 empty and not caught up: its next record may be older
    assert m.next_offsets == [None, None]
    assert m.ready([("labels", 0)]) == ev
    assert m.next_offsets == [3, None]
    m.add(lab)
    assert m.ready() == []  # events/0 now empty, not caught up
    assert m.ready([("events", 0)], limit=1) == lab[:1]
    assert len(m) == 1 and m.buffered(("labels", 0)) == 1
    assert m.drain() == lab[1:]


def test_single_partition_passes_through() -> None:
    recs = _partition("t", 3, [9, 1, 4], [0, 2, 0])
    m = GroupMerger([("t", 3)])
    m.add(recs[:2])
    assert m.ready() == recs[:2]  # no hold without other partitions
    m.add(recs)  # the first two again (a re-fetch): ignored
    assert m.ready() == recs[2:]
    assert m.next_offsets == [recs[-1].offset + 1]


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 8)), max_size=12))
def test_one_partition_list_add_equals_record_by_record(fetches: list[tuple[int, int]]) -> None:
    """A group of one partition takes a fetched list at once (GroupMerger._add_one); re-fetches
    after seeks overlap what is buffered, and a list out of offset order or with a foreign
    record goes the general way: the buffer, the releases and the errors are the same as
    adding the same records one by one."""
    recs = _partition("t", 0, list(range(40)), [0, 1, 0, 0, 2] * 8)
    fast, slow = GroupMerger([("t", 0)]), GroupMerger([("t", 0)])
    for i, (start, n) in enumerate(fetches):
        batch = recs[start:start + n]
        if i % 5 == 3:
            batch = batch[:-2] + batch[-1:] + batch[-2:-1]  # out of offset order at its end
        fast.add(list(batch))
        slow.add(iter(batch))
        assert len(fast) == len(slow)
        if i % 3 == 2:
            assert fast.ready(limit=2) == slow.ready(limit=2)
    assert fast.drain() == slow.drain()
    assert fast.next_offsets == slow.next_offsets
    foreign = [SourceRecord("t", 0, 500, 0, b"k", b"v"), SourceRecord("t", 1, 99, 0, b"k", b"v")]
    for m, batch in ((fast, list(foreign)), (slow, iter(foreign))):
        with pytest.raises(ValueError, match="not in the group"):
            m.add(batch)


def test_bad_groups_and_records() -> None:
    with pytest.raises(ValueError, match="at least one"):
        GroupMerger([])
    with pytest.raises(ValueError, match="twice"):
        GroupMerger([("a", 0), ("a", 0)])
    m = GroupMerger([("a", 0)])
    with pytest.raises(ValueError, match="not in the group"):
        m.add(_partition("a", 1, [0], [0]))
    m.add(_partition("a", 0, [0, 1], [0, 0]))
    m.clear()
    assert len(m) == 0 and m.drain() == [] and m.next_offsets == [None]
    m.add(_partition("a", 0, [0], [0]))  # after clear() the same offsets are taken again
    assert len(m) == 1


def test_merge_module_does_not_import_beam() -> None:
    code = "import sys, kernelstream.engine.live.merge; print('apache_beam' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
