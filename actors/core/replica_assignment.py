"""Where a topic's replicas go: Kafka's rack-unaware round robin.

The first replica of partition p goes to broker ``(start + p) % n`` of the
sorted broker list, so leaders spread evenly; the followers are shifted by an
amount that grows by one every ``n`` partitions, so the followers of one
broker's leaderships are spread too, not always on its neighbour. ``start``
and the first shift are random for a new topic (so topics do not all start on
the same broker) and fixed when partitions are added (so the new partitions
continue the topic's pattern). The randomness is handed in, never drawn here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from wire.errors import ErrorCode, KafkaError

RandomIndex = Callable[[int], int]
"""``random_index(n)`` returns an int in ``[0, n)``; injected (seeded in the simulator)."""


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign_replicas(
    broker_ids: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    start_index: int,
    replica_shift: int,
    first_partition: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Partition -> replicas from ``first_partition`` on; ``broker_ids`` in any order."""
    if num_partitions <= 0:
        raise InvalidPartitionsError("number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("replication factor must be larger than 0")
    brokers = sorted(broker_ids)
    n = len(brokers)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor: {replication_factor} larger than available brokers: {n}")
    out: dict[int, tuple[int, ...]] = {}
    shift = replica_shift
    partition = max(0, first_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [brokers[first]]
        replicas += [brokers[_replica_index(first, shift, j, n)]
                     for j in range(replication_factor - 1)]
        out[partition] = tuple(replicas)
        partition += 1
    return out


def assign_new_topic(broker_ids: Sequence[int], num_partitions: int, replication_factor: int,
                     random_index: RandomIndex) -> dict[int, tuple[int, ...]]:
    """A new topic: random start, random first shift (Kafka's ``fixedStartIndex = -1``)."""
    n = max(1, len(broker_ids))
    start = random_index(n)
    shift = random_index(n)
    return assign_replicas(broker_ids, num_partitions, replication_factor, start, shift)


def assign_added_partitions(broker_ids: Sequence[int], existing: dict[int, tuple[int, ...]],
                            new_total: int) -> dict[int, tuple[int, ...]]:
    """The partitions ``len(existing) .. new_total - 1`` of a topic, continuing its pattern.

    As Kafka's addPartitions: start at the first broker whose id is at least
    partition 0's first replica, with that index as the shift too, and the
    topic's replication factor (the length of partition 0's replica list).
    """
    current = len(existing)
    if new_total <= current:
        raise InvalidPartitionsError(
            f"topic currently has {current} partitions, {new_total} would not add any")
    brokers = sorted(broker_ids)
    first_replicas = existing.get(0)
    if not first_replicas:
        raise InvalidReplicaAssignmentError("the topic has no partition 0 to continue from")
    start = next((i for i, b in enumerate(brokers) if b >= first_replicas[0]), 0)
    return assign_replicas(brokers, new_total - current, len(first_replicas), start, start,
                           first_partition=current)


def validate_assignment(
    assignment: Mapping[int, Sequence[int]] | Sequence[tuple[int, Sequence[int]]],
    registered: Collection[int],
    first_partition: int = 0,
    replication_factor: int | None = None,
    active: Collection[int] | None = None,
) -> dict[int, tuple[int, ...]]:
    """A replica assignment given by a client (partition -> broker ids), checked as Kafka's
    controller checks it (KRaft's validateManualPartitionAssignment and createTopic); every
    refusal is INVALID_REPLICA_ASSIGNMENT.

    ``assignment`` may be the request's (partition, brokers) pairs, so a partition listed
    twice is seen. Partition by partition: not listed twice, some replicas, each broker
    ``registered`` (ZooKeeper mode creates the topic with a partition no broker can ever
    host; KRaft refuses, and so do we), no broker twice, as many replicas as the first
    partition (or ``replication_factor``: the topic's, when partitions are added), and,
    when ``active`` is given, at least one replica there (not every one shutting down).
    Then the partitions must be ``first_partition`` on, without gaps.
    """
    pairs = list(assignment.items()) if isinstance(assignment, Mapping) else list(assignment)
    if not pairs:
        raise InvalidReplicaAssignmentError("the replica assignment is empty")
    known = set(registered)
    out: dict[int, tuple[int, ...]] = {}
    for partition, brokers in pairs:
        if partition in out:
            raise InvalidReplicaAssignmentError(
                f"partition {partition} is assigned more than once")
        replicas = tuple(brokers)
        if not replicas:
            raise InvalidReplicaAssignmentError(f"partition {partition} has no replicas")
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"partition {partition} is assigned to broker(s) {unknown}, not registered "
                f"(registered: {sorted(known)})")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"partition {partition} lists a broker twice: {list(replicas)}")
        wanted = replication_factor if replication_factor is not None else len(replicas)
        if len(replicas) != wanted:
            raise InvalidReplicaAssignmentError(
                f"all partitions must have the same number of replicas ({wanted}); "
                f"partition {partition} has {len(replicas)}")
        replication_factor = wanted
        if active is not None and not set(replicas) & set(active):
            raise InvalidReplicaAssignmentError(
                f"every broker assigned partition {partition} ({list(replicas)}) is shutting "
                f"down")
        out[partition] = replicas
    expected = list(range(first_partition, first_partition + len(out)))
    if sorted(out) != expected:
        raise InvalidReplicaAssignmentError(
            f"partitions must be numbered {expected[0]} to {expected[-1]} without gaps, "
            f"got {sorted(out)}")
    return {p: out[p] for p in expected}
