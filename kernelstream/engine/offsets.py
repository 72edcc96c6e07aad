"""Resume offsets against a Kafka partition's log: :class:`OffsetOutOfLog` and
:func:`check_offsets`.

Kept apart from the snapshot store because the Kafka readers (``kernelstream.kafka_client``,
``transforms.kafka_read``) raise and check the same error without needing the store: a
committed offset outside the log's range fails loudly instead of silently skipping or
re-reading records.
"""

from __future__ import annotations

from collections.abc import Mapping


class OffsetOutOfLog(ValueError):  # noqa: N818 (shared with the Kafka reader)
    """A resume offset lies outside the partition's log (see :func:`check_offsets`)."""

    def __init__(self, topic: str, partition: int, offset: int, beginning: int | None,
                 end: int | None) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.beginning, self.end = beginning, end
        where = f"cannot resume {topic}/{partition} at offset {offset}"
        if beginning is None or end is None:
            why = f"the topic has no partition {partition} now (was it recreated?)"
        elif offset < beginning:
            why = (f"its log now runs from offset {beginning} to {end}, so records this "
                   "checkpoint has not read were deleted (retention, or the topic was recreated)")
        else:
            why = (f"its log now runs from offset {beginning} to {end}, so the topic was "
                   "recreated or truncated since the checkpoint")
        super().__init__(f"{where}: {why}; start over with a new --checkpoint directory")


def check_offsets(committed: Mapping[tuple[str, int], int],
                  beginning: Mapping[tuple[str, int], int],
                  end: Mapping[tuple[str, int], int]) -> None:
    """Refuse to resume where the log no longer matches the checkpoint: raise
    :class:`OffsetOutOfLog` (one line) for the first ``(topic, partition)`` whose committed
    next offset is below the log's ``beginning`` (records were deleted unread) or above its
    ``end`` (the topic was recreated or truncated), or that no longer exists.

    ``end`` is the offset after the last record (where the next record will be written).
    Brokers that report it too low (tansu) must not fail a valid resume: the reader passes
    ``max(reported end, highest offset seen + 1)``. Partitions in the log but not in
    ``committed`` (new ones) are not checked: they are read from their beginning."""
    for (topic, partition), offset in sorted(committed.items()):
        tp = (topic, partition)
        lo, hi = beginning.get(tp), end.get(tp)
        if lo is None or hi is None or not lo <= offset <= hi:
            raise OffsetOutOfLog(topic, partition, offset, lo, hi)

