"""The leader's replica state: high watermark over the ISR, ISR shrink/expand, KIP-497.

A state machine (hypothesis) drives one leader and two followers on a real
PartitionLog and a manual clock: appends, followers copying part of the
leader's log, their fetches (the leader's only view of them), time passing,
ISR checks whose proposals the controller accepts or refuses. Whatever the
order: the high watermark never goes back, and every replica of the ISR the
high watermark is computed over (committed or pending) holds every record
below it, so a shrunk ISR never acknowledges what a dropped follower lacks.
The machine's controller keeps the ISR it wrote, and an answer may be lost
after the write or before it: every replica of the controller's ISR (whom it
may elect) holds every record below the leader's high watermark too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.partition_state import PROPOSAL_RETRY_MS, IsrProposal, PartitionState
from actors.core.record_batch import build_batch
from tests.fixtures.scratch import scratch_dir
from wire.errors import ErrorCode

LEADER, F1, F2 = 1, 2, 3
LAG_MS = 1000


def new_log(directory: Path) -> PartitionLog:
    return PartitionLog.open(directory, "t", 0, LogConfig(), 0)


def leader_state(log: PartitionLog, now_ms: int = 0) -> PartitionState:
    state = PartitionState.hosted(log, LEADER, 2, LAG_MS)
    state.become_leader(0, [LEADER, F1, F2], [LEADER, F1, F2], partition_epoch=0,
                        now_ms=now_ms)
    return state


def append(state: PartitionState, n: int) -> None:
    state.log.append_as_leader(build_batch([b"x"] * n), state.leader_epoch, 0)
    state.on_leader_append()


def test_followers_unknown_after_becoming_leader_hold_the_high_watermark(tmp_path: Path) -> None:
    state = leader_state(new_log(tmp_path / "t-0"))
    append(state, 5)
    assert state.log.high_watermark == 0
    assert not state.on_follower_fetch(F1, 5, 10)
    assert state.log.high_watermark == 0  # F2 has not fetched: its position is unknown
    assert state.on_follower_fetch(F2, 3, 10)
    assert state.log.high_watermark == 3
    assert not state.on_follower_fetch(F2, 2, 11)  # never back
    assert state.log.high_watermark == 3


def test_leading_at_the_next_epoch_continues_the_leadership_any_other_role_ends_it(
        tmp_path: Path) -> None:
    state = leader_state(new_log(tmp_path / "t-0"))
    assert state.status().leader_since_epoch == 0
    state.become_leader(1, [LEADER, F1], [LEADER, F1, F2], partition_epoch=1)  # F2 left
    assert (state.status().leader_epoch, state.status().leader_since_epoch) == (1, 0)
    state.become_leader(3, [LEADER, F1], [LEADER, F1, F2], partition_epoch=2)  # 2 missed
    assert state.status().leader_since_epoch == 3
    state.become_follower(F1, 4, [LEADER, F1], [LEADER, F1, F2], partition_epoch=3)
    assert state.status().leader_since_epoch == -1
    state.become_leader(5, [LEADER, F1], [LEADER, F1, F2], partition_epoch=4)
    assert state.status().leader_since_epoch == 5


def test_a_fetch_from_a_replica_not_assigned_counts_for_nothing(tmp_path: Path) -> None:
    state = leader_state(new_log(tmp_path / "t-0"))
    append(state, 5)
    assert not state.on_follower_fetch(99, 5, 10)
    assert 99 not in state.followers and state.isr_expansion(99) is None


def test_shrink_waits_for_the_lag_and_the_pending_isr_is_the_larger(tmp_path: Path) -> None:
    state = leader_state(new_log(tmp_path / "t-0"), now_ms=0)
    append(state, 10)
    state.on_follower_fetch(F1, 10, 100)
    state.on_follower_fetch(F2, 4, 100)
    assert state.isr_shrink(LAG_MS) is None  # F2 was caught up at 0 (became leader)
    proposal = state.isr_shrink(LAG_MS + 1)
    assert proposal == IsrProposal(0, (LEADER, F1), 0)
    state.propose(proposal)
    assert state.isr_shrink(LAG_MS + 2) is None  # one change at a time
    append(state, 5)
    state.on_follower_fetch(F1, 15, LAG_MS + 3)
    assert state.log.high_watermark == 4  # pending: F2 still counts
    assert state.has_enough_replicas()
    assert state.on_isr_result(0, 0, 0, [LEADER, F1], 1) == "applied"
    assert state.isr == {LEADER, F1} and state.partition_epoch == 1
    assert state.log.high_watermark == 15


def test_an_expansion_not_made_lets_the_high_watermark_move_over_the_committed_isr(
        tmp_path: Path) -> None:
    """The controller says it wrote nothing (OPERATION_NOT_ATTEMPTED): the follower that was
    to join stops holding the high watermark at once, not at the next fetch or append."""
    log = new_log(tmp_path / "t-0")
    state = PartitionState.hosted(log, LEADER, 1, LAG_MS)
    state.become_leader(0, [LEADER, F1], [LEADER, F1, F2], partition_epoch=0, now_ms=0)
    append(state, 4)
    state.on_follower_fetch(F1, 4, 1)
    state.on_follower_fetch(F2, 4, 1)
    proposal = state.isr_expansion(F2, 1)
    assert proposal is not None
    state.propose(proposal)
    append(state, 3)  # F2 stops fetching here: it holds the pending (maximal) ISR's HW at 4
    state.on_follower_fetch(F1, 7, 2)
    assert state.log.high_watermark == 4
    assert state.on_isr_result(0, 0, int(ErrorCode.OPERATION_NOT_ATTEMPTED), [], -1,
                               3) == "retry"
    assert state.maximal_isr == {LEADER, F1}
    assert state.log.high_watermark == 7


def test_an_isr_written_for_a_proposal_this_leader_forgot_is_taken(tmp_path: Path) -> None:
    """A restarted process's shard gets its last role (ISR [1, 2], partition epoch 0) and
    then the answer to an expansion its previous life proposed: the controller wrote
    [1, 2, 3] at partition epoch 1 and elects from it, so the high watermark waits for 3."""
    log = new_log(tmp_path / "t-0")
    state = PartitionState.hosted(log, LEADER, 1, LAG_MS)
    state.become_leader(0, [LEADER, F1], [LEADER, F1, F2], partition_epoch=0, now_ms=0)
    append(state, 4)
    state.on_follower_fetch(F1, 2, 1)
    assert state.pending is None and state.log.high_watermark == 2
    # not newer, another leader epoch, or without this leader: ignored
    assert state.on_isr_result(0, 0, 0, [LEADER, F1, F2], 0, 2) == "stale"
    assert state.on_isr_result(1, 0, 0, [LEADER, F1, F2], 1, 2) == "stale"
    assert state.on_isr_result(0, 0, 0, [F1, F2], 1, 2) == "stale"
    assert state.isr == {LEADER, F1} and state.partition_epoch == 0
    assert state.on_isr_result(0, 0, 0, [LEADER, F1, F2], 1, 2) == "applied"
    assert state.isr == {LEADER, F1, F2} and state.partition_epoch == 1
    state.on_follower_fetch(F1, 4, 3)
    assert state.log.high_watermark == 2  # F2's position is unknown: it holds it
    state.on_follower_fetch(F2, 4, 3)
    assert state.log.high_watermark == 4


def test_expand_needs_the_high_watermark_and_the_epoch_start(tmp_path: Path) -> None:
    log = new_log(tmp_path / "t-0")
    log.append_as_leader(build_batch([b"old"] * 4), 0, 0)
    state = PartitionState.hosted(log, LEADER, 1, LAG_MS)
    state.become_leader(3, [LEADER, F1], [LEADER, F1, F2], partition_epoch=7, now_ms=0)
    assert state.epoch_start_offset == 4
    append(state, 2)
    state.on_follower_fetch(F1, 6, 1)
    assert state.log.high_watermark == 6
    state.on_follower_fetch(F2, 5, 2)
    assert state.isr_expansion(F2) is None  # below the high watermark
    state.on_follower_fetch(F2, 6, 3)
    proposal = state.isr_expansion(F2)
    assert proposal == IsrProposal(3, (LEADER, F1, F2), 7)
    state.propose(proposal)
    assert state.maximal_isr == {LEADER, F1, F2}
    assert not state.has_enough_replicas() or len(state.isr) == 2


def test_no_refused_change_ends_the_leadership_and_a_stale_answer_is_ignored(
        tmp_path: Path) -> None:
    state = leader_state(new_log(tmp_path / "t-0"))
    state.propose(IsrProposal(0, (LEADER, F1), 0))
    assert state.on_isr_result(0, 5, 0, [LEADER], 6) == "stale"
    assert state.pending is not None
    assert state.on_isr_result(0, 0, int(ErrorCode.INELIGIBLE_REPLICA), [], -1, 50) == "retry"
    assert state.pending is None and state.is_leader
    state.followers[F2].last_caught_up_ms = -10_000
    assert state.isr_shrink(1049) is None  # held for PROPOSAL_RETRY_MS after a retry
    assert state.isr_shrink(1050) is not None
    state.propose(IsrProposal(0, (LEADER, F1), 0))
    assert state.on_isr_result(0, 0, int(ErrorCode.INVALID_REQUEST), [], -1, 60) == "held"
    assert state.pending is not None and state.resend_due(10_000) is None
    for code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                 ErrorCode.NEW_LEADER_ELECTED):
        # Kafka's handleAlterPartitionError: a stale leader or partition epoch, or a
        # partition the controller does not know, leaves the change pending, unsent, and
        # the leader leading until a LeaderAndIsr at a higher leader epoch
        assert state.on_isr_result(0, 0, int(code), [], -1, 70) == "held"
        assert state.is_leader and state.pending is not None
        assert state.check_fetch_epoch(0) == 0
        assert state.resend_due(10_000) is None and state.isr_shrink(99_999) is None
    # Kafka's catch-all: sent again, the leader leading, the change pending meanwhile
    assert state.on_isr_result(0, 0, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), [], -1,
                               80) == "resend"
    assert state.is_leader and state.check_fetch_epoch(0) == 0
    assert state.resend_due(80 + PROPOSAL_RETRY_MS) == IsrProposal(0, (LEADER, F1), 0)
    state.become_leader(1, [LEADER, F1, F2], [LEADER, F1, F2], partition_epoch=3)
    assert state.is_leader and state.pending is None


def test_a_change_whose_answer_is_lost_stays_pending_and_is_sent_again(
        tmp_path: Path) -> None:
    """Sim seed 80: an expansion timed out (ZooKeeper down) but was written; the controller
    then elected the added follower. The old leader went back to its ISR of one and
    acknowledged alone what the new leader never had. The proposal stays pending instead:
    the high watermark waits for the follower until the controller's answer is known."""
    log = new_log(tmp_path / "t-0")
    state = PartitionState.hosted(log, LEADER, 1, LAG_MS)
    state.become_leader(1, [LEADER], [LEADER, F1], partition_epoch=1, now_ms=0)
    append(state, 4)
    assert state.log.high_watermark == 4  # alone in its ISR
    state.on_follower_fetch(F1, 4, 10)
    proposal = state.isr_expansion(F1, 10)
    assert proposal == IsrProposal(1, (LEADER, F1), 1)
    state.propose(proposal)
    for code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER,
                 ErrorCode.STALE_BROKER_EPOCH, ErrorCode.UNKNOWN_SERVER_ERROR):
        assert state.on_isr_result(1, 1, int(code), [], -1, 100) == "resend"
        assert state.pending == proposal and state.maximal_isr == {LEADER, F1}
        append(state, 3)
        assert state.log.high_watermark == 4  # F1 may be the next leader: it counts
        assert state.resend_due(1099) is None
        assert state.resend_due(1100) == proposal
        assert state.resend_due(-5000) == proposal  # the clock stepped back
        assert state.isr_expansion(F1, 1100) is None and state.isr_shrink(99_999) is None
        state.propose(proposal)  # sent again
        assert state.resend_due(99_999) is None
    # the answer to the resend: written before, so the controller answers with its state
    assert state.on_isr_result(1, 1, 0, [LEADER, F1], 2) == "applied"
    assert state.isr == {LEADER, F1} and state.partition_epoch == 2 and state.pending is None
    assert state.log.high_watermark == 4
    state.on_follower_fetch(F1, state.log.log_end_offset, 200)
    assert state.log.high_watermark == state.log.log_end_offset


def test_a_held_shrink_keeps_the_high_watermark_under_a_silent_follower(
        tmp_path: Path) -> None:
    """A zombie leader: another was elected and its followers fetch from the new one. Its
    shrink of both, refused FENCED_LEADER_EPOCH, is held: one follower fetching to the end
    does not let the high watermark pass what the silent one has, so nothing the new
    leader may lack is acknowledged with acks=all."""
    state = leader_state(new_log(tmp_path / "t-0"))
    append(state, 5)
    state.on_follower_fetch(F1, 3, 100)
    state.on_follower_fetch(F2, 3, 100)
    assert state.log.high_watermark == 3
    proposal = state.isr_shrink(LAG_MS + 1)
    assert proposal == IsrProposal(0, (LEADER,), 0)
    state.propose(proposal)
    assert state.on_isr_result(0, 0, int(ErrorCode.FENCED_LEADER_EPOCH), [], -1,
                               LAG_MS + 2) == "held"
    assert state.is_leader and state.isr == {LEADER, F1, F2}
    append(state, 5)
    state.on_follower_fetch(F2, 10, LAG_MS + 3)
    assert state.log.high_watermark == 3  # F1 silent at 3: it holds it
    assert state.resend_due(99_999) is None and state.isr_shrink(99_999) is None
    assert state.maximal_isr == {LEADER, F1, F2}


def test_resends_in_a_row_are_counted_until_the_proposal_settles(tmp_path: Path) -> None:
    """The shard logs a resend at the 1st, 2nd, 4th... answer in a row that left it
    unknown (a controller refusing for a long while is asked every second): the count
    starts again once an answer settles the proposal, or a new one is made."""
    state = leader_state(new_log(tmp_path / "t-0"))
    proposal = IsrProposal(0, (LEADER, F1), 0)
    state.propose(proposal)
    assert state.resends_in_row == 0
    for n in range(1, 4):
        assert state.on_isr_result(0, 0, int(ErrorCode.STALE_BROKER_EPOCH), [], -1,
                                   n * 2000) == "resend"
        assert state.resends_in_row == n
        state.propose(proposal)  # sent again: the same count
        assert state.resends_in_row == n
    assert state.on_isr_result(0, 0, int(ErrorCode.FENCED_LEADER_EPOCH), [], -1,
                               9000) == "held"
    assert state.resends_in_row == 0
    state.become_leader(1, [LEADER, F1, F2], [LEADER, F1, F2], partition_epoch=1)
    state.propose(IsrProposal(1, (LEADER, F1), 1))
    assert state.on_isr_result(1, 1, int(ErrorCode.NOT_CONTROLLER), [], -1, 10_000) == "resend"
    assert state.resends_in_row == 1
    state.propose(IsrProposal(1, (LEADER, F2), 1))  # another change: counted anew
    assert state.resends_in_row == 0
    assert state.on_isr_result(1, 1, int(ErrorCode.NOT_CONTROLLER), [], -1, 11_000) == "resend"
    assert state.on_isr_result(1, 1, 0, [LEADER, F2], 2, 12_000) == "applied"
    assert state.resends_in_row == 0


@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
def test_a_leader_refused_as_not_leader_or_unknown_keeps_leading_over_the_larger_isr(
        tmp_path: Path, code: ErrorCode) -> None:
    """Kafka's handleAlterPartitionError ends no leadership: NOT_LEADER_OR_FOLLOWER is
    sent again (its catch-all), UNKNOWN_TOPIC_OR_PARTITION held until new metadata. Either
    way the expansion stays pending: the leader serves, and acks=all waits for the
    follower it asked to add, whose change the controller may yet write."""
    log = new_log(tmp_path / "t-0")
    state = PartitionState.hosted(log, LEADER, 1, LAG_MS)
    state.become_leader(1, [LEADER], [LEADER, F1], partition_epoch=1, now_ms=0)
    state.on_follower_fetch(F1, 0, 10)
    state.propose(IsrProposal(1, (LEADER, F1), 1))
    assert state.on_isr_result(1, 1, int(ErrorCode.REQUEST_TIMED_OUT), [], -1, 100) == "resend"
    state.propose(IsrProposal(1, (LEADER, F1), 1))
    outcome = state.on_isr_result(1, 1, int(code), [], -1, 1200)
    assert outcome == ("resend" if code == ErrorCode.NOT_LEADER_OR_FOLLOWER else "held")
    assert state.is_leader and state.check_fetch_epoch(1) == 0
    assert state.maximal_isr == {LEADER, F1} and state.isr == {LEADER}
    append(state, 2)
    assert state.log.high_watermark == 0  # F1 has none of it: not acknowledged alone
    assert state.resend_due(1200 + PROPOSAL_RETRY_MS) == (
        IsrProposal(1, (LEADER, F1), 1) if outcome == "resend" else None)
    state.on_follower_fetch(F1, 2, 1300)
    assert state.log.high_watermark == 2
    state.become_follower(F1, 2, [F1], [LEADER, F1], partition_epoch=3)
    assert state.pending is None and state.resend_at_ms is None


def test_fetch_epoch_checks(tmp_path: Path) -> None:
    state = leader_state(new_log(tmp_path / "t-0"))
    state.become_leader(4, [LEADER], [LEADER, F1], partition_epoch=1)
    assert state.check_fetch_epoch(4) == 0
    assert state.check_fetch_epoch(-1) == 0
    assert state.check_fetch_epoch(3) == int(ErrorCode.FENCED_LEADER_EPOCH)
    assert state.check_fetch_epoch(5) == int(ErrorCode.UNKNOWN_LEADER_EPOCH)


class ReplicaMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = scratch_dir("replica-state-")  # in memory: tests/fixtures/scratch.py
        self.now = 0
        self.true_leo = {F1: 0, F2: 0}
        self.last_hw = 0
        # what the controller wrote: the ISR it may elect from, and its partition epoch
        self.controller_isr: tuple[int, ...] = (LEADER, F1, F2)
        self.controller_epoch = 0

    def teardown(self) -> None:
        self.state.log.close_without_flush()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @initialize(isr=st.sampled_from([(LEADER, F1, F2), (LEADER, F1), (LEADER,)]))
    def start(self, isr: tuple[int, ...]) -> None:
        self.state = PartitionState.hosted(new_log(self.tmp / "t-0"), LEADER, 2, LAG_MS)
        self.state.become_leader(0, list(isr), [LEADER, F1, F2], partition_epoch=0)
        self.controller_isr = isr

    @rule(n=st.integers(1, 5))
    def leader_appends(self, n: int) -> None:
        append(self.state, n)

    @rule(follower=st.sampled_from([F1, F2]), share=st.sampled_from([0.0, 0.4, 1.0]))
    def follower_copies(self, follower: int, share: float) -> None:
        leo = self.state.log.log_end_offset
        have = self.true_leo[follower]
        self.true_leo[follower] = have + int((leo - have) * share)

    @rule(follower=st.sampled_from([F1, F2]))
    def follower_fetches(self, follower: int) -> None:
        self.state.on_follower_fetch(follower, self.true_leo[follower], self.now)
        proposal = self.state.isr_expansion(follower)
        if proposal is not None:
            self.state.propose(proposal)

    @rule(ms=st.integers(1, 2 * LAG_MS))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        again = self.state.resend_due(self.now)
        if again is not None:
            self.state.propose(again)
        proposal = self.state.isr_shrink(self.now)
        if proposal is not None:
            self.state.propose(proposal)

    @rule(how=st.sampled_from(["answered", "lost after the write", "lost before the write",
                               "not applied"]))
    def controller_answers(self, how: str) -> None:
        """The controller's side of AlterPartition, as controller_state checks it: a
        proposal at its partition epoch is written; a stale one asking for the ISR it has
        already is answered with it (Kafka's equalsAllowStalePartitionEpoch)."""
        pending = self.state.pending
        if pending is None or self.state.resend_at_ms is not None:
            return  # nothing on its way
        le, pe = pending.leader_epoch, pending.partition_epoch
        if how == "not applied":
            if pe == self.controller_epoch:  # INELIGIBLE_REPLICA is checked after the epoch
                assert self.state.on_isr_result(le, pe, int(ErrorCode.INELIGIBLE_REPLICA), [],
                                                -1, self.now) == "retry"
            return
        if how == "lost before the write":
            assert self.state.on_isr_result(le, pe, int(ErrorCode.REQUEST_TIMED_OUT), [], -1,
                                            self.now) == "resend"
            return
        if pe == self.controller_epoch:
            self.controller_isr = pending.new_isr
            self.controller_epoch += 1
        else:
            assert pe < self.controller_epoch and pending.new_isr == self.controller_isr
        if how == "lost after the write":
            assert self.state.on_isr_result(le, pe, int(ErrorCode.REQUEST_TIMED_OUT), [], -1,
                                            self.now) == "resend"
        else:
            assert self.state.on_isr_result(le, pe, 0, list(self.controller_isr),
                                            self.controller_epoch, self.now) == "applied"

    @invariant()
    def high_watermark_never_goes_back(self) -> None:
        hw = self.state.log.high_watermark
        assert hw >= self.last_hw
        self.last_hw = hw

    @invariant()
    def every_replica_counted_holds_what_is_below_the_high_watermark(self) -> None:
        hw = self.state.log.high_watermark
        assert hw <= self.state.log.log_end_offset
        for replica in self.state.maximal_isr | self.state.isr:
            if replica != LEADER:
                assert self.true_leo[replica] >= hw, (replica, self.true_leo, hw)

    @invariant()
    def whoever_the_controller_may_elect_holds_what_is_below_the_high_watermark(self) -> None:
        hw = self.state.log.high_watermark
        for replica in self.controller_isr:
            if replica != LEADER:
                assert self.true_leo[replica] >= hw, (replica, self.controller_isr, hw)

    @invariant()
    def the_leader_never_leaves_the_isr(self) -> None:
        assert LEADER in self.state.isr


ReplicaMachine.TestCase.settings = settings(
    max_examples=250, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestReplicaMachine = ReplicaMachine.TestCase


def test_a_follower_rebuilds_producer_state_so_as_leader_it_refuses_duplicates(
        tmp_path: Path) -> None:
    """appendAsFollower keeps offsets, epochs and producer ids; the producer state it builds
    makes a retried idempotent batch a duplicate once the follower leads."""
    leader = new_log(tmp_path / "a" / "t-0")
    follower = new_log(tmp_path / "b" / "t-0")
    client_batch = build_batch([b"once", b"twice?"], producer_id=7, producer_epoch=0,
                               base_sequence=0)
    leader.append_as_leader(build_batch([b"plain"]), 3, 0)
    leader.append_as_leader(client_batch, 3, 0)
    replicated = bytes(leader.read(0, 1 << 20, None, True).records)
    follower.append_as_follower(replicated, 0)
    assert bytes(follower.read(0, 1 << 20, None, True).records) == replicated
    assert follower.latest_epoch == 3 and follower.log_end_offset == 3
    again = follower.append_as_leader(client_batch, 4, 0)
    assert (again.first_offset, again.last_offset) == (1, 2)
    assert follower.log_end_offset == 3


def test_a_clients_leader_epoch_is_checked_before_the_leadership(tmp_path: Path) -> None:
    """Kafka's Partition.getLocalLog: an older client epoch is FENCED_LEADER_EPOCH and a
    newer one UNKNOWN_LEADER_EPOCH whether this replica leads or follows; at its epoch (or
    with none, -1) a follower is NOT_LEADER_OR_FOLLOWER. Then the epochs' ends: the log
    end for the current epoch, where an older one ended, the asked epoch with the first
    start when it is below every known one (LeaderEpochFileCache.endOffsetFor)."""
    fenced, unknown = int(ErrorCode.FENCED_LEADER_EPOCH), int(ErrorCode.UNKNOWN_LEADER_EPOCH)
    state = PartitionState.hosted(new_log(tmp_path / "t-0"), LEADER, 2, LAG_MS)
    state.become_leader(2, [LEADER, F1], [LEADER, F1], partition_epoch=0)
    append(state, 4)
    state.become_leader(3, [LEADER, F1], [LEADER, F1], partition_epoch=1)
    append(state, 3)
    assert [state.check_client_epoch(e) for e in (-1, 3, 2, 4)] == [0, 0, fenced, unknown]
    assert [state.log.end_offset_for_epoch(e) for e in (3, 2, 1, 4, -1)] == [
        (3, 7), (2, 4), (1, 0), (-1, -1), (-1, -1)]
    state.become_follower(F1, 4, [F1], [LEADER, F1], partition_epoch=2)
    not_leader = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert [state.check_client_epoch(e) for e in (-1, 4, 3, 5)] == [
        not_leader, not_leader, fenced, unknown]
