"""Helpers several test modules share (plain functions and classes; the fixtures are in
``conftest.py``): a Beam worker pool for the EXTERNAL environment, a scripted stand-in for
kafka-python's consumer, a few calls against a test broker, and the one-record-at-a-time
routing the stream engine's batch paths are compared with.

They were copies in ``test_stream.py`` / ``test_beam_external.py``, ``test_kafka.py`` /
``test_kafka_bounded.py`` and ``test_engine_batch.py`` / ``test_stream_batching.py``; one copy
here keeps the two sides of each comparison identical.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.parquet as pq
import pytest

from kernelstream._services import free_port

# -- a Beam worker pool (EXTERNAL environment) ------------------------------------------------

STARTED = "Starting worker with command"  # what the pool logs for each SDK worker it starts


@dataclass
class WorkerPool:
    port: int
    log: Path

    @property
    def endpoint(self) -> str:
        return f"localhost:{self.port}"

    def workers_started(self) -> int:
        return self.log.read_text(errors="replace").count(STARTED)


@contextlib.contextmanager
def start_worker_pool(log: Path) -> Iterator[WorkerPool]:
    """A Beam worker pool (``worker_pool_main``, the entry point of the worker-pool container)
    logging to ``log``, in its own process group (it and the SDK workers it starts), with the
    venv first on its PATH so the workers it starts import kernelstream; stopped at the end by
    signalling that group only."""
    port = free_port("localhost")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
             "--service_port", str(port)],
            env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the worker pool exited ({proc.returncode}): {log.read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(("localhost", port), 1):
                break
            if time.monotonic() > deadline:
                pytest.fail("the worker pool did not listen within 60 s")
            time.sleep(0.2)
        yield WorkerPool(port, log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# -- Kafka without a broker: a scripted consumer ---------------------------------------------


class TP(NamedTuple):
    topic: str
    partition: int


class Msg(NamedTuple):
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes


class ScriptedConsumer:
    """Stands in for kafka-python's consumer: delivers scripted poll batches (``{partition:
    [(offset, timestamp)]}``; each message's value is its offset as text), then nothing.
    Records its seeks (positions), pauses, polls and whether it was closed; reports end
    offsets of 0 (too low, as some brokers do)."""

    def __init__(self, batches: list[dict[int, list[tuple[int, int]]]], partitions: int) -> None:
        self.batches = list(batches)
        self.pos = dict.fromkeys(range(partitions), 0)
        self.paused: list[int] = []
        self.polls = 0
        self.closed = False

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(self.pos)

    def assign(self, tps: list[Any]) -> None:
        pass

    def seek_to_beginning(self, *tps: Any) -> None:
        pass

    def seek(self, tp: Any, offset: int) -> None:
        self.pos[tp.partition] = offset

    def pause(self, tp: Any) -> None:
        self.paused.append(tp.partition)

    def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        return dict.fromkeys(tps, 0)  # too low, as some brokers report

    def position(self, tp: Any) -> int:
        return self.pos[tp.partition]

    def poll(self, timeout_ms: int = 0) -> dict[Any, list[Msg]]:
        self.polls += 1
        if not self.batches:
            time.sleep(timeout_ms / 1000)
            return {}
        out = {}
        for p, items in self.batches.pop(0).items():
            out[TP("t", p)] = [Msg(p, o, ts, None, f"{o}".encode()) for o, ts in items]
            self.pos[p] = items[-1][0] + 1
        return out

    def close(self) -> None:
        self.closed = True


# -- against a test broker ----------------------------------------------------------------------


def new_topic(broker: str, partitions: int = 1, name: str | None = None) -> str:
    """Create a topic (a fresh ``t-<random>`` name unless ``name``); its name."""
    from kafka.admin import KafkaAdminClient, NewTopic

    name = name or f"t-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    admin.close()
    return name


def produce(broker: str, topic: str,
            messages: Iterable[tuple[bytes | None, bytes] | tuple[bytes | None, bytes, int | None]],
            ) -> None:
    """Send ``(key, value)`` or ``(key, value, partition)`` messages in order (no partition,
    or None: by key) and wait until the broker has them."""
    from kafka import KafkaProducer

    prod = KafkaProducer(bootstrap_servers=broker, linger_ms=5)
    for key, value, *part in messages:
        prod.send(topic, key=key, value=value, partition=part[0] if part else None)
    prod.flush()
    prod.close()


def consume(broker: str, topic: str, idle: float = 1.0) -> list[tuple[int, bytes, bytes]]:
    """``(partition, key, value)`` of every message of ``topic``, read from the beginning until
    nothing arrived for ``idle`` seconds."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    out, last = [], time.monotonic()
    while time.monotonic() - last < idle:
        for recs in c.poll(timeout_ms=100).values():
            out += [(r.partition, r.key, r.value) for r in recs]
            last = time.monotonic()
    c.close()
    return out


def partition_records(broker: str, topic: str, partition: int) -> list[Any]:
    """Everything kafka-python reads of one partition, as the readers' ``SourceRecord`` s (the
    reference the stream readers are compared with)."""
    from kafka import KafkaConsumer, TopicPartition

    from kernelstream.engine.live.records import SourceRecord

    c = KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False)
    tp = TopicPartition(topic, partition)
    c.assign([tp])
    c.seek(tp, 0)
    out: list[SourceRecord] = []
    idle = time.monotonic()
    while time.monotonic() - idle < 0.5:
        for recs in c.poll(timeout_ms=100).values():
            out += [SourceRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value)
                    for r in recs]
            idle = time.monotonic()
    c.close()
    return out


def output_columns(out: Path, name: str) -> dict[str, list[Any]]:
    """The rows of output ``name`` under ``out`` as columns (``{}`` when it has no file)."""
    files = sorted((out / name).glob("*.parquet"))
    return pq.read_table(files).to_pydict() if files else {}


# -- the stream engine ---------------------------------------------------------------------------


def route_one_by_one(engine: Any, records: Sequence[Any],
                     ) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    """What ``engine.route`` gives each record on its own, gathered as ``route_many`` gives a
    batch: the parsed records of each model (models in order of first appearance) and the
    dead-letter rows, in record order."""
    groups: dict[str, list[Any]] = {}
    dead: list[dict[str, Any]] = []
    for r in records:
        res = engine.route(r)
        if isinstance(res, dict):
            dead.append(res)
        else:
            for k, p in res:
                groups.setdefault(k, []).append(p)
    return groups, dead


def live_spec(**kw: Any) -> Any:
    """A live ``LiveSpec`` of keywords: its own fields, and ``ReadOptions`` fields (``fmt=``,
    ``n_features=``, ``key_by=``, ...) for its ``read`` of a topic."""
    from kernelstream.data.options import ReadOptions
    from kernelstream.engine.live.parsing import LiveSpec

    reads = {f.name for f in fields(ReadOptions)} - {"path"}
    read = ReadOptions("kafka://h:1/ev", **{k: kw.pop(k) for k in reads & kw.keys()})
    return LiveSpec(read=read, **kw)


def write(path: Path, text: str | bytes) -> Path:
    """``text`` (str as UTF-8, or raw bytes) written to ``path``; returns the path."""
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def without_warnings(stderr: str) -> str:
    """``stderr`` without the one-line result warnings (``... warning: ...``: a run no
    better than the no-skill baseline), which tests of other behaviour do not judge."""
    return "\n".join(ln for ln in stderr.splitlines() if ": warning: " not in ln)


# summary.json fields that describe how a replay ran, not what its streams learnt
RUN_FIELDS = frozenset({"seconds", "seconds_std", "examples_per_second", "argv", "runner"})


def strip_run_fields(doc: Any, drop: Iterable[str] = RUN_FIELDS) -> Any:
    """``doc`` (a summary.json) without the fields ``drop`` at any depth: two runs of the
    same streams on other runners or worker counts compare equal."""
    drop = frozenset(drop)
    if isinstance(doc, dict):
        return {k: strip_run_fields(v, drop) for k, v in doc.items() if k not in drop}
    if isinstance(doc, list):
        return [strip_run_fields(v, drop) for v in doc]
    return doc
