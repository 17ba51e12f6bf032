"""What reaches an actor once it stopped: asks of other nodes, replies to the node's own
asks, and the mailbox depth of a name spawned again. Real nodes and real ZeroMQ."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.node import (
    AskFailed,
    AskRouter,
    AskTimeout,
    Directory,
    Node,
    NodeEndpoint,
)
from tests.fixtures.broker import free_port
from tests.fixtures.waiting import wait_for
from tests.runtime.node_actors import (
    GATE,
    Boom,
    Fragile,
    GetState,
    Hold,
    OrderChecker,
    Sender,
    SendSeq,
    Seq,
    SlowReceiver,
)
from wire import registry
from wire.envelope import incarnation_bytes, new_entry


def _two_nodes(nodes: list[Node], tmp_path: Path, incarnation: str,
               ipc: bool) -> tuple[Node, Node]:
    """Node a and node b, each with a directory of its own (as cluster nodes have); b runs
    an OrderChecker "checker" that a has asked once (a's link and b's gateway link made)."""
    ipc_dir = str(tmp_path / "ipc") if ipc else ""
    endpoints = {n: NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), ipc_dir,
                                 incarnation=incarnation) for n in ("a", "b")}
    a = Node("a", directory=Directory(dict(endpoints))).start()
    nodes.append(a)
    b = Node("b", directory=Directory(dict(endpoints))).start()
    nodes.append(b)
    b.spawn(OrderChecker, "checker")
    assert a.ask(Address("b", "checker"), GetState(), timeout=10)["count"] == 0
    return a, b


@pytest.mark.parametrize("incarnation,ipc", [("", False), ("1", False), ("", True)],
                         ids=["tcp", "tcp-incarnation", "ipc"])
def test_an_ask_of_another_node_to_a_stopped_actor_fails_at_once(
        nodes: list[Node], tmp_path: Path, incarnation: str, ipc: bool) -> None:
    """Node a asks b's actor, which stopped: b's gateway hands the frame to the closed
    mailbox, a dead letter on b, and the asker waited its whole timeout (the ask of one of
    b's own threads failed at once). Now b answers with a failure naming the stopped
    actor, through the reply path of any answer (a frame carrying a's process is answered
    once b's directory lists that process), so a's ask fails at once. Both nodes
    quiesce; b counts the ask as one dead letter."""
    a, b = _two_nodes(nodes, tmp_path, incarnation, ipc)
    assert b.stop_actor("checker")
    started = time.monotonic()
    with pytest.raises(AskFailed, match=r"^checker@b failed on GetState: "
                                        r"actor checker@b stopped$"):
        a.ask(Address("b", "checker"), GetState(), timeout=20)
    assert time.monotonic() - started < 5
    assert b.dead_letters.by_reason() == {"actor checker@b stopped": 1}
    assert not a.dead_letters.by_reason()
    assert a.quiesce(timeout=5) and b.quiesce(timeout=5)


def _asking(ask: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """A thread (not started) running ``ask``; an exception it raises goes in the list
    (the tests' asks here are expected to fail)."""
    failures: list[Any] = []

    def run() -> None:
        try:
            ask()
        except Exception as exc:
            failures.append(exc)

    return threading.Thread(target=run, daemon=True), failures


def _restarted_b_asks_a_stopped_actor(nodes: list[Node]) -> tuple[
        Node, Node, NodeEndpoint, list[BaseException], threading.Thread, Any]:
    """Node b restarted as process "2" (a still lists "1") asks a's stopped actor from a
    thread: (a, b, b's new endpoint, the ask's failures, the thread, a's ask router)."""
    endpoints = {"a": NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), incarnation="a1"),
                 "b": NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), incarnation="1")}
    a = Node("a", directory=Directory(dict(endpoints))).start()
    nodes.append(a)
    a.spawn(OrderChecker, "checker")
    restarted = NodeEndpoint("127.0.0.1", endpoints["b"].port, incarnation="2")
    b = Node("b", directory=Directory({"a": endpoints["a"], "b": restarted})).start()
    nodes.append(b)
    assert a.stop_actor("checker")
    asker, failures = _asking(lambda: b.ask(Address("a", "checker"), GetState(), timeout=20))
    asker.start()
    return a, b, restarted, failures, asker, a.actor("_asks")


def test_the_failure_to_a_process_not_registered_yet_waits_for_its_registration(
        nodes: list[Node]) -> None:
    """Node b restarted (process "2", a still lists "1") asks a's stopped actor: a's
    failure answers that process, so it is held until a lists it (as any answer to it),
    never sent to the old one; then b's ask fails."""
    a, b, restarted, failures, asker, router = _restarted_b_asks_a_stopped_actor(nodes)
    wait_for(lambda: any(addr == Address("b", "_asks") and held[0] == b"2"
                         for addr, held in list(router._origin_out.items())), timeout=10)
    time.sleep(0.2)
    assert not failures
    a.directory.learn("b", restarted)
    asker.join(10)
    assert not asker.is_alive()
    [exc] = failures
    assert isinstance(exc, AskFailed) and str(exc).endswith("actor checker@a stopped"), exc
    assert a.dead_letters.by_reason() == {"actor checker@a stopped": 1}
    assert a.quiesce(timeout=5) and b.quiesce(timeout=5)


def test_a_failure_for_an_older_process_never_reaches_the_newer_one(
        nodes: list[Node]) -> None:
    """b restarted (process "2"; a lists "1") and asked a's stopped actor: a holds that
    failure for process 2. A late frame of process 1 reaches the stopped actor too: its
    failure was put behind the held one, as something else sent to b's ask router, and
    went with it to process 2 once a listed it (where process 2's ask ids met process 1's,
    it failed another ask there). It is a dead letter now; b's router gets its own
    failure only."""
    a, b, restarted, failures, asker, router = _restarted_b_asks_a_stopped_actor(nodes)
    b_asks = Address("b", "_asks")
    assert wait_for(lambda: b_asks in router._origin_out, timeout=10)
    # the late frame of process 1, refused at the stopped actor (a's gateway does so)
    a._entries_undelivered("b", "_asks", [_ask_entry(1)], Address("a", "checker"),
                           "actor checker@a stopped", incarnation_bytes("1"))
    stale = "no route to actor _asks@b"
    assert wait_for(lambda: len(router._origin_out.get(b_asks, (0, 0, []))[2]) == 2
                    or stale in a.dead_letters.by_reason(), timeout=10)
    a.directory.learn("b", restarted)
    asker.join(10)
    assert not asker.is_alive()
    [exc] = failures
    assert isinstance(exc, AskFailed) and str(exc).endswith("actor checker@a stopped"), exc
    time.sleep(0.3)  # what came with that failure was handled with it
    assert b.actor("_asks").received == 1
    assert a.dead_letters.by_reason() == {"actor checker@a stopped": 2, stale: 1}
    assert (f"{stale} (the process of its node that asked is not the one these failures "
            f"would reach)", "_asks@a", "_asks@b") in a.dead_letters.last
    assert a.quiesce(timeout=5) and b.quiesce(timeout=5)


def test_an_ask_of_another_node_with_no_route_still_waits(
        nodes: list[Node], tmp_path: Path) -> None:
    """Unchanged: an ask to a node the directory does not list has no route; it waits its
    timeout (a process starting asks again after a timeout, and gives up on a failure)."""
    a, _b = _two_nodes(nodes, tmp_path, "", False)
    started = time.monotonic()
    with pytest.raises(AskTimeout, match=r"^no answer from checker@c to GetState in 0\.5 s$"):
        a.ask(Address("c", "checker"), GetState(), timeout=0.5)
    assert time.monotonic() - started >= 0.5


def _ask_entry(ask_id: int) -> list[Any]:
    """An ask's envelope, as another node's frame carries it."""
    return new_entry(registry.type_id_of(GetState), 0, 0, 0, 0, ask_id, GetState())


def test_failures_to_a_node_that_takes_nothing_never_stall_the_ask_router(
        nodes: list[Node]) -> None:
    """The ask router answers another node's asks to a stopped actor with failures; it
    waited, as any actor, while the link to that node took nothing (a node listed with
    nobody listening). Past the link's 100 frames it waited for good: every ask of the
    node then timed out, and the node never quiesced nor stopped. The failures are best
    effort now (the asker's timeout covers a lost one): what the link does not take is a
    dead letter, and the router goes on."""
    endpoints = {n: NodeEndpoint("127.0.0.1", free_port("127.0.0.1")) for n in ("a", "c")}
    a = Node("a", directory=Directory(dict(endpoints))).start()
    nodes.append(a)
    checker = a.spawn(OrderChecker, "checker")
    for ask_id in range(1, 401):  # c's asks that reached a stopped actor here
        a._entries_undelivered("c", "_asks", [_ask_entry(ask_id)], Address("a", "gone"),
                               "actor gone@a stopped")
    # the link queues about 100 frames (its high-water mark); the rest are dead letters
    assert wait_for(lambda: a.dead_letters.by_reason().get("link to node c takes nothing",
                                                           0) >= 250, timeout=10)
    assert a.ask(checker, GetState(), timeout=5)["count"] == 0
    assert a.dead_letters.by_reason()["actor gone@a stopped"] == 400
    assert a.quiesce(timeout=5)
    started = time.monotonic()
    a.shutdown(timeout=5)
    assert time.monotonic() - started < 5
    assert a.actor("_asks").actor_stopped.is_set()


class _HeldAskRouter(AskRouter):
    """An ask router whose stop waits in its teardown until ``go`` is set: its loop is
    past its last look at the mailbox, which is not closed yet."""

    def setup(self) -> None:
        self.in_teardown = threading.Event()
        self.go = threading.Event()

    def teardown(self) -> None:
        self.in_teardown.set()
        self.go.wait(30)


def test_a_reply_drained_from_the_stopping_ask_routers_mailbox_completes_its_ask(
        nodes: list[Node]) -> None:
    """A Reply that reached the ask router's mailbox after its loop's last look, before
    its stop closed it: the stop drained it as a dead letter and the ask it answers
    waited its whole timeout. Now the drain completes the ask with that reply (it is no
    dead letter), and the node quiesces."""
    node = Node("router-drained")
    nodes.append(node)
    node.spawn(_HeldAskRouter, "_asks")
    slow = node.spawn(SlowReceiver, "slow")
    router = node.actors["_asks"]
    assert isinstance(router, _HeldAskRouter)
    GATE.clear()
    answers: list[tuple[Any, float]] = []

    def ask_it() -> None:
        try:
            answers.append((node.ask(slow, Hold(30.0), timeout=20), time.monotonic()))
        except Exception as exc:
            answers.append((exc, time.monotonic()))

    asker = threading.Thread(target=ask_it, daemon=True)
    asker.start()
    assert wait_for(lambda: node.actors["slow"].received == 1)  # in the handler
    stopper = threading.Thread(target=node.stop_actor, args=("_asks", 30), daemon=True)
    stopper.start()
    assert router.in_teardown.wait(10)
    slow_actor = node.actors["slow"]
    GATE.set()  # the answer goes into the router's mailbox, unread
    assert wait_for(lambda: slow_actor.sent_local == 1)
    router.go.set()
    released = time.monotonic()
    stopper.join(20)
    asker.join(25)
    assert not stopper.is_alive() and not asker.is_alive()
    [(answer, answered_at)] = answers
    assert answer is True, answer
    assert answered_at - released < 5
    assert not node.dead_letters.by_reason()
    assert node.quiesce(timeout=5)


@pytest.mark.parametrize("late", ["answer", "failure"])
def test_a_reply_meant_for_an_earlier_process_completes_no_ask_of_the_new_one(
        nodes: list[Node], late: str) -> None:
    """Process 1 of node a asks b, gives up, and stops; process 2 of a (same endpoint,
    nothing names either process: no incarnation) asks b again. A Reply for process 1's ask
    reaches process 2 first: b's late answer, or a failure b sends for an ask of process
    1 that reached a stopped actor. Each process counted its asks from 1: that Reply
    completed process 2's first ask (with True, or AskFailed). Each counts from a random
    start now: process 2's ask gets its own answer."""
    endpoints = {n: NodeEndpoint("127.0.0.1", free_port("127.0.0.1")) for n in ("a", "b")}
    b = Node("b", directory=Directory(dict(endpoints))).start()
    nodes.append(b)
    slow = b.spawn(SlowReceiver, "slow")
    a1 = Node("a", directory=Directory(dict(endpoints))).start()
    nodes.append(a1)
    answers: list[Any] = []
    GATE.clear()
    try:
        with pytest.raises(AskTimeout):  # answered once GATE is set: to process 2
            a1.ask(slow, Hold(30.0), timeout=0.5)
        earlier = next(a1._ask_ids) - 1  # that ask's id
        a1.shutdown(timeout=5)
        a2 = Node("a", directory=Directory(dict(endpoints))).start()
        nodes.append(a2)

        def ask_it() -> None:
            try:
                answers.append(a2.ask(slow, GetState(), timeout=20))
            except Exception as exc:
                answers.append(exc)

        asker = threading.Thread(target=ask_it, daemon=True)
        asker.start()
        assert wait_for(lambda: a2._pending, "process 2's ask")  # behind the held Hold
        router = a2.actors["_asks"]
        if late == "failure":
            b._entries_undelivered("a", "_asks", [_ask_entry(earlier)], Address("b", "gone"),
                                   "actor gone@b stopped")
            assert wait_for(lambda: router.received == 1, "b's failure at process 2")
    finally:
        GATE.set()  # the late answer, then process 2's, in order on one link
    asker.join(20)
    assert not asker.is_alive()
    assert answers == [0] and type(answers[0]) is int, answers
    assert router.received == (2 if late == "answer" else 3)  # the late ones came
    assert a2.quiesce(timeout=5) and b.quiesce(timeout=5)


class _StopHeldAskRouter(AskRouter):
    """An ask router whose loop, told to stop, waits in its turn until ``go`` is set: past
    its last look at its pykka inbox, before its stop begins."""

    def setup(self) -> None:
        self.held = threading.Event()
        self.go = threading.Event()

    def on_turn(self) -> None:
        if self._stopping and not self.held.is_set():
            self.held.set()
            self.go.wait(30)


def _a_with_router(nodes: list[Node], router: type[AskRouter]) -> tuple[Node, Node, Any]:
    """Node a, its ask router a ``router``, and node b, which asked a's "checker" once;
    the checker stopped since. (a, b, a's router.)"""
    endpoints = {n: NodeEndpoint("127.0.0.1", free_port("127.0.0.1")) for n in ("a", "b")}
    a = Node("a", directory=Directory(dict(endpoints)))
    nodes.append(a)
    a.spawn(router, "_asks")
    a.start_gateway()
    a.spawn(OrderChecker, "checker")
    b = Node("b", directory=Directory(dict(endpoints))).start()
    nodes.append(b)
    assert b.ask(Address("a", "checker"), GetState(), timeout=10)["count"] == 0
    assert a.stop_actor("checker")
    return a, b, a.actors["_asks"]


def test_a_failure_handed_to_the_ask_router_as_it_stops_is_still_sent(
        nodes: list[Node]) -> None:
    """b asks a's stopped actor while a's ask router stops, after its loop's last look at
    its pykka inbox: the FailAsks waited there unread, and b's ask its whole timeout.
    The stop answers what its inbox holds now: b's ask fails at once."""
    a, b, router = _a_with_router(nodes, _StopHeldAskRouter)
    stopper = threading.Thread(target=a.stop_actor, args=("_asks", 30), daemon=True)
    stopper.start()
    asker, failures = _asking(lambda: b.ask(Address("a", "checker"), GetState(), timeout=10))
    try:
        assert router.held.wait(10)
        asker.start()
        assert wait_for(lambda: not router.actor_inbox.empty(), "the FailAsks", timeout=10)
    finally:
        router.go.set()
    released = time.monotonic()
    stopper.join(20)
    asker.join(20)
    assert not stopper.is_alive() and not asker.is_alive()
    [exc] = failures
    assert isinstance(exc, AskFailed) and str(exc).endswith("actor checker@a stopped"), exc
    assert time.monotonic() - released < 5
    assert a.dead_letters.by_reason() == {"actor checker@a stopped": 1}
    assert router.actor_stopped.is_set()


@pytest.mark.parametrize("router", ["stopping", "stopped"])
def test_a_failure_the_ask_router_no_longer_takes_is_a_dead_letter(
        nodes: list[Node], router: str) -> None:
    """b asks a's stopped actor once a's ask router took its last look at its inbox (its
    stop waits in its teardown), or stopped: the failure went into an inbox nobody reads,
    or nowhere, and nothing said so. It is a dead letter now; the ask waits its timeout,
    as before."""
    a, b, asks = _a_with_router(nodes, _HeldAskRouter if router == "stopping" else AskRouter)
    stopper = threading.Thread(target=a.stop_actor, args=("_asks", 30), daemon=True)
    stopper.start()
    lost = "failures to asks of _asks@b not sent"
    try:
        if router == "stopping":
            assert asks.in_teardown.wait(10)
        else:
            stopper.join(20)
            assert asks.actor_stopped.is_set()
        with pytest.raises(AskTimeout):
            b.ask(Address("a", "checker"), GetState(), timeout=1)
        assert wait_for(lambda: lost in a.dead_letters.by_reason(), "the dead letter",
                        timeout=10)
    finally:
        if router == "stopping":
            asks.go.set()
    stopper.join(20)
    assert not stopper.is_alive()
    assert a.dead_letters.by_reason() == {"actor checker@a stopped": 1, lost: 1}
    assert (f"{lost} (the ask router of node a stopped)", "_asks@a",
            "_asks@b") in a.dead_letters.last


def test_a_name_spawned_again_starts_with_an_empty_mailbox_depth(
        nodes: list[Node]) -> None:
    """actor_mailbox_depth is what actors of the node sent to a name minus what its actor
    took. The name's sent count runs over every actor of that name; what the previous one
    took (and what reached it once stopped, dead letters) was not taken off, so the new one
    started at that offset. It starts at 0 now, and counts what waits for it."""
    node = Node("depth").start()
    nodes.append(node)
    sender = node.spawn(Sender, "s")
    checker = node.spawn(OrderChecker, "checker")
    assert node.ask(sender, SendSeq(5, "depth", "checker")) == 5
    wait_for(lambda: node.ask(checker, GetState())["count"] == 5)
    assert node.mailbox_depth("checker") == 0
    assert node.stop_actor("checker")
    assert node.ask(sender, SendSeq(30, "depth", "checker")) == 30  # dead letters
    assert node.dead_letters.by_reason() == {f"actor {checker} stopped": 30}
    assert node.mailbox_depth("checker") == 0
    node.spawn(OrderChecker, "checker")
    assert node.mailbox_depth("checker") == 0
    assert node.ask(sender, SendSeq(3, "depth", "checker")) == 3
    wait_for(lambda: node.ask(checker, GetState())["count"] == 3)
    assert node.mailbox_depth("checker") == 0
    assert node.quiesce(timeout=5)


def _six_wait_then_none(node: Node, sender: Any, label: str, name: str,
                        holder: threading.Thread) -> None:
    """``sender`` sends 6 to ``name``, whose handler ``holder`` holds: its depth reads 6,
    then 0 once the handler goes on, and the node quiesces."""
    try:
        assert node.ask(sender, SendSeq(6, label, name)) == 6
        assert wait_for(lambda: node.mailbox_depth(name) == 6, timeout=5)
    finally:
        GATE.set()
        holder.join(20)
    assert wait_for(lambda: node.mailbox_depth(name) == 0)
    assert node.quiesce(timeout=5)


def test_the_mailbox_depth_counts_what_waits_though_the_node_asked_the_actor(
        nodes: list[Node]) -> None:
    """The node's own asks (Node.ask, sent as "_asks") were taken off the depth as taken
    from an actor of the node, though never counted as sent by one: each ask hid one
    waiting message for good. Here 4 asks, then 6 messages wait behind a held handler."""
    node = Node("depth-asks").start()
    nodes.append(node)
    sender = node.spawn(Sender, "s")
    slow = node.spawn(SlowReceiver, "slow")
    for _ in range(4):
        node.ask(slow, GetState())
    GATE.clear()
    holder = threading.Thread(target=node.ask, args=(slow, Hold(30.0), 20), daemon=True)
    holder.start()
    slow_actor = node.actors["slow"]
    assert wait_for(lambda: slow_actor.received == 5)
    _six_wait_then_none(node, sender, "depth-asks", "slow", holder)


class _GivesUp(Fragile):
    """Stopped by supervision at its first crash."""

    max_restarts = 0


class _BoomFirst(Actor):
    """Tells a Boom, then ``count`` Seq messages: one frame."""

    @handles(SendSeq)
    def on_send(self, msg: SendSeq) -> int:
        target = Address(msg.node, msg.name)
        self.tell(target, Boom("on purpose"))
        for i in range(msg.count):
            self.tell(target, Seq(self.name, i))
        return msg.count


def test_the_mailbox_depth_after_supervision_gave_up_in_the_middle_of_a_frame(
        nodes: list[Node]) -> None:
    """Supervision gives up on a crash in the middle of a frame: the rest of the frame
    are dead letters, taken off the depth of the name as such, and they were taken off
    once more as dequeued (the whole frame was counted so before its handling). The next
    actor of the name then showed 3 messages fewer than wait for it. Each is counted once
    now: 6 wait behind a held handler, the depth is 6."""
    node = Node("depth-gave-up").start()
    nodes.append(node)
    sender = node.spawn(_BoomFirst, "s")
    node.spawn(_GivesUp, "f")
    fragile = node.actors["f"]
    assert node.ask(sender, SendSeq(3, "depth-gave-up", "f")) == 3
    assert wait_for(lambda: fragile.actor_stopped.is_set())
    assert node.dead_letters.by_reason() == {"actor f@depth-gave-up stopped": 3}
    assert node.mailbox_depth("f") == 0
    node.spawn(SlowReceiver, "f")
    slow = node.actors["f"]
    GATE.clear()
    holder = threading.Thread(target=node.ask, args=(slow.address, Hold(30.0), 20),
                              daemon=True)
    holder.start()
    assert wait_for(lambda: slow.received == 1)
    relay = node.spawn(Sender, "relay")
    _six_wait_then_none(node, relay, "depth-gave-up", "f", holder)
