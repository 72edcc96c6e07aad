"""The stream reader's drain rate with each Kafka client: kafka-python against confluent-kafka.

One run, no warm-up, printed only (no results file): a local tansu broker (memory storage)
gets ``--records`` a9a LIBSVM lines (the training file repeated as needed) on a topic of one
partition (``--topics 2``: two topics, i.e. a partition group whose records are merged), then
the unbounded reader's own partition-group reader
(``kafka_client.group_reader.GroupReader``: poll, build the ``SourceRecord`` s, merge; the
rounds of its DoFn) drains them with each client in turn. Records/s = records /
wall time from the first poll to the last record released; also the slowest single round
(one ``fetch`` + release), where kafka-python's occasional long polls show. A reader that
releases nothing for 5 s is reported as stalled (kafka-python 3.0.12 did, with two topics,
until ``group_reader._resume`` worked around its fetcher parking a resumed partition's
records for good)::

    nice -n 10 .venv/bin/python benchmarks/reader_clients.py --records 50000
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import create_topics, produce, read_lines, script_parser

from kernelstream.kafka_client import PartitionGroup, local_broker
from kernelstream.kafka_client.confluent import reader_consumer
from kernelstream.kafka_client.group_reader import GroupReader

STALL_S = 5.0  # no record released for this long: report how far the drain got


def drain(bootstrap: str, topics: list[str], n: int, kind: str) -> tuple[float, float, int]:
    """Seconds to release ``n`` records of the group through ``kind``'s reader, the slowest
    round in milliseconds, and the records released (fewer than ``n``: it stalled)."""
    group = PartitionGroup(0, tuple(topics), tuple(0 for _ in topics))
    reader = GroupReader(group, reader_consumer(bootstrap, (), kind), merge_idle_ms=50)
    reader.sync(group.start)
    got, slowest = 0, 0.0
    t0 = last = time.perf_counter()
    while got < n:  # the rounds of kafka_read._ReadGroups._read, max_records 1000
        r0 = time.perf_counter()
        now = time.monotonic()
        out = reader.ready(None, now, 1000)
        if len(out) < 1000:
            reader.fetch(0.0 if out else reader.wait_s(0.2, now), None, 1000)
            out += reader.ready(None, time.monotonic(), 1000 - len(out))
        new = len(out)
        slowest = max(slowest, time.perf_counter() - r0)
        got += new
        if new:
            last = time.perf_counter()
        elif time.perf_counter() - last > STALL_S:
            break
    took = last - t0
    reader.close()
    return took, slowest * 1000, got


def main() -> int:
    ap = script_parser(__doc__, epilog=False)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--topics", type=int, default=1, choices=(1, 2))
    a = ap.parse_args()
    lines = read_lines(Path(a.data_dir) / "a9a")
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
