"""The stream engine's batch paths equal its one-record paths, bit for bit.

``StreamEngine.route_many`` (LIBSVM feature records through the file loader's vectorised
parser) must give every record what ``route`` gives it, dead letters included; and
``process_many`` (runs of labelled events, or of events each followed by its label record,
through one ``predict_learn_many``) must give the
rows and the state bytes of ``process`` one record at a time, for plain, budgeted and
kernel-selection learners, on streams that mix runs with delayed labels, duplicates, windows
closing inside runs, replayed offsets and rows the learner refuses.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import numpy as np
import pytest
from _helpers import live_spec, route_one_by_one

from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.batch import ParsedRecord
from kernelstream.engine.live.engine import LiveOutputs, StreamEngine, reference_outputs
from kernelstream.engine.live.parsing import BULK_MIN, LiveSpec
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.state import ModelState
from kernelstream.learners.base import Learner

WALL_CLOCK = ("seconds", "examples_per_second", "total_seconds")
D = 5


def rec(offset: int, ts: int, key: str | None, value: str | bytes | None, topic: str = "ev",
        partition: int = 0) -> SourceRecord:
    v = value.encode() if isinstance(value, str) else value
    return SourceRecord(topic, partition, offset, ts, None if key is None else key.encode(), v)


def features(rng: np.random.Generator) -> str:
    """A LIBSVM body in the spellings files use (unsorted, signs, exponents, integers)."""
    idx = rng.choice(D, size=int(rng.integers(1, D + 1)), replace=False) + 1
    forms = ("{:.3f}", "{:+.2f}", "{:.2e}", "{:.0f}", "{}")
    return " ".join(f"{i}:{forms[int(rng.integers(len(forms)))].format(rng.normal() * 3)}"
                    for i in idx)


def stream(seed: int, n: int = 400) -> list[SourceRecord]:
    """Long runs of labelled events, broken by unlabelled events with delayed labels (on the
    events topic and on a labels topic), duplicates, malformed records, a replayed offset and
    time jumps that close metrics windows inside runs; two partitions, merged by time."""
    rng = np.random.default_rng(seed)
    out: list[SourceRecord] = []
    offsets = {("ev", 0): 0, ("ev", 1): 0, ("lab", 0): 0}
    late: list[tuple[int, str, str]] = []  # (time, id, label)
    t = 0

    def put(ts: int, key: str | None, value: str | bytes | None, topic: str = "ev",
            part: int = 0) -> None:
        o = offsets[(topic, part)]
        offsets[(topic, part)] = o + 1
        out.append(rec(o, ts, key, value, topic, part))

    for i in range(n):
        t += int(rng.integers(0, 4)) if rng.random() < 0.97 else 250  # some windows close
        part = int(rng.random() < 0.2)
        u = rng.random()
        eid = f"u{i % 2}/e{i}"
        while late and late[0][0] <= t:
            lt, lid, y = late.pop(0)
            if rng.random() < 0.5:
                put(lt, lid, f"label:{y}", part=part)
            else:
                put(lt, lid, y, topic="lab")
        if u < 0.7:
            put(t, eid, f"{rng.choice(['+1', '-1', '1', '0'])} {features(rng)}", part=part)
        elif u < 0.85:
            put(t, eid, f"? {features(rng)}", part=part)
            late.append((t + int(rng.integers(1, 400)), eid, str(rng.choice(["1", "-1"]))))
            late.sort()
        elif u < 0.88:
            put(t, f"u0/e{max(0, i - 2)}", f"+1 {features(rng)}", part=part)  # duplicate id
        elif u < 0.9:
            put(t, eid, "+1 1:2 # a comment", part=part)  # bulk parser declines, line ok
        elif u < 0.92:
            put(t, eid, "-1 9:1", part=part)  # index beyond n_features
        elif u < 0.94:
            put(t, eid, "+1 1:x", part=part)  # malformed
        elif u < 0.95:
            put(t, eid, "2 1:1", part=part)  # unknown label
        elif u < 0.96:
            put(t, eid, "+1 1:1\n-1 2:1", part=part)  # two lines in one record
        elif u < 0.97:
            put(t, None, f"+1 {features(rng)}", part=part)  # no event id
        elif u < 0.98:
            put(t, "noprefix", f"+1 {features(rng)}", part=part)
        else:
            put(t, f"u1/e{i}", f"label:{rng.choice(['1', '-1'])}", part=part)  # unknown id
    # a replayed record (same offset again) in the middle
    out.insert(len(out) // 2, out[len(out) // 3])
    return sorted(out, key=lambda r: r.timestamp_ms)


def pairs_stream(seed: int, n: int = 300) -> list[SourceRecord]:
    """Events each followed at once by its label record (``label:Y`` on the events topic, or
    ``Y`` on the labels topic), broken by a labelled event, a label that comes late, a label
    after the TTL (the event expires first), a duplicate id, an unknown label, a label for an
    id never seen, a replayed pair and time jumps that close metrics windows; two
    partitions, merged by time."""
    rng = np.random.default_rng(seed)
    out: list[SourceRecord] = []
    offsets = {("ev", 0): 0, ("ev", 1): 0, ("lab", 0): 0}
    t = 0

    def put(ts: int, key: str, value: str, topic: str = "ev", part: int = 0) -> None:
        o = offsets[(topic, part)]
        offsets[(topic, part)] = o + 1
        out.append(rec(o, ts, key, value, topic, part))

    late: list[tuple[int, str, str]] = []
    for i in range(n):
        t += int(rng.integers(0, 3)) if rng.random() < 0.97 else 250  # some windows close
        part = int(rng.random() < 0.1)
        eid = f"u{i % 2}/e{i}"
        y = str(rng.choice(["1", "-1"]))
        u = rng.random()
        while late and late[0][0] <= t:
            lt, lid, ly = late.pop(0)
            put(lt, lid, f"label:{ly}", part=part)
        put(t, eid, f"? {features(rng)}", part=part)
        if u < 0.8:
            put(t + int(rng.integers(0, 2)), eid, f"label:{y}", part=part)
        elif u < 0.85:
            put(t, eid, y, topic="lab")
        elif u < 0.88:
            late.append((t + int(rng.integers(5, 20)), eid, y))
        elif u < 0.9:
            late.append((t + 400, eid, y))  # after the TTL: expired
        elif u < 0.92:
            put(t, f"u0/e{max(0, i - 1)}", f"? {features(rng)}", part=part)  # duplicate id
            put(t, eid, f"label:{y}", part=part)
        elif u < 0.94:
            put(t, eid, "label:2", part=part)  # unknown label
        elif u < 0.96:
            put(t, f"u1/never{i}", f"label:{y}", part=part)
            put(t, eid, f"label:{y}", part=part)
        elif u < 0.98:
            put(t, eid, f"+1 {features(rng)}", part=part)  # a labelled event: a duplicate
        else:
            put(t, eid, f"label:{y}", part=part)
            out.append(out[-2])  # the pair replayed
            out.append(out[-2])
    return sorted(out, key=lambda r: r.timestamp_ms)


def spec(configs: tuple[LearnerConfig, ...], **kw: Any) -> LiveSpec:
    base: dict[str, Any] = {"configs": configs, "n_features": D, "label_ttl_ms": 300,
                            "metrics_window_ms": 200, "labels_topic": "lab"}
    base.update(kw)
    return cast(LiveSpec, live_spec(**base))


def rows(out: LiveOutputs) -> str:
    """Every row without the wall-clock fields, by ``row_id``; ``repr`` tells floats apart."""
    return repr([(name, [{k: v for k, v in r.items() if k not in WALL_CLOCK}
                         for r in sorted(rs, key=lambda r: r["row_id"])])
                 for name, rs in out.items()])


def state_bytes(engine: StreamEngine, st: ModelState) -> bytes:
    st.seconds = st.window.seconds = 0.0  # wall clock: the only field allowed to differ
    return engine.encode_state(st)


def one_by_one(recs: list[SourceRecord], s: LiveSpec
               ) -> tuple[LiveOutputs, dict[str, ModelState]]:
    e = StreamEngine(s)
    out = LiveOutputs()
    states: dict[str, ModelState] = {}
    for r in recs:
        routed = e.route(r)
        if isinstance(routed, dict):
            out.dead_letters.append(routed)
            continue
        for key, p in routed:
            st = states.get(key) or states.setdefault(key, e.new_state(key))
            e.process(key, st, p, out)
    return out, states


CONFIGS = [
    LearnerConfig("bogd", "bogd", {"budget": 8}),
    LearnerConfig("perc", "perceptron", {}),
    LearnerConfig("pa", "pa-i", {}),
    LearnerConfig("oks", "oks", {}),  # kernel selection: one row at a time
    LearnerConfig("raker", "raker", {}),  # kernel selection (random features)
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.label)
@pytest.mark.parametrize("key_by", [None, "id-prefix"])
def test_process_many_equals_process(cfg: LearnerConfig, key_by: str | None,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    recs = stream(11)
    s = spec((cfg,), key_by=key_by)
    calls: list[int] = []
    plm = Learner.predict_learn_many

    def counted(self: Learner, X: Any, y: Any, n_sv: Any = None) -> Any:
        calls.append(len(X))
        return plm(self, X, y, n_sv)

    monkeypatch.setattr(Learner, "predict_learn_many", counted)
    want, want_st = one_by_one(recs, s)
    assert not calls  # the one-record path never batches
    e = StreamEngine(s)
    for chunk in (1, 7, 64, 10_000):
        calls.clear()
        got, got_st = reference_outputs(recs, s, chunk=chunk)
        assert rows(got) == rows(want), chunk
        assert got_st.keys() == want_st.keys()
        for k in want_st:
            assert state_bytes(e, got_st[k]) == state_bytes(e, want_st[k]), (chunk, k)
        learner = next(iter(got_st.values())).learner
        assert learner is not None
        batched = sum(calls)
        if chunk == 1 or type(learner).selected_kernel is not Learner.selected_kernel:
            assert batched == 0
        else:
            assert batched > 0.3 * len(want.outcomes), (chunk, batched)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.label)
@pytest.mark.parametrize("key_by", [None, "id-prefix"])
def test_event_label_pairs_equal_process(cfg: LearnerConfig, key_by: str | None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Events each followed by their label record: learnt in runs (one predict_learn_many)
    with the rows and state bytes of predicting, then learning at the label, one record at
    a time."""
    recs = pairs_stream(5)
    s = spec((cfg,), key_by=key_by)
    calls: list[int] = []
    plm = Learner.predict_learn_many

    def counted(self: Learner, X: Any, y: Any, n_sv: Any = None) -> Any:
        calls.append(len(X))
        return plm(self, X, y, n_sv)

    monkeypatch.setattr(Learner, "predict_learn_many", counted)
    want, want_st = one_by_one(recs, s)
    assert len(want.outcomes) > 200 and want.unlabeled and want.dead_letters
    e = StreamEngine(s)
    for chunk in (1, 7, 64, 10_000):
        calls.clear()
        got, got_st = reference_outputs(recs, s, chunk=chunk)
        assert rows(got) == rows(want), chunk
        assert got_st.keys() == want_st.keys()
        for k in want_st:
            assert state_bytes(e, got_st[k]) == state_bytes(e, want_st[k]), (chunk, k)
        learner = next(iter(got_st.values())).learner
        assert learner is not None
        if chunk == 1 or type(learner).selected_kernel is not Learner.selected_kernel:
            assert not calls
        elif chunk >= 64:
            assert sum(calls) > 0.5 * len(want.outcomes), (chunk, sum(calls))


def test_a_refused_block_goes_one_row_at_a_time() -> None:
    """Regression labels for a classifier: the learner refuses those rows (dead letters)
    and learns the others, in a batch as one by one."""
    cfg = LearnerConfig("perc", "perceptron", {})
    s = spec((cfg,), task="regression")
    recs = [rec(i, i, f"e{i}", f"{'0.5' if i % 5 == 3 else '1'} 1:{i % 3} 2:1")
            for i in range(40)]
    want, want_st = one_by_one(recs, s)
    got, got_st = reference_outputs(recs, s)
    assert rows(got) == rows(want)
    assert len(got.dead_letters) == 8
    assert {d["reason"][:26] for d in got.dead_letters} == {"learner rejected the row: "}
    e = StreamEngine(s)
    assert state_bytes(e, got_st["perc#0"]) == state_bytes(e, want_st["perc#0"])


def parsed_equal(a: ParsedRecord, b: ParsedRecord) -> bool:
    xa = None if a.x is None else (a.x.dtype, a.x.shape, a.x.tobytes())
    xb = None if b.x is None else (b.x.dtype, b.x.shape, b.x.tobytes())
    return a._replace(x=None) == b._replace(x=None) and xa == xb


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("key_by", [None, "id-prefix"])
def test_route_many_equals_route(seed: int, key_by: str | None) -> None:
    configs = (LearnerConfig("a", "perceptron", {}), LearnerConfig("b", "pa-i", {}))
    s = spec(configs, key_by=key_by)
    e = StreamEngine(s)
    recs = stream(seed, 200)
    clean = [r for r in recs if r.value is not None and r.key is not None
             and b"#" not in r.value and b"\n" not in r.value and b"9:" not in r.value
             and b":x" not in r.value]
    # plain feature records only (the fast path's columns as they come)
    plain = [r for r in clean if r.topic == "ev" and not r.value.startswith((b"label:", b"2 "))
             and b"/" in r.key]
    assert len(plain) > 50
    pairs = pairs_stream(seed, 100)
    for batch in (recs, clean, plain, recs[:BULK_MIN - 1], clean[:BULK_MIN], [], recs[5:6],
                  pairs, [r for r in pairs if r.topic == "ev" and r.partition == 0
                          and r.value != b"label:2"]):
        want_groups, want_dead = route_one_by_one(e, batch)
        groups, dead = e.route_many(batch)
        assert dead == want_dead
        assert list(groups) == list(want_groups)  # first-appearance order
        for k, ps in groups.items():
            assert len(ps) == len(want_groups[k])
            assert all(parsed_equal(a, b) for a, b in zip(ps, want_groups[k], strict=True))


def _slow_only(e: StreamEngine, recs: list[SourceRecord]) -> Any:
    """What the record-by-record path (``_head``, the line parser) makes of ``recs``: the
    reference of route_many's fast paths."""
    from kernelstream.engine.live.batch import _Columns

    b = _Columns(len(recs))
    e.router._route_slow(recs, list(range(len(recs))), b)
    return b.groups(e.router, recs)


ODD_LABELS = [("ev", b"label: 1"), ("ev", b"label:1 "), ("ev", b" label:1"), ("ev", b"label:+1"),
              ("ev", b"label:maybe"), ("ev", b"label:"), ("ev", b"label:\x1c1\x1f"),
              ("ev", "label:1\u00a0".encode()), ("ev", b"label:\xff"), ("lab", b"1"),
              ("lab", b" 1"), ("lab", b"-1\t"), ("lab", b"label:-1"), ("lab", b"x"),
              ("lab", b""), ("ev", b"0")]


@pytest.mark.parametrize("key_by", [None, "id-prefix"])
def test_route_many_fast_paths_equal_the_record_by_record_path(key_by: str | None) -> None:
    configs = (LearnerConfig("a", "perceptron", {}), LearnerConfig("b", "pa-i", {}))
    e = StreamEngine(spec(configs, key_by=key_by))
    recs = stream(3, 200)
    keys = [b"u0/e1", b"noprefix", b"u1/\xff", b"/x"]
    recs += [SourceRecord(t, 0, 1000 + i, 5000 + i, keys[i % len(keys)], v)
             for i, (t, v) in enumerate(ODD_LABELS * 2)]
    for batch in (recs, [r for r in recs if r.offset >= 1000]):
        groups, dead = e.route_many(batch)
        want_groups, want_dead = _slow_only(e, batch)
        assert dead == want_dead
        assert list(groups) == list(want_groups)
        for k, ps in groups.items():
            assert all(parsed_equal(a, b) for a, b in zip(ps, want_groups[k], strict=True))


@pytest.mark.parametrize("seed", [0, 1])
def test_small_rounds_pick_the_fast_candidates_of_the_joined_search(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live round of a few records tests each value on its own (routing.SMALL_ROUND); it
    picks the records the search over the joined values picks, and routes them alike."""
    from kernelstream.engine.live import routing

    e = StreamEngine(spec((LearnerConfig("a", "perceptron", {}),)))
    recs = stream(seed, 120) + pairs_stream(seed, 40)
    recs += [SourceRecord("ev", 0, 5000 + i, 9000 + i, b"k", v) for i, (_, v) in
             enumerate(ODD_LABELS)] + [rec(6000, 1, "k", "\ufeff1 1:2"), rec(6001, 1, "k", "#")]
    windows = [recs[i:i + n] for n in (1, 2, 3, 5, 9, routing.SMALL_ROUND - 1)
               for i in range(0, len(recs) - n, 7)]
    small = [e.router._fast_candidates(w) for w in windows]
    routed = [e.route_many(w) for w in windows]
    monkeypatch.setattr(routing, "SMALL_ROUND", 0)  # the joined search for every size
    assert small == [e.router._fast_candidates(w) for w in windows]
    for (groups, dead), w in zip(routed, windows, strict=True):
        want_groups, want_dead = e.route_many(w)
        assert dead == want_dead and list(groups) == list(want_groups)
        for k, ps in groups.items():
            assert all(parsed_equal(a, b) for a, b in zip(ps, want_groups[k], strict=True))


def test_route_many_parses_in_bulk_and_reports_lines_it_cannot() -> None:
    e = StreamEngine(spec((LearnerConfig("a", "perceptron", {}),)))
    good = [rec(i, i, f"e{i}", f"+1 {i % (D - 1) + 2}:{i}.5 1:-0") for i in range(40)]
    bad = [rec(40, 40, "x", "+1 7:1"), rec(41, 41, "y", "3 1:1"), rec(42, 42, "z", "+1 1:x")]
    groups, dead = e.route_many(good[:20] + bad + good[20:])
    ps = groups["a#0"]
    assert len(ps) == 40
    assert ps[0].x is not None and ps[0].x.base is not None  # a row of one batch matrix
    assert ps[35].x is not None and ps[35].x.base is not None  # after the bad line: halved
    assert ps[3].x is not None and ps[3].x.tolist() == [-0.0, 0.0, 0.0, 0.0, 3.5]
    assert np.signbit(ps[3].x[0])
    assert [d["reason"][:27] for d in dead] == ["index exceeds n_features: i",
                                                "unknown label '3': classifi",
                                                "bad value 'x' at index 1"]


def test_scaled_rows_are_the_same_on_every_path() -> None:
    """``--scale auto`` 's ranges (``read.scale_ranges``) are applied by the parser: the
    bulk path, the fast paths and the record-by-record path give the same scaled rows, bit
    for bit, ``(x - lo) / (hi - lo)`` of the unscaled ones, a column constant over the head
    shifted only; CSV rows of another width are dead letters; ranges that do not fit the
    rows are refused."""
    configs = (LearnerConfig("a", "perceptron", {}), LearnerConfig("b", "pa-i", {}))
    lo, hi = (-3.0, 0.5, -1.0, 2.0, -8.0), (3.0, 0.5, 400.0, 9.0, 8.0)  # column 2 constant
    scaled = spec(configs, scale="01", scale_ranges=(lo, hi))
    plain = StreamEngine(spec(configs))
    e = StreamEngine(scaled)
    recs = stream(4, 200)
    raw, _ = plain.route_many(recs)
    groups, dead = e.route_many(recs)
    want_groups, want_dead = route_one_by_one(e, recs)
    slow_groups, slow_dead = _slow_only(e, recs)
    assert dead == want_dead == slow_dead
    span = np.array([6.0, 1.0, 401.0, 7.0, 16.0])
    n = 0
    for k, ps in groups.items():
        for p, q, r, u in zip(ps, want_groups[k], slow_groups[k], raw[k], strict=True):
            assert parsed_equal(p, q) and parsed_equal(p, r)
            if u.x is not None:
                assert p.x is not None and p.x.tobytes() == ((u.x - lo) / span).tobytes()
                n += 1
    assert n > 100
    csv = StreamEngine(spec(configs, fmt="csv", n_features=None, scale="01",
                            scale_ranges=((0.0, 0.0), (10.0, 0.0))))
    got = csv.route(rec(0, 0, "e0", "5,2,1"))
    assert not isinstance(got, dict) and got[0][1].x.tolist() == [0.5, 2.0]
    wide = csv.route(rec(1, 1, "e1", "5,2,7,1"))
    assert isinstance(wide, dict) and wide["reason"].startswith("wrong number of columns")
    with pytest.raises(ValueError, match="scale_ranges of 2 and 2 columns"):
        spec(configs, scale="01", scale_ranges=((0.0, 0.0), (1.0, 1.0)))
    with pytest.raises(ValueError, match="scale"):
        spec(configs, scale="01")


def _standardised(recs: list[SourceRecord], mean: float, std: float) -> list[SourceRecord]:
    """``recs`` with every numeric label ``y`` (of an event, a ``label:Y`` record or a record
    of the labels topic) written as ``(y - mean) / std``: what a learner of a configuration
    with ``target = (mean, std)`` learns."""

    def z(tok: str) -> str:
        return repr((float(tok) - mean) / std)

    out = []
    for r in recs:
        v = (r.value or b"").decode()
        try:
            if r.topic == "lab":
                v = z(v)
            elif v.startswith("label:"):
                v = "label:" + z(v[6:])
            else:
                tok, sep, rest = v.partition(" ")
                v = z(tok) + sep + rest
        except ValueError:
            pass  # "?" (unlabelled) or no number: as it is
        out.append(r._replace(value=v.encode()))
    return out


@pytest.mark.parametrize("make", [stream, pairs_stream], ids=["delayed", "pairs"])
@pytest.mark.parametrize("cfg", [LearnerConfig("raker", "raker", {"loss": "square"}),
                                 LearnerConfig("rf-oks", "rf-oks", {"loss": "square"})],
                         ids=lambda c: c.label)
def test_a_standardised_target_is_learnt_alike_on_every_path(make: Any,
                                                             cfg: LearnerConfig) -> None:
    """``--scale-target auto`` (a configuration's ``target``): every path (one record at a
    time, runs of labelled events, event-label pairs) learns ``(y - mean) / std`` and gives
    ``mean + std * score``: the same states, bit for bit, as a configuration without a target
    on the same records with standardised labels, and every score mapped back."""
    mean, std = 3.25, 0.37
    recs = make(9)
    with_target = spec((replace(cfg, target=(mean, std)),), task="regression")
    plain = spec((cfg,), task="regression")
    want, want_st = one_by_one(_standardised(recs, mean, std), plain)
    e = StreamEngine(with_target)
    assert len(want.outcomes) > 100
    one, one_st = one_by_one(recs, with_target)
    for chunk in (1, 7, 10_000):
        got, got_st = (one, one_st) if chunk == 1 else reference_outputs(recs, with_target,
                                                                         chunk=chunk)
        assert got_st.keys() == want_st.keys()
        for k in want_st:
            # the learners learnt the same numbers; the rest of the state (pending scores,
            # window losses) is in the target's units
            g, w = got_st[k].learner, want_st[k].learner
            assert g is not None and w is not None
            assert _same_arrays(g.get_state(), w.get_state()), (chunk, k)
            assert state_bytes(e, got_st[k]) == state_bytes(e, one_st[k]), (chunk, k)
        for name in ("predictions", "outcomes"):
            g = sorted(getattr(got, name), key=lambda r: r["row_id"])
            w = sorted(getattr(want, name), key=lambda r: r["row_id"])
            assert [r["score"] for r in g] == [mean + std * r["score"] for r in w], name
        assert [(r["label"] - mean) / std for r in sorted(got.outcomes,
                                                          key=lambda r: r["row_id"])] == [
            r["label"] for r in sorted(want.outcomes, key=lambda r: r["row_id"])]


def _same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes() for k in a)


@pytest.mark.parametrize("cfg", CONFIGS[:3], ids=lambda c: c.label)
def test_an_event_of_another_width_in_a_run_is_a_dead_letter(cfg: LearnerConfig) -> None:
    """A CSV event with another column count inside a run of labelled events, or of
    event-label pairs, is a ``learn`` dead letter as on the one-record path (it once reached
    the run's ``np.stack`` and killed the stream on every restart)."""
    s = spec((cfg,), fmt="csv", n_features=None, labels_topic=None)
    vals = ["0.1,0.2,0.3,1", "0.2,0.1,0.3,-1", "0.1,0.2,0.3,0.4,1", "0.5,0.6,0.7,-1",
            "0.5,0.6,0.7,-1", "0.5,0.6,1", "0.2,0.6,0.1,1", "0.3,0.3,0.3,-1"]
    recs = [rec(i, i, f"e{i}", v) for i, v in enumerate(vals)]
    t = len(recs)
    for i, v in enumerate(["0.1,0.2,0.3", "0.2,0.1,0.3", "0.1,0.2,0.3,0.4", "0.5,0.6",
                           "0.5,0.6,0.7", "0.4,0.6,0.7", "0.1,0.6,0.7"]):
        recs += [rec(t, t, f"p{i}", f"{v},?"), rec(t + 1, t, f"p{i}", f"label:{(-1) ** i}")]
        t += 2
    want, want_st = one_by_one(recs, s)
    for chunk in (3, 1000):
        got, got_st = reference_outputs(recs, s, chunk=chunk)
        assert rows(got) == rows(want)
        e = StreamEngine(s)
        assert want_st and got_st.keys() == want_st.keys()
        assert all(state_bytes(e, got_st[k]) == state_bytes(e, want_st[k]) for k in want_st)
        assert [(d["event_id"], d["stage"]) for d in got.dead_letters] == [
            ("e2", "learn"), ("e5", "learn"), ("p2", "learn"), ("p2", "join"), ("p3", "learn"),
            ("p3", "join")]
        assert len(got.outcomes) == 11
