"""A RequestHandler answers a call that opts in to a deadline (Call.deadline_ms) by that
deadline when its target does not answer: a Produce whose shard's process is paused gets
REQUEST_TIMED_OUT for that shard's partitions by its own timeout_ms (plus a grace), its
connection open; the real answer, should it come later, is dropped and counted.

A real node runs a real RequestHandler; a HeldShard actor stands for a shard whose process
does not answer (it keeps every Append), a Sink for the Processor (the responses, with the
time each came). tests/broker/test_processes.py checks the same with a paused process.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from loguru import logger

from actors.apis import produce
from actors.apis.base import HandlerContext
from actors.apis.produce import (
    PRODUCE_DEADLINE_CAP_MS,
    PRODUCE_DEADLINE_GRACE_MS,
    produce_deadline_ms,
)
from actors.core.record_batch import build_batch
from actors.core.topic_store import TopicEntry
from actors.request_handler import RequestHandler
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendDoneRow,
    GetStats,
    KafkaRequest,
    KafkaResponse,
)

TIMED_OUT = 7  # REQUEST_TIMED_OUT
REQUEST_TIMEOUT_MS = 600  # the broker's request.timeout.ms here: abandon after 1.2 s


class HeldShard(Actor):
    """Stands for a shard whose process does not answer: keeps every Append."""

    def setup(self) -> None:
        self.held: list[Append] = []

    @handles(Append)
    def on_append(self, msg: Append) -> None:
        self.held.append(msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return [[m.req_id, m.acks, m.timeout_ms] for m in self.held]


class Sink(Actor):
    """Stands for the Processor: each connection's answer and when it came."""

    def setup(self) -> None:
        self.responses: dict[str, list[Any]] = {}

    @handles(KafkaResponse)
    def on_response(self, msg: KafkaResponse) -> None:
        self.responses[str(msg.conn_id)] = [msg.respond, msg.close, bytes(msg.frame),
                                            time.monotonic_ns()]

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return dict(self.responses)


def _produce_frame(acks: int, timeout_ms: int) -> bytes:
    """A Produce v9 of one record to t-0, as the Processor hands it on (no size prefix)."""
    cls = ProduceRequest[9]
    request = cls(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        cls.TopicProduceData(name="t", partition_data=[
            cls.TopicProduceData.PartitionProduceData(index=0,
                                                      records=build_batch([b"v"]))])])
    protocol = KafkaProtocol(client_id="t")
    protocol.send_request(request)
    return bytes(protocol.send_bytes())[4:]


def _partition(frame: bytes) -> Any:
    """The one partition response of a Produce v9 response frame (after its size, the
    correlation id and an empty tagged-field section)."""
    return ProduceResponse[9].decode(io.BytesIO(frame[9:])).responses[0].partition_responses[0]


class Handler:
    """A RequestHandler whose one shard never answers; every node shut down at the end."""

    def __init__(self) -> None:
        self.node = Node("deadline").start()
        topo = Topology(self.node.name, 1, 1, 1, 1, 1)
        ctx = HandlerContext(topo, Config({"request.timeout.ms": REQUEST_TIMEOUT_MS}), 1,
                             "127.0.0.1", 9092, "cluster", 0, {"t": TopicEntry(1, {})},
                             clock=self.node.clock)
        self.shard = topo.shard_for("t", 0)
        self.node.spawn(HeldShard, self.shard.name)
        self.processor = self.node.spawn(Sink, "processor-0")
        self.handler = self.node.spawn(RequestHandler, "handler-0", context=ctx)
        self.lines: list[str] = []
        self.sink = logger.add(lambda m: self.lines.append(str(m)), level="WARNING")

    def produce(self, conn: int, acks: int, timeout_ms: int) -> int:
        """Send a Produce on connection ``conn``; the monotonic time it was sent."""
        sent = time.monotonic_ns()
        self.node.tell(self.handler, KafkaRequest(conn, 0, "processor-0", 0, 9, conn,
                                                  _produce_frame(acks, timeout_ms), sent))
        return sent

    def answered(self, conn: int) -> list[Any]:
        got: list[Any] = wait_for(
            lambda: self.node.ask(self.processor, GetStats()).get(str(conn)),
            f"the answer on connection {conn}", timeout=20)
        return got

    def held(self) -> list[list[int]]:
        held: list[list[int]] = self.node.ask(self.shard, GetStats())
        return held

    def in_flight(self) -> int:
        return int(self.node.ask(self.handler, GetStats())["in_flight"])

    def close(self) -> None:
        logger.remove(self.sink)
        self.node.shutdown(timeout=5)


@pytest.fixture
def handler(monkeypatch: pytest.MonkeyPatch) -> Iterator[Handler]:
    # no grace: a deadline is timeout_ms itself, so the tests tell it from the sweep a second
    monkeypatch.setattr(produce, "PRODUCE_DEADLINE_GRACE_MS", 0)
    produce_deadline_ms.cache_clear()
    h = Handler()
    yield h
    h.close()
    produce_deadline_ms.cache_clear()


def test_an_unanswered_append_is_answered_request_timed_out_by_its_deadline(
        handler: Handler) -> None:
    """A handler that swept a moment ago (a produce with a far deadline is pending) sweeps
    next at a new call's deadline, not a second after the last sweep."""
    handler.produce(9, -1, 60_000)
    wait_for(lambda: handler.in_flight() == 1, "the far produce pending")
    sent = handler.produce(1, -1, 100)
    respond, close, frame, at = handler.answered(1)
    assert (respond, close) == (True, False), "the connection must stay open"
    row = _partition(frame)
    assert row.error_code == TIMED_OUT, row
    assert "did not answer within 100 ms" in row.error_message, row.error_message
    waited_ms = (at - sent) / 1e6
    # by its deadline, not at the next whole-second sweep (~1,000 ms after the far
    # produce's) nor at the abandon time (twice request.timeout.ms, with the connection
    # closed)
    assert 100 <= waited_ms < 900, waited_ms
    assert handler.in_flight() == 1  # the far one
    assert handler.node.metrics.get("internal_calls_timed_out") == 1
    assert handler.node.metrics.get("requests_abandoned") == 0
    # an Append's deadline (acks=-1 waits for the followers too) marks no process silent:
    # the next Produce to it gets its own deadline, not the short one of a Fetch's Read
    assert handler.node.metrics.get("processes_marked_silent") == 0
    # the shard's process runs again and answers: too late, dropped and counted
    [[req_id, acks, timeout_ms]] = [h for h in handler.held() if h[2] == 100]
    assert (acks, timeout_ms) == (-1, 100)
    handler.node.tell(handler.handler, AppendDone(req_id, [
        AppendDoneRow("t", 0, 0, 0, -1, 0, None)]), sender=handler.shard.name)
    wait_for(lambda: handler.node.metrics.get("internal_answers_late") == 1,
             "the late answer counted")
    assert handler.node.ask(handler.processor, GetStats())["1"][3] == at, "answered twice"
    assert not [line for line in handler.lines if "unknown request" in line], handler.lines
    assert len([line for line in handler.lines if "got no answer from" in line]) == 1


def test_acks_1_waits_at_least_request_timeout_ms_whatever_its_timeout_ms(
        handler: Handler) -> None:
    """Kafka reads timeout_ms for acks=-1 alone: an acks=1 Produce with timeout_ms 0 waits
    request.timeout.ms for its shard's process before it is answered REQUEST_TIMED_OUT."""
    sent = handler.produce(2, 1, 0)
    respond, close, frame, at = handler.answered(2)
    assert (respond, close) == (True, False)
    assert _partition(frame).error_code == TIMED_OUT
    waited_ms = (at - sent) / 1e6
    assert waited_ms >= REQUEST_TIMEOUT_MS, waited_ms
    assert waited_ms < 2 * REQUEST_TIMEOUT_MS + 1000, waited_ms  # (the abandon would close)
    assert handler.in_flight() == 0


def test_an_acks_0_produce_leaves_nothing_pending(handler: Handler) -> None:
    """acks=0: nothing is answered; past its deadline the failed produce closes the
    connection, as any failed acks=0 produce (Kafka's way to make the client look again),
    and nothing stays pending."""
    handler.produce(3, 0, 0)
    respond, close, frame, _at = handler.answered(3)
    assert (respond, close, frame) == (False, True, b"")
    assert handler.in_flight() == 0
    assert handler.node.metrics.get("requests_abandoned") == 0
    assert handler.node.metrics.get("internal_calls_timed_out") == 1


def test_the_produce_deadline_clamps_timeout_ms() -> None:
    grace, cap = PRODUCE_DEADLINE_GRACE_MS, PRODUCE_DEADLINE_CAP_MS
    assert produce_deadline_ms(-1, 1500, 30_000) == 1500 + grace
    assert produce_deadline_ms(-1, 0, 30_000) == grace
    assert produce_deadline_ms(-1, -5, 30_000) == grace
    assert produce_deadline_ms(-1, 2**31 - 1, 30_000) == cap + grace
    for acks in (0, 1):
        assert produce_deadline_ms(acks, 0, 30_000) == 30_000 + grace
        assert produce_deadline_ms(acks, -1, 30_000) == 30_000 + grace
        assert produce_deadline_ms(acks, 60_000, 30_000) == 60_000 + grace
        assert produce_deadline_ms(acks, 2**31 - 1, 30_000) == cap + grace
        assert produce_deadline_ms(acks, 0, 2**31 - 1) == cap + grace



def test_answers_to_no_pending_call_are_counted_and_said_once_an_interval(
        handler: Handler) -> None:
    """Answers to no call of the handler (a resumed process's answers to requests abandoned
    meanwhile: here ids never sent) are dropped and counted, with one warning line for the
    lot, not one each."""
    for req_id in range(900_001, 900_051):
        handler.node.tell(handler.handler, AppendDone(req_id, [
            AppendDoneRow("t", 0, 0, 0, -1, 0, None)]), sender=handler.shard.name)
    wait_for(lambda: handler.node.metrics.get("internal_answers_unknown") == 50,
             "the unknown answers counted")
    said = [line for line in handler.lines if "unknown request" in line]
    assert len(said) == 1, said
    assert "AppendDone to unknown request 900001 from " in said[0], said
    # the handler serves on: a produce to the held shard is answered by its deadline
    handler.produce(3, -1, 100)
    assert _partition(handler.answered(3)[2]).error_code == TIMED_OUT
