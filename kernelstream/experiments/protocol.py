"""What a reproduction is given and what it returns (shared by the papers' modules)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelstream.errors import ProtocolError
from kernelstream.experiments.grid import Context

# The committed tuned parameters (package data: ``tuned_params*.json``, ``tuned_p*.json``),
# written by ``kernelstream reproduce PAPER --retune`` (:mod:`kernelstream.experiments.retune`)
TUNED_DIR = Path(__file__).resolve().parent / "tuned"

# paper -> module of kernelstream.experiments, in the order ``reproduce all`` runs them; each
# writes PAPER.md and PAPER.json
PAPERS = {"baselines": "baselines", "p0": "p0", "p1": "p1", "p2": "p2", "p3": "p3", "p4": "p4"}

# Which cells a paper's verdict counts: ``judged(key, cell)``, ``key`` the list of PAPER.json
# holding the cell ("cells", "table_p3_3", ...). Each paper module defines it; its markdown,
# its Outcome and ``kernelstream report`` all count with it.
Judged = Callable[[str, dict[str, Any]], bool]


def judged_rule(paper: str) -> Judged | None:
    """The ``judged`` rule of a paper's results (None: not a paper of :data:`PAPERS`)."""
    if paper not in PAPERS:
        return None
    module = importlib.import_module(f"kernelstream.experiments.{PAPERS[paper]}")
    rule: Judged = module.judged
    return rule


@dataclass
class Options:
    """A ``kernelstream reproduce`` run of one paper's tables.

    ``ctx`` says how the grid runs (its ``permutations`` is the table's R: the protocol's
    default unless ``-R`` was given); ``datasets`` and ``tables`` restrict the run (None: all).
    The tuned files are read from ``tuned_dir`` (None: the package's :data:`TUNED_DIR`),
    except those this run retuned (``retuned``: name → the file written in ``out_dir``).
    """

    ctx: Context
    out_dir: Path
    tuned_dir: Path | None = None
    datasets: list[str] | None = None
    tables: list[str] | None = None
    retuned: dict[str, Path] = field(default_factory=dict)

    def tuned_file(self, name: str) -> Path:
        if name in self.retuned:
            return self.retuned[name]
        path = (self.tuned_dir or TUNED_DIR) / name
        if not path.exists():
            raise ProtocolError(f"{path} not found" + (
                "" if self.tuned_dir is None else " in --tuned-dir") + " (the tuned "
                "parameters; `kernelstream reproduce PAPER --retune` writes them)")
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
