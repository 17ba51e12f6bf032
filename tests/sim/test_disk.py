"""The simulated disk: a crash keeps what was fsynced, sometimes a torn tail of the rest,
and the real partition log recovers from what is left."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from actors.core.partition_log import LogConfig, PartitionLog
from actors.sim.clients import record_batch
from actors.sim.disk import SimDisk
from actors.sim.invariants import read_log

_REAL_OS = (os.unlink, os.remove, os.rename, os.replace)


class _Shard:
    def __init__(self, log: PartitionLog) -> None:
        self.partitions = {("t", 0): type("S", (), {"log": log})()}


def test_fsync_marks_durable_and_a_crash_keeps_only_that(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    path = part / "00000000000000000000.log"
    with SimDisk(tmp_path, random.Random(1), torn_ratio=0.0) as disk:
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        os.write(fd, b"a" * 100)
        os.fsync(fd)
        os.write(fd, b"b" * 50)
        os.close(fd)
        disk.crash(tmp_path, [])
    assert path.read_bytes() == b"a" * 100
    assert disk.stats.bytes_lost == 50
    assert os.fsync is not disk._fsync  # the real fsync is back


def test_a_torn_tail_keeps_a_prefix_of_the_unsynced_bytes(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    sizes = set()
    for seed in range(20):
        path = part / f"{seed}.log"
        path.write_bytes(b"")
        with SimDisk(tmp_path, random.Random(seed), torn_ratio=1.0) as disk:
            fd = os.open(path, os.O_RDWR)
            os.write(fd, b"a" * 10)
            os.fsync(fd)
            os.write(fd, b"b" * 90)
            os.close(fd)
            disk.crash(tmp_path, [])
        data = path.read_bytes()
        assert data.startswith(b"a" * 10) and set(data[10:]) <= {ord("b")}
        sizes.add(len(data))
        path.unlink()
    assert len(sizes) > 5  # tails of many lengths, never past what was written


def test_the_partition_log_recovers_its_durable_prefix_after_a_torn_crash(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    with SimDisk(tmp_path, random.Random(7), torn_ratio=1.0) as disk:
        for seed in range(8):
            log = PartitionLog.open(part, "t", 0, LogConfig(), 0)
            start = log.log_end_offset
            for i in range(5):
                log.append_as_leader(record_batch([f"{seed}-{i}".encode()], 0), 0, 0)
            log.flush(0)
            durable = log.log_end_offset
            for i in range(5, 10):
                log.append_as_leader(record_batch([f"{seed}-{i}".encode()], 0), 0, 0)
            disk.crash(tmp_path, [_Shard(log)])
            again = PartitionLog.open(part, "t", 0, LogConfig(), 0, recovery_point=start)
            records = read_log(again)
            assert durable <= again.log_end_offset <= durable + 5
            assert [records[o][2] for o in range(start, durable)] == \
                [f"{seed}-{i}".encode() for i in range(5)]
            again.flush(0)
            again.close_without_flush()
    assert disk.stats.torn_tails > 0


def test_a_new_file_on_a_reused_inode_keeps_nothing_of_the_old_files_fsyncs(
        tmp_path: Path) -> None:
    """A file system that hands a deleted file's inode number to a new file (ext4 does, at
    once, in the same directory; tmpfs does not) gave the new file the old one's durable
    size: a crash kept unsynced bytes it should have lost, and which run's files got which
    inode depended on what else used the file system (another run, another process). Where
    numbers are not reused at once this skips; the test below holds on any file system."""
    part = tmp_path / "t-0"
    part.mkdir()
    with SimDisk(tmp_path, random.Random(1), torn_ratio=0.0) as disk:
        old = part / "00000000000000000000.log"
        fd = os.open(old, os.O_RDWR | os.O_CREAT)
        os.write(fd, b"a" * 100)
        os.fsync(fd)
        ino = os.fstat(fd).st_ino
        os.close(fd)
        old.unlink()
        new = None
        for i in range(200):   # ext4 reuses it at the first create; bounded all the same
            path = part / f"{i + 1:020d}.log"
            path.write_bytes(b"")
            if path.stat().st_ino == ino:
                new = path
                break
            path.unlink()
        if new is None:
            pytest.skip("this file system did not reuse the deleted file's inode")
        fd = os.open(new, os.O_RDWR)
        os.write(fd, b"b" * 30)   # never fsynced
        os.close(fd)
        disk.crash(tmp_path, [])
    assert new.read_bytes() == b""
    assert disk.stats.bytes_lost == 30


def test_a_file_deleted_or_replaced_leaves_no_durable_record(tmp_path: Path) -> None:
    """The record goes with the file however the log code lets it go (Path.unlink, os.remove,
    os.replace/os.rename onto it, shutil.rmtree of its directory), so a later file on its
    inode number starts with nothing durable; the file renamed keeps its own."""
    part = tmp_path / "t-0"
    part.mkdir()

    def synced(path: Path) -> tuple[int, int]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        os.write(fd, b"x" * 10)
        os.fsync(fd)
        st = os.fstat(fd)
        os.close(fd)
        return st.st_dev, st.st_ino

    with SimDisk(tmp_path, random.Random(1), torn_ratio=0.0) as disk:
        unlinked, removed = synced(part / "a.log"), synced(part / "b.log")
        (part / "a.log").unlink()
        os.remove(part / "b.log")
        over_replace, over_rename = synced(part / "c.index"), synced(part / "d.index")
        tmp_c, tmp_d = synced(part / "c.index.tmp"), synced(part / "d.index.tmp")
        os.replace(part / "c.index.tmp", part / "c.index")
        os.rename(part / "d.index.tmp", part / "d.index")
        (tmp_path / "t-1").mkdir()
        swept = synced(tmp_path / "t-1" / "e.log")
        shutil.rmtree(tmp_path / "t-1")
    for key in (unlinked, removed, over_replace, over_rename, swept):
        assert key not in disk.durable
    assert disk.durable == {tmp_c: 10, tmp_d: 10}
    assert (os.unlink, os.remove, os.rename, os.replace) == _REAL_OS   # put back
