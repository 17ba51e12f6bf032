"""The cluster controller as a pure core: ``handle(event) -> effects``.

Kafka's ZooKeeper-era KafkaController, its partition and replica state
machines and its request batching, without ZooKeeper, sockets, threads or a
clock: events and effects are in ``actors.core.controller_events`` (read its
docstring for the shell's side of the contract), the randomness of replica
assignment is handed in.

How a change is made. Every change of a partition's leader or ISR is a rule
(a pure function of the partition's current state and the brokers) applied
to the cached state; the result is written to the store conditionally on the
cached version; only when the write is confirmed does the cache change and
do LeaderAndIsr (to the partition's live replicas) and UpdateMetadata (to
every live broker) go out. A write refused because the version moved (a
leader changed its ISR meanwhile, or an earlier answer was lost) brings the
current state back: the cache takes it and the rule is applied again to it.
So the core stays right even if events and write outcomes interleave.

The rules (Kafka's):

* broker change: a partition whose leader is not live gets the first live ISR
  member in assignment order (leader epoch + 1, the ISR without the dead
  brokers); none: leader -1 (offline), unless unclean election is enabled for
  the topic, then the first live replica with an ISR of itself. A live leader
  keeps leading; dead followers leave its ISR. The ISR never becomes empty:
  when its last members die together it keeps them (each of them had every
  acknowledged record). A broker that restarted (new broker epoch) is
  treated as dead, then live; so is, in one partition, a leader or ISR member
  whose broker epoch is newer than the zxid that wrote the partition's state
  as read from the store (a controller elected after the broker restarted
  never saw the bounce, yet the state names the broker's previous life: giving
  its leader epoch again to the new life would let two lives write different
  records in one epoch).
* controlled shutdown: leaderships of the stopping broker move to the first
  live ISR member not shutting down, and it leaves every ISR.
* preferred election: the first assigned replica takes over when it is live
  and in the ISR.
* new partitions: the first live assigned replica leads, the live replicas
  form the ISR.

A topic whose znodes an operator removes by hand (not DeleteTopics) is
forgotten, as Kafka's processTopicChange does (TopicsGone): no election, ISR
or reassignment work for it again, what was in flight for it given up. The
nodes are told nothing and keep its replicas (as in Kafka): removing them is
the operator's. The limitation, as in Kafka: its name is not usable again
while they remain. In Kafka the same controller never sends a namesake's
partitions a LeaderAndIsr (their election fails for want of a partition
state znode); only a later controller sends them, and the brokers holding
the removed topic's replicas answer INCONSISTENT_TOPIC_ID. Here the nodes holding the removed
topic's roles fence a namesake's roles by leader epoch, so refuse them while
the namesake's leader epoch is at or below theirs. This controller refuses a
CreateTopics of the name INVALID_TOPIC_EXCEPTION (Kafka's code for a name
unusable for another topic's sake, a colliding one; not TOPIC_ALREADY_EXISTS,
which its callers take for success), saying why and the remedy, for as long
as it is the controller, unless the removed topic's own znodes (its id) are
written back; a topic made under the name otherwise (its znode written
directly, or by a later controller) is not refused.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from actors.core.cluster_model import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    BrokerInfo,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartition,
    TopicRecord,
    WriteCode,
    WriteResult,
)
from actors.core.controller_events import (
    AlterPartitionReassignments,
    AlterPartitionRequest,
    AlterPartitionResult,
    AlterReassignmentsResult,
    AutoLeaderRebalance,
    BecameController,
    ControlledShutdownRequest,
    ControlledShutdownResult,
    CreatePartitions,
    CreatePartitionsResult,
    CreatePartitionStates,
    CreateTopics,
    CreateTopicsResult,
    CreateTopicZnodes,
    DeleteTopics,
    DeleteTopicsResult,
    DeleteTopicZnodes,
    Effect,
    ElectionType,
    ElectLeaders,
    ElectLeadersResult,
    Event,
    IsrChanged,
    IsrProposal,
    ListPartitionReassignments,
    ListReassignmentsResult,
    LiveBrokersChanged,
    MarkTopicsForDeletion,
    MetadataWrite,
    MetadataWriteFailed,
    MetadataWritten,
    NewTopic,
    NewTopicsFound,
    OngoingReassignment,
    PartitionResult,
    RemoveTopicDeletionMarkers,
    ReplicasOffline,
    ReplicasOfflineResult,
    Reply,
    RequestId,
    ResignController,
    Resigned,
    Result,
    RetryReassignments,
    SendToBroker,
    SetTopicAssignment,
    StateChangeFailed,
    StopReplicaDone,
    TopicConfigsChanged,
    TopicDeletionsRequested,
    TopicIdsConfirmed,
    TopicResult,
    TopicsGone,
    UpdatePartitionStates,
    without_topics,
)
from actors.core.controller_fsm import (
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
from actors.core.partition_budget import (
    PartitionBudget,
    PolicyViolationError,
    check_node_budget,
    check_request_size,
    request_total,
)
from actors.core.replica_assignment import (
    RandomIndex,
    assign_added_partitions,
    assign_new_topic,
    validate_assignment,
)
from actors.core.topic_config import (
    INTERNAL_TOPICS,
    UnifiedNameIndex,
    check_internal_growth,
    check_internal_partition_count,
    validate_new_topic_configs,
    validate_topic_name,
)
from actors.core.topic_id import new_topic_id
from wire.cluster_messages import (
    BrokerRow,
    EndpointRow,
    LeaderAndIsrPartition,
    LiveLeaderRow,
    StopReplica,
    StopReplicaPartition,
    UpdateMetadata,
    UpdateMetadataPartition,
)
from wire.cluster_messages import (
    LeaderAndIsr as LeaderAndIsrRequest,
)
from wire.errors import ErrorCode, KafkaError

Rule = Callable[[TopicPartition, LeaderAndIsr], LeaderAndIsr | None]
"""A partition's next state from its current one; None: leave it as it is."""

Outcome = LeaderAndIsr | str | None
"""Per partition, after a change: the state written, an error message, or None (unchanged)."""

_R = ReplicaState
_P = PartitionState


@dataclass(frozen=True)
class ControllerConfig:
    """The broker settings the controller reads (Kafka's names in the comments)."""

    broker_id: int
    num_partitions: int = 1                         # num.partitions
    default_replication_factor: int = 1             # default.replication.factor
    unclean_leader_election_enable: bool = False    # unclean.leader.election.enable
    delete_topic_enable: bool = True                # delete.topic.enable
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
    max_conflict_retries: int = 10                  # rewrites of one partition after conflicts
    # Each broker's limit on open partitions (the controller's own, read at its start:
    # the brokers of a cluster run with the same limits); None checks none.
    partition_budget: PartitionBudget | None = None
    # internal topic -> the partition count its coordinator maps ids over
    # (offsets.topic.num.partitions, transaction.state.log.num.partitions): a client's
    # CreateTopics of one must give that count; none here checks none
    internal_partitions: Mapping[str, int] = field(default_factory=dict)


@dataclass
class _Change:
    """A partition-state write in flight and what to do with its outcome."""

    rule: Rule | None                  # None: no rewrite after a conflict (AlterPartition)
    proposals: dict[TopicPartition, LeaderAndIsr]
    create: bool = False               # CreatePartitionStates (new partitions) vs update
    notify_replicas: bool = True       # send LeaderAndIsr to the live replicas
    attempts: int = 1
    outcomes: dict[TopicPartition, Outcome] = field(default_factory=dict)
    done: Callable[[dict[TopicPartition, Outcome]], None] | None = None
    adopted: list[TopicPartition] = field(default_factory=list)  # found written by another


@dataclass
class _TopicWrite:
    """A topic-level write in flight: what to do with each key's result, or with a failure."""

    on_result: Callable[[Any, WriteResult], None]
    on_failed: Callable[[str], None]
    # a topic's write refused BAD_VERSION: given the topic's znode read again (None if
    # gone) instead of the result, where the executor read it (MetadataWritten.topics:
    # an adoption's clearing)
    on_conflict: Callable[[TopicAssignment | None], None] | None = None
    topic: str = ""  # the topic written: its write is given up if the topic is forgotten
    # then called (with why) instead of ``on_failed``, if given
    on_forgotten: Callable[[str], None] | None = None
    deletes: bool = False  # a finished deletion's DeleteTopicZnodes (kept if it goes)


@dataclass
class _AssignmentWrite:
    """One partition's new replica assignment, queued for its topic's znode; ``then``
    gets the error code and message (NONE, None once written)."""

    partition: int
    assignment: ReplicaAssignment
    then: Callable[[int, str | None], None]


@dataclass
class _Request:
    """A request in progress: answered once all its parts are, or refused on resignation."""

    request_id: RequestId
    refuse: Callable[[str], Result]
    order: list[Any] = field(default_factory=list)
    results: dict[Any, Any] = field(default_factory=dict)
    build: Callable[[list[Any]], Result] | None = None


class ControllerCore:
    """One node's controller logic; active only between BecameController and Resigned."""

    def __init__(self, config: ControllerConfig, random_index: RandomIndex,
                 random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self.config = config
        self._random_index = random_index
        # the topic ids' randomness, apart from the assignments' (drawing ids from
        # ``random_index`` would change every later assignment a seed decides)
        self._random_bytes = random_bytes
        self._write_ids = itertools.count(1)
        self._reset()

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        self.active = False
        self.epoch = -1
        self.brokers: dict[int, BrokerInfo] = {}       # registered (live or shutting down)
        self.shutting_down: set[int] = set()
        self.topics: dict[str, TopicRecord] = {}
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self.deleting: set[str] = set()
        # Replicas reported failed (their storage, ReplicasOffline) that did not lead an
        # ISR of themselves alone then: never elected (their logs may lack acknowledged
        # records another replica has) until their leader takes them back into the ISR
        # (an AlterPartition written: they caught up), as Kafka's replicasOnOfflineDirs.
        # Each -> the partition's leader epoch when its failure was recorded: a leader's
        # proposal to take it back at that leader epoch or older is refused (the leader saw
        # it catch up before the failure was written, to a log it may since have lost)
        self.failed_replicas: dict[TopicPartition, dict[int, int]] = {}
        self.partition_fsm = PartitionStateMachine()
        self.replica_fsm = ReplicaStateMachine()
        self._changes: dict[int, _Change] = {}
        self._topic_writes: dict[int, _TopicWrite] = {}
        # topics whose creating znode write is in flight, each with how many (one name
        # can be twice: a second request's write refused NODE_EXISTS)
        self._creating: Counter[str] = Counter()
        # unified name ('.' as '_') -> the names of self.topics and self._creating with it
        # (as KRaft's topicsWithCollisionChars): a creation looks up its collisions here
        self._by_unified = UnifiedNameIndex()
        self._requests: dict[RequestId, _Request] = {}
        self._out: list[Effect] = []
        self._writes: list[MetadataWrite] = []
        self._lai: dict[int, dict[TopicPartition, tuple[LeaderAndIsr, bool]]] = {}
        self._um_partitions: dict[TopicPartition, UpdateMetadataPartition] = {}
        self._um_brokers: set[int] = set()     # brokers to send UpdateMetadata to
        self._um_full: set[int] = set()        # of which these get every partition
        self._um_deleted: dict[str, str] = {}  # deletions completed -> topic id ("" none)
        # per broker: the partitions to stop, with delete and the leader epoch to send
        self._stop: dict[int, dict[TopicPartition, tuple[bool, int]]] = {}
        # the adopted id each replica of a partition read back from its disk (its
        # LeaderAndIsr answers, TopicIdsConfirmed): kept in memory only, so a new
        # controller clears an adoption only on answers it got itself
        self._confirmed: dict[TopicPartition, dict[int, str]] = {}
        self._clearing: set[str] = set()  # topics whose adoption is being cleared
        # Reassignments (the topic znodes' adding/removing replicas): partitions a step of
        # whose reassignment is being written; the target of those completing (Kafka's
        # step B2: the replica set in memory is the target while the leader moves, the
        # ISR shrinks and the removed replicas stop, before the znode is written last)
        self._reassign_busy: set[TopicPartition] = set()
        self._completing: dict[TopicPartition, tuple[int, ...]] = {}
        self._reassign_stalled: set[TopicPartition] = set()  # waiting for a leader to move to
        # replicas a reassignment removed and not yet deleted: still the leader or in the
        # ISR (never deleted while they may hold the only in-sync copy), or on a dead broker
        # (deleted once it registers again)
        self._removed_pending: dict[TopicPartition, set[int]] = {}
        # partitions a step of whose reassignment failed to be written: tried again on the
        # shell's RetryReassignments tick only (not on the next event: the outcome of each
        # try, or the answer to a StopReplica it sent, would start the next one); those of
        # phase A are advanced again, the others complete (or leave the ISR) again
        self._reassign_failed: set[TopicPartition] = set()
        self._reassign_failed_advance: set[TopicPartition] = set()
        # the state phase B wrote for a partition whose last znode write (B6) is still to
        # succeed: while it is the partition's state, a retry writes the znode alone (not
        # a new leader epoch on every try)
        self._reassign_state_written: dict[TopicPartition, LeaderAndIsr] = {}
        # with it: the removed replicas B5 could not delete then (in the ISR, or on a dead
        # broker), stopped again once B6 succeeds (until then the znode names them: the
        # wait for them is dropped as "assigned again", and one registering again is told
        # to follow)
        self._reassign_parked: dict[TopicPartition, tuple[int, ...]] = {}
        # per topic: partition assignments waiting to be written (one write at a time,
        # each at the version the last one left)
        self._assignment_queue: dict[str, list[_AssignmentWrite]] = {}
        self._assignment_in_flight: set[str] = set()
        # topics whose znodes were removed under this controller (TopicsGone): their
        # replicas may remain on the nodes, so their names are refused to CreateTopics;
        # each with the removed topic's id ("" none): the same topic's znodes written back
        # (NewTopicsFound of that id) lift the refusal
        self._removed: dict[str, str] = {}
        # topics whose deletion had finished (every replica deleted) when their znodes
        # went, their last DeleteTopicZnodes still pending: refused as marked for
        # deletion until it lands (it removes their config znode too)
        self._finishing: set[str] = set()
        # topics TopicsGone is forgetting: the answers its given-up callbacks make while
        # they are still known leave them out (UNKNOWN_TOPIC_OR_PARTITION)
        self._forgetting: set[str] = set()

    @property
    def reassign_retry_pending(self) -> bool:
        """A reassignment step failed to be written: the shell should feed
        RetryReassignments after a while."""
        return self.active and bool(self._reassign_failed)

    def _on_retry_reassignments(self) -> None:
        """Steps that failed are tried again: phase A advanced anew; a completing move
        (phase B, its znode write alone if its state is written) and a removed replica's
        ISR exit are taken up by the checks run after this event."""
        advance = sorted(self._reassign_failed_advance)
        self._reassign_failed.clear()
        self._reassign_failed_advance.clear()
        for tp in advance:
            if tp in self._reassign_busy or tp not in self.states \
                    or tp.topic not in self.topics or tp.topic in self.deleting \
                    or not self.replica_assignment(tp).being_reassigned:
                continue
            self._reassign_busy.add(tp)
            self._advance_reassignment(tp)

    def eligible(self) -> set[int]:
        """Brokers that may lead: registered and not shutting down."""
        return set(self.brokers) - self.shutting_down

    def electable(self, tp: TopicPartition, brokers: Collection[int]) -> set[int]:
        """``brokers`` but the replicas of ``tp`` known to have failed their storage."""
        return set(brokers) - self.failed_replicas.get(tp, {}).keys()

    def assignment(self, tp: TopicPartition) -> tuple[int, ...]:
        completing = self._completing.get(tp)
        if completing is not None:
            return completing
        return self.topics[tp.topic].assignment.partitions[tp.partition]

    def replica_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        """The partition's replicas as its znode holds them, with a reassignment's
        adding and removing replicas."""
        return self.topics[tp.topic].assignment.replica_assignment(tp.partition)

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.topics[topic].assignment.partitions)]

    def all_partitions(self) -> list[TopicPartition]:
        return [tp for topic in sorted(self.topics) if topic not in self._forgetting
                for tp in self.partitions_of(topic)]

    def _unclean(self, topic: str) -> bool:
        record = self.topics.get(topic)
        value = record.configs.get("unclean.leader.election.enable") if record else None
        if value is None:
            return self.config.unclean_leader_election_enable
        return str(value).lower() == "true"

    # ----------------------------------------------------------------- handle
    def handle(self, event: Event) -> list[Effect]:
        """Apply one event; the effects to perform, in order."""
        try:
            self._dispatch(event)
            if self.active:
                self._check_reassignments()
                if self._removed_pending:
                    self._retry_removed_replicas()
            return self._flush()
        finally:
            self._out, self._writes = [], []

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, BecameController):
            self._on_became_controller(event)
        elif isinstance(event, Resigned):
            self._on_resigned(event.reason, event.unanswered)
        elif not self.active:
            self._refuse_inactive(event)
        elif isinstance(event, MetadataWritten):
            self._on_written(event)
        elif isinstance(event, MetadataWriteFailed):
            self._on_write_failed(event)
        elif isinstance(event, LiveBrokersChanged):
            self._on_brokers_changed(event.brokers)
        elif isinstance(event, NewTopicsFound):
            self._on_new_topics_found(event.topics)
        elif isinstance(event, TopicsGone):
            self._on_topics_gone(event.topics)
        elif isinstance(event, CreateTopics):
            self._on_create_topics(event)
        elif isinstance(event, CreatePartitions):
            self._on_create_partitions(event)
        elif isinstance(event, DeleteTopics):
            self._on_delete_topics(event)
        elif isinstance(event, TopicDeletionsRequested):
            self._on_deletions_requested(event.topics)
        elif isinstance(event, StopReplicaDone):
            self._on_stop_replica_done(event)
        elif isinstance(event, IsrChanged):
            self._on_isr_changed(event.states)
        elif isinstance(event, AlterPartitionRequest):
            self._on_alter_partition(event)
        elif isinstance(event, ControlledShutdownRequest):
            self._on_controlled_shutdown(event)
        elif isinstance(event, ReplicasOffline):
            self._on_replicas_offline(event)
        elif isinstance(event, ElectLeaders):
            self._on_elect_leaders(event)
        elif isinstance(event, AutoLeaderRebalance):
            self._on_auto_rebalance()
        elif isinstance(event, RetryReassignments):
            self._on_retry_reassignments()
        elif isinstance(event, TopicConfigsChanged):
            self._on_topic_configs_changed(event.configs)
        elif isinstance(event, TopicIdsConfirmed):
            self._on_topic_ids_confirmed(event)
        elif isinstance(event, AlterPartitionReassignments):
            self._on_alter_reassignments(event)
        elif isinstance(event, ListPartitionReassignments):
            self._on_list_reassignments(event)
        else:
            raise TypeError(f"not a controller event: {event!r}")

    def _refuse_inactive(self, event: Event) -> None:
        not_controller = int(ErrorCode.NOT_CONTROLLER)
        message = f"broker {self.config.broker_id} is not the controller"
        if isinstance(event, CreateTopics):
            self._reply(event.request_id, CreateTopicsResult(tuple(
                TopicResult(t.name, not_controller, message) for t in event.topics)))
        elif isinstance(event, CreatePartitions):
            self._reply(event.request_id, CreatePartitionsResult(tuple(
                TopicResult(t.name, not_controller, message) for t in event.topics)))
        elif isinstance(event, DeleteTopics):
            self._reply(event.request_id, DeleteTopicsResult(tuple(
                TopicResult(t, not_controller, message) for t in event.topics)))
        elif isinstance(event, ControlledShutdownRequest):
            self._reply(event.request_id, ControlledShutdownResult(not_controller, message))
        elif isinstance(event, AlterPartitionRequest):
            self._reply(event.request_id, AlterPartitionResult(not_controller))
        elif isinstance(event, ReplicasOffline):
            self._reply(event.request_id, ReplicasOfflineResult(not_controller))
        elif isinstance(event, ElectLeaders) and event.request_id is not None:
            self._reply(event.request_id, ElectLeadersResult(not_controller))
        elif isinstance(event, AlterPartitionReassignments):
            self._reply(event.request_id, AlterReassignmentsResult(not_controller))
        elif isinstance(event, ListPartitionReassignments):
            self._reply(event.request_id, ListReassignmentsResult(not_controller))
        # Anything else (notices, late write outcomes) means nothing to a standby.

    # ---------------------------------------------------------------- effects
    def _reply(self, request_id: RequestId, result: Result) -> None:
        self._out.append(Reply(request_id, result))

    def _log(self, message: str) -> None:
        self._out.append(StateChangeFailed(message))

    def _write(self, make: Callable[[int], MetadataWrite]) -> int:
        write_id = next(self._write_ids)
        self._writes.append(make(write_id))
        return write_id

    def _flush(self) -> list[Effect]:
        """Batched node requests first (LeaderAndIsr, UpdateMetadata, StopReplica, as
        Kafka's ControllerBrokerRequestBatch), then replies and log lines, then writes."""
        sends: list[Effect] = []
        if self.active:
            sends += self._flush_leader_and_isr()
            sends += self._flush_update_metadata()
            sends += self._flush_stop_replica()
        self._lai, self._um_partitions, self._um_brokers = {}, {}, set()
        self._um_full, self._stop, self._um_deleted = set(), {}, {}
        return sends + self._out + list(self._writes)

    def _broker_epoch(self, broker_id: int) -> int:
        info = self.brokers.get(broker_id)
        return info.epoch if info else -1

    def _flush_leader_and_isr(self) -> list[Effect]:
        out: list[Effect] = []
        for broker_id in sorted(self._lai):
            if broker_id not in self.brokers:
                continue
            rows = []
            leaders: set[int] = set()
            for tp, (state, is_new) in sorted(self._lai[broker_id].items()):
                rows.append(LeaderAndIsrPartition(
                    tp.topic, tp.partition, state.controller_epoch, state.leader,
                    state.leader_epoch, list(state.isr), state.version,
                    list(self.assignment(tp)), is_new))
                if state.leader in self.brokers:
                    leaders.add(state.leader)
            live_leaders = [LiveLeaderRow(b, self.brokers[b].gateway, self.brokers[b].num_handlers)
                            for b in sorted(leaders)]
            out.append(SendToBroker(broker_id, LeaderAndIsrRequest(
                self.config.broker_id, self.epoch, self._broker_epoch(broker_id), rows,
                live_leaders, self._configs_of(r.topic for r in rows),
                topic_ids=self._topic_ids_of(r.topic for r in rows),
                topic_ids_adopted=self._adopted_of(r.topic for r in rows))))
        return out

    def _adopted_of(self, topics: Iterable[str]) -> list[str]:
        """Those of these topics whose id was given late (``topic_id_adopted``): a
        replica directory holding another id is this topic's, rewritten to it (Kafka
        never deletes on a mismatch either: it keeps the partition offline)."""
        return [t for t in sorted(set(topics)) if t in self.topics
                and self.topics[t].assignment.topic_id_adopted]

    def _on_topic_ids_confirmed(self, event: TopicIdsConfirmed) -> None:
        """Kept per replica while it is known to hold them: a confirmation is from the
        broker's current registration (an earlier one's disk may be another), of a
        replica of the partition (a non-replica's counts for nothing), and is forgotten
        when the broker goes or comes back (``_on_brokers_changed``) or reports the
        replica's storage failed (``_on_replicas_offline``)."""
        broker = self.brokers.get(event.broker_id)
        if broker is None or broker.epoch != event.broker_epoch:
            return
        touched: set[str] = set()
        for tp, topic_id in event.topic_ids.items():
            if tp.topic in self.topics and event.broker_id in self.assignment(tp):
                self._confirmed.setdefault(tp, {})[event.broker_id] = topic_id
                touched.add(tp.topic)
        for topic in sorted(touched):
            self._maybe_clear_adoption(topic)

    def _forget_confirmations(self, brokers: set[int],
                              partitions: Iterable[TopicPartition] | None = None) -> None:
        """Drop what these brokers confirmed (of ``partitions``, or of all): they must
        read the adopted ids back again before an adoption clears."""
        for tp in list(self._confirmed) if partitions is None else partitions:
            confirmed = self._confirmed.get(tp)
            if confirmed is None:
                continue
            for broker in brokers:
                confirmed.pop(broker, None)
            if not confirmed:
                del self._confirmed[tp]

    def _maybe_clear_adoption(self, topic: str) -> None:
        """Clear the topic's adoption once every replica of every partition has read its
        adopted id back from its ``partition.metadata``: no directory of the topic then
        holds an earlier id, so a directory of another id found later is a dead
        namesake's again (deleted, as for any topic). The znode is written unmarked and
        the record under ``/actorlog`` dropped in one transaction, at the version read.
        A Kafka tool's rewrite meanwhile refuses it: the znode is read again and, if it
        still names the id, marked adopted, and every replica it names confirmed it, the
        clearing is written at its version (``_clear_adoption``)."""
        record = self.topics.get(topic)
        if (record is None or topic in self.deleting or topic in self._clearing
                or not record.assignment.topic_id_adopted):
            return
        if self._all_confirmed(topic, record.assignment):
            self._clear_adoption(topic, record.assignment, 1)

    def _all_confirmed(self, topic: str, assignment: TopicAssignment) -> bool:
        """Every replica of every partition ``assignment`` names read its id back."""
        return all(self._confirmed.get(TopicPartition(topic, p), {}).get(replica)
                   == assignment.topic_id
                   for p, replicas in assignment.partitions.items() for replica in replicas)

    def _clear_adoption(self, topic: str, read: TopicAssignment, attempt: int) -> None:
        """Write ``read`` (the topic's znode as last read, adopted) unmarked at its
        version, dropping the record; on a version conflict, again at the version the
        znode has then, at most ``max_conflict_retries`` times."""
        topic_id = read.topic_id
        assignment = replace(read, topic_id_adopted=False)
        self._clearing.add(topic)

        def failed(message: str) -> None:
            self._clearing.discard(topic)
            self._log(f"controller {self.config.broker_id} epoch {self.epoch}: clearing the "
                      f"adoption of topic {topic!r}'s id {topic_id} failed: {message}")

        def on_result(_key: Any, result: WriteResult) -> None:
            self._clearing.discard(topic)
            if not result.ok:
                failed(result.message or result.code.value)
                return
            current = self.topics.get(topic)
            if current is not None and current.assignment.topic_id == topic_id:
                # unmarked in the cache too; its version taken only where the cache holds
                # what was written (a tool's rewrite of the partitions is not taken in)
                same = current.assignment.partitions == assignment.partitions
                self.topics[topic] = replace(current, assignment=replace(
                    current.assignment, topic_id_adopted=False,
                    version=result.version if same else current.assignment.version))
            for tp in [tp for tp in self._confirmed if tp.topic == topic]:
                del self._confirmed[tp]

        def on_conflict(now: TopicAssignment | None) -> None:
            self._clearing.discard(topic)
            if now is None or now.topic_id != topic_id or not now.topic_id_adopted:
                return  # gone, another id, or cleared already: nothing left to clear
            if attempt >= self.config.max_conflict_retries:
                failed(f"its znode kept changing ({attempt} attempts)")
            elif not self._all_confirmed(topic, now):
                failed("its znode changed meanwhile, naming replicas not confirmed yet")
            elif topic in self.topics and topic not in self.deleting:
                self._clear_adoption(topic, now, attempt + 1)

        write_id = self._write(lambda w: SetTopicAssignment(w, topic, assignment,
                                                            clear_adoption=True))
        self._topic_writes[write_id] = _TopicWrite(on_result, failed, on_conflict, topic)

    def _topic_ids_of(self, topics: Iterable[str]) -> dict[str, str]:
        """The ids of these topics that have one: a node's shard deletes, never opens, a
        partition directory that holds another (a deleted namesake's)."""
        return {t: self.topics[t].assignment.topic_id for t in sorted(set(topics))
                if t in self.topics and self.topics[t].assignment.topic_id}

    def _internal_counts_of(self, topics: Iterable[str]) -> dict[str, int]:
        """How many partitions the internal ones of these topics are assigned."""
        return {t: len(self.topics[t].assignment.partitions)
                for t in sorted(set(topics) & INTERNAL_TOPICS) if t in self.topics}

    def _new_topic_id(self) -> str:
        """A random topic id, from the injected randomness (the simulator's seed decides
        it as every other choice)."""
        return new_topic_id(self._random_bytes)

    def _assign_topic_ids(self, names: Iterable[str]) -> None:
        """Give an id to each of these topics that has none (made by an older version),
        written to its znode at the version read (as Kafka's controller does for such
        topics); one whose znode changed meanwhile gets it at its next change."""
        for name in sorted(names):
            record = self.topics.get(name)
            if record is None or record.assignment.topic_id or name in self.deleting:
                continue
            # adopted: it existed without one, so its replicas' directories may hold an
            # id it had before (its znode rewritten by an older version): not a dead
            # namesake's, rewritten to this one, never deleted
            assignment = replace(record.assignment, topic_id=self._new_topic_id(),
                                 topic_id_adopted=True)

            def on_result(_key: Any, result: WriteResult, name: str = name,
                          assignment: TopicAssignment = assignment) -> None:
                current = self.topics.get(name)
                if not result.ok or current is None or current.assignment.topic_id \
                        or current.assignment.version != assignment.version:
                    return
                # the replicas learn it with their next role (a LeaderAndIsr at the same
                # leader epoch would be refused as stale); until then they open its
                # partitions as an older version did, by name
                self.topics[name] = replace(current, assignment=replace(
                    assignment, version=result.version))

            write_id = self._write(partial(SetTopicAssignment, topic=name, assignment=assignment))
            self._topic_writes[write_id] = _TopicWrite(on_result, lambda _m: None, topic=name)

    def _configs_of(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """The configs of these topics, for the nodes (they open logs and answer DescribeConfigs
        from them, without reading the store)."""
        return {t: dict(self.topics[t].configs) for t in sorted(set(topics)) if t in self.topics}

    def _broker_rows(self) -> list[BrokerRow]:
        return [BrokerRow(b.broker_id, b.epoch, b.gateway, b.rack,
                          [EndpointRow(e.listener, e.host, e.port, e.security_protocol)
                           for e in b.endpoints], b.num_handlers, b.num_shards, b.num_coordinators)
                for b in sorted(self.brokers.values(), key=lambda b: b.broker_id)]

    def _um_row(self, tp: TopicPartition) -> UpdateMetadataPartition:
        state = self.states[tp]
        replicas = self.assignment(tp)
        eligible = self.eligible()
        leader = LEADER_DURING_DELETE if tp.topic in self.deleting else state.leader
        return UpdateMetadataPartition(
            tp.topic, tp.partition, state.controller_epoch, leader, state.leader_epoch,
            list(state.isr), state.version, list(replicas),
            [r for r in replicas if r not in eligible])

    def _flush_update_metadata(self) -> list[Effect]:
        if not self._um_brokers:
            return []
        brokers = self._broker_rows()
        delta = [self._um_partitions[tp] for tp in sorted(self._um_partitions)]
        full: list[UpdateMetadataPartition] | None = None
        out: list[Effect] = []
        for broker_id in sorted(self._um_brokers & set(self.brokers)):
            if broker_id in self._um_full:
                if full is None:
                    full = [self._um_row(tp) for tp in self.all_partitions() if tp in self.states]
                rows, is_full = full, True
            else:
                rows, is_full = delta, False
            out.append(SendToBroker(broker_id, UpdateMetadata(
                self.config.broker_id, self.epoch, self._broker_epoch(broker_id), is_full,
                brokers, rows, self._configs_of(r.topic for r in rows),
                topic_ids=self._topic_ids_of(r.topic for r in rows),
                deleted_topics=dict(self._um_deleted),
                assigned_partitions=self._internal_counts_of(r.topic for r in rows))))
        return out

    def _flush_stop_replica(self) -> list[Effect]:
        out: list[Effect] = []
        for broker_id in sorted(self._stop):
            if broker_id not in self.brokers:
                continue
            rows = [StopReplicaPartition(tp.topic, tp.partition, epoch, delete)
                    for tp, (delete, epoch) in sorted(self._stop[broker_id].items())]
            out.append(SendToBroker(broker_id, StopReplica(
                self.config.broker_id, self.epoch, self._broker_epoch(broker_id), rows)))
        return out

    def _send_leader_and_isr(self, brokers: Iterable[int], tp: TopicPartition,
                             is_new: bool = False) -> None:
        """LeaderAndIsr for ``tp`` to ``brokers`` (the live ones), UpdateMetadata to all."""
        state = self.states[tp]
        for broker_id in brokers:
            if broker_id in self.brokers:
                self._lai.setdefault(broker_id, {})[tp] = (state, is_new)
        self._update_metadata([tp])

    def _update_metadata(self, partitions: Iterable[TopicPartition] = (),
                         brokers: Iterable[int] | None = None, full: bool = False) -> None:
        targets = set(self.brokers) if brokers is None else set(brokers)
        self._um_brokers |= targets
        if full:
            self._um_full |= targets
        for tp in partitions:
            if tp in self.states and tp.topic in self.topics:
                self._um_partitions[tp] = self._um_row(tp)

    def _stop_replica(self, broker_id: int, tp: TopicPartition, delete: bool,
                      leader_epoch: int = -1) -> None:
        """``leader_epoch``: the partition's, for a replica a reassignment removed (a node
        that learnt a newer one since, the replica assigned to it again, ignores the stop);
        -1 (any) otherwise."""
        self._stop.setdefault(broker_id, {})[tp] = (delete, leader_epoch)

    # -------------------------------------------------------- state machines
    def _move_partition(self, tp: TopicPartition, target: PartitionState) -> bool:
        try:
            self.partition_fsm.move(tp, target)
            return True
        except IllegalStateTransition as exc:
            self._log(f"controller {self.config.broker_id} epoch {self.epoch}: {exc}")
            return False

    def _move_replica(self, tp: TopicPartition, broker_id: int, target: ReplicaState) -> bool:
        try:
            self.replica_fsm.move((tp, broker_id), target)
            return True
        except IllegalStateTransition as exc:
            self._log(f"controller {self.config.broker_id} epoch {self.epoch}: {exc}")
            return False

    def _recipients(self, tp: TopicPartition) -> list[int]:
        """Who gets a partition's LeaderAndIsr: its live replicas, not those shutting down
        (they were told StopReplica; a LeaderAndIsr would make them follow again)."""
        return [r for r in self.assignment(tp) if r in self.brokers
                and (r not in self.shutting_down or r == self.states[tp].leader)]

    def _partition_state_for(self, state: LeaderAndIsr) -> PartitionState:
        return _P.ONLINE if state.leader in self.brokers else _P.OFFLINE

    # ------------------------------------------------------- becoming active
    def _on_became_controller(self, event: BecameController) -> None:
        self._reset()
        self.active = True
        self.epoch = event.epoch
        self.brokers = {b.broker_id: b for b in event.brokers}
        self.topics = dict(event.topics)
        for name in self.topics:
            self._index_name(name)
        self.deleting = set(event.topics_to_delete) & set(self.topics)
        # with delete.topic.enable=false the markers go unheeded (Kafka's deletion manager
        # removes them): the topics stay, their offsets too
        disabled = sorted(self.deleting) if not self.config.delete_topic_enable else []
        if disabled:
            self.deleting = set()
        newer = [s for s in event.partition_states.values() if s.controller_epoch > self.epoch]
        if newer:
            self._resign(f"a partition state was written by controller epoch "
                         f"{newer[0].controller_epoch}, newer than this controller's {self.epoch}")
            return
        for tp in self.all_partitions():
            state = event.partition_states.get(tp)
            if state is not None:
                self.states[tp] = state
                self.partition_fsm.move(tp, _P.NEW)
                self.partition_fsm.move(tp, self._partition_state_for(state))
            else:
                self.partition_fsm.move(tp, _P.NEW)
            for replica in self.assignment(tp):
                self.replica_fsm.move((tp, replica), _R.NEW)
                live = replica in self.brokers and tp.topic not in self.deleting
                self.replica_fsm.move((tp, replica), _R.ONLINE if live else _R.OFFLINE)
        # Brokers learn the live set and every partition before any LeaderAndIsr. A partition
        # that names a previous life of a live broker gets its LeaderAndIsr only once the
        # broker-change rule has rewritten it with a new leader epoch.
        self._update_metadata(brokers=self.brokers, full=True)
        for tp, state in list(self.states.items()):
            if tp.topic not in self.deleting and not self._registered_since(state):
                self._send_leader_and_isr(self._recipients(tp), tp)
        live_partitions = [tp for tp in self.all_partitions() if tp.topic not in self.deleting]
        self._change_partitions([tp for tp in live_partitions if tp in self.states],
                                self._broker_change_rule(set()))
        self._init_new_partitions([tp for tp in live_partitions if tp not in self.states])
        for topic in sorted(self.deleting):
            self._start_topic_deletion(topic, restart=True)
        # Reassignments a previous controller left in progress resume from the znodes
        # (Kafka's maybeResumeReassignments): those not complete get their leader epoch
        # bumped (the leader may not know the added replicas yet); the others complete
        # once this event is handled (``_check_reassignments``).
        for tp in self._reassigning_partitions():
            if tp in self.states and tp.topic not in self.deleting \
                    and not self._reassignment_complete(tp):
                self._reassign_busy.add(tp)
                self._advance_reassignment(tp)
        self._assign_topic_ids(self.topics)
        stray = set(event.topics_to_delete) - set(self.topics)
        if stray or disabled:
            unheeded = tuple(sorted(stray | set(disabled)))
            self._write(lambda w: RemoveTopicDeletionMarkers(w, unheeded))

    def _on_resigned(self, reason: str, unanswered: Any = None) -> None:
        pending = list(self._requests.values())
        self._reset()
        for request in pending:
            self._reply(request.request_id, request.refuse(f"the controller resigned: {reason}"))
        request_id = getattr(unanswered, "request_id", None)
        if request_id is not None and request_id not in {r.request_id for r in pending}:
            self._refuse_inactive(unanswered)

    def _topics_request(self, request_id: RequestId, names: list[str],
                        build: Callable[[tuple[TopicResult, ...]], Result]) -> _Request:
        """A per-topic request; topics not done when the controller resigns get NOT_CONTROLLER."""
        request = _Request(request_id, lambda _r: build(()), list(names),
                           build=lambda parts: build(tuple(parts)))
        code = int(ErrorCode.NOT_CONTROLLER)
        request.refuse = lambda reason: build(tuple(
            request.results.get(n) or TopicResult(n, code, reason) for n in request.order))
        self._requests[request_id] = request
        return request

    def _resign(self, reason: str) -> None:
        self._out.append(ResignController(reason))

    # -------------------------------------------------- partition changes
    def _change_partitions(self, tps: Iterable[TopicPartition], rule: Rule,
                           done: Callable[[dict[TopicPartition, Outcome]], None] | None = None,
                           notify_replicas: bool = True) -> set[TopicPartition]:
        """Apply ``rule`` to ``tps`` and write what changes; returns the partitions written."""
        change = _Change(rule, {}, notify_replicas=notify_replicas, done=done)
        for tp in tps:
            proposal = rule(tp, self.states[tp])
            if proposal is None:
                change.outcomes[tp] = None
            else:
                change.proposals[tp] = proposal
        written = set(change.proposals)
        self._submit(change)
        return written

    def _submit(self, change: _Change) -> None:
        if not change.proposals:
            if change.done is not None:
                change.done(change.outcomes)
            return
        states = dict(change.proposals)
        if change.create:
            write_id = self._write(lambda w: CreatePartitionStates(w, states))
        else:
            write_id = self._write(lambda w: UpdatePartitionStates(w, states))
        self._changes[write_id] = change

    def _on_written(self, event: MetadataWritten) -> None:
        change = self._changes.pop(event.write_id, None)
        if change is not None:
            self._on_partitions_written(change, event)
            return
        topic_write = self._topic_writes.pop(event.write_id, None)
        if topic_write is not None:
            for key, result in event.results.items():
                if (topic_write.on_conflict is not None and result.code is WriteCode.BAD_VERSION
                        and isinstance(key, str) and key in event.topics):
                    topic_write.on_conflict(event.topics[key])
                else:
                    topic_write.on_result(key, result)
        # Unknown ids: outcomes of writes made before a resignation.

    def _on_write_failed(self, event: MetadataWriteFailed) -> None:
        change = self._changes.pop(event.write_id, None)
        if change is not None:
            for tp in change.proposals:
                change.outcomes[tp] = f"metadata store unavailable: {event.message}"
            if change.done is not None:
                change.done(change.outcomes)
            return
        topic_write = self._topic_writes.pop(event.write_id, None)
        if topic_write is not None:
            topic_write.on_failed(f"metadata store unavailable: {event.message}")

    def _on_partitions_written(self, change: _Change, event: MetadataWritten) -> None:
        retry: list[TopicPartition] = []
        for tp, proposal in change.proposals.items():
            result = event.results.get(tp)
            if tp.topic not in self.topics:
                change.outcomes[tp] = f"partition {tp} was deleted meanwhile"
                continue
            if result is not None and result.ok and tp.topic in self.deleting:
                self.states[tp] = proposal.with_version(result.version)
                change.outcomes[tp] = f"the topic of {tp} is being deleted"
                continue
            if result is not None and result.ok:
                self._commit_state(tp, proposal.with_version(result.version), change)
                change.outcomes[tp] = self.states[tp]
                continue
            code = result.code if result is not None else WriteCode.ERROR
            current = event.current.get(tp)
            if code in (WriteCode.BAD_VERSION, WriteCode.NODE_EXISTS) and current is not None:
                if current.controller_epoch > self.epoch:
                    self._resign(f"partition {tp} was written by controller epoch "
                                 f"{current.controller_epoch}, newer than {self.epoch}")
                    return
                self._adopt_state(tp, current)
                change.adopted.append(tp)
                if change.rule is not None and change.attempts < self.config.max_conflict_retries:
                    retry.append(tp)
                else:
                    change.outcomes[tp] = (f"partition {tp}: its state changed meanwhile "
                                           f"({code.value})")
                continue
            message = result.message if result is not None else "no result"
            change.outcomes[tp] = f"writing partition {tp} failed: {code.value} {message}".strip()
            self._log(f"controller {self.config.broker_id} epoch {self.epoch}: "
                      f"{change.outcomes[tp]}")
        next_change = _Change(change.rule, {}, notify_replicas=change.notify_replicas,
                              attempts=change.attempts + 1, outcomes=change.outcomes,
                              done=change.done, adopted=change.adopted)
        for tp in retry:
            assert change.rule is not None
            again = change.rule(tp, self.states[tp])
            if again is None:
                next_change.outcomes[tp] = None
            else:
                next_change.proposals[tp] = again
        self._submit(next_change)

    def _adopt_state(self, tp: TopicPartition, state: LeaderAndIsr) -> None:
        """Take the store's state of ``tp`` into the cache (it was newer than ours)."""
        self.states[tp] = state
        target = self._partition_state_for(state)
        if self.partition_fsm.state(tp) is not target:
            self._move_partition(tp, target)

    def _commit_state(self, tp: TopicPartition, state: LeaderAndIsr, change: _Change) -> None:
        is_new = change.create
        self.states[tp] = state
        self._move_partition(tp, self._partition_state_for(state))
        if is_new:
            for replica in self.assignment(tp):
                self._move_replica(tp, replica,
                                   _R.ONLINE if replica in self.brokers else _R.OFFLINE)
        if change.notify_replicas:
            self._send_leader_and_isr(self._recipients(tp), tp, is_new=is_new)
        else:
            self._update_metadata([tp])

    # ----------------------------------------------------------------- rules
    def _with(self, current: LeaderAndIsr, leader: int, isr: Iterable[int]) -> LeaderAndIsr | None:
        isr = tuple(isr)
        if leader == current.leader and isr == current.isr:
            return None
        return current.new_leader_and_isr(leader, isr, self.epoch)

    def _reconcile(self, tp: TopicPartition, current: LeaderAndIsr, registered: Collection[int],
                   eligible: Collection[int]) -> tuple[int, tuple[int, ...]]:
        """The (leader, ISR) the broker-change rule wants, given who is alive."""
        alive_isr = tuple(r for r in current.isr if r in registered)
        if current.leader in registered:
            return current.leader, alive_isr
        assignment = self.assignment(tp)
        leader = offline_leader(assignment, current.isr, self.electable(tp, eligible),
                                self._unclean(tp.topic))
        if leader is None:
            return NO_LEADER, alive_isr or current.isr
        return leader, (alive_isr if leader in current.isr else (leader,))

    def _registered_since(self, state: LeaderAndIsr) -> set[int]:
        """Leader and ISR members of ``state`` that registered after it was written.

        Broker epochs and the state's zxid count on one clock (ZooKeeper's zxid), so such
        a member's role in ``state`` was given to a previous life of it: it bounced.
        """
        if state.zxid < 0:
            return set()
        return {b for b in {state.leader, *state.isr}
                if b in self.brokers and self.brokers[b].epoch > state.zxid}

    def _broker_change_rule(self, bounced: set[int]) -> Rule:
        def rule(tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
            if tp.topic in self.deleting:
                return None
            registered, eligible = set(self.brokers), self.eligible()
            leader, isr = current.leader, current.isr
            here = bounced | self._registered_since(current)
            if here & ({leader} | set(isr)):
                # A restarted broker lost its role: as Kafka, it dies, then comes back.
                interim_leader, interim_isr = self._reconcile(
                    tp, current, registered - here, eligible - here)
                interim = LeaderAndIsr(interim_leader, current.leader_epoch, interim_isr,
                                       current.controller_epoch)
                leader, isr = self._reconcile(tp, interim, registered, eligible)
                if leader == current.leader and isr == current.isr and leader in here:
                    return current.new_leader_and_isr(leader, isr, self.epoch)
            else:
                leader, isr = self._reconcile(tp, current, registered, eligible)
            return self._with(current, leader, isr)

        return rule

    def _controlled_shutdown_rule(self, broker_id: int) -> Rule:
        def rule(tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
            if current.leader == broker_id:
                leader = controlled_shutdown_leader(self.assignment(tp), current.isr,
                                                    self.electable(tp, self.eligible()),
                                                    self.shutting_down)
                if leader is None:
                    return None
                isr = [r for r in current.isr if r not in self.shutting_down]
                return self._with(current, leader, isr)
            isr = [r for r in current.isr if r != broker_id]
            if not isr:
                return None  # the ISR keeps its last member
            return self._with(current, current.leader, isr)

        return rule

    def _preferred_rule(self, tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
        leader = preferred_leader(self.assignment(tp), current.isr,
                                  self.electable(tp, self.eligible()))
        if leader is None or leader == current.leader:
            return None
        return self._with(current, leader, current.isr)

    def _unclean_rule(self, tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
        if current.leader in self.brokers:
            return None
        registered = set(self.brokers)
        leader = offline_leader(self.assignment(tp), current.isr,
                                self.electable(tp, self.eligible()), unclean=True)
        if leader is None:
            return None
        alive_isr = tuple(r for r in current.isr if r in registered)
        return self._with(current, leader, alive_isr if leader in current.isr else (leader,))

    # ---------------------------------------------------------- new partitions
    def _init_new_partitions(
            self, tps: Iterable[TopicPartition],
            done: Callable[[dict[TopicPartition, Outcome]], None] | None = None) -> None:
        """NewPartition -> OnlinePartition: first live replica leads, live replicas are the ISR."""
        change = _Change(None, {}, create=True, done=done)
        eligible = self.eligible()
        for tp in tps:
            self.failed_replicas.pop(tp, None)  # a namesake's, deleted
            live = [r for r in self.assignment(tp) if r in eligible]
            if not live:
                change.outcomes[tp] = (f"no assigned replica of {tp} is alive "
                                       f"(assigned {list(self.assignment(tp))})")
                self._log(f"controller {self.config.broker_id} epoch {self.epoch}: partition "
                          f"{tp} stays {_P.NEW.value}: {change.outcomes[tp]}")
                continue
            change.proposals[tp] = LeaderAndIsr(live[0], 0, tuple(live), self.epoch)
        def after(outcomes: dict[TopicPartition, Outcome]) -> None:
            # A create that found a state written already (by a previous controller) took
            # it over; such partitions then go through the broker-change rule like any
            # loaded partition.
            adopted = [tp for tp in change.adopted if tp in self.states]
            for tp in adopted:
                for replica in self.assignment(tp):
                    if self.replica_fsm.state((tp, replica)) is _R.NEW:
                        self._move_replica(tp, replica,
                                           _R.ONLINE if replica in self.brokers else _R.OFFLINE)
            if not adopted:
                if done is not None:
                    done(outcomes)
                return

            def merged(more: dict[TopicPartition, Outcome]) -> None:
                if done is not None:
                    done({**outcomes, **{tp: more.get(tp) or self.states[tp] for tp in adopted}})

            self._change_partitions(adopted, self._broker_change_rule(set()), merged)

        change.done = after
        self._submit(change)

    def _index_name(self, name: str) -> None:
        self._by_unified.add(name)

    def _unindex_name(self, name: str) -> None:
        """Once ``name`` is neither a topic nor being created."""
        if name in self.topics or self._creating[name] > 0:
            return
        self._by_unified.discard(name)

    def _add_topic(self, name: str, record: TopicRecord) -> list[TopicPartition]:
        self.topics[name] = record
        self._index_name(name)
        tps = self.partitions_of(name)
        for tp in tps:
            self._new_partition(tp)
        return tps

    def _new_partition(self, tp: TopicPartition) -> None:
        self._move_partition(tp, _P.NEW)
        for replica in self.assignment(tp):
            self._move_replica(tp, replica, _R.NEW)

    # ---------------------------------------------------------- broker changes
    def _on_brokers_changed(self, brokers: tuple[BrokerInfo, ...]) -> None:
        now = {b.broker_id: b for b in brokers}
        old = self.brokers
        new = set(now) - set(old)
        dead = set(old) - set(now)
        bounced = {b for b in set(now) & set(old) if now[b].epoch > old[b].epoch}
        changed = {b for b in set(now) & set(old) - bounced if now[b] != old[b]}
        if not (new or dead or bounced or changed):
            return
        self.brokers = now
        self.shutting_down -= dead | bounced
        gone = dead | bounced
        # a broker back (or new) may hold another disk: its replicas confirm again
        self._forget_confirmations(gone | new)
        for tp in self.all_partitions():
            for replica in self.assignment(tp):
                if replica not in gone:
                    continue
                if self.replica_fsm.state((tp, replica)) is _R.DELETION_STARTED:
                    self._move_replica(tp, replica, _R.DELETION_INELIGIBLE)
                elif self.replica_fsm.can_move((tp, replica), _R.OFFLINE):
                    self._move_replica(tp, replica, _R.OFFLINE)
        arrived = new | bounced
        self._update_metadata(brokers=set(now) - arrived)
        self._update_metadata(brokers=arrived, full=True)
        affected = [tp for tp in self.all_partitions()
                    if tp in self.states and tp.topic not in self.deleting
                    and (set(self.assignment(tp)) & (gone | arrived)
                         or self.partition_fsm.state(tp) is _P.OFFLINE)]
        written = self._change_partitions(affected, self._broker_change_rule(bounced))
        for tp in self.all_partitions():
            if tp.topic in self.deleting:
                continue
            on_arrived = [r for r in self.assignment(tp) if r in arrived]
            for replica in on_arrived:
                self._move_replica(tp, replica, _R.ONLINE)
            # Their role in every partition they host; those being rewritten get it with the
            # new state once it is written.
            if on_arrived and tp in self.states and tp not in written:
                self._send_leader_and_isr(on_arrived, tp)
        self._init_new_partitions([tp for tp in self.all_partitions()
                                   if tp not in self.states and tp.topic not in self.deleting
                                   and self.partition_fsm.state(tp) is _P.NEW])
        if arrived:
            self._retry_ineligible_deletions(arrived)

    # ------------------------------------------------------------ topic creation
    def _on_new_topics_found(self, topics: Mapping[str, TopicRecord]) -> None:
        fresh = {name: rec for name, rec in topics.items() if name not in self.topics}
        for name, rec in fresh.items():
            # the removed topic itself, its znodes written back: no namesake to refuse
            if self._removed.get(name) and self._removed[name] == rec.assignment.topic_id:
                del self._removed[name]
        added = {name: self._add_topic(name, fresh[name]) for name in sorted(fresh)}
        # an older version's topic: its id is written before its partitions' states, so
        # (the writes done in order) their first LeaderAndIsr carries it
        self._assign_topic_ids(fresh)
        for name in sorted(added):
            self._init_new_partitions(added[name])

    def _on_topics_gone(self, topics: frozenset[str]) -> None:
        """Kafka's processTopicChange -> removeTopic: a topic whose znodes an operator
        removed (not a DeleteTopics) is forgotten: its assignment, states, reassignment
        memory, a deletion under way (its marker removed: left, it would delete a topic
        made under the name later). As Kafka, the nodes are told nothing and nothing is
        deleted: its replicas stay on the nodes, the operator's to remove. Unlike Kafka, its
        partitions' and replicas' state machine entries go too.

        The writes still pending for it (retried by the shell, which drops them too, or
        queued behind one) are given up: their callbacks run now, while the topic is still
        known, with a failure (so a request waiting on one is answered), and nothing they
        would write or send for the topic goes out. Its name is then refused to
        CreateTopics (``_removed``) until that topic's znodes are written back (the same
        topic id: the refusal lifts) or the controller moves: the nodes keep the removed
        topic's leader epochs and logs, so a namesake's partitions would never lead
        (Kafka's controller refuses them the move to NewPartition, its brokers answer
        INCONSISTENT_TOPIC_ID); a CreateTopics is told why instead. A DeleteTopics whose
        every replica was deleted, only its last write (the znodes') pending, is finished
        instead: its name is refused as marked for deletion (``_finishing``) until that
        write, kept, lands or fails, then free."""
        gone = sorted(topics & set(self.topics))
        if not gone:
            return
        self._log(f"controller {self.config.broker_id} epoch {self.epoch}: the znodes of "
                  f"topic(s) {', '.join(gone)} were removed: forgotten")
        why = "its znodes were removed from the metadata store meanwhile"
        self._forgetting = set(gone)
        try:
            self._forget_topics(gone, why)
        finally:
            self._forgetting = set()

    def _forget_topics(self, gone: list[str], why: str) -> None:
        tps = {tp for topic in gone for tp in self.partitions_of(topic)}
        # a DeleteTopics whose every replica was deleted, its last write (the znodes')
        # pending: finished, not forgotten (its offsets go, its name is free once that
        # write lands: it is kept, and deletes what the operator left, the config)
        finished = {topic for topic in gone if topic in self.deleting and all(
            self.replica_fsm.state((tp, r)) is _R.DELETION_SUCCESSFUL
            for tp in self.partitions_of(topic) for r in self.assignment(tp))}
        ids = {topic: self.topics[topic].assignment.topic_id or "" for topic in gone}
        # callbacks first, the topic still known (none raises on it)
        for topic in gone:
            for item in self._assignment_queue.pop(topic, []):
                item.then(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"topic {topic!r}: {why}")
        for write_id, topic_write in list(self._topic_writes.items()):
            if topic_write.topic not in gone:
                continue
            if topic_write.deletes and topic_write.topic in finished:
                name = topic_write.topic
                self._finishing.add(name)
                self._topic_writes[write_id] = _TopicWrite(
                    partial(self._finishing_written, name), partial(self._finishing_failed, name))
                continue
            del self._topic_writes[write_id]
            if topic_write.on_forgotten is not None:
                topic_write.on_forgotten(why)
            elif topic_write.deletes:
                self._log(f"controller {self.config.broker_id} epoch {self.epoch}: the "
                          f"deletion of topic {topic_write.topic!r} given up: {why}")
            else:
                topic_write.on_failed(why)
        for write_id, change in list(self._changes.items()):
            dropped = [tp for tp in change.proposals if tp in tps]
            for tp in dropped:
                del change.proposals[tp]
                change.outcomes[tp] = f"partition {tp}: {why}"
            if dropped and not change.proposals:
                del self._changes[write_id]
                if change.done is not None:
                    change.done(change.outcomes)
        self.replica_fsm.forget([k for k in self.replica_fsm.snapshot() if k[0] in tps])
        self.partition_fsm.forget(tps)
        for tp in tps:
            self._forget_reassignment(tp)
            self.states.pop(tp, None)
            self._confirmed.pop(tp, None)
            self.failed_replicas.pop(tp, None)
            self._removed_pending.pop(tp, None)
            self._um_partitions.pop(tp, None)
            for lai in self._lai.values():
                lai.pop(tp, None)
            for stop in self._stop.values():
                stop.pop(tp, None)
        # what those callbacks wrote for it (the removal of its marker aside)
        self._writes = [w for w in (without_topics(w, gone) for w in self._writes)
                        if w is not None]
        marked = [topic for topic in gone if topic in self.deleting]
        if marked:
            self._write(lambda w: RemoveTopicDeletionMarkers(w, tuple(marked)))
        for topic in gone:
            self.topics.pop(topic)
            self._unindex_name(topic)
            self.deleting.discard(topic)
            self._clearing.discard(topic)
            self._assignment_in_flight.discard(topic)
            if topic in finished:
                # the nodes' group coordinators drop its offsets (as a DeleteTopics' end)
                self._um_deleted[topic] = ids[topic]
            else:
                self._removed[topic] = ids[topic]
        if finished:
            self._log(f"controller {self.config.broker_id} epoch {self.epoch}: the deletion "
                      f"of topic(s) {', '.join(sorted(finished))} had finished: deleted")
            self._update_metadata()

    def _finishing_written(self, topic: str, _key: Any, result: WriteResult) -> None:
        """A finished deletion's DeleteTopicZnodes, its topic's znodes removed by hand
        meanwhile, landed: the name is free."""
        if not result.ok:
            self._finishing_failed(topic, result.message or result.code.value)
            return
        self._finishing.discard(topic)

    def _finishing_failed(self, topic: str, message: str) -> None:
        """It failed: the name is free all the same (the deletion had finished, its
        replicas deleted; at most its config znode is left, which a CreateTopics of the
        name overwrites). Refused on, a caller would take TOPIC_ALREADY_EXISTS for its
        topic made, for this controller's tenure."""
        self._finishing.discard(topic)
        self._log(f"controller {self.config.broker_id} epoch {self.epoch}: deleting what "
                  f"was left of topic {topic!r} (its config) failed: {message}; left in "
                  f"the metadata store")

    def _on_create_topics(self, event: CreateTopics) -> None:
        request, dupes = self._unique_topics_request(
            event.request_id, [t.name for t in event.topics], CreateTopicsResult)
        too_many = self._too_many([
            len(t.assignment) if t.assignment is not None
            else self.config.num_partitions if t.num_partitions == -1 else t.num_partitions
            for t in event.topics])
        hosted = self._hosted_per_broker()
        for topic in event.topics:
            if topic.name in dupes:
                continue
            try:
                if too_many is not None:
                    raise too_many
                assignment, configs = self._plan_topic(topic)
                self._check_budget(topic.name, assignment, hosted)
            except KafkaError as exc:
                self._part_done(request, topic.name,
                                TopicResult(topic.name, int(exc.code), str(exc)))
                continue
            rf = len(assignment[0])
            ok = TopicResult(topic.name, int(ErrorCode.NONE), None, len(assignment), rf)
            if event.validate_only:
                self._part_done(request, topic.name, ok)
                continue
            self._create_topic(request, topic.name, assignment, configs, ok)

    @staticmethod
    def _too_many(counts: list[int]) -> PolicyViolationError | None:
        """Kafka's per-request maximum of new partitions, as the error for every topic."""
        try:
            check_request_size(request_total(counts))
        except PolicyViolationError as exc:
            return exc
        return None

    def _hosted_per_broker(self) -> dict[int, int]:
        """Replicas each broker holds, by the topics' assignments."""
        hosted: dict[int, int] = {}
        for record in self.topics.values():
            for replicas in record.assignment.partitions.values():
                for broker in replicas:
                    hosted[broker] = hosted.get(broker, 0) + 1
        return hosted

    def _check_budget(self, topic: str, added: Mapping[int, Iterable[int]],
                      hosted: dict[int, int]) -> None:
        """POLICY_VIOLATION when the new replicas take a broker past its limits; else
        count them in ``hosted`` (the next topic of the request sees them)."""
        budget = self.config.partition_budget
        new: dict[int, int] = {}
        for replicas in added.values():
            for broker in replicas:
                new[broker] = new.get(broker, 0) + 1
        if budget is not None:
            for broker, count in sorted(new.items()):
                check_node_budget(topic, count, hosted.get(broker, 0), budget,
                                  node=f"broker {broker}")
        for broker, count in new.items():
            hosted[broker] = hosted.get(broker, 0) + count

    def _plan_topic(self, topic: NewTopic) -> tuple[dict[int, tuple[int, ...]], dict[str, str]]:
        validate_topic_name(topic.name)
        if topic.name in self.deleting or topic.name in self._finishing:
            raise KafkaError(f"topic {topic.name!r} is marked for deletion",
                             ErrorCode.TOPIC_ALREADY_EXISTS)
        if topic.name in self.topics:
            raise KafkaError(f"topic {topic.name!r} already exists", ErrorCode.TOPIC_ALREADY_EXISTS)
        if topic.name in self._removed:
            raise KafkaError(
                f"topic {topic.name!r} was removed from ZooKeeper by hand (its znodes "
                f"deleted, not by DeleteTopics): its replicas may remain on the brokers, "
                f"whose logs and leader epochs would fence a new topic of that name; "
                f"delete its partition directories on the brokers (the refusal lasts until "
                f"the controller moves)",
                ErrorCode.INVALID_TOPIC_EXCEPTION)
        eligible = self.eligible()
        if topic.assignment is not None:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise KafkaError("both a replica assignment and a partition count or "
                                 "replication factor were given", ErrorCode.INVALID_REQUEST)
            assignment = validate_assignment(topic.assignment, self.brokers, active=eligible)
        else:
            partitions = (self.config.num_partitions if topic.num_partitions == -1
                          else topic.num_partitions)
            rf = (self.config.default_replication_factor if topic.replication_factor == -1
                  else topic.replication_factor)
            assignment = assign_new_topic(sorted(eligible), partitions, rf, self._random_index)
        # After the counts, before the configs (as Kafka's ZkAdminManager.createTopics):
        # the topics in ZooKeeper (one being deleted too) and those whose znodes are being
        # written (this request's earlier ones among them), as Kafka's one-by-one creation.
        # The rules on internal topics here, where the topic list is authoritative (a
        # handler's cache may be stale); a coordinator's own creation is exempt.
        self._by_unified.check(topic.name, topic.internal)
        if not topic.internal:
            check_internal_partition_count(topic.name, len(assignment),
                                           self.config.internal_partitions)
        return assignment, validate_new_topic_configs(dict(topic.configs))

    def _create_topic(self, request: _Request, name: str, assignment: dict[int, tuple[int, ...]],
                      configs: dict[str, str], ok: TopicResult) -> None:
        released = [False]

        def release() -> None:  # once per write, whichever way it ends
            if not released[0]:
                released[0] = True
                self._creating[name] -= 1
                if self._creating[name] <= 0:
                    del self._creating[name]
                    self._unindex_name(name)

        def failed(message: str) -> None:
            release()
            self._part_done(request, name, TopicResult(
                name, int(ErrorCode.REQUEST_TIMED_OUT), f"creating topic {name!r}: {message}"))

        def on_result(_key: Any, result: WriteResult) -> None:
            release()
            if result.code is WriteCode.NODE_EXISTS:
                self._part_done(request, name, TopicResult(
                    name, int(ErrorCode.TOPIC_ALREADY_EXISTS), f"topic {name!r} already exists"))
            elif not result.ok:
                failed(result.message or result.code.value)
            elif name in self.topics:  # found through the topics watch already
                self._part_done(request, name, ok)
            else:
                tps = self._add_topic(name, TopicRecord(
                    TopicAssignment(assignment, result.version, topic_id), configs))
                self._init_new_partitions(tps, lambda _o: self._part_done(request, name, ok))

        topic_id = self._new_topic_id()
        ok = replace(ok, topic_id=topic_id)
        self._creating[name] += 1
        self._index_name(name)
        write_id = self._write(lambda w: CreateTopicZnodes(
            w, name, TopicAssignment(assignment, topic_id=topic_id), configs))
        self._topic_writes[write_id] = _TopicWrite(on_result, failed)

    def _unique_topics_request(
            self, request_id: RequestId, names: list[str],
            build: Callable[[tuple[TopicResult, ...]], Result]) -> tuple[_Request, set[str]]:
        """A per-topic request answered once per name; a name listed twice is refused (as
        Kafka: INVALID_REQUEST for the name, the others go on)."""
        dupes = {n for n in names if names.count(n) > 1}
        request = self._topics_request(request_id, list(dict.fromkeys(names)), build)
        for name in sorted(dupes):
            self._part_done(request, name, TopicResult(
                name, int(ErrorCode.INVALID_REQUEST), "duplicate topic in request"))
        return request, dupes

    def _part_done(self, request: _Request, key: Any, part: Any) -> None:
        request.results[key] = part
        if all(k in request.results for k in request.order):
            self._requests.pop(request.request_id, None)
            assert request.build is not None, "only per-topic requests have parts"
            self._reply(request.request_id,
                        request.build([request.results[k] for k in request.order]))

    def _on_create_partitions(self, event: CreatePartitions) -> None:
        request, dupes = self._unique_topics_request(
            event.request_id, [t.name for t in event.topics], CreatePartitionsResult)
        too_many = self._too_many([
            spec.total - len(self.topics[spec.name].assignment.partitions)
            for spec in event.topics if spec.name in self.topics])
        hosted = self._hosted_per_broker()
        for spec in event.topics:
            name = spec.name
            if name in dupes:
                continue
            try:
                record = self.topics.get(name)
                if record is None:
                    raise KafkaError(f"topic {name!r} does not exist",
                                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                check_internal_growth(name)
                if too_many is not None:
                    raise too_many
                if name in self.deleting:
                    raise KafkaError(f"topic {name!r} is being deleted",
                                     ErrorCode.INVALID_TOPIC_EXCEPTION)
                if self._topic_reassigning(name):
                    # Kafka's ZkAdminManager: a reassignment's writes and this one's would race
                    raise KafkaError(f"A partition reassignment is in progress for the topic "
                                     f"{name!r}.", ErrorCode.REASSIGNMENT_IN_PROGRESS)
                existing = dict(record.assignment.partitions)
                if spec.total <= len(existing):
                    raise KafkaError(
                        f"topic {name!r} has {len(existing)} partitions; the new count must be "
                        f"higher, got {spec.total}", ErrorCode.INVALID_PARTITIONS)
                if spec.assignment is not None:
                    if len(spec.assignment) != spec.total - len(existing):
                        raise KafkaError(
                            f"the assignment lists {len(spec.assignment)} partitions, "
                            f"{spec.total - len(existing)} are being added",
                            ErrorCode.INVALID_REPLICA_ASSIGNMENT)
                    added = validate_assignment(
                        {len(existing) + i: r for i, r in enumerate(spec.assignment)},
                        self.brokers, first_partition=len(existing),
                        replication_factor=len(existing[0]), active=self.eligible())
                else:
                    added = assign_added_partitions(sorted(self.eligible()), existing, spec.total)
                self._check_budget(name, added, hosted)
            except KafkaError as exc:
                self._part_done(request, name, TopicResult(name, int(exc.code), str(exc)))
                continue
            ok = TopicResult(name, int(ErrorCode.NONE), None, spec.total, len(existing[0]))
            if event.validate_only:
                self._part_done(request, name, ok)
                continue
            self._grow_topic(request, name, record, {**existing, **added}, ok)

    def _grow_topic(self, request: _Request, name: str, record: TopicRecord,
                    partitions: dict[int, tuple[int, ...]], ok: TopicResult) -> None:
        old = set(record.assignment.partitions)

        def failed(message: str) -> None:
            self._part_done(request, name, TopicResult(
                name, int(ErrorCode.REQUEST_TIMED_OUT),
                f"adding partitions to {name!r}: {message}"))

        def on_result(_key: Any, result: WriteResult) -> None:
            if not result.ok:
                self._part_done(request, name, TopicResult(
                    name, int(ErrorCode.INVALID_PARTITIONS), f"adding partitions to {name!r}: "
                    f"the topic changed meanwhile ({result.code.value}); retry"))
                return
            version = result.version
            current = self.topics.get(name)
            if current is None:
                self._part_done(request, name, TopicResult(
                    name, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "deleted meanwhile"))
                return
            self.topics[name] = TopicRecord(
                replace(current.assignment, partitions=partitions, version=version),
                current.configs)
            tps = [TopicPartition(name, p) for p in sorted(set(partitions) - old)]
            for tp in tps:
                self._new_partition(tp)
            self._init_new_partitions(tps, lambda _outcomes: self._part_done(request, name, ok))

        # its id, and whether it was adopted, kept with the rest
        assignment = replace(record.assignment, partitions=partitions)
        # (fail_fast: never pending retry, so never given up by a TopicsGone)
        write_id = self._write(lambda w: SetTopicAssignment(w, name, assignment))
        self._topic_writes[write_id] = _TopicWrite(on_result, failed, topic=name)

    # ------------------------------------------------------------ topic deletion
    def _on_delete_topics(self, event: DeleteTopics) -> None:
        request = self._topics_request(event.request_id, list(dict.fromkeys(event.topics)),
                                       DeleteTopicsResult)
        to_mark = []
        for name in request.order:
            expected = event.expected_ids.get(name)
            if not self.config.delete_topic_enable:
                # first, as Kafka: an unknown topic or id is refused for this too
                self._part_done(request, name, TopicResult(
                    name, int(ErrorCode.TOPIC_DELETION_DISABLED),
                    "topic deletion is disabled (delete.topic.enable=false)"))
            elif expected is not None and (name not in self.topics or
                                           self.topics[name].assignment.topic_id != expected):
                # named by an id that is no longer this name's (deleted, maybe made again)
                self._part_done(request, name, TopicResult(
                    name, int(ErrorCode.UNKNOWN_TOPIC_ID), f"no topic has id {expected}",
                    topic_id=expected))
            elif name not in self.topics:
                self._part_done(request, name, TopicResult(
                    name, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    f"topic {name!r} does not exist"))
            elif name in self.deleting:
                self._part_done(request, name, TopicResult(
                    name, int(ErrorCode.NONE), topic_id=self.topics[name].assignment.topic_id))
            else:
                to_mark.append(name)
        if not to_mark:
            return
        topics = tuple(to_mark)

        def failed(message: str) -> None:
            for topic in topics:
                self._part_done(request, topic, TopicResult(
                    topic, int(ErrorCode.REQUEST_TIMED_OUT), f"deleting {topic!r}: {message}"))

        def on_result(key: Any, result: WriteResult) -> None:
            topic = str(key)
            if result.ok:
                record = self.topics.get(topic)
                topic_id = record.assignment.topic_id if record is not None else ""
                self._start_topic_deletion(topic)
                self._part_done(request, topic, TopicResult(topic, int(ErrorCode.NONE),
                                                            topic_id=topic_id))
            elif result.code is WriteCode.NO_NODE:
                self._part_done(request, topic, TopicResult(
                    topic, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    f"topic {topic!r} does not exist"))
            else:
                self._part_done(request, topic, TopicResult(
                    topic, int(ErrorCode.REQUEST_TIMED_OUT),
                    f"deleting {topic!r}: {result.message or result.code.value}"))

        write_id = self._write(lambda w: MarkTopicsForDeletion(w, topics))
        self._topic_writes[write_id] = _TopicWrite(on_result, failed)

    def _on_deletions_requested(self, topics: frozenset[str]) -> None:
        unknown = sorted(topics - set(self.topics))
        if unknown:
            self._write(lambda w: RemoveTopicDeletionMarkers(w, tuple(unknown)))
        if not self.config.delete_topic_enable:
            known = sorted(topics & set(self.topics))
            if known:
                self._write(lambda w: RemoveTopicDeletionMarkers(w, tuple(known)))
            return
        for topic in sorted(topics & set(self.topics) - self.deleting):
            self._start_topic_deletion(topic)

    def _forget_reassignment(self, tp: TopicPartition) -> None:
        """A deleted partition's reassignment memory goes with it: a namesake's move must
        not find a step of the old one written (keyed by name and partition)."""
        self._completing.pop(tp, None)
        self._reassign_busy.discard(tp)
        self._reassign_stalled.discard(tp)
        self._reassign_failed.discard(tp)
        self._reassign_failed_advance.discard(tp)
        self._reassign_state_written.pop(tp, None)
        self._reassign_parked.pop(tp, None)

    def _start_topic_deletion(self, topic: str, restart: bool = False) -> None:
        """Tell every node to drop the topic, then have each replica deleted (StopReplica)."""
        if topic in self.deleting and not restart:
            return
        self.deleting.add(topic)
        tps = self.partitions_of(topic)
        self._update_metadata([tp for tp in tps if tp in self.states])
        for tp in tps:
            # a reassignment completing: every replica of the znode's set is deleted, those
            # it was removing too (``assignment`` would name the target alone, and the
            # deletion would wait for replicas never asked to stop once it ends)
            self._completing.pop(tp, None)
            self._stop_unassigned_of_deleted(tp)
            if self.partition_fsm.state(tp) is not _P.NON_EXISTENT:
                if self.partition_fsm.state(tp) is not _P.OFFLINE:
                    self._move_partition(tp, _P.OFFLINE)
                self._move_partition(tp, _P.NON_EXISTENT)
            for replica in self.assignment(tp):
                key = (tp, replica)
                if self.replica_fsm.state(key) in (_R.DELETION_STARTED, _R.DELETION_SUCCESSFUL):
                    continue
                if self.replica_fsm.state(key) is _R.NON_EXISTENT:
                    # removed (and forgotten) by a reassignment whose last write is in flight
                    self._move_replica(tp, replica, _R.NEW)
                if self.replica_fsm.can_move(key, _R.OFFLINE):
                    self._move_replica(tp, replica, _R.OFFLINE)
                self._start_replica_deletion(tp, replica)
        self._maybe_finish_deletion(topic)

    def _stop_unassigned_of_deleted(self, tp: TopicPartition) -> None:
        """Replicas of a partition being deleted that its znode's set does not name, so
        that the deletion itself would not stop: removed replicas a reassignment has not
        deleted yet, and a leader or ISR member outside the set. Deleted (StopReplica with
        delete) on a live broker; on a dead one, once it registers again
        (``_removed_pending``, kept after the topic is gone)."""
        assigned = set(self.assignment(tp))
        extra = (self._removed_pending.pop(tp, set()) | set(self._strays(tp))) - assigned
        waiting = set()
        for replica in sorted(extra):
            self.replica_fsm.forget([(tp, replica)])
            if replica in self.brokers:
                self._stop_replica(replica, tp, delete=True)
            else:
                waiting.add(replica)
        if waiting:
            self._removed_pending[tp] = waiting

    def _start_replica_deletion(self, tp: TopicPartition, replica: int) -> None:
        if replica in self.brokers:
            if self._move_replica(tp, replica, _R.DELETION_STARTED):
                self._stop_replica(replica, tp, delete=True)
        else:
            self._move_replica(tp, replica, _R.DELETION_INELIGIBLE)

    def _retry_ineligible_deletions(self, brokers: set[int]) -> None:
        for topic in sorted(self.deleting):
            for tp in self.partitions_of(topic):
                for replica in self.assignment(tp):
                    if (replica in brokers and self.replica_fsm.state((tp, replica))
                            is _R.DELETION_INELIGIBLE):
                        self._move_replica(tp, replica, _R.OFFLINE)
                        self._start_replica_deletion(tp, replica)

    def _on_stop_replica_done(self, event: StopReplicaDone) -> None:
        touched: set[str] = set()
        for tp, error in event.partitions.items():
            if tp.topic not in self.deleting:
                continue
            key = (tp, event.broker_id)
            if self.replica_fsm.state(key) is not _R.DELETION_STARTED:
                continue
            failed = event.error_code != 0 or error != 0
            self._move_replica(tp, event.broker_id,
                               _R.DELETION_INELIGIBLE if failed else _R.DELETION_SUCCESSFUL)
            touched.add(tp.topic)
        for topic in sorted(touched):
            self._maybe_finish_deletion(topic)

    def _maybe_finish_deletion(self, topic: str) -> None:
        tps = self.partitions_of(topic)
        if not all(self.replica_fsm.state((tp, r)) is _R.DELETION_SUCCESSFUL
                   for tp in tps for r in self.assignment(tp)):
            return

        def failed(message: str) -> None:
            self._log(f"controller {self.config.broker_id} epoch {self.epoch}: deleting the "
                      f"znodes of topic {topic!r} failed: {message}")

        def on_result(_key: Any, result: WriteResult) -> None:
            if topic not in self.topics:
                return  # forgotten meanwhile (TopicsGone gives its writes up: not expected)
            if not result.ok:
                failed(result.message or result.code.value)
                return
            record = self.topics.get(topic)
            for tp in tps:
                for replica in self.assignment(tp):
                    self._move_replica(tp, replica, _R.NON_EXISTENT)
                self._forget_reassignment(tp)
                self.states.pop(tp, None)
                self._confirmed.pop(tp, None)
            self.topics.pop(topic, None)
            self._unindex_name(topic)
            self.deleting.discard(topic)
            # every live node's group coordinators take the topic's committed offsets
            # (Kafka's onPartitionsDeleted), told only now that its znodes are gone, by
            # name and id, before any namesake can be made (it is refused until here)
            self._um_deleted[topic] = (record.assignment.topic_id or "") if record else ""
            self._update_metadata()

        write_id = self._write(lambda w: DeleteTopicZnodes(w, topic))
        self._topic_writes[write_id] = _TopicWrite(on_result, failed, topic=topic, deletes=True)

    # ---------------------------------------------------------------- ISR changes
    def _on_isr_changed(self, states: Mapping[TopicPartition, LeaderAndIsr]) -> None:
        changed = []
        for tp, state in states.items():
            ours = self.states.get(tp)
            if ours is None or tp.topic in self.deleting or state.version <= ours.version:
                continue
            self._adopt_state(tp, state)
            changed.append(tp)
        if changed:
            self._update_metadata(changed)

    def _on_alter_partition(self, event: AlterPartitionRequest) -> None:
        broker = self.brokers.get(event.broker_id)
        if broker is None or broker.epoch != event.broker_epoch:
            self._reply(event.request_id, AlterPartitionResult(int(ErrorCode.STALE_BROKER_EPOCH)))
            return
        results: dict[TopicPartition, PartitionResult] = {}
        change = _Change(None, {}, notify_replicas=False)
        self._requests[event.request_id] = _Request(
            event.request_id, lambda _reason: AlterPartitionResult(int(ErrorCode.NOT_CONTROLLER)))
        for proposal in event.proposals:
            tp = proposal.partition
            error = self._check_isr_proposal(event.broker_id, proposal)
            if error is not None:
                results[tp] = PartitionResult(tp, int(error[0]), error[1], self.states.get(tp))
                continue
            current = self.states[tp]
            if tuple(proposal.new_isr) == current.isr:
                results[tp] = PartitionResult(tp, int(ErrorCode.NONE), None, current)
                continue
            change.proposals[tp] = LeaderAndIsr(current.leader, current.leader_epoch,
                                                tuple(proposal.new_isr), self.epoch,
                                                current.version)
        order = [p.partition for p in event.proposals]
        asked = {p.partition: p for p in event.proposals}

        def done(outcomes: dict[TopicPartition, Outcome]) -> None:
            for tp, outcome in outcomes.items():
                if isinstance(outcome, LeaderAndIsr):
                    self._rejoined(tp, outcome.isr)
                    results[tp] = PartitionResult(tp, int(ErrorCode.NONE), None, outcome)
                    continue
                if tp.topic in self._forgetting or tp.topic not in self.topics:
                    # given up as its topic went (or answered after, its change shared
                    # with another topic's partition): as Kafka, a topic it no longer knows
                    results[tp] = PartitionResult(
                        tp, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), outcome, None)
                    continue
                current = self.states.get(tp)
                proposal = asked[tp]
                if (current is not None and tp.topic in self.topics
                        and tp.topic not in self.deleting and current.leader == event.broker_id
                        and current.leader_epoch == proposal.leader_epoch
                        and current.isr == tuple(proposal.new_isr)):
                    # refused because the version moved, to the very state it asks for:
                    # the same change sent again (its first answer timed out) and written
                    # by the first while both waited for the store (sim seed 329); made,
                    # as a stale partition epoch asking for the current ISR is answered
                    results[tp] = PartitionResult(tp, int(ErrorCode.NONE), None, current)
                    continue
                results[tp] = PartitionResult(
                    tp, int(ErrorCode.INVALID_UPDATE_VERSION),
                    outcome or "not written", current)
            self._requests.pop(event.request_id, None)
            self._reply(event.request_id, AlterPartitionResult(
                int(ErrorCode.NONE), tuple(results[tp] for tp in dict.fromkeys(order))))

        change.done = done
        self._submit(change)

    def _rejoined(self, tp: TopicPartition, isr: Iterable[int]) -> None:
        """A leader took these replicas into the ISR (written): a failed one caught up from
        it, and may be elected again."""
        failed = self.failed_replicas.get(tp)
        if not failed:
            return
        back = failed.keys() & set(isr)
        if back:
            self._log(f"controller {self.config.broker_id} epoch {self.epoch}: replica(s) "
                      f"{sorted(back)} of {tp}, whose storage failed, are back in the ISR")
            for replica in back:
                del failed[replica]
            if not failed:
                del self.failed_replicas[tp]

    def _check_isr_proposal(self, broker_id: int,
                            proposal: IsrProposal) -> tuple[ErrorCode, str] | None:
        tp = proposal.partition
        current = self.states.get(tp)
        if current is None or tp.topic not in self.topics or tp.topic in self.deleting:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {tp} does not exist"
        if (proposal.leader_epoch > current.leader_epoch
                or proposal.partition_epoch > current.version):
            # the leader knows a state this controller never wrote: another controller did,
            # and this one is likely no longer the controller (its resignation not come
            # yet). Kafka answers NOT_CONTROLLER (KafkaController, 4b75265), which the
            # leader sends again, to whichever controller it learns of; a held answer
            # would stop it
            return (ErrorCode.NOT_CONTROLLER,
                    f"leader epoch {proposal.leader_epoch} / partition epoch "
                    f"{proposal.partition_epoch} of {tp} are ahead of this controller's "
                    f"{current.leader_epoch} / {current.version}")
        if proposal.leader_epoch < current.leader_epoch:
            # checked before who leads, as Kafka's controller does: a leader that another
            # succeeded is told its epoch is stale, and holds its change (HELD_ERRORS)
            return (ErrorCode.FENCED_LEADER_EPOCH,
                    f"leader epoch {proposal.leader_epoch} of {tp} is older than the current "
                    f"{current.leader_epoch}")
        if current.leader != broker_id:
            # Kafka's ZooKeeper controller does not check this (a leader changes with its
            # epoch); here, a broker that never led at this epoch: the leader sends it again
            return (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {broker_id} is not the leader of {tp} (leader {current.leader})")
        if proposal.partition_epoch < current.version and tuple(proposal.new_isr) != current.isr:
            # a stale partition epoch asking for the ISR the partition has already is the
            # leader's retry of a change made whose answer it never got (timed out): answered
            # with the current state, as Kafka does (equalsAllowStalePartitionEpoch); refused,
            # the leader stopped changing its ISR until a LeaderAndIsr that no change sends
            # (sim seed 2094)
            return (ErrorCode.INVALID_UPDATE_VERSION,
                    f"partition epoch {proposal.partition_epoch} of {tp} is older than the "
                    f"current {current.version}")
        isr = tuple(proposal.new_isr)
        assignment = self.assignment(tp)
        # a replica in the ISR already may stay in it though no longer assigned: the leader
        # a reassignment is moving away from, and could not move yet (no target replica
        # live and in the ISR), must still take the target replicas in as they catch up
        if (broker_id not in isr or len(set(isr)) != len(isr)
                or any(r not in assignment and r not in current.isr for r in isr)):
            return (ErrorCode.INVALID_REQUEST,
                    f"ISR {list(isr)} of {tp} must hold the leader and assigned replicas only")
        ineligible = [r for r in isr if r not in self.eligible() and r != broker_id]
        if ineligible and set(ineligible) - set(current.isr):
            return (ErrorCode.INELIGIBLE_REPLICA,
                    f"replicas {ineligible} of {tp} are not live brokers and cannot join the ISR")
        failed = self.failed_replicas.get(tp, {})
        stale = [r for r in isr if r not in current.isr and r in failed
                 and failed[r] >= proposal.leader_epoch]
        if stale:
            # the leader saw them caught up before their failure was written (its proposal
            # was delayed, or sent again): their logs may have lost what it saw
            return (ErrorCode.INELIGIBLE_REPLICA,
                    f"replicas {stale} of {tp} failed their storage at leader epoch "
                    f"{max(failed[r] for r in stale)} and must catch up at a newer one")
        return None

    # ---------------------------------------------------------- offline replicas
    def _on_replicas_offline(self, event: ReplicasOffline) -> None:
        """Kafka's onReplicasBecomeOffline for a broker whose storage failed (its log dir
        event): each named replica becomes OfflineReplica, leaves the ISR, and where it
        led, the first other live ISR member in assignment order leads at leader epoch + 1.
        Then the broker, whose log reopened, gets its role like every replica (OnlineReplica
        again): a follower out of the ISR, which truncates to the new leader and catches up
        before the leader takes it back. The rest of the ISR gone: the partition is offline
        until one of them is back. It led an ISR of itself alone at the failure (or is the
        only replica): it leads on, at a new leader epoch (nobody else has more). Else it is
        never elected while known failed (``failed_replicas``): where it is the ISR's last
        member, the partition is offline (Kafka's), rather than lose what a replica out of
        the ISR has (it stays offline until an unclean election, or a new controller, which
        does not know of the failure until the replica refuses the role it gives:
        availability traded, deliberately, for not losing acknowledged records). A replica
        already out of the ISR and not leading is written at a new leader epoch the first
        time (same leader and ISR): a proposal of its leader's to take it back, made when
        it had caught up before the failure, would otherwise land at the same leader
        epoch; and ``_check_isr_proposal`` refuses to take a known failed replica back at
        the leader epoch of its failure or older. Reported again (an answer lost), nothing
        changes: it is sent its current role again, which its shard takes (refused at that
        leader epoch, it is let in once more). A report refused at a leader epoch older
        than the partition's is stale (``leader_epochs``): ignored, its role sent again."""
        broker_id = event.broker_id
        broker = self.brokers.get(broker_id)
        if broker is None or broker.epoch != event.broker_epoch:
            self._reply(event.request_id, ReplicasOfflineResult(
                int(ErrorCode.STALE_BROKER_EPOCH)))
            return
        # their logs reopen, maybe on what the failure left: to be read back again
        self._forget_confirmations({broker_id}, event.partitions)
        results: dict[TopicPartition, PartitionResult] = {}
        acting: list[TopicPartition] = []
        for tp in dict.fromkeys(event.partitions):
            if tp.topic not in self.topics or tp not in self.states or tp.topic in self.deleting \
                    or broker_id not in self.assignment(tp):
                results[tp] = PartitionResult(
                    tp, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    f"broker {broker_id} hosts no replica of {tp} to take offline")
                continue
            refused_at = event.leader_epochs.get(tp, -1)
            current = self.states[tp]
            if 0 <= refused_at < current.leader_epoch:
                # stale: the replica was given a newer role since (which it took, and may
                # have caught up in and rejoined the ISR with, or refused and reported
                # anew); taking it offline now could take a healthy replica's partition
                # offline. Its current role is sent again, to take or refuse
                self._log(f"controller {self.config.broker_id} epoch {self.epoch}: broker "
                          f"{broker_id}'s report of {tp} at leader epoch {refused_at} is "
                          f"older than the current {current.leader_epoch}: ignored")
                if broker_id in self.brokers:
                    self._send_leader_and_isr([broker_id], tp)
                results[tp] = PartitionResult(tp, int(ErrorCode.NONE), None, current)
                continue
            if self.replica_fsm.can_move((tp, broker_id), _R.OFFLINE):
                self._move_replica(tp, broker_id, _R.OFFLINE)
            acting.append(tp)
        self._requests[event.request_id] = _Request(
            event.request_id, lambda _reason: ReplicasOfflineResult(int(ErrorCode.NOT_CONTROLLER)))

        def done(outcomes: dict[TopicPartition, Outcome]) -> None:
            self._requests.pop(event.request_id, None)
            for tp in acting:
                outcome = outcomes.get(tp)
                state = self.states.get(tp)
                if outcome is None or isinstance(outcome, LeaderAndIsr):
                    if self.replica_fsm.can_move((tp, broker_id), _R.ONLINE) \
                            and broker_id in self.brokers:
                        # its new role went out with the state (or its role did not change)
                        self._move_replica(tp, broker_id, _R.ONLINE)
                    if outcome is None and state is not None and state.leader != broker_id \
                            and broker_id not in state.isr:
                        # nothing written: its current role again, out of the ISR
                        self._send_leader_and_isr([broker_id], tp)
                    results[tp] = PartitionResult(tp, int(ErrorCode.NONE), None, state)
                else:
                    results[tp] = PartitionResult(
                        tp, int(ErrorCode.KAFKA_STORAGE_ERROR), outcome, state)
            failed = any(r.error_code == int(ErrorCode.KAFKA_STORAGE_ERROR)
                         for r in results.values())
            self._reply(event.request_id, ReplicasOfflineResult(
                int(ErrorCode.KAFKA_STORAGE_ERROR) if failed else int(ErrorCode.NONE),
                tuple(results[tp] for tp in dict.fromkeys(event.partitions))))

        self._change_partitions(acting, self._offline_replica_rule(broker_id, event.led_alone),
                                done)

    def _offline_replica_rule(self, broker_id: int,
                              led_alone: frozenset[TopicPartition]) -> Rule:
        """A partition the failed replica is in the ISR of, or leads, is written at leader
        epoch + 1 (its replica refused every older role, and a follower's may hold an ISR
        older than the leader's): without the broker in the ISR, led by the first other
        live ISR member where it led (or where the leader is gone), offline if the other
        ISR members are all gone. The ISR's only member: it leads on if it led alone at
        the failure (or is the only replica), else the partition is offline with it as
        the ISR's last member (never elected while known failed). Out of the ISR and not
        leading already: written at leader epoch + 1 with the same leader and ISR the first
        time (a proposal of its leader's to take it back, made before, is fenced), then
        nothing."""
        def rule(tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
            if tp.topic in self.deleting:
                return None
            failed = self.failed_replicas.get(tp, {})
            if current.leader != broker_id and broker_id not in current.isr:
                if failed.get(broker_id, current.leader_epoch) < current.leader_epoch:
                    # known failed, and written since: a report sent again, or one whose
                    # answer was lost (its current role is sent again)
                    return None
                # out of the ISR already, but its leader may have seen it caught up (a
                # proposal to take it back on its way, or sent again): known failed from
                # now, and written at a new leader epoch (same leader and ISR), which fences
                # such a proposal, and whose leader counts its followers' offsets anew
                failed[broker_id] = current.leader_epoch
                self.failed_replicas[tp] = failed
                return current.new_leader_and_isr(current.leader, current.isr, self.epoch)
            assignment = self.assignment(tp)
            registered = set(self.brokers)
            if current.isr == (broker_id,) and broker_id not in failed \
                    and (tp in led_alone or assignment == (broker_id,)) \
                    and (current.leader == broker_id or current.leader not in registered):
                # nobody else has its acknowledged records: it leads on at a new epoch
                return current.new_leader_and_isr(broker_id, (broker_id,), self.epoch)
            self.failed_replicas.setdefault(tp, {})[broker_id] = current.leader_epoch
            others = tuple(r for r in current.isr if r != broker_id)
            if current.leader == broker_id or current.leader not in registered:
                leader = offline_leader(assignment, others,
                                        self.electable(tp, self.eligible()))
                if leader is None:
                    # a live ISR member shutting down still has every acknowledged record
                    leader = offline_leader(assignment, others, self.electable(tp, registered))
                if leader is not None:
                    return current.new_leader_and_isr(leader, others, self.epoch)
                if others:
                    # the rest of the ISR is gone: offline (Kafka's NoLeader) until one of
                    # them, which may have what this replica lost, is back
                    return current.new_leader_and_isr(NO_LEADER, others, self.epoch)
                if current.leader == NO_LEADER:
                    return None  # offline already, the ISR's last member
                # the ISR's last member (kept, as Kafka keeps it): offline, never elected
                # while known failed (a replica out of the ISR may have what it lost)
                return current.new_leader_and_isr(NO_LEADER, (broker_id,), self.epoch)
            if not others:
                return None
            return current.new_leader_and_isr(current.leader, others, self.epoch)

        return rule

    # ----------------------------------------------------------- controlled shutdown
    def _on_controlled_shutdown(self, event: ControlledShutdownRequest) -> None:
        broker_id = event.broker_id
        broker = self.brokers.get(broker_id)
        if broker is None:
            self._reply(event.request_id, ControlledShutdownResult(
                int(ErrorCode.BROKER_NOT_AVAILABLE), f"broker {broker_id} is not registered"))
            return
        if event.broker_epoch < broker.epoch:
            self._reply(event.request_id, ControlledShutdownResult(
                int(ErrorCode.STALE_BROKER_EPOCH),
                f"broker epoch {event.broker_epoch} is older than {broker.epoch}"))
            return
        self.shutting_down.add(broker_id)
        acting = [tp for tp in self.all_partitions()
                  if tp in self.states and tp.topic not in self.deleting
                  and broker_id in self.assignment(tp) and len(self.assignment(tp)) > 1]
        followed = [tp for tp in acting if self.states[tp].leader != broker_id]
        for tp in followed:
            self._stop_replica(broker_id, tp, delete=False)
            if self.replica_fsm.can_move((tp, broker_id), _R.OFFLINE):
                self._move_replica(tp, broker_id, _R.OFFLINE)
        self._requests[event.request_id] = _Request(
            event.request_id, lambda reason: ControlledShutdownResult(
                int(ErrorCode.NOT_CONTROLLER), reason))

        def done(_outcomes: dict[TopicPartition, Outcome]) -> None:
            self._requests.pop(event.request_id, None)
            remaining = tuple(tp for tp in self.all_partitions()
                              if tp in self.states and tp.topic not in self.deleting
                              and self.states[tp].leader == broker_id
                              and len(self.assignment(tp)) > 1)
            self._reply(event.request_id, ControlledShutdownResult(
                int(ErrorCode.NONE), None, remaining))

        self._change_partitions(acting, self._controlled_shutdown_rule(broker_id), done)

    # ---------------------------------------------------------------- elections
    def _on_elect_leaders(self, event: ElectLeaders) -> None:
        requested = (list(dict.fromkeys(event.partitions)) if event.partitions is not None
                     else [tp for tp in self.all_partitions() if tp in self.states])
        results: dict[TopicPartition, PartitionResult] = {}
        electable = []
        for tp in requested:
            state = self.states.get(tp)
            if tp.topic not in self.topics or state is None:
                results[tp] = PartitionResult(tp, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                              "the partition does not exist")
            elif tp.topic in self.deleting:
                results[tp] = PartitionResult(tp, int(ErrorCode.INVALID_TOPIC_EXCEPTION),
                                              "the topic is being deleted")
            elif (event.election is ElectionType.PREFERRED
                  and state.leader == self.assignment(tp)[0]) or (
                    event.election is ElectionType.UNCLEAN and state.leader in self.brokers):
                results[tp] = PartitionResult(tp, int(ErrorCode.ELECTION_NOT_NEEDED), None, state)
            else:
                electable.append(tp)
        rule = (self._preferred_rule if event.election is ElectionType.PREFERRED
                else self._unclean_rule)
        not_available = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                         if event.election is ElectionType.PREFERRED
                         else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        if event.request_id is not None:
            self._requests[event.request_id] = _Request(
                event.request_id, lambda _reason: ElectLeadersResult(int(ErrorCode.NOT_CONTROLLER)))

        def done(outcomes: dict[TopicPartition, Outcome]) -> None:
            for tp, outcome in outcomes.items():
                if isinstance(outcome, LeaderAndIsr):
                    results[tp] = PartitionResult(tp, int(ErrorCode.NONE), None, outcome)
                elif tp.topic in self._forgetting or tp.topic not in self.topics:
                    results[tp] = PartitionResult(
                        tp, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), outcome, None)
                else:
                    results[tp] = PartitionResult(
                        tp, int(not_available), outcome or f"no eligible leader for {tp}",
                        self.states.get(tp))
            if event.request_id is not None:
                self._requests.pop(event.request_id, None)
                self._reply(event.request_id, ElectLeadersResult(
                    int(ErrorCode.NONE), tuple(results[tp] for tp in requested)))

        self._change_partitions(electable, rule, done)

    def _on_topic_configs_changed(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        for name, values in configs.items():
            record = self.topics.get(name)
            if record is None or name in self.deleting or dict(values) == record.configs:
                continue
            self.topics[name] = TopicRecord(record.assignment, dict(values))
            self._update_metadata(self.partitions_of(name))

    def _on_auto_rebalance(self) -> None:
        """Preferred election on the brokers whose share of lost leaderships is too high."""
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in self.all_partitions():
            if tp in self.states and tp.topic not in self.deleting:
                by_preferred.setdefault(self.assignment(tp)[0], []).append(tp)
        candidates = []
        limit = self.config.leader_imbalance_per_broker_percentage / 100
        for broker_id, tps in sorted(by_preferred.items()):
            lost = [tp for tp in tps if self.states[tp].leader != broker_id]
            if tps and len(lost) / len(tps) > limit:
                candidates += [tp for tp in lost if self._preferred_rule(tp, self.states[tp])]
        self._change_partitions(candidates, self._preferred_rule)

    # ------------------------------------------------------------ reassignments
    # Kafka's onPartitionReassignment (ZooKeeper mode), in steps:
    #   U1 write the topic znode with RS = target + original, AR = RS - original,
    #      RR = RS - target; U2 the cache takes it; U3 replicas of an earlier, replaced
    #      reassignment that RS no longer names leave the ISR and are deleted.
    #   A  (the target not all in the ISR) A1 bump the leader epoch, LeaderAndIsr to RS
    #      (the added replicas start following); A2 the added replicas are NewReplica.
    #   B  (every target replica in the ISR: caught up) B2 RS = target in memory; B3 a
    #      leader not in the target, or dead, is replaced by the first target replica
    #      live and in the ISR, at a new leader epoch; B4 the ISR loses RR (one write with
    #      B3: every target replica is in it, so it keeps every acknowledged record);
    #      B5 StopReplica(delete) to RR; B6 the znode gets RS = target, AR = RR = [] last
    #      (the only place the original set is kept: a controller failing over before it
    #      resumes from the znode); B8 UpdateMetadata to every node.
    # The Alter request is answered once U1 is written, as Kafka does (not at B6).

    def _reassigning_partitions(self) -> list[TopicPartition]:
        """Partitions whose znode names replicas being added or removed."""
        out = []
        # after every event: every topic's record is looked at (two fields each), only the
        # partitions moving are sorted
        for name, record in self.topics.items():
            assignment = record.assignment
            if assignment.adding or assignment.removing:
                out += [TopicPartition(name, p)
                        for p in set(assignment.adding) | set(assignment.removing)]
        return sorted(out)

    def _topic_reassigning(self, topic: str) -> bool:
        """A partition of ``topic`` is being reassigned (its znode says so, or a step of
        its move is being written)."""
        assignment = self.topics[topic].assignment
        return bool(assignment.adding or assignment.removing) or any(
            tp.topic == topic for tp in (*self._reassign_busy, *self._completing))

    def _reassignment_complete(self, tp: TopicPartition) -> bool:
        """Kafka's isReassignmentComplete: nothing to move, or every target replica is in
        the ISR."""
        assignment = self.replica_assignment(tp)
        state = self.states.get(tp)
        return not assignment.being_reassigned or (
            state is not None and set(assignment.target) <= set(state.isr))

    def _check_reassignments(self) -> None:
        """After every event: a reassigning partition whose target caught up completes."""
        for tp in self._reassigning_partitions():
            if (tp in self._reassign_busy or tp in self._reassign_failed
                    or tp.topic in self.deleting or tp not in self.states
                    or not self._reassignment_complete(tp)):
                continue
            self._reassign_busy.add(tp)
            self._complete_reassignment(tp)

    def _check_reassignment(self, tp: TopicPartition, replicas: tuple[int, ...] | None,
                            allow_rf_change: bool) -> ReplicaAssignment | PartitionResult:
        """The partition's assignment while it moves to ``replicas`` (None: back to its
        original set), or why not (Kafka's validateReplicas and maybeBuildReassignment)."""
        def refused(code: ErrorCode, message: str) -> PartitionResult:
            return PartitionResult(tp, int(code), message)

        record = self.topics.get(tp.topic)
        if (record is None or tp.topic in self.deleting
                or tp.partition not in record.assignment.partitions):
            return refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
        if tp not in self.states:
            return refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"partition {tp} has no leader and ISR yet")
        if tp in self._reassign_busy:
            return refused(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                           f"a step of the reassignment of {tp} is being written; try again")
        current = self.replica_assignment(tp)
        if replicas is None:
            if not current.being_reassigned:
                return refused(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                               f"no reassignment of {tp} is in progress")
            back = current.reassign_to(current.origin)
            return self._check_in_sync_kept(tp, current, back) or back
        if not replicas:
            return refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           "Empty replica list specified in partition reassignment.")
        if len(set(replicas)) != len(replicas):
            return refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Duplicate replica ids in partition reassignment replica list: "
                           f"{list(replicas)}")
        if any(r < 0 for r in replicas):
            return refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Invalid broker id in replica list: {list(replicas)}")
        if not allow_rf_change and len(replicas) != len(current.origin):
            # KIP-860 (v1's AllowReplicationFactorChange false): Kafka's code and words
            return refused(ErrorCode.INVALID_REPLICATION_FACTOR,
                           f"The replication factor is changed from {len(current.origin)} to "
                           f"{len(replicas)}")
        target = current.reassign_to(tuple(replicas))
        # live as Kafka's liveBrokerIds: registered and not in controlled shutdown
        live = self.eligible()
        dead = [r for r in target.adding if r not in live]
        if dead:
            return refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Replica assignment has brokers that are not alive. Replica list: "
                           f"{list(target.adding)}, live broker list: {sorted(live)}")
        return self._check_in_sync_kept(tp, current, target) or target

    def _check_in_sync_kept(self, tp: TopicPartition, current: ReplicaAssignment,
                            target: ReplicaAssignment) -> PartitionResult | None:
        """Refused: the new replica set drops the leader or an ISR member and none of it is
        live and in the ISR to lead. Kafka's controller would take them out of the ISR
        (keeping the last member) and delete them, the leader too: the only in-sync copy
        of acknowledged records lost. Here the move goes on (or is cancelled) once a
        replica of the new set is in the ISR."""
        state = self.states[tp]
        dropped = [r for r in current.replicas if r not in target.replicas
                   and (r == state.leader or r in state.isr)]
        if not dropped or self._reassign_leader(tp, state, set(target.replicas),
                                                 target.target) is not None:
            return None
        return PartitionResult(tp, int(ErrorCode.REASSIGNMENT_IN_PROGRESS), (
            f"replicas {dropped} of {tp} (leader {state.leader}, ISR {list(state.isr)}) would "
            f"leave the replica set, and none of {list(target.replicas)} is live and in the "
            f"ISR to lead: they may hold the only in-sync copy; try again once one is"))

    def _on_alter_reassignments(self, event: AlterPartitionReassignments) -> None:
        order = list(dict.fromkeys(tp for tp, _ in event.partitions))
        none = int(ErrorCode.NONE)
        request = _Request(event.request_id, lambda _r: AlterReassignmentsResult(none), order,
                           build=lambda parts: AlterReassignmentsResult(none, tuple(parts)))
        code = int(ErrorCode.NOT_CONTROLLER)
        request.refuse = lambda reason: AlterReassignmentsResult(none, tuple(
            request.results.get(tp) or PartitionResult(tp, code, reason) for tp in order))
        if not order:
            self._reply(event.request_id, AlterReassignmentsResult(none))
            return
        self._requests[event.request_id] = request
        wanted = dict(event.partitions)  # a partition named twice: its last replicas
        for tp in order:
            checked = self._check_reassignment(tp, wanted[tp], event.allow_rf_change)
            if isinstance(checked, PartitionResult):
                self._part_done(request, tp, checked)
                continue

            def answered(error: int, message: str | None, tp: TopicPartition = tp) -> None:
                if event.request_id in self._requests:
                    self._part_done(request, tp, PartitionResult(tp, error, message))

            self._start_reassignment(tp, checked, answered)

    def _start_reassignment(self, tp: TopicPartition, target: ReplicaAssignment,
                            then: Callable[[int, str | None], None]) -> None:
        """U1-U3, then phase A (or B at once, when nothing has to catch up)."""
        current = self.replica_assignment(tp)
        self._reassign_busy.add(tp)
        target = self._keeping_strays(tp, self._keeping_in_sync(tp, current, target))

        def written(error: int, message: str | None) -> None:
            if error != ErrorCode.NONE:
                self._reassign_busy.discard(tp)
                then(error, message)
                return
            for replica in target.adding:  # A2: the added replicas are new
                if self.replica_fsm.state((tp, replica)) is _R.NON_EXISTENT:
                    self._move_replica(tp, replica, _R.NEW)
                if self.replica_fsm.state((tp, replica)) is _R.NEW:
                    self._move_replica(tp, replica,
                                       _R.ONLINE if replica in self.brokers else _R.OFFLINE)
            then(int(ErrorCode.NONE), None)
            unneeded = tuple(r for r in current.replicas if r not in target.replicas)
            self._advance_reassignment(tp, unneeded)

        if target == current:
            written(int(ErrorCode.NONE), None)
        else:
            self._write_partition_assignment(tp, target, written)

    def _advance_reassignment(self, tp: TopicPartition, unneeded: tuple[int, ...] = ()) -> None:
        """Phase A (A1): a new leader epoch, the ISR without ``unneeded`` (U3), and the
        LeaderAndIsr to every replica of RS; or phase B if the target is in the ISR."""
        if tp not in self.states or tp.topic in self.deleting:
            self._stop_removed_replicas(tp, unneeded)
            self._reassign_busy.discard(tp)
            return
        strays = self._strays(tp)
        if strays and self._keeping_strays(tp, self.replica_assignment(tp)) \
                != self.replica_assignment(tp):
            # a leader or ISR member the znode's replica set does not name (a controller
            # failed over after U1, or one died while U1 was written): written into the
            # set as removing first, so that it is told the whole set (it can take the
            # new replicas into its ISR) and may be elected until phase B moves away
            def kept(error: int, message: str | None) -> None:
                if error != ErrorCode.NONE:
                    self._reassign_busy.discard(tp)
                    self._reassign_failed.add(tp)
                    self._reassign_failed_advance.add(tp)
                    self._log(f"controller {self.config.broker_id} epoch {self.epoch}: "
                              f"writing replicas {list(strays)} of {tp} back into its "
                              f"replica set failed: {message}")
                    return
                self._advance_reassignment(tp, unneeded)

            self._write_partition_assignment(
                tp, self._keeping_strays(tp, self.replica_assignment(tp)), kept)
            return
        if self._reassignment_complete(tp):
            self._complete_reassignment(tp, unneeded)
            return

        def done(outcomes: dict[TopicPartition, Outcome]) -> None:
            outcome = outcomes.get(tp)
            if isinstance(outcome, str):  # the write failed: tried again on the tick
                self._reassign_failed.add(tp)
                self._reassign_failed_advance.add(tp)
                self._log(f"controller {self.config.broker_id} epoch {self.epoch}: the new "
                          f"leader epoch of the reassignment of {tp} failed: {outcome}")
            if not isinstance(outcome, LeaderAndIsr) and tp in self.states:
                # nothing written (no live leader in RS): the replicas learn RS with the
                # state as it is; the next leader's election sends it at a new epoch
                self._send_leader_and_isr(self._recipients(tp), tp)
            self._stop_removed_replicas(tp, unneeded)
            self._reassign_busy.discard(tp)

        self._change_partitions([tp], self._reassign_rule, done)

    def _reassign_rule(self, tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
        """A new leader epoch with the ISR cut to the replica set (RS, or the target while
        completing); a leader outside it, or dead, replaced by the first target replica
        live and in the ISR (Kafka's ReassignPartitionLeaderElectionStrategy), failing that
        by any replica of the set live and in the ISR. None: no such leader."""
        if tp.topic not in self.topics or tp.topic in self.deleting:
            return None
        allowed = set(self.assignment(tp))
        target = self.replica_assignment(tp).target if tp not in self._completing \
            else self._completing[tp]
        leader = self._reassign_leader(tp, current, allowed, target)
        if leader is None:
            return None
        isr = tuple(r for r in current.isr if r in allowed)
        return current.new_leader_and_isr(leader, isr, self.epoch)

    def _reassign_leader(self, tp: TopicPartition, current: LeaderAndIsr, allowed: set[int],
                         target: Iterable[int]) -> int | None:
        """The leader of ``tp`` with the replica set cut to ``allowed``: the current one if
        it stays, live and in the ISR, else the first of ``target`` live and in the ISR,
        else the first of ``allowed`` live and in the ISR (a replica being removed, a
        leader written back into the set among them: it leads until the target can)."""
        isr = [r for r in current.isr if r in allowed]
        live = self.electable(tp, self.eligible())
        if current.leader in allowed and current.leader in live and current.leader in isr:
            return current.leader
        found = [r for r in (*target, *self.assignment(tp), *sorted(allowed))
                 if r in allowed and r in live and r in isr]
        return found[0] if found else None

    def _keeping_strays(self, tp: TopicPartition,
                        assignment: ReplicaAssignment) -> ReplicaAssignment:
        """``assignment`` with the partition's leader and ISR members it does not name
        appended as both adding and removing, when no replica it names is live and in the
        ISR to lead (else the reassignment rule moves the leadership there and cuts them
        out of the ISR). Out of the original set (a cancel does not keep them) and of the
        target (phase B deletes them once out of the ISR), but in the replica set: they are
        told it (a leader adds only the replicas its LeaderAndIsr names to the ISR) and
        may be elected meanwhile."""
        state = self.states.get(tp)
        if state is None:
            return assignment
        strays = tuple(r for r in dict.fromkeys((state.leader, *state.isr))
                       if r >= 0 and r not in assignment.replicas)
        if not strays or self._reassign_leader(tp, state, set(assignment.replicas),
                                               assignment.target) is not None:
            return assignment
        return ReplicaAssignment((*assignment.replicas, *strays),
                                 (*assignment.adding, *strays),
                                 (*assignment.removing, *strays))

    def _keeping_in_sync(self, tp: TopicPartition, current: ReplicaAssignment,
                         target: ReplicaAssignment) -> ReplicaAssignment:
        """A ``target`` moving nothing (a cancel, or a move back to the replica set) that
        drops replicas of ``current`` still the leader or in the ISR: those are kept in it as
        adding and removing until phase B cuts them out of the ISR and deletes them. Else
        the znode would name no reassignment while they are in the ISR: a controller
        failing over, or a failed phase-B write, would leave them there for good (and an
        election could find no leader in the set while one of them is live and in sync)."""
        state = self.states.get(tp)
        if state is None or target.being_reassigned:
            return target
        kept = tuple(r for r in current.replicas if r not in target.replicas
                     and (r == state.leader or r in state.isr))
        if not kept:
            return target
        return ReplicaAssignment((*target.replicas, *kept), kept, kept)

    def _strays(self, tp: TopicPartition) -> tuple[int, ...]:
        """The leader and ISR members of ``tp`` its znode's replica set no longer names (a
        controller failing over after U1 but before the ISR was cut does not know them
        from the znode)."""
        state = self.states.get(tp)
        if state is None:
            return ()
        replicas = self.replica_assignment(tp).replicas
        return tuple(r for r in dict.fromkeys((state.leader, *state.isr))
                     if r >= 0 and r not in replicas)

    def _complete_reassignment(self, tp: TopicPartition, unneeded: tuple[int, ...] = ()) -> None:
        """Phase B: B2 in memory, B3 + B4 in one state write, then B5, B6 and B8."""
        assignment = self.replica_assignment(tp)
        target = assignment.target
        self._completing[tp] = target  # B2
        if self._reassign_rule(tp, self.states[tp]) is None:
            del self._completing[tp]
            if assignment.being_reassigned and tp not in self._reassign_stalled:
                self._reassign_stalled.add(tp)  # said once; tried again after every event
                self._log(f"controller {self.config.broker_id} epoch {self.epoch}: the "
                          f"reassignment of {tp} to {list(target)} waits: no target replica "
                          f"is live and in the ISR {list(self.states[tp].isr)} to lead")
            self._stop_removed_replicas(tp, unneeded)
            self._reassign_busy.discard(tp)
            return
        self._reassign_stalled.discard(tp)
        removed = tuple(dict.fromkeys((*assignment.removing, *unneeded, *self._strays(tp))))
        if self._reassign_state_written.get(tp) != self.states[tp]:
            self._reassign_state_written.pop(tp, None)
            self._reassign_parked.pop(tp, None)

        def finished(error: int, message: str | None) -> None:
            if error != ErrorCode.NONE:
                # the znode still names the move: it is listed and completes again (phase B
                # anew, the znode write alone while the state is the one written) on the
                # RetryReassignments tick
                self._completing.pop(tp, None)
                self._reassign_busy.discard(tp)
                self._reassign_failed.add(tp)
                self._log(f"controller {self.config.broker_id} epoch {self.epoch}: writing "
                          f"the completed reassignment of {tp} to {list(target)} failed: "
                          f"{message}")
                return
            self._completing.pop(tp, None)
            self._reassign_busy.discard(tp)
            self._reassign_state_written.pop(tp, None)
            parked = self._reassign_parked.pop(tp, ())
            if parked:  # B5 again for those it could not delete before B6 failed
                self._stop_removed_replicas(tp, parked)
            self._update_metadata([tp])  # B8

        def written(outcomes: dict[TopicPartition, Outcome]) -> None:
            outcome = outcomes.get(tp)
            if not isinstance(outcome, LeaderAndIsr):
                self._completing.pop(tp, None)
                self._reassign_busy.discard(tp)
                self._reassign_failed.add(tp)
                self._log(f"controller {self.config.broker_id} epoch {self.epoch}: completing "
                          f"the reassignment of {tp} to {list(target)} failed: {outcome}")
                # the replicas U1 dropped are stopped still (those the znode names wait
                # for the retry; one in the ISR waits in ``_removed_pending``)
                self._stop_removed_replicas(tp, unneeded)
                return
            self._reassign_state_written[tp] = outcome
            self._stop_removed_replicas(tp, removed)  # B5
            pending = self._removed_pending.get(tp, set())
            self._reassign_parked[tp] = tuple(r for r in removed if r in pending)
            self._write_partition_assignment(tp, ReplicaAssignment(target), finished)  # B6

        if tp in self._reassign_state_written:  # B3 + B4 done: B6 failed before
            self._write_partition_assignment(tp, ReplicaAssignment(target), finished)
            return
        self._change_partitions([tp], self._reassign_rule, written)

    def _stop_removed_replicas(self, tp: TopicPartition, replicas: Iterable[int]) -> None:
        """Replicas no longer assigned: OfflineReplica (out of the ISR already), then
        deleted (StopReplica with delete to a live broker), then forgotten (Kafka's
        stopRemovedReplicasOfReassignedPartition does not wait for the deletion either).
        One still the leader or in the ISR (no write took it out: no leader was found, or
        the write failed) is not deleted: it may hold the only in-sync copy; it waits in
        ``_removed_pending`` until a state write takes it out. One on a dead broker waits
        there for the broker to register again."""
        state = self.states.get(tp)
        for replica in replicas:
            if replica in self.assignment(tp):
                continue  # assigned again (a later move)
            if state is not None and tp.topic not in self.deleting \
                    and (replica == state.leader or replica in state.isr):
                if replica not in self._removed_pending.get(tp, set()):
                    self._log(f"controller {self.config.broker_id} epoch {self.epoch}: "
                              f"replica {replica} of {tp} left the replica set but is still "
                              f"the leader or in the ISR {list(state.isr)}: not deleted yet")
                self._removed_pending.setdefault(tp, set()).add(replica)
                continue
            key = (tp, replica)
            if self.replica_fsm.can_move(key, _R.OFFLINE):
                self._move_replica(tp, replica, _R.OFFLINE)
            if replica in self.brokers:
                self._stop_replica(replica, tp, delete=True, leader_epoch=state.leader_epoch
                                   if state is not None else -1)
                pending = self._removed_pending.get(tp)
                if pending is not None:
                    pending.discard(replica)
                    if not pending:
                        del self._removed_pending[tp]
                failed = self.failed_replicas.get(tp)
                if failed is not None:
                    failed.pop(replica, None)
                    if not failed:
                        del self.failed_replicas[tp]
            else:
                self._removed_pending.setdefault(tp, set()).add(replica)
            self.replica_fsm.forget([key])
            self._forget_confirmations({replica}, [tp])

    def _retry_removed_replicas(self) -> None:
        """After every event: removed replicas waiting are deleted once out of the ISR and
        on a live broker; one still in the ISR of a partition no step of a reassignment is
        writing is taken out by a state write (the reassignment rule, if it finds a
        leader; else it waits)."""
        for tp in sorted(self._removed_pending):
            if tp.topic not in self.topics or tp.topic in self.deleting or tp not in self.states:
                # the topic is (being) deleted: its deletion does not stop these
                assigned = set(self.assignment(tp)) if tp.topic in self.topics \
                    and tp.partition in self.topics[tp.topic].assignment.partitions else set()
                left = {r for r in self._removed_pending[tp] if r not in assigned}
                for replica in sorted(r for r in left if r in self.brokers):
                    self._stop_replica(replica, tp, delete=True)
                    left.discard(replica)
                if left:
                    self._removed_pending[tp] = left
                else:
                    del self._removed_pending[tp]
                continue
            assigned = set(self.assignment(tp))
            waiting = sorted(r for r in self._removed_pending[tp] if r not in assigned)
            if not waiting:  # assigned again by a later move
                del self._removed_pending[tp]
                continue
            self._removed_pending[tp] = set(waiting)
            state = self.states[tp]
            in_sync = [r for r in waiting if r == state.leader or r in state.isr]
            ready = [r for r in waiting if r not in in_sync and r in self.brokers]
            if ready:
                self._stop_removed_replicas(tp, ready)
            if in_sync and tp not in self._reassign_busy and tp not in self._reassign_failed \
                    and self._reassign_rule(tp, state) is not None:
                self._reassign_busy.add(tp)
                self._change_partitions([tp], self._reassign_rule, self._unbusy(tp))

    def _unbusy(self, tp: TopicPartition) -> Callable[[dict[TopicPartition, Outcome]], None]:
        def done(outcomes: dict[TopicPartition, Outcome]) -> None:
            self._reassign_busy.discard(tp)
            if not isinstance(outcomes.get(tp), LeaderAndIsr):
                self._reassign_failed.add(tp)  # tried again on the RetryReassignments tick
        return done

    def _write_partition_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment,
                                    then: Callable[[int, str | None], None]) -> None:
        self._assignment_queue.setdefault(tp.topic, []).append(
            _AssignmentWrite(tp.partition, assignment, then))
        self._flush_assignment_writes(tp.topic)

    def _flush_assignment_writes(self, topic: str, attempt: int = 1) -> None:
        """Write the queued partition assignments of ``topic`` in one write of its znode, at
        the version the cache holds; the cache takes them once written. One write at a time
        per topic; a version conflict with a znode that is otherwise what the cache holds
        (a write whose answer was lost) is written again at the new version."""
        if topic in self._assignment_in_flight:
            return
        queued = self._assignment_queue.pop(topic, [])
        if not queued:
            return
        record = self.topics.get(topic)
        if record is None or topic in self.deleting:
            for item in queued:
                item.then(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                          f"topic {topic!r} is being deleted")
            return

        def apply(assignment: TopicAssignment) -> TopicAssignment:
            for item in queued:
                assignment = assignment.with_replica_assignment(item.partition, item.assignment)
            return assignment

        written = apply(record.assignment)
        self._assignment_in_flight.add(topic)

        def finish(error: int, message: str | None) -> None:
            self._assignment_in_flight.discard(topic)
            for item in queued:
                item.then(error, message)
            self._flush_assignment_writes(topic)

        def failed(message: str) -> None:
            finish(int(ErrorCode.UNKNOWN_SERVER_ERROR),
                   f"writing the assignment of topic {topic!r} failed: {message}")

        def on_result(_key: Any, result: WriteResult) -> None:
            if not result.ok:
                failed(f"{result.code.value} {result.message or ''}".strip())
                return
            current = self.topics.get(topic)
            if current is not None and topic not in self.deleting:
                # (a topic being deleted keeps the set its deletion waits for)
                self.topics[topic] = replace(current, assignment=replace(
                    apply(current.assignment), version=result.version))
            finish(int(ErrorCode.NONE), None)

        def on_conflict(now: TopicAssignment | None) -> None:
            current = self.topics.get(topic)
            if (now is not None and current is not None and topic not in self.deleting
                    and replace(now, version=current.assignment.version) != current.assignment):
                # written by someone else: the cache takes the znode as it is now (else
                # every retry would conflict again), when it names the same partitions
                # (one the controller never initialised is not taken), and the steps
                # waiting are decided anew from it on the RetryReassignments tick
                same = set(now.partitions) == set(current.assignment.partitions)
                if same:
                    self.topics[topic] = replace(current, assignment=now)
                self._log(f"controller {self.config.broker_id} epoch {self.epoch}: the znode "
                          f"of topic {topic!r} was written by another (version "
                          f"{now.version}): " + ("taken as it is" if same else
                                                 "it names other partitions: not taken"))
                failed("its znode changed meanwhile")
                return
            if now is None or current is None or attempt >= self.config.max_conflict_retries:
                failed("its znode changed meanwhile")
                return
            self.topics[topic] = replace(current, assignment=now)
            self._assignment_in_flight.discard(topic)
            self._assignment_queue[topic] = queued + self._assignment_queue.get(topic, [])
            self._flush_assignment_writes(topic, attempt + 1)

        def forgotten(message: str) -> None:
            finish(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"topic {topic!r}: {message}")

        write_id = self._write(lambda w: SetTopicAssignment(w, topic, written, fail_fast=False))
        self._topic_writes[write_id] = _TopicWrite(on_result, failed, on_conflict, topic,
                                                   forgotten)

    def _on_list_reassignments(self, event: ListPartitionReassignments) -> None:
        """Kafka's processListPartitionReassignments: the partitions asked for (or all)
        whose reassignment is in progress; others (unknown ones too) are left out."""
        asked = (self._reassigning_partitions() if event.partitions is None
                 else list(dict.fromkeys(event.partitions)))
        rows = []
        for tp in asked:
            record = self.topics.get(tp.topic)
            if (record is None or tp.partition not in record.assignment.partitions
                    or tp in self._completing):
                continue
            assignment = record.assignment.replica_assignment(tp.partition)
            if assignment.being_reassigned:
                rows.append(OngoingReassignment(tp, assignment.replicas, assignment.adding,
                                                assignment.removing))
        self._reply(event.request_id,
                    ListReassignmentsResult(int(ErrorCode.NONE), tuple(rows)))

    # ---------------------------------------------------------------- inspection
    def snapshot(self) -> dict[str, Any]:
        """The core's view, for tests and the controller's debug endpoint."""
        return {
            "active": self.active, "epoch": self.epoch,
            "brokers": sorted(self.brokers), "shutting_down": sorted(self.shutting_down),
            "topics": sorted(self.topics), "deleting": sorted(self.deleting),
            "states": dict(self.states),
            "partition_states": self.partition_fsm.snapshot(),
            "replica_states": self.replica_fsm.snapshot(),
            "pending_writes": len(self._changes) + len(self._topic_writes),
            "reassigning": self._reassigning_partitions(),
        }
