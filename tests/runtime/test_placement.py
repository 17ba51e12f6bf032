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


class BadTimeout(Fragile):
    """A Fragile whose poll_timeout_ms raises once a Boom armed it (until its restart)."""

    def setup(self) -> None:
        super().setup()
        self.armed = ""

    def poll_timeout_ms(self) -> int | None:
        if self.armed:
            raise RuntimeError(self.armed)
        return None

    @handles(Boom)
    def on_boom(self, msg: Boom) -> None:
        self.armed = msg.reason


def test_a_guest_whose_poll_timeout_raises_is_restarted_and_the_loop_goes_on(
        node: Node) -> None:
    # Asked of every member before each poll: unguarded, it ended the whole loop (the
    # host and every guest; a broker's process 0 worker loop with its coordinators).
    node.spawn(SelfTeller, "host")
    other = node.spawn(Fragile, "other", host=node.actor("host"))
    guest = node.spawn(BadTimeout, "guest", host=node.actor("host"))
    node.tell(guest, Boom("poll timeout down"))
    assert wait_for(lambda: node.ask(guest, GetState())["setups"] == 2)
    node.tell(guest, Seq("x", 0))  # restarted, it handles what comes
    assert wait_for(lambda: node.ask(guest, GetState()) == {"setups": 2, "handled": 1})
    node.tell(other, Seq("y", 0))
    assert wait_for(lambda: node.ask(other, GetState()) == {"setups": 1, "handled": 1})
    node.tell(Address(node.name, "host"), Countdown(2))
    assert wait_for(lambda: node.ask(Address(node.name, "host"), GetState()) == [2, 1, 0])
    assert not node.actor("host").actor_stopped.is_set()


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


@message(9403)
class Arm(NamedTuple):
    delay_ms: int


class Sleeper(Actor):
    """A guest with a deadline only a message (Arm) or a call (arm) sets: quiet meanwhile."""

    def setup(self) -> None:
        self.due_ns = 0  # 0: nothing timed
        self.fired = 0
        self.asked = 0  # poll_timeout_ms and on_turn calls

    def arm(self, delay_ms: int) -> None:
        self.due_ns = self.clock.monotonic_ns() + delay_ms * 1_000_000

    @handles(Arm)
    def on_arm(self, msg: Arm) -> None:
        self.arm(msg.delay_ms)

    def poll_timeout_ms(self) -> int | None:
        self.asked += 1
        if not self.due_ns:
            self.quiet_turns()
            return None
        return max(0, (self.due_ns - self.clock.monotonic_ns()) // 1_000_000)

    def on_turn(self) -> None:
        self.asked += 1
        if not self.due_ns:
            self.quiet_turns()
        elif self.clock.monotonic_ns() >= self.due_ns:
            self.due_ns = 0
            self.fired += 1


def test_a_quiet_guest_is_not_asked_each_turn_and_its_deadlines_still_fire(
        node: Node) -> None:
    # The coordinators in a broker's process 0 worker loop: idle, they cost the loop's
    # every turn nothing, and what a message or a call sets still comes due.
    host = node.spawn(SelfTeller, "host")
    node.spawn(Sleeper, "sleeper", host=node.actor("host"))
    sleeper = node.actor("sleeper")
    assert isinstance(sleeper, Sleeper)
    loop = node.actor("host")

    def quiet_over_polls() -> bool:
        """The loop polls 20 times more and the sleeper is asked nothing meanwhile."""
        assert wait_for(lambda: sleeper._quiet_at == sleeper.messages_handled)
        asked, polls = sleeper.asked, loop.loop_polls
        for _ in range(200):  # a message to the host: a poll of its loop, mostly
            node.ask(host, GetState())
            if loop.loop_polls >= polls + 20:
                break
        return loop.loop_polls >= polls + 20 and sleeper.asked == asked

    assert quiet_over_polls()
    node.tell(Address(node.name, "sleeper"), Arm(50))  # no other message comes meanwhile
    assert wait_for(lambda: sleeper.fired == 1)
    assert quiet_over_polls()
    sleeper.actor_ref.proxy().arm(50).get(timeout=5)  # a call, not a handled message
    assert wait_for(lambda: sleeper.fired == 2)
    assert quiet_over_polls()
