"""Random Fourier features for Gaussian kernels (Rahimi & Recht, NIPS 2007).

One draw ``Ω ∈ R^{D×d}`` with i.i.d. ``N(0, 1)`` entries serves every width: for a *frequency
scale* ``s`` the map is

    z_s(x) = D^{-1/2} [cos(s Ω x) ; sin(s Ω x)] ∈ R^{2D},

so ``z_s(x)ᵀ z_s(x') = D^{-1} Σ_i cos(s ω_iᵀ(x − x'))`` is an unbiased estimate of the Gaussian
kernel ``exp(−s² ‖x − x'‖² / 2)`` and ``‖z_s(x)‖² = 1`` exactly. The scale of a width is
``s = 1/σ`` (C-P2 convention, :func:`scale_from_sigma`) or ``s = √(2γ)`` for
``exp(−γ‖x−x'‖²)`` (:func:`scale_from_gamma`); ``√(2γ) Ω`` has rows ``N(0, 2γ I)``, the
single-kernel form of FOGD/[C-SOL].

A single-kernel learner may fold the scale into ``Ω`` once (``RFF.draw(..., scale=s)``), which
saves one multiplication per round; multi-kernel learners keep the standard draw and pass one
scale per kernel to :meth:`RFF.transform_multi`, which computes ``Ωx`` once for all widths.
:class:`FeaturePool` is the per-width weight-vector hypothesis of the learners of Li & Liao,
ECML-PKDD 2022 (RF-OKS++, RF-IOKS, RF-OKS, Raker) on such a shared draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def scale_from_gamma(gamma: float) -> float:
    """Frequency scale of ``exp(−γ‖x−x'‖²)``: ``ω ~ N(0, 2γ I)`` ⇔ ``ω = √(2γ) g``."""
    return math.sqrt(2.0 * gamma)


def scale_from_sigma(sigma: float) -> float:
    """Frequency scale of ``exp(−‖x−x'‖²/(2σ²))``: ``ω = g/σ``."""
    return 1.0 / sigma


def draw_omega(rng: np.random.Generator, n_components: int, dim: int,
               scale: float = 1.0) -> np.ndarray:
    """``Ω`` (``D × d``) with i.i.d. ``N(0, scale²)`` entries, drawn from ``rng``."""
    om = rng.standard_normal((int(n_components), int(dim)))
    if scale != 1.0:
        om *= scale
    return om


def draw_omega_t(rng: np.random.Generator, n_components: int, dim: int,
                 scale: float = 1.0) -> np.ndarray:
    """``Ωᵀ`` (``d × D``, C-contiguous) of the ``Ω`` that :func:`draw_omega` draws, the same
    numbers and the same generator state after, without ever holding ``Ω`` itself: rows of
    ``Ω`` are drawn a block at a time (the generator's stream does not depend on how the draw
    is cut) and written transposed, so the peak is one ``D × d`` matrix, not two."""
    D, d = int(n_components), int(dim)
    out = np.empty((d, D))
    step = max(1, min(-(-D // 16), (1 << 17) // max(d, 1)))  # ≤ 1 MB and ≤ 1/16 of Ω a block
    for i in range(0, D, step):
        om = rng.standard_normal((min(step, D - i), d))
        if scale != 1.0:
            om *= scale
        out[:, i:i + len(om)] = om.T
    return out


def draw_learner_omega(rng: np.random.Generator, n_components: int, dim: int, scale: float,
                       compiled: bool) -> np.ndarray:
    """A single-kernel learner's ``Ω`` (FOGD, RFF-RLS): with the compiled map (``compiled``)
    drawn straight into the ``Ωᵀ`` layout and returned as its view, so that
    :func:`compiled_layout` then copies nothing; else :func:`draw_omega`'s. The same numbers
    either way."""
    if compiled:
        return draw_omega_t(rng, n_components, dim, scale).T
    return draw_omega(rng, n_components, dim, scale)


def compiled_layout(omega: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Ωᵀ, Ω, work)`` for the compiled feature map (FOGD, RFF-RLS): ``Ωᵀ`` (``d × D``)
    contiguous, so that the projection runs over an example's non-zeros, one contiguous column
    each; ``Ω`` as its view (the state's orientation, no second copy); the map's index work
    buffer."""
    omega_t = np.ascontiguousarray(omega.T)
    return omega_t, omega_t.T, np.empty(omega.shape[1], dtype=np.int64)  # d: one per column


class PickleOmegaOnce:
    """For a learner with :func:`compiled_layout`'s ``_omega`` (a view of ``_omega_t``):
    pickle ``Ω`` once, since pickle would store the view as a second copy of the ``D × d``
    matrix."""

    def __getstate__(self) -> dict[str, Any]:
        st = self.__dict__.copy()
        if st.get("_compiled"):
            del st["_omega"]
        return st

    def __setstate__(self, st: dict[str, Any]) -> None:
        self.__dict__.update(st)
        if st.get("_compiled"):
            self._omega = st["_omega_t"].T


def features(proj: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``D^{-1/2} [cos(proj); sin(proj)]`` along the last axis, where ``proj = s Ωx`` has
    ``D`` entries in its last axis (any leading shape). ``out`` (``…×2D``) is reused if given."""
    D = proj.shape[-1]
    if out is None:
        out = np.empty((*proj.shape[:-1], 2 * D))
    np.cos(proj, out=out[..., :D])
    np.sin(proj, out=out[..., D:])
    out *= 1.0 / math.sqrt(D)
    return out


class RFF:
    """A shared random-feature draw ``Ω`` and its feature maps.

    Parameters
    ----------
    omega
        ``D × d`` frequency matrix (use :meth:`draw`; store it in a learner's state so a restored
        learner continues with the same features).

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> f = RFF.draw(rng, n_components=500, dim=3)
    >>> z = f.transform(np.ones(3), scale=scale_from_gamma(0.5))
    >>> z.shape, round(float(z @ z), 12)
    ((1000,), 1.0)
    """

    __slots__ = ("dim", "n_components", "omega")

    def __init__(self, omega: np.ndarray) -> None:
        self.omega = np.ascontiguousarray(omega, dtype=np.float64)
        self.n_components, self.dim = self.omega.shape

    @classmethod
    def draw(cls, rng: np.random.Generator, n_components: int, dim: int,
             scale: float = 1.0) -> RFF:
        return cls(draw_omega(rng, n_components, dim, scale))

    @property
    def n_features(self) -> int:
        """Length ``2D`` of a feature vector."""
        return 2 * self.n_components

    def project(self, x: np.ndarray) -> np.ndarray:
        """``Ωx`` (``D``,) for one ``x`` (``d``,), or ``X Ωᵀ`` (``n×D``) for a matrix (``n×d``)."""
        return self.omega @ x if x.ndim == 1 else x @ self.omega.T

    def transform(self, x: np.ndarray, scale: float = 1.0,
                  out: np.ndarray | None = None) -> np.ndarray:
        """``z_s(x)`` (``2D``,) for one ``x``, or one feature row per row of a matrix ``X``."""
        p = self.project(np.asarray(x, dtype=np.float64))
        if scale != 1.0:
            p *= scale
        return features(p, out)

    def transform_multi(self, x: np.ndarray, scales: Sequence[float] | np.ndarray) -> np.ndarray:
        """Feature maps for several widths sharing ``Ωx`` (computed once): shape
        ``(K, 2D)`` for one ``x`` or ``(K, n, 2D)`` for a matrix."""
        p = self.project(np.asarray(x, dtype=np.float64))
        s = np.asarray(scales, dtype=np.float64).reshape((-1,) + (1,) * p.ndim)
        return features(s * p[None])

    def kernel_estimate(self, x: np.ndarray, x2: np.ndarray, scale: float = 1.0) -> float:
        """``z_s(x)ᵀ z_s(x')`` (a Monte-Carlo estimate of the Gaussian kernel)."""
        return float(self.transform(x, scale) @ self.transform(x2, scale))


class FeaturePool:
    """One random-feature weight vector per width (Rahimi & Recht, NIPS 2007; C-P2 convention): a
    shared draw ``Ω`` (``D × d``, i.i.d. ``N(0, 1)``, from the learner's RNG) and
    ``z_i(x) = D^{-1/2}[cos(s_i Ωx); sin(s_i Ωx)]`` with one frequency scale ``s_i`` per width
    (``1/σ_i``); weights ``W`` (``K × 2D``). :meth:`eval` computes only kernel ``i``'s features
    (bandit learners), :meth:`eval_all` every kernel's from one ``Ωx`` (full-information
    learners)."""

    def __init__(self, rng: np.random.Generator, dim: int, sigmas: np.ndarray,
                 n_components: int, scales: np.ndarray | None = None) -> None:
        self.omega = draw_omega(rng, n_components, dim)
        self.scales = 1.0 / sigmas if scales is None else scales
        self._col = self.scales[:, None]
        self.W = np.zeros((len(sigmas), 2 * n_components))

    def eval(self, i: int, x: np.ndarray, xx: float) -> tuple[float, np.ndarray]:
        """``(W_i·z_i(x), z_i(x))``."""
        u = self.omega @ x
        u *= self.scales[i]
        z = features(u)
        return float(self.W[i] @ z), z

    def eval_all(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(f, Z)``: ``f_i = W_i·z_i(x)`` (``K``) and the features ``Z`` (``K × 2D``)."""
        Z = features(self._col * self.omega.dot(x)[None, :])
        return np.einsum("ij,ij->i", self.W, Z), Z

    def step(self, i: int, z: np.ndarray, coef: float, clip: float | None) -> None:
        """``W_i ← W_i + coef z_i(x)``, then (if ``clip``) the box projection
        ``clip(W_i, −clip, +clip)`` (RF-OKS++/RF-IOKS use ``clip = U/√D``)."""
        w = self.W[i]
        if coef != 0.0:
            w += coef * z
        if clip is not None:  # = np.clip(w, -clip, clip), without its Python-level wrapper
            np.minimum(w, clip, out=w)
            np.maximum(w, -clip, out=w)

    def get_state(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}omega": self.omega.copy(), f"{prefix}W": self.W.copy()}

    def set_state(self, state: dict[str, np.ndarray], prefix: str) -> None:
        # the Ω drawn again by _setup is overwritten; Learner.set_state restores the RNG last
        self.omega = np.ascontiguousarray(state[f"{prefix}omega"], dtype=np.float64)
        self.W = np.array(state[f"{prefix}W"], dtype=np.float64)
