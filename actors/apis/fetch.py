"""Fetch: read whole batches from the shards; wait in the purgatory for min_bytes.

The shards of the handler's own process hand back file regions of their
segments (save small amounts, read as bytes), those of another process bytes;
the response carries the regions to the Processor, which
sends them from the files. A response is capped by the broker's
``fetch.max.bytes`` as well as by the request's max_bytes, as in Kafka.
Regions this function drops (a read redone after waiting, a partition cut by
the byte budget) are closed here.

With num.processes > 1 a shard (or the purgatory a fetch waits in) may live in a
process that does not answer: paused, or restarted and not ready yet. Each Read
and WatchFetch to another process therefore carries a deadline (Call.deadline_ms;
one to the handler's own process none: base.remote_call): a shard's Read
unanswered by ``read_deadline_ms`` (and the time to carry its bytes) is taken as
NOT_LEADER_OR_FOLLOWER for that shard's partitions (``READ_TIMED_OUT``), so the
fetch answers the other processes' partitions with their data instead of nothing
until the handler abandons it and closes the connection (twice
request.timeout.ms). Why that code: it is the one
every client retries quietly in a fetch partition (the Java consumer's
FetchCollector refreshes metadata and fetches again; librdkafka's fetcher does
the same after fetch.error.backoff.ms; kafka-python likewise), and the one a
restarted process's generation refusal already gives. REQUEST_TIMED_OUT is not:
the Java consumer throws IllegalStateException for a fetch partition code it does
not expect, and librdkafka hands any such code to the application as a consumer
error. A WatchFetch to another process unanswered past max_wait_ms (plus a grace)
is taken as the purgatory's own timeout: the fetch reads again. The deadlines are
long (seconds) so that a healthy process on a loaded host never misses one: a
needless NOT_LEADER_OR_FOLLOWER costs the client a metadata refresh and a back-off.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

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
from actors.core.file_regions import (
    close_region,
    close_regions,
    first_batch_length,
    whole_batches_length,
)
from actors.core.partition_log import COORDINATOR_TOPICS
from actors.security.acl import CLUSTER_NAME, Operation, ResourceType
from wire.broker_messages import (
    FetchReady,
    Read,
    ReadDone,
    ReadDoneRow,
    ReadRow,
    WatchFetch,
    WatchFetchRow,
)
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)

# How long a fetch's handler waits for a Read (ReplicaRead) of a shard of another process
# before it answers that shard's partitions NOT_LEADER_OR_FOLLOWER itself
# (read_deadline_ms). A Read is answered in well under a millisecond; only a shard queued
# behind a burst of appends, or a process starved of CPU on a busy host, takes long. Too
# short, and a healthy but loaded process's partitions get a needless error (the client
# refreshes its metadata and fetches them again, librdkafka after fetch.error.backoff.ms);
# too long, and while a process is stuck a fetch that names one of its partitions holds
# back the other partitions' data that long: each handler's fetches sent there before the
# first such deadline passes (the handler then takes the process as silent, and gives the
# later ones max_wait_ms plus the carry plus 200 ms: request_handler.py's
# SILENT_DEADLINE_MS). The deadline is the fetch's max_wait_ms (how
# late its client already takes an answer) within [READ_DEADLINE_FLOOR_MS,
# READ_DEADLINE_CAP_MS]: 5 s at least, far past any scheduling delay of a live process
# (and well within every client's request timeout, 30 s and more); 10 s at most, so a long
# poll does not make a stuck process cost the live partitions more than that a fetch.
READ_DEADLINE_FLOOR_MS = 5_000
READ_DEADLINE_CAP_MS = 10_000
# A Read to a shard of another process brings its data as bytes through the link (read
# from the segment, packed, sent, unpacked), not as file regions: a 50 MB fetch of another
# process's partition took 0.5 to 1.5 s on a busy two-core host (past the 500 ms the
# deadline above once was: answered NOT_LEADER_OR_FOLLOWER in 4 tries of 5). Its deadline
# is longer by the time to carry the most it may bring (the fetch's max_bytes, or its
# partitions' partition_max_bytes if less) at CARRY_BYTES_PER_MS, 10 MB/s: a fifth or less
# of the rate seen there. A consumer's default (1 MB per partition) adds 100 ms a partition.
CARRY_BYTES_PER_MS = 10_000
# How long after max_wait_ms an unanswered WatchFetch to another process is taken as
# woken: its purgatory expires it at max_wait_ms, one link hop away; that answer comes
# first unless the purgatory's process is stuck (a second covers a loaded host's delays).
WATCH_DEADLINE_GRACE_MS = 1_000


def read_deadline_ms(max_wait_ms: int) -> int:
    """The deadline of a fetch's first Reads of another process: max_wait_ms within [floor,
    cap] (see above), before the time to carry their bytes. The Reads after a wait in the
    purgatory get the floor alone: the client has waited max_wait_ms already, and another
    max_wait_ms could take the whole past its request timeout."""
    return min(max(max_wait_ms, READ_DEADLINE_FLOOR_MS), READ_DEADLINE_CAP_MS)


def carry_ms(rows: list[Any], max_bytes: int) -> int:
    """The time a Read (ReplicaRead) of ``rows`` from another process is given to carry
    its bytes: the most it may bring at CARRY_BYTES_PER_MS."""
    wanted = 0
    for r in rows:
        wanted += r.partition_max_bytes
    return max(0, min(wanted, max_bytes)) // CARRY_BYTES_PER_MS


# A partition's answer taken for a Read its shard's process did not answer by its deadline
# (partitions_timed_out): NOT_LEADER_OR_FOLLOWER, retried by every client.
READ_TIMED_OUT = ReadDoneRow("", -1, NOT_LEADER, -1, -1, b"", 0, 0, -1)
# A WatchFetch of another process unanswered by its deadline: as if its purgatory had
# expired it (the fetch reads again)
_WATCH_TIMED_OUT = functools.partial(FetchReady, reason="handler deadline", timed_out=True)


def watch_call(ctx: HandlerContext, purgatory: Any, make: Callable[[int], WatchFetch],
               max_wait_ms: int) -> Call:
    """The WatchFetch call of a fetch: answered by its purgatory (FetchReady), or, one of
    another process, past max_wait_ms plus a grace by its deadline as if the purgatory had
    expired it."""
    return remote_call(ctx, purgatory, make, max_wait_ms,
                       max(0, max_wait_ms) + WATCH_DEADLINE_GRACE_MS, _WATCH_TIMED_OUT, True)


def _read(replica_id: int, max_bytes: int, rows: list[ReadRow],
          isolation: int, regions: bool = True) -> Callable[[int], Read]:
    return lambda rid: Read(rid, replica_id, max_bytes, rows, regions, isolation)


def _read_calls(ctx: HandlerContext, replica_id: int, max_bytes: int,
                rows: list[ReadRow], isolation: int, wait_ms: int) -> list[Call]:
    """One Read per shard; file regions only from a shard of this handler's own process
    (num.processes > 1: a descriptor means nothing in another process). One of another
    process has the deadline read_deadline_ms(``wait_ms``: the fetch's max_wait_ms, 0 for
    the Reads after a wait in the purgatory) plus the time to carry its bytes (carry_ms);
    past it, each of its partitions is answered READ_TIMED_OUT. One of this process has
    none, and costs no call to tell (remote_call's test, inline; the deadline reckoned only
    for another process)."""
    calls = []
    here = ctx.topology.node
    for shard, shard_rows in group_by_shard(ctx, rows).items():
        if shard.node == here:
            calls.append(Call(shard, _read(replica_id, max_bytes, shard_rows, isolation)))
            continue
        carry = carry_ms(shard_rows, max_bytes)
        calls.append(remote_call(
            ctx, shard, _read(replica_id, max_bytes, shard_rows, isolation, False), 0,
            read_deadline_ms(wait_ms) + carry,
            partitions_timed_out(ReadDone, READ_TIMED_OUT, shard_rows), True, carry))
    return calls


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


def _within_budget(r: ReadDoneRow, budget: int, at_least_one: bool) -> ReadDoneRow:
    """``r`` with only the whole batches that fit in ``budget`` (or its first batch)."""
    region = r.region
    if region is None:
        records = _whole_batches(r.records, budget, at_least_one)
        return r if len(records) == len(r.records) else r._replace(records=records)
    keep = whole_batches_length(region, budget)
    if keep == 0 and at_least_one:
        keep = first_batch_length(region)
    if keep == region.length:
        return r
    if keep == 0:
        close_region(region)
        return r._replace(region=None)
    return r._replace(region=region._replace(length=keep))


def _by_partition(replies: list[ReadDone]) -> dict[tuple[str, int], ReadDoneRow]:
    """The shards' rows by partition; a partition read twice keeps its last row."""
    read: dict[tuple[str, int], ReadDoneRow] = {}
    for reply in replies:
        for r in reply.rows:
            earlier = read.get((r.topic, r.partition))
            if earlier is not None:
                close_region(earlier.region)
            read[(r.topic, r.partition)] = r
    return read


def _partition_response(index: int, r: ReadDoneRow) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": r.error_code,
        "high_watermark": r.high_watermark,
        "last_stable_offset": (r.last_stable_offset if r.last_stable_offset >= 0
                               else r.high_watermark),
        "log_start_offset": r.log_start_offset,
        "aborted_transactions": None if r.aborted is None else [
            {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in r.aborted],
        "preferred_read_replica": -1,
        "records": r.region if r.region is not None else (r.records or b""),
    }


# The first Fetch version whose clients read zstd batches (Kafka: KIP-110).
ZSTD_MIN_FETCH_VERSION = 10


def _zstd_topic(ctx: HandlerContext, name: str) -> bool:
    """Is the topic's compression.type zstd (its own, else the broker's)? An older
    Fetch of it is answered UNSUPPORTED_COMPRESSION_TYPE, as Kafka does, rather than
    sent batches its client cannot read."""
    if name in COORDINATOR_TOPICS:  # never re-encoded: their batches are the broker's
        return False
    entry = ctx.topics.get(name)
    configs = dict(entry.configs) if entry is not None else {}
    return str(configs.get("compression.type", ctx.config["compression.type"])) == "zstd"


def handle_fetch(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    replica_id = getattr(req, "replica_id", -1)
    if replica_id is None:
        replica_id = -1
    isolation = getattr(req, "isolation_level", 0) or 0
    order: list[tuple[str, list[int]]] = []
    results: dict[tuple[str, int], ReadDoneRow] = {}
    rows: list[ReadRow] = []
    if ctx.authorizer is None:
        denied_code = None
    elif replica_id >= 0:  # a replica's fetch over the Kafka wire: ClusterAction
        denied_code = (None if ctx.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                           CLUSTER_NAME)
                       else int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    else:
        denied_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    old_version = header.api_version < ZSTD_MIN_FETCH_VERSION
    for t in req.topics:
        name = t.topic
        count = ctx.partition_count(name)
        indexes = []
        denied = denied_code is not None and (
            replica_id >= 0 or not ctx.allowed(Operation.READ, ResourceType.TOPIC, name))
        zstd_refused = old_version and count is not None and _zstd_topic(ctx, name)
        for p in t.partitions:
            indexes.append(p.partition)
            current_epoch = ctx.client_epoch(p)
            if denied:
                assert denied_code is not None
                results[(name, p.partition)] = ReadDoneRow(
                    name, p.partition, denied_code, -1, -1, b"", 0, 0, -1)
            elif count is None or not 0 <= p.partition < count:
                results[(name, p.partition)] = ReadDoneRow(
                    name, p.partition, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1, -1, b"",
                    0, 0, -1)
            elif ctx.not_leader(name, p.partition):
                results[(name, p.partition)] = ReadDoneRow(
                    name, p.partition, ctx.not_leader_code(name, p.partition, current_epoch),
                    -1, -1, b"", 0, 0, -1)
            elif zstd_refused:  # only where the log is here, as Kafka's read of it
                results[(name, p.partition)] = ReadDoneRow(
                    name, p.partition, int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE), -1, -1,
                    b"", 0, 0, -1)
            else:
                rows.append(ReadRow(name, p.partition, p.fetch_offset, p.partition_max_bytes,
                                    current_epoch))
        order.append((name, indexes))

    # Kafka: min(the request's max_bytes, fetch.max.bytes); min_bytes no larger.
    max_bytes = min(req.max_bytes, int(ctx.config["fetch.max.bytes"]))
    min_bytes = min(req.min_bytes, max_bytes)
    read: dict[tuple[str, int], ReadDoneRow] = {}
    if rows:
        replies: list[ReadDone] = yield _read_calls(ctx, replica_id, max_bytes, rows,
                                                    isolation, req.max_wait_ms)
        read = _by_partition(replies)
        total = 0
        errors = False
        for row in read.values():
            # ReadDoneRow.size, inline (a call per row): the bytes wherever they are
            total += row.region.length if row.region is not None else len(row.records)
            if row.error_code != NONE:
                errors = True
        if total < min_bytes and req.max_wait_ms > 0 and not errors:
            close_regions(read.values())  # read again once there is enough
            by_key = {(r.topic, r.partition): r for r in rows}
            watch_rows = [
                WatchFetchRow(t, p, by_key[(t, p)].fetch_offset, r.fetch_segment_base,
                              r.fetch_relative_position, by_key[(t, p)].partition_max_bytes)
                for (t, p), r in read.items()
            ]
            purgatory = ctx.topology.purgatory_for(rows[0].topic, rows[0].partition)
            yield [watch_call(ctx, purgatory,
                              lambda rid: WatchFetch(rid, min_bytes, req.max_wait_ms,
                                                     replica_id >= 0, watch_rows),
                              req.max_wait_ms)]
            # (after the wait: the floor alone, read_deadline_ms(0))
            replies = yield _read_calls(ctx, replica_id, max_bytes, rows, isolation, 0)
            read = _by_partition(replies)

    # max_bytes bounds the whole response (KIP-74): partitions take whole
    # batches in request order while they fit; only the first partition with
    # data may exceed it, by its first batch, so a consumer always progresses.
    budget = max_bytes
    first = True
    for name, indexes in order:
        for index in indexes:
            r = read.pop((name, index), None)
            if r is None:
                continue
            # r.size, inline (a call per partition)
            if r.region.length if r.region is not None else r.records:
                r = _within_budget(r, budget, first)
                size = r.size
                first = first and not size
                budget -= size
            results[(name, index)] = r

    seen: set[tuple[str, int]] = set()
    responses = []
    codes = []  # the response's error codes, for the errors metric (no walk of the dict)
    for name, indexes in order:
        partitions = []
        for index in indexes:
            r = results[(name, index)]
            if (name, index) in seen:  # named twice: its records once (a region is sent once)
                r = r._replace(records=b"", region=None)
            seen.add((name, index))
            if r.error_code:
                codes.append(r.error_code)
            partitions.append(_partition_response(index, r))
        responses.append({"topic": name, "partitions": partitions})
    return Respond({"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                    "responses": responses}, error_codes=codes)
