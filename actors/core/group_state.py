"""The classic consumer group protocol as a pure core: events in, effects out.

:class:`GroupCoordinatorCore` owns the groups of one GroupCoordinator shard.
It never reads a clock, never blocks and never does I/O; the actor shell

1. hands every request in with an opaque ``request_id`` (e.g. ``(conn_id,
   seq)``) and ``now_ms`` read once per message;
2. performs the returned effects **in order**:

   * :class:`Respond`: send ``response`` as the answer to ``request_id``.
     JoinGroup and SyncGroup answers may come much later, from another call
     (that is the DelayedJoin / the wait for the leader's SyncGroup); every
     request gets exactly one :class:`Respond`, eventually.
   * :class:`ScheduleTimer`: arm the timer ``key`` to fire at ``deadline_ms``
     (a new ScheduleTimer for a key replaces the old one: at most one live
     timer per key), then call :meth:`GroupCoordinatorCore.on_timer`.
   * :class:`CancelTimer`: drop the timer ``key`` (an optimisation only: a
     timer that fires anyway is harmless, the core checks its own deadlines).
   * :class:`AppendRecords`: append the records to ``__consumer_offsets``
     partition ``partition``, then call
     :meth:`GroupCoordinatorCore.on_append_complete` with ``append_id`` and the
     append's error code (offset commits and the leader's SyncGroup are
     answered only once their records are written, as in Kafka).

3. at start, feeds the records of its ``__consumer_offsets`` partitions to
   :meth:`GroupCoordinatorCore.load` (and performs the effects it returns).

Timers (``TimerKey.kind``):

* ``"join"``: the DelayedJoin of a rebalancing group (rebalance timeout, or
  ``group.initial.rebalance.delay.ms`` steps when the group was Empty);
* ``"heartbeat"``: the DelayedHeartbeat of one member (session timeout; 5
  minutes for a new member still waiting in its first join);
* ``"pending"``: a member id handed out with MEMBER_ID_REQUIRED that has not
  come back yet.

Heartbeats do not re-arm the timer: the core moves the member's deadline and,
when an old timer fires early, arms one for the new deadline. So a stale fire
never expires anyone, and a busy group costs one timer per session timeout
per member, not one per heartbeat.

A shell, in outline (names on the left are the shell's own)::

    core = GroupCoordinatorCore(GroupConfig.from_kafka_config(broker_config))
    perform(core.load(read_partition_records(), clock_ms()))
    ...
    def perform(effects):
        for fx in effects:
            match fx:
                case Respond(request_id, response): reply(request_id, response)
                case ScheduleTimer(key, deadline_ms): timer.schedule(key, deadline_ms)
                case CancelTimer(key): timer.cancel(key)
                case AppendRecords(append_id, partition, records, topic):
                    append(topic, partition, records, done=append_id)
    # on a JoinGroup request:   perform(core.join_group(rid, ..., now_ms=clock_ms()))
    # on a timer expiry:        perform(core.on_timer(key, clock_ms()))
    # on an append's answer:    perform(core.on_append_complete(append_id, code, clock_ms()))

Several coordinator shards may each own a core; a group must always reach the
same shard, and :meth:`GroupCoordinatorCore.partition_for` names the
``__consumer_offsets`` partition its records go to (FindCoordinator answers
with that partition's leader).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from actors.core.group_base import (
    GroupCoreBase,
    _PendingCommit,
    _PendingStaticRejoin,
    _PendingSync,
    _PendingTxnCommit,
)
from actors.core.group_load import GroupLoad
from actors.core.group_membership import GroupMembership
from actors.core.group_metadata import GroupState, RequestId
from actors.core.group_offsets import GroupOffsets
from actors.core.group_types import (
    INT32_MAX,
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    AppendRecords,
    CancelTimer,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsResponse,
    Effect,
    GroupConfig,
    GroupOverview,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchPartition,
    OffsetFetchResponse,
    Respond,
    Response,
    ScheduleTimer,
    SyncGroupResponse,
    TimerKey,
    heartbeat_timer,
    join_timer,
    pending_member_timer,
)
from actors.core.offsets_codec import group_tombstone, offset_tombstone
from wire.errors import ErrorCode

__all__ = [
    "INT32_MAX",
    "NO_GENERATION",
    "UNKNOWN_MEMBER_ID",
    "AppendRecords",
    "CancelTimer",
    "DeleteGroupsResponse",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedMember",
    "Effect",
    "GroupConfig",
    "GroupCoordinatorCore",
    "GroupOverview",
    "HeartbeatResponse",
    "JoinGroupMember",
    "JoinGroupResponse",
    "LeaveGroupMemberResponse",
    "LeaveGroupResponse",
    "ListGroupsResponse",
    "MemberIdentity",
    "OffsetCommitPartition",
    "OffsetCommitResponse",
    "OffsetDeleteResponse",
    "OffsetFetchPartition",
    "OffsetFetchResponse",
    "Respond",
    "Response",
    "ScheduleTimer",
    "SyncGroupResponse",
    "TimerKey",
    "heartbeat_timer",
    "join_timer",
    "pending_member_timer",
]


class GroupCoordinatorCore(GroupMembership, GroupOffsets, GroupLoad, GroupCoreBase):
    """All groups of one coordinator shard and the rules of the classic protocol.

    The rules live in parts that share one state (``group_base``):
    ``group_membership`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, timers),
    ``group_offsets`` (OffsetCommit, OffsetFetch) and ``group_load``; the
    listing, describing and deleting of groups, and the completion of the
    appends every part starts, are here.
    """

    __slots__ = ()

    # --- appends ------------------------------------------------------------------

    def on_append_complete(
        self, append_id: int, error_code: ErrorCode, now_ms: int
    ) -> list[Effect]:
        """The append ``append_id`` finished with ``error_code`` (NONE when written)."""
        fx: list[Effect] = []
        pending = self._pending_appends.pop(append_id, None)
        if pending is None:
            return fx
        error_code = ErrorCode(error_code)
        if isinstance(pending, _PendingCommit):
            self._on_commit_appended(pending, error_code, fx)
        elif isinstance(pending, _PendingTxnCommit):
            self._on_txn_commit_appended(pending, error_code, fx)
        elif isinstance(pending, _PendingSync):
            self._on_sync_appended(pending, error_code, now_ms, fx)
        elif isinstance(pending, _PendingStaticRejoin):
            self._on_static_rejoin_appended(pending, error_code, fx)
        return fx

    # --- ListGroups / DescribeGroups / DeleteGroups ----------------------------------

    def list_groups(
        self, request_id: RequestId, states: Sequence[str] | None = None,
        partitions: Collection[int] | None = None, error: ErrorCode = ErrorCode.NONE,
    ) -> list[Effect]:
        """ListGroups; ``states`` (v4+) keeps only groups in those states (by Kafka name),
        ``partitions`` only the groups of those partitions of __consumer_offsets (a single
        node's load: those restored, answered with ``error`` COORDINATOR_LOAD_IN_PROGRESS)."""
        wanted = set(states) if states else None
        groups = tuple(
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups_of(partitions)
            if wanted is None or g.state.value in wanted
        )
        return [Respond(request_id, ListGroupsResponse(error, groups))]

    def describe_groups(self, request_id: RequestId, group_ids: Sequence[str],
                        refused: Mapping[str, ErrorCode] | None = None) -> list[Effect]:
        """DescribeGroups; an unknown group is described as Dead with no error, as Kafka does.

        ``refused``: groups this coordinator does not serve (not led here, or still
        loading), each answered with its own code and nothing else, as Kafka answers
        per group; the other groups of the request get their real descriptions.
        """
        described = []
        for gid in group_ids:
            if refused and gid in refused:
                described.append(DescribedGroup(refused[gid], gid, "", "", ""))
                continue
            g = self._groups.get(gid)
            if g is None:
                described.append(DescribedGroup(ErrorCode.NONE, gid, GroupState.DEAD.value, "", ""))
                continue
            stable = g.is_state(GroupState.STABLE)
            members = tuple(
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(g.protocol_name) if stable and g.protocol_name else b"",
                    m.assignment if stable else b"",
                )
                for m in g.members.values()
            )
            described.append(
                DescribedGroup(
                    ErrorCode.NONE,
                    gid,
                    g.state.value,
                    g.protocol_type or "",
                    (g.protocol_name or "") if stable else "",
                    members,
                )
            )
        return [Respond(request_id, DescribeGroupsResponse(tuple(described)))]

    def delete_groups(
        self, request_id: RequestId, group_ids: Sequence[str], now_ms: int,
        refused: Mapping[str, ErrorCode] | None = None,
    ) -> list[Effect]:
        """DeleteGroups: only Empty groups go; their offsets and metadata get tombstones.
        ``refused`` groups are answered with their own code, untouched (describe_groups)."""
        fx: list[Effect] = []
        results = []
        for gid in group_ids:
            g = self._groups.get(gid)
            if refused and gid in refused:
                results.append((gid, refused[gid]))
            elif g is None or g.is_state(GroupState.DEAD):
                results.append((gid, ErrorCode.GROUP_ID_NOT_FOUND))
            elif not g.is_state(GroupState.EMPTY):
                results.append((gid, ErrorCode.NON_EMPTY_GROUP))
            else:
                g.transition_to(GroupState.DEAD, now_ms)
                self._release(gid)
                tombstones = tuple(offset_tombstone(gid, t, p) for t, p in sorted(g.offsets))
                g.offsets.clear()
                self._append(g, (*tombstones, group_tombstone(gid)), fx)
                results.append((gid, ErrorCode.NONE))
        return self._respond(fx, request_id, DeleteGroupsResponse(tuple(results)))
