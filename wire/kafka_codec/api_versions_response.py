"""The ApiVersions answer: the advertised table (wire/api_versions.py) at the request's version."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse

from wire.api_versions import ADVERTISED, is_advertised
from wire.errors import ErrorCode
from wire.kafka_codec.encoding import _drop_default_tags, _encode_frame
from wire.kafka_codec.messages import _API_VERSIONS, _INT32, RequestHeader

_api_versions_bodies: dict[tuple[int, int], bytes] = {}


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
