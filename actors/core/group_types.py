"""What goes in and out of the group core: its configuration, the parts of
requests callers pass in, the responses and effects it returns, and the keys
of the timers it asks for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from actors.core.group_metadata import RequestId
from actors.core.offsets_codec import OFFSETS_TOPIC, Record
from wire.errors import ErrorCode

NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""
INT32_MAX = 2**31 - 1

# --- configuration -------------------------------------------------------------

_KAFKA_CONFIG_NAMES = {
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "group.max.size": "group_max_size",
    "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    "offsets.topic.num.partitions": "offsets_topic_num_partitions",
}


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's group coordinator settings (defaults are Kafka's)."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = INT32_MAX
    offset_metadata_max_bytes: int = 4096
    offsets_topic_num_partitions: int = 50
    new_member_join_timeout_ms: int = 300_000

    @classmethod
    def from_kafka_config(cls, config: Mapping[str, object]) -> GroupConfig:
        """Build from a broker config using Kafka's key names; unrelated keys are ignored."""
        kwargs = {
            attr: int(config[name])  # type: ignore[call-overload]
            for name, attr in _KAFKA_CONFIG_NAMES.items()
            if name in config
        }
        return cls(**kwargs)


# --- timers -------------------------------------------------------------------------


class TimerKey(NamedTuple):
    """Names one timer; a plain tuple so the shell can put it in a msgpack message."""

    kind: str
    group_id: str
    member_id: str = ""


def join_timer(group_id: str) -> TimerKey:
    return TimerKey("join", group_id)


def heartbeat_timer(group_id: str, member_id: str) -> TimerKey:
    return TimerKey("heartbeat", group_id, member_id)


def pending_member_timer(group_id: str, member_id: str) -> TimerKey:
    return TimerKey("pending", group_id, member_id)


# --- request parts and responses ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    """One member as the leader sees it in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: ErrorCode
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: tuple[JoinGroupMember, ...] = ()
    """Filled for the leader only (it computes the assignment)."""


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """One member in a LeaveGroup request (v3+ carries a list of them)."""

    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    """``error_code`` is the request-level code; v0-2 answer with the single member's code."""

    error_code: ErrorCode
    members: tuple[LeaveGroupMemberResponse, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    """One partition of an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    partitions: tuple[tuple[str, int, ErrorCode], ...]
    """(topic, partition, error code), in request order."""


@dataclass(frozen=True, slots=True)
class OffsetFetchPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error_code: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error_code: ErrorCode
    partitions: tuple[OffsetFetchPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error_code: ErrorCode
    groups: tuple[GroupOverview, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error_code: ErrorCode
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    """The selected protocol's name (Kafka's field name); empty unless Stable."""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[tuple[str, ErrorCode], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    """The group's error (with one, ``partitions`` is empty) or one code per partition."""

    error_code: ErrorCode
    partitions: tuple[tuple[str, int, ErrorCode], ...] = ()


Response = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | ListGroupsResponse
    | DescribeGroupsResponse
    | DeleteGroupsResponse
    | OffsetDeleteResponse
)


# --- effects ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Respond:
    """Send ``response`` as the answer to the request ``request_id``."""

    request_id: RequestId
    response: Response


@dataclass(frozen=True, slots=True)
class ScheduleTimer:
    """Arm (or re-arm) timer ``key`` for ``deadline_ms``; at it, call ``on_timer(key, now_ms)``."""

    key: TimerKey
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Drop timer ``key`` if armed; firing it anyway would be harmless."""

    key: TimerKey


@dataclass(frozen=True, slots=True)
class AppendRecords:
    """Append ``records`` to ``topic``-``partition``, then call ``on_append_complete``."""

    append_id: int
    partition: int
    records: tuple[Record, ...]
    topic: str = OFFSETS_TOPIC
    # >= 0: a transactional offset commit, written as the producer's transactional batch
    producer_id: int = -1
    producer_epoch: int = -1


Effect = Respond | ScheduleTimer | CancelTimer | AppendRecords
