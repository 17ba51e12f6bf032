"""Message type registry: every message that crosses a mailbox is declared once.

A message type is a ``NamedTuple`` decorated with :func:`message`, which gives
it a wire type id. On the wire its body is the tuple itself (a msgpack array);
decoding checks the arity and the top-level type of every field, so a sender
with a different idea of the shape is caught at the receiver instead of
failing deep inside a handler.
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


_BY_ID: dict[int, type] = {}
_BY_TYPE: dict[type, int] = {}
_CHECKS: dict[type, tuple[tuple[str, tuple[type, ...] | None], ...]] = {}

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


def _accepted(hint: Any) -> tuple[type, ...] | None:
    """The runtime types a decoded msgpack value may have for ``hint``; None means any."""
    if hint is Any:
        return None
    if hint in _SIMPLE:
        return _SIMPLE[hint]
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


def message(type_id: int) -> Callable[[type[T]], type[T]]:
    """Register a NamedTuple class as a wire message with ``type_id``."""

    def register(cls: type[T]) -> type[T]:
        if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise TypeError(f"{cls!r} must be a NamedTuple to be a message")
        if type_id in _BY_ID and _BY_ID[type_id] is not cls:
            raise ValueError(
                f"message type id {type_id} is taken by {_BY_ID[type_id].__qualname__}"
            )
        hints = typing.get_type_hints(cls)
        _CHECKS[cls] = tuple((f, _accepted(hints.get(f, Any))) for f in cls._fields)
        _BY_ID[type_id] = cls
        _BY_TYPE[cls] = type_id
        return cls

    return register


def type_id_of(cls: type) -> int:
    try:
        return _BY_TYPE[cls]
    except KeyError:
        raise UnknownType(f"{cls.__qualname__} is not a registered message type") from None


def type_of(type_id: int) -> type:
    try:
        return _BY_ID[type_id]
    except KeyError:
        raise UnknownType(f"unknown message type id {type_id}") from None



def build(cls: type[T], body: Any) -> T:
    """Turn a decoded body into an instance of ``cls``, checking its shape."""
    checks = _CHECKS[cls]
    if type(body) is not list or len(body) != len(checks):
        got = len(body) if isinstance(body, list) else type(body).__name__
        raise WrongShape(f"{cls.__name__} needs {len(checks)} fields, got {got}")
    for value, (field, accepted) in zip(body, checks):
        if accepted is not None and not isinstance(value, accepted):
            raise WrongShape(
                f"{cls.__name__}.{field} must be {'/'.join(t.__name__ for t in accepted)}, "
                f"got {type(value).__name__}"
            )
    return tuple.__new__(cls, body)  # type: ignore[no-any-return]
