"""The active controller logs a node's storage report once per burst of refusals.

A ReplicaManager whose report (LogDirEventNotification) is refused tells it again every
3 s. The controller logged a WARNING at each; now at the 1st, 2nd, 4th, 8th... report of
that node since the last one it took, with the count. A real ClusterController, elected on
a ZooKeeper model in memory; a recorder stands in for the node's ReplicaManager and sends
the reports (stamped with a stale broker epoch: refused STALE_BROKER_EPOCH, then with the
node's registered one: taken).
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from actors.cluster_controller import ClusterController
from actors.core.cluster_model import BrokerInfo, Endpoint
from actors.metadata.memory import MemoryMetadataStore, MemoryZooKeeper
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire import cluster_messages as cm
from wire.broker_messages import GetStats
from wire.errors import ErrorCode

STALE = int(ErrorCode.STALE_BROKER_EPOCH)


class ReplicaManagerStandIn(Actor):
    """Keeps the controller's answers to its reports: (req id, error code)."""

    def setup(self) -> None:
        self.got: list[tuple[int, int]] = []

    @handles(cm.LogDirEventNotificationResponse)
    def on_answer(self, msg: cm.LogDirEventNotificationResponse) -> None:
        self.got.append((msg.req_id, msg.error_code))

    @handles(cm.BrokerRegistered)
    def on_registered(self, _msg: Any) -> None:
        pass

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> list[tuple[int, int]]:
        return list(self.got)


def test_a_nodes_refused_storage_reports_are_logged_at_the_first_second_fourth(
        node: Node) -> None:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    store = MemoryMetadataStore(MemoryZooKeeper(), lambda _notice: None)
    store.start()
    info = BrokerInfo(1, (Endpoint("PLAINTEXT", "localhost", 9092),), "tcp://127.0.0.1:1",
                      None)
    epoch = store.register_broker(info)
    manager = node.spawn(ReplicaManagerStandIn, "replica-manager")
    controller = node.spawn(ClusterController, topo.controller.name, topology=topo,
                            config=Config(), store=store, broker=info, clock=node.clock)
    node.tell(controller, cm.StartController(epoch))
    wait_for(lambda: node.ask(controller, GetStats())["active"], "the election")
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING",
                      filter=lambda r: "reports the storage" in r["message"])
    row = cm.OfflineReplicaRow("c", 0, False, 3)

    def report(req_id: int, broker_epoch: int) -> int:
        node.tell(controller, cm.LogDirEventNotification(req_id, 1, broker_epoch, [row]),
                  sender=manager.name)
        found = wait_for(lambda: [c for r, c in node.ask(manager, GetStats()) if r == req_id],
                         f"the answer to report {req_id}")
        assert found is not None
        return found[0]

    try:
        for req_id in range(1, 10):
            assert report(req_id, epoch + 1) == STALE
        assert len(lines) == 4, lines
        assert "in a row" not in lines[0]
        assert [ln.split("(report ")[-1].split(" ")[0] for ln in lines[1:]] == ["2", "4", "8"]
        assert report(10, epoch) != STALE  # taken (c-0 is unknown here: said per partition)
        assert len(lines) == 4  # the 10th in a row
        assert report(11, epoch + 1) == STALE
        assert len(lines) == 5 and "in a row" not in lines[4], "the count did not restart"
    finally:
        logger.remove(sink)
        store.close()
