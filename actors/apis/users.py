"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

Kafka admin clients manage SCRAM users with these, as ``actorlog users`` does:
both work on the same store (ZooKeeper's ``/config/users/<name>`` in a cluster,
the data dir on a single node) through :mod:`actors.security.scram_admin`.
The ACL checks (Describe, resp. Alter, on the cluster) are made before these
run (:mod:`actors.apis.authorize`). After a change the process's SASL
credential cache takes the users at once, so the next login sees them; other
nodes take them from ZooKeeper's change notification (their ClusterController).

Processes 1.. of a cluster node (num.processes > 1) have no store of their own:
both requests go to process 0's controller, which owns the node's ZooKeeper
session; an Alter's answer carries the changed users, which this process's SASL
cache takes before the client is answered (the other processes get them relayed).
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from actors.apis.base import ApiGen, Call, HandlerContext, Respond
from actors.metadata.store import MetadataError
from actors.security.scram_admin import (
    Deletion,
    Upsertion,
    alter_scram_credentials,
    describe_scram_credentials,
)
from wire.errors import ErrorCode
from wire.security_messages import (
    ScramCredentialsAlter,
    ScramCredentialsDescribe,
    ScramCredentialsDone,
    ScramDeletionRow,
    ScramUpsertionRow,
)

LOG = logger.bind(actor="users")
NO_STORE = "this node keeps no SCRAM credentials"


def handle_describe_user_scram_credentials(ctx: HandlerContext, header: Any,
                                           req: Any) -> ApiGen:
    names = None if req.users is None else [u.name for u in req.users]

    def error(err: ErrorCode, message: str) -> Respond:
        """The whole request failed: at the top level when every user was asked for, else
        on each named user (librdkafka aborts on a top-level error next to user results;
        see actors/apis/authorize.py)."""
        if not names:
            return Respond({"throttle_time_ms": 0, "error_code": int(err),
                            "error_message": message, "results": []})
        return Respond({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                        "results": [{"user": n, "error_code": int(err), "error_message": message,
                                     "credential_infos": []} for n in dict.fromkeys(names)]})

    if ctx.user_store is None and ctx.security_mirror is None:
        return error(ErrorCode.UNKNOWN_SERVER_ERROR, NO_STORE)
    if ctx.user_store is None:  # processes 1..: process 0 reads them
        [done] = yield [Call(ctx.topology.controller,
                             lambda req_id: ScramCredentialsDescribe(req_id, names))]
        assert isinstance(done, ScramCredentialsDone)
        if done.error_code:
            return error(ErrorCode(done.error_code), done.error_message or "")
        found = [(r.user, r.error_code, r.error_message, r.credentials) for r in done.results]
    else:
        try:
            rows = describe_scram_credentials(ctx.user_store, names)
        except (MetadataError, OSError, ValueError) as exc:  # unreadable store, ZooKeeper down
            LOG.warning("DescribeUserScramCredentials failed: {}", exc)
            return error(ErrorCode.UNKNOWN_SERVER_ERROR, f"reading the users failed: {exc}")
        found = [(r.user, int(r.error), r.message, [list(c) for c in r.credentials])
                 for r in rows]
    return Respond({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "results": [
                        {"user": user, "error_code": code, "error_message": message,
                         "credential_infos": [{"mechanism": m, "iterations": i}
                                              for m, i in credentials]}
                        for user, code, message, credentials in found]})


def handle_alter_user_scram_credentials(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    deletions = [Deletion(d.name, int(d.mechanism)) for d in req.deletions]
    upsertions = [Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
                            bytes(u.salted_password)) for u in req.upsertions]
    users = list(dict.fromkeys([*(d.user for d in deletions), *(u.user for u in upsertions)]))

    def every(err: ErrorCode, message: str) -> Respond:
        return Respond({"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": int(err), "error_message": message} for u in users]})

    if ctx.user_store is None and ctx.security_mirror is None:
        return every(ErrorCode.UNKNOWN_SERVER_ERROR, NO_STORE)
    principal = ctx.access.principal
    if ctx.user_store is None:  # processes 1..: process 0 writes them
        return (yield from _alter_through_process_0(ctx, deletions, upsertions, every))
    try:
        results = alter_scram_credentials(ctx.user_store, deletions, upsertions)
    except (MetadataError, OSError, ValueError) as exc:  # ZooKeeper down, disk full
        LOG.warning("AlterUserScramCredentials failed: {}", exc)
        return every(ErrorCode.UNKNOWN_SERVER_ERROR, f"writing the users failed: {exc}")
    for r in results:
        if r.error == ErrorCode.NONE:
            LOG.info("SCRAM credentials of user {} changed by {}", r.user, principal)
            if ctx.credentials is not None:
                try:
                    ctx.credentials.refresh(r.user)
                except (MetadataError, OSError, ValueError) as exc:  # a later notice will
                    LOG.warning("user {} not refreshed in the SASL cache: {}", r.user, exc)
    return Respond({"throttle_time_ms": 0, "results": [
        {"user": r.user, "error_code": int(r.error), "error_message": r.message}
        for r in results]})
    yield


def _alter_through_process_0(ctx: HandlerContext, deletions: list[Deletion],
                             upsertions: list[Upsertion], every: Any) -> ApiGen:
    principal = ctx.access.principal
    dels = [ScramDeletionRow(d.user, d.mechanism) for d in deletions]
    ups = [ScramUpsertionRow(u.user, u.mechanism, u.iterations, u.salt, u.salted_password)
           for u in upsertions]
    [done] = yield [Call(ctx.topology.controller,
                         lambda req_id: ScramCredentialsAlter(req_id, principal, dels, ups))]
    assert isinstance(done, ScramCredentialsDone)
    if done.error_code:
        return every(ErrorCode(done.error_code), done.error_message or "")
    if done.users:  # this process's logins see them before the client is answered
        for problem in ctx.security_mirror.apply_answer(done.version, users=done.users):
            LOG.warning("SCRAM credentials skipped: {}", problem)
    for r in done.results:
        if r.error_code == ErrorCode.NONE:
            LOG.info("SCRAM credentials of user {} changed by {}", r.user, principal)
    return Respond({"throttle_time_ms": 0, "results": [
        {"user": r.user, "error_code": r.error_code, "error_message": r.error_message}
        for r in done.results]})
