"""The one read-options object: how to read a data set, shared by :func:`kernelstream.data.load`
(:meth:`ReadOptions.load_kwargs`), the replay configuration, the live stream's
(``engine.live.parsing.LiveSpec.read``), the file and Kafka readers of the pipelines and
``kernelstream check``."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from kernelstream.data.hashing import check_bits
from kernelstream.data.sniff import infer_format

# ``--scale auto``'s ranges decided on a source's first rows: the ``(lo, hi)`` of each column
Ranges = tuple[tuple[float, ...], tuple[float, ...]]

# Feature hashing maps indices into 2**k columns; past 2**31 columns an index no longer fits
# the LIBSVM C int, and below 2**1 there is nothing to learn.
MIN_HASH_BITS, MAX_HASH_BITS = 1, 31

# How rows reach the learners: "dense" numpy rows, "sparse" CSR rows, or "auto": sparse for
# LIBSVM or hashed data wider than AUTO_SPARSE_WIDTH columns, dense otherwise. Narrow data
# stays dense because dense kernel rows are faster there (benchmarks/results/sparse.md: the
# sparse path costs 1.4-2.3x per round on a9a and w7a) and give the published numbers as
# they were; past a few thousand columns a dense row costs more than its non-zeros.
ROWS = ("auto", "dense", "sparse")
AUTO_SPARSE_WIDTH = 2048


def column_option(value: str | None) -> int | str | None:
    """A column option (``--label-column``, ``--key-by``) as the readers take it: a position
    when it reads as an integer, else a header name; None when not given."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return value


@dataclass(frozen=True)
class ReadOptions:
    """How to read a data set (the options of ``data.load`` plus ``key_by`` and hashing).

    ``hash_features``: None, or k: every feature index (LIBSVM) or column position (CSV,
    Parquet) goes through :func:`kernelstream.data.hashing.hash_index` into ``2**k`` columns,
    values of colliding features summed.
    """

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
    hash_features: int | None = None  # k: hash features into 2**k columns
    rows: str = "auto"  # "auto", "dense" or "sparse" (see ROWS)
    # a Kafka topic scaled by ``--scale auto``: the ``(lo, hi)`` of each of the learners'
    # columns over the first rows, applied to every row (``kafka_client.blocks``; a topic is
    # read once, so its ranges cannot be those of all its rows as a file's are)
    scale_ranges: Ranges | None = None
    # the file's (size, mtime_ns) when the run started (``data.stamp``): its readers check it
    # is unchanged when they have read it; not part of the options' identity
    stamp: tuple[int, int] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.rows not in ROWS:
            raise ValueError(f"rows must be one of {', '.join(ROWS)}, got {self.rows!r}")
        if self.rows == "sparse" and self.scale != "none":
            raise ValueError(f"min-max scaling (scale={self.scale!r}) turns the zeros of sparse "
                             "rows into non-zeros: use scale 'none' with sparse rows")
        if self.hash_features is not None:
            check_bits(self.hash_features)
        if self.positive_label is not None and self.task == "regression":
            raise ValueError("--positive-label (positive_label) applies to classification "
                             "only: a regression target has no positive class")

    @classmethod
    def from_args(cls, args: Any, path: str, **given: Any) -> ReadOptions:
        """The read options of a command line's parsed ``args`` (``--format``,
        ``--label-column``, ``--scale``, ``--limit``, ...: each field's option, ``fmt``'s
        ``--format``) for the data at ``path``: the one builder of every command that reads
        data. An option the command does not offer (``check`` has no ``--scale``) keeps the
        field's default, ``--task`` not given is classification; ``given`` sets fields the
        caller decided itself (the run's task, its label map, a format sniffed)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in ("path", "scale_ranges", "stamp") or f.name in given:
                continue  # (scale_ranges: decided on a topic's head, no option)
            value = getattr(args, _ARG.get(f.name, f.name), None)
            if value is None:
                value = None if f.default is MISSING else f.default
            values[f.name] = column_option(value) if f.name in _COLUMNS else value
        return cls(path=path, **values, **given)

    def check_format(self, fmt: str) -> None:
        """Refuse a read option that the file's format ``fmt`` would ignore (``--delimiter``
        and ``--header`` are CSV's, ``--label-column`` not LIBSVM's, ``--n-features`` not CSV's,
        whose width is its columns): a ``ValueError`` naming the format it applies to."""
        if fmt == "csv":
            if self.n_features is not None:
                raise ValueError(f"--n-features applies to LIBSVM and Parquet files; {self.path} "
                                 "is a CSV file, whose width is its number of columns")
            return
        name = {"libsvm": "LIBSVM", "parquet": "Parquet"}.get(fmt, fmt)
        for flag, given in (("--delimiter", self.delimiter is not None),
                            ("--header", self.header is not None)):
            if given:
                raise ValueError(f"{flag} applies to CSV files only; {self.path} is a {name} "
                                 "file")
        if fmt == "libsvm" and self.label_column is not None:
            raise ValueError(f"--label-column applies to CSV and Parquet files; {self.path} is "
                             "a LIBSVM file, whose label is each line's first token")

    def sparse_rows(self, width: int) -> bool:
        """Whether rows of this width go to the learners as CSR (the ``rows`` rule)."""
        if self.rows != "auto":
            return self.rows == "sparse"
        # a topic's records are LIBSVM unless named CSV (its path is no file to sniff)
        fmt = self.fmt or ("libsvm" if self.path.startswith("kafka://") else self.resolved_fmt())
        wide = self.hash_features is not None or fmt == "libsvm"
        return wide and self.scale == "none" and width > AUTO_SPARSE_WIDTH

    def resolved_fmt(self) -> str:
        return self.fmt or infer_format(self.path)

    def load_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`kernelstream.data.load` for these options."""
        return {
            "fmt": self.fmt,
            "n_features": self.n_features,
            "label_column": self.label_column,
            "task": self.task,
            "scale": self.scale,
            "scale_target": self.scale_target,
            "limit": self.limit,
            "positive_label": self.positive_label,
            "delimiter": self.delimiter,
            "header": self.header,
        }


_ARG = {"fmt": "format"}  # a field whose option's destination is not its name
_COLUMNS = ("label_column", "key_by")  # a position or a header name (column_option)
