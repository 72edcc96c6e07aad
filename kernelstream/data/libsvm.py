"""LIBSVM text: the exact line parser, block parsing (:func:`parse_libsvm_lines`; the vectorised
parser is :mod:`kernelstream.data.libsvm_bulk`),
record iteration, whole-file loading into a dense matrix and sparse (CSR) reading."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from kernelstream.data.errors import (
    BadLines,
    ErrorPolicy,
    ParseError,
    PathLike,
    _check_garbage,
    strict_float,
)
from kernelstream.data.hashing import csr_from_pairs, hash_index
from kernelstream.data.labels import (
    _encode_labels,
    _Labels,
)
from kernelstream.data.libsvm_bulk import MAX_INDEX, _libsvm_bulk, _Sparse
from kernelstream.data.lines import (
    _decode_line,
    _grow_rows,
    _iter_line_blocks,
    _iter_raw_lines,
)
from kernelstream.sparse import CSR


def _is_int_token(s: str) -> bool:
    body = s[1:] if s[:1] in "+-" else s
    return body.isascii() and body.isdigit()


def _diagnose_libsvm(body: Sequence[str]) -> None:
    """Raise the ParseError of the first bad ``idx:val`` token; return if every token is fine.

    Slow and exact: only called once the fast path in :func:`_parse_libsvm_lists` has seen a
    problem, so the happy path never pays for it.
    """
    for tok in body:
        a, sep, b = tok.partition(":")
        if not sep or not a or not b or ":" in b:
            raise ParseError(f"bad token {tok!r} (expected index:value)")
        if a == "qid":  # svmlight's ranking query id: every line has one, so say it plainly
            raise ParseError(f"qid tokens are not supported ({tok!r}: svmlight's query id of "
                             "a ranking file)")
        if not _is_int_token(a):
            raise ParseError(f"non-integer index {a!r} in {tok!r}")
        if int(a) <= 0:
            raise ParseError(f"non-positive index {int(a)} (indices are 1-based)")
        if int(a) > MAX_INDEX:
            raise ParseError(f"index too large: {int(a)} > {MAX_INDEX}")
        strict_float(b, f"bad value {b!r} at index {int(a)}",
                     f"non-finite value {b!r} at index {int(a)}")


def _parse_libsvm_lists(line: str) -> tuple[str, list[int], list[float]]:
    """:func:`parse_libsvm_line` returning plain lists (sorted by index)."""
    cut = line.find("#")
    if cut >= 0:
        line = line[:cut]
    _check_garbage(line)
    toks = line.split()
    if not toks:
        raise ParseError("empty line")
    label = toks[0]
    if ":" in label:
        raise ParseError(f"missing label (line starts with the pair {label!r})")
    body = toks[1:]
    if not body:
        return label, [], []
    # int()/float() accept underscores ("1_0") and non-ASCII digits; LIBSVM does not.
    if "_" in line or not (line.isascii() or "".join(body).isascii()):
        _diagnose_libsvm(body)
    try:
        pairs = [t.split(":") for t in body]
        idx = [int(a) for a, _ in pairs]
        val = [float(b) for _, b in pairs]
    except ValueError:
        _diagnose_libsvm(body)
        raise ParseError("bad token") from None  # unreachable: the diagnosis raises
    # One C-level pass each; sum() is nan/inf iff some value is (or the sum overflows, in
    # which case the diagnosis finds nothing and we go on).
    if min(idx) <= 0 or max(idx) > MAX_INDEX or not math.isfinite(sum(val)):
        _diagnose_libsvm(body)
    s_idx = sorted(idx)
    if s_idx != idx:
        order = sorted(range(len(idx)), key=idx.__getitem__)
        idx = s_idx
        val = [val[i] for i in order]
    if len(set(idx)) != len(idx):
        dup = next(a for a, b in itertools.pairwise(idx) if a == b)
        raise ParseError(f"duplicate index {dup}")
    return label, idx, val


def parse_libsvm_line(line: str) -> tuple[str, np.ndarray, np.ndarray]:
    """Parse one LIBSVM line into ``(label_token, indices, values)``.

    ``indices`` are the 1-based feature indices (``int64``, sorted ascending, unique) and
    ``values`` the matching ``float64`` values. The label token is returned as written (e.g.
    ``"+1"``); map it with a :class:`LabelMap`. A comment after ``#`` is ignored.

    Raises :class:`ParseError` (without path/line) for an empty line, a missing label, a token
    that is not ``index:value``, a non-integer or non-positive index, a bad or non-finite
    value, a duplicate index, or control characters (binary data).
    """
    label, idx, val = _parse_libsvm_lists(line)
    return label, np.array(idx, dtype=np.int64), np.array(val, dtype=np.float64)


def check_top_index(indices: np.ndarray, n_features: int | None) -> int:
    """The largest of a row's sorted 1-based ``indices`` (0 for an empty row); a ParseError
    when it exceeds ``n_features`` (None: no limit)."""
    top = int(indices[-1]) if len(indices) else 0
    if n_features is not None and top > n_features:
        raise ParseError(f"index exceeds n_features: index {top} > n_features={n_features}")
    return top


def densify(indices: Any, values: Any, n_features: int) -> np.ndarray:
    """The dense ``float64`` vector of length ``n_features`` of a sparse LIBSVM example."""
    idx = np.asarray(indices, dtype=np.int64)
    x = np.zeros(int(n_features), dtype=np.float64)
    if idx.size:
        hi = int(idx.max())
        if hi > n_features:
            raise ParseError(f"index exceeds n_features: index {hi} > n_features={n_features}")
        lo = int(idx.min())
        if lo <= 0:
            raise ParseError(f"non-positive index {lo} (indices are 1-based)")
        x[idx - 1] = values
    return x


def _libsvm_blank(text: str) -> bool:
    return not text.split("#", 1)[0].strip()


def _libsvm_lines(
    lines: Iterable[tuple[int, bytes | ParseError]], path: str, bad: BadLines
) -> Iterator[tuple[int, str, tuple[str, list[int], list[float]] | ParseError]]:
    """Numbered raw lines parsed one by one (blank and comment-only lines skipped), for the
    record iterator and the exact block parser alike; bad lines go through ``bad``."""
    for lineno, raw in lines:
        if isinstance(raw, ParseError):  # a corrupt compressed file: nothing more to read
            yield lineno, "", bad.add(raw)
            return
        text, err = _decode_line(raw)
        if err is None:
            if _libsvm_blank(text):
                continue
            try:
                parsed = _parse_libsvm_lists(text)
            except ParseError as e:
                err = e
            else:
                yield lineno, text, parsed
                continue
        elif not raw.strip():
            continue
        yield lineno, text, bad.add(err.located(path, lineno))


def iter_libsvm_records(
    path: PathLike, *, errors: ErrorPolicy | BadLines = ErrorPolicy.COLLECT
) -> Iterator[tuple[int, str, tuple[str, np.ndarray, np.ndarray] | ParseError]]:
    """Lazily yield ``(line_number, raw_text, (label, indices, values) | ParseError)``.

    Blank and comment-only lines are skipped. Bad lines (including binary garbage and
    undecodable bytes) come out as a located :class:`ParseError`: by default
    (``ErrorPolicy.COLLECT``) the iterator does not raise on bad data (a missing file still
    raises ``OSError`` on the first ``next``); ``RAISE`` raises the first; a
    :class:`BadLines` as ``errors`` also counts them.
    """
    lines = _libsvm_lines(_iter_raw_lines(path), os.fspath(path), BadLines.of(errors))
    for lineno, text, p in lines:
        yield lineno, text, p if isinstance(p, ParseError) else (
            p[0], np.array(p[1], dtype=np.int64), np.array(p[2], dtype=np.float64))


def parse_libsvm_lines(
    lines: Sequence[bytes], n_features: int
) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    """Many one-line LIBSVM records at once (e.g. Kafka messages), with the file loader's
    vectorised parser (:func:`_libsvm_bulk`): ``(label token per line, dense X (n,
    n_features), ok)``, or None when that parser cannot vouch for every line (a comment, a
    bad token, a blank or multi-line record, ...): the caller then parses line by line with
    :func:`parse_libsvm_line`, which also gives the errors. Row ``i`` equals
    ``densify(*parse_libsvm_line(lines[i])[1:], n_features)`` bit for bit where ``ok[i]``;
    rows with an index beyond ``n_features`` have ``ok`` False (and zeros): the line parser
    and :func:`densify` report them."""
    n, d = len(lines), int(n_features)
    if n == 0:
        return [], np.zeros((0, d), dtype=np.float64), np.ones(0, dtype=bool)
    data = b"\n".join(lines)
    if data.count(b"\n") != n - 1:
        return None  # a record holding a newline: the line parser sees one line, we two
    sp = _libsvm_bulk(data)
    if sp is None or len(sp.counts) != n:
        return None  # a blank record has no row
    rows = np.repeat(np.arange(n), sp.counts)
    beyond = sp.idx > d
    ok = np.ones(n, dtype=bool)
    ok[rows[beyond]] = False
    keep = ok[rows]
    X = np.zeros((n, d), dtype=np.float64)
    X[rows[keep], sp.idx[keep] - 1] = sp.val[keep]
    tokens = sp.labels.tokens
    return [tokens[c] for c in sp.labels.codes.tolist()], X, ok


def _libsvm_exact(data: bytes, path: str, line0: int = 0) -> _Sparse:
    """Per-line LIBSVM parse with :func:`parse_libsvm_line`; raises on the first bad line.

    ``line0`` is the number of lines before ``data`` in the file (line numbers are global).
    """
    labels: list[str] = []
    linenos: list[int] = []
    counts: list[int] = []
    idx: list[int] = []
    val: list[float] = []
    lines = enumerate(data.split(b"\n"), line0 + 1)
    for lineno, _text, parsed in _libsvm_lines(lines, path, BadLines(ErrorPolicy.RAISE)):
        assert not isinstance(parsed, ParseError)  # RAISE: the first bad line raised
        label, i, v = parsed
        labels.append(label)
        linenos.append(lineno)
        counts.append(len(i))
        idx.extend(i)
        val.extend(v)
    return _Sparse(
        _encode_labels(labels, linenos),
        np.asarray(counts, dtype=np.int64),
        np.asarray(idx, dtype=np.int64),
        np.asarray(val, dtype=np.float64),
    )


def _compact_pairs(idx: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``idx``/``val`` in the smallest types that hold them exactly (indices are at most
    MAX_INDEX; many files hold only small integers or values exact in float32)."""
    idx = idx.astype(np.uint16 if int(idx.max()) < 2**16 else np.int32)
    with np.errstate(over="ignore"):  # a value beyond float32 (1e308) is kept as float64
        v32 = val.astype(np.float32)
    if np.array_equal(v32.astype(np.float64).view(np.int64), val.view(np.int64)):
        val = v32  # bit for bit the same float64 values once written into X
    return idx, val


class _LibsvmBuilder:
    """Collects parsed LIBSVM blocks into the dense X and the labels of :func:`_load_libsvm`.

    With ``n_features`` known, each block is written into X (grown in place) and dropped.
    Without it the width is only known at the end: blocks are kept as compact sparse parts
    (:func:`_compact_pairs`) and written into X once it is allocated. Either way the result
    and every error are those of a parse of the whole file at once:

    * syntax errors first (the caller parses all blocks before :meth:`finish`), then an index
      beyond ``n_features``, reported at the first such line;
    * its index is the first one beyond ``n_features`` in file order when every block took
      the bulk path, else the smallest one in that line: the whole file would then have gone
      through the exact parser, whose rows are sorted.
    """

    def __init__(self, n_features: int | None) -> None:
        self.d = None if n_features is None else int(n_features)
        self.X = (np.zeros((0, self.d), dtype=np.float64)
                  if self.d is not None and self.d >= 0 else None)  # else: rows kept as pairs
        self.parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray] | None] = []
        self.table: dict[str, int] = {}
        self.codes: list[np.ndarray] = []
        self.linenos: list[np.ndarray] = []
        self.n = 0
        self.max_idx = 0
        self.all_bulk = True
        self.too_large: tuple[int, int, int] | None = None  # (line, first index, smallest)

    def add(self, sp: _Sparse, bulk: bool) -> None:
        self.all_bulk &= bulk
        tokens, codes, linenos = sp.labels
        remap = np.array(
            [self.table.setdefault(t, len(self.table)) for t in tokens], dtype=np.int64
        )
        self.codes.append(remap[codes])
        self.linenos.append(linenos)
        row0, self.n = self.n, self.n + len(codes)
        if not sp.idx.size:
            if self.X is not None:
                _grow_rows(self.X, self.n)
            return
        self.max_idx = max(self.max_idx, int(sp.idx.max()))
        if self.d is None:
            self.parts.append((row0, sp.counts, *_compact_pairs(sp.idx, sp.val)))
            return
        if self.too_large is None and self.max_idx > self.d:
            self.too_large = self._first_too_large(sp, self.d)
            self.X = None  # the load fails; only the syntax of the rest is still checked
        if self.X is not None:
            _grow_rows(self.X, self.n)
            rows = np.repeat(np.arange(row0, self.n), sp.counts)
            self.X[rows, sp.idx - 1] = sp.val

    @staticmethod
    def _first_too_large(sp: _Sparse, d: int) -> tuple[int, int, int]:
        bad = int(np.argmax(sp.idx > d))
        ends = np.cumsum(sp.counts)
        r = int(np.searchsorted(ends, bad, side="right"))
        row = sp.idx[int(ends[r] - sp.counts[r]) : int(ends[r])]
        return int(sp.labels.linenos[r]), int(sp.idx[bad]), int(row[row > d].min())

    def finish(self, path: str) -> tuple[np.ndarray, _Labels]:
        d = self.max_idx if self.d is None else self.d
        if self.too_large is not None:
            line, first, smallest = self.too_large
            index = first if self.all_bulk else smallest
            raise ParseError(
                f"index exceeds n_features: index {index} > n_features={d}", path, line
            )
        labels = _Labels(
            list(self.table),
            np.concatenate(self.codes) if self.codes else np.zeros(0, dtype=np.int64),
            np.concatenate(self.linenos) if self.linenos else np.zeros(0, dtype=np.int64),
        )
        self.codes = self.linenos = []
        if self.X is not None:
            return self.X, labels
        X = np.zeros((self.n, d), dtype=np.float64)
        for k, part in enumerate(self.parts):
            assert part is not None
            self.parts[k] = None  # free each part once it is in X
            row0, counts, idx, val = part
            rows = np.repeat(np.arange(row0, row0 + len(counts)), counts)
            X[rows, idx - 1] = val
        return X, labels


def _load_libsvm(
    path: PathLike, n_features: int | None, limit: int | None, chunk_bytes: int
) -> tuple[np.ndarray, _Labels]:
    spath = os.fspath(path)
    out = _LibsvmBuilder(n_features)
    line0 = 0  # lines before the current block
    with contextlib.closing(_iter_line_blocks(path, limit, chunk_bytes)) as blocks:
        for block in blocks:
            try:
                sp = _libsvm_bulk(block, line0) if b"#" not in block else None
                bulk = sp is not None
                if sp is None:
                    sp = _libsvm_exact(block, spath, line0)
            except ParseError:
                # Reading the whole file first reported a corrupt compressed file before any
                # bad line: read the rest (as far as a whole-file read went) before raising.
                for _ in blocks:
                    pass
                raise
            out.add(sp, bulk)
            line0 += block.count(b"\n")
    return out.finish(spath)


def _load_libsvm_csr(
    path: PathLike, n_features: int | None, limit: int | None, chunk_bytes: int,
    hash_bits: int | None = None,
) -> tuple[CSR, _Labels]:
    """The file as a :class:`~kernelstream.sparse.CSR` (0-based, sorted columns) and its labels.

    Memory grows with the non-zeros only: no array is ever sized by the largest index, so an
    index of 2**31 - 1 or one very long line costs what its pairs cost. Blocks are parsed as
    :func:`_load_libsvm` parses them (the first bad line raises); an index beyond
    ``n_features`` raises at its line. ``hash_bits`` hashes the columns into ``2**k``
    (:mod:`kernelstream.data.hashing`) a block at a time.
    """
    spath = os.fspath(path)
    table: dict[str, int] = {}
    codes: list[np.ndarray] = []
    linenos: list[np.ndarray] = []
    parts: list[CSR] = []
    line0 = 0
    width = 0
    for block in _iter_line_blocks(path, limit, chunk_bytes):
        sp = _libsvm_bulk(block, line0) if b"#" not in block else None
        if sp is None:
            sp = _libsvm_exact(block, spath, line0)
        line0 += block.count(b"\n")
        n = len(sp.counts)
        rows = np.repeat(np.arange(n, dtype=np.int64), sp.counts)
        if n_features is not None and len(sp.idx) and int(sp.idx.max()) > n_features:
            k = int(np.argmax(sp.idx > n_features))
            raise ParseError(
                f"index exceeds n_features: index {int(sp.idx[k])} > n_features={n_features}",
                spath, int(sp.labels.linenos[rows[k]]))
        if len(sp.idx):
            width = max(width, int(sp.idx.max()))
        cols = sp.idx - 1
        d = max(width, n_features or 0)
        if hash_bits is not None:
            cols, d = hash_index(cols, hash_bits), 1 << hash_bits
        parts.append(csr_from_pairs(rows, cols, sp.val, n, d))
        remap = np.array([table.setdefault(t, len(table)) for t in sp.labels.tokens],
                         dtype=np.int64)
        codes.append(remap[sp.labels.codes] if len(remap) else sp.labels.codes)
        linenos.append(sp.labels.linenos)
    d = (1 << hash_bits) if hash_bits is not None else max(width, n_features or 0)
    X = CSR.vstack(parts, d)
    return X, _Labels(list(table), _cat(codes), _cat(linenos))


def _cat(xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64)
