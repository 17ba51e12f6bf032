"""What a PartitionShard answers when an append fails after its batch is in the log.

The answer must say what the log holds: a batch that is in the log (staged for
the turn's write, or written) is answered at its offset, as any append is (after
the turn's write; an acks=-1 one through the purgatory), never as failed: a
producer told its batch failed sends it again, and without idempotence the log
then holds it twice. A batch that is not in the log is answered as failed, and a
later batch that is, as written.

Real shard, real log; the failures are injected at the system call (an fsync or a
writev on the partition's segment file fails once with EIO/ENOSPC) or in the
leader's bookkeeping right after the append (PartitionState.on_leader_append).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from loguru import logger

from actors.core.log_dir import CLEAN_SHUTDOWN_FILE, LogDir
from actors.core.partition_log import PartitionLog
from actors.core.partition_state import PartitionState
from actors.core.record_batch import build_batch
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendRow,
    GetStats,
    Read,
    ReadDone,
    ReadRow,
    TopicEntry,
    WatchProduce,
)
from wire.cluster_messages import BecameLeaderOrFollower, BecomeLeaderOrFollower, ReplicaStateRow
from wire.errors import ErrorCode
from wire.registry import message
from wire.replication_messages import FollowerApplied, FollowerApply, FollowerApplyRow
from wire.transaction_messages import TxnMarkerRow, WriteTxnMarkers, WriteTxnMarkersDone

NONE = int(ErrorCode.NONE)


class Recorder(Actor):
    """Stands in for a handler and the purgatory: keeps what comes, as [type name, fields]."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, ReadDone, WatchProduce, BecameLeaderOrFollower, WriteTxnMarkersDone,
             FollowerApplied)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


@message(9871)
class SendInOneTurn(NamedTuple):
    """Tell the shard these Appends (acks=1, t-0) in one frame: one turn of the shard."""

    shard: str
    values: list[bytes]


class Burst(Recorder):
    """A handler whose Appends reach the shard in one turn (one group commit)."""

    @handles(SendInOneTurn)
    def on_send(self, msg: SendInOneTurn) -> None:
        shard = next(a for a in self.node.actors.values() if a.name == msg.shard).address
        for i, value in enumerate(msg.values):
            self.tell(shard, Append(i + 1, 1, 30_000, [AppendRow("t", 0, build_batch([value]))]))


@message(9872)
class AppendMarkAppend(NamedTuple):
    """Tell the shard, in one frame (one turn): an Append of ``first`` (acks=1, t-0), a
    WriteTxnMarkers for t-0, an Append of ``last``."""

    shard: str
    first: bytes
    last: bytes


class MixedBurst(Recorder):
    @handles(AppendMarkAppend)
    def on_send(self, msg: AppendMarkAppend) -> None:
        shard = next(a for a in self.node.actors.values() if a.name == msg.shard).address
        self.tell(shard, Append(1, 1, 30_000, [AppendRow("t", 0, build_batch([msg.first]))]))
        self.tell(shard, WriteTxnMarkers(2, [TxnMarkerRow("t", 0, 7, 0, True, 0)]))
        self.tell(shard, Append(3, 1, 30_000, [AppendRow("t", 0, build_batch([msg.last]))]))


def _got(node: Node, recorder: Any, kind: str) -> list[Any]:
    return [fields for name, fields in node.ask(recorder, GetStats()) if name == kind]


def _fail_once_on(monkeypatch: pytest.MonkeyPatch, call: str, segment_dir: Path,
                  code: int) -> dict[str, int]:
    """``os.<call>`` fails once with ``code`` on a descriptor of a ``.log`` file in
    ``segment_dir`` (every other call, and every later one, is the real one)."""
    real: Callable[..., Any] = getattr(os, call)
    calls = {"failed": 0}

    def failing(fd: int, *args: Any) -> Any:
        if not calls["failed"]:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.startswith(str(segment_dir)) and target.endswith(".log"):
                calls["failed"] += 1
                raise OSError(code, os.strerror(code))
        return real(fd, *args)

    monkeypatch.setattr(os, call, failing)
    return calls


def _single_node(node: Node, tmp_path: Path, configs: dict[str, str]) -> tuple[Any, Any]:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics={"t": TopicEntry(1, configs)}, broker_id=1,
                       clock=node.clock)
    handler = node.spawn(Recorder, "handler")
    return shard, handler


def _append(node: Node, shard: Any, handler: Any, req_id: int, value: bytes) -> Any:
    node.tell(shard, Append(req_id, 1, 30_000, [AppendRow("t", 0, build_batch([value]))]),
              sender=handler.name)
    [done] = wait_for(lambda: [d for d in _got(node, handler, "AppendDone") if d[0] == req_id],
                      f"the answer to append {req_id}")
    [row] = done[1]
    return row


def _log_values(node: Node, shard: Any, handler: Any, req_id: int) -> tuple[int, bytes]:
    """t-0's log end offset and every byte a read from offset 0 returns."""
    node.tell(shard, Read(req_id, -1, 1 << 20, [ReadRow("t", 0, 0, 1 << 20)], False),
              sender=handler.name)
    [done] = wait_for(lambda: [d for d in _got(node, handler, "ReadDone") if d[0] == req_id],
                      f"the answer to read {req_id}")
    stats: dict[str, Any] = node.ask(shard, GetStats())
    return stats["partitions"]["t-0"][2], bytes(done[1][0][5])


@pytest.mark.parametrize("configs", [
    # the shard's own flush after the append (flush.ms reached: every append here), as
    # Kafka's scheduled flush: after the batch is appended, not part of the append
    {"flush.ms": "0"},
    # the log's flush inside the append (flush.messages reached: every append here):
    # part of the append, whose answer is then KAFKA_STORAGE_ERROR, as Kafka's
    {"flush.messages": "1"},
], ids=["flush.ms", "flush.messages"])
def test_a_batch_in_the_log_whose_flush_fails_is_answered_as_kafka_does(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        configs: dict[str, str]) -> None:
    shard, handler = _single_node(node, tmp_path, configs)
    assert _append(node, shard, handler, 1, b"before")[2:4] == [NONE, 0]
    calls = _fail_once_on(monkeypatch, "fsync", tmp_path / "t-0", errno.EIO)
    row = _append(node, shard, handler, 2, b"unflushed")
    assert calls["failed"] == 1
    # the failure goes on as any other in the shard: a crash restart that reopens the log
    wait_for(lambda: node.actors[shard.name].crashes == 1, "the shard's restart")
    end, data = _log_values(node, shard, handler, 3)
    assert b"unflushed" in data and end == 2, "the batch is in the log"
    if "flush.ms" in configs:
        assert row[2:4] == [NONE, 1], f"a batch in the log at offset 1 was answered {row}"
    else:
        # the flush the producer was promised failed: as Kafka, though it stays in the log
        assert row[2:4] == [int(ErrorCode.KAFKA_STORAGE_ERROR), -1], row
    assert _append(node, shard, handler, 4, b"after")[2:4] == [NONE, 2]


def test_a_batch_a_failed_write_took_back_is_failed_and_the_later_ones_are_not(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # flush.messages=2: every second batch is written by the log's flush inside the
    # append; a failed write puts the log back as it was before it
    shard, handler = _single_node(node, tmp_path, {"flush.messages": "2"})
    assert _append(node, shard, handler, 1, b"one")[2:4] == [NONE, 0]
    calls = _fail_once_on(monkeypatch, "writev", tmp_path / "t-0", errno.ENOSPC)
    lost = _append(node, shard, handler, 2, b"two")
    assert calls["failed"] == 1
    assert lost[2] == int(ErrorCode.KAFKA_STORAGE_ERROR)
    later = [_append(node, shard, handler, 3, b"three"), _append(node, shard, handler, 4, b"four")]
    end, data = _log_values(node, shard, handler, 5)
    assert end == 3 and b"two" not in data
    assert all(value in data for value in (b"one", b"three", b"four"))
    assert [row[2:4] for row in later] == [[NONE, 1], [NONE, 2]], \
        f"batches in the log at offsets 1 and 2 were answered {later}"


def test_an_acks_all_batch_is_answered_through_the_purgatory_when_the_shard_fails_after_it(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    configs = {"min.insync.replicas": "2"}
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics={"t": TopicEntry(1, configs)}, broker_id=1,
                       clock=node.clock)
    handler = node.spawn(Recorder, "handler")
    purgatory = node.spawn(Recorder, topo.purgatory_for("t", 0).name)
    # led here with ISR [1, 2]; follower 2 has fetched nothing
    node.tell(shard, BecomeLeaderOrFollower(1, [ReplicaStateRow(
        "t", 0, 1, 1, [1, 2], [1, 2], 1, False, configs)]), sender=handler.name)
    wait_for(lambda: _got(node, handler, "BecameLeaderOrFollower"))
    real = PartitionState.on_leader_append
    calls = {"n": 0}

    def failing_once(state: PartitionState, *args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the leader's bookkeeping fails once")
        return real(state, *args)

    monkeypatch.setattr(PartitionState, "on_leader_append", failing_once)
    node.tell(shard, Append(7, -1, 30_000, [AppendRow("t", 0, build_batch([b"x"]))]),
              sender=handler.name)
    wait_for(lambda: calls["n"] >= 1 and (_got(node, purgatory, "WatchProduce")
                                          or _got(node, handler, "AppendDone")), timeout=10)
    answered = _got(node, handler, "AppendDone")
    assert answered == [], f"the batch at offset 0 was answered at once: {answered}"
    [watch] = _got(node, purgatory, "WatchProduce")
    req_id, _handler, _timeout, [row], *_ = watch
    assert req_id == 7
    # topic, partition, required offset, base offset, ..., error code
    assert row[:4] == ["t", 0, 1, 0] and row[-1] == NONE


def test_a_failed_group_commit_fails_only_the_batches_it_put_back(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # flush.messages=2: the second Append of the turn has the log write the first two;
    # the third stays staged, and the turn's write of it fails
    shard, _handler = _single_node(node, tmp_path, {"flush.messages": "2"})
    burst = node.spawn(Burst, "burst")
    calls = {"writes": 0}
    real = os.writev

    def third_write_fails(fd: int, pieces: Any) -> int:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if target.startswith(str(tmp_path / "t-0")) and target.endswith(".log"):
            calls["writes"] += 1
            if calls["writes"] == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, pieces)

    monkeypatch.setattr(os, "writev", third_write_fails)
    node.tell(burst, SendInOneTurn(shard.name, [b"one", b"two", b"three"]))
    done = wait_for(lambda: len(_got(node, burst, "AppendDone")) == 3 and sorted(
        _got(node, burst, "AppendDone")), "the three answers")
    answers = {req_id: row[2:4] for req_id, [row] in done}
    stats: dict[str, Any] = node.ask(shard, GetStats())
    assert calls["writes"] == 2 and stats["partitions"]["t-0"][2] == 2, "one and two are in"
    assert answers[1] == [NONE, 0] and answers[2] == [NONE, 1], answers
    assert answers[3] == [int(ErrorCode.KAFKA_STORAGE_ERROR), -1], answers


def test_a_batch_a_failed_marker_write_took_back_is_failed_not_answered_at_a_reused_offset(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In one turn: an Append is staged at offset 1; a WriteTxnMarkers writes the staged
    batch before its marker, and that write fails (the log is put back to end 1); then an
    Append of "later". The first append is not in the log: it is answered failed, never
    NONE at offset 1, which "later" holds (the loss is told when the marker's write
    fails, so the turn's later appends go on)."""
    shard, handler = _single_node(node, tmp_path, {})
    assert _append(node, shard, handler, 1, b"before")[2:4] == [NONE, 0]
    burst = node.spawn(MixedBurst, "burst")
    calls = _fail_once_on(monkeypatch, "writev", tmp_path / "t-0", errno.ENOSPC)
    node.tell(burst, AppendMarkAppend(shard.name, b"lost", b"later"))
    done = wait_for(lambda: len(_got(node, burst, "AppendDone")) == 2 and sorted(
        _got(node, burst, "AppendDone")), "the two appends' answers")
    [marker] = wait_for(lambda: _got(node, burst, "WriteTxnMarkersDone"), "the marker's answer")
    assert calls["failed"] == 1
    assert marker[1] == [["t", 0, int(ErrorCode.KAFKA_STORAGE_ERROR)]], marker
    answers = {req_id: row for req_id, [row] in done}
    assert answers[1][2] == int(ErrorCode.KAFKA_STORAGE_ERROR), \
        f"a batch the failed write took back was answered {answers[1]}"
    end, data = _log_values(node, shard, handler, 5)
    assert b"lost" not in data
    assert answers[3][2:4] == [NONE, 1] and end == 2 and b"later" in data, (end, answers)


@pytest.mark.parametrize("configs", [{"flush.ms": "0"}, {"flush.messages": "1"}],
                         ids=["flush.ms", "flush.messages"])
def test_the_restart_after_a_failed_flush_keeps_the_recovery_point_before_the_batch(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        configs: dict[str, str]) -> None:
    """The fsync after the batch at offset 1 fails (EIO): the shard restarts, and its
    teardown closes the log without flushing it again (an fsync tried again returns 0
    once the error was reported, though the batch's writeback failed). The recovery
    point handed on (to the reopen, and to the LogManager's checkpoint) stays at 1, so
    the reopen scans the batch."""
    shard, handler = _single_node(node, tmp_path, configs)
    assert _append(node, shard, handler, 1, b"flushed")[2:4] == [NONE, 0]
    actor = node.actors[shard.name]
    assert wait_for(lambda: actor.partitions[("t", 0)].log.recovery_point == 1)
    reopened_at: list[int] = []
    real_open = PartitionLog.open

    def open_spy(*args: Any, **kwargs: Any) -> PartitionLog:
        reopened_at.append(kwargs["recovery_point"])
        return real_open(*args, **kwargs)

    monkeypatch.setattr(PartitionLog, "open", open_spy)
    calls = _fail_once_on(monkeypatch, "fsync", tmp_path / "t-0", errno.EIO)
    _append(node, shard, handler, 2, b"unflushed")
    wait_for(lambda: actor.crashes == 1, "the shard's restart")
    assert calls["failed"] == 1
    assert reopened_at == [1], f"reopened from recovery point {reopened_at}, past the batch"
    end, data = _log_values(node, shard, handler, 3)
    assert end == 2 and b"unflushed" in data


def test_a_stop_whose_flush_fails_is_not_a_clean_shutdown(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node stops; closing t-0 flushes it, and that fsync fails (EIO): the log is
    closed as a crash leaves it, and the stop is not clean (no clean-shutdown marker),
    so the next start scans t-0 from its recovery point instead of trusting it whole."""
    shard, handler = _single_node(node, tmp_path, {})
    assert _append(node, shard, handler, 1, b"unflushed")[2:4] == [NONE, 0]
    calls = _fail_once_on(monkeypatch, "fsync", tmp_path / "t-0", errno.EIO)
    node.shutdown(timeout=5)
    assert calls["failed"] == 1
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists(), "a clean shutdown was recorded"
    log_dir = LogDir.open(tmp_path)
    assert not log_dir.had_clean_shutdown
    assert log_dir.recovery_points.get(("t", 0), 0) == 0


# A segment of 100 bytes holds one of these batches: the next append rolls, and the
# roll's flush (the finished segment's fsync) is what fails.
ROLL_EVERY_BATCH = {"segment.bytes": "100"}
STORAGE = int(ErrorCode.KAFKA_STORAGE_ERROR)


def _restarted_after_flush_failure(node: Node, shard: Any) -> dict[str, Any]:
    """The shard restarts (once), and its stats count the failed flush."""
    actor = node.actors[shard.name]
    wait_for(lambda: actor.crashes == 1, "the shard's restart after the failed flush")
    stats: dict[str, Any] = node.ask(shard, GetStats())
    assert stats["flush_failures"] == 1 and stats["flush_failed"] == [], stats
    return stats


def test_an_append_whose_roll_fails_to_flush_restarts_the_shard_and_later_appends_succeed(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The roll before the second batch fsyncs the finished segment, and that fails
    (EIO): the batch is refused KAFKA_STORAGE_ERROR and the shard restarts, reopening the
    log from its recovery point. Without the restart the log refused every append that
    needed a roll (every one here) until the process restarted."""
    shard, handler = _single_node(node, tmp_path, ROLL_EVERY_BATCH)
    assert _append(node, shard, handler, 1, b"first")[2:4] == [NONE, 0]
    calls = _fail_once_on(monkeypatch, "fsync", tmp_path / "t-0", errno.EIO)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="ERROR")
    try:
        assert _append(node, shard, handler, 2, b"refused")[2:4] == [STORAGE, -1]
        assert calls["failed"] == 1
        _restarted_after_flush_failure(node, shard)
    finally:
        logger.remove(sink)
    said = [line for line in lines if "the flush of t-0 failed" in line]
    assert len(said) == 1, f"the failed flush said at ERROR once: {lines}"
    assert "segment 00000000000000000000.log, errno EIO" in said[0], said[0]
    assert _append(node, shard, handler, 3, b"after")[2:4] == [NONE, 1]
    assert _append(node, shard, handler, 4, b"later")[2:4] == [NONE, 2]
    end, data = _log_values(node, shard, handler, 5)
    assert end == 3 and b"refused" not in data
    assert [len(d) for d in _got(node, handler, "AppendDone")] == [2, 2, 2, 2], (
        "each Append answered once")


def test_a_marker_whose_roll_fails_to_flush_restarts_the_shard_and_later_markers_succeed(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shard, handler = _single_node(node, tmp_path, ROLL_EVERY_BATCH)
    assert _append(node, shard, handler, 1, b"first")[2:4] == [NONE, 0]
    calls = _fail_once_on(monkeypatch, "fsync", tmp_path / "t-0", errno.EIO)

    def mark(req_id: int) -> Any:
        node.tell(shard, WriteTxnMarkers(req_id, [TxnMarkerRow("t", 0, 7, 0, True, 0)]),
                  sender=handler.name)
        [done] = wait_for(lambda: [d for d in _got(node, handler, "WriteTxnMarkersDone")
                                   if d[0] == req_id], f"the answer to markers {req_id}")
        return done

    assert mark(2)[1] == [["t", 0, STORAGE]]
    assert calls["failed"] == 1
    _restarted_after_flush_failure(node, shard)
    assert mark(3)[1] == [["t", 0, NONE]]
    assert _append(node, shard, handler, 4, b"after")[2:4] == [NONE, 2]
    assert len(_got(node, handler, "WriteTxnMarkersDone")) == 2, "each answered once"


def test_a_follower_apply_whose_roll_fails_to_flush_restarts_the_shard_and_later_applies_succeed(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower's log (leader 2): the apply of the second batch rolls, and the roll's
    flush fails. The row is answered KAFKA_STORAGE_ERROR, the shard restarts, and once
    given its role again the follower applies the batch (it stayed out of the ISR for
    good: every later apply needed that roll)."""
    shard, handler = _single_node(node, tmp_path, ROLL_EVERY_BATCH)

    def follow(req_id: int) -> None:
        node.tell(shard, BecomeLeaderOrFollower(req_id, [ReplicaStateRow(
            "t", 0, 2, 1, [1, 2], [1, 2], 1, False, ROLL_EVERY_BATCH)]), sender=handler.name)
        wait_for(lambda: [d for d in _got(node, handler, "BecameLeaderOrFollower")
                          if d[0] == req_id], "the follower's role")

    def apply(req_id: int, offset: int, value: bytes) -> Any:
        batch = build_batch([value], base_offset=offset, partition_leader_epoch=1)
        node.tell(shard, FollowerApply(req_id, [FollowerApplyRow(
            "t", 0, 1, batch, -1, 0, offset + 1, -1, -1, -1)]), sender=handler.name)
        [done] = wait_for(lambda: [d for d in _got(node, handler, "FollowerApplied")
                                   if d[0] == req_id], f"the answer to apply {req_id}")
        [row] = done[1]
        return row

    follow(1)
    row = apply(2, 0, b"first")
    assert row[2:4] == [NONE, 1], row
    calls = _fail_once_on(monkeypatch, "fsync", tmp_path / "t-0", errno.EIO)
    assert apply(3, 1, b"second")[2:4] == [STORAGE, 1]
    assert calls["failed"] == 1
    _restarted_after_flush_failure(node, shard)
    follow(4)
    assert apply(5, 1, b"second")[2:4] == [NONE, 2]
    assert apply(6, 2, b"third")[2:4] == [NONE, 3]
