"""A topic whose znodes an operator removes (real nodes, real ZooKeeper).

Not a DeleteTopics: ``deleteall /brokers/topics/<name>`` under the cluster, as an operator
in a ZooKeeper shell would. As Kafka's controller (processTopicChange at 4b75265), the
controller forgets the topic: no election or ISR work for it again (before, each node
stop started an election of its partitions whose write failed NO_NODE). As in Kafka, the
nodes are told nothing and keep its replicas, so the name is not usable again while they
remain: the controller refuses a CreateTopics of it, saying why.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.admin import NewTopic
from kafka.errors import InvalidTopicError

from actors.metadata import znodes
from tests.cluster.test_cluster import admin
from tests.fixtures.cluster import Cluster, wait_for
from tests.fixtures.cluster_tools import ZooKeeperReader
from tests.fixtures.consuming import consume_values

FORGOTTEN = "the znodes of topic(s) gone were removed: forgotten"


def _create(cluster: Cluster, name: str, replicas: list[int]) -> None:
    client = admin(cluster)
    try:
        client.create_topics([NewTopic(name, replica_assignments={0: replicas})])
    finally:
        client.close()


def _produce(cluster: Cluster, topic: str, values: list[bytes]) -> None:
    failed: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and failed == []


def _consume(cluster: Cluster, topic: str, count: int) -> list[bytes]:
    return consume_values({"bootstrap.servers": cluster.bootstrap, "group.id": f"read-{topic}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False},
                          topic, count, 60)


def test_a_topic_whose_znodes_are_removed_is_forgotten_and_its_name_refused(
        cluster_factory: Any, zk_connect: str) -> None:
    cluster: Cluster = cluster_factory(3)
    controller = cluster.controller()
    a, b = sorted(i for i in cluster.nodes if i != controller)
    _create(cluster, "gone", [a, b])
    _create(cluster, "kept", [a, b, controller])
    cluster.wait_topic("gone", 1)
    cluster.wait_topic("kept", 1)
    _produce(cluster, "gone", [b"old"] * 3)
    _produce(cluster, "kept", [b"before"] * 3)

    zk = ZooKeeperReader(zk_connect)
    try:
        zk.client.delete(znodes.topic_path("gone"), recursive=True)
        node = cluster.nodes[controller]
        wait_for("the controller to forget the topic", lambda: FORGOTTEN in node.log())
        said = len(node.log())

        # Its leader stops: the controller elects for "kept" only (no election of gone-0
        # failing NO_NODE, nothing written for it), and the node comes back.
        cluster.nodes[a].stop()
        wait_for("kept to be led elsewhere",
                 lambda: cluster.view(via=b).leaders("kept").get(0) not in (a, -1, None))
        cluster.nodes[a].start()
        cluster.wait_formed()
        cluster.wait_topic("kept", 1)
        assert zk.children(znodes.TOPICS) == ["kept"]
        after = [line for line in node.log()[said:].splitlines()
                 if "/controller]" in line and "gone" in line]
        assert after == [], after

        # The name: refused, saying why (the nodes still hold the removed topic's replicas)
        with pytest.raises(InvalidTopicError, match="removed from ZooKeeper by hand"):
            _create(cluster, "gone", [b, a])
        assert zk.children(znodes.TOPICS) == ["kept"]
    finally:
        zk.close()
    _produce(cluster, "kept", [b"after"])
    assert _consume(cluster, "kept", 4) == [b"before"] * 3 + [b"after"]
    assert cluster.controller() == controller
    assert all(n.running for n in cluster.nodes.values())
