"""A whole-request error answer, as Kafka's AbstractRequest.getErrorResponse makes one.

Kafka answers a request whose handling (the response's serialization included) fails
with the request's error response: the error code on every item the request named (a
topic, a partition, a group, a resource), echoed by its keys (its name, index, id), and
on the top level when the response has one; the error message null, as ApiError gives
UNKNOWN_SERVER_ERROR (nothing internal leaks). Built here from the schemas: a response
item mirrors the request item of the same array (by name, or the only array of each),
copying its keys; a request item that is a bare string or int (a group id, a topic name,
a partition index) fills the response item's key of that type.
"""

from __future__ import annotations

from typing import Any

from wire.kafka_codec.messages import response_class

_ABSENT = object()

# The fields that name what a request item asks about, echoed in its answer (Kafka's
# getErrorResponse echoes these; a value asked for, a timestamp say, is not echoed)
_KEYS = frozenset({"name", "topic", "topic_name", "topic_id", "partition_index", "partition",
                   "partition_id", "group_id", "resource_type", "resource_name",
                   "transactional_id", "key", "key_type", "index", "user"})
# A key the request names otherwise (Fetch asks a "partition", answers a "partition_index")
_ALIASES = {"partition_index": ("partition",), "name": ("topic",), "topic": ("name",),
            "user": ("name",)}


def error_response(api_key: int, api_version: int, request: Any,
                   error_code: int) -> dict[str, Any] | None:
    """The response dict carrying ``error_code`` for everything ``request`` asked, or
    None when the response has no error code to carry it (Kafka closes the connection)."""
    struct = response_class(api_key, api_version)._struct
    found: list[bool] = []
    out = _mirror(struct, request, api_version, error_code, found, top=True)
    return out if found else None


def _fields(struct: Any, version: int) -> list[Any]:
    return [f for f in struct._fields if f.for_version_q(version)]


def _is_error_code(field: Any) -> bool:
    # "error_code", and the partition_error_code of AddPartitionsToTxn's v0-3 answer
    return bool(field.name.endswith("error_code") and field.type_str == "int16")


def _holds_error(struct: Any, version: int) -> bool:
    return any(_is_error_code(f) or (f.is_struct_array() and _holds_error(f.array_of, version))
               or (f.is_struct() and _holds_error(f, version)) for f in _fields(struct, version))


def _mirror(struct: Any, item: Any, version: int, code: int, found: list[bool],
            top: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fields = _fields(struct, version)
    req_struct = getattr(item, "_struct", None) if top else None
    for field in fields:
        name = field.name
        if _is_error_code(field):
            out[name] = code
            found.append(True)
        elif name == "error_message":
            out[name] = None
        elif field.is_struct_array():
            source = _matching_items(struct, field, item, version, req_struct)
            out[name] = [_mirror(field.array_of, element, version, code, found)
                         for element in source]
        elif field.is_struct():
            continue  # left at its default (a nullable one null)
        elif isinstance(item, (str, int)):
            continue  # filled below
        elif name in _KEYS and item is not None:
            value = _ABSENT
            for asked in (name, *_ALIASES.get(name, ())):
                value = getattr(item, asked, _ABSENT)
                if value is not _ABSENT:
                    break
            if value is not _ABSENT and not isinstance(value, (list, tuple)):
                out[name] = value
    if isinstance(item, (str, int)):  # a bare name or index: the response item's key
        wanted = "string" if isinstance(item, str) else "int32"
        for field in fields:
            if field.type_str == wanted and field.name in _KEYS:
                out[field.name] = item
                break
    return out


def _matching_items(struct: Any, field: Any, item: Any, version: int,
                    req_struct: Any) -> list[Any]:
    """The request's items a response array answers: the request array of the same name;
    else, for the one array of the response that carries errors, every item of the
    request's arrays at that level (AlterUserScramCredentials' deletions and upsertions
    are answered in one results array)."""
    if item is None or isinstance(item, (str, int)):
        return []
    same = getattr(item, field.name, None)
    if isinstance(same, list):
        return same
    answering = [f for f in _fields(struct, version)
                 if f.is_struct_array() and _holds_error(f.array_of, version)]
    if answering != [field]:
        return []
    shape = req_struct if req_struct is not None else getattr(item, "_struct", None)
    if shape is not None:
        names = [f.name for f in _fields(shape, version) if f.is_array() or f.is_struct_array()]
    else:
        names = [n for n in getattr(item, "__slots__", ())
                 if isinstance(getattr(item, n, None), list)]
    items: list[Any] = []
    for name in names:
        value = getattr(item, name, None)
        if isinstance(value, list):
            items.extend(value)
    return items
