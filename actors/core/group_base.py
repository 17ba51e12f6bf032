"""The state every part of the group core shares: the groups, the writes in flight."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from actors.core.group_metadata import (
    GroupMetadata,
    MemberMetadata,
    OffsetAndMetadata,
    RequestId,
    TopicPartition,
)
from actors.core.group_types import (
    AppendRecords,
    Effect,
    GroupConfig,
    Respond,
    Response,
    ScheduleTimer,
    heartbeat_timer,
)
from actors.core.offsets_codec import Record, partition_for
from wire.errors import ErrorCode

# --- pending appends -------------------------------------------------------------


@dataclass(slots=True)
class _PendingCommit:
    request_id: RequestId
    group: GroupMetadata
    order: list[tuple[str, int, ErrorCode]]
    offsets: dict[TopicPartition, OffsetAndMetadata]


@dataclass(slots=True)
class _PendingTxnCommit:
    request_id: RequestId
    group: GroupMetadata
    producer_id: int
    order: list[tuple[str, int, ErrorCode]]
    offsets: dict[TopicPartition, OffsetAndMetadata]


@dataclass(slots=True)
class _PendingSync:
    group: GroupMetadata
    generation_id: int
    assignment: dict[str, bytes]


@dataclass(slots=True)
class _PendingStaticRejoin:
    request_id: RequestId
    group: GroupMetadata
    member_id: str
    generation_id: int
    leader_id: str


@dataclass(slots=True)
class _NoWaiter:
    """A write nobody waits for (empty-group metadata, tombstones)."""


_Pending = _PendingCommit | _PendingTxnCommit | _PendingSync | _PendingStaticRejoin | _NoWaiter

_GROUP_STORE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}

_OFFSET_STORE_ERRORS = {
    **_GROUP_STORE_ERRORS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def _default_member_id_factory(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupCoreBase:
    """The groups of one coordinator shard and the appends in flight; the helpers all parts use.

    ``member_id_factory(prefix)`` makes new member ids; Kafka's form is
    ``prefix + "-" + uuid`` where prefix is the group.instance.id of a static
    member, else the client id. Tests pass a deterministic one.
    """

    __slots__ = (
        "_deletions_done",
        "_group_partition",
        "_groups",
        "_index_count",
        "_next_append_id",
        "_partition_groups",
        "_pending_appends",
        "_txn_offsets",
        "config",
        "member_id_factory",
        "skipped_records",
    )

    def __init__(
        self,
        config: GroupConfig | None = None,
        member_id_factory: Callable[[str], str] = _default_member_id_factory,
    ) -> None:
        self.config = config if config is not None else GroupConfig()
        self.member_id_factory = member_id_factory
        self._groups: dict[str, GroupMetadata] = {}
        # the held groups by __consumer_offsets partition, both ways, under _index_count
        # partitions: an unload (and an append) finds them without hashing every group
        # id (Java's String.hashCode in Python, some us an id: an unload of one
        # partition hashed them all, 77 ms for 20,000 groups here)
        self._group_partition: dict[str, int] = {}
        self._partition_groups: dict[int, set[str]] = {}
        self._index_count = self.config.offsets_topic_num_partitions
        self._pending_appends: dict[int, _Pending] = {}
        # producer id -> group -> offsets written in its open transaction (visible at commit)
        self._txn_offsets: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        self._next_append_id = 0
        # a cluster's completed topic deletions (name, id) already applied (a resend of
        # one never takes a namesake's offsets), oldest first, the last
        # DELETIONS_REMEMBERED of them (a resend comes within seconds, not thousands of
        # deletions later)
        self._deletions_done: dict[tuple[str, str], None] = {}
        self.skipped_records = 0
        """Records :meth:`load` ignored because their key version is unknown to us."""

    # --- read-only access -------------------------------------------------

    def group(self, group_id: str) -> GroupMetadata | None:
        """The group's model, for inspection (do not mutate it from outside)."""
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def group_count(self) -> int:
        return len(self._groups)

    def partition_for(self, group_id: str) -> int:
        count = self.config.offsets_topic_num_partitions
        if count != self._index_count:
            self._reindex(count)
        p = self._group_partition.get(group_id)
        return partition_for(group_id, count) if p is None else p

    def _reindex(self, count: int) -> None:
        """The partition count changed (the shell replaces ``config``): the index anew."""
        self._index_count = count
        self._group_partition = {}
        self._partition_groups = {}
        for gid in self._groups:
            self._index(gid)

    def _index(self, group_id: str) -> None:
        p = partition_for(group_id, self._index_count)
        self._group_partition[group_id] = p
        self._partition_groups.setdefault(p, set()).add(group_id)

    def _hold(self, group: GroupMetadata) -> None:
        """``group`` is held (replacing one of its id)."""
        gid = group.group_id
        if self.config.offsets_topic_num_partitions != self._index_count:
            self._reindex(self.config.offsets_topic_num_partitions)
        if gid not in self._group_partition:
            self._index(gid)
        self._groups[gid] = group

    def _release(self, group_id: str) -> GroupMetadata | None:
        """``group_id``'s group is no longer held: it, if it was."""
        group = self._groups.pop(group_id, None)
        p = self._group_partition.pop(group_id, None)
        if p is not None:
            held = self._partition_groups[p]
            held.discard(group_id)
            if not held:
                del self._partition_groups[p]
        return group

    def groups_in(self, partitions: Collection[int]) -> list[str]:
        """The ids of the groups held of these ``__consumer_offsets`` partitions."""
        if self.config.offsets_topic_num_partitions != self._index_count:
            self._reindex(self.config.offsets_topic_num_partitions)
        return [g for p in partitions for g in self._partition_groups.get(p, ())]

    def groups_of(self, partitions: Collection[int] | None) -> Iterable[GroupMetadata]:
        """The groups held of these ``__consumer_offsets`` partitions (None: every group),
        through the index by partition, not a look at every group held."""
        if partitions is None:
            return self._groups.values()
        return [self._groups[g] for g in self.groups_in(partitions)]

    def snapshot(self) -> tuple[object, ...]:
        """Every group's observable state plus the writes in flight (for refusal tests)."""
        return (
            tuple(sorted((gid, g.snapshot()) for gid, g in self._groups.items())),
            tuple(sorted(self._pending_appends)),
            self._next_append_id,
        )

    # --- helpers ----------------------------------------------------------

    def _append(self, group: GroupMetadata, records: tuple[Record, ...], fx: list[Effect],
                producer: tuple[int, int] = (-1, -1)) -> int:
        return self._append_to(self.partition_for(group.group_id), records, fx, producer)

    def _append_to(self, partition: int, records: tuple[Record, ...], fx: list[Effect],
                   producer: tuple[int, int] = (-1, -1)) -> int:
        append_id = self._next_append_id
        self._next_append_id += 1
        self._pending_appends[append_id] = _NoWaiter()
        fx.append(AppendRecords(append_id, partition, records,
                                producer_id=producer[0], producer_epoch=producer[1]))
        return append_id

    @staticmethod
    def _respond(fx: list[Effect], request_id: RequestId, response: Response) -> list[Effect]:
        fx.append(Respond(request_id, response))
        return fx

    def _reset_heartbeat(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        now_ms: int,
        timeout_ms: int,
        fx: list[Effect],
    ) -> None:
        member.heartbeat_deadline_ms = now_ms + timeout_ms
        if (
            member.timer_deadline_ms is None
            or member.timer_deadline_ms > member.heartbeat_deadline_ms
        ):
            member.timer_deadline_ms = member.heartbeat_deadline_ms
            fx.append(
                ScheduleTimer(
                    heartbeat_timer(group.group_id, member.member_id), member.heartbeat_deadline_ms
                )
            )
