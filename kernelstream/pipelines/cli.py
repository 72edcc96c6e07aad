"""The ``kernelstream`` command line.

``kernelstream learners [NAME]``  lists the registered learners and their parameters.
``kernelstream replay [DATA] ...`` runs the prequential (test-then-train) evaluation and
writes ``summary.json``.

Flow of ``replay``: arguments → :class:`~kernelstream.pipelines.config.ReplayConfig` → a runner
from :data:`RUNNERS` (returns one :class:`~kernelstream.evaluate.EvalResult` per learner
configuration) → summary table and ``summary.json``. Runners are looked up by name so the Beam
runners can be added to the table without touching the rest.
"""

from __future__ import annotations

import os

# One BLAS thread unless the user says otherwise, set before numpy is first imported. The
# learners do one small matrix-vector product per example; multi-threaded BLAS gains nothing
# there and, on a busy 2-core machine, its spinning threads made a kernel row 40x slower.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from dataclasses import dataclass, field, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

# Only what every command needs is imported here: the learner registry, the replay machinery
# (engine, pyarrow for its Parquet outputs, the Kafka client) and Beam are imported by the
# commands that use them, so `learners` and `check` start in a fraction of a replay's time.
from kernelstream import __version__, data, fs  # noqa: E402
from kernelstream._json import json_safe  # noqa: E402
from kernelstream.data import check as data_check  # noqa: E402
from kernelstream.data.options import (  # noqa: E402
    AUTO_SPARSE_WIDTH,
    ROWS,
    ReadOptions,
)
from kernelstream.engine.deadletters import DEAD_LETTER_TAG  # noqa: E402
from kernelstream.engine.offsets import OffsetOutOfLog  # noqa: E402
from kernelstream.engine.writer_lock import CheckpointInUse  # noqa: E402
from kernelstream.pipelines.config import (  # noqa: E402
    DEFAULT_DATASET,
    DEFAULT_LEARNER,
    DEFAULT_PARAMS,
    PROG,
    REPLAY_RUNNERS,
    SCALES,
    TARGET_SCALES,
    TASKS,
    ConfigError,
    DataError,
    ReplayConfig,
    WorkerError,
    is_topic,
)
from kernelstream.pipelines.learners_cmd import cmd_learners  # noqa: E402
from kernelstream.pipelines.replay_args import (  # noqa: E402
    check_data,
    hash_bits,
    int_or_str,
    is_embedded,
    replay_config,
    shard_arg,
    workers_arg,
)
from kernelstream.streams import STREAMS, evaluate_stream  # noqa: E402

if TYPE_CHECKING:
    from kernelstream.evaluate import EvalResult
    from kernelstream.pipelines.workers import WorkerPool

SUMMARY_SCHEMA = 1

@dataclass
class RunOutput:
    """What a runner returns: one :class:`EvalResult` per learner configuration (per-entity
    runs, ``--key-by``, have none), and for runs that write Parquet outputs the row counts of
    those outputs and the per-stream-key summaries read back from ``metrics/``."""

    results: list[EvalResult]
    counts: dict[str, int] = field(default_factory=dict)
    keys: list[dict[str, Any]] = field(default_factory=list)


Runner = Callable[..., RunOutput]  # (config[, WorkerPool of --workers]) -> RunOutput
# errors whose message is the whole story (one line, exit 2): another run holds the checkpoint
# directory, a resume offset outside the log, a broker that does not answer
_OWN_LINE = (CheckpointInUse, OffsetOutOfLog, ConnectionError)


# -- runners -----------------------------------------------------------------------------------
def _evaluate_in_memory(config: ReplayConfig) -> list[EvalResult]:
    """Adversarial streams (``--stream``): load the data in memory, then
    :func:`kernelstream.streams.evaluate_stream` each configuration in turn."""
    from kernelstream.evaluate import stderr_progress  # imports the learners: only for a run

    try:
        X, y = data.load_dataset(config.data, **config.load_kwargs())
    except (ValueError, OSError) as exc:  # ParseError is a ValueError and names file:line
        raise DataError(str(exc)) from exc
    if X.shape[0] == 0:
        raise DataError(f"{config.data}: no examples")
    progress = None if config.quiet else stderr_progress
    return [
        evaluate_stream(
            X, y, config.stream, c.name, c.params, seed=config.seed,
            permutations=config.permutations, label=c.label, seed_name=c.seed_name,
            progress=progress,
        )
        for c in config.learners
    ]


def _replay_runner(name: str) -> Runner:
    def run(config: ReplayConfig, pool: WorkerPool | None = None) -> RunOutput:
        if config.stream != "none":
            # adversarial streams are generated in memory and only summarised
            if name != "loop":
                raise ConfigError(f"--stream {config.stream} is only supported by --runner loop")
            return RunOutput(_evaluate_in_memory(config))
        # the replay machinery (engine, pyarrow, Kafka client; Beam for its runners): only here
        from kernelstream.engine.outputs import parquet_files
        from kernelstream.pipelines import replay

        try:
            if config.shard is not None:  # one worker process of --workers
                replay.replay_for_config(config, name, shard=config.shard[0],
                                         shards=config.shard[1])
                return RunOutput([])  # the parent reads back and summarises all shards
            # --workers: the worker processes started by cmd_replay
            res = pool.finish() if pool is not None else replay.replay_for_config(config, name)
        except _OWN_LINE:
            raise
        except (FileNotFoundError, OSError) as exc:
            raise DataError(str(exc)) from exc
        # counts from the files themselves, so the summary adds up whatever the runner's
        # support for Beam metrics
        counts = {
            out: sum(_parquet_rows(f) for f in parquet_files(fs.join(res.out, out)))
            for out in ("predictions", DEAD_LETTER_TAG)
        }
        return RunOutput(res.eval_results(replay.config_learners(config), config.seed), counts,
                         res.summaries)

    run.__doc__ = (f"The replay on the {name!r} runner (Parquet outputs, summary from "
                   "metrics); with a pool, on the worker processes of --workers.")
    return run


# direct: Beam's FnApiRunner in-process (named explicitly: no Prism download attempt);
# portable: Beam's local job service (started and stopped here) or the --job_endpoint given
# after "--" (e.g. a Flink job server); beam: the --runner given after "--" (FlinkRunner,
# DataflowRunner, ...); loop: the engine in a plain loop (no Beam import).
RUNNERS: dict[str, Runner] = {name: _replay_runner(name) for name in REPLAY_RUNNERS}


# -- summary -----------------------------------------------------------------------------------
def build_summary(config: ReplayConfig, run: RunOutput) -> dict[str, Any]:
    """The ``summary.json`` document (schema in README.md, "summary.json").

    Run-level fields first, then the first (in single-learner runs: the only) configuration's
    metrics at the top level, so a single-learner summary is flat; ``configs`` always holds
    every configuration in command-line order.
    """
    results = run.results
    configs = [r.to_summary() for r in results]
    examples = (results[0].examples if results
                else sum(k["examples"] for k in run.keys if k["permutation"] == 0))
    doc: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "kernelstream_version": __version__,
        "dataset": config.dataset,
        "data": config.data,
        "examples": examples,
        "n_features": (results[0].n_features if results
                       else max((k["n_features"] or 0 for k in run.keys), default=0)),
        "task": config.task,
        "scale": config.scale,
        "scale_target": config.scale_target,
        "limit": config.limit,
        "hash_features": config.hash_features,
        "rows": config.rows,
        "seed": config.seed,
        "permutations": config.permutations,
        "runner": config.runner,
        "stream": config.stream,
        "argv": list(config.argv),
    }
    if run.counts:
        # every input record is either an example (predicted once per stream) or a dead
        # letter (source errors once, learner rejections once per stream)
        doc["predictions"] = run.counts.get("predictions", 0)
        doc["dead_letters"] = run.counts.get(DEAD_LETTER_TAG, 0)
    if config.key_by is not None:
        doc["key_by"] = config.key_by
    if configs:
        doc.update({k: v for k, v in configs[0].items() if k not in doc})
    doc["configs"] = configs
    if config.key_by is not None:
        doc["keys"] = run.keys  # one model per entity: per-key metrics
    return doc


def write_summary(doc: dict[str, Any], out: str | Path) -> str:
    fs.makedirs(out)
    path = fs.join(out, "summary.json")
    # never leave a half-written summary behind
    fs.write_bytes_atomic(path, (json.dumps(json_safe(doc), indent=2, allow_nan=False)
                                 + "\n").encode())
    return path


def _parquet_rows(path: str) -> int:
    import pyarrow.parquet as pq  # a replay's outputs are Parquet; the other commands need none

    if fs.is_remote(path):
        with fs.open_read(path) as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)
    return int(pq.ParquetFile(path).metadata.num_rows)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(results: Sequence[EvalResult]) -> str:
    rows = [("learner", "examples", "perms", "mistake rate (%)", "avg loss", "#SV",
             "seconds", "examples/s")]
    for r in results:
        s = r.to_summary()
        mr = ("-" if s["mistake_rate"] is None
              else f"{s['mistake_rate']:.2f} ± {s['mistake_rate_std']:.2f}")
        rows.append((
            r.label, str(r.examples), str(r.permutations), mr,
            f"{_fmt(s['avg_loss'], '.4f')} ({s['loss']})",
            _fmt(s["n_support_vectors"], ".1f"), _fmt(s["seconds"], ".3f"),
            _fmt(s["examples_per_second"], ",.0f"),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.ljust(w) if i == 0 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace, argv: Sequence[str]) -> int:
    try:
        config = replay_config(args, argv)
    except ValueError as exc:  # unknown learner, bad parameter, inconsistent options
        return _error("replay", str(exc))
    if config.shard is not None:
        return _run_shard(config)
    try:
        with started(config, "replay") as pool:
            if args.follow is not None:
                return _follow(config, args.follow, args.follow_runs)
            return _run_once(config, pool=pool)
    except RefusedError as exc:
        return exc.code


class RefusedError(Exception):
    """A run refused before it started; its one-line error is printed, ``code`` is the exit
    code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def started(config: ReplayConfig, command: str) -> Iterator[Any]:
    """The start of a replay-shaped run (``replay``, ``tune``): the ``--workers`` processes
    spawned (before the data check: they import Beam meanwhile, then wait), the data checked,
    the output directory made (a long run must not fail at its very end on a bad ``--out``),
    progress lines on; yields the worker pool (None for one process) and closes it at the end,
    which stops the workers of a run that did not finish. Raises :class:`RefusedError` after
    printing the error."""
    pool = None
    try:
        if config.workers > 1:
            from kernelstream.pipelines.workers import WorkerPool, effective_workers

            if effective_workers(config) > 1:
                try:
                    pool = WorkerPool.spawn(config)
                except OSError as exc:
                    raise RefusedError(_error(command, f"cannot start the worker processes: {exc}")
                                  ) from None
        try:
            check_data(config)
        except ValueError as exc:  # the data does not fit the options
            raise RefusedError(_error(command, str(exc))) from None
        try:
            fs.makedirs(config.out)
        except OSError as exc:
            raise RefusedError(_error(command, f"cannot create the output directory: {exc}")
                          ) from None
        _progress_to_stderr(not config.quiet)
        yield pool
    finally:
        if pool is not None:
            pool.close()


def _run_shard(config: ReplayConfig) -> int:
    """A worker process of ``--workers`` (``--shard I/N``): import the runner while the
    parent checks the data, wait for its go, learn this shard's streams into the run's
    outputs; the parent writes the summary."""
    from kernelstream.pipelines.workers import await_go

    _progress_to_stderr(not config.quiet, config.shard)
    if config.runner != "loop":
        import kernelstream.pipelines.beam_replay  # noqa: F401  (Beam: the second it takes)
    if not await_go():  # the parent stopped the run before it started
        return 0
    return _run_once(config)


def _run_once(config: ReplayConfig, brief: bool = False,
              pool: WorkerPool | None = None) -> int:
    """One run (on the worker processes of ``pool`` with ``--workers``): the summary table
    (``brief``: one line) and ``summary.json``; the exit code."""
    try:
        run = (RUNNERS[config.runner](config) if pool is None
               else RUNNERS[config.runner](config, pool))
    except WorkerError as exc:  # --workers: the failed worker's own line(s) and exit code
        for line in exc.lines:
            print(line, file=sys.stderr)
        return exc.code
    except _OWN_LINE as exc:  # a second writer, a resume offset outside the log, broker down
        return _error("replay", str(exc))
    except DataError as exc:
        return _error("replay", f"cannot read data: {exc}")
    except ConfigError as exc:  # found once the run starts (e.g. a checkpoint's learners)
        return _error("replay", str(exc))
    except ValueError as exc:
        # learner-side validation during the run (wrong labels for the task, bad rows, ...)
        return _error("replay", str(exc), code=1)
    if config.shard is not None:  # a worker of --workers: its parent writes the summary
        return 0
    doc = build_summary(config, run)
    path = write_summary(doc, config.out)
    if brief:
        print(f"{time.strftime('%H:%M:%S')} {config.out}: {doc.get('predictions', 0)} new "
              f"predictions, {doc.get('dead_letters', 0)} dead letters", flush=True)
        return 0
    if run.results:
        print(format_table(run.results))
    if run.keys and config.key_by is not None:
        print(f"{len(run.keys)} per-entity models (see summary.json 'keys' and metrics/)")
    if run.counts.get(DEAD_LETTER_TAG):
        print(f"dead letters: {run.counts[DEAD_LETTER_TAG]} rejected input records "
              f"(see {fs.join(config.out, DEAD_LETTER_TAG)})")
    print(f"summary: {path}")
    return 0


def _follow(config: ReplayConfig, every: float, runs: int | None) -> int:
    """``--follow``: a checkpointed run every ``every`` seconds, each learning what arrived
    since the previous one, its outputs in ``OUT/ckpt-NNNNNN/`` (the checkpoint it commits);
    until ``runs`` runs or Ctrl-C (exit 130; a run cut short commits nothing: the next
    continues from the last committed checkpoint). The checkpoint directory stays locked for
    the whole command; before each run the output folders of runs that never committed are
    removed."""
    assert config.checkpoint is not None
    # checkpoints are Parquet files (pyarrow): imported by the runs that keep them
    from kernelstream.engine.checkpoints import committed, next_checkpoint
    from kernelstream.engine.snapshot import remove_orphans
    from kernelstream.pipelines import replay

    done = 0
    try:
        with replay.checkpoint_lock(config.checkpoint):
            print(f"following {config.data}: a run every {every:g} s, checkpoints in "
                  f"{config.checkpoint}, outputs in {config.out}/ckpt-NNNNNN; Ctrl-C stops",
                  file=sys.stderr, flush=True)
            while runs is None or done < runs:
                t0 = time.monotonic()
                if not fs.is_remote(config.out) and not fs.is_remote(config.checkpoint):
                    remove_orphans(config.out, [c.number for c in committed(config.checkpoint)])
                name = next_checkpoint(config.checkpoint).name
                code = _run_once(replace(config, out=fs.join(config.out, name)), brief=True)
                if code:
                    return code
                done += 1
                if runs is not None and done >= runs:
                    break
                time.sleep(max(0.0, every - (time.monotonic() - t0)))
    except CheckpointInUse as exc:
        return _error("replay", str(exc))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted after {done} run(s); the next run continues from the last "
              "committed checkpoint", file=sys.stderr)
        return 130
    return 0


def _progress_to_stderr(on: bool, shard: tuple[int, int] | None = None) -> None:
    """Show the learners' progress lines (``kernelstream.progress`` logger, INFO; logged
    where learning runs, in-process for the direct and loop runners) on stderr; a worker of
    ``--workers`` (``shard``) names itself in them."""
    from kernelstream.engine.core import PROGRESS_LOGGER  # the engine: a replay's own import

    log = logging.getLogger(PROGRESS_LOGGER)
    log.propagate = False  # not through Beam's root handler: one line each, our format
    for h in list(log.handlers):
        if getattr(h, "_kernelstream", False):
            log.removeHandler(h)
    if on:
        h = logging.StreamHandler(sys.stderr)
        tag = "" if shard is None else f"worker {shard[0] + 1}/{shard[1]}: "
        h.setFormatter(logging.Formatter(f"[progress] {tag}%(message)s"))
        h._kernelstream = True  # type: ignore[attr-defined]
        log.addHandler(h)
    log.setLevel(logging.INFO if on else logging.WARNING)


def _error(cmd: str, msg: str, code: int = 2) -> int:
    print(f"{PROG} {cmd}: error: {msg}", file=sys.stderr)
    return code


# -- check -------------------------------------------------------------------------------------
def cmd_check(args: argparse.Namespace) -> int:
    """Report what a replay would see in DATA; rc 2 (and the report) when it would refuse it."""
    if args.limit is not None and args.limit < 1:
        return _error("check", f"--limit must be >= 1, got {args.limit}")
    if args.hash_features is not None:
        try:
            data.hashing.check_bits(args.hash_features)
        except ValueError as exc:
            return _error("check", str(exc))
    src = args.data
    try:
        src = str(data.embedded_path(src)) if is_embedded(src) else src
    except (KeyError, FileNotFoundError):
        pass
    opts = ReadOptions(
        path=src, fmt=args.format, n_features=args.n_features,
        label_column=None if args.label_column is None else int_or_str(args.label_column),
        task=args.task, limit=args.limit, positive_label=args.positive_label,
        delimiter=args.delimiter, header=args.header,
        key_by=None if args.key_by is None else int_or_str(args.key_by),
        hash_features=args.hash_features)
    try:
        if is_topic(src):
            logging.getLogger("kafka").setLevel(logging.CRITICAL)
            from kernelstream.kafka_client import client_settings  # only for a topic

            report = data_check.check_topic(opts, args.kafka_idle,
                                            client_settings(args.kafka_option or []))
        else:
            if not fs.exists(src):
                return _error("check", f"no such file or embedded data set: {src}")
            report = data_check.check_file(opts)
    except (ValueError, OSError, ConnectionError) as exc:
        return _error("check", str(exc).splitlines()[0] if str(exc) else repr(exc))
    if args.hash_features is not None:
        report.width = 1 << args.hash_features
    if not is_topic(src) or opts.fmt or opts.hash_features is not None:
        report.rows_as = "sparse" if opts.sparse_rows(max(report.width, 1)) else "dense"
    problem = data_check.verdict(report)
    if args.json:
        doc = report.to_dict()
        doc["problem"] = problem
        print(json.dumps(doc, indent=2))
    else:
        for line in report.lines():
            print(line)
    if problem is not None:
        return _error("check", problem)
    return 0


def _add_check_parser(sub: Any) -> None:
    p = sub.add_parser(
        "check", help="report what a replay would see in a data set",
        description="One fast pass over DATA (a LIBSVM, CSV or Parquet file, gzip/bz2/xz "
        "compressed or not, an embedded data set, or kafka://HOST:PORT/TOPIC): rows, width, "
        "non-zeros per row, label classes and counts, dead-letter reasons with counts and "
        "first line numbers (offsets for a topic). Exit 2 with one line on stderr when a "
        "replay would refuse the data.")
    p.add_argument("data", metavar="DATA")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.add_argument("--task", choices=TASKS, default="classification",
                   help="how labels are read (default: classification)")
    p.add_argument("--format", choices=data.FORMATS, help="data format (default: sniffed)")
    p.add_argument("--label-column", metavar="COL", help="as for replay")
    p.add_argument("--n-features", type=int, metavar="D", help="as for replay")
    p.add_argument("--positive-label", metavar="LABEL", help="as for replay")
    p.add_argument("--delimiter", metavar="CHAR", help="CSV delimiter (default: sniffed)")
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--key-by", metavar="COL", help="as for replay")
    p.add_argument("--limit", type=int, metavar="N", help="stop after N records")
    p.add_argument("--hash-features", type=hash_bits, metavar="K",
                   help="report the width of features hashed into 2^K columns (K, 2^K or the "
                   "power of two)")
    p.add_argument("--kafka-idle", type=float, default=2.0, metavar="SECONDS",
                   help="a topic: stop after this long without a record (default: 2)")
    p.add_argument("--kafka-option", action="append", metavar="KEY=VALUE",
                   help="kafka-python client setting (repeatable)")


# -- parser ------------------------------------------------------------------------------------
def add_learner_arguments(p: argparse.ArgumentParser) -> None:
    """``--learner``, ``-p`` and ``--seed`` (``config.learner_configs``): shared by ``replay``
    and ``stream``."""
    default_params = " ".join(f"-p {k}={v}" for k, v in DEFAULT_PARAMS.items())
    p.add_argument("--learner", "-l", action="append", metavar="[LABEL=]NAME",
                   help=f"learner (repeatable; default: {DEFAULT_LEARNER} {default_params}); "
                   f"see `{PROG} learners`")
    p.add_argument("-p", "--param", action="append", metavar="[LABEL.]KEY=VALUE",
                   help="learner hyper-parameter (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default: 0)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Online kernel learning on data streams.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("learners", help="list the learners and their parameters",
                       description="List every registered learner (or one) with its "
                       "parameters, types, defaults and documentation.")
    p.add_argument("name", nargs="?", help="show only this learner")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                   help="output format (default: text)")

    p = sub.add_parser(
        "replay", help="prequential (test-then-train) evaluation on a data set",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Replay a data set as a stream in R random orders, test-then-train, and report\n"
            "mean ± std (ddof=1) of the mistake rate, average loss, #SV and learning time.\n"
            "Writes DIR/summary.json."
        ),
        epilog=(
            "learner configurations:\n"
            "  --learner may be repeated (grid mode); write LABEL=NAME to run the same learner\n"
            "  twice. -p LABEL.key=value sets a parameter of one configuration; an unscoped\n"
            "  -p key=value applies to every configuration whose learner has that parameter.\n\n"
            "examples:\n"
            f"  {PROG} replay --out runs/demo\n"
            f"  {PROG} replay german_scale.libsvm --learner perceptron -p gamma=0.5 "
            "--permutations 20\n"
            f"  {PROG} replay --learner small=bogd --learner big=bogd -p small.budget=50 "
            "-p big.budget=500\n"
            f"  {PROG} replay path/to/a9a -l a=bogd -l b=bpa-s -R 8 --workers 2  # on 2 cores"
        ),
    )
    p.add_argument("data", nargs="?", metavar="DATA",
                   help=f"embedded data set name or file path (default: {DEFAULT_DATASET!r}, "
                   "embedded)")
    add_learner_arguments(p)
    p.add_argument("--params-from", metavar="TUNED_JSON",
                   help=f"the parameters chosen by `{PROG} tune` (its tuned.json); -p wins")
    p.add_argument("--permutations", "-R", type=int, default=1, metavar="R",
                   help="number of random stream orders R (default: 1)")
    p.add_argument("--limit", type=int, metavar="N",
                   help="use only the first N rows of the file (before permuting)")
    p.add_argument("--scale", choices=SCALES, default="none",
                   help="feature scaling: none, min-max to [0,1] or to [-1,1] (default: none)")
    p.add_argument("--scale-target", choices=TARGET_SCALES, default="none",
                   help="regression target scaling: none or min-max to [0,1] (default: none)")
    p.add_argument("--task", choices=TASKS,
                   help="default: the learners' task (classification maps labels to ±1)")
    p.add_argument("--format", choices=data.FORMATS,
                   help="data format (default: from the file name, else its content)")
    p.add_argument("--label-column", metavar="COL",
                   help="label column of a CSV/Parquet file: 0-based position (negative counts "
                   "from the end; CSV default: last) or header name (Parquet default: label)")
    p.add_argument("--n-features", type=int, metavar="D",
                   help="feature dimension of a LIBSVM file (default: largest index seen)")
    p.add_argument("--hash-features", type=hash_bits, metavar="K",
                   help="hash feature indices (CSV: column positions) into 2^K columns, "
                   "values of colliding features summed; K, 2^K or the power of two itself "
                   "(for click logs and open vocabularies)")
    p.add_argument("--rows", choices=ROWS, default="auto",
                   help="rows to the learners as dense arrays or sparse CSR (memory grows with "
                   "the non-zeros); auto: sparse for LIBSVM or hashed data wider than "
                   f"{AUTO_SPARSE_WIDTH:,} columns (default: auto)")
    p.add_argument("--positive-label", metavar="LABEL",
                   help="raw label mapped to +1 (all others to -1)")
    p.add_argument("--delimiter", metavar="CHAR", help="CSV delimiter (default: sniffed)")
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="the CSV file has (or has not) a header row (default: auto-detect)")
    p.add_argument("--out", "-o", metavar="DIR",
                   help="output directory (default: runs/<dataset>-<learner>[+<learner>...])")
    p.add_argument("--stream", choices=STREAMS, default="none",
                   help="replay an adversarial stream built from the data instead of permutations "
                   "(paper 003: blocks of one repeated example, labels negated on even blocks; "
                   "german-1 = 500x10 rounds, german-2 = 500x20); each of the R repetitions "
                   "draws its own stream (default: none)")
    p.add_argument("--runner", choices=sorted(RUNNERS), default=None,
                   help="direct: Apache Beam in-process (FnApiRunner, the default; loop with "
                   "--stream); portable: "
                   "Beam's portable job API (starts a local job service unless "
                   "--job_endpoint is given after '--', e.g. a Flink job server); beam: the "
                   "Beam --runner given after '--' (Flink, Dataflow, ...); loop: the plain "
                   "reference loop. All write predictions/, metrics/, dead_letters/ as "
                   "Parquet and summary.json. Beam pipeline options go after '--'.")
    p.add_argument("--workers", "-j", type=workers_arg, default=1, metavar="N",
                   help="learn the streams (configurations x permutations, or entities) in N "
                   "processes, each running the run's pipeline on its share of the streams; "
                   "outputs and summary.json as one process writes them; 'auto': one per "
                   "core (default: 1). Local file replays on the direct or loop runner")
    p.add_argument("--shard", type=shard_arg, default=None, help=argparse.SUPPRESS)
    p.add_argument("--key-by", metavar="COL",
                   help="CSV/Parquet column naming the entity: one model per entity value "
                   "(0-based position or header name); for a Kafka topic, 'key' (the message "
                   "key) or a CSV column position")
    k = p.add_argument_group(
        "Kafka", "DATA may be a topic, kafka://HOST:PORT[,HOST:PORT...]/TOPIC: its messages are "
        "LIBSVM or CSV lines (--format; LIBSVM needs --n-features), read from the beginning "
        "up to the end of the log when the run starts; --key-by key keeps one model per "
        "message key")
    k.add_argument("--kafka-idle", type=float, default=5.0, metavar="SECONDS",
                   help="stop waiting for a partition that delivers nothing for this long "
                   "before the end the run started at (default: 5)")
    k.add_argument("--kafka-max-seconds", type=float, metavar="SECONDS",
                   help="stop reading a topic after this long in all (default: no limit)")
    k.add_argument("--kafka-out", metavar="kafka://HOST:PORT/PREFIX",
                   help="also send predictions, metrics and dead letters as JSON to the "
                   "topics PREFIX-predictions, PREFIX-metrics and PREFIX-dead-letters")
    k.add_argument("--checkpoint", metavar="DIR",
                   help="continue from the newest checkpoint in DIR (learner states, stream "
                   "positions, partition offsets) and write the next one when the run "
                   "succeeds: repeated runs learn the topic exactly once, as one long run")
    k.add_argument("--follow", type=float, metavar="SECONDS",
                   help="with --checkpoint: keep learning the topic, one run every SECONDS "
                   "(each learns what arrived since the last; outputs in OUT/ckpt-NNNNNN/) "
                   "until Ctrl-C (exit 130)")
    k.add_argument("--follow-runs", type=int, metavar="N",
                   help="with --follow: stop after N runs")
    k.add_argument("--kafka-option", action="append", metavar="KEY=VALUE",
                   help="kafka-python client setting for the source and sink, e.g. "
                   "security_protocol=SASL_SSL (repeatable)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress lines on stderr")
    _add_check_parser(sub)
    # live streams (their modules import Beam only when a command runs)
    from kernelstream.pipelines import demo, stream
    from kernelstream.pipelines.commands import report, reproduce, tune

    stream.add_parser(sub)
    demo.add_parser(sub)
    tune.add_parser(sub)
    report.add_parser(sub)
    reproduce.add_parser(sub)
    return parser


class _BeamImportNoise(logging.Filter):
    """Drops the warning Beam logs on import when Google's optional API client is absent
    ("apitools not found, and bigquery client libraries are not available ..."): it concerns
    BigQuery only and would otherwise open every command's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not ("apache_beam" in record.pathname
                    and str(record.msg).startswith("apitools not found"))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kernelstream`` console script; returns the exit code."""
    root = logging.getLogger()
    if not any(isinstance(f, _BeamImportNoise) for f in root.filters):
        root.addFilter(_BeamImportNoise())  # before the runners import Beam
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after "--" is passed to Beam as pipeline options (runner, workers, ...).
    pipeline_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, pipeline_args = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.pipeline_args = pipeline_args
    except SystemExit as exc:  # --help, --version, usage errors: keep argparse's exit code
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        if args.command == "learners":
            if args.name:
                from kernelstream import learners  # the registry: this command's own import

                try:
                    learners.get(args.name)
                except ValueError as exc:
                    return _error("learners", str(exc))
            return cmd_learners(args)
        if args.command == "check":
            return cmd_check(args)
        if getattr(args, "handler", None) is not None:  # stream, demo, report
            return int(args.handler(args, argv))
        return cmd_replay(args, argv)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`kernelstream learners | head`): exit quietly, as Unix
        # tools do; point stdout at devnull so the interpreter's final flush cannot raise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
