"""A PartitionShard that crashes comes back hosting what it hosted.

Supervision restarts a crashed actor in place (teardown, then setup, mailbox
kept). The shard reopens every partition it hosted from disk, not only the
topics it was spawned with: a single node's lead alone again at once; a
cluster's come back with no role and the ReplicaManager sends the last roles
it gave, has the purgatories watch them again and the fetchers re-add the
followed ones. Real actors in one node; a handler made to fail once causes
the crash. A partition deleted since the start is reopened by neither, and a
namesake created later does not take the offsets the deleted one had.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
from actors.core.record_batch import build_batch
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.purgatory import PurgatoryShard
from actors.replica_fetcher import fetcher_name
from actors.replica_manager import ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology, stable_hash
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendRow,
    Cancel,
    DropPartitions,
    FetchReady,
    Flush,
    GetStats,
    OpenPartitionRow,
    OpenPartitions,
    Read,
    ReadDone,
    ReadRow,
    Schedule,
    ShardDone,
    TopicEntry,
    TopicPartition,
    WatchFetch,
    WatchFetchRow,
)
from wire.cluster_messages import (
    BrokerRegistered,
    LeaderAndIsr,
    LeaderAndIsrPartition,
    LeaderAndIsrResponse,
    LiveLeaderRow,
)
from wire.errors import ErrorCode
from wire.replication_messages import AddFetcherPartitions, RemoveFetcherPartitions

NONE = int(ErrorCode.NONE)


class Recorder(Actor):
    """Stands in for a handler, the controller, the timer or a replica fetcher: keeps what
    comes, as [type name, fields]."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, ShardDone, ReadDone, FetchReady, LeaderAndIsrResponse, Schedule,
             Cancel, AddFetcherPartitions, RemoveFetcherPartitions)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _got(node: Node, recorder: Any, kind: str) -> list[Any]:
    return [fields for name, fields in node.ask(recorder, GetStats()) if name == kind]


def _crash_on_flush(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """PartitionShard's Flush handler raises once when armed (before the shard is spawned:
    handlers are bound when an actor is made)."""
    armed = {"crash": False}
    real = PartitionShard.on_flush

    def on_flush(self: PartitionShard, msg: Flush) -> int:
        if armed["crash"]:
            armed["crash"] = False
            raise RuntimeError("a Flush handler that fails once")
        return real(self, msg)

    on_flush.__actorlog_handles__ = (Flush,)  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionShard, "on_flush", on_flush)
    return armed


def _snapshot(log_dir: LogDir) -> LogDir:
    """What the broker gives its shards: the checkpoints read at start (the LogManager
    owns ``log_dir`` and updates it)."""
    snapshot = copy.copy(log_dir)
    snapshot.high_watermarks = dict(log_dir.high_watermarks)
    snapshot.recovery_points = dict(log_dir.recovery_points)
    snapshot.log_start_offsets = dict(log_dir.log_start_offsets)
    return snapshot


def _crash(node: Node, shard: Any, armed: dict[str, bool]) -> None:
    armed["crash"] = True
    node.tell(shard, Flush())
    wait_for(lambda: node.actors[shard.name].crashes == 1, "the shard's crash")
    assert not armed["crash"]


def _stats(node: Node, shard: Any) -> dict[str, Any]:
    stats: dict[str, Any] = node.ask(shard, GetStats())
    return stats


def _append(node: Node, shard: Any, handler: Any, req_id: int, topic: str,
            values: list[bytes], acks: int = 1) -> Any:
    node.tell(shard, Append(req_id, acks, 30_000, [AppendRow(topic, 0, build_batch(values))]),
              sender=handler.name)
    [done] = wait_for(lambda: [d for d in _got(node, handler, "AppendDone") if d[0] == req_id],
                      f"the answer to append {req_id}")
    return done


def _watch_fetch(node: Node, shard: Any, handler: Any, purgatory: Any, req_id: int,
                 topic: str, offset: int) -> None:
    """A consumer's fetch at ``offset`` (the high watermark) that waits in the purgatory."""
    node.tell(shard, Read(req_id, -1, 1 << 20, [ReadRow(topic, 0, offset, 1 << 20)]),
              sender=handler.name)
    [read] = wait_for(lambda: [r for r in _got(node, handler, "ReadDone") if r[0] == req_id],
                      "the read")
    [row] = read[1]
    assert row[2] == NONE and row[5] == b""  # error code, records: nothing yet
    node.tell(purgatory, WatchFetch(req_id, 1, 60_000, False, [WatchFetchRow(
        topic, 0, offset, row[6], row[7], 1 << 20)]), sender=handler.name)


def test_a_single_nodes_shard_reopens_the_partitions_opened_after_it_started(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    armed = _crash_on_flush(monkeypatch)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=_snapshot(log_dir),
                       topics={"a": TopicEntry(1, {}), "gone": TopicEntry(1, {})},
                       broker_id=1, clock=node.clock)
    purgatory = node.spawn(PurgatoryShard, topo.purgatory(0).name, topology=topo,
                           clock=node.clock)
    node.spawn(Recorder, topo.timer.name)
    handler = node.spawn(Recorder, "handler-0")
    # a topic created after the start, and one of the start's deleted
    node.tell(shard, OpenPartitions(1, [OpenPartitionRow("b", 0, {"segment.bytes": "1048576"})]),
              sender=handler.name)
    node.tell(shard, DropPartitions(2, [TopicPartition("gone", 0)]), sender=handler.name)
    wait_for(lambda: len(_got(node, handler, "ShardDone")) == 2, "OpenPartitions, Drop")
    assert [d[1] for d in _got(node, handler, "ShardDone")] == ["", ""]
    assert _append(node, shard, handler, 3, "a", [b"a1", b"a2"])[1][0][2] == NONE
    assert _append(node, shard, handler, 4, "b", [b"b1"])[1][0][2] == NONE
    before = _stats(node, shard)["partitions"]
    assert before == {"a-0": [0, 2, 2], "b-0": [0, 1, 1]}
    _watch_fetch(node, shard, handler, purgatory, 5, "b", 1)
    wait_for(lambda: _stats(node, shard)["watched"] == 1, "the purgatory's watch")

    _crash(node, shard, armed)

    stats = _stats(node, shard)
    assert stats["partitions"] == before, "not every partition came back after the crash"
    assert stats["leaders"] == ["a-0", "b-0"]
    # the purgatory was told to watch b-0 again: the waiting fetch wakes on the next append
    wait_for(lambda: _stats(node, shard)["watched"] == 1, "the purgatory's watch again")
    done = _append(node, shard, handler, 6, "b", [b"b2"])
    assert done[1][0][2:4] == [NONE, 1]  # error code, base offset
    wait_for(lambda: [r for r in _got(node, handler, "FetchReady") if r[0] == 5],
             "the waiting fetch to wake")
    assert _stats(node, shard)["partitions"]["b-0"] == [0, 2, 2]


def test_a_cluster_shard_after_a_crash_waits_for_the_controller_and_keeps_its_offsets(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    armed = _crash_on_flush(monkeypatch)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    config = Config()
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=config,
                       log_dir=_snapshot(log_dir), topics={}, broker_id=1, clock=node.clock)
    manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                         config=config, broker_id=1, clock=node.clock)
    purgatory = node.spawn(PurgatoryShard, topo.purgatory(0).name, topology=topo,
                           clock=node.clock)
    node.spawn(Recorder, topo.timer.name)
    handler = node.spawn(Recorder, "handler-0")
    controller = node.spawn(Recorder, "controller")
    # the fetcher of f-0 (led by broker 2): the ReplicaManager uses the running one
    fetcher = node.spawn(Recorder, fetcher_name(
        2, stable_hash("f-0") % int(config["num.replica.fetchers"])))
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    node.tell(manager, LeaderAndIsr(1, 1, 5, [
        LeaderAndIsrPartition("c", 0, 1, 1, 3, [1, 2], 4, [1, 2], True),
        LeaderAndIsrPartition("f", 0, 1, 2, 7, [2, 1], 9, [2, 1], True),
    ], [LiveLeaderRow(1, ""), LiveLeaderRow(2, "")], {"c": {}, "f": {}}),
        sender=controller.name)
    [response] = wait_for(lambda: _got(node, controller, "LeaderAndIsrResponse"), "LAI answer")
    assert response[1] == NONE and {tuple(r) for r in response[2]} == {
        ("c", 0, NONE), ("f", 0, NONE)}
    wait_for(lambda: _got(node, fetcher, "AddFetcherPartitions"), "f-0 given to its fetcher")
    assert _stats(node, shard)["leaders"] == ["c-0"]
    # c-0: two records, follower 2 has the first (its fetch at 1): high watermark 1
    assert _append(node, shard, handler, 1, "c", [b"c1"])[1][0][2] == NONE
    assert _append(node, shard, handler, 2, "c", [b"c2"])[1][0][2] == NONE
    node.tell(shard, Read(3, 2, 1 << 20, [ReadRow("c", 0, 1, 1 << 20)]), sender=handler.name)
    wait_for(lambda: _stats(node, shard)["partitions"]["c-0"] == [0, 1, 2], "HW 1")
    before = _stats(node, shard)
    _watch_fetch(node, shard, handler, purgatory, 4, "c", 1)
    wait_for(lambda: _stats(node, shard)["watched"] == 1, "the purgatory's watch")

    _crash(node, shard, armed)

    # Its roles are not restored from memory: c-0 and f-0 wait for the controller
    stats = _stats(node, shard)
    assert stats["leaders"] == [] and stats["partitions"] == {}
    # The controller's next LeaderAndIsr (a new leader epoch) reopens c-0 with the
    # offsets teardown recorded: high watermark 1, not the start-up checkpoint's 0
    node.tell(manager, LeaderAndIsr(1, 1, 5, [
        LeaderAndIsrPartition("c", 0, 1, 1, 4, [1, 2], 5, [1, 2], False),
    ], [LiveLeaderRow(1, ""), LiveLeaderRow(2, "")], {"c": {}}), sender=controller.name)
    wait_for(lambda: len(_got(node, controller, "LeaderAndIsrResponse")) == 2, "LAI answer")
    wait_for(lambda: _stats(node, shard)["leaders"] == ["c-0"], "c-0 led again")
    stats = _stats(node, shard)
    assert stats["partitions"]["c-0"] == before["partitions"]["c-0"] == [0, 1, 2]
    assert stats["epochs"]["c-0"] == [[3, 0], [4, 2]]  # the new epoch starts at the end


def test_a_topic_deleted_and_created_again_starts_at_offset_zero(
        node: Node, tmp_path: Path) -> None:
    """The offsets checkpointed at start belong to the topic that was deleted: its new
    namesake does not start at the old log start (nor after a crash)."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    snapshot = _snapshot(log_dir)
    # as checkpointed by an earlier life of the broker: records below 5 deleted
    snapshot.log_start_offsets[("x", 0)] = 5
    snapshot.recovery_points[("x", 0)] = 5
    snapshot.high_watermarks[("x", 0)] = 5
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=snapshot, topics={"x": TopicEntry(1, {})}, broker_id=1,
                       clock=node.clock)
    handler = node.spawn(Recorder, "handler-0")
    assert _stats(node, shard)["partitions"] == {"x-0": [5, 5, 5]}
    node.tell(shard, DropPartitions(1, [TopicPartition("x", 0)]), sender=handler.name)
    node.tell(shard, OpenPartitions(2, [OpenPartitionRow("x", 0, {})]), sender=handler.name)
    wait_for(lambda: len(_got(node, handler, "ShardDone")) == 2, "Drop, OpenPartitions")
    assert _stats(node, shard)["partitions"] == {"x-0": [0, 0, 0]}
