"""DescribeProducers (API 61, KIP-664) on a broker of one and of two processes.

A real idempotent producer and a real transactional producer (confluent-kafka) write;
the answer, asked with the raw client, names both on each partition they wrote with
what the partition's log holds (read back with a Fetch of the raw batches: ids,
epochs, last sequences, last timestamps) and the open transaction's first offset,
gone once it commits, when the producer's coordinator epoch and last timestamp become
its commit marker's; a partition nobody wrote has no producer; an unknown topic or
partition is UNKNOWN_TOPIC_OR_PARTITION, an illegal name INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.broker.rawclient import RawClient, read_batches
from tests.fixtures.broker import BrokerProcess
from tests.fixtures.waiting import wait_for
from wire.errors import ErrorCode

pytestmark = [pytest.mark.num_processes(1, 2), pytest.mark.clients]

DESCRIBE_PRODUCERS = 61
PARTITIONS = 4
IDEMPOTENT_PARTITIONS = (0, 1, 2)
TXN_PARTITIONS = (0, 2)  # partition 3: nobody writes


def _describe(raw: RawClient, topics: dict[str, list[int]]) -> dict[tuple[str, int], Any]:
    reply = raw.call(DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": name, "partition_indexes": indexes} for name, indexes in topics.items()]})
    assert reply.throttle_time_ms == 0
    return {(t.name, p.partition_index): p for t in reply.topics for p in t.partitions}


def _producers(part: Any) -> dict[int, tuple[int, int, int, int, int]]:
    assert part.error_code == 0, part
    return {p.producer_id: (p.producer_epoch, p.last_sequence, p.last_timestamp,
                            p.coordinator_epoch, p.current_txn_start_offset)
            for p in part.active_producers}


def _last_batches(raw: RawClient, topic: str, partition: int) -> dict[int, Any]:
    """Each producer's last data batch in the partition's log, by producer id."""
    part = raw.fetch(topic, partition, 0)
    assert part.error_code == 0
    return {b.producer_id: b for b in read_batches(part.records) if not b.is_control_batch}


def test_describe_producers_names_idempotent_and_transactional_producers(
        broker: BrokerProcess) -> None:
    topic = f"dp-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as raw:
        assert raw.create_topic(topic, PARTITIONS) == 0
    idempotent = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                           "linger.ms": 0})
    for partition in IDEMPOTENT_PARTITIONS:
        for i in range(3):  # three batches: sequences 0, 1, 2
            idempotent.produce(topic, f"i{i}".encode(), partition=partition)
            assert idempotent.flush(30) == 0
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-txn",
                    "linger.ms": 0})
    txn.init_transactions(30)
    txn.begin_transaction()
    offsets: dict[int, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.setdefault(msg.partition(), msg.offset())

    for partition in TXN_PARTITIONS:
        for i in range(2):
            txn.produce(topic, f"t{i}".encode(), partition=partition, on_delivery=delivered)
        assert txn.flush(30) == 0
    assert offsets == {p: 3 for p in TXN_PARTITIONS}  # after the idempotent three

    with RawClient(broker.port) as raw:
        logged = {p: _last_batches(raw, topic, p) for p in range(PARTITIONS)}
        [idempotent_id] = logged[1]  # only the idempotent producer wrote partition 1
        [txn_id] = set(logged[0]) - {idempotent_id}
        assert logged[0][txn_id].is_transactional
        assert logged[3] == {}

        def expected(partition: int, open_txn: bool) -> dict[int, tuple[int, ...]]:
            want: dict[int, tuple[int, ...]] = {}
            for pid, batch in logged[partition].items():
                start = offsets[partition] if open_txn and pid == txn_id else -1
                want[pid] = (batch.producer_epoch, batch.base_sequence
                             + batch.last_offset_delta, batch.max_timestamp, -1, start)
            return want

        answer = _describe(raw, {topic: [0, 1, 2, 3, PARTITIONS], "no-such-topic": [0],
                                 "bad name!": [0]})
        for partition in range(PARTITIONS):
            assert _producers(answer[(topic, partition)]) == expected(partition, True)
        got = _producers(answer[(topic, 0)])
        assert got[idempotent_id][1] == 2 and got[txn_id][1] == 1  # last sequences
        assert got[txn_id][4] == 3 and got[idempotent_id][4] == -1  # the open transaction
        assert _producers(answer[(topic, 3)]) == {}
        for key in ((topic, PARTITIONS), ("no-such-topic", 0)):
            assert answer[key].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert list(answer[key].active_producers) == []
        assert answer[("bad name!", 0)].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        # as Kafka: a topic's error carries its text (ApiError), a partition's none
        assert answer[("no-such-topic", 0)].error_message == (
            "This server does not host this topic-partition.")
        assert answer[(topic, PARTITIONS)].error_message is None

        txn.commit_transaction(30)
        # EndTxn answers once the commit is decided; the coordinator writes the markers
        # after that (Kafka's too), so wait for them to close the open transactions
        after = wait_for(lambda: _closed(_describe(raw, {topic: [0, 2]}), topic, txn_id),
                         "the commit markers on partitions 0 and 2", timeout=30)
        for partition in TXN_PARTITIONS:
            producers = _producers(after[(topic, partition)])
            marker = _commit_marker(raw, topic, partition)
            # committed: no open transaction; the coordinator epoch and the last timestamp
            # are the marker's
            assert producers[txn_id] == (marker.producer_epoch,
                                         expected(partition, True)[txn_id][1],
                                         marker.max_timestamp, _coordinator_epoch(marker), -1)
            assert producers[idempotent_id] == expected(partition, False)[idempotent_id]


def _closed(answer: dict[tuple[str, int], Any], topic: str,
            txn_id: int) -> dict[tuple[str, int], Any] | None:
    """``answer`` if the transactional producer has no open transaction on any of
    TXN_PARTITIONS (its commit marker written there), else None."""
    return answer if all(_producers(answer[(topic, p)])[txn_id][4] == -1
                         for p in TXN_PARTITIONS) else None


def _commit_marker(raw: RawClient, topic: str, partition: int) -> Any:
    part = raw.fetch(topic, partition, 0)
    [marker] = [b for b in read_batches(part.records) if b.is_control_batch]
    return marker


def _coordinator_epoch(marker: Any) -> int:
    """The coordinator epoch the marker's control record carries (version, epoch)."""
    [record] = list(marker)
    version, epoch = struct.unpack(">hi", bytes(record.value)[:6])
    assert version == 0
    return int(epoch)


def test_kafka_python_admin_describe_producers(broker: BrokerProcess) -> None:
    """kafka-python's KafkaAdminClient.describe_producers (KIP-664's admin call, sent to
    the partition's leader): the idempotent producer that wrote the partition."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    topic = f"dp-admin-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as raw:
        assert raw.create_topic(topic, 2) == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), partition=1)
        assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        found = admin.describe_producers([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    finally:
        admin.close()
    assert found[TopicPartition(topic, 0)].active_producers == []
    [state] = found[TopicPartition(topic, 1)].active_producers
    assert (state.last_sequence, state.coordinator_epoch,
            state.current_transaction_start_offset) == (4, -1, -1)
    assert state.producer_id >= 0 and state.producer_epoch >= 0 and state.last_timestamp > 0
