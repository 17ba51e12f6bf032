"""SecurityMirror: another process's copy of process 0's users and ACLs, fed by relays and
by admin answers that may arrive in any order. No broker, no threads: the rows as they come
off the wire, the Authorizer and CredentialCache a process's handlers and SASL read."""

from __future__ import annotations

from actors.security.acl import (
    AclBinding,
    AclEntry,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from actors.security.credentials import CredentialCache
from actors.security.mirror import (
    SecurityMirror,
    acl_rows,
    acls_of,
    binding_of,
    binding_row,
    user_rows,
)
from actors.security.scram import make_credential
from wire.security_messages import SecurityRelay, UserRow

ORDERS = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
LOGS = ResourcePattern(ResourceType.TOPIC, "logs-", PatternType.PREFIXED)
ALICE_WRITES = AclEntry("User:alice", "*", Operation.WRITE, Permission.ALLOW)
BOB_READS = AclEntry("User:bob", "*", Operation.READ, Permission.ALLOW)
SHA256 = "SCRAM-SHA-256"


def mirror() -> SecurityMirror:
    return SecurityMirror(Authorizer(), CredentialCache())


def may_write(m: SecurityMirror, principal: str, topic: str) -> bool:
    assert m.authorizer is not None
    return m.authorizer.authorize(principal, "127.0.0.1", Operation.WRITE, ResourceType.TOPIC,
                                  topic).allowed


def user(name: str, password: str) -> UserRow:
    return UserRow(name, {SHA256: make_credential(SHA256, password, 4096).to_kafka()})


def whole(version: int, acls: dict[ResourcePattern, set[AclEntry]],
          users: list[UserRow]) -> SecurityRelay:
    return SecurityRelay(version, True, acl_rows(acls), True, users)


def delta(version: int, acls: dict[ResourcePattern, set[AclEntry]] | None = None,
          users: list[UserRow] | None = None) -> SecurityRelay:
    return SecurityRelay(version, False, None if acls is None else acl_rows(acls), False, users)


def test_rows_round_trip_the_cores_types() -> None:
    acls = {ORDERS: frozenset({ALICE_WRITES, BOB_READS}), LOGS: frozenset({BOB_READS})}
    assert acls_of(acl_rows(acls)) == acls
    binding = AclBinding(ORDERS, ALICE_WRITES)
    assert binding_of(binding_row(binding)) == binding
    credential = make_credential(SHA256, "secret", 4096)
    assert user_rows({"alice": {SHA256: credential}}) == [
        UserRow("alice", {SHA256: credential.to_kafka()})]


def test_ready_only_once_both_kinds_came_whole() -> None:
    m = mirror()
    m.apply(delta(1, {ORDERS: {ALICE_WRITES}}, [user("alice", "a")]))
    assert not m.ready.is_set()
    m.apply(whole(2, {ORDERS: {ALICE_WRITES}}, [user("alice", "a")]))
    assert m.ready.is_set()
    assert may_write(m, "User:alice", "orders")
    assert m.credentials is not None and m.credentials.lookup("alice", SHA256) is not None
    only_acls = SecurityMirror(Authorizer(), None)  # no SASL listeners: ACLs alone
    only_acls.apply(SecurityRelay(1, True, [], False, None))
    assert only_acls.ready.is_set()


def test_a_delta_changes_its_patterns_and_users_and_leaves_the_rest() -> None:
    m = mirror()
    m.apply(whole(1, {ORDERS: {BOB_READS}, LOGS: {BOB_READS}}, [user("bob", "b")]))
    m.apply(delta(2, {ORDERS: {ALICE_WRITES}}, [user("alice", "a")]))
    assert may_write(m, "User:alice", "orders")
    assert m.authorizer is not None and m.authorizer.acls(LOGS) == {BOB_READS}
    assert m.credentials is not None and set(m.credentials.users()) == {"alice", "bob"}
    m.apply(delta(3, {ORDERS: set()}, [UserRow("bob", {})]))  # deleted: no entries left
    assert not may_write(m, "User:alice", "orders")
    assert m.authorizer.acls(ORDERS) == frozenset()
    assert set(m.credentials.users()) == {"alice"}


def test_an_older_row_never_undoes_a_newer_one_whichever_path_came_first() -> None:
    m = mirror()
    m.apply(whole(1, {}, []))
    # the admin answer (version 5) came before the relay of an earlier change (version 4)
    m.apply_answer(5, acls=acl_rows({ORDERS: {ALICE_WRITES}}))
    m.apply(delta(4, {ORDERS: {BOB_READS}}, [user("bob", "b")]))
    assert m.authorizer is not None and m.authorizer.acls(ORDERS) == {ALICE_WRITES}
    assert m.credentials is not None and set(m.credentials.users()) == {"bob"}
    m.apply(delta(5, {ORDERS: set()}))  # the same version again (relay after answer): no-op
    assert m.authorizer.acls(ORDERS) == {ALICE_WRITES}


def test_a_whole_keeps_what_is_newer_than_it_and_drops_what_it_does_not_name() -> None:
    m = mirror()
    m.apply(whole(1, {LOGS: {BOB_READS}}, [user("old", "o")]))
    m.apply(delta(7, {ORDERS: {ALICE_WRITES}}, [user("alice", "a")]))
    # the periodic re-read made at version 6, arriving after the change at 7
    m.apply(whole(6, {}, [user("carol", "c")]))
    assert m.authorizer is not None and m.authorizer.table() == {ORDERS: {ALICE_WRITES}}
    assert m.credentials is not None and set(m.credentials.users()) == {"alice", "carol"}
    # a delta older than the whole is what the whole already holds: ignored
    m.apply(delta(3, {LOGS: {BOB_READS}}, [user("old", "o")]))
    assert LOGS not in m.authorizer.table() and "old" not in m.credentials.users()
    # and an older whole than the one taken is ignored as a whole
    m.apply(whole(5, {LOGS: {BOB_READS}}, []))
    assert m.authorizer.table() == {ORDERS: {ALICE_WRITES}}


def test_an_unreadable_credential_is_a_problem_line_and_no_login() -> None:
    m = mirror()
    problems = m.apply(whole(1, {}, [UserRow("mallory", {SHA256: "not a credential"}),
                                     user("alice", "a")]))
    assert len(problems) == 1 and "mallory" in problems[0]
    assert m.credentials is not None and set(m.credentials.users()) == {"alice"}
    m.apply(delta(2, users=[user("bob", "b")]))
    problems = m.apply(delta(3, users=[UserRow("bob", {SHA256: "garbled"})]))
    assert len(problems) == 1 and m.credentials.lookup("bob", SHA256) is None
