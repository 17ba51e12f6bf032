"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup: members, rebalances, sessions.

Timers: the DelayedJoin of a rebalancing group (``join``), each member's
session (``heartbeat``) and member ids handed out with MEMBER_ID_REQUIRED
that have not come back yet (``pending``); see ``group_state`` for the rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from actors.core.group_base import (
    _GROUP_STORE_ERRORS,
    GroupCoreBase,
    _PendingStaticRejoin,
    _PendingSync,
)
from actors.core.group_metadata import GroupMetadata, GroupState, MemberMetadata, RequestId
from actors.core.group_types import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    CancelTimer,
    Effect,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupResponse,
    MemberIdentity,
    ScheduleTimer,
    SyncGroupResponse,
    TimerKey,
    heartbeat_timer,
    join_timer,
    pending_member_timer,
)
from actors.core.offsets_codec import group_metadata_record
from wire.errors import ErrorCode


def _join_error(member_id: str, code: ErrorCode) -> JoinGroupResponse:
    return JoinGroupResponse(code, NO_GENERATION, None, None, "", member_id)


class GroupMembership(GroupCoreBase):
    """The membership protocol of the group core (a part of GroupCoordinatorCore)."""

    __slots__ = ()

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
                self._hold(group)
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
