"""Whole-request ACL checks made before an API function runs (authorizer.class.name = acl).

The APIs whose every answer is one error when the principal may not act on the
request's group, transactional id or cluster are answered here, with Kafka's
codes: GROUP_AUTHORIZATION_FAILED (30), TRANSACTIONAL_ID_AUTHORIZATION_FAILED
(53), CLUSTER_AUTHORIZATION_FAILED (31). Checks per topic (Produce, Fetch,
Metadata, ListOffsets, OffsetCommit, CreateTopics, DeleteTopics) live in the API
functions, which answer each denied topic with TOPIC_AUTHORIZATION_FAILED (29)
and serve the rest. Which operation each API needs is Kafka's
(:mod:`actors.security.api_acls` has the full table).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_key import ApiKey

from actors.apis.base import HandlerContext
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
}


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
    op = _CLUSTER_OPS.get(api_key)
    if op is not None and not ctx.allowed(op, ResourceType.CLUSTER, CLUSTER_NAME):
        return _error(CLUSTER_DENIED)
    return None
