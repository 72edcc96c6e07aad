"""The run machinery ``replay`` and ``tune`` share: a run on its runner (:func:`run`), the
start of a run (:func:`started`: ``--workers`` processes, data check, output directory), the
summary table and ``summary.json`` (:func:`build_summary`, schema in README.md).

Flow of a run: :class:`~kernelstream.pipelines.replay.replay_args.ReplayConfig` → a runner from
:func:`run` (returns one :class:`~kernelstream.engine.evaluate.EvalResult` per learner
configuration) → summary table and ``summary.json``. pyarrow is imported when a run reads or
writes Parquet (:mod:`kernelstream._arrow`), Beam by the runners that need it
(``pipelines.replay.replay``), never here.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelstream import __version__, data, fs
from kernelstream._json import json_safe
from kernelstream.data.label_mix import mix_warning
from kernelstream.data.scaling import ranges_doc
from kernelstream.engine.deadletters import DEAD_LETTER_TAG
from kernelstream.engine.evaluate import stderr_progress
from kernelstream.engine.learner_config import records
from kernelstream.engine.offsets import OffsetOutOfLog
from kernelstream.engine.orders import evaluate_stream
from kernelstream.engine.pooled import pooled_configs
from kernelstream.engine.replay.checkpoints import latest
from kernelstream.engine.replay.outputs import parquet_files
from kernelstream.engine.writer_lock import CheckpointInUse
from kernelstream.errors import (
    ConfigError,
    DataError,
    FileChangedError,
    OutFolderError,
    WorkerError,
)
from kernelstream.learners.registry import stores_rows
from kernelstream.numbers import sig_pm
from kernelstream.pipelines import run_folder
from kernelstream.pipelines.commands._common import error, progress_to_stderr
from kernelstream.pipelines.config import PROG, is_topic
from kernelstream.pipelines.replay import replay
from kernelstream.pipelines.replay.replay_args import ReplayConfig
from kernelstream.pipelines.replay.replay_checks import check_data, data_path
from kernelstream.pipelines.replay.sample_rows import place

if TYPE_CHECKING:
    from kernelstream.engine.evaluate import EvalResult
    from kernelstream.pipelines.replay.plan import ReplayResult
    from kernelstream.pipelines.replay.workers import WorkerPool

SUMMARY_SCHEMA = 1


@dataclass
class RunOutput:
    """What a runner returns: one :class:`EvalResult` per learner configuration (per-entity
    runs, ``--key-by``, have none), and for runs that write Parquet outputs the row counts of
    those outputs and the per-stream-key summaries read back from ``metrics/``."""

    results: list[EvalResult]
    counts: dict[str, int] = field(default_factory=dict)
    keys: list[dict[str, Any]] = field(default_factory=list)


# errors whose message is the whole story (one line, exit 2): another run holds the checkpoint
# directory, a resume offset outside the log, a broker that does not answer
OWN_LINE = (CheckpointInUse, OffsetOutOfLog, ConnectionError, FileChangedError)


def command_line(config: ReplayConfig) -> list[str]:
    """The arguments after ``kernelstream`` that made the run, Beam's pipeline options after
    ``--`` included (summary.json's and the folder marker's ``argv``)."""
    extra = ["--", *config.pipeline_args] if config.pipeline_args else []
    return [*config.argv, *extra]


# -- runners -----------------------------------------------------------------------------------
def _evaluate_in_memory(config: ReplayConfig) -> list[EvalResult]:
    """Adversarial streams (``--stream``): load the data in memory, then
    :func:`kernelstream.engine.orders.evaluate_stream` each configuration in turn."""
    try:
        X, y = data.load_dataset(config.data, **config.read.load_kwargs())
    except (ValueError, OSError) as exc:  # ParseError is a ValueError and names file:line
        raise DataError(str(exc)) from exc
    if X.shape[0] == 0:
        raise DataError(f"{config.data}: no examples")
    progress = None if config.quiet else stderr_progress
    return [
        evaluate_stream(X, y, config.stream, c, seed=config.seed,
                        permutations=config.permutations, progress=progress, warn=False)
        for c in config.learners
    ]


def run(config: ReplayConfig, pool: WorkerPool | None = None) -> RunOutput:
    """``config`` on its runner (``config.RUNNERS``; on the worker processes of ``pool`` with
    ``--workers``): Parquet outputs, the summary from ``metrics/``. Adversarial streams
    (``--stream``, loop runner only: ``replay_args`` refuses the others) are generated in
    memory and only summarised."""
    if config.stream != "none":
        return RunOutput(_evaluate_in_memory(config))
    try:
        if config.shard is not None:  # one worker process of --workers
            replay.run_config(config)
            return RunOutput([])  # the parent reads back and summarises all shards
        # --workers: the worker processes started by cmd_replay
        res = pool.finish() if pool is not None else replay.run_config(config)
    except OWN_LINE:
        raise
    except (FileNotFoundError, OSError) as exc:
        raise DataError(str(exc)) from exc
    return run_output(config, res)


def run_output(config: ReplayConfig, res: ReplayResult) -> RunOutput:
    """The :class:`RunOutput` of a finished run from its outputs read back (``res``: see
    ``pipelines.replay.replay.read_outputs``); also ``kernelstream summary``'s."""
    # counts from the files themselves, so the summary adds up whatever the runner's
    # support for Beam metrics
    counts = {
        out: sum(_parquet_rows(f) for f in parquet_files(fs.join(res.out, out)))
        for out in ("predictions", DEAD_LETTER_TAG)
    }
    return RunOutput(res.eval_results(config.learners, config.seed), counts, res.summaries)


def execute(config: ReplayConfig, command: str, pool: WorkerPool | None = None
            ) -> RunOutput | int:
    """Run ``config`` on its runner (on the worker processes of ``pool`` with ``--workers``);
    a failure is printed as its one line (a failed worker's own lines) and its exit code
    returned instead."""
    try:
        return run(config, pool)
    except WorkerError as exc:  # --workers: the failed worker's own line(s) and exit code
        for line in exc.lines:
            print(line, file=sys.stderr)
        return exc.code
    except OWN_LINE as exc:  # a second writer, a resume offset outside the log, broker down
        # (raised in a Beam transform: without the transform Beam names after it)
        return error(command, re.sub(r"\s*\[while running '[^']*'\]\s*$", "", str(exc)))
    except DataError as exc:
        return error(command, f"cannot read data: {exc}")
    except ConfigError as exc:  # found once the run starts (e.g. a checkpoint's learners)
        return error(command, str(exc))
    except ValueError as exc:
        # learner-side validation during the run (wrong labels for the task, bad rows, ...)
        return error(command, str(exc), code=1)


# -- summary -----------------------------------------------------------------------------------
def build_summary(config: ReplayConfig, run: RunOutput) -> dict[str, Any]:
    """The ``summary.json`` document (schema in README.md, "summary.json").

    Run-level fields first, then the first (in single-learner runs: the only) configuration's
    metrics at the top level, so a single-learner summary is flat; ``configs`` always holds
    every configuration in command-line order.
    """
    results = run.results
    configs = [r.to_summary() for r in results]
    # --key-by: permutation 0's examples over every entity, of the first configuration (every
    # configuration learns the same rows)
    first = next((k["config"] for k in run.keys if k["permutation"] == 0), None)
    examples = (results[0].examples if results
                else sum(k["examples"] for k in run.keys
                         if k["permutation"] == 0 and k["config"] == first))
    doc: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "kernelstream_version": __version__,
        "dataset": config.dataset,
        "data": config.data,
        "examples": examples,
        "n_features": (results[0].n_features if results
                       else max((k["n_features"] or 0 for k in run.keys), default=0)),
        "task": config.read.task,
        "scale": config.read.scale,
        # the effective value: auto when the learners learnt it standardised (the loader itself
        # then leaves it as it is), as a stream's summary says it
        "scale_target": ("auto" if config.learners and config.learners[0].target is not None
                         else config.read.scale_target),
        "limit": config.read.limit,
        "hash_features": config.read.hash_features,
        "rows": config.read.rows,
        "seed": config.seed,
        "permutations": config.permutations,
        "runner": config.runner,
        "stream": config.stream,
        "argv": command_line(config),
    }
    if run.counts:
        # every input record is either an example (predicted once per stream) or a dead
        # letter (source errors once, learner rejections once per stream)
        doc["predictions"] = run.counts.get("predictions", 0)
        doc["dead_letters"] = run.counts.get(DEAD_LETTER_TAG, 0)
    if config.read.key_by is not None:
        doc["key_by"] = config.read.key_by
    if config.default_rows is not None:  # why this learner: the file's rows chose it
        doc["default_learner"] = {"rows": config.default_rows,
                                  "learner": config.learners[0].learner}
        if config.stream != "none":  # ... or the adversarial stream (config.default_learner)
            doc["default_learner"]["stream"] = config.stream
        if config.read.key_by is not None:  # ... or a model per entity
            doc["default_learner"]["key_by"] = config.read.key_by
    if config.auto_scale is not None:  # --scale auto scaled: why (the value is ``scale``)
        doc["auto_scale"] = config.auto_scale
    if config.widths is not None:  # a topic's gamma=auto: where the widths came from
        doc.update(config.widths)
    if config.read.scale_ranges is not None:  # a topic's --scale auto: its first rows' ranges
        doc["scale_ranges"] = ranges_doc(config.read.scale_ranges)
    target = config.learners[0].target if config.learners else None
    if target is not None:  # --scale-target auto: what the learners learnt the target as
        doc["target_standardised"] = {"mean": target[0], "std": target[1]}
    if config.sample is not None:  # --sample N: data is the drawn file
        doc["sample"] = {"rows": config.sample[1], "from": config.sample[0],
                         "seed": config.seed, "order": "file"}
    if configs:
        doc.update({k: v for k, v in configs[0].items() if k not in doc})
    doc["configs"] = configs
    if config.read.key_by is not None:
        doc["keys"] = run.keys  # one model per entity: per-key metrics
        # and every configuration's entities pooled, the row its table prints
        doc["pooled"] = pooled_configs(run.keys, config_params(config))
    return doc


def config_params(config: ReplayConfig) -> dict[str, dict[str, Any]]:
    """Each learner configuration's parameters by label, in command-line order."""
    return {c.label: dict(c.params) for c in config.learners}


def write_summary(doc: dict[str, Any], out: str | Path) -> str:
    fs.makedirs(out)
    path = fs.join(out, "summary.json")
    # never leave a half-written summary behind
    fs.write_bytes_atomic(path, (json.dumps(json_safe(doc), indent=2, allow_nan=False)
                                 + "\n").encode())
    return path


# what ``replay --submit-only`` leaves in the output directory for ``kernelstream summary``
SUBMITTED = "submitted.json"


def write_submitted(config: ReplayConfig, job_id: str) -> str:
    """``OUT/submitted.json``: the submitted job and the command line that made it (the
    ``replay`` arguments and the pipeline options after ``--``), from which ``summary``
    rebuilds the run's configuration, and for a Kafka topic what its head decided
    (``topic_head``: the resolved widths and scaling ranges)."""
    doc = {"schema": SUMMARY_SCHEMA, "kernelstream_version": __version__, "job_id": job_id,
           "runner": config.runner, "out": config.out, "argv": list(config.argv),
           "pipeline_args": list(config.pipeline_args)}
    if is_topic(config.data):
        # a Kafka topic's gamma=auto, --scale auto and --scale-target auto as decided on its
        # head at submission (each may have decided nothing): ``summary`` rebuilds the
        # configuration with them rather than reading the topic again (which may have moved
        # on, or be out of reach)
        doc["topic_head"] = {
            "configs": records(config.learners), "widths": config.widths,
            "scale_ranges": ranges_doc(config.read.scale_ranges),
            "auto_scale": config.auto_scale}
    path = fs.join(config.out, SUBMITTED)
    fs.write_bytes_atomic(path, (json.dumps(doc, indent=2) + "\n").encode())
    return path


def _parquet_rows(path: str) -> int:
    import pyarrow.parquet as pq  # a replay's outputs are Parquet; the other commands need none

    if fs.is_remote(path):
        with fs.open_read(path) as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)
    return int(pq.ParquetFile(path).metadata.num_rows)


def dead_letter_reasons(directory: str) -> list[tuple[str, int]]:
    """``(reason, count)`` of the dead letters under ``directory`` (the reason column alone is
    read), for the count line of a run; empty when they cannot be read."""
    import pyarrow.compute as pc  # as _parquet_rows: only a replay's outputs need pyarrow
    import pyarrow.parquet as pq

    counts: dict[str, int] = {}
    try:
        for path in parquet_files(directory):
            if fs.is_remote(path):
                with fs.open_read(path) as fh:
                    table = pq.read_table(fh, columns=["reason"])
            else:
                table = pq.read_table(path, columns=["reason"])
            for vc in pc.value_counts(table.column("reason")).to_pylist():
                reason = vc["values"] or ""
                counts[reason] = counts.get(reason, 0) + int(vc["counts"])
    except (OSError, ValueError, KeyError):  # the count line goes out without its reasons
        return []
    return list(counts.items())


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(results: Sequence[dict[str, Any]]) -> str:
    """The terminal table of a run's configurations (their ``summary.json`` entries, or a
    ``--key-by`` run's :func:`~kernelstream.engine.pooled.pooled_configs`, with an *entities*
    column): means ± stds over the permutations, losses and rates with significant digits
    (``numbers.sig``), beside the no-skill baseline of the same streams (the majority-class
    rate; the running-mean predictor's loss) and, for regression, RMSE, MAE and R²."""
    classify = any(s["task"] == "classification" for s in results)
    regress = any(s["task"] != "classification" for s in results)
    pooled = any("entities" in s for s in results)
    rows = [("learner", *(("entities",) if pooled else ()), "examples", "perms",
             "mistake rate (%)", *(("no-skill (%)",) if classify else ()), "avg loss",
             *(("no-skill loss", "RMSE", "MAE", "R²") if regress else ()),
             "#SV", "seconds", "examples/s")]
    for s in results:

        def pm(key: str, s: dict[str, Any] = s) -> str:
            return sig_pm(s[key], s[f"{key}_std"])

        rows.append((
            s["label"], *((str(s.get("entities", "-")),) if pooled else ()), str(s["examples"]),
            str(s["permutations"]), pm("mistake_rate"),
            *((pm("noskill_mistake_rate"),) if classify else ()),
            f"{pm('avg_loss')} ({s['loss']})",
            *((pm("noskill_avg_loss"), pm("rmse"), pm("mae"), pm("r2")) if regress else ()),
            _fmt(s["n_support_vectors"] if stores_rows(s.get("learner") or "") else None,
                 ".1f"), _fmt(s["seconds"], ".3f"),
            _fmt(s["examples_per_second"], ",.0f"),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.ljust(w) if i == 0 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _place_sample(config: ReplayConfig, command: str) -> None:
    """Move ``--sample N``'s rows, drawn before the run's decisions
    (``pipelines.replay.sample_rows``), to where the run reads them (``config.data``)."""
    assert config.staged_sample is not None
    try:
        place(config.staged_sample, config.data)
    except OSError as exc:
        raise RefusedError(error(command, f"--sample: cannot write {config.data}: {exc}")
                           ) from None


def _has_checkpoint(directory: str) -> bool:
    """Whether a replay's ``--checkpoint`` folder holds a committed checkpoint."""
    return fs.exists(directory) and latest(directory) is not None


def _check_resume_out(out: str, checkpoint: str) -> None:
    """Refuse a topic replay that resumes ``checkpoint`` into the folder holding the outputs
    of the run that committed it: a run clears its ``--out`` first, so those would be lost
    (each checkpointed run writes its own folder). Raises :class:`OutFolderError`."""
    ck = latest(checkpoint) if fs.exists(checkpoint) else None
    if ck is None:
        return
    wrote = ck.info().get("out")
    if wrote is None:  # a checkpoint of an earlier version: a finished run's summary tells
        folder = run_folder.inspect(out, run_folder.entry_within(out, checkpoint))
        if not (run_folder.continues(folder, checkpoint) and "summary.json" in folder.entries):
            return
    elif not run_folder.same_path(wrote, out):
        return
    raise OutFolderError(
        f"--out {out} holds the outputs of the run that committed {ck.name} of --checkpoint "
        f"{checkpoint}, which this run continues: give this run a new --out (one folder per "
        "checkpointed run, e.g. --out runs/$(date +%s))")


class RefusedError(Exception):
    """A run refused before it started; its one-line error is printed, ``code`` is the exit
    code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def started(config: ReplayConfig, command: str, overwrite: bool = False) -> Iterator[Any]:
    """The start of a replay-shaped run (``replay``, ``tune``): the output folder claimed
    (``pipelines.run_folder``: new, empty, or a previous run with ``overwrite``; a
    ``--checkpoint`` run continues its own), the ``--workers`` processes spawned (before the
    data check: they import Beam meanwhile, then wait), the data checked, the output directory
    made (a long run must not fail at its very end on a bad ``--out``), progress lines on;
    yields the worker pool (None for one process) and closes it at the end, which stops the
    workers of a run that did not finish. Raises :class:`RefusedError` after printing the
    error."""
    pool = None
    fresh = made = False  # an empty (new) folder: a refusal below leaves it as it was
    # --overwrite replaces a previous run when claimed: data that the run would refuse must
    # not cost it that run, so the check goes first (with --sample, whose rows are drawn into
    # the folder, it cannot)
    checked = overwrite and config.sample is None
    try:
        if checked:
            try:
                check_data(config)
            except ValueError as exc:
                raise RefusedError(error(command, str(exc))) from None
        try:
            checkpoint = config.kafka.checkpoint
            fresh = checkpoint is None and run_folder.inspect(config.out).empty
            made = fresh and not fs.exists(config.out)
            if checkpoint is not None:
                _check_resume_out(config.out, checkpoint)
            run_folder.claim(config.out, command, overwrite=overwrite, checkpoint=checkpoint,
                             resumes=checkpoint is not None and _has_checkpoint(checkpoint),
                             argv=command_line(config),
                             ignore=run_folder.entry_within(config.out, checkpoint))
        except OutFolderError as exc:
            raise RefusedError(error(command, str(exc))) from None
        except OSError as exc:
            raise RefusedError(error(command, f"cannot create the output directory: {exc}")
                               ) from None
        if config.staged_sample is not None:  # --sample N: drawn once, read by every worker
            _place_sample(config, command)
        if config.workers > 1 and config.runner != "dask":  # dask: its cluster's workers
            from kernelstream.pipelines.replay.workers import WorkerPool, effective_workers

            if effective_workers(config) > 1:
                try:
                    pool = WorkerPool.spawn(config)
                except OSError as exc:
                    raise RefusedError(error(command, f"cannot start the worker processes: {exc}")
                                  ) from None
        try:
            if not checked:
                check_data(config)
        except ValueError as exc:  # the data does not fit the options
            if pool is not None:  # (stopped first: nothing may write into the folder after)
                pool.close()
                pool = None
            if fresh:
                run_folder.release(config.out, made)
            raise RefusedError(error(command, str(exc))) from None
        if config.read.limit is not None and config.stream == "none":
            read = replace(config.read, path=data_path(config.data))
            warning = mix_warning(read, config.read.limit)
            if warning is not None:
                print(f"{PROG} {command}: warning: {warning}", file=sys.stderr, flush=True)
        try:
            fs.makedirs(config.out)
        except OSError as exc:
            raise RefusedError(error(command, f"cannot create the output directory: {exc}")
                          ) from None
        progress_to_stderr(not config.quiet)
        yield pool
    finally:
        if pool is not None:
            pool.close()
