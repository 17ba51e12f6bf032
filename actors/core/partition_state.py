"""A partition's replica state on the node that hosts it: leader or follower.

The log is the durable part; this adds who leads, the leader epoch, the ISR
and the followers' log end offsets, and computes the high watermark as the
minimum log end offset over the ISR. A single node is a leader whose ISR is
itself; replication adds followers without changing this shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.core.partition_log import PartitionLog
from wire.broker_messages import PartitionStatus, SegmentPosition


@dataclass
class FollowerState:
    log_end_offset: int = 0
    last_caught_up_ms: int = 0


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

    @classmethod
    def leader_alone(cls, log: PartitionLog, broker_id: int, min_isr: int) -> PartitionState:
        epoch = max(0, log.latest_epoch)
        if log.latest_epoch < 0:
            log.assign_epoch_start_offset(epoch, log.log_end_offset)
        state = cls(log, broker_id, broker_id, epoch, [broker_id], {broker_id}, min_isr)
        state.maybe_increment_high_watermark()
        return state

    @classmethod
    def hosted(cls, log: PartitionLog, broker_id: int, min_isr: int) -> PartitionState:
        """A replica the controller has not given a role yet (cluster mode): it leads nothing."""
        return cls(log, broker_id, -1, -1, [], set(), min_isr)

    def become_leader(self, leader_epoch: int, isr: list[int], replicas: list[int]) -> None:
        """LeaderAndIsr made this node the leader at ``leader_epoch`` (Kafka's makeLeader).

        The new epoch starts at the log end; followers' positions are forgotten
        (they report them again with their next fetch).
        """
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.isr = set(isr)
        self.replicas = list(replicas)
        self.followers = {}
        if leader_epoch > self.log.latest_epoch:
            self.log.assign_epoch_start_offset(leader_epoch, self.log.log_end_offset)
        self.maybe_increment_high_watermark()

    def become_follower(self, leader: int, leader_epoch: int, isr: list[int],
                        replicas: list[int]) -> None:
        """LeaderAndIsr made ``leader`` (maybe none, -1) the leader: this node only holds its log.

        Truncation by leader epoch and fetching from the leader are the
        replication's (issue 15), started by the ReplicaManager's fetcher hook.
        """
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.isr = set(isr)
        self.replicas = list(replicas)
        self.followers = {}

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def has_enough_replicas(self) -> bool:
        return len(self.isr) >= self.min_insync_replicas

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the ISR; it never goes back."""
        ends = [self.log.log_end_offset]
        ends += [f.log_end_offset for r, f in self.followers.items() if r in self.isr]
        new_hw = min(ends)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    def on_leader_append(self) -> bool:
        return self.maybe_increment_high_watermark()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower's fetch at X acknowledges everything below X.

        Only an assigned replica counts: a fetch naming any other id must not
        join the ISR (it would hold the high watermark back for good).
        """
        if replica_id not in self.replicas or replica_id == self.broker_id:
            return False
        follower = self.followers.setdefault(replica_id, FollowerState())
        follower.log_end_offset = fetch_offset
        if fetch_offset >= self.log.log_end_offset:
            follower.last_caught_up_ms = now_ms
        if replica_id not in self.isr and fetch_offset >= self.log.high_watermark:
            self.isr.add(replica_id)
        return self.maybe_increment_high_watermark()

    def status(self) -> PartitionStatus:
        """What a waiting produce or fetch needs to know (PartitionChanged carries it)."""
        log = self.log
        hw = log.high_watermark_metadata
        leo = log.log_end_offset_metadata
        return PartitionStatus(
            log.topic, log.partition, log.high_watermark, log.log_end_offset, self.is_leader,
            self.leader_epoch, len(self.isr), self.min_insync_replicas,
            SegmentPosition(hw.segment_base_offset, hw.relative_position_in_segment),
            SegmentPosition(leo.segment_base_offset, leo.relative_position_in_segment))

    @staticmethod
    def gone_status(topic: str, partition: int) -> PartitionStatus:
        """The status of a partition this node no longer hosts."""
        return PartitionStatus(topic, partition, -1, -1, False, -1, 0, 0,
                               SegmentPosition(0, 0), SegmentPosition(0, 0))
