"""The consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups.

Each function turns the decoded request into one message per group for
``topology.coordinator_for(group_id)`` (wire/group_messages.py), waits for
the ``*Done`` answers and shapes the response for the request's version.
Those answers may take as long as a rebalance (JoinGroup, SyncGroup); the
handler keeps serving other requests meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.apis.base import ApiGen, Call, HandlerContext, Respond
from actors.apis.transactions import find_transaction_coordinator
from wire.errors import ErrorCode
from wire.group_messages import (
    DescribeGroups,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    ListGroups,
    OffsetCommit,
    OffsetFetch,
    SyncGroup,
)

NONE = int(ErrorCode.NONE)
GROUP_KEY = 0
TRANSACTION_KEY = 1
CLIENT_HOST = ""  # the handler is not told the connection's peer address


def _coordinator(ctx: HandlerContext, group_id: str) -> Any:
    return ctx.topology.coordinator_for(group_id)


# --------------------------------------------------------------- FindCoordinator


def handle_find_coordinator(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """This single node coordinates every group; transactions: actors/apis/transactions.py."""
    version = header.api_version
    key_type = req.key_type if version >= 1 else GROUP_KEY

    def one(key: str) -> tuple[int, str | None]:
        if key_type == TRANSACTION_KEY:
            return find_transaction_coordinator(key)
        if key_type != GROUP_KEY:
            return int(ErrorCode.INVALID_REQUEST), f"unknown coordinator key type {key_type}"
        return NONE, None

    if version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            error, message = one(key)
            ok = error == NONE
            coordinators.append({
                "key": key,
                "node_id": ctx.broker_id if ok else -1,
                "host": ctx.advertised_host if ok else "",
                "port": ctx.advertised_port if ok else -1,
                "error_code": error,
                "error_message": message,
            })
        return Respond({"throttle_time_ms": 0, "coordinators": coordinators})
    error, message = one(req.key)
    ok = error == NONE
    return Respond({
        "throttle_time_ms": 0,
        "error_code": error,
        "error_message": message if version >= 1 else None,
        "node_id": ctx.broker_id if ok else -1,
        "host": ctx.advertised_host if ok else "",
        "port": ctx.advertised_port if ok else -1,
    })
    yield  # a generator like every API function


# -------------------------------------------------------------------- JoinGroup


def handle_join_group(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    protocols = [[p.name, bytes(p.metadata)] for p in req.protocols]
    [done] = yield [Call(_coordinator(ctx, req.group_id), lambda rid: JoinGroup(
        rid, req.group_id, req.member_id or "", req.group_instance_id, header.client_id or "",
        CLIENT_HOST, req.protocol_type, protocols, req.session_timeout_ms,
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
            {"member_id": m, "group_instance_id": instance, "metadata": meta}
            for m, instance, meta in done.members
        ],
    })


# -------------------------------------------------------------------- SyncGroup


def handle_sync_group(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
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
    [done] = yield [Call(_coordinator(ctx, req.group_id), lambda rid: Heartbeat(
        rid, req.group_id, req.generation_id, req.member_id, req.group_instance_id))]
    return Respond({"throttle_time_ms": 0, "error_code": done.error_code})


# ------------------------------------------------------------------- LeaveGroup


def handle_leave_group(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    if version >= 3:
        members = [[m.member_id, m.group_instance_id] for m in req.members]
    else:
        members = [[req.member_id, None]]
    [done] = yield [Call(_coordinator(ctx, req.group_id),
                         lambda rid: LeaveGroup(rid, req.group_id, members))]
    if version < 3:
        # One member: its own code is the answer (the request-level one if none).
        code = done.members[0][2] if done.members else done.error_code
        if done.error_code != NONE:
            code = done.error_code
        return Respond({"throttle_time_ms": 0, "error_code": code})
    return Respond({
        "throttle_time_ms": 0,
        "error_code": done.error_code,
        "members": [
            {"member_id": m, "group_instance_id": instance, "error_code": code}
            for m, instance, code in done.members
        ],
    })


# ----------------------------------------------------------------- OffsetCommit


def handle_offset_commit(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    codes: dict[tuple[str, int], int] = {}
    rows: list[list[Any]] = []
    order: list[tuple[str, list[int]]] = []
    for t in req.topics:
        count = ctx.partition_count(t.name)
        indexes = []
        for p in t.partitions:
            indexes.append(p.partition_index)
            if count is None or not 0 <= p.partition_index < count:
                codes[(t.name, p.partition_index)] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                epoch = p.committed_leader_epoch if version >= 6 else -1
                rows.append([t.name, p.partition_index, p.committed_offset,
                             -1 if epoch is None else epoch, p.committed_metadata])
        order.append((t.name, indexes))
    if rows:
        instance = req.group_instance_id if version >= 7 else None
        [done] = yield [Call(_coordinator(ctx, req.group_id), lambda rid: OffsetCommit(
            rid, req.group_id, req.generation_id_or_member_epoch, req.member_id or "",
            instance, rows))]
        for topic, partition, code in done.rows:
            codes[(topic, partition)] = code
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


def _wanted(topics: Any) -> list[list[Any]] | None:
    if topics is None:
        return None
    return [[t.name, i] for t in topics for i in t.partition_indexes]


def _fetched_topics(done: Any, version: int) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, offset, epoch, metadata, code in done.rows:
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": offset,
            "committed_leader_epoch": epoch,
            "metadata": metadata,
            "error_code": code,
        })
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


def _offset_fetch(group_id: str, rows: list[list[Any]] | None) -> Callable[[int], Any]:
    return lambda rid: OffsetFetch(rid, group_id, rows)


def handle_offset_fetch(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    if version >= 8:
        groups = [(g.group_id, _wanted(g.topics)) for g in req.groups]
        replies = yield [Call(_coordinator(ctx, gid), _offset_fetch(gid, rows))
                         for gid, rows in groups]
        return Respond({
            "throttle_time_ms": 0,
            "groups": [
                {"group_id": gid, "topics": _fetched_topics(done, version),
                 "error_code": done.error_code}
                for (gid, _rows), done in zip(groups, replies, strict=True)
            ],
        })
    rows = _wanted(req.topics)
    [done] = yield [Call(_coordinator(ctx, req.group_id),
                         lambda rid: OffsetFetch(rid, req.group_id, rows))]
    topics = _fetched_topics(done, version)
    if version < 2 and done.error_code != NONE:
        # v0-1 have no top-level error: every asked partition carries it.
        topics = [{"name": t, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "",
             "error_code": done.error_code} for tt, p in (rows or []) if tt == t]}
            for t in dict.fromkeys(r[0] for r in rows or [])]
    return Respond({"throttle_time_ms": 0, "error_code": done.error_code, "topics": topics})


# ------------------------------------------------------ ListGroups / DescribeGroups


def handle_list_groups(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    states = list(req.states_filter) if version >= 4 and req.states_filter else None
    types = [t.lower() for t in req.types_filter] if version >= 5 and req.types_filter else None
    coordinators = [ctx.topology.coordinator(i) for i in range(ctx.topology.num_coordinators)]
    replies = yield [Call(c, lambda rid: ListGroups(rid, states)) for c in coordinators]
    error = next((r.error_code for r in replies if r.error_code != NONE), NONE)
    groups = []
    if types is None or "classic" in types:
        groups = [
            {"group_id": gid, "protocol_type": ptype, "group_state": state,
             "group_type": "classic"}
            for r in replies for gid, ptype, state in r.rows
        ]
    return Respond({"throttle_time_ms": 0, "error_code": error, "groups": groups})


def _describe_groups(group_ids: list[str]) -> Callable[[int], Any]:
    return lambda rid: DescribeGroups(rid, group_ids)


def handle_describe_groups(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    by_coordinator: dict[Any, list[str]] = {}
    for gid in req.groups:
        by_coordinator.setdefault(_coordinator(ctx, gid), []).append(gid)
    targets = list(by_coordinator.items())
    replies = yield [Call(c, _describe_groups(ids)) for c, ids in targets]
    described: dict[str, list[Any]] = {}
    for reply in replies:
        for g in reply.groups:
            described[g[1]] = g
    groups = []
    for gid in req.groups:
        code, _gid, state, ptype, pdata, members = described[gid]
        groups.append({
            "error_code": code,
            "group_id": gid,
            "group_state": state,
            "protocol_type": ptype,
            "protocol_data": pdata,
            "members": [
                {"member_id": m, "group_instance_id": instance, "client_id": client,
                 "client_host": host, "member_metadata": meta, "member_assignment": assignment}
                for m, instance, client, host, meta, assignment in members
            ],
        })
    return Respond({"throttle_time_ms": 0, "groups": groups})
