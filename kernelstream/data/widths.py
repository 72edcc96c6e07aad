"""The Gaussian width a run uses when none is given (``gamma=auto``), estimated from the data.

A fixed ``gamma`` cannot suit every data set: ``exp(-gamma ||x - x'||^2)`` is ~1 for every
pair when the squared distances are small against ``1/gamma`` and ~0 when they are large, and
both make a kernel learner predict one class. The distances' scale depends on the dimension
and the features' units, so ``gamma=auto`` takes it from the data: once, at the start of a run,
from a reservoir of its first :data:`RESERVOIR_ROWS` rows (the first rows of a file, at most its
``--limit`` rows, the rows the run learns; of ``--sample``'s drawn rows; the first records of
a stream), and the number
is what the run records (``summary.json``, the outputs' parameters, ``--params-from``), so
that a rerun from those records is exact.

Two estimators were measured (``benchmarks/defaults.py``, ``benchmarks/results/defaults.md``):

* :func:`scale_gamma`, scikit-learn's ``gamma="scale"``: ``1 / (d · Var X)``, the variance
  over every entry of the reservoir (zeros of sparse rows included), i.e. about
  ``2 / E||x - x'||^2``;
* :func:`median_gamma`, the median heuristic: ``1 / median ||x - x'||^2`` over seeded random
  pairs of the reservoir's rows.

``auto`` is :func:`median_gamma`. With bpa-s (then the default on every file) on the 18 shared
classification sets it made fewer mistakes than ``scale`` on 9 sets, more on 8 (one tie), and
met the no-skill target (≤ 0.8 × the majority-class rate) on 12 sets against 11 (it wins on
covtype, news20, spambase, svmguide3; ``scale`` on madelon, rcv1, bananas); on the regression
sets the two gave the same MSE ratios within 0.01. Both handle sparse rows
(``kernelstream.sparse.CSR``) at a cost proportional to the non-zeros: a squared distance is
``|x|^2 + |x'|^2 - 2 x·x'`` with the dot product over the common indices. Scaled rows
(``--scale 01``) stay sparse too: a difference of min-max scaled rows is the unscaled
difference over each column's span, so the reservoir is never densified (a wide file's took
24 GiB); the rounded estimates are those of the dense computation on every shared set. The
estimate is rounded to 4 significant digits, so the value printed is the value learnt with.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kernelstream.data.errors import ParseError
from kernelstream.data.hashing import hash_row
from kernelstream.data.options import AUTO_SPARSE_WIDTH
from kernelstream.data.rows import iter_file_rows
from kernelstream.data.scaling import KERNEL_MAX, learnable_rows
from kernelstream.sparse import CSR

if TYPE_CHECKING:
    from kernelstream.data.options import ReadOptions
    from kernelstream.data.rows import ParsedRow

AUTO = "auto"
RESERVOIR_ROWS = 1000  # the first rows the width is estimated from
MEDIAN_PAIRS = 5000  # random pairs of reservoir rows the median heuristic measures
_SEED = 20240527  # the pairs' seed: the estimate is a function of the reservoir only

Rows = np.ndarray | CSR


def auto_factor(value: Any) -> float | None:
    """The multiple of the data-driven width that ``value`` asks for: 1 for ``"auto"``, F
    for ``"auto*F"`` (``kernelstream tune``'s default grid); None for anything else."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower().replace(" ", "")
    if text == AUTO:
        return 1.0
    head, sep, factor = text.partition("*")
    if head != AUTO or not sep:
        return None
    try:
        f = float(factor)
    except ValueError:
        return None
    return f if math.isfinite(f) and f > 0 else None


def is_auto(value: Any) -> bool:
    """``value`` asks for the data-driven width (``"auto"`` or ``"auto*F"``, any case)."""
    return auto_factor(value) is not None


# kernelstream tune's grid of a Gaussian width when no --grid is given: factors of 2 around
# the data-driven width, wide enough that the best cell is rarely on the edge
TUNE_FACTORS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def tune_grid() -> str:
    """``--grid`` text of the default width grid: ``gamma=auto*0.125,...,auto*8``."""
    return "gamma=" + ",".join(f"auto*{f:g}" for f in TUNE_FACTORS)


def rounded(gamma: float) -> float:
    """``gamma`` to 4 significant digits (what a run records and prints)."""
    return float(f"{gamma:.4g}")


def scale_gamma(rows: Rows) -> float:
    """scikit-learn's ``"scale"``: ``1 / (d · Var X)`` over every entry of ``rows`` (``n × d``,
    dense or CSR; the implicit zeros count); 1.0 when the entries do not vary (as there)."""
    n, d = rows.shape
    if n == 0 or d == 0:
        return 1.0
    vals = rows.data if isinstance(rows, CSR) else np.asarray(rows, np.float64).ravel()
    entries = float(n) * float(d)
    mean = math.fsum(vals.tolist()) / entries
    var = max(math.fsum((vals * vals).tolist()) / entries - mean * mean, 0.0)
    return 1.0 / (d * var) if var > 0 and math.isfinite(var) else 1.0


def median_gamma(rows: Rows, pairs: int = MEDIAN_PAIRS) -> float:
    """The median heuristic: ``1 / median ||x_i - x_j||^2`` over ``pairs`` seeded random pairs
    ``i != j`` of ``rows`` (:func:`median_distance`); 1.0 when there is no usable distance."""
    med = median_distance(rows, pairs)
    return 1.0 if med is None else 1.0 / med


def median_distance(rows: Rows, pairs: int = MEDIAN_PAIRS) -> float | None:
    """``median ||x_i - x_j||^2`` over ``pairs`` seeded random pairs ``i != j`` of ``rows``
    the learners take (a row whose squared norm is over ``data.scaling.KERNEL_MAX``, values
    near 1e308 for one, is one they refuse: left out), of the finite distances only (one that
    overflows says nothing of the scale, dense or sparse alike); the mean when over half the
    pairs coincide; None when no distance is usable (fewer than two rows, all coincide, every
    distance overflows, or the median is too small to invert)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if isinstance(rows, CSR):
            good = rows.row_sq_norms() <= KERNEL_MAX
        else:
            rows = np.asarray(rows, np.float64)
            good = learnable_rows(rows)
        if not good.all():
            rows = rows[good]
    n = rows.shape[0]
    if n < 2:
        return None
    rng = np.random.default_rng(_SEED)
    i = rng.integers(0, n, pairs)
    j = (i + rng.integers(1, n, pairs)) % n  # j != i
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if isinstance(rows, CSR):
            sq = rows.row_sq_norms()
            dots = np.array([_sparse_dot(rows, a, b)
                             for a, b in zip(i.tolist(), j.tolist(), strict=True)])
            dist = np.maximum(sq[i] + sq[j] - 2.0 * dots, 0.0)
        else:
            X = np.asarray(rows, np.float64)
            diff = X[i] - X[j]
            dist = np.einsum("ij,ij->i", diff, diff)
        dist = dist[np.isfinite(dist)]
        if not dist.size:
            return None
        med = float(np.median(dist))
        if med <= 0:
            med = float(dist.mean())
            if not math.isfinite(med):  # the sum overflowed
                med = float(np.sum(dist / dist.size))
    return med if 0 < med and math.isfinite(med) and math.isfinite(1.0 / med) else None


def _sparse_dot(rows: CSR, a: int, b: int) -> float:
    ia, va = rows.row(a)
    ib, vb = rows.row(b)
    _, pa, pb = np.intersect1d(ia, ib, assume_unique=True, return_indices=True)
    return float(np.dot(va[pa], vb[pb]))


def auto_gamma(rows: Rows) -> float:
    """The width ``gamma=auto`` stands for, from a reservoir ``rows`` (module docstring):
    :func:`median_gamma`, rounded to 4 significant digits."""
    return rounded(median_gamma(rows))


def gamma_to_sigma(gamma: float) -> float:
    """The σ of ``exp(-||x - x'||^2 / (2σ^2))`` equal to ``exp(-gamma ||x - x'||^2)``."""
    return math.sqrt(1.0 / (2.0 * gamma))


def centred_sigmas(gamma: float, grid: Sequence[float]) -> str:
    """A σ grid of the same ratios as ``grid`` (a learner's default widths), shifted so that
    its geometric middle is the σ of ``gamma``: e.g. ``2^-2:1:3`` (6 widths, factor 2) →
    ``σ·2^-2.5 … σ·2^2.5``, written as a list of widths (4 significant digits) that
    ``kernelstream.learners.kernels.parse_sigmas`` reads."""
    logs = [math.log(s) for s in grid]
    shift = gamma_to_sigma(gamma) / math.exp(sum(logs) / len(logs))
    return ",".join(f"{s * shift:.4g}" for s in grid)


def reservoir_from_rows(rows: Iterable[ParsedRow], width: int | None = None,
                        hash_bits: int | None = None, scale: str = "none",
                        limit: int = RESERVOIR_ROWS) -> Rows:
    """The first ``limit`` of ``rows`` (parsed records: LIBSVM 1-based indices or dense
    values; labels are not looked at) as the learners would get them: ``width`` columns
    (default: the reservoir's widest row), indices hashed into ``2^hash_bits`` columns when
    given; CSR, or dense and min-max scaled over the reservoir itself when ``scale`` is not
    ``none`` (the run scales over all its rows: the reservoir's is an estimate of it)."""
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    for row in itertools.islice(rows, limit):
        if row.idx is None:
            c = np.flatnonzero(row.vals).astype(np.int64)
            v = np.asarray(row.vals, np.float64)[c]
        else:
            c, v = np.asarray(row.idx, np.int64) - 1, np.asarray(row.vals, np.float64)
        if hash_bits is not None:
            c, v = hash_row(c, v, hash_bits)
        cols.append(c)
        vals.append(v)
    if hash_bits is not None:
        width = 1 << hash_bits
    seen = max((int(c.max()) + 1 for c in cols if len(c)), default=1)
    width = seen if width is None else width
    keep = [c < width for c in cols]  # a wider row is the run's error to report, not ours
    indptr = np.zeros(len(cols) + 1, np.int64)
    np.cumsum([int(k.sum()) for k in keep], out=indptr[1:])
    pairs = list(zip(cols, vals, keep, strict=True))
    csr = CSR(indptr,
              np.concatenate([c[k] for c, _, k in pairs]) if pairs else np.zeros(0, np.int64),
              np.concatenate([v[k] for _, v, k in pairs]) if pairs else np.zeros(0),
              max(width, 1))
    if scale == "none" or not cols:
        return csr
    # the spans of the rows the learners take, as the run's own scaling (fit_minmax) has them
    with np.errstate(over="ignore", invalid="ignore"):  # values near 1e308: refused rows
        good = csr.row_sq_norms() <= KERNEL_MAX
    return _scaled_for_distances(csr if good.all() else csr[good], scale)


def _scaled_for_distances(rows: CSR, scale: str) -> CSR:
    """``rows`` min-max scaled over themselves (``data.scaling.scale_minmax``), as far as the
    distances between rows go, without densifying (a wide file's dense reservoir took 24 GiB):
    scaling is ``(x - lo) / span`` per column (``pm1``: twice that, less 1), so a difference
    of two rows is the difference of the unscaled rows over ``span`` (times 2); the shift
    cancels and the zeros stay zeros. Constant columns map to 0 there: dropped here."""
    n, d = rows.shape
    cols = rows.indices
    # over the columns written only: arrays of the full width took GiBs (--n-features 1e8)
    # before a wide dense run was refused; unwritten columns hold no data to scale
    used, at = np.unique(cols, return_inverse=True)
    m = len(used)
    lo = np.zeros(m)
    hi = np.zeros(m)
    np.minimum.at(lo, at, rows.data)  # the implicit zeros count where a row has none
    np.maximum.at(hi, at, rows.data)
    full = np.bincount(at, minlength=m) >= n  # every row writes it: zero is not among them
    if full.any():
        written = np.full(m, np.inf)
        np.minimum.at(written, at, rows.data)
        lo[full] = written[full]
        written = np.full(m, -np.inf)
        np.maximum.at(written, at, rows.data)
        hi[full] = written[full]
    span = hi - lo
    factor = np.where(span > 0, (2.0 if scale == "pm1" else 1.0) / np.where(span > 0, span, 1.0),
                      0.0)
    return CSR(rows.indptr, cols, rows.data * factor[at], d)


def array_gamma(X: Rows, scale: str = "none") -> float:
    """``gamma=auto`` of rows in memory (the Python API's ``evaluate``): the estimate from
    ``X``'s first :data:`RESERVOIR_ROWS` rows in their order, taken as a run over a file
    holding them takes its first rows (:func:`reservoir_from_rows`: the non-zeros, or
    min-max scaled over the reservoir itself when ``scale`` is the scaling ``X`` was loaded
    with), so both give the same number on the same rows."""
    head = X[:RESERVOIR_ROWS]
    rows = head if isinstance(head, CSR) else CSR.from_dense(np.asarray(head, np.float64))
    if scale == "none":  # the file's: distances from the non-zeros
        return auto_gamma(rows)
    # X scaled over all its rows: min-max is affine per column, so scaling its head over
    # itself gives the head of the file scaled over itself, as the file's estimate has it
    # (kept sparse, as there)
    return auto_gamma(_scaled_for_distances(rows, scale))


def file_rows(opts: ReadOptions) -> str:
    """``"sparse"`` or ``"dense"``: the rows a run over the file of ``opts`` gives its learners
    (``ReadOptions.sparse_rows``) at its width: ``n_features``, the hashed width, else the
    widest of the file's first :data:`RESERVOIR_ROWS` rows (read only when the format and
    options allow sparse rows at all). What a replay's default learner is chosen by
    (``pipelines.config.DEFAULT_BY_ROWS``)."""
    if not opts.sparse_rows(AUTO_SPARSE_WIDTH + 1):  # dense at any width (CSV, --scale, ...)
        return "dense"
    if opts.hash_features is not None:
        width = 1 << opts.hash_features
    elif opts.n_features:
        width = opts.n_features
    else:
        good = (row for _, _, row in iter_file_rows(opts) if not isinstance(row, ParseError))
        width = reservoir_from_rows(good).shape[1]
    return "sparse" if opts.sparse_rows(width) else "dense"


def file_gamma(opts: ReadOptions) -> float:
    """``gamma=auto`` of a run over the file of ``opts``: the estimate from the file's first
    :data:`RESERVOIR_ROWS` parsed rows (bad lines skipped), at most its ``limit`` rows (the
    rows the run learns)."""
    return auto_gamma(file_reservoir(opts))


def file_reservoir(opts: ReadOptions) -> Rows:
    """The rows :func:`file_gamma` measures (:func:`reservoir_from_rows` of the file's first
    good rows, at most its ``limit``)."""
    good: Iterable[ParsedRow] = (row for _, _, row in iter_file_rows(opts)
                                 if not isinstance(row, ParseError))
    if opts.limit is not None:
        good = itertools.islice(good, opts.limit)
    return reservoir_from_rows(good, opts.n_features, opts.hash_features, opts.scale)


def rows_gamma(rows: Iterable[ParsedRow], opts: ReadOptions) -> float:
    """``gamma=auto`` of a replay that reads ``rows`` (its first good rows, in its order) as
    ``opts`` says: of a file (:func:`file_gamma`) or of a Kafka topic's first records
    (``kafka_client.blocks.head_rows``), so that both give the same number on the same rows."""
    return auto_gamma(reservoir_from_rows(rows, opts.n_features, opts.hash_features,
                                          opts.scale))
