"""A cluster of three nodes with two listeners each, SASL_PLAINTEXT first and PLAINTEXT
second: a client bootstrapping on the PLAINTEXT ports is told every node's PLAINTEXT
endpoint (the ``endpoints`` each node registered in ``/brokers/ids/<id>``, by listener
name), so it produces to the partitions' leaders and consumes in a group through its
coordinator. Told the SASL_PLAINTEXT ports (the first listener's, as before), its
requests there would be refused before authentication. Once per num.processes (1, 2).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.rawclient import build
from tests.fixtures.broker import free_port
from tests.fixtures.cluster import Cluster, kafka_call

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients, pytest.mark.num_processes(1, 2)]

FIND_COORDINATOR, DESCRIBE_CLUSTER = 10, 60


def _two_listener_cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    cluster = cluster_factory(3, config={"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                                         "offsets.topic.replication.factor": 3},
                              start=False)
    for node in cluster.nodes.values():
        sasl_port, plain_port = free_port(), free_port()
        node.process.listen = (f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                               f"PLAINTEXT://127.0.0.1:{plain_port}")
        node.process.port = plain_port  # the tests' own requests (and readiness) come here
        node.sasl_port = sasl_port  # type: ignore[attr-defined]
    return cluster.start()


def test_a_client_on_the_second_listener_sees_and_uses_its_ports(
        cluster_factory: Callable[..., Cluster]) -> None:
    cluster = _two_listener_cluster(cluster_factory)
    plain = {i: ("127.0.0.1", n.port) for i, n in cluster.nodes.items()}
    sasl_ports = {n.sasl_port for n in cluster.nodes.values()}  # type: ignore[attr-defined]
    assert not sasl_ports & {port for _h, port in plain.values()}
    # the client first: told the SASL_PLAINTEXT ports, it would fail here
    topic = f"second-{time.time_ns()}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    view = cluster.wait_topic(topic, 3)
    assert all(p.error_code == 0 for p in view.partitions.values())

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "message.timeout.ms": 30000})
    for i in range(30):
        producer.produce(topic, f"v{i}".encode(), partition=i % 3,
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    assert producer.flush(40) == 0 and not errors, errors[:3]

    group = f"g-{time.time_ns()}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[Any] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < 30 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(bytes(msg.value()))
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(30))
        consumer.commit(asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=10)
        assert sorted(tp.offset for tp in committed) == [10, 10, 10]
    except KafkaException as exc:
        raise AssertionError(str(exc)) from None
    finally:
        consumer.close()

    # what it was told, and what every node answers on this listener
    md = producer.list_topics(topic, timeout=10)
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == plain
    assert all(p.leader in plain for p in md.topics[topic].partitions.values())
    for node in cluster.nodes.values():
        view = node.metadata()
        assert {i: (h, p) for i, (h, p, _r) in view.brokers.items()} == plain, node.broker_id
        described = kafka_call("127.0.0.1", node.port, build(DESCRIBE_CLUSTER, 0, {
            "include_cluster_authorized_operations": False}))
        assert {b.broker_id: (b.host, b.port) for b in described.brokers} == plain
        found = kafka_call("127.0.0.1", node.port, build(FIND_COORDINATOR, 4, {
            "key_type": 0, "coordinator_keys": [group]}), timeout_s=20)
        [coordinator] = found.coordinators
        assert coordinator.error_code == 0, coordinator
        assert (coordinator.host, coordinator.port) == plain[coordinator.node_id]
