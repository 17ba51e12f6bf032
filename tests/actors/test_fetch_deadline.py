"""A Fetch's handler answers by its calls' deadlines when a shard's or a purgatory's
process does not answer (num.processes > 1: paused, or restarted and not ready yet):
a Read unanswered by read_deadline_ms is taken as NOT_LEADER_OR_FOLLOWER for its
partitions, and a WatchFetch unanswered past max_wait_ms (plus a grace) as the
purgatory's own expiry (the fetch reads again and answers), the connection left open.

A real node runs a real RequestHandler; stand-ins take the place of the shard and the
purgatory of a process that does not answer (tests/broker/test_processes.py checks a
Read of a paused process with real processes; a process stopping between a fetch's
Read and its WatchFetch cannot be timed there, hence the stand-in purgatory here).
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.parser import KafkaProtocol

from actors.apis.base import HandlerContext
from actors.apis.fetch import (
    CARRY_BYTES_PER_MS,
    READ_DEADLINE_CAP_MS,
    READ_DEADLINE_FLOOR_MS,
    WATCH_DEADLINE_GRACE_MS,
    carry_ms,
    read_deadline_ms,
)
from actors.core.topic_store import TopicEntry
from actors.request_handler import RequestHandler
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.actors.test_request_handler_deadline import Sink
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    GetStats,
    KafkaRequest,
    Read,
    ReadDone,
    ReadDoneRow,
    ReadRow,
    WatchFetch,
)

NOT_LEADER = 6  # NOT_LEADER_OR_FOLLOWER
REQUEST_TIMEOUT_MS = 600  # the broker's request.timeout.ms here: abandon after 1.2 s


class Shard(Actor):
    """Stands for a shard: answers every Read with no records (nothing past the offset),
    or, ``held``, keeps every Read (its process does not answer)."""

    def __init__(self, node: Any, name: str, *, held: bool = False, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.held = held

    def setup(self) -> None:
        self.reads = 0

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        self.reads += 1
        if not self.held:
            self.reply(ReadDone(msg.req_id, [ReadDoneRow(r.topic, r.partition, 0, 0, 0, b"",
                                                         0, 0, 0) for r in msg.rows]))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return self.reads


class HeldPurgatory(Actor):
    """Stands for a purgatory whose process does not answer: keeps every WatchFetch."""

    def setup(self) -> None:
        self.watches = 0

    @handles(WatchFetch)
    def on_watch(self, _msg: WatchFetch) -> None:
        self.watches += 1

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return self.watches


def _fetch_frame(max_wait_ms: int) -> bytes:
    """A Fetch v11 of t-0 from offset 0, min_bytes 1, as the Processor hands it on."""
    cls = FetchRequest[11]
    request = cls(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                  isolation_level=0, session_id=0, session_epoch=-1,
                  topics=[("t", [(0, -1, 0, -1, 1 << 20)])], forgotten_topics_data=[],
                  rack_id="")
    protocol = KafkaProtocol(client_id="t")
    protocol.send_request(request)
    return bytes(protocol.send_bytes())[4:]


def _partition(frame: bytes) -> Any:
    """The one partition response of a Fetch v11 response frame (after its size and the
    correlation id)."""
    response = FetchResponse[11].decode(io.BytesIO(frame[8:]))
    return response.responses[0].partitions[0]


class Handler:
    """A RequestHandler with stand-ins for t-0's shard and purgatory."""

    def __init__(self, held_shard: bool) -> None:
        self.node = Node("fetch-deadline").start()
        topo = Topology(self.node.name, 1, 1, 1, 1, 1)
        ctx = HandlerContext(topo, Config({"request.timeout.ms": REQUEST_TIMEOUT_MS}), 1,
                             "127.0.0.1", 9092, "cluster", 0, {"t": TopicEntry(1, {})},
                             clock=self.node.clock)
        self.shard = self.node.spawn(Shard, topo.shard_for("t", 0).name, held=held_shard)
        self.purgatory = self.node.spawn(HeldPurgatory, topo.purgatory_for("t", 0).name)
        self.processor = self.node.spawn(Sink, "processor-0")
        self.handler = self.node.spawn(RequestHandler, "handler-0", context=ctx)

    def fetch(self, conn: int, max_wait_ms: int) -> int:
        sent = time.monotonic_ns()
        self.node.tell(self.handler, KafkaRequest(conn, 0, "processor-0", 1, 11, conn,
                                                  _fetch_frame(max_wait_ms), sent))
        return sent

    def answered(self, conn: int) -> list[Any]:
        got: list[Any] = wait_for(
            lambda: self.node.ask(self.processor, GetStats()).get(str(conn)),
            f"the answer on connection {conn}", timeout=20)
        return got

    def close(self) -> None:
        self.node.shutdown(timeout=5)


@pytest.fixture
def handler(request: pytest.FixtureRequest) -> Iterator[Handler]:
    h = Handler(held_shard=getattr(request, "param", False))
    yield h
    h.close()


def test_a_watch_its_purgatory_does_not_answer_ends_at_max_wait_and_reads_again(
        handler: Handler) -> None:
    sent = handler.fetch(1, 300)
    respond, close, frame, at = handler.answered(1)
    assert (respond, close) == (True, False), "the connection must stay open"
    row = _partition(frame)
    assert row.error_code == 0, row  # no error: read again, nothing there yet
    waited_ms = (at - sent) / 1e6
    # by the watch's deadline (max_wait_ms + the grace), not at the abandon time
    assert 300 + WATCH_DEADLINE_GRACE_MS <= waited_ms < 1100, waited_ms
    assert handler.node.ask(handler.shard, GetStats()) == 2, "read again after the watch"
    assert handler.node.ask(handler.purgatory, GetStats()) == 1
    assert handler.node.metrics.get("internal_calls_timed_out") == 1
    assert handler.node.metrics.get("requests_abandoned") == 0


@pytest.mark.parametrize("handler", [True], indirect=True)  # (a shard that keeps its Reads)
def test_a_read_its_shard_does_not_answer_is_not_leader_or_follower_by_its_deadline(
        handler: Handler) -> None:
    sent = handler.fetch(2, 0)
    respond, close, frame, at = handler.answered(2)
    assert (respond, close) == (True, False), "the connection must stay open"
    row = _partition(frame)
    assert row.error_code == NOT_LEADER, row
    waited_ms = (at - sent) / 1e6
    assert READ_DEADLINE_FLOOR_MS <= waited_ms < 1100, waited_ms
    assert handler.node.ask(handler.purgatory, GetStats()) == 0
    assert handler.node.metrics.get("internal_calls_timed_out") == 1


def test_the_read_deadline_is_max_wait_ms_within_its_floor_and_cap() -> None:
    floor, cap = READ_DEADLINE_FLOOR_MS, READ_DEADLINE_CAP_MS
    assert read_deadline_ms(0) == floor
    assert read_deadline_ms(-1) == floor
    assert read_deadline_ms(floor + 300) == floor + 300
    assert read_deadline_ms(2**31 - 1) == cap


def test_a_read_of_another_process_is_given_the_time_to_carry_its_bytes() -> None:
    """The most a Read may bring (its partitions' partition_max_bytes, within the fetch's
    max_bytes) at CARRY_BYTES_PER_MS."""
    rows = [ReadRow("t", p, 0, 1 << 20) for p in range(4)]
    assert carry_ms(rows, 50 << 20) == (4 << 20) // CARRY_BYTES_PER_MS  # 419 ms
    assert carry_ms(rows, 1 << 20) == (1 << 20) // CARRY_BYTES_PER_MS
    huge = [ReadRow("t", 0, 0, 2**31 - 1)]
    assert carry_ms(huge, 57_671_680) == 57_671_680 // CARRY_BYTES_PER_MS  # 5.8 s at most
