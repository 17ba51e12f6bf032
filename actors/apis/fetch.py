"""Fetch: read whole batches from the shards; wait in the purgatory for min_bytes."""

from __future__ import annotations

import struct
from typing import Any

from actors.apis.base import ApiGen, Call, HandlerContext, Respond, group_by_shard
from wire.broker_messages import Read, WatchFetch
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)


def _read_calls(ctx: HandlerContext, replica_id: int, max_bytes: int,
                rows: list[list[Any]]) -> list[Call]:
    return [
        Call(shard, lambda rid, r=shard_rows: Read(rid, replica_id, max_bytes, r))
        for shard, shard_rows in group_by_shard(ctx, rows).items()
    ]


_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_END = 12  # base offset (8 bytes), then the batch length (4)


def _whole_batches(records: bytes, budget: int, at_least_one: bool) -> bytes:
    """The longest run of whole batches from the start of ``records`` within ``budget``.

    With ``at_least_one`` the first batch is kept even when it alone is over.
    """
    if len(records) <= budget:
        return records
    end = 0
    while len(records) - end >= _BATCH_LENGTH_END:
        (length,) = _BATCH_LENGTH.unpack_from(records, end + 8)
        next_end = end + _BATCH_LENGTH_END + length
        if next_end > len(records) or (next_end > budget and not (at_least_one and end == 0)):
            break
        end = next_end
    return records[:end]


def handle_fetch(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    replica_id = getattr(req, "replica_id", -1)
    if replica_id is None:
        replica_id = -1
    order: list[tuple[str, list[int]]] = []
    results: dict[tuple[str, int], list[Any]] = {}
    rows: list[list[Any]] = []
    for t in req.topics:
        name = t.topic
        count = ctx.partition_count(name)
        indexes = []
        for p in t.partitions:
            indexes.append(p.partition)
            if count is None or not 0 <= p.partition < count:
                results[(name, p.partition)] = [int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1, -1,
                                                None]
            else:
                rows.append([name, p.partition, p.fetch_offset, p.partition_max_bytes])
        order.append((name, indexes))

    read = {}
    if rows:
        replies = yield _read_calls(ctx, replica_id, req.max_bytes, rows)
        read = {(r[0], r[1]): r for reply in replies for r in reply.rows}
        total = sum(len(r[5]) for r in read.values())
        errors = any(r[2] != NONE for r in read.values())
        if total < req.min_bytes and req.max_wait_ms > 0 and not errors:
            by_key = {(r[0], r[1]): r for r in rows}
            watch_rows = [
                [t, p, by_key[(t, p)][2], r[6], r[7], by_key[(t, p)][3]]
                for (t, p), r in read.items()
            ]
            purgatory = ctx.topology.purgatory_for(rows[0][0], rows[0][1])
            yield [Call(purgatory, lambda rid: WatchFetch(rid, req.min_bytes, req.max_wait_ms,
                                                          replica_id >= 0, watch_rows))]
            replies = yield _read_calls(ctx, replica_id, req.max_bytes, rows)
            read = {(r[0], r[1]): r for reply in replies for r in reply.rows}

    # max_bytes bounds the whole response (KIP-74): partitions take whole
    # batches in request order while they fit; only the first partition with
    # data may exceed it, by its first batch, so a consumer always progresses.
    budget = req.max_bytes
    first = True
    for name, indexes in order:
        for index in indexes:
            r = read.get((name, index))
            if r is None:
                continue
            records = r[5]
            if records:
                records = _whole_batches(records, budget, first)
                first = first and not records
                budget -= len(records)
            results[(name, index)] = [r[2], r[3], r[4], records]

    return Respond({
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": name,
                "partitions": [
                    {
                        "partition_index": index,
                        "error_code": results[(name, index)][0],
                        "high_watermark": results[(name, index)][1],
                        "last_stable_offset": results[(name, index)][1],
                        "log_start_offset": results[(name, index)][2],
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": results[(name, index)][3] or b"",
                    }
                    for index in indexes
                ],
            }
            for name, indexes in order
        ],
    })
