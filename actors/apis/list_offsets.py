"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3) or by timestamp."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.apis.base import ApiGen, Call, HandlerContext, Respond, group_by_shard
from actors.security.acl import Operation, ResourceType
from wire.broker_messages import ListOffsets, ListOffsetsDone, ListOffsetsDoneRow, ListOffsetsRow
from wire.errors import ErrorCode


def _list_offsets(isolation: int, rows: list[ListOffsetsRow]) -> Callable[[int], ListOffsets]:
    return lambda rid: ListOffsets(rid, isolation, rows)


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
            Call(shard, _list_offsets(isolation, shard_rows))
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
