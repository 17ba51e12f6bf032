"""A cluster's shard in a restarted process, before the ReplicaManager restored its roles.

Process i % N holds shard i; when that process is restarted (kill -9, the broker's
supervisor starts it again) its shards open nothing until the ReplicaManager's
RestoreRoles, which comes from process 0 by another link than the requests the other
processes' handlers forward to it. A request for a partition such a shard does not hold
yet is NOT_LEADER_OR_FOLLOWER (Kafka's answer for a partition its metadata knows and the
broker does not host: the client refreshes its metadata and retries), never
UNKNOWN_TOPIC_OR_PARTITION for a partition that exists. Real actors in one node; the
handler and the ReplicaManager are recorders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.core.checkpoint import LEADER_EPOCH_CHECKPOINT
from actors.core.log_dir import LogDir
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch
from actors.partition_shard import PartitionShard
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.crash import crash_once
from tests.fixtures.waiting import wait_for
from wire.admin_messages import DeleteRecords, DeleteRecordsDone, DeleteRecordsRow
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendRow,
    GetStats,
    ListOffsets,
    ListOffsetsDone,
    ListOffsetsRow,
    Read,
    ReadDone,
    ReadRow,
)
from wire.cluster_messages import (
    ReplicaStateRow,
    RestoredRoleRow,
    RestoreRoles,
    RolesRestored,
    ShardRestarted,
)
from wire.errors import ErrorCode
from wire.replication_messages import (
    OffsetForEpochRow,
    OffsetForLeaderEpoch,
    OffsetForLeaderEpochDone,
    ReplicaRead,
    ReplicaReadDone,
    ReplicaReadRow,
)
from wire.transaction_messages import TxnMarkerRow, WriteTxnMarkers, WriteTxnMarkersDone

NONE = int(ErrorCode.NONE)
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
UNKNOWN_TP = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
CLUSTER = {"zookeeper.connect": "127.0.0.1:2181"}


class Recorder(Actor):
    """A handler, the ReplicaManager or a purgatory: keeps what comes."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, ReadDone, ListOffsetsDone, OffsetForLeaderEpochDone, RolesRestored,
             ShardRestarted, WriteTxnMarkersDone, DeleteRecordsDone, ReplicaReadDone)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _row(node: Node, recorder: Any, kind: type, req_id: int) -> list[Any]:
    """The first row of answer ``req_id`` (fields by position: what an ask returns went
    through msgpack)."""
    [found] = wait_for(lambda: [fields for name, fields in node.ask(recorder, GetStats())
                                if name == kind.__name__ and fields[0] == req_id],
                       f"the {kind.__name__} {req_id}")
    return list(found[1][0])


def _code(node: Node, recorder: Any, kind: type, req_id: int) -> int:
    """The error code of the first row of answer ``req_id``."""
    return int(_row(node, recorder, kind, req_id)[2])


def _ask_all(node: Node, shard: Any, handler: Any, first_id: int) -> list[int]:
    """Produce, Fetch, ListOffsets and OffsetForLeaderEpoch for c-0: their error codes."""
    node.tell(shard, Append(first_id, 1, 30_000, [AppendRow("c", 0, build_batch([b"x"]))],
                            generation=1), sender=handler.name)
    node.tell(shard, Read(first_id + 1, -1, 1 << 20, [ReadRow("c", 0, 0, 1 << 20)]),
              sender=handler.name)
    node.tell(shard, ListOffsets(first_id + 2, 0, [ListOffsetsRow("c", 0, -1)]),
              sender=handler.name)
    node.tell(shard, OffsetForLeaderEpoch(first_id + 3, [OffsetForEpochRow("c", 0, -1, 0)]),
              sender=handler.name)
    return [
        _code(node, handler, AppendDone, first_id),
        _code(node, handler, ReadDone, first_id + 1),
        _code(node, handler, ListOffsetsDone, first_id + 2),
        _code(node, handler, OffsetForLeaderEpochDone, first_id + 3),
    ]


def test_a_restarted_processs_shard_answers_not_leader_until_its_roles_are_restored(
        node: Node, tmp_path: Path) -> None:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    handler = node.spawn(Recorder, "handler-0")
    manager = node.spawn(Recorder, topo.replica_manager.name)
    node.spawn(Recorder, topo.purgatory(0).name)
    # generation 1: its process was restarted once (a cluster's shard opens nothing then)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo,
                       config=Config(CLUSTER), log_dir=LogDir.open(tmp_path), topics={},
                       broker_id=1, clock=node.clock, generation=1)
    assert _ask_all(node, shard, handler, 1) == [NOT_LEADER] * 4
    assert node.ask(shard, GetStats())["awaiting_restore"] is True

    role = ReplicaStateRow("c", 0, 1, 3, [1], [1], 4, False, {})
    node.tell(shard, RestoreRoles(9, "process 1 restarted", [RestoredRoleRow(role, None)]),
              sender=manager.name)
    assert _code(node, manager, RolesRestored, 9) == NONE
    assert node.ask(shard, GetStats())["awaiting_restore"] is False
    assert _ask_all(node, shard, handler, 11) == [NONE] * 4


def _ask_more(node: Node, shard: Any, handler: Any, first_id: int) -> list[int]:
    """WriteTxnMarkers, DeleteRecords and a follower's ReplicaRead for c-0: their error
    codes."""
    node.tell(shard, WriteTxnMarkers(first_id, [TxnMarkerRow("c", 0, 7, 0, True, 0)]),
              sender=handler.name)
    node.tell(shard, DeleteRecords(first_id + 1, [DeleteRecordsRow("c", 0, 0)]),
              sender=handler.name)
    node.tell(shard, ReplicaRead(first_id + 2, 2, 1 << 20,
                                 [ReplicaReadRow("c", 0, 0, -1, -1, 1 << 20)]),
              sender=handler.name)
    return [
        _code(node, handler, WriteTxnMarkersDone, first_id),
        int(_row(node, handler, DeleteRecordsDone, first_id + 1)[3]),
        _code(node, handler, ReplicaReadDone, first_id + 2),
    ]


def _shard(node: Node, tmp_path: Path, config: dict[str, Any], **kw: Any) -> tuple[Any, Any]:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    handler = node.spawn(Recorder, "handler-0")
    node.spawn(Recorder, topo.replica_manager.name)
    node.spawn(Recorder, topo.purgatory(0).name)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo,
                       config=Config(config), log_dir=LogDir.open(tmp_path), topics={},
                       broker_id=1, clock=node.clock, **kw)
    return shard, handler


def test_a_cluster_shard_says_not_leader_for_a_partition_it_does_not_hold(
        node: Node, tmp_path: Path) -> None:
    """Generation 0 (the broker's start), before the controller's first LeaderAndIsr: the
    shard has no metadata to tell a partition not given yet from one that is gone; a
    request reaches it only once the sender's metadata has the partition. Every answer is
    NOT_LEADER_OR_FOLLOWER: an UNKNOWN_TOPIC_OR_PARTITION marker answer made the
    transaction coordinator drop the marker of a live partition."""
    shard, handler = _shard(node, tmp_path, CLUSTER)
    assert node.ask(shard, GetStats())["awaiting_restore"] is False
    assert _ask_all(node, shard, handler, 1) == [NOT_LEADER] * 4
    assert _ask_more(node, shard, handler, 11) == [NOT_LEADER] * 3


def test_a_single_nodes_shard_says_unknown_partition_for_one_it_does_not_hold(
        node: Node, tmp_path: Path) -> None:
    """A single node holds every partition of the broker: one it does not hold does not
    exist, as Kafka's single broker answers."""
    shard, handler = _shard(node, tmp_path, {})
    assert _ask_all(node, shard, handler, 1) == [UNKNOWN_TP] * 4
    assert _ask_more(node, shard, handler, 11) == [UNKNOWN_TP] * 3


def test_a_shard_a_crash_restarted_in_place_awaits_its_restore(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's shard that crashed (restarted in place, generation 0) holds no role
    until the ReplicaManager's RestoreRoles: it says so (awaiting_restore, which a
    restarted process waits on) and asks for it (ShardRestarted); RestoreRoles ends it."""
    crash = crash_once(monkeypatch, PartitionShard, "on_list_offsets", ListOffsets)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    shard, handler = _shard(node, tmp_path, CLUSTER)
    manager = topo.replica_manager
    role = ReplicaStateRow("c", 0, 1, 3, [1], [1], 4, False, {})
    node.tell(shard, RestoreRoles(1, "a role", [RestoredRoleRow(role, None)]),
              sender=manager.name)
    assert _code(node, manager, RolesRestored, 1) == NONE
    assert node.ask(shard, GetStats())["awaiting_restore"] is False
    crash["crash"] = True
    node.tell(shard, ListOffsets(5, 0, [ListOffsetsRow("c", 0, -1)]), sender=handler.name)
    wait_for(lambda: node.actors[shard.name].crashes == 1 or None, "the shard's crash")
    wait_for(lambda: [m for m in node.ask(manager, GetStats()) if m[0] == "ShardRestarted"],
             "the ShardRestarted")
    assert node.ask(shard, GetStats())["awaiting_restore"] is True
    node.tell(shard, RestoreRoles(2, "shard 0 crashed", [RestoredRoleRow(role, None)]),
              sender=manager.name)
    assert _code(node, manager, RolesRestored, 2) == NONE
    assert node.ask(shard, GetStats())["awaiting_restore"] is False
    assert _ask_all(node, shard, handler, 11) == [NONE] * 4


def _list_earliest(node: Node, shard: Any, handler: Any, req_id: int) -> tuple[int, int]:
    """ListOffsets -2 (earliest) v4+ of c-0: (offset, leader epoch)."""
    node.tell(shard, ListOffsets(req_id, 0, [ListOffsetsRow("c", 0, -2)]), sender=handler.name)
    row = _row(node, handler, ListOffsetsDone, req_id)
    assert row[2] == NONE, row
    return int(row[4]), int(row[5])


def test_list_offsets_earliest_answers_the_epoch_of_the_log_start(
        node: Node, tmp_path: Path) -> None:
    """ListOffsets -2 answers the first epoch of the epoch cache only if it starts at or
    below the log start (Kafka's fetchOffsetByTimestamp): a log whose first records have
    no epoch entry (written before its epoch checkpoint, which is lost here) answers -1;
    once DeleteRecords moves the log start into the cached epoch, that epoch."""
    old = PartitionLog.open(tmp_path / "c-0", "c", 0, LogConfig(), 0)
    old.append_as_leader(build_batch([b"a", b"b"]), 2, 0)
    old.close()
    (tmp_path / "c-0" / LEADER_EPOCH_CHECKPOINT).unlink()
    shard, handler = _shard(node, tmp_path, CLUSTER, generation=1)
    manager = Topology(node.name, 1, 1, 1, 1, 1).replica_manager
    role = ReplicaStateRow("c", 0, 1, 5, [1], [1], 4, False, {})
    node.tell(shard, RestoreRoles(1, "process 1 restarted",
                                  [RestoredRoleRow(role, None)]), sender=manager.name)
    assert _code(node, manager, RolesRestored, 1) == NONE
    node.tell(shard, Append(2, 1, 30_000, [AppendRow("c", 0, build_batch([b"x", b"y"]))],
                            generation=1), sender=handler.name)
    assert _code(node, handler, AppendDone, 2) == NONE
    assert _list_earliest(node, shard, handler, 3) == (0, -1)
    node.tell(shard, DeleteRecords(4, [DeleteRecordsRow("c", 0, 3)]), sender=handler.name)
    assert _row(node, handler, DeleteRecordsDone, 4)[2:4] == [3, NONE]
    assert _list_earliest(node, shard, handler, 5) == (3, 5)
