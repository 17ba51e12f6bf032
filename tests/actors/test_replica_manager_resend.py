"""A resend of a controller request whose shards have not answered: swallowed while they are
less than SHARDS_OVERDUE_MS late (the original's answer will name its id), sent to them
again past it (its message may be lost: a full or failed link to their process), and
answered once whichever of their answers comes first. The real ReplicaManager on a manual
clock; the shard is a stand-in that keeps what it is sent and never answers (the test
answers as it), and the controller a recorder."""

from __future__ import annotations

from typing import Any

from actors.replica_manager import SHARDS_OVERDUE_MS, ReplicaManager
from actors.runtime.actor import Actor, handles
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
    StopReplica,
    StopReplicaPartition,
    StopReplicaResponse,
)
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)
E = 4 << 32  # ids of controller epoch 4, as its channel gives them


class QuietShard(Actor):
    """Keeps the requests it gets, (type name, shard request id, rows), and answers none."""

    def setup(self) -> None:
        self.got: list[tuple[str, int, list[Any]]] = []

    @handles(BecomeLeaderOrFollower, DropPartitions)
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


def _lai(correlation_id: int) -> LeaderAndIsr:
    """c-0 led by this broker (1) at leader epoch 5, from controller 2 of epoch 4."""
    return LeaderAndIsr(2, 4, 5, [LeaderAndIsrPartition(
        "c", 0, 4, 1, 5, [1, 2], 6, [1, 2], True)],
        [LiveLeaderRow(1, ""), LiveLeaderRow(2, "")], {"c": {}}, correlation_id)


def test_a_resend_of_a_request_its_shard_never_answered_is_sent_to_it_again(
        manual_node: Node) -> None:
    node = manual_node
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
