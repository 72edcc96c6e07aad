"""The report of benchmarks/pipeline.py (its markdown, from the measurements it made), with the
data sets and the targets (issue 14) that it states."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from _common import generated_line, machine_info

A9A = "a9a"
COVTYPE = "covtype.binary.libsvm"
TARGET = 0.9  # direct / loop end-to-end examples/s on a9a (issue 14)
LOOP_FIXED_S = 1.0  # issue 14: wall - learning of `replay --runner loop` on it
LOOP_RSS_MB = 120.0  # issue 14: peak RSS above the data set


def _pf(ok: bool) -> str:
    return "PASS" if ok else "FAIL"



def render_growth(rows: list[dict[str, Any]], pairs: int) -> list[str]:
    L = ["## direct / loop as the replay grows (a9a, R permutations)", ""]
    L.append("The same comparison on the a9a replay with R permutations: R streams of 32,561 "
             f"examples in one run (the grid of a reproduction table has R × configurations "
             f"streams). {pairs} alternating pairs per R, medians. Beam's fixed cost is paid "
             "once per run; the per-block work is the loop's, so the ratio tends to 1 as "
             "the run grows.")
    L.append("")
    L.append("| R | examples | direct wall (s) | loop wall (s) | direct − loop (s) | "
             "direct / loop (ex/s) | per-pair ratios | same predictions |")
    L.append("|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        L.append(f"| {r['R']} | {r['examples']:,} | {r['direct']:.2f} | {r['loop']:.2f} | "
                 f"{r['direct'] - r['loop']:.3f} | {r['ratio']:.2f} | "
                 + ", ".join(f"{x:.2f}" for x in r["pair_ratios"])
                 + f" | {'yes' if r['identical'] else 'NO'} |")
    L.append("")
    first = next((r for r in rows if r["ratio"] >= TARGET), None)
    L.append(f"direct / loop ≥ {TARGET}: "
             + (f"from R = {first['R']} ({first['examples']:,} examples) in this run."
                if first is not None else "at none of these sizes in this run."))
    L.append("")
    return L


def render_loop(lp: dict[str, Any]) -> list[str]:
    L = ["## The loop runner's fixed cost: a 50k-row file from the command line", ""]
    L.append(f"`{lp['command']}`: the first {lp['examples']:,} rows of covtype.binary "
             f"({lp['n_features']} features, dense), {len(lp['runs'])} fresh processes "
             "alternating with a bare `python -c pass`, after one warm-up pair; medians. "
             "*fixed* = wall − learning (summary.json `seconds`): Python's start, imports, the "
             "up-front data check, reading the file, the per-block work around the learner, "
             "the Parquet outputs and summary.json.")
    L.append("")
    L.append("| wall (s) | learning (s) | fixed (s) | `python -c pass` (s) | peak RSS (MB) | "
             "data set (MB) | peak RSS − data set (MB) |")
    L.append("|---:|---:|---:|---:|---:|---:|---:|")
    L.append(f"| {lp['wall']:.2f} | {lp['learning']:.2f} | {lp['fixed']:.2f} | "
             f"{statistics.median(lp['bare']):.2f} | {lp['peak_mb']:.0f} | "
             f"{lp['data_mb']:.1f} | {lp['peak_mb'] - lp['data_mb']:.0f} |")
    L.append("")
    L.append("Fixed seconds by run: " + ", ".join(f"{x:.2f}" for x in lp["fixed_all"]) + ".")
    L.append("")
    L.append(f"**Fixed cost {lp['fixed']:.2f} s** (target ≤ {LOOP_FIXED_S} s: "
             f"**{_pf(lp['ok_fixed'])}**); **peak RSS {lp['peak_mb']:.0f} MB = data set "
             f"+ {lp['peak_mb'] - lp['data_mb']:.0f} MB** (target ≤ data set + "
             f"{LOOP_RSS_MB:.0f} MB: **{_pf(lp['ok_rss'])}**).")
    L.append("")
    return L


def render(args: argparse.Namespace, tp: dict[str, Any] | None, cov: dict[str, Any] | None,
           started: str, load: tuple[float, float, float], minutes: float,
           lp: dict[str, Any] | None = None, grow: list[dict[str, Any]] | None = None) -> str:
    L: list[str] = ["# Beam replay pipeline: throughput and memory", ""]
    L.append(generated_line("pipeline.py", started, f"wall time {minutes:.1f} min"))
    L.append("")
    L.append(f"* Machine: {machine_info()}; load average at the start "
             f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min): a shared machine, "
             "hence alternating runs and medians.")
    L.append(f"* Learner: BOGD, budget B = {args.budget}, other parameters at their defaults "
             f"(gamma 0.5, eta 0.1, variant sol); seed {args.seed}, permutation 0; the CLI's "
             "block size (1024 rows) and metrics window (1000).")
    L.append("* Both runners through `kernelstream.pipelines.replay.replay.run_replay(..., "
             "runner=...)`, the function `kernelstream replay --runner direct|loop` calls; "
             "both write predictions/, metrics/ and dead_letters/ as Parquet.")
    L.append("")
    if tp is not None:
        s = tp["stats"]
        L += ["## Throughput on a9a: `--runner direct` vs `--runner loop`", ""]
        L.append(f"{args.data_dir / A9A} ({s['direct']['examples']:,} rows, 123 features). "
                 f"{args.pairs} pairs of runs in alternating order after one warm-up pair "
                 "(not counted); medians over the pairs.")
        L.append("")
        L.append("* **end to end** = examples / wall time of the whole `run_replay` call: "
                 "reading and parsing the file, building the pipeline and starting the "
                 "FnApiRunner (direct), learning, metrics, writing the Parquet outputs. The "
                 "one-time import of Python modules (Beam: ~1-2 s) is not included.")
        L.append("* **learner time** = examples / learner seconds (metrics column `seconds`: "
                 "time inside the learner's `predict_learn_many` only).")
        L.append("* **CPU** = examples / CPU seconds of the process (less sensitive to the "
                 "other tenants of the machine; the FnApiRunner runs in-process).")
        L.append("")
        L.append("| runner | median wall (s) | end to end (ex/s) | CPU (ex/s) | "
                 "learner time (ex/s) |")
        L.append("|---|---:|---:|---:|---:|")
        for r in ("direct", "loop"):
            L.append(f"| {r} | {s[r]['wall']:.2f} | {s[r]['e2e']:,.0f} | "
                     f"{s[r]['cpu_eps']:,.0f} | {s[r]['learner']:,.0f} |")
        L.append("")
        walls = {r: ", ".join(f"{x['wall']:.2f}" for x in tp["runs"]
                              if x["runner"] == r and x["pair"] > 0) for r in ("direct", "loop")}
        L.append(f"Wall times (s), pairs 1..{args.pairs}: direct {walls['direct']}; "
                 f"loop {walls['loop']}.")
        L.append("")
        ok = tp["ratio_e2e"] >= TARGET
        L.append(f"**direct / loop, end-to-end examples/s (median / median): "
                 f"{tp['ratio_e2e']:.2f}** (target ≥ {TARGET}: **{_pf(ok)}**). Median of the "
                 f"per-pair ratios {statistics.median(tp['pair_ratios']):.2f} "
                 f"(range {min(tp['pair_ratios']):.2f}–{max(tp['pair_ratios']):.2f}); "
                 f"CPU-time ratio {tp['ratio_cpu']:.2f}; learner-time ratio "
                 f"{tp['ratio_learner']:.2f}.")
        L.append("")
        L.append(f"Same stream and same predictions in both runners (prediction files equal, "
                 f"same mistakes and #SV in every run): **{'yes' if tp['identical'] else 'NO'}**.")
        L.append("")
        L.append(f"Beam's floor: the smallest pipeline of the replay's shape (Impulse → 33 "
                 "keyed elements → a stateful DoFn with a value state and an end-of-window "
                 "timer → a DoFn), built and run on the FnApiRunner as `run_beam` runs it, "
                 f"once per pair: median {tp['floor']:.3f} s (runs "
                 + ", ".join(f"{x:.3f}" for x in tp["floors"]) + "). The direct runner "
                 "pays at least that on top of the loop's work, so its ratio cannot exceed "
                 f"loop / (loop + floor) = {tp['bound']:.2f} on this file; direct − loop "
                 f"here: {s['direct']['wall'] - s['loop']['wall']:.3f} s.")
        L.append("")
        if "read" in tp:
            gap = s["direct"]["wall"] - s["loop"]["wall"]
            need = s["loop"]["wall"] / TARGET - s["loop"]["wall"]
            L.append(
                "Where direct − loop goes (medians): Beam's floor "
                f"{tp['floor']:.3f} s, of which {tp['floor_build']:.3f} s making the "
                "`Pipeline` and applying its transforms before the runner starts; the rest "
                f"of the gap, {gap - tp['floor']:.3f} s, is what the replay's pipeline adds "
                "to the floor (its source, learner and sink transforms: their construction, "
                "translation and bundle set-up, block coding, per-key state, Beam metrics). "
                f"Even reading the file ({tp['read']:.3f} s here) entirely hidden behind the "
                "floor's construction would leave a bound of "
                f"{tp['bound_overlap']:.2f} (a thread reading it while Beam builds the "
                "pipeline was tried, and measured slower: parsing holds the GIL). "
                f"{TARGET} would need direct − loop ≤ "
                f"{need:.3f} s on this file: "
                + ("below Beam's own floor, so **unreachable on a9a with the FnApiRunner**; "
                   "the ratio rises with the run as the fixed cost is amortised (next "
                   "section)." if need < tp["floor"] else "within reach of the floor."))
            L.append("")
    if grow:
        L += render_growth(grow, args.grow_pairs)
    if lp is not None:
        L += render_loop(lp)
    if cov is not None:
        d, lp, ld, st = cov["direct"], cov["loop"], cov["load"], cov["state"]
        L += ["## covtype.binary on `--runner direct`: time and memory", ""]
        L.append(f"{args.data_dir / COVTYPE} ({d['examples']:,} rows, {d['n_features']} "
                 f"features, `--scale {args.covtype_scale}`), one stream; each measurement in a "
                 "fresh child process. Peak = `getrusage` maxrss of the child; the resident "
                 "set was also sampled every 50 ms.")
        L.append("")
        L.append("| child process | wall (s) | learner (s) | mistake rate (%) | #SV | "
                 "RSS after imports (MB) | peak RSS (MB) | RSS by tenth of the run (MB) |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---|")
        dec = {k: " ".join(f"{x:.0f}" for x in v["deciles"]) for k, v in
               (("load", ld), ("direct", d), ("loop", lp))}
        L.append(f"| load only (`engine.replay.sources.load_rows`) | {ld['wall']:.1f} | – | – "
                 f"| – | {ld['base_rss']:.0f} | {ld['peak_rss']:.0f} | {dec['load']} |")
        for runner, r in (("direct", d), ("loop", lp)):
            L.append(f"| replay, `--runner {runner}` | {r['wall']:.1f} | "
                     f"{r['learner_seconds']:.1f} | {r['mistake_rate']:.2f} | {r['n_sv']} | "
                     f"{r['base_rss']:.0f} | {r['peak_rss']:.0f} | {dec[runner]} |")
        L.append("")
        tail = d["deciles"][5:]
        steady = max(tail) if tail else float("nan")
        L.append(f"The dense data set is {ld['data_mb']:.0f} MB (float64). Peak RSS of the "
                 f"direct replay {d['peak_rss']:.0f} MB vs {ld['peak_rss']:.0f} MB for loading "
                 f"alone and {lp['peak_rss']:.0f} MB for the loop runner; over the second half "
                 f"of the direct run (learning) RSS stays at most {steady:.0f} MB, i.e. "
                 f"{steady - d['base_rss']:.0f} MB above the process after its imports. "
                 "Above each process's RSS after its imports (Beam's alone is ~100 MB): "
                 f"direct {d['peak_rss'] - d['base_rss']:.0f} MB, loading alone "
                 f"{ld['peak_rss'] - ld['base_rss']:.0f} MB, loop "
                 f"{lp['peak_rss'] - lp['base_rss']:.0f} MB. "
                 f"Direct / loop wall time on covtype: {d['wall'] / lp['wall']:.2f} "
                 f"(end-to-end examples/s: {lp['wall'] / d['wall']:.2f}).")
        L.append("")
        if d["peak_rss"] - d["base_rss"] <= 1.15 * (ld["peak_rss"] - ld["base_rss"]):
            L.append("Where the memory goes: the peak is the loader's, not Beam's. The permuted "
                     "source (`ReadPermutedStreams`) holds the whole dense data set on one "
                     "worker (a random permutation needs random access to every row) and "
                     "emits the blocks lazily, one at a time, from a generator; the FnApiRunner "
                     "passes them to the learner DoFn as they come, so blocks are not "
                     "accumulated (the RSS while learning is about imports + data set). "
                     f"Loading peaks at {ld['peak_rss'] / ld['data_mb']:.1f}x the dense data "
                     "set: a LIBSVM file is parsed into CSR rows first (the widest index must "
                     "not decide the memory), then made dense and scaled in place "
                     "(`engine.replay.sources.finish_rows`), and the CSR rows and the dense ones "
                     "coexist at that moment; the loop runner pays the same. For data "
                     "larger than one worker's memory, `order=\"file\"` (the chunked reader, "
                     "`ReadFileBlocks`) reads the file in byte-range chunks on parallel "
                     "workers and never holds more than a chunk, at the price of replaying "
                     "the file order instead of random permutations.")
        else:
            L.append("Where the memory goes: the direct replay's peak is above the loader's; "
                     "the pipeline holds more than the data set (see the RSS by tenth of "
                     "the run).")
        L.append("")
        L += ["## Per-key state size through the stream (covtype, BOGD B = "
              f"{args.budget})", ""]
        L.append("The pipeline's stream (same blocks, same per-block code: `stream_blocks` + "
                 "`ReplayLearner.learn`) replayed in a loop, measured after the first block "
                 "that reaches each checkpoint. *learner state* = "
                 "`len(state_to_bytes(learner.get_state()))`; *per-key state* = the key's "
                 "whole `ReplayState` as `ReplayStateCoder` writes it to the runner's state "
                 "(learner state + ordering cursor + prequential accumulators). "
                 f"B·d·8 = {args.budget * st['n_features'] * 8:,} bytes (the support vectors "
                 "alone).")
        L.append("")
        L.append("| position | #SV | learner state (bytes) | per-key state (bytes) | "
                 "learner state / (B·d·8) |")
        L.append("|---:|---:|---:|---:|---:|")
        for c in st["checkpoints"]:
            L.append(f"| {c['position']:,} | {c['n_sv']} | {c['learner_bytes']:,} | "
                     f"{c['stream_state_bytes']:,} | "
                     f"{c['learner_bytes'] / (args.budget * st['n_features'] * 8):.3f} |")
        L.append("")
        L.append(f"Bounded by the budget (#SV ≤ B everywhere; once the budget is full neither "
                 f"size grows by more than 1 %): **{_pf(cov['bounded'])}**. The loop's final "
                 f"mistakes and #SV equal the direct pipeline's ({st['mistakes']:,} mistakes, "
                 f"{st['n_sv']} SV): **{'yes' if cov['same_stream'] else 'NO'}**.")
        L.append("")
    return "\n".join(L)
