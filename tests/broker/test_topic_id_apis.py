"""Topic ids on the wire (KIP-516), against a real broker.

CreateTopics v7 answers each created topic's id; Metadata v12 may ask for topics by id;
DeleteTopics v6 deletes by name or by id. Driven by kafka-python's KafkaAdminClient,
which sends all three (``create_topics``; ``describe_topics`` and ``delete_topics``
with ``uuid.UUID`` items), and by raw kafka.protocol requests for what no client sends
(the refusals). confluent-kafka's AdminClient names topics only (its TopicCollection
holds names), so it checks the id Metadata answers by name.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as CNewTopic
from kafka.admin import KafkaAdminClient, NewTopic

from tests.broker.rawclient import CREATE_TOPICS, DELETE_TOPICS, METADATA, RawClient
from tests.fixtures.broker import BrokerProcess
from wire.errors import ErrorCode

pytestmark = [pytest.mark.num_processes(1, 2), pytest.mark.clients]

UNKNOWN_TOPIC_ID = int(ErrorCode.UNKNOWN_TOPIC_ID)
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
TOPIC_ALREADY_EXISTS = int(ErrorCode.TOPIC_ALREADY_EXISTS)
UNKNOWN_TOPIC = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
DELETION_DISABLED = int(ErrorCode.TOPIC_DELETION_DISABLED)


def name(prefix: str = "tid") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kadmin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    yield client
    client.close()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.port) as c:
        yield c


def create_v7(client: RawClient, topics: list[str], validate_only: bool = False) -> list:
    response = client.call(CREATE_TOPICS, 7, {
        "topics": [{"name": t, "num_partitions": 2, "replication_factor": 1,
                    "assignments": [], "configs": []} for t in topics],
        "timeout_ms": 10_000, "validate_only": validate_only})
    return list(response.topics)


def metadata_v12(client: RawClient, topics: list[tuple[str | None, uuid.UUID | None]],
                 version: int = 12, auto_create: bool = False) -> list:
    response = client.call(METADATA, version, {
        "topics": [{"name": n, "topic_id": i} for n, i in topics],
        "allow_auto_topic_creation": auto_create,
        "include_topic_authorized_operations": False})
    return list(response.topics)


def delete_v6(client: RawClient, topics: list[tuple[str | None, uuid.UUID | None]]) -> list:
    response = client.call(DELETE_TOPICS, 6, {
        "topics": [{"name": n, "topic_id": i} for n, i in topics], "timeout_ms": 10_000})
    return list(response.responses)


def all_topics(client: RawClient) -> set[str]:
    response = client.call(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    return {t.name for t in response.topics}


def id_by_name(client: RawClient, topic: str) -> uuid.UUID:
    [found] = metadata_v12(client, [(topic, None)])
    assert found.error_code == 0, found
    assert found.topic_id is not None
    topic_id: uuid.UUID = found.topic_id
    return topic_id


# ------------------------------------------------------------------ CreateTopics v7
def test_create_topics_v7_answers_the_id_metadata_then_answers(client: RawClient) -> None:
    a, b = name(), name()
    created = create_v7(client, [a, b])
    assert [(t.name, t.error_code) for t in created] == [(a, 0), (b, 0)]
    ids = {t.name: t.topic_id for t in created}
    assert all(isinstance(i, uuid.UUID) for i in ids.values()), created
    assert ids[a] != ids[b]
    assert id_by_name(client, a) == ids[a] and id_by_name(client, b) == ids[b]
    # Kafka answers the zero id with an error (kafka.protocol reads it as None)
    [again] = create_v7(client, [a])
    assert (again.error_code, again.topic_id) == (TOPIC_ALREADY_EXISTS, None)
    # validate_only makes nothing, so there is no id to answer
    [checked] = create_v7(client, [name()], validate_only=True)
    assert (checked.error_code, checked.topic_id) == (0, None)


def test_kafka_python_create_topics_returns_the_id_confluent_describes(
        broker: BrokerProcess, kadmin: KafkaAdminClient) -> None:
    topic = name("kp")
    result = kadmin.create_topics([NewTopic(topic, 1, 1)])
    [row] = result["topics"]
    assert row["error_code"] == 0, row
    topic_id = uuid.UUID(row["topic_id"])  # kafka-python's to_dict gives a Uuid as text
    with RawClient(broker.port) as raw:
        assert id_by_name(raw, topic) == topic_id
    cadmin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = cadmin.describe_topics(TopicCollection([topic])).values()
    description = future.result(timeout=30)
    assert _as_uuid(description.topic_id) == topic_id


def test_kafka_python_describe_topic_partitions_answers_each_topic_id(
        broker: BrokerProcess, kadmin: KafkaAdminClient) -> None:
    """DescribeTopicPartitions (v0, KIP-966) answers the topic's id, as Kafka's handler
    sets it from the metadata (it was the zero id)."""
    topic = name("dtp")
    [row] = kadmin.create_topics([NewTopic(topic, 2, 1)])["topics"]
    assert row["error_code"] == 0, row
    [described] = kadmin.describe_topic_partitions([topic])["topics"]
    assert described["name"] == topic and described["error_code"] == 0
    assert described["topic_id"] is not None
    assert uuid.UUID(str(described["topic_id"])) == uuid.UUID(row["topic_id"])


def _as_uuid(value: object) -> uuid.UUID:
    """confluent-kafka's Uuid (two signed 64-bit halves) as a uuid.UUID."""
    mask = (1 << 64) - 1
    high = value.get_most_significant_bits() & mask  # type: ignore[attr-defined]
    low = value.get_least_significant_bits() & mask  # type: ignore[attr-defined]
    return uuid.UUID(int=high << 64 | low)


def test_confluent_create_topics_then_kafka_python_describes_by_its_id(
        broker: BrokerProcess, kadmin: KafkaAdminClient) -> None:
    """librdkafka sends CreateTopics v4 (no id in its answer): the id comes from
    Metadata by name, and then describes the same topic by id."""
    topic = name("ck")
    cadmin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in cadmin.create_topics([CNewTopic(topic, 3, 1)]).values():
        future.result(timeout=30)
    with RawClient(broker.port) as raw:
        topic_id = id_by_name(raw, topic)
    [found] = kadmin.describe_topics([topic_id])
    assert (found["error_code"], found["name"], uuid.UUID(found["topic_id"])) == (
        0, topic, topic_id)
    assert sorted(p["partition_index"] for p in found["partitions"]) == [0, 1, 2]


# ------------------------------------------------------------------ Metadata by id
def test_metadata_v12_by_id_answers_the_topic_and_unknown_ids_without_a_name(
        client: RawClient, kadmin: KafkaAdminClient) -> None:
    topic = name()
    [made] = create_v7(client, [topic])
    unknown = uuid.uuid4()
    answered = metadata_v12(client, [(None, made.topic_id), (None, unknown)])
    assert [(t.error_code, t.name, t.topic_id) for t in answered] == [
        (0, topic, made.topic_id), (UNKNOWN_TOPIC_ID, None, unknown)]
    assert [p.partition_index for p in answered[0].partitions] == [0, 1]
    assert answered[1].partitions == []
    # kafka-python mixes names and ids in one request: each is answered its own way
    other = name()
    create_v7(client, [other])
    described = kadmin.describe_topics([other, made.topic_id, unknown])
    assert [(t["error_code"], t["name"]) for t in described] == [
        (0, other), (0, topic), (UNKNOWN_TOPIC_ID, None)]
    assert uuid.UUID(described[2]["topic_id"]) == unknown


def test_metadata_by_id_never_creates_and_an_id_before_v12_is_refused(
        client: RawClient) -> None:
    """Kafka: before v12 a topic needs its name and may not carry an id; such a request
    is answered INVALID_REQUEST for every topic (name "" when null), with no brokers."""
    topic = name()
    [made] = create_v7(client, [topic])
    # an unknown id asked with auto-creation on: answered, nothing made
    unknown = uuid.uuid4()
    before = all_topics(client)
    [asked] = metadata_v12(client, [(None, unknown)], auto_create=True)
    assert (asked.error_code, asked.name, asked.topic_id) == (UNKNOWN_TOPIC_ID, None, unknown)
    assert all_topics(client) == before and topic in before
    for version in (10, 11):
        other = name()
        answered = metadata_v12(client, [(topic, made.topic_id), (other, None)], version)
        assert [(t.error_code, t.name, t.topic_id) for t in answered] == [
            (INVALID_REQUEST, topic, made.topic_id), (INVALID_REQUEST, other, None)]
        [nameless] = metadata_v12(client, [(None, made.topic_id)], version)
        assert (nameless.error_code, nameless.name) == (INVALID_REQUEST, "")
    # v12: a topic with neither a name nor an id
    [neither] = metadata_v12(client, [(None, None)])
    assert neither.error_code == INVALID_REQUEST
    # by name (v11) still works on the same connection
    [ok] = metadata_v12(client, [(topic, None)], 11)
    assert (ok.error_code, ok.topic_id) == (0, made.topic_id)


# ------------------------------------------------------------------ DeleteTopics v6
def test_delete_topics_v6_by_id_and_by_name_answers_both(client: RawClient) -> None:
    by_id, by_name = name(), name()
    made = {t.name: t.topic_id for t in create_v7(client, [by_id, by_name])}
    unknown = uuid.uuid4()
    answered = delete_v6(client, [(None, made[by_id]), (by_name, None), (None, unknown)])
    assert [(r.error_code, r.name, r.topic_id) for r in answered] == [
        (0, by_id, made[by_id]), (0, by_name, made[by_name]),
        (UNKNOWN_TOPIC_ID, None, unknown)]
    assert [t.error_code for t in metadata_v12(client, [(by_id, None), (by_name, None)])] == [
        UNKNOWN_TOPIC, UNKNOWN_TOPIC]
    # the deleted id is unknown from now on, also to a namesake made next
    [again] = create_v7(client, [by_id])
    assert again.error_code == 0 and again.topic_id != made[by_id]
    [gone] = delete_v6(client, [(None, made[by_id])])
    assert (gone.error_code, gone.name) == (UNKNOWN_TOPIC_ID, None)
    assert id_by_name(client, by_id) == again.topic_id, "the namesake was deleted"


def test_delete_topics_v6_refuses_a_name_with_an_id_and_deletes_a_topic_asked_twice(
        client: RawClient) -> None:
    """Kafka: a topic given by both name and id refuses the whole request
    (INVALID_REQUEST for each, nothing deleted); a topic asked twice, by name and by id,
    is deleted once and both entries are answered (Kafka in ZooKeeper mode)."""
    a, b = name(), name()
    made = {t.name: t.topic_id for t in create_v7(client, [a, b])}
    answered = delete_v6(client, [(a, made[a]), (b, None)])
    assert [(r.error_code, r.name) for r in answered] == [
        (INVALID_REQUEST, a), (INVALID_REQUEST, b)]
    assert "both" in answered[0].error_message
    assert id_by_name(client, a) == made[a] and id_by_name(client, b) == made[b]
    twice = delete_v6(client, [(a, None), (None, made[a]), (b, None)])
    assert [(r.error_code, r.name, r.topic_id) for r in twice] == [
        (0, a, made[a]), (0, a, made[a]), (0, b, made[b])]
    assert [t.error_code for t in metadata_v12(client, [(a, None), (b, None)])] == [
        UNKNOWN_TOPIC, UNKNOWN_TOPIC]
    # a name asked twice at v5 too: deleted once, both answered
    c = name()
    create_v7(client, [c])
    again = client.call(DELETE_TOPICS, 5, {"topic_names": [c, c], "timeout_ms": 10_000})
    assert [(r.name, r.error_code) for r in again.responses] == [(c, 0), (c, 0)]


def test_kafka_python_delete_topics_by_id(client: RawClient, kadmin: KafkaAdminClient) -> None:
    topic = name("kp")
    [made] = create_v7(client, [topic])
    result = kadmin.delete_topics([made.topic_id])
    assert [(r["error_code"], r["name"], uuid.UUID(r["topic_id"])) for r in result["topics"]] == [
        (0, topic, made.topic_id)]
    [after] = metadata_v12(client, [(None, made.topic_id)])
    assert after.error_code == UNKNOWN_TOPIC_ID
    result = kadmin.delete_topics([made.topic_id], raise_errors=False)
    assert [r["error_code"] for r in result["topics"]] == [UNKNOWN_TOPIC_ID]


def test_delete_topics_v5_by_name_is_as_before(client: RawClient) -> None:
    topic = name()
    create_v7(client, [topic])
    response = client.call(DELETE_TOPICS, 5, {"topic_names": [topic, "no-such-topic"],
                                              "timeout_ms": 10_000})
    assert [(r.name, r.error_code) for r in response.responses] == [
        (topic, 0), ("no-such-topic", UNKNOWN_TOPIC)]


def test_delete_topics_with_deletion_disabled_is_refused_before_any_topic_is_looked_at(
        tmp_path: Path) -> None:
    """delete.topic.enable=false: Kafka answers every topic TOPIC_DELETION_DISABLED before
    it looks at any of them (KafkaApis.handleDeleteTopicsRequest), so an unknown id, an
    unknown name or a name given with an id is refused for that too (an unknown id was
    UNKNOWN_TOPIC_ID); v0-2 have no such code: INVALID_REQUEST. The single node deleted
    regardless of the setting."""
    broker = BrokerProcess(tmp_path / "data", config={"delete.topic.enable": False}).start()
    try:
        with RawClient(broker.port) as raw:
            topic = name("kept")
            [made] = create_v7(raw, [topic])
            unknown = uuid.uuid4()
            answered = delete_v6(raw, [(None, unknown), (topic, None), ("absent", None),
                                       (topic, made.topic_id)])
            assert [(r.name, r.topic_id, r.error_code) for r in answered] == [
                (None, unknown, DELETION_DISABLED), (topic, None, DELETION_DISABLED),
                ("absent", None, DELETION_DISABLED),
                (topic, made.topic_id, DELETION_DISABLED)]
            old = raw.call(DELETE_TOPICS, 2, {"topic_names": [topic], "timeout_ms": 10_000})
            assert [(r.name, r.error_code) for r in old.responses] == [(topic, INVALID_REQUEST)]
            assert topic in all_topics(raw)
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]
