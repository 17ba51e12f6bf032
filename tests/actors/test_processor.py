"""The Processor shell on real actors and a real TCP connection, timed by a ManualClock.

A fake RequestHandler answers each request and moves the shared manual clock
as it does, so Kafka's request-time split the Processor reports is exact;
a duplicated answer (a bug elsewhere) closes that one connection, nothing more.
"""

from __future__ import annotations

import socket
import struct

from actors.processor import Processor
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    ConnectionClosed,
    GetStats,
    KafkaRequest,
    KafkaResponse,
    NewConnection,
)

MS = 1_000_000
DUPLICATED = 666  # correlation id the fake handler answers twice


class FakeHandler(Actor):
    """Answers every request after 10 ms of manual time: queue 2, local 3, remote 4 ms."""

    clock: ManualClock

    @handles(KafkaRequest)
    def on_request(self, msg: KafkaRequest) -> None:
        self.clock.advance(10)
        body = struct.pack(">i", msg.correlation_id) + b"answer"
        answer = KafkaResponse(msg.conn_id, msg.seq, struct.pack(">i", len(body)) + body, True,
                               False, msg.api_key, msg.correlation_id, msg.recv_ns,
                               [2 * MS, 3 * MS, 4 * MS])
        processor = Address(self.node.name, msg.processor)
        self.tell(processor, answer)
        if msg.correlation_id == DUPLICATED:
            self.tell(processor, answer)


class FakeAcceptor(Actor):
    def setup(self) -> None:
        self.closed: list[int] = []

    @handles(ConnectionClosed)
    def on_closed(self, msg: ConnectionClosed) -> None:
        self.closed.append(msg.conn_id)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> list[int]:
        return self.closed


def connect(node: Node, processor: Address, conn_id: int) -> socket.socket:
    """A real loopback connection whose server side the Processor adopts."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname()[:2], timeout=10)
        server, (host, port) = listener.accept()
    node.tell(processor, NewConnection(conn_id, server.detach(), host, port))
    return client


def request(correlation_id: int) -> bytes:
    payload = struct.pack(">hhi", 18, 0, correlation_id) + b"\0\0"
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError(f"closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def spawn(node: Node) -> Address:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    node.spawn(FakeAcceptor, topo.acceptor.name)
    node.spawn(FakeHandler, topo.handler(0).name)
    return node.spawn(Processor, topo.processor(0).name, topology=topo, config=Config(),
                      clock=node.clock)


def test_the_request_time_split_is_read_from_the_injected_clock(
        manual_node: Node, manual_clock: ManualClock) -> None:
    node, clock = manual_node, manual_clock
    clock.advance(1_000)
    processor = spawn(node)
    client = connect(node, processor, 1)
    with client:
        # one at a time: the clock then moves only between a read and its answer
        for correlation_id in (7, 8):
            client.sendall(request(correlation_id))
            assert read_frame(client) == struct.pack(">i", correlation_id) + b"answer"
    stats = wait_for(lambda: (s := node.ask(processor, GetStats()))["responses"] == 2 and s)
    # Each request: read at t, answered and written at t + 10 ms: a total of 10 ms, of
    # which queue 2 + local 3 + remote 4 (the handler's figures), send 0 (nothing
    # before it), and the response queue the remaining 1 ms.
    assert stats["stage_ns"] == {"request_queue": 4 * MS, "local": 6 * MS, "remote": 8 * MS,
                                 "response_queue": 2 * MS, "send": 0}
    assert clock.now_ms() == 1_020


def test_a_second_answer_to_one_request_closes_that_connection_only(manual_node: Node) -> None:
    node = manual_node
    processor = spawn(node)
    acceptor = Address(node.name, "acceptor")
    bad = connect(node, processor, 1)
    good = connect(node, processor, 2)
    with bad, good:
        bad.sendall(request(DUPLICATED))
        assert read_frame(bad) == struct.pack(">i", DUPLICATED) + b"answer"
        assert bad.recv(1) == b""  # then closed by the broker
        assert wait_for(lambda: node.ask(acceptor, GetStats())) == [1]
        good.sendall(request(5))
        assert read_frame(good) == struct.pack(">i", 5) + b"answer"
    assert node.ask(processor, GetStats())["responses"] == 2
