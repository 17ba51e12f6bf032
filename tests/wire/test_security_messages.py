"""Security messages (600-699) through msgpack and the registry."""

from __future__ import annotations

import msgpack
import pytest

from wire import security_messages as sm
from wire.registry import WrongShape, build, type_id_of, type_of


def test_changes_notified_round_trips_and_is_numbered_in_the_security_range() -> None:
    msg = sm.ChangesNotified(0x1234, "/kafka-acl-changes")
    type_id = type_id_of(sm.ChangesNotified)
    assert 600 <= type_id < 700
    body = msgpack.unpackb(msgpack.packb(msg), raw=False)
    assert build(type_of(type_id), body) == msg
    with pytest.raises(WrongShape):
        build(type_of(type_id), [1])


ENTRY = sm.AclEntryRow("User:alice", "*", 4, 3)
SAMPLES = [
    sm.SecurityRelay(7, True, [sm.AclPatternRow(2, "orders", 3, [ENTRY])], False,
                     [sm.UserRow("alice", {"SCRAM-SHA-256": "salt=a,stored_key=b"}),
                      sm.UserRow("bob", {})]),
    sm.SecurityRelay(8, False, None, False, None),
    sm.SecuritySnapshotAsk(1),
    sm.ScramCredentialsDescribe(3, None),
    sm.ScramCredentialsDescribe(4, ["alice", ""]),
    sm.ScramCredentialsAlter(5, "User:admin", [sm.ScramDeletionRow("bob", 1)],
                             [sm.ScramUpsertionRow("carol", 2, 4096, b"\0salt", b"\xffsp")]),
    sm.ScramCredentialsDone(5, 0, None, [sm.ScramUserResultRow("carol", 0, None, [[2, 4096]])],
                            9, [sm.UserRow("carol", {"SCRAM-SHA-512": "x"})]),
    sm.AclsCreate(6, [sm.AclBindingRow(2, "orders", 3, "User:alice", "*", 4, 3)]),
    sm.AclsDelete(7, [sm.AclFilterRow(2, None, 1, "User:alice", None, 1, 1)]),
    sm.AclsDone(6, 0, None, [None, "bad operation"], [[sm.AclBindingRow(
        2, "orders", 3, "User:alice", "*", 4, 3)], []], 10,
        [sm.AclPatternRow(2, "orders", 3, [])]),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_relays_and_admin_requests_round_trip_rows_and_all(msg: object) -> None:
    type_id = type_id_of(type(msg))
    assert 600 <= type_id < 700
    body = msgpack.unpackb(msgpack.packb(msg), raw=False)
    assert build(type_of(type_id), body) == msg


def test_every_security_message_is_sampled() -> None:
    declared = set()
    for obj in vars(sm).values():
        if isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields"):
            try:
                type_id_of(obj)
            except KeyError:
                continue  # a row
            declared.add(obj)
    assert declared == {type(m) for m in SAMPLES} | {sm.ChangesNotified}
