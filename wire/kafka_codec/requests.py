"""Request frames in: the header (cheap, no body decoding), then the body."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kafka.protocol.api_header import RequestHeader as _LibRequestHeader

from wire.api_versions import api_name, is_advertised
from wire.kafka_codec.messages import (
    _API_VERSIONS,
    _DECODE_ERRORS,
    _KNOWN_API_KEYS,
    _MESSAGE_CLASSES,
    InvalidRequestError,
    RequestHeader,
    UnsupportedVersionError,
    _check_served,
    _is_flexible,
    request_class,
)

_VERSION_PREFIX = struct.Struct(">hhi")
_FIXED_AND_LENGTH = struct.Struct(">hhih")  # the fixed part and client_id's length
_new_tuple = tuple.__new__

_Decoder = Callable[[bytes | memoryview, int], tuple[Any, int]]

# Compiled decoders, filled by warm_up() or on first use. Filling is
# idempotent, so a race between two threads only compiles twice.
_header_decoders: dict[bool, _Decoder] = {}
_header_decoders_by_version: dict[tuple[int, int], _Decoder] = {}
# Per served (api key, version) seen once: whether its header is flexible (v2, tagged
# fields) or not (v1); parse_request_header reads those itself.
_flexible_by_version: dict[tuple[int, int], bool] = {}
_request_decoders: dict[tuple[int, int], _Decoder] = {}
# Per (api key, version): the non-nullable fields a body may not leave null (see _NullPlan).
_null_plans: dict[tuple[int, int], _NullPlan] = {}

# (field name, nullable, plan of its struct or struct elements or None, kind)
_NullPlan = tuple[tuple[str, bool, "_NullPlan | None", str], ...]
_NULLABLE_TYPES = frozenset(("string", "bytes", "records"))


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
    if size >= _FIXED_AND_LENGTH.size:
        # The common case read with struct (the compiled decoder builds an object per
        # header): a served version, a client id that is null or plain UTF-8, no tagged
        # fields. Anything else goes the decoder's way, which gives the answer or the
        # error it always gave.
        api_key, api_version, correlation_id, n = _FIXED_AND_LENGTH.unpack_from(frame, 0)
        flexible = _flexible_by_version.get((api_key, api_version))
        if flexible is not None:
            pos = _FIXED_AND_LENGTH.size
            client_id: str | None = None
            if n >= 0:
                end = pos + n
                if end <= size:
                    try:
                        client_id = str(frame[pos:end], "utf-8")
                    except UnicodeDecodeError:
                        end = -1
                pos = end
            # a negative length is a null client id (as the decoder reads it)
            if 0 <= pos <= size and (not flexible or (pos < size and frame[pos] == 0)):
                if flexible:
                    pos += 1  # no tagged fields
                return _new_tuple(RequestHeader,  # type: ignore[no-any-return]
                                  (api_key, api_version, correlation_id, client_id, pos))
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
    flexible = _is_flexible(_MESSAGE_CLASSES[api_key][0], api_version)
    decoder = _header_decoder(flexible)
    if is_advertised(api_key, api_version):
        _header_decoders_by_version[(api_key, api_version)] = decoder
        _flexible_by_version[(api_key, api_version)] = flexible
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


def _null_plan(struct: Any, version: int) -> _NullPlan:
    """The fields of ``struct`` at ``version`` that can be read as null (arrays, strings,
    bytes, structs, the elements of a string array), with the structs below them that
    hold such fields; empty when nothing in the subtree must be checked. Kinds:
    ``value`` (the field itself), ``strings`` (an array whose elements may not be null
    either), ``struct`` and ``structs`` (checked inside with ``sub``)."""
    plan = []
    fields = struct.fields or ()
    for field in fields.values() if isinstance(fields, dict) else fields:
        if not field.for_version_q(version):
            continue
        nullable = field.nullable_for_version_q(version)
        sub: _NullPlan | None = None
        if field.is_struct_array():
            sub, kind = _null_plan(field.array_of, version) or None, "structs"
        elif field.is_array():
            kind = "strings" if field.array_of.type_str in _NULLABLE_TYPES else "value"
        elif field.is_struct():
            sub, kind = _null_plan(field, version) or None, "struct"
        elif field.type_str in _NULLABLE_TYPES:
            kind = "value"
        else:
            continue
        if nullable and sub is None and kind != "strings":
            continue
        plan.append((field.name, nullable, sub, kind))
    return tuple(plan)


def _null_plan_for(api_key: int, api_version: int) -> _NullPlan:
    plan = _null_plans.get((api_key, api_version))
    if plan is None:
        primary = request_class(api_key, api_version)[None]  # type: ignore[index]
        plan = _null_plans[(api_key, api_version)] = _null_plan(primary._struct, api_version)
    return plan


def _check_nulls(obj: Any, plan: _NullPlan, where: str) -> None:
    for name, nullable, sub, kind in plan:
        value = getattr(obj, name, None)
        if value is None:
            if nullable:
                continue
            raise InvalidRequestError(f"non-nullable field {where}{name} was serialized as null")
        if kind == "strings":
            if None in value:
                raise InvalidRequestError(
                    f"non-nullable field {where}{name} element was serialized as null")
        elif kind == "structs" and sub is not None:
            for item in value:
                _check_nulls(item, sub, f"{where}{name}[].")
        elif kind == "struct" and sub is not None:
            _check_nulls(value, sub, f"{where}{name}.")


def decode_request(header: RequestHeader, frame: bytes | bytearray | memoryview) -> Any:
    """Decode the body of a request into its kafka.protocol object.

    Field names are the schema's in snake_case (`request.topic_data[0]
    .partition_data[0].records` is the raw record bytes of a produce). Raises
    InvalidRequestError when the body is short or malformed,
    UnsupportedVersionError for versions not served (among them an
    ApiVersions request at an unsupported version, whose body cannot be
    read). Bytes after the last field are ignored, as Kafka's generated
    readers do: librdkafka 2.16 sends three of them after an all-topics
    Metadata v12 body. A null where the schema does not allow one (kafka.protocol
    reads a -1 length as None whatever the field) is refused as Kafka's readers do
    ("non-nullable field ... was serialized as null").
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
    plan = _null_plans.get((header.api_key, header.api_version))
    if plan is None:
        plan = _null_plan_for(header.api_key, header.api_version)
    if plan:
        try:
            _check_nulls(request, plan, "")
        except InvalidRequestError as exc:
            # Kafka's generated readers refuse these, and the API functions iterate them
            raise InvalidRequestError(
                f"{api_name(header.api_key)} v{header.api_version} request "
                f"(correlation id {header.correlation_id}): {exc}") from None
    return request
