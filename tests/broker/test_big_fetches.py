"""Issue 13's failures with big data, on a real broker process.

1. Two pipelined Fetch v4 requests of 60 MB each on one socket, against a
   one-partition topic of 130 MB (1,300 records of 100 KB): both answered
   (their internal replies once went to dead letters as one oversized frame,
   and the connection hung).
2. A client that pipelines 8 fetches of 100 MB and never reads: the broker's
   resident memory grows by less than 400 MB (responses are file regions
   sent from the segment, capped by fetch.max.bytes), and other clients are
   served meanwhile.
3. Clients that pipeline big produce requests and never read: the Processors
   stop reading them at queued.max.request.bytes; memory stays bounded and
   another client is served meanwhile.

Every load loop here is bounded in count and in time.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.conftest import BrokerProcess, free_port
from tests.broker.rawclient import (
    FETCH,
    PRODUCE,
    RawClient,
    build,
    fetch_values,
    produce_values,
    read_batches,
    record_batch,
)

pytestmark = [pytest.mark.slow]

TOPIC = "big"
RECORD_BYTES = 100 * 1024
RECORDS = 1300
PER_BATCH = 10
FETCH_MAX_BYTES = 57671680  # fetch.max.bytes, Kafka's default
MB = 1024 * 1024


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def fds_on(pid: int, path: Path) -> int:
    """Descriptors of process ``pid`` open on ``path``."""
    count = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{name}") == str(path)
        except OSError:
            pass
    return count


def fill(broker: BrokerProcess, topic: str = TOPIC) -> None:
    """RECORDS records of RECORD_BYTES in one partition, PER_BATCH to a batch."""
    with RawClient(broker.port, timeout=60) as client:
        assert client.create_topic(topic, 1) == 0
        value = b"v" * RECORD_BYTES
        for n in range(RECORDS // PER_BATCH):
            batch = record_batch([(b"%d" % (n * PER_BATCH + i), value) for i in range(PER_BATCH)])
            part = client.produce(topic, 0, batch, acks=1)
            assert part.error_code == 0, part
            assert part.base_offset == n * PER_BATCH


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("big")
    broker = BrokerProcess(base / "data").start()
    try:
        fill(broker)
        yield broker
    finally:
        code = broker.stop(timeout=60)
    assert code == 0, broker.log()[-3000:]
    assert "did not quiesce" not in broker.log()


def fetch_v4(max_bytes: int, offset: int = 0) -> dict[str, object]:
    values = fetch_values(TOPIC, 0, offset, max_bytes=max_bytes)
    return {k: v for k, v in values.items() if k in ("replica_id", "max_wait_ms", "min_bytes",
                                                      "max_bytes", "isolation_level", "topics")}


def check_records(records: bytes, offset: int) -> int:
    """The batches are whole, in order from ``offset``, intact; their record count."""
    batches = read_batches(records)
    assert batches, "no batch in the response"
    total = 0
    expected = offset
    size = 0
    for batch in batches:
        assert batch.base_offset == expected
        assert batch.validate_crc()
        expected = batch.next_offset
        total += batch.next_offset - batch.base_offset
        size += 12 + struct.unpack_from(">i", records, size + 8)[0]
    assert size == len(records), "a partial batch was sent"
    return total


def test_two_pipelined_60_mb_fetches_on_one_socket_are_both_answered(
        loaded: BrokerProcess) -> None:
    # Two connections one after the other: their ids are consecutive, so one of
    # them has its handler in another worker thread than the partition's shard
    # and the shard's answers travel as frames (the case that failed).
    for _connection in range(2):
        with RawClient(loaded.port, timeout=60) as client:
            # Both requests in one write, so the broker reads and handles them together.
            ids = [client.protocol.send_request(build(FETCH, 4, fetch_v4(60 * MB)))
                   for _ in range(2)]
            client.sock.sendall(bytes(client.protocol.send_bytes()))
            for cid in ids:
                got, response = client.recv()
                assert got == cid
                part = response.responses[0].partitions[0]
                assert part.error_code == 0
                assert part.high_watermark == RECORDS
                records = bytes(part.records)
                # fetch.max.bytes (55 MB) caps the response below the 60 MB asked for.
                assert 50 * MB < len(records) <= FETCH_MAX_BYTES
                assert check_records(records, 0) >= 500


def raw_fetch_frames(correlation_ids: list[int], max_bytes: int) -> bytes:
    """Fetch v4 request frames, encoded by kafka.protocol, for a raw socket."""
    out = b""
    for cid in correlation_ids:
        request = build(FETCH, 4, fetch_v4(max_bytes))
        request.with_header(correlation_id=cid, client_id="silent")
        out += bytes(request.encode(framed=True, header=True))
    return out


def read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 4 * MB))
        if not chunk:
            raise EOFError("broker closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def test_a_client_that_never_reads_8_pipelined_100_mb_fetches_cannot_balloon_the_broker(
        loaded: BrokerProcess) -> None:
    pid = loaded.proc.pid if loaded.proc is not None else 0
    with RawClient(loaded.port, timeout=60) as warm:  # every code path used once
        warm.call(FETCH, 4, fetch_v4(MB))
    before = rss_kib(pid)
    silent = socket.create_connection(("127.0.0.1", loaded.port), timeout=120)
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    try:
        silent.sendall(raw_fetch_frames(list(range(1, 9)), 100 * MB))
        peak = before
        deadline = time.monotonic() + 20
        served = 0
        while time.monotonic() < deadline:  # bounded: 20 s of sampling
            peak = max(peak, rss_kib(pid))
            with RawClient(loaded.port, timeout=30) as other:  # others are served meanwhile
                part = other.call(FETCH, 4, fetch_v4(MB, offset=RECORDS - 20)).responses[0]
                assert part.partitions[0].error_code == 0
                assert check_records(bytes(part.partitions[0].records), RECORDS - 20) > 0
                served += 1
            time.sleep(0.2)
        assert served > 0
        growth_mb = (peak - before) / 1024
        assert growth_mb < 400, f"RSS grew by {growth_mb:.0f} MB under 8 unread fetches"
        # Every one of the 8 is answered once the client reads.
        silent.settimeout(120)
        for cid in range(1, 9):
            (size,) = struct.unpack(">i", read_exactly(silent, 4))
            frame = read_exactly(silent, size)
            assert struct.unpack_from(">i", frame)[0] == cid
            assert 50 * MB < size <= FETCH_MAX_BYTES + 4096
    finally:
        silent.close()
    # Each response's region was closed once sent: the segment is open once (its log's).
    segment = loaded.data_dir / f"{TOPIC}-0" / "00000000000000000000.log"
    deadline = time.monotonic() + 10
    while fds_on(pid, segment) > 1 and time.monotonic() < deadline:  # bounded: 10 s
        time.sleep(0.05)
    assert fds_on(pid, segment) == 1


def metric(port: int, name: str) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(f"actorlog_{name} "):
            return int(line.split()[1])
    return 0


def test_clients_that_never_read_cannot_queue_more_request_bytes_than_the_bound(
        tmp_path: Path) -> None:
    """queued.max.request.bytes: four clients pipeline 4 MB produce requests and read
    nothing; the Processors stop reading them while 8 MB are held, the broker's memory
    stays bounded, another client is served meanwhile, and every request is answered."""
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path / "data", config={
        "queued.max.request.bytes": 8 * MB, "metrics.port": metrics_port}).start()
    try:
        with RawClient(broker.port) as admin:
            assert admin.create_topic("pushed", 2) == 0
            assert admin.produce("pushed", 0, record_batch([(None, b"warm")])).error_code == 0
        pid = broker.proc.pid if broker.proc is not None else 0
        before = rss_kib(pid)
        batch = record_batch([(None, b"p" * 100_000) for _ in range(10)])
        values = produce_values("pushed", 0, batch, 1)
        values["topic_data"][0]["partition_data"] = [
            {"index": i % 2, "records": batch} for i in range(4)]
        requests = []
        for cid in range(1, 17):
            request = build(PRODUCE, 9, values)
            request.with_header(correlation_id=cid, client_id="pusher")
            requests.append(bytes(request.encode(framed=True, header=True)))
        pushers = [socket.create_connection(("127.0.0.1", broker.port), timeout=120)
                   for _ in range(4)]
        threads = [threading.Thread(target=s.sendall, args=(b"".join(requests),), daemon=True)
                   for s in pushers]
        try:
            for thread in threads:
                thread.start()
            peak = before
            served = 0
            deadline = time.monotonic() + 60
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                peak = max(peak, rss_kib(pid))
                with RawClient(broker.port, timeout=30) as other:
                    assert other.produce("pushed", 1, record_batch([(None, b"o")])).error_code == 0
                    served += 1
            assert not any(t.is_alive() for t in threads), "the pushers never got their data out"
            peak = max(peak, rss_kib(pid))
            assert served > 0
            assert metric(metrics_port, "connections_paused_queued_request_bytes") > 0
            growth_mb = (peak - before) / 1024
            assert growth_mb < 300, f"RSS grew by {growth_mb:.0f} MB"
            for s in pushers:  # every request answered, in order
                s.settimeout(60)
                for cid in range(1, 17):
                    (size,) = struct.unpack(">i", read_exactly(s, 4))
                    assert struct.unpack(">i", read_exactly(s, size)[:4])[0] == cid
        finally:
            for s in pushers:
                s.close()
        with RawClient(broker.port) as check:
            ends = [check.list_offset("pushed", p, -1).offset for p in (0, 1)]
        assert sum(ends) == 1 + 4 * 16 * 4 * 10 + served
    finally:
        assert broker.stop(timeout=60) == 0
