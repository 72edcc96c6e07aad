"""``kernelstream replay [DATA] ...``: the prequential (test-then-train) evaluation of one or
more learner configurations on a data set, a file or a Kafka topic, in R random orders;
writes the runs' Parquet outputs and ``summary.json``. ``--follow`` repeats a checkpointed
run on a topic, and ``--shard`` (hidden) is one worker process of ``--workers``.

The runners, the start of a run and the summary are shared with ``tune``
(:mod:`~kernelstream.pipelines.commands._runs`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kernelstream import fs
from kernelstream.engine.deadletters import DEAD_LETTER_TAG, reasons_summary
from kernelstream.engine.live.snapshot.store import remove_orphans
from kernelstream.engine.noskill import skill_warnings
from kernelstream.engine.orders import STREAMS
from kernelstream.engine.pooled import pooled_configs
from kernelstream.engine.replay.checkpoints import committed, next_checkpoint
from kernelstream.engine.writer_lock import CheckpointInUse
from kernelstream.errors import ConfigError
from kernelstream.pipelines.commands._common import (
    Command,
    add_data_options,
    add_learner_arguments,
    add_overwrite_argument,
    add_prepare_arguments,
    add_read_arguments,
    error,
    progress_to_stderr,
)
from kernelstream.pipelines.commands._runs import (
    OWN_LINE,
    SUBMITTED,
    RefusedError,
    RunOutput,
    build_summary,
    config_params,
    dead_letter_reasons,
    execute,
    format_table,
    started,
    write_submitted,
    write_summary,
)
from kernelstream.pipelines.config import DEFAULT_DATASET, PROG, runners_for
from kernelstream.pipelines.replay import replay
from kernelstream.pipelines.replay.replay_args import ReplayConfig, shard_arg, workers_arg

if TYPE_CHECKING:
    from kernelstream.pipelines.replay.workers import WorkerPool


COMMAND = Command(
    "replay", help="prequential (test-then-train) evaluation on a data set",
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``replay``'s arguments and handler (definitions only: no Beam)."""
    p.add_argument("data", nargs="?", metavar="DATA",
                   help=f"embedded data set name or file path (default: {DEFAULT_DATASET!r}, "
                   "embedded)")
    add_learner_arguments(p)
    p.add_argument("--params-from", metavar="TUNED_JSON",
                   help=f"the parameters chosen by `{PROG} tune` (its tuned.json, or the folder "
                   "holding it); -p wins")
    p.add_argument("--permutations", "-R", type=int, default=1, metavar="R",
                   help="number of random stream orders R (default: 1)")
    add_prepare_arguments(p)
    add_read_arguments(p)
    p.add_argument("--out", "-o", metavar="DIR",
                   help="output directory (default: runs/<dataset>-<learner>[+<learner>...]; with "
                   "--params-from runs/tune-X/tuned.json: runs/tuned-X); new, empty, or a "
                   "previous run with --overwrite")
    add_overwrite_argument(p)
    p.add_argument("--stream", choices=STREAMS, default="none",
                   help="replay an adversarial stream built from the data instead of permutations "
                   "(Zhang & Liao, ICML 2019: blocks of one repeated example, labels negated "
                   "on even blocks; german-1 = 500x10 rounds, german-2 = 500x20); each of the R "
                   "repetitions draws its own stream (default: none)")
    p.add_argument("--runner", choices=sorted(runners_for("replay")), default=None,
                   help="direct: Apache Beam in-process (FnApiRunner, the default; loop with "
                   "--stream); portable: "
                   "Beam's portable job API (starts a local job service unless "
                   "--job_endpoint is given after '--', e.g. a Flink job server); beam: the "
                   "Beam --runner given after '--' (Flink, Dataflow, ...); dask: Beam's "
                   "DaskRunner on a local Dask cluster of --workers processes or on "
                   "--dask-scheduler (a file's permuted streams; pip install "
                   "'kernelstream[dask]'); loop: the plain "
                   "reference loop. All write predictions/, metrics/, dead_letters/ as "
                   "Parquet and summary.json. Beam pipeline options go after '--'.")
    p.add_argument("--workers", "-j", type=workers_arg, default=None, metavar="N",
                   help="learn the streams (configurations x permutations, or entities) in N "
                   "processes, each running the run's pipeline on its share of the streams; "
                   "outputs and summary.json as one process writes them; 'auto': one per "
                   "core (default: 1). Local file replays on the direct or loop runner; "
                   "with --runner dask: the local Dask cluster's workers (default: 2)")
    p.add_argument("--dask-scheduler", metavar="tcp://HOST:PORT",
                   help="with --runner dask: run on the Dask cluster of this scheduler (its "
                   "scheduler and workers need this kernelstream installed, and its workers "
                   "DATA and --out at the same paths) instead of a local one; see docs/dask.md")
    p.add_argument("--shard", type=shard_arg, default=None, help=argparse.SUPPRESS)
    p.add_argument("--submit-only", action="store_true",
                   help="hand the job to the runner and exit once it is submitted (--runner "
                   "beam, e.g. Dataflow, or portable with a --job_endpoint): prints the job id "
                   f"and writes DIR/{SUBMITTED}; `{PROG} summary DIR` writes summary.json "
                   "once the job has finished")
    add_data_options(p, {
        "--key-by": "CSV/Parquet column naming the entity: one model per entity value (0-based "
        "position or header name); for a Kafka topic, 'key' (the message key) or a CSV column "
        "position. Without -l, the stream's small default (bpa-s; regression: raker "
        "loss=square), whatever the rows"})
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
    p.set_defaults(handler=cmd_replay)


def cmd_replay(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    """Check the options and the data, then one run (or ``--follow``'s runs); the exit code."""
    try:
        config = ReplayConfig.from_args(args, argv)
        if config.shard is None:  # (a worker's were checked by its parent)
            replay.check_pipeline_options(config)
    except ValueError as exc:  # unknown learner, bad parameter, inconsistent options
        return error("replay", str(exc))
    if config.shard is not None:
        return run_shard(config)
    try:
        with started(config, "replay", args.overwrite) as pool:
            if getattr(args, "submit_only", False):
                return _submit(config)
            if args.follow is not None:
                return _follow(config, args.follow, args.follow_runs)
            return _run_once(config, pool=pool)
    except RefusedError as exc:
        return exc.code


def run_shard(config: ReplayConfig) -> int:
    """A worker process of ``--workers`` (``--shard I/N``): import the runner while the
    parent checks the data, wait for its go, learn this shard's streams into the run's
    outputs; the parent writes the summary. Also ``tune``'s workers."""
    # the worker pool imports the CLI (a worker is a copy of it): a circle at module level
    from kernelstream.pipelines.replay.workers import await_go

    progress_to_stderr(not config.quiet, config.shard)
    replay.load_runner(config.runner)  # Beam (the second it takes) while the parent checks
    if not await_go():  # the parent stopped the run before it started
        return 0
    return _run_once(config)


def _run_once(config: ReplayConfig, brief: bool = False,
              pool: WorkerPool | None = None) -> int:
    """One run (on the worker processes of ``pool`` with ``--workers``): the summary table
    (``brief``: one line) and ``summary.json``; the exit code."""
    run = execute(config, "replay", pool)
    if isinstance(run, int):  # the run failed: its error is printed
        return run
    if config.shard is not None:  # a worker of --workers: its parent writes the summary
        return 0
    doc = build_summary(config, run)
    # a resume that read no new example: its figures are the state it continues
    carried = (config.kafka.checkpoint is not None and not run.counts.get("predictions")
               and bool(run.results or run.keys))
    if carried:
        doc["no_new_examples"] = True
    path = write_summary(doc, config.out)
    if carried and not brief:
        print(f"{PROG} replay: no new examples on {config.data} since the last checkpoint: the "
              "figures are those of the runs it continues", file=sys.stderr, flush=True)
    if brief:
        print(f"{time.strftime('%H:%M:%S')} {config.out}: {doc.get('predictions', 0)} new "
              f"predictions, {doc.get('dead_letters', 0)} dead letters", flush=True)
        return 0
    print_run(config, run, path)
    return 0


def print_run(config: ReplayConfig, run: RunOutput, path: str) -> None:
    """The summary table of a finished run and where its summary is (also ``summary``'s)."""
    rows = [r.to_summary() for r in run.results]
    if run.keys and config.read.key_by is not None:  # one model per entity: them pooled
        rows = pooled_configs(run.keys, config_params(config))
    if rows:
        print(format_table(rows))
        # after the table, on stderr: a run no better than ignoring the features
        for s in rows:
            for line in skill_warnings(s["label"], s):
                print(f"{PROG}: {line}", file=sys.stderr, flush=True)
    if run.keys and config.read.key_by is not None:
        entities = len({k.get("entity") for k in run.keys})
        print(f"{entities:,} entities: {len(run.keys):,} models (entity × configuration × "
              "order), pooled per configuration above (each entity's own figures: "
              "summary.json 'keys' and metrics/)")
    if run.counts.get(DEAD_LETTER_TAG):
        where = fs.join(config.out, DEAD_LETTER_TAG)
        why = reasons_summary(dead_letter_reasons(where))  # one line: the reasons by count
        print(f"dead letters: {run.counts[DEAD_LETTER_TAG]} rejected input records"
              f"{': ' + why if why else ''} (see {where})")
    print(f"summary: {path}")


def _submit(config: ReplayConfig) -> int:
    """``--submit-only``: submit the run's job, write ``OUT/submitted.json`` (what ``summary``
    needs to read the outputs back), print the job id and exit 0 without waiting."""
    try:
        job_id = replay.submit(replay.plan(config))
    except OWN_LINE as exc:  # a broker that does not answer
        return error("replay", str(exc))
    except (ConfigError, ValueError, OSError) as exc:
        return error("replay", str(exc))
    write_submitted(config, job_id)
    print(f"submitted: job {job_id} ({config.runner} runner); outputs in {config.out}")
    print(f"when the job has finished: {PROG} summary {config.out}")
    return 0


def _follow(config: ReplayConfig, every: float, runs: int | None) -> int:
    """``--follow``: a checkpointed run every ``every`` seconds, each learning what arrived
    since the previous one, its outputs in ``OUT/ckpt-NNNNNN/`` (the checkpoint it commits);
    until ``runs`` runs or Ctrl-C (exit 130; a run cut short commits nothing: the next
    continues from the last committed checkpoint). The checkpoint directory stays locked for
    the whole command; before each run the output folders of runs that never committed are
    removed."""
    checkpoint = config.kafka.checkpoint
    assert checkpoint is not None
    done = 0
    try:
        with replay.checkpoint_lock(checkpoint):
            print(f"following {config.data}: a run every {every:g} s, checkpoints in "
                  f"{checkpoint}, outputs in {config.out}/ckpt-NNNNNN; Ctrl-C stops",
                  file=sys.stderr, flush=True)
            while runs is None or done < runs:
                t0 = time.monotonic()
                if not fs.is_remote(config.out) and not fs.is_remote(checkpoint):
                    remove_orphans(config.out, [c.number for c in committed(checkpoint)])
                name = next_checkpoint(checkpoint).name
                code = _run_once(replace(config, out=fs.join(config.out, name)), brief=True)
                if code:
                    return code
                done += 1
                if runs is not None and done >= runs:
                    break
                time.sleep(max(0.0, every - (time.monotonic() - t0)))
    except CheckpointInUse as exc:
        return error("replay", str(exc))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted after {done} run(s); the next run continues from the last "
              "committed checkpoint", file=sys.stderr)
        return 130
    return 0
