"""OffsetForLeaderEpoch (API 23, KIP-279/320): where a leader epoch ends on the leader.

A consumer asks after a leader change, with the epoch of the last record it read:
if the epoch ends on the new leader below the consumer's position, the log it read
was truncated (librdkafka's and the Java consumer's offset validation). Each
partition goes to the shard that owns it (one hop; the shard checks the client's
epoch against its own and answers from its log's epoch cache). As Kafka's
handleOffsetForLeaderEpochRequest: ClusterAction on the cluster lets a replica ask
for every topic, otherwise each topic needs Describe (TOPIC_AUTHORIZATION_FAILED).

An ask to a shard of another process of this broker (num.processes > 1) has a deadline,
base.PROMPT_DEADLINE_MS (one to the handler's own process none): a live shard answers
from its epoch cache at once, so a process that does not answer (paused, or restarted
and not ready yet) has its partitions answered NOT_LEADER_OR_FOLLOWER by then while the
other partitions are answered, instead of the whole request waiting for it till the
handler's abandon (twice request.timeout.ms) closes the connection. Why that code: the
Java consumer's OffsetsForLeaderEpochUtils retries it quietly after a metadata refresh
(REQUEST_TIMED_OUT it logs as unexpected), and a Kafka follower's fetcher
(AbstractFetcherThread) backs the partition off and asks again whatever the code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.apis.base import (
    NOT_LEADER,
    PROMPT_DEADLINE_MS,
    ApiGen,
    HandlerContext,
    Respond,
    group_by_shard,
    partitions_timed_out,
    remote_call,
)
from actors.security.acl import CLUSTER_NAME, Operation, ResourceType
from wire.errors import ErrorCode
from wire.replication_messages import (
    OffsetForEpochDoneRow,
    OffsetForEpochRow,
    OffsetForLeaderEpoch,
    OffsetForLeaderEpochDone,
)

TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
UNKNOWN_TP = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
# A partition's answer taken for an ask its shard's process did not answer in time
EPOCH_TIMED_OUT = OffsetForEpochDoneRow("", -1, NOT_LEADER, -1, -1)


def _ask(rows: list[OffsetForEpochRow]) -> Callable[[int], OffsetForLeaderEpoch]:
    return lambda rid: OffsetForLeaderEpoch(rid, rows)


def _error_row(topic: str, partition: int, code: int) -> OffsetForEpochDoneRow:
    return OffsetForEpochDoneRow(topic, partition, code, -1, -1)


def handle_offset_for_leader_epoch(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    cluster_action = ctx.authorizer is None or ctx.allowed(
        Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, log=False)
    # one answer per partition asked, in the request's order (a partition asked twice, for
    # two epochs, gets two answers); the shards answer their rows in the order sent
    answers: list[list[OffsetForEpochDoneRow | None]] = []
    asked: dict[OffsetForEpochRow, list[tuple[int, int]]] = {}
    for t in req.topics:
        name = t.topic
        count = ctx.partition_count(name)
        denied = not cluster_action and not ctx.allowed(Operation.DESCRIBE,
                                                        ResourceType.TOPIC, name)
        answered: list[OffsetForEpochDoneRow | None] = []
        for p in t.partitions:
            index = p.partition
            current_epoch = ctx.client_epoch(p)
            if denied:
                answered.append(_error_row(name, index, TOPIC_DENIED))
            elif count is None or not 0 <= index < count:
                answered.append(_error_row(name, index, UNKNOWN_TP))
            elif ctx.not_leader(name, index):
                answered.append(_error_row(name, index,
                                           ctx.not_leader_code(name, index, current_epoch)))
            else:
                row = OffsetForEpochRow(name, index, current_epoch, p.leader_epoch)
                asked.setdefault(row, []).append((len(answers), len(answered)))
                answered.append(None)
        answers.append(answered)
    if asked:
        by_shard = group_by_shard(ctx, list(asked))
        replies: list[OffsetForLeaderEpochDone] = yield [
            remote_call(ctx, shard, _ask(shard_rows), 0, PROMPT_DEADLINE_MS,
                        partitions_timed_out(OffsetForLeaderEpochDone, EPOCH_TIMED_OUT,
                                             shard_rows), True)
            for shard, shard_rows in by_shard.items()]
        for shard_rows, reply in zip(by_shard.values(), replies, strict=True):
            for sent, got in zip(shard_rows, reply.rows, strict=True):
                for topic_at, partition_at in asked[sent]:
                    answers[topic_at][partition_at] = got
    codes = []
    topics = []
    for t, answered in zip(req.topics, answers, strict=True):
        partitions = []
        for p, r in zip(t.partitions, answered, strict=True):
            if r is None:  # a shard left it out: never expected
                r = _error_row(t.topic, p.partition, int(ErrorCode.UNKNOWN_SERVER_ERROR))
            if r.error_code:
                codes.append(r.error_code)
            partitions.append({"error_code": r.error_code, "partition": p.partition,
                               "leader_epoch": r.leader_epoch, "end_offset": r.end_offset})
        topics.append({"topic": t.topic, "partitions": partitions})
    return Respond({"throttle_time_ms": 0, "topics": topics}, error_codes=codes)
