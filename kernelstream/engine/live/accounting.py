"""The accounting of a live stream: the counts that ``kernelstream stream``'s status file and
``summary.json`` carry, and the identities that tie them together, so that a run (or every
run on one checkpoint) can be checked from its outputs alone (``docs/stream-accounting.md``).

Counts (:data:`FIELDS`; rows are counted as the models make them, everything else from the
reader and from the models' states)

=====================  =====================================================================
``offsets``            offsets the reader moved past: its records plus offsets without one
                       (transaction markers, aborted or compacted records)
``records``            Kafka records read
``parse_dead_letters`` records that could not be parsed or routed: dead letters of stage
                       ``parse``, which reach no model
``processed``          (record, model) pairs the models applied: a parsed record goes to one
                       model per configuration (``-l``; with ``--key-by id-prefix`` that
                       configuration's model of the record's entity)
``skipped``            (record, model) pairs a model skipped as already applied (its offset at
                       or before ``ModelState.applied``: a replay after a restore); no row
``predictions``        prediction rows
``labelled``           of those, labelled events (``labelled`` = true): each is an outcome row
                       too
``outcomes``           outcome rows: the labelled events, and labels joined to a pending event
``unlabeled``          unlabeled rows: predictions whose label did not come within the TTL
``pending``            predictions still waiting for their label (every model, at the end)
``pending_start``      predictions that were pending when the run started (the resumed
                       snapshot's); 0 for all runs on a checkpoint together
``rejected``           labels of pending events the learner refused: dead letters of stage
                       ``learn`` with the prediction's ``position`` (``ModelState.learn_rejected``;
                       a feature record the learner refused has no position: it made no
                       prediction)
``dead_letters``       dead-letter rows (stages ``parse``, ``join``, ``learn``)
``metrics``            metrics rows (in no identity): one per closed window; a stream that
                       stops does not flush its open ones (a stop is a checkpoint: the
                       resuming run closes them); only the reference loop, whose input
                       ends for good, adds a partial row of each open window
=====================  =====================================================================

Identities (:func:`identities`; ``C`` = the number of configurations)

* ``records <= offsets``
* ``C * (records - parse_dead_letters) == processed + skipped``: every parsed record reaches
  each of its ``C`` models once;
* ``processed == predictions + outcomes - labelled + (dead_letters - parse_dead_letters)``:
  an applied pair gives a prediction (unlabelled event), a prediction and an outcome
  (labelled event), an outcome (label of a pending event) or one dead letter (stage ``join``
  or ``learn``);
* ``predictions + pending_start == outcomes + unlabeled + pending + rejected``: every
  prediction of an unlabelled event ends labelled, expired, refused or still pending, and a
  labelled event is a prediction and an outcome at once.

With ``C = 1``, no replay, no labelled event and no label record, the second and third read
``records == predictions + dead_letters``; in general a record is not one row.

A run's counts (:meth:`Accounting.run`) are what this run read and made; ``all``
(:meth:`Accounting.all`) adds those of the earlier runs on the same checkpoint as of the
snapshot the run resumed from (committed with every snapshot: ``info["totals"]["all"]``), so
after any sequence of runs, crashed ones included, the last snapshot's ``all`` counts every
published output file of the checkpoint's runs. Without a checkpoint every run starts anew
and ``all`` is the run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FIELDS = ("offsets", "records", "parse_dead_letters", "processed", "skipped", "predictions",
          "labelled", "outcomes", "unlabeled", "pending", "pending_start", "rejected",
          "dead_letters", "metrics")
# counts that add up over runs (pending and pending_start are states, not sums)
_ADDITIVE = tuple(f for f in FIELDS if f not in ("pending", "pending_start"))
_NONE = (0, 0, 0)
# what the models forgotten (--forget-entities-after) had counted, summed: how many, and their
# ModelState.counts() (pending is always 0 then); ``forgotten`` in run() and all()
GONE = ("models", "records", "skipped", "predictions", "outcomes", "unlabeled",
        "learn_rejected", "dead_letters")


def state_tally(st: Any) -> tuple[int, int, int]:
    """A model's ``(processed, skipped, pending)`` (``ModelState``)."""
    return st.records, st.skipped, len(st.pending)


def count_rows(name: str, rows: Any) -> dict[str, int]:
    """The counts ``rows`` of output ``name`` add (a list of row dicts or a ``Rows``)."""
    n = {name: len(rows)}
    if name == "predictions":
        n["labelled"] = (rows.count_true("labelled") if hasattr(rows, "count_true")
                         else sum(1 for r in rows if r["labelled"]))
    elif name == "dead_letters":
        n["parse_dead_letters"] = sum(1 for r in rows if r["stage"] == "parse")
        n["rejected"] = sum(1 for r in rows
                            if r["stage"] == "learn" and r["position"] is not None)
    return n


class Accounting:
    """The counts of one run as its items come (a Committer's), and of all runs on its
    checkpoint. ``base``: the ``all`` counts of the snapshot the run resumed from ({}: a run
    from the start; None: resumed from a snapshot that has none, written before these counts
    existed: then ``all``, ``pending`` and ``pending_start`` are unknown, None)."""

    def __init__(self, base: Mapping[str, Any] | None = None) -> None:
        self.base = None if base is None else {f: int(base.get(f) or 0) for f in FIELDS}
        self.counts = dict.fromkeys(FIELDS, 0)
        # each model's (processed, skipped, pending) when the Committer last saw its state
        self.models: dict[str, tuple[int, int, int]] = {}
        self.pending_delta = 0
        gone = (base or {}).get("forgotten") or {}
        self.gone_base = {f: int(gone.get(f) or 0) for f in GONE}
        self.gone = dict.fromkeys(GONE, 0)

    def progress(self, offsets: int, records: int) -> None:
        self.counts["offsets"] += offsets
        self.counts["records"] += records

    def rows(self, name: str, rows: Any) -> None:
        for k, v in count_rows(name, rows).items():
            self.counts[k] += v

    def state(self, key: str, st: Any) -> None:
        """A model's state as handed over: what it processed, skipped and left pending since
        it was last seen (first seen: since the run restored it, ``st.restored``, or since
        it was made)."""
        now = state_tally(st)
        before = self.models.get(key)
        if before is None:
            before = getattr(st, "restored", None) or _NONE
        self.models[key] = now
        self.counts["processed"] += now[0] - before[0]
        self.counts["skipped"] += now[1] - before[1]
        self.pending_delta += now[2] - before[2]

    def forget(self, key: str, counts: Mapping[str, int],
               restored: tuple[int, int, int] | None) -> None:
        """A model forgotten (``--forget-entities-after``) with these ``counts``
        (``ModelState.counts()``; ``restored``: its tally when this run restored it): what it
        did since it was last seen is counted, its counters join ``forgotten``, and the key
        starts over (a model of it made later counts from nothing)."""
        before = self.models.pop(key, None) or restored or _NONE
        self.counts["processed"] += counts["records"] - before[0]
        self.counts["skipped"] += counts["skipped"] - before[1]
        self.pending_delta += counts["pending"] - before[2]
        self.gone["models"] += 1
        for f in GONE[1:]:
            self.gone[f] += int(counts[f])

    def run(self) -> dict[str, Any]:
        """This run's counts (``pending``: every model's now; when the base is unknown, only
        the models this run touched, and ``pending_start`` None), and ``forgotten``: the
        counters of the models this run forgot."""
        doc: dict[str, Any] = dict(self.counts)
        doc["forgotten"] = dict(self.gone)
        if self.base is None:
            doc["pending_start"] = None
            doc["pending"] = sum(t[2] for t in self.models.values())
        else:
            doc["pending_start"] = self.base["pending"]
            doc["pending"] = self.base["pending"] + self.pending_delta
        return doc

    def all(self) -> dict[str, Any] | None:
        """The counts of every run on the checkpoint up to now (None: unknown), with
        ``forgotten`` (the counters of every model forgotten by then: with the snapshot's
        models' counters, they add up to the counts)."""
        if self.base is None:
            return None
        doc: dict[str, Any] = {f: self.base[f] + self.counts[f] for f in _ADDITIVE}
        doc["pending"] = self.base["pending"] + self.pending_delta
        doc["pending_start"] = 0
        out = {f: doc[f] for f in FIELDS}
        out["forgotten"] = {f: self.gone_base[f] + self.gone[f] for f in GONE}
        return out


def identities(doc: Mapping[str, Any], configs: int) -> list[tuple[str, int, int]]:
    """The identities of the module docstring on ``doc`` (counts of :data:`FIELDS`) with
    ``configs`` configurations: ``(identity, left side, right side)`` each; the inequality
    ``records <= offsets`` as ``(..., records, min(records, offsets))``."""
    d = {f: int(doc[f]) for f in FIELDS}
    model_dead = d["dead_letters"] - d["parse_dead_letters"]
    return [
        ("records <= offsets", d["records"], min(d["records"], d["offsets"])),
        ("C * (records - parse_dead_letters) == processed + skipped",
         configs * (d["records"] - d["parse_dead_letters"]), d["processed"] + d["skipped"]),
        ("processed == predictions + outcomes - labelled + (dead_letters - parse_dead_letters)",
         d["processed"], d["predictions"] + d["outcomes"] - d["labelled"] + model_dead),
        ("predictions + pending_start == outcomes + unlabeled + pending + rejected",
         d["predictions"] + d["pending_start"],
         d["outcomes"] + d["unlabeled"] + d["pending"] + d["rejected"]),
    ]


def violations(doc: Mapping[str, Any], configs: int) -> list[str]:
    """The identities ``doc`` breaks, worded (empty: the counts add up)."""
    return [f"{name}: {a} != {b}" for name, a, b in identities(doc, configs) if a != b]
