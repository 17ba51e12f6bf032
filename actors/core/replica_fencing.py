"""Which controller requests a node applies: epochs, as Kafka's ReplicaManager checks them.

A pure core for the ReplicaManager actor. A request from a controller whose
epoch is older than the newest this node has seen is refused whole
(STALE_CONTROLLER_EPOCH): a controller that lost its place must not move
anything. So is one meant for an older registration of this node
(STALE_BROKER_EPOCH, KIP-380): a restarted node ignores what was sent to its
previous life. Within a LeaderAndIsr, each partition is applied only if its
leader epoch is newer than the one the node holds (Kafka's ZooKeeper-era
answer for an equal or older one is STALE_CONTROLLER_EPOCH, per partition),
and only if the node is one of its replicas. A StopReplica naming a leader
epoch older than the node's is ignored for that partition
(FENCED_LEADER_EPOCH, KIP-570).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.core.cluster_model import TopicPartition
from wire.cluster_messages import (
    LeaderAndIsr,
    PartitionErrorRow,
    ReplicaStateRow,
    StopReplica,
    StopReplicaPartition,
)
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)
UNKNOWN_EPOCH = -1


@dataclass
class LeaderAndIsrDecision:
    error_code: int
    rows: list[PartitionErrorRow] = field(default_factory=list)
    accepted: list[ReplicaStateRow] = field(default_factory=list)
    reason: str = ""


@dataclass
class StopReplicaDecision:
    error_code: int
    rows: list[PartitionErrorRow] = field(default_factory=list)
    accepted: list[StopReplicaPartition] = field(default_factory=list)
    reason: str = ""


class ReplicaFencing:
    """The epochs one node has seen: its registration, the controller's, each partition's."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.broker_epoch = UNKNOWN_EPOCH
        self.controller_epoch = UNKNOWN_EPOCH
        self.controller_id = -1
        self.leader_epochs: dict[TopicPartition, int] = {}
        # partitions whose leader epoch a previous life of the ReplicaManager accepted: a
        # LeaderAndIsr at that epoch is accepted once more (that life may have died before
        # it settled it; the shard answers a role it holds without applying it again)
        self.accept_again: set[TopicPartition] = set()

    def carry_over(self, old: ReplicaFencing) -> None:
        """What a crash restart of the ReplicaManager keeps of its previous life's fencing:
        the registration, the newest controller and the leader epochs (a role at an older
        one is still refused; one at the same, accepted once more)."""
        self.register(old.broker_epoch)
        self.controller_epoch = old.controller_epoch
        self.controller_id = old.controller_id
        self.leader_epochs = dict(old.leader_epochs)
        self.accept_again = set(old.leader_epochs)

    @property
    def registered(self) -> bool:
        return self.broker_epoch != UNKNOWN_EPOCH

    def register(self, broker_epoch: int) -> None:
        self.broker_epoch = max(self.broker_epoch, broker_epoch)

    def check(self, controller_id: int, controller_epoch: int, broker_epoch: int
              ) -> tuple[int, str]:
        """(NONE, "") if a request with these epochs may be applied, else the code and why."""
        if controller_epoch < self.controller_epoch:
            return (int(ErrorCode.STALE_CONTROLLER_EPOCH),
                    f"controller {controller_id} has epoch {controller_epoch}, older than "
                    f"epoch {self.controller_epoch} of controller {self.controller_id}")
        if broker_epoch != UNKNOWN_EPOCH and broker_epoch < self.broker_epoch:
            return (int(ErrorCode.STALE_BROKER_EPOCH),
                    f"it was meant for broker epoch {broker_epoch}; this node registered at "
                    f"{self.broker_epoch}")
        if controller_epoch > self.controller_epoch or controller_id != self.controller_id:
            self.controller_epoch = controller_epoch
            self.controller_id = controller_id
        return NONE, ""

    def leader_and_isr(self, request: LeaderAndIsr) -> LeaderAndIsrDecision:
        code, reason = self.check(request.controller_id, request.controller_epoch,
                                  request.broker_epoch)
        if code != NONE:
            return LeaderAndIsrDecision(code, [
                PartitionErrorRow(p.topic, p.partition, code) for p in request.partitions
            ], reason=reason)
        decision = LeaderAndIsrDecision(NONE)
        refused = []
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            if self.broker_id not in p.replicas:
                decision.rows.append(PartitionErrorRow(
                    p.topic, p.partition, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
                refused.append(f"{tp} (not a replica)")
                continue
            current = self.leader_epochs.get(tp, UNKNOWN_EPOCH)
            if p.leader_epoch < current or (p.leader_epoch == current
                                            and tp not in self.accept_again):
                decision.rows.append(PartitionErrorRow(
                    p.topic, p.partition, int(ErrorCode.STALE_CONTROLLER_EPOCH)))
                refused.append(f"{tp} (leader epoch {p.leader_epoch}, have {current})")
                continue
            self.leader_epochs[tp] = p.leader_epoch
            self.accept_again.discard(tp)
            configs = dict(request.topic_configs.get(p.topic, {}))
            decision.accepted.append(ReplicaStateRow(
                p.topic, p.partition, p.leader, p.leader_epoch, list(p.isr), list(p.replicas),
                p.partition_epoch, p.is_new, configs, request.topic_ids.get(p.topic, ""),
                p.topic in request.topic_ids_adopted))
            decision.rows.append(PartitionErrorRow(p.topic, p.partition, NONE))
        if refused:
            decision.reason = "ignored for " + ", ".join(refused)
        return decision

    def stop_replica(self, request: StopReplica) -> StopReplicaDecision:
        code, reason = self.check(request.controller_id, request.controller_epoch,
                                  request.broker_epoch)
        if code != NONE:
            return StopReplicaDecision(code, [
                PartitionErrorRow(p.topic, p.partition, code) for p in request.partitions
            ], reason=reason)
        decision = StopReplicaDecision(NONE)
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            current = self.leader_epochs.get(tp, UNKNOWN_EPOCH)
            if p.leader_epoch != UNKNOWN_EPOCH and p.leader_epoch < current:
                decision.rows.append(PartitionErrorRow(
                    p.topic, p.partition, int(ErrorCode.FENCED_LEADER_EPOCH)))
                continue
            if p.delete:
                self.leader_epochs.pop(tp, None)
                self.accept_again.discard(tp)
            decision.accepted.append(p)
            decision.rows.append(PartitionErrorRow(p.topic, p.partition, NONE))
        return decision
