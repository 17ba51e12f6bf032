"""Whole-request ACL checks made before an API function runs (authorizer.class.name = acl).

The APIs whose every answer is one error when the principal may not act on the
request's group, transactional id or cluster are answered here, with Kafka's
codes: GROUP_AUTHORIZATION_FAILED (30), TRANSACTIONAL_ID_AUTHORIZATION_FAILED
(53), CLUSTER_AUTHORIZATION_FAILED (31). Checks per topic (Produce, Fetch,
Metadata, ListOffsets, OffsetCommit, OffsetFetch, CreateTopics, DeleteTopics,
DescribeProducers) live in the API
functions, which answer each denied topic with TOPIC_AUTHORIZATION_FAILED (29)
and serve the rest. Which operation each API needs is Kafka's
(:mod:`actors.security.api_acls` has the full table).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka.protocol.api_key import ApiKey

from actors.apis.base import ApiGen, HandlerContext, Respond
from actors.security.acl import CLUSTER_NAME, Operation, ResourceType
from wire.errors import ErrorCode

GROUP_KEY, TRANSACTION_KEY = 0, 1
GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
TXN_DENIED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
CLUSTER_DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

# API -> the group operation that every request of it needs
_GROUP_OPS = {
    int(ApiKey.JoinGroup): Operation.READ,
    int(ApiKey.SyncGroup): Operation.READ,
    int(ApiKey.Heartbeat): Operation.READ,
    int(ApiKey.LeaveGroup): Operation.READ,
    int(ApiKey.OffsetFetch): Operation.DESCRIBE,
}
_TXN_WRITE = (int(ApiKey.EndTxn), int(ApiKey.AddOffsetsToTxn))
# cluster-wide APIs answered with one top-level error_code
_CLUSTER_OPS = {
    int(ApiKey.DescribeCluster): Operation.DESCRIBE,
    int(ApiKey.DescribeLogDirs): Operation.DESCRIBE,
    int(ApiKey.DescribeUserScramCredentials): Operation.DESCRIBE,
    int(ApiKey.AlterUserScramCredentials): Operation.ALTER,
    int(ApiKey.ElectLeaders): Operation.ALTER,
    int(ApiKey.AlterPartitionReassignments): Operation.ALTER,
    int(ApiKey.ListPartitionReassignments): Operation.DESCRIBE,
    int(ApiKey.AlterReplicaLogDirs): Operation.ALTER,
}


# Kafka's AclEntry.supportedOperations: what an "authorized operations" bit field covers
_SUPPORTED_OPS = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION,
                           Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                           Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
}


def authorized_operations(ctx: HandlerContext, resource_type: ResourceType, name: str,
                          refresh: bool = True) -> set[int]:
    """The codes of the resource's supported operations the principal may do (the codec
    writes them as Kafka's 32-bit field, 1 << code), as Kafka's
    AuthHelper.authorizedOperations answers an include_*_authorized_operations request:
    every supported one without an authorizer; these probes are not logged. ``refresh``
    False: the caller read the ACLs again for this request already."""
    ops = _SUPPORTED_OPS[resource_type]
    authorizer = ctx.authorizer
    if authorizer is None:
        return {int(op) for op in ops}
    if refresh:
        ctx.refresh_acls()  # once for the whole field, not once an operation
    principal, host = ctx.access.principal, ctx.access.host
    return {int(op) for op in ops
            if authorizer.authorize(principal, host, op, resource_type, name).allowed}


def cluster_authorized_operations(ctx: HandlerContext) -> set[int]:
    """The cluster's authorized operations for DescribeCluster and Metadata v8-v10: none
    unless the principal may DESCRIBE the cluster (Kafka's KafkaApis asks that first)."""
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return set()
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME, refresh=False)


def _error(code: int, **more: Any) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, **more}


def denial(ctx: HandlerContext, api_key: int, version: int, req: Any) -> dict[str, Any] | None:
    """The whole answer when the principal may not make this request, else None."""
    if ctx.authorizer is None:
        return None
    op = _GROUP_OPS.get(api_key)
    if op is not None:
        group = getattr(req, "group_id", None) or getattr(req, "group", None)
        if group is None and api_key == ApiKey.OffsetFetch and getattr(req, "groups", None):
            group = req.groups[0].group_id  # v8+: one group per request from the clients
        if group is not None and not ctx.allowed(op, ResourceType.GROUP, group):
            if api_key == ApiKey.OffsetFetch and version >= 8:
                return {"throttle_time_ms": 0, "groups": [
                    {"group_id": g.group_id, "error_code": GROUP_DENIED, "topics": []}
                    for g in req.groups]}
            if api_key == ApiKey.OffsetFetch and version < 2:
                return {"topics": [
                    {"name": t.name, "partitions": [
                        {"partition_index": p, "committed_offset": -1, "metadata": None,
                         "error_code": GROUP_DENIED} for p in t.partition_indexes]}
                    for t in (req.topics or [])]}
            return _error(GROUP_DENIED)
        return None
    if api_key == ApiKey.FindCoordinator:
        key_type = req.key_type if version >= 1 else GROUP_KEY
        keys = list(req.coordinator_keys) if version >= 4 else [req.key]
        rtype, code = ((ResourceType.GROUP, GROUP_DENIED) if key_type == GROUP_KEY
                       else (ResourceType.TRANSACTIONAL_ID, TXN_DENIED))
        if key_type not in (GROUP_KEY, TRANSACTION_KEY):
            return None
        if all(not ctx.allowed(Operation.DESCRIBE, rtype, k) for k in keys):
            if version >= 4:
                return {"throttle_time_ms": 0, "coordinators": [
                    {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code}
                    for k in keys]}
            return _error(code, node_id=-1, host="", port=-1)
        return None
    if api_key == ApiKey.InitProducerId:
        txn = req.transactional_id
        if txn:
            if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
                return _error(TXN_DENIED, producer_id=-1, producer_epoch=-1)
        elif not (ctx.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
                  or ctx.allowed_any(Operation.WRITE, ResourceType.TOPIC)):
            return _error(CLUSTER_DENIED, producer_id=-1, producer_epoch=-1)
        return None
    if api_key in _TXN_WRITE:
        if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                           req.transactional_id):
            return _error(TXN_DENIED)
        if api_key == ApiKey.AddOffsetsToTxn and not ctx.allowed(
                Operation.READ, ResourceType.GROUP, req.group_id):
            return _error(GROUP_DENIED)
        return None
    if api_key == ApiKey.OffsetDelete and not ctx.allowed(Operation.DELETE, ResourceType.GROUP,
                                                          req.group_id):
        return _error(GROUP_DENIED, topics=[])
    if api_key == ApiKey.TxnOffsetCommit:
        refused = (TXN_DENIED if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                 req.transactional_id)
                   else GROUP_DENIED if not ctx.allowed(Operation.READ, ResourceType.GROUP,
                                                        req.group_id) else None)
        if refused is not None:
            return {"throttle_time_ms": 0, "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": p.partition_index, "error_code": refused}
                    for p in t.partitions]} for t in req.topics]}
        return None
    op = _CLUSTER_OPS.get(api_key)
    if op is not None and not ctx.allowed(op, ResourceType.CLUSTER, CLUSTER_NAME):
        return _cluster_denied(api_key, req)
    return None


def _cluster_denied(api_key: int, req: Any) -> dict[str, Any]:
    """CLUSTER_AUTHORIZATION_FAILED in the API's own shape (the SCRAM APIs answer per user)."""
    message = "Cluster authorization failed."
    if api_key == ApiKey.DescribeUserScramCredentials:
        if not req.users:  # every user asked for: the one top-level error, as Kafka
            return _error(CLUSTER_DENIED, error_message=message, results=[])
        # Named users: each result carries the error and the top level stays 0. Kafka
        # sets both, but librdkafka (2.16) frees memory it does not own when it reads a
        # top-level error next to per-user results and aborts the client; Java and
        # kafka-python clients read this shape the same way.
        return _error(0, error_message=None, results=[
            {"user": n, "error_code": CLUSTER_DENIED, "error_message": message,
             "credential_infos": []} for n in dict.fromkeys(u.name for u in req.users)])
    if api_key == ApiKey.AlterUserScramCredentials:
        users = sorted({i.name for i in [*req.deletions, *req.upsertions]})
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": CLUSTER_DENIED, "error_message": message}
            for u in users]}
    return _error(CLUSTER_DENIED)


# ---------------------------------------------------------------- per item
TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
_CONFIG_TOPIC, _CONFIG_BROKER = 2, 4


def _answered(gen: ApiGen, field_name: str, extra: list[dict[str, Any]],
              keep: Callable[[dict[str, Any]], bool] | None = None) -> ApiGen:
    """Run the API on the allowed items, then add the denied ones' answers (or leave out
    the rows ``keep`` refuses)."""
    answer = yield from gen
    if answer.data is not None:
        rows = [r for r in answer.data.get(field_name) or [] if keep is None or keep(r)]
        answer.data[field_name] = rows + extra
        # the codes the API counted miss the denied rows: the handler walks the data
        return answer._replace(error_codes=None)
    return answer


def _denied_topics(names: list[str]) -> list[dict[str, Any]]:
    return [{"error_code": TOPIC_DENIED, "name": n, "topic_id": None, "is_internal": False,
             "partitions": []} for n in names]


def _empty_topic_partitions() -> ApiGen:
    return Respond({"throttle_time_ms": 0, "topics": [], "next_cursor": None})
    yield  # unreachable: a generator like the APIs


def _split(items: list[Any], allowed: Callable[[Any], bool]) -> tuple[list[Any], list[Any]]:
    ok: list[Any] = []
    denied: list[Any] = []
    for item in items:
        (ok if allowed(item) else denied).append(item)
    return ok, denied


def answer_per_item(ctx: HandlerContext, api_key: int, req: Any,
                    run: Callable[[Any], ApiGen]) -> ApiGen | None:
    """APIs whose items are authorized one by one: the API runs on the allowed items
    (``run(req)`` with the list narrowed) and the denied ones get Kafka's error;
    None when the API has no per-item checks here."""
    if ctx.authorizer is None:
        return None
    allowed = ctx.allowed
    topic, group, txn = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
    if api_key == ApiKey.CreatePartitions:
        req.topics, denied = _split(list(req.topics),
                                    lambda t: allowed(Operation.ALTER, topic, t.name))
        return _answered(run(req), "results", [
            {"name": t.name, "error_code": TOPIC_DENIED, "error_message": None} for t in denied])
    if api_key == ApiKey.DeleteRecords:
        req.topics, denied = _split(list(req.topics),
                                    lambda t: allowed(Operation.DELETE, topic, t.name))
        return _answered(run(req), "topics", [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "low_watermark": -1,
                 "error_code": TOPIC_DENIED} for p in t.partitions]} for t in denied])
    if api_key in (ApiKey.DescribeConfigs, ApiKey.AlterConfigs, ApiKey.IncrementalAlterConfigs):
        op = (Operation.DESCRIBE_CONFIGS if api_key == ApiKey.DescribeConfigs
              else Operation.ALTER_CONFIGS)

        def may(r: Any) -> bool:
            if r.resource_type == _CONFIG_TOPIC:
                return allowed(op, topic, r.resource_name)
            if r.resource_type == _CONFIG_BROKER:
                return allowed(op, ResourceType.CLUSTER, CLUSTER_NAME)
            return True

        req.resources, denied = _split(list(req.resources), may)
        rows = [{"error_code": TOPIC_DENIED if r.resource_type == _CONFIG_TOPIC
                 else CLUSTER_DENIED, "error_message": None, "resource_type": r.resource_type,
                 "resource_name": r.resource_name} for r in denied]
        if api_key == ApiKey.DescribeConfigs:
            for row in rows:
                row["configs"] = []
        return _answered(run(req), "results" if api_key == ApiKey.DescribeConfigs
                         else "responses", rows)
    if api_key == ApiKey.DeleteGroups:
        # distinct first, as Kafka: a denied group named twice is answered once
        req.groups_names, denied = _split(list(dict.fromkeys(req.groups_names)),
                                          lambda g: allowed(Operation.DELETE, group, g))
        return _answered(run(req), "results",
                         [{"group_id": g, "error_code": GROUP_DENIED} for g in denied])
    if api_key == ApiKey.DescribeGroups:
        req.groups, denied = _split(list(req.groups),
                                    lambda g: allowed(Operation.DESCRIBE, group, g))
        return _answered(run(req), "groups", [
            {"error_code": GROUP_DENIED, "group_id": g, "group_state": "", "protocol_type": "",
             "protocol_data": "", "members": []} for g in denied])
    if api_key == ApiKey.DescribeTransactions:
        req.transactional_ids, denied = _split(
            list(req.transactional_ids), lambda t: allowed(Operation.DESCRIBE, txn, t))
        return _answered(run(req), "transaction_states", [
            {"error_code": TXN_DENIED, "transactional_id": t, "transaction_state": "",
             "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
             "producer_epoch": -1, "topics": []} for t in denied])
    # Kafka leaves out of these answers what the principal may not describe; a topic the
    # request names is answered TOPIC_AUTHORIZATION_FAILED (DescribeTopicPartitions-
    # RequestHandler: not when all topics are asked), after the others, without operations
    if api_key == ApiKey.DescribeTopicPartitions:
        # every denied name at or after the cursor, on every page (a denied name past the
        # page's last topic is answered again on the next): as Kafka's handler, which
        # adds them all after the page it walked
        cursor = req.cursor.topic_name if req.cursor is not None else ""
        named = sorted({t.name for t in req.topics or [] if t.name >= cursor})
        denied = [n for n in named if not allowed(Operation.DESCRIBE, topic, n)]
        req.topics = [t for t in req.topics or [] if t.name not in denied]
        if named and not req.topics:  # all denied: none left to describe
            return _answered(_empty_topic_partitions(), "topics", _denied_topics(denied))
        return _answered(run(req), "topics", _denied_topics(denied),
                         lambda r: allowed(Operation.DESCRIBE, topic, r["name"]))
    if api_key == ApiKey.ListTransactions:
        return _answered(run(req), "transaction_states", [],
                         lambda r: allowed(Operation.DESCRIBE, txn, r["transactional_id"]))
    if api_key == ApiKey.ListGroups:
        if allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log=False):
            return None
        return _answered(run(req), "groups", [],
                         lambda r: allowed(Operation.DESCRIBE, group, r["group_id"]))
    return None
