"""The struct-level Produce/Fetch codec against kafka.protocol, at every advertised version.

Requests are encoded by kafka-python's client side from schema-driven random
values (tests/wire/test_kafka_codec.py's samples, every field non-default,
tags included) and decoded both ways; each field the hot path reads must
equal kafka.protocol's. Responses are encoded both ways from the same dicts
and must be the same bytes, and the hot frame reads back in kafka-python.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from tests.wire.test_kafka_codec import (
    client_request,
    request_values,
    response_values,
)
from wire import kafka_codec as kc
from wire.api_versions import ADVERTISED_BY_KEY
from wire.file_region import FileRegion
from wire.kafka_codec import hot

HOT_PAIRS = [(k, v) for k in (0, 1)
             for v in range(ADVERTISED_BY_KEY[k].min_version, ADVERTISED_BY_KEY[k].max_version + 1)]
HOT_IDS = [f"{kc.api_name(k)}-v{v}" for k, v in HOT_PAIRS]


def test_the_hot_path_covers_exactly_the_advertised_versions() -> None:
    for key, covered in ((0, hot.PRODUCE_VERSIONS), (1, hot.FETCH_VERSIONS)):
        entry = ADVERTISED_BY_KEY[key]
        assert (covered.start, covered.stop) == (entry.min_version, entry.max_version + 1)


def assert_same_fields(got: Any, want: Any, where: str) -> None:
    """Every field of a hot request object equals kafka.protocol's (nested lists too)."""
    for name in type(got).__slots__:
        if name == "version":
            continue
        g, w = getattr(got, name), getattr(want, name)
        if isinstance(g, list) and g and isinstance(g[0], hot._Record):
            assert len(g) == len(w), f"{where}.{name}"
            for i, (gi, wi) in enumerate(zip(g, w, strict=True)):
                assert_same_fields(gi, wi, f"{where}.{name}[{i}]")
        else:
            assert g == w, f"{where}.{name}: {g!r} != {w!r}"


@pytest.mark.parametrize(("api_key", "version"), HOT_PAIRS, ids=HOT_IDS)
def test_requests_decode_as_kafka_protocol_decodes_them(api_key: int, version: int) -> None:
    for seed in range(25):
        rng = random.Random(seed * 1000 + api_key * 100 + version)
        values = request_values(api_key, version, rng)
        if seed % 5 == 0:  # empty arrays and null records too
            key = "topic_data" if api_key == 0 else "topics"
            values[key] = values[key][:seed % 2]
        _, frame = client_request(api_key, version, values)
        header = kc.parse_request_header(frame)
        want = kc.decode_request(header, frame)
        got = hot.decode_hot_request(header, frame)
        assert got is not None and got.version == version
        assert_same_fields(got, want, f"{kc.api_name(api_key)} v{version}")
        for other in (bytearray(frame), memoryview(frame)):
            assert hot.decode_hot_request(header, other) == got


@pytest.mark.parametrize(("api_key", "version"), HOT_PAIRS, ids=HOT_IDS)
def test_truncated_requests_are_refused_as_kafka_protocol_refuses_them(
        api_key: int, version: int) -> None:
    rng = random.Random(api_key * 100 + version)
    _, frame = client_request(api_key, version, request_values(api_key, version, rng))
    header = kc.parse_request_header(frame)
    for end in range(header.header_size, len(frame)):
        cut = frame[:end]
        try:
            want = kc.decode_request(header, cut)
        except kc.InvalidRequestError as exc:
            with pytest.raises(kc.InvalidRequestError) as info:
                hot.decode_hot_request(header, cut)
            # the same error and sentence (truncated, or malformed or truncated, may differ)
            prefix = f"{kc.api_name(api_key)} v{version} request body is "
            assert str(info.value).startswith(prefix) and str(exc).startswith(prefix), end
            assert "truncated" in str(info.value)
        else:
            got = hot.decode_hot_request(header, cut)
            assert_same_fields(got, want, f"cut at {end}")


@pytest.mark.parametrize("version", range(ADVERTISED_BY_KEY[0].min_version,
                                          ADVERTISED_BY_KEY[0].max_version + 1))
def test_produce_records_lengths_of_every_varint_size_decode_as_kafka_protocol_does(
        version: int) -> None:
    """Records lengths around 127 and 16383 (a compact length of one, two, three bytes):
    the fields of kafka.protocol, and each frame cut inside the length refused."""
    rng = random.Random(version)
    for size in (126, 127, 128, 200, 16382, 16383, 16384, 20000):
        values = request_values(0, version, rng)
        values["transactional_id"] = None if size % 2 else "txn"
        values["topic_data"] = [{**values["topic_data"][0], "partition_data": [
            {"index": 3, "records": bytes(rng.randrange(256) for _ in range(size))}]}]
        _, frame = client_request(0, version, values)
        header = kc.parse_request_header(frame)
        got = hot.decode_hot_request(header, frame)
        assert_same_fields(got, kc.decode_request(header, frame), f"records of {size} bytes")
        records_at = bytes(frame).index(got.topic_data[0].partition_data[0].records)
        for end in range(records_at - 4, records_at):  # in the length (and before it)
            with pytest.raises(kc.InvalidRequestError):
                hot.decode_hot_request(header, frame[:end])


def test_garbage_bodies_raise_only_invalid_request() -> None:
    rng = random.Random(7)
    for api_key, version in HOT_PAIRS:
        _, frame = client_request(api_key, version, request_values(api_key, version, rng))
        header = kc.parse_request_header(frame)
        for _ in range(200):
            body = rng.randbytes(rng.randrange(80))
            try:
                hot.decode_hot_request(header, frame[:header.header_size] + body)
            except kc.InvalidRequestError:
                pass


def test_other_apis_and_versions_are_left_to_kafka_protocol() -> None:
    assert hot.decode_hot_request(kc.RequestHeader(3, 12, 1, None, 10), b"") is None
    assert hot.decode_hot_request(kc.RequestHeader(0, 13, 1, None, 10), b"") is None
    assert hot.encode_hot_response(kc.RequestHeader(3, 12, 1, None, 10), {}) is None
    header = kc.RequestHeader(0, 9, 1, None, 10)
    assert hot.encode_hot_response(header, {"responses": [], "no_such_key": 1}) is None
    assert hot.encode_hot_response(header, kc.response_class(0, 9)()) is None


def _reference(header: kc.RequestHeader, values: dict) -> tuple[bytes, list[Any]]:
    return kc.join_parts(kc.encode_response_parts(header, values))


@pytest.mark.parametrize(("api_key", "version"), HOT_PAIRS, ids=HOT_IDS)
def test_responses_are_the_bytes_kafka_protocol_writes(api_key: int, version: int) -> None:
    for seed in range(25):
        rng = random.Random(seed * 1000 + api_key * 100 + version)
        protocol, frame = client_request(api_key, version, request_values(api_key, version, rng))
        header = kc.parse_request_header(frame)
        # every field non-default (tags written), then tags holding defaults (left out)
        values = response_values(api_key, version, rng, tags=seed % 2 == 0)
        got = hot.encode_hot_response(header, values)
        assert got is not None, values
        assert got == _reference(header, values)
        [(_, response)] = protocol.receive_bytes(got[0])
        assert response.version == version


@pytest.mark.parametrize(("api_key", "version"), HOT_PAIRS, ids=HOT_IDS)
def test_what_the_handlers_leave_out_takes_the_schema_default(api_key: int, version: int) -> None:
    _, frame = client_request(api_key, version, request_values(api_key, version,
                                                                 random.Random(1)))
    header = kc.parse_request_header(frame)
    if api_key == 0:
        cases: list[dict] = [
            {},
            {"responses": [{"name": "t", "partition_responses": [{"index": 0}]}]},
            {"responses": [{"name": "t", "partition_responses": [
                {"index": 1, "error_code": 6, "base_offset": -1, "error_message": "x",
                 "current_leader": {"leader_id": 2, "leader_epoch": 5}}]}],
             "throttle_time_ms": 3,
             "node_endpoints": [{"node_id": 2, "host": "h", "port": 9, "rack": None}]},
        ]
    else:
        cases = [
            {},
            {"responses": [{"topic": "t", "partitions": [{"partition_index": 0}]}]},
            {"responses": [{"topic": "t", "partitions": [
                {"partition_index": 0, "high_watermark": 4, "records": b"abc",
                 "aborted_transactions": [{"producer_id": 7, "first_offset": 2}],
                 "diverging_epoch": {"epoch": 3, "end_offset": 10},
                 "current_leader": {"leader_id": -1, "leader_epoch": -1},
                 "snapshot_id": None},
                {"partition_index": 1, "records": None, "aborted_transactions": []}]}]},
        ]
    for values in cases:
        got = hot.encode_hot_response(header, values)
        assert got == _reference(header, values), values


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_regions_are_left_at_the_offsets_join_parts_gives(version: int,
                                                                tmp_path: Path) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(os.urandom(10_000))
    fd = os.open(path, os.O_RDONLY)
    try:
        values = {"responses": [{"topic": "orders", "partitions": [
            {"partition_index": 0, "high_watermark": 5, "records": FileRegion(fd, 100, 5000)},
            {"partition_index": 1, "high_watermark": 0, "records": memoryview(b"inline")},
            {"partition_index": 2, "high_watermark": 9, "records": FileRegion(fd, 7, 900)}]}]}
        _, frame = client_request(1, version, request_values(1, version, random.Random(1)))
        header = kc.parse_request_header(frame)
        got = hot.encode_hot_response(header, values)
        assert got == _reference(header, values)
        assert got is not None and [r.length for r in got[1]] == [5000, 900]
    finally:
        os.close(fd)


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_region_lengths_of_every_varint_size_are_written_as_join_parts_writes(
        version: int, tmp_path: Path) -> None:
    """Region lengths around 127 and 16383 (a compact length of one, two, three bytes)."""
    path = tmp_path / "segment.log"
    path.write_bytes(os.urandom(40_000))
    fd = os.open(path, os.O_RDONLY)
    lengths = [0, 1, 125, 126, 127, 128, 16381, 16382, 16383, 16384, 30_000]
    try:
        values = {"responses": [{"topic": "orders", "partitions": [
            {"partition_index": i, "high_watermark": 5, "records": FileRegion(fd, 3, n)}
            for i, n in enumerate(lengths)]}]}
        _, frame = client_request(1, version, request_values(1, version, random.Random(2)))
        header = kc.parse_request_header(frame)
        got = hot.encode_hot_response(header, values)
        assert got == _reference(header, values)
        assert got is not None and [r.length for r in got[1]] == lengths
    finally:
        os.close(fd)


@pytest.mark.parametrize("version", range(ADVERTISED_BY_KEY[0].min_version,
                                          ADVERTISED_BY_KEY[0].max_version + 1))
def test_produce_lengths_past_one_varint_byte_are_written_as_kafka_protocol_writes(
        version: int) -> None:
    """Topic names and partition counts around 127 (where a compact length takes a
    second byte): the same bytes as kafka.protocol."""
    rng = random.Random(version)
    _, frame = client_request(0, version, request_values(0, version, rng))
    header = kc.parse_request_header(frame)
    for size in (125, 126, 127, 128, 200):
        values = {"throttle_time_ms": 3, "responses": [{
            "name": "t" * size,
            "partition_responses": [
                {"index": i, "error_code": 0, "base_offset": i * 7, "log_append_time_ms": -1,
                 "log_start_offset": 0, "error_message": None} for i in range(size)]}]}
        got = hot.encode_hot_response(header, values)
        assert got is not None
        assert got == _reference(header, values)
