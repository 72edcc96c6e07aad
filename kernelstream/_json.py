"""JSON helpers shared by the run summary and the Kafka sink."""

from __future__ import annotations

import math
from typing import Any


def json_safe(v: Any) -> Any:
    """``v`` with every NaN/±inf float replaced by ``None`` (recursively through dicts, lists
    and tuples): they are not JSON, and a reader should get ``null`` rather than a file or
    message it cannot parse."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [json_safe(x) for x in v]
    return v
