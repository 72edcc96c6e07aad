"""``kernelstream reproduce`` on one worker process against two (``--workers 2``).

The command runs each table's keys on the replay pipeline; ``--workers N`` splits every
replay's keys over N runner processes, as ``kernelstream replay --workers`` does. This script
runs the same reproduction end to end as a user runs it (a fresh process: Python start,
imports, preparing the data files, the replays, writing the markdown and JSON) with
``--workers 1`` and ``--workers 2``, alternating which goes first in each round
(``--rounds``, default 2), and reports the median wall time of each and their ratio, measured
in this one run. The outputs go to temporary directories (the committed results are not
touched); the script checks that both write the same cells (every run's mistake rate and
#SV, every verdict).

``--paper all`` is ``kernelstream reproduce all``: every paper's every table and data set.
At the papers' own permutation counts that is hours of machine time per run (about 1 h with
two workers), so ``--permutations R`` (``-R``) runs the whole scope with R permutations per
configuration: every replay, data set and learner of ``reproduce all``, fewer keys each. The
default, ``baselines --tables p3,p4 --datasets w7a`` (17 configurations × 5 permutations),
takes about 1 minute with one worker on 2 idle cores, so the comparison can run often;
``--paper``, ``--tables``, ``--datasets`` choose another (``--tables ''`` and ``--datasets ''``
mean all of the paper's). The target (issue 15): ``--workers 2`` ≤ 0.65 × the 1-worker time.

Writes ``benchmarks/results/experiments.md`` (generated; never edit by hand)::

    .venv/bin/python benchmarks/experiments.py
    .venv/bin/python benchmarks/experiments.py --rounds 1 --tables p3 --datasets spambase
    .venv/bin/python benchmarks/experiments.py --rounds 1 --paper all -R 2 --tables '' --datasets ''
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads

TARGET = 0.65
PAPERS = ("baselines", "p0", "p1", "p2", "p3", "p4")  # what ``reproduce all`` writes


def _cells(js: dict[str, Any]) -> list[Any]:
    """What must not depend on the number of workers: each cell's runs and verdict."""
    out = []
    for key, cells in js.items():
        if not (isinstance(cells, list) and cells and isinstance(cells[0], dict)):
            continue
        for c in cells:
            out.append((key, c.get("dataset"), c.get("learner"), c.get("width"),
                        c.get("passed"),
                        [(r.get("r"), r.get("mistake_rate"), r.get("n_sv"))
                         for r in c.get("runs", [])]))
    return out


def _child_cpu() -> float:
    """CPU seconds of this process's finished children and theirs (the command's workers)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(cmd: list[str], workers: int, out: Path) -> tuple[float, float, list[Any]]:
    """Wall seconds, CPU seconds (the command and its worker processes) and the cells."""
    argv = [sys.executable, "-m", "kernelstream.pipelines.cli", *cmd, "--workers", str(workers),
            "--out-dir", str(out), "-q"]
    cpu0 = _child_cpu()
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    stems = PAPERS if cmd[1] == "all" else (cmd[1],)
    cells = [c for stem in stems for c in _cells(json.loads((out / f"{stem}.json").read_text()))]
    return wall, _child_cpu() - cpu0, cells


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__)
    ap.add_argument("--paper", default="baselines", choices=(*PAPERS, "all"),
                    help="the reproduction (default baselines)")
    ap.add_argument("--tables", default="p3,p4", help="its tables (default p3,p4; '': all)")
    ap.add_argument("--datasets", default="w7a", help="its data sets (default w7a; '': all)")
    ap.add_argument("--permutations", "-R", type=int,
                    help="permutations per configuration (default: the papers' protocol)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of both runs (default 2)")
    _common.add_output_args(ap, "experiments")
    a = ap.parse_args(argv)
    cmd = ["reproduce", a.paper]
    for flag, value in (("--tables", a.tables), ("--datasets", a.datasets),
                        ("-R", a.permutations)):
        if value not in (None, ""):
            cmd += [flag, str(value)]
    cmd += ["--data-dir", str(a.data_dir)]
    times: dict[int, list[float]] = {1: [], 2: []}
    cpus: dict[int, list[float]] = {1: [], 2: []}
    ref: list[Any] | None = None
    same = True
    load_before = _load()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="experiments-") as tmp:
        for k in range(a.rounds):
            for w in ((1, 2) if k % 2 == 0 else (2, 1)):
                out = Path(tmp) / f"r{k}-w{w}"
                wall, cpu, cells = run_once(cmd, w, out)
                times[w].append(wall)
                cpus[w].append(cpu)
                ref = cells if ref is None else ref
                same = same and cells == ref
                print(f"round {k + 1}, {w} worker(s): {wall:.1f} s, CPU {cpu:.1f} s",
                      file=sys.stderr, flush=True)
    med = {w: statistics.median(v) for w, v in times.items()}
    ratio = med[2] / med[1]
    L = [
        "# `kernelstream reproduce`: 1 worker vs 2",
        "",
        f"Generated by `benchmarks/experiments.py` on {_common.now_utc()} (total "
        f"{(time.perf_counter() - t_start) / 60:.1f} min). Do not edit by hand.",
        "",
        f"* Machine: {_common.machine_info()}; load average {load_before} before, {_load()} "
        "after (the machine is shared: other tenants' work slows both runs).",
        f"* Command: `kernelstream {' '.join(cmd[:-2])} --workers N` (a fresh process per run, "
        f"outputs to a temporary directory), {a.rounds} rounds alternating which runs first; "
        "medians.",
        *([f"* Scope: {a.permutations} permutation(s) per configuration instead of the papers' "
           "protocol, over the whole scope of the command (every replay, data set and learner); "
           "fewer keys per replay, so the fixed costs weigh more than at the full protocol."]
          if a.permutations else []),
        f"* Outputs: {'identical' if same else '**DIFFERENT**'} (every run's mistake rate and "
        "#SV, every verdict).",
        "* CPU = CPU seconds of the command and its worker processes; cores used = CPU / wall "
        "(below 2 with 2 workers: the processes waited for a CPU that other tenants held).",
        "",
        "| workers | wall times (s) | CPU (s) | cores used | median wall (s) | ratio to 1 "
        "worker |",
        "|---:|---|---|---|---:|---:|",
    ]
    for w in (1, 2):
        used = ", ".join(f"{c / t:.2f}" for c, t in zip(cpus[w], times[w], strict=True))
        L.append(f"| {w} | {', '.join(f'{t:.1f}' for t in times[w])} | "
                 f"{', '.join(f'{c:.1f}' for c in cpus[w])} | {used} | {med[w]:.1f} | "
                 f"{med[w] / med[1]:.2f} |")
    L += ["", f"Target (issue 15): 2 workers ≤ {TARGET} × 1 worker: "
          f"**{'met' if ratio <= TARGET else 'not met'}** ({ratio:.2f})."]
    a.out_dir.mkdir(parents=True, exist_ok=True)
    (a.out_dir / "experiments.md").write_text("\n".join(L) + "\n")
    print(f"wrote {a.out_dir / 'experiments.md'} (ratio {ratio:.2f})", file=sys.stderr)
    return 0 if same else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
