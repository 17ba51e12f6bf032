from __future__ import annotations

from typing import NamedTuple

import msgpack
import pytest

from wire.registry import UnknownType, WrongShape, build, message, type_id_of, type_of


@message(9901)
class Sample(NamedTuple):
    a: int
    b: str | None
    c: bytes
    d: list[int]


def test_round_trip_through_msgpack() -> None:
    original = Sample(1, None, b"\x00", [1, 2])
    body = msgpack.unpackb(msgpack.packb(original))
    assert build(type_of(type_id_of(Sample)), body) == original


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ([1, "x", b""], "Sample needs 4 fields, got 3"),
        ([1, "x", b"", [1], 5], "Sample needs 4 fields, got 5"),
        (["1", "x", b"", []], "Sample.a must be int, got str"),
        ([1, 2, b"", []], "Sample.b must be str/NoneType, got int"),
        ([1, "x", "not bytes", []], "Sample.c must be bytes, got str"),
        ({"a": 1}, "Sample needs 4 fields, got dict"),
    ],
)
def test_wrong_shapes_are_refused_exactly(body: object, error: str) -> None:
    with pytest.raises(WrongShape) as info:
        build(Sample, body)
    assert str(info.value) == error


def test_type_ids_are_unique_and_known() -> None:
    with pytest.raises(ValueError, match="type id 9901 is taken by Sample"):

        @message(9901)
        class Other(NamedTuple):
            x: int

    with pytest.raises(UnknownType):
        type_of(987654)
    with pytest.raises(TypeError):
        message(9902)(dict)  # type: ignore[arg-type]
