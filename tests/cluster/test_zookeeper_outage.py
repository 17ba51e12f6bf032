"""The cluster and its ZooKeeper ensemble failing: one server, then all of them.

A three-server ensemble; one server killed with kill -9: the nodes that were
connected to it move to the others and the cluster keeps serving, topic
creation included. Every server stopped: produce and fetch go on at the
current leaders (nothing on the data path asks ZooKeeper), Metadata is
served from the nodes' caches, and topic creation fails with an error
that names ZooKeeper. The servers back: the sessions survive (each server
keeps them on disk), nobody re-elects anything needlessly, and topics can
be created again.
"""

from __future__ import annotations

from typing import Any

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from actors.metadata.zk_server import ZooKeeperEnsemble
from tests.broker.rawclient import build
from tests.broker.simple_clients import consume_all, produce
from tests.fixtures.cluster import Cluster, kafka_call, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients, pytest.mark.slow]

CREATE_TOPICS = 19


def create_topic(cluster: Cluster, via: int, name: str) -> tuple[int, str | None]:
    """CreateTopics v5 straight to one node: (error code, error message)."""
    node = cluster.nodes[via]
    request = build(CREATE_TOPICS, 5, {
        "topics": [{"name": name, "num_partitions": 2, "replication_factor": 3,
                    "assignments": [], "configs": []}],
        "timeout_ms": 15_000, "validate_only": False})
    response = kafka_call(node.host, node.port, request, timeout_s=60)
    topic = response.topics[0]
    return int(topic.error_code), topic.error_message


def test_one_zookeeper_server_killed_then_all_stopped_then_back(
        zk_ensemble: ZooKeeperEnsemble, cluster_factory: Any) -> None:
    # zk_ensemble first: fixtures end in reverse order, so the ensemble outlives the nodes
    # (stopping nodes whose ensemble is gone waits out their ZooKeeper timeouts: 3 min).
    cluster = cluster_factory(3, connect=zk_ensemble.connect_string)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    admin.create_topics([NewTopic("steady", 1, 3)])
    admin.close()
    cluster.wait_topic("steady", 1)
    produce(cluster.bootstrap, "steady", [b"a", b"b"])
    controller = cluster.controller()

    # One server (the ensemble's leader) killed: the cluster keeps serving.
    leader = zk_ensemble.leader()
    assert leader is not None
    leader.kill()
    produce(cluster.bootstrap, "steady", [b"c", b"d"])
    assert wait_for("a topic made with one ZooKeeper server down",
                    lambda: create_topic(cluster, 1, "made-with-two")[0] == 0, timeout_s=60)
    cluster.wait_topic("made-with-two", 2)
    assert set(cluster.view(2).brokers) == {1, 2, 3}
    assert cluster.controller() == controller
    leader.start()
    leader.wait_serving()

    # Every server stopped: the data path goes on, topic creation fails clearly.
    zk_ensemble.stop()
    produce(cluster.bootstrap, "steady", [b"e", b"f"])
    # Read without a group: a group would need __consumer_offsets, which no node can
    # create while ZooKeeper is away (none was made before the outage).
    assert consume_all(cluster.bootstrap, "steady", 6, assign=True) == [
        b"a", b"b", b"c", b"d", b"e", b"f"]
    for node in cluster.nodes.values():
        view = node.metadata()
        assert set(view.brokers) == {1, 2, 3} and view.controller_id == controller
    for via in (controller, next(b for b in (1, 2, 3) if b != controller)):
        code, message = create_topic(cluster, via, f"refused-{via}")
        assert code != 0, message
        assert message is not None and "ZooKeeper" in message, message

    # The servers back: the same sessions, the same controller, creation works again.
    zk_ensemble.start()
    assert wait_for("topic creation to work again",
                    lambda: create_topic(cluster, 2, "made-after")[0] == 0, timeout_s=60)
    cluster.wait_topic("made-after", 2)
    assert cluster.controller() == controller
    assert all(set(n.metadata().brokers) == {1, 2, 3} for n in cluster.nodes.values())
    produce(cluster.bootstrap, "made-after", [b"g"])
    for node in cluster.nodes.values():
        assert "registered again" not in node.log()  # the sessions survived the outage
