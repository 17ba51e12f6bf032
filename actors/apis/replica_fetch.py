"""A follower's replica fetch on the leader's node (Kafka's Fetch from a replica).

Not a Kafka request here: a ReplicaFetcher of another node sends the
ReplicaFetch message to a RequestHandler of this node, which runs this
generator like an API function. The partitions are read through their
shards (ReplicaRead: epochs checked, the follower's offset counted, read to
the log end); with fewer than ``min_bytes`` and no error nor divergence, the
fetch waits in the purgatory as a DelayedFetch from a follower (answered as
soon as the log end moves enough, the leader moves, or ``max_wait_ms``
passes), then reads again. The answer goes back to the fetcher.

As a consumer's Fetch (actors/apis/fetch.py), each ReplicaRead and the WatchFetch to
another process of this broker have a deadline: a shard whose process does not answer
(num.processes > 1: paused, or restarted and not ready yet) has its partitions answered
NOT_LEADER_OR_FOLLOWER, which the follower's fetcher backs off and fetches again
(replica.fetch.backoff.ms), while the other partitions of the fetch are served. Calls to
this handler's own process have none.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.apis.base import (
    NOT_LEADER,
    ApiGen,
    Call,
    HandlerContext,
    Respond,
    group_by_shard,
    partitions_timed_out,
    remote_call,
)
from actors.apis.fetch import carry_ms, read_deadline_ms, watch_call
from wire.broker_messages import WatchFetch, WatchFetchRow
from wire.errors import ErrorCode
from wire.replication_messages import (
    ReplicaFetch,
    ReplicaFetchPartition,
    ReplicaFetchResponse,
    ReplicaRead,
    ReplicaReadDone,
    ReplicaReadDoneRow,
    ReplicaReadRow,
)

NONE = int(ErrorCode.NONE)


def _read(replica_id: int, max_bytes: int,
          rows: list[ReplicaReadRow]) -> Callable[[int], ReplicaRead]:
    return lambda rid: ReplicaRead(rid, replica_id, max_bytes, rows)


# A partition's answer taken for a ReplicaRead its shard's process did not answer in time
REPLICA_READ_TIMED_OUT = ReplicaReadDoneRow("", -1, NOT_LEADER, -1, -1, -1, -1, -1, b"", 0, 0)


def _calls(ctx: HandlerContext, msg: ReplicaFetch, rows: list[ReplicaReadRow],
           wait_ms: int) -> list[Call]:
    """One ReplicaRead per shard; one of another process with a deadline, as a consumer's
    Read of another process (read_deadline_ms(``wait_ms``: max_wait_ms, 0 after a wait)
    and carry_ms), one of this process none (its test inline, as a consumer's Read)."""
    calls = []
    here = ctx.topology.node
    for shard, shard_rows in group_by_shard(ctx, rows).items():
        make = _read(msg.replica_id, msg.max_bytes, shard_rows)
        if shard.node == here:
            calls.append(Call(shard, make))
            continue
        carry = carry_ms(shard_rows, msg.max_bytes)
        calls.append(remote_call(
            ctx, shard, make, 0, read_deadline_ms(wait_ms) + carry,
            partitions_timed_out(ReplicaReadDone, REPLICA_READ_TIMED_OUT, shard_rows), True,
            carry))
    return calls


def _collect(replies: list[ReplicaReadDone]) -> dict[tuple[str, int], ReplicaReadDoneRow]:
    return {(r.topic, r.partition): r for reply in replies for r in reply.rows}


def handle_replica_fetch(ctx: HandlerContext, msg: ReplicaFetch) -> ApiGen:
    rows = [ReplicaReadRow(r.topic, r.partition, r.fetch_offset, r.current_leader_epoch,
                           r.last_fetched_epoch, r.partition_max_bytes, r.log_start_offset)
            for r in msg.rows]
    read: dict[tuple[str, int], ReplicaReadDoneRow] = {}
    if rows:
        replies: list[ReplicaReadDone] = yield _calls(ctx, msg, rows, msg.max_wait_ms)
        read = _collect(replies)
        total = sum(len(r.records) for r in read.values())
        settled = any(r.error_code != NONE or r.diverging_end_offset >= 0
                      or r.diverging_epoch >= 0 for r in read.values())
        if total < msg.min_bytes and msg.max_wait_ms > 0 and not settled:
            by_key = {(r.topic, r.partition): r for r in rows}
            watch = [WatchFetchRow(t, p, by_key[(t, p)].fetch_offset, r.fetch_segment_base,
                                   r.fetch_relative_position, by_key[(t, p)].partition_max_bytes)
                     for (t, p), r in read.items()]
            purgatory = ctx.topology.purgatory_for(rows[0].topic, rows[0].partition)
            min_bytes = min(msg.min_bytes, msg.max_bytes)
            yield [watch_call(ctx, purgatory,
                              lambda rid: WatchFetch(rid, min_bytes, msg.max_wait_ms, True, watch),
                              msg.max_wait_ms)]
            # (after the wait: the floor alone, read_deadline_ms(0), as a consumer's fetch)
            replies = yield _calls(ctx, msg, rows, 0)
            read = _collect(replies)
    out = []
    for r in msg.rows:
        got = read.get((r.topic, r.partition))
        if got is None:
            out.append(ReplicaFetchPartition(r.topic, r.partition,
                                             int(ErrorCode.UNKNOWN_SERVER_ERROR), -1, -1, -1,
                                             -1, -1, b""))
            continue
        out.append(ReplicaFetchPartition(got.topic, got.partition, got.error_code,
                                         got.high_watermark, got.log_start_offset,
                                         got.log_end_offset, got.diverging_epoch,
                                         got.diverging_end_offset, got.records))
    return Respond(ReplicaFetchResponse(msg.req_id, out))
