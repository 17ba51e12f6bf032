"""Fetch waits in the purgatory: until min_bytes are there or max_wait_ms passes.

Timing: a wait is asserted to have lasted (elapsed >= max_wait - slack); an
early completion is asserted to be far below max_wait. Upper bounds are
generous: the machine is shared and loaded.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.broker.rawclient import FETCH, RawClient, fetch_values, read_records, record_batch
from tests.fixtures.broker import BrokerProcess

SLACK_S = 0.05


pytestmark = pytest.mark.num_processes(1, 2)


def new_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    name = f"wait-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as client:
        assert client.create_topic(name, partitions) == 0
    return name


def produce_later(broker: BrokerProcess, topic: str, partition: int, batch: bytes,
                  delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        with RawClient(broker.port) as client:
            assert client.produce(topic, partition, batch, acks=1).error_code == 0

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_fetch_waits_max_wait_and_returns_what_is_there(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    with RawClient(broker.port) as client:
        assert client.produce(topic, 0, record_batch([(b"k", b"small")])).error_code == 0
        t0 = time.monotonic()
        part = client.fetch(topic, 0, 0, max_wait_ms=800, min_bytes=100_000)
        elapsed = time.monotonic() - t0
    assert elapsed >= 0.8 - SLACK_S, f"returned after {elapsed:.3f} s"
    assert elapsed < 10
    assert part.error_code == 0
    assert part.high_watermark == 1
    assert read_records(part.records) == [(0, b"k", b"small")]


def test_fetch_at_log_end_waits_then_returns_empty(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    with RawClient(broker.port) as client:
        t0 = time.monotonic()
        part = client.fetch(topic, 0, 0, max_wait_ms=500, min_bytes=1)
        elapsed = time.monotonic() - t0
    assert elapsed >= 0.5 - SLACK_S
    assert elapsed < 10
    assert (part.error_code, part.high_watermark, bytes(part.records or b"")) == (0, 0, b"")


def test_produce_during_the_wait_completes_it_early(broker: BrokerProcess) -> None:
    topic = new_topic(broker)
    batch = record_batch([(b"k%d" % i, b"x" * 100) for i in range(50)])
    with RawClient(broker.port) as client:
        thread = produce_later(broker, topic, 0, batch, 0.3)
        t0 = time.monotonic()
        part = client.fetch(topic, 0, 0, max_wait_ms=8000, min_bytes=1000)
        elapsed = time.monotonic() - t0
        thread.join(10)
    assert 0.25 <= elapsed < 4.0, f"returned after {elapsed:.3f} s of an 8 s wait"
    assert part.error_code == 0
    records = read_records(part.records)
    assert [r[0] for r in records] == list(range(50))


def test_small_produces_do_not_complete_until_min_bytes(broker: BrokerProcess) -> None:
    """A produce that leaves the fetch below min_bytes does not answer it."""
    topic = new_topic(broker)
    with RawClient(broker.port) as client:
        thread = produce_later(broker, topic, 0, record_batch([(None, b"tiny")]), 0.1)
        t0 = time.monotonic()
        part = client.fetch(topic, 0, 0, max_wait_ms=1000, min_bytes=50_000)
        elapsed = time.monotonic() - t0
        thread.join(10)
    assert elapsed >= 1.0 - SLACK_S
    assert read_records(part.records) == [(0, None, b"tiny")]


def test_wait_over_partitions_on_several_shards(broker: BrokerProcess) -> None:
    """min_bytes counts over every partition of the fetch; any of them may fill it."""
    topic = new_topic(broker, 8)  # partitions 0-3 and 4-7 sit on different shards
    values = fetch_values(topic, 0, 0, max_wait_ms=8000, min_bytes=2000)
    values["topics"][0]["partitions"] = [
        {**values["topics"][0]["partitions"][0], "partition": p} for p in range(8)]
    batch = record_batch([(None, b"y" * 100) for _ in range(30)])
    with RawClient(broker.port) as client:
        thread = produce_later(broker, topic, 6, batch, 0.3)
        t0 = time.monotonic()
        response = client.call(FETCH, 11, values)
        elapsed = time.monotonic() - t0
        thread.join(10)
    assert 0.25 <= elapsed < 4.0
    parts = {p.partition_index: p for p in response.responses[0].partitions}
    assert sorted(parts) == list(range(8))
    assert len(read_records(parts[6].records)) == 30
    assert all(not parts[p].records for p in parts if p != 6)


def test_many_waiting_fetches_on_one_connection_answer_in_order(broker: BrokerProcess) -> None:
    """Pipelined waiting fetches: one produce releases them all, in request order."""
    topic = new_topic(broker)
    with RawClient(broker.port) as client:
        cids = [client.send(FETCH, 11, fetch_values(topic, 0, 0, max_wait_ms=8000, min_bytes=1))
                for _ in range(5)]
        thread = produce_later(broker, topic, 0, record_batch([(None, b"go")]), 0.3)
        t0 = time.monotonic()
        got = [client.recv() for _ in cids]
        elapsed = time.monotonic() - t0
        thread.join(10)
    assert [cid for cid, _ in got] == cids
    assert elapsed < 4.0
    for _cid, response in got:
        assert read_records(response.responses[0].partitions[0].records) == [(0, None, b"go")]
