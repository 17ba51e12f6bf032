"""Broker-side Kafka codec: request frames in, response frames out.

The schemas are kafka-python 3.x's (`kafka.protocol`), never hand-written.
That package is built for clients, but its message classes are generated
from Kafka's JSON schemas and work in both directions: each class compiles
(lazily, per version) a decoder and an encoder, so a broker can decode
`ProduceRequest` and encode `FetchResponse` with the same machinery the
client uses the other way round. Flexible versions (compact strings, arrays
and bytes, tagged fields) follow from the schema's `flexibleVersions`.

Terms used below:

- a *frame* is one request as the Processor read it, WITHOUT the 4-byte size
  prefix (bytes, bytearray or memoryview);
- `encode_response` returns the whole response frame WITH the size prefix,
  ready for the socket.

A request handler does::

    header = parse_request_header(frame)      # cheap: no body decoding
    request = decode_request(header, frame)   # kafka.protocol ApiMessage
    ...
    data = encode_response(header, {"throttle_time_ms": 0, "topics": [...]})

Responses are given either as a dict (nested dicts and lists for structs and
arrays, keys are the schema's snake_case names, missing fields take their
schema default, unknown keys raise ValueError) or as an instance of
`response_class(api_key, version)`. Produce records come out of
`decode_request` as raw `bytes` per partition and Fetch responses take raw
record bytes (bytes, bytearray or memoryview) per partition: the schema type
`records` is plain bytes in kafka.protocol 3.x, so no record is ever decoded
or re-encoded here. tests/wire/test_kafka_codec.py holds one response
example per API (`RESPONSE_EXAMPLES`), for instance Produce::

    {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time_ms": -1,
         "log_start_offset": 0}]}], "throttle_time_ms": 0}

and Fetch::

    {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "error_code": 0,
         "high_watermark": 10, "last_stable_offset": 10, "log_start_offset": 0,
         "records": log_bytes}]}]}

Fetch responses: `encode_response` copies the record bytes once, into the
returned frame; `encode_response_parts` returns the frame as a list of
buffers in which each partition's records are the handler's own object, for
`socket.sendmsg` or a multipart ZeroMQ send. (kafka.protocol's own `encode`
copies them twice, into a thread-local buffer that then stays as large as the
largest response ever encoded on that thread, and out again.) The rest of the
response is encoded by the library with 16-byte placeholders standing in for
the records, whose length prefixes are then rewritten.

A response object handed to `encode_response` is changed in place (default
tags reset; records swapped out and back during encoding): build one per
request, never share one between threads.

ApiVersions: answer with `encode_api_versions_response(header)`; it owns the
advertised table (wire/api_versions.py) and answers an unsupported version
the way Kafka does, with a v0 body carrying UNSUPPORTED_VERSION.

Tagged fields that hold their default value are never written (librdkafka
before 2.2 cannot skip them): the library already leaves out scalars equal
to their default; `encode_response` also drops empty or null tagged arrays
and tagged structs whose fields are all default, as Kafka does.

Call `warm_up()` once at start: it compiles every decoder and encoder the
advertised versions need, so the first real request does not pay for it.
All functions are safe to call from several actor threads at once (encoding
uses kafka.protocol's thread-local buffer).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.api_header import RequestHeader as _LibRequestHeader
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.protocol.schemas.fields.codecs import EncodeBufferPool, UnsignedVarInt32

from wire.api_versions import ADVERTISED, ADVERTISED_BY_KEY, api_name, is_advertised
from wire.errors import ErrorCode, KafkaError

__all__ = [
    "InvalidRequestError",
    "RequestHeader",
    "UnsupportedVersionError",
    "build_response",
    "decode_request",
    "encode_api_versions_response",
    "encode_response",
    "encode_response_parts",
    "parse_request_header",
    "request_class",
    "response_class",
    "warm_up",
]


class InvalidRequestError(KafkaError):
    """The frame is truncated, malformed or names an API key Kafka does not have.

    Kafka closes the connection on such a request; the code is for logs and
    metrics.
    """

    code = ErrorCode.INVALID_REQUEST


class UnsupportedVersionError(KafkaError):
    """The API or this version of it is not served by actorlog.

    Only ApiVersions gets an answer (see `encode_api_versions_response`);
    for every other API Kafka closes the connection.
    """

    code = ErrorCode.UNSUPPORTED_VERSION

    def __init__(
        self, message: str, api_key: int, api_version: int, correlation_id: int | None
    ) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class RequestHeader(NamedTuple):
    """A parsed request header; `header_size` is where the body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_size: int


_MESSAGE_CLASSES: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = {
    ApiKey.Produce: (ProduceRequest, ProduceResponse),
    ApiKey.Fetch: (FetchRequest, FetchResponse),
    ApiKey.ListOffsets: (ListOffsetsRequest, ListOffsetsResponse),
    ApiKey.Metadata: (MetadataRequest, MetadataResponse),
    ApiKey.OffsetCommit: (OffsetCommitRequest, OffsetCommitResponse),
    ApiKey.OffsetFetch: (OffsetFetchRequest, OffsetFetchResponse),
    ApiKey.FindCoordinator: (FindCoordinatorRequest, FindCoordinatorResponse),
    ApiKey.JoinGroup: (JoinGroupRequest, JoinGroupResponse),
    ApiKey.Heartbeat: (HeartbeatRequest, HeartbeatResponse),
    ApiKey.LeaveGroup: (LeaveGroupRequest, LeaveGroupResponse),
    ApiKey.SyncGroup: (SyncGroupRequest, SyncGroupResponse),
    ApiKey.DescribeGroups: (DescribeGroupsRequest, DescribeGroupsResponse),
    ApiKey.ListGroups: (ListGroupsRequest, ListGroupsResponse),
    ApiKey.ApiVersions: (ApiVersionsRequest, ApiVersionsResponse),
    ApiKey.CreateTopics: (CreateTopicsRequest, CreateTopicsResponse),
    ApiKey.DeleteTopics: (DeleteTopicsRequest, DeleteTopicsResponse),
    ApiKey.InitProducerId: (InitProducerIdRequest, InitProducerIdResponse),
    ApiKey.DescribeConfigs: (DescribeConfigsRequest, DescribeConfigsResponse),
}

_API_VERSIONS = int(ApiKey.ApiVersions)
_KNOWN_API_KEYS = frozenset(int(key) for key in ApiKey)
_VERSION_PREFIX = struct.Struct(">hhi")
_FRAME_PREFIX = struct.Struct(">ii")
_INT32 = struct.Struct(">i")
# Everything the library's compiled decoders raise on short or bad input
# (UnicodeDecodeError is a ValueError).
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, AssertionError)

_Decoder = Callable[[bytes | memoryview, int], tuple[Any, int]]
_Encoder = Callable[[Any, Any], None]

# Compiled codec functions, filled by warm_up() or on first use. Filling is
# idempotent, so a race between two threads only compiles twice.
_header_decoders: dict[bool, _Decoder] = {}
_header_decoders_by_version: dict[tuple[int, int], _Decoder] = {}
_request_decoders: dict[tuple[int, int], _Decoder] = {}
_response_encoders: dict[tuple[int, int], _Encoder] = {}
_tag_plans: dict[tuple[int, int], tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
_api_versions_bodies: dict[tuple[int, int], bytes] = {}
_defaults_plans: dict[tuple[int, int], tuple[tuple[str, Any, bool], ...]] = {}


def _check_served(api_key: int, api_version: int, correlation_id: int | None) -> None:
    if api_key not in _MESSAGE_CLASSES or api_key not in ADVERTISED_BY_KEY:
        raise UnsupportedVersionError(
            f"API {api_name(api_key)} ({api_key}) is not supported",
            api_key,
            api_version,
            correlation_id,
        )
    if not is_advertised(api_key, api_version):
        entry = ADVERTISED_BY_KEY[api_key]
        raise UnsupportedVersionError(
            f"{api_name(api_key)} v{api_version} is not supported "
            f"(supported: v{entry.min_version}-v{entry.max_version})",
            api_key,
            api_version,
            correlation_id,
        )


def request_class(api_key: int, api_version: int) -> type[ApiMessage]:
    """The kafka.protocol request class for an advertised API version."""
    _check_served(api_key, api_version, None)
    return _MESSAGE_CLASSES[api_key][0][api_version]  # type: ignore[no-any-return,index]


def response_class(api_key: int, api_version: int) -> type[ApiMessage]:
    """The kafka.protocol response class for an advertised API version.

    Instances are built with keyword arguments, nested structs with the
    classes hung on it, e.g. `MetadataResponse.MetadataResponseTopic`.
    """
    _check_served(api_key, api_version, None)
    return _MESSAGE_CLASSES[api_key][1][api_version]  # type: ignore[no-any-return,index]


def _is_flexible(cls: type[ApiMessage], api_version: int) -> bool:
    return bool(cls.flexible_version_q(api_version))


def _header_decoder(flexible: bool) -> _Decoder:
    decoder = _header_decoders.get(flexible)
    if decoder is None:
        # Request header v2 (flexible) adds tagged fields; client_id stays a
        # non-compact nullable string in both.
        decoder = _LibRequestHeader._struct.compiled_decode_from(
            2 if flexible else 1, compact=False, tagged=flexible, data_class=_LibRequestHeader
        )
        _header_decoders[flexible] = decoder
    return decoder


def parse_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Read the request header of a frame (no size prefix) without touching the body.

    Raises InvalidRequestError for short or garbled headers and unknown API
    keys, UnsupportedVersionError for APIs or versions actorlog does not
    serve. ApiVersions at any version is returned, so that it can be answered
    (Kafka parses a header of version 3 or later as a flexible one).
    """
    size = len(frame)
    if size < _VERSION_PREFIX.size:
        raise InvalidRequestError(
            f"request header truncated: {size} bytes, the fixed part needs {_VERSION_PREFIX.size}"
        )
    api_key, api_version, correlation_id = _VERSION_PREFIX.unpack_from(frame, 0)
    decoder = _header_decoders_by_version.get((api_key, api_version))
    if decoder is None:
        decoder = _header_decoder_for(api_key, api_version, correlation_id)
    # bytes are read directly (a slice of bytes is the one copy a field
    # needs); anything else through a memoryview, never copied whole.
    data = frame if isinstance(frame, bytes) else memoryview(frame)
    try:
        lib_header, pos = decoder(data, 0)
    except _DECODE_ERRORS as exc:
        raise InvalidRequestError(
            f"{api_name(api_key)} v{api_version} request header is malformed: {exc!r}"
        ) from exc
    if pos > size:
        raise InvalidRequestError(
            f"{api_name(api_key)} v{api_version} request header truncated: "
            f"needs {pos} bytes, frame has {size}"
        )
    return RequestHeader(api_key, api_version, correlation_id, lib_header.client_id, pos)


def _header_decoder_for(api_key: int, api_version: int, correlation_id: int | None) -> _Decoder:
    if api_key not in _KNOWN_API_KEYS:
        raise InvalidRequestError(f"unknown API key {api_key} (correlation id {correlation_id})")
    if api_key != _API_VERSIONS:
        _check_served(api_key, api_version, correlation_id)
    elif api_version < 0:
        raise UnsupportedVersionError(
            f"ApiVersions v{api_version} is not a valid version",
            api_key,
            api_version,
            correlation_id,
        )
    decoder = _header_decoder(_is_flexible(_MESSAGE_CLASSES[api_key][0], api_version))
    if is_advertised(api_key, api_version):
        _header_decoders_by_version[(api_key, api_version)] = decoder
    return decoder


def _request_decoder(api_key: int, api_version: int) -> _Decoder:
    decoder = _request_decoders.get((api_key, api_version))
    if decoder is None:
        cls = request_class(api_key, api_version)
        flexible = _is_flexible(cls, api_version)
        primary = cls[None]  # type: ignore[index]
        decoder = primary._struct.compiled_decode_from(
            api_version, compact=flexible, tagged=flexible, data_class=primary
        )
        _request_decoders[(api_key, api_version)] = decoder
    return decoder


def decode_request(header: RequestHeader, frame: bytes | bytearray | memoryview) -> Any:
    """Decode the body of a request into its kafka.protocol object.

    Field names are the schema's in snake_case (`request.topic_data[0]
    .partition_data[0].records` is the raw record bytes of a produce). Raises
    InvalidRequestError when the body is short or malformed,
    UnsupportedVersionError for versions not served (among them an
    ApiVersions request at an unsupported version, whose body cannot be
    read). Bytes after the last field are ignored, as Kafka's generated
    readers do: librdkafka 2.16 sends three of them after an all-topics
    Metadata v12 body.
    """
    decoder = _request_decoders.get((header.api_key, header.api_version))
    if decoder is None:
        try:
            decoder = _request_decoder(header.api_key, header.api_version)
        except UnsupportedVersionError as exc:
            exc.correlation_id = header.correlation_id
            raise
    data = frame if isinstance(frame, bytes) else memoryview(frame)
    try:
        request, pos = decoder(data, header.header_size)
    except _DECODE_ERRORS as exc:
        raise InvalidRequestError(
            f"{api_name(header.api_key)} v{header.api_version} request body is malformed "
            f"or truncated (correlation id {header.correlation_id}): {exc!r}"
        ) from exc
    size = len(data) if isinstance(data, bytes) else data.nbytes
    if pos > size:
        raise InvalidRequestError(
            f"{api_name(header.api_key)} v{header.api_version} request body is truncated "
            f"(correlation id {header.correlation_id})"
        )
    return request


def _defaults_plan(field_struct: Any, version: int) -> tuple[tuple[str, Any, bool], ...]:
    """(name, schema default, default is a list) of the fields in a version."""
    key = (id(field_struct), version)
    plan = _defaults_plans.get(key)
    if plan is None:
        entries = []
        for field in field_struct._fields:
            if not field.for_version_q(version):
                continue
            try:
                default = field.default
            except NotImplementedError:  # a required struct: the caller must give it
                continue
            entries.append((field.name, default, isinstance(default, list)))
        plan = tuple(entries)
        _defaults_plans[key] = plan
    return plan


def _build(field_struct: Any, data_class: Any, values: dict[str, Any], version: int) -> Any:
    # Like DataContainer(**values), but the fields of this version that the
    # dict leaves out are set to their default from a cached list, so the
    # encoder never falls back to the slow DataContainer.__getattr__.
    fields = field_struct.fields
    item = object.__new__(data_class)
    item._version = None
    item.tags = None
    item.unknown_tags = None
    for name, default, is_list in _defaults_plan(field_struct, version):
        if name not in values:
            setattr(item, name, [] if is_list else default)
    for name, value in values.items():
        field = fields.get(name)
        if field is None:
            raise ValueError(f"{data_class.__name__} has no field {name!r}")
        if value is not None:
            if field.is_struct_array():
                inner, inner_class = field.array_of, field.data_class
                value = [
                    _build(inner, inner_class, element, version)
                    if isinstance(element, dict)
                    else element
                    for element in value
                ]
            elif field.is_struct() and isinstance(value, dict):
                value = _build(field, field.data_class, value, version)
        setattr(item, name, value)
    return item


def build_response(api_key: int, api_version: int, values: dict[str, Any]) -> Any:
    """Turn a (nested) dict into the kafka.protocol response object."""
    primary = response_class(api_key, api_version)[None]  # type: ignore[index]
    response = _build(primary._struct, primary, values, api_version)
    response._version = api_version
    response._header = None
    response._min_version = None
    response._max_version = None
    return response


def _tag_plan(field_struct: Any, version: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(tagged fields, child structs that hold tagged fields) of a struct at a version."""
    key = (id(field_struct), version)
    plan = _tag_plans.get(key)
    if plan is None:
        tagged = tuple(field_struct.tagged_fields(version)._fields)
        children = []
        for field in field_struct.untagged_fields(version):
            if field.is_struct_array():
                inner = field.array_of
            elif field.is_struct():
                inner = field
            else:
                continue
            inner_tagged, inner_children = _tag_plan(inner, version)
            if inner_tagged or inner_children:
                children.append(field)
        plan = (tagged, tuple(children))
        _tag_plans[key] = plan
    return plan


def _holds_default(field: Any, value: Any, version: int) -> bool:
    """Whether Kafka would leave this tagged value out (it equals the default)."""
    default = field.default
    if field.is_array():
        if default == []:
            return value is None or len(value) == 0
        return value is None
    if field.is_struct():
        if value is None:
            return True
        if isinstance(value, tuple):
            pairs = zip(field.untagged_fields(version), value)
            return all(_holds_default(f, v, version) for f, v in pairs)
        members = list(field.untagged_fields(version)) + list(field.tagged_fields(version)._fields)
        return all(_holds_default(f, getattr(value, f.name), version) for f in members)
    return bool(value == default)


def _drop_default_tags(item: Any, field_struct: Any, version: int) -> None:
    tagged, children = _tag_plan(field_struct, version)
    for field in tagged:
        # Setting the default also spares the encoder's tag scan a slow
        # DataContainer.__getattr__ fallback for every unset tagged field.
        if _holds_default(field, getattr(item, field.name), version):
            default = field.default
            setattr(item, field.name, [] if isinstance(default, list) else default)
    for field in children:
        value = getattr(item, field.name)
        if value is None:
            continue
        if field.is_struct_array():
            inner = field.array_of
            for element in value:
                if not isinstance(element, tuple):
                    _drop_default_tags(element, inner, version)
        elif not isinstance(value, tuple):
            _drop_default_tags(value, field, version)


def _response_encoder(api_key: int, api_version: int) -> _Encoder:
    encoder = _response_encoders.get((api_key, api_version))
    if encoder is None:
        cls = response_class(api_key, api_version)
        flexible = _is_flexible(cls, api_version)
        encoder = cls._struct.compiled_encode_into(api_version, compact=flexible, tagged=flexible)
        _response_encoders[(api_key, api_version)] = encoder
    return encoder


def _encode_frame(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    encoder = _response_encoder(api_key, api_version)
    # Response header v1 (a tagged-field count after the correlation id) for
    # flexible versions, except ApiVersions, whose header is always v0.
    header_size = 8
    if api_key != _API_VERSIONS and _MESSAGE_CLASSES[api_key][1].flexible_version_q(api_version):
        header_size = 9
    with EncodeBufferPool.acquire() as out:
        out.ensure(header_size)
        out.pos = header_size
        encoder(response, out)
        buf = out.buf
        _FRAME_PREFIX.pack_into(buf, 0, out.pos - 4, correlation_id)
        if header_size == 9:
            buf[8] = 0
        return bytes(memoryview(buf)[: out.pos])


def _prepare_response(header: RequestHeader, response_data: dict[str, Any] | ApiMessage) -> Any:
    api_key, api_version = header.api_key, header.api_version
    if isinstance(response_data, dict):
        response = build_response(api_key, api_version, response_data)
    else:
        response = response_data
        cls = response_class(api_key, api_version)
        if not isinstance(response, cls[None]):  # type: ignore[index]
            raise TypeError(
                f"{api_name(api_key)} v{api_version} response must be a dict or "
                f"{cls.__name__}, not {type(response).__name__}"
            )
        if response.version not in (None, api_version):
            raise ValueError(
                f"response object is v{response.version}, the request was v{api_version}"
            )
    _drop_default_tags(response, response._struct, api_version)
    return response


def encode_response(header: RequestHeader, response_data: dict[str, Any] | ApiMessage) -> bytes:
    """Encode a response as a complete frame (size prefix, header, body).

    `response_data` is a dict (see the module docstring) or a response object
    of `response_class(header.api_key, header.api_version)`; tagged fields
    holding default values are reset on it so they are not written.
    Record bytes are copied once (see `encode_response_parts` for none).
    """
    if header.api_key == _API_VERSIONS and not is_advertised(_API_VERSIONS, header.api_version):
        return encode_api_versions_response(header)
    response = _prepare_response(header, response_data)
    if _records_plan(response._struct, header.api_version) != _NO_RECORDS:
        return b"".join(_encode_parts(header, response))
    return _encode_frame(header.api_key, header.api_version, header.correlation_id, response)


def encode_response_parts(
    header: RequestHeader, response_data: dict[str, Any] | ApiMessage
) -> list[bytes | bytearray | memoryview]:
    """Like `encode_response`, as a list of buffers whose concatenation is the frame.

    Record bytes (Fetch) are not copied: each is its own element, the very
    object the handler gave, for `socket.sendmsg` or a multipart send.
    """
    if header.api_key == _API_VERSIONS and not is_advertised(_API_VERSIONS, header.api_version):
        return [encode_api_versions_response(header)]
    return _encode_parts(header, _prepare_response(header, response_data))


_NO_RECORDS: tuple[tuple[Any, ...], tuple[Any, ...]] = ((), ())
_records_plans: dict[tuple[int, int], tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
# A placeholder put where record bytes go while the rest is encoded; random
# per process, so no topic name or error message can be mistaken for it.
_MARKER = os.urandom(12)
_MARKER_SIZE = len(_MARKER) + 4


def _records_plan(field_struct: Any, version: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(`records` fields, child structs that hold `records` fields) at a version."""
    key = (id(field_struct), version)
    plan = _records_plans.get(key)
    if plan is None:
        here = []
        children = []
        for field in field_struct.untagged_fields(version):
            if field.type_str == "records":
                here.append(field)
            elif field.is_struct_array() or field.is_struct():
                inner = field.array_of if field.is_struct_array() else field
                if _records_plan(inner, version) != _NO_RECORDS:
                    children.append(field)
        plan = (tuple(here), tuple(children))
        _records_plans[key] = plan
    return plan


def _swap_records(item: Any, field_struct: Any, version: int, saved: list[Any]) -> None:
    here, children = _records_plan(field_struct, version)
    for field in here:
        value = getattr(item, field.name)
        if isinstance(value, (bytes, bytearray, memoryview)):
            saved.append((item, field.name, value))
            setattr(item, field.name, _MARKER + _INT32.pack(len(saved) - 1))
    for field in children:
        value = getattr(item, field.name)
        if value is None:
            continue
        inner = field.array_of if field.is_struct_array() else field
        for element in value if field.is_struct_array() else (value,):
            if not isinstance(element, tuple):  # tuples keep their records inline
                _swap_records(element, inner, version, saved)


def _encode_parts(header: RequestHeader, response: Any) -> list[bytes | bytearray | memoryview]:
    api_key, api_version = header.api_key, header.api_version
    saved: list[Any] = []
    try:
        _swap_records(response, response._struct, api_version, saved)
        frame = _encode_frame(api_key, api_version, header.correlation_id, response)
    finally:
        for item, name, value in saved:
            setattr(item, name, value)
    if not saved:
        return [frame]
    compact = _MESSAGE_CLASSES[api_key][1].flexible_version_q(api_version)
    # The placeholder's length prefix as the encoder wrote it.
    old_prefix = UnsignedVarInt32.encode(_MARKER_SIZE + 1) if compact else _INT32.pack(_MARKER_SIZE)
    parts: list[bytes | bytearray | memoryview] = []
    start = 0
    size = len(frame)
    for index, (_, _, value) in enumerate(saved):
        marker = _MARKER + _INT32.pack(index)
        pos = frame.find(marker, start)
        while pos >= 0 and frame[pos - len(old_prefix) : pos] != old_prefix:
            pos = frame.find(marker, pos + 1)
        if pos < 0:
            raise AssertionError("record placeholder not found in the encoded response")
        length = value.nbytes if isinstance(value, memoryview) else len(value)
        prefix = UnsignedVarInt32.encode(length + 1) if compact else _INT32.pack(length)
        parts.append(frame[start : pos - len(old_prefix)])
        parts.append(prefix)
        parts.append(value)
        size += length + len(prefix) - _MARKER_SIZE - len(old_prefix)
        start = pos + _MARKER_SIZE
    parts.append(frame[start:])
    parts[0] = _INT32.pack(size - 4) + bytes(parts[0][4:])
    return parts


def _api_versions_body(api_version: int, error_code: int) -> Any:
    keys = [
        ApiVersionsResponse.ApiVersion(
            api_key=entry.api_key, min_version=entry.min_version, max_version=entry.max_version
        )
        for entry in ADVERTISED
    ]
    return ApiVersionsResponse[api_version](  # type: ignore[index]
        error_code=error_code, api_keys=keys, throttle_time_ms=0
    )


def encode_api_versions_response(
    header: RequestHeader, error_code: int = ErrorCode.NONE, throttle_time_ms: int = 0
) -> bytes:
    """The ApiVersions answer: the advertised table at the request's version.

    An unsupported version gets what Kafka sends: a v0 body with
    UNSUPPORTED_VERSION (librdkafka then retries at v0, kafka-python at the
    highest version listed for ApiVersions). The list holds every advertised
    API, a superset of Kafka's (which lists only ApiVersions itself there).
    """
    api_version = header.api_version
    if not is_advertised(_API_VERSIONS, api_version):
        api_version, error_code = 0, ErrorCode.UNSUPPORTED_VERSION
    if throttle_time_ms:
        response = _api_versions_body(api_version, int(error_code))
        response.throttle_time_ms = throttle_time_ms
        return _encode_frame(_API_VERSIONS, api_version, header.correlation_id, response)
    key = (api_version, int(error_code))
    frame = _api_versions_bodies.get(key)
    if frame is None:
        response = _api_versions_body(api_version, int(error_code))
        _drop_default_tags(response, response._struct, api_version)
        frame = _encode_frame(_API_VERSIONS, api_version, 0, response)
        _api_versions_bodies[key] = frame
    return b"".join((frame[:4], _INT32.pack(header.correlation_id), frame[8:]))


def _warm_defaults(field_struct: Any, version: int) -> None:
    _defaults_plan(field_struct, version)
    for field in field_struct.untagged_fields(version) + list(
        field_struct.tagged_fields(version)._fields
    ):
        if field.is_struct_array():
            _warm_defaults(field.array_of, version)
        elif field.is_struct():
            _warm_defaults(field, version)


def warm_up() -> None:
    """Compile every decoder and encoder the advertised versions need."""
    for flexible in (False, True):
        _header_decoder(flexible)
    for entry in ADVERTISED:
        request_cls, response_cls = _MESSAGE_CLASSES[entry.api_key]
        for version in range(entry.min_version, entry.max_version + 1):
            _request_decoder(entry.api_key, version)
            _header_decoder_for(entry.api_key, version, None)
            request_cls[version]  # type: ignore[index]  # creates the versioned class
            response = response_cls[version]()  # type: ignore[index]
            _drop_default_tags(response, response._struct, version)
            _records_plan(response._struct, version)
            _encode_frame(entry.api_key, version, 0, response)
            _warm_defaults(response._struct, version)
    for version in range(ADVERTISED_BY_KEY[_API_VERSIONS].max_version + 1):
        encode_api_versions_response(RequestHeader(_API_VERSIONS, version, 0, None, 0))
    encode_api_versions_response(RequestHeader(_API_VERSIONS, 32767, 0, None, 0))
