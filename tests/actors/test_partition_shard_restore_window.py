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

from actors.core.log_dir import LogDir
from actors.core.record_batch import build_batch
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
)

NONE = int(ErrorCode.NONE)
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
CLUSTER = {"zookeeper.connect": "127.0.0.1:2181"}


class Recorder(Actor):
    """A handler, the ReplicaManager or a purgatory: keeps what comes."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, ReadDone, ListOffsetsDone, OffsetForLeaderEpochDone, RolesRestored,
             ShardRestarted)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _code(node: Node, recorder: Any, kind: type, req_id: int) -> int:
    """The error code of the first row of answer ``req_id`` (fields by position: what an
    ask returns went through msgpack)."""
    [found] = wait_for(lambda: [fields for name, fields in node.ask(recorder, GetStats())
                                if name == kind.__name__ and fields[0] == req_id],
                       f"the {kind.__name__} {req_id}")
    return int(found[1][0][2])


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
    node.tell(shard, RestoreRoles(9, "process 1 restarted", [RestoredRoleRow(role, False,
                                                                             None)]),
              sender=manager.name)
    assert _code(node, manager, RolesRestored, 9) == NONE
    assert node.ask(shard, GetStats())["awaiting_restore"] is False
    assert _ask_all(node, shard, handler, 11) == [NONE] * 4


def test_a_first_process_shard_says_unknown_partition_for_one_it_never_had(
        node: Node, tmp_path: Path) -> None:
    """Generation 0 (the broker's start): the controller's LeaderAndIsr gives the roles;
    nothing is restored, and a partition never given is not known here."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    handler = node.spawn(Recorder, "handler-0")
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo,
                       config=Config(CLUSTER), log_dir=LogDir.open(tmp_path), topics={},
                       broker_id=1, clock=node.clock)
    node.tell(shard, Read(1, -1, 1 << 20, [ReadRow("c", 0, 0, 1 << 20)]), sender=handler.name)
    assert _code(node, handler, ReadDone, 1) == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert node.ask(shard, GetStats())["awaiting_restore"] is False
