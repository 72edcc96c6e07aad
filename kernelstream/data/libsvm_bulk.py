"""The vectorised LIBSVM parser: whole blocks of lines parsed with numpy on the raw bytes.

:func:`_libsvm_bulk` accepts only input whose meaning it can vouch for and otherwise returns
None, so that the exact per-line parser of :mod:`kernelstream.data.libsvm` decides and
reports the first bad line; a property test checks that the two agree."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernelstream.data.labels import _Labels

# LIBSVM stores indices as C ints; larger ones are corrupt data, not features.
MAX_INDEX = 2**31 - 1


@dataclass
class _Sparse:
    """Parsed LIBSVM rows in flat (CSR-like) form."""

    labels: _Labels
    counts: np.ndarray  # pairs per row
    idx: np.ndarray  # 1-based, int64 (within a row in file order)
    val: np.ndarray


# Bytes the LIBSVM fast path handles itself; anything else ("#", "_", non-ASCII, control
# characters) sends the file to the exact per-line parser.
_BULK_BYTES = bytes(b for b in range(0x20, 0x7F) if b not in b"#_") + b"\t\r\n"


_TO_SPACE = bytes.maketrans(b"\t\r", b"  ")


_COLON_NL_TO_SPACE = bytes.maketrans(b":\n", b"  ")


_MAX_BULK_LABEL = 64  # longer label tokens go to the exact path


_MAX_INT_VALUE_DIGITS = 15  # integer values up to 10^15 - 1 are exact in float64


def _gather_digits(
    buf: np.ndarray, last: np.ndarray, length: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """Integer value and "all digits" flag of the digit strings ``buf[last-length+1 .. last]``.

    Works one digit place at a time (``width`` gathers of one byte per string) rather than
    over the whole buffer, so it is cheap for the short numbers LIBSVM files are full of.
    Requires ``1 <= length``; bytes beyond a string's length are ignored.
    """
    value = np.zeros(len(last), dtype=np.int64)
    ok = np.ones(len(last), dtype=bool)
    place = 1
    for k in range(width):
        d = buf[last - k] - np.uint8(0x30)  # uint8: bytes below "0" wrap to > 9
        if k == 0:  # every string has a last digit: no mask needed
            ok &= d <= 9
            value += d
        else:
            has = length > k
            ok &= (d <= 9) | ~has
            d[~has] = 0
            value += d.astype(np.int64) * place
        place *= 10
    return value, ok


def _libsvm_bulk(data: bytes, line0: int = 0) -> _Sparse | None:
    """Vectorised LIBSVM parse of whole lines of a (decompressed) file, or None if unsure.

    ``line0`` is the number of lines before ``data`` in the file (line numbers are global).

    The per-line parser costs several µs a line; this path finds tokens, labels and line
    numbers with numpy on the raw bytes, computes indices and integer values from their
    digits and converts the other values with one ``np.fromstring`` call. It only accepts
    input whose meaning it can vouch for (plain ASCII, every pair ``digits:value``, finite
    values, no duplicate index); for anything else it returns None and :func:`_libsvm_exact`
    decides and reports the first bad line. A property test checks that both paths agree.
    """
    if data.translate(None, _BULK_BYTES):
        return None
    # Newlines at both ends: every token then has whitespace on both sides, the last line
    # needs no newline, and line k (1-based) is preceded by exactly k newlines.
    text = b"\n" + data.translate(_TO_SPACE) + b"\n"
    buf = np.frombuffer(text, dtype=np.uint8)
    newline = buf == 0x0A
    ws = newline | (buf == 0x20)
    starts = np.flatnonzero(ws[:-1] & ~ws[1:]) + 1
    ends = np.flatnonzero(~ws[:-1] & ws[1:]) + 1  # exclusive
    # A token starts a line (is a label) iff the gap before it holds a newline. Most gaps are
    # one byte; count newlines (by binary search) only in the longer ones.
    gap_start = np.empty_like(starts)
    gap_start[:1] = 0
    gap_start[1:] = ends[:-1]
    is_label = buf[starts - 1] == 0x0A
    long_gap = np.flatnonzero(starts - gap_start > 1)
    nl = np.flatnonzero(newline)
    if long_gap.size:
        before = np.searchsorted(nl, starts[long_gap]) - np.searchsorted(nl, gap_start[long_gap])
        is_label[long_gap] = before > 0
    label_tok = np.flatnonzero(is_label)
    lab_starts, lab_ends = starts[label_tok], ends[label_tok]
    p_starts, p_ends = starts[~is_label], ends[~is_label]
    n, ntok = len(lab_starts), len(p_starts)
    colons = np.flatnonzero(buf == 0x3A)
    # Equal counts plus "colon k lies strictly inside pair token k" means: every pair has
    # exactly one colon with a non-empty index and value around it, and no label has one.
    if len(colons) != ntok:
        return None
    if not (np.all(colons > p_starts) and np.all(colons < p_ends - 1)):
        return None
    lab_len = lab_ends - lab_starts
    if n and int(lab_len.max()) > _MAX_BULK_LABEL:
        return None
    counts = np.diff(np.append(label_tok, len(starts))) - 1  # pairs per line
    if ntok:
        index_len = colons - p_starts
        width = int(index_len.max())
        if width > 10:  # beyond MAX_INDEX anyway; let the exact path say so
            return None
        idx, ok = _gather_digits(buf, colons - 1, index_len, width)
        if not ok.all():
            return None
        val = _bulk_values(text, buf, colons, p_ends, index_len, width, lab_starts, lab_len)
        if val is None:
            return None
        if not (np.all(idx > 0) and np.all(idx <= MAX_INDEX) and np.all(np.isfinite(val))):
            return None
        rows = np.repeat(np.arange(n), counts)
        same_row = rows[1:] == rows[:-1]
        if np.any((np.diff(idx) <= 0) & same_row):
            # Unsorted rows are fine for a dense result; duplicates are not.
            s_idx = idx[np.lexsort((idx, rows))]
            if np.any((np.diff(s_idx) == 0) & same_row):
                return None
    else:
        idx = np.zeros(0, dtype=np.int64)
        val = np.zeros(0, dtype=np.float64)
    linenos = np.searchsorted(nl, lab_starts) + line0  # = the number of newlines before it
    return _Sparse(_bulk_labels(buf, lab_starts, lab_len, linenos), counts, idx, val)


def _bulk_values(
    text: bytes,
    buf: np.ndarray,
    colons: np.ndarray,
    p_ends: np.ndarray,
    index_len: np.ndarray,
    index_width: int,
    lab_starts: np.ndarray,
    lab_len: np.ndarray,
) -> np.ndarray | None:
    """The float64 values of all pairs, or None if one is not a number numpy can read.

    Plain integers (optionally signed), the bulk of many LIBSVM files, are computed from their
    digits (exact, so equal to ``float()``); the rest go through one ``np.fromstring``.
    """
    val_len = p_ends - colons - 1
    first = buf[colons + 1]
    signed = (first == 0x2D) | (first == 0x2B)
    n_digits = val_len - signed
    # Candidates for the integer path: no ".", "e" or "E" in the value (found with one pass
    # over the buffer; a hit inside a label only costs a candidate) and at most 15 digits.
    cand_mask = (n_digits > 0) & (n_digits <= _MAX_INT_VALUE_DIGITS)
    marks = np.flatnonzero((buf == 0x2E) | ((buf | 0x20) == 0x65))
    if marks.size:
        owner = np.searchsorted(colons, marks) - 1
        cand_mask[owner[owner >= 0]] = False
    cand = np.flatnonzero(cand_mask)
    val = np.empty(len(colons), dtype=np.float64)
    is_int = np.zeros(len(colons), dtype=bool)
    if cand.size:
        width = int(n_digits[cand].max())
        ints, ok = _gather_digits(buf, p_ends[cand] - 1, n_digits[cand], width)
        cand = cand[ok]
        val[cand] = ints[ok]
        neg = cand[first[cand] == 0x2D]
        val[neg] *= -1.0  # also gives -0.0 for "-0", as float() does
        is_int[cand] = True
    rest = np.flatnonzero(~is_int)
    if rest.size:
        # Blank everything but the remaining values (labels, indices, colons, integer values),
        # then let numpy's (correctly rounded) parser read them in order.
        vt = np.frombuffer(text.translate(_COLON_NL_TO_SPACE), dtype=np.uint8).copy()
        for k in range(index_width):
            vt[(colons - 1 - k)[index_len > k]] = 0x20
        for k in range(int(lab_len.max())):
            vt[(lab_starts + k)[lab_len > k]] = 0x20
        done_ends, done_len = p_ends[is_int], val_len[is_int]
        for k in range(int(done_len.max(initial=0))):
            vt[(done_ends - 1 - k)[done_len > k]] = 0x20
        try:
            parsed = np.fromstring(vt.tobytes(), dtype=np.float64, sep=" ")
        except ValueError:
            return None
        if len(parsed) != rest.size:
            return None
        val[rest] = parsed
    return val


def _bulk_labels(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, linenos: np.ndarray
) -> _Labels:
    """Label tokens as fixed-width byte strings, reduced to distinct tokens with numpy."""
    n = len(starts)
    if n == 0:
        return _Labels([], np.zeros(0, dtype=np.int64), linenos.astype(np.int64))
    width = int(lengths.max())
    cols = np.arange(width)
    pos = np.minimum(starts[:, None] + cols, len(buf) - 1)
    chars = np.where(cols < lengths[:, None], buf[pos], 0).astype(np.uint8)
    fixed = np.ascontiguousarray(chars).view(f"S{width}").ravel()
    uniq, inverse = np.unique(fixed, return_inverse=True)
    first = np.full(len(uniq), n, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(n))
    order = np.argsort(first)  # distinct tokens in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    tokens = [bytes(u).decode("ascii") for u in uniq[order]]
    return _Labels(tokens, rank[inverse].astype(np.int64), linenos.astype(np.int64))
