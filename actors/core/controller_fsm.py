"""The controller's two state machines: one state per partition, one per replica.

As Kafka's PartitionStateMachine and ReplicaStateMachine: every move is named
by its target state and allowed only from the previous states its table
lists. An illegal move raises :class:`IllegalStateTransition` and leaves the
state as it was. The machines only keep the states; what a move does (the
metadata writes, the requests to the nodes) is the controller core's.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from enum import Enum
from typing import Generic, TypeVar

from actors.core.cluster_model import TopicPartition


class PartitionState(Enum):
    NON_EXISTENT = "NonExistentPartition"  # never created, or deleted
    NEW = "NewPartition"                   # replicas assigned, no leader and ISR yet
    ONLINE = "OnlinePartition"             # a leader was elected
    OFFLINE = "OfflinePartition"           # its leader died; no leader until an election


PARTITION_TRANSITIONS: Mapping[PartitionState, frozenset[PartitionState]] = {
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE,
                                      PartitionState.OFFLINE}),
    PartitionState.OFFLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE,
                                       PartitionState.OFFLINE}),
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
}
"""target state -> the states it may be entered from (Kafka's validPreviousStates)."""


class ReplicaState(Enum):
    NON_EXISTENT = "NonExistentReplica"
    NEW = "NewReplica"                                  # assigned while its partition is created
    ONLINE = "OnlineReplica"                            # its broker is live and was told its role
    OFFLINE = "OfflineReplica"                          # its broker died or is shutting down
    DELETION_STARTED = "ReplicaDeletionStarted"         # StopReplica(delete) sent
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"   # the broker deleted it
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"   # deletion failed or its broker is down


_R = ReplicaState
REPLICA_TRANSITIONS: Mapping[ReplicaState, frozenset[ReplicaState]] = {
    _R.NEW: frozenset({_R.NON_EXISTENT}),
    _R.ONLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.OFFLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.DELETION_STARTED: frozenset({_R.OFFLINE}),
    _R.DELETION_SUCCESSFUL: frozenset({_R.DELETION_STARTED}),
    _R.DELETION_INELIGIBLE: frozenset({_R.OFFLINE, _R.DELETION_STARTED}),
    _R.NON_EXISTENT: frozenset({_R.DELETION_SUCCESSFUL}),
}


class IllegalStateTransition(Exception):
    """A move its table does not allow; the state was left unchanged."""


K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=Enum)


class _StateMachine(Generic[K, S]):
    kind = "state"

    def __init__(self, table: Mapping[S, frozenset[S]], initial: S) -> None:
        self._table: Mapping[S, frozenset[S]] = table
        self._initial: S = initial
        self._states: dict[K, S] = {}

    def state(self, key: K) -> S:
        """The key's state; keys never seen are in the initial (non-existent) state."""
        return self._states.get(key, self._initial)

    def can_move(self, key: K, target: S) -> bool:
        return self.state(key) in self._table[target]

    def move(self, key: K, target: S) -> S:
        """Move ``key`` to ``target``; returns the previous state."""
        current = self.state(key)
        if current not in self._table[target]:
            allowed = ", ".join(sorted(s.value for s in self._table[target]))
            raise IllegalStateTransition(
                f"{self.kind} {key} cannot move to {target.value} from {current.value} "
                f"(only from {allowed})")
        if target is self._initial:
            self._states.pop(key, None)
        else:
            self._states[key] = target
        return current

    def keys_in(self, *states: S) -> list[K]:
        return [k for k, s in self._states.items() if s in states]

    def forget(self, keys: Iterable[K]) -> None:
        """Drop keys without a transition (the controller resigned; nothing is known)."""
        for key in keys:
            self._states.pop(key, None)

    def clear(self) -> None:
        self._states.clear()

    def snapshot(self) -> dict[K, S]:
        return dict(self._states)


class PartitionStateMachine(_StateMachine[TopicPartition, PartitionState]):
    kind = "partition"

    def __init__(self) -> None:
        super().__init__(PARTITION_TRANSITIONS, PartitionState.NON_EXISTENT)


ReplicaKey = tuple[TopicPartition, int]
"""(partition, broker id)."""


class ReplicaStateMachine(_StateMachine[ReplicaKey, ReplicaState]):
    kind = "replica"

    def __init__(self) -> None:
        super().__init__(REPLICA_TRANSITIONS, ReplicaState.NON_EXISTENT)
