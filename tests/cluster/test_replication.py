"""Replication on three real nodes and a real ZooKeeper (issue 15).

Followers fetch from their leader and hold its log record by record; the
ISR shrinks when a follower stops (SIGSTOP) past replica.lag.time.max.ms and
grows again when it catches up; acks=all needs min.insync.replicas; a
leader that appended past the high watermark and died truncates to the new
leader's epoch boundary when it comes back; acknowledged records survive
leaders killed with kill -9.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.fixtures.cluster import Cluster, wait_for
from tests.fixtures.cluster_tools import produce_to
from tests.fixtures.replication import (
    disk_records,
    epoch_checkpoint,
    offset_checkpoint,
    values_of,
)
from wire.errors import ErrorCode

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

TOPIC = "replicated"
FAST = {
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 100,
    "replica.socket.timeout.ms": 5000,
    "replica.high.watermark.checkpoint.interval.ms": 500,
    "min.insync.replicas": 2,
    "auto.leader.rebalance.enable": False,
}


def create_topic(cluster: Cluster, partitions: int = 1, rf: int = 3,
                 configs: dict[str, str] | None = None) -> dict[int, int]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        client.create_topics([NewTopic(TOPIC, partitions, rf, topic_configs=configs or {})])
    finally:
        client.close()
    return cluster.wait_topic(TOPIC, partitions).leaders(TOPIC)


def isr_of(cluster: Cluster, partition: int = 0, via: int | None = None) -> tuple[int, ...]:
    return tuple(sorted(cluster.view(via).partitions[(TOPIC, partition)].isr))


def produce_acks_all(cluster: Cluster, values: list[bytes], partition: int = 0,
                     timeout_s: float = 30.0) -> tuple[list[bytes], list[str]]:
    """confluent-kafka, acks=all and idempotent: (the values acknowledged, the errors)."""
    acked: list[bytes] = []
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 2,
                         "compression.type": "none",
                         "message.timeout.ms": int(timeout_s * 1000)})

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(err.name())

    for value in values:
        producer.produce(TOPIC, value, partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(timeout_s)
    return acked, errors


def consume_all(bootstrap: str, partition: int = 0, timeout_s: float = 30.0,
                expect: int | None = None) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    idle_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if expect is None and time.monotonic() - idle_since > 2.0:
                    break
                if expect is not None and len(out) >= expect:
                    break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                continue
            idle_since = time.monotonic()
            out.append(msg.value())
    finally:
        consumer.close()
    return out


def same_logs(cluster: Cluster, partition: int = 0) -> list[Any] | None:
    """The records when every live replica holds the same ones on disk."""
    logs = [disk_records(n, TOPIC, partition) for n in cluster.live()]
    first = [(r.offset, r.leader_epoch, r.value) for r in logs[0]]
    if all([(r.offset, r.leader_epoch, r.value) for r in log] == first for log in logs[1:]):
        return logs[0] or None
    return None


def test_followers_hold_the_leaders_log_and_acks_all_is_acknowledged(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(config=FAST)
    create_topic(cluster)
    values = [f"v{i}".encode() for i in range(300)]
    acked, errors = produce_acks_all(cluster, values)
    assert errors == [] and acked == values
    records = wait_for("three identical replicas", lambda: same_logs(cluster), timeout_s=30)
    assert values_of(records) == values
    assert [r.offset for r in records] == list(range(300))
    assert isr_of(cluster) == (1, 2, 3)
    assert consume_all(cluster.bootstrap, expect=300) == values
    # Every replica checkpoints its high watermark (replication-offset-checkpoint).
    wait_for("the high watermark checkpointed on every node", lambda: all(
        offset_checkpoint(n, "replication-offset-checkpoint").get((TOPIC, 0)) == 300
        for n in cluster.live()), timeout_s=30)
    for node in cluster.live():
        assert epoch_checkpoint(node, TOPIC, 0)[0][1] == 0
