"""Curves over the stream, one set per learner configuration of a run, with every permutation
kept so that a figure can draw the mean and the band between the permutations.

The mistake-rate (or loss) curves and #SV come from ``predictions/`` (one row per example, so
they have the stream's own resolution), reading only the columns they need; examples/s and the
kernel distribution come from ``metrics/`` (one row per window). A run with more prediction
rows than :data:`MAX_PREDICTION_ROWS` is drawn from ``metrics/`` alone. Every curve is
sampled at no more than :data:`MAX_POINTS` points, so a long stream draws as fast as a short
one.

With ``--key-by`` every entity has its own stream; a configuration's curve is then the
permuted stream over all entities (each entity's rows are that stream restricted to the
entity), rebuilt from the rows' data-set ids with :func:`kernelstream.seeding.permutation`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernelstream import learners
from kernelstream._arrow import pa, pc
from kernelstream.engine.noskill import NoSkill
from kernelstream.learners.kernels import parse_sigmas
from kernelstream.learners.losses import LOSSES
from kernelstream.seeding import permutation as stream_order

MAX_POINTS = 400
MAX_PREDICTION_ROWS = 20_000_000
# the kernel heat map uses predictions.selected_kernel when metrics has fewer windows than this
MIN_KERNEL_WINDOWS = 8
KERNEL_BINS = 50


@dataclass
class Band:
    """A curve per permutation at common points ``x`` (examples seen): ``y[r]`` is
    permutation ``r``'s."""

    x: np.ndarray
    y: np.ndarray

    def _over_permutations(self, f: Any) -> np.ndarray:
        with warnings.catch_warnings():  # a point where every permutation is NaN stays NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.asarray(f(self.y, axis=0))

    @property
    def mean(self) -> np.ndarray:
        return self._over_permutations(np.nanmean)

    @property
    def lo(self) -> np.ndarray:
        return self._over_permutations(np.nanmin)

    @property
    def hi(self) -> np.ndarray:
        return self._over_permutations(np.nanmax)


@dataclass
class KernelMap:
    """Kernel weights over the stream (mean over permutations): ``p[k, t]`` at ``x[t]``."""

    x: np.ndarray
    p: np.ndarray
    labels: list[str]
    what: str  # what p is: the learner's probabilities (weights), or the share of predictions
    shares: bool = False  # p is the share of predictions (else the learner's distribution)


@dataclass
class Series:
    """What the figures draw for one configuration of one run."""

    config: str
    learner: str
    task: str
    loss_name: str
    cumulative: Band | None = None  # mistake rate in % (classification) or average loss
    # the same for the no-skill predictor of the same stream (engine.noskill: the majority
    # class, the running mean), from the metrics rows; None for outputs without it
    noskill: Band | None = None
    windowed: Band | None = None
    window: int = 0
    n_sv: Band | None = None
    speed: Band | None = None  # window examples/s
    kernels: KernelMap | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def regression(self) -> bool:
        return self.task == "regression"


def sample_points(n: int, k: int = MAX_POINTS) -> np.ndarray:
    """At most ``k`` indices of ``0..n-1``, evenly spread, always with the last."""
    if n <= k:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, k)).astype(np.int64))


def nice_window(n: int) -> int:
    """A round window (1, 2 or 5 times a power of ten) of about a fiftieth of the stream."""
    target = max(1.0, n / 50)
    p = 10 ** math.floor(math.log10(target))
    return int(min((m * p for m in (1, 2, 5, 10)), key=lambda v: abs(v - target)))


def _numpy(col: pa.ChunkedArray | pa.Array, fill: Any) -> np.ndarray:
    return np.asarray(pc.fill_null(col, fill).to_numpy(zero_copy_only=False))


def _codes(col: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Integer codes and the distinct values of a string column."""
    enc = pc.dictionary_encode(col).combine_chunks()
    return (np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64),
            [str(v) for v in enc.dictionary.to_pylist()])


# -- predictions ---------------------------------------------------------------------------------
def global_order(ids: np.ndarray, entities: np.ndarray, positions: np.ndarray, seed: int,
                 permutation: int) -> np.ndarray:
    """Indices putting one (configuration, permutation) group of a ``--key-by`` run into the
    order of the permuted stream over all entities; by data-set id when the ids are not the
    rows of a permuted replay (a Kafka topic) or the result contradicts the entities' own
    positions."""
    n = len(ids)
    by_id = np.argsort(ids, kind="stable")
    if n == 0 or ids.min() < 0 or ids.max() != n - 1 or np.unique(ids).size != n:
        return by_id
    rank = np.empty(n, dtype=np.int64)
    rank[stream_order(n, seed, permutation)] = np.arange(n)
    order = np.argsort(rank[ids], kind="stable")
    # each entity's positions must come out increasing, or this was not that stream
    e, p = entities[order], positions[order]
    within = np.lexsort((np.arange(n), e))
    same = e[within][1:] == e[within][:-1]
    if not np.all(np.diff(p[within])[same] > 0):
        return by_id
    return order


def _sv_total(entities: np.ndarray, n_sv: np.ndarray) -> np.ndarray:
    """Support vectors held by all entities together after each row (rows in stream order):
    each entity contributes its latest count."""
    n = len(n_sv)
    within = np.lexsort((np.arange(n), entities))
    delta = np.empty(n, dtype=np.int64)
    s = n_sv[within]
    d = np.diff(s, prepend=0)
    first = np.ones(n, dtype=bool)
    first[1:] = entities[within][1:] != entities[within][:-1]
    d[first] = s[first]
    delta[within] = d
    return np.cumsum(delta)


def _windowed(c: np.ndarray, v: np.ndarray, idx: np.ndarray, w: int) -> np.ndarray:
    """Mean over the last ``w`` rows at each index, from cumulative sums ``c`` (values) and
    ``v`` (valid rows)."""
    lo = idx - w
    c0 = np.where(lo >= 0, c[np.maximum(lo, 0)], 0.0)
    v0 = np.where(lo >= 0, v[np.maximum(lo, 0)], 0)
    cnt = v[idx] - v0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, (c[idx] - c0) / np.maximum(cnt, 1), np.nan)


def prediction_curves(table: pa.Table, series: dict[str, Series], seed: int,
                      key_by: bool) -> None:
    """Fill the cumulative and windowed curves and #SV of ``series`` (by configuration) from
    the prediction rows of a run."""
    cfg, names = _codes(table.column("config"))
    perm = np.asarray(table.column("permutation").to_numpy(), dtype=np.int64)
    pos = np.asarray(table.column("position").to_numpy(), dtype=np.int64)
    ent = _codes(table.column("entity"))[0] if key_by else np.zeros(len(pos), np.int64)
    ids = np.asarray(table.column("id").to_numpy(), dtype=np.int64) if key_by else pos
    mistake = table.column("mistake")
    m_valid = np.asarray(pc.is_valid(mistake).to_numpy(zero_copy_only=False))
    m_val = _numpy(mistake, False).astype(np.float64) * 100.0
    loss = table.column("loss")
    l_valid = np.asarray(pc.is_valid(loss).to_numpy(zero_copy_only=False))
    l_val = _numpy(loss, 0.0).astype(np.float64)
    n_sv = np.asarray(table.column("n_support_vectors").to_numpy(), dtype=np.int64)
    # the no-skill reference needs each stream's labels (one model per stream: not key_by)
    labels = (None if key_by or "label" not in table.column_names else
              (_numpy(table.column("label"), 0.0), _numpy(table.column("predicted"), 0.0)))

    groups = np.lexsort((pos, perm, cfg))
    bounds = np.flatnonzero(np.diff(cfg[groups]) | np.diff(perm[groups])) + 1
    per_config: dict[str, list[tuple[int, np.ndarray]]] = {}
    for rows in np.split(groups, bounds):
        if rows.size:
            per_config.setdefault(names[cfg[rows[0]]], []).append((int(perm[rows[0]]), rows))
    for name, groups_of in per_config.items():
        s = series.get(name)
        if s is None:
            continue
        ordered = []
        for r, rows in sorted(groups_of, key=lambda g: g[0]):
            if key_by:
                rows = rows[global_order(ids[rows], ent[rows], pos[rows], seed, r)]
            ordered.append(rows)
        n = min(len(rows) for rows in ordered)
        idx = sample_points(n)
        w = nice_window(n)
        valid, val = (l_valid, l_val) if s.regression else (m_valid, m_val)
        cum, win, sv, base = [], [], [], []
        for rows in ordered:
            if labels is not None:
                base.append(_noskill_curve(labels, rows[valid[rows]], np.cumsum(valid[rows]),
                                           idx, s))
            v = np.cumsum(valid[rows])
            c = np.cumsum(np.where(valid[rows], val[rows], 0.0))
            with np.errstate(invalid="ignore", divide="ignore"):
                cum.append(np.where(v[idx] > 0, c[idx] / np.maximum(v[idx], 1), np.nan))
            win.append(_windowed(c, v, idx, w))
            counts = _sv_total(ent[rows], n_sv[rows]) if key_by else n_sv[rows]
            sv.append(counts[idx].astype(np.float64))
        # stream positions (a checkpointed run's start where the previous run ended)
        x = idx + 1 if key_by else pos[ordered[0][idx]] + 1
        full = idx + 1 >= w  # a window not yet full is a noisy prefix of the stream
        s.cumulative = Band(x, np.array(cum))
        s.windowed = Band(x[full], np.array(win)[:, full])
        s.window = w
        s.n_sv = Band(x, np.array(sv))
        if base:
            s.noskill = Band(x, np.array(base))


def _noskill_curve(labels: tuple[np.ndarray, np.ndarray], learnt: np.ndarray,
                   count: np.ndarray, idx: np.ndarray, s: Series) -> np.ndarray:
    """The no-skill predictor's cumulative mistake rate (average loss for regression) at the
    sample points ``idx`` of one stream, whose learnt rows are ``learnt`` (in order;
    ``count[i]``: how many of them are among the first ``i + 1`` rows), by the shared
    accumulator (:class:`~kernelstream.engine.noskill.NoSkill`)."""
    y, predicted = labels
    loss = LOSSES.get(s.loss_name)
    acc, done, out = NoSkill(), 0, np.full(idx.shape[0], np.nan)
    key = "noskill_avg_loss" if s.regression else "noskill_mistake_rate"
    for j, i in enumerate(idx.tolist()):
        upto = int(count[i])
        rows = learnt[done:upto]
        acc.add(y[rows], predicted[rows], not s.regression, None if loss is None else loss.value)
        done = upto
        v = acc.figures(not s.regression)[key]
        out[j] = np.nan if v is None else v
    return out


# -- metrics --------------------------------------------------------------------------------------
def _stream_rows(metrics: pa.Table, config: str) -> dict[int, list[dict[str, Any]]]:
    """The metrics rows of one configuration (no entities) by permutation, in stream order,
    one row per window end (a final row that repeats the last window is dropped)."""
    rows = metrics.filter(pc.equal(metrics.column("config"), config)).to_pylist()
    by_perm: dict[int, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["permutation"], r["window_end"], r["final"])):
        lst = by_perm.setdefault(r["permutation"], [])
        if not lst or lst[-1]["window_end"] != r["window_end"]:
            lst.append(r)
    return by_perm


def _band(by_perm: dict[int, list[dict[str, Any]]], column: str) -> Band | None:
    """``column`` over the windows, per permutation, at the first permutation's window ends."""
    perms = sorted(by_perm)
    if not perms or not by_perm[perms[0]]:
        return None
    x = np.array([r["window_end"] for r in by_perm[perms[0]]], dtype=np.float64)
    ys = []
    for p in perms:
        xs = np.array([r["window_end"] for r in by_perm[p]], dtype=np.float64)
        v = np.array([np.nan if r.get(column) is None else r[column] for r in by_perm[p]],
                     dtype=np.float64)
        ys.append(v if np.array_equal(xs, x) else np.interp(x, xs, v))
    return Band(x, np.array(ys))


def combines(learner: str) -> bool:
    """The learner predicts with a weighted combination of its kernels (Raker, OMKC, ...):
    its distribution is weights, its ``selected_kernel`` only the largest of them."""
    try:
        return learners.get(learner).combines_kernels
    except ValueError:  # a learner this version does not know: say nothing more
        return False


def kernel_labels(params: dict[str, Any], k: int) -> list[str]:
    """Names of the ``k`` kernels of a pool: the Gaussian widths when the configuration's
    ``sigmas`` give ``k`` of them, else their indices."""
    sig = params.get("sigmas")
    if sig is not None:
        try:
            vals = parse_sigmas(sig)
        except ValueError:
            vals = np.array([])
        if len(vals) == k:
            return [f"σ=2^{math.log2(v):g}" if math.log2(v).is_integer() else f"σ={v:g}"
                    for v in vals]
    return [f"kernel {i}" for i in range(k)]


def metrics_curves(metrics: pa.Table, series: dict[str, Series],
                   params: dict[str, dict[str, Any]], from_predictions: bool) -> None:
    """Fill examples/s, the no-skill reference and the kernel distribution of ``series``
    from the metrics rows; the mistake (or loss) curves and #SV too when the predictions
    were not read."""
    for name, s in series.items():
        by_perm = _stream_rows(metrics, name)
        if not by_perm:
            continue
        s.speed = _band(by_perm, "window_examples_per_second")
        if s.noskill is None:  # not drawn from the predictions
            base = _band(by_perm, "noskill_avg_loss" if s.regression
                         else "noskill_mistake_rate")
            s.noskill = base if base is not None and np.isfinite(base.y).any() else None
        if not from_predictions:
            s.cumulative = _band(by_perm, "avg_loss" if s.regression else "mistake_rate")
            s.windowed = _band(by_perm, "window_avg_loss" if s.regression
                               else "window_mistake_rate")
            first = by_perm[min(by_perm)]
            s.window = int(first[0]["window_end"] - first[0]["window_start"])
            s.n_sv = _band(by_perm, "n_support_vectors")
        dists = [[r.get("kernel_distribution") for r in rows] for rows in by_perm.values()]
        if any(d is None for rows in dists for d in rows) or not dists[0]:
            continue
        t = min(len(rows) for rows in dists)
        p = np.mean([np.array(rows[:t], dtype=np.float64) for rows in dists], axis=0).T
        x = np.array([r["window_end"] for r in by_perm[min(by_perm)]][:t], dtype=np.float64)
        what = ("kernel weights of the combination" if combines(s.learner)
                else "kernel probabilities")
        s.kernels = KernelMap(x, p, kernel_labels(params.get(name, {}), p.shape[0]),
                              f"{what} (mean over permutations)")


def selection_shares(table: pa.Table, series: dict[str, Series],
                     params: dict[str, dict[str, Any]]) -> None:
    """For kernel-selection configurations whose metrics have too few windows for a heat
    map: the share of predictions made by each kernel, in :data:`KERNEL_BINS` stretches of
    the stream (mean over permutations)."""
    want = [n for n, s in series.items()
            if s.kernels is not None and s.kernels.x.size < MIN_KERNEL_WINDOWS]
    if not want or "selected_kernel" not in table.column_names:
        return
    for name in want:
        t = table.filter(pc.equal(table.column("config"), name))
        sel = t.column("selected_kernel")
        if sel.null_count == len(sel):
            continue
        km = series[name].kernels
        assert km is not None  # want: the configurations with a kernel map
        k = km.p.shape[0]
        perm = np.asarray(t.column("permutation").to_numpy(), dtype=np.int64)
        pos = np.asarray(t.column("position").to_numpy(), dtype=np.int64)
        kern = _numpy(sel, -1).astype(np.int64)
        n = int(pos.max()) + 1
        bins = min(KERNEL_BINS, n)
        b = np.minimum(pos * bins // n, bins - 1)
        shares = []
        for r in np.unique(perm):
            m = (perm == r) & (kern >= 0) & (kern < k)
            counts = np.zeros((k, bins))
            np.add.at(counts, (kern[m], b[m]), 1.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                shares.append(counts / np.maximum(counts.sum(axis=0), 1.0))
        edges = (np.arange(bins) + 1) * n / bins
        what = ("share of predictions in which each kernel had the largest weight "
                f"({series[name].learner} combines the kernels)" if combines(series[name].learner)
                else "share of predictions made by each kernel")
        series[name].kernels = KernelMap(
            edges, np.mean(shares, axis=0), kernel_labels(params.get(name, {}), k),
            f"{what}, {bins} stretches (mean over permutations)", shares=True)
