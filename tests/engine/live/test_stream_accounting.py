"""The stream's accounting (``kernelstream.engine.live.accounting``) on small streams: the
counts a Committer keeps from the items it is handed (the reader's progress, each model's rows
and state), exact by hand, and the identities on streams with every kind of record, two
configurations and entities, refused rows, a restart and a replay."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from test_engine_events import PERCEPTRON, hand_stream, mixed_spec, mixed_stream, rec, spec

from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.accounting import (
    FIELDS,
    GONE,
    Accounting,
    identities,
    state_tally,
    violations,
)
from kernelstream.engine.live.engine import StreamEngine
from kernelstream.engine.live.parsing import LiveSpec
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.state import ModelState

BOGD = LearnerConfig("b", "bogd", {"budget": 5})


def feed(acct: Accounting, records: Sequence[SourceRecord], spec: LiveSpec,
         states: dict[str, ModelState], chunk: int = 40, picky: bool = False) -> None:
    """What a Committer is handed for ``records``, ``chunk`` a reader call: Route's dead
    letters, each model's rows then its state, then the call's progress (``picky``: new
    models' learners refuse to learn a row whose first feature is above 1)."""
    engine = StreamEngine(spec)
    for i in range(0, len(records), chunk):
        part = list(records[i:i + chunk])
        groups, dead = engine.route_many(part)
        acct.rows("dead_letters", dead)
        for key, parsed in groups.items():
            st = states.get(key)
            if st is None:
                st = states[key] = engine.new_state(key)
                if picky:
                    st.learner = {c.label: c for c in spec.configs}[st.config].make(
                        spec.seed, 0)
                    make_picky(st.learner)
            out = engine.process_many(key, st, parsed)
            for name, rows in out.items():
                acct.rows(name, rows)
            acct.state(key, st)
        acct.progress(len(part), len(part))


def make_picky(m: Any) -> None:
    """Make learner ``m`` refuse to learn some rows in ``learn_one`` (a label refused after
    its event was predicted: ``rejected``)."""
    learn_one = m.learn_one

    def picky(x: Any, y: float) -> Any:
        first = x.to_dense()[0, 0] if hasattr(x, "to_dense") else x[0]
        if first > 1.0:
            raise ValueError("picky: first feature above 1")
        return learn_one(x, y)

    m.learn_one = picky


def with_tail(recs: list[SourceRecord]) -> list[SourceRecord]:
    """``recs`` and then a few unlabelled events of each entity, left pending at the end."""
    t = max(r.timestamp_ms for r in recs) + 1
    return recs + [rec(j, t + j, f"u{j % 3}/tail{j}", "? 1:0.5 2:0.25", "ev", 2)
                   for j in range(6)]


def model_sums(states: dict[str, ModelState]) -> dict[str, int]:
    """The states' own counters, in the accounting's names."""
    c = [st.counts() for st in states.values()]
    return {"processed": sum(x["records"] for x in c), "skipped": sum(x["skipped"] for x in c),
            "predictions": sum(x["predictions"] for x in c),
            "outcomes": sum(x["outcomes"] for x in c),
            "unlabeled": sum(x["unlabeled"] for x in c),
            "pending": sum(x["pending"] for x in c),
            "rejected": sum(x["learn_rejected"] for x in c)}


def test_hand_worked_counts() -> None:
    """``hand_stream`` (test_engine_events): a, b, c, e, f predicted and d labelled at once
    (6 predictions, 1 labelled); labels of a, c, b joined (4 outcomes with d's); e expires;
    f waits; a duplicate label, two unknown ids, an expired id and a duplicate event id are
    dead letters."""
    acct = Accounting({})
    states: dict[str, ModelState] = {}
    feed(acct, hand_stream(), spec(), states, chunk=5)
    run = acct.run()
    assert run == {"offsets": 14, "records": 14, "parse_dead_letters": 0, "processed": 14,
                   "skipped": 0, "predictions": 6, "labelled": 1, "outcomes": 4,
                   "unlabeled": 1, "pending": 1, "pending_start": 0, "rejected": 0,
                   "dead_letters": 5, "metrics": 2, "forgotten": dict.fromkeys(GONE, 0)}
    assert acct.all() == run
    assert violations(run, 1) == []
    # the proposed "records = predictions + outcomes + dead letters" counts d twice
    assert run["predictions"] + run["outcomes"] + run["dead_letters"] == 15


@pytest.mark.parametrize("key_by", [None, "id-prefix"])
def test_identities_hold_on_every_kind_of_record(key_by: str | None) -> None:
    configs = (PERCEPTRON, BOGD)
    s = mixed_spec(configs, key_by=key_by)
    recs = with_tail(mixed_stream(5, n=300))
    acct = Accounting({})
    states: dict[str, ModelState] = {}
    feed(acct, recs, s, states, picky=True)
    run = acct.run()
    assert violations(run, 2) == []
    # every kind is there, so each identity is tested with all its terms
    for f in ("parse_dead_letters", "labelled", "unlabeled", "pending", "rejected"):
        assert run[f] > 0, f
    assert run["dead_letters"] > run["parse_dead_letters"] + run["rejected"]
    assert run["records"] == len(recs)
    # the rows' counts and the states' own counters agree
    assert {k: run[k] for k in model_sums(states)} == model_sums(states)
    if key_by is not None:
        assert len(states) == 6
    # a record is not one row: the user's first guess is off on this stream
    assert run["records"] != run["predictions"] + run["outcomes"] + run["dead_letters"]


def test_counts_continue_across_a_restart_and_a_replay() -> None:
    """The second run restores the states from the first one's snapshot (their counts in
    ``restored``) and reads again from 30 records before where the first stopped (a replay:
    those are skipped). Its ``all`` continues the first run's, and both add up."""
    s = mixed_spec((PERCEPTRON, BOGD), key_by="id-prefix")
    engine = StreamEngine(s)
    recs = with_tail(mixed_stream(8, n=300))
    k, replay = 200, 30
    first = Accounting({})
    states: dict[str, ModelState] = {}
    feed(first, recs[:k], s, states, picky=True)
    assert violations(first.run(), 2) == []
    snapshot = first.all()
    assert snapshot is not None

    restored = {}
    for key, st in states.items():
        back = engine.decode_state(engine.encode_state(st))
        back.restored = state_tally(back)  # as Learn.restore does
        make_picky(back.learner)
        restored[key] = back
    second = Accounting(snapshot)
    feed(second, recs[k - replay:], s, restored)
    run, total = second.run(), second.all()
    assert total is not None
    assert run["pending_start"] == snapshot["pending"] > 0
    assert violations(run, 2) == []
    assert violations(total, 2) == []
    parse_dead_replayed = sum(1 for r in recs[k - replay:k]
                              if isinstance(engine.route(r), dict))
    assert run["skipped"] == total["skipped"] == 2 * (replay - parse_dead_replayed) > 0
    assert total["records"] == len(recs) + replay
    # the states' counters, summed over every model, are the totals
    assert {f: total[f] for f in model_sums(restored)} == model_sums(restored)
    # and the rows are those of one uninterrupted run, plus the replayed parse dead letters
    one = Accounting({})
    feed(one, recs, s, {}, picky=True)
    whole = one.all()
    assert whole is not None
    for f in FIELDS:
        if f in ("records", "offsets", "skipped", "parse_dead_letters", "dead_letters"):
            extra = {"records": replay, "offsets": replay,
                     "skipped": total["skipped"]}.get(f, parse_dead_replayed)
            assert total[f] == whole[f] + extra, f
        elif f != "metrics":  # windows close at other records in chunks of another cut
            assert total[f] == whole[f], f


def test_a_wrong_count_breaks_an_identity() -> None:
    """Off by one anywhere but ``metrics`` (in no identity), and the check says so."""
    acct = Accounting({})
    feed(acct, mixed_stream(2, n=200), mixed_spec((PERCEPTRON, BOGD)), {}, picky=True)
    doc = acct.run()
    assert violations(doc, 2) == []
    assert violations(doc, 1)  # the wrong number of configurations
    for f in FIELDS:
        for delta in (-1, 1):
            bad = {**doc, f: doc[f] + delta}
            if f == "metrics" or (f == "offsets" and delta > 0):
                assert violations(bad, 2) == [], f  # more offsets than records: markers
            else:
                assert violations(bad, 2), (f, delta)
    # a rejected label counted as a plain dead letter: the last identity says so
    moved = {**doc, "rejected": doc["rejected"] - 1}
    assert [v.split(":")[0] for v in violations(moved, 2)] == [
        "predictions + pending_start == outcomes + unlabeled + pending + rejected"]
    assert next(name for name, _, _ in identities(doc, 2)) == "records <= offsets"


def test_refused_rows_with_and_without_a_prediction() -> None:
    """A feature record the learner refuses made no prediction (a dead letter without
    position: not ``rejected``); a label it refuses had one (``rejected``, with position)."""
    s = spec(fmt="csv", n_features=None)
    recs = [rec(0, 0, "a", "1,2,?"), rec(1, 1, "b", "1,2,3,1"), rec(2, 2, "c", "3,2,?"),
            rec(3, 3, "c", "label:1"), rec(4, 4, "a", "label:1")]
    acct = Accounting({})
    states: dict[str, ModelState] = {}
    feed(acct, recs, s, states, picky=True)
    run = acct.run()
    assert (run["predictions"], run["outcomes"], run["rejected"], run["dead_letters"]) == (
        2, 1, 1, 2)
    assert violations(run, 1) == []
    assert states["perc#0"].counts()["learn_rejected"] == 1


def test_a_snapshot_without_counts_leaves_the_totals_unknown() -> None:
    """Resumed from a snapshot written before these counts: no ``all``, no
    ``pending_start``; ``pending`` counts the models this run touched."""
    acct = Accounting(None)
    feed(acct, hand_stream(), spec(), {})
    run = acct.run()
    assert acct.all() is None and run["pending_start"] is None and run["pending"] == 1
