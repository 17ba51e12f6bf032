"""A resend of a controller request whose shards have not answered: swallowed while they are
less than SHARDS_OVERDUE_MS late (the original's answer will name its id), sent to them
again past it (its message may be lost: a full or failed link to their process), and
answered once whichever of their answers comes first. The real ReplicaManager on a manual
clock, and the controller a recorder. Where a message to the shard is lost, the shard is
a stand-in that keeps what it is sent and never answers (the test answers as it); where
it is only late, the real shard, held by an event."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
from actors.core.partition_state import PartitionState
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.purgatory import PurgatoryShard
from actors.replica_manager import SHARDS_OVERDUE_MS, ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import DropPartitions, GetStats, ShardDone
from wire.cluster_messages import (
    BecameLeaderOrFollower,
    BecomeLeaderOrFollower,
    BrokerRegistered,
    LeaderAndIsr,
    LeaderAndIsrPartition,
    LeaderAndIsrResponse,
    LiveLeaderRow,
    PartitionErrorRow,
    RestoreRoles,
    RolesRestored,
    ShardRestarted,
    StopReplica,
    StopReplicaPartition,
    StopReplicaResponse,
    UpdateMetadata,
    UpdateMetadataPartition,
)
from wire.errors import ErrorCode
from wire.replication_messages import IsrProposalRow, ProposeIsr

NONE = int(ErrorCode.NONE)
E = 4 << 32  # ids of controller epoch 4, as its channel gives them


class QuietShard(Actor):
    """Keeps the requests it gets, (type name, shard request id, rows), and answers none."""

    def setup(self) -> None:
        self.got: list[tuple[str, int, list[Any]]] = []

    @handles(BecomeLeaderOrFollower, DropPartitions, RestoreRoles)
    def on_request(self, msg: Any) -> None:
        self.got.append((type(msg).__name__, msg.req_id, list(msg.rows)))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> list[tuple[str, int, list[Any]]]:
        return list(self.got)


class Controller(Actor):
    """Keeps the answers it gets: (type name, error code, correlation id)."""

    def setup(self) -> None:
        self.got: list[tuple[str, int, int]] = []

    @handles(LeaderAndIsrResponse, StopReplicaResponse)
    def on_answer(self, msg: Any) -> None:
        self.got.append((type(msg).__name__, msg.error_code, msg.correlation_id))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> list[tuple[str, int, int]]:
        return list(self.got)


def _lai(correlation_id: int, *led: tuple[str, int]) -> LeaderAndIsr:
    """Each (topic, leader epoch) of ``led`` (c-0 at 5 by default): partition 0 led by this
    broker (1), from controller 2 of epoch 4."""
    led = led or (("c", 5),)
    return LeaderAndIsr(2, 4, 5, [LeaderAndIsrPartition(
        topic, 0, 4, 1, epoch, [1, 2], epoch + 1, [1, 2], False) for topic, epoch in led],
        [LiveLeaderRow(1, ""), LiveLeaderRow(2, "")], {topic: {} for topic, _ in led},
        correlation_id)


def _broker(node: Node) -> tuple[Any, Any, Any, Any, Any, Any]:
    """The shard, the ReplicaManager (registered), the controller; send(request),
    stats(actor) and answers()."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    shard = node.spawn(QuietShard, topo.shard(0).name)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=Config(), broker_id=1, clock=node.clock)
    controller = node.spawn(Controller, topo.controller.name)

    def send(request: Any) -> None:
        node.tell(manager, request, sender=controller.name)

    def stats(actor: Any) -> Any:
        return node.ask(actor, GetStats())

    def answers() -> list[tuple[Any, ...]]:
        return [tuple(a) for a in stats(controller)]

    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    return shard, manager, controller, send, stats, answers

def _first_applied(node: Node, shard: Any, manager: Any, send: Any, stats: Any,
                   answers: Any) -> None:
    """LeaderAndIsr 1 (c-0 led at leader epoch 5) sent, applied by the shard, answered."""
    send(_lai(E + 1))
    [(_, first, _)] = wait_for(lambda: stats(shard), "LeaderAndIsr 1 to the shard")
    node.tell(manager, BecameLeaderOrFollower(first, [PartitionErrorRow("c", 0, NONE)]),
              sender=shard.name)
    wait_for(lambda: answers(), "LeaderAndIsr 1 answered")



def test_a_resend_of_a_request_its_shard_never_answered_is_sent_to_it_again(
        manual_node: Node) -> None:
    node = manual_node
    shard, manager, controller, send, stats, answers = _broker(node)
    send(_lai(E + 1))
    [(kind, req_id, rows)] = wait_for(lambda: stats(shard), "BecomeLeaderOrFollower")
    assert kind == "BecomeLeaderOrFollower"
    assert [(r[0], r[1], r[3]) for r in rows] == [("c", 0, 5)]  # c-0 at leader epoch 5
    # lost on its way, say: the controller's channel sends the request again, and again
    node.advance_clock(SHARDS_OVERDUE_MS - 1)
    send(_lai(E + 1))
    wait_for(lambda: stats(manager)["resends_in_progress"] == 1, "the resend swallowed")
    assert len(stats(shard)) == 1 and stats(controller) == []
    node.advance_clock(1)
    send(_lai(E + 1))
    wait_for(lambda: stats(manager)["resends_reapplied"] == 1, "the overdue resend")
    got = wait_for(lambda: (lambda g: g if len(g) == 2 else None)(stats(shard)),
                   "BecomeLeaderOrFollower again")
    assert got[1][:2] == got[0][:2], "not the same shard request"
    assert [(r[0], r[1], r[3]) for r in got[1][2]] == [("c", 0, 5)]
    assert stats(controller) == [], "answered before the shard applied it"
    send(_lai(E + 1))  # just sent again: swallowed until overdue once more
    wait_for(lambda: stats(manager)["resends_in_progress"] == 2, "the next resend swallowed")
    assert len(stats(shard)) == 2
    # the shard answers both (the first was slow, not lost): one answer, with the id
    for _ in range(2):
        node.tell(manager, BecameLeaderOrFollower(req_id, [PartitionErrorRow("c", 0, NONE)]),
                  sender=shard.name)
    wait_for(lambda: stats(controller), "the answer")
    wait_for(lambda: stats(manager)["pending"] == 0, "settled")
    assert answers() == [("LeaderAndIsrResponse", NONE, E + 1)]
    assert stats(manager)["leading"] == ["c-0"]

    # a delete, the same way
    send(StopReplica(2, 4, 5, [StopReplicaPartition("c", 0, 5, True)], E + 2))
    got = wait_for(lambda: (lambda g: g if len(g) == 3 else None)(stats(shard)),
                   "DropPartitions")
    kind, drop_id, rows = got[2]
    assert kind == "DropPartitions" and [tuple(r) for r in rows] == [("c", 0)]
    node.advance_clock(SHARDS_OVERDUE_MS)
    send(StopReplica(2, 4, 5, [StopReplicaPartition("c", 0, 5, True)], E + 2))
    wait_for(lambda: stats(manager)["resends_reapplied"] == 2, "the overdue delete")
    got = wait_for(lambda: (lambda g: g if len(g) == 4 else None)(stats(shard)),
                   "DropPartitions again")
    assert got[3] == got[2], "not the same delete"
    node.tell(manager, ShardDone(drop_id, "", []), sender=shard.name)
    wait_for(lambda: len(stats(controller)) == 2, "the delete's answer")
    assert answers()[1] == ("StopReplicaResponse", NONE, E + 2)


def test_an_overdue_resend_does_not_give_a_role_older_than_one_given_since(
        manual_node: Node) -> None:
    """LeaderAndIsr 2 (c-0 at leader epoch 6, d-0 and e-0 at 1) waits for the shard; the
    metadata then moves c-0 to broker 2 at leader epoch 7 (the shard is told), and the
    shard proposes an ISR change for e-0 (it holds e-0's role: only its answer is
    missing). The overdue resend sends the shard d-0's role again, not c-0's epoch 6,
    which would undo epoch 7, nor e-0's, which would forget the proposal."""
    node = manual_node
    shard, manager, _controller, send, stats, answers = _broker(node)
    _first_applied(node, shard, manager, send, stats, answers)
    send(_lai(E + 2, ("c", 6), ("d", 1), ("e", 1)))
    wait_for(lambda: len(stats(shard)) == 2, "LeaderAndIsr 2 to the shard")
    node.tell(manager, ProposeIsr([IsrProposalRow("e", 0, 1, [1], 2)]), sender=shard.name)
    send(UpdateMetadata(2, 4, 5, False, [], [
        UpdateMetadataPartition("c", 0, 4, 2, 7, [2, 1], 8, [1, 2], [])], {"c": {}}, E + 3))
    moved = wait_for(lambda: (lambda g: g if len(g) == 3 else None)(stats(shard)),
                     "c-0's move to the shard")[2]
    assert [(r[0], r[3]) for r in moved[2]] == [("c", 7)]
    node.advance_clock(SHARDS_OVERDUE_MS)
    send(_lai(E + 2, ("c", 6), ("d", 1), ("e", 1)))
    wait_for(lambda: stats(manager)["resends_reapplied"] == 1, "the overdue resend")
    got = wait_for(lambda: (lambda g: g if len(g) == 4 else None)(stats(shard)),
                   "LeaderAndIsr 2 again")
    assert got[3][1] == got[1][1]
    assert [(r[0], r[3]) for r in got[3][2]] == [("d", 1)], "a role held was sent again"


def test_an_overdue_resend_gives_a_role_again_despite_a_proposal_of_an_older_epoch(
        manual_node: Node) -> None:
    """LeaderAndIsr 1 gave c-0 at leader epoch 5 (applied); LeaderAndIsr 2 gives it at 6,
    and its message to the shard is lost. The shard's ISR proposal at epoch 5, sent before
    it could know of 6, comes after: it says nothing of epoch 6. The overdue resend sends
    c-0's epoch 6 again (skipped, the request was settled with the shard still at 5)."""
    node = manual_node
    shard, manager, _controller, send, stats, answers = _broker(node)
    _first_applied(node, shard, manager, send, stats, answers)
    send(_lai(E + 2, ("c", 6)))
    wait_for(lambda: len(stats(shard)) == 2, "LeaderAndIsr 2 to the shard")
    node.tell(manager, ProposeIsr([IsrProposalRow("c", 0, 5, [1], 6)]), sender=shard.name)
    wait_for(lambda: stats(manager)["proposals"], "the proposal at epoch 5 kept")
    node.advance_clock(SHARDS_OVERDUE_MS)
    send(_lai(E + 2, ("c", 6)))
    wait_for(lambda: stats(manager)["resends_reapplied"] == 1, "the overdue resend")
    got = wait_for(lambda: (lambda g: g if len(g) == 3 else None)(stats(shard)),
                   "LeaderAndIsr 2 again")
    assert got[2][1] == got[1][1]
    assert [(r[0], r[3]) for r in got[2][2]] == [("c", 6)]
    assert answers() == [("LeaderAndIsrResponse", NONE, E + 1)], \
        "LeaderAndIsr 2 answered before the shard applied it"


def test_a_delete_sent_again_after_the_shards_restore_is_not_overdue_at_once(
        manual_node: Node) -> None:
    """A StopReplica(delete)'s DropPartitions died with the shard, which restarted long after
    it was sent: the restore's answer sends the delete again, now. A resend of the
    StopReplica right after waits for that answer (it was sent again at the original's
    time, as overdue, and the shard got the delete a third time)."""
    node = manual_node
    shard, manager, _controller, send, stats, answers = _broker(node)
    _first_applied(node, shard, manager, send, stats, answers)
    stop = StopReplica(2, 4, 5, [StopReplicaPartition("c", 0, 5, True)], E + 2)
    send(stop)
    wait_for(lambda: len(stats(shard)) == 2, "DropPartitions")
    node.advance_clock(SHARDS_OVERDUE_MS)
    node.tell(manager, ShardRestarted(0), sender=shard.name)
    kind, restore_id, _rows = wait_for(
        lambda: (lambda g: g if len(g) == 3 else None)(stats(shard)), "RestoreRoles")[2]
    assert kind == "RestoreRoles"
    node.tell(manager, RolesRestored(restore_id, []), sender=shard.name)
    got = wait_for(lambda: (lambda g: g if len(g) == 4 else None)(stats(shard)),
                   "the delete sent again")
    assert got[3] == got[1]
    send(stop)
    wait_for(lambda: stats(manager)["resends_in_progress"] == 1, "the resend swallowed")
    assert stats(manager)["resends_reapplied"] == 0 and len(stats(shard)) == 4


def test_a_real_shard_late_not_lost_applies_the_overdue_resend_once(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real shard is slow, not lost: held (an event) applying LeaderAndIsr 1's role
    (c-0 led at leader epoch 5), the overdue resend sends it again and the copy queues
    behind the original. Once let go, the shard applies the role once (the copy is
    answered, not applied again: that would forget what the leader did since), and the
    controller gets one answer. The ReplicaManager reads a manual clock of its own (the
    shard, held, could not take the node's clock turns)."""
    hold = threading.Event()
    held = {"on": True}
    real_become = PartitionShard.on_become_leader_or_follower

    def on_become(self: PartitionShard, msg: BecomeLeaderOrFollower) -> None:
        if held["on"]:
            held["on"] = False
            assert hold.wait(20), "the test never let the shard go"
        real_become(self, msg)

    on_become.__actorlog_handles__ = (BecomeLeaderOrFollower,)  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionShard, "on_become_leader_or_follower", on_become)
    applied: list[int] = []
    real_lead = PartitionState.become_leader

    def become_leader(self: PartitionState, leader_epoch: int, *args: Any, **kw: Any) -> None:
        applied.append(leader_epoch)
        real_lead(self, leader_epoch, *args, **kw)

    monkeypatch.setattr(PartitionState, "become_leader", become_leader)
    clock = ManualClock()
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
               log_dir=LogDir.open(tmp_path), topics={}, broker_id=1, clock=node.clock)
    node.spawn(PurgatoryShard, topo.purgatory(0).name, topology=topo, clock=node.clock)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=Config(), broker_id=1, clock=clock)
    controller = node.spawn(Controller, topo.controller.name)
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)

    def stats(actor: Any) -> Any:
        return node.ask(actor, GetStats())

    node.tell(manager, _lai(E + 1), sender=controller.name)
    wait_for(lambda: not held["on"], "the shard held applying the role")
    clock.advance(SHARDS_OVERDUE_MS)
    node.tell(manager, _lai(E + 1), sender=controller.name)
    wait_for(lambda: stats(manager)["resends_reapplied"] == 1, "the overdue resend")
    assert stats(controller) == []
    hold.set()
    wait_for(lambda: stats(controller), "the answer")
    wait_for(lambda: stats(manager)["pending"] == 0, "settled")
    # the copy's answer too: the shard is idle once it answers a GetStats after it
    node.ask(topo.shard(0), GetStats())
    assert applied == [5], "the resent role applied again"
    assert stats(topo.shard(0))["replication"]["roles_held_already"] == 1
    assert [tuple(a) for a in stats(controller)] == [("LeaderAndIsrResponse", NONE, E + 1)]
    assert stats(manager)["leading"] == ["c-0"]
