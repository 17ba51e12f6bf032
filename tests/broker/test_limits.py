"""Configured limits: connections, request size, batch size.

A connection over ``max.connections.per.ip`` is closed at once and logged;
closing one frees its slot. A request over ``socket.request.max.bytes``
closes its connection only. A batch over ``message.max.bytes`` is refused
with MESSAGE_TOO_LARGE for its partition, and the connection goes on.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.rawclient import (
    METADATA,
    PRODUCE,
    RawClient,
    produce_values,
    record_batch,
    wait_for_log,
)
from tests.fixtures.broker import BrokerProcess
from wire.errors import ErrorCode

PER_IP = 3
REQUEST_MAX = 64 * 1024
MESSAGE_MAX = 16 * 1024


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("limited")
    b = BrokerProcess(base / "data", config={
        "max.connections.per.ip": PER_IP,
        "socket.request.max.bytes": REQUEST_MAX,
        "message.max.bytes": MESSAGE_MAX,
    }).start()
    yield b
    assert b.stop() == 0, b.log()[-3000:]


def metadata_ok(client: RawClient) -> bool:
    response = client.call(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    return len(response.brokers) == 1


def connect(broker: BrokerProcess) -> RawClient:
    """A working connection, waiting for a slot (see full_house)."""
    deadline = time.monotonic() + 15
    while True:
        client = RawClient(broker.port)
        try:
            if metadata_ok(client):
                return client
        except (ConnectionError, OSError):
            pass
        client.close()
        assert time.monotonic() < deadline, "no connection slot came free"
        time.sleep(0.2)


def full_house(broker: BrokerProcess) -> list[RawClient]:
    """PER_IP working connections, once earlier ones (the start probe) are counted out.

    The Acceptor learns of a closed connection when its Processor reads the
    EOF, so a connection closed a moment ago may still hold a slot.
    """
    deadline = time.monotonic() + 15
    while True:
        clients = [RawClient(broker.port) for _ in range(PER_IP)]
        try:
            if all(metadata_ok(c) for c in clients):
                return clients
        except (ConnectionError, OSError):
            pass
        for c in clients:
            c.close()
        assert time.monotonic() < deadline, "never got PER_IP connections at once"
        time.sleep(0.2)


def test_connections_over_the_per_ip_limit_are_closed(limited: BrokerProcess) -> None:
    clients = full_house(limited)
    try:
        before = limited.log().count("max.connections.per.ip reached")
        extra = RawClient(limited.port)
        assert extra.is_closed_by_peer(), "a connection over the limit was kept"
        extra.close()
        log = wait_for_log(limited, "max.connections.per.ip reached", count=before + 1)
        assert log.count("max.connections.per.ip reached") == before + 1  # logged once
        # Closing one frees its slot.
        clients.pop().close()
        deadline = time.monotonic() + 10
        while True:
            again = RawClient(limited.port)
            try:
                if metadata_ok(again):
                    clients.append(again)
                    break
            except (ConnectionError, OSError):
                again.close()
                assert time.monotonic() < deadline, "the freed slot never came back"
                time.sleep(0.1)
        assert all(metadata_ok(c) for c in clients)
    finally:
        for c in clients:
            c.close()


def test_request_over_socket_request_max_bytes(limited: BrokerProcess) -> None:
    with connect(limited) as good, connect(limited) as big:
        assert good.create_topic("limits", 1) == 0
        payload = b"\x00" * (REQUEST_MAX + 1)
        big.send_raw(struct.pack(">i", len(payload)) + payload)
        assert big.is_closed_by_peer()
        assert metadata_ok(good)
    log = wait_for_log(limited, f"request size {REQUEST_MAX + 1} outside")
    assert log.count(f"request size {REQUEST_MAX + 1} outside") == 1


def test_batch_over_message_max_bytes(limited: BrokerProcess) -> None:
    with connect(limited) as client:
        assert client.create_topic("big-batches", 2) in (0, ErrorCode.TOPIC_ALREADY_EXISTS)
        big = record_batch([(None, b"x" * 1000) for _ in range(20)])  # ~20 KB
        assert len(big) > MESSAGE_MAX
        values = produce_values("big-batches", 0, big)
        values["topic_data"][0]["partition_data"].append(
            {"index": 1, "records": record_batch([(None, b"small")])})
        response = client.call(PRODUCE, 9, values)
        parts = {p.index: p.error_code for p in response.responses[0].partition_responses}
        assert parts == {0: ErrorCode.MESSAGE_TOO_LARGE, 1: 0}
        assert client.list_offset("big-batches", 0, -1).offset == 0
        assert client.produce("big-batches", 0, record_batch([(None, b"ok")])).error_code == 0


def test_queued_max_requests_pauses_reading_and_loses_nothing(tmp_path: Path) -> None:
    """With room for 1 queued request per Processor, pipelined clients still get
    every answer, in order (reading pauses instead of queueing without bound)."""
    from tests.broker.rawclient import PRODUCE, produce_values

    broker = BrokerProcess(tmp_path / "data", config={"queued.max.requests": 2}).start()
    try:
        clients = [RawClient(broker.port) for _ in range(3)]
        try:
            assert clients[0].create_topic("q", 2) == 0
            sent = {i: [c.send(PRODUCE, 9, produce_values("q", i % 2, record_batch(
                [(None, b"%d" % n)]), 1)) for n in range(40)] for i, c in enumerate(clients)}
            for i, c in enumerate(clients):
                for cid in sent[i]:
                    got, response = c.recv()
                    assert got == cid
                    assert response.responses[0].partition_responses[0].error_code == 0
        finally:
            for c in clients:
                c.close()
        with RawClient(broker.port) as check:
            ends = [check.list_offset("q", p, -1).offset for p in (0, 1)]
            assert sum(ends) == 120
    finally:
        assert broker.stop() == 0
