"""DescribeProducers (API 61, KIP-664): the active producers of partitions.

What ``kafka-transactions.sh describe-producers`` and Admin.describeProducers read
to find a hanging transaction: per partition, each producer the partition's
producer state holds (id, epoch, last sequence, last timestamp, coordinator epoch)
and the first offset of its open transaction (-1: none). As Kafka's
handleDescribeProducersRequest, per topic in this order: an illegal name is
INVALID_TOPIC_EXCEPTION, no Read on the topic TOPIC_AUTHORIZATION_FAILED, a topic
the metadata does not know UNKNOWN_TOPIC_OR_PARTITION; then per partition
(ReplicaManager.activeProducerState) an index the topic does not have is
UNKNOWN_TOPIC_OR_PARTITION, a partition this node holds no replica of
NOT_LEADER_OR_FOLLOWER, and a leader or follower answers from its own log's state
(the shard that owns it, one hop, in this process or another).

An ask to a shard of another process of this broker (num.processes > 1) has a deadline,
base.PROMPT_DEADLINE_MS (one to the handler's own process none): a live shard answers
from its producer state at once, so a process that does not answer (paused, or restarted
and not ready yet) has its partitions answered NOT_LEADER_OR_FOLLOWER by then while the
other partitions are answered, instead of the whole request waiting till the handler's
abandon closes the connection. The admin client's DescribeProducersHandler takes that
code as "find the leader again" and retries the partition (unless the caller named a
broker); REQUEST_TIMED_OUT it would fail the partition's future with.
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
from actors.core.topic_config import validate_topic_name
from actors.security.acl import Operation, ResourceType
from wire.broker_messages import (
    DescribeProducers,
    DescribeProducersDone,
    DescribeProducersDoneRow,
    TopicPartition,
)
from wire.errors import ErrorCode, KafkaError

TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
UNKNOWN_TP = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
# A partition's answer taken for an ask its shard's process did not answer in time
PRODUCERS_TIMED_OUT = DescribeProducersDoneRow("", -1, NOT_LEADER, [])
# Kafka answers a topic's error with its ApiError, whose message is the code's own text;
# a partition's error (activeProducerState) has none
TOPIC_DENIED_TEXT = "Topic authorization failed."
UNKNOWN_TOPIC_TEXT = "This server does not host this topic-partition."


def _ask(rows: list[TopicPartition]) -> Callable[[int], DescribeProducers]:
    return lambda rid: DescribeProducers(rid, rows)


def _topic_error(ctx: HandlerContext, name: str) -> tuple[int, str | None] | None:
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return int(exc.code), str(exc)
    if not ctx.allowed(Operation.READ, ResourceType.TOPIC, name):
        return TOPIC_DENIED, TOPIC_DENIED_TEXT
    if ctx.partition_count(name) is None:
        return UNKNOWN_TP, UNKNOWN_TOPIC_TEXT
    return None


def _holds_no_replica(ctx: HandlerContext, topic: str, partition: int) -> bool:
    """In a cluster: the metadata does not name this node among the partition's replicas
    (Kafka's getPartitionOrError finds no Partition here)."""
    if ctx.cluster is None:
        return False
    known = ctx.cluster.partition(topic, partition)
    return known is None or ctx.broker_id not in known.replicas


def handle_describe_producers(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    # (topic, partition) -> (error code, error message, producers); asked once per pair
    answers: dict[tuple[str, int], tuple[int, str | None, list[Any]]] = {}
    asked: list[TopicPartition] = []
    taken: set[tuple[str, int]] = set()  # answered or asked (a list's `in` was O(n) each)
    for t in req.topics:
        error = _topic_error(ctx, t.name)
        count = ctx.partition_count(t.name) or 0
        for index in t.partition_indexes:
            key = (t.name, index)
            if key in taken:
                continue
            taken.add(key)
            if error is not None:
                answers[key] = (error[0], error[1], [])
            elif not 0 <= index < count:
                answers[key] = (UNKNOWN_TP, None, [])
            elif _holds_no_replica(ctx, t.name, index):  # (saves the hop: the shard would
                # answer the same, but for a replica hosted that the metadata dropped)
                answers[key] = (NOT_LEADER, None, [])
            else:
                asked.append(TopicPartition(*key))
    if asked:
        replies: list[DescribeProducersDone] = yield [
            remote_call(ctx, shard, _ask(rows), 0, PROMPT_DEADLINE_MS,
                        partitions_timed_out(DescribeProducersDone, PRODUCERS_TIMED_OUT, rows),
                        True)
            for shard, rows in group_by_shard(ctx, asked).items()]
        for reply in replies:
            for row in reply.rows:
                answers[(row.topic, row.partition)] = (row.error_code, None, row.producers)
    codes: list[int] = []
    topics = []
    for t in req.topics:
        partitions = []
        for index in t.partition_indexes:
            code, message, producers = answers.get(
                (t.name, index), (int(ErrorCode.UNKNOWN_SERVER_ERROR), None, []))
            if code:
                codes.append(code)
            partitions.append({
                "partition_index": index, "error_code": code, "error_message": message,
                "active_producers": [_producer(p) for p in producers]})
        topics.append({"name": t.name, "partitions": partitions})
    return Respond({"throttle_time_ms": 0, "topics": topics}, error_codes=codes)


def _producer(p: Any) -> dict[str, int]:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
            "coordinator_epoch": p.coordinator_epoch,
            "current_txn_start_offset": p.current_txn_start_offset}
