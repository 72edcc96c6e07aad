"""``--sample N``: N rows of a data file drawn at random, written as a file of the same format
that the run then reads (``OUT/.sample/``), so every runner and worker reads the same rows.
They are drawn before the run's data-driven decisions, which read them
(``pipelines.replay.sample_rows``).

The draw is reproducible: the rows are ``rng.choice(rows, N, replace=False)`` with ``rng``
seeded by ``SeedSequence([seed, SAMPLE_KEY])`` (``--seed``; apart from the permutations'
seeds), and they keep their order in the file (the replay permutes them anyway). A row is a
data line (not blank, not a ``#`` comment; a CSV header is copied first) or a Parquet row. Two
passes over a text file: one counts its rows, one copies the chosen ones.
"""

from __future__ import annotations

import io

import numpy as np

from kernelstream import fs

SAMPLE_KEY = 0x5A4D  # the sample's own stream of the base seed
EXTENSIONS = {"libsvm": "libsvm", "csv": "csv", "parquet": "parquet"}


def _is_row(line: bytes) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith(b"#")


def chosen_rows(total: int, n: int, seed: int) -> np.ndarray:
    """The sorted indices of the ``n`` rows (of ``total``) that ``--sample n --seed seed``
    takes (all of them when ``n >= total``)."""
    if n >= total:
        return np.arange(total)
    rng = np.random.default_rng(np.random.SeedSequence([seed, SAMPLE_KEY]))
    return np.sort(rng.choice(total, size=n, replace=False))


def draw_sample(src: str, fmt: str, n: int, seed: int, dest: str,
                header_line: int | None = None) -> int:
    """Write ``n`` random rows of ``src`` (format ``fmt``; a CSV header at the 1-based line
    ``header_line`` is kept) to ``dest``; returns the rows written."""
    if not fs.is_remote(dest):
        fs.makedirs(_parent(dest))
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        with fs.open_read(src) as fh:
            table = pq.read_table(fh)
        keep = chosen_rows(table.num_rows, n, seed)
        buf = io.BytesIO()
        pq.write_table(table.take(pa.array(keep)), buf)
        fs.write_bytes_atomic(dest, buf.getvalue())
        return len(keep)
    total = 0
    with fs.open_binary(src) as f:
        for lineno, line in enumerate(f, 1):
            total += lineno != header_line and _is_row(line)
    keep = chosen_rows(total, n, seed)
    out: list[bytes] = []
    row, k = 0, 0
    with fs.open_binary(src) as f:
        for lineno, line in enumerate(f, 1):
            if lineno == header_line:
                out.append(line if line.endswith(b"\n") else line + b"\n")
                continue
            if not _is_row(line):
                continue
            if k < len(keep) and keep[k] == row:
                out.append(line if line.endswith(b"\n") else line + b"\n")
                k += 1
            row += 1
    fs.write_bytes_atomic(dest, b"".join(out))
    return len(keep)


def _parent(path: str) -> str:
    import os

    return os.path.dirname(os.path.abspath(fs.local_path(path)))
