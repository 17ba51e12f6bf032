"""A RestoreRoles the shard never answers: reported once overdue, kept (its late answer still
settles), replaced by the shard's next restart's, kept over a crash restart of the
ReplicaManager. The real ReplicaManager on a manual clock; the shard is a stand-in that keeps
what it is sent and answers a restore only when the test says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.replica_manager import RESTORE_OVERDUE_MS, RESTORE_TRIES, ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.crash import crash_once
from tests.fixtures.two_processes import Keeper, two_processes
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.cluster_messages import (
    BecameLeaderOrFollower,
    BecomeLeaderOrFollower,
    BrokerRegistered,
    LeaderAndIsr,
    LeaderAndIsrPartition,
    LeaderAndIsrResponse,
    LiveLeaderRow,
    PartitionErrorRow,
    ProcessStarted,
    RestoreRoles,
    RolesRestored,
    ShardRestarted,
    UpdateMetadata,
    UpdateMetadataResponse,
)
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)


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


class AnsweringShard(Actor):
    """Answers each role it is given; keeps the RestoreRoles it gets (request id, rows) and
    answers none."""

    def setup(self) -> None:
        self.restores: list[tuple[int, list[Any]]] = []

    @handles(BecomeLeaderOrFollower)
    def on_become(self, msg: BecomeLeaderOrFollower) -> None:
        self.reply(BecameLeaderOrFollower(msg.req_id, [
            PartitionErrorRow(r.topic, r.partition, NONE) for r in msg.rows]))

    @handles(RestoreRoles)
    def on_restore(self, msg: RestoreRoles) -> None:
        self.restores.append((msg.req_id, list(msg.rows)))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> list[tuple[int, list[Any]]]:
        return list(self.restores)


class Controller(Actor):
    """Takes the ReplicaManager's answers."""

    @handles(LeaderAndIsrResponse, UpdateMetadataResponse)
    def on_answer(self, _msg: Any) -> None:
        pass


def test_a_restore_on_its_way_goes_on_over_a_crash_restart_of_the_replica_manager(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ReplicaManager sends the restarted shard c-0's role again, then crashes. The new
    life still waits for that restore: it reports it overdue, and takes its late answer:
    the shard could not take the role, so the ReplicaManager keeps none (not led here; the
    shard's next restore does not carry it). Before, the new life ignored the answer and
    kept leading c-0 on its books."""
    node = manual_node
    crash = crash_once(monkeypatch, ReplicaManager, "on_update_metadata", UpdateMetadata)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    shard = node.spawn(AnsweringShard, topo.shard(0).name)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=Config(), broker_id=1, clock=node.clock)
    controller = node.spawn(Controller, topo.controller.name)
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    node.tell(manager, LeaderAndIsr(2, 4, 5, [LeaderAndIsrPartition(
        "c", 0, 4, 1, 3, [1], 4, [1], False)], [LiveLeaderRow(1, "")], {"c": {}}, 1),
        sender=controller.name)
    wait_for(lambda: _stats(node, manager)["leading"] == ["c-0"], "c-0 led")
    node.tell(manager, ShardRestarted(0))
    [(req_id, rows)] = wait_for(lambda: _stats(node, shard), "the RestoreRoles")
    assert [tuple(r[0][:2]) for r in rows] == [("c", 0)]  # role: (topic, partition, ...)

    crash["crash"] = True
    node.tell(manager, UpdateMetadata(2, 4, 5, False, [], [], {}, 2), sender=controller.name)
    wait_for(lambda: node.actors[manager.name].crashes == 1, "the ReplicaManager's crash")
    assert _stats(node, manager)["restoring"] == 1
    node.advance_clock(RESTORE_OVERDUE_MS)
    assert _stats(node, manager)["restores_overdue"] == 1
    node.tell(manager, RolesRestored(req_id, [PartitionErrorRow(
        "c", 0, int(ErrorCode.KAFKA_STORAGE_ERROR))]), sender=shard.name)
    wait_for(lambda: _stats(node, manager)["restoring"] == 0, "the late answer taken")
    stats = _stats(node, manager)
    assert (stats["restore_answers_ignored"], stats["leading"]) == (0, [])
    node.tell(manager, ShardRestarted(0))
    restores = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(_stats(node, shard)),
                        "the next RestoreRoles")
    assert restores[1][1] == [], "the role the shard could not take restored again"


def test_the_other_processes_handlers_learn_a_restarted_processs_generation(
        tmp_path: Path) -> None:
    """Process 1 restarted as generation 2: the handlers of process 0 get ProcessStarted
    with that generation (they stamp their Appends to process 1 with it from then on), its
    shard gets its roles again; a first start tells the handlers nothing."""
    with two_processes(tmp_path) as (main, p1, manager):
        handler = main.spawn(Keeper, "handler-0")
        p1_handler = p1.spawn(Keeper, "handler-0")
        shard = p1.spawn(Keeper, "shard-1")
        main.ask(manager, ProcessStarted(1, False, 0))
        main.ask(manager, ProcessStarted(1, True, 2))
        [started] = wait_for(lambda: [m for name, m in main.ask(handler, GetStats())
                                      if name == "ProcessStarted"], "the handler's notice")
        assert ProcessStarted(*started) == ProcessStarted(1, True, 2)
        wait_for(lambda: [m for name, m in p1.ask(shard, GetStats()) if name == "RestoreRoles"],
                 "the restore")
        assert p1.ask(p1_handler, GetStats()) == []  # (the restarted process's own know it)


def test_a_restore_given_up_after_its_tries_sends_the_shard_an_empty_one(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The restore of a restarted shard crashes the ReplicaManager every time (here its
    fetchers' update): tried RESTORE_TRIES times, then given up. The shard is sent an
    empty RestoreRoles then: it waits for one (awaiting_restore, which its restarted
    process waits on before it serves), and would wait forever for one never sent."""
    node = manual_node
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    shard = node.spawn(AnsweringShard, topo.shard(0).name)

    def crash(self: Any, *_args: Any) -> None:
        raise RuntimeError("the fetchers' update fails")

    monkeypatch.setattr(ReplicaManager, "_fetchers", crash)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=Config(), broker_id=1, clock=node.clock)
    node.tell(manager, ShardRestarted(0))
    wait_for(lambda: node.actors[manager.name].crashes == RESTORE_TRIES or None,
             "the restore's crashes")
    wait_for(lambda: len(_stats(node, shard)) == RESTORE_TRIES + 1 or None,
             "the RestoreRoles given up")
    assert _stats(node, shard)[-1][1] == []
    assert _stats(node, manager)["restores_owed"] == 0
