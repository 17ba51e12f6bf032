"""A Fetch's handler answers by its calls' deadlines when a shard's or a purgatory's
process does not answer (num.processes > 1: paused, or restarted and not ready yet):
a Read of another process unanswered by read_deadline_ms (and the time to carry its
bytes) is taken as NOT_LEADER_OR_FOLLOWER for its partitions, and a WatchFetch to
another process unanswered past max_wait_ms (plus a grace) as the purgatory's own
expiry (the fetch reads again and answers), the connection left open. A call to the
handler's own process has no deadline: a one-process broker's fetch is as it always was.

Two real nodes stand for processes 0 and 1 of one broker, joined by direct links as in a
broker: process 0 runs a real RequestHandler, process 1 stand-ins for the shard and the
purgatory of a process that does not answer (tests/broker/test_processes.py checks a
Read of a paused process with real processes; a process stopping between a fetch's
Read and its WatchFetch cannot be timed there, hence the stand-in purgatory here).
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.parser import KafkaProtocol

from actors import request_handler
from actors.apis import list_offsets, replica_fetch
from actors.apis.base import HandlerContext
from actors.apis.fetch import (
    CARRY_BYTES_PER_MS,
    READ_DEADLINE_CAP_MS,
    READ_DEADLINE_FLOOR_MS,
    WATCH_DEADLINE_GRACE_MS,
    _read_calls,
    carry_ms,
    read_deadline_ms,
    watch_call,
)
from actors.apis.list_offsets import LIST_OFFSETS_DEADLINE_MS
from actors.core.topic_store import TopicEntry
from actors.request_handler import SILENT_DEADLINE_MS, RequestHandler
from actors.runtime.actor import Actor, handles
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.runtime.node import Directory, Node, NodeEndpoint
from actors.topology import Topology
from tests.actors.test_request_handler_deadline import Sink
from tests.broker.rawclient import build
from tests.fixtures.waiting import wait_for
from wire.admin_messages import (
    DeleteRecords,
    DeleteRecordsDone,
    DeleteRecordsDoneRow,
    DescribeLogDir,
    DescribeLogDirDone,
    LogDirPartitionRow,
)
from wire.broker_messages import (
    DescribeProducers,
    DescribeProducersDone,
    DescribeProducersDoneRow,
    GetStats,
    KafkaRequest,
    ListOffsetsRow,
    Read,
    ReadDone,
    ReadDoneRow,
    ReadRow,
    WatchFetch,
)
from wire.cluster_messages import ProcessStarted
from wire.registry import message
from wire.replication_messages import (
    OffsetForEpochDoneRow,
    OffsetForLeaderEpoch,
    OffsetForLeaderEpochDone,
    ReplicaFetch,
    ReplicaFetchRow,
    ReplicaReadRow,
)

NOT_LEADER = 6  # NOT_LEADER_OR_FOLLOWER
EPOCH_END = 42  # where the stand-in shard says an epoch ends
PARTITION_SIZE = 1234  # a partition's size in the stand-in shard's log dir
REQUEST_TIMEOUT_MS = 600  # the broker's request.timeout.ms here: abandon after 1.2 s
MAIN, P1 = "node-1", "node-1-p1"
PARTITIONS = 4


def _topology(node: str) -> Topology:
    """A broker of two processes: shard i and purgatory i in process i % 2."""
    return Topology(node, 1, 1, 2, 2, 1, home=MAIN, process_nodes=(MAIN, P1))


def _partition_of(topo: Topology, node: str) -> int:
    """A partition of t whose shard and purgatory run in ``node``'s process."""
    return next(p for p in range(PARTITIONS)
                if topo.shard_for("t", p).node == node == topo.purgatory_for("t", p).node)


def _partitions_of(topo: Topology, shard: int) -> tuple[int, ...]:
    """The partitions of t that shard ``shard`` owns."""
    return tuple(p for p in range(PARTITIONS) if topo.shard_for("t", p) == topo.shard(shard))


@message(9881)
class Hold(NamedTuple):
    """Tells the stand-in Shard to keep the calls it gets (``held``) or answer them; with
    ``answer_kept``, it first answers those it kept (late: its process ran again)."""

    held: bool
    answer_kept: bool


class Shard(Actor):
    """Stands for a shard of t's ``partitions``: answers every Read with no records
    (nothing past the offset), an OffsetForLeaderEpoch with the epoch asked ending at
    EPOCH_END, a DescribeProducers with no producers, a DeleteRecords with the offset as
    the low watermark, a DescribeLogDir with its partitions of PARTITION_SIZE bytes; or,
    ``held``, keeps every call (its process does not answer)."""

    def __init__(self, node: Any, name: str, *, held: bool = False,
                 partitions: tuple[int, ...] = (), **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.held = held
        self.partitions = partitions

    def setup(self) -> None:
        self.reads = 0
        self.kept: list[tuple[Any, Any]] = []

    def _take(self, msg: Any) -> None:
        if self.held:
            self.kept.append((self.current_sender, msg))
        else:
            self.reply(self._answer(msg))

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        self.reads += 1
        self._take(msg)

    @handles(OffsetForLeaderEpoch, DescribeProducers, DeleteRecords, DescribeLogDir)
    def on_call(self, msg: Any) -> None:
        self._take(msg)

    def _answer(self, msg: Any) -> Any:
        if isinstance(msg, Read):
            return _empty(msg)
        if isinstance(msg, OffsetForLeaderEpoch):
            return OffsetForLeaderEpochDone(msg.req_id, [
                OffsetForEpochDoneRow(r.topic, r.partition, 0, r.leader_epoch, EPOCH_END)
                for r in msg.rows])
        if isinstance(msg, DescribeProducers):
            return DescribeProducersDone(msg.req_id, [
                DescribeProducersDoneRow(r.topic, r.partition, 0, []) for r in msg.rows])
        if isinstance(msg, DeleteRecords):
            return DeleteRecordsDone(msg.req_id, [
                DeleteRecordsDoneRow(r.topic, r.partition, r.offset, 0, None) for r in msg.rows])
        assert isinstance(msg, DescribeLogDir)
        return DescribeLogDirDone(msg.req_id, "/stand-in/log-dir", 1 << 30, 1 << 29, [
            LogDirPartitionRow("t", p, PARTITION_SIZE, 0) for p in self.partitions])

    @handles(Hold)
    def on_hold(self, msg: Hold) -> int:
        """Answers the number of kept calls it answered."""
        self.held = msg.held
        kept, self.kept = (self.kept, []) if msg.answer_kept else ([], self.kept)
        for sender, call in kept:
            self.tell(sender, self._answer(call))
        return len(kept)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return self.reads


def _empty(msg: Read) -> ReadDone:
    """A Read's answer with no records (nothing past the offset)."""
    return ReadDone(msg.req_id, [ReadDoneRow(r.topic, r.partition, 0, 0, 0, b"", 0, 0, 0)
                                 for r in msg.rows])


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


def _fetch_frame(partition: int, max_wait_ms: int, max_bytes: int = 1 << 20) -> bytes:
    """A Fetch v11 of t-``partition`` from offset 0, min_bytes 1, ``max_bytes`` (the
    partition's too), as the Processor hands it on."""
    cls = FetchRequest[11]
    request = cls(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                  isolation_level=0, session_id=0, session_epoch=-1,
                  topics=[("t", [(partition, -1, 0, -1, max_bytes)])],
                  forgotten_topics_data=[], rack_id="")
    protocol = KafkaProtocol(client_id="t")
    protocol.send_request(request)
    return bytes(protocol.send_bytes())[4:]


def _partition(frame: bytes) -> Any:
    """The one partition response of a Fetch v11 response frame (after its size and the
    correlation id)."""
    response = FetchResponse[11].decode(io.BytesIO(frame[8:]))
    return response.responses[0].partitions[0]


class Handler:
    """Process 0: a real RequestHandler (its gateway in the handler's loop, a Sink as its
    Processor); process 1: stand-ins for its shard and purgatory, of which ``partition``
    (a partition of t) is."""

    def __init__(self, tmp_path: Path, held_shard: bool) -> None:
        ipc = str(tmp_path / "ipc")
        directory = Directory({MAIN: NodeEndpoint("127.0.0.1", 0, ipc),
                               P1: NodeEndpoint("127.0.0.1", 0, ipc)})
        self.nodes: list[Node] = []
        self.node = Node(MAIN, directory=directory, direct_peers=directory.nodes)
        self.nodes.append(self.node)
        self.node.start(gateway=False)
        topo = _topology(MAIN)
        self.partition = _partition_of(topo, P1)
        ctx = HandlerContext(topo, Config({"request.timeout.ms": REQUEST_TIMEOUT_MS}), 1,
                             "127.0.0.1", 9092, "cluster", 0, {"t": TopicEntry(PARTITIONS, {})},
                             clock=self.node.clock)
        self.processor = self.node.spawn(Sink, "processor-0")
        self.handler = self.node.spawn(RequestHandler, "handler-0", context=ctx)
        # process 0's own shards: live stand-ins (answered at once, no deadline)
        self.own_partition = _partition_of(topo, MAIN)
        for i in topo.local_shards():
            self.node.spawn(Shard, f"shard-{i}", partitions=_partitions_of(topo, i))
        self.node.start_gateway(host="handler-0")
        self.p1 = Node(P1, directory=directory, direct_peers=directory.nodes)
        self.nodes.append(self.p1)
        self.p1.start(gateway=False)
        p1_topo = _topology(P1)
        shard = p1_topo.shard_for("t", self.partition)
        self.shard = self.p1.spawn(Shard, shard.name, held=held_shard,
                                   partitions=_partitions_of(p1_topo, int(shard.name[6:])))
        self.purgatory = self.p1.spawn(HeldPurgatory,
                                       p1_topo.purgatory_for("t", self.partition).name)
        self.p1.start_gateway(host=shard.name)

    def fetch(self, conn: int, max_wait_ms: int, max_bytes: int = 1 << 20) -> int:
        sent = time.monotonic_ns()
        self.node.tell(self.handler, KafkaRequest(
            conn, 0, "processor-0", 1, 11, conn,
            _fetch_frame(self.partition, max_wait_ms, max_bytes), sent))
        return sent

    def request(self, conn: int, api_key: int, version: int,
                values: dict[str, Any]) -> tuple[int, KafkaProtocol]:
        """Hands the handler a request as the Processor does; when it was sent, and the
        client protocol that reads its answer (``response``)."""
        protocol = KafkaProtocol(client_id="t")
        correlation_id = protocol.send_request(build(api_key, version, values))
        frame = bytes(protocol.send_bytes())[4:]
        sent = time.monotonic_ns()
        self.node.tell(self.handler, KafkaRequest(conn, 0, "processor-0", api_key, version,
                                                  correlation_id, frame, sent))
        return sent, protocol

    def response(self, conn: int, protocol: KafkaProtocol) -> tuple[Any, int]:
        """The answer on ``conn`` (the connection left open), and when it came (the
        monotonic clock's ns)."""
        respond, close, frame, at = self.answered(conn)
        assert (respond, close) == (True, False), "the connection must stay open"
        [(_, response)] = protocol.receive_bytes(frame)
        return response, at

    def answered(self, conn: int) -> list[Any]:
        got: list[Any] = wait_for(
            lambda: self.node.ask(self.processor, GetStats()).get(str(conn)),
            f"the answer on connection {conn}", timeout=30)
        return got

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.shutdown(timeout=5)


@pytest.fixture
def handler(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Handler]:
    h = Handler(tmp_path, held_shard=getattr(request, "param", False))
    yield h
    h.close()


@pytest.mark.parametrize("probe_after_ms", [0, request_handler.PROBE_AFTER_MS])
def test_a_watch_its_purgatory_does_not_answer_ends_at_max_wait_and_reads_again(
        handler: Handler, probe_after_ms: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch's deadline marks the purgatory's process silent, the watch its probe: the
    Read again is withheld (answered NOT_LEADER_OR_FOLLOWER by the short deadline) while
    that probe is outstanding; with PROBE_AFTER_MS 0 it goes as a new probe, and the
    stand-in shard (live, unlike the purgatory) answers it."""
    monkeypatch.setattr(request_handler, "PROBE_AFTER_MS", probe_after_ms)
    metrics = handler.node.metrics
    sent = handler.fetch(1, 300)
    respond, close, frame, at = handler.answered(1)
    assert (respond, close) == (True, False), "the connection must stay open"
    row = _partition(frame)
    waited_ms = (at - sent) / 1e6
    # by the watch's deadline (max_wait_ms + the 1 s grace), not at the abandon time (1.2 s
    # here, which a call with a deadline does not have); 3 s of a loaded host's slack
    assert 300 + 1_000 <= waited_ms < 300 + 1_000 + 3_000, waited_ms
    assert metrics.get("processes_marked_silent") == 1
    if probe_after_ms == 0:
        assert row.error_code == 0, row  # no error: read again, nothing there yet
        assert handler.p1.ask(handler.shard, GetStats()) == 2, "read again after the watch"
        assert metrics.get("internal_calls_to_silent") == 1
        assert metrics.get("internal_calls_timed_out") == 1
    else:
        assert row.error_code == NOT_LEADER, row
        assert handler.p1.ask(handler.shard, GetStats()) == 1, "the Read again withheld"
        assert metrics.get("internal_calls_withheld") == 1
        assert metrics.get("internal_calls_timed_out") == 2
    assert handler.p1.ask(handler.purgatory, GetStats()) == 1
    assert metrics.get("requests_abandoned") == 0


@pytest.mark.parametrize("handler", [True], indirect=True)  # (a shard that keeps its Reads)
@pytest.mark.parametrize("max_wait_ms", [0, 300])
def test_a_read_its_shard_does_not_answer_is_not_leader_or_follower_by_its_deadline(
        handler: Handler, max_wait_ms: int) -> None:
    """With a max_wait_ms too: a partition in error is answered at once (Kafka's
    fetchMessages), so a timed-out Read sends the fetch to no purgatory."""
    sent = handler.fetch(2, max_wait_ms)
    respond, close, frame, at = handler.answered(2)
    assert (respond, close) == (True, False), "the connection must stay open"
    row = _partition(frame)
    assert row.error_code == NOT_LEADER, row
    waited_ms = (at - sent) / 1e6
    # the floor (max_wait_ms under it) and the time to carry 1 MB, not the abandon time
    deadline = 5_000 + (1 << 20) // CARRY_BYTES_PER_MS
    assert deadline <= waited_ms < deadline + 3000, waited_ms
    assert handler.p1.ask(handler.purgatory, GetStats()) == 0
    assert handler.node.metrics.get("internal_calls_timed_out") == 1
    assert handler.node.metrics.get("requests_abandoned") == 0


def _fetch_answered(handler: Handler, conn: int, error_code: int,
                    max_bytes: int = 1 << 20) -> float:
    """A fetch of the process's partition on ``conn`` (max_wait_ms 0): how long its answer
    took (ms), its partition's code checked."""
    sent = handler.fetch(conn, 0, max_bytes)
    return _answer_of(handler, conn, error_code, sent)


def _answer_of(handler: Handler, conn: int, error_code: int, sent: int) -> float:
    respond, close, frame, at = handler.answered(conn)
    assert (respond, close) == (True, False), "the connection must stay open"
    assert _partition(frame).error_code == error_code, _partition(frame)
    return (at - sent) / 1e6


@pytest.mark.parametrize("handler", [True], indirect=True)  # (a shard that keeps its Reads)
@pytest.mark.parametrize("answer", ["late", "live", "restarted"])
def test_a_process_whose_read_timed_out_gets_the_short_deadline_till_it_answers(
        handler: Handler, answer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first fetch naming a partition of a process that does not answer waits the
    read's whole deadline and marks that process silent, its Read the probe; the next is
    answered NOT_LEADER_OR_FOLLOWER by SILENT_DEADLINE_MS (and the carry) without its Read
    being sent. The mark ends: ``late``, the shard answers the probe it kept (its deadline
    answered it); ``live``, the probe is lost (the shard keeps it for good), and the first
    fetch after PROBE_AFTER_MS (1 s here) sends its Read as a new probe, which the shard,
    live again, answers; ``restarted``, the notice that the process was started again (a
    new process: the silent one is gone), counted apart. The fetch after that, the shard
    keeping its Reads again, waits the whole deadline again."""
    monkeypatch.setattr(request_handler, "PROBE_AFTER_MS", 1_000)
    metrics = handler.node.metrics
    deadline = READ_DEADLINE_FLOOR_MS + (1 << 20) // CARRY_BYTES_PER_MS

    waited_ms = _fetch_answered(handler, 1, NOT_LEADER)
    assert deadline <= waited_ms < deadline + 3000, waited_ms
    assert metrics.get("processes_marked_silent") == 1
    waited_ms = _fetch_answered(handler, 2, NOT_LEADER)
    # its own deadline is 5.1 s: a tenth of it is a loaded host's slack for the 304 ms
    assert SILENT_DEADLINE_MS <= waited_ms < deadline / 10, waited_ms
    assert handler.p1.ask(handler.shard, GetStats()) == 1, "the probe alone was sent"
    assert metrics.get("internal_calls_withheld") == 1
    assert metrics.get("internal_calls_to_silent") == 0
    assert metrics.get("processes_marked_silent") == 1, "marked once"
    assert metrics.get("processes_answering_again") == 0
    if answer == "late":
        assert handler.p1.ask(handler.shard, Hold(held=True, answer_kept=True)) == 1
        wait_for(lambda: metrics.get("internal_answers_late") == 1, "the late answer")
        assert metrics.get("processes_answering_again") == 1
    elif answer == "restarted":
        handler.node.tell(handler.handler, ProcessStarted(1, True, 1))
        wait_for(lambda: metrics.get("silent_processes_restarted") == 1, "the mark cleared")
        assert metrics.get("processes_answering_again") == 0, "a new process, not the same"
    else:
        handler.p1.ask(handler.shard, Hold(held=False, answer_kept=False))
        time.sleep(1.1)  # the probe outstanding longer than PROBE_AFTER_MS: taken as lost
        _fetch_answered(handler, 3, 0)  # the new probe, answered by the shard
        assert metrics.get("internal_calls_to_silent") == 1
        assert handler.p1.ask(handler.shard, GetStats()) == 2
        assert metrics.get("processes_answering_again") == 1
        handler.p1.ask(handler.shard, Hold(held=True, answer_kept=False))
    waited_ms = _fetch_answered(handler, 4, NOT_LEADER)
    assert deadline <= waited_ms < deadline + 3000, waited_ms
    assert metrics.get("processes_marked_silent") == 2
    assert metrics.get("requests_abandoned") == 0
    assert metrics.get("internal_answers_unknown") == 0


@pytest.mark.parametrize("handler", [True], indirect=True)  # (a shard that keeps its Reads)
def test_while_a_process_is_silent_only_its_probe_is_sent(handler: Handler) -> None:
    """Marked silent, the process gets no more Reads than the one that marked it (the
    probe): several fetches of its partition, sent together, are each answered
    NOT_LEADER_OR_FOLLOWER by the short deadline (with the time to carry their bytes: a
    big read from a live process takes longer than 200 ms) and counted as withheld. When
    the shard answers the probe (late), the mark ends and the next fetch's Read is sent
    and answered by the shard; no answer ever comes for a withheld Read."""
    metrics = handler.node.metrics
    deadline = READ_DEADLINE_FLOOR_MS + (1 << 20) // CARRY_BYTES_PER_MS
    waited_ms = _fetch_answered(handler, 1, NOT_LEADER)
    assert deadline <= waited_ms < deadline + 3000, waited_ms
    assert metrics.get("processes_marked_silent") == 1

    big = 2 << 20  # 2 MB: 209 ms to carry
    sent = {conn: handler.fetch(conn, 0, big) for conn in range(2, 7)}
    for conn, at in sent.items():
        waited_ms = _answer_of(handler, conn, NOT_LEADER, at)
        short = SILENT_DEADLINE_MS + big // CARRY_BYTES_PER_MS
        assert short <= waited_ms < short + 2000, (conn, waited_ms)
    assert handler.p1.ask(handler.shard, GetStats()) == 1, "the probe alone was sent"
    assert metrics.get("internal_calls_withheld") == 5
    assert metrics.get("internal_calls_to_silent") == 0
    assert metrics.get("internal_calls_timed_out") == 6
    # only the probe's id is kept for a late answer: a withheld Read's can never come
    actor = handler.node.actors[handler.handler.name]
    assert isinstance(actor, RequestHandler)
    assert len(actor.timed_out_ids) == 1

    assert handler.p1.ask(handler.shard, Hold(held=False, answer_kept=True)) == 1
    wait_for(lambda: metrics.get("processes_answering_again") == 1, "the mark cleared")
    assert metrics.get("internal_answers_late") == 1
    waited_ms = _fetch_answered(handler, 7, 0)
    assert waited_ms < deadline / 10, waited_ms
    assert handler.p1.ask(handler.shard, GetStats()) == 2, "sent once the mark ended"
    assert metrics.get("internal_calls_withheld") == 5
    assert metrics.get("processes_marked_silent") == 1
    assert metrics.get("internal_answers_unknown") == 0
    assert metrics.get("requests_abandoned") == 0


@pytest.mark.parametrize("handler", [True], indirect=True)  # (a shard that keeps its Reads)
def test_a_short_deadline_passing_after_the_mark_ended_does_not_mark_again(
        handler: Handler) -> None:
    """A fetch given the short deadline while its process was marked, whose deadline
    passes after the process answered (the mark ended meanwhile), does not mark it again:
    that deadline was too short to say the process is silent. The fetch after it is sent
    and answered by the shard."""
    metrics = handler.node.metrics
    _fetch_answered(handler, 1, NOT_LEADER)
    assert metrics.get("processes_marked_silent") == 1
    big = 20 << 20  # 2.1 s to carry: the short deadline ends ~2.3 s after it is sent
    sent = handler.fetch(2, 0, big)
    # the probe answered (late) well within that: the mark ends before its deadline
    assert handler.p1.ask(handler.shard, Hold(held=False, answer_kept=True)) == 1
    wait_for(lambda: metrics.get("processes_answering_again") == 1, "the mark cleared")
    assert (time.monotonic_ns() - sent) / 1e6 < SILENT_DEADLINE_MS + big // CARRY_BYTES_PER_MS
    waited_ms = _answer_of(handler, 2, NOT_LEADER, sent)  # withheld: its deadline answers
    assert SILENT_DEADLINE_MS + big // CARRY_BYTES_PER_MS <= waited_ms, waited_ms
    assert metrics.get("internal_calls_timed_out") == 2
    assert metrics.get("processes_marked_silent") == 1, "not marked again"
    _fetch_answered(handler, 3, 0)
    assert handler.p1.ask(handler.shard, GetStats()) == 2
    assert metrics.get("internal_calls_withheld") == 1


def test_the_read_deadline_is_max_wait_ms_within_its_floor_and_cap() -> None:
    floor, cap = READ_DEADLINE_FLOOR_MS, READ_DEADLINE_CAP_MS
    assert (floor, cap) == (5_000, 10_000)  # never reached by a live process, however busy
    assert read_deadline_ms(0) == floor
    assert read_deadline_ms(-1) == floor
    assert read_deadline_ms(floor + 300) == floor + 300
    assert read_deadline_ms(2**31 - 1) == cap
    assert WATCH_DEADLINE_GRACE_MS == 1_000
    assert LIST_OFFSETS_DEADLINE_MS == 5_000


def test_a_read_of_another_process_is_given_the_time_to_carry_its_bytes() -> None:
    """The most a Read may bring (its partitions' partition_max_bytes, within the fetch's
    max_bytes) at CARRY_BYTES_PER_MS."""
    rows = [ReadRow("t", p, 0, 1 << 20) for p in range(4)]
    assert carry_ms(rows, 50 << 20) == (4 << 20) // CARRY_BYTES_PER_MS  # 419 ms
    assert carry_ms(rows, 1 << 20) == (1 << 20) // CARRY_BYTES_PER_MS
    huge = [ReadRow("t", 0, 0, 2**31 - 1)]
    assert carry_ms(huge, 57_671_680) == 57_671_680 // CARRY_BYTES_PER_MS  # 5.8 s at most


def _context(topo: Topology) -> HandlerContext:
    return HandlerContext(topo, Config(), 1, "127.0.0.1", 9092, "cluster", 0,
                          {"t": TopicEntry(PARTITIONS, {})}, clock=ManualClock())


def _calls(ctx: HandlerContext, partition: int) -> dict[str, Any]:
    """The calls a Fetch, a replica fetch and a ListOffsets of t-``partition`` make (the
    Read, the WatchFetch, the ReplicaRead, the ListOffsets), as their handlers build them."""
    [read] = _read_calls(ctx, -1, 1 << 20, [ReadRow("t", partition, 0, 1 << 20)], 0, 500)
    watch = watch_call(ctx, ctx.topology.purgatory_for("t", partition),
                       lambda rid: WatchFetch(rid, 1, 500, False, []), 500)
    [replica_read] = replica_fetch._calls(
        ctx, ReplicaFetch(1, 2, 500, 1, 10 << 20, [ReplicaFetchRow("t", partition, 0, 0, -1,
                                                                   1 << 20)]),
        [ReplicaReadRow("t", partition, 0, 0, -1, 1 << 20)], 500)
    offsets = list_offsets._call(ctx, ctx.topology.shard_for("t", partition), 0,
                                 [ListOffsetsRow("t", partition, -1)])
    return {"read": read, "watch": watch, "replica_read": replica_read, "offsets": offsets}


def test_a_fetch_of_a_one_process_broker_gives_its_calls_no_deadline() -> None:
    """One process: every shard and purgatory is the handler's own; nothing gets a
    deadline, the fetch path is as it was before deadlines (a loaded host can then never
    make one fire)."""
    ctx = _context(Topology(MAIN, 1, 1, 2, 2, 1))
    for p in range(PARTITIONS):
        for what, call in _calls(ctx, p).items():
            assert call.on_timeout is None, (p, what, call)
            assert call.deadline_ms == 0, (p, what, call)


def test_only_the_calls_to_another_process_have_a_deadline() -> None:
    """Two processes: the calls for a partition of the handler's own process have no
    deadline; those for one of the other process have the floors (5 s, plus the time to
    carry 1 MB for a read; max_wait_ms + 1 s for a watch; 5 s for a ListOffsets)."""
    topo = _topology(MAIN)
    ctx = _context(topo)
    for what, call in _calls(ctx, _partition_of(topo, MAIN)).items():
        assert call.on_timeout is None, (what, call)
        assert call.deadline_ms == 0, (what, call)
    calls = _calls(ctx, _partition_of(topo, P1))
    assert all(call.on_timeout is not None for call in calls.values()), calls
    # their deadlines passing says the process is silent (the handler's short deadlines)
    assert all(call.silence for call in calls.values()), calls
    carry = (1 << 20) // CARRY_BYTES_PER_MS
    assert {what: call.deadline_ms for what, call in calls.items()} == {
        "read": 5_000 + carry, "watch": 500 + 1_000, "replica_read": 5_000 + carry,
        "offsets": 5_000}
