"""The Processor's write path and memory bounds, on real actors and real TCP connections.

A stand-in RequestHandler answers with responses that carry file regions
(bytes of a real file, sent with sendfile, or a chunk at a time where a
connection cannot use sendfile, as TLS will not). The bounds
``queued.max.request.bytes`` and ``max.unsent.response.bytes.per.connection``
are shown by clients that do not read: the Processor stops reading them, and
everything is answered once they read.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from actors.processor import READ_CHUNK, Processor
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import SystemClock
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.actors.test_processor import FakeAcceptor, connect, read_frame, wait_for
from wire.broker_messages import GetStats, KafkaRequest, KafkaResponse, RegionAt
from wire.registry import message

MB = 1024 * 1024


@message(9701)
class Release(NamedTuple):
    """Answer every request held so far."""


@message(9702)
class Seen(NamedTuple):
    """The correlation ids of the requests that reached the handler."""


class RegionHandler(Actor):
    """Answers ``corr + head + region + mid + region + tail`` from one file (or holds)."""

    def __init__(self, node: Any, name: str, *, path: str, spans: list[tuple[int, int]],
                 hold: bool = False, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.path = path
        self.spans = spans
        self.hold = hold

    def setup(self) -> None:
        self.seen: list[int] = []
        self.held: list[KafkaRequest] = []

    @handles(KafkaRequest)
    def on_request(self, msg: KafkaRequest) -> None:
        self.seen.append(msg.correlation_id)
        if self.hold:
            self.held.append(msg)
        else:
            self.answer(msg)

    def answer(self, msg: KafkaRequest) -> None:
        frame = bytearray(struct.pack(">i", msg.correlation_id) + b"head")
        regions = []
        for i, (position, length) in enumerate(self.spans):
            regions.append(RegionAt(len(frame) + 4, os.open(self.path, os.O_RDONLY), position,
                                    length))
            frame += b"mid%d" % i
        frame += b"tail"
        size = len(frame) + sum(length for _p, length in self.spans)
        self.tell(Address(self.node.name, msg.processor), KafkaResponse(
            msg.conn_id, msg.seq, struct.pack(">i", size) + bytes(frame), True, False,
            msg.api_key, msg.correlation_id, msg.recv_ns, [0, 0, 0], regions))

    @handles(Release)
    def release(self, _msg: Release) -> None:
        held, self.held = self.held, []
        for msg in held:
            self.answer(msg)

    @handles(Seen)
    def seen_ids(self, _msg: Seen) -> list[int]:
        return self.seen


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node("bounds-test").start()
    yield n
    n.shutdown(timeout=5)


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "segment.log"
    path.write_bytes(os.urandom(4 * MB))
    return path


def spawn(node: Node, path: Path, spans: list[tuple[int, int]], *, sendfile: bool = True,
          hold: bool = False, **config: Any) -> Address:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    node.spawn(FakeAcceptor, topo.acceptor.name)
    node.spawn(RegionHandler, topo.handler(0).name, path=str(path), spans=spans, hold=hold)
    return node.spawn(Processor, topo.processor(0).name, topology=topo, config=Config(config),
                      clock=SystemClock(), sendfile=sendfile)


def expected(path: Path, spans: list[tuple[int, int]], correlation_id: int) -> bytes:
    data = path.read_bytes()
    out = struct.pack(">i", correlation_id) + b"head"
    for i, (position, length) in enumerate(spans):
        out += data[position:position + length] + b"mid%d" % i
    return out + b"tail"


def request(correlation_id: int, body_bytes: int = 2) -> bytes:
    payload = struct.pack(">hhi", 1, 4, correlation_id) + b"\0" * body_bytes
    return struct.pack(">i", len(payload)) + payload


def open_fds_on(path: Path) -> int:
    """Descriptors of this process open on ``path`` (the regions not yet closed)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == str(path):
                count += 1
        except OSError:
            pass
    return count


def slow_reader(client: socket.socket) -> None:
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "chunks"])
def test_responses_with_file_regions_arrive_whole_and_in_order(
        node: Node, data_file: Path, sendfile: bool) -> None:
    spans = [(1000, 2 * MB), (7, MB + 3)]
    processor = spawn(node, data_file, spans, sendfile=sendfile)
    client = connect(node, processor, 1)
    with client:
        slow_reader(client)  # the socket fills: partial writes of bytes and regions
        client.sendall(b"".join(request(c) for c in (11, 12, 13)))
        for correlation_id in (11, 12, 13):
            assert read_frame(client) == expected(data_file, spans, correlation_id)
        assert wait_for(lambda: open_fds_on(data_file) == 0)  # each region closed once sent
    stats = wait_for(lambda: (s := node.ask(processor, GetStats()))["responses"] == 3 and s)
    assert stats["unsent_bytes"] == 0 and stats["request_bytes"] == 0


def test_the_regions_of_a_connection_that_goes_are_closed(node: Node, data_file: Path) -> None:
    processor = spawn(node, data_file, [(0, 4 * MB)])
    client = connect(node, processor, 1)
    slow_reader(client)
    client.sendall(b"".join(request(c) for c in range(1, 6)))
    wait_for(lambda: node.ask(Address(node.name, "handler-0"), Seen()) == [1, 2, 3, 4, 5])
    assert len(client.recv(1000)) > 0  # the first response is on its way
    client.close()
    assert wait_for(lambda: open_fds_on(data_file) == 0)
    assert wait_for(lambda: node.ask(processor, GetStats())["connections"] == 0)


def test_a_region_cut_under_its_response_closes_that_connection_only(
        node: Node, data_file: Path) -> None:
    size = data_file.stat().st_size
    spans = [(size - 1000, 5000)]  # 4,000 bytes promised past the end of the file
    processor = spawn(node, data_file, spans)
    bad = connect(node, processor, 1)
    good = connect(node, processor, 2)
    with bad, good:
        bad.sendall(request(1))
        with pytest.raises(EOFError):
            read_frame(bad)
        os.truncate(data_file, size + 4000)  # long enough again: the good one is whole
        good.sendall(request(2))
        assert read_frame(good) == expected(data_file, spans, 2)
    assert node.metrics.get("responses_cut_by_truncation") == 1
    assert wait_for(lambda: open_fds_on(data_file) == 0)


def test_a_client_that_does_not_read_is_not_read_past_max_unsent_response_bytes(
        node: Node, data_file: Path) -> None:
    bound = 2 * MB
    processor = spawn(node, data_file, [(0, MB)],
                      **{"max.unsent.response.bytes.per.connection": bound})
    handler = Address(node.name, "handler-0")
    client = connect(node, processor, 1)
    with client:
        slow_reader(client)
        sent = 0
        deadline = time.monotonic() + 20
        # One request at a time, each answered with 1 MB the client leaves unread, until
        # the Processor stops reading the connection (bounded: 20 requests, 20 s).
        while sent < 20 and time.monotonic() < deadline:
            stats = node.ask(processor, GetStats())
            if stats["stopped_unsent"]:
                break
            sent += 1
            client.sendall(request(sent))
            wait_for(lambda n=sent: len(node.ask(handler, Seen())) == n)
            wait_for(lambda: node.ask(processor, GetStats())["queued"] == 0)  # answer queued
        stats = node.ask(processor, GetStats())
        assert stats["stopped_unsent"] == 1, stats
        assert bound < stats["unsent_bytes"] <= bound + MB + 64
        client.sendall(request(sent + 1))  # not read while the answers wait
        time.sleep(0.5)
        assert len(node.ask(handler, Seen())) == sent
        for correlation_id in range(1, sent + 2):  # reading drains them: the last one is read
            assert read_frame(client) == expected(data_file, [(0, MB)], correlation_id)
    assert wait_for(lambda: open_fds_on(data_file) == 0)


def test_queued_max_request_bytes_stops_reading_until_requests_are_answered(
        node: Node, data_file: Path) -> None:
    bound = MB
    processor = spawn(node, data_file, [(0, 10)], hold=True,
                      **{"queued.max.request.bytes": bound})
    handler = Address(node.name, "handler-0")
    body = 400 * 1024
    client = connect(node, processor, 1)
    with client:
        client.sendall(b"".join(request(c, body) for c in range(1, 7)))  # 2.4 MB, unanswered
        wait_for(lambda: node.ask(processor, GetStats())["paused"] == 1)
        seen = node.ask(handler, Seen())
        stats = node.ask(processor, GetStats())
        # Read while under the bound; a request begun is read to its end.
        assert 2 <= len(seen) < 6, seen
        assert stats["peak_request_bytes"] <= bound + body + READ_CHUNK + 64
        node.tell(handler, Release())  # answered: room again, the rest is read
        deadline = time.monotonic() + 20
        answered = []
        while len(answered) < 6 and time.monotonic() < deadline:  # bounded: 6 answers, 20 s
            node.tell(handler, Release())
            client.settimeout(0.5)
            try:
                answered.append(struct.unpack_from(">i", read_frame(client))[0])
            except TimeoutError:
                continue
        assert answered == [1, 2, 3, 4, 5, 6]
    stats = wait_for(lambda: (s := node.ask(processor, GetStats()))["request_bytes"] == 0 and s)
    assert stats["paused"] == 0
