"""Response objects: built from dicts, default tags dropped, encoded into a frame."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs import EncodeBufferPool

from wire.api_versions import api_name
from wire.kafka_codec.messages import (
    _API_VERSIONS,
    _MESSAGE_CLASSES,
    RequestHeader,
    _is_flexible,
    response_class,
)

_FRAME_PREFIX = struct.Struct(">ii")

_Encoder = Callable[[Any, Any], None]

# Compiled encoders and per-schema plans, filled by warm_up() or on first use.
_response_encoders: dict[tuple[int, int], _Encoder] = {}
_tag_plans: dict[tuple[int, int], tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
_defaults_plans: dict[tuple[int, int], tuple[tuple[str, Any, bool], ...]] = {}


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
            pairs = zip(field.untagged_fields(version), value, strict=False)  # untagged ones only
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


def _warm_defaults(field_struct: Any, version: int) -> None:
    _defaults_plan(field_struct, version)
    for field in field_struct.untagged_fields(version) + list(
        field_struct.tagged_fields(version)._fields
    ):
        if field.is_struct_array():
            _warm_defaults(field.array_of, version)
        elif field.is_struct():
            _warm_defaults(field, version)
