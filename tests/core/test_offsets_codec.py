from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.core.offsets_codec import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecordError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    decode_record,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    group_metadata_record,
    group_tombstone,
    java_abs,
    java_string_hashcode,
    offset_commit_record,
    offset_tombstone,
    partition_for,
)
from wire.errors import ErrorCode


def _s(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


# --- partitioning ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        # A well-known string whose Java hash is Integer.MIN_VALUE.
        ("polygenelubricants", -(2**31)),
        # Outside the BMP Java hashes the two UTF-16 surrogates: 0xD83D*31 + 0xDE00.
        ("\U0001f600", 0xD83D * 31 + 0xDE00),
        # Overflow wraps like Java's int.
        ("console-consumer-12345", None),
    ],
)
def test_java_string_hashcode(text: str, expected: int | None) -> None:
    h = java_string_hashcode(text)
    if expected is None:
        # Independent reference: the textbook formula reduced modulo 2**32.
        ref = sum(ord(c) * 31 ** (len(text) - 1 - i) for i, c in enumerate(text)) % 2**32
        expected = ref - 2**32 if ref >= 2**31 else ref
    assert h == expected
    assert -(2**31) <= h < 2**31


def test_java_abs_maps_min_value_to_zero() -> None:
    assert java_abs(-(2**31)) == 0
    assert java_abs(-5) == 5
    assert java_abs(7) == 7


def test_partition_for_uses_java_hash() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0
    # Negative hash: abs, not Python's modulo of a negative number.
    h = java_string_hashcode("console-consumer-12345")
    assert partition_for("console-consumer-12345", 7) == abs(h) % 7
    with pytest.raises(ValueError, match="num_partitions must be positive, got 0"):
        partition_for("g", 0)


# --- exact bytes -------------------------------------------------------------


def test_offset_commit_key_bytes() -> None:
    key = OffsetCommitKey("g", "t", 3)
    assert encode_offset_commit_key(key) == b"\x00\x01" + _s("g") + _s("t") + b"\x00\x00\x00\x03"
    assert decode_key(encode_offset_commit_key(key)) == key
    # Version 0 keys have the same layout and are read too.
    assert decode_key(b"\x00\x00" + _s("g") + _s("t") + b"\x00\x00\x00\x03") == key


def test_group_metadata_key_bytes() -> None:
    assert encode_group_metadata_key(GroupMetadataKey("grp")) == b"\x00\x02" + _s("grp")
    assert decode_key(b"\x00\x02" + _s("grp")) == GroupMetadataKey("grp")


def test_offset_commit_value_v3_bytes() -> None:
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp_ms=1000)
    expected = (
        b"\x00\x03"
        + struct.pack(">q", 42)
        + struct.pack(">i", 5)
        + _s("m")
        + struct.pack(">q", 1000)
    )
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_v1_has_expire_timestamp() -> None:
    data = (
        b"\x00\x01" + struct.pack(">q", 7) + _s("") + struct.pack(">q", 10) + struct.pack(">q", 99)
    )
    assert decode_offset_commit_value(data) == OffsetCommitValue(7, -1, "", 10, 99)


def test_group_metadata_value_v3_bytes() -> None:
    member = MemberMetadataValue("m-1", "inst", "cid", "/1.2.3.4", 30000, 10000, b"sub", b"as")
    value = GroupMetadataValue("consumer", 4, "range", "m-1", 123, (member,))
    expected = (
        b"\x00\x03"
        + _s("consumer")
        + struct.pack(">i", 4)
        + _s("range")
        + _s("m-1")
        + struct.pack(">q", 123)
        + struct.pack(">i", 1)
        + _s("m-1")
        + _s("inst")
        + _s("cid")
        + _s("/1.2.3.4")
        + struct.pack(">i", 30000)
        + struct.pack(">i", 10000)
        + struct.pack(">i", 3)
        + b"sub"
        + struct.pack(">i", 2)
        + b"as"
    )
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_group_metadata_value_nulls() -> None:
    value = GroupMetadataValue("consumer", 1, None, None, 5, ())
    data = encode_group_metadata_value(value)
    assert data == (
        b"\x00\x03"
        + _s("consumer")
        + struct.pack(">i", 1)
        + b"\xff\xff\xff\xff"
        + struct.pack(">q", 5)
        + struct.pack(">i", 0)
    )
    assert decode_group_metadata_value(data) == value


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_group_metadata_value_old_versions(version: int) -> None:
    member = MemberMetadataValue("m", "inst", "c", "h", 30000, 10000, b"s", b"a")
    value = GroupMetadataValue("consumer", 2, "range", "m", 77, (member,))
    decoded = decode_group_metadata_value(encode_group_metadata_value(value, version))
    assert decoded is not None
    assert decoded.generation == 2 and decoded.protocol == "range" and decoded.leader == "m"
    dm = decoded.members[0]
    assert (dm.member_id, dm.subscription, dm.assignment) == ("m", b"s", b"a")
    assert dm.group_instance_id == ("inst" if version >= 3 else None)
    assert decoded.current_state_timestamp_ms == (77 if version >= 2 else -1)
    # Version 0 has only the session timeout; it stands in for the rebalance timeout.
    assert dm.rebalance_timeout_ms == (30000 if version >= 1 else 10000)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_offset_commit_value_versions(version: int) -> None:
    value = OffsetCommitValue(9, 4, "meta", 1234, 5678)
    decoded = decode_offset_commit_value(encode_offset_commit_value(value, version))
    assert decoded is not None
    assert (decoded.offset, decoded.metadata, decoded.commit_timestamp_ms) == (9, "meta", 1234)
    assert decoded.leader_epoch == (4 if version >= 3 else -1)
    assert decoded.expire_timestamp_ms == (5678 if version == 1 else -1)


# --- tombstones and whole records ----------------------------------------------


def test_records_and_tombstones() -> None:
    rec = offset_commit_record("g", "t", 0, OffsetCommitValue(5, -1, "", 9))
    assert decode_record(rec.key, rec.value) == (
        OffsetCommitKey("g", "t", 0),
        OffsetCommitValue(5, -1, "", 9),
    )
    tomb = offset_tombstone("g", "t", 0)
    assert tomb.key == rec.key and tomb.value is None
    assert decode_record(tomb.key, tomb.value) == (OffsetCommitKey("g", "t", 0), None)
    value = GroupMetadataValue("consumer", 1, "range", "m", 0, ())
    grec = group_metadata_record("g", value)
    assert decode_record(grec.key, grec.value) == (GroupMetadataKey("g"), value)
    gt = group_tombstone("g")
    assert decode_record(gt.key, gt.value) == (GroupMetadataKey("g"), None)


# --- refusals ------------------------------------------------------------------


def test_unknown_key_version() -> None:
    with pytest.raises(
        OffsetsRecordError, match=r"^unknown __consumer_offsets key version 3$"
    ) as e:
        decode_key(b"\x00\x03" + _s("g"))
    assert e.value.code is ErrorCode.CORRUPT_MESSAGE


def test_unknown_value_versions() -> None:
    with pytest.raises(OffsetsRecordError, match=r"^unknown OffsetCommitValue version 9$"):
        decode_offset_commit_value(b"\x00\x09")
    with pytest.raises(OffsetsRecordError, match=r"^unknown GroupMetadataValue version 4$"):
        decode_group_metadata_value(b"\x00\x04")
    with pytest.raises(ValueError, match="unsupported OffsetCommitValue version 4"):
        encode_offset_commit_value(OffsetCommitValue(1), 4)


def test_truncated_and_trailing() -> None:
    data = encode_offset_commit_key(OffsetCommitKey("g", "t", 3))
    with pytest.raises(
        OffsetsRecordError,
        match=r"^__consumer_offsets key truncated: need 4 bytes at position 8, have 3$",
    ):
        decode_key(data[:-1])
    with pytest.raises(OffsetsRecordError, match=r"^__consumer_offsets key has 1 trailing bytes$"):
        decode_key(data + b"\x00")
    with pytest.raises(OffsetsRecordError, match="has a null string in a non-nullable field"):
        decode_key(b"\x00\x02\xff\xff")
    with pytest.raises(OffsetsRecordError, match="negative member count -2"):
        decode_group_metadata_value(
            b"\x00\x03"
            + _s("c")
            + b"\x00\x00\x00\x01"
            + b"\xff\xff\xff\xff"
            + b"\x00" * 8
            + struct.pack(">i", -2)
        )


# --- round trips ------------------------------------------------------------------

_text = st.text(max_size=20)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


@given(_text, _text, _i32)
def test_offset_key_round_trip(group: str, topic: str, partition: int) -> None:
    key = OffsetCommitKey(group, topic, partition)
    assert decode_key(encode_offset_commit_key(key)) == key


@given(_i64, _i32, _text, _i64)
def test_offset_value_round_trip(offset: int, epoch: int, metadata: str, ts: int) -> None:
    value = OffsetCommitValue(offset, epoch, metadata, ts)
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


_member = st.builds(
    MemberMetadataValue,
    _text,
    st.none() | _text,
    _text,
    _text,
    _i32,
    _i32,
    st.binary(max_size=30),
    st.binary(max_size=30),
)


@given(
    st.builds(
        GroupMetadataValue,
        _text,
        _i32,
        st.none() | _text,
        st.none() | _text,
        _i64,
        st.lists(_member, max_size=4).map(tuple),
    )
)
def test_group_value_round_trip(value: GroupMetadataValue) -> None:
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value
