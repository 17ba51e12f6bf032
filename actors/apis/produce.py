"""Produce: append whole batches on the partitions' shards; acks 0, 1 and -1.

Each shard's Append has a deadline (``produce_deadline_ms``): with num.processes > 1 the
shard may live in a process that does not answer (paused, or not ready after a restart),
and the client is then answered REQUEST_TIMED_OUT for that shard's partitions by its own
timeout instead of waiting for that process (or for the handler's abandon, which closes
the connection). As with Kafka's acks=all timeouts, REQUEST_TIMED_OUT is retriable and says
nothing of the append: the Append waits in the link and may still be written when that
process runs again (a process restarted meanwhile refuses it by its generation stamp).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

from actors.apis.base import (
    WRITE_DEADLINE_GRACE_MS,
    ApiGen,
    Call,
    HandlerContext,
    Respond,
    group_by_shard,
)
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


# How long after timeout_ms an unanswered Append is answered by its deadline: an acks=-1
# wait that the ISR does not end is ended at timeout_ms by the purgatory of the shard's
# process (REQUEST_TIMED_OUT, with the append's offsets), one link hop away; that answer
# comes first unless the process is stuck (a leader's own append, which Kafka never times
# out, is never answered in error for being late by less than this on a loaded host).
PRODUCE_DEADLINE_GRACE_MS = WRITE_DEADLINE_GRACE_MS
# The longest a handler waits for a shard's process, whatever timeout_ms says (up to
# 2^31 - 1 ms, 24 days); librdkafka's default message.timeout.ms.
PRODUCE_DEADLINE_CAP_MS = 300_000


@functools.lru_cache(maxsize=256)  # a client's few (acks, timeout_ms): no Python call a request
def produce_deadline_ms(acks: int, timeout_ms: int, request_timeout_ms: int) -> int:
    """How long a Produce's handler waits for a shard's answer before it answers that
    shard's partitions REQUEST_TIMED_OUT itself.

    Kafka reads timeout_ms for acks=-1 alone (ReplicaManager.appendRecords: the leader's
    append is done in the request's thread whatever the timeout; only the wait for the
    ISR, a DelayedProduce, ends at timeout_ms), so clients send anything with acks 0 and
    1: some 0, most their own request timeout. A deadline of timeout_ms there would time
    out every produce whose timeout_ms is 0 or small on a busy host, an error Kafka never
    gives. So: acks=-1 waits timeout_ms, acks 0 and 1 at least the broker's
    request.timeout.ms (still half the abandon time, and answered instead of closed);
    negative counts as 0, and neither waits past PRODUCE_DEADLINE_CAP_MS; plus the grace
    that lets the purgatory's own REQUEST_TIMED_OUT come first."""
    wait = min(max(0, timeout_ms), PRODUCE_DEADLINE_CAP_MS)
    if acks != -1:
        wait = max(wait, min(max(0, request_timeout_ms), PRODUCE_DEADLINE_CAP_MS))
    return wait + PRODUCE_DEADLINE_GRACE_MS


def _timed_out(rows: list[AppendRow], deadline_ms: int, req_id: int) -> AppendDone:
    """The answer taken for an Append its shard's process did not answer by its deadline."""
    message = (f"the broker process holding this partition did not answer within "
               f"{deadline_ms} ms; the records may still be appended")
    code = int(ErrorCode.REQUEST_TIMED_OUT)
    return AppendDone(req_id, [AppendDoneRow(r.topic, r.partition, code, -1, -1, -1, message)
                               for r in rows])


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
        deadline_ms = produce_deadline_ms(acks, req.timeout_ms,
                                          ctx.config.values["request.timeout.ms"])
        calls = [
            Call(shard, _append(acks, req.timeout_ms, shard_rows,
                                generations.get(shard.node, 0)),
                 deadline_ms=deadline_ms,
                 on_timeout=functools.partial(_timed_out, shard_rows, deadline_ms))
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
