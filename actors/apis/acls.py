"""DescribeAcls, CreateAcls, DeleteAcls (authorizer.class.name = acl).

Describe on the cluster (DescribeAcls) and Alter on the cluster (Create/Delete)
are checked as Kafka checks them. Describe answers from the process's
authorizer; Create and Delete write the store (the data dir's security file or
ZooKeeper's /kafka-acl) with conditional writes (:mod:`actors.security.acl_admin`)
and then refresh the authorizer from the store, so every handler of this
process sees the change at once. Without an authorizer the three answer
SECURITY_DISABLED, as Kafka does.

Processes 1.. of a cluster node (num.processes > 1) have no store: Create and
Delete go to process 0's controller, the single owner of the node's ZooKeeper
session, whose answer carries the changed patterns; this process's copy takes
them before the client is answered (the other processes get them relayed).
Describe answers from that copy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator
from enum import IntEnum
from typing import Any, TypeVar

from loguru import logger

from actors.apis.base import ApiGen, Call, HandlerContext, Respond
from actors.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from actors.security.acl_admin import create_acls, delete_acls
from actors.security.mirror import binding_of, binding_row, filter_row
from wire.errors import ErrorCode
from wire.security_messages import AclsCreate, AclsDelete, AclsDone

NONE = int(ErrorCode.NONE)
AUTHZ = logger.bind(actor="authorizer")
DISABLED = "no authorizer is configured on the broker (authorizer.class.name)"
E = TypeVar("E", bound=IntEnum)


def _code(cls: type[E], value: int) -> E:
    """Kafka's wire code as the enum; UNKNOWN (0) for a code this broker does not know."""
    try:
        return cls(value)
    except ValueError:
        return cls(0)


def _filter(item: Any, version: int) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as the core's filter."""
    pattern = (int(item.pattern_type_filter) if version >= 1 else int(PatternType.LITERAL))
    return AclBindingFilter(
        _code(ResourceType, int(item.resource_type_filter)), item.resource_name_filter,
        _code(PatternType, pattern), item.principal_filter, item.host_filter,
        _code(Operation, int(item.operation)), _code(Permission, int(item.permission_type)))


def _filter_problem(f: AclBindingFilter) -> str | None:
    for value, what in ((f.resource_type, "resource type"), (f.pattern_type, "pattern type"),
                        (f.operation, "operation"), (f.permission, "permission type")):
        if int(value) == 0:
            return f"unknown {what} in the filter"
    return None


def _refresh(ctx: HandlerContext) -> None:
    ctx.refresh_acls(force=True)


def _no_store(ctx: HandlerContext) -> bool:
    """No authorizer, or none of the ways to change the ACLs (a store, process 0)."""
    return ctx.authorizer is None or (ctx.acl_store is None and ctx.security_mirror is None)


def _forward(ctx: HandlerContext, make: Any) -> Generator[list[Call], list[Any], AclsDone]:
    """Processes 1..: the request to process 0's controller; its answer, once this
    process's copy of the ACLs took the patterns it changed."""
    [done] = yield [Call(ctx.topology.controller, make)]
    assert isinstance(done, AclsDone)
    if done.error_code == NONE:
        ctx.security_mirror.apply_answer(done.version, acls=done.acls)
    return done


def handle_describe_acls(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    def error(err: ErrorCode, message: str) -> Respond:
        return Respond({"throttle_time_ms": 0, "error_code": int(err), "error_message": message,
                        "resources": []})

    if ctx.authorizer is None:
        return error(ErrorCode.SECURITY_DISABLED, DISABLED)
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Describe on the cluster denied")
    filter_ = _filter(req, header.api_version)
    problem = _filter_problem(filter_)
    if problem is not None:
        return error(ErrorCode.INVALID_REQUEST, problem)
    if ctx.acl_store is not None:
        _refresh(ctx)  # other processes or nodes may have changed the store
    by_pattern: dict[ResourcePattern, list[AclEntry]] = defaultdict(list)
    for binding in ctx.authorizer.bindings(filter_):
        by_pattern[binding.pattern].append(binding.entry)
    return Respond({
        "throttle_time_ms": 0, "error_code": NONE, "error_message": None,
        "resources": [
            {"resource_type": int(p.resource_type), "resource_name": p.name,
             "pattern_type": int(p.pattern_type),
             "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                       "permission_type": int(e.permission)} for e in entries]}
            for p, entries in sorted(by_pattern.items())],
    })
    yield  # a generator like every API function


def handle_create_acls(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    creations = list(req.creations)

    def every(err: ErrorCode, message: str) -> Respond:
        return Respond({"throttle_time_ms": 0, "results": [
            {"error_code": int(err), "error_message": message} for _ in creations]})

    if _no_store(ctx):
        return every(ErrorCode.SECURITY_DISABLED, DISABLED)
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Alter on the cluster denied")
    bindings = []
    for c in creations:
        pattern = (int(c.resource_pattern_type) if header.api_version >= 1
                   else int(PatternType.LITERAL))
        bindings.append(AclBinding(
            ResourcePattern(_code(ResourceType, int(c.resource_type)), c.resource_name,
                            _code(PatternType, pattern)),
            AclEntry(c.principal, c.host, _code(Operation, int(c.operation)),
                     _code(Permission, int(c.permission_type)))))
    if ctx.acl_store is None:
        rows = [binding_row(b) for b in bindings]
        done = yield from _forward(ctx, lambda req_id: AclsCreate(req_id, rows))
        if done.error_code != NONE:
            return every(ErrorCode(done.error_code), done.error_message or "")
        problems = list(done.problems)
    else:
        try:
            problems = create_acls(ctx.acl_store, bindings)
        except (AclError, OSError, ValueError) as exc:
            AUTHZ.warning("CreateAcls failed: {}", exc)
            return every(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        _refresh(ctx)
    for binding, problem in zip(bindings, problems, strict=True):
        if problem is None:
            AUTHZ.info("ACL added: {} {}", binding.pattern, binding.entry)
    return Respond({"throttle_time_ms": 0, "results": [
        {"error_code": NONE if p is None else int(ErrorCode.INVALID_REQUEST), "error_message": p}
        for p in problems]})
    yield


def handle_delete_acls(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    filters = list(req.filters)

    def every(err: ErrorCode, message: str) -> Respond:
        return Respond({"throttle_time_ms": 0, "filter_results": [
            {"error_code": int(err), "error_message": message, "matching_acls": []}
            for _ in filters]})

    if _no_store(ctx):
        return every(ErrorCode.SECURITY_DISABLED, DISABLED)
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Alter on the cluster denied")
    results: list[dict[str, Any]] = [{"error_code": NONE, "error_message": None,
                                      "matching_acls": []} for _ in filters]
    good: list[AclBindingFilter] = []
    where: list[int] = []
    for i, f in enumerate(filters):
        filter_ = _filter(f, header.api_version)
        problem = _filter_problem(filter_)
        if problem is not None:
            results[i] = {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": problem,
                          "matching_acls": []}
            continue
        good.append(filter_)
        where.append(i)
    if good and ctx.acl_store is None:
        rows = [filter_row(f) for f in good]
        done = yield from _forward(ctx, lambda req_id: AclsDelete(req_id, rows))
        if done.error_code != NONE:
            return every(ErrorCode(done.error_code), done.error_message or "")
        deleted = [[binding_of(b) for b in found] for found in done.deleted]
    elif good:
        try:
            deleted = delete_acls(ctx.acl_store, good)
        except (AclError, OSError, ValueError) as exc:
            AUTHZ.warning("DeleteAcls failed: {}", exc)
            return every(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        _refresh(ctx)
    if good:
        for i, found in zip(where, deleted, strict=True):
            results[i]["matching_acls"] = [_matching(b) for b in found]
            for binding in found:
                AUTHZ.info("ACL removed: {} {}", binding.pattern, binding.entry)
    return Respond({"throttle_time_ms": 0, "filter_results": results})
    yield


def _matching(binding: AclBinding) -> dict[str, Any]:
    p, e = binding.pattern, binding.entry
    return {"error_code": NONE, "error_message": None, "resource_type": int(p.resource_type),
            "resource_name": p.name, "pattern_type": int(p.pattern_type),
            "principal": e.principal, "host": e.host, "operation": int(e.operation),
            "permission_type": int(e.permission)}
