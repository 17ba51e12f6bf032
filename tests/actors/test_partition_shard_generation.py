"""A restarted broker process never writes an Append its sender gave up.

num.processes > 1: a handler of process 0 sends its Appends to a shard of process 1; while
process 1 is dead, the links keep them, and deliver them to the new process once it
listens. The handler gives those requests up when it learns of the restart
(ProcessStarted; the client's connection closes): the client retries them, or, told by a
later answer that a batch was not written (OUT_OF_ORDER_SEQUENCE_NUMBER for the next one),
bumps its producer epoch and sends the same records again at sequence 0. Written late, the
stale copy would put those records in the log twice.

The fence is the process's generation (0 at the broker's start, +1 at each restart): the
handler stamps each Append with the generation it knows of the shard's process, and the
shard refuses one stamped older than its own, whatever gave it its roles (the
ReplicaManager's RestoreRoles, a LeaderAndIsr that came first, or a single node's topic
table). Real shards and logs here; test_request_handler_generation.py has the handler
and the whole chain over a direct link.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
from actors.core.record_batch import build_batch
from actors.core.topic_store import TopicEntry
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.purgatory import PurgatoryShard
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import Append, AppendDone, AppendDoneRow, AppendRow, GetStats, Schedule
from wire.cluster_messages import (
    BecameLeaderOrFollower,
    BecomeLeaderOrFollower,
    ReplicaStateRow,
    RestoredRoleRow,
    RestoreRoles,
    RolesRestored,
)
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
PID = 4000
ROLES = ["restore", "leader_and_isr", "topic_table"]


class Recorder(Actor):
    """Stands in for the handler and the timer: keeps what comes, as [type name, fields]."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, RolesRestored, BecameLeaderOrFollower, Schedule)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _got(node: Node, recorder: Any, kind: str) -> list[Any]:
    return [fields for name, fields in node.ask(recorder, GetStats()) if name == kind]


def _shard_of_generation(node: Node, tmp_path: Path, generation: int,
                         roles: str) -> tuple[Any, Any]:
    """The shard of a process of ``generation`` leading c-0 alone, its role given as
    ``roles`` says: RestoreRoles (the ReplicaManager after the process restarted),
    BecomeLeaderOrFollower (a LeaderAndIsr that reached it before the restore), or the
    topic table at spawn (a single node)."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    topics = {"c": TopicEntry(1, {})} if roles == "topic_table" else {}
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics=topics, broker_id=1, clock=node.clock,
                       generation=generation)
    node.spawn(PurgatoryShard, topo.purgatory(0).name, topology=topo, clock=node.clock)
    node.spawn(Recorder, topo.timer.name)
    handler = node.spawn(Recorder, "handler-0")
    role = ReplicaStateRow("c", 0, 1, 0, [1], [1], 0, False, {})
    if roles == "restore":
        node.tell(shard, RestoreRoles(1, "process 1 restarted",
                                      [RestoredRoleRow(role, None)]),
                  sender=handler.name)
        wait_for(lambda: _got(node, handler, "RolesRestored"), "the restore")
    elif roles == "leader_and_isr":
        node.tell(shard, BecomeLeaderOrFollower(1, [role]), sender=handler.name)
        wait_for(lambda: _got(node, handler, "BecameLeaderOrFollower"), "the LeaderAndIsr")
    assert node.ask(shard, GetStats())["leaders"] == ["c-0"]
    return shard, handler


def _append(node: Node, shard: Any, handler: Any, req_id: int, batch: bytes,
            generation: int) -> AppendDoneRow:
    node.tell(shard, Append(req_id, 1, 30_000, [AppendRow("c", 0, batch)], False, generation),
              sender=handler.name)
    [done] = wait_for(lambda: [d for d in _got(node, handler, "AppendDone")
                               if d[0] == req_id], f"the answer to append {req_id}")
    [row] = done[1]
    return AppendDoneRow(*row)


def _stats(node: Node, shard: Any) -> dict[str, Any]:
    stats: dict[str, Any] = node.ask(shard, GetStats())
    return stats


@pytest.mark.parametrize("roles", ROLES)
def test_an_append_stamped_with_the_replaced_processs_generation_is_refused(
        node: Node, tmp_path: Path, roles: str) -> None:
    shard, handler = _shard_of_generation(node, tmp_path, 1, roles)
    record: list[bytes | None] = [b"17"]
    # sent to generation 0 of the process, which died; a link delivers it only now
    stale = _append(node, shard, handler, 1, build_batch(
        record, producer_id=PID, producer_epoch=0, base_sequence=5), generation=0)
    assert stale.error_code == NOT_LEADER
    assert _stats(node, shard)["partitions"]["c-0"][2] == 0, "the stale Append was written"
    # its handler gave it up (the connection closed); the client sends the record again
    # under a new producer epoch (which starts at sequence 0), to generation 1
    again = _append(node, shard, handler, 2, build_batch(
        record, producer_id=PID, producer_epoch=1, base_sequence=0), generation=1)
    assert (again.error_code, again.base_offset) == (NONE, 0)
    stats = _stats(node, shard)
    assert stats["partitions"]["c-0"][2] == 1, "the record is not in the log once"
    assert (stats["generation"], stats["stale_appends_refused"]) == (1, 1)


@pytest.mark.parametrize("roles", ROLES)
def test_appends_of_the_current_generation_and_unfenced_ones_are_written(
        node: Node, tmp_path: Path, roles: str) -> None:
    """Stamped with the shard's own generation, or newer (a handler never knows a newer
    one, but nothing in it is stale), or -1 (the coordinators, which wait for every
    answer: nothing of theirs is given up): written."""
    shard, handler = _shard_of_generation(node, tmp_path, 2, roles)
    for req_id, generation in enumerate([2, 3, -1], start=1):
        row = _append(node, shard, handler, req_id, build_batch([b"v"]), generation)
        assert (row.error_code, row.base_offset) == (NONE, req_id - 1)
    assert _stats(node, shard)["stale_appends_refused"] == 0


def test_a_first_generation_shard_takes_every_stamp(node: Node, tmp_path: Path) -> None:
    """Generation 0 (a process that never restarted, and process 0): nothing is older."""
    shard, handler = _shard_of_generation(node, tmp_path, 0, "topic_table")
    for req_id, generation in enumerate([0, -1], start=1):
        row = _append(node, shard, handler, req_id, build_batch([b"v"]), generation)
        assert row.error_code == NONE
    assert _stats(node, shard)["partitions"]["c-0"][2] == 2
