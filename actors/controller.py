"""Controller: owner of the topic table (single node: kept in a local file).

CreateTopics, DeleteTopics, CreatePartitions and topic config changes
(AlterConfigs, IncrementalAlterConfigs) come here from the handlers. The
controller validates (the per-topic rules are actors/core/topic_admin.py's),
persists the table, has the partition shards open, drop or reconfigure the
logs, then sends every handler the new table before it answers, so the
requesting handler already knows the change when its answer arrives.

A change is answered only once every handler of the broker applied the new
table (each acknowledges it with MetadataApplied): the handlers of this
process run on other threads, those of processes 1.. in other processes, and a
client that reads with another connection right after its answer (a
DescribeConfigs after an AlterConfigs) must see the change, as Kafka's readers
of ZooKeeper do.

A client's CreateTopics, DeleteTopics or CreatePartitions carries ``timeout_ms``,
honoured as Kafka's DelayedCreatePartitions and DelayedDeleteTopics do: a topic
whose change is not complete by then (its shards have not opened or dropped its
partitions, or a handler has not applied the table) is answered REQUEST_TIMED_OUT,
the change itself going on. ``timeout_ms`` <= 0 asks Kafka not to wait for the change
to spread; here it waits as a request without a timeout does (confluent-kafka's admin
sends 0 by default, and the spread is to this host's handlers, milliseconds: answering
before it would let that client's next request, on another connection, miss the topic
it was told exists). A handler silent for ACK_WAIT_NS counts
as having applied the table (its process is restarting and reads it from the file),
as for the broker's own requests, which carry no timeout.

A request that changes nothing (a topic that exists already, validate_only, configs as
they were, a refusal) waits likewise for the changes before it that are not complete
yet: its client's next read on another connection must see them too (a CreateTopics
told TOPIC_ALREADY_EXISTS while the one creating the topic still waits for the
handlers). It is answered at once when no change is incomplete, the common case; else
when they are (or given up on), at its timeout_ms, or after ACK_WAIT_NS.

A change is recorded before it is written to the store, and sent to the shards after:
a crash of this actor in between leaves it written and unsent, and the new life sends it
before it handles another change (see ``setup``). A change a shard does not say it
applied within PENDING_GIVE_UP_NS of its record (or of a crash restart; far longer than
any shard takes: only a lost message ends there) is given up: its requester is answered
UNKNOWN_SERVER_ERROR, the handlers get the table as the store holds it, and it holds no
answer longer. A change whose write never succeeded (every try crashed) is not made: its
give-up takes it (and any other change recorded after the last good write) out of the
table in memory, and the handlers never see it. The handlers are only ever sent the table
as last written (``saved``): what a restarted process reads.

num.processes > 1: a shard of process k may die with its process holding a change in its
mailbox. The restarted process says so (ProcessStarted, as it tells the handlers), and each
pending change that waits for one of its shards goes on at once (``on_process_started``),
not at the give-up: the new shards opened the topic table as written, so they are asked
(the empty message of the change's id), except for a delete, sent again for the partitions
the table does not hold now (the directory a lost delete left must go; one the table holds
is a namesake's, created since, and is not deleted again).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.core.partition_budget import (
    PartitionBudget,
    PolicyViolationError,
    check_node_budget,
    check_request_size,
    request_total,
)
from actors.core.replica_assignment import validate_assignment
from actors.core.topic_admin import (
    ConfigChange,
    altered_topic_configs,
    check_partition_increase,
)
from actors.core.topic_config import (
    UnifiedNameIndex,
    check_internal_growth,
    check_internal_partition_count,
    effective,
    internal_partition_counts,
    validate_new_topic_configs,
    validate_topic_name,
)
from actors.core.topic_id import new_topic_id
from actors.core.topic_store import TopicInfo, TopicStore
from actors.partition_limits import read_partition_budget
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.topology import Topology
from wire.admin_messages import (
    AlterTopicConfigs,
    AlterTopicConfigsDone,
    CreatePartitions,
    CreatePartitionsDone,
    TopicResultRow,
    UpdatePartitionConfigs,
)
from wire.broker_messages import (
    CreateTopicDoneRow,
    CreateTopics,
    CreateTopicsDone,
    DeleteTopicDoneRow,
    DeleteTopics,
    DeleteTopicsDone,
    DropPartitions,
    GetStats,
    MetadataApplied,
    MetadataUpdate,
    OpenPartitionRow,
    OpenPartitions,
    ReplicaAssignmentRow,
    ShardDone,
    TopicPartition,
    TopicsDeleted,
)
from wire.cluster_messages import ProcessStarted
from wire.errors import ErrorCode, KafkaError

# How long a topic change waits for the handlers' MetadataApplied before it is answered
# anyway. Only a process that is restarting never acknowledges (the new one reads the table
# from the file); a live one can be slow: on a loaded 2-core machine a busy process was
# seen taking over 2 s to apply it. 10 s covers that and stays well inside a client's
# request timeout (30 s by default), so a restarting process delays an answer, never
# loses it.
ACK_WAIT_NS = 10_000_000_000
# times the table goes again to the handlers of a change awaited over a crash restart
RESEND_TRIES = 3
# A topic change no shard says it applied by then is given up (a message lost with a crash
# or a process restart); past the clients' 30 s request timeout, so a slow disk opening
# many partitions is never cut short.
PENDING_GIVE_UP_NS = 60_000_000_000
TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)
GIVEN_UP = int(ErrorCode.UNKNOWN_SERVER_ERROR)
NONE = int(ErrorCode.NONE)


def deadline_ns(now_ns: int, timeout_ms: int | None) -> int | None:
    """When a change asked with ``timeout_ms`` is answered REQUEST_TIMED_OUT (None:
    never, it has no timeout)."""
    return None if timeout_ms is None else now_ns + timeout_ms * 1_000_000


def _in_error(answer: Any, code: int, message: str) -> Any:
    """``answer`` with each topic changed (error NONE) now in error ``code``, its message
    ``message`` (``{name}`` the topic); the rows already in error keep theirs (Kafka's
    DelayedCreatePartitions.onComplete)."""
    rows = []
    for row in answer.rows:
        if row.error_code == NONE:
            row = row._replace(error_code=code, error_message=message.format(name=row.name))
            if isinstance(row, CreateTopicDoneRow):  # Kafka resets these on any error
                row = row._replace(num_partitions=-1, replication_factor=-1, topic_id="")
        rows.append(row)
    return answer._replace(rows=rows)


def timed_out(answer: Any, timeout_ms: int | None) -> Any:
    """``answer`` with each topic changed (error NONE) now REQUEST_TIMED_OUT."""
    return _in_error(answer, TIMED_OUT, (
        "the change to topic {name!r} was not complete within the request's "
        f"timeout_ms ({timeout_ms}); it goes on"))


def _copy_store(store: TopicStore) -> TopicStore:
    """A copy of ``store``'s table and version (the copy is never written)."""
    copy = TopicStore(store.path)
    copy.version = store.version
    copy.topics = {name: TopicInfo(t.num_partitions, t.replication_factor, dict(t.configs),
                                   topic_id=t.topic_id)
                   for name, t in store.topics.items()}
    return copy


def not_written(answer: Any) -> Any:
    """``answer`` with each topic changed (error NONE) now UNKNOWN_SERVER_ERROR: the change
    was never written to the topic store (every try failed), and is not made."""
    return _in_error(answer, GIVEN_UP, (
        "the change to topic {name!r} could not be written to the topic store within "
        f"{PENDING_GIVE_UP_NS // 1_000_000_000} s; it is not made"))


def given_up(answer: Any) -> Any:
    """``answer`` with each topic changed (error NONE) now UNKNOWN_SERVER_ERROR: a shard
    did not answer the change within PENDING_GIVE_UP_NS."""
    return _in_error(answer, GIVEN_UP, (
        "the change to topic {name!r} is in the topic store, but a partition shard did not "
        f"say it applied it within {PENDING_GIVE_UP_NS // 1_000_000_000} s; it may apply it "
        "later, or at the broker's restart"))


@dataclass
class _Pending:
    """A topic change waiting for the shards to open or drop its partitions.

    Recorded before the change is written to the store, and kept over a crash restart
    with its messages to the shards: a crash between the write and the last message to a
    shard leaves it unsent, a crash on a shard's answer (ShardDone) loses that answer;
    the new life writes (if unsent) and sends it to the shards it did not go to, asks
    those it went to that have not answered whether they applied it (never sends it to
    them again: it could undo a newer change), and completes it if none is left, before
    it handles anything else (``_resend_pending``). Given up at ``give_up_ns``."""

    shards: set[str]  # the names of those that have not answered (ShardDone) yet
    requester: Address | None  # None: answered already (REQUEST_TIMED_OUT, past timeout_ms)
    answer: Any  # a *Done, sent once every shard is done
    deadline_ns: int | None  # monotonic: the request's timeout_ms (None: none)
    timeout_ms: int | None
    sends: list[tuple[Address, Any]]  # the message for each shard
    # monotonic: given up from then on (dropped, its requester answered GIVEN_UP): a
    # shard that never answers holds neither it nor the answers held behind it for good
    give_up_ns: int
    sent: bool = False  # every one sent (else a crash came between the write and them)
    sent_to: set[str] = field(default_factory=set)  # the shards it went to
    resent: int = 0  # times sent again after a crash restart
    saved: bool = False  # in the topic store: a write of the table succeeded since its record


@dataclass
class _Awaiting:
    """A topic change applied by the shards, waiting for every handler's MetadataApplied."""

    handlers: set[Address]  # those that have not acknowledged yet
    requester: Address | None  # None: answered already
    answer: Any
    give_up_ns: int  # monotonic: answered anyway from then on
    deadline_ns: int | None  # monotonic: answered REQUEST_TIMED_OUT from then on
    timeout_ms: int | None
    change: int  # the id of its pending entry (the change's, as held answers name it)
    resent: int = 0  # times the table went again after a crash restart of the Controller


@dataclass
class _Held:
    """An answer that changes nothing (a topic that exists already, a change that changes
    no config, validate_only, a refusal), held until the changes before it are complete:
    its client's next read, on another connection, must not miss one (a CreateTopics of
    an existing topic, answered at once, while the one creating it waits for the
    handlers' acknowledgements: the topic would not be in that read's Metadata yet)."""

    upto: int  # the last change recorded when it came: it waits for those up to it
    requester: Address
    answer: Any
    # monotonic: answered as it is from then on, the changes complete or not: its
    # request's timeout_ms, or ACK_WAIT_NS (as the change's own give-up)
    release_ns: int


class Controller(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(self, node: Any, name: str, *, topology: Topology, config: Config,
                 store: TopicStore, num_brokers: int = 1, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.config = config
        self.store = store
        self.num_brokers = num_brokers
        self.broker_id = int(config["node.id"])
        self.read_budget = read_partition_budget  # the node's limits, read per request

    def setup(self) -> None:
        # the topics by unified name, for the '.'/'_' collision check of a creation (the
        # cluster's controller keeps the same index)
        self.unified_names = UnifiedNameIndex(self.store.topics)
        # Kept over a crash restart of this actor (the message being handled is not
        # handled again): the changes waiting for their shards and those waiting for the
        # handlers' acknowledgements, with the ids that name them (an answer to the
        # previous life still settles, a new id names no older change). Forgotten, a
        # change written to the store was never sent to the handlers (they did not know
        # the topic, ``__consumer_offsets`` say, until the next change) nor answered.
        #
        # A change is recorded (pending) before it is written, with the messages that
        # have the shards apply it: a crash after the write, before they are all sent,
        # left the change in the store alone (a created topic no shard opens, a deleted
        # one whose logs stay open and on disk, until the broker's restart), and a crash
        # on a shard's answer left it waiting for good. The new life has each pending
        # change go on (``_resend_pending``) before it handles another change, which must
        # reach the shards after it (a topic deleted then created anew).
        restarted = hasattr(self, "pending")
        self.ids: Iterator[int] = getattr(self, "ids", None) or itertools.count(1)
        self.pending: dict[int, _Pending] = getattr(self, "pending", {})
        self.resend_pending = restarted and bool(self.pending)
        # answers that change nothing, held behind the changes before them (_Held), in
        # the order they came, and the id of the last change recorded
        self.held: list[_Held] = getattr(self, "held", [])
        self.last_change: int = getattr(self, "last_change", 0)
        # topic changes answered once every handler applied them, by ack id
        self.awaiting: dict[int, _Awaiting] = getattr(self, "awaiting", {})
        # after a crash restart, the table goes again to the handlers each awaited change
        # still waits for (its broadcast may have died with the crash): next turn
        self.send_again = restarted and bool(self.awaiting)
        # The table as last written to the store, and its version: all the handlers are
        # ever sent. The table in memory may hold more: a change whose write failed (a
        # crash in it), written again by the new life, or given up as not made.
        # (a copy, never written itself; at the first start the store is as read)
        if not hasattr(self, "saved"):
            self.saved = _copy_store(self.store)

    def _save(self) -> None:
        """Write the table: every change recorded so far is in the store from now on."""
        self.store.save()
        self.saved = _copy_store(self.store)
        for entry in self.pending.values():
            entry.saved = True

    def _saved_update(self, ack_id: int) -> MetadataUpdate:
        """The table as last written, for the handlers, asking them to acknowledge ``ack_id``."""
        return MetadataUpdate(self.saved.version, self.saved.table(), ack_id)

    def _broadcast(self, ack_id: int) -> None:
        """The topic table to every handler, each asked to acknowledge ``ack_id``.

        Every handler, this process's too: they run on other threads and loops (a
        message to one crosses threads), so the requester's answer, which goes its
        own way, could reach a client before another handler knows the change.
        """
        update = self._saved_update(ack_id)
        for handler in self.topology.all_handlers():
            self.tell(handler, update)

    # ----------------------------------------------------------------- create
    @handles(CreateTopics)
    def on_create(self, msg: CreateTopics) -> None:
        assert self.current_sender is not None
        if self.resend_pending:
            self._resend_pending()
        rows: list[CreateTopicDoneRow] = []
        created: list[str] = []
        default = int(self.config["num.partitions"])
        budget = self.read_budget()
        planned = [self._hosted()]  # partitions on this node, counting this request's
        try:
            check_request_size(request_total([
                len(r.assignments) if r.assignments
                else default if r.num_partitions == -1 else r.num_partitions
                for r in msg.rows]))
            too_many: PolicyViolationError | None = None
        except PolicyViolationError as exc:
            too_many = exc
        for row in msg.rows:
            try:
                if too_many is not None:
                    raise too_many
                rows.append(self._create_one(row.name, row.num_partitions,
                                             row.replication_factor, dict(row.configs),
                                             msg.validate_only, created, budget, planned,
                                             row.assignments, row.internal))
            except KafkaError as exc:
                # a coordinator asking for its own topic is told the count it has (it maps
                # its ids over that); a client's answer keeps Kafka's -1
                have = self.store.topics.get(row.name)
                count = (have.num_partitions if row.internal and have is not None
                         and exc.code == ErrorCode.TOPIC_ALREADY_EXISTS else -1)
                rows.append(CreateTopicDoneRow(row.name, int(exc.code), str(exc), count, -1))
        self._log_refused(rows)
        if not created:
            self._reply_after_changes(CreateTopicsDone(msg.req_id, rows), msg.timeout_ms)
            return
        change = self._fan_out(CreateTopicsDone(msg.req_id, rows), OpenPartitions, [
            OpenPartitionRow(n, p, dict(self.store.topics[n].configs),
                             self.store.topics[n].topic_id)
            for n in created for p in range(self.store.topics[n].num_partitions)
        ], msg.timeout_ms)
        self._save()
        self.log.info("created topic(s) {}", ", ".join(
            f"{n} ({self.store.topics[n].num_partitions} partitions)" for n in created))
        self._send(change)

    def _hosted(self) -> int:
        """Partitions this node holds (a single node holds every one of every topic)."""
        return sum(info.num_partitions for info in self.store.topics.values())

    def _log_refused(self, rows: list[Any]) -> None:
        """One line per request for the topics refused for the node's limits."""
        refused = [r for r in rows if r.error_code == ErrorCode.POLICY_VIOLATION]
        if refused:
            self.log.warning("refused {} topic(s): {}", len(refused), "; ".join(
                str(r.error_message) for r in refused[:3]) + ("; ..." if len(refused) > 3 else ""))

    def _create_one(self, name: str, num_partitions: int, replication_factor: int,
                    configs: dict[str, Any], validate_only: bool,
                    created: list[str], budget: PartitionBudget | None = None,
                    planned: list[int] | None = None,
                    assignments: Sequence[ReplicaAssignmentRow] | None = None,
                    internal: bool = False) -> CreateTopicDoneRow:
        validate_topic_name(name)
        if name in self.store.topics or name in created:
            raise KafkaError(f"topic {name!r} already exists", ErrorCode.TOPIC_ALREADY_EXISTS)
        if assignments:
            # Kafka's rules (the cluster's controller applies the same): the counts are
            # the assignment's, and this node is the only broker a replica can be on
            if num_partitions != -1 or replication_factor != -1:
                raise KafkaError("both a replica assignment and a partition count or "
                                 "replication factor were given", ErrorCode.INVALID_REQUEST)
            placed = validate_assignment([(a.partition, a.broker_ids) for a in assignments],
                                         {self.broker_id})
            num_partitions, replication_factor = len(placed), len(placed[0])
        if num_partitions == -1:
            num_partitions = int(self.config["num.partitions"])
        if replication_factor == -1:
            replication_factor = int(self.config["default.replication.factor"])
        if num_partitions < 1:
            raise KafkaError(f"number of partitions must be at least 1, got {num_partitions}",
                             ErrorCode.INVALID_PARTITIONS)
        if replication_factor < 1 or replication_factor > self.num_brokers:
            raise KafkaError(
                f"replication factor {replication_factor} is invalid: {self.num_brokers} "
                f"broker(s) available", ErrorCode.INVALID_REPLICATION_FACTOR)
        # after the counts, before the configs (as Kafka's ZkAdminManager.createTopics);
        # the rules on internal topics here, where the topic list is this node's own
        self.unified_names.check(name, internal)  # this request's made ones are in it
        if not internal:
            check_internal_partition_count(name, num_partitions,
                                           internal_partition_counts(self.config))
        clean = validate_new_topic_configs(configs)  # as the cluster's controller
        if budget is not None and planned is not None:
            check_node_budget(name, num_partitions, planned[0], budget)
            planned[0] += num_partitions
        topic_id = ""  # validate_only makes nothing, so it has no id to answer
        if not validate_only:
            topic_id = new_topic_id()
            self.store.topics[name] = TopicInfo(num_partitions, replication_factor, clean,
                                                 topic_id=topic_id)
            self.unified_names.add(name)
            created.append(name)
        return CreateTopicDoneRow(name, int(ErrorCode.NONE), None, num_partitions,
                                  replication_factor, topic_id)

    # ----------------------------------------------------------------- delete
    @handles(DeleteTopics)
    def on_delete(self, msg: DeleteTopics) -> None:
        if self.resend_pending:
            self._resend_pending()
        rows: list[DeleteTopicDoneRow] = []
        drop: list[TopicPartition] = []
        for row in msg.rows:
            name = row.name
            info = self.store.topics.get(name)
            if row.topic_id and (info is None or info.topic_id != row.topic_id):
                # named by an id that is no longer this name's (deleted, maybe made again)
                rows.append(DeleteTopicDoneRow(name, int(ErrorCode.UNKNOWN_TOPIC_ID),
                                               f"no topic has id {row.topic_id}", row.topic_id))
                continue
            if info is None:
                rows.append(DeleteTopicDoneRow(name, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                               f"topic {name!r} does not exist"))
                continue
            del self.store.topics[name]
            self.unified_names.discard(name)
            rows.append(DeleteTopicDoneRow(name, int(ErrorCode.NONE), None, info.topic_id))
            drop += [TopicPartition(name, p) for p in range(info.num_partitions)]
        if not drop:
            self._reply_after_changes(DeleteTopicsDone(msg.req_id, rows), msg.timeout_ms)
            return
        change = self._fan_out(DeleteTopicsDone(msg.req_id, rows), DropPartitions, drop,
                               msg.timeout_ms)
        self._save()
        deleted = [r.name for r in rows if r.error_code == ErrorCode.NONE]
        self.log.info("deleted topic(s) {}", ", ".join(deleted))
        self._send(change)
        for i in range(self.topology.num_coordinators):  # their groups' offsets go too
            self.tell(self.topology.coordinator(i), TopicsDeleted(deleted))

    # ----------------------------------------------------- add partitions
    @handles(CreatePartitions)
    def on_create_partitions(self, msg: CreatePartitions) -> None:
        if self.resend_pending:
            self._resend_pending()
        rows: list[TopicResultRow] = []
        opened: list[OpenPartitionRow] = []
        names = [r.name for r in msg.rows]
        budget = self.read_budget()
        planned = self._hosted()
        try:
            check_request_size(request_total([
                r.new_total - self.store.topics[r.name].num_partitions for r in msg.rows
                if r.name in self.store.topics]))
            too_many: PolicyViolationError | None = None
        except PolicyViolationError as exc:
            too_many = exc
        answered: set[str] = set()
        for row in msg.rows:
            try:
                if names.count(row.name) > 1:
                    if row.name in answered:  # one answer per name, as Kafka's result map
                        continue
                    answered.add(row.name)
                    raise KafkaError(f"topic {row.name!r} is named twice",
                                     ErrorCode.INVALID_REQUEST)
                info = self.store.topics.get(row.name)
                if info is None:
                    raise KafkaError(f"topic {row.name!r} does not exist",
                                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                check_internal_growth(row.name)
                if too_many is not None:
                    raise too_many
                current = info.num_partitions
                added = check_partition_increase(row.name, current, row.new_total,
                                                 row.assignments)
                if row.assignments is not None:  # before the budget, as the cluster's
                    validate_assignment({current + i: a for i, a in enumerate(row.assignments)},
                                        {self.broker_id},
                                        first_partition=current,
                                        replication_factor=info.replication_factor)
                check_node_budget(row.name, added, planned, budget)
                planned += added
            except KafkaError as exc:
                rows.append(TopicResultRow(row.name, int(exc.code), str(exc)))
                continue
            rows.append(TopicResultRow(row.name, int(ErrorCode.NONE), None))
            if not msg.validate_only:
                info.num_partitions = row.new_total
                opened += [OpenPartitionRow(row.name, p, dict(info.configs), info.topic_id)
                           for p in range(current, row.new_total)]
        self._log_refused(rows)
        if not opened:
            self._reply_after_changes(CreatePartitionsDone(msg.req_id, rows), msg.timeout_ms)
            return
        change = self._fan_out(CreatePartitionsDone(msg.req_id, rows), OpenPartitions, opened,
                               msg.timeout_ms)
        self._save()
        self.log.info("added partitions: {}", ", ".join(
            f"{r.name} now {self.store.topics[r.name].num_partitions}" for r in msg.rows
            if r.name in self.store.topics and any(o.topic == r.name for o in opened)))
        self._send(change)

    # ------------------------------------------------------ topic configs
    @handles(AlterTopicConfigs)
    def on_alter_configs(self, msg: AlterTopicConfigs) -> None:
        if self.resend_pending:
            self._resend_pending()
        rows: list[TopicResultRow] = []
        updates: list[OpenPartitionRow] = []
        names = [r.name for r in msg.rows]
        for row in msg.rows:
            try:
                if names.count(row.name) > 1:
                    raise KafkaError(f"topic {row.name!r} is named twice",
                                     ErrorCode.INVALID_REQUEST)
                info = self.store.topics.get(row.name)
                if info is None:
                    raise KafkaError(f"topic {row.name!r} does not exist",
                                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                configs = altered_topic_configs(
                    info.configs, [ConfigChange(c.name, c.op, c.value) for c in row.ops],
                    msg.incremental, lambda key: effective(self.config, {})[key][0])
            except KafkaError as exc:
                rows.append(TopicResultRow(row.name, int(exc.code), str(exc)))
                continue
            rows.append(TopicResultRow(row.name, int(ErrorCode.NONE), None))
            if not msg.validate_only and configs != info.configs:
                info.configs = configs
                updates += [OpenPartitionRow(row.name, p, dict(configs), info.topic_id)
                            for p in range(info.num_partitions)]
        if not updates:
            self._reply_after_changes(AlterTopicConfigsDone(msg.req_id, rows))
            return
        change = self._fan_out(AlterTopicConfigsDone(msg.req_id, rows), UpdatePartitionConfigs,
                               updates)
        self._save()
        changed = sorted({u.topic for u in updates})
        self.log.info("topic configs changed: {}", "; ".join(
            f"{t} {self.store.topics[t].configs}" for t in changed))
        self._send(change)

    # ------------------------------------------------------------ fan out/in
    def _fan_out(self, answer: Any, msg_type: Any,
                 partition_rows: list[OpenPartitionRow] | list[TopicPartition],
                 timeout_ms: int | None = None) -> int:
        """Record a change about to be written, with what has the shards apply it
        (``_send`` sends it once written); answered when complete, at the request's
        ``timeout_ms`` (REQUEST_TIMED_OUT) when it is positive. Returns its id."""
        requester = self.current_sender
        assert requester is not None
        by_shard: dict[Address, list[Any]] = {}
        for row in partition_rows:
            by_shard.setdefault(self.topology.shard_for(row.topic, row.partition), []).append(row)
        if timeout_ms is not None and timeout_ms <= 0:
            timeout_ms = None  # waits for the spread all the same (module docstring)
        my_id = self.last_change = next(self.ids)
        now = self.clock.monotonic_ns()
        self.pending[my_id] = _Pending(
            {shard.name for shard in by_shard}, requester, answer,
            deadline_ns(now, timeout_ms), timeout_ms,
            [(shard, msg_type(my_id, shard_rows)) for shard, shard_rows in by_shard.items()],
            now + PENDING_GIVE_UP_NS)
        return my_id

    def _reply_after_changes(self, answer: Any, timeout_ms: int | None = None) -> None:
        """Answer a request that changed nothing: now if no change is incomplete (the
        common case), else once those before it are (``_Held``)."""
        if not self.pending and not self.awaiting:
            self.reply(answer)
            return
        assert self.current_sender is not None
        now = self.clock.monotonic_ns()
        release = now + ACK_WAIT_NS
        if timeout_ms is not None and timeout_ms > 0:
            release = min(release, now + timeout_ms * 1_000_000)
        self.held.append(_Held(self.last_change, self.current_sender, answer, release))

    def _release_held(self, now_ns: int | None = None) -> None:
        """The held answers whose changes are complete (or given up on: no longer pending
        nor awaited), and with ``now_ns`` those due for release."""
        if not self.held:
            return
        changes = [*self.pending, *(w.change for w in self.awaiting.values())]
        first = min(changes) if changes else None
        kept = []
        for held in self.held:
            if first is None or first > held.upto:
                self.tell(held.requester, held.answer)
            elif now_ns is not None and now_ns >= held.release_ns:
                self.log.warning("answered {} without waiting further for topic change {} "
                                 "to be complete", type(held.answer).__name__, first)
                self.tell(held.requester, held.answer)
            else:
                kept.append(held)
        self.held = kept

    def _send(self, change: int) -> None:
        """The written change ``change`` to its shards (each answers ShardDone once)."""
        entry = self.pending[change]
        for shard, msg in entry.sends:
            if shard.name in entry.shards:
                self.tell(shard, msg)
                entry.sent_to.add(shard.name)
        entry.sent = True

    def _resend_pending(self) -> None:
        """After a crash restart: each pending change goes on.

        One every shard answered (the crash came on the last answer, before the change
        went on to the handlers) is completed now (``_complete``). One not sent to a
        shard (the crash came between its record and that message, maybe in its write)
        is written again and sent to it. A shard it was sent to and that has not
        answered (the crash lost its answer, or it is slow) is NOT sent the change again:
        by then it may have applied a newer one (a topic deleted then created anew, a
        config changed twice) that the old one, applied again, would undo (the new
        topic's logs dropped). It is asked instead, with an empty message of the same
        kind and id: it applies nothing, and answers ShardDone of that id once it has
        handled what came before it from this actor, the change among them (a shard
        handles its mailbox in order). A shard that never answers has the change given
        up at ``give_up_ns`` (``on_turn``).

        At most RESEND_TRIES times a change: one that crashes this actor every time is
        then left to its give-up (said so)."""
        self.resend_pending = False
        awaited = {w.change for w in self.awaiting.values()}
        now = self.clock.monotonic_ns()
        for change, entry in sorted(self.pending.items()):
            if change in awaited:  # the crash came as it went on to the handlers
                del self.pending[change]
                continue
            if entry.resent >= RESEND_TRIES:
                if entry.resent == RESEND_TRIES:  # said once
                    entry.resent += 1
                    self.log.error("topic change {} went on {} times, each time before a "
                                   "crash of this actor: not again (given up at its "
                                   "give-up)", change, RESEND_TRIES)
                continue
            entry.resent += 1
            entry.give_up_ns = max(entry.give_up_ns, now + PENDING_GIVE_UP_NS)
            if not entry.shards:
                self.log.warning("topic change {} was applied by every shard before this "
                                 "actor's crash restart: it goes on to the handlers", change)
                self._complete(change)
                continue
            unsent = [shard for shard, _msg in entry.sends
                      if shard.name in entry.shards and shard.name not in entry.sent_to]
            self.log.warning("topic change {} goes again to {} shard(s), {} asked whether "
                             "they applied it ({}before this actor's crash restart)",
                             change, len(unsent), len(entry.shards) - len(unsent),
                             "" if entry.sent else "written, not sent, ")
            if not entry.sent:
                self._save()
            for shard, msg in entry.sends:
                if shard.name not in entry.shards:
                    continue
                if shard.name in entry.sent_to:
                    self.tell(shard, type(msg)(change, []))
                else:
                    self.tell(shard, msg)
                    entry.sent_to.add(shard.name)
            entry.sent = True

    @handles(ShardDone)
    def on_shard_done(self, msg: ShardDone) -> None:
        """A shard applied a change; the last one's has the table go to every handler.

        Crash-safe at every step (``pending`` and ``awaiting`` are kept over a restart):
        the shard's answer is counted first; the change's ``awaiting`` entry is recorded
        before its pending entry goes and before the table is sent, so a crash on the way
        leaves it awaited, and the new life sends the table again (``_send_again``) and
        answers the requester once the handlers acknowledge it (or at the give-up)."""
        entry = self.pending.get(msg.req_id)
        if entry is None or self.current_sender is None:
            return
        if self.current_sender.name not in entry.shards:
            return  # its second answer (the change was sent again after a crash)
        entry.shards.discard(self.current_sender.name)
        if msg.failed or msg.error:
            self.log.error("a shard failed to apply a topic change to {}: {}",
                           ", ".join(f"{t}-{p}" for t, p in msg.failed) or "?", msg.error)
        if entry.shards:
            return
        self._complete(msg.req_id)

    def _complete(self, change: int) -> None:
        """The change every shard applied goes on to the handlers (answered once they
        acknowledge it). A crash in here leaves it pending with no shard left, which the
        new life completes (``_resend_pending``), or awaited, which it sends again."""
        entry = self.pending[change]
        ack_id = next(self.ids)
        handlers = set(self.topology.all_handlers())
        if handlers:
            self.awaiting[ack_id] = _Awaiting(handlers, entry.requester, entry.answer,
                                              self.clock.monotonic_ns() + ACK_WAIT_NS,
                                              entry.deadline_ns, entry.timeout_ms,
                                              change)
        del self.pending[change]
        self._broadcast(ack_id)
        if not handlers:  # no handler at all (none configured): nobody to wait for
            self._answer(entry.requester, entry.answer)
            self._release_held()

    def _send_again(self) -> None:
        """After a crash restart: the table to the handlers each awaited change still waits
        for, asked to acknowledge it (one that had it applies it again). At most
        RESEND_TRIES times a change: a send that crashes this actor every time is not
        tried again and again (the give-up answers its requester)."""
        self.send_again = False
        for ack_id, waiting in sorted(self.awaiting.items()):
            if waiting.resent >= RESEND_TRIES or not waiting.handlers:
                continue
            waiting.resent += 1
            self.log.warning("the topic table goes again to {} handler(s) (change {} awaited "
                             "over this actor's crash restart)", len(waiting.handlers), ack_id)
            update = self._saved_update(ack_id)
            for handler in sorted(waiting.handlers, key=str):
                self.tell(handler, update)

    def _answer(self, requester: Address | None, answer: Any) -> None:
        if requester is not None:  # None: answered already
            self.tell(requester, answer)

    @handles(MetadataApplied)
    def on_metadata_applied(self, msg: MetadataApplied) -> None:
        waiting = self.awaiting.get(msg.ack_id)
        if waiting is None:
            return  # answered already (given up on this handler), or not ours
        if self.current_sender is not None:
            waiting.handlers.discard(self.current_sender)
        if not waiting.handlers:
            del self.awaiting[msg.ack_id]
            self._answer(waiting.requester, waiting.answer)
            self._release_held()

    def poll_timeout_ms(self) -> int | None:
        if self.send_again or self.resend_pending:
            return 0
        if self.awaiting or self.held or self.pending:
            return 200
        return None

    def on_turn(self) -> None:
        """A process that does not acknowledge (it is restarting) delays no answer long;
        a change not complete by its request's timeout_ms is answered REQUEST_TIMED_OUT."""
        if self.resend_pending:
            self._resend_pending()
        if self.send_again:
            self._send_again()
        if not self.awaiting and not self.pending and not self.held:
            return
        now = self.clock.monotonic_ns()
        for change, entry in list(self.pending.items()):
            if change not in self.pending:
                continue  # given up with an earlier one that was never written
            if now >= entry.give_up_ns and not entry.saved:
                self._give_up_unwritten(change)
            elif now >= entry.give_up_ns:
                del self.pending[change]
                self.log.error("topic change {} given up: {} partition shard(s) did not say "
                               "they applied it within {} s ({}); it stays in the topic "
                               "store", change, len(entry.shards),
                               PENDING_GIVE_UP_NS // 1_000_000_000,
                               ", ".join(sorted(entry.shards)) or "-")
                self._answer(entry.requester, given_up(entry.answer))
                # the store has it: the handlers get the table all the same (not waited for)
                self._broadcast(next(self.ids))
            elif (entry.requester is not None and entry.deadline_ns is not None
                    and now >= entry.deadline_ns):
                self.tell(entry.requester, timed_out(entry.answer, entry.timeout_ms))
                entry.requester = None
        for ack_id, waiting in list(self.awaiting.items()):
            if (waiting.requester is not None and waiting.deadline_ns is not None
                    and now >= waiting.deadline_ns
                    and waiting.deadline_ns < waiting.give_up_ns):
                self.log.warning("{} handler(s) did not acknowledge the topic table within "
                                 "the request's timeout_ms ({}): answered {} ({})",
                                 len(waiting.handlers), waiting.timeout_ms,
                                 ErrorCode.REQUEST_TIMED_OUT.name,
                                 ", ".join(sorted(str(h) for h in waiting.handlers)))
                self.tell(waiting.requester, timed_out(waiting.answer, waiting.timeout_ms))
                waiting.requester = None
            if now >= waiting.give_up_ns:
                del self.awaiting[ack_id]
                if waiting.requester is None:
                    continue  # answered already; the handlers were named then
                self.log.warning("{} handler(s) did not acknowledge the topic table within "
                                 "{} s ({}); answering anyway", len(waiting.handlers),
                                 ACK_WAIT_NS // 1_000_000_000,
                                 ", ".join(sorted(str(h) for h in waiting.handlers)))
                self.tell(waiting.requester, waiting.answer)
        self._release_held(now)

    def _give_up_unwritten(self, change: int) -> None:
        """Give up change ``change``, never written to the store (each write crashed): it
        is not made. The table in memory goes back to the one last written, which takes out
        every change recorded since, each of them unwritten too (a good write writes them
        all): they are given up with it. The handlers hold that table already: nothing is
        sent to them, and no shard was sent an unwritten change."""
        unwritten = sorted(c for c, e in self.pending.items() if not e.saved)
        entries = [self.pending.pop(each) for each in unwritten]  # first: a crash after
        self.store.topics = _copy_store(self.saved).topics  # must not send them again
        self.unified_names = UnifiedNameIndex(self.store.topics)
        for entry in entries:
            self._answer(entry.requester, not_written(entry.answer))
        self.log.error("topic change(s) {} given up: never written to the topic store "
                       "(each write failed); not made, the table is the one last written",
                       ", ".join(map(str, unwritten)))

    @handles(ProcessStarted)
    def on_process_started(self, msg: ProcessStarted) -> None:
        """Process ``msg.process`` of this broker restarted (num.processes > 1: the new
        process says so once its shards and handlers run). What its shards had not handled
        died with it, a pending change's message among them maybe: each pending change that
        waits for one of them goes on to it now, not at the give-up (``_after_restart``),
        and each awaited change's table goes again to its new handlers."""
        if self.resend_pending:
            self._resend_pending()
        nodes = self.topology.process_nodes
        if not msg.restarted or not 0 < msg.process < len(nodes):
            return
        node = nodes[msg.process]
        asked = 0
        for change, entry in sorted(self.pending.items()):
            for shard, sent in entry.sends:
                if (shard.node == node and shard.name in entry.shards
                        and shard.name in entry.sent_to):
                    self.tell(shard, self._after_restart(change, sent))
                    asked += 1
        again = 0
        for ack_id, waiting in sorted(self.awaiting.items()):
            mine = sorted((h for h in waiting.handlers if h.node == node), key=str)
            if mine:
                update = self._saved_update(ack_id)
                for handler in mine:
                    self.tell(handler, update)
                again += 1
        if asked or again:
            self.log.warning("process {} restarted (generation {}): {} pending topic "
                             "change message(s) to its shards sent again, {} awaited table(s) "
                             "to its handlers", msg.process, msg.generation, asked, again)

    def _after_restart(self, change: int, sent: Any) -> Any:
        """What goes to a restarted process's shard for the pending change ``change``
        (``sent`` what went to it before). The new shard opened the topic table as written
        (a change is written before it is sent), so a lost OpenPartitions or
        UpdatePartitionConfigs needs nothing: the shard is asked, with an empty message of
        the change's kind and id, which it answers ShardDone once it handled what came
        before it (the change itself, should a link have kept it for the new process). Not
        sent again: a newer change may have undone it (a topic created, then deleted).

        A lost DropPartitions left the partitions' directories (the new shard opened none,
        but they are on disk; a namesake would not open them, its id differs, but they hold
        the deleted records and their space): sent again for each partition the table as
        written does not hold; one it holds is a namesake's,
        created since (opened by the new shard, or by an OpenPartitions sent after the
        delete), which a delete again would drop. A namesake created later is sent after
        this, on the same link, so the delete comes first. A drop is idempotent."""
        if isinstance(sent, DropPartitions):
            topics = self.saved.topics  # what the new shard opened: the table as written
            rows = [tp for tp in sent.rows
                    if tp.topic not in topics or tp.partition >= topics[tp.topic].num_partitions]
            return DropPartitions(change, rows)
        return type(sent)(change, [])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {"topics": self.store.table(), "version": self.store.version}
