"""``--forget-entities-after``: a ``--key-by`` entity quiet for that long (by the stream clock,
``kernelstream.engine.live.clock``) has its models dropped after its two ticks, and starts
afresh if it sends again; wherever the reader's calls or a restart cut the stream, the rows,
the states and the clock are the uninterrupted stream's."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from test_quiet_clock import (
    _one_off_stream,
    joined,
    quiet_u1,
    rec,
    rows,
    spec,
    state_bytes,
)

from kernelstream.engine.live.accounting import Accounting
from kernelstream.engine.live.clock import FORGET, TICK, QuietClock
from kernelstream.engine.live.engine import quiet_clock, reference_outputs
from kernelstream.engine.live.state import decode_state, encode_state


def test_a_quiet_entity_is_forgotten_and_starts_afresh() -> None:
    """u1 sends at 0 and goes quiet (quiet interval 1 s, forget after 3 s): ticks at 1200 and
    2400 as before, then its model goes once the stream clock reaches 3000 (at t = 4000: the
    quorum's third latest, 3200). When u1 sends again at 6500 its model is a new one: its
    prediction is the first of a model (position 0), not the second."""
    s = spec(forget_after_ms=3000)
    clock = quiet_clock(s)
    assert clock is not None and clock.forget_ms == 3000
    records = [*quiet_u1(), rec(100, 6500, "u1/b", "? 1:1")]
    out, states = reference_outputs(records, s, clock=clock)
    assert [k for k, _ in out.forgotten] == ["perc#0@u1"]
    gone = out.forgotten[0][1]
    assert (gone.counts["records"], gone.counts["skipped"], gone.counts["pending"]) == (1, 0, 0)
    assert gone.restored is None and gone.counts["outcomes"] == 0
    u1 = states["perc#0@u1"]
    assert (u1.records, u1.position, u1.clock_ms) == (1, 1, 6500)
    assert [(r["event_id"], r["position"]) for r in out.predictions
            if r["entity"] == "u1"] == [("u1/a", 0), ("u1/b", 0)]
    # without forgetting, the same model goes on
    out2, states2 = reference_outputs(records, spec())
    assert not out2.forgotten and states2["perc#0@u1"].records == 2
    assert [r["position"] for r in out2.predictions if r["entity"] == "u1"] == [0, 1]


def test_the_clock_forgets_after_both_ticks_and_not_before_the_interval() -> None:
    """What the clock gives, record by record: u1's two ticks, then its forget only once the
    stream clock is ``forget_ms`` past u1's last record (5 s here, later than the second
    tick); a record of u1 while its forget is due puts it back to ticks."""
    c = QuietClock(1000, forget_ms=5000)
    got: list[tuple[int, str, int, int]] = []
    ents = ["u1"] + [f"u{2 + i % 3}" for i in range(1, 40)]
    ts = [0] + [400 * i for i in range(1, 40)]
    for k, (e, t) in enumerate(zip(ents, ts, strict=True)):
        got += [(ts[k], who, now, what) for _, who, now, what in c.record_many([e], [t])]
    assert got == [(2000, "u1", 1200, TICK), (3200, "u1", 2400, TICK),
                   (6000, "u1", 5200, FORGET)]
    assert "u1" not in c.clock and len(c) == 3

    c = QuietClock(1000, forget_ms=5000)
    seq = [("u1", 0)] + [(f"u{2 + i % 3}", 400 * i) for i in range(1, 10)] + [("u1", 3700)] + \
          [(f"u{2 + i % 3}", 400 * i) for i in range(10, 40)]
    got = []
    for e, t in seq:
        got += [(t, who, now, what) for _, who, now, what in c.record_many([e], [t])]
    # u1's record at 3700 came while its forget was due: two new ticks (the stream clock
    # reaches 4700 at 4800, with u4's record at 5600), and the forget counts from 3700
    # (stream clock >= 8700)
    assert got == [(2000, "u1", 1200, TICK), (3200, "u1", 2400, TICK),
                   (5600, "u1", 4800, TICK), (6800, "u1", 6000, TICK),
                   (9600, "u1", 8800, FORGET)]


def test_a_forget_comes_right_after_the_second_tick_when_due() -> None:
    """A stream clock that jumps (a gap in the whole stream) makes the second tick and the
    forget due at once: both, in that order, right after the same record."""
    c = QuietClock(1000, forget_ms=2000)
    c.record_many(["a", "b", "c", "q"], [0, 0, 0, 0])
    c.record_many(["a", "b", "c"], [1500, 1500, 1500])  # q's first tick at 1500
    due = c.record_many(["a", "b", "c"], [9000, 9000, 9000])
    assert [(who, now, what) for _, who, now, what in due if who == "q"] == [
        ("q", 9000, TICK), ("q", 9000, FORGET)]


def test_per_model_counts_and_the_runs_accounting_add_up_with_forgets() -> None:
    """3,000 one-off entities forgotten as they go: few models are left, and what the
    forgotten ones counted plus what the live ones count is every routed record (the
    accounting folds a forgotten model's counts in and starts its key over)."""
    s = spec(forget_after_ms=2000)
    records = _one_off_stream(3000)
    clock = quiet_clock(s)
    assert clock is not None
    out, states = reference_outputs(records, s, clock=clock)
    _, kept = reference_outputs(records, spec())
    assert len(kept) > 2900 and len(states) < 150 and len(clock) < 150
    assert len(out.forgotten) == len(kept) - len(states) + sum(
        1 for k in states if any(k == g for g, _ in out.forgotten))
    acc = Accounting({})
    for key, gone in out.forgotten:
        acc.forget(key, gone.counts, gone.restored)
    for key, st in states.items():
        acc.state(key, st)
    doc = acc.run()
    assert doc["processed"] == sum(st.records for st in kept.values()) > 4000
    assert doc["pending"] == sum(len(st.pending) for st in states.values())
    # every prediction ended somewhere, the forgotten models' included (a labelled event is
    # a prediction and an outcome at once; no learner refused a label here)
    assert len(out.predictions) == len(out.outcomes) + len(out.unlabeled) + doc["pending"]


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_forgets_do_not_depend_on_how_reader_calls_cut_the_stream(chunk: int) -> None:
    s = spec(forget_after_ms=2500)
    records = _one_off_stream(400, seed=1)
    whole, st_whole = reference_outputs(records, s, flush=True)
    cut, st_cut = reference_outputs(records, s, flush=True, chunk=chunk)
    assert rows(cut) == rows(whole)
    # (which model a chunk processes first is not part of the contract: each model's order is)
    assert sorted(k for k, _ in cut.forgotten) == sorted(k for k, _ in whole.forgotten)
    assert st_cut.keys() == st_whole.keys()
    assert all(state_bytes(st_cut[k]) == state_bytes(st_whole[k]) for k in st_whole)


@pytest.mark.parametrize("at", [1, 137, 500, 801])
def test_a_restored_stream_forgets_where_the_whole_one_does(at: int) -> None:
    """A restart at any record, through the states' and the clock's bytes (a forgotten
    model is not in the snapshot): the rows and the states are the uninterrupted stream's."""
    s = spec(forget_after_ms=2500)
    records = _one_off_stream(400, seed=2)
    whole, st_whole = reference_outputs(records, s, flush=True)
    assert len(whole.forgotten) > 100
    clock = quiet_clock(s)
    assert clock is not None
    first, states = reference_outputs(records[:at], s, clock=clock)
    restored = {k: decode_state(encode_state(st), s.label_ttl_ms) for k, st in states.items()}
    clock2 = QuietClock.decode(clock.cut().encode(), clock.quiet_ms, clock.forget_ms)
    assert clock2.encode() == clock.encode()
    rest, st_rest = reference_outputs(records[at:], s, restored, flush=True, clock=clock2)
    both = joined(first, rest)
    assert rows(both) == rows(whole)
    assert sorted(k for k, _ in both.forgotten) == sorted(k for k, _ in whole.forgotten)
    assert st_rest.keys() == st_whole.keys()
    assert all(state_bytes(st_rest[k]) == state_bytes(st_whole[k]) for k in st_whole)


def test_a_rebuilt_clock_with_forgetting_follows_every_model() -> None:
    """Forgetting turned on for a stream that ran without it: the clock is rebuilt from every
    model (not only the busy ones), so the entities quiet for long are forgotten too."""
    s = spec()
    records = _one_off_stream(600, seed=3)
    half = len(records) // 2
    _, states = reference_outputs(records[:half], s)
    models = [(st.entity, st.clock_ms) for st in states.values()]
    clock = QuietClock.rebuilt(1000, models, forget_ms=2000)
    assert len(clock) == len(states)
    s2 = spec(forget_after_ms=2000)
    out, after = reference_outputs(records[half:], s2, states, clock=clock)
    first_half = {k for k in states}
    assert len({k for k, _ in out.forgotten} & first_half) > len(first_half) - 100
    assert len(after) < 150


def test_clock_bytes_with_forgetting() -> None:
    c = QuietClock(1000, forget_ms=4000)
    for e, t in [("a", 0), ("b", 0), ("c", 0), ("q", 0), ("a", 1500), ("b", 1500),
                 ("c", 1500), ("a", 2600), ("b", 2600), ("c", 2600)]:
        c.record_many([e], [t])
    assert c._left["q"] == 0 and c._seen["q"] == 0  # both ticks came; its forget is due
    data = c.encode()
    back = QuietClock.decode(data, 1000, 4000)
    assert back.encode() == data and back._seen == c._seen
    with pytest.raises(ValueError, match="forget interval"):
        QuietClock.decode(data, 1000)  # another forget interval: the caller rebuilds
    with pytest.raises(ValueError, match="forget interval"):
        QuietClock.decode(QuietClock(1000).encode(), 1000, 4000)
    with pytest.raises(ValueError, match=">= 1 ms"):
        QuietClock(1000, forget_ms=0)
    # version 2 (no forget interval, no last activity) is still read
    old = QuietClock(1000)
    old.record_many(["a", "b", "c", "q"], [0, 0, 0, 0])
    doc: dict[str, Any] = json.loads(old.encode()[9:])
    del doc["forget_ms"]
    js = json.dumps(doc).encode()
    v2 = b"KSCK\x02" + struct.pack("<I", len(js)) + js
    assert QuietClock.decode(v2, 1000).encode() == old.encode()


def test_the_spec_refuses_forgetting_before_the_ticks_or_without_entities() -> None:
    with pytest.raises(ValueError, match="at least twice"):
        spec(forget_after_ms=1999)  # quiet interval 1000 ms
    with pytest.raises(ValueError, match="needs key_by"):
        spec(forget_after_ms=5000, key_by=None)
    assert spec(forget_after_ms=2000).forget_after_ms == 2000


def test_an_entity_that_keeps_coming_back_leaves_one_heap_entry() -> None:
    """A heartbeat (every 5 s, quiet interval 1 s, forget after a day) gets both ticks in each
    pause and comes back before its forget: the clock keeps one live entry for it, and its
    heap and bytes stay as small as without forgetting (each return used to add an entry)."""
    c = QuietClock(1000, forget_ms=86_400_000)
    plain = QuietClock(1000)
    ticks = {id(c): 0, id(plain): 0}
    for t in range(0, 2_000_000, 100):
        ents = ["a", "b", "c"] + (["hb"] if t % 5000 == 0 else [])
        for clk in (c, plain):
            got = clk.record_many(ents, [t] * len(ents))
            ticks[id(clk)] += sum(1 for _, who, _, what in got if who == "hb" and what == TICK)
    assert ticks[id(c)] == ticks[id(plain)] == 2 * (2_000_000 // 5000 - 1) + 2
    assert len(c._due) <= 2 * len(c) + 64
    assert len(c.encode()) < 2 * len(plain.encode()) + 200
