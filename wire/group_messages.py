"""Messages between the request handlers and the GroupCoordinator actors (ids 300-399).

A handler sends one request message to ``topology.coordinator_for(group_id)``
and gets exactly one ``*Done`` back with the same ``req_id`` (the first field
of every answer, which is how the handler matches it). The answer may come
much later: a JoinGroup is answered when the rebalance completes, a SyncGroup
when the leader's assignment is written, an OffsetCommit when its records are
in ``__consumer_offsets``.

Error codes are ``wire.errors.ErrorCode`` values as plain ints. Per-member and
per-partition data travel as ``NamedTuple`` rows, declared field by field just
above the message that carries them (on the wire, arrays; see wire/registry.py).
"""

from __future__ import annotations

from typing import NamedTuple

from wire.broker_messages import TopicPartition
from wire.registry import message

# ------------------------------------------------------------------ requests


class JoinProtocolRow(NamedTuple):
    """One protocol a joining member supports (JoinGroupRequestProtocol)."""

    name: str
    metadata: bytes


@message(300)
class JoinGroup(NamedTuple):
    """Handler -> coordinator. ``protocols`` in the member's order of preference.

    ``rebalance_timeout_ms`` is -1 for JoinGroup v0 (the session timeout is
    used); ``require_known_member_id`` is True from v4 (MEMBER_ID_REQUIRED).
    """

    req_id: int
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: list[JoinProtocolRow]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    require_known_member_id: bool


@message(301)
class SyncGroup(NamedTuple):
    """Handler -> coordinator. assignments: {member_id: assignment bytes} (leader only)."""

    req_id: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]


@message(302)
class Heartbeat(NamedTuple):
    req_id: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


class LeaveMemberRow(NamedTuple):
    """One member leaving (MemberIdentity)."""

    member_id: str
    group_instance_id: str | None


@message(303)
class LeaveGroup(NamedTuple):
    """``members``: v0-2 send one."""

    req_id: int
    group_id: str
    members: list[LeaveMemberRow]


class OffsetCommitRow(NamedTuple):
    """One partition's offset to commit."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str | None


@message(304)
class OffsetCommit(NamedTuple):
    """Generation -1 with an empty member id is a "simple" commit (assign() users)."""

    req_id: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    rows: list[OffsetCommitRow]


@message(305)
class OffsetFetch(NamedTuple):
    """``rows`` None asks for every committed offset of the group."""

    req_id: int
    group_id: str
    rows: list[TopicPartition] | None
    # v7+ (KIP-447): a partition with transactional offsets not yet decided answers
    # UNSTABLE_OFFSET_COMMIT (the client asks again) instead of the older offset
    require_stable: bool = False


@message(306)
class ListGroups(NamedTuple):
    """``states``: keep only groups in these states (ListGroups v4+); None: all."""

    req_id: int
    states: list[str] | None


@message(307)
class DescribeGroups(NamedTuple):
    req_id: int
    group_ids: list[str]


# ------------------------------------------------------------------- answers


class JoinGroupMemberRow(NamedTuple):
    """One member of the new generation, as its leader needs it to assign."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes  # the member's metadata for the chosen protocol


@message(320)
class JoinGroupDone(NamedTuple):
    """``members`` is filled for the leader only."""

    req_id: int
    error_code: int
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[JoinGroupMemberRow]


@message(321)
class SyncGroupDone(NamedTuple):
    req_id: int
    error_code: int
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@message(322)
class HeartbeatDone(NamedTuple):
    req_id: int
    error_code: int


class LeaveGroupMemberRow(NamedTuple):
    """One leaving member's answer."""

    member_id: str
    group_instance_id: str | None
    error_code: int


@message(323)
class LeaveGroupDone(NamedTuple):
    """``members`` in request order."""

    req_id: int
    error_code: int
    members: list[LeaveGroupMemberRow]


class OffsetCommitDoneRow(NamedTuple):
    topic: str
    partition: int
    error_code: int


@message(324)
class OffsetCommitDone(NamedTuple):
    """``rows`` in request order."""

    req_id: int
    rows: list[OffsetCommitDoneRow]


class OffsetFetchDoneRow(NamedTuple):
    """One partition's committed offset."""

    topic: str
    partition: int
    offset: int  # -1: nothing committed
    leader_epoch: int
    metadata: str
    error_code: int


@message(325)
class OffsetFetchDone(NamedTuple):
    req_id: int
    error_code: int
    rows: list[OffsetFetchDoneRow]


class ListGroupsRow(NamedTuple):
    group_id: str
    protocol_type: str
    state: str  # the state's name, as ListGroups v4+ reports it


@message(326)
class ListGroupsDone(NamedTuple):
    req_id: int
    error_code: int
    rows: list[ListGroupsRow]


class DescribeMemberRow(NamedTuple):
    """One member of a described group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class DescribeGroupRow(NamedTuple):
    """One described group."""

    error_code: int
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: list[DescribeMemberRow]


@message(327)
class DescribeGroupsDone(NamedTuple):
    """``groups`` in request order."""

    req_id: int
    groups: list[DescribeGroupRow]
