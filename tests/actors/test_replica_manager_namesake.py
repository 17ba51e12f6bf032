"""A namesake's role refused while its deleted predecessor's directory is still there.

c-0 is deleted (StopReplica) while its directory cannot be renamed aside (an immutable
inode, tests/fixtures/immutable.py): the shard keeps it as undeleted and tries again
every second. A LeaderAndIsr for a namesake c-0 meanwhile is refused (its log would
open the deleted records), answered KAFKA_STORAGE_ERROR: not a storage failure (never
reported to the controller with LogDirEventNotification), and not forgotten: the shard
keeps the newest role given and takes it once the directory goes, and the
ReplicaManager has the fetchers and coordinators follow it (RolesTaken). Before, the
role was dropped and the partition stayed dark on this broker until the controller
happened to send another LeaderAndIsr. Real shard, ReplicaManager, log manager and
purgatory in one node (tests/actors/test_partition_shard_restart.py's cluster).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from actors.core.record_batch import build_batch
from actors.partition_shard import PartitionShard
from actors.runtime.node import Node
from tests.actors.test_partition_shard_restart import (
    Cluster,
    _append,
    _cluster,
    _crash,
    _crash_on_flush,
    _got,
    _lai,
    _restored,
    _stats,
)
from tests.fixtures.crash import crash_once, fail_once
from tests.fixtures.immutable import immutable_flags
from tests.fixtures.waiting import wait_for
from wire.broker_messages import DropPartitions, GetStats
from wire.cluster_messages import (
    LeaderAndIsrPartition,
    StopReplica,
    StopReplicaPartition,
    UpdateMetadata,
    UpdateMetadataPartition,
)
from wire.errors import ErrorCode
from wire.replication_messages import FollowerApply, FollowerApplyRow

NONE = int(ErrorCode.NONE)
STORAGE = int(ErrorCode.KAFKA_STORAGE_ERROR)


@pytest.fixture(params=["chattr", "injected"])
def immutable(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
              tmp_path: Path) -> Iterator[Callable[[Path, bool], None]]:
    """The real flag where it can be set (else injected failures), and injected ones."""
    with immutable_flags(monkeypatch, tmp_path, injected=request.param == "injected") as flag:
        yield flag


def _manager(c: Cluster) -> dict[str, Any]:
    stats: dict[str, Any] = c.node.ask(c.manager, GetStats())
    return stats


def _delete_stuck(c: Cluster, tmp_path: Path, immutable: Any, correlation: int = 1) -> None:
    """c-0 (led here, one record) deleted while its directory cannot be renamed aside:
    the StopReplica is answered KAFKA_STORAGE_ERROR and the directory stays."""
    assert _append(c.node, c.shard, c.handler, 100, "c", [b"old"])[1][0][2] == NONE
    immutable(tmp_path / "c-0")
    stops = len(_got(c.node, c.controller, "StopReplicaResponse"))
    c.node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True)],
                                       correlation), sender=c.controller.name)
    [response] = wait_for(lambda: _got(c.node, c.controller, "StopReplicaResponse")[stops:],
                          "the StopReplica answer")
    assert [tuple(r) for r in response[2]] == [("c", 0, STORAGE)], response
    assert (tmp_path / "c-0").is_dir()
    assert _stats(c.node, c.shard)["undeleted"] == 1


def _namesake_kept(node: Node, tmp_path: Path, immutable: Any) -> Cluster:
    """Two brokers, c-0's delete stuck on its immutable directory, and the namesake's
    role (leading here at leader epoch 0) given and kept by the shard (refused for now)."""
    c = _cluster(node, tmp_path, [1, 2])
    _delete_stuck(c, tmp_path, immutable)
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 0, [1], 0, [1, 2], True))
    _refused(c, 2)
    return c


def _refused(c: Cluster, answers: int) -> None:
    """The ``answers``-th LeaderAndIsr answer refuses the namesake c-0 (56)."""
    wait_for(lambda: len(_got(c.node, c.controller, "LeaderAndIsrResponse")) == answers,
             "the namesake's LeaderAndIsr answer")
    response = _got(c.node, c.controller, "LeaderAndIsrResponse")[answers - 1]
    assert [tuple(r) for r in response[2]] == [("c", 0, STORAGE)], response


def _no_storage_failure(c: Cluster) -> None:
    """A pending delete is no failed disk: nothing reported to the controller."""
    assert _got(c.node, c.controller, "LogDirEventNotification") == []
    manager = _manager(c)
    assert manager["storage_failed"] == [] and manager["log_dir_events_sent"] == 0
    assert _stats(c.node, c.shard)["replication"].get("storage_refused", 0) == 0


def test_a_namesake_leader_refused_while_the_old_directory_is_pending_leads_once_it_goes(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """The newest of two roles refused meanwhile wins: a follower's at leader epoch 0,
    then this broker's leadership at 1. It serves the namesake's fresh log from 0."""
    c = _cluster(node, tmp_path, [1, 2])
    _delete_stuck(c, tmp_path, immutable)
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 2, 0, [2, 1], 0, [2, 1], True))
    _refused(c, 2)
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 1, [1], 1, [1, 2], False))
    _refused(c, 3)
    assert "c-0" not in _stats(node, c.shard)["partitions"]

    immutable(tmp_path / "c-0", False)  # the housekeeping's next try sets it aside

    wait_for(lambda: _stats(node, c.shard)["leaders"] == ["c-0"], "the namesake led")
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0], "not a fresh log"
    wait_for(lambda: "c-0" in _manager(c)["leading"], "the ReplicaManager told")
    done = _append(node, c.shard, c.handler, 7, "c", [b"new"])
    assert done[1][0][2:4] == [NONE, 0]  # error code, base offset: the fresh log's first
    assert _manager(c)["roles_taken_later"] == 1
    _no_storage_failure(c)


def test_a_namesake_follower_refused_while_the_old_directory_is_pending_fetches_once_it_goes(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    c = _cluster(node, tmp_path, [1, 2])
    _delete_stuck(c, tmp_path, immutable)
    adds = len(_got(node, c.fetcher, "AddFetcherPartitions"))
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 2, 0, [2, 1], 0, [2, 1], True))
    _refused(c, 2)

    immutable(tmp_path / "c-0", False)

    added = wait_for(lambda: [a for a in _got(node, c.fetcher, "AddFetcherPartitions")[adds:]
                              if any(r[0] == "c" for r in a[0])],
                     "the namesake given to broker 2's fetcher")
    assert [list(r) for r in added[0][0]] == [["c", 0, 2, 0]]  # from broker 2, epoch 0
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0]
    assert _stats(node, c.shard)["leaders"] == []
    assert "c-0" in _manager(c)["following"]
    # what the fetcher brings from broker 2 (the namesake's records, leader epoch 0) is
    # applied as the follower's: from offset 0 of the fresh log
    batch = build_batch([b"n1"], base_offset=0, partition_leader_epoch=0)
    node.tell(c.shard, FollowerApply(1, [FollowerApplyRow("c", 0, 0, batch, 1, 0, 1, -1, -1,
                                                          -1)]), sender=c.handler.name)
    wait_for(lambda: _stats(node, c.shard)["partitions"]["c-0"] == [0, 1, 1],
             "the fetched record applied at offset 0")
    _no_storage_failure(c)


def test_a_role_kept_for_a_namesake_is_cancelled_by_its_delete_and_the_next_one_taken(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """The namesake (leading here at leader epoch 0) is deleted in turn while the old
    directory is still there: its kept role goes with it. A third c-0, following broker 2,
    is created: once the directory goes, that role is taken, never the deleted one's."""
    c = _namesake_kept(node, tmp_path, immutable)
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 0, True)], 2),
              sender=c.controller.name)
    wait_for(lambda: len(_got(node, c.controller, "StopReplicaResponse")) == 2,
             "the namesake's delete answered")
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 2, 0, [2, 1], 0, [2, 1], True))
    _refused(c, 3)

    immutable(tmp_path / "c-0", False)

    wait_for(lambda: "c-0" in _manager(c)["following"], "the third c-0 followed")
    assert _stats(node, c.shard)["leaders"] == [], "the deleted namesake's role was taken"
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0]
    assert _stats(node, c.shard)["roles_later"] == []
    _no_storage_failure(c)


def test_a_namesake_role_waiting_for_the_old_directory_survives_a_crash_of_the_shard(
        node: Node, tmp_path: Path, immutable: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard crashes while the namesake's role waits: the restore gives it again (the
    ReplicaManager kept it on record), it is refused for the same reason, and taken once
    the directory goes."""
    armed = _crash_on_flush(monkeypatch)
    c = _namesake_kept(node, tmp_path, immutable)

    _crash(node, c.shard, armed)
    _restored(c)
    immutable(tmp_path / "c-0", False)

    wait_for(lambda: _stats(node, c.shard)["leaders"] == ["c-0"], "the namesake led")
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0], "not a fresh log"
    assert _append(node, c.shard, c.handler, 7, "c", [b"new"])[1][0][2:4] == [NONE, 0]
    _no_storage_failure(c)


def test_a_role_kept_for_a_namesake_deleted_meanwhile_is_never_taken(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """The namesake's delete cancels its kept role: once the old directory goes, nothing
    opens c-0 (it would lead a deleted topic's partition behind the controller's back).
    (It guards the fix's own hazard, so it passes without the fix too; it fails when the
    delete does not drop the kept role.)"""
    c = _namesake_kept(node, tmp_path, immutable)
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 0, True)], 2),
              sender=c.controller.name)
    wait_for(lambda: len(_got(node, c.controller, "StopReplicaResponse")) == 2,
             "the namesake's delete answered")

    immutable(tmp_path / "c-0", False)

    wait_for(lambda: not (tmp_path / "c-0").exists(), "the old directory gone")
    # the housekeeping turn that sets the directory aside is the one that would take a role
    wait_for(lambda: _stats(node, c.shard)["undeleted"] == 0, "the delete done")
    assert "c-0" not in _stats(node, c.shard)["partitions"], "a deleted namesake's role taken"
    assert _manager(c)["roles_taken_later"] == 0 and "c-0" not in _manager(c)["leading"]
    _no_storage_failure(c)


def test_a_namesake_role_given_while_the_shard_crashes_in_the_drop_opens_a_fresh_log(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard crashes handling c-0's delete (DropPartitions dies with it, before the
    delete is marked anywhere) while a LeaderAndIsr for a namesake c-0 waits in its
    mailbox: the restarted shard reopened the old c-0 (still hosted), and the namesake's
    role took it, with the deleted records. The ReplicaManager sends the delete again
    ahead of the namesake's role: the namesake opens a fresh log, and the StopReplica
    is answered once that delete is done."""
    hold = threading.Event()
    armed = crash_once(monkeypatch, PartitionShard, "on_drop", DropPartitions, hold)
    c = _cluster(node, tmp_path, [1, 2])
    assert _append(node, c.shard, c.handler, 100, "c", [b"old"])[1][0][2] == NONE
    armed["crash"] = True
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True)], 1),
              sender=c.controller.name)
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 0, [1], 0, [1, 2], True))
    wait_for(lambda: _manager(c)["applied"]["lai"] == 2, "the namesake's role accepted")
    hold.set()

    _restored(c)
    wait_for(lambda: len(_got(node, c.controller, "LeaderAndIsrResponse")) == 2, "LAI answer")
    wait_for(lambda: _manager(c)["pending"] == 0, "all answered")
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0], \
        "the namesake opened the deleted partition's log"
    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    [stop] = _got(node, c.controller, "StopReplicaResponse")
    assert [tuple(r) for r in stop[2]] == [("c", 0, NONE)], stop
    assert _append(node, c.shard, c.handler, 7, "c", [b"new"])[1][0][2:4] == [NONE, 0]


def test_a_delete_that_fails_before_its_mark_leaves_no_directory_for_a_namesake(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c-0's delete fails before it is marked on disk (the shard had forgotten c-0): the
    partition stays undeleted, so the namesake's role sets the old directory aside
    before it opens a fresh log, instead of opening the deleted records."""
    armed = fail_once(monkeypatch, PartitionShard, "_mark_deleting")
    c = _cluster(node, tmp_path, [1, 2])
    assert _append(node, c.shard, c.handler, 100, "c", [b"old"])[1][0][2] == NONE
    armed["crash"] = True
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True)], 1),
              sender=c.controller.name)
    [stop] = wait_for(lambda: _got(node, c.controller, "StopReplicaResponse"), "the answer")
    assert [tuple(r) for r in stop[2]] == [("c", 0, STORAGE)], stop
    assert not armed["crash"]
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 0, [1], 0, [1, 2], True))
    wait_for(lambda: len(_got(node, c.controller, "LeaderAndIsrResponse")) == 2, "LAI answer")

    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0], \
        "the namesake opened the deleted partition's log"
    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    assert _stats(node, c.shard)["undeleted"] == 0
    assert _append(node, c.shard, c.handler, 7, "c", [b"new"])[1][0][2:4] == [NONE, 0]
    _no_storage_failure(c)


def test_only_the_first_namesake_role_has_the_delete_sent_ahead(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two roles of the namesake come while the delete is unanswered (the shard crashes
    in it): the delete goes ahead of the first only. Sent ahead of the second too, it
    deleted the namesake's log the first role had opened, with whatever that leader had
    acknowledged meanwhile."""
    hold = threading.Event()
    armed = crash_once(monkeypatch, PartitionShard, "on_drop", DropPartitions, hold)
    deletes: list[str] = []  # each delete of c-0 the shard did: what it deleted
    real_delete = PartitionShard._delete

    def counted(self: PartitionShard, topic: str, partition: int) -> None:
        if (topic, partition) == ("c", 0):
            state = self.partitions.get((topic, partition))
            deletes.append("not open" if state is None else
                           f"open at leader epoch {state.leader_epoch}")
        real_delete(self, topic, partition)

    monkeypatch.setattr(PartitionShard, "_delete", counted)
    c = _cluster(node, tmp_path, [1, 2])
    assert _append(node, c.shard, c.handler, 100, "c", [b"old"])[1][0][2] == NONE
    armed["crash"] = True
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True)], 1),
              sender=c.controller.name)
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 0, [1], 0, [1], True))
    wait_for(lambda: _manager(c)["applied"]["lai"] == 2, "the namesake's role accepted")
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 1, [1], 1, [1], False))
    wait_for(lambda: _manager(c)["applied"]["lai"] == 3, "its second role accepted")
    hold.set()

    _restored(c)
    wait_for(lambda: len(_got(node, c.controller, "LeaderAndIsrResponse")) == 3, "LAI answers")
    wait_for(lambda: _manager(c)["pending"] == 0, "all answered")
    # the old log, reopened (no role) by the restarted shard, and nothing after it
    assert deletes == ["open at leader epoch -1"], deletes
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0]
    assert _stats(node, c.shard)["leaders"] == ["c-0"]
    assert _append(node, c.shard, c.handler, 7, "c", [b"new"])[1][0][2:4] == [NONE, 0]


def _c0_fetches(c: Cluster) -> list[str]:
    """What broker 2's fetcher was told of c-0, in order: "add@<leader epoch>", "remove"."""
    told = []
    for name, msg in c.node.ask(c.fetcher, GetStats()):
        for row in msg[0] if name in ("AddFetcherPartitions", "RemoveFetcherPartitions") else []:
            if (row[0], row[1]) == ("c", 0):
                told.append(f"add@{row[3]}" if name == "AddFetcherPartitions" else "remove")
    return told


def test_a_follower_role_restored_while_the_old_directory_is_pending_is_not_fetched_until_taken(
        node: Node, tmp_path: Path, immutable: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard crashes while a namesake follower's role waits: the restore gives the
    role again, and the shard refuses it for the old directory. The ReplicaManager knew
    the shard keeps it (its earlier answer said so): the restore gives broker 2's fetcher
    nothing (it would fetch for a partition the shard does not host) until the role is
    taken. Before, the restore added it to the fetcher, and the refusal took it off."""
    armed = _crash_on_flush(monkeypatch)
    c = _cluster(node, tmp_path, [1, 2])
    _delete_stuck(c, tmp_path, immutable)
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 2, 0, [2, 1], 0, [2, 1], True))
    _refused(c, 2)

    _crash(node, c.shard, armed)
    _restored(c)
    wait_for(lambda: _manager(c)["restoring"] == 0, "the restore's answer taken")
    assert _c0_fetches(c) == [], "the restore had c-0 fetched for a role the shard refuses"
    assert "c-0" not in _manager(c)["following"]
    assert _manager(c)["kept_for_delete"] == ["c-0"]

    immutable(tmp_path / "c-0", False)

    wait_for(lambda: _c0_fetches(c) == ["add@0"], "c-0 fetched once its role is taken")
    assert "c-0" in _manager(c)["following"]
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0]
    _no_storage_failure(c)


def test_metadata_moving_a_partition_whose_delete_is_unanswered_gives_no_role(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a StopReplica(delete) of c-0 (led here) is unanswered, an UpdateMetadata of
    the recreated c with its leader elsewhere is no demotion: a namesake's role comes only
    by LeaderAndIsr, after the delete sent ahead. Taken from the metadata, that role went
    to the shard without the delete ahead, and it set the leader epoch so the controller's
    LeaderAndIsr for the namesake at that epoch was refused as stale."""
    hold = threading.Event()
    armed = crash_once(monkeypatch, PartitionShard, "on_drop", DropPartitions, hold)
    c = _cluster(node, tmp_path, [1, 2])
    assert _append(node, c.shard, c.handler, 100, "c", [b"old"])[1][0][2] == NONE
    armed["crash"] = True
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 3, True)], 1),
              sender=c.controller.name)
    node.tell(c.manager, UpdateMetadata(1, 1, 5, False, [], [
        UpdateMetadataPartition("c", 0, 1, 2, 0, [2, 1], 0, [2, 1], [])], {"c": {}}),
        sender=c.controller.name)
    wait_for(lambda: _manager(c)["applied"]["um"] == 1, "the UpdateMetadata")
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 2, 0, [2, 1], 0, [2, 1], True))
    wait_for(lambda: _manager(c)["applied"]["lai"] == 2, "the namesake's role accepted")
    hold.set()
    _restored(c)
    wait_for(lambda: _manager(c)["pending"] == 0, "all answered")
    assert _stats(node, c.shard)["partitions"]["c-0"] == [0, 0, 0]


def test_a_stop_without_delete_cancels_a_role_kept_for_a_namesake(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """A namesake's role (leading here) is kept while the old directory is there; the
    controller then stops the replica without deleting it (StopReplica, delete false):
    the kept role is cancelled, and once the directory goes nothing opens c-0. Before, the
    stop reached no shard: the shard took the role once the directory went, and led c-0
    after the controller had taken that role away."""
    c = _namesake_kept(node, tmp_path, immutable)
    assert _stats(node, c.shard)["roles_later"] == ["c-0@0"]
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 0, False)], 2),
              sender=c.controller.name)
    wait_for(lambda: len(_got(node, c.controller, "StopReplicaResponse")) == 2,
             "the stop answered")
    wait_for(lambda: _stats(node, c.shard)["roles_later"] == [], "the kept role cancelled",
             timeout=15)
    assert _manager(c)["kept_for_delete"] == []

    immutable(tmp_path / "c-0", False)

    # the housekeeping turn that sets the directory aside is the one that would take a role
    wait_for(lambda: _stats(node, c.shard)["undeleted"] == 0, "the delete done")
    assert "c-0" not in _stats(node, c.shard)["partitions"], "a stopped role was taken"
    assert _stats(node, c.shard)["leaders"] == []
    assert _manager(c)["roles_taken_later"] == 0 and "c-0" not in _manager(c)["leading"]
    _no_storage_failure(c)


def test_a_kept_role_that_cannot_be_taken_is_told_to_the_replica_manager_at_once(
        node: Node, tmp_path: Path, immutable: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old directory goes, and the kept namesake role (leading here) cannot be taken
    (its log fails to open): the shard says so in its RolesTaken (a refused row), and the
    ReplicaManager forgets the role (dark here, as a refused LeaderAndIsr row: no restore
    gives it again), logged once. Before, the shard dropped it silently: the ReplicaManager
    kept it on record and learnt nothing until the shard's next restore."""
    c = _namesake_kept(node, tmp_path, immutable)
    failing = fail_once(monkeypatch, PartitionShard, "_take_role")
    failing["crash"] = True
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        immutable(tmp_path / "c-0", False)

        wait_for(lambda: _manager(c).get("roles_refused_later") == 1,
                 "the ReplicaManager told of the refused role", timeout=15)
        assert _manager(c)["kept_for_delete"] == []
        assert _manager(c)["roles_taken_later"] == 0 and "c-0" not in _manager(c)["leading"]
        assert "c-0" not in _stats(node, c.shard)["partitions"]
        assert len([ln for ln in lines if "could not take the kept role" in ln]) == 1, lines
    finally:
        logger.remove(sink)


def test_a_stop_ahead_of_the_shards_answer_leaves_nothing_kept_on_record(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """The namesake's role and a StopReplica without delete come together: the shard's
    answer (refused, awaiting the old directory) reaches the ReplicaManager after the
    stop, which cancelled the role. Nothing stays recorded as kept (it would keep a
    restore from giving that partition a fetcher should the controller hand it back)."""
    c = _cluster(node, tmp_path, [1, 2])
    _delete_stuck(c, tmp_path, immutable)
    _lai(c, 1, LeaderAndIsrPartition("c", 0, 1, 1, 0, [1], 0, [1, 2], True))
    node.tell(c.manager, StopReplica(1, 1, 5, [StopReplicaPartition("c", 0, 0, False)], 2),
              sender=c.controller.name)
    _refused(c, 2)
    wait_for(lambda: len(_got(node, c.controller, "StopReplicaResponse")) == 2,
             "the stop answered")
    wait_for(lambda: _stats(node, c.shard)["roles_later"] == [], "the kept role cancelled",
             timeout=15)
    node.quiesce()
    assert _manager(c)["kept_for_delete"] == []
