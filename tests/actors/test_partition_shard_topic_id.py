"""A PartitionShard opening a partition checks the directory's topic id (partition.metadata).

A directory holding another id than the topic's is a deleted namesake's whose delete was
lost: it is deleted through the durable delete path (marked, set aside, removed) and the
partition opened new; a directory without the file (an older version's) is adopted; a
damaged file opens nothing and deletes nothing. The same for a log open under another id
(its delete never reached this shard). Real shard, log manager and log dir on disk.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch
from actors.core.topic_id import (
    PARTITION_METADATA_FILE,
    new_topic_id,
    read_partition_metadata,
    write_partition_metadata,
)
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
    OpenPartitionRow,
    OpenPartitions,
    ShardDone,
    TopicEntry,
)
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


class Recorder(Actor):
    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, ShardDone, RolesRestored, BecameLeaderOrFollower)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _old_log(data: Path, topic_id: str | None, records: int = 3) -> Path:
    """A partition directory on disk with ``records`` records, as a shard left it."""
    directory = data / "t-0"
    log = PartitionLog.open(directory, "t", 0, LogConfig(), 0)
    log.append_as_leader(build_batch([b"old"] * records), leader_epoch=0, now_ms=0)
    log.close()
    if topic_id is not None:
        write_partition_metadata(directory, topic_id)
    return directory


def _shard(node: Node, data: Path, topics: dict[str, TopicEntry]) -> tuple[Any, Any]:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(data)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics=topics, broker_id=1, clock=node.clock)
    return shard, node.spawn(Recorder, "handler")


def _stats(node: Node, shard: Any) -> dict[str, Any]:
    stats: dict[str, Any] = node.ask(shard, GetStats())
    return stats


def _open(node: Node, shard: Any, handler: Any, req_id: int, topic_id: str) -> Any:
    node.tell(shard, OpenPartitions(req_id, [OpenPartitionRow("t", 0, {}, topic_id)]),
              sender=handler.name)
    [done] = wait_for(lambda: [m for n, m in node.ask(handler, GetStats())
                               if n == "ShardDone" and m[0] == req_id], "the open answered")
    return done


def test_a_directory_of_another_topic_id_is_deleted_and_the_partition_opened_new(
        node: Node, tmp_path: Path) -> None:
    dead, live = new_topic_id(), new_topic_id()
    _old_log(tmp_path, dead)
    shard, _handler = _shard(node, tmp_path, {"t": TopicEntry(1, {}, live)})
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"] == [0, 0, 0], "the dead namesake's records are open"
    assert stats["dead_namesakes_deleted"] == 1
    assert read_partition_metadata(tmp_path / "t-0") == live
    assert [p.name for p in tmp_path.glob("t-0*")] == ["t-0"]  # nothing set aside is left


def test_a_directory_of_the_same_id_is_opened_with_its_records(
        node: Node, tmp_path: Path) -> None:
    topic_id = new_topic_id()
    _old_log(tmp_path, topic_id)
    shard, _handler = _shard(node, tmp_path, {"t": TopicEntry(1, {}, topic_id)})
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"][2] == 3
    assert stats["dead_namesakes_deleted"] == 0


def test_a_directory_without_the_file_is_adopted(node: Node, tmp_path: Path) -> None:
    topic_id = new_topic_id()
    _old_log(tmp_path, None)  # an older version's
    shard, _handler = _shard(node, tmp_path, {"t": TopicEntry(1, {}, topic_id)})
    assert _stats(node, shard)["partitions"]["t-0"][2] == 3
    assert read_partition_metadata(tmp_path / "t-0") == topic_id


def test_a_topic_without_an_id_opens_as_before_and_writes_nothing(
        node: Node, tmp_path: Path) -> None:
    _old_log(tmp_path, new_topic_id())
    shard, _handler = _shard(node, tmp_path, {"t": TopicEntry(1, {})})
    assert _stats(node, shard)["partitions"]["t-0"][2] == 3


def test_a_damaged_file_opens_nothing_and_deletes_nothing(node: Node, tmp_path: Path) -> None:
    directory = _old_log(tmp_path, None)
    (directory / PARTITION_METADATA_FILE).write_text("version: 0\ntopic_id: garbage\n")
    shard, handler = _shard(node, tmp_path, {})
    done = _open(node, shard, handler, 1, new_topic_id())
    assert done[2] == [["t", 0]] and "partition.metadata" in done[1], done
    assert "t-0" not in _stats(node, shard)["partitions"]
    assert len(list(directory.glob("*.log"))) == 1, "its records are kept"


def test_a_log_open_under_another_id_is_deleted_when_its_namesake_is_opened(
        node: Node, tmp_path: Path) -> None:
    """The shard holds t-0 open as the dead topic's (its delete never came); the
    namesake's open deletes it and opens new, answered as any open."""
    dead, live = new_topic_id(), new_topic_id()
    shard, handler = _shard(node, tmp_path, {"t": TopicEntry(1, {}, dead)})
    node.tell(shard, Append(1, 1, 30_000, [AppendRow("t", 0, build_batch([b"old"] * 2))]),
              sender=handler.name)
    wait_for(lambda: [m for n, m in node.ask(handler, GetStats()) if n == "AppendDone"],
             "the append answered")
    assert _stats(node, shard)["partitions"]["t-0"][2] == 2
    assert _open(node, shard, handler, 2, live)[1:] == ["", []]
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"] == [0, 0, 0]
    assert stats["dead_namesakes_deleted"] == 1
    assert read_partition_metadata(tmp_path / "t-0") == live
    # the same id again: nothing changes
    assert _open(node, shard, handler, 3, live)[1:] == ["", []]
    assert _stats(node, shard)["dead_namesakes_deleted"] == 1


def _role(topic_id: str) -> ReplicaStateRow:
    """t-0 led here (broker 1) alone, at leader epoch 4."""
    return ReplicaStateRow("t", 0, 1, 4, [1], [1], 5, False, {}, topic_id)


def test_a_restored_role_of_a_namesake_deletes_the_dead_topics_directory(
        node: Node, tmp_path: Path) -> None:
    """A cluster's shard whose process restarted (it opens nothing at start) is restored
    the namesake's role, its topic id with it; the directory on disk is the deleted
    topic's, whose delete died with the process: deleted, and the role taken on a new
    log. Before topic ids this restore opened the old directory, records and all."""
    dead, live = new_topic_id(), new_topic_id()
    _old_log(tmp_path, dead)
    shard, manager = _shard(node, tmp_path, {})
    node.tell(shard, RestoreRoles(1, "process 1 restarted",
                                  [RestoredRoleRow(_role(live), None)]),
              sender=manager.name)
    [restored] = wait_for(lambda: [m for n, m in node.ask(manager, GetStats())
                                   if n == "RolesRestored"], "the restore answered")
    assert [tuple(r) for r in restored[1]] == [("t", 0, NONE)]
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"] == [0, 0, 0], "the dead topic's records are served"
    assert stats["leaders"] == ["t-0"]
    assert stats["dead_namesakes_deleted"] == 1
    assert read_partition_metadata(tmp_path / "t-0") == live


def test_a_role_of_a_namesake_deletes_the_dead_topics_directory(
        node: Node, tmp_path: Path) -> None:
    """The same for a LeaderAndIsr's role (BecomeLeaderOrFollower)."""
    dead, live = new_topic_id(), new_topic_id()
    _old_log(tmp_path, dead)
    shard, manager = _shard(node, tmp_path, {})
    node.tell(shard, BecomeLeaderOrFollower(1, [_role(live)]), sender=manager.name)
    wait_for(lambda: [m for n, m in node.ask(manager, GetStats())
                      if n == "BecameLeaderOrFollower"], "the role answered")
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"] == [0, 0, 0]
    assert stats["dead_namesakes_deleted"] == 1
    # a role from an older controller (no id) for it changes nothing
    node.tell(shard, BecomeLeaderOrFollower(2, [_role("")._replace(leader_epoch=5)]),
              sender=manager.name)
    wait_for(lambda: len([m for n, m in node.ask(manager, GetStats())
                          if n == "BecameLeaderOrFollower"]) == 2, "the second role answered")
    assert read_partition_metadata(tmp_path / "t-0") == live


def _roles(node: Node, shard: Any, manager: Any, *roles: ReplicaStateRow) -> None:
    for i, role in enumerate(roles, 1):
        node.tell(shard, BecomeLeaderOrFollower(i, [role]), sender=manager.name)
        wait_for(lambda i=i: len([m for n, m in node.ask(manager, GetStats())
                                  if n == "BecameLeaderOrFollower"]) == i, f"role {i} answered")


def test_a_log_opened_without_an_id_checks_the_directorys_when_the_id_comes(
        node: Node, tmp_path: Path) -> None:
    """An older controller's role (no id) opens the directory as it is; the first role
    with an id then finds the directory's own: another is a dead namesake's (deleted,
    opened new), the same keeps the log."""
    dead, live = new_topic_id(), new_topic_id()
    _old_log(tmp_path, dead)
    shard, manager = _shard(node, tmp_path, {})
    _roles(node, shard, manager, _role(""), _role(live)._replace(leader_epoch=5))
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"] == [0, 0, 0] and stats["dead_namesakes_deleted"] == 1
    assert read_partition_metadata(tmp_path / "t-0") == live


def test_a_log_opened_without_an_id_is_adopted_by_its_own_id(node: Node, tmp_path: Path) -> None:
    topic_id = new_topic_id()
    _old_log(tmp_path, None)
    shard, manager = _shard(node, tmp_path, {})
    _roles(node, shard, manager, _role(""), _role(topic_id)._replace(leader_epoch=5))
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"][2] == 3 and stats["dead_namesakes_deleted"] == 0
    assert read_partition_metadata(tmp_path / "t-0") == topic_id


def _log_of(data: Path, topic: str, records: int) -> Path:
    directory = data / f"{topic}-0"
    log = PartitionLog.open(directory, topic, 0, LogConfig(), 0)
    log.append_as_leader(build_batch([b"old"] * records), leader_epoch=0, now_ms=0)
    log.close()
    return directory


def _no_space_for_metadata(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """``os.write`` of a partition.metadata (its tmp file) in ``directory`` fails with
    ENOSPC, every time; every other write is the real one."""
    real = os.write

    def failing(fd: int, data: Any) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.startswith(str(directory)) and PARTITION_METADATA_FILE in target:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", failing)


def test_at_start_a_damaged_file_keeps_out_its_partition_only(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single node's start: one partition's file damaged, another's unwritable (as
    ENOSPC would have it, on the first start after an upgrade). The damaged one is kept
    out (its directory as it is), the unwritable one opened with its records (written at
    housekeeping once it can be), the rest opened. Before: the error escaped the shard's setup, and
    the partitions after it were never opened."""
    ids = {t: new_topic_id() for t in ("a", "b", "c")}
    damaged = _log_of(tmp_path, "a", 2)
    (damaged / PARTITION_METADATA_FILE).write_text("version: 0\ntopic_id: garbage\n")
    unwritable = _log_of(tmp_path, "b", 3)
    _no_space_for_metadata(monkeypatch, unwritable)
    write_partition_metadata(_log_of(tmp_path, "c", 4), ids["c"])
    shard, _handler = _shard(node, tmp_path, {t: TopicEntry(1, {}, i) for t, i in ids.items()})
    stats = _stats(node, shard)
    assert "a-0" not in stats["partitions"]
    assert (damaged / PARTITION_METADATA_FILE).read_text() == "version: 0\ntopic_id: garbage\n"
    assert len(list(damaged.glob("*.log"))) == 1, "its records are kept"
    assert stats["partitions"]["b-0"][2] == 3
    assert read_partition_metadata(unwritable) is None
    assert stats["partitions"]["c-0"][2] == 4
    assert stats["dead_namesakes_deleted"] == 0
    # space again: housekeeping writes the file (meanwhile a namesake would take the
    # directory, without its id, for its own)
    monkeypatch.undo()
    wait_for(lambda: read_partition_metadata(unwritable) == ids["b"], "b-0's id written")


def _adopted(topic_id: str) -> ReplicaStateRow:
    return _role(topic_id)._replace(topic_id_adopted=True)


def test_a_role_of_an_adopted_id_rewrites_the_directorys_id_and_keeps_its_records(
        node: Node, tmp_path: Path) -> None:
    """An older version rewrote the topic's znode without its id; the controller gave it
    another, marked adopted. The directory holding the first id is the topic's: its
    file is rewritten, its records served, nothing deleted (as Kafka's ZooKeeper mode)."""
    first, late = new_topic_id(), new_topic_id()
    _old_log(tmp_path, first)
    shard, manager = _shard(node, tmp_path, {})
    _roles(node, shard, manager, _adopted(late))
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"][2] == 3, "the topic's records were deleted"
    assert stats["dead_namesakes_deleted"] == 0
    assert read_partition_metadata(tmp_path / "t-0") == late


def test_a_restored_role_of_an_adopted_id_keeps_the_records(
        node: Node, tmp_path: Path) -> None:
    first, late = new_topic_id(), new_topic_id()
    _old_log(tmp_path, first)
    shard, manager = _shard(node, tmp_path, {})
    node.tell(shard, RestoreRoles(1, "process 1 restarted",
                                  [RestoredRoleRow(_adopted(late), None)]),
              sender=manager.name)
    [answer] = wait_for(lambda: [m for n, m in node.ask(manager, GetStats())
                                 if n == "RolesRestored"], "the restore answered")
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"][2] == 3 and stats["dead_namesakes_deleted"] == 0
    assert read_partition_metadata(tmp_path / "t-0") == late
    # read back: it answers for a LeaderAndIsr the restore settles
    assert [tuple(r) for r in RolesRestored(*answer).topic_ids_confirmed] == [("t", 0, late)]


def test_a_log_open_under_the_first_id_takes_the_adopted_one(
        node: Node, tmp_path: Path) -> None:
    """Open under the topic's first id (a role of before the rewrite), then given the
    adopted one: the open log is kept, its file rewritten."""
    first, late = new_topic_id(), new_topic_id()
    _old_log(tmp_path, first)
    shard, manager = _shard(node, tmp_path, {})
    _roles(node, shard, manager, _role(first), _adopted(late)._replace(leader_epoch=5))
    stats = _stats(node, shard)
    assert stats["partitions"]["t-0"][2] == 3 and stats["dead_namesakes_deleted"] == 0
    assert read_partition_metadata(tmp_path / "t-0") == late


def _answers(node: Node, manager: Any) -> list[BecameLeaderOrFollower]:
    """The shard's BecameLeaderOrFollower answers, as the recorder saw them."""
    return [BecameLeaderOrFollower(*m) for n, m in node.ask(manager, GetStats())
            if n == "BecameLeaderOrFollower"]


def test_an_adopted_id_is_confirmed_only_once_its_file_holds_it(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A role's answer names the partitions of an adopted id whose ``partition.metadata``
    reads back holding it (the controller clears the adoption once every replica has).
    A write that failed left the first id there: nothing is confirmed until housekeeping
    has written it and a role is answered again."""
    first, late = new_topic_id(), new_topic_id()
    directory = _old_log(tmp_path, first)
    _no_space_for_metadata(monkeypatch, directory)
    shard, manager = _shard(node, tmp_path, {})
    _roles(node, shard, manager, _adopted(late))
    [answer] = _answers(node, manager)
    assert [tuple(r) for r in answer.rows] == [("t", 0, NONE)]
    assert list(answer.topic_ids_confirmed) == []
    assert read_partition_metadata(directory) == first
    monkeypatch.undo()
    wait_for(lambda: read_partition_metadata(directory) == late, "the id written again")
    node.tell(shard, BecomeLeaderOrFollower(2, [_adopted(late)]), sender=manager.name)
    wait_for(lambda: len(_answers(node, manager)) == 2, "the resend answered")
    assert [tuple(r) for r in _answers(node, manager)[1].topic_ids_confirmed] == [
        ("t", 0, late)]


def test_an_id_not_adopted_is_never_confirmed(node: Node, tmp_path: Path) -> None:
    topic_id = new_topic_id()
    _old_log(tmp_path, topic_id)
    shard, manager = _shard(node, tmp_path, {})
    _roles(node, shard, manager, _role(topic_id))
    [answer] = _answers(node, manager)
    assert list(answer.topic_ids_confirmed) == []
    assert _stats(node, shard)["partitions"]["t-0"][2] == 3
