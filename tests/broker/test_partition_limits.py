"""A node refuses partitions its file descriptors cannot hold (issue 17).

The live fuzzer's mutated CreateTopics of 131,073 partitions used to be served until
the node ran out of descriptors, a PartitionShard's thread died and a good client's
produce timed out. Here a real broker runs with ``ulimit -n 1024`` (256 partitions,
50 of them __consumer_offsets): CreateTopics and CreatePartitions past that, or past
Kafka's 10,000 a request, get POLICY_VIOLATION with the numbers, logged once, and the
broker keeps serving; a reasonable create still works, and auto-creation (num.partitions
300 here) is checked the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.broker.rawclient import METADATA, RawClient
from tests.broker.test_clients import PARTITIONS, confluent_consume, confluent_produce
from tests.fixtures.broker import BrokerProcess
from tests.fixtures.waiting import wait_for
from wire.errors import ErrorCode

OPEN_FILES = 1024
FIND_COORDINATOR = 10


@pytest.fixture(scope="module")
def low_limit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("fdlimit")
    b = BrokerProcess(base / "data", open_files=OPEN_FILES,
                      config={"num.partitions": 300}).start()
    # __consumer_offsets' 50 partitions are made on the first group request: made here, so
    # the counts below do not depend on which tests ran before in this process
    with RawClient(b.port) as client:
        assert client.call(FIND_COORDINATOR, 1, {"key": "g", "key_type": 0}).error_code in (
            0, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        wait_for(lambda: [len(t.partitions) for t in client.call(METADATA, 12, {
            "topics": [{"name": "__consumer_offsets", "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}).topics if t.error_code == 0] == [50],
            "__consumer_offsets made")
    yield b
    assert b.stop(timeout=30) == 0, b.log()[-3000:]


def create(admin: AdminClient, topic: NewTopic) -> KafkaException | None:
    try:
        admin.create_topics([topic], operation_timeout=20)[topic.topic].result(timeout=30)
    except KafkaException as exc:
        return exc
    return None


def test_too_many_partitions_are_refused_and_the_broker_keeps_serving(
        low_limit: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": low_limit.bootstrap})
    err = create(admin, NewTopic("huge", 100_000, 1))
    assert err is not None
    kerr = err.args[0]
    assert kerr.code() == ErrorCode.POLICY_VIOLATION == 44
    assert ("Excessively large number of partitions per request: 100000 partitions asked "
            "for in all, at most 10000") in kerr.str()

    err = create(admin, NewTopic("big", 5000, 1))  # within Kafka's maximum, not this node's
    assert err is not None and err.args[0].code() == ErrorCode.POLICY_VIOLATION
    message = err.args[0].str()
    assert "topic 'big': 5000 new partition(s) would make 5050 on this node, over the 256" \
        in message and f"ulimit -n {OPEN_FILES}" in message
    assert low_limit.log().count("5000 new partition(s) would make 5050") == 1  # logged once

    assert create(admin, NewTopic("reasonable", 10, 1)) is None
    fs = admin.create_partitions([NewPartitions("reasonable", 100_000)], operation_timeout=20)
    with pytest.raises(KafkaException) as grow:
        fs["reasonable"].result(timeout=30)
    assert grow.value.args[0].code() == ErrorCode.POLICY_VIOLATION
    fs = admin.create_partitions([NewPartitions("reasonable", 5000)], operation_timeout=20)
    with pytest.raises(KafkaException, match="would make 5050 on this node") as grow:
        fs["reasonable"].result(timeout=30)
    fs = admin.create_partitions([NewPartitions("reasonable", 12)], operation_timeout=20)
    fs["reasonable"].result(timeout=30)

    # Auto-creation asks for num.partitions (300): past the 194 left, refused the same way.
    client = RawClient(low_limit.port)
    meta = client.call(METADATA, 12, {"topics": [{"name": "auto-made", "topic_id": None}],
                                      "allow_auto_topic_creation": True,
                                      "include_topic_authorized_operations": False})
    assert [t.error_code for t in meta.topics] == [ErrorCode.POLICY_VIOLATION]
    client.close()

    # And the broker still serves: a new topic, produced to and consumed.
    assert create(admin, NewTopic("served", PARTITIONS, 1)) is None
    confluent_produce(low_limit, "served", 50)
    got = confluent_consume(low_limit, "served", 50)
    assert sum(len(v) for v in got.values()) == 50
    assert "Traceback" not in low_limit.log()
