"""WriteTxnMarkers in a PartitionShard: a marker is an acks=-1 append, so a partition
whose ISR is smaller than its ``min.insync.replicas`` refuses it NOT_ENOUGH_REPLICAS and
appends nothing (the coordinator sends it again later), as Kafka's leader does. A marker
in the log whose flush.messages flush then fails is answered KAFKA_STORAGE_ERROR, as
Kafka's, and its outcome is not told to the group coordinators (the coordinator sends it
again).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats, TopicEntry
from wire.errors import ErrorCode
from wire.transaction_messages import TxnMarkerRow, WriteTxnMarkers, WriteTxnMarkersDone


class Coordinator(Actor):
    """Stands in for a transaction coordinator: keeps the answers."""

    def setup(self) -> None:
        self.answers: list[Any] = []

    @handles(WriteTxnMarkersDone)
    def on_done(self, msg: WriteTxnMarkersDone) -> None:
        self.answers.append([[r.topic, r.partition, r.error_code] for r in msg.rows])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.answers)


def test_a_marker_to_a_partition_short_of_min_insync_replicas_is_refused(
        node: Node, tmp_path: Path) -> None:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    # a single node's partition: its ISR is itself, one replica
    topics = {"short": TopicEntry(1, {"min.insync.replicas": "2"})}
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics=topics, broker_id=1, clock=node.clock)
    coordinator = node.spawn(Coordinator, "coordinator")
    node.tell(shard, WriteTxnMarkers(1, [TxnMarkerRow("short", 0, 7, 0, True, 0),
                                         TxnMarkerRow("gone", 0, 7, 0, True, 0)]),
              sender="coordinator")
    wait_for(lambda: node.ask(coordinator, GetStats()))
    assert node.ask(coordinator, GetStats()) == [[
        ["short", 0, int(ErrorCode.NOT_ENOUGH_REPLICAS)],
        ["gone", 0, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]]]
    stats: dict[str, Any] = node.ask(shard, GetStats())
    assert stats["partitions"]["short-0"][1] == 0  # nothing appended: log end offset 0


def _marker_shard_whose_fsync_fails_once(node: Node, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any]:
    """A shard with topic t (flush.messages=1), its LogManager and a coordinator; the
    first fsync of t-0's log file fails (EIO), counted in the first of the three."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    topics = {"t": TopicEntry(1, {"flush.messages": "1"})}
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics=topics, broker_id=1, clock=node.clock)
    coordinator = node.spawn(Coordinator, "coordinator")
    real = os.fsync
    failed = {"n": 0}

    def fsync_fails_once(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if not failed["n"] and target.startswith(str(tmp_path / "t-0")) \
                and target.endswith(".log"):
            failed["n"] += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync_fails_once)
    return failed, shard, coordinator


def test_a_marker_whose_flush_fails_is_answered_kafka_storage_error(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flush.messages=1: the log flushes right after the marker; its fsync fails (EIO)
    with the marker in the log. Answered KAFKA_STORAGE_ERROR (as Kafka: the flush the
    append asked for failed); the marker stays in the log, and the shard restarts."""
    failed, shard, coordinator = _marker_shard_whose_fsync_fails_once(node, tmp_path,
                                                                      monkeypatch)
    node.tell(shard, WriteTxnMarkers(1, [TxnMarkerRow("t", 0, 7, 0, True, 0)]),
              sender="coordinator")
    wait_for(lambda: node.ask(coordinator, GetStats()))
    assert failed["n"] == 1
    assert node.ask(coordinator, GetStats()) == [[["t", 0,
                                                   int(ErrorCode.KAFKA_STORAGE_ERROR)]]]
    # the failure goes on as an Append's: a restart, which reopens the log
    wait_for(lambda: node.actors[shard.name].crashes == 1, "the shard's restart")
    stats: dict[str, Any] = node.ask(shard, GetStats())
    assert stats["partitions"]["t-0"][2] == 1, "the marker is in the log"


def test_no_marker_is_written_after_a_failed_flush_of_its_partition(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flush.messages=1, and the fsync after the first of two markers to t-0 in one
    WriteTxnMarkers fails (EIO). The second is not written: the fsync tried again would
    return 0 (the error was reported once) though the first marker's writeback failed,
    and the second would be answered NONE as flushed. Both are KAFKA_STORAGE_ERROR, and
    the log holds the first only."""
    failed, shard, coordinator = _marker_shard_whose_fsync_fails_once(node, tmp_path,
                                                                      monkeypatch)
    node.tell(shard, WriteTxnMarkers(1, [TxnMarkerRow("t", 0, 7, 0, True, 0),
                                         TxnMarkerRow("t", 0, 8, 0, False, 0)]),
              sender="coordinator")
    wait_for(lambda: node.ask(coordinator, GetStats()))
    assert failed["n"] == 1
    storage_error = int(ErrorCode.KAFKA_STORAGE_ERROR)
    assert node.ask(coordinator, GetStats()) == [[["t", 0, storage_error],
                                                   ["t", 0, storage_error]]]
    wait_for(lambda: node.actors[shard.name].crashes == 1, "the shard's restart")
    stats: dict[str, Any] = node.ask(shard, GetStats())
    assert stats["partitions"]["t-0"][2] == 1, "only the first marker is in the log"
