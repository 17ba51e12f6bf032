"""The classic group state machine on a manual clock.

A small harness plays the shell: it performs effects (answers, timers,
appends to a fake ``__consumer_offsets``), fires timers when the test moves
the clock, and checks that no request is ever answered twice. Refusals are
checked h11-style: the error code AND an unchanged core snapshot.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from actors.core.group_metadata import (
    GroupMetadata,
    GroupState,
    IllegalGroupTransitionError,
)
from actors.core.group_state import (
    AppendRecords,
    CancelTimer,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    Effect,
    GroupConfig,
    GroupCoordinatorCore,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetFetchResponse,
    Respond,
    ScheduleTimer,
    SyncGroupResponse,
    TimerKey,
    heartbeat_timer,
    join_timer,
    pending_member_timer,
)
from actors.core.offsets_codec import (
    GroupMetadataKey,
    OffsetCommitKey,
    Record,
    decode_record,
    partition_for,
)
from wire.errors import ErrorCode

E = ErrorCode
SESSION = 10_000
REBALANCE = 30_000
RANGE = [("range", b"range-meta")]


class Shell:
    """Plays the GroupCoordinator actor around the core, on a manual clock."""

    def __init__(self, auto_append: bool = True, **config: int) -> None:
        config.setdefault("group_initial_rebalance_delay_ms", 0)
        self.counter = itertools.count(1)
        self.core = GroupCoordinatorCore(
            GroupConfig(**config), member_id_factory=lambda p: f"{p}-{next(self.counter)}"
        )
        self.now = 0
        self.timers: dict[TimerKey, int] = {}
        self.answers: dict[int, object] = {}
        self.sent: list[int] = []
        self.appends: list[AppendRecords] = []
        self.log: list[Record] = []
        self.auto_append = auto_append
        self.append_error = E.NONE
        self._rid = itertools.count(1)
        self.fired: list[TimerKey] = []

    # --- effects ---------------------------------------------------------

    def run(self, effects: list[Effect]) -> list[Effect]:
        for fx in effects:
            if isinstance(fx, Respond):
                assert fx.request_id not in self.answers, f"request {fx.request_id} answered twice"
                assert fx.request_id in self.sent, f"answer to unknown request {fx.request_id}"
                self.answers[fx.request_id] = fx.response
            elif isinstance(fx, ScheduleTimer):
                self.timers[fx.key] = fx.deadline_ms
            elif isinstance(fx, CancelTimer):
                self.timers.pop(fx.key, None)
            elif isinstance(fx, AppendRecords):
                assert fx.topic == "__consumer_offsets"
                assert fx.partition == self.core.partition_for(
                    decode_record(fx.records[0].key, None)[0].group
                )
                self.appends.append(fx)
                if self.auto_append:
                    self.complete_appends()
            else:  # pragma: no cover - the core has no other effects
                raise TypeError(fx)
        return effects

    def complete_appends(self, error: ErrorCode | None = None) -> None:
        while self.appends:
            fx = self.appends.pop(0)
            code = self.append_error if error is None else error
            if code is E.NONE:
                self.log.extend(fx.records)
            self.run(self.core.on_append_complete(fx.append_id, code, self.now))

    def advance(self, ms: int) -> None:
        """Move the clock, firing due timers in deadline order."""
        target = self.now + ms
        while True:
            due = [(d, k) for k, d in self.timers.items() if d <= target]
            if not due:
                break
            deadline, key = min(due)
            del self.timers[key]
            self.now = max(self.now, deadline)
            self.fired.append(key)
            self.run(self.core.on_timer(key, self.now))
        self.now = target

    def fire(self, key: TimerKey) -> list[Effect]:
        """Fire a timer now, whatever its deadline (a stale or early fire)."""
        return self.run(self.core.on_timer(key, self.now))

    # --- requests --------------------------------------------------------

    def rid(self) -> int:
        r = next(self._rid)
        self.sent.append(r)
        return r

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        instance: str | None = None,
        protocols: Sequence[tuple[str, bytes]] = RANGE,
        session: int = SESSION,
        rebalance: int = REBALANCE,
        client: str = "c",
        protocol_type: str = "consumer",
        require_known: bool = True,
    ) -> int:
        r = self.rid()
        self.run(
            self.core.join_group(
                r,
                group,
                member_id,
                instance,
                client,
                "/127.0.0.1",
                protocol_type,
                protocols,
                session,
                rebalance,
                self.now,
                require_known,
            )
        )
        return r

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        group: str = "g",
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        r = self.rid()
        self.run(
            self.core.sync_group(
                r,
                group,
                generation,
                member_id,
                instance,
                assignments or {},
                self.now,
                protocol_type,
                protocol_name,
            )
        )
        return r

    def heartbeat(
        self, member_id: str, generation: int, group: str = "g", instance: str | None = None
    ) -> ErrorCode:
        r = self.rid()
        self.run(self.core.heartbeat(r, group, generation, member_id, instance, self.now))
        resp = self.answers[r]
        assert isinstance(resp, HeartbeatResponse)
        return resp.error_code

    def leave(self, *members: MemberIdentity, group: str = "g") -> LeaveGroupResponse:
        r = self.rid()
        self.run(self.core.leave_group(r, group, list(members), self.now))
        resp = self.answers[r]
        assert isinstance(resp, LeaveGroupResponse)
        return resp

    def commit(
        self,
        offsets: dict[tuple[str, int], int],
        member_id: str = "",
        generation: int = -1,
        group: str = "g",
        instance: str | None = None,
        metadata: str = "",
    ) -> int:
        r = self.rid()
        parts = [OffsetCommitPartition(t, p, o, 3, metadata) for (t, p), o in offsets.items()]
        self.run(
            self.core.offset_commit(r, group, generation, member_id, instance, parts, self.now)
        )
        return r

    def fetch(
        self, partitions: list[tuple[str, int]] | None = None, group: str = "g"
    ) -> dict[tuple[str, int], int]:
        r = self.rid()
        self.run(self.core.offset_fetch(r, group, partitions))
        resp = self.answers[r]
        assert isinstance(resp, OffsetFetchResponse) and resp.error_code is E.NONE
        return {(p.topic, p.partition): p.offset for p in resp.partitions}

    # --- answers ---------------------------------------------------------

    def join_answer(self, r: int) -> JoinGroupResponse:
        resp = self.answers[r]
        assert isinstance(resp, JoinGroupResponse)
        return resp

    def sync_answer(self, r: int) -> SyncGroupResponse:
        resp = self.answers[r]
        assert isinstance(resp, SyncGroupResponse)
        return resp

    def commit_answer(self, r: int) -> list[ErrorCode]:
        resp = self.answers[r]
        assert isinstance(resp, OffsetCommitResponse)
        return [code for _, _, code in resp.partitions]

    def group(self, group_id: str = "g") -> GroupMetadata:
        g = self.core.group(group_id)
        assert g is not None
        return g

    def assert_all_answered(self) -> None:
        assert set(self.sent) == set(self.answers), set(self.sent) - set(self.answers)

    # --- composite steps -------------------------------------------------

    def new_member(self, client: str = "c", group: str = "g", **kw: object) -> tuple[str, int]:
        """The two-step v4+ join: MEMBER_ID_REQUIRED, then the parked real join."""
        first = self.join(group=group, client=client, **kw)  # type: ignore[arg-type]
        ans = self.join_answer(first)
        assert ans.error_code is E.MEMBER_ID_REQUIRED
        second = self.join(group=group, member_id=ans.member_id, client=client, **kw)  # type: ignore[arg-type]
        return ans.member_id, second


def stable_group(shell: Shell, n: int, group: str = "g") -> tuple[list[str], int]:
    """n dynamic members joined and synced; returns (member ids, generation)."""
    for i in range(n):
        shell.join(group=group, client=f"c{i}", require_known=False)
    g = shell.group(group)
    members = list(g.members)
    # Joins after the first start a new rebalance that waits for the first member.
    shell.join(group=group, member_id=members[0])
    assert g.state is GroupState.COMPLETING_REBALANCE and len(g.members) == n
    gen = g.generation_id
    leader = g.leader_id
    assert leader is not None
    shell.sync(leader, gen, {m: m.encode() for m in members}, group=group)
    for mid in members:
        if mid != leader:
            shell.sync(mid, gen, group=group)
    assert g.state is GroupState.STABLE
    return members, gen


# === JoinGroup ===================================================================


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"group": ""}, E.INVALID_GROUP_ID),
        ({"session": 5999}, E.INVALID_SESSION_TIMEOUT),
        ({"session": 1_800_001}, E.INVALID_SESSION_TIMEOUT),
        ({"member_id": "nobody"}, E.UNKNOWN_MEMBER_ID),
        ({"protocol_type": ""}, E.INCONSISTENT_GROUP_PROTOCOL),
        ({"protocols": []}, E.INCONSISTENT_GROUP_PROTOCOL),
    ],
)
def test_join_refusals_on_a_new_group(kwargs: dict[str, object], code: ErrorCode) -> None:
    shell = Shell()
    before = shell.core.snapshot()
    r = shell.join(**kwargs)  # type: ignore[arg-type]
    ans = shell.join_answer(r)
    assert ans.error_code is code
    assert ans.generation_id == -1 and ans.members == ()
    assert shell.core.snapshot() == before
    assert shell.core.group_ids() == []


def test_session_timeout_bounds_are_inclusive_and_configurable() -> None:
    shell = Shell(group_min_session_timeout_ms=100, group_max_session_timeout_ms=200)
    assert shell.join_answer(shell.join(session=100)).error_code is E.MEMBER_ID_REQUIRED
    assert shell.join_answer(shell.join(session=200)).error_code is E.MEMBER_ID_REQUIRED
    assert shell.join_answer(shell.join(session=201)).error_code is E.INVALID_SESSION_TIMEOUT


def test_member_id_required_first_join() -> None:
    shell = Shell()
    r1 = shell.join(client="consumer-1")
    ans = shell.join_answer(r1)
    assert ans.error_code is E.MEMBER_ID_REQUIRED
    assert ans.member_id == "consumer-1-1"
    g = shell.group()
    assert g.state is GroupState.EMPTY and g.members == {}
    assert g.pending_members == {"consumer-1-1": SESSION}
    assert shell.timers[pending_member_timer("g", "consumer-1-1")] == SESSION

    r2 = shell.join(member_id="consumer-1-1", client="consumer-1")
    ans2 = shell.join_answer(r2)
    assert ans2.error_code is E.NONE
    assert (ans2.generation_id, ans2.leader, ans2.member_id) == (1, "consumer-1-1", "consumer-1-1")
    assert ans2.protocol_name == "range" and ans2.protocol_type == "consumer"
    assert [(m.member_id, m.metadata) for m in ans2.members] == [("consumer-1-1", b"range-meta")]
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert g.pending_members == {}
    assert pending_member_timer("g", "consumer-1-1") not in shell.timers
    assert shell.timers[heartbeat_timer("g", "consumer-1-1")] == SESSION


def test_old_clients_join_without_member_id_round_trip() -> None:
    shell = Shell()
    ans = shell.join_answer(shell.join(require_known=False))
    assert ans.error_code is E.NONE and ans.member_id == "c-1" and ans.generation_id == 1


def test_join_v0_rebalance_timeout_defaults_to_session_timeout() -> None:
    shell = Shell()
    shell.join(require_known=False, rebalance=-1, session=7000)
    g = shell.group()
    (member,) = g.members.values()
    assert member.rebalance_timeout_ms == 7000


def test_pending_member_expires_and_stale_fires_do_nothing() -> None:
    shell = Shell()
    mid = shell.join_answer(shell.join()).member_id
    before = shell.core.snapshot()
    shell.fire(pending_member_timer("g", mid))  # early: deadline not reached
    assert shell.core.snapshot() == before
    shell.advance(SESSION)
    assert shell.group().pending_members == {}
    # It comes back too late: its id is unknown now.
    assert shell.join_answer(shell.join(member_id=mid)).error_code is E.UNKNOWN_MEMBER_ID


def test_pending_member_holds_up_rebalance_until_it_joins() -> None:
    shell = Shell()
    (a,), gen = stable_group(shell, 1)
    b = shell.join_answer(shell.join(client="b")).member_id  # pending
    ra = shell.join(member_id=a)  # leader rejoin -> rebalance
    g = shell.group()
    assert g.state is GroupState.PREPARING_REBALANCE
    assert ra not in shell.answers  # waits for the pending member
    rb = shell.join(member_id=b, client="b")
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert shell.join_answer(ra).generation_id == gen + 1
    assert shell.join_answer(rb).leader == a


def test_pending_member_leaving_completes_the_join() -> None:
    shell = Shell()
    (a,), _ = stable_group(shell, 1)
    b = shell.join_answer(shell.join(client="b")).member_id
    ra = shell.join(member_id=a)
    assert ra not in shell.answers
    resp = shell.leave(MemberIdentity(b))
    assert resp.members[0].error_code is E.NONE
    assert shell.join_answer(ra).error_code is E.NONE
    assert shell.group().state is GroupState.COMPLETING_REBALANCE


def test_group_max_size_reached() -> None:
    shell = Shell(group_max_size=1)
    stable_group(shell, 1)
    before = shell.core.snapshot()
    ans = shell.join_answer(shell.join(client="x"))
    assert ans.error_code is E.GROUP_MAX_SIZE_REACHED
    assert shell.core.snapshot() == before


def test_inconsistent_protocol_on_existing_group() -> None:
    shell = Shell()
    members, _ = stable_group(shell, 2)
    before = shell.core.snapshot()
    # Wrong protocol type.
    assert (
        shell.join_answer(shell.join(protocol_type="connect")).error_code
        is E.INCONSISTENT_GROUP_PROTOCOL
    )
    # No protocol in common with the members.
    assert (
        shell.join_answer(shell.join(protocols=[("roundrobin", b"")])).error_code
        is E.INCONSISTENT_GROUP_PROTOCOL
    )
    # A known member switching to a protocol the other does not support.
    assert (
        shell.join_answer(shell.join(member_id=members[1], protocols=[("sticky", b"")])).error_code
        is E.INCONSISTENT_GROUP_PROTOCOL
    )
    assert shell.core.snapshot() == before


def test_join_with_unknown_member_id_on_existing_group() -> None:
    shell = Shell()
    stable_group(shell, 1)
    before = shell.core.snapshot()
    assert shell.join_answer(shell.join(member_id="ghost")).error_code is E.UNKNOWN_MEMBER_ID
    assert shell.core.snapshot() == before


# === rebalances, leader, protocol ===================================================


def test_two_members_rebalance_and_leader_is_first_joiner() -> None:
    shell = Shell()
    a, ra = shell.new_member(client="a")
    g = shell.group()
    assert g.state is GroupState.COMPLETING_REBALANCE  # delay 0: alone, generation 1
    assert shell.join_answer(ra).generation_id == 1
    b, rb = shell.new_member(client="b")
    assert g.state is GroupState.PREPARING_REBALANCE
    assert rb not in shell.answers
    # b joining ends a's parked sync? a has none; a learns via heartbeat.
    assert shell.heartbeat(a, 1) is E.REBALANCE_IN_PROGRESS
    ra2 = shell.join(member_id=a, client="a")
    assert g.state is GroupState.COMPLETING_REBALANCE
    ja, jb = shell.join_answer(ra2), shell.join_answer(rb)
    assert ja.generation_id == jb.generation_id == 2
    assert ja.leader == jb.leader == a
    assert {m.member_id for m in ja.members} == {a, b}
    assert jb.members == ()  # followers get no member list
    # Sync: follower waits for the leader.
    sb = shell.sync(b, 2)
    assert sb not in shell.answers
    sa = shell.sync(a, 2, {a: b"A", b: b"B"})
    assert shell.sync_answer(sa).assignment == b"A"
    assert shell.sync_answer(sb).assignment == b"B"
    assert shell.sync_answer(sb).protocol_name == "range"
    assert g.state is GroupState.STABLE
    assert shell.heartbeat(a, 2) is E.NONE and shell.heartbeat(b, 2) is E.NONE
    shell.assert_all_answered()


def test_sync_fills_missing_assignments_and_ignores_strangers() -> None:
    shell = Shell()
    a, _ra = shell.new_member(client="a")
    b, _rb = shell.new_member(client="b")
    shell.join(member_id=a, client="a")
    g = shell.group()
    gen = g.generation_id
    sb = shell.sync(b, gen)
    shell.sync(a, gen, {a: b"A", "stranger": b"X"})
    assert shell.sync_answer(sb).assignment == b""
    assert "stranger" not in g.members


def test_protocol_selection_by_votes() -> None:
    shell = Shell()
    p_a = [("range", b"ra"), ("roundrobin", b"rra")]
    p_b = [("roundrobin", b"rrb"), ("range", b"rb")]
    p_c = [("roundrobin", b"rrc"), ("range", b"rc"), ("sticky", b"")]
    a, _ = shell.new_member(client="a", protocols=p_a)
    b, _rb = shell.new_member(client="b", protocols=p_b)
    ra = shell.join(member_id=a, client="a", protocols=p_a)
    # Tie (1 vote each): the oldest member's preference wins.
    assert shell.join_answer(ra).protocol_name == "range"
    assert {m.member_id: m.metadata for m in shell.join_answer(ra).members} == {a: b"ra", b: b"rb"}
    c, rc = shell.new_member(client="c", protocols=p_c)
    ra = shell.join(member_id=a, client="a", protocols=p_a)
    shell.join(member_id=b, client="b", protocols=p_b)
    # roundrobin: 2 votes, range: 1 vote.
    ans = shell.join_answer(ra)
    assert ans.protocol_name == "roundrobin"
    assert {m.member_id: m.metadata for m in ans.members} == {a: b"rra", b: b"rrb", c: b"rrc"}
    assert shell.join_answer(rc).protocol_name == "roundrobin"


def test_stable_follower_rejoin_without_change_returns_current_generation() -> None:
    shell = Shell()
    (a, b), gen = stable_group(shell, 2)
    leader = shell.group().leader_id
    follower = b if leader == a else a
    r = shell.join(member_id=follower)
    ans = shell.join_answer(r)
    assert (ans.error_code, ans.generation_id, ans.leader, ans.members) == (E.NONE, gen, leader, ())
    assert shell.group().state is GroupState.STABLE


def test_stable_follower_rejoin_with_new_metadata_rebalances() -> None:
    shell = Shell()
    (_a, b), _gen = stable_group(shell, 2)
    r = shell.join(member_id=b, protocols=[("range", b"new topics")])
    assert r not in shell.answers
    assert shell.group().state is GroupState.PREPARING_REBALANCE


def test_stable_leader_rejoin_rebalances() -> None:
    shell = Shell()
    (a, b), gen = stable_group(shell, 2)
    leader = shell.group().leader_id
    assert leader is not None
    r = shell.join(member_id=leader)
    assert r not in shell.answers
    assert shell.group().state is GroupState.PREPARING_REBALANCE
    other = b if leader == a else a
    r2 = shell.join(member_id=other)
    assert shell.join_answer(r).generation_id == gen + 1
    assert shell.join_answer(r2).leader == leader  # the leader is kept when it rejoins


def test_completing_rebalance_rejoin_same_metadata_answers_again() -> None:
    shell = Shell()
    a, _ = shell.new_member(client="a")
    b, _ = shell.new_member(client="b")
    shell.join(member_id=a, client="a")
    g = shell.group()
    assert g.state is GroupState.COMPLETING_REBALANCE
    before = shell.core.snapshot()
    ra = shell.join(member_id=a, client="a")  # its answer was lost
    ans = shell.join_answer(ra)
    assert ans.generation_id == g.generation_id and len(ans.members) == 2  # leader list again
    rb = shell.join(member_id=b, client="b")
    assert shell.join_answer(rb).members == ()
    assert shell.core.snapshot() == before


def test_completing_rebalance_rejoin_with_change_cancels_parked_syncs() -> None:
    shell = Shell()
    a, _ = shell.new_member(client="a")
    b, _ = shell.new_member(client="b")
    shell.join(member_id=a, client="a")
    g = shell.group()
    gen = g.generation_id
    sb = shell.sync(b, gen)
    assert sb not in shell.answers
    shell.join(member_id=a, client="a", protocols=[("range", b"changed")])
    assert g.state is GroupState.PREPARING_REBALANCE
    assert shell.sync_answer(sb).error_code is E.REBALANCE_IN_PROGRESS


def test_superseded_join_is_answered() -> None:
    shell = Shell()
    (a, b), _ = stable_group(shell, 2)
    r1 = shell.join(member_id=b, protocols=[("range", b"x")])
    r2 = shell.join(member_id=b, protocols=[("range", b"x")])
    assert shell.join_answer(r1).error_code is E.REBALANCE_IN_PROGRESS
    assert r2 not in shell.answers
    ra = shell.join(member_id=a)
    assert shell.join_answer(r2).error_code is E.NONE and shell.join_answer(ra).error_code is E.NONE


def test_superseded_sync_is_answered() -> None:
    shell = Shell()
    a, _ = shell.new_member(client="a")
    b, _ = shell.new_member(client="b")
    shell.join(member_id=a, client="a")
    gen = shell.group().generation_id
    s1 = shell.sync(b, gen)
    s2 = shell.sync(b, gen)
    assert shell.sync_answer(s1).error_code is E.REBALANCE_IN_PROGRESS
    shell.sync(a, gen, {b: b"B"})
    assert shell.sync_answer(s2).assignment == b"B"


# === rebalance timeout and the initial delay =======================================


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    shell = Shell()
    (a, b), gen = stable_group(shell, 2)
    g = shell.group()
    ra = shell.join(member_id=a, protocols=[("range", b"new")])
    assert g.state is GroupState.PREPARING_REBALANCE
    assert shell.timers[join_timer("g")] == shell.now + REBALANCE
    # b keeps heartbeating (so no session expiry) but never rejoins.
    for _ in range(5):
        shell.advance(REBALANCE // 6)
        assert shell.heartbeat(b, gen) is E.REBALANCE_IN_PROGRESS
    assert ra not in shell.answers
    shell.advance(REBALANCE // 6)  # the rebalance timeout, before b's session ends
    ans = shell.join_answer(ra)
    assert ans.generation_id == gen + 1 and ans.leader == a
    assert [m.member_id for m in ans.members] == [a]
    assert list(g.members) == [a]
    assert heartbeat_timer("g", b) not in shell.timers
    assert shell.heartbeat(b, gen) is E.UNKNOWN_MEMBER_ID


def test_new_leader_elected_when_leader_does_not_rejoin() -> None:
    shell = Shell()
    (a, b, c), _gen = stable_group(shell, 3)
    g = shell.group()
    leader = g.leader_id
    others = [m for m in (a, b, c) if m != leader]
    r1 = shell.join(member_id=others[0], protocols=[("range", b"x")])
    r2 = shell.join(member_id=others[1])
    shell.advance(REBALANCE)
    assert shell.join_answer(r1).leader == others[0]  # oldest member that rejoined
    assert shell.join_answer(r2).leader == others[0]
    assert leader not in g.members


def test_early_or_stale_join_timer_does_nothing() -> None:
    shell = Shell()
    (a, b), gen = stable_group(shell, 2)
    ra = shell.join(member_id=a, protocols=[("range", b"x")])
    g = shell.group()
    for _ in range(5):  # b stays alive but does not rejoin
        shell.advance(REBALANCE // 6)
        assert shell.heartbeat(b, gen) is E.REBALANCE_IN_PROGRESS
    shell.advance(REBALANCE // 6 - 1)
    before = shell.core.snapshot()
    # The timer of an earlier rebalance, or a fire ahead of time: not this deadline.
    assert shell.fire(join_timer("g")) == []
    assert shell.core.snapshot() == before
    assert g.state is GroupState.PREPARING_REBALANCE and ra not in shell.answers
    shell.advance(1)
    assert shell.join_answer(ra).generation_id == gen + 1


def test_rebalance_completes_early_when_everyone_rejoined() -> None:
    shell = Shell()
    (a, b), _gen = stable_group(shell, 2)
    shell.join(member_id=a, protocols=[("range", b"x")])
    assert join_timer("g") in shell.timers
    shell.join(member_id=b)
    assert shell.group().state is GroupState.COMPLETING_REBALANCE
    assert join_timer("g") not in shell.timers
    assert shell.group().join_deadline_ms is None


def test_rebalance_timeout_is_max_over_members() -> None:
    shell = Shell()
    _a, _ = shell.new_member(client="a", rebalance=20_000)
    _b, _ = shell.new_member(client="b", rebalance=50_000)
    assert shell.timers[join_timer("g")] == 50_000


def test_initial_rebalance_delay_waits_and_extends() -> None:
    shell = Shell(group_initial_rebalance_delay_ms=3000)
    a, ra = shell.new_member(client="a", rebalance=10_000)
    g = shell.group()
    assert g.state is GroupState.PREPARING_REBALANCE
    assert shell.timers[join_timer("g")] == 3000
    shell.advance(1000)
    b, _rb = shell.new_member(client="b", rebalance=10_000)
    assert ra not in shell.answers
    shell.advance(2000)  # t=3000: a member arrived during the delay -> wait another step
    assert g.state is GroupState.PREPARING_REBALANCE
    assert shell.timers[join_timer("g")] == 6000
    shell.advance(3000)  # t=6000: nobody new -> complete
    assert shell.join_answer(ra).generation_id == 1
    assert {m.member_id for m in shell.join_answer(ra).members} == {a, b}


def test_initial_rebalance_delay_is_capped_by_rebalance_timeout() -> None:
    shell = Shell(group_initial_rebalance_delay_ms=3000)
    _, ra = shell.new_member(client="a", rebalance=7000)
    # A new member in every delay step: the steps are 3000, 3000, then 1000 (cap 7000).
    for i in range(10):
        if ra in shell.answers:
            break
        shell.advance(1000)
        shell.new_member(client=f"n{i}", rebalance=7000)
        shell.advance(1999)
    assert shell.join_answer(ra).error_code is E.NONE
    assert shell.now <= 7000 + 3000


def test_initial_delay_only_from_empty() -> None:
    shell = Shell(group_initial_rebalance_delay_ms=3000)
    _, ra = shell.new_member(client="a")
    shell.advance(3000)
    gen = shell.join_answer(ra).generation_id
    a = shell.join_answer(ra).member_id
    shell.sync(a, gen, {a: b""})
    shell.join(member_id=a)  # leader rejoin from Stable: no initial delay
    assert shell.group().state is GroupState.COMPLETING_REBALANCE


# === SyncGroup ===================================================================


def test_sync_refusals() -> None:
    shell = Shell()
    a, _ = shell.new_member(client="a")
    b, _ = shell.new_member(client="b")
    shell.join(member_id=a, client="a")
    gen = shell.group().generation_id
    cases = [
        ({"member_id": a, "generation": gen, "group": ""}, E.INVALID_GROUP_ID),
        ({"member_id": a, "generation": gen, "group": "other"}, E.UNKNOWN_MEMBER_ID),
        ({"member_id": "ghost", "generation": gen}, E.UNKNOWN_MEMBER_ID),
        ({"member_id": a, "generation": gen - 1}, E.ILLEGAL_GENERATION),
        (
            {"member_id": a, "generation": gen, "protocol_type": "connect"},
            E.INCONSISTENT_GROUP_PROTOCOL,
        ),
        (
            {"member_id": a, "generation": gen, "protocol_name": "sticky"},
            E.INCONSISTENT_GROUP_PROTOCOL,
        ),
    ]
    for kwargs, code in cases:
        before = shell.core.snapshot()
        r = shell.sync(**kwargs)  # type: ignore[arg-type]
        assert shell.sync_answer(r).error_code is code, kwargs
        assert shell.core.snapshot() == before, kwargs
    # v5 fields that match are fine.
    r = shell.sync(b, gen, protocol_type="consumer", protocol_name="range")
    assert r not in shell.answers


def test_sync_during_preparing_rebalance() -> None:
    shell = Shell()
    (a, b), gen = stable_group(shell, 2)
    shell.join(member_id=b, protocols=[("range", b"x")])
    before = shell.core.snapshot()
    assert shell.sync_answer(shell.sync(a, gen)).error_code is E.REBALANCE_IN_PROGRESS
    assert shell.core.snapshot() == before


def test_sync_fenced_static_member() -> None:
    shell = Shell()
    shell.join(instance="i1")
    g = shell.group()
    gen = g.generation_id
    before = shell.core.snapshot()
    r = shell.sync("i1-old", gen, instance="i1")
    assert shell.sync_answer(r).error_code is E.FENCED_INSTANCE_ID
    assert shell.core.snapshot() == before


def test_sync_in_stable_returns_assignment_and_restarts_session() -> None:
    shell = Shell()
    (a, _b), gen = stable_group(shell, 2)
    shell.advance(SESSION - 1)
    r = shell.sync(a, gen)
    assert shell.sync_answer(r).assignment == a.encode()
    assert shell.group().members[a].heartbeat_deadline_ms == shell.now + SESSION


@pytest.mark.parametrize(
    ("append_error", "code"),
    [
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.REQUEST_TIMED_OUT, E.REBALANCE_IN_PROGRESS),
        (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
        (E.INVALID_RECORD, E.INVALID_RECORD),
    ],
)
def test_sync_store_failure(append_error: ErrorCode, code: ErrorCode) -> None:
    shell = Shell(auto_append=False)
    a, _ = shell.new_member(client="a")
    b, _ = shell.new_member(client="b")
    shell.join(member_id=a, client="a")
    g = shell.group()
    gen = g.generation_id
    sb = shell.sync(b, gen)
    sa = shell.sync(a, gen, {a: b"A", b: b"B"})
    assert sa not in shell.answers and len(shell.appends) == 1  # waits for the write
    shell.complete_appends(append_error)
    assert shell.sync_answer(sa).error_code is code
    assert shell.sync_answer(sb).error_code is code
    assert shell.sync_answer(sb).assignment == b""
    assert g.state is GroupState.PREPARING_REBALANCE


def test_sync_store_completion_after_group_moved_on_is_ignored() -> None:
    shell = Shell(auto_append=False)
    a, _ = shell.new_member(client="a")
    b, _ = shell.new_member(client="b")
    shell.join(member_id=a, client="a")
    g = shell.group()
    gen = g.generation_id
    sa = shell.sync(a, gen, {a: b"A", b: b"B"})
    shell.join(member_id=b, client="b", protocols=[("range", b"changed")])  # new rebalance
    assert shell.sync_answer(sa).error_code is E.REBALANCE_IN_PROGRESS
    before = shell.core.snapshot()
    shell.complete_appends()
    assert g.state is GroupState.PREPARING_REBALANCE
    assert shell.core.snapshot()[0] == before[0]


def test_stored_group_record_holds_the_assignment() -> None:
    shell = Shell()
    (a, b), gen = stable_group(shell, 2)
    key, value = decode_record(shell.log[-1].key, shell.log[-1].value)
    assert key == GroupMetadataKey("g")
    assert value is not None and value.generation == gen  # type: ignore[union-attr]
    assert {m.member_id: m.assignment for m in value.members} == {a: a.encode(), b: b.encode()}  # type: ignore[union-attr]


# === Heartbeat and session expiry ==================================================


def test_heartbeat_refusals() -> None:
    shell = Shell()
    (a, _b), gen = stable_group(shell, 2)
    for kwargs, code in [
        ({"member_id": a, "generation": gen, "group": ""}, E.INVALID_GROUP_ID),
        ({"member_id": a, "generation": gen, "group": "nope"}, E.UNKNOWN_MEMBER_ID),
        ({"member_id": "ghost", "generation": gen}, E.UNKNOWN_MEMBER_ID),
        ({"member_id": a, "generation": gen + 1}, E.ILLEGAL_GENERATION),
    ]:
        before = shell.core.snapshot()
        assert shell.heartbeat(**kwargs) is code  # type: ignore[arg-type]
        assert shell.core.snapshot() == before


def test_heartbeat_in_completing_rebalance_keeps_session() -> None:
    shell = Shell()
    a, _ = shell.new_member(client="a")
    g = shell.group()
    shell.advance(5000)
    assert shell.heartbeat(a, g.generation_id) is E.NONE
    assert g.members[a].heartbeat_deadline_ms == 5000 + SESSION


def test_session_expiry_removes_member_and_starts_rebalance() -> None:
    shell = Shell()
    (a, b), gen = stable_group(shell, 2)
    g = shell.group()
    leader = g.leader_id
    survivor = b if leader == a else a
    for _ in range(2):
        shell.advance(4000)
        assert shell.heartbeat(survivor, gen) is E.NONE
    assert leader in g.members
    shell.advance(2000)
    assert leader not in g.members  # expired one session timeout after its sync
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.leader_id == survivor
    assert shell.heartbeat(survivor, gen) is E.REBALANCE_IN_PROGRESS
    r = shell.join(member_id=survivor)
    ans = shell.join_answer(r)  # only member left and it rejoined: completes at once
    assert (ans.generation_id, ans.leader) == (gen + 1, survivor)


def test_stale_heartbeat_timer_does_not_expire_a_live_member() -> None:
    shell = Shell()
    (a,), gen = stable_group(shell, 1)
    g = shell.group()
    armed = shell.timers[heartbeat_timer("g", a)]
    assert armed == SESSION
    shell.advance(SESSION - 1000)
    assert shell.heartbeat(a, gen) is E.NONE
    # Heartbeats do not re-arm the timer; the old one fires and follows the new deadline.
    assert shell.timers[heartbeat_timer("g", a)] == armed
    shell.advance(1000)
    assert a in g.members
    assert shell.timers[heartbeat_timer("g", a)] == 2 * SESSION - 1000
    # Firing it again now (a duplicate or early fire) changes nothing.
    before = shell.core.snapshot()
    shell.fire(heartbeat_timer("g", a))
    assert a in g.members
    assert shell.core.snapshot()[0] == before[0]
    shell.advance(SESSION)
    assert a not in g.members


def test_timers_for_unknown_things_are_harmless() -> None:
    shell = Shell()
    (a,), _ = stable_group(shell, 1)
    before = shell.core.snapshot()
    for key in [
        heartbeat_timer("g", "ghost"),
        heartbeat_timer("nope", a),
        join_timer("g"),  # not rebalancing
        pending_member_timer("g", "ghost"),
        TimerKey("join", "nope"),
    ]:
        assert shell.fire(key) == []
    assert shell.core.snapshot() == before
    with pytest.raises(ValueError, match="unknown timer kind 'bogus'"):
        shell.core.on_timer(("bogus", "g", ""), shell.now)
    # msgpack turns tuples into lists: a list key works too.
    assert shell.core.on_timer(["join", "g", ""], shell.now) == []


def test_member_awaiting_sync_is_not_expired() -> None:
    shell = Shell()
    a, _ = shell.new_member(client="a")
    b, _ = shell.new_member(client="b")
    shell.join(member_id=a, client="a")
    g = shell.group()
    gen = g.generation_id
    sb = shell.sync(b, gen)
    shell.advance(SESSION)  # a (leader) is silent and expires; b waits on us
    assert a not in g.members
    assert shell.sync_answer(sb).error_code is E.REBALANCE_IN_PROGRESS  # a's removal rebalances
    assert b in g.members


def test_member_parked_in_sync_survives_its_session() -> None:
    shell = Shell()
    a, _ = shell.new_member(client="a")
    b, _ = shell.new_member(client="b")
    shell.join(member_id=a, client="a")
    g = shell.group()
    gen = g.generation_id
    sb = shell.sync(b, gen)
    for _ in range(3):
        shell.advance(SESSION // 2)
        assert shell.heartbeat(a, gen) is E.NONE
    assert b in g.members and sb not in shell.answers
    shell.sync(a, gen, {a: b"A", b: b"B"})
    assert shell.sync_answer(sb).assignment == b"B"
    assert g.members[b].heartbeat_deadline_ms == shell.now + SESSION


def test_new_member_join_timeout() -> None:
    shell = Shell(new_member_join_timeout_ms=20_000)
    (a,), gen = stable_group(shell, 1)
    b, rb = shell.new_member(client="b", rebalance=60_000)
    g = shell.group()
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.members[b].is_new
    for _ in range(4):  # a heartbeats but does not rejoin
        shell.advance(5000)
        shell.heartbeat(a, gen)
    assert b not in g.members
    ans = shell.join_answer(rb)
    assert (ans.error_code, ans.member_id) == (E.UNKNOWN_MEMBER_ID, "")
    ra = shell.join(member_id=a)
    assert shell.join_answer(ra).members[0].member_id == a


# === LeaveGroup ===================================================================


def test_leave_group_batch() -> None:
    shell = Shell()
    (a, b, c), gen = stable_group(shell, 3)
    resp = shell.leave(MemberIdentity(a), MemberIdentity("ghost"), MemberIdentity(b))
    assert resp.error_code is E.NONE
    assert [(m.member_id, m.error_code) for m in resp.members] == [
        (a, E.NONE),
        ("ghost", E.UNKNOWN_MEMBER_ID),
        (b, E.NONE),
    ]
    g = shell.group()
    assert list(g.members) == [c]
    assert g.leader_id == c
    assert heartbeat_timer("g", a) not in shell.timers
    assert g.state is GroupState.PREPARING_REBALANCE
    r = shell.join(member_id=c)
    assert shell.join_answer(r).generation_id == gen + 1


def test_leave_refusals() -> None:
    shell = Shell()
    stable_group(shell, 1)
    before = shell.core.snapshot()
    assert shell.leave(MemberIdentity("x"), group="").error_code is E.INVALID_GROUP_ID
    resp = shell.leave(MemberIdentity("x"), MemberIdentity("y"), group="nope")
    assert resp.error_code is E.NONE
    assert [m.error_code for m in resp.members] == [E.UNKNOWN_MEMBER_ID] * 2
    assert shell.core.snapshot() == before


def test_last_member_leaving_empties_the_group() -> None:
    shell = Shell()
    (a,), gen = stable_group(shell, 1)
    assert shell.leave(MemberIdentity(a)).members[0].error_code is E.NONE
    g = shell.group()
    assert g.state is GroupState.EMPTY
    assert g.generation_id == gen + 1 and g.protocol_name is None and g.leader_id is None
    key, value = decode_record(shell.log[-1].key, shell.log[-1].value)
    assert key == GroupMetadataKey("g") and value is not None
    assert value.members == () and value.generation == gen + 1  # type: ignore[union-attr]


def test_leave_of_member_parked_in_join_answers_it() -> None:
    shell = Shell()
    (a, b), _ = stable_group(shell, 2)
    rb = shell.join(member_id=b, protocols=[("range", b"x")])
    shell.leave(MemberIdentity(b))
    assert shell.join_answer(rb).error_code is E.UNKNOWN_MEMBER_ID
    ra = shell.join(member_id=a)
    assert shell.join_answer(ra).error_code is E.NONE
    shell.assert_all_answered()


# === static membership ============================================================


def test_static_member_joins_without_member_id_required() -> None:
    shell = Shell()
    r = shell.join(instance="host-a")
    ans = shell.join_answer(r)
    assert ans.error_code is E.NONE and ans.member_id == "host-a-1"
    assert shell.group().static_members == {"host-a": "host-a-1"}


def _static_pair(shell: Shell) -> tuple[str, str, int]:
    ra = shell.join(instance="ia", client="a", require_known=False)
    a = shell.join_answer(ra).member_id
    rb = shell.join(instance="ib", client="b")
    b_id = shell.group().static_members["ib"]
    ra = shell.join(member_id=a, instance="ia", client="a")
    gen = shell.join_answer(ra).generation_id
    assert shell.join_answer(rb).generation_id == gen
    shell.sync(a, gen, {a: b"A", b_id: b"B"}, instance="ia")
    shell.sync(b_id, gen, instance="ib")
    assert shell.group().state is GroupState.STABLE
    return a, b_id, gen


def test_static_member_restart_replaces_member_id_without_rebalance() -> None:
    shell = Shell(auto_append=False)
    ra = shell.join(instance="ia", client="a")
    a = shell.join_answer(ra).member_id
    shell.join(instance="ib", client="b")
    b = shell.group().static_members["ib"]
    ra = shell.join(member_id=a, instance="ia", client="a")
    gen = shell.join_answer(ra).generation_id
    shell.sync(a, gen, {a: b"A", b: b"B"}, instance="ia")
    shell.sync(b, gen, instance="ib")
    shell.complete_appends()
    g = shell.group()
    assert g.state is GroupState.STABLE and g.leader_id == a
    # The leader's process restarts and rejoins with no member id.
    r = shell.join(instance="ia", client="a")
    new_a = g.static_members["ia"]
    assert new_a != a and new_a in g.members and a not in g.members
    assert r not in shell.answers  # waits for the new id to be written
    shell.complete_appends()
    ans = shell.join_answer(r)
    assert ans.error_code is E.NONE and ans.member_id == new_a
    assert ans.generation_id == gen
    assert ans.leader == a  # the old id: the restarted leader must not reassign
    assert ans.members == ()
    assert g.state is GroupState.STABLE and g.generation_id == gen
    assert g.leader_id == new_a
    assert g.members[new_a].assignment == b"A"  # keeps its assignment
    assert list(g.members) == [new_a, b]  # and its place
    # It syncs and gets its old assignment back.
    assert shell.sync_answer(shell.sync(new_a, gen, instance="ia")).assignment == b"A"
    # The old incarnation is fenced.
    before = shell.core.snapshot()
    assert shell.heartbeat(a, gen, instance="ia") is E.FENCED_INSTANCE_ID
    assert shell.heartbeat(a, gen) is E.UNKNOWN_MEMBER_ID
    assert (
        shell.join_answer(shell.join(member_id=a, instance="ia")).error_code is E.FENCED_INSTANCE_ID
    )
    assert shell.commit_answer(shell.commit({("t", 0): 1}, a, gen, instance="ia")) == [
        E.FENCED_INSTANCE_ID
    ]
    assert shell.leave(MemberIdentity(a, "ia")).members[0].error_code is E.FENCED_INSTANCE_ID
    assert shell.core.snapshot() == before
    # Persisted: the group record names the new member id.
    _key, value = decode_record(shell.log[-1].key, shell.log[-1].value)
    assert [m.member_id for m in value.members] == [new_a, b]  # type: ignore[union-attr]


def test_static_rejoin_store_failure_is_reported() -> None:
    shell = Shell()
    _a, _b, _gen = _static_pair(shell)
    shell.auto_append = False
    r = shell.join(instance="ib", client="b")
    shell.complete_appends(E.NOT_LEADER_OR_FOLLOWER)
    assert shell.join_answer(r).error_code is E.NOT_COORDINATOR


def test_static_rejoin_that_changes_selected_protocol_rebalances() -> None:
    shell = Shell()
    a, b, gen = _static_pair(shell)
    shell.join(member_id=b, instance="ib", protocols=[("range", b""), ("rr", b"")])
    ra = shell.join(member_id=a, instance="ia", protocols=[("rr", b""), ("range", b"")])
    assert shell.join_answer(ra).protocol_name == "rr"  # a, the oldest, prefers rr
    gen = shell.join_answer(ra).generation_id
    shell.sync(a, gen, {}, instance="ia")
    shell.sync(b, gen, instance="ib")
    g = shell.group()
    assert g.state is GroupState.STABLE
    # b restarts and now only supports range: the selected protocol would change.
    r = shell.join(instance="ib", client="b", protocols=[("range", b"")])
    assert r not in shell.answers
    assert g.state is GroupState.PREPARING_REBALANCE


def test_static_rejoin_during_completing_rebalance_rebalances() -> None:
    shell = Shell()
    a, b, _gen = _static_pair(shell)
    shell.join(member_id=a, instance="ia", protocols=[("range", b"x")])
    shell.join(member_id=b, instance="ib")
    g = shell.group()
    assert g.state is GroupState.COMPLETING_REBALANCE
    sb = shell.sync(b, g.generation_id, instance="ib")
    assert sb not in shell.answers
    r = shell.join(instance="ib", client="b")  # b restarts while the leader assigns
    assert g.state is GroupState.PREPARING_REBALANCE
    assert shell.sync_answer(sb).error_code is E.FENCED_INSTANCE_ID
    assert r not in shell.answers
    new_b = g.static_members["ib"]
    ra = shell.join(member_id=a, instance="ia", protocols=[("range", b"x")])
    assert {m.member_id for m in shell.join_answer(ra).members} == {a, new_b}
    assert shell.join_answer(r).member_id == new_b
    shell.assert_all_answered()


def test_static_rejoin_during_preparing_rebalance_fences_parked_join() -> None:
    shell = Shell()
    a, b, gen = _static_pair(shell)
    rb_old = shell.join(member_id=b, instance="ib", protocols=[("range", b"x")])
    g = shell.group()
    assert g.state is GroupState.PREPARING_REBALANCE and rb_old not in shell.answers
    r = shell.join(instance="ib", client="b", protocols=[("range", b"x")])
    ans_old = shell.join_answer(rb_old)
    assert (ans_old.error_code, ans_old.member_id) == (E.FENCED_INSTANCE_ID, b)
    new_b = g.static_members["ib"]
    assert g.state is GroupState.PREPARING_REBALANCE and r not in shell.answers
    ra = shell.join(member_id=a, instance="ia")
    assert shell.join_answer(r).member_id == new_b
    assert shell.join_answer(r).generation_id == gen + 1
    assert shell.join_answer(ra).leader == a
    shell.assert_all_answered()


def test_static_member_that_stops_heartbeating_expires() -> None:
    shell = Shell()
    a, b, gen = _static_pair(shell)
    g = shell.group()
    ra = shell.join(member_id=a, instance="ia", protocols=[("range", b"x")], session=60_000)
    # b neither rejoins nor heartbeats; rebalance timeout < b's session? b's session is 10s.
    shell.advance(SESSION)  # b expires by session timeout: removed, join completes
    assert b not in g.members
    assert shell.join_answer(ra).generation_id == gen + 1


def test_static_member_survives_rebalance_timeout() -> None:
    shell = Shell()
    ra0 = shell.join(instance="ia", client="a", session=60_000, rebalance=20_000)
    a = shell.join_answer(ra0).member_id
    rb0 = shell.join(instance="ib", client="b", session=60_000, rebalance=20_000)
    ra0 = shell.join(member_id=a, instance="ia", session=60_000, rebalance=20_000)
    b = shell.group().static_members["ib"]
    gen = shell.join_answer(ra0).generation_id
    shell.sync(a, gen, {a: b"A", b: b"B"}, instance="ia")
    shell.sync(b, gen, instance="ib")
    del rb0
    g = shell.group()
    ra = shell.join(
        member_id=a, instance="ia", protocols=[("range", b"x")], session=60_000, rebalance=20_000
    )
    shell.advance(20_000)  # rebalance timeout: b (static) did not rejoin but stays
    ans = shell.join_answer(ra)
    assert ans.generation_id == gen + 1
    assert {m.member_id for m in ans.members} == {a, b}
    assert b in g.members
    # b comes back with its member id: no new rebalance, it just syncs.
    rb = shell.join(member_id=b, instance="ib", session=60_000, rebalance=20_000)
    assert shell.join_answer(rb).generation_id == gen + 1
    shell.sync(a, gen + 1, {a: b"A2", b: b"B2"}, instance="ia")
    assert shell.sync_answer(shell.sync(b, gen + 1, instance="ib")).assignment == b"B2"


def test_static_only_members_none_rejoined_waits_again() -> None:
    shell = Shell()
    r = shell.join(instance="ia", client="a", session=60_000, rebalance=20_000)
    a = shell.join_answer(r).member_id
    g = shell.group()
    shell.sync(a, g.generation_id, {a: b""}, instance="ia")
    shell.join(instance="ib", client="b", session=60_000, rebalance=20_000)  # new static member
    b = g.static_members["ib"]
    assert g.state is GroupState.PREPARING_REBALANCE
    shell.leave(MemberIdentity(b, "ib"))  # the only one that had joined leaves
    assert g.state is GroupState.PREPARING_REBALANCE
    deadline = shell.timers[join_timer("g")]
    shell.advance(deadline - shell.now)
    # a (static) has not rejoined: no leader can be elected, wait another timeout.
    assert g.state is GroupState.PREPARING_REBALANCE
    assert shell.timers[join_timer("g")] == shell.now + 20_000
    rj = shell.join(member_id=a, instance="ia", session=60_000, rebalance=20_000)
    assert shell.join_answer(rj).error_code is E.NONE


def test_static_leave_by_instance_id() -> None:
    shell = Shell()
    _a, b, _gen = _static_pair(shell)
    resp = shell.leave(MemberIdentity("", "ib"))
    assert resp.members[0].error_code is E.NONE
    assert b not in shell.group().members and "ib" not in shell.group().static_members


def test_static_join_with_wrong_member_id_is_fenced() -> None:
    shell = Shell()
    a, b, _gen = _static_pair(shell)
    before = shell.core.snapshot()
    assert (
        shell.join_answer(shell.join(member_id=b, instance="ia")).error_code is E.FENCED_INSTANCE_ID
    )
    # A known member id presented with an instance id the group does not know.
    assert (
        shell.join_answer(shell.join(member_id=a, instance="iz")).error_code is E.UNKNOWN_MEMBER_ID
    )
    assert shell.core.snapshot() == before


# === OffsetCommit / OffsetFetch ==================================================


def test_simple_commit_creates_empty_group_and_fetch_sees_it() -> None:
    shell = Shell(auto_append=False)
    r = shell.commit({("t", 0): 10, ("t", 1): 20})
    assert r not in shell.answers
    assert shell.fetch() == {}  # not visible before it is written
    shell.complete_appends()
    assert shell.commit_answer(r) == [E.NONE, E.NONE]
    g = shell.group()
    assert g.state is GroupState.EMPTY
    assert shell.fetch() == {("t", 0): 10, ("t", 1): 20}
    assert shell.fetch([("t", 1), ("u", 0)]) == {("t", 1): 20, ("u", 0): -1}
    assert g.offsets[("t", 0)].leader_epoch == 3
    assert g.offsets[("t", 0)].commit_timestamp_ms == 0
    # The records written are Kafka's.
    keys = [decode_record(rec.key, rec.value) for rec in shell.log]
    assert keys[0][0] == OffsetCommitKey("g", "t", 0)


def test_commit_refusals_on_unknown_group() -> None:
    shell = Shell()
    before = shell.core.snapshot()
    r = shell.commit({("t", 0): 1}, member_id="m", generation=3)
    assert shell.commit_answer(r) == [E.ILLEGAL_GENERATION]
    assert shell.core.snapshot() == before and shell.core.group_ids() == []


def test_group_commit_rules() -> None:
    shell = Shell()
    (a, b), gen = stable_group(shell, 2)
    assert shell.commit_answer(shell.commit({("t", 0): 5}, a, gen)) == [E.NONE]
    for kwargs, code in [
        ({"member_id": "ghost", "generation": gen}, E.UNKNOWN_MEMBER_ID),
        ({"member_id": a, "generation": gen - 1}, E.ILLEGAL_GENERATION),
        ({}, E.UNKNOWN_MEMBER_ID),  # a simple commit into an active group
    ]:
        before = shell.core.snapshot()
        r = shell.commit({("t", 0): 99}, **kwargs)  # type: ignore[arg-type]
        assert shell.commit_answer(r) == [code], kwargs
        assert shell.core.snapshot() == before
    assert shell.fetch() == {("t", 0): 5}
    # PreparingRebalance: commits still accepted.
    shell.join(member_id=b, protocols=[("range", b"x")])
    assert shell.group().state is GroupState.PREPARING_REBALANCE
    assert shell.commit_answer(shell.commit({("t", 0): 6}, a, gen)) == [E.NONE]
    # CompletingRebalance: refused.
    shell.join(member_id=a)
    g = shell.group()
    assert g.state is GroupState.COMPLETING_REBALANCE
    before = shell.core.snapshot()
    r = shell.commit({("t", 0): 7}, a, g.generation_id)
    assert shell.commit_answer(r) == [E.REBALANCE_IN_PROGRESS]
    assert shell.core.snapshot() == before
    assert shell.fetch() == {("t", 0): 6}


def test_commit_restarts_session() -> None:
    shell = Shell()
    (a,), gen = stable_group(shell, 1)
    shell.advance(SESSION - 1)
    shell.commit({("t", 0): 1}, a, gen)
    shell.advance(SESSION - 1)
    assert a in shell.group().members


def test_commit_metadata_too_large() -> None:
    shell = Shell(offset_metadata_max_bytes=4)
    r = shell.commit({("t", 0): 1}, metadata="12345")
    assert shell.commit_answer(r) == [E.OFFSET_METADATA_TOO_LARGE]
    assert shell.core.group_ids() == []
    r = shell.rid()
    shell.run(
        shell.core.offset_commit(
            r,
            "g",
            -1,
            "",
            None,
            [
                OffsetCommitPartition("t", 0, 1, -1, "1234"),
                OffsetCommitPartition("t", 1, 2, -1, "12345"),
            ],
            shell.now,
        )
    )
    assert shell.commit_answer(r) == [E.NONE, E.OFFSET_METADATA_TOO_LARGE]
    assert shell.fetch() == {("t", 0): 1}


@pytest.mark.parametrize(
    ("append_error", "code"),
    [
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
        (E.RECORD_LIST_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
        (E.REQUEST_TIMED_OUT, E.REQUEST_TIMED_OUT),
    ],
)
def test_commit_append_failure(append_error: ErrorCode, code: ErrorCode) -> None:
    shell = Shell()
    shell.commit({("t", 0): 1})
    shell.append_error = append_error
    r = shell.commit({("t", 0): 2})
    assert shell.commit_answer(r) == [code]
    assert shell.fetch() == {("t", 0): 1}


def test_on_append_complete_unknown_id_is_ignored() -> None:
    shell = Shell()
    assert shell.core.on_append_complete(12345, E.NONE, 0) == []


def test_offset_fetch_unknown_group_and_empty_group_id() -> None:
    shell = Shell()
    assert shell.fetch(group="nope") == {}
    assert shell.fetch([("t", 0)], group="nope") == {("t", 0): -1}
    # The empty group id is allowed for offsets (Kafka keeps it for old clients).
    shell.commit({("t", 0): 4}, group="")
    assert shell.fetch(group="") == {("t", 0): 4}


# === ListGroups / DescribeGroups / DeleteGroups ====================================


def test_list_and_describe() -> None:
    shell = Shell()
    (a, b), _gen = stable_group(shell, 2)
    shell.commit({("t", 0): 1}, group="offsets-only")
    r = shell.rid()
    shell.run(shell.core.list_groups(r))
    resp = shell.answers[r]
    assert isinstance(resp, ListGroupsResponse)
    assert {(o.group_id, o.protocol_type, o.state) for o in resp.groups} == {
        ("g", "consumer", "Stable"),
        ("offsets-only", "", "Empty"),
    }
    r = shell.rid()
    shell.run(shell.core.list_groups(r, ["Empty"]))
    assert [o.group_id for o in shell.answers[r].groups] == ["offsets-only"]  # type: ignore[attr-defined]

    r = shell.rid()
    shell.run(shell.core.describe_groups(r, ["g", "unknown"]))
    resp = shell.answers[r]
    assert isinstance(resp, DescribeGroupsResponse)
    g_desc, unknown = resp.groups
    assert (g_desc.state, g_desc.protocol_type, g_desc.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    assert {(m.member_id, m.metadata, m.assignment) for m in g_desc.members} == {
        (a, b"range-meta", a.encode()),
        (b, b"range-meta", b.encode()),
    }
    assert (unknown.error_code, unknown.state, unknown.members) == (E.NONE, "Dead", ())
    # While rebalancing: no protocol, no metadata.
    shell.join(member_id=b, protocols=[("range", b"x")])
    r = shell.rid()
    shell.run(shell.core.describe_groups(r, ["g"]))
    (desc,) = shell.answers[r].groups  # type: ignore[attr-defined]
    assert (desc.state, desc.protocol_data) == ("PreparingRebalance", "")
    assert all(m.metadata == b"" and m.assignment == b"" for m in desc.members)


def test_delete_groups() -> None:
    shell = Shell()
    stable_group(shell, 1)
    shell.commit({("t", 0): 1, ("t", 1): 2}, group="old")
    r = shell.rid()
    shell.run(shell.core.delete_groups(r, ["g", "old", "nope"], shell.now))
    resp = shell.answers[r]
    assert isinstance(resp, DeleteGroupsResponse)
    assert resp.results == (
        ("g", E.NON_EMPTY_GROUP),
        ("old", E.NONE),
        ("nope", E.GROUP_ID_NOT_FOUND),
    )
    assert shell.core.group("old") is None
    tail = [decode_record(rec.key, rec.value) for rec in shell.log[-3:]]
    assert tail == [
        (OffsetCommitKey("old", "t", 0), None),
        (OffsetCommitKey("old", "t", 1), None),
        (GroupMetadataKey("old"), None),
    ]
    assert shell.fetch(group="old") == {}


def test_describe_and_delete_groups_answer_refused_groups_each_with_its_own_code() -> None:
    """Groups the shell cannot serve (led by another broker, still loading) get their
    own code and nothing else; the rest of the request is served (Kafka answers per
    group), and a refused group is left alone even if this core holds it."""
    shell = Shell()
    stable_group(shell, 1)
    shell.commit({("t", 0): 1}, group="old")
    shell.commit({("t", 0): 2}, group="elsewhere")
    refused = {"elsewhere": E.NOT_COORDINATOR, "loading": E.COORDINATOR_LOAD_IN_PROGRESS}
    r = shell.rid()
    shell.run(shell.core.describe_groups(r, ["elsewhere", "g", "loading"], refused))
    resp = shell.answers[r]
    assert isinstance(resp, DescribeGroupsResponse)
    assert [(d.group_id, d.error_code, d.state, d.members) for d in resp.groups][::2] == [
        ("elsewhere", E.NOT_COORDINATOR, "", ()),
        ("loading", E.COORDINATOR_LOAD_IN_PROGRESS, "", ())]
    assert (resp.groups[1].error_code, resp.groups[1].state) == (E.NONE, "Stable")
    r = shell.rid()
    shell.run(shell.core.delete_groups(r, ["old", "elsewhere", "loading"], shell.now, refused))
    assert shell.answers[r] == DeleteGroupsResponse((
        ("old", E.NONE), ("elsewhere", E.NOT_COORDINATOR),
        ("loading", E.COORDINATOR_LOAD_IN_PROGRESS)))
    assert shell.core.group("old") is None
    assert shell.fetch(group="elsewhere") == {("t", 0): 2}


# === load / restart ================================================================


def test_restart_rebuilds_groups_and_offsets_from_records() -> None:
    shell = Shell()
    (a, b), gen = stable_group(shell, 2)
    shell.commit({("t", 0): 100, ("t", 1): 200}, a, gen, metadata="m")
    shell.commit({("t", 0): 150}, b, gen)
    shell.commit({("x", 0): 7}, group="simple")
    shell.commit({("y", 0): 1}, group="gone")
    r = shell.rid()
    shell.run(shell.core.delete_groups(r, ["gone"], shell.now))
    old = shell.group()

    # A new coordinator (the broker restarted) reads the log back.
    restarted = Shell()
    restarted.now = 1_000_000
    restarted.run(restarted.core.load(list(shell.log), restarted.now))
    g = restarted.group()
    assert g.state is GroupState.STABLE
    assert (g.generation_id, g.leader_id, g.protocol_type, g.protocol_name) == (
        gen,
        old.leader_id,
        "consumer",
        "range",
    )
    assert list(g.members) == list(old.members)
    assert {m: g.members[m].assignment for m in g.members} == {a: a.encode(), b: b.encode()}
    assert restarted.fetch() == {("t", 0): 150, ("t", 1): 200}
    assert g.offsets[("t", 1)].metadata == "m"
    assert restarted.fetch(group="simple") == {("x", 0): 7}
    assert restarted.group("simple").state is GroupState.EMPTY
    assert restarted.core.group("gone") is None
    # Live consumers carry on with their generation; sessions restarted at load.
    assert restarted.timers[heartbeat_timer("g", a)] == 1_000_000 + SESSION
    assert restarted.heartbeat(a, gen) is E.NONE
    assert restarted.sync_answer(restarted.sync(b, gen)).assignment == b.encode()
    # A silent member expires after load too.
    restarted.advance(SESSION // 2)
    restarted.heartbeat(a, gen)
    restarted.advance(SESSION // 2)
    assert b not in g.members


def test_load_tombstones_and_later_records_win() -> None:
    from actors.core.offsets_codec import (
        GroupMetadataValue,
        OffsetCommitValue,
        group_metadata_record,
        group_tombstone,
        offset_commit_record,
        offset_tombstone,
    )

    records = [
        offset_commit_record("g", "t", 0, OffsetCommitValue(1, -1, "", 5)),
        offset_commit_record("g", "t", 0, OffsetCommitValue(2, -1, "", 6)),
        offset_commit_record("g", "t", 1, OffsetCommitValue(3, -1, "", 6)),
        offset_tombstone("g", "t", 1),
        group_metadata_record("g", GroupMetadataValue("consumer", 4, None, None, 0, ())),
        offset_commit_record("h", "t", 0, OffsetCommitValue(9, -1, "", 5)),
        group_tombstone("h"),
        Record(b"\x00\x05" + b"\x00\x01x", b"whatever"),  # a record type we do not know
    ]
    shell = Shell()
    shell.run(shell.core.load([(r.key, r.value) for r in records], 0))
    g = shell.group()
    assert (g.state, g.generation_id, g.protocol_type) == (GroupState.EMPTY, 4, "consumer")
    assert shell.fetch() == {("t", 0): 2}
    assert shell.core.group("h") is None
    assert shell.core.skipped_records == 1
    assert shell.timers == {}


def test_load_replaces_in_memory_group_and_cancels_its_timers() -> None:
    shell = Shell()
    (a,), _gen = stable_group(shell, 1)
    log = list(shell.log)
    effects = shell.run(shell.core.load(log, shell.now))
    assert CancelTimer(heartbeat_timer("g", a)) in effects
    assert shell.group().state is GroupState.STABLE


def test_load_corrupt_record_raises() -> None:
    from actors.core.offsets_codec import OffsetsRecordError

    shell = Shell()
    with pytest.raises(OffsetsRecordError, match="truncated"):
        shell.core.load([(b"\x00\x01\x00", None)], 0)


def test_appends_go_to_the_group_partition() -> None:
    shell = Shell(offsets_topic_num_partitions=7)
    shell.auto_append = False
    shell.commit({("t", 0): 1}, group="some-group")
    (fx,) = shell.appends
    assert fx.partition == partition_for("some-group", 7)


# === config and the model =========================================================


def test_group_config_from_kafka_names() -> None:
    cfg = GroupConfig.from_kafka_config(
        {
            "group.initial.rebalance.delay.ms": "100",
            "group.min.session.timeout.ms": 10,
            "offsets.topic.num.partitions": 3,
            "log.dirs": "/tmp/x",
        }
    )
    assert cfg.group_initial_rebalance_delay_ms == 100
    assert cfg.group_min_session_timeout_ms == 10
    assert cfg.offsets_topic_num_partitions == 3
    assert cfg.group_max_session_timeout_ms == 1_800_000


def test_illegal_transition_raises_and_leaves_state() -> None:
    g = GroupMetadata("g")
    with pytest.raises(
        IllegalGroupTransitionError, match=r"^group g cannot go from Empty to Stable$"
    ):
        g.transition_to(GroupState.STABLE, 5)
    assert g.state is GroupState.EMPTY and g.current_state_timestamp_ms == -1
    g.transition_to(GroupState.PREPARING_REBALANCE, 5)
    with pytest.raises(IllegalGroupTransitionError):
        g.transition_to(GroupState.PREPARING_REBALANCE, 6)
    assert g.state is GroupState.PREPARING_REBALANCE and g.current_state_timestamp_ms == 5
    g.transition_to(GroupState.DEAD, 7)
    assert g.state is GroupState.DEAD


def test_every_request_is_answered_exactly_once_in_a_busy_scenario() -> None:
    shell = Shell(group_initial_rebalance_delay_ms=500)
    ids = []
    for i in range(4):
        mid, _ = shell.new_member(client=f"m{i}")
        ids.append(mid)
        shell.advance(200)
    shell.advance(5000)
    g = shell.group()
    gen = g.generation_id
    leader = g.leader_id
    assert leader is not None
    for mid in ids:
        shell.sync(mid, gen, {m: m.encode() for m in ids} if mid == leader else None)
    assert g.state is GroupState.STABLE
    shell.leave(MemberIdentity(ids[1]))
    for mid in ids:
        if mid != ids[1]:
            shell.join(member_id=mid)
    shell.advance(REBALANCE)
    gen = g.generation_id
    for mid in list(g.members):
        shell.sync(mid, gen, {m: b"x" for m in g.members})
    shell.advance(3 * SESSION)  # nobody heartbeats: all expire, group goes Empty
    assert g.state is GroupState.EMPTY and g.members == {}
    shell.assert_all_answered()


def test_load_decoded_group_by_group_rebuilds_what_one_load_does() -> None:
    """The coordinator restores a load's records a slice a turn, never splitting a group:
    load_decoded replaces only the groups given, so slices give what one call gives."""
    from actors.core.offsets_codec import (
        GroupMetadataValue,
        OffsetCommitValue,
        decode_record,
        group_metadata_record,
        group_tombstone,
        offset_commit_record,
        offset_tombstone,
    )

    records = []
    for i in range(6):
        g = f"g{i}"
        records += [offset_commit_record(g, "t", 0, OffsetCommitValue(i, -1, "", 5)),
                    offset_commit_record(g, "t", 1, OffsetCommitValue(10 + i, -1, "m", 6)),
                    group_metadata_record(g, GroupMetadataValue("consumer", i + 1, None, None,
                                                                0, ()))]
    records += [offset_tombstone("g1", "t", 1), group_tombstone("g2"),
                offset_commit_record("g2", "t", 3, OffsetCommitValue(7, -1, "", 9))]
    decoded = [decode_record(r.key, r.value) for r in records]
    whole, sliced = Shell(), Shell()
    whole.run(whole.core.load_decoded(decoded, 0))
    by_group: dict[str, list[Any]] = {}
    for k, v in decoded:
        by_group.setdefault(k.group, []).append((k, v))
    for part in (["g0", "g1"], ["g2"], ["g3", "g4", "g5"]):
        sliced.run(sliced.core.load_decoded([kv for g in part for kv in by_group[g]], 0))

    def seen(shell: Shell) -> dict[str, Any]:
        return {gid: (g.state, g.generation_id, dict(g.offsets))
                for gid in shell.core.group_ids() if (g := shell.core.group(gid)) is not None}
    assert seen(sliced) == seen(whole)
    assert seen(whole)["g2"][2] == {("t", 3): seen(whole)["g2"][2][("t", 3)]}
    assert ("t", 1) not in seen(whole)["g1"][2]
