"""The compiled per-round kernels (kernelstream.learners.compiled): the same numbers as the
numpy code up to round-off, bit-identical between their own paths, safe on bad calls, and a
learner that cannot use them falls back to numpy."""

from __future__ import annotations

import math
import sys
import warnings

import numpy as np
import pytest

from kernelstream.learners import compiled, make
from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.kernels import make_kernel
from kernelstream.learners.perceptron import Perceptron as KernelPerceptron

ck = compiled.ck
needs_ck = pytest.mark.skipif(ck is None, reason=f"compiled kernels not in use: {compiled.STATUS}")

COMPILED = ("rbp", "forgetron", "bpa-s", "bogd", "projectron", "projectron++", "perceptron",
            "pa-i")


def _data(n: int = 400, d: int = 12, density: float = 1.0, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < density)
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return np.ascontiguousarray(X), y


@needs_ck
@pytest.mark.parametrize("kernel", ["gaussian", "polynomial", "linear"])
@pytest.mark.parametrize("density", [1.0, 0.15])
def test_row_and_score_match_numpy(kernel: str, density: float) -> None:
    X, _ = _data(60, 20, density)
    kern = make_kernel(kernel, 0.05, 3)
    S, Z = X[:40], X[40:]
    sqn = compiled.row_sqnorms(S)
    a = np.random.default_rng(1).standard_normal(40)
    work = np.empty(20, dtype=np.int64)
    code = compiled.KERNEL_CODES[kernel]
    p = -0.05 if kernel == "gaussian" else 0.0
    zz = compiled.row_sqnorms(Z)
    outs = np.empty(len(Z))
    ck.scores(S, sqn, a, 40, code, p, 3, Z, zz, outs, np.empty(40), work)
    for i, z in enumerate(Z):
        k = np.empty(40)
        f = ck.score(S, sqn, a, 40, code, p, 3, z, float(zz[i]), k, work)
        ref = kern.row(S, sqn, z, float(zz[i]))
        np.testing.assert_allclose(k, ref, rtol=1e-12, atol=1e-300)
        assert math.isclose(f, float(a @ ref), rel_tol=1e-10, abs_tol=1e-12)
        assert f == outs[i]  # the block entry point computes the same row, bit for bit


@needs_ck
def test_squared_norms_are_one_sum() -> None:
    X, _ = _data(50, 33)
    out = compiled.row_sqnorms(X)
    for i, x in enumerate(X):
        assert compiled.sqnorm(x) == out[i]
        assert math.isclose(out[i], math.fsum(x * x), rel_tol=1e-14)
    col = np.asfortranarray(X)[:, 3]  # a strided vector is copied, not refused
    assert compiled.sqnorm(col) == compiled.sqnorm(np.ascontiguousarray(col))


@needs_ck
@pytest.mark.parametrize("name", COMPILED)
def test_learner_runs_compiled_and_matches_numpy(name: str, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    X, y = _data(600, 10)
    kw = {} if name in ("perceptron", "pa-i") else {"budget": 40}
    m = make(name, seed=3, gamma=0.1, **kw)
    s = m.predict_learn_many(X, y)
    assert m._compiled
    monkeypatch.setattr(compiled, "ck", None)
    r = make(name, seed=3, gamma=0.1, **kw)
    s_ref = r.predict_learn_many(X, y)
    assert not r._compiled
    # round-off only: the same decisions on all but a handful of near-zero scores
    assert np.mean(np.sign(s) != np.sign(s_ref)) < 0.02
    np.testing.assert_allclose(s[:50], s_ref[:50], rtol=1e-9, atol=1e-12)


@needs_ck
def test_sparse_mode_and_other_kernels_fall_back() -> None:
    from kernelstream.sparse import CSR

    X, y = _data(50, 8, 0.5)
    m = make("rbp", budget=10)
    m.predict_learn_many(CSR.from_dense(X), y)
    assert m.sparse and not m._compiled  # sparse stores keep their numpy rows


def test_a_subclass_that_changes_the_update_is_run_every_round() -> None:
    class Decaying(KernelPerceptron):
        def _update(self, x, xx, y, score, aux):  # type: ignore[no-untyped-def]
            self.sv.scale(0.99)
            super()._update(x, xx, y, score, aux)

    class Declared(Decaying):
        update_when = "always"

    assert KernelPerceptron._update_trigger() == "mistake"
    assert Decaying._update_trigger() == "always"
    assert Declared._update_trigger() == "always"
    assert KernelLearner._update_trigger() == "always"


@needs_ck
def test_bad_calls_raise_instead_of_reading_out_of_bounds() -> None:
    S = np.zeros((4, 3))
    sqn, a, k = np.zeros(4), np.zeros(4), np.empty(4)
    work = np.empty(3, dtype=np.int64)
    z = np.ones(3)
    with pytest.raises(ValueError, match="exceeds the store"):
        ck.score(S, sqn, a, 5, 0, -1.0, 2, z, 3.0, k, work)
    with pytest.raises(TypeError, match="float64"):
        ck.score(S.astype(np.float32), sqn, a, 2, 0, -1.0, 2, z, 3.0, k, work)
    with pytest.raises(ValueError, match="wrong size"):
        ck.score(S, sqn, a, 2, 0, -1.0, 2, np.ones(4), 3.0, k, work)
    with pytest.raises(ValueError, match="unknown kernel"):
        ck.score(S, sqn, a, 2, 7, -1.0, 2, z, 3.0, k, work)
    with pytest.raises(TypeError, match="writable"):
        ro = np.empty(4)
        ro.setflags(write=False)
        ck.score(S, sqn, a, 2, 0, -1.0, 2, z, 3.0, ro, work)
    Z = np.ones((3, 3))
    with pytest.raises(ValueError, match="wrong size"):
        ck.run(S, sqn, a, 2, 0, -1.0, 2, Z, np.ones(2), np.ones(3), 0, 1, 1.0, 0.0,
               np.empty(3), None, k, work)


def test_stale_build_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    if compiled.source_hash() is None:
        pytest.skip("no C sources next to the package (wheel install)")
    monkeypatch.setattr(compiled, "source_hash", lambda: "0" * 16)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        mod, status = compiled._load()
    if "not built" in status or "KERNELSTREAM_COMPILED" in status:
        pytest.skip(status)
    assert mod is None and "stale" in status
    assert any("pip install -e ." in str(x.message) for x in w)


def test_environment_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELSTREAM_COMPILED", "0")
    mod, status = compiled._load()
    assert mod is None and "KERNELSTREAM_COMPILED=0" in status


@needs_ck
def test_arrays_taken_from_their_fields_equal_buffers() -> None:
    """The C modules read a plain C-contiguous native float64/int64 ndarray from its own
    fields and everything else through the buffer protocol: both give the same numbers, and
    the arrays the buffer way refuses are still refused (with the same errors)."""
    rng = np.random.default_rng(3)
    S = rng.normal(size=(6, 4))
    sqn, a, z = compiled.row_sqnorms(S), rng.normal(size=6), rng.normal(size=4)
    work = np.empty(4, dtype=np.int64)
    k1, k2 = np.empty(6), np.empty(6)
    f1 = ck.score(S, sqn, a, 6, 0, -0.5, 2, z, float(z @ z), k1, work)

    class Sub(np.ndarray):
        pass

    # other objects holding the same numbers: a subclass, a memoryview, big-endian data
    # turned native by a copy, int64 work as 'q' and as 'l'
    f2 = ck.score(S.view(Sub), memoryview(sqn), a.view(Sub), 6, 0, -0.5, 2,
                  z.astype(">f8").astype(np.float64), float(z @ z), memoryview(k2),
                  np.empty(4, dtype=np.longlong))
    assert f1 == f2 and k1.tobytes() == k2.tobytes()
    bad = {"float32": S.astype(np.float32), "big-endian": S.astype(">f8"),
           "Fortran order": np.asfortranarray(S), "strided": np.repeat(S, 2, axis=1)[:, ::2]}
    for X in bad.values():
        with pytest.raises(TypeError, match=r"float64|C-contiguous"):
            ck.score(X, sqn, a, 6, 0, -0.5, 2, z, 1.0, k1, work)
    with pytest.raises(TypeError, match="int64"):
        ck.score(S, sqn, a, 6, 0, -0.5, 2, z, 1.0, k1, work.astype(np.int32))
    ro = k1.copy()
    ro.setflags(write=False)
    with pytest.raises(TypeError, match="writable"):
        ck.score(S, sqn, a, 6, 0, -0.5, 2, z, 1.0, ro, work)
    # the module holds no array after a call (the fields lane takes a reference, and drops it)
    before = sys.getrefcount(S)
    for _ in range(10):
        ck.score(S, sqn, a, 6, 0, -0.5, 2, z, 1.0, k1, work)
    assert sys.getrefcount(S) == before
