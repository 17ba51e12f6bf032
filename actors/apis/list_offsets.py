"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3) or by timestamp.

Each ListOffsets to a shard of another process of this broker has a deadline
(LIST_OFFSETS_DEADLINE_MS; one to this handler's own process none): a shard whose process
does not answer (num.processes > 1: paused, or restarted and not ready yet) has its
partitions answered NOT_LEADER_OR_FOLLOWER, which clients retry after a metadata refresh
(the Java consumer's OffsetFetcherUtils, librdkafka, kafka-python), while the other
partitions are answered, instead of the whole request waiting for that process until the
handler's abandon (twice request.timeout.ms) closes its connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.apis.base import (
    NOT_LEADER,
    PROMPT_DEADLINE_MS,
    ApiGen,
    Call,
    HandlerContext,
    Respond,
    group_by_shard,
    partitions_timed_out,
    remote_call,
)
from actors.runtime.address import Address
from actors.security.acl import Operation, ResourceType
from wire.broker_messages import ListOffsets, ListOffsetsDone, ListOffsetsDoneRow, ListOffsetsRow
from wire.errors import ErrorCode


def _list_offsets(isolation: int, rows: list[ListOffsetsRow]) -> Callable[[int], ListOffsets]:
    return lambda rid: ListOffsets(rid, isolation, rows)


# How long a handler waits for the ListOffsets of a shard of another process. No max wait
# in the request to go by: an offset by timestamp looks up an index and reads part of a
# segment, in milliseconds (base.PROMPT_DEADLINE_MS).
LIST_OFFSETS_DEADLINE_MS = PROMPT_DEADLINE_MS
# A partition's answer taken for a ListOffsets its shard's process did not answer in time
LIST_OFFSETS_TIMED_OUT = ListOffsetsDoneRow("", -1, NOT_LEADER, -1, -1, -1)


def _call(ctx: HandlerContext, shard: Address, isolation: int,
          rows: list[ListOffsetsRow]) -> Call:
    """A shard's ListOffsets: with a deadline if the shard is of another process."""
    return remote_call(ctx, shard, _list_offsets(isolation, rows), 0,
                       LIST_OFFSETS_DEADLINE_MS,
                       partitions_timed_out(ListOffsetsDone, LIST_OFFSETS_TIMED_OUT, rows), True)


# Kafka's ReplicaManager.timestampMinSupportedVersion: the special (negative) timestamps and
# the first ListOffsets version that may ask them; any other negative timestamp, or one
# asked below its version, is UNSUPPORTED_VERSION for its partition. -4 (earliest local,
# v8) and -5 (latest tiered, v9) are past the v7 actorlog advertises, so unsupported too.
_SPECIAL_TIMESTAMP_MIN_VERSION = {-1: 1, -2: 1, -3: 7, -4: 8, -5: 9}


def _timestamp_unsupported(timestamp: int, version: int) -> bool:
    return timestamp < 0 and version < _SPECIAL_TIMESTAMP_MIN_VERSION.get(timestamp, 1 << 15)


def _partition_response(index: int, r: ListOffsetsDoneRow) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": r.error_code,
        "timestamp": r.timestamp,
        "offset": r.offset,
        "leader_epoch": r.leader_epoch,
    }


def handle_list_offsets(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    isolation = getattr(req, "isolation_level", 0) or 0
    order: list[tuple[str, list[int]]] = []
    results: dict[tuple[str, int], ListOffsetsDoneRow] = {}
    rows: list[ListOffsetsRow] = []
    for t in req.topics:
        count = ctx.partition_count(t.name)
        indexes = []
        denied = not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            indexes.append(p.partition_index)
            current_epoch = ctx.client_epoch(p)  # v4+
            if denied:
                results[(t.name, p.partition_index)] = ListOffsetsDoneRow(
                    t.name, p.partition_index, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    -1, -1, -1)
            elif _timestamp_unsupported(p.timestamp, header.api_version):
                results[(t.name, p.partition_index)] = ListOffsetsDoneRow(
                    t.name, p.partition_index, int(ErrorCode.UNSUPPORTED_VERSION), -1, -1, -1)
            elif count is None or not 0 <= p.partition_index < count:
                results[(t.name, p.partition_index)] = ListOffsetsDoneRow(
                    t.name, p.partition_index, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    -1, -1, -1)
            elif ctx.not_leader(t.name, p.partition_index):
                results[(t.name, p.partition_index)] = ListOffsetsDoneRow(
                    t.name, p.partition_index,
                    ctx.not_leader_code(t.name, p.partition_index, current_epoch), -1, -1, -1)
            else:
                rows.append(ListOffsetsRow(t.name, p.partition_index, p.timestamp,
                                           current_epoch))
        order.append((t.name, indexes))
    if rows:
        replies: list[ListOffsetsDone] = yield [
            _call(ctx, shard, isolation, shard_rows)
            for shard, shard_rows in group_by_shard(ctx, rows).items()
        ]
        for reply in replies:
            for row in reply.rows:
                results[(row.topic, row.partition)] = row
    return Respond({
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": name,
                "partitions": [_partition_response(i, results[(name, i)]) for i in indexes],
            }
            for name, indexes in order
        ],
    })
