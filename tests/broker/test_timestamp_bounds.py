"""Timestamp bounds against a real broker, through the clients users run.

A CreateTime topic with message.timestamp.before.max.ms / after.max.ms (or the
deprecated message.timestamp.difference.max.ms) refuses a Produce whose
records lie too far from the broker's clock with INVALID_TIMESTAMP (32), the
refused records named in record_errors (Produce v8+); nothing of it is
appended, and the broker goes on serving. The configs are created, described
and altered like the other topic configs; the broker keys
(log.message.timestamp.*) are the topics' defaults.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors as kerr
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient, NewTopic

from actors.core.record_batch import build_batch
from tests.broker.rawclient import RawClient
from tests.fixtures.broker import BrokerProcess

pytestmark = [pytest.mark.clients, pytest.mark.multiprocess]

HOUR = 3_600_000
DAY = 24 * HOUR
INVALID_TIMESTAMP = 32
INVALID_CONFIG = 40
# The broker's defaults for every topic: two days back (before.max.ms), one hour ahead
# (difference.max.ms, which fills the side before.max.ms leaves unset).
BROKER_CONFIG = {
    "log.message.timestamp.before.max.ms": 2 * DAY,
    "log.message.timestamp.difference.max.ms": HOUR,
}
BOUNDED = {"message.timestamp.before.max.ms": str(HOUR),
           "message.timestamp.after.max.ms": str(60_000)}


@pytest.fixture(scope="module", params=[1, 2], ids=["processes1", "processes2"])
def broker(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Two processes too: a refusal's record_errors then cross between them (AppendDone)."""
    config = {**BROKER_CONFIG, "num.processes": request.param}
    b = BrokerProcess(tmp_path_factory.mktemp("tsbounds") / "data", config=config).start()
    yield b
    assert b.stop() == 0, b.log()[-3000:]


@pytest.fixture
def kadmin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20_000)
    yield client
    client.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def create(kadmin: KafkaAdminClient, name: str, configs: dict[str, str]) -> None:
    kadmin.create_topics([NewTopic(name, 1, 1, topic_configs=configs)])


def produce_confluent(broker: BrokerProcess, topic: str,
                      timestamps: list[int]) -> list[tuple[int | None, int]]:
    """One record per timestamp, each its own batch: (error code or None, offset)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "batch.num.messages": 1, "message.timeout.ms": 30_000,
                         "max.in.flight": 1})
    out: list[tuple[int | None, int]] = []

    def delivered(err: Any, msg: Any) -> None:
        out.append((None if err is None else err.code(), msg.offset()))

    for ts in timestamps:
        producer.produce(topic, b"v%d" % ts, timestamp=ts, on_delivery=delivered)
        assert producer.flush(30) == 0  # one at a time: the outcomes in order
    return out


def consumed(broker: BrokerProcess, topic: str) -> list[int]:
    """The timestamps of every record the partition holds."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    stamps = [m.timestamp for m in consumer]
    consumer.close()
    return stamps


def raw_produce(broker: BrokerProcess, topic: str, timestamps: list[int],
                version: int) -> Any:
    batch = build_batch([b"r%d" % i for i in range(len(timestamps))], timestamps_ms=timestamps)
    with RawClient(broker.port) as client:
        return client.produce(topic, 0, batch, acks=1, version=version)


# ------------------------------------------------------------------ producing


def test_confluent_producer_is_refused_out_of_bounds_and_served_within(
        broker: BrokerProcess, kadmin: KafkaAdminClient) -> None:
    create(kadmin, "bounded", BOUNDED)
    now = now_ms()
    outcomes = produce_confluent(broker, "bounded", [
        now - 2 * HOUR, now, now + HOUR, now - HOUR + 60_000, now + 30_000])
    assert [code for code, _offset in outcomes] == [
        KafkaError.INVALID_TIMESTAMP, None, KafkaError.INVALID_TIMESTAMP, None, None]
    assert [offset for code, offset in outcomes if code is None] == [0, 1, 2]
    # nothing of the refused batches is in the log
    assert consumed(broker, "bounded") == [now, now - HOUR + 60_000, now + 30_000]


def test_kafka_python_producer_gets_invalid_timestamp_error(
        broker: BrokerProcess, kadmin: KafkaAdminClient) -> None:
    create(kadmin, "bounded-kp", BOUNDED)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, linger_ms=0)
    try:
        with pytest.raises(kerr.InvalidTimestampError):
            producer.send("bounded-kp", b"old", timestamp_ms=now_ms() - DAY).get(timeout=30)
        with pytest.raises(kerr.InvalidTimestampError):
            producer.send("bounded-kp", b"ahead", timestamp_ms=now_ms() + DAY).get(timeout=30)
        meta = producer.send("bounded-kp", b"now", timestamp_ms=now_ms()).get(timeout=30)
        assert meta.offset == 0
    finally:
        producer.close(timeout=10)


@pytest.mark.parametrize("version", [3, 7, 8, 9])
def test_produce_answer_names_the_refused_records(broker: BrokerProcess,
                                                  kadmin: KafkaAdminClient,
                                                  version: int) -> None:
    topic = f"named-{version}"
    create(kadmin, topic, BOUNDED)
    now = now_ms()
    # the second record is older than the first (signed deltas): the batch header's first
    # and max timestamps are in bounds, the record is not
    part = raw_produce(broker, topic, [now, now - 3 * HOUR, now + 10, now + 2 * HOUR], version)
    assert part.error_code == INVALID_TIMESTAMP and part.base_offset == -1
    if version >= 8:
        assert [e.batch_index for e in part.record_errors] == [1, 3]
        assert f"timestamp {now - 3 * HOUR} of the record at index 1 is out of range" in \
            part.record_errors[0].batch_index_error_message
        assert part.error_message.startswith("2 of 4 records refused for their timestamps")
    assert raw_produce(broker, topic, [now_ms()], version).base_offset == 0


def test_log_append_time_topics_take_any_timestamp(broker: BrokerProcess,
                                                   kadmin: KafkaAdminClient) -> None:
    create(kadmin, "appended", {"message.timestamp.type": "LogAppendTime", **BOUNDED})
    outcomes = produce_confluent(broker, "appended", [1000, now_ms() + DAY])
    assert outcomes == [(None, 0), (None, 1)]
    assert all(ts >= now_ms() - 60_000 for ts in consumed(broker, "appended"))


def test_a_client_log_append_time_stamp_on_a_create_time_topic_is_stored_create_time(
        broker: BrokerProcess, kadmin: KafkaAdminClient) -> None:
    """The timestamp type is the topic's: a Produce batch with the LogAppendTime bit on a
    CreateTime topic is stored CreateTime, as Kafka's LogValidator rewrites it (it was
    stored as sent, so consumers read every record with the batch's max timestamp as a
    LogAppendTime)."""
    create(kadmin, "stamped", {})
    now = now_ms()
    stamps = [now - 3000, now - 2000, now - 1000]
    batch = build_batch([b"s0", b"s1", b"s2"], timestamps_ms=stamps, attributes=0x08)
    with RawClient(broker.port) as client:
        part = client.produce("stamped", 0, batch, acks=1, version=8)
    assert (part.error_code, part.base_offset, part.log_append_time_ms) == (0, 0, -1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stamped-reader",
                         "enable.auto.commit": False})
    try:
        consumer.assign([CTopicPartition("stamped", 0, 0)])
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while len(got) < len(stamps) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.timestamp())
    finally:
        consumer.close()
    assert got == [(TIMESTAMP_CREATE_TIME, ts) for ts in stamps]


def test_broker_keys_are_the_topics_defaults(broker: BrokerProcess,
                                             kadmin: KafkaAdminClient) -> None:
    """log.message.timestamp.before.max.ms (2 days) and, for the side it leaves unset,
    log.message.timestamp.difference.max.ms (1 hour)."""
    create(kadmin, "defaults", {})
    now = now_ms()
    outcomes = produce_confluent(broker, "defaults", [
        now - DAY, now - 3 * DAY, now + 30 * 60_000, now + 2 * HOUR])
    assert [code for code, _offset in outcomes] == [
        None, KafkaError.INVALID_TIMESTAMP, None, KafkaError.INVALID_TIMESTAMP]
    # the topic's difference.max.ms at Long.MAX_VALUE does not undo the broker's bounds
    # (Kafka resolves the broker's default of each side first) ...
    create(kadmin, "still-bounded", {"message.timestamp.difference.max.ms": str(2**63 - 1)})
    assert [c for c, _o in produce_confluent(broker, "still-bounded", [
        now_ms() - 3 * DAY, now_ms() + 2 * HOUR])] == [KafkaError.INVALID_TIMESTAMP] * 2
    # ... nor does each side set to it alone (it gives way to the topic's difference, which
    # is the broker's hour); all three on the topic do
    create(kadmin, "unbounded", {"message.timestamp.before.max.ms": str(2**63 - 1),
                                 "message.timestamp.after.max.ms": str(2**63 - 1),
                                 "message.timestamp.difference.max.ms": str(2**63 - 1)})
    assert produce_confluent(broker, "unbounded", [1000, now_ms() + 400 * DAY]) == [
        (None, 0), (None, 1)]


def test_the_after_key_alone(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data",
                      config={"log.message.timestamp.after.max.ms": 60_000}).start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)
        create(admin, "ahead", {})
        admin.close()
        now = now_ms()
        outcomes = produce_confluent(b, "ahead", [1000, now + 10 * 60_000, now])
        assert [code for code, _offset in outcomes] == [
            None, KafkaError.INVALID_TIMESTAMP, None]
        cadmin = AdminClient({"bootstrap.servers": b.bootstrap})
        entries = describe(cadmin, "ahead")
        assert entries["message.timestamp.after.max.ms"].value == "60000"
        assert entries["message.timestamp.after.max.ms"].source == \
            ConfigSource.STATIC_BROKER_CONFIG.value
        # with no broker bound back in time, a topic's difference.max.ms gives it one
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)
        create(admin, "near", {"message.timestamp.difference.max.ms": str(HOUR)})
        admin.close()
        now = now_ms()
        outcomes = produce_confluent(b, "near", [now - 2 * HOUR, now - 30 * 60_000,
                                                 now + 2 * 60_000])
        assert [code for code, _offset in outcomes] == [
            KafkaError.INVALID_TIMESTAMP, None, KafkaError.INVALID_TIMESTAMP]
    finally:
        assert b.stop() == 0, b.log()[-3000:]


# ------------------------------------------------------------------ the configs


def describe(cadmin: AdminClient, topic: str) -> dict[str, Any]:
    [future] = cadmin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return dict(future.result(timeout=30))


def test_configs_are_described_altered_and_take_effect(broker: BrokerProcess,
                                                        kadmin: KafkaAdminClient) -> None:
    cadmin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create(kadmin, "tunable", {})
    entries = describe(cadmin, "tunable")
    assert entries["message.timestamp.before.max.ms"].value == str(2 * DAY)
    assert entries["message.timestamp.before.max.ms"].source == \
        ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["message.timestamp.after.max.ms"].value == str(2**63 - 1)
    assert entries["message.timestamp.after.max.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    described = kadmin.describe_configs(
        [KConfigResource(ConfigResourceType.TOPIC, "tunable")], config_filter="all")
    types = {n: v["config_type"] for n, v in described["topic"]["tunable"].items()}
    assert {types[f"message.timestamp.{s}.max.ms"] for s in ("before", "after", "difference")} \
        == {"LONG"}
    brokers = kadmin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "1")],
                                      config_filter="all")["broker"]["1"]
    assert brokers["log.message.timestamp.difference.max.ms"]["value"] == str(HOUR)
    assert brokers["log.message.timestamp.difference.max.ms"]["config_source"] == \
        "STATIC_BROKER_CONFIG"

    # IncrementalAlterConfigs SET: the live log refuses at once
    res = ConfigResource(ResourceType.TOPIC, "tunable", incremental_configs=[
        ConfigEntry("message.timestamp.before.max.ms", "60000",
                    incremental_operation=AlterConfigOpType.SET)])
    [future] = cadmin.incremental_alter_configs([res]).values()
    assert future.result(timeout=30) is None
    assert describe(cadmin, "tunable")["message.timestamp.before.max.ms"].value == "60000"
    assert [c for c, _o in produce_confluent(broker, "tunable", [now_ms() - HOUR])] == [
        KafkaError.INVALID_TIMESTAMP]
    # DELETE: back to the broker's two days
    res = ConfigResource(ResourceType.TOPIC, "tunable", incremental_configs=[
        ConfigEntry("message.timestamp.before.max.ms", None,
                    incremental_operation=AlterConfigOpType.DELETE)])
    [future] = cadmin.incremental_alter_configs([res]).values()
    assert future.result(timeout=30) is None
    assert produce_confluent(broker, "tunable", [now_ms() - HOUR]) == [(None, 0)]
    # AlterConfigs (kafka-python): after.max.ms from the broker's hour down to a second
    assert kadmin.alter_configs([KConfigResource(
        ConfigResourceType.TOPIC, "tunable",
        {"message.timestamp.after.max.ms": "1000"})]) == {"topic": {"tunable": "OK"}}
    assert [c for c, _o in produce_confluent(broker, "tunable", [
        now_ms() - HOUR, now_ms() + 10 * 60_000])] == [None, KafkaError.INVALID_TIMESTAMP]


@pytest.mark.parametrize(("value", "why"), [
    ("-1", "message.timestamp.after.max.ms = -1 is out of range"),
    ("soon", "message.timestamp.after.max.ms must be an integer, got 'soon'"),
    (str(2**63), "out of range"),
])
def test_bad_values_are_invalid_config(broker: BrokerProcess, kadmin: KafkaAdminClient,
                                       value: str, why: str) -> None:
    with RawClient(broker.port) as client:
        response = client.call(19, 7, {
            "topics": [{"name": "refused", "num_partitions": 1, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": "message.timestamp.after.max.ms",
                                     "value": value}]}],
            "timeout_ms": 10_000, "validate_only": False})
    [topic] = response.topics
    assert topic.error_code == INVALID_CONFIG and why in topic.error_message
    assert "refused" not in kadmin.list_topics()
    create(kadmin, f"kept-{len(value)}", {})
    out = kadmin.alter_configs([KConfigResource(
        ConfigResourceType.TOPIC, f"kept-{len(value)}",
        {"message.timestamp.after.max.ms": value})])
    assert "InvalidConfigurationError" in out["topic"][f"kept-{len(value)}"]
    assert why in out["topic"][f"kept-{len(value)}"]
