"""Transactions on a 3-node cluster: the coordinator is the leader of the id's
``__transaction_state`` partition, markers reach partitions led by the other nodes, and
offsets sent in a transaction reach the group coordinator of another node at commit.

(Replication is not on main yet, so the kill -9 of the coordinator's node mid-commit
is not tested here: a successor would have no copy of the state.)
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.broker.test_transactions import read_all, values
from tests.cluster.test_cluster import create

pytestmark = [pytest.mark.clients, pytest.mark.multiprocess]

CONFIG = {
    "transaction.state.log.num.partitions": 6,
    "transaction.state.log.replication.factor": 5,  # capped to the 3 live brokers
    "transaction.state.log.min.isr": 2,
}


def test_transactions_across_nodes(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=CONFIG)
    commit_abort_commit(cluster)
    # __transaction_state: replication capped to the live brokers, min.isr to that
    view = cluster.view(2)
    parts = [q for (t, _), q in view.partitions.items() if t == "__transaction_state"]
    assert len(parts) == 6 and all(len(q.replicas) == 3 for q in parts)
    client = AdminClient({"bootstrap.servers": cluster.nodes[1].bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__transaction_state")
    configs = client.describe_configs([resource])[resource].result(30)
    assert configs["min.insync.replicas"].value == "2"


def test_transactions_across_nodes_with_different_actor_counts(cluster_factory: Any) -> None:
    """Nodes run different num.partition.shards and num.group.coordinators: a coordinator
    sends each marker to the shard that owns the partition on its leader's node, and the
    committed offsets to every GroupCoordinator of the offsets partition's leader, by the
    counts that node registered (by its own counts, markers went to shards that do not
    exist or do not own the partition, and offsets to coordinators that do not hold the
    group)."""
    counts = {1: (1, 1), 2: (3, 3), 3: (2, 2)}
    cluster = cluster_factory(3, config=CONFIG, node_config={
        i: {"num.partition.shards": s, "num.group.coordinators": c}
        for i, (s, c) in counts.items()})
    commit_abort_commit(cluster)


def commit_abort_commit(cluster: Any) -> None:
    """One producer (on node 1) commits, aborts and commits again over partitions every
    node leads, with offsets sent in the first transaction for a group read via node 3."""
    create(cluster, "tx-orders", 6, 1, via=1)
    leaders = cluster.wait_topic("tx-orders", 6).leaders("tx-orders")
    assert len(set(leaders.values())) == 3  # every node leads some partition
    bs = cluster.nodes[1].bootstrap
    group = Consumer({"bootstrap.servers": cluster.nodes[3].bootstrap, "group.id": "tx-group",
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
    p = Producer({"bootstrap.servers": bs, "transactional.id": "cluster-txn", "linger.ms": 5})
    try:
        p.init_transactions(60)
        p.begin_transaction()
        for i, v in enumerate(values("c", 12)):
            p.produce("tx-orders", v, partition=i % 6)
        p.send_offsets_to_transaction([TopicPartition("tx-orders", 0, 7)],
                                      group.consumer_group_metadata(), 30)
        p.commit_transaction(60)
        p.begin_transaction()
        for i, v in enumerate(values("a", 6)):
            p.produce("tx-orders", v, partition=i % 6)
        p.flush(30)
        p.abort_transaction(60)
        p.begin_transaction()
        for i, v in enumerate(values("o", 6)):
            p.produce("tx-orders", v, partition=i % 6)
        p.flush(30)
        via2 = cluster.nodes[2].bootstrap
        assert sorted(read_all(via2, "tx-orders", "read_committed", 6)) == sorted(
            values("c", 12))
        assert len(read_all(via2, "tx-orders", "read_uncommitted", 6)) == 24
        p.commit_transaction(60)
        assert sorted(read_all(via2, "tx-orders", "read_committed", 6)) == sorted(
            values("c", 12) + values("o", 6))
        committed = group.committed([TopicPartition("tx-orders", 0)], timeout=30)
        assert committed[0].offset == 7
    finally:
        group.close()
