"""A deleted topic's committed offsets leave every consumer group of a cluster (Kafka's
onPartitionsDeleted, told by the controller's UpdateMetadata), so a topic made again under
the name is consumed from its beginning: three `actorlog serve` processes, a real
ZooKeeper, confluent-kafka clients. Before, the groups kept the old offsets: a consumer of
the namesake resumed at them and skipped its first records."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import FindCoordinatorRequest

from actors.metadata import znodes
from tests.broker.test_groups import call
from tests.cluster.test_cluster import admin, create
from tests.cluster.test_cluster_admin import _group_led_by
from tests.fixtures.cluster import Cluster, wait_for
from tests.fixtures.cluster_tools import ZooKeeperReader, produce_to

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

OLD_RECORDS = 6   # the old topic's records per partition (its groups committed all of them)
NEW_RECORDS = 9   # the namesake's: more, so the old offset is in its range, not reset


def _produce(cluster: Cluster, topic: str, partition: int, count: int, tag: str) -> None:
    leader = wait_for(f"a leader of {topic}-{partition}",
                      lambda: cluster.view().leaders(topic).get(partition))
    answer = wait_for(f"a produce to {topic}-{partition}", lambda: (
        a if (a := produce_to(cluster.nodes[leader], topic, partition,
                              [f"{tag}-{i}".encode() for i in range(count)])).error_code == 0
        else None))
    assert answer.error_code == 0


def _commit(cluster: Cluster, group: str, offsets: list[TopicPartition]) -> None:
    """A "simple" commit (generation -1, as assign() users make)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def _committed(cluster: Cluster, group: str, tps: list[TopicPartition]) -> dict[Any, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        return {(tp.topic, tp.partition): tp.offset
                for tp in consumer.committed(tps, timeout=30)}
    finally:
        consumer.close()


def _first_consumed(cluster: Cluster, group: str, topic: str,
                    partitions: int) -> dict[int, tuple[int, bytes]]:
    """Per partition, the offset and value of the first record a subscriber of ``group``
    gets (auto.offset.reset=earliest)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    first: dict[int, tuple[int, bytes]] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 90
        while len(first) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            first.setdefault(msg.partition(), (msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert len(first) == partitions, f"{group}: only partitions {sorted(first)} consumed"
    return first


def _delete_and_wait(cluster: Cluster, zk_connect: str, topic: str) -> None:
    client = admin(cluster)
    try:
        client.delete_topics([topic])
    finally:
        client.close()
    zk = ZooKeeperReader(zk_connect)
    try:
        wait_for(f"the znodes of {topic} to go", lambda: topic not in zk.children(znodes.TOPICS)
                 and not zk.children(znodes.DELETE_TOPICS), timeout_s=60)
    finally:
        zk.close()
    for node in cluster.live():
        wait_for(f"node {node.broker_id}'s metadata to drop {topic}",
                 lambda n=node: all(topic not in v.topics() for v in n.views()))


def test_a_namesake_of_a_deleted_topic_is_consumed_from_its_start_by_groups_on_every_node(
        cluster_factory: Any, zk_connect: str) -> None:
    cluster: Cluster = cluster_factory(3)
    create(cluster, "reborn", 2, 2)
    create(cluster, "other", 1, 3)
    cluster.wait_topic("reborn", 2)
    cluster.wait_topic("other", 1)
    for p in range(2):
        _produce(cluster, "reborn", p, OLD_RECORDS, "old")
    _produce(cluster, "other", 0, 4, "other")
    # one group on each node's coordinators
    groups: list[str] = []
    for node_id in (1, 2, 3):
        groups.append(_group_led_by(cluster, node_id, set(groups)))
    for group in groups:
        _commit(cluster, group, [TopicPartition("reborn", 0, OLD_RECORDS),
                                 TopicPartition("reborn", 1, OLD_RECORDS),
                                 TopicPartition("other", 0, 3)])
    wanted = [TopicPartition("reborn", 0), TopicPartition("reborn", 1),
              TopicPartition("other", 0)]
    for group in groups:
        assert _committed(cluster, group, wanted) == {
            ("reborn", 0): OLD_RECORDS, ("reborn", 1): OLD_RECORDS, ("other", 0): 3}

    _delete_and_wait(cluster, zk_connect, "reborn")
    create(cluster, "reborn", 2, 2)
    cluster.wait_topic("reborn", 2)
    for p in range(2):
        _produce(cluster, "reborn", p, NEW_RECORDS, "new")

    for group in groups:
        # the old topic's offsets are gone; the other topic's stay
        assert _committed(cluster, group, wanted) == {
            ("reborn", 0): OFFSET_INVALID, ("reborn", 1): OFFSET_INVALID, ("other", 0): 3}, group
        first = _first_consumed(cluster, group, "reborn", 2)
        assert first == {0: (0, b"new-0"), 1: (0, b"new-0")}, group


def _coordinator_of(cluster: Cluster, via: int, group: str) -> int:
    answer = call(cluster.nodes[via].bootstrap, FindCoordinatorRequest(key=group, key_type=0), 1)
    return int(answer.node_id) if answer.error_code == 0 else -1


def test_a_node_down_during_the_deletion_leads_its_groups_again_without_the_offsets(
        cluster_factory: Any, zk_connect: str) -> None:
    """As Kafka: a node's coordinator does not look for deleted topics when it loads its
    offsets partitions; while it is down, the partitions' new leaders (live, told of the
    deletion) write the tombstones, and it replicates them before it can lead again."""
    cluster: Cluster = cluster_factory(3)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for topic, where in (("reborn", [[1, 2], [2, 1]]), ("other", [[1, 2]])):
        made = client.create_topics([NewTopic(topic, len(where), replica_assignment=where)])
        made[topic].result(30)
        cluster.wait_topic(topic, len(where))
    for p in range(2):
        _produce(cluster, "reborn", p, OLD_RECORDS, "old")
    _produce(cluster, "other", 0, 4, "other")
    group = _group_led_by(cluster, 3, set())
    _commit(cluster, group, [TopicPartition("reborn", 0, OLD_RECORDS),
                             TopicPartition("reborn", 1, OLD_RECORDS),
                             TopicPartition("other", 0, 3)])

    cluster.nodes[3].stop()
    wait_for(f"{group} led by a live node",
             lambda: _coordinator_of(cluster, 1, group) in (1, 2) or None, timeout_s=60)
    _delete_and_wait(cluster, zk_connect, "reborn")
    cluster.nodes[3].start()
    cluster.wait_formed()
    # node 3 leads its offsets partitions again (preferred election, once in their ISR)
    live = AdminClient({"bootstrap.servers": cluster.nodes[1].bootstrap})

    def back() -> bool | None:
        live.elect_leaders(ElectionType.PREFERRED, None).result(30)
        return _coordinator_of(cluster, 1, group) == 3 or None

    wait_for(f"{group} led by node 3 again", back, timeout_s=90, every_s=2.0)

    client.create_topics([NewTopic("reborn", 2, 2)])["reborn"].result(30)
    cluster.wait_topic("reborn", 2)
    for p in range(2):
        _produce(cluster, "reborn", p, NEW_RECORDS, "new")
    wanted = [TopicPartition("reborn", 0), TopicPartition("reborn", 1),
              TopicPartition("other", 0)]
    assert _committed(cluster, group, wanted) == {
        ("reborn", 0): OFFSET_INVALID, ("reborn", 1): OFFSET_INVALID, ("other", 0): 3}
    assert _first_consumed(cluster, group, "reborn", 2) == {0: (0, b"new-0"), 1: (0, b"new-0")}
