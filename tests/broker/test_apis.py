"""API semantics a client relies on, over a raw kafka.protocol connection.

Metadata auto-creation, CreateTopics and DeleteTopics errors, ListOffsets
(earliest, latest, by timestamp, max timestamp), DescribeConfigs of a topic,
acks=0 produce (no response, records stored) and the idempotent producer
rules (a retried batch answered with its original offsets, sequence gaps and
stale epochs refused).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.rawclient import (
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    RawClient,
    produce_values,
    read_batches,
    read_records,
    record_batch,
)
from tests.broker.test_metrics import scrape
from tests.fixtures.broker import BrokerProcess, free_port
from tests.fixtures.waiting import wait_for
from wire.errors import ErrorCode

pytestmark = pytest.mark.num_processes(1, 2)

TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # DescribeConfigs config_source
ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 33, 44


def name(prefix: str = "api") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.port) as c:
        yield c


def metadata(client: RawClient, topics: list[str] | None, auto: bool) -> dict[str, object]:
    response = client.call(METADATA, 12, {
        "topics": None if topics is None else [{"topic_id": None, "name": t} for t in topics],
        "allow_auto_topic_creation": auto, "include_topic_authorized_operations": False,
    })
    return {t.name: t for t in response.topics}


def settled(client: RawClient, topic: str) -> object:
    """The topic's Metadata (without auto-creation) once it answers without error: right
    after an auto-create it may still be LEADER_NOT_AVAILABLE on a loaded machine."""
    def answered() -> object:
        got = metadata(client, [topic], auto=False)[topic]
        return got if got.error_code == 0 else None  # type: ignore[attr-defined]
    return wait_for(answered, f"Metadata of {topic} without error")


# ---------------------------------------------------------------- Metadata


def test_metadata_auto_creates_a_topic(client: RawClient) -> None:
    topic = name("auto")
    first = metadata(client, [topic], auto=True)[topic]
    # Kafka answers LEADER_NOT_AVAILABLE while the new topic settles; actorlog
    # answers once it is created. Either way it exists right after.
    assert first.error_code in (0, ErrorCode.LEADER_NOT_AVAILABLE)  # type: ignore[attr-defined]
    again = settled(client, topic)
    assert [p.partition_index for p in again.partitions] == [0]  # type: ignore[attr-defined]
    assert client.produce(topic, 0, record_batch([(None, b"v")])).error_code == 0


def test_metadata_without_auto_creation_leaves_unknown_topics_alone(client: RawClient) -> None:
    topic = name("noauto")
    got = metadata(client, [topic], auto=False)[topic]
    assert got.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
    assert topic not in metadata(client, None, auto=False)


def test_metadata_answers_the_operations_of_an_unknown_topic_too(client: RawClient) -> None:
    """include_topic_authorized_operations: Kafka sets them on every row of a topic the
    principal may describe, an UNKNOWN_TOPIC_OR_PARTITION one too (no authorizer: every
    supported operation), not only on the rows without an error."""
    known, unknown = name("ops"), name("ops-unknown")
    assert metadata(client, [known], auto=True)[known].error_code in (  # type: ignore[attr-defined]
        0, ErrorCode.LEADER_NOT_AVAILABLE)
    response = client.call(METADATA, 8, {
        "topics": [{"name": known}, {"name": unknown}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": True,
        "include_cluster_authorized_operations": False})
    rows = {t.name: t for t in response.topics}
    # READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS (the
    # client decodes the bit field into the set of operation codes)
    topic_ops = {3, 4, 5, 6, 7, 8, 10, 11}
    assert rows[unknown].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert rows[unknown].authorized_operations == topic_ops
    assert rows[known].authorized_operations == topic_ops


def test_metadata_refuses_invalid_names_and_auto_creates_a_users_double_underscore(
        client: RawClient) -> None:
    """Kafka's Topic.isInternal is the coordinators' topics alone: a user's "__x" is an
    ordinary name, auto-created and not internal."""
    mine = name("__mine")
    got = metadata(client, ["bad/name", mine], auto=True)
    assert got["bad/name"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION  # type: ignore[attr-defined]
    assert got[mine].error_code in (0, ErrorCode.LEADER_NOT_AVAILABLE)  # type: ignore[attr-defined]
    again = settled(client, mine)
    assert again.is_internal is False  # type: ignore[attr-defined]


def test_metadata_lists_brokers_and_partitions(broker: BrokerProcess, client: RawClient) -> None:
    topic = name()
    assert client.create_topic(topic, 3) == 0
    response = client.call(METADATA, 12, {
        "topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    [b] = response.brokers
    assert (b.host, b.port) == ("127.0.0.1", broker.port)
    [t] = response.topics
    assert sorted(p.partition_index for p in t.partitions) == [0, 1, 2]
    assert all(p.leader_id == b.node_id for p in t.partitions)
    assert response.controller_id == b.node_id


# ------------------------------------------------------------ CreateTopics


def create(client: RawClient, topics: list[tuple[str, int, int]],
           validate_only: bool = False) -> dict[str, object]:
    response = client.call(CREATE_TOPICS, 7, {
        "topics": [{"name": n, "num_partitions": p, "replication_factor": rf,
                    "assignments": [], "configs": []} for n, p, rf in topics],
        "timeout_ms": 10_000, "validate_only": validate_only})
    return {t.name: t for t in response.topics}


def test_create_topics_errors(client: RawClient) -> None:
    exists, ok = name(), name()
    assert client.create_topic(exists, 1) == 0
    got = create(client, [
        (exists, 1, 1),
        (name(), 0, 1),
        (name("neg"), -5, 1),
        (name("rf"), 1, 3),
        ("bad name!", 1, 1),
        ("..", 1, 1),
        ("x" * 250, 1, 1),
        (ok, 2, 1),
    ])
    codes = {n: t.error_code for n, t in got.items()}  # type: ignore[attr-defined]
    assert codes[exists] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert sorted(c for n, c in codes.items() if n.startswith("api-") and n not in (exists, ok)) \
        == [ErrorCode.INVALID_PARTITIONS]
    assert [c for n, c in codes.items() if n.startswith("neg-")] == [ErrorCode.INVALID_PARTITIONS]
    assert [c for n, c in codes.items() if n.startswith("rf-")] == \
        [ErrorCode.INVALID_REPLICATION_FACTOR]
    for bad in ("bad name!", "..", "x" * 250):
        assert codes[bad] == ErrorCode.INVALID_TOPIC_EXCEPTION, bad
    assert codes[ok] == 0
    assert got[ok].num_partitions == 2  # type: ignore[attr-defined]
    assert all(got[n].error_message for n in codes if codes[n])  # type: ignore[attr-defined]
    # Only the valid one exists.
    listed = metadata(client, None, auto=False)
    assert ok in listed and not any(n.startswith(("neg-", "rf-")) for n in listed)


def test_create_topics_validate_only_creates_nothing(client: RawClient) -> None:
    topic = name()
    got = create(client, [(topic, 4, 1)], validate_only=True)[topic]
    assert (got.error_code, got.num_partitions) == (0, 4)  # type: ignore[attr-defined]
    assert topic not in metadata(client, None, auto=False)


def test_create_topics_defaults_minus_one(client: RawClient) -> None:
    topic = name()
    got = create(client, [(topic, -1, -1)])[topic]
    assert (got.error_code, got.num_partitions, got.replication_factor) == (0, 1, 1)  # type: ignore[attr-defined]


# ------------------------------------------------------------ DeleteTopics


def test_delete_topics_removes_topic_and_data(broker: BrokerProcess, client: RawClient) -> None:
    topic = name("del")
    assert client.create_topic(topic, 2) == 0
    for p in range(2):
        assert client.produce(topic, p, record_batch([(None, b"old")] * 5)).error_code == 0
    response = client.call(DELETE_TOPICS, 5, {"topic_names": [topic], "timeout_ms": 10_000})
    assert [(r.name, r.error_code) for r in response.responses] == [(topic, 0)]
    assert metadata(client, [topic], auto=False)[topic].error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
    assert client.produce(topic, 0, record_batch([(None, b"x")])).error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert client.fetch(topic, 0, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    left = [p.name for p in broker.data_dir.iterdir() if p.name.startswith(f"{topic}-")]
    assert left == [], left  # no log left behind, renamed for deletion or not
    # The name is free again and starts empty.
    assert client.create_topic(topic, 1) == 0
    assert client.list_offset(topic, 0, -1).offset == 0
    assert client.fetch(topic, 0, 0).records in (b"", None)


def test_delete_unknown_topic(client: RawClient) -> None:
    topic = name("ghost")
    response = client.call(DELETE_TOPICS, 5, {"topic_names": [topic], "timeout_ms": 1000})
    assert response.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ------------------------------------------------------------- ListOffsets


def test_list_offsets(client: RawClient) -> None:
    topic = name("lo")
    assert client.create_topic(topic, 1) == 0
    for ts in (1000, 2000, 3000):
        batch = record_batch([(None, b"%d-a" % ts), (None, b"%d-b" % ts)], timestamp_ms=ts)
        assert client.produce(topic, 0, batch).error_code == 0
    assert client.list_offset(topic, 0, -2).offset == 0  # earliest
    assert client.list_offset(topic, 0, -1).offset == 6  # latest
    for ts, offset, found_ts in ((0, 0, 1000), (1000, 0, 1000), (1500, 2, 2000),
                                 (3000, 4, 3000), (3001, -1, -1)):
        got = client.list_offset(topic, 0, ts)
        assert (got.error_code, got.offset, got.timestamp) == (0, offset, found_ts), ts
    top = client.list_offset(topic, 0, -3)  # max timestamp
    assert top.timestamp == 3000 and top.offset in (4, 5)


def test_list_offsets_refuses_other_negative_timestamps_as_unsupported(
        client: RawClient) -> None:
    """Kafka's ReplicaManager.fetchOffset: a negative timestamp other than -1/-2/-3, or
    one asked below the version that brought it (-3 at v7, -4 at v8, -5 at v9), is
    UNSUPPORTED_VERSION for that partition; the others in the request are answered."""
    topic = name("lo")
    assert client.create_topic(topic, 1) == 0
    assert client.produce(topic, 0, record_batch([(None, b"v")], timestamp_ms=5)).error_code == 0

    def codes(version: int, timestamps: list[int]) -> list[tuple[int, int]]:
        response = client.call(LIST_OFFSETS, version, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
                for ts in timestamps]}]})
        return [(p.error_code, p.offset) for p in response.topics[0].partitions]

    unsupported = (ErrorCode.UNSUPPORTED_VERSION, -1)
    assert codes(7, [-4]) == [unsupported]  # earliest local: v8+
    assert codes(7, [-5]) == [unsupported]  # latest tiered: v9+
    assert codes(7, [-7]) == [unsupported]
    assert codes(7, [-3]) == [(0, 0)]
    assert codes(6, [-3]) == [unsupported]  # max timestamp: v7+
    assert codes(6, [-2]) == [(0, 0)] and codes(1, [-1]) == [(0, 1)]


def test_list_offsets_unknown_partition(client: RawClient) -> None:
    topic = name("lo")
    assert client.create_topic(topic, 1) == 0
    response = client.call(LIST_OFFSETS, 7, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1},
            {"partition_index": 9, "current_leader_epoch": -1, "timestamp": -1}]}]})
    codes = [p.error_code for p in response.topics[0].partitions]
    assert codes == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_fetch_out_of_range(client: RawClient) -> None:
    topic = name("oor")
    assert client.create_topic(topic, 1) == 0
    assert client.produce(topic, 0, record_batch([(None, b"a")])).error_code == 0
    assert client.fetch(topic, 0, 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert client.fetch(topic, 0, 1).error_code == 0  # at the end: empty, no error


# --------------------------------------------------------- DescribeConfigs


def test_describe_configs_of_a_topic(client: RawClient) -> None:
    topic = name("cfg")
    assert client.create_topic(topic, 1, configs={"retention.ms": "123456",
                                                  "cleanup.policy": "delete"}) == 0
    response = client.call(DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                       "configuration_keys": None},
                      {"resource_type": TOPIC_RESOURCE, "resource_name": name("nope"),
                       "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    found, missing = response.results
    assert found.error_code == 0
    configs = {c.name: c for c in found.configs}
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].config_source == DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].config_source == DEFAULT_CONFIG
    assert int(configs["segment.bytes"].value) > 0
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    only = client.call(DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                       "configuration_keys": ["retention.ms"]}],
        "include_synonyms": False, "include_documentation": False})
    assert [c.name for c in only.results[0].configs] == ["retention.ms"]


def test_configs_of_an_illegal_topic_name_are_invalid_topic(broker: BrokerProcess,
                                                            client: RawClient) -> None:
    """Kafka checks a topic resource's name before it looks the topic up: a name no topic
    can have is INVALID_TOPIC_EXCEPTION, not UNKNOWN_TOPIC_OR_PARTITION."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )
    from confluent_kafka.error import KafkaError, KafkaException

    response = client.call(DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": "bad/name",
                       "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    [bad] = response.results
    assert bad.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "illegal" in bad.error_message
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for n in ("bad/name", "x" * 250):
        resource = ConfigResource("topic", n, incremental_configs=[ConfigEntry(
            "retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as refused:
            admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, n


def test_configs_of_the_empty_topic_name(client: RawClient) -> None:
    """A topic resource named '' (a broker's defaults have that name): AlterConfigs and
    IncrementalAlterConfigs answer INVALID_REQUEST, as Kafka's
    ControllerConfigurationValidator; DescribeConfigs, INVALID_TOPIC_EXCEPTION."""
    described = client.call(DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": "",
                       "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    assert described.results[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    altered = client.call(ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "",
         "configs": [{"name": "retention.ms", "value": "1000"}]}]})
    incremental = client.call(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": "",
         "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]}]})
    for response in (altered, incremental):
        [answer] = response.responses
        assert (answer.error_code, answer.error_message) == (
            ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")


# ------------------------------------------------------------------ acks=0


def test_acks_0_gets_no_response_and_stores_records(client: RawClient) -> None:
    topic = name("acks0")
    assert client.create_topic(topic, 1) == 0
    for i in range(20):
        client.send(PRODUCE, 9, produce_values(topic, 0, record_batch([(None, b"%d" % i)]),
                                               acks=0))
    # The next answer on the connection is the Metadata one: acks=0 had none.
    cid = client.send(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
    got_cid, _response = client.recv()
    assert got_cid == cid
    assert client.list_offset(topic, 0, -1).offset == 20
    assert [v for _o, _k, v in read_records(client.fetch(topic, 0, 0).records)] == \
        [b"%d" % i for i in range(20)]


def test_failed_acks_0_produce_closes_the_connection(broker: BrokerProcess) -> None:
    """No response to carry the error: Kafka closes, so the client refreshes metadata."""
    topic = name("acks0")
    with RawClient(broker.port) as c:
        assert c.create_topic(topic, 1) == 0
        c.send(PRODUCE, 9, produce_values(topic, 7, record_batch([(None, b"x")]), acks=0))
        assert c.is_closed_by_peer()


# -------------------------------------------------------------- idempotence


def init_producer(client: RawClient, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
    response = client.call(INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 60_000,
        "producer_id": producer_id, "producer_epoch": epoch})
    assert response.error_code == 0
    return response.producer_id, response.producer_epoch


def idem_batch(pid: int, epoch: int, seq: int, n: int = 5, tag: bytes = b"") -> bytes:
    return record_batch([(None, b"%s%d" % (tag, seq + i)) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_retry_gets_the_original_offsets(client: RawClient) -> None:
    topic = name("idem")
    assert client.create_topic(topic, 1) == 0
    pid, epoch = init_producer(client)
    assert pid >= 0 and epoch == 0
    first = idem_batch(pid, epoch, 0)
    assert client.produce(topic, 0, first).base_offset == 0
    assert client.produce(topic, 0, idem_batch(pid, epoch, 5)).base_offset == 5
    # The first batch again (a retry after a lost response): same offsets, not stored twice.
    retry = client.produce(topic, 0, first)
    assert (retry.error_code, retry.base_offset) == (0, 0)
    # Pipelined duplicate of the latest batch too.
    c1 = client.send(PRODUCE, 9, produce_values(topic, 0, idem_batch(pid, epoch, 10)))
    c2 = client.send(PRODUCE, 9, produce_values(topic, 0, idem_batch(pid, epoch, 10)))
    answers = [client.recv(), client.recv()]
    assert [cid for cid, _ in answers] == [c1, c2]
    for _cid, response in answers:
        part = response.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (0, 10)
    assert client.list_offset(topic, 0, -1).offset == 15
    values = [v for _o, _k, v in read_records(client.fetch(topic, 0, 0).records)]
    assert values == [b"%d" % i for i in range(15)]
    batches = read_batches(client.fetch(topic, 0, 0).records)
    assert [(b.producer_id, b.base_sequence) for b in batches] == \
        [(pid, 0), (pid, 5), (pid, 10)]


def test_sequence_gap_is_out_of_order(client: RawClient) -> None:
    topic = name("idem")
    assert client.create_topic(topic, 1) == 0
    pid, epoch = init_producer(client)
    assert client.produce(topic, 0, idem_batch(pid, epoch, 0)).error_code == 0
    gap = client.produce(topic, 0, idem_batch(pid, epoch, 7))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert client.list_offset(topic, 0, -1).offset == 5
    # The producer goes on from where the broker is.
    assert client.produce(topic, 0, idem_batch(pid, epoch, 5)).base_offset == 5


def test_unknown_producer_may_start_anywhere(client: RawClient) -> None:
    """Since KIP-360 Kafka accepts any first sequence from a producer it has no state
    for (its state may have been removed with old segments); then it must go on in order."""
    topic = name("idem")
    assert client.create_topic(topic, 1) == 0
    pid, epoch = init_producer(client)
    assert client.produce(topic, 0, idem_batch(pid, epoch, 3)).error_code == 0
    gap = client.produce(topic, 0, idem_batch(pid, epoch, 0))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert client.produce(topic, 0, idem_batch(pid, epoch, 8)).base_offset == 5


def test_epoch_bump_fences_the_old_epoch(client: RawClient) -> None:
    topic = name("idem")
    assert client.create_topic(topic, 1) == 0
    pid, epoch = init_producer(client)
    assert client.produce(topic, 0, idem_batch(pid, epoch, 0)).error_code == 0
    same_pid, new_epoch = init_producer(client, pid, epoch)  # KIP-360 bump
    assert (same_pid, new_epoch) == (pid, epoch + 1)
    # A new epoch of a known producer starts its sequences at 0.
    wrong_start = client.produce(topic, 0, idem_batch(pid, new_epoch, 5, tag=b"n"))
    assert wrong_start.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert client.produce(topic, 0, idem_batch(pid, new_epoch, 0, tag=b"n")).base_offset == 5
    stale = client.produce(topic, 0, idem_batch(pid, epoch, 5))
    assert stale.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert client.list_offset(topic, 0, -1).offset == 10


def test_kafka_python_idempotent_producer_defaults(broker: BrokerProcess) -> None:
    """kafka-python 3.x turns idempotence on by default: its batches carry a producer id."""
    from kafka import KafkaProducer

    topic = name("kp-idem")
    with RawClient(broker.port) as c:
        assert c.create_topic(topic, 1) == 0
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        for i in range(300):
            producer.send(topic, value=b"%d" % i)
        producer.flush(20)
    finally:
        producer.close(timeout=10)
    with RawClient(broker.port) as c:
        batches = read_batches(c.fetch(topic, 0, 0).records)
    assert batches and all(b.producer_id >= 0 for b in batches)
    seqs = [(b.base_sequence, len(list(b))) for b in batches]
    expected = 0
    for seq, n in seqs:
        assert seq == expected
        expected += n
    assert expected == 300


# ------------------------------------------------- every advertised version


def _served_versions() -> list[tuple[int, int]]:
    from wire.api_versions import ADVERTISED_BY_KEY

    keys = (PRODUCE, 1, LIST_OFFSETS, METADATA, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID,
            DESCRIBE_CONFIGS)
    return [(k, v) for k in keys
            for v in range(ADVERTISED_BY_KEY[k].min_version, ADVERTISED_BY_KEY[k].max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), _served_versions(),
                         ids=[f"{k}-v{v}" for k, v in _served_versions()])
def test_every_advertised_version_is_served(broker: BrokerProcess, api_key: int,
                                            version: int) -> None:
    """Each advertised (API, version) answers a plain valid request without error."""
    from tests.broker.rawclient import fetch_values

    topic = f"v-{api_key}-{version}-{uuid.uuid4().hex[:6]}"
    with RawClient(broker.port) as c:
        assert c.create_topic(topic, 1) == 0
        assert c.produce(topic, 0, record_batch([(b"k", b"seed")])).error_code == 0
        if api_key == PRODUCE:
            r = c.call(api_key, version, produce_values(topic, 0, record_batch([(b"k", b"v")])))
            part = r.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, 1)
        elif api_key == 1:
            r = c.call(api_key, version, fetch_values(topic, 0, 0))
            part = r.responses[0].partitions[0]
            assert (part.error_code, part.high_watermark) == (0, 1)
            assert read_records(part.records) == [(0, b"k", b"seed")]
        elif api_key == LIST_OFFSETS:
            r = c.call(api_key, version, {
                "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                    {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
            part = r.topics[0].partitions[0]
            assert (part.error_code, part.offset) == (0, 1)
        elif api_key == METADATA:
            r = c.call(api_key, version, {
                "topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
                "include_cluster_authorized_operations": False})
            assert [(t.name, t.error_code, len(t.partitions)) for t in r.topics] == \
                [(topic, 0, 1)]
            assert r.brokers[0].port == broker.port
        elif api_key == CREATE_TOPICS:
            r = c.call(api_key, version, {
                "topics": [{"name": topic + "-new", "num_partitions": 2, "replication_factor": 1,
                            "assignments": [], "configs": []}],
                "timeout_ms": 5000, "validate_only": False})
            assert r.topics[0].error_code == 0
            assert c.list_offset(topic + "-new", 1, -1).error_code == 0
        elif api_key == DELETE_TOPICS:
            named = ({"topics": [{"name": topic, "topic_id": None}]} if version >= 6
                     else {"topic_names": [topic]})  # v6: by name or by id (KIP-516)
            r = c.call(api_key, version, {**named, "timeout_ms": 5000})
            assert r.responses[0].error_code == 0
            assert c.list_offset(topic, 0, -1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif api_key == INIT_PRODUCER_ID:
            r = c.call(api_key, version, {"transactional_id": None,
                                          "transaction_timeout_ms": 1000,
                                          "producer_id": -1, "producer_epoch": -1})
            assert (r.error_code, r.producer_epoch) == (0, 0) and r.producer_id >= 0
        else:
            r = c.call(api_key, version, {
                "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic,
                               "configuration_keys": ["retention.ms"]}],
                "include_synonyms": False, "include_documentation": False})
            assert r.results[0].error_code == 0
            assert [cfg.name for cfg in r.results[0].configs] == ["retention.ms"]


# ------------------------------------------------------------ Fetch limits


def test_fetch_max_bytes_bounds_the_whole_response(client: RawClient) -> None:
    """KIP-74: whole batches in request order up to max_bytes; the first may exceed it."""
    from tests.broker.rawclient import FETCH, fetch_values

    topic = name("maxb")
    assert client.create_topic(topic, 4) == 0
    for p in range(4):
        for _ in range(3):
            assert client.produce(topic, p, record_batch([(None, b"x" * 1000)] * 4)).error_code == 0
    batch_size = len(read_batches(client.fetch(topic, 0, 0).records)[0]._buffer)

    def fetch_all(max_bytes: int, order: list[int]) -> list[tuple[int, int]]:
        values = fetch_values(topic, 0, 0, max_bytes=max_bytes)
        template = values["topics"][0]["partitions"][0]
        values["topics"][0]["partitions"] = [
            {**template, "partition": p, "partition_max_bytes": 1 << 20} for p in order]
        response = client.call(FETCH, 11, values)
        return [(p.partition_index, len(read_batches(p.records or b"")))
                for p in response.responses[0].partitions]

    # Room for 4 batches: 3 from the first partition asked for, 1 from the next.
    assert fetch_all(4 * batch_size + 10, [2, 0, 1, 3]) == [(2, 3), (0, 1), (1, 0), (3, 0)]
    # Room for less than one batch: still the first batch of the first partition.
    assert fetch_all(100, [3, 1, 0, 2]) == [(3, 1), (1, 0), (0, 0), (2, 0)]
    # Room for everything.
    assert fetch_all(1 << 20, [0, 1, 2, 3]) == [(0, 3), (1, 3), (2, 3), (3, 3)]


def test_partition_max_bytes_limits_one_partition(client: RawClient) -> None:
    topic = name("pmaxb")
    assert client.create_topic(topic, 1) == 0
    for _ in range(3):
        assert client.produce(topic, 0, record_batch([(None, b"y" * 1000)] * 4)).error_code == 0
    part = client.call(1, 11, {**_one_partition_fetch(topic, 5000)}).responses[0].partitions[0]
    assert len(read_batches(part.records)) == 1
    part = client.call(1, 11, _one_partition_fetch(topic, 10)).responses[0].partitions[0]
    assert len(read_batches(part.records)) == 1  # at least one batch, as Kafka does


def _one_partition_fetch(topic: str, partition_max_bytes: int) -> dict:
    from tests.broker.rawclient import fetch_values

    values = fetch_values(topic, 0, 0)
    values["topics"][0]["partitions"][0]["partition_max_bytes"] = partition_max_bytes
    return values


def test_concurrent_auto_creation_answers_created_or_being_created(
        broker: BrokerProcess) -> None:
    """Several connections (on every handler) ask for the same new topic at once.

    Each answer is the topic (0) or Kafka's retriable LEADER_NOT_AVAILABLE while
    another request creates it, never UNKNOWN_TOPIC_OR_PARTITION.
    """
    clients = [RawClient(broker.port) for _ in range(4)]
    try:
        codes: list[int] = []
        topics = [name("race") for _ in range(10)]
        for topic in topics:
            for c in clients:
                c.send(METADATA, 12, {"topics": [{"topic_id": None, "name": topic}],
                                      "allow_auto_topic_creation": True,
                                      "include_topic_authorized_operations": False})
            codes += [c.recv()[1].topics[0].error_code for c in clients]
        assert set(codes) <= {0, ErrorCode.LEADER_NOT_AVAILABLE}, codes
        assert 0 in codes
        listed = metadata(clients[0], None, auto=False)
        assert all(t in listed for t in topics)
    finally:
        for c in clients:
            c.close()


def test_create_topics_refuses_bad_configs(client: RawClient) -> None:
    # a null value is INVALID_CONFIG, as Kafka (ZkAdminManager.createTopics), not left out
    for configs in ({"retention.ms": "soon"}, {"no.such.config": "1"},
                    {"retention.ms": None, "segment.ms": "600000"}):
        topic = name("badcfg")
        assert client.create_topic(topic, 1, configs=configs) == ErrorCode.INVALID_CONFIG, configs
        assert topic not in metadata(client, None, auto=False)


def test_acks_all_needs_min_insync_replicas(client: RawClient) -> None:
    """min.insync.replicas=2 on one broker: acks=all is refused, acks=1 is not."""
    topic = name("minisr")
    assert client.create_topic(topic, 1, configs={"min.insync.replicas": "2"}) == 0
    refused = client.produce(topic, 0, record_batch([(None, b"a")]), acks=-1)
    assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert client.produce(topic, 0, record_batch([(None, b"b")]), acks=1).base_offset == 0


# ------------------------------------------------- Produce record checks


def test_produce_refuses_what_kafka_refuses_per_partition(client: RawClient) -> None:
    """Kafka's ProduceRequest rules for v3+: one magic-2 batch, no control batch,
    zstd from v7 on."""
    import crc32c
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    topic = name("rules")
    assert client.create_topic(topic, 1) == 0
    legacy = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    legacy.append(0, 1000, b"k", b"old format")
    two = record_batch([(None, b"a")]) + record_batch([(None, b"b")])
    zstd = record_batch([(None, b"z" * 100)] * 5, compression=4)
    control = bytearray(record_batch([(None, b"fake marker")]))
    control[22] |= 0x20  # attributes low byte: the control bit, with a CRC to match
    control[17:21] = crc32c.crc32c(bytes(control[21:])).to_bytes(4, "big")
    cases = [
        (9, bytes(legacy.build()), ErrorCode.INVALID_RECORD),
        (9, bytes(control), ErrorCode.INVALID_RECORD),
        (9, two, ErrorCode.INVALID_RECORD),
        (6, zstd, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    ]
    for version, records, code in cases:
        response = client.call(PRODUCE, version, produce_values(topic, 0, records))
        part = response.responses[0].partition_responses[0]
        assert part.error_code == code, (version, code)
        assert part.error_message or version < 8  # error_message is in v8+
    assert client.list_offset(topic, 0, -1).offset == 0
    ok = client.call(PRODUCE, 7, produce_values(topic, 0, zstd))
    assert ok.responses[0].partition_responses[0].error_code == 0
    assert [v for _o, _k, v in read_records(client.fetch(topic, 0, 0).records)] == [b"z" * 100] * 5


def test_produce_to_an_internal_topic_is_refused(broker: BrokerProcess,
                                                 client: RawClient) -> None:
    """Kafka's ReplicaManager: a client's records in __consumer_offsets would be read back
    as groups' state, so Produce refuses the coordinators' topics INVALID_TOPIC_EXCEPTION
    (its admin tools' client id excepted)."""
    from confluent_kafka import KafkaError, Producer

    from actors.core.offsets_codec import OFFSETS_TOPIC, group_tombstone

    def led() -> bool:  # the coordinator makes the topic after the broker starts
        topic = metadata(client, [OFFSETS_TOPIC], auto=False)[OFFSETS_TOPIC]
        return topic.error_code == 0 and any(  # type: ignore[attr-defined]
            p.partition_index == 0 and p.leader_id >= 0
            for p in topic.partitions)  # type: ignore[attr-defined]

    wait_for(led, f"{OFFSETS_TOPIC} partition 0 led")
    end = client.list_offset(OFFSETS_TOPIC, 0, -1).offset
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    delivered: list[object] = []
    producer.produce(OFFSETS_TOPIC, b"not a group", key=b"\x00", partition=0,
                     on_delivery=lambda err, _msg: delivered.append(err))
    assert producer.flush(30) == 0
    [err] = delivered
    assert isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_EXCEPTION, err
    refused = client.produce(OFFSETS_TOPIC, 0, record_batch([(b"\x00", b"raw")]))
    assert refused.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert refused.error_message == f"Cannot append to internal topic {OFFSETS_TOPIC}"
    # the partition and the records are checked first, as Kafka's KafkaApis does
    beyond = client.produce(OFFSETS_TOPIC, 99, record_batch([(b"\x00", b"raw")]))
    assert beyond.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert client.list_offset(OFFSETS_TOPIC, 0, -1).offset == end
    # Kafka's own tools write as "__admin_client": a well-formed record of theirs goes in
    tombstone = group_tombstone(f"gone-{uuid.uuid4().hex[:8]}")
    with RawClient(broker.port, client_id="__admin_client") as admin:
        taken = admin.produce(OFFSETS_TOPIC, 0, record_batch([(tombstone.key, tombstone.value)]))
        assert (taken.error_code, taken.base_offset) == (0, end)


# ------------------------------------------------- answers the codec cannot write


LONG_KEY = "k" * 32_760  # fits a request's string; the error naming it does not fit 32767


@pytest.mark.parametrize(("api", "versions", "flexible_from"), [
    (CREATE_TOPICS, range(2, 8), 5), (ALTER_CONFIGS, range(0, 3), 2),
    (INCREMENTAL_ALTER_CONFIGS, range(0, 2), 1)])
def test_an_answer_the_codec_cannot_write_is_unknown_server_error_not_a_close(
        client: RawClient, api: int, versions: range, flexible_from: int) -> None:
    """A config name of 32,760 characters is refused INVALID_CONFIG with a message naming
    it, which a non-flexible version's error_message (an int16 length) cannot hold. Kafka
    answers a failure to write a response with the request's error response
    (KafkaApis.handle -> sendErrorOrCloseConnection: UNKNOWN_SERVER_ERROR on each item,
    no message); the connection was closed. A flexible version writes the message."""
    topic = name("enc")
    assert client.create_topic(topic, 1) == 0
    for version in versions:
        if api == CREATE_TOPICS:
            response = client.call(api, version, {"topics": [{
                "name": name("enc"), "num_partitions": 1, "replication_factor": 1,
                "assignments": [], "configs": [{"name": LONG_KEY, "value": "1"}]}],
                "timeout_ms": 5000, "validate_only": False})
            [row] = response.topics
        else:
            op = {"config_operation": 0} if api == INCREMENTAL_ALTER_CONFIGS else {}
            response = client.call(api, version, {"resources": [{
                "resource_type": TOPIC_RESOURCE, "resource_name": topic,
                "configs": [{"name": LONG_KEY, "value": "1", **op}]}], "validate_only": False})
            [row] = response.responses
            assert row.resource_name == topic
        if version >= flexible_from:
            assert row.error_code == ErrorCode.INVALID_CONFIG, version
            assert LONG_KEY in row.error_message
        else:
            assert (row.error_code, row.error_message) == (
                ErrorCode.UNKNOWN_SERVER_ERROR, None), version
    # the connection still serves
    assert metadata(client, [topic], auto=False)[topic].error_code == 0  # type: ignore[attr-defined]


def test_an_answer_the_codec_cannot_write_is_counted_once_as_the_answer_sent(
        tmp_path: Path) -> None:
    """The error rates count the codes of the answer sent, once an item: AlterConfigs v0
    with the long config name on two topics is answered UNKNOWN_SERVER_ERROR on each,
    counted so (twice) and as one failed request (as an API that raises), not also as the
    INVALID_CONFIG it could not write. v2 writes INVALID_CONFIG: counted so, not failed."""
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path / "data", config={"metrics.port": metrics_port}).start()
    try:
        with RawClient(broker.port) as client:
            topics = [name("enc"), name("enc")]
            for topic in topics:
                assert client.create_topic(topic, 1) == 0
            for version in (0, 2):
                response = client.call(ALTER_CONFIGS, version, {"resources": [{
                    "resource_type": TOPIC_RESOURCE, "resource_name": topic,
                    "configs": [{"name": LONG_KEY, "value": "1"}]} for topic in topics],
                    "validate_only": False})
                assert [row.error_code for row in response.responses] == [
                    ErrorCode.UNKNOWN_SERVER_ERROR if version == 0
                    else ErrorCode.INVALID_CONFIG] * 2, version
            m = scrape(metrics_port)
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]
    errors = {k: v for k, v in m.items()
              if k.startswith('actorlog_errors_total{api="AlterConfigs"')}
    assert errors == {
        'actorlog_errors_total{api="AlterConfigs",error="UNKNOWN_SERVER_ERROR"}': 2,
        'actorlog_errors_total{api="AlterConfigs",error="INVALID_CONFIG"}': 2}
    assert m["actorlog_requests_failed_total"] == 1


# ------------------------------------------------------- SASL requests without SASL


SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


def test_sasl_requests_on_a_plaintext_listener_are_illegal_sasl_state_not_a_close(
        client: RawClient) -> None:
    """A PLAINTEXT listener has no SASL layer: Kafka's KafkaApis answers SaslHandshake and
    SaslAuthenticate ILLEGAL_SASL_STATE (no mechanisms; the message of a connection taken
    as authenticated) and keeps the connection; they closed it."""
    for version in (0, 1):
        shake = client.call(SASL_HANDSHAKE, version, {"mechanism": "PLAIN"})
        assert (shake.error_code, shake.mechanisms) == (ErrorCode.ILLEGAL_SASL_STATE, [])
    for version in (0, 1, 2):
        done = client.call(SASL_AUTHENTICATE, version, {"auth_bytes": b"\0u\0p"})
        assert done.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert done.error_message == ("SaslAuthenticate request received after successful "
                                      "authentication")
        assert done.auth_bytes == b""
    topic = name("after-sasl")
    assert client.create_topic(topic, 1) == 0  # the connection still serves
    assert metadata(client, [topic], auto=False)[topic].error_code == 0  # type: ignore[attr-defined]


def test_a_topic_named_twice_in_create_topics_is_invalid_request_once_and_not_made(
        client: RawClient) -> None:
    """Kafka (ControllerApis.createTopics): a name given twice gets one INVALID_REQUEST
    answer, "Duplicate topic name.", and none of its entries is made; the others are. It
    was made from its first entry and answered TOPIC_ALREADY_EXISTS twice."""
    twice, once = name("twice"), name("once")
    spec = {"num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    for version in (2, 4, 7):
        twice_v, once_v = f"{twice}-{version}", f"{once}-{version}"
        response = client.call(CREATE_TOPICS, version, {"topics": [
            {"name": twice_v, **spec}, {"name": once_v, **spec},
            {"name": twice_v, **spec, "num_partitions": 2}],
            "timeout_ms": 10_000, "validate_only": False})
        answers = [(t.name, t.error_code) for t in response.topics]
        assert answers == [(twice_v, ErrorCode.INVALID_REQUEST), (once_v, 0)], version
        assert response.topics[0].error_message == "Duplicate topic name."
        found = metadata(client, [twice_v, once_v], auto=False)
        assert found[twice_v].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
        assert found[once_v].error_code == 0  # type: ignore[attr-defined]


def test_topic_names_colliding_by_dot_and_underscore_are_refused(client: RawClient) -> None:
    """The single node's controller looks the '.'/'_' collisions up in its index of topic
    names (kept as topics are made and deleted): a name differing from an existing one
    only by '.' against '_' is INVALID_TOPIC_EXCEPTION; once that topic is deleted, it is
    made."""
    base = name("coll")
    dotted, underscored = f"{base}.a", f"{base}_a"
    assert client.create_topic(dotted, 1) == 0
    spec = {"num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    response = client.call(CREATE_TOPICS, 4, {"topics": [{"name": underscored, **spec}],
                                               "timeout_ms": 10_000, "validate_only": False})
    [row] = response.topics
    assert row.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert dotted in row.error_message
    deleted = client.call(DELETE_TOPICS, 4, {"topic_names": [dotted], "timeout_ms": 10_000})
    assert deleted.responses[0].error_code == 0
    assert client.create_topic(underscored, 1) == 0


def test_a_topic_named_twice_in_metadata_is_answered_and_auto_created_once(
        client: RawClient) -> None:
    """Kafka's KafkaApis takes Metadata's topics as a set: a name asked twice is one
    topic, auto-created and answered once (it was answered twice)."""
    topic = name("meta-twice")
    for auto in (True, False):
        response = client.call(METADATA, 12, {
            "topics": [{"topic_id": None, "name": topic}] * 2,
            "allow_auto_topic_creation": auto, "include_topic_authorized_operations": False})
        answered = [t.name for t in response.topics]
        assert answered == [topic], (auto, answered)
    assert [p.partition_index for p in settled(client, topic).partitions] == [0]  # type: ignore[attr-defined]


def test_a_compacted_topic_refuses_a_record_without_a_key(broker: BrokerProcess) -> None:
    """Kafka's LogValidator refuses a keyless record on a compacted topic (the cleaner
    could never compact it): INVALID_RECORD to a real client; keyed records and
    tombstones go in. It was appended."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = name("keyless")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})]
                        )[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0, "linger.ms": 0})
    results: list[tuple[bytes | None, str | None]] = []

    def send(key: bytes | None, value: bytes | None) -> None:
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=lambda err, msg:
                         results.append((key, err.name() if err else None)))
        assert producer.flush(30) == 0

    send(b"k", b"v")
    send(None, b"no key")
    send(b"k", None)  # a tombstone has a key
    assert results == [(b"k", None), (None, "INVALID_RECORD"), (b"k", None)]


@pytest.mark.parametrize("codec", [0, 4])  # none, zstd
def test_a_compacted_topic_names_each_keyless_record_compressed_or_not(
        client: RawClient, codec: int) -> None:
    """Produce v8+: the keyless record is named in record_errors in Kafka's words, the
    error_message is Kafka's RecordValidationException text, and nothing of the batch
    is appended; a compressed batch is decompressed to read its keys."""
    topic = name("keyless-raw")
    assert client.create_topic(topic, 1, configs={"cleanup.policy": "compact"}) == 0
    assert client.produce(topic, 0, record_batch([(b"k", b"v")])).error_code == 0
    batch = record_batch([(b"k", b"x" * 200), (None, b"y" * 200)], compression=codec)
    assert batch[22] & 0x07 == codec  # the attributes' codec: really compressed (or not)
    response = client.call(PRODUCE, 9, produce_values(topic, 0, batch))
    part = response.responses[0].partition_responses[0]
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert part.error_code == ErrorCode.INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
        (1, why)]
    assert part.error_message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{why}')]")
    assert client.list_offset(topic, 0, -1).offset == 1
