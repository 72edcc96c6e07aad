"""The restriction of the stream's Kafka reader (:mod:`kernelstream.transforms.live.kafka_read`):
the next offset of each partition of a partition group, its tracker (claims of
``(partition index, next offset)``, checkpoints only), its JSON coder, and the providers the
splittable DoFn declares for its restriction and watermark estimator.

Kept apart from the DoFn because it is the reader's position bookkeeping only: what a
checkpoint splits and a runner persists, without the consumer or the merge.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from apache_beam.coders import coders
from apache_beam.io.iobase import RestrictionProgress, RestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.transforms.core import RestrictionProvider, WatermarkEstimatorProvider
from apache_beam.utils.timestamp import Timestamp

from kernelstream.kafka_client.partitions import PartitionGroup


class GroupRestriction(NamedTuple):
    """The next offset of each partition of a group (in the group's topic order) and the
    offsets to stop before (None: an open end)."""

    start: tuple[int, ...]
    stop: tuple[int, ...] | None = None

    def done(self) -> bool:
        return self.stop is not None and all(a >= b for a, b in zip(self.start, self.stop,
                                                                     strict=True))


FINISH = None  # the claim that ends a restriction at the positions claimed so far (drain)


class GroupTracker(RestrictionTracker):
    """Tracks a :class:`GroupRestriction`. Claims are ``(partition index, next offset)``
    (everything below ``next offset`` is claimed) or :data:`FINISH`."""

    def __init__(self, restriction: GroupRestriction) -> None:
        self._start = tuple(restriction.start)
        self._stop = None if restriction.stop is None else tuple(restriction.stop)
        self._claimed = list(self._start)

    def current_restriction(self) -> GroupRestriction:
        return GroupRestriction(self._start, self._stop)

    def claimed(self) -> tuple[int, ...]:
        return tuple(self._claimed)

    def try_claim(self, position: tuple[int, int] | None) -> bool:
        if position is FINISH:
            self._stop = tuple(self._claimed)  # nothing left: check_done passes, no residual
            return False
        i, nxt = position
        if self._stop is not None and nxt > self._stop[i]:
            return False
        if nxt < self._claimed[i]:
            raise ValueError(f"claim of partition index {i} goes back from {self._claimed[i]} "
                             f"to {nxt}")
        self._claimed[i] = nxt
        return True

    def try_split(self, fraction_of_remainder: float
                  ) -> tuple[GroupRestriction, GroupRestriction] | None:
        # Only checkpoints (fraction 0): an open range has no fraction to split at, and the
        # records of a group must stay in one restriction to keep their merge order.
        if fraction_of_remainder != 0:
            return None
        claimed = tuple(self._claimed)
        residual = GroupRestriction(claimed, self._stop)
        if residual.done():
            return None
        self._stop = claimed
        return GroupRestriction(self._start, claimed), residual

    def check_done(self) -> None:
        if not GroupRestriction(tuple(self._claimed), self._stop).done():
            raise ValueError(f"restriction {self.current_restriction()} is not done: claimed "
                             f"up to {tuple(self._claimed)}")

    def current_progress(self) -> RestrictionProgress:
        completed = sum(c - s for c, s in zip(self._claimed, self._start, strict=True))
        if self._stop is None:
            return RestrictionProgress(completed=float(completed), remaining=1.0)
        remaining = sum(max(0, b - c) for c, b in zip(self._claimed, self._stop, strict=True))
        return RestrictionProgress(completed=float(completed), remaining=float(remaining))

    def is_bounded(self) -> bool:
        return self._stop is not None


class GroupRestrictionCoder(coders.Coder):
    """A :class:`GroupRestriction` as JSON (no pickle: a runner may persist it)."""

    def encode(self, value: GroupRestriction) -> bytes:
        stop = None if value.stop is None else list(value.stop)
        return json.dumps([list(value.start), stop], separators=(",", ":")).encode()

    def decode(self, encoded: bytes) -> GroupRestriction:
        start, stop = json.loads(encoded)
        return GroupRestriction(tuple(start), None if stop is None else tuple(stop))

    def is_deterministic(self) -> bool:
        return True


class GroupRestrictions(RestrictionProvider):
    def initial_restriction(self, element: PartitionGroup) -> GroupRestriction:
        return GroupRestriction(tuple(element.start), element.stop)

    def create_tracker(self, restriction: GroupRestriction) -> GroupTracker:
        return GroupTracker(restriction)

    def restriction_size(self, element: PartitionGroup, restriction: GroupRestriction) -> float:
        if restriction.stop is None:
            return 1.0
        return float(sum(max(0, b - a) for a, b in zip(restriction.start, restriction.stop,
                                                       strict=True)))

    def restriction_coder(self) -> coders.Coder:
        return GroupRestrictionCoder()


class GroupWatermarks(WatermarkEstimatorProvider):
    def initial_estimator_state(self, element: Any, restriction: Any) -> Timestamp | None:
        return None

    def create_watermark_estimator(self, estimator_state: Timestamp | None
                                   ) -> ManualWatermarkEstimator:
        return ManualWatermarkEstimator(estimator_state)

    def estimator_state_coder(self) -> coders.Coder:
        return coders.NullableCoder(coders.TimestampCoder())
