"""Drain requests and progress lines of a running ``kernelstream stream`` (:class:`Stopper`).

SIGINT/SIGTERM, ``--max-seconds`` and ``--idle-stop`` all *drain*, and a drain is a
checkpoint, not a flush: the reader ends at the positions it has claimed (records its merge
still holds back stay unread), the Committer writes the last snapshot of that cut at its last
``finish_bundle``, the pipeline finishes. The next run resumes exactly there, as it would
after a kill: its outputs and the stopped run's together equal one uninterrupted run's. A
second signal exits 130 at once (the next run resumes from the last snapshot).
``--idle-stop D`` fires once no record has been read for ``D`` while the reader is caught up:
every partition read to its high watermark (``behind`` 0 in the status file), so neither a
slow start nor a reader busy on a backlog counts as idle; nor does an outage: no time
counts while the status says ``broker_reachable: false`` (a reader lost its broker
connection and has had no fetch result since), and the idle time starts over after it.
The drain request reaches workers in this process directly and workers elsewhere (EXTERNAL)
through a file in the run's control directory, where the Committer also writes the status the
progress lines and ``--idle-stop`` read. This watcher thread is the launcher's only moving
part while the pipeline runs, hence its own module.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from kernelstream.engine.replay.core import fmt_duration
from kernelstream.pipelines.config import PROG
from kernelstream.pipelines.live.stream_config import EXIT_STOPPED, StreamConfig

PROGRESS_EVERY = 2.0  # seconds between progress lines


class Stopper:
    """Drain requests (signals, ``--max-seconds``, ``--idle-stop``) and progress lines."""

    def __init__(self, config: StreamConfig, job: Any, out: str,
                 until: Callable[[dict[str, Any]], bool] | None = None) -> None:
        # until: drains (reason "until") once it is true of the status (the demo: every
        # record its producer sent has been read)
        self.config, self.job, self.out, self.until = config, job, out, until
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
        self._last_line = (0.0, 0)  # (time, records) of the previous line
        self._last_learning = (0, 0.0)  # (labels learnt, learning seconds) of that line

    # -- drain -----------------------------------------------------------------------------
    def drain(self, reason: str) -> None:
        # Beam: only once the stream runs
        from kernelstream.transforms.live.kafka_read import request_drain

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
            if records is not None and records != self._last_records:
                self._last_records = records
                self._last_change = now
            if st.get("behind") != 0:  # idle counts only once every record on the broker is read
                self._last_change = now
            if self.config.max_seconds is not None and now - self.t0 >= self.config.max_seconds:
                self.drain("max-seconds")
            if self.until is not None and st and self.until(st):
                self.drain("until")
            if st.get("broker_reachable") is False:
                # an outage, not the end of the topic: no idle stop during it, and the idle
                # time starts over once the broker answers again
                self._last_change = now
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
        t_prev, r_prev = self._last_line
        records = int(st.get("records", 0))
        outcomes = int(st.get("rows", {}).get("outcomes", 0))
        dt = max(1e-9, now - t_prev) if t_prev else max(1e-9, elapsed)
        rate = (records - r_prev) / dt
        self._last_line = (now, records)
        lrate = self._learning_rate(st)
        lag_ms = st.get("lag_ms")
        # (a replayed backlog of old records is days behind: then in minutes, hours)
        lag = ("-" if lag_ms is None else f"{lag_ms / 1000:.2f} s" if lag_ms < 60_000
               else fmt_duration(lag_ms / 1000))
        written = int(st.get("published", 0)) + int(st.get("buffered", 0))
        epoch = st.get("epoch")
        draining = "  draining" if self.reason else ""
        if st.get("broker_reachable") is False:
            draining = "  broker unreachable" + draining
        return (f"[stream] {elapsed:5.1f} s  records {records:,} ({rate:,.0f}/s)  labels "
                f"learnt {outcomes:,} (learning {lrate}/s)  lag {lag}  pending "
                f"{st.get('pending', 0):,}  outputs {written:,}  epoch "
                f"{'-' if epoch is None else epoch}{draining}")

    def _learning_rate(self, st: dict[str, Any]) -> str:
        """Labels learnt per second of learning (the models' time in learner calls) since
        the previous line, else over the run so far: the stream's learning throughput, which
        the waits of an idle topic do not dilute as records / wall seconds would."""
        learnt, busy = int(st.get("learnt", 0)), float(st.get("learn_seconds", 0.0))
        n0, s0 = self._last_learning
        self._last_learning = (learnt, busy)
        if busy > s0 and learnt > n0:
            return f"{(learnt - n0) / (busy - s0):,.0f}"
        return f"{learnt / busy:,.0f}" if busy > 0 else "-"
