"""`kernelstream stream` on a local Kafka broker: event-to-prediction latency, the largest
sustained rate, and the ratio to the bounded file replay of the same rows.

A local broker is started (``--broker``): tansu, a Kafka-protocol broker with memory storage
(``kernelstream.kafka_client.local_broker``, the default), or Apache Kafka itself, one KRaft
node from its Maven jars as the tests start it (``kafka_client.apache_broker``; java 17+ and
mvn); every phase below runs on it, the floor too. BOGD B = 200 learns on a9a (a9a + a9a.t
from ``--data-dir``) and on ijcnn1-like traffic (ijcnn1 is not in the shared data sets: a
seeded synthetic dense set of 22 features in [-1, 1] with ~10 % positives, see
:func:`ijcnn1_like`). Per data set, phases:

1. **backlog**: ``--backlog`` events (250,000 by default: the data set's rows repeated, since
   a whole data set drains in under 0.3 s) are produced to a fresh topic in one of two shapes
   (both measured in each run): *labelled*, one record per event (``KEY=e<i>``, value
   ``LABEL FEATURES``), and *pairs*, each event (``? FEATURES``) followed at once by its
   label record (``label:Y``, same key); then ``kernelstream stream`` starts on it, writing
   its Parquet outputs only (as the replay does: no Kafka outputs). The harness polls the
   stream's status file (records learnt and the time the stream reached that count,
   rewritten every ~0.1 s);
   the *drain rate* is the records learnt between the first count past 10 % and the last one
   / the time between them (the stream's start-up excluded), in events/s (records / records
   per event), the median of ``--backlog-runs`` such drains (a fresh topic and stream each).
2. **replay**: the same rows as a LIBSVM file through ``kernelstream replay FILE -l bogd
   -p budget=200 --runner direct`` (a subprocess, as a user runs it; it learns them in its
   permutation 0), alternating ``--replay-runs`` times with a run on its first ``--replay-small``
   rows. Rate = (N - small) / the median over runs of (wall(N) - wall(small)), each run's
   two walls back to back: end-to-end wall clock with the fixed costs (interpreter, imports,
   pipeline start) cancelled out, as they are for the stream's drain rate, and the drift of a
   shared machine between runs too. The rate's interval comes from the min-max of the paired
   differences (it holds their median with probability 1 - 2 * 0.5^runs: 98 % at 7 runs); a
   difference <= 0 leaves it unbounded above. ``examples_per_second`` of summary.json is
   learner time only, so it is reported but not used. Ratio = drain rate / replay rate, per
   shape (target >= 0.5 each), with the interval of the min-max drain rate over the min-max
   replay rate: PASS only when all of it is >= 0.5, FAIL when all of it is below,
   *inconclusive* otherwise (never a verdict on noise); a drain window shorter than 3 status
   ticks (0.3 s) or with under 3 status counts is *too short to measure* (a larger
   ``--backlog``).
3. **live**: a fresh topic and a fresh ``kernelstream stream``; once a probe event has its
   prediction (start-up done), a producer process writes feature records at a steady rate
   (label ``?``, record timestamp = send time) and, after a seeded random delay (exponential,
   mean ``--label-delay-ms``, at most 5x the mean), the label record ``label:Y`` with the
   same key, on the same topic (or ``--labels-topic``), so the model also learns. A consumer
   process reads ``PREFIX-predictions`` (the stream sends only its predictions to Kafka:
   ``--kafka-outputs predictions``) and records, per prediction, arrival wall time -
   ``event_time_ms``. Rates, in increasing order: 1k and 5k events/s and a sweep
   (``--sweep-fractions`` of the drain rate, or ``--sweep-rates``), ``--step-seconds`` each,
   the first ``--warmup`` seconds of each dropped; the sweep stops at its first unbounded
   rate (1k and 5k always run; after a rate that left a queue, the harness lets it drain
   first). A rate is *bounded* when every prediction arrived within ``--drain-timeout`` after
   the last send, p99 <= ``--bound-ms`` and the median of the last quarter of its samples
   is at most 100 ms above that of the first quarter (no growing queue). Target: p99 <= 100
   ms at 1k events/s.

Before these, once (**floor**): the same producer and consumer on one topic, no stream: the
latency the broker and the two clients add by themselves (the stream path has two such hops);
the report puts it next to the 1k events/s latencies, so that the stream's own share shows.

Producer and consumer run in their own processes (no GIL sharing with each other or the
harness). The stream runs with its own Kafka defaults on either broker (the report states
them, and any fetch wait its reader raised itself to). Writes
``benchmarks/results/streaming.md`` / ``.json`` on tansu, ``streaming_apache.md`` / ``.json``
on Apache Kafka (generated; do not edit)::

    nice -n 10 .venv/bin/python benchmarks/streaming.py               # ~8 min
    nice -n 10 .venv/bin/python benchmarks/streaming.py --broker apache
    .venv/bin/python benchmarks/streaming.py --datasets a9a --backlog 10000 \\
        --step-seconds 6 --sweep-fractions '' --out-dir /tmp/ks-bench  # small check
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
import numpy as np
from _common import (
    RESULTS,
    create_topics,
    machine_info,
    now_utc,
    produce,
    script_parser,
    write_report,
)
from _machine_load import LoadMeter, tree_cpu_seconds
from _streaming_report import (
    BACKLOG_KEY,
    BROKERS,
    LEARNER_ARGS,
    RATIO_TARGET,
    REQUIRED_RATES,
    SHAPES,
    broker,
    fetch_wait_raises,
    passed,
    render,
    results_stem,
    stream_kafka,
)
from _traffic import Consumer, Traffic, a9a, ijcnn1_like, run_producer
from _verdicts import (
    drain_replay_ratio,
    drain_too_short,
    paired_rate,
    spread,
)

KERNELSTREAM = str(Path(sys.executable).with_name("kernelstream"))


# -- the stream under test -----------------------------------------------------------------------
class StreamJob:
    """``kernelstream stream`` as a subprocess (output to a log file)."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args, self.log = args, log
        self._f = open(log, "wb")  # open for the life of the process
        self.t_start = time.time()
        self.proc = subprocess.Popen(args, stdout=self._f, stderr=subprocess.STDOUT)

    def tail(self, n: int = 25) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"kernelstream stream exited ({self.proc.returncode}):\n"
                               f"{' '.join(self.args)}\n{self.tail()}")

    def cpu(self) -> float:
        return tree_cpu_seconds(self.proc.pid)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGINT (drain, snapshot, exit); SIGKILL if it does not end within ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._f.close()
        return int(self.proc.returncode)

    def fetch_wait_raises(self) -> list[int]:
        return fetch_wait_raises(self.log.read_text(errors="replace"))


def stream_args(a: Any, bootstrap: str, topic: str, prefix: str | None, tr: Traffic, out: Path,
                labels_topic: str | None = None) -> list[str]:
    """The stream's command line; ``prefix``: predictions also go to ``PREFIX-predictions``
    (only they: the latency is measured there, and the other outputs would add their sends to
    what is measured), None: Parquet outputs only, as the replay writes."""
    args = [KERNELSTREAM, "stream", f"kafka://{bootstrap}/{topic}", *LEARNER_ARGS,
            "--n-features", str(tr.n_features), "--runner", "direct", "--out", str(out / "out"),
            "--checkpoint", str(out / "ckpt"), "--max-seconds", str(a.max_stream_seconds)]
    if prefix is not None:
        args += ["--kafka-out", f"kafka://{bootstrap}/{prefix}",
                 "--kafka-outputs", "predictions"]
    if labels_topic:
        args += ["--labels", f"kafka://{bootstrap}/{labels_topic}"]
    args += list(a.stream_arg or [])
    return args + (["--", *a.beam_option] if a.beam_option else [])


def output_topics(bootstrap: str, prefix: str) -> str:
    """Create the stream's output topics (one partition each); the predictions topic."""
    create_topics(bootstrap, [f"{prefix}-{s}" for s in ("predictions", "outcomes", "metrics",
                                                        "unlabeled", "dead-letters")])
    return f"{prefix}-predictions"


def summary_rate(out: Path) -> float | None:
    """``records_per_second`` of the stream's summary.json (records / the whole run,
    start-up and drain included), if it wrote one."""
    p = out / "out" / "summary.json"
    if not p.exists():
        return None
    v = json.loads(p.read_text()).get("records_per_second")
    return float(v) if isinstance(v, (int, float)) else None


# -- phases --------------------------------------------------------------------------------------
def latency_stats(samples: Sequence[float]) -> dict[str, Any]:
    if not samples:
        return {"samples": 0, "p50": math.nan, "p99": math.nan, "max": math.nan}
    v = np.asarray(samples, dtype=np.float64)
    return {"samples": int(v.size), "p50": float(np.percentile(v, 50)),
            "p99": float(np.percentile(v, 99)), "max": float(v.max())}


def floor_phase(a: Any, ctx: Any, bootstrap: str, tr: Traffic) -> dict[str, Any]:
    """Producer -> broker -> consumer alone (no stream) at the first required rate."""
    topic = "floor"
    create_topics(bootstrap, [topic, "floor-labels"])
    cons = Consumer(ctx, bootstrap, topic, raw=True)
    rate = REQUIRED_RATES[0]
    p = run_producer(ctx, bootstrap, topic, "floor-labels", tr, 0, rate, a.step_seconds,
                     a.label_delay_ms, a.seed)
    cons.wait_count(0, p["sent"], 10)
    got = cons.stop()
    lat = [arr - ts for k, (ts, arr) in got["events"].items()
           if ts >= p["t0"] * 1e3 + a.warmup * 1e3]
    res = {"rate": rate, "sent": p["sent"], "arrived": len(got["events"]),
           **latency_stats(lat)}
    print(f"floor (producer -> broker -> consumer, no stream) at {rate}/s: "
          f"p50 {res['p50']:.1f} ms, p99 {res['p99']:.1f} ms ({res['samples']} samples)",
          file=sys.stderr, flush=True)
    return res


def status_samples(out: Path) -> dict[str, Any]:
    """The stream's own status file (``OUT/.run-*/status.json``: records learnt so far,
    rewritten every ~0.1 s by its committer), or {} while it has none."""
    for p in sorted((out / "out").glob(".run-*/status.json")):
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError):
            return {}
    return {}


def backlog_phase(a: Any, ctx: Any, bootstrap: str, tr: Traffic, n: int,
                  tmp: Path, shape: str = "labelled") -> dict[str, Any]:
    """The backlog drain ``--backlog-runs`` times (:func:`backlog_run`, a fresh topic and
    stream each): the run of the median drain rate, with every run's rate. A drain of 50k
    events lasts well under a second, so one stall of a shared machine moves one run's rate
    far; the replay's rate is a median of runs too."""
    runs = [backlog_run(a, ctx, bootstrap, tr, n, tmp, k, shape)
            for k in range(a.backlog_runs)]
    rates = [r["drain_rate"] for r in runs]
    mid = sorted(runs, key=lambda r: r["drain_rate"])[(len(runs) - 1) // 2]
    short = [f"run {k}: {r['too_short']}" for k, r in enumerate(runs) if r.get("too_short")]
    return {**mid, "drain_rates": rates, "drain_spread": spread(rates),
            "too_short": "; ".join(short) or None,
            "fetch_wait_raises": [ms for r in runs for ms in r["fetch_wait_raises"]]}


def backlog_run(a: Any, ctx: Any, bootstrap: str, tr: Traffic, n: int, tmp: Path,
                k: int, shape: str = "labelled") -> dict[str, Any]:
    """Pre-load ``n`` events of ``shape`` (:data:`SHAPES`), start the stream (Parquet outputs
    only, as the replay), and measure how fast it drains them from its status file's record
    counts (events/s: records/s over the records per event)."""
    del ctx  # no consumer: nothing goes to Kafka in this phase
    topic = f"{tr.name}-backlog-{shape}-{k}"
    create_topics(bootstrap, [topic])
    if shape == "pairs":
        keys = [f"e{i // 2}".encode() for i in range(2 * n)]
        values = [(f"? {tr.feature(i // 2)}" if i % 2 == 0 else f"label:{tr.label(i // 2)}"
                   ).encode() for i in range(2 * n)]
    else:
        keys = [f"e{i}".encode() for i in range(n)]
        values = [tr.line(i).encode() for i in range(n)]
    per_event = len(values) // n
    events, n = n, len(values)  # n: records from here on
    produce(bootstrap, topic, values, keys, create=False)
    out = tmp / f"{tr.name}-backlog-{shape}-{k}"
    out.mkdir()
    meter, load0 = LoadMeter(), os.getloadavg()[0]
    job = StreamJob(stream_args(a, bootstrap, topic, None, tr, out), out / "stream.log")
    # (wall time, records learnt) whenever the count moves: the time the stream reached the
    # count (status records_at; the file is rewritten at most every 0.1 s, so the time it was
    # read can be later, by as much as a sixth of a 50k-event drain)
    seen: list[tuple[float, int]] = []
    try:
        deadline = time.time() + a.backlog_timeout
        while time.time() < deadline:
            job.check()
            doc = status_samples(out)
            recs = int(doc.get("records") or 0)
            if not seen or recs != seen[-1][1]:
                seen.append((float(doc.get("records_at") or time.time()), recs))
            if recs >= n:
                break
            time.sleep(0.05)
        cpu = job.cpu()
    finally:
        rc = job.stop()
        load = meter.read()
    got = seen[-1][1] if seen else 0
    if got < n:
        raise RuntimeError(f"backlog: only {got} of {n} records learnt:\n{job.tail()}")
    # from the first count past 10 % to the end: start-up and the first snapshot excluded
    t10, r10 = next((t, r) for t, r in seen if r >= n // 10)
    t_end = seen[-1][0]
    window, samples = t_end - t10, sum(1 for _, r_ in seen if r_ >= r10)
    rate = (n - r10) / per_event / max(window, 1e-9)
    r = {"shape": shape, "events": events, "records": n, "arrived": got, "duplicates": 0,
         "drain_rate": rate, "window_s": window, "window_samples": samples,
         "too_short": drain_too_short(window, samples),
         "first_prediction_s": next(t for t, r_ in seen if r_ > 0) - job.t_start,
         "start_to_last_s": t_end - job.t_start,
         "stream_cpu_s": cpu, "stream_cpu_per_event_us": 1e6 * cpu * per_event / max(1, got),
         "load": load, "load1": load0, "exit_code": rc,
         "summary_rate": summary_rate(out), "fetch_wait_raises": job.fetch_wait_raises()}
    print(f"{tr.name} backlog ({shape}) run {k}: {got:,}/{n:,} records learnt, drain rate "
          f"{rate:,.0f} events/s over {window:.2f} s ({samples} status counts"
          f"{'; TOO SHORT to measure' if r['too_short'] else ''}; first output "
          f"{r['first_prediction_s']:.1f} s after start; stream CPU "
          f"{r['stream_cpu_per_event_us']:.0f} µs/event; machine busy "
          f"{100 * load['busy']:.0f} %, others {100 * load['others']:.0f} %; exit {rc})",
          file=sys.stderr, flush=True)
    return r


def replay_phase(a: Any, tr: Traffic, n: int, tmp: Path) -> dict[str, Any]:
    """``kernelstream replay`` of the same ``n`` rows (and of their first few, to cancel the
    fixed costs), as subprocesses; wall-clock times."""
    small = min(a.replay_small, n // 10)
    files = {}
    for m in (small, n):
        f = tmp / f"{tr.name}-{m}.libsvm"
        f.write_text("".join(tr.line(i) + "\n" for i in range(m)))
        files[m] = f
    walls: dict[int, list[float]] = {small: [], n: []}
    eps: list[float] = []
    for r in range(a.replay_runs):
        for m in ((small, n) if r % 2 == 0 else (n, small)):
            out = tmp / f"replay-{tr.name}-{m}-{r}"
            cmd = [KERNELSTREAM, "replay", str(files[m]), *LEARNER_ARGS, "--runner", "direct",
                   "--n-features", str(tr.n_features), "--out", str(out), "-q"]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n"
                                   f"{p.stderr[-3000:]}")
            walls[m].append(wall)
            if m == n:
                doc = json.loads((out / "summary.json").read_text())
                if isinstance(doc.get("examples_per_second"), (int, float)):
                    eps.append(float(doc["examples_per_second"]))
            print(f"{tr.name} replay {m:,} rows, run {r}: {wall:.2f} s", file=sys.stderr,
                  flush=True)
    med = {m: statistics.median(v) for m, v in walls.items()}
    # each run's N and small replays ran back to back: their difference cancels what drifts
    # between runs (another tenant's load), which the difference of two medians keeps
    pr = paired_rate(n - small, walls[n], walls[small])
    print(f"{tr.name} replay: wall(N) - wall(small) median {pr['median_diff']:.3f} s, "
          f"min {pr['min_diff']:.3f}, max {pr['max_diff']:.3f}: rate {pr['rate']:,.0f} "
          f"[{pr['rate_lo']:,.0f}, {pr['rate_hi']:,.0f}] ex/s", file=sys.stderr, flush=True)
    return {"rows": n, "small": small, "walls": {str(k): v for k, v in walls.items()},
            "median_wall": med[n], "median_wall_small": med[small], **pr,
            "wall_range": {str(m): max(v) - min(v) for m, v in walls.items()},
            "rate_with_fixed_costs": n / med[n],
            "learner_eps": statistics.median(eps) if eps else None}


def step_bounded(st: dict[str, Any], bound_ms: float) -> bool:
    return (st["arrived"] == st["sent"] and st["p99"] <= bound_ms
            and st["growth_ms"] <= 100.0)


def live_phase(a: Any, ctx: Any, bootstrap: str, tr: Traffic, rates: list[int],
               tmp: Path) -> dict[str, Any]:
    """One stream on a fresh topic; the producer steps through ``rates`` (required rates
    always, the others until the first unbounded step)."""
    topic = f"{tr.name}-live"
    labels_topic = f"{topic}-labels" if a.labels_topic else topic
    prefix = f"{topic}-out"
    create_topics(bootstrap, sorted({topic, labels_topic}))
    pred = output_topics(bootstrap, prefix)
    cons = Consumer(ctx, bootstrap, pred)
    out = tmp / f"{tr.name}-live"
    out.mkdir()
    job = StreamJob(stream_args(a, bootstrap, topic, prefix, tr, out,
                                labels_topic if a.labels_topic else None), out / "stream.log")
    steps: list[dict[str, Any]] = []
    try:
        t_ready = wait_ready(bootstrap, topic, tr, cons, job, a.start_timeout)
        print(f"{tr.name} live: stream ready {t_ready:.1f} s after start", file=sys.stderr,
              flush=True)
        first, stop_sweep, backlog = 0, False, 0
        for rate in rates:
            if stop_sweep and rate not in REQUIRED_RATES:
                continue
            if backlog:  # the last step left a queue: let it drain before measuring again
                cons.wait_count(first - backlog, first, a.drain_timeout * 3, job.check)
            meter, cpu0 = LoadMeter(), job.cpu()
            p = run_producer(ctx, bootstrap, topic, labels_topic, tr, first, rate,
                             a.step_seconds, a.label_delay_ms, a.seed)
            n = p["sent"]
            arrived = cons.wait_count(first, first + n, a.drain_timeout, job.check)
            load, cpu = meter.read(), job.cpu() - cpu0
            st = step_stats(cons, first, n, p, a.warmup)
            st.update(rate=rate, sent=n, arrived=arrived, achieved=p["achieved"],
                      producer_lag_s=p["worst_lag_s"], load=load,
                      stream_cpu_share=cpu / max(1e-9, time.time() - p["t0"]))
            st["bounded"] = step_bounded(st, a.bound_ms)
            steps.append(st)
            print(f"{tr.name} live {rate:,}/s (achieved {p['achieved']:,.0f}/s): "
                  f"{arrived:,}/{n:,} predictions, p50 {st['p50']:.1f} ms, p99 "
                  f"{st['p99']:.1f} ms, max {st['max']:.0f} ms over {st['samples']:,} samples; "
                  f"{'bounded' if st['bounded'] else 'UNBOUNDED'}; stream CPU "
                  f"{100 * st['stream_cpu_share']:.0f} %, machine busy {100 * load['busy']:.0f} % "
                  f"(others {100 * load['others']:.0f} %)",
                  file=sys.stderr, flush=True)
            first += n
            backlog = n if arrived < n else 0
            stop_sweep = stop_sweep or not st["bounded"]
    finally:
        rc = job.stop()
        res = cons.stop()
    return {"ready_s": t_ready if steps else None, "steps": steps, "exit_code": rc,
            "duplicates": res["duplicates"], "summary_rate": summary_rate(out),
            "fetch_wait_raises": job.fetch_wait_raises()}


def step_stats(cons: Consumer, first: int, n: int, p: dict[str, Any],
               warmup: float) -> dict[str, Any]:
    """Latencies of a step's events sent after its warm-up; the growth of the median from the
    first to the last quarter of them (in send order)."""
    t_from = (p["t0"] + warmup) * 1e3
    lat = [arr - ts for ts, arr in cons.ask("get", (first, first + n)) if ts >= t_from]
    st = latency_stats(lat)
    q = len(lat) // 4
    st["growth_ms"] = float(np.median(lat[-q:]) - np.median(lat[:q])) if q >= 10 else 0.0
    return st


def wait_ready(bootstrap: str, topic: str, tr: Traffic, cons: Consumer, job: StreamJob,
               timeout: float) -> float:
    """Send a labelled probe event every 0.5 s until one has its prediction; seconds since
    the stream started."""
    from kafka import KafkaProducer

    prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    try:
        deadline = time.monotonic() + timeout
        k = 0
        while not cons.ask("seen", "probe-"):
            job.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no prediction {timeout:.0f} s after the stream started:\n"
                                   f"{job.tail()}")
            prod.send(topic, key=f"probe-{k}".encode(), value=tr.line(k).encode())
            prod.flush()
            k += 1
            time.sleep(0.5)
    finally:
        prod.close()
    return time.time() - job.t_start


# -- the live rates ------------------------------------------------------------------------------
def nice_rate(x: float) -> int:
    """``x`` rounded to two significant digits."""
    e = 10 ** max(0, math.floor(math.log10(max(x, 1.0))) - 1)
    return int(round(x / e) * e)


def live_rates(a: Any, drain_rate: float | None) -> list[int]:
    """The required rates plus the sweep: ``--sweep-rates``, else ``--sweep-fractions`` of
    the drain rate; sweep points within 10 % of a required rate are dropped."""
    if a.sweep_rates:
        extra = [int(float(r)) for r in a.sweep_rates.split(",") if r]
    elif drain_rate:
        extra = [nice_rate(float(f) * drain_rate) for f in a.sweep_fractions.split(",") if f]
    else:
        extra = []
    extra = [r for r in extra if r > 0 and all(abs(r - q) > 0.1 * q for q in REQUIRED_RATES)]
    return sorted(set(REQUIRED_RATES) | set(extra))


PHASES = ("floor", "backlog", "replay", "live")


def main() -> int:
    ap = script_parser(__doc__, epilog=False)
    _common.add_list_arg(ap, "--datasets", ("a9a", "ijcnn1-like"))
    _common.add_list_arg(ap, "--phases", PHASES)
    # a whole data set (~50k events) drained in 0.1-0.3 s, under three of the status file's
    # 0.1 s ticks: too short to time; 250k events (the rows repeated) take ~2 s
    ap.add_argument("--backlog", type=int, default=250_000,
                    help="events of the backlog and of the replay (the data set's rows "
                         "repeated past its last; default %(default)s)")
    ap.add_argument("--step-seconds", type=float, default=12.0,
                    help="seconds per live rate (default %(default)s)")
    ap.add_argument("--warmup", type=float, default=2.0,
                    help="seconds dropped at the start of each live rate (default %(default)s)")
    ap.add_argument("--sweep-fractions", default="0.3,0.4,0.5",
                    help="sweep rates as fractions of the drain rate (default %(default)s)")
    ap.add_argument("--sweep-rates", default="",
                    help="sweep rates in events/s (overrides --sweep-fractions)")
    ap.add_argument("--label-delay-ms", type=float, default=500.0,
                    help="mean label delay (default %(default)s)")
    ap.add_argument("--labels-topic", action="store_true",
                    help="labels on their own topic (--labels) instead of the events topic")
    ap.add_argument("--bound-ms", type=float, default=1000.0,
                    help="p99 bound of a 'bounded' live rate (default %(default)s)")
    ap.add_argument("--drain-timeout", type=float, default=15.0,
                    help="seconds to wait for a rate's last predictions (default %(default)s)")
    ap.add_argument("--start-timeout", type=float, default=120.0)
    ap.add_argument("--backlog-timeout", type=float, default=300.0)
    ap.add_argument("--max-stream-seconds", type=float, default=900.0,
                    help="--max-seconds of the stream (a safety net: it is stopped by SIGINT)")
    ap.add_argument("--replay-runs", type=int, default=7,
                    help="replay runs, each of N rows and of the small prefix "
                         "(default %(default)s)")
    ap.add_argument("--backlog-runs", type=int, default=5,
                    help="backlog drains, each on a fresh topic and stream; the median rate "
                         "counts (default %(default)s)")
    ap.add_argument("--replay-small", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stream-arg", action="append", metavar="ARG",
                    help="extra argument of `kernelstream stream` (repeatable)")
    ap.add_argument("--beam-option", action="append", metavar="OPT",
                    help="Beam pipeline option of the stream, passed after '--' (repeatable), "
                         "e.g. --beam-option=--state_cache_size_mb=0")
    ap.add_argument("--keep-temp", type=Path, metavar="DIR",
                    help="work in DIR (kept: stream logs, outputs, replay files) instead of a "
                         "temporary directory")
    ap.add_argument("--broker", choices=BROKERS, default="tansu",
                    help="the local broker of every phase (default %(default)s); results go "
                         "to streaming.md on tansu, streaming_BROKER.md otherwise")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    a = ap.parse_args()
    names = _common.parse_list(ap, a.datasets, ("a9a", "ijcnn1-like"), "data set")
    phases = _common.parse_list(ap, a.phases, PHASES, "phase")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__"])
    started, t_start = now_utc(), time.perf_counter()
    # the command, the code and the load at the start, as every results header has them
    res: dict[str, Any] = {"machine": machine_info(), "data": {}, "datasets": {},
                           **_common.provenance("streaming.py", sys.argv[1:]),
                           "options": {k: str(v) for k, v in vars(a).items()}}
    start_broker, res["broker"] = broker(a.broker)
    res["stream_kafka"] = stream_kafka()
    traffic = {"a9a": lambda: a9a(a.data_dir), "ijcnn1-like": lambda: ijcnn1_like(seed=a.seed)}
    with start_broker() as b, contextlib.ExitStack() as stack:
        if a.keep_temp:
            tmp = a.keep_temp
            tmp.mkdir(parents=True)  # a fresh directory: the phases create fixed names in it
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ks-streaming-")))
        for i, name in enumerate(names):
            tr = traffic[name]()
            res["data"][name] = tr.note
            n = a.backlog  # the rows repeat past the data set's last (Traffic.line)
            dr: dict[str, Any] = res["datasets"].setdefault(name, {})
            print(f"== {name}: {len(tr.labels):,} rows, {tr.n_features} features",
                  file=sys.stderr, flush=True)
            if "floor" in phases and i == 0:
                res["floor"] = floor_phase(a, ctx, b, tr)
            if "backlog" in phases:
                for shape in SHAPES:
                    dr[BACKLOG_KEY[shape]] = backlog_phase(a, ctx, b, tr, n, tmp, shape)
            if "replay" in phases:
                dr["replay"] = replay_phase(a, tr, n, tmp)
                for shape in SHAPES:
                    bl = dr.get(BACKLOG_KEY[shape])
                    if bl:
                        rv = drain_replay_ratio(bl["drain_rates"], bl["too_short"],
                                                dr["replay"], RATIO_TARGET)
                        print(f"{name}: replay {dr['replay']['rate']:,.0f} ex/s, drain "
                              f"({shape}) {bl['drain_rate']:,.0f} events/s, ratio "
                              f"{rv['ratio']:.2f} [{rv['lo']:.2f}, {rv['hi']:.2f}]: "
                              f"{rv['verdict']}", file=sys.stderr, flush=True)
            if "live" in phases:
                rates = live_rates(a, (dr.get("backlog") or {}).get("drain_rate"))
                dr["live"] = live_phase(a, ctx, b, tr, rates, tmp)
    res["load_end"] = _common.load_average()
    minutes = (time.perf_counter() - t_start) / 60
    L = render(a, res, started, minutes)
    res["passed"] = passed(res)
    write_report(a.out_dir, results_stem(a.broker), L, res)
    print("\n".join(L))
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
