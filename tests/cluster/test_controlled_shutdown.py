"""SIGTERM in a cluster: the controlled shutdown and the keys that shape it.

A node stopping with ``controlled.shutdown.enable`` (the default) asks the
controller to move its leaderships first; a partition it cannot hand over
(its only other replica is dead) makes the attempt incomplete, and the node
tries again, ``controlled.shutdown.max.retries`` attempts in all (Kafka's
count: the first one included) with ``controlled.shutdown.retry.backoff.ms``
between them, then stops anyway. With the key off, the node says so and stops at once.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from actors.metadata import znodes
from tests.fixtures.cluster import wait_for
from tests.fixtures.cluster_tools import ZooKeeperReader, log_lines

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

BACKOFF_MS = 1500


def _stamp(line: str) -> datetime:
    found = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})", line)
    assert found, line
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S.%f")


def test_controlled_shutdown_retries_what_it_cannot_move_and_can_be_turned_off(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config={"controlled.shutdown.max.retries": 2,
                                         "controlled.shutdown.retry.backoff.ms": BACKOFF_MS},
                              node_config={3: {"controlled.shutdown.enable": False}})
    # Off: node 3 stops without asking the controller for anything.
    assert cluster.nodes[3].stop() == 0
    assert log_lines(cluster.nodes[3], "controlled shutdown is off (controlled.shutdown.enable"
                                       "=false)")
    assert not log_lines(cluster.nodes[3], "asking the controller to move")
    # The controller learns that node 3 left from ZooKeeper, after node 3 exited: until
    # then it could place a replica of the next topic on node 3 (or be node 3 itself).
    cluster.wait_formed()

    # A partition on nodes 1 and 2 only (3 is down); its other replica then dies, so
    # its leader has no live replica to hand it to.
    admin = KafkaAdminClient(bootstrap_servers=cluster.nodes[1].bootstrap,
                             request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic("pinned", 1, 2)])
    finally:
        admin.close()
    leader = cluster.wait_topic("pinned", 1).leaders("pinned")[0]
    other = 3 - leader
    cluster.nodes[other].kill()
    wait_for(f"node {other} to leave the cluster",
             lambda: set(cluster.nodes[leader].metadata().brokers) == {leader}, timeout_s=60)
    node = cluster.nodes[leader]
    assert node.stop() == 0
    attempts = log_lines(node, "controlled shutdown attempt 1 not complete")
    assert attempts and "1 partition(s) still led here" in attempts[0], node.log()[-3000:]
    gave_up = log_lines(node, "controlled shutdown gave up after 2 attempt(s)")
    # max.retries = 2: two attempts in all, as Kafka's remainingRetries counts (before,
    # a third went: "attempt 2 not complete; retrying")
    assert gave_up, node.log()[-3000:]
    last = log_lines(node, "controlled shutdown attempt 2 not complete")
    assert len(last) == 1 and "none left" in last[0], node.log()[-3000:]
    assert not log_lines(node, "attempt 3")
    # The retry waited out the backoff (a lower bound: a loaded machine only adds to it).
    gap_ms = (_stamp(gave_up[0]) - _stamp(attempts[0])).total_seconds() * 1000
    assert gap_ms >= BACKOFF_MS - 20, gap_ms


def test_max_retries_0_makes_no_attempt(cluster_factory: Any) -> None:
    """Kafka's count takes in the first attempt: 0 asks the controller nothing (its
    controlledShutdown loop never runs) and the node stops at once, unclean."""
    cluster = cluster_factory(2, node_config={2: {"controlled.shutdown.max.retries": 0}})
    node = cluster.nodes[2]
    assert node.stop() == 0
    assert log_lines(node, "controlled shutdown gave up after 0 attempt(s): "
                           "controlled.shutdown.max.retries is 0"), node.log()[-3000:]
    assert not log_lines(node, "asking the controller to move"), node.log()[-3000:]


def test_a_stopping_node_asks_the_new_controller_when_the_one_it_asked_dies(
        cluster_factory: Any) -> None:
    """SIGTERM just after the controller was killed: the first ask goes to the dead one
    and is never answered. Once another node is the controller, that attempt fails at
    once and the next goes to the new one after the backoff (as a broker whose
    connection to a dead controller fails retries), not after request.timeout.ms (here
    90 s) without an answer."""
    cluster = cluster_factory(3, config={"request.timeout.ms": 90_000})
    admin = KafkaAdminClient(bootstrap_servers=cluster.nodes[1].bootstrap,
                             request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic("spread", 3, 3)])
    finally:
        admin.close()
    cluster.wait_topic("spread", 3)
    controller = cluster.controller()
    stopping = cluster.nodes[next(n for n in (1, 2, 3) if n != controller)]
    cluster.nodes[controller].kill()
    started = time.monotonic()
    assert stopping.stop(timeout_s=150) == 0
    took_s = time.monotonic() - started
    assert log_lines(stopping, "asking the controller to move")
    done = log_lines(stopping, "controlled shutdown done after")
    assert done, stopping.log()[-3000:]
    # the session of the dead controller expires after 4 s; the rest is the new
    # controller's election, one retry backoff and the move: well under the 90 s of
    # request.timeout.ms this checks it does not wait out, even on a loaded machine (26 s
    # seen beside a CPU burner)
    assert took_s < 75, (took_s, stopping.log()[-3000:])


def test_a_node_that_led_stops_without_waiting_for_its_followers_fetches_to_end(
        cluster_factory: Any) -> None:
    """The controlled shutdown moves the stopping node's leaderships; the metadata makes
    it a follower of them, and the replica fetcher that starts for them fetched on while
    the node's shutdown waited its whole timeout (10 s) for its actors to go quiet.
    A stopping node fetches nothing new: the shutdown finds them quiet. Fetches that do
    not wait on the leader (replica.fetch.wait.max.ms = 0) keep the follower busy here
    as a producer's load did in the rolling restart test."""
    cluster = cluster_factory(2, config={"replica.fetch.wait.max.ms": 0})
    admin = KafkaAdminClient(bootstrap_servers=cluster.nodes[1].bootstrap,
                             request_timeout_ms=30_000)
    try:  # led by node 2, followed by node 1 (the controller: the first node started)
        admin.create_topics([NewTopic("led", num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [2, 1]})])
    finally:
        admin.close()
    wait_for("node 2 leading led-0 with both replicas in its ISR", lambda: (
        p := cluster.view(1).partitions.get(("led", 0))) is not None and p.leader == 2
        and set(p.isr) == {1, 2})
    since = len(cluster.nodes[2].log())
    assert cluster.nodes[2].stop() == 0
    stopped = cluster.nodes[2].log()[since:]
    # the case: its leadership moved, and it followed until it stopped
    assert "controlled shutdown done" in stopped, stopped[-3000:]
    assert "no longer leading led-0" in stopped, stopped[-3000:]
    assert "started replica fetcher replica-fetcher-1-0" in stopped, stopped[-3000:]
    assert "did not quiesce" not in stopped, stopped[-3000:]


def _attempt_lines(node: Any) -> list[str]:
    return log_lines(node, "controlled shutdown attempt ")


def test_a_pass_with_no_controller_to_ask_counts_as_an_attempt(cluster_factory: Any) -> None:
    """/controller names a broker that is not registered (Kafka's "broker registration
    for controller is not available"): each pass of the shutdown finds no controller to
    ask, counts as an attempt and waits the backoff, max.retries passes in all; then the
    node stops, each attempt's outcome logged once. (It asked again every 200 ms without
    counting, each ask to the unregistered id lost until request.timeout.ms.)"""
    cluster = cluster_factory(1, config={"controlled.shutdown.max.retries": 3,
                                         "request.timeout.ms": 2000})
    node = cluster.nodes[1]
    zk = ZooKeeperReader(cluster.zk_connect)
    try:  # in one transaction: nobody sees /controller gone, so nobody is elected
        swap = zk.client.transaction()
        swap.delete(znodes.CONTROLLER)
        swap.create(znodes.CONTROLLER, znodes.encode_controller(99, int(time.time() * 1000)))
        results = swap.commit()
        assert not any(isinstance(r, Exception) for r in results), results
        wait_for("node 1 to give up the controller role",
                 lambda: log_lines(node, "this node is no longer the controller"))
        assert node.stop() == 0
    finally:
        zk.close()
    attempts = _attempt_lines(node)
    assert len(attempts) == 3, node.log()[-3000:]
    for n, line in enumerate(attempts, 1):
        assert f"attempt {n} not complete (controller 99 is not a registered broker)" in line
    assert "2 left, the next in 500 ms" in attempts[0], attempts
    assert "1 left, the next in 500 ms" in attempts[1], attempts
    assert "none left" in attempts[2], attempts
    assert log_lines(node, "controlled shutdown gave up after 3 attempt(s): controller 99 "
                           "is not a registered broker; stopping anyway"), node.log()[-3000:]


def test_an_attempt_without_an_answer_fails_and_the_next_waits_the_backoff(
        cluster_factory: Any) -> None:
    """The controller is registered but stopped (SIGSTOP; its session outlives the test's
    wait): each attempt goes unanswered for request.timeout.ms, fails, and the next waits
    the backoff, as Kafka's loop sleeps after a request that timed out (it asked again at
    once, and logged nothing of the attempt)."""
    cluster = cluster_factory(2, config={"controlled.shutdown.max.retries": 2,
                                         "request.timeout.ms": 1500,
                                         "zookeeper.session.timeout.ms": 20_000})
    controller = cluster.controller()
    stopping = cluster.nodes[3 - controller]
    cluster.nodes[controller].pause()
    try:
        assert stopping.stop() == 0
    finally:
        cluster.nodes[controller].resume()
    attempts = _attempt_lines(stopping)
    assert len(attempts) == 2, stopping.log()[-3000:]
    no_answer = f"(no answer from controller {controller} within 1500 ms)"
    assert f"attempt 1 not complete {no_answer}; 1 left, the next in 500 ms" in attempts[0]
    assert f"attempt 2 not complete {no_answer}; none left" in attempts[1], attempts
    assert log_lines(stopping, "controlled shutdown gave up after 2 attempt(s)"), \
        stopping.log()[-3000:]
