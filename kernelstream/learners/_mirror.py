"""The AO2MD bookkeeping (Liao & Li, ECML-PKDD 2021, §3.3), shared by B(AO)2KS, EA2OKS
and BEA2OKS.

:class:`OptimisticMirror` keeps per kernel ``f'_{t−1,i}`` (a :class:`~kernelstream.learners.
_pools.KernelPool` store, points merged by stream id) with its tracked norm, the reservoir
``V`` (Vitter's Algorithm R) with its kernel matrices, the values ``h_i = f'(x_v)`` at the reservoir
points, and applies the O(M) generic correction ``f' ← Π_U(f' + a κ(x_t,·) + b μ̃)``;
:class:`RoundContext` is what one round computes for ``x_t`` and both predict and update read.

Its own module because it is one paper's algorithmic state, larger than the rest of the
selection block and used by three learners only; :mod:`kernelstream.learners._selection`
re-exports both names. The per-kernel arithmetic of :meth:`OptimisticMirror.correct` and of
its projection factors runs compiled when built (``_ck_multi.c``): the same IEEE operations in
the same order as the Python code (bit-identical).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from kernelstream.learners import compiled
from kernelstream.learners._pools import GaussianWidths, KernelPool, sq_dist_row
from kernelstream.learners.experts import Reservoir


class RoundContext(NamedTuple):
    """What ``OptimisticMirror.context`` computes for ``x_t`` (used by predict and update)."""

    v: int  # reservoir size at the start of the round
    d2v: np.ndarray  # ‖x_v − x_t‖² (v)
    kv: np.ndarray  # κ_i(x_v, x_t) (K × v)
    mux: np.ndarray  # μ̃_i(x_t) (K)
    ip: np.ndarray  # ⟨f'_{t−1,i}, μ̃_i⟩ (K)
    scale: np.ndarray  # min(1, U/‖f̄_{t,i}‖) (K)
    lam: float  # step size λ of the round


class OptimisticMirror:
    """Per-kernel state of the adaptive optimistic mirror descent (Liao & Li 2021, §3.2).

    For each kernel ``i``: ``F_i`` = ``f'_{t−1,i}`` (an :class:`SVStore` of :class:`KernelPool`,
    points merged by stream id), ``n2_i = ‖f'_{t−1,i}‖²``, ``H[i, v] = f'_{t−1,i}(x_v)`` at the
    reservoir points. Shared by all kernels: the reservoir ``V`` (``M`` examples, Algorithm R),
    its kernel matrices ``KV`` (``K × M × M``), ``KVy = KV y_V``
    and ``m2_i = ‖μ̃_i‖² = y_Vᵀ KV_i y_V / v²``, where ``μ̃_i = (1/v) Σ_V y κ_i(x, ·)``.

    Per round: :meth:`context` (one distance row to the reservoir, reused by every width) gives
    ``μ̃_i(x_t)``, ``⟨f'_{t−1,i}, μ̃_i⟩`` and the projection factor of
    ``f̄_{t,i} = f'_{t−1,i} + λ μ̃_i``, so ``f_{t,i}(x_t) = s_i (f'_{t−1,i}(x_t) + λ μ̃_i(x_t))``;
    :meth:`correct` applies ``f'_{t,i} = Π_U(f'_{t−1,i} + a_i κ_i(x_t, ·) + b_i μ̃_i)`` in O(M) per
    kernel besides the append; :meth:`end_round` offers ``(x_t, y_t)`` to the reservoir and
    refreshes what depends on it.
    """

    def __init__(self, widths: GaussianWidths, dim: int, reservoir_size: int,
                 radius: float) -> None:
        K, M = widths.K, int(reservoir_size)
        self.widths = widths
        self.K, self.M = K, M
        self.radius = float(radius)
        self.U2 = self.radius * self.radius
        self.pool = KernelPool(widths, dim)
        self.res = Reservoir(M, dim)
        self.sqnV = np.zeros(M)
        self.KV = np.zeros((K, M, M))
        self.KVy = np.zeros((K, M))
        self.m2 = np.zeros(K)
        self.H = np.zeros((K, M))
        self.n2 = np.zeros(K)
        # position in store i of the point held in reservoir slot j (-1: not in the store yet)
        self.pos = np.full((K, M), -1, dtype=np.int64)
        self._missing = np.zeros(K, dtype=bool)  # some reservoir point is absent from F_i
        self._new_pos = np.full(K, -1, dtype=np.int64)  # where x_t went this round

    # -- per round ------------------------------------------------------------------------------
    def context(self, x: np.ndarray, xx: float, lam: float) -> RoundContext:
        v = self.res.n
        K = self.K
        if v == 0:
            z = np.zeros(K)
            e = np.zeros(0)
            d2v, kv, mux, ip = e, np.zeros((K, 0)), z, z
        else:
            d2v = sq_dist_row(self.res.X[:v], self.sqnV[:v], x, xx)
            kv = self.widths.rows(d2v)
            yv = self.res.y[:v]
            mux = kv.dot(yv)
            mux /= v
            ip = self.H[:, :v].dot(yv)
            ip /= v
        # ‖f̄_{t,i}‖² = ‖f'‖² + λ(2⟨f', μ̃⟩ + λ‖μ̃‖²) and the projection factor, in Python
        # floats per kernel (as in correct), or the same operations compiled
        U2, radius = self.U2, self.radius
        mk = compiled.mk
        if mk is not None:
            sc = np.empty(K)
            mk.mirror_scale(self.n2, ip, self.m2, lam, v, U2, radius, sc)
            return RoundContext(v, d2v, kv, mux, ip, sc, lam)
        scale = [1.0] * K
        for i, (n2, ipi, m2) in enumerate(zip(self.n2.tolist(), ip.tolist(), self.m2.tolist(),
                                              strict=True)):
            nbar2 = n2 + lam * (2.0 * ipi + lam * m2) if v else n2
            if nbar2 > U2:
                scale[i] = radius / math.sqrt(nbar2)
        return RoundContext(v, d2v, kv, mux, ip, np.array(scale), lam)

    def predict(self, i: int, fx: float, ctx: RoundContext) -> float:
        """``f_{t,i}(x_t)`` from ``fx = f'_{t−1,i}(x_t)``."""
        return float(ctx.scale[i]) * (fx + ctx.lam * float(ctx.mux[i]))

    def correct(self, a: np.ndarray, b: np.ndarray, x: np.ndarray, xx: float, fx: np.ndarray,
                ctx: RoundContext, t: int) -> np.ndarray:
        """``f'_{t,i} = Π_U(f'_{t−1,i} + a_i κ_i(x_t,·) + b_i μ̃_i)`` for every kernel.

        ``fx_i = f'_{t−1,i}(x_t)`` is needed where ``a_i ≠ 0`` (NaN elsewhere is fine). Returns
        ``f'_{t,i}(x_t)`` (NaN where ``fx_i`` is NaN). Kernels with ``a_i = b_i = 0`` are left
        unchanged.
        """
        v = ctx.v
        stores = self.pool.stores
        new_pos = self._new_pos
        new_pos.fill(-1)
        mk = compiled.mk
        if mk is not None:
            # the appends in Python (a few kernels a round), the rest of the loop below and the
            # updates of H in C, in the same order: x_t first, then the reservoir points F_i
            # lacks, then the merge and the projection
            # count_nonzero: the cheapest of numpy's tests on a K-vector (.any() is ~5x slower)
            if np.count_nonzero(a):
                for i in np.flatnonzero(a).tolist():
                    new_pos[i] = stores[i].append(x, xx, float(a[i]), id_=t, s=t)
            if v and np.count_nonzero(self._missing):
                for i in np.flatnonzero(self._missing & (b != 0.0)).tolist():
                    self._store_reservoir(i, v)
            out = np.empty(self.K)
            mk.mirror_correct(stores, self.pos, v, ctx.kv, self.KVy, self.res.y, a, b, fx,
                              self.n2, self.m2, ctx.ip, ctx.mux, self.H, self.U2, self.radius,
                              out)
            return out
        if v:
            H = self.H[:, :v]
            H += a[:, None] * ctx.kv
            H += (b / v)[:, None] * self.KVy[:, :v]
            coefs = np.multiply.outer(b, self.res.y[:v] / v)  # row i: b_i y_V / v
        # K is small: scalar Python arithmetic per kernel beats numpy calls on K-vectors
        n2 = self.n2.tolist()
        m2 = self.m2.tolist()
        ip = ctx.ip.tolist()
        mux = ctx.mux.tolist()
        a_l = a.tolist()
        b_l = b.tolist()
        fx_l = fx.tolist()
        out = fx_l[:]
        U2, radius = self.U2, self.radius
        missing, pos = self._missing, self.pos
        for i in range(self.K):
            ai, bi = a_l[i], b_l[i]
            if ai == 0.0 and bi == 0.0:
                continue
            sv = stores[i]
            # ‖f + aκ_x + bμ̃‖² = ‖f‖² + a² + b² m2 + 2a f(x) + 2b ⟨f, μ̃⟩ + 2ab μ̃(x)
            nn = n2[i] + bi * (bi * m2[i] + 2.0 * ip[i])
            if ai != 0.0:
                nn += ai * (ai + 2.0 * fx_l[i] + 2.0 * bi * mux[i])
                new_pos[i] = sv.append(x, xx, ai, id_=t, s=t)
            if bi != 0.0 and v:
                # F_i += Σ_v (b_i y_v / v) κ_i(x_v, ·), merged by stream id
                if missing[i]:
                    self._store_reservoir(i, v)
                sv.a[pos[i, :v]] += coefs[i]
            fac = 1.0
            if nn > U2:
                fac = radius / math.sqrt(nn)
                sv.a[: sv.n] *= fac
                if v:
                    self.H[i, :v] *= fac
                nn = U2
            elif nn < 0.0:  # round-off
                nn = 0.0
            n2[i] = nn
            sv.norm2 = nn
            out[i] = fac * (fx_l[i] + ai + bi * mux[i])
        self.n2 = np.array(n2)
        return np.array(out)

    def _store_reservoir(self, i: int, v: int) -> None:
        """Append to ``F_i`` (coefficient 0) the reservoir points it does not hold yet, so that
        ``F_i += Σ_v c_v κ_i(x_v, ·)`` merges by stream id."""
        sv = self.pool.stores[i]
        pos = self.pos[i]
        res = self.res
        for j in np.flatnonzero(pos[:v] < 0):
            pos[j] = sv.append(res.X[j], float(self.sqnV[j]), 0.0, id_=int(res.ids[j]),
                               s=int(res.ids[j]))
        self._missing[i] = False

    def end_round(self, rng: np.random.Generator, x: np.ndarray, xx: float, y: float, t: int,
                  ctx: RoundContext, fpx: np.ndarray) -> int:
        """Offer ``(x_t, y_t)`` (id ``t``) to the reservoir (Algorithm R) and refresh ``KV``,
        ``KVy``, ``m2``, ``H`` and the positions. ``fpx_i = f'_{t,i}(x_t)`` (NaN: evaluated
        here if needed). Returns the slot written or -1."""
        j = self.res.offer(rng, x, y, t)
        if j < 0:
            return -1
        v_old, v = ctx.v, self.res.n
        self.sqnV[j] = xx
        KV = self.KV
        KV[:, j, :v_old] = ctx.kv
        KV[:, :v_old, j] = ctx.kv
        KV[:, j, j] = 1.0
        yv = self.res.y[:v]
        self.KVy[:, :v] = KV[:, :v, :v] @ yv
        self.m2 = (self.KVy[:, :v] @ yv) / (v * v)
        todo = np.flatnonzero(np.isnan(fpx))
        if len(todo):
            fpx[todo] = self.pool.scores(x, xx, todo)
        self.H[:, j] = fpx
        self.pos[:, j] = self._new_pos
        self._missing |= self._new_pos < 0
        return j

    def reset_kernel(self, i: int) -> None:
        """``f'_{i} ← 0`` (BEA2OKS restart): empty store, zero norm and ``h_i``."""
        self.pool.reset(i)
        self.n2[i] = 0.0
        self.H[i] = 0.0
        self.pos[i] = -1
        self._missing[i] = self.res.n > 0

    # -- diagnostics and state ------------------------------------------------------------------
    def exact_h(self) -> np.ndarray:
        """``f'_i(x_v)`` recomputed from the stores (tests)."""
        v = self.res.n
        out = np.zeros((self.K, v))
        for i in range(self.K):
            for j in range(v):
                out[i, j] = self.pool.score(i, self.res.X[j], float(self.sqnV[j]))[0]
        return out

    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        v = self.res.n
        st = self.pool.get_state(f"{prefix}F")
        st.update(self.res.get_state(f"{prefix}V."))
        # the reservoir's Gram matrices are stored rather than rebuilt, so a
        # restored learner continues bit-identically (they are O(K M²), M ≈ ln T)
        st[f"{prefix}sqnV"] = self.sqnV[:v].copy()
        st[f"{prefix}KV"] = self.KV[:, :v, :v].copy()
        st[f"{prefix}KVy"] = self.KVy[:, :v].copy()
        st[f"{prefix}m2"] = self.m2.copy()
        st[f"{prefix}n2"] = self.n2.copy()
        st[f"{prefix}H"] = self.H[:, :v].copy()
        st[f"{prefix}pos"] = self.pos[:, :v].copy()
        st[f"{prefix}missing"] = self._missing.copy()
        return st

    def set_state(self, state: dict[str, np.ndarray], prefix: str) -> None:
        self.pool.set_state(state, f"{prefix}F")
        self.res.set_state(state, f"{prefix}V.")
        v = self.res.n
        self.sqnV[:v] = state[f"{prefix}sqnV"]
        self.KV[:, :v, :v] = state[f"{prefix}KV"]
        self.KVy[:, :v] = state[f"{prefix}KVy"]
        self.m2 = np.array(state[f"{prefix}m2"], dtype=np.float64)
        self.n2 = np.array(state[f"{prefix}n2"], dtype=np.float64)
        self.H[:, :v] = state[f"{prefix}H"]
        self.pos[:, :v] = state[f"{prefix}pos"]
        self._missing = np.array(state[f"{prefix}missing"], dtype=bool)

