"""A whole-request error answer, as Kafka's AbstractRequest.getErrorResponse makes one.

Kafka answers a request whose handling (the response's serialization included) fails
with the request's error response: the error code on every item the request named (a
topic, a partition, a group, a resource), echoed by its keys (its name, index, id), and
on the top level when the response has one; the error message null, as ApiError gives
UNKNOWN_SERVER_ERROR (nothing internal leaks). Built here from the schemas: a response
item mirrors the request item of the same array (by name, or the only array of each,
or as _ANSWERS names), copying its keys; a request item that is a bare string or int (a
group id, a topic name, a partition index) fills the response item's key of that type. A
response array whose items carry no error (CreateTopics' configs) is left at its default.
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
# The request arrays a top-level response array answers where the schemas do not say
# (by api key, then the response array's name), as each API's getErrorResponse: Fetch
# answers its topics, not forgotten_topics_data; DescribeLogDirs only the top-level
# error (its results are log dirs, not the topics asked); AlterUserScramCredentials
# both its deletions and upsertions, by user.
_ANSWERS: dict[int, dict[str, tuple[str, ...]]] = {
    1: {"responses": ("topics",)},
    35: {"results": ()},
    51: {"results": ("deletions", "upsertions")},
}
_DESCRIBE_USER_SCRAM = 50
_PRODUCE = 0
# APIs whose error answer Kafka sends even where it holds no error field: DescribeLogDirs
# v0-2 (its top-level error is v3+ and ignorable, so v0-2 is written without it: no
# results, not a closed connection)
_ANSWERED_WITHOUT_ERROR = frozenset({35})


def error_response(api_key: int, api_version: int, request: Any,
                   error_code: int, error_message: str | None = None) -> dict[str, Any] | None:
    """The response dict carrying ``error_code`` for everything ``request`` asked, or
    None when the response has no error code to carry it (Kafka closes the connection;
    but see _ANSWERED_WITHOUT_ERROR). ``error_message`` goes in every error_message field
    beside the codes (Kafka's ApiError.fromThrowable: none for UNKNOWN_SERVER_ERROR; the
    caller decides). Divergence: Kafka's getErrorResponse of a few requests leaves their
    message out; here it is written wherever the response has the field."""
    if api_key == _PRODUCE and getattr(request, "acks", None) == 0:
        return None  # the producer reads no answer: Kafka closes the connection
    struct = response_class(api_key, api_version)._struct
    found: list[bool] = []
    out = _mirror(struct, request, api_version, error_code, found, error_message, top=True,
                  answers=_ANSWERS.get(api_key, {}))
    if api_key == _DESCRIBE_USER_SCRAM and out.get("results"):
        # Named users: each result carries the error and the top level stays 0
        # (librdkafka 2.16 aborts reading a top-level error next to per-user results;
        # actors/apis/authorize.py answers the same shape)
        out["error_code"] = 0
    return out if found or api_key in _ANSWERED_WITHOUT_ERROR else None


def _fields(struct: Any, version: int) -> list[Any]:
    return [f for f in struct._fields if f.for_version_q(version)]


def _is_error_code(field: Any) -> bool:
    # "error_code", and the partition_error_code of AddPartitionsToTxn's v0-3 answer; not
    # CreateTopics' topic_config_error_code (Kafka leaves it 0 in an error answer)
    return field.name in ("error_code", "partition_error_code") and field.type_str == "int16"


def _holds_error(struct: Any, version: int) -> bool:
    return any(_is_error_code(f) or (f.is_struct_array() and _holds_error(f.array_of, version))
               or (f.is_struct() and _holds_error(f, version)) for f in _fields(struct, version))


def _mirror(struct: Any, item: Any, version: int, code: int, found: list[bool],
            message: str | None = None,
            top: bool = False, answers: dict[str, tuple[str, ...]] | None = None
            ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fields = _fields(struct, version)
    req_struct = getattr(item, "_struct", None) if top else None
    for field in fields:
        name = field.name
        if _is_error_code(field):
            out[name] = code
            found.append(True)
        elif name == "error_message":
            out[name] = message
        elif field.is_struct_array():
            if not _holds_error(field.array_of, version):
                continue  # nothing to answer in it: left at its default
            if answers is not None and name in answers:
                source = [x for asked in answers[name]
                          for x in (getattr(item, asked, None) or [])]
                if len(answers[name]) > 1:
                    # items asked in two arrays (a user both deleted and upserted) are
                    # answered once each, in name order, as Kafka's Set of names
                    by_name = {getattr(x, "name", None): x for x in source}
                    source = [by_name[n] for n in sorted(by_name, key=str)]
            else:
                source = _matching_items(struct, field, item, version, req_struct)
            out[name] = [_mirror(field.array_of, element, version, code, found, message)
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
    else, when it is the one array of the response that carries errors and the request
    has exactly one array at that level, that array's items (none otherwise: an array
    asked for another purpose, Fetch's forgotten topics say, is not answered)."""
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
    if len(names) != 1:
        return []
    value = getattr(item, names[0], None)
    return value if isinstance(value, list) else []
