"""``--scale auto`` on a Kafka topic: min-max scaling by the ranges of the first 1,000 rows
(all a replay of a topic, read once, can know before it learns) against a file's scaling by
the ranges of all its rows, and against no scaling.

The sets where ``check``'s rule fires (dense rows, feature ranges over 100x apart:
``kernelstream.data.check.scaling_advice``) among the classification sets of
``benchmarks/results/defaults.md``: german.numer, spambase.data and covtype.binary
(``--covtype-rows``, its first rows: the whole file takes minutes a column here), read as
they are. Every set runs in ``--orders`` shuffled orders (the replay's permutations 0, 1,
...: a topic holds its records in whatever
order they were produced; the files are grouped by class), with a topic's default learner,
bpa-s, and ``gamma=auto`` as each run would estimate it (``data.widths.auto_gamma`` of the
first 1,000 rows as the learners get them: scaled over themselves in both scaled columns,
as ``data.widths.reservoir_from_rows`` does). Columns: the mistake rate (%) with the rows as
they are, scaled by all rows, scaled by the first 1,000 rows' ranges (a column constant over
them shifted only, as ``kafka_client.KafkaBlocks`` does), and the share of the later rows with
a value outside those ranges. Results: ``--out-dir``/topic_scale.md and .json.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # the benchmarks' shared helpers, beside this script

from kernelstream import data, learners
from kernelstream.data import widths
from kernelstream.data.scaling import scale_minmax
from kernelstream.seeding import learner_seed

HEAD = widths.RESERVOIR_ROWS
# the raw files (the benchmark set definitions of german, spambase and covtype are scaled ones)
FILES = {"german": "german.numer", "spambase": "spambase.data",
         "covtype": "covtype.binary.libsvm"}
SETS = tuple(FILES)
LEARNER = "bpa-s"


def mistakes(X: np.ndarray, y: np.ndarray, head: np.ndarray) -> tuple[float, float]:
    """The mistake rate (%) of bpa-s over ``X`` (test-then-train, the tie rule +1) with the
    width of ``head`` (the first rows as the learners get them), and that width."""
    gamma = widths.auto_gamma(head)
    m = learners.make(LEARNER, seed=learner_seed(0, 0, LEARNER), gamma=gamma)
    s = m.predict_learn_many(np.ascontiguousarray(X, np.float64), y)
    return 100.0 * float(np.mean(np.where(s >= 0, 1.0, -1.0) != y)), gamma


def measure(X: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    lo, hi = X[:HEAD].min(axis=0), X[:HEAD].max(axis=0)
    by_head = (X - lo) / np.where(hi > lo, hi - lo, 1.0)
    outside = ((by_head < 0) | (by_head > 1)).any(axis=1)[HEAD:]
    head_scaled = scale_minmax(X[:HEAD], "01")  # the reservoir scaled over itself
    none, g_none = mistakes(X, y, X[:HEAD])
    full, g_full = mistakes(scale_minmax(X, "01"), y, head_scaled)
    first, g_first = mistakes(by_head, y, head_scaled)
    return {"none": none, "all_rows": full, "first_rows": first,
            "gamma": {"none": g_none, "all_rows": g_full, "first_rows": g_first},
            "outside_pct": 100.0 * float(outside.mean()) if len(outside) else 0.0}


def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__ or "")
    ap.add_argument("--orders", type=int, default=3, help="shuffled orders (default 3)")
    ap.add_argument("--covtype-rows", type=int, default=100_000,
                    help="the first rows of covtype (default 100,000)")
    _common.add_list_arg(ap, "--datasets", SETS)
    _common.add_output_args(ap, "topic_scale")
    args = ap.parse_args(argv)
    names = _common.parse_list(ap, args.datasets, SETS, "data set")
    res: dict[str, Any] = {"generated": _common.now_utc(), "machine": _common.machine_info(),
                           "learner": LEARNER, "head_rows": HEAD, "orders": args.orders,
                           "sets": {}}
    for name in names:
        X, y = data.load(str(Path(args.data_dir) / FILES[name]))  # as the file is, unscaled
        X = np.asarray(X.to_dense() if hasattr(X, "to_dense") else X, np.float64)
        if name == "covtype":
            X, y = X[:args.covtype_rows], y[:args.covtype_rows]
        runs = []
        for r in range(args.orders):
            Xp, yp = _common.permuted(X, np.asarray(y, np.float64), 0, r)
            runs.append(measure(Xp, yp))
            print(f"{name} order {r}: {runs[-1]}", file=sys.stderr, flush=True)
        res["sets"][name] = {"rows": len(y), "runs": runs}
    lines = ["# `--scale auto` on a Kafka topic: the first rows' ranges against all rows'", "",
             _common.generated_line("topic_scale.py", res["generated"]), "",
             f"{LEARNER}, `gamma=auto`, mistake rate (%) mean ± std over {args.orders} shuffled "
             f"orders; *outside*: the later rows with a value outside the first {HEAD:,} rows' "
             "ranges (%).", "",
             "| set | rows | as they are | scaled by all rows (a file) | scaled by the first "
             f"{HEAD:,} rows (a topic) | outside |", "|---|---:|---:|---:|---:|---:|"]
    for name, cell in res["sets"].items():
        cols = [_common.fmt_pm(*_common.mean_std([r[k] for r in cell["runs"]]), 2)
                for k in ("none", "all_rows", "first_rows")]
        out = _common.fmt_pm(*_common.mean_std([r["outside_pct"] for r in cell["runs"]]), 1)
        lines.append(f"| {name} | {cell['rows']:,} | {' | '.join(cols)} | {out} |")
    _common.write_report(args.out_dir, "topic_scale", lines, res)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
