"""The floors of benchmarks/learners.py (and of benchmarks/peers.py, through it): what a
learner's round cannot avoid, timed by the same compiled code the learners use (numpy in a
Python loop without the compiled kernels)."""

from __future__ import annotations

import copy
import math
import time
from typing import Any

import _common  # noqa: F401  first: it limits BLAS to one thread per process
import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners.kernels import Gaussian


def time_floor(kind: str, Xp: np.ndarray, size: int, gamma: float) -> float:
    """Seconds of the floor of a random-feature learner (``kind`` "rff" or "rls", ``size``
    frequencies) over the rows of ``Xp``."""
    if kind == "rls":
        return time_rls_floor(Xp, size, gamma)
    return time_rff_floor(Xp, size, gamma)


def per_example_floors(X: np.ndarray, gamma: float,
                       reps: int = 20000) -> list[tuple[str, float]]:
    """µs per call of what every per-example round pays at least: the Python loop calling a
    method, one compiled call taking one buffer (``‖x‖²``), and the compiled kernel row and
    score against one stored point (six buffers, as a learner's score call takes them)."""
    class Empty:
        def step(self, x: Any, y: Any) -> float:
            return 0.0

    rows = list(np.ascontiguousarray(X[:reps]))
    e = Empty().step
    out: list[tuple[str, float]] = []
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for x in rows:
            e(x, 1.0)
        best = min(best, time.perf_counter() - t0)
    out.append(("Python loop calling a method that does nothing", 1e6 * best / len(rows)))
    ck = compiled.ck
    if ck is None:
        return out
    best = math.inf
    sq = ck.sqnorm
    for _ in range(5):
        t0 = time.perf_counter()
        for x in rows:
            sq(x)
        best = min(best, time.perf_counter() - t0)
    out.append(("one compiled call taking one buffer (‖x‖² of the row)", 1e6 * best / len(rows)))
    XB = np.ascontiguousarray(X[:1])
    sqn, a, k = compiled.row_sqnorms(XB), np.ones(1), np.empty(1)
    work = np.empty(X.shape[1], dtype=np.int64)
    score, code = ck.score, compiled.KERNEL_CODES["gaussian"]
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for x in rows:
            score(XB, sqn, a, 1, code, -gamma, 2, x, 1.0, k, work)
        best = min(best, time.perf_counter() - t0)
    out.append(("compiled kernel row and score against 1 point (six buffers)",
                1e6 * best / len(rows)))
    return out


def union_shape(m: Any) -> tuple[int, np.ndarray] | None:
    """``(n, γ)`` of a multi-kernel learner: its distinct stored points (the union of its K
    support sets) and the widths of its K kernels (``γ = 0`` stands for a polynomial kernel of
    OMKC's pool: an exponential all the same); None when it has no union row."""
    from kernelstream.learners._multikernel import GAMMAS, N_POLY

    pool_g = np.concatenate([np.zeros(N_POLY), GAMMAS])
    if hasattr(m, "store") and hasattr(m.store, "n_entries"):  # omkc-*, bomkc-spa
        return int(m.store.n), pool_g
    if hasattr(m, "comps"):  # bomkc-dd / -sd: one budgeted store per kernel
        # distinct rows, not ids: an SV's id is its component's round count, and bomkc-sd's
        # components count only the rounds they learn (the same id, different points)
        X = np.concatenate([c.sv.X[: c.sv.n] for c in m.comps])
        return len(np.unique(X, axis=0)), pool_g
    pool = getattr(getattr(m, "mirror", None), "pool", None) or getattr(m, "pool", None)
    if pool is None and hasattr(getattr(m, "_hyp", None), "stores"):
        pool = m._hyp
    if pool is not None and hasattr(pool, "union_size"):  # the KernelPool learners
        return int(pool.union_size), np.asarray(pool.widths.gammas)
    if hasattr(m, "widths") and hasattr(m, "sqn") and hasattr(m, "n"):  # lkmbooks
        return int(m.n), np.asarray(m.widths.gammas)
    return None


def time_union_floor(Xp: np.ndarray, n: int, gammas: np.ndarray) -> float:
    """Seconds for the union-row floor over the rows of ``Xp``: one distance row to ``n``
    points (the first ``n`` rows) and, per kernel, ``n`` exponentials and a dot, compiled
    (``_ck_multi.floor_scores``); numpy's row, ``exp`` and product in a Python loop without
    the compiled kernels."""
    XB = np.ascontiguousarray(Xp[:n])
    ng = np.ascontiguousarray(-np.asarray(gammas, dtype=np.float64))
    K = len(ng)
    A = np.ones((K, n))
    mk = compiled.mk
    if mk is not None:
        Xc = np.ascontiguousarray(Xp)
        zz = compiled.row_sqnorms(Xc)
        out = np.empty((len(Xc), K))
        work = np.empty(2 * n + 2 * Xc.shape[1], dtype=np.int64)
        sqn = compiled.row_sqnorms(XB)
        XT = np.ascontiguousarray(XB.T)  # the points as columns, as MultiStore keeps them
        t0 = time.perf_counter()
        mk.floor_scores(XT, sqn, n, ng, A, Xc, zz, out, work)
        return time.perf_counter() - t0
    sqn = np.einsum("ij,ij->i", XB, XB)
    t0 = time.perf_counter()
    for i in range(Xp.shape[0]):
        x = Xp[i]
        d2 = np.maximum(XB.dot(x) * -2.0 + sqn + float(x @ x), 0.0)
        np.einsum("kn,kn->k", A, np.exp(ng[:, None] * d2[None, :]))
    return time.perf_counter() - t0


def time_row_floor(Xp: np.ndarray, XB: np.ndarray, gamma: float) -> float:
    """Seconds for one Gaussian row and score per row of ``Xp`` against ``XB``: the compiled
    row, in the compiled loop (``_ckernels.scores``: no Python per round), when the learners
    run on compiled kernels, else numpy's row in a Python loop."""
    ck = compiled.ck
    if ck is not None:
        XB = np.ascontiguousarray(XB)
        Xc = np.ascontiguousarray(Xp)
        zz = compiled.row_sqnorms(Xc)
        a = np.ones(len(XB))
        out, k = np.empty(len(Xc)), np.empty(len(XB))
        work = np.empty(Xc.shape[1], dtype=np.int64)
        t0 = time.perf_counter()
        ck.scores(XB, compiled.row_sqnorms(XB), a, len(XB), compiled.KERNEL_CODES["gaussian"],
                  -gamma, 2, Xc, zz, out, k, work)
        return time.perf_counter() - t0
    kern = Gaussian(gamma)
    XB = np.ascontiguousarray(XB)
    sqn = np.einsum("ij,ij->i", XB, XB)
    row = kern.row
    t0 = time.perf_counter()
    for i in range(Xp.shape[0]):
        x = Xp[i]
        row(XB, sqn, x, float(x @ x))
    return time.perf_counter() - t0


def time_projection_run(model: Any, Xp: np.ndarray) -> float:
    """Seconds of the compiled block driver over the rows of ``Xp`` on a copy of a trained
    Projectron(++) with every label 0: ``y f = 0`` counts as a mistake, so every round computes
    its row, its score and the projection ``d = K⁻¹k`` with ``kᵀd`` at the full budget (then
    ``a += 0·d`` leaves the model as it is): the row floor plus one projection per round, by
    the learners' own compiled code (NaN when the rule is not compiled)."""
    m = copy.deepcopy(model)
    if not m._compiled_rule() or m.n_support_vectors < m.budget:
        return math.nan
    args, _, _ = m._rule_args()
    zz = compiled.row_sqnorms(Xp)
    out, y0 = np.empty(len(Xp)), np.zeros(len(Xp))
    t0 = time.perf_counter()
    compiled.bk.run(*args, Xp, zz, y0, m.t, out, None)
    return time.perf_counter() - t0


def time_rff_floor(Xp: np.ndarray, D: int, gamma: float) -> float:
    """Seconds for FOGD's feature map z = [cos Ωx; sin Ωx] at D frequencies (and its score)
    per row of ``Xp``: the compiled map in the compiled loop (``_ck_features.scores``) when the
    learners run on it, else numpy's map in a Python loop."""
    rng = np.random.default_rng(0)
    omega = rng.standard_normal((D, Xp.shape[1])) * math.sqrt(2.0 * gamma)
    z = np.empty(2 * D)
    c = 1.0 / math.sqrt(D)
    fk = compiled.fk
    if fk is not None:
        Xc = np.ascontiguousarray(Xp)
        out, work = np.empty(len(Xc)), np.empty(Xc.shape[1], dtype=np.int64)
        fmap = compiled.rff_map(np.ascontiguousarray(omega.T), c)
        t0 = time.perf_counter()
        fk.scores(fmap, np.ones(2 * D), Xc, np.zeros(len(Xc)), out, None, z, work)
        return time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(Xp.shape[0]):
        u = omega @ Xp[i]
        np.cos(u, out=z[:D])
        np.sin(u, out=z[D:])
        z *= c
    return time.perf_counter() - t0


def time_rls_floor(Xp: np.ndarray, D: int, gamma: float) -> float:
    """Seconds of RFF-RLS's floor over the rows of ``Xp``: FOGD's feature map at ``D``
    (:func:`time_rff_floor`) plus, per row, its update by BLAS on ``P``'s packed triangle
    (``D(2D+1)`` doubles, as the compiled rounds keep it): ``u = P z`` (``dspmv``) and
    ``P -= r u uᵀ`` (``dspr``), which change and read every entry every round. Without scipy,
    one read-modify-write pass over those doubles per row (the memory any exact round moves)."""
    k = 2 * D
    rng = np.random.default_rng(0)
    P = np.zeros(k * (k + 1) // 2)
    P[np.arange(k) * k - np.arange(k) * (np.arange(k) - 1) // 2] = 1.0  # I, packed by rows
    Z = rng.standard_normal((64, k)) / math.sqrt(k)  # z's of unit norm on average
    t = time_rff_floor(Xp, D, gamma)
    try:
        from scipy.linalg import blas
    except ImportError:
        mul = np.multiply
        t0 = time.perf_counter()
        for _ in range(Xp.shape[0]):
            mul(P, 1.0, out=P)
        return t + time.perf_counter() - t0
    spmv, spr = blas.dspmv, blas.dspr
    t0 = time.perf_counter()
    for i in range(Xp.shape[0]):
        z = Z[i & 63]
        u = spmv(k, 1.0, P, z)
        P = spr(k, -1.0 / (1.0 + float(z @ u)), u, P, overwrite_ap=1)
    return t + time.perf_counter() - t0
