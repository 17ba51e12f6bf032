"""Leader epochs a client sends and asks about, on one node (KIP-279/320).

OffsetForLeaderEpoch (API 23) is advertised and answers the end of an epoch. A single
node does not check a client's current_leader_epoch (Fetch v9+, ListOffsets v4+,
OffsetForLeaderEpoch): its Metadata answers epoch 0 and it never changes leaders, while
a log it inherited may hold a higher epoch; the cluster tests cover FENCED_LEADER_EPOCH
and UNKNOWN_LEADER_EPOCH. With num.processes 2 the partition's shard may live in the
other process.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.core.checkpoint import LEADER_EPOCH_CHECKPOINT, write_epoch_checkpoint
from tests.broker.rawclient import (
    API_VERSIONS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    RawClient,
    fetch_values,
    read_records,
    record_batch,
)
from tests.fixtures.broker import BrokerProcess
from wire.errors import ErrorCode

pytestmark = pytest.mark.num_processes(1, 2)

OFFSET_FOR_LEADER_EPOCH = 23
UNKNOWN_EPOCH = int(ErrorCode.UNKNOWN_LEADER_EPOCH)


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.port) as c:
        yield c


def topic_with(client: RawClient, partitions: int, records: int) -> str:
    topic = f"epochs-{uuid.uuid4().hex[:8]}"
    assert client.create_topic(topic, partitions) == 0
    if records:
        batch = record_batch([(None, b"v%d" % i) for i in range(records)])
        assert client.produce(topic, 0, batch).error_code == 0
    return topic


def end_offsets(client: RawClient, topic: str, asks: list[tuple[int, int, int]],
                version: int = 4) -> list[tuple[int, int, int]]:
    """(error, leader epoch, end offset) per (partition, current epoch, epoch asked)."""
    values: dict[str, Any] = {"topics": [{"topic": topic, "partitions": [
        {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch}
        for p, current, epoch in asks]}]}
    if version >= 3:
        values["replica_id"] = -1
    response = client.call(OFFSET_FOR_LEADER_EPOCH, version, values)
    [answered] = response.topics
    assert answered.topic == topic
    assert [p.partition for p in answered.partitions] == [p for p, _, _ in asks]
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in answered.partitions]


def test_offset_for_leader_epoch_is_advertised(client: RawClient) -> None:
    response = client.call(API_VERSIONS, 3, {"client_software_name": "t",
                                             "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[OFFSET_FOR_LEADER_EPOCH] == (2, 4)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_answers_the_current_epoch_with_the_log_end(
        client: RawClient, version: int) -> None:
    topic = topic_with(client, 2, records=5)
    got = end_offsets(client, topic, [
        (0, -1, 0),   # the leader's epoch (0 on one node): the log end
        (0, 0, 0),    # the same, with the client's epoch checked
        (1, 0, 0),    # an empty partition: its end is 0
        (0, -1, 7),   # an epoch above any the log knows: undefined
        (0, -1, -1),  # no epoch asked: undefined
        (0, 1, 0),    # a newer client epoch: not checked on one node
        (9, -1, 0),   # no such partition
    ], version)
    assert got == [
        (0, 0, 5), (0, 0, 5), (0, 0, 0), (0, -1, -1), (0, -1, -1),
        (0, 0, 5), (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1, -1)]
    response = client.call(OFFSET_FOR_LEADER_EPOCH, version, {
        **({"replica_id": -1} if version >= 3 else {}),
        "topics": [{"topic": "no-such-topic-" + topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
    assert response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_leaves_the_clients_current_leader_epoch_unchecked(client: RawClient) -> None:
    topic = topic_with(client, 1, records=3)
    for epoch in (-1, 0, 1):
        values = fetch_values(topic, 0, 0)
        values["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
        part = client.call(FETCH, 11, values).responses[0].partitions[0]
        assert part.error_code == 0, epoch
        assert len(read_records(part.records or b"")) == 3
    # before v9 there is no epoch to check
    part = client.call(FETCH, 8, fetch_values(topic, 0, 0)).responses[0].partitions[0]
    assert part.error_code == 0


@pytest.mark.parametrize("version", [4, 7])
def test_list_offsets_leaves_the_clients_current_leader_epoch_unchecked(
        client: RawClient, version: int) -> None:
    topic = topic_with(client, 1, records=3)
    got = []
    for epoch in (-1, 0, 1):  # one request each: Kafka refuses a partition named twice
        response = client.call(LIST_OFFSETS, version, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "current_leader_epoch": epoch, "timestamp": -1}]}]})
        [p] = response.topics[0].partitions
        got.append((p.error_code, p.offset, p.leader_epoch))
    assert got == [(0, 3, 0), (0, 3, 0), (0, 3, 0)]



def test_a_log_inherited_at_a_higher_epoch_is_read_at_the_epoch_metadata_answers(
        tmp_path: Path) -> None:
    """A single node's log whose epoch cache holds an epoch above 0 (a directory that
    came from a cluster node): Metadata answers epoch 0, and a client sending that epoch
    reads, where an epoch check would fence it (74) on every Fetch, for good."""
    broker = BrokerProcess(tmp_path / "data", config={"num.processes": 1}).start()
    try:
        with RawClient(broker.port) as raw:
            topic = topic_with(raw, 1, records=3)
    finally:
        assert broker.stop() == 0
    write_epoch_checkpoint(tmp_path / "data" / f"{topic}-0" / LEADER_EPOCH_CHECKPOINT,
                           [(0, 0), (3, 1)])
    broker = BrokerProcess(tmp_path / "data", config={"num.processes": 1}).start()
    try:
        with RawClient(broker.port) as raw:
            [meta] = raw.call(METADATA, 9, {"topics": [{"name": topic}],
                                            "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False}
                              ).topics
            assert meta.partitions[0].leader_epoch == 0
            values = fetch_values(topic, 0, 0)
            values["topics"][0]["partitions"][0]["current_leader_epoch"] = 0
            part = raw.call(FETCH, 11, values).responses[0].partitions[0]
            assert part.error_code == 0
            assert len(read_records(part.records or b"")) == 3
            assert raw.list_offset(topic, 0, -1).leader_epoch == 3  # the log's epoch
            assert end_offsets(raw, topic, [(0, 0, 0), (0, 0, 3)]) == [(0, 0, 1), (0, 3, 3)]
    finally:
        assert broker.stop() == 0
