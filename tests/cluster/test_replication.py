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


def test_a_paused_follower_leaves_the_isr_and_rejoins(cluster_factory: Any) -> None:
    """SIGSTOP past replica.lag.time.max.ms (but within the ZooKeeper session): the leader
    shrinks the ISR through the controller (AlterPartition: same leader epoch), acks=all goes
    on with two; with the second follower paused too, acks=all is refused with
    NOT_ENOUGH_REPLICAS; SIGCONT: both rejoin and every acknowledged record is there."""
    cluster = cluster_factory(config={**FAST, "zookeeper.session.timeout.ms": 15000})
    leaders = create_topic(cluster, partitions=3)
    # The partition the controller leads: ISR changes go through the controller, and a
    # paused controller makes none.
    p = [q for q, b in leaders.items() if b == cluster.controller()][0]
    leader = leaders[p]
    epoch = cluster.view().partitions[(TOPIC, p)].leader_epoch
    first, second = [n for n in cluster.nodes.values() if n.broker_id != leader]
    acked, errors = produce_acks_all(cluster, [b"before-%d" % i for i in range(50)], p)
    assert errors == [] and len(acked) == 50

    first.pause()
    try:
        isr = wait_for("the paused follower out of the ISR",
                       lambda: (lambda isr: isr if first.broker_id not in isr else None)(
                           isr_of(cluster, p, via=leader)), timeout_s=30)
        assert isr == tuple(sorted({leader, second.broker_id}))
        assert cluster.view(leader).partitions[(TOPIC, p)].leader_epoch == epoch
        more, errors = produce_acks_all(cluster, [b"isr2-%d" % i for i in range(50)], p)
        assert errors == [] and len(more) == 50
        acked += more

        second.pause()
        try:
            wait_for("the leader alone in the ISR",
                     lambda: isr_of(cluster, p, via=leader) == (leader,), timeout_s=30)
            refused = produce_to(cluster.nodes[leader], TOPIC, p, [b"refused"])
            assert refused.error_code == int(ErrorCode.NOT_ENOUGH_REPLICAS)
            one = produce_to(cluster.nodes[leader], TOPIC, p, [b"acks1"], acks=1)
            assert one.error_code == 0
        finally:
            second.resume()
    finally:
        first.resume()
    wait_for("both followers back in the ISR",
             lambda: isr_of(cluster, p, via=leader) == (1, 2, 3), timeout_s=60)
    last, errors = produce_acks_all(cluster, [b"after-%d" % i for i in range(20)], p)
    assert errors == [] and len(last) == 20
    acked += last
    records = wait_for("three identical replicas", lambda: same_logs(cluster, p), timeout_s=30)
    values = values_of(records)
    assert b"refused" not in values
    assert [v for v in values if v != b"acks1"] == acked
    assert consume_all(cluster.bootstrap, p, expect=len(values)) == values
    log = cluster.nodes[leader].log()
    assert "proposing ISR" in log and "ISR is now" in log


def test_a_leader_that_appended_past_the_high_watermark_truncates_when_back(
        cluster_factory: Any) -> None:
    """Divergent logs: the leader appends with acks=1 while its followers are stopped, dies
    (kill -9); a follower leads at a new epoch and takes new records; the old leader comes
    back as a follower and cuts its log at the new epoch's start (record by record equal)."""
    cluster = cluster_factory(config={**FAST, "replica.lag.time.max.ms": 30000})
    leaders = create_topic(cluster, partitions=3)
    # A partition a non-controller leads: the controller elects its next leader.
    p = [q for q, b in leaders.items() if b != cluster.controller()][0]
    old = cluster.nodes[leaders[p]]
    followers = [n for n in cluster.nodes.values() if n is not old]
    acked, errors = produce_acks_all(cluster, [b"common-%d" % i for i in range(30)], p)
    assert errors == [] and len(acked) == 30
    wait_for("the followers caught up", lambda: same_logs(cluster, p), timeout_s=30)

    for node in followers:
        node.pause()
    try:
        # Fetches the followers sent before they stopped wait on the leader at most
        # replica.fetch.wait.max.ms (500): let them be answered (empty) first, so nothing
        # appended from now on reaches a follower.
        time.sleep(1.5)
        for i in range(5):
            answer = produce_to(old, TOPIC, p, [b"lost-%d-%d" % (i, j) for j in range(3)],
                                acks=1)
            assert answer.error_code == 0
        assert len(disk_records(old, TOPIC, p)) == 45
        old.kill()
    finally:
        for node in followers:
            node.resume()

    def new_leader() -> int | None:
        leader = cluster.view(followers[0].broker_id).partitions[(TOPIC, p)].leader
        return leader if leader in {n.broker_id for n in followers} else None

    wait_for("a new leader", new_leader, timeout_s=60)
    new_epoch = cluster.view(followers[0].broker_id).partitions[(TOPIC, p)].leader_epoch
    more, errors = produce_acks_all(cluster, [b"new-%d" % i for i in range(20)], p)
    assert errors == [] and len(more) == 20

    old.start()
    records = wait_for("the old leader holding the new leader's log",
                       lambda: same_logs(cluster, p), timeout_s=60)
    assert values_of(records) == acked + more
    assert not any((r.value or b"").startswith(b"lost-") for r in disk_records(old, TOPIC, p))
    assert {r.leader_epoch for r in records[30:]} == {new_epoch}
    assert (new_epoch, 30) in epoch_checkpoint(old, TOPIC, p)
    assert "truncating from 45 to 30" in old.log()
