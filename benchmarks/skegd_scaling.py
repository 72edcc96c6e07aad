"""Per-round cost of SkeGD grows with the budget, not with the stream (Zhang & Liao,
ICML 2019, §5.3).

Loads covtype.binary (581,012 rows, min-max [0, 1]) once, fixes one random order, and runs each
configuration through the stream once, untimed, snapshotting the learner state at every
position in ``--positions`` (default 10k, 50k, 100k, 500k rounds); then a window of ``--window``
rounds from each snapshot is timed, round-robin over the positions, ``--repeats`` times, and the
median per position is kept, so a change of load on a shared machine hits all positions alike.
Printed and written to ``--out`` (default ``benchmarks/results/skegd_scaling.md``): rounds/s per
position, its ratio to the first position's rate (≈ 1 means the per-round cost does not grow
with the stream) and a verdict: flat = no later position more than 20 % slower than the first,
judged for every configuration except the ``update_cycle`` contrast.

Configurations: SkeGD with a known horizon (ρ = ⌊0.3(T − B)⌋) for each budget of
``--budgets``; SkeGD with an unknown horizon (geometric update schedule) at B = 200; SkeGD with
a fixed ``update_cycle = 1000`` at B = 200 (its row list grows linearly with the stream — a
contrast, not the paper's setting); OKS-SIL at B = 200 if ``oks-sil`` is registered.

Example::

    .venv/bin/python benchmarks/skegd_scaling.py                 # ~2-3 min
    .venv/bin/python benchmarks/skegd_scaling.py --positions 10000,50000 --budgets 100
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
import numpy as np
from _common import SIGMA_EXPONENTS, permuted

from kernelstream import data as ksdata
from kernelstream import learners
from kernelstream.learners.base import Learner
from kernelstream.learners.kernels import kernel_alignment
from kernelstream.seeding import learner_seed

FILE = "covtype.binary.libsvm"
FLAT_MIN_RATIO = 0.8  # a later window at most 20 % slower than the first counts as flat


def configs(budgets: list[int], n: int, gamma: float) -> list[tuple[str, str, dict[str, Any]]]:
    common = {"gamma": gamma, "eta": 0.5, "lam": 1e-4}
    out = [(f"skegd B={B} horizon=T", "skegd", {**common, "budget": B, "horizon": n})
           for B in budgets]
    out += [
        ("skegd B=200 horizon unknown", "skegd", {**common, "budget": 200}),
        ("skegd B=200 update_cycle=1000", "skegd", {**common, "budget": 200,
                                                   "update_cycle": 1000}),
    ]
    if "oks-sil" in learners.available():
        out.append(("oks-sil B=200", "oks-sil", {"budget": 200}))
    return out


def snapshots(m: Learner, X: np.ndarray, y: np.ndarray, positions: list[int], end: int,
              block: int = 50_000) -> list[dict[str, np.ndarray]]:
    """Run ``m`` over rows ``[0, end)`` in blocks, returning its state at each of the sorted
    ``positions`` (before that row is learned)."""
    out = []
    cuts = sorted({0, end, *positions, *range(0, end, block)})
    for lo, hi in itertools.pairwise(cuts):
        if lo in positions:
            out.append(m.get_state())
        m.predict_learn_many(X[lo:hi], y[lo:hi])
    return out


def measure(name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray,
            positions: list[int], window: int, repeats: int) -> dict[str, Any]:
    """One untimed pass through the stream snapshots the learner at every position; then the
    windows are timed round-robin over the positions, ``repeats`` rounds, and each position's
    median is kept: a change of machine load then hits every position alike instead of
    whichever was measured at the time."""
    m = learners.make(name, seed=learner_seed(0, 0, name), **params)
    t_all = time.perf_counter()
    snaps = snapshots(m, X, y, positions, positions[-1] + window)
    secs: list[list[float]] = [[] for _ in positions]
    for _ in range(repeats):
        for i, (p, st) in enumerate(zip(positions, snaps, strict=True)):
            c = Learner.from_state(st)
            t0 = time.perf_counter()
            c.predict_learn_many(X[p : p + window], y[p : p + window])
            secs[i].append(time.perf_counter() - t0)
    extra = {}
    if name == "skegd":
        extra = {"sketch_rows": m.n_sketch_rows, "updates": m.n_updates}
    return {"rates": [window / statistics.median(v) for v in secs],
            "total_seconds": time.perf_counter() - t_all, **extra}


def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__)
    ap.add_argument("--positions", default="10000,50000,100000,500000",
                    help="stream positions of the timed windows (default %(default)s)")
    ap.add_argument("--window", type=int, default=5000, help="rounds per window (default 5000)")
    ap.add_argument("--repeats", type=int, default=5,
                    help="timings per window, round-robin over the positions (median; "
                         "default 5)")
    ap.add_argument("--budgets", default="100,200,400", help="SkeGD budgets (known horizon)")
    ap.add_argument("--sigma-log2", type=float, default=None,
                    help="Gaussian width log2 σ (default: kernel alignment on 2,000 rows)")
    ap.add_argument("--out", type=Path, default=_common.RESULTS / "skegd_scaling.md",
                    help="markdown results file (default %(default)s)")
    a = ap.parse_args(argv)
    positions = sorted(int(p) for p in a.positions.split(","))
    budgets = [int(b) for b in a.budgets.split(",")]
    t0 = time.perf_counter()
    X, y = ksdata.load(str(Path(a.data_dir) / FILE), fmt="libsvm", n_features=54, scale="01")
    n = X.shape[0]
    if positions[-1] + a.window > n:
        ap.error(f"the last window ends after the stream ({n} rows)")
    X, y = permuted(X, y, 0, 0)
    print(f"loaded {FILE}: {n} x {X.shape[1]} in {time.perf_counter() - t0:.1f}s",
          file=sys.stderr)
    e = a.sigma_log2
    if e is None:
        ka = kernel_alignment(X[:2000], y[:2000], [1 / (2 * 4.0**s) for s in SIGMA_EXPONENTS])
        e = SIGMA_EXPONENTS[int(np.argmax(ka))]
    gamma = 1.0 / (2.0 * 4.0**e)
    out = ["# SkeGD per-round cost vs stream position — covtype.binary", "",
           _common.generated_line("skegd_scaling.py", _common.now_utc()),
           "",
           f"* Machine: {_common.machine_info()}; one process.",
           f"* σ = 2^{e:g} (kernel alignment on 2,000 rows unless given), η = 0.5, λ = 10^-4; "
           f"timed windows of {a.window} rounds from snapshots of one pass, median of "
           f"{a.repeats} timings taken round-robin over the positions.",
           f"* Criterion (issue 4): rounds/s flat from {positions[0]:,} to {positions[-1]:,} "
           "rounds; flat = every ratio ≥ 0.8 (no later position more than 20 % slower). The "
           "`update_cycle` row is a contrast (its row list grows with the stream) and is not "
           "judged.", ""]
    head = ["configuration"] + [f"{p // 1000}k r/s" for p in positions] + \
        [f"{p // 1000}k/{positions[0] // 1000}k" for p in positions[1:]] + ["flat", "notes"]
    rows = []
    verdicts: list[tuple[str, bool]] = []
    for label, name, params in configs(budgets, n, gamma):
        r = measure(name, params, X, y, positions, a.window, a.repeats)
        base = r["rates"][0]
        ratios = [v / base for v in r["rates"][1:]]
        judged = "update_cycle" not in label
        flat = min(ratios, default=1.0) >= FLAT_MIN_RATIO
        if judged:
            verdicts.append((label, flat))
        note = f"{r['total_seconds']:.0f}s total"
        if "sketch_rows" in r:
            note += f", {r['sketch_rows']} sketch rows, {r['updates']} updates"
        rows.append([label] + [f"{v:,.0f}" for v in r["rates"]] + [f"{v:.2f}" for v in ratios]
                    + [("yes" if flat else "**no**") if judged else "(contrast)", note])
        print(f"done {label}: {note}", file=sys.stderr, flush=True)
    w = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    out.append("| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(head)) + " |")
    out.append("|" + "|".join("-" * (x + 2) for x in w) + "|")
    out += ["| " + " | ".join(str(c).ljust(w[i]) for i, c in enumerate(row)) + " |"
            for row in rows]
    bad = [lbl for lbl, ok in verdicts if not ok]
    out += ["", f"{'FAIL' if bad else 'PASS'}: {len(verdicts) - len(bad)}/{len(verdicts)} "
            "judged configurations flat" + (f" (not flat: {', '.join(bad)})" if bad else "")]
    print("\n".join(out))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(out) + "\n")
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
