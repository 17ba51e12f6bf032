"""The two delayed operations of the request path, each with Kafka's completion rule.

``delayed_operation.py`` is the mechanism (the operation base class and the
purgatory that watches and expires operations); this module holds the
operations themselves, Kafka's DelayedProduce and DelayedFetch. Each learns
about the world only through ``observe(key, status)`` (the purgatory passes
the latest status of a watch key) and leaves its answer in ``outcome`` when it
completes or expires:

- :class:`DelayedProduce` (acks=-1), watch keys: its ``(topic, partition)``
  pairs, status: :class:`PartitionStatus`; outcome: :class:`ProduceOutcome`.
- :class:`DelayedFetch`, same keys and status; outcome: :class:`FetchOutcome`
  (which partitions the shell should read again, and why it completed).

Group rebalances and sessions are not purgatory operations here: the group
coordinator core owns its groups and their timers (``group_membership.py``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple, Protocol

from actors.core.delayed_operation import DelayedOperation
from wire.broker_messages import PartitionStatus, SegmentPosition, TopicPartition  # wire rows
from wire.errors import ErrorCode

__all__ = [
    "DelayedFetch",
    "DelayedProduce",
    "FetchOutcome",
    "FetchPartitionStatus",
    "PartitionStatus",
    "ProduceOutcome",
    "ProducePartitionResponse",
    "ProducePartitionStatus",
    "SegmentPosition",
    "TopicPartition",
]


# -- produce ------------------------------------------------------------------


class ProducePartitionStatus(NamedTuple):
    """One partition of a produce request after its local append."""

    required_offset: int  # last appended offset + 1: the HW it waits for
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    # A local append error: the partition is answered with it and not waited on.
    error_code: ErrorCode = ErrorCode.NONE
    # The leader epoch at append time; a leadership begun after it (not the same
    # leader continuing at the next epoch: leader_since_epoch) means the leader moved.
    leader_epoch: int | None = None


class ProducePartitionResponse(NamedTuple):
    error_code: ErrorCode
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int


class ProduceOutcome(NamedTuple):
    responses: dict[TopicPartition, ProducePartitionResponse]
    timed_out: bool


class _Leadership(Protocol):
    @property
    def leader_epoch(self) -> int: ...
    @property
    def leader_since_epoch(self) -> int: ...


def same_leadership(status: _Leadership, appended_epoch: int) -> bool:
    """Whether the leadership that appended at ``appended_epoch`` still holds: the
    current one began at or before it (a controller's ISR change bumps the epoch of a
    leader that stays)."""
    since = status.leader_since_epoch if status.leader_since_epoch >= 0 else status.leader_epoch
    return since <= appended_epoch <= status.leader_epoch


class DelayedProduce(DelayedOperation):
    """An acks=-1 produce waiting for the ISR.

    Per partition, the first matching rule settles it: the partition is not
    led here any more, or its leadership changed since the append (another
    leader led in between; an epoch bump that kept this leader, a controller's
    ISR change, does not count) (NOT_LEADER_OR_FOLLOWER);
    the ISR is smaller than ``min.insync.replicas``
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND, also when the HW got there, as in
    Kafka); the high watermark reached the required offset (NONE). The
    operation completes when every partition is settled; on expiry the
    unsettled ones answer REQUEST_TIMED_OUT.
    """

    __slots__ = ("_pending", "_settled", "partitions")

    def __init__(self, deadline_ms: int, partitions: Mapping[Any, ProducePartitionStatus]) -> None:
        super().__init__(deadline_ms)
        self.partitions: dict[TopicPartition, ProducePartitionStatus] = {
            TopicPartition(*tp): status for tp, status in partitions.items()
        }
        self._settled: dict[TopicPartition, ErrorCode] = {}
        self._pending: set[TopicPartition] = set()
        for tp, status in self.partitions.items():
            if status.error_code != ErrorCode.NONE:
                self._settled[tp] = status.error_code
            else:
                self._pending.add(tp)

    @property
    def watch_keys(self) -> tuple[TopicPartition, ...]:
        """The partitions still waiting (watch the operation under these)."""
        return tuple(tp for tp in self.partitions if tp in self._pending)

    @property
    def pending_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._pending)

    def observe(self, key: Hashable, status: PartitionStatus) -> None:
        if key not in self._pending:
            return
        tp: TopicPartition = key  # type: ignore[assignment]
        wanted = self.partitions[tp]
        if not status.is_leader or (
            wanted.leader_epoch is not None and not same_leadership(status, wanted.leader_epoch)
        ):
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif status.isr_size < status.min_insync_replicas:
            error = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        elif status.high_watermark >= wanted.required_offset:
            error = ErrorCode.NONE
        else:
            return
        self._pending.discard(tp)
        self._settled[tp] = error

    def try_complete(self) -> bool:
        return not self._pending and self.force_complete()

    def on_complete(self) -> None:
        responses: dict[TopicPartition, ProducePartitionResponse] = {}
        for tp, status in self.partitions.items():
            error = self._settled.get(tp, ErrorCode.REQUEST_TIMED_OUT)
            responses[tp] = ProducePartitionResponse(
                error, status.base_offset, status.log_append_time_ms, status.log_start_offset
            )
        self.outcome = ProduceOutcome(responses, self.timed_out)


# -- fetch ----------------------------------------------------------------------


class FetchPartitionStatus(NamedTuple):
    """One partition of a fetch that found too little data."""

    fetch_offset: int
    fetch_position: SegmentPosition  # where fetch_offset sits in the log
    max_bytes: int  # the partition's fetch size: the most it can add to the total
    # The epoch the fetcher believes current; another epoch completes the fetch.
    current_leader_epoch: int | None = None


class FetchOutcome(NamedTuple):
    """What the shell does next: read ``read`` again, answer ``errors`` as they are."""

    read: tuple[TopicPartition, ...]
    errors: dict[TopicPartition, ErrorCode]
    reason: str  # "min_bytes", "leader_moved", "segment_changed" or "timed_out"
    timed_out: bool


class DelayedFetch(DelayedOperation):
    """A fetch waiting for ``min_bytes``, answered with what is there at the latest on expiry.

    The end a fetch may read to is the log end offset for a follower and
    the high watermark for a consumer. Bytes available per partition are
    counted as Kafka does: in the same segment, the position difference
    between the end and the fetch offset (capped at the partition's
    ``max_bytes``); if the end is in a newer segment (the fetch offset left
    the active segment, e.g. a roll) or an older one (truncation), the fetch
    completes at once. It also completes when a partition's leader moved or
    its leader epoch differs from the one the fetcher sent.
    """

    __slots__ = ("_available", "_errors", "_reason", "from_follower", "min_bytes", "partitions")

    def __init__(
        self,
        deadline_ms: int,
        partitions: Mapping[Any, FetchPartitionStatus],
        min_bytes: int,
        from_follower: bool = False,
    ) -> None:
        super().__init__(deadline_ms)
        self.partitions: dict[TopicPartition, FetchPartitionStatus] = {
            TopicPartition(*tp): status for tp, status in partitions.items()
        }
        self.min_bytes = min_bytes
        self.from_follower = from_follower
        self._available: dict[TopicPartition, int] = {}
        self._errors: dict[TopicPartition, ErrorCode] = {}
        self._reason: str | None = None

    @property
    def watch_keys(self) -> tuple[TopicPartition, ...]:
        return tuple(self.partitions)

    @property
    def accumulated_bytes(self) -> int:
        return sum(self._available.values())

    def observe(self, key: Hashable, status: PartitionStatus) -> None:
        wanted = self.partitions.get(key)  # type: ignore[call-overload]
        if wanted is None:
            return
        tp: TopicPartition = key  # type: ignore[assignment]
        if not status.is_leader:
            self._errors[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            self._reason = self._reason or "leader_moved"
            return
        if (
            wanted.current_leader_epoch is not None
            and status.leader_epoch != wanted.current_leader_epoch
        ):
            self._errors[tp] = (
                ErrorCode.FENCED_LEADER_EPOCH
                if wanted.current_leader_epoch < status.leader_epoch
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            )
            self._reason = self._reason or "leader_moved"
            return
        if self.from_follower:
            end_offset, end_position = status.log_end_offset, status.log_end_position
        else:
            end_offset, end_position = status.high_watermark, status.high_watermark_position
        if end_offset == wanted.fetch_offset:
            self._available[tp] = 0
            return
        # Positions are indexed, not named: a plain (base, position) pair or a
        # msgpack-decoded list works as well as a SegmentPosition.
        fetch_segment, fetch_relative = wanted.fetch_position[0], wanted.fetch_position[1]
        if end_position[0] != fetch_segment:
            # Newer segment: the fetch offset left the active one. Older: truncated.
            self._reason = self._reason or "segment_changed"
            return
        if wanted.fetch_offset < end_offset:
            diff = end_position[1] - fetch_relative
            self._available[tp] = max(0, min(diff, wanted.max_bytes))
        else:
            self._available[tp] = 0

    def try_complete(self) -> bool:
        if self._reason is None:
            if sum(self._available.values()) < self.min_bytes:
                return False
            self._reason = "min_bytes"
        return self.force_complete()

    def on_complete(self) -> None:
        reason = "timed_out" if self.timed_out else (self._reason or "min_bytes")
        read = tuple(tp for tp in self.partitions if tp not in self._errors)
        self.outcome = FetchOutcome(read, dict(self._errors), reason, self.timed_out)
