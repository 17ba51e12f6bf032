"""compression.type against a real broker, through the clients users run.

A topic whose compression.type names a codec stores every client batch with that
codec: the leader re-encodes a batch of another codec (confluent-kafka's producer
with gzip, snappy, lz4 or zstd), and a consumer reads back the same records,
keys, headers, timestamps and offsets. ``producer`` (the default) keeps each
batch's own codec. The key is created, described (with the broker key as its
synonym) and altered like the other topic configs, and a bad value is
INVALID_CONFIG; a zstd topic refuses a Fetch older than v10.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.broker.rawclient import DESCRIBE_CONFIGS, RawClient, read_batches
from tests.fixtures.broker import BrokerProcess

pytestmark = [pytest.mark.clients, pytest.mark.multiprocess]

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
UNSUPPORTED_COMPRESSION_TYPE = 76
# the broker's default for topics that set none
BROKER_DEFAULT = "snappy"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("compression") / "data",
                      config={"compression.type": BROKER_DEFAULT}).start()
    yield b
    assert b.stop() == 0, b.log()[-3000:]


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(admin: AdminClient, name: str, configs: dict[str, str]) -> None:
    [future] = admin.create_topics([NewTopic(name, 1, 1, config=configs)],
                                   operation_timeout=20).values()
    future.result(30)


def produce(broker: BrokerProcess, topic: str, codec: str, count: int,
            **extra: Any) -> list[tuple[bytes, bytes, int, list[tuple[str, bytes]]]]:
    """``count`` records in one batch with the producer's ``codec``: (key, value,
    timestamp, headers) of each, in order."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                         "linger.ms": 200, "batch.num.messages": 10_000,
                         "message.timeout.ms": 30_000, **extra})
    base = int(time.time() * 1000) - 60_000
    sent = []
    errors: list[Any] = []
    for i in range(count):
        key, value = b"key-%d" % i, (b"value %d " % i) * 20
        headers = [("n", b"%d" % i), ("codec", codec.encode())]
        timestamp = base + (i * 37) % 101  # not in order: deltas of both signs
        producer.produce(topic, value, key, headers=headers, timestamp=timestamp,
                         on_delivery=lambda err, _msg: err and errors.append(err))
        sent.append((key, value, timestamp, headers))
    assert producer.flush(30) == 0
    assert errors == []
    return sent


def consume(broker: BrokerProcess, topic: str,
            count: int) -> list[tuple[int, bytes, bytes, int, list[tuple[str, bytes]]]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1],
                        msg.headers()))
    finally:
        consumer.close()
    return out


def runs(codecs: list[int]) -> list[int]:
    """The codecs in order, a run of batches in one codec as one: under load the client
    may send one produce's records as more batches than one."""
    return [c for i, c in enumerate(codecs) if i == 0 or codecs[i - 1] != c]


def stored_codecs(broker: BrokerProcess, topic: str, version: int = 11) -> list[int]:
    """The codec attribute of every batch the partition holds, read by a raw Fetch."""
    with RawClient(broker.port) as client:
        part = client.fetch(topic, 0, 0, max_bytes=8 << 20, version=version)
    assert part.error_code == 0
    return [batch.compression_type for batch in read_batches(part.records)]


@pytest.mark.parametrize(("source", "target"), [
    ("gzip", "lz4"), ("lz4", "zstd"), ("zstd", "gzip"), ("snappy", "uncompressed"),
    ("none", "snappy"), ("gzip", "zstd"),
])
def test_a_producers_batches_are_stored_with_the_topics_codec(
        broker: BrokerProcess, admin: AdminClient, source: str, target: str) -> None:
    topic = f"to-{target}-from-{source}"
    create(admin, topic, {"compression.type": target})
    sent = produce(broker, topic, source, 200) + produce(broker, topic, source, 50)
    got = consume(broker, topic, len(sent))
    assert [(o, k, v, ts, h) for o, k, v, ts, h in got] == [
        (i, k, v, ts, h) for i, (k, v, ts, h) in enumerate(sent)]
    codecs = stored_codecs(broker, topic)
    assert codecs and set(codecs) == {CODECS[target]}


def test_producer_keeps_each_batchs_codec(broker: BrokerProcess, admin: AdminClient) -> None:
    create(admin, "as-sent", {"compression.type": "producer"})
    sent = []
    for codec in ("lz4", "none", "zstd", "gzip", "snappy"):
        sent += produce(broker, "as-sent", codec, 20)
    assert runs(stored_codecs(broker, "as-sent")) == [3, 0, 4, 1, 2]
    assert [(k, v) for _o, k, v, _t, _h in consume(broker, "as-sent", len(sent))] == [
        (k, v) for k, v, _t, _h in sent]


def test_the_broker_key_is_the_topics_default(broker: BrokerProcess,
                                              admin: AdminClient) -> None:
    create(admin, "by-default", {})
    produce(broker, "by-default", "gzip", 30)
    assert runs(stored_codecs(broker, "by-default")) == [CODECS[BROKER_DEFAULT]]


def test_an_idempotent_producer_keeps_its_sequences(broker: BrokerProcess,
                                                    admin: AdminClient) -> None:
    create(admin, "idempotent", {"compression.type": "zstd"})
    sent = []
    for _ in range(3):
        sent += produce(broker, "idempotent", "lz4", 40, **{"enable.idempotence": True})
    got = consume(broker, "idempotent", len(sent))
    assert [o for o, *_rest in got] == list(range(len(sent)))
    assert set(stored_codecs(broker, "idempotent")) == {4}


def test_a_transaction_is_re_encoded_and_committed(broker: BrokerProcess,
                                                   admin: AdminClient) -> None:
    create(admin, "in-txn", {"compression.type": "gzip"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4",
                         "transactional.id": "compress-txn", "linger.ms": 50})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(25):
        producer.produce("in-txn", b"t%d" % i, b"k%d" % i)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-in-txn",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["in-txn"])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 25 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    assert values == [b"t%d" % i for i in range(25)]
    # the records' batch is gzip now; the commit marker stays the uncompressed control batch
    assert stored_codecs(broker, "in-txn")[-1] == 0
    assert set(stored_codecs(broker, "in-txn")[:-1]) == {1}


def test_a_zstd_topic_refuses_a_fetch_older_than_v10(broker: BrokerProcess,
                                                     admin: AdminClient) -> None:
    create(admin, "zstd-old-fetch", {"compression.type": "zstd"})
    produce(broker, "zstd-old-fetch", "gzip", 5)
    with RawClient(broker.port) as client:
        assert client.fetch("zstd-old-fetch", 0, 0, version=9).error_code == \
            UNSUPPORTED_COMPRESSION_TYPE
        assert client.fetch("zstd-old-fetch", 0, 0, version=10).error_code == 0
    create(admin, "lz4-old-fetch", {"compression.type": "lz4"})
    produce(broker, "lz4-old-fetch", "gzip", 5)
    with RawClient(broker.port) as client:
        assert client.fetch("lz4-old-fetch", 0, 0, version=9).error_code == 0


# ----------------------------------------------------------------------- the config


def described(admin: AdminClient, topic: str) -> ConfigEntry:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    [future] = admin.describe_configs([resource]).values()
    return future.result(30)["compression.type"]


def test_the_config_is_described_with_its_synonyms(broker: BrokerProcess,
                                                   admin: AdminClient) -> None:
    create(admin, "described", {"compression.type": "lz4"})
    entry = described(admin, "described")
    assert entry.value == "lz4" and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # the client keys synonyms by name (the three have one): the raw answer lists them all
    with RawClient(broker.port) as client:
        response = client.call(DESCRIBE_CONFIGS, 4, {
            "resources": [{"resource_type": 2, "resource_name": "described",
                           "configuration_keys": ["compression.type"]}],
            "include_synonyms": True, "include_documentation": False})
    [config] = response.results[0].configs
    assert [(s.name, s.value, s.source) for s in config.synonyms] == [
        ("compression.type", "lz4", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("compression.type", BROKER_DEFAULT, ConfigSource.STATIC_BROKER_CONFIG.value),
        ("compression.type", "producer", ConfigSource.DEFAULT_CONFIG.value)]
    create(admin, "described-default", {})
    entry = described(admin, "described-default")
    assert entry.value == BROKER_DEFAULT
    assert entry.source == ConfigSource.STATIC_BROKER_CONFIG.value
    broker_entry = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
    [future] = broker_entry.values()
    assert future.result(30)["compression.type"].value == BROKER_DEFAULT


def test_a_bad_value_is_invalid_config(broker: BrokerProcess, admin: AdminClient) -> None:
    with pytest.raises(KafkaException) as caught:
        create(admin, "bad-codec", {"compression.type": "brotli"})
    assert caught.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "compression.type must be one of" in caught.value.args[0].str()
    create(admin, "altered", {"compression.type": "gzip"})
    resource = ConfigResource(ResourceType.TOPIC, "altered", incremental_configs=[
        ConfigEntry("compression.type", "deflate",
                    incremental_operation=AlterConfigOpType.SET)])
    [future] = admin.incremental_alter_configs([resource]).values()
    with pytest.raises(KafkaException) as caught:
        future.result(30)
    assert caught.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert described(admin, "altered").value == "gzip"  # unchanged


def test_an_altered_codec_applies_to_the_next_batches(broker: BrokerProcess,
                                                      admin: AdminClient) -> None:
    create(admin, "switched", {"compression.type": "gzip"})
    produce(broker, "switched", "lz4", 10)
    resource = ConfigResource(ResourceType.TOPIC, "switched", incremental_configs=[
        ConfigEntry("compression.type", "zstd", incremental_operation=AlterConfigOpType.SET)])
    [future] = admin.incremental_alter_configs([resource]).values()
    future.result(30)
    produce(broker, "switched", "lz4", 10)
    assert runs(stored_codecs(broker, "switched")) == [1, 4]
    assert len(consume(broker, "switched", 20)) == 20


@pytest.mark.parametrize("target", ["gzip", "zstd"])
def test_offsets_for_times_finds_the_record_in_a_compressed_batch(
        broker: BrokerProcess, admin: AdminClient, target: str) -> None:
    """ListOffsets by time answers the first record at or after the time, with its own
    timestamp, inside a batch the topic's codec compressed (Kafka's searchForTimestamp
    reads the batch's records); not the batch's first offset and max timestamp."""
    topic = f"times-{target}"
    create(admin, topic, {"compression.type": target})
    sent = produce(broker, topic, "none", 60)
    assert set(stored_codecs(broker, topic)) == {CODECS[target]}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"t-{topic}"})
    try:
        for target_ms in sorted({ts for _k, _v, ts, _h in sent})[1::7]:
            want = next((i, ts) for i, (_k, _v, ts, _h) in enumerate(sent) if ts >= target_ms)
            [found] = consumer.offsets_for_times([TopicPartition(topic, 0, target_ms)],
                                                 timeout=20)
            assert found.error is None
            assert found.offset == want[0], (target_ms, want)
    finally:
        consumer.close()
    with RawClient(broker.port) as client:
        middle = sorted({ts for _k, _v, ts, _h in sent})[50]
        part = client.list_offset(topic, 0, middle)
    want = next((i, ts) for i, (_k, _v, ts, _h) in enumerate(sent) if ts >= middle)
    assert (part.offset, part.timestamp) == want
