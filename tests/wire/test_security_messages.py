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
