"""The controller's state machines and election rules."""

from __future__ import annotations

import pytest

from actors.core.cluster_model import TopicPartition
from actors.core.controller_fsm import (
    PARTITION_TRANSITIONS,
    REPLICA_TRANSITIONS,
    IllegalStateTransition,
    PartitionState,
    PartitionStateMachine,
    ReplicaState,
    ReplicaStateMachine,
)
from actors.core.leader_election import (
    controlled_shutdown_leader,
    offline_leader,
    preferred_leader,
)

TP = TopicPartition("t", 0)
P = PartitionState
R = ReplicaState


def test_a_partitions_life() -> None:
    fsm = PartitionStateMachine()
    assert fsm.state(TP) is P.NON_EXISTENT
    for target in (P.NEW, P.ONLINE, P.OFFLINE, P.ONLINE, P.OFFLINE, P.NON_EXISTENT):
        fsm.move(TP, target)
        assert fsm.state(TP) is target
    assert fsm.snapshot() == {}


@pytest.mark.parametrize(
    ("path", "target", "message"),
    [
        ([], P.ONLINE, "partition t-0 cannot move to OnlinePartition from NonExistentPartition "
                       "(only from NewPartition, OfflinePartition, OnlinePartition)"),
        ([P.NEW], P.NON_EXISTENT, "partition t-0 cannot move to NonExistentPartition from "
                                  "NewPartition (only from OfflinePartition)"),
        ([P.NEW, P.ONLINE], P.NEW, "partition t-0 cannot move to NewPartition from "
                                   "OnlinePartition (only from NonExistentPartition)"),
    ],
)
def test_an_illegal_partition_move_raises_and_changes_nothing(
        path: list[PartitionState], target: PartitionState, message: str) -> None:
    fsm = PartitionStateMachine()
    for state in path:
        fsm.move(TP, state)
    before = fsm.state(TP)
    assert not fsm.can_move(TP, target)
    with pytest.raises(IllegalStateTransition) as info:
        fsm.move(TP, target)
    assert str(info.value) == message
    assert fsm.state(TP) is before


def test_a_replicas_deletion_and_an_illegal_move() -> None:
    fsm = ReplicaStateMachine()
    key = (TP, 3)
    for target in (R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_STARTED, R.DELETION_INELIGIBLE,
                   R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL):
        fsm.move(key, target)
    with pytest.raises(IllegalStateTransition) as info:
        fsm.move(key, R.ONLINE)
    assert str(info.value).startswith(
        "replica (TopicPartition(topic='t', partition=0), 3) cannot move to OnlineReplica from "
        "ReplicaDeletionSuccessful")
    assert fsm.state(key) is R.DELETION_SUCCESSFUL
    fsm.move(key, R.NON_EXISTENT)
    assert fsm.state(key) is R.NON_EXISTENT and fsm.snapshot() == {}


def test_the_tables_are_kafkas() -> None:
    assert PARTITION_TRANSITIONS[P.NON_EXISTENT] == {P.OFFLINE}
    assert PARTITION_TRANSITIONS[P.OFFLINE] == {P.NEW, P.ONLINE, P.OFFLINE}
    assert REPLICA_TRANSITIONS[R.ONLINE] == {R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}
    assert REPLICA_TRANSITIONS[R.DELETION_STARTED] == {R.OFFLINE}
    assert REPLICA_TRANSITIONS[R.DELETION_INELIGIBLE] == {R.OFFLINE, R.DELETION_STARTED}
    assert REPLICA_TRANSITIONS[R.NON_EXISTENT] == {R.DELETION_SUCCESSFUL}


def test_election_rules_walk_the_assignment_in_order() -> None:
    assignment = [3, 1, 2]
    assert offline_leader(assignment, isr=[2, 1], live={1, 2}) == 1
    assert offline_leader(assignment, isr=[3], live={1, 2}) is None
    assert offline_leader(assignment, isr=[3], live={1, 2}, unclean=True) == 1
    assert preferred_leader(assignment, isr=[1, 3], live={1, 3}) == 3
    assert preferred_leader(assignment, isr=[1], live={1, 3}) is None
    assert preferred_leader(assignment, isr=[1, 3], live={1}) is None
    assert controlled_shutdown_leader(assignment, isr=[3, 1, 2], live={1, 2, 3},
                                      shutting_down={3, 1}) == 2
    assert controlled_shutdown_leader(assignment, isr=[3], live={1, 2, 3},
                                      shutting_down={3}) is None
