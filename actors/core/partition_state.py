"""A partition's replica state on the node that hosts it: leader or follower.

The log is the durable part; this adds who leads, the leader epoch, the ISR
and, on the leader, the followers' log end offsets (Kafka's Partition and
its replica states):

* the high watermark is the minimum log end offset over the ISR and never
  goes back; a follower whose position is not known yet (no fetch at this
  epoch) holds it where it is;
* ISR changes are proposed, not made: while one is pending (KIP-497's
  AlterPartition on its way to the controller) the high watermark is taken
  over the larger of the two sets, so a shrink never acknowledges what a
  dropped follower may not have; the committed ISR (what ``min.insync.replicas``
  is checked against) changes only when the controller's answer comes;
* a proposal stays pending (and the high watermark over the larger set) until
  the controller says what became of it: an answer that leaves it unknown
  (the request timed out, the controller moved or resigned while writing it)
  sends the same proposal again, since the change may be in ZooKeeper already
  and the controller may elect from it; only a refusal that says nothing was
  written (INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED) goes back to the
  committed ISR, as Kafka's Partition does;
* a follower leaves the ISR when it has not caught up to the leader's log
  end within ``replica.lag.time.max.ms``, and is proposed back once it reaches
  the high watermark and the start of the current leader epoch;
* no answer to an ISR change ends the leadership (Kafka's
  handleAlterPartitionError): one that will not change by asking again (a
  stale leader or partition epoch, INVALID_REQUEST, a partition or topic id
  the controller does not know) leads on, the change held, unsent, until a
  LeaderAndIsr at a higher leader epoch or a StopReplica (HELD_ERRORS); any
  other but those and the two that say nothing was written, a
  NOT_LEADER_OR_FOLLOWER among them, is sent again.

A single node is a leader whose ISR is itself. Time comes in as ``now_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.core.partition_log import PartitionLog
from wire.broker_messages import PartitionStatus, SegmentPosition
from wire.errors import ErrorCode

UNKNOWN_OFFSET = -1
# The most a DeleteRecords answer waits for the ISR's followers to move their log start
# (Kafka's DelayedDeleteRecords waits the request's timeout_ms, uncapped); past it the
# partition answers REQUEST_TIMED_OUT. A follower that stops fetching may stay in the ISR
# as long (replica.lag.time.max.ms, 30 s by default) unless its broker's session expires.
DELETE_RECORDS_WAIT_CAP_MS = 30_000


def delete_records_wait_ms(timeout_ms: int) -> int:
    """How long a DeleteRecords of this ``timeout_ms`` may wait for the followers."""
    return min(max(0, int(timeout_ms)), DELETE_RECORDS_WAIT_CAP_MS)
# After a proposal that was not written, or whose fate is unknown (no controller, timed
# out), wait this long before proposing (or sending it) again: expansions are checked on
# every follower fetch.
PROPOSAL_RETRY_MS = 1000

# Refusals that say the controller wrote nothing, at the partition epoch the proposal
# carries (it checked that first): no controller, earlier or later, applied this change,
# so the committed ISR is the ISR (Kafka's handleAlterPartitionError resets to the last
# committed state on these two alone).
NOT_APPLIED_ERRORS = frozenset({
    int(ErrorCode.INELIGIBLE_REPLICA),
    int(ErrorCode.OPERATION_NOT_ATTEMPTED),
})

# Refusals that will not change by asking again (the leader's view of the assignment, its
# leader epoch or its partition epoch is behind, or the controller does not know the
# partition): the proposal stays pending, unsent, and no other ISR change is proposed, until
# a LeaderAndIsr at a HIGHER leader epoch (one at the same epoch is refused by
# ReplicaFencing) or a StopReplica. The leader goes on leading meanwhile, its high
# watermark over the larger ISR, as Kafka's handleAlterPartitionError leaves it
# (Partition.scala, 4b75265: these answer "do not retry", the pending state kept): a stale
# epoch is no reason to refuse produces, as a newer leader, if there is one, does not fetch
# from this one, so nothing past the high watermark is acknowledged with acks=all.
# UNKNOWN_TOPIC_OR_PARTITION (the topic is being deleted, or its znodes went from under
# the controller) and UNKNOWN_TOPIC_ID (never answered by actorlog's controller, which
# takes names) wait for the metadata the same way; NEW_LEADER_ELECTED (KRaft's, the change
# made but this replica reassigned away) too. No controller answers the refusal with a
# LeaderAndIsr (neither Kafka's ZooKeeper controller nor actorlog's): after
# INVALID_UPDATE_VERSION with the leader epoch unchanged, a held shrink of a follower that
# is slow but alive (its broker registered) keeps acks=all waiting for that follower until
# something bumps the leader epoch (an election, a reassignment, a controlled shutdown,
# the controller taking an offline replica out of the ISR), as in Kafka.
#
# Every other refusal, NOT_LEADER_OR_FOLLOWER and a partition's NOT_CONTROLLER among them,
# leaves the change's fate unknown and sends it again ("resend"): Kafka's catch-all, which
# retries. Kafka's ZooKeeper controller never answers NOT_LEADER_OR_FOLLOWER (a stale
# leader is told FENCED_LEADER_EPOCH); actorlog's answers it only to a broker that is not
# the leader at the current leader epoch, which a LeaderAndIsr corrects. Kafka resends at
# once; actorlog after PROPOSAL_RETRY_MS, so that a controller that keeps refusing is not
# asked in a tight loop.
HELD_ERRORS = frozenset({
    int(ErrorCode.INVALID_REQUEST),
    int(ErrorCode.FENCED_LEADER_EPOCH),
    int(ErrorCode.INVALID_UPDATE_VERSION),
    int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    int(ErrorCode.UNKNOWN_TOPIC_ID),
    int(ErrorCode.NEW_LEADER_ELECTED),
})


@dataclass
class FollowerState:
    """The leader's view of one follower (Kafka's ReplicaState)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    log_start_offset: int = UNKNOWN_OFFSET  # as the follower's last fetch said


@dataclass(frozen=True)
class IsrProposal:
    """An ISR change the leader asks the controller for."""

    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int


@dataclass
class PartitionState:
    log: PartitionLog
    broker_id: int
    leader_id: int
    leader_epoch: int
    replicas: list[int]
    isr: set[int]
    min_insync_replicas: int
    followers: dict[int, FollowerState] = field(default_factory=dict)
    partition_epoch: int = -1
    lag_time_max_ms: int = 30000
    pending: IsrProposal | None = None
    epoch_start_offset: int = 0
    proposals_held_until_ms: int = 0
    # when the pending proposal, whose answer left its fate unknown, is sent again
    resend_at_ms: int | None = None
    # answers in a row that left the pending proposal's fate unknown (sent again every
    # PROPOSAL_RETRY_MS for as long as they come): the shard logs the 1st, 2nd, 4th...
    resends_in_row: int = 0
    # the leader epoch at which this node's unbroken leadership began (-1: not leading)
    leader_since_epoch: int = -1
    # counts the changes a waiting DeleteRecords checks again for (a role, an ISR answer,
    # a follower's log start): the shard skips a partition this did not move for
    changes: int = 0

    @classmethod
    def leader_alone(cls, log: PartitionLog, broker_id: int, min_isr: int) -> PartitionState:
        epoch = max(0, log.latest_epoch)
        if log.latest_epoch < 0:
            log.assign_epoch_start_offset(epoch, log.log_end_offset)
        state = cls(log, broker_id, broker_id, epoch, [broker_id], {broker_id}, min_isr)
        state.maybe_increment_high_watermark()
        return state

    @classmethod
    def hosted(cls, log: PartitionLog, broker_id: int, min_isr: int,
               lag_time_max_ms: int = 30000) -> PartitionState:
        """A replica the controller has not given a role yet (cluster mode): it leads nothing."""
        return cls(log, broker_id, -1, -1, [], set(), min_isr, lag_time_max_ms=lag_time_max_ms)

    # ------------------------------------------------------------ roles
    def become_leader(self, leader_epoch: int, isr: list[int], replicas: list[int],
                      partition_epoch: int = -1, now_ms: int = 0,
                      pending: IsrProposal | None = None) -> None:
        """LeaderAndIsr made this node the leader at ``leader_epoch`` (Kafka's makeLeader).

        The new epoch starts at the log end. Followers' positions are unknown
        until they fetch at this epoch; the ISR members count as caught up now,
        so none is dropped before it had ``replica.lag.time.max.ms`` to fetch.

        Leading at the epoch right after the one this node led (a controller's ISR
        change: a follower died or shut down) continues its leadership: nobody else
        led in between, so what it appended is still its log, and a produce waiting
        on it is not refused for the new epoch (Kafka completes it too). Any other
        epoch starts a new leadership.
        """
        self.changes += 1
        continued = self.is_leader and leader_epoch == self.leader_epoch + 1
        if not continued:
            self.leader_since_epoch = leader_epoch
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.isr = set(isr)
        self.replicas = list(replicas)
        self.partition_epoch = partition_epoch
        self.pending = pending  # None from a LeaderAndIsr: a new epoch proposes anew
        self.resend_at_ms = None
        self.resends_in_row = 0
        self.proposals_held_until_ms = 0
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
                          for r in replicas if r != self.broker_id}
        if leader_epoch > self.log.latest_epoch:
            self.log.assign_epoch_start_offset(leader_epoch, self.log.log_end_offset)
        self.epoch_start_offset = self._start_of(leader_epoch)
        self.maybe_increment_high_watermark()

    def _start_of(self, epoch: int) -> int:
        for entry_epoch, start in self.log.epoch_cache.entries:
            if entry_epoch == epoch:
                return start
        return self.log.log_end_offset

    def become_follower(self, leader: int, leader_epoch: int, isr: list[int],
                        replicas: list[int], partition_epoch: int = -1) -> None:
        """LeaderAndIsr made ``leader`` (maybe none, -1) the leader.

        The log is not touched here: the ReplicaFetcher's first fetch finds
        any divergence from the new leader (KIP-320) and the shard truncates
        then, never below the high watermark without it.
        """
        self.changes += 1
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.isr = set(isr)
        self.replicas = list(replicas)
        self.partition_epoch = partition_epoch
        self.followers = {}
        self.pending = None
        self.resend_at_ms = None
        self.resends_in_row = 0

    def restore_leader(self, leader_epoch: int, isr: list[int], replicas: list[int],
                       partition_epoch: int, now_ms: int, *,
                       pending: IsrProposal | None = None, resend: bool = False) -> None:
        """The last role its ReplicaManager gave, applied again after this replica's memory
        was lost (a crash, a restarted process): the leader at ``leader_epoch`` as
        ``become_leader``, but with what the ReplicaManager knows happened since.

        ``pending``: the ISR proposal whose outcome is not known yet, pending again
        before the high watermark is computed, so that it goes over the larger ISR (the
        controller may have written it and elect from it); ``resend``: no answer is on
        its way, send it again (``resend_due``).
        """
        self.become_leader(leader_epoch, isr, replicas, partition_epoch, now_ms,
                           pending=pending)
        if pending is not None and resend:
            self.resend_at_ms = now_ms

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def has_enough_replicas(self) -> bool:
        return len(self.isr) >= self.min_insync_replicas

    @property
    def maximal_isr(self) -> set[int]:
        """The ISR the high watermark is computed over: the larger one while a change is
        pending (KIP-497)."""
        if self.pending is None:
            return self.isr
        return self.isr | set(self.pending.new_isr)

    # ------------------------------------------------------------ high watermark
    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the (maximal) ISR; it never goes back."""
        # log_end_offset and maximal_isr, inline: this runs for every produce
        new_hw = self.log.segments[-1].next_offset
        for replica in (self.isr if self.pending is None else self.maximal_isr):
            if replica == self.broker_id:
                continue
            follower = self.followers.get(replica)
            new_hw = min(new_hw, follower.log_end_offset if follower else UNKNOWN_OFFSET)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    def on_leader_append(self) -> bool:
        return self.maybe_increment_high_watermark()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                          log_start_offset: int = UNKNOWN_OFFSET) -> bool:
        """A follower's fetch at X acknowledges everything below X (Kafka's
        updateFollowerFetchState); True if the high watermark moved.

        Only an assigned replica counts: a fetch naming any other id must not
        hold the high watermark or join the ISR.
        """
        if replica_id not in self.replicas or replica_id == self.broker_id:
            return False
        follower = self.followers.setdefault(replica_id, FollowerState())
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_log_end_offset >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.last_fetch_leader_log_end_offset = leader_end
        follower.last_fetch_ms = now_ms
        follower.log_end_offset = fetch_offset
        if follower.log_start_offset != log_start_offset:
            self.changes += 1
        follower.log_start_offset = log_start_offset
        return self.maybe_increment_high_watermark()

    def low_watermark(self) -> int:
        """The smallest log start among the leader and its ISR's followers, as their last
        fetches said; a follower that named none yet holds it at -1.

        Kafka's lowWatermarkIfLeader counts every replica whose broker is alive, in the ISR
        or not; the shard does not know which brokers live, so this counts the ISR only.
        The difference: a replica out of the ISR that an unclean election makes leader, or
        one that rejoins the ISR before its next fetch says its moved log start, can bring
        back records a DeleteRecords was answered for."""
        low = self.log.log_start_offset
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            follower = self.followers.get(replica)
            low = min(low, follower.log_start_offset if follower is not None else UNKNOWN_OFFSET)
        return low

    # ------------------------------------------------------------ fetch checks
    def check_fetch_epoch(self, current_leader_epoch: int) -> int:
        """The error a fetch at ``current_leader_epoch`` gets (0: none); -1 is not checked."""
        if not self.is_leader:
            return int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return int(ErrorCode.NONE)
        if current_leader_epoch < self.leader_epoch:
            return int(ErrorCode.FENCED_LEADER_EPOCH)
        return int(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def check_client_epoch(self, current_leader_epoch: int) -> int:
        """The error a client's Fetch, ListOffsets or OffsetForLeaderEpoch at
        ``current_leader_epoch`` gets here (0: none; -1: the client sent none).

        Kafka's order (Partition.getLocalLog): the epoch is compared first, with this
        replica's epoch whether it leads or not, so a client behind the times is told
        FENCED_LEADER_EPOCH and one ahead of this replica UNKNOWN_LEADER_EPOCH; only at the
        same epoch does a replica that does not lead answer NOT_LEADER_OR_FOLLOWER.
        """
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            return int(ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < self.leader_epoch
                       else ErrorCode.UNKNOWN_LEADER_EPOCH)
        return int(ErrorCode.NONE if self.is_leader else ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """(epoch, end offset) when the follower's log diverges from this one (KIP-320):
        the leader's end of the follower's last epoch is below the fetch offset, or the
        leader never had that epoch. None when the fetch continues this log."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if end < fetch_offset or epoch < last_fetched_epoch:
            return epoch, end
        return None

    # ------------------------------------------------------------ ISR changes
    def _may_propose(self, now_ms: int) -> bool:
        return (self.is_leader and self.pending is None and self.partition_epoch >= 0
                and now_ms >= self.proposals_held_until_ms)

    def isr_expansion(self, replica_id: int, now_ms: int = 0) -> IsrProposal | None:
        """The ISR with ``replica_id`` back in, if it has caught up (Kafka's isFollowerInSync):
        its log end reached the high watermark and the start of this leader epoch."""
        if (not self._may_propose(now_ms) or replica_id in self.isr
                or replica_id not in self.replicas):
            return None
        follower = self.followers.get(replica_id)
        if follower is None:
            return None
        end = follower.log_end_offset
        if end < self.log.high_watermark or end < self.epoch_start_offset:
            return None
        return IsrProposal(self.leader_epoch, tuple(sorted(self.isr | {replica_id})),
                           self.partition_epoch)

    def out_of_sync(self, now_ms: int) -> set[int]:
        """ISR followers that have not caught up within ``replica.lag.time.max.ms``."""
        out = set()
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            follower = self.followers.get(replica)
            caught_up = follower.last_caught_up_ms if follower else 0
            if now_ms - caught_up > self.lag_time_max_ms:
                out.add(replica)
        return out

    def isr_shrink(self, now_ms: int) -> IsrProposal | None:
        """The ISR without its lagging followers (never without the leader)."""
        if not self._may_propose(now_ms):
            return None
        out = self.out_of_sync(now_ms)
        if not out:
            return None
        return IsrProposal(self.leader_epoch, tuple(sorted(self.isr - out)), self.partition_epoch)

    def propose(self, proposal: IsrProposal) -> None:
        """The proposal is on its way: the high watermark counts the larger set meanwhile."""
        if proposal != self.pending:
            self.resends_in_row = 0
        self.pending = proposal
        self.resend_at_ms = None

    def resend_due(self, now_ms: int) -> IsrProposal | None:
        """The pending proposal when it is time to send it again (its last answer left its
        fate unknown); a clock stepped back does not hold it longer than PROPOSAL_RETRY_MS."""
        at = self.resend_at_ms
        if at is None or self.pending is None or not self.is_leader:
            return None
        if now_ms >= at or at - now_ms > PROPOSAL_RETRY_MS:
            return self.pending
        return None

    def on_isr_result(self, proposed_leader_epoch: int, proposed_partition_epoch: int,
                      error_code: int, isr: list[int], partition_epoch: int,
                      now_ms: int = 0) -> str:
        """Apply the controller's answer to the pending proposal.

        Returns what happened: "stale" (not the pending proposal: ignored; but an
        ISR written at this leader epoch, newer than this leader's, is "applied" even
        with nothing pending),
        "applied", "retry" (the controller says it wrote nothing: back to the committed
        ISR, a new proposal after PROPOSAL_RETRY_MS), "held" (refused for good, a stale
        leader or partition epoch or an unknown partition among them: pending, unsent,
        until a LeaderAndIsr at a higher leader epoch, still leading, as Kafka; see
        HELD_ERRORS) or "resend" (any other answer, NOT_LEADER_OR_FOLLOWER among them:
        its fate is unknown, no controller, timed out, the controller moved: the same
        proposal stays pending and is sent again after PROPOSAL_RETRY_MS,
        ``resend_due``). No answer ends the leadership, as in Kafka.

        The high watermark stays over the larger set until the answer is known: a
        change timed out may be in ZooKeeper already, and a controller electing from
        that ISR must find every record below the high watermark in the one it picks
        (sim seed 80: an expansion timed out while ZooKeeper was down, was written,
        the leader's session expired and the controller elected the added follower;
        the old leader, back on its committed ISR of one, acknowledged 47 records alone
        before it learnt it no longer led, and truncated them).
        """
        self.changes += 1  # the ISR may change
        pending = self.pending
        if (pending is None and error_code == int(ErrorCode.NONE) and self.is_leader
                and proposed_leader_epoch == self.leader_epoch
                and partition_epoch > self.partition_epoch and self.broker_id in isr):
            # Written by the controller for this leader epoch, newer than what this leader
            # holds, with nothing pending here: a proposal whose answer came after this
            # leader forgot it (its process restarted and got its last role again, or an
            # earlier send was written after a later one was refused). The controller
            # elects from this ISR: the high watermark goes over it, not an older one.
            self.resend_at_ms = None
            self.isr = set(isr)
            self.partition_epoch = partition_epoch
            self.maybe_increment_high_watermark()
            return "applied"
        if (pending is None or pending.leader_epoch != proposed_leader_epoch
                or pending.partition_epoch != proposed_partition_epoch):
            return "stale"
        resends = self.resends_in_row
        self.resends_in_row = 0  # settled, unless sent again below
        if error_code == int(ErrorCode.NONE):
            self.pending = None
            self.resend_at_ms = None
            self.isr = set(isr)
            self.partition_epoch = partition_epoch
            self.maybe_increment_high_watermark()
            return "applied"
        if error_code in NOT_APPLIED_ERRORS:
            self.pending = None
            self.resend_at_ms = None
            self.proposals_held_until_ms = now_ms + PROPOSAL_RETRY_MS
            # over the committed ISR again: a follower that was to join holds it no more
            self.maybe_increment_high_watermark()
            return "retry"
        if error_code in HELD_ERRORS:
            self.resend_at_ms = None
            return "held"
        self.resends_in_row = resends + 1
        self.resend_at_ms = now_ms + PROPOSAL_RETRY_MS
        return "resend"

    # ------------------------------------------------------------ status
    def status(self) -> PartitionStatus:
        """What a waiting produce or fetch needs to know (PartitionChanged carries it)."""
        log = self.log
        hw = log.high_watermark_metadata
        leo = log.log_end_offset_metadata
        return PartitionStatus(
            log.topic, log.partition, log.high_watermark, log.log_end_offset, self.is_leader,
            self.leader_epoch, len(self.isr), self.min_insync_replicas,
            SegmentPosition(hw.segment_base_offset, hw.relative_position_in_segment),
            SegmentPosition(leo.segment_base_offset, leo.relative_position_in_segment),
            self.leader_since_epoch if self.is_leader else -1)

    @staticmethod
    def gone_status(topic: str, partition: int) -> PartitionStatus:
        """The status of a partition this node no longer hosts."""
        return PartitionStatus(topic, partition, -1, -1, False, -1, 0, 0,
                               SegmentPosition(0, 0), SegmentPosition(0, 0))
