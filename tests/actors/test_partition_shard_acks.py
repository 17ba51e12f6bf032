"""What an acks=-1 append on a leader with followers is answered, when it goes wrong.

A leader whose ISR holds a follower that does not have the new record must not
acknowledge it (error NONE) before the follower does: not when the shard fails after
the append (the row waits in the purgatory as any other), and not when a client's
Kafka-wire Fetch names the follower's replica id at an offset past the log end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
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
    PartitionChanged,
    Read,
    ReadDone,
    ReadRow,
    TopicEntry,
    WatchPartition,
    WatchProduce,
)
from wire.cluster_messages import BecameLeaderOrFollower, BecomeLeaderOrFollower, ReplicaStateRow
from wire.errors import ErrorCode

CONFIGS = {"min.insync.replicas": "2"}


class Recorder(Actor):
    """Stands in for a handler, the purgatory and the ReplicaManager: keeps what comes,
    as [type name, fields] (asked from the test's thread, it travels as plain lists)."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, WatchProduce, PartitionChanged, BecameLeaderOrFollower, ReadDone)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _leader_of_two(node: Node, tmp_path: Path) -> tuple[Any, Any, Topology]:
    """Partition t-0 led here (broker 1) with ISR [1, 2]; follower 2 has fetched nothing."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics={"t": TopicEntry(1, CONFIGS)}, broker_id=1,
                       clock=node.clock)
    recorder = node.spawn(Recorder, "recorder")
    node.tell(shard, BecomeLeaderOrFollower(1, [ReplicaStateRow(
        "t", 0, 1, 1, [1, 2], [1, 2], 1, False, CONFIGS)]), sender="recorder")
    wait_for(lambda: _got(node, recorder, "BecameLeaderOrFollower"))
    return shard, recorder, topo


def _got(node: Node, recorder: Any, kind: str) -> list[Any]:
    """The fields of each ``kind`` message the recorder has, in order."""
    return [fields for name, fields in node.ask(recorder, GetStats()) if name == kind]


def _partition(node: Node, shard: Any) -> list[int]:
    """[log start offset, high watermark, log end offset] of t-0."""
    stats: dict[str, Any] = node.ask(shard, GetStats())
    return list(stats["partitions"]["t-0"])


def test_an_acks_all_append_is_not_acknowledged_when_the_shard_fails_after_it(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shard, recorder, topo = _leader_of_two(node, tmp_path)
    # a watcher of the partition (as the purgatory is): the append then tells it the news
    node.tell(shard, WatchPartition("t", 0, -1, True), sender="recorder")
    wait_for(lambda: _got(node, recorder, "PartitionChanged"))
    real = PartitionState.status
    calls = {"n": 0}

    def failing_once(state: PartitionState) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a status that fails once")
        return real(state)

    monkeypatch.setattr(PartitionState, "status", failing_once)
    # the purgatory this partition's waits go to is the recorder too
    purgatory = node.spawn(Recorder, topo.purgatory_for("t", 0).name)
    node.tell(shard, Append(7, -1, 30_000, [AppendRow("t", 0, build_batch([b"only-here"]))]),
              sender="recorder")
    wait_for(lambda: calls["n"] >= 1 and (_got(node, purgatory, "WatchProduce")
                                          or _got(node, recorder, "AppendDone")), timeout=10)
    answered = _got(node, recorder, "AppendDone")
    assert answered == [], f"acknowledged at once, follower 2 lacking it: {answered}"
    [watch] = _got(node, purgatory, "WatchProduce")
    req_id, _handler, _timeout, [row], *_ = watch
    assert req_id == 7
    # topic, partition, required offset, base offset, ..., error code
    assert row[:4] == ["t", 0, 1, 0] and row[-1] == int(ErrorCode.NONE)


def test_a_wire_fetch_naming_a_follower_past_the_log_end_does_not_move_the_high_watermark(
        node: Node, tmp_path: Path) -> None:
    shard, recorder, _topo = _leader_of_two(node, tmp_path)
    node.tell(shard, Append(1, 1, 30_000, [AppendRow("t", 0, build_batch([b"a"]))]),
              sender="recorder")
    wait_for(lambda: _got(node, recorder, "AppendDone"))
    log_start, high, end = _partition(node, shard)
    assert (log_start, high, end) == (0, 0, 1)

    def read_as_follower(req_id: int, offset: int) -> None:
        node.tell(shard, Read(req_id, 2, 1 << 20, [ReadRow("t", 0, offset, 1 << 20)], False),
                  sender="recorder")
        wait_for(lambda: [r for r in _got(node, recorder, "ReadDone") if r[0] == req_id])

    read_as_follower(2, 1000)
    assert _partition(node, shard)[1] == 0  # follower 2 holds nothing: no acknowledgement
    read_as_follower(3, 1)  # a fetch at the log end: follower 2 has offset 0
    assert _partition(node, shard)[1] == 1
