"""A cluster's controller applies Kafka's rules for a new topic's name and an internal
topic's partitions, and a leader answers ListOffsets' max timestamp as Kafka's: two
`actorlog serve` nodes, a real ZooKeeper, confluent-kafka's AdminClient and Metadata
through kafka-python's protocol, each asked of the node that is not the controller."""

from __future__ import annotations

import time
from typing import Any

import kafka.errors as kerr
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from actors.core.offsets_codec import partition_for as group_partition
from actors.core.transaction_log import partition_for as txn_partition
from tests.broker.rawclient import METADATA, RawClient
from tests.broker.test_admin_apis import produce_at
from tests.broker.test_transactions import read_all
from tests.fixtures.cluster import Cluster

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]


def _error(future: Any) -> Any:
    with pytest.raises(KafkaException) as caught:
        future.result(timeout=60)
    return caught.value.args[0]


def test_colliding_names_and_internal_partition_counts_are_refused_by_the_controller(
        cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(2, config={"offsets.topic.num.partitions": 3})
    via = next(i for i in cluster.nodes if i != cluster.controller())
    client = AdminClient({"bootstrap.servers": cluster.nodes[via].bootstrap})

    # Kafka's AdminZkClient.validateTopicCreate: '.' and '_' taken as one
    client.create_topics([NewTopic("cl.a", 2, 2)])["cl.a"].result(timeout=60)
    cluster.wait_topic("cl.a", 2)
    err = _error(client.create_topics([NewTopic("cl_a", 1, 2)])["cl_a"])
    assert err.code() == kerr.InvalidTopicError.errno
    assert "collides with existing topics: cl.a" in err.str()
    # one request: the first is being written to ZooKeeper when the second is checked
    pair = client.create_topics([NewTopic("pr_b", 1, 2), NewTopic("pr.b", 1, 2)])
    pair["pr_b"].result(timeout=60)
    assert _error(pair["pr.b"]).code() == kerr.InvalidTopicError.errno
    with RawClient(cluster.nodes[via].port) as raw:  # Metadata's auto-create
        response = raw.call(METADATA, 12, {
            "topics": [{"topic_id": None, "name": "cl_a"}],
            "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
    [row] = response.topics
    assert row.error_code == kerr.InvalidTopicError.errno

    # an internal topic only with the count its coordinator hashes ids over
    err = _error(client.create_topics(
        [NewTopic("__transaction_state", 2, 2)])["__transaction_state"])
    assert err.code() == kerr.InvalidPartitionsError.errno
    # a user's name colliding with an internal topic's, before that topic exists (the
    # coordinator's own creation would collide with it)
    clash = _error(client.create_topics(
        [NewTopic("__transaction.state", 1, 2)])["__transaction.state"])
    assert clash.code() == kerr.InvalidTopicError.errno
    # with it, a client may make it (the coordinators then find it made)
    client.create_topics([NewTopic("__consumer_offsets", 3, 2)])[
        "__consumer_offsets"].result(timeout=60)
    cluster.wait_topic("__consumer_offsets", 3)
    grow = _error(client.create_partitions(
        [NewPartitions("__consumer_offsets", 6)])["__consumer_offsets"])
    assert grow.code() == kerr.InvalidPartitionsError.errno
    topics = client.list_topics(timeout=30).topics
    assert "cl_a" not in topics and "pr.b" not in topics
    assert "__transaction_state" not in topics and "__transaction.state" not in topics
    assert len(topics["__consumer_offsets"].partitions) == 3


def test_max_timestamp_answers_a_record_below_the_log_start_in_a_cluster(
        cluster_factory: Any) -> None:
    """ListOffsets -3 of a replicated partition whose largest timestamp lies below the log
    start (DeleteRecords, answered once the ISR holds the new start): the leader answers
    that record, as Kafka's UnifiedLog.fetchOffsetByTimestamp."""
    cluster: Cluster = cluster_factory(2)
    via = next(i for i in cluster.nodes if i != cluster.controller())
    client = AdminClient({"bootstrap.servers": cluster.nodes[via].bootstrap})
    client.create_topics([NewTopic("maxts", 1, 2)])["maxts"].result(timeout=60)
    cluster.wait_topic("maxts", 1)
    now = int(time.time() * 1000)
    produce_at(cluster.bootstrap, "maxts", [now + 5_000, now, now + 1_000])
    tp = CTopicPartition("maxts", 0)
    [deleted] = client.delete_records([CTopicPartition("maxts", 0, 1)]).values()
    assert deleted.result(timeout=60).low_watermark == 1
    got = client.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    assert (got.offset, got.timestamp) == (0, now + 5_000)


def _find_coordinator(port: int, key: str, key_type: int) -> int:
    """The node id FindCoordinator names, asked until the coordinator is available."""
    deadline = time.monotonic() + 60
    with RawClient(port) as raw:
        while True:
            reply = raw.call(10, 1, {"key": key, "key_type": key_type})
            if reply.error_code == 0:
                return int(reply.node_id)
            # COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS while the topic is made
            assert reply.error_code in (14, 15) and time.monotonic() < deadline, reply
            time.sleep(0.1)


def test_internal_topics_made_by_a_node_configured_apart_map_ids_alike_on_every_node(
        cluster_factory: Any) -> None:
    """Two nodes with different offsets.topic.num.partitions and
    transaction.state.log.num.partitions. The node a client asks makes each internal
    topic with its own count, which the controller (configured otherwise) takes: the
    coordinators' creation is exempt from the rule a client's meets. Then both nodes map
    a group or transactional id over the partitions the topic has (Kafka's partitionFor),
    so they name the same coordinator, and a group's committed offsets read through
    either node are the ones committed through the other."""
    counts = {1: 3, 2: 5}
    cluster: Cluster = cluster_factory(2, node_config={
        i: {"offsets.topic.num.partitions": n, "transaction.state.log.num.partitions": n,
            "transaction.state.log.replication.factor": 2,
            "transaction.state.log.min.isr": 1} for i, n in counts.items()})
    via = next(i for i in cluster.nodes if i != cluster.controller())
    other = cluster.controller()
    made = counts[via]
    groups = [g for g in (f"g-{i}" for i in range(60))
              if group_partition(g, made) != group_partition(g, counts[other])][:3]
    txn_ids = [t for t in (f"tx-{i}" for i in range(60))
               if txn_partition(t, made) != txn_partition(t, counts[other])][:3]
    # a client's creation with the node's own count is refused by the controller
    client = AdminClient({"bootstrap.servers": cluster.nodes[via].bootstrap})
    err = _error(client.create_topics(
        [NewTopic("__transaction_state", made, 2)])["__transaction_state"])
    assert err.code() == kerr.InvalidPartitionsError.errno
    # the coordinators' (FindCoordinator on `via`) is not
    _find_coordinator(cluster.nodes[via].port, groups[0], 0)
    _find_coordinator(cluster.nodes[via].port, txn_ids[0], 1)
    offsets = cluster.wait_topic("__consumer_offsets", made)
    states = cluster.wait_topic("__transaction_state", made)
    for group in groups:
        leader = offsets.leaders("__consumer_offsets")[group_partition(group, made)]
        assert [_find_coordinator(cluster.nodes[i].port, group, 0) for i in (via, other)] \
            == [leader, leader], group
    for txn_id in txn_ids:
        leader = states.leaders("__transaction_state")[txn_partition(txn_id, made)]
        assert [_find_coordinator(cluster.nodes[i].port, txn_id, 1) for i in (via, other)] \
            == [leader, leader], txn_id
    client.create_topics([NewTopic("t-counts", 1, 2)])["t-counts"].result(timeout=60)
    cluster.wait_topic("t-counts", 1)
    for i, group in enumerate(groups):
        consumer = Consumer({"bootstrap.servers": cluster.nodes[via].bootstrap,
                             "group.id": group, "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[CTopicPartition("t-counts", 0, 10 + i)],
                            asynchronous=False)
        finally:
            consumer.close()
    for i, group in enumerate(groups):
        consumer = Consumer({"bootstrap.servers": cluster.nodes[other].bootstrap,
                             "group.id": group, "enable.auto.commit": False})
        try:
            [got] = consumer.committed([CTopicPartition("t-counts", 0)], timeout=60)
        finally:
            consumer.close()
        assert got.offset == 10 + i, group
    # a transaction through the node configured with the other count: its coordinator
    # (named by that node) keeps the id's state on the partition the id maps to
    producer = Producer({"bootstrap.servers": cluster.nodes[other].bootstrap,
                         "transactional.id": txn_ids[0]})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("t-counts", b"in-txn", partition=0)
    producer.commit_transaction(60)
    deadline = time.monotonic() + 60  # until the commit marker is written
    while (got_values := read_all(cluster.nodes[via].bootstrap, "t-counts",
                                  "read_committed")) != [b"in-txn"]:
        assert not got_values and time.monotonic() < deadline, got_values
        time.sleep(0.2)
