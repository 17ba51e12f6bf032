"""The runtime's guarantees, each on real actors, real sockets and real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
from loguru import logger

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.node import AskFailed, AskTimeout, Directory, Node, NodeEndpoint, _Pending
from tests.fixtures.broker import free_port
from tests.fixtures.waiting import wait_for
from tests.runtime.node_actors import (
    GATE,
    AdvisorySender,
    Announcer,
    Boom,
    Fragile,
    GetState,
    Hold,
    Nap,
    NumberedSender,
    OrderChecker,
    Sender,
    SendSeq,
    Seq,
    SlowReceiver,
)
from wire import registry
from wire.envelope import FORMAT_VERSION, encode_frames, new_entry
from wire.runtime_messages import Text

ROOT = Path(__file__).resolve().parents[2]


class NodeProcess:
    """A node in a child process, hosting actors from tests/runtime/node_actors.py."""

    def __init__(self, role: str, name: str, spec: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.runtime.node_actors", role, name, spec, *extra],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"node process failed: {self.proc.stderr.read()}")  # type: ignore[union-attr]
        assert json.loads(line) == {"ready": name}

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def spec_of(directory: Directory, ipc_dir: str = "") -> str:
    items = ",".join(f"{n}={e.host}:{e.port}" for n, e in directory.nodes.items())
    return f"{items};{ipc_dir}"


# ------------------------------------------------------------------ ordering
def test_order_per_sender_in_one_process(nodes: list[Node]) -> None:
    node = Node("solo").start()
    nodes.append(node)
    node.spawn(OrderChecker, "checker")
    senders = [node.spawn(Sender, f"s{i}") for i in range(4)]
    for s in senders:
        node.tell(s, SendSeq(20_000, "solo", "checker"))
    state = wait_for(
        lambda: (st := node.ask(Address("solo", "checker"), GetState()))["count"] == 80_000 and st
    )
    assert state["out_of_order"] == 0
    assert state["last"] == {f"s{i}": 19_999 for i in range(4)}


@pytest.mark.multiprocess
@pytest.mark.parametrize("placement", ["two_process", "two_host", "gateway_in_loop"])
def test_order_across_processes_and_hosts(nodes: list[Node], tmp_path: Path,
                                          placement: str) -> None:
    """Many senders in another process (same host: ipc; other loopback host: tcp).
    gateway_in_loop: ipc, and the receiving gateway runs in the checker's loop (it hands
    the frames over in memory, not through the checker's mailbox)."""
    host_a, host_b = ("127.0.0.2", "127.0.0.3") if placement == "two_host" else (
        "127.0.0.1", "127.0.0.1")
    ipc_dir = "" if placement == "two_host" else str(tmp_path / "ipc")
    directory = Directory({
        "a": NodeEndpoint(host_a, free_port(host_a), ipc_dir),
        "b": NodeEndpoint(host_b, free_port(host_b), ipc_dir),
    })
    in_loop = placement == "gateway_in_loop"
    node = Node("a", directory=directory).start(gateway=not in_loop)
    nodes.append(node)
    node.spawn(OrderChecker, "checker")
    if in_loop:
        node.start_gateway(host="checker")
        assert node.actor("_gateway")._owner is node.actor("checker")
    other = NodeProcess("senders", "b", spec_of(directory, ipc_dir), "4")
    try:
        for i in range(4):
            node.tell(Address("b", f"sender-{i}"), SendSeq(25_000, "a", "checker"))
        state = wait_for(
            lambda: (st := node.ask(Address("a", "checker"), GetState()))["count"] == 100_000
            and st,
            timeout=60,
        )
        assert state["out_of_order"] == 0
        assert state["last"] == {f"sender-{i}": 24_999 for i in range(4)}
        gateway = node.actor("_gateway")
        if in_loop:  # handed over in memory: no inproc link to the checker's mailbox
            assert "checker" in gateway._local and "checker" not in gateway._fwd
        else:
            assert "checker" in gateway._fwd and "checker" not in gateway._local
    finally:
        assert other.stop() == 0


# -------------------------------------------------------------- backpressure
def test_small_mailbox_slows_sender_and_loses_nothing(nodes: list[Node]) -> None:
    node = Node("bp", batch_max_messages=1).start()
    nodes.append(node)
    node.spawn(SlowReceiver, "slow")
    sender = node.spawn(Sender, "fast")
    assert node.ask(sender, SendSeq(2_000, "bp", "slow"), timeout=60) == 2_000
    # The sender's handler returned only after every message was in a mailbox:
    # it had to wait on the full one (slowed down), and nothing was dropped.
    assert node.metrics.get("mailbox_full_waits") > 0
    assert wait_for(lambda: node.ask(Address("bp", "slow"), GetState()) == 2_000)
    assert node.dead_letters.total == 0


# --------------------------------------------------------------- dead letters
def test_dead_letters_are_counted_and_the_node_keeps_serving(
    nodes: list[Node], log_lines: list[str], tmp_path: Path
) -> None:
    port = free_port("127.0.0.1")
    directory = Directory({"dl": NodeEndpoint("127.0.0.1", port, str(tmp_path))})
    node = Node("dl", directory=directory, max_frame_bytes=64 * 1024).start()
    nodes.append(node)
    checker = node.spawn(OrderChecker, "checker")

    node.tell(Address("dl", "nobody"), Text("hello"))  # unknown local actor
    node.send_raw(checker, b"\xc1 this is not msgpack")  # garbage
    node.send_raw(checker, msgpack.packb([FORMAT_VERSION, "dl", "t", "checker",
                                          [[424242, 0, 0, 0, 0, 0, ["x"]]]]))  # unknown type
    node.send_raw(checker, msgpack.packb([FORMAT_VERSION, "dl", "t", "checker",
                                          [[9001, 0, 0, 0, 0, 0, ["x", "not-an-int"]]]]))  # shape
    node.send_raw(checker, msgpack.packb([FORMAT_VERSION, "dl", "t", "checker",
                                          [[9001, 0, 0, 0, 0, 0, ["x"]]]]))  # arity
    node.send_raw(checker, b"\x00" * (65 * 1024))  # oversized
    # and through the gateway, as another node would send it:
    import zmq

    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    push.send_multipart([b"ghost", b"\x90"])  # unknown actor on this node
    push.send_multipart([b"only-one-part"])
    push.close(linger=2000)
    ctx.term()

    reasons = wait_for(lambda: (r := node.dead_letters.by_reason()) and sum(r.values()) >= 8 and r)
    joined = " | ".join(reasons)
    for expected in ("no route to actor", "undecodable frame", "unknown message type id",
                     "malformed envelope", "frame of", "no actor named 'ghost'", "gateway frame"):
        assert expected in joined, (expected, reasons)
    assert sum(reasons.values()) == 8
    # Logged with the reason, and the actor still serves.
    assert any("dead letter" in line and "unknown message type id 424242" in line
               for line in log_lines)
    node.tell(checker, Seq("after", 0))
    assert wait_for(lambda: node.ask(checker, GetState())["count"] == 1)


def test_a_gateway_in_the_loop_refuses_what_the_mailbox_would(
    nodes: list[Node], tmp_path: Path
) -> None:
    """Frames from another node for an actor of the gateway's loop skip the mailbox; the
    bad ones still become dead letters, the actor still serves, and a frame for an actor
    with a thread of its own still goes to its mailbox."""
    port = free_port("127.0.0.1")
    directory = Directory({"gl": NodeEndpoint("127.0.0.1", port, str(tmp_path))})
    node = Node("gl", directory=directory, max_frame_bytes=64 * 1024).start(gateway=False)
    nodes.append(node)
    checker = node.spawn(OrderChecker, "checker")
    node.start_gateway(host="checker")
    node.spawn(OrderChecker, "apart")  # a thread of its own

    def frame(receiver: str, n: int) -> bytes:
        return msgpack.packb([FORMAT_VERSION, "other", "t", receiver,
                              [[9001, 0, 0, 0, 0, 0, ["t", n]]]])

    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    push.send_multipart([b"checker", b"\xc1 this is not msgpack"])
    push.send_multipart([b"checker", msgpack.packb([FORMAT_VERSION, "x", "t", "checker",
                                                    [[424242, 0, 0, 0, 0, 0, ["x"]]]])])
    push.send_multipart([b"checker", b"\x00" * (65 * 1024)])
    push.send_multipart([b"ghost", frame("ghost", 0)])
    for n in range(3):
        push.send_multipart([b"checker", frame("checker", n)])
        push.send_multipart([b"apart", frame("apart", n)])
    push.close(linger=2000)
    ctx.term()

    reasons = wait_for(lambda: (r := node.dead_letters.by_reason()) and sum(r.values()) >= 4 and r)
    joined = " | ".join(reasons)
    for expected in ("undecodable frame", "unknown message type id", "frame of",
                     "no actor named 'ghost'"):
        assert expected in joined, (expected, reasons)
    for name in ("checker", "apart"):
        state = wait_for(lambda n=name: (st := node.ask(Address("gl", n), GetState()))["count"]
                         == 3 and st)
        assert state["out_of_order"] == 0 and state["last"] == {"t": 2}
    gateway = node.actor("_gateway")
    assert "checker" in gateway._local and list(gateway._fwd) == ["apart"]
    assert sum(node.dead_letters.by_reason().values()) == 4
    node.tell(checker, Seq("after", 0))
    assert wait_for(lambda: node.ask(checker, GetState())["count"] == 4)


# ----------------------------------------------------------------- supervision
def test_crashing_handler_is_restarted_and_handles_the_next_message(
    nodes: list[Node], log_lines: list[str]
) -> None:
    node = Node("sup").start()
    nodes.append(node)
    fragile = node.spawn(Fragile, "fragile")
    node.tell(fragile, Seq("x", 0))
    node.tell(fragile, Boom("kaboom"))
    node.tell(fragile, Seq("x", 1))
    state = wait_for(lambda: (st := node.ask(fragile, GetState()))["handled"] == 1 and st)
    # setup() ran again: state rebuilt (handled counts only the message after the crash)
    assert state["setups"] == 2
    assert node.metrics.get("actor_crashes") == 1
    assert node.metrics.get("actor_restarts") == 1
    assert any("crashed handling Boom" in line and "kaboom" in line for line in log_lines)
    # An ask that crashes the handler reports the error to the asker.
    with pytest.raises(AskFailed, match="kaboom-2"):
        node.ask(fragile, Boom("kaboom-2"))
    assert node.ask(fragile, GetState())["setups"] == 3


def test_ask_times_out_when_nobody_answers(node: Node) -> None:
    GATE.clear()
    slow = node.spawn(SlowReceiver, "slow")
    # The handler holds until the gate opens, and only this test opens it, after
    # the ask: the ask can only raise if it gave up without the answer.
    with pytest.raises(AskTimeout, match=r"^no answer from slow@t to Hold in 0.1 s$"):
        node.ask(slow, Hold(30.0), timeout=0.1)
    GATE.set()
    assert node.ask(slow, Nap(0.0), timeout=5) is True  # the late answer did not confuse it


# -------------------------------------------------------------------- shutdown
@pytest.mark.multiprocess
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_node_cleanly_without_losing_in_flight_messages(tmp_path: Path,
                                                                    sig: int) -> None:
    port = free_port("127.0.0.1")
    spec = f"p=127.0.0.1:{port};"
    result = str(tmp_path / "result")
    proc = NodeProcess("pipeline", "p", spec, result)
    time.sleep(1.0)  # let the pump fill the small mailboxes of the chain
    assert proc.stop(sig) == 0
    pumped = int(Path(result + ".pump").read_text())
    sunk = int(Path(result + ".sink").read_text())
    assert pumped > 1000
    assert sunk == pumped


def test_env_has_loopback_aliases() -> None:
    """Tests use 127.0.0.2/3 as 'other hosts'; Linux routes all of 127/8 to lo."""
    for host in ("127.0.0.2", "127.0.0.3"):
        with socket.socket() as s:
            s.bind((host, 0))
    assert os.name == "posix"


def test_an_actor_stopped_and_spawned_again_gets_what_is_sent_to_its_name(
        nodes: list[Node]) -> None:
    """Node.stop_actor (an idle replica fetcher): the name can be spawned again, and the
    senders that had a socket to the old mailbox (an actor, the node's own tell) reach
    the new one (an inproc socket never reconnects: the stale link is replaced)."""
    node = Node("again").start()
    nodes.append(node)
    sender = node.spawn(Sender, "s")
    checker = node.spawn(OrderChecker, "checker")
    node.ask(sender, SendSeq(100, "again", "checker"))
    node.tell(checker, Seq("outside", 0))
    wait_for(lambda: node.ask(checker, GetState())["count"] == 101)
    assert node.stop_actor("checker")
    assert node.actors["checker"].actor_stopped.is_set()
    assert node.stop_actor("checker")  # already stopped: nothing to do
    node.spawn(OrderChecker, "checker")
    node.ask(sender, SendSeq(50, "again", "checker"))
    node.tell(checker, Seq("outside", 0))
    state = wait_for(lambda: (st := node.ask(checker, GetState()))["count"] == 51 and st)
    assert state["last"] == {"s": 49, "outside": 0}
    # the name is free the moment stop_actor returns: ZeroMQ frees an inproc name only
    # when its reaper thread gets to a closed socket, which lost this race now and then
    for _ in range(300):
        node.ask(sender, SendSeq(1, "again", "checker"))  # a peer linked to the mailbox
        assert node.stop_actor("checker")
        node.spawn(OrderChecker, "checker")


def test_a_node_whose_actor_was_spawned_again_quiesces(nodes: list[Node]) -> None:
    """What the stopped actor took still balances what was sent to it once a namesake
    replaced it (a replica fetcher stopped idle and spawned again): quiesce, and with it
    every shutdown of such a node, waited its whole timeout for those messages."""
    node = Node("respawned").start()
    nodes.append(node)
    sender = node.spawn(Sender, "s")
    checker = node.spawn(OrderChecker, "checker")
    node.ask(sender, SendSeq(100, "respawned", "checker"))
    node.tell(checker, Seq("outside", 0))
    wait_for(lambda: node.ask(checker, GetState())["count"] == 101)
    assert node.quiesce(timeout=10)
    assert node.stop_actor("checker")
    node.spawn(OrderChecker, "checker")
    assert node.quiesce(timeout=10)
    node.ask(sender, SendSeq(5, "respawned", "checker"))
    wait_for(lambda: node.ask(checker, GetState())["count"] == 5)
    assert node.quiesce(timeout=10)


def _linked_checker(nodes: list[Node], name: str,
                    kind: type[OrderChecker]) -> tuple[Node, Any, Any]:
    """A node of a Sender "s" and a ``kind`` "checker", each of the sender's and this
    thread's links to the checker made (one message each, both taken)."""
    node = Node(name).start()
    nodes.append(node)
    sender = node.spawn(Sender, "s")
    checker = node.spawn(kind, "checker")
    node.ask(sender, SendSeq(1, name, "checker"))  # the sender's link
    node.tell(checker, Seq("outside", 0))  # this thread's link
    wait_for(lambda: node.ask(checker, GetState())["count"] == 2)
    return node, sender, checker


def test_what_is_sent_to_a_stopped_mailbox_is_dead_letters_and_asks_fail_at_once(
        nodes: list[Node]) -> None:
    """Frames sent to an actor's mailbox after it stopped, through links made before
    (an actor's, this thread's), went into the pipe ZeroMQ's reaper had not ended yet
    and were lost: no dead letter, and quiesce waited its whole timeout for them. Each
    is a dead letter now, counted by message; an ask through such a link fails at once
    (it waited its timeout); the node still quiesces."""
    node, sender, checker = _linked_checker(nodes, "stopped-mailbox", OrderChecker)
    assert node.stop_actor("checker")
    for i in range(1, 21):
        node.tell(checker, Seq("outside", i))
    node.ask(sender, SendSeq(30, "stopped-mailbox", "checker"))
    started = time.monotonic()
    with pytest.raises(AskFailed, match="stopped"):
        node.ask(checker, GetState(), timeout=30)
    assert time.monotonic() - started < 5
    stopped = f"actor {checker} stopped"
    assert wait_for(lambda: node.dead_letters.by_reason().get(stopped) == 51,
                    timeout=10), node.dead_letters.by_reason()
    assert node.quiesce(timeout=5)
    assert node.dead_letters.by_reason() == {stopped: 51}



def test_broken_ask_entries_sent_to_a_stopped_mailbox_are_only_dead_letters(
        nodes: list[Node]) -> None:
    """A frame naming this node's ask sender whose entries are not entries (a short
    list, a string, an ask id that is no int; a broken or forged frame), sent to a
    stopped mailbox: each is a dead letter, and looking for asks to fail among them
    raises nothing (an IndexError escaped into the sender, or into the stop's drain,
    which then skipped its unbind and close)."""
    node, _sender, checker = _linked_checker(nodes, "broken-asks", OrderChecker)
    assert node.stop_actor("checker")
    broken = [[1, 2], "x", [0, 0, 0, 0, 0, "7"], [0, 0, 0, 0, 0, None, 0]]
    node.send_raw(checker, msgpack.packb([FORMAT_VERSION, node.name, "_asks", "checker",
                                          broken]))
    assert node.dead_letters.by_reason() == {f"actor {checker} stopped": 4}


class _HeldInTeardown(OrderChecker):
    """An OrderChecker whose stop waits in its teardown until ``go`` is set: its loop is
    past its last look at the mailbox, which is not closed yet."""

    def setup(self) -> None:
        super().setup()
        self.in_teardown = threading.Event()
        self.go = threading.Event()

    def teardown(self) -> None:
        self.in_teardown.set()
        self.go.wait(30)


def test_what_is_in_a_mailbox_its_stop_did_not_read_is_dead_letters(
        nodes: list[Node]) -> None:
    """Frames that reached an actor's mailbox after its loop's last look and before its
    stop closed it (a sender's send racing the stop): the stop reads them out as dead
    letters, counted by message; an ask among them fails at once, and the node
    quiesces. Here the stop is held in the actor's teardown while an actor of another
    loop (30 messages in one frame) and this thread (20 tells and an ask) send."""
    node, sender, checker = _linked_checker(nodes, "drained", _HeldInTeardown)
    held = node.actors["checker"]
    assert isinstance(held, _HeldInTeardown)
    stopper = threading.Thread(target=node.stop_actor, args=("checker", 30), daemon=True)
    stopper.start()
    assert held.in_teardown.wait(10)

    s = node.actors["s"]
    sent_by_s = s.sent_local
    node.ask(sender, SendSeq(30, "drained", "checker"))
    assert wait_for(lambda: s.sent_local >= sent_by_s + 30)  # in the mailbox, unread
    external = node._external_sent
    for i in range(1, 21):
        node.tell(checker, Seq("outside", i))
    failures: list[tuple[BaseException, float]] = []

    def ask_it() -> None:
        try:
            node.ask(checker, GetState(), timeout=20)
        except Exception as exc:
            failures.append((exc, time.monotonic()))

    asker = threading.Thread(target=ask_it, daemon=True)
    asker.start()
    assert wait_for(lambda: node._external_sent == external + 21)  # the ask is in it too
    assert not node.dead_letters.by_reason()

    held.go.set()
    released = time.monotonic()
    stopper.join(20)
    asker.join(20)
    assert not stopper.is_alive() and not asker.is_alive()
    [(exc, failed_at)] = failures
    assert isinstance(exc, AskFailed) and "stopped" in str(exc), exc
    assert failed_at - released < 5
    stopped = f"actor {checker} stopped"
    assert node.dead_letters.by_reason() == {stopped: 51}
    assert node.quiesce(timeout=5)


class _GivesUpAtSeq3(Actor):
    """Crashes on Seq 3, and supervision gives up at the first crash."""

    max_restarts = 0

    def setup(self) -> None:
        self.handled = 0

    @handles(Seq)
    def on_seq(self, msg: Seq) -> None:
        if msg.n == 3:
            raise RuntimeError("Seq 3")
        self.handled += 1


def test_what_follows_in_its_frame_when_supervision_gives_up_is_dead_letters(
        nodes: list[Node]) -> None:
    """Supervision stops an actor in the middle of a frame (10 messages from an actor of
    another loop, the 4th crashes it): the 6 after it are dead letters, counted as taken,
    so the node quiesces."""
    node = Node("gives-up").start()
    nodes.append(node)
    sender = node.spawn(Sender, "s")
    fragile = node.spawn(_GivesUpAtSeq3, "fragile")
    node.ask(sender, SendSeq(10, "gives-up", "fragile"))
    assert wait_for(lambda: node.actors["fragile"].actor_stopped.is_set())
    # the stop is seen before the rest of the frame is counted (its loop counts them
    # after supervision's stop returns): waited for, then the count must be exact
    stopped = f"actor {fragile} stopped"
    wait_for(lambda: stopped in node.dead_letters.by_reason(), "the dead letters counted")
    assert node.dead_letters.by_reason() == {stopped: 6}
    assert node.quiesce(timeout=5)


def test_an_ask_that_follows_in_its_frame_when_supervision_gives_up_fails_at_once(
        nodes: list[Node]) -> None:
    """As above, with an ask of the node among what follows the crash: it fails at
    once, not after its timeout. (The node sends each ask in a frame of its own: this
    frame is made by hand.)"""
    node = Node("gives-up-ask").start()
    nodes.append(node)
    fragile = node.spawn(_GivesUpAtSeq3, "fragile")
    ask_id = next(node._ask_ids)
    pending = _Pending()
    node._pending[ask_id] = pending
    entries = [new_entry(registry.type_id_of(Seq), 0, 0, 0, 0, 0, Seq("x", n))
               for n in range(5)]
    entries.insert(4, new_entry(registry.type_id_of(GetState), 0, 0, 0, 0, ask_id,
                                GetState()))
    [frame], _refused = encode_frames(node.name, "_asks", "fragile", entries,
                                      node.max_frame_bytes)
    node.send_raw(fragile, frame)
    assert pending.event.wait(5), "the ask waited for its timeout"
    assert pending.reply is not None and not pending.reply.ok
    assert pending.reply.value == f"actor {fragile} stopped"
    assert node.dead_letters.by_reason() == {f"actor {fragile} stopped": 2}


def send_a_late_answer(node: Node, link: Any, checker: Address) -> None:
    """A late answer through ``link`` (reaching the closed mailbox of ``checker``'s old
    actor), from a thread of its own: the send ends (it does not wait on a mailbox that
    is gone) and is one dead letter, refused by the old mailbox's stop flag. The reason
    is what the last assert tells apart: without the flag, the send was refused later,
    by the wait for a full link that finds its receiver gone, a dead letter "stopped
    while a frame waited for it" (this helper sent up to 100 + 100,000 frames until
    one was)."""
    sender = threading.Thread(target=node._send_frame, args=(link, checker, b"late answer"),
                              daemon=True)
    sender.start()
    sender.join(60)
    assert not sender.is_alive(), "the send waited on a mailbox that no longer exists"
    assert node.dead_letters.by_reason() == {f"actor {checker} stopped": 1}


def test_a_send_refused_by_a_stopped_mailbox_ends_though_its_name_runs_again(
        nodes: list[Node]) -> None:
    """An idle replica fetcher stopped and started again at once, while a shard's answer
    to it was on its way: the shard's link, found fresh just before the old mailbox
    closed, has its send refused, and by then the new fetcher runs. The frame is a dead
    letter. Waiting until that name's actor takes it never ended (an inproc socket never
    reconnects; the new actor never reads the old socket): the shard's loop, and every
    actor it hosts, hung, and a node that got SIGTERM then never stopped. Here the send
    is placed in that window: after the link was made, the stop and the spawn again."""
    node = Node("again-race").start()
    nodes.append(node)
    checker = node.spawn(OrderChecker, "checker")
    node.tell(checker, Seq("outside", 0))  # this thread's link to the first mailbox
    wait_for(lambda: node.ask(checker, GetState())["count"] == 1)
    link = node._thread_links.links[checker]
    assert node.stop_actor("checker")
    node.spawn(OrderChecker, "checker")
    send_a_late_answer(node, link, checker)
    node.tell(checker, Seq("outside", 1))  # the name's new actor, through a new link
    assert wait_for(lambda: node.ask(checker, GetState())["last"] == {"outside": 1})


def test_a_link_made_while_its_actor_is_replaced_never_waits_on_the_new_one(
        nodes: list[Node]) -> None:
    """The link's socket connects to the old mailbox, and before the link learns its
    target the old actor stops and a new one of that name binds. Had the target been
    read after the connect, it was the new, live actor while the pipe reached the
    closed mailbox: every refused send saw its target alive and waited for good. Read
    before, the target is the old actor: a refused send is a dead letter."""
    node = Node("link-race").start()
    nodes.append(node)
    checker = node.spawn(OrderChecker, "checker")

    class ReplacedOnConnect(zmq.Socket):  # type: ignore[type-arg]
        def connect(self, addr: str) -> Any:
            result = super().connect(addr)
            assert node.stop_actor("checker")
            node.spawn(OrderChecker, "checker")
            return result

    sock = ReplacedOnConnect(node.context, zmq.PUSH)
    link = node._link_on(sock, checker)

    send_a_late_answer(node, link, checker)
    sock.close(linger=0)


_setup_gate = threading.Event()


class _SlowToSetUp(OrderChecker):
    """A small mailbox, and a setup that waits for the test's word."""
    mailbox_size = 1

    def setup(self) -> None:
        super().setup()
        assert _setup_gate.wait(20)


def test_a_send_to_an_actor_in_its_setup_waits_though_its_stopped_namesake_is_known(
        nodes: list[Node]) -> None:
    """A link made while the name's new actor is in its setup reaches its mailbox; the
    node's registry still holds the stopped namesake. A refused send must wait for the
    link's own actor (alive), not be dead-lettered because the registry's one stopped."""
    node = Node("setup-race").start()
    nodes.append(node)
    _setup_gate.set()
    old = node.spawn(_SlowToSetUp, "slow")
    assert node.stop_actor("slow")
    _setup_gate.clear()
    spawner = threading.Thread(target=node.spawn, args=(_SlowToSetUp, "slow"), daemon=True)
    spawner.start()
    try:
        assert wait_for(lambda: node.mailboxes.get("slow") not in (None, node.actors["slow"]))

        link = node._new_link(old)  # as the gateway's: to the mailbox bound now

        def send_many() -> None:  # more than the mailbox and the link's queue hold
            for _ in range(300):
                node._send_frame(link, old, b"for the new actor")

        sender = threading.Thread(target=send_many, daemon=True)
        sender.start()
        assert wait_for(lambda: node.metrics.snapshot().get("mailbox_full_waits", 0) > 0
                        or not sender.is_alive())
    finally:
        _setup_gate.set()
    spawner.join(20)
    sender.join(20)
    assert not sender.is_alive()
    link.sock.close(linger=0)
    assert not any("stopped" in reason
                   for reason in node.dead_letters.by_reason()), node.dead_letters.by_reason()


class _AsksOnStart(OrderChecker):
    """Has a Sender send it one Seq as soon as it is set up."""

    def setup(self) -> None:
        super().setup()
        self.tell(Address(self.node.name, "s"), SendSeq(1, self.node.name, self.name))


def test_an_actor_is_reachable_by_name_the_moment_it_runs(
        nodes: list[Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """What an actor sets up may be answered before the spawning thread runs again (an
    Acceptor's first connection closing, its Processor telling the Acceptor): the answer
    reaches it, not dead letters. The spawning thread is held after the ready signal."""
    node = Node("early").start()
    nodes.append(node)
    node.spawn(Sender, "s")

    class LateEvent(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            done = super().wait(timeout)
            time.sleep(0.3)  # the spawning thread is slow to take its turn
            return done

    monkeypatch.setattr(node, "_new_ready_event", LateEvent)
    checker = node.spawn(_AsksOnStart, "checker")
    state = wait_for(lambda: (st := node.ask(checker, GetState()))["count"] == 1 and st)
    assert state["last"] == {"s": 0}
    assert node.dead_letters.total == 0, node.dead_letters.by_reason()


def test_a_socket_left_open_does_not_hang_the_shutdown(log_lines: list[str]) -> None:
    """ZeroMQ's term waits for every socket; one left open is named and closed instead."""
    node = Node("leaky").start()
    leaked = node.context.socket(zmq.PUSH)
    leaked.connect("inproc://nowhere")
    started = time.monotonic()
    node.shutdown(timeout=1)
    assert time.monotonic() - started < 10
    assert leaked.closed
    assert any("1 ZeroMQ socket(s) still open" in line and "inproc://nowhere" in line
               for line in log_lines), log_lines[-5:]


def _shutdown_with_messages_for_a_dead_node(tmp_path: Path, forget: bool) -> float:
    """A node whose actor and whose external thread sent to a node nobody serves (a
    process of the broker that exited): how long its shutdown takes."""
    ipc_dir = str(tmp_path)
    directory = Directory({"here": NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), ipc_dir),
                           "gone": NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), ipc_dir)})
    node = Node("here", directory=directory).start()
    try:
        sender = node.spawn(Sender, "sender")
        assert node.ask(sender, SendSeq(5, "gone", "checker")) == 5
        node.tell(Address("gone", "checker"), Seq("external", 0))
        if forget:
            directory.forget("gone")  # the node left: nothing queued for it will be read
    finally:
        started = time.monotonic()
        node.shutdown(timeout=5)
    return time.monotonic() - started


def test_links_to_a_node_that_left_do_not_hold_up_the_shutdown(tmp_path: Path) -> None:
    """A link closes lingering (1 s) so a live peer still gets what was sent; to a node
    the directory no longer has, it closes at once: waiting there is for nothing."""
    assert _shutdown_with_messages_for_a_dead_node(tmp_path / "kept", forget=False) >= 0.95
    assert _shutdown_with_messages_for_a_dead_node(tmp_path / "left", forget=True) < 0.9


def test_an_actor_that_does_not_wait_on_remote_links_goes_on_when_one_takes_nothing(
        tmp_path: Path) -> None:
    """The gateway's pings share a worker loop with the request path: a peer whose link
    takes nothing (a refused CURVE handshake, a full pipe) must not hold that loop. Such
    an actor's sends there are dead letters, logged once for the node; one that waits
    (the default) would still be sending the 101st frame."""
    ipc_dir = str(tmp_path)
    directory = Directory({"here": NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), ipc_dir),
                           "mute": NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), ipc_dir)})
    node = Node("here", directory=directory).start()
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        sender = node.spawn(AdvisorySender, "advisory")
        # a link holds 100 frames (SNDHWM) for a peer nobody serves: 250 overflow it
        assert node.ask(sender, SendSeq(250, "mute", "x"), timeout=10) == 250
        assert node.ask(sender, SendSeq(50, "mute", "x"), timeout=10) == 50
        reasons = node.dead_letters.by_reason()
        assert sum(n for r, n in reasons.items() if r.startswith("link to node mute")) >= 150
        logged = [line for line in lines if "link to node mute takes nothing" in line]
        assert len(logged) == 1, logged
    finally:
        logger.remove(sink)
        node.shutdown(timeout=5)


# ------------------------------------------------------ a node that registers again
def two_nodes(nodes: list[Node], tmp_path: Path) -> tuple[Node, Node, NodeEndpoint]:
    """Node a (a Sender) and node b (an OrderChecker) over tcp, each with a directory of
    its own, as cluster nodes have; b's endpoint as a's directory holds it."""
    endpoints = {n: NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), incarnation="1")
                 for n in ("a", "b")}
    a = Node("a", directory=Directory(dict(endpoints))).start()
    nodes.append(a)
    b = Node("b", directory=Directory(dict(endpoints))).start()
    nodes.append(b)
    a.spawn(Sender, "sender")
    a.spawn(Sender, "sender2")
    b.spawn(OrderChecker, "checker")
    return a, b, endpoints["b"]


def checked(b: Node) -> dict[str, Any]:
    return b.ask(Address("b", "checker"), GetState())  # type: ignore[no-any-return]


def dead_from(node: Node, sender: str, why: str = "") -> int:
    """Records of dead letters of ``sender``'s (among the last hundred) whose reason has
    ``why`` in it."""
    return sum(1 for reason, s, _r in node.dead_letters.last
               if s == f"{sender}@{node.name}" and why in reason)


def no_route(node: Node, receiver: str) -> int:
    """Dead letters to ``receiver`` for want of a route, all told."""
    return node.dead_letters.by_reason().get(f"no route to actor {receiver}", 0)


def test_messages_to_a_node_that_may_register_again_wait_for_it(
        nodes: list[Node], tmp_path: Path) -> None:
    """A node forgotten with may_return (its registration went: a ZooKeeper session
    expired) gets, once learnt again as the same process, what was sent to it meanwhile,
    in order; none is a dead letter. A node forgotten for good gets nothing, at once
    dead letters."""
    a, b, b_endpoint = two_nodes(nodes, tmp_path)
    assert a.ask(Address("a", "sender"), SendSeq(10, "b", "checker")) == 10
    wait_for(lambda: checked(b)["count"] == 10, timeout=10)
    a.directory.forget("b", may_return=True)
    assert a.ask(Address("a", "sender2"), SendSeq(500, "b", "checker")) == 500
    time.sleep(0.3)  # the sender's loop looks every 20 ms: still held, none lost
    assert checked(b)["count"] == 10
    assert dead_from(a, "sender2") == 0
    # registered again (the same gateway, the same process: it ran on)
    a.directory.learn("b", NodeEndpoint(b_endpoint.host, b_endpoint.port, incarnation="1"))
    state = wait_for(lambda: (st := checked(b))["count"] == 510 and st, timeout=10)
    assert state["out_of_order"] == 0 and state["last"] == {"sender": 9, "sender2": 499}
    assert dead_from(a, "sender2") == 0
    a.directory.forget("b")  # left for good
    assert not a.directory.departed
    assert a.ask(Address("a", "sender"), SendSeq(7, "b", "checker")) == 7
    wait_for(lambda: ("no route to actor checker@b", "sender@a", "")
             in a.dead_letters.last, timeout=10)


@pytest.mark.multiprocess
def test_what_waited_for_a_node_is_not_given_to_its_next_process(
        nodes: list[Node], tmp_path: Path) -> None:
    """A node forgotten with may_return that comes back as a new process (restarted on
    the same host and port, a new incarnation): what was held for the old process is
    dead letters, not delivered to the new one (whose ids for matching answers start
    again); what is sent after reaches the new process."""
    endpoints = {n: NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), incarnation="1")
                 for n in ("a", "b")}
    a = Node("a", directory=Directory(dict(endpoints))).start()
    nodes.append(a)
    a.spawn(Sender, "sender")
    spec = spec_of(a.directory)
    checker = Address("b", "checker")
    b = NodeProcess("checker", "b", spec)
    try:
        assert a.ask(Address("a", "sender"), SendSeq(10, "b", "checker")) == 10
        wait_for(lambda: a.ask(checker, GetState())["count"] == 10, timeout=20)
        a.directory.forget("b", may_return=True)
        assert a.ask(Address("a", "sender"), SendSeq(30, "b", "checker")) == 30
    finally:
        assert b.stop() == 0
    b = NodeProcess("checker", "b", spec)  # the same gateway, a new process
    try:
        a.directory.learn("b", NodeEndpoint("127.0.0.1", endpoints["b"].port,
                                            incarnation="2"))
        wait_for(lambda: dead_from(a, "sender", "registered again as a new process") == 1,
                 timeout=20)
        assert no_route(a, "checker@b") == 30
        assert not a.actor("sender")._departed_out
        assert a.ask(Address("a", "sender"), SendSeq(5, "b", "checker")) == 5
        state = wait_for(lambda: (st := a.ask(checker, GetState()))["count"] >= 5 and st,
                         timeout=20)
        # the held 30 would have come first (in order), numbered 10.. after the first 10
        assert state == {"count": 5, "out_of_order": 0, "last": {"sender": 4}}
    finally:
        assert b.stop() == 0


def test_messages_to_a_departed_node_are_dead_letters_after_the_hold(
        nodes: list[Node], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A departed node that does not register again within the hold: what waited for it
    (held, not dropped at once: the reason says so) is counted as dead letters, not
    kept."""
    monkeypatch.setattr("actors.runtime.actor._HOLD_NS", 300_000_000)
    a, b, _ = two_nodes(nodes, tmp_path)
    a.directory.forget("b", may_return=True)
    assert a.ask(Address("a", "sender"), SendSeq(25, "b", "checker")) == 25
    wait_for(lambda: not a.actor("sender")._departed_out, timeout=10)
    assert [(reason, count) for reason, count in a.dead_letters.by_reason().items()
            if reason == "no route to actor checker@b"] == [("no route to actor checker@b", 25)]
    assert dead_from(a, "sender", "did not register again within") == 1
    assert checked(b)["count"] == 0


def test_what_a_stopping_actor_held_for_a_departed_node_is_dead_letters(
        nodes: list[Node], tmp_path: Path) -> None:
    a, b, _ = two_nodes(nodes, tmp_path)
    a.directory.forget("b", may_return=True)
    assert a.ask(Address("a", "sender"), SendSeq(25, "b", "checker")) == 25
    assert a.stop_actor("sender")
    assert dead_from(a, "sender", "the sender stopped while its node was away") == 1
    assert no_route(a, "checker@b") == 25
    assert checked(b)["count"] == 0


def test_more_than_the_held_maximum_for_a_departed_node_is_dead_letters(
        nodes: list[Node], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("actors.runtime.actor._HELD_MAX", 10)
    a, b, b_endpoint = two_nodes(nodes, tmp_path)
    a.directory.forget("b", may_return=True)
    assert a.ask(Address("a", "sender"), SendSeq(25, "b", "checker")) == 25
    wait_for(lambda: dead_from(a, "sender", "held for it while its node was away") == 1,
             timeout=10)
    assert no_route(a, "checker@b") == 25
    assert not a.actor("sender")._departed_out
    a.directory.learn("b", b_endpoint)
    assert a.ask(Address("a", "sender"), SendSeq(3, "b", "checker")) == 3
    wait_for(lambda: checked(b)["count"] == 3, timeout=10)


class Interleaved(dict[str, NodeEndpoint]):
    """One of a Directory's dicts that, the first time a reader looks ``name`` up by
    ``how`` ("in" or "get"), first runs ``between`` (a write of the ClusterController's
    thread) and then answers: a write landing between a reader's two reads, every time."""

    def __init__(self, entries: dict[str, NodeEndpoint], name: str, how: str,
                 between: Any) -> None:
        super().__init__(entries)
        self.armed = (name, how)
        self.between = between
        self.ran = threading.Event()

    def _look(self, key: object, how: str) -> None:
        if self.armed == (key, how):
            self.armed = ("", "")  # once; the write itself reads this dict too
            self.between()
            self.ran.set()

    def __contains__(self, key: object) -> bool:
        self._look(key, "in")
        return super().__contains__(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self._look(key, "get")
        return super().get(key, default)


def test_a_reader_always_finds_a_node_in_the_directory_or_among_the_departed(
        nodes: list[Node], tmp_path: Path) -> None:
    """What waited for a departed node is looked at with two reads without a lock: its
    entry, then ``departed``. The node learnt again as the same process between the two
    (learn sets the entry, then drops it from departed: it is in neither at the second
    read) gets what waited, not dead letters for a node forgotten for good."""
    a, b, b_endpoint = two_nodes(nodes, tmp_path)
    a.directory.forget("b", may_return=True)
    assert a.ask(Address("a", "sender"), SendSeq(20, "b", "checker")) == 20
    wait_for(lambda: bool(a.actor("sender")._departed_out), timeout=10)
    hook = Interleaved(a.directory.departed, "b", "in",
                       lambda: a.directory.learn("b", b_endpoint))
    a.directory.departed = hook
    wait_for(hook.ran.is_set, timeout=10)
    state = wait_for(lambda: (st := checked(b))["count"] == 20 and st, timeout=10)
    assert state["out_of_order"] == 0
    assert dead_from(a, "sender") == 0


def test_a_node_learnt_again_as_a_sender_finds_it_gone_gets_what_is_sent(
        nodes: list[Node], tmp_path: Path) -> None:
    """A sender finds no entry for a departed node, then no ``departed`` either: learnt
    again in between (the same process). What it sends is held and sent, not dead
    letters for an unknown node."""
    a, b, b_endpoint = two_nodes(nodes, tmp_path)
    a.directory.forget("b", may_return=True)
    hook = Interleaved(a.directory.departed, "b", "get",
                       lambda: a.directory.learn("b", b_endpoint))
    a.directory.departed = hook
    assert a.ask(Address("a", "sender"), SendSeq(20, "b", "checker")) == 20
    assert hook.ran.is_set()
    state = wait_for(lambda: (st := checked(b))["count"] == 20 and st, timeout=10)
    assert state["out_of_order"] == 0
    assert dead_from(a, "sender") == 0


def test_what_waited_is_not_sent_on_a_link_made_to_a_new_process(
        nodes: list[Node], tmp_path: Path) -> None:
    """Sending again to a departed node, a sender reads no entry (what waited goes first),
    then the node is learnt again as a new process before the link is made from the
    directory: what waited is dead letters (meant for the old process); only what was
    sent now goes on the link."""
    a, b, b_endpoint = two_nodes(nodes, tmp_path)
    a.directory.forget("b", may_return=True)
    assert a.ask(Address("a", "sender"), SendSeq(20, "b", "checker")) == 20
    wait_for(lambda: bool(a.actor("sender")._departed_out), timeout=10)
    restarted = NodeEndpoint(b_endpoint.host, b_endpoint.port, incarnation="2")
    hook = Interleaved(a.directory.nodes, "b", "in",
                       lambda: a.directory.learn("b", restarted))
    a.directory.nodes = hook
    assert a.ask(Address("a", "sender"), SendSeq(5, "b", "checker")) == 5
    assert hook.ran.is_set()
    wait_for(lambda: dead_from(a, "sender", "registered again as a new process") == 1,
             timeout=10)
    assert no_route(a, "checker@b") == 20
    state = wait_for(lambda: (st := checked(b))["count"] >= 5 and st, timeout=10)
    assert state == {"count": 5, "out_of_order": 0, "last": {"sender": 4}}


# --------------------------------- answers to a process of a node not registered yet
def restarted_pair(nodes: list[Node], b_incarnation: str) -> tuple[Node, Node]:
    """a lists b as process "1"; b runs as process ``b_incarnation`` (restarted, its
    registration not read by a), and its frames say so. a runs an OrderChecker."""
    endpoints = {"a": NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), incarnation="a1"),
                 "b": NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), incarnation="1")}
    a = Node("a", directory=Directory(dict(endpoints))).start()
    nodes.append(a)
    a.spawn(OrderChecker, "checker")
    restarted = NodeEndpoint("127.0.0.1", endpoints["b"].port, incarnation=b_incarnation)
    b = Node("b", directory=Directory({"a": endpoints["a"], "b": restarted})).start()
    nodes.append(b)
    return a, b


def asking(b: Node, answers: list[Any], timeout: float = 20) -> threading.Thread:
    def ask() -> None:
        try:
            answers.append(b.ask(Address("a", "checker"), GetState(), timeout=timeout))
        except Exception as exc:  # said by the assertions
            answers.append(exc)
    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("listed", [False, True], ids=["departed", "old-process-listed"])
def test_an_answer_to_a_process_not_registered_yet_waits_for_its_registration(
        nodes: list[Node], listed: bool) -> None:
    """Node b restarted (process "2") asks a before a has read its new registration: a
    holds b as departed, or still lists the old process. The answer is held for the
    process that asked (its frame names it), one re-read of the registrations is asked
    for, and the answer goes once that process is listed: no dead letter, nothing sent
    to the old process."""
    a, b = restarted_pair(nodes, "2")
    if not listed:
        a.directory.forget("b", may_return=True)  # its session expired, as on a kill -9
    answers: list[Any] = []
    thread = asking(b, answers)
    checker = a.actor("checker")
    # observable: the answer waits in the checker, a re-read is asked for
    wait_for(lambda: any(addr.node == "b" and held[0] == b"2"
                         for addr, held in list(checker._origin_out.items())), timeout=10)
    assert a.directory.due_rereads() == ["b"]
    assert a.directory.reread_requests == 1
    assert not answers and a.dead_letters.total == 0
    a.directory.learn("b", NodeEndpoint("127.0.0.1", b.endpoint.port, incarnation="2"))
    a.directory.reread_done("b", True)
    thread.join(timeout=25)
    assert answers == [{"count": 0, "out_of_order": 0, "last": {}}]
    assert a.dead_letters.total == 0
    wait_for(lambda: not checker._origin_out, timeout=10)


def test_an_answer_to_a_process_never_registered_is_a_dead_letter_after_the_hold(
        nodes: list[Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame naming a process of b that never registers (a forged or stale one): the
    answer to it waits the hold, then is a dead letter; what a sends to b otherwise
    (not an answer to that frame) goes to the process listed at once."""
    monkeypatch.setattr("actors.runtime.actor._HOLD_NS", 1_000_000_000)
    a, b = restarted_pair(nodes, "bogus")
    answers: list[Any] = []
    thread = asking(b, answers, timeout=5)
    dead = ("no route to actor _asks@b (the process of its node that asked was not registered "
            "within 1000 ms)", "checker@a")
    wait_for(lambda: dead in [(r, s) for r, s, _r in a.dead_letters.last], timeout=20)
    assert not a.actor("checker")._origin_out
    thread.join(timeout=20)
    assert len(answers) == 1 and isinstance(answers[0], AskTimeout)  # its answer was dropped


def test_rereads_asked_for_by_held_answers_are_rate_limited(
        nodes: list[Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """Many frames from a process of b a does not list, each asking a question: their
    answers wait, but the keeper of a's directory is asked for at most one re-read of b
    at a time, and not twice within a second; a failed read is tried again later."""
    monkeypatch.setattr("actors.runtime.actor._HOLD_NS", 60_000_000_000)  # a slow machine
    a, b = restarted_pair(nodes, "bogus")
    answers: list[Any] = []
    threads = [asking(b, answers, timeout=40) for _ in range(40)]
    checker = a.actor("checker")
    wait_for(lambda: bool(checker._origin_out), timeout=10)
    # one asked for, none taken yet: however many answers wait, no second one is posted
    assert a.directory.reread_requests == 1
    # the keeper (here the test, as the controller would) reads: b is still process "1"
    started = time.monotonic()
    reads = 0
    failed = False
    while reads < 2 and time.monotonic() - started < 20:
        for name in a.directory.due_rereads():
            assert name == "b"
            reads += 1
            a.directory.reread_done(name, ok=failed)  # every other read fails
            failed = not failed
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    assert reads >= 2  # a failed read was tried again
    # without the limit every held answer (40), and every 20 ms look at them, asked;
    # with it: the first, then one a second at most
    assert a.directory.reread_requests <= 1 + int(elapsed) + 1, (a.directory.reread_requests,
                                                                 elapsed)
    a.directory.learn("b", NodeEndpoint("127.0.0.1", b.endpoint.port, incarnation="bogus"))
    for thread in threads:
        thread.join(timeout=30)
    assert len(answers) == 40 and all(type(x) is dict for x in answers), answers[:3]
    assert a.dead_letters.total == 0


def test_a_departed_node_is_forgotten_after_the_hold(
        nodes: list[Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that does not come back costs nothing after the hold: what is sent to it
    then is a dead letter at once (not held for another hold), and its entry among the
    departed goes at the directory's next change. The departed are bounded."""
    monkeypatch.setattr("actors.runtime.directory._HOLD_NS", 300_000_000)
    endpoints = {n: NodeEndpoint("127.0.0.1", free_port("127.0.0.1"), incarnation="1")
                 for n in ("a", "b")}  # b does not run
    a = Node("a", directory=Directory(dict(endpoints))).start()
    nodes.append(a)
    a.spawn(Sender, "sender")
    a.directory.forget("b", may_return=True)
    wait_for(lambda: a.directory.left_with("b") is None, timeout=10)  # the hold is over
    assert a.ask(Address("a", "sender"), SendSeq(25, "b", "checker")) == 25
    # dead letters in the sender's turn, before the ask's answer: none held
    assert not a.actor("sender")._departed_out
    assert no_route(a, "checker@b") == 25
    a.directory.learn("c", NodeEndpoint("127.0.0.1", 1, incarnation="1"))
    assert "b" not in a.directory.departed and "b" not in a.directory.departed_ns
    monkeypatch.setattr("actors.runtime.directory._HOLD_NS", 60_000_000_000)
    for i in range(1500):
        a.directory.learn(f"n{i}", NodeEndpoint("127.0.0.1", 1, incarnation="1"))
        a.directory.forget(f"n{i}", may_return=True)
    assert len(a.directory.departed) <= 1024 and len(a.directory.departed_ns) <= 1024
    assert "n1499" in a.directory.departed


@pytest.mark.parametrize("kept", [False, True], ids=["no-keeper", "kept"])
def test_an_answer_to_a_node_not_listed_at_all_waits_only_where_registrations_are_read(
        nodes: list[Node], kept: bool) -> None:
    """b is not in a's directory at all. Where something reads the registrations when
    asked (a cluster node's controller: ``Directory.kept``) the answer to b's frame waits
    for b's registration; elsewhere (a broker's other processes, whose directories list
    only each other) it is a dead letter at once, as before."""
    a, b = restarted_pair(nodes, "2")
    a.directory.forget("b")  # for good: not departed, not listed
    a.directory.kept = kept
    answers: list[Any] = []
    thread = asking(b, answers, timeout=10 if kept else 3)
    if not kept:
        wait_for(lambda: no_route(a, "_asks@b") == 1, timeout=10)
        thread.join(timeout=20)
        assert len(answers) == 1 and isinstance(answers[0], AskTimeout)
        assert a.directory.reread_requests == 0
        return
    checker = a.actor("checker")
    wait_for(lambda: bool(checker._origin_out), timeout=10)
    assert a.directory.reread_requests == 1 and a.dead_letters.total == 0
    a.directory.learn("b", NodeEndpoint("127.0.0.1", b.endpoint.port, incarnation="2"))
    thread.join(timeout=20)
    assert answers == [{"count": 0, "out_of_order": 0, "last": {}}]
    assert a.dead_letters.total == 0


def test_a_process_forgotten_for_the_next_one_is_remembered_as_earlier() -> None:
    """The cluster controller, reading a registration that names a new process, forgets
    the old one (for good) and learns the new: the old is then a known earlier process
    (its late frames' answers are dead letters at once), the new is not."""
    directory = Directory()
    directory.learn("b", NodeEndpoint("127.0.0.1", 9, incarnation="1"))
    directory.forget("b", may_return=False)
    directory.learn("b", NodeEndpoint("127.0.0.1", 9, incarnation="2"))
    assert directory.was_earlier("b", b"1")
    assert not directory.was_earlier("b", b"2")
    # and a process listed again is no longer an earlier one
    directory.learn("b", NodeEndpoint("127.0.0.1", 9, incarnation="1"))
    assert not directory.was_earlier("b", b"1") and directory.was_earlier("b", b"2")


def test_a_late_frame_of_an_earlier_process_delays_nothing_else(nodes: list[Node]) -> None:
    """a lists b as process "2" and knew it as "1" before; a late frame from "1" asks a's
    sender to send to b's checker. What goes to b's checker (not the asker) is sent at once
    to the process listed; the answer to the asker, a process known to be gone, is a dead
    letter at once (in the same turn), not held for the hold."""
    a, b = restarted_pair(nodes, "1")
    a.spawn(Sender, "sender")
    b.spawn(OrderChecker, "checker")
    a.directory.learn("b", NodeEndpoint("127.0.0.1", b.endpoint.port, incarnation="2"))
    assert a.directory.was_earlier("b", b"1")
    answers: list[Any] = []

    def ask() -> None:
        try:
            answers.append(b.ask(Address("a", "sender"), SendSeq(5, "b", "checker"), timeout=3))
        except Exception as exc:  # said by the assertions
            answers.append(exc)
    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    # without (a) all five were held for process "1" (dead letters after 10 s)
    state = wait_for(lambda: (st := checked(b))["count"] >= 5 and st, timeout=8)
    assert state == {"count": 5, "out_of_order": 0, "last": {"sender": 4}}
    # the answer went in the same turn as the five: a dead letter already, nothing held
    assert dead_from(a, "sender", "the process of its node that asked is gone") == 1
    assert not a.actor("sender")._origin_out
    thread.join(timeout=10)
    assert len(answers) == 1 and isinstance(answers[0], AskTimeout)


def _three_held_three_behind(nodes: list[Node]) -> tuple[Node, Node, Any]:
    """b's checker (process "2", a lists "1") asks a's numbered sender for Seq 0-2, held
    as answers to its frame; then a's own thread asks for 3-5, which queue behind them."""
    a, b = restarted_pair(nodes, "2")
    a.spawn(NumberedSender, "numbered")
    b.spawn(OrderChecker, "checker")
    b.tell(Address("a", "numbered"), SendSeq(3, "b", "checker"), sender="checker")
    numbered = a.actor("numbered")
    wait_for(lambda: Address("b", "checker") in numbered._origin_out, timeout=10)
    assert a.ask(Address("a", "numbered"), SendSeq(3, "b", "checker")) == 3
    return a, b, numbered


def test_what_is_sent_after_a_held_answer_does_not_overtake_it(nodes: list[Node]) -> None:
    """b's checker (process "2", a lists "1") asks a's numbered sender for Seq 0-2: they
    answer its frame and are held. Then a's own thread asks for 3-5 (no frame of b's):
    they wait behind 0-2, and b's checker gets 0-5 in order once a lists process "2"."""
    a, b, numbered = _three_held_three_behind(nodes)
    assert len(numbered._origin_out[Address("b", "checker")][2]) == 6
    a.directory.learn("b", NodeEndpoint("127.0.0.1", b.endpoint.port, incarnation="2"))
    state = wait_for(lambda: (st := checked(b))["count"] >= 6 and st, timeout=10)
    assert state == {"count": 6, "out_of_order": 0, "last": {"numbered": 5}}
    assert a.dead_letters.total == 0


def test_more_than_the_held_maximum_for_a_process_not_registered_is_dead_letters(
        nodes: list[Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers held for one receiver are bounded as those for a departed node are: past
    ``_HELD_MAX`` they are dead letters at once; the first ``_HELD_MAX`` go once a lists
    the process."""
    monkeypatch.setattr("actors.runtime.actor._HELD_MAX", 10)
    a, b = restarted_pair(nodes, "2")
    a.spawn(NumberedSender, "numbered")
    b.spawn(OrderChecker, "checker")
    b.tell(Address("a", "numbered"), SendSeq(25, "b", "checker"), sender="checker")
    wait_for(lambda: dead_from(a, "numbered", "held for it while its node was away") == 15,
             timeout=10)
    assert no_route(a, "checker@b") == 15
    assert len(a.actor("numbered")._origin_out[Address("b", "checker")][2]) == 10
    a.directory.learn("b", NodeEndpoint("127.0.0.1", b.endpoint.port, incarnation="2"))
    state = wait_for(lambda: (st := checked(b))["count"] >= 10 and st, timeout=10)
    assert state == {"count": 10, "out_of_order": 0, "last": {"numbered": 9}}


def test_a_restarted_actors_first_sends_are_not_held_for_the_frame_that_crashed_it(
        nodes: list[Node]) -> None:
    """A frame from b's checker (process "2", a lists "1") crashes a's announcer; its
    restart's setup tells b's checker a greeting. That greeting answers no frame: it goes
    to the process listed at once, not held for process "2" (which never registers here:
    it would be a dead letter after the hold)."""
    a, b = restarted_pair(nodes, "2")
    b.spawn(OrderChecker, "checker")
    a.spawn(Announcer, "announcer")
    wait_for(lambda: checked(b)["count"] == 1, timeout=10)  # the first setup's
    b.tell(Address("a", "announcer"), Boom("crash"), sender="checker")
    state = wait_for(lambda: (st := checked(b))["count"] >= 2 and st, timeout=8)
    assert state == {"count": 2, "out_of_order": 0, "last": {"announcer": 1}}
    assert not a.actor("announcer")._origin_out


def test_a_stopping_actor_drops_its_held_answers_and_sends_what_queued_behind_them(
        nodes: list[Node]) -> None:
    """Answers held for a process not registered yet are dead letters when their sender
    stops; what only queued behind them (a's own ask's, no answer to that process) goes
    to the process listed."""
    a, b, _numbered = _three_held_three_behind(nodes)
    assert a.stop_actor("numbered")
    assert dead_from(a, "numbered", "the sender stopped while its node was away") == 1
    assert no_route(a, "checker@b") == 3
    state = wait_for(lambda: (st := checked(b))["count"] >= 3 and st, timeout=10)
    assert state == {"count": 3, "out_of_order": 1, "last": {"numbered": 5}}  # 3, 4, 5
