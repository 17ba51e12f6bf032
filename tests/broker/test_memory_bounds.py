"""Fetch responses bounded and sent from the segment files, on a real broker process.

``fetch.max.bytes`` caps a response (whole batches; the first batch of the
first partition with data always goes, so a consumer progresses). A response
is sent from the segment file: a client that reads it only after retention
has deleted the segment still gets every byte, intact (the region holds the
file open, as Kafka keeps a deleted segment's file until it is sent). The
broker's descriptors come back once the responses are sent.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.parser import KafkaProtocol

from tests.broker.conftest import BrokerProcess
from tests.broker.rawclient import FETCH, RawClient, build, fetch_values, read_batches, record_batch
from tests.broker.test_big_fetches import fds_on
from tests.fixtures.leaks import child_pids
from tests.fixtures.waiting import wait_for

FETCH_MAX = 64 * 1024
VALUE = 10 * 1024


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("capped")
    broker = BrokerProcess(base / "data", config={
        "fetch.max.bytes": FETCH_MAX, "log.retention.check.interval.ms": 100}).start()
    yield broker
    assert broker.stop() == 0, broker.log()[-3000:]


@pytest.fixture(scope="module")
def retaining(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("retaining")
    broker = BrokerProcess(base / "data", config={
        "log.retention.check.interval.ms": 100, "socket.send.buffer.bytes": 16384}).start()
    yield broker
    assert broker.stop() == 0, broker.log()[-3000:]


def offsets_of(records: bytes) -> list[int]:
    batches = read_batches(records)
    assert sum(b.size_in_bytes for b in batches) == len(records), "a partial batch was sent"
    for batch in batches:
        assert batch.validate_crc()
    return [batch.base_offset for batch in batches]


def deleted_files_held(pid: int) -> list[str]:
    """Files the process holds open although they were deleted."""
    held = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            held.append(target)
    return held


def test_fetch_max_bytes_caps_a_response_at_whole_batches(capped: BrokerProcess) -> None:
    with RawClient(capped.port) as client:
        assert client.create_topic("capped", 2) == 0
        for _ in range(20):  # 20 batches of about 10 KB in each partition
            for p in (0, 1):
                assert client.produce("capped", p, record_batch([(None, b"c" * VALUE)])
                                      ).error_code == 0
        part = client.fetch("capped", 0, 0, max_bytes=1 << 20)  # the request allows 1 MB
        assert len(part.records) <= FETCH_MAX
        offsets = offsets_of(bytes(part.records))
        assert offsets == list(range(len(offsets))) and len(offsets) >= 5
        # Over two partitions the cap is for the whole response.
        values = fetch_values("capped", 0, 0, max_bytes=1 << 20)
        values["topics"][0]["partitions"].append({**values["topics"][0]["partitions"][0],
                                                  "partition": 1})
        response = client.call(FETCH, 11, values)
        total = sum(len(p.records) for p in response.responses[0].partitions)
        assert FETCH_MAX - 2 * (VALUE + 200) < total <= FETCH_MAX
        # A batch larger than the cap still comes: alone, first of the response.
        assert client.create_topic("capped-big", 1) == 0
        big = record_batch([(None, b"B" * (2 * FETCH_MAX))])
        assert client.produce("capped-big", 0, big).error_code == 0
        assert client.produce("capped-big", 0, record_batch([(None, b"s")])).error_code == 0
        part = client.fetch("capped-big", 0, 0, max_bytes=1 << 20)
        assert offsets_of(bytes(part.records)) == [0]
        assert len(part.records) == len(big)


def read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("closed by the broker")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def test_a_response_is_sent_whole_after_retention_deleted_its_segment(
        retaining: BrokerProcess) -> None:
    capped = retaining
    segment = 1024 * 1024
    topic = "retained"
    with RawClient(capped.port) as client:
        assert client.create_topic(topic, 1, configs={
            "segment.bytes": str(segment), "retention.bytes": str(3 * segment)}) == 0
        value = bytes(range(256)) * (VALUE // 256)
        for i in range(190):  # 1.9 MB: two segments, under the retention bound
            assert client.produce(topic, 0, record_batch([(b"%d" % i, value)])
                                  ).error_code == 0
        pid = capped.proc.pid if capped.proc is not None else 0
        # the answer is held by the process its connection was handed to: count them all
        pids = {pid} | child_pids(pid)
        first_log = capped.data_dir / f"{topic}-0" / "00000000000000000000.log"
        assert first_log.exists()
        held_before = sum(fds_on(p, first_log) for p in pids)
        # A client that asks for segment 0 and does not read the answer yet.
        reader = socket.create_connection(("127.0.0.1", capped.port), timeout=30)
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024)
        protocol = KafkaProtocol(client_id="late-reader")
        values = fetch_values(topic, 0, 0, max_bytes=segment)
        correlation_id = protocol.send_request(build(FETCH, 4, {
            k: v for k, v in values.items() if k in (
                "replica_id", "max_wait_ms", "min_bytes", "max_bytes", "isolation_level",
                "topics")}))
        reader.sendall(bytes(protocol.send_bytes()))
        # answered (its region holds a descriptor of the segment of its own) and queued
        # behind the client's full receive window, before retention may delete the segment
        wait_for(lambda: sum(fds_on(p, first_log) for p in pids) > held_before,
                 "the answer to hold the first segment", timeout=30)
        for i in range(190, 490):  # 3 MB more: retention deletes the first segments
            assert client.produce(topic, 0, record_batch([(b"%d" % i, value)])
                                  ).error_code == 0
        deadline = time.monotonic() + 30
        while first_log.exists() and time.monotonic() < deadline:  # bounded: 30 s
            time.sleep(0.05)
        assert not first_log.exists(), "retention did not delete the first segment"
        held = [name for p in pids for name in deleted_files_held(p)]
        assert str(first_log) + " (deleted)" in held  # held for the reader
        assert client.list_offset(topic, 0, -2).offset > 0  # the log start moved past it
        with reader:
            head = read_exactly(reader, 4)
            frame = read_exactly(reader, struct.unpack(">i", head)[0])
        ((got, response),) = protocol.receive_bytes(head + frame)
        assert got == correlation_id
        part = response.responses[0].partitions[0]
        assert part.error_code == 0
        records = bytes(part.records)
        offsets = offsets_of(records)
        assert offsets == list(range(len(offsets)))
        assert len(offsets) >= 90  # the whole first segment
        for i, batch in enumerate(read_batches(records)):
            (record,) = list(batch)
            assert record.key == b"%d" % i and record.value == value
        deadline = time.monotonic() + 10
        while deleted_files_held(pid) and time.monotonic() < deadline:  # bounded: 10 s
            time.sleep(0.05)
        assert deleted_files_held(pid) == []  # the region's descriptor is closed once sent
