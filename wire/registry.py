"""Message type registry: every message that crosses a mailbox is declared once.

A message type is a ``NamedTuple`` decorated with :func:`message`, which gives
it a wire type id. On the wire its body is the tuple itself (a msgpack array);
decoding checks the arity and the top-level type of every field, so a sender
with a different idea of the shape is caught at the receiver instead of
failing deep inside a handler.

A field may also hold *rows*: plain ``NamedTuple`` classes (no type id of
their own) declared next to the message that carries them, alone or as
``list[Row]``, ``Row | None`` or ``dict[str, Row]``, nested to any depth.
Decoding checks every row the same way and rebuilds it as its class, so a
handler reads ``row.topic``, never ``row[0]``. Messages handed over in memory
between actors of one loop are the sender's own objects and skip all of this.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class WrongShape(ValueError):
    """A body whose arity or field types do not match its declared type."""


class UnknownType(KeyError):
    """A type id that no module has registered."""


_Check = tuple[str, tuple[type, ...] | None]
_Convert = Callable[[Any], Any]
_Nested = tuple[tuple[int, str, _Convert], ...]

_BY_ID: dict[int, type] = {}
_BY_TYPE: dict[type, int] = {}
# Per type: (field name, accepted runtime types or None for any), in field order.
_CHECKS: dict[type, tuple[_Check, ...]] = {}
# Per message type, what build() needs in one lookup: the arity, one accepted
# type (tuple) per field for a single isinstance pass, and the fields holding
# rows as (index, name, converter).
_PLANS: dict[type, tuple[int, tuple[Any, ...], _Nested]] = {}
_ROW_CONVERTERS: dict[type, _Convert] = {}
_new: Any = tuple.__new__

_SIMPLE: dict[Any, tuple[type, ...]] = {
    int: (int,),
    float: (float, int),
    str: (str,),
    bytes: (bytes,),
    bool: (bool,),
    list: (list, tuple),
    tuple: (list, tuple),
    dict: (dict,),
    type(None): (type(None),),
}


def _is_row(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields")


def _accepted(hint: Any) -> tuple[type, ...] | None:
    """The runtime types a decoded msgpack value may have for ``hint``; None means any."""
    if hint is Any:
        return None
    if hint in _SIMPLE:
        return _SIMPLE[hint]
    if _is_row(hint):
        return (list, tuple)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        out: list[type] = []
        for arg in typing.get_args(hint):
            acc = _accepted(arg)
            if acc is None:
                return None
            out.extend(acc)
        return tuple(dict.fromkeys(out))
    if origin in _SIMPLE:
        return _SIMPLE[origin]
    return None


class _BadRow(WrongShape):
    """A malformed row; ``where`` grows (``[2]``, ``.members``) as it unwinds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.where = ""

    def at(self, step: str) -> _BadRow:
        self.where = step + self.where
        return self


def _refusal(name: str, checks: tuple[_Check, ...], body: Any) -> str:
    """Why ``body`` does not fit ``checks`` (only called once it is known not to)."""
    if type(body) is not list or len(body) != len(checks):
        got = len(body) if type(body) is list else type(body).__name__
        return f"{name} needs {len(checks)} fields, got {got}"
    for value, (field, accepted) in zip(body, checks):  # noqa: B905 (lengths checked)
        if accepted is not None and not isinstance(value, accepted):
            names = "/".join(t.__name__ for t in accepted)
            return f"{name}.{field} must be {names}, got {type(value).__name__}"
    raise AssertionError(f"{name}: no field is wrong")


def _fields(cls: type) -> tuple[str, ...]:
    fields: tuple[str, ...] = typing.cast(Any, cls)._fields
    return fields


def _checks_of(cls: type) -> tuple[_Check, ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f, _accepted(hints.get(f, Any))) for f in _fields(cls))


def _isinstance_types(checks: tuple[_Check, ...]) -> tuple[Any, ...]:
    return tuple(object if accepted is None else accepted for _f, accepted in checks)


def _nested_of(cls: type) -> _Nested:
    hints = typing.get_type_hints(cls)
    out = []
    for i, f in enumerate(_fields(cls)):
        convert = _converter(hints.get(f, Any))
        if convert is not None:
            out.append((i, f, convert))
    return tuple(out)


def _converter(hint: Any) -> _Convert | None:
    """How to rebuild the rows inside a value of type ``hint``; None: nothing to rebuild."""
    if _is_row(hint):
        return _row_converter(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is list and args:
        found = _converter(args[0])
        if found is None:
            return None
        item: _Convert = found

        def each(value: list[Any]) -> list[Any]:
            try:
                return [item(v) for v in value]
            except _BadRow:
                for i, v in enumerate(value):  # again, to say which one
                    try:
                        item(v)
                    except _BadRow as exc:
                        raise exc.at(f"[{i}]") from None
                raise

        return each
    if origin is dict and len(args) == 2:
        found = _converter(args[1])
        if found is None:
            return None
        value_item: _Convert = found

        def values(value: dict[Any, Any]) -> dict[Any, Any]:
            out = {}
            for k, v in value.items():
                try:
                    out[k] = value_item(v)
                except _BadRow as exc:
                    raise exc.at(f"[{k!r}]") from None
            return out

        return values
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        converters = [c for c in (_converter(a) for a in inner) if c is not None]
        if not converters:
            return None
        if len(inner) != 1:
            raise TypeError(f"{hint} mixes rows with other types: a row field needs one type")
        convert = converters[0]
        return lambda value: None if value is None else convert(value)
    return None


def _row_converter(row: type) -> _Convert:
    """Check one decoded row (arity, top-level field types) and rebuild it as ``row``."""
    found = _ROW_CONVERTERS.get(row)
    if found is not None:
        return found
    name = row.__name__
    checks = _checks_of(row)
    arity = len(checks)
    accepted = _isinstance_types(checks)
    nested: _Nested = ()
    new = _new

    def convert(value: Any) -> Any:
        if type(value) is list and len(value) == arity and all(
            map(isinstance, value, accepted)
        ):
            for i, field, inner in nested:
                try:
                    value[i] = inner(value[i])
                except _BadRow as exc:
                    raise exc.at(f".{field}") from None
            return new(row, value)
        if type(value) is row:
            return value  # already built (a caller's own rows)
        raise _BadRow(_refusal(name, checks, value))

    # Registered before the nested converters are built, so a row type that
    # (through a list) holds itself does not recurse forever.
    _ROW_CONVERTERS[row] = convert
    try:
        nested = _nested_of(row)
    except TypeError:
        del _ROW_CONVERTERS[row]
        raise
    return convert


def message(type_id: int) -> Callable[[type[T]], type[T]]:
    """Register a NamedTuple class as a wire message with ``type_id``."""

    def register(cls: type[T]) -> type[T]:
        if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise TypeError(f"{cls!r} must be a NamedTuple to be a message")
        if type_id in _BY_ID and _BY_ID[type_id] is not cls:
            raise ValueError(
                f"message type id {type_id} is taken by {_BY_ID[type_id].__qualname__}"
            )
        checks = _checks_of(cls)
        nested = _nested_of(cls)  # raises before anything is registered
        _CHECKS[cls] = checks
        _PLANS[cls] = (len(checks), _isinstance_types(checks), nested)
        _BY_ID[type_id] = cls
        _BY_TYPE[cls] = type_id
        return cls

    return register


def type_id_of(cls: type) -> int:
    try:
        return _BY_TYPE[cls]
    except KeyError:
        raise UnknownType(f"{cls.__qualname__} is not a registered message type") from None


def registered() -> dict[int, type]:
    """Every registered message type by its id (a copy)."""
    return dict(_BY_ID)


def type_of(type_id: int) -> type:
    try:
        return _BY_ID[type_id]
    except KeyError:
        raise UnknownType(f"unknown message type id {type_id}") from None


def build(cls: type[T], body: Any) -> T:
    """Turn a decoded body into an instance of ``cls``, checking its shape and its rows."""
    arity, accepted, nested = _PLANS[cls]
    if type(body) is not list or len(body) != arity or not all(map(isinstance, body, accepted)):
        raise WrongShape(_refusal(cls.__name__, _CHECKS[cls], body))
    for i, field, convert in nested:
        try:
            body[i] = convert(body[i])
        except _BadRow as exc:
            raise WrongShape(f"{cls.__name__}.{field}{exc.where}: {exc.reason}") from None
    return _new(cls, body)
