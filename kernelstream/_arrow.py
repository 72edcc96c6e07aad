"""The seam to pyarrow: ``pa``, ``pq`` and ``pc`` that import ``pyarrow``, ``pyarrow.parquet``
and ``pyarrow.compute`` on first use.

pyarrow takes a tenth of a second and tens of MB to import, and only the runs that read or
write Parquet need it. The modules that do (the replay's outputs and checkpoints, the loop
runner, the report) write ``from kernelstream._arrow import pa, pq`` at their top instead of
``import pyarrow as pa``: importing them stays cheap, so the commands import them at module
level, and ``kernelstream --help``, ``learners`` and ``check`` never load pyarrow
(``tests/engine/replay/test_engine.py``). Type checkers see the real modules.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

__all__ = ["pa", "pc", "pq"]


class _LazyModule:
    """Stands for the module ``name``, imported when one of its attributes is first read."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
else:
    pa = _LazyModule("pyarrow")
    pq = _LazyModule("pyarrow.parquet")
    pc = _LazyModule("pyarrow.compute")
