"""What the report reads from a run's ``summary.json``, with its types, checked in one place.

A damaged summary (a field edited by hand, a file half overwritten) is refused in one line
naming the file and the field, not met later as a traceback in a table's formatting. Only the
fields the report uses are checked, and only their types: a field absent or null is fine (an
older run's summary lacks the newer ones), and every other field is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernelstream.errors import ReportError

# the run's own fields (the runs table); text fields are printed as they are, whatever they hold
_RUN_NUMBERS = ("examples", "n_features", "dead_letters", "limit")
_RUN_INTEGERS = ("permutations", "seed")  # printed as integers
# a configuration's figures (the summary table): each may have its ``_std``
_FIGURES = ("mistake_rate", "avg_loss", "noskill_mistake_rate", "noskill_avg_loss", "rmse",
            "mae", "r2", "n_support_vectors", "seconds")
_CONFIG_NUMBERS = (*_FIGURES, *(f"{f}_std" for f in _FIGURES), "examples",
                   "examples_per_second")
_CONFIG_INTEGERS = ("permutations", "entities")
# a --key-by run's per-entity rows (its entities table, and its summary rows when it has no
# ``configs``): these the report needs in every row
_KEY_NEEDED = ("config", "entity", "permutation", "examples", "n_support_vectors")
_KEY_NUMBERS = ("examples", "n_support_vectors", "mistakes", "mistake_rate", "avg_loss",
                "noskill_mistake_rate", "noskill_avg_loss", "rmse", "mae", "r2", "seconds")
_KEY_INTEGERS = ("permutation", "rejected")


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_text(v: Any) -> bool:
    return isinstance(v, str | int | float)


class _Checker:
    def __init__(self, file: str) -> None:
        self.file = file

    def refuse(self, where: str, v: Any, what: str) -> None:
        shown = repr(v)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise ReportError(f"{self.file}: damaged: {where} is {shown}, not {what}")

    def fields(self, d: Mapping[str, Any], prefix: str, numbers: tuple[str, ...],
               integers: tuple[str, ...]) -> None:
        for k in numbers:
            if d.get(k) is not None and not _is_number(d[k]):
                self.refuse(prefix + k, d[k], "a number")
        for k in integers:
            if d.get(k) is not None and not _is_integer(d[k]):
                self.refuse(prefix + k, d[k], "an integer")

    def items(self, summary: Mapping[str, Any], name: str) -> list[Any]:
        v = summary.get(name)
        if v is None:
            return []
        if not isinstance(v, list):
            self.refuse(name, v, "a list")
        for i, item in enumerate(v):
            if not isinstance(item, dict):
                self.refuse(f"{name}[{i}]", item, "an object")
        return list(v)


def check_summary(summary: Mapping[str, Any], file: str) -> None:
    """Raise :class:`ReportError` when a field the report reads from ``summary`` (the JSON of
    ``file``) has a type it cannot show."""
    c = _Checker(file)
    c.fields(summary, "", _RUN_NUMBERS, _RUN_INTEGERS)
    argv = summary.get("argv")
    if argv is not None and not (isinstance(argv, list) and all(map(_is_text, argv))):
        c.refuse("argv", argv, "a list of arguments")
    sample = summary.get("sample")
    if isinstance(sample, dict) and sample.get("rows") is not None:
        c.fields(sample, "sample.", ("rows",), ())
    for i, row in enumerate(c.items(summary, "configs")):
        where = f"configs[{i}]."
        if not _is_text(row.get("label")):
            c.refuse(where + "label", row.get("label"), "a name")
        c.fields(row, where, _CONFIG_NUMBERS, _CONFIG_INTEGERS)
        if row.get("params") is not None and not isinstance(row["params"], dict):
            c.refuse(where + "params", row["params"], "an object")
    for i, key in enumerate(c.items(summary, "keys")):
        where = f"keys[{i}]."
        for k in _KEY_NEEDED:
            if k not in key:
                raise ReportError(f"{file}: damaged: {where}{k} is missing")
        for k in ("config", "entity"):
            if not _is_text(key[k]):
                c.refuse(where + k, key[k], "a name")
        if key["permutation"] is None or key["examples"] is None:
            k = "permutation" if key["permutation"] is None else "examples"
            c.refuse(where + k, None, "a number")
        c.fields(key, where, _KEY_NUMBERS, _KEY_INTEGERS)
