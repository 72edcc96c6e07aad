"""Memory of the learners against :func:`kernelstream.learners.registry.memory_estimate`, the
number ``check_width`` refuses a run with: measured with ``tracemalloc`` (numpy's allocations
are traced), so an estimate that is too low (a run dies of MemoryError) or far too high (a run
that fits is refused) fails here."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kernelstream.learners import available, compiled, make, registry


def traced_peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    """``(peak bytes allocated while fn runs, its result)``."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = fn()
        return tracemalloc.get_traced_memory()[1] - base, out
    finally:
        tracemalloc.stop()


@pytest.mark.skipif(compiled.fk is None, reason="the Ωᵀ layout is the compiled map's")
@pytest.mark.parametrize("name", ["fogd", "rff-rls"])
def test_random_features_hold_one_projection(name: str) -> None:
    # Ω was drawn, then copied transposed: twice the projection at the first row
    D, d = 64, 20_000
    x = np.random.default_rng(0).standard_normal(d)

    def first_row() -> Any:
        m = make(name, seed=0, n_components=D)
        m.learn_one(x, 1.0)
        return m

    make(name).learn_one(x[:10], 1.0)  # imports and compiled buffers outside the measure
    peak, m = traced_peak(first_row)
    omega = 8 * D * d
    assert peak < 1.3 * omega, f"{name}: peak {peak:,} B for a {omega:,} B projection"
    # and a restored learner does not keep the Ωᵀ its own first draw made
    st = m.get_state()
    peak2, _ = traced_peak(lambda: type(m).from_state(st))
    assert peak2 < 2.25 * omega, f"{name} from_state: peak {peak2:,} B"


# -- every learner: estimate vs measured peak ---------------------------------------------------
D_WIDE = 5_000  # wide enough that rows and projections dominate the fixed costs
SMALL = {"budget": 24, "n_components": 40, "reservoir_size": 8, "selection_window": 80}
LOW, HIGH = 0.75, 3.0  # estimate / peak: lower lets a run die of MemoryError, higher refuses it


def _case(name: str) -> tuple[dict[str, Any], int]:
    """Small parameters of ``name`` and the rows to learn: budgeted learners fill their budget
    (and SkeGD grows its sketch rows); an unbounded store is measured before it first grows,
    since its estimate is its initial capacity."""
    cls = registry.get(name)
    names = {p.name for p in cls.params}
    params = {k: v for k, v in SMALL.items() if k in names}
    return params, (300 if cls(**params).memory_bound() is not None else 12)


@pytest.mark.parametrize("name", available())
def test_memory_estimate_matches_the_measured_peak(name: str) -> None:
    params, n = _case(name)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, D_WIDE)) / np.sqrt(D_WIDE)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    if registry.get(name)(**params).task != "classification":
        y = X[:, 0] * 3.0
    warm = make(name, seed=0, **params)  # imports and compiled buffers outside the measure
    warm.learn_one(X[0], y[0])

    def run() -> Any:
        m = make(name, seed=0, **params)
        for i in range(n):
            m.step(X[i], y[i])
        return m

    peak, _ = traced_peak(run)
    est, what = registry.memory_estimate(name, params, D_WIDE, n_rows=n)
    ratio = est / peak
    assert LOW <= ratio <= HIGH, (
        f"{name}: estimate {est:,} B ({what}) vs measured peak {peak:,} B: ratio {ratio:.2f}")


def test_estimate_counts_what_the_findings_named() -> None:
    gib = 1 << 30
    # Proj-KA's window (1,000 rows of 3.2M features: 24 GiB) is refused, not a MemoryError
    need, what = registry.memory_estimate("proj-ka", {}, 3_231_887)
    assert need > 24 * gib and "selection_window" in what
    # Raker / RF-OKS share one D x d draw over their widths and store no rows: 1.3 GB
    need, _ = registry.memory_estimate("raker", {}, 3_231_887)
    assert 8 * 50 * 3_231_887 <= need < 1.01 * 8 * 50 * 3_231_887
    registry.check_width("raker", {}, 3_231_887, limit_bytes=8 << 30)
    # SkeGD's sketch rows grow with the stream (O(B + log T) with an unknown horizon)
    short = registry.memory_estimate("skegd", {"budget": 30}, 100_000, n_rows=1_000)[0]
    longer = registry.memory_estimate("skegd", {"budget": 30}, 100_000, n_rows=10**8)[0]
    assert longer > short


@pytest.mark.parametrize("name", ["projectron", "projectron++", "nogd", "skegd", "rff-rls",
                                  "raker"])
def test_narrow_rows_count_the_budget_squared_matrices(name: str) -> None:
    # at a narrow width a B x B matrix (K⁻¹, a Gram or eigenvector matrix, RLS's P) outweighs
    # the stored rows: 400 rows of 50 features are 160 kB, K⁻¹ 1.3 MB
    params = {k: v for k, v in {"budget": 400, "n_components": 400}.items()
              if k in {p.name for p in registry.get(name).params}}
    n, d = 1000, 50
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, d))
    y = np.sign(X[:, 0] + rng.standard_normal(n))
    make(name, **params).learn_one(X[0], y[0])

    def run() -> None:
        m = make(name, seed=0, **params)
        for i in range(n):
            m.step(X[i], y[i])

    peak, _ = traced_peak(run)
    est, what = registry.memory_estimate(name, params, d, n_rows=n)
    assert LOW <= est / peak <= HIGH, f"{name}: estimate {est:,} B ({what}) vs peak {peak:,} B"


def test_the_estimates_instance_allocates_little() -> None:
    """memory_estimate builds the learner to ask its stored_rows (registry._estimate): an
    instance holds nothing d-wide before its first row, so that costs next to nothing."""
    for name in available():
        cls = registry.get(name)
        big = {"budget": 10_000} if any(p.name == "budget" for p in cls.params) else {}
        peak, _ = traced_peak(lambda cls=cls, big=big: cls(**big))
        assert peak < 64 << 10, (name, peak)
