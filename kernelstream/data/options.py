"""The one read-options object: how to read a data set, shared by :func:`kernelstream.data.load`
(:meth:`ReadOptions.load_kwargs`), the replay configuration, the file and Kafka readers of the
pipelines and ``kernelstream check``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelstream.data.sniff import infer_format

# Feature hashing maps indices into 2**k columns; past 2**31 columns an index no longer fits
# the LIBSVM C int, and below 2**1 there is nothing to learn.
MIN_HASH_BITS, MAX_HASH_BITS = 1, 31


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
