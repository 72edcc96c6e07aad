"""The CPU accounting of benchmarks/grid.py (and of benchmarks/distributed_grid.py, through
it): the machine's busy time, the CPU and run-queue seconds of the processes carrying the
script's environment marker, and the wait for an idle second before a run."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU seconds the machine has spent busy (all CPUs, /proc/stat), since boot."""
    vals = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(vals[:8]) - vals[3] - vals[4]) / _TICK  # minus idle and iowait


MARKER = f"KERNELSTREAM_GRID_BENCH={os.getpid()}"  # in the environment of our processes


class OwnCpu(threading.Thread):
    """The processes carrying :data:`MARKER` in their environment, sampled every 50 ms while
    a run lasts: their CPU seconds and the seconds their threads waited for a CPU while
    runnable (``/proc/PID/task/TID/schedstat``). Each process's and thread's last sample
    counts (orphaned SDK workers that nobody waits for included), minus what it had before
    the run."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.ours: dict[int, bool] = {}
        self.unexeced: set[int] = set()  # our children not yet running their command
        self.parent: dict[int, int] = {}  # our processes' parent pids
        self.first: dict[tuple[int, int], tuple[float, float]] = {}
        self.last: dict[tuple[int, int], tuple[float, float]] = {}
        self.proc_first: dict[int, float] = {}
        self.proc_last: dict[int, float] = {}
        self.stop = threading.Event()
        self.sample(baseline=True)

    def sample(self, baseline: bool = False) -> None:
        for d in Path("/proc").glob("[0-9]*"):
            pid = int(d.name)
            with contextlib.suppress(OSError, IndexError, ValueError):
                if pid not in self.ours or pid in self.unexeced:
                    mine = MARKER.encode() in (d / "environ").read_bytes().split(b"\0")
                    self.ours[pid] = mine
                    # a child of this script seen between its fork and its exec still has
                    # this script's environment: look again until it has its own
                    stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
                    if not mine and int(stat[1]) == os.getpid():
                        self.unexeced.add(pid)
                    else:
                        self.unexeced.discard(pid)
                if not self.ours[pid]:
                    continue
                stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if pid not in self.parent:
                    self.parent[pid] = int(stat[1])
                # the process's CPU (utime + stime) counts its threads that have ended too,
                # such as a reading thread shorter than the sampling period
                cpu_s = (int(stat[11]) + int(stat[12])) / _TICK
                self.proc_last[pid] = cpu_s
                self.proc_first.setdefault(pid, cpu_s if baseline else 0.0)
                for t in (d / "task").iterdir():
                    with contextlib.suppress(OSError, IndexError, ValueError):
                        # run time and run-queue wait (ns) of the thread
                        run_ns, wait_ns = (t / "schedstat").read_text().split()[:2]
                        key = (pid, int(t.name))
                        self.last[key] = (int(run_ns) / 1e9, int(wait_ns) / 1e9)
                        self.first.setdefault(key, self.last[key] if baseline else (0.0, 0.0))

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.sample()

    def critical(self, root: int) -> float:
        """CPU seconds along the critical path of a run whose command is ``root``: its own
        CPU plus that of its busiest child process (its workers run in parallel; what the
        command does before and after them does not). The wall time of the run on cores
        nobody else uses, when the workers start after the command's own work (forked
        ones); an upper bound for workers that start while the command works (spawned)."""
        cpu = self._cpu()
        kids = [c for p, c in cpu.items() if self.parent.get(p) == root]
        return cpu.get(root, 0.0) + max(kids, default=0.0)

    def _cpu(self) -> dict[int, float]:
        """CPU seconds of each process since the start: the larger of its process-wide
        count (whole ticks, ended threads included) and the sum over its threads' last
        samples (nanoseconds)."""
        cpu: dict[int, float] = {}
        for k, v in self.last.items():
            cpu[k[0]] = cpu.get(k[0], 0.0) + v[0] - self.first.get(k, (0.0, 0.0))[0]
        for pid, c in self.proc_last.items():
            cpu[pid] = max(cpu.get(pid, 0.0), c - self.proc_first.get(pid, 0.0))
        return cpu

    def seconds(self) -> tuple[float, float]:
        """(CPU seconds, seconds waited for a CPU) of our processes since the start."""
        self.stop.set()
        self.join()
        self.sample()
        cpu = sum(self._cpu().values())
        wait = sum(v[1] - self.first.get(k, (0.0, 0.0))[1] for k, v in self.last.items())
        return cpu, wait


def wait_idle(limit: float) -> float:
    """Wait until a second passes with the CPUs at least 90 % idle (at most ``limit``
    seconds); return the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        b0, w0 = busy_seconds(), time.monotonic()
        time.sleep(1.0)
        if (busy_seconds() - b0) / ((time.monotonic() - w0) * (os.cpu_count() or 1)) <= 0.10:
            break
    return time.monotonic() - t0
