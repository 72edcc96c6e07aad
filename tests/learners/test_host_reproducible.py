"""IOKS and OKS++ give the same numbers on any host (issue 28): their rounds call no routine
whose rounding depends on the CPU. OpenBLAS picks its ``ddot`` kernel by CPU (blocks of
another width: ``x @ x`` rounds differently), numpy's ``exp`` takes a SIMD loop on CPUs with
AVX-512; here both are varied on one machine (OpenBLAS's kernel by ``OPENBLAS_CORETYPE`` in
fresh processes, numpy's ``exp`` by a 1-ulp perturbation) and the scores must stay bit for bit."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernelstream
from kernelstream.learners import compiled, make

needs_mk = pytest.mark.skipif(compiled.mk is None,
                              reason=f"compiled kernels not in use: {compiled.STATUS}")

# the learner settings of paper 002's tables (square loss: Table 3, bank32nh's 32 features)
CASES = (("ioks", {"loss": "square", "reference_quirks": True}),
         ("ioks", {"loss": "logistic"}),
         ("oks++", {"loss": "square"}),
         ("oks++", {"loss": "logistic", "reference_quirks": True}))


def _stream(n: int = 1200, d: int = 32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.uniform(-1.0, 1.0, size=(n, d))
    yr = np.clip(0.5 + 0.3 * X[:, 0] * X[:, 1] + 0.05 * rng.normal(size=n), 0.0, 1.0)
    yc = np.where(X[:, 2] + 0.3 * rng.normal(size=n) > 0.0, 1.0, -1.0)
    return X, yr, yc


def _digests() -> list[str]:
    """Hashes of the block scores of every case, then of a plain ``x @ x`` over the rows
    (the probe that says whether BLAS's rounding changed at all)."""
    X, yr, yc = _stream()
    out = []
    for name, kw in CASES:
        y = yr if kw["loss"] == "square" else yc
        s = make(name, seed=3, **kw).predict_learn_many(X, y)
        out.append(hashlib.sha1(s.tobytes()).hexdigest())
    out.append(hashlib.sha1(np.array([float(r @ r) for r in X]).tobytes()).hexdigest())
    return out


_CHILD = "import runpy, sys; print(' '.join(runpy.run_path(sys.argv[1])['_digests']()))"


def _digests_with(coretype: str) -> list[str]:
    root = Path(kernelstream.__file__).resolve().parent.parent
    env = dict(os.environ, OPENBLAS_CORETYPE=coretype,
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD, __file__], env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    return proc.stdout.split()


def _has_avx() -> bool:
    try:
        return " avx " in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@needs_mk
@pytest.mark.skipif(platform.machine() != "x86_64" or not _has_avx(),
                    reason="OpenBLAS core types of x86-64 with AVX")
def test_scores_do_not_depend_on_the_blas_kernel() -> None:
    # Nehalem (SSE) and Sandybridge (AVX) kernels sum x @ x in differently shaped blocks
    a, b = _digests_with("Nehalem"), _digests_with("Sandybridge")
    if a[-1] == b[-1]:
        pytest.skip("this numpy's BLAS ignores OPENBLAS_CORETYPE (x @ x rounds the same)")
    moved = [f"{n} {k['loss']}" for (n, k), u, v in zip(CASES, a, b[:-1], strict=False)
             if u != v]
    assert not moved


@needs_mk
@pytest.mark.parametrize("name,kw", [c for c in CASES if c[0] == "oks++"],
                         ids=lambda c: c if isinstance(c, str) else c["loss"])
def test_oks_pp_scores_do_not_depend_on_numpys_exp(monkeypatch: pytest.MonkeyPatch, name: str,
                                                   kw: dict[str, object]) -> None:
    # another host's SIMD exp: numpy's values moved by one ulp (its Hedge weights took it)
    X, yr, yc = _stream(600)
    y = yr if kw["loss"] == "square" else yc
    want = make(name, seed=3, **kw).predict_learn_many(X, y)
    real_exp = np.exp

    def other_exp(v: object, *args: object, **kwargs: object) -> object:
        r = real_exp(v, *args, **kwargs)
        return np.nextafter(r, np.inf, out=r if isinstance(r, np.ndarray) else None)

    monkeypatch.setattr(np, "exp", other_exp)
    got = make(name, seed=3, **kw).predict_learn_many(X, y)
    assert got.tobytes() == want.tobytes()
