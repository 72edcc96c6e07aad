"""Quiet entities' models move with the stream's clock (``kernelstream.engine.live.clock``): a
``--key-by`` entity that stops sending gets ticks, so its pending events expire, its metrics
window closes and its remembered ids go, wherever the reader's calls or a restart cut the
stream."""

from __future__ import annotations

import random
from typing import Any, cast

import pytest
from _helpers import live_spec

from kernelstream.engine.keys import StreamKey
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.clock import CLOCK_KEY, QuietClock
from kernelstream.engine.live.engine import LiveOutputs, quiet_clock, reference_outputs
from kernelstream.engine.live.parsing import LiveSpec
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.state import ModelState, decode_state, encode_state, state_clock

PERCEPTRON = LearnerConfig("perc", "perceptron", {"kernel": "linear"})
# the fields of rows that are not deterministic (wall-clock seconds)
NONDETERMINISTIC = {"seconds", "examples_per_second", "total_seconds"}


def rec(offset: int, ts: int, key: str, value: str) -> SourceRecord:
    return SourceRecord("ev", 0, offset, ts, key.encode(), value.encode())


def spec(**kw: Any) -> LiveSpec:
    base: dict[str, Any] = {"configs": (PERCEPTRON,), "n_features": 3, "label_ttl_ms": 1000,
                            "metrics_window_ms": 100, "key_by": "id-prefix"}
    base.update(kw)
    return cast(LiveSpec, live_spec(**base))


def rows(out: LiveOutputs) -> dict[str, list[dict[str, Any]]]:
    """Every output's rows without their wall-clock fields, each output sorted by row id (the
    order of models within a reader call is not part of the contract)."""
    return {name: sorted(({k: v for k, v in r.items() if k not in NONDETERMINISTIC}
                          for r in out[name]), key=lambda r: str(r.get("row_id")))
            for name, _ in out.items()}


def joined(*parts: LiveOutputs) -> LiveOutputs:
    """The rows of ``parts`` (a stream's runs) as one output."""
    both = LiveOutputs()
    for part in parts:
        for name, rs in part.items():
            both[name].extend(rs)
        both.forgotten.extend(part.forgotten)
    return both


def state_bytes(st: ModelState) -> bytes:
    st.seconds = st.window.seconds = 0.0  # wall clock: the only field allowed to differ
    return encode_state(st)


def quiet_u1() -> list[SourceRecord]:
    """u1 sends one event at 0 and goes quiet; u2, u3, u4 send an event every 400 ms in turn."""
    return [rec(0, 0, "u1/a", "? 1:1"),
            *(rec(i, 400 * i, f"u{2 + i % 3}/e{i}", "? 2:1") for i in range(1, 16))]


def test_a_quiet_entitys_event_expires_by_the_stream_clock() -> None:
    """u1 sends one event and goes quiet while three others go on. The stream clock is the
    latest time three entities have reached (QUORUM): at t = 2000 (u2, u4, u3 at 2000, 1600,
    1200) it is 1200, past u1's clock (0) by the quiet interval (max(TTL, window) = 1000 ms),
    so u1's model gets a tick at 1200: its event expires, its window closes; a second tick
    once the clock reaches 2200 (at t = 3200: 2400) forgets the expired id and closes the
    window the expiry was counted in, and the clock lets u1 go. Before, u1's event waited for
    u1's own next record, for ever."""
    s = spec()
    clock = quiet_clock(s)
    assert clock is not None and clock.quiet_ms == 1000
    out, states = reference_outputs(quiet_u1(), s, clock=clock)
    u1 = states["perc#0@u1"]
    unl = [r for r in out.unlabeled if r["entity"] == "u1"]
    assert [(r["event_id"], r["expired_at_ms"]) for r in unl] == [("u1/a", 1200)]
    assert not u1.pending and not u1.resolved  # forgotten at the second tick (2400)
    assert u1.clock_ms == 2400 and u1.records == 1
    assert state_clock(encode_state(u1)) == ("u1", 2400, False)  # nothing for a tick to do
    m = [r for r in out.metrics if r["entity"] == "u1"]
    assert [(r["row_id"], r["records"], r["predictions"], r["unlabeled"], r["pending"])
            for r in m] == [("perc#0@u1/m/0", 1, 1, 0, 1), ("perc#0@u1/m/1200", 0, 0, 1, 0)]
    assert "u1" not in clock.clock and clock.now == 5200  # (u2, u4, u3 at 6000, 5600, 5200)
    # the counts add up per model: predictions = outcomes + unlabeled + pending + rejected
    for st in states.values():
        c = st.counts()
        assert c["predictions"] == c["outcomes"] + c["unlabeled"] + c["pending"]


def test_one_entity_ahead_of_time_moves_no_other_entitys_clock() -> None:
    """20 devices, an event a second in turn, each labelled 5 s later (TTL 60 s); at 100 s two
    devices with skewed clocks each send a record stamped a year ahead. Were the stream clock
    the latest timestamp, every other device's models would tick a year on and their events
    expire before their labels; the quorum keeps it with the three latest entities."""
    year = 365 * 24 * 3600 * 1000
    items: list[tuple[int, int, str, str]] = []  # arrival, timestamp, key, value
    for sec in range(600):
        t = 1000 * sec
        items.append((t, t, f"d{sec % 20}/e{sec}", "? 1:0.5 2:0.1"))
        items.append((t + 5000, t + 5000, f"d{sec % 20}/e{sec}", "label:+1"))
        if sec == 100:
            items += [(t, t + year, "skewed/x", "? 1:0.1 2:0.1"),
                      (t, t + 2 * year, "skewed2/x", "? 1:0.1 2:0.1")]
    items.sort(key=lambda r: r[0])
    records = [rec(o, ts, k, v) for o, (_, ts, k, v) in enumerate(items)]
    s = spec(label_ttl_ms=60_000, metrics_window_ms=60_000)
    out, _ = reference_outputs(records, s)
    assert len(out.outcomes) == 600
    assert not [r for r in out.unlabeled if not r["entity"].startswith("skewed")]


def test_without_ticks_a_quiet_entity_keeps_its_events() -> None:
    """``ticks=False`` (a stream read by partition) keeps the old behaviour, which the test
    above would fail on: u1's event waits for u1's own next record."""
    out, states = reference_outputs(quiet_u1(), spec(), ticks=False)
    assert not [r for r in out.unlabeled if r["entity"] == "u1"]
    assert len(states["perc#0@u1"].pending) == 1


def test_ticks_only_for_per_entity_models() -> None:
    """Without ``--key-by`` every record reaches the one model of its configuration, whose
    clock is the stream's: no clock, no ticks."""
    assert quiet_clock(spec(key_by=None)) is None


def test_a_tick_does_not_reach_an_entity_that_keeps_sending() -> None:
    """An entity that sends within every quiet interval never gets a tick: its rows are
    those of a run without ticks."""
    s = spec()
    records = [rec(i, 200 * i, f"u{i % 4}/e{i}", "? 1:1" if i % 3 else "+1 1:1")
               for i in range(80)]
    with_ticks, _ = reference_outputs(records, s)
    without, _ = reference_outputs(records, s, ticks=False)
    assert rows(with_ticks) == rows(without)


def _one_off_stream(n: int, seed: int = 0) -> list[SourceRecord]:
    """``n`` entities seen once or twice each (an event, sometimes its label 0-1.5 s later,
    sometimes a second event), a record every ~50 ms with some 300 ms late."""
    rnd = random.Random(seed)
    out: list[tuple[int, str, str]] = []
    for i in range(n):
        t = 50 * i + (-300 if rnd.random() < 0.1 else 0)
        x = f"1:{rnd.random():.3f} 2:{rnd.random():.3f}"
        out.append((max(t, 0), f"s{i}/e", f"? {x}"))
        if rnd.random() < 0.6:
            out.append((t + rnd.randint(0, 1500), f"s{i}/e", "label:" + rnd.choice("+-") + "1"))
        if rnd.random() < 0.2:
            out.append((t + rnd.randint(0, 2500), f"s{i}/f", f"label:+1 {x}"))
    out.sort(key=lambda r: r[0])
    return [rec(o, t, k, v) for o, (t, k, v) in enumerate(out)]


def test_many_one_off_entities_leave_bounded_state() -> None:
    """A key per session: 3,000 entities each seen for a moment. Every model ends with
    nothing pending or remembered except the last few quiet intervals' entities, and the
    clock follows only those (before: every entity's last events stayed pending)."""
    s = spec()
    records = _one_off_stream(3000)
    clock = quiet_clock(s)
    assert clock is not None
    _, states = reference_outputs(records, s, clock=clock)
    end = max(r.timestamp_ms for r in records)
    recent = {StreamKey.decode(k).entity for k, st in states.items()
              if st.clock_ms is not None and st.clock_ms > end - 3 * clock.quiet_ms}
    busy = {StreamKey.decode(k).entity for k, st in states.items()
            if st.pending or st.resolved}
    assert busy <= recent and len(recent) < 100
    assert len(clock) < 100
    c = {k: sum(st.counts()[k] for st in states.values())
         for k in ("predictions", "outcomes", "unlabeled", "pending")}
    assert c["predictions"] == c["outcomes"] + c["unlabeled"] + c["pending"]
    assert c["pending"] < 100 and c["unlabeled"] > 500
    _, old = reference_outputs(records, s, ticks=False)
    assert sum(len(st.pending) for st in old.values()) > 1000  # what the ticks fix


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_ticks_do_not_depend_on_how_reader_calls_cut_the_stream(chunk: int) -> None:
    s = spec()
    records = _one_off_stream(400, seed=1)
    whole, st_whole = reference_outputs(records, s, flush=True)
    cut, st_cut = reference_outputs(records, s, flush=True, chunk=chunk)
    assert rows(cut) == rows(whole)
    assert st_cut.keys() == st_whole.keys()
    assert all(state_bytes(st_cut[k]) == state_bytes(st_whole[k]) for k in st_whole)


@pytest.mark.parametrize("at", [1, 137, 500, 801])
def test_a_restored_stream_ticks_where_the_whole_one_does(at: int) -> None:
    """A restart at any record: the models' states and the clock's, through their bytes (as a
    snapshot keeps them), continue to exactly the uninterrupted stream's rows."""
    s = spec()
    records = _one_off_stream(400, seed=2)
    whole, st_whole = reference_outputs(records, s, flush=True)
    clock = quiet_clock(s)
    assert clock is not None
    first, states = reference_outputs(records[:at], s, clock=clock)
    restored = {k: decode_state(encode_state(st), s.label_ttl_ms) for k, st in states.items()}
    clock2 = QuietClock.decode(clock.cut().encode(), clock.quiet_ms)
    assert clock2.encode() == clock.encode()
    rest, st_rest = reference_outputs(records[at:], s, restored, flush=True, clock=clock2)
    assert rows(joined(first, rest)) == rows(whole)
    assert all(state_bytes(st_rest[k]) == state_bytes(st_whole[k]) for k in st_whole)


def test_a_rebuilt_clock_ticks_the_entities_gone_quiet_before_it() -> None:
    """A snapshot without a current clock (a run that read by partition, or one from before
    clocks): the clock is rebuilt from the models' states, read from their JSON alone, and
    every entity that still holds something gets its ticks once the stream moves on."""
    s = spec()
    records = _one_off_stream(600, seed=3)
    half = len(records) // 2
    _, states = reference_outputs(records[:half], s, ticks=False)
    assert sum(len(st.pending) for st in states.values()) > 100  # no ticks: all still there
    seen = [state_clock(encode_state(st)) for st in states.values()]
    assert all(e == StreamKey.decode(k).entity and c == st.clock_ms
               for (e, c, _), (k, st) in zip(seen, states.items(), strict=True))
    busy = [(e, c) for e, c, b in seen if b and e is not None and c is not None]
    clock = QuietClock.rebuilt(1000, busy)
    assert len(clock) == len(busy)  # (without ticks, every model still has its window open)
    _, after = reference_outputs(records[half:], s, states, clock=clock)
    end = max(r.timestamp_ms for r in records)
    pending = {StreamKey.decode(k).entity for k, st in after.items() if st.pending}
    recent = {StreamKey.decode(k).entity for k, st in after.items()
              if st.clock_ms is not None and st.clock_ms > end - 3 * clock.quiet_ms}
    assert pending <= recent and len(recent) < 100


def test_clock_bytes_are_checked() -> None:
    c = QuietClock(1000)
    c.record_many(["a"], [5])
    data = c.encode()
    assert QuietClock.decode(data, 1000).encode() == data
    with pytest.raises(ValueError, match="quiet interval"):
        QuietClock.decode(data, 2000)
    with pytest.raises(ValueError, match="not a stream clock"):
        QuietClock.decode(b"KSEV\x02junk", 1000)
    with pytest.raises(ValueError, match=">= 1 ms"):
        QuietClock(0)
    # the snapshot key of the clock is no model's key
    with pytest.raises(ValueError):
        StreamKey.decode(CLOCK_KEY)
