"""Per-round cost of SkeGD grows with the budget, not with the stream (paper 003 §5.3).

Loads covtype.binary (581,012 rows, min-max [0, 1]) once, fixes one random order, and runs each
configuration through the stream: at every position in ``--positions`` (default 10k, 50k,
100k, 500k rounds) the learner state is snapshotted and a window of ``--window`` rounds starting
there is timed ``--repeats`` times from the snapshot (median), so a busy machine disturbs the
numbers less; the learner then continues from the snapshot. Rounds between windows are run
untimed. Printed and written to ``--out`` (default ``benchmarks/results/skegd_scaling.md``):
rounds/s per position and its ratio to the 10k rate (≈ 1 means the per-round cost does not grow
with the stream).

Configurations: SkeGD with a known horizon (ρ = ⌊0.3(T − B)⌋) for each budget of
``--budgets``; SkeGD with an unknown horizon (geometric update schedule) at B = 200; SkeGD with
a fixed ``update_cycle = 1000`` at B = 200 (its row list grows linearly with the stream — a
contrast, not the paper's setting); OKS-SIL at B = 200 if ``oks-sil`` is registered.

Example::

    .venv/bin/python benchmarks/skegd_scaling.py                 # ~2-3 min
    .venv/bin/python benchmarks/skegd_scaling.py --positions 10000,50000 --budgets 100
"""

from __future__ import annotations

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


def measure(name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray,
            positions: list[int], window: int, repeats: int) -> dict[str, Any]:
    m = learners.make(name, seed=learner_seed(0, 0, name), **params)
    pos = 0
    rates: list[float] = []
    t_all = time.perf_counter()
    for p in positions:
        for s in range(pos, p, 50_000):  # untimed advance
            m.predict_learn_many(X[s : min(p, s + 50_000)], y[s : min(p, s + 50_000)])
        st = m.get_state()
        secs = []
        for _ in range(repeats):
            c = Learner.from_state(st)
            t0 = time.perf_counter()
            c.predict_learn_many(X[p : p + window], y[p : p + window])
            secs.append(time.perf_counter() - t0)
        rates.append(window / statistics.median(secs))
        m = c  # continue from the (identical) last copy
        pos = p + window
    extra = {}
    if name == "skegd":
        extra = {"sketch_rows": m.n_sketch_rows, "updates": m.n_updates}
    return {"rates": rates, "total_seconds": time.perf_counter() - t_all, **extra}


def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__)
    ap.add_argument("--positions", default="10000,50000,100000,500000",
                    help="stream positions of the timed windows (default %(default)s)")
    ap.add_argument("--window", type=int, default=5000, help="rounds per window (default 5000)")
    ap.add_argument("--repeats", type=int, default=3, help="timings per window (median)")
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
           f"timed windows of {a.window} rounds, median of {a.repeats} timings from the same "
           "snapshot. PASS criterion (issue 4): rounds/s flat from 10k to 500k rounds, i.e. "
           "the ratio columns stay near 1.", ""]
    head = ["configuration"] + [f"{p // 1000}k r/s" for p in positions] + \
        [f"{p // 1000}k/{positions[0] // 1000}k" for p in positions[1:]] + ["notes"]
    rows = []
    for label, name, params in configs(budgets, n, gamma):
        r = measure(name, params, X, y, positions, a.window, a.repeats)
        base = r["rates"][0]
        note = f"{r['total_seconds']:.0f}s total"
        if "sketch_rows" in r:
            note += f", {r['sketch_rows']} sketch rows, {r['updates']} updates"
        rows.append([label] + [f"{v:,.0f}" for v in r["rates"]]
                    + [f"{v / base:.2f}" for v in r["rates"][1:]] + [note])
        print(f"done {label}: {note}", file=sys.stderr, flush=True)
    w = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    out.append("| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(head)) + " |")
    out.append("|" + "|".join("-" * (x + 2) for x in w) + "|")
    out += ["| " + " | ".join(str(c).ljust(w[i]) for i, c in enumerate(row)) + " |"
            for row in rows]
    print("\n".join(out))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(out) + "\n")
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
