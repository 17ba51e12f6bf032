"""The simulator's messages survive msgpack and the registry, in their id range."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from wire import sim_messages as sm
from wire.registry import WrongShape, build, type_id_of

SAMPLES: list[Any] = [
    sm.ClientRequest(7, "producer-0", b"\x00\x00\x00\x08" + bytes(8)),
    sm.ClientResponse(7, b"\x00\x00\x00\x04abcd"),
    sm.ClientDisconnected(7),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: Any) -> None:
    assert 800 <= type_id_of(type(msg)) <= 899
    body = msgpack.unpackb(msgpack.packb(list(msg)), raw=False)
    assert build(type(msg), body) == msg


def test_a_wrong_shape_is_refused() -> None:
    with pytest.raises(WrongShape):
        build(sm.ClientRequest, [7, "producer-0", "not bytes"])
