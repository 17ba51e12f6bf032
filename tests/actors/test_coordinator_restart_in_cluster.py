"""A coordinator a crash restarts in place, in a cluster, asks the ReplicaManager again which
partitions of its topic this node leads (CoordinatorRestarted), and leads them on.

Before, its new life led nothing until the next change of leadership: every group (resp.
transactional id) of the node was answered NOT_COORDINATOR, a node's groups gone from
ListGroups, for as long as the leadership stayed. The real ReplicaManager, GroupCoordinator
and TransactionCoordinator on a manual clock; the shard is a stand-in that takes each role.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.core.transaction_log import TRANSACTION_STATE_TOPIC
from actors.group_coordinator import GroupCoordinator
from actors.replica_manager import ReplicaManager
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from actors.transaction_coordinator import TransactionCoordinator, txn_coordinator_name
from tests.actors.test_replica_manager_restore import AnsweringShard, Controller
from tests.fixtures.crash import crash_once
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.cluster_messages import (
    BrokerRegistered,
    LeaderAndIsr,
    LeaderAndIsrPartition,
    LiveLeaderRow,
    UpdateMetadata,
)
from wire.group_messages import ListGroups


def _led(node: Node, actor: Any) -> list[int]:
    return list(node.ask(actor, GetStats())["led_partitions"])


def test_a_restarted_coordinator_leads_again_what_this_node_leads(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    node = manual_node
    group_crash = crash_once(monkeypatch, GroupCoordinator, "on_list", ListGroups)
    txn_crash = crash_once(monkeypatch, TransactionCoordinator, "on_metadata", UpdateMetadata)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    config = Config({"offsets.topic.num.partitions": 3,
                     "transaction.state.log.num.partitions": 3})
    node.spawn(AnsweringShard, topo.shard(0).name)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=config, broker_id=1, clock=node.clock)
    groups = node.spawn(GroupCoordinator, topo.coordinator(0).name, topology=topo,
                        config=config, clock=node.clock, cluster=True)
    txns = node.spawn(TransactionCoordinator, txn_coordinator_name(0), topology=topo,
                      config=config, index=0, clock=node.clock, cluster=True)
    controller = node.spawn(Controller, topo.controller.name)
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    # this node leads partitions 0 and 2 of each topic, follows partition 1
    node.tell(manager, LeaderAndIsr(2, 4, 5, [
        LeaderAndIsrPartition(topic, p, 4, 1 if p != 1 else 2, 3, [1, 2], 4, [1, 2], False)
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC) for p in range(3)],
        [LiveLeaderRow(1, ""), LiveLeaderRow(2, "")],
        {OFFSETS_TOPIC: {}, TRANSACTION_STATE_TOPIC: {}}, 1), sender=controller.name)
    wait_for(lambda: _led(node, groups) == [0, 2] or None, "the groups' partitions led")
    wait_for(lambda: _led(node, txns) == [0, 2] or None, "the transactions' partitions led")

    group_crash["crash"] = True
    node.tell(groups, ListGroups(1, None))
    wait_for(lambda: node.actors[groups.name].crashes == 1, "the group coordinator's crash")
    wait_for(lambda: _led(node, groups) == [0, 2] or None, "the groups' partitions led again")

    txn_crash["crash"] = True
    node.tell(txns, UpdateMetadata(2, 4, 5, False, [], [], {}, 2), sender=controller.name)
    wait_for(lambda: node.actors[txns.name].crashes == 1, "the txn coordinator's crash")
    wait_for(lambda: _led(node, txns) == [0, 2] or None, "the transactions' partitions led again")
