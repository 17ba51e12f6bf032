"""The TransactionCoordinator shell on real actors and a manual clock: lazy creation and
load of ``__transaction_state``, requests refused while loading, every transition
appended before it is answered, markers written through the shard, and a transaction
past its timeout aborted on the Timer's tick once the clock is moved (no sleeping), and
a marker request that is never answered (its node died) sent again after
MARKER_TIMEOUT_MS, and markers and a completion refused for a short ISR
(NOT_ENOUGH_REPLICAS) sent again every RETRY_MS, logged once.

A fake Controller and a fake PartitionShard stand in for the broker's; the Timer is
the real one.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from actors.core.transaction_log import TRANSACTION_STATE_TOPIC, decode_value
from actors.group_coordinator import decode_batches
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.timer import Timer
from actors.topology import Topology
from actors.transaction_coordinator import (
    MARKER_TIMEOUT_MS,
    RETRY_MS,
    TransactionCoordinator,
    txn_coordinator_for,
)
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendDoneRow,
    CreateTopicDoneRow,
    CreateTopics,
    CreateTopicsDone,
    GetStats,
    Read,
    ReadDone,
    ReadDoneRow,
)
from wire.errors import ErrorCode
from wire.transaction_messages import (
    AddPartitionsRefused,
    AddPartitionsToTxn,
    EndTxn,
    InitTxnProducer,
    InitTxnProducerDone,
    TxnDone,
    TxnMarkerDoneRow,
    TxnTopicPartition,
    WriteTxnMarkers,
    WriteTxnMarkersDone,
)

TICK_MS = 1000


class FakeController(Actor):
    @handles(CreateTopics)
    def on_create(self, msg: CreateTopics) -> None:
        self.reply(CreateTopicsDone(msg.req_id, [
            CreateTopicDoneRow(r.name, 0, None, r.num_partitions, 1) for r in msg.rows]))


class FakeShard(Actor):
    """An empty __transaction_state that keeps what is appended; markers always land."""

    drop_markers = 0  # marker requests to leave unanswered, as a node killed would

    def setup(self) -> None:
        self.values: list[Any] = []
        self.markers: list[Any] = []

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        self.reply(ReadDone(msg.req_id, [ReadDoneRow(r.topic, r.partition, 0, 0, 0, b"", 0, 0, 0)
                                         for r in msg.rows]))

    @handles(Append)
    def on_append(self, msg: Append) -> None:
        for r in msg.rows:
            assert r.topic == TRANSACTION_STATE_TOPIC and msg.acks == -1
            [(_o, _k, value)], _next = decode_batches(bytes(r.records))
            self.values.append(decode_value(value).status.kafka_name)
        self.reply(AppendDone(msg.req_id, [AppendDoneRow(r.topic, r.partition, 0, 0, -1, 0,
                                                         None) for r in msg.rows]))

    @handles(WriteTxnMarkers)
    def on_markers(self, msg: WriteTxnMarkers) -> None:
        if self.drop_markers > 0:
            self.drop_markers -= 1
            return
        self.markers.extend((r.topic, r.partition, r.producer_epoch, r.commit) for r in msg.rows)
        self.reply(WriteTxnMarkersDone(msg.req_id, [
            TxnMarkerDoneRow(r.topic, r.partition, 0) for r in msg.rows]))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return {"values": list(self.values), "markers": list(self.markers)}


class Probe(Actor):
    def setup(self) -> None:
        self.answers: list[Any] = []

    @handles(InitTxnProducerDone, TxnDone, AddPartitionsRefused)
    def on_answer(self, msg: Any) -> None:
        self.answers.append(msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return [list(a) for a in self.answers]  # (req_id, error_code, ...) as lists


class DroppingShard(FakeShard):
    drop_markers = 1


class ShortIsrShard(FakeShard):
    """The marker's partition and then __transaction_state have an ISR below their
    min.insync.replicas for a while: NOT_ENOUGH_REPLICAS, nothing appended."""

    refuse_markers = 3
    refuse_completions = 2

    @handles(Append)
    def on_append(self, msg: Append) -> None:
        [row] = msg.rows
        [(_o, _k, value)], _next = decode_batches(bytes(row.records))
        if decode_value(value).status.kafka_name == "CompleteCommit" and \
                self.refuse_completions > 0:
            self.refuse_completions -= 1
            self.values.append("refused")
            self.reply(AppendDone(msg.req_id, [AppendDoneRow(
                row.topic, row.partition, int(ErrorCode.NOT_ENOUGH_REPLICAS), -1, -1, -1,
                "ISR has 1 replicas, min.insync.replicas is 2")]))
            return
        super().on_append(msg)

    @handles(WriteTxnMarkers)
    def on_markers(self, msg: WriteTxnMarkers) -> None:
        if self.refuse_markers > 0:
            self.refuse_markers -= 1
            self.reply(WriteTxnMarkersDone(msg.req_id, [
                TxnMarkerDoneRow(r.topic, r.partition, int(ErrorCode.NOT_ENOUGH_REPLICAS))
                for r in msg.rows]))
            return
        super().on_markers(msg)


def start(node: Node, shard: type[FakeShard] = FakeShard) -> tuple[Topology, Config, Address]:
    config = Config({"transaction.state.log.num.partitions": 4, "num.group.coordinators": 1,
                     "num.partition.shards": 1,
                     "transaction.abort.timed.out.transaction.cleanup.interval.ms": TICK_MS})
    topo = Topology.from_config(node.name, config)
    node.spawn(Timer, topo.timer.name)
    node.spawn(FakeController, topo.controller.name)
    node.spawn(shard, topo.shard(0).name)
    node.spawn(Probe, "probe")
    node.spawn(TransactionCoordinator, "txn-coordinator-0", topology=topo, config=config,
               index=0)
    return topo, config, txn_coordinator_for(
        topo, int(config["transaction.state.log.num.partitions"]), "app")


def probe_answers(node: Node) -> list[Any]:
    result: list[Any] = node.ask(Address(node.name, "probe"), GetStats())
    return result


def test_a_timed_out_transaction_is_aborted_on_the_timer_tick(manual_node: Node) -> None:
    node = manual_node
    topo, _config, coordinator = start(node)

    def answers() -> list[Any]:
        return probe_answers(node)

    node.tell(coordinator, InitTxnProducer(1, "app", 5000, -1, -1), sender="probe")
    node.quiesce()
    # the first request creates and loads the topic: refused meanwhile, retried by clients
    assert answers()[0] == [1, int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), -1, -1]
    wait_for(lambda: node.ask(coordinator, GetStats())["phase"] == "ready", "the load",
             timeout=10)
    node.tell(coordinator, InitTxnProducer(2, "app", 5000, -1, -1), sender="probe")
    node.quiesce()
    _rid, error, producer_id, epoch = answers()[1]
    assert (error, epoch) == (0, 0)
    node.tell(coordinator, AddPartitionsToTxn(3, "app", producer_id, 0,
                                              [TxnTopicPartition("t", 0)]), sender="probe")
    node.quiesce()
    assert answers()[2] == [3, 0]
    shard = topo.shard(0)
    assert node.ask(shard, GetStats())["values"] == ["Empty", "Ongoing"]
    node.advance_clock(4 * TICK_MS)  # within the 5 s timeout: ticks find nothing to abort
    assert node.ask(shard, GetStats())["markers"] == []
    node.advance_clock(2 * TICK_MS)  # past it: fenced (epoch 1) and aborted
    node.advance_clock(TICK_MS)
    stats = node.ask(shard, GetStats())
    assert stats["values"] == ["Empty", "Ongoing", "PrepareEpochFence", "PrepareAbort",
                               "CompleteAbort"]
    assert stats["markers"] == [["t", 0, 1, False]]
    # the fenced producer's next request is refused
    node.tell(coordinator, AddPartitionsToTxn(4, "app", producer_id, 0,
                                              [TxnTopicPartition("t", 1)]), sender="probe")
    node.quiesce()
    assert answers()[3] == [4, int(ErrorCode.PRODUCER_FENCED)]


def test_an_unanswered_marker_request_is_sent_again(manual_node: Node) -> None:
    """The shard leaves the first WriteTxnMarkers unanswered (a node killed mid-request,
    or a dead letter to a leader that is gone): the commit stays in PrepareCommit until
    MARKER_TIMEOUT_MS, then the markers go again and the transaction completes."""
    node = manual_node
    topo, _config, coordinator = start(node, DroppingShard)
    node.tell(coordinator, InitTxnProducer(1, "app", 60000, -1, -1), sender="probe")
    node.quiesce()
    wait_for(lambda: node.ask(coordinator, GetStats())["phase"] == "ready", "the load",
             timeout=10)
    node.tell(coordinator, InitTxnProducer(2, "app", 60000, -1, -1), sender="probe")
    node.quiesce()
    _rid, error, producer_id, epoch = probe_answers(node)[1]
    assert error == 0
    node.tell(coordinator, AddPartitionsToTxn(3, "app", producer_id, epoch,
                                              [TxnTopicPartition("t", 0)]), sender="probe")
    node.quiesce()
    node.tell(coordinator, EndTxn(4, "app", producer_id, epoch, True), sender="probe")
    node.quiesce()
    assert probe_answers(node)[3] == [4, 0]  # answered once PrepareCommit is written
    shard = topo.shard(0)
    assert node.ask(shard, GetStats()) == {
        "values": ["Empty", "Ongoing", "PrepareCommit"], "markers": []}
    node.advance_clock(MARKER_TIMEOUT_MS - 1)
    assert node.ask(shard, GetStats())["markers"] == []
    node.advance_clock(1)
    stats = node.ask(shard, GetStats())
    assert stats["markers"] == [["t", 0, epoch, True]]
    assert stats["values"] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert node.ask(coordinator, GetStats())["marker_jobs"] == 0


def test_markers_and_completion_refused_for_a_short_isr_are_retried_and_logged_once(
        manual_node: Node) -> None:
    """The partition refuses the commit marker (NOT_ENOUGH_REPLICAS) three times, then
    __transaction_state refuses CompleteCommit twice: each is sent again every RETRY_MS
    until it lands, the transaction stays PrepareCommit until then, and each failure is
    logged once, not at every retry."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO")
    try:
        node = manual_node
        topo, _config, coordinator = start(node, ShortIsrShard)
        node.tell(coordinator, InitTxnProducer(1, "app", 60000, -1, -1), sender="probe")
        node.quiesce()
        wait_for(lambda: node.ask(coordinator, GetStats())["phase"] == "ready", "the load",
                 timeout=10)
        node.tell(coordinator, InitTxnProducer(2, "app", 60000, -1, -1), sender="probe")
        node.quiesce()
        _rid, error, producer_id, epoch = probe_answers(node)[1]
        assert error == 0
        node.tell(coordinator, AddPartitionsToTxn(3, "app", producer_id, epoch,
                                                  [TxnTopicPartition("t", 0)]), sender="probe")
        node.quiesce()
        node.tell(coordinator, EndTxn(4, "app", producer_id, epoch, True), sender="probe")
        node.quiesce()
        assert probe_answers(node)[3] == [4, 0]
        shard = topo.shard(0)
        for _ in range(3):  # refused, refused, refused
            assert node.ask(shard, GetStats())["markers"] == []
            assert node.ask(coordinator, GetStats())["transactions"] == {
                "app": "PrepareCommit"}
            node.advance_clock(RETRY_MS)
        assert node.ask(shard, GetStats())["markers"] == [["t", 0, epoch, True]]
        for _ in range(2):  # CompleteCommit refused twice, written again each RETRY_MS
            assert node.ask(coordinator, GetStats())["transactions"] == {
                "app": "PrepareCommit"}
            node.advance_clock(RETRY_MS)
        stats = node.ask(shard, GetStats())
        assert stats["values"] == ["Empty", "Ongoing", "PrepareCommit", "refused", "refused",
                                   "CompleteCommit"]
        assert stats["markers"] == [["t", 0, epoch, True]]  # the markers are not rewritten
        assert node.ask(coordinator, GetStats())["transactions"] == {"app": "CompleteCommit"}
        assert node.ask(coordinator, GetStats())["completions_to_retry"] == 0
    finally:
        logger.remove(sink)
    refused = [line for line in lines if "NOT_ENOUGH_REPLICAS" in line]
    assert len(refused) == 2, refused  # one for the markers, one for __transaction_state
    assert any("written after 3 failed attempt(s)" in line for line in lines)
    assert any("works again after 2 failed append(s)" in line for line in lines)
