"""A two-configuration grid on the machine's cores: one worker against Beam's parallel modes
and ``replay --workers``.

Each grid is a ``kernelstream replay`` command line (a9a, configurations ``a=bogd`` and
``b=bpa-s`` at budget 200; ``--grids`` picks which), run end to end as a user runs it (a fresh
process: Python start, imports, reading the data, learning, writing the Parquet outputs and
summary.json) in these ways (``--ways`` picks which):

* ``1 worker``: ``--runner direct`` (Beam's FnApiRunner in-process), the baseline;
* ``multi_processing``: ``-- --direct_num_workers=2 --direct_running_mode=multi_processing``
  (Beam's own parallel mode of the direct runner: SDK worker subprocesses fed through gRPC);
* ``portable EXTERNAL``: ``--runner portable`` against Beam's local job service with a pool of
  EXTERNAL workers (``worker_pool_main``) and ``--direct_num_workers=2``; the job service
  and the pool are started once, before the rounds, and not timed; the pool's log says how
  many SDK workers each job started;
* ``--workers 2``: the grid's streams split over two runner processes, each running the same
  Beam pipeline on its share (``kernelstream.pipelines.replay.workers``), forked from the command
  once it has imported Beam;
* ``--workers 2 spawned``: the same with ``KERNELSTREAM_WORKER_START=spawn``: each worker a
  new Python that imports Beam itself (how ``--workers`` started its workers before).

Rounds alternate the order of the ways (round k starts with the k-th), ``--rounds`` rounds
(default 3); medians over the rounds, and the ratio of each median to the 1-worker median.
The machine is shared: before each run the script waits (up to ``--idle-wait`` seconds) for
a second in which the CPUs are at least 90 % idle, and it measures the CPU seconds other
tenants used during the run: the machine's busy time (/proc/stat) minus that of this script
and of every process carrying its environment marker (the command, its workers, Beam's SDK
worker subprocesses, the job service, the worker pool and its SDK workers), sampled every
50 ms, and the seconds the run's own threads waited for a CPU (their run-queue delay). A run
during which, per second, other tenants used more than 0.2 CPU seconds and its threads
waited more than 0.2 s is run again (up to ``--tries`` times; the least delayed counts).

The grids: 1 permutation (2 streams: issue 14's), 4, 8, and 20 permutations (the papers'
evaluation protocol, where two workers pay off). Then the *serial floor*, the parts no
second worker can take over, each in fresh processes: Python's start, importing the
command, importing Beam on top, and reading a9a; from it, the best ratio each grid could
reach (everything after the imports split in two), which shows why the 2-stream grid stays
far above 0.65 whatever the workers do.

Every run's outputs are compared with the first 1-worker run's: predictions and dead letters
row for row, metrics apart from the run's own columns (timings, observed disorder), and
summary.json apart from timings, ``argv`` and ``runner``. The target (issue 14): ``--workers
2`` ≤ 0.65 × the 1-worker time, with identical outputs.

Writes ``benchmarks/results/grid.md`` and ``grid.json`` (generated; never edit by hand)::

    .venv/bin/python benchmarks/grid.py                    # ~5 min on 2 idle cores
    .venv/bin/python benchmarks/grid.py --rounds 1 --grids R1
    .venv/bin/python benchmarks/grid.py --ways "1 worker,--workers 2" --idle-wait 10

The package's bytecode is compiled first (``compileall``), as an installed package has it:
with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every fresh process would
compile kernelstream's sources again.
"""

from __future__ import annotations

import compileall
import contextlib
import json
import os
import signal
import socket
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
from _grid_cpu import MARKER, OwnCpu, busy_seconds, wait_idle

from kernelstream._services import free_port
from kernelstream.engine.replay.outputs import comparable_table
from kernelstream.pipelines.replay.workers import START_ENV

STEM = "grid"
TARGET = 0.65
A9A = "a9a"
GRID = ["--learner", "a=bogd", "--learner", "b=bpa-s", "-p", "a.budget=200",
        "-p", "b.budget=200"]
# name -> (extra replay options, what it is)
GRIDS: dict[str, tuple[list[str], str]] = {
    "R1": ([], "1 permutation: 2 streams, the grid of issue 14"),
    "R4": (["-R", "4"], "4 permutations: 8 streams"),
    "R8": (["-R", "8"], "8 permutations: 16 streams"),
    "R20": (["-R", "20"], "20 permutations: 40 streams, the papers' evaluation protocol"),
}
# the serial floor's parts, each a fresh process (wall seconds, or "seconds" it prints)
FLOOR_PARTS: dict[str, list[str]] = {
    "python": ["-c", "pass"],
    "cli": ["-c", "import kernelstream.pipelines.cli"],
    "beam": ["-c", "import kernelstream.pipelines.cli, kernelstream.pipelines.replay.beam_replay"],
    "read": ["-c", "import sys, time\n"
             "from kernelstream.data.options import ReadOptions\n"
             "from kernelstream.engine.replay.sources import load_rows\n"
             "t = time.perf_counter(); load_rows(ReadOptions(path=sys.argv[1]))\n"
             "print(time.perf_counter() - t)"],
}
MODES: dict[str, tuple[list[str], list[str]]] = {  # name -> (replay options, after "--")
    "1 worker": ([], []),
    "multi_processing": ([], ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]),
    "portable EXTERNAL": (["--runner", "portable"], ["--direct_num_workers=2"]),
    "--workers 2": (["--workers", "2"], []),
    "--workers 2 spawned": (["--workers", "2"], []),
}
# ways that differ by their environment: workers as new Pythons instead of forks
MODE_ENV: dict[str, dict[str, str]] = {"--workers 2 spawned": {START_ENV: "spawn"}}
BASE = "1 worker"
SHARDED = "--workers 2"
PORTABLE = "portable EXTERNAL"
# summary fields that describe the run rather than the streams
SUMMARY_RUN_KEYS = {"seconds", "seconds_std", "examples_per_second", "argv", "runner"}
STARTED = "Starting worker with command"  # the worker pool's line for each SDK worker
# a run is run again when, per second of its wall time, other tenants used more than this
# many CPU seconds and its own threads waited for a CPU more than this many seconds
DISTURBED = 0.2


def log(msg: str) -> None:
    print(f"[grid] {msg}", file=sys.stderr, flush=True)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The runs' environment: this checkout importable, the venv first on PATH (the worker
    pool starts its SDK workers as ``python``), plus ``extra``."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_common.REPO), env.get("PYTHONPATH"))
                                        if p)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    key, value = MARKER.split("=")
    env[key] = value
    return env


@contextlib.contextmanager
def _listening(argv: list[str], port: int, log_path: Path) -> Iterator[None]:
    """Start ``argv`` (in its own process group, with the SDK workers it may start), wait
    until it listens on ``port``, stop that group at the end."""
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen(argv, env=_env(), stdin=subprocess.DEVNULL, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[2]} exited: {log_path.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("localhost", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[2]} did not listen on port {port}")
            time.sleep(0.2)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _strip(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in doc.items() if k not in SUMMARY_RUN_KEYS}
    if isinstance(doc, list):
        return [_strip(v) for v in doc]
    return doc


def same_outputs(a: Path, b: Path) -> bool:
    """Predictions, dead letters, metrics (but the run's columns) and summary.json (but
    timings, argv, runner) equal."""
    if not all(comparable_table(a, n).equals(comparable_table(b, n))
               for n in ("predictions", "dead_letters", "metrics")):
        return False
    return bool(_strip(json.loads((a / "summary.json").read_text()))
                == _strip(json.loads((b / "summary.json").read_text())))


def run_cli(args: list[str], out: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One ``kernelstream replay`` in a fresh process: wall seconds, exit code, stderr, its
    CPU seconds and the seconds its threads waited for a CPU (all its processes), and the CPU
    seconds other tenants used meanwhile."""
    cut = args.index("--") if "--" in args else len(args)
    cmd = [sys.executable, "-m", "kernelstream.pipelines.cli", *args[:cut], "--out", str(out),
           "-q", *args[cut:]]
    own = OwnCpu()
    b0, me0 = busy_seconds(), time.process_time()
    own.start()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=_env(env), cwd=_common.REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    ours, waited = own.seconds()
    busy = busy_seconds() - b0
    return {"wall_s": wall, "rc": proc.returncode, "stderr": stderr, "own_cpu_s": ours,
            "critical_cpu_s": own.critical(proc.pid), "cpu_wait_s": waited,
            "others_cpu_s": max(0.0, busy - ours - (time.process_time() - me0))}


def learning_seconds(out: Path) -> float:
    """Seconds inside the learners, summed over every stream of the run (summary.json)."""
    doc = json.loads((out / "summary.json").read_text())
    return sum(p["seconds"] for c in doc["configs"] for p in c["per_permutation"])


def disturbed(res: dict[str, Any]) -> bool:
    """Whether other tenants took CPU time from a run: they ran meanwhile, and the run's
    threads waited for a CPU (on 2 cores, another tenant that uses only the core a 1-worker
    run leaves idle disturbs nothing)."""
    per_s = DISTURBED * res["wall_s"]
    return bool(res["others_cpu_s"] > per_s and res["cpu_wait_s"] > per_s)


def _started(pool_log: Path) -> int:
    """SDK workers the EXTERNAL pool has started so far (0 when no pool runs)."""
    if not pool_log.exists():
        return 0
    return pool_log.read_text(errors="replace").count(STARTED)


def measure(a: Any, tmp: Path, job: str, pool: str, pool_log: Path) -> dict[str, Any]:
    data = str(Path(a.data_dir) / A9A)
    cells: dict[str, Any] = {}
    for grid in a.grids:
        extra, what = GRIDS[grid]
        modes = list(a.ways)
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        ref: Path | None = None
        for k in range(a.rounds):
            for m in modes[k % len(modes):] + modes[:k % len(modes)]:
                opts, beam_opts = MODES[m]
                if m == PORTABLE:
                    beam_opts = [f"--job_endpoint={job}", "--environment_type=EXTERNAL",
                                 f"--environment_config={pool}", *beam_opts]
                out = tmp / f"{grid}-{modes.index(m)}-{k}"
                args = ["replay", data, *GRID, *extra, *opts,
                        *(["--", *beam_opts] if beam_opts else [])]
                # a run other tenants disturbed is run again (at most --tries times; the
                # least disturbed counts)
                best: dict[str, Any] | None = None
                for _ in range(a.tries):
                    waited = wait_idle(a.idle_wait)
                    started = _started(pool_log)
                    res = run_cli(args, out, MODE_ENV.get(m))
                    if res["rc"] != 0:
                        raise RuntimeError(f"{grid} / {m}: exit {res['rc']}: "
                                           f"{res['stderr'][-3000:]}")
                    res["sdk_workers"] = _started(pool_log) - started
                    res["waited"] = waited
                    if best is None or res["cpu_wait_s"] < best["cpu_wait_s"]:
                        best = res
                    if not disturbed(res):
                        break
                    log(f"{grid} {m}: others used {res['others_cpu_s']:.1f} CPU s in "
                        f"{res['wall_s']:.1f} s, the run waited {res['cpu_wait_s']:.1f} s "
                        "for a CPU: again")
                assert best is not None
                res, waited = best, best["waited"]
                wall = res["wall_s"]
                cell: dict[str, Any] = {"wall_s": wall, "learning_s": learning_seconds(out),
                                        "own_cpu_s": res["own_cpu_s"],
                                        "critical_cpu_s": res["critical_cpu_s"],
                                        "cpu_wait_s": res["cpu_wait_s"],
                                        "disturbed": disturbed(res),
                                        "others_cpu_s": res["others_cpu_s"],
                                        "idle_wait_s": waited}
                if m == PORTABLE:
                    cell["sdk_workers"] = res["sdk_workers"]
                if m == BASE and ref is None:
                    ref = out
                runs[m].append((cell, out))
                log(f"{grid} round {k + 1} {m}: {wall:.2f} s (others' CPU "
                    f"{res['others_cpu_s']:.2f} s, waited {waited:.0f} s for idle)")
        assert ref is not None
        rows = []
        base_median = statistics.median(c["wall_s"] for c, _ in runs[BASE])
        for m in modes:
            walls = [c["wall_s"] for c, _ in runs[m]]
            med = statistics.median(walls)
            row: dict[str, Any] = {
                "mode": m, "options": " ".join([*(f"{k}={v}" for k, v in
                                                  MODE_ENV.get(m, {}).items()),
                                                *MODES[m][0], *(["--", *MODES[m][1]]
                                                                if MODES[m][1] else [])]),
                "walls_s": walls, "median_s": med, "ratio": med / base_median,
                "learning_s": statistics.median(c["learning_s"] for c, _ in runs[m]),
                "own_cpu_s": statistics.median(c["own_cpu_s"] for c, _ in runs[m]),
                "critical_cpu_s": statistics.median(c["critical_cpu_s"] for c, _ in runs[m]),
                "others_cpu_s": [c["others_cpu_s"] for c, _ in runs[m]],
                "cpu_wait_s": [c["cpu_wait_s"] for c, _ in runs[m]],
                "disturbed": sum(bool(c["disturbed"]) for c, _ in runs[m]),
                "identical": all(same_outputs(ref, o) for _, o in runs[m]),
            }
            if m == PORTABLE:
                row["sdk_workers"] = [c["sdk_workers"] for c, _ in runs[m]]
            rows.append(row)
        learn = next(r["learning_s"] for r in rows if r["mode"] == BASE)
        cells[grid] = {"what": what, "command": " ".join(["kernelstream", "replay", A9A, *GRID,
                                                           *extra]),
                       "rows": rows, "base_median_s": base_median,
                       # the bound when only the learning splits in two and the rest stays
                       "amdahl_bound": (base_median - learn / 2) / base_median}
    return cells


def serial_floor(a: Any) -> dict[str, Any]:
    """The parts of a run that two workers cannot split, each measured in fresh processes
    (``--rounds`` alternating rounds, medians of their CPU seconds): Python's start,
    importing the command, importing Beam and the replay on top, and reading a9a once the
    modules are imported (the seconds of the read itself, timed inside)."""
    data = str(Path(a.data_dir) / A9A)
    got: dict[str, list[float]] = {k: [] for k in FLOOR_PARTS}
    for _ in range(a.rounds):
        for k, argv in FLOOR_PARTS.items():
            wait_idle(a.idle_wait)
            proc = subprocess.Popen([sys.executable, *argv, data], env=_env(),
                                    cwd=_common.REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            assert proc.stdout is not None
            out = proc.stdout.read()
            # CPU seconds of the process (its own rusage): what it costs on an idle core,
            # whatever the other tenants do meanwhile
            _, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode:
                raise RuntimeError(f"serial floor {k}: exit {proc.returncode}")
            got[k].append(float(out.split()[-1]) if k == "read" else ru.ru_utime + ru.ru_stime)
    med = {k: statistics.median(v) for k, v in got.items()}
    log("serial floor: " + ", ".join(f"{k} {v:.3f} s" for k, v in med.items()))
    return {"runs_s": got, "python_s": med["python"], "cli_s": med["cli"] - med["python"],
            "beam_s": med["beam"] - med["cli"], "read_s": med["read"]}


def floor_bound(floor: dict[str, Any], base_s: float) -> float:
    """The best ``--workers 2`` / 1-worker ratio a grid whose 1-worker run takes ``base_s``
    (on idle cores: its critical path) can reach when everything but the serial floor
    splits in two: the command's Python start and imports come before any worker can
    learn, and a process learning streams needs Beam imported whether it imports it or
    inherits it."""
    serial = floor["python_s"] + floor["cli_s"] + floor["beam_s"]
    return (serial + (base_s - serial) / 2) / base_s


def render(js: dict[str, Any]) -> list[str]:
    lines = ["# A two-configuration grid on 2 cores", "",
             _common.generated_line("grid.py", js["generated"],
                                    f"wall time {js['wall_min']:.1f} min"), "",
             f"* Machine: {js['machine']}; load average at the start {js['load']} (1/5/15 "
             "min): a shared machine, hence alternating rounds and medians.",
             f"* {js['rounds']} rounds; in round k the ways run in turn starting with "
             "the k-th. Each run is a fresh `kernelstream replay ... -q` process, timed from "
             "start to exit (Python start, imports, reading a9a, learning, Parquet outputs, "
             "summary.json).",
             "* *identical*: every run's predictions and dead letters equal the first 1-worker "
             "run's row for row, its metrics apart from the run's own columns (timings, "
             "observed disorder), its summary.json apart from timings, `argv` and `runner`.",
             f"* Before each run the script waited for a second of ≥ 90 % idle CPUs (at "
             f"most {js.get('idle_wait', 0):.0f} s). *others' CPU*: CPU seconds other "
             "tenants used during each run (the machine's busy time minus that of the run's "
             "processes, sampled every 50 ms). *waited*: seconds the run's threads waited "
             "for a CPU while runnable. A run during which, per second, other tenants used "
             "more than 0.2 CPU seconds and its threads waited more than 0.2 s was run again "
             f"(at most {js.get('tries', 1)} times; the least delayed counts; *disturbed*: "
             "runs still so after the tries). "
             "*CPU*: the run's own CPU seconds (median), all its processes (workers, SDK "
             "workers, job service and pool included).",
             "* *learning*: seconds inside the learners, summed over the streams "
             "(summary.json). *learning-only bound*: the ratio two processes would reach "
             "if they split only the learning and paid the rest of a 1-worker run once: "
             "(1-worker wall − learning/2) / 1-worker wall. The per-block work around the "
             "learners (Beam's bundles, metrics, writing the outputs) splits too, so a "
             "ratio can fall below it; each process's own fixed cost (Python, Beam's "
             "import, reading the data, starting the runner) does not.",
             "* *critical path*: CPU seconds of the command plus those of its busiest "
             "worker process (sampled every 50 ms), median: what the run would take on two "
             "cores nobody else uses, when the workers start after the command's own work "
             "(forked workers); an upper bound for spawned ones, which start while the "
             "command works. Unlike the wall times, it hardly depends on the other tenants: "
             "*critical-path ratio* = a way's over the 1-worker run's.", ""]
    for c in js["cells"].values():
        lines += [f"## `{c['command']}` ({c['what']})", "",
                  "| way | options | median wall (s) | walls (s) | ratio to 1 worker | "
                  "learning (s) | CPU (s) | critical path (s) | critical-path ratio | "
                  "others' CPU (s) | waited (s) | disturbed | identical |",
                  "|---|---|---:|---|---:|---:|---:|---:|---:|---|---|---:|---|"]
        base_crit = next((r.get("critical_cpu_s") for r in c["rows"] if r["mode"] == BASE),
                         None)
        for r in c["rows"]:
            opts = f"`{r['options']}`" if r["options"] else "(default)"
            walls = ", ".join(f"{w:.2f}" for w in r["walls_s"])
            others = ", ".join(f"{v:.1f}" for v in r["others_cpu_s"])
            waits = ", ".join(f"{v:.1f}" for v in r["cpu_wait_s"])
            crit = r.get("critical_cpu_s")
            crit_cells = ("– | –" if crit is None or not base_crit else
                          f"{crit:.2f} | {crit / base_crit:.2f}")
            lines.append(f"| {r['mode']} | {opts} | {r['median_s']:.2f} | {walls} | "
                         f"{r['ratio']:.2f} | {r['learning_s']:.2f} | {r['own_cpu_s']:.1f} | "
                         f"{crit_cells} | {others} | {waits} | {r['disturbed']} | "
                         f"{'yes' if r['identical'] else '**no**'} |")
        sharded = next(r for r in c["rows"] if r["mode"] == SHARDED)
        portable = next((r for r in c["rows"] if r["mode"] == PORTABLE), None)
        ok = sharded["ratio"] <= TARGET and sharded["identical"]
        pool = ("" if portable is None else " SDK workers the EXTERNAL pool started per "
                f"portable job: {', '.join(map(str, portable['sdk_workers']))}.")
        crit = ("" if not base_crit or sharded.get("critical_cpu_s") is None else
                f" Critical-path ratio (idle cores): "
                f"{sharded['critical_cpu_s'] / base_crit:.2f}.")
        floor = js.get("floor")
        fb = ("" if floor is None else "; serial-floor bound "
              f"{floor_bound(floor, _base_size(c)):.2f}")
        lines += ["", f"**`--workers 2` / 1 worker: {sharded['ratio']:.2f}** (target ≤ "
                  f"{TARGET}: {_common.pass_mark(ok)}); learning-only bound for this grid "
                  f"{c['amdahl_bound']:.2f}{fb}.{crit}{pool}", ""]
    if js.get("floor") is not None:
        lines += render_floor(js)
    ways = js.get("ways", list(MODES))
    skipped = [m for m in MODES if m not in ways]
    lines += ["## Reading", ""]
    if skipped:
        lines.append(f"* Not run this time (`--ways`): {', '.join(skipped)}; see this file's "
                     "history for their last measurements.")
    if "multi_processing" in ways:
        lines.append("* `multi_processing` starts SDK worker subprocesses (each imports Beam) "
                     "and moves every block and every state read and write between them and "
                     "the runner through gRPC: it keeps both cores busy (CPU column) and "
                     "finishes about twice as late as one worker.")
    if PORTABLE in ways:
        lines.append("* `portable EXTERNAL`: Beam's local job service runs each job with "
                     "`FnApiRunner.run_via_runner_api`, which never reads "
                     "`--direct_num_workers` (only `FnApiRunner.run_pipeline` does), so a job "
                     "gets one SDK worker from the pool whatever the option says (*SDK "
                     "workers* above): one core, with every block crossing gRPC between the "
                     "service and the worker.")
    first = next(iter(js["cells"].values()))
    base = next(r for r in first["rows"] if r["mode"] == BASE)
    crit = base.get("critical_cpu_s")
    size = (f"a {base['median_s']:.2f} s run" if crit is None else
            f"a run of {crit:.2f} s on idle cores (critical path)")
    lines.append(
        "* `--workers 2` runs the same pipeline in two processes, each on its half of the "
        "streams, and merges the outputs. The command checks the data, then reads it while "
        "it imports Beam, and forks the workers: they inherit the modules and the parsed "
        "rows (shared copy-on-write, so memory holds one data set, not one per worker). "
        "What stays serial is one Python start, the imports, the parent's read of the data "
        "(partly hidden behind Beam's import) and reading back the outputs; each worker "
        "still builds and starts its own pipeline. The ratio nears 0.5 as learning "
        "dominates and stays near the learning-only bound when it does not: the first grid "
        f"above learns for {base['learning_s']:.2f} s in all, too little to halve {size} "
        "whose serial part alone is about a second.")
    floor = js.get("floor")
    if floor is not None:
        r1 = js["cells"].get("R1")
        if r1 is not None:
            bound = floor_bound(floor, _base_size(r1))
            serial = floor["python_s"] + floor["cli_s"] + floor["beam_s"]
            need = serial / (2 * TARGET - 1)  # the 1-worker run at which the floor allows 0.65
            lines.append(
                f"* The issue's grid (`-R 1`) cannot reach {TARGET} with the direct runner: "
                f"its serial floor ({serial:.2f} s: Python, the command, Beam) allows at "
                f"best {bound:.2f} even if all the rest split perfectly, and the rest does "
                "not (each worker builds and starts its pipeline, the command reads the "
                f"outputs back). {TARGET} needs a 1-worker run of at least {need:.1f} s of "
                "CPU on this machine, i.e. more learning per run: more permutations (the papers' "
                "protocol, `-R 20`, above) or a larger data set. Below that, one process "
                "(or `--runner loop`, which imports no Beam) is as fast.")
    runs = [r for c in js["cells"].values() for r in c["rows"]]
    disturbed = sum(r["disturbed"] for r in runs)
    total = sum(len(r["walls_s"]) for r in runs)
    if disturbed * 2 > total:
        busy = statistics.median(v / w for r in runs
                                 for v, w in zip(r["others_cpu_s"], r["walls_s"], strict=True))
        lines.append(
            f"* {disturbed} of {total} runs were disturbed (other tenants kept about "
            f"{busy:.1f} of the 2 CPUs busy during a run, median): the walls and their "
            "ratios measure the machine's load as much as the code; the critical-path "
            "ratio is the figure to read.")
    return lines


def _base_size(cell: dict[str, Any]) -> float:
    """A grid's 1-worker run on idle cores: its critical path (CPU), else its median wall."""
    base = next(r for r in cell["rows"] if r["mode"] == BASE)
    return float(base.get("critical_cpu_s") or cell["base_median_s"])


def render_floor(js: dict[str, Any]) -> list[str]:
    f = js["floor"]
    return ["## The serial floor", "",
            "What a `--workers 2` run cannot split, each part measured in fresh processes "
            f"({js['rounds']} alternating rounds, medians of their CPU seconds, so other "
            "tenants hardly matter): a bare `python -c pass`; importing "
            "the command (`kernelstream.pipelines.cli`) on top; importing Beam and the replay "
            "pipeline (`pipelines.replay.beam_replay`) on top of that; and reading a9a "
            "(`engine.replay.sources.load_rows`, timed inside a process that has the modules).", "",
            "| Python start (s) | the command's imports (s) | Beam's import (s) | reading a9a "
            "(s) | serial floor: start + imports (s) |",
            "|---:|---:|---:|---:|---:|",
            f"| {f['python_s']:.2f} | {f['cli_s']:.2f} | {f['beam_s']:.2f} | "
            f"{f['read_s']:.2f} | {f['python_s'] + f['cli_s'] + f['beam_s']:.2f} |", "",
            "*Serial-floor bound* of a grid: (floor + (T − floor) / 2) / T, with T the 1-worker "
            "run's critical path (its CPU seconds: its time on idle cores), the ratio two "
            "workers would reach if everything after the imports split in two. Reading the "
            "data is not in the floor: the command reads it while Beam imports, and the "
            "workers share the rows.", ""]


def main() -> None:
    ap = _common.script_parser(__doc__)
    _common.add_output_args(ap, STEM, render_flag="--render")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the ways (default 3)")
    ap.add_argument("--tries", type=int, default=3,
                    help="runs of a cell while other tenants disturb it (default 3)")
    ap.add_argument("--idle-wait", type=float, default=120.0,
                    help="before each run, wait at most this long for an idle second "
                    "(default 120)")
    _common.add_list_arg(ap, "--grids", GRIDS)
    _common.add_list_arg(ap, "--ways", MODES)
    a = ap.parse_args()
    a.grids = _common.parse_list(ap, a.grids, GRIDS, "grid")
    a.ways = _common.parse_list(ap, a.ways, MODES, "way")
    for need in (BASE, SHARDED):
        if need not in a.ways:
            ap.error(f"--ways must include {need!r}")
    if a.render:
        js = _common.read_json(a.out_dir / f"{STEM}.json")
        (a.out_dir / f"{STEM}.md").write_text("\n".join(render(js)) + "\n")
        return
    # stopped (SIGTERM): leave through the context managers, which stop the job service and pool
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.time()
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    # as an installed package: no fresh process compiles the sources again
    compileall.compile_dir(str(_common.REPO / "kernelstream"), quiet=1)
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        tmp = Path(d)
        jport, pport = free_port("localhost"), free_port("localhost")
        pool_log = tmp / "pool.log"
        if PORTABLE in a.ways:
            stack.enter_context(_listening(
                [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                 "--port", str(jport)], jport, tmp / "job.log"))
            stack.enter_context(_listening(
                [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                 "--service_port", str(pport)], pport, pool_log))
        cells = measure(a, tmp, f"localhost:{jport}", f"localhost:{pport}", pool_log)
        floor = serial_floor(a)
    js = {"floor": floor, "generated": _common.now_utc(), "wall_min": (time.time() - t0) / 60,
          "machine": _common.machine_info(), "load": load, "rounds": a.rounds,
          "idle_wait": a.idle_wait, "tries": a.tries, "ways": a.ways, "cells": cells}
    _common.write_report(a.out_dir, STEM, render(js), js)
    log(f"wrote {a.out_dir / (STEM + '.md')}")


if __name__ == "__main__":
    main()
