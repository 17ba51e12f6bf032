"""Partition reassignment (AlterPartitionReassignments, ListPartitionReassignments) on
three `actorlog serve` processes and a real ZooKeeper, with kafka-python's admin client:
a replica moved to another broker under an acks=all producer keeps every acknowledged
record, the replication factor grows (both with one and two processes per node), a move
in progress is listed and cancelled, bad sets get Kafka's codes, and a controller killed
mid-move leaves it to the next one (one process per node: the controller's work). A move
is held in progress by pausing (SIGSTOP) its added replica's node, whose ZooKeeper session
outlasts the pause, rather than by a backlog it is slow to fetch.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kafka.errors as kerr
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from actors.metadata import znodes
from tests.broker.rawclient import RawClient
from tests.cluster.test_cluster_admin import _assignment
from tests.fixtures.cluster import Cluster, ClusterView, wait_for
from tests.fixtures.cluster_tools import ZooKeeperReader

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients, pytest.mark.num_processes(1, 2)]

ALTER_REASSIGNMENTS = 45
# A node to be paused keeps its registration meanwhile (the others keep the short default,
# so a killed controller is replaced quickly)
PAUSABLE = {"zookeeper.session.timeout.ms": 30_000}


@contextmanager
def admin(cluster: Cluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        yield client
    finally:
        client.close()


def create(client: KafkaAdminClient, topic: str, replicas: list[int]) -> None:
    answer = client.create_topics([NewTopic(topic, replica_assignments={0: replicas})],
                                  timeout_ms=30_000)
    assert [t["error_code"] for t in answer["topics"]] == [0], answer


def placed(cluster: Cluster, topic: str, replicas: list[int], isr: set[int] | None = None,
           timeout_s: float = 60.0, via: list[int] | None = None) -> ClusterView:
    """Every live node (or those of ``via``) shows partition 0 of ``topic`` on
    ``replicas``, led by one of them, with ``isr`` (default: every replica) in sync."""
    want = set(replicas) if isr is None else isr
    asked = cluster.live() if via is None else [cluster.nodes[i] for i in via]

    def shown() -> ClusterView | None:
        views = [n.metadata([topic]) for n in asked]
        for view in views:
            part = view.partitions.get((topic, 0))
            if (part is None or list(part.replicas) != replicas or part.leader not in replicas
                    or set(part.isr) != want):
                return None
        return views[0]

    return wait_for(f"{topic}-0 on {replicas} with ISR {sorted(want)}", shown, timeout_s)


def backlog(cluster: Cluster, topic: str, count: int, size: int = 200) -> list[bytes]:
    """``count`` records, one per batch, acks=all; the values acknowledged."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 0, "batch.num.messages": 1,
                         "enable.idempotence": True})
    acked: list[bytes] = []
    failed: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        (failed if err is not None else acked).append(err or msg.value())

    for i in range(count):
        producer.produce(topic, f"{topic}-{i:06d}-".encode().ljust(size, b"x"), partition=0,
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed[:3]
    return acked


def read_all(cluster: Cluster, topic: str, expected: int, timeout_s: float = 60.0
             ) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"{topic}-r",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        consumer.assign([CTopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while len(values) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is None:
                    values.append(msg.value())
    finally:
        consumer.close()
    return values


def topic_znode(zk_connect: str, topic: str) -> dict[str, Any]:
    zk = ZooKeeperReader(zk_connect)
    try:
        return json.loads(zk.get(znodes.topic_path(topic)) or b"{}")
    finally:
        zk.close()


def controlled_by_1(cluster_factory: Any) -> Cluster:
    """Three nodes, node 1 started first (the controller, with the short ZooKeeper session:
    replaced quickly when killed); node 3, to be paused, keeps its registration through a
    pause (a paused controller would answer nothing)."""
    cluster: Cluster = cluster_factory(3, node_config={3: PAUSABLE}, start=False)
    cluster.nodes[1].start()
    cluster.wait_formed()
    for i in (2, 3):
        cluster.nodes[i].start()
    cluster.wait_formed()
    assert cluster.controller() == 1
    return cluster


def partition_dir_gone(cluster: Cluster, broker: int, topic: str) -> bool:
    return not any(cluster.nodes[broker].data_dir.rglob(f"{topic}-0/*.log"))


def test_move_under_acks_all_keeps_every_acknowledged_record(
        cluster_factory: Any, zk_connect: str) -> None:
    """RF 1 on broker 1 moved to broker 3 while a producer sends with acks=all: broker 3
    leads the partition alone after, broker 1's replica is deleted, and every record
    acknowledged before, during and after the move is read back from broker 3."""
    cluster: Cluster = cluster_factory(3)
    with admin(cluster) as client:
        create(client, "moved", [1])
        placed(cluster, "moved", [1])
        acked = backlog(cluster, "moved", 500)

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "linger.ms": 5, "enable.idempotence": True,
                             "message.timeout.ms": 60_000})
        failed: list[Any] = []
        stop = threading.Event()

        def delivered(err: Any, msg: Any) -> None:
            (failed if err is not None else acked).append(err or msg.value())

        def keep_producing() -> None:
            deadline = time.monotonic() + 90
            i = 0
            while not stop.is_set() and time.monotonic() < deadline and i < 50_000:
                producer.produce("moved", f"live-{i:06d}".encode(), partition=0,
                                 on_delivery=delivered)
                producer.poll(0.002)
                i += 1
            producer.flush(60)

        sender = threading.Thread(target=keep_producing, daemon=True)
        sender.start()
        wait_for("the producer to be acknowledged during the test",
                 lambda: len(acked) > 600 or None)
        answer = client.alter_partition_reassignments({TopicPartition("moved", 0): [3]})
        assert answer == {TopicPartition("moved", 0): None}
        view = placed(cluster, "moved", [3])
        assert view.partitions[("moved", 0)].leader == 3
        wait_for("the reassignment to leave the list",
                 lambda: client.list_partition_reassignments() == {} or None)
        during = len(acked)
        wait_for("more records acknowledged after the move",
                 lambda: len(acked) > during + 200 or None, 60)
        stop.set()
        sender.join(120)
        assert not sender.is_alive() and not failed, failed[:3]

    doc = topic_znode(zk_connect, "moved")
    assert doc["partitions"] == {"0": [3]}
    assert not doc.get("adding_replicas") and not doc.get("removing_replicas")
    wait_for("broker 1 to delete its replica", lambda: partition_dir_gone(cluster, 1, "moved"))
    read = read_all(cluster, "moved", len(acked))
    missing = set(acked) - set(read)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:3]}"


def test_replication_factor_grows_from_one_to_three(cluster_factory: Any,
                                                    zk_connect: str) -> None:
    cluster: Cluster = cluster_factory(3)
    with admin(cluster) as client:
        create(client, "grown", [2])
        placed(cluster, "grown", [2])
        acked = backlog(cluster, "grown", 300)
        answer = client.alter_partition_reassignments({TopicPartition("grown", 0): [2, 1, 3]})
        assert answer == {TopicPartition("grown", 0): None}
        view = placed(cluster, "grown", [2, 1, 3])
        assert view.partitions[("grown", 0)].leader == 2
        assert set(view.partitions[("grown", 0)].isr) == {1, 2, 3}
        wait_for("the reassignment to leave the list",
                 lambda: client.list_partition_reassignments() == {} or None)
    assert _assignment(zk_connect, "grown") == {0: [2, 1, 3]}
    assert set(read_all(cluster, "grown", len(acked))) == set(acked)


@pytest.mark.num_processes(1)
def test_a_move_in_progress_is_listed_and_cancelled(cluster_factory: Any,
                                                    zk_connect: str) -> None:
    """Broker 3 paused (it cannot fetch): the move is listed with its adding and removing
    replicas (Kafka's znode fields too); cancelled, the partition is back on broker 1
    alone; broker 3, continued, deletes its copy, and nothing acknowledged is lost."""
    cluster = controlled_by_1(cluster_factory)
    tp = TopicPartition("slow", 0)
    with admin(cluster) as client:
        create(client, "slow", [1])
        placed(cluster, "slow", [1])
        acked = backlog(cluster, "slow", 300)
        cluster.nodes[3].pause()
        try:
            cancel_while_paused(cluster, client, zk_connect, tp)
        finally:
            cluster.nodes[3].resume()
        placed(cluster, "slow", [1])
        assert client.alter_partition_reassignments({tp: None}) == {
            tp: kerr.NoReassignmentInProgressError}
    doc = topic_znode(zk_connect, "slow")
    assert doc["partitions"] == {"0": [1]} and not doc.get("adding_replicas")
    wait_for("broker 3 to delete its copy", lambda: partition_dir_gone(cluster, 3, "slow"))
    assert set(read_all(cluster, "slow", len(acked))) == set(acked)


def cancel_while_paused(cluster: Cluster, client: KafkaAdminClient, zk_connect: str,
                        tp: TopicPartition) -> None:
    """The move to the paused broker 3: listed, not in the ISR; then cancelled."""
    assert client.alter_partition_reassignments({tp: [3]}) == {tp: None}
    listed = client.list_partition_reassignments()
    assert listed == {tp: {"replicas": [3, 1], "adding_replicas": [3],
                           "removing_replicas": [1]}}, listed
    assert client.list_partition_reassignments([tp]) == listed
    assert client.list_partition_reassignments({"other": [0]}) == {}
    doc = topic_znode(zk_connect, "slow")
    assert doc["partitions"] == {"0": [3, 1]}
    assert doc["adding_replicas"] == {"0": [3]} and doc["removing_replicas"] == {"0": [1]}
    # paused: not in the ISR, broker 1 leads on
    view = placed(cluster, "slow", [3, 1], isr={1}, via=[1, 2])
    assert view.partitions[("slow", 0)].leader == 1
    assert cluster.nodes[3].continued_while_paused == 0

    assert client.alter_partition_reassignments({tp: None}) == {tp: None}
    assert client.list_partition_reassignments() == {}


@pytest.mark.num_processes(1)
def test_bad_sets_get_kafkas_codes(cluster_factory: Any, zk_connect: str) -> None:
    cluster: Cluster = cluster_factory(3)
    with admin(cluster) as client:
        create(client, "fixed", [1, 2])
        placed(cluster, "fixed", [1, 2])
        bad = kerr.InvalidReplicationAssignmentError
        answer = client.alter_partition_reassignments({
            TopicPartition("fixed", 0): [2, 2],
            TopicPartition("absent", 0): [1],
            TopicPartition("fixed", 4): [1]})
        assert answer == {TopicPartition("fixed", 0): bad,
                          TopicPartition("absent", 0): kerr.UnknownTopicOrPartitionError,
                          TopicPartition("fixed", 4): kerr.UnknownTopicOrPartitionError}
        assert client.alter_partition_reassignments({TopicPartition("fixed", 0): [3, 9]}) == {
            TopicPartition("fixed", 0): bad}
        assert client.alter_partition_reassignments({TopicPartition("fixed", 0): [-1]}) == {
            TopicPartition("fixed", 0): bad}
        assert client.alter_partition_reassignments({TopicPartition("fixed", 0): None}) == {
            TopicPartition("fixed", 0): kerr.NoReassignmentInProgressError}
    # an empty list (kafka-python refuses to send one), through a node that forwards
    via = next(n for i, n in cluster.nodes.items() if i != cluster.controller())
    with RawClient(via.port) as raw:
        response = raw.call(ALTER_REASSIGNMENTS, 0, {"timeout_ms": 30_000, "topics": [
            {"name": "fixed", "partitions": [{"partition_index": 0, "replicas": []}]}]})
    assert response.error_code == 0
    [[code]] = [[p.error_code for p in t.partitions] for t in response.responses]
    assert code == 39  # INVALID_REPLICA_ASSIGNMENT
    assert _assignment(zk_connect, "fixed") == {0: [1, 2]}
    assert placed(cluster, "fixed", [1, 2])


@pytest.mark.num_processes(1)
def test_a_new_controller_resumes_a_move_after_kill_9(cluster_factory: Any,
                                                      zk_connect: str) -> None:
    """The controller is killed while the added replica's node is paused (the move listed,
    the replica out of the ISR): the next controller reads the move from the topic znode
    and completes it once the node, continued, is in sync."""
    cluster = controlled_by_1(cluster_factory)
    controller, source, target = 1, 2, 3
    tp = TopicPartition("resumed", 0)
    try:
        with admin(cluster) as client:
            create(client, "resumed", [source])
            placed(cluster, "resumed", [source])
            acked = backlog(cluster, "resumed", 300)
            cluster.nodes[target].pause()
            try:
                assert client.alter_partition_reassignments({tp: [target]}) == {tp: None}
                assert tp in client.list_partition_reassignments()
                placed(cluster, "resumed", [target, source], isr={source}, via=[1, 2])
                cluster.nodes[controller].kill()
                wait_for("another controller", lambda: cluster.view(source).controller_id
                         not in (controller, -1) or None, 60)
                assert cluster.nodes[target].continued_while_paused == 0
            finally:
                cluster.nodes[target].resume()
        placed(cluster, "resumed", [target], timeout_s=60)
        doc = topic_znode(zk_connect, "resumed")
        assert doc["partitions"] == {"0": [target]} and not doc.get("adding_replicas")
        wait_for(f"broker {source} to delete its replica",
                 lambda: partition_dir_gone(cluster, source, "resumed"))
        assert set(read_all(cluster, "resumed", len(acked))) == set(acked)
    finally:
        if not cluster.nodes[controller].running:
            cluster.nodes[controller].start()
