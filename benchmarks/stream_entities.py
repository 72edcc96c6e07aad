"""Per-entity models on a stream of sessions: what ``--forget-entities-after`` bounds, and what
it costs.

A ``--key-by`` stream of ``--sessions`` one-off entities (a key per session, as web sessions
or devices seen once): session i starts ``--gap`` ms after session i-1 and sends 1-3 events
over 2 s, 70 % of them labelled 0-2 s later on the same topic (seeded). It is learnt by the
stream's reference loop (``kernelstream.engine.live.engine.reference_outputs``: the engine
the Beam pipeline runs, without a broker, so the figures are the engine's own) with ``-l bogd
-p budget=32``, ``--label-ttl 5s``, ``--metrics-window 5s``, in two modes: ``never`` (every
entity's model kept) and ``forget`` (``--forget-entities-after 10s``). The stream goes in 10
segments, each continuing the last one's states and clock (exactly a stream that runs on),
and after each the models held, and the bytes a base snapshot of them would hold (every
model's state encoded, plus the clock's), are recorded. Time: the whole stream, best of
``--repeats`` runs per mode, modes alternating (one process, one core).

Checks printed with the table: both modes make the same number of prediction, outcome and
unlabeled rows (no entity here comes back, so forgetting changes no row's content but its id),
and the counts add up in each. Results: ``--out-dir``/stream_entities.md and .json.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # the benchmarks' shared helpers, beside this script

from kernelstream.data.options import ReadOptions
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.live.engine import quiet_clock, reference_outputs
from kernelstream.engine.live.parsing import LiveSpec
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.state import encode_state

TTL_MS = WINDOW_MS = 5_000
FORGET_MS = 10_000
MODES = ("never", "forget")
SEGMENTS = 10


def sessions(n: int, gap_ms: int, seed: int) -> list[SourceRecord]:
    """The records of ``n`` sessions (module docstring), in timestamp order."""
    rng = random.Random(seed)
    out: list[tuple[int, str, str]] = []
    for i in range(n):
        t0 = i * gap_ms
        for j in range(rng.randint(1, 3)):
            t = t0 + rng.randint(0, 2000)
            x = " ".join(f"{k}:{rng.random():.3f}" for k in range(1, 9))
            eid = f"s{i}/e{j}"
            out.append((t, eid, f"? {x}"))
            if rng.random() < 0.7:
                out.append((t + rng.randint(0, 2000), eid, "label:" + rng.choice("+-") + "1"))
    out.sort(key=lambda r: r[0])
    return [SourceRecord("ev", 0, o, t, k.encode(), v.encode())
            for o, (t, k, v) in enumerate(out)]


def spec(mode: str) -> LiveSpec:
    read = ReadOptions("kafka://h:1/ev", n_features=8, key_by="id-prefix")
    return LiveSpec((LearnerConfig("bogd", "bogd", {"budget": 32}),), read,
                    label_ttl_ms=TTL_MS, metrics_window_ms=WINDOW_MS,
                    forget_after_ms=FORGET_MS if mode == "forget" else None)


def run(records: list[SourceRecord], mode: str, measure: bool) -> dict[str, Any]:
    """One pass over the stream in :data:`SEGMENTS` segments; with ``measure``, the models and
    snapshot bytes after each (untimed: the time is that of a pass without them)."""
    s = spec(mode)
    clock = quiet_clock(s)
    assert clock is not None
    states: dict[str, Any] = {}
    rows = dict.fromkeys(("predictions", "outcomes", "unlabeled", "dead_letters"), 0)
    forgotten = 0
    growth = []
    seconds = 0.0
    step = -(-len(records) // SEGMENTS)
    for k in range(0, len(records), step):
        t = time.perf_counter()
        out, states = reference_outputs(records[k:k + step], s, states, clock=clock)
        seconds += time.perf_counter() - t
        for name in rows:
            rows[name] += len(out[name])
        forgotten += len(out.forgotten)
        if measure:
            growth.append({"records": k + len(records[k:k + step]), "models": len(states),
                           "snapshot_bytes": sum(len(encode_state(st))
                                                 for st in states.values())
                           + len(clock.encode()),
                           "clock_entities": len(clock)})
    pending = sum(len(st.pending) for st in states.values())
    return {"seconds": seconds, "rows": rows, "forgotten": forgotten, "pending": pending,
            "growth": growth}


def main(argv: list[str]) -> None:
    ap = _common.script_parser(__doc__)
    ap.add_argument("--sessions", type=int, default=20_000)
    ap.add_argument("--gap", type=int, default=50, help="ms between session starts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    _common.add_output_args(ap, "stream_entities")
    args = ap.parse_args(argv)
    prov = _common.provenance("stream_entities.py", argv)
    records = sessions(args.sessions, args.gap, args.seed)
    print(f"{len(records):,} records of {args.sessions:,} sessions", file=sys.stderr)
    results: dict[str, Any] = {"provenance": prov, "sessions": args.sessions,
                               "records": len(records), "gap_ms": args.gap,
                               "ttl_ms": TTL_MS, "window_ms": WINDOW_MS,
                               "forget_ms": FORGET_MS, "modes": {}}
    for mode in MODES:
        results["modes"][mode] = run(records, mode, measure=True)
        print(f"{mode}: measured", file=sys.stderr)
    best = {m: float("inf") for m in MODES}
    for r in range(args.repeats):
        for mode in (MODES if r % 2 == 0 else MODES[::-1]):
            best[mode] = min(best[mode], run(records, mode, measure=False)["seconds"])
            print(f"{mode}: pass {r + 1} of {args.repeats}", file=sys.stderr)
    for mode in MODES:
        results["modes"][mode]["best_seconds"] = best[mode]
    prov["load_end"] = _common.load_average()
    _common.write_report(args.out_dir, "stream_entities", render(results), results)
    print("\n".join(render(results)))


def render(res: dict[str, Any]) -> list[str]:
    never, forget = res["modes"]["never"], res["modes"]["forget"]
    n = res["records"]
    us = {m: 1e6 * res["modes"][m]["best_seconds"] / n for m in MODES}
    same_rows = {k: v for k, v in never["rows"].items()} == forget["rows"]
    lines = [
        "# Per-entity models on a stream of sessions: `--forget-entities-after`", "",
        _common.generated_line("stream_entities.py", time.strftime("%Y-%m-%d")), "",
        _common.provenance_line(res["provenance"]), "",
        f"{res['sessions']:,} one-off sessions (a key each), one starting every "
        f"{res['gap_ms']} ms, {n:,} records; `-l bogd -p budget=32`, `--label-ttl 5s "
        f"--metrics-window 5s`, forget: `--forget-entities-after 10s`. The engine's reference "
        "loop (the stream's engine, no broker).", "",
        "| mode | µs a record (best of runs) | models at the end | base snapshot at the end "
        "| clock entries | models forgotten |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in MODES:
        r = res["modes"][m]
        end = r["growth"][-1]
        lines.append(f"| {m} | {us[m]:.1f} | {end['models']:,} | "
                     f"{end['snapshot_bytes'] / 1e6:.2f} MB | {end['clock_entities']:,} | "
                     f"{r['forgotten']:,} |")
    lines += [
        "",
        f"Time with forgetting / without: {us['forget'] / us['never']:.2f}× (one run, "
        "alternating passes). Models held at the end: "
        f"{never['growth'][-1]['models'] / max(1, forget['growth'][-1]['models']):.0f}× fewer; "
        "base snapshot bytes "
        f"{never['growth'][-1]['snapshot_bytes'] / forget['growth'][-1]['snapshot_bytes']:.0f}× "
        "fewer.", "",
        "Models held as the stream goes on (after each tenth of the records):", "",
        "| records | models (never) | models (forget) | snapshot MB (never) | "
        "snapshot MB (forget) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for a, b in zip(never["growth"], forget["growth"], strict=True):
        lines.append(f"| {a['records']:,} | {a['models']:,} | {b['models']:,} | "
                     f"{a['snapshot_bytes'] / 1e6:.2f} | {b['snapshot_bytes'] / 1e6:.2f} |")
    lines += ["", f"Rows (both modes): {never['rows']}; the same in both: "
              f"{'yes' if same_rows else 'NO'}; pending at the end: {never['pending']} / "
              f"{forget['pending']}."]
    return lines


if __name__ == "__main__":
    main(sys.argv[1:])
