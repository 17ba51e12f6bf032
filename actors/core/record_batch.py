"""Kafka v2 record batches: header parsing, validation and in-place patching.

The log stores batches as clients send them, their headers patched (offsets,
leader epoch, a LogAppendTime topic's time). Only the 61-byte header is ever
parsed on the hot path; records (possibly compressed) are not decoded, because
per-record Python work would cap the broker's throughput.
The exceptions: a topic with timestamp bounds
(message.timestamp.before/after.max.ms), whose appends read each record's
timestamp (``record_timestamps``), as Kafka's do; and a topic whose
compression.type names a codec, whose batches of another codec are
re-encoded (actors/core/recompress.py).
The CRC is CRC-32C over everything after the crc field (attributes to the
end), computed with the C ``crc32c`` package.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

import crc32c

from wire.errors import CorruptMessageError, InvalidRecordError

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordsCount.
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
CURRENT_MAGIC = 2

# Byte positions of the fields that get patched.
BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
MAX_TIMESTAMP_POS = 35
CRC_START = ATTRIBUTES_POS

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # set: LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
# Set by the log cleaner (Kafka's KIP-534): the batch's base timestamp is its delete
# horizon, the time after which its tombstones, or the marker it is, may be cleaned away
DELETE_HORIZON_BIT = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

_crc32c = crc32c.crc32c
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_U = struct.Struct(">I")
_H = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The decoded fixed header of one v2 batch, plus where it sits in a buffer.

    A NamedTuple rather than a dataclass: one is built per appended batch, and
    tuple construction is several times cheaper.
    """

    position: int  # offset of the batch in the buffer it was parsed from
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Last sequence in the batch; sequences wrap at 2**31-1 like Kafka's."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


def _new_header(values: tuple[int, ...]) -> BatchHeader:
    return tuple.__new__(BatchHeader, values)  # type: ignore[type-var, return-value]


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the header at ``position``; the caller has checked 61 bytes are there."""
    return _new_header((position, *HEADER.unpack_from(buf, position)))


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """CRC-32C over what Kafka covers: attributes to the end of the batch."""
    view = memoryview(buf)[position + CRC_START : position + size]
    return crc32c.crc32c(view)


def _batch_error(buf: bytes | bytearray | memoryview, position: int, end: int) -> Exception:
    """The exact error for a batch that failed the fast checks."""
    remaining = end - position
    if remaining < LOG_OVERHEAD:
        return CorruptMessageError(
            f"record batch at byte {position} is truncated: {remaining} bytes left, "
            f"need at least {LOG_OVERHEAD}"
        )
    (batch_length,) = _I.unpack_from(buf, position + LENGTH_POS)
    if batch_length < MIN_BATCH_LENGTH:
        return CorruptMessageError(
            f"record batch at byte {position} has length {batch_length}, "
            f"smaller than the minimum {MIN_BATCH_LENGTH}"
        )
    size = batch_length + LOG_OVERHEAD
    if size > remaining:
        return CorruptMessageError(
            f"record batch at byte {position} is truncated: length says {size} bytes, "
            f"{remaining} left"
        )
    magic = buf[position + MAGIC_POS]
    if magic != CURRENT_MAGIC:
        return InvalidRecordError(
            f"record batch at byte {position} has magic {magic}, only magic 2 is supported"
        )
    crc = _U.unpack_from(buf, position + CRC_POS)[0]
    actual = compute_crc(buf, position, size)
    return CorruptMessageError(
        f"record batch at byte {position} has crc {crc:#010x}, computed {actual:#010x}"
    )


def check_batch(
    buf: bytes | bytearray | memoryview, position: int, end: int
) -> BatchHeader:
    """Parse and check one batch at ``position`` (magic, length, CRC).

    Raises CorruptMessageError for a length or CRC problem and InvalidRecordError
    for a magic other than 2, so a bad batch never reaches the log. The valid
    case costs one header unpack and one C CRC call; the error path works out
    the exact message.
    """
    if end - position >= HEADER_SIZE:
        fields = HEADER.unpack_from(buf, position)
        size = fields[1] + LOG_OVERHEAD
        if (HEADER_SIZE <= size <= end - position and fields[3] == CURRENT_MAGIC
                and crc32c.crc32c(memoryview(buf)[position + CRC_START:position + size])
                == fields[4]):
            return _new_header((position, *fields))
    raise _batch_error(buf, position, end)


def check_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Check every batch of a records field; all must be whole and valid."""
    end = len(buf)
    position = 0
    headers: list[BatchHeader] = []
    while position < end:
        header = check_batch(buf, position, end)
        headers.append(header)
        position += header[2] + LOG_OVERHEAD
    return headers


def check_client_batch(header: BatchHeader) -> None:
    """The extra rules Kafka applies to batches that come from a producer."""
    attributes = header.attributes
    if (header.records_count == header.last_offset_delta + 1 > 0
            and not attributes & (CONTROL_BIT | TRANSACTIONAL_BIT)
            and (header.producer_id < 0 or header.base_sequence >= 0)):
        return  # the common case, decided in one expression
    where = f"record batch at byte {header.position}"
    if header.last_offset_delta < 0:
        raise InvalidRecordError(f"{where} has an invalid offset range: lastOffsetDelta "
                                 f"{header.last_offset_delta}")
    if header.records_count <= 0:
        raise InvalidRecordError(f"{where} has an invalid record count {header.records_count}")
    if header.records_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"{where} has {header.records_count} records but an offset range of "
            f"{header.last_offset_delta + 1}"
        )
    if header.is_control:
        raise InvalidRecordError(f"{where} is a control batch, which clients may not send")
    if header.has_producer_id and header.base_sequence < 0:
        raise InvalidRecordError(
            f"{where} has producer id {header.producer_id} but no base sequence"
        )
    if header.is_transactional and not header.has_producer_id:
        raise InvalidRecordError(f"{where} is transactional but has no producer id")


HEAD_TO_MAGIC = struct.Struct(">qiib")  # the 17 bytes before the CRC
_HEAD_TO_MAGIC = HEAD_TO_MAGIC
AFTER_CRC = struct.Struct(">hiqqqhii")  # the 40 header bytes after the CRC
_AFTER_CRC = AFTER_CRC


def leader_header(view: memoryview, header: BatchHeader, base_offset: int, leader_epoch: int,
                  log_append_time_ms: int | None) -> tuple[bytes, memoryview]:
    """The batch as (new header bytes, untouched rest) with offset and epoch assigned.

    Two pieces for one ``writev``, so the client's record bytes are never
    copied in Python. With ``log_append_time_ms`` the max timestamp and the
    timestamp-type bit change too, and the CRC is recomputed (the new header
    bytes, then the untouched records, in C). Without it (a CreateTime topic) a
    batch the client stamped LogAppendTime loses that bit, its max timestamp
    kept (the time its records were read with, and checked against the topic's
    bounds), as Kafka's LogValidator sets the topic's timestamp type on every
    batch it validates; the CRC is recomputed the same way.
    """
    position = header.position
    end = position + header.batch_length + LOG_OVERHEAD
    if log_append_time_ms is None:
        if not header.attributes & TIMESTAMP_TYPE_BIT:
            head = _HEAD_TO_MAGIC.pack(base_offset, header.batch_length, leader_epoch,
                                       CURRENT_MAGIC)
            return head, view[position + CRC_START - 4:end]
        attributes, max_timestamp = header.attributes & ~TIMESTAMP_TYPE_BIT, header.max_timestamp
    else:
        attributes, max_timestamp = header.attributes | TIMESTAMP_TYPE_BIT, log_append_time_ms
    after_crc = _AFTER_CRC.pack(
        attributes, header.last_offset_delta,
        header.base_timestamp, max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, header.records_count)
    records = view[position + HEADER_SIZE:end]
    crc = crc32c.crc32c(records, crc32c.crc32c(after_crc))
    head = (_HEAD_TO_MAGIC.pack(base_offset, header.batch_length, leader_epoch, CURRENT_MAGIC)
            + _U.pack(crc) + after_crc)
    return head, records


def patch_base_offset(buf: bytearray, position: int, base_offset: int) -> None:
    """Set the base offset; it is outside the CRC, so nothing else changes."""
    _Q.pack_into(buf, position + BASE_OFFSET_POS, base_offset)


def patch_partition_leader_epoch(buf: bytearray, position: int, epoch: int) -> None:
    """Set the leader epoch; it is outside the CRC too."""
    _I.pack_into(buf, position + PARTITION_LEADER_EPOCH_POS, epoch)


def patch_log_append_time(buf: bytearray, position: int, size: int, now_ms: int) -> None:
    """Mark the batch LogAppendTime with max timestamp ``now_ms`` and redo the CRC.

    Both fields are covered by the CRC, so it is recomputed (C speed) rather
    than re-encoding any record.
    """
    (attributes,) = _H.unpack_from(buf, position + ATTRIBUTES_POS)
    _H.pack_into(buf, position + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_BIT)
    _Q.pack_into(buf, position + MAX_TIMESTAMP_POS, now_ms)
    _U.pack_into(buf, position + CRC_POS, compute_crc(buf, position, size))


# ----------------------------------------------------------------------------
# Building batches (tests, benchmarks and the broker's own writes).


def _zigzag_varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None,
                   value: bytes | None) -> bytes:
    body = bytearray()
    body.append(0)  # record attributes
    body += _zigzag_varint(timestamp_delta)
    body += _zigzag_varint(offset_delta)
    if key is None:
        body += _zigzag_varint(-1)
    else:
        body += _zigzag_varint(len(key)) + key
    if value is None:
        body += _zigzag_varint(-1)
    else:
        body += _zigzag_varint(len(value)) + value
    body += _zigzag_varint(0)  # no headers
    return _zigzag_varint(len(body)) + bytes(body)


def build_batch(
    values: list[bytes | None],
    *,
    base_offset: int = 0,
    timestamps_ms: list[int] | None = None,
    keys: list[bytes | None] | None = None,
    partition_leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
) -> bytes:
    """Encode an uncompressed v2 batch the way a producer would."""
    if not values:
        raise ValueError("a batch needs at least one record")
    if timestamps_ms is None:
        timestamps_ms = [0] * len(values)
    if keys is None:
        keys = [None] * len(values)
    base_ts = timestamps_ms[0]
    records = b"".join(
        _encode_record(i, ts - base_ts, k, v)
        for i, (ts, k, v) in enumerate(zip(timestamps_ms, keys, values, strict=True))
    )
    body_after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        len(values) - 1,
        base_ts,
        max(timestamps_ms),
        producer_id,
        producer_epoch,
        base_sequence,
        len(values),
    ) + records
    crc = crc32c.crc32c(body_after_crc)
    batch_length = 4 + 1 + 4 + len(body_after_crc)
    return (
        struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch,
                    CURRENT_MAGIC, crc)
        + body_after_crc
    )


class BatchRecord(NamedTuple):
    """One record of an uncompressed batch, as :func:`read_records` returns it."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


def read_records(buf: bytes | bytearray | memoryview, header: BatchHeader,
                 start: int) -> list[BatchRecord]:
    """Every record of the uncompressed batch at ``start`` (null keys and values stay None).

    For the broker's own topics (``__consumer_offsets``) and tests: the
    request path never decodes records. Raises CorruptMessageError when a
    record runs past the end of the batch.
    """
    view = memoryview(buf)
    end = start + header.batch_length + LOG_OVERHEAD
    log_append_time = header.is_log_append_time
    out: list[BatchRecord] = []
    for off_delta, ts_delta, pos, _record_end in _walk(view, header, start, end):
        key, pos = _read_bytes(view, pos, end)
        value, pos = _read_bytes(view, pos, end)
        ts = header.max_timestamp if log_append_time else header.base_timestamp + ts_delta
        out.append(BatchRecord(header.base_offset + off_delta, ts, key, value))
    return out


def records_section(buf: bytes | bytearray | memoryview, header: BatchHeader,
                    start: int) -> bytes | memoryview | None:
    """The records section of the batch at ``start`` as plain bytes: a view of it, or
    decompressed (CorruptMessageError if its codec does not decode it); None if it
    inflates past INFLATE_CHECK_MAX_BYTES."""
    body = memoryview(buf)[start + HEADER_SIZE:start + header.batch_length + LOG_OVERHEAD]
    if not header.compression:
        return body
    return decompress_bounded(header.compression, body, INFLATE_CHECK_MAX_BYTES,
                              header.position)


def iter_record_timestamps(buf: bytes | bytearray | memoryview, header: BatchHeader,
                           start: int) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of the batch at ``start``, lazily (a caller
    stops at the first it wants), decompressing a compressed one.

    CorruptMessageError when the batch cannot be read: it inflates past
    INFLATE_CHECK_MAX_BYTES, its codec does not decode, it claims more records than
    its bytes can hold (a record takes at least 7), or a record is damaged. Needed
    only by ListOffsets-by-time, on one batch: as Kafka's FileRecords
    .searchForTimestamp, the answer is a record's offset and timestamp, not its
    batch's.
    """
    section = records_section(buf, header, start)
    if section is None:
        raise CorruptMessageError(f"batch at byte {header.position} not read: it "
                                  f"inflates past {INFLATE_CHECK_MAX_BYTES} bytes")
    view, pos, end = memoryview(section), 0, len(section)
    if header.records_count > (end - pos) // _MIN_RECORD_BYTES:
        raise CorruptMessageError(f"batch at byte {header.position} claims "
                                  f"{header.records_count} records in {end - pos} bytes")
    base_offset = header.base_offset
    walk = _walk_records(view, header.records_count, pos, end)
    if header.is_log_append_time:
        max_ts = header.max_timestamp
        for off_delta, _ts, _pos, _end in walk:
            yield base_offset + off_delta, max_ts
        return
    base_ts = header.base_timestamp
    for off_delta, ts_delta, _pos, _end in walk:
        yield base_offset + off_delta, base_ts + ts_delta


# The smallest record: its length, attributes, timestamp and offset deltas, key and value
# lengths, header count: one byte each.
_MIN_RECORD_BYTES = 7


@functools.cache
def record_codecs() -> dict[int, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]]:
    """Kafka's codecs by attribute value: (decode, encode), where the library is there."""
    from kafka import codec

    out: dict[int, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {}
    if codec.has_gzip():
        out[1] = (codec.gzip_decode, codec.gzip_encode)
    if codec.has_snappy():
        out[2] = (codec.snappy_decode, codec.snappy_encode)
    if codec.has_lz4():
        out[3] = (codec.lz4_decode, codec.lz4_encode)
    if codec.has_zstd():
        out[4] = (codec.zstd_decode, codec.zstd_encode)
    return out


GZIP = 1  # the attributes' compression codec of a gzip batch
SNAPPY = 2
LZ4 = 3
ZSTD = 4
# The most a compressed batch is inflated to read its records' timestamps on the produce
# path: a small batch may inflate to gigabytes (all zeros), which must not stall or take
# down its shard; past it the batch is judged by its header, as an unreadable one is.
INFLATE_CHECK_MAX_BYTES = 16 << 20
_XERIAL_MAGIC = b"\x82SNAPPY\x00"  # the xerial snappy framing Kafka's clients write
_XERIAL_HEADER_SIZE = 16  # magic (8), version (4), compatible version (4)


# Kafka's clients write one gzip member or lz4 frame per batch; a reader takes a few
# concatenated ones (Java's GZIPInputStream does), but each further one restarts the
# codec on what is left (its libraries copy that rest): more than this is refused as
# corrupt, so the work stays linear in the batch.
MAX_COMPRESSED_STREAMS = 16
_INFLATE_CHUNK = 1 << 20  # the most produced by one call of a codec (lz4, zstd)


def decompress_bounded(codec: int, body: bytes | memoryview, limit: int,
                       position: int) -> bytes | None:
    """The records section ``body`` of a batch compressed with ``codec`` (1 gzip, 2
    snappy, 3 lz4, 4 zstd), decompressed; None if that is more than ``limit`` bytes,
    which is found out without producing much more than ``limit`` bytes (a small batch
    may inflate to gigabytes).

    CorruptMessageError (Kafka's CORRUPT_MESSAGE) for data its codec does not decode:
    a stream its library refuses or that is cut short, more than
    MAX_COMPRESSED_STREAMS gzip members or lz4 frames, or a codec none of Kafka's;
    ``position`` (the batch's byte) names it. Only the libraries' own errors for a bad
    stream are turned into it: anything else (a missing library, no memory) is raised
    as it is."""
    import lz4.frame  # noqa: F401 (imported here: the codecs load on first use)
    import snappy
    import zstandard

    codec_errors = (zlib.error, snappy.UncompressError, RuntimeError, zstandard.ZstdError)
    try:
        if codec == GZIP:
            return _gunzip_bounded(memoryview(body), limit, position)
        if codec == SNAPPY:
            return _unsnappy_bounded(bytes(body), limit, position)
        if codec == LZ4:
            return _unlz4_bounded(memoryview(body), limit, position)
        if codec == ZSTD:
            return _unzstd_bounded(bytes(body), limit)
    except codec_errors as exc:  # lz4.frame's is RuntimeError
        raise CorruptMessageError(f"record batch at byte {position} does not "
                                  f"decompress: {exc}") from None
    raise CorruptMessageError(f"record batch at byte {position} has compression codec "
                              f"{codec}, which is none of Kafka's (0 to 4)")


def _too_many_streams(position: int, what: str) -> CorruptMessageError:
    return CorruptMessageError(
        f"record batch at byte {position} does not decompress: it holds more than "
        f"{MAX_COMPRESSED_STREAMS} {what} (Kafka's clients write one)")


def _gunzip_bounded(data: memoryview, limit: int, position: int) -> bytes | None:
    out = bytearray()
    offset = 0
    members = 0
    while offset < len(data):
        members += 1
        if members > MAX_COMPRESSED_STREAMS:
            raise _too_many_streams(position, "gzip members")
        inflater = zlib.decompressobj(wbits=31)  # gzip framing
        out += inflater.decompress(data[offset:], limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            return None
        if not inflater.eof:
            raise CorruptMessageError(f"record batch at byte {position} does not "
                                      f"decompress: its gzip stream is cut short")
        offset = len(data) - len(inflater.unused_data)
    return bytes(out)


def _snappy_length(block: bytes, position: int) -> int:
    """The uncompressed length a raw snappy block states first (a little-endian varint)."""
    length = shift = 0
    for byte in block[:5]:
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length
        shift += 7
    raise CorruptMessageError(f"record batch at byte {position} does not decompress: a "
                              f"snappy block's length is not a varint of at most 5 bytes")


def _unsnappy_bounded(data: bytes, limit: int, position: int) -> bytes | None:
    """Kafka's snappy: xerial framing (a header, then blocks each after its big-endian
    int32 length), or one raw snappy block; each block states its length before it is
    decompressed, so the bound is checked first."""
    import snappy

    if not (len(data) > _XERIAL_HEADER_SIZE and data.startswith(_XERIAL_MAGIC)):
        if _snappy_length(data, position) > limit:
            return None
        return bytes(snappy.decompress(data))
    out = bytearray()
    cursor = _XERIAL_HEADER_SIZE
    while cursor < len(data):
        if cursor + 4 > len(data):
            raise CorruptMessageError(f"record batch at byte {position} does not "
                                      f"decompress: its snappy stream is cut short")
        (size,) = _I.unpack_from(data, cursor)
        block = data[cursor + 4:cursor + 4 + size]
        if size < 0 or len(block) != size:
            raise CorruptMessageError(f"record batch at byte {position} does not "
                                      f"decompress: a snappy block runs past its end")
        if len(out) + _snappy_length(block, position) > limit:
            return None
        out += snappy.decompress(block)
        cursor += 4 + size
    return bytes(out)


def _unlz4_bounded(data: memoryview, limit: int, position: int) -> bytes | None:
    import lz4.frame

    out = bytearray()
    offset = 0
    frames = 0
    while offset < len(data):
        frames += 1
        if frames > MAX_COMPRESSED_STREAMS:
            raise _too_many_streams(position, "lz4 frames")
        decompressor = lz4.frame.LZ4FrameDecompressor()
        pending: bytes | memoryview = data[offset:]
        while True:  # the frame's output a chunk at a time (each call allocates its max)
            out += decompressor.decompress(
                pending, max_length=min(_INFLATE_CHUNK, limit + 1 - len(out)))
            pending = b""
            if len(out) > limit:
                return None
            if decompressor.eof:
                break
            if decompressor.needs_input:
                raise CorruptMessageError(f"record batch at byte {position} does not "
                                          f"decompress: its lz4 frame is cut short")
        offset = len(data) - len(decompressor.unused_data or b"")  # None: none left
    return bytes(out)


def _unzstd_bounded(data: bytes, limit: int) -> bytes | None:
    """Read a chunk at a time (not ``limit`` allocated up front), with the frame's
    window bounded by the power of two at or above ``limit`` (a window past the whole
    output is never needed; a frame that asks for more is refused by the library)."""
    import io

    import zstandard

    window = 1 << max(limit.bit_length(), 10)
    decompressor = zstandard.ZstdDecompressor(max_window_size=window)
    out = bytearray()
    with decompressor.stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
        while len(out) <= limit:
            chunk = reader.read(min(_INFLATE_CHUNK, limit + 1 - len(out)))
            if not chunk:
                return bytes(out)
            out += chunk
    return None


def compress(codec: int, data: bytes) -> bytes:
    """``data`` (a records section) compressed with ``codec`` as Kafka's clients do it:
    gzip at zlib's default level (Kafka's), snappy in xerial framing, lz4 as one frame
    of independent blocks, zstd at its default level."""
    if codec == GZIP:
        deflater = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 31)
        return deflater.compress(data) + deflater.flush()
    if codec in (SNAPPY, LZ4, ZSTD):
        return record_codecs()[codec][1](data)
    raise ValueError(f"compression codec {codec} is none of gzip, snappy, lz4, zstd (1-4)")


def record_timestamps(buf: bytes | bytearray | memoryview,
                      header: BatchHeader) -> list[int] | None:
    """The CreateTime timestamp of each record of the (checked) batch ``header``, in
    order, decompressing a compressed batch; None for one that inflates past
    INFLATE_CHECK_MAX_BYTES.

    Kafka validates each record's timestamp, not the header's first and max: a
    record may be older than the first (deltas are signed), and the header's max
    is the client's claim.
    """
    body = records_section(buf, header, header.position)
    if body is None:
        return None
    base = header.base_timestamp
    try:
        deltas = record_timestamp_deltas(body, header.records_count)
    except CorruptMessageError as exc:
        raise CorruptMessageError(f"record batch at byte {header.position}: {exc}") from None
    return [base + delta for delta in deltas]


def records_without_key(buf: bytes | bytearray | memoryview,
                        header: BatchHeader) -> list[int] | None:
    """The index in its batch of each record of the (checked) batch ``header`` that has
    no key, decompressing a compressed batch; None for one that inflates past
    INFLATE_CHECK_MAX_BYTES."""
    body = records_section(buf, header, header.position)
    if body is None:
        return None
    view, end = memoryview(body), len(body)
    missing: list[int] = []
    try:
        for i, (_off, _ts, pos, _record_end) in enumerate(
                _walk_records(view, header.records_count, 0, end)):
            if _read_varint(view, pos, end)[0] < 0:
                missing.append(i)
    except CorruptMessageError as exc:
        raise CorruptMessageError(f"record batch at byte {header.position}: {exc}") from None
    return missing


def record_timestamp_deltas(records: bytes | memoryview, count: int) -> list[int]:
    """The timestamp delta of each of the ``count`` records of a (decompressed) records
    section: CorruptMessageError for a record that runs past its end."""
    view = memoryview(records)
    end = len(view)
    out: list[int] = []
    pos = 0
    for _ in range(count):
        length, pos = _read_varint(view, pos, end)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise CorruptMessageError("record runs past the end of its batch")
        out.append(_read_varint(view, pos + 1, record_end)[0])  # after the attributes
        pos = record_end
    return out


def renumbered_records(records: bytes | memoryview, count: int,
                       zero_timestamps: bool = False) -> tuple[bytes | memoryview, list[int]]:
    """The ``count`` records of a (decompressed) records section with each one's offset
    delta set to its index, 0 to count - 1 (Kafka's rebuilt batch assigns them so: a
    client's repeated or skipped deltas are not kept), and each one's timestamp delta
    (with ``zero_timestamps`` every one set to 0: the records of a batch a client stamped
    LogAppendTime all take its max timestamp). The section as it is when every delta is
    right already.

    InvalidRecordError (Kafka's INVALID_RECORD, as its premature EOF) for a record that
    runs past the end of the section or bytes after the last one.
    """
    view = memoryview(records)
    end = len(view)
    timestamp_deltas: list[int] = []
    pieces: list[bytes | memoryview] | None = None
    pos = 0
    try:
        for index in range(count):
            start = pos
            length, pos = _read_varint(view, pos, end)
            record_end = pos + length
            if length < 0 or record_end > end:
                raise InvalidRecordError(f"its record {index} runs past the end of its "
                                         f"{count} records")
            timestamp_delta, at_offset = _read_varint(view, pos + 1, record_end)
            offset_delta, after_offset = _read_varint(view, at_offset, record_end)
            if zero_timestamps:
                timestamp_delta, zeroed = 0, timestamp_delta != 0
            else:
                zeroed = False
            timestamp_deltas.append(timestamp_delta)
            if offset_delta != index or zeroed:
                if pieces is None:
                    pieces = [view[:start]]
                body = (bytes(view[pos:pos + 1])  # attributes
                        + (b"\x00" if zero_timestamps else bytes(view[pos + 1:at_offset]))
                        + _zigzag_varint(index) + bytes(view[after_offset:record_end]))
                pieces.append(_zigzag_varint(len(body)) + body)
            elif pieces is not None:
                pieces.append(view[start:record_end])
            pos = record_end
    except CorruptMessageError as exc:  # a varint cut short or too long
        raise InvalidRecordError(f"its record {len(timestamp_deltas)} is cut short: "
                                 f"{exc}") from None
    if pos != end:
        raise InvalidRecordError(f"{end - pos} bytes after its {count} records")
    return (records if pieces is None else b"".join(pieces)), timestamp_deltas


def _walk(view: memoryview, header: BatchHeader, start: int,
          end: int) -> Iterator[tuple[int, int, int, int]]:
    """Per record: (offset delta, timestamp delta, position of its key, end of the record)."""
    return _walk_records(view, header.records_count, start + HEADER_SIZE, end)


def _walk_records(view: memoryview, count: int, pos: int,
                  end: int) -> Iterator[tuple[int, int, int, int]]:
    """_walk over ``count`` records starting at ``pos`` (a batch's or an inflated section's)."""
    for _ in range(count):
        length, pos = _read_varint(view, pos, end)
        record_end = pos + length
        if record_end > end or length < 0:
            raise CorruptMessageError("record runs past the end of its batch")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(view, pos, end)
        off_delta, pos = _read_varint(view, pos, end)
        yield off_delta, ts_delta, pos, record_end
        pos = record_end


def _read_bytes(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    """A key or value: a zigzag varint length (-1: null), then that many bytes."""
    length, pos = _read_varint(view, pos, end)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptMessageError("record truncated inside a key or value")
    return bytes(view[pos:pos + length]), pos + length


def _read_varint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's record fields) at ``pos``, not reading at or past ``end``."""
    shift = 0
    raw = 0
    while True:
        if pos >= end:
            raise CorruptMessageError("record truncated inside a varint")
        byte = view[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptMessageError("varint longer than 10 bytes in a record")


class RecordSpan(NamedTuple):
    """One record inside a (decompressed) records section: its bytes and what the log
    cleaner needs to decide on it."""

    start: int
    end: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value_is_null: bool


def restamp_record(records: bytes | bytearray | memoryview, span: RecordSpan,
                   timestamp_delta: int) -> bytes:
    """The record at ``span`` of a records section with its timestamp delta replaced (its
    batch gets a new base timestamp; the record's own time stays): the rest of its bytes
    unchanged, its length prefix re-encoded."""
    view = memoryview(records)
    _length, pos = _read_varint(view, span.start, span.end)
    _old, after = _read_varint(view, pos + 1, span.end)  # after the attributes byte
    body = bytes(view[pos:pos + 1]) + _zigzag_varint(timestamp_delta) + bytes(view[after:span.end])
    return _zigzag_varint(len(body)) + body


def record_spans(records: bytes | bytearray | memoryview, count: int) -> list[RecordSpan]:
    """The ``count`` records of a records section (a batch's bytes after its header,
    decompressed), each with its byte span, so a record can be copied unchanged."""
    view = memoryview(records)
    end = len(view)
    out: list[RecordSpan] = []
    pos = 0
    for _ in range(count):
        start = pos
        length, pos = _read_varint(view, pos, end)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise CorruptMessageError("record runs past the end of its batch")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(view, pos, record_end)
        off_delta, pos = _read_varint(view, pos, record_end)
        key, pos = _read_bytes(view, pos, record_end)
        value_len, pos = _read_varint(view, pos, record_end)
        out.append(RecordSpan(start, record_end, off_delta, ts_delta, key, value_len < 0))
        pos = record_end
    return out
