"""Leader epochs across a leader kill on three real nodes (KIP-279/320).

After the leader of a partition is killed, the new leader answers
OffsetForLeaderEpoch with where the old epoch ended and the log end for its own;
a client holding the old epoch is fenced (FENCED_LEADER_EPOCH) by OffsetForLeaderEpoch,
Fetch and ListOffsets, one ahead is told UNKNOWN_LEADER_EPOCH, and a follower
answers NOT_LEADER_OR_FOLLOWER at the current epoch. A confluent-kafka consumer
reading across the kill validates its position with OffsetForLeaderEpoch (librdkafka
skips that when the broker does not advertise the API) and reads every acknowledged
record exactly once. Each test runs at num.processes 1 and 2 (the shard that owns the
partition may then be in the node's other process).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.broker.rawclient import FETCH, LIST_OFFSETS, METADATA, build, fetch_values
from tests.cluster.test_replication import FAST, KeyedProducer, create_topic, produce_acks_all
from tests.fixtures.cluster import Cluster, ClusterNode, kafka_call, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients, pytest.mark.num_processes(1, 2)]

TOPIC = "replicated"  # the name create_topic and KeyedProducer use
OFFSET_FOR_LEADER_EPOCH = 23
NONE, NOT_LEADER, FENCED, UNKNOWN_EPOCH = 0, 6, 74, 75


def end_offset(node: ClusterNode, current_epoch: int, epoch: int,
               partition: int = 0) -> tuple[int, int, int]:
    """(error, leader epoch, end offset) of one OffsetForLeaderEpoch v4 to ``node``."""
    request = build(OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": partition,
                                          "current_leader_epoch": current_epoch,
                                          "leader_epoch": epoch}]}]})
    [p] = kafka_call(node.host, node.port, request).topics[0].partitions
    return p.error_code, p.leader_epoch, p.end_offset


def fetch_code(node: ClusterNode, current_epoch: int) -> int:
    values = fetch_values(TOPIC, 0, 0)
    values["topics"][0]["partitions"][0]["current_leader_epoch"] = current_epoch
    response = kafka_call(node.host, node.port, build(FETCH, 11, values))
    return int(response.responses[0].partitions[0].error_code)


def list_offsets_code(node: ClusterNode, current_epoch: int) -> int:
    request = build(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0,
                                        "current_leader_epoch": current_epoch,
                                        "timestamp": -1}]}]})
    return int(kafka_call(node.host, node.port, request).topics[0].partitions[0].error_code)


def metadata_epoch(node: ClusterNode) -> tuple[int, int]:
    """(leader, leader epoch) of partition 0 in a Metadata v7 answer of ``node``."""
    request = build(METADATA, 7, {"topics": [{"name": TOPIC}],
                                  "allow_auto_topic_creation": False})
    [p] = [p for p in kafka_call(node.host, node.port, request).topics[0].partitions
           if p.partition_index == 0]
    return p.leader_id, p.leader_epoch


def kill_leader(cluster: Cluster) -> tuple[ClusterNode, int]:
    """Kill -9 partition 0's leader; the new leader once every live node names it."""
    old = cluster.view().partitions[(TOPIC, 0)].leader
    cluster.nodes[old].kill()
    survivors = cluster.live()

    def moved() -> int | None:
        leaders = {metadata_epoch(n) for n in survivors}
        if len(leaders) == 1:
            leader, epoch = leaders.pop()
            if leader not in (-1, old) and epoch > 0:
                return leader
        return None

    new = wait_for(f"partition 0's leadership to leave broker {old}", moved, timeout_s=60)
    return cluster.nodes[new], old


def test_the_new_leader_answers_epoch_ends_and_fences_old_epochs(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(config=FAST)
    create_topic(cluster)
    acked, errors = produce_acks_all(cluster, [b"a%d" % i for i in range(10)])
    assert errors == [] and len(acked) == 10
    leader = cluster.nodes[cluster.view().partitions[(TOPIC, 0)].leader]
    assert metadata_epoch(leader) == (leader.broker_id, 0)
    assert end_offset(leader, 0, 0) == (NONE, 0, 10)

    new, _old = kill_leader(cluster)
    assert metadata_epoch(new) == (new.broker_id, 1)
    # the new epoch is being written: its end is the log end, which moves
    acked, errors = wait_for("acks=all with the new leader", lambda: (
        lambda r: r if r[1] == [] else None)(produce_acks_all(
            cluster, [b"b%d" % i for i in range(5)], timeout_s=20)), timeout_s=60)
    assert len(acked) == 5
    # a failed try may have appended some of its records too: the end is read back
    _, _, log_end = end_offset(new, -1, 1)
    assert log_end >= 15
    assert end_offset(new, 1, 1) == (NONE, 1, log_end)
    assert end_offset(new, 1, 0) == (NONE, 0, 10)  # epoch 0 ended where epoch 1 began
    assert end_offset(new, 1, 5) == (NONE, -1, -1)  # above any epoch the log knows
    assert end_offset(new, 0, 0) == (FENCED, -1, -1)
    assert end_offset(new, 2, 0) == (UNKNOWN_EPOCH, -1, -1)
    assert (fetch_code(new, 0), fetch_code(new, 1), fetch_code(new, 2)) == \
        (FENCED, NONE, UNKNOWN_EPOCH)
    assert (list_offsets_code(new, 0), list_offsets_code(new, 1),
            list_offsets_code(new, 2)) == (FENCED, NONE, UNKNOWN_EPOCH)

    follower = next(n for n in cluster.live() if n is not new)
    assert end_offset(follower, 1, 0) == (NOT_LEADER, -1, -1)
    assert end_offset(follower, 0, 0) == (FENCED, -1, -1)
    assert end_offset(follower, 2, 0) == (UNKNOWN_EPOCH, -1, -1)
    assert (fetch_code(follower, 0), fetch_code(follower, 1)) == (FENCED, NOT_LEADER)


class Reader:
    """A confluent-kafka consumer of partition 0 in a thread, recording librdkafka's
    offset-validation log lines."""

    def __init__(self, bootstrap: str) -> None:
        self.lines: list[str] = []
        self.values: list[int] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        log = logging.getLogger(f"rdkafka-{id(self)}")
        log.setLevel(logging.DEBUG)
        log.propagate = False
        log.addHandler(_Collect(self.lines))
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"epochs-{time.time()}",
            "enable.auto.commit": False, "auto.offset.reset": "error",
            "topic.metadata.refresh.interval.ms": 1000, "debug": "fetch,topic,consumer",
            "logger": log})
        self.consumer.assign([TopicPartition(TOPIC, 0, 0)])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + 300
        while not self.stop.is_set() and time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                # a killed broker's connection errors come as events too, retriable;
                # a failed offset validation or reset is what this test looks for
                if msg.error().code() not in _PASSING:
                    self.errors.append(str(msg.error()))
                continue
            self.values.append(int(msg.value()))
        self.consumer.close()

    def validations(self) -> list[str]:
        return [line for line in list(self.lines) if "validation" in line]

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


_PASSING = (KafkaError._PARTITION_EOF, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


class _Collect(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_consumer_across_a_leader_kill_validates_and_reads_every_acked_record_once(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(config=FAST)
    create_topic(cluster)
    producer = KeyedProducer(cluster.bootstrap, partitions=1, limit=20_000).start()
    reader = Reader(cluster.bootstrap)
    try:
        wait_for("records read", lambda: len(reader.values) > 200, timeout_s=60)
        kill_leader(cluster)
        before = producer.count()
        wait_for("acknowledgements after the failover",
                 lambda: producer.count() > before + 200, timeout_s=120)
    finally:
        producer.finish()
    try:
        delivered = producer.delivered[0]
        wait_for("every acknowledged record read",
                 lambda: set(delivered) <= set(reader.values), timeout_s=120)
    finally:
        reader.finish()
    assert producer.failed == []
    assert reader.errors == []
    assert len(reader.values) == len(set(reader.values)), "a record was read twice"
    assert reader.values == sorted(reader.values)
    validated = reader.validations()
    assert any("validation succeeded" in line for line in validated), validated
    assert not any("not supported" in line or "truncation" in line for line in validated), \
        validated
