"""Response frames out: whole (records copied once) or as parts (records not copied)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_message import ApiMessage

from wire.api_versions import is_advertised
from wire.kafka_codec.api_versions_response import encode_api_versions_response
from wire.kafka_codec.encoding import _encode_frame, _prepare_response
from wire.kafka_codec.messages import _API_VERSIONS, RequestHeader
from wire.kafka_codec.parts import _NO_RECORDS, Part, _encode_parts, _records_plan, has_regions


def encode_response(header: RequestHeader, response_data: dict[str, Any] | ApiMessage) -> bytes:
    """Encode a response as a complete frame (size prefix, header, body).

    `response_data` is a dict (see the module docstring) or a response object
    of `response_class(header.api_key, header.api_version)`; tagged fields
    holding default values are reset on it so they are not written.
    Record bytes are copied once (see `encode_response_parts` for none); records
    given as file regions need `encode_response_parts`.
    """
    if header.api_key == _API_VERSIONS and not is_advertised(_API_VERSIONS, header.api_version):
        return encode_api_versions_response(header)
    response = _prepare_response(header, response_data)
    if _records_plan(response._struct, header.api_version) != _NO_RECORDS:
        parts = _encode_parts(header, response)
        if has_regions(parts):
            raise TypeError("records given as file regions: use encode_response_parts")
        return b"".join(parts)  # type: ignore[arg-type]
    return _encode_frame(header.api_key, header.api_version, header.correlation_id, response)


def encode_response_parts(
    header: RequestHeader, response_data: dict[str, Any] | ApiMessage
) -> list[Part]:
    """Like `encode_response`, as a list of parts whose concatenation is the frame.

    Record bytes (Fetch) are not copied: each is its own element, the very
    object the handler gave, for `socket.sendmsg` or a multipart send; records
    given as a FileRegion are that region, for `os.sendfile` (see `join_parts`).
    """
    if header.api_key == _API_VERSIONS and not is_advertised(_API_VERSIONS, header.api_version):
        return [encode_api_versions_response(header)]
    return _encode_parts(header, _prepare_response(header, response_data))
