"""`actorlog bench codec`: one-record Produce and Fetch codec cost, hot path vs kafka.protocol.

Each case decodes a request frame as kafka-python's client writes it and
encodes the response dict the handler builds (one partition, one ~180-byte
batch), once with wire.kafka_codec.hot and once with the kafka.protocol path
(decode_request, encode_response / encode_response_parts + join_parts), in
alternating timed blocks. The ratio is kafka.protocol's time over the hot
path's: how many times cheaper the hot path makes the codec part of a request.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from kafka.protocol.parser import KafkaProtocol

from bench.contract import min_median_max as _spread
from wire import kafka_codec as kc

BENCH_NAME = "codec"
CASES = (("produce", 0, 7), ("produce", 0, 9), ("fetch", 1, 11), ("fetch", 1, 12))
RATIO_KEYS = tuple(f"{name}_v{version}_hot_vs_kafka_protocol" for name, _k, version in CASES)

_BATCH = bytes(181)  # a one-record v2 batch with a 100-byte value is about this long


def _request_frame(api_key: int, version: int) -> bytes:
    if api_key == 0:
        values: dict[str, Any] = {
            "transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": "bench", "partition_data": [{"index": 0,
                                                                 "records": _BATCH}]}]}
    else:
        values = {
            "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "bench", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 10,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1048576}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    cls = kc.request_class(api_key, version)
    protocol = KafkaProtocol(client_id="bench")
    protocol.send_request(cls(**_nested(cls, values)))
    return bytes(protocol.send_bytes())[4:]


def _nested(cls: Any, values: dict[str, Any]) -> dict[str, Any]:
    """kafka.protocol objects for the nested dicts (the client's own constructors)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        field = cls._struct.fields[name]
        if field.is_struct_array():
            value = [field.data_class(**_nested(field.data_class, v)) for v in value]
        out[name] = value
    return out


def _response(api_key: int) -> dict[str, Any]:
    if api_key == 0:
        return {"throttle_time_ms": 0, "responses": [{"name": "bench", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time_ms": -1,
             "log_start_offset": 0, "error_message": None}]}]}
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "bench", "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": 11,
            "last_stable_offset": 11, "log_start_offset": 0, "aborted_transactions": None,
            "preferred_read_replica": -1, "records": _BATCH}]}]}


def _pair(api_key: int, version: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    frame = _request_frame(api_key, version)
    header = kc.parse_request_header(frame)
    response = _response(api_key)

    def reference() -> Any:
        kc.decode_request(header, frame)
        if api_key == 1:
            return kc.join_parts(kc.encode_response_parts(header, response))
        return kc.encode_response(header, response)

    def hot() -> Any:
        kc.decode_hot_request(header, frame)
        return kc.encode_hot_response(header, response)

    got = hot()
    want = reference()
    if got is None or got[0] != (want[0] if api_key == 1 else want):
        raise click.ClickException(f"the hot path wrote other bytes for {api_key} v{version}")
    return reference, hot


def run_bench(count: int, repeat: int) -> dict[str, Any]:
    kc.warm_up()
    results: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    clock = time.perf_counter
    block = 500
    for name, api_key, version in CASES:
        reference, hot = _pair(api_key, version)
        ref_us: list[float] = []
        hot_us: list[float] = []
        for _ in range(repeat):
            ref_s = hot_s = 0.0
            for _ in range(max(1, count // block)):
                start = clock()
                for _ in range(block):
                    reference()
                middle = clock()
                for _ in range(block):
                    hot()
                end = clock()
                ref_s += middle - start
                hot_s += end - middle
            done = max(1, count // block) * block
            ref_us.append(ref_s / done * 1e6)
            hot_us.append(hot_s / done * 1e6)
        key = f"{name}_v{version}"
        results[f"{key}_kafka_protocol_us"] = _spread(ref_us)
        results[f"{key}_hot_us"] = _spread(hot_us)
        ratios[f"{key}_hot_vs_kafka_protocol"] = statistics.median(
            r / h for r, h in zip(ref_us, hot_us, strict=True))
    return {"bench": BENCH_NAME, "config": {"count": count, "repeat": repeat},
            "results": results, "ratios": ratios}


@click.command(name=BENCH_NAME)
@click.option("--count", default=20_000, show_default=True,
              help="requests per case per repetition")
@click.option("--repeat", default=5, show_default=True, help="timed repetitions")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="write the report as JSON here")
def command(count: int, repeat: int, json_path: str | None) -> None:
    """Produce/Fetch decode + encode: the struct-level hot path against kafka.protocol."""
    report = run_bench(count, repeat)
    for name, _api_key, version in CASES:
        key = f"{name}_v{version}"
        ref = report["results"][f"{key}_kafka_protocol_us"]
        fast = report["results"][f"{key}_hot_us"]
        click.echo(f"{key:<12} kafka.protocol {ref['min']:6.1f} / {ref['median']:6.1f} / "
                   f"{ref['max']:6.1f} us   hot {fast['min']:6.1f} / {fast['median']:6.1f} / "
                   f"{fast['max']:6.1f} us   (min / median / max)")
    for name, value in report["ratios"].items():
        click.echo(f"{name}: {value:.2f}")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
