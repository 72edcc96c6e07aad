"""Dead letters: input the run could not learn, kept as rows with the reason (no Beam).

Every reader and the learner turn what they reject into one row of
``outputs.DEAD_LETTER_SCHEMA`` instead of dropping it or failing the run: a bad line (stage
``parse``), a row the learner refused (``learn``), a block stranded behind a gap in its stream
at the end of input (``order``).
"""

from __future__ import annotations

from typing import Any

DEAD_LETTER_TAG = "dead_letters"  # the output's name (a Beam tag, a directory, a topic)


def dead_letter(source: str, line: int | None, raw: str, reason: str, stage: str = "parse",
                key: str | None = None, position: int | None = None,
                row_id: int | None = None) -> dict[str, Any]:
    """One dead-letter row (the schema of ``outputs.DEAD_LETTER_SCHEMA``)."""
    return {"source": source, "stage": stage, "key": key, "line": line, "position": position,
            "id": row_id, "raw": raw, "reason": reason}
