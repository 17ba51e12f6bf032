"""Property test: an acks=-1 produce is answered NONE only when the ISR it counted holds it.

A state machine (hypothesis) drives the leader's replica state (PartitionState on a
real PartitionLog) and the purgatory core that answers its acks=-1 produces, as the
partition shard and the purgatory shard do, with every answer the controller may
give. The leader is broker 1, the replicas [1, 2, 3], ``min.insync.replicas`` 2.
The model knows each follower's true log end (what it really fetched: never past the
leader's log end); the leader knows only the offsets the followers fetch at.

Rules: the leader appends (acks=-1 through ``ProduceWaits``, fed the status at once
as the shard answers ``WatchStatus``; acks=1 without a wait); a follower fetches at an
offset between its log end and the leader's (``on_follower_fetch``, then an
expansion if it caught up); time passes (a resend that is due, a shrink); the
controller answers the pending proposal with any outcome (written, not applied,
held, unknown, or an answer to another proposal), or writes it and the
answer is lost; a new leader epoch with an ISR a correct controller may choose; the
leader loses the partition for a while; the controller elects a follower of its ISR
while this leader is not told (a zombie: the new leader's log end frozen, its fetches
stopped, every later answer a refusal or unknown); the Timer fires a produce's expiry
(also one that crossed its answer). After every step the purgatory gets the
partition's status (``PartitionUpdated``).

Invariants: a produce answered NONE was, at that moment, held by every replica of
the committed ISR of the status that answered it (the leader too) and by every
replica of the ISR the high watermark is computed over, and that ISR had at least
``min.insync.replicas`` replicas; every replica of the ISR the controller wrote (whom
it may elect) holds every record answered NONE; the high watermark never goes back
and never passes the true log end of a replica of the maximal ISR; every produce is
answered exactly once (the ones not answered yet are the ones the purgatory waits on).

It fails when the high watermark is taken over the committed ISR alone, when
DelayedProduce.observe ignores ``isr_size``, or (at most seeds) when an unknown answer
drops the pending proposal (sim seed 80).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors.core.delayed_produce_fetch import (
    PartitionStatus,
    ProducePartitionStatus,
    TopicPartition,
)
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.partition_state import (
    HELD_ERRORS,
    NOT_APPLIED_ERRORS,
    PartitionState,
)
from actors.core.purgatory_core import (
    AnswerProduce,
    CancelExpiry,
    Effect,
    ExpiryDue,
    PartitionUpdated,
    ProduceWaits,
    PurgatoryCore,
    ScheduleExpiry,
    UnwatchStatus,
    WatchStatus,
)
from actors.core.record_batch import build_batch
from tests.fixtures.scratch import scratch_dir
from wire.errors import ErrorCode

LEADER, F1, F2 = 1, 2, 3
REPLICAS = [LEADER, F1, F2]
MIN_ISR = 2
LAG_MS = 1000
TP = TopicPartition("t", 0)
HANDLER = "handler"

# Answers that leave the proposal's fate unknown (timed out, no controller, ...): sent again.
UNKNOWN_ERRORS = (int(ErrorCode.REQUEST_TIMED_OUT), int(ErrorCode.NOT_CONTROLLER),
                  int(ErrorCode.STALE_BROKER_EPOCH), int(ErrorCode.UNKNOWN_SERVER_ERROR))
ERRORS_BY_OUTCOME: dict[str, tuple[int, ...]] = {
    "retry": tuple(sorted(NOT_APPLIED_ERRORS)),
    "held": tuple(sorted(HELD_ERRORS)),
    # Kafka's catch-all retries NOT_LEADER_OR_FOLLOWER too: the leader leads on
    "resend": (*UNKNOWN_ERRORS, int(ErrorCode.NOT_LEADER_OR_FOLLOWER)),
}


@dataclass
class Produce:
    required_offset: int
    leader_epoch: int
    answer: ErrorCode | None = None


class LeaderDurabilityMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = scratch_dir("partition-state-prop-")  # in memory: tests/fixtures/scratch.py
        self.now = 0
        self.true_end = {F1: 0, F2: 0}
        self.last_hw = 0
        # what the controller wrote: the ISR it may elect from, at its partition epoch
        self.controller_isr: tuple[int, ...] = tuple(REPLICAS)
        self.partition_epoch = 0
        self.acknowledged = 0  # every offset below was answered NONE
        self.seen: PartitionStatus | None = None  # the status the purgatory is handling
        self.core = PurgatoryCore("prop")
        self.produces: dict[int, Produce] = {}
        self.next_req_id = 1
        # the Timer: op id -> deadline; a cancelled expiry may still cross its answer
        self.timer: dict[int, int] = {}
        self.crossed: dict[int, int] = {}
        # the follower the controller elected while this leader was not told (a zombie)
        self.elected: int | None = None

    def teardown(self) -> None:
        if hasattr(self, "state"):
            self.state.log.close_without_flush()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        log = PartitionLog.open(self.tmp / "t-0", "t", 0, LogConfig(), 0)
        self.state = PartitionState.hosted(log, LEADER, MIN_ISR, LAG_MS)
        self.state.become_leader(0, REPLICAS, REPLICAS, partition_epoch=0, now_ms=0)
        self._publish()

    # ------------------------------------------------------------ the purgatory
    def _handle(self, event: ProduceWaits | PartitionUpdated | ExpiryDue) -> None:
        self.seen = event.status if isinstance(event, PartitionUpdated) else None
        self._perform(self.core.handle(event, self.now))

    def _perform(self, effects: list[Effect]) -> None:
        for fx in effects:
            if isinstance(fx, WatchStatus):
                # the shard answers a watch at once with its status
                self._handle(PartitionUpdated(self.state.status()))
            elif isinstance(fx, ScheduleExpiry):
                self.timer[fx.op_id] = fx.deadline_ms
            elif isinstance(fx, CancelExpiry):
                deadline = self.timer.pop(fx.op_id)
                self.crossed[fx.op_id] = deadline  # the Timer may have sent it already
            elif isinstance(fx, AnswerProduce):
                self._answered(fx)
            else:
                assert isinstance(fx, UnwatchStatus), fx

    def _answered(self, fx: AnswerProduce) -> None:
        produce = self.produces[fx.req_id]
        assert produce.answer is None, f"produce {fx.req_id} answered twice"
        (tp, response), = fx.outcome.responses.items()
        assert tp == TP
        produce.answer = response.error_code
        event(f"answer {response.error_code.name}")
        if response.error_code != ErrorCode.NONE:
            return
        # Answered NONE by the status the purgatory was given (the state is still there).
        state = self.state
        status = self.seen
        assert status is not None and status == state.status(), (status, state.status())
        required = produce.required_offset
        assert not fx.outcome.timed_out
        # the leadership that appended it (the next epoch with this leader continues it)
        assert status.is_leader
        assert status.leader_since_epoch <= produce.leader_epoch <= status.leader_epoch, (
            status, produce)
        assert status.isr_size == len(state.isr) >= status.min_insync_replicas == MIN_ISR, (
            sorted(state.isr), status)
        assert status.high_watermark >= required
        self.acknowledged = max(self.acknowledged, required)
        pending = state.pending.new_isr if state.pending is not None else None
        event(f"NONE with ISR {sorted(state.isr)}, proposed {pending}")
        holds = self._true_ends()
        for replica in state.isr | state.maximal_isr:
            assert holds[replica] >= required, (
                f"answered NONE for offsets below {required} but replica {replica} of ISR "
                f"{sorted(state.isr)} (maximal {sorted(state.maximal_isr)}) holds only "
                f"{holds[replica]}")

    def _publish(self) -> None:
        """What the shard does when the partition changes: its status to the watchers."""
        self._handle(PartitionUpdated(self.state.status()))

    def _true_ends(self) -> dict[int, int]:
        return {LEADER: self.state.log.log_end_offset, **self.true_end}

    # ------------------------------------------------------------ rules
    @rule(records=st.integers(1, 4), acks=st.sampled_from([-1, -1, 1]),
          timeout_ms=st.integers(0, 4 * LAG_MS))
    def leader_appends(self, records: int, acks: int, timeout_ms: int) -> None:
        """As the partition shard's append: refused when not leading, or (acks=-1) when
        the committed ISR is below min.insync.replicas; else appended, then an acks=-1
        produce waits in the purgatory for the high watermark."""
        state = self.state
        if not state.is_leader or (acks == -1 and not state.has_enough_replicas()):
            self._publish()
            return
        info = state.log.append_as_leader(build_batch([b"x"] * records), state.leader_epoch,
                                          self.now)
        state.on_leader_append()
        if acks == -1:
            req_id = self.next_req_id
            self.next_req_id += 1
            self.produces[req_id] = Produce(info.last_offset + 1, state.leader_epoch)
            row = ProducePartitionStatus(info.last_offset + 1, info.first_offset,
                                         info.log_append_time_ms, info.log_start_offset,
                                         ErrorCode.NONE, state.leader_epoch)
            self._handle(ProduceWaits(HANDLER, req_id, timeout_ms, {TP: row}))
        self._publish()

    @rule(follower=st.sampled_from([F1, F2]), data=st.data())
    def follower_fetches(self, follower: int, data: st.DataObject) -> None:
        """A follower fetches at its log end (never past the leader's), got what it asked
        for before; the leader checks whether it may rejoin the ISR."""
        state = self.state
        if state.is_leader and follower != self.elected:  # else refused, or not asked
            end = state.log.log_end_offset
            offset = data.draw(st.one_of(st.just(end), st.integers(self.true_end[follower], end)),
                               label="offset")
            state.on_follower_fetch(follower, offset, self.now)
            self.true_end[follower] = offset
            proposal = state.isr_expansion(follower, self.now)
            if proposal is not None:
                state.propose(proposal)
        self._publish()

    @rule(ms=st.integers(0, LAG_MS))
    def time_passes(self, ms: int) -> None:
        """The shard's ticks: a proposal whose fate is unknown is sent again when due,
        lagging followers are proposed out."""
        self.now += ms
        state = self.state
        again = state.resend_due(self.now)
        if again is not None:
            state.propose(again)
        proposal = state.isr_shrink(self.now)
        if proposal is not None:
            state.propose(proposal)
        self._publish()

    @precondition(lambda self: self.state.pending is not None)
    @rule(outcome=st.sampled_from(["applied", "applied", "retry", "held", "resend",
                                   "resend", "stale"]),
          data=st.data())
    def controller_answers(self, outcome: str, data: st.DataObject) -> None:
        """The controller's answer to the pending proposal, or to one this leader no longer
        waits for (other epochs: ignored). NONE: it wrote exactly the proposed ISR at the
        next partition epoch (or had written it, on an earlier send whose answer was lost);
        an answer that leaves the fate unknown may come after the write or before it; a
        refusal that says nothing was written comes only before it."""
        state = self.state
        pending = state.pending
        assert pending is not None
        # One proposal at a time within a leader epoch: the controller is past its
        # partition epoch only when an earlier send of it was written.
        written = pending.partition_epoch < self.partition_epoch
        if self.elected is not None:
            # another leads at a higher leader epoch: nothing this one sends is written
            # (FENCED_LEADER_EPOCH, or STALE_BROKER_EPOCH before it registers again)
            if outcome in ("applied", "retry"):
                outcome = "held"
        elif written and pending.new_isr != self.controller_isr:
            # not this leader's last write: the controller refuses it (its partition epoch
            # is stale), a correct leader never sends one
            event("a proposal at a stale partition epoch")
            if outcome in ("applied", "retry"):
                outcome = "held"  # INVALID_UPDATE_VERSION
        elif outcome == "retry" and written:
            outcome = "applied"  # the controller answers a written change with its state
        elif outcome == "applied" and not written:
            assert pending.partition_epoch == self.partition_epoch
            self.controller_isr = pending.new_isr
            self.partition_epoch += 1
        if outcome == "stale":
            shift = data.draw(st.sampled_from([(-1, 0), (0, -1), (0, 1), (1, 0), (-1, -1)]),
                              label="epochs shifted")
            code = data.draw(st.sampled_from([0, *UNKNOWN_ERRORS, *HELD_ERRORS]),
                             label="code")
            isr = data.draw(st.sampled_from([[LEADER], [LEADER, F1], REPLICAS]), label="isr")
            before = (set(state.isr), pending, state.partition_epoch, state.is_leader,
                      state.resend_at_ms)
            got = state.on_isr_result(pending.leader_epoch + shift[0],
                                      pending.partition_epoch + shift[1], code, isr,
                                      pending.partition_epoch + 5, self.now)
            assert got == "stale"
            assert before == (state.isr, state.pending, state.partition_epoch, state.is_leader,
                              state.resend_at_ms)
        elif outcome == "applied":
            assert self.controller_isr == pending.new_isr
            assert self.partition_epoch == pending.partition_epoch + 1
            got = state.on_isr_result(pending.leader_epoch, pending.partition_epoch, 0,
                                      list(self.controller_isr), self.partition_epoch,
                                      self.now)
            assert got == "applied"
            assert state.isr == set(pending.new_isr) and state.pending is None
        else:
            codes = ERRORS_BY_OUTCOME[outcome]
            if self.elected is not None and outcome == "held":
                codes = (int(ErrorCode.FENCED_LEADER_EPOCH),)  # its leader epoch is stale
            code = data.draw(st.sampled_from(codes), label="code")
            got = state.on_isr_result(pending.leader_epoch, pending.partition_epoch, code, [],
                                      -1, self.now)
            assert got == outcome, (code, got, outcome)
        event(f"controller: {outcome}")
        self._publish()

    @precondition(lambda self: self.state.pending is not None and self.elected is None)
    @rule(code=st.sampled_from(UNKNOWN_ERRORS))
    def controller_writes_but_the_answer_is_lost(self, code: int) -> None:
        """The controller writes the pending change, and the leader hears only that its
        fate is unknown (timed out, the controller moved): the controller may now elect
        from the new ISR (sim seed 80)."""
        state = self.state
        pending = state.pending
        assert pending is not None
        if pending.partition_epoch == self.partition_epoch:  # else written already, or stale
            self.controller_isr = pending.new_isr
            self.partition_epoch += 1
        got = state.on_isr_result(pending.leader_epoch, pending.partition_epoch, code, [], -1,
                                  self.now)
        assert got == "resend"
        event("controller: written, answer lost")
        self._publish()

    @precondition(lambda self: self.state.is_leader and self.elected is None
                  and any(r in self.controller_isr for r in (F1, F2)))
    @rule(now=st.sampled_from([True, False, False]), data=st.data())
    def elected_elsewhere_not_told(self, now: bool, data: st.DataObject) -> None:
        """This leader's session expired (a long pause): the controller elects a follower
        of the ISR it wrote, at a higher leader epoch, and the LeaderAndIsr that would make
        this one follow has not come. The new leader stops fetching from it; this one goes
        on leading (no AlterPartition answer ends a leadership, as Kafka): it may take
        acks=1 produces but must answer NONE to no acks=-1 one the new leader lacks."""
        if not now:  # rare enough that most runs keep the leadership changes
            self._publish()
            return
        new = data.draw(st.sampled_from([r for r in (F1, F2) if r in self.controller_isr]),
                        label="new leader")
        self.elected = new
        self.partition_epoch += 1
        self.controller_isr = tuple(r for r in self.controller_isr if r != LEADER)
        event("elected elsewhere, not told")
        self._publish()

    @precondition(lambda self: self.elected is None and (
        not self.state.is_leader
        or self.state.log.log_end_offset > self.state.epoch_start_offset))
    @rule(lead=st.sampled_from([True, True, False]), data=st.data())
    def leader_and_isr(self, lead: bool, data: st.DataObject) -> None:
        """LeaderAndIsr at the next leader epoch, with an ISR a correct controller may
        choose (replicas holding all below the high watermark): this broker leads again,
        or a follower whose log is this one's (no truncation follows) or no one leads; the
        waiting produces are answered NOT_LEADER_OR_FOLLOWER, except that leading again
        continues the leadership: they wait for the new ISR."""
        state = self.state
        hw = state.log.high_watermark
        end = state.log.log_end_offset
        eligible = {r for r in (F1, F2) if self.true_end[r] >= hw}
        choices = [m for m in ({F1}, {F2}, {F1, F2}, set()) if m <= eligible]
        members = data.draw(st.sampled_from(choices), label="isr followers")
        self.partition_epoch += 1
        epoch = state.leader_epoch + 1
        if lead:
            isr = sorted({LEADER, *members})
            state.become_leader(epoch, isr, REPLICAS, self.partition_epoch, self.now)
        else:
            leaders = [-1, *(r for r in (F1, F2) if self.true_end[r] == end)]
            leader = data.draw(st.sampled_from(leaders), label="leader")
            isr = sorted({LEADER, *members} | ({leader} if leader > 0 else set()))
            state.become_follower(leader, epoch, isr, REPLICAS, self.partition_epoch)
        self.controller_isr = tuple(isr)
        self._publish()

    @precondition(lambda self: any(deadline <= self.now for deadline in
                                   [*self.timer.values(), *self.crossed.values()]))
    @rule(data=st.data())
    def timer_fires(self, data: st.DataObject) -> None:
        """The Timer sends an expiry that is due, maybe one that crossed its answer."""
        due = sorted(op for op, deadline in {**self.timer, **self.crossed}.items()
                     if deadline <= self.now)
        if due:
            op_id = data.draw(st.sampled_from(due), label="expiry")
            self.timer.pop(op_id, None)
            self.crossed.pop(op_id, None)
            self._handle(ExpiryDue(op_id))
        self._publish()

    # ------------------------------------------------------------ invariants
    @invariant()
    def high_watermark_never_goes_back_nor_past_a_replica_counted(self) -> None:
        state = self.state
        hw = state.log.high_watermark
        assert hw >= self.last_hw, (hw, self.last_hw)
        self.last_hw = hw
        holds = self._true_ends()
        for replica in state.maximal_isr:
            assert holds[replica] >= hw, (
                f"high watermark {hw} but replica {replica} of the maximal ISR "
                f"{sorted(state.maximal_isr)} holds only {holds[replica]}")

    @invariant()
    def whoever_the_controller_may_elect_holds_every_acknowledged_record(self) -> None:
        """The durability rule itself: the controller elects from the ISR it wrote (maybe a
        change whose answer was lost), and each of its replicas holds what was answered NONE."""
        holds = self._true_ends()
        for replica in self.controller_isr:
            assert holds[replica] >= self.acknowledged, (
                f"offsets below {self.acknowledged} were answered NONE but replica {replica} "
                f"of the controller's ISR {self.controller_isr} holds only {holds[replica]}")

    @invariant()
    def every_produce_is_answered_once_or_still_waits(self) -> None:
        unanswered = [r for r, p in self.produces.items() if p.answer is None]
        assert len(unanswered) == self.core.waiting == len(self.timer), (
            unanswered, self.core.waiting, self.timer)


LeaderDurabilityMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestLeaderDurability = LeaderDurabilityMachine.TestCase
