"""The chunked file-order reader's work, without Beam: byte-range chunks of a text file, the
scan of a chunk, the plan that combines the scans, and the read of a chunk into blocks.

A file of any size is cut into byte ranges (:class:`Chunk`) that different workers read and
parse independently, in two passes: :func:`scan_chunk` counts rows and learns the schema (label
spellings, width, scaling range), :func:`make_plan` combines the scans in file order, and
:func:`read_chunk` parses the chunk again into blocks aligned to multiples of ``block_size``
positions (pieces of a block that straddles two chunks are joined by the caller). No worker
holds more than a chunk. ``kernelstream.transforms.replay.sources.ReadFileBlocks`` wires these into
a pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from kernelstream import fs
from kernelstream.data import LabelMap, ParseError
from kernelstream.data.labels import label_map_for
from kernelstream.data.libsvm import check_top_index
from kernelstream.data.lines import StreamEnd, iter_lines
from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import ParsedRow, TextFormat, decompress_reason, partial_text
from kernelstream.data.stamp import check_unchanged
from kernelstream.engine.deadletters import dead_letter
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.replay.blocks import Block
from kernelstream.engine.replay.sources import finish_rows, rows_csr
from kernelstream.sparse import CSR


class Chunk(NamedTuple):
    """Byte range ``[start, end)`` of a text file; it owns the lines that *start* in it
    (``end`` = -1: to the end of the file; compressed files are one chunk)."""

    number: int  # its place in the file (``index`` would shadow tuple.index)
    start: int
    end: int


def file_chunks(path: str, chunk_bytes: int) -> list[Chunk]:
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    size = fs.size(path)
    if fs.compression(path) is not None or size <= chunk_bytes:
        return [Chunk(0, 0, -1)]
    return [Chunk(i, s, min(s + chunk_bytes, size))
            for i, s in enumerate(range(0, size, chunk_bytes))]


def iter_chunk_lines(path: str, chunk: Chunk) -> Iterator[bytes | StreamEnd]:
    """The raw lines owned by ``chunk``: a line belongs to the chunk where it starts. A
    compressed file (one chunk) cut short ends with a :class:`StreamEnd`, in place of the
    rest of the file (one dead letter)."""
    with fs.open_binary(path) as f:
        if chunk.end < 0 and chunk.start == 0:
            yield from iter_lines(f)
            return
        if chunk.start > 0:
            f.seek(chunk.start - 1)
            f.readline()  # the rest of the line that started before this chunk
        while f.tell() < chunk.end and (raw := f.readline()):
            yield raw


class _RunningMax(NamedTuple):
    rows: int  # number of good rows of the chunk before the change
    value: int


@dataclass
class ChunkStats:
    """What the scan of one chunk learns: line and row counts, label spellings (with the
    local row at which each first appears, and row counts), and the running maximum feature
    index as change points, so the plan can cut the stream at ``limit`` exactly."""

    index: int
    lines: int = 0
    rows: int = 0  # syntactically valid rows
    labels: dict[str, list[int]] = field(default_factory=dict)  # token -> [first row, count]
    max_index: list[_RunningMax] = field(default_factory=list)
    width: int = 0  # dense formats: features per row
    lo: np.ndarray | None = None  # dense min/max over the valid rows (for scaling)
    hi: np.ndarray | None = None


@dataclass
class StreamPlan:
    """The global facts the second pass needs: per chunk, its first line number and first
    stream position; the label map, the width (before hashing), the scaling range; where
    ``limit`` cuts."""

    line_offset: dict[int, int]
    row_offset: dict[int, int]
    label_map: dict[str, Any]
    n_features: int
    total_rows: int
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None


def scan_chunk(opts: ReadOptions, tf: TextFormat, chunk: Chunk) -> ChunkStats:
    """First pass over one chunk: what :func:`make_plan` needs from it."""
    st = ChunkStats(chunk.number)
    scale = opts.scale != "none"
    if scale and opts.hash_features is not None:
        raise ValueError("the file-order reader cannot min-max scale hashed features (their "
                         "range is known only after hashing); use the permuted reader")
    regression = opts.task == "regression"
    cur_max = 0
    dense: list[np.ndarray] = []
    for raw in iter_chunk_lines(opts.path, chunk):
        st.lines += 1
        if not isinstance(raw, bytes):
            continue  # a dead letter in the second pass
        _, row = tf.parse(0, raw)
        if row is None or isinstance(row, ParseError):
            continue
        label = row.label
        if regression:  # targets are all distinct: check them here, count them as one
            try:
                LabelMap.regression()(label)
            except ParseError:
                continue  # a dead letter in the second pass
            label = "0"
        if row.idx is not None and row.idx.size:
            top = int(row.idx[-1])
            if opts.n_features is not None and top > opts.n_features:
                continue  # a dead letter in the second pass
            if top > cur_max:
                st.max_index.append(_RunningMax(st.rows, top))
                cur_max = top
        ent = st.labels.setdefault(label, [st.rows, 0])
        ent[1] += 1
        if row.idx is None:
            st.width = row.vals.shape[0]
        if scale:
            if row.idx is None:
                dense.append(row.vals)
            else:
                x = np.zeros(cur_max)
                x[row.idx - 1] = row.vals
                dense.append(x)
            if len(dense) >= 4096:
                _fold_ragged(st, dense)
        st.rows += 1
    if scale:
        _fold_ragged(st, dense)
    check_unchanged(opts.path, opts.stamp)  # the second pass must read the same lines
    return st


def _fold_ragged(st: ChunkStats, dense: list[np.ndarray]) -> None:
    """Fold rows of (possibly) different lengths into ``st.lo``/``st.hi``: a LIBSVM row is
    zero beyond its last index, so shorter rows are zero-padded."""
    if not dense:
        return
    w = max(max(len(r) for r in dense), 0 if st.lo is None else len(st.lo))
    M = np.zeros((len(dense), w))
    for i, r in enumerate(dense):
        M[i, : len(r)] = r
    lo, hi = M.min(axis=0), M.max(axis=0)
    if st.lo is not None:
        assert st.hi is not None
        plo, phi = np.zeros(w), np.zeros(w)  # earlier rows were zero in any new column
        plo[: len(st.lo)] = st.lo
        phi[: len(st.hi)] = st.hi
        lo, hi = np.minimum(lo, plo), np.maximum(hi, phi)
    st.lo, st.hi = lo, hi
    dense.clear()


def make_plan(stats: list[ChunkStats], opts: ReadOptions) -> StreamPlan:
    """Combine the chunk scans (in file order) into the :class:`StreamPlan`.

    With ``limit``, the label classes and the LIBSVM width are those of the first ``limit``
    valid rows; when rows of a third class come before the cut this differs from the
    in-memory reader by those few rows (a documented approximation)."""
    stats = sorted(stats, key=lambda s: s.index)
    limit = opts.limit
    line_off, row_off = {}, {}
    lines = rows = 0
    tokens: list[tuple[int, str]] = []  # (global row of first appearance, token)
    max_idx = 0
    for s in stats:
        line_off[s.index], row_off[s.index] = lines, rows
        lines += s.lines
        take = s.rows if limit is None else max(0, min(s.rows, limit - rows))
        tokens += [(rows + first, tok) for tok, (first, _) in s.labels.items() if first < take]
        for ch in s.max_index:
            if ch.rows < take:
                max_idx = max(max_idx, ch.value)
        rows += s.rows
    tokens.sort()
    lmap = label_map_for([t for _, t in tokens], opts.task, opts.positive_label) if tokens \
        else LabelMap.regression() if opts.task == "regression" else None
    if lmap is None:
        raise ValueError(f"{opts.path}: no valid row")
    width = next((s.width for s in stats if s.width), 0)
    d = opts.n_features if opts.n_features is not None else (
        max_idx if opts.resolved_fmt() == "libsvm" else width)
    # Positions count only the rows the label map accepts.
    accepted = {}
    for s in stats:
        ok = 0
        for tok, (_, count) in s.labels.items():
            try:
                lmap(tok)
                ok += count
            except ParseError:
                pass
        accepted[s.index] = ok
    pos = 0
    for s in stats:
        row_off[s.index] = pos
        pos += accepted[s.index]
    lo = hi = None
    if opts.scale != "none":
        if limit is not None:
            raise ValueError("the chunked reader cannot scale a limited stream (the scaling "
                             "range would need the first rows only); use the permuted reader")
        los = [s.lo for s in stats if s.lo is not None]
        his = [s.hi for s in stats if s.hi is not None]
        lo, hi = np.zeros(d), np.zeros(d)
        if los:
            lo = np.full(d, np.inf)
            hi = np.full(d, -np.inf)
            for a, b in zip(los, his, strict=True):
                la, lb = np.zeros(d), np.zeros(d)
                la[: min(d, len(a))] = a[:d]
                lb[: min(d, len(b))] = b[:d]
                lo, hi = np.minimum(lo, la), np.maximum(hi, lb)
    total = pos if limit is None else min(pos, limit)
    return StreamPlan(line_off, row_off, lmap.to_dict(), int(d), total, lo, hi)


@dataclass
class ChunkRead:
    """What the second pass makes of a chunk: its valid rows' count, its bad lines as dead
    letters, and its blocks of every configuration's stream: ``whole`` ones (aligned to
    multiples of the block size at both ends) and ``fragments`` of blocks that straddle chunks,
    keyed by ``(stream key, block index)`` for the caller to join."""

    rows: int = 0
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    whole: list[Block] = field(default_factory=list)
    fragments: list[tuple[tuple[str, int], Block]] = field(default_factory=list)


def read_chunk(opts: ReadOptions, tf: TextFormat, chunk: Chunk, plan: StreamPlan,
               configs: tuple[str, ...], block_size: int) -> ChunkRead:
    """Second pass over one chunk: parse it again into rows (see :class:`ChunkRead`)."""
    out = ChunkRead()
    pos0 = plan.row_offset[chunk.number]
    if pos0 >= plan.total_rows:
        return out
    lmap = LabelMap.from_dict(plan.label_map)
    d = plan.n_features
    X: list[ParsedRow] = []
    y: list[float] = []
    line = plan.line_offset[chunk.number]
    for raw in iter_chunk_lines(opts.path, chunk):
        if pos0 + len(y) >= plan.total_rows:
            break  # right after the limit-th example
        line += 1
        if isinstance(raw, StreamEnd):  # the end of a truncated compressed file
            out.dead_letters.append(dead_letter(opts.path, line, partial_text(raw),
                                                decompress_reason(raw.error, line - 1)))
            continue
        text, row = tf.parse(line, raw)
        if row is None:
            continue
        try:
            if isinstance(row, ParseError):
                raise row
            yi = lmap(row.label)
            if row.idx is not None:
                check_top_index(row.idx, d)
            elif row.vals.shape[0] != d:
                raise ParseError(f"wrong number of columns: {row.vals.shape[0]} features, "
                                 f"expected {d}")
        except ParseError as e:
            out.dead_letters.append(dead_letter(opts.path, line, text, e.reason))
            continue
        X.append(row)
        y.append(yi)
    check_unchanged(opts.path, opts.stamp)
    n = out.rows = len(y)
    if n == 0:
        return out
    Xa: np.ndarray | CSR
    if tf.fmt == "libsvm":
        Xa = rows_csr(X, d, opts.hash_features)
        Xa = finish_rows(Xa, replace(opts, hash_features=None), plan.lo, plan.hi)
    else:
        Xa = finish_rows(np.array([r.vals for r in X]), opts, plan.lo,
                         plan.hi)
    ya = np.asarray(y)
    ids = np.arange(pos0, pos0 + n, dtype=np.int64)
    B = block_size
    s = 0
    while s < n:
        p = pos0 + s
        stop = min(n, (p // B + 1) * B - pos0)  # up to the next multiple of B
        whole = p % B == 0 and (stop - s == B or pos0 + stop == plan.total_rows)
        for c in configs:
            key = StreamKey(c, 0).encode()
            b = Block(key, p, ids[s:stop], Xa[s:stop], ya[s:stop])
            if whole:
                out.whole.append(b)
            else:
                out.fragments.append(((key, p // B), b))
        s = stop
    return out
