"""A PartitionShard that crashes comes back hosting what it hosted.

Supervision restarts a crashed actor in place (teardown, then setup, mailbox
kept). The shard reopens every partition it hosted from disk, not only the
topics it was spawned with: a single node's lead alone again at once; a
cluster's come back with no role and the ReplicaManager sends their last roles
(RestoreRoles), the shard has the purgatories watch them again and the
fetchers re-add the followed ones, so they serve again without a new
LeaderAndIsr. Real actors in one node; a handler made to fail once causes
the crash. A partition deleted since the start is reopened by neither, and a
namesake created later does not take the offsets the deleted one had.

What is restored must not be older than what the controller said since (the
review's three hazards): a LeaderAndIsr waiting in the mailbox, or whose
application died with the crash, wins over the last role; a leader whose ISR
change the controller refused for good is restored leading, the change held; an
ISR change written with
its answer lost comes back as written, or as the pending proposal it was, so
the high watermark never goes over a smaller ISR than the one the controller
may elect from. A LeaderAndIsr whose application died is answered once the
restore is (the controller, the coordinators and the fetchers learn it), and the
fetchers follow the restored roles, not the last applied ones.

A partition whose storage failed (its fsync failed, made to fail at the call here,
and lost what was not synced) is not restored to a role that counts it in the ISR:
the shard answers KAFKA_STORAGE_ERROR, the ReplicaManager tells the controller
(LogDirEventNotification), and a role out of the ISR has it follow again. A single
node, with nobody to fail over to, leads on and logs what it lost.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import threading
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from loguru import logger

from actors.core.controller_channel import ControllerChannel
from actors.core.log_dir import LogDir
from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.core.partition_state import PROPOSAL_RETRY_MS, PartitionState
from actors.core.record_batch import build_batch
from actors.core.transaction_log import TRANSACTION_STATE_TOPIC
from actors.log_manager import LogManager
from actors.partition_shard import STORAGE_FAILED_MARKER, PartitionShard
from actors.purgatory import PurgatoryShard
from actors.replica_fetcher import fetcher_name
from actors.replica_manager import (
    ALTER_PARTITION_TIMEOUT_MS,
    LOG_DIR_EVENT_RETRY_MS,
    ReplicaManager,
)
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology, stable_hash
from actors.transaction_coordinator import txn_coordinator_name
from tests.fixtures.crash import crash_once
from tests.fixtures.immutable import immutable_flags
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
    ProduceReady,
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
    AlterPartition,
    AlterPartitionResponse,
    AlterPartitionResult,
    BecameLeaderOrFollower,
    BecomeLeaderOrFollower,
    BrokerRegistered,
    CoordinatorPartitions,
    LeaderAndIsr,
    LeaderAndIsrPartition,
    LeaderAndIsrResponse,
    LiveLeaderRow,
    LogDirEventNotification,
    LogDirEventNotificationResponse,
    PartitionErrorRow,
    PendingIsrRow,
    ReplicaStateRow,
    RestoredRoleRow,
    RestoreRoles,
    RolesRestored,
    ShardRestarted,
    StopReplica,
    StopReplicaPartition,
    StopReplicaResponse,
    UpdateMetadata,
    UpdateMetadataPartition,
)
from wire.errors import ErrorCode
from wire.replication_messages import (
    AddFetcherPartitions,
    FollowerApplied,
    FollowerApply,
    FollowerApplyRow,
    IsrProposalRow,
    ProposeIsr,
    RemoveFetcherPartitions,
    ReplicaRead,
    ReplicaReadDone,
    ReplicaReadRow,
)
from wire.transaction_messages import TxnCoordinatorPartitions

NONE = int(ErrorCode.NONE)


class Recorder(Actor):
    """Stands in for a handler, the controller, the timer or a replica fetcher: keeps what
    comes, as [type name, fields]."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, ShardDone, ReadDone, FetchReady, LeaderAndIsrResponse, Schedule,
             Cancel, AddFetcherPartitions, RemoveFetcherPartitions, AlterPartition,
             ReplicaReadDone, ProduceReady, StopReplicaResponse, BecameLeaderOrFollower,
             RolesRestored, CoordinatorPartitions, TxnCoordinatorPartitions,
             LogDirEventNotification, FollowerApplied)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _got(node: Node, recorder: Any, kind: str) -> list[Any]:
    return [fields for name, fields in node.ask(recorder, GetStats()) if name == kind]


def _crash_once(monkeypatch: pytest.MonkeyPatch, handler: str, message: type,
                hold: threading.Event | None = None) -> dict[str, bool]:
    """PartitionShard's ``handler`` (of ``message``) raises once when armed."""
    return crash_once(monkeypatch, PartitionShard, handler, message, hold)


def _crash_on_flush(monkeypatch: pytest.MonkeyPatch,
                    hold: threading.Event | None = None) -> dict[str, bool]:
    return _crash_once(monkeypatch, "on_flush", Flush, hold)


def _crash_on_become(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """The role a BecomeLeaderOrFollower carried dies with the crash."""
    return _crash_once(monkeypatch, "on_become_leader_or_follower", BecomeLeaderOrFollower)


def _snapshot(log_dir: LogDir) -> LogDir:
    """What the broker gives its shards: the checkpoints read at start (the LogManager
    owns ``log_dir`` and updates it)."""
    snapshot = copy.copy(log_dir)
    snapshot.high_watermarks = dict(log_dir.high_watermarks)
    snapshot.recovery_points = dict(log_dir.recovery_points)
    snapshot.log_start_offsets = dict(log_dir.log_start_offsets)
    return snapshot


def _crash(node: Node, shard: Any, armed: dict[str, bool], wait: bool = True) -> None:
    armed["crash"] = True
    node.tell(shard, Flush())
    if wait:
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


class Cluster(NamedTuple):
    """Broker 1 of a cluster in one node: a shard, the ReplicaManager, a purgatory; the
    controller, a handler and the fetcher of f-0 are recorders."""

    node: Node
    shard: Any
    manager: Any
    purgatory: Any
    handler: Any
    controller: Any
    fetcher: Any


def _cluster(node: Node, tmp_path: Path, c_isr: list[int]) -> Cluster:
    """c-0 led by this broker (1) at leader epoch 3, partition epoch 4, replicas [1, 2],
    ISR ``c_isr``; f-0 followed (leader 2, leader epoch 7)."""
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
    controller = node.spawn(Recorder, topo.controller.name)
    # the fetcher of f-0 (led by broker 2): the ReplicaManager uses the running one
    fetcher = node.spawn(Recorder, fetcher_name(
        2, stable_hash("f-0") % int(config["num.replica.fetchers"])))
    node.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
    node.tell(manager, LeaderAndIsr(1, 1, 5, [
        LeaderAndIsrPartition("c", 0, 1, 1, 3, c_isr, 4, [1, 2], True),
        LeaderAndIsrPartition("f", 0, 1, 2, 7, [2, 1], 9, [2, 1], True),
    ], [LiveLeaderRow(1, ""), LiveLeaderRow(2, "")], {"c": {}, "f": {}}),
        sender=controller.name)
    [response] = wait_for(lambda: _got(node, controller, "LeaderAndIsrResponse"), "LAI answer")
    assert response[1] == NONE and {tuple(r) for r in response[2]} == {
        ("c", 0, NONE), ("f", 0, NONE)}
    wait_for(lambda: _got(node, fetcher, "AddFetcherPartitions"), "f-0 given to its fetcher")
    assert _stats(node, shard)["leaders"] == ["c-0"]
    return Cluster(node, shard, manager, purgatory, handler, controller, fetcher)


def _lai(c: Cluster, controller_epoch: int, *rows: LeaderAndIsrPartition) -> None:
    c.node.tell(c.manager, LeaderAndIsr(1, controller_epoch, 5, list(rows), [
        LiveLeaderRow(1, ""), LiveLeaderRow(2, "")], {r.topic: {} for r in rows}),
        sender=c.controller.name)


def _follower_fetch(c: Cluster, req_id: int, offset: int) -> None:
    """Broker 2's fetch of c-0 at ``offset``."""
    c.node.tell(c.shard, ReplicaRead(req_id, 2, 1 << 20, [
        ReplicaReadRow("c", 0, offset, -1, -1, 1 << 20, 0)]), sender=c.handler.name)
    wait_for(lambda: [r for r in _got(c.node, c.handler, "ReplicaReadDone") if r[0] == req_id],
             f"the follower's fetch {req_id}")


def _expansion_proposed(c: Cluster) -> Any:
    """c-0 (ISR [1]) gets a record, and broker 2 catches up: the leader proposes ISR [1, 2]
    at leader epoch 3, partition epoch 4; the ReplicaManager sends it to the controller."""
    assert _append(c.node, c.shard, c.handler, 1, "c", [b"c1"])[1][0][2] == NONE
    _follower_fetch(c, 2, 1)
    [alter] = wait_for(lambda: _got(c.node, c.controller, "AlterPartition"), "AlterPartition")
    assert [tuple(i) for i in alter[3]] == [("c", 0, 3, [1, 2], 4)]
    return alter


def _answer(c: Cluster, alter: Any, code: int, isr: list[int], partition_epoch: int) -> None:
    c.node.tell(c.manager, AlterPartitionResponse(alter[0], NONE, [AlterPartitionResult(
        "c", 0, code, 1 if code == NONE else -1, 3 if code == NONE else -1, isr,
        partition_epoch)]), sender=c.controller.name)


def _restored(c: Cluster, count: int = 1) -> None:
    wait_for(lambda: c.node.ask(c.manager, GetStats())["shards_restarted"] == count,
             "the ReplicaManager's restore")
    wait_for(lambda: _stats(c.node, c.shard)["replication"].get("restores") == 1,
             "the restore applied")


def test_a_cluster_shard_serves_its_partitions_again_after_a_crash(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a new LeaderAndIsr: before, its partitions stayed dark until the controller
    said something new, which may never come."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    shard, handler = c.shard, c.handler
    # c-0: two records, follower 2 has the first (its fetch at 1): high watermark 1
    assert _append(node, shard, handler, 1, "c", [b"c1"])[1][0][2] == NONE
    assert _append(node, shard, handler, 2, "c", [b"c2"])[1][0][2] == NONE
    node.tell(shard, Read(3, 2, 1 << 20, [ReadRow("c", 0, 1, 1 << 20)]), sender=handler.name)
    wait_for(lambda: _stats(node, shard)["partitions"]["c-0"] == [0, 1, 2], "HW 1")
    before = _stats(node, shard)
    _watch_fetch(node, shard, handler, c.purgatory, 4, "c", 1)
    wait_for(lambda: _stats(node, shard)["watched"] == 1, "the purgatory's watch")

    _crash(node, shard, armed)

    wait_for(lambda: _stats(node, shard)["leaders"] == ["c-0"], "c-0 led again", timeout=10)
    stats = _stats(node, shard)
    assert stats["partitions"] == before["partitions"]  # high watermark 1 kept
    assert stats["epochs"] == before["epochs"]  # c-0 at leader epoch 3, f-0 at 7
    assert stats["isr"] == {"c-0": [1, 2]}
    assert node.ask(c.manager, GetStats())["shards_restarted"] == 1
    # the purgatory watches c-0 again: the follower's fetch at 2 moves the high
    # watermark, and the waiting fetch wakes
    wait_for(lambda: _stats(node, shard)["watched"] == 1, "the purgatory's watch again")
    node.tell(shard, Read(5, 2, 1 << 20, [ReadRow("c", 0, 2, 1 << 20)]), sender=handler.name)
    wait_for(lambda: [r for r in _got(node, handler, "FetchReady") if r[0] == 4],
             "the waiting fetch to wake")
    # f-0's fetcher forgot it and had it again (an apply it waited for died in the crash)
    wait_for(lambda: _got(node, c.fetcher, "RemoveFetcherPartitions"), "f-0 removed")
    added = _got(node, c.fetcher, "AddFetcherPartitions")
    assert len(added) == 2 and added[1][0] == [["f", 0, 2, 7]]
    # and it takes writes again
    assert _append(node, shard, handler, 6, "c", [b"c3"])[1][0][2:4] == [NONE, 2]


def test_a_newer_leader_and_isr_waiting_in_the_mailbox_wins_over_the_restore(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hazard 1: the controller moved c-0 to broker 2 (leader epoch 4) while the shard was
    crashing; its LeaderAndIsr waits in the mailbox and is applied before the restore."""
    hold = threading.Event()
    armed = _crash_on_flush(monkeypatch, hold)
    c = _cluster(node, tmp_path, [1, 2])
    _crash(node, c.shard, armed, wait=False)
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 2, 4, [2, 1], 5, [1, 2], False))
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["lai"] == 2, "LAI accepted")
    hold.set()
    _restored(c)
    wait_for(lambda: len(_got(node, c.controller, "LeaderAndIsrResponse")) == 2, "LAI answer")
    assert _stats(node, c.shard)["leaders"] == []
    done = _append(node, c.shard, c.handler, 1, "c", [b"x"])
    assert done[1][0][2] == int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_a_partition_deleted_while_the_shard_crashed_is_not_restored(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller deleted c-0 while the shard was crashing: its drop waits in the
    mailbox, and the restore that follows must not bring the log back."""
    hold = threading.Event()
    armed = _crash_on_flush(monkeypatch, hold)
    c = _cluster(node, tmp_path, [1, 2])
    assert (tmp_path / "c-0").is_dir()
    _crash(node, c.shard, armed, wait=False)
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True)]),
              sender=c.controller.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["stop"] == 1, "accepted")
    hold.set()
    _restored(c)
    wait_for(lambda: _got(node, c.controller, "StopReplicaResponse"), "StopReplica answer")
    assert list(_stats(node, c.shard)["partitions"]) == ["f-0"]
    assert not (tmp_path / "c-0").exists()


def test_a_restored_role_older_than_the_one_applied_is_ignored(
        node: Node, tmp_path: Path) -> None:
    """Hazard 1, the shard's own check (a restore sent before the ReplicaManager learnt of
    a newer role): a role at an older or equal leader epoch than the one the shard applied
    since it started again changes nothing; a newer one is applied."""
    c = _cluster(node, tmp_path, [1, 2])
    role = ReplicaStateRow("c", 0, 1, 3, [1, 2], [1, 2], 4, False, {})
    # one sender (the runtime orders one sender's messages), answers awaited
    sender = c.handler.name
    node.tell(c.shard, BecomeLeaderOrFollower(99, [role._replace(
        leader=2, leader_epoch=4, partition_epoch=5)]), sender=sender)
    node.tell(c.shard, RestoreRoles(1, "test", [RestoredRoleRow(role, None)]),
              sender=sender)
    node.tell(c.shard, RestoreRoles(2, "test", [RestoredRoleRow(role._replace(
        leader_epoch=4, partition_epoch=5), None)]), sender=sender)
    wait_for(lambda: len(_got(node, c.handler, "RolesRestored")) == 2, "both restores")
    assert _stats(node, c.shard)["leaders"] == []
    assert _stats(node, c.shard)["epochs"]["c-0"] == [[3, 0]]  # epoch 4 never led here
    node.tell(c.shard, RestoreRoles(3, "test", [RestoredRoleRow(role._replace(
        leader_epoch=5, partition_epoch=6), None)]), sender=sender)
    wait_for(lambda: len(_got(node, c.handler, "RolesRestored")) == 3, "the third restore")
    assert _stats(node, c.shard)["leaders"] == ["c-0"]


def test_a_leader_and_isr_whose_application_died_with_the_crash_is_restored(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hazard 1, in flight: the shard crashed applying the controller's newer role (c-0 to
    broker 2 at leader epoch 4): the restore is that role, not the older one it replaced
    (leading c-0 again at epoch 3 would take writes the controller's leader never sees)."""
    armed = _crash_on_become(monkeypatch)
    c = _cluster(node, tmp_path, [1])
    armed["crash"] = True
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 2, 4, [2], 5, [1, 2], False))
    _restored(c)
    assert not armed["crash"]
    assert _stats(node, c.shard)["leaders"] == []
    done = _append(node, c.shard, c.handler, 1, "c", [b"x"])
    assert done[1][0][2] == int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    # the shard never answered that LeaderAndIsr; the restore's answer settles it: the
    # controller gets its answer (its resend would be refused as the same leader epoch),
    # and the ReplicaManager follows the role (the fetcher of broker 2 fetches c-0)
    responses = wait_for(lambda: _got(node, c.controller, "LeaderAndIsrResponse")[1:],
                         "the LeaderAndIsr answered after the restore")
    assert responses[0][1] == NONE and [tuple(r) for r in responses[0][2]] == [("c", 0, NONE)]
    manager = node.ask(c.manager, GetStats())
    assert manager["following"] == ["c-0", "f-0"] and manager["pending"] == 0
    assert manager["fetched_by"]["c-0"] == c.fetcher.name
    assert ["c", 0, 2, 4] in [row for add in _got(node, c.fetcher, "AddFetcherPartitions")
                              for row in add[0]]


def test_a_resend_while_the_shard_crashed_is_answered_once_by_the_restore(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard crashes applying LeaderAndIsr 1 (a channel's id); the channel's resend comes
    meanwhile and is swallowed (still being applied). The restore settles the request:
    the controller gets one answer, naming id 1, and no other."""
    hold = threading.Event()
    armed = _crash_once(monkeypatch, "on_become_leader_or_follower", BecomeLeaderOrFollower,
                        hold)
    c = _cluster(node, tmp_path, [1])
    armed["crash"] = True
    request = LeaderAndIsr(1, 1, 5, [LeaderAndIsrPartition("c", 0, 1, 2, 4, [2], 5, [1, 2],
                                                           False)],
                           [LiveLeaderRow(1, ""), LiveLeaderRow(2, "")], {"c": {}}, ID + 1)
    node.tell(c.manager, request, sender=c.controller.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 1, "LeaderAndIsr 1 sent")
    node.tell(c.manager, request, sender=c.controller.name)  # the channel's resend
    wait_for(lambda: node.ask(c.manager, GetStats())["resends_in_progress"] == 1,
             "the resend swallowed")
    assert _got(node, c.controller, "LeaderAndIsrResponse")[1:] == []
    hold.set()
    _restored(c)
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 0, "settled by the restore")
    [answer] = wait_for(lambda: _got(node, c.controller, "LeaderAndIsrResponse")[1:],
                        "the answer")
    assert answer[1] == NONE and answer[3] == ID + 1
    assert [tuple(r) for r in answer[2]] == [("c", 0, NONE)]
    node.quiesce(5)
    assert len(_got(node, c.controller, "LeaderAndIsrResponse")) == 2, "answered twice"
    assert node.ask(c.manager, GetStats())["following"] == ["c-0", "f-0"]


def test_a_delete_whose_application_died_with_the_crash_is_done_after_the_restore(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard crashed deleting c-0 (StopReplica), before it forgot c-0: it never
    answers that DropPartitions, and came back hosting c-0 with no role. The
    ReplicaManager sends the drop again after the restore; its answer settles the
    StopReplica: c-0's directory is gone and the controller is answered NONE (a failure
    would leave the topic's deletion stuck until the broker registers again)."""
    armed = _crash_once(monkeypatch, "on_drop", DropPartitions)
    c = _cluster(node, tmp_path, [1, 2])
    assert (tmp_path / "c-0").is_dir()
    armed["crash"] = True
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True)]),
              sender=c.controller.name)
    _restored(c)
    [response] = wait_for(lambda: _got(node, c.controller, "StopReplicaResponse"),
                          "the StopReplica answered after the restore")
    assert response[1] == NONE and [tuple(r) for r in response[2]] == [("c", 0, NONE)]
    assert not (tmp_path / "c-0").exists(), "the deleted partition's directory stayed"
    manager = node.ask(c.manager, GetStats())
    assert manager["pending"] == 0 and manager["leading"] == []
    assert list(_stats(node, c.shard)["partitions"]) == ["f-0"]


def test_a_drop_of_a_partition_not_open_deletes_its_directory(
        node: Node, tmp_path: Path) -> None:
    """A cluster's process opens nothing at start: a delete of a partition its shard has
    not opened (its role never came back) removes the directory all the same, so a later
    topic of the name does not open the deleted one's records."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    (tmp_path / "d-0").mkdir()
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=_snapshot(log_dir), topics={}, broker_id=1, clock=node.clock)
    handler = node.spawn(Recorder, "handler-0")
    assert _stats(node, shard)["partitions"] == {}
    node.tell(shard, DropPartitions(1, [TopicPartition("d", 0), TopicPartition("e", 0)]),
              sender=handler.name)
    [done] = wait_for(lambda: _got(node, handler, "ShardDone"), "the drop's answer")
    assert done[1] == "" and done[2] == []
    assert not (tmp_path / "d-0").exists(), "the directory of a partition not open stayed"
    assert not list(tmp_path.glob("d-0*"))


def test_a_restore_with_a_leader_and_isr_in_flight_fetches_from_the_new_leader(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller moved f-0's leadership from broker 2 to broker 3 while the shard was
    crashing (its LeaderAndIsr waits in the mailbox): the restore, which carries the new
    role, has broker 3's fetcher fetch f-0, never broker 2's fetch it from broker 3."""
    hold = threading.Event()
    armed = _crash_on_flush(monkeypatch, hold)
    c = _cluster(node, tmp_path, [1, 2])
    old_fetcher = node.actors[c.fetcher.name]
    new_fetcher = node.spawn(Recorder, fetcher_name(
        3, stable_hash("f-0") % int(Config()["num.replica.fetchers"])))
    _crash(node, c.shard, armed, wait=False)
    node.tell(c.manager, LeaderAndIsr(1, 1, 5, [
        LeaderAndIsrPartition("f", 0, 1, 3, 8, [3, 1], 10, [3, 1], False)],
        [LiveLeaderRow(1, ""), LiveLeaderRow(3, "")], {"f": {}}), sender=c.controller.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["lai"] == 2, "LAI accepted")
    hold.set()
    _restored(c)
    wait_for(lambda: len(_got(node, c.controller, "LeaderAndIsrResponse")) == 2, "LAI answer")
    added = wait_for(lambda: _got(node, new_fetcher, "AddFetcherPartitions"),
                     "f-0 given to broker 3's fetcher")
    assert all(add[0] == [["f", 0, 3, 8]] for add in added)
    # broker 2's fetcher, left with nothing, was stopped (its mailbox done)
    wait_for(lambda: old_fetcher.actor_stopped.is_set(), "broker 2's idle fetcher stopped")
    wrong = [row for name, msg in old_fetcher.got if name == "AddFetcherPartitions"
             for row in msg[0] if row[2] != 2]
    assert not wrong, f"broker 2's fetcher was told to fetch from another leader: {wrong}"
    assert node.ask(c.manager, GetStats())["fetched_by"] == {"f-0": new_fetcher.name}


def test_a_namesake_created_after_a_delete_keeps_its_role_once_the_delete_is_done(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c-0 deleted (StopReplica) and created again (a LeaderAndIsr) while the shard was
    crashing: the delete's answer, coming after the new role was accepted, does not make
    the ReplicaManager forget the new role, so a later crash restores it."""
    hold = threading.Event()
    armed = _crash_on_flush(monkeypatch, hold)
    c = _cluster(node, tmp_path, [1, 2])
    _crash(node, c.shard, armed, wait=False)
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True)]),
              sender=c.controller.name)
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 0, [1], 0, [1, 2], True))
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["lai"] == 2, "LAI accepted")
    hold.set()
    _restored(c)
    wait_for(lambda: _got(node, c.controller, "StopReplicaResponse"), "StopReplica answer")
    wait_for(lambda: len(_got(node, c.controller, "LeaderAndIsrResponse")) == 2, "LAI answer")
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 0, "all answered")
    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0]  # the new, empty log

    armed["crash"] = True
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 2, "the second crash")
    _restored(c, 2)
    assert _stats(node, c.shard)["leaders"] == ["c-0"], "the namesake's role was forgotten"


def test_a_role_the_shard_could_not_take_is_not_restored(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """z-0's log could not be created (a file stands where its directory goes): the shard
    answered KAFKA_STORAGE_ERROR, so the controller counts it offline here. Once the file
    is gone, a crash's restore does not lead it behind the controller's back."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    (tmp_path / "z-0").write_bytes(b"in the way")
    _lai(c, 1, LeaderAndIsrPartition("z", 0, 1, 1, 1, [1], 1, [1, 2], True))
    [response] = wait_for(lambda: _got(node, c.controller, "LeaderAndIsrResponse")[1:],
                          "the LeaderAndIsr answer")
    assert [tuple(r) for r in response[2]] == [("z", 0, int(ErrorCode.KAFKA_STORAGE_ERROR))]
    (tmp_path / "z-0").unlink()

    _crash(node, c.shard, armed)
    _restored(c)

    stats = _stats(node, c.shard)
    assert stats["leaders"] == ["c-0"]
    assert "z-0" not in stats["partitions"], "a role the shard refused was restored"


def test_a_held_answer_after_a_stop_replica_leaves_no_trace(
        node: Node, tmp_path: Path) -> None:
    """c-0 stopped (StopReplica) with its ISR proposal still out: neither the controller's
    late answer (held) nor a proposal the shard sent meanwhile is kept for a partition
    that has no role any more."""
    c = _cluster(node, tmp_path, [1])
    alter = _expansion_proposed(c)
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, False)]),
              sender=c.controller.name)
    wait_for(lambda: _got(node, c.controller, "StopReplicaResponse"), "StopReplica answer")
    _answer(c, alter, int(ErrorCode.FENCED_LEADER_EPOCH), [], -1)
    node.tell(c.manager, ProposeIsr([IsrProposalRow("c", 0, 3, [1], 4)]),
              sender=c.shard.name)
    wait_for(lambda: len(_got(node, c.controller, "AlterPartition")) == 2, "the proposal")
    stats = node.ask(c.manager, GetStats())
    assert stats["proposals"] == []


def test_a_restore_row_that_fails_does_not_crash_the_shard(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One row whose restore fails (here f-0's: made to) is logged and answered as failed;
    the other rows are applied and the shard does not crash (a crash would restore the
    same rows again, and again)."""
    real = PartitionState.restore_leader

    def restore_leader(self: PartitionState, *args: Any, **kwargs: Any) -> None:
        if self.log.topic == "f":
            raise RuntimeError("a restore that fails")
        real(self, *args, **kwargs)

    monkeypatch.setattr(PartitionState, "restore_leader", restore_leader)
    c = _cluster(node, tmp_path, [1, 2])
    bad = RestoredRoleRow(ReplicaStateRow("f", 0, 1, 8, [1, 2], [2, 1], 10, False, {}),
                          PendingIsrRow(8, [1], 10, False))
    good = RestoredRoleRow(ReplicaStateRow("c", 0, 2, 5, [2, 1], [1, 2], 6, False, {}), None)
    node.tell(c.shard, RestoreRoles(0, "test", [bad, good]), sender=c.handler.name)
    [answer] = wait_for(lambda: _got(node, c.handler, "RolesRestored"), "the restore's answer")
    assert [tuple(r) for r in answer[1]] == [
        ("f", 0, int(ErrorCode.KAFKA_STORAGE_ERROR)), ("c", 0, NONE)]
    assert node.actors[c.shard.name].crashes == 0
    assert _stats(node, c.shard)["leaders"] == []  # c-0 follows broker 2 at epoch 5


def test_a_restored_role_is_not_ignored_for_a_leader_alone_epoch(
        node: Node, tmp_path: Path) -> None:
    """A shard spawned with topics leads them alone at the log's epoch: that epoch is no
    word of the controller, so a restored role at the same epoch is applied."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=_snapshot(log_dir), topics={"c": TopicEntry(1, {})},
                       broker_id=1, clock=node.clock)
    node.spawn(PurgatoryShard, topo.purgatory(0).name, topology=topo, clock=node.clock)
    handler = node.spawn(Recorder, "handler-0")
    assert _stats(node, shard)["leaders"] == ["c-0"]  # alone, at leader epoch 0
    role = ReplicaStateRow("c", 0, 2, 0, [2, 1], [1, 2], 0, False, {})
    node.tell(shard, RestoreRoles(1, "test", [RestoredRoleRow(role, None)]),
              sender=handler.name)
    [answer] = wait_for(lambda: _got(node, handler, "RolesRestored"), "the restore's answer")
    assert [tuple(r) for r in answer[1]] == [("c", 0, NONE)]
    assert _stats(node, shard)["leaders"] == [], "the restored role (follow 2) was ignored"


def test_a_restore_gives_the_topic_configs_changed_since_the_leader_and_isr(
        node: Node, tmp_path: Path) -> None:
    """min.insync.replicas of c was raised to 2 after the LeaderAndIsr (the controller's
    UpdateMetadata carries it): a shard that lost its memory and its kept configs (its
    process restarted: here a new shard in its place) gets the new value with the role,
    so an acks=-1 write with ISR [1] alone is refused, not acknowledged by one copy."""
    c = _cluster(node, tmp_path, [1])
    node.tell(c.manager, UpdateMetadata(1, 1, 5, False, [], [
        UpdateMetadataPartition("c", 0, 1, 1, 3, [1], 4, [1, 2], [])],
        {"c": {"min.insync.replicas": "2"}}), sender=c.controller.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["um"] == 1, "UpdateMetadata")
    assert node.stop_actor(c.shard.name)
    log_dir = LogDir.read_only(tmp_path, False)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics={}, broker_id=1, clock=node.clock)
    node.tell(c.manager, ShardRestarted(0), sender=shard.name)
    _restored(c)
    assert _stats(node, shard)["leaders"] == ["c-0"]
    node.tell(shard, Append(1, -1, 30_000, [AppendRow("c", 0, build_batch([b"x"]))]),
              sender=c.handler.name)
    [done] = wait_for(lambda: _got(node, c.handler, "AppendDone"), "the append's answer")
    assert done[1][0][2] == int(ErrorCode.NOT_ENOUGH_REPLICAS), \
        "the restore opened c-0 with the LeaderAndIsr's min.insync.replicas (1)"


def test_a_leader_whose_change_was_refused_as_not_leader_leads_on_and_sends_it_again(
        node: Node, tmp_path: Path) -> None:
    """Kafka's handleAlterPartitionError retries what it does not name, NOT_LEADER_OR_FOLLOWER
    among them: c-0 goes on leading, the expansion to [1, 2] pending (acks=all waits for
    broker 2, which the controller may yet have in the ISR), and sends it again."""
    c = _cluster(node, tmp_path, [1])
    alter = _expansion_proposed(c)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO",
                      filter=lambda r: "c-0: " in r["message"])
    try:
        _answer(c, alter, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), [], -1)
        again = wait_for(lambda: _got(node, c.controller, "AlterPartition")[1:],
                         "the proposal sent again")
    finally:
        logger.remove(sink)
    assert [tuple(i) for i in again[0][3]] == [("c", 0, 3, [1, 2], 4)]
    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    # the resend is one line (the answer's), not that and a "proposing ISR" line
    assert len(lines) == 1 and "not confirmed" in lines[0], lines
    _acks_all_waits_for_broker_2(c)
    _answer(c, again[0], NONE, [1, 2], 5)
    wait_for(lambda: _stats(node, c.shard)["isr"] == {"c-0": [1, 2]}, "ISR [1, 2]")
    assert node.ask(c.manager, GetStats())["proposals"] == []


def test_a_not_leader_answer_after_the_restore_sends_the_restored_proposal_again(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer comes after the restore was sent: the expansion came back pending with
    the role, so NOT_LEADER_OR_FOLLOWER finds it (not ignored as stale) and it is sent
    again, c-0 leading on, the high watermark over [1, 2] meanwhile."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1])
    alter = _expansion_proposed(c)

    _crash(node, c.shard, armed)
    _restored(c)
    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    assert len(_got(node, c.controller, "AlterPartition")) == 1  # its answer is on its way

    _answer(c, alter, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), [], -1)
    again = wait_for(lambda: _got(node, c.controller, "AlterPartition")[1:],
                     "the restored proposal sent again")
    assert [tuple(i) for i in again[0][3]] == [("c", 0, 3, [1, 2], 4)]
    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    _acks_all_waits_for_broker_2(c)
    _answer(c, again[0], NONE, [1, 2], 5)
    wait_for(lambda: _stats(node, c.shard)["isr"] == {"c-0": [1, 2]}, "ISR [1, 2]")
    assert node.ask(c.manager, GetStats())["proposals"] == []


@pytest.mark.parametrize("code", [ErrorCode.FENCED_LEADER_EPOCH,
                                  ErrorCode.INVALID_UPDATE_VERSION,
                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
def test_a_leader_whose_change_was_refused_for_good_leads_on_over_a_crash(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: ErrorCode) -> None:
    """Kafka's handleAlterPartitionError: a stale leader or partition epoch, or a partition
    the controller does not know, leaves the leader leading, the change pending and unsent
    until a LeaderAndIsr at a higher leader epoch. So it is after the crash: c-0 leads,
    [1, 2] pending (the high watermark waits for broker 2), nothing sent again."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1])
    alter = _expansion_proposed(c)
    _answer(c, alter, int(code), [], -1)
    wait_for(lambda: node.ask(c.manager, GetStats())["isr_pending"] == 0, "the answer")
    assert _stats(node, c.shard)["leaders"] == ["c-0"]

    _crash(node, c.shard, armed)
    _restored(c)

    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    done = _append(node, c.shard, c.handler, 3, "c", [b"x"])
    assert done[1][0][2] == NONE
    assert _stats(node, c.shard)["partitions"]["c-0"][1] == 1  # over the pending [1, 2]
    assert len(_got(node, c.controller, "AlterPartition")) == 1  # held: not sent again


def test_an_isr_written_before_the_crash_is_restored_as_written(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hazard 3: the controller wrote ISR [1, 2] (partition epoch 5) and its answer reached
    the ReplicaManager: the restore carries it, so the high watermark waits for broker 2."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1])
    alter = _expansion_proposed(c)
    _answer(c, alter, NONE, [1, 2], 5)
    wait_for(lambda: _stats(node, c.shard)["isr"] == {"c-0": [1, 2]}, "ISR [1, 2]")

    _crash(node, c.shard, armed)
    _restored(c)

    assert _stats(node, c.shard)["isr"] == {"c-0": [1, 2]}
    _acks_all_waits_for_broker_2(c)


def test_an_isr_written_with_its_answer_after_the_restore_holds_the_high_watermark(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hazard 3, late: the controller wrote ISR [1, 2] but its answer comes after the
    restore. Restored with the ISR [1] alone, the leader would acknowledge acks=-1 writes
    broker 2 lacks, which the controller may elect from [1, 2]; the proposal comes back
    pending, so the high watermark goes over [1, 2] until the answer says so."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1])
    alter = _expansion_proposed(c)
    # an acks=-1 write broker 2 lacks waits in the purgatory (high watermark 1, over the
    # pending [1, 2])
    node.tell(c.shard, Append(10, -1, 30_000, [AppendRow("c", 0, build_batch([b"c2"]))]),
              sender=c.handler.name)
    wait_for(lambda: _stats(node, c.shard)["partitions"]["c-0"] == [0, 1, 2], "the append")
    wait_for(lambda: _stats(node, c.shard)["watched"] == 1, "the purgatory's watch")

    _crash(node, c.shard, armed)
    _restored(c)

    assert _stats(node, c.shard)["isr"] == {"c-0": [1]}  # the committed one, [1, 2] pending
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 1, 2], \
        "the restore counted the high watermark over ISR [1] alone"
    wait_for(lambda: _stats(node, c.shard)["watched"] == 1, "the purgatory's watch again")
    assert not _got(node, c.handler, "ProduceReady")
    # broker 2 fetches it: the high watermark moves, the waiting write is acknowledged
    _follower_fetch(c, 11, 2)
    [done] = wait_for(lambda: _got(node, c.handler, "ProduceReady"),
                      "the acks=-1 write acknowledged")
    assert done[1][0][2:4] == [NONE, 1]
    # the late answer finds the proposal pending: ISR [1, 2], partition epoch 5
    _answer(c, alter, NONE, [1, 2], 5)
    wait_for(lambda: _stats(node, c.shard)["isr"] == {"c-0": [1, 2]}, "ISR [1, 2]")
    _acks_all_waits_for_broker_2(c, 2)


def test_an_isr_proposal_of_unknown_fate_is_sent_again_after_the_restore(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer left the expansion's fate unknown (NOT_CONTROLLER: it may have been
    written) and the shard crashed before sending it again: it comes back pending (the
    high watermark over [1, 2]) and is sent again, so its fate gets known."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1])
    alter = _expansion_proposed(c)
    node.tell(c.manager, AlterPartitionResponse(alter[0], int(ErrorCode.NOT_CONTROLLER), []),
              sender=c.controller.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["isr_pending"] == 0, "the answer")

    _crash(node, c.shard, armed)
    _restored(c)

    again = wait_for(lambda: _got(node, c.controller, "AlterPartition")[1:],
                     "the proposal sent again")
    assert [tuple(i) for i in again[0][3]] == [("c", 0, 3, [1, 2], 4)]
    _answer(c, again[0], NONE, [1, 2], 5)
    wait_for(lambda: _stats(node, c.shard)["isr"] == {"c-0": [1, 2]}, "ISR [1, 2]")
    assert node.ask(c.manager, GetStats())["proposals"] == []


def test_a_role_at_the_leader_epoch_held_is_not_applied_again(
        node: Node, tmp_path: Path) -> None:
    """The shard applied c-0's role (lead at leader epoch 3) and f-0's; broker 2 fetched
    and the leader proposed ISR [1, 2]. The same roles come again (a duplicate, or the
    ReplicaManager's overdue resend queued behind the original): answered as applied, not
    applied again, so the pending proposal and broker 2's fetch state survive (applied
    again, become_leader forgot both: the high watermark went back to ISR [1] alone)."""
    c = _cluster(node, tmp_path, [1])
    _expansion_proposed(c)
    c0 = node.actors[c.shard.name].partitions[("c", 0)]
    pending, follower = c0.pending, c0.followers[2]
    assert pending is not None and follower.log_end_offset == 1
    node.tell(c.shard, BecomeLeaderOrFollower(99, [
        ReplicaStateRow("c", 0, 1, 3, [1], [1, 2], 4, False, {}),
        ReplicaStateRow("f", 0, 2, 7, [2, 1], [2, 1], 9, False, {})]), sender=c.handler.name)
    [answer] = wait_for(lambda: [a for a in _got(node, c.handler, "BecameLeaderOrFollower")
                                 if a[0] == 99], "the duplicate's answer")
    assert [tuple(r) for r in answer[1]] == [("c", 0, NONE), ("f", 0, NONE)]
    c0 = node.actors[c.shard.name].partitions[("c", 0)]
    assert c0.pending == pending, "the pending ISR proposal was forgotten"
    assert c0.followers[2] == follower, "broker 2's fetch state was forgotten"
    f0 = node.actors[c.shard.name].partitions[("f", 0)]
    assert (f0.leader_id, f0.leader_epoch) == (2, 7)
    # a newer leader epoch is applied: it proposes anew
    node.tell(c.shard, BecomeLeaderOrFollower(100, [
        ReplicaStateRow("c", 0, 1, 4, [1], [1, 2], 5, False, {})]), sender=c.handler.name)
    wait_for(lambda: [a for a in _got(node, c.handler, "BecameLeaderOrFollower")
                      if a[0] == 100], "the newer role's answer")
    c0 = node.actors[c.shard.name].partitions[("c", 0)]
    assert c0.leader_epoch == 4 and c0.pending is None


def _acks_all_waits_for_broker_2(c: Cluster, end: int = 1) -> None:
    """c-0 (high watermark and log end ``end``) takes an acks=-1 write: the high watermark
    does not move before broker 2 fetched it."""
    node, shard = c.node, c.shard
    assert _stats(node, shard)["partitions"]["c-0"] == [0, end, end]
    node.tell(shard, Append(20, -1, 30_000, [AppendRow("c", 0, build_batch([b"c3"]))]),
              sender=c.handler.name)
    wait_for(lambda: _stats(node, shard)["partitions"]["c-0"][2] == end + 1, "the append")
    assert _stats(node, shard)["partitions"]["c-0"] == [0, end, end + 1], \
        "acks=-1 write counted before broker 2, in the ISR the controller wrote, had it"
    _follower_fetch(c, 21, end + 1)
    wait_for(lambda: _stats(node, shard)["partitions"]["c-0"] == [0, end + 1, end + 1],
             "the high watermark after broker 2's fetch")


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


def _block_flush(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """PartitionShard's Flush handler, when armed, waits for ``hold`` (what is sent to the
    shard meanwhile waits in its mailbox) and then, if ``crash``, raises once."""
    armed: dict[str, Any] = {"hold": None, "crash": False}
    real = PartitionShard.on_flush

    def on_flush(self: PartitionShard, msg: Flush) -> int:
        hold = armed["hold"]
        if hold is not None:
            armed["hold"] = None
            assert hold.wait(10), "the test never let the shard go"
        if armed["crash"]:
            armed["crash"] = False
            raise RuntimeError("a Flush handler that fails once")
        return real(self, msg)

    on_flush.__actorlog_handles__ = (Flush,)  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionShard, "on_flush", on_flush)
    return armed


def _c_fetcher_of_2(node: Node) -> Any:
    """The fetcher of c-0 led by broker 2 (a recorder; f-0's if they hash alike)."""
    name = fetcher_name(2, stable_hash("c-0") % int(Config()["num.replica.fetchers"]))
    return node.actors[name] if name in node.actors else node.spawn(Recorder, name)


def test_settling_an_older_leader_and_isr_does_not_undo_a_newer_role(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LeaderAndIsr (c-0 led here at leader epoch 5) waits in the crashing shard's
    mailbox; the metadata then moves c-0 to broker 2 at leader epoch 6. When the shard
    answers the leader epoch 5 request, the ReplicaManager must not take c-0 as led here
    (nor take it from broker 2's fetcher): the newer role stands."""
    armed = _block_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    fetcher = _c_fetcher_of_2(node)
    hold = threading.Event()
    armed["hold"], armed["crash"] = hold, True
    node.tell(c.shard, Flush())
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 5, [1, 2], 6, [1, 2], False))
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["lai"] == 2, "LAI accepted")
    node.tell(c.manager, UpdateMetadata(1, 1, 5, False, [], [
        UpdateMetadataPartition("c", 0, 1, 2, 6, [2, 1], 7, [1, 2], [])], {"c": {}}),
        sender=c.controller.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["um"] == 1, "UpdateMetadata")
    hold.set()
    _restored(c)
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 0, "LAI 5 settled")
    manager = node.ask(c.manager, GetStats())
    assert "c-0" not in manager["leading"], "the leader epoch 5 answer undid epoch 6"
    assert manager["fetched_by"].get("c-0") == fetcher.name
    assert _stats(node, c.shard)["leaders"] == []


class _Channel(NamedTuple):
    """The controller's end, as the Controller actor runs it: the real channel core; the
    test sends what it gives to the ReplicaManager and feeds it the answers, when and in
    the order it chooses (an answer may be slow on its way)."""

    c: Cluster
    core: ControllerChannel

    def send(self, sent: list[tuple[int, Any]]) -> None:
        for broker_id, request in sent:
            assert broker_id == 1
            self.c.node.tell(self.c.manager, request, sender=self.c.controller.name)

    def answers(self, count: int) -> list[LeaderAndIsrResponse]:
        """The LeaderAndIsr answers after the one to ``_cluster``'s, once ``count`` came."""
        got = wait_for(lambda: (lambda a: a if len(a) >= count + 1 else None)(
            _got(self.c.node, self.c.controller, "LeaderAndIsrResponse")),
            f"{count} LeaderAndIsr answer(s)")
        return [LeaderAndIsrResponse(*fields) for fields in got[1:]]

    def feed(self, answer: LeaderAndIsrResponse, now_ms: int) -> Any:
        answered, nxt = self.core.acknowledge(answer.broker_id, LeaderAndIsr,
                                              answer.correlation_id, now_ms)
        self.send(nxt)
        return answered


ID = 1 << 32  # the channel's ids of controller epoch 1 (the requests'): ID + 1, ID + 2, ...


def _lai_request(leader_epoch: int) -> LeaderAndIsr:
    """c-0 led here at ``leader_epoch``, as the controller's driver makes it (no id yet)."""
    return LeaderAndIsr(1, 1, 5, [LeaderAndIsrPartition(
        "c", 0, 1, 1, leader_epoch, [1, 2], leader_epoch + 1, [1, 2], False)],
        [LiveLeaderRow(1, ""), LiveLeaderRow(2, "")], {"c": {}})


def test_a_late_answer_to_a_resend_does_not_acknowledge_the_next_leader_and_isr(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LeaderAndIsr 1 is applied and answered, but its answer is slow: the channel sends it
    again, and the node answers the duplicate at once (refused: same leader epoch). The
    first answer acknowledges request 1 and LeaderAndIsr 2 goes out; the shard has not
    applied it when the duplicate's answer comes. That answer names request 1: it must
    not acknowledge request 2 (before the ids it did, and the controller took a role as
    applied that no shard held)."""
    armed = _block_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    channel = _Channel(c, ControllerChannel(100))
    channel.send(channel.core.enqueue(1, _lai_request(5), 0))
    assert channel.core.enqueue(1, _lai_request(6), 0) == []  # waits behind request 1
    [first] = channel.answers(1)
    assert first.correlation_id == ID + 1 and first.error_code == NONE
    assert _stats(node, c.shard)["epochs"]["c-0"][-1][0] == 5
    channel.send(channel.core.due(100))  # the answer is not in yet: sent again
    [_, duplicate] = channel.answers(2)
    assert duplicate.correlation_id == ID + 1
    assert [tuple(r) for r in duplicate.partitions] == [
        ("c", 0, int(ErrorCode.STALE_CONTROLLER_EPOCH))]

    hold = threading.Event()  # request 2 waits in the shard's mailbox
    armed["hold"] = hold
    node.tell(c.shard, Flush())
    assert channel.feed(first, 101) is not None
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["lai"] == 4, "request 2 in")
    assert channel.feed(duplicate, 102) is None, \
        "the duplicate's answer acknowledged LeaderAndIsr 2 before the shard applied it"
    assert channel.core.ignored == 1
    assert channel.core.in_flight(1).correlation_id == ID + 2
    assert node.ask(c.manager, GetStats())["pending"] == 1, "request 2 is applied already"
    hold.set()
    [_, _, second] = channel.answers(3)
    assert second.correlation_id == ID + 2
    assert channel.feed(second, 103) is not None
    assert channel.core.pending() == 0
    assert _stats(node, c.shard)["epochs"]["c-0"][-1][0] == 6


def test_a_resend_of_a_leader_and_isr_still_being_applied_is_not_answered(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The channel sends LeaderAndIsr 1 again while the shard holds the first. The resend
    is not answered (before, it was at once, refused as the same leader epoch, and that
    answer acknowledged request 1 before the shard applied it): only the original's answer,
    once the shard applied it, names request 1 and acknowledges it; then request 2 goes
    out and is acknowledged by its own answer."""
    armed = _block_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    channel = _Channel(c, ControllerChannel(100))
    hold = threading.Event()
    armed["hold"] = hold
    node.tell(c.shard, Flush())
    channel.send(channel.core.enqueue(1, _lai_request(5), 0))
    channel.core.enqueue(1, _lai_request(6), 0)
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 1, "request 1 applying")
    channel.send(channel.core.due(100))
    channel.send(channel.core.due(200))
    wait_for(lambda: (lambda m: m["applied"]["lai"] + m["resends_in_progress"] == 4)(
        node.ask(c.manager, GetStats())), "both resends taken")
    manager = node.ask(c.manager, GetStats())
    assert manager["applied"]["lai"] == 2 and manager["resends_in_progress"] == 2
    assert _got(node, c.controller, "LeaderAndIsrResponse")[1:] == [], \
        "a resend of a request still being applied was answered"
    hold.set()
    [first] = channel.answers(1)
    assert first.correlation_id == ID + 1
    assert [tuple(r) for r in first.partitions] == [("c", 0, NONE)]
    assert _stats(node, c.shard)["epochs"]["c-0"][-1][0] == 5, "answered before applied"
    assert channel.feed(first, 201) is not None  # request 2 goes out
    [_, second] = channel.answers(2)
    assert second.correlation_id == ID + 2
    assert channel.feed(second, 202) is not None
    assert channel.core.pending() == 0 and channel.core.ignored == 0
    assert _stats(node, c.shard)["epochs"]["c-0"][-1][0] == 6
    assert len(_got(node, c.controller, "LeaderAndIsrResponse")) == 3, "one answer each"


def test_a_resend_of_a_delete_still_being_applied_drops_nothing_again(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """StopReplica(delete) 7 is sent again while the shard holds its DropPartitions: the
    resend is neither answered nor sent to the shard again; the original's answer, once
    the log is deleted, is the only one."""
    armed = _block_flush(monkeypatch)
    drops: list[int] = []
    real = PartitionShard.on_drop

    def on_drop(self: PartitionShard, msg: DropPartitions) -> Any:
        drops.append(msg.req_id)
        return real(self, msg)

    on_drop.__actorlog_handles__ = (DropPartitions,)  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionShard, "on_drop", on_drop)
    c = _cluster(node, tmp_path, [1, 2])
    hold = threading.Event()
    armed["hold"] = hold
    node.tell(c.shard, Flush())
    delete = StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True)], 7)
    for _ in range(3):
        node.tell(c.manager, delete, sender=c.controller.name)
    wait_for(lambda: (lambda m: m["applied"]["stop"] + m["resends_in_progress"] == 3)(
        node.ask(c.manager, GetStats())), "both resends taken")
    manager = node.ask(c.manager, GetStats())
    assert _got(node, c.controller, "StopReplicaResponse") == [], "a resend was answered"
    assert manager["applied"]["stop"] == 1 and manager["resends_in_progress"] == 2
    assert _got(node, c.controller, "StopReplicaResponse") == []
    hold.set()
    [response] = wait_for(lambda: _got(node, c.controller, "StopReplicaResponse"),
                          "the delete's answer")
    assert tuple(response[:2]) == (1, NONE) and response[3] == 7
    assert [tuple(r) for r in response[2]] == [("c", 0, NONE)]
    assert not (tmp_path / "c-0").exists()
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 0, "settled")
    assert list(_stats(node, c.shard)["partitions"]) == ["f-0"]  # after any drop sent
    assert len(drops) == 1, "the resends were sent to the shard again"
    assert len(_got(node, c.controller, "StopReplicaResponse")) == 1


def test_a_late_shard_answer_to_a_crashed_replica_managers_request_settles_nothing(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ReplicaManager sent the shard BecomeLeaderOrFollower for LeaderAndIsr 10 (the
    shard holds it), then crashed and restarted in place. LeaderAndIsr 11 and 12 come to
    its new life. The shard's answer to the old request, late, must not settle the new
    request that got the same shard request id (before, the ids began at 1 again: it
    settled 12 before the shard applied it, and 12 was answered before 11)."""
    armed = _block_flush(monkeypatch)
    crash = crash_once(monkeypatch, ReplicaManager, "on_update_metadata", UpdateMetadata)
    sent: list[int] = []  # the shard request id of each request fanned out to the shards
    real_fan_out = ReplicaManager._fan_out

    def fan_out(self: ReplicaManager, entry: Any, by_shard: dict[Any, list[Any]],
                msg_type: Any) -> None:
        real_fan_out(self, entry, by_shard, msg_type)
        if by_shard:
            sent.append(max(self.pending))

    monkeypatch.setattr(ReplicaManager, "_fan_out", fan_out)
    c = _cluster(node, tmp_path, [1, 2])
    hold = threading.Event()
    armed["hold"] = hold
    node.tell(c.shard, Flush())

    def lai(correlation_id: int, row: LeaderAndIsrPartition) -> None:
        node.tell(c.manager, LeaderAndIsr(1, 1, 5, [row], [
            LiveLeaderRow(1, ""), LiveLeaderRow(2, "")], {row.topic: {}}, correlation_id),
            sender=c.controller.name)

    lai(10, LeaderAndIsrPartition("c", 0, 1, 1, 5, [1, 2], 6, [1, 2], False))
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 1, "LeaderAndIsr 10 sent")
    # the collision this test is about: 10 went out as shard request 2 (the _cluster's
    # LeaderAndIsr was 1), the id a new life counting from 1 again gives its second, 12
    assert sent == [1, 2]
    crash["crash"] = True
    node.tell(c.manager, UpdateMetadata(1, 1, 5, False, [], [], {}, 20),
              sender=c.controller.name)
    wait_for(lambda: node.actors[c.manager.name].crashes == 1, "the ReplicaManager's crash")
    # nobody tells the new life the registration: it kept it
    lai(11, LeaderAndIsrPartition("f", 0, 1, 2, 8, [2, 1], 10, [2, 1], False))
    lai(12, LeaderAndIsrPartition("c", 0, 1, 1, 6, [1, 2], 7, [1, 2], False))
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 2, "11 and 12 sent")
    hold.set()
    wait_for(lambda: len(_got(node, c.controller, "LeaderAndIsrResponse")) == 3,
             "the answers of 11 and 12")
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 0, "all settled")
    answered = [r[3] for r in _got(node, c.controller, "LeaderAndIsrResponse")[1:]]
    assert answered == [11, 12], "a late answer of the previous life settled a new request"
    assert sent == [1, 2, 3, 4], "the new life's shard request ids began again"
    assert _stats(node, c.shard)["epochs"]["c-0"][-1][0] == 6


def _crash_replica_manager_on_update_metadata(monkeypatch: pytest.MonkeyPatch
                                              ) -> dict[str, bool]:
    """The ReplicaManager's UpdateMetadata handler raises once when armed (patched before
    it is spawned)."""
    crash = crash_once(monkeypatch, ReplicaManager, "on_update_metadata", UpdateMetadata)
    return crash


def test_the_roles_go_on_over_a_crash_restart_of_the_replica_manager(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ReplicaManager crashes and restarts in place while the shard leads c-0 (an ISR
    expansion pending) and follows f-0. The controller's resend of their LeaderAndIsr (the
    new life cannot tell it settled) is answered, but the shard does not apply it again:
    the proposal stays pending. The shard then crashes: the new life restores both roles
    and the proposal (before, it had forgotten them: the shard's partitions went dark)."""
    crash = _crash_replica_manager_on_update_metadata(monkeypatch)
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1])
    _expansion_proposed(c)
    wait_for(lambda: node.ask(c.manager, GetStats())["proposals"] == ["c-0"], "the proposal")
    crash["crash"] = True
    node.tell(c.manager, UpdateMetadata(1, 1, 5, False, [], [], {}, 20),
              sender=c.controller.name)
    wait_for(lambda: node.actors[c.manager.name].crashes == 1, "the ReplicaManager's crash")
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 3, [1], 4, [1, 2], False),
         LeaderAndIsrPartition("f", 0, 1, 2, 7, [2, 1], 9, [2, 1], False))
    answers = wait_for(lambda: (lambda a: a if len(a) == 2 else None)(
        _got(node, c.controller, "LeaderAndIsrResponse")), "the resend's answer")
    assert {tuple(r) for r in answers[1][2]} == {("c", 0, NONE), ("f", 0, NONE)}
    c0 = node.actors[c.shard.name].partitions[("c", 0)]
    assert c0.pending is not None, "the resend's role applied again: the proposal forgotten"
    assert node.ask(c.manager, GetStats())["proposals"] == ["c-0"]
    # an older leader epoch is still refused, and the held one once accepted again
    _lai(c, 1, LeaderAndIsrPartition("f", 0, 1, 2, 6, [2, 1], 8, [2, 1], False),
         LeaderAndIsrPartition("c", 0, 1, 1, 3, [1], 4, [1, 2], False))
    answers = wait_for(lambda: (lambda a: a if len(a) == 3 else None)(
        _got(node, c.controller, "LeaderAndIsrResponse")), "the stale one's answer")
    stale = int(ErrorCode.STALE_CONTROLLER_EPOCH)
    assert {tuple(r) for r in answers[2][2]} == {("f", 0, stale), ("c", 0, stale)}

    _crash(node, c.shard, armed)
    _restored(c)
    stats = _stats(node, c.shard)
    assert stats["leaders"] == ["c-0"], "c-0's role not restored"
    f0 = node.actors[c.shard.name].partitions[("f", 0)]
    assert (f0.leader_id, f0.leader_epoch) == (2, 7), "f-0's role not restored"
    c0 = node.actors[c.shard.name].partitions[("c", 0)]
    assert c0.pending is not None and c0.pending.new_isr == (1, 2), \
        "the pending proposal not restored"


def _crash_replica_manager(c: Cluster, crash: dict[str, bool]) -> None:
    """The ReplicaManager crashes (on an UpdateMetadata) and supervision restarts it."""
    crash["crash"] = True
    c.node.tell(c.manager, UpdateMetadata(1, 1, 5, False, [], [], {}, 20),
                sender=c.controller.name)
    wait_for(lambda: c.node.actors[c.manager.name].crashes == 1, "the ReplicaManager's crash")


def _alters(c: Cluster, count: int) -> list[Any]:
    return wait_for(lambda: (lambda a: a if len(a) == count else None)(
        _got(c.node, c.controller, "AlterPartition")), f"{count} AlterPartition(s)")


def test_an_isr_shrink_whose_answer_died_with_the_replica_managers_crash_is_sent_again(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c-0's leader proposes to leave follower 2 (it never fetches) out of the ISR; the
    ReplicaManager crashes with the AlterPartition in flight, and its answer is lost. The
    new life answers the proposal REQUEST_TIMED_OUT at its deadline, as the old one
    would, and the shard sends it again. Before, the new life had forgotten it: the
    shard's proposal stayed pending for good, no ISR change came again, and acks=all
    produces waited on the dead follower."""
    node = manual_node
    crash = _crash_replica_manager_on_update_metadata(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    lag_ms = int(Config()["replica.lag.time.max.ms"])
    node.advance_clock(lag_ms + lag_ms // 2 + 1)  # past the lag, at an ISR check
    [alter] = _alters(c, 1)
    assert [tuple(i) for i in alter[3]] == [("c", 0, 3, [1], 4)]
    _crash_replica_manager(c, crash)
    assert node.ask(c.manager, GetStats())["proposals"] == ["c-0"]

    node.advance_clock(ALTER_PARTITION_TIMEOUT_MS)  # unanswered: REQUEST_TIMED_OUT
    node.advance_clock(PROPOSAL_RETRY_MS)  # the shard's resend
    again = _alters(c, 2)[1]
    assert [tuple(i) for i in again[3]] == [("c", 0, 3, [1], 4)]
    assert again[0] != alter[0]
    node.tell(c.manager, AlterPartitionResponse(again[0], NONE, [AlterPartitionResult(
        "c", 0, NONE, 1, 3, [1], 5)]), sender=c.controller.name)
    wait_for(lambda: _stats(node, c.shard)["isr"] == {"c-0": [1]}, "the ISR shrunk")
    assert node.ask(c.manager, GetStats())["proposals"] == []
    # acks=all is answered by the ISR of one; and the leader proposes again (follower 2
    # catches up: back in)
    assert _append(node, c.shard, c.handler, 1, "c", [b"c1"], acks=-1)[1][0][2] == NONE
    _follower_fetch(c, 2, 1)
    assert [tuple(i) for i in _alters(c, 3)[2][3]] == [("c", 0, 3, [1, 2], 5)]


def test_the_answer_to_an_isr_proposal_sent_by_the_replica_managers_previous_life_is_taken(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ReplicaManager crashes with c-0's ISR expansion in flight; the controller's
    answer reaches the new life, which tells the shard (before, it ignored the answer as
    not one of its own)."""
    crash = _crash_replica_manager_on_update_metadata(monkeypatch)
    c = _cluster(node, tmp_path, [1])
    alter = _expansion_proposed(c)
    _crash_replica_manager(c, crash)
    _answer(c, alter, NONE, [1, 2], 5)
    wait_for(lambda: _stats(node, c.shard)["isr"] == {"c-0": [1, 2]}, "the ISR written")
    stats = node.ask(c.manager, GetStats())
    assert (stats["proposals"], stats["isr_pending"]) == ([], 0)


def test_roles_at_the_leader_epochs_held_are_counted_and_logged_once_per_message(
        node: Node, tmp_path: Path) -> None:
    """A BecomeLeaderOrFollower whose roles are all at the leader epochs the shard holds (a
    resend): each answered applied, none applied again, all counted, and one log line for
    the message, not one per partition."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO")
    try:
        c = _cluster(node, tmp_path, [1])
        node.tell(c.shard, BecomeLeaderOrFollower(77, [
            ReplicaStateRow("c", 0, 1, 3, [1], [1, 2], 4, False, {}),
            ReplicaStateRow("f", 0, 2, 7, [2, 1], [2, 1], 9, False, {})]),
            sender=c.handler.name)
        [done] = wait_for(lambda: [b for b in _got(node, c.handler, "BecameLeaderOrFollower")
                                   if b[0] == 77], "the answer")
        assert {tuple(r) for r in done[1]} == {("c", 0, NONE), ("f", 0, NONE)}
        assert _stats(node, c.shard)["replication"]["roles_held_already"] == 2
        said = [line for line in lines if "held already not applied again" in line]
        assert len(said) == 1, said
        assert "2 role(s)" in said[0] and "c-0@3, f-0@7" in said[0], said
    finally:
        logger.remove(sink)


def test_a_restore_row_the_shard_could_not_take_leaves_no_role_nor_fetcher(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a crash, f-0's restored role (follow broker 2) fails on the shard: the
    ReplicaManager neither keeps it (a later restore would give it behind the
    controller's back) nor has broker 2's fetcher fetch it for a shard that has no role."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    fetcher = node.actors[c.fetcher.name]
    real = PartitionState.become_follower
    failing = {"on": True}

    def become_follower(self: PartitionState, *args: Any, **kwargs: Any) -> None:
        if failing["on"] and self.log.topic == "f":
            raise RuntimeError("a restore that fails")
        real(self, *args, **kwargs)

    monkeypatch.setattr(PartitionState, "become_follower", become_follower)
    _crash(node, c.shard, armed)
    _restored(c)
    wait_for(lambda: "f-0" not in node.ask(c.manager, GetStats())["fetched_by"],
             "f-0 taken from its fetcher")
    # broker 2's fetcher, left with nothing, was stopped: its last word was the restore's add
    wait_for(lambda: fetcher.actor_stopped.is_set(), "broker 2's idle fetcher stopped")
    assert [name for name, _msg in fetcher.got][-1] == "AddFetcherPartitions"
    failing["on"] = False
    armed["crash"] = True
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 2, "the second crash")
    _restored(c, 2)
    assert "f-0" not in node.ask(c.manager, GetStats())["fetched_by"], \
        "the failed role was restored again"


def test_a_previous_lifes_refusal_does_not_undo_the_role_the_restore_gave(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal of LeaderAndIsr (leader epoch 5) from the shard's address reaches the
    ReplicaManager after it sent the restore (here sent by the test as from the shard's
    previous life): the shard applies the restore's role (epoch 5) and says so, so the
    ReplicaManager keeps that role again, and a later crash restores it."""
    armed = _block_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    hold = threading.Event()
    armed["hold"] = hold
    node.tell(c.shard, Flush())
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 5, [1, 2], 6, [1, 2], False))
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["lai"] == 2, "LAI accepted")
    node.tell(c.manager, ShardRestarted(0), sender=c.shard.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["shards_restarted"] == 1, "restore sent")
    node.tell(c.manager, BecameLeaderOrFollower(2, [PartitionErrorRow(
        "c", 0, int(ErrorCode.KAFKA_STORAGE_ERROR))]), sender=c.shard.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 0, "the refusal taken")
    # a 56 that names no failed storage (a log that would not open) is not reported: the
    # controller could only write the partition at a new leader epoch, whose role fails
    # the same way, again and again
    stats = node.ask(c.manager, GetStats())
    assert (stats["storage_failed"], stats["log_dir_events_sent"]) == ([], 0)
    hold.set()
    wait_for(lambda: _stats(node, c.shard)["replication"].get("restores") == 1, "restored")
    wait_for(lambda: node.ask(c.manager, GetStats())["restoring"] == 0, "RolesRestored")
    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    armed["crash"] = True
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the crash")
    wait_for(lambda: node.ask(c.manager, GetStats())["shards_restarted"] == 2, "restore")
    wait_for(lambda: _stats(node, c.shard)["replication"].get("restores") == 1, "restored")
    assert _stats(node, c.shard)["leaders"] == ["c-0"], "the role the shard held was lost"
    assert _stats(node, c.shard)["epochs"]["c-0"][-1][0] == 5


def test_a_leader_and_isr_row_stopped_since_is_left_out_of_its_answer(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LeaderAndIsr (c-0 at leader epoch 5) dies with the shard, and c-0 is stopped
    (StopReplica) before the restore: the restore does not carry c-0, and the
    LeaderAndIsr's answer leaves c-0 out (it is not a storage failure: the partition is
    no longer this request's)."""
    blocked = _block_flush(monkeypatch)
    crash = _crash_on_become(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    hold = threading.Event()
    blocked["hold"] = hold
    node.tell(c.shard, Flush())
    crash["crash"] = True
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 5, [1, 2], 6, [1, 2], False))
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["lai"] == 2, "LAI accepted")
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 5, False)]),
              sender=c.controller.name)
    wait_for(lambda: _got(node, c.controller, "StopReplicaResponse"), "StopReplica answer")
    hold.set()
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the crash on the LeaderAndIsr")
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 0, "LAI 5 settled")
    responses = _got(node, c.controller, "LeaderAndIsrResponse")
    assert len(responses) == 2 and responses[1][1] == NONE
    assert responses[1][2] == [], f"c-0, stopped since, answered: {responses[1][2]}"
    assert "c-0" not in node.ask(c.manager, GetStats())["leading"]


def _coordinators(node: Node) -> tuple[Any, Any]:
    """Recorders standing in for this broker's group and transaction coordinators."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    return (node.spawn(Recorder, topo.coordinator(0).name),
            node.spawn(Recorder, txn_coordinator_name(0)))


def _last_word(node: Node, coordinator: Any, kind: str) -> tuple[list[Any], list[int]]:
    """The last (elected, resigned) ``coordinator`` was told."""
    said = _got(node, coordinator, kind)
    if not said:
        return [], []
    elected, resigned = said[-1][:2]  # (and the topic's partition count)
    return [tuple(r) for r in elected], list(resigned)


def test_a_restore_row_the_shard_could_not_take_resigns_its_coordinator(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a crash, the restored roles of __consumer_offsets-0 and __transaction_state-0
    (led here) fail on the shard: as for a refused LeaderAndIsr row, the ReplicaManager
    keeps no role for them (else the metadata's moves would act on a role the shard never
    took) and their coordinators resign (else they serve groups and transactions from
    partitions that lead nowhere on this node)."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    groups, txns = _coordinators(node)
    _lai(c, 1, LeaderAndIsrPartition(OFFSETS_TOPIC, 0, 1, 1, 2, [1], 2, [1, 2], True),
         LeaderAndIsrPartition(TRANSACTION_STATE_TOPIC, 0, 1, 1, 2, [1], 2, [1, 2], True))
    wait_for(lambda: len(_got(node, c.controller, "LeaderAndIsrResponse")) == 2, "answered")
    wait_for(lambda: _last_word(node, groups, "CoordinatorPartitions") == ([(0, 2)], []),
             "the group coordinator elected")
    wait_for(lambda: _last_word(node, txns, "TxnCoordinatorPartitions") == ([(0, 2)], []),
             "the transaction coordinator elected")
    real = PartitionState.restore_leader

    def restore_leader(self: PartitionState, *args: Any, **kwargs: Any) -> None:
        if self.log.topic.startswith("__"):
            raise RuntimeError("a restore that fails")
        real(self, *args, **kwargs)

    monkeypatch.setattr(PartitionState, "restore_leader", restore_leader)
    _crash(node, c.shard, armed)
    _restored(c)
    wait_for(lambda: node.ask(c.manager, GetStats())["restoring"] == 0, "RolesRestored")
    assert node.ask(c.manager, GetStats())["leading"] == ["c-0"], "a dark role was kept"
    wait_for(lambda: _last_word(node, groups, "CoordinatorPartitions") == ([], [0]),
             "the group coordinator resigned")
    wait_for(lambda: _last_word(node, txns, "TxnCoordinatorPartitions") == ([], [0]),
             "the transaction coordinator resigned")


def test_a_refused_role_resigns_its_coordinator_and_the_restore_elects_it_again(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal of __consumer_offsets-0's LeaderAndIsr (leader epoch 5) leaves it dark:
    no role, its group coordinator resigns. Here the refusal is from the shard's previous
    life (sent by the test after the restore went out), and the shard holds epoch 5 when
    it answers the restore: the role holds again, so the coordinator is elected again
    (else the partition leads here and nobody serves its groups)."""
    armed = _block_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    groups, _txns = _coordinators(node)
    _lai(c, 1, LeaderAndIsrPartition(OFFSETS_TOPIC, 0, 1, 1, 4, [1], 4, [1, 2], True))
    wait_for(lambda: _last_word(node, groups, "CoordinatorPartitions") == ([(0, 4)], []),
             "the group coordinator elected")
    hold = threading.Event()
    armed["hold"] = hold
    node.tell(c.shard, Flush())
    _lai(c, 1, LeaderAndIsrPartition(OFFSETS_TOPIC, 0, 1, 1, 5, [1], 5, [1, 2], False))
    wait_for(lambda: node.ask(c.manager, GetStats())["applied"]["lai"] == 3, "LAI accepted")
    node.tell(c.manager, ShardRestarted(0), sender=c.shard.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["shards_restarted"] == 1, "restore sent")
    node.tell(c.manager, BecameLeaderOrFollower(3, [PartitionErrorRow(
        OFFSETS_TOPIC, 0, int(ErrorCode.KAFKA_STORAGE_ERROR))]), sender=c.shard.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["pending"] == 0, "the refusal taken")
    wait_for(lambda: _last_word(node, groups, "CoordinatorPartitions") == ([], [0]),
             "the group coordinator resigned with the refusal")
    assert f"{OFFSETS_TOPIC}-0" not in node.ask(c.manager, GetStats())["leading"]
    hold.set()
    wait_for(lambda: _stats(node, c.shard)["replication"].get("restores") == 1, "restored")
    wait_for(lambda: node.ask(c.manager, GetStats())["restoring"] == 0, "RolesRestored")
    wait_for(lambda: _last_word(node, groups, "CoordinatorPartitions") == ([(0, 5)], []),
             "the group coordinator elected again")
    assert f"{OFFSETS_TOPIC}-0" in node.ask(c.manager, GetStats())["leading"]
    assert _stats(node, c.shard)["leaders"] == ["__consumer_offsets-0", "c-0"]


def test_a_failed_delete_fails_only_its_own_partition(node: Node, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """StopReplica deletes c-0 and f-0, both on the one shard; c-0's delete fails (its
    directory is immutable: it cannot be renamed aside): only c-0 is answered
    KAFKA_STORAGE_ERROR. f-0 was deleted: answered failed, the controller would hold its
    replica deletion-ineligible until this broker registers again."""
    c = _cluster(node, tmp_path, [1, 2])
    # chattr +i where it can be set, else the same failure injected at os.rename
    with immutable_flags(monkeypatch, tmp_path) as immutable:
        immutable(tmp_path / "c-0", True)
        node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True),
                                                   StopReplicaPartition("f", 0, 7, True)]),
                  sender=c.controller.name)
        [response] = wait_for(lambda: _got(node, c.controller, "StopReplicaResponse"),
                              "the StopReplica answer")
        assert response[1] == NONE
        assert {tuple(r) for r in response[2]} == {
            ("c", 0, int(ErrorCode.KAFKA_STORAGE_ERROR)), ("f", 0, NONE)}
        assert not (tmp_path / "f-0").exists(), "f-0 was not deleted"
        assert (tmp_path / "c-0").is_dir()
    # once it can be, the shard deletes c-0 by itself
    wait_for(lambda: not list(tmp_path.glob("c-0*")), "c-0 deleted", timeout=10)


# ------------------------------------------------------------------ failed storage
def _fsync_fails_and_loses_the_unsynced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        partition_dir: str) -> dict[str, int]:
    """Once armed, the next fsync of a log file of ``partition_dir`` fails (EIO), and the
    bytes written since that file's last good fsync are gone (a failed writeback drops
    its pages: what the reopen reads ends where the disk has it)."""
    real = os.fsync
    synced: dict[str, int] = {}
    state = {"armed": 0, "failed": 0}

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if state["armed"] and target.startswith(str(tmp_path / partition_dir)) \
                and target.endswith(".log"):
            state["armed"] = 0
            state["failed"] += 1
            os.truncate(target, synced.get(target, 0))
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)
        synced[target] = os.fstat(fd).st_size

    monkeypatch.setattr(os, "fsync", fsync)
    return state


def _log_dir_event(c: Cluster, count: int = 1) -> Any:
    events = wait_for(lambda: _got(c.node, c.controller, "LogDirEventNotification")[count - 1:],
                      "the controller told of the failed storage")
    return events[0]


def test_a_leader_whose_fsync_failed_and_lost_acknowledged_records_leads_no_more(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c-0's leader (broker 1, leader epoch 3, ISR [1, 2]) acknowledged two records (high
    watermark 2: broker 2 has them); its fsync fails, the lost pages take them from its
    log, and the shard restarts and reopens it empty. Restored as leader at leader epoch 3,
    its follower's fetch was told to truncate to 0: acknowledged records lost from the
    whole cluster. Now it refuses the role (KAFKA_STORAGE_ERROR), the controller is told
    (LogDirEventNotification), nobody is told to truncate, and the new leader's role (2,
    leader epoch 4, ISR [2]) makes it a follower that fetches from 2."""
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "c-0")
    c = _cluster(node, tmp_path, [1, 2])
    shard, handler = c.shard, c.handler
    assert _append(node, shard, handler, 1, "c", [b"c1"])[1][0][2] == NONE
    assert _append(node, shard, handler, 2, "c", [b"c2"])[1][0][2] == NONE
    _follower_fetch(c, 3, 2)
    wait_for(lambda: _stats(node, shard)["partitions"]["c-0"] == [0, 2, 2], "HW 2")

    failing["armed"] = 1
    node.tell(shard, Flush())
    wait_for(lambda: node.actors[shard.name].crashes == 1, "the shard's restart")
    assert failing["failed"] == 1
    _restored(c)

    stats = _stats(node, shard)
    assert stats["partitions"]["c-0"] == [0, 0, 0], "the reopen found the records"
    assert stats["leaders"] == [], "a log that lost acknowledged records leads again"
    assert stats["replication"]["storage_refused"] == 1
    event = _log_dir_event(c)
    assert (event[1], event[2], [tuple(r) for r in event[3]]) == (1, 5, [("c", 0, False, 3)])
    # broker 2, which has both records at leader epoch 3, is not told to truncate
    node.tell(shard, ReplicaRead(4, 2, 1 << 20, [ReplicaReadRow("c", 0, 2, 3, 3, 1 << 20, 0)]),
              sender=handler.name)
    [read] = wait_for(lambda: [r for r in _got(node, handler, "ReplicaReadDone") if r[0] == 4],
                      "broker 2's fetch")
    [row] = read[1]
    assert row[2] == int(ErrorCode.NOT_LEADER_OR_FOLLOWER) and row[6:8] == [-1, -1]
    assert node.ask(c.manager, GetStats())["storage_failed"] == ["c-0"]

    # a controller that is no longer one: told again (LOG_DIR_EVENT_RETRY_MS later)
    node.tell(c.manager, LogDirEventNotificationResponse(event[0], int(ErrorCode.NOT_CONTROLLER)),
              sender=c.controller.name)
    event = _log_dir_event(c, 2)
    assert [tuple(r) for r in event[3]] == [("c", 0, False, 3)]
    # the controller took it offline and elected broker 2 at leader epoch 4
    node.tell(c.manager, LogDirEventNotificationResponse(event[0], NONE), sender=c.controller.name)
    wait_for(lambda: node.ask(c.manager, GetStats())["storage_failed"] == [],
             "the failed replica taken offline")
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 2, 4, [2], 5, [1, 2], False))
    [response] = wait_for(lambda: _got(node, c.controller, "LeaderAndIsrResponse")[1:],
                          "the LeaderAndIsr answer")
    assert [tuple(r) for r in response[2]] == [("c", 0, NONE)]
    stats = _stats(node, shard)
    assert stats["leaders"] == []
    assert [m[8] for m in stats["metrics"] if m[0] == "c"] == [False]  # it has a leader
    added = wait_for(lambda: [a for a in _got(node, c.fetcher, "AddFetcherPartitions")
                              if a[0][0][:2] == ["c", 0]], "c-0 fetched from broker 2")
    assert added[-1][0] == [["c", 0, 2, 4]]  # from broker 2, at leader epoch 4


def test_a_refused_storage_report_is_logged_at_the_first_second_fourth_refusal(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While no controller takes the report (NOT_CONTROLLER: none elected for a while),
    the ReplicaManager tells it again every LOG_DIR_EVENT_RETRY_MS, and logs the refusal
    at the 1st, 2nd, 4th, 8th... time with the count, not every 3 s; once one is taken,
    the count starts again."""
    node = manual_node
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "c-0")
    c = _cluster(node, tmp_path, [1, 2])
    assert _append(node, c.shard, c.handler, 1, "c", [b"c1"])[1][0][2] == NONE
    failing["armed"] = 1
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the shard's restart")
    _restored(c)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING",
                      filter=lambda r: "did not take the failed replicas" in r["message"])
    try:
        for count in range(1, 10):
            event = _log_dir_event(c, count)
            node.tell(c.manager, LogDirEventNotificationResponse(
                event[0], int(ErrorCode.NOT_CONTROLLER)), sender=c.controller.name)
            node.quiesce()
            node.advance_clock(LOG_DIR_EVENT_RETRY_MS)
        assert [ln.split("refused ")[-1].strip() for ln in lines] == [
            f"{n} time(s) in a row" for n in (1, 2, 4, 8)], lines
        assert node.ask(c.manager, GetStats())["log_dir_events_refused"] == 9
        event = _log_dir_event(c, 10)
        node.tell(c.manager, LogDirEventNotificationResponse(event[0], NONE),
                  sender=c.controller.name)
        wait_for(lambda: node.ask(c.manager, GetStats())["log_dir_events_refused"] == 0,
                 "the count started again")
    finally:
        logger.remove(sink)


def test_a_follower_whose_fsync_failed_waits_out_of_the_isr(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """f-0's follower (broker 1, in the ISR [2, 1] of leader 2) had the leader's record
    (high watermark 1); its fsync fails and the record is lost. Counted in the ISR it could
    be elected without it, so it takes no role in the ISR: the controller is told, and a
    role out of the ISR (leader epoch 8) has it fetch again."""
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "f-0")
    c = _cluster(node, tmp_path, [1, 2])
    batch = build_batch([b"f1"], base_offset=0, partition_leader_epoch=7)
    node.tell(c.shard, FollowerApply(1, [FollowerApplyRow("f", 0, 7, batch, 1, 0, 1, -1, -1,
                                                          -1)]), sender=c.handler.name)
    wait_for(lambda: _stats(node, c.shard)["partitions"]["f-0"] == [0, 1, 1], "f-0 at HW 1")

    failing["armed"] = 1
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the shard's restart")
    assert failing["failed"] == 1
    _restored(c)

    assert _stats(node, c.shard)["partitions"]["f-0"] == [0, 0, 0]
    event = _log_dir_event(c)
    assert [tuple(r) for r in event[3]] == [("f", 0, False, 7)]
    assert node.ask(c.manager, GetStats())["following"] == [], "f-0 followed in the ISR"
    node.tell(c.manager, LogDirEventNotificationResponse(event[0], NONE), sender=c.controller.name)
    _lai(c, 1, LeaderAndIsrPartition("f", 0, 1, 2, 8, [2], 10, [2, 1], False))
    [response] = wait_for(lambda: _got(node, c.controller, "LeaderAndIsrResponse")[1:],
                          "the LeaderAndIsr answer")
    assert [tuple(r) for r in response[2]] == [("f", 0, NONE)]
    # followed again (its idle fetcher stopped when the restore left it without a role)
    wait_for(lambda: node.ask(c.manager, GetStats())["following"] == ["f-0"], "f-0 followed")
    assert "f-0" in node.ask(c.manager, GetStats())["fetched_by"]


def test_a_single_nodes_leader_reopened_below_its_high_watermark_says_what_it_lost(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single node has nobody to fail over to: its log, reopened empty after the failed
    fsync lost the two records it acknowledged, leads on, and its log says they are lost."""
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "a-0")
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=_snapshot(log_dir), topics={"a": TopicEntry(1, {})},
                       broker_id=1, clock=node.clock)
    node.spawn(PurgatoryShard, topo.purgatory(0).name, topology=topo, clock=node.clock)
    node.spawn(Recorder, topo.timer.name)
    handler = node.spawn(Recorder, "handler-0")
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="ERROR")
    try:
        assert _append(node, shard, handler, 1, "a", [b"a1", b"a2"], acks=-1)[1][0][2] == NONE
        assert _stats(node, shard)["partitions"]["a-0"] == [0, 2, 2]
        failing["armed"] = 1
        node.tell(shard, Flush())
        wait_for(lambda: node.actors[shard.name].crashes == 1, "the shard's restart")
        stats = _stats(node, shard)
    finally:
        logger.remove(sink)
    assert failing["failed"] == 1
    assert stats["partitions"]["a-0"] == [0, 0, 0] and stats["leaders"] == ["a-0"]
    assert [line for line in lines if "a-0: its log reopened at log end 0, below the high "
            "watermark 2 it had: the acknowledged records from offset 0 are lost" in line]


def test_a_failed_leader_alone_in_its_isr_leads_again_only_at_a_new_leader_epoch(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c-0 led with an ISR of broker 1 alone: nobody has more than its reopened log, so it
    leads again, but not in the restored leader epoch 3 (its new records would share that
    epoch with the different ones a follower kept there): only at the one the controller
    gives after the failure."""
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "c-0")
    c = _cluster(node, tmp_path, [1])
    assert _append(node, c.shard, c.handler, 1, "c", [b"c1"])[1][0][2] == NONE
    failing["armed"] = 1
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the shard's restart")
    _restored(c)
    assert _stats(node, c.shard)["leaders"] == []
    event = _log_dir_event(c)
    # it led alone at the failure: the controller may have it lead on
    assert [tuple(r) for r in event[3]] == [("c", 0, True, 3)]
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 4, [1], 5, [1, 2], False))
    [response] = wait_for(lambda: _got(node, c.controller, "LeaderAndIsrResponse")[1:],
                          "the LeaderAndIsr answer")
    assert [tuple(r) for r in response[2]] == [("c", 0, NONE)]
    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    assert _append(node, c.shard, c.handler, 2, "c", [b"c1 again"])[1][0][2:4] == [NONE, 0]


def test_a_failed_follower_whose_role_says_it_is_out_of_the_isr_waits_for_the_controllers(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """f-0's follower role (leader epoch 8) says ISR [2], but leader 2 may have taken it back
    since (an AlterPartition the controller wrote without telling the followers): the
    restored role is refused as any other. The controller, which finds it out of the ISR
    already, writes nothing and sends its current role again, at the same leader epoch 8:
    the ReplicaManager lets it in once more (the shard refused the role at that epoch, it
    does not hold it) and the shard takes it (it is the controller's word, not a restore).
    Refused as stale, the replica waited for the partition's next leader epoch, which
    may never come."""
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "f-0")
    c = _cluster(node, tmp_path, [1, 2])
    _lai(c, 1, LeaderAndIsrPartition("f", 0, 1, 2, 8, [2], 10, [2, 1], False))
    wait_for(lambda: len(_got(node, c.controller, "LeaderAndIsrResponse")) == 2, "epoch 8")
    batch = build_batch([b"f1"], base_offset=0, partition_leader_epoch=8)
    node.tell(c.shard, FollowerApply(1, [FollowerApplyRow("f", 0, 8, batch, 1, 0, 1, -1, -1,
                                                          -1)]), sender=c.handler.name)
    wait_for(lambda: _stats(node, c.shard)["partitions"]["f-0"] == [0, 1, 1], "f-0 at HW 1")
    failing["armed"] = 1
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the shard's restart")
    _restored(c)
    event = _log_dir_event(c)
    assert [tuple(r) for r in event[3]] == [("f", 0, False, 8)]
    assert node.ask(c.manager, GetStats())["following"] == []
    node.tell(c.manager, LogDirEventNotificationResponse(event[0], NONE), sender=c.controller.name)
    # the controller's current role, sent again (nothing written: out of the ISR already)
    _lai(c, 1, LeaderAndIsrPartition("f", 0, 1, 2, 8, [2], 10, [2, 1], False))
    [response] = wait_for(lambda: _got(node, c.controller, "LeaderAndIsrResponse")[2:],
                          "the LeaderAndIsr answer")
    assert [tuple(r) for r in response[2]] == [("f", 0, NONE)]
    wait_for(lambda: node.ask(c.manager, GetStats())["following"] == ["f-0"], "f-0 followed")
    assert node.ask(c.manager, GetStats())["log_dir_events_sent"] == 1


def test_a_failed_follower_elected_alone_before_its_report_refuses_to_lead(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """f-0's follower (in the ISR [2, 1]) lost its record to a failed fsync; before the
    controller handles its report, leader 2 goes and the controller, not knowing, elects it
    with an ISR of itself at leader epoch 8. Taken, it would lead a log without the record
    broker 2 has (and broker 2, back, would follow it and truncate the record away): it
    refuses, and tells the controller it did not lead alone at the failure (which then
    keeps the partition offline rather than elect it)."""
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "f-0")
    c = _cluster(node, tmp_path, [1, 2])
    batch = build_batch([b"f1"], base_offset=0, partition_leader_epoch=7)
    node.tell(c.shard, FollowerApply(1, [FollowerApplyRow("f", 0, 7, batch, 1, 0, 1, -1, -1,
                                                          -1)]), sender=c.handler.name)
    wait_for(lambda: _stats(node, c.shard)["partitions"]["f-0"] == [0, 1, 1], "f-0 at HW 1")
    failing["armed"] = 1
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the shard's restart")
    _restored(c)
    event = _log_dir_event(c)
    assert [tuple(r) for r in event[3]] == [("f", 0, False, 7)]
    _lai(c, 1, LeaderAndIsrPartition("f", 0, 1, 1, 8, [1], 10, [2, 1], False))
    [response] = wait_for(lambda: _got(node, c.controller, "LeaderAndIsrResponse")[1:],
                          "the LeaderAndIsr answer")
    assert [tuple(r) for r in response[2]] == [("f", 0, int(ErrorCode.KAFKA_STORAGE_ERROR))]
    assert "f-0" not in _stats(node, c.shard)["leaders"]
    node.tell(c.manager, LogDirEventNotificationResponse(event[0], NONE), sender=c.controller.name)
    again = _log_dir_event(c, 2)
    assert [tuple(r) for r in again[3]] == [("f", 0, False, 8)]


def _new_process_shard(c: Cluster, tmp_path: Path, name: str) -> Any:
    """The shard of this broker's next process: a new PartitionShard over the same data
    directory (nothing of the old one's memory), the old one stopped."""
    assert c.node.stop_actor(c.shard.name)
    topo = Topology(c.node.name, 1, 1, 1, 1, 1)
    log_dir = _snapshot(LogDir.open(tmp_path))
    # the high watermark checkpoint lags (written every few seconds): as it was before
    # f-0's record, so that only the marker can tell the failure
    log_dir.high_watermarks[("f", 0)] = 0
    return c.node.spawn(PartitionShard, name, topology=topo, config=Config(),
                        log_dir=log_dir, topics={}, broker_id=1, clock=c.node.clock)


class _Became(NamedTuple):
    rows: list[tuple[Any, ...]]
    storage_failed: list[tuple[Any, ...]]


def _role(c: Cluster, shard: Any, req_id: int, leader: int, leader_epoch: int,
          isr: list[int]) -> _Became:
    """f-0's role given to ``shard`` straight (as its ReplicaManager would); its answer."""
    req_id += 1000
    c.node.tell(shard, BecomeLeaderOrFollower(req_id, [ReplicaStateRow(
        "f", 0, leader, leader_epoch, isr, [2, 1], 20 + leader_epoch, False, {})]),
        sender=c.handler.name)
    [got] = wait_for(lambda: [r for r in _got(c.node, c.handler, "BecameLeaderOrFollower")
                              if r[0] == req_id], "the shard's answer")
    return _Became([tuple(r) for r in got[1]], [tuple(r) for r in got[2]])


def test_a_failed_replicas_mark_outlives_a_restart_of_its_process(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """f-0's follower lost its record to a failed fsync; it took a role out of the ISR (its
    mark gone from the shard's memory) but never caught up. Its process restarts: its
    log's end (0) is not below the checkpointed high watermark (0: the checkpoint lagged), so
    only the marker file in f-0's directory says it failed. The new shard refuses a role
    in the ISR and reports it; a role out of the ISR it takes; back in the ISR at a leader
    epoch after the failure, the marker goes. (Without it a new controller, knowing
    nothing, could elect it with its short log.)"""
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "f-0")
    c = _cluster(node, tmp_path, [1, 2])
    batch = build_batch([b"f1"], base_offset=0, partition_leader_epoch=7)
    node.tell(c.shard, FollowerApply(1, [FollowerApplyRow("f", 0, 7, batch, 1, 0, 1, -1, -1,
                                                          -1)]), sender=c.handler.name)
    wait_for(lambda: _stats(node, c.shard)["partitions"]["f-0"] == [0, 1, 1], "f-0 at HW 1")
    failing["armed"] = 1
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the shard's restart")
    _restored(c)
    marker = tmp_path / "f-0" / STORAGE_FAILED_MARKER
    assert json.loads(marker.read_bytes())["leader_epoch"] == 7
    assert json.loads(marker.read_bytes())["led_alone"] is False
    _log_dir_event(c)
    _lai(c, 1, LeaderAndIsrPartition("f", 0, 1, 2, 8, [2], 10, [2, 1], False))
    wait_for(lambda: _got(node, c.controller, "LeaderAndIsrResponse")[1:], "the answer")
    assert marker.exists(), "out of the ISR, not caught up: still failed"

    shard = _new_process_shard(c, tmp_path, "shard-9")
    refused = _role(c, shard, 1, 2, 9, [2, 1])
    assert refused.rows == [("f", 0, int(ErrorCode.KAFKA_STORAGE_ERROR))]
    assert refused.storage_failed == [("f", 0, False, 9)]
    led = _role(c, shard, 2, 1, 10, [1])  # elected alone: it did not lead alone
    assert led.rows == [("f", 0, int(ErrorCode.KAFKA_STORAGE_ERROR))]
    out = _role(c, shard, 3, 2, 11, [2])
    assert out.rows == [("f", 0, NONE)] and not out.storage_failed
    assert marker.exists()
    back = _role(c, shard, 4, 2, 12, [2, 1])
    assert back.rows == [("f", 0, NONE)]
    assert not marker.exists(), "back in the ISR after the failure: healed"


def test_a_failed_follower_that_caught_up_past_what_it_lost_is_healed_on_disk(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its leader takes it back into the ISR without telling it (a follower gets no role
    for an ISR change): the marker goes once, following at a leader epoch after the
    failure, its log reaches the end it had before the failure. Left on disk, a restart of
    its process would refuse the lead of a partition it is rightly the ISR's last member
    of (sim seed 4, eio, crash and expire: offline for good)."""
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "f-0")
    c = _cluster(node, tmp_path, [1, 2])
    batch = build_batch([b"f1"], base_offset=0, partition_leader_epoch=7)
    node.tell(c.shard, FollowerApply(1, [FollowerApplyRow("f", 0, 7, batch, 1, 0, 1, -1, -1,
                                                          -1)]), sender=c.handler.name)
    wait_for(lambda: _stats(node, c.shard)["partitions"]["f-0"] == [0, 1, 1], "f-0 at HW 1")
    failing["armed"] = 1
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the shard's restart")
    _restored(c)
    marker = tmp_path / "f-0" / STORAGE_FAILED_MARKER
    assert json.loads(marker.read_bytes())["heal_at"] == 1
    out = _role(c, c.shard, 1, 2, 8, [2])
    assert out.rows == [("f", 0, NONE)]
    empty = build_batch([b"f1"], base_offset=0, partition_leader_epoch=7)
    node.tell(c.shard, FollowerApply(2, [FollowerApplyRow("f", 0, 8, empty, 1, 0, 1, -1, -1,
                                                          -1)]), sender=c.handler.name)
    wait_for(lambda: _stats(node, c.shard)["partitions"]["f-0"][1] == 1, "f-0 caught up")
    wait_for(lambda: not marker.exists(), "the marker removed")
    # and what it fetched back was on disk before the marker went (its flush interval is
    # far away: without the flush at the heal its recovery point would still be 0)
    assert node.actors[c.shard.name].partitions[("f", 0)].log.recovery_point >= 1


def test_a_replica_whose_failure_mark_cannot_be_written_leads_nothing_in_that_life(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fails the marker's write too: the failure would not outlive a restart of the
    process, so in this life the replica takes no leader role of f-0 (refused, reported),
    though it follows out of the ISR and in it again."""
    import actors.partition_shard as shard_module

    def unwritable(path: Path, data: bytes) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(shard_module, "write_atomically", unwritable)
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "f-0")
    c = _cluster(node, tmp_path, [1, 2])
    batch = build_batch([b"f1"], base_offset=0, partition_leader_epoch=7)
    node.tell(c.shard, FollowerApply(1, [FollowerApplyRow("f", 0, 7, batch, 1, 0, 1, -1, -1,
                                                          -1)]), sender=c.handler.name)
    wait_for(lambda: _stats(node, c.shard)["partitions"]["f-0"] == [0, 1, 1], "f-0 at HW 1")
    failing["armed"] = 1
    node.tell(c.shard, Flush())
    wait_for(lambda: node.actors[c.shard.name].crashes == 1, "the shard's restart")
    _restored(c)
    assert not (tmp_path / "f-0" / STORAGE_FAILED_MARKER).exists()
    out = _role(c, c.shard, 1, 2, 8, [2])
    assert out.rows == [("f", 0, NONE)]
    back = _role(c, c.shard, 2, 2, 9, [2, 1])
    assert back.rows == [("f", 0, NONE)]
    lead = _role(c, c.shard, 3, 1, 10, [1, 2])
    assert lead.rows == [("f", 0, int(ErrorCode.KAFKA_STORAGE_ERROR))]
    assert lead.storage_failed == [("f", 0, False, 10)]
    assert "f-0" not in _stats(node, c.shard)["leaders"]


def test_a_failed_leaders_marker_is_healed_at_its_high_watermark_not_its_log_end(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c-0's leader acknowledged one record (high watermark 1: broker 2 has it) and holds a
    second nobody else has (log end 2) when its fsync fails. Only the first was
    acknowledged: the marker heals once it has offset 0 again, as a follower (the new
    leader may never have the second). Healed at its log end (2), it stayed marked, and a
    restart of its process later refused the lead of the ISR it was rightly the last
    member of (sim seed 63, eio, crash and expire: offline for good)."""
    failing = _fsync_fails_and_loses_the_unsynced(monkeypatch, tmp_path, "c-0")
    c = _cluster(node, tmp_path, [1, 2])
    shard, handler = c.shard, c.handler
    assert _append(node, shard, handler, 1, "c", [b"c1"])[1][0][2] == NONE
    _follower_fetch(c, 2, 1)
    wait_for(lambda: _stats(node, shard)["partitions"]["c-0"] == [0, 1, 1], "HW 1")
    # acks=1: answered at once; broker 2 never fetches it
    assert _append(node, shard, handler, 3, "c", [b"c2"])[1][0][2] == NONE
    wait_for(lambda: _stats(node, shard)["partitions"]["c-0"] == [0, 1, 2], "LEO 2")
    failing["armed"] = 1
    node.tell(shard, Flush())
    wait_for(lambda: node.actors[shard.name].crashes == 1, "the shard's restart")
    _restored(c)
    marker = tmp_path / "c-0" / STORAGE_FAILED_MARKER
    assert json.loads(marker.read_bytes())["heal_at"] == 1
    assert json.loads(marker.read_bytes())["led_alone"] is False
