"""``kernelstream stream``: one unbounded Beam job over Kafka topics, until stopped.

Flow: arguments → :class:`StreamConfig` (every option error is one line, exit 2, before Beam
is imported) → :func:`prepare`, the up-front checks, each one line and exit 2 (the checkpoint
directory's writer lock, the broker, the topics and their partitions, the committed offsets
against the log, the ``--kafka-out`` broker, ``--init-from``) → the pipeline of
:mod:`kernelstream.transforms.stream` on the FnApiRunner (``--runner direct``) or Beam's
portable job API (``--runner portable``: a local job service, or ``--job_endpoint`` after
``--``; LOOPBACK workers unless ``--environment_type`` says otherwise) → the run summary.

Stopping. SIGINT/SIGTERM, ``--max-seconds`` and ``--idle-stop`` all *drain*: the reader
releases what it holds and ends, the Committer writes the last snapshot at its last
``finish_bundle``, the pipeline finishes. A signal exits 130 with one line on stderr; the
other two exit 0. A second signal exits 130 at once (the next run resumes from the last
snapshot). The drain request reaches workers in this process directly and workers elsewhere
(EXTERNAL) through a file in a per-run control directory, where the Committer also writes the
status the progress lines show.

This module imports no Beam at import time: the CLI builds its parser from it.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import logging
import math
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelstream.pipelines.config import TASKS, ConfigError, learner_configs, resolve_task

PROG = "kernelstream"
SCHEME = "kafka://"
EXIT_STOPPED = 130
RUNNERS = ("direct", "portable")
KEY_BY = ("id-prefix",)
OUTPUT_NAMES = ("predictions", "outcomes", "unlabeled", "metrics", "dead_letters")
SUMMARY_SCHEMA = 1
PROGRESS_EVERY = 2.0  # seconds between progress lines

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def output_topic_names(prefix: str) -> dict[str, str]:
    """Output name → its topic with ``--kafka-out kafka://HOST/PREFIX``: PREFIX-predictions,
    PREFIX-outcomes, PREFIX-unlabeled, PREFIX-metrics, PREFIX-dead-letters."""
    return {name: f"{prefix}-{name.replace('_', '-')}" for name in OUTPUT_NAMES}


class UpfrontError(Exception):
    """A check before the run failed (one line, exit 2)."""


def parse_duration(text: str, what: str) -> float:
    """``"10m"``, ``"2.5s"``, ``"500ms"``, ``"1h"``, ``"7d"`` or plain seconds → seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise ConfigError(f"{what} {text!r}: expected a duration such as 500ms, 10s, 10m, 2h, "
                          "7d")
    value = float(m.group(1)) * _UNIT_S[m.group(2) or "s"]
    if not value > 0:
        raise ConfigError(f"{what} must be > 0, got {text!r}")
    return value


def parse_topics(url: str, what: str) -> tuple[str, tuple[str, ...]]:
    """``kafka://HOST:PORT[,HOST:PORT]/TOPIC[,TOPIC2...]`` → ``(bootstrap, topics)``."""
    from kernelstream.kafka_client.clients import KafkaTopic

    if not url.startswith(SCHEME):
        raise ConfigError(f"{what} {url!r}: expected kafka://HOST:PORT/TOPIC[,TOPIC...]")
    servers, sep, names = url[len(SCHEME):].partition("/")
    topics = tuple(t for t in names.split(",")) if sep else ()
    if not topics or any(not t for t in topics):
        raise ConfigError(f"{what} {url!r}: expected kafka://HOST:PORT/TOPIC[,TOPIC...]")
    for t in topics:
        try:
            KafkaTopic.parse(f"{SCHEME}{servers}/{t}")
        except ValueError as exc:
            raise ConfigError(f"{what}: {exc}") from None
    if len(set(topics)) != len(topics):
        raise ConfigError(f"{what} {url!r}: a topic is named twice")
    return servers, topics


@dataclass(frozen=True)
class StreamConfig:
    """A fully checked ``kernelstream stream`` command (no Beam, no broker contacted)."""

    bootstrap: str
    topics: tuple[str, ...]
    labels_topic: str | None
    configs: tuple[Any, ...]  # engine.core.LearnerConfig
    spec: Any  # engine.stream_routing.StreamSpec
    out: str | None  # None: the checkpoint's, else runs/stream-<topic>-<learners>
    checkpoint: str | None = None
    kafka_out: tuple[str, str] | None = None  # (bootstrap, prefix)
    kafka_outputs: tuple[str, ...] = OUTPUT_NAMES  # the outputs sent to Kafka
    client: tuple[tuple[str, str], ...] = ()
    init_from: str | None = None
    max_seconds: float | None = None
    idle_stop: float | None = None
    snapshot_every: int = 10_000
    snapshot_seconds: float = 10.0
    runner: str = "direct"
    pipeline_args: tuple[str, ...] = ()
    quiet: bool = False
    argv: tuple[str, ...] = field(default_factory=tuple)

    @property
    def all_topics(self) -> tuple[str, ...]:
        return (*self.topics, *([self.labels_topic] if self.labels_topic else []))

    def configs_doc(self) -> dict[str, Any]:
        """The learner configurations as a checkpoint records them (the replay's form)."""
        return {c.name: {"learner": c.learner, "params": dict(c.params)} for c in self.configs}

    def stream_doc(self) -> dict[str, Any]:
        """What a checkpoint's models depend on besides the learners."""
        s = self.spec
        return {"topics": list(self.topics), "labels_topic": self.labels_topic,
                "seed": s.seed, "format": s.fmt, "n_features": s.n_features,
                "label_column": s.label_column, "delimiter": s.delimiter, "task": s.task,
                "positive_label": s.positive_label, "key_by": s.key_by,
                "label_ttl_ms": s.label_ttl_ms, "metrics_window_ms": s.metrics_window_ms}


def _in_process(runner: str, pipeline_args: Sequence[str]) -> bool:
    """Whether the SDK workers run in this process (FnApiRunner in-process, LOOPBACK)."""
    if runner == "direct":
        return not any(a.startswith("--direct_running_mode") and "multi_processing" in a
                       for a in pipeline_args)
    env = [a for a in pipeline_args if a.startswith("--environment_type")]
    return not env or env[-1].split("=", 1)[-1].upper() == "LOOPBACK"


def stream_config(args: argparse.Namespace, argv: Sequence[str] = ()) -> StreamConfig:
    """Arguments → a :class:`StreamConfig`; raises ``ValueError`` (one line) on bad input."""
    from kernelstream.engine.core import LearnerConfig
    from kernelstream.engine.stream_routing import StreamSpec
    from kernelstream.kafka_client.clients import client_settings

    bootstrap, topics = parse_topics(args.source, "SOURCE")
    labels_topic = None
    if args.labels is not None:
        lb, lt = parse_topics(args.labels, "--labels")
        if len(lt) != 1:
            raise ConfigError("--labels names one topic")
        if lb != bootstrap:
            raise ConfigError(f"--labels must be on the events' brokers ({bootstrap}), got {lb}")
        if lt[0] in topics:
            raise ConfigError(f"--labels topic {lt[0]!r} is also an events topic")
        labels_topic = lt[0]
    configs = learner_configs(args.learner or [], args.param or [])
    task = resolve_task(configs, args.task)
    engine_configs = tuple(LearnerConfig(c.label, c.name, c.params, c.seed_name)
                           for c in configs)
    fmt = args.format or "libsvm"
    if fmt == "libsvm" and args.n_features is None:
        raise ConfigError("LIBSVM messages need --n-features (a stream cannot be scanned first)")
    if fmt == "libsvm" and args.label_column is not None:
        raise ConfigError("--label-column applies to CSV messages (--format csv)")
    if args.n_features is not None and args.n_features < 1:
        raise ConfigError(f"--n-features must be >= 1, got {args.n_features}")
    label_column = None
    if args.label_column is not None:
        try:
            label_column = int(args.label_column)
        except ValueError:
            raise ConfigError(f"--label-column of CSV messages is a 0-based position (messages "
                              f"have no header), got {args.label_column!r}") from None
    ttl = parse_duration(args.label_ttl, "--label-ttl")
    window = parse_duration(args.metrics_window, "--metrics-window")
    if args.snapshot_every < 1:
        raise ConfigError(f"--snapshot-every must be >= 1, got {args.snapshot_every}")
    snapshot_seconds = parse_duration(args.snapshot_seconds, "--snapshot-seconds")
    max_seconds = (None if args.max_seconds is None
                   else parse_duration(args.max_seconds, "--max-seconds"))
    idle_stop = None if args.idle_stop is None else parse_duration(args.idle_stop,
                                                                   "--idle-stop")
    kafka_out = None
    if args.kafka_out is not None:
        ob, ot = parse_topics(args.kafka_out, "--kafka-out")
        if len(ot) != 1:
            raise ConfigError("--kafka-out names one topic prefix: kafka://HOST:PORT/PREFIX")
        kafka_out = (ob, ot[0])
    kafka_outputs = OUTPUT_NAMES
    if args.kafka_outputs is not None:
        names = tuple(dict.fromkeys(n.strip().replace("-", "_")
                                    for n in args.kafka_outputs.split(",") if n.strip()))
        bad = [n for n in names if n not in OUTPUT_NAMES]
        if bad or not names:
            raise ConfigError(f"--kafka-outputs {args.kafka_outputs!r}: a comma-separated list "
                              f"of {', '.join(OUTPUT_NAMES)}")
        if kafka_out is None:
            raise ConfigError("--kafka-outputs goes with --kafka-out")
        kafka_outputs = names
    client = client_settings(args.kafka_option or [])
    pipeline_args = tuple(getattr(args, "pipeline_args", ()) or ())
    if any(a.startswith("--direct_num_workers") and a.split("=", 1)[-1] not in ("1", "0")
           for a in pipeline_args):
        raise ConfigError("a stream runs on one worker (its snapshot is one consistent cut of "
                          "every model and offset): drop --direct_num_workers")
    for path, what in ((args.checkpoint, "--checkpoint"), (args.out, "--out"),
                       (args.init_from, "--init-from")):
        if path is not None and "://" in path:
            raise ConfigError(f"{what} {path}: a stream's files need a local or mounted file "
                              "system (a lock, renames), not an object store")
    if (args.init_from is not None and args.checkpoint is not None
            and os.path.realpath(args.init_from) == os.path.realpath(args.checkpoint)):
        raise ConfigError("--init-from is the --checkpoint directory itself: a checkpoint "
                          "resumes on its own")
    try:
        spec = StreamSpec(
            configs=engine_configs, seed=args.seed, fmt=fmt, n_features=args.n_features,
            label_column=label_column, delimiter=args.delimiter or ",", task=task,
            positive_label=args.positive_label,
            key_by=None if args.key_by is None else args.key_by,
            label_ttl_ms=max(1, round(ttl * 1000)),
            metrics_window_ms=max(1, round(window * 1000)), labels_topic=labels_topic,
            source_prefix=f"{SCHEME}{bootstrap}/")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return StreamConfig(
        bootstrap=bootstrap, topics=topics, labels_topic=labels_topic, configs=engine_configs,
        spec=spec, out=args.out, checkpoint=args.checkpoint, kafka_out=kafka_out,
        kafka_outputs=kafka_outputs,
        client=client, init_from=args.init_from, max_seconds=max_seconds, idle_stop=idle_stop,
        snapshot_every=args.snapshot_every, snapshot_seconds=snapshot_seconds,
        runner=args.runner, pipeline_args=pipeline_args, quiet=args.quiet, argv=tuple(argv))


# -- up-front checks ------------------------------------------------------------------------------


@dataclass
class Prepared:
    """What the checks found: where the run starts and writes."""

    out: str
    start: dict[tuple[str, int], int]  # next offset of every input partition
    store: Any = None  # the checkpoint's SnapshotStore (writer lock held)
    resume_epoch: int | None = None
    init_kind: str | None = None
    partitions: int = 0

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def _default_out(config: StreamConfig) -> str:
    return os.path.join("runs", f"stream-{config.topics[0]}-"
                        + "+".join(c.name for c in config.configs))


def _check_resume(config: StreamConfig, info: dict[str, Any], directory: str) -> None:
    """A checkpoint continues the run that wrote it: same learners, same stream settings."""
    saved_configs = info.get("configs")
    ours = json.loads(json.dumps(config.configs_doc(), default=str))
    if saved_configs is not None and saved_configs != ours:
        raise UpfrontError(f"checkpoint {directory} was written by the learner configurations "
                           f"{json.dumps(saved_configs)}; this run has {json.dumps(ours)} (use "
                           "the same ones, or a new --checkpoint)")
    saved = info.get("stream") or {}
    mine = config.stream_doc()
    diff = [k for k in mine if k in saved and saved[k] != mine[k]]
    if diff:
        parts = ", ".join(f"{k} {saved[k]!r} -> {mine[k]!r}" for k in diff)
        raise UpfrontError(f"checkpoint {directory} was written with other stream settings "
                           f"({parts}); use the same ones, or a new --checkpoint")


def _init_kind(config: StreamConfig) -> str | None:
    """``--init-from``: a stream checkpoint (``"stream"``) or a replay checkpoint
    (``"replay"``); its learners must be this run's."""
    path = config.init_from
    if path is None:
        return None
    from kernelstream.engine import checkpoints
    from kernelstream.engine.snapshot import SnapshotView, is_snapshot_dir

    if not os.path.isdir(path):
        raise UpfrontError(f"--init-from {path}: no such directory")
    ours = config.configs_doc()
    if is_snapshot_dir(path):
        with SnapshotView.open(path) as view:
            saved = view.info().get("configs") or {}
        kind = "stream"
    else:
        ckpt = checkpoints.latest(path)
        if ckpt is None:
            raise UpfrontError(f"--init-from {path}: neither a stream checkpoint nor a replay "
                               "checkpoint (a replay saves its models with --checkpoint DIR)")
        saved = ckpt.info().get("configs") or {}
        kind = "replay"
    for name, cfg in ours.items():
        have = saved.get(name)
        if have is not None and have.get("learner") != cfg["learner"]:
            raise UpfrontError(f"--init-from {path}: configuration {name!r} is a "
                               f"{have.get('learner')} there, a {cfg['learner']} here")
    if not any(name in saved for name in ours):
        raise UpfrontError(f"--init-from {path} has none of this run's configurations "
                           f"({', '.join(ours)}; it has {', '.join(saved) or 'none'})")
    return kind


def _check_kafka_out(config: StreamConfig, partitions: int) -> None:
    """The ``--kafka-out`` brokers answer; the output topics exist (created if missing)."""
    if config.kafka_out is None:
        return
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    from kernelstream.kafka_client.clients import client_defaults, typed_settings

    bootstrap, prefix = config.kafka_out
    topics = output_topic_names(prefix)
    names = [topics[n] for n in config.kafka_outputs]
    try:
        cfg = {"bootstrap_timeout_ms": 5000, "request_timeout_ms": 10000}
        cfg.update({k: v for k, v in typed_settings(config.client, client_defaults()[0]).items()
                    if k in KafkaAdminClient.DEFAULT_CONFIG})
        admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","),
                                 client_id="kernelstream", **cfg)
    except KafkaError as exc:
        raise UpfrontError(f"--kafka-out: cannot connect to the Kafka broker(s) {bootstrap}: "
                           f"{type(exc).__name__}") from None
    try:
        have = set(admin.list_topics())
        missing = [n for n in names if n not in have]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(n, max(1, partitions), 1) for n in missing])
    except KafkaError as exc:
        raise UpfrontError(f"--kafka-out {bootstrap}: {type(exc).__name__}: {exc}") from None
    finally:
        admin.close()


def prepare(config: StreamConfig) -> Prepared:
    """The up-front checks (module docstring); raises :class:`UpfrontError`."""
    from kernelstream.engine.snapshot import (
        CheckpointInUse,
        CorruptSnapshotError,
        OffsetOutOfLog,
        SnapshotStore,
        publish,
    )
    from kernelstream.kafka_client.partitions import kafka_partition_info, partition_groups

    store = None
    out = config.out
    committed: dict[tuple[str, int], int] = {}
    resume = None
    try:
        if config.checkpoint is not None:
            try:
                store = SnapshotStore.open(config.checkpoint)
            except CheckpointInUse as exc:
                raise UpfrontError(str(exc)) from None
            except (ValueError, OSError, CorruptSnapshotError) as exc:
                raise UpfrontError(f"--checkpoint {config.checkpoint}: {exc}") from None
            resume = store.head
            if resume is not None:
                info = store.info()
                _check_resume(config, info, config.checkpoint)
                saved_out = info.get("out")
                if out is None:
                    out = saved_out
                elif saved_out is not None and os.path.realpath(out) != saved_out:
                    raise UpfrontError(f"checkpoint {config.checkpoint} writes its outputs to "
                                       f"{saved_out}; give --out {saved_out} (outputs are "
                                       "committed with the snapshots)")
                committed = store.offsets()
        if out is None:
            out = _default_out(config)
        try:
            info = kafka_partition_info(config.bootstrap, config.all_topics, config.client)
        except (ConnectionError, FileNotFoundError) as exc:
            raise UpfrontError(str(exc)) from None
        try:
            groups = partition_groups(info, config.all_topics, committed)
        except OffsetOutOfLog as exc:
            raise UpfrontError(str(exc)) from None
        except ValueError as exc:
            raise UpfrontError(f"{SCHEME}{config.bootstrap}: {exc}") from None
        start = {}
        for g in groups:
            for tp, off in zip(g.partitions, g.start, strict=True):
                start[tp] = int(off)
        _check_kafka_out(config, len(groups))
        init_kind = _init_kind(config)
        try:
            os.makedirs(out, exist_ok=True)
            if store is not None:
                # roll a commit forward whose publishing a crash cut short, drop the files of
                # an epoch that never committed
                publish(out, None, store.head)
            else:
                _clear_outputs(out)
            for d in glob.glob(os.path.join(out, ".run-*")):  # a killed run's control folder
                shutil.rmtree(d, ignore_errors=True)
        except OSError as exc:
            raise UpfrontError(f"--out {out}: {exc}") from None
        return Prepared(out, start, store, resume, init_kind, len(groups))
    except BaseException:
        if store is not None:
            store.close()
        raise


def _clear_outputs(out: str) -> None:
    """A run without checkpoint starts the topic over: remove the previous run's files."""
    for name in OUTPUT_NAMES:
        d = os.path.join(out, name)
        for f in glob.glob(os.path.join(d, "part-*.parquet")):
            os.unlink(f)
        shutil.rmtree(os.path.join(d, ".pending"), ignore_errors=True)


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


class Stopper:
    """Drain requests (signals, ``--max-seconds``, ``--idle-stop``) and progress lines."""

    def __init__(self, config: StreamConfig, job: Any, out: str) -> None:
        self.config, self.job, self.out = config, job, out
        self.t0 = time.monotonic()
        self.reason: str | None = None
        self.signal_name: str | None = None
        self.status: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kernelstream-stream-monitor",
                                        daemon=True)
        self._previous: dict[int, Any] = {}
        self._last_records: int | None = None
        self._last_change = time.monotonic()
        self._last_line = (0.0, 0, 0)  # (time, records, outcomes) of the previous line

    # -- drain -----------------------------------------------------------------------------
    def drain(self, reason: str) -> None:
        from kernelstream.transforms.kafka_read import request_drain

        if self.reason is None:
            self.reason = reason
        with contextlib.suppress(OSError), open(self.job.drain_path, "w") as f:
            f.write(reason + "\n")
        request_drain()

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is not None:  # a second signal: stop now
            where = (f"resumes from the last snapshot in {self.config.checkpoint}"
                     if self.config.checkpoint else "no snapshot kept (no --checkpoint)")
            print(f"{PROG} stream: stopped ({name} twice) before the final snapshot; "
                  f"{where}", file=sys.stderr, flush=True)
            os._exit(EXIT_STOPPED)
        self.signal_name = name
        self.drain(name)

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._on_signal)
        self._thread.start()

    def uninstall(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    # -- status and progress ---------------------------------------------------------------
    def read_status(self) -> dict[str, Any]:
        try:
            with open(self.job.status_path) as f:
                self.status = json.load(f)
        except (OSError, ValueError):
            pass
        return self.status

    def _watch(self) -> None:
        last_line = time.monotonic()
        while not self._stop.wait(0.2):
            now = time.monotonic()
            st = self.read_status()
            records = st.get("records")
            if records is not None and self._last_records is None:
                self._last_change = now  # idle time counts from the pipeline's start
            if records is not None and records != self._last_records:
                self._last_records = records
                self._last_change = now
            if self.config.max_seconds is not None and now - self.t0 >= self.config.max_seconds:
                self.drain("max-seconds")
            if (self.config.idle_stop is not None and st
                    and now - self._last_change >= self.config.idle_stop):
                self.drain("idle")
            if not self.config.quiet and now - last_line >= PROGRESS_EVERY:
                last_line = now
                print(self.progress_line(st, now), file=sys.stderr, flush=True)

    def progress_line(self, st: dict[str, Any], now: float) -> str:
        elapsed = now - self.t0
        if not st:
            return f"[stream] {elapsed:5.1f} s  starting ..."
        t_prev, r_prev, o_prev = self._last_line
        records = int(st.get("records", 0))
        outcomes = int(st.get("rows", {}).get("outcomes", 0))
        dt = max(1e-9, now - t_prev) if t_prev else max(1e-9, elapsed)
        rate, lrate = (records - r_prev) / dt, (outcomes - o_prev) / dt
        self._last_line = (now, records, outcomes)
        lag_ms = st.get("lag_ms")
        lag = "-" if lag_ms is None else f"{lag_ms / 1000:.2f} s"
        written = int(st.get("published", 0)) + int(st.get("buffered", 0))
        epoch = st.get("epoch")
        draining = "  draining" if self.reason else ""
        return (f"[stream] {elapsed:5.1f} s  records {records:,} ({rate:,.0f}/s)  labels "
                f"learnt {outcomes:,} ({lrate:,.0f}/s)  lag {lag}  pending "
                f"{st.get('pending', 0):,}  outputs {written:,}  epoch "
                f"{'-' if epoch is None else epoch}{draining}")


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
    # Beam's and kafka-python's warnings would drown the one-line messages; the CLI reports
    # failures itself
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)


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
    from kernelstream.transforms import stream as ts

    opts = _reader_options(config.pipeline_args)
    part = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    out = os.path.realpath(prep.out)
    # the run's control folder: the drain request and the workers' status.json
    control = os.path.join(out, f".run-{part}")
    os.makedirs(control, exist_ok=True)
    info = {"out": out, "configs": config.configs_doc(), "stream": config.stream_doc(),
            "argv": list(config.argv)}
    job = ts.StreamJob(
        spec=config.spec, bootstrap=config.bootstrap, topics=config.topics, out=out,
        control=control, part=part, labels_topic=config.labels_topic, client=config.client,
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
            ts.register_local_store(job.checkpoint, prep.store)
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
            _ = p | "Stream" >> ts.LiveStream(job)
            result = p.run()
            result.wait_until_finish()
    except Exception as exc:  # the pipeline failed: one line, not Beam's traceback
        failure = exc
    finally:
        stopper.uninstall()
        if job.checkpoint is not None:
            ts.unregister_local_store(job.checkpoint)
    seconds = time.monotonic() - t0
    status = stopper.read_status()
    shutil.rmtree(control, ignore_errors=True)
    epoch = _head(job.checkpoint, prep)
    if failure is not None:
        where = (f"; resumes from snapshot epoch {epoch} in {config.checkpoint}"
                 if epoch is not None else "")
        return _error(f"{_error_line(failure)}{where}", code=1)
    doc = summary(config, out, part, status, seconds, epoch, stopper.reason)
    _write_summary(out, doc)
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

    from kernelstream.transforms.stream import StreamPipelineOptions

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


# -- summary --------------------------------------------------------------------------------------


def _run_files(out: str, name: str, part: str) -> list[str]:
    return sorted(glob.glob(os.path.join(out, name, f"part-e*-{part}.parquet")))


def summary(config: StreamConfig, out: str, part: str, status: dict[str, Any], seconds: float,
            epoch: int | None, stopped_by: str | None) -> dict[str, Any]:
    """The run's summary: counts of the rows this run published, the mistake rate and label
    delays of its outcomes (read back from its files)."""
    import pyarrow.parquet as pq

    from kernelstream.engine.stream_rows import nearest_rank

    counts: dict[str, int] = {}
    mistakes = labelled = 0
    delays: list[int] = []
    losses: list[float] = []
    for name in OUTPUT_NAMES:
        files = _run_files(out, name, part)
        counts[name] = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        if name == "outcomes":
            for f in files:
                t = pq.read_table(f, columns=["mistake", "delay_ms", "loss"])
                ms = [m for m in t.column("mistake").to_pylist() if m is not None]
                mistakes += sum(ms)
                labelled += len(ms)
                delays += t.column("delay_ms").to_pylist()
                losses += t.column("loss").to_pylist()
    delays.sort()
    records = int(status.get("records", 0))
    return {
        "schema": SUMMARY_SCHEMA, "command": "stream",
        "source": f"{SCHEME}{config.bootstrap}/{','.join(config.topics)}",
        "labels": (None if config.labels_topic is None
                   else f"{SCHEME}{config.bootstrap}/{config.labels_topic}"),
        "configs": list(config.configs_doc()), "out": out, "checkpoint": config.checkpoint,
        "snapshot_epoch": epoch, "seconds": seconds, "stopped_by": stopped_by,
        "records": records, "records_per_second": records / seconds if seconds > 0 else None,
        **counts,
        "mistake_rate": 100.0 * mistakes / labelled if labelled else None,
        "avg_loss": math.fsum(losses) / len(losses) if losses else None,
        "delay_p50_ms": nearest_rank(delays, 50), "delay_p99_ms": nearest_rank(delays, 99),
        "argv": list(config.argv),
    }


def _write_summary(out: str, doc: dict[str, Any]) -> None:
    from kernelstream._json import json_safe

    tmp = os.path.join(out, ".summary.json.tmp")
    with contextlib.suppress(OSError):
        with open(tmp, "w") as f:
            f.write(json.dumps(json_safe(doc), indent=2, allow_nan=False) + "\n")
        os.replace(tmp, os.path.join(out, "summary.json"))


def _ms(v: int | None) -> str:
    return "-" if v is None else (f"{v / 1000:.2f} s" if abs(v) >= 1000 else f"{v} ms")


def format_summary(doc: dict[str, Any], checkpoint: str | None) -> str:
    mr = doc["mistake_rate"]
    lines = [
        f"{doc['records']:,} records in {doc['seconds']:.1f} s "
        f"({(doc['records_per_second'] or 0):,.0f}/s)",
        f"predictions {doc['predictions']:,}  outcomes {doc['outcomes']:,}"
        + ("" if mr is None else f"  mistake rate {mr:.2f}%")
        + f"  label delay p50 {_ms(doc['delay_p50_ms'])} p99 {_ms(doc['delay_p99_ms'])}",
        f"unlabeled {doc['unlabeled']:,}  dead letters {doc['dead_letters']:,}  "
        f"metrics rows {doc['metrics']:,}",
        f"outputs: {doc['out']}" + (f"  snapshot epoch {doc['snapshot_epoch']} in {checkpoint}"
                                    if checkpoint else ""),
    ]
    return "\n".join(lines)


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
