"""DescribeUserScramCredentials / AlterUserScramCredentials against the store, no broker:
the in-memory ZooKeeper model and a single node's files. Kafka's error for each bad item,
a user with any bad item left untouched, and a credential made from the client's salted
password that a SCRAM login accepts."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.metadata.memory import MemoryMetadataStore, MemoryZooKeeper
from actors.metadata.store import SecurityMetadata
from actors.security.credentials import CredentialCache, describe_users, upsert_user
from actors.security.local_store import LocalSecurityStore
from actors.security.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslConnection
from actors.security.scram import (
    CredentialError,
    credential_from_salted_password,
    make_credential,
)
from actors.security.scram_admin import (
    AlterResult,
    Deletion,
    Upsertion,
    UserDescription,
    alter_scram_credentials,
    describe_scram_credentials,
)
from wire.errors import ErrorCode

SHA256, SHA512 = 1, 2
DIGEST = {SHA256: "sha256", SHA512: "sha512"}


@pytest.fixture(params=["memory", "files"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SecurityMetadata]:
    if request.param == "files":
        yield LocalSecurityStore.in_data_dir(tmp_path)
        return
    memory = MemoryMetadataStore(MemoryZooKeeper(), lambda _notice: None, wall_ms=lambda: 1)
    memory.start()
    yield memory
    memory.close()


def upsertion(user: str, password: str, mechanism: int = SHA256,
              iterations: int = 4096) -> Upsertion:
    """What a client sends: its own salt and SaltedPassword = Hi(password, salt, i)."""
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac(DIGEST[mechanism], password.encode(), salt, iterations)
    return Upsertion(user, mechanism, iterations, salt, salted)


def scram_login(cache: CredentialCache, mechanism: str, user: str, password: str) -> bool:
    """A PLAIN login checks the same stored SCRAM keys a SCRAM exchange does."""
    conn = SaslConnection((mechanism, "PLAIN"), cache.lookup)
    conn.on_request(SASL_HANDSHAKE, 0)
    conn.handshake(1, "PLAIN", 0)
    conn.on_request(SASL_AUTHENTICATE, 0)
    token = b"\x00" + user.encode() + b"\x00" + password.encode()
    return conn.authenticate(1, token, 0).error_code == 0


def test_the_salted_password_gives_the_credential_a_password_gives() -> None:
    salt = b"sixteen byte sal"
    for mechanism, digest in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
        salted = hashlib.pbkdf2_hmac(digest, b"pw", salt, 8192)
        assert (credential_from_salted_password(mechanism, salt, salted, 8192)
                == make_credential(mechanism, "pw", 8192, salt))
    with pytest.raises(CredentialError, match="out of range"):
        credential_from_salted_password("SCRAM-SHA-256", salt, b"x" * 32, 100)
    with pytest.raises(CredentialError, match="salt is empty"):
        credential_from_salted_password("SCRAM-SHA-256", b"", b"x" * 32, 4096)


def test_upsert_then_describe_then_login_then_delete(store: SecurityMetadata) -> None:
    results = alter_scram_credentials(store, [], [
        upsertion("carol", "carol-secret", SHA256),
        upsertion("carol", "carol-secret", SHA512, 8192),
        upsertion("dave", "dave-secret", SHA512)])
    assert results == [AlterResult("carol", ErrorCode.NONE, None),
                       AlterResult("dave", ErrorCode.NONE, None)]
    # the same store `actorlog users list` reads; never the salted password
    assert describe_users(store) == {"carol": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)],
                                     "dave": [("SCRAM-SHA-512", 4096)]}
    assert describe_scram_credentials(store, None) == [
        UserDescription("carol", ErrorCode.NONE, None, [(SHA256, 4096), (SHA512, 8192)]),
        UserDescription("dave", ErrorCode.NONE, None, [(SHA512, 4096)])]
    assert describe_scram_credentials(store, []) == describe_scram_credentials(store, None)
    cache = CredentialCache(store)
    cache.load()
    assert scram_login(cache, "SCRAM-SHA-512", "carol", "carol-secret")
    assert not scram_login(cache, "SCRAM-SHA-512", "carol", "wrong")

    assert alter_scram_credentials(store, [Deletion("carol", SHA256), Deletion("carol", SHA512)],
                                   []) == [AlterResult("carol", ErrorCode.NONE, None)]
    cache.refresh("carol")
    assert not scram_login(cache, "SCRAM-SHA-512", "carol", "carol-secret")
    assert store.get_users() == {"dave"}


def test_describe_answers_each_named_user_once(store: SecurityMetadata) -> None:
    upsert_user(store, "alice", "SCRAM-SHA-256", "pw")
    rows = describe_scram_credentials(store, ["ghost", "alice", "twice", "twice", ""])
    assert [(r.user, r.error) for r in rows] == [
        ("ghost", ErrorCode.RESOURCE_NOT_FOUND), ("alice", ErrorCode.NONE),
        ("twice", ErrorCode.DUPLICATE_RESOURCE), ("", ErrorCode.RESOURCE_NOT_FOUND)]
    assert rows[0].message == "user 'ghost' has no SCRAM credential"
    assert rows[1].credentials == [(SHA256, 4096)]
    # a user whose config has no SCRAM key (quotas only) has no credential either
    store.set_user_configs("quota-only", {"producer_byte_rate": "1024"}, -1)
    assert describe_scram_credentials(store, ["quota-only"])[0].error == \
        ErrorCode.RESOURCE_NOT_FOUND
    assert [r.user for r in describe_scram_credentials(store, None)] == ["alice"]


def test_bad_items_fail_their_user_and_leave_it_untouched(store: SecurityMetadata) -> None:
    upsert_user(store, "erin", "SCRAM-SHA-256", "old")
    good = upsertion("frank", "frank-secret")
    results = alter_scram_credentials(
        store,
        [Deletion("gina", SHA512),                 # nothing to delete
         Deletion("mech", 7)],                     # unknown mechanism
        [upsertion("erin", "new", SHA512, 4095),    # too few iterations: erin untouched
         upsertion("erin", "new", SHA256),
         upsertion("huge", "x", SHA256, 16385),     # too many
         Upsertion("", SHA256, 4096, b"s", b"p"),   # empty name
         upsertion("twice", "a"), upsertion("twice", "b"),  # same user and mechanism
         Upsertion("nosalt", SHA256, 4096, b"", b"p"),
         good])
    by_user = {r.user: r for r in results}
    assert [r.user for r in results] == ["gina", "mech", "erin", "huge", "", "twice", "nosalt",
                                         "frank"]
    assert by_user["gina"] == AlterResult(
        "gina", ErrorCode.RESOURCE_NOT_FOUND, "user 'gina' has no SCRAM-SHA-512 credential to "
                                              "delete")
    assert by_user["mech"].error == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert by_user["erin"] == AlterResult(
        "erin", ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "too few iterations (4095); use 4096 to 16384")
    assert by_user["huge"].message == "too many iterations (16385); use 4096 to 16384"
    assert by_user[""].error == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert by_user["twice"].error == ErrorCode.DUPLICATE_RESOURCE
    assert by_user["nosalt"].error == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert by_user["frank"] == AlterResult("frank", ErrorCode.NONE, None)
    assert store.get_users() == {"erin", "frank"}
    cache = CredentialCache(store)
    cache.load()
    assert scram_login(cache, "SCRAM-SHA-256", "erin", "old")
    assert cache.lookup("erin", "SCRAM-SHA-512") is None
    # a delete and an upsert of the same credential in one request are the same pair twice
    [both] = alter_scram_credentials(store, [Deletion("erin", SHA256)],
                                     [upsertion("erin", "new", SHA256)])
    assert both.error == ErrorCode.DUPLICATE_RESOURCE
    assert scram_login(cache, "SCRAM-SHA-256", "erin", "old")


def test_a_cache_on_the_files_notices_another_writer(tmp_path: Path) -> None:
    """`actorlog users add` (or another process of the node) while the node runs."""
    local = LocalSecurityStore.in_data_dir(tmp_path)
    cache = CredentialCache(local, stamp=local.users_stamp)
    assert cache.load() == []
    assert cache.lookup("late", "SCRAM-SHA-256") is None
    other = LocalSecurityStore.in_data_dir(tmp_path)  # another writer, same files
    upsert_user(other, "late", "SCRAM-SHA-256", "late-secret")
    assert cache.lookup("late", "SCRAM-SHA-256") is not None
    assert scram_login(cache, "SCRAM-SHA-256", "late", "late-secret")
    (tmp_path / "security" / "users.json").write_text("garbage")
    assert cache.lookup("late", "SCRAM-SHA-256") is not None  # unreadable: keeps what it had
