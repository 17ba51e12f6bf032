"""A node's view of the cluster, as the controller's UpdateMetadata requests describe it.

Kafka's MetadataCache: the live brokers with their listeners, the controller,
and every partition's leader, leader epoch, replicas, ISR and offline
replicas. Each RequestHandler holds its own copy (no state shared between
actors); the ReplicaManager holds one too and forwards every UpdateMetadata
it accepted to the handlers, so all copies go through the same updates in
the same order. Pure data: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.core.cluster_model import LEADER_DURING_DELETE, NO_LEADER
from wire.cluster_messages import BrokerRow, UpdateMetadata, UpdateMetadataPartition

NO_CONTROLLER = -1
# How long the ReplicaManager's wait for topics waits for the handlers' MetadataSynced once
# its metadata shows what is awaited (and how long a wait with timeout_ms <= 0 waits at all).
# Only a handler whose process is restarting stays silent (the new process takes no
# connection before its handlers hold the metadata); a live one on a loaded machine can take
# seconds. As the single node's controller (actors/controller.py ACK_WAIT_NS).
SYNC_WAIT_MS = 10_000
# The longest a wait with timeout_ms <= 0 takes: SYNC_WAIT_MS for the change to show, then
# SYNC_WAIT_MS from its showing for the handlers to acknowledge it.
NO_TIMEOUT_WAIT_MS = 2 * SYNC_WAIT_MS


@dataclass(frozen=True, slots=True)
class CachedPartition:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    partition_epoch: int
    controller_epoch: int

    @classmethod
    def of(cls, row: UpdateMetadataPartition) -> CachedPartition:
        return cls(row.leader, row.leader_epoch, tuple(row.isr), tuple(row.replicas),
                   tuple(row.offline_replicas), row.partition_epoch, row.controller_epoch)


@dataclass
class MetadataCache:
    """What one node knows of the cluster; changed only by :meth:`apply`."""

    controller_id: int = NO_CONTROLLER
    controller_epoch: int = -1
    brokers: dict[int, BrokerRow] = field(default_factory=dict)
    partitions: dict[str, dict[int, CachedPartition]] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    topic_ids: dict[str, str] = field(default_factory=dict)
    # internal topics -> the partitions they are assigned (the controller's count)
    assigned: dict[str, int] = field(default_factory=dict)
    updates: int = 0

    def apply(self, update: UpdateMetadata) -> set[str]:
        """Take one UpdateMetadata (already fenced by the caller); returns the topics it touched.

        ``brokers`` replaces the live set; a full update replaces every
        partition, a delta upserts the ones listed; leader -2 (the topic is
        being deleted) removes the partition, and a topic without partitions
        is gone.
        """
        self.updates += 1
        self.controller_id = update.controller_id
        self.controller_epoch = update.controller_epoch
        self.brokers = {b.broker_id: b for b in update.brokers}
        touched: set[str] = set()
        if update.full:
            touched = set(self.partitions)
            self.partitions = {}
        for row in update.partitions:
            touched.add(row.topic)
            if row.leader == LEADER_DURING_DELETE:
                parts = self.partitions.get(row.topic)
                if parts is not None:
                    parts.pop(row.partition, None)
                    if not parts:
                        del self.partitions[row.topic]
                continue
            self.partitions.setdefault(row.topic, {})[row.partition] = CachedPartition.of(row)
        self._by_topic(self.topic_configs, {t: dict(c) for t, c in update.topic_configs.items()})
        self._by_topic(self.topic_ids, update.topic_ids)
        self._by_topic(self.assigned, update.assigned_partitions)
        return touched

    def _by_topic(self, held: dict[str, Any], update: Mapping[str, Any]) -> None:
        """Take an update's per-topic values for the topics held; drop those of topics gone."""
        for topic, value in update.items():
            if topic in self.partitions:
                held[topic] = value
        for topic in list(held):
            if topic not in self.partitions:
                del held[topic]

    def snapshot(self, broker_epoch: int) -> UpdateMetadata:
        """What this cache holds as one full UpdateMetadata (for handlers that start late:
        a broker's process restarted while the others kept their copies)."""
        rows = [UpdateMetadataPartition(topic, index, p.controller_epoch, p.leader,
                                        p.leader_epoch, list(p.isr), p.partition_epoch,
                                        list(p.replicas), list(p.offline_replicas))
                for topic, parts in sorted(self.partitions.items())
                for index, p in sorted(parts.items())]
        return UpdateMetadata(self.controller_id, self.controller_epoch, broker_epoch, True,
                              list(self.brokers.values()), rows,
                              {t: dict(c) for t, c in self.topic_configs.items()},
                              topic_ids=dict(self.topic_ids),
                              assigned_partitions=dict(self.assigned))

    # ------------------------------------------------------------------ reads
    def topics(self) -> list[str]:
        return sorted(self.partitions)

    def has_topic(self, topic: str) -> bool:
        return topic in self.partitions

    def partition_count(self, topic: str) -> int | None:
        """Partitions 0..n-1 of ``topic`` (None when unknown); a gap counts as the end."""
        parts = self.partitions.get(topic)
        if parts is None:
            return None
        n = 0
        while n in parts:
            n += 1
        return n

    def whole_partition_count(self, topic: str) -> int | None:
        """How many partitions ``topic`` has: the count the controller says it is assigned
        (Kafka's partitionFor divides by the assignment's size, whether or not each
        partition has a leader: a group on a partition left NEW gets
        COORDINATOR_NOT_AVAILABLE, the others are served); without one, the partitions
        held when they are 0..n-1, else 0 (a partition left NEW, with no replica alive when
        it was made, is never in an UpdateMetadata): unknown, not the count below the gap.
        None when the topic is not here. For the internal topics' counts, which ids map
        over: a truncated one would send them to other partitions."""
        parts = self.partitions.get(topic)
        if not parts:
            return None
        if topic in self.assigned:
            return self.assigned[topic]
        n = max(parts) + 1
        return n if len(parts) == n else 0

    def partition(self, topic: str, partition: int) -> CachedPartition | None:
        parts = self.partitions.get(topic)
        return None if parts is None else parts.get(partition)

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, NO_LEADER (-1) when it has none or is unknown."""
        found = self.partition(topic, partition)
        return NO_LEADER if found is None else found.leader

    def has_leaders(self, topic: str) -> bool:
        """The topic exists and every partition has a live leader."""
        parts = self.partitions.get(topic)
        if not parts:
            return False
        return all(p.leader in self.brokers for p in parts.values())

    def configs(self, topic: str) -> dict[str, str]:
        return dict(self.topic_configs.get(topic, {}))

    def topic_id(self, topic: str) -> str:
        """The topic's id ("" when not known: an older controller's, or not given yet)."""
        return self.topic_ids.get(topic, "")

    def broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def endpoint(self, broker_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """(host, port) of the broker's listener (the first one when not named)."""
        broker = self.brokers.get(broker_id)
        if broker is None or not broker.endpoints:
            return None
        for endpoint in broker.endpoints:
            if listener is None or endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None

    def missing(self, topics: Iterable[str], present: bool,
                at_least: dict[str, int] | None = None) -> list[str]:
        """Topics not yet as awaited: without leaders (``present``; and with fewer than
        ``at_least[topic]`` partitions, when named: a CreatePartitions) or still there
        (not)."""
        if present:
            at_least = at_least or {}
            return [t for t in topics if not self.has_leaders(t)
                    or len(self.partitions.get(t, ())) < at_least.get(t, 0)]
        return [t for t in topics if t in self.partitions]
