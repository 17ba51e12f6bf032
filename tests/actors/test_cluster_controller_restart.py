"""The ClusterController actor restarted in place after a crash keeps its ids: its channel's
correlation ids, and the request ids of what it forwards and sends to the shards. An
answer to a request of its previous life may still come, and must not be taken for a new
request's. A real actor in a node, on a ZooKeeper model in memory; it is not started (no
election, no controller known), and the test gives its channel a request the way the
driver would, on the actor's own thread (``_on_actor``: its loop reads the channel)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from actors.cluster_controller import ClusterController
from actors.core.cluster_model import BrokerInfo, Endpoint
from actors.metadata.memory import MemoryMetadataStore, MemoryZooKeeper
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology, broker_node_name
from tests.fixtures.waiting import wait_for
from wire import broker_messages as bm
from wire import cluster_messages as cm
from wire.broker_messages import GetStats
from wire.errors import ErrorCode

NEVER_DUE_MS = 1 << 60  # sent "then": no resend comes while the test looks


class Handler(Actor):
    """Stands in for a RequestHandler: keeps the topic admin answers it gets."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(bm.CreateTopicsDone, bm.DeleteTopicsDone)
    def on_done(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg.req_id])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> list[Any]:
        return list(self.got)


_CALLS: list[Callable[[ClusterController], Any]] = []
_RESULTS: list[Any] = []


def _on_actor(node: Node, address: Any, call: Callable[[ClusterController], Any]) -> Any:
    """``call(actor)`` run on the ClusterController's own thread (in its GetStats handler,
    patched by ``_controller``), not the test's: what it returns (handed over in memory,
    read once the ask is answered)."""
    _CALLS.append(call)
    node.ask(address, GetStats())
    assert not _CALLS and len(_RESULTS) == 1
    return _RESULTS.pop()


def _controller(node: Node, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, dict[str, bool]]:
    """A ClusterController whose SessionStateChanged handler fails once when armed, and
    whose GetStats handler runs the test's ``_on_actor`` call first."""
    crash = {"on": False}
    _CALLS.clear()
    _RESULTS.clear()
    real_stats = ClusterController.stats

    def stats(self: ClusterController, msg: GetStats) -> dict[str, Any]:
        if _CALLS:
            _RESULTS.append(_CALLS.pop(0)(self))
        return real_stats(self, msg)

    stats.__actorlog_handles__ = (GetStats,)  # type: ignore[attr-defined]
    monkeypatch.setattr(ClusterController, "stats", stats)
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
    return address, node.actors[address.name], crash


def _crash(node: Node, address: Any, actor: Any, crash: dict[str, bool]) -> None:
    crash["on"] = True
    node.tell(address, cm.SessionStateChanged(cm.SESSION_CONNECTED, 1))
    wait_for(lambda: actor.crashes == 1, "the controller actor's crash")
    # answered after the restart: the new life's setup is done
    assert node.ask(address, GetStats())["forwards"] == 0


def test_a_crash_restart_keeps_the_channels_ids(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    address, actor, crash = _controller(node, monkeypatch)
    um = cm.UpdateMetadata(1, 3, 5, False, [], [], {})

    def enqueue_twice(self: ClusterController) -> Any:
        return (self.channel, self.channel.enqueue(2, um, NEVER_DUE_MS),
                self.channel.enqueue(2, um, NEVER_DUE_MS))

    first, [(_, sent)], waits = _on_actor(node, address, enqueue_twice)
    assert sent.correlation_id == (3 << 32) + 1 and waits == []  # the second: no id yet

    _crash(node, address, actor, crash)

    def after(self: ClusterController) -> Any:
        channel = self.channel
        state = (channel is first, channel.pending(), channel.last_ids)
        [(_, again)] = channel.enqueue(2, um, NEVER_DUE_MS)
        late = channel.acknowledge(2, cm.UpdateMetadata, sent.correlation_id, NEVER_DUE_MS)
        return state, again, late

    state, again, late = _on_actor(node, address, after)
    assert state == (False, 0, {2: (3 << 32) + 1})
    assert again.correlation_id == (3 << 32) + 2, "the new life gave its predecessor's id"
    assert late == (None, []), "the previous life's request's answer acknowledged the new"


def test_a_late_answer_to_a_forward_of_the_previous_life_answers_no_new_one(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler's CreateTopics is forwarded (no controller known yet: it waits), then the
    actor crashes and restarts; the handler's DeleteTopics is forwarded by the new life.
    An answer to the first forward, late, must not be taken for the second (before, the
    ids began at 1 again and the DeleteTopics got a CreateTopicsDone)."""
    address, actor, crash = _controller(node, monkeypatch)
    handler = node.spawn(Handler, "handler-0")
    node.tell(address, bm.CreateTopics(7, False, [bm.CreateTopicRow("t", 1, 1, {})]),
              sender=handler.name)
    assert node.ask(address, GetStats())["forwards"] == 1
    [old_id] = _on_actor(node, address, lambda self: list(self.forwards))
    _crash(node, address, actor, crash)
    node.tell(address, bm.DeleteTopics(8, [bm.DeleteTopicRow("u")]), sender=handler.name)
    assert node.ask(address, GetStats())["forwards"] == 1
    node.tell(address, bm.CreateTopicsDone(old_id, [bm.CreateTopicDoneRow("t", 0, None, 1,
                                                                          1)]),
              sender="broker-2/cluster-controller")
    assert node.ask(address, GetStats())["forwards"] == 1, "a late answer settled a forward"
    assert node.ask(handler, GetStats()) == []


def _sent_to(broker_id: int) -> Callable[[ClusterController], list[int]]:
    """Marks the one forward as sent to ``broker_id``'s controller, as _try_forward does
    when it sends it there; returns the forwards' ids."""
    def call(self: ClusterController) -> list[int]:
        [fwd] = self.forwards.values()
        fwd.sent_to = broker_id
        fwd.sent_nodes.add(self._controller_of(broker_id).node)
        return list(self.forwards)
    return call


def test_a_late_success_of_the_first_controller_a_forward_went_to_answers_it(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forward went to this node's controller, then (no answer in time, or the
    controller moved) to broker 2's. The first one's success comes late: it answers the
    forward (ignored, the handler waited for broker 2's answer, which may be
    TOPIC_ALREADY_EXISTS, or none). A NOT_CONTROLLER from it does not: the forward waits
    for broker 2."""
    address, _actor, _crash = _controller(node, monkeypatch)
    handler = node.spawn(Handler, "handler-0")
    node.tell(address, bm.CreateTopics(7, False, [bm.CreateTopicRow("t", 1, 1, {})]),
              sender=handler.name)
    _on_actor(node, address, _sent_to(1))
    [req_id] = _on_actor(node, address, _sent_to(2))
    moved = bm.CreateTopicsDone(req_id, [bm.CreateTopicDoneRow(
        "t", int(ErrorCode.NOT_CONTROLLER), None, -1, -1)])
    node.tell(address, moved, sender="cluster-controller")
    stats = node.ask(address, GetStats())
    assert (stats["forwards"], stats["forward_answers_ignored"]) == (1, 1)
    [sent_to] = _on_actor(node, address, lambda self: [
        f.sent_to for f in self.forwards.values()])
    assert sent_to == 2, "an earlier controller's NOT_CONTROLLER sent the forward again"
    done = bm.CreateTopicsDone(req_id, [bm.CreateTopicDoneRow("t", 0, None, 1, 1)])
    node.tell(address, done, sender="cluster-controller")  # from this node
    [answer] = wait_for(lambda: node.ask(handler, GetStats()), "the handler's answer")
    assert answer == ["CreateTopicsDone", 7]
    assert node.ask(address, GetStats())["forwards"] == 0


def test_an_answer_to_a_forward_counts_only_from_the_controller_it_went_to(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forward sent to broker 2's controller is answered only by it: the same request id's
    answer from another node (here, this test's node) is ignored. Sent to a controller on
    this node, the answer from it is taken."""
    address, _actor, _crash = _controller(node, monkeypatch)
    handler = node.spawn(Handler, "handler-0")
    node.tell(address, bm.CreateTopics(7, False, [bm.CreateTopicRow("t", 1, 1, {})]),
              sender=handler.name)

    [req_id] = _on_actor(node, address, _sent_to(2))
    assert broker_node_name(2) != node.name
    done = bm.CreateTopicsDone(req_id, [bm.CreateTopicDoneRow("t", 0, None, 1, 1)])
    node.tell(address, done, sender="cluster-controller")  # from this node
    stats = node.ask(address, GetStats())
    assert (stats["forwards"], stats["forward_answers_ignored"]) == (1, 1)
    assert node.ask(handler, GetStats()) == []
    _on_actor(node, address, _sent_to(1))  # this node's broker
    node.tell(address, done, sender="cluster-controller")
    [answer] = wait_for(lambda: node.ask(handler, GetStats()), "the handler's answer")
    assert answer == ["CreateTopicsDone", 7]
    assert node.ask(address, GetStats())["forwards"] == 0
