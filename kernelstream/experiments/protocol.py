"""What a reproduction is given and what it returns (shared by the papers' modules)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelstream.experiments.grid import Context


class ProtocolError(ValueError):
    """A reproduction cannot run as asked (a missing tuned file, an unknown table or data
    set); the command reports it in one line."""


@dataclass
class Options:
    """A ``kernelstream reproduce`` run of one paper's tables.

    ``ctx`` says how the grid runs (its ``permutations`` is the table's R: the protocol's
    default unless ``-R`` was given); ``datasets`` and ``tables`` restrict the run (None: all).
    """

    ctx: Context
    out_dir: Path
    tuned_dir: Path
    datasets: list[str] | None = None
    tables: list[str] | None = None

    def tuned_file(self, name: str) -> Path:
        path = self.tuned_dir / name
        if not path.exists():
            raise ProtocolError(f"{path} not found: give --tuned-dir (the directory of the "
                                "committed tuned files, benchmarks/ in a checkout)")
        return path

    def pick(self, allowed: tuple[str, ...], what: str = "data set") -> list[str]:
        """The protocol's data sets (or tables) this run covers, in the protocol's order."""
        given = self.datasets if what == "data set" else self.tables
        if given is None:
            return list(allowed)
        return [d for d in allowed if d in given]


@dataclass(frozen=True)
class Outcome:
    """A reproduction's verdicts: ``passed`` of ``judged`` cells, and where it wrote."""

    name: str
    passed: int
    judged: int
    wall_seconds: float
    files: tuple[Path, ...]
