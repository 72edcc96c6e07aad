"""A ``--key-by`` run's per-entity summaries pooled into one row per configuration.

With ``--key-by`` every entity has its own model, so a run has no per-configuration stream.
What a user compares configurations by is every row's outcome together: per permutation, the
mistakes over all of a configuration's entities divided by their examples (not the mean of the
entities' rates, which would weigh an entity of 3 rows as one of 30,000), and the same for the
losses, the regression errors and the no-skill baselines (each entity's own baseline, pooled
over its rows). Then mean ± standard deviation over the permutations, as for a plain run.

One function, :func:`pooled_configs`, feeds the replay's summary table and ``summary.json``
(``pooled``) and the report's summary, so the three say the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# pooled as example-weighted means of the entities' own values
_WEIGHTED = ("avg_loss", "noskill_mistake_rate", "noskill_avg_loss", "mae")


def mean_std_finite(values: Sequence[float | None]) -> tuple[float | None, float]:
    """Mean and sample standard deviation (``ddof=1``; 0 for one value) of the finite values;
    (None, 0) when there are none."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None, 0.0
    return float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0


def _pool(keys: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """One permutation's entities of one configuration pooled over their examples: a figure is
    None when an entity lacks it (e.g. a run recorded before it existed), never a pool of
    part of the rows."""
    seconds = float(sum(k.get("seconds") or 0.0 for k in keys))
    n_sv = float(sum(k["n_support_vectors"] or 0 for k in keys))
    keys = [k for k in keys if k["examples"]]  # an entity without rows adds nothing
    ex = sum(int(k["examples"]) for k in keys)
    out: dict[str, float | None] = {"examples": float(ex), "n_support_vectors": n_sv,
                                    "seconds": seconds}
    def column(f: str) -> list[float] | None:  # every entity's value, or None if one lacks it
        vals = [k.get(f) for k in keys]
        if not ex or any(v is None for v in vals):
            return None
        return [float(v) for v in vals if v is not None]

    weights = [float(k["examples"]) for k in keys]
    mistakes = column("mistakes")
    out["mistake_rate"] = None if mistakes is None else 100.0 * sum(mistakes) / ex
    for f in _WEIGHTED:
        vals = column(f)
        out[f] = (None if vals is None
                  else sum(v * w for v, w in zip(vals, weights, strict=True)) / ex)
    rmse = column("rmse")
    sse = None if rmse is None else [r * r * w for r, w in zip(rmse, weights, strict=True)]
    out["rmse"] = None if sse is None else math.sqrt(sum(sse) / ex)
    # R² = 1 − SSE/SSE(running mean): an entity's no-skill SSE is SSE / (1 − R²), which its
    # R² of exactly 1 (no error) does not give: then no pooled R²
    r2 = column("r2")
    out["r2"] = None
    if sse is not None and r2 is not None and all(v < 1.0 for v in r2):
        base = sum(s / (1.0 - v) for s, v in zip(sse, r2, strict=True))
        out["r2"] = 1.0 - sum(sse) / base if base > 0 else None
    return out


def pooled_configs(keys: Sequence[dict[str, Any]],
                   params: Mapping[str, Mapping[str, Any]] | None = None,
                   ) -> list[dict[str, Any]]:
    """One row per configuration of a ``--key-by`` run's per-key summaries
    ``keys`` (``summary.json``'s ``keys``): ``label``, ``learner``, ``task``, ``loss``,
    ``entities``, ``examples`` (per permutation, mean), ``permutations`` and, for every pooled
    figure (``mistake_rate``, ``avg_loss``, the no-skill baselines, ``rmse``, ``mae``, ``r2``,
    ``n_support_vectors`` summed, ``seconds`` summed), its mean and ``_std`` over the
    permutations; ``examples_per_second`` from the mean seconds. ``top_class_share`` is None:
    the entities' shares do not say which class they predict. ``params``: each
    configuration's parameters by label, in command-line order (the rows' order; without
    it, the keys' order)."""
    rows = []
    seen = dict.fromkeys(k["config"] for k in keys)
    for config in [c for c in (params or {}) if c in seen] + [c for c in seen
                                                               if c not in (params or {})]:
        ks = [k for k in keys if k["config"] == config]
        perms = sorted({int(k["permutation"]) for k in ks})
        per = [_pool([k for k in ks if int(k["permutation"]) == p]) for p in perms]
        row: dict[str, Any] = {
            "label": config, "learner": ks[0]["learner"], "task": ks[0].get("task"),
            "loss": ks[0].get("loss"), "entities": len({k["entity"] for k in ks}),
            "examples": int(np.mean([p["examples"] for p in per])),
            "permutations": len(perms), "params": dict((params or {}).get(config, {})),
            "top_class_share": None,
            "top_class_share_std": None}
        for f in ("mistake_rate", *_WEIGHTED, "rmse", "r2", "n_support_vectors", "seconds"):
            mean, std = mean_std_finite([p[f] for p in per])
            # no figure, no spread: null as in a plain run's summary, not a std of 0
            row[f], row[f"{f}_std"] = mean, (None if mean is None else std)
        row["examples_per_second"] = (row["examples"] / row["seconds"] if row["seconds"]
                                      else None)
        rows.append(row)
    return rows
