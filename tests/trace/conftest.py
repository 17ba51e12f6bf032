"""Traces from a real broker run, and one local Spark session for the analysis tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.conftest import BrokerProcess

PRODUCED = 12
TOPIC = "trace-test"


@pytest.fixture(scope="session")
def real_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A broker's data dir after kafka-python produced PRODUCED records and fetched them."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    base = tmp_path_factory.mktemp("traced")
    broker = BrokerProcess(base / "data", config={"trace.sample.ratio": 1.0}).start()
    try:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=0)
        for i in range(PRODUCED):
            producer.send(TOPIC, b"value-%d" % i, partition=0).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            consumer_timeout_ms=3000,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        for rec in consumer:
            got.append(rec.value)
            if len(got) == PRODUCED:
                break
        consumer.close()
        assert len(got) == PRODUCED
    finally:
        code = broker.stop()
    assert code == 0, broker.log()[-2000:]
    return base / "data"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from actors.trace.analyze import spark_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = spark_session("local[2]", shuffle_partitions=2)
    yield session
    session.stop()
