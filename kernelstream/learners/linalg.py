"""Linear-algebra helpers shared by the projection and sketching learners.

* :func:`pinv` — SVD pseudo-inverse with the package's tolerance ``max(1e-8, 1e-12 σ_max)``.
* :func:`top_eigh` — the ``k`` largest eigenpairs of a symmetric PSD matrix, exact
  (``numpy.linalg.eigh``, deterministic) or randomized (Halko–Martinsson–Tropp range finder with
  oversampling and power iterations; consumes the caller's ``rng``).
* Bordered-inverse helpers that maintain ``K_S^{-1}`` (and ``K_S``) of a growing/shrinking point
  set *in place* inside a pre-allocated ``cap × cap`` buffer whose leading ``n × n`` block is the
  live matrix, so per-round work touches slices only (no ``np.block``/``concatenate``).

The in-place helpers follow the :class:`~kernelstream.learners.store.SVStore` slot convention:
a new point goes to slot ``n``; removing slot ``j`` moves the last slot into ``j``.
"""

from __future__ import annotations

import numpy as np

PINV_ATOL = 1e-8
PINV_RTOL = 1e-12


def pinv(A: np.ndarray, atol: float = PINV_ATOL, rtol: float = PINV_RTOL) -> np.ndarray:
    """Moore–Penrose pseudo-inverse via SVD; singular values ``≤ max(atol, rtol·σ_max)`` are
    treated as zero ([C-FORKS] uses the absolute 1e-8)."""
    A = np.asarray(A, dtype=np.float64)
    if A.size == 0:
        return np.zeros((A.shape[1], A.shape[0]) if A.ndim == 2 else A.shape)
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    tol = max(atol, rtol * float(s[0]))  # s is sorted in decreasing order
    keep = s > tol
    return (Vt[keep].T / s[keep]) @ U[:, keep].T


def orth(Y: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the column space of ``Y`` (reduced QR)."""
    return np.linalg.qr(Y)[0]


def top_eigh(
    A: np.ndarray,
    k: int,
    exact: bool = True,
    rng: np.random.Generator | None = None,
    oversample: int = 10,
    n_iter: int = 2,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenpairs of a symmetric PSD matrix ``A`` (``n × n``).

    Returns ``(lam, V)`` with ``lam`` (``k``,) in decreasing order and orthonormal columns
    ``V`` (``n × k``), so ``A ≈ V diag(lam) Vᵀ``. ``k`` is clipped to ``n``.

    ``exact=True`` uses ``numpy.linalg.eigh`` (deterministic; O(n³), cheap for the ``n ≤ ~500``
    of the budgeted learners). ``exact=False`` is the randomized algorithm
    (Halko, Martinsson & Tropp 2011): ``G ~ N(0,1)^{n×(k+o)}``, ``Y = A G``, ``q`` power
    iterations ``Y = A orth(Y)``, ``Q = orth(Y)``, eigen-decomposition of ``Qᵀ A Q``. It draws
    ``G`` from ``rng`` (required), so it advances the learner's generator.
    """
    A = np.asarray(A, dtype=np.float64)
    n = A.shape[0]
    k = max(0, min(int(k), n))
    if exact:
        lam, V = np.linalg.eigh(A)  # ascending
        return lam[::-1][:k].copy(), V[:, ::-1][:, :k].copy()
    if rng is None:
        raise ValueError("top_eigh(exact=False) needs the learner's rng")
    ell = min(k + int(oversample), n)
    Y = A @ rng.standard_normal((n, ell))
    for _ in range(int(n_iter)):
        Y = A @ orth(Y)
    Q = orth(Y)
    Bm = Q.T @ A @ Q
    Bm = 0.5 * (Bm + Bm.T)  # symmetrise round-off before eigh
    lam, W = np.linalg.eigh(Bm)
    lam, W = lam[::-1][:k], W[:, ::-1][:, :k]
    return lam.copy(), Q @ W


# -- the Projectron's projection, in the compiled code's order ----------------------------------
def project_rows(M: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``d = Mᵀk`` with each ``d_i = Σ_j M_ji k_j`` summed from 0 in index order (``M`` is a
    ``K⁻¹``, symmetric up to round-off): the order of the compiled projection
    (``_ck_budget.c``, ``kinv_apply``), so both give the same bits. numpy's reduction over the
    leading axis of a C-contiguous array adds whole rows in turn."""
    return np.add.reduce(M * k[:, None], axis=0, initial=0.0)


def dot4(u: np.ndarray, v: np.ndarray) -> float:
    """``⟨u, v⟩`` in the compiled code's four-lane order: lane ``l`` sums the products at
    indices ``≡ l (mod 4)`` in order, the tail goes to lane 0, then ``(l0 + l1) + (l2 + l3)``."""
    p = u * v
    m = len(p) - len(p) % 4
    s = np.add.reduce(p[:m].reshape(-1, 4), axis=0, initial=0.0).tolist()
    s0 = s[0]
    for t in p[m:].tolist():
        s0 += t
    return (s0 + s[1]) + (s[2] + s[3])


# -- bordered inverse of a Gram matrix -----------------------------------------------------------
def bordered_inverse(Kinv: np.ndarray, d: np.ndarray, delta: float) -> np.ndarray:
    """Inverse of ``[[K, k], [kᵀ, c]]`` from ``K⁻¹``, ``d = K⁻¹k`` and the Schur complement
    ``Δ = c − kᵀd`` (> 0): ``[[K⁻¹ + d dᵀ/Δ, −d/Δ], [−dᵀ/Δ, 1/Δ]]`` (allocating version)."""
    n = Kinv.shape[0]
    out = np.empty((n + 1, n + 1))
    out[:n, :n] = Kinv
    bordered_inverse_append(out, n, d, delta)
    return out


def bordered_inverse_append(buf: np.ndarray, n: int, d: np.ndarray | None,
                            delta: float) -> None:
    """In place: ``buf[:n, :n]`` holds ``K⁻¹``; write the inverse of the Gram matrix grown by
    one point into ``buf[:n+1, :n+1]`` (the bordered-inverse formula of Projectron, Orabona et al.
    2009; ``d = K⁻¹k``, None when ``n = 0``). O(n²)."""
    inv = 1.0 / delta
    if n:
        assert d is not None  # for mypy: only the first point comes without a projection
        e = d * (-inv)  # −d/Δ: the new border; K⁻¹ += d dᵀ/Δ = outer(d, −e)
        buf[:n, :n] -= np.multiply.outer(d, e)
        buf[:n, n] = e
        buf[n, :n] = e
    buf[n, n] = inv


def inverse_remove(buf: np.ndarray, n: int, j: int) -> None:
    """In place: ``buf[:n, :n]`` holds ``K⁻¹`` of ``n`` points; leave in ``buf[:n-1, :n-1]`` the
    inverse of the Gram matrix without point ``j``, with the last point moved into slot ``j``
    (the :meth:`SVStore.remove` convention). Downdate: with ``K⁻¹ = [[E, b], [bᵀ, c]]``
    (``j`` permuted last), the reduced inverse is ``E − b bᵀ / c``. O(n²)."""
    last = n - 1
    if j != last:  # symmetric permutation swapping j and last
        buf[[j, last], :n] = buf[[last, j], :n]
        buf[:n, [j, last]] = buf[:n, [last, j]]
    if last:
        b = buf[:last, last].copy()
        buf[:last, :last] -= np.multiply.outer(b, b / buf[last, last])


def gram_append(buf: np.ndarray, n: int, k: np.ndarray, kxx: float) -> None:
    """In place: grow the Gram matrix in ``buf[:n, :n]`` by a point with kernel row ``k`` (n,)
    and self-similarity ``kxx`` (``k`` may be ``None`` when ``n = 0``)."""
    if n:
        buf[:n, n] = k
        buf[n, :n] = k
    buf[n, n] = kxx


def gram_remove(buf: np.ndarray, n: int, j: int) -> None:
    """In place: drop point ``j`` from the Gram matrix in ``buf[:n, :n]``, moving the last point
    into slot ``j`` (the :meth:`SVStore.remove` convention)."""
    last = n - 1
    if j != last:
        buf[j, :n] = buf[last, :n]
        buf[:n, j] = buf[:n, last]
        buf[j, j] = buf[last, last]


ALIGN = 64  # bytes: a cache line, and the width of an AVX-512 load


def aligned_zeros(side: int) -> np.ndarray:
    """A ``side × side`` zero matrix whose data starts on a 64-byte boundary. The compiled
    projection (``kinv_apply``) reads ``K⁻¹`` in 32-byte vectors along its rows; numpy's own
    allocations are 16-byte aligned, which makes such loads straddle two cache lines
    (a projection ~25% slower at B = 200). Rows stay aligned when ``8 | side``."""
    raw = np.zeros(side * side + ALIGN // 8)
    off = (-raw.ctypes.data % ALIGN) // 8
    return raw[off:off + side * side].reshape(side, side)


def is_aligned(a: np.ndarray) -> bool:
    """Whether ``a``'s data starts on a 64-byte boundary (see :func:`aligned_zeros`)."""
    return a.ctypes.data % ALIGN == 0


def grow_square(buf: np.ndarray, n: int, cap: int) -> np.ndarray:
    """A ``cap × cap`` buffer (64-byte aligned) holding ``buf[:n, :n]`` in its leading block."""
    new = aligned_zeros(cap)
    new[:n, :n] = buf[:n, :n]
    return new
