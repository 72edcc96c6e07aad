"""The plan of a replay run: what the runners are asked to do (:class:`ReplayRun`, made from a
:class:`~kernelstream.pipelines.replay.replay_args.ReplayConfig` by
:func:`~kernelstream.pipelines.replay.replay.plan`), what they give back (:class:`ReplayResult`)
and the replay's own pipeline options.

Apart from the runners so that every runner (:mod:`.loop`, :mod:`.beam_replay`,
:mod:`.dask_replay`) imports the plan without importing the module that picks the runner.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernelstream.data.options import ReadOptions
from kernelstream.engine.evaluate import EvalResult
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.replay import checkpoints as ckpts
from kernelstream.engine.replay.metrics import eval_results
from kernelstream.engine.replay.sources import ReplayStreams
from kernelstream.errors import ConfigError

if TYPE_CHECKING:  # the Kafka client is imported by the runs that read or write a topic
    from kernelstream.kafka_client import KafkaReadOptions, KafkaTopic, SourcePosition

ORDERS = ("permuted", "file")
# Where the Beam learner parks early blocks. Ordered-list state is what the FnApiRunner and
# Beam's local job service implement best, but support for it through the portable Fn API on
# Flink and Dataflow is not established (apache/beam#21358, #20666), so "auto" uses bag state
# (supported everywhere; a range read scans only the parked blocks) on every other runner.
EARLY_STATES = ("auto", "ordered_list", "bag")


def add_replay_options(parser: Any) -> None:
    """The replay's own pipeline options (``--block_size`` ...), settable after ``--``; Beam's
    ``ReplayPipelineOptions`` declares the same ones."""
    parser.add_argument("--block_size", type=int, default=None,
                        help="rows per block moved through the pipeline")
    parser.add_argument("--metrics_window", type=int, default=None,
                        help="positions per metrics window")
    parser.add_argument("--reshuffle_blocks", default=None, choices=("true", "false"),
                        help="redistribute blocks across workers before learning")
    parser.add_argument("--early_state", default=None, choices=EARLY_STATES,
                        help="state holding blocks that arrive early: ordered_list, bag, "
                        "or auto (ordered_list on the in-process runners, bag elsewhere)")


def _replay_options(pipeline_args: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    add_replay_options(parser)
    try:
        return parser.parse_known_args(list(pipeline_args))[0]
    except argparse.ArgumentError as exc:  # --block_size=abc: one line, not a usage
        raise ConfigError(f"after '--': {exc}") from None


def check_replay_options(pipeline_args: Sequence[str]) -> None:
    """The replay's own options after ``--`` checked before the run: ``--block_size`` and
    ``--metrics_window`` >= 1 (a 0 fell back to the default unsaid)."""
    opts = _replay_options(pipeline_args)
    for name in ("block_size", "metrics_window"):
        value = getattr(opts, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name} (after '--') must be >= 1, got {value}")


@dataclass(frozen=True)
class Protocol:
    """The prequential protocol: permutations ``first_permutation ..`` + ``permutations`` - 1
    of the data drawn from ``seed`` (``kernelstream tune``'s are held out from a replay's
    0..R-1), each cut to its first ``stream_rows`` positions when given; ``order="file"``:
    one stream in the file's own order, read in parallel chunks."""

    seed: int = 0
    permutations: int = 1
    order: str = "permuted"
    first_permutation: int = 0
    stream_rows: int | None = None


@dataclass(frozen=True)
class Data:
    """What the run reads: the data as given (``source``: an embedded name, a path or a
    topic URL), how (one ``read``, its path resolved to the file or the topic), a topic's
    bounded read (``kafka``, ``kafka_client``) and the chunks of ``order="file"``."""

    source: str
    read: ReadOptions
    kafka: KafkaReadOptions | None = None  # the data is a Kafka topic (``kafka_client``)
    chunk_bytes: int = 16 << 20
    auto_scale: str | None = None  # ``scale="auto"`` scaled: why (``ReplayConfig.auto_scale``)


@dataclass(frozen=True)
class Learners:
    """The learner configurations, one stream (or one per entity) each per permutation."""

    configs: tuple[LearnerConfig, ...]


@dataclass(frozen=True)
class Outputs:
    """Where the outputs go: ``out`` (a local directory or a URL, gs://...), the metrics
    windows, and ``kafka_out`` to write them to PREFIX-{predictions,...} topics too, with the
    sink's kafka-python settings (``kafka_client``)."""

    out: str
    metrics_window: int = 1000
    kafka_out: KafkaTopic | None = None
    kafka_client: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Recovery:
    """A topic's checkpoints: the directory resumed from and written to, and, set by
    ``replay.execute``, the checkpoint resumed from and the one this run writes."""

    checkpoint: str | None = None
    resume_from: ckpts.Checkpoint | None = None
    writes: ckpts.Checkpoint | None = None

    @property
    def resume_position(self) -> SourcePosition | None:
        return None if self.resume_from is None else self.resume_from.position()


@dataclass(frozen=True)
class Execution:
    """How the runner carries the run out: the runner and Beam's options after ``--``, the
    engine's settings, one shard of ``replay --workers`` (learn only the streams of shard
    ``shard`` of ``shards``, ``ReplayStreams.owns``; the parent clears and reads back), the
    examples the run will learn when known (progress shows a total and an ETA), and Dask's
    cluster (an existing one's scheduler, else a local one of ``dask_workers`` processes)."""

    runner: str = "direct"
    pipeline_args: tuple[str, ...] = ()
    block_size: int = 1024  # large enough to amortise Beam's per-element cost (~1 ms a block)
    reshuffle: bool | None = None  # None: when there are several streams and workers
    scramble: int | None = None  # seed: deliver blocks in a random order (tests)
    early_state: str = "auto"
    shard: int = 0
    shards: int = 1
    expected_examples: int | None = None
    dask_scheduler: str | None = None
    dask_workers: int = 2


@dataclass(frozen=True)
class ReplayRun:
    """The runners' plan of a :class:`ReplayConfig` (:func:`plan`): the protocol and the
    run's parts, its data resolved, its options checked and parsed. ``dataclasses.replace``
    makes a changed copy (of a part: ``replace(run, execution=replace(run.execution, ...))``).
    """

    protocol: Protocol
    data: Data
    learners: Learners
    outputs: Outputs
    recovery: Recovery = field(default_factory=Recovery)
    execution: Execution = field(default_factory=Execution)

    @property
    def spec(self) -> ReplayStreams:
        p, x = self.protocol, self.execution
        return ReplayStreams(tuple(c.label for c in self.learners.configs), seed=p.seed,
                             permutations=p.permutations, block_size=x.block_size,
                             shuffle=p.order == "permuted", shard=x.shard, shards=x.shards,
                             first=p.first_permutation, rows=p.stream_rows)


@dataclass
class ReplayResult:
    """Per-key summaries (from the metrics output), counters, and where the outputs are;
    ``configs``: the configurations the run learnt with (their widths resolved from the data,
    ``LearnerConfig.with_widths``) and ``seed`` its seed, when the run itself made it."""

    summaries: list[dict[str, Any]]
    counters: dict[str, int]
    out: str  # local directory or a URL (gs://...)
    runner: str
    seconds: float
    configs: tuple[LearnerConfig, ...] = ()
    seed: int = 0
    # how the features were read, as summary.json records it: ``scale`` (``none``/``01``) and,
    # when ``scale="auto"`` scaled them, why (a standardised target: each config's ``target``)
    scale: str = "none"
    auto_scale: str | None = None

    def eval_results(self, configs: Sequence[LearnerConfig] | None = None,
                     seed: int | None = None) -> list[EvalResult]:
        """The per-configuration results (their ``params``: the numbers learnt with) of
        ``configs`` (default: the run's own) with ``seed`` (default: the run's)."""
        return eval_results(self.summaries, self.configs if configs is None else configs,
                            seed=self.seed if seed is None else seed)

    @property
    def warnings(self) -> list[str]:
        """The warnings ``kernelstream replay`` prints about each configuration's figures
        (:attr:`EvalResult.warnings <kernelstream.engine.evaluate.EvalResult.warnings>`);
        per-entity streams (``key_by``) are not looked at."""
        return [w for r in self.eval_results() for w in r.warnings]
