"""Actors and messages used by the runtime tests, and a node process entry point.

Run as ``python -m tests.runtime.test_actors ROLE NODE HOSTSPEC...`` to host
actors in a separate process (the tests start it themselves).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.node import Directory, Node, NodeEndpoint
from wire.registry import message


@message(9001)
class Seq(NamedTuple):
    sender: str
    n: int


@message(9002)
class SendSeq(NamedTuple):
    """Tell ``count`` Seq messages to ``node``/``name``."""

    count: int
    node: str
    name: str


@message(9003)
class GetState(NamedTuple):
    pass


@message(9004)
class Boom(NamedTuple):
    reason: str


@message(9006)
class Nap(NamedTuple):
    """Keep the handler busy this long."""

    seconds: float


@message(9007)
class Hold(NamedTuple):
    """Keep the handler busy until the test sets GATE (in-process tests only)."""

    timeout_s: float


GATE = threading.Event()


@message(9005)
class Relay(NamedTuple):
    hops_left: int
    payload: bytes


class OrderChecker(Actor):
    """Records, per sender, whether Seq numbers arrived in order."""

    mailbox_size = 100_000

    def setup(self) -> None:
        self.last: dict[str, int] = {}
        self.count = 0
        self.out_of_order = 0

    @handles(Seq)
    def on_seq(self, msg: Seq) -> None:
        prev = self.last.get(msg.sender, -1)
        if msg.n != prev + 1:
            self.out_of_order += 1
        self.last[msg.sender] = msg.n
        self.count += 1

    @handles(GetState)
    def state(self, _msg: GetState) -> dict[str, Any]:
        return {"count": self.count, "out_of_order": self.out_of_order, "last": self.last}


class Sender(Actor):
    @handles(SendSeq)
    def on_send(self, msg: SendSeq) -> int:
        target = Address(msg.node, msg.name)
        for i in range(msg.count):
            self.tell(target, Seq(self.name, i))
        return msg.count


class NumberedSender(Actor):
    """Like Sender, but numbers its Seq messages across every SendSeq (0, 1, 2, ...)."""

    def setup(self) -> None:
        self.next = 0

    @handles(SendSeq)
    def on_send(self, msg: SendSeq) -> int:
        target = Address(msg.node, msg.name)
        for _ in range(msg.count):
            self.tell(target, Seq(self.name, self.next))
            self.next += 1
        return msg.count


class AdvisorySender(Actor):
    """Sends each message as its own frame and never waits on a remote link."""

    waits_on_remote = False

    @handles(SendSeq)
    def on_send(self, msg: SendSeq) -> int:
        target = Address(msg.node, msg.name)
        for i in range(msg.count):
            self.tell(target, Seq(self.name, i))
            self.flush()
        return msg.count


class SlowReceiver(Actor):
    """Takes its time with every message, behind a tiny mailbox."""

    mailbox_size = 2

    def setup(self) -> None:
        self.count = 0

    @handles(Seq)
    def on_seq(self, _msg: Seq) -> None:
        time.sleep(0.0005)
        self.count += 1

    @handles(GetState)
    def state(self, _msg: GetState) -> int:
        return self.count

    @handles(Nap)
    def nap(self, msg: Nap) -> bool:
        time.sleep(msg.seconds)
        return True

    @handles(Hold)
    def hold(self, msg: Hold) -> bool:
        return GATE.wait(msg.timeout_s)


class Fragile(Actor):
    """Raises on Boom; its state is rebuilt by setup() after each crash."""

    def setup(self) -> None:
        self.setups = getattr(self, "setups", 0) + 1
        self.handled = 0

    @handles(Boom)
    def on_boom(self, msg: Boom) -> None:
        raise RuntimeError(msg.reason)

    @handles(Seq)
    def on_seq(self, _msg: Seq) -> None:
        self.handled += 1

    @handles(GetState)
    def state(self, _msg: GetState) -> dict[str, int]:
        return {"setups": self.setups, "handled": self.handled}


class Announcer(Fragile):
    """A Fragile that, at each setup (the first and every restart), tells b's checker a
    numbered Seq (an actor whose start greets a peer)."""

    def setup(self) -> None:
        super().setup()
        self.tell(Address("b", "checker"), Seq(self.name, self.setups - 1))


class Pump(Actor):
    """Sends a bounded stream of numbered messages to a relay chain until told to stop."""

    def setup(self) -> None:
        self.sent = 0
        self.running = True
        self.limit = 2_000_000
        self.result_file = self._init_kwargs.get("result_file")

    def poll_timeout_ms(self) -> int | None:
        return 0 if self.running and self.sent < self.limit else None

    def on_turn(self) -> None:
        if not self.running or self.sent >= self.limit:
            return
        for _ in range(50):
            self.tell(Address(self.node.name, "relay-1"), Relay(2, b"x" * 64))
            self.sent += 1

    def on_stopping(self) -> None:
        self.running = False

    def teardown(self) -> None:
        if self.result_file:
            Path(self.result_file + ".pump").write_text(str(self.sent))


class Relayer(Actor):
    mailbox_size = 4

    @handles(Relay)
    def on_relay(self, msg: Relay) -> None:
        target = f"relay-{3 - msg.hops_left + 1}" if msg.hops_left > 1 else "sink"
        self.tell(Address(self.node.name, target), Relay(msg.hops_left - 1, msg.payload))


class CountingSink(Actor):
    mailbox_size = 4

    def setup(self) -> None:
        self.count = 0
        self.result_file = self._init_kwargs.get("result_file")

    @handles(Relay)
    def on_relay(self, _msg: Relay) -> None:
        self.count += 1

    def teardown(self) -> None:
        if self.result_file:
            Path(self.result_file + ".sink").write_text(str(self.count))


def directory_from(spec: str) -> Directory:
    """``a=127.0.0.2:5001,b=127.0.0.3:5002@incarnation[;ipcdir]`` into a Directory."""
    nodes, _, ipc_dir = spec.partition(";")
    d = Directory()
    for item in nodes.split(","):
        name, _, hostport = item.partition("=")
        hostport, _, incarnation = hostport.partition("@")
        host, _, port = hostport.rpartition(":")
        d.add(name, NodeEndpoint(host, int(port), ipc_dir, incarnation))
    return d


def main(argv: list[str]) -> None:
    role, node_name, spec = argv[:3]
    node = Node(node_name, directory=directory_from(spec)).start()
    if role == "senders":
        for i in range(int(argv[3])):
            node.spawn(Sender, f"sender-{i}")
    elif role == "checker":
        node.spawn(OrderChecker, "checker")
    elif role == "pipeline":
        result = argv[3]
        # Spawn order: sink first, pump last (shutdown stops the newest first).
        node.spawn(CountingSink, "sink", result_file=result)
        node.spawn(Relayer, "relay-2")
        node.spawn(Relayer, "relay-1")
        node.spawn(Pump, "pump", result_file=result)
    print(json.dumps({"ready": node_name}), flush=True)
    node.run_until_signal()


if __name__ == "__main__":
    main(sys.argv[1:])
