"""Every answer the ReplicaManager gives the controller names the correlation id of the
request it answers: a refusal, a request held until the node's registration was known,
an UpdateMetadata, a StopReplica (the controller's channel takes no other). The real
ReplicaManager; the controller is a recorder, and no request here needs a shard."""

from __future__ import annotations

from typing import Any

import pytest

from actors.replica_manager import HELD_MAX, ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.crash import crash_once
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.cluster_messages import (
    AwaitTopics,
    BrokerRegistered,
    BrokerRow,
    LeaderAndIsr,
    LeaderAndIsrResponse,
    MetadataSync,
    MetadataSynced,
    StopReplica,
    StopReplicaPartition,
    StopReplicaResponse,
    TopicsAwaited,
    UpdateMetadata,
    UpdateMetadataPartition,
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


def _manager(node: Node) -> tuple[Any, Any, Any, Any]:
    """The ReplicaManager, the controller, send(request) and answers(count)."""
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

    return manager, controller, send, answers


def test_each_answer_names_the_request_it_answers(node: Node) -> None:
    manager, controller, send, answers = _manager(node)

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


def test_a_restarted_replica_manager_keeps_its_registration(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ReplicaManager crashes and supervision restarts it in place. Nobody tells it the
    registration again (only the controller actor does, at its start or a new session):
    the new life still knows it, so the controller's requests are answered, not held
    forever; and it still refuses the older controller epoch and broker epoch."""
    crash = crash_once(monkeypatch, ReplicaManager, "on_update_metadata", UpdateMetadata)
    manager, controller, send, answers = _manager(node)
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    send(UpdateMetadata(2, 4, 5, True, [], [], {}, E + 1))
    assert answers(1) == [("UpdateMetadataResponse", NONE, E + 1)]
    crash["crash"] = True
    send(UpdateMetadata(2, 4, 5, False, [], [], {}, E + 2))  # dies with the crash
    wait_for(lambda: node.actors[manager.name].crashes == 1, "the ReplicaManager's crash")
    send(UpdateMetadata(2, 4, 5, False, [], [], {}, E + 2))  # the channel's resend
    send(StopReplica(2, 4, 5, [StopReplicaPartition("t", 0, -1, False)], E + 3))
    send(LeaderAndIsr(2, 3, 5, [], [], {}, (3 << 32) + 1))
    send(UpdateMetadata(2, 4, 3, False, [], [], {}, E + 4))
    assert answers(5)[1:] == [("UpdateMetadataResponse", NONE, E + 2),
                              ("StopReplicaResponse", NONE, E + 3),
                              ("LeaderAndIsrResponse", STALE_CONTROLLER, (3 << 32) + 1),
                              ("UpdateMetadataResponse", STALE_BROKER, E + 4)]
    assert node.ask(manager, GetStats())["held"] == 0


def test_requests_held_before_the_registration_are_bounded(node: Node) -> None:
    """Before the registration is known, a resend replaces its held copy, and past HELD_MAX
    the oldest held request is dropped (the channel sends it again): the held list does
    not grow without bound while the registration is not told."""
    manager, controller, send, answers = _manager(node)
    for _ in range(3):
        send(UpdateMetadata(2, 4, 5, True, [], [], {}, E + 1))
    stats = node.ask(manager, GetStats())
    assert (stats["held"], stats["held_replaced"], stats["held_dropped"]) == (1, 2, 0)
    for n in range(2, HELD_MAX + 4):  # HELD_MAX + 2 more: the oldest three go
        send(UpdateMetadata(2, 4, 5, False, [], [], {}, E + n))
    stats = node.ask(manager, GetStats())
    assert (stats["held"], stats["held_replaced"], stats["held_dropped"]) == (HELD_MAX, 2, 3)
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    got = answers(HELD_MAX)
    assert [i for _name, _code, i in got] == [E + n for n in range(4, HELD_MAX + 4)]
    assert {code for _name, code, _i in got} == {NONE}


class Handler(Actor):
    """Keeps the TopicsAwaited it gets: (request id, missing); acknowledges each
    MetadataSync, as a RequestHandler does."""

    def setup(self) -> None:
        self.got: list[tuple[int, list[str]]] = []

    @handles(MetadataSync)
    def on_sync(self, msg: MetadataSync) -> None:
        self.reply(MetadataSynced(msg.version))

    @handles(TopicsAwaited)
    def on_awaited(self, msg: TopicsAwaited) -> None:
        self.got.append((msg.req_id, list(msg.missing)))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> list[tuple[int, list[str]]]:
        return list(self.got)


def test_a_restarted_replica_manager_keeps_its_metadata_and_the_waits_on_it(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ReplicaManager crashes and restarts in place, with a handler waiting for topic u.
    The new life still holds the metadata (topic t): a wait for t is answered at once, and
    the UpdateMetadata that brings u answers the wait from before the crash. Before, the
    new life had an empty cache until the next UpdateMetadata, and the waits were lost."""
    crash = crash_once(monkeypatch, ReplicaManager, "on_update_metadata", UpdateMetadata)
    manager, controller, send, answers = _manager(node)
    handler = node.spawn(Handler, "handler-0")  # the topology's one handler
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)

    def partition(topic: str) -> UpdateMetadataPartition:
        return UpdateMetadataPartition(topic, 0, 4, 1, 1, [1], 1, [1], [])

    live = [BrokerRow(1, 5, "", None, [])]
    send(UpdateMetadata(2, 4, 5, True, live, [partition("t")], {"t": {}}, E + 1))
    assert answers(1) == [("UpdateMetadataResponse", NONE, E + 1)]
    node.tell(manager, AwaitTopics(1, ["u"], True, 60_000), sender=handler.name)
    crash["crash"] = True
    send(UpdateMetadata(2, 4, 5, False, [], [], {}, E + 2))  # dies with the crash
    wait_for(lambda: node.actors[manager.name].crashes == 1, "the ReplicaManager's crash")
    assert node.ask(manager, GetStats())["topics"] == ["t"]
    node.tell(manager, AwaitTopics(2, ["t"], True, 60_000), sender=handler.name)
    assert wait_for(lambda: node.ask(handler, GetStats()), "the wait for t") == [[2, []]]
    send(UpdateMetadata(2, 4, 5, False, live, [partition("u")], {"u": {}}, E + 3))
    got = wait_for(lambda: (lambda g: g if len(g) == 2 else None)(node.ask(handler, GetStats())),
                   "the wait for u")
    assert got[1] == [1, []]
