"""Beam sources: examples as :class:`~kernelstream.engine.replay.blocks.Block` s of consecutive
rows.

Two readers, for the two ways a replay orders its stream (the reading itself is the engine's):

* :class:`ReadPermutedStreams` — the replay of random permutations (the papers' protocol). A
  permutation needs random access to every row, so one worker loads the data set
  (:class:`~kernelstream.engine.replay.sources.Dataset`) and emits each permutation's blocks, in
  permuted order, for every configuration
  (:func:`~kernelstream.engine.replay.sources.stream_blocks`). This is the documented memory
  trade-off: simple and exactly the loop's stream, but bounded by one worker's memory.
* :class:`ReadFileBlocks` — the stream in file order, for files of any size. The file is cut
  into byte ranges that different workers read and parse independently (two passes, see
  ``kernelstream.engine.replay.chunks``), so no worker holds more than a chunk. The pieces of a
  block that straddles two chunks are joined by a small GroupByKey.

Both emit malformed input as dead-letter rows (source, line, raw text, reason) on the
``dead_letters`` tag, never silently dropping a line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import TextFormat
from kernelstream.engine.deadletters import DEAD_LETTER_TAG
from kernelstream.engine.replay.blocks import Block, concat_blocks
from kernelstream.engine.replay.chunks import (
    Chunk,
    ChunkStats,
    StreamPlan,
    file_chunks,
    make_plan,
    read_chunk,
    scan_chunk,
)
from kernelstream.engine.replay.metrics import METRICS_NAMESPACE
from kernelstream.engine.replay.sources import Dataset, ReplayStreams, stream_blocks


class _EmitStreams(beam.DoFn):
    def __init__(self, load: Callable[[], Dataset], spec: ReplayStreams,
                 keyed: bool = False) -> None:
        self.load = load
        self.spec = spec
        self.keyed = keyed
        self.n_dead = Metrics.counter(METRICS_NAMESPACE, DEAD_LETTER_TAG)
        self.n_rows = Metrics.counter(METRICS_NAMESPACE, "rows_read")

    def process(self, _: Any) -> Iterator[Any]:
        data = self.load()
        self.n_rows.inc(int(data.y.shape[0]))
        for d in data.dead_letters:
            self.n_dead.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER_TAG, d)
        if self.keyed:
            for b in stream_blocks(data, self.spec):
                yield b.key, b
        else:
            yield from stream_blocks(data, self.spec)


class ReadPermutedStreams(beam.PTransform):
    """``PBegin`` → ``Block`` s of every (configuration, permutation[, entity]) stream, plus
    ``dead_letters``. ``load`` (a picklable callable) runs once, on one worker, and returns
    the whole :class:`Dataset` — see the module docstring for the memory trade-off.
    ``keyed``: emit ``(stream key, block)`` pairs, the input of ``LearnPredict(keyed=True)``
    (no keying step of its own)."""

    def __init__(self, load: Callable[[], Dataset], spec: ReplayStreams,
                 keyed: bool = False) -> None:
        super().__init__()
        self.load = load
        self.spec = spec
        self.keyed = keyed

    def expand(self, pbegin: beam.pvalue.PBegin) -> SourceOutputs:
        return (
            pbegin
            | "Impulse" >> beam.Impulse()
            | "EmitStreams" >> beam.ParDo(_EmitStreams(self.load, self.spec, self.keyed))
            .with_output_types(tuple[str, Block] if self.keyed else Block)
            .with_outputs(DEAD_LETTER_TAG, main="blocks")
        )


class _ScanChunk(beam.DoFn):
    def __init__(self, opts: ReadOptions, tf: TextFormat) -> None:
        self.opts, self.tf = opts, tf

    def process(self, chunk: Chunk) -> Iterator[ChunkStats]:
        yield scan_chunk(self.opts, self.tf, chunk)


class _ReadChunk(beam.DoFn):
    """Second pass: parse a chunk again and emit its rows as blocks aligned to multiples of
    ``block_size`` positions (pieces of blocks that straddle chunks go to ``fragments``),
    plus its bad lines as dead letters."""

    FRAGMENTS = "fragments"

    def __init__(self, opts: ReadOptions, tf: TextFormat, configs: tuple[str, ...],
                 block_size: int) -> None:
        self.opts, self.tf, self.configs, self.B = opts, tf, configs, block_size
        self.n_dead = Metrics.counter(METRICS_NAMESPACE, DEAD_LETTER_TAG)
        self.n_rows = Metrics.counter(METRICS_NAMESPACE, "rows_read")

    def process(self, chunk: Chunk, plan: StreamPlan) -> Iterator[Any]:
        got = read_chunk(self.opts, self.tf, chunk, plan, self.configs, self.B)
        for d in got.dead_letters:
            self.n_dead.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER_TAG, d)
        self.n_rows.inc(got.rows)
        yield from got.whole
        for frag in got.fragments:
            yield beam.pvalue.TaggedOutput(self.FRAGMENTS, frag)


class ReadFileBlocks(beam.PTransform):
    """``PBegin`` → blocks of the file in file order (one stream per configuration, ``rep``
    0), plus ``dead_letters``. The file is read in byte-range chunks by parallel workers,
    twice: a scan (counts, labels, width, scaling range), then the read. No worker holds more
    than one chunk. LIBSVM and CSV text; compressed files are one chunk."""

    def __init__(self, opts: ReadOptions, configs: Sequence[str], block_size: int = 256,
                 chunk_bytes: int = 16 << 20) -> None:
        super().__init__()
        fmt = opts.resolved_fmt()
        if fmt not in ("libsvm", "csv"):
            raise ValueError(f"the chunked reader reads LIBSVM and CSV text, not {fmt}")
        if opts.key_by is not None:
            raise ValueError("the chunked reader has no --key-by (use the permuted reader)")
        self.opts = replace(opts, fmt=fmt)
        self.configs = tuple(configs)
        self.block_size = block_size
        self.chunk_bytes = chunk_bytes

    def expand(self, pbegin: beam.pvalue.PBegin) -> SourceOutputs:
        tf = TextFormat.detect(self.opts.path, self.opts.fmt or "libsvm",
                               self.opts.label_column, self.opts.delimiter, self.opts.header)
        chunks = (pbegin
                  | "Chunks" >> beam.Create(file_chunks(self.opts.path, self.chunk_bytes))
                  | "SpreadChunks" >> beam.Reshuffle())
        opts = self.opts
        plan = (chunks
                | "Scan" >> beam.ParDo(_ScanChunk(opts, tf))
                | "AllStats" >> beam.combiners.ToList()
                | "Plan" >> beam.Map(lambda stats: make_plan(stats, opts)))
        read = chunks | "Read" >> beam.ParDo(
            _ReadChunk(opts, tf, self.configs, self.block_size),
            plan=beam.pvalue.AsSingleton(plan),
        ).with_outputs(_ReadChunk.FRAGMENTS, DEAD_LETTER_TAG, main="blocks")
        joined = (read[_ReadChunk.FRAGMENTS]
                  | "GroupFragments" >> beam.GroupByKey()
                  | "JoinFragments" >> beam.Map(lambda kv: concat_blocks(list(kv[1])))
                  .with_output_types(Block))
        blocks = ((read.blocks, joined) | "AllBlocks" >> beam.Flatten()
                  .with_output_types(Block))
        return SourceOutputs(blocks, read[DEAD_LETTER_TAG])


class SourceOutputs(NamedTuple):
    """A source's two outputs, accessed like ``ReadPermutedStreams``' (``.blocks``,
    ``.dead_letters``)."""

    blocks: beam.PCollection
    dead_letters: beam.PCollection
