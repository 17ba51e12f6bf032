"""Actors sharing a thread: the same guarantees as actors with threads of their own."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import NamedTuple

import pytest

from actors.runtime import node as node_module
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.directory import Directory, NodeEndpoint
from actors.runtime.errors import NodeError
from actors.runtime.node import Node
from tests.fixtures.waiting import wait_for
from tests.runtime.node_actors import Boom, Fragile, GetState, OrderChecker, Sender, SendSeq, Seq
from wire.registry import message


@message(9401)
class Countdown(NamedTuple):
    left: int


@message(9402)
class WhichThread(NamedTuple):
    pass


class SelfTeller(Actor):
    """Counts down by telling itself: self-tells must be handled, never dead letters."""

    def setup(self) -> None:
        self.seen: list[int] = []

    @handles(Countdown)
    def on_countdown(self, msg: Countdown) -> None:
        self.seen.append(msg.left)
        if msg.left:
            self.tell(self.address, Countdown(msg.left - 1))

    @handles(GetState)
    def state(self, _msg: GetState) -> list[int]:
        return self.seen

    @handles(WhichThread)
    def thread(self, _msg: WhichThread) -> int:
        return threading.get_ident()


def test_self_tells_are_handled_in_order(node: Node) -> None:
    actor = node.spawn(SelfTeller, "self")
    node.tell(actor, Countdown(50))
    assert wait_for(lambda: node.ask(actor, GetState()) == list(range(50, -1, -1)))
    assert node.dead_letters.total == 0


def test_guests_share_the_host_thread_and_keep_order(node: Node) -> None:
    host = node.spawn(SelfTeller, "host")
    checker = node.spawn(OrderChecker, "checker", host=node.actor("host"))
    senders = [node.spawn(Sender, f"s{i}", host=node.actor("host")) for i in range(3)]
    outside = node.spawn(Sender, "outside")  # its own thread: reaches the guest over ZeroMQ
    tid = node.ask(host, WhichThread())
    assert node.ask(Address(node.name, "s0"), SendSeq(0, node.name, "checker")) == 0
    for s in [*senders, outside]:
        node.tell(s, SendSeq(5_000, node.name, "checker"))
    state = wait_for(lambda: (st := node.ask(checker, GetState()))["count"] == 20_000 and st)
    assert state["out_of_order"] == 0
    assert state["last"] == {"s0": 4999, "s1": 4999, "s2": 4999, "outside": 4999}
    assert node.actor("checker")._owner is node.actor("host")
    assert tid == node.ask(host, WhichThread())


def test_a_crashing_guest_is_restarted_without_disturbing_its_host(node: Node) -> None:
    node.spawn(SelfTeller, "host")
    fragile = node.spawn(Fragile, "fragile", host=node.actor("host"))
    node.tell(fragile, Boom("guest down"))
    node.tell(fragile, Seq("x", 0))
    assert wait_for(lambda: node.ask(fragile, GetState())["handled"] == 1)
    assert node.ask(fragile, GetState())["setups"] == 2
    node.tell(Address(node.name, "host"), Countdown(2))
    assert wait_for(lambda: node.ask(Address(node.name, "host"), GetState()) == [2, 1, 0])


class BadSetup(Actor):
    """Its setup fails, as a gateway's whose port is taken."""

    def setup(self) -> None:
        raise OSError("setup refused")


class SlowSetup(Actor):
    """Its setup takes a while, as a single node's shard recovering big logs."""

    def setup(self) -> None:
        threading.Event().wait(0.6)


def test_spawn_waits_out_a_slow_setup_and_the_actor_is_the_nodes(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """No deadline: a start past the note interval is reported, not failed (a bound made
    a broker whose recovery took longer never start), and the actor is in the node's
    order, so the node's shutdown stops it."""
    monkeypatch.setattr(node_module, "START_NOTE_S", 0.1)
    node.spawn(SlowSetup, "slow")
    assert "slow" in node._order and not node.actor("slow").actor_stopped.is_set()


def test_a_guest_of_a_stopped_host_is_refused(node: Node) -> None:
    node.spawn(SelfTeller, "gone")
    host = node.actor("gone")
    host.actor_ref.stop(block=True, timeout=5)
    with pytest.raises(NodeError, match="host actor 'gone' of 'late' stopped"):
        node.spawn(SelfTeller, "late", host=host)


def test_spawn_of_an_actor_whose_setup_fails_raises(node: Node) -> None:
    """In its own thread or as a guest: spawn waits until the actor is stopped, not only
    until setup ended (it returned as if started, and the node ran on without it)."""
    node.spawn(SelfTeller, "host")
    for i in range(20):
        with pytest.raises(NodeError, match="failed to start"):
            node.spawn(BadSetup, f"own-{i}")
        with pytest.raises(NodeError, match="failed to start"):
            node.spawn(BadSetup, f"guest-{i}", host=node.actor("host"))
    node.tell(Address(node.name, "host"), Countdown(1))  # the host runs on
    assert wait_for(lambda: node.ask(Address(node.name, "host"), GetState()) == [1, 0])


def _open_sockets(node: Node) -> int:
    return sum(1 for sock in list(node.context._sockets) if not sock.closed)


def test_an_actor_whose_setup_fails_in_its_own_thread_leaves_nothing_open(node: Node) -> None:
    """Not in the node's order, nobody stopped it: its mailbox stayed open (the node's
    shutdown waited out its timeout on it, then named it) and its name bound (spawning
    that name again failed)."""
    before = _open_sockets(node)
    with pytest.raises(NodeError, match="failed to start on node t: setup refused"):
        node.spawn(BadSetup, "again")
    assert _open_sockets(node) == before
    node.spawn(SelfTeller, "again")
    node.tell(Address(node.name, "again"), Countdown(1))
    assert wait_for(lambda: node.ask(Address(node.name, "again"), GetState()) == [1, 0])


def test_a_gateway_that_cannot_bind_leaves_nothing_open(tmp_path: Path) -> None:
    """Its ipc socket was bound and the tcp one refused: both stayed open (the context's
    term waited for them), and the node's ipc gateway path was still taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        directory = Directory({"g": NodeEndpoint("127.0.0.1", port, str(tmp_path / "ipc"))})
        node = Node("g", directory=directory).start(gateway=False)
        try:
            before = _open_sockets(node)
            with pytest.raises(NodeError, match=r"'_gateway' failed to start.*in use"):
                node.start_gateway()
            assert _open_sockets(node) == before
            taken.close()
            node.start_gateway()  # the port free now: the same name starts
            assert not node.actor("_gateway").actor_stopped.is_set()
        finally:
            node.shutdown(timeout=5)


def test_stopping_a_guest_leaves_the_host_running(node: Node) -> None:
    node.spawn(SelfTeller, "host")
    node.spawn(SelfTeller, "guest", host=node.actor("host"))
    node.actor("guest").actor_ref.stop(block=True, timeout=5)
    assert node.actor("guest").actor_stopped.is_set()
    node.tell(Address(node.name, "host"), Countdown(1))
    assert wait_for(lambda: node.ask(Address(node.name, "host"), GetState()) == [1, 0])
    node.tell(Address(node.name, "guest"), Countdown(1))  # now a dead letter, counted
    assert wait_for(lambda: node.dead_letters.total == 1)
