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

from kernelstream.learners import compiled, make


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
