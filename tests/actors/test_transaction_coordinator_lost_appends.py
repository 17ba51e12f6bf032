"""A TransactionCoordinator whose ``__transaction_state`` append gets no answer does not
wait forever.

Real actors on a manual clock: the TransactionCoordinator, the PartitionShard hosting
``__transaction_state`` and the data topic (with its LogManager, purgatory and the
Timer); only the Controller is a stand-in (the topic exists). The answer is lost as in
a broker: the shard stops (its process died) or crashes handling the Append and is
restarted in place. As Kafka's TransactionStateManager: the timed-out write is
answered COORDINATOR_NOT_AVAILABLE (the client retries) and the id is left as before
it; a CompleteCommit is written again until it lands; and a PrepareAbort lost behind
an epoch fence is written again on the next tick instead of leaving the id stuck in
PrepareEpochFence. A load's Read lost the same way is sent again after
READ_TIMEOUT_MS. A completion answered only after it was given up on is taken while
the id still waits for it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
from actors.core.transaction_log import TRANSACTION_STATE_TOPIC, decode_value
from actors.group_coordinator import ANSWER_BUCKET_MS, ANSWER_MARGIN_MS, decode_batches
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.purgatory import PurgatoryShard
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.timer import Timer
from actors.topology import Topology
from actors.transaction_coordinator import (
    APPEND_TIMEOUT_MS,
    READ_TIMEOUT_MS,
    RETRY_MS,
    TransactionCoordinator,
    txn_coordinator_for,
)
from tests.actors.test_transaction_coordinator_shell import Probe
from tests.fixtures.coordinator_node import ExistingTopicController, snapshot
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    Append,
    GetStats,
    TopicEntry,
)
from wire.errors import ErrorCode
from wire.transaction_messages import (
    AddPartitionsToTxn,
    EndTxn,
    InitTxnProducer,
    TxnTopicPartition,
)

TICK_MS = 1000
WAIT_MS = APPEND_TIMEOUT_MS + ANSWER_MARGIN_MS + ANSWER_BUCKET_MS
NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)


def crash_on_state(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The shard crashes (and is restarted in place) on the Append of the next
    __transaction_state record whose status is ``armed["state"]``: that Append and its
    answer are lost. Patch before the shard is spawned."""
    armed = {"state": ""}
    real = PartitionShard.on_append

    def patched(self: PartitionShard, msg: Append) -> None:
        for row in msg.rows:
            if row.topic != TRANSACTION_STATE_TOPIC or not armed["state"]:
                continue
            [(_o, _k, value)] = decode_batches(bytes(row.records))[0]
            assert value is not None
            if decode_value(value).status.kafka_name == armed["state"]:
                armed["state"] = ""
                raise RuntimeError("a shard that crashes with the Append")
        real(self, msg)

    patched.__actorlog_handles__ = (Append,)  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionShard, "on_append", patched)
    return armed


class Broker:
    def __init__(self, node: Node, tmp_path: Path, shard_up: bool = True) -> None:
        self.node = node
        self.config = Config({
            "transaction.state.log.num.partitions": 2, "num.group.coordinators": 1,
            "num.partition.shards": 1, "num.io.threads": 1,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": TICK_MS})
        self.topo = Topology.from_config(node.name, self.config)
        self.log_dir = LogDir.open(tmp_path)
        node.spawn(Timer, self.topo.timer.name, clock=node.clock)
        node.spawn(LogManager, self.topo.log_manager.name, log_dir=self.log_dir,
                   num_shards=1, clock=node.clock)
        node.spawn(PurgatoryShard, self.topo.purgatory(0).name, topology=self.topo,
                   clock=node.clock)
        self.spawn_shard()
        if not shard_up:
            node.stop_actor(self.topo.shard(0).name)
        node.spawn(ExistingTopicController, self.topo.controller.name)
        node.spawn(Probe, "probe")
        self.coordinator = txn_coordinator_for(
            self.topo, int(self.config["transaction.state.log.num.partitions"]), "app")
        node.spawn(TransactionCoordinator, self.coordinator.name, topology=self.topo,
                   config=self.config, index=0, clock=node.clock, topic_exists=True)
        if shard_up:
            self.wait_loaded()
        self.next_id = 0

    def wait_loaded(self) -> None:
        wait_for(lambda: self.stats()["loaded_partitions"] == [0, 1], "the load")

    def spawn_shard(self) -> None:
        self.node.spawn(PartitionShard, self.topo.shard(0).name, topology=self.topo,
                        config=self.config, log_dir=snapshot(self.log_dir),
                        topics={TRANSACTION_STATE_TOPIC: TopicEntry(2, {}),
                                "t": TopicEntry(1, {})},
                        broker_id=1, clock=self.node.clock)

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.node.ask(self.coordinator, GetStats())
        return stats

    def state(self) -> str | None:
        state: str | None = self.stats()["transactions"].get("app")
        return state

    def advance(self, ms: int) -> None:
        self.node.clock.advance(ms)  # type: ignore[attr-defined]
        self.node.run_turns()

    def send(self, make: Any) -> int:
        self.next_id += 1
        self.node.tell(self.coordinator, make(self.next_id), sender="probe")
        return self.next_id

    def answer(self, req_id: int, wait: bool = True) -> list[Any] | None:
        def find() -> list[Any] | None:
            found = [a for a in self.node.ask(Address(self.node.name, "probe"), GetStats())
                     if a[0] == req_id]
            return found[0] if found else None

        return wait_for(find, f"the answer to request {req_id}") if wait else find()

    def init(self, timeout_ms: int = 60_000) -> tuple[int, int]:
        answer = self.answer(self.send(
            lambda rid: InitTxnProducer(rid, "app", timeout_ms, -1, -1)))
        assert answer is not None and answer[1] == 0, answer
        return answer[2], answer[3]


def test_an_init_whose_shard_stopped_is_answered_coordinator_not_available(
        manual_node: Node, tmp_path: Path) -> None:
    node = manual_node
    broker = Broker(node, tmp_path)
    producer_id, epoch = broker.init()
    assert (broker.state(), epoch) == ("Empty", 0)

    node.stop_actor(broker.topo.shard(0).name)  # its process died: the Append is lost
    lost = broker.send(lambda rid: InitTxnProducer(rid, "app", 60_000, -1, -1))
    wait_for(lambda: broker.stats()["writes_in_flight"] == 1, "the append sent")
    broker.advance(WAIT_MS - ANSWER_BUCKET_MS - 1)
    assert broker.stats()["writes_in_flight"] == 1, "given up on before its timeout"
    broker.advance(ANSWER_BUCKET_MS + 1)
    assert broker.answer(lost) == [lost, NOT_AVAILABLE, -1, -1]
    stats = broker.stats()
    assert (stats["writes_in_flight"], stats["writes_timed_out"]) == (0, 1)
    assert broker.state() == "Empty"  # not pending: the retry is not CONCURRENT_TRANSACTIONS

    broker.spawn_shard()  # restarted by its supervisor
    assert broker.init() == (producer_id, 1)


def test_a_completion_lost_in_a_shard_crash_is_written_again(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    armed = crash_on_state(monkeypatch)
    node = manual_node
    broker = Broker(node, tmp_path)
    producer_id, epoch = broker.init()
    add = broker.send(lambda rid: AddPartitionsToTxn(rid, "app", producer_id, epoch,
                                                     [TxnTopicPartition("t", 0)]))
    assert broker.answer(add) == [add, 0]
    armed["state"] = "CompleteCommit"
    end = broker.send(lambda rid: EndTxn(rid, "app", producer_id, epoch, True))
    assert broker.answer(end) == [end, 0]  # PrepareCommit written: the commit is decided
    wait_for(lambda: node.actors[broker.topo.shard(0).name].crashes == 1, "the crash")
    assert broker.state() == "PrepareCommit"
    broker.advance(WAIT_MS)  # the completion times out and is queued for a retry
    assert broker.stats()["completions_to_retry"] == 1
    broker.advance(RETRY_MS)
    wait_for(lambda: broker.state() == "CompleteCommit", "the completion written again")
    # the next transaction goes on as usual
    add = broker.send(lambda rid: AddPartitionsToTxn(rid, "app", producer_id, epoch,
                                                     [TxnTopicPartition("t", 0)]))
    assert broker.answer(add) == [add, 0]


def test_a_prepare_abort_lost_after_the_epoch_fence_is_written_on_the_next_tick(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction past its timeout is fenced (PrepareEpochFence) then aborted
    (PrepareAbort). The PrepareAbort's append dies in a crash: the id would stay in
    PrepareEpochFence for good (no tick, no request moves it on) without the retry."""
    armed = crash_on_state(monkeypatch)
    node = manual_node
    broker = Broker(node, tmp_path)
    producer_id, epoch = broker.init(timeout_ms=2000)
    add = broker.send(lambda rid: AddPartitionsToTxn(rid, "app", producer_id, epoch,
                                                     [TxnTopicPartition("t", 0)]))
    assert broker.answer(add) == [add, 0]
    armed["state"] = "PrepareAbort"
    broker.advance(3 * TICK_MS)  # past the timeout: fenced, and the abort's write is lost
    wait_for(lambda: node.actors[broker.topo.shard(0).name].crashes == 1, "the crash")
    assert broker.state() == "PrepareEpochFence"
    broker.advance(WAIT_MS)
    assert broker.stats()["writes_timed_out"] == 1
    for _ in range(3):
        broker.advance(TICK_MS)
    wait_for(lambda: broker.state() == "CompleteAbort", "the abort written again")
    # the fenced producer is refused; a new instance gets the next epoch
    old = broker.send(lambda rid: AddPartitionsToTxn(rid, "app", producer_id, epoch,
                                                     [TxnTopicPartition("t", 0)]))
    assert broker.answer(old) == [old, int(ErrorCode.PRODUCER_FENCED)]
    assert broker.init() == (producer_id, epoch + 2)


def test_a_load_whose_read_was_lost_reads_again(manual_node: Node, tmp_path: Path) -> None:
    """The shard is down when the coordinator starts loading: its Read is lost, and every
    request would get COORDINATOR_LOAD_IN_PROGRESS for good without a retry."""
    node = manual_node
    broker = Broker(node, tmp_path, shard_up=False)
    wait_for(lambda: broker.stats()["phase"] == "loading", "the load's reads sent")
    broker.spawn_shard()
    broker.advance(READ_TIMEOUT_MS - 1)
    assert broker.stats()["loaded_partitions"] == []
    broker.advance(1)
    broker.wait_loaded()
    producer_id, epoch = broker.init()
    assert epoch == 0
    assert broker.init() == (producer_id, 1)


def test_a_completion_written_late_is_taken_while_the_id_waits_for_it(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard far behind for good: every CompleteCommit append is answered only after
    the coordinator gave up on it. The late success is taken (the id still waits in
    PrepareCommit for it), else it would be written again, given up on again, every
    success ignored and the id stuck in PrepareCommit. (The core's tests cover a late
    success coming while the rewrite is in flight.)"""
    permits = threading.Semaphore(0)
    real = PartitionShard.on_append

    def slow(self: PartitionShard, msg: Append) -> None:
        for row in msg.rows:
            if row.topic == TRANSACTION_STATE_TOPIC:
                [(_o, _k, value)] = decode_batches(bytes(row.records))[0]
                assert value is not None
                if decode_value(value).status.kafka_name == "CompleteCommit":
                    assert permits.acquire(timeout=10), "the test never let it go"
        real(self, msg)

    slow.__actorlog_handles__ = (Append,)  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionShard, "on_append", slow)
    node = manual_node
    broker = Broker(node, tmp_path)
    producer_id, epoch = broker.init()
    add = broker.send(lambda rid: AddPartitionsToTxn(rid, "app", producer_id, epoch,
                                                     [TxnTopicPartition("t", 0)]))
    assert broker.answer(add) == [add, 0]
    end = broker.send(lambda rid: EndTxn(rid, "app", producer_id, epoch, True))
    assert broker.answer(end) == [end, 0]
    wait_for(lambda: broker.stats()["writes_in_flight"] == 1, "the completion sent")
    node.clock.advance(WAIT_MS)  # type: ignore[attr-defined]
    wait_for(lambda: broker.stats()["completions_to_retry"] == 1, "the completion given up")
    assert broker.state() == "PrepareCommit"
    permits.release()  # it lands, its answer late
    wait_for(lambda: broker.stats()["late_write_answers"] == 1, "the late answer")
    broker.advance(RETRY_MS)
    stats = broker.stats()
    assert (stats["transactions"], stats["completions_to_retry"],
            stats["writes_in_flight"]) == ({"app": "CompleteCommit"}, 0, 0)
    add = broker.send(lambda rid: AddPartitionsToTxn(rid, "app", producer_id, epoch,
                                                     [TxnTopicPartition("t", 0)]))
    assert broker.answer(add) == [add, 0]
    assert broker.state() == "Ongoing"
