"""Resume offsets against a Kafka partition's log: :class:`OffsetOutOfLog` and
:func:`check_offsets`; the log changing under a running or resumed stream:
:class:`LogChanged`, and the :class:`Fingerprint` of the last record read that detects it.

Kept apart from the snapshot store because the Kafka readers (``kernelstream.kafka_client``,
``transforms.live.kafka_read``) raise and check the same error without needing the store: a
committed offset outside the log's range fails loudly instead of silently skipping or
re-reading records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, NamedTuple


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



class LogChanged(ValueError):  # noqa: N818 (the reader's error, like OffsetOutOfLog)
    """A partition's log no longer holds what the stream read from it: the broker came back
    without its data (its high watermark fell below the position already read), or the topic
    was deleted and recreated (the record a snapshot last read from it is not there any
    more). Its message is one line; the CLI exits 2 on it."""

    def __init__(self, topic: str, partition: int, why: str) -> None:
        self.topic, self.partition = topic, partition
        super().__init__(f"{topic}/{partition}: {why}; the records read before are gone from "
                         "the broker, so this run cannot continue from them (start over with a "
                         "new --checkpoint directory, or restore the topic)")


class Fingerprint(NamedTuple):
    """The last record read from a partition, as a snapshot keeps it: its offset, Kafka
    timestamp and a 64-bit BLAKE2b digest of its key and value (hex). At a resume the record
    at ``offset`` must still have the same timestamp and digest, else the topic was recreated
    (:func:`fingerprint_mismatch`)."""

    offset: int
    timestamp_ms: int
    digest: str

    def as_doc(self) -> dict[str, Any]:
        return {"offset": self.offset, "timestamp_ms": self.timestamp_ms,
                "digest": self.digest}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Fingerprint:
        return cls(int(doc["offset"]), int(doc["timestamp_ms"]), str(doc["digest"]))


def record_digest(key: bytes | None, value: bytes | None) -> str:
    """A record's key and value as 16 hex digits (a missing key or value differs from an
    empty one)."""
    h = hashlib.blake2b(digest_size=8)
    for part in (key, value):
        if part is None:
            h.update(b"\xff")
        else:
            h.update(b"\x00" + len(part).to_bytes(8, "big"))
            h.update(part)
    return h.hexdigest()


def fingerprint(offset: int, timestamp_ms: int, key: bytes | None,
                value: bytes | None) -> Fingerprint:
    return Fingerprint(int(offset), int(timestamp_ms), record_digest(key, value))


def fingerprint_mismatch(topic: str, partition: int, want: Fingerprint, offset: int,
                         timestamp_ms: int, key: bytes | None,
                         value: bytes | None) -> LogChanged | None:
    """:class:`LogChanged` when the record found at ``want.offset`` (``offset`` etc.) is not
    the one a snapshot last read there; None when it is."""
    got = fingerprint(offset, timestamp_ms, key, value)
    if got == want:
        return None
    return LogChanged(topic, partition,
                      f"the record at offset {want.offset} is not the one this checkpoint "
                      f"read there (timestamp {timestamp_ms} digest {got.digest}, was "
                      f"{want.timestamp_ms} {want.digest}): the topic was recreated")
