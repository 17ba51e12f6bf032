"""A purgatory shard's bookkeeping as a state machine: events in, effects out, no actor.

The PurgatoryShard actor (``actors/purgatory.py``) holds the delayed produces
and fetches of its partitions. This core decides everything about them; the
shell turns each message into an event, calls ``handle(event, now_ms)`` and
performs the effects that come back, in their order:

- events: :class:`FetchWaits` (a fetch found less than ``min_bytes``),
  :class:`ProduceWaits` (an acks=-1 append waits for the high watermark),
  :class:`PartitionUpdated` (a partition shard's latest status of a watched
  partition), :class:`ExpiryDue` (the Timer says an operation's deadline passed);
- effects: :class:`ScheduleExpiry` / :class:`CancelExpiry` (to the Timer),
  :class:`WatchStatus` / :class:`UnwatchStatus` (to a partition's shard),
  :class:`AnswerFetch` / :class:`AnswerProduce` (to the requester).

What it guarantees (tests/core/test_purgatory_core.py checks each):

- every operation is answered exactly once: at once, on completion, or on
  expiry; an expiry that crosses the completion (the Timer sent it before
  the Cancel arrived) or that names an unknown operation changes nothing;
- a partition is watched (its shard reports every change) while at least
  one waiting operation needs it, and unwatched when the last one is answered;
  every new wait asks for a fresh status, so nothing appended between the
  requester's read and the wait is missed;
- completed operations linger in watcher lists for at most
  ``purge_interval_requests`` operations (Kafka's purge trigger).

An event the core does not know raises :class:`UnknownPurgatoryEvent` and
changes nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from actors.core.delayed_operation import DelayedOperation, DelayedOperationPurgatory
from actors.core.delayed_produce_fetch import (
    DelayedFetch,
    DelayedProduce,
    FetchOutcome,
    FetchPartitionStatus,
    PartitionStatus,
    ProduceOutcome,
    ProducePartitionStatus,
    TopicPartition,
)

__all__ = [
    "AnswerFetch",
    "AnswerProduce",
    "CancelExpiry",
    "Effect",
    "Event",
    "ExpiryDue",
    "FetchWaits",
    "PartitionUpdated",
    "ProduceWaits",
    "PurgatoryCore",
    "PurgatoryStats",
    "ScheduleExpiry",
    "UnknownPurgatoryEvent",
    "UnwatchStatus",
    "WatchStatus",
]


# --------------------------------------------------------------------- events
# NamedTuples, as in kafka_connection: immutable and cheap, built once per request.
class FetchWaits(NamedTuple):
    """A fetch found less than ``min_bytes``: answer it when it can complete."""

    requester: object  # where the answer goes (the shell's address of the handler)
    req_id: int
    min_bytes: int
    max_wait_ms: int  # from now; negative counts as 0
    from_follower: bool
    partitions: dict[TopicPartition, FetchPartitionStatus]


class ProduceWaits(NamedTuple):
    """An acks=-1 append waits for the high watermark (rows with an error are settled)."""

    requester: object
    req_id: int
    timeout_ms: int  # from now; negative counts as 0
    partitions: dict[TopicPartition, ProducePartitionStatus]


class PartitionUpdated(NamedTuple):
    """A partition shard's latest status of one partition (watched or not)."""

    status: PartitionStatus


class ExpiryDue(NamedTuple):
    """The Timer reports the deadline of operation ``op_id`` passed."""

    op_id: int


Event = FetchWaits | ProduceWaits | PartitionUpdated | ExpiryDue


# -------------------------------------------------------------------- effects
class ScheduleExpiry(NamedTuple):
    """Ask the Timer for ``ExpiryDue(op_id)`` at ``deadline_ms`` (monotonic)."""

    op_id: int
    deadline_ms: int


class CancelExpiry(NamedTuple):
    """The operation was answered: the Timer may forget it."""

    op_id: int


class WatchStatus(NamedTuple):
    """Ask the partition's shard for its status now, and at every change from now on.

    ``seen_log_end_offset`` is what the requester last read (-1: nothing)."""

    partition: TopicPartition
    seen_log_end_offset: int


class UnwatchStatus(NamedTuple):
    """No waiting operation needs this partition any more."""

    partition: TopicPartition


class AnswerFetch(NamedTuple):
    requester: object
    req_id: int
    outcome: FetchOutcome


class AnswerProduce(NamedTuple):
    requester: object
    req_id: int
    outcome: ProduceOutcome


Effect = ScheduleExpiry | CancelExpiry | WatchStatus | UnwatchStatus | AnswerFetch | AnswerProduce


class PurgatoryStats(NamedTuple):
    waiting: int  # operations watched and not answered yet
    watched_partitions: int  # partitions some waiting operation needs
    watched_keys: int  # keys with a non-empty watcher list (completed entries included)
    expirations: int  # operations answered by their deadline


class UnknownPurgatoryEvent(TypeError):
    """``handle`` got something that is not one of the core's events."""

    def __init__(self, event: object) -> None:
        super().__init__(f"not a purgatory event: {type(event).__name__}")


class _Waiting(NamedTuple):
    op: DelayedOperation
    requester: object
    req_id: int
    keys: tuple[TopicPartition, ...]


# ------------------------------------------------------------------ the machine
class PurgatoryCore:
    """The delayed operations of one purgatory shard, their watches and their timers."""

    __slots__ = ("_id_of", "_next_op_id", "_waiting", "_watch_count", "expirations", "purgatory")

    def __init__(self, name: str = "", purge_interval_requests: int = 1000) -> None:
        # Waiting operations are not durable, in Kafka either: after a restart the
        # clients' requests time out and are retried.
        self.purgatory = DelayedOperationPurgatory(name, purge_interval_requests)
        self._waiting: dict[int, _Waiting] = {}
        self._id_of: dict[DelayedOperation, int] = {}
        self._watch_count: dict[TopicPartition, int] = {}
        self._next_op_id = 1
        self.expirations = 0

    # -- queries -----------------------------------------------------------------
    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def watch_counts(self) -> dict[TopicPartition, int]:
        """Waiting operations per partition (every partition here is watched)."""
        return dict(self._watch_count)

    def waiting_by_kind(self) -> dict[str, int]:
        """Operations waiting, by kind: ``produce`` and ``fetch`` (Kafka's purgatory size)."""
        kinds = {"produce": 0, "fetch": 0}
        for waiting in self._waiting.values():
            kinds["fetch" if isinstance(waiting.op, DelayedFetch) else "produce"] += 1
        return kinds

    def stats(self) -> PurgatoryStats:
        return PurgatoryStats(len(self._waiting), len(self._watch_count),
                              self.purgatory.watched_keys, self.expirations)

    # -- the one entry point -------------------------------------------------------
    def handle(self, event: Event, now_ms: int) -> list[Effect]:
        if isinstance(event, PartitionUpdated):
            return self._updated(event.status)
        if isinstance(event, ExpiryDue):
            return self._expired(event.op_id)
        if isinstance(event, FetchWaits):
            fetch = DelayedFetch(now_ms + max(0, event.max_wait_ms), event.partitions,
                                 event.min_bytes, event.from_follower)
            seen = {tp: status.fetch_offset for tp, status in fetch.partitions.items()}
            return self._wait(fetch, event.requester, event.req_id, fetch.watch_keys, seen)
        if isinstance(event, ProduceWaits):
            produce = DelayedProduce(now_ms + max(0, event.timeout_ms), event.partitions)
            return self._wait(produce, event.requester, event.req_id, produce.watch_keys, {})
        raise UnknownPurgatoryEvent(event)

    # -- events ----------------------------------------------------------------------
    def _wait(self, op: DelayedOperation, requester: object, req_id: int,
              keys: tuple[TopicPartition, ...], seen: dict[TopicPartition, int]) -> list[Effect]:
        if not keys:  # nothing to wait for (every row settled, or no partition): answer now
            op.force_complete()
            return [_answer(op, requester, req_id)]
        if self.purgatory.try_complete_else_watch(op, keys):
            return [_answer(op, requester, req_id)]
        op_id = self._next_op_id
        self._next_op_id += 1
        self._waiting[op_id] = _Waiting(op, requester, req_id, keys)
        self._id_of[op] = op_id
        effects: list[Effect] = [ScheduleExpiry(op_id, op.deadline_ms)]
        counts = self._watch_count
        for tp in keys:
            counts[tp] = counts.get(tp, 0) + 1
            # Every new wait asks for a fresh status; the shard answers at once.
            effects.append(WatchStatus(tp, seen.get(tp, -1)))
        return effects

    def _updated(self, status: PartitionStatus) -> list[Effect]:
        effects: list[Effect] = []
        for op in self.purgatory.check_and_complete(status.key, status):
            op_id = self._id_of.pop(op)
            waiting = self._waiting.pop(op_id)
            effects.append(CancelExpiry(op_id))
            self._release(waiting.keys, effects)
            effects.append(_answer(op, waiting.requester, waiting.req_id))
        return effects

    def _expired(self, op_id: int) -> list[Effect]:
        waiting = self._waiting.pop(op_id, None)
        if waiting is None:
            return []  # answered first: the expiry lost the race
        self._id_of.pop(waiting.op, None)
        effects: list[Effect] = []
        self._release(waiting.keys, effects)
        if self.purgatory.expire(waiting.op):
            self.expirations += 1
            effects.append(_answer(waiting.op, waiting.requester, waiting.req_id))
        return effects

    def _release(self, keys: tuple[TopicPartition, ...], effects: list[Effect]) -> None:
        counts = self._watch_count
        for tp in keys:
            left = counts[tp] - 1
            if left:
                counts[tp] = left
            else:
                del counts[tp]
                effects.append(UnwatchStatus(tp))


def _answer(op: DelayedOperation, requester: object, req_id: int) -> AnswerFetch | AnswerProduce:
    if isinstance(op, DelayedFetch):
        return AnswerFetch(requester, req_id, op.outcome)
    return AnswerProduce(requester, req_id, op.outcome)
