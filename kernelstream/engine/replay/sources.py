"""A data set in memory and the blocks of its streams: the permuted replay's source (no Beam).

A permutation needs random access to every row, so the whole data set is loaded as a
:class:`Dataset` (``X`` is ``n × d`` float64, e.g. 32 MB for a9a, 0.9 GB for covtype: the
documented memory trade-off; or, for wide or hashed data, a CSR whose memory grows with the
non-zeros: see :func:`finish_rows`) and :func:`stream_blocks` cuts every stream of a
:class:`ReplayStreams` into blocks in stream order. :func:`load_rows` reads a file keeping every
bad line as a dead letter. The loop runner iterates these directly; the Beam source
(``kernelstream.transforms.replay.sources.ReadPermutedStreams``) emits them from one worker.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kernelstream import fs
from kernelstream._suggest import row_error
from kernelstream.data import (
    SCALES,
    LabelMap,
    ParseError,
    _scale_minmax_inplace,
    load,
    load_sparse,
    scale_minmax,
    scale_target_minmax,
)
from kernelstream.data.hashing import csr_from_pairs, hash_csr, hash_index
from kernelstream.data.labels import class_key, label_map_for, nonfinite_label
from kernelstream.data.libsvm import check_top_index
from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import ParsedRow, iter_file_rows, parquet_records_json
from kernelstream.data.stamp import check_unchanged
from kernelstream.engine.deadletters import dead_letter
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.replay.blocks import Block
from kernelstream.learners.registry import memory_limit
from kernelstream.seeding import permutation
from kernelstream.sparse import CSR


@dataclass(frozen=True)
class ReplayStreams:
    """Which streams a source emits: for every configuration name and every repetition
    ``first <= r < first + permutations``, the data in the order of
    ``seeding.permutation(n, seed, r)`` (or in file order when ``shuffle`` is false), cut
    into blocks of ``block_size`` positions. ``first`` > 0 draws permutations apart from a
    replay's 0..R-1 (``kernelstream tune``'s held-out tuning permutations); ``rows`` keeps
    only the first ``rows`` positions of each permuted stream (tuning on a prefix)."""

    configs: tuple[str, ...]
    seed: int = 0
    permutations: int = 1
    block_size: int = 256
    shuffle: bool = True
    # ``replay --workers N``: this process learns shard ``shard`` of ``shards`` (see
    # :meth:`owns`); the other streams are left to the other processes
    shard: int = 0
    shards: int = 1
    first: int = 0
    rows: int | None = None

    def __post_init__(self) -> None:
        if not self.configs:
            raise ValueError("no configuration names")
        if self.permutations < 1:
            raise ValueError(f"permutations must be >= 1, got {self.permutations}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if not self.shuffle and self.permutations != 1:
            raise ValueError("file order (shuffle=False) is a single stream: permutations=1")
        if self.shards < 1 or not 0 <= self.shard < self.shards:
            raise ValueError(f"shard must be in [0, {self.shards}), got {self.shard}")
        if self.first < 0:
            raise ValueError(f"first must be >= 0, got {self.first}")
        if self.rows is not None and self.rows < 1:
            raise ValueError(f"rows must be >= 1, got {self.rows}")
        if not self.shuffle and (self.first or self.rows is not None):
            raise ValueError("file order (shuffle=False) is the whole file as one stream: "
                             "no first permutation or row limit")

    @property
    def reps(self) -> range:
        """The repetition (permutation) indices of the streams."""
        return range(self.first, self.first + self.permutations)

    def order(self, n: int, r: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(n)
        return permutation(n, self.seed, r)[: self.rows]

    def owns(self, config: int, r: int, entity: str | None = None) -> bool:
        """Whether stream (configuration index ``config``, repetition ``r``, ``entity``) is
        this shard's. The (configuration, repetition) pairs are dealt round robin in
        configuration-major order, so a two-configuration grid puts one configuration on each
        of two shards and every shard gets a mix of configurations when there are more pairs;
        an entity's stream moves by a stable hash of the entity (CRC-32: the same in every
        process, unlike ``hash``), so entities spread over the shards too."""
        if self.shards == 1:
            return True
        pair = config * self.permutations + (r - self.first)
        spread = 0 if entity is None else zlib.crc32(entity.encode())
        return (pair + spread) % self.shards == self.shard

    @property
    def source_dead_letters(self) -> bool:
        """Whether this shard reports the source's dead letters: they are the file's, not a
        stream's, so only the first shard writes them (once, as an unsharded run does)."""
        return self.shard == 0


@dataclass
class Dataset:
    """A data set in memory: rows (dense, or CSR), mapped labels, their source ids and
    (``--key-by``) each row's entity; plus the dead letters met while loading it."""

    X: np.ndarray | CSR
    y: np.ndarray
    ids: np.ndarray | None = None
    entities: np.ndarray | None = None  # str per row, or None: one stream per configuration
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    lines: np.ndarray | None = None  # source line (row) number of each row, when known

    def __post_init__(self) -> None:
        if not isinstance(self.X, CSR):
            try:
                self.X = np.ascontiguousarray(self.X, dtype=np.float64)
            except (TypeError, ValueError) as exc:  # rows as dicts: say what is expected
                raise row_error("Dataset", self.X, many=True) or exc from None
        self.y = np.ascontiguousarray(self.y, dtype=np.float64).reshape(-1)
        if self.ids is None:
            self.ids = np.arange(self.y.shape[0], dtype=np.int64)
        if len(self.X.shape) != 2 or self.X.shape[0] != self.y.shape[0]:
            raise ValueError(f"X {self.X.shape} and y {self.y.shape} do not match")


def stream_blocks(data: Dataset, spec: ReplayStreams) -> Iterator[Block]:
    """Every block of every stream of ``spec`` over ``data`` (the permuted-replay order); of
    a shard (``spec.shards`` > 1), only the blocks of the streams it owns.

    With entities, each entity's stream is the permuted stream restricted to its rows (exactly
    what a loop that dispatches each example to its entity's learner sees).
    """
    n = data.y.shape[0]
    assert data.ids is not None
    B = spec.block_size
    for r in spec.reps:
        order = spec.order(n, r)
        if data.entities is None:
            groups: list[tuple[str | None, np.ndarray]] = [(None, order)]
        else:
            ents = data.entities[order]
            # A stable sort keeps each entity's rows in stream order.
            srt = np.argsort(ents, kind="stable")
            uniq, first = np.unique(ents[srt], return_index=True)
            bounds = [*first.tolist(), order.shape[0]]
            groups = [(str(u), order[srt[bounds[i] : bounds[i + 1]]])
                      for i, u in enumerate(uniq)]
        for entity, idx_all in groups:
            keys = [StreamKey(c, r, entity).encode() for i, c in enumerate(spec.configs)
                    if spec.owns(i, r, entity)]
            if not keys:  # another shard's streams (replay --workers)
                continue
            for s in range(0, idx_all.shape[0], B):
                idx = idx_all[s : s + B]
                base = Block(keys[0], s, data.ids[idx], data.X[idx], data.y[idx])
                yield base
                for k in keys[1:]:
                    yield base.with_key(k)


class _ArrayLoader:
    """A picklable loader for data already in memory (tests, small examples)."""

    def __init__(self, data: Dataset) -> None:
        self.data = data

    def __call__(self) -> Dataset:
        return self.data


def array_loader(X: np.ndarray, y: np.ndarray, entities: Sequence[Any] | None = None,
                 ids: np.ndarray | None = None) -> Callable[[], Dataset]:
    ents = None if entities is None else np.asarray([str(e) for e in entities], dtype=object)
    return _ArrayLoader(Dataset(X, y, ids=ids, entities=ents))


# A blank (empty or whitespace-only) line: the first line, or one after a newline. Two patterns,
# not one alternation "(?:\A|\n)...": a pattern that starts with "\n" is searched for that byte
# first, 20x faster (30 ms -> 1.4 ms on a 2.3 MB file, a replay's fixed cost).
_BLANK_FIRST_LINE = re.compile(rb"[ \t\r\f\v]*(?:\n|\Z)")
_BLANK_LINE = re.compile(rb"\n[ \t\r\f\v]*(?:\n|\Z)")


def _has_blank_line(raw: bytes) -> bool:
    """Whether ``raw`` holds an empty or whitespace-only line (a final newline counts as the
    start of an empty last line: strip it first)."""
    return _BLANK_FIRST_LINE.match(raw) is not None or _BLANK_LINE.search(raw) is not None


def _clean_for_load(opts: ReadOptions, fmt: str) -> bool:
    """Whether ``data.load`` may read the file: it stops at the first bad line (then we fall
    back to the tolerant reader) but skips blank lines, which the Beam sources report."""
    if opts.key_by is not None:
        return False
    if fmt == "parquet":
        return True
    try:
        with fs.open_binary(opts.path) as f:
            raw = f.read()
    except fs.DECOMPRESS_ERRORS:
        return False  # truncated or corrupt: the tolerant reader says where
    raw = raw[:-1] if raw.endswith(b"\n") else raw
    return not _has_blank_line(raw)


def finish_rows(X: np.ndarray | CSR, opts: ReadOptions, lo: np.ndarray | None = None,
                hi: np.ndarray | None = None) -> np.ndarray | CSR:
    """The rows as the learners get them: features hashed (``hash_features``), then CSR or
    dense by :meth:`ReadOptions.sparse_rows` (dense rows min-max scaled by ``opts.scale``, over
    ``lo``/``hi`` when given, else over these rows). Dense and CSR rows hold the same values."""
    if opts.hash_features is not None:
        X = hash_csr(X if isinstance(X, CSR) else CSR.from_dense(X), opts.hash_features)
    if opts.sparse_rows(X.shape[1]):
        return X if isinstance(X, CSR) else CSR.from_dense(X)
    if isinstance(X, CSR):
        need = X.shape[0] * X.shape[1] * 8
        if need > memory_limit():
            raise MemoryError(f"{opts.path}: dense rows of {X.shape[1]:,} features need "
                              f"{need / 2**30:.1f} GiB; read them as sparse rows (rows='sparse', "
                              "CLI --rows sparse) or hash the features (--hash-features K)")
        X = X.to_dense()
        if lo is None and hi is None and opts.scale in SCALES:
            # the dense array is ours: scaled in place (bit-identical), not copied twice more
            # (covtype's load peaked at 4x its 239 MB dense rows)
            return _scale_minmax_inplace(X, opts.scale)  # type: ignore[arg-type]
    return scale_minmax(X, opts.scale, lo, hi)  # type: ignore[arg-type]


# Data sets read by a process before it forked workers that read the same file
# (``replay --workers``): each worker takes the parent's rows, shared copy-on-write, instead
# of parsing the file again (see :func:`preload_rows`).
_PRELOADED: dict[ReadOptions, Dataset] = {}


def preload_rows(opts: ReadOptions) -> None:
    """Read ``opts`` now: until :func:`forget_preloaded`, :func:`load_rows` of the same options
    returns these rows (not a copy: readers never write into them), here and in the
    processes forked meanwhile. A file that fails to read is left to each
    :func:`load_rows` call, which reports it as usual."""
    try:
        _PRELOADED[opts] = load_rows(opts)
    except Exception:
        _PRELOADED.pop(opts, None)


def core_free() -> bool:
    """Whether a CPU of this process has been idle over the last minute (load average), so
    that ``replay --workers``' parent can read the data set in a thread while it imports Beam
    (``pipelines.replay.workers.preload``). On a busy machine such a thread only competes for the
    GIL and the CPUs, and the read runs before the import instead."""
    try:
        cpus = len(os.sched_getaffinity(0))
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on Linux: no reading in a thread
        return False
    return cpus - load >= 1.0


def forget_preloaded() -> None:
    """Drop the rows :func:`preload_rows` read (the forked workers keep their copies)."""
    _PRELOADED.clear()


def load_rows(opts: ReadOptions, source: str | None = None) -> Dataset:
    """The whole file as a :class:`Dataset`, with every bad line as a dead letter (the rows
    read before a fork, when :func:`preloaded` read them).

    A clean file is read by ``data.load`` / ``data.load_sparse`` themselves (their fast
    vectorised parsers; the rows of the reference loop by construction). Otherwise every line
    is parsed with the data layer's line parsers and the same label map and scaling rules;
    ``limit`` then keeps the first ``limit`` examples (reading stops right after the last one;
    bad lines do not count), and the label classes and the LIBSVM width are decided on the
    rows read. Rows become CSR or dense by :func:`finish_rows`. Tests check that both paths,
    and the chunked reader, give the same stream.
    """
    ds = _read_rows(opts, source)
    check_unchanged(opts.path, opts.stamp)  # a file being written: other readers differ
    return ds


def _read_rows(opts: ReadOptions, source: str | None) -> Dataset:
    if source is None and (ready := _PRELOADED.get(opts)) is not None:
        return ready
    fmt = opts.resolved_fmt()
    if _clean_for_load(opts, fmt):
        try:
            if fmt == "libsvm":  # as CSR first: the widest index must not decide the memory
                Xs, ys = load_sparse(opts.path, n_features=opts.n_features,
                                    task=opts.task, limit=opts.limit,  # type: ignore[arg-type]
                                    positive_label=opts.positive_label)
                return Dataset(finish_rows(Xs, opts),
                               scale_target_minmax(ys, opts.scale_target))  # type: ignore[arg-type]
            plain = opts.hash_features is None and opts.rows != "sparse"  # dense, as read
            Xd, yd = load(opts.path, fmt=fmt, n_features=opts.n_features,  # type: ignore[arg-type]
                        label_column=opts.label_column, task=opts.task,  # type: ignore[arg-type]
                        scale=opts.scale if plain else "none",  # type: ignore[arg-type]
                        limit=opts.limit, positive_label=opts.positive_label,
                        delimiter=opts.delimiter, header=opts.header,
                        scale_target=opts.scale_target)  # type: ignore[arg-type]
            return Dataset(Xd if plain else finish_rows(Xd, opts), yd)
        except ParseError:
            pass  # a bad line: read it again line by line, keeping the bad lines
    src = opts.path if source is None else source
    dead: list[dict[str, Any]] = []
    rows: list[ParsedRow] = []
    lines: list[int] = []
    texts: list[str] = []
    accepted = 0
    classes: list[float | str] = []
    for lineno, text, row in iter_file_rows(opts):
        if opts.limit is not None and accepted >= opts.limit:
            break  # right after the limit-th example, as the chunked reader
        if isinstance(row, ParseError):
            dead.append(dead_letter(src, lineno, text, row.reason))
            continue
        rows.append(row)
        lines.append(lineno)
        texts.append(text)
        accepted += _acceptable(row, opts, classes)
    keep: list[int] = []
    y: list[float] = []
    max_idx = 0
    lmap = label_map_for((r.label for r in rows), opts.task, opts.positive_label) if rows \
        else None
    rejected: list[tuple[int, str]] = []
    for i, r in enumerate(rows):
        assert lmap is not None
        try:
            yi = lmap(r.label)
            if r.idx is not None:
                max_idx = max(max_idx, check_top_index(r.idx, opts.n_features))
        except ParseError as e:
            rejected.append((i, e.reason))
            continue
        keep.append(i)
        y.append(yi)
    # a Parquet row has no text until rejected: its raw is the record as JSON, as for a bad row
    raws = parquet_records_json(opts.path, opts.label_column, opts.key_by,
                                {lines[i] for i, _ in rejected if not texts[i]}) \
        if fmt == "parquet" and rejected else {}
    dead += [dead_letter(src, lines[i], texts[i] or raws.get(lines[i]) or _row_raw(rows[i]),
                         reason) for i, reason in rejected]
    good = [rows[i] for i in keep]
    X: np.ndarray | CSR
    if fmt == "libsvm":
        d = opts.n_features if opts.n_features is not None else max_idx
        X = rows_csr(good, d, opts.hash_features)
        X = finish_rows(X, replace(opts, hash_features=None))  # hashed while building
    else:
        d = good[0].vals.shape[0] if good else (opts.n_features or 0)
        X = finish_rows(np.array([r.vals for r in good]) if good else np.zeros((0, d)), opts)
    ents = None
    if opts.key_by is not None:
        ents = np.asarray([r.entity for r in good], dtype=object)
    dead.sort(key=lambda d: (d["line"] is None, d["line"]))
    yv = scale_target_minmax(np.asarray(y), opts.scale_target)  # type: ignore[arg-type]
    return Dataset(X, yv, entities=ents, dead_letters=dead,
                   lines=np.asarray([lines[i] for i in keep], dtype=np.int64))


def rows_csr(rows: Sequence[ParsedRow], n_features: int, hash_bits: int | None = None) -> CSR:
    """Parsed LIBSVM rows (1-based sorted indices) as one CSR of width ``n_features`` (or
    ``2**hash_bits`` with their indices hashed, colliding values summed)."""
    counts = np.fromiter((len(r.vals) for r in rows), np.int64, count=len(rows))
    cols = (np.concatenate([r.idx for r in rows]).astype(np.int64) - 1 if len(rows)
            else np.zeros(0, dtype=np.int64))
    vals = (np.concatenate([r.vals for r in rows]).astype(np.float64) if len(rows)
            else np.zeros(0))
    if hash_bits is not None:
        return csr_from_pairs(np.repeat(np.arange(len(rows), dtype=np.int64), counts),
                              hash_index(cols, hash_bits), vals, len(rows), 1 << hash_bits)
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return CSR(indptr, cols, vals, max(int(n_features), 1))


def _acceptable(row: ParsedRow, opts: ReadOptions, classes: list[float | str]) -> bool:
    """Whether a valid row will be an example (decided online, so that ``limit`` counts
    examples): its class is one of the first two in file order, its target numeric, its
    indices within ``n_features``. The label map (and the dead letter) come later."""
    if opts.task == "regression" or nonfinite_label(row.label):
        try:
            LabelMap.regression()(row.label)
        except ParseError:
            return False
    else:
        k = class_key(row.label)
        if k not in classes:
            if len(classes) >= 2:
                return False
            classes.append(k)
    return not (opts.n_features is not None and row.idx is not None and row.idx.size
                and int(row.idx[-1]) > opts.n_features)


def _row_raw(r: ParsedRow) -> str:
    if r.idx is not None:
        return " ".join([r.label, *(f"{int(i)}:{v!r}" for i, v in zip(r.idx, r.vals,
                                                                     strict=True))])
    return ",".join([*(repr(float(v)) for v in r.vals), r.label])


class FileLoader:
    """Picklable ``() -> Dataset`` for :class:`ReadPermutedStreams` (reads on the worker)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def __call__(self) -> Dataset:
        return load_rows(self.opts)
