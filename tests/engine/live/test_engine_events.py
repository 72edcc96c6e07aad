"""The delayed-label stream engine (``kernelstream.engine.live.engine``): parsing, the join of
events and labels, expiry, dead letters, windowed metrics, idempotent replay and state round
trips."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any, cast

import numpy as np
import pytest
from _helpers import live_spec

from kernelstream.data.options import ReadOptions
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.batch import ParsedRecord
from kernelstream.engine.live.engine import LiveOutputs, StreamEngine, reference_outputs
from kernelstream.engine.live.merge import merged as merge_group
from kernelstream.engine.live.parsing import LiveSpec
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.rows import nearest_rank, stream_schemas
from kernelstream.sparse import CSR

PERCEPTRON = LearnerConfig("perc", "perceptron", {"kernel": "linear"})


def rec(offset: int, ts: int, key: str | bytes | None, value: str | bytes | None,
        topic: str = "ev", partition: int = 0) -> SourceRecord:
    k = key.encode() if isinstance(key, str) else key
    v = value.encode() if isinstance(value, str) else value
    return SourceRecord(topic, partition, offset, ts, k, v)


def spec(**kw: Any) -> LiveSpec:
    base: dict[str, Any] = {"configs": (PERCEPTRON,), "n_features": 3, "label_ttl_ms": 1000,
                            "metrics_window_ms": 100}
    base.update(kw)
    return cast(LiveSpec, live_spec(**base))


def routed(engine: StreamEngine, r: SourceRecord) -> ParsedRecord:
    out = engine.route(r)
    assert isinstance(out, list), out
    assert len(out) == 1
    return out[0][1]


def dead(engine: StreamEngine, r: SourceRecord) -> dict[str, Any]:
    out = engine.route(r)
    assert isinstance(out, dict), out
    return out


def same_state(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Two learner states equal bit for bit (NaN included)."""
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
        for k in a)


NONDETERMINISTIC = ("seconds", "examples_per_second", "total_seconds")


def comparable(out: LiveOutputs) -> str:
    """Every row without the wall-clock fields, by ``row_id`` (how the rows of different
    models interleave depends on how the records were chunked); ``repr`` tells floats apart
    bit for bit."""
    return repr([(name, [{k: v for k, v in r.items() if k not in NONDETERMINISTIC}
                         for r in sorted(rows, key=lambda r: r["row_id"])])
                 for name, rows in out.items()])


def joined(*outs: LiveOutputs) -> LiveOutputs:
    res = LiveOutputs()
    for name, rows in res.items():
        for o in outs:
            rows.extend(o[name])
    return res


# -- parsing --------------------------------------------------------------------------------------


def test_route_libsvm_events_and_labels() -> None:
    e = StreamEngine(spec(labels_topic="lab"))
    p = routed(e, rec(7, 1000, "id-1", "+1 1:0.5 3:2"))
    assert (p.label_only, p.event_id, p.y, p.offset, p.timestamp_ms) == (False, "id-1", 1.0, 7,
                                                                           1000)
    assert p.x is not None and p.x.tolist() == [0.5, 0.0, 2.0]
    assert routed(e, rec(0, 0, "a", "? 2:1")).y is None
    assert routed(e, rec(0, 0, "a", "0 2:1")).y == -1.0  # 0/1 labels: 0 is the -1 class
    lab = routed(e, rec(0, 0, "a", "label:-1"))
    assert (lab.label_only, lab.x, lab.y) == (True, None, -1.0)
    assert routed(e, rec(0, 0, "a", "1", topic="lab")).y == 1.0  # labels topic: bare value
    assert routed(e, rec(0, 0, "a", " label:0\n", topic="lab")).y == -1.0
    out = e.route(rec(0, 0, "a", "? 1:1"))
    assert isinstance(out, list) and out[0][0] == "perc#0"


def test_route_csv() -> None:
    e = StreamEngine(spec(fmt="csv", n_features=2))
    p = routed(e, rec(0, 0, "a", "0.5,1.5,?"))
    assert p.y is None and p.x is not None and p.x.tolist() == [0.5, 1.5]
    assert routed(e, rec(0, 0, "a", "0.5,1.5,")).y is None  # empty label field: unlabelled
    assert routed(e, rec(0, 0, "a", "0.5,1.5,1")).y == 1.0
    first = StreamEngine(spec(fmt="csv", n_features=2, label_column=0))
    p = routed(first, rec(0, 0, "a", ",3,4"))
    assert p.y is None and p.x is not None and p.x.tolist() == [3.0, 4.0]
    assert dead(e, rec(3, 0, "a", "1,2,3,1"))["reason"] == (
        "wrong number of columns: expected 3, got 4")


def test_route_positive_label_and_regression() -> None:
    e = StreamEngine(spec(positive_label="fraud"))
    assert routed(e, rec(0, 0, "a", "fraud 1:1")).y == 1.0
    assert routed(e, rec(0, 0, "a", "label:ok")).y == -1.0  # one-vs-rest
    # one-vs-rest until the other class is known: then a third label is a dead letter, as
    # in a replay (the stream decides the other class on its first records: stream_width)
    yes = StreamEngine(spec(positive_label="yes"))
    assert [routed(yes, rec(0, 0, "a", f"label:{t}")).y for t in ("yes", "no", "maybe", "YES")
            ] == [1.0, -1.0, -1.0, -1.0]
    two = spec(positive_label="yes", negative_label="no")
    recs = [rec(i, i, f"e{i}", v) for i, v in enumerate(
        ["yes 1:1", "no 2:1", "maybe 1:1", "? 3:1", "YES 1:2", "+1 1:1", "no 1:1 2:1"])]
    recs += [rec(7, 7, "e3", "label:maybe"), rec(8, 8, "e3", "label:no")]
    out, _ = reference_outputs(recs, two)
    third = [(d["event_id"], d["stage"], d["reason"]) for d in out.dead_letters]
    assert third == [(e, "parse", f"a third label {t!r}: the stream maps 'yes' to +1 and 'no' "
                      "to -1 (the first two labels of its first records)")
                     for e, t in (("e2", "maybe"), ("e4", "YES"), ("e5", "+1"), ("e3", "maybe"))]
    assert [(r["event_id"], r["label"]) for r in out.outcomes] == [
        ("e0", 1.0), ("e1", -1.0), ("e6", -1.0), ("e3", -1.0)]
    with pytest.raises(ValueError, match="negative_label goes with positive_label"):
        spec(negative_label="no")
    r = StreamEngine(spec(task="regression"))
    assert routed(r, rec(0, 0, "a", "0.37 1:1")).y == 0.37
    assert routed(r, rec(0, 0, "a", "label:-2.5")).y == -2.5


def test_route_key_by_id_prefix() -> None:
    e = StreamEngine(spec(configs=(PERCEPTRON, LearnerConfig("b2", "bogd", {"budget": 2})),
                          key_by="id-prefix"))
    out = e.route(rec(0, 0, "user42/evt-1", "? 1:1"))
    assert isinstance(out, list)
    assert [k for k, _ in out] == ["perc#0@user42", "b2#0@user42"]
    assert out[0][1] is out[1][1]  # parsed once
    d = dead(e, rec(5, 0, "plain-id", "? 1:1"))
    assert d["reason"] == ("event id 'plain-id' has no entity prefix (--key-by id-prefix wants "
                           "ENTITY/ID)")
    assert dead(e, rec(5, 0, "/x", "label:1"))["event_id"] == "/x"


@pytest.mark.parametrize(("key", "value", "reason"), [
    (None, "? 1:1", "no event id (the message has no key)"),
    (b"", "? 1:1", "no event id (the message has no key)"),
    (b"\xff", "? 1:1", "the event id (message key) is not UTF-8 text"),
    ("a", None, "empty message (no value)"),
    ("a", b"? 1:\xff", "undecodable bytes (not UTF-8 text at byte 4)"),
    ("a", "? 1:x", "bad value 'x' at index 1"),
    ("a", "? 4:1", "index exceeds n_features: index 4 > n_features=3"),
    ("a", "2 1:1", "unknown label '2': classification labels are -1 or 0 and 1 "
                   "(--positive-label names the +1 class of others)"),
    ("a", "label:nan", "unknown label 'nan': classification labels are -1 or 0 and 1 "
                       "(--positive-label names the +1 class of others)"),
    ("a", "label:", "empty label"),
    ("a", "# only a comment", "empty line"),
])
def test_route_bad_records_are_dead_letters(key: Any, value: Any, reason: str) -> None:
    e = StreamEngine(spec(source_prefix="kafka://h:1/"))
    d = dead(e, rec(9, 0, key, value, partition=2))
    assert d["reason"] == reason
    assert (d["stage"], d["source"], d["line"], d["key"], d["id"]) == (
        "parse", "kafka://h:1/ev/2", 9, None, (2 << 48) | 9)
    assert d["row_id"] == "dl/ev/2/9/"


@pytest.mark.parametrize(("key", "value", "event_id"), [
    ("a/1", b"\x00\xff\xfe binary", "a/1"),  # value not UTF-8: the key still names it
    ("a/1", None, "a/1"),
    (b"\xffa/1", "? 1:1", "\\xffa/1"),  # a key that is not UTF-8: its bytes escaped
    (b"\xff", b"\xff", "\\xff"),
])
def test_dead_letters_keep_the_message_key(key: Any, value: Any, event_id: str) -> None:
    e = StreamEngine(spec())
    assert dead(e, rec(4, 0, key, value))["event_id"] == event_id
    # the same among plain records (the fast paths decline it, the line parser words it)
    recs = [rec(i, i, f"e{i}", f"? 1:{i}") for i in range(12)]
    recs[5] = rec(5, 5, key, value)
    groups, dl = e.route_many(recs)
    assert [(d["line"], d["event_id"]) for d in dl] == [(5, event_id)]
    assert len(groups["perc#0"]) == 11


BOM = "\ufeff"


@pytest.mark.parametrize(("fmt", "values"), [
    ("libsvm", ["+1 1:0.5 3:2", "? 2:1", "0 1:1", "label:-1", "? 1:x"]),
    ("csv", ["0.5,0,2,1", "0,1,0,?", "1,0,0,", "label:-1", "1,2"]),
])
def test_a_byte_order_mark_starting_a_value_is_dropped(fmt: str, values: list[str]) -> None:
    """As every file reader drops it: the records parse as without it, one by one and in
    blocks of the fast paths, and a dead letter's text has no BOM either."""
    e = StreamEngine(spec(fmt=fmt, labels_topic="lab"))

    def parsed(vs: list[str], topic: str = "ev") -> list[Any]:
        recs = [rec(i, i, f"e{i}", v, topic=topic) for i, v in enumerate(vs)]
        groups, dl = e.route_many(recs)
        b = groups.get("perc#0")
        rows = [] if b is None else [
            (p.event_id, p.label_only, p.y, None if p.x is None else p.x.tolist(), p.text)
            for p in b]
        return [rows, [(d["line"], d["reason"], d["raw"]) for d in dl]]

    for vs in (values, values * 4, ["1", "-1", "0"]):  # one by one, blocks, labels topic
        topic = "lab" if vs[0] == "1" else "ev"
        plain = parsed(vs, topic)
        assert parsed([BOM + v for v in vs], topic) == plain
        assert plain[0] and (plain[1] or topic == "lab")
        for j, v in enumerate(vs):
            one = e.route(rec(j, j, f"e{j}", (BOM + v).encode(), topic=topic))
            want = e.route(rec(j, j, f"e{j}", v.encode(), topic=topic))
            if isinstance(want, dict):
                assert one == want
            else:
                assert isinstance(one, list)
                assert one[0][1].text == want[0][1].text == v
                assert one[0][1].y == want[0][1].y


def test_spec_checks() -> None:
    with pytest.raises(ValueError, match="n_features"):
        LiveSpec((PERCEPTRON,), ReadOptions("kafka://h:1/ev"))
    with pytest.raises(ValueError, match="key_by"):
        spec(key_by="key")
    with pytest.raises(ValueError, match="twice"):
        spec(configs=(PERCEPTRON, PERCEPTRON))
    # the read options of a file that a message has not: refused, not ignored
    for kw in ({"scale": "minmax"}, {"scale_target": "01"}, {"limit": 5}, {"header": True}):
        with pytest.raises(ValueError, match="do not apply to stream messages"):
            spec(**kw)
    with pytest.raises(ValueError, match="0-based position"):
        spec(fmt="csv", n_features=None, label_column="y")
    # a topic has no file to sniff: LIBSVM messages, comma-separated when CSV
    assert spec().read.fmt == "libsvm" and spec(fmt="csv").read.delimiter == ","


# -- semantics ------------------------------------------------------------------------------------


def hand_stream() -> list[SourceRecord]:
    """A small stream whose every output is worked out by hand in the tests (linear kernel
    perceptron, ttl 1000 ms, windows of 100 ms)."""
    return [
        rec(0, 0, "a", "? 1:1"),  # score 0 -> +1
        rec(1, 10, "b", "? 2:1"),
        rec(2, 20, "c", "? 1:2"),
        rec(3, 30, "a", "label:-1"),  # mistake, loss 1, delay 30; SV (1,0) coef -1
        rec(4, 50, "d", "+1 1:1 2:1"),  # score -1: mistake, loss 2, delay 0; SV (1,1) +1
        rec(5, 150, "c", "label:-1"),  # closes [0,100); mistake, loss 1, delay 130; SV (2,0) -1
        rec(6, 160, "b", "label:+1"),  # right (score 0 -> +1), loss 1, delay 150
        rec(7, 170, "e", "? 1:1"),  # score -1 + 1 - 2 = -2
        rec(8, 175, "b", "label:+1"),  # duplicate label
        rec(9, 180, "z", "label:+1"),  # unknown id
        rec(10, 1170, "f", "? 2:1"),  # closes [100,200); e expires (170 + 1000 <= 1170)
        rec(11, 1180, "e", "label:+1"),  # expired id
        rec(12, 1190, "b", "label:+1"),  # b was forgotten at 160 + 1000: unknown again
        rec(13, 1195, "f", "? 1:1"),  # f is pending: duplicate event id
    ]


def test_hand_worked_stream() -> None:
    out, states = reference_outputs(hand_stream(), spec(), flush=True)
    st = states["perc#0"]
    assert [(r["event_id"], r["position"], r["score"], r["predicted"], r["labelled"])
            for r in out.predictions] == [
        ("a", 0, 0.0, 1.0, False), ("b", 1, 0.0, 1.0, False), ("c", 2, 0.0, 1.0, False),
        ("d", 3, -1.0, -1.0, True), ("e", 4, -2.0, -1.0, False), ("f", 5, 1.0, 1.0, False)]
    assert [(r["row_id"], r["event_id"], r["prediction_position"], r["label"], r["mistake"],
             r["loss"], r["delay_ms"], r["n_support_vectors"], r["label_offset"])
            for r in out.outcomes] == [
        ("perc#0/o/0", "a", 0, -1.0, True, 1.0, 30, 1, 3),
        ("perc#0/o/1", "d", 3, 1.0, True, 2.0, 0, 2, 4),
        ("perc#0/o/2", "c", 2, -1.0, True, 1.0, 130, 3, 5),
        ("perc#0/o/3", "b", 1, 1.0, False, 1.0, 150, 3, 6)]
    assert out.unlabeled == [{"row_id": "perc#0/u/4", "key": "perc#0", "config": "perc",
                              "entity": None, "event_id": "e", "position": 4,
                              "event_time_ms": 170, "expired_at_ms": 1170}]
    assert [(d["line"], d["reason"], d["stage"], d["key"], d["row_id"])
            for d in out.dead_letters] == [
        (8, "duplicate label", "join", "perc#0", "dl/ev/0/8/perc#0"),
        (9, "label for unknown event id", "join", "perc#0", "dl/ev/0/9/perc#0"),
        (11, "label for expired event id", "join", "perc#0", "dl/ev/0/11/perc#0"),
        (12, "label for unknown event id", "join", "perc#0", "dl/ev/0/12/perc#0"),
        (13, "duplicate event id", "join", "perc#0", "dl/ev/0/13/perc#0")]
    assert st.counts() == {"records": 14, "skipped": 0, "predictions": 6, "outcomes": 4,
                           "unlabeled": 1, "pending": 1, "learn_rejected": 0,
                           "dead_letters": 5, "mistakes": 3}


def test_an_early_label_is_an_unknown_id_and_its_event_expires() -> None:
    """docs/streaming.md (Messages): a label timestamped before its event is merged first,
    is a dead letter ``label for unknown event id`` (position null, its offset in ``line``)
    and its event, when it comes, expires as unlabeled."""
    records = merge_group([[rec(0, 10, "x", "? 1:1")],
                           [rec(0, 5, "x", "+1", topic="lab")]])
    out, _ = reference_outputs([*records, rec(1, 2000, "y", "? 2:1")], spec(labels_topic="lab"))
    assert [(d["event_id"], d["reason"], d["line"], d["position"])
            for d in out.dead_letters] == [("x", "label for unknown event id", 0, None)]
    assert [r["event_id"] for r in out.unlabeled] == ["x"] and not out.outcomes


def test_windowed_metrics_by_hand() -> None:
    out, _ = reference_outputs(hand_stream(), spec(), flush=True)
    rows = [{k: v for k, v in r.items() if k not in NONDETERMINISTIC} for r in out.metrics]
    ident = {"key": "perc#0", "config": "perc", "entity": None, "learner": "perceptron"}
    # the no-skill baseline by hand, over the outcomes in learning order (labels a -1, d +1,
    # c -1, b +1): the majority so far predicts +1 (tie: none seen), -1, +1 (tie), -1, wrong
    # each time; the model predicted +1, -1, +1, +1 (a quarter of them -1 at the end)
    regress = {"total_noskill_avg_loss": None, "total_rmse": None, "total_mae": None,
               "total_r2": None}
    w0 = {"total_noskill_mistake_rate": 100.0, "total_top_class_share": 0.5, **regress}
    w1 = {"total_noskill_mistake_rate": 100.0, "total_top_class_share": 0.75, **regress}
    assert rows == [
        {"row_id": "perc#0/m/0", **ident, "final": False, "window_start_ms": 0,
         "window_end_ms": 100, "records": 5, "predictions": 4, "outcomes": 2, "unlabeled": 0,
         "dead_letters": 0, "mistakes": 2, "mistake_rate": 100.0, "loss_sum": 3.0,
         "avg_loss": 1.5, "delay_p50_ms": 0, "delay_p99_ms": 30, "pending": 2,
         "n_support_vectors": 2, "total_records": 5, "total_predictions": 4,
         "total_outcomes": 2, "total_unlabeled": 0, "total_dead_letters": 0,
         "total_mistakes": 2, "total_mistake_rate": 100.0, "total_loss_sum": 3.0,
         "total_avg_loss": 1.5, **w0},
        # delays 130, 150: nearest rank gives 130 for p50 (linear interpolation would say 140)
        {"row_id": "perc#0/m/100", **ident, "final": False, "window_start_ms": 100,
         "window_end_ms": 200, "records": 5, "predictions": 1, "outcomes": 2, "unlabeled": 0,
         "dead_letters": 2, "mistakes": 1, "mistake_rate": 50.0, "loss_sum": 2.0,
         "avg_loss": 1.0, "delay_p50_ms": 130, "delay_p99_ms": 150, "pending": 1,
         "n_support_vectors": 3, "total_records": 10, "total_predictions": 5,
         "total_outcomes": 4, "total_unlabeled": 0, "total_dead_letters": 2,
         "total_mistakes": 3, "total_mistake_rate": 75.0, "total_loss_sum": 5.0,
         "total_avg_loss": 1.25, **w1},
        # windows 200 .. 1099 saw nothing: no rows; the open window is flushed at the end
        {"row_id": "perc#0/m/1100/partial/14", **ident, "final": True,
         "window_start_ms": 1100, "window_end_ms": 1200, "records": 4, "predictions": 1,
         "outcomes": 0, "unlabeled": 1, "dead_letters": 3, "mistakes": 0,
         "mistake_rate": None, "loss_sum": 0.0, "avg_loss": None, "delay_p50_ms": None,
         "delay_p99_ms": None, "pending": 1, "n_support_vectors": 3, "total_records": 14,
         "total_predictions": 6, "total_outcomes": 4, "total_unlabeled": 1,
         "total_dead_letters": 5, "total_mistakes": 3, "total_mistake_rate": 75.0,
         "total_loss_sum": 5.0, "total_avg_loss": 1.25, **w1},
    ]
    assert all(r["seconds"] >= 0 for r in out.metrics)


def test_flush_leaves_the_window_open() -> None:
    e = StreamEngine(spec())
    recs = hand_stream()
    _, states = reference_outputs(recs[:7], spec())
    st = states["perc#0"]
    before = e.encode_state(st)
    (row,) = e.flush_metrics(st)
    assert (row["row_id"], row["final"], row["records"]) == ("perc#0/m/100/partial/7", True, 2)
    assert e.encode_state(st) == before
    rest, _ = reference_outputs(recs[7:], spec(), states)
    assert [r["row_id"] for r in rest.metrics] == ["perc#0/m/100"]
    assert rest.metrics[0]["records"] == 5  # the whole window, flush or not


def test_percentiles_nearest_rank() -> None:
    assert nearest_rank([5, 7, 20, 100], 50) == 7
    assert nearest_rank([5, 7, 20, 100], 99) == 100
    assert nearest_rank(list(range(1, 201)), 99) == 198
    assert nearest_rank([3], 50) == 3
    assert nearest_rank([], 50) is None


def test_regression_outcomes() -> None:
    cfg = LearnerConfig("sq", "oks", {"loss": "square"})
    recs = [rec(0, 0, "a", "? 1:1"), rec(1, 5, "b", "0.5 2:1"), rec(2, 9, "a", "label:2")]
    out, _ = reference_outputs(recs, spec(configs=(cfg,), task="regression"), flush=True)
    o = out.outcomes
    assert [(r["event_id"], r["mistake"], r["delay_ms"]) for r in o] == [
        ("b", None, 0), ("a", None, 9)]
    for r in o:
        assert r["predicted"] == r["score"]
        assert r["loss"] == (r["score"] - r["label"]) ** 2
    (m,) = out.metrics
    assert (m["mistakes"], m["mistake_rate"]) == (None, None)
    assert m["loss_sum"] == math.fsum(r["loss"] for r in o)


def test_learner_rejection_is_a_dead_letter() -> None:
    # CSV without n_features: the first row fixes the learner's dimension
    s = spec(fmt="csv", n_features=None)
    recs = [rec(0, 0, "a", "1,2,?"), rec(1, 1, "b", "1,2,3,1"), rec(2, 2, "c", "1,2,3,?"),
            rec(3, 3, "a", "label:1"), rec(4, 4, "d", "3,4,-1")]
    out, states = reference_outputs(recs, s)
    assert [(d["line"], d["stage"], d["reason"]) for d in out.dead_letters] == [
        (1, "learn", "learner rejected the row: perceptron: expected 2 features (fixed by the "
                     "first example), got 3"),
        (2, "learn", "learner rejected the row: perceptron: expected 2 features (fixed by the "
                     "first example), got 3")]
    assert [r["event_id"] for r in out.outcomes] == ["a", "d"]
    c = states["perc#0"].counts()
    assert (c["predictions"], c["outcomes"], c["dead_letters"]) == (2, 2, 2)


def test_a_label_for_a_rejected_event_says_so() -> None:
    """A label for an event the learner refused is ``label for rejected event id`` (it read
    as an early label, ``unknown``): the id is remembered for a ttl as a resolved one is,
    then forgotten; the same id again within it is a duplicate. Memory stays bounded, and
    the state round-trips with the id remembered."""
    s = spec(fmt="csv", n_features=None)
    recs = [rec(0, 0, "a", "1,2,?"), rec(1, 1, "b", "1,2,3,?"), rec(2, 2, "b", "label:1"),
            rec(3, 3, "c", "1,2,3,1"), rec(4, 4, "c", "label:-1"), rec(5, 5, "b", "3,4,?"),
            rec(6, 2000, "b", "label:1"), rec(7, 2001, "a", "label:1")]
    out, states = reference_outputs(recs, s)
    assert [(d["event_id"], d["stage"], d["reason"].split(":")[0]) for d in out.dead_letters] \
        == [("b", "learn", "learner rejected the row"),
            ("b", "join", "label for rejected event id"),
            ("c", "learn", "learner rejected the row"),
            ("c", "join", "label for rejected event id"),
            ("b", "join", "duplicate event id"),
            ("b", "join", "label for unknown event id"),  # a ttl later: forgotten
            ("a", "join", "label for expired event id")]
    st = states["perc#0"]
    assert not st.resolved.keys() & {"b", "c"} and len(st.forget) == len(st.resolved) == 1
    c = st.counts()
    assert (c["predictions"], c["dead_letters"], c["pending"], c["unlabeled"]) == (1, 7, 0, 1)
    # cut right after the refusal: the restored state knows the id
    e = StreamEngine(s)
    _, mid = reference_outputs(recs[:2], s)
    again = e.decode_state(e.encode_state(mid["perc#0"]))
    rest, _ = reference_outputs(recs[2:3], s, {"perc#0": again})
    assert [d["reason"] for d in rest.dead_letters] == ["label for rejected event id"]


# -- against the learner itself -------------------------------------------------------------------


def delayed_stream(seed: int, n: int, d: int = 4, p_labelled: float = 0.2,
                   p_never: float = 0.0, max_delay: int = 400) -> list[SourceRecord]:
    """Events every 10 ms, a fraction labelled at once, the others labelled after a random
    delay (or never); LIBSVM values with a few decimals."""
    rng = np.random.default_rng(seed)
    timed: list[tuple[int, int, str, str]] = []
    for i in range(n):
        t = 10 * i
        x = " ".join(f"{j + 1}:{v:.3f}" for j, v in enumerate(rng.normal(size=d)) if v > -0.8)
        y = "+1" if rng.random() < 0.5 else "-1"
        if rng.random() < p_labelled:
            timed.append((t, 0, f"e{i}", f"{y} {x}"))
            continue
        timed.append((t, 0, f"e{i}", f"? {x}"))
        if rng.random() >= p_never:
            timed.append((t + int(rng.integers(1, max_delay)), 1, f"e{i}", f"label:{y}"))
    timed.sort(key=lambda r: (r[0], r[1]))
    return [rec(o, t, k, v) for o, (t, _, k, v) in enumerate(timed)]


@pytest.mark.parametrize("learner", [("bogd", {"budget": 20}), ("pa-i", {}),
                                     ("perceptron", {})])
def test_delayed_labels_equal_the_learner_in_label_order(learner: tuple[str, dict]) -> None:
    cfg = LearnerConfig("m", learner[0], learner[1])
    recs = delayed_stream(1, 300, d=4)
    out, states = reference_outputs(recs, spec(configs=(cfg,), n_features=4,
                                               label_ttl_ms=10**6))
    engine_state = states["m#0"].learner.get_state()  # type: ignore[union-attr]

    # the same calls made directly on a learner: predict on arrival, learn at the label
    e = StreamEngine(spec(configs=(cfg,), n_features=4))
    m = cfg.make(0, 0)
    only_learn = cfg.make(0, 0)
    xs: dict[str, np.ndarray] = {}
    scores, learnt = [], []
    for r in recs:
        p = routed(e, r)
        if p.label_only:
            m.learn_one(xs[p.event_id], p.y)
            only_learn.learn_one(xs[p.event_id], p.y)
            learnt.append(p.event_id)
        elif p.y is None:
            assert p.x is not None
            xs[p.event_id] = p.x
            scores.append(m.predict_one(p.x))
        else:
            scores.append(m.predict_one(p.x))
            m.learn_one(p.x, p.y)
            only_learn.learn_one(p.x, p.y)
            learnt.append(p.event_id)
    assert [r["score"] for r in out.predictions] == scores
    assert [r["event_id"] for r in out.outcomes] == learnt
    assert len(learnt) == 300
    assert same_state(m.get_state(), engine_state)
    assert same_state(only_learn.get_state(), engine_state)


# -- counts, identity, replay ---------------------------------------------------------------------


def mixed_stream(seed: int, n: int = 240) -> list[SourceRecord]:
    """Delayed labels with everything that can go wrong: labels that never come (expire),
    come twice, or name unknown ids, duplicate event ids, malformed records, keyless records
    and a labels topic; two partitions of events merged with the labels partition."""
    rng = np.random.default_rng(seed)
    parts: dict[tuple[str, int], list[tuple[int, str | None, str]]] = {
        ("ev", 0): [], ("ev", 1): [], ("lab", 0): []}
    for i in range(n):
        t = 7 * i
        part = ("ev", i % 2)
        x = " ".join(f"{j + 1}:{v:.2f}" for j, v in enumerate(rng.normal(size=3)))
        u = rng.random()
        eid = f"u{i % 3}/e{i}"
        if u < 0.05:
            parts[part].append((t, eid, "? 1:x"))  # malformed
        elif u < 0.08:
            parts[part].append((t, None, f"? {x}"))  # no key
        elif u < 0.12:
            parts[part].append((t, f"u0/e{max(i - 1, 0)}", f"? {x}"))  # duplicate id
        elif u < 0.3:
            parts[part].append((t, eid, f"{'+1' if u < 0.2 else '-1'} {x}"))
        else:
            parts[part].append((t, eid, f"? {x}"))
            v = rng.random()
            y = "1" if v < 0.5 else "-1"
            delay = int(rng.integers(1, 100 if v < 0.1 else 300))
            if v < 0.8:
                parts[("lab", 0)].append((t + delay, eid, y))
            if v < 0.1:
                parts[("lab", 0)].append((t + delay + 5, eid, f"label:{y}"))  # again
            elif v > 0.95:
                parts[("lab", 0)].append((t + 3, f"u1/nope{i}", y))  # unknown
    out = []
    for (topic, p), rows in parts.items():
        rows.sort(key=lambda r: r[0])
        out.append([rec(o, t, k, v, topic, p) for o, (t, k, v) in enumerate(rows)])
    return merge_group(out)


def mixed_spec(configs: tuple[Any, ...] = (PERCEPTRON,), **kw: Any) -> LiveSpec:
    return spec(configs=configs, labels_topic="lab", label_ttl_ms=150,
                metrics_window_ms=200, **kw)


@pytest.mark.parametrize("key_by", [None, "id-prefix"])
def test_counts_add_up(key_by: str | None) -> None:
    configs = (PERCEPTRON, LearnerConfig("b", "bogd", {"budget": 5}))
    recs = mixed_stream(3)
    out, states = reference_outputs(recs, mixed_spec(configs, key_by=key_by))
    e = StreamEngine(mixed_spec(configs, key_by=key_by))
    covered: dict[tuple[str, str, int, int], int] = {}
    for r in out.predictions:
        covered[(r["key"], r["topic"], r["partition"], r["offset"])] = 1
    for r in out.outcomes:
        covered[(r["key"], r["label_topic"], r["label_partition"], r["label_offset"])] = 1
    dl_keys = {(d["key"], d["row_id"].split("/")[1], int(d["row_id"].split("/")[2]), d["line"])
               for d in out.dead_letters}
    n_routed = n_parse_dead = 0
    for r in recs:
        res = e.route(r)
        if isinstance(res, dict):
            n_parse_dead += 1
            assert (None, r.topic, r.partition, r.offset) in dl_keys
            continue
        for key, _ in res:
            n_routed += 1
            assert ((key, r.topic, r.partition, r.offset) in covered
                    or (key, r.topic, r.partition, r.offset) in dl_keys), (key, r)
    assert n_parse_dead > 5
    assert len({d["row_id"] for d in out.dead_letters}) == len(out.dead_letters)
    for name in ("predictions", "outcomes", "unlabeled"):
        ids = [r["row_id"] for r in out[name]]
        assert len(set(ids)) == len(ids), name
    tot = {k: sum(st.counts()[k] for st in states.values()) for k in (
        "records", "predictions", "outcomes", "unlabeled", "pending", "learn_rejected",
        "dead_letters")}
    assert tot["records"] == n_routed
    assert tot["predictions"] == len(out.predictions)
    assert tot["outcomes"] == len(out.outcomes)
    assert tot["unlabeled"] == len(out.unlabeled) > 0
    assert tot["dead_letters"] == len(out.dead_letters) - n_parse_dead
    assert tot["predictions"] == (tot["outcomes"] + tot["unlabeled"] + tot["pending"]
                                  + tot["learn_rejected"])
    reasons = {d["reason"] for d in out.dead_letters if d["stage"] == "join"}
    assert reasons == {"duplicate label", "label for unknown event id", "duplicate event id",
                       "label for expired event id"}
    if key_by is not None:
        assert len(states) == 6 and {st.entity for st in states.values()} == {"u0", "u1", "u2"}


def test_rows_match_the_schemas() -> None:
    import pyarrow as pa
    out, _ = reference_outputs(mixed_stream(4), mixed_spec(key_by="id-prefix"), flush=True)
    schemas = stream_schemas()
    for name, rows in out.items():
        assert rows, name
        table = pa.Table.from_pylist(rows, schema=schemas[name])
        assert table.num_rows == len(rows)
        assert set(table.column_names) == set(rows[0]), name


def test_applied_offsets_skip_replayed_records() -> None:
    recs = mixed_stream(5)
    s = mixed_spec()
    full, _ = reference_outputs(recs, s)
    e = StreamEngine(s)
    cut = 150
    head, states = reference_outputs(recs[:cut], s)
    saved = {k: e.encode_state(st) for k, st in states.items()}
    # a restart resumes every partition a little before the snapshot: those records are skipped
    resumed = {k: e.decode_state(b) for k, b in saved.items()}
    tail, after = reference_outputs(recs[cut - 20:], s, resumed)
    replayed_models = sum(1 for r in recs[cut - 20:cut] if isinstance(e.route(r), list))
    assert sum(st.skipped for st in after.values()) == replayed_models > 0

    def dedup(*outs: LiveOutputs) -> dict[str, list[str]]:
        res: dict[str, dict[str, str]] = {}
        for o in outs:
            for name, rows in o.items():
                for r in rows:
                    res.setdefault(name, {})[r["row_id"]] = repr(
                        {k: v for k, v in r.items() if k not in NONDETERMINISTIC})
        return {n: sorted(v.values()) for n, v in res.items()}

    assert dedup(head, tail) == dedup(full)
    # the skipped records produce no rows at all but route-level dead letters
    again = LiveOutputs()
    for r in recs[:cut]:
        res = e.route(r)
        if isinstance(res, list):
            for key, p in res:
                e.process(key, after[key], p, again)
    assert len(again) == 0


@pytest.mark.parametrize("cfg", [
    LearnerConfig("bogd", "bogd", {"budget": 10, "variant": "p1"}),
    LearnerConfig("bpas", "bpa-s", {"budget": 10}),
    LearnerConfig("perc", "perceptron", {}),
    LearnerConfig("ea2oks", "ea2oks", {}),
    LearnerConfig("oks", "oks", {}),
], ids=lambda c: c.label)
def test_state_round_trip_is_bit_identical(cfg: LearnerConfig) -> None:
    recs = mixed_stream(6)
    s = mixed_spec((cfg,), key_by="id-prefix")
    e = StreamEngine(s)
    full, final = reference_outputs(recs, s, flush=True)
    for cut in (1, 97, 171):
        head, states = reference_outputs(recs[:cut], s)
        if cut > 1:
            assert any(st.pending for st in states.values())
        blobs = {k: e.encode_state(st) for k, st in states.items()}
        restored = {k: e.decode_state(b) for k, b in blobs.items()}
        assert {k: e.encode_state(st) for k, st in restored.items()} == blobs
        tail, ends = reference_outputs(recs[cut:], s, restored, flush=True)
        assert comparable(joined(head, tail)) == comparable(full)
        assert ends.keys() == final.keys()
        for k, st in ends.items():
            assert same_state(st.learner.get_state(),  # type: ignore[union-attr]
                              final[k].learner.get_state()), k  # type: ignore[union-attr]
            assert st.counts() == final[k].counts()


def test_round_trip_between_a_prediction_and_its_label() -> None:
    """OKS draws its kernel when it scores; a label right after its prediction must not reuse
    that draw from the learner's score cache, which a restored state would not have."""
    cfg = LearnerConfig("oks", "oks", {})
    s = spec(configs=(cfg,), n_features=2)
    e = StreamEngine(s)
    recs = []
    for i in range(6):
        recs += [rec(2 * i, 10 * i, f"e{i}", f"? 1:{i % 3 - 1} 2:{0.5 * i}"),
                 rec(2 * i + 1, 10 * i + 1, f"e{i}", f"label:{1 if i % 2 else -1}")]
    full, final = reference_outputs(recs, s)
    for cut in range(1, len(recs), 2):  # after a prediction, before its label
        head, states = reference_outputs(recs[:cut], s)
        restored = {k: e.decode_state(e.encode_state(st)) for k, st in states.items()}
        tail, ends = reference_outputs(recs[cut:], s, restored)
        assert comparable(joined(head, tail)) == comparable(full)
        assert same_state(ends["oks#0"].learner.get_state(),  # type: ignore[union-attr]
                          final["oks#0"].learner.get_state()), cut  # type: ignore[union-attr]


def test_decode_rejects_other_bytes() -> None:
    e = StreamEngine(spec())
    with pytest.raises(ValueError, match="not a kernelstream"):
        e.decode_state(b"KSS\x01....")
    good = e.encode_state(e.new_state("perc#0"))
    with pytest.raises(ValueError, match="version"):
        e.decode_state(good[:4] + b"\x09" + good[5:])
    with pytest.raises(KeyError, match="no configuration"):
        e.new_state("other#0")


def test_merge_group_orders_by_time_topic_offset() -> None:
    a = [rec(5, 5, "k", "x", "ev"), rec(6, 3, "k", "x", "ev"), rec(7, 9, "k", "x", "ev")]
    b = [rec(0, 5, "k", "x", "lab"), rec(1, 6, "k", "x", "lab")]
    got = [(r.topic, r.offset) for r in merge_group([a, b])]
    # equal times: the topic index decides (not the offset); a partition keeps its offset
    # order even when its timestamps go back
    assert got == [("ev", 5), ("ev", 6), ("lab", 0), ("lab", 1), ("ev", 7)]


def test_engine_does_not_import_beam_or_pyarrow() -> None:
    code = ("import sys, kernelstream.engine.live.engine; "
            "print('apache_beam' in sys.modules, 'pyarrow' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert res.stdout.split() == ["False", "False"]


def _as_version_1(blob: bytes) -> bytes:
    """The version-1 bytes of a version-2 state: remembered ids back in the JSON."""
    import json
    import struct

    from kernelstream.engine.live.state import decode_state

    st = decode_state(blob, 10**9)
    (nj,) = struct.unpack_from("<I", blob, 5)
    meta = json.loads(blob[9:9 + nj])
    (na,) = struct.unpack_from("<I", blob, 9 + nj)
    arrays, learner = blob[13 + nj:13 + nj + na], blob[13 + nj + na:]
    m = meta.pop("n_resolved")
    meta["resolved"] = [[eid, st.resolved[eid], at] for at, eid in st.forget]
    ids = sum(len(eid.encode()) for _, eid in st.forget)
    arrays = arrays[:len(arrays) - (13 * m + ids)]  # i8 + u1 + i4 per id, then the bytes
    js = json.dumps(meta, separators=(",", ":")).encode()
    return b"".join((blob[:4], bytes([1]), struct.pack("<I", len(js)), js,
                     struct.pack("<I", len(arrays)), arrays, learner))


def test_state_keeps_remembered_ids_in_binary_and_reads_version_1() -> None:
    e = StreamEngine(spec())
    _, states = reference_outputs(hand_stream(), spec())
    st = states["perc#0"]
    st.remember(10**12, "é/ü\n2", 2)  # any UTF-8 id survives
    assert len(st.forget) >= 2
    blob = e.encode_state(st)
    assert blob[4] == 2 and b"\xc3\xa9/\xc3\xbc\n2" in blob
    back = e.decode_state(blob)
    assert back.resolved == st.resolved and list(back.forget) == list(st.forget)
    assert e.encode_state(back) == blob
    old = e.decode_state(_as_version_1(blob))
    assert old.resolved == st.resolved and list(old.forget) == list(st.forget)
    assert e.encode_state(old) == blob


def test_a_cut_state_encodes_the_moment_it_was_cut() -> None:
    e = StreamEngine(spec())
    recs = hand_stream()
    _, states = reference_outputs(recs[:7], spec())
    st = states["perc#0"]
    before = e.encode_state(st)
    cut = e.cut_state(st)
    reference_outputs(recs[7:], spec(), states)  # the live state goes on changing
    assert e.encode_state(st) != before
    assert cut.encode() == before


def test_column_blocks_make_the_table_of_their_rows() -> None:
    """Rows.table (column blocks gathered at once) equals pyarrow's table of the row dicts:
    per-record and run blocks, several models interleaved, regression's null mistakes."""
    import pyarrow as pa
    schemas = stream_schemas()
    for task, cfgs in (("classification", (PERCEPTRON, LearnerConfig("b2", "bogd", {}))),
                       ("regression", (LearnerConfig("sq", "oks", {"loss": "square"}),))):
        s = mixed_spec(cfgs, key_by="id-prefix", task=task)
        runs = [rec(10_000 + i, 10_000 + i, f"u{i % 2}/r{i}", f"{i % 2} 1:{i % 3}")
                for i in range(40)]  # labelled events: learnt in runs, rows as arrays
        out, _ = reference_outputs(mixed_stream(5) + runs, s, chunk=9)
        for name in ("predictions", "outcomes"):
            rows = out[name]
            assert len(rows.parts) > 3, name
            want = pa.Table.from_pylist(list(rows), schema=schemas[name])
            assert rows.table(schemas[name]).equals(want), (task, name)


def test_remembered_ids_encode_once_and_as_a_full_encoding_would() -> None:
    """Cuts encode only the ids remembered since the previous cut and drop the forgotten
    ones (whole chunks and part of one): every snapshot's bytes equal those of a state that
    encodes all its ids at once, and decode to the live state's ids."""
    s = spec(label_ttl_ms=40)
    e = StreamEngine(s)
    st = e.new_state("perc#0")
    recs = []
    for i in range(300):  # labelled events and delayed labels; some ids not ASCII
        eid = f"é{i}" if i % 7 == 0 else f"e{i}"
        if i % 3:
            recs.append(rec(len(recs), i, eid, f"{'+1' if i % 2 else '-1'} 1:{i % 5} 2:1"))
        else:
            recs.append(rec(len(recs), i, eid, f"? 1:{i % 5} 3:1"))
            recs.append(rec(len(recs), i + 1, eid, f"label:{'1' if i % 2 else '-1'}"))
    cuts = 0
    for lo in range(0, len(recs), 37):
        reference_outputs(recs[lo:lo + 37], s, {"perc#0": st})
        cut = e.cut_state(st)
        fresh = e.decode_state(cut.encode())
        assert list(fresh.forget) == list(st.forget) and fresh.resolved == st.resolved
        whole = e.decode_state(cut.encode())  # no chunks yet: encodes every id at once
        whole.learner, whole.seconds = st.learner, st.seconds
        assert e.encode_state(whole) == cut.encode()
        cuts += 1
    segs = st.forget.segs
    assert len(segs) < cuts and segs[0].head > 0  # forgotten segments went, one in part


# -- sparse rows --------------------------------------------------------------------------------


SPARSE_CONFIGS = (LearnerConfig("bpas", "bpa-s", {"budget": 10}),
                  LearnerConfig("b", "bogd", {"budget": 5}))


def test_sparse_rows_agree_with_dense_rows() -> None:
    """The same stream with CSR features (rows='sparse') and dense ones: the same predictions,
    outcomes and counts, scores equal to round-off."""
    recs = mixed_stream(8)
    outs = {rows: reference_outputs(recs, mixed_spec(SPARSE_CONFIGS, rows=rows), flush=True)
            for rows in ("sparse", "dense")}
    (sp, sst), (dn, dst) = outs["sparse"], outs["dense"]
    assert isinstance(routed(StreamEngine(spec(rows="sparse")), rec(0, 0, "e", "? 1:1")).x, CSR)
    assert sst.keys() == dst.keys()
    assert [st.counts() for st in sst.values()] == [st.counts() for st in dst.values()]
    for a, b in ((sp.predictions, dn.predictions), (sp.outcomes, dn.outcomes)):
        assert [r["event_id"] for r in a] == [r["event_id"] for r in b]
        assert np.allclose([r["score"] for r in a], [r["score"] for r in b], rtol=1e-9,
                           atol=1e-12)


def test_sparse_pending_rows_round_trip_bit_identically() -> None:
    recs = mixed_stream(9)
    s = mixed_spec(SPARSE_CONFIGS, rows="sparse")
    e = StreamEngine(s)
    full, _ = reference_outputs(recs, s, flush=True)
    head, states = reference_outputs(recs[:131], s)
    assert any(st.pending for st in states.values())
    blobs = {k: e.encode_state(st) for k, st in states.items()}
    assert all(b[4] == 3 for b in blobs.values())  # the sparse format, refused by old builds
    restored = {k: e.decode_state(b) for k, b in blobs.items()}
    assert {k: e.encode_state(st) for k, st in restored.items()} == blobs
    tail, _ = reference_outputs(recs[131:], s, restored, flush=True)
    assert comparable(joined(head, tail)) == comparable(full)


def test_auto_rows_are_sparse_for_wide_libsvm_and_refuse_past_n_features() -> None:
    assert spec(n_features=10**9).sparse and not spec(n_features=100).sparse
    assert not spec(fmt="csv", n_features=None).sparse
    e = StreamEngine(spec(n_features=2**31 - 1))
    x = routed(e, rec(0, 0, "e", "? 3:1 2147483647:0.5")).x
    assert isinstance(x, CSR) and x.n_features == 2**31 - 1 and x.nnz == 2
    assert "index exceeds n_features" in dead(StreamEngine(spec(n_features=10**4)),
                                              rec(1, 0, "e", "? 20000:1"))["reason"]


def test_hashed_features_fix_the_width() -> None:
    s = spec(n_features=None, hash_features=10)
    assert s.width == 1024 and not s.sparse and not s.bulk
    x = routed(StreamEngine(s), rec(0, 0, "e", "? 3:1 2147483647:0.5")).x
    assert isinstance(x, np.ndarray) and x.shape == (1024,) and x.sum() == 1.5
    wide = StreamEngine(spec(n_features=None, hash_features=20))
    xs = routed(wide, rec(0, 0, "e", "? 3:1 2147483647:0.5")).x
    assert isinstance(xs, CSR) and xs.n_features == 2**20 and xs.data.sum() == 1.5
    with pytest.raises(ValueError, match="LIBSVM messages"):
        spec(fmt="csv", n_features=None, hash_features=12)


def _check_documented(section_title: str, heading: str, schemas: dict[str, Any]) -> None:
    """docs/outputs.md's section ``section_title`` has a table per output (``### {heading}``
    with the output's name) listing every column of its schema in order, with the type
    pyarrow prints and whether it may be null: the page cannot drift from the schemas."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "outputs.md").read_text()
    section = text.split(f"## {section_title}", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, list[tuple[str, str, bool]]] = {}
    pattern = r"^### " + heading.replace("NAME", r"`(\w+)/`") + r"\n(.*?)(?=^### |\Z)"
    for m in re.finditer(pattern, section, re.M | re.S):
        documented[m[1]] = [(c, t, n == "yes") for c, t, n in re.findall(
            r"^\| `(\w+)` \| ([\w<>: ]+?) \| (yes|no) \|", m[2], re.M)]
    assert documented.keys() == schemas.keys()
    for name, schema in schemas.items():
        # as a reader of the files sees it: Parquet names a list's items "element" (the schema
        # "item"), so pq.read_table prints list<element: double>
        assert documented[name] == [(f.name, str(f.type).replace("list<item:", "list<element:"),
                                     f.nullable) for f in schema], name


def test_every_stream_column_is_documented() -> None:
    """Outputs of a live stream: every column of ``stream_schemas``."""
    _check_documented("Outputs of a live stream", "Stream NAME", stream_schemas())


def test_every_replay_column_is_documented() -> None:
    """Outputs of a replay: every column of the replay's outputs (the metrics table lacked
    its no-skill and regression columns)."""
    from kernelstream.engine.replay import outputs

    _check_documented("Outputs of a replay", "NAME", outputs.SCHEMAS)


def test_a_router_takes_the_label_map_it_is_given() -> None:
    """``StreamRouter(spec, labels=...)`` maps every label token through the map given (a
    stream's first read keeps the tokens so: ``pipelines.live.stream_width``), on the label
    records' fast path, the one-by-one path and a labelled event alike; by default the
    stream's own map."""
    from kernelstream.engine.live.routing import StreamRouter

    seen: list[str] = []

    def labels(tok: str) -> float:
        seen.append(tok)
        return 0.25

    router = StreamRouter(spec(), labels=labels)
    recs = [rec(0, 1, "e1", "label:yes"), rec(1, 2, "e2", "label: no "),
            rec(2, 3, "e3", "maybe 1:1")]
    ys = []
    for r in recs:
        out = router.route(r)
        assert isinstance(out, list), out
        ys.append(out[0][1].y)
    assert ys == [0.25] * 3 and [t.strip() for t in seen] == ["yes", "no", "maybe"]
    out = StreamRouter(spec()).route(rec(0, 1, "e1", "label:yes"))
    assert isinstance(out, dict) and "unknown label 'yes'" in out["reason"]
