"""Every answer the ReplicaManager gives the controller names the correlation id of the
request it answers: a refusal, a request held until the node's registration was known,
an UpdateMetadata, a StopReplica (the controller's channel takes no other). The real
ReplicaManager; the controller is a recorder, and no request here needs a shard."""

from __future__ import annotations

from typing import Any

from actors.replica_manager import ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.cluster_messages import (
    BrokerRegistered,
    LeaderAndIsr,
    LeaderAndIsrResponse,
    StopReplica,
    StopReplicaPartition,
    StopReplicaResponse,
    UpdateMetadata,
    UpdateMetadataResponse,
)
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)
STALE_BROKER = int(ErrorCode.STALE_BROKER_EPOCH)
STALE_CONTROLLER = int(ErrorCode.STALE_CONTROLLER_EPOCH)
E = 4 << 32  # ids of controller epoch 4, as its channel gives them


class Controller(Actor):
    """Keeps the answers it gets: (type name, error code, correlation id)."""

    def setup(self) -> None:
        self.got: list[tuple[str, int, int]] = []

    @handles(LeaderAndIsrResponse, UpdateMetadataResponse, StopReplicaResponse)
    def on_answer(self, msg: Any) -> None:
        self.got.append((type(msg).__name__, msg.error_code, msg.correlation_id))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> list[tuple[str, int, int]]:
        return list(self.got)


def test_each_answer_names_the_request_it_answers(node: Node) -> None:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=Config(), broker_id=1, clock=node.clock)
    controller = node.spawn(Controller, topo.controller.name)

    def send(request: Any) -> None:
        node.tell(manager, request, sender=controller.name)

    def answers(count: int) -> list[tuple[str, int, int]]:
        got = wait_for(lambda: (lambda g: g if len(g) >= count else None)(
            node.ask(controller, GetStats())), f"{count} answer(s)")
        return [(name, code, correlation_id) for name, code, correlation_id in got]

    # before the registration is known: held, then applied and answered in order
    send(UpdateMetadata(2, 4, 5, True, [], [], {}, E + 1))
    send(LeaderAndIsr(2, 4, 5, [], [], {}, E + 2))
    send(StopReplica(2, 4, 5, [StopReplicaPartition("t", 0, -1, False)], E + 3))
    assert node.ask(controller, GetStats()) == []
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    assert answers(3) == [("UpdateMetadataResponse", NONE, E + 1),
                          ("LeaderAndIsrResponse", NONE, E + 2),
                          ("StopReplicaResponse", NONE, E + 3)]
    # refused: meant for the broker's previous life, or from an older controller epoch
    send(UpdateMetadata(2, 4, 3, True, [], [], {}, E + 4))
    send(LeaderAndIsr(2, 4, 3, [], [], {}, E + 5))
    send(StopReplica(2, 4, 3, [StopReplicaPartition("t", 0, -1, True)], E + 6))
    send(LeaderAndIsr(2, 3, 5, [], [], {}, (3 << 32) + 9))
    assert answers(7)[3:] == [("UpdateMetadataResponse", STALE_BROKER, E + 4),
                              ("LeaderAndIsrResponse", STALE_BROKER, E + 5),
                              ("StopReplicaResponse", STALE_BROKER, E + 6),
                              ("LeaderAndIsrResponse", STALE_CONTROLLER, (3 << 32) + 9)]
    # applied once registered
    send(UpdateMetadata(2, 4, 5, False, [], [], {}, E + 7))
    send(StopReplica(2, 4, 5, [StopReplicaPartition("t", 1, -1, False)], E + 8))
    assert answers(9)[7:] == [("UpdateMetadataResponse", NONE, E + 7),
                              ("StopReplicaResponse", NONE, E + 8)]
