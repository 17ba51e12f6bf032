"""A cluster's transaction coordinator and a marker answered UNKNOWN_TOPIC_OR_PARTITION.

In a cluster a shard answers UNKNOWN_TOPIC_OR_PARTITION for a partition it does not hold
(a replica not given its role yet), which is no proof the partition is gone: a marker
dropped on that answer leaves the transaction unmarked on a live partition (its last
stable offset stuck, read_committed consumers stalled). As Kafka's
TransactionMarkerRequestCompletionHandler, the coordinator retries it, and drops a
partition's marker only once its own metadata no longer has the partition (deleted). The
real TransactionCoordinator and Timer on a manual clock; the shard is the shell test's
stand-in, with the marker answers these tests choose.
"""

from __future__ import annotations

from typing import Any

from actors.core.transaction_log import TRANSACTION_STATE_TOPIC
from actors.group_coordinator import OFFSETS_TOPIC
from actors.runtime.actor import handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.timer import Timer
from actors.topology import Topology
from actors.transaction_coordinator import (
    RETRY_MS,
    TransactionCoordinator,
    txn_coordinator_for,
    txn_coordinator_name,
)
from tests.actors.test_transaction_coordinator_shell import FakeShard, Probe, probe_answers
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.cluster_messages import BrokerRow, UpdateMetadata, UpdateMetadataPartition
from wire.errors import ErrorCode
from wire.transaction_messages import (
    AddPartitionsToTxn,
    EndTxn,
    InitTxnProducer,
    TxnCoordinatorPartitions,
    TxnMarkerDoneRow,
    TxnPartitionRow,
    TxnTopicPartition,
    WriteTxnMarkers,
    WriteTxnMarkersDone,
)

UNKNOWN_TP = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


class UnknownFirstShard(FakeShard):
    """Answers the first two marker requests UNKNOWN_TOPIC_OR_PARTITION (it does not hold
    the partition yet), then writes them."""

    unknown_answers = 2

    @handles(WriteTxnMarkers)
    def on_markers(self, msg: WriteTxnMarkers) -> None:
        if self.unknown_answers > 0:
            self.unknown_answers -= 1
            self.reply(WriteTxnMarkersDone(msg.req_id, [
                TxnMarkerDoneRow(r.topic, r.partition, UNKNOWN_TP) for r in msg.rows]))
            return
        super().on_markers(msg)


class AlwaysUnknownShard(UnknownFirstShard):
    unknown_answers = 1 << 30


def _partition(topic: str, partition: int, leader: int = 1) -> UpdateMetadataPartition:
    return UpdateMetadataPartition(topic, partition, 1, leader, 0, [1], 0, [1], [])


def _start(node: Node, shard: type[FakeShard]) -> tuple[Topology, Address, int, int]:
    """A cluster coordinator leading __transaction_state-0 with "t" in its metadata, and
    a transaction on t-0 committed (PrepareCommit written): (topology, coordinator,
    producer id, epoch)."""
    config = Config({"transaction.state.log.num.partitions": 1, "num.group.coordinators": 1,
                     "num.partition.shards": 1, "node.id": 1})
    topo = Topology.from_config(node.name, config)
    node.spawn(Timer, topo.timer.name)
    node.spawn(shard, topo.shard(0).name)
    node.spawn(Probe, "probe")
    coordinator = node.spawn(TransactionCoordinator, txn_coordinator_name(0), topology=topo,
                             config=config, index=0, clock=node.clock, cluster=True)
    assert coordinator == txn_coordinator_for(
        topo, int(config["transaction.state.log.num.partitions"]), "app")
    node.tell(coordinator, UpdateMetadata(
        1, 1, 1, True, [BrokerRow(1, 1, node.name, None, [])],
        [_partition(TRANSACTION_STATE_TOPIC, 0), _partition("t", 0)], {}))
    node.tell(coordinator, TxnCoordinatorPartitions([TxnPartitionRow(0, 0)], [], 1))
    wait_for(lambda: node.ask(coordinator, GetStats())["loaded_partitions"] == [0] or None,
             "the load")
    node.tell(coordinator, InitTxnProducer(1, "app", 60000, -1, -1), sender="probe")
    node.quiesce()
    _rid, error, producer_id, epoch = probe_answers(node)[0]
    assert error == 0
    node.tell(coordinator, AddPartitionsToTxn(2, "app", producer_id, epoch,
                                              [TxnTopicPartition("t", 0)]), sender="probe")
    node.quiesce()
    node.tell(coordinator, EndTxn(3, "app", producer_id, epoch, True), sender="probe")
    node.quiesce()
    assert probe_answers(node)[2] == [3, 0]
    return topo, coordinator, producer_id, epoch


def _state(node: Node, coordinator: Address) -> Any:
    return node.ask(coordinator, GetStats())["transactions"]


def test_a_marker_answered_unknown_for_a_partition_in_metadata_is_retried(
        manual_node: Node) -> None:
    node = manual_node
    topo, coordinator, _pid, epoch = _start(node, UnknownFirstShard)
    shard = topo.shard(0)
    for _ in range(2):  # answered UNKNOWN_TOPIC_OR_PARTITION: not done, sent again
        assert node.ask(shard, GetStats())["markers"] == []
        assert _state(node, coordinator) == {"app": "PrepareCommit"}
        node.advance_clock(RETRY_MS)
    stats = node.ask(shard, GetStats())
    assert stats["markers"] == [["t", 0, epoch, True]]
    assert stats["values"] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert _state(node, coordinator) == {"app": "CompleteCommit"}


def test_a_deleted_partitions_marker_is_dropped(manual_node: Node) -> None:
    """t is deleted (the controller's UpdateMetadata during the delete, leader -2): its
    marker is given up and the transaction completes without it."""
    node = manual_node
    topo, coordinator, _pid, _epoch = _start(node, AlwaysUnknownShard)
    node.advance_clock(RETRY_MS)
    assert _state(node, coordinator) == {"app": "PrepareCommit"}  # t is still known
    node.tell(coordinator, UpdateMetadata(
        1, 1, 1, False, [BrokerRow(1, 1, node.name, None, [])], [_partition("t", 0, -2)], {}))
    node.advance_clock(RETRY_MS)
    node.advance_clock(RETRY_MS)
    stats = node.ask(topo.shard(0), GetStats())
    assert stats["markers"] == []
    assert stats["values"] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert _state(node, coordinator) == {"app": "CompleteCommit"}


def _add(node: Node, coordinator: Address, rid: int, pid: int, epoch: int,
         topic: str) -> list[int]:
    node.tell(coordinator, AddPartitionsToTxn(rid, "app", pid, epoch,
                                              [TxnTopicPartition(topic, 0)]), sender="probe")
    node.quiesce()
    answer: list[int] = probe_answers(node)[-1]
    assert answer[0] == rid
    return answer


def test_a_partition_the_coordinators_metadata_lacks_yet_is_not_added(
        manual_node: Node) -> None:
    """Topic u was just created: the broker the client asked knows it, the coordinator's
    metadata not yet (its UpdateMetadata is on its way). Taken into the transaction, its
    marker was dropped at the commit as a deleted partition's (the coordinator's metadata
    lacks it): the transaction completed with u-0 unmarked, its last stable offset stuck.
    As Kafka's AddPartitionsToTxn (checked against the metadata cache its coordinator's
    marker channel reads), it is refused UNKNOWN_TOPIC_OR_PARTITION, which the client
    retries, until the metadata has it."""
    node = manual_node
    topo, coordinator, pid, epoch = _start(node, FakeShard)
    assert _state(node, coordinator) == {"app": "CompleteCommit"}
    assert _add(node, coordinator, 4, pid, epoch, "u") == [4, UNKNOWN_TP, [["u", 0]]]
    node.tell(coordinator, UpdateMetadata(
        1, 1, 1, False, [BrokerRow(1, 1, node.name, None, [])], [_partition("u", 0)], {}))
    assert _add(node, coordinator, 5, pid, epoch, "u") == [5, 0]
    node.tell(coordinator, EndTxn(6, "app", pid, epoch, True), sender="probe")
    node.quiesce()
    assert probe_answers(node)[-1] == [6, 0]
    assert ["u", 0, epoch, True] in node.ask(topo.shard(0), GetStats())["markers"]
    assert _state(node, coordinator) == {"app": "CompleteCommit"}


def test_a_group_offsets_marker_waits_for_the_metadata(manual_node: Node) -> None:
    """AddOffsetsToTxn adds a __consumer_offsets partition unchecked (as Kafka): while
    the coordinator's metadata has no such topic yet (it is being made) its marker waits
    for the metadata, up to the transaction's timeout, instead of being dropped at once
    (the group's transactional offsets would stay pending)."""
    node = manual_node
    topo, coordinator, pid, epoch = _start(node, FakeShard)
    assert _add(node, coordinator, 4, pid, epoch, OFFSETS_TOPIC) == [4, 0]
    node.tell(coordinator, EndTxn(5, "app", pid, epoch, True), sender="probe")
    node.quiesce()
    assert probe_answers(node)[-1] == [5, 0]
    for _ in range(2):
        node.advance_clock(RETRY_MS)
        assert _state(node, coordinator) == {"app": "PrepareCommit"}
    node.tell(coordinator, UpdateMetadata(
        1, 1, 1, False, [BrokerRow(1, 1, node.name, None, [])],
        [_partition(OFFSETS_TOPIC, 0)], {}))
    node.advance_clock(RETRY_MS)
    assert [OFFSETS_TOPIC, 0, epoch, True] in node.ask(topo.shard(0), GetStats())["markers"]
    assert _state(node, coordinator) == {"app": "CompleteCommit"}


def test_a_group_offsets_marker_whose_topic_never_comes_is_dropped_after_the_timeout(
        manual_node: Node) -> None:
    """AddOffsetsToTxn before __consumer_offsets exists (it is made at the first
    FindCoordinator(GROUP)), then the producer gives up and aborts before that ever
    happens: the topic never comes. Its marker waited for it for ever, the transaction
    stayed in PrepareAbort and the producer's InitProducerId got CONCURRENT_TRANSACTIONS
    for good. It waits the transaction's timeout (60 s here), then is dropped as Kafka
    drops a partition its metadata cache has no leader for."""
    node = manual_node
    topo, coordinator, pid, epoch = _start(node, FakeShard)
    assert _add(node, coordinator, 4, pid, epoch, OFFSETS_TOPIC) == [4, 0]
    node.tell(coordinator, EndTxn(5, "app", pid, epoch, False), sender="probe")
    node.quiesce()
    assert probe_answers(node)[-1] == [5, 0]
    node.advance_clock(RETRY_MS)
    assert _state(node, coordinator) == {"app": "PrepareAbort"}
    node.advance_clock(30_000)  # half the timeout: still waiting for the topic
    assert _state(node, coordinator) == {"app": "PrepareAbort"}
    for _ in range(3):
        node.advance_clock(15_000)
    assert _state(node, coordinator) == {"app": "CompleteAbort"}
    assert [OFFSETS_TOPIC, 0, epoch, False] not in node.ask(topo.shard(0),
                                                            GetStats())["markers"]
    node.tell(coordinator, InitTxnProducer(6, "app", 60000, -1, -1), sender="probe")
    node.quiesce()
    assert probe_answers(node)[-1][:2] == [6, 0]


def test_a_group_offsets_partition_past_the_topics_count_is_dropped(
        manual_node: Node) -> None:
    """This node's offsets.topic.num.partitions says more partitions than the real
    __consumer_offsets has (it was made with a smaller count): the partition
    AddOffsetsToTxn named does not exist, its marker is dropped at once, as Kafka's."""
    node = manual_node
    topo, coordinator, pid, epoch = _start(node, FakeShard)
    node.tell(coordinator, UpdateMetadata(
        1, 1, 1, False, [BrokerRow(1, 1, node.name, None, [])],
        [_partition(OFFSETS_TOPIC, 0)], {}))
    node.tell(coordinator, AddPartitionsToTxn(4, "app", pid, epoch,
                                              [TxnTopicPartition(OFFSETS_TOPIC, 3)]),
              sender="probe")
    node.quiesce()
    assert probe_answers(node)[-1] == [4, 0]
    node.tell(coordinator, EndTxn(5, "app", pid, epoch, True), sender="probe")
    node.quiesce()
    assert probe_answers(node)[-1] == [5, 0]
    node.advance_clock(RETRY_MS)
    assert _state(node, coordinator) == {"app": "CompleteCommit"}
    assert [OFFSETS_TOPIC, 3, epoch, True] not in node.ask(topo.shard(0),
                                                           GetStats())["markers"]


def test_add_partitions_refuses_only_the_partitions_its_metadata_lacks(
        manual_node: Node) -> None:
    """A partition not yet in the coordinator's metadata (a topic just made) is refused
    UNKNOWN_TOPIC_OR_PARTITION by name, so the handler answers the others
    OPERATION_NOT_ATTEMPTED as Kafka's KafkaApis, not the same code on every partition."""
    node = manual_node
    _topo, coordinator, producer_id, epoch = _start(node, UnknownFirstShard)
    node.tell(coordinator, AddPartitionsToTxn(4, "app", producer_id, epoch,
                                              [TxnTopicPartition("t", 0),
                                               TxnTopicPartition("u", 0)]), sender="probe")
    node.quiesce()
    answer = probe_answers(node)[3]
    assert answer[:2] == [4, UNKNOWN_TP]
    assert len(answer) == 3 and [tuple(tp) for tp in answer[2]] == [("u", 0)], answer
