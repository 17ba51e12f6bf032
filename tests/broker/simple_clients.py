"""Small confluent-kafka helpers: produce a list of values, read a topic back from the start."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def produce(bootstrap: str, topic: str, values: list[bytes], timeout_s: float = 30.0) -> None:
    """Produce with acks=all and wait until every value is acknowledged."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": int(timeout_s * 1000)})

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for value in values:
        producer.produce(topic, value, on_delivery=on_delivery)
    left = producer.flush(timeout_s)
    if left or errors:
        raise KafkaException(f"{left} unacknowledged, errors: {errors[:3]}")


def consume_all(bootstrap: str, topic: str, count: int, timeout_s: float = 30.0,
                assign: bool = False) -> list[bytes]:
    """The first ``count`` values of partition 0 of ``topic``, read from the start.

    Through a consumer group, or with ``assign`` straight from partition 0 (no group
    coordinator, so no __consumer_offsets is needed).
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    if assign:
        consumer.assign([TopicPartition(topic, 0, 0)])
    else:
        consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            got.append(bytes(msg.value()))
    finally:
        consumer.close()
    return got
