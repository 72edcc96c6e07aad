"""``kernelstream stream``: one unbounded Beam job over Kafka topics, until stopped.

Flow: arguments → :class:`~kernelstream.pipelines.live.stream_config.StreamConfig` (every option
error is one line, exit 2, before Beam is imported) →
:func:`~kernelstream.pipelines.live.stream_prepare.prepare`, the up-front checks, each one line and
exit 2 (the checkpoint directory's writer lock, the broker, the topics and their partitions,
the committed offsets against the log, the ``--kafka-out`` broker, ``--init-from``) → the
pipeline of :mod:`kernelstream.transforms.live.stream` on the FnApiRunner (``--runner direct``) or
Beam's portable job API (``--runner portable``: a local job service, or ``--job_endpoint``
after ``--``; LOOPBACK workers unless ``--environment_type`` says otherwise) → the run summary
(:mod:`~kernelstream.pipelines.live.stream_summary`).

Stopping. SIGINT/SIGTERM, ``--max-seconds`` and ``--idle-stop`` all *drain*
(:mod:`~kernelstream.pipelines.live.stream_monitor`): a checkpoint at the positions the reader has
claimed, not a flush of what it holds, so a restart continues exactly where an uninterrupted
run would be (as after a kill). ``--idle-stop`` counts only while the reader has read
everything on the broker. A signal exits 130 with one line on stderr; the other two exit 0.

Failures. An up-front check exits 2, among them a ``--out`` or ``--checkpoint`` folder that
cannot take a small file (a disk still full) and a published output file that is not whole.
A failure during the run exits 1 with one line naming the snapshot epoch it resumes from; a
file of a snapshot epoch that cannot be written whole (an output file or the snapshot itself:
a full disk) is such a failure, and that epoch is neither committed nor published
(:class:`~kernelstream.transforms.live.committer.Committer`). Once there is room again, the next
start drops its pending files and makes them again from the snapshot, as after ``kill -9``.
A restart on a disk still full exits 2 (the folder takes no 64 KiB file), or 1 at its first
snapshot when the pending files it dropped made room for that but not for an epoch. A log
that changed under the run (:class:`~kernelstream.engine.offsets.LogChanged`: the broker came
back without its data; :class:`~kernelstream.engine.offsets.OffsetOutOfLog`: records gone
before they were read) exits 2, as the same finding at the start does, because no restart
from the checkpoint can help.

This module is the launcher; the command line is
:mod:`kernelstream.pipelines.commands.stream`. It imports no Beam at import time (nor do the
modules above).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kernelstream._services import serve
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.engine.offsets import LogChanged, OffsetOutOfLog
from kernelstream.kafka_client.names import markers_topic
from kernelstream.pipelines.commands._common import error
from kernelstream.pipelines.config import PROG
from kernelstream.pipelines.live.stream_config import (
    EXIT_STOPPED,
    StreamConfig,
    UpfrontError,
    output_topic_names,
)
from kernelstream.pipelines.live.stream_monitor import Stopper
from kernelstream.pipelines.live.stream_prepare import Prepared, prepare
from kernelstream.pipelines.live.stream_summary import (
    format_summary,
    snapshot_phrase,
    summary,
    warnings,
    write_summary,
)


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


_LOG_CHANGED = re.compile(r"(?:^|[\s.])(LogChanged|OffsetOutOfLog): (.+)$")


def _log_changed(exc: BaseException) -> str | None:
    """The one line of a failure because the log changed under the run (module docstring),
    else None. The error comes out of the pipeline: the exception itself where the runner
    chains it, else its ``Name: message`` line in the (remote) traceback text."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, (LogChanged, OffsetOutOfLog)):
            return str(e)
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    found = [m.group(2).strip() for ln in str(exc).splitlines()
             if (m := _LOG_CHANGED.search(ln.strip()))]
    if not found:
        return None
    text = re.sub(r"\s*\[while running '[^']*'\]\s*$", "", found[-1])
    return text if len(text) <= 400 else text[:397] + "..."


def _quiet_logs() -> None:
    # Beam's, kafka-python's and librdkafka's warnings would drown the one-line messages; the
    # CLI reports failures itself
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    logging.getLogger("kernelstream.rdkafka").setLevel(logging.CRITICAL)
    beam_errors = logging.getLogger("apache_beam.runners.common")
    if not any(isinstance(f, _NoWriteErrorTraceback) for f in beam_errors.filters):
        beam_errors.addFilter(_NoWriteErrorTraceback())


class _NoWriteErrorTraceback(logging.Filter):
    """Beam logs every error a DoFn raises with its traceback (``DoFnRunner``, at ERROR); a
    write error of a snapshot epoch (a full disk) or a log that changed under the run are the
    user's to fix and the launcher's one line says it all (other errors keep their traceback:
    those are bugs to report)."""

    QUIET = frozenset({"EpochWriteError", "LogChanged", "OffsetOutOfLog"})

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return type(exc).__name__ not in self.QUIET


class _StoppedEarly(BaseException):
    """A SIGINT or SIGTERM before the pipeline starts (its up-front checks and read); a
    BaseException, as KeyboardInterrupt, so that no handler of errors takes it."""


@contextlib.contextmanager
def _stop_before_start() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`_StoppedEarly` (naming the signal) meanwhile: there
    is nothing to drain yet, and the stop gets the same one line as a drained one."""
    def stop(signum: int, frame: Any) -> None:
        raise _StoppedEarly(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stopped_line(name: str, records: int, epoch: int | None, checkpoint: str | None,
                 out: str | None) -> str:
    """The one line on stderr of a run stopped by signal ``name`` (``out``: None before the
    stream started, when it has written nothing)."""
    where = (f"{snapshot_phrase(epoch)} in {checkpoint}" if checkpoint
             else f"outputs in {out}" if out is not None else "no outputs written")
    before = " before the stream started" if out is None else ""
    return f"{PROG} stream: stopped ({name}){before}: {records:,} records, {where}"


def run(config: StreamConfig, until: Callable[[dict[str, Any]], bool] | None = None) -> int:
    """Check, run until drained, report; the exit code. ``until``: also drain once it is
    true of the run's status (``records`` read, ...; the demo's end)."""
    _quiet_logs()
    try:
        with _stop_before_start():
            prep = prepare(config)
    except UpfrontError as exc:
        return error("stream", str(exc))
    except (_StoppedEarly, KeyboardInterrupt) as exc:  # nothing read into the stream yet
        name = str(exc) if isinstance(exc, _StoppedEarly) else "SIGINT"
        epoch = None
        if config.checkpoint is not None:  # a resume's snapshot, if it has one
            with contextlib.suppress(Exception), SnapshotView.open(config.checkpoint) as view:
                epoch = view.head
        print(stopped_line(name, 0, epoch, config.checkpoint, None), file=sys.stderr,
              flush=True)
        return EXIT_STOPPED
    try:
        return _execute(prep.resolved, prep, until)  # gamma=auto resolved by prepare()
    finally:
        prep.close()


def _execute(config: StreamConfig, prep: Prepared,
             until: Callable[[dict[str, Any]], bool] | None) -> int:
    # Beam: only once the stream runs (the transforms import it)
    from kernelstream.transforms.live import committer, kafka_read, stream_job
    from kernelstream.transforms.live import stream as live_stream

    opts = _reader_options(config.pipeline_args)
    part = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    out = os.path.realpath(prep.out)
    # the run's control folder: the drain request and the workers' status.json
    control = os.path.join(out, f".run-{part}")
    os.makedirs(control, exist_ok=True)
    # prepare() resolved it (a checkpoint's, else all): the snapshots record it for resumes
    assert config.merge is not None, "the stream's --merge is resolved by prepare()"
    info = {"out": out, "configs": config.configs_doc(), "stream": config.stream_doc(),
            "widths": config.widths_doc(), "scaling": config.scale_doc(),
            "argv": list(config.argv)}
    if prep.kafka_txn_id is not None:  # a resume finds its markers by it (a lost file too)
        info["kafka_txn_id"] = prep.kafka_txn_id
    job = stream_job.StreamJob(
        spec=config.spec, bootstrap=config.bootstrap, topics=config.topics, out=out,
        control=control, part=part, labels_topic=config.labels_topic, client=config.client,
        kafka_client=config.kafka_client, merge=config.merge,
        start_offsets=tuple((t, p, o) for (t, p), o in sorted(prep.start.items())),
        checkpoint=None if config.checkpoint is None else os.path.realpath(config.checkpoint),
        resume_epoch=prep.resume_epoch, init_from=config.init_from, init_kind=prep.init_kind,
        kafka_out=None if config.kafka_out is None else config.kafka_out[0],
        kafka_markers=(markers_topic(config.kafka_out[1])
                       if config.kafka_exactly_once and config.kafka_out is not None else None),
        kafka_txn_id=prep.kafka_txn_id,
        kafka_eos_starts=(prep.resume_epoch is None or prep.store is None or not (
            prep.store.info().get("stream") or {}).get("kafka_exactly_once")),
        kafka_topics=(() if config.kafka_out is None
                      else tuple((n, t) for n, t in output_topic_names(config.kafka_out[1]).items()
                                 if n in config.kafka_outputs)),
        snapshot_every=config.snapshot_every,
        snapshot_seconds=config.snapshot_seconds, info=tuple(info.items()), **opts)
    in_process = _in_process(config.runner, config.pipeline_args)
    if job.checkpoint is not None:
        if in_process:
            committer.register_local_store(job.checkpoint, prep.store)
        else:  # the worker's Committer takes the lock (another process)
            prep.close()
    kafka_read.clear_drain()
    stopper = Stopper(config, job, out, until)
    t0 = time.monotonic()
    failure: BaseException | None = None
    stopper.install()
    try:
        with contextlib.ExitStack() as stack:
            p = _pipeline(config, stack)
            _ = p | "Stream" >> live_stream.LiveStream(job)
            result = p.run()
            result.wait_until_finish()
    except Exception as exc:  # the pipeline failed: one line, not Beam's traceback
        failure = exc
    finally:
        stopper.uninstall()
        if job.checkpoint is not None:
            committer.unregister_local_store(job.checkpoint)
    seconds = time.monotonic() - t0
    status = stopper.read_status()
    shutil.rmtree(control, ignore_errors=True)
    epoch = _head(job.checkpoint, prep)
    if failure is not None:
        changed = _log_changed(failure)
        if changed is not None:
            return error("stream", changed, code=2)
        where = (f"; resumes from snapshot epoch {epoch} in {config.checkpoint}"
                 if epoch is not None else "")
        return error("stream", f"{_error_line(failure)}{where}", code=1)
    doc = summary(config, out, part, status, seconds, epoch, stopper.reason)
    write_summary(out, doc)
    print(format_summary(doc, config.checkpoint), flush=True)
    for line in warnings(doc):  # no better than no-skill (each configuration's own)
        print(f"{PROG} stream: {line}", file=sys.stderr, flush=True)
    if stopper.signal_name is not None:
        print(stopped_line(stopper.signal_name, doc["records"], epoch, config.checkpoint, out),
              file=sys.stderr, flush=True)
        return EXIT_STOPPED
    return 0


def _reader_options(pipeline_args: Sequence[str]) -> dict[str, Any]:
    from apache_beam.options.pipeline_options import PipelineOptions

    # Beam: only once the stream runs
    from kernelstream.transforms.live.stream_job import StreamPipelineOptions

    o = PipelineOptions(list(pipeline_args)).view_as(StreamPipelineOptions)
    out = {}
    for name in ("poll_timeout_ms", "max_records", "merge_idle_ms", "call_ms",
                 "poll_linger_ms"):
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
    with contextlib.suppress(Exception), SnapshotView.open(checkpoint) as view:
        return view.head
    return None
