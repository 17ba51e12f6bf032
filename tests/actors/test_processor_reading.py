"""Whether the Processor reads a connection, event by event, on real TCP connections.

``_on_fd`` keeps the reading decision ``_take_frames`` made after a read instead of
deciding again, unless the same event also wrote (a write may free the unsent-bytes
bound). What it leaves between an event and the end of the turn is not visible from
outside a running loop: ``on_turn`` decides again for every connection answered in the
turn, and a connection left polled for reads costs only a wakeup. So these tests are the
loop themselves: one real Processor, never started, whose own poller is polled and whose
handlers are called in the loop's order (the answers drained from the mailbox, the
sockets' events, ``on_turn``), and they look at the connection and its poll mask right
after an event.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from actors.processor import _POLLIN, _POLLOUT, Processor, _Conn
from actors.runtime.clock import SystemClock
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from wire.broker_messages import KafkaResponse, NewConnection

KB = 1024


class Loop:
    """A Processor and its poll loop, a turn at a time in the test's thread."""

    def __init__(self, node: Node, **config: Any) -> None:
        topo = Topology(node.name, 1, 1, 1, 1, 1)
        self.processor = Processor(node, topo.processor(0).name, topology=topo,
                                   config=Config(config), clock=SystemClock())
        self.processor.setup()
        self.clients: list[socket.socket] = []

    def connect(self, conn_id: int, client_rcvbuf: int | None = None) -> tuple[socket.socket,
                                                                              _Conn]:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            client = socket.socket()
            if client_rcvbuf is not None:  # before connect: it sets the window offered
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, client_rcvbuf)
            client.settimeout(10)
            client.connect(listener.getsockname()[:2])
            server, (host, port) = listener.accept()
        self.clients.append(client)
        self.processor.on_new_connection(NewConnection(conn_id, server.detach(), host, port))
        return client, self.processor.conns[conn_id]

    def events(self, timeout_ms: int = 0) -> dict[int, int]:
        """What the Processor's poller reports now (it consumes nothing)."""
        return dict(self.processor._poller.poll(timeout_ms))

    def wait_event(self, fd: int, wanted: int, client: socket.socket | None = None,
                   got: bytearray | None = None) -> int:
        """The fd's event once it has every bit of ``wanted`` (draining ``client`` into
        ``got`` meanwhile, when given); bounded at 5 s."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if client is not None and got is not None:
                drain(client, got)
            mask = self.events(50).get(fd, 0)
            if mask & wanted == wanted:
                return mask
        raise AssertionError(f"fd {fd} never reported poll mask {wanted}")

    def answer(self, conn: _Conn, seq: int, correlation_id: int, size: int) -> None:
        """A handler's answer of ``size`` bytes, as the loop takes it from the mailbox."""
        frame = (struct.pack(">ii", size - 4, correlation_id)
                 + bytes(size - 8))
        self.processor.on_response(KafkaResponse(conn.conn_id, seq, frame, True, False, 18,
                                                 correlation_id, time.monotonic_ns(),
                                                 [0, 0, 0]))

    def turn(self, timeout_ms: int = 0) -> None:
        """A whole turn: the sockets' events, then on_turn."""
        for fd, mask in self.events(timeout_ms).items():
            self.processor._on_fd(fd, mask)
        self.processor.on_turn()

    def close(self) -> None:
        for conn in list(self.processor.conns.values()):
            self.processor._close(conn, "test over")
        for client in self.clients:
            client.close()


def request(correlation_id: int) -> bytes:
    payload = struct.pack(">hhi", 18, 0, correlation_id) + b"\0\0"
    return struct.pack(">i", len(payload)) + payload


def drain(client: socket.socket, into: bytearray) -> None:
    """Whatever the client socket holds now, without waiting."""
    client.setblocking(False)
    try:
        while chunk := client.recv(256 * KB):
            into += chunk
    except BlockingIOError:
        pass
    finally:
        client.settimeout(10)


def frames(data: bytes) -> list[tuple[int, int]]:
    """(correlation id, size with the prefix) of each whole frame in ``data``."""
    out, pos = [], 0
    while pos + 8 <= len(data):
        size, correlation_id = struct.unpack_from(">ii", data, pos)
        out.append((correlation_id, size + 4))
        pos += size + 4
    assert pos == len(data), "a frame cut short"
    return out


def polled_for_reads(conn: _Conn) -> bool:
    return bool(conn.mask & _POLLIN)


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node("reading-test")  # never started: the test is the Processor's loop
    yield n
    n.shutdown(timeout=5)


def test_a_read_that_reaches_the_in_flight_bound_stops_the_polling_for_reads(
        node: Node) -> None:
    loop = Loop(node, **{"max.inflight.requests.per.connection": 2})
    try:
        client, conn = loop.connect(1)
        assert conn.reading and polled_for_reads(conn)
        client.sendall(request(1) + request(2) + request(3))
        mask = loop.wait_event(conn.fd, _POLLIN)
        assert mask == _POLLIN  # nothing to write: the read alone, decided by _take_frames
        loop.processor._on_fd(conn.fd, mask)
        # two taken, the third waits in the core: at the bound, and no longer polled
        assert conn.core.in_flight == 2 and conn.core.buffered_bytes == len(request(3))
        assert not conn.reading and not polled_for_reads(conn)
        client.sendall(request(4))
        # bytes in the socket do not wake the loop for a connection it does not read
        assert loop.events(200).get(conn.fd, 0) == 0
        loop.processor.on_turn()
        assert not polled_for_reads(conn)

        # An answer frees one place: the request read earlier takes it, the bound again.
        loop.answer(conn, 0, 1, 20)
        loop.processor.on_turn()
        assert conn.core.in_flight == 2 and conn.core.buffered_bytes == 0
        assert not conn.reading and not polled_for_reads(conn)
        assert loop.events(100).get(conn.fd, 0) == 0
        # Another: room, and nothing read is left; polled for reads again, and read.
        loop.answer(conn, 1, 2, 20)
        loop.processor.on_turn()
        assert conn.core.in_flight == 1
        assert conn.reading and polled_for_reads(conn)
        mask = loop.wait_event(conn.fd, _POLLIN)
        loop.processor._on_fd(conn.fd, mask)
        assert conn.core.next_seq == 4 and conn.core.in_flight == 2
        assert not conn.reading and not polled_for_reads(conn)
        got = bytearray()
        while len(got) < 40:  # bounded: the client's timeout is 10 s
            got += client.recv(40 - len(got))
        assert frames(bytes(got)) == [(1, 20), (2, 20)]
    finally:
        loop.close()


def test_a_read_and_a_write_in_one_event_decide_again_after_the_write(node: Node) -> None:
    bound = 64 * KB
    loop = Loop(node, **{"max.unsent.response.bytes.per.connection": bound,
                         "socket.send.buffer.bytes": 8 * KB})
    stopped = "connections_stopped_unsent_response_bytes"
    try:
        client, conn = loop.connect(1, client_rcvbuf=4 * KB)
        got = bytearray()
        client.sendall(request(1) + request(2))
        loop.turn(timeout_ms=5000)
        assert conn.core.next_seq == 2

        # The first answer, under the bound, fills the socket: the rest waits for POLLOUT.
        loop.answer(conn, 0, 1, 48 * KB)
        loop.processor.on_turn()
        assert 0 < conn.unsent <= bound, "the socket took the whole answer: no partial write"
        assert conn.reading and conn.mask == _POLLIN | _POLLOUT

        # One turn: the second answer comes from the mailbox first and puts the connection
        # over the bound; then one event of its socket, a request to read and room to
        # write. The read stops the connection (the bound is passed); the write, in the
        # same event, brings it back under: it is read on.
        client.sendall(request(3))
        mask = loop.wait_event(conn.fd, _POLLIN | _POLLOUT, client, got)
        second = bound + 1 - conn.unsent
        loop.answer(conn, 1, 2, second)
        assert conn.unsent == bound + 1 and conn.reading  # not decided again yet
        assert loop.events().get(conn.fd, 0) == mask
        loop.processor._on_fd(conn.fd, mask)
        assert conn.core.next_seq == 3  # the request was read
        assert node.metrics.get(stopped) == 1  # ... and the read stopped the connection
        assert conn.unsent <= bound  # the write let it go again
        assert conn.reading and polled_for_reads(conn)
        loop.processor.on_turn()
        assert conn.reading and polled_for_reads(conn)

        # Over the bound with a client that does not read: not read, not polled for reads.
        loop.answer(conn, 2, 3, bound)
        loop.processor.on_turn()
        assert conn.unsent > bound and node.metrics.get(stopped) == 2
        assert not conn.reading and conn.mask == _POLLOUT
        client.sendall(request(4))
        assert not loop.events(200).get(conn.fd, 0) & _POLLIN
        # The client reads: the writes (POLLOUT alone) drain the answers, and the
        # connection is read again once they are under the bound.
        deadline = time.monotonic() + 10
        while conn.core.next_seq < 4 and time.monotonic() < deadline:  # bounded: 10 s
            drain(client, got)
            loop.turn(timeout_ms=50)
        assert conn.core.next_seq == 4
        assert conn.reading and conn.unsent <= bound
        while conn.out and time.monotonic() < deadline:
            drain(client, got)
            loop.turn(timeout_ms=50)
        while len(got) < 48 * KB + second + bound and time.monotonic() < deadline:
            drain(client, got)
            time.sleep(0.01)
        assert frames(bytes(got)) == [(1, 48 * KB), (2, second), (3, bound)]
    finally:
        loop.close()
