"""The Beam replay pipeline against the plain loop: throughput on a9a, memory and per-key state
size on covtype.binary.

1. **Throughput (a9a, BOGD B = 200).** ``replay.run_replay(..., runner="direct")`` (Beam's
   FnApiRunner in-process, the default runner of ``kernelstream replay``) and
   ``runner="loop"`` (the plain reference loop writing the same Parquet outputs) on the same
   stream (seed 0, permutation 0), in alternating order after one warm-up pair, ``--pairs``
   times; medians, because the machine is shared and noisy. Reported:

   * *end-to-end* examples/s = examples / wall time of the whole ``run_replay`` call (reading
     and parsing the file, building the pipeline and starting the runner, learning, metrics,
     writing the Parquet outputs; the one-time import of Python modules is excluded). The
     target applies to this: median direct / median loop ≥ 0.9 (issue 14; PASS/FAIL).
   * *learner-time* examples/s = examples / the learner seconds of the metrics output
     (time inside the learner's ``predict_learn_many`` only).

   Both runs' predictions are compared (they must be the same stream and the same scores).
   Then the same comparison as the replay grows (``--grow``, default R = 4 and 16
   permutations in one run, ``--grow-pairs`` alternating pairs each): what ``direct`` adds
   is a fixed cost per run, so the ratio tends to 1 as the work grows.
2. **Memory (covtype.binary, 581,012 rows, BOGD B = 200, ``--covtype-scale``).** The replay
   on ``--runner direct`` runs in a child process (clean measurement): peak resident memory
   (``getrusage`` maxrss) and the resident set sampled every 50 ms (its maximum per tenth
   of the run). For comparison, child processes that only load the data set
   (``engine.replay.sources.load_rows``, what the permuted source does on its worker) and that run
   the loop runner.
3. **Per-key state size.** The same stream replayed in a plain loop with the pipeline's own
   per-block code (``engine.replay.sources.stream_blocks`` + ``engine.replay.core.ReplayLearner``),
   measuring at checkpoints the bytes of ``state_to_bytes(learner.get_state())`` (the learner state)
   and of the whole per-key ``ReplayState`` as ``encode_replay_state`` encodes it (what the runner
   stores per key). The loop's final mistakes and #SV must equal the pipeline's. PASS when the sizes
   stop growing once the budget is full (at most 1 % above the size at the first checkpoint with a
   full budget) and #SV never exceeds the budget.

4. **The loop runner's fixed cost (a 50k-row file).** ``kernelstream replay FILE -l bogd -p
   budget=200 --runner loop -q`` as a user runs it (a fresh Python process each time: start,
   imports, the data check, reading, learning, Parquet outputs, summary.json), ``--cli-runs``
   times, alternating with a bare ``python -c pass``; FILE = the first 50,000 lines of
   covtype.binary (54 features). Wall and peak RSS (``RUSAGE_CHILDREN`` of a wrapper), the
   learning seconds of summary.json; targets (issue 14): wall − learning ≤ 1.0 s and peak
   RSS ≤ 120 MB + the data set (rows × features × 8 bytes).

The package's bytecode is compiled first (``compileall``), as an installed package has it:
with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every fresh process would
compile kernelstream's sources again (~0.2 s).

Writes ``benchmarks/results/pipeline.md`` (generated; never edit by hand). Example::

    nice -n 10 .venv/bin/python benchmarks/pipeline.py            # ~3 min on 2 busy cores
    .venv/bin/python benchmarks/pipeline.py --pairs 3 --skip-covtype --skip-loop
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, now_utc, script_parser
from _pipeline_report import A9A, COVTYPE, LOOP_FIXED_S, LOOP_RSS_MB, TARGET, render

LOOP_ROWS = 50_000  # the loop runner's fixed-cost file: the first rows of covtype.binary
CHECKPOINTS = (1_000, 10_000, 100_000, 300_000)  # plus the end of the stream
MB = 1 << 20


def _configs(budget: int) -> list[Any]:
    from kernelstream.engine.learner_config import LearnerConfig

    # gamma given: the recorded runs learnt with BOGD's default, which run_replay would
    # otherwise replace by the data's width
    return [LearnerConfig("bogd", "bogd", {"budget": budget, "gamma": 0.5})]


# -- 1. throughput -------------------------------------------------------------------------------


def one_run(path: Path, runner: str, budget: int, out: Path, seed: int,
            permutations: int = 1) -> dict[str, Any]:
    from kernelstream.pipelines.replay.replay import run_replay

    cpu0, t0 = time.process_time(), time.perf_counter()
    res = run_replay(str(path), _configs(budget), out, runner=runner, seed=seed,
                     permutations=permutations)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    s = res.summaries[0]
    return {"runner": runner, "wall": wall, "cpu": cpu,
            "examples": int(s["examples"]) * permutations,
            "learner_seconds": float(s["seconds"]), "mistakes": s["mistakes"],
            "n_sv": s["n_support_vectors"]}


def same_predictions(a: Path, b: Path) -> bool:
    from kernelstream.engine.replay.outputs import PREDICTIONS_SCHEMA, read_table

    keys = [("key", "ascending"), ("position", "ascending")]
    ta = read_table(a / "predictions", PREDICTIONS_SCHEMA).sort_by(keys)
    tb = read_table(b / "predictions", PREDICTIONS_SCHEMA).sort_by(keys)
    return ta.num_rows > 0 and ta.equals(tb)


def beam_floor() -> tuple[float, float]:
    """Seconds of the smallest pipeline of the replay's shape on the FnApiRunner (as
    ``run_beam`` runs it): Impulse → a DoFn emitting 33 keyed elements (a9a's blocks) → a
    stateful DoFn with a value state and an end-of-window timer → a DoFn that drops them;
    and of its part before the first bundle can start: making the ``Pipeline`` and applying
    the transforms (``run`` then translates, fuses and runs the bundles)."""
    import apache_beam as beam
    from apache_beam.coders import PickleCoder
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer

    from kernelstream.pipelines.replay.beam_replay import prompt_state_sampler

    state = ReadModifyWriteStateSpec("s", PickleCoder())
    timer = TimerSpec("end", beam.TimeDomain.WATERMARK)
    state_param, timer_param = beam.DoFn.StateParam(state), beam.DoFn.TimerParam(timer)

    class Emit(beam.DoFn):
        def process(self, _: Any) -> Any:
            for i in range(33):
                yield "k", i

    class Stateful(beam.DoFn):
        def process(self, kv: Any, s: Any = state_param, t: Any = timer_param,
                    w: Any = beam.DoFn.WindowParam) -> Any:
            s.write((s.read() or 0) + 1)
            t.set(w.max_timestamp())
            yield kv[1]

        @on_timer(timer)
        def end(self, s: Any = state_param) -> Any:
            yield s.read()

    class Drop(beam.DoFn):
        def process(self, x: Any) -> None:
            pass

    t0 = time.perf_counter()
    p = beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions([]))
    _ = (p | beam.Impulse() | "Emit" >> beam.ParDo(Emit())
         | "Stateful" >> beam.ParDo(Stateful()) | "Drop" >> beam.ParDo(Drop()))
    built = time.perf_counter() - t0
    with prompt_state_sampler():
        p.run().wait_until_finish()
    return time.perf_counter() - t0, built


def read_seconds(path: Path) -> float:
    """Seconds of reading and parsing the file as both runners do (``engine.replay.sources.
    load_rows``), in this process (modules imported)."""
    from kernelstream.data.options import ReadOptions
    from kernelstream.engine.replay.sources import load_rows

    t0 = time.perf_counter()
    load_rows(ReadOptions(path=str(path)))
    return time.perf_counter() - t0


def throughput(path: Path, budget: int, pairs: int, seed: int, tmp: Path) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    floors: list[float] = []
    builds: list[float] = []
    reads: list[float] = []
    for i in range(pairs + 1):  # pair 0 warms up (lazy imports, caches) and is not counted
        order = ("direct", "loop") if i % 2 == 0 else ("loop", "direct")
        floor, built = beam_floor()
        read = read_seconds(path)
        if i:
            floors.append(floor)
            builds.append(built)
            reads.append(read)
        for runner in order:
            r = one_run(path, runner, budget, tmp / runner, seed)
            r["pair"] = i
            print(f"  a9a pair {i}{' (warm-up)' if i == 0 else ''} {runner:6s}: "
                  f"{r['wall']:6.2f} s wall, {r['examples'] / r['wall']:8,.0f} ex/s end to end, "
                  f"{r['examples'] / r['learner_seconds']:8,.0f} ex/s learner time",
                  file=sys.stderr, flush=True)
            runs.append(r)
    counted = [r for r in runs if r["pair"] > 0]

    def med(runner: str, f: str) -> float:
        return statistics.median(r[f] for r in counted if r["runner"] == runner)

    stats: dict[str, dict[str, float]] = {}
    for runner in ("direct", "loop"):
        n = next(r["examples"] for r in counted if r["runner"] == runner)
        stats[runner] = {
            "examples": n,
            "wall": med(runner, "wall"),
            "cpu": med(runner, "cpu"),
            "e2e": statistics.median(n / r["wall"] for r in counted if r["runner"] == runner),
            "cpu_eps": statistics.median(n / r["cpu"] for r in counted if r["runner"] == runner),
            "learner": statistics.median(n / r["learner_seconds"] for r in counted
                                         if r["runner"] == runner),
        }
    pair_ratios = []
    for i in range(1, pairs + 1):
        d = next(r for r in counted if r["pair"] == i and r["runner"] == "direct")
        lo = next(r for r in counted if r["pair"] == i and r["runner"] == "loop")
        pair_ratios.append(lo["wall"] / d["wall"])
    agree = {(r["mistakes"], r["n_sv"]) for r in runs}
    floor = statistics.median(floors)
    build, read = statistics.median(builds), statistics.median(reads)
    loop = stats["loop"]["wall"]
    return {
        "runs": runs,
        "floor": floor,
        "floors": floors,
        "floor_build": build,
        "read": read,
        # direct takes at least loop + floor: the best ratio a pipeline of this shape reaches
        # when nothing overlaps
        "bound": loop / (loop + floor),
        # ... and when the file's read (which run_beam starts before building the pipeline)
        # hid entirely behind the floor's construction, as on a free second core without
        # the GIL
        "bound_overlap": loop / (loop + floor - min(read, build)),
        "stats": stats,
        "ratio_e2e": stats["direct"]["e2e"] / stats["loop"]["e2e"],
        "ratio_learner": stats["direct"]["learner"] / stats["loop"]["learner"],
        "ratio_cpu": stats["direct"]["cpu_eps"] / stats["loop"]["cpu_eps"],
        "pair_ratios": pair_ratios,
        "identical": len(agree) == 1 and same_predictions(tmp / "direct", tmp / "loop"),
    }


def growth(path: Path, budget: int, perms: list[int], pairs: int, seed: int,
           tmp: Path) -> list[dict[str, Any]]:
    """direct / loop as the replay grows: the a9a replay with R permutations (R streams of
    32,561 examples, one key each, learnt one after another on one worker), ``pairs``
    alternating pairs per R; medians. Beam's fixed cost is paid once per run, so the ratio
    shows what is left of it as the work grows."""
    rows = []
    for R in perms:
        walls: dict[str, list[float]] = {"direct": [], "loop": []}
        ratios: list[float] = []
        n = 0
        for i in range(pairs):
            pair = {}
            for runner in (("direct", "loop") if i % 2 == 0 else ("loop", "direct")):
                r = one_run(path, runner, budget, tmp / f"grow-{runner}", seed, R)
                walls[runner].append(r["wall"])
                pair[runner], n = r["wall"], r["examples"]
                print(f"  a9a R={R} pair {i + 1} {runner:6s}: {r['wall']:6.2f} s wall",
                      file=sys.stderr, flush=True)
            ratios.append(pair["loop"] / pair["direct"])
        med = {k: statistics.median(v) for k, v in walls.items()}
        rows.append({"R": R, "examples": n, "direct": med["direct"], "loop": med["loop"],
                     "ratio": med["loop"] / med["direct"], "pair_ratios": ratios,
                     "identical": same_predictions(tmp / "grow-direct", tmp / "grow-loop")})
    return rows


# -- 2. memory (child processes) -----------------------------------------------------------------


class RssSampler:
    """The resident set size of this process every ``dt`` seconds, in a daemon thread."""

    def __init__(self, dt: float = 0.05) -> None:
        self.dt = dt
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def rss() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self._t0, self.rss()))
            self._stop.wait(self.dt)

    def __enter__(self) -> RssSampler:
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def deciles(self) -> list[float]:
        """The largest sample in each tenth of the sampled time."""
        if not self.samples:
            return []
        end = self.samples[-1][0] or 1.0
        out = [0.0] * 10
        for t, v in self.samples:
            k = min(9, int(10 * t / end))
            out[k] = max(out[k], v)
        return out


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in this (fresh) process; the result is printed as JSON."""
    from kernelstream.data.options import ReadOptions
    from kernelstream.engine.replay.sources import load_rows

    path = str(args.data_dir / COVTYPE)
    base = RssSampler.rss()  # after the imports above (_common: numpy, kernelstream.learners)
    out: dict[str, Any] = {"kind": args.child}
    if args.child in ("direct", "loop"):
        from kernelstream.pipelines.replay.replay import run_replay

        if args.child == "direct":
            import kernelstream.pipelines.replay.beam_replay  # noqa: F401  (Beam, counted in base)
        base = RssSampler.rss()
        with RssSampler() as s:
            t0 = time.perf_counter()
            res = run_replay(path, _configs(args.budget), Path(args.out), runner=args.child,
                             seed=args.seed, scale=args.covtype_scale)
            wall = time.perf_counter() - t0
        summ = res.summaries[0]
        out.update(wall=wall, examples=summ["examples"], learner_seconds=summ["seconds"],
                   mistakes=summ["mistakes"], mistake_rate=summ["mistake_rate"],
                   n_sv=summ["n_support_vectors"], n_features=summ["n_features"],
                   deciles=s.deciles())
    elif args.child == "load":
        with RssSampler() as s:
            t0 = time.perf_counter()
            ds = load_rows(ReadOptions(path, scale=args.covtype_scale))
            wall = time.perf_counter() - t0
        out.update(wall=wall, examples=int(ds.y.shape[0]), data_mb=ds.X.nbytes / MB,
                   deciles=s.deciles())
    else:
        out.update(state_sizes(path, args))
    out.update(base_rss=base, peak_rss=_maxrss_mb(),
               children_rss=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    return out


def state_sizes(path: str, args: argparse.Namespace) -> dict[str, Any]:
    """Replay the pipeline's stream (same blocks, same per-block code) and measure the per-key
    state at the first block end at or after each checkpoint."""
    from kernelstream.engine.replay.core import ReplayLearner, ReplayState, encode_replay_state
    from kernelstream.engine.replay.sources import load_rows, stream_blocks
    from kernelstream.learners.base import state_to_bytes
    from kernelstream.pipelines.replay.replay import make_run

    run = make_run(path, _configs(args.budget), args.out, seed=args.seed,
                   scale=args.covtype_scale)
    ds = load_rows(run.data.read)
    n = int(ds.y.shape[0])
    core = ReplayLearner({c.label: c for c in run.learners.configs}, run.protocol.seed,
                         run.outputs.metrics_window, run.data.read.path)
    st = ReplayState()
    todo = [c for c in CHECKPOINTS if c < n] + [n]
    rows, mistakes = [], 0
    for b in stream_blocks(ds, run.spec):
        res = core.learn(b.key, st, b)
        mistakes += int((res.predictions.mistake == 1).sum())
        if todo and b.end >= todo[0]:
            assert st.learner is not None
            while todo and b.end >= todo[0]:
                todo.pop(0)
            rows.append({"position": b.end, "n_sv": int(st.learner.n_support_vectors),
                         "learner_bytes": len(state_to_bytes(st.learner.get_state())),
                         "stream_state_bytes": len(encode_replay_state(st))})
    assert st.learner is not None
    return {"checkpoints": rows, "mistakes": mistakes, "n_sv": int(st.learner.n_support_vectors),
            "n_features": int(st.learner.dim), "examples": n}


def run_child(kind: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind,
           "--data-dir", str(args.data_dir), "--budget", str(args.budget),
           "--seed", str(args.seed), "--covtype-scale", args.covtype_scale,
           "--out", str(tmp / f"covtype-{kind}")]
    print(f"  covtype: {kind} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"child {kind} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def covtype(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    res = {k: run_child(k, args, tmp) for k in ("load", "direct", "loop", "state")}
    st = res["state"]
    cps = st["checkpoints"]
    full = [c for c in cps if c["n_sv"] >= args.budget]
    bounded = bool(full) and all(c["n_sv"] <= args.budget for c in cps)
    for f in ("learner_bytes", "stream_state_bytes"):
        if full:
            ref = full[0][f]
            bounded = bounded and max(c[f] for c in full) <= 1.01 * ref
    res["bounded"] = bounded
    res["same_stream"] = (st["mistakes"], st["n_sv"]) == (res["direct"]["mistakes"],
                                                          res["direct"]["n_sv"])
    return res


# -- 4. the loop runner's fixed cost (fresh CLI processes) ----------------------------------------


_WRAPPER = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
wall = time.perf_counter() - t0
print(json.dumps({"rc": rc, "wall": wall,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def _timed(cmd: list[str]) -> dict[str, Any]:
    """Wall time and peak RSS of ``cmd`` (a wrapper process waits for it)."""
    res = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], capture_output=True,
                         text=True, check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if out["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out['rc']}):\n{res.stderr[-4000:]}")
    return out


def loop_command(path: Path, out: Path, budget: int, seed: int) -> list[str]:
    """The loop runner's replay of ``path`` into ``out``, run again and again: ``--overwrite``
    (a replay refuses a folder that holds an earlier run)."""
    return [sys.executable, "-m", "kernelstream.pipelines.cli", "replay", str(path),
            "-l", "bogd", "-p", f"budget={budget}", "--seed", str(seed),
            "--runner", "loop", "-q", "--out", str(out), "--overwrite"]


def loop_fixed_cost(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    path = tmp / "covtype-50k.libsvm"
    with open(args.data_dir / COVTYPE, "rb") as src, open(path, "wb") as dst:
        for i, line in enumerate(src):
            if i >= LOOP_ROWS:
                break
            dst.write(line)
    out = tmp / "loop-50k"
    cmd = loop_command(path, out, args.budget, args.seed)
    runs: list[dict[str, Any]] = []
    bare: list[float] = []
    for i in range(args.cli_runs + 1):  # run 0 warms the page cache and is not counted
        for what in (("cli", "bare") if i % 2 == 0 else ("bare", "cli")):
            if what == "bare":
                w = _timed([sys.executable, "-c", "pass"])["wall"]
                if i:
                    bare.append(w)
                continue
            r = _timed(cmd)
            summ = json.loads((out / "summary.json").read_text())
            r.update(learning=float(summ["seconds"]), examples=int(summ["examples"]),
                     n_features=int(summ["n_features"]))
            print(f"  loop 50k run {i}: wall {r['wall']:.2f} s, learning "
                  f"{r['learning']:.2f} s, peak RSS {r['maxrss_kb'] / 1024:.0f} MB",
                  file=sys.stderr, flush=True)
            if i:
                runs.append(r)
    med = statistics.median
    data_mb = runs[0]["examples"] * runs[0]["n_features"] * 8 / MB
    fixed = [r["wall"] - r["learning"] for r in runs]
    peak = med(r["maxrss_kb"] / 1024 for r in runs)
    return {"command": " ".join(["kernelstream", *cmd[3:4], "covtype-50k.libsvm",
                                 *cmd[5:-2]]),
            "runs": runs, "bare": bare, "wall": med(r["wall"] for r in runs),
            "learning": med(r["learning"] for r in runs), "fixed": med(fixed),
            "fixed_all": fixed, "peak_mb": peak, "data_mb": data_mb,
            "examples": runs[0]["examples"], "n_features": runs[0]["n_features"],
            "ok_fixed": med(fixed) <= LOOP_FIXED_S, "ok_rss": peak - data_mb <= LOOP_RSS_MB}


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, epilog=False)
    ap.add_argument("--pairs", type=int, default=5,
                    help="counted pairs of a9a runs (direct, loop), after one warm-up pair")
    ap.add_argument("--budget", type=int, default=200, help="BOGD budget B (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--covtype-scale", choices=("none", "01", "pm1"), default="01",
                    help="feature scaling of the covtype replay (default 01: the raw "
                    "features are integers up to thousands)")
    ap.add_argument("--cli-runs", type=int, default=5,
                    help="counted command-line runs of the loop runner on 50k rows")
    ap.add_argument("--grow", default="4,16",
                    help="permutation counts R of the a9a growth comparison (comma-separated; "
                    "'' skips it)")
    ap.add_argument("--grow-pairs", type=int, default=3,
                    help="alternating pairs of runs per R in the growth comparison")
    ap.add_argument("--skip-covtype", action="store_true", help="skip the covtype memory "
                    "and state measurements")
    ap.add_argument("--skip-loop", action="store_true",
                    help="skip the loop runner's fixed cost on 50k rows")
    ap.add_argument("--skip-a9a", action="store_true", help="only the covtype measurements")
    ap.add_argument("--results", type=Path, default=RESULTS / "pipeline.md",
                    help="markdown output (default benchmarks/results/pipeline.md)")
    ap.add_argument("--child", choices=("load", "direct", "loop", "state"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    started, t0, load = now_utc(), time.perf_counter(), os.getloadavg()
    import kernelstream

    # as an installed package: no fresh process compiles the sources again
    compileall.compile_dir(str(Path(kernelstream.__file__).parent), quiet=1)
    tp = cov = lp = grow = None
    with tempfile.TemporaryDirectory(prefix="ks-pipeline-bench-") as d:
        tmp = Path(d)
        if not args.skip_a9a:
            tp = throughput(args.data_dir / A9A, args.budget, args.pairs, args.seed, tmp)
            perms = [int(x) for x in args.grow.split(",") if x.strip()]
            if perms:
                grow = growth(args.data_dir / A9A, args.budget, perms, args.grow_pairs,
                              args.seed, tmp)
        if not args.skip_loop:
            lp = loop_fixed_cost(args, tmp)
        if not args.skip_covtype:
            cov = covtype(args, tmp)
    md = render(args, tp, cov, started, load, (time.perf_counter() - t0) / 60, lp, grow)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(md + "\n")
    print(md)
    print(f"\nwritten: {args.results}", file=sys.stderr)
    ok = (tp is None or (tp["ratio_e2e"] >= TARGET and tp["identical"])) and (
        cov is None or (cov["bounded"] and cov["same_stream"])) and (
        lp is None or (lp["ok_fixed"] and lp["ok_rss"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
