"""v2 batch parsing, checks and patching."""

from __future__ import annotations

import struct

import crc32c
import pytest

from actors.core.record_batch import (
    CRC_POS,
    HEADER_SIZE,
    MAX_TIMESTAMP_POS,
    BatchHeader,
    BatchRecord,
    build_batch,
    check_batch,
    check_batches,
    check_client_batch,
    compute_crc,
    iter_record_timestamps,
    parse_header,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    read_records,
)
from wire.errors import CorruptMessageError, ErrorCode, InvalidRecordError


def test_header_fields_round_trip() -> None:
    raw = build_batch([b"a", b"bb", b"ccc"], base_offset=7, timestamps_ms=[10, 30, 20],
                      producer_id=5, producer_epoch=2, base_sequence=9,
                      partition_leader_epoch=4)
    h = check_batch(raw, 0, len(raw))
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (7, 2, 3)
    assert (h.base_timestamp, h.max_timestamp) == (10, 30)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (5, 2, 9, 11)
    assert h.partition_leader_epoch == 4
    assert h.size == len(raw) and h.next_offset == 10 and h.last_offset == 9
    assert HEADER_SIZE == 61


def test_crc_is_crc32c_over_attributes_to_end() -> None:
    raw = build_batch([b"x"])
    assert parse_header(raw).crc == crc32c.crc32c(raw[21:])


def test_kafka_python_accepts_our_batches() -> None:
    from kafka.record.default_records import DefaultRecordBatch

    raw = build_batch([b"v1", b"v2"], keys=[b"k1", None], timestamps_ms=[100, 101])
    batch = DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc()
    assert [(r.key, r.value, r.timestamp) for r in batch] == [
        (b"k1", b"v1", 100), (None, b"v2", 101)]


def test_several_batches_parse_in_order() -> None:
    raw = build_batch([b"a"]) + build_batch([b"b", b"c"])
    headers = check_batches(raw)
    assert [h.records_count for h in headers] == [1, 2]
    assert headers[1].position == headers[0].size


@pytest.mark.parametrize("cut", [1, 11, 12, 60, -1])
def test_truncated_batch_is_corrupt(cut: int) -> None:
    raw = build_batch([b"hello"])
    with pytest.raises(CorruptMessageError, match="truncated") as info:
        check_batches(raw[:cut])
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_trailing_partial_batch_is_corrupt() -> None:
    raw = build_batch([b"a"])
    with pytest.raises(CorruptMessageError, match=f"at byte {len(raw)} is truncated"):
        check_batches(raw + raw[:20])


def test_length_below_header_is_corrupt() -> None:
    raw = bytearray(build_batch([b"a"]))
    struct.pack_into(">i", raw, 8, 48)
    with pytest.raises(CorruptMessageError, match="length 48, smaller than the minimum 49"):
        check_batches(raw)


def test_flipped_byte_is_crc_mismatch() -> None:
    raw = bytearray(build_batch([b"payload"]))
    raw[-2] ^= 0xFF
    with pytest.raises(CorruptMessageError, match="has crc"):
        check_batches(raw)


def test_wrong_magic_is_invalid_record() -> None:
    raw = bytearray(build_batch([b"a"]))
    raw[16] = 1
    with pytest.raises(InvalidRecordError, match="magic 1, only magic 2") as info:
        check_batches(raw)
    assert info.value.code == ErrorCode.INVALID_RECORD


def _header(raw: bytes) -> BatchHeader:
    return check_batch(raw, 0, len(raw))


def _with_fields(raw: bytes, fmt: str, pos: int, value: int) -> bytes:
    buf = bytearray(raw)
    struct.pack_into(fmt, buf, pos, value)
    struct.pack_into(">I", buf, CRC_POS, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


@pytest.mark.parametrize(
    ("fmt", "pos", "value", "message"),
    [
        (">i", 23, -1, "invalid offset range"),  # lastOffsetDelta
        (">i", 57, 0, "invalid record count 0"),  # recordsCount
        (">i", 57, 5, "has 5 records but an offset range of 1"),
        (">h", 21, 0x20, "control batch"),
        (">h", 21, 0x10, "transactional but has no producer id"),
    ],
)
def test_client_batch_rules(fmt: str, pos: int, value: int, message: str) -> None:
    raw = _with_fields(build_batch([b"a"]), fmt, pos, value)
    with pytest.raises(InvalidRecordError, match=message):
        check_client_batch(_header(raw))


def test_producer_id_without_sequence_is_invalid() -> None:
    raw = build_batch([b"a"], producer_id=3, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="no base sequence"):
        check_client_batch(_header(raw))


def test_patching_offset_and_epoch_keeps_crc_valid() -> None:
    buf = bytearray(build_batch([b"a", b"b"]))
    patch_base_offset(buf, 0, 1234)
    patch_partition_leader_epoch(buf, 0, 9)
    h = check_batch(buf, 0, len(buf))
    assert (h.base_offset, h.partition_leader_epoch) == (1234, 9)


def test_log_append_time_patch_sets_bit_timestamp_and_crc() -> None:
    buf = bytearray(build_batch([b"a"], timestamps_ms=[5]))
    patch_log_append_time(buf, 0, len(buf), 999)
    h = check_batch(buf, 0, len(buf))
    assert h.is_log_append_time and h.max_timestamp == 999
    assert struct.unpack_from(">q", buf, MAX_TIMESTAMP_POS)[0] == 999


def test_sequence_wraps() -> None:
    raw = build_batch([b"a", b"b", b"c"], producer_id=1, producer_epoch=0,
                      base_sequence=2**31 - 2)
    assert _header(raw).last_sequence == 0


def test_record_timestamps_of_uncompressed_batch() -> None:
    raw = build_batch([b"a", b"b", b"c"], base_offset=10, timestamps_ms=[5, 3, 9])
    assert list(iter_record_timestamps(raw, _header(raw), 0)) == [(10, 5), (11, 3), (12, 9)]


def test_read_records_gives_offsets_timestamps_keys_values_and_nulls() -> None:
    raw = b"pad" + build_batch([b"v1", None, b""], base_offset=20, timestamps_ms=[7, 9, 8],
                               keys=[b"k1", b"k2", None])
    assert read_records(raw, parse_header(raw, 3), 3) == [
        BatchRecord(20, 7, b"k1", b"v1"),
        BatchRecord(21, 9, b"k2", None),
        BatchRecord(22, 8, None, b""),
    ]


def test_read_records_of_a_log_append_time_batch_carry_its_max_timestamp() -> None:
    buf = bytearray(build_batch([b"a", b"b"], timestamps_ms=[1, 2]))
    patch_log_append_time(buf, 0, len(buf), 999)
    assert [r.timestamp_ms for r in read_records(buf, parse_header(buf), 0)] == [999, 999]
    assert list(iter_record_timestamps(buf, parse_header(buf), 0)) == [(0, 999), (1, 999)]


@pytest.mark.parametrize("cut", [1, 3, 6])
def test_a_record_cut_short_inside_its_batch_is_corrupt(cut: int) -> None:
    raw = build_batch([b"value-one", b"value-two"], keys=[b"key", b"key"])
    header = parse_header(raw)
    # Claim a shorter batch: its last record now runs past the batch's end.
    short = header._replace(batch_length=header.batch_length - cut)
    with pytest.raises(CorruptMessageError, match=r"^record runs past the end of its batch$"):
        read_records(raw, short, 0)
    with pytest.raises(CorruptMessageError, match=r"^record runs past the end of its batch$"):
        list(iter_record_timestamps(raw, short, 0))


def test_a_varint_cut_short_is_corrupt() -> None:
    raw = build_batch([b"x" * 200])  # the record's length takes two varint bytes
    header = parse_header(raw)
    # Claim a batch that ends inside the first record's length varint.
    short = header._replace(batch_length=HEADER_SIZE - 12 + 1)
    with pytest.raises(CorruptMessageError, match=r"^record truncated inside a varint$"):
        read_records(raw, short, 0)
