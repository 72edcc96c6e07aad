"""Tuning of OKS-SIL and its baselines (Zhang & Liao, IJCAI 2020, their §6); the evaluation
is ``kernelstream reproduce p0`` (``kernelstream/experiments/p0.py``: Table 2, published
numbers, verdicts, ``benchmarks/results/p0.md/.json``).

``--tune`` does what the paper did: the KOGD step size η ∈ {10^-5, …, 10^0} of every algorithm
that has one (OKS-SIL, OKL-GD, OKS) by the lowest mistake rate on one whole permutation (index
``--tune-perm``, default 1000, never an evaluation permutation; ties: the smaller η), written
to ``benchmarks/tuned_params_p0.json``. Proj-KA has no step size. Without ``--tune-only`` the
script then runs ``kernelstream reproduce p0`` with its ``--data-dir``, ``--datasets``,
``--permutations``, ``--base-seed``, ``--workers`` and ``--out-dir``.

Examples::

    .venv/bin/python benchmarks/reproduce_p0.py --tune                 # tune + evaluate (R=20)
    .venv/bin/python benchmarks/reproduce_p0.py                        # evaluate (committed tuning)
    .venv/bin/python benchmarks/reproduce_p0.py --datasets german --permutations 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # first: it limits BLAS to one thread per process before numpy loads
from _common import RunSpec, load_dataset

from kernelstream import learners
from kernelstream.experiments.p0 import ETA_GRID, P0_DATASETS, P0_LEARNERS, fixed_params, step_param
from kernelstream.pipelines.cli import main as kernelstream_main

DEFAULT_TUNED = _common.BENCH / "tuned_params_p0.json"


def tune(a: argparse.Namespace, tuned: dict[str, Any]) -> None:
    meta = tuned.setdefault("meta", {})
    for e in (e for k, v in tuned.items() if k != "meta" for e in v.values()):
        e.setdefault("tuned_at", meta.get("tuned_at", "?"))  # before meta moves to this run
    meta.update({**_common.tuning_meta(a), "eta_grid": ETA_GRID})
    t0 = time.perf_counter()
    for ds in a.datasets:
        n = load_dataset(ds, a.data_dir)[0].shape[0]
        entry = tuned.setdefault(ds, {})
        for name in a.learners:
            sp = step_param(name) if name in learners.available() else None
            if sp is None:
                continue
            fx = fixed_params(name, n)
            specs = [RunSpec(name, {**fx, sp: v}, ds, a.tune_perm, a.base_seed, tag="tune")
                     for v in ETA_GRID]
            res = _common.run_all(specs, a.data_dir, workers=a.workers)
            rr = [(v, r.mistake_rate) for v, r in zip(ETA_GRID, res, strict=True)]
            best, mr = _common.best_of_grid(rr)  # ties: the smaller step (earlier)
            entry[name] = {"params": {**fx, sp: best}, "tuned": sp, "tuned_at": _common.now_utc(),
                           "tune_mistake_rate": round(mr, 4),
                           "grid": [[v, round(m, 4)] for v, m in rr]}
    meta["tuning_seconds"] = round(time.perf_counter() - t0, 1)


def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__)
    _common.add_tuning_args(ap, DEFAULT_TUNED)
    _common.add_eval_args(ap, 20, "R evaluation permutations (default 20, as P0)", tune_perm=True)
    _common.add_list_arg(ap, "--datasets", P0_DATASETS)
    _common.add_list_arg(ap, "--learners", P0_LEARNERS,
                         help="learners to tune (comma-separated subset of %(default)s); the "
                         "evaluation runs every learner")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (≤ 2; default 2)")
    _common.add_output_args(ap, "p0")
    a = ap.parse_args(argv)
    a.datasets = _common.parse_list(ap, a.datasets, P0_DATASETS, "dataset")
    a.learners = _common.parse_list(ap, a.learners, P0_LEARNERS, "learner")
    a.workers = max(1, min(a.workers, 2))
    if a.tuned_file.name != "tuned_params_p0.json":
        ap.error("--tuned-file must be named tuned_params_p0.json (the evaluation reads it "
                 "from its directory: kernelstream reproduce --tuned-dir)")
    _common.warn_unregistered(a.learners)

    tuned = _common.read_json(a.tuned_file)
    if _common.tune_step(ap, a, tuned, lambda: tune(a, tuned)):
        return 0
    return kernelstream_main([
        "reproduce", "p0", "--data-dir", str(a.data_dir), "--datasets", ",".join(a.datasets),
        "-R", str(a.permutations), "--seed", str(a.base_seed), "--workers", str(a.workers),
        "--out-dir", str(a.out_dir), "--tuned-dir", str(a.tuned_file.parent)])


if __name__ == "__main__":
    raise SystemExit(main())
