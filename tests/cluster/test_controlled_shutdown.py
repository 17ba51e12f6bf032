"""SIGTERM in a cluster: the controlled shutdown and the keys that shape it.

A node stopping with ``controlled.shutdown.enable`` (the default) asks the
controller to move its leaderships first; a partition it cannot hand over
(its only other replica is dead) makes the attempt incomplete, and the node
tries again ``controlled.shutdown.max.retries`` times with
``controlled.shutdown.retry.backoff.ms`` between attempts, then stops
anyway. With the key off, the node says so and stops at once.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from tests.fixtures.cluster import wait_for
from tests.fixtures.cluster_tools import log_lines

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

BACKOFF_MS = 1500


def _stamp(line: str) -> datetime:
    found = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})", line)
    assert found, line
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S.%f")


def test_controlled_shutdown_retries_what_it_cannot_move_and_can_be_turned_off(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config={"controlled.shutdown.max.retries": 1,
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
    assert gave_up, node.log()[-3000:]  # max.retries = 1: one attempt and one retry
    assert not log_lines(node, "attempt 2 not complete")
    # The retry waited out the backoff (a lower bound: a loaded machine only adds to it).
    gap_ms = (_stamp(gave_up[0]) - _stamp(attempts[0])).total_seconds() * 1000
    assert gap_ms >= BACKOFF_MS - 20, gap_ms


def test_a_stopping_node_asks_the_new_controller_when_the_one_it_asked_dies(
        cluster_factory: Any) -> None:
    """SIGTERM just after the controller was killed: the first ask goes to the dead one
    and is never answered. Once another node is the controller, the ask goes to it at
    once (as a broker whose connection to a dead controller fails retries), not after
    request.timeout.ms (here 90 s) without an answer."""
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
    # controller's election and the move, well within 40 s even on a loaded machine
    assert took_s < 40, (took_s, stopping.log()[-3000:])
