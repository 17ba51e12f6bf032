"""The consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups.

Each function turns the decoded request into one message per group for
``topology.coordinator_for(group_id)`` (wire/group_messages.py), waits for
the ``*Done`` answers and shapes the response for the request's version.
Those answers may take as long as a rebalance (JoinGroup, SyncGroup); the
handler keeps serving other requests meanwhile.

The coordinators run in the broker's first process. A call from a handler of another
process (num.processes > 1) that a live coordinator answers at once (Heartbeat,
LeaveGroup, OffsetFetch, DescribeGroups, ListGroups) has a deadline, base.PROMPT_DEADLINE_MS
(``silence``: its passing says that process is silent), and an OffsetCommit one past the
coordinator's own give-up on its write (OFFSET_COMMIT_DEADLINE_MS, no ``silence``): a
first process that does not answer (paused, or restarted and not ready yet) gets them
answered COORDINATOR_NOT_AVAILABLE (a group's, or each partition's for a commit), on which
clients look the coordinator up again and retry (the Java consumer marks it unknown; the
admin client retries ListGroups and DescribeGroups), instead of the handler's abandon
(twice request.timeout.ms) closing the connection. A JoinGroup or SyncGroup waits for the
rebalance, rightly long: none. A handler of the first process calls them with none.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable
from typing import Any

from actors.apis import cluster
from actors.apis.authorize import authorized_operations
from actors.apis.base import (
    PROMPT_DEADLINE_MS,
    ApiGen,
    Call,
    HandlerContext,
    Respond,
    partitions_timed_out,
    remote_call,
)
from actors.apis.produce import PRODUCE_DEADLINE_GRACE_MS
from actors.apis.transactions import ensure_transaction_topic, transaction_coordinator
from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.group_coordinator import ANSWER_BUCKET_MS, ANSWER_MARGIN_MS, APPEND_TIMEOUT_MS
from actors.security.acl import Operation, ResourceType
from wire.broker_messages import TopicPartition
from wire.errors import ErrorCode
from wire.group_messages import (
    DescribeGroupRow,
    DescribeGroups,
    DescribeGroupsDone,
    Heartbeat,
    HeartbeatDone,
    JoinGroup,
    JoinGroupDone,
    JoinProtocolRow,
    LeaveGroup,
    LeaveGroupDone,
    LeaveMemberRow,
    ListGroups,
    ListGroupsDone,
    OffsetCommit,
    OffsetCommitDone,
    OffsetCommitDoneRow,
    OffsetCommitRow,
    OffsetFetch,
    OffsetFetchDone,
    OffsetFetchDoneRow,
    SyncGroup,
    SyncGroupDone,
)

NONE = int(ErrorCode.NONE)
GROUP_KEY = 0
TRANSACTION_KEY = 1


def _coordinator(ctx: HandlerContext, group_id: str) -> Any:
    return ctx.topology.coordinator_for(group_id)


COORDINATOR_NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
# An OffsetCommit's coordinator answers once its write is answered, or gives the write up
# (REQUEST_TIMED_OUT) APPEND_TIMEOUT_MS plus its margin (and its timer's bucket) after it
# sent it: a second past that, its silence is the process's, not the write's
OFFSET_COMMIT_DEADLINE_MS = (APPEND_TIMEOUT_MS + ANSWER_MARGIN_MS + ANSWER_BUCKET_MS
                             + PRODUCE_DEADLINE_GRACE_MS)
# The answers taken for a coordinator call its process did not answer by its deadline
_HEARTBEAT_TIMED_OUT = functools.partial(HeartbeatDone, error_code=COORDINATOR_NOT_AVAILABLE)
_LEAVE_TIMED_OUT = functools.partial(LeaveGroupDone, error_code=COORDINATOR_NOT_AVAILABLE,
                                     members=[])
_OFFSET_FETCH_TIMED_OUT = functools.partial(OffsetFetchDone,
                                            error_code=COORDINATOR_NOT_AVAILABLE, rows=[])
_LIST_TIMED_OUT = functools.partial(ListGroupsDone, error_code=COORDINATOR_NOT_AVAILABLE,
                                    rows=[])
COMMIT_TIMED_OUT = OffsetCommitDoneRow("", -1, COORDINATOR_NOT_AVAILABLE)


def _prompt_call(ctx: HandlerContext, coordinator: Any, make: Callable[[int], Any],
                 on_timeout: Callable[[int], Any]) -> Call:
    """A call a live coordinator answers at once: with PROMPT_DEADLINE_MS (and
    ``silence``) if the coordinator lives in another process."""
    return remote_call(ctx, coordinator, make, 0, PROMPT_DEADLINE_MS, on_timeout, True)


def _groups_timed_out(group_ids: list[str], req_id: int) -> DescribeGroupsDone:
    return DescribeGroupsDone(req_id, [
        DescribeGroupRow(COORDINATOR_NOT_AVAILABLE, gid, "", "", "", []) for gid in group_ids])


# --------------------------------------------------------------- FindCoordinator


def handle_find_coordinator(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """A single node coordinates every group and transactional id; in a cluster the
    leader of the key's ``__consumer_offsets`` (groups) or ``__transaction_state``
    (key type 1, transactional ids) partition does."""
    version = header.api_version
    key_type = req.key_type if version >= 1 else GROUP_KEY
    where: dict[str, tuple[int, str, int]] = {}  # cluster mode: key -> its coordinator
    if ctx.cluster is not None and key_type in (GROUP_KEY, TRANSACTION_KEY):
        if key_type == GROUP_KEY:
            missing = yield from cluster.ensure_offsets_topic(ctx)
        else:
            missing = yield from ensure_transaction_topic(ctx)
        keys = req.coordinator_keys if version >= 4 else [req.key]
        for key in keys:
            error, node_id, host, port = (cluster.group_coordinator(ctx, key)
                                          if key_type == GROUP_KEY
                                          else transaction_coordinator(ctx, key))
            if not missing and error == NONE:
                where[key] = (node_id, host, port)
    # a single node: itself, on the request's listener (none when it is not advertised)
    own = ctx.own_endpoint() if ctx.cluster is None else None

    def one(key: str) -> tuple[int, str | None]:
        if key_type not in (GROUP_KEY, TRANSACTION_KEY):
            return int(ErrorCode.INVALID_REQUEST), f"unknown coordinator key type {key_type}"
        if ctx.cluster is not None and key not in where:
            topic = OFFSETS_TOPIC if key_type == GROUP_KEY else "__transaction_state"
            return (int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    f"the {topic} partition of {key!r} has no leader yet, or its leader "
                    f"has no listener {ctx.listener_name()}")
        if ctx.cluster is None and own is None:
            return (int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    f"listener {ctx.listener_name()} is not advertised")
        return NONE, None

    def node_of(key: str) -> tuple[int, str, int]:
        return where.get(key, (ctx.broker_id, *(own or ("", -1))))

    if version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            error, message = one(key)
            ok = error == NONE
            node_id, host, port = node_of(key)
            coordinators.append({
                "key": key,
                "node_id": node_id if ok else -1,
                "host": host if ok else "",
                "port": port if ok else -1,
                "error_code": error,
                "error_message": message,
            })
        return Respond({"throttle_time_ms": 0, "coordinators": coordinators})
    error, message = one(req.key)
    ok = error == NONE
    node_id, host, port = node_of(req.key)
    return Respond({
        "throttle_time_ms": 0,
        "error_code": error,
        "error_message": message if version >= 1 else None,
        "node_id": node_id if ok else -1,
        "host": host if ok else "",
        "port": port if ok else -1,
    })


# -------------------------------------------------------------------- JoinGroup


def _client_host(ctx: HandlerContext) -> str:
    """The member's host as Kafka keeps it: the client's address as Java prints an
    InetAddress ("/127.0.0.1"), shown by DescribeGroups and kafka-consumer-groups.sh."""
    return java_host(ctx.access.host)


def java_host(host: str) -> str:
    """``host`` (a peer address) as Java's InetAddress.toString prints it: "/" and the
    address; an IPv6 one in full, each group in hex without leading zeros
    ("/0:0:0:0:0:0:0:1"), an IPv4-mapped one as its IPv4 address (Java makes it an
    Inet4Address). A name that is no address is kept as it is; "" stays ""."""
    if not host:
        return ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"/{host}"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return f"/{address.ipv4_mapped}"
        value = int(address)
        groups = ":".join(f"{(value >> shift) & 0xFFFF:x}" for shift in range(112, -1, -16))
        scope = f"%{address.scope_id}" if address.scope_id else ""
        return f"/{groups}{scope}"
    return f"/{address}"


def handle_join_group(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    protocols = [JoinProtocolRow(p.name, bytes(p.metadata)) for p in req.protocols]
    done: JoinGroupDone
    [done] = yield [Call(_coordinator(ctx, req.group_id), lambda rid: JoinGroup(
        rid, req.group_id, req.member_id or "", req.group_instance_id, header.client_id or "",
        _client_host(ctx), req.protocol_type, protocols, req.session_timeout_ms,
        req.rebalance_timeout_ms if version >= 1 else -1, version >= 4),
        max_wait_ms=max(req.session_timeout_ms, req.rebalance_timeout_ms if version >= 1 else 0))]
    protocol_name = done.protocol_name
    if version < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    return Respond({
        "throttle_time_ms": 0,
        "error_code": done.error_code,
        "generation_id": done.generation_id,
        "protocol_type": done.protocol_type,
        "protocol_name": protocol_name,
        "leader": done.leader,
        "skip_assignment": False,
        "member_id": done.member_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "metadata": m.metadata}
            for m in done.members
        ],
    })


# -------------------------------------------------------------------- SyncGroup


def handle_sync_group(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
    done: SyncGroupDone
    [done] = yield [Call(_coordinator(ctx, req.group_id), lambda rid: SyncGroup(
        rid, req.group_id, req.generation_id, req.member_id, req.group_instance_id,
        req.protocol_type if version >= 5 else None,
        req.protocol_name if version >= 5 else None, assignments),
        # a follower waits for the leader's assignment, at most a session
        max_wait_ms=int(ctx.config["group.max.session.timeout.ms"]))]
    return Respond({
        "throttle_time_ms": 0,
        "error_code": done.error_code,
        "protocol_type": done.protocol_type,
        "protocol_name": done.protocol_name,
        "assignment": done.assignment,
    })


# -------------------------------------------------------------------- Heartbeat


def handle_heartbeat(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    done: HeartbeatDone
    [done] = yield [_prompt_call(ctx, _coordinator(ctx, req.group_id), lambda rid: Heartbeat(
        rid, req.group_id, req.generation_id, req.member_id, req.group_instance_id),
        _HEARTBEAT_TIMED_OUT)]
    return Respond({"throttle_time_ms": 0, "error_code": done.error_code})


# ------------------------------------------------------------------- LeaveGroup


def handle_leave_group(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    if version >= 3:
        members = [LeaveMemberRow(m.member_id, m.group_instance_id) for m in req.members]
    else:
        members = [LeaveMemberRow(req.member_id, None)]
    done: LeaveGroupDone
    [done] = yield [_prompt_call(ctx, _coordinator(ctx, req.group_id),
                                 lambda rid: LeaveGroup(rid, req.group_id, members),
                                 _LEAVE_TIMED_OUT)]
    if version < 3:
        # One member: its own code is the answer (the request-level one if none).
        code = done.members[0].error_code if done.members else done.error_code
        if done.error_code != NONE:
            code = done.error_code
        return Respond({"throttle_time_ms": 0, "error_code": code})
    return Respond({
        "throttle_time_ms": 0,
        "error_code": done.error_code,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "error_code": m.error_code}
            for m in done.members
        ],
    })


# ----------------------------------------------------------------- OffsetCommit


def handle_offset_commit(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    codes: dict[tuple[str, int], int] = {}
    rows: list[OffsetCommitRow] = []
    order: list[tuple[str, list[int]]] = []
    # Kafka: Read on the group (every partition 30), then Read on each topic (29)
    group_denied = not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id)
    for t in req.topics:
        count = ctx.partition_count(t.name)
        indexes = []
        denied = (ErrorCode.GROUP_AUTHORIZATION_FAILED if group_denied
                  else None if ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)
                  else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        for p in t.partitions:
            indexes.append(p.partition_index)
            if denied is not None:
                codes[(t.name, p.partition_index)] = int(denied)
            elif count is None or not 0 <= p.partition_index < count:
                codes[(t.name, p.partition_index)] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                epoch = p.committed_leader_epoch if version >= 6 else -1
                rows.append(OffsetCommitRow(t.name, p.partition_index, p.committed_offset,
                                            -1 if epoch is None else epoch,
                                            p.committed_metadata))
        order.append((t.name, indexes))
    if rows:
        instance = req.group_instance_id if version >= 7 else None
        done: OffsetCommitDone
        [done] = yield [remote_call(
            ctx, _coordinator(ctx, req.group_id), lambda rid: OffsetCommit(
                rid, req.group_id, req.generation_id_or_member_epoch, req.member_id or "",
                instance, rows), 0, OFFSET_COMMIT_DEADLINE_MS,
            partitions_timed_out(OffsetCommitDone, COMMIT_TIMED_OUT, rows), False)]
        for row in done.rows:
            codes[(row.topic, row.partition)] = row.error_code
    return Respond({
        "throttle_time_ms": 0,
        "topics": [
            {"name": name, "partitions": [
                {"partition_index": i, "error_code": codes[(name, i)]} for i in indexes
            ]}
            for name, indexes in order
        ],
    })


# ------------------------------------------------------------------ OffsetFetch


def _wanted(topics: Any) -> list[TopicPartition] | None:
    if topics is None:
        return None
    return [TopicPartition(t.name, i) for t in topics for i in t.partition_indexes]


def _fetched_topics(done: OffsetFetchDone, version: int) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for row in done.rows:
        by_topic.setdefault(row.topic, []).append({
            "partition_index": row.partition,
            "committed_offset": row.offset,
            "committed_leader_epoch": row.leader_epoch,
            "metadata": row.metadata,
            "error_code": row.error_code,
        })
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


def _described(ctx: HandlerContext, done: OffsetFetchDone, asked: bool) -> OffsetFetchDone:
    """Kafka: Describe on each topic. A topic the principal may not describe answers
    TOPIC_AUTHORIZATION_FAILED where the request named it, and is left out of an
    all-topics answer."""
    if ctx.authorizer is None or done.error_code != NONE:
        return done
    decided: dict[str, bool] = {}
    rows: list[OffsetFetchDoneRow] = []
    for row in done.rows:
        if row.topic not in decided:
            decided[row.topic] = ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, row.topic)
        if decided[row.topic]:
            rows.append(row)
        elif asked:
            rows.append(OffsetFetchDoneRow(row.topic, row.partition, -1, -1, "",
                                           int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
    return done._replace(rows=rows)


def _offset_fetch(group_id: str, rows: list[TopicPartition] | None,
                  require_stable: bool = False) -> Callable[[int], Any]:
    return lambda rid: OffsetFetch(rid, group_id, rows, require_stable)


def handle_offset_fetch(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    if version >= 8:
        groups = [(g.group_id, _wanted(g.topics)) for g in req.groups]
        replies: list[OffsetFetchDone] = yield [
            _prompt_call(ctx, _coordinator(ctx, gid),
                         _offset_fetch(gid, rows, bool(req.require_stable)),
                         _OFFSET_FETCH_TIMED_OUT)
            for gid, rows in groups]
        return Respond({
            "throttle_time_ms": 0,
            "groups": [
                {"group_id": gid,
                 "topics": _fetched_topics(_described(ctx, done, asked is not None), version),
                 "error_code": done.error_code}
                for (gid, asked), done in zip(groups, replies, strict=True)
            ],
        })
    rows = _wanted(req.topics)
    done: OffsetFetchDone
    [done] = yield [_prompt_call(ctx, _coordinator(ctx, req.group_id),
                                 _offset_fetch(req.group_id, rows,
                                               version >= 7 and bool(req.require_stable)),
                                 _OFFSET_FETCH_TIMED_OUT)]
    topics = _fetched_topics(_described(ctx, done, rows is not None), version)
    if version < 2 and done.error_code != NONE:
        # v0-1 have no top-level error: every asked partition carries it.
        topics = [{"name": t, "partitions": [
            {"partition_index": tp.partition, "committed_offset": -1, "metadata": "",
             "error_code": done.error_code} for tp in (rows or []) if tp.topic == t]}
            for t in dict.fromkeys(tp.topic for tp in rows or [])]
    return Respond({"throttle_time_ms": 0, "error_code": done.error_code, "topics": topics})


# ------------------------------------------------------ ListGroups / DescribeGroups


def handle_list_groups(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    states = list(req.states_filter) if version >= 4 and req.states_filter else None
    types = [t.lower() for t in req.types_filter] if version >= 5 and req.types_filter else None
    coordinators = [ctx.topology.coordinator(i) for i in range(ctx.topology.num_coordinators)]
    replies: list[ListGroupsDone] = yield [
        _prompt_call(ctx, c, lambda rid: ListGroups(rid, states), _LIST_TIMED_OUT)
        for c in coordinators]
    error = next((r.error_code for r in replies if r.error_code != NONE), NONE)
    groups = []
    if types is None or "classic" in types:
        groups = [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
             "group_type": "classic"}
            for r in replies for g in r.rows
        ]
    return Respond({"throttle_time_ms": 0, "error_code": error, "groups": groups})


def _describe_groups(group_ids: list[str]) -> Callable[[int], Any]:
    return lambda rid: DescribeGroups(rid, group_ids)


def handle_describe_groups(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    by_coordinator: dict[Any, list[str]] = {}
    for gid in req.groups:
        by_coordinator.setdefault(_coordinator(ctx, gid), []).append(gid)
    targets = list(by_coordinator.items())
    replies: list[DescribeGroupsDone] = yield [
        _prompt_call(ctx, c, _describe_groups(ids), functools.partial(_groups_timed_out, ids))
        for c, ids in targets]
    described: dict[str, DescribeGroupRow] = {}
    for reply in replies:
        for g in reply.groups:
            described[g.group_id] = g
    groups = []
    for gid in req.groups:
        g = described[gid]
        groups.append({
            "error_code": g.error_code,
            "group_id": gid,
            "group_state": g.state,
            "protocol_type": g.protocol_type,
            "protocol_data": g.protocol_data,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "client_id": m.client_id, "client_host": m.client_host,
                 "member_metadata": m.metadata, "member_assignment": m.assignment}
                for m in g.members
            ],
        })
        if getattr(req, "include_authorized_operations", False) and g.error_code == 0:
            groups[-1]["authorized_operations"] = authorized_operations(
                ctx, ResourceType.GROUP, gid)
    return Respond({"throttle_time_ms": 0, "groups": groups})
