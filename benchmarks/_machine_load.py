"""CPU use of the machine and of a process tree (from /proc), for benchmarks/streaming.py's
notes on a shared machine."""

from __future__ import annotations

import os
from pathlib import Path


def _jiffies() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine (all cores), from /proc/stat."""
    vals = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0.0)
    return sum(vals) - idle, sum(vals)


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its live descendants, including the
    children they have already reaped."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, float]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            rest = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        procs[int(p.name)] = (int(rest[1]), sum(float(x) for x in rest[11:15]) / tick)
    total, todo = 0.0, [pid]
    while todo:
        q = todo.pop()
        if q in procs:
            total += procs[q][1]
        todo += [c for c, (ppid, _) in procs.items() if ppid == q]
    return total


class LoadMeter:
    """CPU use over an interval, as shares of the whole machine (1.0 = every core busy):
    everything (``busy``), this benchmark's process tree (broker, stream, clients: ``own``),
    and the rest (``others``: the other tenants of a shared machine)."""

    def __init__(self) -> None:
        self.j0, self.own0 = _jiffies(), tree_cpu_seconds(os.getpid())

    def read(self) -> dict[str, float]:
        j1, own1 = _jiffies(), tree_cpu_seconds(os.getpid())
        total = max(1.0, j1[1] - self.j0[1])
        busy = (j1[0] - self.j0[0]) / total
        own = (own1 - self.own0) * os.sysconf("SC_CLK_TCK") / total
        return {"busy": busy, "own": own, "others": max(0.0, busy - own)}

