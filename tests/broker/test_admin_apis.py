"""The admin APIs against a real broker, through the Kafka admin clients users run.

Each API is driven by kafka-python's KafkaAdminClient and, where its Python
binding offers the call, confluent-kafka's AdminClient (it has none for
OffsetDelete, DescribeLogDirs or DescribeTopicPartitions): CreatePartitions,
AlterConfigs, IncrementalAlterConfigs, DescribeConfigs (types and sources),
DeleteRecords, DeleteGroups, OffsetDelete, DescribeLogDirs,
DescribeTopicPartitions. Kafka's error codes are checked for the refusals, and
config changes are checked on the live logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kafka.errors as kerr
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    OffsetSpec,
    ResourceType,
)
from confluent_kafka.admin import NewTopic as CNewTopic
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient, NewTopic

from tests.broker.conftest import BrokerProcess
from tests.broker.rawclient import DESCRIBE_CONFIGS, METADATA, RawClient

pytestmark = [pytest.mark.clients, pytest.mark.multiprocess]

BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 4,
    "log.retention.check.interval.ms": 200,
    "log.roll.ms": 3_600_000,  # set in the file: STATIC_BROKER_CONFIG
    # Kafka's DynamicBrokerReconfigurationTest's pair: ms wins (the default, 7 days, kept)
    "log.retention.ms": 604_800_000,
    "log.retention.hours": 24,
    "node.id": 1,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the tests that do not restart it (a start is 3-6 CPU s): each
    names topics and groups of its own, so none sees another's."""
    b = BrokerProcess(tmp_path_factory.mktemp("admin") / "data", config=BROKER_CONFIG).start()
    yield b
    assert b.stop() == 0, b.log()[-3000:]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, for the tests that restart it."""
    b = BrokerProcess(tmp_path / "data", config=BROKER_CONFIG).start()
    yield b
    assert b.stop() == 0, b.log()[-3000:]


@pytest.fixture
def kadmin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = new_kadmin(broker)
    yield client
    client.close()


@pytest.fixture
def own_kadmin(own_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = new_kadmin(own_broker)
    yield client
    client.close()


def new_kadmin(broker: BrokerProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20_000)


@pytest.fixture
def cadmin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture
def own_cadmin(own_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": own_broker.bootstrap})


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def result(futures: dict[Any, Any]) -> dict[Any, Any]:
    return {k: f.result(timeout=30) for k, f in futures.items()}


def error_of(future: Any) -> Any:
    with pytest.raises(KafkaException) as caught:
        future.result(timeout=30)
    return caught.value.args[0]


def produce(broker: BrokerProcess, topic: str, per_partition: dict[int, int],
            key: Callable[[int], bytes | None] = lambda i: None, size: int = 10) -> None:
    """One record per batch (small segments roll between them), every delivery checked."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "batch.num.messages": 1})
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, b"v" * size, key=key(i), partition=partition,
                             on_delivery=delivered)
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]


def create(kadmin: KafkaAdminClient, name: str, partitions: int = 1,
           configs: dict[str, str] | None = None) -> None:
    kadmin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])


def partition_count(kadmin: KafkaAdminClient, name: str) -> int:
    [topic] = kadmin.describe_topics([name])
    return len(topic["partitions"])


def segments(broker: BrokerProcess, topic: str, partition: int = 0) -> list[Path]:
    return sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log"))


# ------------------------------------------------------------- CreatePartitions


def test_create_partitions_with_kafka_python(broker: BrokerProcess,
                                             kadmin: KafkaAdminClient) -> None:
    create(kadmin, "grow-k", 1)
    kadmin.create_partitions({"grow-k": 3})
    assert partition_count(kadmin, "grow-k") == 3
    # the new partitions are real logs: write to and read from the last one
    produce(broker, "grow-k", {2: 5})
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition("grow-k", 2)])
    consumer.seek_to_beginning()
    assert len([r for r, _ in zip(consumer, range(5), strict=False)]) == 5
    consumer.close()
    assert len(segments(broker, "grow-k", 2)) == 1

    refusals = {
        2: kerr.InvalidPartitionsError,  # fewer
        3: kerr.InvalidPartitionsError,  # the same
    }
    for count, error in refusals.items():
        with pytest.raises(error):
            kadmin.create_partitions({"grow-k": count})
    with pytest.raises(kerr.UnknownTopicOrPartitionError):
        kadmin.create_partitions({"no-such-topic": 2})
    # an assignment must name the new partitions only, on brokers that exist
    with pytest.raises(kerr.InvalidReplicationAssignmentError):
        kadmin.create_partitions({"grow-k": {"count": 5, "assignments": [[1]]}})
    with pytest.raises(kerr.InvalidReplicationAssignmentError):
        kadmin.create_partitions({"grow-k": {"count": 4, "assignments": [[2]]}})
    kadmin.create_partitions({"grow-k": {"count": 4, "assignments": [[1]]}})
    kadmin.create_partitions({"grow-k": 6}, validate_only=True)
    assert partition_count(kadmin, "grow-k") == 4


def test_create_partitions_with_confluent_kafka(broker: BrokerProcess,
                                                cadmin: AdminClient) -> None:
    result(cadmin.create_topics([CNewTopic("grow-c", 2, 1)]))
    assert result(cadmin.create_partitions([NewPartitions("grow-c", 5)])) == {"grow-c": None}
    wait_until(lambda: len(cadmin.list_topics("grow-c", timeout=10)
                           .topics["grow-c"].partitions) == 5, "5 partitions in Metadata")
    err = error_of(cadmin.create_partitions([NewPartitions("grow-c", 4)])["grow-c"])
    assert err.code() == 37 and "cannot be removed" in err.str()  # INVALID_PARTITIONS
    produce(broker, "grow-c", {4: 3})


# ----------------------------------------------------- configs: alter, describe


def describe(cadmin: AdminClient, topic: str) -> dict[str, Any]:
    [entries] = result(cadmin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]))\
        .values()
    return dict(entries)


def test_describe_configs_gives_each_value_its_true_source_and_type(
        broker: BrokerProcess, kadmin: KafkaAdminClient, cadmin: AdminClient) -> None:
    create(kadmin, "sources", 1, {"retention.ms": "86400000"})
    entries = describe(cadmin, "sources")
    assert entries["retention.ms"].value == "86400000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # segment.ms falls back to log.roll.ms, which the broker's config file sets
    assert entries["segment.ms"].value == "3600000"
    assert entries["segment.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    # log.roll.ms has no default of its own (Kafka's null): the DEFAULT_CONFIG synonym is
    # log.roll.hours's, Kafka's order (DynamicBrokerConfig.brokerConfigSynonyms)
    assert [(s.name, s.source) for s in entries["segment.ms"].synonyms.values()] == [
        ("log.roll.ms", ConfigSource.STATIC_BROKER_CONFIG.value),
        ("log.roll.hours", ConfigSource.DEFAULT_CONFIG.value)]
    assert entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not entries["retention.ms"].is_read_only

    described = kadmin.describe_configs(
        [KConfigResource(ConfigResourceType.TOPIC, "sources")], config_filter="all")
    topic = described["topic"]["sources"]
    assert topic["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert topic["segment.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert topic["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    types = {name: v["config_type"] for name, v in topic.items()}
    assert types["segment.bytes"] == "INT" and types["retention.ms"] == "LONG"
    assert types["cleanup.policy"] == "LIST" and types["min.cleanable.dirty.ratio"] == "DOUBLE"
    assert types["message.timestamp.type"] == "STRING"
    assert set(kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "sources")])
               ["topic"]["sources"]) == {"retention.ms"}  # the default filter: modified only

    brokers = kadmin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "1")],
                                      config_filter="all")["broker"]["1"]
    assert brokers["log.roll.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert brokers["log.segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert brokers["log.roll.ms"]["read_only"] is True
    assert brokers["auto.create.topics.enable"]["config_type"] == "BOOLEAN"
    assert brokers["log.retention.ms"]["config_type"] == "LONG"
    assert brokers["num.io.threads"]["config_type"] == "INT"
    assert brokers["log.cleanup.policy"]["config_type"] == "LIST"
    assert brokers["log.cleaner.min.cleanable.ratio"]["config_type"] == "DOUBLE"


def test_broker_and_topic_configs_answer_kafkas_retention_chain_and_names(
        broker: BrokerProcess, kadmin: KafkaAdminClient, cadmin: AdminClient) -> None:
    """As Kafka's ConfigHelper (ZooKeeper mode): log.retention.ms/.minutes/.hours each
    described, with their synonyms in precedence order; broker.id; listeners with their
    listener names; a password hidden."""
    [entries] = result(cadmin.describe_configs(
        [ConfigResource(ResourceType.BROKER, "1")])).values()
    b = dict(entries)
    assert (b["log.retention.ms"].value, b["log.retention.ms"].source) == (
        "604800000", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert (b["log.retention.hours"].value, b["log.retention.hours"].source) == (
        "24", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert (b["log.retention.minutes"].value, b["log.retention.minutes"].source) == (
        None, ConfigSource.DEFAULT_CONFIG.value)  # no default, not set: null
    assert (b["broker.id"].value, b["broker.id"].source) == (
        "1", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert b["listeners"].value == f"PLAINTEXT://{broker.bootstrap}"
    assert b["log.retention.hours"].is_read_only and not b["log.retention.hours"].is_sensitive
    assert b["ssl.key.password"].is_sensitive and b["ssl.key.password"].value is None

    def chain(entry: dict[str, Any]) -> list[tuple[str, str | None, str]]:
        return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]

    brokers = kadmin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "1")],
                                      include_synonyms=True, config_filter="all")["broker"]["1"]
    static, default = "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"
    retention_chain = [("log.retention.ms", "604800000", static),
                       ("log.retention.hours", "24", static),
                       ("log.retention.hours", "168", default)]
    assert chain(brokers["log.retention.ms"]) == retention_chain
    assert chain(brokers["log.retention.hours"]) == retention_chain[1:]
    assert chain(brokers["log.retention.minutes"]) == []  # Kafka drops those before its own
    # Kafka's broker.id default is -1 (Defaults.BrokerId), not node.id's
    assert chain(brokers["broker.id"]) == [("broker.id", "1", static),
                                           ("broker.id", "-1", default)]
    # keys Kafka has no default for: null while not set (no DEFAULT_CONFIG synonym either)
    for key in ("broker.rack", "ssl.keystore.location", "log.flush.interval.ms"):
        assert (brokers[key]["value"], brokers[key]["config_source"], chain(brokers[key])) == (
            None, default, []), key
    assert brokers["broker.id"]["config_type"] == "INT"

    create(kadmin, "chain", 1)
    create(kadmin, "chain-own", 1, {"retention.ms": "1000"})
    topics = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "chain"),
                                      KConfigResource(ConfigResourceType.TOPIC, "chain-own")],
                                     include_synonyms=True, config_filter="all")["topic"]
    retention = topics["chain"]["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("604800000", static)
    assert chain(retention) == retention_chain
    own = topics["chain-own"]["retention.ms"]
    assert chain(own) == [("retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG"), *retention_chain]


def test_the_cluster_default_broker_resource_has_only_dynamic_defaults(
        broker: BrokerProcess) -> None:
    """Kafka's ConfigHelper answers the broker resource '' (the cluster-wide defaults) with
    the dynamic defaults only (DYNAMIC_DEFAULT_BROKER_CONFIG); actorlog's broker configs are
    static, so there are none: an empty list, no error, while broker '1' has every key.
    (confluent-kafka and kafka-python both refuse an empty broker name before sending, so
    the request goes on the wire from the raw client, as Kafka's own AdminClient sends it.)"""
    resources = [{"resource_type": 4, "resource_name": n, "configuration_keys": None}
                 for n in ("", "1")]
    with RawClient(broker.port) as client:
        response = client.call(DESCRIBE_CONFIGS, 4, {
            "resources": resources, "include_synonyms": True, "include_documentation": False})
    defaults, own = response.results
    assert (defaults.error_code, defaults.resource_name, defaults.configs) == (0, "", [])
    names = {c.name for c in own.configs}
    assert own.error_code == 0 and {"log.retention.hours", "log.roll.hours"} <= names


def test_log_roll_hours_and_a_negative_retention_as_kafka_takes_them(tmp_path: Path) -> None:
    """log.roll.hours gives segment.ms when log.roll.ms is not set (KafkaConfig.
    logRollTimeMillis), with Kafka's synonyms; a log.retention.ms below -1 is no time limit
    (logRetentionTimeMillis: negative is -1), shown as given on the broker key, -1 on the
    topic's retention.ms."""
    config = {k: v for k, v in BROKER_CONFIG.items() if k != "log.roll.ms"}
    b = BrokerProcess(tmp_path / "data", config={
        **config, "log.roll.hours": 2, "log.retention.ms": -5}).start()
    kadmin = new_kadmin(b)
    try:
        create(kadmin, "by-hours", 1)

        def chain(entry: dict[str, Any]) -> list[tuple[str, str | None, str]]:
            return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]

        static, default = "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"
        got = kadmin.describe_configs(
            [KConfigResource(ConfigResourceType.BROKER, "1"),
             KConfigResource(ConfigResourceType.TOPIC, "by-hours")],
            include_synonyms=True, config_filter="all")
        brokers, topic = got["broker"]["1"], got["topic"]["by-hours"]
        hours = brokers["log.roll.hours"]
        assert (hours["value"], hours["config_source"], hours["config_type"]) == (
            "2", static, "INT")
        assert chain(hours) == [("log.roll.hours", "2", static),
                                ("log.roll.hours", "168", default)]
        roll = brokers["log.roll.ms"]  # not set, no default: null, Kafka's drop leaves none
        assert (roll["value"], roll["config_source"], chain(roll)) == (None, default, [])
        segment = topic["segment.ms"]
        assert (segment["value"], segment["config_source"], chain(segment)) == (
            "7200000", default, [])
        retention_chain = [("log.retention.ms", "-5", static),
                           ("log.retention.hours", "24", static),
                           ("log.retention.hours", "168", default)]
        ms = brokers["log.retention.ms"]
        assert (ms["value"], ms["config_source"], chain(ms)) == ("-5", static, retention_chain)
        retention = topic["retention.ms"]
        assert (retention["value"], retention["config_source"], chain(retention)) == (
            "-1", static, retention_chain)
        # the topic key keeps Kafka's atLeast(-1)
        out = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "by-hours",
                                                    {"retention.ms": "-2"})])
        assert "InvalidConfigurationError" in out["topic"]["by-hours"], out
    finally:
        kadmin.close()
        assert b.stop() == 0, b.log()[-3000:]


def test_subtracting_the_last_cleanup_policy_leaves_it_empty(
        broker: BrokerProcess, kadmin: KafkaAdminClient, cadmin: AdminClient) -> None:
    """Kafka's ValidList takes an empty cleanup.policy: the topic is then neither deleted
    by retention nor compacted, and DeleteRecords is refused by policy."""
    create(kadmin, "no-policy", 1, {"cleanup.policy": "compact"})
    res = ConfigResource(ResourceType.TOPIC, "no-policy", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SUBTRACT)])
    assert list(result(cadmin.incremental_alter_configs([res])).values()) == [None]
    entry = describe(cadmin, "no-policy")["cleanup.policy"]
    assert (entry.value, entry.source) == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    with pytest.raises(kerr.PolicyViolationError):
        kadmin.delete_records({TopicPartition("no-policy", 0): 0})
    # kafka-python's SUBTRACT of the default's only value: the same
    create(kadmin, "no-policy-2", 1)
    assert kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "no-policy-2", {
        "cleanup.policy": ("SUBTRACT", "delete")})]) == {"topic": {"no-policy-2": "OK"}}
    assert describe(cadmin, "no-policy-2")["cleanup.policy"].value == ""


def test_incremental_alter_configs_with_both_clients(broker: BrokerProcess,
                                                     kadmin: KafkaAdminClient,
                                                     cadmin: AdminClient) -> None:
    create(kadmin, "tune", 1, {"retention.ms": "86400000", "flush.ms": "1000"})
    res = ConfigResource(ResourceType.TOPIC, "tune", incremental_configs=[
        ConfigEntry("segment.bytes", "4096", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("flush.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    assert list(result(cadmin.incremental_alter_configs([res])).values()) == [None]
    entries = describe(cadmin, "tune")
    assert entries["segment.bytes"].value == "4096"
    assert entries["flush.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["retention.ms"].value == "86400000"  # untouched
    assert entries["cleanup.policy"].value == "delete,compact"  # appended to the default
    assert kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "tune", {
        "cleanup.policy": ("SUBTRACT", "compact")})]) == {"topic": {"tune": "OK"}}
    assert describe(cadmin, "tune")["cleanup.policy"].value == "delete"

    # refusals: Kafka's codes, nothing changed
    bad = {
        "segment.bytes": ("APPEND", "1"),  # not a list config
    }
    out = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "tune", bad)],
                               raise_on_unknown=False)
    assert out["topic"]["tune"].startswith("[Error 40] InvalidConfigurationError")
    out = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "tune",
                                                {"segment.bytes": "12"})])  # under 14
    assert "InvalidConfigurationError" in out["topic"]["tune"] and "out of range" in \
        out["topic"]["tune"]
    out = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "tune",
                                                {"no.such.config": "1"})],
                               raise_on_unknown=False)
    assert "InvalidConfigurationError" in out["topic"]["tune"]
    out = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "missing",
                                                {"retention.ms": "1"})],
                               raise_on_unknown=False)
    assert "UnknownTopicOrPartitionError" in out["topic"]["missing"]
    out = kadmin.alter_configs([KConfigResource(ConfigResourceType.BROKER, "1",
                                                {"log.retention.ms": "1"})],
                               raise_on_unknown=False)
    assert "InvalidRequestError" in out["broker"]["1"] and "static" in out["broker"]["1"]
    out = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "tune",
                                                {"segment.bytes": "8192"})], validate_only=True)
    assert out == {"topic": {"tune": "OK"}}
    assert describe(cadmin, "tune")["segment.bytes"].value == "4096"


def test_alter_configs_replaces_every_override(broker: BrokerProcess, kadmin: KafkaAdminClient,
                                               cadmin: AdminClient) -> None:
    """AlterConfigs (not incremental): the configs sent are the topic's new overrides."""
    create(kadmin, "replace", 1, {"retention.ms": "86400000", "flush.ms": "1000"})
    res = ConfigResource(ResourceType.TOPIC, "replace", set_config={"segment.ms": "7200000"})
    assert list(result(cadmin.alter_configs([res])).values()) == [None]
    entries = describe(cadmin, "replace")
    assert entries["segment.ms"].value == "7200000"
    assert entries["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["flush.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # kafka-python's non-incremental path describes the modified configs first and sends
    # them along, so that only what it names changes
    kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "replace",
                                          {"retention.bytes": "100000"})], incremental=False)
    entries = describe(cadmin, "replace")
    assert entries["retention.bytes"].value == "100000"
    assert entries["segment.ms"].value == "7200000"


def test_config_changes_take_effect_on_the_live_logs(own_broker: BrokerProcess,
                                                     own_kadmin: KafkaAdminClient) -> None:
    create(own_kadmin, "live", 1)
    produce(own_broker, "live", {0: 20}, size=100)
    assert len(segments(own_broker, "live")) == 1
    # a small segment.bytes: the next appends roll segments
    own_kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "live",
                                              {"segment.bytes": "1024"})])
    produce(own_broker, "live", {0: 40}, size=100)
    assert len(segments(own_broker, "live")) > 3
    # retention.ms of 1 ms: the next retention pass deletes the finished segments
    before = len(segments(own_broker, "live"))
    own_kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "live",
                                              {"segment.bytes": "1024", "retention.ms": "1"})])
    wait_until(lambda: len(segments(own_broker, "live")) < before, "retention to delete segments")
    # cleanup.policy compact: retention stops and DeleteRecords is refused (POLICY_VIOLATION)
    own_kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "live",
                                              {"cleanup.policy": "compact"})])
    with pytest.raises(kerr.PolicyViolationError):
        own_kadmin.delete_records({TopicPartition("live", 0): 1})
    # the new overrides survive a restart (the topic table is persisted)
    own_broker.stop()
    own_broker.start()
    fresh = new_kadmin(own_broker)
    again = fresh.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "live")])
    fresh.close()
    assert again["topic"]["live"]["cleanup.policy"]["value"] == "compact"


# ---------------------------------------------------------------- DeleteRecords


def test_delete_records_moves_the_log_start_with_both_clients(
        own_broker: BrokerProcess, own_kadmin: KafkaAdminClient, own_cadmin: AdminClient) -> None:
    create(own_kadmin, "trim", 2, {"segment.bytes": "1024"})
    produce(own_broker, "trim", {0: 50, 1: 10}, size=100)
    many = len(segments(own_broker, "trim"))
    out = own_kadmin.delete_records({TopicPartition("trim", 0): 30})
    assert out[TopicPartition("trim", 0)]["low_watermark"] == 30
    assert len(segments(own_broker, "trim")) < many  # segments wholly below 30 are gone
    [deleted] = result(own_cadmin.delete_records([CTopicPartition("trim", 0, 40)])).values()
    assert deleted.low_watermark == 40
    # -1 is the high watermark; past it, OFFSET_OUT_OF_RANGE
    assert own_kadmin.delete_records({TopicPartition("trim", 1): -1})[
        TopicPartition("trim", 1)]["low_watermark"] == 10
    with pytest.raises(kerr.OffsetOutOfRangeError):
        own_kadmin.delete_records({TopicPartition("trim", 1): 11})
    [future] = own_cadmin.delete_records([CTopicPartition("trim", 0, 51)]).values()
    err = error_of(future)
    assert err.code() == 1  # OFFSET_OUT_OF_RANGE
    # readers start at the new log start, and ListOffsets says so
    consumer = KafkaConsumer(bootstrap_servers=own_broker.bootstrap, consumer_timeout_ms=5000)
    tp = TopicPartition("trim", 0)
    consumer.assign([tp])
    assert consumer.beginning_offsets([tp]) == {tp: 40}
    consumer.seek_to_beginning(tp)
    offsets = [r.offset for r in consumer]
    consumer.close()
    assert offsets == list(range(40, 50))
    # and so it stays after a restart
    own_broker.stop()
    own_broker.start()
    consumer = KafkaConsumer(bootstrap_servers=own_broker.bootstrap)
    assert consumer.beginning_offsets([tp]) == {tp: 40}
    consumer.close()


# ---------------------------------------------------------- DeleteGroups, OffsetDelete


def consume_and_commit(broker: BrokerProcess, group: str, topic: str, count: int,
                       close: bool = True) -> Consumer:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    assert got == count
    consumer.commit(asynchronous=False)
    if close:
        consumer.close()
    return consumer


def group_names(kadmin: KafkaAdminClient) -> set[str]:
    return {g["group_id"] for g in kadmin.list_groups()}


def test_delete_groups_refuses_a_group_with_members_and_deletes_an_empty_one(
        own_broker: BrokerProcess, own_kadmin: KafkaAdminClient, own_cadmin: AdminClient) -> None:
    create(own_kadmin, "groups-t", 1)
    produce(own_broker, "groups-t", {0: 3})
    busy = consume_and_commit(own_broker, "busy", "groups-t", 3, close=False)
    try:
        assert own_kadmin.delete_groups(["busy"]) == {"busy": "NonEmptyGroupError"}
        err = error_of(own_cadmin.delete_consumer_groups(["busy"])["busy"])
        assert err.code() == 68  # NON_EMPTY_GROUP
    finally:
        busy.close()
    assert own_kadmin.delete_groups(["never-was"]) == {"never-was": "GroupIdNotFoundError"}

    consume_and_commit(own_broker, "idle-k", "groups-t", 3)
    consume_and_commit(own_broker, "idle-c", "groups-t", 3)
    assert own_kadmin.delete_groups(["idle-k"]) == {"idle-k": "OK"}
    assert result(own_cadmin.delete_consumer_groups(["idle-c"])) == {"idle-c": None}
    assert {"idle-k", "idle-c"}.isdisjoint(group_names(own_kadmin))
    assert own_kadmin.list_group_offsets("idle-k")["idle-k"] == {}
    # the tombstones are in __consumer_offsets: a restart does not bring the groups back
    own_broker.stop()
    own_broker.start()
    fresh = new_kadmin(own_broker)

    def loaded() -> bool:
        try:
            return "busy" in group_names(fresh)
        except kerr.CoordinatorLoadInProgressError:
            return False

    wait_until(loaded, "the coordinator to load")
    assert {"idle-k", "idle-c"}.isdisjoint(group_names(fresh))
    fresh.close()


def test_the_empty_group_id_s_offsets_can_be_deleted(broker: BrokerProcess,
                                                      kadmin: KafkaAdminClient) -> None:
    """Kafka takes OffsetCommit, DescribeGroups and DeleteGroups for the group id "" (for
    old clients that committed with no group; only a null id is INVALID_GROUP_ID): what
    can be committed and listed under it can be deleted, as Kafka deletes it."""
    from tests.broker.rawclient import RawClient

    create(kadmin, "nameless-t", 1)
    produce(broker, "nameless-t", {0: 3})
    with RawClient(broker.port) as client:
        committed = client.call(8, 2, {
            "group_id": "", "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time_ms": -1, "topics": [{"name": "nameless-t", "partitions": [
                {"partition_index": 0, "committed_offset": 2, "committed_metadata": ""}]}]})
        assert [p.error_code for t in committed.topics for p in t.partitions] == [0]
    assert "" in group_names(kadmin)
    assert kadmin.delete_groups([""]) == {"": "OK"}
    assert "" not in group_names(kadmin)
    with RawClient(broker.port) as client:
        fetched = client.call(9, 1, {"group_id": "", "topics": [
            {"name": "nameless-t", "partition_indexes": [0]}]})
        assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [-1]
        assert [(r.group_id, r.error_code) for r in client.call(
            42, 2, {"groups_names": [""]}).results] == [("", 69)]  # GROUP_ID_NOT_FOUND


def test_a_group_named_twice_in_delete_groups_is_deleted_and_answered_once(
        broker: BrokerProcess, kadmin: KafkaAdminClient) -> None:
    """Kafka takes DeleteGroups' names distinct (KafkaApis.handleDeleteGroupsRequest): one
    answer per group, and a group named twice is deleted once, OK (the second deletion of
    it answered GROUP_ID_NOT_FOUND for the group just deleted)."""
    from tests.broker.rawclient import RawClient

    create(kadmin, "twice-t", 1)
    produce(broker, "twice-t", {0: 1})
    consume_and_commit(broker, "twice", "twice-t", 1)
    with RawClient(broker.port) as client:
        answer = client.call(42, 2, {"groups_names": ["twice", "absent", "twice"]})
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("twice", 0), ("absent", 69)]  # GROUP_ID_NOT_FOUND
    assert "twice" not in group_names(kadmin)


def test_describe_and_delete_groups_spread_over_two_processes_answer_every_group(
        tmp_path: Path) -> None:
    """num.processes 2: the groups of one DescribeGroups / DeleteGroups (kafka-python sends
    every group of a coordinator in one request) have coordinators in both processes;
    each group gets its own real answer, none a NOT_COORDINATOR for the request."""
    broker = BrokerProcess(tmp_path / "data", config={**BROKER_CONFIG, "num.processes": 2})
    broker.start()
    try:
        kadmin = new_kadmin(broker)
        create(kadmin, "spread-t", 1)
        produce(broker, "spread-t", {0: 1})
        groups = [f"spread-{i}" for i in range(6)]
        for group in groups[:4]:
            consume_and_commit(broker, group, "spread-t", 1)
        described = kadmin.describe_groups(groups)
        assert {g: (d["error"], d["group_state"]) for g, d in described.items()} == {
            **{g: (None, "Empty") for g in groups[:4]}, **{g: (None, "Dead") for g in groups[4:]}}
        assert kadmin.delete_groups(groups) == {
            **{g: "OK" for g in groups[:4]}, **{g: "GroupIdNotFoundError" for g in groups[4:]}}
        assert group_names(kadmin).isdisjoint(groups)
        # each named twice in kafka-python's own request, over coordinators of both
        # processes: one answer per group, each deleted once (Kafka takes the names
        # distinct), on whichever process takes the connection
        from kafka.protocol.admin.groups import DeleteGroupsRequest

        from tests.broker.test_groups import call

        for group in groups[:4]:
            consume_and_commit(broker, group, "spread-t", 1)
        answer = call(broker.bootstrap, DeleteGroupsRequest(
            groups_names=groups[:5] + groups[:5]), 2)
        assert [(r.group_id, r.error_code) for r in answer.results] == [
            *((g, 0) for g in groups[:4]), (groups[4], 69)]  # GROUP_ID_NOT_FOUND
        assert group_names(kadmin).isdisjoint(groups)
        kadmin.close()
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def test_offset_delete_spares_the_topics_a_live_group_reads(broker: BrokerProcess,
                                                            kadmin: KafkaAdminClient) -> None:
    create(kadmin, "read-now", 1)
    create(kadmin, "read-before", 2)
    produce(broker, "read-now", {0: 2})
    produce(broker, "read-before", {0: 2, 1: 2})
    consume_and_commit(broker, "shifting", "read-before", 4)
    live = consume_and_commit(broker, "shifting", "read-now", 2, close=False)
    try:
        out = kadmin.delete_group_offsets("shifting", [
            TopicPartition("read-now", 0), TopicPartition("read-before", 0),
            TopicPartition("gone-topic", 0)])
        assert out == {TopicPartition("read-now", 0): kerr.GroupSubscribedToTopicError,
                       TopicPartition("read-before", 0): kerr.NoError,
                       TopicPartition("gone-topic", 0): kerr.UnknownTopicOrPartitionError}
        committed = kadmin.list_group_offsets("shifting")["shifting"]
        assert TopicPartition("read-before", 0) not in committed
        assert committed[TopicPartition("read-before", 1)].offset == 2
        assert committed[TopicPartition("read-now", 0)].offset == 2
    finally:
        live.close()
    # once the group is empty, every offset may go
    out = kadmin.delete_group_offsets("shifting", [TopicPartition("read-now", 0)])
    assert out == {TopicPartition("read-now", 0): kerr.NoError}
    with pytest.raises(kerr.GroupIdNotFoundError):
        kadmin.delete_group_offsets("nobody", [TopicPartition("read-now", 0)])


def test_a_deleted_topics_offsets_go_so_a_namesake_is_read_from_its_start(
        own_broker: BrokerProcess, own_kadmin: KafkaAdminClient) -> None:
    """As Kafka's onPartitionsDeleted: DeleteTopics takes the topic's committed offsets
    from every group (tombstones, so a restart keeps them gone); a topic made again under
    the name is read where auto.offset.reset says, not from the old topic's offset."""
    create(own_kadmin, "reborn", 1)
    produce(own_broker, "reborn", {0: 10})
    consume_and_commit(own_broker, "rebirth", "reborn", 10)
    assert own_kadmin.list_group_offsets("rebirth")["rebirth"][TopicPartition("reborn", 0)]\
        .offset == 10
    own_kadmin.delete_topics(["reborn"])
    wait_until(lambda: TopicPartition("reborn", 0)
               not in own_kadmin.list_group_offsets("rebirth")["rebirth"], "the offsets to go")
    own_broker.stop()
    own_broker.start()
    again = new_kadmin(own_broker)
    try:
        assert TopicPartition("reborn", 0) not in again.list_group_offsets("rebirth")["rebirth"]
        create(again, "reborn", 1)
        produce(own_broker, "reborn", {0: 30})
        consumer = Consumer({"bootstrap.servers": own_broker.bootstrap, "group.id": "rebirth",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["reborn"])
        offsets: list[int] = []
        deadline = time.monotonic() + 60
        while len(offsets) < 30 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                offsets.append(msg.offset())
        consumer.close()
        assert offsets == list(range(30))
    finally:
        again.close()


# ------------------------------------------------ DescribeLogDirs, DescribeTopicPartitions


def test_describe_log_dirs_reports_partition_sizes(broker: BrokerProcess,
                                                   kadmin: KafkaAdminClient) -> None:
    create(kadmin, "sized", 2)
    produce(broker, "sized", {0: 10}, size=1000)
    # the group coordinator creates __consumer_offsets once the broker is up, not
    # before it answers: ask again until it is there
    deadline = time.monotonic() + 20
    while True:
        [entry] = kadmin.describe_log_dirs()
        [log_dir] = entry["log_dirs"]
        sizes = {(t["name"], p["partition_index"]): p["partition_size"]
                 for t in log_dir["topics"] for p in t["partitions"]}
        if ("__consumer_offsets", 0) in sizes or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == str(broker.data_dir)
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    on_disk = sum(f.stat().st_size for f in segments(broker, "sized", 0))
    assert sizes[("sized", 0)] == on_disk >= 10_000
    assert sizes[("sized", 1)] == 0
    assert ("__consumer_offsets", 0) in sizes
    [only] = kadmin.describe_log_dirs(topic_partitions={"sized": [1]})
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in only["log_dirs"][0]["topics"]] == [("sized", [1])]


def test_describe_topic_partitions_pages_with_a_cursor(broker: BrokerProcess,
                                                       kadmin: KafkaAdminClient) -> None:
    create(kadmin, "paged-a", 3)
    create(kadmin, "paged-b", 2)
    first = kadmin.describe_topic_partitions(["paged-b", "paged-a", "paged-none"],
                                             response_partition_limit=2)
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in first["topics"]] == [("paged-a", [0, 1])]
    assert first["next_cursor"] == {"topic_name": "paged-a", "partition_index": 2}
    rest = kadmin.describe_topic_partitions(["paged-b", "paged-a", "paged-none"],
                                            response_partition_limit=10,
                                            cursor=first["next_cursor"])
    assert [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
            for t in rest["topics"]] == [("paged-a", 0, [2]), ("paged-b", 0, [0, 1]),
                                         ("paged-none", 3, [])]
    assert rest["next_cursor"] is None
    [part] = rest["topics"][1]["partitions"][:1]
    assert part["leader_id"] == 1 and part["replica_nodes"] == [1] and part["isr_nodes"] == [1]


def test_describe_topic_partitions_answers_the_topic_authorized_operations(
        kadmin: KafkaAdminClient) -> None:
    """Kafka's DescribeTopicPartitionsRequestHandler sets topic_authorized_operations on
    every row it answers, an unknown topic's too (the request has no include flag); no
    authorizer: every operation a topic supports."""
    create(kadmin, "opsdesc", 1)
    got = kadmin.describe_topic_partitions(["opsdesc", "opsdesc-none"])
    # READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, as
    # Kafka's 32-bit field (kafka-python reads this schema's field as a plain int32)
    topic_ops = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
    assert {t["name"]: (t["error_code"], t["topic_authorized_operations"])
            for t in got["topics"]} == {"opsdesc": (0, topic_ops),
                                        "opsdesc-none": (3, topic_ops)}


def test_only_the_coordinators_topics_are_internal(broker: BrokerProcess,
                                                   kadmin: KafkaAdminClient) -> None:
    """Kafka's Topic.isInternal: __consumer_offsets and __transaction_state, not every
    name that starts with "__" (a user may make "__mine"; Topic.validate allows it)."""
    create(kadmin, "__mine", 1)
    wait_until(lambda: partition_count(kadmin, "__mine") == 1, "__mine to exist")
    wait_until(lambda: "__consumer_offsets" in kadmin.list_topics(), "__consumer_offsets")
    described = {t["name"]: t["is_internal"]
                 for t in kadmin.describe_topics(["__mine", "__consumer_offsets"])}
    assert described == {"__mine": False, "__consumer_offsets": True}
    paged = kadmin.describe_topic_partitions(["__mine", "__consumer_offsets"])
    assert {t["name"]: t["is_internal"] for t in paged["topics"]} == {
        "__mine": False, "__consumer_offsets": True}


# ------------------------------------------------------- partition reassignments


def test_a_single_node_answers_reassignments_as_its_only_broker(
        broker: BrokerProcess, kadmin: KafkaAdminClient) -> None:
    """No cluster, one broker: a move to it is done already, any other set is refused
    INVALID_REPLICA_ASSIGNMENT, there is never a reassignment to cancel or list."""
    create(kadmin, "placed", 2)
    wait_until(lambda: partition_count(kadmin, "placed") == 2, "placed to exist")
    me = kadmin.describe_cluster()["brokers"][0]["broker_id"]
    answer = kadmin.alter_partition_reassignments({
        TopicPartition("placed", 0): [me],
        TopicPartition("placed", 1): [me, me + 1],
        TopicPartition("placed", 7): [me],
        TopicPartition("nope", 0): [me]})
    assert answer == {
        TopicPartition("placed", 0): None,
        TopicPartition("placed", 1): kerr.InvalidReplicationAssignmentError,
        TopicPartition("placed", 7): kerr.UnknownTopicOrPartitionError,
        TopicPartition("nope", 0): kerr.UnknownTopicOrPartitionError}
    answer = kadmin.alter_partition_reassignments({TopicPartition("placed", 0): None})
    assert answer == {TopicPartition("placed", 0): kerr.NoReassignmentInProgressError}
    assert kadmin.list_partition_reassignments() == {}
    assert kadmin.list_partition_reassignments([TopicPartition("placed", 0)]) == {}


# ------------------------------------------------------- topic name rules


def test_a_name_colliding_through_dot_and_underscore_is_refused(
        broker: BrokerProcess, cadmin: AdminClient) -> None:
    """Kafka's AdminZkClient.validateTopicCreate: a name equal to an existing topic's once
    '.' and '_' are taken as one is INVALID_TOPIC_EXCEPTION naming that topic; the topics
    of one request are made one by one (the second of a colliding pair is refused), and a
    Metadata auto-create (kafka-python's KafkaProducer asks one) is refused alike."""
    result(cadmin.create_topics([CNewTopic("clash.a", 1, 1)]))
    err = error_of(cadmin.create_topics([CNewTopic("clash_a", 1, 1)])["clash_a"])
    assert err.code() == kerr.InvalidTopicError.errno
    assert "collides with existing topics: clash.a" in err.str()
    pair = cadmin.create_topics([CNewTopic("pair_b", 1, 1), CNewTopic("pair.b", 1, 1)])
    pair["pair_b"].result(timeout=30)
    assert error_of(pair["pair.b"]).code() == kerr.InvalidTopicError.errno
    # the same name again is still TOPIC_ALREADY_EXISTS, not a collision with itself
    again = error_of(cadmin.create_topics([CNewTopic("clash.a", 1, 1)])["clash.a"])
    assert again.code() == kerr.TopicAlreadyExistsError.errno
    # auto-create through Metadata (kafka-python's protocol, as its clients ask it)
    with RawClient(broker.port) as raw:
        response = raw.call(METADATA, 12, {
            "topics": [{"topic_id": None, "name": "clash_a"}],
            "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
    [row] = response.topics
    assert row.error_code == kerr.InvalidTopicError.errno
    topics = cadmin.list_topics(timeout=30).topics
    assert "clash_a" not in topics and "pair.b" not in topics


def test_an_internal_topic_is_made_only_with_its_coordinators_partition_count(
        broker: BrokerProcess, cadmin: AdminClient) -> None:
    """A client may create __transaction_state before its coordinator does (Kafka lets it),
    but only with transaction.state.log.num.partitions partitions (50 here): the
    coordinator maps transactional ids over that count, so with fewer some would go to a
    partition that does not exist. Nor may __consumer_offsets grow (CreatePartitions)."""
    err = error_of(cadmin.create_topics(
        [CNewTopic("__transaction_state", 3, 1)])["__transaction_state"])
    assert err.code() == kerr.InvalidPartitionsError.errno
    assert "transaction.state.log.num.partitions=50" in err.str()
    # the default count (num.partitions, 1) is another count too
    default = error_of(cadmin.create_topics(
        [CNewTopic("__transaction_state")])["__transaction_state"])
    assert default.code() == kerr.InvalidPartitionsError.errno
    cadmin.create_topics([CNewTopic("__transaction_state", 50, 1)],
                         validate_only=True)["__transaction_state"].result(timeout=30)
    # a user's name colliding with an internal topic's, before that topic exists: its
    # coordinator's creation would collide with it
    clash = error_of(cadmin.create_topics(
        [CNewTopic("__transaction.state", 1, 1)])["__transaction.state"])
    assert clash.code() == kerr.InvalidTopicError.errno
    assert "collides with existing topics: __transaction_state" in clash.str()
    assert "__transaction_state" not in cadmin.list_topics(timeout=30).topics
    wait_until(lambda: "__consumer_offsets" in cadmin.list_topics(timeout=30).topics,
               "__consumer_offsets")
    grow = error_of(cadmin.create_partitions(
        [NewPartitions("__consumer_offsets", 8)])["__consumer_offsets"])
    assert grow.code() == kerr.InvalidPartitionsError.errno
    assert len(cadmin.list_topics(timeout=30).topics["__consumer_offsets"].partitions) == 4


def produce_at(bootstrap: str, topic: str, stamps: list[int]) -> None:
    """One record per batch at each given CreateTime timestamp, every delivery checked."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "batch.num.messages": 1})
    errors: list[Any] = []
    for stamp in stamps:
        producer.produce(topic, b"v", partition=0, timestamp=stamp,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]


def test_max_timestamp_answers_a_record_below_the_log_start_while_its_segment_is_held(
        broker: BrokerProcess, cadmin: AdminClient) -> None:
    """ListOffsets -3 (v7): Kafka's UnifiedLog.fetchOffsetByTimestamp takes the largest
    timestamp of every segment held and answers its record, a record below the log start
    (DeleteRecords within that segment) too; it answered (-1, -1)."""
    result(cadmin.create_topics([CNewTopic("maxts", 1, 1)]))
    now = int(time.time() * 1000)
    produce_at(broker.bootstrap, "maxts", [now + 5_000, now, now + 1_000])
    tp = CTopicPartition("maxts", 0)
    [deleted] = result(cadmin.delete_records([CTopicPartition("maxts", 0, 1)])).values()
    assert deleted.low_watermark == 1
    got = cadmin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    assert (got.offset, got.timestamp) == (0, now + 5_000)
    # the earliest still says where reading starts
    assert cadmin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=30).offset == 1


def test_create_partitions_answers_a_name_given_twice_once(
        broker: BrokerProcess, kadmin: KafkaAdminClient) -> None:
    """Kafka's CreatePartitions answers a name listed twice once, INVALID_REQUEST (its
    results are a map by name), an internal topic's too; the others go on."""
    from tests.broker.rawclient import RawClient

    create(kadmin, "twice-grow", 1)
    wait_until(lambda: "__consumer_offsets" in kadmin.list_topics(), "__consumer_offsets")
    with RawClient(broker.port) as client:
        grown = client.call(37, 1, {"topics": [
            {"name": "__consumer_offsets", "count": 8, "assignments": None},
            {"name": "twice-grow", "count": 2, "assignments": None},
            {"name": "__consumer_offsets", "count": 8, "assignments": None}],
            "timeout_ms": 30_000, "validate_only": False})
    assert sorted((r.name, r.error_code) for r in grown.results) == [
        ("__consumer_offsets", 42), ("twice-grow", 0)]  # INVALID_REQUEST
