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

import pytest
from loguru import logger

from actors import transaction_coordinator
from actors.coordinator_reads import LOAD_READ_MAX_BYTES
from actors.core.record_batch import build_batch
from actors.core.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    TxnLogValue,
    TxnStatus,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
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
    TICK_SLICE_IDS,
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


def start(node: Node, shard: type[FakeShard] = FakeShard, tick_ms: int = TICK_MS,
          in_shard_loop: bool = False) -> tuple[Topology, Config, Address]:
    """The coordinator and its fakes; ``in_shard_loop``: it runs in the shard's worker
    loop (as with actor.threads = single), not a thread of its own."""
    config = Config({"transaction.state.log.num.partitions": 4, "num.group.coordinators": 1,
                     "num.partition.shards": 1,
                     "transaction.abort.timed.out.transaction.cleanup.interval.ms": tick_ms})
    topo = Topology.from_config(node.name, config)
    node.spawn(Timer, topo.timer.name)
    node.spawn(FakeController, topo.controller.name)
    node.spawn(shard, topo.shard(0).name)
    node.spawn(Probe, "probe")
    node.spawn(TransactionCoordinator, "txn-coordinator-0", topology=topo, config=config,
               index=0, **({"host": topo.shard(0).name} if in_shard_loop else {}))
    return topo, config, txn_coordinator_for(
        topo, int(config["transaction.state.log.num.partitions"]), "app")


def probe_answers(node: Node) -> list[Any]:
    result: list[Any] = node.ask(Address(node.name, "probe"), GetStats())
    return result


def first_ask_loads(node: Node, coordinator: Address, timeout_ms: int,
                    wait_s: float = 10) -> None:
    """Producer "app"'s first InitTxnProducer (request 1) has the coordinator load its
    topic; until the load is done."""
    node.tell(coordinator, InitTxnProducer(1, "app", timeout_ms, -1, -1), sender="probe")
    node.quiesce()
    wait_for(lambda: node.ask(coordinator, GetStats())["phase"] == "ready", "the load",
             timeout=wait_s)


def commit_ended(node: Node, coordinator: Address, timeout_ms: int) -> int:
    """The load, then producer "app" adds partition t-0 and ends its transaction with a
    commit (answered once PrepareCommit is written); its epoch."""
    first_ask_loads(node, coordinator, timeout_ms)
    node.tell(coordinator, InitTxnProducer(2, "app", timeout_ms, -1, -1), sender="probe")
    node.quiesce()
    _rid, error, producer_id, epoch = probe_answers(node)[1]
    assert error == 0
    node.tell(coordinator, AddPartitionsToTxn(3, "app", producer_id, epoch,
                                              [TxnTopicPartition("t", 0)]), sender="probe")
    node.quiesce()
    node.tell(coordinator, EndTxn(4, "app", producer_id, epoch, True), sender="probe")
    node.quiesce()
    assert probe_answers(node)[3] == [4, 0]  # answered once PrepareCommit is written
    return int(epoch)


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
    epoch = commit_ended(node, coordinator, 60000)
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


def test_a_marker_request_is_sent_again_at_its_deadline_with_no_message_between(
        manual_node: Node) -> None:
    """The coordinator keeps its earliest deadline between the messages it handles: with
    no tick (and no other message) while the clock moves, the unanswered markers still go
    again exactly at MARKER_TIMEOUT_MS, not before."""
    node = manual_node
    topo, _config, coordinator = start(node, DroppingShard, tick_ms=100 * MARKER_TIMEOUT_MS)
    epoch = commit_ended(node, coordinator, 600_000)
    shard = topo.shard(0)
    step = MARKER_TIMEOUT_MS // 5
    for _ in range(4):
        node.advance_clock(step)  # turns of the loop, nothing due yet: asked of the shard only
        assert node.ask(shard, GetStats())["markers"] == []
    node.advance_clock(step - 1)
    assert node.ask(shard, GetStats())["markers"] == []
    node.advance_clock(1)
    assert node.ask(shard, GetStats())["markers"] == [["t", 0, epoch, True]]
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
        epoch = commit_ended(node, coordinator, 60000)
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


class RecordingShard(FakeShard):
    """Keeps each Read's byte budget and partitions."""

    def setup(self) -> None:
        super().setup()
        self.reads: list[tuple[int, list[int]]] = []

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        self.reads.append((msg.max_bytes, [r.partition for r in msg.rows]))
        super().on_read(msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return {**super().stats(_msg), "reads": list(self.reads)}


def test_a_loads_read_asks_a_megabyte_over_all_its_partitions(manual_node: Node) -> None:
    # The coordinator runs in the worker loop: an answer of 8 MB (the shared default)
    # would hold up every request of the process while it is decoded. The shard keeps
    # the Read's max_bytes over all its partitions, save one batch (Kafka's semantics).
    node = manual_node
    topo, _config, coordinator = start(node, RecordingShard)
    first_ask_loads(node, coordinator, 5000)
    reads = node.ask(topo.shard(0), GetStats())["reads"]
    assert sorted(p for _budget, parts in reads for p in parts) == [0, 1, 2, 3]
    assert all(budget == LOAD_READ_MAX_BYTES for budget, _parts in reads), reads


class ManyOngoingShard(FakeShard):
    """__transaction_state holds MANY Ongoing transactions, started at 0 with a 1 s
    timeout: all past it at the first tick."""

    count = 5000  # MANY

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        rows = []
        for r in msg.rows:
            ids = [t for t in (f"many-{i}" for i in range(self.count))
                   if partition_for(t, 4) == r.partition]
            records = build_batch(
                [encode_value(TxnLogValue(i, 0, 1000, TxnStatus.ONGOING, (("t", 0),), 0, 0))
                 for i in range(len(ids))], keys=[encode_key(t) for t in ids]) if ids else b""
            end = len(ids)
            rows.append(ReadDoneRow(r.topic, r.partition, 0, end, 0,
                                    records if r.fetch_offset < end else b"", 0, 0, end))
        self.reply(ReadDone(msg.req_id, rows))


MANY = 5000


def test_a_tick_aborts_many_timed_out_transactions_a_slice_a_poll(manual_node: Node) -> None:
    """5,000 transactions past their timeout at the first tick, more than TICK_SLICE_IDS:
    every one is fenced and aborted, over several polls of the loop (slices), not all in
    the call that handles the tick."""
    node = manual_node
    topo, _config, coordinator = start(node, ManyOngoingShard)
    first_ask_loads(node, coordinator, 5000, wait_s=30)
    assert set(node.ask(coordinator, GetStats())["transactions"].values()) == {"Ongoing"}
    node.advance_clock(2 * TICK_MS)

    def aborted() -> bool:
        states = node.ask(coordinator, GetStats())["transactions"]
        return sum(s == "CompleteAbort" for s in states.values()) == MANY
    wait_for(aborted, "every timed-out transaction aborted", timeout=60)
    stats = node.ask(coordinator, GetStats())
    # each slice looked at TICK_SLICE_IDS entries at most (one call would look at all)
    assert stats["expiry_visits"] >= MANY
    assert stats["expiry_slice_most"] == TICK_SLICE_IDS
    assert stats["expiry_slices"] >= -(-MANY // TICK_SLICE_IDS)  # the tick's, then more
    assert node.ask(topo.shard(0), GetStats())["values"].count("CompleteAbort") == MANY


class FewOngoingShard(ManyOngoingShard):
    count = 60


def test_the_abort_sweep_goes_on_in_a_shared_loop_with_no_message_to_wake_it(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator runs in its shard's worker loop, a slice of the tick's abort sweep
    is 8 ids (60 past their timeout): each slice's writes and markers are answered within
    the loop's turn that sent them, so once they are, nothing is due but the sweep's next
    slice (core.expiry_more). on_turn must not then say quiet (Actor.quiet_turns): the
    loop would skip the coordinator, and the rest of the sweep wait for a message that
    never comes (no request, the Timer's next tick only when the clock is moved)."""
    monkeypatch.setattr(transaction_coordinator, "TICK_SLICE_IDS", 8)
    node = manual_node
    topo, _config, coordinator = start(node, FewOngoingShard, in_shard_loop=True)
    first_ask_loads(node, coordinator, 5000, wait_s=30)
    assert set(node.ask(coordinator, GetStats())["transactions"].values()) == {"Ongoing"}
    assert len(node.ask(coordinator, GetStats())["transactions"]) == FewOngoingShard.count

    node.advance_clock(2 * TICK_MS)  # the tick: its first slice, then the loop's turns

    # Watched through the shard alone: a message to the coordinator would wake it
    def aborted() -> int:
        values: list[str] = node.ask(topo.shard(0), GetStats())["values"]
        return values.count("CompleteAbort")
    wait_for(lambda: aborted() == FewOngoingShard.count,
             "every timed-out transaction aborted with no message to the coordinator",
             timeout=10)
    stats = node.ask(coordinator, GetStats())
    assert stats["expiry_slice_most"] == 8
    assert stats["expiry_slices"] >= FewOngoingShard.count // 8
    assert set(stats["transactions"].values()) == {"CompleteAbort"}
