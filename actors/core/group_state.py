"""The classic consumer group protocol as a pure core: events in, effects out.

:class:`GroupCoordinatorCore` owns the groups of one GroupCoordinator shard.
It never reads a clock, never blocks and never does I/O; the actor shell

1. hands every request in with an opaque ``request_id`` (e.g. ``(conn_id,
   seq)``) and ``now_ms`` read once per message;
2. performs the returned effects **in order**:

   * :class:`Respond` – send ``response`` as the answer to ``request_id``.
     JoinGroup and SyncGroup answers may come much later, from another call
     (that is the DelayedJoin / the wait for the leader's SyncGroup); every
     request gets exactly one :class:`Respond`, eventually.
   * :class:`ScheduleTimer` – arm the timer ``key`` to fire at ``deadline_ms``
     (a new ScheduleTimer for a key replaces the old one: at most one live
     timer per key), then call :meth:`GroupCoordinatorCore.on_timer`.
   * :class:`CancelTimer` – drop the timer ``key`` (an optimisation only: a
     timer that fires anyway is harmless, the core checks its own deadlines).
   * :class:`AppendRecords` – append the records to ``__consumer_offsets``
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

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from actors.core.group_metadata import (
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
    RequestId,
    TopicPartition,
)
from actors.core.offsets_codec import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecordError,
    Record,
    decode_record,
    group_metadata_record,
    group_tombstone,
    offset_commit_record,
    offset_tombstone,
    partition_for,
)
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


# --- timers and effects -------------------------------------------------------------


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


# --- responses ---------------------------------------------------------------------


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
)


@dataclass(frozen=True, slots=True)
class Respond:
    """Send ``response`` as the answer to the request ``request_id``."""

    request_id: RequestId
    response: Response


@dataclass(frozen=True, slots=True)
class ScheduleTimer:
    """Arm (or re-arm) timer ``key`` for ``deadline_ms``; on expiry call ``on_timer(key, now_ms)``."""

    key: TimerKey
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Drop timer ``key`` if armed; firing it anyway would be harmless."""

    key: TimerKey


@dataclass(frozen=True, slots=True)
class AppendRecords:
    """Append ``records`` to ``topic``-``partition``; report with ``on_append_complete(append_id, ...)``."""

    append_id: int
    partition: int
    records: tuple[Record, ...]
    topic: str = OFFSETS_TOPIC


Effect = Respond | ScheduleTimer | CancelTimer | AppendRecords


# --- pending appends -------------------------------------------------------------


@dataclass(slots=True)
class _PendingCommit:
    request_id: RequestId
    group: GroupMetadata
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


_Pending = _PendingCommit | _PendingSync | _PendingStaticRejoin | _NoWaiter

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


def _join_error(member_id: str, code: ErrorCode) -> JoinGroupResponse:
    return JoinGroupResponse(code, NO_GENERATION, None, None, "", member_id)


# --- the core ----------------------------------------------------------------------


class GroupCoordinatorCore:
    """All groups of one coordinator shard and the rules of the classic protocol.

    ``member_id_factory(prefix)`` makes new member ids; Kafka's form is
    ``prefix + "-" + uuid`` where prefix is the group.instance.id of a static
    member, else the client id. Tests pass a deterministic one.
    """

    __slots__ = (
        "_groups",
        "_next_append_id",
        "_pending_appends",
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
        self._pending_appends: dict[int, _Pending] = {}
        self._next_append_id = 0
        self.skipped_records = 0
        """Records :meth:`load` ignored because their key version is unknown to us."""

    # --- read-only access -------------------------------------------------

    def group(self, group_id: str) -> GroupMetadata | None:
        """The group's model, for inspection (do not mutate it from outside)."""
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def snapshot(self) -> tuple[object, ...]:
        """Every group's observable state plus the writes in flight (for refusal tests)."""
        return (
            tuple(sorted((gid, g.snapshot()) for gid, g in self._groups.items())),
            tuple(sorted(self._pending_appends)),
            self._next_append_id,
        )

    # --- JoinGroup --------------------------------------------------------

    def join_group(
        self,
        request_id: RequestId,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        now_ms: int,
        require_known_member_id: bool = True,
    ) -> list[Effect]:
        """A JoinGroup request. The answer is usually parked until the rebalance completes.

        ``require_known_member_id`` is True for JoinGroup v4+: a dynamic member
        joining with an empty member id gets MEMBER_ID_REQUIRED and a new id
        to come back with. ``rebalance_timeout_ms`` is -1 in JoinGroup v0,
        where Kafka uses the session timeout instead.
        """
        fx: list[Effect] = []
        protos = [(name, bytes(meta)) for name, meta in protocols]
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        if not group_id:
            return self._respond(fx, request_id, _join_error(member_id, ErrorCode.INVALID_GROUP_ID))
        if not (
            self.config.group_min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            return self._respond(
                fx, request_id, _join_error(member_id, ErrorCode.INVALID_SESSION_TIMEOUT)
            )
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        args = _JoinArgs(
            request_id,
            group_instance_id,
            client_id,
            client_host,
            protocol_type,
            protos,
            session_timeout_ms,
            rebalance_timeout_ms,
        )
        group = self._groups.get(group_id)
        if group is None:
            if not is_unknown:
                return self._respond(
                    fx, request_id, _join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID)
                )
            group = GroupMetadata(group_id)
            self._join_unknown(group, args, require_known_member_id, now_ms, fx)
            if group.members or group.pending_members:
                self._groups[group_id] = group
        elif is_unknown and len(group.members) >= self.config.group_max_size:
            self._respond(
                fx, request_id, _join_error(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED)
            )
        elif is_unknown:
            self._join_unknown(group, args, require_known_member_id, now_ms, fx)
        else:
            self._join_known(group, member_id, args, now_ms, fx)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms, fx)
        return fx

    def _join_unknown(
        self,
        group: GroupMetadata,
        a: _JoinArgs,
        require_known_member_id: bool,
        now_ms: int,
        fx: list[Effect],
    ) -> None:
        if group.is_state(GroupState.DEAD):
            self._respond(
                fx,
                a.request_id,
                _join_error(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE),
            )
            return
        # A returning static member is checked against the others, not its old self.
        replaced = group.static_members.get(a.group_instance_id or "", UNKNOWN_MEMBER_ID)
        if not group.supports_protocols(replaced, a.protocol_type, a.protocols):
            self._respond(
                fx,
                a.request_id,
                _join_error(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
            )
            return
        new_member_id = self.member_id_factory(a.group_instance_id or a.client_id)
        if group.has_static_member(a.group_instance_id):
            self._update_static_member_and_rebalance(group, new_member_id, a, now_ms, fx)
        elif require_known_member_id and a.group_instance_id is None:
            deadline = now_ms + a.session_timeout_ms
            group.pending_members[new_member_id] = deadline
            fx.append(ScheduleTimer(pending_member_timer(group.group_id, new_member_id), deadline))
            self._respond(
                fx, a.request_id, _join_error(new_member_id, ErrorCode.MEMBER_ID_REQUIRED)
            )
        else:
            self._add_member_and_rebalance(group, new_member_id, a, now_ms, fx)

    def _join_known(
        self, group: GroupMetadata, member_id: str, a: _JoinArgs, now_ms: int, fx: list[Effect]
    ) -> None:
        if group.is_state(GroupState.DEAD):
            self._respond(
                fx, a.request_id, _join_error(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            )
            return
        if not group.supports_protocols(member_id, a.protocol_type, a.protocols):
            self._respond(
                fx, a.request_id, _join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            )
            return
        if group.is_static_member_fenced(member_id, a.group_instance_id):
            self._respond(fx, a.request_id, _join_error(member_id, ErrorCode.FENCED_INSTANCE_ID))
            return
        if member_id in group.pending_members:
            # The second join of a MEMBER_ID_REQUIRED exchange.
            self._add_member_and_rebalance(group, member_id, a, now_ms, fx)
            return
        if not group.has(member_id) or (
            a.group_instance_id is not None and not group.has_static_member(a.group_instance_id)
        ):
            self._respond(fx, a.request_id, _join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, a, now_ms, fx)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(a.protocols):
                # A retry of a join whose answer was lost: answer it again.
                self._respond(fx, a.request_id, self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, a, now_ms, fx)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(a.protocols):
                # The leader may rejoin to force a rebalance (e.g. new topic partitions).
                self._update_member_and_rebalance(group, member, a, now_ms, fx)
            else:
                self._respond(
                    fx, a.request_id, self._join_result(group, member, with_members=False)
                )
        else:
            self._respond(fx, a.request_id, _join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, a: _JoinArgs, now_ms: int, fx: list[Effect]
    ) -> None:
        if group.has_static_member(a.group_instance_id):
            self._respond(fx, a.request_id, _join_error(member_id, ErrorCode.FENCED_INSTANCE_ID))
            return
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=a.group_instance_id,
            client_id=a.client_id,
            client_host=a.client_host,
            rebalance_timeout_ms=a.rebalance_timeout_ms,
            session_timeout_ms=a.session_timeout_ms,
            protocol_type=a.protocol_type,
            protocols=list(a.protocols),
            join_request_id=a.request_id,
            is_new=True,
        )
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        if group.pending_members.pop(member_id, None) is not None:
            fx.append(CancelTimer(pending_member_timer(group.group_id, member_id)))
        group.add(member)
        # A new member cannot heartbeat until its first join completes; give it
        # Kafka's fixed new-member timeout rather than its session timeout.
        self._reset_heartbeat(group, member, now_ms, self.config.new_member_join_timeout_ms, fx)
        self._maybe_prepare_rebalance(group, now_ms, fx)

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        a: _JoinArgs,
        now_ms: int,
        fx: list[Effect],
    ) -> None:
        if member.join_request_id is not None and member.join_request_id != a.request_id:
            # A newer join supersedes a parked one; the old request still gets an answer.
            self._respond(
                fx,
                member.join_request_id,
                _join_error(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS),
            )
        member.protocols = list(a.protocols)
        member.rebalance_timeout_ms = a.rebalance_timeout_ms
        member.session_timeout_ms = a.session_timeout_ms
        member.join_request_id = a.request_id
        self._maybe_prepare_rebalance(group, now_ms, fx)

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, new_member_id: str, a: _JoinArgs, now_ms: int, fx: list[Effect]
    ) -> None:
        assert a.group_instance_id is not None
        old_member_id = group.static_members[a.group_instance_id]
        old = group.members[old_member_id]
        current_leader = group.leader_id or ""
        # The old incarnation is fenced: answer whatever it has parked.
        if old.join_request_id is not None:
            self._respond(
                fx, old.join_request_id, _join_error(old_member_id, ErrorCode.FENCED_INSTANCE_ID)
            )
            old.join_request_id = None
        if old.sync_request_id is not None:
            self._respond(fx, old.sync_request_id, SyncGroupResponse(ErrorCode.FENCED_INSTANCE_ID))
            old.sync_request_id = None
        fx.append(CancelTimer(heartbeat_timer(group.group_id, old_member_id)))
        member = group.replace_static_member(old_member_id, new_member_id)
        member.timer_deadline_ms = None
        member.protocols = list(a.protocols)
        member.rebalance_timeout_ms = a.rebalance_timeout_ms
        member.session_timeout_ms = a.session_timeout_ms
        member.client_id = a.client_id
        member.client_host = a.client_host
        member.join_request_id = a.request_id
        self._reset_heartbeat(group, member, now_ms, member.session_timeout_ms, fx)
        state = group.state
        if state is GroupState.STABLE:
            if group.protocol_name in group.candidate_protocols() and (
                group.select_protocol() == group.protocol_name
            ):
                # Nothing the assignment depends on changed: persist the new
                # member id, then answer with the current generation and the
                # old leader id (so a replaced leader does not reassign).
                append_id = self._append(
                    group, (group_metadata_record(group.group_id, group.to_value()),), fx
                )
                self._pending_appends[append_id] = _PendingStaticRejoin(
                    a.request_id, group, new_member_id, group.generation_id, current_leader
                )
            else:
                self._maybe_prepare_rebalance(group, now_ms, fx)
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may already be assigning to the old member id.
            self._prepare_rebalance(group, now_ms, fx)
        # PreparingRebalance: the member simply waits with the others.

    def _join_result(
        self, group: GroupMetadata, member: MemberMetadata, with_members: bool | None = None
    ) -> JoinGroupResponse:
        if with_members is None:
            with_members = group.is_leader(member.member_id)
        members: tuple[JoinGroupMember, ...] = ()
        if with_members and group.protocol_name is not None:
            members = tuple(
                JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()
            )
        return JoinGroupResponse(
            ErrorCode.NONE,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            member.member_id,
            members,
        )

    # --- rebalance ----------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, now_ms: int, fx: list[Effect]) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms, fx)

    def _prepare_rebalance(self, group: GroupMetadata, now_ms: int, fx: list[Effect]) -> None:
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(
                group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms, fx
            )
        initial_delay = self.config.group_initial_rebalance_delay_ms
        if group.is_state(GroupState.EMPTY) and initial_delay > 0:
            # InitialDelayedJoin: wait a little for more members before the first
            # generation, extending while new members keep arriving, never past
            # the rebalance timeout.
            delay = initial_delay
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - initial_delay, 0)
            group.new_member_added = False
        else:
            delay = group.rebalance_timeout_ms()
            group.initial_delay_remaining_ms = None
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
        group.join_deadline_ms = now_ms + delay
        # Kafka's tryCompleteElseWatch: a group whose members are all in already
        # (or that has none left) completes at once, without a timer.
        if group.initial_delay_remaining_ms is None and group.has_all_members_joined():
            self._complete_join(group, now_ms, fx)
        else:
            fx.append(ScheduleTimer(join_timer(group.group_id), group.join_deadline_ms))

    def _try_complete_join(self, group: GroupMetadata, now_ms: int, fx: list[Effect]) -> None:
        if (
            group.is_state(GroupState.PREPARING_REBALANCE)
            and group.initial_delay_remaining_ms is None
            and group.has_all_members_joined()
        ):
            self._complete_join(group, now_ms, fx)

    def _complete_join(self, group: GroupMetadata, now_ms: int, fx: list[Effect]) -> None:
        fx.append(CancelTimer(join_timer(group.group_id)))
        group.join_deadline_ms = None
        group.initial_delay_remaining_ms = None
        # Dynamic members that did not rejoin in time are dropped; static ones
        # stay until their session expires (they may come back without a rebalance).
        for m in group.not_yet_rejoined():
            if not m.is_static:
                self._drop_member(group, m, fx)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait again.
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            fx.append(ScheduleTimer(join_timer(group.group_id), group.join_deadline_ms))
            return
        group.init_next_generation(now_ms)
        if group.is_state(GroupState.EMPTY):
            self._append(group, (group_metadata_record(group.group_id, group.to_value()),), fx)
            return
        for m in list(group.members.values()):
            if m.join_request_id is not None:
                request_id = m.join_request_id
                m.join_request_id = None
                self._respond(fx, request_id, self._join_result(group, m))
            m.is_new = False
            self._reset_heartbeat(group, m, now_ms, m.session_timeout_ms, fx)

    def _reset_and_propagate_assignment_error(
        self, group: GroupMetadata, code: ErrorCode, now_ms: int, fx: list[Effect]
    ) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, code, now_ms, fx)

    def _propagate_assignment(
        self, group: GroupMetadata, code: ErrorCode, now_ms: int, fx: list[Effect]
    ) -> None:
        for m in group.members.values():
            if m.sync_request_id is not None:
                request_id = m.sync_request_id
                m.sync_request_id = None
                response = SyncGroupResponse(
                    code, group.protocol_type, group.protocol_name, m.assignment
                )
                self._respond(fx, request_id, response)
                # Its session did not run while it waited on us: restart it.
                self._reset_heartbeat(group, m, now_ms, m.session_timeout_ms, fx)

    # --- SyncGroup --------------------------------------------------------

    def sync_group(
        self,
        request_id: RequestId,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        assignments: Mapping[str, bytes],
        now_ms: int,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> list[Effect]:
        """A SyncGroup request. Followers wait for the leader's assignment.

        ``protocol_type``/``protocol_name`` are given by SyncGroup v5+ and
        must match the group's.
        """
        fx: list[Effect] = []
        group = self._groups.get(group_id)
        error: ErrorCode | None = None
        if not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        elif group is None:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif group.is_state(GroupState.DEAD):
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif group.is_static_member_fenced(member_id, group_instance_id):
            error = ErrorCode.FENCED_INSTANCE_ID
        elif not group.has(member_id):
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        elif (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        elif group.is_state(GroupState.PREPARING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS
        elif not (
            group.is_state(GroupState.COMPLETING_REBALANCE) or group.is_state(GroupState.STABLE)
        ):
            error = ErrorCode.UNKNOWN_MEMBER_ID
        if error is not None:
            return self._respond(fx, request_id, SyncGroupResponse(error))
        assert group is not None
        member = group.members[member_id]
        if group.is_state(GroupState.STABLE):
            self._respond(
                fx,
                request_id,
                SyncGroupResponse(
                    ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment
                ),
            )
            self._reset_heartbeat(group, member, now_ms, member.session_timeout_ms, fx)
            return fx
        # CompletingRebalance: park the request until the leader's assignment is stored.
        if member.sync_request_id is not None and member.sync_request_id != request_id:
            self._respond(
                fx, member.sync_request_id, SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS)
            )
        member.sync_request_id = request_id
        if group.is_leader(member_id):
            assignment = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            append_id = self._append(
                group,
                (group_metadata_record(group.group_id, group.to_value(assignment)),),
                fx,
            )
            self._pending_appends[append_id] = _PendingSync(group, group.generation_id, assignment)
        return fx

    # --- Heartbeat --------------------------------------------------------

    def heartbeat(
        self,
        request_id: RequestId,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now_ms: int,
    ) -> list[Effect]:
        """A Heartbeat: keeps the session alive, tells the member when to rejoin."""
        fx: list[Effect] = []
        group = self._groups.get(group_id)
        code: ErrorCode
        if not group_id:
            code = ErrorCode.INVALID_GROUP_ID
        elif group is None:
            code = ErrorCode.UNKNOWN_MEMBER_ID
        elif group.is_state(GroupState.DEAD):
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif group.is_static_member_fenced(member_id, group_instance_id):
            code = ErrorCode.FENCED_INSTANCE_ID
        elif not group.has(member_id):
            code = ErrorCode.UNKNOWN_MEMBER_ID
        elif generation_id != group.generation_id:
            code = ErrorCode.ILLEGAL_GENERATION
        elif group.is_state(GroupState.EMPTY):
            code = ErrorCode.UNKNOWN_MEMBER_ID
        else:
            member = group.members[member_id]
            self._reset_heartbeat(group, member, now_ms, member.session_timeout_ms, fx)
            code = (
                ErrorCode.REBALANCE_IN_PROGRESS
                if group.is_state(GroupState.PREPARING_REBALANCE)
                else ErrorCode.NONE
            )
        return self._respond(fx, request_id, HeartbeatResponse(code))

    # --- LeaveGroup -------------------------------------------------------

    def leave_group(
        self,
        request_id: RequestId,
        group_id: str,
        members: Sequence[MemberIdentity],
        now_ms: int,
    ) -> list[Effect]:
        """A LeaveGroup with one (v0-2) or several (v3+) members."""
        fx: list[Effect] = []
        if not group_id:
            return self._respond(fx, request_id, LeaveGroupResponse(ErrorCode.INVALID_GROUP_ID))
        group = self._groups.get(group_id)
        if group is None:
            return self._respond(
                fx,
                request_id,
                LeaveGroupResponse(
                    ErrorCode.NONE,
                    tuple(
                        LeaveGroupMemberResponse(
                            m.member_id, m.group_instance_id, ErrorCode.UNKNOWN_MEMBER_ID
                        )
                        for m in members
                    ),
                ),
            )
        if group.is_state(GroupState.DEAD):
            return self._respond(
                fx, request_id, LeaveGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            )
        results = []
        for leaving in members:
            code = self._leave_one(group, leaving, now_ms, fx)
            results.append(
                LeaveGroupMemberResponse(leaving.member_id, leaving.group_instance_id, code)
            )
        return self._respond(fx, request_id, LeaveGroupResponse(ErrorCode.NONE, tuple(results)))

    def _leave_one(
        self, group: GroupMetadata, leaving: MemberIdentity, now_ms: int, fx: list[Effect]
    ) -> ErrorCode:
        member_id, instance_id = leaving.member_id, leaving.group_instance_id
        if member_id != UNKNOWN_MEMBER_ID and group.is_static_member_fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            fx.append(CancelTimer(pending_member_timer(group.group_id, member_id)))
            self._try_complete_join(group, now_ms, fx)
            return ErrorCode.NONE
        if group.has_static_member(instance_id):
            assert instance_id is not None
            member = group.members[group.static_members[instance_id]]
        elif group.has(member_id):
            member = group.members[member_id]
        else:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove_member_and_update_group(group, member, now_ms, fx)
        return ErrorCode.NONE

    # --- member removal -----------------------------------------------------

    def _drop_member(self, group: GroupMetadata, member: MemberMetadata, fx: list[Effect]) -> None:
        """Take a member out, answering anything it has parked."""
        if member.join_request_id is not None:
            self._respond(
                fx,
                member.join_request_id,
                _join_error(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID),
            )
            member.join_request_id = None
        if member.sync_request_id is not None:
            self._respond(
                fx, member.sync_request_id, SyncGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID)
            )
            member.sync_request_id = None
        group.remove(member.member_id)
        fx.append(CancelTimer(heartbeat_timer(group.group_id, member.member_id)))

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, now_ms: int, fx: list[Effect]
    ) -> None:
        self._drop_member(group, member, fx)
        if group.is_state(GroupState.STABLE) or group.is_state(GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms, fx)
        elif group.is_state(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms, fx)

    # --- heartbeat deadlines ------------------------------------------------

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

    # --- timers -----------------------------------------------------------------

    def on_timer(self, key: TimerKey | Sequence[str], now_ms: int) -> list[Effect]:
        """A timer fired. Stale or unknown timers do nothing (or re-arm for a later deadline)."""
        key = TimerKey(*key)
        fx: list[Effect] = []
        group = self._groups.get(key.group_id)
        if group is None:
            return fx
        if key.kind == "join":
            self._on_join_timer(group, now_ms, fx)
        elif key.kind == "heartbeat":
            self._on_heartbeat_timer(group, key.member_id, now_ms, fx)
        elif key.kind == "pending":
            deadline = group.pending_members.get(key.member_id)
            if deadline is not None and now_ms >= deadline:
                del group.pending_members[key.member_id]
                self._try_complete_join(group, now_ms, fx)
        else:
            raise ValueError(f"unknown timer kind {key.kind!r}")
        return fx

    def _on_join_timer(self, group: GroupMetadata, now_ms: int, fx: list[Effect]) -> None:
        if (
            not group.is_state(GroupState.PREPARING_REBALANCE)
            or group.join_deadline_ms is None
            or now_ms < group.join_deadline_ms
        ):
            return
        remaining = group.initial_delay_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            step = self.config.group_initial_rebalance_delay_ms
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(remaining - step, 0)
            group.join_deadline_ms = now_ms + min(step, remaining)
            fx.append(ScheduleTimer(join_timer(group.group_id), group.join_deadline_ms))
            return
        self._complete_join(group, now_ms, fx)

    def _on_heartbeat_timer(
        self, group: GroupMetadata, member_id: str, now_ms: int, fx: list[Effect]
    ) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        member.timer_deadline_ms = None
        if now_ms < member.heartbeat_deadline_ms:
            # The member heartbeated since this timer was armed: follow its new deadline.
            member.timer_deadline_ms = member.heartbeat_deadline_ms
            fx.append(
                ScheduleTimer(
                    heartbeat_timer(group.group_id, member_id), member.heartbeat_deadline_ms
                )
            )
            return
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            # It is waiting on us, not the other way round; its deadline is
            # restarted when the join or sync completes.
            return
        self._remove_member_and_update_group(group, member, now_ms, fx)

    # --- appends ------------------------------------------------------------------

    def _append(self, group: GroupMetadata, records: tuple[Record, ...], fx: list[Effect]) -> int:
        append_id = self._next_append_id
        self._next_append_id += 1
        self._pending_appends[append_id] = _NoWaiter()
        fx.append(AppendRecords(append_id, self.partition_for(group.group_id), records))
        return append_id

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
        elif isinstance(pending, _PendingSync):
            self._on_sync_appended(pending, error_code, now_ms, fx)
        elif isinstance(pending, _PendingStaticRejoin):
            self._on_static_rejoin_appended(pending, error_code, fx)
        return fx

    def _on_commit_appended(
        self, pending: _PendingCommit, error_code: ErrorCode, fx: list[Effect]
    ) -> None:
        if error_code is ErrorCode.NONE:
            if not pending.group.is_state(GroupState.DEAD):
                pending.group.offsets.update(pending.offsets)
            code = ErrorCode.NONE
        else:
            code = _OFFSET_STORE_ERRORS.get(error_code, error_code)
        result = tuple(
            (topic, partition, code if (topic, partition) in pending.offsets else err)
            for topic, partition, err in pending.order
        )
        self._respond(fx, pending.request_id, OffsetCommitResponse(result))

    def _on_sync_appended(
        self, pending: _PendingSync, error_code: ErrorCode, now_ms: int, fx: list[Effect]
    ) -> None:
        group = pending.group
        if not (
            group.is_state(GroupState.COMPLETING_REBALANCE)
            and group.generation_id == pending.generation_id
            and self._groups.get(group.group_id) is group
        ):
            return  # The group moved on meanwhile; its parked syncs were answered then.
        if error_code is not ErrorCode.NONE:
            code = _GROUP_STORE_ERRORS.get(error_code, error_code)
            self._reset_and_propagate_assignment_error(group, code, now_ms, fx)
            self._maybe_prepare_rebalance(group, now_ms, fx)
            return
        for mid, m in group.members.items():
            m.assignment = pending.assignment.get(mid, b"")
        self._propagate_assignment(group, ErrorCode.NONE, now_ms, fx)
        group.transition_to(GroupState.STABLE, now_ms)

    def _on_static_rejoin_appended(
        self, pending: _PendingStaticRejoin, error_code: ErrorCode, fx: list[Effect]
    ) -> None:
        group = pending.group
        member = group.members.get(pending.member_id)
        if member is None or member.join_request_id != pending.request_id:
            return  # Already answered (fenced again, removed, or rebalanced).
        member.join_request_id = None
        if error_code is not ErrorCode.NONE:
            code = _GROUP_STORE_ERRORS.get(error_code, error_code)
            self._respond(fx, pending.request_id, _join_error(pending.member_id, code))
            return
        self._respond(
            fx,
            pending.request_id,
            JoinGroupResponse(
                ErrorCode.NONE,
                pending.generation_id,
                group.protocol_type,
                group.protocol_name,
                pending.leader_id,
                pending.member_id,
            ),
        )

    # --- OffsetCommit / OffsetFetch ------------------------------------------------

    def offset_commit(
        self,
        request_id: RequestId,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        partitions: Sequence[OffsetCommitPartition],
        now_ms: int,
    ) -> list[Effect]:
        """An OffsetCommit. Generation -1 with an empty member id is a "simple" commit.

        Simple commits are accepted only while the group is Empty or unknown
        (a consumer using ``assign()`` and Kafka only for offset storage).
        """
        fx: list[Effect] = []

        def refuse(code: ErrorCode) -> list[Effect]:
            return self._respond(
                fx,
                request_id,
                OffsetCommitResponse(tuple((p.topic, p.partition, code) for p in partitions)),
            )

        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation we do not know: this group is not ours (any more).
                return refuse(ErrorCode.ILLEGAL_GENERATION)
            group = GroupMetadata(group_id)
            return self._store_offsets(request_id, group, partitions, now_ms, fx, new_group=True)
        if group.is_state(GroupState.DEAD):
            return refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return refuse(ErrorCode.FENCED_INSTANCE_ID)
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            return self._store_offsets(request_id, group, partitions, now_ms, fx)
        if not group.has(member_id):
            return refuse(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return refuse(ErrorCode.ILLEGAL_GENERATION)
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            # The member has its new generation but no assignment yet.
            return refuse(ErrorCode.REBALANCE_IN_PROGRESS)
        # Stable, or PreparingRebalance: commits are still allowed; the
        # heartbeat tells the member to rejoin.
        member = group.members[member_id]
        self._reset_heartbeat(group, member, now_ms, member.session_timeout_ms, fx)
        return self._store_offsets(request_id, group, partitions, now_ms, fx)

    def _store_offsets(
        self,
        request_id: RequestId,
        group: GroupMetadata,
        partitions: Sequence[OffsetCommitPartition],
        now_ms: int,
        fx: list[Effect],
        new_group: bool = False,
    ) -> list[Effect]:
        order: list[tuple[str, int, ErrorCode]] = []
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        records: list[Record] = []
        for p in partitions:
            metadata = p.metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                order.append((p.topic, p.partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                continue
            order.append((p.topic, p.partition, ErrorCode.NONE))
            value = OffsetAndMetadata(p.offset, p.leader_epoch, metadata, now_ms)
            offsets[(p.topic, p.partition)] = value
            records.append(
                offset_commit_record(
                    group.group_id,
                    p.topic,
                    p.partition,
                    OffsetCommitValue(p.offset, p.leader_epoch, metadata, now_ms),
                )
            )
        if not records:
            return self._respond(fx, request_id, OffsetCommitResponse(tuple(order)))
        if new_group:
            self._groups[group.group_id] = group
        append_id = self._append(group, tuple(records), fx)
        self._pending_appends[append_id] = _PendingCommit(request_id, group, order, offsets)
        return fx

    def offset_fetch(
        self,
        request_id: RequestId,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
    ) -> list[Effect]:
        """An OffsetFetch; ``partitions=None`` asks for every committed offset of the group.

        Answered whatever the group's state (it may use Kafka for offsets only).
        A partition with no commit gets offset -1 and no error.
        """
        group = self._groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        wanted = sorted(offsets) if partitions is None else list(partitions)
        result = []
        for topic, partition in wanted:
            o = offsets.get((topic, partition))
            if o is None:
                result.append(OffsetFetchPartition(topic, partition, -1, -1, ""))
            else:
                result.append(
                    OffsetFetchPartition(topic, partition, o.offset, o.leader_epoch, o.metadata)
                )
        return [Respond(request_id, OffsetFetchResponse(ErrorCode.NONE, tuple(result)))]

    # --- ListGroups / DescribeGroups / DeleteGroups ----------------------------------

    def list_groups(
        self, request_id: RequestId, states: Sequence[str] | None = None
    ) -> list[Effect]:
        """ListGroups; ``states`` (v4+) keeps only groups in those states (by Kafka name)."""
        wanted = set(states) if states else None
        groups = tuple(
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
            for g in self._groups.values()
            if wanted is None or g.state.value in wanted
        )
        return [Respond(request_id, ListGroupsResponse(ErrorCode.NONE, groups))]

    def describe_groups(self, request_id: RequestId, group_ids: Sequence[str]) -> list[Effect]:
        """DescribeGroups; an unknown group is described as Dead with no error, as Kafka does."""
        described = []
        for gid in group_ids:
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
        self, request_id: RequestId, group_ids: Sequence[str], now_ms: int
    ) -> list[Effect]:
        """DeleteGroups: only Empty groups go; their offsets and metadata get tombstones."""
        fx: list[Effect] = []
        results = []
        for gid in group_ids:
            g = self._groups.get(gid)
            if g is None or g.is_state(GroupState.DEAD):
                results.append((gid, ErrorCode.GROUP_ID_NOT_FOUND))
            elif not g.is_state(GroupState.EMPTY):
                results.append((gid, ErrorCode.NON_EMPTY_GROUP))
            else:
                g.transition_to(GroupState.DEAD, now_ms)
                del self._groups[gid]
                tombstones = tuple(offset_tombstone(gid, t, p) for t, p in sorted(g.offsets))
                g.offsets.clear()
                self._append(g, (*tombstones, group_tombstone(gid)), fx)
                results.append((gid, ErrorCode.NONE))
        return self._respond(fx, request_id, DeleteGroupsResponse(tuple(results)))

    # --- load -----------------------------------------------------------------------

    def load(
        self, records: Iterable[Record | tuple[bytes, bytes | None]], now_ms: int
    ) -> list[Effect]:
        """Rebuild groups from ``__consumer_offsets`` records, oldest first.

        Later records win, tombstones delete. Groups named by the records are
        replaced; others are left alone. Groups with members come back Stable
        with a fresh session for every member (as in Kafka: live consumers keep
        their generation across a coordinator restart). Records whose key
        version we do not know are skipped and counted in ``skipped_records``;
        a record that is corrupt raises :class:`OffsetsRecordError`.
        """
        metadata: dict[str, GroupMetadataValue | None] = {}
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        for rec in records:
            key_bytes, value_bytes = (
                (rec.key, rec.value) if isinstance(rec, Record) else (rec[0], rec[1])
            )
            try:
                key, value = decode_record(key_bytes, value_bytes)
            except OffsetsRecordError as e:
                if str(e).startswith("unknown __consumer_offsets key version"):
                    self.skipped_records += 1
                    continue
                raise
            if isinstance(key, OffsetCommitKey):
                group_offsets = offsets.setdefault(key.group, {})
                if value is None:
                    group_offsets.pop((key.topic, key.partition), None)
                else:
                    assert isinstance(value, OffsetCommitValue)
                    group_offsets[(key.topic, key.partition)] = OffsetAndMetadata(
                        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms
                    )
            else:
                assert isinstance(key, GroupMetadataKey)
                assert value is None or isinstance(value, GroupMetadataValue)
                metadata[key.group] = value
                if value is None:
                    # A deleted group takes its offsets with it.
                    offsets.pop(key.group, None)
        fx: list[Effect] = []
        for gid in set(metadata) | set(offsets):
            old = self._groups.pop(gid, None)
            if old is not None:
                self._forget_timers(old, fx)
            value = metadata.get(gid)
            group_offsets = offsets.get(gid, {})
            if value is None and not group_offsets:
                continue
            group = GroupMetadata(gid, offsets=dict(group_offsets))
            if value is not None:
                self._restore_group(group, value, now_ms, fx)
            self._groups[gid] = group
        return fx

    def _restore_group(
        self, group: GroupMetadata, value: GroupMetadataValue, now_ms: int, fx: list[Effect]
    ) -> None:
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.current_state_timestamp_ms = value.current_state_timestamp_ms
        for mv in value.members:
            protocols = [(value.protocol, mv.subscription)] if value.protocol else []
            group.add(
                MemberMetadata(
                    member_id=mv.member_id,
                    group_instance_id=mv.group_instance_id,
                    client_id=mv.client_id,
                    client_host=mv.client_host,
                    rebalance_timeout_ms=mv.rebalance_timeout_ms,
                    session_timeout_ms=mv.session_timeout_ms,
                    protocol_type=value.protocol_type,
                    protocols=protocols,
                    assignment=mv.assignment,
                )
            )
        if value.leader is not None and value.leader in group.members:
            group.leader_id = value.leader
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        for m in group.members.values():
            self._reset_heartbeat(group, m, now_ms, m.session_timeout_ms, fx)

    def _forget_timers(self, group: GroupMetadata, fx: list[Effect]) -> None:
        if group.join_deadline_ms is not None:
            fx.append(CancelTimer(join_timer(group.group_id)))
        for mid in group.members:
            fx.append(CancelTimer(heartbeat_timer(group.group_id, mid)))
        for mid in group.pending_members:
            fx.append(CancelTimer(pending_member_timer(group.group_id, mid)))

    # --- helpers --------------------------------------------------------------------

    @staticmethod
    def _respond(fx: list[Effect], request_id: RequestId, response: Response) -> list[Effect]:
        fx.append(Respond(request_id, response))
        return fx


@dataclass(frozen=True, slots=True)
class _JoinArgs:
    request_id: RequestId
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
