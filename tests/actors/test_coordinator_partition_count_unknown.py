"""A cluster's coordinators load and serve only once they know how many partitions their
internal topic has.

The ReplicaManager tells them which partitions this node leads after a LeaderAndIsr, with
the count its metadata has: 0 while its cache lacks the topic (the controller sends the
LeaderAndIsr before the UpdateMetadata; a restarted node's cache starts empty). Served
under the configured count meanwhile, a group's commit went to a partition it does not
map to (stranded there once the count came), and an InitProducerId gave a new producer id
while the id's real state was not fenced. The real coordinators (and ReplicaManager) on a
manual clock; the shard is a stand-in holding each partition's records.
"""

from __future__ import annotations

from typing import Any

from actors.core.offsets_codec import OFFSETS_TOPIC, OffsetCommitValue, offset_commit_record
from actors.core.offsets_codec import partition_for as group_partition
from actors.core.record_batch import build_batch
from actors.core.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    TxnLogValue,
    TxnStatus,
    encode_key,
    encode_value,
)
from actors.core.transaction_log import partition_for as txn_partition
from actors.group_coordinator import GroupCoordinator
from actors.replica_manager import ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.timer import Timer
from actors.topology import Topology
from actors.transaction_coordinator import TransactionCoordinator, txn_coordinator_name
from tests.actors.test_replica_manager_restore import AnsweringShard, Controller
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendDoneRow,
    GetStats,
    Read,
    ReadDone,
    ReadDoneRow,
)
from wire.cluster_messages import (
    BrokerRegistered,
    BrokerRow,
    CoordinatorPartitionRow,
    CoordinatorPartitions,
    LeaderAndIsr,
    LeaderAndIsrPartition,
    LiveLeaderRow,
    UpdateMetadata,
    UpdateMetadataPartition,
)
from wire.errors import ErrorCode
from wire.group_messages import (
    JoinGroup,
    JoinGroupDone,
    JoinProtocolRow,
    ListGroups,
    ListGroupsDone,
    OffsetCommit,
    OffsetCommitDone,
    OffsetCommitRow,
    OffsetFetch,
    OffsetFetchDone,
)
from wire.transaction_messages import (
    InitTxnProducer,
    InitTxnProducerDone,
    ListTxns,
    ListTxnsDone,
    TxnCoordinatorPartitions,
    TxnPartitionRow,
)

LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
REAL_COUNT = 3
GROUP = next(g for g in (f"g{i}" for i in range(100)) if group_partition(g, REAL_COUNT) == 2)
TXN_ID = next(t for t in (f"t{i}" for i in range(100)) if txn_partition(t, REAL_COUNT) == 2)
PRODUCER_ID, PRODUCER_EPOCH = 4242, 7
INTERNAL = (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)


class LogShard(Actor):
    """Each partition's records (one batch at offset 0); keeps the partition of every
    append."""

    logs: dict[tuple[str, int], bytes] = {}
    unanswered: set[tuple[str, int]] = set()  # reads of these never answered (a load under way)

    def setup(self) -> None:
        self.appended: list[tuple[str, int]] = []

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        if any((r.topic, r.partition) in self.unanswered for r in msg.rows):
            return
        rows = []
        for r in msg.rows:
            batch = self.logs.get((r.topic, r.partition), b"")
            records = batch if r.fetch_offset == 0 else b""
            end = 1 if batch else 0
            rows.append(ReadDoneRow(r.topic, r.partition, 0, end, 0, records, 0, 0, end))
        self.reply(ReadDone(msg.req_id, rows))

    @handles(Append)
    def on_append(self, msg: Append) -> None:
        self.appended.extend((r.topic, r.partition) for r in msg.rows)
        self.reply(AppendDone(msg.req_id, [AppendDoneRow(r.topic, r.partition, 0, 1, -1, 0,
                                                         None) for r in msg.rows]))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.appended)


class Probe(Actor):
    def setup(self) -> None:
        self.answers: list[Any] = []

    @handles(OffsetCommitDone)
    def on_commit(self, msg: OffsetCommitDone) -> None:
        self.answers.append([r.error_code for r in msg.rows])

    @handles(OffsetFetchDone)
    def on_fetch(self, msg: OffsetFetchDone) -> None:
        self.answers.append([msg.error_code, [[r.topic, r.partition, r.offset]
                                              for r in msg.rows]])

    @handles(ListGroupsDone)
    def on_list(self, msg: ListGroupsDone) -> None:
        self.answers.append(["list", msg.error_code, sorted(r.group_id for r in msg.rows)])

    @handles(JoinGroupDone)
    def on_join(self, msg: JoinGroupDone) -> None:
        self.answers.append(["join", msg.error_code])

    @handles(ListTxnsDone)
    def on_list_txns(self, msg: ListTxnsDone) -> None:
        self.answers.append(["txns", msg.error_code, [r.transactional_id for r in msg.rows]])

    @handles(InitTxnProducerDone)
    def on_init(self, msg: InitTxnProducerDone) -> None:
        self.answers.append([msg.error_code, msg.producer_id, msg.producer_epoch])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.answers)


def _answer(node: Node) -> Any:
    node.quiesce()
    answers = node.ask(Address(node.name, "probe"), GetStats())
    return answers[-1]


def _commit_log() -> bytes:
    rec = offset_commit_record(GROUP, "t", 0, OffsetCommitValue(42, -1, "", 1))
    return build_batch([rec.value], keys=[rec.key], timestamps_ms=[1])


def _txn_log() -> bytes:
    value = TxnLogValue(PRODUCER_ID, PRODUCER_EPOCH, 60000, TxnStatus.COMPLETE_COMMIT, (), 1, 1)
    return build_batch([encode_value(value)], keys=[encode_key(TXN_ID)], timestamps_ms=[1])


def _node(node: Node) -> tuple[Topology, Config]:
    """One coordinator of each kind configured with 1 partition per internal topic; the
    topics have REAL_COUNT, GROUP's offsets and TXN_ID's state on partition 2."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    config = Config({"offsets.topic.num.partitions": 1,
                     "transaction.state.log.num.partitions": 1})
    LogShard.logs = {(OFFSETS_TOPIC, 2): _commit_log(),
                     (TRANSACTION_STATE_TOPIC, 2): _txn_log()}
    LogShard.unanswered = set()
    node.spawn(Timer, topo.timer.name)
    node.spawn(LogShard, topo.shard(0).name)
    node.spawn(Probe, "probe")
    return topo, config


def test_a_group_is_served_only_once_the_offsets_topics_count_is_known(
        manual_node: Node) -> None:
    node = manual_node
    topo, config = _node(node)
    groups = node.spawn(GroupCoordinator, topo.coordinator(0).name, topology=topo,
                        config=config, clock=node.clock, cluster=True)
    led = [CoordinatorPartitionRow(p, 0) for p in range(REAL_COUNT)]
    node.tell(groups, CoordinatorPartitions(led, [], 0))
    node.quiesce()
    commit = OffsetCommit(1, GROUP, -1, "", None, [OffsetCommitRow("t", 0, 43, -1, None)])
    node.tell(groups, commit, sender="probe")
    assert _answer(node) == [LOADING]  # refused, retriable
    node.tell(groups, OffsetFetch(2, GROUP, None), sender="probe")
    assert _answer(node)[0] == LOADING
    assert node.ask(topo.shard(0), GetStats()) == []  # nothing written anywhere
    node.tell(groups, ListGroups(9, None), sender="probe")
    # not an empty list while nothing is loaded: the error, and no group
    assert _answer(node) == ["list", LOADING, []]

    node.tell(groups, CoordinatorPartitions([], [], REAL_COUNT))
    wait_for(lambda: node.ask(groups, GetStats())["loaded_partitions"] == [0, 1, 2] or None,
             "the load under the real count")
    node.tell(groups, OffsetFetch(3, GROUP, None), sender="probe")
    assert _answer(node) == [0, [["t", 0, 42]]]  # read from the group's real partition
    node.tell(groups, commit._replace(req_id=4), sender="probe")
    assert _answer(node) == [0]
    assert node.ask(topo.shard(0), GetStats()) == [[OFFSETS_TOPIC, 2]]  # its own partition

    # a re-created topic whose metadata is not here yet: unknown again, nothing served
    node.tell(groups, CoordinatorPartitions([], [], 0))
    node.tell(groups, commit._replace(req_id=5), sender="probe")
    assert _answer(node) == [LOADING]
    assert node.ask(groups, GetStats())["loaded_partitions"] == []


def test_a_parked_join_is_answered_when_the_count_becomes_unknown(manual_node: Node) -> None:
    """The topic re-created (its count unknown again): the groups are unloaded, and a
    member waiting in a JoinGroup is told NOT_COORDINATOR, not left unanswered."""
    node = manual_node
    topo, config = _node(node)
    groups = node.spawn(GroupCoordinator, topo.coordinator(0).name, topology=topo,
                        config=config, clock=node.clock, cluster=True)
    node.tell(groups, CoordinatorPartitions(
        [CoordinatorPartitionRow(p, 0) for p in range(REAL_COUNT)], [], REAL_COUNT))
    wait_for(lambda: node.ask(groups, GetStats())["loaded_partitions"] == [0, 1, 2] or None,
             "the load")
    # a new group's first join waits group.initial.rebalance.delay.ms (the clock stands)
    node.tell(groups, JoinGroup(1, "fresh", "", None, "c", "h", "consumer",
                                [JoinProtocolRow("range", b"")], 10000, 10000, False),
              sender="probe")
    node.quiesce()
    assert node.ask(Address(node.name, "probe"), GetStats()) == []
    node.tell(groups, CoordinatorPartitions([], [], 0))
    assert _answer(node) == ["join", int(ErrorCode.NOT_COORDINATOR)]
    assert node.ask(groups, GetStats())["loaded_partitions"] == []


def test_an_init_producer_id_is_served_only_once_the_state_topics_count_is_known(
        manual_node: Node) -> None:
    node = manual_node
    topo, config = _node(node)
    txns = node.spawn(TransactionCoordinator, txn_coordinator_name(0), topology=topo,
                      config=config, index=0, clock=node.clock, cluster=True)
    node.tell(txns, UpdateMetadata(1, 1, 1, True, [BrokerRow(1, 1, node.name, None, [])], [
        UpdateMetadataPartition(TRANSACTION_STATE_TOPIC, p, 1, 1, 0, [1], 0, [1], [])
        for p in range(REAL_COUNT)], {}))
    node.tell(txns, TxnCoordinatorPartitions(
        [TxnPartitionRow(p, 0) for p in range(REAL_COUNT)], [], 0))
    node.quiesce()
    node.tell(txns, InitTxnProducer(1, TXN_ID, 60000, -1, -1), sender="probe")
    assert _answer(node)[0] == LOADING  # no new producer id beside the real one
    assert node.ask(topo.shard(0), GetStats()) == []

    node.tell(txns, TxnCoordinatorPartitions([], [], REAL_COUNT))
    wait_for(lambda: node.ask(txns, GetStats())["loaded_partitions"] == [0, 1, 2] or None,
             "the load under the real count")
    node.tell(txns, InitTxnProducer(2, TXN_ID, 60000, -1, -1), sender="probe")
    # the id's real state, fenced: its producer id, the next epoch
    assert _answer(node) == [0, PRODUCER_ID, PRODUCER_EPOCH + 1]
    assert node.ask(topo.shard(0), GetStats()) == [[TRANSACTION_STATE_TOPIC, 2]]


class ReadingShard(AnsweringShard):
    """Takes each role; every partition it is asked to read is empty."""

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        self.reply(ReadDone(msg.req_id, [ReadDoneRow(r.topic, r.partition, 0, 0, 0, b"", 0, 0, 0)
                                         for r in msg.rows]))


def _managed_node(node: Node, led: list[int]) -> tuple[Address, Address, Address, Address]:
    """A ReplicaManager and a coordinator of each kind (configured with 1 partition per
    internal topic); the ReplicaManager's LeaderAndIsr makes this node lead ``led`` of
    each internal topic, before any UpdateMetadata: (manager, controller, groups, txns)."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    config = Config({"offsets.topic.num.partitions": 1,
                     "transaction.state.log.num.partitions": 1})
    node.spawn(Timer, topo.timer.name)
    node.spawn(ReadingShard, topo.shard(0).name)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=config, broker_id=1, clock=node.clock)
    groups = node.spawn(GroupCoordinator, topo.coordinator(0).name, topology=topo,
                        config=config, clock=node.clock, cluster=True)
    txns = node.spawn(TransactionCoordinator, txn_coordinator_name(0), topology=topo,
                      config=config, index=0, clock=node.clock, cluster=True)
    controller = node.spawn(Controller, topo.controller.name)
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    node.tell(manager, LeaderAndIsr(2, 4, 5, [
        LeaderAndIsrPartition(topic, p, 4, 1, 3, [1], 4, [1], False)
        for topic in INTERNAL for p in led],
        [LiveLeaderRow(1, "")], {t: {} for t in INTERNAL}, 1), sender=controller.name)
    for actor in (groups, txns):
        wait_for(lambda a=actor: node.ask(a, GetStats())["led_partitions"] == led or None,
                 "the partitions led")
    node.quiesce()
    for actor in (groups, txns):
        stats = node.ask(actor, GetStats())
        assert not stats["partition_count_known"] and stats["loaded_partitions"] == []
    return manager, controller, groups, txns


def _metadata(partitions: list[int], assigned: int | None = None) -> UpdateMetadata:
    return UpdateMetadata(2, 4, 5, True, [BrokerRow(1, 1, "t", None, [])], [
        UpdateMetadataPartition(topic, p, 4, 1, 3, [1], 4, [1], [])
        for topic in INTERNAL for p in partitions], {}, 2,
        assigned_partitions={} if assigned is None else dict.fromkeys(INTERNAL, assigned))


def test_the_replica_manager_tells_the_count_once_the_metadata_has_it(
        manual_node: Node) -> None:
    """The LeaderAndIsr comes before the UpdateMetadata: the coordinators lead their
    partitions but load nothing until the metadata gives the count."""
    node = manual_node
    manager, controller, groups, txns = _managed_node(node, [0, 1, 2])
    node.tell(manager, _metadata([0, 1, 2]), sender=controller.name)
    for actor in (groups, txns):
        wait_for(lambda a=actor: node.ask(a, GetStats())["loaded_partitions"] == [0, 1, 2]
                 or None, "the load once the count is known")
        assert node.ask(actor, GetStats())["partition_count_known"]


def test_a_partition_missing_from_the_metadata_leaves_the_count_unknown(
        manual_node: Node) -> None:
    """Partition 1 was left NEW (no replica alive when the topic was made), so no
    UpdateMetadata names it, and the metadata carries no assigned count (a real
    controller sends one for the internal topics; this is the fallback without it): the
    count is unknown, not 1 (the partitions below the gap), and nothing is loaded."""
    node = manual_node
    manager, controller, groups, txns = _managed_node(node, [0, 2])
    node.tell(manager, _metadata([0, 2]), sender=controller.name)
    node.quiesce()
    for actor in (groups, txns):
        stats = node.ask(actor, GetStats())
        assert not stats["partition_count_known"] and stats["loaded_partitions"] == []
    node.tell(manager, _metadata([0, 1, 2]), sender=controller.name)  # partition 1 elected
    for actor in (groups, txns):
        wait_for(lambda a=actor: node.ask(a, GetStats())["loaded_partitions"] == [0, 2]
                 or None, "the load once the count is known")


def test_a_last_partition_missing_from_the_metadata_leaves_the_others_served(
        manual_node: Node) -> None:
    """Partition 2 of 3 was left NEW: the count the controller sends (3) is the count, as
    Kafka's partitionFor takes the assignment's size; the partitions led are loaded under
    it (not held back for the missing one, which would stop every group)."""
    node = manual_node
    manager, controller, groups, txns = _managed_node(node, [0, 1])
    node.tell(manager, _metadata([0, 1], REAL_COUNT), sender=controller.name)
    for actor in (groups, txns):
        wait_for(lambda a=actor: (node.ask(a, GetStats())["partition_count_known"]
                                  and node.ask(a, GetStats())["loaded_partitions"] == [0, 1])
                 or None, "the load under the assigned count")


def test_list_groups_is_refused_while_a_partition_led_here_is_loading(
        manual_node: Node) -> None:
    """The count known, one partition's load under way (its read not answered): ListGroups
    would miss that partition's groups, so it answers COORDINATOR_LOAD_IN_PROGRESS with
    the groups of the partitions loaded, as Kafka's handleListGroups while loading (and as
    a single node answers; a cluster node answered the error with no group); once loaded
    it lists them all."""
    node = manual_node
    topo, config = _node(node)
    groups = node.spawn(GroupCoordinator, topo.coordinator(0).name, topology=topo,
                        config=config, clock=node.clock, cluster=True)
    led = [CoordinatorPartitionRow(p, 0) for p in range(REAL_COUNT)]
    node.tell(groups, CoordinatorPartitions(led, [], REAL_COUNT))
    wait_for(lambda: node.ask(groups, GetStats())["loaded_partitions"] == [0, 1, 2] or None,
             "the load")
    node.tell(groups, ListGroups(1, None), sender="probe")
    assert _answer(node) == ["list", 0, [GROUP]]
    LogShard.unanswered = {(OFFSETS_TOPIC, 1)}
    # partition 1 resigned and led again: its load starts, its read is never answered
    node.tell(groups, CoordinatorPartitions([], [1], REAL_COUNT))
    node.tell(groups, CoordinatorPartitions([CoordinatorPartitionRow(1, 1)], [], REAL_COUNT))
    node.quiesce()
    assert node.ask(groups, GetStats())["loaded_partitions"] == [0, 2]
    refused = node.ask(groups, GetStats())["refused_loading"]
    node.tell(groups, ListGroups(2, None), sender="probe")
    # GROUP's partition 2 is loaded: listed with the error
    assert _answer(node) == ["list", LOADING, [GROUP]]
    assert node.ask(groups, GetStats())["refused_loading"] == refused + 1  # counted
    # GROUP's own partition loading: the error, GROUP not listed
    LogShard.unanswered = {(OFFSETS_TOPIC, 2)}
    node.tell(groups, CoordinatorPartitions([], [2], REAL_COUNT))
    node.tell(groups, CoordinatorPartitions([CoordinatorPartitionRow(2, 1)], [], REAL_COUNT))
    node.quiesce()
    assert node.ask(groups, GetStats())["loaded_partitions"] == [0]
    node.tell(groups, ListGroups(3, None), sender="probe")
    assert _answer(node) == ["list", LOADING, []]


def test_list_transactions_is_refused_while_a_partition_led_here_is_loading(
        manual_node: Node) -> None:
    """The count known, one partition's load under way (its read not answered):
    ListTransactions would miss that partition's transactions, so the coordinator answers
    COORDINATOR_LOAD_IN_PROGRESS, as Kafka's listTransactionStates while any partition
    loads; once loaded it lists."""
    node = manual_node
    topo, config = _node(node)
    txns = node.spawn(TransactionCoordinator, txn_coordinator_name(0), topology=topo,
                      config=config, index=0, clock=node.clock, cluster=True)
    node.tell(txns, ListTxns(1, [], []), sender="probe")
    assert _answer(node) == ["txns", 0, []]  # leads nothing: nothing to miss
    node.tell(txns, TxnCoordinatorPartitions(
        [TxnPartitionRow(p, 0) for p in range(REAL_COUNT)], [], 0))
    node.quiesce()
    refused = node.ask(txns, GetStats())["refused_loading"]
    node.tell(txns, ListTxns(2, [], []), sender="probe")
    assert _answer(node) == ["txns", LOADING, []]  # the count not known: nothing loaded
    assert node.ask(txns, GetStats())["refused_loading"] == refused + 1  # counted
    node.tell(txns, TxnCoordinatorPartitions([], [], REAL_COUNT))
    wait_for(lambda: node.ask(txns, GetStats())["loaded_partitions"] == [0, 1, 2] or None,
             "the load")
    node.tell(txns, ListTxns(3, [], []), sender="probe")
    assert _answer(node) == ["txns", 0, [TXN_ID]]
    LogShard.unanswered = {(TRANSACTION_STATE_TOPIC, 1)}
    # partition 1 resigned and led again: its load starts, its read is never answered
    node.tell(txns, TxnCoordinatorPartitions([], [1], REAL_COUNT))
    node.tell(txns, TxnCoordinatorPartitions([TxnPartitionRow(1, 1)], [], REAL_COUNT))
    node.quiesce()
    assert node.ask(txns, GetStats())["loaded_partitions"] == [0, 2]
    refused = node.ask(txns, GetStats())["refused_loading"]
    node.tell(txns, ListTxns(4, [], []), sender="probe")
    assert _answer(node) == ["txns", LOADING, []]
    assert node.ask(txns, GetStats())["refused_loading"] == refused + 1
