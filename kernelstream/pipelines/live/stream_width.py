"""``gamma=auto``, ``--scale auto`` and ``--scale-target auto`` of a fresh ``kernelstream
stream``: the Gaussian width estimated from the first records the stream will read, whether
(and by which ranges) every record is min-max scaled, and the mean and standard deviation a
regression target is standardised by, before its pipeline starts (:func:`resolve`, called by
:func:`~kernelstream.pipelines.live.stream_prepare.prepare` once it knows the start offsets).
All are decided on one read of the same records.

A replay estimates ``gamma=auto`` from the first rows of its file
(:mod:`kernelstream.data.widths`); a stream does the same from its first
:data:`~kernelstream.data.widths.RESERVOIR_ROWS` feature records: read (Beam-free, kafka-python)
from the offsets the stream starts at, each events partition in offset order, all of them
merged as the stream's reader merges every partition under ``--merge all``
(:func:`kernelstream.engine.live.merge.merged`: by timestamp; ties by topic, partition,
offset), and parsed by the stream's own router
(:class:`~kernelstream.engine.live.routing.StreamRouter`), so the rows are the learners' (hashed,
dense or sparse). Label records and records that cannot be
parsed are skipped, not dead-lettered: the stream dead-letters them when it reads them; but
when every record read would be one (a wrong ``--format`` or ``--key-by``), the stream is
refused before it starts, in one line naming the most common reason. The
estimate is :func:`kernelstream.data.widths.auto_gamma` of those rows, so it depends only on the
topic's contents.

``--scale auto``: a replay of a topic's rule (:func:`kernelstream.data.check.head_ranges`) on
those rows when they are dense (sparse rows are never scaled): when their feature spreads
(standard deviations) differ by over ``SPREAD_RATIO`` times, every row the stream parses is
min-max scaled by their ranges (``LiveSpec.read.scale_ranges``, applied by
:class:`~kernelstream.engine.live.parsing.RecordParser`), said in one line on stderr, and the
width is estimated on the scaled rows. Recorded as :meth:`StreamConfig.scale_doc`; a resumed
stream, or one warm-started by ``--init-from``, continues with the recorded ranges (or none)
and reads nothing for it (``stream_prepare``).

``--scale-target auto`` (a regression): the targets among the records read (labelled events,
``label:Y`` records, and the ``--labels`` topic's records, read alongside from the stream's
start offsets), in the stream's order, the first ``RESERVOIR_ROWS`` of them: the read goes
on (up to ``--width-wait``, or until the topics are quiet: then all there are) until every
partition has been read past them (:func:`_first_targets_known`), since labels often come
well after their events; so the same targets whatever the poll batches, and at least
:data:`MIN_TARGETS` are needed to standardise. Their mean and standard deviation
(``data.scaling.target_standardisation``, a replay's rule) become each configuration's
``target``, recorded in the snapshots with the configurations; a resumed or warm-started
stream continues with the recorded one (``stream_prepare``).

``--positive-label LABEL`` (a classification): the other class is the first other label
among the first ``RESERVOIR_ROWS`` labels read as the targets above are (labelled events,
``label:Y`` records, the ``--labels`` topic; in the stream's order), as a replay maps the
first two labels it reads (``LiveSpec.negative_label``: a third label is then a dead
letter); none there: every other label is -1 (one-vs-rest). One line on stderr either way;
recorded in the snapshots (``StreamConfig.stream_doc``), and a resume maps as recorded.

The read stops once every events partition has given ``RESERVOIR_ROWS`` feature records (and
the first targets are known, for ``--scale-target auto``), or no
record came for :data:`QUIET_S` seconds after the first (the topic is read to its end: reported
end offsets are not trusted, the embedded tansu broker reports them too low), or after
``--width-wait`` (an empty topic: a producer not yet running), printing progress meanwhile. With
fewer than two feature records there is no distance to measure: the learners' default widths,
said in one line on stderr. ``summary.json`` and the snapshots record the outcome
(:meth:`StreamConfig.widths_doc`); a resumed stream continues with the recorded number
(:meth:`StreamConfig.with_recorded`) and reads nothing here.

A CSV stream without ``--n-features`` has the width of its first record: the read above keeps
it (``StreamConfig.head_width``), and :func:`first_width` reads up to that record alone when
nothing else is read, so ``--init-from`` models of another width are refused before the
pipeline starts (``stream_prepare``).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernelstream import kafka_client
from kernelstream.data import check as data_check
from kernelstream.data import widths
from kernelstream.data.labels import class_key, never_a_class
from kernelstream.data.scaling import head_scaling, target_standardisation
from kernelstream.engine.live.merge import merged
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.routing import StreamRouter
from kernelstream.pipelines.config import PROG
from kernelstream.pipelines.live.stream_config import StreamConfig, UpfrontError
from kernelstream.sparse import CSR

# --scale-target auto: the fewest targets a stream standardises by (it reads up to the first
# RESERVOIR_ROWS; its labels may come well after its first feature records: the read waits
# for them, up to --width-wait)
MIN_TARGETS = 100
QUIET_S = 2.0  # no record for this long after the first: the topic is read to its end
PROGRESS_EVERY_S = 5.0
POLL_MS = 200


def resolve(config: StreamConfig, start: Mapping[tuple[str, int], int]) -> StreamConfig:
    """``config`` with ``--scale auto`` and ``gamma=auto`` resolved from the first records
    of its events topics from ``start`` (``{(topic, partition): offset}``), read once for
    both; ``config`` itself when neither is left to the data."""
    if not (config.wants_width or config.wants_scale or config.wants_target
            or config.wants_labels):
        return config
    head = first_rows(config, start, config.width_wait, None if config.quiet else _progress)
    _refuse_rejected(config, head)
    rows, read = head.rows, head.read
    n = rows.shape[0]
    if n and config.spec.width is None:  # CSV: the first record fixes the width
        config = dataclasses.replace(config, head_width=int(rows.shape[1]))
    topics = ",".join(config.topics)
    if config.wants_target:
        config = _standardised(config, head.targets, ",".join(config.all_topics))
    if config.wants_labels:
        config = _negative(config, head.labels, ",".join(config.all_topics))
    if config.wants_scale:
        config = _scaled(config, rows, topics)
        if config.scale_ranges is not None:
            # gamma=auto on the rows as the learners get them, scaled as the parser scales
            # (ranges given before, by --init-from, are the router's already)
            lo, span = head_scaling(config.scale_ranges)
            rows = (rows - lo) / span
    if not config.wants_width:
        return config
    if n >= 2:
        med = widths.median_distance(rows)
        # no usable distance: the median heuristic's documented fallback (median_gamma's)
        gamma = 1.0 if med is None else widths.rounded(1.0 / med)
        if med is None:
            print(f"{PROG} stream: gamma=auto: no usable distance between the first {n:,} "
                  f"feature records of {topics} (all alike, or too large to measure): "
                  "gamma=1.0, the median heuristic's fallback; -p gamma=G sets one",
                  file=sys.stderr, flush=True)
        if not config.quiet:
            _progress(f"gamma=auto = {gamma!r}, from the first {n:,} feature records of "
                      f"{topics}")
        return config.with_widths(gamma, "auto", n)
    resolved = config.with_widths(None, "default", n)
    own = ", ".join(f"{c.label} {k}={c.params[k]}" for c in resolved.configs
                    for k in ("gamma", "sigmas") if k in c.params)
    dead = sum(head.rejected.values())
    # a warning, not progress: shown with --quiet too
    print(f"{PROG} stream: gamma=auto: {n} feature record{'s' if n != 1 else ''} among "
          f"{read:,} records of {topics}"
          + (f" ({dead:,} of them would be dead letters)" if dead else "")
          + f" after reading for {head.waited:.1f} s (at most {config.width_wait:g} s, "
          f"--width-wait): too few to estimate a width from; the learners' default widths "
          f"({own or 'none'}), recorded as width_source \"default\"", file=sys.stderr,
          flush=True)
    return resolved


def _refuse_rejected(config: StreamConfig, head: StreamHead) -> None:
    """Every record the first read found would be a dead letter (a wrong --format, --key-by,
    --n-features...): refused before the stream starts, in one line, as a replay refuses
    such a file or topic. Some parsed, or none read yet (a producer not yet running): on."""
    dead = sum(head.rejected.values())
    if not head.read or dead < head.read:
        return
    topics = ",".join(config.all_topics if config.wants_target or config.wants_labels
                      else config.topics)
    raise UpfrontError(data_check.all_rejected_line(
        topics, head.read, head.rejected,
        "--format, --key-by, --n-features, --label-column, --task or --positive-label",
        "records read first"))


def _scaled(config: StreamConfig, rows: np.ndarray | CSR, topics: str) -> StreamConfig:
    """``config`` with ``--scale auto`` decided on its first rows ``rows`` by the rule of a
    replay of a topic (``data.check.head_ranges``); one line on stderr when it scales."""
    # sparse rows are never min-max scaled (it would fill in their zeros)
    ranges, why = (data_check.head_ranges(rows) if isinstance(rows, np.ndarray)
                   else (None, None))
    if ranges is None:
        return config.with_scale(None, None)
    # a warning, not progress: the rows the learners get are not the records (as a replay's)
    print(f"{PROG} stream: scaling features to [0, 1] by the ranges of the first "
          f"{rows.shape[0]:,} feature records of {topics} ({why}; later values may fall "
          "outside them; --scale none keeps the features)", file=sys.stderr, flush=True)
    return config.with_scale(ranges, why)


def _standardised(config: StreamConfig, targets: list[float], topics: str) -> StreamConfig:
    """``config`` with ``--scale-target auto`` decided on the first targets ``targets`` (a
    replay's rule, ``data.scaling.target_standardisation``, with at least
    :data:`MIN_TARGETS` of them): one line on stderr either way."""
    target, line = target_standardisation(targets, topics, MIN_TARGETS)
    print(f"{PROG} stream: {line}", file=sys.stderr, flush=True)
    return config.with_target(target)


def _negative(config: StreamConfig, labels: list[str], topics: str) -> StreamConfig:
    """``config`` with the class of its ``--positive-label`` decided on its first labels
    ``labels`` (in the stream's order), as a replay maps the first two labels it reads: the
    first other one is -1 and a third is a dead letter; none among them: every other label
    is -1 (one-vs-rest). One line on stderr either way. Tokens that are never a class (empty,
    nan, inf: dead letters whatever the map) are skipped, as a replay's first labels are."""
    pos = class_key(str(config.spec.read.positive_label))
    other = next((t for t in labels if not never_a_class(t) and class_key(t) != pos), None)
    given = config.spec.read.positive_label
    if other is None:
        print(f"{PROG} stream: --positive-label {given}: no other label among the first "
              f"{len(labels):,} labels of {topics}: every label but {given!r} is -1 "
              "(one-vs-rest)", file=sys.stderr, flush=True)
    else:
        print(f"{PROG} stream: --positive-label {given}: {other!r} is -1 (the first other "
              f"label of {topics}); a third label is a dead letter, as in a replay",
              file=sys.stderr, flush=True)
    return config.with_negative_label(other)


def _progress(line: str) -> None:
    print(f"{PROG} stream: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class StreamHead:
    """The first records of a stream (:func:`first_rows`): its first feature ``rows`` as one
    matrix, the first targets (labelled events' and label records', in the order the stream
    reads them) and the number of records ``read``."""

    rows: np.ndarray | CSR
    targets: list[float]
    read: int
    labels: list[str] = dataclasses.field(default_factory=list)  # their tokens, stripped
    # the records read that the stream will dead-letter, by reason
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)
    waited: float = 0.0  # how long the read took (s)


def first_width(config: StreamConfig, start: Mapping[tuple[str, int], int]) -> int | None:
    """The width of the first feature record the stream ``config`` will read from ``start``
    (its first valid one in the stream's order: the one that fixes a CSV stream's width),
    reading each partition up to its first such record, for at most ``--width-wait``; None:
    none came."""
    plain = dataclasses.replace(config, wants_target=False, wants_labels=False)
    head = first_rows(plain, start, config.width_wait, None if config.quiet else _progress,
                      limit=1)
    return int(head.rows.shape[1]) if head.rows.shape[0] else None


def first_rows(config: StreamConfig, start: Mapping[tuple[str, int], int], wait: float,
               progress: Any = None, limit: int = widths.RESERVOIR_ROWS) -> StreamHead:
    """The first ``RESERVOIR_ROWS`` feature rows the stream ``config`` will read from
    ``start`` (module docstring), and for ``--scale-target auto`` its first targets, from the
    same records and from its ``--labels`` topic (read alongside, from ``start``; it does not
    hold the read up). ``progress`` (a line → None) is told while the read waits. ``limit``:
    the rows (and targets) read of each partition."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    # the first labels: the targets of a regression, the tokens of --positive-label's
    wants_targets = config.wants_target or config.wants_labels
    token = _Tokens() if config.wants_labels else None
    router = StreamRouter(config.spec, labels=token)
    order_of = config.all_topics if wants_targets else config.topics
    # topic by topic, each topic's partitions by number: the order of ties of the reader's
    # one merge of every partition (--merge all; kafka_client.partitions.PartitionGroup)
    tps = sorted(((t, p) for (t, p) in start if t in order_of),
                 key=lambda tp: (order_of.index(tp[0]), tp[1]))
    feature_tps = [tp for tp in tps if tp[0] in config.topics]
    got: dict[tuple[str, int], list[SourceRecord]] = {tp: [] for tp in tps}
    rows_of: dict[tuple[str, int], int] = dict.fromkeys(tps, 0)  # feature rows
    targets_of: dict[tuple[str, int], int] = dict.fromkeys(tps, 0)
    targets_done = not wants_targets

    def enough(tp: tuple[str, int]) -> bool:  # the partition has given all it needs to
        return ((tp not in feature_tps or rows_of[tp] >= limit)
                and (targets_done or targets_of[tp] >= limit))
    parsed: dict[tuple[str, int, int], np.ndarray | CSR] = {}
    targets: dict[tuple[str, int, int], float] = {}
    tokens: dict[tuple[str, int, int], str] = {}
    rejected: dict[str, int] = {}
    read = 0
    try:
        consumer = kafka_client.assigned_consumer(config.bootstrap, config.client)
    except ConnectionError:
        return StreamHead(_stack([]), [], 0)  # prepare() has just reached it: the stream reports it
    try:
        kps = {tp: TopicPartition(*tp) for tp in tps}
        consumer.assign(list(kps.values()))
        for tp, kp in kps.items():
            consumer.seek(kp, int(start[tp]))
        t0 = now = time.monotonic()
        last: float | None = None  # when the last record came
        said = t0
        while True:
            try:
                batch = consumer.poll(timeout_ms=POLL_MS)
            except KafkaError:
                break  # the stream itself reports a broker that goes away
            now = time.monotonic()
            for kp, recs in batch.items():
                tp = (kp.topic, kp.partition)
                if tp not in got or enough(tp):
                    continue
                for r in recs:
                    rec = SourceRecord(r.topic, r.partition, r.offset, int(r.timestamp),
                                       r.key, r.value)
                    got[tp].append(rec)
                    read += 1
                    x, y, reason = _example(router, rec)
                    if reason is not None:
                        rejected[reason] = rejected.get(reason, 0) + 1
                    k = (rec.topic, rec.partition, rec.offset)
                    if y is not None:
                        targets[k] = y
                        targets_of[tp] += 1
                        if token is not None:
                            tokens[k] = token.name(y)
                    if x is not None:
                        parsed[k] = x
                        rows_of[tp] += 1
                    if enough(tp):
                        consumer.pause(kp)  # enough of it: the merge needs no more
                        break
                last = now
            # (at least ``limit`` targets read: only then can the first ``limit`` be known)
            if (not targets_done and len(targets) >= limit
                    and _first_targets_known(got, targets, limit)):
                targets_done = True
                consumer.pause(*(kps[tp] for tp in tps if enough(tp)))
            if targets_done and all(enough(tp) for tp in feature_tps):
                break
            if last is not None and now - last >= min(QUIET_S, wait):
                break
            if now - t0 >= wait:
                break
            if progress is not None and now - said >= PROGRESS_EVERY_S:
                said = now
                what = ", ".join(w for w, on in (("gamma=auto", config.wants_width),
                                                 ("--scale auto", config.wants_scale),
                                                 ("--scale-target auto", config.wants_target),
                                                 ("--positive-label", config.wants_labels))
                                 if on)
                wanted = (f", {len(targets):,} targets (up to {limit:,})"
                          if config.wants_target else "")
                what = what or "--init-from: the stream's width"
                progress(f"{what}: waiting for the first records: "
                         f"{sum(rows_of[tp] for tp in feature_tps):,} feature records"
                         f"{wanted} after {now - t0:.0f} s (up to {limit:,} of each "
                         f"partition; at most {wait:g} s, --width-wait)")
    finally:
        consumer.close()
    # the earliest records first, as the reader merges every partition (--merge all): by
    # timestamp, then topic, partition and offset
    order = [(r.topic, r.partition, r.offset) for r in merged([got[tp] for tp in tps])]
    rows = [parsed[k] for k in order if k in parsed]
    return StreamHead(_stack(rows[:limit]), [targets[k] for k in order if k in targets][:limit],
                      read, [tokens[k] for k in order if k in tokens][:limit], rejected,
                      now - t0)


class _Tokens:
    """A router's label map (``StreamRouter(spec, labels=...)``) through which a first read
    sees the tokens the labels were written as: each distinct token (stripped) maps to its
    index in ``names``, so a label's token is :meth:`name` of its y, whichever path mapped it
    (the router maps a label record's value once and reuses the y for the same value)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, tok: str) -> float:
        t = tok.strip()
        i = self._index.get(t)
        if i is None:
            i = self._index[t] = len(self.names)
            self.names.append(t)
        return float(i)

    def name(self, y: float) -> str:
        return self.names[int(y)]


def _first_targets_known(got: Mapping[tuple[str, int], list[SourceRecord]],
                         targets: Mapping[tuple[str, int, int], float], limit: int) -> bool:
    """Whether the first ``limit`` targets in the stream's order are among the records
    ``got`` so far, whatever the partitions hold beyond them: the merge of what each
    partition gave is the stream's order up to the point where one of them runs out (its
    next record, not read yet, may come before anything after that point)."""
    lists = list(got.values())
    if not all(lists):
        return False  # a partition that gave nothing yet may start before any of them
    left = {id(recs): len(recs) for recs in lists}
    of = {(r.topic, r.partition): id(recs) for recs in lists for r in recs[:1]}
    seen = 0
    for r in merged(lists):
        seen += (r.topic, r.partition, r.offset) in targets
        if seen >= limit:
            return True
        i = of[(r.topic, r.partition)]
        left[i] -= 1
        if not left[i]:
            return False
    return False


def _example(router: StreamRouter, rec: SourceRecord,
             ) -> tuple[np.ndarray | CSR | None, float | None, str | None]:
    """The features of a feature record as the learners get them (None for a label record),
    its label or a label record's (None: unlabelled), and None; ``(None, None, reason)`` for
    a record the router dead-letters, ``(None, None, None)`` for one of non-finite values
    (the learners refuse it)."""
    routed = router.route(rec)
    if isinstance(routed, dict):
        return None, None, str(routed.get("reason"))
    if not routed:
        return None, None, None
    p = routed[0][1]
    y = p.y if p.y is not None and np.isfinite(p.y) else None
    if p.label_only or p.x is None:
        return None, y, None
    vals = p.x.data if isinstance(p.x, CSR) else p.x
    return (p.x, y, None) if np.isfinite(vals).all() else (None, None, None)


def _stack(rows: list[np.ndarray | CSR]) -> np.ndarray | CSR:
    """One matrix of the rows: CSR when the stream's rows are; a CSV stream's rows of
    another width than the first's are left out (the first record fixes the width)."""
    if rows and isinstance(rows[0], CSR):
        return CSR.vstack([r for r in rows if isinstance(r, CSR)])
    dense = [np.ravel(r) for r in rows if isinstance(r, np.ndarray)]
    if not dense:
        return np.zeros((0, 1))
    width = dense[0].shape[0]
    return np.vstack([r for r in dense if r.shape[0] == width])
