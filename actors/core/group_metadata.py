"""The data of one classic consumer group: its state, generation, members and offsets.

This module is the model; :mod:`actors.core.group_state` holds the rules that
move it (join, sync, heartbeat, leave, commit). It mirrors Kafka's
``GroupMetadata`` / ``MemberMetadata`` with the same state graph:

    Empty ──► PreparingRebalance ──► CompletingRebalance ──► Stable
      ▲              │   ▲                  │                  │
      └──────────────┘   └──────────────────┴──────────────────┘
    (any state) ──► Dead

A member that has a join request parked is "awaiting join" (the shell holds
that request until the rebalance completes); a member with a parked sync
request is "awaiting sync". The core keeps the request ids, never callbacks,
so everything here is plain data.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum

from actors.core.offsets_codec import GroupMetadataValue, MemberMetadataValue
from wire.errors import ErrorCode, KafkaError

RequestId = Hashable
"""Opaque id the shell gives each request; every response effect carries it back."""

TopicPartition = tuple[str, int]


class GroupState(Enum):
    """Kafka's classic group states; ``value`` is the name DescribeGroups/ListGroups return."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupTransitionError(KafkaError):
    """A transition outside Kafka's state graph: a bug in the caller; the state is unchanged."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """One committed offset as the coordinator caches it."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1


@dataclass(slots=True)
class MemberMetadata:
    """One member of a group; mutable, owned by its :class:`GroupMetadata`."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_request_id: RequestId | None = None
    sync_request_id: RequestId | None = None
    is_new: bool = False
    heartbeat_deadline_ms: int = 0
    timer_deadline_ms: int | None = None
    """Deadline of the heartbeat timer the shell currently holds for this member, if any."""

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_request_id is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_request_id is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order (Kafka's ``matches``)."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        """This member's preferred protocol among ``candidates`` (its first supported one)."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise KeyError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(slots=True)
class GroupMetadata:
    """One group; every field is changed only by the coordinator core."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    """Members in join order; the order decides who becomes leader next."""
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> member id."""
    pending_members: dict[str, int] = field(default_factory=dict)
    """Member ids handed out with MEMBER_ID_REQUIRED -> deadline (ms) to come back by."""
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    current_state_timestamp_ms: int = -1
    join_deadline_ms: int | None = None
    """Deadline of the running DelayedJoin (None when no rebalance is pending)."""
    initial_delay_remaining_ms: int | None = None
    """Not None while the first, initial-delay phase of a rebalance from Empty runs."""
    new_member_added: bool = False

    # --- queries -------------------------------------------------------

    def is_state(self, state: GroupState) -> bool:
        return self.state is state

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def has_static_member(self, group_instance_id: str | None) -> bool:
        return group_instance_id is not None and group_instance_id in self.static_members

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A known instance id presented with a member id that is not its current one."""
        if group_instance_id is None or group_instance_id not in self.static_members:
            return False
        return self.static_members[group_instance_id] != member_id

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def has_all_members_joined(self) -> bool:
        """Every known member has a join parked and no MEMBER_ID_REQUIRED member is still out."""
        return not self.pending_members and all(m.is_awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout among members (Kafka's rule for the DelayedJoin)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def supports_protocols(
        self, member_id: str, protocol_type: str, protocols: list[tuple[str, bytes]]
    ) -> bool:
        """May a member with this protocol type and these protocols be in the group?

        An Empty group takes any non-empty type and protocol list; otherwise the
        type must match and at least one protocol must be supported by every
        other member (the member itself is left out so that it may change its
        own list).
        """
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type or not protocols:
            return False
        others = [m for mid, m in self.members.items() if mid != member_id]
        names = {name for name, _ in protocols}
        for m in others:
            names &= set(m.protocol_names())
        return bool(names)

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its first candidate; most votes wins.

        Ties go to the protocol the oldest member (join order) prefers most.
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise IllegalGroupTransitionError(
                f"group {self.group_id} has no protocol supported by all members"
            )
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values()))
        preference = {name: i for i, name in enumerate(first.protocol_names())}
        return min(votes, key=lambda name: (-votes[name], preference.get(name, len(preference))))

    # --- changes --------------------------------------------------------

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalGroupTransitionError(
                f"group {self.group_id} cannot go from {self.state.value} to {state.value}"
            )
        self.state = state
        self.current_state_timestamp_ms = now_ms

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> MemberMetadata:
        member = self.members.pop(member_id)
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """Give a static member a new member id, keeping its place, leadership and assignment."""
        old = self.members[old_member_id]
        assert old.group_instance_id is not None
        items = [
            (new_member_id if mid == old_member_id else mid, m) for mid, m in self.members.items()
        ]
        old.member_id = new_member_id
        self.members = dict(items)
        self.static_members[old.group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        return old

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick the oldest member that did.

        Returns False when no member has rejoined (Kafka then waits another
        rebalance timeout for static members to come back).
        """
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for mid, m in self.members.items():
            if m.is_awaiting_join:
                self.leader_id = mid
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    # --- persistence ----------------------------------------------------

    def to_value(self, assignment: dict[str, bytes] | None = None) -> GroupMetadataValue:
        """This group as a GroupMetadataValue; ``assignment`` overrides members' current ones."""
        members = []
        for m in self.members.values():
            subscription = m.metadata(self.protocol_name) if self.protocol_name else b""
            assigned = assignment.get(m.member_id, b"") if assignment is not None else m.assignment
            members.append(
                MemberMetadataValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=subscription,
                    assignment=assigned,
                )
            )
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=self.current_state_timestamp_ms,
            members=tuple(members),
        )

    def snapshot(self) -> tuple[object, ...]:
        """Everything observable about the group, for "refusal leaves state unchanged" checks."""
        members = tuple(
            (
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.protocol_type,
                tuple(m.protocols),
                m.assignment,
                m.join_request_id,
                m.sync_request_id,
                m.is_new,
                m.heartbeat_deadline_ms,
                m.timer_deadline_ms,
            )
            for m in self.members.values()
        )
        return (
            self.group_id,
            self.state,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id,
            members,
            tuple(sorted(self.static_members.items())),
            tuple(sorted(self.pending_members.items())),
            tuple(sorted(self.offsets.items())),
            self.join_deadline_ms,
            self.initial_delay_remaining_ms,
            self.new_member_added,
            self.current_state_timestamp_ms,
        )
