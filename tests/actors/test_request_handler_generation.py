"""A RequestHandler and a process restart of its broker (num.processes > 1): what it sent
before it learnt of the restart is given up and never written; what it sends after is
stamped with the new generation, written and answered.

Two real nodes stand for processes 0 and 1 of one broker, joined by direct links as in a
broker: process 0 runs a real RequestHandler (its gateway in the handler's loop, so its
frames to process 1 take the direct link), process 1 a real PartitionShard leading the
partition. Process 1 stops (dies); a Produce sent meanwhile waits in the link; the handler
is told ProcessStarted(1, generation 1) and closes that request's connection; process 1
starts again as generation 1 on the same log dir, the link delivers the waiting Append,
and the shard refuses it; the Produce the handler sent after it learnt of the restart
(stamped with generation 1, waiting in the link as well) is written and answered.

A handler that never hears of the restart learns the generation from the shard's
refusal, which carries it every time: should one such notice be lost as well, the next
refusal tells it again.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from actors.apis.base import HandlerContext
from actors.core.log_dir import LogDir
from actors.core.record_batch import build_batch
from actors.core.topic_store import TopicEntry
from actors.partition_shard import PartitionShard
from actors.purgatory import PurgatoryShard
from actors.request_handler import RequestHandler
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Directory, Node, NodeEndpoint
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import CheckpointOffsets, GetStats, KafkaRequest, KafkaResponse, Schedule
from wire.cluster_messages import ProcessStarted

MAIN, P1 = "node-1", "node-1-p1"
PID = 4000


class Sink(Actor):
    """Stands in for process 0's Processor (the KafkaResponses, by connection), its
    LogManager and process 1's Timer."""

    def setup(self) -> None:
        self.responses: dict[str, list[Any]] = {}

    @handles(KafkaResponse)
    def on_response(self, msg: KafkaResponse) -> None:
        self.responses[str(msg.conn_id)] = [msg.respond, msg.close, bytes(msg.frame)]

    @handles(CheckpointOffsets, Schedule)
    def on_other(self, _msg: Any) -> None:
        pass

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return dict(self.responses)


def _topology(node: str) -> Topology:
    return Topology(node, 1, 1, 2, 2, 1, home=MAIN, process_nodes=(MAIN, P1))


def _process_1(directory: Directory, data: Path, generation: int) -> Node:
    """Process 1 of the broker as the supervisor starts it: its shard (leading the topic
    table's partitions it owns), purgatory and timer, and its gateway last."""
    topo = _topology(P1)
    node = Node(P1, directory=directory, direct_peers=directory.nodes)
    node.start(gateway=False)
    node.spawn(PartitionShard, topo.shard(1).name, topology=topo, config=Config(),
               log_dir=LogDir.open(data), topics={"c": TopicEntry(4, {})}, broker_id=1,
               clock=node.clock, generation=generation)
    node.spawn(PurgatoryShard, topo.purgatory(1).name, topology=topo, clock=node.clock)
    node.spawn(Sink, topo.timer.name)
    node.start_gateway(host=topo.shard(1).name)
    return node


def _produce_frame(partition: int, value: bytes, epoch: int, sequence: int) -> bytes:
    """A Produce v9 request (acks 1) of one idempotent batch, as a client frames it (less
    its size prefix, as the Processor hands it on)."""
    cls = ProduceRequest[9]
    batch = build_batch([value], producer_id=PID, producer_epoch=epoch,
                        base_sequence=sequence)
    request = cls(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
        cls.TopicProduceData(name="c", partition_data=[
            cls.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])
    protocol = KafkaProtocol(client_id="t")
    protocol.send_request(request)
    return bytes(protocol.send_bytes())[4:]


def _error_code(frame: bytes) -> int:
    """The partition's error code in a Produce v9 response frame (after its size, the
    correlation id and an empty tagged-field section)."""
    response = ProduceResponse[9].decode(io.BytesIO(frame[9:]))
    return int(response.responses[0].partition_responses[0].error_code)


class Broker:
    """Process 0 (a real RequestHandler, its gateway in the handler's loop; a Sink as its
    Processor and LogManager) and process 1 (a real shard), started and stopped as a test
    says; every node shut down at the end."""

    def __init__(self, tmp_path: Path) -> None:
        ipc = str(tmp_path / "ipc")
        self.directory = Directory({MAIN: NodeEndpoint("127.0.0.1", 0, ipc),
                                    P1: NodeEndpoint("127.0.0.1", 0, ipc)})
        self.data = tmp_path / "data"
        topo = _topology(MAIN)
        self.partition = next(p for p in range(4)
                              if topo.shard_for("c", p) == Address(P1, "shard-1"))
        self.main = Node(MAIN, directory=self.directory, direct_peers=self.directory.nodes)
        self.nodes = [self.main]
        self.main.start(gateway=False)
        ctx = HandlerContext(topo, Config(), 1, "127.0.0.1", 9092, "cluster", 0,
                             {"c": TopicEntry(4, {})}, clock=self.main.clock)
        self.handler = self.main.spawn(RequestHandler, "handler-0", context=ctx)
        self.processor = self.main.spawn(Sink, "processor-0")
        self.main.spawn(Sink, topo.log_manager.name)
        self.main.start_gateway(host="handler-0")
        self.p1: Node | None = None

    def start_process_1(self, generation: int) -> None:
        self.p1 = _process_1(self.directory, self.data, generation)
        self.nodes.append(self.p1)

    def kill_process_1(self) -> None:
        assert self.p1 is not None
        self.p1.shutdown(timeout=5)
        self.nodes.remove(self.p1)
        self.p1 = None

    def produce(self, conn: int, value: bytes, epoch: int, sequence: int) -> None:
        """A client's Produce on connection ``conn`` (one record, acks 1), to process 0."""
        self.main.tell(self.handler, KafkaRequest(
            conn, 0, "processor-0", 0, 9, conn,
            _produce_frame(self.partition, value, epoch, sequence),
            self.main.clock.monotonic_ns()))

    def answered(self, conn: int) -> list[Any]:
        """[respond, close, frame] of the answer on connection ``conn``, once it came."""
        got: list[Any] = wait_for(
            lambda: self.main.ask(self.processor, GetStats()).get(str(conn)),
            f"the answer on connection {conn}")
        return got

    def shard_stats(self) -> dict[str, Any]:
        assert self.p1 is not None
        stats: dict[str, Any] = self.p1.ask(Address(P1, "shard-1"), GetStats())
        return stats

    def log_end(self) -> int:
        return int(self.shard_stats()["partitions"][f"c-{self.partition}"][2])

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.shutdown(timeout=5)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.close()


def test_a_handler_told_of_a_restart_gives_up_what_it_sent_before_and_stamps_what_after(
        broker: Broker) -> None:
    broker.start_process_1(0)
    broker.produce(1, b"first", 0, 0)  # generation 0 writes it
    assert broker.answered(1)[:2] == [True, False]
    assert broker.log_end() == 1
    broker.kill_process_1()
    broker.produce(2, b"late", 0, 1)  # its Append waits in the direct link
    broker.main.tell(broker.handler, ProcessStarted(1, True, 1), sender="replica-manager")
    assert broker.answered(2)[:2] == [False, True], "the request was not given up"
    # the client sends the record again (as librdkafka does once an answer told it a
    # batch was not written: a new producer epoch, from sequence 0); the handler stamps
    # it with generation 1, and it waits in the link too
    broker.produce(3, b"late", 1, 0)
    # told again (a late copy): nothing more is given up (the retry was stamped 1)
    broker.main.tell(broker.handler, ProcessStarted(1, True, 1), sender="replica-manager")

    broker.start_process_1(1)  # its supervisor starts it again
    # the link delivers both, in order: the given-up Append refused, the retry written
    assert broker.answered(3)[:2] == [True, False], "the retry was given up"
    assert _error_code(broker.answered(3)[2]) == 0
    assert broker.log_end() == 2, "the given-up Append was written"
    assert broker.shard_stats()["stale_appends_refused"] == 1
    assert broker.main.ask(broker.handler, GetStats())["in_flight"] == 0


def test_a_handler_not_told_of_the_restart_learns_it_from_a_refusal(
        broker: Broker) -> None:
    """Should the notice never reach a handler, its stamps would stay old and every Append
    of it to the new process be refused. The refusal tells it the generation: the client
    of the refused request sees NOT_LEADER_OR_FOLLOWER, the next request is written."""
    broker.start_process_1(1)
    broker.produce(1, b"stale", 0, 0)
    respond, close, frame = broker.answered(1)
    assert (respond, close) == (True, False)
    assert _error_code(frame) == 6  # NOT_LEADER_OR_FOLLOWER
    assert broker.log_end() == 0
    broker.produce(2, b"stale", 1, 0)
    assert broker.answered(2)[:2] == [True, False]
    assert _error_code(broker.answered(2)[2]) == 0, "the handler still stamps the old one"
    assert broker.log_end() == 1, "the handler still stamps the old generation"
    assert broker.shard_stats()["stale_appends_refused"] == 1


def test_a_handler_whose_notices_were_lost_learns_the_generation_at_the_next_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ProcessStarted of the restart never came, and the one that followed the first
    refusal is lost too (dropped here before the handler takes it): the second refusal
    tells the generation again, and the third request is written. (A shard that told each
    sender once left this handler refused NOT_LEADER_OR_FOLLOWER until the next
    restart.)"""
    real = RequestHandler.on_process_restarted
    dropped: list[Any] = []

    def lose_first(self: RequestHandler, msg: ProcessStarted) -> None:
        if not dropped:
            dropped.append(msg)
            return
        real(self, msg)

    lose_first.__actorlog_handles__ = (ProcessStarted,)  # type: ignore[attr-defined]
    # handlers are bound when an actor is made: patched before the broker starts
    monkeypatch.setattr(RequestHandler, "on_process_restarted", lose_first)
    broker = Broker(tmp_path)
    try:
        broker.start_process_1(1)
        for conn in (1, 2):
            broker.produce(conn, b"stale", 0, 0)
            assert _error_code(broker.answered(conn)[2]) == 6  # NOT_LEADER_OR_FOLLOWER
        wait_for(lambda: len(dropped) == 1, "the first notice, lost")
        assert dropped[0].generation == 1
        broker.produce(3, b"stale", 1, 0)
        assert _error_code(broker.answered(3)[2]) == 0, "still stamped with the old one"
        assert broker.log_end() == 1
        assert broker.shard_stats()["stale_appends_refused"] == 2
    finally:
        broker.close()
