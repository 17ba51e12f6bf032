"""A partition's delete (DropPartitions) that fails, in a PartitionShard.

The directory is renamed aside (a ``-delete`` name of its own) before the log is
forgotten. When that rename fails, the partition is reported failed, stops being
served, is remembered as not deleted yet and the shard tries again: a namesake
created meanwhile does not open the deleted one's records, and once the rename
can be done the directory goes. When only the removal of the renamed directory
fails, the delete is done (nothing opens a ``-delete`` directory), the shard
removes it later, and it is in the way of no later delete of the name.

The delete is marked on disk before the rename (in the directory, or in the log dir
when the directory refuses it): a restart of the shard's process (a new shard over
the same dir, opened as a broker's start or a restarted process's) with the rename
still failing serves none of the deleted data, a namesake created meanwhile opens
empty once the directory goes, and the mark alone on a healthy directory completes
the delete at start.

The failures are real where they can be: an immutable inode (``chattr +i``, which
root obeys too) cannot be renamed or unlinked; each test also runs with the same
failures injected at the system calls (tests/fixtures/immutable.py), which work
everywhere.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

import actors.core.log_dir as log_dir_module
from actors.core.log_dir import DELETE_PENDING_MARKER, DELETE_RECORD_PREFIX, LogDir
from actors.core.partition_log import PartitionLog
from actors.core.partition_state import PartitionState
from actors.core.record_batch import build_batch
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.immutable import immutable_flags
from tests.fixtures.waiting import wait_for
from wire.admin_messages import UpdatePartitionConfigs
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendRow,
    DropPartitions,
    GetStats,
    OpenPartitionRow,
    OpenPartitions,
    PartitionChanged,
    ShardDone,
    TopicEntry,
    TopicPartition,
    WatchPartition,
)
from wire.cluster_messages import BecameLeaderOrFollower, BecomeLeaderOrFollower, ReplicaStateRow
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)


class Recorder(Actor):
    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(AppendDone, ShardDone, BecameLeaderOrFollower)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


@pytest.fixture(params=["chattr", "injected"])
def immutable(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
              tmp_path: Path) -> Iterator[Callable[[Path, bool], None]]:
    """The real flag where it can be set (else injected failures), and injected ones."""
    with immutable_flags(monkeypatch, tmp_path, injected=request.param == "injected") as flag:
        yield flag


def _got(node: Node, recorder: Any, kind: str) -> list[Any]:
    return [fields for name, fields in node.ask(recorder, GetStats()) if name == kind]


def _shard(node: Node, tmp_path: Path) -> tuple[Any, Any]:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics={"t": TopicEntry(1, {})}, broker_id=1,
                       clock=node.clock)
    handler = node.spawn(Recorder, "handler")
    node.tell(shard, Append(1, 1, 30_000, [AppendRow("t", 0, build_batch([b"old"]))]),
              sender=handler.name)
    wait_for(lambda: _got(node, handler, "AppendDone"), "the first append's answer")
    return shard, handler


def _ask(node: Node, shard: Any, handler: Any, msg: Any) -> Any:
    node.tell(shard, msg, sender=handler.name)
    [done] = wait_for(lambda: [d for d in _got(node, handler, "ShardDone") if d[0] == msg.req_id],
                      f"the answer to {type(msg).__name__} {msg.req_id}")
    return done


def _stats(node: Node, shard: Any) -> dict[str, Any]:
    stats: dict[str, Any] = node.ask(shard, GetStats())
    return stats


def _partitions(node: Node, shard: Any) -> dict[str, list[int]]:
    stats: dict[str, Any] = node.ask(shard, GetStats())
    return dict(stats["partitions"])


def test_a_delete_whose_rename_fails_is_reported_and_done_once_it_can_be(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    shard, handler = _shard(node, tmp_path)
    immutable(tmp_path / "t-0")
    done = _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    assert done[2] == [["t", 0]] and "t-0" in done[1], done
    assert (tmp_path / "t-0").is_dir()
    assert "t-0" not in _partitions(node, shard), "a deleted partition is still served"
    # a namesake created meanwhile must not open the deleted one's records
    again = _ask(node, shard, handler, OpenPartitions(3, [OpenPartitionRow("t", 0, {})]))
    assert again[2] == [["t", 0]], again
    assert "t-0" not in _partitions(node, shard)
    immutable(tmp_path / "t-0", False)
    # the shard tries again by itself, and then opens the namesake it was asked for
    wait_for(lambda: "t-0" in _partitions(node, shard), "the namesake opened", timeout=10)
    assert _partitions(node, shard)["t-0"] == [0, 0, 0], "the namesake starts empty"
    assert [p.name for p in tmp_path.glob("t-0*")] == ["t-0"]
    node.tell(shard, Append(5, 1, 30_000, [AppendRow("t", 0, build_batch([b"new"]))]),
              sender=handler.name)
    [done] = wait_for(lambda: [d for d in _got(node, handler, "AppendDone") if d[0] == 5],
                      "the namesake's append answered")
    assert [row[2:4] for row in done[1]] == [[NONE, 0]], done
    created = _ask(node, shard, handler, OpenPartitions(4, [OpenPartitionRow("t", 0, {})]))
    assert created[1:] == ["", []]


def test_a_namesake_asked_for_during_a_failed_delete_is_opened_with_its_later_configs(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """The namesake's open is refused while the deleted one's directory is there; an
    AlterConfigs of its topic then (UpdatePartitionConfigs) is not lost: the
    housekeeping opens it with the new configs."""
    shard, handler = _shard(node, tmp_path)
    immutable(tmp_path / "t-0")
    _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    again = _ask(node, shard, handler, OpenPartitions(3, [OpenPartitionRow("t", 0, {})]))
    assert again[2] == [["t", 0]], again
    altered = _ask(node, shard, handler, UpdatePartitionConfigs(4, [OpenPartitionRow(
        "t", 0, {"retention.ms": "12345"})]))
    assert altered[1:] == ["", []], altered
    immutable(tmp_path / "t-0", False)
    wait_for(lambda: "t-0" in _partitions(node, shard), "the namesake opened", timeout=10)
    actor = node.actors[shard.name]
    assert actor.partitions[("t", 0)].log.config.retention_ms == 12345
    assert actor.hosted[("t", 0)].configs == {"retention.ms": "12345"}


def test_a_namesake_asked_for_during_a_failed_delete_is_not_opened_if_deleted_again(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    shard, handler = _shard(node, tmp_path)
    immutable(tmp_path / "t-0")
    _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    again = _ask(node, shard, handler, OpenPartitions(3, [OpenPartitionRow("t", 0, {})]))
    assert again[2] == [["t", 0]], again
    # the namesake is deleted too before the directory could go
    dropped = _ask(node, shard, handler, DropPartitions(4, [TopicPartition("t", 0)]))
    assert dropped[2] == [["t", 0]], dropped
    immutable(tmp_path / "t-0", False)
    wait_for(lambda: not list(tmp_path.glob("t-0*")), "the directory gone", timeout=10)
    node.ask(shard, GetStats())  # a turn after the housekeeping's
    assert "t-0" not in _partitions(node, shard)


def test_a_delete_whose_close_fails_after_the_rename_is_done_and_its_directory_removed_later(
        node: Node, tmp_path: Path, immutable: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    shard, handler = _shard(node, tmp_path)
    [segment] = (tmp_path / "t-0").glob("*.log")
    immutable(segment)  # the renamed directory's removal fails too
    real = PartitionLog.close_without_flush

    def fails_once(log: PartitionLog) -> None:
        monkeypatch.setattr(PartitionLog, "close_without_flush", real)
        raise OSError(errno.EIO, "closing fails once")

    monkeypatch.setattr(PartitionLog, "close_without_flush", fails_once)
    done = _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    assert done[1:] == ["", []], "renamed aside: the delete is done"
    [left] = list(tmp_path.glob("t-0*"))
    assert left.name.endswith("-delete")
    immutable(left / segment.name, False)
    # the shard removes what it left
    wait_for(lambda: not list(tmp_path.glob("t-0*")), "the renamed directory gone", timeout=10)


def test_a_renamed_directory_left_by_a_failed_removal_is_in_no_later_delete_s_way(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    shard, handler = _shard(node, tmp_path)
    [segment] = (tmp_path / "t-0").glob("*.log")
    immutable(segment)  # the rename works, the removal of the renamed directory does not
    done = _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    assert done[1:] == ["", []], done
    assert not (tmp_path / "t-0").exists()
    [left] = list(tmp_path.glob("t-0*"))
    assert left.name.endswith("-delete")
    # a namesake, created and deleted: its rename is not stopped by the one left
    created = _ask(node, shard, handler, OpenPartitions(3, [OpenPartitionRow("t", 0, {})]))
    assert created[1:] == ["", []] and _partitions(node, shard)["t-0"] == [0, 0, 0]
    dropped = _ask(node, shard, handler, DropPartitions(4, [TopicPartition("t", 0)]))
    assert dropped[1:] == ["", []], dropped
    assert list(tmp_path.glob("t-0*")) == [left]
    assert _stats(node, shard)["set_aside_left"] == 1
    immutable(left / segment.name, False)
    # the shard removes what it left
    wait_for(lambda: not list(tmp_path.glob("t-0*")), "the renamed directory gone", timeout=10)
    assert _stats(node, shard)["set_aside_left"] == 0


def test_deletes_that_still_fail_are_counted_and_warned_of_once_a_minute(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """Each housekeeping try of a failed delete fails again (at debug); the shard warns
    of them once a minute, with the count of tries, and its stats say how many
    partitions are undeleted."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        shard, handler = _shard(node, tmp_path)
        immutable(tmp_path / "t-0")
        _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
        assert _stats(node, shard)["undeleted"] == 1
        wait_for(lambda: _stats(node, shard)["failed_delete_tries"] >= 3,
                 "three housekeeping tries", timeout=10)
        warned = [line for line in lines if "cannot be set aside (t-0)" in line]
        assert len(warned) == 1, warned
        assert "1 tries (1 since the last warning)" in warned[0], warned
        immutable(tmp_path / "t-0", False)
        wait_for(lambda: _stats(node, shard)["undeleted"] == 0, "the delete done", timeout=10)
        # none left: a later failed delete is warned of at its first try, not a minute on
        _ask(node, shard, handler, OpenPartitions(3, [OpenPartitionRow("u", 0, {})]))
        immutable(tmp_path / "u-0")
        _ask(node, shard, handler, DropPartitions(4, [TopicPartition("u", 0)]))
        wait_for(lambda: [line for line in lines if "cannot be set aside (u-0)" in line],
                 "the warning of the second failed delete", timeout=10)
        immutable(tmp_path / "u-0", False)
        wait_for(lambda: _stats(node, shard)["undeleted"] == 0, "the delete done", timeout=10)
    finally:
        logger.remove(sink)


class Watcher(Actor):
    """Stands in for a purgatory shard watching a partition."""

    def setup(self) -> None:
        self.changes = 0

    @handles(PartitionChanged)
    def on_changed(self, _msg: PartitionChanged) -> None:
        self.changes += 1

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return self.changes


def test_a_delete_whose_watchers_cannot_be_told_leaves_none_behind(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Telling the partition's watchers it is gone fails (its status cannot be built):
    the delete is answered failed and tried again, and no watcher of it is left (a
    namesake opened later would tell them of another partition's changes)."""
    shard, handler = _shard(node, tmp_path)
    watcher = node.spawn(Watcher, "watcher")
    node.tell(shard, WatchPartition("t", 0, 0, True), sender=watcher.name)
    wait_for(lambda: node.ask(watcher, GetStats()) >= 1, "the watcher told of t-0")
    actor = node.actors[shard.name]
    assert ("t", 0) in actor.watchers

    def fails(*_args: Any) -> Any:
        raise RuntimeError("the partition's status cannot be built")

    monkeypatch.setattr(PartitionState, "gone_status", staticmethod(fails))
    done = _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    assert done[2] == [["t", 0]], done
    assert ("t", 0) not in actor.watchers, "a watcher of the deleted partition is left"
    monkeypatch.undo()
    wait_for(lambda: not (tmp_path / "t-0").exists(), "the delete done later", timeout=10)


def test_a_partition_opened_again_has_its_refusals_warned_of_again(
        node: Node, tmp_path: Path) -> None:
    """A refusal is warned of once per partition and error; a namesake opened after the
    partition's delete is a new log, whose refusals are warned of again."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        shard, handler = _shard(node, tmp_path)
        corrupt = bytearray(build_batch([b"x"]))
        corrupt[-1] ^= 0xFF  # its CRC no longer matches

        def refuse(req_id: int) -> None:
            node.tell(shard, Append(req_id, 1, 30_000, [AppendRow("t", 0, bytes(corrupt))]),
                      sender=handler.name)
            [done] = wait_for(lambda: [d for d in _got(node, handler, "AppendDone")
                                       if d[0] == req_id], f"the answer to {req_id}")
            assert done[1][0][2] == int(ErrorCode.CORRUPT_MESSAGE), done

        def warned() -> int:
            return len([line for line in lines if "refused a batch for t-0" in line])

        refuse(10)
        refuse(11)
        assert warned() == 1
        _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
        _ask(node, shard, handler, OpenPartitions(3, [OpenPartitionRow("t", 0, {})]))
        refuse(12)
        assert warned() == 2, lines
    finally:
        logger.remove(sink)


def _restart(node: Node, tmp_path: Path, topics: dict[str, TopicEntry], how: str) -> Any:
    """The shard's process restarts over the same dir, with its memory gone: a new shard
    in its place, given the topics the store holds then. ``broker``: the whole broker
    restarts (a new LogManager, LogDir.open); ``process``: the shard's process alone
    (num.processes > 1: LogDir.read_only, the LogManager of process 0 runs on)."""
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    assert node.stop_actor(topo.shard(0).name)
    if how == "broker":
        assert node.stop_actor(topo.log_manager.name)
        log_dir = LogDir.open(tmp_path)
        node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
                   clock=node.clock)
    else:
        log_dir = LogDir.read_only(tmp_path, False)
    return node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                      log_dir=log_dir, topics=topics, broker_id=1, clock=node.clock)


def _records(tmp_path: Path) -> list[str]:
    return [p.name for p in tmp_path.glob(DELETE_RECORD_PREFIX + "*")]


@pytest.mark.parametrize("how", ["broker", "process"])
def test_a_delete_whose_rename_fails_stays_a_delete_across_a_restart(
        node: Node, tmp_path: Path, immutable: Any, how: str) -> None:
    """(a) The rename fails (the directory refuses the mark too: it goes to the log dir),
    the process restarts with it still failing: the partition is not served, its
    directory is known as undeleted and tried again, and goes once it can."""
    shard, handler = _shard(node, tmp_path)
    immutable(tmp_path / "t-0")
    done = _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    assert done[2] == [["t", 0]], done
    shard = _restart(node, tmp_path, {}, how)
    stats = _stats(node, shard)
    assert "t-0" not in dict(stats["partitions"]), "a deleted partition is served"
    assert stats["undeleted"] == 1, "the restarted shard forgot the pending delete"
    assert len(_records(tmp_path)) == 1, "the mark is not in the log dir"
    # asked for it (a namesake's OpenPartitions), it does not open the deleted data
    again = _ask(node, shard, handler, OpenPartitions(3, [OpenPartitionRow("t", 0, {})]))
    assert again[2] == [["t", 0]], again
    dropped = _ask(node, shard, handler, DropPartitions(4, [TopicPartition("t", 0)]))
    assert dropped[2] == [["t", 0]], dropped
    immutable(tmp_path / "t-0", False)
    wait_for(lambda: not list(tmp_path.glob("t-0*")), "the deleted directory gone", timeout=10)
    wait_for(lambda: _stats(node, shard)["undeleted"] == 0, "the delete done", timeout=10)
    assert _records(tmp_path) == []
    assert "t-0" not in _partitions(node, shard)


@pytest.mark.parametrize("how", ["broker", "process"])
def test_a_namesake_created_during_a_failed_delete_opens_empty_after_a_restart(
        node: Node, tmp_path: Path, immutable: Any, how: str) -> None:
    """(b) A namesake created while the deleted one's directory could not go (its topic is
    in the store at the restart): the restarted shard does not open it on the deleted
    one's directory, and opens it empty once that goes."""
    shard, handler = _shard(node, tmp_path)
    immutable(tmp_path / "t-0")
    _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    again = _ask(node, shard, handler, OpenPartitions(3, [OpenPartitionRow("t", 0, {})]))
    assert again[2] == [["t", 0]], again
    shard = _restart(node, tmp_path, {"t": TopicEntry(1, {"retention.ms": "12345"})}, how)
    assert "t-0" not in _partitions(node, shard), "the namesake opened the deleted data"
    immutable(tmp_path / "t-0", False)
    wait_for(lambda: "t-0" in _partitions(node, shard), "the namesake opened", timeout=10)
    assert _partitions(node, shard)["t-0"] == [0, 0, 0], "the namesake starts empty"
    assert node.actors[shard.name].partitions[("t", 0)].log.config.retention_ms == 12345
    assert _records(tmp_path) == []
    assert [p.name for p in tmp_path.glob("t-0*")] == ["t-0"]
    assert not (tmp_path / "t-0" / DELETE_PENDING_MARKER).exists()
    node.tell(shard, Append(5, 1, 30_000, [AppendRow("t", 0, build_batch([b"new"]))]),
              sender=handler.name)
    [done] = wait_for(lambda: [d for d in _got(node, handler, "AppendDone") if d[0] == 5],
                      "the namesake's append answered")
    assert [row[2:4] for row in done[1]] == [[NONE, 0]], done


@pytest.mark.parametrize("how", ["broker", "process"])
def test_the_mark_alone_on_a_healthy_directory_completes_the_delete_at_start(
        node: Node, tmp_path: Path, how: str) -> None:
    """(c) The process died between the mark and the rename: the next start deletes the
    directory, and a namesake in the store opens empty."""
    shard, _handler = _shard(node, tmp_path)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    assert node.stop_actor(topo.shard(0).name)
    (tmp_path / "t-0" / DELETE_PENDING_MARKER).write_bytes(b"")
    shard = _restart(node, tmp_path, {"t": TopicEntry(1, {})}, how)
    assert _partitions(node, shard)["t-0"] == [0, 0, 0], "the deleted data was opened"
    assert not (tmp_path / "t-0" / DELETE_PENDING_MARKER).exists()
    assert [p.name for p in tmp_path.glob("t-0*")] == ["t-0"]


def test_a_delete_marked_in_its_directory_survives_a_restart_whose_rename_fails(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """The log dir refuses renames (the directory itself takes the mark): the restarted
    process does not open the directory, and deletes it once the log dir allows."""
    shard, handler = _shard(node, tmp_path)
    immutable(tmp_path)
    done = _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    assert done[2] == [["t", 0]], done
    shard = _restart(node, tmp_path, {"t": TopicEntry(1, {})}, "process")
    assert "t-0" not in _partitions(node, shard), "the deleted data was opened"
    assert (tmp_path / "t-0" / DELETE_PENDING_MARKER).exists()
    immutable(tmp_path, False)
    wait_for(lambda: "t-0" in _partitions(node, shard), "the namesake opened", timeout=10)
    assert _partitions(node, shard)["t-0"] == [0, 0, 0], "the namesake starts empty"


def test_a_delete_that_cannot_be_marked_says_so_once_and_goes_on(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="ERROR")
    try:
        shard, handler = _shard(node, tmp_path)
        immutable(tmp_path / "t-0")
        immutable(tmp_path)
        for req_id in (2, 3):
            done = _ask(node, shard, handler, DropPartitions(req_id, [TopicPartition("t", 0)]))
            assert done[2] == [["t", 0]], done
        assert len([line for line in lines if "could not be marked" in line]) == 1, lines
        assert _stats(node, shard)["undeleted"] == 1
        immutable(tmp_path / "t-0", False)
        immutable(tmp_path, False)
        wait_for(lambda: not list(tmp_path.glob("t-0*")), "the delete done", timeout=10)
    finally:
        logger.remove(sink)


def test_a_delete_is_done_only_once_its_record_in_the_log_dir_is_gone(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """The directory went, its record in the log dir cannot be removed yet: a namesake
    is not opened meanwhile (the next start would delete its directory as the deleted
    one's), and is once the record goes."""
    shard, handler = _shard(node, tmp_path)
    immutable(tmp_path / "t-0")
    _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    [record] = _records(tmp_path)
    immutable(tmp_path / record)
    immutable(tmp_path / "t-0", False)
    wait_for(lambda: not (tmp_path / "t-0").exists(), "the directory gone", timeout=10)
    again = _ask(node, shard, handler, OpenPartitions(3, [OpenPartitionRow("t", 0, {})]))
    assert again[2] == [["t", 0]], "a namesake opened while the record is there"
    assert _stats(node, shard)["undeleted"] == 1
    immutable(tmp_path / record, False)
    wait_for(lambda: "t-0" in _partitions(node, shard), "the namesake opened", timeout=10)
    assert _records(tmp_path) == [] and _partitions(node, shard)["t-0"] == [0, 0, 0]


def test_a_role_given_after_a_restart_does_not_open_the_deleted_directory(
        node: Node, tmp_path: Path, immutable: Any) -> None:
    """A cluster's node: the controller gives a namesake's role (LeaderAndIsr) to the
    restarted process while the deleted directory is still there: refused
    (KAFKA_STORAGE_ERROR), kept, and taken on an empty log once the directory is gone
    (a resend of it then is a role held already)."""
    shard, handler = _shard(node, tmp_path)
    immutable(tmp_path / "t-0")
    _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    shard = _restart(node, tmp_path, {}, "process")
    role = ReplicaStateRow("t", 0, 1, 5, [1], [1], 5, True, {})

    def answers(req_id: int) -> list[list[Any]]:
        return [list(d[1]) for d in _got(node, handler, "BecameLeaderOrFollower")
                if d[0] == req_id]

    def become(req_id: int) -> list[list[Any]]:
        node.tell(shard, BecomeLeaderOrFollower(req_id, [role]), sender=handler.name)
        [done] = wait_for(lambda: answers(req_id), f"the answer to role {req_id}")
        return done

    node.tell(shard, BecomeLeaderOrFollower(10, [role]), sender=handler.name)
    # (opened, the deleted directory's log may also crash the shard: it refuses writes)
    wait_for(lambda: answers(10) or "t-0" in _partitions(node, shard), "the role applied")
    assert "t-0" not in _partitions(node, shard), "the deleted data was opened"
    assert answers(10) == [[["t", 0, int(ErrorCode.KAFKA_STORAGE_ERROR)]]]
    immutable(tmp_path / "t-0", False)
    wait_for(lambda: "t-0" in _partitions(node, shard), "the kept role taken", timeout=10)
    assert _partitions(node, shard)["t-0"] == [0, 0, 0], "the namesake starts empty"
    assert _stats(node, shard)["undeleted"] == 0
    assert become(11) == [["t", 0, NONE]]


def test_a_clean_delete_costs_one_small_file_write(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rename works: the marker in the directory is the one extra write (it goes
    with the directory), and no record is written in the log dir."""
    shard, handler = _shard(node, tmp_path)
    written: list[Path] = []
    real = log_dir_module.write_atomically

    def counted(path: Path, data: bytes) -> None:
        written.append(path)
        real(path, data)

    monkeypatch.setattr(log_dir_module, "write_atomically", counted)
    done = _ask(node, shard, handler, DropPartitions(2, [TopicPartition("t", 0)]))
    assert done[1:] == ["", []], done
    assert written == [tmp_path / "t-0" / DELETE_PENDING_MARKER]
    assert not list(tmp_path.glob("t-0*")) and _records(tmp_path) == []
