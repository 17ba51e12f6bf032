"""A changed ``offsets.topic.num.partitions`` / ``transaction.state.log.num.partitions``
moves no group and no transactional id.

As Kafka's partitionFor, ids are mapped over the partitions ``__consumer_offsets`` and
``__transaction_state`` have once they exist; the config only sizes them when they are
made. A broker restarted with other counts still reads back a group's committed offsets
(a real consumer) and keeps a transactional id's producer id (InitProducerId bumps its
epoch), and says once in its log that the counts differ.

The coordinators' own creation of these topics is exempt from the rules a client's
creation meets (a ``.``/``_`` collision, the configured partition count): through a real
broker, the coordinators make them while a client's creation of the same names with
another count, or of a colliding name, is refused with Kafka's codes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from actors.core.offsets_codec import partition_for as group_partition
from actors.core.transaction_log import partition_for as txn_partition
from tests.broker.rawclient import RawClient, wait_for_log
from tests.fixtures.broker import BrokerProcess

pytestmark = [pytest.mark.clients]

INIT_PRODUCER_ID = 22
BEFORE, AFTER = 3, 5
# groups and a transactional id whose partition of BEFORE differs from that of AFTER
GROUPS = [g for g in (f"group-{i}" for i in range(40))
          if group_partition(g, BEFORE) != group_partition(g, AFTER)][:4]
TXN_ID = next(t for t in (f"txn-{i}" for i in range(40))
              if txn_partition(t, BEFORE) != txn_partition(t, AFTER))


def counts(n: int) -> dict[str, int]:
    return {"offsets.topic.num.partitions": n, "transaction.state.log.num.partitions": n,
            "group.initial.rebalance.delay.ms": 0}


def init_producer_id(port: int, txn_id: str) -> tuple[int, int]:
    """(producer id, epoch) of a raw InitProducerId, retried while the coordinator loads."""
    raw = RawClient(port)
    try:
        deadline = time.monotonic() + 60
        while True:
            reply = raw.call(INIT_PRODUCER_ID, 1, {"transactional_id": txn_id,
                                                   "transaction_timeout_ms": 60_000})
            # COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS: asked again
            if reply.error_code not in (14, 51) or time.monotonic() > deadline:
                assert reply.error_code == 0, reply
                return reply.producer_id, reply.producer_epoch
            time.sleep(0.1)
    finally:
        raw.close()


def test_offsets_and_transactional_ids_survive_a_changed_partition_count(
        tmp_path: Path) -> None:
    assert len(GROUPS) == 4
    data = tmp_path / "data"
    first = BrokerProcess(data, config=counts(BEFORE), log_name="broker-1.log").start()
    try:
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        for future in admin.create_topics([NewTopic("t", 1, 1)]).values():
            future.result(30)
        for i, group in enumerate(GROUPS):
            consumer = Consumer({"bootstrap.servers": first.bootstrap, "group.id": group,
                                 "enable.auto.commit": False})
            try:
                consumer.commit(offsets=[TopicPartition("t", 0, 100 + i)], asynchronous=False)
            finally:
                consumer.close()
        pid, epoch = init_producer_id(first.port, TXN_ID)
    finally:
        assert first.stop() == 0, first.log()[-3000:]

    second = BrokerProcess(data, config=counts(AFTER), log_name="broker-2.log").start()
    try:
        for i, group in enumerate(GROUPS):
            consumer = Consumer({"bootstrap.servers": second.bootstrap, "group.id": group,
                                 "enable.auto.commit": False})
            try:
                [committed] = consumer.committed([TopicPartition("t", 0)], timeout=60)
            finally:
                consumer.close()
            assert committed.offset == 100 + i, (group, committed, second.log()[-3000:])
        # the same producer id, its epoch bumped: its state was found, not started afresh
        assert init_producer_id(second.port, TXN_ID) == (pid, epoch + 1)
        # and a real transactional producer of that id works on
        producer = Producer({"bootstrap.servers": second.bootstrap,
                             "transactional.id": TXN_ID})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce("t", b"after the restart")
        producer.commit_transaction(60)
        log = wait_for_log(second, "transactional ids are mapped over the 3 it has")
        assert (f"__consumer_offsets has {BEFORE} partitions, offsets.topic.num.partitions "
                f"is {AFTER}: groups are mapped over the {BEFORE} it has") in log
        assert (f"__transaction_state has {BEFORE} partitions, "
                f"transaction.state.log.num.partitions is {AFTER}") in log
    finally:
        assert second.stop() == 0, second.log()[-3000:]


def test_coordinators_make_their_topics_a_clients_colliding_or_miscounted_one_is_refused(
        tmp_path: Path) -> None:
    """Kafka's codes for a client: a name colliding with an internal topic's ('.' as '_')
    INVALID_TOPIC_EXCEPTION, an internal topic with another partition count than its
    coordinator maps ids over INVALID_PARTITIONS; the coordinators' own creations (flagged
    internal) are not held to these rules and make both topics, flagged internal."""
    broker = BrokerProcess(tmp_path / "data", config=counts(BEFORE)).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        def create(name: str, partitions: int) -> int:
            future = admin.create_topics([NewTopic(name, partitions, 1)])[name]
            try:
                future.result(30)
            except Exception as exc:  # KafkaException: its KafkaError's code
                return int(exc.args[0].code())
            return 0

        assert create("__consumer.offsets", 1) == 17      # INVALID_TOPIC_EXCEPTION
        assert create("__transaction.state", 1) == 17
        # a single node's group coordinator made __consumer_offsets at its start
        assert create("__consumer_offsets", BEFORE + 1) == 36  # TOPIC_ALREADY_EXISTS
        assert create("__transaction_state", 1) == 37  # INVALID_PARTITIONS (not made yet)
        for future in admin.create_topics([NewTopic("t", 1, 1)]).values():
            future.result(30)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUPS[0],
                             "enable.auto.commit": False})
        try:  # the group coordinator makes __consumer_offsets
            consumer.commit(offsets=[TopicPartition("t", 0, 7)], asynchronous=False)
            assert consumer.committed([TopicPartition("t", 0)], timeout=60)[0].offset == 7
        finally:
            consumer.close()
        producer = Producer({"bootstrap.servers": broker.bootstrap,
                             "transactional.id": TXN_ID})
        producer.init_transactions(60)  # the transaction coordinator makes its topic
        producer.begin_transaction()
        producer.produce("t", b"v")
        producer.commit_transaction(60)
        metadata = admin.list_topics(timeout=30).topics
        assert len(metadata["__consumer_offsets"].partitions) == BEFORE
        assert len(metadata["__transaction_state"].partitions) == BEFORE
        assert "__consumer.offsets" not in metadata and "__transaction.state" not in metadata
        assert create("__transaction_state", BEFORE) == 36
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]
