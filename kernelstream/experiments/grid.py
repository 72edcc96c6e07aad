"""A table's runs as stream keys of the replay pipeline.

A reproduction table is a grid of (data set, learner configuration, permutation) keys. The
runs of one data set become one replay (:func:`kernelstream.pipelines.replay.replay.run_replay`):
every configuration is a labelled ``LearnerConfig`` (parameters resolved as ``-p`` text is,
:func:`replay_params`), R permutations, the run's seed, runner and the Beam options given
after ``--``. So the papers' protocols use the one test-then-train loop of the engine, on any
runner, and ``workers`` > 1 splits a replay's streams into that many shards
(``ReplayConfig.shard``), one process each, as ``replay --workers`` does. Each key's result is
read back from the replay's ``metrics/`` output
(:func:`kernelstream.pipelines.replay.replay.read_outputs`). Tuning runs (``kernelstream reproduce
PAPER --retune``, :mod:`kernelstream.experiments.retune`) are keys too: on the held-out
permutations ``Run.first_permutation ..``, optionally cut to their first ``Run.rows``.

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

import math
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelstream import learners
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.replay import outputs
from kernelstream.experiments import datasets as dsets
from kernelstream.pipelines.beam_noise import quiet_beam_import
from kernelstream.pipelines.replay.replay import clear_outputs, execute, make_run, read_outputs


@dataclass(frozen=True)
class Run:
    """One learner configuration of a table on one data set (run on permutations 0..R−1).

    ``stream``: an adversarial stream preset (``kernelstream.engine.orders.PRESETS``) of the data
    set instead of its permutations. ``switch``: also find each key's stage switch (a
    SkeGD's ``init_round``) in the predictions (:func:`switch_round`). ``permutations``: a
    run with fewer permutations than the table (a protocol's per-row R). ``permutation``: run
    on that permutation r only (parameters chosen per permutation, e.g. a width selected on
    the permutation's first rows); its results list has the one entry. ``first_permutation``
    and ``rows``: the permutations ``first_permutation ..`` (a tuning run's held-out
    permutations, ``experiments.tuning.TUNE_PERM``), each cut to its first ``rows``
    positions (None: whole)."""

    dataset: str  # a key of ``datasets.DATASETS``
    learner: str  # registry name
    params: dict[str, Any]
    stream: str | None = None
    switch: bool = False
    permutations: int | None = None  # R of this run (None: the context's)
    permutation: int | None = None  # run on this permutation only
    first_permutation: int = 0  # permutations first.. (tuning: held out from 0..R-1)
    rows: int | None = None  # only the first ``rows`` positions of each permutation

    def param_args(self, label: str) -> list[str]:
        out = []
        for k, v in self.params.items():
            out += ["-p", f"{label}.{k}={_text(v)}"]
        # a width the protocol leaves to the learner is its fixed default, as published: not
        # the replay's data-driven gamma=auto
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
    # the no-skill predictor on the same permutation (``engine.noskill``): the running
    # majority class's mistake rate (%), or the running mean's average loss (regression)
    noskill: float | None = None

    def record(self) -> dict[str, Any]:
        """The per-run entry of a results JSON."""
        return {"r": self.r, "mistake_rate": self.mistake_rate, "n_sv": self.n_sv,
                "seconds": self.seconds}


class ReplayError(RuntimeError):
    """A replay of the grid ended with a non-zero exit code."""


def run_grid(runs: Sequence[Run], ctx: Context) -> list[list[KeyResult]]:
    """The results of every run on permutations 0..R−1 (``first_permutation`` ..
    ``first_permutation`` + R − 1 for a tuning run; in the order of ``runs``; each a list in
    permutation order; R the run's ``permutations`` or the context's). Identical runs are
    learnt once; the runs of one data set, R and prefix share one replay."""
    unique = list(dict.fromkeys(_key(r) for r in runs))
    switch = {_key(r) for r in runs if r.switch}
    by_key: dict[tuple[Any, ...], list[KeyResult]] = {}
    data = ctx.work_dir / "data"
    perms = {k: k[4] or ctx.permutations for k in unique}
    pinned = [k for k in unique if k[5] is not None]
    if any(k[3] is not None or dsets.DATASETS[k[0]].perm_file is not None for k in pinned):
        raise ValueError("a run of one permutation reads the seeded permutations of a data "
                         "set, not a stream of its own")
    if any(k[6] or k[7] is not None for k in pinned):
        raise ValueError("a run of one permutation is an evaluation run: no held-out "
                         "permutations or prefixes")
    free = [k for k in unique if k[5] is None]
    for ds, stream, R, first, rows in dict.fromkeys((k[0], k[3], perms[k], k[6], k[7])
                                                    for k in free):
        mine = [k for k in free if k[0] == ds and k[3] == stream and perms[k] == R
                and k[6] == first and k[7] == rows]
        what = ds if stream is None else stream
        if first or rows is not None:
            what += f" (tuning: permutation{'s' if R > 1 else ''} {first}" + (
                f"..{first + R - 1}" if R > 1 else "") + (
                "" if rows is None else f", first {rows} rows") + ")"
        if stream is None and _seeded(ds, first, ctx.data_dir):
            path = dsets.prepare(ds, ctx.data_dir, data)
            res = _replay(path, what, mine, R, ctx, switch)
            for k, rr in zip(mine, res, strict=True):
                by_key[k] = rr
            continue
        if rows is not None:
            raise ValueError(f"{what}: a stream of its own per permutation has no prefix runs")
        # a stream of its own per permutation (a toolbox's order, an adversarial stream):
        # one file each, arranged so that the replay's permutation r reads it in that order
        tasks = []
        for r in range(first, first + R):
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


def _seeded(dataset: str, first: int, data_dir: Path) -> bool:
    """Whether the permutations ``first ..`` of ``dataset`` are the shared seeding's: a data
    set without a toolbox's permutations, or held-out ones beyond the toolbox's (the old
    scripts' tuning permutation 1000 of a 20-permutation toolbox file)."""
    d = dsets.DATASETS[dataset]
    if d.perm_file is None:
        return True
    if not first:
        return False
    n = dsets.load_dataset(dataset, data_dir)[1].shape[0]
    return first >= len(dsets.toolbox_orders(dataset, data_dir, n))


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
    quiet_beam_import()  # a pool process imports Beam without the command's log filter
    path, what, keys, permutations, ctx, switch, only, out = t
    return _replay(path, what, keys, permutations, ctx, switch, only=only, out=out)


def _key(run: Run) -> tuple[Any, ...]:
    return (run.dataset, run.learner, tuple(sorted((k, _text(v)) for k, v in run.params.items())),
            run.stream, run.permutations, run.permutation, run.first_permutation, run.rows)


def switch_round(loss: Any, budget: int) -> int | None:
    """T₀ (1-based) of SkeGD (``learners.skegd``, without ``reference_quirks``) from its
    per-row losses: stage 1 buffers every round with a positive loss, and the round after the
    ``budget``-th such round initialises stage 2. None: the stream ended first."""
    import numpy as np

    pos = np.flatnonzero(np.asarray(loss, dtype=np.float64) > 0.0)
    if pos.size < budget or int(pos[budget - 1]) + 1 >= len(loss):
        return None
    return int(pos[budget - 1]) + 2


def replay_params(dataset: str, learner: str, params: Any) -> dict[str, Any]:
    """The resolved parameters of one key: ``params`` (a dict or the key's sorted pairs) and
    the fixed default widths :meth:`Run.param_args` adds, converted from their ``-p`` text as
    the command line converts them, so a value is the one a ``kernelstream replay -p`` run
    would learn with."""
    args = Run(dataset, learner, dict(params)).param_args("c")
    text = dict(a.removeprefix("c.").split("=", 1) for a in args[1::2])
    return learners.get(learner).resolve_params(text)


def _replay(path: Path, what: str, keys: Sequence[tuple[Any, ...]], permutations: int,
            ctx: Context, switch: set[tuple[Any, ...]], only: int | None = None,
            out: Path | None = None) -> list[list[KeyResult]]:
    """The replay of ``keys`` (labels ``c0``, ``c1``, ...) on the file ``path``
    (:func:`kernelstream.pipelines.replay.replay.run_replay`): its streams on ``ctx.workers``
    processes (:func:`_sharded`), or with ``only`` = r the replay's shard r of r + 1
    (``ReplayStreams.owns``: exactly the streams of permutation r, in one process); with
    ``first`` on a key (a tuning run) permutations ``first ..`` instead of ``0 ..``."""
    if out is None:
        ctx.replays += 1
        out = ctx.work_dir / f"replay-{ctx.replays:03d}"
    name = keys[0][0]
    configs = [LearnerConfig(f"c{i}", learner, replay_params(name, learner, params))
               for i, (_, learner, params, *_) in enumerate(keys)]
    first, rows = keys[0][6], keys[0][7]
    ctx.log(f"{what}: {len(keys)} configurations x "
            + (f"{permutations} permutations ({ctx.runner}, {ctx.workers} worker"
               f"{'s' if ctx.workers > 1 else ''})" if only is None else
               f"permutation {only} ({ctx.runner})"))
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    clear_outputs(str(out))
    options: dict[str, Any] = dict(
        # the papers' rows and targets as the files hold them (run_replay's defaults are the
        # CLI's auto scaling)
        fmt="libsvm", n_features=dsets.DATASETS[name].n_features, rows="dense", scale="none",
        scale_target="none", task=dsets.DATASETS[name].task, seed=ctx.seed, runner=ctx.runner,
        pipeline_args=list(ctx.pipeline_args), first_permutation=first, stream_rows=rows)
    try:
        if only is None:
            shards = max(1, min(ctx.workers, len(configs) * permutations))
            _sharded([(str(path), configs, str(out), {
                **options, "permutations": permutations,
                "shard": None if shards == 1 else (i, shards)}) for i in range(shards)])
        elif first:  # a held-out permutation (tuning): that one alone
            _quiet_replay(str(path), configs, str(out),
                          **{**options, "first_permutation": only}, permutations=1)
        else:
            _quiet_replay(str(path), configs, str(out), **options,
                          permutations=permutations, shard=(only, permutations))
    except (ValueError, OSError) as exc:  # a bad parameter, a bad row, a missing file
        raise ReplayError(f"the replay of {what} failed: {exc}") from exc
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
                                kernel_distribution=s.get("kernel_distribution"),
                                noskill=s.get("noskill_mistake_rate" if s["task"] ==
                                              "classification" else "noskill_avg_loss")))
    traced = [i for i, k in enumerate(keys) if k in switch]
    if traced:
        res = _with_switch(res, traced, keys, out)
    want = (list(range(first, first + permutations)) if only is None else [only])
    for i, rr in enumerate(res):
        if [k.r for k in rr] != want:
            raise ReplayError(f"{what}: configuration c{i} has results for permutations "
                               f"{[k.r for k in rr]}")
    if not ctx.keep_outputs:
        shutil.rmtree(out, ignore_errors=True)
    return res


def _sharded(shards: list[tuple[str, list[Any], str, dict[str, Any]]]) -> None:
    """The ``run_replay`` calls of one replay's shards (``(data, configs, out, options)``;
    each shard's sinks name their files apart, so they share ``out``), one process each when
    there are several (fresh interpreters, as :func:`_each_permutation`'s)."""
    if len(shards) == 1:
        _run_shard(shards[0])
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(len(shards), mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_run_shard, shards))


def _run_shard(shard: tuple[str, list[Any], str, dict[str, Any]]) -> None:
    quiet_beam_import()  # a pool process imports Beam without the command's log filter
    data, configs, out, options = shard
    _quiet_replay(data, configs, out, **options)


def _quiet_replay(data: str, configs: list[Any], out: str, **options: Any) -> None:
    """``run_replay`` without its warnings: the papers' tables judge skill themselves (a
    verdict's "no skill" mark, ``report.pass_mark``), and the warnings would name the grid's
    configurations ``c0``, ``c1`` ... on the command's stderr."""
    execute(make_run(data, configs, out, **options))


def _with_switch(res: list[list[KeyResult]], traced: list[int], keys: Sequence[tuple[Any, ...]],
                 out: Path) -> list[list[KeyResult]]:
    """``res`` with T₀ and the mistakes after it for the configurations ``traced`` (from the
    predictions: per row, its position, loss and mistake)."""
    from dataclasses import replace

    import numpy as np
    import pyarrow.compute as pc

    table = outputs.read_table(str(out / "predictions"), outputs.PREDICTIONS_SCHEMA).select(
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
