"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3) or by timestamp."""

from __future__ import annotations

from typing import Any

from actors.apis.base import ApiGen, Call, HandlerContext, Respond, group_by_shard
from wire.broker_messages import ListOffsets
from wire.errors import ErrorCode


def handle_list_offsets(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    isolation = getattr(req, "isolation_level", 0) or 0
    order: list[tuple[str, list[int]]] = []
    results: dict[tuple[str, int], list[Any]] = {}
    rows = []
    for t in req.topics:
        count = ctx.partition_count(t.name)
        indexes = []
        for p in t.partitions:
            indexes.append(p.partition_index)
            if count is None or not 0 <= p.partition_index < count:
                results[(t.name, p.partition_index)] = [
                    int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1, -1, -1]
            else:
                rows.append([t.name, p.partition_index, p.timestamp])
        order.append((t.name, indexes))
    if rows:
        replies = yield [
            Call(shard, lambda rid, r=shard_rows: ListOffsets(rid, isolation, r))
            for shard, shard_rows in group_by_shard(ctx, rows).items()
        ]
        for reply in replies:
            for topic, partition, error, ts, offset, epoch in reply.rows:
                results[(topic, partition)] = [error, ts, offset, epoch]
    return Respond({
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": name,
                "partitions": [
                    {
                        "partition_index": i,
                        "error_code": results[(name, i)][0],
                        "timestamp": results[(name, i)][1],
                        "offset": results[(name, i)][2],
                        "leader_epoch": results[(name, i)][3],
                    }
                    for i in indexes
                ],
            }
            for name, indexes in order
        ],
    })
