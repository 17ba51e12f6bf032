"""The admin APIs: CreatePartitions, ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments, DeleteRecords, DescribeLogDirs, DescribeTopicPartitions,
DeleteGroups, OffsetDelete.

CreatePartitions goes to the controller (it owns the topic table),
DeleteRecords and DescribeLogDirs to the partition shards (they own the
logs), DeleteGroups and OffsetDelete to the groups' coordinators;
DescribeTopicPartitions is answered from the handler's topic table, like
Metadata. (The config APIs are in ``configs``.)

With num.processes > 1, a DeleteRecords or DescribeLogDir to a shard of another process
has a deadline (base.remote_call; one to the handler's own process none), so a process
that does not answer (paused, or restarted and not ready yet) holds back only its own
partitions, not the whole request till the handler's abandon closes the connection: see
handle_delete_records and handle_describe_log_dirs for what such a shard's partitions
are answered.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.apis import cluster
from actors.apis.authorize import authorized_operations
from actors.apis.base import (
    PROMPT_DEADLINE_MS,
    ApiGen,
    Call,
    HandlerContext,
    Respond,
    group_by_shard,
    partitions_timed_out,
    remote_call,
    topic_change_wait_ms,
)
from actors.apis.metadata import _partition_rows, _uuid
from actors.apis.produce import PRODUCE_DEADLINE_GRACE_MS
from actors.core.partition_state import delete_records_wait_ms
from actors.core.topic_config import INTERNAL_TOPICS
from actors.runtime.address import Address
from actors.security.acl import ResourceType
from wire.admin_messages import (
    AlterReassignmentsAsk,
    AlterReassignmentsDone,
    CreatePartitions,
    CreatePartitionsDone,
    CreatePartitionsRow,
    DeleteGroups,
    DeleteGroupsDone,
    DeleteRecords,
    DeleteRecordsDone,
    DeleteRecordsDoneRow,
    DeleteRecordsRow,
    DescribeLogDir,
    DescribeLogDirDone,
    ElectLeadersAsk,
    ElectLeadersDone,
    ListReassignmentsAsk,
    ListReassignmentsDone,
    OffsetDelete,
    OffsetDeleteDone,
    ReassignDoneRow,
    ReassignRow,
)
from wire.broker_messages import TopicPartition
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)
UNKNOWN_TP = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
# DescribeTopicPartitions answers at most this many partitions (Kafka's
# max.request.partition.size.limit default); the rest come with the cursor.
MAX_PARTITIONS_PER_RESPONSE = 2000


# ------------------------------------------------------------- CreatePartitions


def handle_create_partitions(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    # an internal topic is refused growth by the controller (topic_config's
    # check_internal_growth), which holds the authoritative topic list
    rows = [CreatePartitionsRow(t.name, t.count,
                                None if t.assignments is None
                                else [list(a.broker_ids) for a in t.assignments])
            for t in req.topics]
    results: list[dict[str, Any]] = []
    if rows:
        done: CreatePartitionsDone
        [done] = yield [Call(ctx.topology.controller,
                             lambda rid: CreatePartitions(rid, bool(req.validate_only), rows,
                                                          int(req.timeout_ms)),
                             max_wait_ms=topic_change_wait_ms(req.timeout_ms))]
        results = [{"name": r.name, "error_code": r.error_code, "error_message": r.error_message}
                    for r in done.rows]
        # a cluster: answered once every process of this node serves the new partitions
        # (with their leaders), as a CreateTopics; a single node's Controller waited already
        codes = {d.name: d.error_code for d in done.rows}
        grown = {r.name: r.new_total for r in rows if codes.get(r.name) == NONE}
        if grown and not req.validate_only:
            late = yield from cluster.await_topics(ctx, list(grown), True, int(req.timeout_ms),
                                                   grown)
            for result in results:
                if result["name"] in late:  # Kafka's answer when the leaders come too late
                    result["error_code"] = int(ErrorCode.REQUEST_TIMED_OUT)
                    result["error_message"] = (
                        f"topic {result['name']!r} has its new partitions but not all with "
                        f"a leader after {topic_change_wait_ms(req.timeout_ms)} ms")
    return Respond({"throttle_time_ms": 0, "results": results})


# ----------------------------------------------------------------- ElectLeaders


def handle_elect_leaders(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """Preferred (0) or unclean (1) leader election, decided by the cluster's controller;
    per partition NONE, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
    ELIGIBLE_LEADERS_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION. A single node leads
    every partition it has: nothing to elect."""
    election = int(getattr(req, "election_type", 0) or 0)
    asked = (None if req.topic_partitions is None else
             [TopicPartition(t.topic, p) for t in req.topic_partitions for p in t.partitions])
    if election not in (0, 1):
        return Respond({"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                        "replica_election_results": []})
    rows: list[tuple[str, int, int, str | None]] = []
    top = NONE
    if ctx.cluster is None:
        wanted = asked if asked is not None else [
            TopicPartition(name, p) for name in sorted(ctx.topics)
            for p in range(ctx.partition_count(name) or 0)]
        for tp in wanted:
            count = ctx.partition_count(tp.topic)
            ok = count is not None and 0 <= tp.partition < count
            rows.append((tp.topic, tp.partition,
                         int(ErrorCode.ELECTION_NOT_NEEDED) if ok else UNKNOWN_TP,
                         None if ok else "the partition does not exist"))
    else:
        done: ElectLeadersDone
        [done] = yield [Call(ctx.topology.controller,
                             lambda rid: ElectLeadersAsk(rid, election, asked),
                             max_wait_ms=max(1000, int(req.timeout_ms)))]
        top = done.error_code
        rows = [(r.topic, r.partition, r.error_code, r.error_message) for r in done.rows]
    if header.api_version == 0 and top != NONE:
        # v0 has no top-level error: every partition carries it
        rows = [(tp.topic, tp.partition, top, None) for tp in asked or []]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, code, message in rows:
        by_topic.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": code, "error_message": message})
    return Respond({"throttle_time_ms": 0, "error_code": top, "replica_election_results": [
        {"topic": topic, "partition_result": parts} for topic, parts in by_topic.items()]})


# ------------------------------------------------------ partition reassignments


def handle_alter_partition_reassignments(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """Move partitions to other replicas, or cancel a move (null replicas), decided by the
    cluster's controller (KIP-455); answered once each move is written and started. A
    single node (no cluster) has one broker, itself: a move to it alone is done already,
    any other set is INVALID_REPLICA_ASSIGNMENT and there is nothing to cancel."""
    allow_rf_change = bool(getattr(req, "allow_replication_factor_change", True))
    rows = [ReassignRow(t.name, int(p.partition_index),
                        None if p.replicas is None else [int(r) for r in p.replicas])
            for t in req.topics for p in t.partitions]
    top = NONE
    answers: list[ReassignDoneRow]
    if ctx.cluster is None:
        answers = [_reassign_single_node(ctx, row, allow_rf_change) for row in rows]
    elif rows:
        done: AlterReassignmentsDone
        [done] = yield [Call(ctx.topology.controller,
                             lambda rid: AlterReassignmentsAsk(rid, rows, allow_rf_change),
                             max_wait_ms=max(1000, int(req.timeout_ms)))]
        top, answers = done.error_code, done.rows
    else:
        answers = []
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for answer in answers:
        by_topic.setdefault(answer.topic, []).append(
            {"partition_index": answer.partition, "error_code": answer.error_code,
             "error_message": answer.error_message})
    response: dict[str, Any] = {
        "throttle_time_ms": 0, "error_code": top,
        "error_message": None if top == NONE else ErrorCode(top).name,
        "responses": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}
    if header.api_version >= 1:
        response["allow_replication_factor_change"] = allow_rf_change
    return Respond(response)


def _reassign_single_node(ctx: HandlerContext, row: ReassignRow,
                          allow_rf_change: bool) -> ReassignDoneRow:
    def answer(code: ErrorCode, message: str | None = None) -> ReassignDoneRow:
        return ReassignDoneRow(row.topic, row.partition, int(code), message)

    count = ctx.partition_count(row.topic)
    if count is None or not 0 <= row.partition < count:
        return answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
    if row.replicas is None:
        return answer(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                      f"no reassignment of {row.topic}-{row.partition} is in progress")
    if row.replicas != [ctx.broker_id]:
        return answer(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                      f"a single node has one broker, {ctx.broker_id}: replica list "
                      f"{row.replicas} cannot be placed")
    return answer(ErrorCode.NONE)  # already there (its replication factor unchanged)


def handle_list_partition_reassignments(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """The reassignments in progress (of the partitions named, or all), from the cluster's
    controller; a single node never has one."""
    asked = (None if req.topics is None else
             [TopicPartition(t.name, int(p)) for t in req.topics for p in t.partition_indexes])
    top = NONE
    topics: dict[str, list[dict[str, Any]]] = {}
    if ctx.cluster is not None:
        done: ListReassignmentsDone
        [done] = yield [Call(ctx.topology.controller,
                             lambda rid: ListReassignmentsAsk(rid, asked),
                             max_wait_ms=max(1000, int(req.timeout_ms)))]
        top = done.error_code
        for row in done.rows:
            topics.setdefault(row.topic, []).append(
                {"partition_index": row.partition, "replicas": row.replicas,
                 "adding_replicas": row.adding, "removing_replicas": row.removing})
    return Respond({"throttle_time_ms": 0, "error_code": top,
                    "error_message": None if top == NONE else ErrorCode(top).name,
                    "topics": [{"name": name, "partitions": parts}
                               for name, parts in topics.items()]})


# ---------------------------------------------------------------- DeleteRecords


# A partition's answer taken for a DeleteRecords its shard's process did not answer by
# its deadline: REQUEST_TIMED_OUT, Kafka's answer when the followers do not move their log
# start within timeout_ms (DelayedDeleteRecords), retriable (the admin client's
# DeleteRecordsHandler asks again) and saying nothing of the deletion, which may still
# happen when that process runs again (it only moves the log start up to the offset:
# asked again, the same offset deletes nothing more)
DELETE_TIMED_OUT = DeleteRecordsDoneRow(
    "", -1, -1, int(ErrorCode.REQUEST_TIMED_OUT),
    "the broker process holding this partition did not answer in time; the records may "
    "still be deleted")


def handle_delete_records(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """Each partition's log start moves to the offset; the answer is its low watermark.

    A shard of another process that does not answer by the request's own wait
    (delete_records_wait_ms: its timeout_ms, capped) plus PRODUCE_DEADLINE_GRACE_MS, as a
    Produce's Append, has its partitions answered DELETE_TIMED_OUT; the grace lets the
    shard's own REQUEST_TIMED_OUT (followers too slow) come first. Its deadline passing
    does not say the process is silent (no ``silence``): the shard waits for the
    followers, as an acks=-1 Append."""
    rows: list[DeleteRecordsRow] = []
    answers: dict[tuple[str, int], DeleteRecordsDoneRow] = {}
    for topic in req.topics:
        count = ctx.partition_count(topic.name)
        for p in topic.partitions:
            if count is None or not 0 <= p.partition_index < count:
                answers[(topic.name, p.partition_index)] = DeleteRecordsDoneRow(
                    topic.name, p.partition_index, -1, UNKNOWN_TP, None)
            else:
                rows.append(DeleteRecordsRow(topic.name, p.partition_index, p.offset))
    if rows:
        by_shard = group_by_shard(ctx, rows)
        wait_ms = delete_records_wait_ms(req.timeout_ms)
        replies: list[DeleteRecordsDone] = yield [
            remote_call(ctx, shard, _delete_records(shard_rows, req.timeout_ms), wait_ms,
                        wait_ms + PRODUCE_DEADLINE_GRACE_MS,
                        partitions_timed_out(DeleteRecordsDone, DELETE_TIMED_OUT, shard_rows),
                        False)
            for shard, shard_rows in by_shard.items()]
        for reply in replies:
            for r in reply.rows:
                answers[(r.topic, r.partition)] = r
    return Respond({"throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index,
             "low_watermark": answers[(topic.name, p.partition_index)].low_watermark,
             "error_code": answers[(topic.name, p.partition_index)].error_code}
            for p in topic.partitions]}
        for topic in req.topics]})


def _delete_records(rows: list[DeleteRecordsRow],
                    timeout_ms: int) -> Callable[[int], DeleteRecords]:
    return lambda rid: DeleteRecords(rid, rows, int(timeout_ms))


# ------------------------------------------------------------- DescribeLogDirs

# The answer taken for a DescribeLogDir its shard's process did not answer by its deadline:
# no log dir, no partitions (told apart from an answer by its empty log_dir)
_LOG_DIR_TIMED_OUT = functools.partial(DescribeLogDirDone, log_dir="", total_bytes=-1,
                                       usable_bytes=-1, rows=[])


def handle_describe_log_dirs(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """The log dir with the size of every partition it holds (or of those asked for).

    Every shard is asked; one of another process that does not answer by
    PROMPT_DEADLINE_MS (a live shard sizes its logs at once, so ``silence``) has its
    partitions left out of the dir's answer, the others' partitions are answered. Why not
    an error code for the dir: the dir is not offline, only a process is not answering, and
    Kafka's code for a dir (KAFKA_STORAGE_ERROR) says every replica in it is offline to the
    admin client (LogDirDescription.error), which reassignment tools act on; the response
    has no per-partition code. A partition left out reads, to describeReplicaLogDirs, as
    not found here for now, and the next request finds it. Only when no shard answered is
    the dir answered KAFKA_STORAGE_ERROR, with nothing in it (no sizes to give)."""
    wanted = (None if req.topics is None else
              [TopicPartition(t.topic, p) for t in req.topics for p in t.partitions])
    shards = [ctx.topology.shard(i) for i in range(ctx.topology.num_shards)]
    replies: list[DescribeLogDirDone] = yield [
        remote_call(ctx, shard, lambda rid: DescribeLogDir(rid, wanted), 0, PROMPT_DEADLINE_MS,
                    _LOG_DIR_TIMED_OUT, True) for shard in shards]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for reply in replies:
        for r in reply.rows:
            by_topic.setdefault(r.topic, []).append({
                "partition_index": r.partition, "partition_size": r.size_bytes,
                "offset_lag": r.offset_lag, "is_future_key": False})
    first = next((reply for reply in replies if reply.log_dir), None)
    if first is None:  # (every shard in processes that did not answer)
        log_dir = str(Path(str(ctx.config["log.dirs"]).split(",")[0].strip()).resolve())
        return Respond({"throttle_time_ms": 0, "error_code": 0, "results": [{
            "error_code": int(ErrorCode.KAFKA_STORAGE_ERROR), "log_dir": log_dir, "topics": [],
            "total_bytes": -1, "usable_bytes": -1}]})
    return Respond({"throttle_time_ms": 0, "error_code": 0, "results": [{
        "error_code": 0, "log_dir": first.log_dir,
        "topics": [{"name": name, "partitions": sorted(parts, key=lambda r: r["partition_index"])}
                   for name, parts in sorted(by_topic.items())],
        "total_bytes": first.total_bytes, "usable_bytes": first.usable_bytes,
    }]})


# ----------------------------------------------------- DescribeTopicPartitions


def handle_describe_topic_partitions(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """Metadata's partition view, topic by topic in name order, at most
    ``response_partition_limit`` partitions per answer; ``next_cursor`` says where the
    next request starts. A partition's row carries no error, as Kafka's (KRaft's
    getPartitionMetadataForDescribeTopicResponse): a partition without a leader, or whose
    leader has no endpoint on the request's listener, is told by leader -1 alone."""
    names = sorted({t.name for t in req.topics}) if req.topics else sorted(ctx.topics)
    limit = max(1, min(int(req.response_partition_limit or MAX_PARTITIONS_PER_RESPONSE),
                       MAX_PARTITIONS_PER_RESPONSE))
    cursor = req.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    topics: list[dict[str, Any]] = []
    next_cursor = None
    left = limit
    for name in names:
        if name not in ctx.topics:
            topics.append({"error_code": UNKNOWN_TP, "name": name,
                           "is_internal": False, "partitions": []})
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        rows = _partition_rows(ctx, name)[max(0, start):]
        if left <= 0:
            next_cursor = {"topic_name": name, "partition_index": max(0, start)}
            break
        taken = rows[:left]
        left -= len(taken)
        topics.append({
            "error_code": NONE, "name": name, "topic_id": _uuid(ctx.topics[name].topic_id),
            "is_internal": name in INTERNAL_TOPICS,
            "partitions": [{
                "error_code": NONE, "partition_index": r["partition_index"],
                "leader_id": r["leader_id"], "leader_epoch": r["leader_epoch"],
                "replica_nodes": r["replica_nodes"], "isr_nodes": r["isr_nodes"],
                "eligible_leader_replicas": None, "last_known_elr": None,
                "offline_replicas": r["offline_replicas"]} for r in taken],
        })
        if len(taken) < len(rows):
            next_cursor = {"topic_name": name, "partition_index": taken[-1]["partition_index"] + 1
                           if taken else max(0, start)}
            break
    # Kafka's DescribeTopicPartitionsRequestHandler sets them on every row it answers, an
    # unknown topic's too (the request has no include flag); rows the principal may not
    # describe are left out after this (authorize.py)
    # (an int32 in this schema, not the bit-field type of Metadata's: the bits written here)
    ctx.refresh_acls()
    for topic in topics:
        topic["topic_authorized_operations"] = sum(1 << op for op in authorized_operations(
            ctx, ResourceType.TOPIC, topic["name"], refresh=False))
    return Respond({"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor})
    yield  # unreachable: makes this a generator like the others


# ------------------------------------------------------- DeleteGroups, OffsetDelete


def handle_delete_groups(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """Each group goes to its coordinator; only Empty groups are deleted (NON_EMPTY_GROUP).
    The group id "" is a group like any other here, as in Kafka (OffsetCommit takes it,
    for old clients that commit with no group); only a null one is INVALID_GROUP_ID.
    A group named twice is one group (Kafka takes the names distinct): deleted once,
    answered once (handled twice, its second deletion found it gone and the answer
    said GROUP_ID_NOT_FOUND for a group just deleted)."""
    results: dict[str | None, int] = {}
    by_coordinator: dict[Address, list[str]] = {}
    names = list(dict.fromkeys(req.groups_names))
    for gid in names:
        if gid is None:
            results[gid] = int(ErrorCode.INVALID_GROUP_ID)
        else:
            by_coordinator.setdefault(ctx.topology.coordinator_for(gid), []).append(gid)
    targets = list(by_coordinator.items())
    if targets:
        replies: list[DeleteGroupsDone] = yield [
            Call(c, _delete_groups(ids)) for c, ids in targets]
        for reply in replies:
            for row in reply.rows:
                results[row.group_id] = row.error_code
    return Respond({"throttle_time_ms": 0, "results": [
        {"group_id": gid, "error_code": results[gid]} for gid in names]})


def _delete_groups(ids: list[str]) -> Callable[[int], DeleteGroups]:
    return lambda rid: DeleteGroups(rid, ids)


def handle_offset_delete(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """A group's committed offsets, deleted; partitions of unknown topics are refused here
    (UNKNOWN_TOPIC_OR_PARTITION), the rest decided by the coordinator."""
    codes: dict[tuple[str, int], int] = {}
    asked: list[TopicPartition] = []
    for topic in req.topics:
        count = ctx.partition_count(topic.name)
        for p in topic.partitions:
            if count is None or not 0 <= p.partition_index < count:
                codes[(topic.name, p.partition_index)] = UNKNOWN_TP
            else:
                asked.append(TopicPartition(topic.name, p.partition_index))
    if not req.group_id:
        group_error = int(ErrorCode.INVALID_GROUP_ID)
    else:
        done: OffsetDeleteDone
        [done] = yield [Call(ctx.topology.coordinator_for(req.group_id),
                             lambda rid: OffsetDelete(rid, req.group_id, asked))]
        group_error = done.error_code
        for row in done.rows:
            codes[(row.topic, row.partition)] = row.error_code
    if group_error != NONE:
        return Respond({"error_code": group_error, "throttle_time_ms": 0, "topics": []})
    return Respond({"error_code": NONE, "throttle_time_ms": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": codes[(topic.name, p.partition_index)]}
            for p in topic.partitions]}
        for topic in req.topics]})
