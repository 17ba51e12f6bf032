"""Kafka's rack-unaware replica assignment."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.core.replica_assignment import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    assign_added_partitions,
    assign_new_topic,
    assign_replicas,
    validate_assignment,
)

# Kafka's own expectation for brokers 0-4, 10 partitions, 3 replicas, start 0
# (AdminRackAwareTest.testReplicaAssignment): leaders round robin, the
# followers' shift grows by one after every round of five.
KAFKA_TABLE = {
    0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
    5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2),
}


def test_kafkas_table() -> None:
    assert assign_replicas([4, 2, 0, 3, 1], 10, 3, start_index=0, replica_shift=0) == KAFKA_TABLE


def test_refusals_name_the_numbers() -> None:
    with pytest.raises(InvalidReplicationFactorError,
                       match="replication factor: 4 larger than available brokers: 3"):
        assign_replicas([1, 2, 3], 1, 4, 0, 0)
    with pytest.raises(InvalidReplicationFactorError, match="must be larger than 0"):
        assign_replicas([1, 2, 3], 1, 0, 0, 0)
    with pytest.raises(InvalidPartitionsError):
        assign_replicas([1, 2, 3], 0, 1, 0, 0)


def test_a_new_topic_draws_its_start_and_shift() -> None:
    draws: list[int] = []

    def random_index(n: int) -> int:
        draws.append(n)
        return 2

    assert assign_new_topic([10, 20, 30], 3, 2, random_index) == assign_replicas(
        [10, 20, 30], 3, 2, 2, 2)
    assert draws == [3, 3]


def test_added_partitions_continue_the_topics_pattern() -> None:
    brokers = [1, 2, 3, 4, 5]
    created = assign_replicas(brokers, 5, 3, start_index=2, replica_shift=2)
    added = assign_added_partitions(brokers, created, 12)
    assert sorted(added) == list(range(5, 12))
    assert {**created, **added} == assign_replicas(brokers, 12, 3, 2, 2)
    with pytest.raises(InvalidPartitionsError, match="currently has 5 partitions"):
        assign_added_partitions(brokers, created, 5)


@given(st.integers(1, 7), st.integers(1, 30), st.data())
def test_leaders_spread_evenly_and_replicas_are_distinct(
        n: int, partitions: int, data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, n))
    start = data.draw(st.integers(0, n - 1))
    shift = data.draw(st.integers(0, n - 1))
    brokers = list(range(100, 100 + n))
    assignment = assign_replicas(brokers, partitions, rf, start, shift)
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    leaders = Counter(r[0] for r in assignment.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1


@pytest.mark.parametrize(
    ("assignment", "error"),
    [
        ({}, "the replica assignment is empty"),
        ({0: [1], 2: [2]}, "partitions must be numbered 0 to 1 without gaps, got [0, 2]"),
        ({0: []}, "partition 0 has no replicas"),
        ({0: [1, 1]}, "partition 0 lists a broker twice: [1, 1]"),
        ({0: [1, 2], 1: [1]}, "all partitions must have the same number of replicas (2); "
                              "partition 1 has 1"),
        ({0: [1, 9]}, "partition 0 is assigned to broker(s) [9], not registered "
                      "(registered: [1, 2, 3])"),
        ([(0, [1]), (0, [2])], "partition 0 is assigned more than once"),
        ({1: [1], 0: [2, 3]}, "all partitions must have the same number of replicas (1); "
                              "partition 0 has 2"),
        ({0: [1, 2], 1: [3]}, "all partitions must have the same number of replicas (2); "
                              "partition 1 has 1"),
    ],
)
def test_manual_assignments_are_checked(assignment: dict[int, list[int]], error: str) -> None:
    with pytest.raises(InvalidReplicaAssignmentError) as info:
        validate_assignment(assignment, {1, 2, 3})
    assert str(info.value) == error
    assert validate_assignment({0: [3, 1], 1: [1, 2]}, {1, 2, 3}) == {0: (3, 1), 1: (1, 2)}


def test_a_manual_assignment_needs_an_active_replica_per_partition() -> None:
    """KRaft's rule: registered brokers, but not every replica of a partition shutting down."""
    pairs = [(1, [3, 2]), (0, [2, 3])]
    assert validate_assignment(pairs, {1, 2, 3}, active={1, 2}) == {0: (2, 3), 1: (3, 2)}
    with pytest.raises(InvalidReplicaAssignmentError) as info:
        validate_assignment({0: [1, 2], 1: [3, 2]}, {1, 2, 3}, active={1})
    assert str(info.value) == "every broker assigned partition 1 ([3, 2]) is shutting down"
    # the partitions added to a topic start at its count and keep its replication factor
    assert validate_assignment({2: [1]}, {1}, first_partition=2, replication_factor=1) == {
        2: (1,)}
    with pytest.raises(InvalidReplicaAssignmentError):
        validate_assignment({2: [1, 2]}, {1, 2}, first_partition=2, replication_factor=1)
