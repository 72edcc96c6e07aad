"""Records of a message source (a Kafka partition), as the engine sees them."""

from __future__ import annotations

from typing import NamedTuple


class SourceRecord(NamedTuple):
    """One message: where it came from (``topic``, ``partition``, ``offset``), its timestamp in
    milliseconds since the epoch (Kafka's record timestamp), and its raw key and value."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None

    @property
    def source(self) -> str:
        """Dead-letter ``source`` of this record: ``TOPIC/PARTITION``."""
        return f"{self.topic}/{self.partition}"
