"""Real clients against the real broker: kafka-python, confluent-kafka and kcat.

Each creates a 3-partition topic, produces 10,000 keyed records with
acks=all and headers, reads every partition back by assignment from the
earliest offset and checks every record, key, header and the per-partition
order. Compressed batches must come back as the client wrote them: the
broker stores client batches as they are, so a raw fetch still sees the
client's codec in the batch attributes.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterable

import pytest

from tests.broker.rawclient import RawClient, read_batches
from tests.fixtures.broker import BrokerProcess

pytestmark = [pytest.mark.clients, pytest.mark.num_processes(1, 2)]

COUNT = 10_000
PARTITIONS = 3
KCAT = "/usr/bin/kcat"
CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def key_of(i: int) -> bytes:
    return f"key-{i % 97}".encode()


def value_of(i: int) -> bytes:
    return f"value-{i:05d}-".encode() + bytes([i % 251]) * (i % 40)


def headers_of(i: int) -> list[tuple[str, bytes]]:
    return [("seq", str(i).encode()), ("parity", b"odd" if i % 2 else b"even")]


def check_records(got: dict[int, list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]]],
                  count: int, with_headers: bool = True) -> None:
    """got: partition -> [(offset, key, value, headers)] in the order read.

    Every record is there exactly once, with its key, value and headers;
    within a partition records appear in produce order at dense offsets from
    0, and one key always maps to one partition.
    """
    seen: dict[int, int] = {}
    partition_of_key: dict[bytes | None, int] = {}
    for partition, rows in got.items():
        offsets = [r[0] for r in rows]
        assert offsets == list(range(len(rows))), f"partition {partition}: offsets not dense"
        last = -1
        for offset, key, value, headers in rows:
            i = int(value.split(b"-")[1])
            assert i > last, f"partition {partition}: record {i} after {last} (offset {offset})"
            last = i
            assert i not in seen, f"record {i} read twice"
            seen[i] = partition
            assert value == value_of(i)
            assert key == key_of(i)
            if with_headers:
                assert headers == headers_of(i), f"record {i}: headers {headers}"
            assert partition_of_key.setdefault(key, partition) == partition
    assert sorted(seen) == list(range(count)), f"{count - len(seen)} record(s) missing"
    assert sorted(got) == list(range(PARTITIONS))
    assert all(got.values()), "a partition got no record"


def assert_stored_codec(broker: BrokerProcess, topic: str, codec: str) -> None:
    """The batches in the log are the client's, still compressed with its codec.

    Clients send a batch uncompressed when compressing does not make it
    smaller (kafka-python and librdkafka both do, for a small tail batch), so
    plain batches may sit beside the compressed ones; the codec must be there.
    """
    with RawClient(broker.port) as client:
        codecs = set()
        for p in range(PARTITIONS):
            part = client.fetch(topic, p, 0)
            assert part.error_code == 0
            codecs |= {b.compression_type for b in read_batches(part.records)}
    codecs.discard(0)
    assert codecs == {CODEC_IDS[codec]}


# ---------------------------------------------------------------- confluent


def confluent_produce(broker: BrokerProcess, topic: str, count: int,
                      compression: str = "none") -> None:
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "compression.type": compression, "linger.ms": 5,
                         "enable.idempotence": True, "message.timeout.ms": 30_000})

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value_of(i), key=key_of(i), headers=headers_of(i),
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0
    assert errors == []


def confluent_consume(broker: BrokerProcess, topic: str, count: int) -> dict[int, list]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        total = 0
        deadline = time.monotonic() + 30
        while total < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.offset(), msg.key(), msg.value(),
                                             msg.headers() or []))
                total += 1
    finally:
        consumer.close()
    return got


def test_confluent_kafka(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = topic_name("confluent")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=10)
    futures[topic].result(timeout=15)
    confluent_produce(broker, topic, COUNT)
    check_records(confluent_consume(broker, topic, COUNT), COUNT)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_compressed(broker: BrokerProcess, codec: str) -> None:
    topic = topic_name(f"confluent-{codec}")
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    confluent_produce(broker, topic, 2000, codec)
    check_records(confluent_consume(broker, topic, 2000), 2000)
    assert_stored_codec(broker, topic, codec)


# ------------------------------------------------------------- kafka-python


def kafka_python_produce(broker: BrokerProcess, topic: str, count: int,
                         compression: str | None = None) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                             compression_type=compression, linger_ms=5)
    try:
        futures = [producer.send(topic, key=key_of(i), value=value_of(i), headers=headers_of(i))
                   for i in range(count)]
        producer.flush(30)
        for f in futures:
            f.get(timeout=10)  # raises the produce error, if any
    finally:
        producer.close(timeout=10)


def kafka_python_consume(broker: BrokerProcess, topic: str, count: int) -> dict[int, list]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None)
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        total = 0
        deadline = time.monotonic() + 30
        while total < count and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=5000).items():
                for m in msgs:
                    got[tp.partition].append((m.offset, m.key, m.value, list(m.headers)))
                    total += 1
    finally:
        consumer.close()
    return got


def test_kafka_python(broker: BrokerProcess) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = topic_name("kafka-python")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()
    kafka_python_produce(broker, topic, COUNT)
    check_records(kafka_python_consume(broker, topic, COUNT), COUNT)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_compressed(broker: BrokerProcess, codec: str) -> None:
    topic = topic_name(f"kafka-python-{codec}")
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    kafka_python_produce(broker, topic, 1000, codec)
    check_records(kafka_python_consume(broker, topic, 1000), 1000)
    assert_stored_codec(broker, topic, codec)


# --------------------------------------------------------------------- kcat


def kcat(broker: BrokerProcess, args: Iterable[str], stdin: bytes | None = None) -> bytes:
    proc = subprocess.run([KCAT, "-b", broker.bootstrap, *args], input=stdin,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout


def kcat_round_trip(broker: BrokerProcess, topic: str, count: int, codec: str = "none") -> None:
    # kcat gives every record of a run the same headers (-H); value_of is
    # not line-safe, so kcat values are plain text and checked one by one.
    lines = b"".join(key_of(i) + b"\t" + b"value-%05d-kcat\n" % i for i in range(count))
    kcat(broker, ["-P", "-t", topic, "-K", "\t", "-z", codec, "-H", "src=kcat", "-H", "n=1",
                  "-X", "acks=all", "-X", "linger.ms=5"], lines)
    got: dict[int, list] = {}
    for p in range(PARTITIONS):
        out = kcat(broker, ["-C", "-t", topic, "-p", str(p), "-o", "beginning", "-e", "-q",
                            "-f", "%o|%k|%s|%h\n"])
        got[p] = []
        for line in out.splitlines():
            offset, key, value, headers = line.split(b"|")
            got[p].append((int(offset), key, value, headers))
    seen = set()
    for p, rows in got.items():
        assert [r[0] for r in rows] == list(range(len(rows)))
        indexes = [int(r[2].split(b"-")[1]) for r in rows]
        assert indexes == sorted(indexes), f"partition {p} out of order"
        for _offset, key, value, headers in rows:
            i = int(value.split(b"-")[1])
            assert value == b"value-%05d-kcat" % i
            assert key == key_of(i)
            assert headers == b"src=kcat,n=1"
            seen.add(i)
    assert seen == set(range(count))
    assert sum(len(r) for r in got.values()) == count
    assert all(got.values())


@pytest.mark.skipif(shutil.which(KCAT) is None, reason="kcat is not installed")
def test_kcat(broker: BrokerProcess) -> None:
    topic = topic_name("kcat")
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    kcat_round_trip(broker, topic, COUNT)


# Debian's kcat links librdkafka 2.0.2, which compresses with gzip, snappy or
# lz4 only when the broker offers Produce v2 / Fetch v2 (its "MsgVer1"
# feature); like Kafka 4.0, actorlog starts at Produce v3 and Fetch v4, so
# that kcat sends those batches uncompressed (it logs "Broker does not
# support compression type"). zstd depends on Produce v7 and does compress.
@pytest.mark.skipif(shutil.which(KCAT) is None, reason="kcat is not installed")
@pytest.mark.parametrize("codec", ["zstd"])
def test_kcat_compressed(broker: BrokerProcess, codec: str) -> None:
    topic = topic_name(f"kcat-{codec}")
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    kcat_round_trip(broker, topic, 1000, codec)
    assert_stored_codec(broker, topic, codec)


def test_large_records_round_trip(broker: BrokerProcess) -> None:
    """Records near message.max.bytes cross many socket reads and partial writes intact."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = topic_name("large")
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, 1) == 0
    values = [bytes([i]) * 900_000 + uuid.uuid4().bytes for i in range(6)]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "linger.ms": 0})
    for v in values:
        producer.produce(topic, value=v, key=v[-16:])
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for msg in consumer.consume(10, 0.5):
                assert msg.error() is None, msg.error()
                assert msg.key() == msg.value()[-16:]
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == values
