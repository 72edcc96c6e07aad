"""What every DoFn of the live stream (:mod:`kernelstream.transforms.live.stream`) shares: the job
(:class:`StreamJob`, :class:`StreamPipelineOptions`), the tags of the items that travel from
Route through Learn to the Committer, the drain check, and the crash hooks of the tests.

These sit apart from the graph because the Learn DoFn, the Kafka writer
(:mod:`~kernelstream.transforms.live.kafka_rows`) and the Committer
(:mod:`~kernelstream.transforms.live.committer`) all need them, and none of those should import
another for them.

``KERNELSTREAM_CRASH_AT=POINT:N[,POINT:N...]`` (tests only) kills the worker with SIGKILL at
the N-th pass of a named point (:data:`CRASH_POINTS`).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from kernelstream.engine.deadletters import DEAD_LETTER_TAG
from kernelstream.engine.live.parsing import LiveSpec
from kernelstream.transforms.live.kafka_read import drain_requested

STATES_TAG = "states"
PROGRESS_TAG = "progress"
DEAD_LETTERS = DEAD_LETTER_TAG  # the stream's dead letters: the replay's output name
PASS_KEY = ""  # Route → Learn: items for Commit, not for a model (model keys are CONFIG#...)
CRASH_ENV = "KERNELSTREAM_CRASH_AT"
CRASH_POINTS = (
    "start",  # Committer.setup: the worker has just started
    "learn",  # Learn.process, after a record's rows are emitted: mid-bundle
    "kafka-flush",  # WriteKafkaRows.flush before a snapshot: rows acknowledged, not committed
    "before-commit",  # Committer: output files of the epoch closed, snapshot not committed
    "after-commit",  # Committer: snapshot committed, its output files not yet published
    "kafka-commit",  # Committer: files published, the epoch's Kafka transaction not committed
)
STATUS_FILE = "status.json"
# A bundle's end costs ~10-20 ms of Beam's bookkeeping during which no record is read (the
# FnApiRunner, measured): with snapshots cut at any round (models held by the worker) and one
# partition group, a call can be long, so that pause touches few records.
CALL_MS = 500
LONG_CALL_MS = 5000
DRAIN_FILE = "drain"


@dataclass(frozen=True)
class StreamJob:
    """Everything the workers of one ``kernelstream stream`` run need (picklable, plain).

    ``start_offsets``: ``(topic, partition, next offset)`` of every input partition (the
    resumed snapshot's, else each partition's beginning). ``resume_epoch``: the snapshot epoch
    in ``checkpoint`` the run resumed from (models are restored from it by key). ``init_from``
    / ``init_kind``: warm start of models without a snapshot (``"stream"``: a stream
    checkpoint directory; ``"replay"``: a replay checkpoint directory). ``control``: a local
    directory of this run for the drain request (``drain``) and the workers' status file
    (``status.json``). ``part``: tells this run's output files apart."""

    spec: LiveSpec
    bootstrap: str
    topics: tuple[str, ...]
    out: str
    control: str
    part: str
    labels_topic: str | None = None
    client: tuple[tuple[str, str], ...] = ()
    kafka_client: str = "auto"  # the reader's client: auto, confluent or kafka-python
    # how the reader groups the partitions (kafka_client.partitions.MERGES): "all", one
    # timestamp order of every partition, or "partition", a group per partition number
    merge: str = "all"
    start_offsets: tuple[tuple[str, int, int], ...] = ()
    checkpoint: str | None = None
    resume_epoch: int | None = None
    init_from: str | None = None
    init_kind: str | None = None
    kafka_out: str | None = None  # bootstrap servers of the output topics
    kafka_topics: tuple[tuple[str, str], ...] = ()  # output name -> topic
    # --kafka-exactly-once: each snapshot's rows in one Kafka transaction (its markers on
    # this topic; kafka_client.transactions)
    kafka_markers: str | None = None
    kafka_txn_id: str | None = None  # the checkpoint's transactional id (checkpoint_id)
    # exactly-once starts with this run (a new stream, or a snapshot written without it)
    kafka_eos_starts: bool = False
    snapshot_every: int = 100_000
    snapshot_seconds: float = 10.0
    info: tuple[tuple[str, Any], ...] = ()  # committed with every snapshot (JSON-able)
    poll_timeout_ms: int = 200
    # a round of a backlog: 4000 drained event + label records ~12 % faster than 1000 (fewer
    # rounds of fixed work); a live stream's rounds are smaller anyway
    max_records: int = 4000
    merge_idle_ms: int = 50
    # a round that waited for its first record waits this long more for others (0: none)
    poll_linger_ms: int = 0
    # how long a reader call (a bundle) goes on reading; None: reader_call_ms decides
    call_ms: int | None = None
    state_in_beam: bool = False  # models as bytes in Beam state (see ModelStateCoder)

    @property
    def reader_call_ms(self) -> int:
        """``call_ms``, else LONG_CALL_MS for one partition group with models held by the
        worker, else CALL_MS: groups read by one worker take turns, each for its share of a
        call (a long call would hold the others' records back), and with ``state_in_beam``
        snapshots wait for a bundle's end."""
        if self.call_ms is not None:
            return self.call_ms
        groups = 1 if self.merge == "all" else len({p for _, p, _ in self.start_offsets})
        return LONG_CALL_MS if groups == 1 and not self.state_in_beam else CALL_MS

    @property
    def drain_path(self) -> str:
        return os.path.join(self.control, DRAIN_FILE)

    @property
    def status_path(self) -> str:
        return os.path.join(self.control, STATUS_FILE)

    def offsets(self) -> dict[tuple[str, int], int]:
        return {(t, p): o for t, p, o in self.start_offsets}

    def output_topics(self) -> dict[str, str]:
        """Output name → Kafka topic (``PREFIX-predictions``, ...); empty without Kafka out."""
        return dict(self.kafka_topics)


class StreamPipelineOptions(PipelineOptions):
    """Reader tuning of a live stream, given after ``--`` as Beam pipeline options."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument("--poll_timeout_ms", type=int, default=None,
                            help="how long an idle reader blocks per call (default 200)")
        parser.add_argument("--max_records", type=int, default=None,
                            help="records per reader round (default 4000)")
        parser.add_argument("--call_ms", type=int, default=None,
                            help="how long a reader call, i.e. a bundle, goes on reading "
                            "(default 500, or 5000 for one partition group without "
                            "--state_in_beam)")
        parser.add_argument("--poll_linger_ms", type=int, default=None,
                            help="how long a reader round that waited for its first record "
                            "waits more for others to come with it: fewer, larger rounds "
                            "(less CPU per record at live rates), each record later by up "
                            "to that much (default 0; confluent-kafka reader only)")
        parser.add_argument("--merge_idle_ms", type=int, default=None,
                            help="how long an empty partition of a group must stay caught up "
                            "before the others' records pass it (default 50)")
        parser.add_argument("--state_in_beam", action="store_true", default=False,
                            help="keep each model as bytes in Beam state, committed every "
                            "bundle (for runners that checkpoint or move Beam state "
                            "themselves: Flink, Dataflow); default: in the worker's memory")


def draining(job: StreamJob) -> bool:
    """Whether this run was asked to drain (in this process, or by the drain file)."""
    return drain_requested() or os.path.exists(job.drain_path)


# -- crash hooks (tests) ------------------------------------------------------------------------

_crash_plan: dict[str, int] | None = None
_crash_seen: dict[str, int] = {}


def crash_point(name: str, passes: int = 1) -> None:
    """SIGKILL this process at the N-th pass of ``name`` when ``KERNELSTREAM_CRASH_AT``
    asks for it (``POINT:N``, comma-separated); otherwise nothing. ``passes``: this call
    counts as that many passes (e.g. one per record of a batch)."""
    global _crash_plan
    if _crash_plan is None:
        _crash_plan = {}
        for item in os.environ.get(CRASH_ENV, "").split(","):
            point, _, n = item.strip().partition(":")
            if point:
                _crash_plan[point] = int(n or 1)
    if name not in _crash_plan:
        return
    before = _crash_seen.get(name, 0)
    seen = _crash_seen[name] = before + passes
    if before < _crash_plan[name] <= seen:
        os.kill(os.getpid(), signal.SIGKILL)

