"""The replay pipeline on Beam: build and run it (the ``direct``, ``portable`` and ``beam``
runners of ``kernelstream.pipelines.replay.replay``, which describes the run and reads back its
outputs)::

    source (blocks + dead letters) → [Reshuffle] → LearnPredict → one Parquet sink
                                                                 ├─ predictions/
                                                                 ├─ metrics/
                                                                 └─ dead_letters/

* ``direct`` — Beam's FnApiRunner, named explicitly (the DirectRunner would first try to fetch
  the Prism binary). Its fixed cost dominates a short replay; one cut of it: the sink's
  files are renamed after the run rather than by a finalizing stage (the FnApiRunner never
  retries a bundle: ``WriteOutputs(finalize=False)``). (Reading the file in a thread while
  Beam builds the pipeline was tried and measured slower on an idle machine: parsing holds
  the GIL; ``benchmarks/results/pipeline.md``.)
  ``--direct_num_workers=N --direct_running_mode=multi_processing`` in ``pipeline_args``
  runs it on N worker processes, but moves every block to them through gRPC and was slower
  than one worker on a grid (``benchmarks/results/grid.md``): a grid uses a machine's cores
  with ``replay --workers N`` (``pipelines.replay.workers``), which runs this pipeline in N
  processes on shares of the streams.
* ``portable`` — the portable path Flink uses: the pipeline is submitted with
  ``PortableRunner`` to the ``--job_endpoint`` in ``pipeline_args`` (e.g. Beam's Flink job
  server) or, without one, to a Beam local job service started on a free port and stopped
  afterwards, with a LOOPBACK environment unless ``--environment_type`` is given (EXTERNAL:
  a worker pool, see ``deploy/``).
* ``beam`` — the Beam runner named by ``--runner=...`` in ``pipeline_args`` (FlinkRunner,
  DataflowRunner, ...).
"""

from __future__ import annotations

import contextlib
import io
import logging
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from kernelstream import fs
from kernelstream._services import serve
from kernelstream.engine.deadletters import DEAD_LETTER_TAG
from kernelstream.engine.replay.checkpoints import SavedStates
from kernelstream.engine.replay.metrics import METRICS_NAMESPACE
from kernelstream.engine.replay.outputs import OUTPUTS, SCHEMAS, output_of
from kernelstream.engine.replay.sources import FileLoader
from kernelstream.errors import ConfigError
from kernelstream.kafka_client.sink import output_topics
from kernelstream.pipelines.replay.plan import ReplayRun, add_replay_options
from kernelstream.transforms.replay import checkpoint as ckpts
from kernelstream.transforms.replay.kafka import ReadKafkaBlocks, WriteKafka
from kernelstream.transforms.replay.learn import LearnPredict
from kernelstream.transforms.replay.ordering import ScrambleBlocks
from kernelstream.transforms.replay.sinks import WriteOutputs
from kernelstream.transforms.replay.sources import (
    ReadFileBlocks,
    ReadPermutedStreams,
)


class ReplayPipelineOptions(PipelineOptions):
    """Pipeline options of the replay pipeline (also settable as ``--block_size`` etc.)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        add_replay_options(parser)


def check_beam_options(pipeline_args: Sequence[str]) -> None:
    """Beam's pipeline options after ``--`` parsed before the run: a malformed one
    (``--direct_num_workers=abc``) is one line, not Beam's usage text and an exit from
    inside the run (a worker's traceback). ReplayPipelineOptions known to Beam, so that
    ``--block_size`` is no unparseable option."""
    if not pipeline_args:
        return
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            ReplayPipelineOptions(list(pipeline_args)).get_all_options(
                retain_unknown_options=True)
    except SystemExit:  # argparse's error: its last line says what is wrong
        lines = said.getvalue().strip().splitlines() or ["invalid pipeline options"]
        raise ConfigError(f"after '--': {lines[-1].split('error: ', 1)[-1]}") from None


# -- Beam ----------------------------------------------------------------------------------------


def build_pipeline(p: beam.Pipeline, run: ReplayRun) -> WriteOutputs | None:
    """Add the replay transforms to ``p``. Returns the sink when its files are the caller's to
    finalize once ``p`` has run (the FnApiRunner, which never retries a bundle: see
    ``WriteOutputs(finalize=False)``), else None."""
    keyed = False
    if run.data.kafka is not None:
        src = p | "Read" >> ReadKafkaBlocks(run.data.kafka, run.data.read, run.spec.configs,
                                            run.execution.block_size, run.recovery.resume_position)
    elif run.protocol.order == "file":
        src = p | "Read" >> ReadFileBlocks(run.data.read, run.spec.configs,
                                           run.execution.block_size, run.data.chunk_bytes)
    else:
        # (stream key, block) pairs straight from the source, unless they are scrambled
        keyed = run.execution.scramble is None
        src = p | "Read" >> ReadPermutedStreams(FileLoader(run.data.read), run.spec,
                                                keyed=keyed)
    blocks = src.blocks
    if run.execution.scramble is not None:
        blocks = blocks | "Scramble" >> ScrambleBlocks(run.execution.scramble)
    elif run.execution.reshuffle or (run.execution.reshuffle is None and _workers(run) > 1 and (
            len(run.learners.configs) * run.protocol.permutations > 1
            or run.data.read.key_by is not None)):
        # Spread the streams over workers; LearnPredict restores each stream's order. (With
        # one stream or one worker the shuffle would only cost time.)
        blocks = blocks | "Reshuffle" >> beam.Reshuffle()
    # a resumed stream's saved state is read by key where the stream is learnt
    resume = run.recovery.resume_from
    out = blocks | "Learn" >> LearnPredict(run.learners.configs, seed=run.protocol.seed,
                                           metrics_window=run.outputs.metrics_window,
                                           source=run.data.read.path,
                                           early_state=resolve_early_state(run),
                                           saved_states=(None if resume is None else
                                                         SavedStates.of(resume)),
                                           emit_states=run.recovery.writes is not None,
                                           progress_total=run.execution.expected_examples,
                                           keyed=keyed, merged=run.outputs.kafka_out is None)
    if run.recovery.writes is not None:
        # the streams this run did not touch keep their saved states (a shuffle, not a
        # side input: each worker sees its share)
        saved = (None if run.recovery.resume_from is None
                 else p | "SavedStates" >> ckpts.ReadStates(run.recovery.resume_from))
        _ = out.states | "Checkpoint" >> ckpts.WriteCheckpoint(run.recovery.writes, saved,
                                                              src.position)
    # the source's dead letters are the file's: with replay --workers one shard writes them
    src_dead = (src.dead_letters,) if run.spec.source_dead_letters else ()
    # one sink for the three outputs, each record routed to its directory by its kind (the
    # learner's are all on its main output, but with --kafka-out)
    learnt = ((out.predictions,) if run.outputs.kafka_out is None
              else (out.predictions, out.metrics, out.dead_letters))
    # on the FnApiRunner the sink's renaming step (a stage of its own) runs after the pipeline
    after = run.execution.runner == "direct"
    sink = WriteOutputs({name: (fs.join(run.outputs.out, name), SCHEMAS[name]) for name in OUTPUTS},
                        output_of, finalize=not after)
    _ = (*learnt, *src_dead) | "Write" >> sink
    if run.outputs.kafka_out is not None:
        topics = output_topics(run.outputs.kafka_out)
        dead = (*src_dead, out.dead_letters) | "DeadLetters" >> beam.Flatten()
        for name, pcoll in (("predictions", out.predictions), ("metrics", out.metrics),
                            (DEAD_LETTER_TAG, dead)):
            _ = pcoll | f"Kafka_{name}" >> WriteKafka(topics[name], run.outputs.kafka_client)
    return sink if after else None


def resolve_early_state(run: ReplayRun) -> str:
    """The early-block state of ``run`` (see ``plan.EARLY_STATES``): "auto" is ordered-list
    state on the FnApiRunner and on Beam's local job service (``portable`` without a
    ``--job_endpoint``), bag state on any other runner (Flink, Dataflow, ...)."""
    if run.execution.early_state != "auto":
        return run.execution.early_state
    local = run.execution.runner == "direct" or (run.execution.runner == "portable" and not any(
        a.startswith("--job_endpoint") for a in run.execution.pipeline_args))
    return "ordered_list" if local else "bag"


def _workers(run: ReplayRun) -> int:
    from apache_beam.options.pipeline_options import DirectOptions

    options = PipelineOptions(list(run.execution.pipeline_args))
    return int(options.view_as(DirectOptions).direct_num_workers or 1)


def run_beam(run: ReplayRun) -> dict[str, int]:
    """Build the pipeline of ``run``, run it on its runner and return its counters."""
    with contextlib.ExitStack() as stack:
        p = _pipeline(run, stack)
        sink = build_pipeline(p, run)
        with _interrupt_quietly():
            result = p.run()
            result.wait_until_finish()
        if sink is not None:
            sink.finalize()
        return _counters(result)


def submit_beam(run: ReplayRun) -> str:
    """Build the pipeline of ``run`` and hand it to its runner without waiting for it
    (``replay --submit-only``): the job's id as the runner names it. Only for runners that
    run the job elsewhere (``replay_checks.check_submit_only``): an in-process runner's job
    would end with this process, and its sinks' files are renamed by the caller."""
    with contextlib.ExitStack() as stack:
        p = _pipeline(run, stack)
        if build_pipeline(p, run) is not None:  # not on a runner that submit-only accepts
            raise ValueError("this runner's outputs are finalized by the launcher: it cannot "
                             "submit and exit")
        result = p.run()
        job_id = getattr(result, "job_id", None)  # Dataflow's result; the portable one's:
        job_id = job_id() if callable(job_id) else getattr(result, "_job_id", None)
        return str(job_id or "(the runner gave no job id)")


def _pipeline(run: ReplayRun, stack: contextlib.ExitStack) -> beam.Pipeline:
    """The Beam pipeline object of ``run``'s runner; what it needs for the run's length
    (Beam's local job service) is entered on ``stack``."""
    args = list(run.execution.pipeline_args)
    if run.execution.runner == "portable":
        if not any(a.startswith("--job_endpoint") for a in args):
            # no job server given: start Beam's local one (the portable path Flink uses);
            # its SDK workers run in this process (LOOPBACK) unless an environment is
            # named (e.g. EXTERNAL: a worker pool, as in deploy/flink)
            endpoint = stack.enter_context(local_job_service())
            args += [f"--job_endpoint={endpoint}"]
            if not any(a.startswith("--environment_type") for a in args):
                args += ["--environment_type=LOOPBACK"]
        return beam.Pipeline(options=PipelineOptions(["--runner=PortableRunner", *args]))
    if run.execution.runner == "beam":
        # the runner named in the pass-through options (FlinkRunner, DataflowRunner, ...)
        if not any(a.startswith("--runner") for a in args):
            raise ValueError("runner 'beam' needs a Beam --runner=... pipeline option")
        return beam.Pipeline(options=PipelineOptions(args))
    stack.enter_context(prompt_state_sampler())
    return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(args))


# Every bundle runs a state sampler: a thread that times the steps for Beam's msecs counters
# (nothing a replay reads). It sleeps in steps that grow by 1.2x up to 200 ms, and the end of
# the bundle waits for the current sleep to finish: about a twelfth of a short bundle, up to
# 0.2 s of a long one, lost at the end of each of a replay's four bundles (10 % of a9a's
# direct run on 2 busy cores). Steps of at most 5 ms cost a thread wake-up every 5 ms.
SAMPLING_MS = 5


@contextlib.contextmanager
def prompt_state_sampler() -> Iterator[None]:
    """Sample every :data:`SAMPLING_MS` ms in the bundles of this process's FnApiRunner while
    the block runs (the default of ``StateSampler``'s period; left alone by a Beam whose
    sampler has another signature)."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    default = (statesampler.DEFAULT_SAMPLING_PERIOD_MS,)
    if init.__defaults__ != default:
        yield
        return
    init.__defaults__ = (SAMPLING_MS,)
    try:
        yield
    finally:
        init.__defaults__ = default


@contextlib.contextmanager
def _interrupt_quietly() -> Iterator[None]:
    """Ctrl-C (SIGINT) while Beam runs becomes a plain ``KeyboardInterrupt``. Left alone, the
    FnApiRunner logs the interrupted DoFn's traceback and re-raises the interrupt as a
    ``RuntimeError`` (exit 1 after ~180 lines); here Beam's logging is silenced from the
    moment of the signal and whatever the run raises then is reported as the interrupt
    (the CLI prints one line and exits 130). After an interrupt, Beam's logging and the
    tracebacks of threads (the portable runner's gRPC threads fail once its job service is
    stopped) stay silenced: the process is on its way out."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield  # not ours to handle (a worker thread, or a caller's own handler)
        return
    beam_log = logging.getLogger("apache_beam")
    level = beam_log.level
    hit = threading.Event()

    def on_sigint(signum: int, frame: Any) -> None:
        if not hit.is_set():
            hit.set()
            beam_log.setLevel(logging.CRITICAL + 1)
            threading.excepthook = _quiet_thread_exit
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    except BaseException:
        if hit.is_set():
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if not hit.is_set():
            beam_log.setLevel(level)


def _quiet_thread_exit(args: Any) -> None:
    """``threading.excepthook`` after an interrupt: Beam's threads die quietly."""


def _counters(result: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        res = result.metrics().query()
    except Exception:  # a runner without metrics support: counters are a diagnostic only
        return out
    for c in res.get("counters", []):
        if c.key.metric.namespace == METRICS_NAMESPACE:
            name = c.key.metric.name
            out[name] = out.get(name, 0) + int(c.committed or c.attempted or 0)
    return out


@contextlib.contextmanager
def local_job_service(timeout: float = 60.0) -> Iterator[str]:
    """Start Beam's local job service (the portable runner's job server) on a free port;
    yield its endpoint; stop it (this process only) on exit."""
    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                "--port", str(port)]

    with serve(argv, "the Beam job service", "localhost", timeout) as port:
        yield f"localhost:{port}"
