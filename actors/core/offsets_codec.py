"""Key and value records of the internal topic ``__consumer_offsets``.

The bytes follow Kafka's own layout so that tools which read that topic
(``kafka-console-consumer`` with the offsets formatter, konsumer_offsets,
...) understand ours, and so that the group coordinator can rebuild its
state from the log after a restart:

* every key and every value starts with a big-endian int16 version;
* OffsetCommitKey (key version 0 or 1): group, topic (strings), partition (int32);
* GroupMetadataKey (key version 2): group (string);
* OffsetCommitValue: version 3 is written (offset int64, leader epoch int32,
  metadata string, commit timestamp int64); versions 0 to 3 are read;
* GroupMetadataValue: version 3 is written; versions 0 to 3 are read;
* a tombstone is a record whose value is ``None`` (a null value in the log):
  it deletes one committed offset, or a whole group's metadata.

Strings are an int16 length then UTF-8 (length -1 means null where the field
is nullable); byte arrays are an int32 length then the bytes; arrays are an
int32 count then the elements.

The partition of ``__consumer_offsets`` that owns a group is
``java_abs(java_string_hashcode(group_id)) % num_partitions``, as in Kafka's
``GroupMetadataManager.partitionFor``; :func:`partition_for` computes it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wire.errors import ErrorCode, KafkaError

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_INT_MIN = -(2**31)


class OffsetsRecordError(KafkaError):
    """A ``__consumer_offsets`` record that cannot be decoded (truncated, unknown version)."""

    code = ErrorCode.CORRUPT_MESSAGE


# --- partitioning -----------------------------------------------------------


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 units, int32."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: like ``Math.abs`` but maps ``Integer.MIN_VALUE`` to 0."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that stores ``group_id``'s records."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return java_abs(java_string_hashcode(group_id)) % num_partitions


# --- record types -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Key of one committed offset: which group, topic and partition."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Key of a group's membership record."""

    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """One committed offset; ``expire_timestamp_ms`` exists only in value version 1."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    """One member as persisted in a GroupMetadataValue (subscription and assignment are opaque)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A group's generation, selected protocol, leader and members, written after each rebalance."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = -1
    members: tuple[MemberMetadataValue, ...] = ()


@dataclass(frozen=True, slots=True)
class Record:
    """A key and an optional value (``None`` = tombstone) to append to ``__consumer_offsets``."""

    key: bytes
    value: bytes | None


RecordKey = OffsetCommitKey | GroupMetadataKey
RecordValue = OffsetCommitValue | GroupMetadataValue


# --- primitive writer / reader ---------------------------------------------

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_KEY_HEAD = struct.Struct(">hh")  # a key's version, then its first string's length


class _Writer:
    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int16(self, v: int) -> None:
        self._parts.append(struct.pack(">h", v))

    def int32(self, v: int) -> None:
        self._parts.append(struct.pack(">i", v))

    def int64(self, v: int) -> None:
        self._parts.append(struct.pack(">q", v))

    def string(self, v: str | None) -> None:
        if v is None:
            self.int16(-1)
            return
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        self.int16(len(data))
        self._parts.append(data)

    def bytes_(self, v: bytes) -> None:
        self.int32(len(v))
        self._parts.append(bytes(v))

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class _Reader:
    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def _take(self, n: int) -> bytes:
        end = self._pos + n
        if n < 0 or end > len(self._data):
            raise OffsetsRecordError(
                f"{self._what} truncated: need {n} bytes at position {self._pos}, "
                f"have {len(self._data) - self._pos}"
            )
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        if n < 0:
            raise OffsetsRecordError(f"{self._what} has a negative string length {n}")
        return self._take(n).decode("utf-8")

    def string(self) -> str:
        v = self.nullable_string()
        if v is None:
            raise OffsetsRecordError(f"{self._what} has a null string in a non-nullable field")
        return v

    def bytes_(self) -> bytes:
        n = self.int32()
        if n < 0:
            raise OffsetsRecordError(f"{self._what} has a negative bytes length {n}")
        return self._take(n)

    def done(self) -> None:
        if self._pos != len(self._data):
            raise OffsetsRecordError(
                f"{self._what} has {len(self._data) - self._pos} trailing bytes"
            )


# --- keys ---------------------------------------------------------------------


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    # without a _Writer (a topic deletion encodes one key a group and partition)
    group = key.group.encode("utf-8")
    topic = key.topic.encode("utf-8")
    if len(group) > 0x7FFF or len(topic) > 0x7FFF:
        raise ValueError(f"string of {max(len(group), len(topic))} bytes does not fit an "
                         f"int16 length")
    return (_KEY_HEAD.pack(OFFSET_COMMIT_KEY_VERSION, len(group)) + group
            + _INT16.pack(len(topic)) + topic + _INT32.pack(key.partition))


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    w = _Writer()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(key.group)
    return w.getvalue()


def decode_key(data: bytes) -> RecordKey:
    """Decode a key; raises :class:`OffsetsRecordError` for versions other than 0, 1, 2."""
    r = _Reader(data, "__consumer_offsets key")
    version = r.int16()
    key: RecordKey
    if version in (0, 1):
        key = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif version == 2:
        key = GroupMetadataKey(r.string())
    else:
        raise OffsetsRecordError(f"unknown __consumer_offsets key version {version}")
    r.done()
    return key


# --- offset commit values --------------------------------------------------


def encode_offset_commit_value(
    value: OffsetCommitValue, version: int = OFFSET_COMMIT_VALUE_VERSION
) -> bytes:
    """Encode in ``version`` (0 to 3; Kafka writes 3, or 1 when an expire timestamp is set)."""
    if version not in (0, 1, 2, 3):
        raise ValueError(f"unsupported OffsetCommitValue version {version}")
    w = _Writer()
    w.int16(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp_ms)
    if version == 1:
        w.int64(value.expire_timestamp_ms)
    return w.getvalue()


def decode_offset_commit_value(data: bytes | None) -> OffsetCommitValue | None:
    """Decode an offset value; ``None`` (tombstone) stays ``None``."""
    if data is None:
        return None
    r = _Reader(data, "OffsetCommitValue")
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise OffsetsRecordError(f"unknown OffsetCommitValue version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    r.done()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_ts, expire_ts)


# --- group metadata values -------------------------------------------------


def encode_group_metadata_value(
    value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION
) -> bytes:
    """Encode in ``version`` (0 to 3); fields a version lacks are dropped."""
    if version not in (0, 1, 2, 3):
        raise ValueError(f"unsupported GroupMetadataValue version {version}")
    w = _Writer()
    w.int16(version)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.int64(value.current_state_timestamp_ms)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.getvalue()


def decode_group_metadata_value(data: bytes | None) -> GroupMetadataValue | None:
    """Decode a group value; ``None`` (tombstone) stays ``None``."""
    if data is None:
        return None
    r = _Reader(data, "GroupMetadataValue")
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise OffsetsRecordError(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    count = r.int32()
    if count < 0:
        raise OffsetsRecordError(f"GroupMetadataValue has a negative member count {count}")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout_ms = r.int32() if version >= 1 else -1
        session_timeout_ms = r.int32()
        if version == 0:
            # Version 0 had a single timeout; Kafka used it for both.
            rebalance_timeout_ms = session_timeout_ms
        subscription = r.bytes_()
        assignment = r.bytes_()
        members.append(
            MemberMetadataValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                subscription,
                assignment,
            )
        )
    r.done()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# --- whole records -----------------------------------------------------------


def offset_commit_record(
    group: str, topic: str, partition: int, value: OffsetCommitValue
) -> Record:
    """The record that commits ``value`` for one partition (value version 3)."""
    return Record(
        encode_offset_commit_key(OffsetCommitKey(group, topic, partition)),
        encode_offset_commit_value(value),
    )


def offset_tombstone(group: str, topic: str, partition: int) -> Record:
    """The record that deletes one committed offset."""
    return Record(encode_offset_commit_key(OffsetCommitKey(group, topic, partition)), None)


def group_metadata_record(group: str, value: GroupMetadataValue) -> Record:
    """The record that stores a group's membership (value version 3)."""
    return Record(
        encode_group_metadata_key(GroupMetadataKey(group)), encode_group_metadata_value(value)
    )


def group_tombstone(group: str) -> Record:
    """The record that deletes a group's membership (the group is gone)."""
    return Record(encode_group_metadata_key(GroupMetadataKey(group)), None)


def decode_record(key: bytes, value: bytes | None) -> tuple[RecordKey, RecordValue | None]:
    """Decode one record of ``__consumer_offsets``; a ``None`` value means tombstone."""
    k = decode_key(key)
    if isinstance(k, OffsetCommitKey):
        return k, decode_offset_commit_value(value)
    return k, decode_group_metadata_value(value)
