"""A table's runs as stream keys of the replay pipeline.

A reproduction table is a grid of (data set, learner configuration, permutation) keys. The
runs of one data set become one ``kernelstream replay`` command line: every configuration is
a labelled ``--learner`` with scoped ``-p`` values, ``-R`` permutations, the run's ``--seed``,
``--runner``, ``--workers`` and the Beam options given after ``--``. So the papers' protocols
use the one test-then-train loop of the engine, on any runner, and ``--workers N`` shards the
keys over processes exactly as it does for ``replay``. Each key's result is read back from the
replay's ``metrics/`` output (:func:`kernelstream.pipelines.replay.replay.read_outputs`).

The learner seed of a key is ``seeding.learner_seed(seed, r, learner)`` and its stream is
``seeding.permutation(n, seed, r)`` of the prepared file (``experiments.datasets.prepare``):
the seeding the old per-script loops used, so the numbers are the same bit for bit.

A data set whose permutation r is an order of its own (a toolbox's permutations, an
adversarial stream) gets one file per r, arranged so that the replay's permutation r reads
it in that order; that replay runs shard r of r + 1 (``ReplayConfig.shard``,
which owns exactly the streams of permutation r), and with ``--workers N`` these
one-permutation replays run on N processes. A run whose parameters depend on the permutation
(``Run.permutation``: e.g. Proj-KA's width, selected on the permutation's first rows) is such
a replay of the shared file, with the other runs of that data set and permutation.

A key's result also carries the learner's state after the last example that tables report
(``Learner.diagnostics`` and ``kernel_distribution``, from the replay's final metrics row).
"""

from __future__ import annotations

import contextlib
import io
import math
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelstream.experiments import datasets as dsets


@dataclass(frozen=True)
class Run:
    """One learner configuration of a table on one data set (run on permutations 0..R−1).

    ``stream``: an adversarial stream preset (``kernelstream.engine.orders.PRESETS``) of the data
    set instead of its permutations. ``switch``: also find each key's stage switch (a
    SkeGD's ``init_round``) in the predictions (:func:`switch_round`). ``permutations``: a
    run with fewer permutations than the table (a protocol's per-row R). ``permutation``: run
    on that permutation r only (parameters chosen per permutation, e.g. a width selected on
    the permutation's first rows); its results list has the one entry."""

    dataset: str  # a key of ``datasets.DATASETS``
    learner: str  # registry name
    params: dict[str, Any]
    stream: str | None = None
    switch: bool = False
    permutations: int | None = None  # R of this run (None: the context's)
    permutation: int | None = None  # run on this permutation only

    def param_args(self, label: str) -> list[str]:
        out = []
        for k, v in self.params.items():
            out += ["-p", f"{label}.{k}={_text(v)}"]
        # a width the protocol leaves to the learner is its fixed default, as published: not
        # the replay's data-driven gamma=auto
        from kernelstream import learners

        for p in learners.get(self.learner).params:
            if p.name in ("gamma", "sigmas") and p.name not in self.params and not (
                    p.name == "gamma" and "sigma" in self.params):
                out += ["-p", f"{label}.{p.name}={_text(p.default)}"]
        return out


def _text(v: Any) -> str:
    """A parameter value as ``-p`` text that parses back to the same value (floats by
    ``repr``: exact)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return ",".join(_text(x) for x in v)
    return str(v)


@dataclass
class Context:
    """Where the data and the runs' outputs are, and how the replays run."""

    data_dir: Path
    work_dir: Path  # prepared data files and the replays' outputs
    permutations: int
    seed: int = 0
    runner: str = "direct"
    workers: int = 1
    pipeline_args: list[str] = field(default_factory=list)
    quiet: bool = False
    keep_outputs: bool = False
    replays: int = 0  # replay runs so far (names their output directories)

    def log(self, msg: str) -> None:
        if not self.quiet:
            print(f"[reproduce] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class KeyResult:
    """The result of one key: a configuration on one permutation."""

    r: int
    mistake_rate: float  # % of the examples
    n_sv: int
    seconds: float  # the learner's own time (predict + learn)
    examples: int
    mistakes: int
    # with ``Run.switch``: T₀ (1-based; None: never switched) and the mistakes after it
    init_round: int | None = None
    mistakes_after_init: int | None = None
    avg_loss: float | None = None  # the mean prequential loss (exact sum over the rows)
    # the learner's state after the last example: ``Learner.diagnostics`` (e.g. OKS-SIL's
    # ``kernel_gamma``) and a selection learner's ``kernel_distribution`` (None: none)
    diagnostics: dict[str, Any] | None = None
    kernel_distribution: list[float] | None = None

    def record(self) -> dict[str, Any]:
        """The per-run entry of a results JSON."""
        return {"r": self.r, "mistake_rate": self.mistake_rate, "n_sv": self.n_sv,
                "seconds": self.seconds}


class ReplayError(RuntimeError):
    """A replay of the grid ended with a non-zero exit code."""


def run_grid(runs: Sequence[Run], ctx: Context) -> list[list[KeyResult]]:
    """The results of every run on permutations 0..R−1 (in the order of ``runs``; each a list
    in permutation order; R the run's ``permutations`` or the context's). Identical runs are
    learnt once; the runs of one data set and R share one replay."""
    unique = list(dict.fromkeys(_key(r) for r in runs))
    switch = {_key(r) for r in runs if r.switch}
    by_key: dict[tuple[Any, ...], list[KeyResult]] = {}
    data = ctx.work_dir / "data"
    perms = {k: k[4] or ctx.permutations for k in unique}
    pinned = [k for k in unique if k[5] is not None]
    if any(k[3] is not None or dsets.DATASETS[k[0]].perm_file is not None for k in pinned):
        raise ValueError("a run of one permutation reads the seeded permutations of a data "
                         "set, not a stream of its own")
    free = [k for k in unique if k[5] is None]
    for ds, stream, R in dict.fromkeys((k[0], k[3], perms[k]) for k in free):
        mine = [k for k in free if k[0] == ds and k[3] == stream and perms[k] == R]
        what = ds if stream is None else stream
        if stream is None and dsets.DATASETS[ds].perm_file is None:
            path = dsets.prepare(ds, ctx.data_dir, data)
            res = _replay(path, what, mine, R, ctx, switch)
            for k, rr in zip(mine, res, strict=True):
                by_key[k] = rr
            continue
        # a stream of its own per permutation (a toolbox's order, an adversarial stream):
        # one file each, arranged so that the replay's permutation r reads it in that order
        tasks = []
        for r in range(R):
            if stream is None:
                path = dsets.prepare_toolbox_order(ds, ctx.data_dir, data, ctx.seed, r)
            else:
                path = dsets.prepare_stream(ds, stream, ctx.data_dir, data, ctx.seed, r)
            ctx.replays += 1
            tasks.append((path, f"{what} r={r}", mine, r + 1, ctx, switch, r,
                          ctx.work_dir / f"replay-{ctx.replays:03d}"))
        for k in mine:
            by_key[k] = []
        for res in _each_permutation(tasks, ctx.workers):
            for k, rr in zip(mine, res, strict=True):
                by_key[k].extend(rr)
    # runs of one permutation: per (data set, r), one replay of exactly permutation r
    tasks = []
    for ds, r in dict.fromkeys((k[0], k[5]) for k in pinned):
        mine = [k for k in pinned if k[0] == ds and k[5] == r]
        ctx.replays += 1
        tasks.append((dsets.prepare(ds, ctx.data_dir, data), f"{ds} r={r}", mine, r + 1, ctx,
                      switch, r, ctx.work_dir / f"replay-{ctx.replays:03d}"))
    for t, res in zip(tasks, _each_permutation(tasks, ctx.workers), strict=True):
        for k, rr in zip(t[2], res, strict=True):
            by_key[k] = rr
    return [by_key[_key(r)] for r in runs]


def _each_permutation(tasks: list[tuple[Any, ...]], workers: int) -> list[list[list[KeyResult]]]:
    """The one-permutation replays of ``tasks`` (arguments of :func:`_replay`), in order: with
    ``workers`` > 1 on that many processes (fresh interpreters: a forked Beam runner is not
    safe), since each of these replays is a single process's shard."""
    if workers <= 1 or len(tasks) <= 1:
        return [_replay_task(t) for t in tasks]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    # the children inherit this environment (one BLAS thread: kernelstream.pipelines.cli)
    with ProcessPoolExecutor(min(workers, len(tasks)),
                             mp_context=mp.get_context("spawn")) as pool:
        return list(pool.map(_replay_task, tasks))


def _replay_task(t: tuple[Any, ...]) -> list[list[KeyResult]]:
    import logging

    from kernelstream.pipelines.cli import _BeamImportNoise

    root = logging.getLogger()  # a pool process imports Beam without the command's filter
    if not any(isinstance(f, _BeamImportNoise) for f in root.filters):
        root.addFilter(_BeamImportNoise())
    path, what, keys, permutations, ctx, switch, only, out = t
    return _replay(path, what, keys, permutations, ctx, switch, only=only, out=out)


def _key(run: Run) -> tuple[Any, ...]:
    return (run.dataset, run.learner, tuple(sorted((k, _text(v)) for k, v in run.params.items())),
            run.stream, run.permutations, run.permutation)


def switch_round(loss: Any, budget: int) -> int | None:
    """T₀ (1-based) of SkeGD (``learners.skegd``, without ``reference_quirks``) from its
    per-row losses: stage 1 buffers every round with a positive loss, and the round after the
    ``budget``-th such round initialises stage 2. None: the stream ended first."""
    import numpy as np

    pos = np.flatnonzero(np.asarray(loss, dtype=np.float64) > 0.0)
    if pos.size < budget or int(pos[budget - 1]) + 1 >= len(loss):
        return None
    return int(pos[budget - 1]) + 2


def replay_argv(path: Path, keys: Sequence[tuple[Any, ...]], permutations: int, ctx: Context,
                out: Path) -> list[str]:
    """The ``kernelstream replay`` command line of one data set's keys (labels ``c0``, ``c1``,
    ...), Beam's options after ``--``."""
    name = keys[0][0]
    argv = ["replay", str(path), "--format", "libsvm", "--n-features",
            str(dsets.DATASETS[name].n_features), "--task", dsets.DATASETS[name].task,
            "--rows", "dense", "--scale", "none",
            "-R", str(permutations), "--seed", str(ctx.seed), "--runner", ctx.runner,
            "--workers", str(ctx.workers), "--out", str(out), "--quiet"]
    for i, (_, learner, params, *_) in enumerate(keys):
        argv += ["-l", f"c{i}={learner}"]
        argv += Run(name, learner, dict(params)).param_args(f"c{i}")
    if ctx.pipeline_args:
        argv += ["--", *ctx.pipeline_args]
    return argv


def _replay(path: Path, what: str, keys: Sequence[tuple[Any, ...]], permutations: int,
            ctx: Context, switch: set[tuple[Any, ...]], only: int | None = None,
            out: Path | None = None) -> list[list[KeyResult]]:
    """The replay of ``keys`` on the file ``path``: the ``kernelstream replay`` command line
    (:func:`replay_argv`: ``--workers`` as the command does it), or with ``only`` = r the
    replay's shard r of r + 1 (``ReplayStreams.owns``: exactly the streams of permutation r,
    in one process)."""
    from kernelstream.engine.learner_config import LearnerConfig
    from kernelstream.pipelines import cli
    from kernelstream.pipelines.replay.replay import clear_outputs, read_outputs, run_replay

    if out is None:
        ctx.replays += 1
        out = ctx.work_dir / f"replay-{ctx.replays:03d}"
    argv = replay_argv(path, keys, permutations, ctx, out)
    ctx.log(f"{what}: {len(keys)} configurations x "
            + (f"{permutations} permutations ({ctx.runner}, {ctx.workers} worker"
               f"{'s' if ctx.workers > 1 else ''})" if only is None else
               f"permutation {only} ({ctx.runner})"))
    t0 = time.perf_counter()
    if only is None:
        table = io.StringIO()
        with contextlib.redirect_stdout(table):  # the replay's summary table: not ours
            rc = cli.main(argv)
        if rc != 0:
            raise ReplayError(f"the replay of {what} failed (exit {rc}): kernelstream "
                              + " ".join(argv))
    else:
        configs = [LearnerConfig(f"c{i}", learner, _resolved(learner, dict(params)))
                   for i, (_, learner, params, *_) in enumerate(keys)]
        out.mkdir(parents=True, exist_ok=True)
        clear_outputs(str(out))
        run_replay(str(path), configs, out, fmt="libsvm",
                   n_features=dsets.DATASETS[keys[0][0]].n_features, rows="dense",
                   task=dsets.DATASETS[keys[0][0]].task,
                   seed=ctx.seed, permutations=permutations, runner=ctx.runner,
                   pipeline_args=ctx.pipeline_args, shard=(only, permutations))
    summaries = read_outputs(str(out), {}, ctx.runner, 0.0).summaries
    ctx.log(f"{what}: done in {time.perf_counter() - t0:.1f} s")
    res: list[list[KeyResult]] = [[] for _ in keys]
    for s in sorted(summaries, key=lambda s: (s["config"], s["permutation"])):
        i = int(s["config"][1:])
        if not s["complete"] or s["rejected"]:
            raise ReplayError(f"{what}: stream {s['key']} is incomplete or rejected rows")
        n = int(s["examples"])
        # 100·k/n as the old loops computed it (100 · mean of the mistake indicators); a
        # regression key has no mistakes (NaN)
        k = int(s["mistakes"] or 0)
        rate = 100.0 * (k / n) if s["task"] == "classification" else math.nan
        loss = None if s["avg_loss"] is None else float(s["avg_loss"])
        res[i].append(KeyResult(int(s["permutation"]), rate, int(s["n_support_vectors"]),
                                float(s["seconds"]), n, k, avg_loss=loss,
                                diagnostics=s.get("diagnostics"),
                                kernel_distribution=s.get("kernel_distribution")))
    traced = [i for i, k in enumerate(keys) if k in switch]
    if traced:
        res = _with_switch(res, traced, keys, out)
    want = list(range(permutations)) if only is None else [only]
    for i, rr in enumerate(res):
        if [k.r for k in rr] != want:
            raise ReplayError(f"{what}: configuration c{i} has results for permutations "
                               f"{[k.r for k in rr]}")
    if not ctx.keep_outputs:
        shutil.rmtree(out, ignore_errors=True)
    return res


def _resolved(learner: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` as the command line resolves them (from their ``-p`` text)."""
    from kernelstream import learners

    return learners.get(learner).resolve_params({k: _text(v) for k, v in params.items()})


def _with_switch(res: list[list[KeyResult]], traced: list[int], keys: Sequence[tuple[Any, ...]],
                 out: Path) -> list[list[KeyResult]]:
    """``res`` with T₀ and the mistakes after it for the configurations ``traced`` (from the
    predictions: per row, its position, loss and mistake)."""
    from dataclasses import replace

    import numpy as np
    import pyarrow.compute as pc

    from kernelstream.engine.replay.outputs import PREDICTIONS_SCHEMA, read_table

    table = read_table(str(out / "predictions"), PREDICTIONS_SCHEMA).select(
        ["config", "permutation", "position", "mistake", "loss"])
    res = [list(rr) for rr in res]
    for i in traced:
        mine = table.filter(pc.equal(table["config"], f"c{i}"))
        perm = mine["permutation"].to_numpy()
        for j, k in enumerate(res[i]):
            rows = np.flatnonzero(perm == k.r)
            order = rows[np.argsort(mine["position"].to_numpy()[rows], kind="stable")]
            loss = mine["loss"].to_numpy(zero_copy_only=False)[order]
            wrong = mine["mistake"].to_numpy(zero_copy_only=False)[order].astype(bool)
            t0 = switch_round(loss, int(dict(keys[i][2])["budget"]))
            after = int(np.sum(wrong[t0:])) if t0 is not None else 0
            res[i][j] = replace(k, init_round=t0, mistakes_after_init=after)
    return res
