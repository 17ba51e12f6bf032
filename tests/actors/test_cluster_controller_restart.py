"""The ClusterController actor restarted in place after a crash keeps its channel's
correlation ids: an answer to a request of its previous life may still come, and the new
channel must not give that request's id to another. A real actor in a node, on a
ZooKeeper model in memory; it is not started (no election), the test gives its channel a
request the way the driver would."""

from __future__ import annotations

from typing import Any

import pytest

from actors.cluster_controller import ClusterController
from actors.core.cluster_model import BrokerInfo, Endpoint
from actors.metadata.memory import MemoryMetadataStore, MemoryZooKeeper
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire import cluster_messages as cm
from wire.broker_messages import GetStats

NEVER_DUE_MS = 1 << 60  # sent "then": no resend comes while the test looks


def test_a_crash_restart_keeps_the_channels_ids(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    crash = {"on": False}
    real = ClusterController.on_session

    def on_session(self: ClusterController, msg: cm.SessionStateChanged) -> None:
        if crash["on"]:
            crash["on"] = False
            raise RuntimeError("a SessionStateChanged handler that fails once")
        real(self, msg)

    on_session.__actorlog_handles__ = (cm.SessionStateChanged,)  # type: ignore[attr-defined]
    monkeypatch.setattr(ClusterController, "on_session", on_session)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    store = MemoryMetadataStore(MemoryZooKeeper(), lambda _notice: None)
    info = BrokerInfo(1, (Endpoint("PLAINTEXT", "localhost", 9092),), "tcp://127.0.0.1:1",
                      None)
    address = node.spawn(ClusterController, topo.controller.name, topology=topo,
                         config=Config(), store=store, broker=info, clock=node.clock)
    actor: Any = node.actors[address.name]
    first = actor.channel
    um = cm.UpdateMetadata(1, 3, 5, False, [], [], {})
    [(_, sent)] = first.enqueue(2, um, NEVER_DUE_MS)
    first.enqueue(2, um, NEVER_DUE_MS)  # waits: no id yet
    assert sent.correlation_id == (3 << 32) + 1

    crash["on"] = True
    node.tell(address, cm.SessionStateChanged(cm.SESSION_CONNECTED, 1))
    wait_for(lambda: actor.crashes == 1, "the controller actor's crash")
    # answered after the restart: the new life's setup is done
    assert node.ask(address, GetStats())["pending_to_nodes"] == 0
    assert actor.channel is not first and actor.channel.pending() == 0
    assert actor.channel.last_ids == {2: (3 << 32) + 1}
    [(_, again)] = actor.channel.enqueue(2, um, NEVER_DUE_MS)
    assert again.correlation_id == (3 << 32) + 2, "the new life gave its predecessor's id"
    assert actor.channel.acknowledge(2, cm.UpdateMetadata, sent.correlation_id,
                                     NEVER_DUE_MS) == (None, [])
