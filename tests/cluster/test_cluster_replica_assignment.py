"""CreateTopics with a manual replica assignment (``kafka-topics.sh --replica-assignment``,
an admin client's NewTopic with replicas) on three `actorlog serve` processes and a real
ZooKeeper: the controller writes the assignment as given, the first live replica of each
partition leads, and a bad assignment gets Kafka's error code, with confluent-kafka's
AdminClient, kafka-python's KafkaAdminClient and raw requests.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

from tests.broker.rawclient import RawClient
from tests.cluster.test_cluster_admin import _assignment, _code
from tests.fixtures.cluster import Cluster, ClusterView, wait_for
from wire.errors import ErrorCode

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients, pytest.mark.num_processes(1, 2)]

CREATE_TOPICS = 19
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
INVALID_REPLICA_ASSIGNMENT = int(ErrorCode.INVALID_REPLICA_ASSIGNMENT)


def _placed(cluster: Cluster, topic: str, replicas: dict[int, list[int]]) -> ClusterView:
    """Every node's Metadata shows ``replicas`` for ``topic``, each led by its first."""
    def shown(i: int) -> ClusterView | None:
        view = cluster.nodes[i].metadata([topic])
        got = {p: list(part.replicas) for (t, p), part in view.partitions.items() if t == topic}
        leaders = view.leaders(topic)
        return view if got == replicas and all(
            leaders[p] == r[0] for p, r in replicas.items()) else None

    view = None
    for i in cluster.nodes:
        view = wait_for(f"node {i} shows {topic} placed as {replicas}", lambda i=i: shown(i))
    assert view is not None
    return view


def _raw_create(cluster: Cluster, topics: list[dict[str, Any]],
                validate_only: bool = False) -> dict[str, tuple[int, str | None]]:
    """One CreateTopics v5 to a node that is not the controller: name -> (error, message)."""
    via = next(n for i, n in cluster.nodes.items() if i != cluster.controller())
    with RawClient(via.port) as client:
        response = client.call(CREATE_TOPICS, 5, {
            "topics": [{"num_partitions": -1, "replication_factor": -1, "configs": [], **t}
                       for t in topics],
            "timeout_ms": 30_000, "validate_only": validate_only})
    return {t.name: (t.error_code, t.error_message) for t in response.topics}


def _assigned(*partitions: list[int], first: int = 0) -> list[dict[str, Any]]:
    return [{"partition_index": first + i, "broker_ids": b} for i, b in enumerate(partitions)]


def test_manual_assignments_are_written_as_given_and_led_by_their_first_replica(
        cluster_factory: Any, zk_connect: str) -> None:
    cluster: Cluster = cluster_factory(3)
    via = next(i for i in cluster.nodes if i != cluster.controller())
    client = AdminClient({"bootstrap.servers": cluster.nodes[via].bootstrap})

    # confluent-kafka (librdkafka: the partition count is its own check, the request
    # carries -1), through a node that forwards to the controller
    wanted = {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    client.create_topics([NewTopic("placed", 3, replica_assignment=list(wanted.values()))],
                         operation_timeout=30)["placed"].result(30)
    assert _assignment(zk_connect, "placed") == wanted
    view = _placed(cluster, "placed", wanted)
    assert all(set(part.isr) == set(part.replicas) for part in view.partitions.values())

    # kafka-python, the partitions given out of order and led by the highest id
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        answer = kp.create_topics([KpNewTopic("placed-kp", replica_assignments={
            1: [1, 3, 2], 0: [3, 2, 1]})], timeout_ms=30_000)
        assert [t["error_code"] for t in answer["topics"]] == [0], answer
    finally:
        kp.close()
    assert _assignment(zk_connect, "placed-kp") == {0: [3, 2, 1], 1: [1, 3, 2]}
    _placed(cluster, "placed-kp", {0: [3, 2, 1], 1: [1, 3, 2]})

    # acks=all through every partition's leader, read back by a consumer
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True})
    failed: list[Any] = []
    for topic, count in (("placed", 3), ("placed-kp", 2)):
        for p in range(count):
            for n in range(5):
                producer.produce(topic, f"{topic}-{p}-{n}".encode(), partition=p,
                                 on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "placed-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["placed", "placed-kp"])
        read: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(read) < 25 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                value = msg.value()
                assert value is not None
                read.add(value)
                assert value.startswith(f"{msg.topic()}-{msg.partition()}-".encode())
    finally:
        consumer.close()
    assert len(read) == 25

    # validate_only checks the assignment and creates nothing
    client.create_topics([NewTopic("checked", 1, replica_assignment=[[2, 1]])],
                         validate_only=True)["checked"].result(30)
    assert _assignment(zk_connect, "checked") == {}
    assert "checked" not in cluster.view().topics()


def test_bad_manual_assignments_get_kafkas_error_codes(cluster_factory: Any,
                                                        zk_connect: str) -> None:
    cluster: Cluster = cluster_factory(3)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    bad = {
        "gap": [[1, 2], [2, 3]],  # named 0 and 2 below (raw)
        "uneven": [[1, 2], [3]],
        "twice": [[1, 1]],
        "unknown": [[1, 9]],
    }
    futures = client.create_topics([NewTopic(n, len(a), replica_assignment=a)
                                    for n, a in bad.items() if n != "gap"])
    for name, future in futures.items():
        with pytest.raises(KafkaException) as refused:
            future.result(30)
        assert _code(refused.value) == INVALID_REPLICA_ASSIGNMENT, (name, refused.value)

    # What a client library does not let through: raw requests
    answers = _raw_create(cluster, [
        {"name": "gap", "assignments": [{"partition_index": 0, "broker_ids": [1, 2]},
                                        {"partition_index": 2, "broker_ids": [2, 3]}]},
        {"name": "from-one", "assignments": _assigned([1], [2], first=1)},
        {"name": "empty", "assignments": _assigned([])},
        {"name": "same-partition", "assignments": [{"partition_index": 0, "broker_ids": [1]},
                                                   {"partition_index": 0, "broker_ids": [2]}]},
        {"name": "with-count", "num_partitions": 1, "assignments": _assigned([1])},
        {"name": "with-rf", "replication_factor": 1, "assignments": _assigned([1])},
        {"name": "good", "assignments": _assigned([2, 3], [3, 1])},
    ])
    assert {n: code for n, (code, _m) in answers.items()} == {
        "gap": INVALID_REPLICA_ASSIGNMENT, "from-one": INVALID_REPLICA_ASSIGNMENT,
        "empty": INVALID_REPLICA_ASSIGNMENT, "same-partition": INVALID_REPLICA_ASSIGNMENT,
        "with-count": INVALID_REQUEST,
        "with-rf": INVALID_REQUEST, "good": 0}
    assert answers["same-partition"][1] == "partition 0 is assigned more than once"
    # Kafka answers an existing topic as such before looking at its assignment
    again = _raw_create(cluster, [{"name": "good", "assignments": _assigned([1, 1])}])
    assert again["good"][0] == int(ErrorCode.TOPIC_ALREADY_EXISTS)
    # kafka-python sends the counts it is given with the assignment
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        answer = kp.create_topics([KpNewTopic("kp-count", 2, 2, replica_assignments={
            0: [1, 2], 1: [2, 3]})], raise_errors=False)
        assert [t["error_code"] for t in answer["topics"]] == [INVALID_REQUEST], answer
    finally:
        kp.close()
    refused = {"gap", "uneven", "twice", "unknown", "empty", "from-one", "same-partition",
               "with-count", "with-rf", "kp-count"}
    assert not refused & cluster.view().topics()
    assert all(_assignment(zk_connect, n) == {} for n in refused)

    # A broker that left the cluster is not registered: no new replica goes there, by
    # CreateTopics or CreatePartitions, INVALID_REPLICA_ASSIGNMENT both (stricter than
    # Kafka, which accepts a stopped broker: see the README)
    gone = next(i for i in cluster.nodes if i != cluster.controller())
    cluster.nodes[gone].stop()
    wait_for(f"broker {gone} gone from the metadata",
             lambda: gone not in cluster.view().brokers or None)
    live = [i for i in cluster.nodes if i != gone]
    futures = client.create_topics([NewTopic("to-gone", 1, replica_assignment=[[gone, live[0]]]),
                                    NewTopic("to-live", 1, replica_assignment=[live])])
    with pytest.raises(KafkaException) as to_gone:
        futures["to-gone"].result(30)
    assert _code(to_gone.value) == INVALID_REPLICA_ASSIGNMENT
    futures["to-live"].result(30)
    grow = client.create_partitions([NewPartitions("to-live", 2, [[live[1], gone]])])
    with pytest.raises(KafkaException) as grown:
        grow["to-live"].result(30)
    assert _code(grown.value) == INVALID_REPLICA_ASSIGNMENT
    client.create_partitions([NewPartitions("to-live", 2, [[live[1], live[0]]])])[
        "to-live"].result(30)
    assert _assignment(zk_connect, "to-live") == {0: live, 1: [live[1], live[0]]}
    view = wait_for("to-live's two partitions led by their first replica", lambda: (
        lambda v: v if v.leaders("to-live") == {0: live[0], 1: live[1]} else None)(
            cluster.nodes[live[0]].metadata(["to-live"])))
    assert view.partitions[("to-live", 1)].replicas == (live[1], live[0])
