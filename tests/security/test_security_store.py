"""Users and ACLs in the store: a real ZooKeeper, the in-memory model, and a single node's files.

The same scenarios run on all three; on ZooKeeper (and its model) the znodes
are checked byte for byte against Kafka's layout, and the change
notifications against what Kafka's brokers read.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from actors.metadata import znodes
from actors.metadata.memory import MemoryMetadataStore, MemoryZooKeeper
from actors.metadata.store import SecurityMetadata
from actors.metadata.zk import ZkMetadataStore
from actors.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from actors.security.acl_admin import create_acls, delete_acls
from actors.security.credentials import (
    CredentialCache,
    delete_user,
    describe_users,
    read_password_file,
    upsert_user,
)
from actors.security.local_store import LocalSecurityStore, LocalStoreError
from actors.security.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslConnection
from actors.security.scram import CredentialError, ScramCredential
from wire.security_messages import ChangesNotified

T, G = ResourceType.TOPIC, ResourceType.GROUP
ALLOW, DENY = Permission.ALLOW, Permission.DENY


class Notices:
    def __init__(self) -> None:
        self.queue: queue.Queue[Any] = queue.Queue()

    def __call__(self, msg: Any) -> None:
        self.queue.put(msg)

    def wait_for(self, match: Callable[[Any], bool], timeout_s: float = 20) -> Any:
        while True:
            msg = self.queue.get(timeout=timeout_s)  # queue.Empty fails the test
            if match(msg):
                return msg


class Kind:
    """One store under test, with a way to read its raw znodes (None for the files)."""

    def __init__(self, store: SecurityMetadata, notices: Notices | None,
                 raw: Callable[[str], bytes | None] | None,
                 children: Callable[[str], list[str]] | None) -> None:
        self.store = store
        self.notices = notices
        self.raw = raw
        self.children = children


@pytest.fixture(params=["zookeeper", "memory", "files"])
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kind]:
    if request.param == "files":
        yield Kind(LocalSecurityStore.in_data_dir(tmp_path), None, None, None)
        return
    notices = Notices()
    if request.param == "memory":
        zk = MemoryZooKeeper()
        store = MemoryMetadataStore(zk, notices, wall_ms=lambda: 1234)
        store.start()

        def raw_mem(path: str) -> bytes | None:
            node = zk.get(path)
            return None if node is None else node.data

        yield Kind(store, notices, raw_mem, zk.children)
        store.close()
        return
    connect = request.getfixturevalue("zk_connect")
    zk_store = ZkMetadataStore(connect, notices, session_timeout_ms=6000)
    zk_store.start()
    client = KazooClient(hosts=connect)
    client.start(timeout=15)

    def raw_zk(path: str) -> bytes | None:
        return bytes(client.get(path)[0]) if client.exists(path) else None

    def children_zk(path: str) -> list[str]:
        return sorted(client.get_children(path)) if client.exists(path) else []

    try:
        yield Kind(zk_store, notices, raw_zk, children_zk)
    finally:
        client.stop()
        client.close()
        zk_store.close()


# ------------------------------------------------------------------- users


def test_users_are_added_described_cached_and_deleted(kind: Kind) -> None:
    store = kind.store
    upsert_user(store, "alice", "SCRAM-SHA-256", "alice-secret")
    upsert_user(store, "alice", "SCRAM-SHA-512", "alice-secret", iterations=8192)
    upsert_user(store, "bob", "SCRAM-SHA-512", "bob-secret")
    assert store.get_users() == {"alice", "bob"}
    assert describe_users(store) == {"alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)],
                                     "bob": [("SCRAM-SHA-512", 4096)]}
    configs, _version = store.get_user_configs("alice")
    assert set(configs) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert "alice-secret" not in json.dumps(configs)

    cache = CredentialCache()
    assert cache.load(store) == []
    conn = SaslConnection(("SCRAM-SHA-512", "PLAIN"), cache.lookup)
    conn.on_request(SASL_HANDSHAKE, 0)
    conn.handshake(1, "PLAIN", 0)
    conn.on_request(SASL_AUTHENTICATE, 0)
    assert conn.authenticate(1, b"\x00bob\x00bob-secret", 0).error_code == 0

    assert delete_user(store, "alice", ["SCRAM-SHA-256"]) == ["SCRAM-SHA-256"]
    assert delete_user(store, "alice", ["SCRAM-SHA-256"]) == []
    assert delete_user(store, "bob") == ["SCRAM-SHA-512"]
    assert store.get_users() == {"alice"}
    assert store.get_user_configs("bob") == ({}, -1)
    cache.update("bob", {})
    assert cache.lookup("bob", "SCRAM-SHA-512") is None


def test_writes_are_conditional_on_the_version(kind: Kind) -> None:
    store = kind.store
    assert store.set_user_configs("carol", {"k": "v"}, -1)
    assert not store.set_user_configs("carol", {"k": "w"}, -1)   # exists now
    configs, version = store.get_user_configs("carol")
    assert configs == {"k": "v"}
    assert store.set_user_configs("carol", {"k": "w"}, version)
    assert not store.set_user_configs("carol", {"k": "x"}, version)  # stale
    pattern = ResourcePattern(T, "orders")
    entry = AclEntry("User:a", "*", Operation.READ, ALLOW)
    assert store.set_acls(pattern, frozenset({entry}), -1)
    assert not store.set_acls(pattern, frozenset(), -1)
    entries, version = store.get_acls(pattern)
    assert entries == {entry}
    assert store.set_acls(pattern, frozenset(), version)
    assert store.get_acls(pattern) == (frozenset(), -1)


def test_user_znodes_are_kafkas(kind: Kind) -> None:
    if kind.raw is None or kind.children is None:
        pytest.skip("a single node keeps users in a file")
    credential = upsert_user(kind.store, "a b*", "SCRAM-SHA-256", "pw")
    raw = kind.raw("/config/users/a%20b%2A")
    assert raw is not None
    doc = json.loads(raw)
    assert doc == {"version": 1, "config": {"SCRAM-SHA-256": credential.to_kafka()}}
    assert ScramCredential.from_kafka(doc["config"]["SCRAM-SHA-256"]) == credential
    changes = kind.children("/config/changes")
    assert changes == ["config_change_0000000000"]
    assert json.loads(kind.raw(f"/config/changes/{changes[0]}") or b"") == {
        "version": 2, "entity_path": "users/a%20b%2A"}
    assert kind.store.get_users() == {"a b*"}


def test_bad_user_configs_are_named(kind: Kind) -> None:
    kind.store.set_user_configs("eve", {"SCRAM-SHA-256": "salt=AA=="}, -1)
    cache = CredentialCache()
    assert cache.load(kind.store) == [
        "user 'eve', SCRAM-SHA-256: SCRAM credential has no stored_key, server_key, iterations"]
    with pytest.raises(CredentialError, match="user name ' x' is empty or has spaces"):
        upsert_user(kind.store, " x", "SCRAM-SHA-256", "pw")


# -------------------------------------------------------------------- ACLs


def binding(rtype: ResourceType, name: str, principal: str, op: Operation,
            permission: Permission = ALLOW, pattern: PatternType = PatternType.LITERAL
            ) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AclEntry(principal, "*", op,
                                                                      permission))


def test_acls_are_created_loaded_and_deleted(kind: Kind) -> None:
    store = kind.store
    results = create_acls(store, [
        binding(T, "orders", "User:alice", Operation.WRITE),
        binding(T, "orders", "User:bob", Operation.READ),
        binding(T, "logs-", "User:carol", Operation.READ, pattern=PatternType.PREFIXED),
        binding(G, "g1", "User:alice", Operation.READ),
        binding(G, "g1", "User:alice", Operation.WRITE),   # not a group operation
        binding(T, "logs-", "User:mallory", Operation.ALL, DENY, PatternType.PREFIXED),
    ])
    assert results == [None, None, None, None,
                       "operation Write does not apply to resource type Group", None]
    auth = Authorizer()
    auth.load(store.get_all_acls())
    assert len(auth.bindings()) == 5
    assert auth.authorize("User:carol", "h", Operation.READ, T, "logs-app").allowed
    assert not auth.authorize("User:mallory", "h", Operation.READ, T, "logs-app").allowed

    removed = delete_acls(store, [AclBindingFilter(principal="User:alice"),
                                  AclBindingFilter(T, "logs-app", PatternType.MATCH)])
    assert [b.entry.principal for b in removed[0]] == ["User:alice", "User:alice"]
    assert sorted(b.entry.principal for b in removed[1]) == ["User:carol", "User:mallory"]
    assert [(p, sorted(e)) for p, e in store.get_all_acls().items()] == [
        (ResourcePattern(T, "orders"),
         [AclEntry("User:bob", "*", Operation.READ, ALLOW)])]


def test_acl_znodes_and_change_events_are_kafkas(kind: Kind) -> None:
    if kind.raw is None or kind.children is None:
        pytest.skip("a single node keeps ACLs in a file")
    create_acls(kind.store, [
        binding(T, "orders", "User:alice", Operation.DESCRIBE_CONFIGS),
        binding(ResourceType.TRANSACTIONAL_ID, "tx-", "User:bob", Operation.WRITE,
                pattern=PatternType.PREFIXED),
    ])
    assert json.loads(kind.raw("/kafka-acl/Topic/orders") or b"") == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "DescribeConfigs",
         "host": "*"}]}
    assert json.loads(kind.raw("/kafka-acl-extended/prefixed/TransactionalId/tx-") or b"") == {
        "version": 1, "acls": [{"principal": "User:bob", "permissionType": "Allow",
                                "operation": "Write", "host": "*"}]}
    (literal,) = kind.children("/kafka-acl-changes")
    assert literal == "acl_changes_0000000000"
    assert kind.raw(f"/kafka-acl-changes/{literal}") == b"TOPIC:orders"
    (extended,) = kind.children("/kafka-acl-extended-changes")
    assert json.loads(kind.raw(f"/kafka-acl-extended-changes/{extended}") or b"") == {
        "version": 1, "resourceType": "TRANSACTIONAL_ID", "name": "tx-",
        "patternType": "PREFIXED"}


def test_change_notifications_are_watched_read_and_purged(kind: Kind) -> None:
    store = kind.store
    if kind.notices is None or not isinstance(store, (ZkMetadataStore, MemoryMetadataStore)):
        pytest.skip("a single node has no other writer to hear from")
    assert store.get_change_notifications(znodes.ACL_CHANGES, watch=True) == []
    create_acls(store, [binding(T, "t", "User:a", Operation.READ)])
    notice = kind.notices.wait_for(lambda m: isinstance(m, ChangesNotified))
    assert notice.root == znodes.ACL_CHANGES
    (change,) = store.get_change_notifications(znodes.ACL_CHANGES)
    assert znodes.decode_acl_change(znodes.ACL_CHANGES, change.data) == ResourcePattern(T, "t")
    assert change.ctime_ms > 0
    upsert_user(store, "u", "SCRAM-SHA-256", "pw")
    (user_change,) = store.get_change_notifications(znodes.CONFIG_CHANGES)
    assert znodes.decode_config_change(user_change.data) == ("users", "u")
    store.delete_change_notifications([change.path, user_change.path, change.path])
    assert store.get_change_notifications(znodes.ACL_CHANGES) == []


def test_resource_names_that_cannot_be_znodes_are_refused(kind: Kind) -> None:
    if kind.raw is None:
        pytest.skip("files take any name")
    with pytest.raises(ValueError, match="resource name 'a/b' cannot be a znode name"):
        kind.store.get_acls(ResourcePattern(G, "a/b"))


# ------------------------------------------------------------------ files


def test_files_survive_a_new_store_and_refuse_garbage(tmp_path: Path) -> None:
    store = LocalSecurityStore.in_data_dir(tmp_path)
    upsert_user(store, "alice", "SCRAM-SHA-256", "pw")
    create_acls(store, [binding(T, "t", "User:alice", Operation.READ)])
    again = LocalSecurityStore(tmp_path / "security")
    assert again.get_users() == {"alice"}
    assert list(again.get_all_acls()) == [ResourcePattern(T, "t")]
    assert sorted(p.name for p in (tmp_path / "security").iterdir()) == ["acls.json",
                                                                       "users.json"]
    (tmp_path / "security" / "users.json").write_text("{oops")
    with pytest.raises(LocalStoreError) as caught:
        again.get_users()
    assert str(caught.value).startswith(f"{tmp_path / 'security' / 'users.json'}: cannot read it")
    (tmp_path / "security" / "acls.json").write_text('{"version": 1}')
    with pytest.raises(LocalStoreError, match="not an actorlog security file"):
        again.get_all_acls()


def test_password_files(tmp_path: Path) -> None:
    good = tmp_path / "pw"
    good.write_text("s3cret\r\nignored\n")
    assert read_password_file(good) == "s3cret"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(CredentialError, match="is empty; put the password on its first line"):
        read_password_file(empty)
    with pytest.raises(CredentialError, match="does not exist"):
        read_password_file(tmp_path / "none")
