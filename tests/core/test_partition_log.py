"""Partition log rules and refusals, one test per rule."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from actors.core.checkpoint import CheckpointError, read_offset_checkpoint
from actors.core.log_dir import CLEAN_SHUTDOWN_FILE, LogDir, parse_partition_dir_name
from actors.core.partition_log import (
    FlushFailedError,
    LogConfig,
    LogOffsetMetadata,
    PartitionLog,
    RecordListTooLargeError,
    UnexpectedAppendOffsetError,
    set_aside,
)
from actors.core.record_batch import BatchHeader, build_batch, check_batches, compute_crc
from wire.errors import (
    CorruptMessageError,
    ErrorCode,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    StorageError,
)


def open_log(path: Path, now_ms: int = 0, **kwargs: object) -> PartitionLog:
    options = {k: v for k, v in kwargs.items() if k in LogConfig.__dataclass_fields__}
    rest = {k: v for k, v in kwargs.items() if k not in options}
    return PartitionLog.open(path / "topic-0", "topic", 0, LogConfig(**options), now_ms,
                             **rest)  # type: ignore[arg-type]


def batch(n: int = 1, size: int = 10, ts: int = 0) -> bytes:
    return build_batch([bytes([65 + i % 26]) * size for i in range(n)],
                       timestamps_ms=[ts + i for i in range(n)])


def headers(data: bytes | memoryview) -> list[BatchHeader]:
    return check_batches(data)


def offsets(data: bytes | memoryview) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h in headers(data)]


# -- leader append ---------------------------------------------------------------


def test_leader_append_assigns_offsets_by_patching(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    raw = batch(3)
    info = log.append_as_leader(raw, leader_epoch=4, now_ms=50)
    assert (info.first_offset, info.last_offset, info.num_records) == (0, 2, 3)
    assert info.log_append_time_ms == -1 and info.max_timestamp_ms == 2
    info = log.append_as_leader(raw + batch(2), 4, 50)
    assert (info.first_offset, info.last_offset, info.size_in_bytes) == (
        3, 7, len(raw) + len(batch(2)))
    data = log.read(3, 10_000).records
    hs = headers(data)
    assert [(h.base_offset, h.partition_leader_epoch) for h in hs] == [(3, 4), (6, 4)]
    # Only the base offset and leader epoch changed: the records are the client's bytes.
    assert bytes(data[17:len(raw)]) == raw[17:]
    assert log.log_end_offset == 8 and log.latest_epoch == 4


def test_log_append_time_patches_max_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch(2, ts=5), 0, now_ms=12345)
    assert info.log_append_time_ms == 12345 and info.max_timestamp_ms == 12345
    (h,) = headers(log.read(0, 1000).records)  # CRC re-checked by check_batches
    assert h.is_log_append_time and h.max_timestamp == 12345


@pytest.mark.parametrize("more", [0, 1], ids=["alone", "after another batch"])
def test_a_client_log_append_time_stamp_on_a_create_time_topic_is_rewritten(
        tmp_path: Path, more: int) -> None:
    """A client batch with the LogAppendTime bit on a CreateTime topic is stored CreateTime
    (bit cleared, max timestamp kept, CRC redone), as Kafka's LogValidator sets the
    topic's type on every batch: alone (the single-batch fast path, which must leave it
    to the general path) and after another batch (the general path)."""
    log = open_log(tmp_path, message_timestamp_type="CreateTime")
    stamped = build_batch([b"a", b"b"], timestamps_ms=[5, 9], attributes=0x08)
    (sent,) = headers(stamped)
    assert sent.is_log_append_time and sent.max_timestamp == 9
    info = log.append_as_leader(batch(1, ts=3) * more + stamped, 0, now_ms=12345)
    assert (info.max_timestamp_ms, info.log_append_time_ms) == (9, -1)
    *_, stored = headers(log.read(0, 1000).records)  # CRC re-checked by check_batches
    assert not stored.is_log_append_time and stored.max_timestamp == 9
    assert (stored.base_offset, stored.attributes) == (more, sent.attributes & ~0x08)


def test_invalid_timestamp_type_config_refused() -> None:
    with pytest.raises(ValueError, match="message_timestamp_type"):
        LogConfig(message_timestamp_type="Whenever")


def test_corrupt_batch_refused_and_nothing_written(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    bad = bytearray(batch(1))
    bad[-1] ^= 1
    with pytest.raises(CorruptMessageError) as info:
        log.append_as_leader(batch(2) + bytes(bad), 0, 0)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0 and log.size_in_bytes == 0


def test_truncated_request_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    raw = batch(2)
    with pytest.raises(CorruptMessageError, match="truncated"):
        log.append_as_leader(raw + raw[:-3], 0, 0)
    assert log.size_in_bytes == 0


def test_wrong_magic_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    raw = bytearray(batch(1))
    raw[16] = 0
    with pytest.raises(InvalidRecordError, match="magic 0"):
        log.append_as_leader(bytes(raw), 0, 0)
    assert log.size_in_bytes == 0


def test_inconsistent_count_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    raw = bytearray(batch(2))
    raw[57:61] = (3).to_bytes(4, "big")
    raw[17:21] = compute_crc(raw, 0, len(raw)).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError, match="3 records but an offset range of 2"):
        log.append_as_leader(bytes(raw), 0, 0)


def test_batch_over_max_message_bytes_refused(tmp_path: Path) -> None:
    raw = batch(1, size=200)
    log = open_log(tmp_path, max_message_bytes=len(raw) - 1)
    with pytest.raises(MessageTooLargeError, match=r"larger than max\.message\.bytes") as info:
        log.append_as_leader(batch(1) + raw, 0, 0)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.size_in_bytes == 0
    open_log(tmp_path / "b", max_message_bytes=len(raw)).append_as_leader(raw, 0, 0)


def test_single_batch_appends_follow_update_config(tmp_path: Path) -> None:
    """The one-batch path keeps the message limit and timestamp type of the config in
    force: after update_config a batch is refused, or stamped, as a new log would."""
    raw = batch(1, size=200)
    log = open_log(tmp_path)
    assert log.append_as_leader(raw, 0, 10).log_append_time_ms == -1
    log.update_config(LogConfig(max_message_bytes=len(raw) - 1))
    with pytest.raises(MessageTooLargeError, match=r"larger than max\.message\.bytes"):
        log.append_as_leader(raw, 0, 10)
    log.update_config(LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(raw, 0, 77)
    assert (info.first_offset, info.log_append_time_ms, info.max_timestamp_ms) == (1, 77, 77)
    log.update_config(LogConfig())
    assert log.append_as_leader(raw, 0, 10).log_append_time_ms == -1
    assert [h.max_timestamp for h in headers(log.read(0, 10_000).records)] == [0, 77, 0]


def test_one_batch_appends_write_what_the_general_path_writes(tmp_path: Path) -> None:
    """A batch appended alone (the one-batch path) and the same batches appended
    together (the general path) give the same log bytes and index entries."""
    raws = [batch(3, size=3000, ts=i) for i in range(6)]
    alone = open_log(tmp_path / "alone", index_interval_bytes=4000)
    together = open_log(tmp_path / "together", index_interval_bytes=4000)
    for raw in raws:
        alone.append_as_leader(raw, 2, 0)
    together.append_as_leader(b"".join(raws[:1]), 2, 0)
    together.append_as_leader(b"".join(raws[1:]), 2, 0)
    assert alone.read(0, 10**6).records == together.read(0, 10**6).records
    seg_alone, seg_together = alone.segments[-1], together.segments[-1]
    assert seg_alone.index_entries() == seg_together.index_entries()
    assert seg_alone.time_index.all_entries() == seg_together.time_index.all_entries()


def test_request_over_segment_bytes_refused(tmp_path: Path) -> None:
    raw = batch(1, size=100)
    log = open_log(tmp_path, segment_bytes=len(raw) * 2 - 1)
    with pytest.raises(RecordListTooLargeError) as info:
        log.append_as_leader(raw + raw, 0, 0)
    assert info.value.code == ErrorCode.RECORD_LIST_TOO_LARGE


def test_empty_request_appends_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), 0, 0)
    info = log.append_as_leader(b"", 0, 0)
    assert info.num_records == 0 and info.first_offset == -1 and log.log_end_offset == 2


# -- follower append ---------------------------------------------------------------


def test_follower_append_keeps_offsets(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l")
    for epoch in (1, 1, 2):
        leader.append_as_leader(batch(2), epoch, 0)
    follower = open_log(tmp_path / "f")
    data = leader.read(0, 10_000).records
    info = follower.append_as_follower(data, 0)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert bytes(follower.read(0, 10_000).records) == bytes(data)
    assert follower.epoch_cache.entries == [(1, 0), (2, 4)]


def test_follower_overlap_refused_and_gap_taken(tmp_path: Path) -> None:
    """As Kafka's follower append: a batch below the log end is refused; one past it is
    taken (a compacted leader's log skips the offsets its cleaner dropped)."""
    leader = open_log(tmp_path / "l")
    for _ in range(3):
        leader.append_as_leader(batch(2), 0, 0)
    hs = headers(leader.read(0, 10_000).records)
    raw = bytes(leader.read(0, 10_000).records)
    parts = [raw[h.position:h.position + h.size] for h in hs]
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(parts[0], 0)
    with pytest.raises(UnexpectedAppendOffsetError, match=r"at offset 0 .* expected 2"):
        follower.append_as_follower(parts[0], 0)
    with pytest.raises(UnexpectedAppendOffsetError, match="expected 4"):
        follower.append_as_follower(parts[1] + parts[1], 0)  # a repeat inside one request
    assert follower.log_end_offset == 2
    bad = bytearray(parts[1])
    bad[-1] ^= 1
    with pytest.raises(CorruptMessageError):
        follower.append_as_follower(bytes(bad), 0)
    assert follower.log_end_offset == 2
    follower.append_as_follower(parts[2], 0)  # offsets 4, 5: 2 and 3 were cleaned away
    assert follower.log_end_offset == 6
    assert [h.base_offset for h in headers(follower.read(0, 10_000).records)] == [0, 4]
    with pytest.raises(UnexpectedAppendOffsetError, match=r"at offset 2 .* expected 6"):
        follower.append_as_follower(parts[1], 0)


# -- reads -----------------------------------------------------------------------


def test_read_whole_batches_up_to_limit(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    raw = batch(2, size=20)
    for _ in range(5):
        log.append_as_leader(raw, 0, 0)
    size = len(raw)
    assert offsets(log.read(0, size * 3 - 1).records) == [(0, 1), (2, 3)]
    assert offsets(log.read(0, size * 3).records) == [(0, 1), (2, 3), (4, 5)]
    assert offsets(log.read(3, size).records) == [(2, 3)]  # the batch holding offset 3
    assert offsets(log.read(0, 1).records) == [(0, 1)]  # at least one batch
    assert offsets(log.read(0, 0).records) == [(0, 1)]
    assert bytes(log.read(0, 1, min_one_batch=False).records) == b""
    assert bytes(log.read(10, 1000).records) == b""  # at the LEO


def test_read_capped_at_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(4):
        log.append_as_leader(batch(2), 0, 0)
    log.update_high_watermark(4)
    assert offsets(log.read(0, 10_000, log.high_watermark).records) == [(0, 1), (2, 3)]
    assert offsets(log.read(0, 10_000, 6).records) == [(0, 1), (2, 3), (4, 5)]
    assert bytes(log.read(4, 10_000, 4).records) == b""
    assert bytes(log.read(0, 10_000, 0).records) == b""


def test_read_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), 0, 0)
    with pytest.raises(OffsetOutOfRangeError, match="offset 3 is out of range") as info:
        log.read(3, 100)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.truncate_fully_and_start_at(10)
    with pytest.raises(OffsetOutOfRangeError, match="log start 10, log end 10"):
        log.read(9, 100)


def test_read_stays_in_one_segment_and_moves_on_at_its_end(tmp_path: Path) -> None:
    raw = batch(1)
    log = open_log(tmp_path, segment_bytes=len(raw) * 2)
    for _ in range(5):
        log.append_as_leader(raw, 0, 0)
    assert log.segment_base_offsets == [0, 2, 4]
    assert offsets(log.read(0, 10_000).records) == [(0, 0), (1, 1)]
    assert offsets(log.read(2, 10_000).records) == [(2, 2), (3, 3)]
    info = log.read(4, 10_000)
    assert info.fetch_offset_metadata == LogOffsetMetadata(4, 4, 0)


def test_sparse_index_entries_and_lookup(tmp_path: Path) -> None:
    raw = batch(1, size=50)
    log = open_log(tmp_path, index_interval_bytes=len(raw) * 4)
    for _ in range(40):
        log.append_as_leader(raw, 0, 0)
    segment = log.segments[-1]
    assert segment.index_entries() == [(o, o * len(raw)) for o in range(0, 40, 4)]
    # The active segment's index is preallocated (Kafka's log.index.size.max.bytes) ...
    assert os.path.getsize(segment.index_path) == 10 * 1024 * 1024
    log.close()
    # ... and trimmed to its entries on close.
    assert os.path.getsize(segment.index_path) == 8 * 10
    log = open_log(tmp_path, index_interval_bytes=len(raw) * 4, clean_shutdown=True)
    for offset in range(40):
        info = log.read(offset, 1)
        assert offsets(info.records) == [(offset, offset)]
        assert info.fetch_offset_metadata.relative_position_in_segment == offset * len(raw)


def test_offset_metadata_for_leo_and_hw(tmp_path: Path) -> None:
    raw = batch(2)
    log = open_log(tmp_path, segment_bytes=len(raw) * 3)
    for _ in range(4):
        log.append_as_leader(raw, 0, 0)
    assert log.log_end_offset_metadata == LogOffsetMetadata(8, 6, len(raw))
    log.update_high_watermark(4)
    assert log.high_watermark_metadata == LogOffsetMetadata(4, 0, 2 * len(raw))
    log.update_high_watermark(7)  # mid-batch: the position of the batch holding it
    assert log.high_watermark_metadata == LogOffsetMetadata(7, 6, 0)
    log.update_high_watermark(8)
    assert log.high_watermark_metadata == log.log_end_offset_metadata


def test_high_watermark_is_clamped(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(3), 0, 0)
    assert log.update_high_watermark(10) == 3
    assert log.update_high_watermark(-5) == 0
    assert log.last_stable_offset == 0


# -- roll -------------------------------------------------------------------------


def test_roll_on_segment_bytes_names_and_fsync(tmp_path: Path) -> None:
    raw = batch(1)
    log = open_log(tmp_path, segment_bytes=len(raw) * 2)
    for _ in range(3):
        log.append_as_leader(raw, 0, 0)
    names = sorted(os.listdir(tmp_path / "topic-0"))
    assert "00000000000000000000.log" in names and "00000000000000000002.log" in names
    assert "00000000000000000002.index" in names
    assert "00000000000000000002.timeindex" in names
    assert log.recovery_point == 2  # the finished segment was flushed on roll


def test_roll_on_segment_ms(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=100)
    log.append_as_leader(batch(1, ts=1000), 0, 1000)
    log.append_as_leader(batch(1, ts=1100), 0, 1100)  # 100 ms later: not yet
    assert log.segment_base_offsets == [0]
    log.append_as_leader(batch(1, ts=1101), 0, 1101)
    assert log.segment_base_offsets == [0, 2]


def test_explicit_roll_and_empty_roll(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.roll(0) == 0  # nothing to roll
    log.append_as_leader(batch(2), 0, 0)
    assert log.roll(0) == 2 and log.active_segment_base_offset == 2
    assert log.roll(0) == 2


# -- retention ------------------------------------------------------------------------


def test_retention_by_bytes(tmp_path: Path) -> None:
    raw = batch(1)
    log = open_log(tmp_path, segment_bytes=len(raw), retention_bytes=len(raw) * 2)
    for epoch in range(5):
        log.append_as_leader(raw, epoch, 0)
    log.update_high_watermark(5)
    assert log.delete_old_segments(0) == 3
    assert log.log_start_offset == 3 and log.segment_base_offsets == [3, 4]
    assert log.epoch_cache.entries == [(3, 3), (4, 4)]
    assert not (tmp_path / "topic-0" / "00000000000000000000.log").exists()


def test_retention_by_time_only_below_high_watermark(tmp_path: Path) -> None:
    raw_old, raw_new = batch(1, ts=100), batch(1, ts=5000)
    log = open_log(tmp_path, segment_bytes=len(raw_old), retention_ms=1000)
    log.append_as_leader(raw_old, 0, 0)
    log.append_as_leader(raw_old, 0, 0)
    log.append_as_leader(raw_new, 0, 0)
    log.update_high_watermark(1)
    assert log.delete_old_segments(now_ms=5500) == 1  # the second waits for the HW
    log.update_high_watermark(3)
    assert log.delete_old_segments(now_ms=5500) == 1
    assert log.log_start_offset == 2
    assert log.delete_old_segments(now_ms=6001) == 1  # everything old: roll, keep empty active
    assert log.log_start_offset == 3 and log.log_end_offset == 3
    assert log.segment_base_offsets == [3]
    assert log.delete_old_segments(now_ms=10**9) == 0


# -- truncation ------------------------------------------------------------------------


def test_truncate_to_mid_log_and_straddling_batch(tmp_path: Path) -> None:
    raw = batch(2)
    log = open_log(tmp_path, segment_bytes=len(raw) * 2)
    for epoch in range(6):
        log.append_as_leader(raw, epoch, 0)
    log.update_high_watermark(12)
    assert log.truncate_to(7)  # offset 7 is inside batch 6..7: the whole batch goes
    assert log.log_end_offset == 6 and log.high_watermark == 6
    assert log.segment_base_offsets == [0, 4]
    assert log.epoch_cache.entries == [(0, 0), (1, 2), (2, 4)]
    assert not log.truncate_to(6)
    assert log.truncate_to(4)
    assert log.segment_base_offsets == [0] and log.log_end_offset == 4
    log.append_as_leader(raw, 9, 0)
    assert offsets(log.read(4, 1000).records) == [(4, 5)]


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(3), 1, 0)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.epoch_cache.entries == [] and log.size_in_bytes == 0
    assert sorted(os.listdir(tmp_path / "topic-0")) == [
        "00000000000000000100.index", "00000000000000000100.log",
        "00000000000000000100.timeindex", "leader-epoch-checkpoint"]
    assert log.append_as_leader(batch(1), 2, 0).first_offset == 100


def test_truncate_below_log_start_restarts_there(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.truncate_fully_and_start_at(10)
    log.append_as_leader(batch(2), 0, 0)
    assert log.truncate_to(5)
    assert (log.log_start_offset, log.log_end_offset) == (5, 5)


# -- flush ------------------------------------------------------------------------------


def test_flush_messages(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=3)
    log.append_as_leader(batch(2), 0, 0)
    assert log.recovery_point == 0 and log.unflushed_messages == 2
    log.append_as_leader(batch(1), 0, 0)
    assert log.recovery_point == 3 and log.unflushed_messages == 0


def test_flush_ms(tmp_path: Path) -> None:
    log = open_log(tmp_path, now_ms=1000, flush_ms=500)
    log.append_as_leader(batch(1), 0, 1000)
    assert not log.maybe_flush(1499)
    assert log.maybe_flush(1500) and log.recovery_point == 1
    assert not log.maybe_flush(5000)  # nothing new to flush


def test_default_flush_leaves_it_to_the_os(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(100):
        log.append_as_leader(batch(1), 0, 0)
    assert not log.maybe_flush(10**12)
    assert log.recovery_point == 0 and log.unflushed_messages == 100


# -- recovery ---------------------------------------------------------------------------


def test_unclean_open_cuts_at_first_bad_batch(tmp_path: Path) -> None:
    raw = batch(2)
    log = open_log(tmp_path)
    for _ in range(4):
        log.append_as_leader(raw, 0, 0)
    log.close_without_flush()
    path = tmp_path / "topic-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[len(raw) * 2 + 30] ^= 0xFF  # inside the third batch
    path.write_bytes(bytes(data))
    log = open_log(tmp_path)
    assert log.log_end_offset == 4 and log.size_in_bytes == len(raw) * 2
    assert log.recovery_point == 4
    assert log.append_as_leader(raw, 0, 0).first_offset == 4


def test_clean_open_trusts_segments_below_recovery_point(tmp_path: Path) -> None:
    raw = batch(2)
    log = open_log(tmp_path, segment_bytes=len(raw))
    for _ in range(3):
        log.append_as_leader(raw, 0, 0)
    log.close()
    first = tmp_path / "topic-0" / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF  # damage the CRC of a flushed segment: not rescanned
    first.write_bytes(bytes(data))
    log = open_log(tmp_path, segment_bytes=len(raw), recovery_point=4)
    assert log.log_end_offset == 6
    log.close_without_flush()
    log = open_log(tmp_path, segment_bytes=len(raw), recovery_point=0)
    assert log.log_end_offset == 0  # scanned from the start: cut at the damage


def test_lost_or_bad_index_is_rebuilt(tmp_path: Path) -> None:
    raw = batch(1)
    log = open_log(tmp_path, index_interval_bytes=len(raw))
    for _ in range(10):
        log.append_as_leader(raw, 0, 0)
    expected = log.segments[0].index_entries()
    log.close()
    index = tmp_path / "topic-0" / "00000000000000000000.index"
    index.write_bytes(b"\x00" * 13)
    log = open_log(tmp_path, index_interval_bytes=len(raw), clean_shutdown=True)
    assert log.segments[0].index_entries() == expected
    assert offsets(log.read(7, 1).records) == [(7, 7)]
    log.close()
    assert os.path.getsize(index) == 8 * len(expected)


def test_leftovers_of_interrupted_operations_are_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(1), 0, 0)
    log.close()
    d = tmp_path / "topic-0"
    for name in ["leader-epoch-checkpoint.tmp", "00000000000000000005.index",
                 "00000000000000000005.timeindex", "00000000000000000003.log.deleted"]:
        (d / name).write_bytes(b"x")
    open_log(tmp_path, clean_shutdown=True)
    assert sorted(os.listdir(d)) == ["00000000000000000000.index",
                                     "00000000000000000000.log",
                                     "00000000000000000000.timeindex",
                                     "leader-epoch-checkpoint"]


def test_checkpointed_offsets_are_applied_on_open(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(5), 0, 0)
    log.close()
    log = open_log(tmp_path, clean_shutdown=True, log_start_offset=2, high_watermark=4,
                   recovery_point=5)
    assert (log.log_start_offset, log.high_watermark, log.recovery_point) == (2, 4, 5)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    log.close()
    log = open_log(tmp_path, clean_shutdown=True, high_watermark=99, log_start_offset=50)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (50, 50, 50)


# -- timestamps, delete -----------------------------------------------------------------


def test_offset_for_timestamp(tmp_path: Path) -> None:
    raw = build_batch([b"a", b"b", b"c"], timestamps_ms=[100, 300, 200])
    log = open_log(tmp_path, segment_bytes=len(raw))
    log.append_as_leader(raw, 0, 0)
    log.append_as_leader(build_batch([b"d"], timestamps_ms=[400]), 0, 0)
    assert log.offset_for_timestamp(50) == (0, 100)
    assert log.offset_for_timestamp(150) == (1, 300)
    assert log.offset_for_timestamp(301) == (3, 400)
    assert log.offset_for_timestamp(401) is None


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_offset_for_timestamp_reads_a_compressed_batchs_records(tmp_path: Path,
                                                                 codec: int) -> None:
    """As Kafka's FileRecords.searchForTimestamp: the first record at or after the time,
    with its own timestamp, not the batch's base offset and max timestamp."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, ts in enumerate([10, 30, 20, 40]):
        builder.append(i, timestamp=ts, key=None, value=b"v" * 200, headers=[])
    raw = bytes(builder.build())
    assert check_batches(raw)[0].compression == codec
    log = open_log(tmp_path)
    log.append_as_leader(raw, 0, 0)
    assert log.offset_for_timestamp(5) == (0, 10)
    assert log.offset_for_timestamp(15) == (1, 30)
    assert log.offset_for_timestamp(31) == (3, 40)
    assert log.offset_for_timestamp(41) is None


def _gzip_batch_of(records: bytes, count: int, base_ts: int, max_ts: int) -> bytes:
    """A gzip batch whose compressed section is ``records`` as given (any bytes), claiming
    ``count`` records, with a valid CRC: what a client may send and the broker store
    (without a codec or timestamp bounds the append never walks a compressed batch)."""
    import gzip
    import struct

    body = gzip.compress(records)
    after_crc = struct.pack(">hiqqqhii", 1, count - 1, base_ts, max_ts, -1, -1, -1, count)
    length = 4 + 1 + 4 + len(after_crc) + len(body)  # epoch, magic, crc, the rest
    raw = bytearray(struct.pack(">qiib", 0, length, -1, 2) + b"\0\0\0\0" + after_crc + body)
    raw[17:21] = compute_crc(raw, 0, len(raw)).to_bytes(4, "big")
    return bytes(raw)


@pytest.mark.parametrize("records,count", [
    (b"\x7e" + bytes(10), 1),  # a record of 63 bytes in 11
    (bytes(1 << 20), (1 << 20)),  # a megabyte of zeros claiming a record a byte
    (b"\x01" + bytes(13), 2),  # a record of length -1
    (b"\x0c\x00\x00\x0a" + bytes(3), 1),  # a record whose offset delta 5 is past the batch
], ids=["garbage", "zeros", "negative", "outside"])
def test_offset_for_timestamp_of_a_batch_whose_records_do_not_read_answers_its_header(
        tmp_path: Path, records: bytes, count: int) -> None:
    """The shard must answer, not fail: a batch whose inflated records are damaged, or
    claim more records than their bytes hold (which a lookup would otherwise walk one
    byte at a time), is answered by its base offset and max timestamp."""
    log = open_log(tmp_path)
    log.append_as_leader(_gzip_batch_of(records, count, 10, 90), 0, 0)
    assert log.offset_for_timestamp(50) == (0, 90)


def test_offset_for_timestamp_passes_a_batch_none_of_whose_records_qualifies(
        tmp_path: Path) -> None:
    """A client's header may claim a max timestamp above its records': such a batch holds
    no record at the time asked, so the next batch answers (Kafka's searchForTimestamp)."""
    raw = bytearray(build_batch([b"a", b"b"], timestamps_ms=[10, 20]))
    raw[35:43] = (500).to_bytes(8, "big")  # the header's max timestamp
    raw[17:21] = compute_crc(raw, 0, len(raw)).to_bytes(4, "big")
    log = open_log(tmp_path)
    log.append_as_leader(bytes(raw), 0, 0)
    # alone, its header answers a time only it claims (ListOffsets' -3 asks for the
    # headers' max: a non-empty log answers)
    assert log.offset_for_timestamp(500) == (0, 500)
    log.append_as_leader(build_batch([b"c"], timestamps_ms=[300]), 0, 0)
    assert log.offset_for_timestamp(100) == (2, 300)


def test_offset_for_timestamp_of_an_undecodable_batch_gives_its_base_offset(
        tmp_path: Path) -> None:
    """A compressed batch whose records do not decode (damaged on disk) is answered by its
    header: its base offset and max timestamp."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=1, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, ts in enumerate([10, 20, 30]):
        builder.append(i, timestamp=ts, key=None, value=b"v" * 200, headers=[])
    raw = bytes(builder.build())
    log = open_log(tmp_path)
    log.append_as_leader(raw, 0, 0)
    [segment_file] = (tmp_path / "topic-0").glob("*.log")
    with open(segment_file, "r+b") as f:  # gzip's trailer (CRC and length) damaged
        f.seek(len(raw) - 8)
        f.write(b"\xff" * 8)
    assert log.offset_for_timestamp(15) == (0, 30)


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(1), 0, 0)
    log.delete()
    assert os.listdir(tmp_path) == []


# -- log dir ------------------------------------------------------------------------------


def test_partition_dir_names() -> None:
    assert parse_partition_dir_name("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir_name("topic") is None
    assert parse_partition_dir_name("-3") is None
    assert parse_partition_dir_name("t-x") is None


def test_log_dir_checkpoints_and_clean_shutdown(tmp_path: Path) -> None:
    log_dir = LogDir.open(tmp_path)
    assert not log_dir.had_clean_shutdown
    a = log_dir.open_partition("a", 0, LogConfig(), 0)
    b = log_dir.open_partition("b-x", 3, LogConfig(), 0)
    a.append_as_leader(batch(4), 0, 0)
    a.update_high_watermark(3)
    b.append_as_leader(batch(2), 0, 0)
    log_dir.checkpoint([a])
    assert read_offset_checkpoint(tmp_path / "replication-offset-checkpoint") == {("a", 0): 3}
    log_dir.close([a, b], now_ms=0)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {
        ("a", 0): 4, ("b-x", 3): 2}

    log_dir = LogDir.open(tmp_path)
    assert log_dir.had_clean_shutdown and not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert log_dir.partitions() == [("a", 0), ("b-x", 3)]
    a = log_dir.open_partition("a", 0, LogConfig(), 0)
    assert (a.high_watermark, a.log_end_offset, a.recovery_point) == (3, 4, 4)
    log_dir.delete_partition(a)
    assert log_dir.partitions() == [("b-x", 3)]
    assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint") == {
        ("b-x", 3): 0}


def test_log_dir_bad_checkpoint_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n1\nt 0\n")
    with pytest.raises(CheckpointError, match="log-start-offset-checkpoint: line 3"):
        LogDir.open(tmp_path)


def test_log_dir_no_marker_until_every_partition_recovered(tmp_path: Path) -> None:
    log_dir = LogDir.open(tmp_path)
    a = log_dir.open_partition("a", 0, LogConfig(), 0)
    b = log_dir.open_partition("b", 0, LogConfig(), 0)
    a.close_without_flush()
    b.close_without_flush()  # a crash
    log_dir = LogDir.open(tmp_path)
    a = log_dir.open_partition("a", 0, LogConfig(), 0)
    log_dir.close([a], now_ms=0)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # b was never recovered


def test_log_dir_removes_half_deleted_partitions(tmp_path: Path) -> None:
    (tmp_path / "gone-0.123-delete").mkdir()
    (tmp_path / "gone-0.123-delete" / "00000000000000000000.log").write_bytes(b"x")
    log_dir = LogDir.open(tmp_path)
    assert log_dir.partitions() == [] and os.listdir(tmp_path) == []


def test_a_partition_of_a_249_character_topic_is_deleted_and_its_leftover_removed_at_start(
        tmp_path: Path) -> None:
    """A topic name may have 249 characters: the set-aside name of its partition's
    directory still fits in NAME_MAX (255 bytes; the topic part is cut short), and such
    a directory left by a crash is removed at start, never opened as a partition."""
    topic = "t" * 249
    log_dir = LogDir.open(tmp_path)
    log = log_dir.open_partition(topic, 7, LogConfig(), 0)
    log.append_as_leader(batch(3), 0, 0)
    assert log.delete() is None
    assert os.listdir(tmp_path) == []
    log = log_dir.open_partition(topic, 12345, LogConfig(), 0)
    log.append_as_leader(batch(2), 0, 0)
    log.close_without_flush()
    leftover = set_aside(log.dir)  # a crash right after the rename
    assert len(leftover.name) <= 255 and leftover.name.endswith("-delete")
    assert leftover.name.startswith("t" * 200) and "-12345." in leftover.name
    assert os.listdir(tmp_path) == [leftover.name]
    log_dir = LogDir.open(tmp_path)
    assert log_dir.partitions() == [] and os.listdir(tmp_path) == []


def test_log_dir_close_after_a_failed_fsync_is_not_a_clean_shutdown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log's fsync failed (EIO): LogDir.close closes it unflushed, checkpoints its
    recovery point (0), and writes no clean-shutdown marker, so the next open scans it."""
    log_dir = LogDir.open(tmp_path)
    log = log_dir.open_partition("a", 0, LogConfig(), 0)
    log.append_as_leader(batch(2), 0, 0)
    real = os.fsync

    def fails_once(fd: int) -> None:
        monkeypatch.setattr(os, "fsync", real)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fails_once)
    with pytest.raises(StorageError):
        log.flush(0)
    log_dir.close([log], now_ms=0)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {
        ("a", 0): 0}
    assert not LogDir.open(tmp_path).had_clean_shutdown


def test_log_dir_close_whose_flush_fails_closes_the_others_and_checkpoints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing a's flushes it, and that fsync fails (EIO): b is closed all the same (and
    flushed), the checkpoint is written with both (a's recovery point where its last
    good flush left it), no clean-shutdown marker is, and the failure is raised."""
    log_dir = LogDir.open(tmp_path)
    a = log_dir.open_partition("a", 0, LogConfig(), 0)
    b = log_dir.open_partition("b", 0, LogConfig(), 0)
    a.append_as_leader(batch(2), 0, 0)
    b.append_as_leader(batch(3), 0, 0)
    real = os.fsync

    def fails_once(fd: int) -> None:
        monkeypatch.setattr(os, "fsync", real)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fails_once)
    with pytest.raises(FlushFailedError):
        log_dir.close([a, b], now_ms=0)
    assert a.closed and b.closed
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {
        ("a", 0): 0, ("b", 0): 3}


def test_truncate_inside_the_batch_holding_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(5), 0, 0)
    log.close()
    log = open_log(tmp_path, clean_shutdown=True, log_start_offset=2, recovery_point=5)
    assert log.truncate_to(3)  # the only batch (0..4) goes, and with it offset 2
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (3, 3, 3)


def test_segment_ms_counts_from_creation_without_batch_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path, now_ms=1000, segment_ms=100)
    no_ts = build_batch([b"x"], timestamps_ms=[-1])
    log.append_as_leader(no_ts, 0, 1000)
    log.append_as_leader(no_ts, 0, 1100)  # 100 ms after the segment was created: not yet
    assert log.segment_base_offsets == [0]
    log.append_as_leader(no_ts, 0, 1101)
    assert log.segment_base_offsets == [0, 2]


def test_finished_segments_hold_one_file_descriptor(tmp_path: Path) -> None:
    def open_here() -> int:  # descriptors on the log's files only: other threads of the
        count = 0            # test process (a session's servers, xdist) open and close theirs
        for fd in os.listdir("/proc/self/fd"):
            try:
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path))
            except OSError:
                pass
        return count

    raw = batch(1)
    log = open_log(tmp_path, segment_bytes=len(raw))
    for _ in range(20):
        log.append_as_leader(raw, 0, 0)
    assert len(log.segments) == 20
    # The .logs, and the mappings of the active .index and .timeindex (Python's mmap
    # keeps a descriptor); finished segments map theirs only when used.
    assert 20 <= open_here() <= 22
    log.close()
    assert open_here() == 0


def test_offset_metadata_helpers_for_the_purgatory(tmp_path: Path) -> None:
    raw = batch(1)
    log = open_log(tmp_path, segment_bytes=len(raw) * 2)
    log.append_as_leader(raw, 0, 0)
    fetch = log.read(0, 1000).fetch_offset_metadata
    log.append_as_leader(raw, 0, 0)
    leo = log.log_end_offset_metadata
    assert leo.on_same_segment(fetch) and leo.position_diff(fetch) == 2 * len(raw)
    log.append_as_leader(raw, 0, 0)  # rolls
    assert not log.log_end_offset_metadata.on_same_segment(fetch)


def test_high_watermark_metadata_follows_a_roll(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(1), 0, 0)
    log.update_high_watermark(1)
    assert log.high_watermark_metadata == LogOffsetMetadata(1, 0, len(batch(1)))
    log.roll(0)
    log.append_as_leader(batch(1), 0, 0)
    assert log.high_watermark_metadata == LogOffsetMetadata(1, 1, 0)


def test_read_capped_inside_a_batch_leaves_that_batch_out(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), 0, 0)
    log.append_as_leader(batch(2), 0, 0)
    assert offsets(log.read(0, 10_000, 3).records) == [(0, 1)]


def test_follower_appends_feed_producer_state(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l")
    idempotent = build_batch([b"x"], producer_id=9, producer_epoch=0, base_sequence=0)
    leader.append_as_leader(idempotent, 0, 0)
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(leader.read(0, 1000).records, 0)
    # The follower becomes leader: the producer's retry is recognised.
    retry = follower.append_as_leader(idempotent, 1, 0)
    assert retry.duplicate and retry.first_offset == 0


def test_duplicate_on_a_log_append_time_topic_returns_the_original_time(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    raw = build_batch([b"x"], producer_id=9, producer_epoch=0, base_sequence=0)
    first = log.append_as_leader(raw, 0, now_ms=500)
    retry = log.append_as_leader(raw, 0, now_ms=900)
    assert retry.duplicate and retry.log_append_time_ms == first.log_append_time_ms == 500


def test_retention_removes_segments_below_the_log_start(tmp_path: Path) -> None:
    raw = batch(1)
    log = open_log(tmp_path, segment_bytes=len(raw))
    for _ in range(3):
        log.append_as_leader(raw, 0, 0)
    log.close()
    log = open_log(tmp_path, segment_bytes=len(raw), clean_shutdown=True, log_start_offset=2,
                   high_watermark=3, recovery_point=3)
    assert log.segment_base_offsets == [0, 1, 2]
    assert log.delete_old_segments(0) == 2
    assert log.segment_base_offsets == [2] and log.log_start_offset == 2


# -- reads as file regions ---------------------------------------------------------


def test_read_as_a_region_holds_the_same_whole_batches_without_reading_them(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=100)
    raw = batch(2, size=40)
    for _ in range(20):
        log.append_as_leader(raw, 0, 0)
    for fetch, max_bytes in ((0, 10_000), (3, len(raw) * 3 - 1), (5, 1), (0, 0)):
        want = bytes(log.read(fetch, max_bytes).records)
        info = log.read(fetch, max_bytes, region_min_bytes=1)
        assert info.region is not None and info.records == b""
        assert info.region.length == len(want)
        assert os.pread(info.region.fd, info.region.length, info.region.position) == want
        os.close(info.region.fd)
    small = log.read(0, len(raw), region_min_bytes=len(raw) + 1)  # under the threshold: bytes
    assert small.region is None and offsets(small.records) == [(0, 1)]
    assert log.read(0, 1, min_one_batch=False, region_min_bytes=1).region is None
    assert log.read(40, 100, region_min_bytes=1).region is None  # at the log end


def test_a_region_outlives_the_deletion_of_its_segment(tmp_path: Path) -> None:
    raw = batch(1, size=100)
    log = open_log(tmp_path, segment_bytes=len(raw), retention_bytes=len(raw))
    for _ in range(3):
        log.append_as_leader(raw, 0, 0)
    log.update_high_watermark(3)
    want = bytes(log.read(0, 10_000).records)
    info = log.read(0, 10_000, region_min_bytes=1)
    region = info.region
    assert region is not None
    try:
        assert log.delete_old_segments(0) == 2  # retention removes the region's segment
        assert not (tmp_path / "topic-0" / "00000000000000000000.log").exists()
        assert os.pread(region.fd, region.length, region.position) == want
    finally:
        os.close(region.fd)


def test_without_descriptors_left_a_region_read_falls_back_to_bytes(tmp_path: Path) -> None:
    import resource

    log = open_log(tmp_path)
    log.append_as_leader(batch(2, size=40), 0, 0)
    want = bytes(log.read(0, 10_000).records)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        try:
            while True:  # bounded by the limit just set
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        info = log.read(0, 10_000, region_min_bytes=1)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert info.region is None and bytes(info.records) == want
