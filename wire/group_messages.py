"""Messages between the request handlers and the GroupCoordinator actors (ids 300-399).

A handler sends one request message to ``topology.coordinator_for(group_id)``
and gets exactly one ``*Done`` back with the same ``req_id`` (the first field
of every answer, which is how the handler matches it). The answer may come
much later: a JoinGroup is answered when the rebalance completes, a SyncGroup
when the leader's assignment is written, an OffsetCommit when its records are
in ``__consumer_offsets``.

Error codes are ``wire.errors.ErrorCode`` values as plain ints. Per-member and
per-partition data travel as arrays, documented field by field below.
"""

from __future__ import annotations

from typing import NamedTuple

from wire.registry import message

# ------------------------------------------------------------------ requests


@message(300)
class JoinGroup(NamedTuple):
    """Handler -> coordinator. protocols: [[name, metadata bytes]] in the member's order.

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
    protocols: list[list[object]]
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


@message(303)
class LeaveGroup(NamedTuple):
    """members: [[member_id, group_instance_id or None]] (v0-2 send one)."""

    req_id: int
    group_id: str
    members: list[list[object]]


@message(304)
class OffsetCommit(NamedTuple):
    """rows: [topic, partition, offset, leader_epoch, metadata or None].

    generation -1 with an empty member id is a "simple" commit (assign() users).
    """

    req_id: int
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    rows: list[list[object]]


@message(305)
class OffsetFetch(NamedTuple):
    """rows: [topic, partition]; ``rows`` None asks for every committed offset of the group."""

    req_id: int
    group_id: str
    rows: list[list[object]] | None


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


@message(320)
class JoinGroupDone(NamedTuple):
    """members: [[member_id, group_instance_id or None, metadata bytes]], for the leader only."""

    req_id: int
    error_code: int
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[list[object]]


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


@message(323)
class LeaveGroupDone(NamedTuple):
    """members: [[member_id, group_instance_id or None, error_code]] in request order."""

    req_id: int
    error_code: int
    members: list[list[object]]


@message(324)
class OffsetCommitDone(NamedTuple):
    """rows: [topic, partition, error_code] in request order."""

    req_id: int
    rows: list[list[object]]


@message(325)
class OffsetFetchDone(NamedTuple):
    """rows: [topic, partition, offset (-1: none), leader_epoch, metadata, error_code]."""

    req_id: int
    error_code: int
    rows: list[list[object]]


@message(326)
class ListGroupsDone(NamedTuple):
    """rows: [group_id, protocol_type, state name]."""

    req_id: int
    error_code: int
    rows: list[list[object]]


@message(327)
class DescribeGroupsDone(NamedTuple):
    """groups: [error_code, group_id, state, protocol_type, protocol_data, members] where
    members: [[member_id, group_instance_id or None, client_id, client_host,
    metadata bytes, assignment bytes]], in request order."""

    req_id: int
    groups: list[list[object]]
