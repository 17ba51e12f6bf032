"""A leader's DeleteRecords that waits for its in-sync followers' log starts (Kafka's
DelayedDeleteRecords): every waiting answer is given, whatever happens to the shard or
the partition meanwhile, and the request's timeout_ms is its wait.

Real shard, real logs; the handler and the follower are recorders and the messages the
follower's fetcher would send. A fsync fails at the system call (EIO) to restart the shard.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
from actors.core.record_batch import build_batch
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.runtime.actor import Actor, handles
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.actors.test_partition_shard_append_failure import _fail_once_on
from tests.fixtures.waiting import wait_for
from wire.admin_messages import DeleteRecords, DeleteRecordsDone, DeleteRecordsRow
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendRow,
    DropPartitions,
    GetStats,
    TopicEntry,
    TopicPartition,
    WatchProduce,
)
from wire.cluster_messages import BecameLeaderOrFollower, BecomeLeaderOrFollower, ReplicaStateRow
from wire.errors import ErrorCode
from wire.replication_messages import ReplicaRead, ReplicaReadDone, ReplicaReadRow

NONE = int(ErrorCode.NONE)
STORAGE = int(ErrorCode.KAFKA_STORAGE_ERROR)
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)
UNKNOWN_TP = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
# t's segments hold one batch: an append rolls, and the roll's flush can be made to fail
ROLL_EVERY_BATCH = {"segment.bytes": "100"}


class Recorder(Actor):
    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, BecameLeaderOrFollower, DeleteRecordsDone, ReplicaReadDone,
             WatchProduce)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


class Leader:
    """A shard leading t-0 and u-0 with the ISR {1, 2}; 2 is a follower it never hears
    from but through ``fetch``."""

    def __init__(self, node: Node, tmp_path: Path) -> None:
        self.node = node
        topo = Topology(node.name, 1, 1, 1, 1, 1)
        log_dir = LogDir.open(tmp_path)
        node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
                   clock=node.clock)
        node.spawn(Recorder, topo.purgatory(0).name)
        self.shard = node.spawn(
            PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
            log_dir=log_dir, topics={"t": TopicEntry(1, ROLL_EVERY_BATCH),
                                     "u": TopicEntry(1, {})},
            broker_id=1, clock=node.clock)
        self.handler = node.spawn(Recorder, "handler")
        self.next_id = 1
        self.lead()

    def _ask(self, msg_of: Any, kind: str) -> Any:
        req_id = self.next_id
        self.next_id += 1
        self.node.tell(self.shard, msg_of(req_id), sender=self.handler.name)
        [done] = wait_for(lambda: [d for d in self.got(kind) if d[0] == req_id],
                          f"the answer to {kind} {req_id}")
        return done

    def got(self, kind: str) -> list[Any]:
        return [fields for name, fields in self.node.ask(self.handler, GetStats())
                if name == kind]

    def lead(self) -> None:
        self._ask(lambda rid: BecomeLeaderOrFollower(rid, [
            ReplicaStateRow(topic, 0, 1, 1, [1, 2], [1, 2], 1, False,
                            ROLL_EVERY_BATCH if topic == "t" else {})
            for topic in ("t", "u")]), "BecameLeaderOrFollower")

    def append(self, topic: str, value: bytes) -> Any:
        [row] = self._ask(lambda rid: Append(rid, 1, 30_000, [
            AppendRow(topic, 0, build_batch([value]))]), "AppendDone")[1]
        return row

    def fetch(self, topic: str, offset: int, log_start: int) -> None:
        """Follower 2's fetch at ``offset``, saying its log start."""
        self._ask(lambda rid: ReplicaRead(rid, 2, 1 << 20, [
            ReplicaReadRow(topic, 0, offset, 1, -1, 1 << 20, log_start)]), "ReplicaReadDone")

    def delete(self, rows: list[tuple[str, int]], timeout_ms: int) -> int:
        """Send a DeleteRecords; its request id."""
        req_id = self.next_id
        self.next_id += 1
        self.node.tell(self.shard, DeleteRecords(
            req_id, [DeleteRecordsRow(topic, 0, offset) for topic, offset in rows],
            timeout_ms), sender=self.handler.name)
        return req_id

    def answer(self, req_id: int) -> list[list[Any]]:
        """The rows of DeleteRecords ``req_id``'s answer: topic, partition, low watermark,
        error code."""
        [done] = wait_for(lambda: [d for d in self.got("DeleteRecordsDone") if d[0] == req_id],
                          f"the answer to DeleteRecords {req_id}")
        return [list(row[:4]) for row in done[1]]

    def waiting(self) -> int:
        return int(self.node.ask(self.shard, GetStats())["pending_deletes"])


def _three_records_fetched(leader: Leader, topic: str) -> None:
    for value in (b"a", b"b", b"c"):
        assert leader.append(topic, value)[2] == NONE
    leader.fetch(topic, 3, 0)  # the high watermark is 3, the follower's log start 0


def test_a_waiting_delete_is_answered_when_the_shard_restarts_after_a_failed_flush(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two partitions wait for follower 2; an append to t-0 fails its roll's flush (EIO)
    and the shard restarts: the restart forgot the waiting answer, which never came.
    Now t-0 answers KAFKA_STORAGE_ERROR (its log failed), u-0 NOT_LEADER_OR_FOLLOWER."""
    leader = Leader(node, tmp_path)
    _three_records_fetched(leader, "t")
    _three_records_fetched(leader, "u")
    req = leader.delete([("t", 2), ("u", 2)], 30_000)
    wait_for(lambda: leader.waiting() == 1, "the DeleteRecords waiting for follower 2")
    assert not leader.got("DeleteRecordsDone")
    calls = _fail_once_on(monkeypatch, "fsync", tmp_path / "t-0", errno.EIO)
    assert leader.append("t", b"refused")[2] == STORAGE
    assert calls["failed"] == 1
    wait_for(lambda: node.actors[leader.shard.name].crashes == 1, "the shard's restart")
    assert leader.answer(req) == [["t", 0, -1, STORAGE], ["u", 0, -1, NOT_LEADER]]
    assert leader.waiting() == 0


def test_a_delete_with_timeout_0_is_answered_timed_out_at_once_with_its_low_watermark(
        node: Node, tmp_path: Path) -> None:
    """timeout_ms 0 (Kafka's delayed operation expires at once): REQUEST_TIMED_OUT with
    the low watermark the follower holds, not a wait of 30 s; the log start moved all
    the same."""
    leader = Leader(node, tmp_path)
    _three_records_fetched(leader, "u")
    req = leader.delete([("u", 2)], 0)
    assert leader.waiting() == 0, "nothing waits past a timeout_ms of 0"
    assert leader.answer(req) == [["u", 0, 0, TIMED_OUT]]
    stats = node.ask(leader.shard, GetStats())
    assert stats["partitions"]["u-0"][0] == 2


def test_a_delete_below_the_log_start_waits_only_for_its_own_offset(
        node: Node, tmp_path: Path) -> None:
    """The leader's log start is 2 (an earlier delete), the follower's 1: a delete at 1
    is answered at once with the low watermark 1 (Kafka waits for the offset asked, not
    for the leader's log start)."""
    leader = Leader(node, tmp_path)
    _three_records_fetched(leader, "u")
    assert leader.answer(leader.delete([("u", 2)], 0)) == [["u", 0, 0, TIMED_OUT]]
    leader.fetch("u", 3, 1)
    req = leader.delete([("u", 1)], 30_000)
    assert leader.waiting() == 0
    assert leader.answer(req) == [["u", 0, 1, NONE]]


def test_a_waiting_delete_is_answered_by_the_followers_fetch_or_the_partitions_deletion(
        node: Node, tmp_path: Path) -> None:
    """u-0's answer comes when the follower's fetch says its log start reached 2; t-0's,
    once t is deleted, UNKNOWN_TOPIC_OR_PARTITION (Kafka: the partition is not hosted)."""
    leader = Leader(node, tmp_path)
    _three_records_fetched(leader, "t")
    _three_records_fetched(leader, "u")
    moved = leader.delete([("u", 2)], 30_000)
    dropped = leader.delete([("t", 2)], 30_000)
    wait_for(lambda: leader.waiting() == 2, "both DeleteRecords waiting")
    leader.fetch("u", 3, 2)
    assert leader.answer(moved) == [["u", 0, 2, NONE]]
    node.tell(leader.shard, DropPartitions(99, [TopicPartition("t", 0)]),
              sender=leader.handler.name)
    assert leader.answer(dropped) == [["t", 0, -1, UNKNOWN_TP]]
    assert leader.waiting() == 0


def test_a_waiting_delete_past_its_timeout_is_answered_timed_out(
        node: Node, tmp_path: Path) -> None:
    """A follower that fetches without moving its log start changes nothing the wait looks
    at (the shard does not check the row again for it); the timeout_ms still ends the
    wait: REQUEST_TIMED_OUT with the low watermark then (the follower's 0)."""
    leader = Leader(node, tmp_path)
    _three_records_fetched(leader, "u")
    req = leader.delete([("u", 2)], 500)
    leader.fetch("u", 3, 0)
    assert leader.answer(req) == [["u", 0, 0, TIMED_OUT]]
    assert leader.waiting() == 0


def test_a_wall_clock_stepped_back_does_not_put_off_a_waiting_deletes_timeout(
        manual_node: Node, tmp_path: Path) -> None:
    """The follower never moves its log start; the wall clock steps back a minute while
    the delete waits. Its timeout_ms (30 s) still ends the wait 30 s after the request
    (Kafka's delayed operations expire on the monotonic clock), not a minute later."""
    node = manual_node
    clock = node.clock
    assert isinstance(clock, ManualClock)
    leader = Leader(node, tmp_path)
    _three_records_fetched(leader, "u")
    req = leader.delete([("u", 2)], 30_000)
    wait_for(lambda: leader.waiting() == 1, "the DeleteRecords waiting for follower 2")
    clock.set_wall_ms(clock.wall_ms() - 60_000)
    node.advance_clock(29_999)
    assert leader.waiting() == 1 and not leader.got("DeleteRecordsDone")
    node.advance_clock(1)
    assert leader.answer(req) == [["u", 0, 0, TIMED_OUT]]
    assert leader.waiting() == 0
