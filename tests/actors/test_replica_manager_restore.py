"""A RestoreRoles the shard never answers: reported once overdue, kept (its late answer still
settles), replaced by the shard's next restart's. The real ReplicaManager on a manual clock;
the shard is a stand-in that keeps what it is sent and answers only when the test says."""

from __future__ import annotations

from typing import Any

from actors.replica_manager import RESTORE_OVERDUE_MS, ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.cluster_messages import RestoreRoles, RolesRestored, ShardRestarted


class SilentShard(Actor):
    """Keeps the RestoreRoles it gets and answers none."""

    def setup(self) -> None:
        self.restores: list[int] = []

    @handles(RestoreRoles)
    def on_restore(self, msg: RestoreRoles) -> None:
        self.restores.append(msg.req_id)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> list[int]:
        return list(self.restores)


def _manager(node: Node) -> tuple[Any, Any]:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    shard = node.spawn(SilentShard, topo.shard(0).name)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=Config(), broker_id=1, clock=node.clock)
    return manager, shard


def _stats(node: Node, actor: Any) -> Any:
    return node.ask(actor, GetStats())


def test_an_unanswered_restore_is_reported_once_overdue_and_settled_by_its_late_answer(
        manual_node: Node) -> None:
    node = manual_node
    manager, shard = _manager(node)
    node.tell(manager, ShardRestarted(0))
    [req_id] = wait_for(lambda: _stats(node, shard), "the RestoreRoles")
    node.advance_clock(RESTORE_OVERDUE_MS - 1)
    assert _stats(node, manager)["restores_overdue"] == 0
    node.advance_clock(1)
    stats = _stats(node, manager)
    assert (stats["restores_overdue"], stats["restoring"]) == (1, 1)
    node.advance_clock(RESTORE_OVERDUE_MS)
    assert _stats(node, manager)["restores_overdue"] == 1, "reported once"
    node.tell(manager, RolesRestored(req_id, []), sender=shard.name)
    wait_for(lambda: _stats(node, manager)["restoring"] == 0, "the late answer taken")


def test_the_shards_next_restart_replaces_its_unanswered_restore(manual_node: Node) -> None:
    """The record of a restore whose answer died with the shard goes when the shard
    restarts again; that answer, if it comes after all, is ignored."""
    node = manual_node
    manager, shard = _manager(node)
    node.tell(manager, ShardRestarted(0))
    wait_for(lambda: len(_stats(node, shard)) == 1, "the first RestoreRoles")
    node.tell(manager, ShardRestarted(0))
    [first, second] = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(
        _stats(node, shard)), "the second RestoreRoles")
    stats = _stats(node, manager)
    assert (stats["restoring"], stats["restores_replaced"]) == (1, 1)
    node.advance_clock(RESTORE_OVERDUE_MS)
    assert _stats(node, manager)["restores_overdue"] == 1, "only the second is overdue"
    node.tell(manager, RolesRestored(first, []), sender=shard.name)
    wait_for(lambda: _stats(node, manager)["restore_answers_ignored"] == 1,
             "the replaced restore's answer ignored")
    assert _stats(node, manager)["restoring"] == 1, "the replaced restore's answer was taken"
    node.tell(manager, RolesRestored(second, []), sender=shard.name)
    wait_for(lambda: _stats(node, manager)["restoring"] == 0, "the second's answer taken")
