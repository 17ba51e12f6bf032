"""The controller actor's RetryReassignments tick: a reassignment step whose write failed
is tried again a whole interval (5 s) after the failure, not at once. A real
ClusterController, elected on a ZooKeeper model in memory with two registered brokers, on a
manual clock; the phase-A state write of a move fails."""

from __future__ import annotations

from typing import Any

import pytest

from actors.cluster_controller import REASSIGN_RETRY_MS, ClusterController
from actors.core.cluster_model import (
    BrokerInfo,
    Endpoint,
    TopicPartition,
    WriteCode,
    WriteResult,
)
from actors.core.controller_state import ControllerCore
from actors.metadata.memory import MemoryMetadataStore, MemoryZooKeeper
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire import admin_messages as am
from wire import broker_messages as bm
from wire import cluster_messages as cm
from wire.broker_messages import GetStats


def _info(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, (Endpoint("PLAINTEXT", "localhost", 9090 + broker_id),),
                      f"tcp://127.0.0.1:{broker_id}", None)


def test_a_failed_step_is_retried_an_interval_after_the_failure(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    node = manual_node
    retries: list[int] = []
    real_retry = ControllerCore._on_retry_reassignments

    def counted(self: ControllerCore) -> None:
        retries.append(1)
        real_retry(self)

    monkeypatch.setattr(ControllerCore, "_on_retry_reassignments", counted)
    zk = MemoryZooKeeper()
    store = MemoryMetadataStore(zk, lambda _notice: None)
    store.start()
    epoch = store.register_broker(_info(1))
    other = MemoryMetadataStore(zk, lambda _notice: None)
    other.start()
    other.register_broker(_info(2))
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    controller = node.spawn(ClusterController, topo.controller.name, topology=topo,
                            config=Config(), store=store, broker=_info(1), clock=node.clock)
    node.tell(controller, cm.StartController(epoch))
    wait_for(lambda: node.ask(controller, GetStats())["active"], "the election")

    node.tell(controller, bm.CreateTopics(1, False, [bm.CreateTopicRow("t", 1, 1, {})]))
    wait_for(lambda: "t" in other.get_topics() and other.get_partition_states(
        [TopicPartition("t", 0)]), "the topic's partition state")
    node.advance_clock(60_000)  # long after start: the tick's deadline moved on meanwhile,
    node.advance_clock(REASSIGN_RETRY_MS - 1000)  # and is due in a second
    real_write = store.update_partition_states

    failed: list[int] = []

    def failing(states: dict[Any, Any], fence: Any) -> Any:
        failed.append(1)
        return {tp: WriteResult(WriteCode.ERROR, -1, "injected") for tp in states}

    monkeypatch.setattr(store, "update_partition_states", failing)
    node.tell(controller, am.AlterReassignmentsAsk(2, [am.ReassignRow("t", 0, [1, 2])]))
    wait_for(lambda: failed, "the move's phase-A state write")
    # an ask goes after the turn that took the failure: its retry deadline is set at this
    # clock, not at one the next advance moved on while that turn still ran
    node.ask(controller, GetStats())
    assert other.get_topic_assignments(["t"])["t"].adding  # U1 written
    node.advance_clock(REASSIGN_RETRY_MS // 2)
    assert retries == [], "the failed step was tried again at once"
    monkeypatch.setattr(store, "update_partition_states", real_write)
    node.advance_clock(REASSIGN_RETRY_MS // 2)
    assert retries == [1]
