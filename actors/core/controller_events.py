"""What goes into the controller core and what comes out of it.

Events are what the Controller's shell learned (from the metadata store, a
node's request, its own timer); effects are what the core wants done: a
metadata write, a message to a node, a reply to a request, a line for the
state-change log, or giving up the controllership. All are frozen, slotted
dataclasses: plain data a test or the simulator can build and compare.

A shell's contract, in full:

* Feed :class:`BecameController` once it won the election and read the
  metadata; :class:`Resigned` when it lost the controllership (session
  expired, a write raised ControllerMoved, it saw another controller).
* Perform the effects of one ``handle`` call in order. A metadata write
  (:data:`MetadataWrite`) goes to the store with the controller's fence; its
  outcome comes back as :class:`MetadataWritten` (with, for a partition whose
  write was refused, the state as it is now) or, when the store cannot be
  reached, :class:`MetadataWriteFailed`. A write with ``fail_fast`` False must
  not fail that way: the shell retries it until the store answers or the
  controller resigns (its outcome may be that it had been applied: the core
  copes, every write is conditional).
* A ControllerMoved from the store is answered with :class:`Resigned`.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any

from actors.core.cluster_model import (
    BrokerInfo,
    LeaderAndIsr,
    TopicAssignment,
    TopicPartition,
    TopicRecord,
    WriteResult,
)

RequestId = Hashable
"""Opaque to the core: the shell's handle on who asked (a node's actor and its req id)."""


class ElectionType(IntEnum):
    """Kafka's ElectLeaders election types."""

    PREFERRED = 0
    UNCLEAN = 1


# =========================================================================== events


@dataclass(frozen=True, slots=True)
class BecameController:
    """This node won the election with ``epoch``; the metadata as read right after."""

    epoch: int
    brokers: tuple[BrokerInfo, ...]
    topics: Mapping[str, TopicRecord]
    partition_states: Mapping[TopicPartition, LeaderAndIsr]
    topics_to_delete: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Resigned:
    """No longer the controller: drop everything, answer what is pending NOT_CONTROLLER.

    ``unanswered``: the request whose handling failed, if that is why (it is answered
    NOT_CONTROLLER too, unless it was pending already).
    """

    reason: str
    unanswered: Any = None


@dataclass(frozen=True, slots=True)
class LiveBrokersChanged:
    """The registered brokers now (read after a ``/brokers/ids`` watch fired), with epochs."""

    brokers: tuple[BrokerInfo, ...]


@dataclass(frozen=True, slots=True)
class NewTopicsFound:
    """Topics that appeared in the store without this controller creating them."""

    topics: Mapping[str, TopicRecord]


@dataclass(frozen=True, slots=True)
class TopicsGone:
    """Topics whose znodes went away without this controller deleting them (an operator
    removed ``/brokers/topics/<name>``): as Kafka's processTopicChange, forgotten."""

    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One topic of a CreateTopics: -1 means the broker default; ``assignment`` is manual
    (partition -> replicas, or the request's (partition, replicas) pairs, a partition
    perhaps listed twice: refused)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignment: (Mapping[int, tuple[int, ...]] | tuple[tuple[int, tuple[int, ...]], ...]
                 | None) = None
    configs: Mapping[str, str | None] = field(default_factory=dict)  # None: refused
    internal: bool = False  # a coordinator's own topic (CreateTopicRow.internal)


@dataclass(frozen=True, slots=True)
class CreateTopics:
    request_id: RequestId
    topics: tuple[NewTopic, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow ``name`` to ``total`` partitions; ``assignment`` lists the new ones' replicas."""

    name: str
    total: int
    assignment: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    request_id: RequestId
    topics: tuple[NewPartitions, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class DeleteTopics:
    request_id: RequestId
    topics: tuple[str, ...]
    # topic name -> the id the client named it by (DeleteTopics v6): that topic is deleted
    # only while it still has this id, else UNKNOWN_TOPIC_ID. Names not here: by name.
    expected_ids: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicDeletionsRequested:
    """Topics under ``/admin/delete_topics`` (someone marked them; maybe a previous controller)."""

    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class StopReplicaDone:
    """A node's StopReplicaResponse: the request's error, then each partition's."""

    broker_id: int
    error_code: int
    partitions: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class TopicIdsConfirmed:
    """A node's LeaderAndIsrResponse named partitions of adopted topics whose
    ``partition.metadata`` it read back holding ``topic_ids[tp]``. ``broker_epoch``: that
    of the request answered (an answer of an earlier registration of the broker counts for
    nothing: its disk may have been another since)."""

    broker_id: int
    broker_epoch: int
    topic_ids: Mapping[TopicPartition, str]


@dataclass(frozen=True, slots=True)
class IsrChanged:
    """Partition states a leader wrote itself (read after an ISR change notification)."""

    states: Mapping[TopicPartition, LeaderAndIsr]


@dataclass(frozen=True, slots=True)
class IsrProposal:
    partition: TopicPartition
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """A leader's ISR change (KIP-497), from ``broker_id`` at ``broker_epoch``."""

    request_id: RequestId
    broker_id: int
    broker_epoch: int
    proposals: tuple[IsrProposal, ...]


@dataclass(frozen=True, slots=True)
class ReplicasOffline:
    """``broker_id`` (at ``broker_epoch``) says its replicas of ``partitions`` failed their
    storage (Kafka's log dir event notification, the KAFKA_STORAGE_ERROR replicas): they
    become OfflineReplica, leave the ISR, and a partition one led gets another leader at a
    new leader epoch. Its log reopened, the replica follows again out of the ISR.
    ``led_alone``: those whose replica led an ISR of itself alone when it failed (it may
    lead on); the others' replicas are never elected while known failed."""

    request_id: RequestId
    broker_id: int
    broker_epoch: int
    partitions: tuple[TopicPartition, ...]
    led_alone: frozenset[TopicPartition] = frozenset()
    # the leader epoch each replica refused its role at: one older than the partition's
    # current leader epoch is stale (the replica was given a newer role since, which it
    # took or refused anew) and is not acted on
    leader_epochs: Mapping[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequest:
    request_id: RequestId
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class ElectLeaders:
    """Elect leaders of ``partitions`` (None: every partition); ``request_id`` None: no reply."""

    request_id: RequestId | None
    partitions: tuple[TopicPartition, ...] | None
    election: ElectionType = ElectionType.PREFERRED


@dataclass(frozen=True, slots=True)
class AlterPartitionReassignments:
    """Move each partition to its replicas (KIP-455), or cancel its reassignment (None).
    ``allow_rf_change`` False (AlterPartitionReassignments v1): a target whose size differs
    from the original set's is refused."""

    request_id: RequestId
    partitions: tuple[tuple[TopicPartition, tuple[int, ...] | None], ...]
    allow_rf_change: bool = True


@dataclass(frozen=True, slots=True)
class ListPartitionReassignments:
    """The reassignments in progress, of ``partitions`` (None: all)."""

    request_id: RequestId
    partitions: tuple[TopicPartition, ...] | None


@dataclass(frozen=True, slots=True)
class TopicConfigsChanged:
    """Topics' configs, as ``/config/topics`` holds them now (a config change was written):
    the controller keeps them for its LeaderAndIsr and tells every node's metadata."""

    configs: Mapping[str, Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class AutoLeaderRebalance:
    """The shell's ``leader.imbalance.check.interval.seconds`` tick (``auto.leader.rebalance``)."""


@dataclass(frozen=True, slots=True)
class RetryReassignments:
    """The shell's tick for reassignment steps whose write failed (the core's
    ``reassign_retry_pending``): they are tried again on it, not on other events."""


@dataclass(frozen=True, slots=True)
class MetadataWritten:
    """The outcome of write ``write_id``: per topic name or partition, and current states of
    partitions whose write was refused (BAD_VERSION, NODE_EXISTS), None if they have none."""

    write_id: int
    results: Mapping[Hashable, WriteResult]
    current: Mapping[TopicPartition, LeaderAndIsr | None] = field(default_factory=dict)
    # the topic znode, read again, of a SetTopicAssignment refused BAD_VERSION (None if gone)
    topics: Mapping[str, TopicAssignment | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetadataWriteFailed:
    """The store could not be reached for a ``fail_fast`` write: nothing was written."""

    write_id: int
    message: str


Event = (
    BecameController | Resigned | LiveBrokersChanged | NewTopicsFound | CreateTopics
    | CreatePartitions | DeleteTopics | TopicDeletionsRequested | StopReplicaDone | IsrChanged
    | AlterPartitionRequest | ControlledShutdownRequest | ElectLeaders | AutoLeaderRebalance
    | TopicConfigsChanged | MetadataWritten | MetadataWriteFailed | ReplicasOffline
    | TopicIdsConfirmed | AlterPartitionReassignments | ListPartitionReassignments
    | RetryReassignments | TopicsGone
)


# ===================================================================== effects: writes


@dataclass(frozen=True, slots=True)
class CreateTopicZnodes:
    """Create the topic's config and assignment (result keyed by the topic name)."""

    write_id: int
    topic: str
    assignment: TopicAssignment
    configs: Mapping[str, str]
    fail_fast: bool = True


@dataclass(frozen=True, slots=True)
class SetTopicAssignment:
    """Replace the assignment if its version is still ``assignment.version`` (keyed by topic).

    ``clear_adoption``: the assignment, unmarked, ends its id's adoption; its record
    under ``/actorlog`` is dropped in the same transaction."""

    write_id: int
    topic: str
    assignment: TopicAssignment
    fail_fast: bool = True
    clear_adoption: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitionStates:
    write_id: int
    states: Mapping[TopicPartition, LeaderAndIsr]
    fail_fast: bool = False


@dataclass(frozen=True, slots=True)
class UpdatePartitionStates:
    """Write each state if its znode's version is still ``state.version``."""

    write_id: int
    states: Mapping[TopicPartition, LeaderAndIsr]
    fail_fast: bool = False


@dataclass(frozen=True, slots=True)
class MarkTopicsForDeletion:
    """Create ``/admin/delete_topics/<t>`` for each (keyed by topic; NO_NODE if it is gone)."""

    write_id: int
    topics: tuple[str, ...]
    fail_fast: bool = True


@dataclass(frozen=True, slots=True)
class DeleteTopicZnodes:
    """Remove the topic from the store: assignment, states, config, deletion marker."""

    write_id: int
    topic: str
    fail_fast: bool = False


@dataclass(frozen=True, slots=True)
class RemoveTopicDeletionMarkers:
    """Drop deletion markers of topics that do not exist."""

    write_id: int
    topics: tuple[str, ...]
    fail_fast: bool = False


MetadataWrite = (
    CreateTopicZnodes | SetTopicAssignment | CreatePartitionStates | UpdatePartitionStates
    | MarkTopicsForDeletion | DeleteTopicZnodes | RemoveTopicDeletionMarkers
)


def without_topics(write: MetadataWrite, topics: Collection[str]) -> MetadataWrite | None:
    """``write`` without what it writes for ``topics`` (forgotten: :class:`TopicsGone`), or
    None if nothing is left: a shell drops them from the writes it retries, as the core
    drops their outcomes (a conditional write of a removed topic must not land on the
    znodes of a topic made under its name later). Removing deletion markers is kept: a
    marker left would delete such a namesake. So is every DeleteTopicZnodes: a finished
    deletion's removes what the operator left, the config (the core refuses the name
    until it lands or fails); one of a deletion not finished is never pending (it is
    written only once every replica is deleted), so keeping it is harmless."""
    if isinstance(write, (CreatePartitionStates, UpdatePartitionStates)):
        states = {tp: s for tp, s in write.states.items() if tp.topic not in topics}
        if len(states) == len(write.states):
            return write
        return replace(write, states=states) if states else None
    if isinstance(write, (CreateTopicZnodes, SetTopicAssignment)):
        return None if write.topic in topics else write
    if isinstance(write, MarkTopicsForDeletion):
        left = tuple(t for t in write.topics if t not in topics)
        if len(left) == len(write.topics):
            return write
        return replace(write, topics=left) if left else None
    return write


# ====================================================== effects: nodes, replies, log


@dataclass(frozen=True, slots=True)
class SendToBroker:
    """Send ``message`` (a ``wire.cluster_messages`` LeaderAndIsr, UpdateMetadata or
    StopReplica) to the node ``broker_id``, retrying until it answers or leaves."""

    broker_id: int
    message: Any


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    error_code: int
    message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    topic_id: str = ""  # the created or deleted topic's id ("": none, or not known)


@dataclass(frozen=True, slots=True)
class CreateTopicsResult:
    topics: tuple[TopicResult, ...]


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    topics: tuple[TopicResult, ...]


@dataclass(frozen=True, slots=True)
class DeleteTopicsResult:
    topics: tuple[TopicResult, ...]


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """One partition's outcome; ``state`` its state afterwards when known."""

    partition: TopicPartition
    error_code: int
    message: str | None = None
    state: LeaderAndIsr | None = None


@dataclass(frozen=True, slots=True)
class ElectLeadersResult:
    error_code: int
    partitions: tuple[PartitionResult, ...] = ()


@dataclass(frozen=True, slots=True)
class ControlledShutdownResult:
    """``remaining``: partitions the broker still leads (retry, or give up after max retries)."""

    error_code: int
    message: str | None = None
    remaining: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    error_code: int
    partitions: tuple[PartitionResult, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicasOfflineResult:
    """NONE once every partition named is settled (written, or nothing to change)."""

    error_code: int
    partitions: tuple[PartitionResult, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterReassignmentsResult:
    """Per partition: NONE once its reassignment is written and started (not done)."""

    error_code: int
    partitions: tuple[PartitionResult, ...] = ()


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    partition: TopicPartition
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ListReassignmentsResult:
    error_code: int
    reassignments: tuple[OngoingReassignment, ...] = ()


Result = (
    CreateTopicsResult | CreatePartitionsResult | DeleteTopicsResult | ElectLeadersResult
    | ControlledShutdownResult | AlterPartitionResult | ReplicasOfflineResult
    | AlterReassignmentsResult | ListReassignmentsResult
)


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer request ``request_id`` (each request gets exactly one)."""

    request_id: RequestId
    result: Result


@dataclass(frozen=True, slots=True)
class StateChangeFailed:
    """A line for the state-change log (Kafka's state.change.logger): a move that did not happen."""

    message: str


@dataclass(frozen=True, slots=True)
class ResignController:
    """Give up: the store shows a newer controller (delete nothing, just stop and resign)."""

    reason: str


Effect = MetadataWrite | SendToBroker | Reply | StateChangeFailed | ResignController
