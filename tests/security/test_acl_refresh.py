"""A single node's handlers read the ACL store again when its file changed: at once,
whichever process wrote it; a failed read is tried again a period later, not never."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.apis.base import ACL_REFRESH_MS, HandlerContext
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.security.acl import (
    AclEntry,
    Authorizer,
    Operation,
    Permission,
    ResourcePattern,
    ResourceType,
)
from actors.security.local_store import LocalSecurityStore
from actors.topology import Topology

ORDERS = ResourcePattern(ResourceType.TOPIC, "orders")
READ = AclEntry("User:alice", "*", Operation.READ, Permission.ALLOW)


def _context(store: LocalSecurityStore, clock: ManualClock) -> HandlerContext:
    ctx = HandlerContext(Topology("n", 1, 1, 1, 1, 1), Config(), 1, "127.0.0.1", 9092,
                         "cluster", 0, clock=clock, authorizer=Authorizer(),
                         acl_store=store)
    ctx.refresh_acls(force=True)
    return ctx


def _may_read(ctx: HandlerContext) -> bool:
    ctx.refresh_acls()
    assert ctx.authorizer is not None
    return ctx.authorizer.authorize("User:alice", "127.0.0.1", Operation.READ,
                                    ResourceType.TOPIC, "orders").allowed


def test_a_change_by_another_writer_is_read_at_the_next_decision(tmp_path: Path) -> None:
    clock = ManualClock()
    ctx = _context(LocalSecurityStore(tmp_path), clock)
    assert not _may_read(ctx)
    LocalSecurityStore(tmp_path).set_acls(ORDERS, frozenset({READ}), -1)  # another process
    assert _may_read(ctx)  # no clock moved: the file's stamp said so
    LocalSecurityStore(tmp_path).set_acls(ORDERS, frozenset(), 0)
    assert not _may_read(ctx)


def test_a_failed_read_is_tried_again_a_period_later(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A revoke whose read fails once (EMFILE, EIO) is still in force a period later: the
    failure does not pass for a read of that file."""
    clock = ManualClock()
    writer = LocalSecurityStore(tmp_path)
    writer.set_acls(ORDERS, frozenset({READ}), -1)
    ctx = _context(LocalSecurityStore(tmp_path), clock)
    assert _may_read(ctx)
    writer.set_acls(ORDERS, frozenset(), 0)  # revoked
    real = LocalSecurityStore.get_all_acls
    calls = {"n": 0}

    def failing_once(self: LocalSecurityStore) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(24, "Too many open files")
        return real(self)

    monkeypatch.setattr(LocalSecurityStore, "get_all_acls", failing_once)
    assert _may_read(ctx)  # the read failed: what was read last stands
    assert _may_read(ctx) and calls["n"] == 1  # not tried again at each decision
    clock.advance(ACL_REFRESH_MS)
    assert not _may_read(ctx), "a failed read of the revoke was taken for a read of it"
    assert calls["n"] == 2
