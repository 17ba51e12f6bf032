"""Produce and Fetch hand the handler their response's error codes (the errors metric):
the same codes a walk of the response finds."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from actors.apis.base import HandlerContext, Respond
from actors.apis.fetch import handle_fetch
from actors.apis.produce import handle_produce
from actors.metrics import error_codes
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.topology import Topology
from tests.broker.rawclient import record_batch
from wire.broker_messages import TopicEntry
from wire.errors import ErrorCode
from wire.kafka_codec.hot import (
    FetchPartition,
    FetchRequestData,
    FetchTopic,
    PartitionProduceData,
    ProduceRequestData,
    TopicProduceData,
)


def _context() -> HandlerContext:
    ctx = HandlerContext(Topology("n", 1, 1, 1, 1, 1), Config(), 1, "127.0.0.1", 9092,
                         "cluster", 0, clock=ManualClock())
    ctx.topics = {"t": TopicEntry(2, {})}
    return ctx


def _answer(gen: Any) -> Respond:
    """Run an API generator that calls no actor (every partition refused) to its answer."""
    try:
        calls = next(gen)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    raise AssertionError(f"expected no calls, got {calls}")


def test_produce_refusals_are_the_codes_of_its_response() -> None:
    req = ProduceRequestData(9, None, 1, 1000, [
        TopicProduceData("t", [PartitionProduceData(5, b"x" * 70),
                               PartitionProduceData(0, b""),
                               PartitionProduceData(5, b"x" * 70)]),  # named twice
        TopicProduceData("nope", [PartitionProduceData(0, b"abc")]),
    ])
    respond = _answer(handle_produce(_context(), SimpleNamespace(api_version=9, client_id="c"),
                                     req))
    assert respond.error_codes is not None
    assert Counter(respond.error_codes) == Counter(error_codes(respond.data))
    assert Counter(respond.error_codes) == {int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION): 3,
                                            int(ErrorCode.INVALID_RECORD): 1}


def test_produce_to_a_coordinator_topic_is_refused_after_the_partition_and_records() -> None:
    """A client's batch for __transaction_state (or __consumer_offsets) is
    INVALID_TOPIC_EXCEPTION, checked after the partition's range and the records, in
    Kafka's order; the admin tools' client id is let through to the append."""
    ctx = _context()
    ctx.topics["__transaction_state"] = TopicEntry(2, {})
    batch = record_batch([(b"k", b"v")])
    old_magic = batch[:16] + b"\x01" + batch[17:]

    def produce(client_id: str, *partitions: tuple[int, bytes]) -> Any:
        req = ProduceRequestData(9, None, 1, 1000, [TopicProduceData(
            "__transaction_state", [PartitionProduceData(i, r) for i, r in partitions])])
        return handle_produce(ctx, SimpleNamespace(api_version=9, client_id=client_id), req)

    respond = _answer(produce("c", (0, batch), (3, batch), (1, old_magic)))
    assert [p["error_code"] for p in respond.data["responses"][0]["partition_responses"]] == [
        ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_RECORD]
    admin = produce("__admin_client", (0, batch))
    assert next(admin), "the admin client's batch goes to the shard"


def test_fetch_refusals_are_the_codes_of_its_response() -> None:
    req = FetchRequestData(12)
    req.topics = [
        FetchTopic("t", [FetchPartition(7, -1, 0, -1, -1, 100),
                         FetchPartition(7, -1, 0, -1, -1, 100)]),  # named twice
        FetchTopic("nope", [FetchPartition(0, -1, 0, -1, -1, 100)]),
    ]
    respond = _answer(handle_fetch(_context(), SimpleNamespace(api_version=12), req))
    assert respond.error_codes is not None
    assert Counter(respond.error_codes) == Counter(error_codes(respond.data))
    assert Counter(respond.error_codes) == {int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION): 3}


def test_an_old_fetch_of_a_coordinator_topic_is_not_refused_for_a_broker_wide_zstd() -> None:
    """Fetch below v10 of a zstd topic is UNSUPPORTED_COMPRESSION_TYPE (Kafka's rule), the
    topic's config else the broker's; the coordinators' topics are never re-encoded, so a
    broker-wide zstd does not refuse them (their reads go to the shard)."""
    ctx = HandlerContext(Topology("n", 1, 1, 1, 1, 1), Config({"compression.type": "zstd"}),
                         1, "127.0.0.1", 9092, "cluster", 0, clock=ManualClock())
    ctx.topics = {"t": TopicEntry(1, {}), "__consumer_offsets": TopicEntry(1, {})}
    for topic, refused in (("t", True), ("__consumer_offsets", False)):
        req = FetchRequestData(9)
        req.topics = [FetchTopic(topic, [FetchPartition(0, -1, 0, -1, -1, 100)])]
        gen = handle_fetch(ctx, SimpleNamespace(api_version=9), req)
        try:
            next(gen)
        except StopIteration as stop:
            assert refused, topic
            assert stop.value.error_codes == [int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)]
        else:
            assert not refused, f"{topic} was not refused"
