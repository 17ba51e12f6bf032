"""Group commit in the partition log: staged appends read and land exactly as written ones.

Two logs get the same random operations: one appends every batch at once,
the other stages them (``append_as_leader(defer=True)``) and commits at
random points, with reads, flushes, rolls, idempotent producers and
truncation in between. After every operation both answer the same, and at
the end their segment files hold the same bytes. A commit that fails on a
real full disk is in partition_log_group_commit_full_disk.py.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.core.partition_log import (
    FlushFailedError,
    LogConfig,
    PartitionLog,
    UnflushedAppendError,
)
from actors.core.record_batch import build_batch
from wire.errors import StorageError

NOW_MS = 1_700_000_000_000


def random_batch(rng: random.Random, producers: dict[int, int]) -> bytes:
    values = [rng.randbytes(rng.randrange(1, 300)) for _ in range(rng.randrange(1, 4))]
    if producers and rng.random() < 0.5:
        pid = rng.choice(sorted(producers))
        seq = producers[pid]
        producers[pid] = seq + len(values)
        return build_batch(values, timestamps_ms=[NOW_MS] * len(values), producer_id=pid,
                           producer_epoch=0, base_sequence=seq)
    return build_batch(values, timestamps_ms=[NOW_MS + rng.randrange(1000)] * len(values))


def segment_bytes(log: PartitionLog) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(log.dir.glob("*.log"))]


@pytest.mark.parametrize("seed", range(12))
def test_staged_appends_read_and_land_as_written_ones(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=rng.choice([2_000, 20_000, 1 << 30]),
                       index_interval_bytes=rng.choice([0, 512, 4096]))
    written = PartitionLog.open(tmp_path / "a" / "t-0", "t", 0, config, NOW_MS)
    staged = PartitionLog.open(tmp_path / "b" / "t-0", "t", 0, config, NOW_MS)
    producers = {pid: 0 for pid in range(rng.randrange(0, 3))}
    for _ in range(300):
        op = rng.random()
        if op < 0.6:
            batch = random_batch(rng, producers)
            a = written.append_as_leader(batch, 0, NOW_MS)
            b = staged.append_as_leader(batch, 0, NOW_MS, defer=True)
            assert a == b
            for log in (written, staged):
                log.update_high_watermark(log.log_end_offset)
        elif op < 0.7:
            assert staged.commit() is None
            assert staged.staged_bytes == 0
        elif op < 0.85:
            offset = rng.randrange(max(1, written.log_end_offset))
            max_bytes = rng.choice([100, 1000, 100_000])
            a_read = written.read(offset, max_bytes)
            # a read of the active segment writes its staged batches first
            b_read = staged.read(offset, max_bytes)
            assert bytes(a_read.records) == bytes(b_read.records)
        elif op < 0.9:
            written.flush(NOW_MS)
            staged.flush(NOW_MS)
        elif op < 0.95 and written.log_end_offset > 2:
            to = rng.randrange(written.log_end_offset)
            written.truncate_to(to)
            staged.truncate_to(to)
            for pid in producers:  # the sequences after the cut are gone on both
                producers[pid] = 0
            written.producer_state.producers.clear()
            staged.producer_state.producers.clear()
        else:
            written.roll(NOW_MS)
            staged.roll(NOW_MS)
        assert (written.log_end_offset, written.high_watermark) == (
            staged.log_end_offset, staged.high_watermark)
        assert written.segment_base_offsets == staged.segment_base_offsets
    assert staged.commit() is None
    assert segment_bytes(written) == segment_bytes(staged)
    written.close(NOW_MS)
    staged.close(NOW_MS)
    reopened = PartitionLog.open(tmp_path / "b" / "t-0", "t", 0, config, NOW_MS,
                                 clean_shutdown=True)
    assert reopened.log_end_offset == written.log_end_offset
    reopened.close(NOW_MS)


def test_a_retried_idempotent_batch_is_a_duplicate_once_staged(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), NOW_MS)
    first = build_batch([b"a"], producer_id=7, producer_epoch=0, base_sequence=0)
    log.append_as_leader(first, 0, NOW_MS, defer=True)
    again = log.append_as_leader(first, 0, NOW_MS, defer=True)
    assert again.duplicate and again.first_offset == 0
    assert log.commit() is None
    assert log.log_end_offset == 1


def test_closing_a_log_writes_what_is_staged(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), NOW_MS)
    for value in (b"a", b"b", b"c"):
        log.append_as_leader(build_batch([value]), 0, NOW_MS, defer=True)
    assert log.staged_bytes > 0
    log.close(NOW_MS)
    reopened = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), NOW_MS,
                                 clean_shutdown=True)
    assert reopened.log_end_offset == 3
    reopened.close(NOW_MS)


def _staged_write_fails_under_a_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> tuple[PartitionLog, list[int]]:
    """A log holding "written" at 0 and "lost" staged at 1; a marker's write writes the
    staged batch first, and that write fails (ENOSPC at the system call, once)."""
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), NOW_MS)
    log.append_as_leader(build_batch([b"written"]), 0, NOW_MS)
    assert log.append_as_leader(build_batch([b"lost"]), 0, NOW_MS, defer=True).first_offset == 1
    real = os.writev
    failed = []

    def fails_once(fd: int, pieces: Any) -> int:
        if not failed:
            failed.append(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, pieces)

    monkeypatch.setattr(os, "writev", fails_once)
    with pytest.raises(StorageError):
        log.append_control(7, 0, True, 0, 0, NOW_MS)
    return log, failed


def test_no_append_takes_a_lost_batch_s_offset_before_its_loss_is_told(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A marker's write writes the staged batch first, and that write fails (ENOSPC at
    the system call, once): the log is back at end 1. Until commit() tells the loss,
    every append is refused (it would take offset 1, where the lost batch was told to
    be); after it, offset 1 is the next append's."""
    log, failed = _staged_write_fails_under_a_marker(tmp_path, monkeypatch)
    assert failed and log.log_end_offset == 1
    for append in (lambda: log.append_as_leader(build_batch([b"x"]), 0, NOW_MS, defer=True),
                   lambda: log.append_as_leader(build_batch([b"x"]), 0, NOW_MS),
                   lambda: log.append_control(7, 0, True, 0, 0, NOW_MS),
                   lambda: log.append_as_follower(build_batch([b"x"], base_offset=1), NOW_MS)):
        with pytest.raises(StorageError, match="not told yet"):
            append()
    assert log.log_end_offset == 1
    error = log.commit()
    assert error is not None and "No space left" in str(error)
    assert log.append_as_leader(build_batch([b"next"]), 0, NOW_MS).first_offset == 1
    assert log.commit() is None
    log.close(NOW_MS)


FULL_DISK = Path(__file__).with_name("partition_log_group_commit_full_disk.py")


def _full_disk_run(tmp_path: Path, *args: str) -> dict[str, Any]:
    """partition_log_group_commit_full_disk.py on a 1 MiB tmpfs in a private mount
    namespace: its JSON outcome."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(disk))} && "
              f"exec {shlex.quote(sys.executable)} {shlex.quote(str(FULL_DISK))} "
              f"{shlex.quote(str(disk))} {' '.join(args)}")
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             script], capture_output=True, text=True, timeout=120)
    if result.returncode != 0 and "mount" in result.stderr and "permission" in result.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    assert result.returncode == 0, (result.returncode, result.stderr)
    outcome: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["commit"].startswith("StorageError: cannot append to")
    assert outcome["back_to"] == outcome["before"]  # LEO, HW, segment size
    assert outcome["file_size"] == outcome["before"][2]  # nothing of the staged bytes left
    return outcome


@pytest.mark.multiprocess
def test_a_commit_on_a_full_disk_puts_the_log_back(tmp_path: Path) -> None:
    """The staged batches' write fails on a real full disk: the log is as before them,
    producer sequences included, and the same batches append again once there is
    room."""
    outcome = _full_disk_run(tmp_path)
    assert outcome["reappended"] == "appended"  # the sequences were taken back
    assert outcome["reopened_leo"] == outcome["before"][0] + outcome["staged"]
    assert outcome["last_read"]


@pytest.mark.multiprocess
def test_a_lost_commit_after_a_commit_marker_goes_on_from_any_sequence(
        tmp_path: Path) -> None:
    """As above for a transactional producer whose last transaction's commit marker is
    in the log: the staged batches of its next transaction pushed its written ones out
    of its five, so their loss leaves an entry with no batch and a marker of its epoch.
    Its sequence is lost, not that of an epoch a marker brought: the producer's retry
    of the lost batches (sequence 6 on) appends, as for a producer with no state."""
    outcome = _full_disk_run(tmp_path, "marker")
    assert outcome["entry"] == [0, 5]  # no batch left; the commit marker at offset 5
    assert outcome["reappended"] == "appended"
    assert outcome["reopened_leo"] == outcome["before"][0] + outcome["staged"]
    assert outcome["last_read"]


def test_after_a_failed_fsync_the_recovery_point_stays_before_the_unflushed_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsync after offset 1 fails once (EIO). An fsync tried again would return 0
    (the error was reported) though offset 1's writeback failed: every later flush fails
    instead (a follower's append too, whose answer the fetcher gets as an error), and
    close does not flush: the recovery point stays at 1, where a reopen scans from."""
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), NOW_MS)
    log.append_as_leader(build_batch([b"flushed"]), 0, NOW_MS)
    log.flush(NOW_MS)
    log.append_as_leader(build_batch([b"unflushed"]), 0, NOW_MS)
    real = os.fsync
    failed = []

    def fails_once(fd: int) -> None:
        if not failed:
            failed.append(fd)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fsync", fails_once)
    # a distinct error (the shard restarts on it), naming the segment and the errno
    with pytest.raises(FlushFailedError, match="Input/output error") as first:
        log.flush(NOW_MS)
    assert (first.value.segment, first.value.errno) == ("00000000000000000000.log", errno.EIO)
    assert failed and log.recovery_point == 1 and log.flush_failed is first.value
    with pytest.raises(FlushFailedError, match="an earlier flush failed") as again:
        log.flush(NOW_MS)
    assert (again.value.segment, again.value.errno) == (first.value.segment, errno.EIO)
    log.config = LogConfig(flush_messages=1)
    with pytest.raises(UnflushedAppendError, match="an earlier flush failed") as appended:
        log.append_as_follower(build_batch([b"followed"], base_offset=2), NOW_MS)
    assert isinstance(appended.value, FlushFailedError) and appended.value.errno == errno.EIO
    assert log.log_end_offset == 3 and log.recovery_point == 1
    log.close(NOW_MS)
    assert log.closed and log.recovery_point == 1
    reopened = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), NOW_MS,
                                 recovery_point=log.recovery_point)
    assert reopened.log_end_offset == 3
    reopened.close(NOW_MS)


def test_a_lost_write_tells_the_log_end_it_left_not_the_log_end_when_told(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write of the staged batch at offset 1 fails (ENOSPC, once): the log end it left
    is 1. A follower's reset (truncate_fully_and_start_at 5) moves the log end before the
    loss is told: commit_lost still says 1, so the lost batch's answer (base offset 1)
    is failed, not taken for one below the log end."""
    log, _failed = _staged_write_fails_under_a_marker(tmp_path, monkeypatch)
    log.truncate_fully_and_start_at(5, NOW_MS)
    assert log.log_end_offset == 5
    lost = log.commit_lost()
    assert lost is not None and "No space left" in str(lost[0])
    assert lost[1] == 1, f"the lost batch's cutoff is {lost[1]}, past its offset 1"
    assert log.commit_lost() is None
    log.close(NOW_MS)
