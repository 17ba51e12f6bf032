"""A topic's compression.type: the leader re-encodes a producer's batch whose codec differs.

Kafka's LogValidator, when the source and target codecs differ: the batch is
decompressed, its records checked (as many as its header counts, nothing
after them), their offset deltas set to 0, 1, ... (buildRecordsAndAssignOffsets
assigns each record its offset, whatever the client wrote), and written again
with the target codec. The timestamp type is the topic's and the max timestamp
is taken from the records, as Kafka's rebuilt batch has them (on a
LogAppendTime topic the leader then stamps its time, as on every batch). The
rest stays: the records' other bytes (timestamp deltas, keys, values, headers),
the producer id, epoch and base sequence, the transactional bit.

Control batches never come here: clients may not send them, and the broker's
own appends (markers, the coordinators' records) are not re-encoded.

``producer`` (the default) keeps every batch as sent and never reaches this
module: the leader's single-batch fast path stays the default's path.
"""

from __future__ import annotations

import crc32c

from actors.core.record_batch import (
    AFTER_CRC,
    COMPRESSION_MASK,
    CURRENT_MAGIC,
    HEAD_TO_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    compress,
    decompress_bounded,
    renumbered_records,
)
from wire.errors import InvalidRecordError, MessageTooLargeError

PRODUCER = "producer"
# compression.type -> the attributes' codec of the batches it keeps (None: as sent)
COMPRESSION_TYPES: dict[str, int | None] = {
    PRODUCER: None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4,
}


def recompress(records: bytes | bytearray | memoryview, headers: list[BatchHeader],
               codec: int, inflate_limit: int, log_append_time: bool) -> bytes | None:
    """The checked batches of ``records`` with each whose codec is not ``codec``
    re-encoded with it (with the topic's timestamp type: ``log_append_time``); None
    when every batch has it already (nothing to do).

    A batch that decompresses past ``inflate_limit`` bytes is refused
    (MessageTooLargeError) before more than that is produced; one whose codec
    does not decode it is refused as corrupt (CorruptMessageError), and one whose
    records do not match its count as invalid (InvalidRecordError).
    """
    if all(header.attributes & COMPRESSION_MASK == codec for header in headers):
        return None
    view = memoryview(records)
    out: list[bytes | memoryview] = []
    for header in headers:
        start, end = header.position, header.position + header.size
        if header.attributes & COMPRESSION_MASK == codec:
            out.append(view[start:end])
            continue
        section = view[start + HEADER_SIZE:end]
        plain: bytes | memoryview = section
        if header.compression:
            inflated = decompress_bounded(header.compression, section, inflate_limit, start)
            if inflated is None:
                raise MessageTooLargeError(
                    f"record batch at byte {start} decompresses to more than "
                    f"{inflate_limit} bytes, the most the broker inflates to re-encode it "
                    f"(the larger of max.message.bytes and 16 MiB)")
            plain = inflated
        out.append(_rebuilt(header, plain, codec, log_append_time))
    return b"".join(out)


def _rebuilt(header: BatchHeader, plain: bytes | memoryview, codec: int,
             log_append_time: bool) -> bytes:
    """The batch of ``header`` with the records section ``plain``, its offset deltas
    renumbered, encoded with ``codec``. A batch the client stamped LogAppendTime, on a
    CreateTime topic (refused on a LogAppendTime one before this), has its records read
    at its max timestamp, as Kafka's LogValidator reads them: rebuilt, each record has
    that time (the time its bounds were checked at)."""
    stamped = bool(header.attributes & TIMESTAMP_TYPE_BIT) and not log_append_time
    try:
        renumbered, deltas = renumbered_records(plain, header.records_count,
                                                zero_timestamps=stamped)
    except InvalidRecordError as exc:
        raise InvalidRecordError(f"record batch at byte {header.position} does not hold "
                                 f"the {header.records_count} records it counts: "
                                 f"{exc}") from None
    base_timestamp = header.max_timestamp if stamped else header.base_timestamp
    max_timestamp = base_timestamp + max(deltas)
    body = compress(codec, bytes(renumbered)) if codec else renumbered
    attributes = (header.attributes & ~(COMPRESSION_MASK | TIMESTAMP_TYPE_BIT)) | codec
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_BIT
    after_crc = AFTER_CRC.pack(
        attributes, header.last_offset_delta, base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence,
        header.records_count)
    crc = crc32c.crc32c(body, crc32c.crc32c(after_crc))
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    return b"".join((HEAD_TO_MAGIC.pack(header.base_offset, batch_length,
                                        header.partition_leader_epoch, CURRENT_MAGIC),
                     crc.to_bytes(4, "big"), after_crc, body))
