"""What reaches an actor once it stopped, and the mailbox depth of a name spawned again.
Real nodes and real ZeroMQ."""

from __future__ import annotations

import threading

from actors.runtime.node import Node
from tests.fixtures.waiting import wait_for
from tests.runtime.node_actors import (
    GATE,
    GetState,
    Hold,
    OrderChecker,
    Sender,
    SendSeq,
    SlowReceiver,
)


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
    try:
        assert node.ask(sender, SendSeq(6, "depth-asks", "slow")) == 6
        assert wait_for(lambda: node.mailbox_depth("slow") == 6, timeout=5)
    finally:
        GATE.set()
        holder.join(20)
    assert wait_for(lambda: node.mailbox_depth("slow") == 0)
    assert node.quiesce(timeout=5)
