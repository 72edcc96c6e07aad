"""The stream reader's drain rate with each Kafka client (kafka-python, confluent-kafka), and
with its fetch settings on topics written one record per batch or in large batches.

Two measurements, each one run, no warm-up, on a local tansu broker (memory storage):

* **clients** (the default): ``--records`` a9a LIBSVM lines (the training file repeated as
  needed) on a topic of one partition (``--topics 2``: two topics, i.e. a partition group
  whose records are merged), drained by the unbounded reader's own partition-group reader
  (``kafka_client.group_reader.GroupReader``: poll, build the ``SourceRecord`` s, merge; the
  rounds of its DoFn) with each client in turn. Records/s = records / wall time from the
  first poll to the last record released; also the slowest single round (one ``fetch`` +
  release), where kafka-python's occasional long polls show. A reader that releases nothing
  for 5 s is reported as stalled (kafka-python 3.0.12 did, with two topics, until
  ``group_reader._resume`` worked around its fetcher parking a resumed partition's records
  for good).
* **fetch settings** (``--fetch``, also run by ``benchmarks/kafka_io.py`` for its report):
  for each client and each setting of :data:`FETCH_SETTINGS` (kafka-python names as given to
  ``--kafka-option``, plus librdkafka-only properties for the confluent client), the same
  drain on two topics of ``--fetch-records`` a9a records: one written **one record per
  batch** (what a live service's producer sends: ``batch.num.messages=1``) and one in
  **large batches** (10,000 records per batch at most); then the **live** latency: a
  producer (its own process) sends one record per batch at ``--live-rate`` records/s for
  ``--live-seconds`` to a fresh topic which the reader follows; latency = the record
  released by the reader - its send time (p50/p99). What tansu does with these settings,
  and why the defaults (``clients.READ_DEFAULTS``) are what they are, is in
  :func:`fetch_report`.

::

    nice -n 10 .venv/bin/python benchmarks/reader_clients.py --records 50000
    nice -n 10 .venv/bin/python benchmarks/reader_clients.py --fetch   # ~4 min, printed
"""

from __future__ import annotations

import math
import multiprocessing as mp
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import create_topics, produce, read_lines, script_parser

from kernelstream.kafka_client import PartitionGroup, local_broker
from kernelstream.kafka_client.clients import READ_DEFAULTS
from kernelstream.kafka_client.confluent import ConfluentConsumer, confluent_config, reader_consumer
from kernelstream.kafka_client.group_reader import GroupReader

STALL_S = 5.0  # no record released for this long: report how far the drain got

# (label, kafka-python settings, librdkafka-only properties (confluent client only)); the
# first row is the reader as it runs (READ_DEFAULTS, and its wait raised when fetches behind
# the high watermark return nothing: group_reader.FetchWait), the others keep their wait
FETCH_SETTINGS: list[tuple[str, tuple[tuple[str, str], ...], dict[str, Any]]] = [
    ("defaults (raised when stuck)", (), {}),
    ("fetch_max_wait_ms=10", (("fetch_max_wait_ms", "10"),), {}),
    ("fetch_max_wait_ms=50", (("fetch_max_wait_ms", "50"),), {}),
    ("fetch_max_wait_ms=100", (("fetch_max_wait_ms", "100"),), {}),
    ("fetch_max_wait_ms=500", (("fetch_max_wait_ms", "500"),), {}),
    ("fetch_max_wait_ms=10, fetch_min_bytes=65536",
     (("fetch_max_wait_ms", "10"), ("fetch_min_bytes", "65536")), {}),
    ("fetch_max_wait_ms=500, fetch_min_bytes=65536",
     (("fetch_max_wait_ms", "500"), ("fetch_min_bytes", "65536")), {}),
    ("fetch_max_wait_ms=10, max_partition_fetch_bytes=65536",
     (("fetch_max_wait_ms", "10"), ("max_partition_fetch_bytes", "65536")), {}),
    ("fetch_max_wait_ms=10, fetch.queue.backoff.ms=1000, queued.min.messages=1000",
     (("fetch_max_wait_ms", "10"),),
     {"fetch.queue.backoff.ms": 1000, "queued.min.messages": 1000}),
]


def rounds(reader: GroupReader) -> list[Any]:
    """One round of kafka_read._ReadGroups._read (max_records 1000): the records released."""
    now = time.monotonic()
    out = reader.ready(None, now, 1000)
    if len(out) < 1000:
        reader.fetch(0.0 if out else reader.wait_s(0.2, now), None, 1000)
        out += reader.ready(None, time.monotonic(), 1000 - len(out))
    return out


def make_reader(bootstrap: str, topics: Sequence[str], kind: str,
                client: tuple[tuple[str, str], ...] = (),
                rdkafka: dict[str, Any] | None = None, fixed: bool = False) -> GroupReader:
    """The stream reader of ``topics`` (one partition group); ``fixed``: its fetch wait is
    never raised (the setting alone is measured)."""
    group = PartitionGroup(0, tuple(topics), tuple(0 for _ in topics))
    if rdkafka and kind == "confluent":
        cfg = confluent_config(bootstrap, client)
        assert cfg is not None
        consumer: Any = ConfluentConsumer({**cfg, **rdkafka})
    else:
        consumer = reader_consumer(bootstrap, client, kind)
    reader = GroupReader(group, consumer, merge_idle_ms=50)
    if fixed:
        reader.fetch_wait.STUCK_S = math.inf
    reader.sync(group.start)
    return reader


def drain(bootstrap: str, topics: list[str], n: int, kind: str,
          client: tuple[tuple[str, str], ...] = (), rdkafka: dict[str, Any] | None = None,
          stall_s: float = STALL_S, fixed: bool = False) -> tuple[float, float, int]:
    """Seconds to release ``n`` records of the group through ``kind``'s reader, the slowest
    round in milliseconds, and the records released (fewer than ``n``: it stalled)."""
    reader = make_reader(bootstrap, topics, kind, client, rdkafka, fixed)
    got, slowest = 0, 0.0
    t0 = last = time.perf_counter()
    while got < n:
        r0 = time.perf_counter()
        new = len(rounds(reader))
        slowest = max(slowest, time.perf_counter() - r0)
        got += new
        if new:
            last = time.perf_counter()
        elif time.perf_counter() - last > stall_s:
            break
    took = last - t0
    reader.close()
    return took, slowest * 1000, got


# -- one record per batch ------------------------------------------------------------------------
def produce_single(bootstrap: str, topic: str, values: Sequence[bytes]) -> float:
    """Send ``values`` one record per batch (librdkafka ``batch.num.messages=1``), as fast as
    the broker takes them; seconds taken."""
    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1,
                     "linger.ms": 0, "queue.buffering.max.messages": 10_000})
    t0 = time.perf_counter()
    for v in values:
        while True:
            try:
                prod.produce(topic, value=v)
                break
            except BufferError:  # the local queue is full: let deliveries free it
                prod.poll(0.01)
        prod.poll(0)
    prod.flush()
    return time.perf_counter() - t0


def _live_producer(bootstrap: str, topic: str, rate: float, seconds: float, out: Any) -> None:
    """One record per batch at ``rate`` records/s for ``seconds``; each value is its send time
    (``time.time_ns()``), each record flushed (acknowledged) before the next."""
    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    prod.list_topics(topic, timeout=10)
    n = int(rate * seconds)
    t0 = time.time()
    for i in range(n):
        delay = t0 + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        prod.produce(topic, value=str(time.time_ns()).encode())
        prod.flush()
    out.put(n)


def live_latency(bootstrap: str, topic: str, kind: str, client: tuple[tuple[str, str], ...],
                 rdkafka: dict[str, Any] | None, rate: float,
                 seconds: float, fixed: bool = False) -> dict[str, Any]:
    """Latency of ``kind``'s reader following a topic written one record per batch at
    ``rate``: p50/p99 ms of (released - sent), and the records released of those sent."""
    create_topics(bootstrap, [topic])
    reader = make_reader(bootstrap, [topic], kind, client, rdkafka, fixed)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_live_producer, args=(bootstrap, topic, rate, seconds, q))
    proc.start()
    lat: list[float] = []
    sent = None
    deadline = None
    while True:
        out = rounds(reader)
        now = time.time_ns()
        lat += [(now - int(r.value)) / 1e6 for r in out]
        if sent is None and not proc.is_alive():
            sent = q.get(timeout=5)
            deadline = time.monotonic() + 10.0
        if sent is not None and (len(lat) >= sent or time.monotonic() > (deadline or 0)):
            break
    proc.join()
    reader.close()
    lat.sort()
    pct = (lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]) if lat else (lambda p: None)
    return {"sent": sent, "read": len(lat), "p50_ms": pct(0.5), "p99_ms": pct(0.99)}


def fetch_grid(bootstrap: str, values: list[bytes], live_rate: float, live_seconds: float,
               log: Any = sys.stderr) -> dict[str, Any]:
    """The fetch-settings measurement (see the module docstring) on broker ``bootstrap``."""
    n = len(values)
    create_topics(bootstrap, ["single", "large"])
    single_s = produce_single(bootstrap, "single", values)
    large_s = produce(bootstrap, "large", values, create=False)
    rows = []
    for kind in ("confluent", "kafka-python"):
        for label, client, rdk in FETCH_SETTINGS:
            if rdk and kind != "confluent":
                continue
            row: dict[str, Any] = {"client": kind, "setting": label}
            fixed = label != FETCH_SETTINGS[0][0]
            for shape in ("single", "large"):
                s, _, got = drain(bootstrap, [shape], n, kind, client, rdk, stall_s=3.0,
                                  fixed=fixed)
                row[shape] = {"records": got, "seconds": s,
                              "records_per_second": got / s if s > 0 else None}
            row["live"] = live_latency(bootstrap, f"live-{len(rows)}", kind, client, rdk,
                                       live_rate, live_seconds, fixed)
            rows.append(row)
            print(f"{kind:12s} {label:60s} single {row['single']['records']:>6} "
                  f"{row['single']['records_per_second'] or 0:8.0f}/s  large "
                  f"{row['large']['records_per_second'] or 0:8.0f}/s  live p50 "
                  f"{row['live']['p50_ms'] or -1:6.1f} p99 {row['live']['p99_ms'] or -1:6.1f} "
                  f"({row['live']['read']}/{row['live']['sent']})", file=log, flush=True)
    return {"records": n, "produce_single_seconds": single_s, "produce_large_seconds": large_s,
            "live_rate": live_rate, "live_seconds": live_seconds,
            "read_defaults": dict(READ_DEFAULTS), "rows": rows}


def fetch_report(res: dict[str, Any]) -> list[str]:
    """Markdown section of :func:`fetch_grid`'s results."""
    n = res["records"]

    def rate(d: dict[str, Any]) -> str:
        if d["records"] < n:
            return f"stalled at {d['records']:,}"
        return f"{d['records_per_second']:,.0f}"

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.0f}"

    defaults = ", ".join(f"{k}={v}" for k, v in res["read_defaults"].items()
                         if k.startswith("fetch"))
    L = ["## The reader's fetch settings on small and large batches", "",
         f"`benchmarks/reader_clients.py --fetch` (run by this script): the stream reader "
         f"(`GroupReader`, no Beam) drains {n:,} a9a records written **one record per batch** "
         f"(producing took {res['produce_single_seconds']:.1f} s) and the same written in "
         f"**large batches**; then follows a topic written one record per batch at "
         f"{res['live_rate']:,.0f} records/s for {res['live_seconds']:g} s (latency = record "
         f"released by the reader - its send time). A drain that releases nothing for 3 s is "
         f"reported as stalled. Reader defaults: {defaults}; the first row is the reader as "
         f"it runs (its wait doubled after 1 s without a record behind the high watermark: "
         f"`group_reader.FetchWait`), the others keep the wait they set.", "",
         "| client | setting | one per batch: records/s | large batches: records/s "
         "| live p50 ms | live p99 ms | live read |",
         "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in res["rows"]:
        lv = r["live"]
        L.append(f"| {r['client']} | {r['setting']} | {rate(r['single'])} | "
                 f"{rate(r['large'])} | {ms(lv['p50_ms'])} | {ms(lv['p99_ms'])} | "
                 f"{lv['read']:,}/{lv['sent']:,} |")
    L += ["", *FETCH_NOTES]
    return L


FETCH_NOTES = [
    "Why (tansu 0.6.0, memory storage): each batch is an object of an in-memory object "
    "store, and every fetch *lists all the batch objects of the partition* before reading "
    "those at or after the fetch offset; the listing stops when the fetch's "
    "`fetch.max.wait.ms` has passed. A listing cut short before the reader's position "
    "returns no record (at most the batch before it, which the client drops), so the reader "
    "stays where it is for good: with 10 ms, a topic of tens of thousands of one-record "
    "batches is never read past its first few hundred records. The cost is per batch, not "
    "per record: the same records in large batches read at full speed with any wait. "
    "When no record is there, tansu retries the fetch after sleeping half the remaining wait "
    "(whether or not a record arrives meanwhile), so a reader that has caught up sees a new "
    "record up to half of `fetch.max.wait.ms` late; at a few hundred records a second the "
    "next fetch still comes before the next record, so the live latency follows the wait "
    "(p50 about a third of it).",
    "",
    "Apache Kafka: a fetch returns as soon as `fetch.min.bytes` (1, the default) are "
    "there, and is held for at most `fetch.max.wait.ms` only while nothing is; a new "
    "record completes a held fetch at once. So with `fetch_min_bytes=1` the wait changes "
    "neither the throughput nor the latency there; it only sets how often an idle "
    "reader asks (10 ms: 100 empty fetches a second per reader per broker; 500 ms, the "
    "default of both clients and of the Java consumer: 2). A larger `fetch_min_bytes` "
    "makes a live stream wait for bytes that come slowly (up to the wait on every fetch), "
    "so the reader keeps 1.",
    "",
    "Also, tansu reads batches only in what the listing leaves of the wait: a wait barely "
    "longer than the listing reads few records per fetch (compare 50 and 100 ms on one "
    "record per batch).",
    "",
    "So the reader's defaults: `fetch_min_bytes` 1 and `fetch_max_wait_ms` 100 (Apache "
    "Kafka: 10 empty fetches a second per idle reader; tansu: tens of thousands of "
    "one-record batches read at speed, a new record seen ~a third of the wait late), and "
    "when the fetches behind the high watermark return nothing for 1 s the reader doubles "
    "the wait (up to 2 s, and under half the request timeout), with a warning; on Kafka "
    "that never happens. Large batches read at full speed with any of these settings.",
]


def main() -> int:
    ap = script_parser(__doc__, epilog=False)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--topics", type=int, default=1, choices=(1, 2))
    ap.add_argument("--fetch", action="store_true",
                    help="measure the fetch settings (small and large batches, live latency)")
    ap.add_argument("--fetch-records", type=int, default=30_000)
    ap.add_argument("--live-rate", type=float, default=500.0)
    ap.add_argument("--live-seconds", type=float, default=6.0)
    a = ap.parse_args()
    lines = read_lines(Path(a.data_dir) / "a9a")
    if a.fetch:
        values = (lines * (a.fetch_records // len(lines) + 1))[: a.fetch_records]
        with local_broker() as b:
            res = fetch_grid(b, values, a.live_rate, a.live_seconds)
        print("\n".join(fetch_report(res)))
        return 0
    values = (lines * (a.records // len(lines) + 1))[: a.records]
    with local_broker() as b:
        topics = [f"a9a-{i}" for i in range(a.topics)]
        create_topics(b, topics)
        for i, t in enumerate(topics):
            produce(b, t, values[i::a.topics], create=False)
        print(f"{a.records:,} a9a records on {len(topics)} topic(s) of one partition")
        for kind in ("kafka-python", "confluent"):
            s, slowest, got = drain(b, topics, a.records, kind)
            if got < a.records:
                print(f"  {kind:13s} stalled: {got:,} of {a.records:,} records, none for "
                      f"{STALL_S:g} s")
                continue
            print(f"  {kind:13s} {a.records / s:9,.0f} records/s ({s:.2f} s; slowest round "
                  f"{slowest:.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
