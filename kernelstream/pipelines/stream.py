"""``kernelstream stream``: one unbounded Beam job over Kafka topics, until stopped.

Flow: arguments → :class:`~kernelstream.pipelines.stream_config.StreamConfig` (every option
error is one line, exit 2, before Beam is imported) →
:func:`~kernelstream.pipelines.stream_prepare.prepare`, the up-front checks, each one line and
exit 2 (the checkpoint directory's writer lock, the broker, the topics and their partitions,
the committed offsets against the log, the ``--kafka-out`` broker, ``--init-from``) → the
pipeline of :mod:`kernelstream.transforms.stream` on the FnApiRunner (``--runner direct``) or
Beam's portable job API (``--runner portable``: a local job service, or ``--job_endpoint``
after ``--``; LOOPBACK workers unless ``--environment_type`` says otherwise) → the run summary
(:mod:`~kernelstream.pipelines.stream_summary`).

Stopping. SIGINT/SIGTERM, ``--max-seconds`` and ``--idle-stop`` all *drain*
(:mod:`~kernelstream.pipelines.stream_monitor`). A signal exits 130 with one line on stderr;
the other two exit 0.

This module holds the command line and the launcher; it imports no Beam at import time (nor do
the modules above): the CLI builds its parser from it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from kernelstream.pipelines.config import PROG, TASKS
from kernelstream.pipelines.stream_config import (
    EXIT_STOPPED,
    KAFKA_CLIENTS,
    KEY_BY,
    RUNNERS,
    StreamConfig,
    output_topic_names,
    stream_config,
)
from kernelstream.pipelines.stream_monitor import Stopper
from kernelstream.pipelines.stream_prepare import Prepared, UpfrontError, prepare
from kernelstream.pipelines.stream_summary import format_summary, summary, write_summary


def _hash_bits(text: str) -> int:
    """argparse type of ``--hash-features`` (as replay's)."""
    from kernelstream.data.hashing import parse_bits

    try:
        return parse_bits(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _in_process(runner: str, pipeline_args: Sequence[str]) -> bool:
    """Whether the SDK workers run in this process (FnApiRunner in-process, LOOPBACK)."""
    if runner == "direct":
        return not any(a.startswith("--direct_running_mode") and "multi_processing" in a
                       for a in pipeline_args)
    env = [a for a in pipeline_args if a.startswith("--environment_type")]
    return not env or env[-1].split("=", 1)[-1].upper() == "LOOPBACK"


# -- running --------------------------------------------------------------------------------------


@contextlib.contextmanager
def local_job_service(timeout: float = 60.0) -> Iterator[str]:
    """Beam's local job service on a free port, in its own session: a Ctrl-C at the terminal
    reaches this process (which drains the job), not the job service running it."""
    from kernelstream._services import serve

    def argv(port: int) -> list[str]:
        target = [sys.executable, "-m",
                  "apache_beam.runners.portability.local_job_service_main", "--port", str(port)]
        # setsid, then exec in place (same pid, so stopping it stops the service)
        return [sys.executable, "-c",
                "import os, sys; os.setsid(); os.execv(sys.argv[1], sys.argv[1:])", *target]

    with serve(argv, "the Beam job service", "localhost", timeout) as port:
        yield f"localhost:{port}"


def _pipeline(config: StreamConfig, stack: contextlib.ExitStack) -> Any:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    args = list(config.pipeline_args)
    if config.runner == "portable":
        if not any(a.startswith("--job_endpoint") for a in args):
            args.append(f"--job_endpoint={stack.enter_context(local_job_service())}")
        if not any(a.startswith("--environment_type") for a in args):
            args.append("--environment_type=LOOPBACK")
        return beam.Pipeline(options=PipelineOptions(["--runner=PortableRunner", *args]))
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(args))


def _error_line(exc: BaseException) -> str:
    """The last line that names an error in a (Beam-wrapped, multi-line) exception."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    named = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", ln)]
    text = (named or lines or [type(exc).__name__])[-1]
    text = re.sub(r"\s*\[while running '[^']*'\]\s*$", "", text)
    return text if len(text) <= 400 else text[:397] + "..."


def _quiet_logs() -> None:
    # Beam's, kafka-python's and librdkafka's warnings would drown the one-line messages; the
    # CLI reports failures itself
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    logging.getLogger("kernelstream.rdkafka").setLevel(logging.CRITICAL)


def run(config: StreamConfig) -> int:
    """Check, run until drained, report; the exit code."""
    _quiet_logs()
    try:
        prep = prepare(config)
    except UpfrontError as exc:
        return _error(str(exc))
    try:
        return _execute(config, prep)
    finally:
        prep.close()


def _execute(config: StreamConfig, prep: Prepared) -> int:
    from kernelstream.transforms import kafka_read
    from kernelstream.transforms.committer import register_local_store, unregister_local_store
    from kernelstream.transforms.stream import LiveStream
    from kernelstream.transforms.stream_job import StreamJob

    opts = _reader_options(config.pipeline_args)
    part = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    out = os.path.realpath(prep.out)
    # the run's control folder: the drain request and the workers' status.json
    control = os.path.join(out, f".run-{part}")
    os.makedirs(control, exist_ok=True)
    info = {"out": out, "configs": config.configs_doc(), "stream": config.stream_doc(),
            "argv": list(config.argv)}
    job = StreamJob(
        spec=config.spec, bootstrap=config.bootstrap, topics=config.topics, out=out,
        control=control, part=part, labels_topic=config.labels_topic, client=config.client,
        kafka_client=config.kafka_client,
        start_offsets=tuple((t, p, o) for (t, p), o in sorted(prep.start.items())),
        checkpoint=None if config.checkpoint is None else os.path.realpath(config.checkpoint),
        resume_epoch=prep.resume_epoch, init_from=config.init_from, init_kind=prep.init_kind,
        kafka_out=None if config.kafka_out is None else config.kafka_out[0],
        kafka_topics=(() if config.kafka_out is None
                      else tuple((n, t) for n, t in output_topic_names(config.kafka_out[1]).items()
                                 if n in config.kafka_outputs)),
        snapshot_every=config.snapshot_every,
        snapshot_seconds=config.snapshot_seconds, info=tuple(info.items()), **opts)
    in_process = _in_process(config.runner, config.pipeline_args)
    if job.checkpoint is not None:
        if in_process:
            register_local_store(job.checkpoint, prep.store)
        else:  # the worker's Committer takes the lock (another process)
            prep.close()
    kafka_read.clear_drain()
    stopper = Stopper(config, job, out)
    t0 = time.monotonic()
    failure: BaseException | None = None
    stopper.install()
    try:
        with contextlib.ExitStack() as stack:
            p = _pipeline(config, stack)
            _ = p | "Stream" >> LiveStream(job)
            result = p.run()
            result.wait_until_finish()
    except Exception as exc:  # the pipeline failed: one line, not Beam's traceback
        failure = exc
    finally:
        stopper.uninstall()
        if job.checkpoint is not None:
            unregister_local_store(job.checkpoint)
    seconds = time.monotonic() - t0
    status = stopper.read_status()
    shutil.rmtree(control, ignore_errors=True)
    epoch = _head(job.checkpoint, prep)
    if failure is not None:
        where = (f"; resumes from snapshot epoch {epoch} in {config.checkpoint}"
                 if epoch is not None else "")
        return _error(f"{_error_line(failure)}{where}", code=1)
    doc = summary(config, out, part, status, seconds, epoch, stopper.reason)
    write_summary(out, doc)
    print(format_summary(doc, config.checkpoint), flush=True)
    if stopper.signal_name is not None:
        where = (f"snapshot epoch {epoch} in {config.checkpoint}" if config.checkpoint
                 else f"outputs in {out}")
        print(f"{PROG} stream: stopped ({stopper.signal_name}): "
              f"{doc['records']:,} records, {where}", file=sys.stderr, flush=True)
        return EXIT_STOPPED
    return 0


def _reader_options(pipeline_args: Sequence[str]) -> dict[str, Any]:
    from apache_beam.options.pipeline_options import PipelineOptions

    from kernelstream.transforms.stream_job import StreamPipelineOptions

    o = PipelineOptions(list(pipeline_args)).view_as(StreamPipelineOptions)
    out = {}
    for name in ("poll_timeout_ms", "max_records", "merge_idle_ms", "call_ms"):
        v = getattr(o, name)
        if v is not None:
            out[name] = int(v)
    if o.state_in_beam:
        out["state_in_beam"] = True
    return out


def _head(checkpoint: str | None, prep: Prepared) -> int | None:
    if checkpoint is None:
        return None
    if prep.store is not None:
        return prep.store.head
    from kernelstream.engine.snapshot import SnapshotView

    with contextlib.suppress(Exception), SnapshotView.open(checkpoint) as view:
        return view.head
    return None


# -- command line ---------------------------------------------------------------------------------


def _error(msg: str, code: int = 2) -> int:
    print(f"{PROG} stream: error: {msg}", file=sys.stderr, flush=True)
    return code


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``stream`` subcommand (argument definitions only: no Beam)."""
    from kernelstream.pipelines.cli import add_learner_arguments

    p = sub.add_parser(
        "stream", help="learn a live Kafka stream with delayed labels until stopped",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "One unbounded Beam job: each feature record (message key = event id) is scored\n"
            "on arrival; when its label arrives (a `label:Y` record, or a record on --labels)\n"
            "the model learns it and an outcome row is written. Labels that never come expire\n"
            "after --label-ttl. Ctrl-C drains: final snapshot, exit 130."
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
    p.add_argument("source", metavar="kafka://HOST:PORT/TOPIC[,TOPIC...]",
                   help="the events topic(s); message key = event id")
    p.add_argument("--labels", metavar="kafka://HOST:PORT/TOPIC",
                   help="labels topic (key = event id, value Y or label:Y), co-partitioned "
                   "with the events topics")
    add_learner_arguments(p)
    p.add_argument("--key-by", choices=KEY_BY,
                   help="one model per entity: the event id's text before its first '/'")
    p.add_argument("--format", choices=("libsvm", "csv"),
                   help="message format (default: libsvm; label token ? = unlabelled)")
    p.add_argument("--n-features", type=int, metavar="D",
                   help="feature dimension of LIBSVM messages (required for LIBSVM)")
    p.add_argument("--hash-features", type=_hash_bits, metavar="K",
                   help="hash LIBSVM feature indices into 2^K columns (K, 2^K or the power of "
                   "two), colliding values summed: a fixed width for open vocabularies "
                   "(instead of --n-features)")
    p.add_argument("--rows", choices=("auto", "dense", "sparse"), default="auto",
                   help="features as dense rows or sparse CSR rows (memory grows with the "
                   "non-zeros); auto: sparse for LIBSVM messages wider than 2,048 features")
    p.add_argument("--label-column", metavar="COL",
                   help="label position of CSV messages (0-based; default: last)")
    p.add_argument("--delimiter", metavar="CHAR", help="CSV delimiter (default: ,)")
    p.add_argument("--positive-label", metavar="LABEL",
                   help="raw label mapped to +1 (all others to -1)")
    p.add_argument("--task", choices=TASKS, help="default: the learners' task")
    p.add_argument("--label-ttl", default="1h", metavar="DURATION",
                   help="an event whose label has not come after this long (event time) "
                   "expires as an unlabeled row (default: 1h; e.g. 30s, 10m, 2d)")
    p.add_argument("--metrics-window", default="1m", metavar="DURATION",
                   help="event-time window of the metrics rows (default: 1m)")
    s = p.add_argument_group("outputs and snapshots")
    s.add_argument("--out", "-o", metavar="DIR",
                   help="output directory (default: the checkpoint's, else "
                   "runs/stream-<topic>-<learners>)")
    s.add_argument("--checkpoint", metavar="DIR",
                   help="snapshot learner states and offsets here, together with the output "
                   "files; a restart resumes from the last snapshot (one run per DIR)")
    s.add_argument("--snapshot-every", type=int, default=10_000, metavar="N",
                   help="snapshot after N events (default: 10000)")
    s.add_argument("--snapshot-seconds", default="10s", metavar="DURATION",
                   help="and at least this often (default: 10s); output files appear at each "
                   "snapshot")
    s.add_argument("--kafka-out", metavar="kafka://HOST:PORT/PREFIX",
                   help="also send every row as JSON to PREFIX-predictions, -outcomes, "
                   "-unlabeled, -metrics, -dead-letters (message key = row_id)")
    s.add_argument("--kafka-outputs", metavar="NAME[,NAME...]",
                   help="with --kafka-out: only these outputs (default: all five)")
    s.add_argument("--kafka-option", action="append", metavar="KEY=VALUE",
                   help="kafka-python client setting (repeatable)")
    s.add_argument("--kafka-client", choices=KAFKA_CLIENTS, default="auto",
                   help="the reader's Kafka client: confluent-kafka (librdkafka: C decoding, "
                   "background prefetch), or kafka-python; auto (default): confluent-kafka "
                   "when installed and every --kafka-option has a librdkafka equivalent")
    s.add_argument("--init-from", metavar="DIR",
                   help="warm start: models without a snapshot start from the learners in "
                   "this stream checkpoint or replay checkpoint directory")
    r = p.add_argument_group("running")
    r.add_argument("--max-seconds", metavar="DURATION",
                   help="drain after this long and exit 0")
    r.add_argument("--idle-stop", metavar="DURATION",
                   help="drain once no event arrived for this long and exit 0")
    r.add_argument("--runner", choices=RUNNERS, default="direct",
                   help="direct: Beam's FnApiRunner in this process (default); portable: "
                   "Beam's job API (a local job service unless --job_endpoint is given after "
                   "'--'; LOOPBACK unless --environment_type). Beam options go after '--'")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=cmd_stream)
    return p


def cmd_stream(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    try:
        config = stream_config(args, argv)
    except ValueError as exc:
        return _error(str(exc))
    return run(config)
