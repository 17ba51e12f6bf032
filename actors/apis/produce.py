"""Produce: append whole batches on the partitions' shards; acks 0, 1 and -1."""

from __future__ import annotations

import struct
from typing import Any

from actors.apis.base import ApiGen, Call, HandlerContext, Respond, group_by_shard
from wire.broker_messages import Append
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)


_MAGIC_AT = 16  # base offset (8), batch length (4), partition leader epoch (4)
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21  # after the magic byte and the CRC (4)
_BATCH_LENGTH = struct.Struct(">i")
_ZSTD = 4


def _check_records(records: bytes, api_version: int) -> tuple[ErrorCode, str] | None:
    """Kafka's per-partition Produce checks that need only the first batch header.

    Produce v3+ carries exactly one magic-2 batch per partition, and zstd
    only from v7 (ProduceRequest.validateRecords in Kafka). The batch itself
    (CRC, lengths, offsets) is validated where it is appended.
    """
    if len(records) <= _ATTRIBUTES_AT + 2:
        return None  # too short to read: the log refuses it as corrupt
    magic = records[_MAGIC_AT]
    if magic != 2:
        return (ErrorCode.INVALID_RECORD,
                f"Produce v{api_version} requests may only carry magic 2 record batches, "
                f"got magic {magic}")
    (length,) = _BATCH_LENGTH.unpack_from(records, 8)
    if 12 + length < len(records):
        return (ErrorCode.INVALID_RECORD,
                f"Produce v{api_version} requests may carry exactly one record batch per "
                f"partition")
    (attributes,) = _ATTRIBUTES.unpack_from(records, _ATTRIBUTES_AT)
    if attributes & 0x07 == _ZSTD and api_version < 7:
        return (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"zstd compressed batches need Produce v7 or later, got v{api_version}")
    return None


def handle_produce(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    acks = req.acks
    results: dict[tuple[str, int], list[Any]] = {}
    rows: list[list[Any]] = []
    order: list[tuple[str, list[int]]] = []
    for topic_data in req.topic_data:
        name = topic_data.name
        indexes = []
        count = ctx.partition_count(name)
        for pd in topic_data.partition_data:
            indexes.append(pd.index)
            key = (name, pd.index)
            if acks not in (-1, 0, 1):
                results[key] = [int(ErrorCode.INVALID_REQUIRED_ACKS), -1, -1, -1,
                                f"acks must be -1, 0 or 1, got {acks}"]
            elif req.transactional_id is not None:
                results[key] = [int(ErrorCode.INVALID_REQUEST), -1, -1, -1,
                                "transactions are not supported"]
            elif count is None or not 0 <= pd.index < count:
                results[key] = [int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1, -1, -1, None]
            elif not pd.records:
                results[key] = [int(ErrorCode.INVALID_RECORD), -1, -1, -1, "no records"]
            else:
                refusal = _check_records(pd.records, header.api_version)
                if refusal is not None:
                    results[key] = [int(refusal[0]), -1, -1, -1, refusal[1]]
                else:
                    rows.append([name, pd.index, bytes(pd.records)])
        order.append((name, indexes))

    if rows:
        calls = [
            Call(shard, lambda rid, r=shard_rows: Append(rid, acks, req.timeout_ms, r))
            for shard, shard_rows in group_by_shard(ctx, rows).items()
        ]
        replies = yield calls
        for reply in replies:  # AppendDone, or ProduceReady after an acks=-1 wait
            for topic, partition, error, base, lat, lso, message in reply.rows:
                results[(topic, partition)] = [error, base, lat, lso, message]

    if acks == 0:
        failed = any(r[0] != NONE for r in results.values())
        # Kafka closes the connection after a failed acks=0 produce, so the
        # client refreshes its metadata; otherwise nothing is sent.
        return Respond(None, respond=False, close=failed)

    return Respond({
        "throttle_time_ms": 0,
        "responses": [
            {
                "name": name,
                "partition_responses": [
                    {
                        "index": index,
                        "error_code": results[(name, index)][0],
                        "base_offset": results[(name, index)][1],
                        "log_append_time_ms": results[(name, index)][2],
                        "log_start_offset": results[(name, index)][3],
                        "error_message": results[(name, index)][4],
                    }
                    for index in indexes
                ],
            }
            for name, indexes in order
        ],
    })
