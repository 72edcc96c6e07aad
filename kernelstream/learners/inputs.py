"""Input checks of the learner interface (mixed into
:class:`~kernelstream.learners.base.Learner`): a row or a label is converted, or refused with a
one-line ``ValueError`` naming the learner, before anything changes; the fast lane
(:meth:`RowChecks._fast_sqnorm`) lets a row that needs no conversion through with a few
attribute reads.

Input bounds. A row is accepted when every kernel value it makes, κ(x, x) (the largest of
κ(x, ·) for the polynomial and linear kernels, 1 for the Gaussian), is <= KERNEL_MAX, and a
regression target when |y| <= Y_MAX (so y² <= KERNEL_MAX too). A round multiplies at most a
few such factors (a coefficient ∝ y, a kernel value, a loss gradient), each <= 1e100, so its
numbers stay below ~1e300 < 1.8e308 (float64's limit), with room left for the sums over
support vectors and rounds; beyond it a finite row (entries ~1e150) overflows mid-round
(OverflowError, or inf/NaN in the state). A learner whose kernels include a polynomial of
degree p therefore takes ‖x‖² <= KERNEL_MAX**(1/p) (``_max_xx``): 1e50 for the default
degree 2, ~2e33 for the multi-kernel pool's degree 3; other learners ‖x‖² <= 1e100
(|x_i| up to ~1e50: far beyond any real feature scale).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from kernelstream._suggest import row_error
from kernelstream.sparse import CSR, SparseRow

KERNEL_MAX = 1e100
Y_MAX = 1e50
_F64 = np.dtype(np.float64)  # the dtype of a row the fast lane takes as it is
_F64_TYPE = np.float64
_NOT_NUMBERS = (str, bytes, bool, np.bool_, complex, np.complexfloating)  # not labels


class RowChecks:
    """The checks of one row and one label, and the squared norms every Gaussian row needs
    (the learner's attributes below are set by ``Learner``)."""

    name: ClassVar[str]
    task: str
    accepts_sparse: ClassVar[bool]
    max_poly_degree: ClassVar[int]
    _max_xx: float = KERNEL_MAX  # the bound on ‖x‖² (``_input_bound``); class value: old pickles
    hparams: dict[str, Any]
    dim: int | None
    sparse: bool

    def _init_dim(self, d: int, sparse: bool = False, nnz: int | None = None) -> None:
        raise NotImplementedError  # Learner's: the first valid example fixes the width

    def _check_x(self, x: Any) -> tuple[Any, float]:
        """Return ``x`` as a float64 vector (or a :class:`SparseRow` in sparse mode) and
        ``‖x‖²``. The squared norm is needed by every Gaussian row anyway and is non-finite iff
        ``x`` holds NaN/inf (or overflows), so it doubles as the validity check at no extra
        cost."""
        if isinstance(x, CSR):
            return self._check_sparse_x(x)
        x = self._as_float(x, False)
        if x.ndim != 1:
            raise ValueError(f"{self.name}: x must be a 1-D feature vector, got shape {x.shape}")
        if not x.flags.c_contiguous:  # a strided view scores as its copy (BLAS sums in
            x = np.ascontiguousarray(x)  # another order) and as the rows of a block do
        self._width(x.shape[0])
        xx = self._sqnorm(x)
        self._check_xx(xx)
        if self.dim is None:  # only a valid first example fixes the dimension
            self._init_dim(x.shape[0])
        return x, xx

    def _input_bound(self) -> float:
        """The largest ‖x‖² this learner accepts (:data:`KERNEL_MAX` says why)."""
        p = self.max_poly_degree
        if self.hparams.get("kernel") == "polynomial":
            p = max(p, int(self.hparams.get("degree", 1)))
        return KERNEL_MAX ** (1.0 / p)

    def _check_xx(self, xx: float, row: str = "x") -> None:
        if not xx <= self._max_xx:  # NaN fails the comparison too
            what = ("contains NaN or infinite values (or overflows)" if not math.isfinite(xx)
                    else f"is too large: ‖x‖² = {xx:.3g} > {self._max_xx:.3g}, the bound "
                         "that keeps its kernel values finite (rescale the features)")
            raise ValueError(f"{self.name}: {row} {what}")

    def _as_float(self, x: Any, many: bool) -> np.ndarray:
        """``x`` as a float64 array, or a ValueError naming the learner: strings, complex
        numbers and ragged rows are not rows of numbers."""
        try:
            a = np.asarray(x)
            if a.dtype.kind not in "biuf":
                raise ValueError(f"got an array of dtype {a.dtype}" if a.dtype.kind != "O"
                                 else "got values that are not numbers")
            return np.asarray(a, dtype=np.float64) if a.dtype != _F64 else a
        except (TypeError, ValueError) as exc:  # a dict row: say what is expected
            raise row_error(self.name, x, many=many) or ValueError(
                f"{self.name}: {'X must be a 2-D array' if many else 'x must be a 1-D vector'} "
                f"of real numbers ({exc})") from None

    def _width(self, nf: int) -> None:
        if self.dim is None:
            if nf <= 0:
                raise ValueError(f"{self.name}: x must have at least one feature")
        elif nf != self.dim:
            raise ValueError(
                f"{self.name}: expected {self.dim} features (fixed by the first example), "
                f"got {nf}"
            )

    def _check_sparse_x(self, X: CSR) -> tuple[Any, float]:
        """One sparse example (a 1-row CSR): validated, then a :class:`SparseRow` in sparse
        mode or a dense vector otherwise."""
        if X.n_rows != 1:
            raise ValueError(f"{self.name}: a sparse x must be a 1-row CSR, got {X.n_rows} rows "
                             "(use predict_learn_many for blocks)")
        nf = int(X.n_features)
        self._width(nf)
        try:  # the checks a block's rows get (index and value types, lengths, order), on
            X = X.canonical().check()  # int64/float64 C arrays, as the kernels read them
        except ValueError as e:
            raise ValueError(f"{self.name}: bad sparse x: {e}") from None
        a, b = int(X.indptr[0]), int(X.indptr[1])
        idx, vals = X.indices[a:b], X.data[a:b]
        xx = float(vals @ vals)
        self._check_xx(xx)
        if self.dim is None:
            self._init_dim(nf, sparse=True, nnz=len(idx))
        return self._sparse_input(idx, vals, nf, xx)

    def _sparse_input(self, idx: np.ndarray, vals: np.ndarray, nf: int,
                      xx: float) -> tuple[Any, float]:
        if self.sparse:
            return SparseRow(idx, vals, nf), xx  # canonical CSR rows: int64, float64
        x = np.zeros(nf)  # dense mode: the d-wide row (check_width allowed this width)
        x[idx] = vals
        return x, self._sqnorm(x)

    def _check_y(self, y: Any) -> float:
        t = type(y)
        if t is float or t is _F64_TYPE:  # the common labels: no further type check (hot path)
            yf = float(y)
        else:
            try:
                if isinstance(y, _NOT_NUMBERS):  # "1" or True is no label; complex loses a part
                    raise TypeError(y)
                yf = float(y)
            except (TypeError, ValueError):
                raise ValueError(f"{self.name}: label must be a real number, got {y!r}") from None
        if self.task == "classification":
            if yf != 1.0 and yf != -1.0:
                raise ValueError(
                    f"{self.name}: classification labels must be -1 or +1, got {y!r} "
                    "(kernelstream.data.load maps any two labels to ±1)"
                )
        elif not abs(yf) <= Y_MAX:  # NaN fails it too
            raise ValueError(f"{self.name}: regression target must be finite with |y| <= "
                             f"{Y_MAX:g} (the bound that keeps the rounds finite), got {yf!r}")
        return yf

    def _fast_sqnorm(self, x: Any) -> float:
        """``‖x‖²`` of a row that needs no conversion: a C-contiguous float64 vector of the
        learner's width in dense mode (``_check_x`` would return it as it is, with this norm);
        NaN for every other input, which then takes ``_check_x``. A few attribute reads, no
        allocation: on one row, conversion and checks cost as much as a budgeted round."""
        if (type(x) is np.ndarray and x.dtype is _F64 and x.ndim == 1 and not self.sparse
                and x.shape[0] == self.dim and x.flags.c_contiguous):
            xx = self._sqnorm(x)
            return xx if xx <= self._max_xx else math.nan  # too large: _check_x says so
        return math.nan

    def _sqnorm(self, x: np.ndarray) -> float:
        """``‖x‖²`` of a dense example; :meth:`_row_sqnorms` must give the same numbers."""
        return float(x @ x)

    def _row_sqnorms(self, X: np.ndarray) -> np.ndarray:
        """:meth:`_sqnorm` of every row of a block."""
        out = np.empty(X.shape[0])
        for i in range(X.shape[0]):
            xi = X[i]
            out[i] = float(xi @ xi)
        return out
