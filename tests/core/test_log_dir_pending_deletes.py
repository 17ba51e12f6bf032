"""Deletes left pending on disk: a deleted partition's directory is marked
(``delete-pending`` inside it, or a ``delete-pending.<hash>`` record in the log dir)
before it is renamed aside. ``LogDir.open`` completes such a delete (and forgets the
partition's offsets, on disk at once); one whose directory still cannot be set aside is
pending, and never listed as a partition. A dir without marks opens as it always did.

The failures are real where they can be (``chattr +i``), else injected at the system
calls (tests/fixtures/immutable.py), and both ways always.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from actors.core.checkpoint import read_offset_checkpoint
from actors.core.log_dir import (
    DELETE_PENDING_MARKER,
    DELETE_RECORD_PREFIX,
    LogDir,
    delete_record_name,
)
from actors.core.partition_log import LogConfig
from actors.core.record_batch import build_batch
from tests.fixtures.immutable import immutable_flags

CHECKPOINTS = ("replication-offset-checkpoint", "recovery-point-offset-checkpoint",
               "log-start-offset-checkpoint")


@pytest.fixture(params=["chattr", "injected"])
def immutable(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
              tmp_path: Path) -> Iterator[Callable[[Path, bool], None]]:
    with immutable_flags(monkeypatch, tmp_path, injected=request.param == "injected") as flag:
        yield flag


def _data_dir(tmp_path: Path) -> Path:
    """A log dir with partitions t-0 (one record) and u-0, closed cleanly."""
    path = tmp_path / "data"
    log_dir = LogDir.open(path)
    logs = [log_dir.open_partition(t, 0, LogConfig(), 0) for t in ("t", "u")]
    logs[0].append_as_leader(build_batch([b"old"]), 0, 0)
    logs[0].update_high_watermark(1)
    log_dir.close(logs)
    assert read_offset_checkpoint(path / CHECKPOINTS[0]) == {("t", 0): 1, ("u", 0): 0}
    return path


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in path.rglob("*")}


def test_a_dir_without_marks_opens_as_before(tmp_path: Path) -> None:
    path = _data_dir(tmp_path)
    (path / "notes-1").write_bytes(b"")  # a file named like a partition is none
    before = {k: v for k, v in _tree(path).items() if k != ".kafka_cleanshutdown"}
    log_dir = LogDir.open(path)
    assert log_dir.partitions() == [("t", 0), ("u", 0)]
    assert log_dir.pending_deletes == set()
    found = log_dir.deletes_at_open
    assert (found.completed, found.pending, found.damaged) == ([], {}, [])
    assert log_dir.recovery_points == {("t", 0): 1, ("u", 0): 0}
    assert _tree(path) == before, "nothing but the clean-shutdown marker changed"


@pytest.mark.parametrize("where", ["marker", "record"])
def test_a_marked_directory_is_deleted_at_open_and_its_offsets_forgotten(
        tmp_path: Path, where: str) -> None:
    path = _data_dir(tmp_path)
    if where == "marker":
        (path / "t-0" / DELETE_PENDING_MARKER).write_bytes(b"")
    else:
        (path / delete_record_name("t", 0)).write_text("t-0\n")
    log_dir = LogDir.open(path)
    assert not list(path.glob("t-0*")), "the deleted directory is still there"
    assert not list(path.glob(DELETE_RECORD_PREFIX + "*"))
    assert log_dir.deletes_at_open.completed == [("t", 0)]
    assert log_dir.partitions() == [("u", 0)] and log_dir.pending_deletes == set()
    for name in CHECKPOINTS:
        assert ("t", 0) not in read_offset_checkpoint(path / name), name
    assert ("t", 0) not in log_dir.recovery_points
    # a namesake created now starts empty, at offset 0
    log = log_dir.open_partition("t", 0, LogConfig(), 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)


def test_a_record_whose_directory_went_already_is_removed(tmp_path: Path) -> None:
    """The directory was set aside, then the process died before the record went."""
    path = _data_dir(tmp_path)
    (path / delete_record_name("gone", 3)).write_text("gone-3\n")
    log_dir = LogDir.open(path)
    assert not list(path.glob(DELETE_RECORD_PREFIX + "*"))
    assert log_dir.partitions() == [("t", 0), ("u", 0)]


def test_a_damaged_record_is_reported_and_kept(tmp_path: Path) -> None:
    path = _data_dir(tmp_path)
    (path / (DELETE_RECORD_PREFIX + "x")).write_text("no partition\n")
    log_dir = LogDir.open(path)
    assert log_dir.deletes_at_open.damaged == [DELETE_RECORD_PREFIX + "x"]
    assert (path / (DELETE_RECORD_PREFIX + "x")).exists()
    assert log_dir.partitions() == [("t", 0), ("u", 0)]


def test_a_record_not_under_its_own_name_deletes_nothing(tmp_path: Path) -> None:
    """A record is taken only under the name its content hashes to: a copy (or a
    damaged one) naming a live partition, or a path out of the log dir, is kept and
    reported, and the partition it names is left alone."""
    path = _data_dir(tmp_path)
    (path / delete_record_name("gone", 3)).write_text("t-0\n")
    (path / delete_record_name("../x", 0)).write_text("../x-0\n")
    log_dir = LogDir.open(path)
    assert sorted(log_dir.deletes_at_open.damaged) == sorted(
        [delete_record_name("gone", 3), delete_record_name("../x", 0)])
    assert log_dir.partitions() == [("t", 0), ("u", 0)]
    assert (path / "t-0").is_dir() and log_dir.deletes_at_open.completed == []


def test_damaged_records_are_reported_in_name_order_whatever_the_listing_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log lines at start name damaged records in the same order on every filesystem
    (ext4 lists a directory in hash order, tmpfs newest first): here the listing is
    made to come back in reverse name order, as a filesystem may."""
    path = _data_dir(tmp_path)
    names = [DELETE_RECORD_PREFIX + x for x in ("a", "b", "c", "d")]
    for name in reversed(names):
        (path / name).write_text("no partition\n")
    real = os.listdir
    monkeypatch.setattr("actors.core.log_dir.os.listdir",
                        lambda p: sorted(real(p), reverse=True))
    log_dir = LogDir.open(path)
    assert log_dir.deletes_at_open.damaged == names


def test_a_record_unlinked_but_not_synced_is_synced_before_the_delete_is_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's unlink went through and the directory's fsync failed: the next try
    finds no record, and must still sync the directory before saying the delete is
    done (a power loss would bring the record back, over a namesake's directory)."""
    import actors.core.log_dir as log_dir_module

    path = _data_dir(tmp_path)
    log_dir = LogDir.open(path)
    (path / delete_record_name("t", 0)).write_text("t-0\n")
    synced: list[Path] = []

    def failing(p: Path) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_dir_module, "fsync_dir", failing)
    with pytest.raises(OSError):
        log_dir.clear_delete_record("t", 0)
    assert not (path / delete_record_name("t", 0)).exists()
    monkeypatch.setattr(log_dir_module, "fsync_dir", synced.append)
    log_dir.clear_delete_record("t", 0)
    assert synced == [path], "done without the directory synced"
    log_dir.clear_delete_record("t", 0)
    assert synced == [path], "a clean delete path syncs again"


def test_a_marked_directory_that_cannot_be_set_aside_stays_pending(
        tmp_path: Path, immutable: Callable[[Path, bool], None]) -> None:
    path = _data_dir(tmp_path)
    (path / "t-0" / DELETE_PENDING_MARKER).write_bytes(b"")
    (path / ".kafka_cleanshutdown").unlink()
    immutable(path, True)  # no entry of the log dir can be renamed
    log_dir = LogDir.open(path)
    assert log_dir.pending_deletes == {("t", 0)}
    assert list(log_dir.deletes_at_open.pending) == [("t", 0)]
    assert log_dir.partitions() == [("u", 0)], "a deleted partition is listed"
    assert (path / "t-0").is_dir()
    immutable(path, False)
    # read_only (processes 1..) sees it pending and changes nothing
    before = _tree(path)
    assert LogDir.read_only(path, False).pending_deletes == {("t", 0)}
    assert _tree(path) == before
    # the next open completes it
    log_dir = LogDir.open(path)
    assert log_dir.pending_deletes == set() and not (path / "t-0").exists()


def test_the_mark_goes_in_the_directory_else_in_the_log_dir(
        tmp_path: Path, immutable: Callable[[Path, bool], None]) -> None:
    path = _data_dir(tmp_path)
    log_dir = LogDir.open(path)
    assert log_dir.mark_delete_pending("t", 0) is False
    assert (path / "t-0" / DELETE_PENDING_MARKER).exists()
    assert not list(path.glob(DELETE_RECORD_PREFIX + "*"))
    immutable(path / "u-0", True)  # nothing can be written in u-0
    assert log_dir.mark_delete_pending("u", 0) is True
    [record] = path.glob(DELETE_RECORD_PREFIX + "*")
    assert record.read_text() == "u-0\n"
    assert log_dir.mark_delete_pending("none", 0) is False, "no directory: nothing to mark"
    immutable(path, True)
    with pytest.raises(OSError):
        log_dir.clear_delete_record("u", 0)
    immutable(path / "u-0", False)
    immutable(path, False)
    log_dir.clear_delete_record("u", 0)
    assert not record.exists()
