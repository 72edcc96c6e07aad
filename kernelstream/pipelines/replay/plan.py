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
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_replay_options(parser)
    return parser.parse_known_args(list(pipeline_args))[0]


@dataclass
class ReplayRun:
    """The runners' plan of a :class:`ReplayConfig` (:func:`plan`): its data resolved, its
    options checked and parsed."""

    data: str
    configs: list[LearnerConfig]
    out: str  # local directory or a URL (gs://...)
    read: ReadOptions
    seed: int = 0
    permutations: int = 1
    block_size: int = 1024  # large enough to amortise Beam's per-element cost (~1 ms a block)
    metrics_window: int = 1000
    reshuffle: bool | None = None  # None: when there are several streams and workers
    scramble: int | None = None  # seed: deliver blocks in a random order (tests)
    order: str = "permuted"  # "file": one stream in file order, read in parallel chunks
    chunk_bytes: int = 16 << 20
    runner: str = "direct"
    pipeline_args: list[str] = field(default_factory=list)
    early_state: str = "auto"
    kafka: KafkaReadOptions | None = None  # the data is a Kafka topic (``kafka_client``)
    kafka_out: KafkaTopic | None = None  # also write the outputs to PREFIX-{predictions,...}
    kafka_client: tuple[tuple[str, str], ...] = ()  # kafka-python settings of the sink
    checkpoint: str | None = None  # resume from / write checkpoints here (Kafka sources)
    # set by execute(): the checkpoint resumed from and the one this run writes
    resume_from: ckpts.Checkpoint | None = None
    writes: ckpts.Checkpoint | None = None
    # one shard of ``replay --workers`` (``pipelines.replay.workers``): learn only the streams of
    # shard ``shard`` of ``shards`` (``ReplayStreams.owns``); the parent clears and reads back
    shard: int = 0
    shards: int = 1
    # permutations first..first+permutations-1 (``kernelstream tune``: held out from a
    # replay's 0..R-1), each cut to its first ``stream_rows`` positions when given
    first_permutation: int = 0
    stream_rows: int | None = None
    # examples the run will learn (all its streams), when known: progress shows a total and
    # an ETA (see :func:`expected_examples`)
    expected_examples: int | None = None
    # ``dask``: an existing cluster's scheduler (tcp://HOST:PORT), else a local cluster of
    # ``dask_workers`` processes
    dask_scheduler: str | None = None
    dask_workers: int = 2

    @property
    def resume_position(self) -> SourcePosition | None:
        return None if self.resume_from is None else self.resume_from.position()

    @property
    def spec(self) -> ReplayStreams:
        return ReplayStreams(tuple(c.label for c in self.configs), seed=self.seed,
                          permutations=self.permutations, block_size=self.block_size,
                          shuffle=self.order == "permuted", shard=self.shard,
                          shards=self.shards, first=self.first_permutation,
                          rows=self.stream_rows)


@dataclass
class ReplayResult:
    """Per-key summaries (from the metrics output), counters, and where the outputs are."""

    summaries: list[dict[str, Any]]
    counters: dict[str, int]
    out: str  # local directory or a URL (gs://...)
    runner: str
    seconds: float

    def eval_results(self, configs: Sequence[LearnerConfig], seed: int) -> list[EvalResult]:
        return eval_results(self.summaries, configs, seed=seed)
