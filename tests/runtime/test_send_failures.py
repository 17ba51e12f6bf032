"""A ZeroMQ error while an actor sends is a send failure, not the end of its thread.

Found by live fuzzing (issue 17): with the node out of file descriptors, making a
socket raised ``zmq.ZMQError`` (EMFILE) in a PartitionShard's flush, outside every
handler, and the thread died with nothing but a traceback. Now the messages are
dead letters, logged with the errno, and the actor goes on. Real actors, real sockets;
only the failing call is patched.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from actors.runtime.address import Address
from actors.runtime.node import Node
from tests.runtime.node_actors import GetState, OrderChecker, Sender, SendSeq


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node("sendfail").start()
    n.spawn(OrderChecker, "sink")
    n.spawn(Sender, "sender")
    yield n
    n.shutdown(timeout=5)


def emfile() -> zmq.ZMQError:
    return zmq.ZMQError(errno.EMFILE, "Too many open files")


def fail_once(monkeypatch: pytest.MonkeyPatch, node: Node, name: str) -> list[int]:
    """Make ``node.<name>`` raise EMFILE the first time an actor thread (not the test's,
    which asks and reads answers) calls it towards the sink; returns those calls."""
    real = getattr(node, name)
    calls: list[int] = []

    def failing(*args: Any, **kw: Any) -> Any:
        address = next(a for a in args if isinstance(a, Address))
        if address.name == "sink" and threading.current_thread() is not threading.main_thread():
            calls.append(1)
            if len(calls) == 1:
                raise emfile()
        return real(*args, **kw)

    monkeypatch.setattr(node, name, failing)
    return calls


def sink_count(node: Node, at_least: int) -> int:
    deadline = time.monotonic() + 10
    while True:
        count = int(node.ask(Address(node.name, "sink"), GetState())["count"])
        if count >= at_least or time.monotonic() > deadline:
            return count
        time.sleep(0.02)


@pytest.mark.parametrize("where", ["_new_link", "_send_frame"])
def test_emfile_while_sending_is_a_dead_letter_and_the_actor_lives(
        node: Node, monkeypatch: pytest.MonkeyPatch, log_lines: list[str], where: str) -> None:
    sender = Address(node.name, "sender")
    calls = fail_once(monkeypatch, node, where)
    assert node.ask(sender, SendSeq(3, node.name, "sink"), timeout=5) == 3
    assert calls, f"{where} was not used"
    deadline = time.monotonic() + 5
    while node.dead_letters.total < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert node.dead_letters.by_reason() == {"send failed": 3}
    assert node.metrics.get("messages_send_failed") == 1
    lines = [line for line in log_lines if "send failed" in line]
    assert len(lines) == 1, lines  # once, with the errno
    assert f"errno {errno.EMFILE} EMFILE: Too many open files" in lines[0]
    assert "sender=sender@sendfail" in lines[0] and "receiver=sink@sendfail" in lines[0]
    # The sender's thread is alive and a new link carries the next messages.
    assert node.ask(sender, SendSeq(5, node.name, "sink"), timeout=5) == 5
    assert sink_count(node, 5) == 5
    assert not node.actors["sender"].actor_stopped.is_set()
    assert not [line for line in log_lines if "crashed" in line or "failed\n" in line]
