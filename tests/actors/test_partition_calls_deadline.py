"""The partition-shard calls besides a fetch's and a ListOffsets' answer by their deadlines
when a shard's process does not answer (num.processes > 1: paused, or restarted and not
ready yet): an OffsetForLeaderEpoch and a DescribeProducers naming partitions of both
processes answer the silent one's NOT_LEADER_OR_FOLLOWER by PROMPT_DEADLINE_MS and the
other's as its shard said; a DeleteRecords answers the silent one's REQUEST_TIMED_OUT by
its timeout_ms plus the grace; a DescribeLogDirs leaves the silent one's partitions out of
the dir. The connection stays open, nothing is abandoned.

The two-Node harness of test_fetch_deadline.py: process 0 a real RequestHandler and live
stand-in shards, process 1 a stand-in shard that keeps every call (``held``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.apis.base import PROMPT_DEADLINE_MS
from actors.apis.produce import PRODUCE_DEADLINE_GRACE_MS
from tests.actors.test_fetch_deadline import (
    EPOCH_END,
    NOT_LEADER,
    PARTITION_SIZE,
    Handler,
)

TIMED_OUT = 7  # REQUEST_TIMED_OUT
OFFSET_FOR_LEADER_EPOCH, DESCRIBE_PRODUCERS, DELETE_RECORDS, DESCRIBE_LOG_DIRS = 23, 61, 21, 35
# a loaded host's slack past a deadline
SLACK_MS = 3_000



@pytest.fixture
def handler(tmp_path: Path) -> Iterator[Handler]:
    """Process 1's stand-in shard keeps every call."""
    h = Handler(tmp_path, held_shard=True)
    yield h
    h.close()


def _waited_ms(sent: int, at: int) -> float:
    return (at - sent) / 1e6


def _no_abandon(handler: Handler, timed_out: int = 1) -> None:
    metrics = handler.node.metrics
    assert metrics.get("internal_calls_timed_out") == timed_out
    assert metrics.get("requests_abandoned") == 0


def test_offset_for_leader_epoch_answers_the_silent_process_not_leader_by_its_deadline(
        handler: Handler) -> None:
    own, held = handler.own_partition, handler.partition
    sent, protocol = handler.request(1, OFFSET_FOR_LEADER_EPOCH, 3, {
        "replica_id": -1, "topics": [{"topic": "t", "partitions": [
            {"partition": p, "current_leader_epoch": -1, "leader_epoch": 0}
            for p in (held, own)]}]})
    response, at = handler.response(1, protocol)
    rows = {p.partition: p for p in response.topics[0].partitions}
    assert (rows[own].error_code, rows[own].end_offset) == (0, EPOCH_END), rows[own]
    assert (rows[held].error_code, rows[held].end_offset) == (NOT_LEADER, -1), rows[held]
    waited_ms = _waited_ms(sent, at)
    assert PROMPT_DEADLINE_MS <= waited_ms < PROMPT_DEADLINE_MS + SLACK_MS, waited_ms
    _no_abandon(handler)
    assert handler.node.metrics.get("processes_marked_silent") == 1


def test_describe_producers_answers_the_silent_process_not_leader_by_its_deadline(
        handler: Handler) -> None:
    own, held = handler.own_partition, handler.partition
    sent, protocol = handler.request(2, DESCRIBE_PRODUCERS, 0, {
        "topics": [{"name": "t", "partition_indexes": [held, own]}]})
    response, at = handler.response(2, protocol)
    rows = {p.partition_index: p for p in response.topics[0].partitions}
    assert (rows[own].error_code, rows[own].active_producers) == (0, []), rows[own]
    assert rows[held].error_code == NOT_LEADER, rows[held]
    waited_ms = _waited_ms(sent, at)
    assert PROMPT_DEADLINE_MS <= waited_ms < PROMPT_DEADLINE_MS + SLACK_MS, waited_ms
    _no_abandon(handler)
    assert handler.node.metrics.get("processes_marked_silent") == 1


def test_delete_records_answers_the_silent_process_timed_out_past_its_timeout(
        handler: Handler) -> None:
    """By timeout_ms plus the grace (1.3 s), before the abandon time (the call's wait,
    300 ms, plus twice request.timeout.ms: 1.5 s here, the connection then closed); the
    process is not taken as silent (a shard waiting for its followers may rightly take
    that long)."""
    own, held = handler.own_partition, handler.partition
    sent, protocol = handler.request(3, DELETE_RECORDS, 1, {
        "topics": [{"name": "t", "partitions": [{"partition_index": p, "offset": 5}
                                                 for p in (held, own)]}],
        "timeout_ms": 300})
    response, at = handler.response(3, protocol)
    rows = {p.partition_index: p for p in response.topics[0].partitions}
    assert (rows[own].error_code, rows[own].low_watermark) == (0, 5), rows[own]
    assert (rows[held].error_code, rows[held].low_watermark) == (TIMED_OUT, -1), rows[held]
    waited_ms = _waited_ms(sent, at)
    deadline = 300 + PRODUCE_DEADLINE_GRACE_MS
    assert deadline <= waited_ms < deadline + SLACK_MS, waited_ms
    _no_abandon(handler)
    assert handler.node.metrics.get("processes_marked_silent") == 0


def test_describe_log_dirs_leaves_the_silent_process_partitions_out(handler: Handler) -> None:
    sent, protocol = handler.request(4, DESCRIBE_LOG_DIRS, 1, {"topics": None})
    response, at = handler.response(4, protocol)
    [result] = response.results
    assert result.error_code == 0
    assert result.log_dir == "/stand-in/log-dir"
    [topic] = result.topics
    partitions = {p.partition_index: p.partition_size for p in topic.partitions}
    assert handler.own_partition in partitions and handler.partition not in partitions
    assert set(partitions.values()) == {PARTITION_SIZE}
    waited_ms = _waited_ms(sent, at)
    assert PROMPT_DEADLINE_MS <= waited_ms < PROMPT_DEADLINE_MS + SLACK_MS, waited_ms
    _no_abandon(handler)
