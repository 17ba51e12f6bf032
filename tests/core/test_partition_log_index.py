"""The partition log's offset and time index files: rebuilt when damaged, preallocated
and trimmed, rolled when full, cut with the log, mapped only when used; retention and
lookups by time read them."""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.core.log_index import OffsetIndex, TimeIndex
from actors.core.log_segment import LogSegment
from actors.core.partition_log import OPEN_INDEXES_PER_LOG, LogConfig, PartitionLog
from actors.core.record_batch import build_batch, check_batches
from actors.core.topic_config import log_config_for
from actors.runtime.config import Config
from wire.errors import OffsetOutOfRangeError

MAX_INDEX_BYTES = 10 * 1024 * 1024


def batch(n: int = 1, ts: int = 1_000, size: int = 20) -> bytes:
    return build_batch([bytes([65 + i % 26]) * size for i in range(n)], timestamps_ms=[ts] * n)


def open_log(directory: Path, config: LogConfig, **kwargs: object) -> PartitionLog:
    return PartitionLog.open(directory, "t", 0, config, 0, **kwargs)  # type: ignore[arg-type]


def read_all(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        found = check_batches(data)
        out += [(h.base_offset, h.max_timestamp, bytes(data[h.position:h.position + h.size]))
                for h in found]
        offset = found[-1].next_offset
    return out


def by_time_scan(log: PartitionLog, target: int) -> tuple[int, int] | None:
    """offset_for_timestamp by brute force over every batch (all records of a test
    batch share its timestamp)."""
    for base, ts, _ in read_all(log):
        if ts >= target:
            return max(base, log.log_start_offset), ts
    return None


def fill(log: PartitionLog, count: int, seed: int, records: int = 3) -> None:
    """``count`` batches with timestamps that mostly grow, sometimes step back."""
    rng = random.Random(seed)
    ts = 1_000
    for _ in range(count):
        ts += rng.randint(-30, 50)
        log.append_as_leader(batch(rng.randint(1, records), ts=max(ts, 0)), 0, ts)


def state(log: PartitionLog) -> list[tuple[object, ...]]:
    return [(s.base_offset, s.index_entries(), s.time_index_entries(), s.max_timestamp_ms)
            for s in log.segments]


def no_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: LogSegment) -> int:
        raise AssertionError(f"{self} was recovered")
    monkeypatch.setattr(LogSegment, "recover", refuse)


CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=150)


# -- damaged indexes ----------------------------------------------------------------


def _entries(path: Path, size: int) -> list[bytes]:
    raw = path.read_bytes()
    return [raw[i:i + size] for i in range(0, len(raw), size)]


def _swap_two(path: Path, size: int) -> None:
    entries = _entries(path, size)
    entries[1], entries[2] = entries[2], entries[1]
    path.write_bytes(b"".join(entries))


def _index_past_the_log(path: Path, _size: int) -> None:
    relative, position = struct.unpack(">ii", path.read_bytes()[-8:])
    with open(path, "ab") as f:
        f.write(struct.pack(">ii", relative + 1, position + 100_000))


def _index_off_a_batch_start(path: Path, _size: int) -> None:
    raw = bytearray(path.read_bytes())
    relative, position = struct.unpack(">ii", raw[-8:])
    raw[-8:] = struct.pack(">ii", relative, position + 1)
    path.write_bytes(bytes(raw))


def _time_index_past_the_log(path: Path, _size: int) -> None:
    ts, relative = struct.unpack(">qi", path.read_bytes()[-12:])
    with open(path, "ab") as f:
        f.write(struct.pack(">qi", ts + 1, relative + 1000))


def _time_index_without_its_first_entry(path: Path, size: int) -> None:
    path.write_bytes(b"".join(_entries(path, size)[1:]))


DAMAGE: dict[str, tuple[str, Callable[[Path, int], None]]] = {
    "index missing": (".index", lambda p, _s: p.unlink()),
    "time index missing": (".timeindex", lambda p, _s: p.unlink()),
    "index cut inside an entry": (".index", lambda p, _s: os.truncate(p, p.stat().st_size - 3)),
    "time index cut inside an entry": (".timeindex",
                                       lambda p, _s: os.truncate(p, p.stat().st_size - 5)),
    "index entries not increasing": (".index", _swap_two),
    "time index entries not increasing": (".timeindex", _swap_two),
    "index entry beyond the log": (".index", _index_past_the_log),
    "index entry off a batch start": (".index", _index_off_a_batch_start),
    "time index entry beyond the log": (".timeindex", _time_index_past_the_log),
    "time index without the first batch": (".timeindex", _time_index_without_its_first_entry),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_index_is_rebuilt_at_open(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, CONFIG)
    fill(log, 60, seed=1)
    assert len(log.segments) >= 3
    expected_state, expected_data = state(log), read_all(log)
    expected_times = {t: by_time_scan(log, t) for t in range(900, 3000, 37)}
    middle = log.segments[1].base_offset
    log.close()
    suffix, do = DAMAGE[damage]
    path = directory / f"{middle:020d}{suffix}"
    do(path, 8 if suffix == ".index" else 12)

    log = open_log(directory, CONFIG, clean_shutdown=True)
    assert state(log) == expected_state
    assert read_all(log) == expected_data
    assert {t: log.offset_for_timestamp(t) for t in expected_times} == expected_times
    for segment in log.segments[:-1]:  # rebuilt or not, finished indexes are trimmed
        assert segment.index_path.stat().st_size == 8 * len(segment.index_entries())
        assert segment.time_index_path.stat().st_size == 12 * len(
            segment.time_index_entries())
    log.close()


def test_an_old_data_dir_without_time_indexes_gets_them(tmp_path: Path) -> None:
    """Segments written before .timeindex files existed: rebuilt once, then trusted."""
    directory = tmp_path / "t-0"
    log = open_log(directory, CONFIG)
    fill(log, 40, seed=2)
    expected = state(log)
    log.close()
    for path in directory.glob("*.timeindex"):
        path.unlink()
    log = open_log(directory, CONFIG, clean_shutdown=True)
    assert state(log) == expected
    log.close()


# -- preallocation, crashes ---------------------------------------------------------


def test_the_active_index_is_preallocated_and_trimmed_on_roll_and_close(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", CONFIG)
    fill(log, 5, seed=3)
    active = log.segments[-1]
    assert active.index_path.stat().st_size == MAX_INDEX_BYTES
    assert active.time_index_path.stat().st_size == MAX_INDEX_BYTES // 12 * 12
    log.roll(0)
    assert active.index_path.stat().st_size == 8 * len(active.index_entries())
    assert active.time_index_path.stat().st_size == 12 * len(active.time_index_entries())
    assert log.segments[-1].index_path.stat().st_size == MAX_INDEX_BYTES
    log.close()
    assert log.segments[-1].index_path.stat().st_size == 0  # empty: no entries


def test_reopen_after_a_crash_with_preallocated_indexes(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, CONFIG)
    fill(log, 45, seed=4)
    expected, recovery_point = state(log), log.recovery_point
    log.close_without_flush()  # as a crash leaves it: the active index is 10 MiB of mostly zeros
    active = directory / f"{expected[-1][0]:020d}.index"
    assert active.stat().st_size == MAX_INDEX_BYTES

    log = open_log(directory, CONFIG, recovery_point=recovery_point)  # unclean: rebuilt
    assert state(log) == expected
    assert active.stat().st_size == MAX_INDEX_BYTES  # still the active segment
    log.roll(0)
    assert active.stat().st_size == 8 * len(expected[-1][1])  # trimmed, as Kafka does
    log.close()


def test_clean_open_trims_a_preallocated_index_instead_of_rebuilding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, CONFIG)
    fill(log, 45, seed=5)
    expected = state(log)
    log.close_without_flush()
    for segment in expected:  # every index padded as a preallocated file would be
        for suffix in (".index", ".timeindex"):
            with open(directory / f"{segment[0]:020d}{suffix}", "ab") as f:
                f.write(bytes(12 * 1000))
    no_recovery(monkeypatch)
    log = open_log(directory, CONFIG, clean_shutdown=True)
    assert state(log) == expected
    for segment in log.segments[:-1]:
        assert segment.index_path.stat().st_size == 8 * len(segment.index_entries())
    log.close()


def test_an_empty_segment_with_a_zero_filled_index(tmp_path: Path) -> None:
    """Zeros read as one entry (0, 0): an empty segment's index must not keep it."""
    directory = tmp_path / "t-0"
    log = open_log(directory, CONFIG)
    log.close_without_flush()
    log = open_log(directory, CONFIG, clean_shutdown=True)
    assert log.segments[-1].index_entries() == []
    log.append_as_leader(batch(2), 0, 0)
    assert log.segments[-1].index_entries() == [(0, 0)]
    log.close()


def test_zeros_are_not_a_time_index_entry_of_a_log_without_timestamps(
        tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, CONFIG)
    for _ in range(5):
        log.append_as_leader(batch(2, ts=-1), 0, 0)
    assert log.segments[-1].time_index_entries() == []
    log.close_without_flush()  # the time index: zeros, which read as (0, base offset)
    log = open_log(directory, CONFIG, clean_shutdown=True)
    assert log.segments[-1].time_index_entries() == []
    assert log.segments[-1].max_timestamp_ms == -1
    log.close()


# -- full indexes -------------------------------------------------------------------


def test_a_full_offset_index_rolls_the_segment(tmp_path: Path) -> None:
    """Four entries fit: every batch indexed, so segments of four batches."""
    log = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=0, segment_index_bytes=32))
    for _ in range(10):
        log.append_as_leader(batch(2, ts=-1), 0, 0)  # no timestamps: the time index stays empty
    assert log.segment_base_offsets == [0, 8, 16]
    for segment in log.segments[:-1]:
        assert segment.index_path.stat().st_size == 32
        assert segment.time_index_path.stat().st_size == 0
    # Several batches in one request may fill it mid-way: the rest go unindexed
    # (still found by scanning), and the segment rolls before the next append.
    log.append_as_leader(b"".join(batch(1, ts=-1) for _ in range(6)), 0, 0)
    assert log.segment_base_offsets == [0, 8, 16]
    assert len(log.segments[-1].index_entries()) == 4
    log.append_as_leader(batch(1, ts=-1), 0, 0)
    assert log.segment_base_offsets == [0, 8, 16, 26]
    assert [base for base, _, _ in read_all(log)] == [*range(0, 20, 2), *range(20, 27)]


def test_a_full_time_index_rolls_the_segment(tmp_path: Path) -> None:
    """Four time entries fit, one kept for the roll: segments of three batches."""
    log = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=0, segment_index_bytes=48))
    for i in range(7):
        log.append_as_leader(batch(1, ts=100 + i), 0, 0)
    assert log.segment_base_offsets == [0, 3, 6]
    assert log.segments[0].time_index_entries() == [(100, 0), (101, 1), (102, 2)]
    assert log.segments[1].time_index_entries() == [(103, 3), (104, 4), (105, 5)]


# -- truncation ---------------------------------------------------------------------


def test_truncation_drops_the_index_entries_past_the_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, CONFIG)
    fill(log, 60, seed=6)
    cut_in_active = log.segments[-1].base_offset + 4
    cut_in_old = log.segments[1].base_offset + 3
    for cut in (cut_in_active, cut_in_old):
        log.truncate_to(cut)
        leo = log.log_end_offset
        active = log.segments[-1]
        assert all(offset < leo for offset, _ in active.index_entries())
        assert all(offset < leo for _, offset in active.time_index_entries())
        assert active.max_timestamp_ms == max(ts for base, ts, _ in read_all(log)
                                              if base >= active.base_offset)
        # The segment cut into is the active one now: writable and preallocated again.
        assert active.offset_index.writable and active.time_index.writable
        assert active.index_path.stat().st_size == MAX_INDEX_BYTES
        fill(log, 3, seed=7)
    expected, data = state(log), read_all(log)
    log.close()
    no_recovery(monkeypatch)
    log = open_log(directory, CONFIG, clean_shutdown=True)
    assert state(log) == expected and read_all(log) == data
    log.close()


# -- mappings -----------------------------------------------------------------------


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("read_whole_up_to", [1024, 0])
def test_finished_segments_open_their_indexes_only_when_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_whole_up_to: int) -> None:
    """Indexes of up to a kilobyte are read into memory, others (all of them, with 0
    here) mapped, on use only and for at most OPEN_INDEXES_PER_LOG finished segments
    at a time; only mappings hold descriptors."""
    monkeypatch.setattr(OffsetIndex, "read_whole_up_to", read_whole_up_to)
    monkeypatch.setattr(TimeIndex, "read_whole_up_to", read_whole_up_to)
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=1200, index_interval_bytes=0)
    log = open_log(directory, config)
    fill(log, 400, seed=8)
    segments = len(log.segments)
    assert segments > 2 * OPEN_INDEXES_PER_LOG
    log.close()
    before = open_descriptors()
    log = open_log(directory, config, clean_shutdown=True)
    # One descriptor per .log, and the active segment's two mappings.
    assert open_descriptors() - before == segments + 2
    assert not any(s.indexes_open for s in log.segments[:-1])
    mapping_fds = 2 * OPEN_INDEXES_PER_LOG if read_whole_up_to == 0 else 0
    for segment in log.segments:  # a consumer reading everything, and by time
        for offset in range(segment.base_offset, segment.next_offset):
            log.read(offset, 1)
        log.offset_for_timestamp(segment.max_timestamp_ms)
        assert sum(s.indexes_open for s in log.segments[:-1]) <= OPEN_INDEXES_PER_LOG
        assert open_descriptors() - before <= segments + 2 + mapping_fds
    assert sum(s.indexes_open for s in log.segments[:-1]) == OPEN_INDEXES_PER_LOG
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(10**15) == segments  # retention closes what it deletes
    assert not log._open_indexes
    log.close()
    assert open_descriptors() == before


# -- retention, log start, lookups by time --------------------------------------------


@pytest.mark.parametrize("clean", [True, False])
def test_time_retention_after_reopen_uses_each_segments_largest_timestamp(
        tmp_path: Path, clean: bool) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=3000, index_interval_bytes=150, retention_ms=1_000)
    log = open_log(directory, config)
    fill(log, 80, seed=9)
    largest = [(s.base_offset, s.max_timestamp_ms) for s in log.segments]
    assert largest == [(s.base_offset, max(ts for base, ts, _ in read_all(log)
                                           if s.base_offset <= base < s.next_offset))
                       for s in log.segments]
    log.update_high_watermark(log.log_end_offset)
    checkpoint = {"recovery_point": 0 if not clean else log.recovery_point,
                  "high_watermark": log.high_watermark}
    if clean:
        log.close()
    else:
        log.close_without_flush()
    log = open_log(directory, config, clean_shutdown=clean, **checkpoint)
    assert [(s.base_offset, s.max_timestamp_ms) for s in log.segments] == largest
    now = largest[2][1] + 1_001  # the first three segments are older than retention.ms
    expired = 0
    for _, ts in largest:
        if now - ts <= 1_000:
            break
        expired += 1
    assert log.delete_old_segments(now) == expired >= 3
    log.close()


def test_lookups_by_time_respect_the_log_start(tmp_path: Path) -> None:
    """The log start from the checkpoint (as after DeleteRecords or retention) inside a
    segment: reads below it are refused, lookups by time answer from it on."""
    directory = tmp_path / "t-0"
    log = open_log(directory, CONFIG)
    fill(log, 60, seed=10)
    log.update_high_watermark(log.log_end_offset)
    start = log.segments[1].base_offset + 2
    log.close()
    log = open_log(directory, CONFIG, clean_shutdown=True, log_start_offset=start,
                   high_watermark=10**9, recovery_point=10**9)
    assert log.log_start_offset == start
    with pytest.raises(OffsetOutOfRangeError):
        log.read(start - 1, 100)
    for target in range(900, 3200, 13):
        assert log.offset_for_timestamp(target) == by_time_scan(log, target)
    log.close()


def test_lookups_by_time_match_a_scan_in_large_segments(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many time index entries per segment, mapped: every answer as a full scan gives."""
    monkeypatch.setattr(OffsetIndex, "read_whole_up_to", 0)
    monkeypatch.setattr(TimeIndex, "read_whole_up_to", 0)
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=60_000, index_interval_bytes=100)
    log = open_log(directory, config)
    fill(log, 1500, seed=11)
    assert len(log.segments) >= 3 and len(log.segments[0].time_index_entries()) > 100
    for reopen in (False, True):
        if reopen:
            log.close()
            log = open_log(directory, config, clean_shutdown=True)
        for target in range(900, 40_000, 97):
            assert log.offset_for_timestamp(target) == by_time_scan(log, target), target
    log.close()


# -- configuration --------------------------------------------------------------------


def test_log_index_size_max_bytes_reaches_the_log() -> None:
    broker = Config()
    assert broker["log.index.size.max.bytes"] == MAX_INDEX_BYTES
    assert log_config_for(broker, {}).segment_index_bytes == MAX_INDEX_BYTES
    broker.update({"log.index.size.max.bytes": 4096})
    assert log_config_for(broker, {}).segment_index_bytes == 4096
    assert log_config_for(broker, {"segment.index.bytes": "800"}).segment_index_bytes == 800
    with pytest.raises(ValueError, match="segment_index_bytes"):
        LogConfig(segment_index_bytes=3)


# -- a full disk ----------------------------------------------------------------------

FULL_DISK = Path(__file__).with_name("partition_log_full_disk.py")


@pytest.mark.multiprocess
def test_a_full_disk_refuses_the_append_instead_of_killing_the_process(tmp_path: Path) -> None:
    """An index entry written into a hole of its mapped file on a full disk would be a
    SIGBUS; the log reserves the blocks first and answers KAFKA_STORAGE_ERROR. The disk
    is a 1 MiB tmpfs in a private mount namespace (gone with the process)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(disk))} && "
              f"exec {shlex.quote(sys.executable)} {shlex.quote(str(FULL_DISK))} "
              f"{shlex.quote(str(disk))}")
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             script], capture_output=True, text=True, timeout=120)
    if result.returncode != 0 and "mount" in result.stderr and "permission" in result.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    assert result.returncode == 0, (result.returncode, result.stderr)  # -7 would be SIGBUS
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["first"].startswith("StorageError: cannot grow offset index")
    assert outcome["unchanged"]  # nothing of the refused batch was written
    assert outcome["after_space_freed"] == outcome["reopened_leo"]
    assert outcome["last_read"]


# -- memory -------------------------------------------------------------------------

MEMORY_PROBE = Path(__file__).with_name("partition_log_memory_probe.py")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(("min_kib", "max_kib"), [
    (100, 1024),  # large batches: few index entries per GB
    (2, 8),  # small batches: an index entry per 4 KiB, where the old int lists grew 14 MB/GB
])
def test_anonymous_memory_stays_flat_as_gigabytes_are_retained(
        tmp_path: Path, min_kib: int, max_kib: int) -> None:
    """Issue 13's target: RssAnon grows by at most 3 MB per GB retained. 3 GB appended
    in a fresh process (bounded to 240 s; at least 1 GB must make it)."""
    directory = tmp_path / "logs"
    try:
        result = subprocess.run(
            [sys.executable, str(MEMORY_PROBE), str(directory), "--total-mb", "3072",
             "--min-kib", str(min_kib), "--max-kib", str(max_kib), "--seconds", "240"],
            capture_output=True, text=True, timeout=400)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    assert probe["retained_bytes"] >= 2**30, probe
    assert probe["growth_mib_per_gib"] <= 3.0, probe
