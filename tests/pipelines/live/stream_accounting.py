"""The accounting check of a ``kernelstream stream`` output directory, for any test that runs
the stream (``docs/stream-accounting.md``):

    from stream_accounting import assert_accounting

    r = run_cli(argv)                 # the last run on OUT ended (its summary.json is there)
    totals = assert_accounting(out)   # raises AssertionError, naming the count that is off

It asserts, from the outputs alone:

* the last run's summary: its identities (``engine.live.accounting.identities``, with
  ``C = len(summary["configs"])``), and its row counts equal to the rows of its own published
  files (``part-e*-<summary["run"]>.parquet``);
* ``summary["totals"]`` (every run on the checkpoint, crashed ones included): its identities,
  ``pending_start == 0``, and its row counts (``predictions``, ``labelled``, ``outcomes``,
  ``unlabeled``, ``metrics``, ``dead_letters``, ``parse_dead_letters``, ``rejected``) equal to
  the rows of every published file in ``OUT``, no ``row_id`` published twice;
* with a checkpoint: the last snapshot's ``info["totals"]["all"]`` equals those totals, and so
  do the sums of its models' own counters (``ModelState``: records processed and skipped,
  predictions, outcomes, unlabeled, pending, refused labels, dead letters of the models).

``summary``: the summary document to check (default: ``OUT/summary.json``). To check a
checkpoint whose last run crashed (no summary of it), pass ``summary={}`` and ``checkpoint``:
the snapshot's totals are checked against the files instead (after a restart has published
what the crash left committed but unpublished, or with no crash between commit and publish).
Returns the totals checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from kernelstream.engine.live.accounting import FIELDS, violations
from kernelstream.engine.live.rows import OUTPUTS
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.engine.live.state import decode_state

ROW_COUNTS = ("predictions", "labelled", "outcomes", "unlabeled", "metrics", "dead_letters",
              "parse_dead_letters", "rejected")


def file_counts(out: Path, run: str | None = None) -> dict[str, int]:
    """Rows of the published files (``run``: only that run's), with ``labelled``,
    ``parse_dead_letters`` and ``rejected`` counted from their columns; asserts that no
    ``row_id`` is there twice."""
    n = dict.fromkeys(ROW_COUNTS, 0)
    for name in OUTPUTS:
        ids: list[str] = []
        for f in sorted((out / name).glob(f"part-e*-{run or '*'}.parquet")):
            t = pq.read_table(f)
            ids += t.column("row_id").to_pylist()
            n[name] += t.num_rows
            if name == "predictions":
                n["labelled"] += sum(1 for v in t.column("labelled").to_pylist() if v)
            elif name == "dead_letters":
                for stage, pos in zip(t.column("stage").to_pylist(),
                                      t.column("position").to_pylist(), strict=True):
                    n["parse_dead_letters"] += stage == "parse"
                    n["rejected"] += stage == "learn" and pos is not None
        assert len(ids) == len(set(ids)), f"{name}: a row_id published twice"
    return n


def _check(doc: dict[str, Any], configs: int, what: str) -> None:
    missing = [f for f in FIELDS if doc.get(f) is None]
    assert not missing, f"{what}: counts missing: {missing}"
    bad = violations(doc, configs)
    assert not bad, f"{what}: " + "; ".join(bad)


# the accounting's names of the models' counters (ModelState.counts())
_COUNTERS = (("processed", "records"), ("skipped", "skipped"), ("predictions", "predictions"),
             ("outcomes", "outcomes"), ("unlabeled", "unlabeled"), ("pending", "pending"),
             ("rejected", "learn_rejected"), ("model_dead_letters", "dead_letters"))


def _model_sums(ckpt: Path) -> dict[str, int]:
    """The counters of every model in the last snapshot, summed (engine.live.accounting's
    names)."""
    sums = dict.fromkeys(("processed", "skipped", "predictions", "outcomes", "unlabeled",
                          "pending", "rejected", "model_dead_letters"), 0)
    with SnapshotView.open(ckpt) as view:
        for _, data in view.items():
            c = decode_state(data, 1).counts()
            for ours, theirs in _COUNTERS:
                sums[ours] += c[theirs]
    return sums


def assert_accounting(out: Path, summary: dict[str, Any] | None = None,
                      checkpoint: Path | None = None) -> dict[str, Any]:
    """Assert that the counts of ``out`` add up (module docstring); the totals checked."""
    out = Path(out)
    if summary is None:
        summary = json.loads((out / "summary.json").read_text())
    ckpt = checkpoint if checkpoint is not None else (
        Path(summary["checkpoint"]) if summary.get("checkpoint") else None)
    info = None
    if ckpt is not None:
        with SnapshotView.open(ckpt) as view:
            info = view.info()
    if summary:
        configs = len(summary["configs"])
        totals = summary["totals"]
        assert totals is not None, "the summary has no totals (a snapshot older than them?)"
        if summary["pending_start"] is not None:
            _check(summary, configs, "the run's summary")
        mine = file_counts(out, summary["run"])
        assert {k: summary[k] for k in ROW_COUNTS} == mine, "the run's files"
    else:
        assert info is not None, "no summary: pass the checkpoint"
        configs = len(info["configs"])
        totals = info["totals"]["all"]
    _check(totals, configs, "totals")
    assert totals["pending_start"] == 0, totals
    files = file_counts(out)
    assert {k: totals[k] for k in ROW_COUNTS} == files, (
        f"totals vs every published file: {totals} vs {files}")
    if info is not None and ckpt is not None:
        snap = info["totals"]["all"]
        assert {f: snap[f] for f in FIELDS} == {f: totals[f] for f in FIELDS}, (
            f"the last snapshot's totals differ: {snap} vs {totals}")
        sums = _model_sums(ckpt)
        sums["model_dead_letters"] += totals["parse_dead_letters"]
        # the models forgotten (--forget-entities-after) are in no snapshot: their counters
        gone = totals.get("forgotten") or {}
        for ours, theirs in _COUNTERS:
            if theirs != "pending":
                sums[ours] += int(gone.get(theirs) or 0)
        want = {k: totals[k] for k in ("processed", "skipped", "predictions", "outcomes",
                                       "unlabeled", "pending", "rejected")}
        want["model_dead_letters"] = totals["dead_letters"]
        assert sums == want, f"the snapshot's models count {sums}, the totals {want}"
    return dict(totals)
