"""Records of the internal topic ``__transaction_state`` and of control batches.

Byte layouts follow Kafka's schemas so that its tools can read our topic and
our partitions:

* TransactionLogKey (version 0): transactional id (string).
* TransactionLogValue (version 0 written; 0 and 1 read): producer id (int64),
  producer epoch (int16), transaction timeout ms (int32), status (int8),
  partitions (nullable array of (topic string, array of int32)), last update
  timestamp ms (int64), start timestamp ms (int64). Version 1 is the flexible
  form (compact strings and arrays, tagged fields after each struct).
* A tombstone (null value) removes a transactional id.
* Control records (commit/abort markers): key = version int16 (0) and type
  int16 (0 abort, 1 commit); value = version int16 (0) and coordinator epoch
  int32.

Strings are an int16 length then UTF-8; arrays an int32 count. The partition
that stores a transactional id is Kafka's ``partitionFor``, as for groups.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from actors.core.offsets_codec import java_abs, java_string_hashcode
from actors.core.record_batch import CONTROL_BIT, TRANSACTIONAL_BIT, build_batch
from wire.errors import ErrorCode, KafkaError

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
CONTROL_BATCH_ATTRIBUTES = TRANSACTIONAL_BIT | CONTROL_BIT

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, pid, epoch, timeout, status
_TIMES = struct.Struct(">qq")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


class TransactionLogError(KafkaError):
    """A ``__transaction_state`` or control record that cannot be decoded."""

    code = ErrorCode.CORRUPT_MESSAGE


class TxnStatus(enum.IntEnum):
    """Kafka's TransactionState ids, as stored in the value's status byte."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use."""
        return _KAFKA_NAMES[self]


_KAFKA_NAMES = {
    TxnStatus.EMPTY: "Empty", TxnStatus.ONGOING: "Ongoing",
    TxnStatus.PREPARE_COMMIT: "PrepareCommit", TxnStatus.PREPARE_ABORT: "PrepareAbort",
    TxnStatus.COMPLETE_COMMIT: "CompleteCommit", TxnStatus.COMPLETE_ABORT: "CompleteAbort",
    TxnStatus.DEAD: "Dead", TxnStatus.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATUS_BY_NAME = {name: status for status, name in _KAFKA_NAMES.items()}


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition that stores ``transactional_id``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return java_abs(java_string_hashcode(transactional_id)) % num_partitions


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """One persisted state of a transactional id."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TxnStatus
    partitions: tuple[tuple[str, int], ...]  # sorted (topic, partition)
    last_update_ms: int
    start_ms: int


# --- encoding ---------------------------------------------------------------


def _string(text: str) -> bytes:
    raw = text.encode()
    return _H.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _H.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(value: TxnLogValue) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = [_VALUE_HEAD.pack(VALUE_VERSION, value.producer_id, value.producer_epoch,
                            value.timeout_ms, int(value.status))]
    out.append(_I.pack(len(by_topic)))
    for topic, parts in by_topic.items():
        out.append(_string(topic))
        out.append(_I.pack(len(parts)))
        out.extend(_I.pack(p) for p in parts)
    out.append(_TIMES.pack(value.last_update_ms, value.start_ms))
    return b"".join(out)


# --- decoding ---------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, fmt: struct.Struct) -> tuple[int, ...]:
        if self.pos + fmt.size > len(self.buf):
            raise TransactionLogError(
                f"record ends at byte {len(self.buf)}, {fmt.size} more bytes expected at "
                f"{self.pos}")
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return values

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.buf):
                raise TransactionLogError("record ends inside a varint")
            byte = self.buf[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise TransactionLogError("varint longer than 5 bytes")

    def raw(self, length: int) -> bytes:
        if length < 0 or self.pos + length > len(self.buf):
            raise TransactionLogError(f"a field of {length} bytes overruns the record")
        data = self.buf[self.pos:self.pos + length]
        self.pos += length
        return data

    def string(self, compact: bool) -> str:
        length = self.uvarint() - 1 if compact else self.take(_H)[0]
        try:
            return self.raw(length).decode()
        except UnicodeDecodeError as exc:
            raise TransactionLogError(f"string is not UTF-8: {exc}") from exc

    def count(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.take(_I)[0]

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.raw(self.uvarint())


def decode_key(key: bytes) -> str:
    reader = _Reader(key)
    (version,) = reader.take(_H)
    if version != KEY_VERSION:
        raise TransactionLogError(f"unknown {TRANSACTION_STATE_TOPIC} key version {version}")
    return reader.string(False)


def decode_value(value: bytes) -> TxnLogValue:
    reader = _Reader(value)
    version, pid, epoch, timeout_ms, status = reader.take(_VALUE_HEAD)
    if version not in (0, 1):
        raise TransactionLogError(f"unknown {TRANSACTION_STATE_TOPIC} value version {version}")
    compact = version == 1
    try:
        txn_status = TxnStatus(status)
    except ValueError as exc:
        raise TransactionLogError(f"unknown transaction status {status}") from exc
    partitions: list[tuple[str, int]] = []
    topics = reader.count(compact)
    for _ in range(max(topics, 0)):
        topic = reader.string(compact)
        for _ in range(reader.count(compact)):
            partitions.append((topic, reader.take(_I)[0]))
        if compact:
            reader.skip_tags()
    last_update_ms, start_ms = reader.take(_TIMES)
    return TxnLogValue(pid, epoch, timeout_ms, txn_status, tuple(sorted(partitions)),
                       last_update_ms, start_ms)


# --- control records --------------------------------------------------------


def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp_ms: int) -> bytes:
    """One commit or abort marker as the control batch a partition appends."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch([value], keys=[key], timestamps_ms=[timestamp_ms],
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       attributes=CONTROL_BATCH_ATTRIBUTES)


def control_coordinator_epoch(value: bytes | None) -> int | None:
    """The coordinator epoch a control record's value carries (Kafka's
    EndTransactionMarker: version 0, then the epoch), None when it has none."""
    if value is None or len(value) < _CONTROL_VALUE.size:
        return None
    version, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    return int(coordinator_epoch) if version >= 0 else None


def control_type(key: bytes | None) -> int:
    """CONTROL_COMMIT or CONTROL_ABORT from a control record's key."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise TransactionLogError("control record without a 4-byte key")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version != 0 or kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise TransactionLogError(f"unknown control record (version {version}, type {kind})")
    return int(kind)
