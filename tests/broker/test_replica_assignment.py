"""A single node takes CreateTopics with a manual replica assignment, as Kafka does, when
every replica is this node (the only broker there is): confluent-kafka's and kafka-python's
NewTopic with replicas, raw requests for what the clients do not send, and Kafka's error
codes for the rest. CreatePartitions' assignments follow the same rules.
"""

from __future__ import annotations

import uuid
from typing import Any

import kafka.errors as kerr
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

from tests.broker.rawclient import RawClient
from tests.fixtures.broker import BrokerProcess
from wire.errors import ErrorCode

pytestmark = [pytest.mark.clients, pytest.mark.num_processes(1, 2)]

CREATE_TOPICS = 19
METADATA = 3
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
INVALID_REPLICA_ASSIGNMENT = int(ErrorCode.INVALID_REPLICA_ASSIGNMENT)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _node_id(broker: BrokerProcess) -> int:
    with RawClient(broker.port) as client:
        answer = client.call(METADATA, 1, {"topics": []})
    [node] = answer.brokers
    return int(node.node_id)


def _partitions(broker: BrokerProcess, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr), from a Metadata v1 answer."""
    with RawClient(broker.port) as client:
        answer = client.call(METADATA, 1, {"topics": [{"name": topic}]})
    [t] = answer.topics
    assert t.error_code == 0, t
    return {p.partition_index: (p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
            for p in t.partitions}


def _raw_create(broker: BrokerProcess, topics: list[dict[str, Any]],
                validate_only: bool = False) -> dict[str, tuple[int, str | None]]:
    with RawClient(broker.port) as client:
        response = client.call(CREATE_TOPICS, 5, {
            "topics": [{"num_partitions": -1, "replication_factor": -1, "configs": [], **t}
                       for t in topics],
            "timeout_ms": 10_000, "validate_only": validate_only})
    return {t.name: (t.error_code, t.error_message) for t in response.topics}


def _code(future: Any) -> int:
    with pytest.raises(KafkaException) as refused:
        future.result(30)
    return int(refused.value.args[0].code())


def test_a_manual_assignment_on_this_node_makes_a_working_topic(broker: BrokerProcess) -> None:
    me = _node_id(broker)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    by_confluent, by_kp = _name("placed-c"), _name("placed-k")
    admin.create_topics([NewTopic(by_confluent, 3, replica_assignment=[[me]] * 3)],
                        operation_timeout=30)[by_confluent].result(30)
    assert _partitions(broker, by_confluent) == {p: (me, [me], [me]) for p in range(3)}
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        answer = kp.create_topics([KpNewTopic(by_kp, replica_assignments={1: [me], 0: [me]})])
        assert [t["error_code"] for t in answer["topics"]] == [0], answer
        # the topic's counts are the assignment's: 2 partitions, 1 replica
        assert [(t["num_partitions"], t["replication_factor"]) for t in answer["topics"]] == [
            (2, 1)]
    finally:
        kp.close()
    assert _partitions(broker, by_kp) == {p: (me, [me], [me]) for p in range(2)}

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True})
    failed: list[Any] = []
    for topic, count in ((by_confluent, 3), (by_kp, 2)):
        for p in range(count):
            producer.produce(topic, f"{topic}/{p}".encode(), partition=p,
                             on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("reader"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([by_confluent, by_kp])
        read: set[bytes] = set()
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                value = msg.value()
                assert value == f"{msg.topic()}/{msg.partition()}".encode()
                read.add(value)
            if len(read) == 5:
                break
    finally:
        consumer.close()
    assert len(read) == 5

    # validate_only checks and makes nothing
    checked = _name("checked")
    admin.create_topics([NewTopic(checked, 1, replica_assignment=[[me]])],
                        validate_only=True)[checked].result(30)
    assert checked not in admin.list_topics(timeout=10).topics


def test_bad_manual_assignments_get_kafkas_error_codes(broker: BrokerProcess) -> None:
    me = _node_id(broker)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    other, twice, two = _name("other"), _name("twice"), _name("two")
    futures = admin.create_topics([NewTopic(other, 1, replica_assignment=[[me + 1]]),
                                   NewTopic(twice, 1, replica_assignment=[[me, me]]),
                                   NewTopic(two, 1, replica_assignment=[[me, me + 1]])])
    assert {n: _code(f) for n, f in futures.items()} == {
        other: INVALID_REPLICA_ASSIGNMENT, twice: INVALID_REPLICA_ASSIGNMENT,
        two: INVALID_REPLICA_ASSIGNMENT}

    names = {k: _name(k) for k in ("gap", "from-one", "empty", "same-partition",
                                   "with-count", "with-rf", "good")}
    answers = _raw_create(broker, [
        {"name": names["gap"], "assignments": [{"partition_index": 0, "broker_ids": [me]},
                                               {"partition_index": 2, "broker_ids": [me]}]},
        {"name": names["from-one"], "assignments": [{"partition_index": 1, "broker_ids": [me]}]},
        {"name": names["empty"], "assignments": [{"partition_index": 0, "broker_ids": []}]},
        {"name": names["same-partition"], "assignments": [
            {"partition_index": 0, "broker_ids": [me]}, {"partition_index": 0,
                                                         "broker_ids": [me]}]},
        {"name": names["with-count"], "num_partitions": 1,
         "assignments": [{"partition_index": 0, "broker_ids": [me]}]},
        {"name": names["with-rf"], "replication_factor": 1,
         "assignments": [{"partition_index": 0, "broker_ids": [me]}]},
        {"name": names["good"], "assignments": [{"partition_index": 0, "broker_ids": [me]}]},
    ])
    assert {k: answers[n][0] for k, n in names.items()} == {
        "gap": INVALID_REPLICA_ASSIGNMENT, "from-one": INVALID_REPLICA_ASSIGNMENT,
        "empty": INVALID_REPLICA_ASSIGNMENT, "same-partition": INVALID_REPLICA_ASSIGNMENT,
        "with-count": INVALID_REQUEST, "with-rf": INVALID_REQUEST, "good": 0}
    assert answers[names["same-partition"]][1] == "partition 0 is assigned more than once"
    assert answers[names["with-rf"]][1] == ("both a replica assignment and a partition count "
                                            "or replication factor were given")
    # an existing topic is answered as such before its assignment is looked at
    again = _raw_create(broker, [{"name": names["good"], "assignments": [
        {"partition_index": 0, "broker_ids": [me + 1]}]}])
    assert again[names["good"]][0] == int(ErrorCode.TOPIC_ALREADY_EXISTS)
    listed = admin.list_topics(timeout=10).topics
    refused = {n for k, n in names.items() if k != "good"} | {other, twice, two}
    assert refused.isdisjoint(listed)
    assert names["good"] in listed

    # CreatePartitions: the new partitions' assignment, by the same rules
    good = names["good"]
    assert _code(admin.create_partitions([NewPartitions(good, 2, [[me + 1]])])[good]) \
        == INVALID_REPLICA_ASSIGNMENT
    assert _code(admin.create_partitions([NewPartitions(good, 2, [[me, me]])])[good]) \
        == INVALID_REPLICA_ASSIGNMENT
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        with pytest.raises(kerr.InvalidReplicationAssignmentError):
            kp.create_partitions({good: {"count": 3, "assignments": [[me]]}})
        kp.create_partitions({good: {"count": 3, "assignments": [[me], [me]]}})
    finally:
        kp.close()
    assert _partitions(broker, good) == {p: (me, [me], [me]) for p in range(3)}
