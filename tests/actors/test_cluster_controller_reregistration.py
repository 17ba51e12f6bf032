"""A broker that registers again (a new broker epoch) while this node's ClusterController
knew its previous registration: what is held for it (``Directory.departed``) waits for it
only when it is the same process (the same incarnation: its session expired while it ran
on). A new process on the same gateway (restarted) is a new directory entry, and nothing
is held for it: its ids for matching answers started again. A real ClusterController in a
node, on a ZooKeeper model in memory; the test runs its brokers refresh on the actor's own
thread."""

from __future__ import annotations

from typing import Any

import pytest

from actors.core.cluster_model import BrokerInfo, Endpoint
from actors.metadata.memory import MemoryMetadataStore
from actors.runtime.directory import Directory
from actors.runtime.node import Node
from actors.topology import broker_node_name
from tests.actors.test_cluster_controller_restart import _controller, _on_actor

NAME = broker_node_name(2)


def _register(store: MemoryMetadataStore, incarnation: str) -> int:
    store.start()
    return store.register_broker(BrokerInfo(
        2, (Endpoint("PLAINTEXT", "localhost", 9093),), "tcp://127.0.0.1:2", None,
        incarnation=incarnation))


@pytest.mark.parametrize("incarnation, held", [("p1", True), ("p2", False)])
def test_a_broker_registered_again_is_held_for_only_as_the_same_process(
        node: Node, monkeypatch: pytest.MonkeyPatch, incarnation: str, held: bool) -> None:
    forgotten: list[tuple[str, bool]] = []
    real_forget = Directory.forget

    def forget(self: Directory, name: str, may_return: bool = False) -> bool:
        forgotten.append((name, may_return))
        return real_forget(self, name, may_return)

    monkeypatch.setattr(Directory, "forget", forget)
    address, _actor, _crash = _controller(node, monkeypatch)
    store: Any = _on_actor(node, address, lambda self: self.store)
    _on_actor(node, address, lambda self: self.store.start())
    other = MemoryMetadataStore(store.zk, lambda _notice: None)
    first_epoch = _register(other, "p1")
    _on_actor(node, address, lambda self: self._refresh_brokers())
    before = node.directory.nodes[NAME]
    assert before.incarnation == "p1" and forgotten == []
    # its session expires and it registers again before this node reads the deletion
    store.zk.expire(other.session_id)
    again = MemoryMetadataStore(store.zk, lambda _notice: None)
    assert _register(again, incarnation) != first_epoch
    _on_actor(node, address, lambda self: self._refresh_brokers())
    assert forgotten == [(NAME, held)]
    after = node.directory.nodes[NAME]
    # a new entry either way: links made for the old registration are made again
    assert after is not before and after.incarnation == incarnation
    assert (after == before) is held
    assert not node.directory.departed
