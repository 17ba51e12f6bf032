"""A topic's compression.type: the leader re-encodes a producer's batch whose codec differs.

Kafka's LogValidator, when the source and target codecs differ: the batch is
decompressed, its records checked (as many as its header counts, nothing
after them), and written again with the target codec. Everything else of the
batch stays: the records' bytes (offset and timestamp deltas, keys, values,
headers), the producer id, epoch and base sequence, the transactional and
timestamp-type bits. The max timestamp is taken from the records, as Kafka's
rebuilt batch has it. An uncompressed control batch stays uncompressed
("do not compress control records unless they are written compressed").

``producer`` (the default) keeps every batch as sent and never reaches this
module: the leader's single-batch fast path stays the default's path.
"""

from __future__ import annotations

import crc32c

from actors.core.record_batch import (
    AFTER_CRC,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CURRENT_MAGIC,
    HEAD_TO_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    compress,
    decompress_bounded,
    record_timestamp_deltas,
)
from wire.errors import CorruptMessageError, InvalidRecordError, MessageTooLargeError

PRODUCER = "producer"
# compression.type -> the attributes' codec of the batches it keeps (None: as sent)
COMPRESSION_TYPES: dict[str, int | None] = {
    PRODUCER: None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4,
}


def _kept(header: BatchHeader, codec: int) -> bool:
    attributes = header.attributes
    return (attributes & COMPRESSION_MASK == codec
            or (attributes & CONTROL_BIT != 0 and attributes & COMPRESSION_MASK == 0))


def recompress(records: bytes | bytearray | memoryview, headers: list[BatchHeader],
               codec: int, inflate_limit: int) -> bytes | None:
    """The checked batches of ``records`` with each whose codec is not ``codec``
    re-encoded with it; None when every batch has it already (nothing to do).

    A batch that decompresses past ``inflate_limit`` bytes is refused
    (MessageTooLargeError) before more than that is produced; one whose codec
    does not decode it, or whose records do not match its count, is refused too
    (CorruptMessageError, InvalidRecordError).
    """
    if all(_kept(header, codec) for header in headers):
        return None
    view = memoryview(records)
    out: list[bytes | memoryview] = []
    for header in headers:
        start, end = header.position, header.position + header.size
        if _kept(header, codec):
            out.append(view[start:end])
            continue
        section = view[start + HEADER_SIZE:end]
        if header.compression:
            plain = decompress_bounded(header.compression, section, inflate_limit, start)
            if plain is None:
                raise MessageTooLargeError(
                    f"record batch at byte {start} decompresses to more than "
                    f"{inflate_limit} bytes, the most the broker inflates to re-encode it "
                    f"(the larger of max.message.bytes and 16 MiB)")
        else:
            plain = bytes(section)
        out.append(_rebuilt(header, plain, codec))
    return b"".join(out)


def _rebuilt(header: BatchHeader, plain: bytes, codec: int) -> bytes:
    """The batch of ``header`` with the records section ``plain`` encoded with ``codec``."""
    where = f"record batch at byte {header.position}"
    try:
        deltas = record_timestamp_deltas(plain, header.records_count)
    except CorruptMessageError as exc:
        raise CorruptMessageError(f"{where} does not hold the {header.records_count} "
                                  f"records it counts: {exc}") from None
    except InvalidRecordError as exc:
        raise InvalidRecordError(f"{where} has {exc}") from None
    max_timestamp = header.max_timestamp
    if not header.attributes & TIMESTAMP_TYPE_BIT:
        max_timestamp = header.base_timestamp + max(deltas)
    body = compress(codec, plain) if codec else plain
    attributes = (header.attributes & ~COMPRESSION_MASK) | codec
    after_crc = AFTER_CRC.pack(
        attributes, header.last_offset_delta, header.base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence,
        header.records_count)
    crc = crc32c.crc32c(body, crc32c.crc32c(after_crc))
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    return (HEAD_TO_MAGIC.pack(header.base_offset, batch_length,
                                header.partition_leader_epoch, CURRENT_MAGIC)
            + crc.to_bytes(4, "big") + after_crc + body)
