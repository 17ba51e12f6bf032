"""The ReplicaManager tells its node's group coordinators of a cluster's topic deletions
(TopicDeletions), from UpdateMetadata: a start (partitions with LEADER_DURING_DELETE), a
completion the controller names (deleted_topics), and a completion a full UpdateMetadata
shows (a new controller's, no longer listing the topic or listing a namesake: the
controller that deleted the znodes may have died before naming them). The real
ReplicaManager on a ManualClock; recorders take the handlers', controller's and
coordinator's places."""

from __future__ import annotations

from typing import Any

from actors.core.cluster_model import LEADER_DURING_DELETE
from actors.replica_manager import ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.actors.test_replica_manager_sync import LIVE, Recorder
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats, TopicDeletions
from wire.cluster_messages import BrokerRegistered, UpdateMetadata, UpdateMetadataPartition

E = 4 << 32


class Coordinator(Actor):
    def setup(self) -> None:
        self.got: list[tuple[dict[str, str], dict[str, str]]] = []

    @handles(TopicDeletions)
    def on_deletions(self, msg: TopicDeletions) -> None:
        self.got.append((dict(msg.started), dict(msg.completed)))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _row(topic: str, leader: int = 1) -> UpdateMetadataPartition:
    return UpdateMetadataPartition(topic, 0, 4, leader, 1, [1], 1, [1], [])


def test_starts_and_completions_reach_the_coordinators(manual_node: Node) -> None:
    node = manual_node
    topo = Topology(node.name, 1, 2, 1, 1, 1)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=Config(), broker_id=1, clock=node.clock)
    controller = node.spawn(Recorder, topo.controller.name)
    for i in range(2):
        node.spawn(Recorder, topo.handler(i).name)
    coordinator = node.spawn(Coordinator, topo.coordinator(0).name)
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    sent = 0

    def update(full: bool, rows: list[UpdateMetadataPartition], ids: dict[str, str],
               deleted: dict[str, str] | None = None, notes: int = 0) -> list[Any]:
        """Sends an UpdateMetadata; what the coordinator got, once it has ``notes``."""
        nonlocal sent
        sent += 1
        node.tell(manager, UpdateMetadata(
            2, 4, 5, full, LIVE, rows, {r.topic: {} for r in rows}, E + sent, ids,
            deleted or {}), sender=controller.name)
        node.ask(manager, GetStats())  # the manager is past it
        got: list[Any] = wait_for(lambda: (lambda g: [g] if len(g) >= notes else None)(
            node.ask(coordinator, GetStats())), f"{notes} notes at the coordinator")[0]
        return [tuple(note) for note in got]  # (started, completed)

    assert update(True, [_row("t"), _row("u"), _row("kept")],
                  {"t": "T1", "u": "U1", "kept": "K1"}) == []
    got = update(False, [_row("t", LEADER_DURING_DELETE), _row("u", LEADER_DURING_DELETE)],
                 {"t": "T1", "u": "U1"}, notes=1)
    assert got == [({"t": "T1", "u": "U1"}, {})]
    # the controller names t's completion
    got = update(False, [], {}, deleted={"t": "T1"}, notes=2)
    assert got[-1] == ({}, {"t": "T1"})
    # a new controller's full metadata still lists u as being deleted: not complete
    got = update(True, [_row("u", LEADER_DURING_DELETE), _row("kept")],
                 {"u": "U1", "kept": "K1"}, notes=3)
    assert got[-1] == ({"u": "U1"}, {})
    # ... then lists a namesake of u (another id): u's deletion is complete
    got = update(True, [_row("u"), _row("kept")], {"u": "U2", "kept": "K1"}, notes=4)
    assert got[-1] == ({}, {"u": "U1"})
    # and once only: the next full metadata tells the coordinators nothing
    update(True, [_row("u"), _row("kept")], {"u": "U2", "kept": "K1"})
    # a deletion started, then a full metadata without the topic at all
    update(False, [_row("kept", LEADER_DURING_DELETE)], {"kept": "K1"}, notes=5)
    got = update(True, [_row("u")], {"u": "U2"}, notes=6)
    assert got[4:] == [({"kept": "K1"}, {}), ({}, {"kept": "K1"})]
