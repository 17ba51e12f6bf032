"""DescribeProducers (API 61, KIP-664) in a cluster of three real nodes, a partition of
two replicas written by a real idempotent producer and a real transactional one (its
transaction committed): as Kafka's
ReplicaManager.activeProducerState, the leader and the follower each answer the producer
from their own log's state (the follower's from the batches it replicated), and the node
that holds no replica answers NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer

from tests.broker.rawclient import RawClient
from tests.cluster.test_replication import FAST, TOPIC, create_topic, isr_of
from tests.fixtures.cluster import ClusterNode, wait_for
from wire.errors import ErrorCode

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]


def describe(node: ClusterNode) -> tuple[int, list[tuple[int, int, int, int, int]]]:
    """(error, [(producer id, epoch, last sequence, coordinator epoch, open transaction's
    offset)]) of partition 0, as ``node`` answers."""
    with RawClient(node.port) as client:
        reply = client.call(61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    [part] = reply.topics[0].partitions
    return int(part.error_code), sorted(
        (p.producer_id, p.producer_epoch, p.last_sequence, p.coordinator_epoch,
         p.current_txn_start_offset) for p in part.active_producers)


def test_leader_and_follower_answer_their_producers_a_node_without_replica_does_not(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(config=FAST)
    create_topic(cluster, partitions=1, rf=2)
    view = cluster.view().partitions[(TOPIC, 0)]
    leader = cluster.nodes[view.leader]
    [follower] = [cluster.nodes[r] for r in view.replicas if r != view.leader]
    [outsider] = [n for n in cluster.nodes.values() if n.broker_id not in view.replicas]
    wait_for("both replicas in the ISR", lambda: len(isr_of(cluster)) == 2, 30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 0})
    for i in range(4):  # four batches: sequences 0..3
        producer.produce(TOPIC, f"v{i}".encode(), partition=0)
        assert producer.flush(30) == 0

    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "dp-txn",
                    "linger.ms": 0})
    txn.init_transactions(60)
    txn.begin_transaction()
    txn.produce(TOPIC, b"t", partition=0)
    txn.commit_transaction(60)

    # EndTxn answers once the commit is decided; the coordinator writes the markers after
    # that (Kafka's too): wait for the leader's marker to close the transaction
    def committed() -> list[tuple[int, int, int, int, int]] | None:
        code, producers = describe(leader)
        assert code == 0 and len(producers) == 2, (code, producers)
        return producers if all(p[4] == -1 for p in producers) else None

    producers = wait_for("the commit marker on the leader", committed, 30)
    idempotent, transactional = sorted(producers, key=lambda p: p[2], reverse=True)
    (_pid, epoch, last_sequence, coordinator_epoch, open_txn) = idempotent
    assert epoch >= 0 and last_sequence == 3 and coordinator_epoch == -1 and open_txn == -1
    (_pid, epoch, last_sequence, coordinator_epoch, open_txn) = transactional
    assert last_sequence == 0 and coordinator_epoch >= 0 and open_txn == -1
    # acks=all (the marker too): the follower holds the batches and the marker, and so
    # the same producers, its own state built from what it replicated
    wait_for("the follower's producers", lambda: describe(follower) == (0, producers), 30)
    assert describe(outsider) == (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), [])
    # kafka-python's admin call, sent to a chosen replica as Kafka's --broker-id
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NotLeaderForPartitionError

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        found = admin.describe_producers([TopicPartition(TOPIC, 0)], broker_id=follower.broker_id)
        assert sorted((p.producer_id, p.producer_epoch, p.last_sequence, p.coordinator_epoch,
                       p.current_transaction_start_offset)
                      for p in found[TopicPartition(TOPIC, 0)].active_producers) == producers
        with pytest.raises(NotLeaderForPartitionError):
            admin.describe_producers([TopicPartition(TOPIC, 0)], broker_id=outsider.broker_id)
    finally:
        admin.close()
