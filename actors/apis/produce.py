"""Produce: append whole batches on the partitions' shards; acks 0, 1 and -1."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from actors.apis.base import ApiGen, Call, HandlerContext, Respond, group_by_shard
from actors.core.topic_config import ADMIN_CLIENT_ID, INTERNAL_TOPICS
from actors.security.acl import Operation, ResourceType
from wire.broker_messages import Append, AppendDone, AppendDoneRow, AppendRow, ProduceReady
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


def _append(acks: int, timeout_ms: int, rows: list[AppendRow],
            generation: int) -> Callable[[int], Append]:
    return lambda rid: Append(rid, acks, timeout_ms, rows, False, generation)


def _partition_response(index: int, r: AppendDoneRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "index": index,
        "error_code": r.error_code,
        "base_offset": r.base_offset,
        "log_append_time_ms": r.log_append_time_ms,
        "log_start_offset": r.log_start_offset,
        "error_message": r.error_message,
    }
    if r.record_errors:  # Produce v8+; older versions drop the field
        out["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                for i, m in r.record_errors]
    return out


def handle_produce(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    acks = req.acks
    results: dict[tuple[str, int], AppendDoneRow] = {}
    rows: list[AppendRow] = []
    order: list[tuple[str, list[int]]] = []

    def refuse(name: str, index: int, code: ErrorCode, message: str | None) -> None:
        results[(name, index)] = AppendDoneRow(name, index, int(code), -1, -1, -1, message)

    txn = getattr(req, "transactional_id", None)
    txn_denied = bool(txn) and not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                               str(txn))
    for topic_data in req.topic_data:
        name = topic_data.name
        indexes = []
        count = ctx.partition_count(name)
        # a client's record in a coordinator's topic would be read back as its state
        internal = name in INTERNAL_TOPICS and header.client_id != ADMIN_CLIENT_ID
        denied = txn_denied or (ctx.authorizer is not None
                                and not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, name))
        for pd in topic_data.partition_data:
            indexes.append(pd.index)
            if denied:
                refuse(name, pd.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                       if txn_denied else ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
            elif acks not in (-1, 0, 1):
                refuse(name, pd.index, ErrorCode.INVALID_REQUIRED_ACKS,
                       f"acks must be -1, 0 or 1, got {acks}")
            elif count is None or not 0 <= pd.index < count:
                refuse(name, pd.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            elif not pd.records:
                refuse(name, pd.index, ErrorCode.INVALID_RECORD, "no records")
            elif (refusal := _check_records(pd.records, header.api_version)) is not None:
                refuse(name, pd.index, refusal[0], refusal[1])
            # Kafka's order: the partition and the records are checked by KafkaApis, the
            # internal topic and the leader by ReplicaManager.appendToLocalLog after them
            elif internal:
                # Kafka sends no error_message with this refusal; ours says why
                refuse(name, pd.index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                       f"Cannot append to internal topic {name}")
            elif ctx.not_leader(name, pd.index):
                refuse(name, pd.index, ErrorCode.NOT_LEADER_OR_FOLLOWER, None)
            else:
                rows.append(AppendRow(name, pd.index, bytes(pd.records)))
        order.append((name, indexes))

    if rows:
        # each stamped with the generation of its shard's process this handler knows: sent
        # in this turn, before any ProcessStarted that makes the handler give it up
        generations = ctx.process_generations
        calls = [
            Call(shard, _append(acks, req.timeout_ms, shard_rows,
                                generations.get(shard.node, 0)))
            for shard, shard_rows in group_by_shard(ctx, rows).items()
        ]
        replies: list[AppendDone | ProduceReady] = yield calls
        for reply in replies:  # AppendDone, or ProduceReady after an acks=-1 wait
            for row in reply.rows:
                results[(row.topic, row.partition)] = row

    if acks == 0:
        failed = any(r.error_code != NONE for r in results.values())
        # Kafka closes the connection after a failed acks=0 produce, so the
        # client refreshes its metadata; otherwise nothing is sent.
        return Respond(None, respond=False, close=failed)

    responses = []
    codes = []  # the response's error codes, for the errors metric (no walk of the dict)
    for name, indexes in order:
        partitions = []
        for index in indexes:
            row = results[(name, index)]
            if row.error_code:
                codes.append(row.error_code)
            partitions.append(_partition_response(index, row))
        responses.append({"name": name, "partition_responses": partitions})
    return Respond({"throttle_time_ms": 0, "responses": responses}, error_codes=codes)
