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


# ------------------------------------------------------------------- rows


class Position(NamedTuple):
    segment: int
    at: int


class Member(NamedTuple):
    member_id: str
    instance: str | None


class Group(NamedTuple):
    group_id: str
    members: list[Member]
    where: Position


@message(9903)
class Nested(NamedTuple):
    req_id: int
    groups: list[Group]
    maybe: list[Position] | None
    table: dict[str, Position]
    one: Position


def _nested() -> Nested:
    return Nested(
        7,
        [Group("g", [Member("m-1", None), Member("m-2", "i-2")], Position(0, 10)),
         Group("h", [], Position(5, 0))],
        None,
        {"t": Position(1, 2)},
        Position(3, 4),
    )


def test_rows_are_rebuilt_as_their_types_at_every_depth() -> None:
    original = _nested()
    body = msgpack.unpackb(msgpack.packb(original))
    assert body[1][0][1][0] == ["m-1", None]  # on the wire a row is a plain array
    built = build(Nested, body)
    assert built == original
    group = built.groups[0]
    assert type(group) is Group and type(group.where) is Position
    assert [type(m) for m in group.members] == [Member, Member]
    assert group.members[1].instance == "i-2"
    assert type(built.table["t"]) is Position and type(built.one) is Position
    with_list = original._replace(maybe=[Position(8, 9)])
    rebuilt = build(Nested, msgpack.unpackb(msgpack.packb(with_list)))
    assert rebuilt.maybe is not None and type(rebuilt.maybe[0]) is Position


def test_rows_already_built_are_kept_as_they_are() -> None:
    original = _nested()
    built = build(Nested, list(original))
    assert built == original
    assert built.groups[0] is original.groups[0]


def _wire(**changes: object) -> list[object]:
    body: list[object] = msgpack.unpackb(msgpack.packb(_nested()._replace(**changes)))
    return body


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (_wire(one=[3]), "Nested.one: Position needs 2 fields, got 1"),
        (_wire(one=[3, "4"]), "Nested.one: Position.at must be int, got str"),
        (_wire(one=7), "Nested.one must be list/tuple, got int"),
        (_wire(groups=[["g", [], [0, 0]], ["h", [], [0]]]),
         "Nested.groups[1].where: Position needs 2 fields, got 1"),
        (_wire(groups=[["g", [["m-1", None], ["m-2", 5]], [0, 0]]]),
         "Nested.groups[0].members[1]: Member.instance must be str/NoneType, got int"),
        (_wire(groups=[["g", ["m-1"], [0, 0]]]),
         "Nested.groups[0].members[0]: Member needs 2 fields, got str"),
        (_wire(groups=[["g", [], [0, 0], "extra"]]),
         "Nested.groups[0]: Group needs 3 fields, got 4"),
        (_wire(maybe=[[1, 2], {"segment": 1}]),
         "Nested.maybe[1]: Position needs 2 fields, got dict"),
        (_wire(table={"t": [1, None]}),
         "Nested.table['t']: Position.at must be int, got NoneType"),
    ],
)
def test_malformed_rows_are_refused_exactly(body: list[object], error: str) -> None:
    with pytest.raises(WrongShape) as info:
        build(Nested, body)
    assert str(info.value) == error


def test_a_field_mixing_rows_with_other_types_cannot_be_registered() -> None:
    with pytest.raises(TypeError, match="mixes rows with other types"):

        @message(9904)
        class Mixed(NamedTuple):
            x: Position | int
