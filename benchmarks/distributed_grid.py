"""The replay grid on a distributed engine: Dask against the loop, Beam's direct runner and
the fork pool of ``replay --workers``.

One grid (a9a, configurations ``a=bogd`` and ``b=bpa-s`` at budget 200, ``-R`` permutations,
8 by default: 16 stream keys), each way a ``kernelstream replay`` command line run end to end
in a fresh process, as a user runs it (Python start, imports, reading the data, learning,
writing the Parquet outputs and summary.json; for Dask also starting and stopping its local
cluster):

* ``loop``: ``--runner loop``, the plain reference loop (no Beam), the baseline of the ratios;
* ``direct``: ``--runner direct``, Beam's FnApiRunner in-process;
* ``--workers 2``: the fork pool (``pipelines.replay.workers``) of two direct-runner processes;
* ``loop --workers 2``: the fork pool of two loop processes;
* ``dask 2 workers``: ``--runner dask --workers 2``: Beam's DaskRunner on a local Dask
  cluster of two single-thread worker processes, started and stopped by the command;
* ``dask cluster up``: ``--runner dask --dask-scheduler tcp://127.0.0.1:PORT`` on a
  two-worker cluster (``dask scheduler`` and ``dask worker`` processes) started once, before
  the rounds, and not timed: what a run costs on a cluster that is already there (the
  multi-machine case).

Flink is not measured: Beam's Flink job server jar is not served by this machine's Maven
registry (the report says which artifacts were tried).

Rounds alternate the order of the ways (round k starts with the k-th), ``--rounds`` rounds
(default 3); medians, and each median's ratio to the loop's. As in ``benchmarks/grid.py``
(whose measuring helpers this script uses), a run waits for an idle second first, and one that
other tenants disturbed is run again (``--tries``). Every run's outputs are compared with the
first loop run's (predictions, dead letters, metrics but the run's columns, summary.json but
timings, argv and runner). The verdict is the issue's rule: if Dask (its local cluster, as
``--workers 2`` is started by the command too) is within 15 % of the faster fork pool,
``--workers N`` should run on Dask; otherwise the pool stays and Dask is for multi-machine runs.

Writes ``benchmarks/results/distributed.md`` and ``distributed.json`` (generated; never edit
by hand)::

    .venv/bin/python benchmarks/distributed_grid.py                  # ~5 min on 2 idle cores
    .venv/bin/python benchmarks/distributed_grid.py -R 2 --rounds 1  # a quick check

(Not ``benchmarks/distributed.py``: a module of that name in ``benchmarks/``, which the
scripts and ``tests/experiments/test_benchmark_helpers.py`` put first on ``sys.path``, hides
the ``distributed`` package of Dask.)
"""

from __future__ import annotations

import compileall
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
import grid  # its measuring helpers: fresh-process runs, idle waits, output comparison

from kernelstream._services import free_port

STEM = "distributed"
A9A = "a9a"
GRID = grid.GRID  # a=bogd, b=bpa-s, budget 200
BASE = "loop"
DASK = "dask 2 workers"
CLUSTER_UP = "dask cluster up"
POOLS = ("--workers 2", "loop --workers 2")
WITHIN = 0.15  # the rule: Dask within 15 % of the fork pool
# name -> replay options ({scheduler}: the running cluster's address)
WAYS: dict[str, list[str]] = {
    BASE: ["--runner", "loop"],
    "direct": ["--runner", "direct"],
    "--workers 2": ["--workers", "2"],
    "loop --workers 2": ["--runner", "loop", "--workers", "2"],
    DASK: ["--runner", "dask", "--workers", "2"],
    CLUSTER_UP: ["--runner", "dask", "--dask-scheduler", "{scheduler}"],
}
NOT_RUN = {
    "Flink parallelism 1": "not run (Beam's Flink job server jar is not served by this "
    "machine's Maven registry: beam-runners-flink-1.18/1.19/1.20-job-server 2.61-2.77 and "
    "beam-runners-flink-1.19 2.75.0 all 'Could not find artifact', checked 2026-11-28)",
}
NOT_RUN["Flink parallelism 2"] = NOT_RUN["Flink parallelism 1"]


def log(msg: str) -> None:
    print(f"[distributed] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def dask_cluster(tmp: Path) -> Iterator[str]:
    """A Dask scheduler and two single-thread workers on 127.0.0.1 (the runs' environment,
    so their CPU counts as the runs'); yields the scheduler's address."""
    from distributed import Client

    port = free_port("127.0.0.1")
    address = f"tcp://127.0.0.1:{port}"
    local = ["--dashboard-address", "127.0.0.1:0", "--no-dashboard"]
    procs: list[subprocess.Popen[bytes]] = []
    with open(tmp / "cluster.log", "wb") as fh:
        try:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port",
                 str(port), *local], env=grid._env(), stdout=fh, stderr=subprocess.STDOUT))
            for _ in range(2):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "dask", "worker", address, "--host", "127.0.0.1",
                     "--nthreads", "1", "--local-directory", str(tmp / "dask"),
                     "--preload", "kernelstream.pipelines.replay.dask_worker", *local],
                    env=grid._env(), stdout=fh, stderr=subprocess.STDOUT))
            with Client(address, timeout=60) as client:
                client.wait_for_workers(2, timeout=120)
            yield address
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in reversed(procs):
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def measure(a: Any, tmp: Path, scheduler: str | None) -> dict[str, Any]:
    data = str(Path(a.data_dir) / A9A)
    ways = list(a.ways)
    runs: dict[str, list[tuple[dict[str, Any], Path]]] = {w: [] for w in ways}
    ref: Path | None = None
    for k in range(a.rounds):
        for w in ways[k % len(ways):] + ways[:k % len(ways)]:
            opts = [o.format(scheduler=scheduler) for o in WAYS[w]]
            out = tmp / f"{ways.index(w)}-{k}"
            args = ["replay", data, *GRID, "-R", str(a.permutations), *opts]
            best: dict[str, Any] | None = None
            for _ in range(a.tries):
                waited = grid.wait_idle(a.idle_wait)
                res = grid.run_cli(args, out)
                if res["rc"] != 0:
                    raise RuntimeError(f"{w}: exit {res['rc']}: {res['stderr'][-3000:]}")
                res["waited"] = waited
                if best is None or res["cpu_wait_s"] < best["cpu_wait_s"]:
                    best = res
                if not grid.disturbed(res):
                    break
                log(f"{w}: others used {res['others_cpu_s']:.1f} CPU s in "
                    f"{res['wall_s']:.1f} s, the run waited {res['cpu_wait_s']:.1f} s: again")
            assert best is not None
            if w == BASE and ref is None:
                ref = out
            runs[w].append(({"wall_s": best["wall_s"], "own_cpu_s": best["own_cpu_s"],
                             "learning_s": grid.learning_seconds(out),
                             "cpu_wait_s": best["cpu_wait_s"],
                             "others_cpu_s": best["others_cpu_s"],
                             "disturbed": grid.disturbed(best)}, out))
            log(f"round {k + 1} {w}: {best['wall_s']:.2f} s")
    assert ref is not None
    base = statistics.median(c["wall_s"] for c, _ in runs[BASE])
    rows = []
    for w in ways:
        walls = [c["wall_s"] for c, _ in runs[w]]
        med = statistics.median(walls)
        rows.append({
            "way": w, "options": " ".join(WAYS[w]), "walls_s": walls, "median_s": med,
            "ratio": med / base,
            "learning_s": statistics.median(c["learning_s"] for c, _ in runs[w]),
            "own_cpu_s": statistics.median(c["own_cpu_s"] for c, _ in runs[w]),
            "others_cpu_s": [c["others_cpu_s"] for c, _ in runs[w]],
            "disturbed": sum(bool(c["disturbed"]) for c, _ in runs[w]),
            "identical": all(grid.same_outputs(ref, o) for _, o in runs[w]),
        })
    return {"rows": rows, "base_median_s": base,
            "command": " ".join(["kernelstream", "replay", A9A, *GRID, "-R",
                                 str(a.permutations)])}


def verdict(js: dict[str, Any]) -> dict[str, Any] | None:
    """The issue's rule on the measured rows: Dask's local cluster against the faster fork
    pool (None when either was not run)."""
    rows = {r["way"]: r for r in js["rows"]}
    pools = [rows[p] for p in POOLS if p in rows]
    if DASK not in rows or not pools:
        return None
    pool = min(pools, key=lambda r: r["median_s"])
    ratio = rows[DASK]["median_s"] / pool["median_s"]
    return {"pool": pool["way"], "pool_s": pool["median_s"], "dask_s": rows[DASK]["median_s"],
            "ratio": ratio, "within": ratio <= 1 + WITHIN}


def render(js: dict[str, Any]) -> list[str]:
    lines = [f"# The replay grid on a distributed engine (R = {js['permutations']})", "",
             _common.generated_line("distributed_grid.py", js["generated"],
                                    f"wall time {js['wall_min']:.1f} min"), "",
             f"* Machine: {js['machine']}; load average at the start {js['load']} (1/5/15 "
             "min): a shared machine, hence alternating rounds and medians.",
             f"* `{js['command']}`: 2 configurations x {js['permutations']} permutations = "
             f"{2 * js['permutations']} stream keys. {js['rounds']} rounds; each run a fresh "
             "`kernelstream replay ... -q` process timed from start to exit; before each, a "
             f"wait for an idle second (at most {js['idle_wait']:g} s); a run other tenants "
             f"disturbed was run again (at most {js['tries']} times; see `benchmarks/grid.py`).",
             "* *identical*: predictions and dead letters equal the first loop run's row for "
             "row, metrics but the run's own columns, summary.json but timings, argv and "
             "runner. *learning*: seconds inside the learners over all streams (summary.json). "
             "*CPU*: the run's own CPU seconds, all its processes (for *dask cluster up* the "
             "running cluster's too).", "",
             "| way | options | median wall (s) | walls (s) | ratio to the loop | learning (s) "
             "| CPU (s) | others' CPU (s) | disturbed | identical |",
             "|---|---|---:|---|---:|---:|---:|---|---:|---|"]
    for r in js["rows"]:
        lines.append(
            f"| {r['way']} | `{r['options']}` | {r['median_s']:.2f} | "
            f"{', '.join(f'{w:.2f}' for w in r['walls_s'])} | {r['ratio']:.2f} | "
            f"{r['learning_s']:.2f} | {r['own_cpu_s']:.1f} | "
            f"{', '.join(f'{v:.1f}' for v in r['others_cpu_s'])} | {r['disturbed']} | "
            f"{'yes' if r['identical'] else '**NO**'} |")
    for name, why in NOT_RUN.items():
        lines.append(f"| {name} | {why} | – | – | – | – | – | – | – | – |")
    lines.append("")
    v = verdict(js)
    if v is not None:
        lines.append(
            f"**Dask (local cluster of 2) / fork pool (`{v['pool']}`, the faster): "
            f"{v['ratio']:.2f}** ({v['dask_s']:.2f} s against {v['pool_s']:.2f} s). The "
            f"issue's rule (Dask within {WITHIN:.0%} of the pool: `--workers N` on Dask): "
            + ("**within**: `--workers N` could run on Dask." if v["within"] else
               "**not within**: the fork pool stays for `--workers N` on one machine, and "
               "Dask (`--runner dask --dask-scheduler`) is for runs over several machines."))
        lines.append("")
    lines += [
        "* Why the pool is cheaper on one machine: its workers are forked from the command "
        "once it has imported Beam and read the data, so they pay no Python start, no "
        "imports and no parse, and share the rows copy-on-write. A local Dask cluster starts "
        "a scheduler and spawns worker processes that import Dask, Beam and kernelstream and "
        "each read the data set; each run then pays the DaskRunner's translation, one Dask "
        "task per stream key and the cluster's shutdown. *dask cluster up* shows what is "
        "left when the cluster is already running (the multi-machine case).", ""]
    return lines


def main() -> None:
    ap = _common.script_parser(__doc__)
    _common.add_output_args(ap, STEM, render_flag="--render")
    ap.add_argument("--permutations", "-R", type=int, default=8,
                    help="permutations of the grid (default 8: 16 stream keys)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the ways (default 3)")
    ap.add_argument("--tries", type=int, default=3,
                    help="runs of a cell while other tenants disturb it (default 3)")
    ap.add_argument("--idle-wait", type=float, default=120.0,
                    help="before each run, wait at most this long for an idle second "
                    "(default 120)")
    _common.add_list_arg(ap, "--ways", WAYS)
    a = ap.parse_args()
    a.ways = _common.parse_list(ap, a.ways, WAYS, "way")
    if BASE not in a.ways:
        ap.error(f"--ways must include {BASE!r}")
    if a.render:
        js = _common.read_json(a.out_dir / f"{STEM}.json")
        (a.out_dir / f"{STEM}.md").write_text("\n".join(render(js)) + "\n")
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # leave through the cluster's exit
    t0 = time.time()
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    # as an installed package: no fresh process compiles the sources again
    compileall.compile_dir(str(_common.REPO / "kernelstream"), quiet=1)
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        tmp = Path(d)
        scheduler = (stack.enter_context(dask_cluster(tmp)) if CLUSTER_UP in a.ways
                     else None)
        cell = measure(a, tmp, scheduler)
    js = {"generated": _common.now_utc(), "wall_min": (time.time() - t0) / 60,
          "machine": _common.machine_info(), "load": load, "rounds": a.rounds,
          "idle_wait": a.idle_wait, "tries": a.tries, "permutations": a.permutations,
          "ways": a.ways, **cell}
    js["verdict"] = verdict(js)
    _common.write_report(a.out_dir, STEM, render(js), js)
    log(f"wrote {a.out_dir / (STEM + '.md')}")


if __name__ == "__main__":
    main()
