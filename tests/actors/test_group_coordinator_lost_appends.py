"""A GroupCoordinator whose append gets no answer does not wait forever.

Real actors on a manual clock: the GroupCoordinator, the PartitionShard hosting
``__consumer_offsets`` (with its LogManager, purgatory and the Timer); only the
Controller is a stand-in (it says the topic exists). The answer to an append is
lost as it is in a broker: the shard stops (its process died) or crashes while
handling the Append and is restarted in place. The offset commit behind the
append is answered REQUEST_TIMED_OUT (Kafka's GroupMetadataManager passes the
append's timeout through to OffsetCommit) once APPEND_TIMEOUT_MS and the margin
are over, not before; the committed offset stays the one before; a late answer
(a shard only slow) is counted and ignored, and a reload reads what the log holds.
A SyncGroup whose assignment write is lost is answered REBALANCE_IN_PROGRESS and the
group goes back to PreparingRebalance (Kafka maps the group write's REQUEST_TIMED_OUT
so). A load's Read lost the same way is sent again after READ_TIMEOUT_MS.

And the give-up catches only a lost answer: a write that succeeds late (a shard with a
backlog) is a success; a load from a shard lagging for good takes the overdue answer
and finishes; a coordinator restarted at the crash's instant (the manual clock has not
moved) does not reuse the crashed instance's request ids.

And an admin's deletion of ``__consumer_offsets`` on a single node: the coordinator
starts over (parked requests and writes in flight answered) when told by the
Controller, or, if that word was lost, when an append is answered
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.group_coordinator import (
    ANSWER_BUCKET_MS,
    ANSWER_MARGIN_MS,
    APPEND_TIMEOUT_MS,
    READ_TIMEOUT_MS,
    GroupCoordinator,
)
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.purgatory import PurgatoryShard
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.timer import Timer
from actors.topology import Topology
from tests.fixtures.coordinator_node import ExistingTopicController, snapshot
from tests.fixtures.crash import crash_once
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendDoneRow,
    CreateTopicDoneRow,
    CreateTopics,
    CreateTopicsDone,
    DropPartitions,
    GetStats,
    OpenPartitionRow,
    OpenPartitions,
    Read,
    ShardDone,
    TopicEntry,
    TopicPartition,
    TopicsDeleted,
)
from wire.errors import ErrorCode
from wire.group_messages import (
    JoinGroup,
    JoinGroupDone,
    JoinProtocolRow,
    OffsetCommit,
    OffsetCommitDone,
    OffsetCommitRow,
    OffsetFetch,
    OffsetFetchDone,
    SyncGroup,
    SyncGroupDone,
)

NUM_PARTITIONS = 2
WAIT_MS = APPEND_TIMEOUT_MS + ANSWER_MARGIN_MS
TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)


class Probe(Actor):
    """Stands in for a request handler: keeps every answer it gets."""

    def setup(self) -> None:
        self.answers: list[Any] = []

    @handles(OffsetFetchDone, OffsetCommitDone, JoinGroupDone, SyncGroupDone, ShardDone)
    def on_answer(self, msg: Any) -> None:
        self.answers.append(msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return [list(a) for a in self.answers]


class RecreatingController(ExistingTopicController):
    """Says the topic exists; once ``deleted`` is set (an admin deleted it), a
    CreateTopics has the shard make its partitions again (before the answer, so the
    coordinator's reads find them) and is answered created."""

    partitions = NUM_PARTITIONS

    def setup(self) -> None:
        self.deleted = False
        self.topo = Topology.from_config(self.node.name, Config({
            "offsets.topic.num.partitions": self.partitions, "num.partition.shards": 1}))

    @handles(CreateTopics)
    def on_create(self, msg: CreateTopics) -> None:
        if not self.deleted:
            super().on_create(msg)
            return
        self.deleted = False
        self.tell(self.topo.shard(0), OpenPartitions(-1, [
            OpenPartitionRow(OFFSETS_TOPIC, p, {}) for p in range(self.partitions)]))
        self.reply(CreateTopicsDone(msg.req_id, [
            CreateTopicDoneRow(r.name, 0, None, self.partitions, 1) for r in msg.rows]))

    @handles(ShardDone)
    def on_shard_done(self, msg: ShardDone) -> None:
        assert not msg.failed, msg


class Broker:
    """One node's real coordinator and shard over a real log directory."""

    def __init__(self, node: Node, tmp_path: Path, shard_up: bool = True,
                 controller: type[Actor] = ExistingTopicController) -> None:
        self.node = node
        self.config = Config({"offsets.topic.num.partitions": NUM_PARTITIONS,
                              "num.group.coordinators": 1, "num.partition.shards": 1,
                              "num.io.threads": 1, "group.initial.rebalance.delay.ms": 0})
        self.topo = Topology.from_config(node.name, self.config)
        self.log_dir = LogDir.open(tmp_path)
        node.spawn(Timer, self.topo.timer.name, clock=node.clock)
        node.spawn(LogManager, self.topo.log_manager.name, log_dir=self.log_dir,
                   num_shards=1, clock=node.clock)
        node.spawn(PurgatoryShard, self.topo.purgatory(0).name, topology=self.topo,
                   clock=node.clock)
        self.spawn_shard()
        if not shard_up:
            node.stop_actor(self.topo.shard(0).name)
        node.spawn(controller, self.topo.controller.name)
        node.spawn(Probe, "probe")
        self.coordinator = node.spawn(GroupCoordinator, self.topo.coordinator(0).name,
                                      topology=self.topo, config=self.config,
                                      clock=node.clock, wait_for_handlers=False)
        if shard_up:
            self.wait_loaded()
        self.next_id = 0

    def spawn_shard(self) -> None:
        self.node.spawn(PartitionShard, self.topo.shard(0).name, topology=self.topo,
                        config=self.config, log_dir=snapshot(self.log_dir),
                        topics={OFFSETS_TOPIC: TopicEntry(NUM_PARTITIONS, {})}, broker_id=1,
                        clock=self.node.clock)

    def wait_loaded(self) -> None:
        wait_for(lambda: self.stats()["loaded"], "the load of __consumer_offsets")

    def advance(self, ms: int) -> None:
        """Move the clock and have every running actor take a turn on it."""
        self.node.clock.advance(ms)  # type: ignore[attr-defined]
        self.node.run_turns()

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.node.ask(self.coordinator, GetStats())
        return stats

    def commit(self, offset: int) -> int:
        self.next_id += 1
        self.node.tell(self.coordinator, OffsetCommit(
            self.next_id, "g", -1, "", None, [OffsetCommitRow("t", 0, offset, -1, "")]),
            sender="probe")
        return self.next_id

    def send(self, make: Any) -> int:
        self.next_id += 1
        self.node.tell(self.coordinator, make(self.next_id), sender="probe")
        return self.next_id

    def answer(self, req_id: int) -> list[Any] | None:
        found = [a for a in self.node.ask(Address(self.node.name, "probe"), GetStats())
                 if a[0] == req_id]
        return found[0] if found else None

    def committed(self) -> int:
        self.next_id += 1
        rid = self.next_id
        self.node.tell(self.coordinator, OffsetFetch(rid, "g", [TopicPartition("t", 0)]),
                       sender="probe")
        answer = wait_for(lambda: self.answer(rid), "the offset fetch")
        [row] = answer[2]
        offset: int = row[2]
        return offset

    def commit_error(self, req_id: int) -> int:
        answer = wait_for(lambda: self.answer(req_id), f"the answer to commit {req_id}")
        [[_topic, _partition, code]] = answer[1]
        return int(code)


def test_a_commit_whose_shard_stopped_is_answered_request_timed_out(
        manual_node: Node, tmp_path: Path) -> None:
    node = manual_node
    broker = Broker(node, tmp_path)
    assert broker.commit_error(broker.commit(5)) == 0
    assert broker.committed() == 5

    node.stop_actor(broker.topo.shard(0).name)  # its process died: the Append is lost
    lost = broker.commit(7)
    wait_for(lambda: broker.stats()["appends_in_flight"] == 1, "the append sent")
    # (node.quiesce would wait for the stopped shard to take the Append: it never does)
    broker.advance(WAIT_MS - 1)
    assert broker.stats()["appends_in_flight"] == 1, "given up on before its timeout"
    assert broker.answer(lost) is None
    broker.advance(ANSWER_BUCKET_MS + 1)
    assert broker.commit_error(lost) == TIMED_OUT
    stats = broker.stats()
    assert (stats["appends_in_flight"], stats["appends_timed_out"]) == (0, 1)
    assert broker.committed() == 5  # as after a failed write

    broker.spawn_shard()  # the supervisor restarts the process: the retry lands
    assert broker.commit_error(broker.commit(7)) == 0
    assert broker.committed() == 7


def test_a_commit_lost_in_a_shard_crash_is_answered_and_a_late_answer_ignored(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first lost Append dies with a crash of the shard (restarted in place); the
    second is only slow: the shard holds it past the timeout, then writes it and answers.
    That late answer changes nothing in memory; a reload reads the offset it wrote."""
    release = threading.Event()
    armed = crash_once(monkeypatch, PartitionShard, "on_append", Append)
    node = manual_node
    broker = Broker(node, tmp_path)
    assert broker.commit_error(broker.commit(1)) == 0

    armed["crash"] = True
    crashed = broker.commit(2)
    wait_for(lambda: node.actors[broker.topo.shard(0).name].crashes == 1, "the shard's crash")
    node.advance_clock(WAIT_MS + ANSWER_BUCKET_MS)
    assert broker.commit_error(crashed) == TIMED_OUT
    assert broker.committed() == 1

    real = PartitionShard.on_append

    def slow(self: PartitionShard, msg: Append) -> None:
        assert release.wait(10), "the test never let the slow append go"
        real(self, msg)

    slow.__actorlog_handles__ = (Append,)  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionShard, "on_append", slow)
    node.stop_actor(broker.topo.shard(0).name)
    broker.spawn_shard()  # handlers are bound at spawn: this one is slow
    slow_commit = broker.commit(3)
    wait_for(lambda: broker.stats()["appends_in_flight"] == 1, "the slow append sent")
    # The shard's thread is held, so move the clock by hand and let the coordinator turn.
    node.clock.advance(WAIT_MS + ANSWER_BUCKET_MS)  # type: ignore[attr-defined]
    assert wait_for(lambda: broker.answer(slow_commit) or (broker.stats() and None),
                    "the timed-out answer")[1] == [["t", 0, TIMED_OUT]]
    assert broker.committed() == 1
    release.set()
    wait_for(lambda: broker.stats()["late_append_answers"] == 1, "the late answer")
    assert broker.committed() == 1  # ignored: the client was told the commit failed
    answers = node.ask(Address(node.name, "probe"), GetStats())
    assert len([a for a in answers if a[0] == slow_commit]) == 1

    # The write landed anyway (it was only slow): a coordinator loading the log reads it,
    # as Kafka's does; the client, told REQUEST_TIMED_OUT, would have retried it anyway.
    node.stop_actor(broker.topo.coordinator(0).name)
    node.spawn(GroupCoordinator, broker.topo.coordinator(0).name, topology=broker.topo,
               config=broker.config, clock=node.clock, wait_for_handlers=False)
    broker.wait_loaded()
    assert broker.committed() == 3


def test_a_load_whose_read_was_lost_reads_again(manual_node: Node, tmp_path: Path) -> None:
    """The shard is down when the coordinator starts loading: its Read is lost, and the
    coordinator would answer COORDINATOR_LOAD_IN_PROGRESS for good without a retry."""
    node = manual_node
    broker = Broker(node, tmp_path, shard_up=False)
    wait_for(lambda: broker.stats()["phase"] == "loading", "the load's reads sent")
    broker.spawn_shard()  # its process restarted; the Read died with the old one
    broker.advance(READ_TIMEOUT_MS - 1)
    assert broker.stats()["phase"] == "loading"
    broker.advance(1)
    broker.wait_loaded()
    assert broker.commit_error(broker.commit(4)) == 0
    assert broker.committed() == 4


def test_a_sync_whose_assignment_write_is_lost_is_answered_rebalance_in_progress(
        manual_node: Node, tmp_path: Path) -> None:
    node = manual_node
    broker = Broker(node, tmp_path)
    join = broker.send(lambda rid: JoinGroup(
        rid, "g", "", None, "client", "/127.0.0.1", "consumer",
        [JoinProtocolRow("range", b"meta")], 30_000, 30_000, False))
    broker.advance(1)  # the (zero) initial rebalance delay runs on the Timer
    joined = wait_for(lambda: broker.answer(join), "the join")
    error, generation, member = joined[1], joined[2], joined[6]
    assert (error, generation, joined[5]) == (0, 1, member)  # the leader
    assert broker.stats()["groups"] == {"g": "CompletingRebalance"}

    node.stop_actor(broker.topo.shard(0).name)
    sync = broker.send(lambda rid: SyncGroup(rid, "g", generation, member, None, "consumer",
                                             "range", {member: b"assignment"}))
    wait_for(lambda: broker.stats()["appends_in_flight"] == 1, "the group write sent")
    broker.advance(WAIT_MS - 1)
    assert broker.stats()["appends_in_flight"] == 1
    broker.advance(ANSWER_BUCKET_MS + 1)
    synced = wait_for(lambda: broker.answer(sync), "the sync's answer")
    assert synced[1] == int(ErrorCode.REBALANCE_IN_PROGRESS)
    assert broker.stats()["groups"] == {"g": "PreparingRebalance"}

    broker.spawn_shard()  # back: the member rejoins and the next generation's sync lands
    rejoin = broker.send(lambda rid: JoinGroup(
        rid, "g", member, None, "client", "/127.0.0.1", "consumer",
        [JoinProtocolRow("range", b"meta")], 30_000, 30_000, False))
    rejoined = wait_for(lambda: broker.answer(rejoin), "the rejoin")
    assert (rejoined[1], rejoined[2]) == (0, 2)
    again = broker.send(lambda rid: SyncGroup(rid, "g", 2, member, None, "consumer", "range",
                                              {member: b"assignment"}))
    assert wait_for(lambda: broker.answer(again), "the second sync")[1:] == [
        0, "consumer", "range", b"assignment"]
    assert broker.stats()["groups"] == {"g": "Stable"}


def held(monkeypatch: pytest.MonkeyPatch, handler: str, message: type) -> threading.Semaphore:
    """Make PartitionShard's ``handler`` wait for a permit of the returned semaphore before
    it runs (shards spawned after this): a shard far behind, answering only when let."""
    permits = threading.Semaphore(0)
    real = getattr(PartitionShard, handler)

    def slow(self: PartitionShard, msg: Any) -> Any:
        assert permits.acquire(timeout=10), "the test never let the held message go"
        return real(self, msg)

    slow.__actorlog_handles__ = (message,)  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionShard, handler, slow)
    return permits


def test_a_write_that_succeeds_late_but_before_the_give_up_is_a_success(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard's own acks=-1 wait starts when its purgatory gets the write, not when the
    coordinator sends it: a shard with a backlog answers a healthy write well after
    APPEND_TIMEOUT_MS. Only a lost answer may be given up on, never such a slow success."""
    node = manual_node
    broker = Broker(node, tmp_path)
    assert broker.commit_error(broker.commit(1)) == 0
    permits = held(monkeypatch, "on_append", Append)
    node.stop_actor(broker.topo.shard(0).name)
    broker.spawn_shard()
    slow = broker.commit(3)
    wait_for(lambda: broker.stats()["appends_in_flight"] == 1, "the slow append sent")
    late_ms = 2 * APPEND_TIMEOUT_MS  # well past the shard's own wait
    assert late_ms < WAIT_MS
    node.clock.advance(late_ms)  # type: ignore[attr-defined]
    assert broker.stats()["appends_timed_out"] == 0
    assert broker.answer(slow) is None
    permits.release()
    assert broker.commit_error(slow) == 0
    assert broker.committed() == 3
    stats = broker.stats()
    assert (stats["appends_timed_out"], stats["late_append_answers"]) == (0, 0)


def test_a_load_from_a_shard_lagging_for_good_finishes(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Read is answered only after its timeout (a shard far behind for good). The
    overdue answer is taken, so the load finishes at the shard's pace instead of dropping
    every answer and reading again forever; the timeout doubles, so it is read again only
    a bounded number of times."""
    node = manual_node
    broker = Broker(node, tmp_path)
    assert broker.commit_error(broker.commit(6)) == 0
    node.stop_actor(broker.topo.coordinator(0).name)
    permits = held(monkeypatch, "on_read", Read)
    node.stop_actor(broker.topo.shard(0).name)
    broker.spawn_shard()
    reads = [0]
    real_send = GroupCoordinator._read

    def counting(self: GroupCoordinator, shard: Address, rows: list[Any]) -> None:
        reads[0] += 1
        real_send(self, shard, rows)

    monkeypatch.setattr(GroupCoordinator, "_read", counting)
    node.spawn(GroupCoordinator, broker.topo.coordinator(0).name, topology=broker.topo,
               config=broker.config, clock=node.clock, wait_for_handlers=False)
    wait_for(lambda: broker.stats()["phase"] == "loading", "the load's read sent")
    assert reads[0] == 1
    node.clock.advance(READ_TIMEOUT_MS + 1000)  # type: ignore[attr-defined]
    wait_for(lambda: broker.stats() and reads[0] == 2, "the overdue read sent again")
    permits.release()  # the shard answers the first read, late
    broker.wait_loaded()
    assert broker.committed() == 6
    permits.release()  # the second one's answer comes and changes nothing
    assert broker.committed() == 6
    assert reads[0] == 2


def test_a_coordinator_restarted_at_the_same_instant_takes_new_request_ids(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart in place runs at the crash's instant; a manual clock has not moved.
    The new instance must not send the ids of the old one: a late answer to the old
    instance's append would complete the new instance's one, never written."""
    armed = crash_once(monkeypatch, GroupCoordinator, "on_commit", OffsetCommit)
    sent: list[int] = []

    def lost(self: PartitionShard, msg: Append) -> None:
        sent.append(msg.req_id)  # the shard holds it: its answer never comes in time

    lost.__actorlog_handles__ = (Append,)  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionShard, "on_append", lost)
    node = manual_node
    broker = Broker(node, tmp_path)
    for offset in (1, 2):
        broker.commit(offset)
    wait_for(lambda: len(sent) == 2, "the first instance's appends")
    old = list(sent)
    armed["crash"] = True
    broker.commit(3)
    wait_for(lambda: node.actors[broker.topo.coordinator(0).name].crashes == 1, "the crash")
    broker.wait_loaded()
    pending = [broker.commit(offset) for offset in (4, 5, 6)]
    wait_for(lambda: len(sent) == 5, "the new instance's appends")
    assert not set(old) & set(sent[2:])
    for rid in old:  # the old instance's answers, late
        node.tell(broker.coordinator, AppendDone(rid, [AppendDoneRow(OFFSETS_TOPIC, 0, 0, 0, -1,
                                                                     0, None)]),
                  sender=broker.topo.shard(0).name)
    wait_for(lambda: broker.stats()["late_append_answers"] == 2, "the late answers")
    assert [broker.answer(rid) for rid in pending] == [None] * 3
    assert broker.stats()["appends_in_flight"] == 3


def delete_offsets_topic(broker: Broker) -> None:
    """What the Controller has the shard do for an admin's DeleteTopics (its word to the
    coordinators is the test's to send, or lose)."""
    broker.node.tell(broker.topo.shard(0), DropPartitions(-7, [
        TopicPartition(OFFSETS_TOPIC, p) for p in range(NUM_PARTITIONS)]), sender="probe")
    assert wait_for(lambda: broker.answer(-7), "the partitions dropped")[2] == []
    broker.node.actors[broker.topo.controller.name].deleted = True  # type: ignore[attr-defined]


def test_an_append_answered_unknown_topic_starts_the_coordinator_over(
        manual_node: Node, tmp_path: Path) -> None:
    """The Controller's TopicsDeleted was lost (it crashed between its save and its
    send): the first write to the deleted topic, answered UNKNOWN_TOPIC_OR_PARTITION,
    says it instead, and the coordinator starts over; before, every write failed until
    a restart."""
    node = manual_node
    broker = Broker(node, tmp_path, controller=RecreatingController)
    assert broker.commit_error(broker.commit(5)) == 0
    delete_offsets_topic(broker)
    assert broker.commit_error(broker.commit(7)) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    broker.wait_loaded()
    assert broker.committed() == -1  # the offsets went with the topic
    assert broker.commit_error(broker.commit(9)) == 0
    assert broker.committed() == 9


def test_the_deletion_answers_a_parked_join_and_a_write_in_flight(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TopicsDeleted comes while a JoinGroup waits for its rebalance and an offset
    commit's append is in the shard: the join is answered NOT_COORDINATOR (the client
    finds the coordinator again), the commit is answered failed, and the append's late
    answer is ignored; then the coordinator loads the topic made again."""
    node = manual_node
    broker = Broker(node, tmp_path, controller=RecreatingController)
    def join_as(client: str) -> int:
        return broker.send(lambda rid: JoinGroup(
            rid, "g", "", None, client, "/127.0.0.1", "consumer",
            [JoinProtocolRow("range", b"meta")], 30_000, 30_000, False))

    first = join_as("first")
    assert wait_for(lambda: broker.answer(first), "the first join")[1] == 0
    join = join_as("second")  # a rebalance: parked until the first member rejoins
    wait_for(lambda: broker.stats()["groups"] == {"g": "PreparingRebalance"}, "the join parked")
    permits = held(monkeypatch, "on_append", Append)
    node.stop_actor(broker.topo.shard(0).name)
    broker.spawn_shard()
    commit = broker.send(lambda rid: OffsetCommit(  # a standalone consumer's commit
        rid, "other", -1, "", None, [OffsetCommitRow("t", 0, 3, -1, "")]))
    wait_for(lambda: broker.stats()["appends_in_flight"] == 1, "the append sent")
    assert broker.answer(join) is None and broker.answer(commit) is None

    node.actors[broker.topo.controller.name].deleted = True  # type: ignore[attr-defined]
    node.tell(broker.coordinator, TopicsDeleted([OFFSETS_TOPIC]), sender="probe")
    assert wait_for(lambda: broker.answer(join), "the join's answer")[1] == \
        ErrorCode.NOT_COORDINATOR
    assert broker.commit_error(commit) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert broker.stats()["groups"] == {}
    permits.release()  # the shard writes it (the test dropped nothing) and answers, late
    wait_for(lambda: broker.stats()["late_append_answers"] == 1, "the late answer")
    assert [a for a in node.ask(Address(node.name, "probe"), GetStats())
            if a[0] == commit] == [broker.answer(commit)]  # answered once
    for _ in range(4):  # the reload's reads and the next commit's append
        permits.release()
    broker.wait_loaded()
    assert broker.commit_error(broker.commit(4)) == 0
