"""Sources: examples as :class:`~kernelstream.transforms.blocks.Block` s of consecutive rows.

Two readers, for the two ways a replay orders its stream:

* :class:`ReadPermutedStreams` — the replay of random permutations (ALGORITHMS.md §2.1). A
  permutation needs random access to every row, so one worker loads the data set into a numpy
  array (``X`` is ``n × d`` float64, e.g. 32 MB for a9a, 0.9 GB for covtype) and emits each
  permutation's blocks, in permuted order, for every configuration. This is the documented
  memory trade-off: simple and exactly the loop's stream, but bounded by one worker's memory.
* :class:`ReadFileBlocks` — the stream in file order, for files of any size. The file is cut
  into byte ranges that different workers read and parse independently (two passes: a scan
  that counts rows and learns the schema, then the read that emits blocks), so no worker holds
  more than a chunk. Blocks are aligned to multiples of ``block_size`` positions; the pieces of
  a block that straddles two chunks are joined by a small GroupByKey.

Both emit malformed input as dead-letter rows (source, line, raw text, reason) on the
``dead_letters`` tag, never silently dropping a line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from kernelstream import fs
from kernelstream.data import (
    LabelMap,
    ParseError,
    densify,
    infer_format,
    load,
    parse_csv_line,
    parse_libsvm_line,
    scale_minmax,
    scale_target_minmax,
)
from kernelstream.seeding import permutation
from kernelstream.transforms.blocks import Block, StreamKey, concat_blocks

DEAD_LETTER_TAG = "dead_letters"
METRICS_NAMESPACE = "kernelstream"


@dataclass(frozen=True)
class StreamSpec:
    """Which streams a source emits: for every configuration name and every repetition
    ``r < permutations``, the data in the order of ``seeding.permutation(n, seed, r)`` (or in
    file order when ``shuffle`` is false), cut into blocks of ``block_size`` positions."""

    configs: tuple[str, ...]
    seed: int = 0
    permutations: int = 1
    block_size: int = 256
    shuffle: bool = True

    def __post_init__(self) -> None:
        if not self.configs:
            raise ValueError("no configuration names")
        if self.permutations < 1:
            raise ValueError(f"permutations must be >= 1, got {self.permutations}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if not self.shuffle and self.permutations != 1:
            raise ValueError("file order (shuffle=False) is a single stream: permutations=1")

    def order(self, n: int, r: int) -> np.ndarray:
        return permutation(n, self.seed, r) if self.shuffle else np.arange(n)


@dataclass
class Dataset:
    """A data set in memory: dense rows, mapped labels, their source ids and (``--key-by``)
    each row's entity; plus the dead letters met while loading it."""

    X: np.ndarray
    y: np.ndarray
    ids: np.ndarray | None = None
    entities: np.ndarray | None = None  # str per row, or None: one stream per configuration
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    lines: np.ndarray | None = None  # source line (row) number of each row, when known

    def __post_init__(self) -> None:
        self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        self.y = np.ascontiguousarray(self.y, dtype=np.float64).reshape(-1)
        if self.ids is None:
            self.ids = np.arange(self.y.shape[0], dtype=np.int64)
        if self.X.ndim != 2 or self.X.shape[0] != self.y.shape[0]:
            raise ValueError(f"X {self.X.shape} and y {self.y.shape} do not match")


def stream_blocks(data: Dataset, spec: StreamSpec) -> Iterator[Block]:
    """Every block of every stream of ``spec`` over ``data`` (the permuted-replay order).

    With entities, each entity's stream is the permuted stream restricted to its rows (exactly
    what a loop that dispatches each example to its entity's learner sees).
    """
    n = data.y.shape[0]
    assert data.ids is not None
    B = spec.block_size
    for r in range(spec.permutations):
        order = spec.order(n, r)
        if data.entities is None:
            groups: list[tuple[str | None, np.ndarray]] = [(None, order)]
        else:
            ents = data.entities[order]
            # A stable sort keeps each entity's rows in stream order.
            srt = np.argsort(ents, kind="stable")
            uniq, first = np.unique(ents[srt], return_index=True)
            bounds = [*first.tolist(), n]
            groups = [(str(u), order[srt[bounds[i] : bounds[i + 1]]])
                      for i, u in enumerate(uniq)]
        for entity, idx_all in groups:
            keys = [StreamKey(c, r, entity).encode() for c in spec.configs]
            for s in range(0, idx_all.shape[0], B):
                idx = idx_all[s : s + B]
                base = Block(keys[0], s, data.ids[idx], data.X[idx], data.y[idx])
                yield base
                for k in keys[1:]:
                    yield base.with_key(k)


class _EmitStreams(beam.DoFn):
    def __init__(self, load: Callable[[], Dataset], spec: StreamSpec) -> None:
        self.load = load
        self.spec = spec
        self.n_dead = Metrics.counter(METRICS_NAMESPACE, "dead_letters")
        self.n_rows = Metrics.counter(METRICS_NAMESPACE, "rows_read")

    def process(self, _: Any) -> Iterator[Any]:
        data = self.load()
        self.n_rows.inc(int(data.y.shape[0]))
        for d in data.dead_letters:
            self.n_dead.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER_TAG, d)
        yield from stream_blocks(data, self.spec)


class ReadPermutedStreams(beam.PTransform):
    """``PBegin`` → ``Block`` s of every (configuration, permutation[, entity]) stream, plus
    ``dead_letters``. ``load`` (a picklable callable) runs once, on one worker, and returns
    the whole :class:`Dataset` — see the module docstring for the memory trade-off."""

    def __init__(self, load: Callable[[], Dataset], spec: StreamSpec) -> None:
        super().__init__()
        self.load = load
        self.spec = spec

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        return (
            pbegin
            | "Impulse" >> beam.Impulse()
            | "EmitStreams" >> beam.ParDo(_EmitStreams(self.load, self.spec))
            .with_output_types(Block)
            .with_outputs(DEAD_LETTER_TAG, main="blocks")
        )


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


# -- reading files ------------------------------------------------------------------------------
#
# The line rules are data.py's (its public line parsers do the parsing): blank lines and
# LIBSVM comment-only lines carry no example. Unlike data.load, which stops at the first bad
# line, the Beam sources turn every bad line into a dead letter and go on. Blank lines are
# reported as dead letters too ("empty line"), so that every physical line of a text file is
# either a predicted row, a dead letter, a comment or the CSV header.

def open_binary(path: str) -> Any:
    """The file for binary reading, decompressed when it is gzip/bz2/xz (magic bytes); local
    paths and any URL Beam's file systems read (``gs://`` ...)."""
    return fs.open_binary(path)


def is_compressed(path: str) -> bool:
    return fs.compression(path) is not None


class ParsedRow(NamedTuple):
    """A syntactically valid row: raw label token, 1-based indices (LIBSVM; None for dense
    formats), values, and the ``--key-by`` entity (None without one)."""

    label: str
    idx: np.ndarray | None
    vals: np.ndarray
    entity: str | None


def _strip_label(tok: str) -> str:
    tok = tok.strip()
    if len(tok) >= 2 and tok[0] == tok[-1] == '"':
        tok = tok[1:-1].strip()
    return tok


@dataclass(frozen=True)
class TextFormat:
    """How to parse the lines of one LIBSVM or CSV file (resolved once, from its head).

    CSV: ``label_col``/``key_col`` are 0-based positions in the full field list; the header
    (recognised as data.py does: no feature field parses as a number) is line ``header_line``.
    """

    fmt: str
    delimiter: str | None = None
    label_col: int = -1
    key_col: int | None = None
    n_columns: int | None = None
    header_line: int | None = None

    @classmethod
    def detect(cls, path: str, fmt: str, label_column: int | str | None = None,
               delimiter: str | None = None, header: bool | None = None,
               key_by: int | str | None = None) -> TextFormat:
        if fmt == "libsvm":
            if label_column is not None:
                raise ValueError("label_column does not apply to LIBSVM files")
            if key_by is not None:
                raise ValueError("--key-by needs a CSV or Parquet file (a named column)")
            return cls("libsvm")
        if fmt != "csv":
            raise ValueError(f"not a text format: {fmt!r}")
        first, lineno = None, 0
        with open_binary(path) as f:
            for raw in f:
                lineno += 1
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if text.strip():
                    first = text
                    break
        if first is None:
            return cls("csv", delimiter)
        if delimiter is None:
            name = path.lower()
            for suf in (".gz", ".bz2", ".xz"):
                name = name.removesuffix(suf)
            if name.endswith(".tsv"):
                delimiter = "\t"
            else:
                delimiter = next((d for d in (",", "\t", ";") if d in first), None)
        fields = first.split(delimiter)
        n = len(fields)
        names = [_strip_label(f) for f in fields]
        if header is None:
            header = isinstance(label_column, str) or isinstance(key_by, str)
            if not header:
                lc = _column(label_column, None, n, "label_column", default=n - 1)
                kc = None if key_by is None else _column(key_by, None, n, "key_by")
                feats = [f for i, f in enumerate(fields) if i not in (lc, kc)]
                header = bool(feats) and not any(_is_number(f) for f in feats)
        hdr = names if header else None
        lc = _column(label_column, hdr, n, "label_column", default=n - 1)
        kc = None if key_by is None else _column(key_by, hdr, n, "key_by")
        if kc == lc:
            raise ValueError("the --key-by column cannot be the label column")
        return cls("csv", delimiter, lc, kc, n, lineno if header else None)

    def parse(self, lineno: int, raw: bytes) -> tuple[str, ParsedRow | ParseError | None]:
        """``(text, row)`` for one physical line; row is None for a line without an example
        (comment, header) and a ``ParseError`` (located at ``lineno``) for a bad line."""
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            text = raw.decode("utf-8", errors="backslashreplace").rstrip("\r\n")
            return text, ParseError(f"undecodable bytes (not UTF-8 text at byte {e.start})",
                                    None, lineno)
        try:
            if not text.strip():
                raise ParseError("empty line")
            if self.fmt == "libsvm":
                if not text.split("#", 1)[0].strip():
                    return text, None  # comment-only line
                label, idx, vals = parse_libsvm_line(text)
                return text, ParsedRow(label, idx, vals, None)
            if lineno == self.header_line:
                return text, None
            line, lc, ncol, entity = text, self.label_col, self.n_columns, None
            if self.key_col is not None:
                fields = text.split(self.delimiter)
                if ncol is not None and len(fields) != ncol:
                    raise ParseError(
                        f"wrong number of columns: expected {ncol}, got {len(fields)}")
                entity = _strip_label(fields.pop(self.key_col))
                line = (self.delimiter or " ").join(fields)
                lc = lc - 1 if lc > self.key_col else lc
                ncol = None if ncol is None else ncol - 1
            label, vals = parse_csv_line(line, lc, self.delimiter, n_columns=ncol)
            return text, ParsedRow(label, None, vals, entity)
        except ParseError as e:
            return text, ParseError(e.reason, None, lineno)


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _column(col: int | str | None, header: list[str] | None, n: int, what: str,
            default: int | None = None) -> int:
    if col is None:
        if default is None:
            raise ValueError(f"{what} is required")
        return default
    if isinstance(col, str) and not col.lstrip("-").isdigit():
        if header is None:
            raise ValueError(f"{what} {col!r} is a name but the file has no header")
        if col not in header:
            raise ValueError(f"no column named {col!r} in the header {header}")
        return header.index(col)
    c = int(col)
    if not -n <= c < n:
        raise ValueError(f"{what} {c} out of range for {n} columns")
    return c % n


def iter_parquet_rows(path: str, label_column: int | str | None = None,
                      key_by: int | str | None = None, row_groups: list[int] | None = None,
                      first_row: int = 1) -> Iterator[tuple[int, str, ParsedRow | ParseError]]:
    """``(row_number, raw_text, row | ParseError)`` of a Parquet file (or of some of its row
    groups; ``first_row`` numbers the first one). Features are every numeric column other than
    the label (default ``"label"``) and key columns, as in ``data.load``; the raw text of a bad
    row is its JSON."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(fs.open_read(path) if fs.is_remote(path) else path)
    names = pf.schema_arrow.names
    label = _parquet_col(label_column if label_column is not None else "label", names)
    key = None if key_by is None else _parquet_col(key_by, names)

    def numeric(t: Any) -> bool:
        return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))

    feats = [c for c in names if c not in (label, key) and numeric(pf.schema_arrow.field(c).type)]
    cols = [*feats, label] + ([key] if key is not None else [])
    row = first_row
    batches = (pf.iter_batches(columns=cols, row_groups=row_groups) if row_groups is not None
               else pf.iter_batches(columns=cols))
    for batch in batches:
        n = batch.num_rows
        F = np.empty((n, len(feats)))
        null = np.zeros((n, len(feats)), dtype=bool)
        for j, c in enumerate(feats):
            arr = batch.column(c)
            null[:, j] = np.asarray(arr.is_null())
            F[:, j] = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        labels = batch.column(label).to_pylist()
        keys = batch.column(key).to_pylist() if key is not None else None
        for i in range(n):
            err = None
            if null[i].any():
                err = f"missing value in column {feats[int(np.argmax(null[i]))]!r}"
            elif not np.isfinite(F[i]).all():
                j = int(np.argmax(~np.isfinite(F[i])))
                err = f"non-finite value {F[i, j]!r} in column {feats[j]!r}"
            elif labels[i] is None:
                err = f"missing value in label column {label!r}"
            if err is not None:
                rec = {c: batch.column(c)[i].as_py() for c in cols}
                yield row + i, json.dumps(rec, default=str), ParseError(err, None, row + i)
                continue
            ent = None if keys is None else str(keys[i])
            yield row + i, "", ParsedRow(str(labels[i]), None, F[i].copy(), ent)
        row += n


def _parquet_col(col: int | str, names: list[str]) -> str:
    if isinstance(col, int):
        if not -len(names) <= col < len(names):
            raise ValueError(f"column {col} out of range for {len(names)} columns")
        return names[col]
    if col not in names:
        raise ValueError(f"no column {col!r} in the Parquet file (columns: {names})")
    return col


def dead_letter(source: str, line: int | None, raw: str, reason: str, stage: str = "parse",
                key: str | None = None, position: int | None = None,
                row_id: int | None = None) -> dict[str, Any]:
    """One dead-letter row (the schema of ``sinks.DEAD_LETTER_SCHEMA``)."""
    return {"source": source, "stage": stage, "key": key, "line": line, "position": position,
            "id": row_id, "raw": raw, "reason": reason}


@dataclass(frozen=True)
class ReadOptions:
    """How to read a data file (the options of ``data.load`` plus ``key_by``)."""

    path: str
    fmt: str | None = None
    n_features: int | None = None
    label_column: int | str | None = None
    task: str = "classification"
    scale: str = "none"
    limit: int | None = None
    positive_label: str | None = None
    delimiter: str | None = None
    header: bool | None = None
    key_by: int | str | None = None
    scale_target: str = "none"  # regression targets: "none" or min-max to [0, 1] ("01")

    def resolved_fmt(self) -> str:
        return self.fmt or infer_format(self.path)


def iter_file_rows(opts: ReadOptions) -> Iterator[tuple[int, str, ParsedRow | ParseError]]:
    """Every record of the file as ``(line, raw_text, row | ParseError)``, lazily; lines
    without an example (comments, header) are left out."""
    fmt = opts.resolved_fmt()
    if fmt == "parquet":
        yield from iter_parquet_rows(opts.path, opts.label_column, opts.key_by)
        return
    tf = TextFormat.detect(opts.path, fmt, opts.label_column, opts.delimiter, opts.header,
                           opts.key_by)
    with open_binary(opts.path) as f:
        for lineno, raw in enumerate(f, 1):
            text, row = tf.parse(lineno, raw)
            if row is not None:
                yield lineno, text, row


def _class_key(tok: str) -> float | str:
    """Labels of one class: numeric labels compare by value, others as stripped strings (the
    rule of ``data.LabelMap``)."""
    t = tok.strip()
    try:
        v = float(t)
    except ValueError:
        return t
    return v if math.isfinite(v) else t


def label_map_for(tokens: Iterable[str], task: str,
                  positive_label: str | None = None) -> LabelMap:
    """The label map of a run: regression targets, or the first two classes in stream order
    (``LabelMap.from_labels`` decides which is +1). Rows of a further class become dead
    letters ("unknown label") instead of failing the whole run."""
    if task == "regression":
        return LabelMap.regression()
    classes: list[str] = []
    seen: set[float | str] = set()
    for tok in dict.fromkeys(tokens):
        k = _class_key(tok)
        if k not in seen and len(classes) < 2:
            seen.add(k)
            classes.append(tok.strip())
    return LabelMap.from_labels(classes, positive_label=positive_label)


_BLANK_LINE = re.compile(rb"(?:\A|\n)[ \t\r\f\v]*(?:\n|\Z)")


def _clean_for_load(opts: ReadOptions, fmt: str) -> bool:
    """Whether ``data.load`` may read the file: it stops at the first bad line (then we fall
    back to the tolerant reader) but skips blank lines, which the Beam sources report."""
    if opts.key_by is not None:
        return False
    if fmt == "parquet":
        return True
    with open_binary(opts.path) as f:
        raw = f.read()
    raw = raw[:-1] if raw.endswith(b"\n") else raw
    return _BLANK_LINE.search(raw) is None


def load_rows(opts: ReadOptions, source: str | None = None) -> Dataset:
    """The whole file as a :class:`Dataset`, with every bad line as a dead letter.

    A clean file is read by ``data.load`` itself (its fast vectorised parser; the rows of the
    reference loop by construction). Otherwise every line is parsed with data.py's line
    parsers and the same label map and scaling rules; ``limit`` then keeps the first
    ``limit`` examples (reading stops right after the last one; bad lines do not count),
    and the label classes and the LIBSVM width are decided on the rows read. Tests check that
    both paths, and the chunked reader, give the same stream.
    """
    fmt = opts.resolved_fmt()
    if _clean_for_load(opts, fmt):
        try:
            X, y = load(opts.path, fmt=fmt, n_features=opts.n_features,  # type: ignore[arg-type]
                        label_column=opts.label_column, task=opts.task,  # type: ignore[arg-type]
                        scale=opts.scale, limit=opts.limit,  # type: ignore[arg-type]
                        positive_label=opts.positive_label, delimiter=opts.delimiter,
                        header=opts.header,
                        scale_target=opts.scale_target)  # type: ignore[arg-type]
            return Dataset(X, y)
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
    for i, r in enumerate(rows):
        assert lmap is not None
        try:
            yi = lmap(r.label)
            if r.idx is not None and r.idx.size:
                hi = int(r.idx[-1])
                if opts.n_features is not None and hi > opts.n_features:
                    raise ParseError(f"index exceeds n_features: index {hi} > "
                                     f"n_features={opts.n_features}")
                max_idx = max(max_idx, hi)
        except ParseError as e:
            dead.append(dead_letter(src, lines[i], texts[i] or _row_raw(r), e.reason))
            continue
        keep.append(i)
        y.append(yi)
    good = [rows[i] for i in keep]
    if fmt == "libsvm":
        d = opts.n_features if opts.n_features is not None else max_idx
        X = np.zeros((len(good), d))
        for i, r in enumerate(good):
            assert r.idx is not None
            X[i, r.idx - 1] = r.vals
    else:
        d = good[0].vals.shape[0] if good else (opts.n_features or 0)
        X = np.array([r.vals for r in good]) if good else np.zeros((0, d))
    X = scale_minmax(X, opts.scale)  # type: ignore[arg-type]
    ents = None
    if opts.key_by is not None:
        ents = np.asarray([r.entity for r in good], dtype=object)
    dead.sort(key=lambda d: (d["line"] is None, d["line"]))
    yv = scale_target_minmax(np.asarray(y), opts.scale_target)  # type: ignore[arg-type]
    return Dataset(X, yv, entities=ents, dead_letters=dead,
                   lines=np.asarray([lines[i] for i in keep], dtype=np.int64))


def _acceptable(row: ParsedRow, opts: ReadOptions, classes: list[float | str]) -> bool:
    """Whether a valid row will be an example (decided online, so that ``limit`` counts
    examples): its class is one of the first two in file order, its target numeric, its
    indices within ``n_features``. The label map (and the dead letter) come later."""
    if opts.task == "regression":
        try:
            LabelMap.regression()(row.label)
        except ParseError:
            return False
    else:
        k = _class_key(row.label)
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


# -- the chunked file-order reader ----------------------------------------------------------------


class Chunk(NamedTuple):
    """Byte range ``[start, end)`` of a text file; it owns the lines that *start* in it
    (``end`` = -1: to the end of the file; compressed files are one chunk)."""

    index: int
    start: int
    end: int


def file_chunks(path: str, chunk_bytes: int) -> list[Chunk]:
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    size = fs.size(path)
    if is_compressed(path) or size <= chunk_bytes:
        return [Chunk(0, 0, -1)]
    return [Chunk(i, s, min(s + chunk_bytes, size))
            for i, s in enumerate(range(0, size, chunk_bytes))]


def iter_chunk_lines(path: str, chunk: Chunk) -> Iterator[bytes]:
    """The raw lines owned by ``chunk``: a line belongs to the chunk where it starts."""
    with open_binary(path) as f:
        if chunk.start > 0:
            f.seek(chunk.start - 1)
            f.readline()  # the rest of the line that started before this chunk
        while True:
            if chunk.end >= 0 and f.tell() >= chunk.end:
                return
            raw = f.readline()
            if not raw:
                return
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
    stream position; the label map, the width, the scaling range; where ``limit`` cuts."""

    line_offset: dict[int, int]
    row_offset: dict[int, int]
    label_map: dict[str, Any]
    n_features: int
    total_rows: int
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None


class _ScanChunk(beam.DoFn):
    def __init__(self, opts: ReadOptions, tf: TextFormat) -> None:
        self.opts, self.tf = opts, tf

    def process(self, chunk: Chunk) -> Iterator[ChunkStats]:
        st = ChunkStats(chunk.index)
        scale = self.opts.scale != "none"
        regression = self.opts.task == "regression"
        cur_max = 0
        dense: list[np.ndarray] = []
        for raw in iter_chunk_lines(self.opts.path, chunk):
            st.lines += 1
            _, row = self.tf.parse(0, raw)
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
                if self.opts.n_features is not None and top > self.opts.n_features:
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
        yield st


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


class _ReadChunk(beam.DoFn):
    """Second pass: parse a chunk again and emit its rows as blocks aligned to multiples of
    ``block_size`` positions (pieces of blocks that straddle chunks go to ``fragments``),
    plus its bad lines as dead letters."""

    FRAGMENTS = "fragments"

    def __init__(self, opts: ReadOptions, tf: TextFormat, configs: tuple[str, ...],
                 block_size: int) -> None:
        self.opts, self.tf, self.configs, self.B = opts, tf, configs, block_size
        self.n_dead = Metrics.counter(METRICS_NAMESPACE, "dead_letters")
        self.n_rows = Metrics.counter(METRICS_NAMESPACE, "rows_read")

    def process(self, chunk: Chunk, plan: StreamPlan) -> Iterator[Any]:
        pos0 = plan.row_offset[chunk.index]
        if pos0 >= plan.total_rows:
            return
        lmap = LabelMap.from_dict(plan.label_map)
        d = plan.n_features
        X: list[np.ndarray] = []
        y: list[float] = []
        line = plan.line_offset[chunk.index]
        for raw in iter_chunk_lines(self.opts.path, chunk):
            if pos0 + len(y) >= plan.total_rows:
                break  # right after the limit-th example
            line += 1
            text, row = self.tf.parse(line, raw)
            if row is None:
                continue
            try:
                if isinstance(row, ParseError):
                    raise row
                yi = lmap(row.label)
                x = densify(row.idx, row.vals, d) if row.idx is not None else row.vals
                if x.shape[0] != d:
                    raise ParseError(f"wrong number of columns: {x.shape[0]} features, "
                                     f"expected {d}")
            except ParseError as e:
                self.n_dead.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER_TAG, dead_letter(
                    self.opts.path, line, text, e.reason))
                continue
            X.append(x)
            y.append(yi)
        n = len(y)
        self.n_rows.inc(n)
        if n == 0:
            return
        Xa = np.array(X)
        if plan.lo is not None and plan.hi is not None:
            Xa = scale_minmax(Xa, self.opts.scale, plan.lo, plan.hi)  # type: ignore[arg-type]
        ya = np.asarray(y)
        ids = np.arange(pos0, pos0 + n, dtype=np.int64)
        B = self.B
        s = 0
        while s < n:
            p = pos0 + s
            e = min(n, (p // B + 1) * B - pos0)  # up to the next multiple of B
            whole = p % B == 0 and (e - s == B or pos0 + e == plan.total_rows)
            for c in self.configs:
                key = StreamKey(c, 0).encode()
                b = Block(key, p, ids[s:e], Xa[s:e], ya[s:e])
                if whole:
                    yield b
                else:
                    yield beam.pvalue.TaggedOutput(self.FRAGMENTS, ((key, p // B), b))
            s = e


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

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.PCollectionTuple:
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
