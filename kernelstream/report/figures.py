"""The report's figures, drawn with matplotlib's object API (no pyplot: no global state, no
GUI backend) and returned as PNG bytes.

Every line is one configuration of one run: the mean over its permutations, with the band
between the lowest and the highest permutation shaded. Colours follow the configurations in
page order; the runs differ by line style.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import cast

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kernelstream.report.curves import Band, Series
from kernelstream.report.runs import LoadedRun

DPI = 100
WIDTH = 11.0  # inches: 1100 px at DPI
STYLES = ("-", "--", ":", "-.")
BINS = 30
RGB = tuple[float, float, float]  # a colour of the palette
LOG_X_RATIO = 8.0
SETTLE = 0.02


@dataclass
class Chart:
    """One figure of the page."""

    id: str
    title: str
    caption: str
    png: bytes


class _Palette:
    """A stable colour per (run, configuration)."""

    def __init__(self, runs: list[LoadedRun]) -> None:
        import matplotlib as mpl
        from matplotlib.colors import ListedColormap

        cmap = mpl.colormaps["tab10"]
        assert isinstance(cmap, ListedColormap)  # for mypy: a qualitative map lists its colours
        colors = cast("tuple[RGB, ...]", cmap.colors)  # the stub's type is any colour array
        keys = [(r.label, s.config) for r in runs for s in r.series]
        self._color: dict[tuple[str, str], RGB] = {
            k: colors[i % len(colors)] for i, k in enumerate(keys)}
        self._style = {r.label: STYLES[i % len(STYLES)] for i, r in enumerate(runs)}
        self._many = len(runs) > 1

    def color(self, run: LoadedRun, s: Series) -> RGB:
        return self._color[(run.label, s.config)]

    def style(self, run: LoadedRun) -> str:
        return self._style[run.label]

    def name(self, run: LoadedRun, s: Series) -> str:
        return f"{run.label}: {s.config}" if self._many else s.config


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _line(ax: Axes, band: Band, color: tuple[float, ...], style: str, label: str) -> None:
    ax.plot(band.x, band.mean, style, color=color, lw=1.4, label=label)
    if band.y.shape[0] > 1:
        ax.fill_between(band.x, band.lo, band.hi, color=color, alpha=0.18, lw=0)
    if band.x.size < 12:  # a few windows: show where the points are
        ax.plot(band.x, band.mean, "o", color=color, ms=3)


def _legend(ax: Axes, n: int) -> None:
    if n:
        ax.legend(fontsize=8, frameon=False, ncol=1 if n <= 6 else 2)


def _y_range(ax: Axes, bands: list[Band]) -> None:
    """Fit the y axis to the curves after their first :data:`SETTLE` of the stream, where the
    first few examples' 0 or 100 % would flatten everything else."""
    vals = [b.y[:, b.x > SETTLE * b.x[-1]] for b in bands if b.x.size]
    vals = [v[np.isfinite(v)] for v in vals]
    vals = [v for v in vals if v.size]
    if not vals:
        return
    lo, hi = float(min(v.min() for v in vals)), float(max(v.max() for v in vals))
    pad = 0.08 * (hi - lo) if hi > lo else 0.05 * abs(hi) + 1e-9
    ax.set_ylim(max(0.0, lo - pad) if lo >= 0 else lo - pad, hi + pad)


def _x_scale(axes: list[Axes], bands: list[Band]) -> None:
    """Log examples when the streams differ in length by more than :data:`LOG_X_RATIO`, so
    that a short run is not squeezed against the axis by a long one."""
    ends = [float(b.x[-1]) for b in bands if b.x.size]
    if ends and max(ends) > LOG_X_RATIO * min(ends):
        for ax in axes:
            ax.set_xscale("log")


def curves(runs: list[LoadedRun], regression: bool) -> Chart | None:
    """Cumulative and windowed mistake rate (average loss for regression) against examples."""
    pal = _Palette(runs)
    fig = Figure(figsize=(WIDTH, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    n = 0
    windows = set()
    bands, windowed = [], []
    for run in runs:
        for s in run.series:
            if s.regression != regression or s.cumulative is None:
                continue
            bands.append(s.cumulative)
            _line(left, s.cumulative, pal.color(run, s), pal.style(run), pal.name(run, s))
            if s.noskill is not None:  # the reference: a thin dotted line, the same colour
                ref = s.noskill
                if ref.x.size == 1:  # one metrics window: its value across the stream
                    ref = Band(s.cumulative.x[[0, -1]], np.repeat(ref.y, 2, axis=1))
                bands.append(ref)
                left.plot(ref.x, ref.mean, ":", color=pal.color(run, s), lw=1.2,
                          label=f"{pal.name(run, s)}: no-skill")
            if s.windowed is not None and s.windowed.x.size:
                windowed.append(s.windowed)
                _line(right, s.windowed, pal.color(run, s), pal.style(run), pal.name(run, s))
                windows.add(s.window)
            n += 1
    if not n:
        return None
    what = "average loss" if regression else "mistake rate (%)"
    left.set(title=f"cumulative {what}", xlabel="examples", ylabel=what)
    w = ", ".join(f"{v:,}" for v in sorted(windows))
    right.set(title=f"{what} over the last {w} examples", xlabel="examples", ylabel=what)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    _x_scale([left, right], bands)
    _y_range(left, bands)
    _y_range(right, windowed)
    _legend(left, n)
    ident = "fig-loss" if regression else "fig-mistakes"
    title = "Average loss" if regression else "Mistake rate"
    return Chart(ident, title, f"{what.capitalize()} against examples seen, one line per "
                 "configuration (mean over permutations; the band spans the lowest and highest "
                 "permutation). Dotted: the no-skill reference of the same streams, "
                 + ("predicting the running mean of the labels so far" if regression else
                    "predicting the majority class so far")
                 + ". Right: over a trailing window.", _png(fig))


def resources(runs: list[LoadedRun]) -> Chart | None:
    """Support vectors and examples per second over the stream."""
    pal = _Palette(runs)
    fig = Figure(figsize=(WIDTH, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    n_sv = 0
    bands = []
    speeds = []
    for run in runs:
        for s in run.series:
            if s.n_sv is not None:
                bands.append(s.n_sv)
                _line(left, s.n_sv, pal.color(run, s), pal.style(run), pal.name(run, s))
                n_sv += 1
            if s.speed is not None and np.isfinite(s.speed.y).any():
                speeds.append((run, s, s.speed))
    if not (n_sv or speeds):
        return None
    left.set(title="support vectors", xlabel="examples", ylabel="#SV")
    if speeds and max(b.x.size for _, _, b in speeds) == 1:
        # one metrics window per run (a short stream): a bar per configuration, not a column
        # of dots at one x
        names = [pal.name(run, s) for run, s, _ in speeds]
        right.barh(np.arange(len(speeds)), [float(np.nanmean(b.y)) for _, _, b in speeds],
                   color=[pal.color(run, s) for run, s, _ in speeds])
        right.set_yticks(np.arange(len(speeds)), names, fontsize=8)
        right.invert_yaxis()
        right.set_xscale("log")
        right.set(title="examples per second (learner time, one window)", xlabel="examples/s")
    else:
        for run, s, band in speeds:
            _line(right, band, pal.color(run, s), pal.style(run), pal.name(run, s))
        right.set(title="examples per second (learner time per metrics window)",
                  xlabel="examples", ylabel="examples/s")
        if speeds:
            right.set_yscale("log")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    _x_scale([left, right], bands)
    _legend(left, n_sv)
    return Chart("fig-resources", "Model size and speed",
                 "Support vectors held and examples learnt per second of learner time, over the "
                 "stream (mean over permutations; band: lowest to highest).", _png(fig))


def kernels(runs: list[LoadedRun]) -> Chart | None:
    """Heat maps of the kernel distribution of kernel-selection configurations."""
    pal = _Palette(runs)
    maps = [(run, s) for run in runs for s in run.series if s.kernels is not None]
    if not maps:
        return None
    k_max = max(s.kernels.p.shape[0] for _, s in maps if s.kernels is not None)
    fig = Figure(figsize=(WIDTH, 0.6 + len(maps) * (0.9 + 0.16 * k_max)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(maps), 1, squeeze=False)[:, 0])
    image = None
    for ax, (run, s) in zip(axes, maps, strict=True):
        km = s.kernels
        assert km is not None
        edges = np.concatenate([[0.0], km.x])
        rows = np.arange(km.p.shape[0] + 1) - 0.5
        image = ax.pcolormesh(edges, rows, km.p, cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_yticks(np.arange(km.p.shape[0]), km.labels, fontsize=7)
        ax.set_title(f"{pal.name(run, s)} ({s.learner}): {km.what}", fontsize=9)
    axes[-1].set_xlabel("examples")
    shares = {s.kernels.shares for _, s in maps if s.kernels is not None}
    label = ("share of predictions" if shares == {True} else "probability / weight"
             if shares == {False} else "probability, weight or share (panel titles)")
    if image is not None:
        fig.colorbar(image, ax=list(axes), label=label, shrink=0.9)
    return Chart("fig-kernels", "Kernel selection",
                 "Each kernel of the pool over the stream, one panel per configuration, as its "
                 "title says: the learner's kernel probabilities (the combination's weights for "
                 "a learner that combines its kernels, such as raker or OMKC) per metrics "
                 "window or, for runs of fewer than 8 metrics windows, the share of "
                 "predictions each kernel made (for a combining learner: the share in which "
                 "it had the largest weight). Darker: less.", _png(fig))


def entities(runs: list[LoadedRun]) -> Chart | None:
    """Distribution of the per-entity mistake rates (average losses for regression)."""
    pal = _Palette(runs)
    fig = Figure(figsize=(WIDTH, 3.4), layout="constrained")
    ax = fig.subplots()
    n = 0
    losses = False
    for run in runs:
        for s in run.series:
            ents = [e for e in run.entities if e.config == s.config]
            vals = np.array([e.rate if e.rate is not None else e.avg_loss for e in ents
                             if (e.rate if e.rate is not None else e.avg_loss) is not None],
                            dtype=np.float64)
            if vals.size == 0:
                continue
            losses |= ents[0].rate is None
            ax.hist(vals, bins=min(BINS, max(5, vals.size // 2)), histtype="step", lw=1.5,
                    color=pal.color(run, s), ls=pal.style(run),
                    label=f"{pal.name(run, s)} ({vals.size} entities)")
            n += 1
    if not n:
        return None
    what = "average loss" if losses else "mistake rate (%)"
    ax.set(title=f"per-entity {what} (mean over permutations)", xlabel=what,
           ylabel="entities")
    ax.grid(alpha=0.3)
    _legend(ax, n)
    return Chart("fig-entities", "Entities", f"How the entities' {what} spread: one "
                 "histogram per configuration.", _png(fig))


def all_charts(runs: list[LoadedRun]) -> list[Chart]:
    """The run figures that have something to show, in page order."""
    charts = [curves(runs, False), curves(runs, True), resources(runs), kernels(runs),
              entities(runs)]
    return [c for c in charts if c is not None]
