"""A crash in the middle of a ReplicaManager handler: supervision restarts it in place (the
message being handled is not handled again), so what the handler had not yet recorded is
lost unless it recorded its intent first or the new life derives it again. Each test crashes
the real ReplicaManager, on a manual clock, at the point of one handler where the work used
to be lost, and checks the new life finishes it. The shard and the controller are stand-ins
that keep what they are sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.replica_manager import ALTER_PARTITION_TIMEOUT_MS, RESTORE_TRIES, ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import AskFailed, Node
from actors.topology import Topology
from tests.fixtures.crash import FailingWrites, crash_once, fail_once
from tests.fixtures.two_processes import Keeper as ProcessKeeper
from tests.fixtures.two_processes import two_processes
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.cluster_messages import (
    AlterPartition,
    BecameLeaderOrFollower,
    BecomeLeaderOrFollower,
    BrokerRegistered,
    LeaderAndIsr,
    LeaderAndIsrPartition,
    LeaderAndIsrResponse,
    LiveLeaderRow,
    PartitionErrorRow,
    ProcessStarted,
    ReplicaStateRow,
    RestoreRoles,
    RolesRestored,
    ShardRestarted,
    UpdateMetadata,
)
from wire.errors import ErrorCode
from wire.replication_messages import IsrProposalRow, IsrUpdated, ProposeIsr

NONE = int(ErrorCode.NONE)


class Shard(Actor):
    """Answers each role it is given; keeps the ISR answers and restores it gets, as
    (type name, message)."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(BecomeLeaderOrFollower)
    def on_become(self, msg: BecomeLeaderOrFollower) -> None:
        self.reply(BecameLeaderOrFollower(msg.req_id, [
            PartitionErrorRow(r.topic, r.partition, NONE) for r in msg.rows]))

    @handles(IsrUpdated, RestoreRoles)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


class Controller(Actor):
    """Takes the ReplicaManager's answers; keeps the AlterPartitions it gets."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(LeaderAndIsrResponse)
    def on_answer(self, _msg: Any) -> None:
        pass

    @handles(AlterPartition)
    def on_alter(self, msg: AlterPartition) -> None:
        self.got.append(["AlterPartition", msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


class ProposalsFailManager(ReplicaManager):
    """The real ReplicaManager whose ``proposals`` can be made to fail its next write."""

    def setup(self) -> None:
        super().setup()
        if not isinstance(self.proposals, FailingWrites):
            self.proposals = FailingWrites(self.proposals)


class RestoringFailManager(ReplicaManager):
    """The real ReplicaManager whose ``restoring`` can be made to fail its next write: the
    point where a restore is recorded as sent, just before its RestoreRoles goes."""

    def setup(self) -> None:
        super().setup()
        if not isinstance(self.restoring, FailingWrites):
            self.restoring = FailingWrites(self.restoring)


class RedoFailsOnceManager(ReplicaManager):
    """The real ReplicaManager whose second restore (the first redo of one a crash
    interrupted) crashes before it begins: a crash between the decision to redo and the
    redo itself, as its log line could."""

    def _restore(self, selected: Any, reason: str) -> int:
        self.restore_calls = getattr(self, "restore_calls", 0) + 1
        if self.restore_calls == 2:
            raise RuntimeError("a crash before the redone restore begins")
        return super()._restore(selected, reason)


def _got(node: Node, who: Any, kind: type) -> list[Any]:
    return [kind(*fields) for name, fields in node.ask(who, GetStats()) if name == kind.__name__]


def _stats(node: Node, manager: Any) -> Any:
    return node.ask(manager, GetStats())


def _leading_c0(node: Node, manager_cls: type) -> tuple[Any, Any, Any]:
    """The ReplicaManager (of ``manager_cls``) of broker 1, registered, leading c-0 (leader
    epoch 3, partition epoch 4, ISR [1, 2]), with controller 1 (this node's)."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    shard = node.spawn(Shard, topo.shard(0).name)
    controller = node.spawn(Controller, topo.controller.name)
    manager = node.spawn(manager_cls, topo.replica_manager.name, topology=topo,
                         config=Config(), broker_id=1, clock=node.clock)
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    node.tell(manager, LeaderAndIsr(1, 4, 5, [LeaderAndIsrPartition(
        "c", 0, 4, 1, 3, [1, 2], 4, [1, 2], False)], [LiveLeaderRow(1, "")], {"c": {}}, 1),
        sender=controller.name)
    wait_for(lambda: _stats(node, manager)["leading"] == ["c-0"], "c-0 led")
    return manager, shard, controller


def test_an_isr_proposal_is_answered_after_a_crash_before_its_alter_partition_went(
        manual_node: Node) -> None:
    """The leader shard proposes ISR [1]; the ReplicaManager crashes as it notes the
    proposal, before any AlterPartition went. The shard proposes again only on an answer,
    so the new life owes it one: at the AlterPartition deadline it is answered
    REQUEST_TIMED_OUT (its fate unknown: proposed again), and the proposal sent again
    reaches the controller. Before, the handler recorded its pending entry only after the
    proposal: the crash lost it, no answer ever came, and that leader's ISR never changed
    again until its next role."""
    node = manual_node
    manager, shard, controller = _leading_c0(node, ProposalsFailManager)
    node.actors[manager.name].proposals.armed = True  # type: ignore[attr-defined]
    proposal = IsrProposalRow("c", 0, 3, [1], 4)
    node.tell(manager, ProposeIsr([proposal]), sender=shard.name)
    wait_for(lambda: node.actors[manager.name].crashes == 1, "the ReplicaManager's crash")
    assert _stats(node, manager)["isr_pending"] == 1, "the proposal's entry died in the crash"
    assert _got(node, controller, AlterPartition) == []
    node.advance_clock(ALTER_PARTITION_TIMEOUT_MS - 1)
    assert _got(node, shard, IsrUpdated) == []
    node.advance_clock(1)
    [answer] = wait_for(lambda: _got(node, shard, IsrUpdated), "the shard's answer")
    [row] = answer.rows
    assert (row[0], row[1], row[2], row[3], row[4]) == (
        "c", 0, 3, 4, int(ErrorCode.REQUEST_TIMED_OUT))
    assert _stats(node, manager)["isr_pending"] == 0

    node.tell(manager, ProposeIsr([proposal]), sender=shard.name)  # as the shard does
    [alter] = wait_for(lambda: _got(node, controller, AlterPartition), "the AlterPartition")
    assert [(p[0], p[1], p[2], list(p[3]), p[4]) for p in alter.partitions] == [
        ("c", 0, 3, [1], 4)]
    assert _stats(node, manager)["isr_pending"] == 1


def test_a_proposal_with_no_controller_known_is_answered_at_once_and_leaves_no_entry(
        manual_node: Node) -> None:
    """Not registered yet: NOT_CONTROLLER at once, as before; the entry recorded first for
    a crash's sake goes with the answer (no second answer at its deadline)."""
    node = manual_node
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    shard = node.spawn(Shard, topo.shard(0).name)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=Config(), broker_id=1, clock=node.clock)
    node.tell(manager, ProposeIsr([IsrProposalRow("c", 0, 3, [1], 4)]), sender=shard.name)
    [answer] = wait_for(lambda: _got(node, shard, IsrUpdated), "the shard's answer")
    assert answer.rows[0][4] == int(ErrorCode.NOT_CONTROLLER)
    assert _stats(node, manager)["isr_pending"] == 0
    node.advance_clock(ALTER_PARTITION_TIMEOUT_MS)
    assert len(_got(node, shard, IsrUpdated)) == 1



def test_a_restore_interrupted_by_a_crash_is_done_again_by_the_new_life(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shard 0 restarted; the ReplicaManager crashes as it builds the shard's restore,
    before any RestoreRoles went. The shard was recorded as owed its restore first, so the
    new life sends it (c-0 led here again), and its answer settles it. Before, the crash
    lost the restore: the shard never got its roles back, c-0 dark on it until the
    controller's next LeaderAndIsr."""
    node = manual_node
    manager, shard, _controller = _leading_c0(node, RestoringFailManager)
    node.actors[manager.name].restoring.armed = True  # type: ignore[attr-defined]
    node.tell(manager, ShardRestarted(0))
    wait_for(lambda: node.actors[manager.name].crashes == 1, "the ReplicaManager's crash")
    [restore] = wait_for(lambda: _got(node, shard, RestoreRoles), "the restore done again")
    roles = [ReplicaStateRow(*r[0]) for r in restore.rows]
    assert [(r.topic, r.partition, r.leader, r.leader_epoch) for r in roles] == [("c", 0, 1, 3)]
    stats = _stats(node, manager)
    assert (stats["restores_owed"], stats["restores_redone"], stats["restoring"]) == (0, 1, 1)
    node.tell(manager, RolesRestored(restore.req_id, [PartitionErrorRow("c", 0, NONE)]),
              sender=shard.name)
    wait_for(lambda: _stats(node, manager)["restoring"] == 0, "the restore's answer taken")
    assert _stats(node, manager)["leading"] == ["c-0"]


def test_a_restore_sent_before_the_crash_is_replaced_by_the_one_done_again(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The crash comes after the RestoreRoles went, as the fetchers are told: the restore
    is done again whole (its fetcher part too); the shard gets it twice, the first's answer
    is ignored and the second's settles."""
    node = manual_node
    crash = fail_once(monkeypatch, ReplicaManager, "_fetchers")
    manager, shard, _controller = _leading_c0(node, ReplicaManager)
    crash["crash"] = True
    node.tell(manager, ShardRestarted(0))
    wait_for(lambda: node.actors[manager.name].crashes == 1, "the ReplicaManager's crash")
    first, second = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(
        _got(node, shard, RestoreRoles)), "both restores")
    stats = _stats(node, manager)
    assert (stats["restores_owed"], stats["restores_replaced"], stats["restoring"]) == (0, 1, 1)
    node.tell(manager, RolesRestored(first.req_id, [PartitionErrorRow("c", 0, NONE)]),
              sender=shard.name)
    node.tell(manager, RolesRestored(second.req_id, [PartitionErrorRow("c", 0, NONE)]),
              sender=shard.name)
    wait_for(lambda: _stats(node, manager)["restoring"] == 0, "the second's answer taken")
    assert _stats(node, manager)["restore_answers_ignored"] == 1


def test_a_redone_restore_is_counted_when_tried_not_before(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The restore crashes as it tells the fetchers (owed, done again); the first redo
    crashes before it begins (nothing tried); the second redo is done. One restore was
    redone: ``restores_redone`` says 1. Before, it was counted as the redo was decided,
    before it was tried, and said 2."""
    node = manual_node
    crash = fail_once(monkeypatch, ReplicaManager, "_fetchers")
    manager, shard, _controller = _leading_c0(node, RedoFailsOnceManager)
    crash["crash"] = True
    node.tell(manager, ShardRestarted(0))
    wait_for(lambda: node.actors[manager.name].crashes == 2, "both crashes")
    wait_for(lambda: len(_got(node, shard, RestoreRoles)) == 2, "the restore done again")
    wait_for(lambda: _stats(node, manager)["restores_owed"] == 0, "the redo done")
    node.quiesce()
    stats = _stats(node, manager)
    assert (stats["restores_redone"], stats["restoring"]) == (1, 1)
    assert node.actors[manager.name].crashes == 2


def test_a_restore_that_crashes_every_time_is_given_up_and_the_actor_lives(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore the ReplicaManager cannot finish is tried RESTORE_TRIES times, then given
    up (logged): the actor is not crashed again and again until supervision stops it."""
    node = manual_node
    manager, _shard, _controller = _leading_c0(node, ReplicaManager)

    def broken(self: Any, *_args: Any) -> Any:
        raise RuntimeError("a restore that fails every time")

    monkeypatch.setattr(ReplicaManager, "_fetchers", broken)
    node.tell(manager, ShardRestarted(0))
    wait_for(lambda: node.actors[manager.name].crashes == RESTORE_TRIES, "every try")
    # the give-up comes on the turn after the last crash: waited for, not read once
    wait_for(lambda: _stats(node, manager)["restores_owed"] == 0, "the give-up")
    node.quiesce()
    assert node.actors[manager.name].crashes == RESTORE_TRIES
    assert _stats(node, manager)["restores_redone"] == RESTORE_TRIES - 1


def test_a_partition_whose_role_cannot_be_rebuilt_is_left_out_not_the_shard(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """One partition's role that cannot be rebuilt for a restore is left out and counted;
    the shard still gets its RestoreRoles (its other partitions serve again) and the
    actor does not crash."""
    node = manual_node
    manager, shard, _controller = _leading_c0(node, ReplicaManager)

    def broken(self: Any, *_args: Any) -> Any:
        raise RuntimeError("a role that cannot be rebuilt")

    monkeypatch.setattr(ReplicaManager, "_restored", broken)
    node.tell(manager, ShardRestarted(0))
    [restore] = wait_for(lambda: _got(node, shard, RestoreRoles) or None, "the restore")
    assert restore.rows == []
    stats = _stats(node, manager)
    assert (stats["restore_rows_failed"], stats["restores_owed"]) == (1, 0)
    assert node.actors[manager.name].crashes == 0


def test_the_counters_go_on_over_a_crash_restart(
        manual_node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the stats counted before a crash is still counted after it (a role applied,
    two shard restarts, a restore replaced, an answer ignored): the new life's stats are
    those of the old. Before, every counter started again from zero."""
    node = manual_node
    crash = crash_once(monkeypatch, ReplicaManager, "on_update_metadata", UpdateMetadata)
    manager, shard, controller = _leading_c0(node, ReplicaManager)
    node.tell(manager, ShardRestarted(0))
    node.tell(manager, ShardRestarted(0))
    first, _second = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(
        _got(node, shard, RestoreRoles)), "both restores")
    node.tell(manager, RolesRestored(first.req_id, []), sender=shard.name)
    wait_for(lambda: _stats(node, manager)["restore_answers_ignored"] == 1, "the answer")
    before = _stats(node, manager)
    assert (before["applied"]["lai"], before["shards_restarted"],
            before["restores_replaced"]) == (1, 2, 1)
    crash["crash"] = True
    node.tell(manager, UpdateMetadata(1, 4, 5, False, [], [], {}, 2), sender=controller.name)
    wait_for(lambda: node.actors[manager.name].crashes == 1, "the ReplicaManager's crash")
    assert _stats(node, manager) == before


class Keeper(ProcessKeeper):
    """The fixture's keeper that also answers each role it is given."""

    @handles(BecomeLeaderOrFollower)
    def on_become(self, msg: BecomeLeaderOrFollower) -> None:
        self.reply(BecameLeaderOrFollower(msg.req_id, [
            PartitionErrorRow(r.topic, r.partition, NONE) for r in msg.rows]))


def test_a_restarted_process_is_restored_and_announced_after_a_crash_in_its_restore(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Process 1 restarted; the ReplicaManager crashes building its shard's restore (the
    process's ask is answered with the failure). The handlers of process 0 still learn the
    new generation (told before the restore), and the shard gets its restore from the new
    life. Before, both died with the crash."""
    with two_processes(tmp_path, RestoringFailManager) as (main, p1, manager):
        handler = main.spawn(Keeper, "handler-0")
        shard = p1.spawn(Keeper, "shard-1")
        main.tell(manager, LeaderAndIsr(1, 4, 5, [LeaderAndIsrPartition(
            "c", 0, 4, 1, 3, [1], 4, [1], False)], [LiveLeaderRow(1, "")], {"c": {}}, 1))
        main.tell(manager, BrokerRegistered(1, 5))
        wait_for(lambda: main.ask(manager, GetStats())["leading"] == ["c-0"], "c-0 led")
        main.actors[manager.name].restoring.armed = True  # type: ignore[attr-defined]
        with pytest.raises(AskFailed):
            main.ask(manager, ProcessStarted(1, True, 2))
        assert main.actors[manager.name].crashes == 1
        [started] = wait_for(lambda: [m for name, m in main.ask(handler, GetStats())
                                      if name == "ProcessStarted"], "the handler's notice")
        assert ProcessStarted(*started) == ProcessStarted(1, True, 2)
        [restore] = wait_for(lambda: [RestoreRoles(*m) for name, m in p1.ask(shard, GetStats())
                                      if name == "RestoreRoles"], "the restore")
        assert [ReplicaStateRow(*r[0])[:2] for r in restore.rows] == [("c", 0)]
        assert main.ask(manager, GetStats())["restores_owed"] == 0


def test_a_restarted_process_is_restored_after_a_crash_before_its_restore_began(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Process 1 restarted; the ReplicaManager crashes before the restore began (here as
    it lists the process's handlers for the metadata). Its shards were recorded as owed
    their restore first, so the new life sends it. Before, the restore was recorded only
    inside it: the crash lost it, and the process's partitions stayed dark."""
    crash = fail_once(monkeypatch, Topology, "all_handlers")
    with two_processes(tmp_path) as (main, p1, manager):
        shard = p1.spawn(Keeper, "shard-1")
        main.tell(manager, LeaderAndIsr(1, 4, 5, [LeaderAndIsrPartition(
            "c", 0, 4, 1, 3, [1], 4, [1], False)], [LiveLeaderRow(1, "")], {"c": {}}, 1))
        main.tell(manager, BrokerRegistered(1, 5))
        wait_for(lambda: main.ask(manager, GetStats())["leading"] == ["c-0"], "c-0 led")
        crash["crash"] = True
        with pytest.raises(AskFailed):
            main.ask(manager, ProcessStarted(1, True, 2))
        assert main.actors[manager.name].crashes == 1
        [restore] = wait_for(lambda: [RestoreRoles(*m) for name, m in p1.ask(shard, GetStats())
                                      if name == "RestoreRoles"], "the restore")
        assert [ReplicaStateRow(*r[0])[:2] for r in restore.rows] == [("c", 0)]
        wait_for(lambda: main.ask(manager, GetStats())["restores_owed"] == 0, "nothing owed")
