"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

Kafka admin clients manage SCRAM users with these, as ``actorlog users`` does:
both work on the same store (ZooKeeper's ``/config/users/<name>`` in a cluster,
the data dir on a single node) through :mod:`actors.security.scram_admin`.
The ACL checks (Describe, resp. Alter, on the cluster) are made before these
run (:mod:`actors.apis.authorize`). After a change the process's SASL
credential cache takes the users at once, so the next login sees them; other
nodes take them from ZooKeeper's change notification (their ClusterController).
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from actors.apis.base import ApiGen, HandlerContext, Respond
from actors.metadata.store import MetadataError
from actors.security.scram_admin import (
    Deletion,
    Upsertion,
    alter_scram_credentials,
    describe_scram_credentials,
)
from wire.errors import ErrorCode

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

    if ctx.user_store is None:
        return error(ErrorCode.UNKNOWN_SERVER_ERROR, NO_STORE)
    try:
        rows = describe_scram_credentials(ctx.user_store, names)
    except (MetadataError, OSError, ValueError) as exc:  # unreadable store, ZooKeeper down
        LOG.warning("DescribeUserScramCredentials failed: {}", exc)
        return error(ErrorCode.UNKNOWN_SERVER_ERROR, f"reading the users failed: {exc}")
    return Respond({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "results": [
                        {"user": r.user, "error_code": int(r.error), "error_message": r.message,
                         "credential_infos": [{"mechanism": m, "iterations": i}
                                              for m, i in r.credentials]}
                        for r in rows]})
    yield  # a generator like every API function


def handle_alter_user_scram_credentials(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    deletions = [Deletion(d.name, int(d.mechanism)) for d in req.deletions]
    upsertions = [Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
                            bytes(u.salted_password)) for u in req.upsertions]
    users = list(dict.fromkeys([*(d.user for d in deletions), *(u.user for u in upsertions)]))

    def every(err: ErrorCode, message: str) -> Respond:
        return Respond({"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": int(err), "error_message": message} for u in users]})

    if ctx.user_store is None:
        return every(ErrorCode.UNKNOWN_SERVER_ERROR, NO_STORE)
    try:
        results = alter_scram_credentials(ctx.user_store, deletions, upsertions)
    except (MetadataError, OSError, ValueError) as exc:  # ZooKeeper down, disk full
        LOG.warning("AlterUserScramCredentials failed: {}", exc)
        return every(ErrorCode.UNKNOWN_SERVER_ERROR, f"writing the users failed: {exc}")
    principal = ctx.access.principal
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
