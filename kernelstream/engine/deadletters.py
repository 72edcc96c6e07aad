"""Dead letters: input the run could not learn, kept as rows with the reason (no Beam).

Every reader and the learner turn what they reject into one row of
``outputs.DEAD_LETTER_SCHEMA`` instead of dropping it or failing the run: a bad line (stage
``parse``), a row the learner refused (``learn``), a block stranded behind a gap in its stream
at the end of input (``order``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from kernelstream.data.errors import reason_kind

DEAD_LETTER_TAG = "dead_letters"  # the output's name (a Beam tag, a directory, a topic)


def dead_letter(source: str, line: int | None, raw: str, reason: str, stage: str = "parse",
                key: str | None = None, position: int | None = None,
                row_id: int | None = None) -> dict[str, Any]:
    """One dead-letter row (the schema of ``outputs.DEAD_LETTER_SCHEMA``)."""
    return {"source": source, "stage": stage, "key": key, "line": line, "position": position,
            "id": row_id, "raw": raw, "reason": reason}


# the reason of a row whose label is neither class of a binary map (``data.labels.LabelMap``)
_THIRD_LABEL = re.compile(r"unknown label (.+?) \(expected .+ or .+\)$")


def reasons_summary(reasons: Iterable[tuple[str, int]], most: int = 3) -> str:
    """The dead letters' reasons ``(reason, count)`` as one phrase, most frequent kind first
    (``data.errors.reason_kind``; at most ``most`` kinds): ``"2 with a third label 'x'
    (binary classification takes two labels)"``, ``"5 non-numeric value, 1 empty line"``."""
    kinds: Counter[str] = Counter()
    third: dict[str, None] = {}  # the third labels, in order of appearance
    for reason, n in reasons:
        m = _THIRD_LABEL.match(reason)
        if m is not None:
            third.setdefault(m.group(1), None)
            kinds[""] += n
        else:
            kinds[reason_kind(reason)] += n
    parts = []
    for kind, n in kinds.most_common(most):
        if kind:
            parts.append(f"{n} {kind}")
            continue
        shown = ", ".join(list(third)[:3]) + (", ..." if len(third) > 3 else "")
        what = (f"a third label {shown}" if len(third) == 1
                else f"labels beyond the first two: {shown}")
        parts.append(f"{n} with {what} (binary classification takes two labels)")
    return ", ".join(parts) + (", ..." if len(kinds) > most else "")
