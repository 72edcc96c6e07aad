"""The traffic of benchmarks/streaming.py: the rows of its data sets as LIBSVM text, and the
producer and consumer processes that write them to Kafka and read the predictions back."""

from __future__ import annotations

import heapq
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common  # noqa: F401  first: it limits BLAS to one thread per process
import numpy as np
from _common import DATASETS, read_lines


# -- traffic -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Traffic:
    """Rows of a data set as LIBSVM text: ``labels[i]`` (``+1``/``-1``) and ``features[i]``
    (the line after the label)."""

    name: str
    n_features: int
    labels: list[str]
    features: list[str]
    note: str

    def line(self, i: int) -> str:
        """Row ``i`` as a LIBSVM line; past the last row the rows repeat (a backlog longer
        than the data set, so that its drain lasts long enough to be timed)."""
        return f"{self.label(i)} {self.feature(i)}"

    def label(self, i: int) -> str:
        return self.labels[i % len(self.labels)]

    def feature(self, i: int) -> str:
        return self.features[i % len(self.features)]


def a9a(data_dir: Path) -> Traffic:
    d = DATASETS["a9a"]
    labels, feats = [], []
    for f in d.files:
        for ln in read_lines(Path(data_dir) / f):
            lab, _, rest = ln.decode().strip().partition(" ")
            labels.append("+1" if float(lab) > 0 else "-1")
            feats.append(rest)
    return Traffic("a9a", d.n_features, labels, feats, d.note)


def ijcnn1_like(n: int = 50_000, seed: int = 0) -> Traffic:
    """Synthetic stand-in for ijcnn1 (not in the shared data sets): ``n`` dense rows of 22
    features uniform in [-1, 1]; the label is +1 for the top 10 % of a fixed nonlinear score
    (a linear part, a product term and a sine, plus noise), so ~10 % positives as in ijcnn1."""
    d = 22
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, d))
    w = rng.normal(size=d)
    v = rng.normal(size=d)
    s = X @ w / math.sqrt(d) + X[:, 0] * X[:, 1] + 0.5 * np.sin(3.0 * (X @ v) / math.sqrt(d))
    s += 0.3 * rng.normal(size=n)
    y = np.where(s > np.quantile(s, 0.9), "+1", "-1")
    feats = [" ".join(f"{j + 1}:{x:.4f}" for j, x in enumerate(row)) for row in X]
    return Traffic("ijcnn1-like", d, y.tolist(), feats,
                   f"SYNTHETIC stand-in for ijcnn1 (not in the shared data sets): {n:,} dense "
                   f"rows, 22 features uniform in [-1, 1], {100 * np.mean(y == '+1'):.1f} % "
                   f"positives (top 10 % of a seeded nonlinear score plus noise), seed {seed}")


# -- producer and consumer processes -------------------------------------------------------------
def _producer(bootstrap: str, topic: str, labels_topic: str, first: int, rows: list[str],
              labels: list[str], rate: float, delay_mean_ms: float, seed: int,
              out: Any) -> None:
    """Write ``len(rows)`` feature records (keys ``e<first + j>``, label ``?``) at ``rate``
    per second, and each one's label record after its random delay; report what was done."""
    from kafka import KafkaProducer

    n = len(rows)
    rng = np.random.default_rng([seed, first])
    delays = np.minimum(rng.exponential(delay_mean_ms / 1000.0, n), 5 * delay_mean_ms / 1000.0)
    prod = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    prod.partitions_for(topic)  # metadata before the clock starts
    if labels_topic != topic:
        prod.partitions_for(labels_topic)
    pending: list[tuple[float, int]] = []
    i, worst_lag = 0, 0.0
    t0 = time.time()
    t_last = t0
    while i < n or pending:
        now = time.time()
        while pending and pending[0][0] <= now:
            _, j = heapq.heappop(pending)
            prod.send(labels_topic, key=f"e{first + j}".encode(),
                      value=f"label:{labels[j]}".encode(), timestamp_ms=int(time.time() * 1e3))
        due = min(n, int((now - t0) * rate) + 1)
        if i < due:
            worst_lag = max(worst_lag, now - (t0 + i / rate))
        while i < due:
            ts = time.time()
            prod.send(topic, key=f"e{first + i}".encode(), value=f"? {rows[i]}".encode(),
                      timestamp_ms=int(ts * 1e3))
            heapq.heappush(pending, (ts + float(delays[i]), i))
            t_last = ts
            i += 1
        nxt = min(t0 + i / rate if i < n else math.inf, pending[0][0] if pending else math.inf)
        time.sleep(max(0.0, min(nxt - time.time(), 0.01)))
    prod.flush()
    prod.close()
    out.put({"t0": t0, "t_last": t_last, "sent": n,
             "achieved": (n - 1) / (t_last - t0) if n > 1 and t_last > t0 else float(n),
             "worst_lag_s": worst_lag})


def _consumer(bootstrap: str, topic: str, raw: bool, conn: Any) -> None:
    """Read ``topic`` from its beginning and record, per event, (event time ms, arrival ms):
    from the prediction rows' JSON (``event_id``, ``event_time_ms``), or with ``raw`` from the
    record itself (key, timestamp). Answers the harness's questions on ``conn`` between
    polls: ``("count", (lo, hi))`` -> how many of ``e<lo>..e<hi-1>`` arrived, ``("get",
    (lo, hi))`` -> their (event ms, arrival ms) in id order, ``("seen",
    prefix)`` -> whether an id with that prefix arrived, ``("stop", None)`` -> everything."""
    from kafka import KafkaConsumer, TopicPartition

    cons = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                         fetch_max_wait_ms=10, auto_offset_reset="earliest")
    parts = None
    while parts is None:  # the topic may not exist for a moment
        parts = cons.partitions_for_topic(topic)
        if parts is None:
            time.sleep(0.1)
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    cons.assign(tps)
    cons.seek_to_beginning(*tps)
    events: dict[int, tuple[int, float]] = {}
    others: dict[str, tuple[int, float]] = {}
    duplicates = rows = 0
    conn.send("ready")
    while True:
        while conn.poll():
            cmd, arg = conn.recv()
            if cmd == "count":
                lo, hi = arg
                conn.send(sum(1 for k in range(lo, hi) if k in events))
            elif cmd == "get":
                lo, hi = arg
                conn.send([events[k] for k in range(lo, hi) if k in events])
            elif cmd == "seen":
                conn.send(any(k.startswith(arg) for k in others))
            else:
                cons.close()
                conn.send({"events": events, "others": others, "duplicates": duplicates,
                           "rows": rows})
                return
        batch = cons.poll(timeout_ms=50, max_records=20_000)
        arrival = time.time() * 1e3
        for recs in batch.values():
            for r in recs:
                rows += 1
                if raw:
                    eid, ts = (r.key or b"").decode(), r.timestamp
                else:
                    row = json.loads(r.value)
                    eid, ts = str(row.get("event_id")), row.get("event_time_ms")
                if ts is None:
                    continue
                if eid.startswith("e") and eid[1:].isdigit():
                    k = int(eid[1:])
                    if k in events:
                        duplicates += 1
                    else:
                        events[k] = (int(ts), arrival)
                elif eid not in others:
                    others[eid] = (int(ts), arrival)


class Consumer:
    """The consumer process and its pipe."""

    def __init__(self, ctx: Any, bootstrap: str, topic: str, raw: bool = False) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_consumer, args=(bootstrap, topic, raw, child),
                                daemon=True)
        self.proc.start()
        if not self.conn.poll(60) or self.conn.recv() != "ready":
            raise RuntimeError(f"the consumer of {topic} did not start")

    def ask(self, cmd: str, arg: Any = None) -> Any:
        self.conn.send((cmd, arg))
        return self.conn.recv()

    def wait_count(self, lo: int, hi: int, timeout: float, alive: Any = None) -> int:
        """Wait until every event ``lo..hi-1`` has arrived or ``timeout``; the count."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.ask("count", (lo, hi))
            if got >= hi - lo or time.monotonic() > deadline:
                return got
            if alive is not None:
                alive()
            time.sleep(0.1)

    def stop(self) -> dict[str, Any]:
        res = self.ask("stop")
        self.proc.join(10)
        return res


def run_producer(ctx: Any, bootstrap: str, topic: str, labels_topic: str, tr: Traffic,
                 first: int, rate: float, seconds: float, delay_mean_ms: float,
                 seed: int) -> dict[str, Any]:
    """One steady-rate step (in its own process); its report."""
    n = max(1, int(rate * seconds))
    idx = [(first + j) % len(tr.labels) for j in range(n)]
    q = ctx.Queue()
    p = ctx.Process(target=_producer, args=(
        bootstrap, topic, labels_topic, first, [tr.features[i] for i in idx],
        [tr.labels[i] for i in idx], rate, delay_mean_ms, seed, q), daemon=True)
    p.start()
    res = q.get(timeout=seconds * 3 + 60)
    p.join(30)
    return res
