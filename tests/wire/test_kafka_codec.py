"""The broker-side Kafka codec against kafka-python's client side and real librdkafka.

Round trips: a request is encoded the way kafka-python's client does it
(`KafkaProtocol.send_request`), decoded by `wire.kafka_codec`, answered with
`encode_response`, and the answer is read back by the same `KafkaProtocol`.
Sample values are generated from the schema of each (API, version), so every
field of every advertised version is exercised, tagged fields included.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import struct
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.producer.kafka import KafkaProducer
from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.schemas.fields import StructField
from kafka.protocol.schemas.fields.codecs import (
    UUID,
    BitField,
    Boolean,
    Bytes,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    String,
    UnsignedInt16,
)

from tests.fixtures.codec_server import TOPIC, CodecServer
from wire import kafka_codec as kc
from wire.api_versions import ADVERTISED, ADVERTISED_BY_KEY, ApiVersionRange
from wire.errors import ErrorCode, KafkaError
from wire.file_region import FileRegion
from wire.kafka_codec import api_versions_response as kc_api_versions
from wire.kafka_codec import encoding as kc_encoding
from wire.kafka_codec import hot as kc_hot
from wire.kafka_codec import messages as kc_messages
from wire.kafka_codec import parts as kc_parts
from wire.kafka_codec import requests as kc_requests

PAIRS = [(e.api_key, v) for e in ADVERTISED for v in range(e.min_version, e.max_version + 1)]
PAIR_IDS = [f"{kc.api_name(k)}-v{v}" for k, v in PAIRS]


# -- schema-driven sample values ------------------------------------------------------------


def _simple(field: Any, codec: Any, nullable: bool, rng: random.Random) -> Any:
    if nullable and rng.random() < 0.2:
        return None
    if codec is Int8:
        return rng.randint(-128, 127)
    if codec is Int16:
        return rng.randint(-32768, 32767)
    if codec is UnsignedInt16:
        return rng.randint(0, 65535)
    if codec is Int32:
        return rng.randint(-(2**31), 2**31 - 1)
    if codec is Int64:
        return rng.randint(-(2**63), 2**63 - 1)
    if codec is Float64:
        return rng.random() * 1e6
    if codec is Boolean:
        return rng.random() < 0.5
    if codec is UUID:
        return uuid.UUID(int=rng.getrandbits(128) | 1)
    if codec is BitField:
        return {rng.randrange(31), rng.randrange(31)}
    if isinstance(codec, String):
        return f"{field.name}-é-{rng.randrange(1000)}"
    if codec is Bytes:
        return rng.randbytes(rng.randrange(1, 40))
    raise AssertionError(f"no sample for {field.name}: {codec}")


def sample(field_struct: Any, version: int, rng: random.Random, tags: bool = True) -> dict:
    """Non-default values for every field of a struct at a version.

    Inside a tagged field Kafka writes no nested tags, so none are made there.
    """
    values: dict[str, Any] = {}
    for field in field_struct._fields:
        if not field.for_version_q(version):
            continue
        tagged = field.tagged_field_q(version)
        if tagged and not tags:
            continue
        inner_tags = tags and not tagged
        if field.is_struct_array():
            values[field.name] = [
                sample(field.array_of, version, rng, inner_tags) for _ in range(2)
            ]
        elif field.is_struct():
            values[field.name] = sample(field, version, rng, inner_tags)
        elif field.is_array():
            codec = field.array_of._type
            values[field.name] = [_simple(field, codec, False, rng) for _ in range(3)]
        else:
            nullable = field.nullable_for_version_q(version)
            values[field.name] = _simple(field, field._type, nullable, rng)
    return values


def default_tags(field_struct: Any, version: int, rng: random.Random) -> dict:
    """Like `sample`, but every tagged field holds a value Kafka would leave out."""
    values = sample(field_struct, version, rng)
    _reset_tags(field_struct, version, values, rng)
    return values


def _default_struct(field_struct: Any, version: int) -> dict:
    values: dict[str, Any] = {}
    for field in field_struct.untagged_fields(version):
        if field.is_struct():
            values[field.name] = _default_struct(field, version)
        elif field.is_array():
            values[field.name] = []
        else:
            values[field.name] = field.default
    return values


def _reset_tags(field_struct: Any, version: int, values: dict, rng: random.Random) -> None:
    for field in field_struct._fields:
        if not field.for_version_q(version):
            continue
        if field.tagged_field_q(version):
            if field.is_array():
                values[field.name] = rng.choice([[], None])
            elif field.is_struct():
                values[field.name] = rng.choice([None, _default_struct(field, version)])
            else:
                values[field.name] = field.default
        elif field.is_struct_array():
            for element in values[field.name]:
                _reset_tags(field.array_of, version, element, rng)
        elif field.is_struct():
            _reset_tags(field, version, values[field.name], rng)


def to_library(field_struct: Any, data_class: Any, values: dict) -> Any:
    """Build kafka.protocol objects the way a client does (their own constructors)."""
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        field = field_struct.fields[name]
        if field.is_struct_array() and value is not None:
            value = [to_library(field.array_of, field.data_class, v) for v in value]
        elif field.is_struct() and value is not None:
            value = to_library(field, field.data_class, value)
        kwargs[name] = value
    return data_class(**kwargs)


def _plain(value: Any) -> Any:
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def assert_same(
    field_struct: Any, version: int, expected: dict, actual: Any, path: str, tags: bool = True
) -> None:
    for field in field_struct._fields:
        if not field.for_version_q(version):
            continue
        tagged = field.tagged_field_q(version)
        if tagged and not tags:
            continue
        want, got, where = expected[field.name], getattr(actual, field.name), f"{path}.{field.name}"
        if field.is_struct_array() and want is not None:
            assert got is not None and len(got) == len(want), where
            for i, (w, g) in enumerate(zip(want, got, strict=True)):
                assert_same(field.array_of, version, w, g, f"{where}[{i}]", tags and not tagged)
        elif field.is_struct() and want is not None:
            assert_same(field, version, want, got, where, tags and not tagged)
        else:
            assert _plain(got) == _plain(want), where


def assert_no_tags(field_struct: Any, version: int, decoded: Any, path: str) -> None:
    """No tagged field at all was read back from the encoded bytes."""
    assert decoded.tags is None and decoded.unknown_tags is None, (path, decoded.tags)
    for field in field_struct.untagged_fields(version):
        value = getattr(decoded, field.name)
        if field.is_struct_array() and value:
            for i, element in enumerate(value):
                assert_no_tags(field.array_of, version, element, f"{path}.{field.name}[{i}]")
        elif field.is_struct() and value is not None:
            assert_no_tags(field, version, value, f"{path}.{field.name}")


def client_request(api_key: int, version: int, values: dict) -> tuple[KafkaProtocol, bytes]:
    """Encode a request exactly as kafka-python's connection does; the frame without size."""
    cls = kc.request_class(api_key, version)
    request = to_library(cls._struct, cls, values)
    protocol = KafkaProtocol(client_id="codec-test-é")
    protocol.send_request(request)
    data = bytes(protocol.send_bytes())
    assert struct.unpack(">i", data[:4])[0] == len(data) - 4
    return protocol, data[4:]


def request_values(api_key: int, version: int, rng: random.Random) -> dict:
    values = sample(kc.request_class(api_key, version)._struct, version, rng)
    if api_key == 0:
        values["acks"] = -1  # acks=0 expects no response, the client would not read one
    return values


def response_values(api_key: int, version: int, rng: random.Random, tags: bool = True) -> dict:
    struct_ = kc.response_class(api_key, version)._struct
    values = sample(struct_, version, rng) if tags else default_tags(struct_, version, rng)
    if api_key == 18:
        values["error_code"] = 0  # the client reads any error as a v0 body
    return values


# -- round trips over every advertised (API, version) ----------------------------------------


@pytest.mark.parametrize(("api_key", "version"), PAIRS, ids=PAIR_IDS)
def test_request_from_client_decodes_and_response_reads_back(api_key: int, version: int) -> None:
    rng = random.Random(api_key * 100 + version)
    sent = request_values(api_key, version, rng)
    protocol, frame = client_request(api_key, version, sent)

    header = kc.parse_request_header(frame)
    assert (header.api_key, header.api_version) == (api_key, version)
    assert header.correlation_id == 1
    assert header.client_id == "codec-test-é"
    request = kc.decode_request(header, frame)
    assert request.version == version
    assert_same(request._struct, version, sent, request, kc.api_name(api_key))

    answer = response_values(api_key, version, rng)
    [(correlation_id, response)] = protocol.receive_bytes(kc.encode_response(header, answer))
    assert correlation_id == 1
    assert response.version == version
    assert_same(response._struct, version, answer, response, kc.api_name(api_key))


@pytest.mark.parametrize(("api_key", "version"), PAIRS, ids=PAIR_IDS)
def test_default_valued_tagged_fields_are_never_written(api_key: int, version: int) -> None:
    rng = random.Random(version)
    protocol, frame = client_request(api_key, version, request_values(api_key, version, rng))
    header = kc.parse_request_header(frame)
    answer = response_values(api_key, version, rng, tags=False)
    [(_, response)] = protocol.receive_bytes(kc.encode_response(header, answer))
    assert_no_tags(response._struct, version, response, kc.api_name(api_key))


def _error_codes(obj: Any, struct_: Any, version: int) -> list[int]:
    """Every error code of a decoded response at its version, depth first."""
    found: list[int] = []
    for field in struct_._fields:
        if not field.for_version_q(version):
            continue
        value = getattr(obj, field.name, None)
        if field.name in ("error_code", "partition_error_code"):  # AddPartitionsToTxn v0-3
            found.append(value)
        elif field.is_struct_array() and value:
            for item in value:
                found.extend(_error_codes(item, field.array_of, version))
        elif field.is_struct() and value is not None:
            found.extend(_error_codes(value, field, version))
    return found


# The fields naming what an item is about, and the request arrays (dotted paths, the
# first present at the version) whose items an API's error answer names, by Kafka's
# getErrorResponse of each; the last step may be an array of bare names or indexes
_KEY_FIELDS = frozenset({"name", "topic", "topic_name", "topic_id", "partition_index",
                         "partition", "group_id", "resource_type", "resource_name",
                         "transactional_id", "user"})
_ANSWERED: dict[int, tuple[str, ...]] = {
    0: ("topic_data.partition_data",), 1: ("topics.partitions",),
    2: ("topics.partitions",), 3: ("topics",), 8: ("topics.partitions",),
    9: ("groups.topics.partition_indexes", "topics.partition_indexes"), 15: ("groups",),
    19: ("topics",), 20: ("topics", "topic_names"), 21: ("topics.partitions",),
    28: ("topics.partitions",), 32: ("resources",), 33: ("resources",), 35: (),
    37: ("topics",), 42: ("groups_names",), 44: ("resources",), 47: ("topics.partitions",),
    50: ("users",), 51: ("deletions", "upsertions"),
}


def _item_keys(item: Any, struct_: Any, version: int) -> tuple[str, ...]:
    return tuple(sorted(repr(getattr(item, f.name)) for f in struct_._fields
                        if f.for_version_q(version) and f.name in _KEY_FIELDS
                        and not f.is_array() and getattr(item, f.name, None) is not None
                        and getattr(item, f.name) != uuid.UUID(int=0)))


def _answered_keys(response: Any, version: int) -> list[tuple[str, ...]]:
    """The key tuples of the response's innermost answered items (under the top level)."""
    def walk(obj: Any, struct_: Any, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        out: list[tuple[str, ...]] = []
        for field in struct_._fields:
            if field.for_version_q(version) and field.is_struct_array():
                for item in getattr(obj, field.name, None) or []:
                    keys = prefix + _item_keys(item, field.array_of, version)
                    out.extend(walk(item, field.array_of, keys) or [keys])
        return out
    return sorted(walk(response, response._struct, ()))


def _asked_keys(request: Any, api_key: int, version: int) -> list[tuple[str, ...]]:
    """The key tuples of the request's items its error answer names (_ANSWERED)."""
    def walk(obj: Any, struct_: Any, steps: list[str],
             prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        field = next(f for f in struct_._fields if f.name == steps[0])
        out: list[tuple[str, ...]] = []
        for item in getattr(obj, field.name, None) or []:
            if not field.is_struct_array():
                out.append((*prefix, repr(item)))
                continue
            keys = prefix + _item_keys(item, field.array_of, version)
            out.extend(walk(item, field.array_of, steps[1:], keys) if steps[1:] else [keys])
        return out
    found: list[tuple[str, ...]] = []
    for path in _ANSWERED[api_key]:
        steps = path.split(".")
        if not any(f.name == steps[0] and f.for_version_q(version)
                   for f in request._struct._fields):
            continue
        found.extend(walk(request, request._struct, steps, ()))
        if api_key not in (51,):  # the first path present, but both of AlterUserScram's
            break
    if api_key == 51:  # one result per user
        found = [(k,) for k in dict.fromkeys(k for (k,) in found)]
    return sorted(found)


def _error_answer(api_key: int, version: int, values: dict | None = None
                  ) -> tuple[Any, Any, dict | None]:
    rng = random.Random(api_key * 1000 + version)
    values = values if values is not None else request_values(api_key, version, rng)
    protocol, frame = client_request(api_key, version, values)
    header = kc.parse_request_header(frame)
    request = kc.decode_request(header, frame)
    answer = kc.error_response(api_key, version, request, int(ErrorCode.UNKNOWN_SERVER_ERROR))
    if answer is None:
        return request, None, None
    [(_, response)] = protocol.receive_bytes(kc.encode_response(header, answer))
    return request, response, answer


@pytest.mark.parametrize(("api_key", "version"), [p for p in PAIRS if p[0] != 18],
                         ids=[i for p, i in zip(PAIRS, PAIR_IDS, strict=True) if p[0] != 18])
def test_the_error_answer_of_every_request_reads_back(api_key: int, version: int) -> None:
    """kc.error_response (a response that cannot be written is answered with it, as
    Kafka's getErrorResponse): the client reads it, every error in it UNKNOWN_SERVER_ERROR,
    and the items the request named are answered by their keys, those only; None only
    for an API whose response has no top-level error code and nothing to answer by item
    (ApiVersions is answered on its own path). DescribeLogDirs v1-2 hold no error: the
    answer is its empty results, as Kafka writes its error response at those versions."""
    request, response, _ = _error_answer(api_key, version)
    if api_key == 35 and version < 3:
        assert response is not None and response.results == []
        return
    if response is None:
        top = kc.response_class(api_key, version)._struct
        assert not [f for f in top._fields if f.for_version_q(version)
                    and f.name == "error_code"]
        assert not [f for f in top._fields if f.for_version_q(version)
                    and f.is_struct_array()]
        return
    codes = _error_codes(response, response._struct, version)
    unknown = int(ErrorCode.UNKNOWN_SERVER_ERROR)
    if api_key == 50:  # named users: the top level stays 0 (librdkafka, authorize.py)
        assert codes[0] == 0 and set(codes[1:]) == {unknown}
    else:
        assert codes and set(codes) == {unknown}
    if api_key in _ANSWERED:
        assert _answered_keys(response, version) == _asked_keys(request, api_key, version)


def test_the_error_answer_of_a_fetch_names_its_topics_not_the_forgotten() -> None:
    """Kafka's FetchRequest.getErrorResponse answers data.topics() only: the forgotten
    topics of an incremental fetch session are not partitions the client asked for."""
    for version in (7, 12):
        rng = random.Random(version)
        values = request_values(1, version, rng)
        values["forgotten_topics_data"] = [{"topic": "gone", "partitions": [5, 6]}]
        request, response, _ = _error_answer(1, version, values)
        asked = sorted((t.topic, p.partition) for t in request.topics for p in t.partitions)
        answered = sorted((t.topic, p.partition_index) for t in response.responses
                          for p in t.partitions)
        assert answered == asked and "gone" not in {t for t, _ in answered}


def test_the_error_answer_of_describe_log_dirs_is_its_top_level_error() -> None:
    """DescribeLogDirs answers log dirs, not the topics asked: Kafka's error answer is the
    top-level error and no results (v3+); v1-2 have no error field (Kafka's is v3+ and
    ignorable): no results, answered, not a closed connection."""
    for version in (3, 4):
        _, response, _ = _error_answer(35, version)
        assert response.error_code == int(ErrorCode.UNKNOWN_SERVER_ERROR)
        assert response.results == []
    for version in (1, 2):
        _, response, answer = _error_answer(35, version)
        assert response is not None and response.results == []
        assert answer == {"results": []}  # the throttle time at its default, 0


def test_a_produce_with_acks_0_has_no_error_answer() -> None:
    """Kafka's ProduceRequest.getErrorResponse is null for acks=0 (the producer reads no
    answer): the connection is closed instead; acks 1 and -1 are answered."""
    for version in (3, 9):
        values = request_values(0, version, random.Random(version))
        assert _error_answer(0, version, {**values, "acks": 0})[1] is None
        for acks in (1, -1):
            assert _error_answer(0, version, {**values, "acks": acks})[1] is not None


@pytest.mark.parametrize(("api_key", "version"),
                         [(0, v) for v in kc_hot.PRODUCE_VERSIONS]
                         + [(1, v) for v in kc_hot.FETCH_VERSIONS])
def test_the_error_answer_of_a_hot_request_is_that_of_its_decoded_request(
        api_key: int, version: int) -> None:
    """The broker passes kc.error_response what decode_hot_request made of a Produce or
    Fetch (its own objects, no kafka-python _struct): the answer is the one the
    kafka.protocol request gets, every partition asked answered, and it reads back; a
    hot Produce with acks=0 has none (closed)."""
    values = request_values(api_key, version, random.Random(version))
    if api_key == 1:
        values["forgotten_topics_data"] = [{"topic": "gone", "partitions": [5]}]
    unknown = int(ErrorCode.UNKNOWN_SERVER_ERROR)
    for acks in ((1, -1, 0) if api_key == 0 else (None,)):
        if acks is not None:
            values["acks"] = acks
        protocol, frame = client_request(api_key, version, values)
        header = kc.parse_request_header(frame)
        hot = kc.decode_hot_request(header, frame)
        assert hot is not None and getattr(hot, "_struct", None) is None
        answer = kc.error_response(api_key, version, hot, unknown)
        if acks == 0:
            assert answer is None
            continue
        assert answer == kc.error_response(api_key, version,
                                           kc.decode_request(header, frame), unknown)
        [(_, response)] = protocol.receive_bytes(kc.encode_response(header, answer))
        assert _answered_keys(response, version) == _asked_keys(
            kc.decode_request(header, frame), api_key, version)
        assert set(_error_codes(response, response._struct, version)) == {unknown}


def test_the_error_answer_carries_the_message_given_where_it_has_a_field() -> None:
    """A KafkaError's message goes into the error answer's error_message fields (Kafka's
    ApiError.fromThrowable); none given, none written."""
    for version in (2, 5, 7):
        values = request_values(19, version, random.Random(version))
        protocol, frame = client_request(19, version, values)
        header = kc.parse_request_header(frame)
        request = kc.decode_request(header, frame)
        storage = int(ErrorCode.KAFKA_STORAGE_ERROR)
        answer = kc.error_response(19, version, request, storage, "disk gone")
        [(_, response)] = protocol.receive_bytes(kc.encode_response(header, answer))
        assert response.topics
        assert {(t.error_code, t.error_message) for t in response.topics} == {
            (storage, "disk gone")}, version
        assert {t["error_message"] for t in kc.error_response(
            19, version, request, storage)["topics"]} == {None}


def test_the_error_answer_of_create_topics_leaves_the_config_error_alone() -> None:
    """CreateTopics v5+: topic_config_error_code 0 and configs null, as Kafka's
    CreateTopicsRequest.getErrorResponse sets only each topic's error."""
    for version in (5, 7):
        _, _, answer = _error_answer(19, version)
        assert answer is not None
        for topic in answer["topics"]:
            assert topic["error_code"] == int(ErrorCode.UNKNOWN_SERVER_ERROR)
            assert topic.get("topic_config_error_code", 0) == 0
            assert topic.get("configs") is None


def test_api_versions_v3_and_v4_bodies_end_without_tags() -> None:
    for version in (3, 4):
        frame = kc.encode_api_versions_response(kc.RequestHeader(18, version, 77, None, 0))
        # size, correlation id, then straight the body: the header is v0 even when flexible.
        assert frame[4:8] == struct.pack(">i", 77)
        assert frame[8:10] == b"\x00\x00"
        # ... throttle_time_ms then an empty tag section: no SupportedFeatures,
        # FinalizedFeaturesEpoch, FinalizedFeatures or ZkMigrationReady.
        assert frame.endswith(b"\x00\x00\x00\x00" + b"\x00")
        response = ApiVersionsResponse.decode(frame[4:], version=version, header=True)
        assert response.tags is None and response.unknown_tags is None


# -- one example per API: what handlers hand to encode_response ------------------------------

RECORDS = bytes(range(256)) * 8

RESPONSE_EXAMPLES: dict[int, dict[str, Any]] = {
    0: {
        "throttle_time_ms": 0,
        "responses": [
            {
                "name": "orders",
                "partition_responses": [
                    {
                        "index": 0,
                        "error_code": 0,
                        "base_offset": 42,
                        "log_append_time_ms": -1,
                        "log_start_offset": 0,
                    }
                ],
            }
        ],
    },
    1: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "orders",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 10,
                        "last_stable_offset": 10,
                        "log_start_offset": 0,
                        "records": RECORDS,
                    },
                    {
                        "partition_index": 1,
                        "error_code": ErrorCode.OFFSET_OUT_OF_RANGE,
                        "high_watermark": 3,
                        "records": None,
                    },
                ],
            }
        ],
    },
    2: {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "timestamp": -1,
                        "offset": 10,
                        "leader_epoch": 0,
                    }
                ],
            }
        ],
    },
    3: {
        "throttle_time_ms": 0,
        "cluster_id": "actorlog",
        "controller_id": 1,
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "topics": [
            {
                "error_code": 0,
                "name": "orders",
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": 0,
                        "leader_id": 1,
                        "leader_epoch": 0,
                        "replica_nodes": [1],
                        "isr_nodes": [1],
                        "offline_replicas": [],
                    }
                ],
            }
        ],
    },
    8: {
        "throttle_time_ms": 0,
        "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "error_code": 0}]}],
    },
    9: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 5,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": 0,
                    }
                ],
            }
        ],
        "groups": [
            {
                "group_id": "g",
                "error_code": 0,
                "topics": [
                    {
                        "name": "orders",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 5,
                                "committed_leader_epoch": -1,
                                "metadata": "",
                                "error_code": 0,
                            }
                        ],
                    }
                ],
            }
        ],
    },
    10: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "node_id": 1,
        "host": "127.0.0.1",
        "port": 9092,
        "coordinators": [
            {
                "key": "g",
                "node_id": 1,
                "host": "127.0.0.1",
                "port": 9092,
                "error_code": 0,
                "error_message": None,
            }
        ],
    },
    11: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "generation_id": 1,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": "m-1",
        "skip_assignment": False,
        "member_id": "m-1",
        "members": [{"member_id": "m-1", "group_instance_id": None, "metadata": b"\x00\x01"}],
    },
    12: {"throttle_time_ms": 0, "error_code": 0},
    13: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "members": [{"member_id": "m-1", "group_instance_id": None, "error_code": 0}],
    },
    14: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignment": b"\x00\x01",
    },
    15: {
        "throttle_time_ms": 0,
        "groups": [
            {
                "error_code": 0,
                "group_id": "g",
                "group_state": "Stable",
                "protocol_type": "consumer",
                "protocol_data": "range",
                "members": [
                    {
                        "member_id": "m-1",
                        "group_instance_id": None,
                        "client_id": "c",
                        "client_host": "/127.0.0.1",
                        "member_metadata": b"",
                        "member_assignment": b"",
                    }
                ],
            }
        ],
    },
    16: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "groups": [
            {
                "group_id": "g",
                "protocol_type": "consumer",
                "group_state": "Stable",
                "group_type": "classic",
            }
        ],
    },
    18: {
        "error_code": 0,
        "throttle_time_ms": 0,
        "api_keys": [
            {"api_key": e.api_key, "min_version": e.min_version, "max_version": e.max_version}
            for e in ADVERTISED
        ],
    },
    19: {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": "orders",
                "error_code": 0,
                "error_message": None,
                "num_partitions": 3,
                "replication_factor": 1,
                "configs": [
                    {
                        "name": "cleanup.policy",
                        "value": "delete",
                        "read_only": False,
                        "config_source": 5,
                        "is_sensitive": False,
                    }
                ],
            }
        ],
    },
    20: {
        "throttle_time_ms": 0,
        "responses": [{"name": "orders", "error_code": 0, "error_message": None}],
    },
    22: {"throttle_time_ms": 0, "error_code": 0, "producer_id": 1000, "producer_epoch": 0},
    23: {"throttle_time_ms": 0, "topics": [{"topic": "orders", "partitions": [
        {"error_code": 0, "partition": 0, "leader_epoch": 3, "end_offset": 120},
        {"error_code": ErrorCode.FENCED_LEADER_EPOCH, "partition": 1, "leader_epoch": -1,
         "end_offset": -1}]}]},
    32: {
        "throttle_time_ms": 0,
        "results": [
            {
                "error_code": 0,
                "error_message": None,
                "resource_type": 2,
                "resource_name": "orders",
                "configs": [
                    {
                        "name": "retention.ms",
                        "value": "604800000",
                        "read_only": False,
                        "config_source": 5,
                        "is_sensitive": False,
                        "synonyms": [],
                        "config_type": 5,
                        "documentation": None,
                    }
                ],
            }
        ],
    },
    24: {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": "orders", "results_by_partition": [
            {"partition_index": 0, "partition_error_code": 0},
            {"partition_index": 1, "partition_error_code": 51}]}]},
    25: {"throttle_time_ms": 0, "error_code": 0},
    26: {"throttle_time_ms": 0, "error_code": 48},
    28: {"throttle_time_ms": 0, "topics": [
        {"name": "orders", "partitions": [{"partition_index": 2, "error_code": 0}]}]},
    65: {"throttle_time_ms": 0, "transaction_states": [
        {"error_code": 0, "transactional_id": "app-1", "transaction_state": "Ongoing",
         "transaction_timeout_ms": 60000, "transaction_start_time_ms": 1700000000000,
         "producer_id": 4000, "producer_epoch": 3,
         "topics": [{"topic": "orders", "partitions": [0, 2]}]}]},
    61: {"throttle_time_ms": 0, "topics": [{"name": "orders", "partitions": [
        {"partition_index": 0, "error_code": 0, "error_message": None, "active_producers": [
            {"producer_id": 4000, "producer_epoch": 3, "last_sequence": 9,
             "last_timestamp": 1700000000000, "coordinator_epoch": -1,
             "current_txn_start_offset": 42}]},
        {"partition_index": 7, "error_code": 3, "error_message": None,
         "active_producers": []}]}]},
    66: {"throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": ["Bogus"],
         "transaction_states": [{"transactional_id": "app-1", "producer_id": 4000,
                                 "transaction_state": "Ongoing"}]},
    21: {
        "throttle_time_ms": 0,
        "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "low_watermark": 42, "error_code": 0}]}],
    },
    33: {
        "throttle_time_ms": 0,
        "responses": [{"error_code": 0, "error_message": None, "resource_type": 2,
                       "resource_name": "orders"}],
    },
    35: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "results": [{"error_code": 0, "log_dir": "/var/lib/actorlog", "topics": [
            {"name": "orders", "partitions": [
                {"partition_index": 0, "partition_size": 4096, "offset_lag": 0,
                 "is_future_key": False}]}],
            "total_bytes": 1 << 40, "usable_bytes": 1 << 39}],
    },
    37: {
        "throttle_time_ms": 0,
        "results": [{"name": "orders", "error_code": 37,
                     "error_message": "topic 'orders' already has 3 partitions"}],
    },
    42: {"throttle_time_ms": 0, "results": [{"group_id": "readers", "error_code": 68}]},
    44: {
        "throttle_time_ms": 0,
        "responses": [{"error_code": 40, "error_message": "unknown topic config 'x'",
                       "resource_type": 2, "resource_name": "orders"}],
    },
    47: {
        "error_code": 0,
        "throttle_time_ms": 0,
        "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "error_code": 86}]}],
    },
    75: {
        "throttle_time_ms": 0,
        "topics": [{"error_code": 0, "name": "orders", "is_internal": False, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
             "replica_nodes": [1], "isr_nodes": [1], "eligible_leader_replicas": None,
             "last_known_elr": None, "offline_replicas": []}]}],
        "next_cursor": {"topic_name": "orders", "partition_index": 1},
    },
    60: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "cluster_id": "Q1b0oL3WQxWd0r2m2Q3z7w",
        "controller_id": 2,
        "brokers": [{"broker_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None},
                    {"broker_id": 2, "host": "127.0.0.2", "port": 9092, "rack": "r2"}],
    },
    17: {"error_code": 0, "mechanisms": ["PLAIN", "SCRAM-SHA-256"]},
    36: {"error_code": 58, "error_message": "Authentication failed", "auth_bytes": b"r=abc",
         "session_lifetime_ms": 3000},
    43: {
        "throttle_time_ms": 0,
        "error_code": 0,
        "replica_election_results": [{"topic": "orders", "partition_result": [
            {"partition_id": 0, "error_code": 0, "error_message": None},
            {"partition_id": 1, "error_code": 84, "error_message": None}]}],
    },
    45: {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "responses": [{"name": "orders", "partitions": [
            {"partition_index": 0, "error_code": 0, "error_message": None},
            {"partition_index": 1, "error_code": 39, "error_message": "Duplicate replica ids"}]}],
    },
    46: {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "replicas": [3, 1], "adding_replicas": [3],
             "removing_replicas": [1]}]}],
    },
    # ACLs (branch acl): Describe, Create, Delete
    29: {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "resources": [{"resource_type": 2, "resource_name": "orders", "pattern_type": 3,
                       "acls": [{"principal": "User:alice", "host": "*", "operation": 3,
                                 "permission_type": 3}]}],
    },
    30: {"throttle_time_ms": 0, "results": [
        {"error_code": 0, "error_message": None},
        {"error_code": 42, "error_message": "unknown operation"}]},
    31: {"throttle_time_ms": 0, "filter_results": [
        {"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": 3,
             "resource_name": "billing-", "pattern_type": 4, "principal": "User:bob",
             "host": "*", "operation": 2, "permission_type": 2}]}]},
    # SCRAM users (KIP-554): Describe, Alter
    50: {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": [
        {"user": "alice", "error_code": 0, "error_message": None,
         "credential_infos": [{"mechanism": 1, "iterations": 4096},
                              {"mechanism": 2, "iterations": 8192}]},
        {"user": "nobody", "error_code": 91, "error_message": "no SCRAM credential",
         "credential_infos": []}]},
    51: {"throttle_time_ms": 0, "results": [
        {"user": "alice", "error_code": 0, "error_message": None},
        {"user": "bob", "error_code": 93, "error_message": "too few iterations"}]},
}


def test_every_advertised_api_has_an_example() -> None:
    assert set(RESPONSE_EXAMPLES) == set(ADVERTISED_BY_KEY)


@pytest.mark.parametrize(("api_key", "version"), PAIRS, ids=PAIR_IDS)
def test_example_response_reads_back_in_kafka_python(api_key: int, version: int) -> None:
    rng = random.Random(7)
    protocol, frame = client_request(api_key, version, request_values(api_key, version, rng))
    header = kc.parse_request_header(frame)
    example = RESPONSE_EXAMPLES[api_key]
    [(_, response)] = protocol.receive_bytes(kc.encode_response(header, example))
    for name, value in example.items():
        field = response._struct.fields[name]
        if not field.for_version_q(version) or field.is_struct_array():
            continue
        if field.is_struct() and isinstance(value, dict):
            assert {k: getattr(getattr(response, name), k) for k in value} == value, name
        else:
            assert getattr(response, name) == value, name
    assert_no_tags(response._struct, version, response, kc.api_name(api_key))


def test_response_object_from_response_class_encodes_like_the_dict() -> None:
    header = kc.RequestHeader(3, 12, 5, "c", 0)
    cls = kc.response_class(3, 12)
    obj = cls(
        throttle_time_ms=0,
        cluster_id="actorlog",
        controller_id=1,
        brokers=[cls.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092)],
        topics=[],
    )
    as_dict = {
        "throttle_time_ms": 0,
        "cluster_id": "actorlog",
        "controller_id": 1,
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092}],
        "topics": [],
    }
    assert kc.encode_response(header, obj) == kc.encode_response(header, as_dict)


def test_default_tags_set_on_a_response_object_are_left_out() -> None:
    header = kc.RequestHeader(0, 10, 5, "c", 0)
    cls = kc.response_class(0, 10)
    topic_cls = cls.TopicProduceResponse
    partition_cls = topic_cls.PartitionProduceResponse
    leader = partition_cls.fields["current_leader"].data_class(leader_id=-1, leader_epoch=-1)
    partition = partition_cls(index=0, base_offset=7, current_leader=leader)
    obj = cls(
        throttle_time_ms=0,
        responses=[topic_cls(name="t", partition_responses=[partition])],
        node_endpoints=[],
    )
    plain = {
        "throttle_time_ms": 0,
        "responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 7}]}],
    }
    assert kc.encode_response(header, obj) == kc.encode_response(header, plain)
    led = dict(
        plain,
        responses=[
            {
                "name": "t",
                "partition_responses": [
                    {
                        "index": 0,
                        "base_offset": 7,
                        "current_leader": {"leader_id": 2, "leader_epoch": 3},
                    }
                ],
            }
        ],
    )
    assert len(kc.encode_response(header, led)) > len(kc.encode_response(header, plain))


def test_response_refuses_unknown_fields_and_wrong_types() -> None:
    header = kc.RequestHeader(12, 4, 5, "c", 0)
    with pytest.raises(ValueError, match="HeartbeatResponse has no field 'eror_code'"):
        kc.encode_response(header, {"eror_code": 0})
    with pytest.raises(TypeError, match="Heartbeat v4 response must be a dict"):
        kc.encode_response(header, kc.response_class(3, 12)())
    with pytest.raises(ValueError, match="response object is v3, the request was v4"):
        kc.encode_response(header, kc.response_class(12, 3)(error_code=0))


# -- records stay raw bytes ------------------------------------------------------------------


def test_produce_records_come_out_as_the_bytes_the_client_sent() -> None:
    batch = os.urandom(16384)
    for version in range(3, 13):
        values = {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 1000,
            "topic_data": [
                {
                    "name": "orders",
                    "partition_data": [
                        {"index": 2, "records": batch},
                        {"index": 3, "records": b"x"},
                    ],
                }
            ],
        }
        _, frame = client_request(0, version, values)
        request = kc.decode_request(kc.parse_request_header(frame), frame)
        partitions = request.topic_data[0].partition_data
        assert type(partitions[0].records) is bytes
        assert partitions[0].records == batch and partitions[1].records == b"x"


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_records_pass_through_uncopied_in_parts(version: int) -> None:
    log_bytes = memoryview(os.urandom(300_000))
    answer: dict[str, Any] = {
        "responses": [
            {
                "topic": "orders",
                "partitions": [
                    {"partition_index": 0, "high_watermark": 5, "records": log_bytes},
                    {"partition_index": 1, "high_watermark": 0, "records": b""},
                    {"partition_index": 2, "high_watermark": 0, "records": None},
                ],
            }
        ]
    }
    protocol, frame = client_request(1, version, request_values(1, version, random.Random(1)))
    header = kc.parse_request_header(frame)
    parts = kc.encode_response_parts(header, answer)
    assert any(part is log_bytes for part in parts)
    whole = b"".join(parts)
    assert whole == kc.encode_response(header, answer)
    [(_, response)] = protocol.receive_bytes(whole)
    got = response.responses[0].partitions
    assert got[0].records == log_bytes.tobytes()
    assert got[1].records == b"" and got[2].records is None
    # the handler's object is left as it was given
    assert answer["responses"][0]["partitions"][0]["records"] is log_bytes


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_records_as_file_regions_are_spliced_in_at_their_offsets(
        version: int, tmp_path: Path) -> None:
    data = os.urandom(200_000)
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        first, second = FileRegion(fd, 1000, 150_000), FileRegion(fd, 7, 20_000)
        answer: dict[str, Any] = {"responses": [{"topic": "orders", "partitions": [
            {"partition_index": 0, "high_watermark": 5, "records": first},
            {"partition_index": 1, "high_watermark": 0, "records": b"inline"},
            {"partition_index": 2, "high_watermark": 9, "records": second}]}]}
        protocol, frame = client_request(1, version, request_values(1, version,
                                                                    random.Random(1)))
        header = kc.parse_request_header(frame)
        parts = kc.encode_response_parts(header, answer)
        assert kc.has_regions(parts)
        with pytest.raises(TypeError, match="use encode_response_parts"):
            kc.encode_response(header, answer)
        head, regions = kc.join_parts(parts)
        assert [(r.position, r.length) for r in regions] == [(1000, 150_000), (7, 20_000)]
        # What the Processor sends: the bytes with each region's file bytes put in.
        sent = b""
        at = 0
        for region in regions:
            sent += head[at:region.at] + os.pread(region.fd, region.length, region.position)
            at = region.at
        sent += head[at:]
        assert struct.unpack_from(">i", sent)[0] == len(sent) - 4
        [(_, response)] = protocol.receive_bytes(sent)
        got = response.responses[0].partitions
        assert got[0].records == data[1000:151_000]
        assert got[1].records == b"inline"
        assert got[2].records == data[7:20_007]
    finally:
        os.close(fd)


# -- header refusals -------------------------------------------------------------------------


def _frame(
    api_key: int, version: int, correlation_id: int = 9, client_id: bytes = b"c", rest: bytes = b""
) -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + rest


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"", "request header truncated: 0 bytes, the fixed part needs 8"),
        (b"\x00\x03\x00", "request header truncated: 3 bytes, the fixed part needs 8"),
        (_frame(3, 1)[:9], "Metadata v1 request header is malformed"),
        (_frame(3, 1, client_id=b"abcdef")[:13], "Metadata v1 request header truncated: needs 16"),
        (_frame(3, 1, client_id=b"\xff\xfe"), "Metadata v1 request header is malformed"),
        (_frame(3, 9, rest=b"\x05\x01"), "Metadata v9 request header is malformed"),
        (_frame(99, 0), "unknown API key 99 (correlation id 9)"),
        (_frame(-1, 0), "unknown API key -1 (correlation id 9)"),
    ],
    ids=[
        "empty",
        "short",
        "no-client-id",
        "short-client-id",
        "bad-utf8",
        "bad-tags",
        "key-99",
        "key-minus-1",
    ],
)
def test_bad_headers_are_invalid_requests(frame: bytes, message: str) -> None:
    with pytest.raises(kc.InvalidRequestError, match=re.escape(message)) as caught:
        kc.parse_request_header(frame)
    assert caught.value.code == ErrorCode.INVALID_REQUEST == 42
    assert isinstance(caught.value, KafkaError)


@pytest.mark.parametrize(
    ("api_key", "version", "message"),
    [
        (0, 13, r"Produce v13 is not supported \(supported: v3-v12\)"),
        (0, 2, r"Produce v2 is not supported \(supported: v3-v12\)"),
        (1, 13, r"Fetch v13 is not supported \(supported: v4-v12\)"),
        (3, 13, r"Metadata v13 is not supported"),
        (21, 3, r"DeleteRecords v3 is not supported \(supported: v0-v2\)"),
        (24, 4, r"AddPartitionsToTxn v4 is not supported \(supported: v0-v3\)"),
        (68, 0, r"API ConsumerGroupHeartbeat \(68\) is not supported"),
        (71, 0, r"API GetTelemetrySubscriptions \(71\) is not supported"),
        (18, -1, r"ApiVersions v-1 is not a valid version"),
    ],
)
def test_unsupported_versions_are_refused(api_key: int, version: int, message: str) -> None:
    with pytest.raises(kc.UnsupportedVersionError, match=message) as caught:
        kc.parse_request_header(_frame(api_key, version, correlation_id=31))
    assert caught.value.code == ErrorCode.UNSUPPORTED_VERSION == 35
    assert (caught.value.api_key, caught.value.api_version) == (api_key, version)
    assert caught.value.correlation_id == 31


def test_short_or_garbled_bodies_are_invalid_and_trailing_bytes_ignored() -> None:
    sent = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 10,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"r" * 100}]}],
    }
    _, frame = client_request(0, 9, sent)
    header = kc.parse_request_header(frame)
    _, frame_v3 = client_request(0, 3, sent)
    with pytest.raises(kc.InvalidRequestError, match="Produce v3 request body is truncated"):
        # the records, the last field of v3, run past the end
        kc.decode_request(kc.parse_request_header(frame_v3), frame_v3[:-60])
    for bad in (frame[:-1], frame[: header.header_size] + b"\xff" * 3):
        with pytest.raises(
            kc.InvalidRequestError, match="Produce v9 request body is malformed or truncated"
        ):
            kc.decode_request(header, bad)
    # Kafka reads up to the last field and ignores the rest; librdkafka relies on it.
    request = kc.decode_request(header, frame + b"\x01\x00\x00")
    assert request.topic_data[0].partition_data[0].records == b"r" * 100
    rng = random.Random(3)
    for _ in range(200):
        garbage = frame[: header.header_size] + rng.randbytes(rng.randrange(40))
        try:
            kc.decode_request(header, garbage)
        except kc.InvalidRequestError:
            pass


def test_random_bytes_raise_only_the_codec_errors() -> None:
    rng = random.Random(11)
    for _ in range(2000):
        frame = rng.randbytes(rng.randrange(60))
        try:
            header = kc.parse_request_header(frame)
            kc.decode_request(header, frame)
        except (kc.InvalidRequestError, kc.UnsupportedVersionError):
            pass


def test_frames_may_be_bytearray_or_memoryview() -> None:
    _, frame = client_request(3, 12, request_values(3, 12, random.Random(5)))
    expected = kc.decode_request(kc.parse_request_header(frame), frame)
    for other in (bytearray(frame), memoryview(frame)):
        header = kc.parse_request_header(other)
        assert kc.decode_request(header, other) == expected


# -- ApiVersions ------------------------------------------------------------------------------


def test_unsupported_api_versions_version_gets_a_v0_error_listing_the_table() -> None:
    frame = _frame(18, 5, correlation_id=1234, rest=b"\x00" + b"\x05rdkc\x041.0\x00")
    header = kc.parse_request_header(frame)
    assert (header.api_version, header.correlation_id) == (5, 1234)
    with pytest.raises(kc.UnsupportedVersionError):
        kc.decode_request(header, frame)
    answer = kc.encode_api_versions_response(header)
    assert kc.encode_response(header, {"error_code": 0}) == answer
    assert struct.unpack(">ii", answer[:8]) == (len(answer) - 4, 1234)
    response = ApiVersionsResponse[0].decode(answer[8:])
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    listed = {(k.api_key, k.min_version, k.max_version) for k in response.api_keys}
    assert listed == {tuple(e) for e in ADVERTISED}


def test_kafka_python_finds_its_retry_version_in_the_v0_error() -> None:
    # kafka-python reads the error body as v0 and retries at the highest
    # ApiVersions version listed; simulate a client that tried v9.
    protocol = KafkaProtocol(client_id="kp")
    request = kc.request_class(18, 4)(client_software_name="kp", client_software_version="3")
    request.API_VERSION = 4
    protocol.send_request(request)
    frame = bytearray(protocol.send_bytes()[4:])
    frame[2:4] = struct.pack(">h", 9)  # as if the client knew v9
    header = kc.parse_request_header(bytes(frame))
    [(_, response)] = protocol.receive_bytes(kc.encode_api_versions_response(header))
    assert response.error_code == 35
    entry = next(k for k in response.api_keys if k.api_key == 18)
    assert (entry.min_version, entry.max_version) == (0, 4)


@pytest.mark.parametrize("version", range(5))
def test_api_versions_answers_each_supported_version(version: int) -> None:
    protocol, frame = client_request(18, version, request_values(18, version, random.Random(2)))
    header = kc.parse_request_header(frame)
    [(_, response)] = protocol.receive_bytes(kc.encode_api_versions_response(header))
    assert response.error_code == 0 and response.version == version
    table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert table == {e.api_key: (e.min_version, e.max_version) for e in ADVERTISED}
    assert response.tags is None and response.unknown_tags is None
    if version >= 1:  # v0 has no throttle_time_ms
        throttled = kc.encode_api_versions_response(header, throttle_time_ms=250)
        response = ApiVersionsResponse.decode(throttled[4:], version=version, header=True)
        assert response.throttle_time_ms == 250


def test_advertised_table_makes_kafka_python_write_magic_2() -> None:
    table = {e.api_key: (e.min_version, e.max_version) for e in ADVERTISED}
    broker_version = infer_broker_version_from_api_versions(table)
    assert broker_version == (3, 8)
    assert KafkaProducer.max_usable_produce_magic(broker_version) == 2
    assert table[0][1] < 13 and table[1][1] < 13
    assert 68 not in table and 71 not in table
    assert table[18][0] == 0


def test_after_warm_up_serving_generates_no_code(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    frames = {pair: client_request(*pair, request_values(*pair, rng))[1] for pair in PAIRS}
    for module, cache in (
        (kc_requests, "_header_decoders"),
        (kc_requests, "_header_decoders_by_version"),
        (kc_requests, "_request_decoders"),
        (kc_encoding, "_response_encoders"),
        (kc_encoding, "_tag_plans"),
        (kc_encoding, "_defaults_plans"),
        (kc_parts, "_records_plans"),
        (kc_api_versions, "_api_versions_bodies"),
    ):
        monkeypatch.setattr(module, cache, {})
    kc.warm_up()
    assert set(PAIRS) <= set(kc_requests._request_decoders) & set(kc_encoding._response_encoders)
    for api_key, version in PAIRS:
        request_cls, response_cls = kc_messages._MESSAGE_CLASSES[api_key]
        assert version in request_cls._VERSIONS and version in response_cls._VERSIONS

    def generate(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("codec code generated while serving")

    monkeypatch.setattr(StructField, "compiled_decode_from", generate)
    monkeypatch.setattr(StructField, "compiled_encode_into", generate)
    for (api_key, _), frame in frames.items():
        header = kc.parse_request_header(frame)
        kc.decode_request(header, frame)
        if api_key == 18:
            kc.encode_api_versions_response(header)
        kc.encode_response(header, RESPONSE_EXAMPLES[api_key])


# -- real librdkafka clients ------------------------------------------------------------------

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
needs_kcat = pytest.mark.skipif(not os.path.exists(KCAT), reason="kcat is not installed")


def _kcat_metadata(port: int) -> dict:
    result = subprocess.run(
        [KCAT, "-L", "-J", "-b", f"127.0.0.1:{port}", "-m", "10"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.mark.clients
@needs_kcat
def test_kcat_lists_metadata(codec_server: CodecServer) -> None:
    metadata = _kcat_metadata(codec_server.port)
    assert [b["id"] for b in metadata["brokers"]] == [1]
    [topic] = metadata["topics"]
    assert topic["topic"] == TOPIC
    assert [p["partition"] for p in topic["partitions"]] == [0]
    assert (18, 3) in codec_server.seen  # librdkafka 2.0 asks with the flexible v3 body


@pytest.mark.clients
@needs_kcat
def test_kcat_falls_back_to_api_versions_v0(
    codec_server: CodecServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker that only knows ApiVersions v0-v2 answers librdkafka's v3 with
    # the v0 error body; librdkafka must retry and carry on.
    narrowed = tuple(e if e.api_key != 18 else ApiVersionRange(18, 0, 2) for e in ADVERTISED)
    monkeypatch.setattr(kc_api_versions, "ADVERTISED", narrowed)
    monkeypatch.setitem(ADVERTISED_BY_KEY, 18, ApiVersionRange(18, 0, 2))
    monkeypatch.setattr(kc_api_versions, "_api_versions_bodies", {})
    metadata = _kcat_metadata(codec_server.port)
    assert metadata["topics"][0]["topic"] == TOPIC
    versions = [v for k, v in codec_server.seen if k == 18]
    assert versions[0] == 3 and 0 in versions[1:]


@pytest.mark.clients
def test_confluent_admin_client_lists_topics(codec_server: CodecServer) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{codec_server.port}"})
    metadata = admin.list_topics(timeout=15)
    assert list(metadata.brokers) == [1]
    assert metadata.cluster_id == "codec-cluster"
    assert list(metadata.topics[TOPIC].partitions) == [0]
    metadata_versions = {v for k, v in codec_server.seen if k == 3}
    assert max(metadata_versions) >= 9  # a flexible Metadata version was used


@pytest.mark.clients
def test_kafka_python_client_reads_metadata(codec_server: CodecServer) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{codec_server.port}", request_timeout_ms=10_000
    )
    try:
        assert TOPIC in consumer.topics()
        assert consumer.config["api_version"] >= (2, 0)
    finally:
        consumer.close()
    assert (18, 4) in codec_server.seen


def _magic_2_batches_stored(codec_server: CodecServer) -> None:
    assert codec_server.batches and all(batch[16] == 2 for batch in codec_server.batches)


@pytest.mark.clients
@needs_kcat
def test_kcat_produces_and_consumes_through_the_codec(codec_server: CodecServer) -> None:
    broker = f"127.0.0.1:{codec_server.port}"
    produced = subprocess.run(
        [KCAT, "-P", "-b", broker, "-t", TOPIC, "-p", "0", "-K", ":"],
        input="k1:one\nk2:two\nk3:three\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    assert codec_server.next_offset == 3
    _magic_2_batches_stored(codec_server)
    consumed = subprocess.run(
        [
            KCAT,
            "-C",
            "-b",
            broker,
            "-t",
            TOPIC,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o %k %s\\n",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["0 k1 one", "1 k2 two", "2 k3 three"]
    assert {k for k, _ in codec_server.seen} >= {0, 1, 2}


@pytest.mark.clients
def test_confluent_kafka_produces_and_consumes_through_the_codec(codec_server: CodecServer) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = f"127.0.0.1:{codec_server.port}"
    producer = Producer(
        {
            "bootstrap.servers": broker,
            "enable.idempotence": True,
            "compression.type": "lz4",
            "linger.ms": 5,
        }
    )
    delivered: list[tuple[Any, Any]] = []
    for i in range(200):
        producer.produce(
            TOPIC,
            value=f"v{i}".encode(),
            key=f"k{i}".encode(),
            partition=0,
            headers=[("h", str(i).encode())],
            on_delivery=lambda err, msg: delivered.append((err, msg.offset())),
        )
    assert producer.flush(20) == 0
    assert [err for err, _ in delivered if err is not None] == []
    assert sorted(offset for _, offset in delivered) == list(range(200))
    _magic_2_batches_stored(codec_server)

    consumer = Consumer(
        {
            "bootstrap.servers": broker,
            "group.id": "codec-test",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[Any, ...]] = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, f"stalled after {len(got)} messages"
            error = message.error()
            if error is not None:
                assert error.code() == -191, error  # _PARTITION_EOF
                if len(got) == 200:
                    break
                continue
            got.append((message.offset(), message.key(), message.value(), message.headers()))
    finally:
        consumer.close()
    assert got == [
        (i, f"k{i}".encode(), f"v{i}".encode(), [("h", str(i).encode())]) for i in range(200)
    ]
    fetch_versions = {v for k, v in codec_server.seen if k == 1}
    assert max(fetch_versions) == 12  # the flexible Fetch, with its response tags section


@pytest.mark.clients
def test_kafka_python_produces_and_consumes_through_the_codec(codec_server: CodecServer) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    broker = f"127.0.0.1:{codec_server.port}"
    producer = KafkaProducer(bootstrap_servers=broker, compression_type="gzip", linger_ms=5)
    try:
        futures = [
            producer.send(
                TOPIC,
                key=f"k{i}".encode(),
                value=f"v{i}".encode(),
                partition=0,
                headers=[("h", str(i).encode())],
            )
            for i in range(100)
        ]
        offsets = [future.get(timeout=20).offset for future in futures]
    finally:
        producer.close(timeout=5)
    assert offsets == list(range(100))
    assert 22 in {k for k, _ in codec_server.seen}  # idempotence is on by default: InitProducerId
    _magic_2_batches_stored(codec_server)

    consumer = KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False)
    consumer.assign([TopicPartition(TOPIC, 0)])
    consumer.seek_to_beginning()
    got: list[tuple[int, bytes, bytes, list]] = []
    try:
        while len(got) < 100:
            batch = consumer.poll(timeout_ms=10_000)
            assert batch, f"stalled after {len(got)} records"
            for records in batch.values():
                got.extend((r.offset, r.key, r.value, list(r.headers)) for r in records)
    finally:
        consumer.close()
    assert got == [
        (i, f"k{i}".encode(), f"v{i}".encode(), [("h", str(i).encode())]) for i in range(100)
    ]


def _header_by_decoder(frame: bytes) -> kc.RequestHeader | str:
    """What the compiled kafka.protocol header decoder makes of a frame (or its error)."""
    from wire.kafka_codec import requests as kreq

    saved = dict(kreq._flexible_by_version)
    kreq._flexible_by_version.clear()  # the struct path off: every header by the decoder
    try:
        return kc.parse_request_header(frame)
    except KafkaError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        kreq._flexible_by_version.update(saved)


def _header_by_struct(frame: bytes) -> kc.RequestHeader | str:
    try:
        return kc.parse_request_header(frame)
    except KafkaError as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("api_key,version", [(0, 3), (0, 8), (0, 9), (0, 12), (1, 4), (1, 11),
                                             (1, 12), (3, 9), (18, 3), (18, 0)])
def test_request_headers_read_with_struct_as_the_decoder_reads_them(api_key: int,
                                                                    version: int) -> None:
    """parse_request_header reads common headers itself: the same header (or error) as
    kafka.protocol's compiled decoder, for whole, cut and garbled frames."""
    rng = random.Random(api_key * 100 + version)
    kc.parse_request_header(client_request(api_key, version, request_values(
        api_key, version, rng))[1])  # the version seen once: the struct path is on for it
    frames = []
    for client_id in ("codec-test-é", "", None):
        cls = kc.request_class(api_key, version)
        protocol = KafkaProtocol(client_id=client_id)
        protocol.send_request(to_library(cls._struct, cls,
                                         request_values(api_key, version, rng)))
        frames.append(bytes(protocol.send_bytes())[4:])
    cases = []
    for frame in frames:
        cases.append(frame)
        cases += [frame[:n] for n in range(0, min(len(frame), 24))]
        for _ in range(40):  # one byte of the header part changed
            at = rng.randrange(8, min(len(frame), 24))
            cases.append(frame[:at] + bytes([rng.randrange(256)]) + frame[at + 1:])
        cases.append(frame[:8] + b"\x00\x02\xff\xfe" + frame[8:])  # not UTF-8
        cases.append(frame[:8] + b"\xff\xfe" + frame[8:])  # a negative length not -1
        cases.append(frame[:8] + b"\x7f\xff" + frame[8:])  # a length past the end
    for case in cases:
        assert _header_by_struct(case) == _header_by_decoder(case), case[:24]
    from wire.kafka_codec import requests as kreq

    assert (api_key, version) in kreq._flexible_by_version  # the struct path was taken


# ------------------------------------------------------------ topic ids (KIP-516)
TOPIC_ID = uuid.UUID("7e7bbe72-63f7-13db-5cf0-d7cc99286f7e")


@pytest.mark.parametrize(("api_key", "version", "request_", "response"), [
    (3, 12, {"topics": [{"name": None, "topic_id": TOPIC_ID}],
             "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
     {"throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": -1,
      "topics": [{"error_code": 100, "name": None, "topic_id": TOPIC_ID,
                  "is_internal": False, "partitions": []}]}),
    (20, 6, {"topics": [{"name": None, "topic_id": TOPIC_ID}, {"name": "t", "topic_id": None}],
             "timeout_ms": 5000},
     {"throttle_time_ms": 0, "responses": [
         {"name": None, "topic_id": TOPIC_ID, "error_code": 100, "error_message": "no"},
         {"name": "t", "topic_id": TOPIC_ID, "error_code": 0, "error_message": None}]}),
    (19, 7, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                         "assignments": [], "configs": []}],
             "timeout_ms": 5000, "validate_only": False},
     {"throttle_time_ms": 0, "topics": [
         {"name": "t", "topic_id": TOPIC_ID, "error_code": 0, "error_message": None,
          "num_partitions": 1, "replication_factor": 1, "configs": None},
         {"name": "u", "topic_id": None, "error_code": 36, "error_message": "exists",
          "num_partitions": -1, "replication_factor": -1, "configs": None}]}),
], ids=["metadata-v12", "delete-topics-v6", "create-topics-v7"])
def test_topic_ids_and_null_names_cross_the_codec_both_ways(
        api_key: int, version: int, request_: dict, response: dict) -> None:
    """A client's request naming topics by id decodes here as sent; the answers with ids
    and null names (an unknown id's) read back in kafka-python as written."""
    protocol, frame = client_request(api_key, version, request_)
    header = kc.parse_request_header(frame)
    decoded = kc.decode_request(header, frame)
    if api_key != 19:  # CreateTopics names its topics by name only
        assert [(t.name, t.topic_id) for t in decoded.topics] == [
            (t["name"], t["topic_id"]) for t in request_["topics"]]
    [(_, answer)] = protocol.receive_bytes(kc.encode_response(header, response))
    rows = answer.topics if api_key != 20 else answer.responses
    wanted = response["topics"] if api_key != 20 else response["responses"]
    assert [(r.name, r.topic_id, r.error_code) for r in rows] == [
        (w["name"], w["topic_id"], w["error_code"]) for w in wanted]


def test_the_error_answer_of_alter_user_scram_names_each_user_once() -> None:
    """Kafka's AlterUserScramCredentialsRequest.getErrorResponse answers a Set of the
    users named, sorted: a user both deleted and upserted gets one result, not two."""
    values = request_values(51, 0, random.Random(51))
    values["deletions"] = [{"name": "bob", "mechanism": 1}, {"name": "al", "mechanism": 2}]
    values["upsertions"] = [dict(values["upsertions"][0], name="bob")]
    _, response, _ = _error_answer(51, 0, values)
    assert [r.user for r in response.results] == ["al", "bob"]
    assert {r.error_code for r in response.results} == {int(ErrorCode.UNKNOWN_SERVER_ERROR)}
