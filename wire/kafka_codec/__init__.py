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
`socket.sendmsg` or a multipart ZeroMQ send. Records may also be given as a
`wire.file_region.FileRegion` (the batches in their segment file): the parts
then mix bytes and regions, and `join_parts` gives the bytes in one piece
plus each region's offset in the frame (a KafkaResponse's `frame` and
`regions`), for the Processor to send with `os.sendfile`. (kafka.protocol's own `encode`
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

The package, one module per concern, everything public re-exported here:
`messages` (which kafka.protocol classes serve which API, the header, the
errors), `requests` (header and body decoding), `encoding` (response objects
built from dicts, default tags, the frame), `parts` (the zero-copy split),
`api_versions_response` and `responses` (the two public encoders), and `hot`
(Produce and Fetch read and written field by field with ``struct``, no
kafka.protocol object per field: the request handlers' path for the two
APIs that carry nearly every request; the functions above stay the
reference it is tested against).
"""

from __future__ import annotations

from wire.api_versions import ADVERTISED, ADVERTISED_BY_KEY, api_name
from wire.kafka_codec.api_versions_response import encode_api_versions_response
from wire.kafka_codec.encoding import (
    _drop_default_tags,
    _encode_frame,
    _warm_defaults,
    build_response,
)
from wire.kafka_codec.error_response import error_response
from wire.kafka_codec.hot import decode_hot_request, encode_hot_response
from wire.kafka_codec.messages import (
    _API_VERSIONS,
    _MESSAGE_CLASSES,
    InvalidRequestError,
    RequestHeader,
    UnsupportedVersionError,
    request_class,
    response_class,
)
from wire.kafka_codec.parts import Part, _records_plan, has_regions, join_parts
from wire.kafka_codec.requests import (
    _header_decoder,
    _header_decoder_for,
    _null_plan_for,
    _request_decoder,
    decode_request,
    parse_request_header,
)
from wire.kafka_codec.responses import encode_response, encode_response_parts

__all__ = [
    "InvalidRequestError",
    "Part",
    "RequestHeader",
    "UnsupportedVersionError",
    "api_name",
    "build_response",
    "decode_hot_request",
    "decode_request",
    "encode_api_versions_response",
    "encode_hot_response",
    "encode_response",
    "encode_response_parts",
    "error_response",
    "has_regions",
    "join_parts",
    "parse_request_header",
    "request_class",
    "response_class",
    "warm_up",
]


def warm_up() -> None:
    """Compile every decoder and encoder the advertised versions need."""
    for flexible in (False, True):
        _header_decoder(flexible)
    for entry in ADVERTISED:
        request_cls, response_cls = _MESSAGE_CLASSES[entry.api_key]
        for version in range(entry.min_version, entry.max_version + 1):
            _request_decoder(entry.api_key, version)
            _null_plan_for(entry.api_key, version)
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
