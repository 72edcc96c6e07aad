"""``kernelstream stream``: the command line of one unbounded Beam job over Kafka topics (the
launcher, its up-front checks and its summary are :mod:`kernelstream.pipelines.live.stream` and the
``stream_*`` modules beside it). Argument definitions only here: no Beam at import time.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kernelstream.data.check import SPREAD_RATIO
from kernelstream.data.options import AUTO_SPARSE_WIDTH
from kernelstream.pipelines.commands._common import (
    Command,
    add_data_options,
    add_learner_arguments,
    add_overwrite_argument,
    error,
)
from kernelstream.pipelines.config import PROG, SCALES, TARGET_SCALES, runners_for
from kernelstream.pipelines.live import stream  # the launcher: Beam only once it runs
from kernelstream.pipelines.live.stream_config import (
    KAFKA_CLIENTS,
    KEY_BY,
    MERGES,
    WIDTH_WAIT,
    StreamConfig,
)

# the read options of a topic's messages, which cannot be sniffed or scanned first
MESSAGE_HELP = {
    "--format": "message format (default: libsvm; label token ? = unlabelled)",
    "--n-features": "feature dimension of LIBSVM messages (required for LIBSVM)",
    "--hash-features": "hash LIBSVM feature indices into 2^K columns (K, 2^K or the power of "
    "two), colliding values summed: a fixed width for open vocabularies (instead of "
    "--n-features)",
    "--rows": "features as dense rows or sparse CSR rows (memory grows with the non-zeros); "
    f"auto: sparse for LIBSVM messages wider than {AUTO_SPARSE_WIDTH:,} features",
    "--scale": "auto (default): when the stream's first feature records (those gamma=auto "
    f"is estimated from) are dense and their feature spreads differ by over {SPREAD_RATIO:g}x, "
    "every record is min-max scaled by their ranges (printed, recorded in the snapshots and "
    "summary.json); none: the features as they come (01 and pm1 are refused: they need "
    "ranges a stream cannot read in advance)",
    "--scale-target": "a regression target: auto (default): standardised by the mean and "
    "standard deviation of the targets among the stream's first records (those gamma=auto is "
    "estimated from, and the --labels topic's first records) inside the learning step, every "
    "output in the target's units (printed, recorded in the snapshots and summary.json); "
    "none: learnt as it comes (01 is refused: it needs a range a stream cannot read in "
    "advance)",
    "--label-column": "label position of CSV messages (0-based; default: last)",
    "--delimiter": "CSV delimiter (default: ,)",
    "--positive-label": "raw label mapped to +1 (the stream's other label to -1)",
    "--task": "default: the learners' task",
}

COMMAND = Command(
    "stream", help="learn a live Kafka stream with delayed labels until stopped",
    description=(
        "One unbounded Beam job: each feature record (message key = event id) is scored\n"
        "on arrival; when its label arrives (a `label:Y` record, or a record on --labels)\n"
        "the model learns it and an outcome row is written. Labels that never come expire\n"
        "after --label-ttl. Ctrl-C drains: final snapshot where the reader is (the next\n"
        "run continues from there), exit 130."
    ),
    epilog=(
        "examples:\n"
        f"  {PROG} stream kafka://localhost:9092/events --n-features 24 -l bogd "
        "-p budget=100 \\\n      --checkpoint ckpt/events --out runs/events\n"
        f"  {PROG} stream kafka://localhost:9092/clicks --labels "
        "kafka://localhost:9092/click-labels \\\n      --format csv --key-by id-prefix "
        "--label-ttl 1h --kafka-out kafka://localhost:9092/clicks-bogd"
    ),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``stream``'s arguments and handler (definitions only: no Beam)."""
    p.add_argument("source", metavar="kafka://HOST:PORT/TOPIC[,TOPIC...]",
                   help="the events topic(s); message key = event id")
    p.add_argument("--labels", metavar="kafka://HOST:PORT/TOPIC",
                   help="labels topic (key = event id, value Y or label:Y), co-partitioned "
                   "with the events topics")
    add_learner_arguments(p, stream=True)
    p.add_argument("--key-by", choices=KEY_BY,
                   help="one model per entity: the event id's text before its first '/'")
    add_data_options(p, MESSAGE_HELP, format={"choices": ("libsvm", "csv")},
                     # replay's choices, so that one value parses the same in every command; the
                     # config refuses 01/pm1 (fixed ranges a stream cannot read in advance)
                     scale={"choices": ("auto", *SCALES), "default": "auto"},
                     scale_target={"choices": ("auto", *TARGET_SCALES), "default": "auto"})
    p.add_argument("--label-ttl", default="1h", metavar="DURATION",
                   help="an event whose label has not come after this long (event time) "
                   "expires as an unlabeled row (default: 1h; e.g. 30s, 10m, 2d)")
    p.add_argument("--metrics-window", default="1m", metavar="DURATION",
                   help="event-time window of the metrics rows (default: 1m)")
    p.add_argument("--forget-entities-after", metavar="DURATION",
                   help="with --key-by: drop an entity's models once the stream's clock is "
                   "this far past its last record (at least twice max(--label-ttl, "
                   "--metrics-window)); it starts afresh if it sends again. never: keep every "
                   "model (default for a new run; on resume: the checkpoint's)")
    s = p.add_argument_group("outputs and snapshots")
    s.add_argument("--out", "-o", metavar="DIR",
                   help="output directory (default: the checkpoint's, else "
                   "runs/stream-<topic>-<learners>); new, empty, the run this --checkpoint "
                   "continues, or a previous run with --overwrite")
    add_overwrite_argument(s)
    s.add_argument("--checkpoint", metavar="DIR",
                   help="snapshot learner states and offsets here, together with the output "
                   "files; a restart resumes from the last snapshot (one run per DIR)")
    s.add_argument("--snapshot-every", type=int, default=StreamConfig.snapshot_every,
                   metavar="N",
                   help="snapshot after N records read (default: %(default)s; "
                        "--snapshot-seconds bounds the time too)")
    s.add_argument("--snapshot-seconds", default="10s", metavar="DURATION",
                   help="and at least this often (default: 10s); output files appear at each "
                   "snapshot")
    s.add_argument("--kafka-out", metavar="kafka://HOST:PORT/PREFIX",
                   help="also send every row as JSON to PREFIX-predictions, -outcomes, "
                   "-unlabeled, -metrics, -dead-letters (message key = row_id)")
    s.add_argument("--kafka-outputs", metavar="NAME[,NAME...]",
                   help="with --kafka-out: only these outputs (default: all five)")
    s.add_argument("--kafka-exactly-once", action="store_true",
                   help="with --kafka-out and --checkpoint: each snapshot's rows in one Kafka "
                   "transaction, committed with the snapshot, so consumers reading "
                   "read_committed see every row once, crashes included (Apache Kafka, "
                   "confluent-kafka)")
    s.add_argument("--kafka-option", action="append", metavar="KEY=VALUE",
                   help="kafka-python client setting (repeatable)")
    s.add_argument("--kafka-client", choices=KAFKA_CLIENTS, default="auto",
                   help="the reader's Kafka client: confluent-kafka (librdkafka: C decoding, "
                   "background prefetch), or kafka-python; auto (default): confluent-kafka "
                   "when installed and every --kafka-option has a librdkafka equivalent")
    s.add_argument("--merge", choices=MERGES,
                   help="how the reader orders the records: all (default for a new run): every "
                   "partition of every topic in one timestamp order, so a model fed by several "
                   "partitions expires its events by one clock no partition's backlog runs "
                   "ahead of; partition: partition p of each topic in its own order, read in "
                   "turn (for models each fed by one partition number, e.g. --key-by with each "
                   "entity's records in one partition). Default on resume: the checkpoint's")
    s.add_argument("--init-from", metavar="DIR",
                   help="warm start: models without a snapshot start from the learners in "
                   "this stream checkpoint or replay checkpoint directory")
    r = p.add_argument_group("running")
    r.add_argument("--max-seconds", metavar="DURATION",
                   help="drain after this long and exit 0")
    r.add_argument("--idle-stop", metavar="DURATION",
                   help="drain once every record on the broker is read and no new one "
                   "arrived for this long, and exit 0")
    r.add_argument("--width-wait", default=WIDTH_WAIT, metavar="DURATION",
                   help="gamma=auto (the default of a Gaussian width not given), --scale "
                   "auto and (regression) --scale-target auto are decided on the first records "
                   "a fresh stream reads: wait this long at most for them, then decide on what "
                   "came, or keep the learners' default widths and the data as it comes if "
                   "none did (default: %(default)s)")
    r.add_argument("--runner", choices=runners_for("stream"), default="direct",
                   help="direct: Beam's FnApiRunner in this process (default); portable: "
                   "Beam's job API (a local job service unless --job_endpoint is given after "
                   "'--'; LOOPBACK unless --environment_type). Beam options go after '--'")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=cmd_stream)


def cmd_stream(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    try:
        config = StreamConfig.from_args(args, argv)
    except ValueError as exc:
        return error("stream", str(exc))
    return stream.run(config)
